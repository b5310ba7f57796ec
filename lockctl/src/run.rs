//! `lockctl run`: a command that runs only while its lock is held, fleet-wide.
//!
//! 1. Take the lock (waiting up to `--wait`); busy gives `--conflict-exit-code` and a line
//!    naming the holder (or the permits' holders), unless `-q` or `--conflict-exit-code 0`. A signal while waiting ends lockctl with `128 + n`.
//! 2. Start the command with the lock name, key and fencing token in its environment.
//! 3. While it runs: forward SIGINT/SIGTERM/SIGHUP/SIGQUIT to it, and watch the lease.
//!    lock-core extends the lease every ttl/3 (unless `--no-renew`: then the lease ends
//!    after `--ttl`). Either way lockctl asks Redis every ttl/3 (at most every 2 s, at least every
//!    100 ms) whether the lock is still ours. When the lease is lost, `--on-lost kill`
//!    (default) sends SIGTERM and, after `--kill-after`, SIGKILL; `--on-lost ignore` only
//!    says so.
//! 4. When it exits: release the lock (compare-and-delete: never someone else's), and exit
//!    with its status, `128 + n` if it died of signal `n`, or `--lost-exit-code` if the
//!    lease was lost under it (with `--on-lost kill`).

use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use lock_core::Locker;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::cli::{OnLost, RunArgs};
use crate::duration::format_duration;
use crate::exit::{code_of_status, Failure, CANNOT_EXECUTE, NOT_FOUND, SIGNAL_BASE};
use crate::held::Held;
use crate::holder::display_safe;
use crate::signals::{self, Signals};
use crate::store::Target;

/// Shortest pause between two looks at whether the lock is still ours.
const CHECK_FLOOR: Duration = Duration::from_millis(100);

/// Longest pause between two looks at whether the lock is still ours.
const CHECK_CEILING: Duration = Duration::from_secs(2);

/// Runs `lockctl run`; the result is the exit code.
pub async fn run(target: &Target, args: RunArgs) -> Result<u8, Failure> {
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(Failure::usage(
            "no command given; usage: lockctl run --key NAME -- COMMAND [ARGS...]",
        ));
    };
    let command = command_name(program);
    let app = args
        .app_name
        .clone()
        .unwrap_or_else(|| format!("lockctl/{command}"));
    let locker = Locker::builder()
        .url(target.url())
        .prefix(target.prefix.as_str())
        .command_timeout(target.timeout)
        .app_name(app)
        .build()
        .map_err(|err| Failure::from_lock_error(&err, &target.shown_url))?;
    let result = run_with(&locker, target, &args, &command, program, program_args).await;
    // Lets the Locker's background work finish before the runtime goes (the cleanup of an
    // acquisition interrupted by a signal, the release of a lease dropped on an error
    // path): a runtime shutdown would cancel it. Bounded, so that exiting never hangs;
    // nothing else is waited for (a released lease's renewal task ends with the runtime).
    locker.shutdown(SETTLE).await;
    result
}

/// How long lockctl waits at exit for its Locker's background work.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

async fn run_with(
    locker: &Locker,
    target: &Target,
    args: &RunArgs,
    command: &str,
    program: &std::ffi::OsString,
    program_args: &[std::ffi::OsString],
) -> Result<u8, Failure> {
    // Before waiting: a SIGTERM from a supervisor while queued for the lock must end lockctl
    // cleanly, not leave a half-made acquisition.
    let mut signals = Signals::install()?;
    let lease = acquire(locker, target, args, &mut signals).await?;

    let key = match args.permits {
        Some(_) => format!("{}:sem", target.keys(&args.key)?.lock),
        None => target.keys(&args.key)?.lock,
    };
    let mut child = match spawn(program, program_args, args, &key, &lease) {
        Ok(child) => child,
        Err(failure) => {
            release_quietly(lease).await;
            return Err(failure);
        }
    };
    let supervised = supervise(&mut child, &lease, args, command, &mut signals).await;
    let status = match supervised {
        Ok(outcome) => outcome,
        Err(failure) => {
            // Cannot tell how the command ended: do not leave it running without its lock.
            let _ = child.start_kill();
            let _ = child.wait().await;
            release_quietly(lease).await;
            return Err(failure);
        }
    };
    let mut lost = status.lost;
    let name = display_safe(&args.key).into_owned();
    match lease.release().await {
        Ok(true) => {}
        Ok(false) if !lost => {
            lost = true;
            eprintln!(
                "lockctl: lock `{name}` was no longer held when `{command}` exited (it expired or \
                 was removed): another holder may have run at the same time"
            );
        }
        Ok(false) => {}
        Err(err) => eprintln!(
            "lockctl: could not release lock `{name}` ({}); it frees itself within {}",
            Failure::from_lock_error(&err, &target.shown_url),
            format_duration(args.ttl)
        ),
    }
    if lost && args.on_lost == OnLost::Kill {
        return Ok(args.lost_exit_code);
    }
    Ok(code_of_status(status.exit))
}

