//! Replicated deployments: a Redis Cluster, or a master with replicas under Sentinel.
//! Clients connect to their servers directly (both hand out the servers' own addresses, so
//! the per-client proxies cannot sit in between); the faults act on the servers.

pub mod cluster;
pub mod monitor;
pub mod ops;
pub mod sentinel;

use std::time::Duration;

use crate::ha::cluster::ClusterHa;
use crate::ha::ops::poll;
use crate::ha::sentinel::SentinelHa;

/// A running replicated deployment.
#[derive(Debug)]
pub enum Ha {
    /// Three masters with a replica each.
    Cluster(ClusterHa),
    /// A master, two replicas, three Sentinels.
    Sentinel(SentinelHa),
}

impl Ha {
    /// What a client is told about where its locks live.
    pub fn client_args(&self) -> Vec<String> {
        let (flag, urls) = match self {
            Ha::Cluster(c) => (vec!["--cluster".to_owned()], c.cluster.urls()),
            Ha::Sentinel(s) => (
                vec!["--sentinel-master".to_owned(), sentinel::MASTER.to_owned()],
                s.urls(),
            ),
        };
        let mut args = flag;
        for url in urls {
            args.push("--lock-url".to_owned());
            args.push(url);
        }
        args
    }

    /// The data servers' ports.
    pub fn ports(&self) -> Vec<u16> {
        match self {
            Ha::Cluster(c) => c.ports(),
            Ha::Sentinel(s) => s.ports(),
        }
    }

    /// Every server of the deployment (a Cluster's nodes; Sentinel's data servers, then
    /// the Sentinels).
    pub fn servers(&self) -> Vec<&lock_tests::RedisServer> {
        match self {
            Ha::Cluster(c) => c.cluster.nodes.iter().collect(),
            Ha::Sentinel(s) => s.data.iter().chain(&s.sentinels).collect(),
        }
    }

    /// The port of the master that serves `name` now.
    pub fn master_of(&self, name: &str) -> Option<u16> {
        match self {
            Ha::Cluster(c) => c.master_of(name),
            Ha::Sentinel(s) => s.master(),
        }
    }

    /// Whether the deployment is whole again (see each kind's `healthy`).
    pub fn healthy(&self) -> bool {
        match self {
            Ha::Cluster(c) => c.healthy(),
            Ha::Sentinel(s) => s.healthy(),
        }
    }

    /// Waits until [`Ha::healthy`], up to `limit`.
    pub fn wait_healthy(&self, limit: Duration) -> bool {
        poll(limit, || self.healthy()).is_some()
    }

    /// Waits until every master serving the locks has a replica in sync (a Cluster:
    /// [`Ha::healthy`]; Sentinel: the same without the Sentinels' cool-down), up to
    /// `limit`; when it was first seen so. With the replica check on, a promoted master
    /// grants nothing before.
    pub fn wait_synced(&self, limit: Duration) -> Option<crate::clock::Nanos> {
        match self {
            Ha::Cluster(c) => poll(limit, || c.healthy()),
            Ha::Sentinel(s) => poll(limit, || s.synced()),
        }
    }

    /// SIGCONT to every data server.
    pub fn resume_all(&self) {
        match self {
            Ha::Cluster(c) => c.resume_all(),
            Ha::Sentinel(s) => s.resume_all(),
        }
    }
}
