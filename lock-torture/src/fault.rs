//! The injector: applies the faults of a mode ([`Mode`]) to a running [`Rig`] until a
//! deadline, and logs each one with the shared clock.
//!
//! The faults themselves live by what they act on: [`server`] (the proxied lock servers),
//! [`clients`] (client processes: GC pauses, waiters stopped or killed), [`redlock`]
//! (partial partitions, a slow node) and [`replicated`] (Cluster and Sentinel masters).

mod clients;
mod redlock;
mod replicated;
mod server;

use std::time::Duration;

use crate::clock::{self, Nanos};
use crate::event::{Event, Log};
use crate::mode::Mode;
use crate::rig::Rig;
pub use crate::spawn::signal;
use crate::BoxError;

/// Applies faults of one mode until a deadline.
#[derive(Debug)]
pub struct Injector<'a> {
    /// The servers, proxies and clients.
    pub rig: &'a mut Rig,
    /// Where fault events go.
    pub log: &'a Log,
    /// The lease TTL the clients use.
    pub ttl: Duration,
    /// Random choices.
    pub rng: fastrand::Rng,
}

impl Injector<'_> {
    /// Injects faults of `mode` until `until`; returns how many.
    pub fn run(&mut self, mode: Mode, until: Nanos) -> Result<u64, BoxError> {
        let mut count = 0;
        let mixed = self.rig.topology.mixed();
        while clock::now() < until {
            let fault = if mode == Mode::Mixed {
                mixed[self.rng.usize(..mixed.len())]
            } else {
                mode
            };
            let done = self.inject(fault, until)?;
            count += u64::from(done);
            if !done {
                // No fault in this mode (or no room left for one).
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            self.pause_between(mode);
        }
        Ok(count)
    }

    fn pause_between(&mut self, mode: Mode) {
        let ttl = ms_of(self.ttl);
        let range = if mode == Mode::Stall || mode == Mode::Steal {
            // Stalls come back quickly, so that leases taken between two of them are caught
            // by the next: half a TTL to one and a half. Steals too: a held lease is robbed
            // two or three times a second.
            ttl / 2..ttl * 3 / 2
        } else {
            ttl..ttl * 3
        };
        std::thread::sleep(Duration::from_millis(self.rng.u64(range)));
    }

    /// One fault; false when there was nothing to do (no fault in this mode, or no client
    /// in the state the fault needs right now).
    fn inject(&mut self, fault: Mode, until: Nanos) -> Result<bool, BoxError> {
        match fault {
            // Cancellation and clock offsets are the clients' own doing (`client --cancel`,
            // `--clock-offset-ms`).
            Mode::None | Mode::Cancel | Mode::ClockSkew | Mode::Mixed | Mode::All => Ok(false),
            Mode::Pause
            | Mode::PauseWaiter
            | Mode::KillWaiter
            | Mode::KillWokenHead
            | Mode::KillCounter => self.client_fault(fault),
            Mode::PartitionMinority | Mode::SlowNode => self.redlock_fault(fault, until),
            Mode::KillMaster
            | Mode::Failover
            | Mode::Reshard
            | Mode::PauseMaster
            | Mode::PauseReplica
            | Mode::LoseMaster => self.replicated_fault(fault),
            Mode::Kill
            | Mode::KillDelayed
            | Mode::Latency
            | Mode::Drop
            | Mode::Partition
            | Mode::ScriptFlush
            | Mode::ClientKill
            | Mode::Pool
            | Mode::WrongType
            | Mode::Stall
            | Mode::Steal => self.server_fault(fault, until),
        }
    }

    /// Logs a fault; always true (it happened).
    fn fault(
        &self,
        kind: &str,
        target: &str,
        t_start: Nanos,
        t_end: Nanos,
    ) -> Result<bool, BoxError> {
        self.log.write(&Event::Fault {
            kind: kind.to_owned(),
            target: target.to_owned(),
            t_start,
            t_end,
        })?;
        Ok(true)
    }

    /// One client, or a minority of them.
    fn some_clients(&mut self) -> Vec<usize> {
        let n = self.rig.clients.len();
        let count = self.rng.usize(1..=(n / 2).max(1));
        let mut all: Vec<usize> = (0..n).collect();
        self.rng.shuffle(&mut all);
        let mut picked = all[..count].to_vec();
        picked.sort_unstable();
        picked
    }
}

/// Sleeps for `d`, or until `until` if that comes first.
fn sleep_until_or(d: Duration, until: Nanos) {
    let left = until.saturating_sub(clock::now());
    std::thread::sleep(d.min(Duration::from_nanos(left)));
}

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(4)
}
