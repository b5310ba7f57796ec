//! The command line, as clap reads it.
//!
//! The doc comments below are the `--help` text, written for a terminal, not for rustdoc:
//! `[user:password@]` and `<PREFIX>` are meant literally.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration::parse_duration;

/// Durations and environment, after every command's help (below the exit codes).
const DURATIONS_AND_ENVIRONMENT: &str = "\
Durations: 500ms, 30s, 1m30s, 1h 15m (units h, m, s, ms, largest first; 0 alone is zero).
No fractions, days or months: write 1500ms, not 1.5s; --ttl 1M is refused (1m is a minute).

Environment:
  REDIS_URL       Redis to use when --url is not given (default redis://127.0.0.1:6379/)
  LOCKCTL_PREFIX  key prefix when --prefix is not given (default lock:)";

/// The text after a command's help: `about` (if any), then the exit codes (from
/// [`crate::exit::TABLE`], their one source), durations and environment.
fn after_help(about: &str) -> String {
    let mut out = String::new();
    if !about.is_empty() {
        out.push_str(about);
        out.push_str("\n\n");
    }
    out.push_str(&crate::exit::help_text());
    out.push_str("\n\n");
    out.push_str(DURATIONS_AND_ENVIRONMENT);
    out
}

/// `lockctl`: see, take and act on lock-core's locks from a shell.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    version,
    about = "Run commands under a fleet-wide Redis lock, and see and act on locks",
    long_about = "Run commands under a fleet-wide Redis lock (like flock(1) across machines), and \
                  see and act on the locks that the lock-core library takes: who holds them, \
                  for how long, and what happens to them.\n\n\
                  A lock named N is the Redis key <prefix>{N} holding <token>:<holder label> \
                  (with a NUL byte before N when N begins with } or NUL, so that a Redis \
                  Cluster keeps all of the lock's keys in one slot).",
    after_help = after_help(""),
    arg_required_else_help = true
)]
pub struct Cli {
    /// Redis URL: redis://[user:password@]host[:port][/db].
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = lock_core::DEFAULT_REDIS_URL,
        value_name = "URL"
    )]
    pub url: String,

    /// Prefix of the lock keys; a lock named N is the key <PREFIX>{N}.
    #[arg(
        long,
        global = true,
        env = "LOCKCTL_PREFIX",
        default_value = "lock:",
        value_name = "PREFIX"
    )]
    pub prefix: String,

    /// Deadline for connecting to Redis and for each command sent to it.
    #[arg(long, global = true, default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock, like flock(1) for a whole fleet (without waiting,
    /// as flock -n: -w/--wait DURATION waits).
    #[command(after_help = after_help(RUN_HELP))]
    Run(RunArgs),
    /// Show whether a lock is held, by whom, for how long, and its fencing counter (and
    /// every holder of the name's semaphore and read-write lock). Exits 0 when anything of
    /// the name is held, 1 when it is free: `if lockctl status NAME; then ...`.
    #[command(after_help = after_help(""))]
    Status(StatusArgs),
    /// List all held locks, semaphore permits and read-write leases (SCAN, never KEYS) with
    /// holder and remaining TTL.
    #[command(after_help = after_help(""))]
    List(ListArgs),
    /// Delete a lock whoever holds it (for operators), and say whose it was.
    #[command(after_help = after_help(""))]
    Release(ReleaseArgs),
    /// Print acquire and release events of a lock as they happen, until Ctrl-C.
    #[command(after_help = after_help(""))]
    Watch(WatchArgs),
    /// Run a command as the fleet's leader: started once elected, stopped when leadership
    /// is lost, resigned when it exits.
    #[command(after_help = after_help(ELECT_HELP))]
    Elect(ElectArgs),
    /// Show who leads an election (label, term, since when); --watch follows every change.
    /// Exits 0 when the election has a leader, 1 when it has none, as `status` does for a
    /// lock: `if lockctl leader NAME; then ...`.
    #[command(after_help = after_help(""))]
    Leader(LeaderArgs),
    /// Show the deadlock detector's waits-for records of a lock: who waits for it while
    /// holding other locks (and what), and what its holder waits for.
    #[command(after_help = after_help(""))]
    Waits(StatusArgs),
    /// Check a Redis before trusting it with locks: eviction policy, persistence, replicas
    /// and their lag, clock offset, the ACL rights lockers need, version, TLS and topology
    /// (with --redlock: of every master, and across them). Each finding says why it matters
    /// and what to change. Exits 0 when all is fine, 1 with warnings (or checks the server
    /// would not answer), 2 when locks are unsafe there.
    #[command(after_help = after_help(""))]
    Doctor(DoctorArgs),
    /// Show the number of permits stored with a name's semaphore; --set N changes it while
    /// the semaphore is in use (raising it lets waiters in at once; lowering it takes no
    /// permit from a holder, and nobody gets in until fewer than N are held).
    #[command(after_help = after_help(""))]
    Capacity(CapacityArgs),
}

