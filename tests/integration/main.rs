//! Integration tests against real redis-server processes started by `lock_tests`.

mod behaviour;
mod cluster;
mod contention;
mod fencing;
mod harness;
mod redis_only;
mod redlock;
mod security;
mod sentinel;
mod stress;
mod web_guards;
