//! The deployment's stores and the calls they take: each Durable Object instance and the D1
//! database ([`Obj`]), their kinds for the report ([`Class`]), and the kinds of call ([`Kind`], the
//! counted kinds of `src/calls.rs`, roughly).

/// A store: one Durable Object instance or one D1 database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Obj {
    /// `model:<id>` (route breakers, buckets, capacity).
    Model(u32),
    /// `Design::Direct`: `accounts`, every upstream account's breaker, one for the deployment.
    Accounts,
    /// `Design::Sharded`: `account:<name>`, upstream account `n`'s breaker (called by the models'
    /// objects, and by an isolate only to claim a probe).
    Account(u32),
    /// A limited key's `LimitObject`: (key, shard) — shard 0 unless the key's slots are spread
    /// over several (`Design::Sharded`, core `key_shards`).
    Key(u32, u32),
    /// `Design::Sharded`: `capacity:<n>:<model>`, (model, shard) — a model's route capacity (a
    /// `LimitObject`), over core `capacity_shards` objects; in `Design::Direct` the model's object
    /// keeps it.
    Capacity(u32, u32),
    /// `status`: the public report.
    Status,
    /// `outbox-<n>`.
    Outbox(u32),
    /// `desk:<ledger>:<n>`: (ledger, n), a busy ledger's desk (core `desks`).
    Desk(u8, u32),
    /// `Design::Sharded`: health shard `k` of a model.
    Shard(u32, u32),
    /// `keys:<n>`: keyring `n` (core `keyrings`), which reads keys for the isolates.
    KeyRing(u32),
    /// D1 ledger `n` (`LEDGER_SHARDS`: 0 is the home database, which also keeps the catalog); an
    /// account's key, balance, holds and settlements are on its ledger.
    D1(u8),
}

/// The kind of store, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    Model,
    Accounts,
    KeyLimit,
    Capacity,
    Status,
    Outbox,
    Desk,
    Shard,
    KeyRing,
    D1,
}

impl Obj {
    pub fn class(self) -> Class {
        match self {
            Obj::Model(_) => Class::Model,
            Obj::Accounts | Obj::Account(_) => Class::Accounts,
            Obj::Key(..) => Class::KeyLimit,
            Obj::Capacity(..) => Class::Capacity,
            Obj::Status => Class::Status,
            Obj::Outbox(_) => Class::Outbox,
            Obj::Desk(..) => Class::Desk,
            Obj::Shard(..) => Class::Shard,
            Obj::KeyRing(_) => Class::KeyRing,
            Obj::D1(_) => Class::D1,
        }
    }

    /// The batch key `src/health.rs` uses (the object's name).
    pub fn name(self) -> String {
        match self {
            Obj::Model(m) => format!("model:m{m}"),
            Obj::Accounts => "accounts".to_string(),
            other => format!("{other:?}"),
        }
    }
}

/// What a call does (the counted kinds of `src/calls.rs`, roughly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Snapshot,
    Observe,
    Full,
    Acquire,
    Release,
    /// A batch of permits for an `rpm`-only key.
    Permits,
    StatusGet,
    D1Key,
    D1Catalog,
    D1Balance,
    D1HoldAtomic,
    D1HoldFast,
    D1Settle,
    /// A desk's flush: its settlements and fast holds in one D1 batch.
    D1Desk,
    Keep,
    /// An isolate's batch of items kept by a desk.
    DeskKeep,
    /// An isolate's read of a key from its keyring.
    KeyRead,
    /// An isolate's read of the catalog from its catalog keyring.
    CatalogRead,
}
