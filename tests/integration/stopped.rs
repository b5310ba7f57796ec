//! A server that stops answering (SIGSTOP: a stalled process, a paused VM) while a request's
//! attempt is in flight, past the connection's response timeout, and resumes later: the
//! shared connection is retired and replaced meanwhile. Whatever the attempt may have taken
//! must be given back after it reaches Redis, on the socket it went out on: sent on a new
//! connection, the give-back either fails (the stopped server does not answer the new
//! connection's set-up) or may overtake the attempt when the server resumes, and leaves the
//! lock or permit held by nobody until its TTL. Used by the multi-lock, semaphore and
//! read-write lock tests; [`signal`] by the failover tests too.

use std::future::Future;
use std::time::Duration;

use lock_core::{LockError, Locker, PermitHolders};
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// SIGSTOP or SIGCONT to a server process.
pub fn signal(server: &RedisServer, sig: &str) {
    let pid = server.pid().expect("server pid").to_string();
    let status = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// A locker on `server` whose commands time out after 200 ms.
pub fn short_timeout_locker(server: &RedisServer) -> Locker {
    Locker::builder()
        .url(server.url())
        .command_timeout(Duration::from_millis(200))
        .build()
        .expect("locker")
}

/// Runs rounds of: a request with a 30 s TTL waiting up to 1 s, sent while `server` is
/// stopped and resumed after 300, 500 or 700 ms (within the wait: a later attempt may be
/// granted), 1100 ms (after the request ended, while a give-back on a new connection would
/// still be setting it up) or 1500 ms (after such a give-back gave up); then `left` must find
/// nothing held, and a fresh request must be granted well within that TTL.
///
/// `request(locker, name, wait)` takes the lock or permit of `name` for 30 s and gives it
/// back if it was granted; `left(locker, name)` lists what is held under `name` (empty:
/// nothing). Each round uses a fresh locker from `locker_of` and a name of its own.
pub async fn stalled_requests_leave_nothing_behind<R, L>(
    server: &RedisServer,
    locker_of: impl Fn() -> Locker,
    name: &str,
    request: impl Fn(Locker, String, Duration) -> R,
    left: impl Fn(Locker, String) -> L,
) where
    R: Future<Output = Result<(), LockError>>,
    L: Future<Output = Vec<String>>,
{
    for (round, resume_after) in [300u64, 500, 700, 1100, 1500].into_iter().enumerate() {
        let locker = locker_of();
        let name = format!("{name}{round}");
        // The script is loaded and the connection open before the stall. (Waits, here and
        // below, ride out a command that took over 200 ms on a loaded machine.)
        request(locker.clone(), name.clone(), 5 * SECOND)
            .await
            .expect("warm-up");

        signal(server, "-STOP");
        let resume = {
            let server_pid = server.pid().expect("pid").to_string();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(resume_after));
                let status = std::process::Command::new("kill")
                    .args(["-CONT", &server_pid])
                    .status()
                    .expect("run kill");
                assert!(status.success());
            })
        };
        // Granted (resumed in time for a later attempt): given back like any other.
        let attempt = request(locker.clone(), name.clone(), SECOND).await;
        tokio::task::spawn_blocking(move || resume.join())
            .await
            .expect("join")
            .expect("resumed");
        // Whatever reached the server has run by now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = left(locker.clone(), name.clone()).await;
        assert!(
            held.is_empty(),
            "round {round} (resumed after {resume_after} ms; the request ended {attempt:?}): \
             left held by nobody: {held:?}"
        );
        // Well within the 30 s TTL of anything left behind.
        request(locker, name, 5 * SECOND)
            .await
            .unwrap_or_else(|err| panic!("round {round}: a fresh request is refused: {err}"));
    }
    signal(server, "-CONT");
}

/// What [`stalled_requests_leave_nothing_behind`]'s `left` reports for a semaphore or a
/// read-write lock: each holder, and requests still standing in the queue.
pub fn permits_left(holders: Result<PermitHolders, LockError>) -> Vec<String> {
    let holders = holders.expect("holders");
    let mut left: Vec<String> = holders.holders.iter().map(|h| format!("{h:?}")).collect();
    if holders.waiting > 0 {
        left.push(format!("{} waiting", holders.waiting));
    }
    left
}
