use lock_core::{redis_locked, LockError};

const EXPORTS: u64 = 5;

#[redis_locked(key = "exports:{tenant}", permits = EXPORTS)]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

fn main() {}
