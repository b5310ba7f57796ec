//! A master with two replicas and three Sentinels (quorum two), and what the faults do to
//! it: the master killed (restarted empty once a replica has taken over: the Sentinels make
//! it a replica) or paused until a replica has taken over, then resumed.

use std::time::Duration;

use lock_tests::RedisServer;

use crate::clock::{self, Nanos};
use crate::event::Failover;
use crate::ha::cluster::{demoted, failover, read_copies};
use crate::ha::ops::{acknowledged, ask, int, poll, role, text, Role};
use crate::BoxError;

/// The master's name for the Sentinels.
pub const MASTER: &str = "torture";

/// A Sentinel starts no new failover of a master within twice this after the last one, so
/// it bounds how often the master can be failed over.
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(1500);

/// How long a failover may take before the fault gives up on it.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

/// The servers and the Sentinels.
#[derive(Debug)]
pub struct SentinelHa {
    /// The data servers (the first one is the master at the start).
    pub data: Vec<RedisServer>,
    /// The Sentinels.
    pub sentinels: Vec<RedisServer>,
    /// When the last failover began: the next one must wait for the Sentinels' cool-down.
    last_failover: Option<Nanos>,
    /// A master and a replica were killed for good (`lose-master`): the deployment stays
    /// a lone master.
    degraded: bool,
}

