//! The shared connection of a Locker given a URL: a few sockets ("lanes") to the one
//! server, each a redis-rs multiplexed connection whose writes are gathered.
//!
//! redis-rs writes a multiplexed connection's commands in a task of its own, woken by each
//! command sent. On tokio that task is woken into the sender's "next task" slot and runs as
//! soon as the sender yields: with many tasks sending, each command goes out in a write of
//! its own, and its reply comes back in a read of its own on both sides. Here that task
//! first lets the tasks already queued on its thread run when it is woken ([`Gathered`]),
//! so that their commands go out together, in one write, and the server answers them in
//! one. It yields only while another of its lane's commands is in flight ([`Flight`]): a
//! lone command goes out at once, as before, since a yield with nothing to gather would
//! only wake an idle worker of the runtime (S1's p50 rose from about 119 to 139 µs per lock
//! and release when every wake yielded).
//! A command sent beside others waits for the tasks queued ahead of it on its thread to
//! reach their next await.
//!
//! One lane gathering everything would make the client and the server take turns (the
//! server idle while the client prepares the next batch, and the other way round), so the
//! commands are spread over [`LANES`] of them, and one batch is answered while the next is
//! written. Each task sends on a lane of its own (by its tokio task id; outside a task, on
//! the first): its tasks' batches then come back apart, rather than all lanes' together.
//!
//! A task sends one command at a time, so its commands keep their order; so do the
//! commands of one operation, which runs in one task. What must reach Redis behind a
//! command sent in another task (a give-back behind an attempt that got no answer; see
//! `SentOn` and `spawn_release`) goes out on a clone pinned to that command's lane
//! ([`Lanes::following`], [`Lanes::pinned_here`]), which keeps request order as one socket
//! does.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, ConnectionAddr, RedisResult};

/// Sockets per shared connection opened from a URL.
pub(crate) const LANES: usize = 4;

/// A lane's writing task yields when woken only while at least this many of its commands
/// are in flight: a lone command goes out at once.
const GATHER_FROM: usize = 2;

/// The lanes of one shared connection; each clone sends on the same sockets.
#[derive(Clone)]
pub(crate) struct Lanes {
    lanes: Box<[Lane]>,
    choice: Choice,
}

/// Which lane a clone's commands take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Choice {
    /// Every command of this clone goes out on this lane (see [`Lanes::following`]).
    pin: Option<usize>,
    /// The lane of the last command this clone sent.
    last: usize,
}

impl Choice {
    /// The lane a command sent now goes out on, among `lanes`, from task `task`: the
    /// pinned one, or the task's, or (outside a task) the first.
    fn here(self, lanes: usize, task: Option<impl Hash>) -> usize {
        match (self.pin, task) {
            (Some(pinned), _) => pinned.min(lanes.saturating_sub(1)),
            (None, Some(task)) => lane_of(task, lanes),
            (None, None) => 0,
        }
    }

    /// The lane of a command sent now, remembered as the last.
    fn pick(&mut self, lanes: usize, task: Option<impl Hash>) -> usize {
        self.last = self.here(lanes, task);
        self.last
    }

    /// Pinned to the lane of the last command sent.
    fn following(self) -> Choice {
        Choice {
            pin: Some(self.pin.unwrap_or(self.last)),
            ..self
        }
    }

    /// Pinned to the lane a command sent now would take.
    fn pinned_here(self, lanes: usize, task: Option<impl Hash>) -> Choice {
        Choice {
            pin: Some(self.here(lanes, task)),
            ..self
        }
    }
}

/// One socket, and (when its writes are gathered) how many of its commands are in flight.
#[derive(Clone)]
struct Lane {
    conn: MultiplexedConnection,
    flight: Option<Arc<Flight>>,
}

/// How many of a gathered lane's commands are in flight (sent, and not yet answered or
/// dropped), shared by its senders and its writing task, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Flight {
    in_flight: AtomicUsize,
}

impl Lanes {
    /// One connection opened elsewhere (a Sentinel's master, a TLS server).
    pub fn one(conn: MultiplexedConnection) -> Lanes {
        Lanes {
            lanes: Box::new([Lane { conn, flight: None }]),
            choice: Choice::default(),
        }
    }

    /// The lane the next command goes out on (the pinned one, or the current task's, or
    /// outside a task the first), and the count the command is to be counted in while it
    /// flies ([`Flight::count`]).
    pub fn pick(&mut self) -> (&mut MultiplexedConnection, Option<&Flight>) {
        let at = self.choice.pick(self.lanes.len(), tokio::task::try_id());
        let lane = &mut self.lanes[at];
        (&mut lane.conn, lane.flight.as_deref())
    }

    /// A clone that sends every command on the lane of the last command this one sent:
    /// behind it, in order, from any task.
    pub fn following(&self) -> Lanes {
        Lanes {
            lanes: self.lanes.clone(),
            choice: self.choice.following(),
        }
    }

