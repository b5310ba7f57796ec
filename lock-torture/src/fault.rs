//! The faults, and the injector that applies them to a running [`Cluster`].

use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

use crate::clock::{self, Nanos};
use crate::cluster::Cluster;
use crate::event::{Event, Log};
use crate::BoxError;

/// What to inject during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Mode {
    /// No faults: the baseline.
    None,
    /// SIGKILL a lock server and restart it empty at once (single node: mutual exclusion
    /// is not guaranteed across this; see RELIABILITY.md).
    Kill,
    /// SIGKILL a lock server and restart it empty after two TTLs (the delayed-restart
    /// rule: safety must hold).
    KillDelayed,
    /// SIGSTOP a client for two to three TTLs, then SIGCONT (a GC pause).
    Pause,
    /// Add latency (a quarter to one and a half TTL) between some clients and Redis.
    Latency,
    /// Cut every connection of a client to Redis.
    Drop,
    /// Partition some clients from Redis for one to two seconds (a blackhole).
    Partition,
    /// `SCRIPT FLUSH` on the lock servers (the NOSCRIPT path).
    ScriptFlush,
    /// `CLIENT KILL` of every client connection on a lock server.
    ClientKill,
    /// Pool size 1 and sixteen tasks per client, with bursts of latency.
    Pool,
    /// A foreign hash written on a free lock key for a while (with Redlock, half the time
    /// on one node only).
    WrongType,
    /// `DEBUG SLEEP` on a lock server (with Redlock, one node or all) for a fifth to four
    /// fifths of a TTL, again and again: renewals, extensions, releases and acquires pile up
    /// in flight and are answered together.
    Stall,
    /// SIGSTOP of a client that stands in a lock's Redis-side waiter queue (not the holder)
    /// for two to three TTLs, then SIGCONT: its turn comes while it is frozen, nobody claims
    /// it, and the queue must move on without it (and without two holders when it wakes).
    PauseWaiter,
    /// A random mix of all of the above, with delayed restarts.
    Mixed,
    /// Every mode above in turn, one run each.
    All,
}

impl Mode {
    /// Every mode that is one run (all but `All`).
    pub const RUNS: [Mode; 14] = [
        Mode::None,
        Mode::Kill,
        Mode::KillDelayed,
        Mode::Pause,
        Mode::Latency,
        Mode::Drop,
        Mode::Partition,
        Mode::ScriptFlush,
        Mode::ClientKill,
        Mode::Pool,
        Mode::WrongType,
        Mode::Stall,
        Mode::PauseWaiter,
        Mode::Mixed,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Kill => "kill",
            Mode::KillDelayed => "kill-delayed",
            Mode::Pause => "pause",
            Mode::Latency => "latency",
            Mode::Drop => "drop",
            Mode::Partition => "partition",
            Mode::ScriptFlush => "script-flush",
            Mode::ClientKill => "client-kill",
            Mode::Pool => "pool",
            Mode::WrongType => "wrong-type",
            Mode::Stall => "stall",
            Mode::PauseWaiter => "pause-waiter",
            Mode::Mixed => "mixed",
            Mode::All => "all",
        }
    }

    /// The faults `Mixed` picks from.
    const MIXED: [Mode; 10] = [
        Mode::KillDelayed,
        Mode::Pause,
        Mode::Latency,
        Mode::Drop,
        Mode::Partition,
        Mode::ScriptFlush,
        Mode::ClientKill,
        Mode::WrongType,
        Mode::Stall,
        Mode::PauseWaiter,
    ];
}

/// Applies faults of one mode until a deadline.
#[derive(Debug)]
pub struct Injector<'a> {
    /// The servers, proxies and clients.
    pub cluster: &'a mut Cluster,
    /// Where fault events go.
    pub log: &'a Log,
    /// The lease TTL the clients use.
    pub ttl: Duration,
    /// Random choices.
    pub rng: fastrand::Rng,
}

