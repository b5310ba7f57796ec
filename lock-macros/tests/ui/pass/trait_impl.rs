use lock_core::{redis_locked, LockError, Locker};

trait Job {
    async fn run(&self, day: u32) -> Result<u32, LockError>;
    async fn run_mut(&mut self) -> Result<(), LockError>;
}

pub struct Nightly {
    pub locks: Locker,
    pub runs: u32,
}

impl Job for Nightly {
    #[redis_locked(key = "job:{day}", locker = self.locks)]
    async fn run(&self, day: u32) -> Result<u32, LockError> {
        Ok(day + self.runs)
    }

    #[redis_locked(key = "job:mut", locker = &self.locks)]
    async fn run_mut(&mut self) -> Result<(), LockError> {
        self.runs += 1;
        Ok(())
    }
}

/// A default method with a body works the same way.
trait Cleanup {
    fn name(&self) -> &str;

    #[redis_locked(key = "cleanup")]
    async fn cleanup(&self) -> Result<usize, LockError> {
        Ok(self.name().len())
    }
}

fn main() {}
