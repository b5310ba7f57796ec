//! The book's locked versions: one lock around the whole market (table 6.2's "with lock"
//! rows, `purchase_item_with_lock`), and one lock per item (table 6.3).
//!
//! Each function is the check-then-write of the optimistic version with the `WATCH` taken
//! out: the lock keeps every other listing and purchase of the same item (or of the whole
//! market) out of the gap between the check and the `MULTI`/`EXEC`, so the transaction
//! cannot be aborted and nothing is ever retried. `#[redis_locked]` takes the lock before
//! the body, and releases it on every way out of it.
//!
//! Round trips per purchase: acquire (`SET NX PX GET`, 1) + `ZSCORE` and `HGET` pipelined
//! (1) + the transfer in `MULTI`/`EXEC` (1) + release (`EVALSHA`, 1) = 4. Per listing:
//! acquire, `SISMEMBER`, `MULTI`/`EXEC`, release = 4.
//!
//! # Funds
//!
//! The lock protects the item (or the market), not the buyer. Only purchases lower a
//! user's funds, and under the market lock they run one at a time; under item locks two
//! purchases by the same buyer of two different items could both pass the funds check.
//! The simulation gives each buyer task its own users, so a user's purchases never overlap;
//! an application whose users can buy from several processes at once should also lock the
//! buyer (`users:{buyer_id}`) or `WATCH` the buyer's hash inside the lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::fenced::{FencedScript, RedisStore};
use lock_core::{redis_locked, Locker};
use redis::aio::MultiplexedConnection;

use crate::model::{item_member, Keys};
use crate::steps::{
    add_purchase_reads, check_list_replies, check_purchase_replies, list_transaction,
    purchase_refusal, purchase_transaction, ListArgs, PurchaseArgs, PurchaseReads, PurchaseReplies,
};
use crate::{Listing, MarketError, Purchase};

/// A marketplace whose operations run under locks.
///
/// Cheap to clone and safe to share between tasks: the lock-protected code needs no
/// per-connection state (no `WATCH`), so one multiplexed connection can carry every task's
/// commands. The [`Locker`]'s prefix decides where the locks live; use
/// [`Keys::lock_prefix`] to keep them beside the data.
#[derive(Clone)]
pub struct LockedMarket {
    conn: MultiplexedConnection,
    keys: Keys,
    locker: Locker,
    body_clock: Option<Arc<BodyClock>>,
    /// Fenced mode: the writes go through guarded scripts carrying the lease's token.
    fenced: Option<Arc<Fenced>>,
}

impl std::fmt::Debug for LockedMarket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockedMarket")
            .field("keys", &self.keys)
            .field("locker", &self.locker)
            .finish_non_exhaustive()
    }
}

impl LockedMarket {
    /// A marketplace on `conn` for the data and `locker` for the locks.
    pub fn new(conn: MultiplexedConnection, keys: Keys, locker: Locker) -> LockedMarket {
        LockedMarket {
            conn,
            keys,
            locker,
            body_clock: None,
            fenced: None,
        }
    }

    /// Fenced mode: every listing and purchase writes in one guarded script
    /// (`lock_core::fenced`) that applies only if the lease's fencing token is at least the
    /// highest its lock's writes have carried, instead of `MULTI`/`EXEC`. The locker must draw
    /// tokens (`LockerBuilder::fencing(true)`). Same round trips; what the guard costs is the
    /// difference between a fenced row and the plain one.
    pub fn with_fencing(mut self) -> Result<LockedMarket, MarketError> {
        self.fenced = Some(Arc::new(Fenced {
            store: RedisStore::from_connection(self.conn.clone()),
            purchase: FencedScript::new(PURCHASE)?,
            list: FencedScript::new(LIST)?,
        }));
        Ok(self)
    }

    /// Adds the time every purchase spends inside its lock to `clock`, so that a caller who
    /// also times whole calls can tell how much of a purchase the lock costs.
    pub fn with_body_clock(mut self, clock: Arc<BodyClock>) -> LockedMarket {
        self.body_clock = Some(clock);
        self
    }

