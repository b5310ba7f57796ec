//! Under `forbid`, no `#[allow(..)]` may appear below it: the expansion needs none
//! (its return-type hint once carried `#[allow(unreachable_code, ..)]`: E0453).
#![forbid(warnings)]
#![forbid(unreachable_code, unused_braces)]

use std::time::Duration;

use lock_core::{redis_locked, LockError};

const TTL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
    Invalid,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

/// `?` and `return` convert to the declared type.
#[redis_locked(key = "forbid:{n}")]
async fn checked(n: u64) -> Result<u64, AppError> {
    if n == 0 {
        return Err(AppError::Invalid);
    }
    let parsed: u64 = "1".parse().map_err(|_| AppError::Invalid)?;
    Ok(n + parsed)
}

#[redis_locked(key = "forbid")]
async fn one_line(n: u64) -> Result<u64, LockError> {
    Ok(n)
}

/// Durations given as expressions: typed locals, no lint.
#[redis_locked(key = "forbid:{n}", ttl = TTL, wait = Duration::from_millis(n), hold_at_least = { TTL * 2 })]
async fn durations(n: u64) -> Result<u64, LockError> {
    Ok(n)
}

fn main() {
    drop(checked(1));
    drop(one_line(1));
    drop(durations(1));
}
