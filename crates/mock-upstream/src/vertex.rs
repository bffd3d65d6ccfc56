//! The Google Vertex AI fake: an OAuth2 token endpoint that mints access tokens for a signed
//! service-account JWT, and the Vertex prediction paths for Google's models (Gemini bodies) and
//! Anthropic's (Messages bodies for Vertex), each call checked for a token it minted.
//!
//! Token endpoint ([`token_endpoint`]): `POST /token`, a form body with
//! `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` and `assertion=<JWT>`. The JWT must be
//! RS256 (header `alg`), signed by the service account's key — its public half read at start from
//! `MOCK_VERTEX_PUBLIC_KEY_PEM` (a `PUBLIC KEY` PEM; without it every JWT is refused) — with
//! claims `iss` (the account's email), `scope` holding `…/auth/cloud-platform`, `aud` this
//! endpoint's own URL (`http://<Host>/token`), `iat` within five minutes of now and `exp` after
//! now, at most an hour after `iat`. Refusals are Google's: 400 `{"error": "invalid_grant",
//! "error_description": …}` (`Invalid JWT Signature.`, `Invalid JWT: …`), `unsupported_grant_type`,
//! `invalid_scope`. An answer is `{"access_token", "expires_in": 3599, "token_type": "Bearer"}`;
//! `GET /_vertex/mints` reports how many tokens each account was minted.
//!
//! Prediction paths (after the usual `/<label>/<scenario…>` prefix, see [`crate::scenario`]):
//! `…/v1/projects/<project>/locations/<location>/publishers/google/models/<model>:generateContent`
//! and `:streamGenerateContent?alt=sse`; `…/publishers/anthropic/models/<model>:rawPredict` and
//! `:streamRawPredict`. [`admit`] checks, in order: `Authorization: Bearer <a token minted here,
//! unexpired>` (else 401 `UNAUTHENTICATED`), the project being the account's own (the project of
//! its `…@<project>.iam.gserviceaccount.com` email; else 403 `PERMISSION_DENIED`), the location,
//! the publisher and the method (else 404 `NOT_FOUND`), `alt=sse` on a Google stream, and for
//! Anthropic's models `stream: true` exactly on `streamRawPredict`. The body rules are the
//! dialect's as Vertex takes it ([`crate::validate::check_on`]: an Anthropic body has
//! `anthropic_version: vertex-2023-10-16` and no `model`). Scenario errors are Google's shape for
//! a 429 (`RESOURCE_EXHAUSTED`, a quota message), the dialect's otherwise; answers and streams
//! are the dialect's (`text/event-stream`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::crypto::{hex, sha256};
use crate::dialect::{self, ErrSpec};
use crate::http::{percent_decode, JsonReply, Request};
use crate::json::Obj;
use crate::rsa::{base64_decode, PublicKey};
use crate::scenario::{Api, Host};

/// The grant a JWT is exchanged under.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The scope Vertex's calls need.
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The token endpoint's path.
pub const TOKEN_PATH: &str = "/token";
/// How long a minted token lives, in seconds (as Google answers).
const TOKEN_LIFETIME_S: u64 = 3599;
/// How far `iat` may be from now.
const CLOCK_SKEW_S: i64 = 300;

/// The tokens minted so far and the mints per account.
#[derive(Debug, Default)]
pub struct Tokens {
    inner: Mutex<Minted>,
}

#[derive(Debug, Default)]
struct Minted {
    /// Token → (account email, expiry).
    live: HashMap<String, (String, Instant)>,
    by_account: BTreeMap<String, u64>,
    count: u64,
}

