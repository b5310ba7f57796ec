//! `ttl`, `wait` and `hold_at_least` take a `Duration` expression as well as a string: a
//! constant, a call, a `macro_rules!` value, a block, a parameter's field.
#![deny(warnings)]
// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(clippy::drop_non_drop)]

use std::time::Duration;

use lock_core::{redis_locked, LockError};

const TTL: Duration = Duration::from_secs(30);

macro_rules! ttl {
    () => {
        Duration::from_millis(1500)
    };
}

struct Job {
    lease: Duration,
}

#[redis_locked(key = "jobs:hourly", ttl = TTL)]
async fn by_const() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "jobs:{id}", ttl = Duration::from_secs(10), wait = Duration::ZERO)]
async fn by_call(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[redis_locked(key = "jobs:daily", ttl = ttl!(), wait = { TTL / 10 })]
async fn by_macro_and_block() -> Result<(), LockError> {
    Ok(())
}

// Evaluated in the function's scope before the body runs: parameters may be used, even
// ones the body then moves.
#[redis_locked(key = "jobs:{name}", ttl = job.lease, wait = "1s")]
async fn by_parameter(job: Job, name: String) -> Result<String, LockError> {
    drop(job);
    Ok(name)
}

#[redis_locked(key = "jobs:digest", hold_at_least = TTL * 2, ttl = "2m")]
async fn scheduled() -> Result<(), LockError> {
    Ok(())
}

// Through `macro_rules!` as `$x:expr`: an expression stays one, a literal is read as before.
macro_rules! locked {
    ($name:ident, $ttl:expr) => {
        #[redis_locked(key = "jobs:macro", ttl = $ttl)]
        async fn $name() -> Result<(), LockError> {
            Ok(())
        }
    };
}

locked!(by_macro_expr, Duration::from_secs(5));
locked!(by_macro_literal, "5s");

// With `permits`, `mode` and `keys` as well.
#[redis_locked(key = "exports", permits = 3, ttl = TTL)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(keys = ["a", "b"], ttl = TTL, wait = Duration::from_millis(100))]
async fn both() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    drop(by_const());
    drop(by_call(1));
    drop(by_macro_and_block());
    drop(by_parameter(Job { lease: TTL }, "a".to_owned()));
    drop(scheduled());
    drop(by_macro_expr());
    drop(by_macro_literal());
    drop(export());
    drop(both());
}
