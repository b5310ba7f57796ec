//! A small TCP proxy for fault injection between lock clients and Redis.
//!
//! [`Proxy::start`] listens on a free loopback port and forwards every connection to an
//! upstream address. While it runs, a test can add latency to every byte that crosses it
//! ([`Proxy::set_latency`]), cut every open connection at once ([`Proxy::drop_connections`]),
//! or partition the clients from the server ([`Proxy::set_blackhole`]): connections are still
//! accepted, but nothing is read, forwarded or answered until the blackhole is lifted. It can
//! also kill the connections open now silently ([`Proxy::stall_connections`]): they stay
//! open but never carry another byte, as a connection through a NAT that dropped its state,
//! or to a host that vanished, does; new connections work as usual.
//!
//! The proxy runs on its own thread and tokio runtime, so it works the same from a plain
//! `#[test]`, from inside `#[tokio::test]`, and from a program that has a runtime of its own.
//! It stops, closing every connection, when the [`Proxy`] is dropped.
//!
//! ```no_run
//! use std::time::Duration;
//! let server = lock_tests::RedisServer::start();
//! let proxy = lock_tests::proxy::Proxy::start(server.addr()).expect("proxy");
//! let url = proxy.url(); // give this to the client under test
//! proxy.set_latency(Duration::from_millis(50));
//! proxy.set_blackhole(true); // a partition, until:
//! proxy.set_blackhole(false);
//! proxy.drop_connections();
//! # drop(url);
//! ```

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Largest chunk read from one side before it is forwarded.
const CHUNK: usize = 16 * 1024;

/// How many chunks may wait in one direction's latency queue before reading pauses.
const QUEUE: usize = 256;

/// A running proxy. Dropping it stops it and closes every connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    control: Arc<Control>,
    shutdown: Option<watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Settings shared by the accept loop and every connection.
#[derive(Debug)]
struct Control {
    latency_us: AtomicU64,
    /// Bumped by `drop_connections`: a connection opened in an older generation closes.
    generation: watch::Sender<u64>,
    blackhole: watch::Sender<bool>,
    /// Connections accepted before this many are stalled for good.
    stalled_below: watch::Sender<usize>,
    accepted: AtomicUsize,
    open: AtomicUsize,
}

impl Proxy {
    /// Starts a proxy on a free loopback port that forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<Proxy> {
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let control = Arc::new(Control {
            latency_us: AtomicU64::new(0),
            generation: watch::channel(0).0,
            blackhole: watch::channel(false).0,
            stalled_below: watch::channel(0).0,
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
        });
        let (shutdown, shutdown_rx) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread_control = Arc::clone(&control);
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(std_listener) else {
                        return;
                    };
                    accept_loop(listener, upstream, thread_control, shutdown_rx).await;
                });
            })?;
        Ok(Proxy {
            addr,
            upstream,
            control,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients should connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:<proxy port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// Where the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Delays every chunk, in both directions, by `latency` from the moment it was read.
    /// Applies to data read from now on, on open and new connections alike.
    pub fn set_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.control.latency_us.store(us, Ordering::Relaxed);
    }

    /// The current added latency.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.control.latency_us.load(Ordering::Relaxed))
    }

    /// Closes every connection open right now, on both sides (the client sees its
    /// connection reset or closed). New connections are accepted as usual.
    pub fn drop_connections(&self) {
        self.control.generation.send_modify(|g| *g += 1);
    }

    /// A partition while `on`: connections are accepted but nothing is read, forwarded or
    /// answered (new ones are not connected upstream), so clients wait for replies that do
    /// not come. Turning it off lets the queued bytes through.
    pub fn set_blackhole(&self, on: bool) {
        self.control.blackhole.send_replace(on);
    }

    /// Stalls every connection open right now, for good and silently: bytes sent either
    /// way are swallowed, and neither side is closed or told (until
    /// [`Proxy::drop_connections`] or the proxy's end). New connections work as usual.
    pub fn stall_connections(&self) {
        let accepted = self.control.accepted.load(Ordering::SeqCst);
        self.control.stalled_below.send_replace(accepted);
    }

    /// Whether a blackhole is on.
    pub fn is_blackholed(&self) -> bool {
        *self.control.blackhole.borrow()
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> usize {
        self.control.accepted.load(Ordering::Relaxed)
    }

    /// Connections open right now.
    pub fn open_connections(&self) -> usize {
        self.control.open.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    control: Arc<Control>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let _ = client.set_nodelay(true);
                let id = control.accepted.fetch_add(1, Ordering::SeqCst);
                connections.spawn(connection(client, id, upstream, Arc::clone(&control)));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Dropping the set aborts every connection task, which closes their sockets.
    connections.shutdown().await;
}

/// Counts an open connection for as long as it lives.
struct OpenGuard<'a>(&'a AtomicUsize);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(client: TcpStream, id: usize, upstream: SocketAddr, control: Arc<Control>) {
    control.open.fetch_add(1, Ordering::Relaxed);
    let _open = OpenGuard(&control.open);
    let mut generation = control.generation.subscribe();
    generation.mark_unchanged();
    let mut blackhole = control.blackhole.subscribe();
    // A partitioned proxy does not even reach the server.
    tokio::select! {
        _ = generation.changed() => return,
        ok = blackhole.wait_for(|on| !*on) => if ok.is_err() { return },
    }
    let server = tokio::select! {
        _ = generation.changed() => return,
        server = TcpStream::connect(upstream) => match server {
            Ok(server) => server,
            Err(_) => return, // upstream down: the client sees its connection closed
        },
    };
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = generation.changed() => {}
        () = pump(client_read, server_write, id, &control) => {}
        () = pump(server_read, client_write, id, &control) => {}
    }
    // Both halves of both sockets drop here: the connection is closed on both sides.
}