/// `lockctl capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// Name of the semaphore.
    pub name: String,

    /// Store N permits with the semaphore (it wins over the number requests ask for until
    /// the semaphore has been idle for 24 hours).
    #[arg(long, value_name = "N")]
    pub set: Option<u64>,

    /// Print one JSON object (name, permits, and with --set: before) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lockctl doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object: url, verdict (fine, warnings, unsafe) and the findings (check,
    /// level, found, why, fix); with --redlock: urls, masters (url, reachable, error,
    /// run_id, role, clock_offset_ms), the verdict (or unreachable) and the findings, each
    /// with its server (null for those across the masters).
    #[arg(long)]
    pub json: bool,

    /// A Redlock master: give it once per master (--redlock URL --redlock URL ...) or the
    /// URLs separated by commas (write a comma inside a password as %2C), as the lockers'
    /// `redlock([..])` lists them. Each master gets every check, then come the checks across
    /// them: their number, that they are distinct servers and masters (not replicas), the
    /// spread of their clocks, and how many answer. --url is not used. A majority that
    /// cannot be used exits 69 (no lock can be taken; 78 when each of them refused the
    /// credentials); a minority is a warning.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub redlock: Vec<String>,
}

/// The text after `elect --help`, before the exit codes.
const ELECT_HELP: &str = "\
Candidates wait in line (FIFO) for the election's lock; the one holding it leads. Its lease \
is renewed every lease/3 while the command runs. The command sees LOCKCTL_ELECTION and \
LOCKCTL_TERM (strictly increasing across leaders: pass it to storage that must refuse a \
leader whose term ended; also as LOCKCTL_FENCING_TOKEN). If leadership is lost (Redis \
unreachable for a whole lease, the lock removed), the command gets SIGTERM, then SIGKILL \
after --kill-after, and lockctl exits with 79. When the command exits, lockctl resigns: the \
next candidate leads at once. A leader killed outright is replaced when its lease runs out.

Example: lockctl elect --name billing-scheduler --lease 15s -- ./scheduler";

/// `lockctl elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// Name of the election (its lock has the same name; `--key` works too, as for `run`).
    #[arg(
        long,
        short = 'n',
        visible_alias = "key",
        short_alias = 'k',
        value_name = "NAME"
    )]
    pub name: String,

    /// The leader's lease: a dead leader is replaced this long after its last renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub lease: Duration,

    /// After SIGTERM on a lost leadership, wait this long before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_after: Duration,

    /// Application name in the leader's label (default: lockctl/<command name>).
    #[arg(long, value_name = "NAME")]
    pub app_name: Option<String>,

    /// The command and its arguments (after `--`).
    // Not `allow_hyphen_values`: an unknown option (a typo, or flock's -x or -s typed out of
    // habit) is a usage error, not a command to run. Options of the command itself follow
    // its name or `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `lockctl leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// Name of the election.
    pub name: String,

    /// Print the leader, then every change of leadership as it happens, until Ctrl-C.
    #[arg(long)]
    pub watch: bool,

    /// With --watch: exit after this many changes.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// The text after `run --help`, before the exit codes.
