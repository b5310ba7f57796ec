//! Test support: private `redis-server` processes on free loopback ports.
//!
//! Each [`RedisServer`] runs in its own temporary directory with persistence off, answers
//! `PING` before [`RedisServer::start`] returns, and is killed and reaped when dropped. Tests
//! may start as many as they need (Redlock tests use several).
//!
//! ```no_run
//! let server = lock_tests::RedisServer::start();
//! let url = server.url(); // redis://127.0.0.1:<port>/
//! # drop(url);
//! ```

pub mod cluster;
pub mod discover;
pub mod postgres;
pub mod proxy;
#[cfg(feature = "tls")]
pub mod tls;

pub use cluster::RedisCluster;
#[cfg(feature = "tls")]
pub use tls::{TlsFiles, TlsServer};

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING.
const STARTUP_LIMIT: Duration = Duration::from_secs(10);

/// The hint printed when `redis-server` is not on the PATH.
pub const INSTALL_HINT: &str = "redis-server was not found on PATH; install it \
     (Debian/Ubuntu: `sudo apt-get install -y redis-server`, macOS: `brew install redis`) \
     or set REDIS_SERVER_BIN to its path";

/// A private redis-server, stopped on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra_config: Vec<String>,
    /// Sentinel mode: the base config is the Sentinel's, and `--sentinel` is passed.
    sentinel: bool,
    /// The `redis-server` to run.
    binary: String,
}

/// Why a server did not start.
#[derive(Debug)]
pub enum StartError {
    /// There is no `redis-server` to run ([`INSTALL_HINT`] says what to do).
    NotInstalled,
    /// It ran but did not come up: its log, or why it could not run.
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotInstalled => f.write_str(INSTALL_HINT),
            StartError::Failed(log) => write!(f, "redis-server did not start:\n{log}"),
        }
    }
}

impl std::error::Error for StartError {}

impl RedisServer {
    /// Starts a server with persistence off. Panics with [`INSTALL_HINT`] when redis-server
    /// is missing, and with the server's log when it does not come up.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra config lines (e.g. `"rename-command EVAL \"\""`).
    pub fn start_with(extra_config: &[&str]) -> RedisServer {
        let config = extra_config.iter().map(|s| (*s).to_owned()).collect();
        RedisServer::launch(config, false)
    }

    /// Starts a server that accepts `DEBUG` (off by default since Redis 7), for tests that
    /// stall it with [`RedisServer::stall`].
    pub fn start_debuggable() -> RedisServer {
        RedisServer::start_with(&["enable-debug-command yes"])
    }

