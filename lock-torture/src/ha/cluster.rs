//! A Redis Cluster of three masters with a replica each (started by the test support), and
//! what the faults do to it: kill or pause a master until its replica is promoted, hand a
//! master's slots to its replica with `CLUSTER FAILOVER`, move a lock's slot to another
//! master key by key.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_tests::RedisCluster;

use crate::clock::{self, Nanos};
use crate::event::{Failover, ReplicaCopy};
use crate::ha::ops::{self, acknowledged, ask, int, lock_key, poll, role, text, Role};
use crate::BoxError;

/// How long the orchestrator's own steps (a slot's lookup, a slot's move) are asked again while their server does not answer.
const INSIST_LIMIT: Duration = Duration::from_secs(5);

/// How long a failover may take before the fault gives up on it (the node timeout is 1 s).
const FAILOVER_LIMIT: Duration = Duration::from_secs(20);

/// The cluster, and the slot of each lock name.
#[derive(Debug)]
pub struct ClusterHa {
    /// Its servers (masters first at the start; roles change with the faults).
    pub cluster: RedisCluster,
    /// Lock name -> hash slot of its keys.
    slots: BTreeMap<String, u16>,
    /// Keys of no lock's slot, with their slots: each master's readiness is checked with
    /// a write of one of them (see [`ops::acknowledged`]).
    probes: Vec<(String, u16)>,
}

/// How many probe keys are looked up: each master holds a third of the slots at the start,
/// so that every master serves some of them.
const PROBES: usize = 48;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node id.
    pub id: String,
    /// Its port.
    pub port: u16,
    /// Whether it is a master (and not failed).
    pub master: bool,
    /// For a replica, its master's id.
    pub master_id: Option<String>,
    /// The slot ranges it serves.
    pub slots: Vec<(u16, u16)>,
}

impl ClusterHa {
    /// Starts three masters with a replica each and looks up the slot of every name.
    pub fn start(names: &[String]) -> Result<ClusterHa, BoxError> {
        let cluster = RedisCluster::start(3, 1);
        let mut slots = BTreeMap::new();
        for name in names {
            let reply = ops::insist(
                cluster.nodes[0].port(),
                &["CLUSTER", "KEYSLOT", &lock_key(name)],
                INSIST_LIMIT,
            )?;
            let slot = int(&reply).ok_or("CLUSTER KEYSLOT gave no number")?;
            slots.insert(name.clone(), u16::try_from(slot)?);
        }
        let mut probes = Vec::new();
        for i in 0..PROBES {
            let key = format!("torture-ready:{{{i}}}");
            let reply = ops::insist(
                cluster.nodes[0].port(),
                &["CLUSTER", "KEYSLOT", &key],
                INSIST_LIMIT,
            )?;
            let slot = u16::try_from(int(&reply).ok_or("CLUSTER KEYSLOT gave no number")?)?;
            if !slots.values().any(|&s| s == slot) {
                probes.push((key, slot));
            }
        }
        Ok(ClusterHa {
            cluster,
            slots,
            probes,
        })
    }

    /// The ports of every data node.
    pub fn ports(&self) -> Vec<u16> {
        self.cluster.nodes.iter().map(|n| n.port()).collect()
    }

    fn index_of(&self, port: u16) -> Option<usize> {
        self.cluster.nodes.iter().position(|n| n.port() == port)
    }

    /// The cluster as a node that answers sees it.
    pub fn view(&self) -> Option<Vec<NodeInfo>> {
        self.cluster.nodes.iter().find_map(|node| {
            let reply = ask(node.port(), &["CLUSTER", "NODES"]).ok()?;
            Some(parse_nodes(&text(&reply)?))
        })
    }

