//! `lockctl`: the operations CLI of lock-core's locks on Redis. The crate's documentation is
//! its README, the one reference for the commands, the differences from flock(1) and the
//! exit codes (whose table is [`exit::TABLE`]).
#![doc = ""]
#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod capacity;
pub mod cli;
mod doctor;
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
    // Redlock's masters replace --url (and REDIS_URL), which is then not even parsed.
    if let Command::Doctor(args) = &cli.command {
        if !args.redlock.is_empty() {
            return doctor::redlock(&args.redlock, &cli.prefix, cli.timeout, args.json).await;
        }
    }
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
        Command::Doctor(args) => doctor::doctor(&target, &args).await,
        Command::Capacity(args) => capacity::capacity(&target, &args).await,
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