    /// The keys this marketplace works on.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The locker its locks are taken on.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }
}

/// Lists an item under the market lock (the book's `list_item` wrapped in
/// `acquire_lock(conn, 'market:')`).
#[redis_locked(key = "market:", ttl = "10s", wait = "5s", locker = market.locker)]
pub async fn list_item_market_lock(
    market: &LockedMarket,
    item_id: u64,
    seller_id: u64,
    price: i64,
) -> Result<Listing, MarketError> {
    list_unprotected(market, item_id, seller_id, price).await
}

/// Buys an item under the market lock: the book's `purchase_item_with_lock`.
#[redis_locked(key = "market:", ttl = "10s", wait = "5s", locker = market.locker)]
pub async fn purchase_item_market_lock(
    market: &LockedMarket,
    buyer_id: u64,
    item_id: u64,
    seller_id: u64,
    price: i64,
) -> Result<Purchase, MarketError> {
    purchase_unprotected(market, buyer_id, item_id, seller_id, price).await
}

/// Lists an item under its own lock (table 6.3): listings and purchases of other items go
/// on in parallel.
#[redis_locked(key = "market:{item_id}", ttl = "10s", wait = "5s", locker = market.locker)]
pub async fn list_item_item_lock(
    market: &LockedMarket,
    item_id: u64,
    seller_id: u64,
    price: i64,
) -> Result<Listing, MarketError> {
    list_unprotected(market, item_id, seller_id, price).await
}

/// Buys an item under its own lock (table 6.3).
#[redis_locked(key = "market:{item_id}", ttl = "10s", wait = "5s", locker = market.locker)]
pub async fn purchase_item_item_lock(
    market: &LockedMarket,
    buyer_id: u64,
    item_id: u64,
    seller_id: u64,
    price: i64,
) -> Result<Purchase, MarketError> {
    purchase_unprotected(market, buyer_id, item_id, seller_id, price).await
}

/// The listing's check and write. Correct only while a lock keeps other writers of the
/// item out.
async fn list_unprotected(
    market: &LockedMarket,
    item_id: u64,
    seller_id: u64,
    price: i64,
) -> Result<Listing, MarketError> {
    let args = ListArgs {
        item_id,
        seller_id,
        price,
    };
    let mut conn = market.conn.clone();
    let owned: bool = redis::cmd("SISMEMBER")
        .arg(market.keys.inventory(seller_id))
        .arg(item_id)
        .query_async(&mut conn)
        .await?;
    if !owned {
        return Ok(Listing::NotInInventory);
    }
    let replies: Option<(i64, i64)> = match &market.fenced {
        Some(fenced) => Some(fenced_list(fenced, &market.keys, &args).await?),
        None => {
            list_transaction(&market.keys, &args)
                .query_async(&mut conn)
                .await?
        }
    };
    let Some(replies) = replies else {
        return Err(MarketError::Data(
            "a listing transaction without WATCH was aborted".into(),
        ));
    };
    check_list_replies(replies, &args)?;
    Ok(Listing::Listed)
}

/// The purchase's check and write. Correct only while a lock keeps other writers of the
/// item out (see the module docs about funds).
async fn purchase_unprotected(
    market: &LockedMarket,
    buyer_id: u64,
    item_id: u64,
    seller_id: u64,
    price: i64,
) -> Result<Purchase, MarketError> {
    let args = PurchaseArgs {
        buyer_id,
        item_id,
        seller_id,
        price,
    };
    let started = Instant::now();
    let result = purchase_checked_write(market, &args).await;
    if let Some(clock) = &market.body_clock {
        clock.add(started.elapsed());
    }
    result
}

