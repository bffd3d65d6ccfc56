//! Test faults: every failure drill of the end-to-end suite, and nothing else, lives here. A drill
//! makes the Worker fail as production sometimes does but a test cannot provoke on demand — D1
//! down, slow or losing a reply, an object that hangs or throws, a writer or slot holder that dies,
//! a client that leaves, history hours old — and the test instruments ride the same switch
//! (per-object call counts, `x-switchyard-isolate`, `x-switchyard-calls`, `GET /__test/calls`).
//!
//! One value, [`Faults`], read once per request by [`Faults::read`] (the switch and the
//! request's `x-switchyard-test-fault` header, [`HEADER`]) and handed on (`RequestCtx`,
//! `proxy::Call`, `finish::Record`, settlement); what no request header reaches — the store, a
//! Durable Object's own call, the objects themselves — reads the switch alone ([`Faults::of`]).
//! The modules ask the value (`d1_down`, `leaks_slots`, `settle_batch`, …): the names that
//! trigger a drill are matched here only.
//!
//! Out of production twice: compiled out of release builds (`cfg!(debug_assertions)`: every
//! check is a constant there, and no drill's name, header or label is left in the release wasm),
//! and off unless the Worker var `SWITCHYARD_TEST_FAULTS` is `1`, which only `scripts/test` sets
//! (`scripts/build` refuses a deployable config that sets it).
//!
//! The drills, by trigger:
//! - the header `d1-down`: the request's catalog and key reads find D1 down; `depart-<ms>`: the
//!   client counts as gone `<ms>` after the request began (what a departed client's aborted
//!   signal does, which `wrangler dev` never delivers); `past-<ms>`: route health learns of the
//!   request as if it had happened `<ms>` ago; `abandon-<ms>`: the handler stops waiting for its
//!   request after `<ms>` (what the runtime does to a departed client's handler);
//!   `slow-report-<ms>`: a status report the request builds takes `<ms>` longer;
//! - an account id: `d1-outage-<from ms>-<until ms>[-…]` / `d1-slow-<from>-<until>[-…]`: its money
//!   statements fail / take 5 s each between those times; `hold-reply-lost…`: D1 applies its
//!   hold and the answer never comes; `fault-settle-writer-dies…`: its settlements are batched
//!   apart; `…-unreadable`: a settlement the outbox keeps is stored in a shape no code reads;
//! - a model id: `fault-leak-slots`: its slots are neither renewed nor given back;
//!   `fault-settle-writer-dies`: (for such an account) its settlement's writer dies holding the
//!   batch; `fault-health-hang` / `fault-health-throw`: its health object hangs or throws;
//!   `fault-records-throw`: the records objects throw on its records and pins.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;

use futures_util::future::select;
use switchyard_core::batch::Rules;
use switchyard_core::ApiError;
use worker::{Env, Request};

use crate::runtime::clock::{now_ms, sleep};

/// The request header that asks for a drill (and carries an object's drill to the object).
const HEADER: &str = "x-switchyard-test-fault";

/// How long each statement takes in the `d1-slow-…` drill.
const SLOW_STATEMENT_MS: u64 = 5_000;
/// How long a hanging object hangs (past every caller's deadline).
const HANG_MS: u64 = 5_000;

thread_local! {
    static SWITCH: Cell<Option<bool>> = const { Cell::new(None) };
}

/// The isolate's switch: a debug build with `SWITCHYARD_TEST_FAULTS=1`. Read once per isolate.
fn switch(env: &Env) -> bool {
    if !cfg!(debug_assertions) {
        return false;
    }
    SWITCH.with(|c| {
        if let Some(on) = c.get() {
            return on;
        }
        let on = env.var("SWITCHYARD_TEST_FAULTS").is_ok_and(|v| v.to_string() == "1");
        c.set(Some(on));
        on
    })
}

/// The drills of one request, or of work no request header reaches. Inert in production.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// The switch is on.
    on: bool,
    /// The drill the header asked for.
    asked: Option<Asked>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Asked {
    D1Down,
    /// Gone at this time (ms since the epoch).
    DepartAt(u64),
    Past(u64),
    Abandon(u64),
    SlowReport(u64),
    Object(ObjectDrill),
}

/// A drill a Durable Object plays on itself, sent to it in [`HEADER`] (`object::call`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ObjectDrill {
    /// The health object hangs for [`HANG_MS`].
    Hang,
    /// The health object throws.
    Throw,
    /// The outbox keeps the settlement as a later deploy might have written it, in a shape this
    /// code cannot read.
    Unreadable,
}

impl ObjectDrill {
    /// The header that carries `drill` to the object, if any (never in a release build).
    pub fn header(drill: Option<ObjectDrill>) -> Option<(&'static str, &'static str)> {
        match drill {
            Some(drill) if cfg!(debug_assertions) => Some((HEADER, drill.as_str())),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ObjectDrill::Hang => "hang",
            ObjectDrill::Throw => "throw",
            ObjectDrill::Unreadable => "unreadable",
        }
    }
}

