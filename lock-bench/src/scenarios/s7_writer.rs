//! S7's writer in a process of its own, as another service's writer would be: lock-bench
//! runs itself again with `--s7-writer URL PREFIX NAME`. The child warms its Locker up,
//! says `ready`, waits for `go <ms>` on its stdin, loops on write leases for that long
//! (every [`WRITER_EVERY`](super::s7_hold::WRITER_EVERY)), and prints each hold as
//! `hold <asked> <entered> <leaving>` (Unix nanoseconds: both processes read the same
//! machine's clock) and each failure as `fail <message>`. The parent maps the times back
//! onto its own monotonic clock.

use std::io::{BufRead as _, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_core::Locker;

use super::s7_hold::{hold_loop, Hold, TTL};
use super::Failures;

/// The command-line flag of the child mode.
pub const FLAG: &str = "--s7-writer";

/// Maps instants of this process onto Unix nanoseconds and back.
#[derive(Clone, Copy)]
struct Anchor {
    at: Instant,
    unix_ns: i128,
}

impl Anchor {
    fn now() -> Anchor {
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        Anchor {
            at: Instant::now(),
            unix_ns,
        }
    }

    fn to_unix(self, t: Instant) -> i128 {
        self.unix_ns + t.saturating_duration_since(self.at).as_nanos() as i128
            - self.at.saturating_duration_since(t).as_nanos() as i128
    }

    fn to_instant(self, unix_ns: i128) -> Instant {
        let delta = unix_ns - self.unix_ns;
        if delta >= 0 {
            self.at + Duration::from_nanos(delta as u64)
        } else {
            self.at
                .checked_sub(Duration::from_nanos((-delta) as u64))
                .unwrap_or(self.at)
        }
    }
}

/// The child side: `args` are URL, key prefix and name.
pub async fn child(args: &[String]) -> Result<(), String> {
    let [url, prefix, name] = args else {
        return Err(format!("{FLAG} takes URL PREFIX NAME"));
    };
    let locker = Locker::builder()
        .url(url.clone())
        .prefix(prefix.as_str())
        .build()
        .map_err(|err| format!("cannot build a locker: {err}"))?;
    let warm = locker.rwlock(format!("{name}-warm-up"));
    let lease = warm
        .write()
        .ttl(TTL)
        .await
        .map_err(|err| format!("warm-up: {err}"))?;
    let _ = lease.release().await;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").map_err(|err| err.to_string())?;
    out.flush().map_err(|err| err.to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|err| err.to_string())?;
    let run_for = line
        .trim()
        .strip_prefix("go ")
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(Duration::from_millis)
        .ok_or_else(|| format!("expected `go <ms>`, got {line:?}"))?;
    let anchor = Anchor::now();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let failures = hold_loop(
        locker,
        name.clone(),
        true,
        anchor.at,
        run_for,
        holds.clone(),
    )
    .await;
    for hold in holds.lock().unwrap_or_else(PoisonError::into_inner).iter() {
        writeln!(
            out,
            "hold {} {} {}",
            anchor.to_unix(hold.asked),
            anchor.to_unix(hold.entered),
            anchor.to_unix(hold.leaving)
        )
        .map_err(|err| err.to_string())?;
    }
    if let Some(first) = failures.first {
        for _ in 0..failures.count {
            writeln!(out, "fail {}", first.replace('\n', " ")).map_err(|err| err.to_string())?;
        }
    }
    out.flush().map_err(|err| err.to_string())
}

/// The parent side: a child started and warmed up, waiting for `go`.
pub struct Writer {
    child: Child,
    stdin: ChildStdin,
    stdout: std::io::BufReader<ChildStdout>,
}

impl Writer {
    pub fn start(url: &str, prefix: &str, name: &str) -> Result<Writer, String> {
        let exe = std::env::current_exe().map_err(|err| format!("no executable: {err}"))?;
        let mut child = Command::new(exe)
            .args([FLAG, url, prefix, name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|err| format!("cannot start the writer process: {err}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the writer process has no pipes".into());
        };
        let mut writer = Writer {
            child,
            stdin,
            stdout: std::io::BufReader::new(stdout),
        };
        let mut line = String::new();
        writer
            .stdout
            .read_line(&mut line)
            .map_err(|err| err.to_string())?;
        if line.trim() != "ready" {
            return Err(format!("the writer process said {line:?}"));
        }
        Ok(writer)
    }

    /// Starts the writer's run of `run_for`.
    pub fn go(&mut self, run_for: Duration) -> Result<(), String> {
        writeln!(self.stdin, "go {}", run_for.as_millis()).map_err(|err| err.to_string())?;
        self.stdin.flush().map_err(|err| err.to_string())
    }

    /// Waits for the child's holds (on this process's clock) and failures.
    pub fn finish(mut self) -> (Vec<Hold>, Failures) {
        let anchor = Anchor::now();
        let mut holds = Vec::new();
        let mut failures = Failures::default();
        let mut line = String::new();
        loop {
            line.clear();
            match self.stdout.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) => {
                    failures.record(format!("writer process: {err}"));
                    break;
                }
            }
            if let Some(fail) = line.trim().strip_prefix("fail ") {
                failures.record(fail.to_owned());
                continue;
            }
            let times: Vec<i128> = line
                .trim()
                .strip_prefix("hold ")
                .unwrap_or("")
                .split(' ')
                .filter_map(|t| t.parse().ok())
                .collect();
            if let [asked, entered, leaving] = times[..] {
                holds.push(Hold {
                    write: true,
                    asked: anchor.to_instant(asked),
                    entered: anchor.to_instant(entered),
                    leaving: anchor.to_instant(leaving),
                });
            }
        }
        match self.child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failures.record(format!("writer process ended with {status}")),
            Err(err) => failures.record(format!("writer process: {err}")),
        }
        (holds, failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_survive_the_trip_through_unix_time() {
        let anchor = Anchor::now();
        let later = anchor.at + Duration::from_millis(1500);
        let back = anchor.to_instant(anchor.to_unix(later));
        assert_eq!(back, later);
    }
}
