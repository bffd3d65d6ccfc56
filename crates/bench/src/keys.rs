//! `switchyard-bench keys`: what a key lookup and the admin API cost, measured from outside, for
//! scripts/bench-keys (issue 33: "1M keys and 100k accounts keep lookups and the admin API within
//! their usual time"). It runs once on empty databases and once after scripts/bench-keys filled
//! them; the script compares the two.
//!
//! Each sample is one account's life, every call timed on its own: `POST /admin/accounts`, its
//! credit, `POST /admin/keys`, `GET /admin/accounts/{id}`; then the new key's first request (a key
//! no isolate has cached: the lookup in its ledger, then the credits read), a chat request on the
//! awaited path (the key cached now: the balance read and the atomic hold), a key of the minted
//! shape no one holds (one lookup, then remembered), and `DELETE /admin/keys/{id}` (every ledger
//! asked). The accounts made are reported with their ledgers, so the filler knows which database
//! file is which ledger.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::http::{Call, Client, Url};
use crate::stats::Pct;
use crate::{json_headers, machine_info, need, unique, Admin, Opts};

/// The timed operations, in the order a sample makes them.
const OPS: [&str; 8] = [
    "create_account",
    "credit",
    "create_key",
    "get_account",
    "first_request_credits",
    "chat_awaited",
    "unknown_key",
    "revoke_key",
];

pub fn run(o: &Opts) -> Result<(), String> {
    let gw = Url::parse(need(&o.gateway, "--gateway")?)?;
    let mock = need(&o.mock, "--mock")?.trim_end_matches('/').to_string();
    let samples = o.requests;
    if samples == 0 {
        return Err("--requests (samples) must be at least 1".into());
    }
    let mut admin = Admin {
        base: gw.clone(),
        token: need(&o.admin_token, "--admin-token")?.to_string(),
        client: Client::new(Duration::from_secs(60)),
    };
    let model = admin.mock_model(&mock, &unique("sykeys"), "m", "ok", "chat")?;

    let mut client = Client::new(Duration::from_secs(60));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); OPS.len()];
    let mut accounts = Map::new();
    let mut timed = |i: usize, ms: f64| times[i].push(ms);
    for n in 0..samples {
        let t = admin.timed("POST", "/admin/accounts", json!({}), 201)?;
        timed(0, t.0);
        let id = t.1["id"].as_str().ok_or("no account id")?.to_string();
        accounts.insert(id.clone(), t.1["ledger"].clone());
        timed(
            1,
            admin
                .timed(
                    "POST",
                    &format!("/admin/accounts/{id}/credit"),
                    json!({"amount_usd": 1}),
                    200,
                )?
                .0,
        );
        let (ms, k) = admin.timed("POST", "/admin/keys", json!({"account_id": id}), 201)?;
        timed(2, ms);
        let key = k["key"].as_str().ok_or("no key")?.to_string();
        let key_id = k["id"].as_str().ok_or("no key id")?.to_string();
        timed(
            3,
            admin
                .timed("GET", &format!("/admin/accounts/{id}"), Value::Null, 200)?
                .0,
        );
        timed(4, sent(&mut client, get(&gw, "/v1/credits", &key), 200)?);
        let body = json!({"model": model, "messages": [{"role": "user", "content": "Say hello"}]});
        let chat = Call::post_json(gw.join("/v1/chat/completions"), json_headers(Some(&key)), &body, false);
        timed(5, sent(&mut client, chat, 200)?);
        timed(
            6,
            sent(&mut client, get(&gw, "/v1/credits", &stranger(n, &model)), 401)?,
        );
        timed(
            7,
            admin
                .timed("DELETE", &format!("/admin/keys/{key_id}"), Value::Null, 200)?
                .0,
        );
    }
    let ops: Map<String, Value> = OPS
        .iter()
        .zip(&times)
        .map(|(op, t)| (op.to_string(), Pct::of(t).to_json()))
        .collect();
    let result = json!({
        "mode": "keys",
        "label": o.label,
        "gateway": gw.to_string(),
        "machine": machine_info(),
        "samples": samples,
        "ops": ops,
        "accounts": accounts,
    });
    if let Some(path) = &o.json {
        let text = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{path}: {e}"))?;
    }
    for (op, t) in OPS.iter().zip(&times) {
        let p = Pct::of(t);
        println!("{op:>22}: p50 {:7.2} ms  p99 {:7.2} ms  (n {})", p.p50, p.p99, p.n);
    }
    Ok(())
}

fn get(gw: &Url, path: &str, key: &str) -> Call {
    Call {
        method: "GET",
        url: gw.join(path),
        headers: json_headers(Some(key)),
        body: Vec::new(),
        sse: false,
    }
}

/// A call's time, when it got the status wanted.
fn sent(client: &mut Client, call: Call, want: u16) -> Result<f64, String> {
    let t = client.send(&call).map_err(|e| format!("{}: {e}", call.url))?;
    if t.status != want {
        return Err(format!(
            "{}: status {} (wanted {want}): {}",
            call.url,
            t.status,
            String::from_utf8_lossy(&t.body)
        ));
    }
    Ok(t.total_ms)
}

/// A key of the minted shape (ledger 0, its checksum holding) that no account has: different for
/// every sample and run, so each is one lookup.
fn stranger(n: usize, label: &str) -> String {
    let mut random = [0u8; 32];
    for (i, b) in format!("{label}:{n}").bytes().enumerate() {
        random[i % 32] = random[i % 32].wrapping_mul(31).wrapping_add(b);
    }
    switchyard_core::keys::mint_key(&random, 0)
}
