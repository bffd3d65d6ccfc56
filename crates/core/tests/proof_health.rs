//! Provoked stays unconfirmed at every door (SPEC §18a, issue 31 item 2): whatever one key sends —
//! failures its content can provoke (a 500 only its body triggers, an empty answer, a 403 on
//! something it named), as probes after a cooldown, after a passed recheck, as fallbacks past an
//! ended cooldown — no route or account breaker is demoted or raised a level, and no route's
//! spread weight moves. Only the model's own check, or a second key, confirms such failures.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use switchyard_core::classify::FailureClass;
use switchyard_core::health::{AttemptOutcome, Breaker, HealthConfig, ModelHealth, Observation};
use switchyard_core::spread::health_factor;
use switchyard_core::verify::{CheckKind, CheckRoute};

const MIN: u64 = 60_000;
const T0: u64 = 30_000 * MIN;
const ROUTES: [&str; 2] = ["a", "b"];
const ACCOUNT: &str = "acct";
const POISON: &str = "key-poison";

fn cfg() -> HealthConfig {
    HealthConfig {
        demote_after: 3,
        demote_after_overloaded: 1,
        cooldown_ms: 1_000,
        cooldown_max_ms: 8_000,
        recheck_ms: 250,
    }
}

/// An attempt at `route` that ended at `at`.
fn obs(route: &str, outcome: AttemptOutcome, at: u64) -> Observation {
    Observation {
        route: route.into(),
        account: ACCOUNT.into(),
        outcome,
        at_ms: at,
        stream: false,
        ttfb_ms: None,
        output_tokens: 0,
        duration_ms: 10,
        extra_try: false,
        probe: false,
        retry_after_ms: None,
        verify: false,
        key: "key-other".into(),
        provoked: false,
    }
}

/// A failure of `class` with the upstream's `status`, marked provoked as the journal marks it.
fn failure(route: &str, class: FailureClass, status: u16, key: &str, at: u64) -> Observation {
    let mut o = obs(route, AttemptOutcome::Failure(class), at);
    o.key = key.into();
    o.provoked = class.provokable(Some(status));
    o
}

/// The provokable failures one key's content can cause, with the status that makes them so.
const PROVOKABLE: [(FailureClass, u16); 3] = [
    (FailureClass::Upstream5xx, 500),
    (FailureClass::BadResponse, 200),
    (FailureClass::Account, 403),
];

/// Where the model stands before the poison: an hour of ordinary traffic from other keys (so the
/// spread's windows have something to weigh), and each route and the account demoted
/// `levels[i]` times by failures no content provokes (a 503, a 401), the way live traffic and
/// cooldown checks demote them.
#[derive(Debug, Clone)]
struct Setup {
    route_levels: [u32; 2],
    account_level: u32,
    verify: [bool; 2],
}

fn check_routes(setup: &Setup) -> Vec<CheckRoute> {
    ROUTES
        .iter()
        .zip(setup.verify)
        .map(|(id, verify)| CheckRoute {
            id: (*id).into(),
            verify,
        })
        .collect()
}

/// Builds the state; returns it and the time it was built by.
fn build(setup: &Setup) -> (ModelHealth, u64) {
    let c = cfg();
    let mut h = ModelHealth::default();
    h.know_routes(&check_routes(setup), T0 - 50 * MIN);
    for m in 0..50u64 {
        let at = T0 - (50 - m) * MIN;
        for (i, route) in ROUTES.iter().enumerate() {
            for n in 0..3 {
                h.observe(&obs(route, AttemptOutcome::Success, at + n), &c);
            }
            if (m + i as u64).is_multiple_of(4) {
                let fail = obs(route, AttemptOutcome::Failure(FailureClass::Upstream5xx), at + 10);
                h.observe(&fail, &c);
                h.observe(&obs(route, AttemptOutcome::Success, at + 20), &c);
            }
        }
    }
    let mut now = T0;
    for (i, route) in ROUTES.iter().enumerate() {
        if setup.route_levels[i] == 0 {
            continue;
        }
        for _ in 0..3 {
            now += 1;
            let mut o = obs(route, AttemptOutcome::Failure(FailureClass::Upstream5xx), now);
            o.verify = setup.verify[i];
            h.observe(&o, &c);
        }
        for _ in 1..setup.route_levels[i] {
            now = h.routes[*route].breaker.demoted_until_ms.unwrap();
            if setup.verify[i] {
                let fail = Err((FailureClass::Upstream5xx, "503".into()));
                h.record_check(route, CheckKind::Cooldown, &fail, now, true, &c);
            } else {
                assert!(h.claim_probe(route, ACCOUNT, now, 5_000));
                let mut o = obs(route, AttemptOutcome::Failure(FailureClass::Upstream5xx), now);
                o.probe = true;
                h.observe(&o, &c);
            }
        }
        assert_eq!(h.routes[*route].breaker.cooldown_level, setup.route_levels[i]);
    }
    for n in 0..setup.account_level {
        now = match h.accounts.get(ACCOUNT).and_then(|a| a.demoted_until_ms) {
            Some(until) => until.max(now + 1),
            None => now + 1,
        };
        let mut o = failure("a", FailureClass::Account, 401, "key-other", now);
        o.probe = n > 0;
        h.observe(&o, &c);
    }
    assert_eq!(
        h.accounts.get(ACCOUNT).map_or(0, |a| a.cooldown_level),
        setup.account_level
    );
    (h, now + 1)
}

