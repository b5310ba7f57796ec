//! The one error type of the marketplace operations.

use lock_core::LockError;

/// What can go wrong in a marketplace operation. Business outcomes (the item is gone, the
/// buyer is short of funds) are not errors: they are [`Purchase`](crate::Purchase) and
/// [`Listing`](crate::Listing) values.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MarketError {
    /// The lock around the operation could not be had (or was lost): the body did not run,
    /// or, for [`LockError::Lost`], ran while another holder may have run beside it.
    #[error(transparent)]
    Lock(#[from] LockError),

    /// A guarded write was refused (fenced mode): a newer holder of the lock has written,
    /// or the write could not be sent.
    #[error(transparent)]
    Fenced(#[from] lock_core::fenced::FenceError),

    /// A Redis command failed.
    #[error("redis command failed: {0}")]
    Redis(#[from] redis::RedisError),

    /// Redis holds something the marketplace did not write, or a transaction found the data
    /// in a state the lock should have made impossible.
    #[error("inconsistent marketplace data: {0}")]
    Data(String),

    /// Settings that cannot work (for instance more buyers than users).
    #[error("invalid marketplace settings: {0}")]
    Config(String),
}

impl MarketError {
    /// True when a lock was busy for the whole wait: contention, not a failure.
    pub fn is_lock_contention(&self) -> bool {
        matches!(self, MarketError::Lock(err) if err.is_contention())
    }
}
