//! A request's path through the Worker (`src/proxy.rs`, `src/health.rs`, `src/billing.rs`,
//! `src/finish.rs`): its stages, each waiting on what the Worker waits on, and what it leaves
//! behind when its answer ends.

use super::*;
use switchyard_core::limits::{capacity_shards, key_shards, permit_shard, shard_order, KeyLimit};

impl World {
    pub(super) fn arrival(&mut self) {
        if self.now >= self.arrivals_end {
            return;
        }
        let gap = self.rng.exp(1e6 / self.p.rate.max(1e-9)) as u64;
        self.at(self.now + gap.max(1), Ev::Arrival);
        let iso = self.rng.below(self.isolates.len()) as u32;
        let model = if self.p.models <= 1 || self.rng.unit() < self.p.hot_share {
            0
        } else {
            1 + self.rng.below(self.p.models - 1) as u32
        };
        let account = self.accounts_zipf.draw(&mut self.rng);
        let key = (account * self.p.keys_per_account.max(1) + self.keys_zipf.draw(&mut self.rng)) as u32;
        let id = self.reqs.len() as u32;
        self.reqs.push(Req {
            iso,
            model,
            key,
            arrived_us: self.now,
            stage: Stage::Key,
            pending: 0,
            blocking: 0,
            cold: false,
            key_slot: false,
            answered: None,
            key_shard: 0,
            asked: 0,
            cap_slot: false,
            cap_shard: 0,
            fails: Vec::new(),
            route: 0,
            end_ms: 0,
            refused: false,
            settled: Settled::Open,
        });
        self.totals.requests += 1;
        if self.window.contains(self.now) {
            self.totals.window_requests += 1;
        }
        self.advance(id);
    }

