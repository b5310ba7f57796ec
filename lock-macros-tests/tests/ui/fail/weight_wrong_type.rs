use lock_core::{redis_locked, LockError};

struct Job {
    gpus: u32,
}

#[redis_locked(key = "gpus", permits = 8, weight = job.gpus)]
async fn train(job: &Job) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
