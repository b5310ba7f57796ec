//! `cargo run --release -p lock-bench -- [scenario] [--seconds N] [--reps N] [--json out.json]
//! [--chart out.png] [--charts-dir DIR] [--markdown out.md] [--smoke]`
//!
//! Starts its own redis-server processes (or uses `--url` / `REDIS_URL` for the single-Redis
//! scenarios), runs every contender in turn within one process run, repetition after
//! repetition, and prints one Markdown table per scenario with absolute figures and each
//! contender's ratio to the raw redis-rs floor. Figures, not assertions: the exit code says
//! only whether everything ran (0), a contender measured nothing or an output could not be
//! written (1), or the set-up failed (2).

mod chart;
mod contenders;
mod cpu;
mod lineup;
mod machine;
mod probe;
mod report;
mod scenarios;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use lock_tests::RedisServer;

use lineup::{Endpoints, Filter};
use machine::Machine;
use probe::Probe;
use report::{Report, RunSettings};
use scenarios::{renewal, s1_latency, s2_throughput, s3_hot, s4_redlock, s5_overrun, Settings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Every scenario below.
    All,
    /// Uncontended latency: one task, lock + release in a loop.
    S1,
    /// Uncontended throughput: many tasks on distinct names.
    S2,
    /// Hot name: 2, 8 and 64 contenders on one name, each holding ~1 ms.
    S3,
    /// Redlock: S1 and S2 on 1 Redis and on 3 and 5 local masters.
    S4,
    /// Overrun safety: 5 contenders, TTL 100 ms, holds 0–150 ms.
    S5,
    /// Renewal cost: 10,000 auto-renewed leases held 10 s.
    Renewal,
}

#[derive(Debug, Parser)]
#[command(
    about = "Lock benchmarks: lock-core beside the raw redis-rs floor, a naive retry loop and rslock",
    after_help = "Every contender runs in turn in this one process, repetition after repetition; \
                  tables show `median (min–max)` over the repetitions."
)]
struct Args {
    /// Which scenario to run.
    #[arg(value_enum, default_value = "all")]
    scenario: Scenario,
    /// Seconds per contender per repetition (S1–S4).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Repetitions; min/median/max over them are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Concurrent tasks in S2 and S4.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Seconds per S5 contender, over all repetitions.
    #[arg(long, default_value_t = 10.0)]
    overrun_seconds: f64,
    /// Leases held in the renewal-cost scenario.
    #[arg(long, default_value_t = 10_000)]
    renew_leases: usize,
    /// Seconds the renewal-cost leases are held.
    #[arg(long, default_value_t = 10.0)]
    renew_seconds: f64,
    /// TTL of the renewal-cost leases, in milliseconds (renewed every third of it).
    #[arg(long, default_value_t = 3000)]
    renew_ttl_ms: u64,
    /// Only contenders whose label contains this text (repeatable); the raw floor always runs.
    #[arg(long)]
    only: Vec<String>,
    /// Redis for the single-instance scenarios; default: $REDIS_URL, else a private
    /// redis-server started for the run. S4 always starts its own masters.
    #[arg(long)]
    url: Option<String>,
    /// Write every figure as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the machine description, every table and the targets as Markdown here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write one PNG with the S1 latency and S3 hand-off charts side by side.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Write s1_latency.png and s3_handoff.png into this directory.
    #[arg(long)]
    charts_dir: Option<PathBuf>,
    /// A fraction of a second per scenario and one repetition: checks that everything runs
    /// (CI). Overrides the durations and sizes above.
    #[arg(long)]
    smoke: bool,
}

