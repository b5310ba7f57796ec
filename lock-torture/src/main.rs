//! `lock-torture`: see the crate docs, or `lock-torture --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lock_torture::client::{self, ClientArgs};
use lock_torture::run::{self, RunArgs};
use lock_torture::trace;

/// Torture lock-core with faults, and check the recorded history.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a workload with faults and check it (one summary line per run).
    Run(RunArgs),
    /// Re-check the logs of a run kept with `run --logs DIR` (give DIR/<mode>).
    Check {
        /// The directory holding the run's *.jsonl logs and store.json.
        dir: PathBuf,
        /// Lock servers the run used.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
    },
    /// One client process (started by `run`; stops when its standard input closes).
    #[command(hide = true)]
    Client(ClientArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Run(args) => match run::run(&args) {
            Ok(outcomes) => {
                let failed = outcomes.iter().filter(|o| !o.report.passed()).count();
                if outcomes.len() > 1 {
                    let violations: usize =
                        outcomes.iter().map(|o| o.report.violations.len()).sum();
                    println!(
                        "runs={} failed={failed} violations={violations}",
                        outcomes.len()
                    );
                }
                if failed == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(err) => {
                eprintln!("lock-torture: {err}");
                ExitCode::from(2)
            }
        },
        Cmd::Check { dir, nodes } => match run::check_dir(&dir, nodes) {
            Ok(report) => {
                println!("{}", report.summary());
                if !report.violations.is_empty() {
                    eprintln!("  violations by rule: {}", report.by_rule());
                }
                for v in &report.violations {
                    eprintln!("  violation [{}] {}: {}", v.rule, v.name, v.detail);
                }
                if report.passed() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(err) => {
                eprintln!("lock-torture: {err}");
                ExitCode::from(2)
            }
        },
        Cmd::Client(args) => match trace::init().and_then(|()| client::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("lock-torture client: {err}");
                ExitCode::from(2)
            }
        },
    }
}
