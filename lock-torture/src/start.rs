//! Building the rig of one run: the deployment, the fenced store, the proxies, and the
//! client processes with their command lines.

use std::path::Path;
use std::time::Duration;

use lock_tests::proxy::Proxy;
use lock_tests::RedisServer;

use crate::client::ProtocolArg;
use crate::ha::cluster::ClusterHa;
use crate::ha::sentinel::SentinelHa;
use crate::ha::Ha;
use crate::mode::Mode;
use crate::primitive::Primitive;
use crate::rig::{Node, Rig};
use crate::settings::{Protocols, Settings};
use crate::spawn::Spawner;
use crate::topology::Topology;
use crate::BoxError;

/// Starts the servers of one run and prepares its clients' command lines; the clients
/// themselves start with [`Rig::start_clients`], once the run watches the servers (on a
/// replicated deployment, a lease granted before the `MONITOR` readers are attached is seen
/// granted by no server: rule `unseen-grant`).
pub fn start_rig(
    s: &Settings,
    primitive: Primitive,
    mode: Mode,
    seed: u64,
    dir: &Path,
) -> Result<Rig, BoxError> {
    let store = RedisServer::start();
    let name_count = s.names_in(mode);
    let names: Vec<String> = crate::names::list(name_count, s.name_kind);
    let (nodes, ha) = match s.topology {
        Topology::Single | Topology::Redlock => {
            let mut nodes = Vec::new();
            for _ in 0..s.nodes {
                // DEBUG (off by default since Redis 7) for the `stall` fault's DEBUG SLEEP.
                let server = RedisServer::start_debuggable();
                let proxies = (0..s.clients)
                    .map(|_| Proxy::start(server.addr()))
                    .collect::<std::io::Result<Vec<_>>>()?;
                nodes.push(Node { server, proxies });
            }
            (nodes, None)
        }
        Topology::Cluster => (Vec::new(), Some(Ha::Cluster(ClusterHa::start(&names)?))),
        Topology::Sentinel => (Vec::new(), Some(Ha::Sentinel(SentinelHa::start()?))),
    };
    // Replicas in sync before the clients start, so that the first fault can fail over.
    if let Some(ha) = &ha {
        if !ha.wait_healthy(Duration::from_secs(60)) {
            return Err("the replicated deployment did not come up whole".into());
        }
    }
    let mut common: Vec<String> = vec![
        "--store-url".into(),
        store.url(),
        "--names".into(),
        name_count.to_string(),
        "--name-kind".into(),
        s.name_kind.name().into(),
        "--ttl-ms".into(),
        s.ttl_ms.to_string(),
        "--profile".into(),
        s.profile.name().into(),
        "--sabotage-ms".into(),
        s.sabotage_ms.to_string(),
        "--replica-sync".into(),
        s.replica_sync.name().into(),
        // A safety net only (clients stop when their standard input closes): past the
        // whole run.
        "--max-seconds".into(),
        format!("{}", (s.seconds + s.settle_seconds + 300.0).ceil() as u64),
    ];
    if primitive.is_permit_set() {
        common.extend([
            "--primitive".to_owned(),
            primitive.name().to_owned(),
            "--permits".to_owned(),
            s.permits.to_string(),
        ]);
    }
    if matches!(
        primitive,
        Primitive::Multi
            | Primitive::Election
            | Primitive::Schedule
            | Primitive::Deadlock
            | Primitive::Latch
    ) {
        common.extend(["--primitive".to_owned(), primitive.name().to_owned()]);
    }
    if matches!(primitive, Primitive::Deadlock | Primitive::Latch) {
        common.extend(["--clients".to_owned(), s.clients.to_string()]);
    }
    if mode == Mode::Cancel {
        common.push("--cancel".to_owned());
    }
    if mode == Mode::ClockSkew {
        common.push("--queue-rounds".to_owned());
    }
    if mode == Mode::Steal {
        common.push("--steal-watch".to_owned());
    }
    if s.no_track_keys {
        common.push("--no-track-keys".to_owned());
    }
    if mode == Mode::Pool {
        // Many tasks on one pooled connection, with a short deadline for a checkout.
        for arg in [
            "--tasks",
            "16",
            "--pool-size",
            "1",
            "--command-timeout-ms",
            "400",
        ] {
            common.push(arg.into());
        }
    } else {
        common.push("--tasks".into());
        common.push(s.tasks.to_string());
    }
    let per_client = (0..s.clients)
        .map(|id| {
            let protocol = match s.protocol {
                _ if s.topology != Topology::Single => ProtocolArg::Scripts,
                // Key tracking, which `steal` judges, runs on scripts only.
                _ if mode == Mode::Steal => ProtocolArg::Scripts,
                // lock-core runs semaphores, read-write locks and elections on scripts only.
                _ if primitive.scripts_only() => ProtocolArg::Scripts,
                Protocols::Scripts => ProtocolArg::Scripts,
                Protocols::Transactions => ProtocolArg::Transactions,
                Protocols::Mixed if id.is_multiple_of(2) => ProtocolArg::Scripts,
                Protocols::Mixed => ProtocolArg::Transactions,
            };
            let mut args = vec![
                "--protocol".to_owned(),
                protocol.as_str().to_owned(),
                "--seed".to_owned(),
                seed.wrapping_add(u64::from(id)).to_string(),
            ];
            let offset = crate::mode::clock_offset_ms(mode, id);
            if offset != 0 {
                args.push(format!("--clock-offset-ms={offset}"));
            }
            match &ha {
                Some(ha) => args.extend(ha.client_args()),
                None => {
                    for node in &nodes {
                        args.push("--lock-url".to_owned());
                        args.push(node.proxies[id as usize].url());
                    }
                }
            }
            args
        })
        .collect();
    let spawner = Spawner {
        exe: std::env::current_exe()?,
        dir: dir.to_path_buf(),
        common,
        per_client,
        incarnations: vec![0; s.clients as usize],
    };
    Ok(Rig {
        topology: s.topology,
        nodes,
        ha,
        store,
        clients: Vec::new(),
        names: name_count,
        name_kind: s.name_kind,
        primitive,
        spawner,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::settings::RunArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn the_rig_starts_without_its_clients() {
        // The run attaches its MONITOR readers in between: clients spawned with the rig
        // took leases no server was seen granting (issue 25, `unseen-grant` at a run's
        // start: a client's first two leases, 2 ms after it started, 60 ms before the
        // readers were attached).
        let cli = Cli::parse_from(["run", "--mode", "none", "--clients", "2"]);
        let settings = Settings::resolve(&cli.run).expect("settings");
        let dir = tempfile::tempdir().expect("tempdir");
        let rig = start_rig(&settings, Primitive::Mutex, Mode::None, 1, dir.path())
            .expect("the rig starts");
        assert_eq!(rig.clients.len(), 0);
        assert_eq!(rig.spawner.per_client.len(), 2);
    }

    #[derive(Parser)]
    struct ClientCli {
        #[command(flatten)]
        client: crate::client::ClientArgs,
    }

    #[test]
    fn steal_clients_listen_run_on_scripts_and_may_have_tracking_off() {
        for (extra, tracking) in [(None, true), (Some("--no-track-keys"), false)] {
            let mut argv = vec!["run", "--mode", "steal"];
            argv.extend(extra);
            let cli = Cli::parse_from(argv);
            let settings = Settings::resolve(&cli.run).expect("settings");
            let dir = tempfile::tempdir().expect("tempdir");
            let rig = start_rig(&settings, Primitive::Mutex, Mode::Steal, 1, dir.path())
                .expect("the rig starts");
            for id in 0..4 {
                let mut args = vec!["client".to_owned(), "--id".to_owned(), id.to_string()];
                args.extend(["--log".to_owned(), "x.jsonl".to_owned()]);
                args.extend(rig.spawner.common.iter().cloned());
                args.extend(rig.spawner.per_client[id].iter().cloned());
                let client = ClientCli::parse_from(args).client;
                assert!(client.steal_watch);
                assert_eq!(client.no_track_keys, !tracking);
                assert_eq!(client.protocol, ProtocolArg::Scripts);
            }
        }
        let semaphore = Primitive::Semaphore.runs_in(Topology::Single, Mode::Steal);
        assert!(semaphore.is_err());
    }

    #[test]
    fn clock_skew_clients_get_their_offsets_one_name_and_queue_rounds() {
        let cli = Cli::parse_from(["run", "--mode", "clock-skew", "--topology", "redlock"]);
        let settings = Settings::resolve(&cli.run).expect("settings");
        let dir = tempfile::tempdir().expect("tempdir");
        let rig = start_rig(&settings, Primitive::Mutex, Mode::ClockSkew, 1, dir.path())
            .expect("the rig starts");
        assert_eq!(rig.names, 1);
        let offsets: Vec<i64> = (0..4)
            .map(|id| {
                let mut args = vec!["client".to_owned(), "--id".to_owned(), id.to_string()];
                args.extend(["--log".to_owned(), "x.jsonl".to_owned()]);
                args.extend(rig.spawner.common.iter().cloned());
                args.extend(rig.spawner.per_client[id].iter().cloned());
                let client = ClientCli::parse_from(args).client;
                assert!(client.queue_rounds);
                assert_eq!((client.names, client.lock_urls.len()), (1, 3));
                client.clock_offset_ms
            })
            .collect();
        assert_eq!(offsets, [5_000, -5_000, 0, 2_000]);
    }
}