async fn purchase_checked_write(
    market: &LockedMarket,
    args: &PurchaseArgs,
) -> Result<Purchase, MarketError> {
    let args = *args;
    let mut conn = market.conn.clone();
    let mut pipe = redis::pipe();
    add_purchase_reads(&mut pipe, &market.keys, &args);
    let reads: PurchaseReads = pipe.query_async(&mut conn).await?;
    if let Some(refusal) = purchase_refusal(reads, &args)? {
        return Ok(refusal);
    }
    let replies: Option<PurchaseReplies> = match &market.fenced {
        Some(fenced) => Some(fenced_purchase(fenced, &market.keys, &args).await?),
        None => {
            purchase_transaction(&market.keys, &args)
                .query_async(&mut conn)
                .await?
        }
    };
    let Some(replies) = replies else {
        return Err(MarketError::Data(
            "a purchase transaction without WATCH was aborted".into(),
        ));
    };
    check_purchase_replies(replies, &args)?;
    Ok(Purchase::Bought)
}

/// Fenced mode's store and scripts.
struct Fenced {
    store: RedisStore,
    purchase: FencedScript,
    list: FencedScript,
}

/// The purchase's writes under the guard: KEYS the guarded resource (not written), the
/// seller, the buyer, the buyer's inventory, the market; ARGV the price, the item, its
/// listing. The same replies as [`purchase_transaction`].
const PURCHASE: &str = "return {redis.call('HINCRBY', KEYS[2], 'funds', ARGV[1]), \
     redis.call('HINCRBY', KEYS[3], 'funds', -tonumber(ARGV[1])), \
     redis.call('SADD', KEYS[4], ARGV[2]), redis.call('ZREM', KEYS[5], ARGV[3])}";

/// The listing's writes under the guard: KEYS the guarded resource, the market, the
/// seller's inventory; ARGV the price, the listing, the item. The replies of
/// [`list_transaction`].
const LIST: &str = "return {redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2]), \
     redis.call('SREM', KEYS[3], ARGV[3])}";

/// The lease of the `#[redis_locked]` function this runs in: its token fences the writes.
fn current_fence() -> Result<lock_core::LeaseHandle, MarketError> {
    lock_core::current_lease().ok_or_else(|| {
        MarketError::Config("a fenced write ran outside a #[redis_locked] function".into())
    })
}

async fn fenced_purchase(
    fenced: &Fenced,
    keys: &Keys,
    args: &PurchaseArgs,
) -> Result<PurchaseReplies, MarketError> {
    let lease = current_fence()?;
    let guarded = keys.guarded(lease.name());
    let (seller, buyer, inventory, market) = (
        keys.user(args.seller_id),
        keys.user(args.buyer_id),
        keys.inventory(args.buyer_id),
        keys.market(),
    );
    let member = item_member(args.item_id, args.seller_id);
    let replies = fenced
        .store
        .eval(
            &lease,
            &fenced.purchase,
            &[&guarded, &seller, &buyer, &inventory, &market],
            &[args.price.to_string(), args.item_id.to_string(), member],
        )
        .await?;
    Ok(replies)
}

async fn fenced_list(
    fenced: &Fenced,
    keys: &Keys,
    args: &ListArgs,
) -> Result<(i64, i64), MarketError> {
    let lease = current_fence()?;
    let guarded = keys.guarded(lease.name());
    let (market, inventory) = (keys.market(), keys.inventory(args.seller_id));
    let member = item_member(args.item_id, args.seller_id);
    let replies = fenced
        .store
        .eval(
            &lease,
            &fenced.list,
            &[&guarded, &market, &inventory],
            &[args.price.to_string(), member, args.item_id.to_string()],
        )
        .await?;
    Ok(replies)
}

/// Total time spent inside lock-protected purchase bodies, and how many ran.
#[derive(Debug, Default)]
pub struct BodyClock {
    nanos: AtomicU64,
    count: AtomicU64,
}

impl BodyClock {
    fn add(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Mean time of one body, if any ran.
    pub fn mean(&self) -> Option<Duration> {
        let count = self.count.load(Ordering::Relaxed);
        (count > 0).then(|| Duration::from_nanos(self.nanos.load(Ordering::Relaxed) / count))
    }

    /// Number of bodies timed.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}
