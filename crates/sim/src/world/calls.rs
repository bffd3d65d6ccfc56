//! Calls and stores: a call travels half a round trip, is served in turn by its store (its effect
//! applied there, in arrival order) or refused, and its answer travels back — or the caller's
//! deadline passes first.

use super::*;

impl World {
    pub(super) fn call(&mut self, iso: u32, obj: Obj, kind: Kind, work: impl Into<Work>, timeout_ms: u64, then: Then) {
        // `iso` past the isolates: an object calling another (the status object, a health shard).
        let rtt = self
            .isolates
            .get(iso as usize)
            .map_or(OBJECT_RTT_MS as f64 * 1e3, |i| i.rtt_us);
        let half = (rtt * self.rng.range(0.9, 1.1) / 2.0) as u64;
        self.issue(obj, kind, work.into(), half, timeout_ms, then);
    }

    pub(super) fn issue(&mut self, obj: Obj, kind: Kind, work: Work, half_rtt_us: u64, timeout_ms: u64, then: Then) {
        let call = Call {
            obj,
            kind,
            work,
            half_rtt_us,
            deadline_us: self.now + timeout_ms * 1_000,
            then,
            reply: None,
            read: None,
            deferred: false,
        };
        let id = match self.free_calls.pop() {
            Some(id) => {
                self.calls[id as usize] = Some(call);
                id
            }
            None => {
                self.calls.push(Some(call));
                (self.calls.len() - 1) as u32
            }
        };
        *self.totals.issued.entry((obj.class(), kind)).or_default() += 1;
        if self.window.contains(self.now) {
            *self.totals.window_issued.entry((obj.class(), kind)).or_default() += 1;
        }
        self.at(self.now + half_rtt_us, Ev::Arrive(id));
    }

    pub(super) fn service_us(&self, obj: Obj, kind: Kind, work: Work) -> u64 {
        let s = &self.p.service;
        match (obj, kind) {
            (Obj::D1(_), _) => s.d1_call_us + s.d1_statement_us * work.statements + s.d1_row_us * work.rows,
            (Obj::Model(_), Kind::Snapshot) => s.model_snapshot_us,
            (Obj::Model(_), Kind::Observe) => s.model_observe_us,
            (Obj::Model(_), Kind::Full) => s.model_full_us,
            (Obj::Model(_) | Obj::Capacity(..), _) => s.capacity_us,
            (Obj::Accounts | Obj::Account(_), Kind::Observe) => s.accounts_observe_us,
            (Obj::Accounts | Obj::Account(_), _) => s.accounts_snapshot_us,
            (Obj::Key(..), _) => s.key_limit_us,
            (Obj::Status, _) => s.status_us,
            (Obj::Outbox(_), _) => s.outbox_us,
            (Obj::Desk(..), _) => s.desk_us,
            (Obj::Shard(..), _) => s.shard_us,
            (Obj::KeyRing(_), _) => s.keyring_us,
        }
    }

    /// A call reaches its store: served in turn (its effect applied now, in arrival order) or
    /// refused; its answer goes back, or the caller's deadline passes first.
    pub(super) fn arrive(&mut self, id: u32) {
        let Some(call) = self.calls.get(id as usize).and_then(|c| c.as_ref()) else {
            return;
        };
        let (obj, kind, half, deadline) = (call.obj, call.kind, call.half_rtt_us, call.deadline_us);
        let service = self.service_us(obj, kind, call.work);
        let backlog = self.p.overload_backlog_ms * 1_000;
        let window = self.window;
        let offer = self
            .servers
            .entry(obj)
            .or_default()
            .offer(self.now, service, backlog, &window);
        match offer {
            Offer::Refused => self.at(self.now + half, Ev::Reply { call: id, ok: false }),
            Offer::Served { finish, .. } => {
                if window.contains(self.now) {
                    let served = self.totals.window_served.entry((obj, kind)).or_default();
                    served.0 += 1;
                    served.1 += service;
                }
                self.apply(id);
                if self.calls[id as usize].as_ref().is_some_and(|c| c.deferred) {
                    return; // answered when its store's own call comes back
                }
                let back = finish + half;
                if back <= deadline {
                    self.at(back, Ev::Reply { call: id, ok: true });
                } else {
                    self.at(deadline.max(self.now), Ev::Reply { call: id, ok: false });
                }
            }
        }
    }

