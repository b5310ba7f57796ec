//! Integration tests against real redis-server processes started by `lock_tests`.

mod behaviour;
mod cancelled;
mod cluster;
mod contention;
mod election;
mod failover;
mod fast_path;
mod fencing;
mod harness;
mod hostile_names;
mod loss;
mod multi;
mod notified;
mod outage;
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
