//! Private redis-servers for the run, stopped on drop.

use lock_tests::{RedisCluster, RedisServer};

/// Private redis-servers, stopped on drop.
pub struct Servers {
    pub all: Vec<RedisServer>,
}

/// A private 3-master Redis Cluster with a replica per master for S4 (its replicas online,
/// so that the replica acknowledgement check is on from the first lock); its servers stop
/// on drop.
pub fn start_cluster() -> Result<RedisCluster, String> {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(|| {
        let cluster = RedisCluster::start(3, 1);
        for node in &cluster.nodes {
            until_settled(node);
        }
        cluster
    });
    std::panic::set_hook(previous_hook);
    started.map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown error".into());
        format!("cannot start a Redis Cluster: {message}")
    })
}

/// Starts `count` servers; `RedisServer::start` panics when it cannot, so its message is
/// caught and returned.
pub fn start_servers(count: usize) -> Result<Servers, String> {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(|| (0..count).map(|_| RedisServer::start()).collect());
    std::panic::set_hook(previous_hook);
    match started {
        Ok(all) => Ok(Servers { all }),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "unknown error".into());
            Err(format!("cannot start redis-server: {message}"))
        }
    }
}

/// A master, its replica (online) and a Sentinel naming it `bench`, for S4; the URL of the
/// Sentinel. The servers stop on drop.
pub fn start_sentinel() -> Result<(Servers, String), String> {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(|| {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
        until_settled(&master);
        let sentinel = RedisServer::start_sentinel("bench", master.port());
        let url = sentinel.url();
        (
            Servers {
                all: vec![master, replica, sentinel],
            },
            url,
        )
    });
    std::panic::set_hook(previous_hook);
    started.map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown error".into());
        format!("cannot start a Sentinel deployment: {message}")
    })
}

/// Waits (up to 30 s) until a master has an online replica (Redis 7 delays a replica's
/// first sync by 5 s); a replica returns at once.
fn until_settled(node: &RedisServer) {
    let started = std::time::Instant::now();
    loop {
        let info = node.command(&["INFO", "replication"]);
        if !info.contains("role:master") || info.contains("state=online") {
            return;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "the replicas came online: {info}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
