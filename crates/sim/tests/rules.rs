//! The simulation's copies of the Worker's rules are the Worker's: each is found, as written, in
//! the `src/` file it was copied from (whitespace and digit separators aside). A change there fails
//! here until the copy follows.

use switchyard_sim::params::*;

fn source(file: &str) -> String {
    let path = format!("{}/../../src/{file}", env!("CARGO_MANIFEST_DIR"));
    match std::fs::read_to_string(&path) {
        Ok(text) => squash(
            &text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<String>(),
        ),
        Err(e) => unreachable!("{path}: {e}"),
    }
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace() && *c != '_').collect()
}

#[test]
fn the_copied_rules_match_the_worker() {
    let health = source("health.rs");
    let billing = source("billing.rs");
    let report = source("report.rs");
    let store = source("store.rs");
    let limits = source("limits.rs");
    let outbox = source("outbox.rs");
    let expect = [
        (&health, squash("const REPORT_BATCH: Rules = switchyard_core::batch::HEALTH_REPORTS;")),
        (&billing, squash("const SETTLE_BATCH: Rules = switchyard_core::batch::SETTLEMENTS;")),
        (&health, squash(&format!("const CALL_TIMEOUT_MS: u64 = {HEALTH_TIMEOUT_MS};"))),
        (&health, squash(&format!("const ACCOUNT_TIMEOUT_MS: u64 = {ACCOUNT_TIMEOUT_MS};"))),
        (
            &health,
            squash(&format!(
                "fresh_ms, give_up_ms: CALL_TIMEOUT_MS + {}, poll_ms: {}, backoff_ms: {}, backoff_max_ms: {},",
                SNAPSHOT.give_up_ms - HEALTH_TIMEOUT_MS,
                SNAPSHOT.poll_ms,
                SNAPSHOT.backoff_ms,
                SNAPSHOT.backoff_max_ms
            )),
        ),
        (
            &report,
            squash(&format!(
                "pub const REPORT: Rules = Rules {{ fresh_ms: {}, give_up_ms: {}, poll_ms: {}, backoff_ms: {}, backoff_max_ms: {}, }};",
                STATUS_REPORT.fresh_ms,
                STATUS_REPORT.give_up_ms,
                STATUS_REPORT.poll_ms,
                STATUS_REPORT.backoff_ms,
                STATUS_REPORT.backoff_max_ms
            )),
        ),
        (&report, squash(&format!("const CALL_TIMEOUT_MS: u64 = {STATUS_TIMEOUT_MS};"))),
        (&store, squash(&format!("pub const D1_DEADLINE_MS: u64 = {D1_DEADLINE_MS};"))),
        (&store, squash(&format!("const CACHE_TTL_MS: u64 = {CACHE_TTL_MS};"))),
        (&store, squash(&format!("const KEYRING_MARGIN_MS: u64 = {KEYRING_MARGIN_MS};"))),
        (&store, squash(&format!("const REFRESH_AFTER_MS: u64 = {REFRESH_AFTER_MS};"))),
        (&billing, squash(&format!("pub const FAST_HOLD_DEFER_MS: u64 = {FAST_HOLD_DEFER_MS};"))),
        (&limits, squash(&format!("const CALL_MARGIN_MS: u64 = {};", KEY_TIMEOUT_MS - 2_000))),
        (&limits, squash(&format!("const RELEASE_TIMEOUT_MS: u64 = {RELEASE_TIMEOUT_MS};"))),
        (&limits, squash(&format!("const PERMITS_TIMEOUT_MS: u64 = {PERMITS_TIMEOUT_MS};"))),
        (&outbox, squash(&format!("const SHARDS: u64 = {OUTBOX_SHARDS};"))),
        (&outbox, squash(&format!("const KEEP_DEADLINE_MS: u64 = {OUTBOX_DEADLINE_MS};"))),
    ];
    for (text, want) in expect {
        assert!(text.contains(&want), "not in src/: {want}");
    }
    let policy = switchyard_core::catalog::Policy::default();
    assert_eq!(KEY_TIMEOUT_MS, policy.key_wait_ms + 500);
    assert_eq!(CAPACITY_TIMEOUT_MS, policy.capacity_wait_ms + 500);
    assert_eq!(BALANCE_SNAPSHOT_MS, policy.balance_snapshot_ms);
    assert_eq!(SNAPSHOT.fresh_ms, policy.health_snapshot_ms);
}
