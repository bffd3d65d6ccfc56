//! The catalog (SPEC §2): providers, models with their ordered routes, and policy overrides.
//!
//! The catalog is data: it arrives as one JSON document, is validated here, and is stored as that
//! document. [`Catalog::parse`] is the only way to get one, so every `Catalog` in the program has
//! passed validation (unknown fields, duplicate ids, unknown providers, models without routes …).
//! Errors name the offending field by its JSON path, e.g. `models[1].routes[0].provider`.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::providers::{self, Provider, ProviderDoc};
use crate::tools::{self, ToolPrices};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Input read from the prompt cache; `input_per_mtok` when absent (SPEC §17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    /// Input written to the prompt cache (Anthropic's 5-minute cache, any other cache's write);
    /// `input_per_mtok` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
    /// Input written to Anthropic's 1-hour cache; `cache_write_per_mtok` (else `input_per_mtok`)
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_per_mtok: Option<f64>,
}

impl Price {
    /// Input and output prices, no cache prices (cache tokens then cost input).
    pub fn per_mtok(input_per_mtok: f64, output_per_mtok: f64) -> Price {
        Price {
            input_per_mtok,
            output_per_mtok,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
            cache_write_1h_per_mtok: None,
        }
    }

    pub fn cache_read(&self) -> f64 {
        self.cache_read_per_mtok.unwrap_or(self.input_per_mtok)
    }

    pub fn cache_write(&self) -> f64 {
        self.cache_write_per_mtok.unwrap_or(self.input_per_mtok)
    }

    pub fn cache_write_1h(&self) -> f64 {
        self.cache_write_1h_per_mtok.unwrap_or_else(|| self.cache_write())
    }

    /// The highest price any input token of a request can cost here: what the hold charges its
    /// input at (a body's tokens may all be cache writes, SPEC §17).
    pub fn max_input(&self) -> f64 {
        [
            self.input_per_mtok,
            self.cache_read(),
            self.cache_write(),
            self.cache_write_1h(),
        ]
        .into_iter()
        .fold(0.0, f64::max)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub id: String,
    pub provider: String,
    pub upstream_model: String,
    pub apis: Vec<Api>,
    pub price: Price,
    /// Defaults to the model's context window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default)]
    pub slow: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported_params: Vec<String>,
    /// Its share of new conversations under `balance: "spread"` (SPEC §8a), relative to the
    /// model's other routes; 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// Whether a demoted route must pass a verification check before live traffic may probe it,
    /// and whether it is checked when idle (SPEC §8a); true when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
    /// USD per use of each tool the provider runs and bills per use that this route serves
    /// (SPEC §21); a tool it does not price makes it unable for a request using it.
    #[serde(default, skip_serializing_if = "ToolPrices::is_empty")]
    pub tool_prices: ToolPrices,
}

impl Route {
    pub fn weight(&self) -> f64 {
        self.weight.unwrap_or(1.0)
    }

    pub fn verify(&self) -> bool {
        self.verify.unwrap_or(true)
    }
}

/// How a model's first attempts are shared among its routes (SPEC §8a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// The usual order (catalog order, by health): the first healthy route takes everything.
    #[default]
    Priority,
    /// New conversations spread over the healthy routes by weight × health; each conversation
    /// stays on its route while that route is healthy.
    Spread,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub id: String,
    #[serde(default)]
    pub reasoning: bool,
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyOverrides>,
    #[serde(default, skip_serializing_if = "is_priority")]
    pub balance: Balance,
}

fn is_priority(b: &Balance) -> bool {
    *b == Balance::Priority
}

/// Optional overrides of the defaults in SPEC §16, at the top level or on one model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_first_content_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_stream_first_content_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_route_stream_first_content_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonstream_base_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonstream_per_20_tokens_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonstream_cap_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_route_min_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_content_budget_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_cap_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demote_after: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demote_after_overloaded: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_max_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnect_grace_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_fallbacks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_snapshot_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance_snapshot_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimistic_hold_fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_idle_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_tool_uses: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desk_from_per_s: Option<u64>,
}

