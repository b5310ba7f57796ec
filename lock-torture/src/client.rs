//! One client process: tasks that take locks, hold them, write to the fenced resource and
//! release, logging every step.
//!
//! The orchestrator starts each client as `lock-torture client ...` and stops it by closing
//! its standard input. A client never decides whether what it saw was correct; it only
//! records what the library told it and when, and the checker judges afterwards.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod cancel;
mod deadlock;
mod election;
mod guard;
mod hiccup;
mod holding;
mod nested;
mod probe;
mod schedule;

use lock_core::{LeaseHandle, LockError, Locker, Protocol};

use crate::clock::{self, Nanos};
use crate::event::{
    Acquired, Capacity, Event, FailKind, HoldKind, Log, ReleaseOutcome, WriteOutcome,
};
use crate::primitive::{Primitive, DEFAULT_PERMITS, WRITER_ODDS};
use crate::profile::Profile;
use crate::resource::FencedStore;
use crate::settings::ReplicaSyncArg;
use crate::BoxError;
use guard::Guard;

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
}

/// How many TTLs a request waits with `--queue-rounds`.
pub const LONG_WAIT_TTLS: u32 = 10;

/// What every task of a client shares.
/// One client in this many asks a semaphore for another number of permits ([`Ctx::permits`]).
const DISSENTERS: u32 = 4;

struct Ctx {
    args: ClientArgs,
    locker: Locker,
    store: FencedStore,
    log: Log,
    stop: AtomicBool,
    deadline: Nanos,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || clock::now() >= self.deadline
    }

    fn log(&self, event: &Event) {
        if let Err(err) = self.log.write(event) {
            // The history is the point of the exercise: a client that cannot log stops.
            eprintln!("client {}: cannot write its log: {err}", self.args.id);
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.args.ttl_ms)
    }

    /// The permits this client asks of a semaphore: `--permits`, or one more in the last
    /// client of every [`DISSENTERS`] (client 3 of the default 4), whose requests then
    /// disagree with the number stored with the semaphore whenever the others got there
    /// first, and the others' with its own (rule `capacity`).
    fn permits(&self) -> u64 {
        if self.args.id % DISSENTERS == DISSENTERS - 1 {
            self.args.permits + 1
        } else {
            self.args.permits
        }
    }

    /// The id of the `seq`-th acquisition of `task`: `c<slot>.t<task>.<seq>`, with the
    /// incarnation after the slot (`c<slot>r<n>`) for a replacement.
    fn acq_id(&self, task: u32, seq: u64) -> String {
        match self.args.incarnation {
            0 => format!("c{}.t{task}.{seq}", self.args.id),
            n => format!("c{}r{n}.t{task}.{seq}", self.args.id),
        }
    }
}

/// Builds the locker a client uses: one server, Redlock over several, a Cluster or the
/// master Sentinel names.
pub fn build_locker(args: &ClientArgs) -> Result<Locker, LockError> {
    let ttl = Duration::from_millis(args.ttl_ms);
    let mut builder = Locker::builder()
        .app_name(format!("torture-c{}", args.id))
        .default_ttl(ttl)
        .command_timeout(Duration::from_millis(args.command_timeout_ms))
        // Every acquisition draws a fencing token, also those of `#[redis_locked]`
        // functions, which cannot ask for one themselves.
        .fencing(true)
        .protocol(match args.protocol {
            ProtocolArg::Scripts => Protocol::Scripts,
            ProtocolArg::Transactions => Protocol::Transactions,
        });
    if let Some(size) = args.pool_size {
        builder = builder.pool_size(size);
    }
    if args.replica_sync == ReplicaSyncArg::Off {
        builder = builder.replica_sync(lock_core::ReplicaSync::Off);
    }
    if args.clock_offset_ms != 0 {
        // A test hook of lock-core's, not a setting: the client reads its clock this far
        // off where it takes Redlock tickets, as a host whose clock is wrong would.
        builder = builder.ticket_clock_skew_ms(args.clock_offset_ms);
    }
    builder = match (
        args.cluster,
        &args.sentinel_master,
        args.lock_urls.as_slice(),
    ) {
        (true, _, seeds) => builder.cluster(seeds.to_vec()),
        (false, Some(master), sentinels) => builder.sentinel(sentinels.to_vec(), master.clone()),
        (false, None, [one]) => builder.url(one.clone()),
        (false, None, many) => builder.redlock(many.to_vec()).node_timeout(ttl / 5),
    };
    builder.build()
}

