//! `switchyard-admin`: every admin action from a terminal, against `scripts/dev` or a deployed
//! gateway (`--url`, or `SWITCHYARD_URL`; the token from `SWITCHYARD_ADMIN_TOKEN`). A catalog is
//! validated locally with the gateway's own validator before it is pushed, and the push shows what
//! changes against what is deployed and carries the version it was compared with.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};
use switchyard_core::catalog::Catalog;

#[derive(Parser)]
#[command(
    name = "switchyard-admin",
    about = "Operate a Switchyard gateway through its admin API"
)]
struct Cli {
    /// The gateway, e.g. https://switchyard.example.workers.dev
    #[arg(long, env = "SWITCHYARD_URL", default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The admin token (ADMIN_TOKEN of the Worker).
    #[arg(long, env = "SWITCHYARD_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The catalog: `get`, or `push FILE`.
    #[command(subcommand)]
    Catalog(CatalogCmd),
    /// Accounts: `create`.
    #[command(subcommand)]
    Accounts(AccountsCmd),
    /// Credit: `add ACCOUNT USD`.
    #[command(subcommand)]
    Credit(CreditCmd),
    /// API keys: `create`, `revoke`.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Route health of a model: `show`, `reset`.
    #[command(subcommand)]
    Health(HealthCmd),
    /// One request's record: `show ID --key KEY` (records belong to the key's account).
    #[command(subcommand)]
    Generation(GenerationCmd),
}

#[derive(Subcommand)]
enum CatalogCmd {
    Get,
    /// Validates FILE locally, shows what changes, then replaces the catalog (refused if it moved
    /// on since it was read).
    Push {
        file: String,
        /// Validate and show the changes only.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum AccountsCmd {
    Create {
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Subcommand)]
enum CreditCmd {
    Add { account: String, usd: f64 },
}

#[derive(Subcommand)]
enum KeysCmd {
    Create {
        #[arg(long)]
        account: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        rpm: Option<u32>,
        #[arg(long)]
        max_concurrent: Option<u32>,
        /// USD
        #[arg(long)]
        spend_limit: Option<f64>,
    },
    Revoke {
        id: String,
    },
}

#[derive(Subcommand)]
enum HealthCmd {
    Show { model: String },
    Reset { model: String },
}

#[derive(Subcommand)]
enum GenerationCmd {
    Show {
        id: String,
        #[arg(long, env = "SWITCHYARD_KEY", hide_env_values = true)]
        key: String,
    },
}

struct Api {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Api {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        self.call_as(&format!("Bearer {}", self.token), method, path, body)
    }

    fn call_as(&self, auth: &str, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base.trim_end_matches('/'));
        let builder = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("authorization", auth)
            .header("content-type", "application/json");
        let request = builder
            .body(body.map(Value::to_string).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let mut response = self.agent.run(request).map_err(|e| format!("{method} {url}: {e}"))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if (200..300).contains(&status) {
            Ok(value)
        } else {
            let message = value["error"]["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            Err(format!("{status}: {message}"))
        }
    }
}

fn by_id(list: &Value) -> Vec<(String, &Value)> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["id"].as_str().unwrap_or("").to_string(), v))
        .collect()
}

