//! Who runs in which scenario. Adding a contender: a module in `contenders/`, a variant of
//! `contenders::Any`, and a line in the lists below.

use std::sync::Arc;

use lock_core::{Locker, ReplicaSync};

use crate::contenders::annotated::Annotated;
use crate::contenders::blocking::Blocking;
use crate::contenders::core::Core;
use crate::contenders::handoff::{Handoff, Pad};
use crate::contenders::naive::Naive;
use crate::contenders::raw::Raw;
use crate::contenders::rslock::Rslock;
use crate::contenders::semaphore::Semaphore;
use crate::contenders::{Any, Contender as _};
use crate::probe::Probe;
use crate::scenarios::s3_hot;
use crate::scenarios::s4_redlock::Config;
use crate::scenarios::s5_overrun::{self, CONTENDERS};
use crate::scenarios::s6_permits;
use crate::scenarios::s7_rwlock;

pub const RAW: &str = "raw redis-rs (floor)";
pub const NAIVE: &str = "naive 1 ms retry";
pub const CORE: &str = "lock-core Locker";
pub const CORE_RENEW: &str = "lock-core Locker + auto_renew()";
/// The `Locker` with key tracking off (`track_keys(false)`): what telling a lost lease at
/// once costs an uncontended cycle, beside the default row.
pub const CORE_UNTRACKED: &str = "lock-core Locker, track_keys(false)";
pub const MACRO_RENEW: &str = "#[redis_locked] (default: renews)";
pub const MACRO_PLAIN: &str = "#[redis_locked(renew = false)]";
pub const RSLOCK: &str = "rslock 0.10";
pub const SEMAPHORE: &str = "lock-core semaphore (8 permits)";
pub const BLOCKING: &str = "lock-core blocking::Locker (std threads)";
pub const RSLOCK_USING: &str = "rslock 0.10 using() (renews)";

pub const HOT_CORE_SHARED: &str = "lock-core, 1 locker (N tasks)";
pub const HOT_CORE_SEPARATE: &str = "lock-core, N lockers";
pub const HOT_NAIVE: &str = "naive 1 ms retry, N clients";
pub const HOT_RSLOCK: &str = "rslock 0.10, N managers";
pub const HOT_CORE_REDLOCK: &str = "lock-core, N lockers, Redlock-3 (per node)";

pub const PERMITS_SHARED: &str = "lock-core semaphore, 1 locker (64 tasks)";
pub const PERMITS_SEPARATE: &str = "lock-core semaphore, 64 lockers";
pub const PERMITS_FEW_LOCKERS: &str = "lock-core semaphore, 8 lockers (32 tasks, 4 each)";
/// The floor of the row above: a FIFO hand-off between 64 clients with nothing else
/// (`contenders/handoff.rs`).
pub const PERMITS_FLOOR: &str = "raw FIFO hand-off (floor), 64 clients";
pub const PERMITS_SHARDED: &str = "lock-core Locker, 8 names (8 tasks each), 1 locker";
pub const PERMITS_FEW_WAITING: &str = "lock-core semaphore, 1 locker (16 tasks: 8 waiting)";
pub const PERMITS_MANY_WAITING: &str = "lock-core semaphore, 1 locker (72 tasks: 64 waiting)";
pub const PERMITS_HOLDERS: &str = "lock-core semaphore, try + release";
pub const RW_FLOOD: &str = "lock-core rwlock, reader flood (64 readers, 1 locker)";
pub const RW_WRITER: &str =
    "lock-core rwlock, reader flood + a writer every 10 ms (its own process)";
pub const MULTI: &str = "lock-core lock_all vs plain locks";

/// S7: the reader flood alone, and with a writer.
pub fn rwlock(endpoints: &Endpoints, filter: &Filter) -> Result<Vec<s7_rwlock::Group>, String> {
    let single = std::slice::from_ref(&endpoints.single);
    let mut groups = Vec::new();
    for (label, name, writes) in [
        (RW_FLOOD, "s7-flood", false),
        (RW_WRITER, "s7-writer", true),
    ] {
        if filter.keeps(label) {
            groups.push(s7_rwlock::Group {
                label: label.into(),
                name: name.into(),
                readers: locker(single, "s7:")?,
                writer: writes.then(|| s7_rwlock::WriterAt {
                    url: endpoints.single.clone(),
                    prefix: "s7:".to_owned(),
                }),
            });
        }
    }
    Ok(groups)
}

