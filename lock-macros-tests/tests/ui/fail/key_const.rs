use lock_core::{redis_locked, LockError};

const KEY: &str = "jobs:nightly";

// A key is a template read while the macro expands: a constant cannot be seen then.
#[redis_locked(key = KEY)]
async fn nightly() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
