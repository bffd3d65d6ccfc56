//! Bad input never gets a 5xx, a panic or a charge (issue 12, SPEC §13, §15): one table of bad
//! requests, each a 4xx in the client's dialect; afterwards the account was charged nothing, holds
//! nothing, and the Worker still answers. Also: bodies are read with a hard cap, whole answers go
//! out as 200 JSON, and the catalog refuses settings that cannot work.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_e2e::{fast_policy, unique, Api, Fixture, Reply};

fn nested(depth: usize) -> String {
    format!(
        r#"{{"model":"m","messages":{}"x"{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[test]
fn bad_requests_are_4xx_in_the_clients_dialect_and_cost_nothing() {
    let chat = Fixture::build(Api::Chat, &["ok"], &[], fast_policy(), false);
    let s = &chat.s;
    let model = chat.model.as_str();
    let body = |v: Value| v.to_string().into_bytes();
    let with = |fields: Value| {
        let mut b = Api::Chat.body(model, false);
        for (k, v) in fields.as_object().unwrap() {
            b[k] = v.clone();
        }
        b.to_string().into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("invalid JSON", b"{not json".to_vec()),
        ("a JSON array", b"[1,2,3]".to_vec()),
        ("a JSON string", br#""hello""#.to_vec()),
        (
            "model of the wrong type",
            body(json!({"model": 5, "messages": [{"role": "user", "content": "x"}]})),
        ),
        ("deeply nested JSON", nested(10_000).into_bytes()),
        ("stream not a bool", with(json!({"stream": "yes"}))),
        ("negative max_tokens", with(json!({"max_tokens": -1}))),
        ("huge max_tokens", with(json!({"max_tokens": 1e30}))),
        ("fractional max_tokens", with(json!({"max_tokens": 1.5}))),
        ("n = 0", with(json!({"n": 0}))),
        (
            "n = 128 (more than the balance holds)",
            with(json!({"n": 128, "max_tokens": 100000})),
        ),
        ("unknown model", with(json!({"model": "no/such-model"}))),
        (
            "SQL in the model id",
            with(json!({"model": "x'; DROP TABLE generations; --"})),
        ),
        ("empty messages", with(json!({"messages": []}))),
        ("non-UTF-8 bytes", vec![b'{', 0xff, 0xfe, b'}']),
    ];
    for (what, bytes) in &cases {
        let r = s.chat_raw(&chat.key, bytes);
        assert!((400..500).contains(&r.status), "{what}: {} {}", r.status, r.text());
        let v = r.json();
        assert!(
            v["error"]["code"].is_string() && v["generation_id"].is_string(),
            "{what}: {v}"
        );
    }
    // The same in the other dialects' shapes.
    for api in [Api::Messages, Api::Responses, Api::Gemini] {
        for bytes in [
            b"{not json".to_vec(),
            b"[]".to_vec(),
            nested(10_000).into_bytes(),
            b"{}".to_vec(),
        ] {
            let (name, value) = api.auth_header(&chat.key);
            let r = s.request(
                "POST",
                &format!("{}{}", s.gateway, api.path()),
                &[(name, value.as_str()), ("content-type", "application/json")],
                Some(&bytes),
            );
            assert_eq!(r.status, 400, "{api:?}: {}", r.text());
            match api {
                Api::Messages => assert_eq!(r.json()["type"], "error"),
                Api::Gemini => assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT"),
                _ => assert_eq!(r.json()["error"]["type"], "invalid_request_error"),
            }
        }
    }
    // Ids and path segments carrying SQL are just unknown ids.
    let auth = format!("Bearer {}", chat.key);
    for path in [
        "/v1/generation?id=%27%20OR%201%3D1%20--",
        "/v1/generation?id=gen-%22%3B%20DELETE%20FROM%20ledger",
    ] {
        let r = s.request(
            "GET",
            &format!("{}{path}", s.gateway),
            &[("authorization", &auth)],
            None,
        );
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
    let r = s.admin("GET", "/admin/accounts/%27%20OR%20%271%27%3D%271", None);
    assert_eq!(r.status, 404, "{}", r.text());
    // A request id that is not a plain token is replaced, never echoed.
    let r = s.request(
        "POST",
        &format!("{}/v1/chat/completions", s.gateway),
        &[("authorization", &auth), ("x-request-id", "id with spaces <script>")],
        Some(&with(json!({}))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.header("x-request-id"), Some("id with spaces <script>"));
    // Nothing was charged for the bad ones, nothing is held, and the Worker still answers.
    let c = s.credits(&chat.key);
    assert_eq!(c["held_micros"], 0, "{c}");
    let good = chat.send(false);
    assert_eq!(good.status, 200, "{}", good.text());
    let g = chat.generation(&good);
    let charged_once = g["total_cost"].as_f64().unwrap();
    assert!(charged_once > 0.0);
    let after = s.credits(&chat.key);
    let charges = after["charges_total_micros"].as_i64().unwrap();
    assert!(
        charges <= 2 * (charged_once * 1e6).round() as i64,
        "only the two good requests were charged: {after}"
    );
}

#[test]
fn a_chunked_body_past_ten_mib_is_refused_as_it_arrives() {
    let f = Fixture::build(Api::Chat, &["ok"], &[], fast_policy(), false);
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    // No Content-Length: a reader body goes out chunked.
    let body = std::io::repeat(b' ').take(10 * 1024 * 1024 + 64 * 1024);
    let result = agent
        .post(format!("{}/v1/chat/completions", f.s.gateway))
        .header("authorization", format!("Bearer {}", f.key))
        .header("content-type", "application/json")
        .send(ureq::SendBody::from_owned_reader(body));
    match result {
        Ok(mut r) => {
            let status = r.status().as_u16();
            let text = r.body_mut().read_to_string().unwrap_or_default();
            assert_eq!(status, 400, "{text}");
            assert!(text.contains("larger than 10 MiB"), "{text}");
        }
        // The Worker may answer and close before the client finished sending: still no 5xx.
        Err(e) => assert!(
            e.to_string().to_lowercase().contains("connection") || e.to_string().contains("broken pipe"),
            "{e}"
        ),
    }
    assert_eq!(f.seen(0), 0, "nothing reached the upstream");
    assert_eq!(f.send(false).status, 200, "the Worker still answers");
}

#[test]
fn a_whole_answer_goes_out_as_200_json_whatever_2xx_the_upstream_used() {
    // The deadline is not what is tested here (a busy machine reads slowly).
    let roomy = switchyard_e2e::with(
        fast_policy(),
        json!({"nonstream_base_ms": 20_000, "last_route_min_ms": 20_000}),
    );
    let f = Fixture::build(Api::Chat, &["answer-status/201"], &[], roomy.clone(), false);
    let r: Reply = f.send(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["object"], "chat.completion");
    let empty = Fixture::build(Api::Chat, &["answer-status/204", "ok"], &[], roomy, false);
    let r = empty.send(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(empty.attempts(&r)[0].1, "bad_response", "a 204 carries no answer");
}

#[test]
fn the_catalog_refuses_settings_that_cannot_work() {
    let f = Fixture::build(Api::Chat, &["ok"], &[], fast_policy(), false);
    let s = &f.s;
    let provider = |body: Value| s.admin("PUT", &format!("/admin/providers/{}", unique("p")), Some(body));
    let param = |r: &Reply| r.json()["error"]["param"].as_str().unwrap_or("").to_string();
    let r = provider(json!({"base_url": "http://api.example.com/v1", "auth": "bearer"}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(param(&r).ends_with("base_url"), "{}", r.text());
    let r = provider(json!({"base_url": "https://api.example.com/v1", "auth": "bearer", "key_secret": "ADMIN_TOKEN"}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(param(&r).ends_with("key_secret"), "{}", r.text());
    let model = |policy: Value| {
        let routes = s.admin("GET", "/admin/catalog", None).json()["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == f.model.as_str())
            .unwrap()["routes"]
            .clone();
        s.admin(
            "PUT",
            &format!("/admin/models/{}", unique("m")),
            Some(json!({"context_window": 10, "max_output_tokens": 10, "routes": routes, "policy": policy})),
        )
    };
    for (knob, value) in [
        ("stream_cap_ms", json!(1u64 << 40)),
        ("idle_timeout_ms", json!(0)),
        ("disconnect_grace_ms", json!(120_000)),
    ] {
        let r = model(json!({ knob: value }));
        assert_eq!(r.status, 400, "{knob}: {}", r.text());
        assert!(param(&r).ends_with(&format!("policy.{knob}")), "{knob}: {}", r.text());
    }
    let huge = vec![b' '; 6 * 1024 * 1024];
    let r = s.request(
        "PUT",
        &format!("{}/admin/catalog", s.gateway),
        &[("authorization", &format!("Bearer {}", s.admin_token))],
        Some(&huge),
    );
    assert_eq!(r.status, 400, "admin bodies are capped too: {}", r.text());
}

#[test]
fn an_upstream_answer_past_sixteen_mib_is_no_answer_and_a_huge_error_body_is_not_read_whole() {
    // Reading 16 MiB takes a while on a busy machine: a deadline that is not what is tested here.
    let roomy = switchyard_e2e::with(
        fast_policy(),
        json!({"nonstream_base_ms": 20_000, "last_route_min_ms": 20_000}),
    );
    let f = Fixture::build(Api::Chat, &["pad/17000000", "ok"], &[], roomy.clone(), false);
    let r = f.send(false);
    assert_eq!(r.status, 200, "{}", r.text());
    let g = f.generation(&r);
    assert_eq!(switchyard_e2e::attempts_of(&g)[0].1, "bad_response", "{g}");
    assert_eq!(g["route"], "r1");
    // A 503 with a 20 MB body is still classified (from its start) and fallen back from.
    let f = Fixture::build(Api::Chat, &["status/503/pad/20000000", "ok"], &[], roomy, false);
    let r = f.send(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(switchyard_e2e::attempts_of(&f.generation(&r))[0].1, "upstream_5xx");
}
