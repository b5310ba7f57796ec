//! Beyond the exclusive lock: counting semaphores, read-write locks and multi-locks, with
//! the lock's guarantees (leases with a TTL judged by the store's clock, renewal, a loss
//! signal, release on drop, herd-free waiting, cancellation that leaves nothing held).
//!
//! Layering: these modules sit beside the exclusive lock's request and lease, on the same
//! backends and connections; they reach the `Locker` through [`env`] only.

pub(crate) mod env;
mod guard;
mod info;
mod latch;
mod multi;
mod options;
pub(crate) mod permits;
mod rwlock;
mod semaphore;

pub use guard::GuardHandle;
pub use info::{HoldMode, PermitHolder, PermitHolders};
pub use latch::{Latch, LatchState};
pub use multi::{MultiLease, MultiRequest};
pub use rwlock::{RwLease, RwLock, RwRequest};
pub use semaphore::{Permit, PermitRequest, Semaphore, CAPACITY_PIN, MAX_PERMITS};
