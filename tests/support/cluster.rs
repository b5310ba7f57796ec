//! A private Redis Cluster: N masters (and optional replicas), each a [`RedisServer`] with
//! `cluster-enabled yes`, joined with `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// How long a new cluster may take to agree on its slots.
const FORMING_LIMIT: Duration = Duration::from_secs(30);

/// A running cluster; its servers stop when it is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// Every server, masters first (as `redis-cli --cluster create` assigns them).
    pub nodes: Vec<RedisServer>,
    /// Each node's TLS port, for a cluster started with TLS; empty otherwise.
    pub tls_ports: Vec<u16>,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_configured(masters, replicas, |base| {
            let config: Vec<&str> = base.iter().map(String::as_str).collect();
            (RedisServer::start_with(&config), None)
        })
    }

    /// Starts a cluster whose nodes also speak TLS (clients, replication and the cluster
    /// bus) with `files`' server certificate; each node's plain port stays open for the
    /// test's set-up commands. The cluster announces the TLS ports to TLS clients.
    #[cfg(feature = "tls")]
    pub fn start_tls(masters: usize, replicas: usize, files: &crate::TlsFiles) -> RedisCluster {
        RedisCluster::start_configured(masters, replicas, |base| {
            // The bus port is the TLS port's + 10000: both chosen afresh on every try.
            let (server, port) =
                RedisServer::launch_with_port(false, crate::free_port_with_bus, |port| {
                    let mut config = base.to_vec();
                    config.extend(files.server_config(port, false));
                    config.push("tls-cluster yes".to_owned());
                    config
                });
            (server, Some(port))
        })
    }

    /// Starts the nodes with `start_node` (given the Cluster's config lines; it returns the
    /// node and its TLS port, if any), then joins them.
    fn start_configured(
        masters: usize,
        replicas: usize,
        mut start_node: impl FnMut(&[String]) -> (RedisServer, Option<u16>),
    ) -> RedisCluster {
        let base: Vec<String> = [
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            "cluster-node-timeout 1000",
            "cluster-replica-validity-factor 0",
        ]
        .map(str::to_owned)
        .to_vec();
        let mut tls_ports = Vec::new();
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                let (node, tls_port) = start_node(&base);
                tls_ports.extend(tls_port);
                node
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .arg("--cluster-replicas")
            .arg(replicas.to_string())
            .arg("--cluster-yes");
        let output = create.output().unwrap_or_else(|err| {
            panic!("cannot run redis-cli (install redis-tools / redis-server): {err}")
        });
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes, tls_ports };
        cluster.wait_until_ok();
        cluster
    }

    /// Starts a cluster of one master that serves every slot (`redis-cli --cluster create`
    /// wants three): keys of any slot meet on one node, so only Redis's own cross-slot
    /// checks stand between a request and a CROSSSLOT error.
    pub fn start_one_node() -> RedisCluster {
        let node = RedisServer::start_with(&[
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            "cluster-node-timeout 1000",
        ]);
        let reply = node.command(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        assert!(
            reply.contains("OK"),
            "CLUSTER ADDSLOTSRANGE answered {reply:?}"
        );
        let cluster = RedisCluster {
            nodes: vec![node],
            tls_ports: Vec::new(),
        };
        cluster.wait_until_ok();
        cluster
    }

    /// Seed URLs, one per node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `rediss://` seed URLs, one per node, for a cluster started with TLS.
    pub fn tls_urls(&self) -> Vec<String> {
        self.tls_ports
            .iter()
            .map(|port| format!("rediss://127.0.0.1:{port}/"))
            .collect()
    }

    /// Waits until every running node reports `cluster_state:ok`.
    pub fn wait_until_ok(&self) {
        let started = Instant::now();
        loop {
            let all_ok = self.nodes.iter().all(|node| {
                node.command(&["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            });
            if all_ok {
                return;
            }
            assert!(
                started.elapsed() < FORMING_LIMIT,
                "the cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the node that is master of `key`'s slot now.
    pub fn master_of(&self, key: &str) -> usize {
        let slot = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = slot
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT answered {slot:?}"));
        for (index, node) in self.nodes.iter().enumerate() {
            let nodes = node.command(&["CLUSTER", "NODES"]);
            for line in nodes.lines() {
                let fields: Vec<&str> = line.split(' ').collect();
                if fields.len() < 9
                    || !fields[2].contains("myself")
                    || !fields[2].contains("master")
                {
                    continue;
                }
                let owns = fields[8..].iter().any(|range| match range.split_once('-') {
                    Some((a, b)) => {
                        a.parse::<u16>().is_ok_and(|a| a <= slot)
                            && b.parse::<u16>().is_ok_and(|b| slot <= b)
                    }
                    None => range.parse::<u16>() == Ok(slot),
                });
                if owns {
                    return index;
                }
            }
        }
        panic!("no master owns slot {slot}");
    }

    /// The node id (CLUSTER MYID) of node `index`.
    pub fn node_id(&self, index: usize) -> String {
        let reply = self.nodes[index].command(&["CLUSTER", "MYID"]);
        reply
            .lines()
            .nth(1)
            .unwrap_or_else(|| panic!("CLUSTER MYID answered {reply:?}"))
            .to_owned()
    }

    /// Moves `slots` hash slots from node `from` to node `to` with `redis-cli --cluster
    /// reshard`, keys included (MIGRATE), while clients keep running.
    pub fn reshard(&self, from: usize, to: usize, slots: usize) {
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("reshard")
            .arg(format!("127.0.0.1:{}", self.nodes[from].port()))
            .arg("--cluster-from")
            .arg(self.node_id(from))
            .arg("--cluster-to")
            .arg(self.node_id(to))
            .arg("--cluster-slots")
            .arg(slots.to_string())
            .arg("--cluster-yes")
            .output()
            .unwrap_or_else(|err| panic!("cannot run redis-cli: {err}"));
        assert!(
            output.status.success(),
            "reshard failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]);
        reply
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT answered {reply:?}"))
    }

    /// Starts moving `key`'s slot to master `to` as a reshard does: IMPORTING on `to`,
    /// MIGRATING on the slot's master. Until [`RedisCluster::finish_slot_move`], a
    /// multi-key command on the slot whose keys are partly missing gets TRYAGAIN.
    pub fn start_slot_move(&self, key: &str, to: usize) -> SlotMove {
        let slot = self.slot_of(key);
        let from = self.master_of(key);
        assert_ne!(from, to, "the slot is on master {to} already");
        let s = slot.to_string();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let reply = self.nodes[to].command(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
        assert!(reply.contains("OK"), "SETSLOT IMPORTING answered {reply:?}");
        let reply = self.nodes[from].command(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
        assert!(reply.contains("OK"), "SETSLOT MIGRATING answered {reply:?}");
        SlotMove { slot, from, to }
    }

    /// Ends a slot's move: its keys MIGRATEd (ten at a time, as `redis-cli --cluster
    /// reshard` does), then the slot assigned to the new master on it, on the old one and
    /// on every other node.
    pub fn finish_slot_move(&self, moving: &SlotMove) {
        let s = moving.slot.to_string();
        let port = self.nodes[moving.to].port().to_string();
        loop {
            let reply = self.nodes[moving.from].command(&["CLUSTER", "GETKEYSINSLOT", &s, "10"]);
            let keys = bulk_strings(&reply);
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let reply = self.nodes[moving.from].command(&args);
            assert!(
                reply.starts_with('+'),
                "MIGRATE answered {reply:?} (keys {keys:?})"
            );
        }
        let to_id = self.node_id(moving.to);
        let order = [moving.to, moving.from]
            .into_iter()
            .chain((0..self.nodes.len()).filter(|&i| i != moving.to && i != moving.from));
        for index in order {
            let reply = self.nodes[index].command(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
            assert!(reply.contains("OK"), "SETSLOT NODE answered {reply:?}");
        }
    }

    /// Moves `key`'s slot to master `to`, keys included (see [`RedisCluster::start_slot_move`]).
    pub fn move_slot(&self, key: &str, to: usize) {
        let moving = self.start_slot_move(key, to);
        self.finish_slot_move(&moving);
    }

    /// The sum over every node of a `CLUSTER INFO` counter (such as
    /// `cluster_stats_messages_publish_sent`: the PUBLISH messages sent over the bus).
    pub fn bus_counter(&self, field: &str) -> u64 {
        self.nodes
            .iter()
            .map(|node| {
                let info = node.command(&["CLUSTER", "INFO"]);
                info.lines()
                    .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

/// A slot on its way from one master to another (indexes into [`RedisCluster::nodes`]).
#[derive(Debug, Clone, Copy)]
pub struct SlotMove {
    /// The slot.
    pub slot: u16,
    /// Its master before the move.
    pub from: usize,
    /// Its master after the move.
    pub to: usize,
}

/// The bulk strings of a raw RESP reply (an array of them, or one).
pub fn bulk_strings(reply: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = reply.split("\r\n");
    while let Some(line) = lines.next() {
        if line.starts_with('$') && line != "$-1" {
            if let Some(value) = lines.next() {
                out.push(value.to_owned());
            }
        }
    }
    out
}
