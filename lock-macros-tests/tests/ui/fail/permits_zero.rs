use lock_core::{redis_locked, LockError};

#[redis_locked(key = "exports:{tenant}", permits = 0)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

fn main() {}
