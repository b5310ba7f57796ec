//! A multi-lock on one Redis taken and given back in one script each way: what a cycle
//! costs in Redis calls (inner script calls included), and that the one release script
//! keeps every promise of the locks' own release: nobody else's lock touched, a name handed
//! to the single-lock waiter queued for it, WATCH/MULTI waiters told on the release channel.

use std::future::IntoFuture as _;
use std::time::Duration;

use lock_core::{Locker, Protocol};
use lock_tests::RedisServer;

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Every command Redis ran since the last `CONFIG RESETSTAT`, inner script calls included,
/// INFO and CONFIG left out: `(command, calls)`.
fn calls(server: &RedisServer) -> Vec<(String, u64)> {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.trim().strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let n = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), n))
        })
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .collect()
}

fn total(calls: &[(String, u64)]) -> u64 {
    calls.iter().map(|(_, n)| n).sum()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).contains(":1")
}

/// Before, a multi-lock of N free names cost 2N + 1 calls to take (a script, then GET and
/// SET per name) and 3N to give back (each name's release script: EVALSHA, GET, DEL): 21
/// at N = 4, more than the 16 of N plain locks. Now one script each way: EVALSHA, one
/// EXISTS, N SETs; EVALSHA, one MGET, one DEL. At most 4 calls per name at N = 2, 4, 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_cycle_costs_at_most_four_redis_calls_per_name() {
    let server = RedisServer::start();
    let lockers = [
        Locker::from_url(&server.url()).expect("locker"),
        Harness::functions_locker(&server),
    ];
    for (earlier, locker) in lockers.iter().enumerate() {
        for n in [2usize, 4, 8] {
            let names: Vec<String> = (0..n).map(|i| format!("cost:{n}:{i}")).collect();
            // Warm: scripts loaded, connection open, and the watch connection's set-up done.
            let warm = locker.lock_all(names.clone()).ttl(10 * SECOND).await;
            assert!(warm.expect("free names").release().await.expect("release"));
            server.until_watching(earlier + 1).await;
            server.command(&["CONFIG", "RESETSTAT"]);
            let lease = locker
                .lock_all(names.clone())
                .ttl(10 * SECOND)
                .await
                .expect("free names");
            let taking = calls(&server);
            assert!(lease.release().await.expect("release"), "all still ours");
            let cycle = calls(&server);
            assert!(
                total(&taking) <= n as u64 + 2,
                "taking {n} names: {taking:?}"
            );
            assert!(
                total(&cycle) <= 4 * n as u64,
                "a cycle of {n} names costs {} calls, more than 4 per name: {cycle:?}",
                total(&cycle)
            );
            for name in &names {
                assert!(
                    !exists(&server, &format!("lock:{{{name}}}")),
                    "{name} freed"
                );
            }
        }
    }
}

/// The release script gives up only what still holds the lease's value: a name that
/// expired and was taken by someone else meanwhile stays theirs, the release reports the
/// loss, and the other names are freed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_release_leaves_a_name_someone_else_took() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let other = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock_all(["lost:a", "lost:b", "lost:c"])
        .ttl(30 * SECOND)
        .await
        .expect("free names");
    // As if lost:b had expired and another holder had taken it.
    server.command(&["DEL", "lock:{lost:b}"]);
    let theirs = other
        .try_lock("lost:b", 30 * SECOND)
        .await
        .expect("free now");
    assert!(
        !lease.release().await.expect("release"),
        "one name was no longer ours"
    );
    assert!(!exists(&server, "lock:{lost:a}"));
    assert!(!exists(&server, "lock:{lost:c}"));
    assert!(
        theirs.is_held().await.expect("held"),
        "the other holder keeps it"
    );
    assert!(theirs.release().await.expect("release"));
}

/// A single-lock waiter of another Locker queues for a name the multi-lock holds (and marks
/// its value as listened for): the multi-lock's one release script hands that name to the
/// waiter, reserved on the key, as a plain lock's release does, and frees the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_release_hands_a_name_to_its_queued_waiter() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let waiter = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock_all(["hand:a", "hand:b"])
        .ttl(60 * SECOND)
        .await
        .expect("free names");
    let waiting = tokio::spawn(
        waiter
            .lock("hand:b")
            .ttl(10 * SECOND)
            .wait(30 * SECOND)
            .into_future(),
    );
    crate::notified::until("the waiter to queue in Redis", || {
        crate::notified::queued(&server, "hand:b") == 1
    })
    .await;
    assert!(
        server.command(&["GET", "lock:{hand:b}"]).contains('~'),
        "the queued waiter marked the value"
    );
    assert!(
        lease.release().await.expect("release"),
        "still ours, marked"
    );
    assert!(!exists(&server, "lock:{hand:a}"), "the other name freed");
    let next = waiting
        .await
        .expect("join")
        .expect("the waiter is handed the name");
    assert_eq!(crate::notified::queued(&server, "hand:b"), 0);
    assert!(next.release().await.expect("release"));
    assert!(!exists(&server, "lock:{hand:b}"));
}

/// A WATCH/MULTI waiter marks the multi-lock's value and listens on the name's release
/// channel: the one release script announces the release there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_release_is_announced_to_a_transactions_waiter() {
    let server = RedisServer::start();
    let holder = Harness::locker_for(&server, Protocol::Scripts);
    let waiter = Harness::locker_for(&server, Protocol::Transactions);
    let lease = holder
        .lock_all(["told:a", "told:b"])
        .ttl(60 * SECOND)
        .await
        .expect("free names");
    let waiting = tokio::spawn(
        waiter
            .lock("told:a")
            .ttl(10 * SECOND)
            .wait(30 * SECOND)
            .into_future(),
    );
    crate::notified::until("the waiter to mark the value", || {
        server.command(&["GET", "lock:{told:a}"]).contains('~')
    })
    .await;
    server.command(&["CONFIG", "RESETSTAT"]);
    assert!(
        lease.release().await.expect("release"),
        "still ours, marked"
    );
    let published = calls(&server)
        .into_iter()
        .find(|(name, _)| name == "publish")
        .map_or(0, |(_, n)| n);
    assert!(published >= 1, "the release was announced");
    let next = waiting.await.expect("join").expect("the waiter takes it");
    assert!(next.release().await.expect("release"));
}
