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
    // One shard an hour (core `records::SHARD_FOR_MS`): the ids of one hour name one shard.
    let hour = |id: &str| u64::from_str_radix(&id[id.len() - 36..].replace('-', "")[..12], 16).unwrap() / 3_600_000;
    let first_hour: Vec<String> = ids
        .iter()
        .filter(|id| hour(id) == hour(&ids[0]))
        .map(|id| shard(id))
        .collect();
    let shards: Vec<String> = ids.iter().map(|id| shard(id)).collect();
    assert!(
        first_hour.len() >= 6 || shards.len() - first_hour.len() >= 6,
        "an hour's turn mid-test: {ids:?}"
    );
    assert!(
        first_hour.iter().all(|s| *s == first_hour[0]),
        "one isolate, one shard an hour: {shards:?} ({ids:?})"
    );
    // And each record is found where its id says.
    for id in &ids {
        assert_eq!(s.generation(&key, id)["id"].as_str(), Some(id.as_str()));
    }
}
