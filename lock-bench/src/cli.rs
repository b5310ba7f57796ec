//! The command line: scenarios, durations, outputs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::contenders::handoff::Pad;
use crate::scenarios::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
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
    /// Semaphore hand-off: 64 tasks on 8 permits of one name, each holding ~1 ms.
    S6,
    /// Read-write lock: 64 readers on one name (~1 ms holds), alone and with a writer
    /// asking every 10 ms.
    S7,
    /// Multi-lock: lock_all of 2, 4 and 8 names against as many plain locks in key order.
    S8,
    /// Guarded writes (`lock_core::fenced::RedisStore`) beside the same writes sent plainly.
    S10,
    /// Renewal cost: 10,000 auto-renewed leases held 10 s.
    Renewal,
    /// Loss detection: a foreign DEL of a held key to lost(), with key tracking and with
    /// renewal-time detection only.
    Loss,
    /// Redis Cluster: hand-off bus messages per acquisition at 3 and 6 masters, and live
    /// resharding (8 Lockers on 16 names). Not part of `all`: it starts up to 12 servers.
    S9,
}

#[derive(Debug, Parser)]
#[command(
    about = "Lock benchmarks: lock-core beside the raw redis-rs floor, a naive retry loop and rslock",
    after_help = "Every contender runs in turn in this one process, repetition after repetition; \
                  tables show `median (min–max)` over the repetitions."
)]
pub struct Args {
    /// Which scenario to run.
    #[arg(value_enum, default_value = "all")]
    pub scenario: Scenario,
    /// Seconds per contender per repetition (S1–S4).
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Repetitions; min/median/max over them are reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Concurrent tasks in S2 and S4.
    #[arg(long, default_value_t = 64)]
    pub tasks: usize,
    /// Seconds per S5 contender, over all repetitions.
    #[arg(long, default_value_t = 10.0)]
    pub overrun_seconds: f64,
    /// Leases held in the renewal-cost scenario.
    #[arg(long, default_value_t = 10_000)]
    pub renew_leases: usize,
    /// Seconds the renewal-cost leases are held.
    #[arg(long, default_value_t = 10.0)]
    pub renew_seconds: f64,
    /// TTL of the renewal-cost leases, in milliseconds (renewed every third of it).
    #[arg(long, default_value_t = 3000)]
    pub renew_ttl_ms: u64,
    /// Seconds of live resharding in S9 (after up to 5 s undisturbed).
    #[arg(long, default_value_t = 20.0)]
    pub reshard_seconds: f64,
    /// Times `--floor-pad-with` is done in the S6 floor's take script (and twice as many
    /// in its give script): its Redis execution time raised to another contender's, to see
    /// how much of a hand-off that time is, or the price of one part of a script. 0 (the
    /// default): the floor as it is.
    #[arg(long, default_value_t = 0)]
    pub floor_pad: u64,
    /// What `--floor-pad` adds.
    #[arg(long, value_enum, default_value_t = Pad::Loop)]
    pub floor_pad_with: Pad,
    /// Only contenders whose label contains this text (repeatable); the raw floor always runs.
    #[arg(long)]
    pub only: Vec<String>,
    /// Redis for the single-instance scenarios; default: $REDIS_URL, else a private
    /// redis-server started for the run. S4 always starts its own masters.
    #[arg(long)]
    pub url: Option<String>,
    /// Write every figure as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the machine description, every table and the targets as Markdown here.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write one PNG with the S1 latency and S3 hand-off charts side by side.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Write s1_latency.png and s3_handoff.png into this directory.
    #[arg(long)]
    pub charts_dir: Option<PathBuf>,
    /// A fraction of a second per scenario and one repetition: checks that everything runs
    /// (CI). Overrides the durations and sizes above.
    #[arg(long)]
    pub smoke: bool,
}

impl Args {
    pub fn settings(&self) -> Result<Settings, String> {
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

    pub fn runs(&self, scenario: Scenario) -> bool {
        (self.scenario == Scenario::All && scenario != Scenario::S9) || self.scenario == scenario
    }
}
