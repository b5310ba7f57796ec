//! `lockctl run`: mutual exclusion across processes, conflicts, lost leases, signals and
//! exit statuses.

use std::process::Stdio;

use lock_tests::RedisServer;
use rustix::process::Signal;

use crate::support::{
    assert_clean_failure, exists, lockctl, read, run, signal, wait_for, wait_until,
};

/// Five processes, one lock name: each appends `start i` and `end i` to one file while it
/// holds the lock. The lines must come in pairs, never interleaved.
#[test]
fn five_concurrent_runs_never_overlap() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = "echo \"start $RUN_ID\" >> \"$LOG\"; sleep 0.2; echo \"end $RUN_ID\" >> \"$LOG\"";
    let mut children: Vec<_> = (0..5)
        .map(|i| {
            lockctl(&server)
                .args([
                    "run",
                    "--key",
                    "nightly job",
                    "--ttl",
                    "10s",
                    "--wait",
                    "60s",
                ])
                .args(["--", "sh", "-c", script])
                .env("RUN_ID", i.to_string())
                .env("LOG", &log)
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.iter_mut().enumerate() {
        assert_eq!(wait_for(child, &format!("run {i}")), Some(0));
    }
    let text = read(&log);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{text}");
    let mut seen = Vec::new();
    for pair in lines.chunks(2) {
        let id = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("overlap:\n{text}"));
        assert_eq!(pair[1], format!("end {id}"), "overlap:\n{text}");
        seen.push(id.to_owned());
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2", "3", "4"]);
    assert!(!exists(&server, "lock:{nightly job}"), "lock left behind");
}

#[test]
fn busy_lock_gives_the_conflict_code_and_names_the_holder() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut holder = lockctl(&server)
        .args([
            "run", "--key", "report", "--ttl", "30s", "--", "sleep", "30",
        ])
        .spawn()
        .unwrap();
    wait_until("the holder's lock", || exists(&server, "lock:{report}"));

    let marker = dir.path().join("ran");
    let marker = marker.to_str().unwrap();
    let busy = run(
        &server,
        &[
            "run", "--key", "report", "--wait", "0", "--", "touch", marker,
        ],
    );
    assert_clean_failure(&busy, 75);
    assert!(busy.stderr.contains("lock `report` is busy"), "{busy:#?}");
    assert!(busy.stderr.contains("held by lockctl/sleep@"), "{busy:#?}");
    assert!(
        busy.stderr.contains(&format!(":{}", holder.id())),
        "the holder's pid: {busy:#?}"
    );

    let custom = run(
        &server,
        &[
            "run",
            "--key",
            "report",
            "--wait",
            "200ms",
            "--conflict-exit-code",
            "3",
            "--",
            "touch",
            marker,
        ],
    );
    assert_clean_failure(&custom, 3);
    assert!(
        custom.stderr.contains("still busy after waiting"),
        "{custom:#?}"
    );
    assert!(!std::path::Path::new(marker).exists(), "the command ran");

    signal(&holder, Signal::TERM);
    assert_eq!(wait_for(&mut holder, "holder"), Some(128 + 15));
    assert!(!exists(&server, "lock:{report}"));
}

