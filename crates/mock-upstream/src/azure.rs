//! The Azure OpenAI fake: Azure's URL shapes, its key header, its content-filter annotations
//! and its content-filter error body, around the Chat and Responses dialects.
//!
//! Paths (after the usual `/<label>/<scenario…>` prefix, see [`crate::scenario`]):
//! - the v1 API, `…/openai/v1/chat/completions` and `…/openai/v1/responses`: the body's `model`
//!   names the deployment; `api-version` may be left out, or be `v1` or `preview` (anything else:
//!   400 `{"error":{"code":"BadRequest","message":"API version not supported"}}`);
//! - a deployment's URL, `…/openai/deployments/<deployment>/chat/completions?api-version=…`:
//!   `api-version` is required, `YYYY-MM-DD` or `YYYY-MM-DD-preview` (missing or malformed: 404
//!   `{"error":{"code":"404","message":"Resource not found"}}`, as Azure answers an unknown
//!   route); the body may leave `model` out (answers then name the deployment).
//!
//! Authentication: the `api-key` header must be the known key (`MOCK_AZURE_API_KEY`, default
//! [`DEFAULT_API_KEY`]); a missing or wrong key — an `Authorization: Bearer` header instead
//! included — is a 401 with Azure's [`ACCESS_DENIED`] words. The URL is checked before the key.
//!
//! Chat answers carry Azure's annotations (`prompt_filter_results`, each choice's
//! `content_filter_results`, a first stream chunk with the prompt's results and no choices);
//! the `content_filter` error kind answers in Azure's shape ([`content_filter_error`]), every
//! other error in OpenAI's.

use crate::http::{JsonReply, Request};
use crate::json::{array, Obj};

/// The key the mock accepts unless `MOCK_AZURE_API_KEY` says otherwise.
pub const DEFAULT_API_KEY: &str = "mock-azure-key";
/// Azure's 401 message.
pub const ACCESS_DENIED: &str = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.";
/// Azure's content-filter refusal.
pub const FILTERED: &str = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766";
/// The harm categories every filter result reports.
const CATEGORIES: [&str; 4] = ["hate", "self_harm", "sexual", "violence"];

/// `MOCK_AZURE_API_KEY`, or [`DEFAULT_API_KEY`] when unset or empty.
pub fn key_from_env() -> String {
    std::env::var("MOCK_AZURE_API_KEY")
        .ok()
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| DEFAULT_API_KEY.to_string())
}

/// `{"error":{"code":…,"message":…}}`, the shape of Azure's own refusals.
fn azure_error(status: u16, code: &str, message: &str) -> JsonReply {
    let body = Obj::new()
        .obj("error", Obj::new().str("code", code).str("message", message))
        .build();
    JsonReply::new(status, body)
}