    /// Runs the request's stages until one waits on something.
    pub(super) fn advance(&mut self, id: u32) {
        loop {
            let r = &self.reqs[id as usize];
            let (iso, key, model) = (r.iso, r.key, r.model);
            let account = r.account(self.p.keys_per_account);
            let now_ms = self.ms();
            let isolate = &self.isolates[iso as usize];
            match r.stage {
                Stage::Key => {
                    let age = isolate.keys.get(&key).map(|at| now_ms.saturating_sub(*at));
                    if age.is_some_and(|age| age < CACHE_TTL_MS) {
                        // `Store::refresh_early`: read again beside the request once 4 s old.
                        let due = age.is_some_and(|age| age >= REFRESH_AFTER_MS);
                        if due && self.isolates[iso as usize].refreshing.insert(Some(key)) {
                            let then = Then::Refreshed { iso, key: Some(key) };
                            let (obj, kind, work, timeout) = self.key_store(id);
                            self.call(iso, obj, kind, work, timeout, then);
                        }
                        self.reqs[id as usize].stage = Stage::Catalog;
                        continue;
                    }
                    self.reqs[id as usize].cold = true;
                    let (obj, kind, work, timeout) = self.key_store(id);
                    return self.blocking(id, obj, kind, work, timeout);
                }
                Stage::Catalog => {
                    let age = isolate.catalog_at.map(|at| now_ms.saturating_sub(at));
                    if age.is_some_and(|age| age < CACHE_TTL_MS) {
                        let due = age.is_some_and(|age| age >= REFRESH_AFTER_MS);
                        if due && self.isolates[iso as usize].refreshing.insert(None) {
                            let then = Then::Refreshed { iso, key: None };
                            let (obj, kind, work, timeout) = self.catalog_store(iso);
                            self.call(iso, obj, kind, work, timeout, then);
                        }
                        self.reqs[id as usize].stage = Stage::Limit;
                        continue;
                    }
                    self.reqs[id as usize].cold = true;
                    let (obj, kind, work, timeout) = self.catalog_store(iso);
                    return self.blocking(id, obj, kind, work, timeout);
                }
                Stage::Limit => {
                    if !self.limited(key) {
                        self.reqs[id as usize].stage = Stage::View;
                        continue;
                    }
                    if self.rpm_only(key) && self.reqs[id as usize].asked != u32::MAX {
                        // `limits::spend_permit`: one held is spent without a call (the next
                        // batch asked for in the background when what is left runs low); none
                        // held, a batch is asked for and waited on.
                        let permits = self.isolates[iso as usize].permits.entry(key).or_default();
                        let spent = permits.spend(now_ms).is_some();
                        let want = permits.want(KEY_RPM, now_ms);
                        if spent {
                            if let Some(asked) = want {
                                let then = Then::Permits { iso, key, asked };
                                self.call(
                                    iso,
                                    Obj::Key(key, self.permit_shard(iso, key)),
                                    Kind::Permits,
                                    0,
                                    PERMITS_TIMEOUT_MS,
                                    then,
                                );
                            }
                            self.reqs[id as usize].stage = Stage::View;
                            continue;
                        }
                        if let Some(asked) = want {
                            self.reqs[id as usize].asked = asked;
                            return self.blocking(
                                id,
                                Obj::Key(key, self.permit_shard(iso, key)),
                                Kind::Permits,
                                0,
                                PERMITS_TIMEOUT_MS,
                            );
                        }
                        // A batch is being asked for: wait for it (no call of its own).
                        self.permit_waiters.entry((iso, key)).or_default().push(id);
                        return;
                    }
                    let shard = self.key_shard(id, key);
                    self.reqs[id as usize].key_shard = shard;
                    return self.blocking(id, Obj::Key(key, shard), Kind::Acquire, 0, KEY_TIMEOUT_MS);
                }
                Stage::View => {
                    let objects = match self.p.design {
                        Design::Direct => vec![Obj::Model(model), Obj::Accounts],
                        Design::Sharded => vec![self.view_obj(iso, model)],
                    };
                    self.reqs[id as usize].pending = objects.len() as u8;
                    let mut done = 0;
                    for obj in objects {
                        if self.view_part(id, obj) {
                            done += 1;
                        }
                    }
                    let r = &mut self.reqs[id as usize];
                    r.pending -= done;
                    if r.pending > 0 {
                        return;
                    }
                    r.stage = Stage::Capacity;
                }
                Stage::Capacity => {
                    if !(model == 0 && self.p.hot_model_capped) {
                        self.reqs[id as usize].stage = Stage::Balance;
                        continue;
                    }
                    let shard = shard_order(&format!("gen-{id}"), self.capacity_shards())[0];
                    self.reqs[id as usize].cap_shard = shard;
                    let object = self.capacity_obj(model, shard);
                    return self.blocking(id, object, Kind::Acquire, 0, CAPACITY_TIMEOUT_MS);
                }
                Stage::Balance => {
                    // Judged as of the request's arrival, when its key's copy let it in
                    // (`billing::HoldRequest::arrived_ms`).
                    let arrived_ms = self.reqs[id as usize].arrived_us / 1_000;
                    let fresh = isolate
                        .balances
                        .get(&account)
                        .is_some_and(|at| arrived_ms.saturating_sub(*at) < BALANCE_SNAPSHOT_MS);
                    if fresh {
                        self.after_ms(FAST_HOLD_DEFER_MS, Ev::FastHold(id));
                        self.reqs[id as usize].stage = Stage::Upstream;
                        continue;
                    }
                    self.reqs[id as usize].cold = true;
                    return self.blocking(id, self.ledger(id), Kind::D1Balance, READ_STATEMENTS, D1_DEADLINE_MS);
                }
                Stage::Hold => {
                    return self.blocking(id, self.ledger(id), Kind::D1HoldAtomic, HOLD_STATEMENTS, D1_DEADLINE_MS);
                }
                Stage::Upstream => return self.attempt(id),
                Stage::Streaming | Stage::Closed => return,
            }
        }
    }

    pub(super) fn limited(&self, key: u32) -> bool {
        self.p.limited_key_every > 0 && (key as usize).is_multiple_of(self.p.limited_key_every)
    }

    /// A limited key with `rpm` alone, whose isolates spend permits (`Design::Sharded`).
    pub(super) fn rpm_only(&self, key: u32) -> bool {
        let every = self.p.limited_key_every * self.p.rpm_only_every;
        self.p.design == Design::Sharded && every > 0 && (key as usize).is_multiple_of(every)
    }

