//! Generation records out of D1 (SPEC §22): each is kept by the records object its id names and
//! found there by `GET /v1/generation`; D1 keeps the money only — the ledger charge (with its
//! model) or, for a settlement that charged nothing, a `settled` mark. A record its object will
//! not take goes to D1's `generations` table and is found there; the retention run deletes old
//! marks and old rows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, fast_policy, route, unique, Stack};

/// A model over one mock scenario per route, named `prefix…`; returns its id.
fn model(s: &Stack, prefix: &str, scenarios: &[&str]) -> String {
    let routes: Vec<Value> = scenarios
        .iter()
        .enumerate()
        .map(|(i, sc)| {
            route(
                &format!("r{i}"),
                &s.mock_provider(&unique("l"), sc, false),
                "u",
                json!({}),
            )
        })
        .collect();
    let id = format!("{prefix}{}", unique("m"));
    let doc = json!({"context_window": 8192, "max_output_tokens": 256, "policy": fast_policy(), "routes": routes});
    let r = s.admin("PUT", &format!("/admin/models/{id}"), Some(doc));
    assert_eq!(r.status, 200, "{}", r.text());
    id
}

/// The account's D1 rows once nothing is held any more: `generations` rows, ledger charges as
/// (generation id, model), and `settled` marks among `ids`.
fn d1_rows(s: &Stack, key: &str, ids: &[String]) -> (u64, Vec<(String, String)>, Vec<String>) {
    let account = s.settled_credits(key, 20)["account_id"].as_str().unwrap().to_string();
    let db = s.ledger_db(key);
    let s = Stack::from_env(); // fresh connections after `wrangler d1 execute`
    let generations = s.d1_query(
        &db,
        &format!("SELECT COUNT(*) AS n FROM generations WHERE account_id = '{account}'"),
    )[0]["n"]
        .as_u64()
        .unwrap();
    let charges = s
        .d1_query(
            &db,
            &format!(
                "SELECT generation_id, model FROM ledger WHERE account_id = '{account}' AND kind = 'charge' \
             ORDER BY generation_id"
            ),
        )
        .iter()
        .map(|r| {
            (
                r["generation_id"].as_str().unwrap().to_string(),
                r["model"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let list = ids.iter().map(|i| format!("'{i}'")).collect::<Vec<_>>().join(", ");
    let marks = s
        .d1_query(
            &db,
            &format!("SELECT generation_id FROM settled WHERE generation_id IN ({list}) ORDER BY generation_id"),
        )
        .iter()
        .map(|r| r["generation_id"].as_str().unwrap().to_string())
        .collect();
    (generations, charges, marks)
}

fn id_of(r: &switchyard_e2e::Reply) -> String {
    r.header("x-generation-id").expect("x-generation-id").to_string()
}

#[test]
fn records_leave_d1_and_are_found_by_their_id() {
    let s = Stack::from_env();
    let ok = model(&s, "", &["ok"]);
    let failing = model(&s, "", &["status/500"]);
    let key = s.new_key(1.0);
    let answered: Vec<String> = [false, true]
        .into_iter()
        .map(|stream| {
            let r = s.chat(&key, &chat_body(&ok, stream));
            assert_eq!(r.status, 200, "{}", r.text());
            let _ = r.text();
            id_of(&r)
        })
        .collect();
    let r = s.chat(&key, &chat_body(&failing, false));
    assert!(r.status >= 500, "{}", r.text());
    let failed = id_of(&r);
    for (id, outcome) in [
        (&answered[0], "answered"),
        (&answered[1], "answered"),
        (&failed, "failed"),
    ] {
        let g = s.generation(&key, id);
        assert_eq!(
            (g["id"].as_str(), g["outcome"].as_str()),
            (Some(id.as_str()), Some(outcome)),
            "{g}"
        );
    }
    let stranger = s.new_key(1.0);
    let r = s.request(
        "GET",
        &format!("{}/v1/generation?id={}", s.gateway, answered[0]),
        &[("authorization", &format!("Bearer {stranger}"))],
        None,
    );
    assert_eq!(r.status, 404, "another account's record is not found: {}", r.text());

    let all: Vec<String> = answered.iter().chain([&failed]).cloned().collect();
    let (generations, charges, marks) = d1_rows(&s, &key, &all);
    assert_eq!(generations, 0, "no generation row in D1");
    let mut want: Vec<(String, String)> = answered.iter().map(|id| (id.clone(), ok.clone())).collect();
    want.sort();
    assert_eq!(charges, want, "one charge per answer, with its model");
    assert_eq!(
        marks,
        vec![failed],
        "the settlement that charged nothing is marked; charges prove the rest"
    );
}

#[test]
fn records_an_object_that_throws_sends_them_to_d1_where_they_are_found_and_then_retired() {
    let s = Stack::from_env();
    let ok = model(&s, "fault-records-throw-", &["ok"]);
    let failing = model(&s, "fault-records-throw-", &["status/500"]);
    let key = s.new_key(1.0);
    let r = s.chat(&key, &chat_body(&ok, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let answered = id_of(&r);
    let r = s.chat(&key, &chat_body(&failing, false));
    assert!(r.status >= 500, "{}", r.text());
    let failed = id_of(&r);
    for id in [&answered, &failed] {
        let g = s.generation(&key, id);
        assert_eq!(g["id"].as_str(), Some(id.as_str()), "found in D1: {g}");
    }
    let ids = [answered.clone(), failed.clone()];
    let (generations, _, marks) = d1_rows(&s, &key, &ids);
    assert_eq!(generations, 2, "both records went to D1");
    assert_eq!(marks, vec![failed.clone()]);

    // Aged past their keeping, as the cron would find them: the record 32 days, the mark 9.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let db = s.ledger_db(&key);
    let s = Stack::from_env();
    s.d1_execute(
        &db,
        &format!(
            "UPDATE generations SET created_at = {} WHERE id = '{answered}'",
            now - 32 * 86_400_000
        ),
    );
    s.d1_execute(
        &db,
        &format!(
            "UPDATE settled SET created_at = {} WHERE generation_id = '{failed}'",
            now - 9 * 86_400_000
        ),
    );
    let s = Stack::from_env();
    s.trigger_cron();
    let s = Stack::from_env();
    let left = |sql: &str| s.d1_query(&db, sql)[0]["n"].as_u64().unwrap();
    assert_eq!(
        left(&format!(
            "SELECT COUNT(*) AS n FROM generations WHERE id = '{answered}'"
        )),
        0,
        "a 32-day-old row is deleted"
    );
    assert_eq!(
        left(&format!("SELECT COUNT(*) AS n FROM generations WHERE id = '{failed}'")),
        1,
        "a fresh one is kept"
    );
    assert_eq!(
        left(&format!(
            "SELECT COUNT(*) AS n FROM settled WHERE generation_id = '{failed}'"
        )),
        0,
        "a 9-day-old mark is deleted"
    );
}
