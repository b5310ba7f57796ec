//! `lockctl`: the operations CLI of lock-core's locks on Redis.
//!
//! Shell scripts and cron jobs get the guarantee Rust code gets from `lock-core`, and
//! operators can see and act on locks:
//!
//! ```text
//! lockctl run --key NAME [--ttl 30s] [--wait 0s] [--no-renew] [-q] [--conflict-exit-code N] -- COMMAND ARGS...
//! lockctl status NAME [--json]
//! lockctl list [--match PATTERN] [--json]
//! lockctl release NAME --force
//! lockctl watch NAME [--interval 50ms] [--count N] [--json]
//! lockctl elect --name NAME [--lease 15s] -- COMMAND ARGS...
//! lockctl leader NAME [--watch] [--count N]
//! ```
//!
//! Every command takes `--url` (default `$REDIS_URL`, else `redis://127.0.0.1:6379/`),
//! `--prefix` (default `$LOCKCTL_PREFIX`, else `lock:`) and `--timeout` (connect and
//! per-command deadline, default 3 s). Durations read like `500ms`, `30s`, `1m30s`, `2h`.
//!
//! # `run`
//!
//! Like flock(1), for a whole fleet: the command runs only while the lock is held. lockctl
//! forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to it, releases the lock when it exits and
//! exits with its status. The holder label is `lockctl/<command>@<host>:<lockctl pid>`
//! (`--app-name` replaces `lockctl/<command>`). The command's environment has
//! `LOCKCTL_LOCK` (the name), `LOCKCTL_KEY` (the Redis key) and, with `--fencing`,
//! `LOCKCTL_FENCING_TOKEN`.
//!
//! The lock is held for the command's whole life: the lease lasts `--ttl` and is renewed
//! every ttl/3 while the command runs. When a renewal fails (Redis unreachable) it is
//! retried; the lease is lost only when no renewal succeeded for a whole TTL, or at once
//! when Redis says the lock is no longer ours. lockctl also looks every ttl/3 (every 2 s at
//! most) whether the lock is still its own, so a lock removed under it (say, by
//! `lockctl release --force`) is lost too. `--no-renew` turns renewal off: the lease then
//! lasts `--ttl` and a longer command loses it. On a lost lease, `--on-lost kill` (the
//! default) sends the command SIGTERM, then SIGKILL after `--kill-after` (10 s), and
//! lockctl exits with `--lost-exit-code` (79); `--on-lost ignore` only says so on stderr and
//! exits with the command's status.
//!
//! A busy lock prints one line naming the holder (for `--permits N`: "all N permits of
//! `x` are taken (held by ...)") and exits with `--conflict-exit-code` (75). With `-q`, or
//! with `--conflict-exit-code 0` (a quiet success for cron, which mails what is printed),
//! nothing is printed.
//!
//! If lockctl itself is killed with SIGKILL the command goes on running, and its lock frees
//! itself after at most one TTL: keep `--ttl` short for long jobs.
//!
//! # `status`
//!
//! Prints the lock's state, holder, remaining TTL and fencing counter, and every holder of
//! the name's semaphore and read-write lock. Exits 0 when anything of the name is held and
//! 1 ([`exit::FREE`]) when nothing is, so that scripts can write
//! `if lockctl status deploy; then ...`.
//!
//! # `elect` and `leader`
//!
//! `lockctl elect --name NAME -- COMMAND` runs the command as the fleet's leader (lock-core's
//! `Election`): it waits in line for leadership, starts the command once elected with
//! `LOCKCTL_ELECTION` and `LOCKCTL_TERM` (also `LOCKCTL_FENCING_TOKEN`) in its environment,
//! renews the lease (`--lease`, default 15 s) every third of it, stops the command when
//! leadership is lost (as `run` does on a lost lease, exit 79), and resigns when it exits.
//! `--hold-at-least` on `run` holds a lock at least that long from the start, for jobs run
//! from cron on every host. `lockctl leader NAME` shows who leads (label, term, since when);
//! `--watch` prints each change, once and in order, until Ctrl-C or `--count` changes.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; for `run`, the command exited 0; for `status`, the name is held |
//! | 1 | `status`: nothing of the name is held ([`exit::FREE`]) |
//! | other | `run`: the command's own exit code |
//! | 64 | usage: bad option, duration, Redis URL or lock name ([`exit::USAGE`]) |
//! | 69 | Redis unreachable, or the connection broke ([`exit::UNAVAILABLE`]) |
//! | 70 | internal: an unexpected Redis error, a key that is not a lock ([`exit::INTERNAL`]) |
//! | 75 | `run`: the lock is busy; `--conflict-exit-code` changes it ([`exit::CONFLICT`]) |
//! | 79 | `run`: the lease was lost while the command ran; `--lost-exit-code` changes it ([`exit::LOST`]) |
//! | 126, 127 | `run`: the command cannot be executed, or was not found |
//! | 128+N | `run`: the command died of signal N, or lockctl got signal N while waiting for the lock |
//!
//! A command may itself exit with 64–79; pick `--conflict-exit-code` and `--lost-exit-code`
//! values it never uses when the difference matters. Errors are one line on stderr starting
//! with `lockctl: `; lockctl never panics on bad input or an unreachable server.
//!
//! # Redis
//!
//! `run` and `status` go through lock-core. `list` walks the keyspace with `SCAN` (never
//! `KEYS`) and reads each page in one pipeline. `release --force` removes the key in a
//! `WATCH`/`MULTI` transaction (no scripting needed) and publishes `forced` on the lock's
//! release channel, which wakes lock-core's waiters. `watch` subscribes to that channel and
//! reads the key every `--interval`; it never changes server configuration.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod cli;
pub mod duration;
pub mod exit;
mod held;
pub mod holder;
mod inspect;
mod leader;
mod output;
mod permits;
mod run;
mod signals;
pub mod store;
mod waits;
mod watch;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser as _;

