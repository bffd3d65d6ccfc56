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

thread_local! {
    static SHARD: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// This isolate's record shard (core `records`), picked at random once: every generation id it
/// mints names it, so its records of a day go to one object.
fn record_shard() -> u16 {
    SHARD.with(|s| match s.get() {
        Some(shard) => shard,
        None => {
            let r = random_32();
            let shard = u16::from_le_bytes([r[0], r[1]]) % switchyard_core::records::SHARDS;
            s.set(Some(shard));
            shard
        }
    })
}

/// A new generation id, `gen-` and a UUIDv7 of now naming this isolate's record shard: the id
/// says where its record lives.
pub fn new_generation_id() -> String {
    let mut random = [0u8; 10];
    get_random_values(&mut random);
    let shard = record_shard();
    format!(
        "gen-{}",
        switchyard_core::ids::uuid_v7_in(super::clock::now_ms(), shard, random)
    )
}
