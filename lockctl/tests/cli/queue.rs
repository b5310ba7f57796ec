//! The Redis-side waiter queue across real OS processes: arrival order is kept, and a
//! queued waiter that is killed, stopped or gives up does not hold the queue up.

use std::path::Path;
use std::process::Child;

use lock_tests::RedisServer;
use rustix::process::Signal;

use crate::support::{exists, lockctl, read, signal, wait_for, wait_until};

/// A `lockctl run` that waits up to `wait` for `name`, then appends `start <id>` and
/// `end <id>` around `hold` seconds of sleep to `log`.
fn contender(
    server: &RedisServer,
    name: &str,
    id: &str,
    wait: &str,
    hold: &str,
    log: &Path,
) -> Child {
    let script =
        "echo \"start $RUN_ID\" >> \"$LOG\"; sleep \"$HOLD\"; echo \"end $RUN_ID\" >> \"$LOG\"";
    lockctl(server)
        .args(["run", "--key", name, "--ttl", "10s", "--wait", wait])
        .args(["--", "sh", "-c", script])
        .env("RUN_ID", id)
        .env("HOLD", hold)
        .env("LOG", log)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run lockctl: {err}"))
}

/// How many waiters stand in the Redis-side queue of `name`.
fn queued(server: &RedisServer, name: &str) -> usize {
    let reply = server.command(&["ZCARD", &format!("lock:{{{name}}}:q")]);
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("ZCARD: {reply}"))
}

/// The ids in the order their holds started; panics if two holds overlapped.
fn holds_in_order(log: &Path) -> Vec<String> {
    let text = read(log);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() % 2, 0, "a hold did not end:\n{text}");
    lines
        .chunks(2)
        .map(|pair| {
            let id = pair[0]
                .strip_prefix("start ")
                .unwrap_or_else(|| panic!("overlap:\n{text}"));
            assert_eq!(pair[1], format!("end {id}"), "overlap:\n{text}");
            id.to_owned()
        })
        .collect()
}

/// Starts the holder and `ids` waiters one after another, each once the previous one
/// stands in the queue.
fn holder_and_queue(server: &RedisServer, name: &str, ids: &[&str], log: &Path) -> Vec<Child> {
    let mut children = vec![contender(server, name, "holder", "1s", "1.5", log)];
    wait_until("the holder", || exists(server, &format!("lock:{{{name}}}")));
    for (i, id) in ids.iter().enumerate() {
        children.push(contender(server, name, id, "30s", "0.1", log));
        wait_until(&format!("{id} to queue"), || queued(server, name) == i + 1);
    }
    children
}

#[test]
fn processes_get_the_lock_in_the_order_they_queued() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut children = holder_and_queue(&server, "fifo", &["a", "b", "c", "d"], &log);
    for (i, child) in children.iter_mut().enumerate() {
        assert_eq!(wait_for(child, &format!("process {i}")), Some(0));
    }
    assert_eq!(holds_in_order(&log), ["holder", "a", "b", "c", "d"]);
    assert_eq!(queued(&server, "fifo"), 0);
    assert!(!exists(&server, "lock:{fifo}"), "lock left behind");
}

#[test]
fn a_killed_queued_waiter_is_skipped() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut children = holder_and_queue(&server, "killed", &["dead", "next"], &log);
    // The head of the queue dies while the holder still holds: its turn comes, nobody
    // claims it, and the next in line takes over one claim window later.
    signal(&children[1], Signal::KILL);
    let _ = children[1].wait();
    assert_eq!(wait_for(&mut children[0], "holder"), Some(0));
    assert_eq!(wait_for(&mut children[2], "next"), Some(0));
    assert_eq!(holds_in_order(&log), ["holder", "next"]);
    assert!(!exists(&server, "lock:{killed}"), "lock left behind");
}

#[test]
fn a_stopped_queued_waiter_is_skipped_and_queues_again_when_it_resumes() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut children = holder_and_queue(&server, "stopped", &["paused", "next"], &log);
    signal(&children[1], Signal::STOP);
    assert_eq!(wait_for(&mut children[0], "holder"), Some(0));
    assert_eq!(wait_for(&mut children[2], "next"), Some(0));
    // Resumed (a GC pause ends): its turn was given away, so it looks again and, the lock
    // being free, takes it. Never beside another holder.
    signal(&children[1], Signal::CONT);
    assert_eq!(wait_for(&mut children[1], "paused"), Some(0));
    assert_eq!(holds_in_order(&log), ["holder", "next", "paused"]);
    assert_eq!(queued(&server, "stopped"), 0);
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut holder = contender(&server, "impatient", "holder", "1s", "2", &log);
    wait_until("the holder", || exists(&server, "lock:{impatient}"));
    let mut impatient = contender(&server, "impatient", "impatient", "300ms", "0.1", &log);
    assert_eq!(
        wait_for(&mut impatient, "impatient"),
        Some(75),
        "timed out as busy"
    );
    wait_until("the queue to empty", || queued(&server, "impatient") == 0);
    assert_eq!(wait_for(&mut holder, "holder"), Some(0));
    assert_eq!(holds_in_order(&log), ["holder"]);
}

#[test]
fn a_crashed_holder_is_followed_by_the_head_of_the_queue() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // A holder with a 1 s TTL and no renewal, killed while it holds.
    let mut crashed = lockctl(&server)
        .args(["run", "--key", "crash", "--ttl", "1s", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    wait_until("the holder", || exists(&server, "lock:{crash}"));
    let mut next = contender(&server, "crash", "next", "30s", "0.1", &log);
    wait_until("next to queue", || queued(&server, "crash") == 1);
    signal(&crashed, Signal::KILL);
    let _ = crashed.wait();
    assert_eq!(wait_for(&mut next, "next"), Some(0));
    assert_eq!(holds_in_order(&log), ["next"]);
}
