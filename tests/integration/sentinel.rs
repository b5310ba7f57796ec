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
    sentinel.until_sentinel_lists_replica("locks", replica.port());
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

/// Found by `lock-torture run --topology sentinel --mode pause-master` (RELIABILITY.md).
/// A master that stops answering (SIGSTOP: a GC-like stall, a paused VM) leaves waiting
/// requests hanging until their wait runs out; the attempt in flight is then abandoned
/// (`wait` is a deadline), which is no connection failure, so the connection is kept and
/// the locker never asks the Sentinels again. When the old master resumes after the
/// Sentinels promoted its replica, it still believes it is the master (a Sentinel waits
/// several seconds before turning it into a replica), and the locker goes on taking locks
/// there while every other client locks on the new master: two holders of one lock for as
/// long as that lasts (about 10 s, 149 overlapping leases in one torture run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locker_that_waited_on_a_paused_master_follows_the_failover() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    sentinel.until_sentinel_lists_replica("locks", replica.port());
    let locker = Locker::builder()
        .sentinel([sentinel.url()], "locks")
        .command_timeout(SECOND)
        .build()
        .expect("sentinel locker");
    let lease = locker.try_lock("a", 10 * SECOND).await.expect("acquire");
    assert!(lease.release().await.expect("release"));

    master.signal("-STOP");
    // A waiting request on the stopped master: its wait runs out before the command
    // timeout, and its attempt is abandoned.
    let waited = locker
        .lock("b")
        .ttl(10 * SECOND)
        .wait(Duration::from_millis(200))
        .await;
    assert!(waited.is_err(), "the stopped master does not answer");
    let started = Instant::now();
    while !sentinel
        .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "locks"])
        .contains(&replica.port().to_string())
    {
        assert!(
            started.elapsed() < 30 * SECOND,
            "the Sentinel promoted the replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    master.signal("-CONT");

    let lease = locker
        .lock("c")
        .ttl(10 * SECOND)
        .wait(5 * SECOND)
        .await
        .expect("acquire after the failover");
    let on_new_master = replica.command(&["GET", lease.key()]);
    let on_old_master = master.command(&["GET", lease.key()]);
    assert!(
        !on_new_master.starts_with("$-1"),
        "the lease was granted by the deposed master (it holds {on_old_master:?}), not by \
         the one the Sentinel names ({on_new_master:?})"
    );
}
