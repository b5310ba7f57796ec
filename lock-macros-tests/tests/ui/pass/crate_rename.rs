// Simulates `renamed = { package = "lock-core", .. }` in Cargo.toml.
extern crate lock_core as renamed;

use renamed::{redis_locked, LockError, Locker};

#[redis_locked(key = "renamed:{id}", ttl = "1s", crate = "renamed")]
async fn default_locker(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

mod nested {
    #[::renamed::redis_locked(key = "renamed", locker = locker, crate = "::renamed")]
    pub async fn explicit(locker: &::renamed::Locker) -> Result<(), ::renamed::LockError> {
        Ok(())
    }
}

fn main() {
    drop(default_locker(1));
    drop(nested::explicit(&Locker::memory()));
}
