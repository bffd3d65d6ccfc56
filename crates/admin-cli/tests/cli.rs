//! `switchyard-admin` drives every admin action against the real Worker (issue 16). Run by
//! `scripts/test` with the end-to-end stack: SWITCHYARD_URL, ADMIN_TOKEN, MOCK_URL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::process::Command;

use serde_json::{json, Value};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run this with scripts/test"))
}

/// Runs the CLI; (success, stdout, stderr).
fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard-admin"))
        .args(args)
        .env("SWITCHYARD_URL", env("SWITCHYARD_URL"))
        .env("SWITCHYARD_ADMIN_TOKEN", env("ADMIN_TOKEN"))
        .output()
        .expect("runs");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

fn ok(args: &[&str]) -> String {
    let (success, stdout, stderr) = cli(args);
    assert!(success, "switchyard-admin {args:?}: {stderr}");
    stdout
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn every_admin_action_from_the_command_line() {
    let n = std::process::id();
    let (account, provider, model) = (format!("cli-acct-{n}"), format!("cli-p-{n}"), format!("cli-m-{n}"));
    let dir = std::env::temp_dir().join(format!("switchyard-admin-{n}"));
    std::fs::create_dir_all(&dir).unwrap();

    // catalog get / push: the deployed catalog plus one provider and one model, validated locally.
    let mut doc = json_of(&ok(&["catalog", "get"]));
    doc.as_object_mut().unwrap().remove("version");
    doc["providers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": provider, "base_url": format!("{}/cli-{n}/ok", env("MOCK_URL")), "auth": "bearer"}));
    doc["models"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": model, "context_window": 8192, "max_output_tokens": 256,
        "routes": [{"id": "r0", "provider": provider, "upstream_model": "u", "apis": ["chat"],
                    "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}]}));
    let file = dir.join("catalog.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let dry = ok(&["catalog", "push", file, "--dry-run"]);
    assert!(
        dry.contains(&format!("+ providers {provider}")) && dry.contains(&format!("+ models {model}")),
        "{dry}"
    );
    assert!(!dry.contains("pushed"), "{dry}");
    let pushed = ok(&["catalog", "push", file]);
    assert!(pushed.contains("pushed"), "{pushed}");
    assert!(json_of(&ok(&["catalog", "get"]))["models"].to_string().contains(&model));
    let mut bad = doc.clone();
    bad["providers"][0]["base_url"] = json!("http://api.example.com/v1");
    let bad_file = dir.join("bad.json");
    std::fs::write(&bad_file, bad.to_string()).unwrap();
    let (success, _, stderr) = cli(&["catalog", "push", bad_file.to_str().unwrap()]);
    assert!(!success && stderr.contains("base_url"), "refused locally: {stderr}");

    // accounts, credit, keys.
    assert_eq!(
        json_of(&ok(&["accounts", "create", "--id", &account]))["id"],
        account.as_str()
    );
    ok(&["credit", "add", &account, "5"]);
    let key = json_of(&ok(&[
        "keys",
        "create",
        "--account",
        &account,
        "--spend-limit",
        "2",
        "--rpm",
        "100",
    ]));
    assert_eq!(key["spend_limit"], 2.0);
    let (key_id, plaintext) = (
        key["id"].as_str().unwrap().to_string(),
        key["key"].as_str().unwrap().to_string(),
    );

    // A request, then its record and the model's health.
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut r = agent
        .post(format!("{}/v1/chat/completions", env("SWITCHYARD_URL")))
        .header("authorization", format!("Bearer {plaintext}"))
        .send(json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let generation = r
        .headers()
        .get("x-generation-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let _ = r.body_mut().read_to_string();
    let record = json_of(&ok(&["generation", "show", &generation, "--key", &plaintext]));
    assert_eq!(record["outcome"], "answered");
    let table = ok(&["health", "show", &model]);
    assert!(
        table.contains("r0") && table.contains("route") && table.contains("cooldown until"),
        "{table}"
    );
    ok(&["health", "reset", &model]);

    // Revoked: the key stops working.
    ok(&["keys", "revoke", &key_id]);
    let r = agent
        .post(format!("{}/v1/chat/completions", env("SWITCHYARD_URL")))
        .header("authorization", format!("Bearer {plaintext}"))
        .send(json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 401, "a revoked key is refused");
    let (success, _, stderr) = cli(&["keys", "revoke", &key_id]);
    assert!(!success && stderr.contains("404"), "{stderr}");
}
