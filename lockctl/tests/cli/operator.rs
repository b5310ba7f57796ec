//! What an operator used to flock(1) expects of lockctl: `run` holds the lock for the
//! command's whole life, a cron-quiet conflict, `status` usable in `if`, and a full
//! semaphore reported as such.

use std::process::Stdio;

use lock_tests::RedisServer;
use rustix::process::Signal;

use crate::support::{
    assert_clean_failure, exists, lockctl, read, run, signal, wait_for, wait_until,
};

/// A command that runs for several TTLs keeps its lock without any flag: renewal is the
/// default, and the command ends with its own status. (A 1 s TTL, renewed every 333 ms: a
/// loaded machine may stall lockctl for a few hundred milliseconds, which a shorter TTL
/// would not survive.)
#[test]
fn run_renews_by_default_while_the_command_runs() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let mut child = lockctl(&server)
        .args(["run", "--key", "backup", "--ttl", "1s", "--"])
        .args(["sh", "-c", "sleep 3.5; touch \"$DONE\""])
        .env("DONE", &done)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the lock", || exists(&server, "lock:{backup}"));
    assert_eq!(wait_for(&mut child, "lockctl run"), Some(0));
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(stderr.is_empty(), "{stderr}");
    assert!(done.exists(), "the command was stopped before it finished");
    assert!(!exists(&server, "lock:{backup}"), "lock left behind");

    // The opt-out: the lease lasts --ttl and a longer command is stopped.
    let overran = run(
        &server,
        &[
            "run",
            "--key",
            "backup",
            "--ttl",
            "300ms",
            "--no-renew",
            "--",
            "sleep",
            "30",
        ],
    );
    assert_clean_failure(&overran, 79);
    assert!(
        overran.stderr.contains("outlived --ttl 300ms"),
        "{overran:#?}"
    );
    assert!(
        overran.stderr.contains("drop --no-renew"),
        "says how to keep the lock: {overran:#?}"
    );
}

/// `run --help` says that renewal is the default, how to turn it off, and what happens when
/// renewal fails.
#[test]
fn run_help_says_what_happens_when_renewal_fails() {
    let server = RedisServer::start();
    let help = run(&server, &["run", "--help"]);
    assert_eq!(help.code, Some(0), "{help:#?}");
    let text = help.stdout.replace('\n', " ");
    for expected in [
        "--no-renew",
        "renewed every ttl/3 while the command runs",
        "When renewal fails",
        "SIGTERM",
        "exits with --lost-exit-code (79)",
    ] {
        assert!(
            text.contains(expected),
            "missing {expected:?} in:\n{}",
            help.stdout
        );
    }
}

