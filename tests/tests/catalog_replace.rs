//! `PUT /admin/catalog` replaces the whole catalog atomically (SPEC §2), and takes back what
//! `GET /admin/catalog` returned, `version` and all (SPEC §12). Its own test binary:
//! cargo runs test binaries one after another, so replacing the catalog here cannot race the
//! single-entry changes of the other suites.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::json;
use switchyard_e2e::{chat_body, unique, Stack};

#[test]
fn put_catalog_validates_and_replaces_atomically() {
    let s = Stack::from_env();
    let before = s.admin("GET", "/admin/catalog", None);
    assert_eq!(before.status, 200);
    let mut doc = before.json();
    doc.as_object_mut().unwrap().remove("version");

    // An invalid document is refused, naming the field, and nothing changes.
    let mut bad = doc.clone();
    bad["models"].as_array_mut().unwrap().push(json!({"id": unique("m"), "context_window": 1, "max_output_tokens": 1,
        "routes": [{"id": "r", "provider": "nope", "upstream_model": "x", "apis": ["chat"], "price": {"input_per_mtok": 0, "output_per_mtok": 0}}]}));
    let r = s.admin("PUT", "/admin/catalog", Some(bad));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]["param"]
        .as_str()
        .unwrap()
        .ends_with("routes[0].provider"));
    let mut unchanged = s.admin("GET", "/admin/catalog", None).json();
    unchanged.as_object_mut().unwrap().remove("version");
    assert_eq!(unchanged, doc);

    // A valid one replaces everything: the new model answers, a dropped one is gone.
    let label = unique("l");
    let provider = unique("p");
    let model = unique("m");
    let new_doc = json!({
        "providers": [{"id": provider, "base_url": format!("{}/{label}/ok", s.mock), "auth": "bearer"}],
        "models": [{"id": model, "context_window": 8192, "max_output_tokens": 512, "routes": [
            {"id": "only", "provider": provider, "upstream_model": "u", "apis": ["chat"],
             "price": {"input_per_mtok": 1, "output_per_mtok": 1}}]}],
        // The default value: later suites share this Worker's catalog and its top-level policy.
        "policy": {"stream_cap_ms": 3600000}
    });
    let r = s.admin("PUT", "/admin/catalog", Some(new_doc.clone()));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut got = s.admin("GET", "/admin/catalog", None).json();
    got.as_object_mut().unwrap().remove("version");
    assert_eq!(got["models"].as_array().unwrap().len(), 1);
    assert_eq!(got["models"][0]["id"], model.as_str());
    assert_eq!(got["policy"], json!({"stream_cap_ms": 3600000}));
    let key = s.new_key(1.0);
    assert_eq!(s.chat(&key, &chat_body(&model, false)).status, 200);
    if let Some(old) = doc["models"].as_array().and_then(|m| m.first()) {
        let r = s.chat(&key, &chat_body(old["id"].as_str().unwrap(), false));
        assert_eq!(r.status, 404, "a model dropped from the catalog is gone");
    }

    // What GET returns can be PUT back as is: its `version` makes the write conditional.
    let read = s.admin("GET", "/admin/catalog", None).json();
    let version = read["version"].as_i64().expect("version");
    let r = s.admin("PUT", "/admin/catalog", Some(read.clone()));
    assert_eq!(r.status, 200, "the document GET returned goes back: {}", r.text());
    let now = s.admin("GET", "/admin/catalog", None).json();
    assert_eq!(now["version"].as_i64(), Some(version + 1));
    let r = s.admin("PUT", "/admin/catalog", Some(read));
    assert_eq!(r.status, 409, "the catalog moved on since that version: {}", r.text());
    assert_eq!(r.json()["error"]["code"], "conflict");
    assert_eq!(
        s.admin("GET", "/admin/catalog", None).json()["version"].as_i64(),
        Some(version + 1),
        "a refused write changes nothing"
    );
}
