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
    /// This isolate's random seed (its record shard, its health shards).
    static SEED: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// This isolate's random seed, drawn once: what spreads isolates over sharded objects (core
/// `records::shard_at`, `health::shard::shard_object`, `limits::permit_shard`).
pub fn isolate_seed() -> u64 {
    SEED.with(|s| match s.get() {
        Some(seed) => seed,
        None => {
            let r = random_32();
            let seed = u64::from_le_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]);
            s.set(Some(seed));
            seed
        }
    })
}

/// This isolate's record shard now: every generation id it mints this hour names it, so its
/// records go to one object at a time.
fn record_shard(now_ms: u64) -> u16 {
    switchyard_core::records::shard_at(isolate_seed(), now_ms)
}

/// A new generation id, `gen-` and a UUIDv7 of now naming this isolate's record shard: the id
/// says where its record lives.
pub fn new_generation_id() -> String {
    let mut random = [0u8; 10];
    get_random_values(&mut random);
    let now = super::clock::now_ms();
    format!(
        "gen-{}",
        switchyard_core::ids::uuid_v7_in(now, record_shard(now), random)
    )
}
