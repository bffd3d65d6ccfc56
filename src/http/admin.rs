//! `/admin/*` (SPEC §12): catalog, accounts, credit and keys, route health and the verification
//! checks the platform paid for, the outbox and this isolate's D1 statement counts (`GET /admin/d1`),
//! behind the admin token.
//!
//! Without the right token every admin path answers 401 and says nothing else — not even whether
//! the path exists. The catalog holds secret *names* only; no response carries a secret value.

use serde_json::json;
use switchyard_core::admin::{self as body, percent_decode};
use switchyard_core::catalog::{parse_entry, Catalog, CatalogError, Model};
use switchyard_core::keys::{hash_key, mint_key, secrets_equal};
use switchyard_core::money::micros_to_usd;
use switchyard_core::providers::ProviderDoc;
use switchyard_core::ApiError;
use worker::{Env, Method, Request};

use super::body::read_capped;
use super::response::{json_response, HandlerResult};
use crate::runtime::ids::{new_id, random_32};
use crate::store::{AccountRow, Store};

/// How often a single-entry catalog change retries when another admin write raced it; each retry
/// waits a random 5–40 ms so racing writers spread out.
const CAS_RETRIES: usize = 40;

fn bad(e: CatalogError) -> ApiError {
    ApiError::InvalidRequest {
        message: format!("Invalid `{}`: {}.", e.field, e.message),
        param: Some(e.field),
    }
}

fn authorized(req: &Request, env: &Env) -> bool {
    let Ok(expected) = env
        .secret("ADMIN_TOKEN")
        .map(|s| s.to_string())
        .or_else(|_| env.var("ADMIN_TOKEN").map(|v| v.to_string()))
    else {
        return false; // no token configured: admin is closed
    };
    if expected.is_empty() {
        return false;
    }
    let presented = req.headers().get("authorization").ok().flatten();
    let presented = presented
        .as_deref()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    presented.is_some_and(|p| secrets_equal(p, &expected))
}

/// The largest admin body (a whole catalog).
const MAX_ADMIN_BODY_BYTES: usize = 5 * 1024 * 1024;

async fn read_body(req: &mut Request) -> Result<Vec<u8>, ApiError> {
    read_capped(req, MAX_ADMIN_BODY_BYTES).await
}

