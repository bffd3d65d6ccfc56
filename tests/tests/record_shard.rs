//! An isolate mints every generation id in one record shard (SPEC §22, core `records`): its
//! records of a day go to one object, in batches. Found by scripts/soak: the shard was picked
//! again for every id (the isolate's choice was never kept), so one isolate's records went one by
//! one to up to 1,024 objects a day — 872 objects for 2,000 requests.

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, route, unique, Stack};

/// The shard a generation id names: the three hex digits after its UUIDv7's version nibble.
fn shard(id: &str) -> String {
    let uuid = &id[id.len() - 36..];
    assert_eq!(&uuid[14..15], "7", "a UUIDv7: {id}");
    uuid[15..18].to_string()
}

#[test]
fn records_one_isolate_mints_every_generation_id_in_one_shard() {
    let s = Stack::from_env();
    let routes: Vec<Value> = vec![route("r0", &s.mock_provider(&unique("l"), "ok", false), "u", json!({}))];
    let model = unique("shard-m");
    let r = s.admin(
        "PUT",
        &format!("/admin/models/{model}"),
        Some(json!({"context_window": 8192, "max_output_tokens": 256, "routes": routes})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let key = s.new_key(1.0);
    // `wrangler dev` serves every request from one isolate.
    let ids: Vec<String> = (0..12)
        .map(|_| {
            let r = s.chat(&key, &chat_body(&model, false));
            assert_eq!(r.status, 200, "{}", r.text());
            r.header("x-generation-id").expect("x-generation-id").to_string()
        })
        .collect();
    let shards: Vec<String> = ids.iter().map(|id| shard(id)).collect();
    assert!(
        shards.iter().all(|s| *s == shards[0]),
        "one isolate, one shard: {shards:?} ({ids:?})"
    );
    // And each record is found where its id says.
    for id in &ids {
        assert_eq!(s.generation(&key, id)["id"].as_str(), Some(id.as_str()));
    }
}
