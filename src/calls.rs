//! Counting storage calls (SPEC §22): every Durable Object call (`object::call`) and every D1
//! statement (`Store`) is counted here by kind — `HEALTH.snapshot`, `LIMITS/capacity.acquire`,
//! `LIMITS.release`, `OUTBOX/list`, `D1` — and by whether it blocked a request.
//!
//! A call is *blocking* when it is made before the request has its response, from the handler or
//! the task it waits on (`proxy::spawn`, through [`inherit`]); *background* otherwise (after the
//! response, other `ctx.wait_until` tasks, an object's alarm). The request's tasks run inside
//! [`Scoped`], which makes its counts the current ones while they are polled (the isolate's tasks
//! share one thread and are polled one at a time), so counting costs a map increment and no
//! storage call.
//!
//! Read by: the request's log line (`calls`, its blocking calls), and under the test faults
//! (`Faults::instruments`) the `x-switchyard-calls` response header (the same) and
//! `GET /__test/calls?object=<name>` (the isolate's totals since it started, by kind and by
//! blocking, and those of one object).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Calls by kind.
pub type Counts = BTreeMap<String, u64>;

/// A request's counts while it has not answered (`None` after: what it still does is background).
pub type Open = Rc<RefCell<Option<Counts>>>;

thread_local! {
    /// The counts of the request whose task is being polled, if any.
    static CURRENT: RefCell<Option<Open>> = const { RefCell::new(None) };
    /// The isolate's totals, by `<kind>.<blocking|background>`.
    static TOTALS: RefCell<Counts> = const { RefCell::new(BTreeMap::new()) };
    /// The isolate's totals per object name (kept only under the test drills: names are
    /// unbounded).
    static BY_OBJECT: RefCell<HashMap<String, Counts>> = RefCell::new(HashMap::new());
}

/// A request's task: while it is polled, calls count as the request's (blocking).
pub struct Scoped<F> {
    inner: Pin<Box<F>>,
    counts: Option<Open>,
}

/// Runs `inner` as a request's task, counting into `counts` until they are taken
/// ([`answered`]).
pub fn scoped<F: Future>(counts: Open, inner: F) -> Scoped<F> {
    Scoped {
        inner: Box::pin(inner),
        counts: Some(counts),
    }
}

/// A task the request's handler spawns and waits for (`proxy::spawn`): its calls count as the
/// request's while it has not answered.
pub fn inherit<F: Future>(inner: F) -> Scoped<F> {
    Scoped {
        inner: Box::pin(inner),
        counts: CURRENT.with(|c| c.borrow().clone()),
    }
}

/// The request has answered: its counts, and from now on its calls are background.
pub fn answered(counts: &Open) -> Counts {
    counts.borrow_mut().take().unwrap_or_default()
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let outer = CURRENT.with(|c| c.replace(self.counts.clone()));
        let out = self.inner.as_mut().poll(cx);
        CURRENT.with(|c| *c.borrow_mut() = outer);
        out
    }
}

/// Counts one call of `kind`, for the request being polled (if it has not answered) and the
/// isolate, and for each of `objects` (test drills only: the callers pass none otherwise).
fn count(kind: &str, objects: &[&str]) {
    let blocking = CURRENT.with(|c| {
        c.borrow().as_ref().and_then(|open| {
            let mut open = open.borrow_mut();
            let counts = open.as_mut()?;
            *counts.entry(kind.to_string()).or_default() += 1;
            Some(())
        })
    });
    let tag = if blocking.is_some() { "blocking" } else { "background" };
    let key = format!("{kind}.{tag}");
    for name in objects {
        BY_OBJECT.with(|b| {
            *b.borrow_mut()
                .entry(name.to_string())
                .or_default()
                .entry(key.clone())
                .or_default() += 1
        });
    }
    TOTALS.with(|t| *t.borrow_mut().entry(key).or_default() += 1);
}

/// One call to object `name` of `binding` at `path` with the serialised `body`; the method is
/// the body's leading `call` field (the objects' calls are tagged so: `{"call":"snapshot",…}`),
/// else the path names it.
pub fn object(binding: &str, name: &str, path: &str, body: &str, per_object: bool) {
    let method = body
        .strip_prefix("{\"call\":\"")
        .and_then(|rest| rest.split('"').next())
        .filter(|m| !m.is_empty() && m.len() <= 32 && m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    let path = if path == "/" { "" } else { path };
    let kind = match method {
        Some(method) => format!("{binding}{path}.{method}"),
        None => format!("{binding}{path}"),
    };
    let names = [name];
    count(&kind, if per_object { &names } else { &[] });
}

/// D1 statements about to run (one prepared statement each, alone or in a batch).
pub fn d1() {
    count("D1", &[]);
}

/// A batch of settlements sent to D1 (one round trip; its statements are counted by [`d1`]):
/// `D1.settle` from a request's settlement, `D1.replay` from the outbox; counted also for each
/// account it carries (`account:<id>`, test drills only).
pub fn d1_settle<'a>(kind: &str, accounts: impl Iterator<Item = &'a str>, per_object: bool) {
    let mut names: Vec<String> = match per_object {
        true => accounts.map(|a| format!("account:{a}")).collect(),
        false => Vec::new(),
    };
    names.sort_unstable();
    names.dedup();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    count(kind, &names);
}

/// One event of `kind` that is no call of its own (`D1.key`: a statement counted by [`d1`] was a
/// key lookup; `D1.key_unknown`: it found no active key).
pub fn count_only(kind: &str) {
    count(kind, &[]);
}

/// One event of `kind` inside an object, counted for `name` too under the test drills (a keyring's
/// D1 read of a key: `KEYS.d1_read`, for `key:<hash>`).
pub fn in_object(kind: &str, name: &str, per_object: bool) {
    let names = [name];
    count(kind, if per_object { &names } else { &[] });
}

/// The isolate's count of `kind`, blocking and background together.
pub fn total(kind: &str) -> u64 {
    TOTALS.with(|t| {
        let t = t.borrow();
        ["blocking", "background"]
            .iter()
            .map(|tag| t.get(&format!("{kind}.{tag}")).copied().unwrap_or(0))
            .sum()
    })
}

/// The isolate's totals, and those of `object` (test drills only).
pub fn totals(object: Option<&str>) -> (Counts, Counts) {
    let all = TOTALS.with(|t| t.borrow().clone());
    let one = object
        .and_then(|o| BY_OBJECT.with(|b| b.borrow().get(o).cloned()))
        .unwrap_or_default();
    (all, one)
}