/// `YYYY-MM-DD` or `YYYY-MM-DD-preview`.
fn dated_version(v: &str) -> bool {
    let date = v.strip_suffix("-preview").unwrap_or(v).as_bytes();
    date.len() == 10
        && date.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// Checks the URL's `api-version` (for a deployment's URL when `deployment` is given, else for
/// the v1 API), then the `api-key` header against `key`.
pub fn admit(req: &Request, deployment: Option<&str>, key: &str) -> Result<(), JsonReply> {
    let versions = req.query_values("api-version");
    let version = versions.first().map(String::as_str);
    match (deployment, version) {
        (Some(_), Some(v)) if dated_version(v) => {}
        (Some(_), _) => return Err(azure_error(404, "404", "Resource not found")),
        (None, None | Some("v1" | "preview")) => {}
        (None, Some(_)) => return Err(azure_error(400, "BadRequest", "API version not supported")),
    }
    if req.header("api-key") != Some(key) {
        return Err(azure_error(401, "401", ACCESS_DENIED));
    }
    Ok(())
}

/// One filter result per harm category: all `safe`, or all `high` and filtered.
pub fn filter_results(filtered: bool) -> Obj {
    let severity = if filtered { "high" } else { "safe" };
    CATEGORIES.iter().fold(Obj::new(), |o, category| {
        o.obj(
            category,
            Obj::new()
                .raw("filtered", if filtered { "true" } else { "false" })
                .str("severity", severity),
        )
    })
}

/// `prompt_filter_results`: the one prompt's results, jailbreak detection included.
pub fn prompt_filter_results() -> String {
    let results = filter_results(false).obj(
        "jailbreak",
        Obj::new().raw("filtered", "false").raw("detected", "false"),
    );
    array(vec![Obj::new()
        .num("prompt_index", 0)
        .obj("content_filter_results", results)
        .build()])
}

/// The body of a prompt Azure's content filter refused (400).
pub fn content_filter_error() -> String {
    Obj::new()
        .obj(
            "error",
            Obj::new()
                .str("message", FILTERED)
                .str("type", "invalid_request_error")
                .str("param", "prompt")
                .str("code", "content_filter")
                .num("status", 400)
                .obj(
                    "innererror",
                    Obj::new()
                        .str("code", "ResponsibleAIPolicyViolation")
                        .obj("content_filter_result", filter_results(true)),
                ),
        )
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn req(target: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            target: target.into(),
            version: "HTTP/1.1".into(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: Vec::new(),
        }
    }

    fn refusal(r: Result<(), JsonReply>) -> (u16, Value) {
        let reply = r.expect_err("should be refused");
        (reply.status, serde_json::from_str(&reply.body).unwrap())
    }

    #[test]
    fn urls_then_keys() {
        let key = [("api-key", DEFAULT_API_KEY)];
        let deployment = Some("gpt-4o");
        let dep = "/openai/deployments/gpt-4o/chat/completions";
        assert!(admit(
            &req(&format!("{dep}?api-version=2024-10-21"), &key),
            deployment,
            DEFAULT_API_KEY
        )
        .is_ok());
        assert!(admit(
            &req(&format!("{dep}?api-version=2025-04-01-preview"), &key),
            deployment,
            DEFAULT_API_KEY
        )
        .is_ok());
        for bad in [
            "",
            "?api-version=",
            "?api-version=latest",
            "?api-version=2024-1-21",
            "?version=2024-10-21",
        ] {
            assert_eq!(
                refusal(admit(&req(&format!("{dep}{bad}"), &key), deployment, DEFAULT_API_KEY)),
                (
                    404,
                    serde_json::json!({"error": {"code": "404", "message": "Resource not found"}})
                ),
                "{bad}"
            );
        }
        // The URL first: a bad URL with a bad key is still a 404.
        assert_eq!(refusal(admit(&req(dep, &[]), deployment, DEFAULT_API_KEY)).0, 404);
        let v1 = "/openai/v1/chat/completions";
        for ok in ["", "?api-version=v1", "?api-version=preview"] {
            assert!(
                admit(&req(&format!("{v1}{ok}"), &key), None, DEFAULT_API_KEY).is_ok(),
                "{ok}"
            );
        }
        assert_eq!(
            refusal(admit(
                &req(&format!("{v1}?api-version=2024-10-21"), &key),
                None,
                DEFAULT_API_KEY
            ))
            .0,
            400
        );
        let denied = (
            401,
            serde_json::json!({"error": {"code": "401", "message": ACCESS_DENIED}}),
        );
        assert_eq!(refusal(admit(&req(v1, &[]), None, DEFAULT_API_KEY)), denied);
        assert_eq!(
            refusal(admit(&req(v1, &[("api-key", "wrong")]), None, DEFAULT_API_KEY)),
            denied
        );
        assert_eq!(
            refusal(admit(
                &req(v1, &[("authorization", "Bearer mock-azure-key")]),
                None,
                DEFAULT_API_KEY
            )),
            denied
        );
    }

    #[test]
    fn content_filter_shapes() {
        let e: Value = serde_json::from_str(&content_filter_error()).unwrap();
        assert_eq!(e["error"]["code"], "content_filter");
        assert!(e["error"]["message"].as_str().unwrap().starts_with(
            "The response was filtered due to the prompt triggering Azure OpenAI's content management policy"
        ));
        assert_eq!(e["error"]["innererror"]["code"], "ResponsibleAIPolicyViolation");
        assert_eq!(
            e["error"]["innererror"]["content_filter_result"]["violence"],
            serde_json::json!({"filtered": true, "severity": "high"})
        );
        let p: Value = serde_json::from_str(&prompt_filter_results()).unwrap();
        assert_eq!(p[0]["prompt_index"], 0);
        assert_eq!(
            p[0]["content_filter_results"]["hate"],
            serde_json::json!({"filtered": false, "severity": "safe"})
        );
        assert_eq!(p[0]["content_filter_results"]["jailbreak"]["detected"], false);
    }
}
