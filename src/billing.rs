//! Holds and settlement in D1 (SPEC §11), and each isolate's balance snapshots for the fast path.
//!
//! A request holds its maximum cost before the first attempt. On the awaited path that is one
//! atomic statement (`… WHERE balance - held >= amount`), so concurrent requests never overspend.
//! On the fast path (ample balance, a fresh snapshot, within `optimistic_hold_fraction`) the same
//! hold is written without waiting, from `ctx.wait_until`, [`FAST_HOLD_DEFER_MS`] after admission,
//! with the isolate's other fast holds of the next 200 ms in one D1 batch ([`HOLD_BATCH`]) — unless
//! the request settled first. Settlement carries the fast hold's row either way and settles it
//! whether or not the row was written (core `settlement::Books`), so it never waits for the write.
//! Settlement releases the hold, charges the delivered usage, adds the ledger row and deletes the
//! hold row, guarded by the hold being unsettled so settling twice charges once; an isolate's
//! settlements within a few milliseconds share one D1 batch. Every D1 write here has a deadline: a
//! settlement D1 keeps refusing, or does not answer in time, goes to the outbox (`outbox.rs`)
//! within [`SETTLE_WITHIN_MS`], which replays it when D1 is back. Expired holds are swept by cron.
//!
//! A busy ledger's settlements and fast holds go to its desks instead (SPEC §22, `crate::desk`):
//! each isolate keeps the ledger's pace (core `desks::Pace`) from the counter every balance read
//! and every settlement batch brings back, and while the pace calls for desks a request's hold
//! names the desk its items go to, in the isolate's batch for that desk ([`DESK_BATCH`]). A desk
//! that does not take them within its deadline (twice) leaves a settlement to be written here as
//! above, a fast hold to its settlement.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use switchyard_core::batch::{Batches, Rules};
use switchyard_core::billing::{hold_ttl_ms, plan_hold, BalanceSnapshot, HoldCandidate, HoldPlan};
use switchyard_core::catalog::Policy;
use switchyard_core::desks::{self, Pace};
use switchyard_core::generation::GenerationRecord;
use switchyard_core::ApiError;
use worker::{Context, Env};

use crate::batch::{self, Turn};
use crate::faults::{Faults, SettleBatch};
use crate::outbox;
use crate::runtime::apart::apart;
use crate::runtime::clock::{in_request, now_ms, sleep};
use crate::store::{HoldRow, KeyRecord, Settlement, Store, D1_DEADLINE_MS, SETTLEMENT_VERSION};

thread_local! {
    /// Per account: this isolate's last balance read and what it admitted on it since.
    static BALANCES: RefCell<HashMap<String, BalanceSnapshot>> = RefCell::new(HashMap::new());
    /// Per ledger: its pace as this isolate's reads of its settlement counter show it.
    static PACES: RefCell<HashMap<u8, Pace>> = RefCell::new(HashMap::new());
}

/// How a hold was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldPath {
    /// Admitted on the isolate's snapshot; the hold is written in the background.
    Fast,
    /// The atomic hold statement was awaited before the first attempt.
    Awaited,
}

impl HoldPath {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldPath::Fast => "fast",
            HoldPath::Awaited => "awaited",
        }
    }
}

/// How long a fast-path hold waits before it is written. Most non-stream answers settle sooner,
/// and their holds are never written. The fast path already lets other isolates miss this
/// isolate's recent holds for up to `balance_snapshot_ms`; this and [`HOLD_BATCH`]'s wait add at
/// most a quarter of a second.
pub const FAST_HOLD_DEFER_MS: u64 = 50;
/// How an isolate's fast holds are batched: core `batch::FAST_HOLDS` (200 ms, at most 64).
const HOLD_BATCH: Rules = switchyard_core::batch::FAST_HOLDS;

thread_local! {
    static FAST_HOLDS: RefCell<Batches<FastHold>> = RefCell::new(Batches::default());
}

/// A placed hold: which routes it covers, and (fast path) its row, which may not be written yet.
/// The amount lives in the `holds` row; settlement releases it from there.
pub struct Hold {
    pub keep: Vec<usize>,
    pub path: HoldPath,
    /// The most the request may be charged.
    pub amount: i64,
    fast: Option<FastHold>,
    /// The ledger's desk its fast hold and settlement go to: (ledger, desk name).
    desk: Option<(u8, Rc<str>)>,
}