impl Injector<'_> {
    /// Injects faults of `mode` until `until`; returns how many.
    pub fn run(&mut self, mode: Mode, until: Nanos) -> Result<u64, BoxError> {
        let mut count = 0;
        while clock::now() < until {
            let fault = if mode == Mode::Mixed {
                Mode::MIXED[self.rng.usize(..Mode::MIXED.len())]
            } else {
                mode
            };
            let done = self.inject(fault, until)?;
            count += u64::from(done);
            if !done {
                // No fault in this mode (or no room left for one).
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            self.pause_between(mode);
        }
        Ok(count)
    }

    fn pause_between(&mut self, mode: Mode) {
        let ttl = ms_of(self.ttl);
        let range = if mode == Mode::Stall {
            // Stalls come back quickly, so that leases taken between two of them are caught
            // by the next: half a TTL to one and a half.
            ttl / 2..ttl * 3 / 2
        } else {
            ttl..ttl * 3
        };
        std::thread::sleep(Duration::from_millis(self.rng.u64(range)));
    }

    /// One fault; false when the mode has none.
    fn inject(&mut self, fault: Mode, until: Nanos) -> Result<bool, BoxError> {
        let ttl = self.ttl;
        match fault {
            Mode::None | Mode::Mixed | Mode::All => Ok(false),
            Mode::Kill | Mode::KillDelayed => {
                let node = self.rng.usize(..self.cluster.nodes.len());
                let t_start = clock::now();
                self.cluster.nodes[node].server.kill();
                if fault == Mode::KillDelayed {
                    // Stay down past every lease the server granted: at least one TTL.
                    std::thread::sleep(ttl * 2);
                }
                // The new process may serve clients as soon as it is spawned, before it
                // answers the orchestrator's PING: the outage ends here.
                let t_spawn = clock::now();
                self.cluster.nodes[node].server.restart();
                let t_end = clock::now();
                self.log.write(&Event::Down {
                    node: node as u32,
                    t_start,
                    t_end: t_spawn,
                    empty: true,
                })?;
                self.fault(fault.name(), &format!("node{node}"), t_start, t_end)
            }
            Mode::PauseWaiter => {
                // Stop a client that waits in a lock's queue right now; none: nothing to do.
                let Some(client) = self.queued_client() else {
                    return Ok(false);
                };
                self.freeze(client, "pause-waiter")
            }
            Mode::Pause => {
                // Stop a client that holds a lock right now, if one does: the GC pause.
                let client = self
                    .holding_client()
                    .unwrap_or_else(|| self.rng.usize(..self.cluster.clients.len()));
                self.freeze(client, "pause")
            }
            Mode::Latency | Mode::Pool => {
                let targets = if fault == Mode::Pool {
                    (0..self.cluster.clients.len()).collect()
                } else {
                    self.some_clients()
                };
                let ms = ms_of(ttl);
                let latency = if fault == Mode::Pool {
                    Duration::from_millis(ms / 2)
                } else {
                    Duration::from_millis(self.rng.u64(ms / 4..=ms * 3 / 2))
                };
                let t_start = clock::now();
                self.cluster.set_latency(&targets, latency);
                let d = Duration::from_millis(self.rng.u64(500..1000));
                sleep_until_or(d, until);
                self.cluster.set_latency(&targets, Duration::ZERO);
                let target = format!("clients{targets:?}+{}ms", latency.as_millis());
                self.fault(fault.name(), &target, t_start, clock::now())
            }
            Mode::Drop => {
                let targets = self.some_clients();
                let t = clock::now();
                self.cluster.drop_connections(&targets);
                self.fault("drop", &format!("clients{targets:?}"), t, t)
            }
            Mode::Partition => {
                let targets = self.some_clients();
                let t_start = clock::now();
                self.cluster.set_blackhole(&targets, true);
                let d = Duration::from_millis(self.rng.u64(1000..2000));
                sleep_until_or(d, until);
                self.cluster.set_blackhole(&targets, false);
                let target = format!("clients{targets:?}");
                self.fault("partition", &target, t_start, clock::now())
            }
            Mode::ScriptFlush => {
                let t = clock::now();
                for node in &self.cluster.nodes {
                    node.server.command(&["SCRIPT", "FLUSH"]);
                }
                self.fault("script-flush", "all nodes", t, t)
            }
            Mode::ClientKill => {
                let node = self.rng.usize(..self.cluster.nodes.len());
                let t = clock::now();
                let server = &self.cluster.nodes[node].server;
                server.command(&["CLIENT", "KILL", "TYPE", "normal"]);
                server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
                self.fault("client-kill", &format!("node{node}"), t, t)
            }
            Mode::Stall => {
                let n = self.cluster.nodes.len();
                let nodes: Vec<usize> = if n > 1 && self.rng.bool() {
                    (0..n).collect()
                } else {
                    vec![self.rng.usize(..n)]
                };
                let ms = ms_of(ttl);
                let d = Duration::from_millis(self.rng.u64(ms / 5..=ms * 4 / 5));
                let t_start = clock::now();
                let sleepers: Vec<_> = nodes
                    .iter()
                    .map(|&node| self.cluster.nodes[node].server.stall(d))
                    .collect();
                for sleeper in sleepers {
                    if sleeper.join().is_err() {
                        return Err(
                            "DEBUG SLEEP failed on a lock server (is DEBUG enabled?)".into()
                        );
                    }
                }
                let target = format!("nodes{nodes:?}+{}ms", d.as_millis());
                self.fault("stall", &target, t_start, clock::now())
            }
            Mode::WrongType => {
                let name = format!("torture:{}", self.rng.u32(..self.cluster.names.max(1)));
                let key = format!("lock:{{{name}}}");
                // With Redlock, half the time on one node only: the other nodes then take
                // the attempt's value, which must be taken back when the attempt fails.
                let n = self.cluster.nodes.len();
                let only = (n > 1 && self.rng.bool()).then(|| self.rng.usize(..n));
                // HSETNX creates a hash only where no key exists: a held lock is left alone.
                let created = self
                    .cluster
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| only.is_none_or(|only| only == *i))
                    .map(|(_, node)| {
                        node.server
                            .command(&["HSETNX", &key, "owner", "someone-else"])
                    })
                    .filter(|reply| reply.starts_with(":1"))
                    .count();
                if created == 0 {
                    return Ok(false);
                }
                let t_start = clock::now();
                let d = Duration::from_millis(self.rng.u64(300..800));
                sleep_until_or(d, until);
                let t_end = clock::now();
                for node in &self.cluster.nodes {
                    node.server.command(&[
                        "EVAL",
                        "if redis.call('TYPE', KEYS[1]).ok == 'hash' then return redis.call('DEL', KEYS[1]) end return 0",
                        "1",
                        &key,
                    ]);
                }
                if created == self.cluster.nodes.len() {
                    self.log.write(&Event::Foreign {
                        name: name.clone(),
                        t_start,
                        t_end,
                    })?;
                }
                let target = match only {
                    Some(node) => format!("{name}@node{node}"),
                    None => name,
                };
                self.fault("wrong-type", &target, t_start, t_end)
            }
        }
    }

    fn fault(
        &self,
        kind: &str,
        target: &str,
        t_start: Nanos,
        t_end: Nanos,
    ) -> Result<bool, BoxError> {
        self.log.write(&Event::Fault {
            kind: kind.to_owned(),
            target: target.to_owned(),
            t_start,
            t_end,
        })?;
        Ok(true)
    }

    /// A client that holds one of the locks now, read from the holder label on the key
    /// (`torture-c<id>@host:pid`).
    fn holding_client(&mut self) -> Option<usize> {
        let mut holders = Vec::new();
        for i in 0..self.cluster.names {
            let key = format!("lock:{{torture:{i}}}");
            let reply = self.cluster.nodes[0].server.command(&["GET", &key]);
            let client = reply
                .split_once(":torture-c")
                .and_then(|(_, rest)| rest.split_once('@'))
                .and_then(|(id, _)| id.parse::<usize>().ok())
                .filter(|&id| id < self.cluster.clients.len());
            holders.extend(client);
        }
        if holders.is_empty() {
            return None;
        }
        Some(holders[self.rng.usize(..holders.len())])
    }

    /// SIGSTOP of `client` for two to three TTLs, then SIGCONT, logged as fault `kind`.
    fn freeze(&mut self, client: usize, kind: &str) -> Result<bool, BoxError> {
        let Some(pid) = Pid::from_raw(self.cluster.clients[client].pid) else {
            return Ok(false);
        };
        let pause = self.ttl * 2 + Duration::from_millis(self.rng.u64(0..ms_of(self.ttl)));
        let t_start = clock::now();
        kill_process(pid, Signal::STOP)?;
        std::thread::sleep(pause);
        kill_process(pid, Signal::CONT)?;
        self.fault(kind, &format!("client{client}"), t_start, clock::now())
    }

    /// A client that stands in the waiter queue of one of the names (its entry holds its
    /// value, whose label names the client), and does not hold that lock.
    fn queued_client(&mut self) -> Option<usize> {
        let mut waiting = Vec::new();
        for i in 0..self.cluster.names {
            let key = format!("lock:{{torture:{i}}}");
            let holder = self.cluster.nodes[0].server.command(&["GET", &key]);
            let entries = self.cluster.nodes[0]
                .server
                .command(&["HVALS", &format!("{key}:qe")]);
            for entry in entries.split(":torture-c").skip(1) {
                let client = entry
                    .split_once('@')
                    .and_then(|(id, _)| id.parse::<usize>().ok())
                    .filter(|&id| id < self.cluster.clients.len());
                let holds = client.is_some_and(|id| holder.contains(&format!(":torture-c{id}@")));
                waiting.extend(client.filter(|_| !holds));
            }
        }
        if waiting.is_empty() {
            return None;
        }
        Some(waiting[self.rng.usize(..waiting.len())])
    }

    /// One client, or a minority of them.
    fn some_clients(&mut self) -> Vec<usize> {
        let n = self.cluster.clients.len();
        let count = self.rng.usize(1..=(n / 2).max(1));
        let mut all: Vec<usize> = (0..n).collect();
        self.rng.shuffle(&mut all);
        let mut picked = all[..count].to_vec();
        picked.sort_unstable();
        picked
    }
}

/// Sleeps for `d`, or until `until` if that comes first.
fn sleep_until_or(d: Duration, until: Nanos) {
    let left = until.saturating_sub(clock::now());
    std::thread::sleep(d.min(Duration::from_nanos(left)));
}

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(4)
}
