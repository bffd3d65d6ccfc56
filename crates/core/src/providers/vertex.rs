//! Google Vertex AI (SPEC §20): what a `vertex` provider needs besides a dialect (its catalog
//! fields are checked in `catalog`) — the address of a model's method, the `anthropic_version` its
//! Anthropic bodies carry, and the OAuth2 access token minted from a service account: the RS256
//! JWT's signing input and assertion, the token endpoint's form body and answer (its errors read
//! into failure classes), and the per-isolate cache's decisions (fresh, refresh before expiry, one
//! mint in flight at a time).
//!
//! Signing the JWT and posting it are I/O, the Worker's (`src/vertex.rs`); everything here takes
//! the time as an argument.

use std::collections::HashMap;

use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::api::Api;
use crate::classify::{FailureClass, Verdict};

use super::{fields_of, BetaPlace, CloudAnthropic, CountCall, Counted, Provider, ProviderDoc, ProviderKind, Setup};

/// The `anthropic_version` Vertex's `rawPredict` takes in an Anthropic body.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// The OAuth2 scope the access token is asked for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Where a service account's tokens are minted when its key names no `token_uri`.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The grant a signed JWT is exchanged under (RFC 7523).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long the JWT asks the token to live (Google's maximum).
const JWT_LIFETIME_S: u64 = 3600;
/// A token is replaced this long before it expires.
pub const REFRESH_EARLY_MS: u64 = 5 * 60_000;
/// While a new token is being minted, the old one is still used until this close to its expiry.
const STILL_USABLE_MS: u64 = 30_000;
/// A mint in flight longer than this is taken as abandoned (its request gone): the next request
/// mints anew.
pub const MINT_ABANDONED_MS: u64 = 30_000;
/// How much of a token endpoint's error description is kept.
const DESCRIPTION_LIMIT: usize = 300;

/// Where a route of a Vertex provider at `base` speaking `api` calls `model`: Google's models
/// (`gemini`) by `generateContent` / `streamGenerateContent?alt=sse`, Anthropic's (`messages`) by
/// `rawPredict` / `streamRawPredict`.
pub fn url(base: &str, project: &str, region: &str, api: Api, model: &str, stream: bool) -> String {
    let (publisher, method) = match (api, stream) {
        (Api::Messages, false) => ("anthropic", "rawPredict"),
        (Api::Messages, true) => ("anthropic", "streamRawPredict"),
        (_, false) => ("google", "generateContent"),
        (_, true) => ("google", "streamGenerateContent?alt=sse"),
    };
    method_url(base, project, region, publisher, model, method)
}

/// The address of a publisher's model's method in a project's region.
fn method_url(base: &str, project: &str, region: &str, publisher: &str, model: &str, method: &str) -> String {
    format!(
        "{}/v1/projects/{}/locations/{}/publishers/{publisher}/models/{}:{method}",
        base.trim_end_matches('/'),
        segment(project),
        segment(region),
        segment(model)
    )
}

/// A path segment: unreserved characters and `@` (Vertex's model versions, `claude-…@20250219`)
/// as they are, the rest percent-encoded (a `:` would end the model's name).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The fields of a service account's JSON key that minting reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServiceAccount {
    pub client_email: String,
    private_key: String,
    #[serde(default)]
    pub private_key_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

impl std::fmt::Display for ServiceAccount {
    /// Its email only: the key never reaches a message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.client_email)
    }
}

/// Why a service account key cannot be used; the message names the field, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub &'static str);

impl KeyError {
    /// The attempt's verdict: the account's configuration is wrong.
    pub fn verdict(&self) -> Verdict {
        Verdict::new(
            FailureClass::Account,
            &format!("the Vertex service account key is not usable: {}", self.0),
        )
    }
}