    /// Stalls the server for `duration` with `DEBUG SLEEP` (it answers nothing meanwhile;
    /// commands sent to it queue up), from a thread of its own. Returns once the server has
    /// received the command; join the handle to wait for the stall to end. The server must
    /// come from [`RedisServer::start_debuggable`]: the thread panics if DEBUG is refused.
    pub fn stall(&self, duration: Duration) -> std::thread::JoinHandle<()> {
        let addr = self.addr();
        let seconds = format!("{:.3}", duration.as_secs_f64());
        let (sent, was_sent) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                .unwrap_or_else(|err| panic!("cannot connect to stall {addr}: {err}"));
            stream
                .set_read_timeout(Some(duration + Duration::from_secs(10)))
                .expect("read timeout");
            let request = format!(
                "*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${}\r\n{seconds}\r\n",
                seconds.len()
            );
            stream
                .write_all(request.as_bytes())
                .expect("send DEBUG SLEEP");
            let _ = sent.send(());
            let mut reply = [0u8; 256];
            let n = stream.read(&mut reply).expect("DEBUG SLEEP reply");
            let reply = String::from_utf8_lossy(&reply[..n]);
            assert!(reply.starts_with("+OK"), "DEBUG SLEEP refused: {reply}");
        });
        let _ = was_sent.recv();
        // The command is on the wire; give the server a moment to start sleeping on it.
        std::thread::sleep(Duration::from_millis(20));
        handle
    }

    /// Starts a Redis Sentinel watching the master at `master_port` under the name `master`,
    /// quick to act (down after 1 s) so failover tests stay short.
    pub fn start_sentinel(master: &str, master_port: u16) -> RedisServer {
        RedisServer::start_sentinel_with(master, master_port, 1, Duration::from_secs(3))
    }

    /// Starts a Redis Sentinel like [`RedisServer::start_sentinel`], that needs `quorum`
    /// Sentinels to agree that the master is down (for groups of several Sentinels), with
    /// the given failover timeout (a Sentinel starts no new failover of the same master
    /// within twice that time).
    pub fn start_sentinel_with(
        master: &str,
        master_port: u16,
        quorum: u32,
        failover_timeout: Duration,
    ) -> RedisServer {
        let config = sentinel_config_with(master, master_port, quorum, failover_timeout);
        RedisServer::launch(config, true)
    }

    /// Starts `binary` (a `redis-server`) with persistence off, without panicking: for
    /// programs that start a server when they find none ([`discover`]).
    pub fn try_start_binary(binary: &str) -> Result<RedisServer, StartError> {
        RedisServer::try_launch(Vec::new(), false, binary.to_owned())
    }

    /// Starts a server whose config names a second port of its own (a TLS port): `config`
    /// gives the extra lines for a port chosen afresh on every try, so that a port taken
    /// meanwhile costs a try rather than the start (the tries of [`RedisServer::launch`]
    /// change only the plain port). Returns the server and that port.
    #[cfg(any(feature = "tls", test))]
    pub(crate) fn launch_with_port(
        sentinel: bool,
        pick: fn() -> u16,
        config: impl Fn(u16) -> Vec<String>,
    ) -> (RedisServer, u16) {
        let binary = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let mut last = String::new();
        for _ in 0..5 {
            let port = pick();
            match RedisServer::try_launch(config(port), sentinel, binary.clone()) {
                Ok(server) => return (server, port),
                Err(StartError::NotInstalled) => panic!("{INSTALL_HINT}"),
                Err(StartError::Failed(log)) => last = log,
            }
        }
        panic!("redis-server did not start:\n{last}")
    }

    pub(crate) fn launch(extra_config: Vec<String>, sentinel: bool) -> RedisServer {
        let binary = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        RedisServer::try_launch(extra_config, sentinel, binary).unwrap_or_else(|err| match err {
            StartError::NotInstalled => panic!("{INSTALL_HINT}"),
            StartError::Failed(log) => panic!("redis-server did not start:\n{log}"),
        })
    }

    fn try_launch(
        extra_config: Vec<String>,
        sentinel: bool,
        binary: String,
    ) -> Result<RedisServer, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-redis-")
            .tempdir()
            .map_err(|err| {
                StartError::Failed(format!("cannot create a temp dir for redis-server: {err}"))
            })?;
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            extra_config,
            sentinel,
            binary,
        };
        server.spawn_on_free_port()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id while it runs (for SIGSTOP/SIGCONT in fault tests); `None`
    /// after [`RedisServer::kill`].
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `sig` (`-STOP`, `-CONT`) to the server's process with kill(1): a stalled
    /// process, a paused VM, and its resumption.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("the server runs").to_string();
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {pid}");
    }

    /// On a Sentinel: waits (up to 30 s) until it lists the replica on `replica_port` among
    /// the replicas of `master` (it learns them from the master's INFO within seconds).
    pub fn until_sentinel_lists_replica(&self, master: &str, replica_port: u16) {
        let started = std::time::Instant::now();
        while !self
            .command(&["SENTINEL", "REPLICAS", master])
            .contains(&replica_port.to_string())
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the sentinel found the replica"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Kills the server with SIGKILL (a crash: nothing is flushed) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty (persistence is off).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_on_port(self.port).unwrap_or_else(|err| {
            panic!("redis-server did not restart on port {}: {err}", self.port)
        });
    }

    /// Sends one command in RESP and returns the raw reply text (for test set-up: SET, HSET,
    /// CONFIG, DEBUG ...).
    pub fn command(&self, args: &[&str]) -> String {
        send_command(self.addr(), args)
            .unwrap_or_else(|err| panic!("command {args:?} to port {} failed: {err}", self.port))
    }

    /// Waits (up to 10 s) until at least `lockers` connections have key tracking on: each
    /// Locker's watch connection, opened in the background at its first acquisition, has
    /// then sent its set-up (`HELLO`, `CLIENT TRACKING`, `CONFIG GET`), so that a test
    /// counting a cycle's Redis calls afterwards does not count that set-up too.
    pub async fn until_watching(&self, lockers: usize) {
        let watching = || {
            self.command(&["CLIENT", "LIST"])
                .lines()
                .filter(|line| {
                    line.split(' ')
                        .find_map(|field| field.strip_prefix("flags="))
                        .is_some_and(|flags| flags.contains('t'))
                })
                .count()
        };
        for _ in 0..1000 {
            if watching() >= lockers {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!(
            "{} of {lockers} Lockers' watch connections opened on port {} within 10 s",
            watching(),
            self.port
        );
    }

    fn spawn_on_free_port(&mut self) -> Result<(), StartError> {
        // A port found free can be taken by someone else before redis binds it; try again.
        let mut last = StartError::Failed(String::new());
        for _ in 0..5 {
            let port = free_port();
            match self.spawn_on_port(port) {
                Ok(()) => return Ok(()),
                Err(StartError::NotInstalled) => return Err(StartError::NotInstalled),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    fn spawn_on_port(&mut self, port: u16) -> Result<(), StartError> {
        let config = self.write_config(port);
        let binary = self.binary.clone();
        let mut command = Command::new(&binary);
        command.arg(&config);
        if self.sentinel {
            command.arg("--sentinel");
        }
        let child = command
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(StartError::NotInstalled)
            }
            Err(err) => return Err(StartError::Failed(format!("cannot run {binary}: {err}"))),
        };
        self.child = Some(child);
        self.port = port;
        let started = Instant::now();
        while started.elapsed() < STARTUP_LIMIT {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_status)) = child.try_wait() {
                    self.child = None;
                    return Err(StartError::Failed(self.log()));
                }
            }
            // A server with `requirepass` answers NOAUTH: it is up all the same.
            if send_command(self.addr(), &["PING"])
                .is_ok_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill();
        Err(StartError::Failed(self.log()))
    }

    fn write_config(&self, port: u16) -> PathBuf {
        let path = self.dir.path().join("redis.conf");
        let persistence = if self.sentinel {
            "" // a Sentinel rejects data-server settings
        } else {
            "save \"\"\nappendonly no\n"
        };
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\n{persistence}daemonize no\n\
             protected-mode no\nlogfile {}\ndir {}\n",
            self.log_path().display(),
            self.dir.path().display()
        );
        for line in &self.extra_config {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&path, text)
            .unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
        path
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_else(|_| "(no log)".into())
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Sentinel's config: watch `master` at `master_port`, quick to act.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) fn sentinel_config(master: &str, master_port: u16) -> Vec<String> {
    sentinel_config_with(master, master_port, 1, Duration::from_secs(3))
}

