//! Behaviour that only exists with a real server: foreign values on the key, servers that
//! are down or go away, script-cache flushes, and a server without scripting.

use std::future::IntoFuture as _;
use std::time::{Duration, Instant};

use lock_core::{Lease, LockError, Locker, Protocol};
use lock_tests::{free_port, RedisServer};

use crate::behaviour::freed_within;
use crate::harness::{Harness, NO_SCRIPTING};

const SECOND: Duration = Duration::from_secs(1);

fn both_protocols() -> [Harness; 2] {
    [Harness::scripts(), Harness::transactions()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_on_the_key_is_an_error_not_acquired() {
    for h in both_protocols() {
        let server = h.server.as_ref().expect("server");
        assert!(server
            .command(&["HSET", "lock:{orders}", "field", "value"])
            .starts_with(':'));
        match h.locker.try_lock("orders", SECOND).await {
            Err(LockError::WrongType { name, key }) => {
                assert_eq!(name, "orders");
                assert_eq!(key, "lock:{orders}");
            }
            other => panic!("{:?}: expected WrongType, got {other:?}", h.protocol),
        }
        match h
            .locker
            .lock("orders")
            .wait(Duration::from_millis(100))
            .await
        {
            Err(LockError::WrongType { .. }) => {}
            other => panic!(
                "{:?}: a waiting request fails at once too, got {other:?}",
                h.protocol
            ),
        }
        // Nothing was overwritten.
        assert!(server.command(&["TYPE", "lock:{orders}"]).contains("hash"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_a_connection_error_in_bounded_time() {
    for protocol in [Protocol::Scripts, Protocol::Transactions] {
        let url = format!("redis://127.0.0.1:{}/", free_port());
        let locker = Locker::builder()
            .url(url)
            .protocol(protocol)
            .command_timeout(2 * SECOND)
            .build()
            .expect("a well-formed URL builds without connecting");
        let started = Instant::now();
        let err = locker
            .lock("down")
            .wait(SECOND)
            .await
            .expect_err("nothing listens there");
        assert!(
            matches!(err, LockError::Connection { .. }),
            "{protocol:?}: {err:?}"
        );
        assert!(err.to_string().contains("`down`"), "{err}");
        assert!(started.elapsed() < 10 * SECOND, "bounded, not a hang");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_reaches_the_server() {
    // Nothing listens on this port: a refused name must be refused before any connection.
    let locker = Locker::from_url(&format!("redis://127.0.0.1:{}/", free_port())).expect("url");
    assert!(matches!(
        locker.try_lock("", SECOND).await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        locker.try_lock("x", Duration::ZERO).await,
        Err(LockError::InvalidDuration { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_cleanly_and_a_restarted_one_serves_again() {
    let mut server = RedisServer::start();
    let locker = Locker::builder()
        .url(server.url())
        .command_timeout(2 * SECOND)
        .build()
        .expect("locker");
    let lease = locker.try_lock("k", 10 * SECOND).await.expect("acquire");
    server.kill();
    let started = Instant::now();
    let err = locker
        .try_lock("k2", SECOND)
        .await
        .expect_err("server is down");
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(started.elapsed() < 10 * SECOND);
    assert!(
        lease.release().await.is_err(),
        "release reports the failure, it does not pretend"
    );

    server.restart(); // empty: persistence is off
    let mut reconnected = None;
    for _ in 0..50 {
        match locker.try_lock("k", SECOND).await {
            Ok(lease) => {
                reconnected = Some(lease);
                break;
            }
            Err(LockError::Connection { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    let lease = reconnected.expect("the locker reconnects by itself");
    assert!(lease.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_cache_flush_is_survived() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let first = h.locker.try_lock("s", 10 * SECOND).await.expect("acquire");
    assert!(server.command(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    assert!(first
        .release()
        .await
        .expect("release falls back to EVAL on NOSCRIPT"));
    assert!(server.command(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    let second = h
        .locker
        .try_lock("s", 10 * SECOND)
        .await
        .expect("acquire after flush");
    assert!(second.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transactions_protocol_needs_no_scripting() {
    let server = RedisServer::start_with(NO_SCRIPTING);
    assert!(server
        .command(&["EVAL", "return 1", "0"])
        .starts_with("-ERR unknown command"));
    // The scripted backend's plain SET acquire works there, but whatever needs a script
    // fails with Redis's own error instead of pretending.
    let scripted = Harness::locker_for(&server, Protocol::Scripts);
    let err = scripted
        .lock("t")
        .fencing()
        .await
        .expect_err("fencing needs a script");
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    let lease = scripted
        .try_lock("t", SECOND)
        .await
        .expect("SET NX PX GET needs no script");
    let err = lease
        .release()
        .await
        .expect_err("compare-and-delete needs a script");
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    assert!(server.command(&["DEL", "lock:{t}"]).starts_with(":1"));
    // The transactions backend does the whole life cycle.
    let tx = Harness::locker_for(&server, Protocol::Transactions);
    let lease = tx.lock("t").ttl(SECOND).fencing().await.expect("acquire");
    lease.extend(10 * SECOND).await.expect("extend");
    assert!(lease.is_held().await.expect("is_held"));
    assert!(lease.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_no_lock_behind() {
    for h in both_protocols() {
        let locker = h.locker.clone();
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let locker = locker.clone();
            tasks.push(tokio::spawn(async move {
                let name = format!("cancel:{}", i % 20);
                let cut = Duration::from_micros(u64::from(i * 37 % 400));
                // Dropped at a pseudo-random point: before, during or after the round trip.
                let _ = tokio::time::timeout(cut, locker.lock(name).ttl(30 * SECOND).wait(SECOND))
                    .await;
            }));
        }
        for task in tasks {
            task.await.expect("join");
        }
        for i in 0..20 {
            let name = format!("cancel:{i}");
            assert!(
                freed_within(&locker, &name, 5 * SECOND).await,
                "{:?}: {name} still held long before its 30 s TTL",
                h.protocol
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_library_is_reloaded_and_replicated() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    let locker = Harness::functions_locker(&master);
    let lease = locker
        .lock("fn")
        .ttl(10 * SECOND)
        .fencing()
        .await
        .expect("acquire");
    assert!(master
        .command(&["FUNCTION", "LIST"])
        .contains("lockcore_v12"));
    // Replicated: a replica promoted after a failover already has the library.
    let started = Instant::now();
    while !replica
        .command(&["FUNCTION", "LIST"])
        .contains("lockcore_v12")
    {
        assert!(
            started.elapsed() < 10 * SECOND,
            "the library reached the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Flushed (an old server state): loaded again on demand.
    assert!(master.command(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    assert!(lease.release().await.expect("release reloads the library"));
    let again = locker.try_lock("fn", SECOND).await.expect("acquire");
    assert!(again.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_pool_is_a_connection_error_in_bounded_time() {
    let server = RedisServer::start();
    for protocol in [Protocol::Scripts, Protocol::Transactions] {
        let mut config = lock_core::deadpool_redis::Config::from_url(server.url());
        config.pool = Some(lock_core::deadpool_redis::PoolConfig::new(1));
        let pool = config
            .create_pool(Some(lock_core::deadpool_redis::Runtime::Tokio1))
            .expect("pool");
        // Someone else holds the pool's only connection.
        let _taken = pool.get().await.expect("checkout");
        let locker = Locker::builder()
            .pool(pool.clone())
            .protocol(protocol)
            .command_timeout(Duration::from_millis(500))
            .build()
            .expect("locker");
        let started = Instant::now();
        let err = locker
            .try_lock("exhausted", SECOND)
            .await
            .expect_err("no connection to be had");
        assert!(
            matches!(err, LockError::Connection { .. }),
            "{protocol:?}: {err:?}"
        );
        assert!(
            started.elapsed() < 5 * SECOND,
            "bounded by the command timeout"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_arrives_after_its_ttl_is_not_a_lease() {
    let server = RedisServer::start();
    let proxy = lock_tests::proxy::Proxy::start(server.addr()).expect("proxy");
    let locker = Locker::builder()
        .url(proxy.url())
        .command_timeout(5 * SECOND)
        .build()
        .expect("locker");
    // Connect first, then slow every answer down past the TTL.
    let warm = locker.try_lock("slow", SECOND).await.expect("acquire");
    assert!(warm.release().await.expect("release"));
    proxy.set_latency(Duration::from_millis(300));
    match locker.try_lock("slow", Duration::from_millis(100)).await {
        Err(LockError::Connection { reason, .. }) => {
            assert!(reason.contains("too slow for this TTL"), "{reason}");
        }
        other => panic!("a lease that expired in flight must not be handed out: {other:?}"),
    }
    proxy.set_latency(Duration::ZERO);
    // It was given back, not left to its TTL (which has passed anyway) or to anyone else.
    assert!(server.command(&["EXISTS", "lock:{slow}"]).starts_with(":0"));
}

/// `Locker::shutdown` lets a program end without leaving dropped leases to their TTL: the
/// runtime below stops right after it, which would otherwise cancel background releases.
#[test]
fn shutdown_waits_for_the_releases_of_dropped_leases() {
    let server = RedisServer::start_debuggable();
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locker = Locker::from_url(&url).expect("locker");
        let leases = futures_util::future::join_all((0..20).map(|i| {
            locker
                .lock(format!("shutdown:{i}"))
                .ttl(60 * SECOND)
                .into_future()
        }))
        .await;
        // Slow the server down so that the releases are still in flight at the end.
        let stall = server.stall(Duration::from_millis(300));
        drop(leases);
        assert!(locker.shutdown(5 * SECOND).await, "every release finished");
        stall.join().expect("the server slept");
    });
    drop(runtime);
    for i in 0..20 {
        assert_eq!(
            server.command(&["EXISTS", &format!("lock:{{shutdown:{i}}}")]),
            ":0\r\n",
            "lock {i} left to its TTL"
        );
    }
}

/// A Locker on `held_on` takes `name` for a minute; a Locker on `waits_on` (another
/// process, as it were) waits up to 30 s for it in a task of its own.
async fn held_and_awaited(
    server: &RedisServer,
    held_on: Protocol,
    waits_on: Protocol,
    name: &'static str,
) -> (Lease, tokio::task::JoinHandle<Result<Lease, LockError>>) {
    let holder = Harness::locker_for(server, held_on);
    let waiter = Harness::locker_for(server, waits_on);
    let lease = holder.lock(name).ttl(60 * SECOND).await.expect("holder");
    let waiting =
        tokio::spawn(async move { waiter.lock(name).ttl(10 * SECOND).wait(30 * SECOND).await });
    (lease, waiting)
}

/// A WATCH/MULTI waiter learns of releases on the lock's release channel, but a holder on
/// Lua scripts releases an unmarked value with a silent compare-and-delete: the waiter
/// slept until its backoff (up to 5 s) or the holder's TTL while the lock lay free (found
/// by lock-torture's liveness rule in a mixed-protocol run). The waiter now marks the
/// holder's value, so that the release is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_waiter_is_told_of_a_scripts_holders_release() {
    let server = RedisServer::start();
    let (lease, waiting) =
        held_and_awaited(&server, Protocol::Scripts, Protocol::Transactions, "mixed").await;
    let marked = || {
        server
            .command(&["GET", "lock:{mixed}"])
            .lines()
            .any(|line| line.starts_with('~'))
    };
    let subscribed = || {
        server
            .command(&["PUBSUB", "NUMSUB", "lock:{mixed}:released"])
            .lines()
            .last()
            .is_some_and(|count| count.trim() != ":0" && count.trim() != "0")
    };
    crate::notified::until("the waiter to mark the holder's value", marked).await;
    crate::notified::until("the waiter to subscribe to the release channel", subscribed).await;
    assert!(
        lease.release().await.expect("release"),
        "still ours despite the mark"
    );
    let next = waiting
        .await
        .expect("join")
        .expect("the waiter takes the lock");
    assert!(next.release().await.expect("release"));
    assert!(!server.command(&["EXISTS", "lock:{mixed}"]).contains(":1"));
}

/// The other way round: a waiter on Lua scripts stands in the lock's Redis-side queue and
/// is told its turn by the release that hands the lock over, but a WATCH/MULTI release
/// deleted the key and announced it only on the release channel. The queued waiter slept
/// until its safety net or the holder's TTL while the lock lay free. The same release gives
/// back what a WATCH/MULTI multi-lock attempt took one by one before it met a busy name: a
/// single-lock request that arrived in that moment queued behind the never-granted value
/// and slept until its TTL (lock-torture's `liveness` rule, `--primitive multi`, issue 24).
/// The release now hands the lock to the queue's head as the release script does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_waiter_is_handed_a_transactions_holders_release() {
    let server = RedisServer::start();
    let (lease, waiting) =
        held_and_awaited(&server, Protocol::Transactions, Protocol::Scripts, "handed").await;
    crate::notified::until("the waiter to queue in Redis", || {
        crate::notified::queued(&server, "handed") == 1
    })
    .await;
    assert!(
        lease.release().await.expect("release"),
        "still ours despite the mark"
    );
    // Handed over: reserved for the head (or already claimed by it), not deleted. The
    // head's first look of its own comes a quarter of a second or more later.
    let stored = server.command(&["GET", "lock:{handed}"]);
    assert!(
        !stored.starts_with("$-1") && !stored.starts_with('_'),
        "the release left the lock free instead of handing it to the queued waiter: {stored:?}"
    );
    let next = waiting
        .await
        .expect("join")
        .expect("the waiter takes the lock");
    assert_eq!(crate::notified::queued(&server, "handed"), 0);
    assert!(next.release().await.expect("release"));
    assert!(!server.command(&["EXISTS", "lock:{handed}"]).contains(":1"));
}

/// A waiting multi-lock on WATCH/MULTI learns of releases on the release channel of the
/// name it found busy, but it never marked the holder's value (the mark went through a
/// script, which this protocol cannot run): a holder on Lua scripts released with a silent
/// compare-and-delete, and the multi-lock slept until its backoff or the holder's TTL while
/// every name lay free (lock-torture's liveness rule, `--primitive multi`, issue 24). Its
/// attempts now mark a busy holder's value as a single-lock waiter's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_multi_lock_marks_a_scripts_holders_value() {
    let server = RedisServer::start();
    let holder = Harness::locker_for(&server, Protocol::Scripts);
    let waiter = Harness::locker_for(&server, Protocol::Transactions);
    let lease = holder
        .lock("pair:b")
        .ttl(60 * SECOND)
        .await
        .expect("holder");
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .lock_all(["pair:a", "pair:b"])
                .ttl(10 * SECOND)
                .wait(30 * SECOND)
                .await
        })
    };
    crate::notified::until("the multi-lock to mark the holder's value", || {
        server
            .command(&["GET", "lock:{pair:b}"])
            .lines()
            .any(|line| line.starts_with('~'))
    })
    .await;
    assert!(
        lease.release().await.expect("release"),
        "still ours despite the mark"
    );
    let both = waiting
        .await
        .expect("join")
        .expect("the multi-lock takes both names");
    assert!(both.release().await.expect("release"));
}