/// The effective policy for one model: SPEC §16 defaults, then the top-level overrides, then the
/// model's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    pub stream_first_content_ms: u64,
    pub reasoning_stream_first_content_ms: u64,
    pub slow_route_stream_first_content_ms: u64,
    pub nonstream_base_ms: u64,
    pub nonstream_per_20_tokens_ms: u64,
    pub nonstream_cap_ms: u64,
    pub last_route_min_ms: u64,
    pub pre_content_budget_ms: u64,
    pub idle_timeout_ms: u64,
    pub stream_cap_ms: u64,
    pub max_attempts: u32,
    pub demote_after: u32,
    pub demote_after_overloaded: u32,
    pub cooldown_ms: u64,
    pub cooldown_max_ms: u64,
    pub disconnect_grace_ms: u64,
    pub key_wait_ms: u64,
    pub capacity_wait_ms: u64,
    pub allow_fallbacks: bool,
    pub health_snapshot_ms: u64,
    pub balance_snapshot_ms: u64,
    pub optimistic_hold_fraction: f64,
    /// A healthy route with no traffic and no check for this long is checked (SPEC §8a); 0: never.
    pub verify_idle_ms: u64,
    /// A demoted route that verifies is checked this often while its cooldown runs, doubling with
    /// each demotion up to `cooldown_ms`; a pass ends the cooldown (SPEC §8b).
    pub recheck_ms: u64,
    /// A request may go to a route that does not speak its dialect, translated (SPEC §19).
    pub translate: bool,
    /// The uses of a priced server tool held for when the request sets no bound (SPEC §21).
    pub held_tool_uses: u64,
    /// A ledger settling at least this many requests a second has its settlements and fast holds
    /// gathered by desks before D1 (SPEC §22, `crate::desks`); 0: never. Read from the catalog's
    /// top-level policy.
    pub desk_from_per_s: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            stream_first_content_ms: 15_000,
            reasoning_stream_first_content_ms: 45_000,
            slow_route_stream_first_content_ms: 30_000,
            nonstream_base_ms: 15_000,
            nonstream_per_20_tokens_ms: 1_000,
            nonstream_cap_ms: 300_000,
            last_route_min_ms: 60_000,
            pre_content_budget_ms: 600_000,
            idle_timeout_ms: 120_000,
            stream_cap_ms: 3_600_000,
            max_attempts: 0,
            demote_after: 3,
            demote_after_overloaded: 1,
            cooldown_ms: 300_000,
            cooldown_max_ms: 1_800_000,
            disconnect_grace_ms: 15_000,
            key_wait_ms: 2_000,
            capacity_wait_ms: 10_000,
            allow_fallbacks: true,
            health_snapshot_ms: 1_000,
            balance_snapshot_ms: 5_000,
            optimistic_hold_fraction: 0.01,
            verify_idle_ms: 900_000,
            recheck_ms: 15_000,
            translate: true,
            held_tool_uses: 10,
            desk_from_per_s: 200,
        }
    }
}

impl Policy {
    /// The non-stream limit from `base_ms` for `max_tokens` of output: base + 1 s per 20 tokens,
    /// capped (SPEC §5).
    pub fn nonstream_limit(&self, base_ms: u64, max_tokens: u64) -> u64 {
        let per = max_tokens.div_ceil(20).saturating_mul(self.nonstream_per_20_tokens_ms);
        base_ms.saturating_add(per).min(self.nonstream_cap_ms.max(base_ms))
    }

    fn apply(&mut self, o: &PolicyOverrides) {
        macro_rules! take {
            ($($field:ident),* $(,)?) => { $( if let Some(v) = o.$field { self.$field = v; } )* };
        }
        take!(
            stream_first_content_ms,
            reasoning_stream_first_content_ms,
            slow_route_stream_first_content_ms,
            nonstream_base_ms,
            nonstream_per_20_tokens_ms,
            nonstream_cap_ms,
            last_route_min_ms,
            pre_content_budget_ms,
            idle_timeout_ms,
            stream_cap_ms,
            max_attempts,
            demote_after,
            demote_after_overloaded,
            cooldown_ms,
            cooldown_max_ms,
            disconnect_grace_ms,
            key_wait_ms,
            capacity_wait_ms,
            allow_fallbacks,
            health_snapshot_ms,
            balance_snapshot_ms,
            optimistic_hold_fraction,
            verify_idle_ms,
            recheck_ms,
            translate,
            held_tool_uses,
            desk_from_per_s,
        );
    }
}

