//! Per-key rate and concurrency limits and per-route capacity (SPEC §10): the state machines the
//! limit Durable Objects run, pure — time comes in as `now_ms`, waiting is the caller's.
//!
//! Every concurrency slot is a [`Lease`] that expires [`lease_ms`] after it was granted, longer
//! than any request can live and by a small margin only: a Worker that dies without giving its
//! slot back blocks it for that long, never for good. Waiters are served first come, first served.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::catalog::Policy;

/// The `rpm` sliding window.
pub const WINDOW_MS: u64 = 60_000;
/// How much longer than the longest possible request a lease lives.
pub const LEASE_MARGIN_MS: u64 = 5_000;
/// At most this many requests wait in one queue; more are refused at once.
pub const MAX_QUEUE: usize = 1_000;

/// The longest a lease lives without being renewed (SPEC §18): a holder that vanished (its
/// Worker ended, its release lost) frees its slot within this, not after the longest possible
/// request. A live holder renews its lease every [`renew_every_ms`].
pub const MAX_LEASE_MS: u64 = 15_000;

/// How long a slot taken under `policy` is kept if its holder neither renews nor gives it back:
/// the key and capacity waits, the pre-content budget, the stream cap and the disconnect grace,
/// plus [`LEASE_MARGIN_MS`] — at most [`MAX_LEASE_MS`].
pub fn lease_ms(policy: &Policy) -> u64 {
    policy
        .key_wait_ms
        .saturating_add(policy.capacity_wait_ms)
        .saturating_add(policy.pre_content_budget_ms)
        .saturating_add(policy.stream_cap_ms)
        .saturating_add(policy.disconnect_grace_ms)
        .saturating_add(LEASE_MARGIN_MS)
        .min(MAX_LEASE_MS)
}

/// How often a live holder renews a lease of `lease_ms`: three times per lease, so two renewals
/// may be lost before it expires.
pub fn renew_every_ms(lease_ms: u64) -> u64 {
    (lease_ms / 3).max(1)
}

/// Extends lease `id` to `now_ms + lease_ms`; false when there is none (expired or released).
fn renew(leases: &mut [Lease], id: &str, now_ms: u64, lease_ms: u64) -> bool {
    match leases.iter_mut().find(|l| l.id == id) {
        Some(l) => {
            l.expires_ms = l.expires_ms.max(now_ms.saturating_add(lease_ms));
            true
        }
        None => false,
    }
}

/// Whole seconds for a `retry-after` header, at least 1.
pub fn retry_after_s(wait_ms: u64) -> u64 {
    wait_ms.div_ceil(1_000).max(1)
}

/// One taken slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub id: String,
    pub expires_ms: u64,
}

/// When the requests of second `sec` leave the `rpm` window: once the whole second is older than
/// [`WINDOW_MS`].
fn leaves_window_ms(sec: u64) -> u64 {
    sec.saturating_add(1).saturating_mul(1_000).saturating_add(WINDOW_MS)
}

fn expire(leases: &mut Vec<Lease>, now_ms: u64) {
    leases.retain(|l| l.expires_ms > now_ms);
}

/// A call to a key's limit object (`key:<id>`), typed for both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum KeyCall {
    /// Admit request `id`, waiting up to `wait_ms` for room. Replies [`KeyReply`].
    Acquire {
        id: String,
        limit: KeyLimit,
        lease_ms: u64,
        wait_ms: u64,
    },
    /// Give back request `id`'s slot.
    Release { id: String },
    /// Keep the slots of requests `ids` `lease_ms` longer: their holders live (one call for an
    /// isolate's holders, [`Renewals`]).
    Renew { ids: Vec<String>, lease_ms: u64 },
    /// What the key uses now. Replies [`KeyUsage`].
    Usage,
    /// Up to `want` of an `rpm`-only key's window at once, for one isolate to spend locally
    /// ([`Permits`]); replies [`PermitReply`] (0 granted: ask with `Acquire`, which waits).
    Permits { want: u32, limit: KeyLimit },
}

/// The answer to [`KeyCall::Permits`]: how many were granted (counted in the window now), and the
/// window after them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitReply {
    pub granted: u32,
    pub window: Option<RateWindow>,
}

/// The most permits one batch carries.
pub const MAX_PERMITS: u32 = 64;
/// How long an isolate may spend a batch of permits: they were counted in the window the second
/// they were granted, so a request sent on one within this leaves the real window no later than the
/// counted one does (the window stays on the strict side, as for a request admitted one by one).
pub const PERMIT_TTL_MS: u64 = 1_000;

/// The largest batch for a key of `rpm`: about a second's worth of its rate, so one isolate's
/// batch takes no more than that from the others (1 for a key under 120 rpm: one call per
/// request, as without permits), at most [`MAX_PERMITS`].
pub fn permit_cap(rpm: u32) -> u32 {
    (rpm / 60).clamp(1, MAX_PERMITS)
}

/// Whether a key's requests may use permits (SPEC §22): `rpm` only — a concurrency limit is kept
/// exact, one slot per request, by its object.
pub fn uses_permits(limit: KeyLimit) -> bool {
    limit.rpm.is_some() && limit.max_concurrent.is_none()
}

/// A key that limits concurrency alone keeps its slots in one object up to this many of them;
/// past it, one object per this many (SPEC §22): each object's share is exact, so the key's total
/// is, and the calls of a busy key are spread over its objects.
pub const SLOTS_PER_SHARD: u32 = 32;
/// Likewise a key with `rpm` alone: its window in one object up to this rate (200 requests a
/// second — a fifth of what one object serves — however many isolates ask for its permits), one
/// object per this much of it past that.
pub const RPM_PER_SHARD: u32 = 12_000;
/// The most objects a key's limit is spread over.
pub const MAX_KEY_SHARDS: u32 = 64;

/// How many objects keep a key's limit: one per [`SLOTS_PER_SHARD`] slots of a key limiting
/// concurrency alone, one per [`RPM_PER_SHARD`] of a key's `rpm` alone, at most
/// [`MAX_KEY_SHARDS`]; one for a key with both (its window and its slots are decided together).
pub fn key_shards(limit: KeyLimit) -> u32 {
    let shards = match (limit.rpm, limit.max_concurrent) {
        (None, Some(slots)) => slots.div_ceil(SLOTS_PER_SHARD),
        (Some(rpm), None) => rpm.div_ceil(RPM_PER_SHARD),
        _ => 1,
    };
    shards.clamp(1, MAX_KEY_SHARDS)
}

/// The limit shard `shard` of `shards` keeps: its share of the key's slots or of its `rpm`, the
/// shares summing to the key's exactly (the key as it is when it has one object).
pub fn shard_limit(limit: KeyLimit, shard: u32, shards: u32) -> KeyLimit {
    KeyLimit {
        rpm: limit.rpm.map(|n| share(n, shard, shards)),
        max_concurrent: limit.max_concurrent.map(|n| share(n, shard, shards)),
    }
}