/// Where a settlement is batched ([`Faults::settle_batch`]).
pub struct SettleBatch {
    /// The batch key: `""`, the isolate's shared batch, but for the writer-dies drill's accounts.
    pub key: String,
    pub rules: Rules,
    /// The writer-dies drill: this settlement's writer dies holding the batch (its riders must
    /// not lose theirs).
    pub writer_dies: bool,
}

impl Faults {
    /// The switch, and the drill `req`'s [`HEADER`] asks for: read once, when the request (or an
    /// object's call) arrives.
    pub fn read(req: &Request, env: &Env) -> Faults {
        let on = switch(env);
        let asked = on
            .then(|| req.headers().get(HEADER).ok().flatten())
            .flatten()
            .and_then(|v| parse(&v, now_ms()));
        Faults { on, asked }
    }

    /// No drill, whatever the switch: for work that has none.
    pub const fn none() -> Faults {
        Faults { on: false, asked: None }
    }

    /// The switch alone, for work no request header reaches.
    pub fn of(env: &Env) -> Faults {
        Faults {
            on: switch(env),
            asked: None,
        }
    }

    /// The test instruments are on: per-object call counts (`crate::calls`), the
    /// `x-switchyard-isolate` and `x-switchyard-calls` response headers, `GET /__test/calls`.
    pub fn instruments(&self) -> bool {
        self.on()
    }

    /// The switch; a constant `false` in a release build, so that every check below, and the
    /// drill names it matches, are compiled out of it.
    fn on(&self) -> bool {
        if cfg!(debug_assertions) {
            self.on
        } else {
            false
        }
    }

    /// The drill the header asked for; a constant `None` in a release build.
    fn asked(&self) -> Option<Asked> {
        if cfg!(debug_assertions) {
            self.asked
        } else {
            None
        }
    }

    // ---- the request's header --------------------------------------------------------------

    /// `d1-down`: the request's catalog and key reads find D1 down (`Store::with_faults`).
    pub fn d1_down(&self) -> bool {
        self.asked() == Some(Asked::D1Down)
    }

    /// Resolves when the client has left: `gone` (its aborted signal), or, in the `depart-<ms>`
    /// drill, `<ms>` after the request began, whichever comes first.
    pub async fn departed(&self, gone: impl Future<Output = ()>) {
        match self.asked() {
            Some(Asked::DepartAt(at_ms)) => {
                let _ = select(pin!(gone), pin!(sleep(at_ms.saturating_sub(now_ms())))).await;
            }
            _ => gone.await,
        }
    }

    /// `at_ms` as route health learns of it: `<ms>` earlier in the `past-<ms>` drill.
    pub fn dated(&self, at_ms: u64) -> u64 {
        match self.asked() {
            Some(Asked::Past(ms)) => at_ms.saturating_sub(ms),
            _ => at_ms,
        }
    }

    /// The handler's wait for `served`; in the `abandon-<ms>` drill given up after `<ms>` (a 500,
    /// `drill_abandoned`), so a test can check the request still finishes without the handler.
    /// (The drill's wait is `cfg`'d out of a release build: a state of an async fn is kept even
    /// where it cannot be reached.)
    pub async fn handler_waits<T>(&self, served: impl Future<Output = T>) -> Result<T, ApiError> {
        #[cfg(debug_assertions)]
        if let Some(Asked::Abandon(ms)) = self.asked() {
            use futures_util::future::Either;
            return match select(pin!(served), pin!(sleep(ms))).await {
                Either::Left((served, _)) => Ok(served),
                Either::Right(_) => Err(ApiError::Internal {
                    label: "drill_abandoned",
                }),
            };
        }
        Ok(served.await)
    }

    /// Before a status report is built: `<ms>` more in the `slow-report-<ms>` drill.
    pub async fn before_report(&self) {
        if let Some(Asked::SlowReport(ms)) = self.asked() {
            sleep(ms).await;
        }
    }

    // ---- the objects -------------------------------------------------------------------------

    /// The drill to send to health object `name`: its model's id has `fault-health-hang` or
    /// `fault-health-throw`.
    pub fn health_object(&self, name: &str) -> Option<ObjectDrill> {
        if !self.on() {
            return None;
        }
        [
            ("fault-health-hang", ObjectDrill::Hang),
            ("fault-health-throw", ObjectDrill::Throw),
        ]
        .into_iter()
        .find(|(n, _)| name.contains(n))
        .map(|(_, drill)| drill)
    }

    /// The drill to send to a records object with a record of `model`: `fault-records-throw`.
    pub fn records_object(&self, model: &str) -> Option<ObjectDrill> {
        (self.on() && model.contains("fault-records-throw")).then_some(ObjectDrill::Throw)
    }

