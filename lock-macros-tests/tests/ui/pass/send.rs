// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use std::sync::Arc;

use lock_core::{redis_locked, LockError, Locker};

fn assert_send<T: Send>(_: &T) {}
fn assert_send_static<T: Send + 'static>(_: &T) {}

#[redis_locked(key = "send:{id}")]
async fn free(id: u64, name: String) -> Result<String, LockError> {
    tokio::task::yield_now().await;
    Ok(format!("{name}{id}"))
}

pub struct Service {
    pub locks: Locker,
    pub hits: u64,
}

impl Service {
    #[redis_locked(key = "svc", locker = self.locks)]
    async fn get(&self) -> Result<u64, LockError> {
        tokio::task::yield_now().await;
        Ok(self.hits)
    }

    #[redis_locked(key = "svc", locker = self.locks)]
    async fn bump(&mut self) -> Result<u64, LockError> {
        tokio::task::yield_now().await;
        self.hits += 1;
        Ok(self.hits)
    }

    #[redis_locked(key = "svc", locker = self.locks)]
    async fn owned(self: Arc<Self>) -> Result<u64, LockError> {
        tokio::task::yield_now().await;
        Ok(self.hits)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    lock_core::set_default_locker(Locker::memory());
    let future = free(1, String::from("n"));
    assert_send_static(&future);
    assert_eq!(tokio::spawn(future).await.unwrap().unwrap(), "n1");

    let mut service = Service {
        locks: Locker::memory(),
        hits: 0,
    };
    assert_send(&service.get());
    assert_send(&service.bump());
    let shared = Arc::new(service);
    let owned = shared.owned();
    assert_send_static(&owned);
    drop(owned);
}