/// Shard `shard`'s part of `n` split over `shards` (all of it when one): the parts differ by at
/// most one and sum to `n`.
pub fn share(n: u32, shard: u32, shards: u32) -> u32 {
    match shards {
        0 | 1 => n,
        _ => n / shards + u32::from(shard < n % shards),
    }
}

/// The key's window for the rate-limit headers from shard `shard`'s of `shards`: the key's own
/// `rpm` as the limit, and what the shard has left counted as if every shard had left the same
/// (shares are even, and requests spread evenly over them).
pub fn key_window(window: RateWindow, limit: KeyLimit, shards: u32) -> RateWindow {
    match limit.rpm {
        Some(rpm) if shards > 1 => RateWindow {
            limit: rpm,
            remaining: window.remaining.saturating_mul(shards).min(rpm),
            reset_ms: window.reset_ms,
        },
        _ => window,
    }
}

/// The shard an isolate takes a key's permits from: one its seed and the key pick, so a key's
/// isolates spread evenly over its objects and each isolate's batches stay whole.
pub fn permit_shard(isolate_seed: u64, key: &str, shards: u32) -> u32 {
    (crate::spread::hash64(&[&isolate_seed.to_string(), key]) % u64::from(shards.max(1))) as u32
}

/// How many objects keep a model's route capacity, from its capped routes' `max_concurrency`:
/// as for a key's slots ([`SLOTS_PER_SHARD`] each, at most [`MAX_KEY_SHARDS`]), counted on its
/// smallest cap — so every object holds a share of every capped route (1 for a model without one).
pub fn capacity_shards(caps: impl IntoIterator<Item = u32>) -> u32 {
    caps.into_iter()
        .map(|cap| cap.div_ceil(SLOTS_PER_SHARD))
        .min()
        .unwrap_or(1)
        .clamp(1, MAX_KEY_SHARDS)
}

/// What capacity shard `shard` of `shards` is asked for: each capped route's share of its cap (the
/// shares summing to it exactly), the uncapped ones as they are.
pub fn shard_wants(wants: &[Want], shard: u32, shards: u32) -> Vec<Want> {
    wants
        .iter()
        .map(|w| Want {
            route: w.route.clone(),
            max: w.max.map(|cap| share(cap, shard, shards)),
        })
        .collect()
}

/// The shards request `id` asks for a slot, in order: one its id picks (so a key's or a model's
/// requests spread evenly over its objects), then — when that one has no room at once — the next
/// one, which it waits on. So with two shards every slot can be found; with more, a request may be refused
/// while a shard it did not ask has room (shares are even, and requests spread evenly over them).
pub fn shard_order(id: &str, shards: u32) -> Vec<u32> {
    if shards <= 1 {
        return vec![0];
    }
    let first = (crate::spread::hash64(&[id]) % u64::from(shards)) as u32;
    vec![first, (first + 1) % shards]
}

/// An isolate's permits for one `rpm` key (SPEC §22): a request spends one without a call while
/// a batch lasts; a batch is asked for when what is left runs low, in the background, its size
/// doubling while batches are spent in time and halving when one expires unspent (so a quiet
/// isolate holds at most one permit of the key's window, a busy one up to [`permit_cap`]).
#[derive(Debug, Clone, Default)]
pub struct Permits {
    /// Batches not yet spent: (permits left, usable until), oldest first.
    batches: VecDeque<(u32, u64)>,
    /// The size of the batch to ask for next (0: none asked yet).
    next: u32,
    /// A batch is being asked for.
    asking: bool,
    /// A batch expired unspent since the last one came.
    wasted: bool,
    /// Requests that found none since the last batch came: the next batch is at least this.
    short: u32,
    /// The window as the object last answered it.
    window: Option<RateWindow>,
}

impl Permits {
    fn drop_spent(&mut self, now_ms: u64) {
        while let Some(&(left, until)) = self.batches.front() {
            if left > 0 && now_ms < until {
                return;
            }
            self.wasted |= left > 0;
            self.batches.pop_front();
        }
    }

    /// A batch is being asked for.
    pub fn asking(&self) -> bool {
        self.asking
    }

    /// Nothing held and nothing asked for: an isolate may forget it.
    pub fn idle(&mut self, now_ms: u64) -> bool {
        !self.asking && self.left(now_ms) == 0
    }

    /// Permits left and usable at `now_ms`.
    pub fn left(&mut self, now_ms: u64) -> u32 {
        self.drop_spent(now_ms);
        self.batches.iter().map(|&(left, _)| left).sum()
    }

    /// Spends one permit at `now_ms`, if one is left in time: the window for the rate-limit
    /// headers (what the object answered, plus what this isolate holds unspent).
    pub fn spend(&mut self, now_ms: u64) -> Option<Option<RateWindow>> {
        self.drop_spent(now_ms);
        let Some(front) = self.batches.front_mut() else {
            self.short = self.short.saturating_add(1);
            return None;
        };
        front.0 -= 1;
        let left = self.left(now_ms);
        Some(self.window.map(|w| RateWindow {
            remaining: w.remaining.saturating_add(left),
            ..w
        }))
    }

    /// The batch to ask for now, if one is wanted — what is left is at most half the next batch
    /// and none is being asked for — marked asked. The next batch, or as many as the requests
    /// that found none since the last came, if more.
    pub fn want(&mut self, rpm: u32, now_ms: u64) -> Option<u32> {
        let next = self.next.max(self.short).clamp(1, permit_cap(rpm));
        if self.asking || self.left(now_ms).saturating_mul(2) > next {
            return None;
        }
        self.asking = true;
        Some(next)
    }

    /// The batch asked for (`asked`) came (`None`: the object did not answer): usable for
    /// [`PERMIT_TTL_MS`]; the next doubles when this one was granted whole and none expired
    /// unspent since the last, halves when one did.
    pub fn got(&mut self, asked: u32, reply: Option<&PermitReply>, now_ms: u64) {
        self.asking = false;
        self.short = 0;
        let Some(reply) = reply else {
            return;
        };
        self.drop_spent(now_ms);
        if reply.granted > 0 {
            self.batches
                .push_back((reply.granted, now_ms.saturating_add(PERMIT_TTL_MS)));
        }
        self.window = reply.window;
        self.next = match (std::mem::take(&mut self.wasted), reply.granted) {
            (true, _) => (asked / 2).max(1),
            (false, g) if g >= asked => asked.saturating_mul(2),
            (false, g) => g.max(1),
        };
    }
}

/// The answer to [`KeyCall::Acquire`]: `Granted` or `Refused`, and how long the request waited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReply {
    pub admit: KeyAdmit,
    pub waited_ms: u64,
}

