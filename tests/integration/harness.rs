//! One constructor per backend, so every behavioural check runs against each of them.

use std::time::Duration;

use lock_core::{Locker, Protocol, ScriptMode};
use lock_tests::RedisServer;

/// Config lines that take every scripting command away from a server, to prove the
/// WATCH/MULTI backend never needs them.
pub const NO_SCRIPTING: &[&str] = &[
    "rename-command EVAL \"\"",
    "rename-command EVALSHA \"\"",
    "rename-command EVAL_RO \"\"",
    "rename-command EVALSHA_RO \"\"",
    "rename-command SCRIPT \"\"",
    "rename-command FUNCTION \"\"",
    "rename-command FCALL \"\"",
    "rename-command FCALL_RO \"\"",
];

/// A locker and, for the Redis backends, the server it talks to.
pub struct Harness {
    pub locker: Locker,
    pub server: Option<RedisServer>,
    pub protocol: Option<Protocol>,
    /// Redlock's nodes.
    pub nodes: Vec<RedisServer>,
}

impl Harness {
    pub fn scripts() -> Harness {
        let server = RedisServer::start();
        Harness::on(server, Protocol::Scripts)
    }

    /// Lua scripts loaded as a Redis Functions library and called with FCALL.
    pub fn functions() -> Harness {
        let server = RedisServer::start();
        Harness {
            locker: Harness::functions_locker(&server),
            server: Some(server),
            protocol: None,
            nodes: Vec::new(),
        }
    }

    pub fn functions_locker(server: &RedisServer) -> Locker {
        Locker::builder()
            .url(server.url())
            .script_mode(ScriptMode::Functions)
            .app_name("lock-tests")
            .build()
            .expect("locker")
    }

    pub fn transactions() -> Harness {
        let server = RedisServer::start_with(NO_SCRIPTING);
        Harness::on(server, Protocol::Transactions)
    }

    pub fn memory() -> Harness {
        Harness {
            locker: Locker::builder()
                .memory()
                .app_name("lock-tests")
                .build()
                .expect("memory locker"),
            server: None,
            protocol: None,
            nodes: Vec::new(),
        }
    }

    /// Redlock over three private servers.
    pub fn redlock() -> Harness {
        Harness::redlock_of(3)
    }

    pub fn redlock_of(n: usize) -> Harness {
        Harness::redlock_on((0..n).map(|_| RedisServer::start()).collect())
    }

    /// Redlock over `n` servers that accept `DEBUG` (for stalls).
    pub fn redlock_debuggable(n: usize) -> Harness {
        Harness::redlock_on((0..n).map(|_| RedisServer::start_debuggable()).collect())
    }

    fn redlock_on(nodes: Vec<RedisServer>) -> Harness {
        Harness {
            locker: Harness::redlock_locker(&nodes),
            server: None,
            protocol: None,
            nodes,
        }
    }

    pub fn redlock_locker(nodes: &[RedisServer]) -> Locker {
        // A generous per-node deadline: tests run on loaded machines; the deadline itself is
        // exercised by `a_slow_node_costs_at_most_the_node_timeout`.
        Locker::builder()
            .redlock(nodes.iter().map(RedisServer::url))
            .node_timeout(Duration::from_millis(500))
            .app_name("lock-tests")
            .build()
            .expect("redlock locker")
    }

    fn on(server: RedisServer, protocol: Protocol) -> Harness {
        Harness {
            locker: Harness::locker_for(&server, protocol),
            server: Some(server),
            protocol: Some(protocol),
            nodes: Vec::new(),
        }
    }

    pub fn locker_for(server: &RedisServer, protocol: Protocol) -> Locker {
        Locker::builder()
            .url(server.url())
            .protocol(protocol)
            .app_name("lock-tests")
            .build()
            .expect("locker")
    }

    /// Another locker on the same store, as a second process would have.
    /// Whether [`Harness::second_locker`] is this harness's own locker (in memory): its
    /// requests then see the first one's leases as this Locker's.
    pub fn shares_locker(&self) -> bool {
        self.server.is_none() && self.nodes.is_empty()
    }

    pub fn second_locker(&self) -> Locker {
        match (&self.server, self.protocol) {
            (Some(server), Some(protocol)) => Harness::locker_for(server, protocol),
            _ if !self.nodes.is_empty() => Harness::redlock_locker(&self.nodes),
            (Some(server), None) => Harness::functions_locker(server),
            _ => self.locker.clone(),
        }
    }
}
