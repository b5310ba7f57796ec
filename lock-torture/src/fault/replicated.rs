//! Faults of the replicated deployments: a master killed, paused, or handed over to its
//! replica, and a lock's slot moved to another master and back. Each waits first until the
//! deployment is whole (every master has a replica in sync), so that a failover is possible
//! at all, and logs a [`crate::event::Failover`] beside the fault.

use std::time::Duration;

use super::{ms_of, Injector};
use crate::clock;
use crate::event::{Event, Failover};
use crate::ha::Ha;
use crate::mode::Mode;
use crate::BoxError;

/// How long the deployment may take to be whole again before a fault.
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

impl Injector<'_> {
    /// One fault of a Cluster or Sentinel master.
    pub(super) fn replicated_fault(&mut self, fault: Mode) -> Result<bool, BoxError> {
        let names = self.rig.name_list();
        let ttl_ms = ms_of(self.ttl);
        let rng = &mut self.rng;
        let Some(ha) = self.rig.ha.as_mut() else {
            return Ok(false);
        };
        // The deployment never becomes whole again after a lost master: nothing more to do.
        if let Ha::Sentinel(s) = &*ha {
            if s.is_degraded() {
                return Ok(false);
            }
        }
        if !ha.wait_healthy(RECOVERY_LIMIT) {
            return Err("the deployment did not become whole again after a fault".into());
        }
        if let (Ha::Cluster(c), Mode::Reshard) = (&mut *ha, fault) {
            // A hot name's slot there and back, a moment apart, while clients use it; each
            // move is a fault of its own (the liveness rule excuses only the migration).
            let name = &names[rng.usize(..names.len())];
            let t_start = clock::now();
            let (slot, from, to) = c.move_slot(name, None, rng)?;
            let there = (
                format!("{name} slot {slot}: {from}->{to}"),
                t_start,
                clock::now(),
            );
            std::thread::sleep(Duration::from_millis(rng.u64(0..=ttl_ms / 4)));
            let t_start = clock::now();
            c.move_slot(name, Some(from), rng)?;
            let back = (
                format!("{name} slot {slot}: {to}->{from}"),
                t_start,
                clock::now(),
            );
            for (target, t_start, t_end) in [there, back] {
                self.fault("reshard", &target, t_start, t_end)?;
            }
            return Ok(true);
        }
        let mut failover = match (&mut *ha, fault) {
            (Ha::Cluster(c), Mode::KillMaster) => {
                let (port, replicas, names) = c.pick_master(rng).ok_or("no master")?;
                c.kill_master(port, &replicas, names)?
            }
            (Ha::Cluster(c), Mode::PauseMaster) => {
                let (port, replicas, names) = c.pick_master(rng).ok_or("no master")?;
                // Half the pauses stay under the node timeout (a stall), half outlast the
                // failover.
                let long = rng
                    .bool()
                    .then(|| Duration::from_millis(rng.u64(200..1000)));
                let short = Duration::from_millis(rng.u64(300..800));
                c.pause_master(port, &replicas, names, long, short)?
            }
            (Ha::Cluster(c), Mode::Failover) => {
                let (port, replicas, names) = c.pick_master(rng).ok_or("no master")?;
                let replica = *replicas.first().ok_or("no replica")?;
                c.manual_failover(port, replica, names)
            }
            (Ha::Sentinel(s), Mode::KillMaster) => s.kill_master(names)?,
            (Ha::Sentinel(s), Mode::PauseReplica) => {
                let pause = Duration::from_millis(rng.u64(1000..2000));
                let (ports, t_start, t_end) = s.pause_replica(pause)?;
                return self.fault(
                    "pause-replica",
                    &format!("replicas {ports}"),
                    t_start,
                    t_end,
                );
            }
            (Ha::Sentinel(s), Mode::LoseMaster) => {
                // Never whole again: no waiting for it.
                let failover = s.lose_master(names)?;
                return self.log_failover(fault, failover);
            }
            (Ha::Sentinel(s), Mode::PauseMaster) => {
                s.pause_master(names, Duration::from_millis(rng.u64(200..1000)))?
            }
            _ => return Ok(false),
        };
        // How long the deployment takes to be whole again: with the replica check on, the
        // promoted master grants nothing until then (the liveness rule waits for it).
        failover.t_whole = ha.wait_synced(RECOVERY_LIMIT);
        self.log_failover(fault, failover)
    }

    fn log_failover(&mut self, fault: Mode, failover: Failover) -> Result<bool, BoxError> {
        let target = match failover.new {
            Some(new) => format!("{}->{new}", failover.old),
            None => format!("{} (no failover)", failover.old),
        };
        let (t_start, t_end) = (failover.t_start, failover.t_end);
        self.log.write(&Event::Failover(failover))?;
        self.fault(fault.name(), &target, t_start, t_end)
    }
}