/// A fast-path hold: its row, and whether its settlement has taken it (a hold settled before its
/// batch is sent is left out of it: never written).
#[derive(Clone)]
struct FastHold {
    row: Rc<HoldRow>,
    settled: Rc<Cell<bool>>,
}

/// What a request's hold is for.
pub struct HoldRequest<'a> {
    pub key: &'a KeyRecord,
    pub generation_id: &'a str,
    /// The plan's candidate routes: (index, price).
    /// Each candidate route with its prices and what its priced tools add (SPEC §21).
    pub candidates: &'a [HoldCandidate<'a>],
    /// The input tokens held for: the body's, or the context window (SPEC §17).
    pub input_tokens: u64,
    /// The output limit held for.
    pub max_tokens: u64,
    pub policy: &'a Policy,
    /// When the request arrived, before its key was looked up. The key's copy let it in fresh at
    /// that moment, and the balance that copy brought is judged at the same moment: waiting for
    /// its body or for capacity does not send a request to the awaited path (SPEC §11).
    pub arrived_ms: u64,
}

/// Places the hold for a request, or refuses it with 402.
pub async fn place_hold(env: &Env, ctx: &Context, request: &HoldRequest<'_>) -> Result<Hold, ApiError> {
    let HoldRequest {
        key,
        generation_id,
        candidates,
        input_tokens,
        max_tokens,
        policy,
        arrived_ms,
    } = *request;
    if key.spend_limit_reached() {
        return Err(ApiError::SpendLimitReached);
    }
    // A key with a spend limit always takes the awaited path: the limit is checked in the same
    // atomic statement as the balance, with the key's open holds (SPEC §11).
    let may_go_fast = !key.has_spend_limit();
    let account = key.account_id.as_str();
    let now = now_ms();
    let expires_at = now.saturating_add(hold_ttl_ms(policy));
    // The key's read brought the account's balance: as good a snapshot as a balance read then.
    if let Some(available) = key.available_micros {
        learn(account, available as i64, key.read_at_ms);
    }
    if let Some(total) = key.ledger_settled {
        note_pace(key.ledger, total as u64, key.read_at_ms);
    }
    let desk = desk_of(key.ledger, policy);

    // Fast path: a fresh snapshot with room within the optimistic fraction.
    let fast = BALANCES.with(|s| {
        if !may_go_fast {
            return None;
        }
        let mut s = s.borrow_mut();
        let snap = s.get_mut(account)?;
        if !snap.fresh(arrived_ms, policy) {
            return None;
        }
        match plan_hold(snap.available - snap.admitted, candidates, input_tokens, max_tokens) {
            HoldPlan::Hold { amount, keep } if snap.admit_fast(amount, arrived_ms, policy) => Some((amount, keep)),
            _ => None,
        }
    });
    if let Some((amount, keep)) = fast {
        let row = Rc::new(HoldRow {
            account: account.to_string(),
            key_id: key.id.clone(),
            generation_id: generation_id.to_string(),
            amount,
            now,
            expires_at,
        });
        let fast = FastHold {
            row,
            settled: Rc::new(Cell::new(false)),
        };
        let (deferred, env, ledger, to) = (fast.clone(), env.clone(), key.ledger, desk.clone());
        ctx.wait_until(async move {
            sleep(FAST_HOLD_DEFER_MS).await;
            if in_request() && !deferred.settled.get() {
                match to {
                    Some((ledger, desk)) => {
                        let _ = to_desk(&env, ledger, &desk, DeskItem::Hold(deferred.clone())).await;
                    }
                    None => write_fast_hold(&env, ledger, &deferred).await,
                }
            }
            // Until it is written (or settled), the account's next balance read cannot see it: it
            // is carried into that snapshot (SPEC §18).
            BALANCES.with(|s| {
                if let Some(snap) = s.borrow_mut().get_mut(&deferred.row.account) {
                    snap.written(deferred.row.amount);
                }
            });
        });
        return Ok(Hold {
            keep,
            path: HoldPath::Fast,
            amount,
            fast: Some(fast),
            desk,
        });
    }

    // Awaited path (compiled when an isolate first needs it: `runtime::apart`).
    apart(place_awaited(env, ctx, request, now, expires_at, desk)).await
}