/// S8's locker, or None when filtered out.
pub fn multi(endpoints: &Endpoints, filter: &Filter) -> Result<Option<Locker>, String> {
    if !filter.keeps(MULTI) {
        return Ok(None);
    }
    locker(std::slice::from_ref(&endpoints.single), "s8:").map(Some)
}

/// S6's cost with many holders: one locker, or None when filtered out.
pub fn permit_holders(endpoints: &Endpoints, filter: &Filter) -> Result<Option<Locker>, String> {
    if !filter.keeps(PERMITS_HOLDERS) {
        return Ok(None);
    }
    locker(std::slice::from_ref(&endpoints.single), "s6-many:").map(Some)
}

/// Where the contenders connect.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// The single Redis of S1, S2, S3, S5 and the renewal scenario.
    pub single: String,
    /// Independent masters for S4 (5, or none when they could not be started).
    pub masters: Vec<String>,
    /// Seeds of a 3-master Redis Cluster (one replica each) for S4, when one could be
    /// started.
    pub cluster: Vec<String>,
    /// A Sentinel watching a master with one replica (its URL and the master's name), for
    /// S4, when one could be started.
    pub sentinel: Option<(String, String)>,
}

/// Keeps the contenders whose label contains one of `only` (all when `only` is empty).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub only: Vec<String>,
}

impl Filter {
    pub fn keeps(&self, label: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|part| label.contains(part.as_str()))
    }
}

fn locker(urls: &[String], prefix: &str) -> Result<Locker, String> {
    builder(urls, prefix)
        .build()
        .map_err(|err| format!("cannot build a locker: {err}"))
}

fn builder(urls: &[String], prefix: &str) -> lock_core::LockerBuilder {
    let builder = Locker::builder().prefix(prefix);
    let builder = match urls {
        [url] => builder.url(url.clone()),
        urls => builder.redlock(urls.iter().cloned()),
    };
    builder
}

/// S1 and S2: the floor first (ratios refer to it), then everyone on one Redis.
pub async fn uncontended(endpoints: &Endpoints, filter: &Filter) -> Result<Vec<Any>, String> {
    let single = std::slice::from_ref(&endpoints.single);
    let mut all = vec![
        Any::Raw(Raw::connect(single, RAW).await?),
        Any::Naive(Naive::connect(&endpoints.single, NAIVE).await?),
        Any::Core(Core::new(locker(single, "core:")?, false, CORE)),
        Any::Core(Core::new(
            builder(single, "core-untracked:")
                .track_keys(false)
                .build()
                .map_err(|err| format!("cannot build a locker: {err}"))?,
            false,
            CORE_UNTRACKED,
        )),
        Any::Core(Core::new(locker(single, "core-renew:")?, true, CORE_RENEW)),
        Any::Annotated(Annotated::new(locker(single, "macro:")?, true, MACRO_RENEW)),
        Any::Annotated(Annotated::new(
            locker(single, "macro-plain:")?,
            false,
            MACRO_PLAIN,
        )),
        Any::Rslock(Rslock::new(single, false, RSLOCK)?),
        Any::Semaphore(Semaphore::new(locker(single, "sem:")?, 8, SEMAPHORE)),
        Any::Blocking(Blocking::new(builder(single, "blocking:"), BLOCKING).await?),
    ];
    // The floor stays whatever the filter says: every ratio refers to it.
    let floor = all.remove(0);
    let mut kept = vec![floor];
    kept.extend(all.into_iter().filter(|c| filter.keeps(c.label())));
    Ok(kept)
}