/// The catalog document as stored and as `GET /admin/catalog` returns it (it holds secret
/// *names*, never secret values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogDoc {
    pub providers: Vec<ProviderDoc>,
    pub models: Vec<Model>,
    #[serde(default)]
    pub policy: PolicyOverrides,
}

/// A validated catalog with lookup indexes.
#[derive(Debug, Clone)]
pub struct Catalog {
    doc: CatalogDoc,
    /// The document's providers, validated (in its order).
    providers: Vec<Provider>,
    model_index: HashMap<String, usize>,
    provider_index: HashMap<String, usize>,
}

/// Why a catalog document was refused: the JSON path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn err(field: impl Into<String>, message: impl Into<String>) -> CatalogError {
    CatalogError {
        field: field.into(),
        message: message.into(),
    }
}

/// Deserialises `T` from JSON, reporting the failing field as a JSON path.
pub(crate) fn from_json_with_path<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CatalogError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "body".to_string() } else { path };
        let inner = e.into_inner().to_string();
        // serde_json appends " at line L column C"; the path already says where.
        let message = match inner.find(" at line ") {
            Some(i) => inner[..i].to_string(),
            None => inner,
        };
        err(field, message)
    })
}

impl Catalog {
    /// Parses and validates a whole catalog document (`PUT /admin/catalog`).
    pub fn parse(bytes: &[u8]) -> Result<Catalog, CatalogError> {
        Catalog::from_doc(from_json_with_path(bytes)?)
    }

    /// [`Catalog::parse`] for a stored document, which passed it when written: read with the plain
    /// JSON reader — a new isolate compiles less code for it than for the reader that names an
    /// error's path (issue 36) — and with that one only to name what is wrong.
    pub fn load(bytes: &[u8]) -> Result<Catalog, CatalogError> {
        match serde_json::from_slice::<CatalogDoc>(bytes) {
            Ok(doc) => Catalog::from_doc(doc),
            Err(_) => Catalog::parse(bytes),
        }
    }