/// Runs a client until its standard input closes (or `max_seconds` pass).
pub fn run(args: ClientArgs) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: ClientArgs) -> Result<(), BoxError> {
    let log = Log::create(&args.log)?;
    let locker = build_locker(&args)?;
    let store = FencedStore::connect(&args.store_url).await?;
    let deadline = clock::now() + clock::nanos(Duration::from_secs(args.max_seconds));
    let ctx = Arc::new(Ctx {
        args,
        locker,
        store,
        log,
        stop: AtomicBool::new(false),
        deadline,
    });
    ctx.log(&Event::Start {
        client: ctx.args.id,
        pid: std::process::id(),
        t: clock::now(),
        protocol: ctx.args.protocol.as_str().to_owned(),
        command_timeout_ms: ctx.args.command_timeout_ms,
        clock_offset_ms: ctx.args.clock_offset_ms,
    });
    // The orchestrator stops clients by closing their standard input (and a client whose
    // orchestrator died sees the same end of file).
    let stopper = Arc::clone(&ctx);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        stopper.stop.store(true, Ordering::Relaxed);
    });
    let mut tasks = tokio::task::JoinSet::new();
    let watcher = Arc::clone(&ctx);
    tasks.spawn(async move { hiccup::watch(&watcher).await });
    match ctx.args.primitive {
        Primitive::Election => {
            let watcher = Arc::clone(&ctx);
            tasks.spawn(async move { election::observer(&watcher).await });
            // An election only this client campaigns for, observed by its partner client.
            let alone = Arc::clone(&ctx);
            tasks.spawn(async move { election::lonely(&alone).await });
            let watcher = Arc::clone(&ctx);
            tasks.spawn(async move { election::lonely_observer(&watcher).await });
            for task in 0..ctx.args.tasks {
                let ctx = Arc::clone(&ctx);
                tasks.spawn(async move { election::candidate(&ctx, task).await });
            }
        }
        // One task: a holder label names the client, and so the task, in a cycle.
        Primitive::Deadlock => {
            let ctx = Arc::clone(&ctx);
            tasks.spawn(async move { deadlock::task(&ctx, 0).await });
        }
        // One timer per job: the client is one replica of the fleet.
        Primitive::Schedule => {
            for job in 0..ctx.args.names {
                let ctx = Arc::clone(&ctx);
                tasks.spawn(async move { schedule::replica(&ctx, job).await });
            }
        }
        _ => {
            for task in 0..ctx.args.tasks {
                tasks.spawn(task_loop(Arc::clone(&ctx), task));
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    // Let background releases of dropped leases finish before the runtime goes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

async fn task_loop(ctx: Arc<Ctx>, task: u32) {
    let seed = ctx.args.seed ^ (u64::from(ctx.args.id) << 32) ^ u64::from(task);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut seq = 0u64;
    while !ctx.stopped() {
        let index = rng.u32(0..ctx.args.names.max(1));
        let name = crate::names::name(index, ctx.args.name_kind);
        let profile = ctx.args.profile;
        let primitive = ctx.args.primitive;
        // Annotated functions with `permits` or `mode` do not expose their guard to the
        // body (no `current_lease()`): the other primitives' rounds are all imperative.
        // Hostile names take no annotated rounds: their key template is `torture:{index}`.
        // Neither do queue rounds: their 150 ms wait is no place in line, and their holds
        // run past the TTL.
        if primitive == Primitive::Mutex
            && ctx.args.name_kind == crate::names::NameKind::Plain
            && !ctx.args.queue_rounds
            && profile.annotated_round(&mut rng)
        {
            // One round in five goes through a `#[redis_locked]` function instead.
            nested::round(&ctx, &mut rng, task, &mut seq, index).await;
            continue;
        }
        if primitive == Primitive::Mutex && ctx.args.cancel && rng.u8(0..3) == 0 {
            cancel::round(&ctx, &mut rng, task, &mut seq, name).await;
            continue;
        }
        let ttl = ctx.ttl();
        let wait = match profile.wait_ms(&mut rng, ctx.args.ttl_ms) {
            // Long enough that a fair queue serves every waiter (rule `starvation`).
            waits if waits > 0 && ctx.args.queue_rounds => ctx.ttl() * LONG_WAIT_TTLS,
            waits => Duration::from_millis(waits),
        };
        // Queue rounds hold briefly and let go: no renewed holds of up to two TTLs.
        let auto_renew = !ctx.args.queue_rounds && profile.auto_renew(&mut rng);
        // The same settings on each primitive's request type.
        macro_rules! configured {
            ($request:expr) => {{
                let request = $request.ttl(ttl).wait(wait);
                if auto_renew {
                    request.auto_renew().max_hold(ttl * 3)
                } else {
                    request
                }
            }};
        }
        // A multi-lock round takes two or three of the names, in either order (the library
        // sorts them); the other rounds take one of the same names alone.
        let set = (primitive == Primitive::Multi && rng.bool()).then(|| {
            let mut all: Vec<String> = (0..ctx.args.names.max(2))
                .map(|i| format!("torture:{i}"))
                .collect();
            rng.shuffle(&mut all);
            all.truncate(rng.usize(2..=all.len().min(3)));
            all
        });
        let name = set.as_ref().map_or(name, |set| set.join("+"));
        let hold_kind = match primitive {
            Primitive::Semaphore => HoldKind::Permit,
            Primitive::Rwlock => HoldKind::Read,
            _ => HoldKind::Lock,
        };
        let call_start = clock::now();
        let result = match primitive {
            Primitive::Multi => match &set {
                Some(set) => configured!(ctx.locker.lock_all(set.clone()))
                    .await
                    .map(Guard::Multi),
                None => configured!(ctx.locker.lock(name.clone()).fencing())
                    .await
                    .map(Guard::Lock),
            },
            Primitive::Semaphore => {
                let semaphore = ctx.locker.semaphore(name.clone(), ctx.permits());
                configured!(semaphore.acquire()).await.map(Guard::Permit)
            }
            Primitive::Rwlock => {
                let lock = ctx.locker.rwlock(name.clone());
                let request = if rng.u8(0..WRITER_ODDS) == 0 {
                    lock.write()
                } else {
                    lock.read()
                };
                configured!(request).await.map(Guard::Rw)
            }
            Primitive::Mutex
            | Primitive::Election
            | Primitive::Schedule
            | Primitive::Deadlock
            | Primitive::All => configured!(ctx.locker.lock(name.clone()).fencing())
                .await
                .map(Guard::Lock),
        };
        match result {
            Ok(lease) => {
                seq += 1;
                let id = ctx.acq_id(task, seq);
                let held = Held {
                    id,
                    task,
                    name,
                    call_start,
                    wait,
                    auto_renew,
                };
                hold(&ctx, &mut rng, lease, held).await;
            }
            Err(err) => {
                let request = Request {
                    name,
                    call_start,
                    wait,
                    hold: hold_kind,
                    set,
                };
                failed(&ctx, &mut rng, request, &err).await;
            }
        }
        if primitive == Primitive::Multi {
            // Room between rounds, so that a name is free now and then: a waiter must not
            // sleep through it.
            tokio::time::sleep(Duration::from_millis(rng.u64(0..ctx.args.ttl_ms / 2))).await;
        }
    }
}

/// A request that failed, for the log.
struct Request {
    name: String,
    call_start: Nanos,
    wait: Duration,
    hold: HoldKind,
    set: Option<Vec<String>>,
}

/// Logs a failed acquire, looks for leftovers after a `WrongType`, and backs off after
/// anything but contention.
async fn failed(ctx: &Ctx, rng: &mut fastrand::Rng, request: Request, err: &LockError) {
    let Request {
        name,
        call_start,
        wait,
        hold,
        set,
    } = request;
    let t_end = clock::now();
    let kind = fail_kind(err);
    ctx.log(&Event::AcquireFailed {
        client: ctx.args.id,
        name: name.clone(),
        t_start: call_start,
        t_end,
        kind,
        message: if kind == FailKind::Contention {
            String::new()
        } else {
            err.to_string()
        },
        wait_ms: Some(millis(wait)),
        hold,
        set,
        capacity: (hold == HoldKind::Permit).then(|| Capacity {
            asked: ctx.permits(),
            stored: match err {
                LockError::CapacityMismatch { stored, .. } => Some(*stored),
                _ => None,
            },
        }),
    });
    // The probe reads the lock's key on every node (a Redlock attempt's leftovers); a
    // semaphore or read-write lock runs on one server, in one script per attempt.
    if kind == FailKind::WrongType && ctx.args.primitive == Primitive::Mutex {
        probe::after_wrong_type(ctx, &name, t_end).await;
    }
    if kind != FailKind::Contention {
        // The server is down or unreachable: do not spin on it.
        tokio::time::sleep(Duration::from_millis(rng.u64(10..40))).await;
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The lease's end of validity as a stamp, never below it (and within
/// [`clock::SETTLED`] of it, as a rule).
fn valid_until(lease: &LeaseHandle) -> Nanos {
    clock::stamp_ahead(|| lease.expires_in())
}

/// What a task knows about the lease it just got.
struct Held {
    id: String,
    task: u32,
    name: String,
    call_start: Nanos,
    wait: Duration,
    auto_renew: bool,
}

async fn hold(ctx: &Ctx, rng: &mut fastrand::Rng, lease: Guard, held: Held) {
    let Held {
        id,
        task,
        name,
        call_start,
        wait,
        auto_renew,
    } = held;
    let sabotage = clock::nanos(Duration::from_millis(ctx.args.sabotage_ms));
    let valid = lease_valid_until(&lease) + sabotage;
    let acquired = clock::now();
    let fence = lease.fencing_token();
    let kind = lease.kind();
    ctx.log(&Event::Acquired(Acquired {
        id: id.clone(),
        client: ctx.args.id,
        task,
        name: name.clone(),
        token: lease.token().to_owned(),
        fence,
        call_start,
        attempt_start: clock::stamp_past(lease.acquired_at()),
        acquired,
        valid_until: valid,
        ttl_ms: ctx.args.ttl_ms,
        auto_renew,
        wait_ms: Some(millis(wait)),
        annotated: false,
        kind,
        permits: (kind == HoldKind::Permit).then_some(ctx.permits()),
        set: lease.set(),
    }));
    let _ = ctx.store.progress().await;

    // Most holds end well within the TTL; some overrun it (seed 002's holder that does not
    // know its lock expired), and auto-renewed ones may outlive max_hold.
    let ttl_ms = ctx.args.ttl_ms;
    let holds = if ctx.args.queue_rounds {
        Profile::Throughput
    } else {
        ctx.args.profile
    };
    let hold_ms = holds.hold_ms(rng, ttl_ms, auto_renew);
    // A careful holder stops as soon as the library says the lease is lost; a naive one
    // carries on and writes anyway, and only fencing stands between it and the data.
    let careful = rng.bool();
    let mut lost = false;
    let lost_detected = |how: &str| {
        ctx.log(&Event::LostDetected {
            id: id.clone(),
            t: clock::now(),
            how: how.to_owned(),
        });
    };
    let hold = Duration::from_millis(hold_ms);
    if auto_renew {
        lost = holding::renewed(ctx, &lease, &id, hold, careful, sabotage).await;
    } else if careful {
        tokio::select! {
            () = tokio::time::sleep(hold) => {}
            () = lease.lost() => {
                lost = true;
                lost_detected("signal");
            }
        }
    } else {
        tokio::time::sleep(hold).await;
    }

    if !lost && !auto_renew && ctx.args.profile.extend(rng) {
        // A holder that let its lease run out may still try to extend it (the library must
        // refuse): look first, so that a success after a loss shows in the history.
        if lease.is_lost() {
            lost = true;
            lost_detected("is_lost");
        }
        let t_sent = clock::now();
        // Listen for the loss signal while the extension is in flight: a reply that comes
        // after the validity ran out must not revive the lease.
        let extend = lease.extend(ctx.ttl());
        tokio::pin!(extend);
        let result = if lost {
            extend.await
        } else {
            tokio::select! {
                result = &mut extend => result,
                () = lease.lost() => {
                    lost = true;
                    lost_detected("signal");
                    extend.await
                }
            }
        };
        let t_reply = clock::now();
        let (valid_until, outcome) = match &result {
            Ok(()) => (Some(lease_valid_until(&lease) + sabotage), "ok".to_owned()),
            Err(LockError::Lost { .. }) => (None, "lost".to_owned()),
            Err(err) => (None, format!("{:?}", fail_kind(err)).to_lowercase()),
        };
        ctx.log(&Event::Extended {
            id: id.clone(),
            t_sent,
            t_reply,
            valid_until,
            outcome,
        });
        if matches!(result, Err(LockError::Lost { .. })) && !lost {
            lost = true;
            lost_detected("extend");
        }
        if result.is_ok() {
            tokio::time::sleep(Duration::from_millis(rng.u64(0..ttl_ms / 2))).await;
        }
    }

    if !(careful && lost) {
        // Stamp first, then ask: if the stamp is past the validity, is_lost() must say so.
        let t_sent = clock::now();
        let lost_reported = lease.is_lost();
        if lost_reported && !lost {
            lost = true;
            lost_detected("is_lost");
        }
        if auto_renew && !lost_reported {
            observe(ctx, &lease, &id, t_sent, sabotage);
        }
        if kind == HoldKind::Lock && fence.is_some() {
            fenced_write(ctx, &id, &name, fence, t_sent, lost_reported).await;
        } else {
            // No fencing token to write with: the work is the look at `is_lost()`.
            ctx.log(&Event::Work {
                id: id.clone(),
                name: name.clone(),
                t: t_sent,
                lost_reported,
            });
        }
    }

    let t_sent = clock::now();
    let lost_reported = lease.is_lost();
    if lost_reported && !lost {
        lost_detected("is_lost");
    }
    if auto_renew && !lost_reported {
        observe(ctx, &lease, &id, t_sent, sabotage);
    }
    ctx.log(&Event::Releasing {
        id: id.clone(),
        t: t_sent,
    });
    log_release(ctx, id, t_sent, lost_reported, lease.release()).await;
}

/// Sends a release (or a resignation) and logs what it returned.
async fn log_release(
    ctx: &Ctx,
    id: String,
    t_sent: Nanos,
    lost_reported: bool,
    release: impl std::future::Future<Output = Result<bool, LockError>>,
) {
    let outcome = match release.await {
        Ok(true) => ReleaseOutcome::Released,
        Ok(false) => ReleaseOutcome::NotHeld,
        Err(_) => ReleaseOutcome::Error,
    };
    ctx.log(&Event::Release {
        id,
        t_sent,
        t_reply: clock::now(),
        outcome,
        lost_reported,
    });
}

/// A write to the fenced store with the lease's fencing token, logged.
async fn fenced_write(
    ctx: &Ctx,
    id: &str,
    name: &str,
    fence: Option<u64>,
    t_sent: Nanos,
    lost_reported: bool,
) {
    let outcome = match fence {
        Some(token) => match ctx.store.write(name, token, id).await {
            Ok(true) => WriteOutcome::Accepted,
            Ok(false) => WriteOutcome::Rejected,
            Err(_) => WriteOutcome::Error,
        },
        None => WriteOutcome::Error,
    };
    ctx.log(&Event::Write {
        id: id.to_owned(),
        name: name.to_owned(),
        fence: fence.unwrap_or(0),
        t_sent,
        t_reply: clock::now(),
        outcome,
        lost_reported,
    });
}

/// Logs the validity an auto-renewed lease reports now: the renewer moves it in the
/// background, and the holder trusts whatever it reads.
fn observe(ctx: &Ctx, lease: &Guard, id: &str, t: Nanos, sabotage: Nanos) {
    ctx.log(&Event::Observed {
        id: id.to_owned(),
        t,
        valid_until: lease_valid_until(lease) + sabotage,
    });
}

/// [`valid_until`] of any primitive's guard.
fn lease_valid_until(lease: &Guard) -> Nanos {
    clock::stamp_ahead(|| lease.expires_in())
}

/// How an acquire failure is counted.
pub fn fail_kind(err: &LockError) -> FailKind {
    match err {
        LockError::Busy { .. } | LockError::Timeout { .. } | LockError::LimitReached { .. } => {
            FailKind::Contention
        }
        // A Cluster slot's move that outlasted the request's wait: the library retried
        // through it, as through an unreachable node.
        LockError::Connection { .. } | LockError::SlotMigrating { .. } => FailKind::Connection,
        LockError::NoQuorum { .. } => FailKind::NoQuorum,
        LockError::NotReplicated { .. } => FailKind::NotReplicated,
        LockError::WrongType { .. } => FailKind::WrongType,
        LockError::Redis { .. } => FailKind::Redis,
        LockError::CapacityMismatch { .. } => FailKind::Mismatch,
        _ => FailKind::Other,
    }
}
