//! One client process: tasks that take locks, hold them, write to the fenced resource and
//! release, logging every step.
//!
//! The orchestrator starts each client as `lock-torture client ...` and stops it by closing
//! its standard input. A client never decides whether what it saw was correct; it only
//! records what the library told it and when, and the checker judges afterwards.
//!
//! Here: what every task of a client shares (`Ctx`), the locker it builds and the tasks
//! it starts. The arguments are in `args.rs`; the plain rounds in `round.rs`, which hold a
//! lease through `held.rs` and log a failure through `failure.rs`; the other kinds of round
//! and task in the files named after them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod args;
mod cancel;
mod deadlock;
mod election;
mod failure;
mod guard;
mod held;
mod hiccup;
mod holding;
mod latch;
mod nested;
mod probe;
mod round;
mod schedule;
mod weights;

use lock_core::{LeaseHandle, LockError, Locker, Protocol};

use crate::clock::{self, Nanos};
use crate::event::{Event, Log};
use crate::primitive::Primitive;
use crate::resource::FencedStore;
use crate::settings::ReplicaSyncArg;
use crate::BoxError;
pub use args::{ClientArgs, ProtocolArg, LONG_WAIT_TTLS};
pub use failure::fail_kind;

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
    /// Every workload task has ended: the hiccup ticker ([`hiccup::watch`]) takes its last
    /// look and ends. (Not at `stop`: requests in flight then still end afterwards, and a
    /// stall of the client during them must still be seen.)
    workload_over: AtomicBool,
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
        if self.args.primitive == Primitive::Weighted {
            // The weighted workload's clients agree: its capacity moves by set_capacity.
            crate::primitive::WEIGHTED_CAPACITY
        } else if self.args.id % DISSENTERS == DISSENTERS - 1 {
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
    if args.no_track_keys {
        builder = builder.track_keys(false);
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
        workload_over: AtomicBool::new(false),
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
    let ticker = tokio::spawn(async move { hiccup::watch(&watcher).await });
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
        // One task of random nesting: a holder label names the client, and so the task,
        // in a cycle of it; and the ring tasks, whose names (one ring per round) tell
        // them apart.
        Primitive::Deadlock => {
            let nesting = Arc::clone(&ctx);
            tasks.spawn(async move { deadlock::task(&nesting, 0).await });
            for member in 0..deadlock::ring_tasks(ctx.args.clients) {
                let ctx = Arc::clone(&ctx);
                tasks.spawn(async move { deadlock::ring_member(&ctx, member).await });
            }
        }
        // One timer per job: the client is one replica of the fleet.
        Primitive::Schedule => {
            for job in 0..ctx.args.names {
                let ctx = Arc::clone(&ctx);
                tasks.spawn(async move { schedule::replica(&ctx, job).await });
            }
        }
        Primitive::Latch => latch::spawn(&ctx, &mut tasks),
        _ => {
            if ctx.args.primitive == Primitive::Weighted && ctx.args.id == 0 {
                let changer = Arc::clone(&ctx);
                tasks.spawn(async move { weights::change_capacity(&changer).await });
            }
            for task in 0..ctx.args.tasks {
                tasks.spawn(round::task_loop(Arc::clone(&ctx), task));
            }
        }
    }
    while let Some(joined) = tasks.join_next().await {
        if let Err(err) = joined {
            if err.is_panic() {
                // A task's panic (already printed on stderr) cut this client's history
                // short: exit at once with a failure, which the orchestrator reports as
                // the rule `client-crashed` instead of judging what the task left behind.
                eprintln!("lock-torture client {}: a task panicked", ctx.args.id);
                std::process::exit(101);
            }
        }
    }
    ctx.workload_over.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    // Let background releases of dropped leases finish before the runtime goes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The lease's end of validity as a stamp, never below it (and within
/// [`clock::SETTLED`] of it, as a rule).
fn valid_until(lease: &LeaseHandle) -> Nanos {
    clock::stamp_ahead(|| lease.expires_in())
}