impl Tokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, Minted> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mint(&self, account: &str) -> String {
        let mut m = self.lock();
        m.count += 1;
        *m.by_account.entry(account.to_string()).or_default() += 1;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let token = format!(
            "ya29.mock-{}",
            hex(&sha256(format!("{account}/{}/{nanos}", m.count).as_bytes()))
        );
        let expires = Instant::now() + Duration::from_secs(TOKEN_LIFETIME_S);
        m.live.insert(token.clone(), (account.to_string(), expires));
        token
    }

    /// The account a live token was minted for.
    fn account_of(&self, token: &str) -> Option<String> {
        let m = self.lock();
        let (account, expires) = m.live.get(token)?;
        (Instant::now() < *expires).then(|| account.clone())
    }

    /// `{"<email>": <tokens minted>, …}`.
    pub fn mints_json(&self) -> String {
        serde_json::to_string(&self.lock().by_account).unwrap_or_else(|_| "{}".into())
    }
}

/// `MOCK_VERTEX_PUBLIC_KEY_PEM`, if set and a usable RSA public key (an unusable one is reported
/// on stderr and ignored: every JWT is then refused).
pub fn key_from_env() -> Option<PublicKey> {
    let pem = std::env::var("MOCK_VERTEX_PUBLIC_KEY_PEM").ok()?;
    match PublicKey::from_pem(&pem) {
        Ok(key) => Some(key),
        Err(e) => {
            eprintln!("mock-upstream: MOCK_VERTEX_PUBLIC_KEY_PEM: {e}");
            None
        }
    }
}

fn oauth_error(error: &str, description: &str) -> JsonReply {
    JsonReply::new(
        400,
        Obj::new()
            .str("error", error)
            .str("error_description", description)
            .build(),
    )
}

/// Google's error shape: `{"error": {"code", "message", "status"}}`.
pub fn google_error(code: u16, status: &str, message: &str) -> JsonReply {
    JsonReply::new(
        code,
        Obj::new()
            .obj(
                "error",
                Obj::new()
                    .num("code", u64::from(code))
                    .str("message", message)
                    .str("status", status),
            )
            .build(),
    )
}

/// A form body's fields, percent-decoded (`+` a space).
fn form(body: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| String::from_utf8_lossy(&percent_decode(&s.replace('+', " "))).into_owned();
            (decode(k), decode(v))
        })
        .collect()
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `POST /token`: a JWT exchanged for an access token, or Google's refusal.
pub fn token_endpoint(req: &Request, key: Option<&PublicKey>, tokens: &Tokens) -> JsonReply {
    if req.method != "POST" {
        return JsonReply::new(405, Obj::new().str("error", "invalid_request").build());
    }
    if !req
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"))
    {
        return oauth_error(
            "invalid_request",
            "Invalid Content-Type; expected application/x-www-form-urlencoded",
        );
    }
    let fields = form(&req.body);
    if fields.get("grant_type").map(String::as_str) != Some(JWT_BEARER) {
        return oauth_error("unsupported_grant_type", "Invalid grant_type.");
    }
    let Some(assertion) = fields.get("assertion") else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    let audience = format!("http://{}{TOKEN_PATH}", req.header("host").unwrap_or_default());
    match check_jwt(assertion, key, &audience, now_s()) {
        Ok(account) => {
            let token = tokens.mint(&account);
            JsonReply::new(
                200,
                Obj::new()
                    .str("access_token", &token)
                    .num("expires_in", TOKEN_LIFETIME_S)
                    .str("token_type", "Bearer")
                    .build(),
            )
        }
        Err(refusal) => refusal,
    }
}

