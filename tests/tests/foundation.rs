//! Foundation rules (issue 2, SPEC §1, §2, §12, §13): keys, errors, byte-exact relay, secrets,
//! admin token. Each test builds its own provider/model/account so tests run concurrently.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, unique, Stack};

fn assert_ids(r: &switchyard_e2e::Reply) {
    assert!(
        r.header("x-request-id").is_some_and(|v| !v.is_empty()),
        "x-request-id missing"
    );
    assert!(
        r.header("x-generation-id").is_some_and(|v| v.starts_with("gen-")),
        "x-generation-id missing"
    );
}

/// An "ok" model on its own mock label; returns (model id, label, upstream model).
fn ok_model(s: &Stack) -> (String, String, String) {
    let label = unique("l");
    let provider = s.mock_provider(&label, "ok", false);
    let upstream = unique("up");
    let model = s.model_with_routes(&[(&provider, &upstream)], None);
    (model, label, upstream)
}

#[test]
fn missing_or_wrong_key_is_401_in_openai_shape() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let url = format!("{}/v1/chat/completions", s.gateway);
    let body = chat_body(&model, false).to_string();
    for headers in [
        vec![],
        vec![("authorization", "Bearer sk-sy-not-a-real-key")],
        vec![("x-api-key", "sk-sy-not-a-real-key")],
        vec![("authorization", "Basic abc")],
    ] {
        let r = s.request("POST", &url, &headers, Some(body.as_bytes()));
        assert_eq!(r.status, 401, "headers {headers:?}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], "invalid_api_key");
        assert_eq!(v["error"]["type"], "authentication_error");
        assert!(v["generation_id"].as_str().is_some_and(|g| g.starts_with("gen-")));
        assert_ids(&r);
    }
    let r = s.request("GET", &format!("{}/v1/models", s.gateway), &[], None);
    assert_eq!(r.status, 401);
}

#[test]
fn x_api_key_header_is_accepted() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let key = s.new_key(5.0);
    let r = s.request(
        "POST",
        &format!("{}/v1/chat/completions", s.gateway),
        &[("x-api-key", &key), ("content-type", "application/json")],
        Some(chat_body(&model, false).to_string().as_bytes()),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn unknown_model_is_404_with_available_models() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let key = s.new_key(5.0);
    let r = s.chat(&key, &chat_body("no/such-model", false));
    assert_eq!(r.status, 404, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], "model_not_found");
    let available: Vec<&str> = v["error"]["available_models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(available.contains(&model.as_str()), "{available:?} should list {model}");
    assert_ids(&r);
}

