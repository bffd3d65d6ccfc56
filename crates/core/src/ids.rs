//! Ids that carry their time: UUIDv7 (RFC 9562), 48 bits of Unix milliseconds then random bits.
//! A generation id says when it was issued, so `GET /v1/generation` can tell an id this gateway
//! issued moments ago (its record may still be on its way) from one it never issued. Its 12
//! `rand_a` bits say which record shard keeps it (`crate::records`): the id says where it lives.

/// A UUIDv7 for `now_ms` with `random` filling the 74 random bits.
pub fn uuid_v7(now_ms: u64, random: [u8; 10]) -> String {
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&now_ms.to_be_bytes()[2..]);
    b[6..].copy_from_slice(&random);
    b[6] = 0x70 | (b[6] & 0x0f); // version 7
    b[8] = 0x80 | (b[8] & 0x3f); // variant 10
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A UUIDv7 for `now_ms` whose 12 `rand_a` bits are `shard` (below 4,096) and the 62 bits after
/// the variant random: the generation id of a record kept by shard `shard`.
pub fn uuid_v7_in(now_ms: u64, shard: u16, mut random: [u8; 10]) -> String {
    random[0] = (shard >> 8) as u8 & 0x0f;
    random[1] = shard as u8;
    uuid_v7(now_ms, random)
}

/// The shard an id ending in a UUIDv7 names in its `rand_a` bits (`None` for anything else).
pub fn shard_of(id: &str) -> Option<u16> {
    issued_ms(id)?;
    let uuid = id.get(id.len() - 36..)?;
    let hex = uuid.get(15..18)?; // the three hex digits after the version nibble
    u16::from_str_radix(hex, 16).ok()
}

/// How long after an id was issued its record may still be on its way (written after the answer,
/// batched): a lookup of such an id waits up to [`RECORD_WAIT_MS`] instead of answering 404.
pub const RECORD_PENDING_FOR_MS: u64 = 10 * 60 * 1000;
/// The longest a lookup waits for a record that may still be on its way.
pub const RECORD_WAIT_MS: u64 = 2_000;

/// Whether the record of `id` may still be on its way at `now_ms`: it was issued (by a clock
/// like ours, a second of skew allowed) within [`RECORD_PENDING_FOR_MS`].
pub fn record_may_be_pending(id: &str, now_ms: u64) -> bool {
    issued_ms(id).is_some_and(|t| t <= now_ms.saturating_add(1_000) && now_ms.saturating_sub(t) < RECORD_PENDING_FOR_MS)
}

/// When an id ending in a UUIDv7 was issued (`None` for anything else).
pub fn issued_ms(id: &str) -> Option<u64> {
    let uuid = id.get(id.len().checked_sub(36)?..)?;
    let bytes = uuid.as_bytes();
    let dashes_ok = [8, 13, 18, 23].iter().all(|&i| bytes[i] == b'-');
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    if !dashes_ok || hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    if &hex[12..13] != "7" {
        return None;
    }
    u64::from_str_radix(&hex[..12], 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v7_id_round_trips_its_time() {
        let id = format!("gen-{}", uuid_v7(1_764_555_000_123, [0xff; 10]));
        assert_eq!(id.len(), 4 + 36);
        assert_eq!(&id[4 + 14..4 + 15], "7", "version nibble");
        assert!(matches!(&id[4 + 19..4 + 20], "8" | "9" | "a" | "b"), "variant bits");
        assert_eq!(issued_ms(&id), Some(1_764_555_000_123));
        assert!(uuid_v7(1, [0; 10]) < uuid_v7(2, [0; 10]), "time-ordered");
    }

    #[test]
    fn a_sharded_id_says_its_shard_and_keeps_its_time_and_randomness() {
        for shard in [0u16, 1, 255, 256, 1023, 4095] {
            let id = format!("gen-{}", uuid_v7_in(1_764_555_000_123, shard, [0xab; 10]));
            assert_eq!(shard_of(&id), Some(shard), "{id}");
            assert_eq!(issued_ms(&id), Some(1_764_555_000_123));
            assert_eq!(&id[4 + 14..4 + 15], "7", "version nibble");
            assert!(matches!(&id[4 + 19..4 + 20], "8" | "9" | "a" | "b"), "variant bits");
        }
        let a = uuid_v7_in(5, 7, [1; 10]);
        let b = uuid_v7_in(5, 7, [2; 10]);
        assert_ne!(a, b, "the bits after the variant stay random");
        assert_eq!(
            shard_of("gen-2f1c0b8e-5d2a-4c1e-9f00-0123456789ab"),
            None,
            "a v4 id has no shard"
        );
        assert_eq!(shard_of("nope"), None);
    }

    #[test]
    fn only_a_recent_id_of_ours_is_worth_waiting_for() {
        let now = 1_764_555_000_000;
        let id = |t| format!("gen-{}", uuid_v7(t, [7; 10]));
        assert!(record_may_be_pending(&id(now - 300), now));
        assert!(!record_may_be_pending(&id(now - RECORD_PENDING_FOR_MS), now), "too old");
        assert!(!record_may_be_pending(&id(now + 60_000), now), "from the future");
        assert!(!record_may_be_pending("gen-2f1c0b8e-5d2a-4c1e-9f00-0123456789ab", now));
    }

    #[test]
    fn other_ids_have_no_time() {
        assert_eq!(issued_ms("gen-2f1c0b8e-5d2a-4c1e-9f00-0123456789ab"), None, "a v4 id");
        assert_eq!(issued_ms("gen-nope"), None);
        assert_eq!(issued_ms(""), None);
        assert_eq!(issued_ms("gen-0190-zzzz-7000-8000-000000000000xxxx"), None);
    }
}
