//! `wrangler.toml` gives the Worker every ledger it says it has (SPEC §22): `LEDGER_SHARDS` is a
//! count `ledgers::count` reads as itself, and each ledger's binding (`ledgers::binding`) is a D1
//! database taking the same migrations. A binding missing would be a 500 for every account placed
//! on it; this fails first.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchyard_core::ledgers;

const WRANGLER: &str = include_str!("../../../wrangler.toml");

/// The `key = "value"` lines of each `[[d1_databases]]` table, in order.
fn d1_databases() -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = Vec::new();
    let mut inside = false;
    for line in WRANGLER.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[[d1_databases]]";
            if inside {
                out.push(Vec::new());
            }
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            let v = v.trim().trim_matches('"').to_string();
            out.last_mut().unwrap().push((k.trim().to_string(), v));
        }
    }
    out
}

#[test]
fn every_ledger_the_deployment_counts_is_bound_and_migrated() {
    let setting = WRANGLER
        .lines()
        .find_map(|l| l.trim().strip_prefix("LEDGER_SHARDS").and_then(|r| r.split_once('=')))
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
        .expect("wrangler.toml sets LEDGER_SHARDS");
    let count = ledgers::count(Some(&setting));
    assert_eq!(count.to_string(), setting, "LEDGER_SHARDS is read as what it says");
    let dbs = d1_databases();
    let field = |db: &Vec<(String, String)>, name: &str| db.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    for ledger in 0..count {
        let binding = ledgers::binding(ledger);
        let db = dbs
            .iter()
            .find(|db| field(db, "binding").as_deref() == Some(binding.as_str()))
            .unwrap_or_else(|| panic!("ledger {ledger} has no [[d1_databases]] binding {binding}"));
        assert_eq!(field(db, "migrations_dir").as_deref(), Some("migrations"), "{binding}");
    }
    let names: Vec<_> = dbs.iter().filter_map(|db| field(db, "database_name")).collect();
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), names.len(), "each ledger its own database: {names:?}");
    let ids: Vec<_> = dbs.iter().filter_map(|db| field(db, "database_id")).collect();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "each ledger its own database id: {ids:?}");
}
