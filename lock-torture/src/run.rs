//! The orchestrator: starts the servers, the proxies and the client processes, injects the
//! faults, stops everything, and checks the merged history.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_tests::proxy::Proxy;
use lock_tests::RedisServer;

use crate::check::{check, History, Report};
use crate::client::ProtocolArg;
use crate::clock::{self, Nanos};
use crate::cluster::{ClientProc, Cluster, Node};
use crate::event::{read_log, Log};
use crate::fault::{Injector, Mode};
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
    /// Which faults to inject.
    #[arg(long, value_enum, default_value_t = Mode::Mixed)]
    pub mode: Mode,
    /// How long faults are injected, per run, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Client processes.
    #[arg(long, default_value_t = 4)]
    pub clients: u32,
    /// Tasks per client process (pool mode uses 16).
    #[arg(long, default_value_t = 2)]
    pub tasks: u32,
    /// Lock names the clients contend for.
    #[arg(long, default_value_t = 3)]
    pub names: u32,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub ttl_ms: u64,
    /// Lock servers: 1, or an odd number for Redlock.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// Which protocol the clients use.
    #[arg(long, value_enum, default_value_t = Protocols::Mixed)]
    pub protocol: Protocols,
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
}

/// The outcome of one run.
#[derive(Debug)]
pub struct RunOutcome {
    /// The mode.
    pub mode: Mode,
    /// What the checker found.
    pub report: Report,
    /// The summary line printed.
    pub line: String,
    /// Where the logs are, if kept.
    pub logs: Option<PathBuf>,
}