    /// What a served call does to its store's state.
    pub(super) fn apply(&mut self, id: u32) {
        let now_ms = self.ms();
        let Some(call) = self.calls.get(id as usize).and_then(|c| c.as_ref()) else {
            return;
        };
        let (obj, kind) = (call.obj, call.kind);
        let items: Vec<u32> = match &call.then {
            Then::Batch { taken, .. } => taken.items.clone(),
            Then::Alone { req, .. } | Then::Keep(req) => vec![*req],
            Then::KeepAll(items) | Then::DeskFlushed { items, .. } => items.clone(),
            _ => Vec::new(),
        };
        let forwarded = match &call.then {
            Then::ShardFlush { observations, .. } | Then::AccountFold { observations, .. } => {
                Some(observations.clone())
            }
            _ => None,
        };
        let reply = match (obj, kind) {
            (Obj::Model(m), Kind::Observe) => {
                let observations: Vec<Observation> = match forwarded {
                    Some(o) => o,
                    None => items.iter().flat_map(|r| self.observations(*r)).collect(),
                };
                let config = self.config;
                let health = self.model_objects.entry(m).or_default();
                // What its accounts' objects must hear of (the model's object tells them: the
                // Worker's `tell_accounts`, below).
                let forward = match self.p.design {
                    Design::Sharded => for_accounts(&observations, Some(health)),
                    Design::Direct => Vec::new(),
                };
                for o in &observations {
                    health.observe_scoped(o, &config, Scope::Model);
                }
                if self.p.design == Design::Direct {
                    health.accounts.clear(); // the accounts object's, in that design
                }
                health.changed();
                if self.p.design == Design::Sharded {
                    self.tell_accounts(m, forward);
                }
                let health = self.model_objects.entry(m).or_default();
                let demoted = health.routes.get("r0").is_some_and(|s| s.breaker.is_demoted());
                let snapshot = health.snapshot();
                if m == 0 && demoted && self.totals.object_demoted_ms.is_none() && self.p.route_down_at_ms.is_some() {
                    self.totals.object_demoted_ms = Some(now_ms);
                }
                Some(snapshot)
            }
            (Obj::Shard(m, k), Kind::Observe) => {
                let observations = items.iter().flat_map(|r| self.observations(*r)).collect();
                Some(self.shard_observe(m, k, observations))
            }
            (Obj::Shard(m, k), Kind::Snapshot) => Some(self.shard_snapshot(m, k)),
            (Obj::Model(m), Kind::Snapshot) => Some(self.model_objects.entry(m).or_default().snapshot()),
            (Obj::Accounts, Kind::Observe) => {
                let config = self.config;
                // A shard's queue was filtered by the shard (`for_accounts`, as an isolate does).
                let kept = match forwarded {
                    Some(observations) => observations,
                    None => {
                        let observations: Vec<Observation> = items.iter().flat_map(|r| self.observations(*r)).collect();
                        for_accounts(&observations, Some(&self.accounts_object))
                    }
                };
                for o in &kept {
                    self.accounts_object.observe_scoped(o, &config, Scope::Accounts);
                }
                self.accounts_object.changed();
                Some(self.accounts_object.snapshot())
            }
            (Obj::Accounts, Kind::Snapshot) => Some(self.accounts_object.snapshot()),
            (Obj::Account(a), Kind::Observe) => {
                let config = self.config;
                let observations = forwarded.unwrap_or_default();
                let health = self.account_objects.entry(a).or_default();
                for o in &observations {
                    health.observe_scoped(o, &config, Scope::Accounts);
                }
                health.changed();
                Some(health.snapshot())
            }
            (Obj::Account(a), _) => Some(self.account_objects.entry(a).or_default().snapshot()),
            (Obj::D1(_), Kind::D1Settle | Kind::D1Desk) => {
                // A desk's holds change no settlement; each settlement counts in its account's
                // `settlements_total`.
                let Obj::D1(ledger) = obj else { unreachable!() };
                for r in items.iter().filter(|r| *r & desk::HOLD_BIT == 0) {
                    let req = &mut self.reqs[*r as usize];
                    if req.settled == Settled::Open {
                        req.settled = Settled::Written;
                        *self.settled_total.entry(ledger).or_default() += 1;
                    }
                }
                None
            }
            (Obj::Desk(ledger, n), Kind::DeskKeep) => {
                let live: Vec<u32> = items.into_iter().filter(|i| self.live(*i)).collect();
                self.desk_keep(ledger, n, &live);
                None
            }
            (Obj::Outbox(_), Kind::Keep) => {
                for r in &items {
                    let req = &mut self.reqs[*r as usize];
                    if req.settled == Settled::Open {
                        let in_time = now_ms.saturating_sub(req.end_ms) <= WAIT_UNTIL_MS;
                        req.settled = if in_time { Settled::Kept } else { Settled::Lost };
                    }
                }
                None
            }
            (Obj::Status, Kind::StatusGet) => {
                self.status_build();
                None
            }
            (Obj::KeyRing(ring), Kind::KeyRead | Kind::CatalogRead) => {
                self.ring_read(ring, id);
                None
            }
            _ => None,
        };
        if let Some(Some(call)) = self.calls.get_mut(id as usize) {
            call.reply = reply;
        }
    }

