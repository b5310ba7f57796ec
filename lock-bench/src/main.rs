//! `cargo run --release -p lock-bench -- [scenario] [--seconds N] [--json out.json]`
//!
//! Runs each contender in turn against one Redis (a private redis-server it starts, or
//! `--url` / `REDIS_URL`) and prints one table per scenario, with each contender's ratio to
//! the raw redis-rs floor measured in the same run. Figures, not assertions.

mod contenders;
mod scenarios;
mod stats;

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Serialize;

use contenders::core::Core;
use contenders::naive::Naive;
use contenders::raw::Raw;
use contenders::Contender;
use scenarios::hot::{s3, HotFigures};
use scenarios::uncontended::{s1, s2};
use stats::Spread;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    All,
    S1,
    S2,
    S3,
}

#[derive(Debug, Parser)]
#[command(about = "Lock benchmarks: lock-core beside the raw redis-rs floor")]
struct Args {
    /// Which scenario to run.
    #[arg(value_enum, default_value = "all")]
    scenario: Scenario,
    /// Seconds per contender per repetition.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Repetitions (min/median/max are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Concurrent tasks in S2.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Redis to use; default: $REDIS_URL, else a private redis-server started for the run.
    #[arg(long)]
    url: Option<String>,
    /// Write all figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Skip lock-core and report the raw floor only (for profiling the floor).
    #[arg(long, conflicts_with = "core_only")]
    raw_only: bool,
    /// Skip the raw floor and run lock-core only (for profiling the library).
    #[arg(long)]
    core_only: bool,
    /// A fraction of a second per scenario, one repetition: checks that everything runs.
    #[arg(long)]
    smoke: bool,
}

#[derive(Debug, Default, Serialize)]
struct Report {
    s1: Vec<S1Row>,
    s2: Vec<S2Row>,
    s3: Vec<S3Row>,
}

#[derive(Debug, Serialize)]
struct S3Row {
    contender: String,
    contenders: usize,
    acquisitions_per_s: Spread,
    handoff_p50_us: Spread,
    handoff_p99_us: Spread,
    self_reacquire: Spread,
    jain: Spread,
    redis_calls_per_acquisition: Spread,
}

#[derive(Debug, Serialize)]
struct S1Row {
    contender: String,
    p50_us: Spread,
    p99_us: Spread,
    cycles_per_s: Spread,
    p50_ratio_to_raw: f64,
}

#[derive(Debug, Serialize)]
struct S2Row {
    contender: String,
    tasks: usize,
    cycles_per_s: Spread,
    redis_commands_per_s: Spread,
    ratio_to_raw: f64,
}

