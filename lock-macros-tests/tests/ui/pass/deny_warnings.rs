#![deny(warnings)]
#![deny(clippy::all)]
#![warn(clippy::pedantic)]
#![deny(rust_2018_idioms, unused_qualifications, unused_results)]

use lock_core::{redis_locked, LockError, Locker};

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

/// Early returns, `?`, a mutable parameter, an unused-looking key parameter.
///
/// # Errors
/// When the lock is busy or the input invalid.
#[redis_locked(key = "strict:{id}:{label}", ttl = "1s", wait = "0s")]
pub async fn strict(id: u64, mut count: u32, label: &str) -> Result<u32, AppError> {
    if count == 0 {
        return Err(AppError::Invalid);
    }
    count += 1;
    let parsed: u32 = "1".parse().map_err(|_| AppError::Invalid)?;
    Ok(count + parsed)
}

/// Items in the body stay at the top of their block.
///
/// # Errors
/// When the lock cannot be had.
#[redis_locked(key = "items", locker = locker)]
pub async fn with_items(locker: &Locker) -> Result<u32, LockError> {
    fn helper() -> u32 {
        1
    }
    Ok(helper())
}

/// A body without `.await` is fine: the expansion awaits the lock.
///
/// # Errors
/// When the lock cannot be had.
#[redis_locked(key = "sync-body")]
pub async fn sync_body() -> Result<(), LockError> {
    Ok(())
}

/// Inner attributes of the body still apply to the whole function.
///
/// # Errors
/// When the lock cannot be had.
#[redis_locked(key = "inner:{unused}")]
pub async fn inner_attribute(unused: u8) -> Result<(), LockError> {
    #![allow(clippy::needless_return)]
    return Ok(());
}

/// A weighted permit, by literal and by a parameter.
///
/// # Errors
/// When the permits cannot be had.
#[redis_locked(key = "gpus:{pool}", permits = 8, weight = 2)]
pub async fn weighted(pool: u8) -> Result<u8, LockError> {
    Ok(pool)
}

/// # Errors
/// When the permits cannot be had.
#[redis_locked(key = "gpus", permits = 8, weight = u64::from(gpus), wait = "1s")]
pub async fn weighted_by(gpus: u8) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    drop(weighted(1));
    drop(weighted_by(2));
    drop(inner_attribute(1));
    drop(strict(1, 1, "x"));
    drop(with_items(&Locker::memory()));
    drop(sync_body());
}
