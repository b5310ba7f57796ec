//! `cargo run --release -p marketplace`: the book's nine rows (1 lister/1 buyer, 5/1, 5/5;
//! each with optimistic transactions, the market lock and item locks), printed as the
//! book's table with the book's figures beside ours.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use lock_tests::discover::{self, redact};
use marketplace::report::{Report, ReportRow};
use marketplace::sim::{run_row, BOOK_CONFIGS};
use marketplace::{Mode, RowConfig, Seed, Stop};

/// Runs the marketplace of Redis in Action chapter 6 and prints the book's tables 6.2 and 6.3
/// with our figures beside the book's.
///
/// Redis: $REDIS_URL if set; otherwise 127.0.0.1:6379 if it answers; otherwise a private
/// redis-server started from PATH for the run. Every row works under its own key prefix and
/// deletes its keys afterwards; nothing else on the server is touched.
#[derive(Debug, Parser)]
#[command(name = "marketplace", version)]
struct Cli {
    /// Seconds per row (the book ran 60).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    seconds: f64,

    /// Listers per row. With --buyers (or alone), runs that one configuration instead of the
    /// book's three (1/1, 5/1, 5/5).
    #[arg(long)]
    listers: Option<usize>,

    /// Buyers per row (see --listers).
    #[arg(long)]
    buyers: Option<usize>,

    /// Which protection to run.
    #[arg(long, value_enum, default_value_t = ModeArg::All)]
    mode: ModeArg,

    /// Users in the marketplace; buyers act for them, listers list their items.
    #[arg(long, default_value_t = 1000)]
    users: u64,

    /// Items each user starts with (default: 100, or 20 per second of a row when that is
    /// more, so that five listers do not run out of stock before the row ends).
    #[arg(long)]
    items_per_user: Option<u64>,

    /// Funds each user starts with.
    #[arg(long, default_value_t = 1_000_000_000)]
    funds: i64,

    /// Listing prices are drawn from 1..=MAX_PRICE.
    #[arg(long, default_value_t = 100)]
    max_price: i64,

    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,

    /// Also draw the comparison with the book as a PNG (needs the `chart` feature:
    /// `cargo run --release -p marketplace --features chart -- --chart market.png`).
    #[arg(long, value_name = "PNG")]
    chart: Option<PathBuf>,

    /// Locked modes: one Locker (and lock connection) per lister/buyer task, as separate
    /// processes would have, instead of one shared by all tasks of a row.
    #[arg(long)]
    locker_per_task: bool,

    /// Locked modes: run each row a second time with fenced writes (every lease draws a
    /// fencing token, and listings and purchases write through guarded scripts that check
    /// it, lock_core::fenced), so that the table shows what the guard costs.
    #[arg(long)]
    fenced: bool,

    /// Tokio worker threads for the listers and buyers (1 leaves the other core of a
    /// 2-core machine to a local Redis).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// All three, in the book's order.
    All,
    /// Optimistic WATCH/MULTI/EXEC with retries ("no lock").
    Watch,
    /// One lock around the whole market ("with lock").
    Market,
    /// One lock per item (table 6.3).
    Item,
}

impl ModeArg {
    fn modes(self) -> Vec<Mode> {
        match self {
            ModeArg::All => Mode::ALL.to_vec(),
            ModeArg::Watch => vec![Mode::Watch],
            ModeArg::Market => vec![Mode::Market],
            ModeArg::Item => vec![Mode::Item],
        }
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(s),
        _ => Err(format!("{text:?} is not a number of seconds in (0, 86400]")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the tokio runtime: {err}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(feature = "chart")]
fn draw_chart(report: &Report, path: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    marketplace::chart::draw(report, path).with_context(|| format!("drawing {}", path.display()))
}

#[cfg(not(feature = "chart"))]
fn draw_chart(_: &Report, _: &std::path::Path) -> anyhow::Result<()> {
    bail!("{CHART_FEATURE}")
}

/// What to do when `--chart` is asked of a build without it.
#[cfg(not(feature = "chart"))]
const CHART_FEATURE: &str = "--chart needs the `chart` feature, which this build lacks \
    (it compiles plotters and a font): cargo run --release -p marketplace --features chart -- \
    --chart market.png";

/// Runs every row; `Ok(false)` when a row broke an invariant.
async fn run(cli: Cli) -> anyhow::Result<bool> {
    // Before the rows run, not a minute later.
    #[cfg(not(feature = "chart"))]
    if cli.chart.is_some() {
        bail!("{CHART_FEATURE}");
    }
    let rows = plan(&cli);
    for row in &rows {
        row.validate()?;
    }
    let mut target = discover::discover().await?;
    eprintln!("Redis: {}", target.describe());
    let stop = Stop::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: finishing the current row early, then cleaning up");
            on_signal.stop();
        }
    });

    let outcome = run_rows(&cli, &rows, target.url(), &stop).await;
    // Stop a private server before reporting, on every path.
    target.stop();
    let report = Report {
        redis: target.describe(),
        seconds_per_row: cli.seconds,
        seed: Seed {
            users: cli.users,
            items_per_user: items_per_user(&cli),
            funds: cli.funds,
        },
        rows: outcome?,
    };

    if cli.json {
        println!("{}", report.to_json()?);
    } else {
        print!("{}", report.to_table());
    }
    if let Some(path) = &cli.chart {
        draw_chart(&report, path)?;
        eprintln!("chart written to {}", path.display());
    }
    if !report.passed() {
        eprintln!("error: some rows failed their checks (see above)");
    }
    Ok(report.passed())
}