impl ServiceAccount {
    /// The key as the secret holds it (the JSON file Google gives out).
    pub fn parse(secret: &str) -> Result<ServiceAccount, KeyError> {
        let sa: ServiceAccount =
            serde_json::from_str(secret).map_err(|_| KeyError("not a JSON key with client_email and private_key"))?;
        if sa.kind.as_deref().is_some_and(|k| k != "service_account") {
            return Err(KeyError("its type is not service_account"));
        }
        if sa.client_email.is_empty() {
            return Err(KeyError("client_email is empty"));
        }
        let uri = sa.token_uri();
        if super::check_base_url(uri).is_err() {
            return Err(KeyError("token_uri is not an https:// URL"));
        }
        sa.private_key_der()?;
        Ok(sa)
    }

    /// Where its tokens are minted.
    pub fn token_uri(&self) -> &str {
        self.token_uri.as_deref().unwrap_or(DEFAULT_TOKEN_URI)
    }

    /// The private key, PKCS#8 DER (what WebCrypto imports as `pkcs8`), from its PEM.
    pub fn private_key_der(&self) -> Result<Vec<u8>, KeyError> {
        let pem = self.private_key.trim();
        let inner = pem
            .strip_prefix("-----BEGIN PRIVATE KEY-----")
            .and_then(|rest| rest.trim_end().strip_suffix("-----END PRIVATE KEY-----"))
            .ok_or(KeyError("private_key is not a PKCS#8 PEM (BEGIN PRIVATE KEY)"))?;
        let b64: String = inner.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .filter(|der| !der.is_empty())
            .ok_or(KeyError("private_key's PEM is not base64"))
    }

    /// The JWT's header and claims, each base64url, joined by `.`: what RS256 signs. Issued now
    /// (`now_ms`), it asks for a token of [`SCOPE`] from its `token_uri`, for an hour.
    pub fn signing_input(&self, now_ms: u64) -> String {
        let iat = now_ms / 1000;
        let header = match &self.private_key_id {
            Some(kid) => json!({"alg": "RS256", "typ": "JWT", "kid": kid}),
            None => json!({"alg": "RS256", "typ": "JWT"}),
        };
        let claims = json!({
            "iss": self.client_email,
            "scope": SCOPE,
            "aud": self.token_uri(),
            "iat": iat,
            "exp": iat + JWT_LIFETIME_S,
        });
        format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        )
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The signed JWT: the signing input and its signature.
pub fn assertion(signing_input: &str, signature: &[u8]) -> String {
    format!("{signing_input}.{}", b64url(signature))
}

/// The token request's form body (`application/x-www-form-urlencoded`). The assertion is
/// base64url and dots: nothing in it needs escaping.
pub fn token_request(assertion: &str) -> String {
    format!(
        "grant_type={}&assertion={assertion}",
        JWT_BEARER_GRANT.replace(':', "%3A")
    )
}

/// A minted access token and when it stops being accepted.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    pub token: String,
    pub expires_at_ms: u64,
}

impl std::fmt::Debug for AccessToken {
    /// Never the token itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AccessToken {{ expires_at_ms: {} }}", self.expires_at_ms)
    }
}

/// The token endpoint's answer (`status`, `body`) received at `now_ms`: the token, or why there
/// is none — a refusal of the key (400/401/403: `invalid_grant`, a disabled account…) is the
/// account's failure, throttling a rate limit, the rest the endpoint's.
pub fn read_token_answer(status: u16, body: &[u8], now_ms: u64) -> Result<AccessToken, Verdict> {
    let json = serde_json::from_slice::<Value>(body).ok();
    if (200..300).contains(&status) {
        let token = json
            .as_ref()
            .and_then(|v| v.get("access_token"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()));
        let bearer = json
            .as_ref()
            .and_then(|v| v.get("token_type"))
            .and_then(Value::as_str)
            .is_none_or(|t| t.eq_ignore_ascii_case("bearer"));
        let expires_in = json
            .as_ref()
            .and_then(|v| v.get("expires_in"))
            .and_then(Value::as_u64)
            .unwrap_or(JWT_LIFETIME_S);
        return match (token, bearer) {
            (Some(token), true) => Ok(AccessToken {
                token: token.to_string(),
                expires_at_ms: now_ms.saturating_add(expires_in.saturating_mul(1000)),
            }),
            _ => Err(Verdict::new(
                FailureClass::Account,
                "the Vertex token endpoint answered without a bearer access token",
            )),
        };
    }
    // OAuth2's shape (`error`, `error_description`), or Google's (`error.message`).
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let (code, description) = match json.as_ref() {
        Some(v) => match v.get("error") {
            Some(Value::Object(e)) => (text(e.get("status")), text(e.get("message"))),
            e => (text(e), text(v.get("error_description"))),
        },
        None => (None, None),
    };
    let said: String = [code, description]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(": ")
        .chars()
        .take(DESCRIPTION_LIMIT)
        .collect();
    let said = if said.is_empty() {
        format!("HTTP {status}")
    } else {
        said
    };
    let class = match status {
        429 => FailureClass::RateLimited,
        500..=599 => FailureClass::Upstream5xx,
        _ => FailureClass::Account,
    };
    Err(Verdict::new(
        class,
        &format!("the Vertex token endpoint refused the service account: {said}"),
    ))
}

