//! Every error a client can receive (SPEC §13), and how it is rendered in each dialect.
//!
//! `src/http` turns an [`ApiError`] into a `Response` in exactly one function; this module decides
//! status, code, type and message. Messages never contain secrets: upstream keys, API keys and the
//! admin token are never part of any variant.

use serde_json::{json, Value};

use crate::limits::{rate_headers, RateWindow};

/// The error body shape a client expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    OpenAi,
    Anthropic,
    /// `{"error": {"code", "message", "status", "details"}}` (Google APIs).
    Gemini,
}

impl ErrorShape {
    /// The shape of an answer on `path`, by the dialect whose prefix it is under: Anthropic's
    /// `/v1/messages` and what is below it (`/v1/messages/count_tokens`, an unknown path), Gemini's
    /// `/v1beta/`, OpenAI's for the rest — so an SDK reads even a 404 in its own shape.
    pub fn for_path(path: &str) -> ErrorShape {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            ErrorShape::Anthropic
        } else if path.starts_with("/v1beta/") {
            ErrorShape::Gemini
        } else {
            ErrorShape::OpenAi
        }
    }
}

/// An error that ends a request with an error response.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// 400: bad JSON, missing or invalid fields; names the field.
    InvalidRequest { message: String, param: Option<String> },
    /// 401: missing or unknown API key.
    InvalidApiKey,
    /// 401 on `/admin/*` without the admin token.
    AdminUnauthorized,
    /// 402: the account's available balance cannot cover even the cheapest route.
    InsufficientBalance,
    /// 402: the key has reached its spend limit.
    SpendLimitReached,
    /// 404: the model is not in the catalog.
    ModelNotFound { model: String, available: Vec<String> },
    /// 404: no such path, or an admin entity that does not exist.
    NotFound { what: String },
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 426: a WebSocket upgrade on `/v1/responses` (OpenAI's WebSocket mode), refused at once so
    /// the client falls back to HTTP (SPEC §21).
    WebSocketUnsupported,
    /// 429: the API key is at its `rpm` or `max_concurrent` limit and no room came within
    /// `key_wait_ms` (SPEC §10).
    KeyRateLimited {
        retry_after_s: u64,
        /// The key's `rpm` window, for the rate-limit headers (none for a concurrency limit alone).
        window: Option<RateWindow>,
    },
    /// 429: every capped route of the model is full and none freed within `capacity_wait_ms`.
    CapacityBusy { retry_after_s: u64 },
    /// 409: an admin write raced another (the catalog moved on since it was read).
    Conflict { message: String },
    /// 503: the model has no route serving this dialect.
    SupplyNotConfigured { model: String },
    /// 502: every route failed.
    ProviderError { model: String },
    /// 503: every route failed as overloaded / rate limited.
    CapacityExhausted {
        model: String,
        available: Vec<String>,
        retry_after_s: u64,
    },
    /// 400: the upstream refused the request itself (class `invalid_request`).
    UpstreamInvalidRequest { message: String },
    /// 400: every route refused the request under its content policy.
    ContentPolicy { message: String },
    /// 503: the ledger (D1) cannot be reached to place a hold; nothing was charged.
    StorageUnavailable,
    /// 503: the route that holds a conversation's state (`previous_response_id`) did not answer;
    /// no other route can continue it (SPEC §17).
    StateUnavailable { model: String },
    /// 503: this isolate already holds as many request bodies as it safely can (SPEC §18); the
    /// request was not read.
    GatewayBusy,
    /// 408: the request body arrived slower than the floor rate (SPEC §18a); reading stopped and
    /// nothing was charged.
    BodyTooSlow { floor_kib_s: u64 },
    /// 500: Switchyard's own storage or runtime failed; `label` is for logs, never user data.
    Internal { label: &'static str },
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError::InvalidRequest {
            message: message.into(),
            param: param.map(str::to_string),
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::InvalidRequest { .. }
            | ApiError::UpstreamInvalidRequest { .. }
            | ApiError::ContentPolicy { .. } => 400,
            ApiError::InvalidApiKey | ApiError::AdminUnauthorized => 401,
            ApiError::InsufficientBalance | ApiError::SpendLimitReached => 402,
            ApiError::ModelNotFound { .. } | ApiError::NotFound { .. } => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::BodyTooSlow { .. } => 408,
            ApiError::WebSocketUnsupported => 426,
            ApiError::Conflict { .. } => 409,
            ApiError::KeyRateLimited { .. } | ApiError::CapacityBusy { .. } => 429,
            ApiError::Internal { .. } => 500,
            ApiError::ProviderError { .. } => 502,
            ApiError::SupplyNotConfigured { .. }
            | ApiError::CapacityExhausted { .. }
            | ApiError::StorageUnavailable
            | ApiError::StateUnavailable { .. }
            | ApiError::GatewayBusy => 503,
        }
    }

    /// Machine-readable code, also the low-cardinality label for logs.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest { .. } => "invalid_request",
            ApiError::InvalidApiKey => "invalid_api_key",
            ApiError::AdminUnauthorized => "unauthorized",
            ApiError::InsufficientBalance => "insufficient_balance",
            ApiError::SpendLimitReached => "spend_limit_reached",
            ApiError::ModelNotFound { .. } => "model_not_found",
            ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::WebSocketUnsupported => "websocket_unsupported",
            ApiError::Conflict { .. } => "conflict",
            ApiError::KeyRateLimited { .. } => "key_rate_limited",
            ApiError::CapacityBusy { .. } => "capacity_busy",
            ApiError::SupplyNotConfigured { .. } => "supply_not_configured",
            ApiError::ProviderError { .. } => "provider_error",
            ApiError::CapacityExhausted { .. } => "upstream_capacity_exhausted",
            ApiError::UpstreamInvalidRequest { .. } => "upstream_invalid_request",
            ApiError::ContentPolicy { .. } => "content_policy",
            ApiError::StorageUnavailable => "storage_unavailable",
            ApiError::GatewayBusy => "gateway_busy",
            ApiError::BodyTooSlow { .. } => "request_timeout",
            ApiError::StateUnavailable { .. } => "upstream_state_unavailable",
            ApiError::Internal { .. } => "internal_error",
        }
    }

    pub fn message(&self) -> String {
        match self {
            ApiError::InvalidRequest { message, .. }
            | ApiError::UpstreamInvalidRequest { message }
            | ApiError::ContentPolicy { message }
            | ApiError::Conflict { message } => message.clone(),
            ApiError::InvalidApiKey => "Invalid or missing API key. Pass it as `Authorization: Bearer <key>` or `x-api-key: <key>`.".into(),
            ApiError::AdminUnauthorized => "Admin token required.".into(),
            ApiError::InsufficientBalance => "Insufficient balance. Top up at the dashboard.".into(),
            ApiError::SpendLimitReached => "This API key has reached its spend limit.".into(),
            ApiError::ModelNotFound { model, .. } => format!("Model `{model}` does not exist. See available_models."),
            ApiError::NotFound { what } => format!("{what} not found."),
            ApiError::MethodNotAllowed => "Method not allowed on this path.".into(),
            ApiError::WebSocketUnsupported => {
                "Responses over WebSocket is not served here: send `POST /v1/responses` over HTTP (`stream: true` for events).".into()
            }
            ApiError::KeyRateLimited { .. } => "This API key has reached its rate or concurrency limit.".into(),
            ApiError::CapacityBusy { .. } => "All upstream capacity for this model is busy. Retry shortly.".into(),
            ApiError::SupplyNotConfigured { model } => {
                format!("Model {model} has no route serving this API. Nothing was charged.")
            }
            ApiError::ProviderError { model } => {
                format!("Model {model} is not available right now. Nothing was charged. Retry in a moment.")
            }
            ApiError::CapacityExhausted { model, retry_after_s, .. } => format!(
                "Every provider of model {model} is over capacity right now. Nothing was charged. Retry in {retry_after_s} s or use one of available_models."
            ),
            ApiError::StorageUnavailable => {
                "Switchyard cannot reach its ledger right now. Nothing was charged. Retry in a moment.".into()
            }
            ApiError::StateUnavailable { model } => format!(
                "The route of model {model} that holds this conversation (`previous_response_id`) is not answering right now, and no other route can continue it. Nothing was charged. Retry in a moment."
            ),
            ApiError::GatewayBusy => {
                "This gateway instance is busy with other large requests. Nothing was charged. Retry in a moment.".into()
            }
            ApiError::BodyTooSlow { floor_kib_s } => format!(
                "The request body arrived slower than {floor_kib_s} KiB/s, so Switchyard stopped reading it. Nothing was charged."
            ),
            ApiError::Internal { .. } => "Switchyard had an internal error. Nothing was charged. Retry in a moment.".into(),
        }
    }

    fn openai_type(&self) -> &'static str {
        match self.status() {
            400 | 404 | 405 | 408 | 409 | 426 => "invalid_request_error",
            401 => "authentication_error",
            402 => "insufficient_quota",
            429 => "rate_limit_exceeded",
            503 => "service_unavailable",
            _ => "api_error",
        }
    }

    fn anthropic_type(&self) -> &'static str {
        match self.status() {
            400 | 405 | 408 | 409 | 426 => "invalid_request_error",
            401 => "authentication_error",
            402 => "billing_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        }
    }

    /// Google's status word for the HTTP status.
    fn gemini_status(&self) -> &'static str {
        match self.status() {
            400 | 405 | 426 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            402 => "FAILED_PRECONDITION",
            404 => "NOT_FOUND",
            408 => "DEADLINE_EXCEEDED",
            409 => "ABORTED",
            429 => "RESOURCE_EXHAUSTED",
            502 | 503 => "UNAVAILABLE",
            _ => "INTERNAL",
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ApiError::InvalidRequest { param, .. } => param.as_deref(),
            ApiError::ModelNotFound { .. } => Some("model"),
            _ => None,
        }
    }

    fn available_models(&self) -> Option<&[String]> {
        match self {
            ApiError::ModelNotFound { available, .. } | ApiError::CapacityExhausted { available, .. } => {
                Some(available)
            }
            _ => None,
        }
    }

    /// Seconds for a `retry-after` header, where the error has one.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::CapacityExhausted { retry_after_s, .. }
            | ApiError::KeyRateLimited { retry_after_s, .. }
            | ApiError::CapacityBusy { retry_after_s } => Some(*retry_after_s),
            ApiError::StorageUnavailable | ApiError::GatewayBusy | ApiError::StateUnavailable { .. } => Some(1),
            _ => None,
        }
    }

    /// The headers the error response carries: `retry-after` where the error has one, and a
    /// rate-limited key's `x-ratelimit-*` (SPEC §10).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers: Vec<(&'static str, String)> = self
            .retry_after_s()
            .map(|s| ("retry-after", s.to_string()))
            .into_iter()
            .collect();
        if let ApiError::KeyRateLimited { window: Some(w), .. } = self {
            headers.extend(rate_headers(w));
        }
        headers
    }

    /// The error body in the client's dialect, with `generation_id` and, where it helps,
    /// `available_models`.
    pub fn body(&self, shape: ErrorShape, generation_id: &str) -> Value {
        let mut error = match shape {
            ErrorShape::Gemini => {
                let mut metadata = json!({"generation_id": generation_id});
                if let Some(param) = self.param() {
                    metadata["param"] = json!(param);
                }
                if let Some(models) = self.available_models() {
                    metadata["available_models"] = json!(models.join(","));
                }
                let info = json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": self.code(),
                                  "domain": "switchyard", "metadata": metadata});
                return json!({"error": {"code": self.status(), "message": self.message(),
                                        "status": self.gemini_status(), "details": [info]}});
            }
            ErrorShape::OpenAi => json!({
                "message": self.message(),
                "type": self.openai_type(),
                "param": self.param(),
                "code": self.code(),
            }),
            ErrorShape::Anthropic => json!({
                "type": self.anthropic_type(),
                "message": self.message(),
                "code": self.code(),
            }),
        };
        if let (Some(models), Some(obj)) = (self.available_models(), error.as_object_mut()) {
            obj.insert("available_models".into(), json!(models));
        }
        match shape {
            ErrorShape::Anthropic => {
                json!({"type": "error", "error": error, "generation_id": generation_id})
            }
            _ => json!({"error": error, "generation_id": generation_id}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_answers_in_the_shape_of_the_dialect_it_is_under() {
        for (path, shape) in [
            ("/v1/messages", ErrorShape::Anthropic),
            ("/v1/messages/count_tokens", ErrorShape::Anthropic),
            ("/v1/messages/batches/x", ErrorShape::Anthropic),
            ("/v1/messagesx", ErrorShape::OpenAi),
            ("/v1beta/models/m:countTokens", ErrorShape::Gemini),
            ("/v1beta/nope", ErrorShape::Gemini),
            ("/v1/chat/completions", ErrorShape::OpenAi),
            ("/v1/responses/input_tokens", ErrorShape::OpenAi),
            ("/nope", ErrorShape::OpenAi),
        ] {
            assert_eq!(ErrorShape::for_path(path), shape, "{path}");
        }
    }

    #[test]
    fn openai_and_anthropic_shapes() {
        let e = ApiError::ModelNotFound {
            model: "x".into(),
            available: vec!["a".into(), "b".into()],
        };
        let o = e.body(ErrorShape::OpenAi, "gen-1");
        assert_eq!(e.status(), 404);
        assert_eq!(o["error"]["code"], "model_not_found");
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["available_models"], json!(["a", "b"]));
        assert_eq!(o["generation_id"], "gen-1");
        let a = e.body(ErrorShape::Anthropic, "gen-1");
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "not_found_error");
        assert_eq!(a["generation_id"], "gen-1");
    }

    #[test]
    fn gemini_shape_carries_the_status_word_and_the_code_in_details() {
        let cases = [
            (ApiError::invalid("bad", Some("contents")), 400, "INVALID_ARGUMENT"),
            (ApiError::InvalidApiKey, 401, "UNAUTHENTICATED"),
            (ApiError::InsufficientBalance, 402, "FAILED_PRECONDITION"),
            (
                ApiError::KeyRateLimited {
                    retry_after_s: 1,
                    window: None,
                },
                429,
                "RESOURCE_EXHAUSTED",
            ),
            (ApiError::ProviderError { model: "m".into() }, 502, "UNAVAILABLE"),
            (ApiError::StorageUnavailable, 503, "UNAVAILABLE"),
            (ApiError::GatewayBusy, 503, "UNAVAILABLE"),
            (ApiError::BodyTooSlow { floor_kib_s: 16 }, 408, "DEADLINE_EXCEEDED"),
        ];
        for (e, status, word) in cases {
            let g = e.body(ErrorShape::Gemini, "gen-9");
            assert_eq!(g["error"]["code"], status);
            assert_eq!(g["error"]["status"], word);
            assert_eq!(g["error"]["message"], e.message());
            let info = &g["error"]["details"][0];
            assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
            assert_eq!(info["reason"], e.code());
            assert_eq!(info["metadata"]["generation_id"], "gen-9");
        }
        let g = ApiError::invalid("bad", Some("contents")).body(ErrorShape::Gemini, "g");
        assert_eq!(g["error"]["details"][0]["metadata"]["param"], "contents");
    }

    #[test]
    fn payment_errors_per_dialect() {
        let e = ApiError::InsufficientBalance;
        assert_eq!(e.status(), 402);
        assert_eq!(e.body(ErrorShape::OpenAi, "g")["error"]["type"], "insufficient_quota");
        assert_eq!(e.body(ErrorShape::OpenAi, "g")["error"]["code"], "insufficient_balance");
        assert_eq!(e.body(ErrorShape::Anthropic, "g")["error"]["type"], "billing_error");
        assert_eq!(e.message(), "Insufficient balance. Top up at the dashboard.");
        assert_eq!(
            ApiError::SpendLimitReached.message(),
            "This API key has reached its spend limit."
        );
    }

    #[test]
    fn limits_are_429_in_each_dialect_with_retry_after() {
        let window = RateWindow {
            limit: 3,
            remaining: 0,
            reset_ms: 41_200,
        };
        let key = ApiError::KeyRateLimited {
            retry_after_s: 7,
            window: Some(window),
        };
        assert_eq!(
            key.headers(),
            vec![
                ("retry-after", "7".to_string()),
                ("x-ratelimit-limit-requests", "3".to_string()),
                ("x-ratelimit-remaining-requests", "0".to_string()),
                ("x-ratelimit-reset-requests", "42s".to_string()),
            ]
        );
        let busy_headers = ApiError::CapacityBusy { retry_after_s: 1 }.headers();
        assert_eq!(busy_headers, vec![("retry-after", "1".to_string())]);
        assert_eq!(
            (key.status(), key.code(), key.retry_after_s()),
            (429, "key_rate_limited", Some(7))
        );
        assert_eq!(key.message(), "This API key has reached its rate or concurrency limit.");
        assert_eq!(
            key.body(ErrorShape::OpenAi, "g")["error"]["type"],
            "rate_limit_exceeded"
        );
        assert_eq!(
            key.body(ErrorShape::Anthropic, "g")["error"]["type"],
            "rate_limit_error"
        );
        let busy = ApiError::CapacityBusy { retry_after_s: 1 };
        assert_eq!((busy.status(), busy.code()), (429, "capacity_busy"));
        assert_eq!(
            busy.message(),
            "All upstream capacity for this model is busy. Retry shortly."
        );
    }

    #[test]
    fn provider_error_message_is_exact() {
        let e = ApiError::ProviderError { model: "acme/x".into() };
        assert_eq!(e.status(), 502);
        assert_eq!(
            e.message(),
            "Model acme/x is not available right now. Nothing was charged. Retry in a moment."
        );
        assert_eq!(e.body(ErrorShape::OpenAi, "g")["error"]["type"], "api_error");
    }
}
