//! The arguments of `lock-torture client`, set by the orchestrator.

use std::path::PathBuf;

use crate::primitive::{Primitive, DEFAULT_PERMITS};
use crate::profile::Profile;
use crate::settings::ReplicaSyncArg;

/// Which lock-core protocol a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    /// Lua scripts (`Protocol::Scripts`).
    Scripts,
    /// WATCH/MULTI/EXEC (`Protocol::Transactions`).
    Transactions,
}

impl ProtocolArg {
    /// The name used on the command line and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolArg::Scripts => "scripts",
            ProtocolArg::Transactions => "transactions",
        }
    }
}

/// Arguments of `lock-torture client` (set by the orchestrator).
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Client number (its slot: a replacement for a killed client keeps it).
    #[arg(long)]
    pub id: u32,
    /// How many clients held this slot before (0 for the first): part of every
    /// acquisition id, so that a replacement's ids are new.
    #[arg(long, default_value_t = 0)]
    pub incarnation: u32,
    /// Lock server URL; several make a Redlock client (or, with `--cluster`, seeds; with
    /// `--sentinel-master`, the Sentinels).
    #[arg(long = "lock-url", required = true)]
    pub lock_urls: Vec<String>,
    /// The lock URLs are seeds of a Redis Cluster.
    #[arg(long)]
    pub cluster: bool,
    /// The lock URLs are Sentinels, and this is the master's name.
    #[arg(long)]
    pub sentinel_master: Option<String>,
    /// The workload.
    #[arg(long, value_enum, default_value_t = Profile::Default)]
    pub profile: Profile,
    /// The fenced store's URL.
    #[arg(long)]
    pub store_url: String,
    /// Where to write the event log.
    #[arg(long)]
    pub log: PathBuf,
    /// Number of lock names to pick from.
    #[arg(long, default_value_t = 3)]
    pub names: u32,
    /// Which names (see [`crate::names`]).
    #[arg(long, value_enum, default_value_t = crate::names::NameKind::Plain)]
    pub name_kind: crate::names::NameKind,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub ttl_ms: u64,
    /// Protocol.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Scripts)]
    pub protocol: ProtocolArg,
    /// Concurrent tasks sharing this client's locker.
    #[arg(long, default_value_t = 1)]
    pub tasks: u32,
    /// How many clients the run has (`--primitive deadlock`: the rings of its ring rounds
    /// span every client's ring tasks).
    #[arg(long, default_value_t = 1)]
    pub clients: u32,
    /// Pool size of the locker.
    #[arg(long)]
    pub pool_size: Option<usize>,
    /// Command timeout of the locker, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub command_timeout_ms: u64,
    /// The locker's replica acknowledgement check.
    #[arg(long, value_enum, default_value_t = ReplicaSyncArg::Auto)]
    pub replica_sync: ReplicaSyncArg,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop after this long even if standard input stays open (the orchestrator sets it
    /// past the end of its run).
    #[arg(long, default_value_t = 300)]
    pub max_seconds: u64,
    /// Self-test of the checker: log every lease as valid this many milliseconds longer
    /// than the library said. Any positive value should make the checker report overlaps.
    #[arg(long, default_value_t = 0)]
    pub sabotage_ms: u64,
    /// What to take: a lock, a semaphore permit, or a read-write lock's side.
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    pub primitive: Primitive,
    /// Permits per name, for `--primitive semaphore`.
    #[arg(long, default_value_t = DEFAULT_PERMITS)]
    pub permits: u64,
    /// The cancellation fault: one round in three drops its request at a random point (a
    /// timeout around it, or two tasks sharing this Locker aborted together).
    #[arg(long)]
    pub cancel: bool,
    /// How far this client's clock is off, in milliseconds (ahead when positive;
    /// `--mode clock-skew`). Applied where lock-core reads the wall clock, which is only
    /// where a Redlock waiter takes its ticket (everything else runs on `Instant` or on
    /// the servers' clock), through lock-core's hidden test hook
    /// `LockerBuilder::ticket_clock_skew_ms`.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub clock_offset_ms: i64,
    /// Queue rounds (`--mode clock-skew`): every request that waits (all but the tries)
    /// waits [`LONG_WAIT_TTLS`] TTLs, holds are short (the throughput profile's, most a
    /// few milliseconds; none auto-renewed), and no round goes through a
    /// `#[redis_locked]` function, so that the lock changes hands often and a fair queue
    /// reaches every waiter well within its wait: a client passed over for good stands out
    /// (rule `starvation`).
    #[arg(long)]
    pub queue_rounds: bool,
    /// `--mode steal`: every holder of a plain round listens for `lost()` for its whole
    /// hold (a naive one logs it and holds on), and no round goes through a
    /// `#[redis_locked]` function (whose body does not listen), so that each lease whose
    /// key is taken shows when its holder was told.
    #[arg(long)]
    pub steal_watch: bool,
    /// Build the Locker with key tracking off (`LockerBuilder::track_keys(false)`).
    #[arg(long)]
    pub no_track_keys: bool,
}

/// How many TTLs a request waits with `--queue-rounds`.
pub const LONG_WAIT_TTLS: u32 = 10;
