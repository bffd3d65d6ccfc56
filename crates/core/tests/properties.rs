//! Properties over arbitrary input (issue 12, SPEC §15): nothing a client or an upstream sends makes
//! the core panic, keep more than it may, or lose bytes — the SSE parser, each dialect's event and
//! body inspectors, each dialect's request validator, and the catalog validator.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use switchyard_core::api::Api;
use switchyard_core::catalog::Catalog;
use switchyard_core::dialects::{self, chat, messages, responses};
use switchyard_core::sse::{SseParser, MAX_EVENT_BYTES};

/// Bytes that look like SSE often enough to reach every branch.
fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"event: error\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b": keep-alive\n\n".to_vec()),
        Just(br#"{"choices":[{"delta":{"content":"x"}}]}"#.to_vec()),
        Just(br#"{"type":"content_block_delta","delta":{"text":"x"}}"#.to_vec()),
        Just(br#"{"type":"response.completed","response":{"usage":{"input_tokens":1}}}"#.to_vec()),
        prop::collection::vec(any::<u8>(), 0..16),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_sse_parser_keeps_every_byte_however_it_is_split(input in sse_bytes(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        points.sort_unstable();
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut at = 0;
        for p in points.into_iter().chain([input.len()]) {
            parser.push(&input[at..p], &mut events);
            at = p;
        }
        events.extend(parser.finish());
        let joined: Vec<u8> = events.iter().flat_map(|e| e.raw.clone()).collect();
        prop_assert_eq!(joined, input, "nothing lost, nothing added (no event is over the cap here)");
        for ev in &events {
            for inspect in [chat::inspect_event, messages::inspect_event, responses::inspect_event] {
                let _ = inspect(ev); // must not panic
            }
        }
    }

    #[test]
    fn the_sse_parser_never_holds_more_than_one_capped_event(line in 1usize..4, chunk in 1usize..70_000) {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let piece = vec![b'z'; chunk];
        let mut sent = 0;
        while sent < line * MAX_EVENT_BYTES {
            parser.push(&piece, &mut events);
            sent += chunk;
            prop_assert!(parser.buffered() <= MAX_EVENT_BYTES + chunk);
        }
        prop_assert!(events.iter().all(|e| e.raw.len() <= MAX_EVENT_BYTES));
    }

    #[test]
    fn bodies_and_requests_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for api in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini] {
            let _ = dialects::inspect_body(api, &bytes, false);
            let _ = dialects::parse_request(api, &bytes, Some(("m", false)));
        }
        let _ = Catalog::parse(&bytes);
    }

    #[test]
    fn json_shaped_requests_are_accepted_or_refused_never_panicked_on(
        model in prop_oneof![Just(serde_json::json!("m")), any::<i64>().prop_map(serde_json::Value::from), Just(serde_json::Value::Null)],
        limit in prop_oneof![any::<i64>().prop_map(serde_json::Value::from), any::<f64>().prop_map(serde_json::Value::from), Just(serde_json::json!("9"))],
        n in any::<i64>(),
        stream in prop_oneof![Just(serde_json::json!(true)), Just(serde_json::json!("yes")), Just(serde_json::Value::Null)],
    ) {
        let body = serde_json::json!({
            "model": model, "messages": [{"role": "user", "content": "x"}], "input": "x",
            "max_tokens": limit, "max_output_tokens": limit, "max_completion_tokens": limit,
            "n": n, "stream": stream, "contents": [{"parts": [{"text": "x"}]}],
            "generationConfig": {"maxOutputTokens": limit, "candidateCount": n},
        });
        for api in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini] {
            if let Ok(mut r) = dialects::parse_request(api, body.to_string().as_bytes(), Some(("m", true))) {
                let held = r.limit_output(4096);
                prop_assert!(r.held_output_tokens(4096) >= held, "n multiplies, never shrinks");
            }
        }
    }

    #[test]
    fn catalogs_are_validated_never_panicked_on(
        base_url in "[a-z]{0,6}://[a-z0-9.:\\[\\]]{0,20}(/[a-z]{0,5})?",
        secret in "[A-Z_]{0,12}",
        ms in any::<u64>(),
    ) {
        let doc = serde_json::json!({
            "providers": [{"id": "p", "base_url": base_url, "auth": "bearer", "key_secret": secret}],
            "models": [{"id": "m", "context_window": 10, "max_output_tokens": 10,
                        "routes": [{"id": "r", "provider": "p", "upstream_model": "u", "apis": ["chat"],
                                    "price": {"input_per_mtok": 1, "output_per_mtok": 1}}]}],
            "policy": {"stream_cap_ms": ms, "disconnect_grace_ms": ms},
        });
        if let Ok(c) = Catalog::parse(doc.to_string().as_bytes()) {
            let p = c.policy_for(c.model("m").unwrap());
            prop_assert!(p.stream_cap_ms <= switchyard_core::catalog::MAX_TIMER_MS);
            prop_assert!(p.disconnect_grace_ms <= switchyard_core::catalog::MAX_AFTER_RESPONSE_MS);
            prop_assert_ne!(secret.as_str(), "ADMIN_TOKEN");
        }
    }
}