pub async fn route(req: &mut Request, env: &Env, method: &Method, rest: &str) -> HandlerResult {
    if !authorized(req, env) {
        return Err(ApiError::AdminUnauthorized);
    }
    let store = Store::new(env)?;
    let (head, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let id = percent_decode(tail).ok_or_else(|| ApiError::invalid("Malformed id in the path.", None))?;
    match (method, head, id.as_str()) {
        (Method::Get, "catalog", "") => {
            let (catalog, version) = store.load_catalog().await?;
            let mut doc = serde_json::to_value(catalog.doc()).map_err(|_| ApiError::Internal {
                label: "catalog_encode",
            })?;
            if let Some(o) = doc.as_object_mut() {
                o.insert("version".into(), json!(version));
            }
            Ok(json_response(200, &doc))
        }
        (Method::Get, "d1", "") => {
            use crate::calls::total;
            Ok(json_response(
                200,
                &json!({"statements": total("D1"), "key_reads": total("D1.key"),
                        "unknown_key_reads": total("D1.key_unknown")}),
            ))
        }
        (Method::Get, "outbox", "") => {
            let held = crate::outbox::held(env).await.ok_or(ApiError::StorageUnavailable)?;
            Ok(json_response(200, &json!(held)))
        }
        (Method::Put, "catalog", "") => {
            let (catalog, version) = body::parse_catalog_put(&read_body(req).await?).map_err(bad)?;
            let counts = (catalog.doc().providers.len(), catalog.doc().models.len());
            if !store.save_catalog(catalog, version).await? {
                return Err(ApiError::Conflict {
                    message: "The catalog changed since this version was read: GET /admin/catalog again.".into(),
                });
            }
            Ok(json_response(
                200,
                &json!({"ok": true, "providers": counts.0, "models": counts.1}),
            ))
        }
        (Method::Put, "providers", id) if !id.is_empty() => {
            let provider: ProviderDoc = parse_entry(&read_body(req).await?, id).map_err(bad)?;
            change_catalog(&store, |c| c.with_provider(provider.clone()).map(Some)).await?;
            Ok(json_response(200, &json!({"ok": true, "provider": id})))
        }
        (Method::Delete, "providers", id) if !id.is_empty() => {
            change_catalog(&store, |c| c.without_provider(id)).await?;
            Ok(json_response(200, &json!({"ok": true, "deleted": id})))
        }
        (Method::Put, "models", id) if !id.is_empty() => {
            let model: Model = parse_entry(&read_body(req).await?, id).map_err(bad)?;
            change_catalog(&store, |c| c.with_model(model.clone()).map(Some)).await?;
            Ok(json_response(200, &json!({"ok": true, "model": id})))
        }
        (Method::Delete, "models", id) if !id.is_empty() => {
            change_catalog(&store, |c| c.without_model(id)).await?;
            Ok(json_response(200, &json!({"ok": true, "deleted": id})))
        }
        (Method::Post, "accounts", "") => {
            let new = body::parse_new_account(&read_body(req).await?).map_err(bad)?;
            let id = new.id.clone().unwrap_or_else(|| new_id("acct"));
            if !store.create_account(&id, &new).await? {
                return Err(ApiError::invalid(format!("Account `{id}` already exists."), Some("id")));
            }
            let account = store.account(&id).await?.ok_or(ApiError::Internal {
                label: "account_vanished",
            })?;
            Ok(json_response(201, &account_json(&account)))
        }
        (Method::Get, "accounts", id) if !id.is_empty() && !id.contains('/') => {
            let account = store.account(id).await?.ok_or_else(|| ApiError::NotFound {
                what: format!("Account `{id}`"),
            })?;
            Ok(json_response(200, &account_json(&account)))
        }
        (Method::Post, "accounts", tail) if tail.ends_with("/credit") => {
            let account_id = tail.trim_end_matches("/credit");
            let credit = body::parse_credit(&read_body(req).await?).map_err(bad)?;
            if !store.credit(account_id, credit.amount_micros).await? {
                return Err(ApiError::NotFound {
                    what: format!("Account `{account_id}`"),
                });
            }
            let account = store.account(account_id).await?.ok_or(ApiError::Internal {
                label: "account_vanished",
            })?;
            Ok(json_response(200, &account_json(&account)))
        }
        (Method::Post, "keys", "") => {
            let new = body::parse_new_key(&read_body(req).await?).map_err(bad)?;
            let Some(account) = store.account(&new.account_id).await? else {
                return Err(ApiError::invalid(
                    format!("Account `{}` does not exist.", new.account_id),
                    Some("account_id"),
                ));
            };
            let id = new_id("key");
            // The key names its account's ledger: looked up there, with no directory read.
            let plaintext = mint_key(&random_32(), account.ledger);
            store
                .ledger(account.ledger)?
                .create_key(&id, &hash_key(&plaintext), &new)
                .await?;
            Ok(json_response(
                201,
                &json!({
                    "id": id,
                    "key": plaintext,
                    "account_id": new.account_id,
                    "name": new.name,
                    "rpm": new.rpm,
                    "max_concurrent": new.max_concurrent,
                    "spend_limit": new.spend_limit_micros.map(micros_to_usd),
                    "allow_fallbacks": new.allow_fallbacks,
                    "note": "The key is shown once. Store it now.",
                }),
            ))
        }
        (Method::Delete, "keys", id) if !id.is_empty() => {
            if !store.revoke_key(id).await? {
                return Err(ApiError::NotFound {
                    what: format!("Key `{id}`"),
                });
            }
            Ok(json_response(200, &json!({"ok": true, "deleted": id})))
        }
        (Method::Get, "health", model) if !model.is_empty() && !model.ends_with("/reset") => {
            super::status::admin(env, model).await
        }
        (Method::Post, "health", tail) if tail.ends_with("/reset") => {
            let model_id = tail.trim_end_matches("/reset");
            let (catalog, _) = store.load_catalog().await?;
            let model = catalog.model(model_id).ok_or_else(|| ApiError::NotFound {
                what: format!("Model `{model_id}`"),
            })?;
            if !crate::health::reset(env, &catalog, model).await {
                return Err(ApiError::Internal { label: "health_reset" });
            }
            Ok(json_response(200, &json!({"ok": true, "reset": model_id})))
        }
        (Method::Get, "checks", model) if !model.is_empty() => {
            let checks = store.checks(model, 200).await?;
            let total: i64 = checks
                .iter()
                .filter_map(|c| c["amount_micros"].as_f64())
                .map(|m| m as i64)
                .sum();
            Ok(json_response(
                200,
                &json!({"model": model, "checks": checks, "cost_usd": micros_to_usd(total)}),
            ))
        }
        (Method::Post, "holds", "sweep") => {
            let swept = crate::billing::sweep(env).await?;
            Ok(json_response(200, &json!({"ok": true, "released": swept})))
        }
        _ => Err(ApiError::NotFound {
            what: format!("Admin path /admin/{rest}"),
        }),
    }
}

/// Applies a single-entry change to the stored catalog with compare-and-swap, retrying when
/// another write raced it. `change` returns `Ok(None)` when the entry to delete does not exist.
async fn change_catalog<F>(store: &Store, change: F) -> Result<(), ApiError>
where
    F: Fn(&Catalog) -> Result<Option<Catalog>, CatalogError>,
{
    for _ in 0..CAS_RETRIES {
        let (current, version) = store.load_catalog().await?;
        let next = change(&current).map_err(bad)?.ok_or_else(|| ApiError::NotFound {
            what: "Catalog entry".into(),
        })?;
        if store.save_catalog(next, Some(version)).await? {
            return Ok(());
        }
        let jitter = 5 + u64::from(random_32()[0]) * 35 / 255;
        crate::runtime::clock::sleep(jitter).await;
    }
    Err(ApiError::Internal {
        label: "catalog_contended",
    })
}

fn account_json(a: &AccountRow) -> serde_json::Value {
    let balance = a.balance_micros as i64;
    let held = a.held_micros as i64;
    json!({
        "id": a.id,
        "name": a.name,
        "balance_usd": micros_to_usd(balance),
        "held_usd": micros_to_usd(held),
        "available_usd": micros_to_usd(balance - held),
        "allow_fallbacks": a.allow_fallbacks.map(|v| v != 0.0),
        "ledger": a.ledger,
    })
}