#[test]
fn bad_json_and_missing_fields_are_400_naming_the_field() {
    let s = Stack::from_env();
    let (model, label, _) = ok_model(&s);
    let key = s.new_key(5.0);
    let r = s.chat_raw(&key, b"{\"model\": ");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "invalid_request");
    assert_ids(&r);

    let r = s.chat(&key, &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "model");

    let r = s.chat(
        &key,
        &json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "models": [model, "other"]}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "models");

    let r = s.chat(
        &key,
        &json!({"model": model, "stream": "yes", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "stream");
    assert_eq!(
        s.mock_stats(&label, "ok")["requests"],
        0,
        "bad input never reaches the upstream"
    );
}

#[test]
fn stream_is_byte_exact_vs_the_mock() {
    let s = Stack::from_env();
    let label = unique("l");
    let scenario = "chunks/40/0";
    let provider = s.mock_provider(&label, scenario, false);
    let upstream = unique("up");
    let model = s.model_with_routes(&[(&provider, &upstream)], None);
    let key = s.new_key(5.0);
    let through = s.chat(&key, &chat_body(&model, true));
    assert_eq!(through.status, 200, "{}", through.text());
    assert!(through
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let direct = s.direct_chat(&label, scenario, &chat_body(&upstream, true));
    assert_eq!(direct.status, 200);
    assert!(direct.text().contains("data: [DONE]"));
    assert_eq!(
        through.text(),
        direct.text(),
        "the gateway must relay the stream byte for byte"
    );
    assert_ids(&through);
}

#[test]
fn non_stream_equals_the_mock_and_the_model_is_rewritten() {
    let s = Stack::from_env();
    let (model, label, upstream) = ok_model(&s);
    let key = s.new_key(5.0);
    let through = s.chat(&key, &chat_body(&model, false));
    assert_eq!(through.status, 200, "{}", through.text());
    let stats = s.mock_stats(&label, "ok");
    assert_eq!(stats["requests"], 1);
    assert_eq!(
        stats["last_request"]["body"]["model"],
        upstream.as_str(),
        "model rewritten to upstream_model"
    );
    assert_eq!(
        stats["last_request"]["body"]["messages"],
        chat_body(&model, false)["messages"],
        "body otherwise untouched"
    );
    assert_eq!(
        stats["last_request"]["body"]["max_completion_tokens"], 1024,
        "the output limit that was held (the model's) is sent along (SPEC §11)"
    );
    let direct = s.direct_chat(&label, "ok", &stats["last_request"]["body"]);
    // As the mock gave it, plus the charge in its usage (SPEC §11).
    let mut answer = through.json();
    let cost = answer["usage"].as_object_mut().unwrap().remove("cost");
    assert!(cost.and_then(|c| c.as_f64()).is_some_and(|c| c > 0.0));
    assert_eq!(answer, direct.json(), "the mock's answer, as it gave it");
    assert_ids(&through);
}

#[test]
fn switchyard_fields_are_not_forwarded() {
    let s = Stack::from_env();
    let (model, label, _) = ok_model(&s);
    let key = s.new_key(5.0);
    let mut body = chat_body(&model, false);
    body["provider"] = json!({"allow_fallbacks": true});
    body["models"] = json!([model]);
    body["temperature"] = json!(0.25);
    let r = s.chat(&key, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = &s.mock_stats(&label, "ok")["last_request"]["body"];
    assert!(seen.get("provider").is_none() && seen.get("models").is_none(), "{seen}");
    assert_eq!(seen["temperature"], 0.25);
}

#[test]
fn request_id_is_echoed() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let key = s.new_key(5.0);
    let rid = unique("client-req");
    let auth = format!("Bearer {key}");
    let r = s.request(
        "POST",
        &format!("{}/v1/chat/completions", s.gateway),
        &[("authorization", &auth), ("x-request-id", &rid)],
        Some(chat_body(&model, false).to_string().as_bytes()),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some(rid.as_str()));
}

#[test]
fn upstream_key_reaches_the_upstream_and_no_response() {
    let s = Stack::from_env();
    let label = unique("l");
    let ok = s.mock_provider(&label, "ok", true);
    let down_label = unique("l");
    let down = s.mock_provider(&down_label, "status/500", true);
    let bad_label = unique("l");
    let bad = s.mock_provider(&bad_label, "status/400/invalid", true);
    let upstream = unique("up");
    let model_ok = s.model_with_routes(&[(&ok, &upstream)], None);
    let model_down = s.model_with_routes(&[(&down, &upstream)], None);
    let model_bad = s.model_with_routes(&[(&bad, &upstream)], None);
    let refused_label = unique("l");
    let refused = s.mock_provider(&refused_label, "status/401/invalid_key", true);
    let model_refused = s.model_with_routes(&[(&refused, &upstream)], None);
    let key = s.new_key(5.0);

    let mut replies = vec![
        s.chat(&key, &chat_body(&model_ok, false)),
        s.chat(&key, &chat_body(&model_ok, true)),
        s.chat(&key, &chat_body(&model_down, false)),
        s.chat(&key, &chat_body(&model_bad, false)),
        s.chat(&key, &chat_body(&model_refused, true)),
        s.admin("GET", "/admin/catalog", None),
        s.request(
            "GET",
            &format!("{}/v1/models", s.gateway),
            &[("authorization", &format!("Bearer {key}"))],
            None,
        ),
    ];
    assert_eq!(replies[0].status, 200);
    assert_eq!(replies[2].status, 502);
    assert_eq!(replies[3].status, 400);
    assert_eq!(replies[4].status, 502);
    let seen = s.mock_stats(&label, "ok");
    assert_eq!(
        seen["last_request"]["headers"]["authorization"],
        format!("Bearer {}", s.upstream_key),
        "the provider's key is sent upstream"
    );
    for r in replies.drain(..) {
        let all = format!("{:?}{}", r.headers, r.text());
        assert!(!all.contains(&s.upstream_key), "upstream key leaked: {all}");
        assert!(!all.contains(&s.admin_token), "admin token leaked: {all}");
    }
}

#[test]
fn upstream_invalid_request_is_400_with_the_models_message_and_one_try() {
    let s = Stack::from_env();
    let label = unique("l");
    let scenario = "status/400/invalid";
    let provider = s.mock_provider(&label, scenario, false);
    let model = s.model_with_routes(&[(&provider, "x")], None);
    let key = s.new_key(5.0);
    let r = s.chat(&key, &chat_body(&model, false));
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], "upstream_invalid_request");
    assert!(v["error"]["message"].as_str().unwrap().contains("temperature"), "{v}");
    assert_eq!(s.mock_stats(&label, scenario)["requests"], 1);
}