/// What happens next, in any order.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes: cooldowns end, rechecks fall due.
    Wait(u64),
    /// The poisoning key's request fails at `route`. `probe`: 0 claims the probe the way a
    /// request does (a probe if granted), 1 says it was one whatever the state, 2 not one.
    Poison {
        route: usize,
        class: usize,
        probe: u8,
        extra_try: bool,
    },
    /// The model's object runs the checks that are due, and every one passes.
    Checks,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..4_000).prop_map(Step::Wait),
        (0usize..2, 0usize..3, 0u8..3, prop::bool::weighted(0.1)).prop_map(|(route, class, probe, extra_try)| {
            Step::Poison {
                route,
                class,
                probe,
                extra_try,
            }
        }),
        Just(Step::Checks),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (0u32..4, 0u32..4, 0u32..3, any::<bool>(), any::<bool>()).prop_map(|(a, b, account_level, va, vb)| Setup {
        route_levels: [a, b],
        account_level,
        verify: [va, vb],
    })
}

/// Runs one step at `now` (the time after it returned).
fn run(h: &mut ModelHealth, setup: &Setup, step: &Step, now: &mut u64) {
    let c = cfg();
    match *step {
        Step::Wait(ms) => *now += ms,
        Step::Poison {
            route,
            class,
            probe,
            extra_try,
        } => {
            *now += 1;
            let (class, status) = PROVOKABLE[class];
            let mut o = failure(ROUTES[route], class, status, POISON, *now);
            assert!(o.provoked, "{class:?} {status} is provokable");
            o.verify = setup.verify[route];
            o.extra_try = extra_try;
            o.probe = match probe {
                0 => h.claim_probe(ROUTES[route], ACCOUNT, *now, 5_000),
                1 => true,
                _ => false,
            };
            h.observe(&o, &c);
        }
        Step::Checks => {
            *now += 1;
            for (route, kind) in h.due_checks(&check_routes(setup), 0, *now) {
                if h.claim_check(&route, *now, 1_000) {
                    let verify = setup.verify[ROUTES.iter().position(|r| *r == route).unwrap()];
                    h.record_check(&route, kind, &Ok(()), *now, verify, &c);
                }
            }
        }
    }
}

/// Every breaker of the model, by name.
fn breakers(h: &ModelHealth) -> Vec<(String, Breaker)> {
    let routes = ROUTES.iter().map(|r| {
        (
            format!("route {r}"),
            h.routes.get(*r).map(|s| s.breaker.clone()).unwrap_or_default(),
        )
    });
    let account = std::iter::once((
        format!("account {ACCOUNT}"),
        h.accounts.get(ACCOUNT).cloned().unwrap_or_default(),
    ));
    routes.chain(account).collect()
}

