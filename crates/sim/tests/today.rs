//! Short simulations of the design before the health shards (`Design::Direct`, main until session
//! 17; a few simulated seconds each, fast in a debug build): the model reproduces that design's
//! ceilings, every request and call is accounted for, a seed fixes
//! the report, and the core's batching and flight types bound each isolate's calls as the Worker's
//! do.

use switchyard_sim::params::Params;
use switchyard_sim::scenarios::{one_model, overall, route_down, without_d1};
use switchyard_sim::stores::{Class, Kind};
use switchyard_sim::{run, Report, ServiceTimes};

/// A short run of the design as it was then: no desks (session 23) or keyrings (session 24) either.
fn short(p: Params) -> Params {
    Params {
        warmup_ms: 2_000,
        measure_ms: 3_000,
        desk_from_per_s: 0,
        keyrings: false,
        ..p
    }
}

fn load(r: &Report, class: Class) -> f64 {
    r.store(class).map_or(0.0, |s| s.load)
}

/// Today a model's object takes ≤ `I` snapshots/s and ≤ min(R, 5·I) observes/s, each writing the
/// whole `ModelHealth`: at I = 300 it saturates at a few hundred requests/s on one model.
#[test]
fn todays_model_object_saturates_between_250_and_1000_req_s_on_one_model() {
    let at = |rate: f64| run(short(without_d1(one_model(rate, 300))));
    let (low, high) = (at(250.0), at(1_000.0));
    assert!(
        load(&low, Class::Model) < 1.0,
        "250 req/s: load {}",
        load(&low, Class::Model)
    );
    assert!(
        load(&high, Class::Model) > 1.0,
        "1,000 req/s: load {}",
        load(&high, Class::Model)
    );
    for r in [&low, &high] {
        let snapshots = r.window_rate(Class::Model, Some(Kind::Snapshot));
        let observes = r.window_rate(Class::Model, Some(Kind::Observe));
        assert!(
            snapshots <= 300.0 * 1.1,
            "{} req/s: {snapshots} snapshots/s > I",
            r.rate
        );
        let bound = r.rate.min(5.0 * 300.0);
        assert!(
            observes <= bound * 1.1,
            "{} req/s: {observes} observes/s > min(R, 5·I)",
            r.rate
        );
    }
}

/// One D1 database for the deployment: ≈ 4 calls per request at I = 300 (key, catalog and balance
/// reads that the isolates' 5 s caches rarely spare, the hold, the settlement batch).
#[test]
fn todays_d1_saturates_between_400_and_1400_req_s() {
    let at = |rate: f64| {
        run(short(Params {
            hot_share: 0.05,
            ..overall(rate, 300)
        }))
    };
    let (low, high) = (at(400.0), at(1_400.0));
    assert!(
        load(&low, Class::D1) < 1.0,
        "400 req/s: D1 load {}",
        load(&low, Class::D1)
    );
    assert!(
        load(&high, Class::D1) > 1.0,
        "1,400 req/s: D1 load {}",
        load(&high, Class::D1)
    );
    assert!(high.totals.refused > 0, "a saturated D1 refuses requests (503)");
}

/// The `accounts` object is one for the deployment: its load grows with the total rate and `I`.
#[test]
fn the_accounts_object_load_grows_with_isolates() {
    let at = |i: usize| run(short(without_d1(one_model(300.0, i))));
    let (few, many) = (at(30), at(1_000));
    let (a, b) = (
        few.window_rate(Class::Accounts, None),
        many.window_rate(Class::Accounts, None),
    );
    assert!(b > 1.5 * a, "accounts calls/s at I = 30: {a}, at I = 1,000: {b}");
}

/// Every request ends, every call issued was served or refused, every settlement was written,
/// kept by the outbox or counted lost — under a saturated D1 too.
#[test]
fn every_request_and_call_is_accounted_for() {
    for p in [
        short(one_model(300.0, 100)),
        short(Params {
            hot_share: 0.05,
            ..overall(2_000.0, 300)
        }),
    ] {
        let r = run(p);
        let o = &r.outcomes;
        assert_eq!(r.totals.unfinished_events, 0, "the run drained");
        assert_eq!(
            (r.totals.finished, o.unfinished),
            (r.totals.requests, 0),
            "every request ended"
        );
        assert_eq!(r.calls_issued(), r.calls_offered, "every call reached its store");
        assert_eq!(r.calls_offered, r.calls_served + r.calls_refused);
        assert_eq!(o.unsettled, 0);
        assert_eq!(o.settled + o.outboxed + o.lost + o.unrecorded, r.totals.requests);
        assert!(r.totals.requests > 1_000);
    }
}

