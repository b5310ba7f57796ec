//! [`Fence`]: a lock's name and the fencing token of one of its leases, what a guarded
//! write carries; [`AsFence`]: what a guarded write accepts in its place.

use std::fmt;
use std::sync::Arc;

use crate::election::Leadership;
use crate::fenced::error::FenceError;
use crate::lease::{Lease, LeaseHandle};

/// The fencing token of one lease, with the name of its lock: what a guarded write checks
/// against what the resource has seen.
///
/// Take it from a lease (`Fence::of(&lease)?`, or pass the lease itself to a store: every
/// store takes [`AsFence`]), or rebuild it with [`Fence::new`] where the token travelled
/// (a job handed to a worker with the token its scheduler drew).
///
/// ```
/// use lock_core::fenced::Fence;
/// use lock_core::Locker;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let locker = Locker::memory();
/// let lease = locker.lock("stock:17").fencing().await?;
/// let fence = Fence::of(&lease)?;
/// assert_eq!(fence.lock(), "stock:17");
/// assert_eq!(Some(fence.token()), lease.fencing_token());
///
/// // A lease taken without `.fencing()` has no token: refused before anything is sent.
/// let plain = locker.lock("stock:18").await?;
/// assert!(Fence::of(&plain).is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    lock: Arc<str>,
    token: u64,
}

impl Fence {
    /// The fence of `token`, drawn for lock `lock`.
    pub fn new(lock: impl Into<Arc<str>>, token: u64) -> Fence {
        Fence {
            lock: lock.into(),
            token,
        }
    }

    /// The fence of `lease`: [`FenceError::NotFenced`] if it was taken without
    /// [`fencing`](crate::LockRequest::fencing).
    pub fn of(lease: &impl AsFence) -> Result<Fence, FenceError> {
        lease.fence()
    }

    /// The lock's name.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fence({:?} #{})", self.lock, self.token)
    }
}

/// What a guarded write takes: a lease, its handle, a leadership (whose term is its
/// token), or a [`Fence`].
pub trait AsFence {
    /// The lock's name and the token, or [`FenceError::NotFenced`].
    fn fence(&self) -> Result<Fence, FenceError>;
}

impl AsFence for Fence {
    fn fence(&self) -> Result<Fence, FenceError> {
        Ok(self.clone())
    }
}

impl AsFence for LeaseHandle {
    fn fence(&self) -> Result<Fence, FenceError> {
        match self.fencing_token() {
            Some(token) => Ok(Fence::new(self.name(), token)),
            None => Err(FenceError::NotFenced {
                lock: self.name().to_owned(),
            }),
        }
    }
}

impl AsFence for Lease {
    fn fence(&self) -> Result<Fence, FenceError> {
        AsFence::fence(&**self)
    }
}

impl AsFence for Leadership {
    fn fence(&self) -> Result<Fence, FenceError> {
        AsFence::fence(&self.handle())
    }
}

impl<T: AsFence + ?Sized> AsFence for &T {
    fn fence(&self) -> Result<Fence, FenceError> {
        (**self).fence()
    }
}