impl Args {
    fn settings(&self) -> Result<Settings, String> {
        let seconds = |name: &str, value: f64| {
            Duration::try_from_secs_f64(value)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("--{name} must be a positive number of seconds"))
        };
        if self.reps == 0 {
            return Err("--reps must be at least 1".into());
        }
        if self.tasks == 0 {
            return Err("--tasks must be at least 1".into());
        }
        if self.smoke {
            return Ok(Settings {
                run_for: Duration::from_millis(100),
                reps: 1,
                tasks: 16,
                hot_contenders: vec![2, 8, 64],
                overrun_for: Duration::from_millis(400),
                renew_leases: 200,
                renew_ttl: Duration::from_secs(1),
                renew_hold: Duration::from_millis(500),
            });
        }
        Ok(Settings {
            run_for: seconds("seconds", self.seconds)?,
            reps: self.reps,
            tasks: self.tasks,
            hot_contenders: vec![2, 8, 64],
            overrun_for: seconds("overrun-seconds", self.overrun_seconds)?,
            renew_leases: self.renew_leases.max(1),
            renew_ttl: Duration::from_millis(self.renew_ttl_ms.max(3)),
            renew_hold: seconds("renew-seconds", self.renew_seconds)?,
        })
    }

    fn runs(&self, scenario: Scenario) -> bool {
        self.scenario == Scenario::All || self.scenario == scenario
    }
}

/// Why the run stopped.
enum Failure {
    /// Redis could not be started or reached, or an argument is wrong.
    Setup(String),
    /// The run went through but something in it did not work.
    Run(String),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the tokio runtime: {err}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Setup(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Private redis-servers, stopped on drop.
struct Servers {
    all: Vec<RedisServer>,
}

/// Starts `count` servers; `RedisServer::start` panics when it cannot, so its message is
/// caught and returned.
fn start_servers(count: usize) -> Result<Servers, String> {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(|| (0..count).map(|_| RedisServer::start()).collect());
    std::panic::set_hook(previous_hook);
    match started {
        Ok(all) => Ok(Servers { all }),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "unknown error".into());
            Err(format!("cannot start redis-server: {message}"))
        }
    }
}