/// Takes the lock, or says why not.
async fn acquire(
    locker: &Locker,
    target: &Target,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<Held, Failure> {
    let request = async {
        if let Some(permits) = args.permits {
            let mut request = locker
                .semaphore(args.key.as_str(), permits)
                .acquire()
                .ttl(args.ttl)
                .wait(args.wait);
            if args.renews() {
                request = request.auto_renew();
            }
            return request.await.map(Held::Permit);
        }
        let mut request = locker.lock(args.key.as_str()).ttl(args.ttl).wait(args.wait);
        if args.renews() {
            request = request.auto_renew();
        }
        if args.fencing {
            request = request.fencing();
        }
        if let Some(hold) = args.hold_at_least {
            request = request.hold_at_least(hold);
        }
        request.await.map(Held::Lease)
    };
    let campaign = async {
        if !args.elect {
            return request.await;
        }
        locker
            .election(args.key.as_str())
            .lease(args.ttl)
            .campaign()
            .await
            .map(Held::Leadership)
    };
    let result = tokio::select! {
        result = campaign => result,
        caught = signals.recv() => {
            // Dropping the request abandons it; lock-core cleans up what it may have taken.
            return Err(Failure::new(
                SIGNAL_BASE.saturating_add(caught.number()),
                format!(
                    "got {} while waiting for lock `{}`; the command was not run",
                    caught.name(),
                    display_safe(&args.key)
                ),
            ));
        }
    };
    let err = match result {
        Ok(held) => return Ok(held),
        Err(err) => err,
    };
    if !err.is_contention() {
        return Err(Failure::from_lock_error(&err, &target.shown_url));
    }
    if !args.reports_conflict() {
        return Err(Failure::new(args.conflict_exit_code, String::new()));
    }
    let mut failure = match (&err, args.permits) {
        // Who holds the permits, as `status` lists them: one more read, on the failure path
        // of an operator's command only.
        (lock_core::LockError::LimitReached { .. }, Some(permits)) => {
            let holders = locker
                .semaphore(args.key.as_str(), permits)
                .holders()
                .await
                .ok()
                .map(|found| {
                    found
                        .holders
                        .into_iter()
                        .map(|h| {
                            h.holder
                                .unwrap_or_else(|| "a holder without a label".into())
                        })
                        .collect::<Vec<_>>()
                });
            Failure::limit_reached(&err, holders.as_deref())
        }
        _ => Failure::from_lock_error(&err, &target.shown_url),
    };
    failure.code = args.conflict_exit_code;
    Err(failure)
}

fn spawn(
    program: &OsString,
    program_args: &[OsString],
    args: &RunArgs,
    key: &str,
    lease: &Held,
) -> Result<Child, Failure> {
    let mut command = Command::new(program);
    command
        .args(program_args)
        .env("LOCKCTL_LOCK", &args.key)
        .env("LOCKCTL_KEY", key)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        // Should lockctl fail before the command ends, the command must not run on without
        // its lock.
        .kill_on_drop(true);
    match lease.fencing_token() {
        Some(token) => command.env("LOCKCTL_FENCING_TOKEN", token.to_string()),
        None => command.env_remove("LOCKCTL_FENCING_TOKEN"),
    };
    if args.elect {
        let term = lease.fencing_token().unwrap_or_default().to_string();
        command
            .env("LOCKCTL_ELECTION", &args.key)
            .env("LOCKCTL_TERM", term);
    }
    command.spawn().map_err(|err| {
        let code = if err.kind() == std::io::ErrorKind::NotFound {
            NOT_FOUND
        } else {
            CANNOT_EXECUTE
        };
        Failure::new(
            code,
            format!("cannot run `{}`: {err}", program.to_string_lossy()),
        )
    })
}

/// How the command ended, and whether the lease was lost while it ran.
struct Outcome {
    exit: ExitStatus,
    lost: bool,
}

/// Waits for the command, forwarding signals and acting on a lost lease.
async fn supervise(
    child: &mut Child,
    lease: &Held,
    args: &RunArgs,
    command: &str,
    signals: &mut Signals,
) -> Result<Outcome, Failure> {
    let pid = child.id();
    let handle = lease.watch();
    let name = display_safe(&args.key).into_owned();
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    // Renewal alone would notice a removed lock only every ttl/3 (and with --no-renew
    // nothing would until the end): look at least every CHECK_CEILING. `is_held` marks the
    // lease lost when the lock is not ours any more, which wakes `lost()` below. A failed
    // look proves nothing: the end of the lease's validity still counts. Off the select
    // loop, so a slow Redis never delays a signal.
    let period = (args.ttl / 3).clamp(CHECK_FLOOR, CHECK_CEILING);
    let checker = tokio::spawn({
        let handle = handle.clone();
        async move {
            loop {
                tokio::time::sleep(period).await;
                let _ = handle.is_held().await;
            }
        }
    });
    let _stop_checker = AbortOnDrop(checker);
    loop {
        tokio::select! {
            exit = child.wait() => {
                let exit = exit.map_err(|err| {
                    Failure::internal(format!("cannot wait for `{command}`: {err}"))
                })?;
                return Ok(Outcome { exit, lost });
            }
            caught = signals.recv() => signals::forward(pid, caught),
            () = handle.lost(), if !lost => {
                lost = true;
                let why = if !handle.expires_in().is_zero() {
                    "it was removed (Redis says it is no longer ours)".to_owned()
                } else if args.renews() {
                    "it was not renewed within its TTL (Redis unreachable, or lockctl paused)".to_owned()
                } else {
                    format!(
                        "it outlived --ttl {} (drop --no-renew to keep the lock while it runs)",
                        format_duration(args.ttl)
                    )
                };
                match args.on_lost {
                    OnLost::Kill if args.kill_after.is_zero() => {
                        eprintln!("lockctl: lost lock `{name}` while `{command}` was running: {why}; killing it");
                        let _ = child.start_kill();
                    }
                    OnLost::Kill => {
                        eprintln!(
                            "lockctl: lost lock `{name}` while `{command}` was running: {why}; \
                             stopping it (SIGTERM, SIGKILL in {})",
                            format_duration(args.kill_after)
                        );
                        signals::terminate(pid);
                        kill_at = Some(Instant::now() + args.kill_after);
                    }
                    OnLost::Ignore => eprintln!(
                        "lockctl: lost lock `{name}` while `{command}` was running: {why}; \
                         letting it finish (--on-lost ignore)"
                    ),
                }
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                kill_at = None;
                let _ = child.start_kill();
            }
        }
    }
}

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Gives the lock back after a failure that is reported on its own.
async fn release_quietly(lease: Held) {
    let _ = lease.release().await;
}

/// `backup.sh` for `/opt/jobs/backup.sh`: what goes into the holder label.
fn command_name(program: &OsString) -> String {
    let path = Path::new(program);
    path.file_name()
        .unwrap_or(program.as_os_str())
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_drop_the_directory() {
        assert_eq!(command_name(&"/opt/jobs/backup.sh".into()), "backup.sh");
        assert_eq!(command_name(&"sleep".into()), "sleep");
    }
}
