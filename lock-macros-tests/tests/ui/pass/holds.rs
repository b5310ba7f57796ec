//! Every kind of hold compiles: a semaphore permit, each side of a read-write lock, and
//! several keys taken together, with placeholders, a locker expression and the policies.

use lock_core::{redis_locked, LockError, Locker};

struct Shop {
    locks: Locker,
}

impl Shop {
    #[redis_locked(key = "exports:{tenant}", permits = 5, ttl = "30s", locker = self.locks)]
    async fn export(&self, tenant: u64) -> Result<u64, LockError> {
        Ok(tenant)
    }

    #[redis_locked(key = "gpus", permits = 8, weight = 2, locker = self.locks)]
    async fn train(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[redis_locked(key = "gpus", permits = 8, weight = gpus, wait = "5s", locker = self.locks)]
    async fn train_on(&self, gpus: u64) -> Result<u64, LockError> {
        Ok(gpus)
    }

    #[redis_locked(key = "catalog", mode = "read", locker = self.locks, on_lost = "cancel")]
    async fn browse(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[redis_locked(key = "catalog", mode = "write", wait = "1s", locker = self.locks)]
    async fn restock(&self, count: u32) -> Result<u32, LockError> {
        Ok(count)
    }

    #[redis_locked(
        keys = ["buyer:{buyer}", "seller:{seller}", "item:{item}", "ledger"],
        ttl = "10s",
        renew = false,
        locker = self.locks
    )]
    async fn trade(&self, buyer: u64, seller: u64, item: &str) -> Result<bool, LockError> {
        Ok(buyer != seller && !item.is_empty())
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let shop = Shop {
        locks: Locker::memory(),
    };
    assert_send(shop.export(1));
    assert_send(shop.train());
    assert_send(shop.train_on(4));
    assert_send(shop.browse());
    assert_send(shop.restock(2));
    assert_send(shop.trade(1, 2, "lamp"));
}