/// [`place_hold`]'s awaited path: read the balance, plan, hold atomically; once more if the
/// balance moved.
async fn place_awaited(
    env: &Env,
    ctx: &Context,
    request: &HoldRequest<'_>,
    now: u64,
    expires_at: u64,
    desk: Option<(u8, Rc<str>)>,
) -> Result<Hold, ApiError> {
    let (key, generation_id) = (request.key, request.generation_id);
    let account = key.account_id.as_str();
    let store = Store::new(env)?.ledger(key.ledger)?;
    for _ in 0..3 {
        // D1 out of reach: a clear 503 before anything is held or charged (SPEC §11).
        let (available, settled) = store
            .available(account)
            .await
            .map_err(|_| ApiError::StorageUnavailable)?
            .ok_or(ApiError::Internal {
                label: "key_account_missing",
            })?;
        remember(account, available, now_ms());
        if let Some(total) = settled {
            note_pace(key.ledger, total, now_ms());
        }
        let HoldPlan::Hold { amount, keep } =
            plan_hold(available, request.candidates, request.input_tokens, request.max_tokens)
        else {
            return Err(ApiError::InsufficientBalance);
        };
        let hold = HoldRow {
            account: account.to_string(),
            key_id: key.id.clone(),
            generation_id: generation_id.to_string(),
            amount,
            now,
            expires_at,
        };
        let placed = store.hold_atomic(&hold).await.inspect_err(|_| {
            // The statement may have been applied with its reply lost: the request ends without a
            // hold, so whatever D1 holds for it is released by its id, once D1 answers again.
            let (env, id, ledger) = (env.clone(), generation_id.to_string(), key.ledger);
            ctx.wait_until(async move {
                for backoff_ms in [1_000, 4_000, 10_000] {
                    sleep(backoff_ms).await;
                    if !in_request() {
                        return;
                    }
                    if let Ok(store) = Store::new(&env).and_then(|s| s.ledger(ledger)) {
                        if store.release_lost_hold(&id).await.is_ok() {
                            return;
                        }
                    }
                }
            });
        });
        if let Some(after) = placed.map_err(|_| ApiError::StorageUnavailable)? {
            remember(account, after, now_ms());
            return Ok(Hold {
                keep,
                path: HoldPath::Awaited,
                amount,
                fast: None,
                desk: desk.clone(),
            });
        }
        if key.has_spend_limit() && store.spend_limit_refuses(&key.id, amount).await? {
            return Err(ApiError::SpendLimitReached);
        }
    }
    Err(ApiError::InsufficientBalance)
}

/// Writes a fast hold's row with the isolate's others of the next moments for its account's
/// ledger, in one D1 batch ([`HOLD_BATCH`]; `Store::hold_fast`) of those not settled by the time
/// it is sent. A batch D1 refused rejoins the next one, twice at most; then the row is left to its
/// settlement, which settles the hold unwritten.
async fn write_fast_hold(env: &Env, ledger: u8, hold: &FastHold) {
    let write = |holds: Vec<FastHold>| async move {
        let rows: Vec<HoldRow> = holds
            .iter()
            .filter(|h| !h.settled.get())
            .map(|h| (*h.row).clone())
            .collect();
        if rows.is_empty() {
            return true;
        }
        match Store::new(env).and_then(|s| s.ledger(ledger)) {
            Ok(store) => store.hold_fast(&rows).await.is_ok(),
            Err(_) => false,
        }
    };
    let outcome = batch::run(
        &FAST_HOLDS,
        &ledger.to_string(),
        hold.clone(),
        false,
        &HOLD_BATCH,
        write,
    )
    .await;
    let alone_failed = match outcome.alone {
        Some(row) => !write(vec![row]).await,
        None => false,
    };
    if alone_failed || !outcome.given_up.is_empty() {
        worker::console_error!(
            "{{\"event\":\"fast_hold_write_failed\",\"rows\":{},\"fallback\":\"settlement\"}}",
            outcome.given_up.len() + usize::from(alone_failed)
        );
    }
}

/// Takes a read of `ledger`'s settlement counter into this isolate's pace of it.
fn note_pace(ledger: u8, total: u64, read_at: u64) {
    PACES.with(|p| p.borrow_mut().entry(ledger).or_default().read(total, read_at));
}

