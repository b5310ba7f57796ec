//! Running the built `lockctl` binary against a test server.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_tests::RedisServer;

/// Generous bound for anything that should happen "soon".
pub const SOON: Duration = Duration::from_secs(20);

/// `lockctl` with `REDIS_URL` pointing at `server`, and no inherited prefix.
pub fn lockctl(server: &RedisServer) -> Command {
    lockctl_at(&server.url())
}

/// `lockctl` with `REDIS_URL` set to `url`.
pub fn lockctl_at(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    command
        .env("REDIS_URL", url)
        .env_remove("LOCKCTL_PREFIX")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    command
}

/// What one finished invocation printed and returned.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Ran {
    fn from(output: Output) -> Ran {
        Ran {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// Runs `lockctl ARGS` to completion.
pub fn run(server: &RedisServer, args: &[&str]) -> Ran {
    lockctl(server)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run lockctl: {err}"))
        .into()
}

/// Asserts the shape of a failure: the code, one line on stderr that starts with
/// `lockctl: `, and no panic or backtrace.
pub fn assert_clean_failure(ran: &Ran, code: i32) {
    assert_eq!(ran.code, Some(code), "{ran:#?}");
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr: {ran:#?}");
    assert!(lines[0].starts_with("lockctl: "), "{ran:#?}");
    assert!(!ran.stderr.contains("panicked"), "{ran:#?}");
    assert!(!ran.stderr.contains("backtrace"), "{ran:#?}");
}

/// Polls `check` until it holds, or panics after [`SOON`].
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < SOON, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).starts_with(":1")
}

/// The text of a file, or empty if it does not exist yet.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits for a child process, at most [`SOON`]; kills it and panics if it hangs.
pub fn wait_for(child: &mut std::process::Child, what: &str) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        if started.elapsed() > SOON {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {SOON:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` to `child`.
pub fn signal(child: &std::process::Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child has a pid");
    rustix::process::kill_process(pid, signal).expect("kill");
}