/// The cache key of a service account key: a digest of the secret's whole value (a rotated key
/// is a new entry), never the value itself.
pub fn cache_key(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a request does for a token.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Send with this token.
    Use(String),
    /// Mint one: this request's mint is flight `.0`; report it with [`TokenCache::minted`] or
    /// [`TokenCache::failed`] (or [`TokenCache::abandoned`] if it stops without an answer).
    Mint(u64),
    /// Another request is minting (flight `.0`): look again with [`TokenCache::after`] a moment
    /// later.
    Wait(u64),
    /// The flight waited on failed so.
    Failed(Verdict),
}

#[derive(Debug, Default)]
struct Entry {
    token: Option<AccessToken>,
    /// The newest flight's number.
    flight: u64,
    /// When the newest flight started, while it is in the air.
    minting_since: Option<u64>,
    /// The last flight that failed, and how.
    failure: Option<(u64, Verdict)>,
}

/// The isolate's access tokens by service account ([`cache_key`]): each is used until
/// [`REFRESH_EARLY_MS`] before it expires, and only one request at a time mints a new one —
/// the others wait for it (or, while the old token still holds, go on with it).
#[derive(Debug, Default)]
pub struct TokenCache {
    entries: HashMap<String, Entry>,
}

impl TokenCache {
    /// What a request for `key`'s token does at `now_ms`.
    pub fn lookup(&mut self, key: &str, now_ms: u64) -> Lookup {
        let entry = self.entries.entry(key.to_string()).or_default();
        let valid_for = |margin: u64| {
            entry
                .token
                .as_ref()
                .filter(|t| now_ms.saturating_add(margin) < t.expires_at_ms)
                .map(|t| t.token.clone())
        };
        if let Some(token) = valid_for(REFRESH_EARLY_MS) {
            return Lookup::Use(token);
        }
        match entry.minting_since {
            Some(since) if now_ms.saturating_sub(since) < MINT_ABANDONED_MS => match valid_for(STILL_USABLE_MS) {
                Some(token) => Lookup::Use(token),
                None => Lookup::Wait(entry.flight),
            },
            _ => {
                entry.flight += 1;
                entry.minting_since = Some(now_ms);
                Lookup::Mint(entry.flight)
            }
        }
    }

    /// A waiter's next look, at `now_ms`, after waiting on `flight`: its token, its failure,
    /// wait on, or (the flight abandoned) mint anew.
    pub fn after(&mut self, key: &str, flight: u64, now_ms: u64) -> Lookup {
        if let Some(Entry {
            failure: Some((failed, verdict)),
            ..
        }) = self.entries.get(key)
        {
            if *failed == flight {
                return Lookup::Failed(verdict.clone());
            }
        }
        self.lookup(key, now_ms)
    }

    /// Flight `flight` minted `token`.
    pub fn minted(&mut self, key: &str, flight: u64, token: AccessToken) {
        let entry = self.entries.entry(key.to_string()).or_default();
        if entry.flight == flight {
            entry.minting_since = None;
        }
        if entry
            .token
            .as_ref()
            .is_none_or(|t| t.expires_at_ms <= token.expires_at_ms)
        {
            entry.token = Some(token);
        }
    }

