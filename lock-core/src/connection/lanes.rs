//! The shared connection of a Locker given a URL: a few sockets ("lanes") to the one
//! server, each a redis-rs multiplexed connection whose writes are gathered.
//!
//! redis-rs writes a multiplexed connection's commands in a task of its own, woken by each
//! command sent. On tokio that task is woken into the sender's "next task" slot and runs as
//! soon as the sender yields: with many tasks sending, each command goes out in a write of
//! its own, and its reply comes back in a read of its own on both sides. Here that task
//! first lets the tasks already queued on its thread run when it is woken ([`Gathered`]),
//! so that their commands go out together, in one write, and the server answers them in
//! one. A command sent while nothing else is runnable goes out at once (the yield costs one
//! more poll of the task), so a lone request waits no longer; a command sent from a busy
//! runtime waits for the tasks queued ahead of it on its thread to reach their next await.
//!
//! One lane gathering everything would make the client and the server take turns (the
//! server idle while the client prepares the next batch, and the other way round), so the
//! commands are spread over [`LANES`] of them, in turn, and one batch is answered while the
//! next is written. Lock commands are short and independent, and a task waits for each
//! reply before it sends its next command, so no order between lanes is needed.
//!
//! (64 tasks each taking and releasing its own name with redis-rs's plain commands, on a
//! 2-core machine shared with the server: 164,000-171,000 cycles/s on one lane gathered,
//! 264,000-267,000 on two, 316,000-317,000 on four, against 175,000-188,000 for one plain
//! connection; the client's CPU per cycle 2.8 µs against 5.0, the server's 3.0 against 4.1.
//! `lock-bench/examples/throughput_loop.rs`.)
//!
//! A TLS URL keeps one plain connection of redis-rs's own making: its handshake is
//! redis-rs's to do.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::task::{Context, Poll};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, ConnectionAddr, RedisResult};

/// Sockets per shared connection opened from a URL.
pub(crate) const LANES: usize = 4;

/// The lanes of one shared connection; each clone sends on the same sockets, taking them
/// in turn.
#[derive(Clone)]
pub(crate) struct Lanes {
    conns: Box<[MultiplexedConnection]>,
    next: usize,
}

impl Lanes {
    /// One connection opened elsewhere (a Sentinel's master, a TLS server).
    pub fn one(conn: MultiplexedConnection) -> Lanes {
        Lanes {
            conns: Box::new([conn]),
            next: 0,
        }
    }

    /// The lane the next command goes out on: the current task's own (see the module's
    /// documentation), or, outside a task, the next in turn.
    pub fn pick(&mut self) -> &mut MultiplexedConnection {
        let lanes = self.conns.len();
        let at = match tokio::task::try_id() {
            Some(task) => lane_of(task, lanes),
            None => take_turn(&mut self.next, lanes),
        };
        &mut self.conns[at]
    }

    /// The database the lanes talk to (all the same).
    pub fn get_db(&self) -> i64 {
        self.conns.first().map_or(0, ConnectionLike::get_db)
    }
}

/// The lane of `task` among `lanes`: tasks numbered in a row take the lanes in turn.
fn lane_of(task: tokio::task::Id, lanes: usize) -> usize {
    let mut number = TaskNumber(0);
    task.hash(&mut number);
    (number.finish() % lanes.max(1) as u64) as usize
}

/// A task's id as the number it is (an id hashes as one `u64`).
struct TaskNumber(u64);

impl Hasher for TaskNumber {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, number: u64) {
        self.0 ^= number;
    }
}

/// The index of the next of `lanes` lanes, advancing `next`.
fn take_turn(next: &mut usize, lanes: usize) -> usize {
    let at = *next % lanes.max(1);
    *next = next.wrapping_add(1);
    at
}

