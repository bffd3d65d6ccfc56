//! Randomness from the runtime's CSPRNG (`crypto.getRandomValues`, `crypto.randomUUID`): request,
//! generation, account and key ids, and the plaintext of new API keys. Generation ids carry their
//! time (`switchyard_core::ids`).

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(buf: &mut [u8]);
    #[wasm_bindgen(js_namespace = crypto, js_name = randomUUID)]
    fn random_uuid() -> String;
}

/// 32 bytes of cryptographic randomness.
pub fn random_32() -> [u8; 32] {
    let mut buf = [0u8; 32];
    get_random_values(&mut buf);
    buf
}

/// A new id with a readable prefix, e.g. `req-2f1c…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", random_uuid())
}

/// A new generation id, `gen-` and a UUIDv7 of now.
pub fn new_generation_id() -> String {
    let mut random = [0u8; 10];
    get_random_values(&mut random);
    format!("gen-{}", switchyard_core::ids::uuid_v7(super::clock::now_ms(), random))
}
