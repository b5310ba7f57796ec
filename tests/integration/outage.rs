//! Redis down or misconfigured, with requests that wait: a server that is stopped fails a
//! request within the locker's unreachable timeout (not after its whole wait); one that
//! refuses this client's settings (no password, a wrong one, a database that does not
//! exist, an ACL refusal, a missing command) fails it at once, with the cause and what to
//! change; an HTTP handler answers both 503, never as contention.
//!
//! Each request waits 30 s: "at once" is asserted as well under that (10 s), which only a
//! request that stalled for its wait can miss.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use lock_core::web::{key, LockLayer};
use lock_core::{LockError, Locker};
use lock_tests::RedisServer;
use tower::ServiceExt as _;

/// The wait of every request here: an outage must end a request long before it.
const WAIT: Duration = Duration::from_secs(30);
/// Well under `WAIT`: a request that did not stall for its wait ends before this.
const PROMPTLY: Duration = Duration::from_secs(10);

/// `request`'s error and how long it took; panics if it succeeded.
async fn failure<T, F>(request: F) -> (LockError, Duration)
where
    F: std::future::IntoFuture<Output = Result<T, LockError>>,
{
    let begun = Instant::now();
    let result = request.await;
    let took = begun.elapsed();
    match result {
        Ok(_) => panic!("granted against a server that cannot grant it"),
        Err(err) => (err, took),
    }
}

fn assert_prompt(what: &str, err: &LockError, took: Duration) {
    assert!(
        took < PROMPTLY,
        "{what}: took {took:?} of its {WAIT:?} wait to fail with: {err}"
    );
    assert!(
        !err.is_contention(),
        "{what}: reported as contention: {err}"
    );
}

/// A server that was stopped: every entry point that waits fails with `Connection` within
/// the unreachable timeout (default 2 s), naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_fails_waiting_requests_within_the_unreachable_timeout() {
    let mut server = RedisServer::start();
    let url = server.url();
    let locker = Locker::from_url(&url).expect("locker");
    // Connected first: the outage breaks an open connection, then refuses new ones.
    drop(locker.lock("warm").await.expect("warm-up"));
    server.kill();

    let (err, took) = failure(locker.lock("job").wait(WAIT)).await;
    assert_prompt("lock", &err, took);
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(err.to_string().contains(&url), "names the server: {err}");

    let semaphore = locker.semaphore("exports", 2);
    let (err, took) = failure(semaphore.acquire().wait(WAIT)).await;
    assert_prompt("semaphore", &err, took);
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");

    let (err, took) = failure(locker.lock_all(["a", "b"]).wait(WAIT)).await;
    assert_prompt("multi-lock", &err, took);
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");

    // A locker that never connected: refused from the first attempt.
    let fresh = Locker::from_url(&url).expect("locker");
    let (err, took) = failure(fresh.lock("job").wait(WAIT)).await;
    assert_prompt("lock, never connected", &err, took);
    assert!(err.to_string().contains("refused"), "{err}");
}

/// The bound is a setting of its own: zero gives up at the first unanswered attempt, and a
/// longer one rides out a restart that a short one would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unreachable_timeout_rides_out_a_restart_within_it() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let impatient = Locker::builder()
        .url(&url)
        .unreachable_timeout(Duration::ZERO)
        .build()
        .expect("locker");
    let (err, took) = failure(impatient.lock("job").wait(WAIT)).await;
    assert_prompt("unreachable_timeout(0)", &err, took);
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");

    // Down for about a second, with a request waiting through a 20 s unreachable timeout.
    let patient = Locker::builder()
        .url(&url)
        .unreachable_timeout(Duration::from_secs(20))
        .build()
        .expect("locker");
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        server.restart();
        server
    });
    let lease = patient
        .lock("job")
        .wait(WAIT)
        .await
        .expect("the request rides out the restart");
    let _server = tokio::task::spawn_blocking(move || restart.join())
        .await
        .expect("join")
        .expect("restarted");
    assert!(lease.release().await.expect("release"));
}

