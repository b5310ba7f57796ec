//! lock-core's tracing spans, as a subscriber sees them: `lock.acquire` with name, ttl_ms,
//! wait_ms, attempts, waited_us and outcome; `lock.release` with name, held_ms and held.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One closed span: its name and every field recorded on it, as text.
#[derive(Debug, Clone)]
struct Closed {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

impl Closed {
    fn get(&self, field: &str) -> &str {
        self.fields
            .get(field)
            .unwrap_or_else(|| panic!("span {} has no field {field}: {:?}", self.name, self.fields))
    }

    fn number(&self, field: &str) -> u64 {
        self.get(field)
            .parse()
            .unwrap_or_else(|_| panic!("{field}: {:?}", self.fields))
    }
}

/// Records the fields of every span, at creation and on later `record` calls, and keeps
/// them when the span closes.
#[derive(Clone, Default)]
struct Recorder {
    closed: Arc<Mutex<Vec<Closed>>>,
}

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S> Layer<S> for Recorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let fields = span
            .extensions_mut()
            .remove::<Fields>()
            .map(|f| f.0)
            .unwrap_or_default();
        self.closed.lock().unwrap().push(Closed {
            name: span.name(),
            fields,
        });
    }
}

#[test]
fn acquire_and_release_spans_carry_their_fields() {
    let server = RedisServer::start();
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let locker = Locker::from_url(&server.url()).unwrap();
        let other = Locker::from_url(&server.url()).unwrap();
        let lease = locker
            .lock("spans:report")
            .ttl(Duration::from_secs(5))
            .wait(Duration::ZERO)
            .await
            .unwrap();
        let busy = other.try_lock("spans:report", Duration::from_secs(5)).await;
        assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
        let timeout = other
            .lock("spans:report")
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_millis(300))
            .await;
        assert!(
            matches!(timeout, Err(LockError::Timeout { .. })),
            "{timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(lease.release().await.unwrap());

        // A lease that expired before its release: held=false.
        let short = locker
            .lock("spans:short")
            .ttl(Duration::from_millis(50))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!short.release().await.unwrap());
    });
    drop(runtime);

    let closed = recorder.closed.lock().unwrap().clone();
    let acquires: Vec<&Closed> = closed.iter().filter(|s| s.name == "lock.acquire").collect();
    let releases: Vec<&Closed> = closed.iter().filter(|s| s.name == "lock.release").collect();
    assert_eq!(acquires.len(), 4, "{closed:#?}");
    assert_eq!(releases.len(), 2, "{closed:#?}");

    let outcomes: Vec<&str> = acquires.iter().map(|s| s.get("outcome")).collect();
    assert_eq!(outcomes, ["acquired", "busy", "timeout", "acquired"]);
    for span in &acquires[..3] {
        assert_eq!(span.get("name"), "spans:report");
        assert_eq!(span.number("ttl_ms"), 5000);
        assert!(span.number("attempts") >= 1, "{span:?}");
        span.number("waited_us");
    }
    assert_eq!(acquires[0].number("wait_ms"), 0);
    assert_eq!(acquires[0].number("attempts"), 1);
    assert_eq!(acquires[1].number("wait_ms"), 0);
    assert_eq!(acquires[2].number("wait_ms"), 300);
    assert!(
        acquires[2].number("waited_us") >= 250_000,
        "{:?}",
        acquires[2]
    );
    assert_eq!(acquires[3].get("name"), "spans:short");
    assert_eq!(acquires[3].number("ttl_ms"), 50);

    assert_eq!(releases[0].get("name"), "spans:report");
    assert_eq!(releases[0].get("held"), "true");
    assert!(releases[0].number("held_ms") >= 20, "{:?}", releases[0]);
    assert_eq!(releases[1].get("name"), "spans:short");
    assert_eq!(releases[1].get("held"), "false");
    assert!(releases[1].number("held_ms") >= 200, "{:?}", releases[1]);
}
