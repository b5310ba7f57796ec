use lock_core::{redis_locked, LockError};

#[redis_locked(keys = ["a:{x}", "b:{y}"], permits = 2, mode = "write")]
async fn both(x: u64, y: u64) -> Result<u64, LockError> {
    Ok(x + y)
}

fn main() {}
