//! Cancelled requests leave the Redis-side waiter queue: a request dropped at any point of
//! its wait (alone, or together with another request of its Locker on the same name) takes
//! its Locker's place out of the queue, so that the next release goes to a live waiter
//! instead of being reserved for a Locker that no longer wants the lock.

use std::future::IntoFuture as _;
use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// The members of lock `name`'s waiter queue (each a waiting Locker's channel).
fn queue_of(server: &RedisServer, name: &str) -> Vec<String> {
    let reply = server.command(&["ZRANGE", &format!("lock:{{{name}}}:q"), "0", "-1"]);
    // RESP: "*N", then "$len", "member" pairs.
    reply
        .lines()
        .skip(1)
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Whether `name`'s queue keys are gone (the queue and its entries).
fn queue_keys_gone(server: &RedisServer, name: &str) -> bool {
    let exists = server.command(&[
        "EXISTS",
        &format!("lock:{{{name}}}:q"),
        &format!("lock:{{{name}}}:qe"),
    ]);
    exists.trim() == ":0"
}

/// Waits (up to `within`) for `check`; whether it came true.
async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `request` until it has returned `Pending` `polls` times (or ends), then drops it.
async fn drop_after_polls<F: std::future::Future + Unpin>(mut request: F, polls: u64) {
    let mut left = polls;
    std::future::poll_fn(|cx| {
        if std::pin::Pin::new(&mut request).poll(cx).is_ready() {
            return std::task::Poll::Ready(());
        }
        left -= 1;
        if left == 0 {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Polls `request` until Redis has its Locker in `name`'s queue, checked before each poll,
/// then drops it without letting it see the reply that says so.
async fn drop_once_queued<F: std::future::Future + Unpin>(
    mut request: F,
    server: &RedisServer,
    name: &str,
) {
    std::future::poll_fn(|cx| {
        if !queue_of(server, name).is_empty()
            || std::pin::Pin::new(&mut request).poll(cx).is_ready()
        {
            return std::task::Poll::Ready(());
        }
        std::task::Poll::Pending
    })
    .await;
}

/// After the cancellations: a new waiter of another Locker queues alone, and the holder's
/// release hands the lock to it (not to a cancelled Locker's ghost place).
async fn next_waiter_is_served(server: &RedisServer, holder: lock_core::Lease, name: &str) {
    let next = Locker::from_url(&server.url()).expect("locker");
    let waiting = tokio::spawn(
        next.lock(name)
            .ttl(10 * SECOND)
            .wait(30 * SECOND)
            .into_future(),
    );
    assert!(
        eventually(10 * SECOND, || !queue_of(server, name).is_empty()).await,
        "the new waiter queued"
    );
    let queue = queue_of(server, name);
    assert_eq!(queue.len(), 1, "only the live waiter is queued: {queue:?}");
    assert!(holder.release().await.expect("release"));
    let lease = waiting
        .await
        .expect("join")
        .expect("the live waiter's turn");
    assert!(lease.is_held().await.expect("held"));
    assert!(lease.release().await.expect("release"));
    assert!(queue_keys_gone(server, name), "nothing left queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_of_one_locker_dropped_together_leave_the_queue() {
    let server = RedisServer::start();
    let holders = Locker::from_url(&server.url()).expect("locker");
    let waiters = Locker::from_url(&server.url()).expect("locker");
    let mut ghosts = Vec::new();
    for round in 0..8u64 {
        let name = format!("pair:{round}");
        let holder = holders
            .lock(name.as_str())
            .ttl(60 * SECOND)
            .await
            .expect("held");
        // One task, two requests of one Locker on one name: one stands in the Redis queue,
        // the other waits behind it at the Locker's local gate. `join!` drops the first
        // before the second: alternate which of them stands in the queue.
        let task = {
            let (waiters, name) = (waiters.clone(), name.clone());
            let queued_first = round % 2 == 0;
            tokio::spawn(async move {
                let request = || waiters.lock(name.as_str()).wait(60 * SECOND).into_future();
                let late = |delayed: bool| {
                    let request = request();
                    async move {
                        if delayed {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        request.await
                    }
                };
                let _ = tokio::join!(late(!queued_first), late(queued_first));
            })
        };
        assert!(
            eventually(10 * SECOND, || queue_of(&server, &name).len() == 1).await,
            "the pair queued"
        );
        // Let the other request reach the gate.
        tokio::time::sleep(Duration::from_millis(40 + round * 3)).await;
        task.abort();
        let _ = task.await;
        if !eventually(2 * SECOND, || queue_keys_gone(&server, &name)).await {
            ghosts.push((round, queue_of(&server, &name)));
            server.command(&[
                "DEL",
                &format!("lock:{{{name}}}:q"),
                &format!("lock:{{{name}}}:qe"),
            ]);
        }
        next_waiter_is_served(&server, holder, &name).await;
    }
    assert!(
        ghosts.is_empty(),
        "cancelled pairs left their Locker queued (round, queue): {ghosts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_at_any_point_of_its_wait_leaves_the_queue() {
    let server = RedisServer::start();
    let holders = Locker::from_url(&server.url()).expect("locker");
    let waiters = Locker::from_url(&server.url()).expect("locker");
    let rounds = 100u64;
    let mut held = Vec::new();
    for round in 0..rounds {
        let name = format!("drop:{round}");
        held.push(
            holders
                .lock(name.as_str())
                .ttl(60 * SECOND)
                .await
                .expect("held"),
        );
        // Dropped after its n-th poll (each poll after the first is a wake-up: a reply, a
        // notification, a timer), n sweeping the fast path, the listening, the first
        // queued attempt and the wait after it; every fifth round instead after a delay.
        let request = waiters.lock(name.as_str()).wait(60 * SECOND).into_future();
        if round % 2 == 0 {
            // Dropped at the first wake-up after Redis queued it: the queued attempt's reply
            // is on its way, the request has not seen it.
            let _ = tokio::time::timeout(SECOND, drop_once_queued(request, &server, &name)).await;
        } else if round % 5 == 4 {
            let _ = tokio::time::timeout(Duration::from_millis(round / 5), request).await;
        } else {
            let polls = 1 + round % 5 + (round / 5) % 4;
            // A request sleeping in the queue is polled again only when woken: not later
            // than 50 ms, then.
            let _ =
                tokio::time::timeout(Duration::from_millis(50), drop_after_polls(request, polls))
                    .await;
        }
    }
    let mut ghosts = Vec::new();
    for round in 0..rounds {
        let name = format!("drop:{round}");
        if !eventually(SECOND / 10, || queue_keys_gone(&server, &name)).await {
            ghosts.push(round);
        }
    }
    eprintln!(
        "cancelled requests that left an entry: {} of {rounds}",
        ghosts.len()
    );
    assert!(
        ghosts.is_empty(),
        "cancelled requests left their Locker queued (rounds): {ghosts:?}"
    );
    let holder = held.pop().expect("a holder");
    next_waiter_is_served(&server, holder, &format!("drop:{}", rounds - 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_request_is_not_taken_out_by_the_previous_requests_leave() {
    let server = RedisServer::start();
    let holders = Locker::from_url(&server.url()).expect("locker");
    let waiters = Locker::from_url(&server.url()).expect("locker");
    let mut lost = Vec::new();
    for round in 0..20u64 {
        let name = format!("again:{round}");
        let holder = holders
            .lock(name.as_str())
            .ttl(60 * SECOND)
            .await
            .expect("held");
        // The leave script is not cached: the previous request's leave takes two round
        // trips (NOSCRIPT, then EVAL), as long as the new request's SET and queued attempt.
        let first = tokio::spawn(waiters.lock(name.as_str()).wait(60 * SECOND).into_future());
        assert!(
            eventually(10 * SECOND, || queue_of(&server, &name).len() == 1).await,
            "the first request queued"
        );
        server.command(&["SCRIPT", "FLUSH"]);
        first.abort();
        let _ = first.await;
        let again = tokio::spawn(waiters.lock(name.as_str()).wait(60 * SECOND).into_future());
        // Whatever the order the leave and the new request's attempts landed in, the new
        // request stands in the queue once things settle.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if queue_of(&server, &name).len() != 1 {
            lost.push(round);
        }
        again.abort();
        let _ = again.await;
        assert!(
            eventually(10 * SECOND, || queue_keys_gone(&server, &name)).await,
            "the aborted request left"
        );
        drop(holder);
    }
    assert!(
        lost.is_empty(),
        "the previous request's leave took the new request's place (rounds): {lost:?}"
    );
}
