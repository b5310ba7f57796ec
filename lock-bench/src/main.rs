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
mod cli;
mod contenders;
mod cpu;
mod lineup;
mod machine;
mod probe;
mod report;
mod scenarios;
mod servers;
mod stats;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser as _;
use lock_tests::RedisServer;

use cli::{Args, Scenario};
use lineup::{Endpoints, Filter};
use machine::Machine;
use probe::Probe;
use report::{Report, RunSettings};
use scenarios::{
    loss, renewal, s10_fenced, s1_latency, s2_throughput, s3_hot, s4_redlock, s5_overrun,
    s6_holders, s6_permits, s7_rwlock, s7_writer, s8_multi, s9_cluster,
};
use servers::{start_cluster, start_sentinel, start_servers};

/// Why the run stopped.
enum Failure {
    /// Redis could not be started or reached, or an argument is wrong.
    Setup(String),
    /// The run went through but something in it did not work.
    Run(String),
}

fn main() -> ExitCode {
    // S7's writer, run as a process of its own (see scenarios/s7_writer.rs).
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(s7_writer::FLAG) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build();
        let result = match runtime {
            Ok(runtime) => runtime.block_on(s7_writer::child(&argv[2..])),
            Err(err) => Err(format!("cannot start the tokio runtime: {err}")),
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::from(2)
            }
        };
    }
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
    // Five masters for S4; S3 uses three of them (its Redlock group).
    let masters = if args.runs(Scenario::S4) || args.runs(Scenario::S3) {
        let started = start_servers(5).map_err(Failure::Setup)?;
        let urls = started.all.iter().map(RedisServer::url).collect();
        servers.push(started);
        urls
    } else {
        Vec::new()
    };
    // S4 also measures a 3-master cluster when redis-cli can build one; without it, S4 goes on
    // without the cluster row.
    let (_cluster_servers, cluster) = if args.runs(Scenario::S4) || args.runs(Scenario::Loss) {
        match start_cluster() {
            Ok(cluster) => {
                let urls = cluster.urls();
                (Some(cluster), urls)
            }
            Err(err) => {
                eprintln!("S4 without the cluster row: {err}");
                (None, Vec::new())
            }
        }
    } else {
        (None, Vec::new())
    };
    // And the master a Sentinel names, with one replica.
    let (_sentinel_servers, sentinel) = if args.runs(Scenario::S4) || args.runs(Scenario::Loss) {
        match start_sentinel() {
            Ok((servers, url)) => (Some(servers), Some((url, "bench".to_owned()))),
            Err(err) => {
                eprintln!("S4 without the sentinel rows: {err}");
                (None, None)
            }
        }
    } else {
        (None, None)
    };
    let endpoints = Endpoints {
        single,
        masters,
        cluster,
        sentinel,
    };
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

    if args.runs(Scenario::S6) {
        let groups = lineup::permits(&endpoints, &filter, (args.floor_pad_with, args.floor_pad))
            .map_err(Failure::Setup)?;
        let table = s6_permits::run(&groups, &settings, &probe).await;
        print_section(&report::s6_title(), &table.markdown());
        report.check(
            "S6",
            table.rows.iter().map(|r| {
                (
                    r.contender.clone(),
                    r.failures,
                    r.first_error.clone(),
                    r.acquisitions_per_s.median > 0.0,
                )
            }),
        );
        report.s6 = Some(table);
        if let Some(locker) = lineup::permit_holders(&endpoints, &filter).map_err(Failure::Setup)? {
            let table = s6_holders::run(
                &locker,
                lineup::PERMITS_HOLDERS,
                settings.run_for,
                settings.reps,
                &probe,
            )
            .await;
            print_section(&report::s6_holders_title(), &table.markdown());
            report.check(
                "S6",
                table.rows.iter().map(|r| {
                    (
                        format!("{} with {} holders", table.label, r.holders),
                        r.failures,
                        r.first_error.clone(),
                        r.cycles_per_s.median > 0.0,
                    )
                }),
            );
            report.s6_holders = Some(table);
        }
    }

    if args.runs(Scenario::S7) {
        let groups = lineup::rwlock(&endpoints, &filter).map_err(Failure::Setup)?;
        let table = s7_rwlock::run(&groups, &settings, &probe).await;
        print_section(&report::s7_title(), &table.markdown());
        report.check(
            "S7",
            table.rows.iter().map(|r| {
                (
                    r.contender.clone(),
                    r.failures,
                    r.first_error.clone(),
                    r.reads_per_s.median > 0.0,
                )
            }),
        );
        report.s7 = Some(table);
    }

    if args.runs(Scenario::S8) {
        if let Some(locker) = lineup::multi(&endpoints, &filter).map_err(Failure::Setup)? {
            let table = s8_multi::run(&locker, &settings, &probe).await;
            print_section(&report::s8_title(), &table.markdown());
            report.check(
                "S8",
                table.rows.iter().map(|r| {
                    (
                        format!("{} (N={})", r.contender, r.names),
                        r.failures,
                        r.first_error.clone(),
                        r.cycles_per_s.median > 0.0,
                    )
                }),
            );
            report.s8 = Some(table);
        }
    }

    if args.runs(Scenario::S10) {
        let table = s10_fenced::run(&endpoints.single, &settings, &probe)
            .await
            .map_err(Failure::Setup)?;
        print_section(&s10_fenced::title(), &table.markdown());
        report.check(
            "S10",
            table.rows.iter().map(|r| {
                (
                    r.contender.clone(),
                    r.failures,
                    r.first_error.clone(),
                    r.writes_per_s.median > 0.0,
                )
            }),
        );
        report.s10 = Some(table);
    }

    if args.runs(Scenario::S9) {
        let reshard_for = Duration::try_from_secs_f64(args.reshard_seconds)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| Failure::Setup("--reshard-seconds must be positive".into()))?;
        let table = s9_cluster::run(settings.run_for, reshard_for).await;
        print_section(&s9_cluster::title(), &table.markdown());
        report.problems.extend(table.problems.iter().cloned());
        report.s9 = Some(table);
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

    if args.runs(Scenario::Loss) {
        let samples = if args.smoke {
            loss::SAMPLES / 10
        } else {
            loss::SAMPLES
        };
        let mut targets = Vec::new();
        if let Some((sentinel, master)) = &endpoints.sentinel {
            targets.push(loss::Target::Sentinel(sentinel, master));
        }
        if !endpoints.cluster.is_empty() {
            targets.push(loss::Target::Cluster(&endpoints.cluster));
        }
        match loss::run(&endpoints.single, &targets, settings.renew_ttl, samples).await {
            Ok((table, problems)) => {
                report.problems.extend(problems);
                print_section(&loss::title(&table), &table.markdown());
                for row in &table.rows {
                    if row.false_losses > 0 {
                        report.problems.push(format!(
                            "loss detection, {}: {} untouched leases told lost",
                            row.mode, row.false_losses
                        ));
                    }
                }
                report.loss = Some(table);
            }
            Err(err) => report.problems.push(format!("loss detection: {err}")),
        }
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
