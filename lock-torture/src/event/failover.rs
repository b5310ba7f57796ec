//! A replicated deployment's failed or handed-over master, and what its replicas held then
//! ([`Event::Failover`](super::Event::Failover)).

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

/// A master that failed (killed or paused) or handed over (a coordinated failover).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failover {
    /// `kill` (SIGKILL, restarted empty afterwards), `pause` (SIGSTOP, then SIGCONT) or
    /// `manual` (a coordinated `CLUSTER FAILOVER`: the replica catches up first).
    pub kind: String,
    /// The port of the master that failed.
    pub old: u16,
    /// The port of the node promoted in its place, if one was.
    pub new: Option<u16>,
    /// The lock names whose keys that master served.
    pub names: Vec<String>,
    /// The SIGKILL, the SIGSTOP, or the failover command.
    pub t_start: Nanos,
    /// When the promoted node was first seen answering as a master.
    pub t_promoted: Option<Nanos>,
    /// When the old master was seen answering as a replica again (or the fault gave up
    /// waiting): until then it may have served clients as a master of its own.
    pub t_end: Nanos,
    /// What each replica of the old master held for each name, read right after the
    /// failure (replication had stopped): what a promoted replica starts from.
    pub copies: Vec<ReplicaCopy>,
    /// When the deployment was seen whole again afterwards: every master serving the
    /// locks with a replica in sync that acknowledges a write of it, `WAIT 1` (older
    /// harnesses asked for the replica's link alone; `None` in histories of older ones, or
    /// when it was not whole within the fault's recovery limit). With the replica acknowledgement
    /// check on, a promoted master grants nothing before that: its replica (the old master
    /// demoted, or restarted empty) needs a full resync, which Redis's default
    /// `repl-diskless-sync-delay` of 5 s postpones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_whole: Option<Nanos>,
}

/// One lock's keys on one replica, read right after its master failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaCopy {
    /// The replica's port.
    pub node: u16,
    /// Lock name.
    pub name: String,
    /// The lease token on the lock key, if the key was there.
    pub token: Option<String>,
    /// When that key was to expire (the replica's PTTL, on the shared clock).
    pub expires: Option<Nanos>,
    /// The fencing counter.
    pub fence: u64,
}
