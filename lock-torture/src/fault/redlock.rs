//! Redlock's own faults: clients cut from a minority of the nodes (each client still reaches
//! a majority, but a different one), and one node slow for everybody.

use std::time::Duration;

use super::{ms_of, sleep_until_or, Injector};
use crate::clock::{self, Nanos};
use crate::mode::Mode;
use crate::BoxError;

impl Injector<'_> {
    /// One Redlock fault; nothing with a single node.
    pub(super) fn redlock_fault(&mut self, fault: Mode, until: Nanos) -> Result<bool, BoxError> {
        let n = self.rig.nodes.len();
        if n < 3 {
            return Ok(false);
        }
        match fault {
            Mode::PartitionMinority => {
                let cuts: Vec<(usize, Vec<usize>)> = self
                    .some_clients()
                    .into_iter()
                    .map(|client| {
                        let mut nodes: Vec<usize> = (0..n).collect();
                        self.rng.shuffle(&mut nodes);
                        nodes.truncate(self.rng.usize(1..=(n - 1) / 2));
                        nodes.sort_unstable();
                        (client, nodes)
                    })
                    .collect();
                let t_start = clock::now();
                for (client, nodes) in &cuts {
                    self.rig.set_blackhole_on(*client, nodes, true);
                }
                sleep_until_or(Duration::from_millis(self.rng.u64(1000..2000)), until);
                for (client, nodes) in &cuts {
                    self.rig.set_blackhole_on(*client, nodes, false);
                }
                let target = cuts
                    .iter()
                    .map(|(c, nodes)| format!("client{c}:nodes{nodes:?}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                self.fault("partition-minority", &target, t_start, clock::now())
            }
            Mode::SlowNode => {
                // Around the node timeout (a fifth of the TTL): some answers make it, some
                // do not, and the node drops in and out of the majorities.
                let node_timeout = ms_of(self.ttl) / 5;
                let latency =
                    Duration::from_millis(self.rng.u64(node_timeout / 2..=node_timeout * 2));
                let node = self.rng.usize(..n);
                let t_start = clock::now();
                self.rig.set_node_latency(node, latency);
                sleep_until_or(Duration::from_millis(self.rng.u64(500..1500)), until);
                self.rig.set_node_latency(node, Duration::ZERO);
                let target = format!("node{node}+{}ms", latency.as_millis());
                self.fault("slow-node", &target, t_start, clock::now())
            }
            _ => Ok(false),
        }
    }
}
