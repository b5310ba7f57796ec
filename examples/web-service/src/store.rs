//! Orders, payments and processed webhooks, kept in Redis so that every replica sees them.
//!
//! Nothing here is atomic across commands on purpose: a handler checks, works, then writes.
//! That check-then-act is only correct because the handler runs under a lock, which is the
//! point of the example (and what the tests check: exactly one payment per order).

use deadpool_redis::{Config, Pool, Runtime};
use redis::AsyncCommands as _;

/// The store's one error: Redis could not be used. The text is for logs only.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "order store: {}", self.0)
    }
}

impl std::error::Error for StoreError {}

fn failed(err: impl std::fmt::Display) -> StoreError {
    StoreError(err.to_string())
}

/// A pooled Redis client for the application's data (the locks have their own `Locker`).
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// Key prefix, so that tests (and two demo instances) can share a server.
    prefix: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Store {
    /// A store on the Redis at `url`, keys under `prefix` (e.g. `"shop:"`).
    pub fn open(url: &str, prefix: &str) -> Result<Store, StoreError> {
        let mut config = Config::from_url(url);
        let mut pool = deadpool_redis::PoolConfig::new(32);
        pool.timeouts.wait = Some(std::time::Duration::from_secs(2));
        pool.timeouts.create = Some(std::time::Duration::from_secs(2));
        pool.timeouts.recycle = Some(std::time::Duration::from_secs(2));
        config.pool = Some(pool);
        let pool = config.create_pool(Some(Runtime::Tokio1)).map_err(failed)?;
        Ok(Store {
            pool,
            prefix: prefix.to_owned(),
        })
    }

    async fn conn(&self) -> Result<deadpool_redis::Connection, StoreError> {
        self.pool.get().await.map_err(failed)
    }

    /// How many payments order `id` has received (more than one would be a double charge).
    pub async fn payments(&self, id: u64) -> Result<u64, StoreError> {
        let key = format!("{}order:{id}:payments", self.prefix);
        let count: Option<u64> = self.conn().await?.get(key).await.map_err(failed)?;
        Ok(count.unwrap_or(0))
    }

    /// Records one payment of order `id`; returns the count after it.
    pub async fn record_payment(&self, id: u64, amount_cents: u64) -> Result<u64, StoreError> {
        let mut conn = self.conn().await?;
        let count: u64 = conn
            .incr(format!("{}order:{id}:payments", self.prefix), 1)
            .await
            .map_err(failed)?;
        let () = conn
            .incr(format!("{}revenue_cents", self.prefix), amount_cents)
            .await
            .map(|_: u64| ())
            .map_err(failed)?;
        Ok(count)
    }

    /// True when the webhook event with this idempotency key was processed before.
    pub async fn webhook_seen(&self, key: &str) -> Result<bool, StoreError> {
        let exists: bool = self
            .conn()
            .await?
            .exists(format!("{}webhook:{key}", self.prefix))
            .await
            .map_err(failed)?;
        Ok(exists)
    }

    /// Marks the webhook event `key` processed; returns how many events were processed in
    /// total.
    pub async fn record_webhook(&self, key: &str, event: &str) -> Result<u64, StoreError> {
        let mut conn = self.conn().await?;
        let () = conn
            .set(format!("{}webhook:{key}", self.prefix), event)
            .await
            .map_err(failed)?;
        conn.incr(format!("{}webhooks_processed", self.prefix), 1)
            .await
            .map_err(failed)
    }

    /// How many webhook events were processed (duplicates not counted).
    pub async fn webhooks_processed(&self) -> Result<u64, StoreError> {
        let count: Option<u64> = self
            .conn()
            .await?
            .get(format!("{}webhooks_processed", self.prefix))
            .await
            .map_err(failed)?;
        Ok(count.unwrap_or(0))
    }
}
