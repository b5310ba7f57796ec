use lock_core::{redis_locked, LockError};

macro_rules! key {
    () => {
        "jobs:nightly"
    };
}

#[redis_locked(key = key!())]
async fn nightly() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
