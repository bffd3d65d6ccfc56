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

/// docs/ARCHITECTURE.md stays true (issue 32): every file or folder it names exists (under
/// `crates/core/src`, `src` or the repository), and every name it gives in parentheses after a
/// file — `relay.rs` (`Gate`, `Relay::price_with`) — is a word of that file (or folder).
#[test]
fn every_file_and_name_architecture_gives_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut wrong = Vec::new();
    // Backticked pieces with the offset just past their closing backtick.
    let mut pieces = Vec::new();
    let mut at = 0;
    for (k, piece) in doc.split('`').enumerate() {
        at += piece.len() + 1;
        if k % 2 == 1 {
            pieces.push((piece, at.min(doc.len())));
        }
    }
    for (path, end_at) in pieces {
        let is_path = (path.ends_with(".rs") || path.ends_with(".js") || path.ends_with('/'))
            && path.chars().all(|c| c.is_ascii_alphanumeric() || "_./{},-".contains(c));
        if !is_path {
            continue;
        }
        let mut text = String::new();
        for each in expand(path) {
            // A name both the core and the Worker use (`limits.rs`) is read in both.
            let found: Vec<_> = ["crates/core/src", "src", ""]
                .iter()
                .map(|r| root.join(r).join(&each))
                .filter(|p| p.exists())
                .collect();
            if found.is_empty() {
                wrong.push(format!("no file {each}"));
            }
            for p in found {
                read_all(&p, &mut text);
            }
        }
        // The names in the parentheses right after the path.
        let Some(after) = doc[end_at..].strip_prefix(" (") else { continue };
        let mut depth = 1;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(after.len(), |(at, _)| at);
        for (k, name) in after[..end].split('`').enumerate() {
            let identifier = k % 2 == 1
                && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            if identifier && !name.split("::").all(|seg| has_word(&text, seg)) {
                wrong.push(format!("{path} has no `{name}`"));
            }
        }
    }
    assert!(wrong.is_empty(), "docs/ARCHITECTURE.md drifted from the code:\n{}", wrong.join("\n"));
}

/// `dialects/{chat,gemini}/mod.rs` as its paths.
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(a), Some(b)) if a < b => path[a + 1..b]
            .split(',')
            .map(|x| format!("{}{x}{}", &path[..a], &path[b + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

fn read_all(p: &std::path::Path, text: &mut String) {
    if p.is_dir() {
        for entry in std::fs::read_dir(p).unwrap() {
            read_all(&entry.unwrap().path(), text);
        }
    } else if let Ok(s) = std::fs::read_to_string(p) {
        text.push_str(&s);
    }
}

fn has_word(text: &str, word: &str) -> bool {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back().is_none_or(|c| !word_char(c));
        let after = text[at + word.len()..].chars().next().is_none_or(|c| !word_char(c));
        before && after
    })
}
