//! Which D1 database keeps an account's money (SPEC §22): the ledger shards.
//!
//! An account's holds, ledger, running totals and keys live together in one database — its
//! *ledger* — so a hold is still one atomic statement over the balance, the key's spend and its
//! open holds. Ledger 0 is the home database (`DB`, which also keeps the catalog, the platform's
//! checks and the directory of accounts); ledger `n` > 0 is the binding `LEDGER_<n>`. A deployment
//! says how many it has (`LEDGER_SHARDS`, default 1).
//!
//! An account is placed once, when it is created ([`place`]: a hash of its id over the ledgers
//! there are then), and the place is written down — in the home database's directory and in every
//! key minted for it (`crate::keys`). Adding ledgers later moves nobody: new accounts spread over
//! all of them, old ones stay where their rows are. Accounts from before ledgers were sharded are
//! all on ledger 0, as are keys minted before keys carried their ledger.

use sha2::{Digest, Sha256};

/// The most ledgers a deployment may have: a key carries its ledger in two hex digits.
pub const MAX_LEDGERS: u8 = 64;

/// How many ledgers the deployment has, from its `LEDGER_SHARDS` setting: 1 when unset or not a
/// number, at most [`MAX_LEDGERS`].
pub fn count(setting: Option<&str>) -> u8 {
    setting
        .and_then(|s| s.trim().parse::<u8>().ok())
        .map_or(1, |n| n.clamp(1, MAX_LEDGERS))
}

/// The binding of ledger `ledger`: `DB` for 0, `LEDGER_<n>` for the others.
pub fn binding(ledger: u8) -> String {
    match ledger {
        0 => "DB".to_string(),
        n => format!("LEDGER_{n}"),
    }
}

/// Where a new account's money goes among `count` ledgers: the first 8 bytes of SHA-256 of its id,
/// modulo `count`. Spreads any ids evenly (admins name accounts as they like); used once, at
/// creation, then read from where it was written.
pub fn place(account_id: &str, count: u8) -> u8 {
    let digest = Sha256::digest(format!("switchyard-ledger:{account_id}").as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(head) % u64::from(count.max(1))) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_read_within_bounds() {
        assert_eq!(count(None), 1);
        assert_eq!(count(Some("")), 1);
        assert_eq!(count(Some("four")), 1);
        assert_eq!(count(Some("0")), 1);
        assert_eq!(count(Some(" 4 ")), 4);
        assert_eq!(count(Some("200")), MAX_LEDGERS);
        assert_eq!(count(Some("-3")), 1);
    }

    #[test]
    fn ledger_zero_is_the_home_database() {
        assert_eq!(binding(0), "DB");
        assert_eq!(binding(3), "LEDGER_3");
    }

    #[test]
    fn one_ledger_places_everyone_home_and_several_spread_accounts_evenly() {
        assert_eq!(place("acct-anything", 1), 0);
        assert_eq!(place("acct-anything", 0), 0, "no ledgers configured counts as one");
        let mut seen = [0u32; 4];
        for i in 0..4_000 {
            seen[place(&format!("acct-{i}"), 4) as usize] += 1;
        }
        for n in seen {
            assert!((850..1_150).contains(&n), "{seen:?}");
        }
    }

    proptest::proptest! {
        /// A place is always a ledger that exists, and the same id always gets the same one.
        #[test]
        fn a_place_is_a_ledger_there_is(id in ".{0,40}", count in 1u8..=MAX_LEDGERS) {
            let at = place(&id, count);
            proptest::prop_assert!(at < count);
            proptest::prop_assert_eq!(at, place(&id, count));
        }
    }
}