impl SentinelHa {
    /// Starts the group and waits until every Sentinel knows the two replicas and the two
    /// other Sentinels.
    pub fn start() -> Result<SentinelHa, BoxError> {
        let master = RedisServer::start();
        let replicaof = format!("replicaof 127.0.0.1 {}", master.port());
        let mut data = vec![master];
        for _ in 0..2 {
            data.push(RedisServer::start_with(&[&replicaof]));
        }
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_sentinel_with(MASTER, data[0].port(), 2, FAILOVER_TIMEOUT))
            .collect();
        let ha = SentinelHa {
            data,
            sentinels,
            last_failover: None,
            degraded: false,
        };
        let known = |s: &RedisServer, what: &str| {
            ask(s.port(), &["SENTINEL", what, MASTER])
                .ok()
                .is_some_and(|r| matches!(r, redis::Value::Array(list) if list.len() == 2))
        };
        let ready = poll(Duration::from_secs(60), || {
            ha.sentinels
                .iter()
                .all(|s| known(s, "REPLICAS") && known(s, "SENTINELS"))
        });
        if ready.is_none() {
            return Err("the Sentinels did not find each other and the replicas".into());
        }
        Ok(ha)
    }

    /// The Sentinels' URLs, for the clients.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The ports of the data servers.
    pub fn ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisServer::port).collect()
    }

    /// The master the Sentinels name now (the first that answers).
    pub fn master(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = ask(s.port(), &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]).ok()?;
            match reply {
                redis::Value::Array(items) => items.get(1).and_then(int),
                _ => None,
            }
            .and_then(|p| u16::try_from(p).ok())
        })
    }

    /// [`SentinelHa::synced`], and the Sentinels' cool-down since the last failover has
    /// passed.
    pub fn healthy(&self) -> bool {
        let cooled = self.last_failover.is_none_or(|t| {
            clock::now() > t + clock::nanos(FAILOVER_TIMEOUT * 2 + Duration::from_millis(500))
        });
        cooled && self.synced()
    }

    /// Every Sentinel names the same master, and it answers as one with both replicas in
    /// sync, one of them acknowledging its writes (see [`acknowledged`]).
    pub fn synced(&self) -> bool {
        let Some(master) = self.master() else {
            return false;
        };
        let agree = self.sentinels.iter().all(|s| {
            ask(s.port(), &["SENTINEL", "CKQUORUM", MASTER])
                .ok()
                .and_then(|r| text(&r))
                .is_some_and(|t| t.starts_with("OK"))
        });
        let in_sync = self
            .ports()
            .into_iter()
            .filter(|&p| p != master)
            .all(|p| role(p) == Some(Role::Replica(master, true)));
        agree
            && in_sync
            && matches!(role(master), Some(Role::Master(_)))
            && acknowledged(master, "torture-ready")
    }

    fn index_of(&self, port: u16) -> Option<usize> {
        self.data.iter().position(|s| s.port() == port)
    }

    /// SIGKILL of the master; once the Sentinels have promoted a replica, the old master
    /// is restarted empty (and made a replica by the Sentinels).
    pub fn kill_master(&mut self, names: Vec<String>) -> Result<Failover, BoxError> {
        let master = self.master().ok_or("no Sentinel names a master")?;
        let index = self.index_of(master).ok_or("the master is not ours")?;
        let replicas: Vec<u16> = self.ports().into_iter().filter(|&p| p != master).collect();
        let t_start = clock::now();
        self.last_failover = Some(t_start);
        self.data[index].kill();
        let copies = read_copies(&replicas, &names, false);
        let promoted = self.wait_promotion(master);
        self.data[index].restart();
        if promoted.is_none() {
            return Err(format!(
                "the Sentinels promoted no replica of {master} after it was killed"
            )
            .into());
        }
        let t_end = demoted(master);
        Ok(failover(
            "kill", master, names, t_start, promoted, t_end, copies,
        ))
    }

    /// Whether a master and a replica were lost for good.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// SIGKILL of the master and one replica at once, neither restarted: the Sentinels
    /// promote the remaining replica, which has no replica of its own.
    pub fn lose_master(&mut self, names: Vec<String>) -> Result<Failover, BoxError> {
        let master = self.master().ok_or("no Sentinel names a master")?;
        let index = self.index_of(master).ok_or("the master is not ours")?;
        let replicas: Vec<u16> = self.ports().into_iter().filter(|&p| p != master).collect();
        let lost = *replicas.first().ok_or("no replica")?;
        let lost_index = self.index_of(lost).ok_or("the replica is not ours")?;
        let t_start = clock::now();
        self.last_failover = Some(t_start);
        self.degraded = true;
        self.data[index].kill();
        self.data[lost_index].kill();
        let copies = read_copies(&replicas[1..], &names, false);
        let promoted = self.wait_promotion(master);
        if promoted.is_none() {
            return Err(format!(
                "the Sentinels promoted no replica of {master} after it and {lost} were killed"
            )
            .into());
        }
        let t_end = clock::now();
        Ok(failover(
            "lose", master, names, t_start, promoted, t_end, copies,
        ))
    }

    /// SIGSTOP of every replica for `pause`, then SIGCONT (one stopped replica of two
    /// would leave the other to acknowledge): the master keeps them connected. The ports
    /// (joined) and when they were stopped and resumed.
    pub fn pause_replica(&mut self, pause: Duration) -> Result<(String, Nanos, Nanos), BoxError> {
        let master = self.master().ok_or("no Sentinel names a master")?;
        let mut pids = Vec::new();
        let mut ports = Vec::new();
        for server in self.data.iter().filter(|s| s.port() != master) {
            pids.push(server.pid().ok_or("a replica has no process")?);
            ports.push(server.port().to_string());
        }
        let t_start = clock::now();
        for &pid in &pids {
            crate::spawn::signal(pid, true)?;
        }
        std::thread::sleep(pause);
        for &pid in &pids {
            crate::spawn::signal(pid, false)?;
        }
        Ok((ports.join(","), t_start, clock::now()))
    }

    /// SIGSTOP of the master until the Sentinels have promoted a replica, and `extra`
    /// more; then SIGCONT: the old master serves as a master until the Sentinels turn it
    /// into a replica.
    pub fn pause_master(
        &mut self,
        names: Vec<String>,
        extra: Duration,
    ) -> Result<Failover, BoxError> {
        let master = self.master().ok_or("no Sentinel names a master")?;
        let index = self.index_of(master).ok_or("the master is not ours")?;
        let pid = self.data[index].pid().ok_or("the master has no process")?;
        let replicas: Vec<u16> = self.ports().into_iter().filter(|&p| p != master).collect();
        let t_start = clock::now();
        self.last_failover = Some(t_start);
        crate::spawn::signal(pid, true)?;
        let copies = read_copies(&replicas, &names, false);
        let promoted = self.wait_promotion(master);
        std::thread::sleep(extra);
        crate::spawn::signal(pid, false)?;
        let t_end = if promoted.is_some() {
            demoted(master)
        } else {
            clock::now()
        };
        Ok(failover(
            "pause", master, names, t_start, promoted, t_end, copies,
        ))
    }

    /// The Sentinels name another master, and it answers as one.
    fn wait_promotion(&self, old: u16) -> Option<(u16, Nanos)> {
        let mut new = None;
        poll(FAILOVER_LIMIT, || {
            new = self
                .master()
                .filter(|&p| p != old && matches!(role(p), Some(Role::Master(_))));
            new.is_some()
        })
        .and_then(|t| new.map(|p| (p, t)))
    }

    /// SIGCONT to every data server.
    pub fn resume_all(&self) {
        for server in &self.data {
            if let Some(pid) = server.pid() {
                let _ = crate::spawn::signal(pid, false);
            }
        }
    }
}
