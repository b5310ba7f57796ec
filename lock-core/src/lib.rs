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
//!   [`OnLost::Cancel`] are the opt-ins.
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
//!   error), and [`LockRequest::hold_at_least`] keeps the lock until a minimum time from
//!   the start even when the job ended sooner (the release sets what is left of it as the
//!   key's TTL, by the server's clock, instead of deleting the key), so replicas whose
//!   clocks fire a little later skip the same tick. The TTL bounds a dead replica's hold;
//!   renewal keeps a live one's, and `max_hold` caps a hung one.
//!   `#[redis_locked(hold_at_least = "5m")]` and `lockctl run --hold-at-least 5m` do the
//!   same; `examples/scheduled-jobs` runs four replicas with offset timers.
//! - **One leader, watched by all** (etcd's election API, Kubernetes' lease election):
//!   [`Locker::election`] gives an [`Election`]. [`Election::campaign`] waits in FIFO order
//!   (the lock's waiter queue) until this process leads, and returns a [`Leadership`]: its
//!   term (the election lock's fencing token, strictly increasing), renewed in the
//!   background, with [`Leadership::lost`] and [`Leadership::is_leader`] (false by the
//!   local clock once the lease has run out, so a leader resumed after a pause knows before
//!   acting; hand the term to stores that refuse stale writers). [`Leadership::resign`]
//!   announces the end and hands leadership to the next candidate at once.
//!   [`Election::leader`] reads who leads (label, term, since when by the server's clock),
//!   and [`Election::observe`] follows every change once and in order over pub/sub.
//!   Elections need one Redis (or Sentinel, a Cluster) with scripts, or memory.
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
//! - **No deadlock**: every lock has a TTL, so a crashed holder's lock frees itself.
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
//! stampede it. Two queues keep them in order:
//!
//! - **In a `Locker`**, waiters queue in FIFO order and only the head talks to Redis; while a
//!   lease of the same locker holds the name, the head waits for its local release signal.
//! - **Across `Locker`s** (processes), on one Redis, Sentinel or a Cluster with Lua scripts,
//!   the head stands in the lock's waiter queue in Redis, and is told when its turn comes.
//!
//! The waiter queue, step by step:
//!
//! 1. A request first tries a plain `SET key value NX PX ttl GET`: when nobody holds the lock
//!    that is the whole acquisition (no script, no queue, and its release is a
//!    compare-and-delete of one key and one argument that publishes nothing). A `Locker`
//!    that queued for the name in the last 200 ms skips this try and queues at once (step
//!    2 takes a free lock too): under contention the try is a call that always fails.
//! 2. If the lock is busy and the request may wait, its `Locker` subscribes to a channel of
//!    its own (`<prefix>waiters:<16 random hex digits>`, once per `Locker`), then runs the
//!    queued attempt: one script that takes the lock if it is free and nobody is queued
//!    ahead, claims it if it is reserved for this `Locker`, or else adds the `Locker` to the
//!    queue (a sorted set `<prefix>{N}:q` in arrival order, by the server's clock; the
//!    member is the channel's hex digits and the holder label), and marks the holder's
//!    value as listened for (a `~` in front of it; token, label and TTL unchanged).
//!    Finding the lock busy, joining the queue and marking are one atomic step, so no
//!    release can slip between them.
//! 3. Releasing hands the lock to the head of the queue in one step: the head leaves the
//!    queue and the key takes the value `?<its member>` for a claim window of 100 ms (so a
//!    newcomer's `SET NX` fails: nobody barges past the queue), marked if others wait; the
//!    head's `Locker` is told `g` on its channel, and the next one in line `s` (standby: its
//!    turn if the head has not claimed the lock when the window ends). The head claims the
//!    lock with the queued attempt (a `GET` and a `SET` of its own value and TTL, marked if
//!    the reservation was). A release of an unmarked value is a bare compare-and-delete
//!    (`GET`, `DEL`: four Redis calls per uncontended cycle, as a lock without a queue);
//!    only a marked one looks at the queue and the release channel. `lockctl watch` marks
//!    the value too, so that the release it watches for is announced. About 17 Redis calls
//!    per contended acquisition, inner calls of the scripts included (a try that fails is
//!    saved, the queued attempt is about 6, the release with its hand-over 8, the claim 3).
//! 4. Timers cover what no message announces: the head sleeps until the holder's TTL runs
//!    out (a crashed holder) or its safety-net pause (0.5 s growing to 5 s, for a turn
//!    message lost while the pub/sub connection stayed up) ends, whichever is first; the
//!    next in line until the claim window (or the holder's TTL plus one window) ends, the
//!    rest until a safety-net pause; none past its own deadline.
//!
//! Failure cases, all with tests against real `redis-server` processes:
//!
//! - A waiter that dies, is paused (SIGSTOP, a GC pause) or is cut from Redis while queued
//!   is skipped: when its turn comes nobody claims it, and the next in line takes over one
//!   claim window later (the queue keeps no per-entry expiry: a waiter that died while
//!   queued costs the line that one window, once; the queue key itself expires after the
//!   longest wait of its waiters). A request that times out (or is dropped, at any point: with its queued attempt in flight, or
//!   together with its `Locker`'s other requests for the name) leaves the queue and passes
//!   on a reservation it did not claim, unless another request of its `Locker` still waits
//!   for the name and keeps the place. A new request of that `Locker` queues only once
//!   that leave has landed, so the leave cannot take the new request's place.
//! - A holder that crashes: the head wakes at the holder's TTL and takes the lock. If the
//!   head is gone too, the next one takes over one claim window later, or at its safety net.
//! - Lost messages (the pub/sub connection dropped, `CLIENT KILL`, a restart): every waiter
//!   of the `Locker` is woken and looks again; a server restarted empty forgets the queue and
//!   the waiters simply queue again. None of this touches mutual exclusion, which rests on
//!   the lock key alone: a reservation is never anyone's lease.
//!
//! On Redlock every master keeps the lock's queue, ordered not by its own clock but by each
//! waiting request's ticket, the same on every master: when the request began waiting, on
//! the masters' clock (each `Locker` measures its clock's offset to the masters with `TIME`,
//! takes the median over the masters and measures again every 10 s). Redlock waiters are
//! served in the order they began waiting, whatever their clients' clocks say; requests
//! that began within a few milliseconds of each other (half a round trip to the masters,
//! plus the masters' own clock drift over 10 s) may be served in either order. The
//! masters agree on who is next: the masters agree on who is next, a release reserves the lock for the same
//! head on each, and that head (told on its channel by every master that reserved it; a
//! `Locker` listens on each master) claims it with one queued attempt on every master,
//! granted only on a majority within the validity time, as any Redlock acquisition. A head
//! that claims fewer than a majority (a release that reached a master after its claim)
//! gives back what it claimed and keeps its place by its ticket. A client whose clock is
//! seconds off is neither starved nor favoured, and clock differences never touch mutual
//! exclusion. Only the masters' clocks matter, through the median: a majority of masters
//! whose clocks disagree by seconds shifts every client's tickets alike.
//!
//! Where there is no queue: WATCH/MULTI (no scripts) announces every release on
//! `<prefix>{N}:released`, and its waiters subscribe to it (every waiting process wakes at
//! each release). A `Locker` built from a pool has no pub/sub connection
//! and polls, unless the builder is given a client for it (`pubsub_client`). On Sentinel,
//! the pub/sub connection asks the Sentinels for the master whenever it connects, and
//! follows it across a failover. Mixing kinds of `Locker` on one lock is safe. WATCH/MULTI
//! and queued `Locker`s also tell each other: a WATCH/MULTI waiter marks the holder's value,
//! so that its release is announced on the release channel, and a WATCH/MULTI release of a
//! marked value hands the lock to the queue's head as the release script does. A polling
//! `Locker` learns of the others' releases only from its timers.
//!
//! # Deployments and what they guarantee
//!
//! - **One Redis**: everything above, as long as the server keeps its data. A server that
//!   restarts empty (or a failover to a replica that had not yet received the lock) can let
//!   a second client in while the first still believes it holds the lock; fencing tokens
//!   are reset too. Use fencing-aware storage or Redlock where that matters.
//! - **Redlock** (N masters): a lock needs a majority; it keeps working with a minority
//!   down and fails cleanly ([`LockError::NoQuorum`]) with a majority down. The validity is
//!   TTL minus the time the acquisition took minus a drift allowance (1% + 2 ms). **Delayed
//!   restart rule**: a node that crashed must stay down for at least the longest TTL in use
//!   (or run with `appendfsync always`), otherwise it can vote for a second holder.
//!   Fencing tokens are the maximum over a majority, written back to a majority before the
//!   lease is granted, so they increase across successive holders while nodes keep their
//!   data; they are not a consensus protocol.
//! - **Cluster**: each lock lives in one slot (hash tag), so it has the guarantees of one
//!   Redis per shard; resharding is followed transparently.
//! - **Sentinel**: like one Redis; connections follow the master the Sentinels name (a
//!   connect is checked with them again once open, and their `+switch-master` retires
//!   connections to the deposed master).
//! - **Replicas** (Sentinel, Cluster, one master with replicas): replication is
//!   asynchronous, so a grant the master did not pass on before it died is lost in the
//!   failover. The replica acknowledgement check ([`ReplicaSync`], on by default where the
//!   master has replicas) counts an acquisition or extension only once `WAIT` reports that
//!   enough replicas have it; a deposed master, whose replicas left it, therefore grants
//!   nothing. An acknowledged write is still lost if every replica that has it fails too.
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
//! Five layers, each importing only from those below it: the **facade** (`Locker`, its
//! builder, `LockRequest`, `Lease`, the primitives, `web`), the **engine** a Locker's clones
//! share (acquisition, waiting, renewal, the local hand-off), the **backends** (Lua scripts
//! on one Redis or a Cluster, WATCH/MULTI, Redlock, memory), the **connections** (the
//! multiplexed connection, the notifier, TLS) and the **leaves** (keys, tokens, durations,
//! errors). `lock().await` goes facade → `engine::acquire` → `Backend::acquire` → one `SET
//! NX PX` on the shared connection, and comes back as a `Lease` holding the engine and the
//! lease's state. The repository's `lock-core/ARCHITECTURE.md` draws the layers, says which
//! file to open for what, and follows one acquisition and one release step by step.
//!
//! # Web handlers
//!
//! With the `axum` feature (or `tower` for any tower service), [`web`] guards HTTP handlers:
//! `#[redis_locked]` on an axum handler, or a `LockLayer` on a route, so that two requests
//! for the same order never run at once across all replicas. A busy lock answers 409 with
//! `Retry-After`, since `LockError` implements axum's `IntoResponse`.
//!

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
mod prims;
mod redact;
mod refusal;
mod replication;
mod request;
mod schedule;
mod signal;
mod slot;
mod token;
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
pub use holder::Holder;
pub use key::{KeyLayout, NAME_ESCAPE};
pub use lease::{Lease, LeaseHandle};
pub use limits::{MAX_NAME_LEN, MAX_TTL, MAX_WAIT, MIN_TTL};
pub use locker::{LockInfo, Locker};
pub use macro_support::{default_locker, set_default_locker};
pub use prims::{
    GuardHandle, HoldMode, MultiLease, MultiRequest, Permit, PermitHolder, PermitHolders,
    PermitRequest, RwLease, RwLock, RwRequest, Semaphore, MAX_PERMITS,
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
