//! `#[redis_locked]` above `#[tokio::test]`: it runs first, and the test attribute wraps the
//! locked `async fn` (the order the error for the other order asks for).
#![deny(warnings)]

use lock_core::redis_locked;

#[redis_locked(key = "test", locker = lock_core::Locker::memory())]
#[tokio::test]
async fn locked_test() -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
