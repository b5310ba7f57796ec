use lock_core::{redis_locked, LockError, Locker};

trait Job {
    async fn run(&self, day: u32) -> Result<u32, LockError>;
    async fn run_mut(&mut self) -> Result<(), LockError>;
}

struct Nightly {
    locks: Locker,
    runs: u32,
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

struct Janitor;

impl Cleanup for Janitor {
    fn name(&self) -> &str {
        "janitor"
    }
}

fn main() {
    let mut nightly = Nightly {
        locks: Locker::memory(),
        runs: 0,
    };
    drop(nightly.run(1));
    drop(nightly.run_mut());
    drop(Janitor.cleanup());
}
