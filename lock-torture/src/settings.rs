//! What a run is asked to do: the command line of `lock-torture run`, and the same with
//! every default filled in (the profile's, the deployment's) and checked.

use std::path::PathBuf;

use crate::mode::Mode;
use crate::names::NameKind;
use crate::primitive::{Primitive, DEFAULT_PERMITS};
use crate::profile::Profile;
use crate::topology::Topology;
use crate::BoxError;

/// Which protocol the clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocols {
    /// Every client on Lua scripts.
    Scripts,
    /// Every client on WATCH/MULTI.
    Transactions,
    /// Even clients on scripts, odd ones on WATCH/MULTI (scripts only with Redlock).
    Mixed,
}

/// Arguments of `lock-torture run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Which faults to inject: a mode, or several separated by commas, one run each
    /// (`all`: every mode of the deployment in turn).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "mixed")]
    pub mode: Vec<Mode>,
    /// Which deployment the clients lock on (default: `single`, or `redlock` with
    /// `--nodes` above 1).
    #[arg(long, value_enum)]
    pub topology: Option<Topology>,
    /// Which primitive the clients take: a lock (`mutex`, the default), a `semaphore` of
    /// `--permits` permits, a read-write lock (`rwlock`), or several separated by commas,
    /// one run each per mode (`all`: all six in turn), a leader `election`, or
    /// scheduled runs (`schedule`). Semaphores and read-write locks run on scripts, on one
    /// server only: lock-core refuses them on Redlock, and the checker cannot yet explain
    /// their anomalies across a Cluster or Sentinel failover. Elections run on scripts,
    /// not on Redlock (lock-core refuses them there); scheduled runs on one server or
    /// Redlock.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "mutex")]
    pub primitive: Vec<Primitive>,
    /// Permits per name of the semaphore workload.
    #[arg(long, default_value_t = DEFAULT_PERMITS)]
    pub permits: u64,
    /// The workload (`throughput`: short holds, more names and clients; see the profile's
    /// defaults in RELIABILITY.md).
    #[arg(long, value_enum, default_value_t = Profile::Default)]
    pub profile: Profile,
    /// How long faults are injected, per run, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Client processes (default: 4; 10 with `--profile throughput`).
    #[arg(long)]
    pub clients: Option<u32>,
    /// Tasks per client process (default: 2; 4 with `--profile throughput`; pool mode
    /// uses 16).
    #[arg(long)]
    pub tasks: Option<u32>,
    /// Lock names the clients contend for (default: 3; 64 with `--profile throughput`).
    #[arg(long)]
    pub names: Option<u32>,
    /// Which names: `plain` (`torture:<i>`) or `hostile` (braces, key suffixes, spaces,
    /// non-ASCII text, NUL bytes, long names: every key of a name must still share one
    /// Cluster slot). Hostile runs take no `#[redis_locked]` rounds (their key template
    /// is `torture:{index}`).
    #[arg(long, value_enum, default_value_t = NameKind::Plain)]
    pub name_kind: NameKind,
    /// Lease TTL in milliseconds (default: 200; 100 with `--profile throughput`).
    #[arg(long)]
    pub ttl_ms: Option<u64>,
    /// Redlock's node count (odd; default 3 with `--topology redlock`).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Which protocol the clients use (one server only; the others run on scripts).
    /// Default: mixed; scripts with `--profile throughput` (WATCH/MULTI costs several
    /// times the round trips, and the volume run is about the default protocol).
    #[arg(long, value_enum)]
    pub protocol: Option<Protocols>,
    /// Random seed (default: a fresh one, printed in the summary).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep the logs in this directory (default: a temporary one, kept only on failure).
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// How long to wait, after the faults, for locking to resume, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub settle_seconds: f64,
    /// Checker self-test: clients claim this many ms more validity than they were given.
    /// The run must then fail.
    #[arg(long, default_value_t = 0)]
    pub sabotage_ms: u64,
    /// The clients' replica acknowledgement check (`auto`: lock-core's default; `off`:
    /// grants count once the master wrote them, the behaviour before the check).
    #[arg(long, value_enum, default_value_t = ReplicaSyncArg::Auto)]
    pub replica_sync: ReplicaSyncArg,
    /// The clients build their Locker with key tracking off (`track_keys(false)`): a
    /// taken lease is then noticed only at its next renewal or at the end of its validity.
    /// A self-test of `--mode steal`, whose rule `steal-untold` must then fail.
    #[arg(long)]
    pub no_track_keys: bool,
}

/// The clients' `ReplicaSync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplicaSyncArg {
    /// lock-core's default: one replica must acknowledge, where the master has replicas.
    Auto,
    /// No check.
    Off,
}

impl ReplicaSyncArg {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ReplicaSyncArg::Auto => "auto",
            ReplicaSyncArg::Off => "off",
        }
    }
}

