//! A release cancelled at any await (a `select!` that took its other branch, a `timeout`,
//! a shutdown) ends as if it had completed: the lock, permit, read-write hold or multi-lock
//! is freed for every Locker within a round trip, not left to its TTL, whether or not the
//! command had gone out; the releasing task's next request behaves as after a completed
//! release; and a permit the lost reply handed to a waiter of the releasing Locker reaches
//! that waiter. Every hold here has a 30 s TTL and every waiter a 5 s wait: a release left
//! to the TTL shows as a waiter that timed out.

use std::future::{Future, IntoFuture as _};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;
use tokio::task::JoinHandle;

use crate::harness::Harness;
use crate::queue::until;

const SECOND: Duration = Duration::from_secs(1);
const HOLD: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(5);

/// Polls `work` `polls` times (fewer if it ends first), yielding to the runtime between
/// polls so that what it handed the connection goes out, then drops it.
async fn drop_after_polls<F: Future + Send>(work: F, polls: u32) {
    let mut work: Pin<Box<F>> = Box::pin(work);
    for _ in 0..polls {
        let ended =
            std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx).is_ready()))
                .await;
        if ended {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// A waiter that takes `name` (waiting up to [`WAIT`]), holds it 10 ms and releases it;
/// ends with how long it waited.
fn lock_waiter(locker: &Locker, name: &str) -> JoinHandle<Result<Duration, LockError>> {
    let request = locker.lock(name).ttl(10 * SECOND).wait(WAIT).into_future();
    tokio::spawn(async move {
        let started = Instant::now();
        let lease = request.await?;
        let waited = started.elapsed();
        tokio::time::sleep(Duration::from_millis(10)).await;
        lease.release().await?;
        Ok(waited)
    })
}

/// Every waiter got its turn (none waited out its wait behind a release left to the TTL).
async fn all_served(what: &str, waiters: Vec<JoinHandle<Result<Duration, LockError>>>) {
    for waiter in waiters {
        let waited = waiter.await.expect("join");
        assert!(
            waited.is_ok(),
            "{what}: a waiter was not served while the lock was free: {waited:?}"
        );
    }
}

/// Whether `key` exists on `server`.
fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).trim() == ":1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_at_any_await_still_frees_the_lock_for_everyone() {
    let server = RedisServer::start();
    let ours = Locker::from_url(&server.url()).expect("locker");
    dropped_releases_free_the_lock(&server, &ours, 3).await;
}

/// The same for a holder on WATCH/MULTI, whose release hands over in more steps (its value
/// and the queue watched and read, `PUBSUB NUMSUB` for the waiters in line, then `EXEC`):
/// dropped after any of them, the lock still goes to the waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_multi_release_dropped_at_any_await_still_frees_the_lock_for_everyone() {
    let server = RedisServer::start();
    let ours = Locker::builder()
        .url(server.url())
        .protocol(lock_core::Protocol::Transactions)
        .build()
        .expect("WATCH/MULTI locker");
    dropped_releases_free_the_lock(&server, &ours, 6).await;
}

