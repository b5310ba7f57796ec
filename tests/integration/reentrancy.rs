//! `#[redis_locked]` calls nested on one task: reentrant while the outer lease is held, and
//! refused once it is lost.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use lock_core::{current_lease, redis_locked, LockError, Locker};
use lock_tests::RedisServer;

#[redis_locked(key = "reentry:{id}", ttl = "600ms", wait = "0s", locker = locker)]
async fn nested_write(locker: &Locker, id: u32, writes: &AtomicU32) -> Result<(), LockError> {
    writes.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Loses its lock to `rival` mid-body, then calls `nested_write` on the same key.
#[redis_locked(key = "reentry:{id}", ttl = "600ms", wait = "0s", locker = locker)]
async fn outer_losing_its_lock(
    locker: &Locker,
    id: u32,
    server: &RedisServer,
    rival: &Locker,
    wait_for_loss_signal: bool,
    writes: &AtomicU32,
    nested: &Mutex<Option<Result<(), LockError>>>,
) -> Result<(), LockError> {
    let lease = current_lease().expect("a lease inside the body");
    // An operator's DEL (or a failover that lost the write), then another process takes it.
    assert!(server.command(&["DEL", lease.key()]).starts_with(":1"));
    let theirs = rival
        .try_lock(format!("reentry:{id}"), Duration::from_secs(5))
        .await
        .expect("the rival takes the deleted lock");
    if wait_for_loss_signal {
        // The renewer (every 200 ms) finds the lock gone and fires `lost()`.
        tokio::time::timeout(Duration::from_secs(3), lease.lost())
            .await
            .expect("the loss was signalled");
    }
    let result = nested_write(locker, id, writes).await;
    *nested.lock().expect("mutex") = Some(result);
    assert!(theirs.release().await.expect("rival release"));
    Ok(())
}

/// Regression (issue 13): the reentrancy check looked only for a lease of the same name on
/// the task, never at whether it was lost, so the nested critical section ran while another
/// process held the lock, and returned `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_never_runs_on_a_lost_lease() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let rival = Locker::from_url(&server.url()).expect("rival locker, as another process");
    for (id, wait_for_loss_signal) in [(1, true), (2, false)] {
        let writes = AtomicU32::new(0);
        let nested = Mutex::new(None);
        let outer = outer_losing_its_lock(
            &locker,
            id,
            &server,
            &rival,
            wait_for_loss_signal,
            &writes,
            &nested,
        )
        .await;
        assert_eq!(
            writes.load(Ordering::SeqCst),
            0,
            "case {id}: the nested body ran beside the rival"
        );
        match nested.lock().expect("mutex").take() {
            Some(Err(LockError::Lost { name })) => assert_eq!(name, format!("reentry:{id}")),
            other => panic!("case {id}: expected the nested call to be Lost, got {other:?}"),
        }
        // The outer body finished: by default its result stands (the loss is reported).
        assert!(outer.is_ok(), "case {id}: {outer:?}");
    }
}

#[redis_locked(key = "reentry:held", wait = "0s", locker = locker)]
async fn outer_holding(locker: &Locker, writes: &AtomicU32) -> Result<(), LockError> {
    nested_held(locker, writes).await
}

#[redis_locked(key = "reentry:held", wait = "0s", locker = locker)]
async fn nested_held(locker: &Locker, writes: &AtomicU32) -> Result<(), LockError> {
    writes.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_on_a_held_lease_is_reentrant() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let writes = AtomicU32::new(0);
    outer_holding(&locker, &writes).await.expect("both run");
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert!(locker
        .inspect("reentry:held")
        .await
        .expect("inspect")
        .is_none());
}

/// How many `critical` bodies are inside at once, and the most ever seen.
#[derive(Default)]
struct Inside {
    now: AtomicU32,
    most: AtomicU32,
    entered: AtomicU32,
}