    /// The D1 ledger of request `id`'s account (core `ledgers::place`).
    pub(super) fn ledger_of(&self, id: u32) -> u8 {
        self.ledger_of_account(self.reqs[id as usize].account(self.p.keys_per_account))
    }

    pub(super) fn ledger_of_account(&self, account: u32) -> u8 {
        switchyard_core::ledgers::place(&format!("acct-{account}"), self.p.ledgers)
    }

    /// That ledger, as a store.
    pub(super) fn ledger(&self, id: u32) -> Obj {
        Obj::D1(self.ledger_of(id))
    }

    /// Shard `shard` of the objects keeping `model`'s route capacity: its own (`Design::Sharded`,
    /// since session 19) or the model's health object.
    fn capacity_obj(&self, model: u32, shard: u32) -> Obj {
        match self.p.design {
            Design::Sharded => Obj::Capacity(model, shard),
            Design::Direct => Obj::Model(model),
        }
    }

    /// How many objects keep the capped model's capacity (core `capacity_shards` of its route's
    /// ample [`ROUTE_MAX_CONCURRENCY`]; one in `Design::Direct`).
    fn capacity_shards(&self) -> u32 {
        match self.p.design {
            Design::Sharded => capacity_shards([ROUTE_MAX_CONCURRENCY]),
            Design::Direct => 1,
        }
    }

    /// The key's limit here and how many objects keep it (`Design::Sharded`: core `key_shards`;
    /// the keys' limits are ample, [`KEY_RPM`] and [`KEY_MAX_CONCURRENT`]).
    fn key_shards(&self, key: u32) -> (KeyLimit, u32) {
        let limit = match self.rpm_only(key) {
            true => KeyLimit {
                rpm: Some(KEY_RPM),
                max_concurrent: None,
            },
            false => KeyLimit {
                rpm: None,
                max_concurrent: Some(KEY_MAX_CONCURRENT),
            },
        };
        match self.p.design {
            Design::Sharded => (limit, key_shards(limit)),
            Design::Direct => (limit, 1),
        }
    }

    /// The object of `key` request `id` asks for its admission (`limits::admit_key`): the one its
    /// id picks (its first ask always finds room here: the limits are ample).
    fn key_shard(&self, id: u32, key: u32) -> u32 {
        let (_, shards) = self.key_shards(key);
        shard_order(&format!("gen-{id}"), shards)[0]
    }

    /// The object of `key` isolate `iso` takes its permits from (`limits::admit_key`).
    fn permit_shard(&self, iso: u32, key: u32) -> u32 {
        let (_, shards) = self.key_shards(key);
        permit_shard(u64::from(iso), &format!("key-{key}"), shards)
    }

    /// A batch of permits came for `key` on isolate `iso` (granted whole: the keys' `rpm` is
    /// ample here), or not.
    fn permits_got(&mut self, iso: u32, key: u32, asked: u32, ok: bool) {
        let now_ms = self.ms();
        let reply = PermitReply {
            granted: asked,
            window: None,
        };
        if let Some(permits) = self.isolates[iso as usize].permits.get_mut(&key) {
            permits.got(asked, ok.then_some(&reply), now_ms);
        }
    }

    /// The requests that waited for the batch: each spends one; one that finds none asks again
    /// when the batch came (`limits::spend_permit`); when it did not, each is admitted (an object
    /// that does not answer admits).
    fn wake_permit_waiters(&mut self, iso: u32, key: u32, came: bool) {
        let now_ms = self.ms();
        for w in self.permit_waiters.remove(&(iso, key)).unwrap_or_default() {
            let spent = self.spend_held(iso, key, now_ms);
            let r = &mut self.reqs[w as usize];
            match (spent, came) {
                (false, true) => {}
                _ => r.stage = Stage::View,
            }
            self.advance(w);
        }
    }

    /// Spends one of isolate `iso`'s permits of `key`, if it holds one.
    fn spend_held(&mut self, iso: u32, key: u32, now_ms: u64) -> bool {
        self.isolates[iso as usize]
            .permits
            .get_mut(&key)
            .and_then(|p| p.spend(now_ms))
            .is_some()
    }

    /// A batch asked for in the background came (or not).
    pub(super) fn permits_came(&mut self, iso: u32, key: u32, asked: u32, ok: bool) {
        self.permits_got(iso, key, asked, ok);
        self.wake_permit_waiters(iso, key, ok);
    }

