//! The provider kinds (SPEC §20): one file or folder per kind, behind one trait and one registry.
//!
//! A kind is everything that differs between providers once the dialect is chosen: which
//! dialects its routes may speak, its own catalog fields and their checks, where a request goes
//! (its URL for a dialect and a model), how its key travels (a header, a signature, a minted
//! token), the body fix-ups it needs, how it frames streams and how its errors read. The
//! driver asks [`of`] — the one registry — instead of matching on [`Kind`].
//!
//! - [`direct`]: `openai`, `anthropic` and `gemini`, whose key is one header.
//! - [`azure`]: Azure OpenAI (`api-key`, deployment URLs with an `api-version`).
//! - [`bedrock`]: AWS Bedrock (SigV4 signing, event-stream frames, its errors).
//! - [`vertex`]: Google Vertex AI (its URLs by publisher, service-account access tokens).

pub mod azure;
pub mod bedrock;
pub mod direct;
pub mod vertex;

use serde::{Deserialize, Serialize};

use crate::api::Api;
use serde_json::{Map, Value};

use crate::classify::{classify_status, Verdict};

/// What one provider kind knows. Each file or folder implements it once; [`of`] is the registry.
pub trait ProviderKind: Sync {
    /// The dialects its routes may speak.
    fn apis(&self) -> &'static [Api];
    /// The `auth` header scheme that carries its key, for the kinds whose key is one header.
    fn header_auth(&self) -> Option<AuthScheme> {
        None
    }
    /// The catalog fields of its own (a field of another kind's is refused, not ignored).
    fn own_fields(&self) -> &'static [&'static str] {
        &[]
    }
    /// Whether it takes a `key_secret`.
    fn takes_key_secret(&self) -> bool {
        true
    }
    /// A route of it speaks one dialect only: why, when so.
    fn one_api_per_route(&self) -> Option<&'static str> {
        None
    }
    /// Its own fields of a catalog entry, checked and read: its variant of [`Setup`].
    /// `Err((field, why))`.
    fn setup(&self, doc: &ProviderDoc) -> Result<Setup, (&'static str, String)>;
    /// Where its requests go when `base_url` is left out.
    fn default_base(&self, _setup: &Setup) -> Option<String> {
        None
    }
    /// Where a route speaking `api` is sent a request for `model`.
    fn url(&self, p: &Provider, api: Api, model: &str, stream: bool) -> String {
        api.upstream_url(p.base(), model, stream)
    }
    /// The headers that carry its key (for Vertex the access token minted from it).
    fn key_headers(&self, key: &str) -> Vec<(&'static str, String)>;
    /// The headers that sign `request`, exactly as it will be sent, at `now_ms` (Bedrock's
    /// Signature Version 4); none for a kind whose key travels in a header. `secret` gives the
    /// value of the secret a field of `p` names.
    fn sign(
        &self,
        _p: &Provider,
        _secret: &dyn Fn(&str) -> Option<String>,
        _request: &bedrock::sigv4::Request,
        _now_ms: u64,
    ) -> Result<Vec<(String, String)>, bedrock::sigv4::SignError> {
        Ok(Vec::new())
    }
    /// It takes Anthropic's `anthropic-version` and the client's `anthropic-beta` as headers.
    fn takes_anthropic_headers(&self) -> bool {
        false
    }
    /// How it takes an Anthropic (`messages`) body, when not as Anthropic does: a cloud names the
    /// model in its URL and wants its own `anthropic_version` in the body.
    fn anthropic_body(&self) -> Option<CloudAnthropic> {
        None
    }
    /// Whether its streams are server-sent events (`accept: text/event-stream`); Bedrock frames
    /// its own, and its `accept` names the answer body's type.
    fn streams_sse(&self) -> bool {
        true
    }
    /// Its key is a service account an access token is minted from (Vertex), not a key sent.
    fn mints_token(&self) -> bool {
        false
    }
    /// Where and what a route speaking `api` sends to count the input of `body` (its generation
    /// request, as [`crate::wire`] writes it for this kind) for `model` (SPEC §21); `None` when
    /// the kind has no count endpoint for the dialect. `own` gives
    /// the dialect's own count request for `body` and where its answer has the number, when the
    /// dialect has one (what a provider of the dialect's own API takes) — made only if asked for.
    fn count(
        &self,
        p: &Provider,
        api: Api,
        model: &str,
        _body: &[u8],
        own: &dyn Fn() -> Option<Counted>,
    ) -> Option<CountCall> {
        let own = own()?;
        Some(CountCall {
            url: api.count_url(p.base(), model)?,
            body: own.body,
            tokens_at: own.tokens_at,
        })
    }
    /// An error answer as a verdict; `header` reads the answer's headers.
    fn error_verdict(
        &self,
        status: u16,
        retry_after: Option<&str>,
        _header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
    ) -> Verdict {
        classify_status(status, retry_after, body)
    }
}

/// A count request to a provider (SPEC §21): where it goes, its body, and where its answer has
/// the number (a JSON pointer).
#[derive(Debug, Clone, PartialEq)]
pub struct CountCall {
    pub url: String,
    pub body: Vec<u8>,
    pub tokens_at: &'static str,
}

/// A dialect's own count request for a generation body: the body its count endpoint takes, and
/// where its answer has the number.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    pub body: Vec<u8>,
    pub tokens_at: &'static str,
}

