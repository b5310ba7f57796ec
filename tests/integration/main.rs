//! Integration tests against real redis-server processes started by `lock_tests`.

mod behaviour;
mod cancelled;
mod cluster;
mod cluster_shards;
mod contention;
mod deadlock;
mod degraded;
mod election;
mod failover;
mod fast_path;
mod fencing;
mod harness;
mod hostile_names;
mod loss;
mod multi;
mod multi_release;
mod notified;
mod permit_costs;
mod prims_replicated;
mod queue;
mod redis_only;
mod redlock;
mod reentrancy;
mod rwlock;
mod schedule;
mod security;
mod semaphore;
mod sentinel;
mod stalls;
mod stopped;
mod stress;
#[cfg(feature = "tls")]
mod tls;
mod urls;
mod using;
mod web_guards;
