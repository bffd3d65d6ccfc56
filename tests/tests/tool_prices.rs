//! Priced server tools (SPEC §21, issue 35): a tool the provider runs and bills per use — web
//! search first, as Codex sends it by default — is served by the routes whose catalog entry prices
//! it (`tool_prices`, USD per use), held for the uses the request allows, counted from the answer
//! (whole and streamed) and charged per use on `/v1/generation`. A route without the price is
//! unable for that request; with none, the client gets a 400 naming the tool.
//!
//! Routes here cost nothing per token, so a charge is exactly the tool's uses × its price.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{attempts_of, fast_policy, pairs, sse_events, with, Api, Fixture, Stack};

/// A cent per search.
const PRICE: f64 = 0.01;

fn free_tokens(extra: Value) -> Value {
    with(json!({"price": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}}), extra)
}

fn priced() -> Value {
    free_tokens(json!({"tool_prices": {"web_search": PRICE}}))
}

/// Codex's default tool list: a function tool and web search.
fn codex_tools() -> Value {
    json!({"tools": [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}},
                     {"type": "web_search"}]})
}

fn anthropic_search(max_uses: Option<u64>) -> Value {
    let mut tool = json!({"type": "web_search_20250305", "name": "web_search"});
    if let Some(n) = max_uses {
        tool["max_uses"] = json!(n);
    }
    json!({"tools": [tool]})
}

fn send(f: &Fixture, stream: bool, fields: Value) -> switchyard_e2e::Reply {
    let body = with(f.api.body(&f.model, stream), fields);
    f.s.send(f.api, &f.key, &body, &[])
}