impl Inside {
    /// Enters, stays across a few awaits (so that a sibling future gets polled meanwhile),
    /// and leaves.
    async fn visit(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.entered.fetch_add(1, Ordering::SeqCst);
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            tokio::task::yield_now().await;
        }
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn most(&self) -> u32 {
        self.most.load(Ordering::SeqCst)
    }
}

#[redis_locked(key = "acct:{id}", wait = "0s", locker = locker)]
async fn critical(locker: &Locker, id: u32, inside: &Inside) -> Result<(), LockError> {
    inside.visit().await;
    Ok(())
}

#[redis_locked(key = "acct:{id}", wait = "5s", locker = locker)]
async fn critical_patient(locker: &Locker, id: u32, inside: &Inside) -> Result<(), LockError> {
    inside.visit().await;
    Ok(())
}

/// A nested call that itself nests: the lease it borrowed is lent on to its own nested call.
#[redis_locked(key = "acct:{id}", wait = "0s", locker = locker)]
async fn critical_nesting(locker: &Locker, id: u32, inside: &Inside) -> Result<(), LockError> {
    critical(locker, id, inside).await
}

/// How the locked body calls its siblings.
#[derive(Clone, Copy, Debug)]
enum Siblings {
    JoinTry,
    JoinPatient,
    Select,
    JoinAll,
    Unordered,
    Nesting,
}

type Outcomes = Vec<Result<(), LockError>>;

#[redis_locked(key = "acct:{id}", wait = "0s", locker = locker)]
async fn account(
    locker: &Locker,
    id: u32,
    how: Siblings,
    inside: &Inside,
) -> Result<Outcomes, LockError> {
    use futures_util::stream::{FuturesUnordered, StreamExt as _};
    Ok(match how {
        Siblings::JoinTry => {
            let (a, b) = tokio::join!(critical(locker, id, inside), critical(locker, id, inside));
            vec![a, b]
        }
        Siblings::JoinPatient => {
            let (a, b) = tokio::join!(
                critical_patient(locker, id, inside),
                critical_patient(locker, id, inside)
            );
            vec![a, b]
        }
        Siblings::Select => {
            let first = tokio::select! {
                a = critical_patient(locker, id, inside) => a,
                b = critical_patient(locker, id, inside) => b,
            };
            vec![first]
        }
        Siblings::JoinAll => {
            futures_util::future::join_all((0..3).map(|_| critical_patient(locker, id, inside)))
                .await
        }
        Siblings::Unordered => {
            let mut calls: FuturesUnordered<_> = (0..3)
                .map(|_| critical_patient(locker, id, inside))
                .collect();
            let mut outcomes = Vec::new();
            while let Some(outcome) = calls.next().await {
                outcomes.push(outcome);
            }
            outcomes
        }
        Siblings::Nesting => {
            let (a, b) = tokio::join!(
                critical_nesting(locker, id, inside),
                critical_patient(locker, id, inside)
            );
            vec![a, b]
        }
    })
}

/// Regression (issue 24, defect 1): reentrancy was decided per task, so every sibling future
/// of the holder counted as the holder, and two nested calls of one key ran at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sibling_nested_calls_of_one_key_never_run_at_once() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    for (id, how) in [
        (1, Siblings::JoinTry),
        (2, Siblings::JoinPatient),
        (3, Siblings::Select),
        (4, Siblings::JoinAll),
        (5, Siblings::Unordered),
        (6, Siblings::Nesting),
    ] {
        let inside = Inside::default();
        let outcomes = account(&locker, id, how, &inside)
            .await
            .unwrap_or_else(|err| panic!("{how:?}: the outer call failed: {err}"));
        assert_eq!(
            inside.most(),
            1,
            "{how:?}: two nested bodies of `acct:{id}` ran at once ({outcomes:?})"
        );
        match how {
            // At wait zero the sibling that finds the lease lent out is Busy, at once.
            Siblings::JoinTry => {
                assert!(outcomes[0].is_ok(), "{how:?}: {outcomes:?}");
                match &outcomes[1] {
                    Err(LockError::Busy { name, holder, .. }) => {
                        assert_eq!(name, &format!("acct:{id}"));
                        let holder = holder.as_deref().unwrap_or_default();
                        assert!(holder.contains("this task"), "{holder}");
                    }
                    other => panic!("{how:?}: expected the second sibling Busy, got {other:?}"),
                }
            }
            // The first of `select!` wins; the other is dropped, still waiting.
            Siblings::Select => assert!(outcomes[0].is_ok(), "{how:?}: {outcomes:?}"),
            // With a wait, each sibling takes its turn with the lease.
            _ => {
                assert!(outcomes.iter().all(Result::is_ok), "{how:?}: {outcomes:?}");
                let expected = if matches!(how, Siblings::JoinPatient | Siblings::Nesting) {
                    2
                } else {
                    3
                };
                assert_eq!(inside.entered.load(Ordering::SeqCst), expected, "{how:?}");
            }
        }
        assert!(
            locker
                .inspect(&format!("acct:{id}"))
                .await
                .expect("inspect")
                .is_none(),
            "{how:?}: released after the outer body"
        );
    }
}