/// The fields of `body` (a JSON object) named in `keep` — for the count bodies a cloud builds
/// from a generation body.
pub(crate) fn fields_of(body: &[u8], keep: &[&str]) -> Option<Map<String, Value>> {
    let mut fields: Map<String, Value> = serde_json::from_slice(body).ok()?;
    fields.retain(|k, _| keep.contains(&k.as_str()));
    Some(fields)
}

/// The registry: what a provider of `kind` is.
pub fn of(kind: Kind) -> &'static dyn ProviderKind {
    match kind {
        Kind::Openai => &direct::OPENAI,
        Kind::Anthropic => &direct::ANTHROPIC,
        Kind::Gemini => &direct::GEMINI,
        Kind::Azure => &azure::Azure,
        Kind::Bedrock => &bedrock::Bedrock,
        Kind::Vertex => &vertex::Vertex,
    }
}

/// Every kind (the registry's completeness test walks it).
pub const KINDS: [Kind; 6] = [
    Kind::Openai,
    Kind::Anthropic,
    Kind::Gemini,
    Kind::Azure,
    Kind::Bedrock,
    Kind::Vertex,
];

/// How the upstream key is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthScheme {
    /// `Authorization: Bearer <key>`.
    #[serde(rename = "bearer")]
    Bearer,
    /// `x-api-key: <key>` (Anthropic); `anthropic-version` is passed through.
    #[serde(rename = "x-api-key")]
    XApiKey,
    /// `x-goog-api-key: <key>` (Google Gemini).
    #[serde(rename = "x-goog-api-key")]
    XGoogApiKey,
}

/// What a provider is (SPEC §20): its address, how it authenticates and how it frames answers.
/// Absent from a catalog, it follows from `auth` (`bearer` → `openai`, `x-api-key` → `anthropic`,
/// `x-goog-api-key` → `gemini`), so catalogs written before kinds read unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Openai,
    Anthropic,
    Gemini,
    /// Azure OpenAI: chat and responses on the resource's v1 API or a deployment URL, with an
    /// `api-key` header.
    Azure,
    /// AWS Bedrock: Anthropic models through InvokeModel (`messages`), any model through the
    /// Converse API (`converse`), signed with Signature Version 4.
    Bedrock,
    /// Google Vertex AI: Gemini models (`gemini`) and Anthropic models (`messages`) on a
    /// project's region, with OAuth2 access tokens minted from a service account.
    Vertex,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Openai => "openai",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Azure => "azure",
            Kind::Bedrock => "bedrock",
            Kind::Vertex => "vertex",
        }
    }

    /// The dialects a route of this kind can speak.
    pub fn apis(self) -> &'static [Api] {
        of(self).apis()
    }
}