#[test]
fn models_lists_the_catalog() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let key = s.new_key(1.0);
    let r = s.request(
        "GET",
        &format!("{}/v1/models", s.gateway),
        &[("authorization", &format!("Bearer {key}"))],
        None,
    );
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let m = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == model.as_str() && m["object"] == "model")
        .expect("the model is listed");
    // OpenRouter-style extras: window, APIs, USD per token, the status word.
    assert_eq!(
        (&m["context_window"], &m["max_output_tokens"]),
        (&json!(8192), &json!(1024))
    );
    // Every API reaches the model, its one route translating the others (SPEC §19).
    assert_eq!(m["supported_apis"], json!(["chat", "gemini", "messages", "responses"]));
    assert_eq!(m["native_apis"], json!(["chat"]));
    assert_eq!(m["pricing"], json!({"prompt": "0.000001", "completion": "0.000002"}));
    assert_eq!(m["pricing_max"], m["pricing"]);
    let word = m["status"].as_str().unwrap_or_default();
    assert!(
        ["operational", "degraded", "down", "no_recent_requests"].contains(&word),
        "{m}"
    );
    assert_ids(&r);
}

#[test]
fn a_deleted_key_stops_working() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let account = s.admin("POST", "/admin/accounts", Some(json!({}))).json();
    let account_id = account["id"].as_str().unwrap();
    s.admin(
        "POST",
        &format!("/admin/accounts/{account_id}/credit"),
        Some(json!({"amount_usd": 1})),
    );
    let created = s
        .admin("POST", "/admin/keys", Some(json!({"account_id": account_id})))
        .json();
    let (key_id, key) = (created["id"].as_str().unwrap(), created["key"].as_str().unwrap());
    assert_eq!(s.chat(key, &chat_body(&model, false)).status, 200);
    assert_eq!(s.admin("DELETE", &format!("/admin/keys/{key_id}"), None).status, 200);
    assert_eq!(s.admin("DELETE", &format!("/admin/keys/{key_id}"), None).status, 404);
    // SPEC §1: within 5 s (this Worker has one isolate, which forgets the key at once).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(6);
    loop {
        let r = s.chat(key, &chat_body(&model, false));
        if r.status == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "deleted key still accepted: {}",
            r.status
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

#[test]
fn admin_endpoints_refuse_without_the_token() {
    let s = Stack::from_env();
    let calls = [
        ("GET", "/admin/catalog"),
        ("PUT", "/admin/catalog"),
        ("PUT", "/admin/providers/x"),
        ("DELETE", "/admin/providers/x"),
        ("PUT", "/admin/models/x"),
        ("DELETE", "/admin/models/x"),
        ("POST", "/admin/accounts"),
        ("POST", "/admin/accounts/x/credit"),
        ("POST", "/admin/keys"),
        ("DELETE", "/admin/keys/x"),
        ("GET", "/admin/no-such-thing"),
    ];
    for (method, path) in calls {
        let bare_token = s.admin_token.clone(); // right token, wrong scheme
        for auth in [None, Some("Bearer wrong-token"), Some(bare_token.as_str())] {
            let headers: Vec<(&str, &str)> = auth.map(|a| vec![("authorization", a)]).unwrap_or_default();
            let r = s.request(method, &format!("{}{path}", s.gateway), &headers, Some(b"{}"));
            assert_eq!(r.status, 401, "{method} {path} with {auth:?}: {}", r.text());
            assert_eq!(r.json()["error"]["code"], "unauthorized");
        }
    }
}

#[test]
fn admin_refuses_invalid_entries_naming_the_field() {
    let s = Stack::from_env();
    let id = unique("m");
    let r = s.admin(
        "PUT",
        &format!("/admin/models/{id}"),
        Some(json!({"context_window": 10, "max_output_tokens": 10, "routes": [
            {"id": "r", "provider": "ghost-provider", "upstream_model": "x", "apis": ["chat"],
             "price": {"input_per_mtok": 1, "output_per_mtok": 1}}]})),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]["param"].as_str().unwrap().ends_with(".provider"));
    let r = s.admin(
        "PUT",
        &format!("/admin/models/{id}"),
        Some(json!({"context_window": 10, "max_output_tokens": 10, "routes": []})),
    );
    assert_eq!(r.status, 400);
    let r = s.admin(
        "PUT",
        &format!("/admin/providers/{}", unique("p")),
        Some(json!({"base_url": "http://x", "auth": "bearer", "colour": 1})),
    );
    assert_eq!(r.status, 400);
    assert!(r.text().contains("colour"));
    assert_eq!(
        s.admin("POST", "/admin/keys", Some(json!({"account_id": unique("nobody")})))
            .status,
        400
    );
    assert_eq!(
        s.admin(
            "POST",
            &format!("/admin/accounts/{}/credit", unique("nobody")),
            Some(json!({"amount_usd": 1}))
        )
        .status,
        404
    );
    assert_eq!(
        s.admin("POST", "/admin/accounts/x/credit", Some(json!({"amount_usd": -1})))
            .status,
        400
    );
}