/// The desk this isolate sends `ledger`'s items to while its pace calls for desks under `policy`
/// (core `desks`): (ledger, its name).
fn desk_of(ledger: u8, policy: &Policy) -> Option<(u8, Rc<str>)> {
    let count = PACES.with(|p| {
        p.borrow_mut()
            .get_mut(&ledger)
            .map_or(0, |pace| pace.desks(policy.desk_from_per_s))
    });
    if count == 0 {
        return None;
    }
    let n = desks::pick(crate::runtime::ids::isolate_seed(), count);
    Some((ledger, desks::name(ledger, n).into()))
}

/// An item for a ledger's desk (`crate::desk`).
#[derive(Clone)]
enum DeskItem {
    Settle(Box<Settlement>),
    Hold(FastHold),
}

/// How an isolate's items for a desk are batched: core `batch::DESK_ITEMS` (20 ms, at most 64).
const DESK_BATCH: Rules = switchyard_core::batch::DESK_ITEMS;

thread_local! {
    static DESK_ITEMS: RefCell<Batches<DeskItem>> = RefCell::new(Batches::default());
}

/// Hands `item` to desk `desk` of `ledger` with the isolate's others for it of the next moments
/// (holds settled meanwhile left out); returns the items no desk took (the caller's fallback's).
async fn to_desk(env: &Env, ledger: u8, desk: &str, item: DeskItem) -> Vec<DeskItem> {
    let send = |items: Vec<DeskItem>| async move {
        let (mut settlements, mut holds) = (Vec::new(), Vec::new());
        for item in items {
            match item {
                DeskItem::Settle(s) => settlements.push(*s),
                DeskItem::Hold(h) if !h.settled.get() => holds.push((*h.row).clone()),
                DeskItem::Hold(_) => {}
            }
        }
        if settlements.is_empty() && holds.is_empty() {
            return true;
        }
        let charged: Vec<(String, i64)> = settlements
            .iter()
            .map(|s| (s.record.key_id.clone(), s.record.total_cost_micros))
            .collect();
        match crate::desk::keep(env, ledger, desk, settlements, holds).await {
            Ok(counter) => {
                if let Some((total, at)) = counter {
                    note_pace(ledger, total, at);
                }
                for (key_id, micros) in charged {
                    Store::note_spend(&key_id, micros);
                }
                true
            }
            Err(_) => false,
        }
    };
    let outcome = batch::run(&DESK_ITEMS, desk, item, false, &DESK_BATCH, send).await;
    let mut back = outcome.given_up;
    if let Some(item) = outcome.alone {
        if !send(vec![item.clone()]).await {
            back.push(item);
        }
    }
    let holds = back.iter().filter(|i| matches!(i, DeskItem::Hold(_))).count();
    if holds > 0 {
        worker::console_error!("{{\"event\":\"desk_hold_failed\",\"rows\":{holds},\"fallback\":\"settlement\"}}");
    }
    back
}

/// Remembers a balance read at `read_at` unless the isolate's snapshot of the account is as new.
fn learn(account: &str, available: i64, read_at: u64) {
    let newer = BALANCES.with(|s| s.borrow().get(account).is_some_and(|b| b.read_at_ms >= read_at));
    if !newer {
        remember(account, available, read_at);
    }
}

fn remember(account: &str, available: i64, now: u64) {
    BALANCES.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() > 4096 {
            s.clear();
        }
        let next = match s.get(account) {
            Some(old) => old.renewed(available, now),
            None => BalanceSnapshot::new(available, now),
        };
        s.insert(account.to_string(), next);
    });
}

/// Waits before each settlement try: at once, then twice more if D1 refused the batch — while
/// the try can still end within [`SETTLE_WITHIN_MS`].
const SETTLE_BACKOFF_MS: [u64; 3] = [0, 100, 400];
/// A settlement is in D1, or being handed to the outbox, within this of its start (SPEC §22): every
/// D1 write has its deadline ([`D1_DEADLINE_MS`]), a try that could not end in time is not made,
/// and the outbox's own call has a deadline of 5 s — 20 s in all, inside the 30 s `waitUntil`
/// gives a settlement after its response, however slowly D1 answers.
const SETTLE_WITHIN_MS: u64 = 15_000;
/// How an isolate's settlements are batched: core `batch::SETTLEMENTS` (10 ms, at most 64).
const SETTLE_BATCH: Rules = switchyard_core::batch::SETTLEMENTS;