/// A server with `requirepass`, reached without a password: at once, saying how to give
/// one (not Redis's bare `NOAUTH`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_server_without_a_password_fails_at_once_saying_how_to_give_one() {
    let server = RedisServer::start_with(&["requirepass s3cret"]);
    let locker = Locker::from_url(&server.url()).expect("locker");
    let (err, took) = failure(locker.lock("job").wait(WAIT)).await;
    assert_prompt("lock", &err, took);
    assert!(matches!(err, LockError::Misconfigured { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("requires a password"), "{text}");
    assert!(text.contains("redis://:PASSWORD@host:port/"), "{text}");

    let semaphore = locker.semaphore("exports", 2);
    let (err, took) = failure(semaphore.acquire().wait(WAIT)).await;
    assert_prompt("semaphore", &err, took);
    assert!(matches!(err, LockError::Misconfigured { .. }), "{err:?}");

    // With the password, it works.
    let with =
        Locker::from_url(&format!("redis://:s3cret@127.0.0.1:{}/", server.port())).expect("locker");
    drop(
        with.lock("job")
            .wait(WAIT)
            .await
            .expect("with the password"),
    );
}

/// A wrong password, and a database the server does not have: at once, with the cause, and
/// the password stays out of the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_database_fails_at_once_with_its_cause() {
    let server = RedisServer::start_with(&["requirepass s3cret"]);
    let wrong =
        Locker::from_url(&format!("redis://:nope@127.0.0.1:{}/", server.port())).expect("locker");
    let (err, took) = failure(wrong.lock("job").wait(WAIT)).await;
    assert_prompt("wrong password", &err, took);
    assert!(matches!(err, LockError::Misconfigured { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("WRONGPASS"), "{text}");
    assert!(text.contains("check the user and password"), "{text}");
    assert!(!text.contains("nope"), "the password leaked: {text}");

    let plain = RedisServer::start();
    let locker =
        Locker::from_url(&format!("redis://127.0.0.1:{}/99", plain.port())).expect("locker");
    let (err, took) = failure(locker.lock("job").wait(WAIT)).await;
    assert_prompt("database 99", &err, took);
    assert!(matches!(err, LockError::Misconfigured { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("DB index is out of range"), "{text}");
    assert!(text.contains("`databases` setting"), "{text}");
}

/// An ACL user that may not run SET, and a server without the scripting commands (with the
/// lock busy, so that the request needs them to wait): at once, with Redis's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_refusals_and_missing_commands_fail_at_once() {
    let server = RedisServer::start();
    let reply = server.command(&[
        "ACL", "SETUSER", "noset", "on", ">pw", "~*", "&*", "+@all", "-set",
    ]);
    assert!(reply.starts_with("+OK"), "{reply}");
    let locker = Locker::from_url(&format!("redis://noset:pw@127.0.0.1:{}/", server.port()))
        .expect("locker");
    let (err, took) = failure(locker.lock("job").wait(WAIT)).await;
    assert_prompt("NOPERM", &err, took);
    assert!(err.to_string().contains("no permissions"), "{err}");

    let scriptless =
        RedisServer::start_with(&["rename-command EVAL \"\"", "rename-command EVALSHA \"\""]);
    let holder = Locker::from_url(&scriptless.url()).expect("locker");
    let _held = holder
        .lock("job")
        .await
        .expect("a plain SET needs no script");
    let waiter = Locker::from_url(&scriptless.url()).expect("locker");
    let (err, took) = failure(waiter.lock("job").wait(WAIT)).await;
    assert_prompt("unknown command", &err, took);
    assert!(err.to_string().contains("unknown command"), "{err}");
}

/// A route guarded by a `LockLayer` that waits: Redis stopped, or refusing the client, is a
/// 503 within the bound, never the 409 of a busy lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_layer_answers_503_for_an_outage_or_a_misconfiguration() {
    let mut stopped = RedisServer::start();
    let stopped_url = stopped.url();
    stopped.kill();
    let password = RedisServer::start_with(&["requirepass s3cret"]);
    for url in [stopped_url, password.url()] {
        let locker = Locker::from_url(&url).expect("locker");
        let service = tower::service_fn(|_request: axum::http::Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(axum::http::Response::new(Full::new(Bytes::from_static(
                b"ok",
            ))))
        });
        let guarded = tower::Layer::layer(
            &LockLayer::new(locker, key::header("x-job-id")).wait(WAIT),
            service,
        );
        let request = axum::http::Request::post("/jobs")
            .header("x-job-id", "42")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let begun = Instant::now();
        let response = guarded.oneshot(request).await.expect("response");
        let took = begun.elapsed();
        assert_eq!(response.status(), 503, "{url}");
        assert!(took < PROMPTLY, "{url}: took {took:?} to answer 503");
    }
}
