//! What a task holds, whichever primitive it took: a lock's lease, a semaphore permit, or
//! a read-write lock's side. They share their surface (validity, loss signal, extension,
//! release); only the lock draws fencing tokens.

use std::time::{Duration, Instant};

use lock_core::{Lease, LockError, MultiLease, Permit, RwLease};

use crate::clock::{self, Nanos};
use crate::event::HoldKind;

/// A held lease of any primitive.
#[derive(Debug)]
pub(super) enum Guard {
    /// A lock.
    Lock(Lease),
    /// A semaphore permit.
    Permit(Permit),
    /// A read-write lock's read or write side.
    Rw(RwLease),
    /// Several locks taken together (`Locker::lock_all`).
    Multi(MultiLease),
}

impl Guard {
    /// What it holds.
    pub(super) fn kind(&self) -> HoldKind {
        match self {
            Guard::Lock(_) | Guard::Multi(_) => HoldKind::Lock,
            Guard::Permit(_) => HoldKind::Permit,
            Guard::Rw(lease) if lease.mode() == lock_core::HoldMode::Write => HoldKind::Write,
            Guard::Rw(_) => HoldKind::Read,
        }
    }

    /// The lease token.
    pub(super) fn token(&self) -> &str {
        match self {
            Guard::Lock(lease) => lease.token(),
            Guard::Permit(permit) => permit.token(),
            Guard::Rw(lease) => lease.token(),
            Guard::Multi(lease) => lease.token(),
        }
    }

    /// The start of the attempt that succeeded.
    pub(super) fn acquired_at(&self) -> Instant {
        match self {
            Guard::Lock(lease) => lease.acquired_at(),
            Guard::Permit(permit) => permit.acquired_at(),
            Guard::Rw(lease) => lease.acquired_at(),
            Guard::Multi(lease) => lease.acquired_at(),
        }
    }

    /// The fencing token (a lock asked for one; the others have none).
    pub(super) fn fencing_token(&self) -> Option<u64> {
        match self {
            Guard::Lock(lease) => lease.fencing_token(),
            Guard::Permit(_) | Guard::Rw(_) | Guard::Multi(_) => None,
        }
    }

    /// When its validity ends, on the run's clock: [`valid_until`](super::valid_until) of
    /// what the library reports.
    pub(super) fn valid_until(&self) -> Nanos {
        clock::stamp_ahead(|| self.expires_in())
    }

    /// Validity left, by the local clock.
    pub(super) fn expires_in(&self) -> Duration {
        match self {
            Guard::Lock(lease) => lease.expires_in(),
            Guard::Permit(permit) => permit.expires_in(),
            Guard::Rw(lease) => lease.expires_in(),
            Guard::Multi(lease) => lease.expires_in(),
        }
    }

    /// The library's cheap local look.
    pub(super) fn is_lost(&self) -> bool {
        match self {
            Guard::Lock(lease) => lease.is_lost(),
            Guard::Permit(permit) => permit.is_lost(),
            Guard::Rw(lease) => lease.is_lost(),
            Guard::Multi(lease) => lease.is_lost(),
        }
    }

    /// Completes when the lease is lost.
    pub(super) async fn lost(&self) {
        match self {
            Guard::Lock(lease) => lease.lost().await,
            Guard::Permit(permit) => permit.lost().await,
            Guard::Rw(lease) => lease.lost().await,
            Guard::Multi(lease) => lease.lost().await,
        }
    }

    /// Resets its TTL.
    pub(super) async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        match self {
            Guard::Lock(lease) => lease.extend(ttl).await,
            Guard::Permit(permit) => permit.extend(ttl).await,
            Guard::Rw(lease) => lease.extend(ttl).await,
            Guard::Multi(lease) => lease.extend(ttl).await,
        }
    }

    /// Steps a read-write lock's write lease down to a read lease; the other leases are
    /// left as they are.
    pub(super) async fn downgrade(&mut self) -> Result<(), LockError> {
        match self {
            Guard::Rw(lease) => lease.downgrade().await,
            Guard::Lock(_) | Guard::Permit(_) | Guard::Multi(_) => Ok(()),
        }
    }

    /// Gives it back.
    pub(super) async fn release(self) -> Result<bool, LockError> {
        match self {
            Guard::Lock(lease) => lease.release().await,
            Guard::Permit(permit) => permit.release().await,
            Guard::Rw(lease) => lease.release().await,
            Guard::Multi(lease) => lease.release().await,
        }
    }
}

impl Guard {
    /// A multi-lock's names (their keys' order); `None` for the other primitives.
    pub(super) fn set(&self) -> Option<Vec<String>> {
        match self {
            Guard::Multi(lease) => Some(lease.names().to_vec()),
            _ => None,
        }
    }
}
