//! A semaphore's hand-off between Lockers: a released permit goes to the next waiter of
//! another Locker outright (told with the grant's server time; no claim follows), so the
//! release must not hand it to a Locker that is gone, and a waiter whose request ended as
//! the grant came must give it back.

use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;

use crate::permit_costs::assert_idle;
use crate::queue::{die_while_queued, until};

const SECOND: Duration = Duration::from_secs(1);
const NAME: &str = "handoff";
const HOLDERS: &str = "lock:{handoff}:sem";
const QUEUE: &str = "lock:{handoff}:sem:q";

fn queued(server: &RedisServer) -> usize {
    server
        .command(&["ZCARD", QUEUE])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or(0)
}

/// The live holders: each member with how long it has left by the server's clock (ms).
fn holders(server: &RedisServer) -> Vec<(String, i64)> {
    let now: i64 = {
        let time = lock_tests::cluster::bulk_strings(&server.command(&["TIME"]));
        let seconds: i64 = time.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let micros: i64 = time.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        seconds * 1000 + micros / 1000
    };
    let rows = lock_tests::cluster::bulk_strings(&server.command(&[
        "ZRANGEBYSCORE",
        HOLDERS,
        "(0",
        "+inf",
        "WITHSCORES",
    ]));
    rows.chunks(2)
        .filter_map(|row| Some((row[0].clone(), row.get(1)?.parse::<i64>().ok()? - now)))
        .collect()
}

/// Three waiters die in line ahead of a live one. The release finds their Lockers gone
/// (its message reaches nobody), drops them, and grants the permit to the live waiter, for
/// its own TTL, in the same step: no permit granted to, or reserved for, a dead waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_passes_over_waiters_whose_locker_is_gone() {
    let server = RedisServer::start();
    let holder = Locker::from_url(&server.url()).expect("locker");
    let permit = holder
        .semaphore(NAME, 1)
        .try_acquire(30 * SECOND)
        .await
        .expect("permit");
    for dead in 1..=3 {
        let url = server.url();
        let make = move || Locker::from_url(&url).expect("locker");
        let doomed = |locker: Locker| async move {
            let semaphore = locker.semaphore(NAME, 1);
            let _ = semaphore.acquire().ttl(10 * SECOND).wait(60 * SECOND).await;
        };
        // Its runtime is dropped where it stands (no give-back runs), and with it its
        // connections: Redis drops its Locker's subscription, as for a killed process.
        die_while_queued(make, doomed, || queued(&server) == dead).await;
    }
    let live = Locker::from_url(&server.url()).expect("locker");
    let semaphore = live.semaphore(NAME, 1);
    let waiter =
        tokio::spawn(async move { semaphore.acquire().ttl(20 * SECOND).wait(30 * SECOND).await });
    until("the live waiter to queue", || queued(&server) == 4).await;
    assert!(permit.release().await.expect("release"));
    // Right after the release, before the waiter can have done anything.
    let held = holders(&server);
    assert_eq!(
        queued(&server),
        0,
        "dead entries left in line; holders {held:?}"
    );
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(
        held[0].1 > 10_000,
        "granted for the live waiter's 20 s TTL, not reserved for a claim window: {held:?}"
    );
    let permit = waiter
        .await
        .expect("join")
        .expect("the live waiter's permit");
    assert!(
        held[0].0.starts_with(&format!("1 {}", permit.token())),
        "{held:?}"
    );
    assert!(permit.release().await.expect("release"));
    assert_idle(&server, HOLDERS);
}

/// A waiter whose request is dropped just as a release of another Locker grants it the
/// permit gives the permit back (its guard, in the background): the permit is free again
/// long before its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_request_that_just_ended_is_given_back() {
    let server = RedisServer::start();
    let holder = Locker::from_url(&server.url()).expect("locker");
    let other = Locker::from_url(&server.url()).expect("locker");
    for round in 0..20 {
        let permit = holder
            .semaphore(NAME, 1)
            .try_acquire(30 * SECOND)
            .await
            .expect("permit");
        let semaphore = other.semaphore(NAME, 1);
        let waiter =
            tokio::spawn(
                async move { semaphore.acquire().ttl(30 * SECOND).wait(30 * SECOND).await },
            );
        until("the waiter to queue", || queued(&server) == 1).await;
        // The release and the drop race: the grant may reach the waiter before, during or
        // after its request ends.
        let release = tokio::spawn(async move { permit.release().await });
        if round % 2 == 1 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        // Had the request already ended granted, its permit is in the task's output: dropped
        // here (a permit dropped is given back too).
        drop(waiter.await);
        assert!(release.await.expect("join").expect("release"));
        until("the grant to the dropped request to be given back", || {
            holders(&server).is_empty()
        })
        .await;
        assert_idle(&server, HOLDERS);
    }
}