/// What pushing `new` over `old` changes, one line per provider or model (`+` added, `-` removed,
/// `~` changed), and the top-level policy.
fn diff(old: &Value, new: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for kind in ["providers", "models"] {
        let (before, after) = (by_id(&old[kind]), by_id(&new[kind]));
        for (id, v) in &after {
            match before.iter().find(|(b, _)| b == id) {
                None => lines.push(format!("+ {kind} {id}")),
                Some((_, was)) if was != v => lines.push(format!("~ {kind} {id}")),
                Some(_) => {}
            }
        }
        for (id, _) in &before {
            if !after.iter().any(|(a, _)| a == id) {
                lines.push(format!("- {kind} {id}"));
            }
        }
    }
    if old.get("policy").unwrap_or(&json!({})) != new.get("policy").unwrap_or(&json!({})) {
        lines.push("~ policy".to_string());
    }
    lines
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `GET /admin/health/{model}` as a table.
fn health_table(h: &Value) -> String {
    let mut out = format!("model {}: {}\n", cell(&h["model"]), cell(&h["status"]));
    out.push_str(&format!(
        "{:<16} {:<16} {:>8} {:>15} {:>8} {:>9}\n",
        "route", "state", "failures", "cooldown until", "success", "ttfb ms"
    ));
    for r in h["routes"].as_array().into_iter().flatten() {
        let state = match r["account_state"].as_str() {
            Some(a) if a != "healthy" => format!("{} (acct {a})", cell(&r["state"])),
            _ => cell(&r["state"]),
        };
        let until = r["breaker"]["demoted_until_ms"]
            .as_u64()
            .map(|ms| {
                let s = ms / 1000;
                format!("{:02}:{:02}:{:02} UTC", (s / 3600) % 24, (s / 60) % 60, s % 60)
            })
            .unwrap_or_else(|| "–".into());
        let success = r["stats"]["success_rate"]
            .as_f64()
            .map(|x| format!("{:.0} %", x * 100.0))
            .unwrap_or_else(|| "–".into());
        out.push_str(&format!(
            "{:<16} {:<16} {:>8} {:>15} {:>8} {:>9}\n",
            cell(&r["route"]),
            state,
            cell(&r["breaker"]["consecutive_failures"]),
            until,
            success,
            cell(&r["stats"]["median_ttfb_ms"]),
        ));
    }
    out
}

fn run(cli: Cli) -> Result<String, String> {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build();
    let api = Api {
        base: cli.url,
        token: cli.token,
        agent: ureq::Agent::new_with_config(config),
    };
    let pretty = |v: Value| serde_json::to_string_pretty(&v).unwrap_or_default();
    match cli.command {
        Command::Catalog(CatalogCmd::Get) => api.call("GET", "/admin/catalog", None).map(pretty),
        Command::Catalog(CatalogCmd::Push { file, dry_run }) => {
            let bytes = std::fs::read(&file).map_err(|e| format!("{file}: {e}"))?;
            Catalog::parse(&bytes).map_err(|e| format!("{file} is not a valid catalog: {e}"))?;
            let mut new: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
            let deployed = api.call("GET", "/admin/catalog", None)?;
            let changes = diff(&deployed, &new);
            let mut out = if changes.is_empty() {
                "no change".to_string()
            } else {
                changes.join("\n")
            };
            if !dry_run {
                new["version"] = deployed["version"].clone();
                let r = api.call("PUT", "/admin/catalog", Some(&new))?;
                out.push_str(&format!("\npushed: {r}"));
            }
            Ok(out)
        }
        Command::Accounts(AccountsCmd::Create { id, name }) => api
            .call("POST", "/admin/accounts", Some(&json!({"id": id, "name": name})))
            .map(pretty),
        Command::Credit(CreditCmd::Add { account, usd }) => api
            .call(
                "POST",
                &format!("/admin/accounts/{account}/credit"),
                Some(&json!({"amount_usd": usd})),
            )
            .map(pretty),
        Command::Keys(KeysCmd::Create {
            account,
            name,
            rpm,
            max_concurrent,
            spend_limit,
        }) => api
            .call(
                "POST",
                "/admin/keys",
                Some(&json!({"account_id": account, "name": name, "rpm": rpm,
                              "max_concurrent": max_concurrent, "spend_limit": spend_limit})),
            )
            .map(pretty),
        Command::Keys(KeysCmd::Revoke { id }) => api.call("DELETE", &format!("/admin/keys/{id}"), None).map(pretty),
        Command::Health(HealthCmd::Show { model }) => api
            .call("GET", &format!("/admin/health/{model}"), None)
            .map(|h| health_table(&h)),
        Command::Health(HealthCmd::Reset { model }) => api
            .call("POST", &format!("/admin/health/{model}/reset"), None)
            .map(pretty),
        Command::Generation(GenerationCmd::Show { id, key }) => api
            .call_as(
                &format!("Bearer {key}"),
                "GET",
                &format!("/v1/generation?id={id}"),
                None,
            )
            .map(pretty),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("switchyard-admin: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_names_what_a_push_adds_removes_and_changes() {
        let old = json!({"providers": [{"id": "a"}, {"id": "b"}], "models": [{"id": "m", "x": 1}], "version": 3});
        let new = json!({"providers": [{"id": "a"}, {"id": "c"}], "models": [{"id": "m", "x": 2}], "policy": {"x": 1}});
        assert_eq!(
            diff(&old, &new),
            vec!["+ providers c", "- providers b", "~ models m", "~ policy"]
        );
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn the_health_table_shows_each_route() {
        let h = json!({"model": "m", "status": "degraded", "routes": [
            {"route": "r0", "state": "cooling", "account_state": "healthy",
             "breaker": {"consecutive_failures": 3, "demoted_until_ms": 3_600_000},
             "stats": {"success_rate": 0.5, "median_ttfb_ms": 120}}]});
        let t = health_table(&h);
        assert!(t.contains("model m: degraded"), "{t}");
        assert!(
            t.contains("r0") && t.contains("cooling") && t.contains("01:00:00 UTC") && t.contains("50 %"),
            "{t}"
        );
    }
}
