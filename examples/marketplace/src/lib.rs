//! The marketplace of *Redis in Action*, chapter 6, on `lock-core`: listers put items on a
//! market, buyers purchase them, and a simulation reproduces the book's tables 6.2 and 6.3.
//!
//! Three ways to protect the same check-then-write:
//!
//! | mode | module | the book |
//! |---|---|---|
//! | [`Mode::Watch`] | [`watch`]: optimistic `WATCH`/`MULTI`/`EXEC`, retried | "no lock" rows of table 6.2 |
//! | [`Mode::Market`] | [`locked`]: `#[redis_locked(key = "market:")]` | "with lock" rows (`purchase_item_with_lock`) |
//! | [`Mode::Item`] | [`locked`]: `#[redis_locked(key = "market:{item_id}")]` | table 6.3, fine-grained locks |
//!
//! # Data model
//!
//! As in the book, under a per-marketplace prefix ([`Keys`]): `market:` is a sorted set of
//! `<itemid>.<sellerid>` scored by price, `users:<id>` a hash with `name` and `funds`,
//! `inventory:<id>` a set of item ids.
//!
//! # Where the time goes
//!
//! A locked purchase costs four round trips to Redis:
//!
//! 1. acquire the lock: `SET <lock> <token> NX PX <ttl> GET` (one command);
//! 2. read the price and the funds: `ZSCORE` + `HGET`, pipelined;
//! 3. transfer: `MULTI`, `HINCRBY` ×2, `SADD`, `ZREM`, `EXEC`, one pipeline;
//! 4. release: one `EVALSHA` (compare the token, `DEL`, `PUBLISH` to wake waiters).
//!
//! The lock's share is the first and the last: two of four round trips, and on a local
//! Redis it measures as about half of a purchase's wait (the report's `lock %` column), no
//! more: the library adds nothing measurable beyond its two commands. An optimistic
//! purchase costs two round trips per attempt, but every listing and every other purchase
//! aborts it, so under contention it pays them many times over. See the crate's README for
//! measured tables.
//!
//! ```no_run
//! use lock_core::Locker;
//! use marketplace::{locked, Keys, LockedMarket, Purchase};
//!
//! # async fn demo() -> Result<(), marketplace::MarketError> {
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let conn = client.get_multiplexed_async_connection().await?;
//! let keys = Keys::new("demo:");
//! let locker = Locker::builder()
//!     .url("redis://127.0.0.1:6379/")
//!     .prefix(keys.lock_prefix())
//!     .build()?;
//! let market = LockedMarket::new(conn, keys, locker);
//! locked::list_item_item_lock(&market, 17, 4, 90).await?;
//! let outcome = locked::purchase_item_item_lock(&market, 8, 17, 4, 90).await?;
//! assert_eq!(outcome, Purchase::Bought);
//! # Ok(())
//! # }
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod book;
#[cfg(feature = "chart")]
pub mod chart;
pub mod checks;
mod error;
pub mod locked;
pub mod model;
mod outcome;
pub mod report;
pub mod sim;
mod steps;
pub mod watch;

pub use error::MarketError;
pub use locked::LockedMarket;
pub use model::{Keys, Seed};
pub use outcome::{Listing, Purchase, Tried};
pub use sim::{Mode, RowConfig, RowResult, Stop};
pub use watch::WatchMarket;
