//! Counting storage calls (SPEC §22): every Durable Object call (`object::call`) and every D1
//! statement (`Store`) is counted here by kind — `HEALTH.Snapshot`, `HEALTH/capacity.Acquire`,
//! `LIMITS.Release`, `OUTBOX/list`, `D1` — and by whether it blocked a request.
//!
//! A call is *blocking* when it is made from a request's own task (the handler, before its
//! response is returned), *background* otherwise (`ctx.wait_until` tasks, a stream's body, an
//! object's alarm). The request's task runs inside [`Scoped`], which makes its counts the current
//! ones while it is polled (the isolate's tasks share one thread and are polled one at a time),
//! so counting costs a map increment and no storage call.
//!
//! Read by: the request's log line (`calls`, its blocking calls), and under the test drills
//! (`SWITCHYARD_TEST_FAULTS`) the `x-switchyard-calls` response header (the same) and
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

thread_local! {
    /// The counts of the request whose task is being polled, if any.
    static CURRENT: RefCell<Option<Rc<RefCell<Counts>>>> = const { RefCell::new(None) };
    /// The isolate's totals, by `<kind>.<blocking|background>`.
    static TOTALS: RefCell<Counts> = const { RefCell::new(BTreeMap::new()) };
    /// The isolate's totals per object name (kept only under the test drills: names are
    /// unbounded).
    static BY_OBJECT: RefCell<HashMap<String, Counts>> = RefCell::new(HashMap::new());
}

/// A request's task: while it is polled, calls count as the request's (blocking).
pub struct Scoped<F> {
    inner: Pin<Box<F>>,
    counts: Rc<RefCell<Counts>>,
}

/// Runs `inner` as a request's task, counting into `counts`.
pub fn scoped<F: Future>(counts: Rc<RefCell<Counts>>, inner: F) -> Scoped<F> {
    Scoped {
        inner: Box::pin(inner),
        counts,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let outer = CURRENT.with(|c| c.replace(Some(self.counts.clone())));
        let out = self.inner.as_mut().poll(cx);
        CURRENT.with(|c| *c.borrow_mut() = outer);
        out
    }
}

fn count(kind: &str, object: Option<&str>) {
    let blocking = CURRENT.with(|c| {
        c.borrow().as_ref().map(|counts| {
            *counts.borrow_mut().entry(kind.to_string()).or_default() += 1;
        })
    });
    let tag = if blocking.is_some() { "blocking" } else { "background" };
    let key = format!("{kind}.{tag}");
    if let Some(name) = object {
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
/// the body's enum tag (`"Snapshot"`, `{"Observe":…}`), else the path names it.
pub fn object(binding: &str, name: &str, path: &str, body: &str, per_object: bool) {
    let tag = body
        .strip_prefix("{\"")
        .or_else(|| body.strip_prefix('"'))
        .and_then(|rest| rest.split('"').next())
        .filter(|t| !t.is_empty() && t.len() <= 32 && t.bytes().all(|b| b.is_ascii_alphanumeric()));
    let path = if path == "/" { "" } else { path };
    let kind = match tag {
        Some(tag) => format!("{binding}{path}.{tag}"),
        None => format!("{binding}{path}"),
    };
    count(&kind, per_object.then_some(name));
}

/// D1 statements about to run (one prepared statement each, alone or in a batch).
pub fn d1() {
    count("D1", None);
}

/// The isolate's totals, and those of `object` (test drills only).
pub fn totals(object: Option<&str>) -> (Counts, Counts) {
    let all = TOTALS.with(|t| t.borrow().clone());
    let one = object
        .and_then(|o| BY_OBJECT.with(|b| b.borrow().get(o).cloned()))
        .unwrap_or_default();
    (all, one)
}