    /// A call request `id` waits on.
    pub(super) fn blocking(&mut self, id: u32, obj: Obj, kind: Kind, statements: u64, timeout_ms: u64) {
        let r = &mut self.reqs[id as usize];
        r.blocking = r.blocking.saturating_add(1);
        let iso = r.iso;
        self.count_blocking(obj, kind);
        self.call(iso, obj, kind, statements, timeout_ms, Then::Req(id));
    }

    pub(super) fn count_blocking(&mut self, obj: Obj, kind: Kind) {
        if self.window.contains(self.now) {
            *self.totals.window_blocking.entry((obj.class(), kind)).or_default() += 1;
        }
    }

    /// The answer to a call request `id` waited on: the stage it was in goes on, or the request
    /// ends as the Worker ends it.
    pub(super) fn resume(&mut self, id: u32, ok: bool) {
        let now_ms = self.ms();
        let rpm_only = self.rpm_only(self.reqs[id as usize].key);
        let r = &mut self.reqs[id as usize];
        let (iso, key) = (r.iso, r.key);
        let account = r.account(self.p.keys_per_account);
        let isolate = &mut self.isolates[iso as usize];
        match r.stage {
            Stage::Key => {
                // D1 out of reach: the key as last read, for 10 minutes (any copy here is younger).
                // The read brings the account's balance too (`src/store.rs` `key_by_hash`): the
                // isolate's balance snapshot.
                if ok {
                    r.stage = Stage::Catalog;
                    let read = r.answered;
                    self.key_read(iso, key, read);
                } else if !isolate.keys.contains_key(&key) {
                    self.reqs[id as usize].settled = Settled::Unrecorded;
                    return self.refuse(id);
                } else {
                    r.stage = Stage::Catalog;
                }
            }
            Stage::Catalog => {
                if ok {
                    isolate.catalog_at = Some(r.answered.map_or(now_ms, |(at, _)| at));
                } else if isolate.catalog_at.is_none() {
                    return self.refuse(id);
                }
                r.stage = Stage::Limit;
            }
            Stage::Limit if r.asked > 0 && r.asked != u32::MAX => {
                // A batch of permits: one spent now.
                let asked = std::mem::replace(&mut r.asked, 0);
                self.permits_got(iso, key, asked, ok);
                let spent = self.spend_held(iso, key, now_ms);
                let r = &mut self.reqs[id as usize];
                // None spent: the batch came short (ask with `acquire`), or did not come (admitted).
                match (spent, ok) {
                    (false, true) => r.asked = u32::MAX,
                    _ => r.stage = Stage::View,
                }
                self.wake_permit_waiters(iso, key, ok);
            }
            Stage::Limit => {
                // An object that errs or is late admits (and, for a concurrency slot, is sent the
                // release at once). An `rpm`-only key holds no slot.
                r.key_slot = !rpm_only;
                r.stage = Stage::View;
            }
            Stage::Capacity => {
                r.cap_slot = ok;
                r.stage = Stage::Balance;
            }
            Stage::Balance if ok => r.stage = Stage::Hold,
            Stage::Hold if ok => {
                r.stage = Stage::Upstream;
                let ledger = self.ledger_of(id);
                self.read_balance(iso, account, ledger);
            }
            // D1 out of reach on the awaited path: 503 `storage_unavailable`.
            Stage::Balance | Stage::Hold => return self.refuse(id),
            _ => return,
        }
        self.advance(id);
    }

    /// A request refused before any attempt (503): its slots go back, its record (if its key was
    /// read) is settled.
    pub(super) fn refuse(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.refused = true;
        r.end_ms = self.now / 1_000;
        self.totals.refused += 1;
        self.close(id);
    }