#[redis_locked(key = "acct:{id}", wait = "0s", locker = locker)]
async fn account_spawning(locker: &Locker, id: u32) -> Result<Result<(), LockError>, LockError> {
    let spawned = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let inside = Inside::default();
            critical(&locker, id, &inside).await
        })
    };
    Ok(spawned.await.expect("the spawned task ran"))
}

/// A spawned task is not the holder: it does not borrow the lease, it contends for the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_call_is_not_the_holder() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    match account_spawning(&locker, 9).await.expect("outer") {
        Err(LockError::Busy { name, .. }) => assert_eq!(name, "acct:9"),
        other => panic!("expected the spawned call Busy on the held lock, got {other:?}"),
    }
}

#[redis_locked(key = "stack:limit", permits = 2, wait = "0s", locker = locker)]
async fn limited_inside(locker: &Locker) -> Result<Option<String>, LockError> {
    Ok(current_lease().map(|lease| lease.name().to_owned()))
}

#[redis_locked(key = "stack:outer", wait = "0s", locker = locker)]
async fn plain_around_limited(
    locker: &Locker,
) -> Result<(Option<String>, Option<String>), LockError> {
    let inner = limited_inside(locker).await?;
    Ok((inner, current_lease().map(|lease| lease.name().to_owned())))
}

#[redis_locked(key = "stack:upper", wait = "0s", locker = locker)]
#[redis_locked(key = "stack:lower", wait = "0s", locker = locker)]
async fn stacked(locker: &Locker) -> Result<Option<String>, LockError> {
    Ok(current_lease().map(|lease| lease.name().to_owned()))
}

/// Regression (issue 24, defect 1): `current_lease()` inside a `permits` function nested in
/// a plain lock returned the outer lease; it is the innermost hold, and the outer one again
/// after the nested call. Two stacked attributes: the upper one is the inner hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_lease_is_the_innermost_hold() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let (inner, after) = plain_around_limited(&locker).await.expect("both held");
    assert_eq!(inner.as_deref(), Some("stack:limit"));
    assert_eq!(after.as_deref(), Some("stack:outer"));
    assert_eq!(
        stacked(&locker).await.expect("both held").as_deref(),
        Some("stack:upper")
    );
    // The lower attribute's lock is the outer one: taken first, so held while the upper
    // one is refused.
    let upper = locker
        .try_lock("stack:upper", Duration::from_secs(5))
        .await
        .expect("take the upper lock");
    match stacked(&locker).await {
        Err(LockError::Busy { name, .. }) => assert_eq!(name, "stack:upper"),
        other => panic!("expected Busy on the upper lock, got {other:?}"),
    }
    assert!(upper.release().await.expect("release"));
}

#[redis_locked(key = "twice:{id}", wait = "0s", locker = locker)]
async fn locks_its_own_name_again(locker: &Locker, id: u32) -> Result<String, LockError> {
    let again = locker
        .lock(format!("twice:{id}"))
        .wait(Duration::from_secs(3))
        .await;
    Ok(match again {
        Ok(_) => "acquired a second time".to_owned(),
        Err(err) => err.to_string(),
    })
}

