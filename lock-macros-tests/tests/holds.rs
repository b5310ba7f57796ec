//! `#[redis_locked]` with `permits`, `mode` and `keys` at run time, on the in-process
//! backend: at most N bodies at once, readers together and writers alone, and several keys
//! held together while the body runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{redis_locked, LockError, Locker};

#[derive(Default)]
struct Counts {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Counts {
    async fn visit(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Service {
    locks: Locker,
    exports: Counts,
    readers: Counts,
    writers: Counts,
}

impl Service {
    #[redis_locked(key = "exports:{tenant}", permits = 2, wait = "10s", locker = self.locks)]
    async fn export(&self, tenant: u32) -> Result<u32, LockError> {
        self.exports.visit().await;
        Ok(tenant)
    }

    #[redis_locked(key = "catalog", mode = "read", wait = "10s", locker = self.locks)]
    async fn browse(&self) -> Result<(), LockError> {
        // No writer inside while a reader is.
        assert_eq!(self.writers.inside.load(Ordering::SeqCst), 0);
        self.readers.visit().await;
        Ok(())
    }

    #[redis_locked(key = "catalog", mode = "write", wait = "10s", locker = self.locks)]
    async fn restock(&self) -> Result<(), LockError> {
        assert_eq!(self.readers.inside.load(Ordering::SeqCst), 0);
        self.writers.visit().await;
        Ok(())
    }

    #[redis_locked(keys = ["buyer:{buyer}", "item:{item}"], wait = "0s", locker = self.locks)]
    async fn trade(&self, buyer: u32, item: &str) -> Result<bool, LockError> {
        // Both locks are held while the body runs.
        let busy_buyer = self
            .locks
            .try_lock(format!("buyer:{buyer}"), Duration::from_secs(1))
            .await
            .is_err();
        let busy_item = self
            .locks
            .try_lock(format!("item:{item}"), Duration::from_secs(1))
            .await
            .is_err();
        Ok(busy_buyer && busy_item)
    }
}

fn service() -> Arc<Service> {
    Arc::new(Service {
        locks: Locker::memory(),
        exports: Counts::default(),
        readers: Counts::default(),
        writers: Counts::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_bound_the_bodies_running_at_once() {
    let service = service();
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let service = Arc::clone(&service);
            tokio::spawn(async move { service.export(7).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.expect("join").expect("export"), 7);
    }
    assert_eq!(service.exports.most.load(Ordering::SeqCst), 2);
    // Released on the way out: both permits are free again.
    let semaphore = service.locks.semaphore("exports:7", 2);
    assert!(semaphore
        .holders()
        .await
        .expect("holders")
        .holders
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_are_alone() {
    let service = service();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let service = Arc::clone(&service);
            tokio::spawn(async move {
                if i % 4 == 0 {
                    service.restock().await
                } else {
                    service.browse().await
                }
            })
        })
        .collect();
    for call in calls {
        call.await.expect("join").expect("call");
    }
    assert!(
        service.readers.most.load(Ordering::SeqCst) > 1,
        "readers overlapped"
    );
    assert_eq!(service.writers.most.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_held_together_while_the_body_runs() {
    let service = service();
    assert!(service.trade(3, "lamp").await.expect("trade"));
    // Released afterwards.
    let again = service.locks.lock_all(["buyer:3", "item:lamp"]).await;
    assert!(again.expect("both free").release().await.expect("release"));
    // Busy: the body does not run, the error comes back.
    let held = service
        .locks
        .try_lock("item:lamp", Duration::from_secs(5))
        .await
        .expect("held");
    let err = service.trade(3, "lamp").await.expect_err("busy");
    assert!(
        matches!(err, LockError::Busy { ref name, .. } if name == "item:lamp"),
        "{err:?}"
    );
    drop(held);
}
