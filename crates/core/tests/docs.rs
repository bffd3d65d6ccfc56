//! The user documentation cannot drift from the code (issue 16): every policy knob the code has
//! appears in docs/SPEC.md §16 with the code's default, and every error code and failure class a
//! client can meet is documented.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchyard_core::catalog::Policy;
use switchyard_core::classify::FailureClass;
use switchyard_core::ApiError;

const SPEC: &str = include_str!("../../../docs/SPEC.md");

fn section(title_start: &str) -> &'static str {
    let start = SPEC
        .find(title_start)
        .unwrap_or_else(|| panic!("no section {title_start}"));
    let rest = &SPEC[start + title_start.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

/// The default docs/SPEC.md §16 gives `knob`: its row lists knobs in backticks, then their defaults
/// in the same order.
fn documented_default(knob: &str) -> Option<String> {
    let row = section("## 16.")
        .lines()
        .find(|l| l.starts_with('|') && l.contains(&format!("`{knob}`")))?;
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let names: Vec<&str> = cells[1].split(',').map(|n| n.trim().trim_matches('`')).collect();
    let values: Vec<String> = cells[2]
        .split(" (")
        .next()?
        .split(',')
        .map(|v| v.trim().to_string())
        .collect();
    let at = names.iter().position(|n| *n == knob)?;
    values.get(at).cloned()
}

#[test]
fn every_policy_knob_is_documented_with_its_default() {
    let defaults = serde_json::to_value(Policy::default()).unwrap();
    for (knob, value) in defaults.as_object().unwrap() {
        let documented =
            documented_default(knob).unwrap_or_else(|| panic!("`{knob}` is missing from docs/SPEC.md §16"));
        assert_eq!(documented, value.to_string(), "the default of `{knob}`");
    }
}

#[test]
fn every_error_code_and_failure_class_is_documented() {
    let errors = [
        ApiError::invalid("x", None),
        ApiError::InvalidApiKey,
        ApiError::InsufficientBalance,
        ApiError::SpendLimitReached,
        ApiError::ModelNotFound {
            model: "m".into(),
            available: vec![],
        },
        ApiError::SupplyNotConfigured { model: "m".into() },
        ApiError::ProviderError { model: "m".into() },
        ApiError::CapacityExhausted {
            model: "m".into(),
            available: vec![],
            retry_after_s: 1,
        },
        ApiError::UpstreamInvalidRequest { message: "x".into() },
        ApiError::ContentPolicy { message: "x".into() },
        ApiError::StorageUnavailable,
        ApiError::KeyRateLimited {
            retry_after_s: 1,
            window: None,
        },
        ApiError::CapacityBusy { retry_after_s: 1 },
        ApiError::Internal { label: "x" },
    ];
    let errors_section = section("## 13.");
    for e in errors {
        assert!(
            errors_section.contains(&format!("`{}`", e.code())),
            "error code `{}` is missing from docs/SPEC.md §13",
            e.code()
        );
    }
    let classes_section = section("## 4.");
    for class in [
        FailureClass::Connect,
        FailureClass::Timeout,
        FailureClass::Upstream5xx,
        FailureClass::RateLimited,
        FailureClass::Overloaded,
        FailureClass::ModelUnavailable,
        FailureClass::Account,
        FailureClass::BadResponse,
        FailureClass::ContextLength,
        FailureClass::UnsupportedParam,
        FailureClass::ContentPolicy,
        FailureClass::InvalidRequest,
        FailureClass::Cancelled,
    ] {
        assert!(
            classes_section.contains(&format!("`{}`", class.as_str())),
            "failure class `{}` is missing from docs/SPEC.md §4",
            class.as_str()
        );
    }
}