/// A call about route capacity to a model's capacity object (`capacity:<n>:<model>`, its `/capacity` path), typed for both
/// sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum CapacityCall {
    /// Take a slot on the first of `wants` with room, queueing up to `wait_ms` when all are full.
    /// Replies [`CapacityReply`].
    Acquire {
        id: String,
        wants: Vec<Want>,
        lease_ms: u64,
        wait_ms: u64,
    },
    /// Give back request `id`'s slot on `route`.
    Release { route: String, id: String },
    /// Keep these slots `lease_ms` longer: their holders live (one call for an isolate's
    /// holders, [`Renewals`]).
    Renew { leases: Vec<Held>, lease_ms: u64 },
    /// Each capped route's load. Replies a map of route id → [`RouteLoad`].
    Report,
}

/// The answer to [`CapacityCall::Acquire`]: `Granted` or `Refused`, and how long it queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityReply {
    pub admit: CapacityAdmit,
    pub waited_ms: u64,
}

/// One route's capacity now (admin health).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RouteLoad {
    pub in_flight: u32,
    pub queued: u32,
}

/// The OpenAI-style rate-limit headers of a response to a key with an `rpm` limit.
pub fn rate_headers(w: &RateWindow) -> [(&'static str, String); 3] {
    [
        ("x-ratelimit-limit-requests", w.limit.to_string()),
        ("x-ratelimit-remaining-requests", w.remaining.to_string()),
        ("x-ratelimit-reset-requests", format!("{}s", retry_after_s(w.reset_ms))),
    ]
}

// ---- per key -----------------------------------------------------------------------------------

/// A key's limits (none by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyLimit {
    pub rpm: Option<u32>,
    pub max_concurrent: Option<u32>,
}

impl KeyLimit {
    /// Whether the key has any limit (a key without one never calls a limit object).
    pub fn any(&self) -> bool {
        self.rpm.is_some() || self.max_concurrent.is_some()
    }
}

/// The `rpm` window as the rate-limit headers report it after a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateWindow {
    pub limit: u32,
    pub remaining: u32,
    /// Until the oldest request in the window leaves it.
    pub reset_ms: u64,
}

/// A key's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "admit", rename_all = "snake_case")]
pub enum KeyAdmit {
    /// Go ahead; the slot (if the key limits concurrency) is the request's id.
    Granted { window: Option<RateWindow> },
    /// No room now; room may come at `retry_at_ms` (or sooner, when a slot is given back).
    Wait { retry_at_ms: u64 },
    /// No room within the wait: 429 with `retry-after`, and the `rpm` window's headers.
    Refused {
        retry_after_s: u64,
        #[serde(default)]
        window: Option<RateWindow>,
    },
}

/// What a key is using now (for `/v1/credits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyUsage {
    pub requests_in_window: u32,
    pub in_flight: u32,
    pub queued: u32,
}

/// One key's limit state: its requests in the last minute (counted per second, so the state stays
/// small at any rate), its leases, its queue.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KeyState {
    /// (second, requests started in it), oldest first; a second leaves the window once all of it
    /// is more than [`WINDOW_MS`] old (so the window errs on the strict side, by under 1 s).
    window: VecDeque<(u64, u32)>,
    leases: Vec<Lease>,
    /// Waiters live in the object's own calls, so they are not kept across a restart.
    #[serde(skip)]
    queue: VecDeque<String>,
}

impl KeyState {
    fn expire(&mut self, now_ms: u64) {
        while self
            .window
            .front()
            .is_some_and(|&(sec, _)| leaves_window_ms(sec) <= now_ms)
        {
            self.window.pop_front();
        }
        expire(&mut self.leases, now_ms);
    }

    /// Counts `n` requests started at `now_ms` in the window.
    fn count(&mut self, n: u32, now_ms: u64) {
        let sec = now_ms / 1_000;
        match self.window.back_mut() {
            Some((last, c)) if *last == sec => *c = c.saturating_add(n),
            _ => self.window.push_back((sec, n)),
        }
    }

    fn in_window(&self) -> u32 {
        self.window.iter().map(|&(_, n)| n).sum()
    }

    fn rate_full(&self, limit: KeyLimit) -> bool {
        limit.rpm.is_some_and(|r| self.in_window() >= r)
    }

    /// When the oldest second in the window leaves it.
    fn window_reset_ms(&self) -> Option<u64> {
        self.window.front().map(|&(sec, _)| leaves_window_ms(sec))
    }

    /// Tries to admit request `id` under `limit`. Only the first waiter may take room that
    /// frees; a request that cannot go now is queued (answer `Wait`) until it is admitted or
    /// [`KeyState::give_up`] is called for it. A full queue refuses at once.
    pub fn admit(&mut self, id: &str, limit: KeyLimit, lease_ms: u64, now_ms: u64) -> KeyAdmit {
        self.expire(now_ms);
        let first = self.queue.front().is_none_or(|head| head == id);
        let rate_full = self.rate_full(limit);
        let slots_full = limit.max_concurrent.is_some_and(|m| self.leases.len() >= m as usize);
        if first && !rate_full && !slots_full {
            self.queue.retain(|w| w != id);
            if limit.rpm.is_some() {
                self.count(1, now_ms);
            }
            if limit.max_concurrent.is_some() {
                self.leases.push(Lease {
                    id: id.to_string(),
                    expires_ms: now_ms.saturating_add(lease_ms),
                });
            }
            return KeyAdmit::Granted {
                window: self.rate_window(limit, now_ms),
            };
        }
        if !self.queue.iter().any(|w| w == id) {
            if self.queue.len() >= MAX_QUEUE {
                return KeyAdmit::Refused {
                    retry_after_s: retry_after_s(self.next_room_ms(limit, now_ms).saturating_sub(now_ms)),
                    window: self.rate_window(limit, now_ms),
                };
            }
            self.queue.push_back(id.to_string());
        }
        KeyAdmit::Wait {
            retry_at_ms: self.next_room_ms(limit, now_ms),
        }
    }

    /// The `rpm` window now, for the rate-limit headers (`None` without an `rpm` limit).
    pub fn rate_window(&self, limit: KeyLimit, now_ms: u64) -> Option<RateWindow> {
        limit.rpm.map(|limit| RateWindow {
            limit,
            remaining: limit.saturating_sub(self.in_window()),
            reset_ms: self.window_reset_ms().map_or(0, |t| t.saturating_sub(now_ms)),
        })
    }

    /// When room may next appear without anyone giving a slot back: the oldest request leaving
    /// the window, or the earliest lease expiring.
    fn next_room_ms(&self, limit: KeyLimit, now_ms: u64) -> u64 {
        let rate = self.window_reset_ms().filter(|_| self.rate_full(limit));
        let slots = limit
            .max_concurrent
            .filter(|m| self.leases.len() >= *m as usize)
            .and_then(|_| self.leases.iter().map(|l| l.expires_ms).min());
        match (rate, slots) {
            (Some(a), Some(b)) => a.max(b),
            (Some(t), None) | (None, Some(t)) => t,
            // Only waiting behind others: whenever they are served.
            (None, None) => now_ms,
        }
    }