/// The JWT's account (`iss`) if it holds: RS256 by `key`, for `audience`, cloud-platform scope,
/// issued around `now` and not expired.
pub fn check_jwt(jwt: &str, key: Option<&PublicKey>, audience: &str, now: i64) -> Result<String, JsonReply> {
    let invalid = |why: &str| oauth_error("invalid_grant", &format!("Invalid JWT: {why}"));
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(invalid(
            "Token must be a short-lived token and in a reasonable timeframe",
        ));
    };
    let json = |part: &str| base64_decode(part).and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let (Some(header), Some(claims), Some(signature)) = (json(header), json(claims), base64_decode(signature)) else {
        return Err(invalid("the segments are not base64url JSON"));
    };
    if header.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err(invalid("alg must be RS256"));
    }
    let signed = &jwt[..jwt.rfind('.').unwrap_or(0)];
    if !key.is_some_and(|k| k.verify_rs256(signed.as_bytes(), &signature)) {
        return Err(oauth_error("invalid_grant", "Invalid JWT Signature."));
    }
    let claim = |name: &str| claims.get(name);
    let Some(iss) = claim("iss").and_then(Value::as_str).filter(|s| !s.is_empty()) else {
        return Err(invalid("iss is missing"));
    };
    if claim("aud").and_then(Value::as_str) != Some(audience) {
        return Err(invalid(&format!("aud must be {audience}")));
    }
    let scopes = claim("scope").and_then(Value::as_str).unwrap_or_default();
    if !scopes.split(' ').any(|s| s == CLOUD_PLATFORM) {
        return Err(oauth_error(
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.",
        ));
    }
    let (Some(iat), Some(exp)) = (
        claim("iat").and_then(Value::as_i64),
        claim("exp").and_then(Value::as_i64),
    ) else {
        return Err(invalid("iat and exp are required"));
    };
    if (iat - now).abs() > CLOCK_SKEW_S || exp <= now || exp - iat > 3600 {
        return Err(invalid("Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."));
    }
    Ok(iss.to_string())
}

/// Whether this host's call streams (by its method).
pub fn streams(method: &str) -> bool {
    method.starts_with("stream")
}

/// Vertex's checks of a call before its body is read as the dialect's: the token, the project,
/// the location, the publisher and method, and the stream flag.
pub fn admit(req: &Request, host: &Host, tokens: &Tokens) -> Result<(), JsonReply> {
    let Host::Vertex {
        project,
        location,
        publisher,
        model,
        method,
    } = host
    else {
        return Ok(());
    };
    let unauthenticated = || {
        google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        )
    };
    let token = req
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(unauthenticated)?;
    let account = tokens.account_of(token).ok_or_else(unauthenticated)?;
    let resource = format!("projects/{project}/locations/{location}/publishers/{publisher}/models/{model}");
    let own_project = account
        .split_once('@')
        .and_then(|(_, domain)| domain.strip_suffix(".iam.gserviceaccount.com"));
    if own_project != Some(project.as_str()) {
        return Err(google_error(
            403,
            "PERMISSION_DENIED",
            &format!("Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/{resource}' (or it may not exist)."),
        ));
    }
    let location_ok =
        location == "global" || (location.split('-').count() == 2 && location.ends_with(|c: char| c.is_ascii_digit()));
    let methods: &[&str] = match publisher.as_str() {
        "google" => &["generateContent", "streamGenerateContent", "countTokens"],
        "anthropic" => &["rawPredict", "streamRawPredict"],
        _ => &[],
    };
    if !location_ok || !methods.contains(&method.as_str()) {
        return Err(google_error(
            404,
            "NOT_FOUND",
            &format!("Publisher Model `{resource}` not found or method `{method}` is not supported."),
        ));
    }
    if publisher == "google" && streams(method) && !req.query_values("alt").iter().any(|a| a == "sse") {
        return Err(google_error(
            400,
            "INVALID_ARGUMENT",
            "The mock streams server-sent events only: add ?alt=sse.",
        ));
    }
    if publisher == "anthropic" {
        let betas = req.header("anthropic-beta").unwrap_or("");
        if let Some(flag) = betas
            .split(',')
            .map(str::trim)
            .find(|b| !b.is_empty() && !crate::validate::messages::CLOUD_BETAS.contains(b))
        {
            return Err(google_error(
                400,
                "INVALID_ARGUMENT",
                &format!("Unsupported beta header: {flag}"),
            ));
        }
        let stream = serde_json::from_slice::<Value>(&req.body)
            .ok()
            .and_then(|v| v.get("stream").and_then(Value::as_bool))
            .unwrap_or(false);
        if stream != streams(method) {
            return Err(google_error(
                400,
                "INVALID_ARGUMENT",
                &format!("`stream` must be {} for {method}.", streams(method)),
            ));
        }
    }
    Ok(())
}