/// A provider as a catalog document writes it (SPEC §20): flat fields, each kind's beside the
/// others', read and written as users write them. [`ProviderDoc::validate`] makes it a
/// [`Provider`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderDoc {
    pub id: String,
    /// Where requests go; for `bedrock` and `vertex` it may be left out: the region's own
    /// endpoint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_url: String,
    /// How the key is sent (the three header kinds); implied by `kind` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthScheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// Name of the Worker secret holding the upstream key; `None` for upstreams that need none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_secret: Option<String>,
    /// Upstream billing account; defaults to the provider id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Azure deployment URLs: the `api-version` query parameter (the v1 API needs none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Bedrock: the AWS region (its endpoint and the signature's scope); Vertex: the Google Cloud
    /// location (`us-east5`, `europe-west1`, `global`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Vertex: the Google Cloud project the models are called in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Bedrock: the secrets holding the access key id, the secret access key and (temporary
    /// credentials) the session token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_secret: Option<String>,
}

/// A provider as the catalog validated it: the fields every kind has, and its kind's own
/// settings as one variant of [`Setup`] — a field another kind needs was refused, not kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    pub id: String,
    /// Name of the Worker secret holding the upstream key; `None` for upstreams that need none.
    pub key_secret: Option<String>,
    pub setup: Setup,
    /// Where its requests go: `base_url`, else its kind's own endpoint.
    base: String,
    /// The upstream billing account it bills to (SPEC §9): as written, else its id.
    account: String,
}

/// A provider's own settings, one variant per kind, each read and checked by its kind's
/// [`ProviderKind::setup`].
#[derive(Debug, Clone, PartialEq)]
pub enum Setup {
    Openai,
    Anthropic,
    Gemini,
    Azure(azure::Settings),
    Bedrock(bedrock::Settings),
    Vertex(vertex::Settings),
}

impl Setup {
    pub fn kind(&self) -> Kind {
        match self {
            Setup::Openai => Kind::Openai,
            Setup::Anthropic => Kind::Anthropic,
            Setup::Gemini => Kind::Gemini,
            Setup::Azure(_) => Kind::Azure,
            Setup::Bedrock(_) => Kind::Bedrock,
            Setup::Vertex(_) => Kind::Vertex,
        }
    }
}

impl ProviderDoc {
    /// Its kind: as written, else what `auth` implies.
    fn kind(&self) -> Kind {
        match (self.kind, self.auth) {
            (Some(kind), _) => kind,
            (None, Some(AuthScheme::XApiKey)) => Kind::Anthropic,
            (None, Some(AuthScheme::XGoogApiKey)) => Kind::Gemini,
            (None, _) => Kind::Openai,
        }
    }

    /// The provider it describes (SPEC §20): `auth` for the header kinds (or implied by `kind`),
    /// then the kind's own fields, read by the kind; a field another kind needs is refused rather
    /// than ignored. `Err((field, why))`.
    pub fn validate(&self) -> Result<Provider, (&'static str, String)> {
        let kind = self.kind();
        let k = of(kind);
        match (self.auth, k.header_auth()) {
            (None, None) => {}
            (None, Some(_)) if self.kind.is_some() => {}
            (None, Some(_)) => return Err(("auth", "required (or a `kind`)".into())),
            (Some(a), Some(h)) if a == h || self.kind.is_none() => {}
            (Some(_), _) => {
                return Err((
                    "auth",
                    format!("does not go with kind `{}`: leave it out", kind.as_str()),
                ))
            }
        }
        let set = [
            ("api_version", self.api_version.is_some()),
            ("region", self.region.is_some()),
            ("project", self.project.is_some()),
            ("access_key_secret", self.access_key_secret.is_some()),
            ("secret_key_secret", self.secret_key_secret.is_some()),
            ("session_token_secret", self.session_token_secret.is_some()),
        ];
        let misplaced = set
            .iter()
            .find(|(field, is_set)| *is_set && !k.own_fields().contains(field));
        let misplaced = misplaced
            .map(|(field, _)| *field)
            .or_else(|| (self.key_secret.is_some() && !k.takes_key_secret()).then_some("key_secret"));
        if let Some(field) = misplaced {
            return Err((field, format!("is not a field of kind `{}`", kind.as_str())));
        }
        let setup = k.setup(self)?;
        let base = match (self.base_url.is_empty(), k.default_base(&setup)) {
            (true, Some(base)) => base,
            _ => self.base_url.trim_end_matches('/').to_string(),
        };
        Ok(Provider {
            id: self.id.clone(),
            key_secret: self.key_secret.clone(),
            setup,
            base,
            account: self.account.clone().unwrap_or_else(|| self.id.clone()),
        })
    }
}