    /// A clone that sends every command on the lane a command sent now on this one would
    /// take: what it sends, and what is sent later on its clones from any task, reaches
    /// Redis in order.
    pub fn pinned_here(&self) -> Lanes {
        Lanes {
            lanes: self.lanes.clone(),
            choice: self
                .choice
                .pinned_here(self.lanes.len(), tokio::task::try_id()),
        }
    }

    /// Lanes opened here, none pinned.
    fn of(opened: Vec<Lane>) -> Lanes {
        Lanes {
            lanes: opened.into_boxed_slice(),
            choice: Choice::default(),
        }
    }

    /// The database the lanes talk to (all the same).
    pub fn get_db(&self) -> i64 {
        self.lanes.first().map_or(0, |lane| lane.conn.get_db())
    }
}

impl Flight {
    /// `command`, counted in flight from now until it ends or is dropped.
    pub fn count<F>(flight: Option<&Flight>, command: F) -> Counted<'_, F> {
        if let Some(flight) = flight {
            flight.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        Counted { command, flight }
    }

    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

pin_project_lite::pin_project! {
    /// A command counted in its lane's [`Flight`].
    pub(crate) struct Counted<'a, F> {
        #[pin]
        command: F,
        flight: Option<&'a Flight>,
    }

    impl<'a, F> PinnedDrop for Counted<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(flight) = this.flight {
                flight.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl<F: Future> Future for Counted<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().command.poll(cx)
    }
}

/// The lane of `task` among `lanes`: tasks numbered in a row take the lanes in turn.
fn lane_of(task: impl Hash, lanes: usize) -> usize {
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

/// Opens `lanes` gathered connections to the server `client` names, with `config`, at once
/// (`None`: a TLS server, which the caller opens through redis-rs). The first failure is
/// the error when none opens; when some do, the others are done without (a server near
/// its `maxclients`, say), and said so at debug level.
pub(crate) async fn open(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
    lanes: usize,
) -> RedisResult<Option<Lanes>> {
    let info = client.get_connection_info();
    if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Ok(None);
    }
    let opening = (0..lanes.max(1)).map(|_| open_lane(info, config));
    let mut opened = Vec::with_capacity(lanes.max(1));
    let mut first_error = None;
    for lane in futures_util::future::join_all(opening).await {
        match lane {
            Ok(lane) => opened.push(lane),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    if opened.is_empty() {
        return Err(first_error
            .unwrap_or_else(|| std::io::Error::other("no socket to the server opened").into()));
    }
    if let Some(err) = first_error {
        tracing::debug!(
            opened = opened.len(),
            wanted = lanes,
            %err,
            "some of the shared connection's sockets did not open: going on with the others"
        );
    }
    Ok(Some(Lanes::of(opened)))
}

/// One gathered lane to the server `info` names (TCP or a Unix socket).
async fn open_lane(
    info: &redis::ConnectionInfo,
    config: &AsyncConnectionConfig,
) -> RedisResult<Lane> {
    let flight = Arc::new(Flight::default());
    let conn = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            // Gathered, the writes need no gathering by the kernel: waiting for the last
            // one's acknowledgement only delays the next batch.
            stream.set_nodelay(true)?;
            gathered(info.redis_settings(), stream, config, &flight).await?
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path).await?;
            gathered(info.redis_settings(), stream, config, &flight).await?
        }
        other => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("no gathered lane to {other}"),
            )
            .into())
        }
    };
    Ok(Lane {
        conn,
        flight: Some(flight),
    })
}

/// A multiplexed connection on `stream`, its writing task spawned [`Gathered`].
async fn gathered<S>(
    settings: &redis::RedisConnectionInfo,
    stream: S,
    config: &AsyncConnectionConfig,
    flight: &Arc<Flight>,
) -> RedisResult<MultiplexedConnection>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) =
        MultiplexedConnection::new_with_config(settings, stream, config.clone()).await?;
    // The task ends when the last clone of `conn` is dropped (its channel closes) or the
    // socket fails.
    tokio::spawn(Gathered::new(driver, Arc::clone(flight)));
    Ok(conn)
}

/// A connection's writing task that, each time it is woken while more than one of its
/// commands flies, first lets the tasks queued on its thread run (see the module's
/// documentation).
pub(crate) struct Gathered<F> {
    inner: Pin<Box<F>>,
    /// The lane's commands in flight.
    flight: Arc<Flight>,
    /// It has yielded since it was last woken: the next poll runs the connection.
    yielded: bool,
}

impl<F> Gathered<F> {
    pub fn new(inner: F, flight: Arc<Flight>) -> Gathered<F> {
        Gathered {
            inner: Box::pin(inner),
            flight,
            yielded: false,
        }
    }
}