/// flock's short options for the same things: `-w` (wait; lockctl's takes a unit) and `-E`
/// (the conflict exit code), so `flock -w 1 -E 1 FILE cmd` ports option for option.
#[test]
fn flock_short_options_wait_and_choose_the_conflict_code() {
    let server = RedisServer::start();
    // flock's other options, typed out of habit, are refused, not run as the command.
    for habit in ["-x", "-s", "-o", "--bogus"] {
        let ran = run(&server, &["run", "-n", "ported", habit, "--", "true"]);
        assert_clean_failure(&ran, 64);
        assert!(ran.stderr.contains(&format!("'{habit}'")), "{ran:#?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut holder = lockctl(&server)
        .args(["run", "-n", "ported", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the holder's lock", || exists(&server, "lock:{ported}"));

    let marker = dir.path().join("ran");
    let marker = marker.to_str().unwrap();
    let busy = run(
        &server,
        &[
            "run", "-n", "ported", "-w", "200ms", "-E", "1", "--", "touch", marker,
        ],
    );
    assert_clean_failure(&busy, 1);
    assert!(
        busy.stderr.contains("still busy after waiting"),
        "-w waited: {busy:#?}"
    );
    let quiet = run(
        &server,
        &["run", "-n", "ported", "-E", "0", "--", "touch", marker],
    );
    assert_eq!(quiet.code, Some(0), "{quiet:#?}");
    assert_eq!(quiet.stderr, "", "-E 0 is a quiet success: {quiet:#?}");
    assert!(!std::path::Path::new(marker).exists(), "the command ran");

    signal(&holder, Signal::TERM);
    assert_eq!(wait_for(&mut holder, "holder"), Some(128 + 15));
    // Free now: -w returns at once with the command's own status.
    let free = run(
        &server,
        &[
            "run", "-n", "ported", "-w", "5s", "-E", "1", "--", "touch", marker,
        ],
    );
    assert_eq!(free.code, Some(0), "{free:#?}");
    assert!(
        std::path::Path::new(marker).exists(),
        "the command did not run"
    );
}

/// With renewal (the default), deleting the key (as `release --force` or an operator would) is noticed
/// at the next renewal: the command is stopped and lockctl exits with the lost code.
#[test]
fn deleted_lock_kills_the_command() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut child = lockctl(&server)
        .args(["run", "--key", "import", "--ttl", "600ms", "--"])
        .args(["sh", "-c", "echo $$ > \"$PID_FILE\"; exec sleep 60"])
        .env("PID_FILE", &pid_file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the command to start", || read(&pid_file).ends_with('\n'));
    let command_pid: u32 = read(&pid_file).trim().parse().unwrap();
    // Longer than the TTL: renewal keeps the lock.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert!(exists(&server, "lock:{import}"), "renewal stopped");
    assert!(server.command(&["DEL", "lock:{import}"]).starts_with(":1"));

    assert_eq!(wait_for(&mut child, "lockctl run"), Some(79));
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(stderr.contains("lost lock `import`"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !std::path::Path::new(&format!("/proc/{command_pid}")).exists(),
        "the command is still running"
    );
}

/// With --no-renew, a command that outlives --ttl is stopped; SIGKILL follows SIGTERM when
/// the command ignores it.
#[test]
fn command_outliving_its_ttl_is_stopped() {
    let server = RedisServer::start();
    let overran = run(
        &server,
        &[
            "run",
            "--key",
            "t",
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

    let stubborn = run(
        &server,
        &[
            "run",
            "--key",
            "t",
            "--ttl",
            "300ms",
            "--no-renew",
            "--kill-after",
            "300ms",
            "--lost-exit-code",
            "9",
            "--",
            "sh",
            "-c",
            "trap '' TERM; while :; do sleep 0.1; done",
        ],
    );
    assert_clean_failure(&stubborn, 9);

    let ignored = run(
        &server,
        &[
            "run",
            "--key",
            "t",
            "--ttl",
            "200ms",
            "--no-renew",
            "--on-lost",
            "ignore",
            "--",
            "sleep",
            "0.6",
        ],
    );
    assert_eq!(ignored.code, Some(0), "{ignored:#?}");
    assert!(ignored.stderr.contains("letting it finish"), "{ignored:#?}");
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let script = "trap 'echo TERM > \"$SEEN\"; exit 3' TERM; echo ready > \"$SEEN\"; \
                  while :; do sleep 0.05; done";
    let mut child = lockctl(&server)
        .args(["run", "--key", "svc", "--", "sh", "-c", script])
        .env("SEEN", &seen)
        .spawn()
        .unwrap();
    wait_until("the command to start", || read(&seen) == "ready\n");
    signal(&child, Signal::TERM);
    assert_eq!(wait_for(&mut child, "lockctl run"), Some(3));
    assert_eq!(read(&seen), "TERM\n");
    assert!(!exists(&server, "lock:{svc}"), "lock left behind");
}

#[test]
fn sigint_is_forwarded_and_death_by_signal_is_128_plus_n() {
    let server = RedisServer::start();
    let mut child = lockctl(&server)
        .args(["run", "--key", "svc", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the lock", || exists(&server, "lock:{svc}"));
    signal(&child, Signal::INT);
    assert_eq!(wait_for(&mut child, "lockctl run"), Some(128 + 2));
    assert!(!exists(&server, "lock:{svc}"), "lock left behind");
}

#[test]
fn a_signal_while_waiting_ends_lockctl_without_running_the_command() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut holder = lockctl(&server)
        .args(["run", "--key", "q", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("the holder's lock", || exists(&server, "lock:{q}"));
    let mut waiter = lockctl(&server)
        .args(["run", "--key", "q", "--wait", "60s", "--", "touch"])
        .arg(&marker)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(&waiter, Signal::TERM);
    assert_eq!(wait_for(&mut waiter, "waiter"), Some(128 + 15));
    let stderr = std::io::read_to_string(waiter.stderr.take().unwrap()).unwrap();
    assert!(stderr.contains("got SIGTERM while waiting"), "{stderr}");
    signal(&holder, Signal::TERM);
    wait_for(&mut holder, "holder");
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn exit_statuses_pass_through() {
    let server = RedisServer::start();
    let code = |args: &[&str]| {
        let mut full = vec!["run", "--key", "x", "--"];
        full.extend_from_slice(args);
        run(&server, &full)
    };
    assert_eq!(code(&["true"]).code, Some(0));
    assert_eq!(code(&["sh", "-c", "exit 7"]).code, Some(7));
    assert_eq!(code(&["sh", "-c", "kill -KILL $$"]).code, Some(128 + 9));
    assert_clean_failure(&code(&["no-such-command-anywhere"]), 127);
    assert_clean_failure(&code(&["/"]), 126);
    assert!(!exists(&server, "lock:{x}"), "lock left behind");
}

#[test]
fn the_command_sees_its_lock_and_fencing_token() {
    let server = RedisServer::start();
    let script = "echo \"$LOCKCTL_LOCK|$LOCKCTL_KEY|$LOCKCTL_FENCING_TOKEN\"";
    let fenced = || {
        run(
            &server,
            &[
                "run",
                "--key",
                "ünï cødé",
                "--fencing",
                "--",
                "sh",
                "-c",
                script,
            ],
        )
    };
    let token = |out: &str| -> u64 {
        let (prefix, token) = out.trim_end().rsplit_once('|').unwrap();
        assert_eq!(prefix, "ünï cødé|lock:{ünï cødé}");
        token.parse().unwrap()
    };
    let first = fenced();
    assert_eq!(first.code, Some(0), "{first:#?}");
    let second = fenced();
    assert!(
        token(&second.stdout) > token(&first.stdout),
        "{first:#?} {second:#?}"
    );
    let unfenced = run(
        &server,
        &["run", "--key", "ünï cødé", "--", "sh", "-c", script],
    );
    assert_eq!(unfenced.stdout, "ünï cødé|lock:{ünï cødé}|\n");
}

#[test]
fn the_holder_label_names_the_command_or_the_app() {
    let server = RedisServer::start();
    let mut holder = lockctl(&server)
        .args([
            "run",
            "--key",
            "l",
            "--app-name",
            "billing-cron",
            "--",
            "sleep",
            "30",
        ])
        .spawn()
        .unwrap();
    wait_until("the lock", || exists(&server, "lock:{l}"));
    let status = run(&server, &["status", "l"]);
    assert!(status.stdout.contains("billing-cron@"), "{status:#?}");
    assert!(
        status
            .stdout
            .contains(&format!("pid       {}", holder.id())),
        "{status:#?}"
    );
    signal(&holder, Signal::TERM);
    wait_for(&mut holder, "holder");
}

/// With --no-renew, lockctl still looks every ttl/3: a removed lock stops the command long
/// before the TTL would.
#[test]
fn deleted_lock_is_noticed_without_renewal_too() {
    let server = RedisServer::start();
    let mut child = lockctl(&server)
        .args(["run", "--key", "export", "--ttl", "1m", "--no-renew", "--"])
        .args(["sleep", "60"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the lock", || exists(&server, "lock:{export}"));
    assert_eq!(
        run(&server, &["release", "export", "--force"]).code,
        Some(0)
    );
    assert_eq!(wait_for(&mut child, "lockctl run"), Some(79));
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(stderr.contains("it was removed"), "{stderr}");
}

/// `--hold-at-least`: four hosts run the same scheduled job one after another, as timers a
/// little apart fire it; the job (much shorter than the gaps) runs once, the others skip with
/// the conflict code (here 0: a skipped run is a success), and the lock is left to expire at
/// the hold's end rather than deleted.
#[test]
fn hold_at_least_runs_a_scheduled_job_once_across_hosts() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    for host in 0..4 {
        let ran = run(
            &server,
            &[
                "run",
                "--key",
                "hourly digest",
                "--hold-at-least",
                "1m",
                "--conflict-exit-code",
                "0",
                "--",
                "sh",
                "-c",
                &format!("echo ran {host} >> \"{}\"", log.display()),
            ],
        );
        assert_eq!(ran.code, Some(0), "host {host}: {}", ran.stderr);
    }
    assert_eq!(read(&log), "ran 0\n", "the job ran once");
    let pttl: i64 = server
        .command(&["PTTL", "lock:{hourly digest}"])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!(
        pttl > 0 && pttl <= 60_000,
        "left to expire at the end of the hold: {pttl}"
    );
}
