//! One language across commands: `status` and `leader` exit 0 when something holds or leads
//! and 1 when nothing does; a full semaphore is not "free"; `run` and `elect` both take
//! `--name`; durations are echoed as they were written and named by their flag; a typo of
//! a command gets clap's "did you mean"; a server that wants a password gets exit 78 and
//! how to give one, not "internal" (70) or redis-rs's pipeline wording; a busy lock says
//! when its lease ends unless renewed, not when it is free; `--help` lists the exit codes.

use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;

use crate::support::{assert_clean_failure, lockctl, lockctl_at, run, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_semaphore_is_full_not_free() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).unwrap();
    let exports = locker.semaphore("exports", 2);
    let ttl = Duration::from_secs(30);
    let first = exports.acquire().ttl(ttl).await.unwrap();
    let status = run(&server, &["status", "exports"]);
    assert_eq!(status.code, Some(0), "{status:#?}");
    assert!(
        status
            .stdout
            .contains("state     in use (1 of the semaphore's 2 permits held)"),
        "{status:#?}"
    );
    let second = exports.acquire().ttl(ttl).await.unwrap();
    let status = run(&server, &["status", "exports"]);
    assert_eq!(status.code, Some(0), "{status:#?}");
    assert!(
        status
            .stdout
            .contains("state     full (all 2 permits of the semaphore are held)"),
        "{status:#?}"
    );
    assert!(!status.stdout.contains("free"), "{status:#?}");
    let json = run(&server, &["status", "exports", "--json"]);
    assert!(json.stdout.contains(r#""state":"full""#), "{json:#?}");
    drop((first, second));
    assert!(locker.shutdown(Duration::from_secs(5)).await);
    let status = run(&server, &["status", "exports"]);
    assert_eq!(status.code, Some(1), "{status:#?}");
    assert!(status.stdout.contains("state     free"), "{status:#?}");
}

#[test]
fn leader_exits_1_without_a_leader_as_status_does_when_free() {
    let server = RedisServer::start();
    let none = run(&server, &["leader", "scheduler"]);
    assert_eq!(none.code, Some(1), "{none:#?}");
    assert_eq!(none.stdout, "no leader\n");
    let free = run(&server, &["status", "scheduler"]);
    assert_eq!(free.code, Some(1), "{free:#?}");

    // `elect --name` and `run --name` alike; `run --key` and `elect --key` still work.
    let mut leader = lockctl(&server)
        .args([
            "elect",
            "--name",
            "scheduler",
            "--lease",
            "5s",
            "--",
            "sleep",
            "30",
        ])
        .spawn()
        .unwrap();
    wait_until("a leader", || {
        run(&server, &["leader", "scheduler"]).code == Some(0)
    });
    let led = run(&server, &["leader", "scheduler"]);
    assert!(led.stdout.starts_with("leader lockctl/sleep@"), "{led:#?}");
    leader.kill().unwrap();
    let _ = leader.wait();
    for flag in ["--name", "--key", "-n", "-k"] {
        let ran = run(&server, &["run", flag, "job", "--", "true"]);
        assert_eq!(ran.code, Some(0), "{flag}: {ran:#?}");
    }
}

#[test]
fn durations_are_echoed_as_written_and_named_by_their_flag() {
    let server = RedisServer::start();
    let zero = run(
        &server,
        &["run", "--name", "a", "--ttl", "0s", "--", "true"],
    );
    assert_clean_failure(&zero, 64);
    assert!(
        zero.stderr
            .contains("invalid --ttl 0s: it must be between 1ms and 24h"),
        "{zero:#?}"
    );
    assert!(!zero.stderr.contains("0ns"), "{zero:#?}");
    let long = run(
        &server,
        &["run", "--name", "a", "--wait", "25h", "--", "true"],
    );
    assert_clean_failure(&long, 64);
    assert!(
        long.stderr
            .contains("invalid --wait 25h: it must be at most 24h"),
        "{long:#?}"
    );
    assert!(!long.stderr.contains("90000s"), "{long:#?}");
    let lease = run(
        &server,
        &["elect", "--name", "e", "--lease", "0s", "--", "true"],
    );
    assert_clean_failure(&lease, 64);
    assert!(
        lease
            .stderr
            .contains("invalid --lease 0s: it must be between 1ms and 24h (for election `e`)"),
        "{lease:#?}"
    );
    assert!(!lease.stderr.contains("ttl"), "{lease:#?}");
}

#[test]
fn a_mistyped_command_gets_a_did_you_mean() {
    let server = RedisServer::start();
    let typo = run(&server, &["statuss", "x"]);
    assert_clean_failure(&typo, 64);
    assert!(
        typo.stderr
            .contains("a similar subcommand exists: 'status'"),
        "{typo:#?}"
    );
}

#[test]
fn help_lists_the_exit_codes_of_every_command() {
    let server = RedisServer::start();
    for command in [
        "run", "elect", "status", "leader", "list", "release", "watch",
    ] {
        let help = run(&server, &[command, "--help"]);
        assert_eq!(help.code, Some(0), "{help:#?}");
        for code in ["  64 ", "  69 ", "  70 ", "  78 "] {
            assert!(
                help.stdout.contains(code),
                "{command} --help lacks {code}: {help:#?}"
            );
        }
        assert!(help.stdout.contains("leader: no leader"), "{help:#?}");
    }
}

/// A server with `requirepass`, reached without a password (and with a wrong one): exit 78
/// with how to pass credentials, from every command, never 70 with redis-rs's pipeline
/// wording.
#[test]
fn a_password_server_without_a_password_is_a_configuration_error() {
    let server = RedisServer::start_with(&["requirepass s3cret"]);
    let url = server.url();
    for args in [
        &["status", "job"][..],
        &["list"],
        &["release", "--force", "job"],
        &["leader", "job"],
        &["run", "--name", "job", "--wait", "30s", "--", "true"],
    ] {
        let ran = lockctl_at(&url).args(args).output().unwrap().into();
        assert_clean_failure(&ran, 78);
        let ran: &crate::support::Ran = &ran;
        assert!(
            ran.stderr.contains("requires a password"),
            "{args:?}: {ran:#?}"
        );
        assert!(
            ran.stderr.contains("redis://:PASSWORD@host:port/"),
            "{args:?}: {ran:#?}"
        );
        assert!(
            !ran.stderr.contains("Pipeline failures"),
            "{args:?}: {ran:#?}"
        );
    }
    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    let ran = lockctl_at(&wrong)
        .args(["status", "job"])
        .output()
        .unwrap()
        .into();
    assert_clean_failure(&ran, 78);
    let ran: &crate::support::Ran = &ran;
    assert!(ran.stderr.contains("WRONGPASS"), "{ran:#?}");
    assert!(!ran.stderr.contains("nope"), "{ran:#?}");
    let right = format!("redis://:s3cret@127.0.0.1:{}/", server.port());
    let ran: crate::support::Ran = lockctl_at(&right)
        .args(["status", "job"])
        .output()
        .unwrap()
        .into();
    assert_eq!(ran.code, Some(1), "{ran:#?}");
}

/// A busy lock whose holder renews: the message says when its lease ends unless renewed,
/// not "free in at most", which the renewing holder proves wrong every ttl/3.
#[test]
fn a_busy_lock_says_its_lease_ends_unless_renewed() {
    let server = RedisServer::start();
    let mut holder = lockctl(&server)
        .args(["run", "--name", "job", "--ttl", "3s", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the holder", || {
        run(&server, &["status", "job"]).code == Some(0)
    });
    let busy = run(&server, &["run", "--name", "job", "--", "true"]);
    assert_clean_failure(&busy, 75);
    assert!(busy.stderr.contains("its lease ends in "), "{busy:#?}");
    assert!(busy.stderr.contains(" unless renewed)"), "{busy:#?}");
    assert!(!busy.stderr.contains("at most"), "{busy:#?}");
    holder.kill().unwrap();
    let _ = holder.wait();
}
