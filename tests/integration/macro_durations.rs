//! `#[redis_locked]` durations given as `Duration` expressions (`ttl = TTL`,
//! `ttl = Duration::from_secs(n)`): the lease on Redis has that TTL, and a value out of range
//! is the error a request gives for it (`LockError::InvalidDuration`), whatever the hold and
//! nested or not, with the body not run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_core::{current_lease, redis_locked, LockError, Locker, MAX_TTL};
use lock_tests::RedisServer;

/// Far from the locker's default TTL (30 s) and from any literal used elsewhere.
const LEASE: Duration = Duration::from_millis(433_000);

/// The key's TTL on Redis, in milliseconds, as `PTTL` reports it.
fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.command(&["PTTL", key]);
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PTTL {key}: {reply:?}"))
}

#[redis_locked(key = "expr-ttl:const", ttl = LEASE, renew = false, locker = locker)]
async fn under_a_const(locker: &Locker, server: &RedisServer) -> Result<(i64, String), LockError> {
    let lease = current_lease().expect("a lease inside the body");
    Ok((pttl(server, lease.key()), lease.key().to_owned()))
}

#[redis_locked(key = "expr-ttl:{secs}", ttl = Duration::from_secs(secs), locker = locker)]
async fn under_a_call(
    locker: &Locker,
    server: &RedisServer,
    secs: u64,
) -> Result<(i64, Duration), LockError> {
    let lease = current_lease().expect("a lease inside the body");
    Ok((pttl(server, lease.key()), lease.expires_in()))
}

/// The expression is the lease's TTL on Redis: a constant, and a call on a parameter,
/// evaluated on each call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expression_ttl_is_the_leases_ttl() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");

    let (left, key) = under_a_const(&locker, &server).await.expect("locked");
    let lease_ms = i64::try_from(LEASE.as_millis()).expect("fits");
    // At most the TTL set, and far above the locker's default (30 s): the constant's.
    assert!(
        (lease_ms - 60_000..=lease_ms).contains(&left),
        "PTTL {left} ms, expected about {lease_ms} ms"
    );

    for secs in [45, 600] {
        let (left, expires_in) = under_a_call(&locker, &server, secs).await.expect("locked");
        let set = i64::try_from(secs * 1000).expect("fits");
        assert!(
            (set - 20_000..=set).contains(&left),
            "ttl = Duration::from_secs({secs}): PTTL {left} ms"
        );
        assert!(
            expires_in <= Duration::from_secs(secs)
                && expires_in > Duration::from_secs(secs) - Duration::from_secs(20),
            "ttl = Duration::from_secs({secs}): the lease's validity is {expires_in:?}"
        );
    }
    // Released after the body.
    assert_eq!(pttl(&server, &key), -2, "released");
}

#[redis_locked(key = "expr-ttl:bad", ttl = ttl, locker = locker)]
async fn with_ttl(locker: &Locker, ttl: Duration, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[redis_locked(key = "expr-ttl:bad", wait = wait, locker = locker)]
async fn with_wait(locker: &Locker, wait: Duration, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[redis_locked(key = "expr-ttl:bad", hold_at_least = hold, locker = locker)]
async fn with_hold(locker: &Locker, hold: Duration, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[redis_locked(key = "expr-ttl:bad", permits = 2, ttl = ttl, locker = locker)]
async fn permit_with_ttl(
    locker: &Locker,
    ttl: Duration,
    runs: &AtomicU32,
) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Holds `expr-ttl:bad` with a good TTL and calls `with_ttl` on the same key inside: the
/// nested call borrows the lease instead of taking one.
#[redis_locked(key = "expr-ttl:bad", ttl = "10s", locker = locker)]
async fn nesting(
    locker: &Locker,
    inner_ttl: Duration,
    runs: &AtomicU32,
) -> Result<Result<(), LockError>, LockError> {
    Ok(with_ttl(locker, inner_ttl, runs).await)
}

/// `err` is `InvalidDuration` of `what` and `value` for `expr-ttl:bad`, and says what a plain
/// request with the same setting says.
#[track_caller]
fn assert_invalid(err: LockError, what: &str, value: Duration, request: &LockError) {
    match &err {
        LockError::InvalidDuration {
            name,
            what: got,
            value: got_value,
            ..
        } => {
            assert_eq!(name, "expr-ttl:bad");
            assert_eq!(*got, what);
            assert_eq!(*got_value, value);
        }
        other => panic!("expected InvalidDuration of {what} {value:?}, got {other:?}"),
    }
    assert_eq!(err.to_string(), request.to_string());
}

/// A zero or too long duration given as an expression is refused when the function is
/// called, with the error a request gives for it, and the body does not run: never a panic,
/// nor a lease with another TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expression_out_of_range_is_invalid_duration() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let runs = AtomicU32::new(0);
    let too_long = MAX_TTL + Duration::from_millis(1);

    for ttl in [Duration::ZERO, Duration::from_micros(999), too_long] {
        let request = locker
            .lock("expr-ttl:bad")
            .ttl(ttl)
            .await
            .expect_err("a request refuses it too");
        let err = with_ttl(&locker, ttl, &runs).await.expect_err("refused");
        assert_invalid(err, "ttl", ttl, &request);
        let err = permit_with_ttl(&locker, ttl, &runs)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, LockError::InvalidDuration { what: "ttl", value, .. } if value == ttl),
            "permits, ttl {ttl:?}: {err:?}"
        );
    }

    let request = locker
        .lock("expr-ttl:bad")
        .wait(too_long)
        .await
        .expect_err("a request refuses it too");
    let err = with_wait(&locker, too_long, &runs)
        .await
        .expect_err("refused");
    assert_invalid(err, "wait", too_long, &request);

    let request = locker
        .lock("expr-ttl:bad")
        .hold_at_least(Duration::ZERO)
        .await
        .expect_err("a request refuses it too");
    let err = with_hold(&locker, Duration::ZERO, &runs)
        .await
        .expect_err("refused");
    assert_invalid(err, "hold_at_least", Duration::ZERO, &request);

    // Nested under a lease of the same key: the inner call takes no lease, and its zero TTL
    // is refused all the same (the outer body still runs and returns).
    let request = locker
        .lock("expr-ttl:bad")
        .ttl(Duration::ZERO)
        .await
        .expect_err("a request refuses it too");
    let inner = nesting(&locker, Duration::ZERO, &runs)
        .await
        .expect("the outer call holds the lock");
    assert_invalid(
        inner.expect_err("the nested call is refused"),
        "ttl",
        Duration::ZERO,
        &request,
    );

    assert_eq!(runs.load(Ordering::SeqCst), 0, "no body ran");
    // And a good value still works, nested or not.
    with_ttl(&locker, Duration::from_secs(5), &runs)
        .await
        .expect("locked");
    nesting(&locker, Duration::from_secs(5), &runs)
        .await
        .expect("outer")
        .expect("nested");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