/// S3: groups of `n` for each library.
pub async fn hot(
    endpoints: &Endpoints,
    filter: &Filter,
    n: usize,
) -> Result<Vec<s3_hot::Group>, String> {
    let single = std::slice::from_ref(&endpoints.single);
    let mut groups = Vec::new();
    if filter.keeps(HOT_CORE_SHARED) {
        let shared = Arc::new(Any::Core(Core::new(locker(single, "core:")?, false, CORE)));
        groups.push(s3_hot::Group {
            label: HOT_CORE_SHARED.into(),
            members: vec![shared; n],
            nodes: Vec::new(),
        });
    }
    if filter.keeps(HOT_CORE_SEPARATE) {
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push(Arc::new(Any::Core(Core::new(
                locker(single, "core:")?,
                false,
                CORE,
            ))));
        }
        groups.push(s3_hot::Group {
            label: HOT_CORE_SEPARATE.into(),
            members,
            nodes: Vec::new(),
        });
    }
    if filter.keeps(HOT_NAIVE) {
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push(Arc::new(Any::Naive(
                Naive::connect(&endpoints.single, NAIVE).await?,
            )));
        }
        groups.push(s3_hot::Group {
            label: HOT_NAIVE.into(),
            members,
            nodes: Vec::new(),
        });
    }
    if filter.keeps(HOT_RSLOCK) {
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push(Arc::new(Any::Rslock(Rslock::new(single, false, RSLOCK)?)));
        }
        groups.push(s3_hot::Group {
            label: HOT_RSLOCK.into(),
            members,
            nodes: Vec::new(),
        });
    }
    // Separate lockers over three independent masters: the Redlock waiters.
    let masters = endpoints.masters.get(..3).unwrap_or_default();
    if filter.keeps(HOT_CORE_REDLOCK) && !masters.is_empty() {
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push(Arc::new(Any::Core(Core::new(
                locker(masters, "core-redlock:")?,
                false,
                CORE,
            ))));
        }
        let mut nodes = Vec::with_capacity(masters.len());
        for url in masters {
            nodes.push(Probe::connect(url).await?);
        }
        groups.push(s3_hot::Group {
            label: HOT_CORE_REDLOCK.into(),
            members,
            nodes,
        });
    }
    Ok(groups)
}

/// S6: `tasks` tasks on one semaphore of [`s6_permits::PERMITS`] permits named `name`,
/// spread over `lockers` Lockers (task `i` on Locker `i mod lockers`), as that many
/// processes would be.
fn semaphores_of_lockers(
    single: &[String],
    label: &str,
    lockers: usize,
    tasks: usize,
    name: &str,
) -> Result<s6_permits::Group, String> {
    use s6_permits::PERMITS;
    let mut each = Vec::with_capacity(lockers);
    for _ in 0..lockers {
        each.push(Arc::new(Any::Semaphore(Semaphore::new(
            locker(single, "s6-sem:")?,
            PERMITS as u64,
            label,
        ))));
    }
    Ok(s6_permits::Group {
        label: label.into(),
        members: (0..tasks)
            .map(|task| Arc::clone(&each[task % lockers]))
            .collect(),
        names: vec![name.to_owned()],
        capacity: PERMITS,
    })
}

