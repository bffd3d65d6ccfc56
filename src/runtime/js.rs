//! JS calls that may be refused by the runtime, made so the refusal comes back as an `Err`.
//!
//! Any import can be refused where no request is being served (see [`super::clock::in_request`]),
//! and an exception thrown through Wasm frames by a non-`catch` import loses the task being polled.
//! wasm-bindgen merges imports of the same JS name, so a `catch` declaration of our own
//! (`setTimeout`, `AbortController.abort`) can silently become another crate's non-`catch` one;
//! going through `Reflect`, which js-sys declares `catch` everywhere, cannot.

use js_sys::{Array, Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// `target[name]`.
pub fn get(target: &JsValue, name: &str) -> Result<JsValue, JsValue> {
    Reflect::get(target, &JsValue::from_str(name))
}

/// `target[name](...args)`.
pub fn call_method(target: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(target, name)?.dyn_into()?;
    Reflect::apply(&f, target, &args.iter().collect::<Array>())
}

/// `globalThis[name](...args)`.
pub fn call_global(name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    call_method(&js_sys::global(), name, args)
}

/// `new globalThis[name]()`.
pub fn construct_global(name: &str) -> Result<JsValue, JsValue> {
    let ctor: Function = get(&js_sys::global(), name)?.dyn_into()?;
    Reflect::construct(&ctor, &Array::new())
}
