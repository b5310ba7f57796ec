//! Countdown latches for synchronous code: a blocking wrapper of [`crate::Latch`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::prims::LatchState;
use crate::LockError;

/// A countdown latch for synchronous code (see [`crate::Latch`] for its rules): armed with
/// a count, counted down by any number of threads and processes, waited on by many. Made by
/// [`blocking::Locker::latch`](super::Locker::latch); cheap to clone.
///
/// ```
/// use lock_core::blocking::Locker;
/// use std::time::Duration;
///
/// # fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory()?;
/// let done = locker.latch("batch:done");
/// done.arm(3, Duration::from_secs(60))?;
/// let workers: Vec<_> = (0..3)
///     .map(|_| {
///         let done = done.clone();
///         std::thread::spawn(move || done.count_down())
///     })
///     .collect();
/// done.wait(Duration::from_secs(10))?; // returns once all three counted down
/// for worker in workers {
///     worker.join().expect("thread")?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Latch {
    shared: Arc<Shared>,
    latch: crate::Latch,
}

impl Latch {
    pub(super) fn new(shared: Arc<Shared>, latch: crate::Latch) -> Latch {
        Latch { shared, latch }
    }

    /// The latch's name.
    pub fn name(&self) -> &str {
        self.latch.name()
    }

    /// Arms a new round (see [`crate::Latch::arm`]); returns its id.
    pub fn arm(&self, count: u64, ttl: Duration) -> Result<u64, LockError> {
        self.shared
            .block_on("Latch::arm", self.latch.arm(count, ttl))?
    }

    /// Counts the current round down by one; returns what is left.
    pub fn count_down(&self) -> Result<u64, LockError> {
        self.shared
            .block_on("Latch::count_down", self.latch.count_down())?
    }

    /// Counts the current round down by `n`; returns what is left.
    pub fn count_down_by(&self, n: u64) -> Result<u64, LockError> {
        self.shared
            .block_on("Latch::count_down_by", self.latch.count_down_by(n))?
    }

    /// Blocks up to `timeout` for the current round to open (see [`crate::Latch::wait`]).
    pub fn wait(&self, timeout: Duration) -> Result<(), LockError> {
        self.shared
            .block_on("Latch::wait", self.latch.wait(timeout))?
    }

    /// The current round, or `None` with no latch.
    pub fn state(&self) -> Result<Option<LatchState>, LockError> {
        self.shared.block_on("Latch::state", self.latch.state())?
    }

    /// The async latch this one wraps.
    pub fn as_async(&self) -> &crate::Latch {
        &self.latch
    }
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Latch").field(&self.latch).finish()
    }
}