const RUN_HELP: &str = "\
Unlike flock(1), run does not wait for a busy lock unless told to: it behaves like flock -n. \
Give -w/--wait DURATION to queue for it (at most 24h; plain flock waits without limit). \
\"Coming from flock\" in lockctl's README lists every difference.

The command runs only while the lock is held. lockctl forwards SIGINT, SIGTERM, SIGHUP and \
SIGQUIT to it, releases the lock when it exits, and exits with its status.

Renewal: the lease lasts --ttl and is renewed every ttl/3 while the command runs, so the \
lock is held for the command's whole life, however long (as with flock(1)). When renewal \
fails, because Redis cannot be reached, it is retried until the lease runs out: the lock is \
lost only when no renewal succeeded for a whole TTL, or at once when Redis says the lock is \
no longer ours (it was removed, for example by `lockctl release --force`, which the \
server reports at once on a Redis that allows key tracking, and which is otherwise noticed \
within ttl/3 or 2s, whichever is shorter). On a lost lease the command is stopped \
(SIGTERM, then SIGKILL after --kill-after) and lockctl exits with --lost-exit-code (79), \
unless --on-lost ignore. With --no-renew the lease is not renewed: a command that runs \
longer than --ttl loses the lock and is stopped the same way.

A busy lock (or one still busy after --wait) prints one line on stderr and exits with \
-E/--conflict-exit-code (75; flock's default is 1: -E 1 ports a script that tests for it); \
with -q, or with -E 0 (a quiet success for cron), it prints nothing.

The command sees LOCKCTL_LOCK (the lock name), LOCKCTL_KEY (its Redis key), and with \
--fencing LOCKCTL_FENCING_TOKEN (strictly increasing per lock name: pass it to storage that \
must reject stale writers).

With --permits N the command takes one of N permits of the name's semaphore instead of its \
lock: at most N such commands run at once (the semaphore's key is LOCKCTL_KEY).

With --hold-at-least D (a scheduled job run from cron or a timer on every host) the lock is \
held at least D from the start even when the command ends sooner: its release leaves the key \
to expire then, so hosts whose timer fires a little later find it taken and skip the run. A \
skipped run exits with --conflict-exit-code (give 0 to count it as a success).

Example: lockctl run --name nightly-report --ttl 1m -- ./report.sh --full
Example: lockctl run --name hourly-digest --hold-at-least 5m --conflict-exit-code 0 -- ./digest.sh";