    /// Request `id` stops waiting (its wait ran out): the refusal's `retry-after` — until the
    /// oldest request leaves a full window, else 1 s (a slot frees when a request ends, which
    /// nobody can predict).
    pub fn give_up(&mut self, id: &str, limit: KeyLimit, now_ms: u64) -> u64 {
        self.queue.retain(|w| w != id);
        self.expire(now_ms);
        match self.window_reset_ms().filter(|_| self.rate_full(limit)) {
            Some(reset) => retry_after_s(reset.saturating_sub(now_ms)),
            None => 1,
        }
    }

    /// Gives back request `id`'s slot; true if it held one.
    /// Renews request `id`'s lease (false: it has none any more).
    pub fn renew(&mut self, id: &str, now_ms: u64, lease_ms: u64) -> bool {
        self.expire(now_ms);
        renew(&mut self.leases, id, now_ms, lease_ms)
    }

    pub fn release(&mut self, id: &str) -> bool {
        let before = self.leases.len();
        self.leases.retain(|l| l.id != id);
        self.leases.len() != before
    }

    /// Grants up to `want` of an `rpm`-only key's window at once (a batch of permits for one
    /// isolate, [`Permits`]), each counted in the window now, never past the limit nor more than
    /// [`permit_cap`]; none while requests wait (they go first) or for a key that limits
    /// concurrency (its slots stay one per request).
    pub fn permits(&mut self, want: u32, limit: KeyLimit, now_ms: u64) -> PermitReply {
        self.expire(now_ms);
        let granted = match limit.rpm {
            Some(rpm) if uses_permits(limit) && self.queue.is_empty() => {
                want.min(permit_cap(rpm)).min(rpm.saturating_sub(self.in_window()))
            }
            _ => 0,
        };
        if granted > 0 {
            self.count(granted, now_ms);
        }
        PermitReply {
            granted,
            window: self.rate_window(limit, now_ms),
        }
    }

    pub fn usage(&mut self, now_ms: u64) -> KeyUsage {
        self.expire(now_ms);
        KeyUsage {
            requests_in_window: self.in_window(),
            in_flight: self.leases.len() as u32,
            queued: self.queue.len() as u32,
        }
    }
}

// ---- per route ---------------------------------------------------------------------------------

/// A route a request could use next, in plan order, with its `max_concurrency` (`None`: no cap).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Want {
    pub route: String,
    pub max: Option<u32>,
}

/// The capacity answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "admit", rename_all = "snake_case")]
pub enum CapacityAdmit {
    /// Use `route` (the first in plan order with room); a capped route's slot is the lease id
    /// the request asked with.
    Granted { route: String, capped: bool },
    /// Every route is full: queued until one frees (or the lease that blocks it expires).
    Wait { retry_at_ms: u64 },
    /// No room within the wait: 429 `capacity_busy`.
    Refused { retry_after_s: u64 },
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
struct Waiter {
    id: String,
    /// The capped routes it waits for.
    routes: Vec<String>,
}

/// One model's route capacity: the leases taken on each capped route, and the requests waiting
/// for any of them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Capacity {
    in_flight: BTreeMap<String, Vec<Lease>>,
    /// Waiters live in the object's own calls, so they are not kept across a restart.
    #[serde(skip)]
    queue: VecDeque<Waiter>,
}

impl Capacity {
    fn expire(&mut self, now_ms: u64) {
        for leases in self.in_flight.values_mut() {
            expire(leases, now_ms);
        }
        self.in_flight.retain(|_, l| !l.is_empty());
    }

    fn taken(&self, route: &str) -> usize {
        self.in_flight.get(route).map_or(0, Vec::len)
    }

    /// Tries to give request `id` the first route of `wants` with room, skipping full ones. Room
    /// on a route goes to the earliest waiter that wants it: a route an earlier waiter waits for
    /// is not taken from it. A request that finds nothing is queued (answer `Wait`).
    pub fn admit(&mut self, id: &str, wants: &[Want], lease_ms: u64, now_ms: u64) -> CapacityAdmit {
        self.expire(now_ms);
        let position = self.queue.iter().position(|w| w.id == id).unwrap_or(self.queue.len());
        let claimed_ahead = |route: &str| {
            self.queue
                .iter()
                .take(position)
                .any(|w| w.routes.iter().any(|r| r == route))
        };
        let pick = wants.iter().find(|w| match w.max {
            None => true,
            Some(max) => self.taken(&w.route) < max as usize && !claimed_ahead(&w.route),
        });
        if let Some(want) = pick {
            let (route, capped) = (want.route.clone(), want.max.is_some());
            self.queue.retain(|w| w.id != id);
            if capped {
                self.in_flight.entry(route.clone()).or_default().push(Lease {
                    id: id.to_string(),
                    expires_ms: now_ms.saturating_add(lease_ms),
                });
            }
            return CapacityAdmit::Granted { route, capped };
        }
        if position == self.queue.len() {
            if self.queue.len() >= MAX_QUEUE {
                return CapacityAdmit::Refused { retry_after_s: 1 };
            }
            self.queue.push_back(Waiter {
                id: id.to_string(),
                routes: wants.iter().map(|w| w.route.clone()).collect(),
            });
        }
        // Without a release, room appears when the earliest lease on a wanted route expires.
        let retry_at_ms = wants
            .iter()
            .filter_map(|w| self.in_flight.get(&w.route))
            .flatten()
            .map(|l| l.expires_ms)
            .min()
            .unwrap_or(now_ms);
        CapacityAdmit::Wait { retry_at_ms }
    }

    /// Request `id`'s lease on `route`, if it holds one.
    pub fn lease(&self, route: &str, id: &str) -> Option<&Lease> {
        self.in_flight.get(route)?.iter().find(|l| l.id == id)
    }

    /// Every lease held, by route (what a store keeps, one row each).
    pub fn leases(&self) -> impl Iterator<Item = (&str, &Lease)> {
        self.in_flight
            .iter()
            .flat_map(|(route, leases)| leases.iter().map(move |l| (route.as_str(), l)))
    }

    /// A lease read back from the store (after a restart).
    pub fn restore(&mut self, route: &str, lease: Lease) {
        let leases = self.in_flight.entry(route.to_string()).or_default();
        leases.retain(|l| l.id != lease.id);
        leases.push(lease);
    }

    /// Request `id` stops waiting.
    pub fn give_up(&mut self, id: &str) {
        self.queue.retain(|w| w.id != id);
    }

    /// Gives back the slot `id` holds on `route`; true if it held one.
    /// Renews request `id`'s lease on `route` (false: it has none any more).
    pub fn renew(&mut self, route: &str, id: &str, now_ms: u64, lease_ms: u64) -> bool {
        self.expire(now_ms);
        self.in_flight
            .get_mut(route)
            .is_some_and(|leases| renew(leases, id, now_ms, lease_ms))
    }

