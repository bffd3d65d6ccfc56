//! The settlement outbox's schedule (SPEC §11): when each kept settlement is tried again, and how
//! one replay pass groups what is due. Every settlement keeps its own tries and its own next try
//! in its storage key ([`key`]: the due time first, so the object's keys list earliest-due first),
//! and a pass groups the due ones by account ([`groups`]): one account's settlements that D1 keeps
//! refusing back off on their own schedule and never hold back another account's.

/// Storage keys of kept settlements: `q:<due ms, 15 digits>:<tries>:<generation id>`.
pub const PREFIX: &str = "q:";
/// Keys written before settlements kept their own schedule: `s:<generation id>`, due at once.
pub const LEGACY_PREFIX: &str = "s:";
/// The wait before a settlement's first replay, then doubling with each refusal up to
/// [`MAX_RETRY_MS`].
pub const FIRST_RETRY_MS: u64 = 1_000;
pub const MAX_RETRY_MS: u64 = 30_000;

/// A kept settlement's place in the schedule, read from its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept<'a> {
    /// When it is tried next (Unix ms); 0 for a legacy key.
    pub due_ms: u64,
    /// Replays D1 refused so far.
    pub tries: u32,
    pub id: &'a str,
}

/// The storage key of a settlement due at `due_ms` after `tries` refusals.
pub fn key(due_ms: u64, tries: u32, id: &str) -> String {
    format!("{PREFIX}{due_ms:015}:{tries}:{id}")
}

/// Reads a key written by [`key`], or a legacy `s:<id>` key (due at once, never tried).
pub fn parse(key: &str) -> Option<Kept<'_>> {
    if let Some(id) = key.strip_prefix(LEGACY_PREFIX) {
        return Some(Kept {
            due_ms: 0,
            tries: 0,
            id,
        });
    }
    let mut parts = key.strip_prefix(PREFIX)?.splitn(3, ':');
    let due_ms = parts.next()?.parse().ok()?;
    let tries = parts.next()?.parse().ok()?;
    let id = parts.next().filter(|id| !id.is_empty())?;
    Some(Kept { due_ms, tries, id })
}

/// How long after its `tries`-th refusal a settlement is tried again: 1 s, doubling, at most 30 s.
pub fn retry_after_ms(tries: u32) -> u64 {
    let doublings = tries.saturating_sub(1).min(5);
    (FIRST_RETRY_MS << doublings).min(MAX_RETRY_MS)
}

/// The replay batches of one pass: the items' indexes grouped by account (accounts in the order
/// they first appear, items in their own order), each account's cut into batches of at most
/// `together`. A batch D1 refuses then only ever holds one account's settlements back.
pub fn groups<S: AsRef<str>>(accounts: &[S], together: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, account) in accounts.iter().enumerate() {
        let account = account.as_ref();
        match order.iter_mut().find(|(a, _)| *a == account) {
            Some((_, items)) => items.push(i),
            None => order.push((account, vec![i])),
        }
    }
    order
        .into_iter()
        .flat_map(|(_, items)| items.chunks(together.max(1)).map(<[usize]>::to_vec).collect::<Vec<_>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_list_earliest_due_first_and_read_back() {
        let early = key(999_999_999_999, 7, "gen-b");
        let late = key(1_700_000_000_000, 0, "gen-a");
        assert!(early < late, "{early} sorts before {late}");
        assert_eq!(
            parse(&early),
            Some(Kept {
                due_ms: 999_999_999_999,
                tries: 7,
                id: "gen-b"
            })
        );
        assert_eq!(parse(&late).unwrap().id, "gen-a");
        // An id with colons in it reads back whole.
        assert_eq!(parse(&key(5, 1, "a:b")).unwrap().id, "a:b");
    }

    #[test]
    fn a_legacy_key_is_due_at_once_and_a_broken_key_is_none() {
        assert_eq!(
            parse("s:gen-x"),
            Some(Kept {
                due_ms: 0,
                tries: 0,
                id: "gen-x"
            })
        );
        for broken in ["q:", "q:12", "q:12:x:gen", "q:12:1:", "unreadable:gen", "streak"] {
            assert_eq!(parse(broken), None, "{broken}");
        }
    }

    #[test]
    fn retries_double_from_one_second_to_thirty() {
        let waits: Vec<u64> = (1..=8).map(retry_after_ms).collect();
        assert_eq!(waits, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
        assert_eq!(retry_after_ms(0), FIRST_RETRY_MS);
        assert_eq!(retry_after_ms(u32::MAX), MAX_RETRY_MS);
    }

    #[test]
    fn a_pass_batches_each_account_apart() {
        let accounts = ["a", "b", "a", "c", "a", "b", "a"];
        assert_eq!(groups(&accounts, 3), vec![vec![0, 2, 4], vec![6], vec![1, 5], vec![3]]);
        assert_eq!(groups(&accounts, 0).len(), accounts.len(), "never a batch of none");
        assert!(groups::<&str>(&[], 8).is_empty());
    }
}
