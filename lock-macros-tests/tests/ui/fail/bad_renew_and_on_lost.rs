use lock_core::{redis_locked, LockError};

#[redis_locked(key = "jobs:{id}", renew = "no", on_lost = "abort")]
async fn run_job(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
