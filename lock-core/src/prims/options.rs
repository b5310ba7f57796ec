//! The settings every request of the primitives shares (`ttl`, `wait`, auto-renewal), and
//! the builder methods that set them.

use std::time::Duration;

use crate::limits::{validate_ttl, validate_wait};
use crate::prims::env::Env;
use crate::LockError;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub ttl: Option<Duration>,
    pub wait: Option<Duration>,
    /// `Some(max_hold)` to auto-renew.
    pub renew: Option<Option<Duration>>,
}

impl Options {
    /// The TTL and wait to use (the locker's defaults where unset), validated.
    pub fn resolve(&self, env: &Env, name: &str) -> Result<(Duration, Duration), LockError> {
        let ttl = self.ttl.unwrap_or_else(|| env.default_ttl());
        let wait = self.wait.unwrap_or_else(|| env.default_wait());
        validate_ttl(name, ttl)?;
        validate_wait(name, wait)?;
        Ok((ttl, wait))
    }
}

/// The `ttl`, `wait`, `auto_renew` and `max_hold` methods of a request type with an
/// `options: Options` field.
macro_rules! request_options {
    ($what:literal) => {
        /// How long the hold lives if it is not released, extended or renewed (between
        /// [`MIN_TTL`](crate::MIN_TTL) and [`MAX_TTL`](crate::MAX_TTL); default: the
        /// locker's).
        pub fn ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.options.ttl = Some(ttl);
            self
        }

        #[doc = concat!("How long to wait for ", $what, ". Zero tries once and fails with")]
        /// [`LockError::Busy`](crate::LockError::Busy); otherwise the request fails with
        /// [`LockError::Timeout`](crate::LockError::Timeout) when the time is up (default:
        /// the locker's). A waiting request stands in a FIFO queue and is told its turn.
        pub fn wait(mut self, wait: ::std::time::Duration) -> Self {
            self.options.wait = Some(wait);
            self
        }

        /// Keeps the hold alive until it is released or dropped: it is extended every
        /// third of its TTL, and marked lost at once if the store says it is no longer
        /// ours.
        pub fn auto_renew(mut self) -> Self {
            self.options.renew.get_or_insert(None);
            self
        }

        /// With auto-renewal: stop renewing this long after the acquisition, so that a hung
        /// holder cannot keep it forever.
        pub fn max_hold(mut self, max_hold: ::std::time::Duration) -> Self {
            self.options.renew = Some(Some(max_hold));
            self
        }
    };
}

pub(crate) use request_options;