#[test]
fn model_and_provider_entries_can_be_removed() {
    let s = Stack::from_env();
    let (model, _, _) = ok_model(&s);
    let key = s.new_key(1.0);
    assert_eq!(s.chat(&key, &chat_body(&model, false)).status, 200);
    let catalog = s.admin("GET", "/admin/catalog", None).json();
    let provider = catalog["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == model.as_str())
        .unwrap()["routes"][0]["provider"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.admin("DELETE", &format!("/admin/providers/{provider}"), None).status,
        400,
        "still used by a route"
    );
    assert_eq!(s.admin("DELETE", &format!("/admin/models/{model}"), None).status, 200);
    assert_eq!(s.chat(&key, &chat_body(&model, false)).status, 404);
    assert_eq!(
        s.admin("DELETE", &format!("/admin/providers/{provider}"), None).status,
        200
    );
    assert_eq!(s.admin("DELETE", &format!("/admin/models/{model}"), None).status, 404);
}

/// A client's connectivity check (`HEAD /`, Claude Code's) finds the gateway; an unknown path
/// answers 404 in the shape of the dialect it is under, so each SDK can read it (SPEC §21).
#[test]
fn the_root_answers_and_an_unknown_path_is_a_404_in_its_dialects_shape() {
    let s = Stack::from_env();
    for method in ["HEAD", "GET"] {
        let r = s.request(method, &format!("{}/", s.gateway), &[], None);
        assert_eq!(r.status, 200, "{method} /: {}", r.text());
        assert_ids(&r);
    }
    let key = s.new_key(1.0);
    let auth = format!("Bearer {key}");
    for (path, shape) in [
        ("/v1/messages/nope", "anthropic"),
        ("/v1beta/nope", "gemini"),
        ("/v1/nope", "openai"),
    ] {
        let r = s.request(
            "POST",
            &format!("{}{path}", s.gateway),
            &[("authorization", &auth)],
            Some(b"{}"),
        );
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        let v = r.json();
        match shape {
            "anthropic" => assert_eq!(
                (v["type"].as_str(), v["error"]["type"].as_str()),
                (Some("error"), Some("not_found_error")),
                "{path}: {v}"
            ),
            "gemini" => assert_eq!(
                (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
                (Some(404), Some("NOT_FOUND")),
                "{path}: {v}"
            ),
            _ => assert_eq!(v["error"]["code"].as_str(), Some("not_found"), "{path}: {v}"),
        }
    }
}
