//! The three variants of `list_item` and `purchase_item`, one call at a time, against a
//! private redis-server: same outcomes, same effects; and the locked ones really lock.

use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;
use marketplace::model::seed;
use marketplace::{locked, Keys, Listing, LockedMarket, MarketError, Purchase, Seed, WatchMarket};
use redis::AsyncCommands as _;

/// Two users with 100 funds each; user 0 owns items 0 and 1, user 1 owns items 2 and 3.
const SEED: Seed = Seed {
    users: 2,
    items_per_user: 2,
    funds: 100,
};

/// One way to list and purchase, so the same script runs against each.
enum Variant {
    Watch(WatchMarket),
    Market(LockedMarket),
    Item(LockedMarket),
}

impl Variant {
    async fn list(&mut self, item: u64, seller: u64, price: i64) -> Result<Listing, MarketError> {
        match self {
            Variant::Watch(m) => m.list_item(item, seller, price).await.map(|t| t.outcome),
            Variant::Market(m) => locked::list_item_market_lock(m, item, seller, price).await,
            Variant::Item(m) => locked::list_item_item_lock(m, item, seller, price).await,
        }
    }

    async fn buy(
        &mut self,
        buyer: u64,
        item: u64,
        seller: u64,
        price: i64,
    ) -> Result<Purchase, MarketError> {
        match self {
            Variant::Watch(m) => m
                .purchase_item(buyer, item, seller, price)
                .await
                .map(|t| t.outcome),
            Variant::Market(m) => {
                locked::purchase_item_market_lock(m, buyer, item, seller, price).await
            }
            Variant::Item(m) => {
                locked::purchase_item_item_lock(m, buyer, item, seller, price).await
            }
        }
    }
}

async fn setup(
    server: &RedisServer,
    name: &str,
) -> (redis::aio::MultiplexedConnection, Keys, Locker) {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys = Keys::new(format!("{name}:"));
    seed(&mut conn, &keys, &SEED).await.unwrap();
    let locker = Locker::builder()
        .url(server.url())
        .prefix(keys.lock_prefix())
        .build()
        .unwrap();
    (conn, keys, locker)
}

async fn funds(conn: &mut redis::aio::MultiplexedConnection, keys: &Keys, user: u64) -> i64 {
    conn.hget(keys.user(user), "funds").await.unwrap()
}

#[tokio::test]
async fn every_variant_lists_and_sells_the_same_way() {
    let server = RedisServer::start();
    for name in ["watch", "market", "item"] {
        let (mut conn, keys, locker) = setup(&server, name).await;
        let market = LockedMarket::new(conn.clone(), keys.clone(), locker);
        let mut variant = match name {
            "watch" => Variant::Watch(WatchMarket::new(
                redis::Client::open(server.url())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
                keys.clone(),
            )),
            "market" => Variant::Market(market),
            _ => Variant::Item(market),
        };

        // Only the owner's inventory holds the item.
        assert_eq!(
            variant.list(2, 0, 30).await.unwrap(),
            Listing::NotInInventory,
            "{name}"
        );
        assert_eq!(
            variant.list(1, 0, 30).await.unwrap(),
            Listing::Listed,
            "{name}"
        );
        assert_eq!(
            variant.list(1, 0, 30).await.unwrap(),
            Listing::NotInInventory,
            "{name}"
        );
        let listed: Option<f64> = conn.zscore(keys.market(), "1.0").await.unwrap();
        assert_eq!(listed, Some(30.0), "{name}");

        // A buyer who saw another price does not pay this one; a poor buyer cannot pay.
        assert_eq!(
            variant.buy(1, 1, 0, 29).await.unwrap(),
            Purchase::NotListed,
            "{name}"
        );
        assert_eq!(
            variant.list(3, 1, 150).await.unwrap(),
            Listing::Listed,
            "{name}"
        );
        assert_eq!(
            variant.buy(0, 3, 1, 150).await.unwrap(),
            Purchase::InsufficientFunds,
            "{name}"
        );

        // The sale moves funds, item and listing.
        assert_eq!(
            variant.buy(1, 1, 0, 30).await.unwrap(),
            Purchase::Bought,
            "{name}"
        );
        assert_eq!(funds(&mut conn, &keys, 0).await, 130, "{name}");
        assert_eq!(funds(&mut conn, &keys, 1).await, 70, "{name}");
        let owned: bool = conn.sismember(keys.inventory(1), 1).await.unwrap();
        assert!(owned, "{name}");
        let gone: Option<f64> = conn.zscore(keys.market(), "1.0").await.unwrap();
        assert_eq!(gone, None, "{name}");

        // And only once.
        assert_eq!(
            variant.buy(1, 1, 0, 30).await.unwrap(),
            Purchase::NotListed,
            "{name}"
        );
        assert_eq!(funds(&mut conn, &keys, 1).await, 70, "{name}");

        // No lock is left behind.
        let locks: Vec<String> = conn.keys(format!("{}*", keys.lock_prefix())).await.unwrap();
        assert!(locks.is_empty(), "{name}: {locks:?}");
    }
}

#[tokio::test]
async fn locked_variants_wait_for_the_lock_and_never_run_without_it() {
    let server = RedisServer::start();
    let (mut conn, keys, locker) = setup(&server, "held").await;
    let market = LockedMarket::new(conn.clone(), keys.clone(), locker.clone());

    // Someone else holds item 1's lock and the market lock for longer than the 5 s wait:
    // taken by a task of its own (a lease this very task took would be refused at once as
    // this task's, not waited for).
    let (item_lease, market_lease) = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let item = locker.try_lock("market:1", Duration::from_secs(30)).await;
            let market = locker.try_lock("market:", Duration::from_secs(30)).await;
            (item.unwrap(), market.unwrap())
        })
        .await
        .unwrap()
    };

    let started = Instant::now();
    let (by_item, by_market, other_item) = tokio::join!(
        locked::list_item_item_lock(&market, 1, 0, 30),
        locked::list_item_market_lock(&market, 1, 0, 30),
        // Item 0's lock is free: fine-grained locking lets it through at once.
        locked::list_item_item_lock(&market, 0, 0, 30),
    );
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    for result in [by_item, by_market] {
        match result {
            Err(MarketError::Lock(LockError::Timeout { .. })) => {}
            other => panic!("expected a lock timeout, got {other:?}"),
        }
    }
    assert_eq!(other_item.unwrap(), Listing::Listed);
    // The bodies did not run: item 1 is still in its owner's inventory.
    let still_owned: bool = conn.sismember(keys.inventory(0), 1).await.unwrap();
    assert!(still_owned);
    assert!(item_lease.release().await.unwrap());
    assert!(market_lease.release().await.unwrap());
    assert_eq!(
        locked::list_item_item_lock(&market, 1, 0, 30)
            .await
            .unwrap(),
        Listing::Listed
    );
}