/// `lockctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Name of the lock (`--name`, as for `elect`; `--key` and `-k` still work).
    #[arg(
        long = "name",
        short = 'n',
        visible_alias = "key",
        short_alias = 'k',
        value_name = "NAME"
    )]
    pub key: String,

    /// Lease time: the lock frees itself this long after the last renewal.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,

    /// How long to wait for a busy lock before giving up (default 0: try once, as flock
    /// -n; at most 24h). flock's -w takes seconds: here give a unit, -w 10s.
    #[arg(long, short = 'w', default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,

    /// Do not renew the lease: it lasts --ttl, and a command that runs longer loses the lock
    /// and is stopped (see --on-lost). Renewal is the default.
    #[arg(long, conflicts_with = "renew")]
    pub no_renew: bool,

    /// Renew the lease every ttl/3 while the command runs: the default, accepted for
    /// scripts written before it was.
    #[arg(long, hide = true)]
    pub renew: bool,

    /// Exit code when the lock is busy, or still busy after --wait (flock's -E; flock's
    /// default is 1). 0 also makes the conflict quiet, as -q.
    #[arg(long, short = 'E', default_value_t = crate::exit::CONFLICT, value_name = "N")]
    pub conflict_exit_code: u8,

    /// Print nothing when the lock is busy; the exit code still says so. Other failures
    /// (Redis unreachable, a bad option) are still reported.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// What to do with the command when the lease is lost while it runs.
    #[arg(long, value_enum, default_value_t = OnLost::Kill, value_name = "ACTION")]
    pub on_lost: OnLost,

    /// Exit code when the lease was lost while the command ran (with --on-lost kill).
    #[arg(long, default_value_t = crate::exit::LOST, value_name = "N")]
    pub lost_exit_code: u8,

    /// After SIGTERM on a lost lease, wait this long before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_after: Duration,

    /// Application name in the holder label (default: lockctl/<command name>).
    #[arg(long, value_name = "NAME")]
    pub app_name: Option<String>,

    /// Draw a fencing token and pass it to the command as LOCKCTL_FENCING_TOKEN.
    #[arg(long)]
    pub fencing: bool,

    /// Take one of N permits of the name's semaphore instead of its lock: at most N such
    /// commands run at once, fleet-wide.
    #[arg(long, value_name = "N", conflicts_with = "fencing", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub permits: Option<u64>,

    /// Hold the lock at least this long from the start, even when the command ends sooner
    /// (a scheduled job: hosts that fire a little later skip the run).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "permits")]
    pub hold_at_least: Option<Duration>,

    /// The command and its arguments (after `--`).
    // Not `allow_hyphen_values`: an unknown option (a typo, or flock's -x or -s typed out of
    // habit) is a usage error, not a command to run. Options of the command itself follow
    // its name or `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    /// Set by `lockctl elect`: campaign in the election `key` instead of taking the lock.
    #[arg(skip)]
    pub elect: bool,
}

impl RunArgs {
    /// `lockctl elect` as a run: the lease is the election's, renewed, never waited out.
    pub fn election(args: ElectArgs) -> RunArgs {
        RunArgs {
            key: args.name,
            ttl: args.lease,
            wait: Duration::ZERO,
            no_renew: false,
            renew: true,
            conflict_exit_code: crate::exit::CONFLICT,
            quiet: false,
            on_lost: OnLost::Kill,
            lost_exit_code: crate::exit::LOST,
            kill_after: args.kill_after,
            app_name: args.app_name,
            fencing: false,
            permits: None,
            hold_at_least: None,
            command: args.command,
            elect: true,
        }
    }
}

impl RunArgs {
    /// Whether the lease is renewed while the command runs (unless `--no-renew`).
    pub fn renews(&self) -> bool {
        !self.no_renew
    }

    /// Whether a busy lock is reported on stderr (not with `-q` or `--conflict-exit-code 0`).
    pub fn reports_conflict(&self) -> bool {
        !self.quiet && self.conflict_exit_code != 0
    }
}

/// What `run` does when the lease is lost while the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// Stop the command (SIGTERM, then SIGKILL after --kill-after) and exit with
    /// --lost-exit-code.
    Kill,
    /// Say so on stderr, let the command finish, and exit with its status.
    Ignore,
}

/// `lockctl status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Name of the lock.
    pub name: String,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lockctl list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only locks whose name matches this Redis glob pattern (*, ?, [abc], \ escapes).
    #[arg(
        long = "match",
        short = 'm',
        default_value = "*",
        value_name = "PATTERN"
    )]
    pub pattern: String,

    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `lockctl release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Name of the lock.
    pub name: String,

    /// Required: delete the lock whoever holds it. Its holder is not told and may still be
    /// working, so only use this on a lock whose holder is gone.
    #[arg(long)]
    pub force: bool,
}

/// `lockctl watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Name of the lock.
    pub name: String,

    /// How often to look at the lock between release notifications.
    #[arg(long, default_value = "50ms", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,

    /// Exit after this many events.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,

    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}
