//! Sentinel: the locker, and its waiters' notifications, follow the master Sentinel names
//! across a failover.

use std::time::{Duration, Instant};

use lock_core::Locker;
use lock_tests::RedisServer;

use crate::notified::{queued, subscribed_on, waiter_is_woken_by_notification};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locker_follows_a_failover() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    // The Sentinel learns about the replica from the master's INFO, within a few seconds.
    let started = Instant::now();
    while !sentinel
        .command(&["SENTINEL", "REPLICAS", "locks"])
        .contains(&replica.port().to_string())
    {
        assert!(
            started.elapsed() < 30 * SECOND,
            "the sentinel found the replica"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let on_sentinel = || {
        Locker::builder()
            .sentinel([sentinel.url()], "locks")
            .command_timeout(SECOND)
            .build()
            .expect("sentinel locker")
    };
    let (locker, waiter) = (on_sentinel(), on_sentinel());
    // Waiters stand in the master's queue and are told their turn over a subscription to
    // the master.
    waiter_is_woken_by_notification(
        &locker,
        &waiter,
        "before",
        || queued(&master, "before"),
        || subscribed_on(&master, master.port()),
    )
    .await;
    let lease = locker
        .try_lock("job", 10 * SECOND)
        .await
        .expect("acquire on the master");
    assert!(lease.release().await.expect("release"));

    master.kill();
    let started = Instant::now();
    let mut failures = 0;
    let lease = loop {
        match locker.try_lock("job", 10 * SECOND).await {
            Ok(lease) => break lease,
            Err(err) => {
                failures += 1;
                assert!(
                    started.elapsed() < 60 * SECOND,
                    "the locker recovered after the failover (last error: {err})"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(failures > 0, "the master really went away");
    assert!(
        replica.command(&["ROLE"]).contains("master"),
        "the replica was promoted"
    );
    assert!(lease.is_held().await.expect("is_held"));
    assert!(lease.release().await.expect("release on the new master"));
    // The waiters' subscription followed the master too.
    waiter_is_woken_by_notification(
        &locker,
        &waiter,
        "after",
        || queued(&replica, "after"),
        || subscribed_on(&replica, replica.port()),
    )
    .await;
}