    pub(super) fn reply(&mut self, id: u32, ok: bool) {
        let Some(call) = self.calls.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        self.free_calls.push(id);
        let now_ms = self.ms();
        match call.then {
            Then::Req(req) => {
                self.reqs[req as usize].answered = call.read;
                self.resume(req, ok)
            }
            Then::Snapshot { iso, obj, req } => {
                if let (true, Some(health)) = (ok, call.reply) {
                    self.remember(iso, obj, health);
                }
                let isolate = &mut self.isolates[iso as usize];
                isolate.flights.entry(obj).or_default().done(ok, now_ms, &SNAPSHOT);
                if let Some(req) = req {
                    self.part_done(req);
                }
            }
            Then::ShardFlush {
                model, shard, taken, ..
            } => self.shard_flushed(model, shard, taken, ok.then_some(call.reply).flatten()),
            Then::Batch { iso, which, taken, own } => self.batch_done(iso, which, taken, own, ok, call.reply),
            Then::Alone { which, req } => {
                if !ok {
                    let iso = self.reqs[(req & !desk::HOLD_BIT) as usize].iso;
                    self.give_up(iso, which, req);
                }
            }
            Then::Keep(req) => {
                if !ok && self.reqs[req as usize].settled == Settled::Open {
                    self.reqs[req as usize].settled = Settled::Lost;
                }
            }
            Then::KeepAll(items) => {
                for r in items {
                    if !ok && self.reqs[r as usize].settled == Settled::Open {
                        self.reqs[r as usize].settled = Settled::Lost;
                    }
                }
            }
            Then::DeskFlushed { ledger, n, items } => self.desk_flushed(ledger, n, items, ok),
            Then::StatusFetch(iso) => self.status_fetched(iso, ok),
            Then::RingRead { ring, key } => self.ring_answered(ring, key, ok),
            Then::Permits { iso, key, asked } => self.permits_came(iso, key, asked, ok),
            Then::Refreshed { iso, key } => {
                let now_ms = self.ms();
                let isolate = &mut self.isolates[iso as usize];
                isolate.refreshing.remove(&key);
                match (ok, key) {
                    // The read brings the account's balance too, as on the request's path.
                    (true, Some(key)) => self.key_read(iso, key, call.read),
                    (true, None) => isolate.catalog_at = Some(call.read.map_or(now_ms, |(at, _)| at)),
                    (false, _) => {}
                }
            }
            Then::AccountFold { model, account, .. } => {
                self.account_folded(model, account, ok.then_some(call.reply).flatten())
            }
            Then::Nothing => {}
        }
    }

    /// An object's answer becomes the isolate's snapshot — its breakers only if newer than the
    /// copy held (`health::remember`).
    pub(super) fn remember(&mut self, iso: u32, obj: Obj, health: ModelHealth) {
        let now_ms = self.ms();
        let snapshots = &mut self.isolates[iso as usize].snapshots;
        match snapshots.get_mut(&obj) {
            Some(held) => {
                if health.newer_than(&held.health) {
                    held.health = health;
                }
                held.fetched_ms = Some(now_ms);
            }
            None => {
                let snap = Snap {
                    health,
                    fetched_ms: Some(now_ms),
                };
                snapshots.insert(obj, snap);
            }
        }
        if obj == self.view_obj(iso, 0) {
            self.note_demotion(iso);
        }
    }
}
