//! A body on one line, as the README writes them: the expansion must not warn
//! (`unused_braces` once did, and `cargo fix` then broke the code).
#![deny(warnings)]
// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(clippy::needless_return)]

use lock_core::{redis_locked, LockError, Locker};

#[redis_locked(key = "catalog")]
async fn single(n: u64) -> Result<u64, LockError> {
    Ok(n)
}

#[redis_locked(key = "catalog:{n}", permits = 2)]
async fn limited(n: u64) -> Result<u64, LockError> {
    Ok(n)
}

#[redis_locked(key = "catalog", locker = locker)]
async fn unit(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "catalog")]
async fn early(n: u64) -> Result<u64, LockError> {
    return Ok(n);
}

fn main() {
    drop(single(1));
    drop(limited(1));
    drop(unit(&Locker::memory()));
    drop(early(1));
}
