//! What `run` holds while the command runs: a lock's lease, or with `--permits N` one
//! permit of the name's semaphore. Both renew, report their loss, and release the same way.

use std::time::Duration;

use lock_core::{GuardHandle, Leadership, Lease, LeaseHandle, LockError, Permit};

pub enum Held {
    Lease(Lease),
    Permit(Permit),
    /// `lockctl elect`: the election's lock, released by resigning.
    Leadership(Leadership),
}

/// A view of what is held, for the supervisor.
#[derive(Clone)]
pub enum Watch {
    Lease(LeaseHandle),
    Permit(GuardHandle),
}

impl Held {
    /// The fencing token, for a lock taken with `--fencing`.
    pub fn fencing_token(&self) -> Option<u64> {
        match self {
            Held::Lease(lease) => lease.fencing_token(),
            Held::Permit(_) => None,
            Held::Leadership(leadership) => Some(leadership.term()),
        }
    }

    pub fn watch(&self) -> Watch {
        match self {
            Held::Lease(lease) => Watch::Lease(lease.handle()),
            Held::Permit(permit) => Watch::Permit(permit.handle()),
            Held::Leadership(leadership) => Watch::Lease(leadership.handle()),
        }
    }

    pub async fn release(self) -> Result<bool, LockError> {
        match self {
            Held::Lease(lease) => lease.release().await,
            Held::Permit(permit) => permit.release().await,
            Held::Leadership(leadership) => leadership.resign().await,
        }
    }
}

impl Watch {
    pub async fn lost(&self) {
        match self {
            Watch::Lease(lease) => lease.lost().await,
            Watch::Permit(permit) => permit.lost().await,
        }
    }

    pub async fn is_held(&self) -> Result<bool, LockError> {
        match self {
            Watch::Lease(lease) => lease.is_held().await,
            Watch::Permit(permit) => permit.is_held().await,
        }
    }

    pub fn expires_in(&self) -> Duration {
        match self {
            Watch::Lease(lease) => lease.expires_in(),
            Watch::Permit(permit) => permit.expires_in(),
        }
    }
}