/// Runs `args.mode` (every mode in turn for `all`), prints one summary line per run, and
/// returns the outcomes.
pub fn run(args: &RunArgs) -> Result<Vec<RunOutcome>, BoxError> {
    let modes: Vec<Mode> = if args.mode == Mode::All {
        Mode::RUNS.to_vec()
    } else {
        vec![args.mode]
    };
    let mut outcomes = Vec::new();
    for mode in modes {
        let outcome = run_one(args, mode)?;
        println!("{}", outcome.line);
        if !outcome.report.passed() {
            if !outcome.report.violations.is_empty() {
                eprintln!("  violations by rule: {}", outcome.report.by_rule());
            }
            for v in outcome.report.violations.iter().take(20) {
                eprintln!("  violation [{}] {}: {}", v.rule, v.name, v.detail);
            }
            if outcome.report.violations.len() > 20 {
                eprintln!("  ... and {} more", outcome.report.violations.len() - 20);
            }
            if !outcome.report.resumed {
                eprintln!("  no lock was granted after the last fault healed");
            }
        }
        if let Some(dir) = &outcome.logs {
            eprintln!("  logs: {}", dir.display());
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

fn run_one(args: &RunArgs, mode: Mode) -> Result<RunOutcome, BoxError> {
    if args.nodes == 0 || (args.nodes > 1 && args.nodes.is_multiple_of(2)) {
        return Err("--nodes must be 1, or odd for Redlock".into());
    }
    if args.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let (dir, temp) = match &args.logs {
        Some(dir) => {
            let dir = dir.join(mode.name());
            std::fs::create_dir_all(&dir)?;
            (dir, None)
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix(&format!("lock-torture-{}-", mode.name()))
                .tempdir()?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    let ttl = Duration::from_millis(args.ttl_ms);
    let orchestrator_log = Log::create(&dir.join("faults.jsonl"))?;

    let store = RedisServer::start();
    let mut nodes = Vec::new();
    for _ in 0..args.nodes {
        // DEBUG (off by default since Redis 7) for the `stall` fault's DEBUG SLEEP.
        let server = RedisServer::start_debuggable();
        let proxies = (0..args.clients)
            .map(|_| Proxy::start(server.addr()))
            .collect::<std::io::Result<Vec<_>>>()?;
        nodes.push(Node { server, proxies });
    }
    let mut cluster = Cluster {
        nodes,
        store,
        clients: Vec::new(),
        names: args.names,
    };
    let exe = std::env::current_exe()?;
    for id in 0..args.clients {
        let child = spawn_client(&exe, args, mode, &cluster, id, seed, &dir)?;
        cluster.clients.push(child);
    }

    // Faults, once every client has started.
    let started = clock::now();
    wait_for(&cluster, 1, started + clock::nanos(Duration::from_secs(20)));
    let fault_until = clock::now() + clock::nanos(Duration::from_secs_f64(args.seconds.max(0.1)));
    let mut injector = Injector {
        cluster: &mut cluster,
        log: &orchestrator_log,
        ttl,
        rng: fastrand::Rng::with_seed(seed),
    };
    injector.run(mode, fault_until)?;
    std::thread::sleep(Duration::from_nanos(
        fault_until.saturating_sub(clock::now()),
    ));

    // Heal, then wait until every client has had a chance to take a lock again.
    cluster.heal();
    let healed = cluster.progress();
    let settle = clock::now() + clock::nanos(Duration::from_secs_f64(args.settle_seconds));
    wait_for(&cluster, healed + u64::from(args.clients), settle);
    cluster.stop_clients();

    let mut history = History::default();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            history.events.extend(read_log(&path)?);
        }
    }
    let names: Vec<String> = (0..args.names).map(|i| format!("torture:{i}")).collect();
    history.store = read_store(&cluster.store.url(), &names)?;
    save_store(&dir.join("store.json"), &history.store)?;
    let report = check(&history, args.nodes as usize);
    let line = format!(
        "mode={} nodes={} clients={} names={} ttl_ms={} seconds={} seed={} {}",
        mode.name(),
        args.nodes,
        args.clients,
        args.names,
        args.ttl_ms,
        args.seconds,
        seed,
        report.summary()
    );
    let logs = match temp {
        Some(temp) if !report.passed() => Some(temp.keep()),
        Some(_) => None,
        None => Some(dir),
    };
    Ok(RunOutcome {
        mode,
        report,
        line,
        logs,
    })
}

fn spawn_client(
    exe: &Path,
    args: &RunArgs,
    mode: Mode,
    cluster: &Cluster,
    id: u32,
    seed: u64,
    dir: &Path,
) -> Result<ClientProc, BoxError> {
    let protocol = match args.protocol {
        _ if args.nodes > 1 => ProtocolArg::Scripts,
        Protocols::Scripts => ProtocolArg::Scripts,
        Protocols::Transactions => ProtocolArg::Transactions,
        Protocols::Mixed if id.is_multiple_of(2) => ProtocolArg::Scripts,
        Protocols::Mixed => ProtocolArg::Transactions,
    };
    let mut command = Command::new(exe);
    command
        .arg("client")
        .args(["--id", &id.to_string()])
        .args(["--store-url", &cluster.store.url()])
        .arg("--log")
        .arg(dir.join(format!("client-{id}.jsonl")))
        .args(["--names", &args.names.to_string()])
        .args(["--ttl-ms", &args.ttl_ms.to_string()])
        .args(["--protocol", protocol.as_str()])
        .args(["--seed", &seed.wrapping_add(u64::from(id)).to_string()])
        .args(["--sabotage-ms", &args.sabotage_ms.to_string()]);
    // A safety net only (clients stop when their standard input closes): past the whole run.
    let cap = args.seconds + args.settle_seconds + 120.0;
    command.args(["--max-seconds", &format!("{}", cap.ceil() as u64)]);
    for node in &cluster.nodes {
        command.args(["--lock-url", &node.proxies[id as usize].url()]);
    }
    if mode == Mode::Pool {
        // Many tasks on one pooled connection, with a short deadline for a checkout.
        command.args([
            "--tasks",
            "16",
            "--pool-size",
            "1",
            "--command-timeout-ms",
            "400",
        ]);
    } else {
        command.args(["--tasks", &args.tasks.to_string()]);
    }
    let stderr = File::create(dir.join(format!("client-{id}.stderr")))?;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()?;
    let stdin = child.stdin.take();
    let pid = i32::try_from(child.id())?;
    Ok(ClientProc { child, pid, stdin })
}

/// Waits until the progress counter reaches `target`, or `deadline`.
fn wait_for(cluster: &Cluster, target: u64, deadline: Nanos) {
    while clock::now() < deadline && cluster.progress() < target {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The fenced store's accepted writes per name.
pub fn read_store(
    url: &str,
    names: &[String],
) -> Result<BTreeMap<String, Vec<(u64, String)>>, BoxError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection()?;
    let mut store = BTreeMap::new();
    for name in names {
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(crate::resource::log_key(name))
            .arg(0)
            .arg(-1)
            .query(&mut conn)?;
        store.insert(
            name.clone(),
            entries
                .iter()
                .filter_map(|e| crate::resource::parse_entry(e))
                .collect(),
        );
    }
    Ok(store)
}

fn save_store(path: &Path, store: &BTreeMap<String, Vec<(u64, String)>>) -> Result<(), BoxError> {
    std::fs::write(path, serde_json::to_vec_pretty(store)?)?;
    Ok(())
}

/// Re-checks the logs of an earlier run kept in `dir` (`run --logs`).
pub fn check_dir(dir: &Path, nodes: usize) -> Result<Report, BoxError> {
    let mut history = History::default();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            history.events.extend(read_log(&path)?);
        }
    }
    let store = dir.join("store.json");
    if store.exists() {
        history.store = serde_json::from_slice(&std::fs::read(store)?)?;
    }
    Ok(check(&history, nodes))
}
