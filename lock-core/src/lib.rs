//! Distributed locks on Redis: "only one of these at a time, across all my processes".
//!
//! A [`Locker`] takes named locks with a TTL, waits for them up to a deadline, extends,
//! inspects and releases them; a [`Lease`] is the guard of one held lock. The same API runs
//! on:
//!
//! - one Redis with Lua scripts (the default; [`ScriptMode::Functions`] loads them as a
//!   Redis Functions library instead),
//! - one Redis with WATCH/MULTI transactions only ([`Protocol::Transactions`], for servers
//!   or proxies where scripting is disabled),
//! - N independent masters with Redlock ([`LockerBuilder::redlock`]),
//! - a Redis Cluster (`LockerBuilder::cluster`, feature `cluster`) or the master Redis
//!   Sentinel names (`LockerBuilder::sentinel`, feature `sentinel`),
//! - or in process ([`Locker::memory`], for tests and single-process apps).
//!
//! `#[redis_locked(key = "market:{item_id}", ttl = "10s")]` (feature `macros`, on by
//! default) runs an `async fn` under a lock with none of the boilerplate; `ttl`, `wait` and
//! `hold_at_least` take a string checked at compile time or a `Duration` expression
//! (`ttl = LOCK_TTL`, `ttl = Duration::from_secs(n)`) checked at each call.
//!
//! # Cargo features
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `macros` | yes | the `#[redis_locked]` attribute (re-exported from `lock-macros`) |
//! | `cluster` | no | `LockerBuilder::cluster`: locks on a Redis Cluster (redis-rs `cluster-async`) |
//! | `sentinel` | no | `LockerBuilder::sentinel`: locks on the master Redis Sentinel names, followed across failovers |
//! | `tls-rustls` | no | `rediss://` over rustls (ring), and [`TlsConfig`] for a private CA, a client certificate and the server name |
//! | `metrics` | no | counters and histograms through the `metrics` facade (see [`metrics`]) |
//! | `tower` | no | [`web`]: `LockLayer`, a tower layer that guards HTTP (or gRPC) routes, and RFC 9457 problem responses for `LockError` |
//! | `axum` | no | `tower`, plus `LockError: axum::response::IntoResponse` and lock keys from path parameters |
//! | `postgres` | no | `fenced::PgStore`: guarded writes to PostgreSQL (tokio-postgres, deadpool-postgres) |
//!
//! Items that need a feature are marked with it on docs.rs.
//!
//! ```
//! use lock_core::Locker;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! // In production: Locker::from_url("redis://127.0.0.1:6379/")? or Locker::from_env()?
//! let locker = Locker::memory();
//!
//! let lease = locker.lock("market:item-17").ttl(Duration::from_secs(10)).await?;
//! // ... read, check and write what the lock protects ...
//! assert!(lease.release().await?);
//! # Ok(())
//! # }
//! ```
//!
//! # Semaphores, read-write locks, multi-locks
//!
//! Beyond "one at a time", with the same leases (TTL by the server's clock, `auto_renew`,
//! `lost()`, `release()`, release on drop) and herd-free FIFO waiting:
//!
//! - [`Locker::semaphore`]: **at most N at once** ("at most 5 exports across the fleet").
//!   Each holder has a [`Permit`]; a crashed holder's permit comes back at its TTL.
//! - [`Locker::rwlock`]: **many readers or one writer** ("readers of the catalog never see
//!   a half-written update"). A waiting writer holds back later readers, so a stream of
//!   readers cannot starve it.
//! - [`Locker::latch`]: **wait until N processes are done** (a countdown latch): every
//!   waiter woken by one message when it opens, and a TTL per round so that a round whose
//!   counting process died expires and its waiters are told so ([`Latch`]).
//! - [`Locker::lock_all`]: **several locks at once, all or nothing** ("lock buyer, seller and
//!   item together"), the very locks [`Locker::lock`] takes, as one [`MultiLease`]; two
//!   multi-locks never deadlock, whatever their order.
//!
//! ```
//! use lock_core::Locker;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let locker = Locker::memory();
//!
//! let export = locker.semaphore("exports", 5).acquire().auto_renew().await?;
//! let read = locker.rwlock("catalog").read().ttl(Duration::from_secs(10)).await?;
//! let trade = locker.lock_all(["buyer:7", "seller:3", "item:17"]).await?;
//! # drop((export, read, trade));
//! # Ok(())
//! # }
//! ```
//!
//! | | one Redis | Cluster | Redlock | WATCH/MULTI | memory |
//! |---|---|---|---|---|---|
//! | semaphore, read-write lock | yes (one script per step) | yes (one hash tag per name) | no: N permits per node do not bound a majority's holders to N | no: needs scripts | yes |
//! | multi-lock | yes, one script | yes, one by one in key order with give-back | yes, likewise | yes, likewise | yes, likewise |
//!
//! Where a primitive is not available, its requests fail with [`LockError::Config`] saying
//! why. `#[redis_locked]` takes `permits = N`, `mode = "read"|"write"` and `keys = [..]`.
//! # Defaults
//!
//! One table for every entry point. Each default is chosen for how that entry point is used;
//! the locker's `default_ttl` and `default_wait` ([`LockerBuilder`]) change the "locker's"
//! values, and every entry point takes its own `ttl` / `wait` / renewal setting.
//!
//! | use | entry point | TTL | wait for a busy lock | renewal | lease lost while the work runs |
//! |---|---|---|---|---|---|
//! | business function | `#[redis_locked]` | locker's (30 s) | locker's (10 s) | on | result stands, loss reported |
//! | closure | [`Locker::using`], [`LockRequest::using`] | locker's (30 s) | locker's (10 s) | on | result stands, loss reported |
//! | HTTP handler | `#[redis_locked]` on an axum handler, `LockLayer` | locker's (30 s) | none: 409 with `Retry-After` at once | on | response stands, loss reported |
//! | imperative | [`Locker::lock`] | locker's (30 s) | locker's (10 s) | off ([`LockRequest::auto_renew`]) | the holder watches [`LeaseHandle::lost`] |
//! | try once | [`Locker::try_lock`] | given | none | off | the holder watches [`LeaseHandle::lost`] |
//! | scheduled run | [`LockRequest::run_once`], `#[redis_locked(hold_at_least = "..")]` | locker's (30 s); minimum hold: none unless given | none: the tick is skipped ([`Tick::Skipped`], `Err(Busy)` from the macro) | on | result stands, loss reported |
//! | leader election | [`Election::campaign`] | the election's lease, 15 s ([`Election::lease`]) | until elected (FIFO) | on (every 5 s) | [`Leadership::is_leader`] turns false, [`Leadership::lost`] fires |
//!
//! Why:
//!
//! - **Wait.** A business call queues behind a holder doing the same short work: 10 s (the
//!   book's `acquire_timeout`) is long enough for that and short enough to fail visibly. An
//!   HTTP request does not wait: holding the client's connection and a server slot while
//!   another request works helps nobody; it is told 409 with a `Retry-After` and decides
//!   itself. `#[redis_locked]` treats a function as a handler when one of its parameters is
//!   an axum extractor (`State<..>`, `Path<..>`, `Json<..>`, `Query<..>`, `Form<..>`,
//!   `Extension<..>`, `HeaderMap`, ...); `wait = ".."` overrides it either way.
//! - **Redis down.** The wait is for a holder, not for Redis: a request that waits gives up
//!   with [`LockError::Connection`] once Redis has not answered for the locker's
//!   [`unreachable_timeout`](LockerBuilder::unreachable_timeout) (2 s), so an outage is an
//!   error within seconds, not a stall for the whole wait; a server that refuses the
//!   client's settings (no or wrong password, no such database) is
//!   [`LockError::Misconfigured`] at once. A campaign keeps standing in line.
//! - **Renewal.** Where the lock's scope is the work (an annotated function, a closure, a
//!   request), the lease is renewed while the work runs, so slow work never shares its lock,
//!   and the TTL only bounds how long a crashed holder blocks others. A [`Lease`] from
//!   `lock()` lives as long as its holder keeps it, so renewal is opt-in there: the TTL is
//!   the bound on a lease forgotten in a hung task.
//! - **A lost lease** ([`OnLost`]): where the library runs the work, a finished work's result
//!   stands and the loss is reported (a warning, the `lock_lost_total` metric, `is_lost()`
//!   on the lease the work sees): turning finished work into an error invites a retry that
//!   does it twice. `on_lost = "error"` / [`OnLost::Error`] and `"cancel"` /
//!   [`OnLost::Cancel`] are the opt-ins. A lock's key deleted, overwritten, evicted or
//!   flushed by someone else is reported within milliseconds on one Redis, Sentinel or a
//!   Cluster that allows key tracking ([`LockerBuilder::track_keys`], on), not only at the
//!   next renewal.
//! - **The server's eviction policy** is checked at the first acquisition and after each
//!   reconnect: a Redis that could evict lock keys is warned about once
//!   ([`EvictionCheck::Warn`]); [`EvictionCheck::Refuse`] makes it an error.
//! - **Scheduled runs and elections.** A replica whose timer finds the tick taken has nothing
//!   to wait for: the tick ran elsewhere, so `run_once` and `hold_at_least` functions skip at
//!   once. A candidate has nothing better to do than wait, so a campaign waits until
//!   elected. The election's 15 s lease is Kubernetes' `leaseDuration`: a dead leader is
//!   replaced within 15 s, and a leader renews three times per lease.
//!
//! # Scheduled jobs and leader election
//!
//! - **Once per tick across a fleet** (ShedLock's model): [`LockRequest::run_once`] runs a
//!   job unless another replica holds the tick ([`Tick::Ran`] / [`Tick::Skipped`], not an
//!   error), and [`LockRequest::hold_at_least`] keeps the lock until a minimum time from the
//!   start, so replicas whose clocks fire a little later skip the same tick.
//! - **One leader, watched by all** (etcd's election API, Kubernetes' lease election):
//!   [`Election::campaign`] waits in FIFO order until this process leads and returns a
//!   [`Leadership`] with its term (strictly increasing: hand it to stores that refuse stale
//!   writers), [`Leadership::lost`] and [`Leadership::is_leader`]; [`Leadership::resign`]
//!   hands over at once; [`Election::leader`] and [`Election::observe`] tell who leads.
//!   Elections need one Redis (or Sentinel, a Cluster) with scripts, or memory.
//!
//! The repository's `docs/guide/elections-and-schedules.md` has the details.
//!
//! ```
//! use lock_core::{Locker, LockError, Tick};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LockError> {
//! let locker = Locker::memory();
//! let tick = locker
//!     .lock("jobs:digest")
//!     .hold_at_least(Duration::from_secs(50))
//!     .run_once(|_| async { Ok::<_, LockError>(12) })
//!     .await?;
//! assert_eq!(tick, Tick::Ran(12));
//!
//! let leadership = locker.election("scheduler").campaign().await?;
//! assert!(leadership.is_leader());
//! leadership.resign().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **Mutual exclusion**: a lock is taken with `SET key value NX PX ttl`; while a lease is
//!   valid nobody else can take its lock.
//! - **Only the holder releases or extends**: each acquisition draws a fresh 128-bit token
//!   from the OS random generator; release and extend compare it inside Redis before they
//!   touch the key. A holder whose lease expired gets `false` from `release` and leaves the
//!   next holder's lock alone.
//! - **No deadlock**: every lock has a TTL, so a crashed holder's lock frees itself; a
//!   request that waits while its task holds other locks of the Locker (taken with
//!   `lock()`, `using` or `#[redis_locked]`) and would close a cycle of waiters, of up to
//!   [`MAX_WAIT_CHAIN`] locks, across processes, fails at once with
//!   [`LockError::Deadlock`] (one Redis, Sentinel, one Cluster slot, in memory).
//! - **Overruns are visible**: [`LeaseHandle::is_lost`] and [`LeaseHandle::lost`] tell a holder
//!   when its local validity (TTL minus a clock-drift margin) ran out.
//! - **Fencing**: with [`LockRequest::fencing`] each acquisition also draws a number that
//!   strictly increases per lock name (across a server restarted empty, a flush and a
//!   failover too: it is drawn from the server's clock when the counter is lost), and
//!   [`fenced`] enforces it where the data is: guarded writes to Redis (and PostgreSQL,
//!   feature `postgres`) that refuse a holder paused past its TTL once a newer holder wrote.
//! - **Cancellation**: dropping an acquire or a lease deletes the lock in the background;
//!   the TTL covers the cases where that cannot run.
//! - **Bad input is an error, never a panic nor a false "acquired"**: empty or oversized
//!   names, TTLs out of range, a non-string value on the lock key (WRONGTYPE), an unreachable
//!   server or a malformed URL each have their [`LockError`].
//!
//! # Waiting
//!
//! A blocked request does not poll, and separate processes waiting for one lock do not
//! stampede it. In a `Locker`, waiters queue in FIFO order and only the head talks to Redis.
//! Across `Locker`s (processes), on one Redis, Sentinel or a Cluster with Lua scripts, the
//! head stands in the lock's waiter queue in Redis: a release hands the lock to the head in
//! one step (reserved for it for a 100 ms claim window, so nobody barges past the queue) and
//! tells only that waiter, on its `Locker`'s own channel. A waiter that died or froze is
//! skipped after one claim window; the head wakes at a crashed holder's TTL. On Redlock every
//! master keeps the queue, ordered by when each request began waiting on the masters' clock,
//! so a client whose clock is off is neither starved nor favoured. WATCH/MULTI announces
//! every release to every waiter; a `Locker` built from a pool without a `pubsub_client`
//! polls. Mutual exclusion rests on the lock key alone: a reservation is never anyone's lease.
//! The protocol step by step, its failure cases and what each costs are in the repository's
//! `docs/guide/how-it-works.md`.
//!
//! # Deployments and what they guarantee
//!
//! - **One Redis**: everything above, as long as the server keeps its data. A server that
//!   restarts empty can let a second client in while the first still believes it holds the
//!   lock, and resets fencing tokens.
//! - **Redlock** (N masters): a majority is needed; a minority down is tolerated, a majority
//!   down fails with [`LockError::NoQuorum`]. A node that crashed must stay down for at least
//!   the longest TTL in use (or run with `appendfsync always`).
//! - **Cluster**: each lock lives in one slot (hash tag), with the guarantees of one Redis
//!   per shard; resharding is followed.
//! - **Sentinel**: like one Redis; connections follow the master the Sentinels name.
//! - **Replicas**: the replica acknowledgement check ([`ReplicaSync`], on by default where
//!   the master has replicas) counts a grant only once `WAIT` reports that enough replicas
//!   have it, so a failover does not lose it unless every replica that has it fails too.
//!
//! Each deployment's details and caveats are in the repository's `docs/guide/deployments.md`;
//! the fault-injection results per deployment in `RELIABILITY.md`.
//!
//! # Keys
//!
//! A lock named `N` lives at `<prefix>{N}` (default prefix `lock:`), its fencing counter at
//! `<prefix>{N}:fence`, and its waiter queue, while someone waits, at `<prefix>{N}:q`; an
//! election named `N` keeps its record at `<prefix>{N}:leader` (and
//! announces it on a channel of that name). The braces are a Redis Cluster hash tag: every key of a lock shares a
//! slot, and no lock name can collide with another lock's keys. Any name works, whatever
//! bytes it and the prefix hold: a name that begins with `}` (its hash tag would be empty,
//! and Redis would hash each key whole) or with a NUL byte is stored after a NUL byte, and a
//! prefix whose first `{` is directly followed by `}` gets a NUL byte between them;
//! [`KeyLayout`] computes the keys, for tools that read them.
//!
//! # Inside
//!
//! Five layers, each importing only from those below it: the facade (`Locker`, `Lease`, the
//! primitives, `web`), the engine (acquisition, waiting, renewal), the backends (Lua scripts,
//! WATCH/MULTI, Redlock, memory), the connections and the leaves (keys, tokens, errors). The
//! repository's `lock-core/ARCHITECTURE.md` draws them and says which file to open for what.
//!
//! # Web handlers
//!
//! With the `axum` feature (or `tower` for any tower service), [`web`] guards HTTP handlers:
//! `#[redis_locked]` on an axum handler, or a `LockLayer` on a route, so that two requests
//! for the same order never run at once across all replicas. A busy lock answers 409 with
//! `Retry-After`, since `LockError` implements axum's `IntoResponse`.
//!
//!
//! # Synchronous code
//!
//! [`blocking::Locker`] is the same API for code without async (`fn main`, `#[test]`, std
//! threads): each call blocks the calling thread, and a runtime on the locker's own thread
//! drives connections and renewals. Inside an async runtime its calls fail with
//! [`LockError::BlockingInAsync`] instead of blocking a worker.
//!
//! ```
//! # fn main() -> Result<(), lock_core::LockError> {
//! let locker = lock_core::blocking::Locker::memory()?;
//! let lease = locker.lock("reports:daily").acquire()?;
//! assert!(lease.release()?);
//! # Ok(())
//! # }
//! ```
//!
//! # Guides
//!
//! The repository's `docs/guide/` has a page per topic, with compiled examples: the API
//! tour and `#[redis_locked]` (`api.md`), semaphores, read-write locks and multi-locks
//! (`primitives.md`), lock-order deadlocks (`deadlocks.md`), scheduled jobs and elections
//! (`elections-and-schedules.md`), web handlers (`web.md`), `lockctl` (`lockctl.md`),
//! deployments, guarantees, how it works and what to watch in production.