#[test]
fn the_same_seed_gives_the_same_report_and_another_seed_another() {
    let p = short(route_down(500.0, 50));
    let a = run(p.clone());
    assert_eq!(a, run(p.clone()));
    assert_ne!(a, run(Params { seed: 2, ..p }));
}

/// The core's `Flight` and `Batches` as the Worker drives them: an isolate makes ≤ 1 snapshot call
/// per object per second and — while its reports fit a batch (≤ 64 per 200 ms) — ≤ 5 observe calls
/// per object per second; its settlements go in batches (up to 16 in 10 ms), not one per request.
#[test]
fn an_isolates_calls_are_bounded_by_its_flights_and_batches() {
    let isolates = 10;
    let r = run(short(Params {
        service: ServiceTimes::instant(),
        ..one_model(2_000.0, isolates)
    }));
    let i = isolates as f64;
    let snapshots = r.window_rate(Class::Model, Some(Kind::Snapshot));
    let observes = r.window_rate(Class::Model, Some(Kind::Observe));
    let settles = r.window_rate(Class::D1, Some(Kind::D1Settle));
    assert!(
        snapshots <= i * 1.05,
        "{snapshots} snapshot calls/s from {isolates} isolates"
    );
    assert!(
        observes <= 5.0 * i * 1.05,
        "{observes} observe calls/s from {isolates} isolates"
    );
    assert!(
        observes >= 4.0 * i,
        "{observes} observe calls/s: 200 req/s per isolate, a batch every 200 ms"
    );
    assert!(
        settles < 2_000.0 / 1.5,
        "{settles} settlement batches/s for 2,000 settlements/s"
    );
}

/// The route-down drill: today a demotion reaches the isolates through their own failures and
/// the model object's answers; 99 % of isolates see it within ≈ 1–2 s (SPEC §22 states ≈ 1.2 s).
#[test]
fn a_demotion_reaches_99_percent_of_isolates_within_two_seconds() {
    let r = run(Params {
        measure_ms: 5_000,
        ..route_down(1_000.0, 300)
    });
    let down_at = r
        .totals
        .object_demoted_ms
        .zip(Some(3_000 + 1_000))
        .map(|(at, down)| at - down);
    assert!(
        down_at.is_some_and(|ms| ms < 500),
        "the object demoted the route {down_at:?} ms after it went down"
    );
    let p99 = r.demotion_reach_ms(0.99);
    assert!(p99.is_some_and(|ms| ms <= 2_000), "99 % reached after {p99:?} ms");
    let p50 = r.demotion_reach_ms(0.5);
    assert!(
        p50.is_some_and(|ms| ms >= 100),
        "not at once: half the isolates after {p50:?} ms"
    );
}

/// Under 2× overload a model object is issued no more calls than a working store would be
/// offered for the same arrivals (flights back off, failed report batches rejoin the next).
#[test]
fn a_saturated_model_object_is_issued_no_more_calls_than_offered() {
    // ≈ 2× the ≈ 500 req/s at which its load reaches 100 % at I = 300.
    let p = short(without_d1(one_model(1_000.0, 300)));
    let offered = run(Params {
        service: ServiceTimes::instant(),
        ..p.clone()
    });
    let loaded = run(p);
    assert!(
        load(&loaded, Class::Model) > 1.0,
        "the drill saturates it: {}",
        load(&loaded, Class::Model)
    );
    let count = |r: &Report| -> u64 {
        r.totals
            .issued
            .iter()
            .filter(|((c, _), _)| *c == Class::Model)
            .map(|(_, n)| *n)
            .sum()
    };
    let (o, i) = (count(&offered), count(&loaded));
    assert!(i as f64 <= 1.1 * o as f64, "{i} calls issued against {o} offered");
}

/// A batch that fills is sent at once, and the next one waits for its own first item's time
/// (core `Batches::take`): at 3,200 reports/s on one isolate the model object gets about one
/// `observe` call per 64 reports, and D1 one settlement batch per 16 — before the fix the first
/// flusher of each full batch also sent the next one early, half full (≈ 140 and 430 calls/s).
#[test]
fn a_full_batch_leaves_the_next_one_to_fill() {
    let r = run(short(Params {
        service: ServiceTimes::instant(),
        ..one_model(3_200.0, 1)
    }));
    let observes = r.window_rate(Class::Model, Some(Kind::Observe));
    let settles = r.window_rate(Class::D1, Some(Kind::D1Settle));
    eprintln!("{observes} observe calls/s, {settles} settlement batches/s at 3,200 req/s on one isolate");
    assert!(
        observes <= 3_200.0 / 64.0 * 1.3,
        "{observes} observe calls/s for 3,200 reports/s"
    );
    assert!(
        settles <= 3_200.0 / 16.0 * 1.3,
        "{settles} settlement batches/s for 3,200 settlements/s"
    );
}