    /// Validates a document; the single gate every catalog passes.
    pub fn from_doc(doc: CatalogDoc) -> Result<Catalog, CatalogError> {
        let mut provider_index = HashMap::new();
        let mut providers = Vec::with_capacity(doc.providers.len());
        for (i, entry) in doc.providers.iter().enumerate() {
            let at = format!("providers[{i}]");
            check_id(&entry.id, &format!("{at}.id"))?;
            if provider_index.insert(entry.id.clone(), i).is_some() {
                return Err(err(format!("{at}.id"), format!("duplicate provider id `{}`", entry.id)));
            }
            let p = entry
                .validate()
                .map_err(|(field, why)| err(format!("{at}.{field}"), why))?;
            check_base_url(p.base(), &format!("{at}.base_url"))?;
            for (field, name) in p.secrets() {
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(err(
                        format!("{at}.{field}"),
                        "must name a secret: letters, digits and _",
                    ));
                }
                if is_reserved_secret(name) {
                    return Err(err(
                        format!("{at}.{field}"),
                        "names one of Switchyard's own secrets (ADMIN_TOKEN, SWITCHYARD_*), not an upstream key",
                    ));
                }
            }
            if let Some(account) = &entry.account {
                check_id(account, &format!("{at}.account"))?;
            }
            providers.push(p);
        }
        let mut model_index = HashMap::new();
        for (i, m) in doc.models.iter().enumerate() {
            let at = format!("models[{i}]");
            check_id(&m.id, &format!("{at}.id"))?;
            if model_index.insert(m.id.clone(), i).is_some() {
                return Err(err(format!("{at}.id"), format!("duplicate model id `{}`", m.id)));
            }
            if m.context_window == 0 {
                return Err(err(format!("{at}.context_window"), "must be positive"));
            }
            if m.max_output_tokens == 0 {
                return Err(err(format!("{at}.max_output_tokens"), "must be positive"));
            }
            if m.routes.is_empty() {
                return Err(err(format!("{at}.routes"), format!("model `{}` has no route", m.id)));
            }
            let mut route_ids = HashSet::new();
            for (j, r) in m.routes.iter().enumerate() {
                let at = format!("{at}.routes[{j}]");
                check_id(&r.id, &format!("{at}.id"))?;
                if !route_ids.insert(r.id.as_str()) {
                    return Err(err(
                        format!("{at}.id"),
                        format!("duplicate route id `{}` in model `{}`", r.id, m.id),
                    ));
                }
                if !provider_index.contains_key(&r.provider) {
                    return Err(err(
                        format!("{at}.provider"),
                        format!("unknown provider `{}`", r.provider),
                    ));
                }
                if r.upstream_model.is_empty() {
                    return Err(err(format!("{at}.upstream_model"), "must not be empty"));
                }
                if r.apis.is_empty() {
                    return Err(err(
                        format!("{at}.apis"),
                        "must list at least one of chat, messages, responses, gemini (or converse, for bedrock)",
                    ));
                }
                let kind = providers[provider_index[&r.provider]].kind();
                let speaks = kind.apis();
                if let Some(k) = r.apis.iter().position(|a| !speaks.contains(a)) {
                    return Err(err(
                        format!("{at}.apis[{k}]"),
                        format!("a `{}` provider does not speak `{}`", kind.as_str(), r.apis[k].as_str()),
                    ));
                }
                if let (Some(why), true) = (providers::of(kind).one_api_per_route(), r.apis.len() > 1) {
                    return Err(err(format!("{at}.apis[1]"), why));
                }
                for (name, v) in [
                    ("input_per_mtok", Some(r.price.input_per_mtok)),
                    ("output_per_mtok", Some(r.price.output_per_mtok)),
                    ("cache_read_per_mtok", r.price.cache_read_per_mtok),
                    ("cache_write_per_mtok", r.price.cache_write_per_mtok),
                    ("cache_write_1h_per_mtok", r.price.cache_write_1h_per_mtok),
                ] {
                    let Some(v) = v else { continue };
                    if !v.is_finite() || !(0.0..=1_000_000.0).contains(&v) {
                        return Err(err(
                            format!("{at}.price.{name}"),
                            "must be a non-negative number of USD per million tokens",
                        ));
                    }
                }
                if r.context_window == Some(0) {
                    return Err(err(format!("{at}.context_window"), "must be positive"));
                }
                if r.weight
                    .is_some_and(|w| !(w.is_finite() && w > 0.0 && w <= 1_000_000.0))
                {
                    return Err(err(format!("{at}.weight"), "must be a positive number up to 1000000"));
                }
                if r.max_concurrency == Some(0) {
                    return Err(err(format!("{at}.max_concurrency"), "must be positive"));
                }
                if let Err((tool, why)) = tools::check_prices(&r.tool_prices) {
                    return Err(err(format!("{at}.tool_prices.{tool}"), why));
                }
            }
            if let Some(p) = &m.policy {
                check_policy(p, &format!("{at}.policy"))?;
            }
        }
        check_policy(&doc.policy, "policy")?;
        Ok(Catalog {
            doc,
            providers,
            model_index,
            provider_index,
        })
    }

    /// The document as stored and returned by `GET /admin/catalog`.
    pub fn doc(&self) -> &CatalogDoc {
        &self.doc
    }

    pub fn model(&self, id: &str) -> Option<&Model> {
        self.model_index.get(id).and_then(|&i| self.doc.models.get(i))
    }

    pub fn provider(&self, id: &str) -> Option<&Provider> {
        self.provider_index.get(id).and_then(|&i| self.providers.get(i))
    }

    /// Model ids in catalog order.
    pub fn model_ids(&self) -> Vec<String> {
        self.doc.models.iter().map(|m| m.id.clone()).collect()
    }

    /// Each route's (id, upstream account), in catalog order.
    pub fn route_accounts(&self, model: &Model) -> Vec<(String, String)> {
        model
            .routes
            .iter()
            .map(|r| {
                let account = self
                    .provider(&r.provider)
                    .map(|p| p.account().to_string())
                    .unwrap_or_default();
                (r.id.clone(), account)
            })
            .collect()
    }

    /// The effective policy for a model's requests.
    pub fn policy_for(&self, model: &Model) -> Policy {
        let mut policy = Policy::default();
        policy.apply(&self.doc.policy);
        if let Some(o) = &model.policy {
            policy.apply(o);
        }
        policy
    }

    /// The catalog with one provider added or replaced (`PUT /admin/providers/{id}`), validated
    /// against the rest.
    pub fn with_provider(&self, provider: ProviderDoc) -> Result<Catalog, CatalogError> {
        let mut doc = self.doc.clone();
        match doc.providers.iter_mut().find(|p| p.id == provider.id) {
            Some(slot) => *slot = provider,
            None => doc.providers.push(provider),
        }
        Catalog::from_doc(doc)
    }

    /// The catalog without a provider; refused while a route still uses it.
    pub fn without_provider(&self, id: &str) -> Result<Option<Catalog>, CatalogError> {
        if self.provider(id).is_none() {
            return Ok(None);
        }
        for m in &self.doc.models {
            if let Some(r) = m.routes.iter().find(|r| r.provider == id) {
                return Err(err(
                    "provider",
                    format!("provider `{id}` is used by route `{}` of model `{}`", r.id, m.id),
                ));
            }
        }
        let mut doc = self.doc.clone();
        doc.providers.retain(|p| p.id != id);
        Catalog::from_doc(doc).map(Some)
    }

    /// The catalog with one model added (at the end) or replaced in place.
    pub fn with_model(&self, model: Model) -> Result<Catalog, CatalogError> {
        let mut doc = self.doc.clone();
        match doc.models.iter_mut().find(|m| m.id == model.id) {
            Some(slot) => *slot = model,
            None => doc.models.push(model),
        }
        Catalog::from_doc(doc)
    }

    /// The catalog without a model (`None` if it was not there).
    pub fn without_model(&self, id: &str) -> Result<Option<Catalog>, CatalogError> {
        if self.model(id).is_none() {
            return Ok(None);
        }
        let mut doc = self.doc.clone();
        doc.models.retain(|m| m.id != id);
        Catalog::from_doc(doc).map(Some)
    }

    /// An empty catalog (before the first `PUT /admin/catalog`).
    pub fn empty() -> Catalog {
        Catalog {
            doc: CatalogDoc {
                providers: vec![],
                models: vec![],
                policy: PolicyOverrides::default(),
            },
            providers: vec![],
            model_index: HashMap::new(),
            provider_index: HashMap::new(),
        }
    }
}

