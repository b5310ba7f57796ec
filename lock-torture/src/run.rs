//! The orchestrator: starts the servers, the proxies and the client processes, injects the
//! faults, stops everything, and checks the merged history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check::{check, History, Report, Violation};
use crate::clock::{self, Nanos};
use crate::event::{read_log, Event, Log};
use crate::fault::Injector;
use crate::ha::monitor::{self, Monitors};
use crate::heartbeat::Heartbeats;
use crate::mode::Mode;
use crate::primitive::Primitive;
use crate::rig::Rig;
pub use crate::settings::{Protocols, RunArgs, Settings};
use crate::start::start_rig;
use crate::BoxError;

/// The outcome of one run.
#[derive(Debug)]
pub struct RunOutcome {
    /// The mode.
    pub mode: Mode,
    /// The primitive the clients took.
    pub primitive: Primitive,
    /// What the checker found.
    pub report: Report,
    /// The summary line printed.
    pub line: String,
    /// Where the logs are, if kept.
    pub logs: Option<PathBuf>,
}

/// Runs each of `args.mode` (every mode in turn for `all`) for each of `args.primitive`,
/// prints one summary line per run, and returns the outcomes.
pub fn run(args: &RunArgs) -> Result<Vec<RunOutcome>, BoxError> {
    let settings = Settings::resolve(args)?;
    // (mode, asked by name): `all`'s modes that a primitive cannot run in are left out for
    // it; one asked by name is an error.
    let modes: Vec<(Mode, bool)> = args
        .mode
        .iter()
        .flat_map(|&mode| match mode {
            Mode::All => settings
                .topology
                .modes()
                .iter()
                .map(|&one| (one, false))
                .collect(),
            one => vec![(one, true)],
        })
        .collect();
    let mut runs: Vec<(Primitive, Mode)> = Vec::new();
    for &primitive in &settings.primitives {
        for &(mode, named) in &modes {
            match primitive.runs_in(settings.topology, mode) {
                Ok(()) => runs.push((primitive, mode)),
                Err(why) if named => return Err(why.into()),
                Err(_) => {}
            }
        }
    }
    let mut outcomes = Vec::new();
    for (primitive, mode) in runs {
        let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
        // An error of the harness's own (a server it could not ask) names the run it ended.
        let outcome = run_one(args, &settings, primitive, mode, seed).map_err(|err| {
            format!(
                "topology={} primitive={} mode={} seed={seed}: {err}",
                settings.topology.name(),
                primitive.name(),
                mode.name()
            )
        })?;
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

fn run_one(
    args: &RunArgs,
    s: &Settings,
    primitive: Primitive,
    mode: Mode,
    seed: u64,
) -> Result<RunOutcome, BoxError> {
    // The lock's runs keep their names (`<mode>`); the other primitives' say which they are.
    let (run_name, what) = match primitive {
        Primitive::Semaphore => (
            format!("semaphore-{}", mode.name()),
            format!(" primitive=semaphore permits={}", s.permits),
        ),
        Primitive::Rwlock => (
            format!("rwlock-{}", mode.name()),
            " primitive=rwlock".into(),
        ),
        Primitive::Multi
        | Primitive::Election
        | Primitive::Schedule
        | Primitive::Deadlock
        | Primitive::Weighted
        | Primitive::Latch => (
            format!("{}-{}", primitive.name(), mode.name()),
            format!(" primitive={}", primitive.name()),
        ),
        Primitive::Mutex | Primitive::All => (mode.name().to_owned(), String::new()),
    };
    let (dir, temp) = match &args.logs {
        Some(dir) => {
            let dir = dir.join(&run_name);
            std::fs::create_dir_all(&dir)?;
            (dir, None)
        }
        None => {
            let temp = tempfile::Builder::new()
                .prefix(&format!("lock-torture-{run_name}-"))
                .tempdir()?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    let ttl = Duration::from_millis(s.ttl_ms);
    let orchestrator_log = Log::create(&dir.join("faults.jsonl"))?;
    orchestrator_log.write(&Event::Topology {
        topology: s.topology.name().to_owned(),
        nodes: s.nodes,
    })?;

    let mut rig = start_rig(s, primitive, mode, seed, &dir)?;
    // The data servers: on a replicated deployment every one, else the lock servers.
    let ports: Vec<u16> = match &rig.ha {
        Some(ha) => ha.ports(),
        None => rig.nodes.iter().map(|node| node.server.port()).collect(),
    };
    // Which server granted which lease, on the replicated deployments: watched before the
    // clients start, or their first leases would be seen granted by no server.
    let mut monitors = match &rig.ha {
        Some(ha) => Some(Monitors::start(&ha.ports(), &dir)?),
        // On one server or Redlock's masters, only to trace (every line kept, see
        // `monitor::RAW`): a grant there is the clients' to report, so the readers'
        // logs go to `trace/`, where the checker does not read.
        None if std::env::var_os(monitor::RAW).is_some() => {
            let trace = dir.join("trace");
            std::fs::create_dir_all(&trace)?;
            Some(Monitors::start(&ports, &trace)?)
        }
        None => None,
    };
    // Times when a data server ran nothing (see `heartbeat`).
    let mut heartbeats = Heartbeats::start(&ports, &dir)?;
    rig.start_clients()?;

    // Faults, once every client has started.
    let started = clock::now();
    wait_for(&rig, 1, started + clock::nanos(Duration::from_secs(30)));
    let fault_until = clock::now() + clock::nanos(Duration::from_secs_f64(s.seconds.max(0.1)));
    let mut injector = Injector {
        rig: &mut rig,
        log: &orchestrator_log,
        ttl,
        rng: fastrand::Rng::with_seed(seed),
    };
    injector.run(mode, fault_until)?;
    std::thread::sleep(Duration::from_nanos(
        fault_until.saturating_sub(clock::now()),
    ));

    // Heal, then wait until every client has had a chance to take a lock again.
    rig.heal();
    let healed = rig.progress();
    let settle = clock::now() + clock::nanos(Duration::from_secs_f64(s.settle_seconds));
    wait_for(&rig, healed + u64::from(s.clients), settle);
    let crashed = rig.stop_clients();
    if let Some(monitors) = monitors.as_mut() {
        monitors.stop();
    }
    heartbeats.stop();

    let mut history = read_history(&dir)?;
    history.store = read_store(&rig.store.url(), &rig.name_list())?;
    save_store(&dir.join("store.json"), &history.store)?;
    let mut report = check(&history, s.nodes as usize);
    // A client that died on its own (not by a fault's SIGKILL: those are replaced) left a
    // history cut short, and the rules above may blame the library for what it left.
    for (client, status) in crashed {
        report.violations.push(Violation {
            rule: "client-crashed",
            name: format!("client-{client}"),
            detail: format!(
                "the client process exited on its own ({status}); see client-{client}.stderr"
            ),
        });
    }
    let line = format!(
        "topology={} mode={}{what} profile={} nodes={} clients={} tasks={} names={}{} ttl_ms={} seconds={} seed={} {}",
        s.topology.name(),
        mode.name(),
        s.profile.name(),
        s.nodes,
        s.clients,
        s.tasks,
        s.names_in(mode),
        match s.name_kind {
            crate::names::NameKind::Plain => "",
            crate::names::NameKind::Hostile => " name_kind=hostile",
        },
        s.ttl_ms,
        s.seconds,
        seed,
        report.summary()
    );
    // A failed run keeps the data servers' own logs of a replicated deployment (syncs,
    // failovers, their replicas' links) beside the history: `redis-<port>.log`.
    if !report.passed() {
        if let Some(ha) = &rig.ha {
            for server in ha.servers() {
                let _ = std::fs::copy(
                    server.dir().join("redis.log"),
                    dir.join(format!("redis-{}.log", server.port())),
                );
            }
        }
    }
    let logs = match temp {
        Some(temp) if !report.passed() => Some(temp.keep()),
        Some(_) => None,
        None => Some(dir),
    };
    Ok(RunOutcome {
        mode,
        primitive,
        report,
        line,
        logs,
    })
}

/// Every event of the logs in `dir`.
fn read_history(dir: &Path) -> Result<History, BoxError> {
    let mut history = History::default();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            history.events.extend(read_log(&path)?);
        }
    }
    Ok(history)
}

/// Waits until the progress counter reaches `target`, or `deadline`.
fn wait_for(rig: &Rig, target: u64, deadline: Nanos) {
    while clock::now() < deadline && rig.progress() < target {
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

/// Re-checks the logs of an earlier run kept in `dir` (`run --logs`). The run's own record
/// of its deployment wins over `nodes`.
pub fn check_dir(dir: &Path, nodes: usize) -> Result<Report, BoxError> {
    let mut history = read_history(dir)?;
    let store = dir.join("store.json");
    if store.exists() {
        history.store = serde_json::from_slice(&std::fs::read(store)?)?;
    }
    let nodes = history
        .events
        .iter()
        .find_map(|e| match e {
            Event::Topology { nodes, .. } => Some(*nodes as usize),
            _ => None,
        })
        .unwrap_or(nodes);
    Ok(check(&history, nodes))
}