impl<F: Future<Output = ()>> Future for Gathered<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.yielded && self.flight.in_flight() >= GATHER_FROM {
            // Rescheduled behind what is queued, rather than run next: the commands those
            // tasks send meanwhile go out with this one. (A lone command does not wait:
            // the yield would also wake an idle worker of the runtime, for nothing.)
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
    struct Polled {
        polls: Arc<AtomicUsize>,
        ready_at: usize,
    }

    impl Future for Polled {
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

    /// The order a gathered connection task and a task spawned after it run in, with
    /// `in_flight` commands of its lane flying.
    async fn order_with(in_flight: usize) -> Vec<&'static str> {
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let inner = {
            let order = Arc::clone(&order);
            std::future::poll_fn(move |_| {
                order.lock().expect("order").push("connection");
                Poll::Ready(())
            })
        };
        let flight = Arc::new(Flight::default());
        flight.in_flight.store(in_flight, Ordering::Relaxed);
        let connection = tokio::spawn(Gathered::new(inner, flight));
        let sender = {
            let order = Arc::clone(&order);
            tokio::spawn(async move { order.lock().expect("order").push("sender") })
        };
        connection.await.expect("the connection task");
        sender.await.expect("the sender");
        let order = order.lock().expect("order");
        order.clone()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_woken_connection_with_commands_in_flight_runs_after_the_tasks_queued() {
        assert_eq!(order_with(2).await, ["sender", "connection"]);
        assert_eq!(order_with(40).await, ["sender", "connection"]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_lone_command_goes_out_at_once() {
        assert_eq!(order_with(1).await, ["connection", "sender"]);
        assert_eq!(order_with(0).await, ["connection", "sender"]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_wake_costs_one_yield_and_the_connection_still_ends() {
        let polls = Arc::new(AtomicUsize::new(0));
        let inner = Polled {
            polls: Arc::clone(&polls),
            ready_at: 3,
        };
        let flight = Arc::new(Flight::default());
        flight.in_flight.store(5, Ordering::Relaxed);
        tokio::spawn(Gathered::new(inner, flight))
            .await
            .expect("the connection task");
        assert_eq!(polls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_command_counts_in_flight_until_it_ends_or_is_dropped() {
        let flight = Flight::default();
        let answered = Flight::count(Some(&flight), async { 7 });
        let dropped = Flight::count(Some(&flight), std::future::pending::<()>());
        assert_eq!(flight.in_flight(), 2);
        assert_eq!(answered.await, 7);
        assert_eq!(flight.in_flight(), 1);
        drop(dropped);
        assert_eq!(flight.in_flight(), 0);
        // A lane that is not gathered counts nothing.
        assert_eq!(Flight::count(None, async { 1 }).await, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_keeps_its_lane() {
        for _ in 0..8 {
            tokio::spawn(async {
                let task = tokio::task::try_id().expect("in a task");
                let lane = lane_of(task, 4);
                tokio::task::yield_now().await;
                assert_eq!(lane_of(task, 4), lane);
                assert_eq!(lane_of(tokio::task::try_id().expect("in a task"), 4), lane);
            })
            .await
            .expect("the task");
        }
    }

    #[test]
    fn a_following_or_pinned_clone_keeps_to_one_lane_from_any_task() {
        let lanes = 4;
        let mut sent = Choice::default();
        // An attempt sent from task 6 went out on its lane (6 mod 4).
        assert_eq!(sent.pick(lanes, Some(6_u64)), 2);
        // A give-back from another task, or from outside any task, follows it there.
        let give_back = sent.following();
        assert_eq!(give_back.here(lanes, Some(9_u64)), 2);
        assert_eq!(give_back.here(lanes, None::<u64>), 2);
        // ... and so does a clone of a clone.
        assert_eq!(give_back.following().here(lanes, Some(1_u64)), 2);
        // Pinned where a command from task 7 would go now: lane 3, whoever sends later.
        let noted = Choice::default().pinned_here(lanes, Some(7_u64));
        assert_eq!(noted.here(lanes, Some(8_u64)), 3);
        let mut noted = noted;
        assert_eq!(noted.pick(lanes, None::<u64>), 3);
        // Unpinned, each task takes its own lane, and outside a task the first.
        let mut free = Choice::default();
        assert_eq!(free.pick(lanes, Some(5_u64)), 1);
        assert_eq!(free.pick(lanes, None::<u64>), 0);
        assert_eq!(free.last, 0);
        // A pin never points past the lanes there are.
        let odd = Choice {
            pin: Some(9),
            last: 0,
        };
        assert_eq!(odd.here(lanes, None::<u64>), 3);
    }

    #[test]
    fn tasks_numbered_in_a_row_take_the_lanes_in_turn() {
        // A task's id hashes as the one number it is.
        let lanes: Vec<usize> = (1..=9_u64).map(|task| lane_of(task, 4)).collect();
        assert_eq!(lanes, [1, 2, 3, 0, 1, 2, 3, 0, 1]);
        assert_eq!(lane_of(u64::MAX, 4), 3);
        assert_eq!(lane_of(7_u64, 1), 0);
    }
}