    /// One of the two snapshots of `health::view` (`src/health.rs` `refresh`); true when the
    /// request may go on with it.
    pub(super) fn view_part(&mut self, id: u32, obj: Obj) -> bool {
        let now_ms = self.ms();
        let iso = self.reqs[id as usize].iso;
        let isolate = &mut self.isolates[iso as usize];
        let copy_at = isolate.snapshots.get(&obj).and_then(|s| s.fetched_ms);
        let step = isolate.flights.entry(obj).or_default().step(copy_at, now_ms, &SNAPSHOT);
        match step {
            Step::Fresh | Step::Stale | Step::Without => true,
            Step::Wait(ms) => {
                self.after_ms(ms, Ev::ViewPoll { req: id, obj });
                false
            }
            // A stale copy is refreshed in the background (`src/health.rs` `refresh`, both designs).
            Step::Fetch if copy_at.is_some() => {
                let then = Then::Snapshot { iso, obj, req: None };
                self.call(iso, obj, Kind::Snapshot, 0, HEALTH_TIMEOUT_MS, then);
                true
            }
            Step::Fetch => {
                let r = &mut self.reqs[id as usize];
                r.blocking = r.blocking.saturating_add(1);
                r.cold = true;
                self.count_blocking(obj, Kind::Snapshot);
                self.call(
                    iso,
                    obj,
                    Kind::Snapshot,
                    0,
                    HEALTH_TIMEOUT_MS,
                    Then::Snapshot {
                        iso,
                        obj,
                        req: Some(id),
                    },
                );
                false
            }
        }
    }

    pub(super) fn part_done(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.pending = r.pending.saturating_sub(1);
        if r.pending == 0 && r.stage == Stage::View {
            r.stage = Stage::Capacity;
            self.advance(id);
        }
    }

    /// The next attempt, on the first route of the isolate's plan not yet failed.
    pub(super) fn attempt(&mut self, id: u32) {
        let now_ms = self.ms();
        let r = &self.reqs[id as usize];
        let (iso, model) = (r.iso, r.model);
        let routes = &self.routes[model as usize];
        let view = self.view_obj(iso, model);
        let order = match self.isolates[iso as usize].snapshots.get(&view) {
            Some(snap) => snap.health.plan_order(routes, now_ms),
            None => ModelHealth::default().plan_order(routes, now_ms),
        };
        let next = order
            .iter()
            .map(|(i, _, _)| *i as u8)
            .find(|i| !r.fails.iter().any(|(f, _)| f == i));
        let Some(route) = next else {
            // Every route failed: unanswered.
            self.reqs[id as usize].end_ms = now_ms;
            return self.close(id);
        };
        let down = self.is_down(model, route, now_ms);
        let r = &mut self.reqs[id as usize];
        r.route = route;
        if down {
            self.after_ms(FAILED_ATTEMPT_MS, Ev::AttemptFailed(id));
        } else {
            r.stage = Stage::Streaming;
            let ms = self.rng.range(self.p.stream_ms.0, self.p.stream_ms.1) as u64;
            self.after_ms(ms, Ev::StreamEnd(id));
        }
    }

    pub(super) fn observation(&self, model: u32, route: u8, outcome: AttemptOutcome, at_ms: u64) -> Observation {
        let (route_id, account) = self.routes[model as usize]
            .get(route as usize)
            .cloned()
            .unwrap_or_default();
        Observation::at(&route_id, &account, outcome, at_ms)
    }

    /// `health::apply_local`: the outcome on the isolate's own snapshots at once.
    pub(super) fn apply_local(&mut self, iso: u32, model: u32, obs: &Observation) {
        let config = self.config;
        let scopes = match self.p.design {
            Design::Direct => vec![
                (Obj::Model(model), Some(Scope::Model)),
                (Obj::Accounts, Some(Scope::Accounts)),
            ],
            // One view, the accounts' breakers folded in.
            Design::Sharded => vec![(self.view_obj(iso, model), None)],
        };
        let isolate = &mut self.isolates[iso as usize];
        for (obj, scope) in scopes {
            let snap = isolate.snapshots.entry(obj).or_insert_with(|| Snap {
                health: ModelHealth::default(),
                fetched_ms: None,
            });
            match scope {
                Some(scope) => snap.health.observe_scoped(obs, &config, scope),
                None => snap.health.observe(obs, &config),
            }
        }
        self.note_demotion(iso);
    }

    pub(super) fn attempt_failed(&mut self, id: u32) {
        let now_ms = self.ms();
        let r = &mut self.reqs[id as usize];
        r.fails.push((r.route, now_ms));
        let (iso, model, route) = (r.iso, r.model, r.route);
        let obs = self.observation(model, route, AttemptOutcome::Failure(FailureClass::Connect), now_ms);
        self.apply_local(iso, model, &obs);
        self.attempt(id);
    }