thread_local! {
    static SETTLEMENTS: RefCell<Batches<Settlement>> = RefCell::new(Batches::default());
}

/// Settles a request: releases the hold (a fast one's row with it, written or not), charges
/// `record.total_cost_micros`, writes the ledger row, and keeps the record (`crate::records`).
/// Runs inside `ctx.wait_until`. Settlements of the same isolate share one D1 batch
/// ([`SETTLE_BATCH`]): the first one queued waits and writes them all; the others wait on their
/// own timers until it is written. A batch D1 refused rejoins the queue and is written with the
/// next one 200 ms later (`batch::run`), at most three times, then goes to the outbox; a rider
/// whose writer's task died writes its own alone. The batch is one transaction.
pub async fn settle(env: Env, faults: Faults, hold: Option<Hold>, record: GenerationRecord) {
    // The record is kept apart from the books (SPEC §22): once the settlement is written (so a
    // record that shows its cost shows a cost already charged), or after at most
    // [`RECORD_AFTER_MS`] while D1 is slow — never held up by the money for long.
    let (settled, written) = futures_channel::oneshot::channel::<()>();
    let copy = record.clone();
    let money = async {
        // A request refused before a hold (a 4xx, a limit) has nothing to charge or release: no
        // D1 batch, only its record.
        if hold.is_some() {
            settle_money(&env, faults, hold, record).await;
        }
        let _ = settled.send(());
    };
    let kept = async {
        let _ = futures_util::future::select(written, std::pin::pin!(sleep(RECORD_AFTER_MS))).await;
        crate::records::keep(&env, faults, copy).await;
    };
    futures_util::future::join(money, kept).await;
}

/// The longest a record waits for its settlement before it is kept anyway.
const RECORD_AFTER_MS: u64 = 2_000;

/// The money half of [`settle`].
async fn settle_money(env: &Env, faults: Faults, hold: Option<Hold>, record: GenerationRecord) {
    let started = now_ms();
    // A fast hold's row goes with its settlement, written or not: settled either way, once.
    let unwritten = hold.as_ref().and_then(|h| h.fast.as_ref()).map(|fast| {
        fast.settled.set(true);
        (*fast.row).clone()
    });
    let desk = hold.as_ref().and_then(|h| h.desk.clone());
    let item = Settlement {
        version: SETTLEMENT_VERSION,
        record,
        has_hold: hold.is_some(),
        unwritten,
    };
    if let Some((ledger, desk)) = desk {
        // What no desk took is written from here, as any settlement.
        for item in to_desk(env, ledger, &desk, DeskItem::Settle(Box::new(item))).await {
            if let DeskItem::Settle(item) = item {
                settle_alone(env, faults, &item, started).await;
            }
        }
        return;
    }
    let SettleBatch {
        key,
        rules,
        writer_dies,
    } = faults.settle_batch(&item.record.account_id, &item.record.model, SETTLE_BATCH);
    if writer_dies {
        // The drill's writer dies with the batch in hand (tests only): its riders must not lose
        // theirs.
        match batch::gather(&SETTLEMENTS, &key, item, false, &rules).await {
            Turn::Lead(lead) => worker::console_log!(
                "{{\"event\":\"drill_settlement_writer_died\",\"items\":{}}}",
                lead.items.len()
            ),
            Turn::Alone(item) => settle_alone(env, faults, &item, started).await,
            Turn::Done => {}
        }
        return;
    }
    let outcome = batch::run(
        &SETTLEMENTS,
        &key,
        item,
        false,
        &rules,
        |items: Vec<Settlement>| async move { write(env, &items).await },
    )
    .await;
    if let Some(item) = outcome.alone {
        settle_alone(env, faults, &item, started).await;
    }
    // D1 refused their batches `max_sends` times: the outbox takes them.
    for item in &outcome.given_up {
        defer(env, faults, item).await;
    }
}

/// A settlement that could not be written from where it was polled (no I/O there, see
/// `clock::in_request`): queued for the isolate's next settlement to write with its own.
pub fn leave(hold: Option<Hold>, record: GenerationRecord) {
    crate::records::leave(record.clone());
    if hold.is_none() {
        return;
    }
    let unwritten = hold
        .as_ref()
        .and_then(|h| h.fast.as_ref())
        .map(|fast| (*fast.row).clone());
    let item = Settlement {
        version: SETTLEMENT_VERSION,
        record,
        has_hold: hold.is_some(),
        unwritten,
    };
    batch::leave(&SETTLEMENTS, "", item);
}

