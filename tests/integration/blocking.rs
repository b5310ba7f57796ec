//! `lock_core::blocking`: the synchronous API from plain `#[test]` functions and many std
//! threads, on one Redis, Redlock, a Cluster and Sentinel; and its refusal inside an async
//! runtime.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::blocking;
use lock_core::LockError;
use lock_tests::{RedisCluster, RedisServer};

const SECOND: Duration = Duration::from_secs(1);

fn on(server: &RedisServer) -> blocking::Locker {
    blocking::Locker::build(
        lock_core::Locker::builder()
            .url(server.url())
            .app_name("blocking-tests"),
    )
    .expect("blocking locker")
}

/// Take, refuse, extend, fence, inspect and release on `a`, seen from `b` (another process's
/// locker on the same store).
fn lock_cycle(a: &blocking::Locker, b: &blocking::Locker) {
    let lease = a
        .lock("orders:7")
        .ttl(10 * SECOND)
        .wait(SECOND)
        .fencing()
        .acquire()
        .expect("lease");
    let first = lease.fencing_token().expect("a fencing token");
    match b.try_lock("orders:7", 10 * SECOND) {
        Err(LockError::Busy { name, .. }) => assert_eq!(name, "orders:7"),
        other => panic!("expected Busy, got {other:?}"),
    }
    lease.extend(20 * SECOND).expect("extend");
    assert!(lease.expires_in() > 10 * SECOND, "extended to 20 s");
    assert!(lease.is_held().expect("is_held"));
    let info = b.inspect("orders:7").expect("inspect").expect("held");
    assert!(info.remaining.expect("a TTL") > 10 * SECOND);
    assert!(lease.release().expect("release"), "still ours");
    assert!(b.inspect("orders:7").expect("inspect").is_none(), "freed");
    let again = b.lock("orders:7").fencing().acquire().expect("free again");
    assert!(
        again.fencing_token().expect("fenced") > first,
        "tokens increase"
    );
    assert!(again.release().expect("release"));
}

#[test]
fn a_plain_test_takes_extends_fences_and_releases_on_one_redis() {
    let server = RedisServer::start();
    lock_cycle(&on(&server), &on(&server));
}

#[test]
fn a_plain_test_takes_extends_fences_and_releases_on_redlock() {
    let nodes: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = || {
        blocking::Locker::build(
            lock_core::Locker::builder()
                .redlock(nodes.iter().map(RedisServer::url))
                .node_timeout(Duration::from_millis(500)),
        )
        .expect("redlock")
    };
    lock_cycle(&redlock(), &redlock());
}

#[test]
fn a_plain_test_takes_locks_and_permits_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let on_cluster = || {
        blocking::Locker::build(lock_core::Locker::builder().cluster(cluster.urls()))
            .expect("cluster locker")
    };
    let (a, b) = (on_cluster(), on_cluster());
    lock_cycle(&a, &b);
    let permits = a.semaphore("exports", 1);
    let held = permits.try_acquire(10 * SECOND).expect("a permit");
    assert!(matches!(
        b.semaphore("exports", 1).try_acquire(10 * SECOND),
        Err(LockError::LimitReached { permits: 1, .. })
    ));
    assert!(held.release().expect("release"));
    let _again = b
        .semaphore("exports", 1)
        .try_acquire(10 * SECOND)
        .expect("free again");
}

/// Sentinel: the locker is built on its runtime (the Sentinel follower it starts runs
/// there), so it follows the master from synchronous code.
#[test]
fn a_plain_test_takes_locks_behind_sentinel() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    let on_sentinel = || {
        blocking::Locker::build(
            lock_core::Locker::builder()
                .sentinel([sentinel.url()], "locks")
                .command_timeout(SECOND),
        )
        .expect("sentinel locker")
    };
    lock_cycle(&on_sentinel(), &on_sentinel());
}

