//! Admin API request bodies (SPEC §12): accounts, credit and keys, parsed and validated.
//!
//! Amounts arrive in USD and leave this module as integer micro-dollars.

use serde::Deserialize;

use crate::catalog::{from_json_with_path, Catalog, CatalogError};
use crate::money::usd_to_micros;

/// `POST /admin/accounts`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAccount {
    /// Chosen by the operator; generated when absent.
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Account-level `allow_fallbacks` (request → key → account → platform).
    #[serde(default)]
    pub allow_fallbacks: Option<bool>,
}

/// `POST /admin/accounts/{id}/credit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Credit {
    pub amount_micros: i64,
}

/// `POST /admin/keys`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewKey {
    pub account_id: String,
    pub name: Option<String>,
    pub rpm: Option<u32>,
    pub max_concurrent: Option<u32>,
    pub spend_limit_micros: Option<i64>,
    pub allow_fallbacks: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreditBody {
    amount_usd: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyBody {
    account_id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    rpm: Option<u32>,
    #[serde(default)]
    max_concurrent: Option<u32>,
    /// The contract's name is `spend_limit` (USD); `spend_limit_usd` is accepted too.
    #[serde(default, rename = "spend_limit", alias = "spend_limit_usd")]
    spend_limit_usd: Option<f64>,
    #[serde(default)]
    allow_fallbacks: Option<bool>,
}

fn invalid(field: &str, message: &str) -> CatalogError {
    CatalogError {
        field: field.into(),
        message: message.into(),
    }
}

fn check_id(id: &str, field: &str) -> Result<(), CatalogError> {
    if id.is_empty() || id.len() > 100 || !id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(invalid(field, "must be 1-100 characters of letters, digits and - _ ."));
    }
    Ok(())
}

pub fn parse_new_account(bytes: &[u8]) -> Result<NewAccount, CatalogError> {
    let body: NewAccount = if bytes.iter().all(u8::is_ascii_whitespace) {
        NewAccount {
            id: None,
            name: None,
            allow_fallbacks: None,
        }
    } else {
        from_json_with_path(bytes)?
    };
    if let Some(id) = &body.id {
        check_id(id, "id")?;
    }
    Ok(body)
}

pub fn parse_credit(bytes: &[u8]) -> Result<Credit, CatalogError> {
    let body: CreditBody = from_json_with_path(bytes)?;
    match usd_to_micros(body.amount_usd) {
        Some(m) if m > 0 => Ok(Credit { amount_micros: m }),
        _ => Err(invalid("amount_usd", "must be a positive amount of USD")),
    }
}

pub fn parse_new_key(bytes: &[u8]) -> Result<NewKey, CatalogError> {
    let body: KeyBody = from_json_with_path(bytes)?;
    check_id(&body.account_id, "account_id")?;
    let spend_limit_micros = match body.spend_limit_usd {
        None => None,
        Some(usd) => match usd_to_micros(usd) {
            Some(m) if m >= 0 => Some(m),
            _ => return Err(invalid("spend_limit", "must be a non-negative amount of USD")),
        },
    };
    for (field, v) in [("rpm", body.rpm), ("max_concurrent", body.max_concurrent)] {
        if v == Some(0) {
            return Err(invalid(field, "must be at least 1 (omit it for no limit)"));
        }
    }
    Ok(NewKey {
        account_id: body.account_id,
        name: body.name,
        rpm: body.rpm,
        max_concurrent: body.max_concurrent,
        spend_limit_micros,
        allow_fallbacks: body.allow_fallbacks,
    })
}

/// A `PUT /admin/catalog` body: the catalog, and the `version` it was read at when the body came
/// from `GET /admin/catalog` (then the write only succeeds if the stored catalog is still at it).
pub fn parse_catalog_put(bytes: &[u8]) -> Result<(Catalog, Option<i64>), CatalogError> {
    let mut value: serde_json::Value = from_json_with_path(bytes)?;
    let version = match value.as_object_mut().and_then(|o| o.remove("version")) {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => Some(n),
            _ => {
                return Err(invalid(
                    "version",
                    "must be the non-negative integer GET /admin/catalog returned",
                ))
            }
        },
    };
    let catalog = Catalog::parse(value.to_string().as_bytes())?;
    Ok((catalog, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!(parse_new_account(b"").unwrap().id, None);
        assert_eq!(
            parse_new_account(br#"{"id":"acct-1"}"#).unwrap().id.as_deref(),
            Some("acct-1")
        );
        assert_eq!(parse_new_account(br#"{"id":"a b"}"#).unwrap_err().field, "id");
        assert_eq!(
            parse_credit(br#"{"amount_usd": 12.5}"#).unwrap().amount_micros,
            12_500_000
        );
        assert_eq!(parse_credit(br#"{"amount_usd": 0}"#).unwrap_err().field, "amount_usd");
        assert_eq!(parse_credit(br#"{"amount": 1}"#).unwrap_err().field, "amount");
        let k = parse_new_key(br#"{"account_id":"a","spend_limit_usd":1.25,"rpm":10}"#).unwrap();
        assert_eq!(k.spend_limit_micros, Some(1_250_000));
        assert_eq!(k.rpm, Some(10));
        assert_eq!(
            parse_new_key(br#"{"account_id":"a","rpm":0}"#).unwrap_err().field,
            "rpm"
        );
        assert_eq!(parse_new_key(br#"{}"#).unwrap_err().field, "body");
    }

    #[test]
    fn a_catalog_read_with_its_version_can_be_put_back() {
        let doc =
            r#"{"providers":[{"id":"p","base_url":"http://127.0.0.1:1/v1","auth":"bearer"}],"models":[],"version":4}"#;
        let (catalog, version) = parse_catalog_put(doc.as_bytes()).unwrap();
        assert_eq!(version, Some(4));
        assert_eq!(catalog.doc().providers.len(), 1);
        let (_, version) = parse_catalog_put(br#"{"providers":[],"models":[]}"#).unwrap();
        assert_eq!(version, None);
        assert!(parse_catalog_put(br#"{"providers":[],"models":[],"version":"x"}"#).is_err());
        assert!(parse_catalog_put(br#"{"providers":[],"models":[],"colour":1}"#).is_err());
    }

    #[test]
    fn keys_take_the_contracts_spend_limit() {
        let k = parse_new_key(br#"{"account_id":"a","spend_limit":2.5}"#).unwrap();
        assert_eq!(k.spend_limit_micros, Some(2_500_000));
        let k = parse_new_key(br#"{"account_id":"a","spend_limit_usd":2.5}"#).unwrap();
        assert_eq!(k.spend_limit_micros, Some(2_500_000), "the old name still works");
    }
}

/// Decodes `%XX` escapes in a URL path segment (ids may be sent escaped, e.g. `acme%2Fchat`).
/// `None` for malformed escapes or non-UTF-8 results.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod decode_tests {
    use super::percent_decode;

    #[test]
    fn decodes_escapes() {
        assert_eq!(percent_decode("acme%2Fchat-large").as_deref(), Some("acme/chat-large"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("bad%2"), None);
        assert_eq!(percent_decode("bad%zz"), None);
    }
}