    pub fn release(&mut self, route: &str, id: &str) -> bool {
        let Some(leases) = self.in_flight.get_mut(route) else {
            return false;
        };
        let before = leases.len();
        leases.retain(|l| l.id != id);
        let released = leases.len() != before;
        if leases.is_empty() {
            self.in_flight.remove(route);
        }
        released
    }

    /// Each capped route's load now.
    pub fn report(&mut self, now_ms: u64) -> BTreeMap<String, RouteLoad> {
        self.expire(now_ms);
        let mut out: BTreeMap<String, RouteLoad> = BTreeMap::new();
        for (route, leases) in &self.in_flight {
            out.entry(route.clone()).or_default().in_flight = leases.len() as u32;
        }
        for w in &self.queue {
            for r in &w.routes {
                out.entry(r.clone()).or_default().queued += 1;
            }
        }
        out
    }

    /// Slots taken on `route` now.
    pub fn in_flight(&mut self, route: &str, now_ms: u64) -> u32 {
        self.expire(now_ms);
        self.taken(route) as u32
    }

    /// Requests waiting for `route` now.
    pub fn queued(&self, route: &str) -> u32 {
        self.queue
            .iter()
            .filter(|w| w.routes.iter().any(|r| r == route))
            .count() as u32
    }
}

/// A slot a request holds on an object: its request id, and for capacity its route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    pub id: String,
}

/// An isolate's live slots on one object (SPEC §22): renewed together, by one call, by whichever
/// holder finds the renewal due first — not one call per holder per renewal. Each holder checks
/// every half [`renew_every_ms`]; a renewal is due once nine tenths of the interval passed since
/// the last one (or since the first slot joined). So the object gets at most one renewal call per
/// isolate per 0.9 interval whatever the number of slots held there, a lone holder renews once per
/// interval as before, and no live slot goes longer than 1.4 intervals unrenewed — its lease lasts
/// three. A request that leads no renewal makes no call for its slot.
#[derive(Debug, Default, Clone)]
pub struct Renewals {
    slots: BTreeMap<u64, Held>,
    next: u64,
    renewed_ms: u64,
}

impl Renewals {
    /// A slot granted at `now_ms` joins; returns its ticket.
    pub fn join(&mut self, held: Held, now_ms: u64) -> u64 {
        if self.slots.is_empty() {
            self.renewed_ms = now_ms;
        }
        self.next += 1;
        self.slots.insert(self.next, held);
        self.next
    }