/// Stock per user: the flag, or enough for the row's length.
fn items_per_user(cli: &Cli) -> u64 {
    cli.items_per_user
        .unwrap_or_else(|| 100.max((cli.seconds * 20.0).ceil() as u64))
}

fn plan(cli: &Cli) -> Vec<RowConfig> {
    let configs: Vec<(usize, usize)> = match (cli.listers, cli.buyers) {
        (None, None) => BOOK_CONFIGS.to_vec(),
        (listers, buyers) => vec![(listers.unwrap_or(1), buyers.unwrap_or(1))],
    };
    let seed = Seed {
        users: cli.users,
        items_per_user: items_per_user(cli),
        funds: cli.funds,
    };
    let mut rows = Vec::new();
    for (listers, buyers) in configs {
        for mode in cli.mode.modes() {
            let fenced = if cli.fenced && mode != Mode::Watch {
                &[false, true][..]
            } else {
                &[false][..]
            };
            for &fenced in fenced {
                rows.push(RowConfig {
                    mode,
                    listers,
                    buyers,
                    duration: Duration::from_secs_f64(cli.seconds),
                    seed,
                    max_price: cli.max_price,
                    locker_per_task: cli.locker_per_task,
                    fenced,
                });
            }
        }
    }
    rows
}

async fn run_rows(
    cli: &Cli,
    rows: &[RowConfig],
    url: &str,
    stop: &Stop,
) -> anyhow::Result<Vec<ReportRow>> {
    let run_id = format!("{:08x}", fastrand::u32(..));
    let total = cli.seconds * rows.len() as f64;
    let bar = progress_bar(total);
    let mut results = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        if stop.is_stopped() {
            break;
        }
        let label = row.label();
        bar.set_message(label.clone());
        let done = cli.seconds * index as f64;
        let ticker = {
            let bar = bar.clone();
            let seconds = cli.seconds;
            tokio::spawn(async move {
                let started = Instant::now();
                loop {
                    let elapsed = started.elapsed().as_secs_f64().min(seconds);
                    bar.set_position(((done + elapsed) * 10.0) as u64);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let prefix = format!("mp:{run_id}:{index}:");
        let result = run_row(url, &prefix, row, stop).await;
        ticker.abort();
        bar.set_position(((done + cli.seconds) * 10.0) as u64);
        let result = match result {
            Ok(result) => result,
            Err(err) => {
                bar.abandon();
                bail!("row {label:?} on {} failed: {err}", redact(url));
            }
        };
        if !cli.json {
            // suspend, not println: println prints nothing when the bar is hidden.
            bar.suspend(|| {
                eprintln!(
                    "{label}: {} listed, {} bought, {} retries, avg wait {:.2} ms, {:.0} ops/s{}",
                    result.listed,
                    result.bought,
                    result.purchase_retries,
                    result.wait.mean_ms,
                    result.ops_per_sec,
                    if result.passed() {
                        ""
                    } else {
                        "  CHECKS FAILED"
                    }
                )
            });
        }
        results.push(ReportRow::new(label, result));
    }
    bar.finish_and_clear();
    Ok(results)
}

/// A progress bar on stderr for runs longer than a few seconds (hidden when stderr is not a
/// terminal).
fn progress_bar(total_seconds: f64) -> ProgressBar {
    if total_seconds <= 3.0 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new((total_seconds * 10.0) as u64);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{wide_bar}] {percent:>3}% eta {eta} {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