impl Provider {
    /// The upstream billing account this provider bills to (SPEC §9).
    pub fn account(&self) -> &str {
        &self.account
    }

    pub fn kind(&self) -> Kind {
        self.setup.kind()
    }

    /// Where its requests go: `base_url`, or for Bedrock and Vertex without one the region's
    /// endpoint.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Every Worker secret it names, with the field naming it.
    pub fn secrets(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let own = match &self.setup {
            Setup::Bedrock(b) => b.secrets(),
            _ => Vec::new(),
        };
        self.key_secret
            .as_deref()
            .map(|name| ("key_secret", name))
            .into_iter()
            .chain(own)
    }

    /// A provider read from a catalog entry's JSON, validated (the tests' way in).
    #[cfg(test)]
    pub fn from_json(entry: Value) -> Provider {
        let doc: ProviderDoc = serde_json::from_value(entry).expect("a provider entry");
        doc.validate().expect("a valid provider")
    }
}

/// `base_url` is required (the kinds with no endpoint of their own).
fn base_url_required(p: &ProviderDoc) -> Result<(), (&'static str, String)> {
    match p.base_url.is_empty() {
        true => Err(("base_url", "required".into())),
        false => Ok(()),
    }
}

/// An Anthropic body as a cloud takes it: no `model` (it is in the URL), the cloud's
/// `anthropic_version`, and `stream` only where the cloud reads it (Vertex's `streamRawPredict`;
/// Bedrock's InvokeModel has the mode in its action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudAnthropic {
    pub version: &'static str,
    pub keep_stream: bool,
    /// Where it takes the client's `anthropic-beta` flags (SPEC §21).
    pub betas: BetaPlace,
}

/// Where a cloud takes Anthropic's beta flags: Bedrock in the body's `anthropic_beta` list,
/// Vertex in the `anthropic-beta` header. Either takes only the flags it documents
/// ([`CLOUD_BETAS`]); a client's other flags are dropped and listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BetaPlace {
    Body,
    Header,
}

/// The `anthropic-beta` flags Bedrock and Vertex document for Claude models (as of 2026-12): a
/// flag they do not know is a 400 there, so only these reach them.
pub const CLOUD_BETAS: [&str; 11] = [
    "computer-use-2024-10-22",
    "computer-use-2025-01-24",
    "token-efficient-tools-2025-02-19",
    "interleaved-thinking-2025-05-14",
    "output-128k-2025-02-19",
    "dev-full-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "tool-search-tool-2025-10-19",
    "tool-examples-2025-10-29",
];

/// A client's `anthropic-beta` header (comma-separated flags) split into the flags a cloud takes
/// ([`CLOUD_BETAS`]) and the others, each in the client's order.
pub fn cloud_betas(header: Option<&str>) -> (Vec<&str>, Vec<&str>) {
    header
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .partition(|b| CLOUD_BETAS.contains(b))
}