// `web` exists only with the `tower` feature; without it, link to the docs.rs build (all features).
#![cfg_attr(feature = "tower", doc = "[`web`]: crate::web")]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`web`]: https://docs.rs/lock-core/latest/lock_core/web/index.html"
)]
#![cfg_attr(feature = "tls-rustls", doc = "[`TlsConfig`]: crate::TlsConfig")]
#![cfg_attr(
    not(feature = "tls-rustls"),
    doc = "[`TlsConfig`]: https://docs.rs/lock-core/latest/lock_core/struct.TlsConfig.html"
)]
// docs.rs (`--cfg docsrs`, nightly): mark every feature-gated item with its feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod backend;
pub mod blocking;
mod builder;
mod connection;
mod current;
mod cycle;
mod deadline;
mod defaults;
mod duration;
mod election;
mod engine;
mod error;
mod eviction;
mod fence;
pub mod fenced;
mod holder;
mod key;
mod lease;
mod limits;
mod locker;
mod macro_held;
mod macro_support;
pub mod metrics;
mod out_of_line;
mod prims;
mod redact;
mod refusal;
mod replication;
mod request;
mod schedule;
mod signal;
mod slot;
mod token;
mod undo;
mod using;
mod wait;
mod waits_for;
#[cfg(feature = "tower")]
pub mod web;