/// The record's web search uses and their cost.
fn searches(g: &Value) -> (u64, f64) {
    let t = &g["server_tools"]["web_search"];
    (
        t["uses"]
            .as_u64()
            .unwrap_or_else(|| panic!("no web search uses recorded: {g}")),
        t["cost"].as_f64().unwrap(),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn priced_responses_web_search_is_served_and_charged_per_use() {
    let f = Fixture::build(Api::Responses, &["searches/2"], &[priced()], fast_policy(), false);
    for stream in [false, true] {
        let r = send(&f, stream, codex_tools());
        assert_eq!(r.status, 200, "stream {stream}: {}", r.text());
        let text = r.text();
        // The provider's own output items reach the client.
        let calls = if stream {
            sse_events(&text)
                .iter()
                .filter(|(name, data)| {
                    name.as_deref() == Some("response.output_item.done") && data.contains("\"web_search_call\"")
                })
                .count()
        } else {
            r.json()["output"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i["type"] == "web_search_call")
                .count()
        };
        assert_eq!(calls, 2, "stream {stream}: {text}");
        let g = f.generation(&r);
        let (uses, cost) = searches(&g);
        assert_eq!(uses, 2, "stream {stream}: {g}");
        assert!(close(cost, 2.0 * PRICE), "{g}");
        assert!(close(g["total_cost"].as_f64().unwrap(), 2.0 * PRICE), "{g}");
    }
}

#[test]
fn priced_anthropic_web_search_counts_the_providers_usage() {
    let f = Fixture::build(Api::Messages, &["searches/3"], &[priced()], fast_policy(), false);
    for stream in [false, true] {
        let r = send(&f, stream, anthropic_search(Some(5)));
        assert_eq!(r.status, 200, "stream {stream}: {}", r.text());
        assert!(r.text().contains("web_search_requests"), "{}", r.text());
        let g = f.generation(&r);
        assert_eq!(searches(&g).0, 3, "stream {stream}: {g}");
        assert!(close(g["total_cost"].as_f64().unwrap(), 3.0 * PRICE), "{g}");
    }
}

#[test]
fn priced_gemini_and_chat_web_search_are_charged_per_use() {
    // Gemini: the queries grounding with Google Search ran.
    let f = Fixture::build(Api::Gemini, &["searches/2"], &[priced()], fast_policy(), false);
    for stream in [false, true] {
        let r = send(&f, stream, json!({"tools": [{"googleSearch": {}}]}));
        assert_eq!(r.status, 200, "stream {stream}: {}", r.text());
        assert!(r.text().contains("webSearchQueries"), "{}", r.text());
        let g = f.generation(&r);
        assert_eq!(searches(&g).0, 2, "stream {stream}: {g}");
        assert!(close(g["total_cost"].as_f64().unwrap(), 2.0 * PRICE), "{g}");
    }
    // Chat: a search model searches once per answer.
    let f = Fixture::build(Api::Chat, &["ok"], &[priced()], fast_policy(), false);
    for stream in [false, true] {
        let r = send(&f, stream, json!({"web_search_options": {}}));
        assert_eq!(r.status, 200, "stream {stream}: {}", r.text());
        let g = f.generation(&r);
        assert_eq!(searches(&g), (1, PRICE), "stream {stream}: {g}");
    }
}

#[test]
fn priced_a_route_without_the_price_is_skipped() {
    let f = Fixture::build(
        Api::Responses,
        &["searches/1", "searches/1"],
        &[free_tokens(json!({})), priced()],
        fast_policy(),
        false,
    );
    let r = send(&f, false, codex_tools());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-route"), Some("r1"));
    assert_eq!(f.seen(0), 0, "the route without a price was sent the tool");
    assert_eq!(attempts_of(&f.generation(&r)), pairs(&[("r1", "answered")]));
    // A request without the tool goes the usual way.
    let r = send(&f, false, json!({}));
    assert_eq!(r.header("x-switchyard-route"), Some("r0"), "{}", r.text());
}

#[test]
fn priced_no_route_with_a_price_is_a_400_naming_the_tool() {
    // Responses and Messages clients of models whose routes price nothing, or price it only on
    // a route of another API (a provider's tool is never translated).
    for (api, fields) in [(Api::Responses, codex_tools()), (Api::Messages, anthropic_search(None))] {
        for extra in [free_tokens(json!({})), priced()] {
            let other = if api == Api::Responses { "chat" } else { "responses" };
            let translated = extra.get("tool_prices").is_some();
            let extra = if translated {
                with(extra, json!({"apis": [other]}))
            } else {
                extra
            };
            let f = Fixture::build(api, &["searches/1"], &[extra], fast_policy(), false);
            let r = send(&f, false, fields.clone());
            assert_eq!(r.status, 400, "{api:?} translated {translated}: {}", r.text());
            let e = r.json();
            let text = e.to_string();
            assert!(text.contains("web_search"), "{text}");
            assert!(text.contains("tool_prices") || text.contains("price"), "{text}");
            if api == Api::Messages {
                assert_eq!(e["type"], "error", "Anthropic's error shape: {text}");
            } else {
                assert_eq!(e["error"]["param"], "tools[1]", "{text}");
            }
            assert_eq!(f.seen(0), 0);
        }
    }
}

#[test]
fn priced_the_hold_covers_the_allowed_uses_and_bounds_the_charge() {
    let s = Stack::from_env();
    let f = Fixture::build(Api::Messages, &["searches/4"], &[priced()], fast_policy(), false);
    // 2.5 cents: two searches fit, three do not.
    let poor = s.new_key(0.025);
    let send_as = |key: &str, fields: Value| {
        let body = with(Api::Messages.body(&f.model, false), fields);
        s.send(Api::Messages, key, &body, &[])
    };
    let r = send_as(&poor, anthropic_search(Some(3)));
    assert_eq!(r.status, 402, "three uses are held: {}", r.text());
    let r = send_as(&poor, anthropic_search(Some(2)));
    assert_eq!(r.status, 200, "{}", r.text());
    let g = s.generation(&poor, r.header("x-generation-id").unwrap());
    assert_eq!(searches(&g).0, 2, "the provider keeps to max_uses: {g}");
    // Without `max_uses` the policy's default is held (here 2), and the provider is told it.
    let policy = with(fast_policy(), json!({"held_tool_uses": 2}));
    let f = Fixture::build(Api::Messages, &["searches/4"], &[priced()], policy.clone(), false);
    let r = send(&f, false, anthropic_search(None));
    assert_eq!(r.status, 200, "{}", r.text());
    let (label, scenario) = &f.routes[0];
    let sent = &f.s.mock_stats(label, scenario)["last_request"]["body"];
    assert_eq!(sent["tools"][0]["max_uses"], 2, "the held uses are forwarded: {sent}");
    let g = f.generation(&r);
    assert_eq!(searches(&g).0, 2, "{g}");
    assert!(close(g["total_cost"].as_f64().unwrap(), 2.0 * PRICE), "{g}");
    // Gemini has no such field: searches past the held ones are not charged, and flagged.
    let f = Fixture::build(Api::Gemini, &["searches/4"], &[priced()], policy, false);
    let r = send(&f, false, json!({"tools": [{"googleSearch": {}}]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let g = f.generation(&r);
    assert_eq!(searches(&g).0, 2, "{g}");
    assert!(close(g["total_cost"].as_f64().unwrap(), 2.0 * PRICE), "{g}");
    assert_eq!(g["usage"]["clamped"], true, "{g}");
}

#[test]
fn priced_the_catalog_refuses_bad_tool_prices() {
    let s = Stack::from_env();
    let provider = s.mock_provider("priced-catalog", "ok", false);
    for (prices, field) in [
        (json!({"web_search": -0.01}), "web_search"),
        (json!({"web_search": 0}), "web_search"),
        (json!({"teleport": 0.01}), "teleport"),
        (json!({"web_search": "cheap"}), "tool_prices"),
    ] {
        let route = json!({"id": "r0", "provider": provider, "upstream_model": "u", "apis": ["responses"],
                           "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}, "tool_prices": prices});
        let doc = json!({"context_window": 8192, "max_output_tokens": 1024, "routes": [route]});
        let r = s.admin("PUT", "/admin/models/priced-bad", Some(doc));
        assert_eq!(r.status, 400, "{prices}: {}", r.text());
        assert!(r.text().contains(field), "{prices}: {}", r.text());
    }
}