/// S6: 64 tasks on one semaphore of 8 permits (one locker, or one each), and the same
/// tasks on 8 plain locks.
pub fn permits(
    endpoints: &Endpoints,
    filter: &Filter,
    floor_pad: (Pad, u64),
) -> Result<Vec<s6_permits::Group>, String> {
    use s6_permits::{PERMITS, TASKS};
    let single = std::slice::from_ref(&endpoints.single);
    let mut groups = Vec::new();
    if filter.keeps(PERMITS_SHARED) {
        let shared = Arc::new(Any::Semaphore(Semaphore::new(
            locker(single, "s6-sem:")?,
            PERMITS as u64,
            PERMITS_SHARED,
        )));
        groups.push(s6_permits::Group {
            label: PERMITS_SHARED.into(),
            members: vec![shared; TASKS],
            names: vec!["s6".to_owned()],
            capacity: PERMITS,
        });
    }
    if filter.keeps(PERMITS_SEPARATE) {
        groups.push(semaphores_of_lockers(
            single,
            PERMITS_SEPARATE,
            TASKS,
            TASKS,
            "s6",
        )?);
    }
    if filter.keeps(PERMITS_FEW_LOCKERS) {
        // Eight processes of four tasks each: a hand-off goes to a waiter of the same
        // Locker (in the release's reply) or of another (a message), as the queue has it.
        let tasks = TASKS / 2;
        groups.push(semaphores_of_lockers(
            single,
            PERMITS_FEW_LOCKERS,
            PERMITS,
            tasks,
            "s6-few",
        )?);
    }
    if filter.keeps(PERMITS_FLOOR) {
        let run = fastrand::u64(..);
        // A padded floor is another contender: its row says so.
        let label = match floor_pad {
            (_, 0) => PERMITS_FLOOR.to_owned(),
            (with, times) => format!("{PERMITS_FLOOR}, scripts padded: {with:?} x {times}"),
        };
        let mut members = Vec::with_capacity(TASKS);
        for index in 0..TASKS {
            members.push(Arc::new(Any::Handoff(Box::new(Handoff::new(
                &endpoints.single,
                PERMITS,
                run,
                index,
                &label,
                floor_pad,
            )?))));
        }
        groups.push(s6_permits::Group {
            label,
            members,
            names: vec!["s6".to_owned()],
            capacity: PERMITS,
        });
    }
    // The semaphore's cost per acquisition as its queue grows: 8 and 64 waiting (beside
    // the 56 of the row above).
    for (label, tasks) in [
        (PERMITS_FEW_WAITING, 2 * PERMITS),
        (PERMITS_MANY_WAITING, 9 * PERMITS),
    ] {
        if filter.keeps(label) {
            let shared = Arc::new(Any::Semaphore(Semaphore::new(
                locker(single, "s6-sem:")?,
                PERMITS as u64,
                label,
            )));
            groups.push(s6_permits::Group {
                label: label.into(),
                members: vec![shared; tasks],
                names: vec![format!("s6-{tasks}")],
                capacity: PERMITS,
            });
        }
    }
    if filter.keeps(PERMITS_SHARDED) {
        let shared = Arc::new(Any::Core(Core::new(
            locker(single, "s6-lock:")?,
            false,
            PERMITS_SHARDED,
        )));
        groups.push(s6_permits::Group {
            label: PERMITS_SHARDED.into(),
            members: vec![shared; TASKS],
            names: (0..PERMITS).map(|i| format!("s6:{i}")).collect(),
            capacity: 1,
        });
    }
    Ok(groups)
}

/// S4: raw, lock-core and rslock on 1, 3 and 5 nodes.
pub async fn redlock(endpoints: &Endpoints, filter: &Filter) -> Result<Vec<Config>, String> {
    let mut configs = Vec::new();
    for nodes in [1usize, 3, 5] {
        let urls: Vec<String> = if nodes == 1 {
            vec![endpoints.single.clone()]
        } else {
            endpoints.masters.iter().take(nodes).cloned().collect()
        };
        if urls.len() < nodes {
            return Err(format!(
                "S4 needs {nodes} Redis masters, {} are running",
                urls.len()
            ));
        }
        let suffix = if nodes == 1 {
            ", 1 Redis".to_owned()
        } else {
            format!(", Redlock-{nodes}")
        };
        let all = [
            (
                "raw",
                Any::Raw(Raw::connect(&urls, format!("{RAW}{suffix}")).await?),
            ),
            (
                "lock-core",
                Any::Core(Core::new(
                    locker(&urls, "core:")?,
                    false,
                    format!("{CORE}{suffix}"),
                )),
            ),
            (
                "rslock",
                Any::Rslock(Rslock::new(&urls, false, format!("{RSLOCK}{suffix}"))?),
            ),
        ];
        for (library, contender) in all {
            if library == "raw" || filter.keeps(contender.label()) {
                configs.push(Config {
                    library: library.into(),
                    nodes,
                    redlock: nodes > 1,
                    contender: Arc::new(contender),
                });
            }
        }
    }
    // lock-core on a 3-master cluster (one replica each): each lock lives on one master,
    // so this measures the cluster client's routing, not a quorum; with the replica
    // acknowledgement check (the default there) and without it.
    for (sync, suffix) in [
        (ReplicaSync::default(), ", replica check"),
        (ReplicaSync::Off, ", check off"),
    ] {
        if endpoints.cluster.is_empty() {
            break;
        }
        let label = format!("{CORE}, cluster-3+1{suffix}");
        if filter.keeps(&label) {
            let locker = Locker::builder()
                .prefix("core:")
                .cluster(endpoints.cluster.iter().cloned())
                .replica_sync(sync)
                .build()
                .map_err(|err| format!("cannot build a cluster locker: {err}"))?;
            configs.push(Config {
                library: "lock-core".into(),
                nodes: endpoints.cluster.len(),
                redlock: false,
                contender: Arc::new(Any::Core(Core::new(locker, false, label))),
            });
        }
    }
    // lock-core on the master a Sentinel names (one replica), with and without the check.
    if let Some((sentinel, master)) = &endpoints.sentinel {
        for (sync, suffix) in [
            (ReplicaSync::default(), ", replica check"),
            (ReplicaSync::Off, ", check off"),
        ] {
            let label = format!("{CORE}, sentinel 1+1{suffix}");
            if filter.keeps(&label) {
                let locker = Locker::builder()
                    .prefix("core:")
                    .sentinel([sentinel.clone()], master.clone())
                    .replica_sync(sync)
                    .build()
                    .map_err(|err| format!("cannot build a sentinel locker: {err}"))?;
                configs.push(Config {
                    library: "lock-core".into(),
                    nodes: 2,
                    redlock: false,
                    contender: Arc::new(Any::Core(Core::new(locker, false, label))),
                });
            }
        }
    }
    Ok(configs)
}

