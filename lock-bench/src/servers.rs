//! Private redis-servers for the run, stopped on drop.

use lock_tests::{RedisCluster, RedisServer};

/// Private redis-servers, stopped on drop.
pub struct Servers {
    pub all: Vec<RedisServer>,
}

/// A private 3-master Redis Cluster for S4; its servers stop on drop.
pub fn start_cluster() -> Result<RedisCluster, String> {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(|| RedisCluster::start(3, 0));
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