/// Forwards one direction: a reader that stamps each chunk, and a writer that sends it
/// once its latency has passed. Ends when either side closes or fails.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, id: usize, control: &Control) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let stalled = control.stalled_below.subscribe();
    let mut reader_blackhole = control.blackhole.subscribe();
    let mut writer_blackhole = control.blackhole.subscribe();
    let latency_us = &control.latency_us;
    // Ends on EOF or an error; dropping `tx` then lets the writer drain and finish.
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            // Stop reading while partitioned: the bytes stay in the socket buffers.
            if reader_blackhole.wait_for(|on| !*on).await.is_err() {
                return;
            }
            let n = match from.read(&mut buf).await {
                // A stalled connection does not pass its end on either.
                Ok(0) | Err(_) if id < *stalled.borrow() => std::future::pending().await,
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if id < *stalled.borrow() {
                // Swallowed: read (so the sender sees no back-pressure) and dropped.
                continue;
            }
            let latency = Duration::from_micros(latency_us.load(Ordering::Relaxed));
            if tx
                .send((Instant::now() + latency, buf[..n].to_vec()))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            // Nothing crosses a partition, not even what was read before it began.
            if writer_blackhole.wait_for(|on| !*on).await.is_err() {
                return;
            }
            if id < *control.stalled_below.borrow() {
                continue;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// An upstream that echoes every byte back.
    fn echo_server() -> SocketAddr {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(stream: &mut std::net::TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        stream.read_exact(&mut got)?;
        Ok(got)
    }

    fn connect(proxy: &Proxy) -> std::net::TcpStream {
        let stream = std::net::TcpStream::connect(proxy.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    }

    #[test]
    fn forwards_and_adds_latency() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        assert_eq!(round_trip(&mut stream, b"hello").unwrap(), b"hello");
        proxy.set_latency(Duration::from_millis(100));
        assert_eq!(proxy.latency(), Duration::from_millis(100));
        let started = std::time::Instant::now();
        assert_eq!(round_trip(&mut stream, b"slow").unwrap(), b"slow");
        // Both directions are delayed: a lower bound only, never an upper one.
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(proxy.accepted(), 1);
    }

    #[test]
    fn drop_connections_closes_open_ones_only() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut old = connect(&proxy);
        assert_eq!(round_trip(&mut old, b"a").unwrap(), b"a");
        proxy.drop_connections();
        assert!(
            round_trip(&mut old, b"b").is_err(),
            "a dropped connection answers nothing"
        );
        let mut new = connect(&proxy);
        assert_eq!(round_trip(&mut new, b"c").unwrap(), b"c");
    }

    #[test]
    fn blackhole_holds_traffic_until_lifted() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        assert_eq!(round_trip(&mut stream, b"x").unwrap(), b"x");
        proxy.set_blackhole(true);
        assert!(proxy.is_blackholed());
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let err = round_trip(&mut stream, b"y").unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{err:?}"
        );
        // A connection opened during the partition is accepted but silent too.
        let mut during = connect(&proxy);
        during
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(round_trip(&mut during, b"z").is_err());
        proxy.set_blackhole(false);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut late = [0u8; 1];
        stream.read_exact(&mut late).unwrap();
        assert_eq!(&late, b"y", "held bytes go through once the partition ends");
        during
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        during.read_exact(&mut late).unwrap();
        assert_eq!(&late, b"z");
    }

    #[test]
    fn an_unreachable_upstream_closes_the_client() {
        let port = crate::free_port();
        let proxy = Proxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).unwrap();
        let mut stream = connect(&proxy);
        let mut buf = [0u8; 1];
        let closed = matches!(stream.read(&mut buf), Ok(0) | Err(_));
        assert!(closed);
    }

    #[test]
    fn dropping_the_proxy_closes_everything() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        assert_eq!(round_trip(&mut stream, b"a").unwrap(), b"a");
        drop(proxy);
        assert!(round_trip(&mut stream, b"b").is_err());
    }
}