    /// The answer ends; a stream on the route that went down meanwhile ends broken (a failure,
    /// after commit: not retried).
    pub(super) fn stream_end(&mut self, id: u32) {
        let now_ms = self.ms();
        let (model, route) = (self.reqs[id as usize].model, self.reqs[id as usize].route);
        let broken = self.is_down(model, route, now_ms);
        let r = &mut self.reqs[id as usize];
        r.end_ms = now_ms;
        let iso = r.iso;
        if broken {
            r.fails.push((route, now_ms));
        }
        let outcome = match broken {
            true => AttemptOutcome::Failure(FailureClass::Connect),
            false => AttemptOutcome::Success,
        };
        let obs = self.observation(model, route, outcome, now_ms);
        self.apply_local(iso, model, &obs);
        self.close(id);
    }

    /// Whether `route` of `model` is down at `now_ms` (the route-down drill).
    pub(super) fn is_down(&self, model: u32, route: u8, now_ms: u64) -> bool {
        model == 0 && route == 0 && self.p.route_down_at_ms.is_some_and(|at| now_ms >= at)
    }

    /// The answer is over: slots back, settlement and health report queued (`finish.rs` `close`).
    pub(super) fn close(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.stage = Stage::Closed;
        let (iso, key, model, key_slot, cap_slot, refused) = (r.iso, r.key, r.model, r.key_slot, r.cap_slot, r.refused);
        let (key_shard, cap_shard) = (r.key_shard, r.cap_shard);
        let urgent = !r.fails.is_empty();
        self.totals.finished += 1;
        if key_slot {
            self.call(
                iso,
                Obj::Key(key, key_shard),
                Kind::Release,
                0,
                RELEASE_TIMEOUT_MS,
                Then::Nothing,
            );
        }
        if cap_slot {
            self.call(
                iso,
                self.capacity_obj(model, cap_shard),
                Kind::Release,
                0,
                RELEASE_TIMEOUT_MS,
                Then::Nothing,
            );
        }
        if self.reqs[id as usize].settled == Settled::Open {
            let (which, item) = self.money_batch(iso, id, false);
            self.push(iso, which, item, false);
        }
        if refused {
            return;
        }
        let view = self.view_obj(iso, model);
        self.push(iso, Which::Report(view), id, urgent);
        if self.p.design == Design::Sharded {
            return; // the accounts' breakers are the shard's business
        }
        let observations = self.observations(id);
        let accounts = self.isolates[iso as usize]
            .snapshots
            .get(&Obj::Accounts)
            .map(|s| &s.health);
        if !for_accounts(&observations, accounts).is_empty() {
            self.push(iso, Which::Report(Obj::Accounts), id, urgent);
        }
    }

    /// A request's attempts as the core's observations.
    pub(super) fn observations(&self, id: u32) -> Vec<Observation> {
        let r = &self.reqs[id as usize];
        let mut all: Vec<Observation> = r
            .fails
            .iter()
            .map(|(route, at)| self.observation(r.model, *route, AttemptOutcome::Failure(FailureClass::Connect), *at))
            .collect();
        let answered = !r.refused && !r.fails.iter().any(|(route, _)| *route == r.route);
        if answered {
            all.push(self.observation(r.model, r.route, AttemptOutcome::Success, r.end_ms));
        }
        all
    }

    /// Whether isolate `iso` now sees the downed route demoted (first time only).
    pub(super) fn note_demotion(&mut self, iso: u32) {
        let Some(down_at) = self.p.route_down_at_ms else { return };
        let view = self.view_obj(iso, 0);
        let isolate = &mut self.isolates[iso as usize];
        if isolate.knows_down_ms.is_some() {
            return;
        }
        let demoted = isolate
            .snapshots
            .get(&view)
            .and_then(|s| s.health.routes.get("r0"))
            .is_some_and(|s| s.breaker.is_demoted());
        if demoted {
            isolate.knows_down_ms = Some((self.now / 1_000).max(down_at));
        }
    }
}