async fn run(args: Args) -> Result<(), Failure> {
    let settings = args.settings().map_err(Failure::Setup)?;
    let filter = Filter {
        only: args.only.clone(),
    };
    let began = Instant::now();

    let external = args.url.clone().or_else(|| std::env::var("REDIS_URL").ok());
    let mut servers = Vec::new();
    let single = match &external {
        Some(url) => url.clone(),
        None => {
            let started = start_servers(1).map_err(Failure::Setup)?;
            let url = started.all[0].url();
            servers.push(started);
            url
        }
    };
    let masters = if args.runs(Scenario::S4) {
        let started = start_servers(5).map_err(Failure::Setup)?;
        let urls = started.all.iter().map(RedisServer::url).collect();
        servers.push(started);
        urls
    } else {
        Vec::new()
    };
    let endpoints = Endpoints { single, masters };
    let probe = Probe::connect(&endpoints.single)
        .await
        .map_err(Failure::Setup)?;
    let version = probe.version().await.map_err(Failure::Setup)?;
    let redis = if external.is_some() {
        "REDIS_URL / --url".to_owned()
    } else {
        "private redis-server, persistence off, on loopback".to_owned()
    };
    let machine = Machine::describe(version, redis);
    let mut report = Report::new(
        machine,
        RunSettings {
            seconds_per_run: settings.run_for.as_secs_f64(),
            repetitions: settings.reps,
            smoke: args.smoke,
        },
    );
    println!("# lock-bench\n\n{}", report.machine.markdown());
    println!(
        "- {} s per contender per run, {} repetitions; cells are `median (min–max)` over the repetitions",
        settings.run_for.as_secs_f64(),
        settings.reps
    );

    if args.runs(Scenario::S1) || args.runs(Scenario::S2) {
        let contenders = lineup::uncontended(&endpoints, &filter)
            .await
            .map_err(Failure::Setup)?;
        if args.runs(Scenario::S1) {
            let table = s1_latency::run(&contenders, &settings).await;
            print_section(&report::s1_title(), &table.markdown());
            report.check(
                "S1",
                table.rows.iter().map(|r| {
                    (
                        r.contender.clone(),
                        r.failures,
                        r.first_error.clone(),
                        r.p50_us.median.is_finite(),
                    )
                }),
            );
            report.s1 = Some(table);
        }
        if args.runs(Scenario::S2) {
            let contenders: Vec<Arc<_>> = contenders.into_iter().map(Arc::new).collect();
            let table = s2_throughput::run(&contenders, &settings, &probe).await;
            print_section(&report::s2_title(&table), &table.markdown());
            report.check(
                "S2",
                table.rows.iter().map(|r| {
                    (
                        r.contender.clone(),
                        r.failures,
                        r.first_error.clone(),
                        r.cycles_per_s.median > 0.0,
                    )
                }),
            );
            report.s2 = Some(table);
        }
    }

    if args.runs(Scenario::S3) {
        let table = s3_hot::run(&settings, &probe, async |n| {
            lineup::hot(&endpoints, &filter, n).await
        })
        .await
        .map_err(Failure::Setup)?;
        print_section(&report::s3_title(), &table.markdown());
        report.check(
            "S3",
            table.rows.iter().map(|r| {
                let label = format!("{} (N={})", r.contender, r.contenders);
                (
                    label,
                    r.failures,
                    r.first_error.clone(),
                    r.acquisitions_per_s.median > 0.0,
                )
            }),
        );
        report.s3 = Some(table);
    }

    if args.runs(Scenario::S4) {
        let configs = lineup::redlock(&endpoints, &filter)
            .await
            .map_err(Failure::Setup)?;
        let table = s4_redlock::run(&configs, &settings).await;
        print_section(&report::s4_title(), &table.markdown());
        report.check(
            "S4",
            table.rows.iter().map(|r| {
                let measured = r.s1_p50_us.median.is_finite() && r.s2_cycles_per_s.median > 0.0;
                (
                    r.contender.clone(),
                    r.failures,
                    r.first_error.clone(),
                    measured,
                )
            }),
        );
        report.s4 = Some(table);
    }

    if args.runs(Scenario::S5) {
        let groups = lineup::overrun(&endpoints, &filter)
            .await
            .map_err(Failure::Setup)?;
        let table = s5_overrun::run(&groups, &settings).await;
        print_section(&report::s5_title(&table), &table.markdown());
        report.check(
            "S5",
            table.rows.iter().map(|r| {
                (
                    r.contender.clone(),
                    r.failures,
                    r.first_error.clone(),
                    r.holds.median > 0.0,
                )
            }),
        );
        report.s5 = Some(table);
    }

    if args.runs(Scenario::Renewal) {
        let contenders = lineup::renewal(&endpoints, &filter)
            .await
            .map_err(Failure::Setup)?;
        let table = renewal::run(&contenders, &settings, &probe).await;
        print_section(&report::renewal_title(&table), &table.markdown());
        report.check(
            "renewal",
            table.rows.iter().map(|r| {
                let measured = r.error.is_none() && r.redis_calls_per_tick.is_finite();
                (r.contender.clone(), 0, r.error.clone(), measured)
            }),
        );
        report.renewal = Some(table);
    }

    report.machine.finish();
    report.evaluate_targets();
    if !report.targets.is_empty() {
        print_section("Targets", &report::targets_markdown(&report.targets));
    }
    println!(
        "\nLoad average at the end: {}; whole run {:.1} s.",
        report.machine.load_at_end,
        began.elapsed().as_secs_f64()
    );
    for problem in &report.problems {
        eprintln!("warning: {problem}");
    }

    let mut output_errors = Vec::new();
    if let Some(path) = &args.json {
        output_errors.extend(report.write_json(path).err());
    }
    if let Some(path) = &args.markdown {
        output_errors.extend(report.write_markdown(path).err());
    }
    if let Some(path) = &args.chart {
        output_errors.extend(chart::draw_combined(&report, path).err());
    }
    if let Some(dir) = &args.charts_dir {
        if let Some(s1) = &report.s1 {
            output_errors.extend(chart::draw_s1(s1, &dir.join("s1_latency.png")).err());
        }
        if let Some(s3) = &report.s3 {
            output_errors.extend(chart::draw_s3(s3, &dir.join("s3_handoff.png")).err());
        }
    }
    drop(servers);
    if !output_errors.is_empty() {
        return Err(Failure::Run(output_errors.join("; ")));
    }
    if report.broken() {
        return Err(Failure::Run(
            "some contender measured nothing (see the warnings above)".into(),
        ));
    }
    Ok(())
}

fn print_section(title: &str, table: &str) {
    println!("\n### {title}\n\n{table}");
}