/// An error answer with `status` for a call in `api`: a 429 is Vertex's own quota refusal, the
/// rest come from the model in its dialect's shape.
pub fn error_reply(api: Api, status: u16, e: &ErrSpec, model: &str) -> JsonReply {
    if status == 429 {
        return google_error(
            429,
            "RESOURCE_EXHAUSTED",
            &format!("Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: {model}. Please submit a quota increase request."),
        );
    }
    JsonReply::new(status, dialect::error_body(api, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC_PEM: &str = include_str!("../tests/data/rsa1024.pub.pem");
    const SIGNATURE_B64: &str = include_str!("../tests/data/rsa1024.switchyard.sig.b64");

    fn b64url(v: &Value) -> String {
        crate::crypto::base64(v.to_string().as_bytes())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    }

    fn refusal(r: Result<String, JsonReply>) -> String {
        let r = r.unwrap_err();
        assert_eq!(r.status, 400);
        r.body
    }

    #[test]
    fn a_jwt_with_a_signature_that_does_not_hold_is_refused_before_its_claims_are_read() {
        let key = PublicKey::from_pem(PUBLIC_PEM).unwrap();
        let header = b64url(&serde_json::json!({"alg": "RS256", "typ": "JWT"}));
        let claims = b64url(
            &serde_json::json!({"iss": "a@p.iam.gserviceaccount.com", "scope": CLOUD_PLATFORM,
            "aud": "http://h/token", "iat": 1000, "exp": 4000}),
        );
        let signature = SIGNATURE_B64.trim().replace('+', "-").replace('/', "_");
        let jwt = format!("{header}.{claims}.{signature}");
        assert!(refusal(check_jwt(&jwt, Some(&key), "http://h/token", 1000)).contains("Invalid JWT Signature."));
        assert!(refusal(check_jwt(&jwt, None, "http://h/token", 1000)).contains("Invalid JWT Signature."));
        let none = format!("{}.{claims}.", b64url(&serde_json::json!({"alg": "none"})));
        assert!(refusal(check_jwt(&none, Some(&key), "http://h/token", 1000)).contains("RS256"));
        assert!(refusal(check_jwt("a.b", Some(&key), "http://h/token", 1000)).contains("invalid_grant"));
    }

    /// JWTs signed by the test key (`openssl dgst -sha256 -sign`), issued at 1700000000 for an
    /// hour, for `http://127.0.0.1:9/token`: the first with the cloud-platform scope, the second
    /// with another.
    const JWTS: &str = include_str!("../tests/data/rsa1024.jwts.txt");
    const AUD: &str = "http://127.0.0.1:9/token";

    #[test]
    fn a_signed_jwt_is_the_accounts_only_for_its_audience_scope_and_hour() {
        let key = PublicKey::from_pem(PUBLIC_PEM).unwrap();
        let jwts: Vec<&str> = JWTS.lines().collect();
        let (good, other_scope) = (jwts[0], jwts[1]);
        assert_eq!(
            check_jwt(good, Some(&key), AUD, 1_700_000_100).unwrap(),
            "svc@p-1.iam.gserviceaccount.com"
        );
        assert!(refusal(check_jwt(good, Some(&key), "http://127.0.0.1:10/token", 1_700_000_100)).contains("aud"));
        assert!(
            refusal(check_jwt(good, Some(&key), AUD, 1_700_003_600)).contains("short-lived"),
            "expired"
        );
        assert!(
            refusal(check_jwt(good, Some(&key), AUD, 1_699_990_000)).contains("short-lived"),
            "issued ahead"
        );
        assert!(refusal(check_jwt(other_scope, Some(&key), AUD, 1_700_000_100)).contains("invalid_scope"));
        // The claims changed after signing: the signature no longer holds.
        let parts: Vec<&str> = good.split('.').collect();
        let forged_claims = b64url(&serde_json::json!({"iss": "admin@p-1.iam.gserviceaccount.com",
            "scope": CLOUD_PLATFORM, "aud": AUD, "iat": 1_700_000_000u64, "exp": 1_700_003_600u64}));
        let forged = format!("{}.{forged_claims}.{}", parts[0], parts[2]);
        assert!(refusal(check_jwt(&forged, Some(&key), AUD, 1_700_000_100)).contains("Invalid JWT Signature."));
    }

    #[test]
    fn the_token_endpoint_mints_for_a_good_jwt_and_refuses_a_bad_grant() {
        let key = PublicKey::from_pem(PUBLIC_PEM).unwrap();
        let tokens = Tokens::default();
        let post = |body: String| Request {
            method: "POST".into(),
            target: TOKEN_PATH.into(),
            version: "HTTP/1.1".into(),
            headers: vec![
                ("host".into(), "127.0.0.1:9".into()),
                ("content-type".into(), "application/x-www-form-urlencoded".into()),
            ],
            body: body.into_bytes(),
        };
        let good = JWTS.lines().next().unwrap();
        let r = token_endpoint(
            &post(format!("grant_type=client_credentials&assertion={good}")),
            Some(&key),
            &tokens,
        );
        assert!(
            r.status == 400 && r.body.contains("unsupported_grant_type"),
            "{}",
            r.body
        );
        // The fixed JWT was issued long ago: the endpoint's own clock refuses it.
        let grant = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";
        let r = token_endpoint(
            &post(format!("grant_type={grant}&assertion={good}")),
            Some(&key),
            &tokens,
        );
        assert!(r.status == 400 && r.body.contains("short-lived"), "{}", r.body);
        assert_eq!(tokens.mints_json(), "{}");
    }

    #[test]
    fn an_anthropic_body_for_vertex_has_its_version_and_no_model() {
        let host = Host::Vertex {
            project: "p".into(),
            location: "us-east5".into(),
            publisher: "anthropic".into(),
            model: "claude".into(),
            method: "streamRawPredict".into(),
        };
        let check = |body: Value| crate::validate::check_on(Api::Messages, &host, &Ok(body));
        let good = serde_json::json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "stream": true,
                                      "messages": [{"role": "user", "content": "hi"}]});
        assert!(check(good.clone()).is_ok());
        for (field, value) in [
            ("model", serde_json::json!("claude")),
            ("anthropic_version", serde_json::json!("bedrock-2023-05-31")),
        ] {
            let mut bad = good.clone();
            bad[field] = value;
            assert!(check(bad).is_err(), "{field}");
        }
        let mut unversioned = good;
        unversioned.as_object_mut().unwrap().remove("anthropic_version");
        assert!(check(unversioned).is_err());
    }

    #[test]
    fn calls_need_a_live_token_of_the_projects_account() {
        let tokens = Tokens::default();
        let token = tokens.mint("svc@p-1.iam.gserviceaccount.com");
        let host = |project: &str, method: &str| Host::Vertex {
            project: project.into(),
            location: "us-east5".into(),
            publisher: "anthropic".into(),
            model: "claude".into(),
            method: method.into(),
        };
        let call = |auth: &str| Request {
            method: "POST".into(),
            target: "/x".into(),
            version: "HTTP/1.1".into(),
            headers: vec![("authorization".into(), auth.into())],
            body: br#"{"stream":false}"#.to_vec(),
        };
        let bearer = format!("Bearer {token}");
        assert!(admit(&call(&bearer), &host("p-1", "rawPredict"), &tokens).is_ok());
        assert_eq!(
            admit(&call("Bearer nope"), &host("p-1", "rawPredict"), &tokens)
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(
            admit(&call(&token), &host("p-1", "rawPredict"), &tokens)
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(
            admit(&call(&bearer), &host("p-2", "rawPredict"), &tokens)
                .unwrap_err()
                .status,
            403
        );
        assert_eq!(
            admit(&call(&bearer), &host("p-1", "predict"), &tokens)
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            admit(&call(&bearer), &host("p-1", "streamRawPredict"), &tokens)
                .unwrap_err()
                .status,
            400,
            "stream: false on streamRawPredict"
        );
        assert_eq!(tokens.mints_json(), r#"{"svc@p-1.iam.gserviceaccount.com":1}"#);
    }
}
