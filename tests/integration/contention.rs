//! The contended path: notifications instead of polling, no stampede from local waiters,
//! auto-renewal, the lost-lock signal, and cancellation safety at scale.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, Protocol};
use lock_tests::RedisServer;

use crate::behaviour::freed_within;
use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Calls of `command` Redis has executed so far (INFO commandstats counts script-inner calls).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_release_wakes_the_waiter_without_polling() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let holder = h.second_locker(); // another "process"
    let lease = holder.try_lock("n", 60 * SECOND).await.expect("acquire");
    let sets_before = calls(server, "set");
    let waiter = tokio::spawn({
        let locker = h.locker.clone();
        async move { locker.lock("n").ttl(SECOND).wait(30 * SECOND).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(lease.release().await.expect("release"));
    let won = tokio::time::timeout(10 * SECOND, waiter)
        .await
        .expect("woken long before its 30 s wait or the 60 s TTL")
        .expect("join")
        .expect("acquired");
    let attempts = calls(server, "set") - sets_before;
    // A 1 ms polling loop would have made about 1500 attempts; the waiter made its first
    // two (before and after subscribing), a timed safety-net retry or two, and the one
    // after the notification.
    assert!(attempts <= 6, "{attempts} SET attempts while waiting 1.5 s");
    won.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_queue_instead_of_stampeding() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let remote = h.second_locker();
    let lease = remote.try_lock("q", 60 * SECOND).await.expect("acquire");
    let sets_before = calls(server, "set");
    let mut waiters = Vec::new();
    for _ in 0..20 {
        let locker = h.locker.clone();
        waiters.push(tokio::spawn(async move {
            let lease = locker.lock("q").ttl(10 * SECOND).wait(30 * SECOND).await?;
            lease.release().await
        }));
    }
    tokio::time::sleep(SECOND).await;
    let while_held = calls(server, "set") - sets_before;
    assert!(
        while_held <= 26,
        "20 local waiters made {while_held} attempts in 1 s: only the queue's head may ask"
    );
    assert!(lease.release().await.expect("release"));
    for waiter in waiters {
        assert!(waiter
            .await
            .expect("join")
            .expect("each waiter gets its turn"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_hand_off_is_fifo() {
    let h = Harness::scripts();
    let first = h
        .locker
        .try_lock("fifo", 10 * SECOND)
        .await
        .expect("acquire");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let locker = h.locker.clone();
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let lease = locker
                .lock("fifo")
                .ttl(10 * SECOND)
                .wait(30 * SECOND)
                .await
                .expect("acquire");
            order.lock().expect("order").push(i);
            lease.release().await.expect("release");
        }));
        // Let each waiter join the queue before the next one starts.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.release().await.expect("release");
    for waiter in waiters {
        waiter.await.expect("join");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4]);
}

async fn auto_renewal_outlives_the_ttl(h: Harness) {
    let other = h.second_locker();
    // A 2 s TTL, renewed every third of it: a renewal may come over a second late (a
    // loaded 2-core machine stalling the test process) and the lease still holds. (A 1 s
    // TTL lost it to such stalls; a 300 ms one to stalls over 200 ms.)
    let ttl = 2 * SECOND;
    let begun = Instant::now();
    let lease = h
        .locker
        .lock("ar")
        .ttl(ttl)
        .auto_renew()
        .await
        .expect("acquire");
    // Two and a half TTLs: held only if it was renewed, several times.
    tokio::time::sleep(ttl * 5 / 2).await;
    assert!(begun.elapsed() > 2 * ttl);
    assert!(!lease.is_lost(), "renewed all along");
    assert!(
        lease.is_held().await.expect("is_held"),
        "the store still has it, past twice its TTL"
    );
    assert!(matches!(
        other.try_lock("ar", SECOND).await,
        Err(LockError::Busy { .. })
    ));
    assert!(lease.release().await.expect("release"));
    assert!(freed_within(&h.locker, "ar", 5 * SECOND).await);
}

async fn max_hold_stops_renewal(h: Harness) {
    let lease = h
        .locker
        .lock("mh")
        .ttl(Duration::from_millis(200))
        .auto_renew()
        .max_hold(Duration::from_millis(400))
        .await
        .expect("acquire");
    tokio::time::timeout(10 * SECOND, lease.lost())
        .await
        .expect("renewal stops at max_hold and the lease then expires");
    let other = h.second_locker();
    let next = other
        .lock("mh")
        .ttl(SECOND)
        .wait(5 * SECOND)
        .await
        .expect("the lock frees itself");
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_outlives_the_ttl_scripts() {
    auto_renewal_outlives_the_ttl(Harness::scripts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_outlives_the_ttl_transactions() {
    auto_renewal_outlives_the_ttl(Harness::transactions()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_outlives_the_ttl_memory() {
    auto_renewal_outlives_the_ttl(Harness::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_renewal_scripts() {
    max_hold_stops_renewal(Harness::scripts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_renewal_memory() {
    max_hold_stops_renewal(Harness::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_reports_a_stolen_lock_at_once() {
    for protocol in [Protocol::Scripts, Protocol::Transactions] {
        let h = match protocol {
            Protocol::Scripts => Harness::scripts(),
            _ => Harness::transactions(),
        };
        let server = h.server.as_ref().expect("server");
        let lease = h
            .locker
            .lock("stolen")
            .ttl(3 * SECOND)
            .auto_renew()
            .await
            .expect("acquire");
        // Someone deletes the key (an operator, a server restarted empty).
        assert!(server.command(&["DEL", "lock:{stolen}"]).starts_with(":1"));
        tokio::time::timeout(10 * SECOND, lease.lost())
            .await
            .expect("lost() fires");
        assert!(
            lease.expires_in() > Duration::ZERO,
            "{protocol:?}: reported by the renewer while the lease still had validity left, not at its end"
        );
        assert!(!lease.release().await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_cancelled_acquires_leave_nothing_behind() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let holder = h.second_locker();
    // Half of the names are held by someone else, so cancellations also hit waiters.
    let mut held = Vec::new();
    for i in 0..10 {
        held.push(
            holder
                .try_lock(format!("c10k:{i}"), 60 * SECOND)
                .await
                .expect("acquire"),
        );
    }
    let mut tasks = Vec::new();
    for i in 0..10_000u64 {
        let locker = h.locker.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("c10k:{}", i % 20);
            let cut = Duration::from_micros(fastrand_like(i) % 2_000);
            let _ = tokio::time::timeout(cut, locker.lock(name).ttl(60 * SECOND).wait(5 * SECOND))
                .await;
        }));
    }
    for task in tasks {
        task.await.expect("join");
    }
    for lease in held {
        lease.release().await.expect("release");
    }
    let started = Instant::now();
    loop {
        let left = server.command(&["KEYS", "lock:{c10k:*"]);
        if left.starts_with("*0") {
            break;
        }
        assert!(
            started.elapsed() < 5 * SECOND,
            "locks still held 5 s after 10,000 cancelled acquires (TTL 60 s): {left}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A cheap deterministic spread of cut points.
fn fastrand_like(i: u64) -> u64 {
    i.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_built_lockers_still_wait_correctly_without_notifications() {
    let server = RedisServer::start();
    let pool = lock_core::deadpool_redis::Config::from_url(server.url())
        .create_pool(Some(lock_core::deadpool_redis::Runtime::Tokio1))
        .expect("pool");
    let locker = Locker::from_pool(pool);
    let other = Harness::locker_for(&server, Protocol::Scripts);
    let lease = other.try_lock("p", 60 * SECOND).await.expect("acquire");
    let waiter = tokio::spawn({
        let locker = locker.clone();
        async move { locker.lock("p").ttl(SECOND).wait(10 * SECOND).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    lease.release().await.expect("release");
    let won = waiter
        .await
        .expect("join")
        .expect("acquired by timed retries");
    won.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_built_lockers_with_a_pubsub_client_queue_and_are_notified() {
    let server = RedisServer::start();
    let pooled = || {
        let pool = lock_core::deadpool_redis::Config::from_url(server.url())
            .create_pool(Some(lock_core::deadpool_redis::Runtime::Tokio1))
            .expect("pool");
        Locker::builder()
            .pool(pool)
            .pubsub_client(redis::Client::open(server.url()).expect("client"))
            .build()
            .expect("locker")
    };
    let (holder, waiter) = (pooled(), pooled());
    crate::notified::waiter_is_woken_by_notification(
        &holder,
        &waiter,
        "pooled",
        || crate::notified::queued(&server, "pooled"),
        || crate::notified::subscribed_on(&server, server.port()),
    )
    .await;
    // Without the client the pool's waiters poll: they never stand in the queue.
    let polling = Locker::from_pool(
        lock_core::deadpool_redis::Config::from_url(server.url())
            .create_pool(Some(lock_core::deadpool_redis::Runtime::Tokio1))
            .expect("pool"),
    );
    let lease = holder
        .lock("polled")
        .ttl(60 * SECOND)
        .await
        .expect("holder");
    let waiting = tokio::spawn({
        let polling = polling.clone();
        async move { polling.lock("polled").wait(30 * SECOND).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        crate::notified::queued(&server, "polled"),
        0,
        "a polling waiter"
    );
    assert!(lease.release().await.expect("release"));
    let won = waiting
        .await
        .expect("join")
        .expect("acquired by timed retries");
    assert!(won.release().await.expect("release"));
    // The client is for pools only: other lockers open their own connection.
    let err = Locker::builder()
        .url(server.url())
        .pubsub_client(redis::Client::open(server.url()).expect("client"))
        .build()
        .expect_err("pubsub_client without a pool");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
}
