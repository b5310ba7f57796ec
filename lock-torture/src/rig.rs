//! What a run starts: the lock servers (with a proxy per client in front of each) or a
//! replicated deployment, the fenced store, and the client processes; and the few things
//! done to all of them at once (faults through the proxies, healing, stopping the clients).
//!
//! Kept apart from [`crate::run`] (which builds and tears down a rig) so that the fault
//! injector can act on a rig without depending on the orchestrator.

use std::time::Duration;

use lock_tests::proxy::Proxy;
use lock_tests::RedisServer;
use rustix::process::{kill_process, Pid, Signal};

use crate::clock;
use crate::ha::{ops, Ha};
use crate::primitive::Primitive;
use crate::resource::PROGRESS_KEY;
use crate::spawn::{ClientProc, Spawner};
use crate::topology::Topology;
use crate::BoxError;

/// One lock server, and one proxy per client in front of it.
#[derive(Debug)]
pub struct Node {
    /// The server (killed and restarted by the `kill` faults).
    pub server: RedisServer,
    /// `proxies[c]` carries client `c`'s traffic to this server.
    pub proxies: Vec<Proxy>,
}

/// Everything a run starts.
#[derive(Debug)]
pub struct Rig {
    /// The deployment.
    pub topology: Topology,
    /// The proxied lock servers (one server, or Redlock's nodes; none for Cluster and
    /// Sentinel).
    pub nodes: Vec<Node>,
    /// The replicated deployment (Cluster, Sentinel).
    pub ha: Option<Ha>,
    /// The fenced store (never faulted).
    pub store: RedisServer,
    /// The clients, by slot.
    pub clients: Vec<ClientProc>,
    /// How many lock names the clients use.
    pub names: u32,
    /// Which names (plain, or hostile to key layouts).
    pub name_kind: crate::names::NameKind,
    /// What the clients take on those names (a lock, a semaphore's permits, a read-write
    /// lock's sides): which keys the faults look at.
    pub primitive: Primitive,
    /// Starts replacements for killed clients.
    pub spawner: Spawner,
}

impl Rig {
    /// The lock names.
    pub fn name_list(&self) -> Vec<String> {
        crate::names::list(self.names, self.name_kind)
    }

    /// The `index`-th lock name.
    pub fn name(&self, index: u32) -> String {
        crate::names::name(index, self.name_kind)
    }

    /// The port of the server that holds `name`'s lock now (the first node for Redlock).
    pub fn server_of(&self, name: &str) -> Option<u16> {
        match &self.ha {
            Some(ha) => ha.master_of(name),
            None => self.nodes.first().map(|n| n.server.port()),
        }
    }

    /// Sends one command to the server that holds `name`'s lock; empty text on any failure.
    pub fn ask_about(&self, name: &str, args: &[&str]) -> Vec<String> {
        let Some(port) = self.server_of(name) else {
            return Vec::new();
        };
        match ops::ask(port, args) {
            Ok(redis::Value::Array(items)) => items.iter().filter_map(ops::text).collect(),
            Ok(other) => ops::text(&other).into_iter().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Starts a client process in every slot ([`crate::start::start_rig`] prepared their
    /// command lines). A run watching its servers does so first.
    pub fn start_clients(&mut self) -> Result<(), BoxError> {
        for id in self.clients.len()..self.spawner.per_client.len() {
            let child = self.spawner.spawn(id)?;
            self.clients.push(child);
        }
        Ok(())
    }

    /// SIGKILL of the client in slot `client`, and a new process in its place.
    pub fn replace_client(&mut self, client: usize) -> Result<(), BoxError> {
        let Some(old) = self.clients.get_mut(client) else {
            return Ok(());
        };
        let _ = old.child.kill();
        let _ = old.child.wait();
        let new = self.spawner.spawn(client)?;
        self.clients[client] = new;
        Ok(())
    }

    /// Sets the added latency on the proxies of every client in front of `node`.
    pub fn set_node_latency(&self, node: usize, latency: Duration) {
        if let Some(node) = self.nodes.get(node) {
            for proxy in &node.proxies {
                proxy.set_latency(latency);
            }
        }
    }

    /// Partitions (or heals) `client` from the nodes `nodes` only.
    pub fn set_blackhole_on(&self, client: usize, nodes: &[usize], on: bool) {
        for &n in nodes {
            if let Some(proxy) = self.nodes.get(n).and_then(|node| node.proxies.get(client)) {
                proxy.set_blackhole(on);
            }
        }
    }

    /// Sets the added latency on the proxies of `clients`, on every node.
    pub fn set_latency(&self, clients: &[usize], latency: Duration) {
        for node in &self.nodes {
            for &c in clients {
                node.proxies[c].set_latency(latency);
            }
        }
    }

    /// Partitions (or heals) `clients` from every node.
    pub fn set_blackhole(&self, clients: &[usize], on: bool) {
        for node in &self.nodes {
            for &c in clients {
                node.proxies[c].set_blackhole(on);
            }
        }
    }

    /// Cuts every connection of `clients`.
    pub fn drop_connections(&self, clients: &[usize]) {
        for node in &self.nodes {
            for &c in clients {
                node.proxies[c].drop_connections();
            }
        }
    }

    /// Undoes every lasting fault: no latency, no partition, no stopped client or server.
    pub fn heal(&self) {
        let all: Vec<usize> = (0..self.clients.len()).collect();
        self.set_latency(&all, Duration::ZERO);
        self.set_blackhole(&all, false);
        if let Some(ha) = &self.ha {
            ha.resume_all();
        }
        for client in &self.clients {
            if let Some(pid) = Pid::from_raw(client.pid) {
                let _ = kill_process(pid, Signal::CONT);
            }
        }
    }

    /// Acquisitions counted so far by the clients (in the fenced store).
    pub fn progress(&self) -> u64 {
        let reply = self.store.command(&["GET", PROGRESS_KEY]);
        // A bulk reply: `$<len>\r\n<number>\r\n`, or `$-1` before the first acquisition.
        reply
            .lines()
            .nth(1)
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Stops every client: closes its standard input, waits, and kills stragglers. Returns
    /// the clients that had exited with a failure on their own (a panic, an error), as
    /// `(slot, exit status)`: their history ends early, so a run with any fails.
    pub fn stop_clients(&mut self) -> Vec<(usize, String)> {
        self.heal();
        for client in &mut self.clients {
            client.stdin = None;
        }
        let deadline = clock::now() + clock::nanos(Duration::from_secs(15));
        let mut crashed = Vec::new();
        for (slot, client) in self.clients.iter_mut().enumerate() {
            loop {
                match client.child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            crashed.push((slot, status.to_string()));
                        }
                        break;
                    }
                    Err(_) => break,
                    Ok(None) if clock::now() > deadline => {
                        let _ = client.child.kill();
                        let _ = client.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        crashed
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for client in &mut self.clients {
            if let Some(pid) = Pid::from_raw(client.pid) {
                let _ = kill_process(pid, Signal::CONT);
            }
            client.stdin = None;
            if let Ok(None) = client.child.try_wait() {
                let _ = client.child.kill();
            }
            let _ = client.child.wait();
        }
    }
}