/// Many std threads of two lockers (two processes) take one lock in turn: never two at
/// once, and every one gets through by waiting.
#[test]
fn many_std_threads_wait_their_turn_and_never_overlap() {
    let server = RedisServer::start();
    let lockers = [on(&server), on(&server)];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let locker = lockers[i % 2].clone();
            let (inside, most, done) = (Arc::clone(&inside), Arc::clone(&most), Arc::clone(&done));
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let lease = locker
                        .lock("counter")
                        .ttl(10 * SECOND)
                        .wait(30 * SECOND)
                        .acquire()
                        .expect("lease within the wait");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    if i % 2 == 0 {
                        assert!(lease.release().expect("release"));
                    } // the others are released on drop
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "two holders at once");
    assert_eq!(done.load(Ordering::SeqCst), 80);
}

/// A dropped lease is released at once (on the locker's runtime thread), not left to its
/// TTL: another process gets it well within the 30 s TTL.
#[test]
fn a_dropped_lease_is_released() {
    let server = RedisServer::start();
    let (a, b) = (on(&server), on(&server));
    let lease = a.lock("report").ttl(30 * SECOND).acquire().expect("lease");
    drop(lease);
    let next = b
        .lock("report")
        .ttl(30 * SECOND)
        .wait(5 * SECOND)
        .acquire()
        .expect("released on drop, not at its TTL");
    drop(next);
    // The last handle's drop lets the release finish before the runtime stops.
    let c = on(&server);
    let lease = c
        .lock("report")
        .ttl(30 * SECOND)
        .wait(5 * SECOND)
        .acquire()
        .expect("lease");
    drop(lease);
    drop(c);
    assert!(
        a.inspect("report").expect("inspect").is_none(),
        "released before the locker's runtime stopped"
    );
}

/// Auto-renewal runs on the locker's thread while the caller's thread sleeps; a semaphore's
/// permit likewise.
#[test]
fn auto_renewal_keeps_a_lease_while_the_thread_sleeps() {
    let server = RedisServer::start();
    let (a, b) = (on(&server), on(&server));
    let lease = a
        .lock("import")
        .ttl(Duration::from_millis(300))
        .auto_renew()
        .acquire()
        .expect("lease");
    let permit = a
        .semaphore("imports", 1)
        .permit()
        .ttl(Duration::from_millis(300))
        .auto_renew()
        .acquire()
        .expect("permit");
    std::thread::sleep(SECOND);
    assert!(!lease.is_lost() && lease.is_held().expect("is_held"));
    assert!(!permit.is_lost() && permit.is_held().expect("is_held"));
    assert!(matches!(
        b.try_lock("import", SECOND),
        Err(LockError::Busy { .. })
    ));
    assert!(matches!(
        b.semaphore("imports", 1).try_acquire(SECOND),
        Err(LockError::LimitReached { .. })
    ));
    assert!(!lease
        .wait_lost(Duration::from_millis(50))
        .expect("wait_lost"));
    assert!(lease.release().expect("release") && permit.release().expect("release"));
}

/// A lease that is not renewed is reported lost at the end of its TTL to a thread that
/// waits for it.
#[test]
fn a_watchdog_thread_learns_of_a_loss() {
    let server = RedisServer::start();
    let locker = on(&server);
    let lease = locker
        .lock("short")
        .ttl(Duration::from_millis(200))
        .acquire()
        .expect("lease");
    assert!(
        lease.wait_lost(5 * SECOND).expect("wait_lost"),
        "lost at its TTL"
    );
    assert!(matches!(lease.extend(SECOND), Err(LockError::Lost { .. })));
}

/// A semaphore of 2 across 6 threads of two lockers admits 2 at once, never 3.
#[test]
fn a_semaphore_admits_at_most_its_permits_across_threads() {
    let server = RedisServer::start();
    let lockers = [on(&server), on(&server)];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let semaphore = lockers[i % 2].semaphore("exports", 2);
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let _permit = semaphore
                        .permit()
                        .ttl(10 * SECOND)
                        .wait(30 * SECOND)
                        .acquire()
                        .expect("permit within the wait");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    assert_eq!(most.load(Ordering::SeqCst), 2, "2 at once, never 3");
}