/// Regression (issue 27): a plain `lock()` of a name this task already holds through an
/// enclosing body waited out its whole wait, then said "held by" our own process. It fails
/// at once, saying that this task holds it and how to nest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_of_a_name_this_task_holds_fails_at_once() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let said = locks_its_own_name_again(&locker, 1)
        .await
        .expect("the outer call");
    assert!(said.contains("already held by this task"), "{said}");
    assert!(
        said.contains("#[redis_locked] function or `using`"),
        "{said}"
    );
    // Through `using` too, and a try: the same error, not `Busy`.
    let said = locker
        .using("twice:2", |_| async {
            let again = locker.try_lock("twice:2", Duration::from_secs(5)).await;
            Ok::<_, LockError>(again.map(|_| ()).map_err(|err| err.to_string()))
        })
        .await
        .expect("the using call");
    let said = said.expect_err("the second lock is refused");
    assert!(said.contains("already held by this task"), "{said}");
    // A spawned task is another holder: it contends (Busy at wait zero), it is not refused
    // as this task's.
    let spawned = locker
        .using("twice:3", |_| async {
            let other = locker.clone();
            let handle = tokio::spawn(async move {
                other
                    .try_lock("twice:3", Duration::from_secs(5))
                    .await
                    .map(|_| ())
            });
            Ok::<_, LockError>(handle.await.expect("spawned task"))
        })
        .await
        .expect("the using call");
    match spawned {
        Err(LockError::Busy { name, .. }) => assert_eq!(name, "twice:3"),
        other => panic!("expected the spawned request Busy, got {other:?}"),
    }
}

/// The nested call of `outer_answered_late`: counts its runs.
#[redis_locked(key = "reentry:late", wait = "0s", renew = false, locker = locker)]
async fn nested_late(locker: &Locker, writes: &AtomicU32) -> Result<(), LockError> {
    writes.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Holds `reentry:late` (2 s, not renewed) until 300 ms of its validity are left, then makes
/// the nested call, whose question to Redis takes 600 ms there and back (the proxy's
/// latency): Redis still has the key when it reads it, and the answer arrives about 300 ms
/// after the lease stopped being trusted.
#[redis_locked(key = "reentry:late", ttl = "2s", wait = "0s", renew = false, locker = locker)]
async fn outer_answered_late(
    locker: &Locker,
    writes: &AtomicU32,
    nested: &Mutex<Option<Result<(), LockError>>>,
) -> Result<(), LockError> {
    let lease = current_lease().expect("a lease inside the body");
    tokio::time::sleep(
        lease
            .expires_in()
            .saturating_sub(Duration::from_millis(300)),
    )
    .await;
    assert!(
        !lease.is_lost(),
        "the lease is still valid when the nested call begins"
    );
    let result = nested_late(locker, writes).await;
    *nested.lock().expect("mutex") = Some(result);
    Ok(())
}

/// Regression: a nested call looked at the lease's local validity before asking Redis
/// whether the lease was still held, and not after: an answer slower than what was left of
/// the validity let the nested body run on a lease that had ended, when another process
/// could already hold the lock (lock-torture's `nested-on-lost` under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_answered_after_its_lease_ended_does_not_run() {
    let server = RedisServer::start();
    let proxy = lock_tests::proxy::Proxy::start(server.addr()).expect("proxy");
    let locker = Locker::from_url(&proxy.url()).expect("locker");
    // Connected before the latency: the set-up's round trips stay fast.
    drop(
        locker
            .try_lock("reentry:warm-up", Duration::from_secs(1))
            .await
            .expect("warm-up"),
    );
    // Every byte each way 300 ms late: the grant's SET reaches Redis 300 ms after the
    // attempt began, so the key outlives the lease's local validity by about that much.
    proxy.set_latency(Duration::from_millis(300));
    let writes = AtomicU32::new(0);
    let nested = Mutex::new(None);
    let outer = outer_answered_late(&locker, &writes, &nested).await;
    assert_eq!(
        writes.load(Ordering::SeqCst),
        0,
        "the nested body ran on a lease whose validity had ended"
    );
    match nested.lock().expect("mutex").take() {
        Some(Err(LockError::Lost { name })) => assert_eq!(name, "reentry:late"),
        other => panic!("expected the nested call to be Lost, got {other:?}"),
    }
    assert!(outer.is_ok(), "{outer:?}");
}