    /// The drill to send to the outbox with a settlement of `account`: its id ends `-unreadable`.
    pub fn outbox(&self, account: &str) -> Option<ObjectDrill> {
        (self.on() && account.ends_with("-unreadable")).then_some(ObjectDrill::Unreadable)
    }

    /// In the object that got the call: hangs or throws, if the call asks.
    pub async fn in_object(&self) -> worker::Result<()> {
        match self.asked() {
            Some(Asked::Object(ObjectDrill::Hang)) => sleep(HANG_MS).await,
            Some(Asked::Object(ObjectDrill::Throw)) => {
                return Err(worker::Error::RustError("test fault: the object throws".into()))
            }
            _ => {}
        }
        Ok(())
    }

    /// A settlement record as the outbox stores it: in a shape no code reads, if the call asks.
    pub fn kept(&self, text: String) -> String {
        match self.asked() {
            Some(Asked::Object(ObjectDrill::Unreadable)) => {
                format!("{{\"version\":99,\"record\":{}}}", serde_json::Value::String(text))
            }
            _ => text,
        }
    }

    // ---- names ---------------------------------------------------------------------------------

    /// A request for `model` whose slots the Worker "dies" holding (`fault-leak-slots`): neither
    /// renewed nor given back, so only their leases' expiry frees them.
    pub fn leaks_slots(&self, model: &str) -> bool {
        self.on() && model.contains("fault-leak-slots")
    }

    /// Where a settlement of `account` for `model` is batched: the isolate's shared batch with
    /// `rules`, but an account named `fault-settle-writer-dies…` has its own; its settlement for a
    /// model of that name waits 1.5 s for riders, then its writer dies holding the batch.
    pub fn settle_batch(&self, account: &str, model: &str, rules: Rules) -> SettleBatch {
        const NAME: &str = "fault-settle-writer-dies";
        if !(self.on() && account.starts_with(NAME)) {
            return SettleBatch {
                key: String::new(),
                rules,
                writer_dies: false,
            };
        }
        let writer_dies = model.contains(NAME);
        SettleBatch {
            key: account.to_string(),
            rules: match writer_dies {
                true => Rules {
                    wait_ms: 1_500,
                    overdue_ms: 5_000,
                    ..rules
                },
                false => rules,
            },
            writer_dies,
        }
    }

    /// How much longer a money statement of `account` takes now: 5 s in a `d1-slow-<from>-<until>`
    /// window; an error in a `d1-outage-<from>-<until>` window, as if D1 were down for it.
    pub fn d1_statement(&self, account: &str) -> Result<u64, ApiError> {
        if !self.on() {
            return Ok(0);
        }
        let window = |prefix: &str| {
            let (from, rest) = account.strip_prefix(prefix)?.split_once('-')?;
            let until = rest.split('-').next()?;
            let (from, until) = (from.parse::<u64>().ok()?, until.parse::<u64>().ok()?);
            (from..until).contains(&now_ms()).then_some(())
        };
        if window("d1-outage-").is_some() {
            return Err(ApiError::Internal {
                label: "d1_outage_drill",
            });
        }
        Ok(match window("d1-slow-") {
            Some(()) => SLOW_STATEMENT_MS,
            None => 0,
        })
    }

    /// After D1 applied a hold of `account`: an error as if its answer never came
    /// (`hold-reply-lost…`).
    pub fn hold_reply(&self, account: &str) -> Result<(), ApiError> {
        match self.on() && account.starts_with("hold-reply-lost") {
            true => Err(ApiError::Internal {
                label: "hold_reply_lost_drill",
            }),
            false => Ok(()),
        }
    }
}

/// The drill a header value asks for (`now_ms`: when it arrived), `None` for no drill.
fn parse(value: &str, now_ms: u64) -> Option<Asked> {
    // `<prefix><ms>`, or `<prefix>` alone for 0.
    let ms = |prefix: &str| -> Option<u64> {
        let rest = value.strip_prefix(prefix)?;
        match rest.is_empty() {
            true => Some(0),
            false => rest.parse().ok(),
        }
    };
    let object = [ObjectDrill::Hang, ObjectDrill::Throw, ObjectDrill::Unreadable]
        .into_iter()
        .find(|d| d.as_str() == value);
    object
        .map(Asked::Object)
        .or_else(|| ms("d1-down").map(|_| Asked::D1Down))
        .or_else(|| ms("depart-").map(|ms| Asked::DepartAt(now_ms.saturating_add(ms))))
        .or_else(|| ms("past-").map(Asked::Past))
        .or_else(|| ms("abandon-").map(Asked::Abandon))
        .or_else(|| ms("slow-report-").map(Asked::SlowReport))
}
