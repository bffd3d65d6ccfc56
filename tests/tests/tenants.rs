//! No request can hurt another tenant (SPEC §18): what one client's input provokes at a route is
//! not held against the route or its account for everyone else.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::json;
use serde_json::Value;
use switchyard_e2e::{fast_policy, pairs, with, Api, Fixture};

/// Deadlines that do not matter to these tests: generous, so a loaded machine fails none of them.
fn relaxed() -> Value {
    with(
        fast_policy(),
        json!({"stream_first_content_ms": 10000, "nonstream_base_ms": 10000, "last_route_min_ms": 10000,
               "idle_timeout_ms": 10000}),
    )
}

#[test]
fn a_field_named_billing_echoed_in_a_400_blames_no_account() {
    // r0's provider rejects an unknown argument the way OpenAI does, naming it: "Unrecognized
    // request argument supplied: billing". The word alone once read as a billing failure and put
    // r0's upstream account in cooldown for every model and every key.
    let f = Fixture::build(
        Api::Chat,
        &["reject-field/billing/400", "lenient"],
        &[],
        relaxed(),
        false,
    );
    let r = f.send_with(json!({"billing": 1}));
    assert_eq!(r.status, 200, "the route that takes the field answers: {}", r.text());
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r0", "unsupported_param"), ("r1", "answered")]),
        "the 400 is about the request's own field"
    );
    let other = f.s.new_key(1.0);
    for _ in 0..3 {
        let r = f.s.send(Api::Chat, &other, &Api::Chat.body(&f.model, false), &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        let g = f.s.generation(&other, r.header("x-generation-id").unwrap());
        assert_eq!(g["route"], "r0", "another key's request still goes to r0 first: {g}");
    }
    // Every report has reached the model's object (through the isolate's shard, within 1 s).
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    let health = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
    assert!(
        !health.to_string().contains("cooling"),
        "nothing of r0 is in cooldown: {health}"
    );
}

#[test]
fn an_empty_answer_the_clients_stop_sequence_explains_is_delivered_and_charged() {
    // r0 answers with no content (the mock's `chunks/0`) and its dialect's ordinary end. With a
    // stop sequence in the request that is the client's answer (the model stopped at once); with
    // none it is no answer and r1 takes the request.
    for (api, stop) in [
        (Api::Chat, json!({"stop": ["\n\n"]})),
        (Api::Messages, json!({"stop_sequences": ["END"]})),
        (Api::Gemini, json!({"generationConfig": {"stopSequences": ["END"]}})),
    ] {
        for stream in [false, true] {
            let f = Fixture::build(api, &["chunks/0/0", "ok"], &[], relaxed(), false);
            let r = f.send_with(switchyard_e2e::with(stop.clone(), json!({"stream": stream})));
            assert_eq!(r.status, 200, "{api:?} stream={stream}: {}", r.text());
            assert_eq!(
                f.attempts(&r),
                pairs(&[("r0", "answered")]),
                "{api:?} stream={stream}: delivered from r0, not retried elsewhere"
            );
            let g = f.generation(&r);
            assert!(
                g["total_cost"].as_f64().unwrap() > 0.0,
                "{api:?}: charged as billed: {g}"
            );
            let r = f.send_with(json!({"stream": stream}));
            assert_eq!(
                f.attempts(&r),
                pairs(&[("r0", "bad_response"), ("r1", "answered")]),
                "{api:?} stream={stream}: without a stop sequence an empty answer is none"
            );
        }
    }
}