/// A Sentinel's configuration: `quorum` Sentinels must agree that the master is down; a
/// master silent for a second is; `failover_timeout` as given.
fn sentinel_config_with(
    master: &str,
    master_port: u16,
    quorum: u32,
    failover_timeout: Duration,
) -> Vec<String> {
    vec![
        format!("sentinel monitor {master} 127.0.0.1 {master_port} {quorum}"),
        format!("sentinel down-after-milliseconds {master} 1000"),
        format!(
            "sentinel failover-timeout {master} {}",
            failover_timeout.as_millis()
        ),
        format!("sentinel parallel-syncs {master} 1"),
    ]
}

/// A free port whose Cluster bus port (10000 above it) is free too: the TLS port of a
/// Cluster node with `tls-cluster yes`, whose bus port follows it.
pub fn free_port_with_bus() -> u16 {
    for _ in 0..100 {
        let port = free_port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok() {
            return port;
        }
    }
    panic!("no free port with a free port 10000 above it in 100 tries")
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|err| panic!("cannot find a free port: {err}"))
}

/// Sends one RESP command on a fresh connection and reads one reply (enough for simple and
/// bulk replies; set-up commands need nothing more).
fn send_command(addr: SocketAddr, args: &[&str]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if reply_complete(&reply) {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

fn reply_complete(reply: &[u8]) -> bool {
    let text = String::from_utf8_lossy(reply);
    let Some(first_line_end) = text.find("\r\n") else {
        return false;
    };
    if let Some(len) = text.strip_prefix('$') {
        let len: i64 = len[..first_line_end - 1].parse().unwrap_or(-1);
        return len < 0 || text.len() >= first_line_end + 2 + len as usize + 2;
    }
    true
}

/// The workspace README's examples, compiled as written (`cargo test -p lock-tests --doc`):
/// the README is not part of a published crate, so this unpublished one tests it.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;

/// The guide pages under `docs/guide/` (linked from the README), compiled the same way: their
/// `rust` blocks are doctests, and a page without code costs nothing.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../docs/guide/api.md")]
    struct Api;
    #[doc = include_str!("../../docs/guide/primitives.md")]
    struct Primitives;
    #[doc = include_str!("../../docs/guide/deadlocks.md")]
    struct Deadlocks;
    #[doc = include_str!("../../docs/guide/elections-and-schedules.md")]
    struct ElectionsAndSchedules;
    #[doc = include_str!("../../docs/guide/web.md")]
    struct Web;
    #[doc = include_str!("../../docs/guide/lockctl.md")]
    struct Lockctl;
    #[doc = include_str!("../../docs/guide/deployments.md")]
    struct Deployments;
    #[doc = include_str!("../../docs/guide/guarantees.md")]
    struct Guarantees;
    #[doc = include_str!("../../docs/guide/how-it-works.md")]
    struct HowItWorks;
    #[doc = include_str!("../../docs/guide/operations.md")]
    struct Operations;
    #[doc = include_str!("../../docs/guide/marketplace.md")]
    struct Marketplace;
    #[doc = include_str!("../../docs/guide/contributing.md")]
    struct Contributing;
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpListener};
    use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

    use super::{free_port, RedisServer};

    static TAKEN: AtomicU16 = AtomicU16::new(0);
    static FIRST: AtomicBool = AtomicBool::new(true);

    /// The taken port first, free ones after.
    fn taken_then_free() -> u16 {
        if FIRST.swap(false, Ordering::SeqCst) {
            TAKEN.load(Ordering::SeqCst)
        } else {
            free_port()
        }
    }

    /// A server whose second port (here its Cluster bus port) is taken when it starts is
    /// started on another: that port is chosen afresh on every try.
    #[test]
    fn a_second_port_taken_meanwhile_costs_a_try_not_the_start() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = taken.local_addr().expect("addr").port();
        TAKEN.store(port, Ordering::SeqCst);
        let (server, second) = RedisServer::launch_with_port(false, taken_then_free, |second| {
            vec![
                "cluster-enabled yes".to_owned(),
                format!("cluster-port {second}"),
            ]
        });
        assert_ne!(second, port, "started on the taken port");
        assert!(server.command(&["PING"]).starts_with("+PONG"));
        drop(taken);
    }
}