pub use backend::lua::ScriptMode;
pub use builder::{LockerBuilder, Protocol, DEFAULT_REDIS_URL, REDIS_URL_ENV};
#[cfg(feature = "tls-rustls")]
pub use connection::tls::TlsConfig;
pub use current::current_lease;
pub use cycle::DeadlockLink;
pub use duration::{parse_duration, DurationError};
pub use election::{Election, Leader, LeaderChange, Leadership, Observer};
pub use error::{LockError, WaitSetting};
pub use eviction::EvictionCheck;
pub use holder::Holder;
pub use key::{KeyLayout, NAME_ESCAPE};
pub use lease::{Lease, LeaseHandle};
pub use limits::{MAX_NAME_LEN, MAX_TTL, MAX_WAIT, MAX_WAIT_CHAIN, MIN_TTL};
pub use locker::{LockInfo, Locker};
pub use macro_support::{default_locker, set_default_locker};
pub use prims::{
    GuardHandle, HoldMode, Latch, LatchState, MultiLease, MultiRequest, Permit, PermitHolder,
    PermitHolders, PermitRequest, RwLease, RwLock, RwRequest, Semaphore, CAPACITY_PIN, MAX_PERMITS,
};
pub use replication::ReplicaSync;
pub use request::LockRequest;
pub use schedule::Tick;
pub use token::MAX_LABEL_LEN;
pub use using::{OnLost, UsingRequest};
pub use waits_for::{HoldingWaiter, WaitsFor};