#[tokio::main]
async fn main() {
    let mut args = Args::parse();
    if args.smoke {
        args.seconds = 0.2;
        args.reps = 1;
    }
    let _server;
    let url = match args.url.clone().or_else(|| std::env::var("REDIS_URL").ok()) {
        Some(url) => url,
        None => {
            let server = lock_tests::RedisServer::start();
            let url = server.url();
            _server = server;
            url
        }
    };
    let run_for = Duration::from_secs_f64(args.seconds);
    let raw = match Raw::connect(&url).await {
        Ok(raw) => Arc::new(raw),
        Err(err) => {
            eprintln!("cannot connect to {url}: {err}");
            std::process::exit(2);
        }
    };
    let locker = match lock_core::Locker::builder().url(url.clone()).build() {
        Ok(locker) => locker,
        Err(err) => {
            eprintln!("{err}");
            std::process::exit(2);
        }
    };
    let core = Arc::new(Core {
        locker,
        label: "lock-core",
    });
    let mut probe = match redis::Client::open(url.as_str()) {
        Ok(client) => match client.get_multiplexed_async_connection().await {
            Ok(conn) => conn,
            Err(err) => {
                eprintln!("cannot connect to {url}: {err}");
                std::process::exit(2);
            }
        },
        Err(err) => {
            eprintln!("bad url {url}: {err}");
            std::process::exit(2);
        }
    };

    println!(
        "lock-bench: {} s per run, {} repetitions, Redis at {url}",
        args.seconds, args.reps
    );
    let mut report = Report::default();

    if matches!(args.scenario, Scenario::All | Scenario::S1) {
        let mut raw_runs = Vec::new();
        let mut core_runs = Vec::new();
        for _ in 0..args.reps {
            if !args.core_only {
                raw_runs.push(s1(&*raw, run_for).await);
            }
            if !args.raw_only {
                core_runs.push(s1(&*core, run_for).await);
            }
        }
        let raw_p50 = Spread::of(&raw_runs.iter().map(|r| r.p50_us).collect::<Vec<_>>()).median;
        for (label, runs) in [(raw.label(), &raw_runs), (core.label(), &core_runs)] {
            let p50 = Spread::of(&runs.iter().map(|r| r.p50_us).collect::<Vec<_>>());
            report.s1.push(S1Row {
                contender: label,
                p50_us: p50,
                p99_us: Spread::of(&runs.iter().map(|r| r.p99_us).collect::<Vec<_>>()),
                cycles_per_s: Spread::of(&runs.iter().map(|r| r.cycles_per_s).collect::<Vec<_>>()),
                p50_ratio_to_raw: p50.median / raw_p50,
            });
        }
        println!("\n### S1: uncontended latency (one task, lock + release)\n");
        println!("| contender | p50 µs | p99 µs | cycles/s | p50 vs raw |");
        println!("|---|---|---|---|---|");
        for row in &report.s1 {
            println!(
                "| {} | {} | {} | {} | {:.3}x |",
                row.contender,
                row.p50_us.show(1),
                row.p99_us.show(1),
                row.cycles_per_s.show(0),
                row.p50_ratio_to_raw
            );
        }
    }

    if matches!(args.scenario, Scenario::All | Scenario::S2) {
        let mut raw_runs = Vec::new();
        let mut core_runs = Vec::new();
        for _ in 0..args.reps {
            if !args.core_only {
                raw_runs.push(s2(raw.clone(), args.tasks, run_for, &mut probe).await);
            }
            if !args.raw_only {
                core_runs.push(s2(core.clone(), args.tasks, run_for, &mut probe).await);
            }
        }
        let raw_rate =
            Spread::of(&raw_runs.iter().map(|r| r.cycles_per_s).collect::<Vec<_>>()).median;
        for (label, runs) in [(raw.label(), &raw_runs), (core.label(), &core_runs)] {
            let rate = Spread::of(&runs.iter().map(|r| r.cycles_per_s).collect::<Vec<_>>());
            report.s2.push(S2Row {
                contender: label,
                tasks: args.tasks,
                cycles_per_s: rate,
                redis_commands_per_s: Spread::of(
                    &runs
                        .iter()
                        .map(|r| r.redis_commands_per_s)
                        .collect::<Vec<_>>(),
                ),
                ratio_to_raw: rate.median / raw_rate,
            });
        }
        println!(
            "\n### S2: uncontended throughput ({} tasks, distinct names)\n",
            args.tasks
        );
        println!("| contender | cycles/s | Redis commands/s | vs raw |");
        println!("|---|---|---|---|");
        for row in &report.s2 {
            println!(
                "| {} | {} | {} | {:.3}x |",
                row.contender,
                row.cycles_per_s.show(0),
                row.redis_commands_per_s.show(0),
                row.ratio_to_raw
            );
        }
    }

    if matches!(args.scenario, Scenario::All | Scenario::S3) {
        println!("\n### S3: hot name (N contenders on one name, each holding ~1 ms)\n");
        println!("| contender | N | acquisitions/s | hand-off p50 µs | hand-off p99 µs | self re-acquire | Jain | Redis calls/acq |");
        println!("|---|---|---|---|---|---|---|---|");
        for n in [2usize, 8, 64] {
            let mut shared_runs = Vec::new();
            let mut separate_runs = Vec::new();
            let mut naive_runs = Vec::new();
            for _ in 0..args.reps {
                shared_runs.push(s3(vec![core.clone(); n], run_for, &mut probe).await);
                let mut separate = Vec::with_capacity(n);
                for i in 0..n {
                    match lock_core::Locker::builder().url(url.clone()).build() {
                        Ok(locker) => separate.push(Arc::new(Core { locker, label: "" })),
                        Err(err) => eprintln!("contender {i}: {err}"),
                    }
                }
                separate_runs.push(s3(separate, run_for, &mut probe).await);
                let mut naive = Vec::with_capacity(n);
                for _ in 0..n {
                    if let Ok(client) = Naive::connect(&url).await {
                        naive.push(Arc::new(client));
                    }
                }
                naive_runs.push(s3(naive, run_for, &mut probe).await);
            }
            for (label, runs) in [
                ("lock-core, 1 locker (N tasks of one process)", &shared_runs),
                ("lock-core, N lockers (N processes)", &separate_runs),
                ("naive 1 ms retry, N clients", &naive_runs),
            ] {
                let pick =
                    |f: fn(&HotFigures) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
                let row = S3Row {
                    contender: label.to_owned(),
                    contenders: n,
                    acquisitions_per_s: pick(|r| r.acquisitions_per_s),
                    handoff_p50_us: pick(|r| r.handoff_p50_us),
                    handoff_p99_us: pick(|r| r.handoff_p99_us),
                    self_reacquire: pick(|r| r.self_reacquire),
                    jain: pick(|r| r.jain),
                    redis_calls_per_acquisition: pick(|r| r.redis_calls_per_acquisition),
                };
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    row.contender,
                    n,
                    row.acquisitions_per_s.show(0),
                    row.handoff_p50_us.show(0),
                    row.handoff_p99_us.show(0),
                    row.self_reacquire.show(3),
                    row.jain.show(3),
                    row.redis_calls_per_acquisition.show(1),
                );
                report.s3.push(row);
            }
        }
    }

    if let Some(path) = &args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => {
                if let Err(err) = std::fs::write(path, text) {
                    eprintln!("cannot write {}: {err}", path.display());
                    std::process::exit(1);
                }
            }
            Err(err) => eprintln!("cannot encode the report: {err}"),
        }
    }
}
