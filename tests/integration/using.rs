//! `using`: the closure gets its lease (fencing token, `lost()`, `current_lease()`), the
//! lease is renewed while it runs, one `?` gives the value, nested calls on the same lock
//! are reentrant, and a lease lost under it follows the macro's rule (`OnLost`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{current_lease, LockError, Locker, OnLost};
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// An application error that lock errors convert into, as `?` needs.
#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Business(&'static str),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> AppError {
        AppError::Lock(err.to_string())
    }
}

fn on(server: &RedisServer) -> Locker {
    Locker::from_url(&server.url()).expect("locker")
}

/// One `?` for the value, the lock's errors and the work's: the shape node-redlock users
/// expect.
async fn report(locker: &Locker) -> Result<u64, AppError> {
    let rows = locker
        .lock("report")
        .fencing()
        .using(|lease| async move {
            let token = lease
                .fencing_token()
                .ok_or(AppError::Business("no token"))?;
            assert_eq!(
                current_lease().map(|current| current.token().to_owned()),
                Some(lease.token().to_owned()),
                "the closure's lease is also the current lease"
            );
            Ok::<_, AppError>(token)
        })
        .await?;
    Ok(rows + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closure_gets_its_lease_and_one_question_mark_gives_the_value() {
    let server = RedisServer::start();
    let locker = on(&server);
    let first = report(&locker).await.expect("the first report");
    let second = report(&locker).await.expect("the second report");
    assert!(
        second > first,
        "fencing tokens grow: {first}, then {second}"
    );
    assert!(locker.inspect("report").await.expect("inspect").is_none());

    // A lock that cannot be had: the work never runs, the error arrives converted.
    let holder = on(&server)
        .try_lock("busy", 10 * SECOND)
        .await
        .expect("hold");
    let ran = AtomicBool::new(false);
    let result: Result<(), AppError> = locker
        .lock("busy")
        .wait(Duration::ZERO)
        .using(|_| async {
            ran.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await;
    assert!(
        matches!(result, Err(AppError::Lock(ref m)) if m.contains("busy")),
        "{result:?}"
    );
    assert!(!ran.load(Ordering::SeqCst), "the work never ran");
    assert!(holder.release().await.expect("release"));

    // The work's own error: released, and the error is the caller's.
    let result: Result<(), AppError> = locker
        .using("failing", |_| async { Err(AppError::Business("declined")) })
        .await;
    assert_eq!(result, Err(AppError::Business("declined")));
    assert!(locker.inspect("failing").await.expect("inspect").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_renewed_while_the_work_runs() {
    let server = RedisServer::start();
    let locker = on(&server);
    let held = locker
        .lock("long")
        .ttl(Duration::from_millis(300))
        .using(|lease| async move {
            tokio::time::sleep(SECOND).await; // more than three TTLs
            Ok::<_, LockError>(!lease.is_lost() && lease.is_held().await?)
        })
        .await
        .expect("using");
    assert!(held, "renewed past its TTL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_on_the_same_lock_are_reentrant() {
    let server = RedisServer::start();
    let locker = on(&server);
    let (outer, inner) = locker
        .lock("nested")
        .fencing()
        .using(|outer| {
            let locker = locker.clone();
            async move {
                // Would wait for itself (10 s, then Timeout) if it were not reentrant.
                let inner = locker
                    .using("nested", |inner| async move { Ok::<_, LockError>(inner) })
                    .await?;
                Ok::<_, LockError>((outer, inner))
            }
        })
        .await
        .expect("using");
    assert_eq!(
        outer.token(),
        inner.token(),
        "the nested call ran under the outer lease"
    );
}

/// Runs work that deletes its own lock (as a server restarted empty would), waits until
/// renewal finds it gone, then finishes with `Ok(7)`, under `rule`. Returns what `using`
/// returned and whether the work finished.
async fn lose_the_lease_under(rule: OnLost) -> (Result<u32, LockError>, bool) {
    let server = RedisServer::start();
    let locker = on(&server);
    let finished = Arc::new(AtomicBool::new(false));
    let result = locker
        .lock("losing")
        .ttl(Duration::from_millis(300))
        .on_lost(rule)
        .using(|lease| {
            let finished = Arc::clone(&finished);
            let server = &server;
            async move {
                server.command(&["DEL", lease.key()]);
                lease.lost().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
                Ok(7)
            }
        })
        .await;
    (result, finished.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_follows_the_rule_of_the_macro() {
    // Report (the default): the result stands; the work saw the loss through its lease.
    let (result, finished) = lose_the_lease_under(OnLost::Report).await;
    assert_eq!(result.expect("the result stands"), 7);
    assert!(finished);
    // Error: the work finished, its Ok became Err(Lost).
    let (result, finished) = lose_the_lease_under(OnLost::Error).await;
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    assert!(finished, "the work finished before the rule applied");
    // Cancel: the work was dropped at the loss.
    let (result, finished) = lose_the_lease_under(OnLost::Cancel).await;
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    assert!(!finished, "the work was stopped at the loss");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_resumed_after_the_release() {
    let server = RedisServer::start();
    let locker = on(&server);
    let task = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .using("panicking", |_| async {
                    panic!("boom inside the critical section");
                    #[allow(unreachable_code)]
                    Ok::<(), LockError>(())
                })
                .await
        }
    });
    assert!(task
        .await
        .expect_err("the panic reaches the caller")
        .is_panic());
    assert!(
        locker
            .inspect("panicking")
            .await
            .expect("inspect")
            .is_none(),
        "released before the panic was resumed"
    );
}
