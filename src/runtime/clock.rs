//! Time: the only place that reads the clock (`Date.now()`) or sets timers.
//!
//! (`std::time` panics on wasm32; inside a request the runtime's clock advances only across I/O,
//! which is what deadlines and logs need.) [`sleep`] is used instead of `worker::Delay` because a
//! timer future may be polled or dropped outside any request (a task outliving its request), where
//! the runtime refuses `setTimeout`/`clearTimeout`; here that refusal comes back as an error
//! (`host.js` catches it) instead of unwinding through Wasm.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

#[wasm_bindgen(module = "/src/runtime/host.js")]
extern "C" {
    /// `setTimeout`'s id, `undefined` where timers are refused.
    #[wasm_bindgen(js_name = setTimer)]
    fn set_timer(handler: &js_sys::Function, ms: i32) -> JsValue;
    /// `clearTimeout`; false where it was refused.
    #[wasm_bindgen(js_name = clearTimer)]
    fn clear_timer(id: &JsValue) -> bool;
    /// Whether this code runs inside a request (or a `wait_until` task) the runtime still serves.
    ///
    /// The Wasm futures executor is shared by every request in the isolate: a promise settling in
    /// a request the runtime has torn down (a client gone mid-stream) can make it poll other
    /// requests' tasks where the runtime allows no I/O at all. Callers check this before I/O that
    /// could not be finished from there (a fetch, a Durable Object call, settlement) and give up
    /// cleanly instead.
    #[wasm_bindgen(js_name = inRequest)]
    pub fn in_request() -> bool;
}

/// Milliseconds since the Unix epoch (`Date.now()`: no `Date` object made, as `worker::Date` does).
pub fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

fn set_timeout(handler: &js_sys::Function, ms: i32) -> Result<JsValue, ()> {
    Some(set_timer(handler, ms)).filter(|id| !id.is_undefined()).ok_or(())
}

fn clear_timeout(id: &JsValue) -> Result<(), ()> {
    clear_timer(id).then_some(()).ok_or(())
}

#[derive(Default)]
struct Shared {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

/// A timer future: ready `ms` after it is first polled inside a request.
pub struct Sleep {
    ms: i32,
    shared: Rc<Shared>,
    timer: Option<(JsValue, Closure<dyn FnMut()>)>,
}

/// Waits `ms` milliseconds.
pub fn sleep(ms: u64) -> Sleep {
    Sleep {
        ms: i32::try_from(ms).unwrap_or(i32::MAX),
        shared: Rc::new(Shared::default()),
        timer: None,
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.shared.fired.get() {
            return Poll::Ready(());
        }
        *self.shared.waker.borrow_mut() = Some(cx.waker().clone());
        if self.timer.is_none() {
            let shared = self.shared.clone();
            let closure = Closure::<dyn FnMut()>::new(move || {
                shared.fired.set(true);
                if let Some(w) = shared.waker.borrow_mut().take() {
                    w.wake();
                }
            });
            match set_timeout(closure.as_ref().unchecked_ref(), self.ms) {
                Ok(id) => self.timer = Some((id, closure)),
                // No timers here (polled outside any request): the wait has not started. Whatever
                // the task also waits on wakes it inside its request, and the timer is set then.
                Err(_) => return Poll::Pending,
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((id, closure)) = self.timer.take() {
            if !self.shared.fired.get() && clear_timeout(&id).is_err() {
                // The timer could not be cleared: keep its callback alive so a late firing is
                // harmless.
                closure.forget();
            }
        }
    }
}
