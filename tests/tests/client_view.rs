//! What a client sees of an upstream's failures (issue 12, SPEC §14, §15): the provider's own
//! words only for the client-caused classes; for the rest the class and the status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::json;
use switchyard_e2e::{fast_policy, Api, Fixture};

#[test]
fn the_record_shows_the_providers_text_only_for_client_caused_failures() {
    let f = Fixture::build(
        Api::Chat,
        &["status/401/invalid_key", "status/400/context_length", "ok"],
        &[json!({}), json!({}), json!({"context_window": 32768})],
        fast_policy(),
        false,
    );
    let r = f.send(false);
    assert_eq!(r.status, 200, "{}", r.text());
    let g = f.generation(&r);
    let first = &g["attempts"][0];
    assert_eq!(
        (first["failure_class"].as_str(), first["http_status"].as_u64()),
        (Some("account"), Some(401))
    );
    assert!(
        first["message"].is_null(),
        "an account failure's text stays with the operator: {g}"
    );
    let second = &g["attempts"][1];
    assert_eq!(second["failure_class"], "context_length");
    assert!(
        second["message"].as_str().unwrap().contains("maximum context length"),
        "the client's own problem is explained: {g}"
    );
}

#[test]
fn every_answer_says_how_many_routes_were_tried_and_which_answered() {
    for api in [Api::Chat, Api::Messages, Api::Responses] {
        let f = Fixture::build(api, &["status/503", "ok"], &[], fast_policy(), false);
        for stream in [false, true] {
            let r = f.send(stream);
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.header("x-switchyard-attempts"), Some("2"), "{api:?}");
            assert_eq!(r.header("x-switchyard-route"), Some("r1"), "{api:?}");
        }
        let all = Fixture::build(api, &["status/500", "status/502"], &[], fast_policy(), false);
        let r = all.send(false);
        assert_eq!(r.status, 502);
        assert_eq!(
            (r.header("x-switchyard-attempts"), r.header("x-switchyard-route")),
            (Some("2"), Some("none"))
        );
        let r = f.send_with(json!({"model": "no/such-model"}));
        assert_eq!(r.status, 404);
        assert_eq!(r.header("x-switchyard-attempts"), Some("0"), "refused before any route");
    }
}
