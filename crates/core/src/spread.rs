//! Spreading conversations over a model's healthy routes (SPEC §8a, `balance: "spread"`):
//! weighted rendezvous hashing. Each healthy route scores a conversation `-w / ln(u)`, `u` a
//! uniform draw from a hash of (conversation, route), `w` its weight × health factor; the highest
//! score takes it. So routes get conversations in proportion to `w`, every isolate picks the same
//! route for the same conversation without asking anyone, and a route leaving the healthy set (or
//! its factor falling) moves only conversations away from it — the others stay where they are.

use crate::health::{RouteStats, Window};

/// Below this many judged attempts in a window, the window says nothing.
const MIN_JUDGED: u32 = 5;
/// Added to both error rates: a route with a clean norm is not starved by one failure.
const ERROR_SMOOTHING: f64 = 0.05;
/// A recent median TTFB this many times the norm starts to cut the share.
const SLOW_TTFB_RATIO: f64 = 1.5;
/// No factor goes below this: a route is never starved of new conversations entirely.
const MIN_FACTOR: f64 = 0.05;

fn error_rate(w: &Window) -> Option<f64> {
    let judged = w.answered + w.failed;
    (judged >= MIN_JUDGED).then(|| f64::from(w.failed) / f64::from(judged))
}

/// How much of its weight a route keeps (0.05–1): its error rate over the last minutes against
/// its own norm (the rest of the hour; none: a clean norm), smoothed by 5 points, times its recent
/// median TTFB against its norm once that runs 1.5× over. A route behaving as usual keeps 1.
pub fn health_factor(stats: &RouteStats) -> f64 {
    let errors = match error_rate(&stats.recent) {
        Some(recent) => {
            let norm = error_rate(&stats.earlier).unwrap_or(0.0);
            ((norm + ERROR_SMOOTHING) / (recent + ERROR_SMOOTHING)).min(1.0)
        }
        None => 1.0,
    };
    let ttfb = match (stats.recent.median_ttfb_ms, stats.earlier.median_ttfb_ms) {
        (Some(recent), Some(norm)) if norm > 0 && recent as f64 > SLOW_TTFB_RATIO * norm as f64 => {
            norm as f64 / recent as f64
        }
        _ => 1.0,
    };
    (errors * ttfb).clamp(MIN_FACTOR, 1.0)
}