/// S5: five instances of each library, with and without renewal.
pub async fn overrun(
    endpoints: &Endpoints,
    filter: &Filter,
) -> Result<Vec<s5_overrun::Group>, String> {
    let single = std::slice::from_ref(&endpoints.single);
    let mut groups = Vec::new();
    let kinds: [(&str, bool); 6] = [
        (NAIVE, false),
        (RSLOCK, false),
        (CORE, false),
        (CORE_RENEW, true),
        (MACRO_RENEW, true),
        (RSLOCK_USING, true),
    ];
    for (label, renews) in kinds {
        if !filter.keeps(label) {
            continue;
        }
        let mut members = Vec::with_capacity(CONTENDERS);
        for _ in 0..CONTENDERS {
            let member = match label {
                NAIVE => Any::Naive(Naive::connect(&endpoints.single, label).await?),
                RSLOCK | RSLOCK_USING => Any::Rslock(Rslock::new(single, renews, label)?),
                MACRO_RENEW => {
                    Any::Annotated(Annotated::new(locker(single, "macro:")?, true, label))
                }
                _ => Any::Core(Core::new(locker(single, "core:")?, renews, label)),
            };
            members.push(Arc::new(member));
        }
        groups.push(s5_overrun::Group {
            label: label.into(),
            renews: members.iter().all(|m| m.renews()),
            members,
        });
    }
    Ok(groups)
}

/// The renewal-cost scenario: the libraries that can keep leases alive.
pub async fn renewal(endpoints: &Endpoints, filter: &Filter) -> Result<Vec<Any>, String> {
    let single = std::slice::from_ref(&endpoints.single);
    let all = vec![
        Any::Core(Core::new(
            locker(single, "core-renew:")?,
            true,
            "lock-core auto_renew() (batched per tick)",
        )),
        Any::Core(Core::new(
            Locker::builder()
                .prefix("core-renew-untracked:")
                .url(endpoints.single.clone())
                .track_keys(false)
                .build()
                .map_err(|err| format!("cannot build a locker: {err}"))?,
            true,
            "lock-core auto_renew(), track_keys(false)",
        )),
        Any::Naive(Naive::connect(&endpoints.single, "naive: a timer per lease").await?),
        Any::Rslock(Rslock::new(single, true, "rslock 0.10 using() per lease")?),
    ];
    Ok(all
        .into_iter()
        .filter(|c| filter.keeps(c.label()))
        .collect())
}