/// Opens `lanes` gathered connections to the server `client` names, with `config` (`None`:
/// a TLS server, which the caller opens through redis-rs).
pub(crate) async fn open(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
    lanes: usize,
) -> RedisResult<Option<Lanes>> {
    let info = client.get_connection_info();
    let mut conns = Vec::with_capacity(lanes.max(1));
    for _ in 0..lanes.max(1) {
        let conn = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                // Gathered, the writes need no gathering by the kernel: waiting for the
                // last one's acknowledgement only delays the next batch.
                stream.set_nodelay(true)?;
                gathered(info.redis_settings(), stream, config).await?
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                gathered(info.redis_settings(), stream, config).await?
            }
            _ => return Ok(None),
        };
        conns.push(conn);
    }
    Ok(Some(Lanes {
        conns: conns.into_boxed_slice(),
        next: 0,
    }))
}

/// A multiplexed connection on `stream`, its writing task spawned [`Gathered`].
async fn gathered<S>(
    settings: &redis::RedisConnectionInfo,
    stream: S,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) =
        MultiplexedConnection::new_with_config(settings, stream, config.clone()).await?;
    // The task ends when the last clone of `conn` is dropped (its channel closes) or the
    // socket fails.
    tokio::spawn(Gathered::new(driver));
    Ok(conn)
}

/// A connection's writing task that, each time it is woken, first lets the tasks queued on
/// its thread run (see the module's documentation).
pub(crate) struct Gathered<F> {
    inner: Pin<Box<F>>,
    /// It has yielded since it was last woken: the next poll runs the connection.
    yielded: bool,
}

impl<F> Gathered<F> {
    pub fn new(inner: F) -> Gathered<F> {
        Gathered {
            inner: Box::pin(inner),
            yielded: false,
        }
    }
}

impl<F: Future<Output = ()>> Future for Gathered<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.yielded {
            // Rescheduled behind what is queued, rather than run next: the commands those
            // tasks send meanwhile go out with this one.
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.yielded = false;
        self.inner.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its polls; ready at the `ready_at`-th.
    struct Counted {
        polls: Arc<AtomicUsize>,
        ready_at: usize,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let polls = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
            if polls >= self.ready_at {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_woken_connection_runs_after_the_tasks_queued_before_it() {
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let polls = Arc::new(AtomicUsize::new(0));
        let inner = {
            let (order, polls) = (Arc::clone(&order), Arc::clone(&polls));
            std::future::poll_fn(move |_| {
                order.lock().expect("order").push("connection");
                polls.fetch_add(1, Ordering::SeqCst);
                Poll::Ready(())
            })
        };
        let connection = tokio::spawn(Gathered::new(inner));
        let sender = {
            let order = Arc::clone(&order);
            tokio::spawn(async move { order.lock().expect("order").push("sender") })
        };
        connection.await.expect("the connection task");
        sender.await.expect("the sender");
        assert_eq!(*order.lock().expect("order"), ["sender", "connection"]);
        assert_eq!(polls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_wake_costs_one_yield_and_the_connection_still_ends() {
        let polls = Arc::new(AtomicUsize::new(0));
        let inner = Counted {
            polls: Arc::clone(&polls),
            ready_at: 3,
        };
        tokio::spawn(Gathered::new(inner))
            .await
            .expect("the connection task");
        assert_eq!(polls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_keeps_its_lane_and_tasks_in_a_row_spread_over_the_lanes() {
        let lanes: Vec<usize> = futures_util::future::join_all((0..8).map(|_| {
            tokio::spawn(async {
                let task = tokio::task::try_id().expect("in a task");
                let lane = lane_of(task, 4);
                tokio::task::yield_now().await;
                assert_eq!(lane_of(task, 4), lane);
                lane
            })
        }))
        .await
        .into_iter()
        .map(|joined| joined.expect("the task"))
        .collect();
        for lane in 0..4 {
            assert_eq!(
                lanes.iter().filter(|&&at| at == lane).count(),
                2,
                "{lanes:?}"
            );
        }
    }

    #[test]
    fn commands_take_the_lanes_in_turn() {
        let mut next = 0;
        let turns: Vec<usize> = (0..7).map(|_| take_turn(&mut next, 3)).collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2, 0]);
        let mut next = usize::MAX;
        assert_eq!(take_turn(&mut next, 4), usize::MAX % 4);
        assert_eq!(take_turn(&mut next, 4), 0, "wraps around without a panic");
        assert_eq!(take_turn(&mut 5, 1), 0);
    }
}