pub use duration::{format_duration, parse_duration};
pub use exit::Failure;
pub use holder::Holder;

use cli::{Cli, Command};
use store::Target;

/// Runs lockctl with the process's arguments and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return report(Failure::internal(format!(
                "cannot start the async runtime: {err}"
            )))
        }
    };
    let result = runtime.block_on(dispatch(cli));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => report(failure),
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let target = Target::new(&cli.url, &cli.prefix, cli.timeout)?;
    match cli.command {
        Command::Run(args) => run::run(&target, args).await,
        Command::Status(args) => inspect::status(&target, &args).await,
        Command::List(args) => inspect::list(&target, &args).await,
        Command::Release(args) => inspect::release(&target, &args).await,
        Command::Watch(args) => watch::watch(&target, &args).await,
        Command::Elect(args) => run::run(&target, cli::RunArgs::election(args)).await,
        Command::Leader(args) => leader::leader(&target, &args).await,
        Command::Waits(args) => waits::waits(&target, &args).await,
    }
}

fn report(failure: Failure) -> ExitCode {
    if !failure.message.is_empty() {
        eprintln!("lockctl: {}", failure.message);
    }
    ExitCode::from(failure.code)
}

/// Help and version go to stdout with 0; a bad command line is one line on stderr with 64.
fn usage_error(err: &clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            ExitCode::from(exit::USAGE)
        }
        _ => report(Failure::usage(clap_message(&err.render().to_string()))),
    }
}

/// The first paragraph of clap's message on one line, without `error: `, plus a pointer to
/// the help.
fn clap_message(rendered: &str) -> String {
    let first: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let text = first.join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    // clap's "did you mean": `tip: a similar subcommand exists: 'status'`.
    let tips: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter_map(|line| line.strip_prefix("tip: "))
        .filter(|tip| tip.contains("similar"))
        .collect();
    if tips.is_empty() {
        format!("{text} (see lockctl --help)")
    } else {
        format!("{text}; {} (see lockctl --help)", tips.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        let rendered = "error: the following required arguments were not provided:\n  --key <NAME>\n\nUsage: lockctl run --key <NAME> <COMMAND>...\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_message(rendered),
            "the following required arguments were not provided: --key <NAME> (see lockctl --help)"
        );
    }

    #[test]
    fn clap_tips_are_kept() {
        let rendered = "error: unrecognized subcommand 'statuss'\n\n  tip: a similar subcommand exists: 'status'\n\nUsage: lockctl [OPTIONS] <COMMAND>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_message(rendered),
            "unrecognized subcommand 'statuss'; a similar subcommand exists: 'status' (see lockctl --help)"
        );
    }

    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