/// A lease this task took with `lock()`, locked again from the same task: the lease may
/// have been moved to another task (the library cannot see a move), so the second request
/// waits for its release like any other, never refused as this task's; still in this
/// task, the wait runs out, naming the holder as a lease of this Locker. (Refused at once
/// with `HeldByThisTask` before, which a moved lease made false.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_this_task_took_is_waited_for_not_refused() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let first = locker.lock("mine").await.expect("first");
    let again = locker
        .lock("mine")
        .wait(Duration::from_millis(300))
        .await
        .expect_err("still held here");
    assert!(
        matches!(&again, LockError::Timeout { name, .. } if name == "mine"),
        "{again:?}"
    );
    let text = again.to_string();
    assert!(
        text.contains("a lease of this Locker, in this process"),
        "{text}"
    );
    // A try names it the same way.
    let busy = locker
        .try_lock("mine", Duration::from_secs(5))
        .await
        .expect_err("busy");
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    // (A lease moved to another task and released there: see
    // `deadlock::a_lease_moved_to_another_task_is_waited_for`.)
    assert!(first.release().await.expect("release"));
    // Released: the same task takes it again at once.
    let second = locker.lock("mine").await.expect("after the release");
    assert!(second.release().await.expect("release"));
}

/// Another task of the same Locker holds the lease: waited for as usual, and a busy or
/// timeout error names it as this Locker's, not by our own host:pid as if it were someone
/// else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_of_another_task_of_this_locker_is_named_as_such() {
    let server = RedisServer::start();
    let locker = Locker::builder()
        .url(server.url())
        .app_name("reentrancy")
        .build()
        .expect("locker");
    let (taken, is_taken) = tokio::sync::oneshot::channel();
    let (done, is_done) = tokio::sync::oneshot::channel::<()>();
    let holder = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let lease = locker.lock("theirs").await.expect("the other task's lease");
            let _ = taken.send(());
            let _ = is_done.await;
            lease.release().await.expect("release");
        })
    };
    is_taken.await.expect("taken");
    let busy = locker
        .try_lock("theirs", Duration::from_secs(5))
        .await
        .expect_err("busy");
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    assert!(
        busy.to_string()
            .contains("held by a lease of this Locker, in this process"),
        "{busy}"
    );
    let timeout = locker
        .lock("theirs")
        .wait(Duration::from_millis(300))
        .await
        .expect_err("still held");
    assert!(matches!(timeout, LockError::Timeout { .. }), "{timeout:?}");
    assert!(
        timeout
            .to_string()
            .contains("held by a lease of this Locker, in this process"),
        "{timeout}"
    );
    // Waited for as usual: granted once the other task releases it.
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("theirs").wait(Duration::from_secs(10)).await })
    };
    let _ = done.send(());
    holder.await.expect("holder");
    let lease = waiter
        .await
        .expect("join")
        .expect("granted after the release");
    assert!(lease.release().await.expect("release"));
}

/// A lease dropped on a task (its release runs in the background) no longer counts as the
/// task's: the task's next request for the name waits for that release and gets the lock,
/// instead of being refused as a lock it still holds (lock-torture's election runs: a
/// leadership dropped, then a new campaign from the same task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lease_is_not_held_by_its_task() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    for _ in 0..50 {
        let lease = locker.lock("dropped").await.expect("first");
        drop(lease);
        let again = locker
            .lock("dropped")
            .wait(Duration::from_secs(5))
            .await
            .expect("the dropped lease's release is waited for, not refused");
        drop(again);
    }
}
