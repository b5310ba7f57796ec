//! What `#[redis_locked]` functions do at run time, on the in-process backend
//! (`Locker::memory()`): the same semantics as Redis without a server. The Redis-backed
//! versions of these behaviours live in the workspace's integration tests.
//!
//! Pedantic clippy on this file also lints the expansion as users see it.
#![warn(clippy::pedantic)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{current_lease, redis_locked, LockError, Locker};

/// An application error type, as users have: lock failures are one of its variants.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Domain(&'static str),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

const TTL: Duration = Duration::from_secs(10);

struct Market {
    locks: Locker,
    purchases: AtomicUsize,
}

impl Market {
    fn new() -> Market {
        Market {
            locks: Locker::memory(),
            purchases: AtomicUsize::new(0),
        }
    }

    #[redis_locked(key = "market:{item_id}", ttl = "10s", wait = "0s", locker = self.locks)]
    async fn purchase(&self, item_id: &str) -> Result<usize, AppError> {
        Ok(self.purchases.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[redis_locked(key = "market:{item_id}", wait = "50ms", locker = self.locks)]
    async fn purchase_patiently(&self, item_id: &str) -> Result<usize, AppError> {
        Ok(self.purchases.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[tokio::test]
async fn body_does_not_run_while_the_lock_is_busy() {
    let market = Market::new();
    // Taken by another task, as another holder would (a lease this very task took counts
    // as this task's for deadlock detection).
    let held = elsewhere(&market.locks, "market:7").await;

    match market.purchase("7").await {
        Err(AppError::Lock(LockError::Busy { name, .. })) => assert_eq!(name, "market:7"),
        other => panic!("expected a Busy lock error, got {other:?}"),
    }
    match market.purchase_patiently("7").await {
        Err(AppError::Lock(LockError::Timeout { name, .. })) => assert_eq!(name, "market:7"),
        other => panic!("expected a Timeout lock error, got {other:?}"),
    }
    assert_eq!(market.purchases.load(Ordering::SeqCst), 0, "the body ran");

    // Another key is free, and once released, so is this one.
    assert_eq!(market.purchase("8").await.unwrap(), 1);
    assert!(held.release().await.unwrap());
    assert_eq!(market.purchase("7").await.unwrap(), 2);
}

/// A permit of a one-permit semaphore, without waiting.
#[redis_locked(key = "exports", permits = 1, wait = "0s", locker = locker)]
async fn export(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

/// Issue 27: a contention error from an annotated function advises the attribute's
/// `wait = ".."`, where its wait is set, not the request builder's `.wait(..)`; the plain
/// API keeps `.wait(..)`.
#[tokio::test]
async fn contention_advice_names_the_attribute_setting() {
    const ATTRIBUTE: &str = "`wait = \"..\"` on #[redis_locked]";
    let market = Market::new();
    // Taken by another task, as another holder would (a lease this very task took counts
    // as this task's for deadlock detection).
    let held = elsewhere(&market.locks, "market:7").await;
    let Err(AppError::Lock(busy)) = market.purchase("7").await else {
        panic!("expected a lock error");
    };
    let text = busy.to_string();
    assert!(
        text.ends_with(&format!("retry later or wait for it with {ATTRIBUTE}")),
        "{text}"
    );
    let Err(AppError::Lock(timeout)) = market.purchase_patiently("7").await else {
        panic!("expected a lock error");
    };
    let text = timeout.to_string();
    assert!(text.contains(&format!("raise {ATTRIBUTE}")), "{text}");
    assert!(!text.contains(".wait(..)"), "{text}");

    let plain = market.locks.try_lock("market:7", TTL).await.unwrap_err();
    let text = plain.to_string();
    assert!(text.ends_with("wait for it with .wait(..)"), "{text}");
    assert!(held.release().await.unwrap());

    let permit = market
        .locks
        .semaphore("exports", 1)
        .try_acquire(TTL)
        .await
        .unwrap();
    let full = export(&market.locks).await.unwrap_err();
    let text = full.to_string();
    assert!(matches!(full, LockError::LimitReached { .. }), "{full:?}");
    assert!(
        text.ends_with(&format!("or wait for a permit with {ATTRIBUTE}")),
        "{text}"
    );
    assert!(permit.release().await.unwrap());
}

/// Read, yield, write: loses updates unless the calls are mutually exclusive.
#[redis_locked(key = "counter", ttl = "10s", wait = "30s", locker = locker)]
async fn bump(locker: Locker, counter: Arc<AtomicU64>) -> Result<(), LockError> {
    let seen = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    counter.store(seen + 1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_are_mutually_exclusive_across_tasks() {
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 10;
    let locker = Locker::memory();
    let counter = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locker, counter) = (locker.clone(), Arc::clone(&counter));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    bump(locker.clone(), Arc::clone(&counter)).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), TASKS * ROUNDS);
    assert!(locker.inspect("counter").await.unwrap().is_none());
}

#[derive(Clone, Copy, Debug)]
enum Exit {
    Early,
    Question,
    Panic,
    Normal,
}

#[redis_locked(key = "exit:{id}", locker = locker)]
async fn exits(locker: &Locker, id: u32, how: Exit) -> Result<&'static str, AppError> {
    assert!(locker.inspect(&format!("exit:{id}")).await?.is_some());
    match how {
        Exit::Early => return Ok("early"),
        Exit::Question => Err(AppError::Domain("refused"))?,
        Exit::Panic => panic!("boom"),
        Exit::Normal => {}
    }
    Ok("normal")
}

#[tokio::test]
async fn released_on_every_exit() {
    let locker = Locker::memory();
    assert_eq!(exits(&locker, 1, Exit::Early).await.unwrap(), "early");
    assert!(matches!(
        exits(&locker, 2, Exit::Question).await,
        Err(AppError::Domain("refused"))
    ));
    assert_eq!(exits(&locker, 4, Exit::Normal).await.unwrap(), "normal");
    let spawned = locker.clone();
    let panicked = tokio::spawn(async move { exits(&spawned, 3, Exit::Panic).await }).await;
    assert!(panicked.unwrap_err().is_panic());
    for id in 1..=4 {
        let name = format!("exit:{id}");
        assert!(
            locker.inspect(&name).await.unwrap().is_none(),
            "{name} still held"
        );
    }
}

struct Customer {
    id: u64,
}

struct Order {
    customer: Customer,
    number: u32,
}

struct Wrapper(&'static str);

/// Reports whether `expected` is held while the body runs, and the lease it runs under.
async fn held_now(locker: &Locker, expected: &str) -> Result<(bool, Option<String>), LockError> {
    let held = locker.inspect(expected).await?.is_some();
    Ok((held, current_lease().map(|lease| lease.name().to_owned())))
}

#[redis_locked(key = "market:{item_id}.{price}", locker = locker)]
async fn keyed_by_args(
    locker: &Locker,
    item_id: u32,
    price: u32,
) -> Result<(bool, Option<String>), LockError> {
    held_now(locker, &format!("market:{item_id}.{price}")).await
}

#[redis_locked(key = "order:{order.customer.id}/{order.number}:{label}:{{x}}", locker = locker)]
async fn keyed_by_fields(
    locker: &Locker,
    order: &Order,
    Wrapper(label): Wrapper,
) -> Result<(bool, Option<String>), LockError> {
    held_now(
        locker,
        &format!("order:{}/{}:{label}:{{x}}", order.customer.id, order.number),
    )
    .await
}

#[tokio::test]
async fn the_key_is_built_from_the_arguments() {
    let locker = Locker::memory();
    let (held, lease) = keyed_by_args(&locker, 7, 42).await.unwrap();
    assert!(held, "market:7.42 was not held during the body");
    assert_eq!(lease.as_deref(), Some("market:7.42"));

    let order = Order {
        customer: Customer { id: 9 },
        number: 3,
    };
    let (held, lease) = keyed_by_fields(&locker, &order, Wrapper("gift"))
        .await
        .unwrap();
    assert!(held);
    assert_eq!(lease.as_deref(), Some("order:9/3:gift:{x}"));
    assert!(
        current_lease().is_none(),
        "the lease leaked out of the body"
    );
}

#[redis_locked(key = "account:{id}", wait = "0s", locker = locker)]
async fn outer(locker: &Locker, id: u32) -> Result<u32, LockError> {
    // Same key, same locker, same task: taken again without waiting (wait is zero, so a
    // non-reentrant lock would fail at once with Busy).
    let inner_result = inner(locker, id).await?;
    Ok(inner_result + 1)
}

#[redis_locked(key = "account:{id}", wait = "0s", locker = locker)]
async fn inner(locker: &Locker, id: u32) -> Result<u32, LockError> {
    assert_eq!(
        current_lease().map(|lease| lease.name().to_owned()),
        Some(format!("account:{id}"))
    );
    assert!(locker.inspect(&format!("account:{id}")).await?.is_some());
    Ok(id)
}

#[tokio::test]
async fn nested_calls_with_the_same_key_are_reentrant() {
    let locker = Locker::memory();
    assert_eq!(outer(&locker, 5).await.unwrap(), 6);
    assert!(locker.inspect("account:5").await.unwrap().is_none());
}

#[redis_locked(key = "lease:{n}", ttl = "1m30s", locker = locker)]
async fn lease_inside(locker: &Locker, n: u8) -> Result<Duration, LockError> {
    let lease = current_lease().expect("a lease inside the body");
    assert_eq!(lease.name(), format!("lease:{n}"));
    let info = locker.inspect(lease.name()).await?.expect("held");
    Ok(info.remaining.expect("a TTL"))
}

#[tokio::test]
async fn current_lease_and_ttl_inside_the_body() {
    let locker = Locker::memory();
    assert!(current_lease().is_none());
    let remaining = lease_inside(&locker, 5).await.unwrap();
    assert!(remaining > Duration::from_secs(60), "{remaining:?}");
    assert!(remaining <= Duration::from_secs(90), "{remaining:?}");
    assert!(current_lease().is_none());
}

/// `ttl` as an expression: a parameter's value, at each call.
#[redis_locked(key = "lease:expr", ttl = ttl, locker = locker)]
async fn lease_for(locker: &Locker, ttl: Duration) -> Result<Duration, LockError> {
    let info = locker.inspect("lease:expr").await?.expect("held");
    Ok(info.remaining.expect("a TTL"))
}

#[tokio::test]
async fn an_expression_ttl_is_the_leases_ttl() {
    let locker = Locker::memory();
    for ttl in [TTL, Duration::from_secs(600)] {
        let remaining = lease_for(&locker, ttl).await.unwrap();
        assert!(
            remaining <= ttl && remaining > ttl.saturating_sub(Duration::from_secs(5)),
            "{remaining:?}"
        );
    }
    match lease_for(&locker, Duration::ZERO).await {
        Err(LockError::InvalidDuration {
            what: "ttl", value, ..
        }) => {
            assert_eq!(value, Duration::ZERO);
        }
        other => panic!("a zero ttl must be InvalidDuration, got {other:?}"),
    }
}

#[redis_locked(key = "limits", ttl = "24h", wait = "24h", locker = locker)]
async fn longest_allowed(locker: &Locker) -> Result<(), LockError> {
    assert!(locker.inspect("limits").await?.is_some());
    Ok(())
}

#[tokio::test]
async fn compile_time_limits_match_the_runtime_limits() {
    // The macro accepts up to 24h; lock_core must accept the same.
    assert_eq!(lock_core::MAX_TTL, Duration::from_secs(24 * 3600));
    assert_eq!(lock_core::MAX_WAIT, Duration::from_secs(24 * 3600));
    longest_allowed(&Locker::memory()).await.unwrap();
}

trait Job {
    async fn run(&self, day: u32) -> Result<String, AppError>;
}

struct Nightly {
    locker: Arc<Locker>,
}

impl Job for Nightly {
    #[redis_locked(key = "job:nightly:{day}", locker = self.locker)]
    async fn run(&self, day: u32) -> Result<String, AppError> {
        Ok(current_lease()
            .map(|lease| lease.name().to_owned())
            .unwrap_or_default())
    }
}

#[tokio::test]
async fn trait_impl_methods() {
    let job = Nightly {
        locker: Arc::new(Locker::memory()),
    };
    assert_eq!(job.run(3).await.unwrap(), "job:nightly:3");
}

#[tokio::test]
async fn futures_can_be_spawned() {
    let market = Arc::new(Market::new());
    let spawned = Arc::clone(&market);
    let count = tokio::spawn(async move { spawned.purchase("1").await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count, 1);
    // The domain error variant stays reachable for users.
    assert!(matches!(AppError::Domain("x"), AppError::Domain(_)));
}

/// Without renewal, a body that outlives its TTL finishes; by default its result stands, and
/// the body can see the loss.
#[redis_locked(key = "slow:{n}", ttl = "100ms", renew = false, locker = locker)]
async fn outlives_its_ttl(locker: &Locker, n: u8) -> Result<(u8, bool), LockError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok((n, current_lease().expect("inside the body").is_lost()))
}

/// `on_lost = "error"`: the same body's result becomes `Err(Lost)`.
#[redis_locked(key = "slow:{n}", ttl = "100ms", renew = false, on_lost = "error", locker = locker)]
async fn outlives_its_ttl_strictly(locker: &Locker, n: u8) -> Result<u8, LockError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(n)
}

/// `on_lost = "report"` is the default, spelled out.
#[redis_locked(key = "slow:{n}", ttl = "100ms", renew = false, on_lost = "report", locker = locker)]
async fn outlives_its_ttl_reported(locker: &Locker, n: u8) -> Result<u8, LockError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(n)
}

/// With renewal (the default), the same body keeps its lock.
#[redis_locked(key = "slow:{n}", ttl = "100ms", locker = locker)]
async fn renewed_past_its_ttl(locker: &Locker, n: u8) -> Result<u8, LockError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lease = current_lease().expect("inside the body");
    assert!(!lease.is_lost());
    Ok(n)
}

/// `on_lost = "cancel"` stops the body as soon as the lease is lost.
#[redis_locked(key = "slow:{n}", ttl = "100ms", renew = false, on_lost = "cancel", locker = locker)]
async fn cancelled_when_lost(
    locker: &Locker,
    n: u8,
    reached: Arc<AtomicUsize>,
) -> Result<u8, LockError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    reached.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

#[tokio::test]
async fn renewal_and_loss_policies() {
    let locker = Locker::memory();
    assert_eq!(
        outlives_its_ttl(&locker, 1).await.expect("stands"),
        (1, true)
    );
    assert_eq!(
        outlives_its_ttl_reported(&locker, 4).await.expect("stands"),
        4
    );
    assert!(matches!(
        outlives_its_ttl_strictly(&locker, 5).await,
        Err(LockError::Lost { .. })
    ));
    assert_eq!(renewed_past_its_ttl(&locker, 2).await.expect("renewed"), 2);
    let reached = Arc::new(AtomicUsize::new(0));
    assert!(matches!(
        cancelled_when_lost(&locker, 3, reached.clone()).await,
        Err(LockError::Lost { .. })
    ));
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the body stopped at its await"
    );
}

/// `name` locked for [`TTL`] by a task of its own.
async fn elsewhere(locks: &Locker, name: &'static str) -> lock_core::Lease {
    let locks = locks.clone();
    tokio::spawn(async move { locks.try_lock(name, TTL).await })
        .await
        .expect("join")
        .expect("take the lock")
}