/// No breaker was demoted or raised a level between `before` and `after`.
fn no_demotion(before: &[(String, Breaker)], after: &[(String, Breaker)], what: &str) -> Result<(), TestCaseError> {
    for ((name, b), (_, a)) in before.iter().zip(after) {
        prop_assert!(
            a.cooldown_level <= b.cooldown_level,
            "{what}: {name} rose from level {} to {}: {a:?}",
            b.cooldown_level,
            a.cooldown_level
        );
        prop_assert!(
            a.demoted_at_ms.is_none() || a.demoted_at_ms == b.demoted_at_ms,
            "{what}: {name} was demoted anew: {b:?} -> {a:?}"
        );
        prop_assert!(b.is_demoted() || !a.is_demoted(), "{what}: {name} was demoted: {a:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any sequence of one key's provokable failures — probes it won, probes after passed
    /// rechecks, fallbacks past an ended cooldown, extra tries — interleaved with waits and
    /// passed checks: no breaker level rises, nothing is demoted anew, and every route's spread
    /// weight (its health factor) is what it was without them.
    #[test]
    fn one_keys_provoked_failures_demote_nothing_and_move_no_weight(
        setup in setup(),
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let (mut h, mut now) = build(&setup);
        let baseline = h.clone();
        for (n, step) in steps.iter().enumerate() {
            let before = breakers(&h);
            run(&mut h, &setup, step, &mut now);
            no_demotion(&before, &breakers(&h), &format!("step {n} {step:?}"))?;
        }
        for route in ROUTES {
            let (ours, theirs) = (h.route_stats(route, now), baseline.route_stats(route, now));
            prop_assert_eq!((ours.recent, ours.earlier), (theirs.recent, theirs.earlier), "route {}", route);
            prop_assert_eq!(health_factor(&ours), health_factor(&theirs), "route {}", route);
        }
    }
}

/// A demoted route whose cooldown ended: `key` wins the probe and fails with a 500 only its
/// content triggers.
fn poisoned_probe(h: &mut ModelHealth, key: &str, at: u64) {
    assert!(h.claim_probe("a", ACCOUNT, at, 5_000), "the probe is due");
    let mut o = failure("a", FailureClass::Upstream5xx, 500, key, at);
    o.probe = true;
    h.observe(&o, &cfg());
}

fn demoted_once(verify: bool) -> (ModelHealth, u64) {
    build(&Setup {
        route_levels: [1, 0],
        account_level: 0,
        verify: [verify, false],
    })
}

#[test]
fn a_poisoned_probe_leaves_the_route_at_its_level_with_its_probe_due_until_a_second_key_or_a_check_confirms() {
    let (mut h, _) = demoted_once(false);
    let until = h.routes["a"].breaker.demoted_until_ms.unwrap();
    poisoned_probe(&mut h, POISON, until);
    let b = &h.routes["a"].breaker;
    assert_eq!((b.cooldown_level, b.demoted_until_ms), (1, Some(until)), "{b:?}");
    assert!(b.confirm_pending && b.probe_due(until + 1), "{b:?}");
    // The same key again: still nothing (indefinitely).
    poisoned_probe(&mut h, POISON, until + 2);
    assert_eq!(h.routes["a"].breaker.cooldown_level, 1);
    // A second key's failure at the next probe confirms: demoted again, a level up.
    poisoned_probe(&mut h, "key-2", until + 3);
    let b = &h.routes["a"].breaker;
    assert_eq!((b.cooldown_level, b.demoted_at_ms), (2, Some(until + 3)), "{b:?}");

    // Or the model's own check confirms it.
    let (mut h, _) = demoted_once(false);
    let until = h.routes["a"].breaker.demoted_until_ms.unwrap();
    poisoned_probe(&mut h, POISON, until);
    let routes = [CheckRoute {
        id: "a".into(),
        verify: false,
    }];
    assert_eq!(
        h.due_checks(&routes, 0, until + 1),
        vec![("a".to_string(), CheckKind::Confirm)]
    );
    let fail = Err((FailureClass::Upstream5xx, "500".into()));
    h.record_check("a", CheckKind::Confirm, &fail, until + 1, false, &cfg());
    assert_eq!(h.routes["a"].breaker.cooldown_level, 2, "confirmed by its check");
    // A passed check clears the run: the probe stays due for live traffic, no check pending.
    let (mut h, _) = demoted_once(false);
    poisoned_probe(&mut h, POISON, until);
    h.record_check("a", CheckKind::Confirm, &Ok(()), until + 1, false, &cfg());
    let b = &h.routes["a"].breaker;
    assert!(
        !b.confirm_pending && b.probe_due(until + 2) && b.cooldown_level == 1,
        "{b:?}"
    );
    assert!(h.due_checks(&routes, 0, until + 2).is_empty());
    h.observe(&obs("a", AttemptOutcome::Success, until + 3), &cfg());
    assert!(
        !h.routes["a"].breaker.is_demoted(),
        "another key's probe brings it back"
    );
}

#[test]
fn after_a_passed_recheck_the_poisoned_live_probe_demotes_nothing() {
    let (mut h, now) = demoted_once(true);
    let routes = [CheckRoute {
        id: "a".into(),
        verify: true,
    }];
    let recheck = h.routes["a"].breaker.recheck_at_ms.unwrap().max(now);
    assert_eq!(
        h.due_checks(&routes, 0, recheck),
        vec![("a".to_string(), CheckKind::Recheck)]
    );
    h.record_check("a", CheckKind::Recheck, &Ok(()), recheck, true, &cfg());
    poisoned_probe(&mut h, POISON, recheck + 1);
    let b = &h.routes["a"].breaker;
    assert_eq!(b.cooldown_level, 1, "{b:?}");
    assert!(b.probe_due(recheck + 2), "{b:?}");
}

#[test]
fn one_keys_provoked_failures_are_not_in_the_routes_stats_until_a_second_key_confirms_them() {
    let (mut h, now) = build(&Setup {
        route_levels: [0, 0],
        account_level: 0,
        verify: [false, false],
    });
    let before = h.route_stats("a", now + 100);
    for n in 0..20 {
        h.observe(&failure("a", FailureClass::Upstream5xx, 500, POISON, now + n), &cfg());
        // Other keys' requests succeed in between (the run is never two keys long).
        h.observe(&obs("a", AttemptOutcome::Success, now + n), &cfg());
    }
    let after = h.route_stats("a", now + 100);
    assert_eq!(after.recent.failed, before.recent.failed, "{after:?}");
    assert_eq!(health_factor(&after), health_factor(&before));
    // Two keys' in one run are confirmed, and count.
    h.observe(&failure("a", FailureClass::Upstream5xx, 500, POISON, now + 30), &cfg());
    h.observe(&failure("a", FailureClass::Upstream5xx, 500, "key-2", now + 31), &cfg());
    assert_eq!(h.route_stats("a", now + 100).recent.failed, before.recent.failed + 1);
}