/// The arguments of a run with every default filled in and checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The deployment.
    pub topology: Topology,
    /// The workload.
    pub profile: Profile,
    /// Lock servers (Redlock's count; 1 otherwise).
    pub nodes: u32,
    /// Client processes.
    pub clients: u32,
    /// Tasks per client.
    pub tasks: u32,
    /// Lock names.
    pub names: u32,
    /// Which names.
    pub name_kind: NameKind,
    /// Lease TTL in ms.
    pub ttl_ms: u64,
    /// Protocol choice.
    pub protocol: Protocols,
    /// Seconds of faults.
    pub seconds: f64,
    /// Seconds to wait for locking to resume.
    pub settle_seconds: f64,
    /// Checker self-test.
    pub sabotage_ms: u64,
    /// The clients' replica acknowledgement check.
    pub replica_sync: ReplicaSyncArg,
    /// Key tracking off in the clients (`--no-track-keys`).
    pub no_track_keys: bool,
    /// The primitives, one run each per mode (`all` expanded).
    pub primitives: Vec<Primitive>,
    /// Permits per name of the semaphore workload.
    pub permits: u64,
}

impl Settings {
    /// The lock names of a run of `mode`: `--names`, except `clock-skew`, whose clients all
    /// queue for one name (with several, a client passed over on one name is served on
    /// another when it happens to be alone there).
    pub fn names_in(&self, mode: Mode) -> u32 {
        if mode == Mode::ClockSkew {
            1
        } else {
            self.names
        }
    }

    /// Fills in the defaults of `args` and rejects impossible combinations.
    pub fn resolve(args: &RunArgs) -> Result<Settings, BoxError> {
        let topology = args.topology.unwrap_or(match args.nodes {
            Some(n) if n > 1 => Topology::Redlock,
            _ => Topology::Single,
        });
        let nodes = match (topology, args.nodes) {
            (Topology::Redlock, None) => 3,
            (Topology::Redlock, Some(n)) if n >= 3 && !n.is_multiple_of(2) => n,
            (Topology::Redlock, Some(_)) => {
                return Err("--nodes must be odd and at least 3 for Redlock".into())
            }
            (_, None | Some(1)) => 1,
            (_, Some(_)) => return Err("--nodes is Redlock's node count".into()),
        };
        let mut primitives: Vec<Primitive> = Vec::new();
        for &primitive in &args.primitive {
            let each = match primitive {
                Primitive::All => Primitive::each().to_vec(),
                one => vec![one],
            };
            for one in each {
                one.supports(topology)?;
                if !primitives.contains(&one) {
                    primitives.push(one);
                }
            }
        }
        if primitives.iter().any(|p| p.is_permit_set()) && !(1..=1000).contains(&args.permits) {
            return Err("--permits must be between 1 and 1000".into());
        }
        let asks_transactions = matches!(
            args.protocol,
            Some(Protocols::Transactions | Protocols::Mixed)
        );
        if asks_transactions && primitives.iter().any(|p| p.scripts_only()) {
            return Err(
                "semaphores, read-write locks and elections run on scripts only (lock-core \
                 refuses them with Protocol::Transactions): leave --protocol out or say \
                 scripts"
                    .into(),
            );
        }
        let p = args.profile;
        let settings = Settings {
            topology,
            profile: p,
            nodes,
            clients: args.clients.unwrap_or(p.clients()),
            tasks: args.tasks.unwrap_or(p.tasks()),
            names: args.names.unwrap_or(p.names()),
            name_kind: args.name_kind,
            ttl_ms: args.ttl_ms.unwrap_or(p.ttl_ms()),
            protocol: args.protocol.unwrap_or(if p.scripts_only() {
                Protocols::Scripts
            } else {
                Protocols::Mixed
            }),
            seconds: args.seconds,
            settle_seconds: args.settle_seconds,
            sabotage_ms: args.sabotage_ms,
            replica_sync: args.replica_sync,
            no_track_keys: args.no_track_keys,
            primitives,
            permits: args.permits,
        };
        if settings.clients == 0 || settings.names == 0 {
            return Err("--clients and --names must be at least 1".into());
        }
        if settings.ttl_ms < 20 {
            return Err("--ttl-ms must be at least 20".into());
        }
        for &mode in &args.mode {
            if mode != Mode::All && !topology.modes().contains(&mode) {
                let modes: Vec<&str> = topology.modes().iter().map(|m| m.name()).collect();
                return Err(format!(
                    "mode {} does not apply to {}; its modes: {}",
                    mode.name(),
                    topology.name(),
                    modes.join(", ")
                )
                .into());
            }
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::mode::clock_offset_ms;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn resolve(args: &[&str]) -> Result<Settings, BoxError> {
        Settings::resolve(&Cli::parse_from(args).run)
    }

    #[test]
    fn clock_skew_runs_on_redlock_only_on_one_name_with_offsets_both_ways() {
        // One Redis, a Cluster and Sentinel order their queues on the server's clock.
        for topology in ["single", "cluster", "sentinel"] {
            let why = resolve(&["run", "--mode", "clock-skew", "--topology", topology])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(why.contains("does not apply"), "{topology}: {why}");
        }
        let s = resolve(&["run", "--mode", "clock-skew", "--topology", "redlock"])
            .expect("Redlock runs it");
        assert_eq!(s.names_in(Mode::ClockSkew), 1);
        assert_eq!(s.names_in(Mode::None), 3);
        assert!(Topology::Redlock.modes().contains(&Mode::ClockSkew));
        let offsets: Vec<i64> = (0..5)
            .map(|c| clock_offset_ms(Mode::ClockSkew, c))
            .collect();
        assert_eq!(offsets, [5_000, -5_000, 0, 2_000, 5_000]);
        assert_eq!(clock_offset_ms(Mode::None, 0), 0);
    }
}