/// A provider's `base_url`, read by the same (WHATWG) rules the runtime's `fetch` reads it by
/// (SPEC §18): `https://` with a host, `http://` only for a loopback host, no user info (in
/// `http://127.0.0.1:80@evil.example/v1` the host is `evil.example`), no query or fragment.
/// `Err(why)`.
pub fn check_base_url(base_url: &str) -> Result<(), &'static str> {
    let parsed = url::Url::parse(base_url).map_err(|_| "must be an https:// URL with a host")?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry user info (`user@`): the host is what follows the `@`");
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("must not carry a query or a fragment");
    }
    let loopback = match parsed.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err("must be an https:// URL with a host"),
    };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err("must be https:// (http:// only for a loopback host)"),
        _ => Err("must be an https:// URL"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The least a catalog gives a provider of `kind`.
    fn plain(kind: Kind) -> ProviderDoc {
        let fields = match kind {
            Kind::Openai | Kind::Anthropic | Kind::Gemini => json!({"base_url": "https://api.example.com/v1"}),
            Kind::Azure => json!({"base_url": "https://r.openai.azure.com/openai/v1", "key_secret": "AZ"}),
            Kind::Bedrock => json!({"region": "us-east-1", "access_key_secret": "A", "secret_key_secret": "S"}),
            Kind::Vertex => json!({"region": "us-east5", "project": "p-1", "key_secret": "SA"}),
        };
        let mut doc = json!({"id": "p", "kind": kind.as_str()});
        doc.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        serde_json::from_value(doc).unwrap()
    }

    /// The registry's completeness check: every kind in it has every part — its plain provider
    /// passes its checks, has somewhere to send requests, an address under it for every dialect
    /// it speaks (naming the model), and a way to carry its key (a header, or a signature for the
    /// kind that signs) — and refuses a field of another kind's.
    #[test]
    fn every_registered_kind_has_every_part() {
        for kind in KINDS {
            let k = of(kind);
            let entry = plain(kind);
            let p = entry.validate().unwrap_or_else(|e| panic!("{kind:?}: {e:?}"));
            assert_eq!(p.kind(), kind);
            let base = p.base().to_string();
            assert!(base.starts_with("https://"), "{kind:?} has nowhere to send: {base:?}");
            assert!(!k.apis().is_empty(), "{kind:?}");
            for &api in k.apis() {
                let url = crate::wire::url(&p, api, "the-model", false);
                assert!(url.starts_with(&base), "{kind:?} {api:?}: {url}");
                assert!(
                    url.contains("the-model") || api != Api::Gemini,
                    "{kind:?} {api:?}: {url}"
                );
            }
            // Its key travels one way: in its headers, or as a signature over what is sent (with
            // the values of the secrets it names).
            let url = crate::wire::url(&p, k.apis()[0], "the-model", false);
            let sent = bedrock::sigv4::Request {
                method: "POST",
                url: &url,
                headers: &[("content-type", "application/json")],
                body: b"{}",
            };
            let names: Vec<&str> = p.secrets().map(|(_, name)| name).collect();
            let secret = |name: &str| names.contains(&name).then(|| format!("value of {name}"));
            let signed = k
                .sign(&p, &secret, &sent, 0)
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_ne!(k.key_headers("KEY").is_empty(), signed.is_empty(), "{kind:?}");
            let unsigned = k.sign(&p, &|_| None, &sent, 0);
            assert!(
                signed.is_empty() || unsigned.is_err(),
                "{kind:?} signed without its secrets"
            );
            let foreign = ["api_version", "region", "project", "access_key_secret"]
                .into_iter()
                .find(|f| !k.own_fields().contains(f))
                .unwrap();
            let mut doc = serde_json::to_value(&entry).unwrap();
            doc[foreign] = json!("x");
            let other: ProviderDoc = serde_json::from_value(doc).unwrap();
            assert_eq!(other.validate().map_err(|(field, _)| field), Err(foreign), "{kind:?}");
        }
    }
}