/// `--conflict-exit-code 0` is the cron idiom for "someone else is on it, fine": nothing on
/// stderr (cron would mail it). `-q` silences the line while keeping the conflict code.
#[test]
fn a_quiet_conflict_prints_nothing() {
    let server = RedisServer::start();
    let mut holder = lockctl(&server)
        .args(["run", "--key", "nightly", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the holder's lock", || exists(&server, "lock:{nightly}"));

    let zero = run(
        &server,
        &[
            "run",
            "--key",
            "nightly",
            "--conflict-exit-code",
            "0",
            "--",
            "true",
        ],
    );
    assert_eq!(zero.code, Some(0), "{zero:#?}");
    assert_eq!(zero.stderr, "", "{zero:#?}");
    assert_eq!(zero.stdout, "", "{zero:#?}");

    for flag in ["-q", "--quiet"] {
        let quiet = run(&server, &["run", "--key", "nightly", flag, "--", "true"]);
        assert_eq!(quiet.code, Some(75), "{quiet:#?}");
        assert_eq!(quiet.stderr, "", "{quiet:#?}");
    }
    // Quiet is about contention only: an unreachable Redis still says so.
    let unreachable = crate::support::lockctl_at("redis://127.0.0.1:1/")
        .args(["run", "--key", "nightly", "-q", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(69));
    assert!(!unreachable.stderr.is_empty());

    signal(&holder, Signal::TERM);
    assert_eq!(wait_for(&mut holder, "holder"), Some(128 + 15));
}

/// `if lockctl status X; then ...`: 0 while the name is held (its lock, or a permit or lease
/// of its semaphore or read-write lock), 1 when nothing of it is held; errors keep theirs.
#[test]
fn status_exits_1_when_free() {
    let server = RedisServer::start();
    let free = run(&server, &["status", "deploy"]);
    assert_eq!(free.code, Some(1), "{free:#?}");
    assert!(free.stdout.contains("state     free\n"), "{free:#?}");
    assert_eq!(free.stderr, "", "{free:#?}");
    let free_json = run(&server, &["status", "deploy", "--json"]);
    assert_eq!(free_json.code, Some(1), "{free_json:#?}");

    let mut holder = lockctl(&server)
        .args(["run", "--key", "deploy", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the holder's lock", || exists(&server, "lock:{deploy}"));
    let held = run(&server, &["status", "deploy"]);
    assert_eq!(held.code, Some(0), "{held:#?}");
    signal(&holder, Signal::TERM);
    assert_eq!(wait_for(&mut holder, "holder"), Some(128 + 15));

    let mut permit = lockctl(&server)
        .args(["run", "--key", "deploy", "--permits", "3", "--"])
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the permit", || exists(&server, "lock:{deploy}:sem"));
    assert_eq!(run(&server, &["status", "deploy"]).code, Some(0));
    signal(&permit, Signal::TERM);
    assert_eq!(wait_for(&mut permit, "permit holder"), Some(128 + 15));

    let down = crate::support::lockctl_at("redis://127.0.0.1:1/")
        .args(["status", "deploy"])
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(69));

    let help = run(&server, &["status", "--help"]);
    assert!(
        help.stdout
            .contains("1        status: nothing of the name is held"),
        "{help:#?}"
    );
}

/// Every permit taken: the refusal says so, with how many and who holds them (as `status`
/// lists them), both at once and after a wait.
#[test]
fn a_full_semaphore_says_all_permits_are_taken_and_by_whom() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let holders: Vec<_> = ["first", "second"]
        .iter()
        .map(|app| {
            lockctl(&server)
                .args([
                    "run",
                    "--key",
                    "exports",
                    "--permits",
                    "2",
                    "--app-name",
                    app,
                ])
                .args(["--", "sh", "-c", "echo >> \"$STARTED\"; exec sleep 30"])
                .env("STARTED", &started)
                .spawn()
                .unwrap()
        })
        .collect();
    wait_until("both permits", || read(&started).lines().count() == 2);

    let busy = run(
        &server,
        &["run", "--key", "exports", "--permits", "2", "--", "true"],
    );
    assert_clean_failure(&busy, 75);
    assert!(
        busy.stderr.contains("all 2 permits of `exports` are taken"),
        "{busy:#?}"
    );
    assert!(!busy.stderr.contains("holder unknown"), "{busy:#?}");
    assert!(
        busy.stderr.contains("first@") && busy.stderr.contains("second@"),
        "names both holders: {busy:#?}"
    );

    let waited = run(
        &server,
        &[
            "run",
            "--key",
            "exports",
            "--permits",
            "2",
            "--wait",
            "200ms",
            "--",
            "true",
        ],
    );
    assert_clean_failure(&waited, 75);
    assert!(
        waited
            .stderr
            .contains("all 2 permits of `exports` are still taken after waiting"),
        "{waited:#?}"
    );
    assert!(
        waited.stderr.contains("first@") && waited.stderr.contains("second@"),
        "{waited:#?}"
    );
    for mut holder in holders {
        signal(&holder, Signal::TERM);
        assert_eq!(wait_for(&mut holder, "permit holder"), Some(128 + 15));
    }
}