/// `ours` holds a name with a waiter of its own and one of another Locker queued, and its
/// release is dropped after 1 to `max_polls` polls; each time, every waiter is served.
async fn dropped_releases_free_the_lock(server: &RedisServer, ours: &Locker, max_polls: u32) {
    let theirs = Locker::from_url(&server.url()).expect("locker");
    for polls in 1..=max_polls {
        let name = format!("dropped-release:{polls}");
        let lease = ours.lock(name.as_str()).ttl(HOLD).await.expect("held");
        let waiters = vec![lock_waiter(&theirs, &name), lock_waiter(ours, &name)];
        until("both waiters wait", || {
            crate::queue::queued(server, &name) == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop_after_polls(lease.release(), polls).await;
        // The releasing task's next request is no lock of its own: it waits its turn.
        let again = ours.lock(name.as_str()).ttl(SECOND).wait(WAIT).await;
        assert!(
            again.is_ok(),
            "after {polls} poll(s): the releasing task's next request: {again:?}"
        );
        again.expect("checked").release().await.expect("release");
        all_served(&format!("after {polls} poll(s)"), waiters).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_with_its_command_sent_frees_the_lock_locally_too() {
    // The release reaches Redis (it is queued on the connection while the server sleeps)
    // but its reply is never read: the Locker must not go on believing it holds the name.
    let server = RedisServer::start_debuggable();
    let ours = Locker::from_url(&server.url()).expect("locker");
    for round in 0..3 {
        let name = format!("sent-release:{round}");
        let lease = ours.lock(name.as_str()).ttl(HOLD).await.expect("held");
        let waiters = vec![lock_waiter(&ours, &name)];
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stall = server.stall(Duration::from_millis(300));
        drop_after_polls(lease.release(), 3).await;
        stall.join().expect("stall");
        let again = ours.lock(name.as_str()).ttl(SECOND).wait(WAIT).await;
        assert!(
            again.is_ok(),
            "round {round}: the releasing task's next request: {again:?}"
        );
        again.expect("checked").release().await.expect("release");
        all_served(&format!("round {round}"), waiters).await;
        assert!(!exists(&server, &format!("lock:{{{name}}}")), "freed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_release_dropped_at_any_await_frees_every_master() {
    let h = Harness::redlock_debuggable(3);
    let theirs = h.second_locker();
    for round in 0..4u32 {
        let name = format!("redlock-dropped:{round}");
        let lease = h.locker.lock(name.as_str()).ttl(HOLD).await.expect("held");
        let waiters = vec![lock_waiter(&theirs, &name), lock_waiter(&h.locker, &name)];
        tokio::time::sleep(Duration::from_millis(80)).await;
        // Odd rounds: one master is slow, so the release is answered by two masters and
        // still in flight on the third when it is dropped.
        let stall = (round % 2 == 1).then(|| h.nodes[0].stall(Duration::from_millis(300)));
        drop_after_polls(lease.release(), 1 + round / 2).await;
        if let Some(stall) = stall {
            stall.join().expect("stall");
        }
        all_served(&format!("round {round}"), waiters).await;
        let key = format!("lock:{{{name}}}");
        until("every master freed", || {
            h.nodes.iter().all(|node| !exists(node, &key))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_releases_of_permits_rw_holds_and_multi_locks_free_them() {
    let server = RedisServer::start();
    let ours = Locker::from_url(&server.url()).expect("locker");
    let theirs = Locker::from_url(&server.url()).expect("locker");
    for polls in 1..=2 {
        // A semaphore of one permit.
        let name = format!("sem-dropped:{polls}");
        let permit = ours
            .semaphore(name.as_str(), 1)
            .acquire()
            .ttl(HOLD)
            .await
            .expect("permit");
        let waiting = tokio::spawn(
            theirs
                .semaphore(name.as_str(), 1)
                .acquire()
                .wait(WAIT)
                .into_future(),
        );
        tokio::time::sleep(Duration::from_millis(80)).await;
        drop_after_polls(permit.release(), polls).await;
        let next = waiting.await.expect("join");
        assert!(next.is_ok(), "semaphore, {polls} poll(s): {next:?}");

        // A read-write lock's writer.
        let name = format!("rw-dropped:{polls}");
        let writer = ours
            .rwlock(name.as_str())
            .write()
            .ttl(HOLD)
            .await
            .expect("write");
        let reading = tokio::spawn(theirs.rwlock(name.as_str()).read().wait(WAIT).into_future());
        tokio::time::sleep(Duration::from_millis(80)).await;
        drop_after_polls(writer.release(), polls).await;
        let next = reading.await.expect("join");
        assert!(next.is_ok(), "rwlock, {polls} poll(s): {next:?}");

        // A multi-lock of three names.
        let names: Vec<String> = (0..3)
            .map(|i| format!("multi-dropped:{polls}:{i}"))
            .collect();
        let all = ours.lock_all(names.clone()).ttl(HOLD).await.expect("multi");
        let waiters = vec![
            lock_waiter(&theirs, &names[0]),
            lock_waiter(&theirs, &names[2]),
        ];
        tokio::time::sleep(Duration::from_millis(80)).await;
        drop_after_polls(all.release(), polls).await;
        all_served(&format!("multi-lock, {polls} poll(s)"), waiters).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_handed_over_in_a_dropped_reply_reaches_its_waiter() {
    // The release hands the permit to a waiter of its own Locker inside the script and
    // tells it through the reply; the reply is never read.
    let server = RedisServer::start_debuggable();
    let ours = Locker::from_url(&server.url()).expect("locker");
    for round in 0..3 {
        let name = format!("sem-reply:{round}");
        let semaphore = ours.semaphore(name.as_str(), 1);
        let permit = semaphore.acquire().ttl(HOLD).await.expect("permit");
        let waiting = {
            let request = semaphore.acquire().ttl(HOLD).wait(WAIT).into_future();
            tokio::spawn(async move {
                let started = Instant::now();
                request.await.map(|permit| (started.elapsed(), permit))
            })
        };
        let queue = format!("lock:{{{name}}}:sem:q");
        until("the waiter queued", || {
            server.command(&["EXISTS", &queue]).trim() == ":1"
        })
        .await;
        let stall = server.stall(Duration::from_millis(300));
        drop_after_polls(permit.release(), 3).await;
        stall.join().expect("stall");
        let next = waiting.await.expect("join");
        match next {
            Ok((waited, permit)) => {
                assert!(waited < WAIT, "round {round}: served after {waited:?}");
                permit.release().await.expect("release");
            }
            Err(err) => panic!("round {round}: the waiter never got its permit: {err:?}"),
        }
    }
}

// One thread: the connection's task cannot answer the release within the poll that
// starts it, so each round drops a release still in flight.
#[tokio::test(flavor = "current_thread")]
async fn using_dropped_while_it_releases_frees_the_lock() {
    let server = RedisServer::start();
    let ours = Locker::from_url(&server.url()).expect("locker");
    let theirs = Locker::from_url(&server.url()).expect("locker");
    for round in 0..3 {
        let name = format!("using-dropped:{round}");
        let done = Arc::new(AtomicBool::new(false));
        let work = {
            let done = Arc::clone(&done);
            ours.lock(name.as_str())
                .ttl(HOLD)
                .using(|_lease| async move {
                    done.store(true, Ordering::SeqCst);
                    Ok::<_, LockError>(())
                })
        };
        let mut work = Box::pin(work);
        let mut waiters = Vec::new();
        // Polled until the work has run (that poll also starts the release), then dropped:
        // a `select!` whose other branch won as the work ended.
        while !done.load(Ordering::SeqCst) {
            let ended = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(work.as_mut().poll(cx).is_ready())
            })
            .await;
            assert!(!ended, "the work ended before it was seen done");
            if waiters.is_empty() && exists(&server, &format!("lock:{{{name}}}")) {
                waiters.push(lock_waiter(&theirs, &name));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(work);
        if waiters.is_empty() {
            waiters.push(lock_waiter(&theirs, &name));
        }
        all_served(&format!("round {round}"), waiters).await;
    }
}

#[lock_core::redis_locked(key = "macro-dropped:{round}", ttl = "30s", wait = "5s", locker = locker)]
async fn annotated(locker: &Locker, round: u32, done: &AtomicBool) -> Result<(), LockError> {
    done.store(true, Ordering::SeqCst);
    Ok(())
}

// One thread, as for `using` above.
#[tokio::test(flavor = "current_thread")]
async fn an_annotated_call_dropped_while_it_releases_frees_the_lock() {
    let server = RedisServer::start();
    let ours = Locker::from_url(&server.url()).expect("locker");
    let theirs = Locker::from_url(&server.url()).expect("locker");
    for round in 0..3u32 {
        let done = AtomicBool::new(false);
        let mut call = Box::pin(annotated(&ours, round, &done));
        while !done.load(Ordering::SeqCst) {
            let ended = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(call.as_mut().poll(cx).is_ready())
            })
            .await;
            assert!(!ended, "the call ended before it was seen done");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(call);
        all_served(
            &format!("round {round}"),
            vec![lock_waiter(&theirs, &format!("macro-dropped:{round}"))],
        )
        .await;
    }
}
