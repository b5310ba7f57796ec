//! The server check of one `Locker`: whether its Redis could evict lock keys.
//!
//! When the loss watch's connection opens ([`crate::engine::watch`]), it reads
//! `maxmemory-policy` and `maxmemory`; a server that could evict lock keys is reported once
//! per new finding (a warning and a metric) or, with [`EvictionCheck::Refuse`], makes
//! acquisitions fail with `Misconfigured`. This file holds what was found and what follows
//! from it; the watch opens the connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::connection::watcher::Eviction;
use crate::eviction::{risk, EvictionCheck};
use crate::LockError;

/// What the check found, and whether it was started.
pub(crate) struct ServerCheck {
    mode: EvictionCheck,
    finding: Mutex<Finding>,
    /// `Warn`: an acquisition started the check (in the background).
    started: AtomicBool,
}

/// What the server check found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    Unknown,
    Safe,
    /// Why locks are at risk (the warning's text).
    Risky(String),
}

impl ServerCheck {
    pub fn new(mode: EvictionCheck) -> ServerCheck {
        ServerCheck {
            mode,
            finding: Mutex::new(Finding::Unknown),
            started: AtomicBool::new(false),
        }
    }

    pub fn mode(&self) -> EvictionCheck {
        self.mode
    }

    fn finding(&self) -> MutexGuard<'_, Finding> {
        self.finding.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True for the first caller since the check was last [`unstarted`](Self::unstarted):
    /// that one starts it.
    pub fn start(&self) -> bool {
        // Read before it is written: a write on every acquisition would move this cache
        // line between the threads that acquire.
        !self.started.load(Ordering::Relaxed) && !self.started.swap(true, Ordering::AcqRel)
    }

    /// The check did not run after all (no runtime, or its task dropped with its runtime):
    /// the next acquisition starts it.
    pub fn unstarted(&self) {
        self.started.store(false, Ordering::Release);
    }

    /// Nothing is known yet: the server did not answer so far.
    pub fn unknown(&self) -> bool {
        *self.finding() == Finding::Unknown
    }

    /// `Misconfigured` if the server could evict locks (with `Refuse`: the caller asks).
    pub fn verdict(&self, name: &str) -> Result<(), LockError> {
        match &*self.finding() {
            Finding::Risky(reason) => Err(LockError::Misconfigured {
                name: name.to_owned(),
                reason: format!(
                    "{reason} (refused because the Locker was built with \
                     EvictionCheck::Refuse)"
                ),
                source: None,
            }),
            // Unknown: the server did not answer; the attempt reports that itself, and
            // the next acquisition checks again.
            Finding::Safe | Finding::Unknown => Ok(()),
        }
    }

    /// What the watch connection read as it opened; warns once per new finding.
    pub fn read(&self, eviction: Result<Eviction, String>) {
        if self.mode == EvictionCheck::Off {
            return;
        }
        let finding = match eviction {
            Ok(eviction) if eviction.may_evict_locks() => {
                Finding::Risky(risk(&eviction.policy, eviction.maxmemory))
            }
            Ok(_) => Finding::Safe,
            Err(reason) => Finding::Risky(format!(
                "could not read the server's eviction policy ({reason}): make sure \
                 maxmemory-policy is noeviction or maxmemory is 0"
            )),
        };
        let mut known = self.finding();
        if *known == finding {
            return;
        }
        crate::metrics::eviction_risk(matches!(finding, Finding::Risky(_)));
        if let Finding::Risky(reason) = &finding {
            tracing::warn!("{reason}");
        }
        *known = finding;
    }
}
