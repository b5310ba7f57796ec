//! What a run starts: the lock servers with a proxy per client in front of each, the fenced
//! store, and the client processes; and the few things done to all of them at once (faults
//! through the proxies, healing, stopping the clients).
//!
//! Kept apart from [`crate::run`] (which builds and tears down a cluster) so that the fault
//! injector can act on a cluster without depending on the orchestrator.

use std::process::{Child, ChildStdin};
use std::time::Duration;

use lock_tests::proxy::Proxy;
use lock_tests::RedisServer;
use rustix::process::{kill_process, Pid, Signal};

use crate::clock;
use crate::resource::PROGRESS_KEY;

/// One lock server, and one proxy per client in front of it.
#[derive(Debug)]
pub struct Node {
    /// The server (killed and restarted by the `kill` faults).
    pub server: RedisServer,
    /// `proxies[c]` carries client `c`'s traffic to this server.
    pub proxies: Vec<Proxy>,
}

/// A running client process.
#[derive(Debug)]
pub struct ClientProc {
    /// Its process.
    pub child: Child,
    /// Its pid, for SIGSTOP/SIGCONT.
    pub pid: i32,
    /// Closing it stops the client.
    pub stdin: Option<ChildStdin>,
}

/// Everything a run starts.
#[derive(Debug)]
pub struct Cluster {
    /// The lock servers.
    pub nodes: Vec<Node>,
    /// The fenced store (never faulted).
    pub store: RedisServer,
    /// The clients.
    pub clients: Vec<ClientProc>,
    /// How many lock names the clients use.
    pub names: u32,
}

impl Cluster {
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

    /// Undoes every lasting fault: no latency, no partition, no stopped client.
    pub fn heal(&self) {
        let all: Vec<usize> = (0..self.clients.len()).collect();
        self.set_latency(&all, Duration::ZERO);
        self.set_blackhole(&all, false);
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

    /// Stops every client: closes its standard input, waits, and kills stragglers.
    pub fn stop_clients(&mut self) {
        self.heal();
        for client in &mut self.clients {
            client.stdin = None;
        }
        let deadline = clock::now() + clock::nanos(Duration::from_secs(15));
        for client in &mut self.clients {
            loop {
                match client.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if clock::now() > deadline => {
                        let _ = client.child.kill();
                        let _ = client.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

impl Drop for Cluster {
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