/// Parses one provider or model entry for the single-entry admin endpoints and checks that the
/// path id and the body id agree (a body without `id` takes the path's).
pub fn parse_entry<T: serde::de::DeserializeOwned>(bytes: &[u8], path_id: &str) -> Result<T, CatalogError> {
    let mut value: serde_json::Value = from_json_with_path(bytes)?;
    let obj = value
        .as_object_mut()
        .ok_or_else(|| err("body", "must be a JSON object"))?;
    match obj.get("id") {
        None => {
            obj.insert("id".into(), serde_json::Value::String(path_id.to_string()));
        }
        Some(serde_json::Value::String(id)) if id == path_id => {}
        Some(_) => return Err(err("id", format!("must equal the id in the path (`{path_id}`)"))),
    }
    let bytes = serde_json::to_vec(&value).map_err(|e| err("body", e.to_string()))?;
    from_json_with_path(&bytes)
}

fn check_id(id: &str, field: &str) -> Result<(), CatalogError> {
    let ok = !id.is_empty() && id.len() <= 200 && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(err(
            field,
            "must be 1-200 characters of letters, digits and - _ . / : @",
        ))
    }
}

/// The longest a timer may be set for (the runtime's `setTimeout` takes a signed 32-bit delay).
pub const MAX_TIMER_MS: u64 = (1 << 31) - 1;
/// The longest a departed client's attempt may run on (`disconnect_grace_ms`): Cloudflare's
/// `waitUntil` window after a response is 30 s, and settling, the record and the health report
/// must still fit in it after the grace ends (SPEC §18).
pub const MAX_AFTER_RESPONSE_MS: u64 = 20_000;

