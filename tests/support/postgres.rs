//! Private PostgreSQL servers for the fenced-write tests, as [`crate::RedisServer`] is for
//! Redis: `initdb` in a temporary directory, then `postgres` on a free loopback port with
//! no `fsync` (nothing here must survive a power loss; a killed server keeps its committed data), trust authentication
//! for user `postgres`, stopped and its directory removed on drop.
//!
//! PostgreSQL refuses to run as root: when the tests run as root (CI does), the server runs
//! as the `postgres` user (the Debian package's), through `setpriv`, which `exec`s it so
//! that the child process is the server itself.
//!
//! ```no_run
//! if let Some(pg) = lock_tests::postgres::PostgresServer::start() {
//!     let url = pg.url(); // postgres://postgres@127.0.0.1:<port>/postgres
//! #   drop(url);
//! }
//! ```

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);

/// What to do when the binaries are missing.
pub const INSTALL_HINT: &str = "PostgreSQL's initdb and postgres were not found (looked in \
     $PG_BIN, /usr/lib/postgresql/*/bin and PATH); install them (Debian/Ubuntu: \
     `apt-get install -y postgresql`) or set PG_BIN to their directory";

/// A private PostgreSQL server, stopped on drop.
#[derive(Debug)]
pub struct PostgresServer {
    child: Option<Child>,
    port: u16,
    bin: PathBuf,
    /// The user the server runs as, when the tests run as root.
    run_as: Option<String>,
    dir: tempfile::TempDir,
}

impl PostgresServer {
    /// Starts a server, or prints why not and returns `None` when PostgreSQL is not
    /// installed (a test then skips; `.ci/run` installs it). Panics if it is installed but
    /// does not come up.
    pub fn start() -> Option<PostgresServer> {
        let Some(bin) = binaries() else {
            eprintln!("skipped: {INSTALL_HINT}");
            return None;
        };
        let run_as = running_as_root().then(|| "postgres".to_owned());
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-pg-")
            .tempdir()
            .unwrap_or_else(|err| panic!("cannot create a directory for PostgreSQL: {err}"));
        if let Some(user) = &run_as {
            let status = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(dir.path())
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "cannot give {} to user {user} (PostgreSQL refuses to run as root)",
                dir.path().display()
            );
        }
        let mut server = PostgresServer {
            child: None,
            port: 0,
            bin,
            run_as,
            dir,
        };
        let output = server
            .command("initdb")
            .args(["-D"])
            .arg(server.data())
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .unwrap_or_else(|err| panic!("cannot run initdb: {err}"));
        assert!(
            output.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        server.spawn(crate::free_port());
        Some(server)
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs `sql` with `psql` (set-up: tables, rows) and returns its output, unaligned
    /// without headers.
    pub fn psql(&self, sql: &str) -> String {
        let output = self
            .command("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args([
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-A",
                "-t",
                "-c",
                sql,
            ])
            .output()
            .unwrap_or_else(|err| panic!("cannot run psql: {err}"));
        assert!(
            output.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Stops the server at once (an immediate shutdown, as a crash would).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-QUIT", &child.id().to_string()])
                .status();
            let started = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the server's main process and to its backends
    /// (its child processes, which serve the open connections).
    pub fn signal(&self, signal: &str) {
        let Some(child) = &self.child else {
            return;
        };
        let main = child.id().to_string();
        let children = Command::new("pgrep")
            .args(["-P", &main])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let mut pids: Vec<&str> = children.split_whitespace().collect();
        pids.push(&main);
        let _ = Command::new("kill").arg(signal).args(&pids).status();
    }

    /// Starts it again on the same port, with its data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn(self.port);
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self, port: u16) {
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data())
            .args(["-p", &port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.dir.path().join("log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start postgres: {err}"));
        self.child = Some(child);
        self.port = port;
        let started = Instant::now();
        let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        loop {
            let ready = TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200))
                .is_ok()
                && self
                    .command("pg_isready")
                    .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q"])
                    .status()
                    .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("postgres exited ({status}): {}", self.log());
            }
            assert!(
                started.elapsed() < STARTUP_LIMIT,
                "postgres did not accept connections on port {port} within {STARTUP_LIMIT:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// `program` from the binaries' directory, as the server's user.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={user}"))
                    .arg(format!("--regid={user}"))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(path);
                command
            }
            None => Command::new(path),
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The directory holding `initdb` and `postgres`: `$PG_BIN`, the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout), or the one of `initdb` on PATH.
fn binaries() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("PG_BIN").map(PathBuf::from) {
        return has_both(&dir).then_some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).find(|dir| has_both(dir)))
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
