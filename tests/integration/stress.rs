//! Many tasks on one name, each doing a non-atomic read-modify-write in Redis while holding
//! the lock: any overlap of two holders loses an increment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands as _;

use crate::harness::Harness;

const TASKS: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(2);

/// The counter lives in a store of its own, so every backend (memory, Redlock) can be
/// checked the same way.
pub async fn counter_is_exact_under_contention(h: Harness) {
    let store = lock_tests::RedisServer::start();
    let client = redis::Client::open(store.url()).expect("client");
    let acquisitions = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        // One locker per task, as separate processes would have.
        let locker = h.second_locker();
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let acquisitions = acquisitions.clone();
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < RUN_FOR {
                let lease = locker
                    .lock("stress")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(20))
                    .await
                    .expect("acquire");
                let seen: Option<u64> = conn.get("counter").await.expect("get");
                tokio::task::yield_now().await;
                let () = conn
                    .set("counter", seen.unwrap_or(0) + 1)
                    .await
                    .expect("set");
                acquisitions.fetch_add(1, Ordering::SeqCst);
                assert!(
                    lease.release().await.expect("release"),
                    "lease held throughout"
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("join");
    }
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let counter: u64 = conn.get("counter").await.expect("get");
    let acquired = acquisitions.load(Ordering::SeqCst);
    assert!(
        acquired > TASKS as u64,
        "every task got the lock at least once"
    );
    assert_eq!(counter, acquired, "no two holders overlapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts() {
    counter_is_exact_under_contention(Harness::scripts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions() {
    counter_is_exact_under_contention(Harness::transactions()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    counter_is_exact_under_contention(Harness::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_five_masters() {
    counter_is_exact_under_contention(Harness::redlock_of(5)).await;
}