/// A blocked head hears when to look again only when the first end moved sooner than what
/// its queued attempt told it: here a grant with a TTL shorter than every other holder's.
/// Its holder dies with it; the waiter behind (told, though of another Locker) takes the
/// permit when that short TTL ends, not when the long holders' would (30 s; its wait is
/// 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_is_told_when_a_shorter_grant_moves_the_first_end() {
    let server = RedisServer::start();
    let holder = Locker::from_url(&server.url()).expect("locker");
    let semaphore = holder.semaphore(NAME, 2);
    let first = semaphore.try_acquire(30 * SECOND).await.expect("permit");
    let second = semaphore.try_acquire(30 * SECOND).await.expect("permit");
    let url = server.url();
    let make = move || Locker::from_url(&url).expect("locker");
    // Granted a 500 ms permit, then its process dies holding it.
    let doomed = |locker: Locker| async move {
        let semaphore = locker.semaphore(NAME, 2);
        if let Ok(permit) = semaphore
            .acquire()
            .ttl(Duration::from_millis(500))
            .wait(30 * SECOND)
            .await
        {
            std::future::pending::<()>().await;
            drop(permit);
        }
    };
    let behind = Locker::from_url(&server.url()).expect("locker");
    let (_, waiter) = tokio::join!(
        die_while_queued(make, doomed, || {
            holders(&server).iter().any(|(_, left)| *left < 1_000)
        }),
        async {
            until("the short waiter to queue", || queued(&server) == 1).await;
            let semaphore = behind.semaphore(NAME, 2);
            let waiter =
                tokio::spawn(
                    async move { semaphore.acquire().ttl(30 * SECOND).wait(5 * SECOND).await },
                );
            until("the waiter behind to queue", || queued(&server) == 2).await;
            assert!(first.release().await.expect("release"));
            waiter.await.expect("join")
        }
    );
    let permit = waiter
        .expect("the permit once the dead holder's short TTL ended, not at the long holders' ends");
    assert!(permit.release().await.expect("release"));
    assert!(second.release().await.expect("release"));
    assert_idle(&server, HOLDERS);
}

/// A holder that shortens its permit below every other holder's end while someone waits
/// moves the first end sooner: the waiter at the head (of another Locker, timed to look at
/// the long holders' 30 s end) is told to look by the new end. The holder then dies holding
/// it; the waiter takes the permit when that end comes, within its 5 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_shortened_by_its_holder_is_told_to_the_head() {
    let server = RedisServer::start();
    let url = server.url();
    let make = move || Locker::from_url(&url).expect("locker");
    let holder = Locker::from_url(&server.url()).expect("locker");
    let long = holder
        .semaphore(NAME, 2)
        .try_acquire(30 * SECOND)
        .await
        .expect("permit");
    let waiting = Locker::from_url(&server.url()).expect("locker");
    let semaphore = waiting.semaphore(NAME, 2);
    let (_, waiter) = tokio::join!(
        // Takes a 30 s permit, queues the waiter behind it, shortens it to 500 ms, and
        // dies holding it.
        die_while_queued(
            make,
            |locker: Locker| async move {
                let semaphore = locker.semaphore(NAME, 2);
                if let Ok(permit) = semaphore.try_acquire(30 * SECOND).await {
                    while queued_on(&locker).await != 1 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    if permit.extend(Duration::from_millis(500)).await.is_ok() {
                        std::future::pending::<()>().await;
                    }
                    drop(permit);
                }
            },
            || holders(&server).iter().any(|(_, left)| *left < 1_000),
        ),
        async {
            until("the first two holders", || holders(&server).len() == 2).await;
            let waiter =
                tokio::spawn(
                    async move { semaphore.acquire().ttl(30 * SECOND).wait(5 * SECOND).await },
                );
            waiter.await.expect("join")
        }
    );
    let permit = waiter.expect("the permit once the shortened permit ended, not after 30 s");
    assert!(permit.release().await.expect("release"));
    assert!(long.release().await.expect("release"));
    assert_idle(&server, HOLDERS);
}

/// How many wait in the test name's queue, asked through `locker`'s own view.
async fn queued_on(locker: &Locker) -> u64 {
    locker
        .semaphore(NAME, 2)
        .holders()
        .await
        .map_or(0, |info| info.waiting)
}