#[cfg(feature = "macros")]
pub use lock_macros::redis_locked;

/// Re-exported so users can build a pool for [`Locker::from_pool`] without a version clash.
pub use deadpool_redis;

/// Support for code generated by `#[redis_locked]`. Not public API: anything here may change
/// in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::macro_support::{
        body, key_part, locker_of, run_locked, run_locked_result, AsLocker, FromLockError, KeyPart,
        LockSpec, LockedReturn,
    };
    /// See [`misconfiguration`].
    pub use crate::redact::redact_url;
    /// For lockctl, which shows URLs and refusals as this crate's errors do; not part of
    /// the API.
    pub use crate::refusal::misconfiguration;
    pub use crate::{LockError, Locker};
    pub use core::time::Duration;
    pub use std::format;
    pub use std::result::Result;
    pub use std::string::String;
    pub use std::vec::Vec;
}

/// The crate README's example, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The examples of `#[redis_locked]`'s documentation (lock-macros' `src/redis_locked.md`,
/// shown on the attribute and on the lock-macros crate), `compile_fail` ones included, run as
/// this crate's doctests: they use lock_core, and lock-macros (a proc-macro crate, its
/// doctests built for the host) runs none (`doctest = false`), so that it needs no
/// dev-dependency on lock-core. Read from the workspace: not in this crate's package.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../../lock-macros/src/redis_locked.md")]
struct MacroDoctests;

/// lock-macros' README example, for the same reason.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../../lock-macros/README.md")]
struct MacroReadmeDoctests;