#[test]
fn readers_share_and_a_writer_waits_for_them() {
    let server = RedisServer::start();
    let (a, b) = (on(&server), on(&server));
    let catalog = a.rwlock("catalog");
    let r1 = catalog.read().acquire().expect("reader");
    let r2 = b.rwlock("catalog").read().acquire().expect("readers share");
    assert!(matches!(
        b.rwlock("catalog").write().wait(Duration::ZERO).acquire(),
        Err(LockError::Busy { .. })
    ));
    let writer = std::thread::spawn(move || {
        b.rwlock("catalog")
            .write()
            .wait(10 * SECOND)
            .acquire()
            .map(|w| w.mode())
    });
    std::thread::sleep(Duration::from_millis(100));
    drop(r1);
    assert!(r2.release().expect("release"));
    assert_eq!(
        writer
            .join()
            .expect("thread")
            .expect("writer after the readers"),
        lock_core::HoldMode::Write
    );
}

/// Inside an async runtime every blocking call is refused at once with an error naming
/// the fix, instead of blocking (or panicking in) the runtime's worker; a lease dropped
/// there is still released.
#[tokio::test(flavor = "current_thread")]
async fn inside_a_runtime_a_blocking_call_is_refused_with_the_fix() {
    let server = RedisServer::start();
    let url = server.url();
    // Built on a thread of its own: building inside the runtime is refused too.
    let (locker, lease) = std::thread::spawn(move || {
        let locker = blocking::Locker::from_url(&url).expect("locker");
        let lease = locker
            .lock("held")
            .ttl(30 * SECOND)
            .acquire()
            .expect("lease");
        (locker, lease)
    })
    .join()
    .expect("thread");
    assert!(matches!(
        blocking::Locker::from_url(&server.url()),
        Err(LockError::BlockingInAsync {
            call: "Locker::build"
        })
    ));
    let refused = locker.lock("x").acquire().expect_err("refused");
    assert!(
        matches!(
            refused,
            LockError::BlockingInAsync {
                call: "LockRequest::acquire"
            }
        ),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(message.contains("inside an async runtime"), "{message}");
    assert!(message.contains("as_async()"), "{message}");
    assert!(matches!(
        locker.semaphore("s", 1).try_acquire(SECOND),
        Err(LockError::BlockingInAsync { .. })
    ));
    assert!(matches!(
        lease.extend(SECOND),
        Err(LockError::BlockingInAsync { .. })
    ));
    // The async API of the same locker works here.
    let async_lease = locker.as_async().lock("x").await.expect("async lease");
    assert!(async_lease.release().await.expect("release"));
    // Dropped here (not released through the refused call): released on the locker's
    // runtime all the same.
    drop(lease);
    let other = lock_core::Locker::from_url(&server.url()).expect("locker");
    let _taken = other
        .lock("held")
        .wait(5 * SECOND)
        .await
        .expect("released, not left to its 30 s TTL");
    // Dropping the last handle inside the runtime neither blocks nor panics.
    drop(locker);
}

/// A latch from std threads of two lockers: counted down by four threads, waited on by
/// three, each returning once the last count-down happened.
#[test]
fn a_latch_counted_down_and_waited_on_by_std_threads() {
    let server = RedisServer::start();
    let (a, b) = (on(&server), on(&server));
    a.latch("batch").arm(4, 60 * SECOND).expect("arm");
    let counted = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let latch = if i % 2 == 0 {
                a.latch("batch")
            } else {
                b.latch("batch")
            };
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                latch.wait(30 * SECOND).expect("opened");
                counted.load(Ordering::SeqCst)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let counters: Vec<_> = (0..4)
        .map(|i| {
            let latch = if i % 2 == 0 {
                a.latch("batch")
            } else {
                b.latch("batch")
            };
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20 * i));
                counted.fetch_add(1, Ordering::SeqCst);
                latch.count_down().expect("count down")
            })
        })
        .collect();
    for counter in counters {
        counter.join().expect("thread");
    }
    for waiter in waiters {
        assert_eq!(
            waiter.join().expect("thread"),
            4,
            "returned before the last count-down"
        );
    }
    assert!(matches!(
        a.latch("batch").count_down(),
        Err(LockError::LatchCountBelowZero {
            remaining: 0,
            asked: 1,
            ..
        })
    ));
}