/// FNV-1a over the parts (a 0 byte between them), then a 64-bit finaliser so nearby inputs spread
/// evenly. The same on every isolate and every build.
pub fn hash64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The route (index into `routes`, given as (route id, weight)) that takes `conversation`: the
/// highest `-w / ln(u)`. `None` when no route has a positive weight.
pub fn pick(conversation: &str, routes: &[(&str, f64)]) -> Option<usize> {
    routes
        .iter()
        .enumerate()
        .filter(|(_, (_, w))| *w > 0.0)
        .map(|(i, (id, w))| {
            // u in (0, 1): 53 random bits, never 0 nor 1.
            let u = ((hash64(&[conversation, id]) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            (i, -w / u.ln())
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(routes: &[(&str, f64)], n: usize) -> Vec<usize> {
        let mut count = vec![0; routes.len()];
        for c in 0..n {
            count[pick(&format!("conversation-{c}"), routes).unwrap()] += 1;
        }
        count
    }

    #[test]
    fn equal_routes_share_evenly_and_weights_are_honoured() {
        let equal = shares(&[("a", 1.0), ("b", 1.0), ("c", 1.0)], 6_000);
        assert!(equal.iter().all(|n| (1_800..=2_200).contains(n)), "{equal:?}");
        let weighted = shares(&[("a", 3.0), ("b", 1.0)], 8_000);
        assert!((5_700..=6_300).contains(&weighted[0]), "{weighted:?}");
    }

    #[test]
    fn a_route_leaving_moves_only_its_own_conversations() {
        let all = [("a", 1.0), ("b", 1.0), ("c", 1.0)];
        let without_b = [("a", 1.0), ("c", 1.0)];
        for c in 0..2_000 {
            let key = format!("k{c}");
            let before = all[pick(&key, &all).unwrap()].0;
            let after = without_b[pick(&key, &without_b).unwrap()].0;
            if before != "b" {
                assert_eq!(before, after, "{key} moved though its route stayed");
            }
        }
        // A lower factor only moves conversations away from that route.
        let shrunk = [("a", 1.0), ("b", 0.2), ("c", 1.0)];
        for c in 0..2_000 {
            let key = format!("k{c}");
            let after = shrunk[pick(&key, &shrunk).unwrap()].0;
            if after == "b" {
                assert_eq!(all[pick(&key, &all).unwrap()].0, "b");
            }
        }
    }

    #[test]
    fn the_pick_is_the_same_everywhere() {
        assert_eq!(hash64(&["conversation", "r0"]), hash64(&["conversation", "r0"]));
        assert_ne!(hash64(&["ab", "c"]), hash64(&["a", "bc"]), "parts are kept apart");
        assert_eq!(pick("x", &[]), None);
        assert_eq!(pick("x", &[("a", 0.0), ("b", 2.0)]), Some(1));
    }

    #[test]
    fn a_conversation_is_named_by_the_client_or_by_its_opening() {
        use crate::dialects::{chat, messages, responses};
        let turn = |extra: &str| {
            let body = format!(
                r#"{{"model":"m","messages":[{{"role":"system","content":"Be brief"}},{{"role":"user","content":"Hi"}}{extra}]}}"#
            );
            chat::parse_request(body.as_bytes()).unwrap()
        };
        let first = turn("").conversation(None);
        let third =
            turn(r#",{"role":"assistant","content":"Hello"},{"role":"user","content":"More"}"#).conversation(None);
        assert_eq!(first, third, "later turns keep the opening's name");
        assert!(first.starts_with("h:"));
        let other = chat::parse_request(br#"{"model":"m","messages":[{"role":"user","content":"Bye"}]}"#).unwrap();
        assert_ne!(other.conversation(None), first);
        let named =
            chat::parse_request(br#"{"model":"m","user":"u-7","messages":[{"role":"user","content":"Hi"}]}"#).unwrap();
        assert_eq!(named.conversation(None), "id:u-7");
        assert_eq!(named.conversation(Some("s-1")), "id:s-1", "the header comes first");
        let anthropic = messages::parse_request(
            br#"{"model":"m","max_tokens":5,"metadata":{"user_id":"u-9"},"messages":[{"role":"user","content":"Hi"}]}"#,
        )
        .unwrap();
        assert_eq!(anthropic.conversation(None), "id:u-9");
        let cached = responses::parse_request(br#"{"model":"m","prompt_cache_key":"pk","input":"Hi"}"#).unwrap();
        assert_eq!(cached.conversation(None), "id:pk");
    }

    fn stats(recent: (u32, u32, Option<u64>), earlier: (u32, u32, Option<u64>)) -> RouteStats {
        let w = |(answered, failed, median_ttfb_ms)| Window {
            answered,
            failed,
            median_ttfb_ms,
        };
        RouteStats {
            recent: w(recent),
            earlier: w(earlier),
            ..RouteStats::default()
        }
    }

    #[test]
    fn the_factor_falls_with_errors_and_slowness_beyond_the_routes_norm() {
        assert_eq!(health_factor(&RouteStats::default()), 1.0, "no evidence, full weight");
        assert_eq!(health_factor(&stats((100, 0, Some(400)), (1_000, 0, Some(400)))), 1.0);
        // 30 % failures against a clean norm: well under half its share.
        let failing = health_factor(&stats((70, 30, None), (0, 0, None)));
        assert!(failing < 0.2, "{failing}");
        // Failing as much as it always has: nothing to hold against it.
        assert_eq!(health_factor(&stats((70, 30, None), (700, 300, None))), 1.0);
        // Healed: a clean recent window after a bad hour.
        assert_eq!(health_factor(&stats((50, 0, None), (700, 300, None))), 1.0);
        // Three times its usual TTFB: a third.
        let slow = health_factor(&stats((50, 0, Some(1_200)), (500, 0, Some(400))));
        assert!((slow - 1.0 / 3.0).abs() < 1e-9, "{slow}");
        assert_eq!(
            health_factor(&stats((0, 100, None), (0, 0, None))),
            MIN_FACTOR,
            "never zero"
        );
        assert_eq!(
            health_factor(&stats((2, 2, None), (0, 0, None))),
            1.0,
            "too few to judge"
        );
    }
}
