//! Guarded writes: fencing tokens enforced where the data is, so that a holder paused past
//! its TTL (a GC pause, a stopped VM, a slow network) cannot overwrite a newer holder's
//! work. Facade layer.
//!
//! A lease protects nothing once its holder stops trusting the clock: it can see its lease
//! valid, freeze, and write after another process took the lock and wrote. Only the store
//! can refuse that write, by comparing a number that grows with every grant: the lease's
//! fencing token ([`LockRequest::fencing`](crate::LockRequest::fencing); tokens of a name
//! strictly increase, across restarts, flushes and failovers too, as its docs say).
//!
//! # The rule
//!
//! Every resource (a Redis key, a row) keeps a **guard**: the highest token a write to it
//! was accepted with, and the name of the lock whose tokens it compares. A guarded write
//! applies **only if its token is at least the guard's**, and raises the guard to it, in
//! the same script or statement as the write:
//!
//! - a token **above** the guard's is a newer holder: accepted, and the guard moves up, so
//!   every older holder is refused from now on;
//! - a token **equal** to it is the same lease writing again (tokens are never handed out
//!   twice): accepted, so one lease can write a resource many times;
//! - a token **below** it is a holder that a newer one has overtaken: refused with
//!   [`FenceError::Stale`], which names both tokens. Nothing is written;
//! - a token of **another lock** is refused with [`FenceError::OtherLock`]: the tokens of
//!   two locks are not comparable.
//!
//! A resource written for the first time accepts any token (there is nothing to be stale
//! against). Guards never expire: they must outlive every lease. Reads are not fenced:
//! re-read under a fresh lease after a refusal. A guard is exactly as durable as the data
//! beside it (same script, same replication): a failover that loses a write loses its guard
//! with it, never one without the other.
//!
//! A write and its guard change together or not at all: each guarded write is one Lua
//! script (Redis) or one statement (PostgreSQL), which the store applies whole. A write
//! dropped mid-flight (a timeout, a cancelled task) leaves the old value and guard or the
//! new ones, never one without the other.
//!
//! # Stores
//!
//! - **Redis** ([`RedisStore`]): `set`, `hset`, and `eval` of a script of yours under the
//!   guard, each one round trip; on the lock's own Redis ([`RedisStore::of`]), on any
//!   other, and on a Redis Cluster (a key and its guard must be in one slot: give keys a
//!   hash tag; checked before anything is sent).
//! - **PostgreSQL** (feature `postgres`, on tokio-postgres and deadpool-postgres):
//!   `PgStore`, whose `update` and `upsert` carry the check in the statement's `WHERE`
//!   (the statements below, with the table's own columns).
//! - **Anything else**: the same rule in your own statement. In SQL, with two columns per
//!   row:
//!
//! ```sql
//! ALTER TABLE inventory ADD COLUMN fence_token bigint, ADD COLUMN fence_lock text;
//!
//! -- $1 the new stock, $2 the lease's token, $3 its lock's name, $4 the item
//! UPDATE inventory SET stock = $1, fence_token = $2, fence_lock = $3
//!  WHERE item_id = $4
//!    AND (fence_token IS NULL OR (fence_token <= $2 AND fence_lock IS NOT DISTINCT FROM $3));
//!
//! INSERT INTO inventory (item_id, stock, fence_token, fence_lock) VALUES ($4, $1, $2, $3)
//! ON CONFLICT (item_id) DO UPDATE
//!    SET stock = EXCLUDED.stock, fence_token = EXCLUDED.fence_token, fence_lock = EXCLUDED.fence_lock
//!  WHERE inventory.fence_token IS NULL
//!     OR (inventory.fence_token <= EXCLUDED.fence_token
//!         AND inventory.fence_lock IS NOT DISTINCT FROM EXCLUDED.fence_lock);
//! ```
//!
//! 0 rows affected means refused (or, for the `UPDATE`, no such row): read the row's
//! `fence_token` to tell the holder why. Tokens are below 2^53, so a `bigint`, a JSON
//! number and a JavaScript `Number` hold them exactly.
//!
//! ```
//! use lock_core::fenced::Fence;
//! use lock_core::Locker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locker = Locker::memory();
//! let lease = locker.lock("stock:17").fencing().await?;
//! let first = Fence::of(&lease)?;
//! lease.release().await?;
//! let lease = locker.lock("stock:17").fencing().await?;
//! let second = Fence::of(&lease)?;
//! // The second holder's writes pass a guard that refuses the first holder's from then on.
//! assert!(second.token() > first.token());
//! # Ok(())
//! # }
//! ```

mod error;
mod fence;
#[cfg(feature = "postgres")]
mod postgres;
mod redis_store;

/// The PostgreSQL driver and pool [`PgStore`] is built on, re-exported so that a pool for
/// [`PgStore::new`] needs no version of its own (feature `postgres`).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use deadpool_postgres;
pub use error::FenceError;
pub use fence::{AsFence, Fence};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PgStore, PgTable};
pub use redis_store::{FencedScript, RedisStore};