    /// Flight `flight` failed with `verdict`: its waiters get the same.
    pub fn failed(&mut self, key: &str, flight: u64, verdict: Verdict) {
        let entry = self.entries.entry(key.to_string()).or_default();
        if entry.flight == flight {
            entry.minting_since = None;
        }
        entry.failure = Some((flight, verdict));
    }

    /// Flight `flight` stopped without an answer (its request's deadline, its client gone): the
    /// next look mints anew.
    pub fn abandoned(&mut self, key: &str, flight: u64) {
        if let Some(entry) = self.entries.get_mut(key) {
            if entry.flight == flight {
                entry.minting_since = None;
            }
        }
    }
}

/// The `vertex` kind.
pub struct Vertex;

/// A `vertex` provider's own settings (its service account key is in `key_secret`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The Google Cloud location (`us-east5`, `europe-west1`, `global`).
    pub region: String,
    /// The Google Cloud project the models are called in.
    pub project: String,
}

/// A provider's Vertex settings (none for another kind's).
fn settings(p: &Provider) -> Option<&Settings> {
    match &p.setup {
        Setup::Vertex(s) => Some(s),
        _ => None,
    }
}

impl ProviderKind for Vertex {
    fn apis(&self) -> &'static [Api] {
        &[Api::Gemini, Api::Messages]
    }
    fn own_fields(&self) -> &'static [&'static str] {
        &["region", "project"]
    }
    /// The dialect names the publisher: one model is Google's or Anthropic's.
    fn one_api_per_route(&self) -> Option<&'static str> {
        Some("a `vertex` route speaks one: `gemini` (Google's models) or `messages` (Anthropic's)")
    }
    fn setup(&self, doc: &ProviderDoc) -> Result<Setup, (&'static str, String)> {
        check_vertex(doc)?;
        Ok(Setup::Vertex(Settings {
            region: doc.region.clone().unwrap_or_default(),
            project: doc.project.clone().unwrap_or_default(),
        }))
    }
    fn default_base(&self, setup: &Setup) -> Option<String> {
        let Setup::Vertex(s) = setup else { return None };
        Some(endpoint(&s.region))
    }
    fn url(&self, p: &Provider, api: Api, model: &str, stream: bool) -> String {
        let (project, region) = settings(p).map_or(("", ""), |s| (s.project.as_str(), s.region.as_str()));
        url(p.base(), project, region, api, model, stream)
    }
    /// The access token minted from the service account.
    fn key_headers(&self, token: &str) -> Vec<(&'static str, String)> {
        vec![("authorization", format!("Bearer {token}"))]
    }
    /// Anthropic's models count by the `count-tokens` model's `rawPredict` (the dialect's own
    /// count body with the counted model and the `anthropic_version` in it); Google's by
    /// `countTokens`, the generation request's input fields at the top level.
    fn count(
        &self,
        p: &Provider,
        api: Api,
        model: &str,
        body: &[u8],
        own: &dyn Fn() -> Option<Counted>,
    ) -> Option<CountCall> {
        let s = settings(p)?;
        let (base, project, region) = (p.base(), s.project.as_str(), s.region.as_str());
        let (url, fields, tokens_at) = match api {
            Api::Messages => {
                let own = own()?;
                let mut fields: Map<String, Value> = serde_json::from_slice(&own.body).ok()?;
                fields.insert("model".into(), Value::from(model));
                fields.insert("anthropic_version".into(), Value::from(ANTHROPIC_VERSION));
                let url = method_url(base, project, region, "anthropic", "count-tokens", "rawPredict");
                (url, fields, own.tokens_at)
            }
            Api::Gemini => {
                let keep = ["contents", "systemInstruction", "tools", "generationConfig"];
                let url = method_url(base, project, region, "google", model, "countTokens");
                (url, fields_of(body, &keep)?, "/totalTokens")
            }
            _ => return None,
        };
        Some(CountCall {
            url,
            body: serde_json::to_vec(&fields).ok()?,
            tokens_at,
        })
    }
    fn anthropic_body(&self) -> Option<CloudAnthropic> {
        Some(CloudAnthropic {
            version: ANTHROPIC_VERSION,
            keep_stream: true,
            betas: BetaPlace::Header,
        })
    }
    fn mints_token(&self) -> bool {
        true
    }
}