#[test]
fn a_base_url_with_user_info_or_a_grace_past_the_runtimes_window_is_refused() {
    let f = Fixture::build(Api::Chat, &["ok"], &[], relaxed(), false);
    for bad in [
        "http://127.0.0.1:80@evil.example/v1",
        "https://user:secret@api.example.com/v1",
    ] {
        let r = f.s.admin(
            "PUT",
            &format!("/admin/providers/{}", switchyard_e2e::unique("p")),
            Some(json!({"base_url": bad, "auth": "bearer"})),
        );
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.text().contains("base_url"), "the error names the field: {}", r.text());
        assert!(!r.text().contains("secret@"), "nor repeats the user info: {}", r.text());
    }
    // 25 s of grace leaves no room to settle inside the runtime's 30 s after the client left.
    let provider = f.s.mock_provider(&switchyard_e2e::unique("l"), "ok", false);
    let doc = json!({"context_window": 8192, "max_output_tokens": 1024, "policy": {"disconnect_grace_ms": 25000},
                     "routes": [{"id": "r0", "provider": provider, "upstream_model": "u", "apis": ["chat"],
                                 "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}]});
    let r = f.s.admin(
        "PUT",
        &format!("/admin/models/{}", switchyard_e2e::unique("m")),
        Some(doc),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("disconnect_grace_ms"), "{}", r.text());
}

#[test]
fn keep_alives_before_content_never_commit_a_route() {
    // r0 sends 100 keep-alive comments at once and its content only after 2 s. The comments are
    // not content: r0 misses its 400 ms first-content deadline and r1 answers. (Counted as held
    // events they once committed r0 at 64, with no content and no way back.)
    for api in [Api::Chat, Api::Messages] {
        let f = Fixture::build(
            api,
            &["held/100/first-content-after/2000", "ok"],
            &[],
            fast_policy(),
            false,
        );
        let r = f.send(true);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            f.attempts(&r),
            pairs(&[("r0", "timeout"), ("r1", "answered")]),
            "{api:?}"
        );
    }
}

#[test]
fn one_keys_content_that_breaks_a_route_does_not_move_it_for_the_next_key() {
    // r0 fails with a 500 on any body that has the field `poison` — a provider bug one client's
    // content triggers. Four such requests from one key fall back to r1 each time; they prove
    // nothing against r0 for anyone else: the model's object checks r0 with its own known
    // request, which r0 answers, and the next key's requests still go to r0 first.
    let f = Fixture::build(
        Api::Chat,
        &["reject-field/poison/500", "lenient"],
        &[],
        relaxed(),
        false,
    );
    for _ in 0..4 {
        let r = f.send_with(json!({"poison": true}));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(f.attempts(&r), pairs(&[("r0", "upstream_5xx"), ("r1", "answered")]));
    }
    let other = f.s.new_key(1.0);
    for _ in 0..3 {
        let r = f.s.send(Api::Chat, &other, &Api::Chat.body(&f.model, false), &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        let g = f.s.generation(&other, r.header("x-generation-id").unwrap());
        assert_eq!(g["route"], "r0", "the next key's request goes to r0 first: {g}");
    }
    // The model's object confirmed with a check of its own: r0 passed it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let h = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
        let check = &h["routes"][0]["last_check"];
        if check["kind"] == "confirm" {
            assert_eq!(check["passed"], true, "{h}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no confirmation check ran: {h}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The same content from a second key is proof enough: r0 is demoted for everyone.
    let third = f.s.new_key(1.0);
    for key in [&f.key, &third, &f.key, &third] {
        let body = switchyard_e2e::with(Api::Chat.body(&f.model, false), json!({"poison": true}));
        assert_eq!(f.s.send(Api::Chat, key, &body, &[]).status, 200);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let h = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
        if h["routes"][0]["state"] != "healthy" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "two keys' failures demote r0: {h}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn ten_mib_of_tiny_json_values_leave_another_clients_stream_whole() {
    // A body of 5 million zeros was once built into a tree of hundreds of MB on wasm32, blocking
    // the isolate for seconds (and past its memory in production). Now its fields stay raw text:
    // another client's stream, with a 2 s idle timeout, runs through untouched, and bodies past
    // the isolate's budget get 503 gateway_busy, never a dead isolate.
    let s = switchyard_e2e::Stack::from_env();
    let policy = json!({"idle_timeout_ms": 2000});
    let (routes, _) = s.mock_routes(&[(
        "chunks/40/100",
        json!({"price": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}}),
    )]);
    let model = s.model(routes, Some(policy));
    let doc = json!({"context_window": 100_000_000u64, "max_output_tokens": 64,
                     "routes": s.mock_routes(&[("lenient", json!({"price": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}}))]).0});
    let big_model = switchyard_e2e::unique("m");
    assert_eq!(
        s.admin("PUT", &format!("/admin/models/{big_model}"), Some(doc)).status,
        200
    );
    let key = s.new_key(10.0);
    let mut zeros = String::with_capacity(10 << 20);
    zeros.push_str(&format!(
        r#"{{"model":"{big_model}","messages":[{{"role":"user","content":["#
    ));
    let n = (10 << 20) / 2 - 200;
    for i in 0..n {
        zeros.push_str(if i == 0 { "0" } else { ",0" });
    }
    zeros.push_str("]}]}");
    assert!(zeros.len() < 10 << 20);
    std::thread::scope(|scope| {
        let stream = scope.spawn(|| s.chat(&key, &switchyard_e2e::chat_body(&model, true)));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let bigs: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| s.chat_raw(&key, zeros.as_bytes())))
            .collect();
        let statuses: Vec<u16> = bigs.into_iter().map(|h| h.join().unwrap().status).collect();
        assert!(statuses.contains(&200), "a big body is served: {statuses:?}");
        assert!(
            statuses.iter().all(|st| *st == 200 || *st == 503),
            "200 or gateway_busy, nothing else: {statuses:?}"
        );
        let r = stream.join().unwrap();
        assert_eq!(r.status, 200);
        let text = r.text();
        assert!(
            text.trim_end().ends_with("data: [DONE]"),
            "the stream ended whole: …{}",
            &text[text.len().saturating_sub(200)..]
        );
        assert!(!text.contains(r#""finish_reason":"error""#), "no error frame: {text}");
        let g = s.generation(&key, r.header("x-generation-id").unwrap());
        assert_eq!(g["outcome"], "answered", "{g}");
    });
}

#[test]
fn a_client_that_leaves_before_the_answer_stops_the_attempt_and_frees_everything() {
    // r0 answers a non-stream request only after 20 s. The client leaves at 300 ms (the
    // departure drill: what an aborted request signal does in production, which `wrangler dev`
    // never delivers); after the 500 ms grace the attempt is aborted — not left to run under a
    // `waitUntil` the runtime ends 30 s after the client left, with the hold and the key's slot
    // locked for an hour and no record.
    let s = switchyard_e2e::Stack::from_env();
    let policy = json!({"disconnect_grace_ms": 500, "nonstream_base_ms": 60000, "last_route_min_ms": 60000});
    let (routes, _) = s.mock_routes(&[("first-content-after/20000", json!({}))]);
    let model = s.model(routes, Some(policy));
    let key = s.new_key_with(1.0, json!({"max_concurrent": 1}));
    let started = std::time::Instant::now();
    let r = s.send(
        Api::Chat,
        &key,
        &Api::Chat.body(&model, false),
        &[("x-switchyard-test-fault", "depart-300")],
    );
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(5),
        "the attempt ended with the grace, not the answer: {took:?}"
    );
    let g = s.generation(&key, r.header("x-generation-id").unwrap());
    assert_eq!(g["error_code"], "cancelled", "{g}");
    assert_eq!(g["attempts"][0]["failure_class"], "cancelled", "{g}");
    assert_eq!(g["total_cost"].as_f64(), Some(0.0));
    let c = s.settled_credits(&key, 5);
    assert_eq!(c["charges_total_micros"], 0, "the hold was released uncharged: {c}");
    // The key's only slot is free again at once.
    let (ok_routes, _) = s.mock_routes(&[("ok", json!({}))]);
    let ok = s.model(ok_routes, None);
    assert_eq!(
        s.chat(&key, &switchyard_e2e::chat_body(&ok, false)).status,
        200,
        "the key's slot was released"
    );
}

#[test]
fn with_d1_out_of_reach_requests_go_on_from_what_was_last_read_or_get_503() {
    // The `d1-down` drill: this request's catalog and key reads find D1 down (SPEC §18).
    let f = Fixture::build(Api::Chat, &["ok"], &[], relaxed(), false);
    let body = Api::Chat.body(&f.model, false);
    let down = [("x-switchyard-test-fault", "d1-down")];
    assert_eq!(
        f.s.send(Api::Chat, &f.key, &body, &[]).status,
        200,
        "the isolate reads the catalog and the key"
    );
    std::thread::sleep(std::time::Duration::from_millis(5_500)); // past the 5 s caches
    let r = f.s.send(Api::Chat, &f.key, &body, &down);
    assert_eq!(
        r.status,
        200,
        "served from the last-known catalog and key: {}",
        r.text()
    );
    // A key this isolate never read cannot be checked: a clear 503, never a 500.
    let fresh = f.s.new_key(1.0);
    let r = f.s.send(Api::Chat, &fresh, &body, &down);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "storage_unavailable", "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        f.s.send(Api::Chat, &fresh, &body, &[]).status,
        200,
        "and served once D1 answers"
    );
}