/// Writes one settlement (begun at `started`) in its own batch, with retries while they can end
/// within [`SETTLE_WITHIN_MS`]; then the outbox. A failed batch may still have been applied (the
/// reply was lost, or came after the deadline): retrying is safe because the batch charges only
/// while the hold is there, and deletes it.
async fn settle_alone(env: &Env, faults: Faults, item: &Settlement, started: u64) {
    for backoff_ms in SETTLE_BACKOFF_MS {
        let ends_by = now_ms().saturating_sub(started) + backoff_ms + D1_DEADLINE_MS;
        if ends_by > SETTLE_WITHIN_MS {
            break;
        }
        if backoff_ms > 0 {
            sleep(backoff_ms).await;
        }
        if write(env, std::slice::from_ref(item)).await {
            return;
        }
    }
    defer(env, faults, item).await;
}

/// Writes `items` in one D1 batch (one transaction) and, when D1 took it, counts their charges
/// against their keys' spend in this isolate; true when written.
async fn write(env: &Env, items: &[Settlement]) -> bool {
    let parts: Vec<_> = items.iter().map(Settlement::parts).collect();
    let written = match Store::new(env) {
        Ok(store) => store.settle(&parts).await.ok(),
        Err(_) => None,
    };
    let Some(paces) = written else { return false };
    let now = now_ms();
    for (ledger, total) in paces {
        note_pace(ledger, total, now);
    }
    for item in items {
        Store::note_spend(&item.record.key_id, item.record.total_cost_micros);
    }
    true
}

/// Hands a settlement D1 would not take to the outbox, which replays it when D1 is back (exactly
/// once: every money statement is guarded by the hold being unsettled).
async fn defer(env: &Env, faults: Faults, item: &Settlement) {
    let record = &item.record;
    if outbox::keep(env, faults, item).await {
        worker::console_error!(
            "{{\"event\":\"settlement_deferred\",\"generation_id\":{:?},\"charge_micros\":{}}}",
            record.id,
            record.total_cost_micros
        );
    } else {
        // Not even the outbox took it: the hold stays open until the sweep; logged for
        // reconciliation.
        worker::console_error!(
            "{{\"event\":\"settle_failed\",\"generation_id\":{:?},\"charge_micros\":{}}}",
            record.id,
            record.total_cost_micros
        );
    }
}

/// Releases expired holds in every ledger (the cron trigger, and `POST /admin/holds/sweep`); a
/// ledger that fails does not stop the others (the error is returned after them).
pub async fn sweep(env: &Env) -> Result<usize, ApiError> {
    let (mut swept, mut failed) = (0, None);
    for ledger in Store::new(env)?.ledgers()? {
        match ledger.sweep_expired_holds(now_ms()).await {
            Ok(n) => swept += n,
            Err(e) => failed = Some(e),
        }
    }
    if swept > 0 {
        worker::console_log!("{{\"event\":\"holds_swept\",\"count\":{swept}}}");
    }
    failed.map_or(Ok(swept), Err)
}

/// The retention run (SPEC §22, core `rollup`): week-old charges into hourly totals, five-week-old
/// hours into days, then old `settled` marks and `generations` rows deleted. From the cron
/// trigger, after the sweep. Each ledger in turn; one that fails does not stop the others.
pub async fn roll_up(env: &Env) -> Result<(), ApiError> {
    let mut failed = None;
    for store in Store::new(env)?.ledgers()? {
        if let Err(e) = retain(&store).await {
            failed = Some(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// One ledger's retention run (see [`roll_up`]).
async fn retain(store: &Store) -> Result<(), ApiError> {
    let (charges, days) = store.roll_up_ledger(now_ms()).await?;
    if charges + days > 0 {
        worker::console_log!("{{\"event\":\"ledger_rolled_up\",\"charges\":{charges},\"hourly_totals\":{days}}}");
    }
    let (marks, generations, checks) = store.forget_old(now_ms()).await?;
    if marks + generations + checks > 0 {
        worker::console_log!(
            "{{\"event\":\"retention\",\"settled_marks\":{marks},\"generation_rows\":{generations},\"route_checks\":{checks}}}"
        );
    }
    Ok(())
}