/// The region's own endpoint: `https://{region}-aiplatform.googleapis.com`, or for `global`
/// `https://aiplatform.googleapis.com`.
pub fn endpoint(region: &str) -> String {
    match region {
        "global" => "https://aiplatform.googleapis.com".to_string(),
        _ => format!("https://{region}-aiplatform.googleapis.com"),
    }
}

/// A `vertex` provider's own fields: a location, a project and the secret holding the service
/// account key. `Err((field, why))`.
fn check_vertex(p: &ProviderDoc) -> Result<(), (&'static str, String)> {
    let region = p.region.as_deref().unwrap_or_default();
    let region_ok = !region.is_empty()
        && region.len() <= 63
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !region_ok {
        return Err((
            "region",
            "required for kind `vertex`: a Google Cloud location like us-east5, or global".into(),
        ));
    }
    let project = p.project.as_deref().unwrap_or_default();
    let project_ok = !project.is_empty()
        && project.len() <= 100
        && project
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.:".contains(c));
    if !project_ok {
        return Err((
            "project",
            "required for kind `vertex`: a Google Cloud project id like my-project".into(),
        ));
    }
    if p.key_secret.is_none() {
        return Err((
            "key_secret",
            "required for kind `vertex`: the secret holding the service account's JSON key".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::providers::Provider;

    const PEM: &str =
        "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASC\nAT8wggE7AgEAAkEA\n-----END PRIVATE KEY-----\n";

    fn key(extra: Value) -> String {
        let mut v = json!({"type": "service_account", "project_id": "proj-1", "private_key_id": "kid-1",
                           "private_key": PEM, "client_email": "svc@proj-1.iam.gserviceaccount.com",
                           "token_uri": "https://oauth2.googleapis.com/token"});
        for (k, x) in extra.as_object().into_iter().flatten() {
            v[k] = x.clone();
        }
        v.to_string()
    }

    fn decode(part: &str) -> Value {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn the_jwt_asks_for_an_hour_of_cloud_platform_from_the_keys_token_uri() {
        let sa = ServiceAccount::parse(&key(json!({}))).unwrap();
        let input = sa.signing_input(1_700_000_000_999);
        let (header, claims) = input.split_once('.').unwrap();
        assert_eq!(decode(header), json!({"alg": "RS256", "typ": "JWT", "kid": "kid-1"}));
        assert_eq!(
            decode(claims),
            json!({"iss": "svc@proj-1.iam.gserviceaccount.com", "scope": SCOPE,
                   "aud": "https://oauth2.googleapis.com/token", "iat": 1_700_000_000u64, "exp": 1_700_003_600u64})
        );
        assert!(
            !input.contains('=') && !input.contains('+') && !input.contains('/'),
            "base64url, unpadded"
        );
        let jwt = assertion(&input, &[0xfb, 0xff, 0x01]);
        assert_eq!(jwt, format!("{input}.-_8B"));
        assert_eq!(
            token_request(&jwt),
            format!("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={jwt}")
        );
        assert_eq!(sa.private_key_der().unwrap()[..4], [0x30, 0x82, 0x01, 0x55]);
        assert_eq!(sa.to_string(), "svc@proj-1.iam.gserviceaccount.com");
    }

    #[test]
    fn an_unusable_key_is_refused_naming_the_field_never_the_value() {
        for (bad, field) in [
            (
                json!({"private_key": "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"}),
                "private_key",
            ),
            (
                json!({"private_key": "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----"}),
                "private_key",
            ),
            (json!({"token_uri": "http://evil.example/token"}), "token_uri"),
            (json!({"type": "authorized_user"}), "type"),
            (json!({"client_email": ""}), "client_email"),
        ] {
            let e = ServiceAccount::parse(&key(bad)).unwrap_err();
            assert!(e.0.contains(field), "{field}: {e:?}");
            let verdict = e.verdict();
            assert_eq!(verdict.class, FailureClass::Account);
            assert!(!verdict.message.unwrap().contains("MIIB"));
        }
        assert!(ServiceAccount::parse("not json").is_err());
        let no_uri: Value = serde_json::from_str(&key(json!({}))).unwrap();
        let mut no_uri = no_uri.as_object().unwrap().clone();
        no_uri.remove("token_uri");
        no_uri.remove("private_key_id");
        let sa = ServiceAccount::parse(&Value::Object(no_uri).to_string()).unwrap();
        assert_eq!(sa.token_uri(), DEFAULT_TOKEN_URI);
        let header = decode(sa.signing_input(0).split_once('.').unwrap().0);
        assert!(header.get("kid").is_none(), "{header}");
    }

    #[test]
    fn the_token_answer_is_read_and_its_refusals_classified() {
        let t = read_token_answer(
            200,
            br#"{"access_token":"ya29.abc","expires_in":3599,"token_type":"Bearer"}"#,
            1_000,
        )
        .unwrap();
        assert_eq!(t.token, "ya29.abc");
        assert_eq!(t.expires_at_ms, 1_000 + 3_599_000);
        assert!(!format!("{t:?}").contains("ya29"), "Debug never shows the token");
        assert_eq!(
            read_token_answer(200, br#"{"token_type":"Bearer"}"#, 0)
                .unwrap_err()
                .class,
            FailureClass::Account
        );
        let refused = read_token_answer(
            400,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
            0,
        )
        .unwrap_err();
        assert_eq!(refused.class, FailureClass::Account);
        assert!(refused
            .message
            .unwrap()
            .ends_with("invalid_grant: Invalid JWT Signature."));
        for (status, class) in [
            (401, FailureClass::Account),
            (403, FailureClass::Account),
            (429, FailureClass::RateLimited),
            (503, FailureClass::Upstream5xx),
        ] {
            assert_eq!(
                read_token_answer(status, b"oops", 0).unwrap_err().class,
                class,
                "{status}"
            );
        }
        let google = read_token_answer(
            403,
            br#"{"error":{"code":403,"message":"The caller does not have permission","status":"PERMISSION_DENIED"}}"#,
            0,
        )
        .unwrap_err();
        assert!(google
            .message
            .unwrap()
            .contains("PERMISSION_DENIED: The caller does not have permission"));
    }

    #[test]
    fn vertexs_own_refusals_are_classified_like_googles() {
        use crate::classify::classify_status;
        for (status, body, class) in [
            (
                429,
                r#"{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: claude.","status":"RESOURCE_EXHAUSTED"}}"#,
                FailureClass::RateLimited,
            ),
            (
                401,
                r#"{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}"#,
                FailureClass::Account,
            ),
            (
                403,
                r#"{"error":{"code":403,"message":"Permission 'aiplatform.endpoints.predict' denied on resource","status":"PERMISSION_DENIED"}}"#,
                FailureClass::Account,
            ),
        ] {
            assert_eq!(classify_status(status, None, body.as_bytes()).class, class, "{status}");
        }
    }

    #[test]
    fn one_mint_in_flight_the_others_wait_for_it() {
        let mut c = TokenCache::default();
        let k = cache_key("{\"a\":1}");
        assert_eq!(k.len(), 64);
        assert_eq!(c.lookup(&k, 0), Lookup::Mint(1));
        assert_eq!(c.lookup(&k, 5), Lookup::Wait(1), "a second request waits");
        assert_eq!(c.after(&k, 1, 10), Lookup::Wait(1));
        let token = AccessToken {
            token: "t1".into(),
            expires_at_ms: 3_600_000,
        };
        c.minted(&k, 1, token);
        assert_eq!(c.after(&k, 1, 20), Lookup::Use("t1".into()));
        assert_eq!(c.lookup(&k, 1_000_000), Lookup::Use("t1".into()));
        // Another key is another account.
        assert_eq!(c.lookup("other", 20), Lookup::Mint(1));
    }

    #[test]
    fn a_token_is_refreshed_before_it_expires_the_old_one_used_meanwhile() {
        let mut c = TokenCache::default();
        c.lookup("k", 0);
        c.minted(
            "k",
            1,
            AccessToken {
                token: "old".into(),
                expires_at_ms: 3_600_000,
            },
        );
        let refresh_at = 3_600_000 - REFRESH_EARLY_MS;
        assert_eq!(c.lookup("k", refresh_at - 1), Lookup::Use("old".into()));
        assert_eq!(c.lookup("k", refresh_at), Lookup::Mint(2), "five minutes early");
        assert_eq!(
            c.lookup("k", refresh_at + 1),
            Lookup::Use("old".into()),
            "still good meanwhile"
        );
        c.abandoned("k", 2);
        assert_eq!(c.lookup("k", 3_600_000 - 40_000), Lookup::Mint(3));
        assert_eq!(
            c.lookup("k", 3_600_000 - 20_000),
            Lookup::Wait(3),
            "too close to expiry: wait"
        );
        c.minted(
            "k",
            3,
            AccessToken {
                token: "new".into(),
                expires_at_ms: 7_200_000,
            },
        );
        assert_eq!(c.lookup("k", 3_600_000), Lookup::Use("new".into()));
    }

    #[test]
    fn a_failed_mint_fails_its_waiters_and_an_abandoned_one_is_taken_over() {
        let mut c = TokenCache::default();
        assert_eq!(c.lookup("k", 0), Lookup::Mint(1));
        assert_eq!(c.lookup("k", 1), Lookup::Wait(1));
        let refused = Verdict::new(FailureClass::Account, "invalid_grant");
        c.failed("k", 1, refused.clone());
        assert_eq!(c.after("k", 1, 2), Lookup::Failed(refused));
        assert_eq!(c.lookup("k", 3), Lookup::Mint(2), "a new request tries again");
        c.abandoned("k", 2);
        assert_eq!(c.after("k", 2, 4), Lookup::Mint(3), "nobody minting: the waiter mints");
        assert_eq!(c.lookup("k", 5), Lookup::Wait(3));
        assert_eq!(
            c.lookup("k", 4 + MINT_ABANDONED_MS),
            Lookup::Mint(4),
            "a flight that never reports is abandoned in time"
        );
        c.abandoned("k", 3); // a stale report changes nothing
        assert_eq!(c.lookup("k", 6 + MINT_ABANDONED_MS), Lookup::Wait(4));
    }

    #[test]
    fn urls_name_the_publisher_and_method_by_dialect() {
        let base = "https://us-east5-aiplatform.googleapis.com";
        assert_eq!(
            url(base, "proj-1", "us-east5", Api::Messages, "claude-sonnet-4@20250514", false),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict"
        );
        assert_eq!(
            url(base, "proj-1", "us-east5", Api::Messages, "claude", true),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude:streamRawPredict"
        );
        assert_eq!(
            url("https://aiplatform.googleapis.com", "p", "global", Api::Gemini, "gemini-2.5-flash", true),
            "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            url("http://127.0.0.1:9/x/", "p", "europe-west4", Api::Gemini, "a:b/c", false),
            "http://127.0.0.1:9/x/v1/projects/p/locations/europe-west4/publishers/google/models/a%3Ab%2Fc:generateContent"
        );
    }

    #[test]
    fn an_attempt_on_vertex_is_sent_to_the_publisher_with_a_bearer_token() {
        use crate::{dialects, wire};
        let p = Provider::from_json(json!({"id": "p", "kind": "vertex", "project": "proj-1",
            "region": "us-east5", "key_secret": "SA", "base_url": "http://127.0.0.1:9/x"}));
        let messages = json!({"model": "m", "max_tokens": 64, "stream": true,
                              "messages": [{"role": "user", "content": "hi"}]});
        let request = dialects::parse_request(Api::Messages, messages.to_string().as_bytes(), None).unwrap();
        let o = wire::outgoing(&request, Api::Messages, &p, "claude@1", 64).unwrap();
        assert_eq!(
            o.url,
            "http://127.0.0.1:9/x/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude@1:streamRawPredict"
        );
        let body: Value = serde_json::from_slice(&o.body).unwrap();
        assert!(body.get("model").is_none(), "{body}");
        assert_eq!(
            (body["stream"].clone(), body["anthropic_version"].clone()),
            (json!(true), json!(ANTHROPIC_VERSION))
        );
        // Another dialect reaches the Anthropic model translated, with the same body rules.
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let request = dialects::parse_request(Api::Chat, chat.to_string().as_bytes(), None).unwrap();
        let o = wire::outgoing(&request, Api::Messages, &p, "claude@1", 64).unwrap();
        let body: Value = serde_json::from_slice(&o.body).unwrap();
        assert!(
            o.translated && body.get("model").is_none() && body["anthropic_version"] == ANTHROPIC_VERSION,
            "{body}"
        );
        assert!(o.url.ends_with("/models/claude@1:rawPredict"), "{}", o.url);
        assert_eq!(
            wire::key_headers(&p, "ya29.t"),
            vec![("authorization", "Bearer ya29.t".to_string())]
        );
    }

    #[test]
    fn the_catalog_takes_a_vertex_provider_with_what_it_needs() {
        let doc = |provider: Value, apis: Value| {
            json!({"providers": [provider], "models": [{"id": "m", "context_window": 100, "max_output_tokens": 10,
                "routes": [{"id": "r", "provider": "p", "upstream_model": "u", "apis": apis,
                            "price": {"input_per_mtok": 1, "output_per_mtok": 1}}]}]})
        };
        let parse = |provider: &Value, apis: Value| Catalog::parse(doc(provider.clone(), apis).to_string().as_bytes());
        let refused = |provider: &Value, apis: Value| parse(provider, apis).unwrap_err().field;
        let vertex = json!({"id": "p", "kind": "vertex", "project": "proj-1", "region": "us-east5",
                            "key_secret": "GOOGLE_SA_JSON"});
        let c = parse(&vertex, json!(["messages"])).unwrap();
        assert_eq!(
            c.provider("p").unwrap().base(),
            "https://us-east5-aiplatform.googleapis.com"
        );
        let mut global = vertex.clone();
        global["region"] = json!("global");
        let c = parse(&global, json!(["gemini"])).unwrap();
        assert_eq!(c.provider("p").unwrap().base(), "https://aiplatform.googleapis.com");
        assert!(parse(&vertex, json!(["gemini"])).is_ok());
        assert_eq!(refused(&vertex, json!(["chat"])), "models[0].routes[0].apis[0]");
        assert_eq!(
            refused(&vertex, json!(["gemini", "messages"])),
            "models[0].routes[0].apis[1]"
        );
        for (field, fix) in [
            ("project", None),
            ("region", None),
            ("key_secret", None),
            ("region", Some(json!("US East"))),
            ("project", Some(json!("my project"))),
        ] {
            let mut p = vertex.clone();
            match fix {
                Some(v) => p[field] = v,
                None => {
                    p.as_object_mut().unwrap().remove(field);
                }
            }
            assert_eq!(refused(&p, json!(["gemini"])), format!("providers[0].{field}"));
        }
        for (field, value) in [
            ("access_key_secret", json!("A")),
            ("api_version", json!("v")),
            ("auth", json!("bearer")),
        ] {
            let mut p = vertex.clone();
            p[field] = value;
            assert_eq!(refused(&p, json!(["gemini"])), format!("providers[0].{field}"));
        }
        let mut elsewhere = json!({"id": "p", "base_url": "https://a/v1", "auth": "bearer"});
        elsewhere["project"] = json!("proj-1");
        assert_eq!(refused(&elsewhere, json!(["chat"])), "providers[0].project");
    }
}
