//! The book's first version: optimistic `WATCH`/`MULTI`/`EXEC` transactions, no lock.
//!
//! A purchase watches the market and the buyer, reads the price and the funds, and runs the
//! transfer in `MULTI`/`EXEC`; any write to the market by anyone (every listing, every other
//! purchase) aborts the `EXEC`, and the purchase starts again. This is what makes the book's
//! "no lock" rows retry so much: the market is one key, and everybody writes it.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::model::Keys;
use crate::steps::{
    add_purchase_reads, check_list_replies, check_purchase_replies, list_transaction,
    purchase_refusal, purchase_transaction, ListArgs, PurchaseArgs, PurchaseReads, PurchaseReplies,
};
use crate::{Listing, MarketError, Purchase, Tried};

/// The book's time limit for one purchase (`purchase_item`: 10 s).
pub const PURCHASE_TIME_LIMIT: Duration = Duration::from_secs(10);
/// The book's time limit for one listing (`list_item`: 5 s).
pub const LIST_TIME_LIMIT: Duration = Duration::from_secs(5);

/// A marketplace driven by optimistic transactions on a connection of its own.
///
/// `WATCH` state belongs to a connection, so this type takes `&mut self` and must not share
/// its connection with anyone: give each task its own (the book gives each process one).
#[derive(Clone)]
pub struct WatchMarket {
    conn: MultiplexedConnection,
    keys: Keys,
    purchase_limit: Duration,
    list_limit: Duration,
}

impl std::fmt::Debug for WatchMarket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchMarket")
            .field("keys", &self.keys)
            .field("purchase_limit", &self.purchase_limit)
            .field("list_limit", &self.list_limit)
            .finish_non_exhaustive()
    }
}

impl WatchMarket {
    /// A marketplace on `conn` (which must be this value's alone) with the book's limits.
    pub fn new(conn: MultiplexedConnection, keys: Keys) -> WatchMarket {
        WatchMarket {
            conn,
            keys,
            purchase_limit: PURCHASE_TIME_LIMIT,
            list_limit: LIST_TIME_LIMIT,
        }
    }

    /// Changes how long one purchase and one listing keep retrying before they give up.
    pub fn with_limits(mut self, purchase: Duration, list: Duration) -> WatchMarket {
        self.purchase_limit = purchase;
        self.list_limit = list;
        self
    }

    /// The keys this marketplace works on.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Puts `item_id` from `seller_id`'s inventory on the market at `price` (the book's
    /// `list_item`): watch the inventory, check the item is in it, then `ZADD` + `SREM` in
    /// one transaction; retry if the inventory changed meanwhile.
    ///
    /// Round trips per attempt: 2 (`WATCH` + `SISMEMBER` pipelined, then `MULTI`/`EXEC`).
    pub async fn list_item(
        &mut self,
        item_id: u64,
        seller_id: u64,
        price: i64,
    ) -> Result<Tried<Listing>, MarketError> {
        let args = ListArgs {
            item_id,
            seller_id,
            price,
        };
        let inventory = self.keys.inventory(seller_id);
        let deadline = Instant::now() + self.list_limit;
        let mut retries = 0;
        while Instant::now() < deadline {
            let ((), owned): ((), bool) = redis::pipe()
                .cmd("WATCH")
                .arg(&inventory)
                .sismember(&inventory, item_id)
                .query_async(&mut self.conn)
                .await?;
            if !owned {
                self.unwatch().await?;
                return Ok(Tried {
                    outcome: Listing::NotInInventory,
                    retries,
                });
            }
            let replies: Option<(i64, i64)> = list_transaction(&self.keys, &args)
                .query_async(&mut self.conn)
                .await?;
            match replies {
                Some(replies) => {
                    check_list_replies(replies, &args)?;
                    return Ok(Tried {
                        outcome: Listing::Listed,
                        retries,
                    });
                }
                None => retries += 1,
            }
        }
        Ok(Tried {
            outcome: Listing::GaveUp,
            retries,
        })
    }

    /// Buys `item_id`, listed by `seller_id` at `price`, for `buyer_id` (the book's
    /// `purchase_item`): watch the market and the buyer, check the listing and the funds,
    /// then move funds, item and listing in one transaction; retry if either key changed.
    ///
    /// Round trips per attempt: 2 (`WATCH` + `ZSCORE` + `HGET` pipelined, then
    /// `MULTI`/`EXEC`).
    pub async fn purchase_item(
        &mut self,
        buyer_id: u64,
        item_id: u64,
        seller_id: u64,
        price: i64,
    ) -> Result<Tried<Purchase>, MarketError> {
        let args = PurchaseArgs {
            buyer_id,
            item_id,
            seller_id,
            price,
        };
        let deadline = Instant::now() + self.purchase_limit;
        let mut retries = 0;
        while Instant::now() < deadline {
            let mut pipe = redis::pipe();
            pipe.cmd("WATCH")
                .arg(self.keys.market())
                .arg(self.keys.user(buyer_id));
            add_purchase_reads(&mut pipe, &self.keys, &args);
            let ((), price_read, funds): ((), Option<f64>, Option<i64>) =
                pipe.query_async(&mut self.conn).await?;
            let reads: PurchaseReads = (price_read, funds);
            if let Some(refusal) = purchase_refusal(reads, &args)? {
                self.unwatch().await?;
                return Ok(Tried {
                    outcome: refusal,
                    retries,
                });
            }
            let replies: Option<PurchaseReplies> = purchase_transaction(&self.keys, &args)
                .query_async(&mut self.conn)
                .await?;
            match replies {
                Some(replies) => {
                    check_purchase_replies(replies, &args)?;
                    return Ok(Tried {
                        outcome: Purchase::Bought,
                        retries,
                    });
                }
                None => retries += 1,
            }
        }
        Ok(Tried {
            outcome: Purchase::GaveUp,
            retries,
        })
    }

    async fn unwatch(&mut self) -> Result<(), MarketError> {
        redis::cmd("UNWATCH")
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }
}
