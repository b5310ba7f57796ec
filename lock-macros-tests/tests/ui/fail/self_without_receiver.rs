use lock_core::{redis_locked, LockError};

#[redis_locked(key = "account:{self.id}")]
async fn balance(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