    /// The slot of `ticket` is given back (or its holder is gone): it is renewed no more.
    pub fn leave(&mut self, ticket: u64) {
        self.slots.remove(&ticket);
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A holder's check at `now_ms`: the slots to renew in one call when the renewal is due (the
    /// caller sends it), else `None`.
    pub fn turn(&mut self, now_ms: u64, every_ms: u64) -> Option<Vec<Held>> {
        if self.slots.is_empty() || now_ms.saturating_sub(self.renewed_ms) < every_ms * 9 / 10 {
            return None;
        }
        self.renewed_ms = now_ms;
        Some(self.slots.values().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: u64 = 10_000;

    fn granted(a: &KeyAdmit) -> bool {
        matches!(a, KeyAdmit::Granted { .. })
    }

    #[test]
    fn rpm_admits_n_in_a_minute_then_waits_for_the_oldest_to_leave() {
        let limit = KeyLimit {
            rpm: Some(3),
            max_concurrent: None,
        };
        let mut k = KeyState::default();
        for (i, t) in [0, 500, 20_000].into_iter().enumerate() {
            match k.admit(&format!("r{i}"), limit, LEASE, t) {
                KeyAdmit::Granted { window: Some(w) } => {
                    assert_eq!((w.limit, w.remaining), (3, 2 - i as u32));
                    assert_eq!(w.reset_ms, 1_000 + WINDOW_MS - t, "the first second leaves at 61 s");
                }
                other => panic!("{other:?}"),
            }
        }
        let reset = 1_000 + WINDOW_MS;
        assert_eq!(
            k.admit("r3", limit, LEASE, 30_000),
            KeyAdmit::Wait { retry_at_ms: reset }
        );
        assert_eq!(
            k.give_up("r3", limit, 30_000),
            31,
            "retry when the first second leaves the window"
        );
        assert!(matches!(k.admit("r4", limit, LEASE, reset - 1), KeyAdmit::Wait { .. }));
        k.give_up("r4", limit, reset - 1);
        assert!(
            granted(&k.admit("r4", limit, LEASE, reset)),
            "the window slid by two requests"
        );
        assert!(granted(&k.admit("r5", limit, LEASE, reset)));
        assert!(matches!(k.admit("r6", limit, LEASE, reset), KeyAdmit::Wait { .. }));
        assert_eq!(k.usage(reset).requests_in_window, 3);
        assert_eq!(k.window.len(), 2, "one entry per second, whatever the rate");
    }

    #[test]
    fn concurrency_is_given_back_and_goes_to_the_first_waiter() {
        let limit = KeyLimit {
            rpm: None,
            max_concurrent: Some(2),
        };
        let mut k = KeyState::default();
        assert!(granted(&k.admit("a", limit, LEASE, 0)));
        assert!(granted(&k.admit("b", limit, LEASE, 0)));
        assert!(matches!(
            k.admit("c", limit, LEASE, 1),
            KeyAdmit::Wait { retry_at_ms: LEASE }
        ));
        assert!(matches!(k.admit("d", limit, LEASE, 2), KeyAdmit::Wait { .. }));
        assert!(k.release("a"));
        assert!(!k.release("a"), "a slot is given back once");
        // The room is c's, not d's, though d asks first after the release.
        assert!(matches!(k.admit("d", limit, LEASE, 3), KeyAdmit::Wait { .. }));
        assert!(granted(&k.admit("c", limit, LEASE, 4)));
        assert_eq!(
            k.usage(5),
            KeyUsage {
                requests_in_window: 0,
                in_flight: 2,
                queued: 1
            }
        );
        assert_eq!(k.give_up("d", limit, 6), 1);
        assert_eq!(k.usage(6).queued, 0);
    }

    #[test]
    fn a_lease_nobody_gives_back_expires() {
        let limit = KeyLimit {
            rpm: None,
            max_concurrent: Some(1),
        };
        let mut k = KeyState::default();
        assert!(granted(&k.admit("dead", limit, LEASE, 0)));
        assert!(matches!(
            k.admit("next", limit, LEASE, LEASE - 1),
            KeyAdmit::Wait { .. }
        ));
        assert!(granted(&k.admit("next", limit, LEASE, LEASE)));
    }

    #[test]
    fn waiters_are_not_kept_across_a_restart_but_leases_are() {
        let limit = KeyLimit {
            rpm: Some(10),
            max_concurrent: Some(1),
        };
        let mut k = KeyState::default();
        assert!(granted(&k.admit("a", limit, LEASE, 0)));
        assert!(matches!(k.admit("b", limit, LEASE, 0), KeyAdmit::Wait { .. }));
        let mut restored: KeyState = serde_json::from_str(&serde_json::to_string(&k).unwrap()).unwrap();
        assert_eq!(
            restored.usage(1),
            KeyUsage {
                requests_in_window: 1,
                in_flight: 1,
                queued: 0
            }
        );
    }

    #[test]
    fn the_queue_is_bounded() {
        let limit = KeyLimit {
            rpm: Some(1),
            max_concurrent: None,
        };
        let mut k = KeyState::default();
        assert!(granted(&k.admit("a", limit, LEASE, 0)));
        for i in 0..MAX_QUEUE {
            assert!(matches!(
                k.admit(&i.to_string(), limit, LEASE, 1),
                KeyAdmit::Wait { .. }
            ));
        }
        assert_eq!(
            k.admit("late", limit, LEASE, 1),
            KeyAdmit::Refused {
                retry_after_s: 61,
                window: Some(RateWindow {
                    limit: 1,
                    remaining: 0,
                    reset_ms: 60_999
                })
            }
        );
        assert_eq!(k.rate_window(KeyLimit::default(), 1), None, "no rpm, no window");
    }

    fn want(route: &str, max: Option<u32>) -> Want {
        Want {
            route: route.into(),
            max,
        }
    }

    /// What a store keeps of the leases (one row each) restores the same admissions: a capacity
    /// rebuilt from `leases()` refuses and frees exactly as the original does.
    #[test]
    fn leases_read_back_from_rows_restore_the_same_capacity() {
        let mut c = Capacity::default();
        let wants = [want("a", Some(2)), want("b", Some(1))];
        for id in ["1", "2", "3"] {
            assert!(matches!(c.admit(id, &wants, LEASE, 0), CapacityAdmit::Granted { .. }));
        }
        assert!(c.renew("a", "1", 10, LEASE));
        assert_eq!(c.lease("a", "1").map(|l| l.expires_ms), Some(10 + LEASE));
        assert_eq!(c.lease("b", "1"), None);
        let mut rows: Vec<(String, Lease)> = c.leases().map(|(r, l)| (r.to_string(), l.clone())).collect();
        rows.reverse(); // a store's order is its own
        let mut back = Capacity::default();
        for (route, lease) in rows {
            back.restore(&route, lease);
        }
        for route in ["a", "b"] {
            assert_eq!(back.in_flight(route, 20), c.in_flight(route, 20), "{route}");
        }
        assert!(matches!(back.admit("4", &wants, LEASE, 20), CapacityAdmit::Wait { .. }));
        assert!(back.release("b", "3"));
        assert!(matches!(
            back.admit("4", &wants, LEASE, 21),
            CapacityAdmit::Granted { capped: true, .. }
        ));
        // A lease restored twice is held once.
        for _ in 0..2 {
            back.restore(
                "b",
                Lease {
                    id: "3".into(),
                    expires_ms: LEASE,
                },
            );
        }
        assert_eq!(back.in_flight("b", 21), 2);
    }

    #[test]
    fn a_full_route_is_skipped_for_one_with_room() {
        let mut c = Capacity::default();
        let wants = [want("a", Some(1)), want("b", None)];
        assert_eq!(
            c.admit("1", &wants, LEASE, 0),
            CapacityAdmit::Granted {
                route: "a".into(),
                capped: true
            }
        );
        assert_eq!(
            c.admit("2", &wants, LEASE, 0),
            CapacityAdmit::Granted {
                route: "b".into(),
                capped: false
            }
        );
        assert_eq!(c.in_flight("a", 0), 1);
        assert_eq!(c.in_flight("b", 0), 0, "an uncapped route takes no slot");
    }

    #[test]
    fn when_all_are_full_waiters_get_the_first_freed_route_in_arrival_order() {
        let mut c = Capacity::default();
        let wants = [want("a", Some(1)), want("b", Some(1))];
        assert!(matches!(c.admit("1", &wants, LEASE, 0), CapacityAdmit::Granted { .. }));
        assert!(matches!(c.admit("2", &wants, LEASE, 0), CapacityAdmit::Granted { .. }));
        assert_eq!(
            c.admit("3", &wants, LEASE, 1),
            CapacityAdmit::Wait { retry_at_ms: LEASE }
        );
        assert!(matches!(c.admit("4", &wants, LEASE, 2), CapacityAdmit::Wait { .. }));
        assert_eq!((c.queued("a"), c.queued("b")), (2, 2));
        assert!(c.release("b", "2"));
        assert!(
            matches!(c.admit("4", &wants, LEASE, 3), CapacityAdmit::Wait { .. }),
            "3 came first"
        );
        assert_eq!(
            c.admit("3", &wants, LEASE, 4),
            CapacityAdmit::Granted {
                route: "b".into(),
                capped: true
            }
        );
        // Expiry frees a slot nobody gave back.
        assert_eq!(
            c.admit("4", &wants, LEASE, LEASE),
            CapacityAdmit::Granted {
                route: "a".into(),
                capped: true
            }
        );
        c.give_up("4");
        assert_eq!(c.queued("a"), 0);
    }

    #[test]
    fn a_waiter_does_not_block_routes_it_does_not_want() {
        let mut c = Capacity::default();
        assert!(matches!(
            c.admit("1", &[want("a", Some(1))], LEASE, 0),
            CapacityAdmit::Granted { .. }
        ));
        assert!(matches!(
            c.admit("2", &[want("a", Some(1))], LEASE, 0),
            CapacityAdmit::Wait { .. }
        ));
        assert_eq!(
            c.admit("3", &[want("a", Some(1)), want("b", Some(1))], LEASE, 0),
            CapacityAdmit::Granted {
                route: "b".into(),
                capped: true
            }
        );
    }

    #[test]
    fn a_lease_is_short_and_renewed_while_its_holder_lives() {
        // SPEC §18: a vanished holder's slot comes back within 15 s, not after the longest
        // possible request (70 min under the defaults); a live one renews three times a lease.
        assert_eq!(lease_ms(&Policy::default()), MAX_LEASE_MS);
        let short = Policy {
            key_wait_ms: 500,
            capacity_wait_ms: 500,
            pre_content_budget_ms: 1000,
            stream_cap_ms: 1000,
            disconnect_grace_ms: 0,
            ..Policy::default()
        };
        assert_eq!(
            lease_ms(&short),
            8_000,
            "the longest request of a short policy, and the margin"
        );
        assert_eq!(renew_every_ms(MAX_LEASE_MS), 5_000);
        let mut k = KeyState::default();
        let limit = KeyLimit {
            max_concurrent: Some(1),
            ..KeyLimit::default()
        };
        assert!(matches!(k.admit("a", limit, 1_000, 0), KeyAdmit::Granted { .. }));
        assert!(k.renew("a", 900, 1_000), "renewed before it expired");
        assert!(matches!(
            k.admit("b", limit, 1_000, 1_500),
            KeyAdmit::Wait { .. } | KeyAdmit::Refused { .. }
        ));
        assert!(!k.renew("a", 5_000, 1_000), "expired: nothing to renew");
        assert!(matches!(k.admit("b", limit, 1_000, 5_000), KeyAdmit::Granted { .. }));
        let mut c = Capacity::default();
        let wants = [Want {
            route: "r".into(),
            max: Some(1),
        }];
        assert!(matches!(c.admit("a", &wants, 1_000, 0), CapacityAdmit::Granted { .. }));
        assert!(c.renew("r", "a", 900, 1_000));
        assert!(!c.renew("r", "nobody", 900, 1_000));
        assert_eq!(retry_after_s(0), 1);
        assert_eq!(retry_after_s(1_001), 2);
    }

    /// Holders joining and leaving at random, each checking every half interval from its grant:
    /// no live slot goes 1.4 intervals unrenewed, the object gets one call per ≥ 0.9 interval
    /// whatever the number of holders, and a lone holder calls once per interval.
    #[test]
    fn an_isolates_slots_on_one_object_are_renewed_together() {
        let every = renew_every_ms(MAX_LEASE_MS);
        for seed in 0..200u64 {
            let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut next = |n: u64| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (rng >> 33) % n
            };
            let holders = 1 + next(40) as usize;
            // (grant, end) of each holder, within 10 minutes.
            let spans: Vec<(u64, u64)> = (0..holders)
                .map(|_| {
                    let start = next(1_200) * 500; // on the simulation's 500 ms steps
                    (start, start + 500 + next(600) * 500)
                })
                .collect();
            let mut group = Renewals::default();
            let mut tickets = vec![None; holders];
            let mut last = vec![0u64; holders];
            let mut calls = Vec::new();
            let mut t = 0;
            while t <= 900_000 {
                for (h, (start, end)) in spans.iter().enumerate() {
                    if t == *start {
                        tickets[h] = Some(group.join(
                            Held {
                                route: None,
                                id: format!("{h}"),
                            },
                            t,
                        ));
                        last[h] = t;
                    }
                    if t == *end {
                        if let Some(ticket) = tickets[h].take() {
                            group.leave(ticket);
                        }
                    }
                }
                for (h, (start, end)) in spans.iter().enumerate() {
                    let live = t > *start && t < *end;
                    if live && (t - start) % (every / 2) == 0 {
                        if let Some(renewed) = group.turn(t, every) {
                            calls.push(t);
                            for held in renewed {
                                let i: usize = held.id.parse().unwrap_or(usize::MAX);
                                last[i] = t;
                            }
                        }
                    }
                    if live {
                        assert!(
                            t - last[h] <= every * 14 / 10,
                            "seed {seed}: slot {h} unrenewed for {} ms",
                            t - last[h]
                        );
                    }
                }
                t += 500;
            }
            for pair in calls.windows(2) {
                assert!(
                    pair[1] - pair[0] >= every * 9 / 10,
                    "seed {seed}: calls {} ms apart",
                    pair[1] - pair[0]
                );
            }
        }
        // Alone for a minute: one call per interval, as before.
        let mut group = Renewals::default();
        let ticket = group.join(
            Held {
                route: Some("r0".into()),
                id: "a".into(),
            },
            0,
        );
        let calls = (1..=24).filter(|k| group.turn(k * every / 2, every).is_some()).count();
        assert_eq!(calls, 12, "60 s of a lone holder checking every 2.5 s");
        group.leave(ticket);
        assert!(group.is_empty() && group.turn(1_000_000, every).is_none());
    }

    /// SPEC §22: an `rpm` key's window given out in batches is still one window: isolates spending
    /// permits never start more than `rpm` requests in it, and a request asked one by one sees
    /// the permits counted.
    #[test]
    fn permits_never_take_the_window_past_its_limit() {
        let limit = KeyLimit {
            rpm: Some(600),
            max_concurrent: None,
        };
        assert_eq!(permit_cap(600), 10);
        assert_eq!(permit_cap(100), 1, "under 120 rpm: one at a time");
        assert_eq!(permit_cap(1_000_000), MAX_PERMITS);
        let mut k = KeyState::default();
        let mut granted = 0;
        for t in 0..200u64 {
            granted += k.permits(1_000, limit, t * 10).granted;
        }
        assert_eq!(granted, 600, "the window, and no more");
        assert_eq!(k.permits(5, limit, 2_000).granted, 0);
        assert!(matches!(k.admit("one", limit, LEASE, 2_000), KeyAdmit::Wait { .. }));
        // A concurrency limit keeps its slots one per request: no permits.
        let both = KeyLimit {
            rpm: Some(600),
            max_concurrent: Some(5),
        };
        assert_eq!(KeyState::default().permits(5, both, 0).granted, 0);
        assert!(!uses_permits(both) && uses_permits(limit));
    }

    /// An isolate's permits: spent without a call while they last and in time, asked for again
    /// when half the next batch is left, the batch doubling while spent in time and halving when
    /// one expires unspent.
    #[test]
    fn an_isolates_permits_grow_while_spent_and_shrink_when_wasted() {
        let rpm = 6_000; // 100 a second: batches up to the cap of 64
        let reply = |granted: u32| PermitReply {
            granted,
            window: Some(RateWindow {
                limit: rpm,
                remaining: 100,
                reset_ms: 60_000,
            }),
        };
        let mut p = Permits::default();
        assert_eq!(p.spend(0), None, "nothing yet");
        assert_eq!(p.want(rpm, 0), Some(1), "the first batch is one");
        assert_eq!(p.want(rpm, 0), None, "one asked at a time");
        p.got(1, Some(&reply(1)), 0);
        assert_eq!(p.spend(1).unwrap().unwrap().remaining, 100);
        assert_eq!(p.want(rpm, 2), Some(2), "spent in time: doubled");
        p.got(2, Some(&reply(2)), 2);
        assert_eq!(p.want(rpm, 3), Some(4), "two left, half the next batch: asked ahead");
        p.got(4, Some(&reply(4)), 3);
        let w = p.spend(3).unwrap().unwrap();
        assert_eq!(w.remaining, 105, "what the isolate holds unspent counts as remaining");
        assert_eq!(p.want(rpm, 4), None, "five left");
        // Left to expire: the next batch halves.
        assert_eq!(p.spend(3 + PERMIT_TTL_MS), None, "expired");
        assert_eq!(p.want(rpm, 2_000), Some(8));
        p.got(8, Some(&reply(8)), 2_000);
        assert_eq!(p.want(rpm, 2_000), None);
        for _ in 0..6 {
            assert!(p.spend(2_001).is_some());
        }
        assert_eq!(p.want(rpm, 2_001), Some(4), "batches wasted: halved");
        // An object that grants less (its window nearly full) sets the next batch to what it gave.
        p.got(4, Some(&reply(1)), 2_002);
        assert_eq!(p.want(rpm, 2_002), None, "three left");
        for _ in 0..3 {
            assert!(p.spend(2_003).is_some());
        }
        assert_eq!(p.want(rpm, 2_003), Some(1));
        p.got(1, None, 2_004);
        assert_eq!(p.want(rpm, 2_004), Some(1), "an unanswered ask may be made again");
        // Never more than the cap.
        let mut q = Permits::default();
        for t in 0..10 {
            let want = q.want(rpm, t).unwrap();
            assert!(want <= permit_cap(rpm));
            q.got(want, Some(&reply(want)), t);
            while q.spend(t).is_some() {}
        }
        assert_eq!(q.want(rpm, 10), Some(permit_cap(rpm)));
    }

    #[test]
    fn a_large_key_is_split_exactly_and_its_requests_spread() {
        let slots = |n| KeyLimit {
            rpm: None,
            max_concurrent: Some(n),
        };
        let rpm = |n| KeyLimit {
            rpm: Some(n),
            max_concurrent: None,
        };
        assert_eq!(key_shards(slots(SLOTS_PER_SHARD)), 1, "a small key keeps one object");
        assert_eq!(key_shards(slots(SLOTS_PER_SHARD + 1)), 2);
        assert_eq!(key_shards(slots(1_000_000)), MAX_KEY_SHARDS);
        assert_eq!(key_shards(rpm(RPM_PER_SHARD)), 1);
        assert_eq!(key_shards(rpm(RPM_PER_SHARD + 1)), 2);
        let both = KeyLimit {
            rpm: Some(1_000_000),
            max_concurrent: Some(10_000),
        };
        assert_eq!(key_shards(both), 1, "window and slots decided together: one object");
        assert_eq!(shard_limit(both, 0, 1), both);
        for n in [12_001, 100_000, 1_000_000] {
            let shards = key_shards(rpm(n));
            let shares: Vec<u32> = (0..shards)
                .map(|i| shard_limit(rpm(n), i, shards).rpm.unwrap())
                .collect();
            assert_eq!(shares.iter().sum::<u32>(), n, "{n}: {shares:?}");
            assert!((0..shards).all(|i| shard_limit(rpm(n), i, shards).max_concurrent.is_none()));
            // The headers speak of the key's window, not of one shard's.
            let w = RateWindow {
                limit: shares[0],
                remaining: shares[0] / 2,
                reset_ms: 7,
            };
            let whole = key_window(w, rpm(n), shards);
            assert_eq!(whole.limit, n);
            assert!(whole.remaining <= n && whole.remaining >= n / 2 - shards, "{whole:?}");
        }
        let isolates: Vec<u32> = (0..1_000).map(|i| permit_shard(i, "key-1", 4)).collect();
        assert!(
            (0..4).all(|s| isolates.iter().filter(|&&x| x == s).count() > 200),
            "isolates spread"
        );
        for n in [33, 64, 65, 1_000, 2_047, 1_000_000] {
            let shards = key_shards(slots(n));
            let shares: Vec<u32> = (0..shards)
                .map(|i| shard_limit(slots(n), i, shards).max_concurrent.unwrap())
                .collect();
            assert_eq!(shares.iter().sum::<u32>(), n, "{n}: {shares:?}");
            assert!(
                shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1,
                "{shares:?}"
            );
            assert!((0..shards).all(|i| shard_limit(slots(n), i, shards).rpm.is_none()));
        }
        // Requests spread evenly over the shards, and a request's second shard is another one.
        let mut firsts = [0u32; 4];
        for i in 0..4_000 {
            let order = shard_order(&format!("gen-{i}"), 4);
            assert_eq!(order.len(), 2);
            assert_eq!(order[1], (order[0] + 1) % 4);
            firsts[order[0] as usize] += 1;
        }
        assert!(firsts.iter().all(|&n| (850..=1_150).contains(&n)), "{firsts:?}");
        assert_eq!(shard_order("gen-1", 1), vec![0]);
    }

    #[test]
    fn two_shards_admit_exactly_the_key_s_slots_whatever_shard_each_request_picks() {
        let limit = KeyLimit {
            rpm: None,
            max_concurrent: Some(SLOTS_PER_SHARD + 7),
        };
        let shards = key_shards(limit);
        assert_eq!(shards, 2);
        let mut objects = vec![KeyState::default(); shards as usize];
        let mut admitted = 0;
        for i in 0..100 {
            let id = format!("gen-{i}");
            // As `limits::admit_key` asks: its first shard at once, else its second.
            let won = shard_order(&id, shards).into_iter().any(|s| {
                let share = shard_limit(limit, s, shards);
                let k = &mut objects[s as usize];
                match k.admit(&id, share, LEASE, 0) {
                    KeyAdmit::Granted { .. } => true,
                    _ => {
                        k.give_up(&id, share, 0);
                        false
                    }
                }
            });
            admitted += u32::from(won);
        }
        assert_eq!(
            admitted,
            limit.max_concurrent.unwrap(),
            "never more, and every slot found"
        );
    }

    #[test]
    fn a_large_capped_model_is_split_exactly_on_its_smallest_cap() {
        assert_eq!(capacity_shards([]), 1);
        assert_eq!(capacity_shards([SLOTS_PER_SHARD]), 1);
        assert_eq!(capacity_shards([1_000, 40]), 2, "the smallest cap decides");
        assert_eq!(capacity_shards([1_000_000]), MAX_KEY_SHARDS);
        let wants = vec![
            Want {
                route: "a".into(),
                max: Some(40),
            },
            Want {
                route: "b".into(),
                max: None,
            },
            Want {
                route: "c".into(),
                max: Some(1_001),
            },
        ];
        let shards = capacity_shards([40, 1_001]);
        let parts: Vec<Vec<Want>> = (0..shards).map(|i| shard_wants(&wants, i, shards)).collect();
        for (i, w) in wants.iter().enumerate() {
            let total: Option<u32> = parts.iter().map(|p| p[i].max).sum();
            assert_eq!(total, w.max, "{}: shares sum to its cap", w.route);
            assert!(parts.iter().all(|p| p[i].route == w.route && p[i].max != Some(0)));
        }
        // Two shards, each request asking its own then the next: exactly the cap is granted.
        let mut objects = vec![Capacity::default(); shards as usize];
        let one = vec![wants[0].clone()];
        let mut granted = 0;
        for i in 0..100 {
            let id = format!("gen-{i}");
            granted += u32::from(shard_order(&id, shards).into_iter().any(|s| {
                let c = &mut objects[s as usize];
                match c.admit(&id, &shard_wants(&one, s, shards), LEASE, 0) {
                    CapacityAdmit::Granted { .. } => true,
                    _ => {
                        c.give_up(&id);
                        false
                    }
                }
            }));
        }
        assert_eq!(granted, 40);
    }
}
