// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use std::sync::Arc;

use lock_core::{redis_locked, LockError, Locker};

pub struct Account {
    pub id: u64,
    pub balance: i64,
    pub locks: Locker,
}

impl Account {
    #[redis_locked(key = "account:{self.id}", locker = self.locks)]
    pub async fn balance(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[redis_locked(key = "account:{self.id}", ttl = "5s", locker = self.locks)]
    pub async fn deposit(&mut self, amount: i64) -> Result<i64, LockError> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[redis_locked(key = "account:{self.id}:{other}")]
    pub async fn shared(self: Arc<Self>, other: u64) -> Result<u64, LockError> {
        Ok(self.id + other)
    }

    #[redis_locked(key = "account:{self.id}")]
    pub async fn consume(mut self) -> Result<Account, LockError> {
        self.balance = 0;
        Ok(self)
    }

    #[redis_locked(key = "account:{self.id}")]
    pub async fn by_value(self) -> Result<u64, LockError> {
        Ok(self.id)
    }

    #[redis_locked(key = "account:{id}")]
    pub async fn associated(id: u64) -> Result<Self, LockError> {
        Ok(Account {
            id,
            balance: 0,
            locks: Locker::memory(),
        })
    }
}

fn main() {
    let mut account = Account {
        id: 1,
        balance: 0,
        locks: Locker::memory(),
    };
    drop(account.balance());
    drop(account.deposit(5));
    drop(Account::associated(2));
    drop(
        Arc::new(Account {
            id: 3,
            balance: 0,
            locks: Locker::memory(),
        })
        .shared(3),
    );
}