/// `https://`, or `http://` to a loopback host (local development and tests only): see
/// [`providers::check_base_url`].
pub(crate) fn check_base_url(base_url: &str, at: &str) -> Result<(), CatalogError> {
    providers::check_base_url(base_url).map_err(|why| err(at, why))
}

/// Secrets that are Switchyard's own, never an upstream key: `ADMIN_TOKEN` and every
/// `SWITCHYARD_*` name (reserved for the gateway's own configuration).
pub fn is_reserved_secret(name: &str) -> bool {
    name == "ADMIN_TOKEN" || name.starts_with("SWITCHYARD_")
}

fn check_policy(p: &PolicyOverrides, at: &str) -> Result<(), CatalogError> {
    let positive_ms = [
        ("stream_first_content_ms", p.stream_first_content_ms),
        ("reasoning_stream_first_content_ms", p.reasoning_stream_first_content_ms),
        (
            "slow_route_stream_first_content_ms",
            p.slow_route_stream_first_content_ms,
        ),
        ("nonstream_base_ms", p.nonstream_base_ms),
        ("nonstream_cap_ms", p.nonstream_cap_ms),
        ("last_route_min_ms", p.last_route_min_ms),
        ("pre_content_budget_ms", p.pre_content_budget_ms),
        ("idle_timeout_ms", p.idle_timeout_ms),
        ("stream_cap_ms", p.stream_cap_ms),
        ("cooldown_ms", p.cooldown_ms),
        ("cooldown_max_ms", p.cooldown_max_ms),
        ("recheck_ms", p.recheck_ms),
    ];
    for (name, v) in positive_ms {
        if v.is_some_and(|ms| ms == 0 || ms > MAX_TIMER_MS) {
            return Err(err(
                format!("{at}.{name}"),
                format!("must be between 1 and {MAX_TIMER_MS} ms"),
            ));
        }
    }
    let any_ms = [
        ("nonstream_per_20_tokens_ms", p.nonstream_per_20_tokens_ms),
        ("key_wait_ms", p.key_wait_ms),
        ("capacity_wait_ms", p.capacity_wait_ms),
        ("health_snapshot_ms", p.health_snapshot_ms),
        ("balance_snapshot_ms", p.balance_snapshot_ms),
        ("verify_idle_ms", p.verify_idle_ms),
    ];
    for (name, v) in any_ms {
        if v.is_some_and(|ms| ms > MAX_TIMER_MS) {
            return Err(err(
                format!("{at}.{name}"),
                format!("must be at most {MAX_TIMER_MS} ms"),
            ));
        }
    }
    if p.disconnect_grace_ms.is_some_and(|ms| ms > MAX_AFTER_RESPONSE_MS) {
        return Err(err(
            format!("{at}.disconnect_grace_ms"),
            format!("must be at most {MAX_AFTER_RESPONSE_MS} ms (the runtime's window after a response)"),
        ));
    }
    if let Some(f) = p.optimistic_hold_fraction {
        if !(0.0..=1.0).contains(&f) {
            return Err(err(format!("{at}.optimistic_hold_fraction"), "must be between 0 and 1"));
        }
    }
    if p.held_tool_uses.is_some_and(|n| !(1..=1_000).contains(&n)) {
        return Err(err(format!("{at}.held_tool_uses"), "must be between 1 and 1000"));
    }
    for (name, v) in [
        ("demote_after", p.demote_after),
        ("demote_after_overloaded", p.demote_after_overloaded),
    ] {
        if v == Some(0) {
            return Err(err(format!("{at}.{name}"), "must be at least 1"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> serde_json::Value {
        json!({
            "providers": [
                {"id": "acme", "base_url": "https://api.acme.example/v1", "auth": "bearer",
                 "key_secret": "ACME_KEY", "account": "acme-main"},
                {"id": "mock", "base_url": "http://127.0.0.1:9100/ok", "auth": "x-api-key"}
            ],
            "models": [
                {"id": "acme/chat-large", "context_window": 128000, "max_output_tokens": 8192,
                 "routes": [
                    {"id": "acme-eu", "provider": "acme", "upstream_model": "chat-large-2026",
                     "apis": ["chat", "responses"], "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
                     "context_window": 128000, "slow": false, "max_concurrency": 64,
                     "unsupported_params": ["logprobs"]},
                    {"id": "mock-1", "provider": "mock", "upstream_model": "m",
                     "apis": ["chat"], "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
                 ],
                 "policy": {"stream_first_content_ms": 500}}
            ],
            "policy": {"max_attempts": 2, "stream_first_content_ms": 1000}
        })
    }

    fn parse(v: &serde_json::Value) -> Result<Catalog, CatalogError> {
        Catalog::parse(v.to_string().as_bytes())
    }

    #[test]
    fn accepts_the_spec_example_and_indexes_it() {
        let c = parse(&sample()).unwrap();
        let m = c.model("acme/chat-large").unwrap();
        assert_eq!(m.routes.len(), 2);
        assert_eq!(c.provider("acme").unwrap().account(), "acme-main");
        assert_eq!(c.provider("mock").unwrap().account(), "mock");
        assert!(c.model("nope").is_none());
        let p = c.policy_for(m);
        assert_eq!(p.stream_first_content_ms, 500, "model policy overrides the top level");
        assert_eq!(p.max_attempts, 2, "top-level policy overrides the default");
        assert_eq!(p.idle_timeout_ms, 120_000, "defaults stay");
    }

    #[test]
    fn a_stored_catalog_loads_as_it_parses_and_a_bad_one_is_refused_naming_its_field() {
        let text = sample().to_string();
        let loaded = Catalog::load(text.as_bytes()).unwrap();
        assert_eq!(loaded.doc(), Catalog::parse(text.as_bytes()).unwrap().doc());
        assert!(loaded.model("acme/chat-large").is_some());
        // One the JSON reader refuses, one that reads but fails validation.
        let mut unreadable = sample();
        unreadable["models"][0]["routes"][1]["price"] = json!("free");
        let mut invalid = sample();
        invalid["models"][0]["routes"][1]["provider"] = json!("ghost");
        for (bad, field) in [
            (unreadable, "models[0].routes[1].price"),
            (invalid, "models[0].routes[1].provider"),
        ] {
            let text = bad.to_string();
            let refused = Catalog::load(text.as_bytes()).unwrap_err();
            assert_eq!(refused, Catalog::parse(text.as_bytes()).unwrap_err());
            assert!(refused.field.starts_with(field), "{refused}");
        }
    }

    #[test]
    fn refusals_name_the_field() {
        type Mutation = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|v| v["providers"][0]["colour"] = json!("red")), "providers[0]"),
            (
                Box::new(|v| v["models"][0]["routes"][1]["provider"] = json!("ghost")),
                "models[0].routes[1].provider",
            ),
            (Box::new(|v| v["providers"][1]["id"] = json!("acme")), "providers[1].id"),
            (Box::new(|v| v["models"][0]["routes"] = json!([])), "models[0].routes"),
            (
                Box::new(|v| v["models"][0]["routes"][1]["id"] = json!("acme-eu")),
                "models[0].routes[1].id",
            ),
            (
                Box::new(|v| v["models"][0]["routes"][0]["price"]["input_per_mtok"] = json!(-1)),
                "models[0].routes[0].price.input_per_mtok",
            ),
            (
                Box::new(|v| v["models"][0]["routes"][0]["apis"] = json!(["chat", "smoke"])),
                "models[0].routes[0].apis[1]",
            ),
            (
                Box::new(|v| v["policy"]["optimistic_hold_fraction"] = json!(2.0)),
                "policy.optimistic_hold_fraction",
            ),
            (Box::new(|v| v["policy"]["bogus_knob"] = json!(1)), "policy"),
            (
                Box::new(|v| v["providers"][0]["base_url"] = json!("ftp://x")),
                "providers[0].base_url",
            ),
            (
                Box::new(|v| {
                    let m = v["models"][0].clone();
                    v["models"].as_array_mut().unwrap().push(m);
                }),
                "models[1].id",
            ),
        ];
        for (mutate, field) in cases {
            let mut v = sample();
            mutate(&mut v);
            let e = parse(&v).unwrap_err();
            assert!(e.field.starts_with(field), "expected field {field}, got {e}");
        }
    }

    #[test]
    fn single_entry_changes_are_validated_against_the_rest() {
        let c = parse(&sample()).unwrap();
        assert!(c.without_provider("acme").is_err(), "a provider in use cannot go");
        let m: Model = parse_entry(
            br#"{"context_window":1,"max_output_tokens":1,"routes":[{"id":"r","provider":"ghost","upstream_model":"x","apis":["chat"],"price":{"input_per_mtok":0,"output_per_mtok":0}}]}"#,
            "new/model",
        )
        .unwrap();
        assert_eq!(m.id, "new/model");
        assert_eq!(c.with_model(m).unwrap_err().field, "models[1].routes[0].provider");
        assert!(parse_entry::<Model>(br#"{"id":"other"}"#, "new/model").is_err());
        let c2 = c.without_model("acme/chat-large").unwrap().unwrap();
        assert!(c2.model("acme/chat-large").is_none());
        assert!(c2.without_model("acme/chat-large").unwrap().is_none());
    }

    #[test]
    fn round_trips_through_its_document() {
        let c = parse(&sample()).unwrap();
        let again = Catalog::parse(&serde_json::to_vec(c.doc()).unwrap()).unwrap();
        assert_eq!(again.doc(), c.doc());
    }

    #[test]
    fn upstreams_are_https_except_on_loopback() {
        for ok in [
            "https://api.example.com/v1",
            "http://127.0.0.1:9100/x",
            "http://localhost:8787",
            "http://[::1]:9/v1",
        ] {
            assert!(check_base_url(ok, "u").is_ok(), "{ok}");
        }
        for bad in [
            "http://api.example.com/v1",
            "ftp://x",
            "https://",
            "api.example.com",
            "http://127.0.0.1.evil.com",
            // User info: the host is what follows the `@` (SPEC §18).
            "http://127.0.0.1:80@evil.example/v1",
            "https://user:pass@api.example.com/v1",
            "http://localhost@evil.example",
            "https://api.example.com/v1?key=x",
            "http://0x7f.1@evil.example",
        ] {
            assert!(check_base_url(bad, "u").is_err(), "{bad}");
        }
    }

    #[test]
    fn our_own_secrets_and_unusable_timers_are_refused() {
        let mut doc = sample();
        doc["providers"][0]["key_secret"] = json!("ADMIN_TOKEN");
        assert_eq!(
            Catalog::parse(doc.to_string().as_bytes()).unwrap_err().field,
            "providers[0].key_secret"
        );
        for (knob, value) in [
            ("stream_cap_ms", json!(1u64 << 40)),
            ("stream_first_content_ms", json!(0)),
            ("disconnect_grace_ms", json!(60_000)),
            ("health_snapshot_ms", json!(1u64 << 32)),
            ("recheck_ms", json!(0)),
            ("recheck_ms", json!(1u64 << 31)),
        ] {
            let mut doc = sample();
            doc["policy"] = json!({ knob: value });
            assert_eq!(
                Catalog::parse(doc.to_string().as_bytes()).unwrap_err().field,
                format!("policy.{knob}"),
                "{knob}"
            );
        }
    }
}