    /// The port of the master serving `name`'s slot now.
    pub fn master_of(&self, name: &str) -> Option<u16> {
        let slot = *self.slots.get(name)?;
        self.view()?
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|n| n.port)
    }

    /// The names whose slots the master on `port` serves, per `view`.
    fn names_of(&self, view: &[NodeInfo], port: u16) -> Vec<String> {
        let Some(node) = view.iter().find(|n| n.port == port) else {
            return Vec::new();
        };
        self.slots
            .iter()
            .filter(|(_, &slot)| node.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Every node answers, the cluster is `ok` everywhere, and every master that serves
    /// slots has a replica in sync with it, which acknowledges its writes (a master that
    /// serves none of the probe keys' slots is judged by its replica's link alone).
    pub fn healthy(&self) -> bool {
        let all_ok = self.cluster.nodes.iter().all(|node| {
            ask(node.port(), &["CLUSTER", "INFO"])
                .ok()
                .and_then(|r| text(&r))
                .is_some_and(|t| t.contains("cluster_state:ok"))
        });
        let Some(view) = self.view().filter(|_| all_ok) else {
            return false;
        };
        view.iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .all(|m| match role(m.port) {
                Some(Role::Master(replicas)) => {
                    replicas
                        .iter()
                        .any(|&r| role(r) == Some(Role::Replica(m.port, true)))
                        && self.probe_of(m).is_none_or(|key| acknowledged(m.port, key))
                }
                _ => false,
            })
    }

    /// A probe key of one of the slots `master` serves.
    fn probe_of(&self, master: &NodeInfo) -> Option<&str> {
        self.probes
            .iter()
            .find(|(_, slot)| master.slots.iter().any(|&(a, b)| a <= *slot && *slot <= b))
            .map(|(key, _)| key.as_str())
    }

    /// A master that serves slots, its replicas, and the names it serves.
    pub fn pick_master(&self, rng: &mut fastrand::Rng) -> Option<(u16, Vec<u16>, Vec<String>)> {
        let view = self.view()?;
        let masters: Vec<&NodeInfo> = view
            .iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .collect();
        let master = masters.get(rng.usize(..masters.len().max(1)))?;
        // The master's own word on its replicas (another node's view may lag behind).
        let Some(Role::Master(replicas)) = role(master.port) else {
            return None;
        };
        Some((master.port, replicas, self.names_of(&view, master.port)))
    }

    /// SIGKILL of the master on `port`; once a replica has taken over, the node is
    /// restarted (empty: its `nodes.conf` survives, so it rejoins and becomes a replica).
    /// An error if no replica took over: the node then came back as an empty master, which
    /// is a deployment failure, not something the checker should judge.
    pub fn kill_master(
        &mut self,
        port: u16,
        replicas: &[u16],
        names: Vec<String>,
    ) -> Result<Failover, BoxError> {
        let index = self.index_of(port);
        let t_start = clock::now();
        if let Some(i) = index {
            self.cluster.nodes[i].kill();
        }
        let copies = read_copies(replicas, &names, true);
        let promoted = wait_promotion(replicas);
        if let Some(i) = index {
            self.cluster.nodes[i].restart();
        }
        if promoted.is_none() {
            return Err(format!("no replica of {port} took over after it was killed").into());
        }
        let t_end = demoted(port);
        Ok(failover(
            "kill", port, names, t_start, promoted, t_end, copies,
        ))
    }

    /// SIGSTOP of the master on `port`: `long` until a replica has taken over and a little
    /// more, otherwise for `short` (under the node timeout: a stall, no failover). Then
    /// SIGCONT.
    pub fn pause_master(
        &self,
        port: u16,
        replicas: &[u16],
        names: Vec<String>,
        long: Option<Duration>,
        short: Duration,
    ) -> Result<Failover, BoxError> {
        let pid = self
            .index_of(port)
            .and_then(|i| self.cluster.nodes[i].pid())
            .ok_or("the master has no process")?;
        let t_start = clock::now();
        crate::spawn::signal(pid, true)?;
        let copies = read_copies(replicas, &names, true);
        let promoted = match long {
            Some(extra) => {
                let promoted = wait_promotion(replicas);
                std::thread::sleep(extra);
                promoted
            }
            None => {
                std::thread::sleep(short.saturating_sub(clock_since(t_start)));
                None
            }
        };
        crate::spawn::signal(pid, false)?;
        // A short pause may still have set off a failover: look at the replicas.
        let promoted = promoted.or_else(|| {
            replicas
                .iter()
                .find(|&&r| matches!(role(r), Some(Role::Master(_))))
                .map(|&r| (r, clock::now()))
        });
        let t_end = if promoted.is_some() {
            demoted(port)
        } else {
            clock::now()
        };
        Ok(failover(
            "pause", port, names, t_start, promoted, t_end, copies,
        ))
    }

    /// `CLUSTER FAILOVER` on `replica` of `master`: the master stops its clients, the
    /// replica catches up with it and takes over, the master becomes its replica.
    pub fn manual_failover(&self, master: u16, replica: u16, names: Vec<String>) -> Failover {
        let t_start = clock::now();
        let sent = ask(replica, &["CLUSTER", "FAILOVER"]).is_ok();
        let promoted = if sent {
            poll(FAILOVER_LIMIT, || {
                matches!(role(replica), Some(Role::Master(_)))
            })
            .map(|t| (replica, t))
        } else {
            None
        };
        let t_end = demoted(master);
        failover(
            "manual",
            master,
            names,
            t_start,
            promoted,
            t_end,
            Vec::new(),
        )
    }

    /// Moves `name`'s slot to another master the way `redis-cli --cluster reshard` does:
    /// IMPORTING on the target, MIGRATING on the source, then the slot's keys `MIGRATE`d
    /// ten at a time (clients meanwhile get ASK and TRYAGAIN), then the slot assigned to the
    /// target on the target, on the source and on every other master. The target is
    /// `to` (a master's port), or another master picked at random. Returns `(slot, from,
    /// to)`.
    pub fn move_slot(
        &self,
        name: &str,
        to: Option<u16>,
        rng: &mut fastrand::Rng,
    ) -> Result<(u16, u16, u16), BoxError> {
        let slot = *self.slots.get(name).ok_or("unknown name")?;
        let s = slot.to_string();
        // The node asked for the view may not know of the last move yet (gossip): a
        // source that answers it does not own the slot is asked again, the target's
        // IMPORTING undone.
        let mut tries = 0;
        let (view, source, target) = loop {
            let view = self.view().ok_or("no node answers")?;
            let owns = |n: &&NodeInfo| n.slots.iter().any(|&(a, b)| a <= slot && slot <= b);
            let source = view
                .iter()
                .find(|n| n.master && owns(n))
                .ok_or("slot unowned")?
                .clone();
            let targets: Vec<&NodeInfo> = view
                .iter()
                .filter(|n| n.master && n.port != source.port)
                .filter(|n| to.map_or(!n.slots.is_empty(), |port| n.port == port))
                .collect();
            let target = (*targets
                .get(rng.usize(..targets.len().max(1)))
                .ok_or("no other master")?)
            .clone();
            let started = ops::ask(
                target.port,
                &["CLUSTER", "SETSLOT", &s, "IMPORTING", &source.id],
            )
            .and_then(|_| {
                ops::ask(
                    source.port,
                    &["CLUSTER", "SETSLOT", &s, "MIGRATING", &target.id],
                )
            });
            match started {
                Ok(_) => break (view, source, target),
                Err(err) => {
                    let _ = ops::ask(target.port, &["CLUSTER", "SETSLOT", &s, "STABLE"]);
                    tries += 1;
                    if tries > 40 {
                        return Err(format!("slot {slot}: cannot start its move: {err}").into());
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        let deadline = clock::now() + clock::nanos(Duration::from_secs(15));
        let port = target.port.to_string();
        loop {
            let keys = ops::insist(
                source.port,
                &["CLUSTER", "GETKEYSINSLOT", &s, "10"],
                INSIST_LIMIT,
            )?;
            let keys = texts(&keys);
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            // A failure (a key expired meanwhile) is asked again.
            let _ = ops::ask(source.port, &args);
            if clock::now() > deadline {
                return Err(format!("slot {slot}: keys would not migrate").into());
            }
        }
        // The target first, then the source, then everyone: the documented order.
        let assign = ["CLUSTER", "SETSLOT", &s, "NODE", &target.id];
        ops::insist(target.port, &assign, INSIST_LIMIT)?;
        ops::insist(source.port, &assign, INSIST_LIMIT)?;
        for node in view
            .iter()
            .filter(|n| n.master && n.port != target.port && n.port != source.port)
        {
            let _ = ops::ask(node.port, &assign);
        }
        Ok((slot, source.port, target.port))
    }

    /// SIGCONT to every node (a pause interrupted by the end of the run).
    pub fn resume_all(&self) {
        for node in &self.cluster.nodes {
            if let Some(pid) = node.pid() {
                let _ = crate::spawn::signal(pid, false);
            }
        }
    }
}

fn clock_since(t: Nanos) -> Duration {
    Duration::from_nanos(clock::now().saturating_sub(t))
}

fn texts(value: &redis::Value) -> Vec<String> {
    match value {
        redis::Value::Array(items) => items.iter().filter_map(text).collect(),
        _ => Vec::new(),
    }
}

/// A replica of a failed master taking over: which one, and when it was seen a master.
pub fn wait_promotion(replicas: &[u16]) -> Option<(u16, Nanos)> {
    let mut promoted = None;
    poll(FAILOVER_LIMIT, || {
        promoted = replicas
            .iter()
            .copied()
            .find(|&r| matches!(role(r), Some(Role::Master(_))));
        promoted.is_some()
    })
    .and_then(|t| promoted.map(|p| (p, t)))
}

/// Waits until the server on `port` answers as a replica; when it did (or gave up).
pub fn demoted(port: u16) -> Nanos {
    poll(FAILOVER_LIMIT, || {
        matches!(role(port), Some(Role::Replica(..)))
    })
    .unwrap_or_else(clock::now)
}

/// What each replica holds for each name, 100 ms after its master failed (what was on
/// its way has arrived by then; nothing more comes).
pub fn read_copies(replicas: &[u16], names: &[String], cluster: bool) -> Vec<ReplicaCopy> {
    std::thread::sleep(Duration::from_millis(100));
    let mut copies = Vec::new();
    for &node in replicas {
        for name in names {
            if let Ok((token, expires, fence)) = ops::read_copy(node, name, cluster) {
                copies.push(ReplicaCopy {
                    node,
                    name: name.clone(),
                    token,
                    expires,
                    fence,
                });
            }
        }
    }
    copies
}

/// A [`Failover`] record.
pub fn failover(
    kind: &str,
    old: u16,
    names: Vec<String>,
    t_start: Nanos,
    promoted: Option<(u16, Nanos)>,
    t_end: Nanos,
    copies: Vec<ReplicaCopy>,
) -> Failover {
    Failover {
        kind: kind.to_owned(),
        old,
        new: promoted.map(|(port, _)| port),
        names,
        t_start,
        t_promoted: promoted.map(|(_, t)| t),
        t_end,
        copies,
        t_whole: None,
    }
}

/// Parses `CLUSTER NODES`.
pub fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags = fields[2];
            let failed = flags.split(',').any(|f| f == "fail" || f == "noaddr");
            let master = flags.split(',').any(|f| f == "master") && !failed;
            let master_id = (fields[3] != "-").then(|| fields[3].to_owned());
            let slots = fields[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => r.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some(NodeInfo {
                id: fields[0].to_owned(),
                port,
                master,
                master_id,
                slots,
            })
        })
        .collect()
}
