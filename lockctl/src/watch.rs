//! `lockctl watch NAME`: acquire and release events of one lock, as they happen.
//!
//! Releases come from the lock's release channel (`<prefix>{NAME}:released`, published by
//! lock-core's release and by `lockctl release --force`); acquisitions, expiries and
//! deletions are seen by reading the key every `--interval` (one `GET` + `PTTL`), and at once
//! after each notification. Memory use is constant; the program ends on Ctrl-C, SIGTERM,
//! after `--count` events, or with exit code 69 when the connection to Redis breaks.

use std::time::{Duration, SystemTime};

use futures_util::StreamExt as _;
use redis::Msg;
use serde_json::json;
use tokio::time::{Instant, MissedTickBehavior};

use crate::cli::WatchArgs;
use crate::duration::{format_duration, millis};
use crate::exit::{Failure, SUCCESS};
use crate::holder::{display_safe, split_value, Holder};
use crate::output::line;
use crate::signals::Signals;
use crate::store::{LockKeys, Store, Target, FORCED_MESSAGE};

/// How long to wait for a release notification once the key is seen gone, before calling
/// the disappearance an expiry or a deletion.
const NOTIFICATION_GRACE: Duration = Duration::from_millis(200);

/// The holder currently on the key, as last seen.
#[derive(Debug)]
struct Seen {
    value: String,
    /// When we saw it appear (`None` for the holder found at start).
    since: Option<Instant>,
    /// Remaining TTL at the last look, and when that look was.
    remaining: Option<Duration>,
    looked_at: Instant,
}

/// A release notification's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notice {
    Released,
    Forced,
}

impl Notice {
    fn of(message: &Msg) -> Notice {
        match message.get_payload::<String>() {
            Ok(payload) if payload == FORCED_MESSAGE => Notice::Forced,
            _ => Notice::Released,
        }
    }

    fn event(self) -> &'static str {
        match self {
            Notice::Released => "released",
            Notice::Forced => "force-released",
        }
    }
}

/// Runs `lockctl watch`.
pub async fn watch(target: &Target, args: &WatchArgs) -> Result<u8, Failure> {
    let keys = target.keys(&args.name)?;
    if args.interval.is_zero() {
        return Err(Failure::usage("--interval must be above zero"));
    }
    let mut signals = Signals::install()?;
    let mut store = target.connect().await?;
    let client = target.client()?;
    let unreachable = |what: String| {
        Failure::unavailable(format!(
            "cannot reach Redis at {}: {what}",
            target.shown_url
        ))
    };
    let mut pubsub = match tokio::time::timeout(target.timeout, client.get_async_pubsub()).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(err)) => return Err(Failure::from_redis(&err, &target.shown_url)),
        Err(_) => {
            return Err(unreachable(format!(
                "no answer within {:?}",
                target.timeout
            )))
        }
    };
    match tokio::time::timeout(target.timeout, pubsub.subscribe(&keys.channel)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(Failure::from_redis(&err, &target.shown_url)),
        Err(_) => {
            return Err(unreachable(format!(
                "no answer within {:?}",
                target.timeout
            )))
        }
    }
    let mut messages = pubsub.into_on_message();

    let mut watcher = Watcher {
        keys,
        name: args.name.clone(),
        json: args.json,
        interval: args.interval,
        current: None,
        events: 0,
    };
    // Subscribed first, then looked: nothing falls between the two.
    watcher.current = watcher.look(&mut store).await?;
    watcher.start()?;

    let mut ticker = tokio::time::interval(args.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        if args.count.is_some_and(|count| watcher.events >= count) {
            return Ok(SUCCESS);
        }
        let notice = tokio::select! {
            _ = signals.recv() => return Ok(SUCCESS),
            message = messages.next() => match message {
                Some(message) => Some(Notice::of(&message)),
                None => return Err(unreachable("the connection was closed".into())),
            },
            _ = ticker.tick() => None,
        };
        let now = watcher.look(&mut store).await?;
        let messages = &mut messages;
        watcher
            .step(now, notice, move || async move {
                // The key is gone and no notification came: it may be on its way.
                match tokio::time::timeout(NOTIFICATION_GRACE, messages.next()).await {
                    Ok(Some(message)) => Some(Notice::of(&message)),
                    _ => None,
                }
            })
            .await?;
    }
}

struct Watcher {
    keys: LockKeys,
    name: String,
    json: bool,
    interval: Duration,
    current: Option<Seen>,
    events: u64,
}

impl Watcher {
    /// Reads the key.
    async fn look(&self, store: &mut Store) -> Result<Option<Seen>, Failure> {
        let looked_at = Instant::now();
        let peeked = store.peek_listening(&self.keys).await?;
        Ok(peeked.map(|(value, remaining)| Seen {
            value,
            since: None,
            remaining,
            looked_at,
        }))
    }

    /// The first line: the state at start.
    fn start(&self) -> Result<(), Failure> {
        match &self.current {
            Some(seen) => self.print("held", Who::of(seen), seen.remaining, None),
            None => self.print("free", Who::Unseen, None, None),
        }
    }

    /// Compares what is on the key now with what was, and prints what happened between.
    async fn step<F, Fut>(
        &mut self,
        mut now: Option<Seen>,
        mut notice: Option<Notice>,
        wait_for_notice: F,
    ) -> Result<(), Failure>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Option<Notice>>,
    {
        if let (Some(before), Some(after)) = (&self.current, &mut now) {
            if before.value == after.value {
                // Still the same holder (perhaps renewed). A notification now is about an
                // earlier holder, already reported.
                after.since = before.since;
                self.current = now;
                return Ok(());
            }
        }
        if let Some(before) = self.current.take() {
            if notice.is_none() {
                notice = wait_for_notice().await;
            }
            let event = match notice {
                Some(notice) => notice.event(),
                None => {
                    // Gone without a notification: at the end of its TTL, or deleted.
                    let slack = self.interval + NOTIFICATION_GRACE + Duration::from_millis(20);
                    let expected_end = before.remaining.map(|left| before.looked_at + left);
                    if expected_end.is_some_and(|end| end <= Instant::now() + slack) {
                        "expired"
                    } else {
                        "deleted"
                    }
                }
            };
            let held = before.since.map(|since| since.elapsed());
            self.print(event, Who::of(&before), None, held)?;
            self.events += 1;
        } else if let (Some(notice), None) = (notice, &now) {
            // Taken and given back between two looks.
            self.print(notice.event(), Who::Unseen, None, None)?;
            self.events += 1;
        }
        if let Some(after) = &mut now {
            after.since = Some(after.looked_at);
            self.print("acquired", Who::of(after), after.remaining, None)?;
            self.events += 1;
        }
        self.current = now;
        Ok(())
    }

    fn print(
        &self,
        event: &str,
        who: Who<'_>,
        remaining: Option<Duration>,
        held: Option<Duration>,
    ) -> Result<(), Failure> {
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let holder = match who {
            Who::Label(label) => Some(label),
            Who::Unlabelled | Who::Unseen => None,
        };
        if self.json {
            let parts = holder.map(Holder::parse);
            let value = json!({
                "time": time,
                "event": event,
                "name": self.name,
                "holder": holder,
                "app": parts.as_ref().and_then(|h| h.app.clone()),
                "host": parts.as_ref().and_then(|h| h.host.clone()),
                "pid": parts.as_ref().and_then(|h| h.pid),
                "ttl_ms": remaining.map(millis),
                "held_ms": held.map(millis),
            });
            line(&value.to_string())?;
            return Ok(());
        }
        let mut text = format!("{time}  {event:<14}  ");
        match who {
            _ if event == "free" => {
                text.push_str(&format!("lock `{}` is free", display_safe(&self.name)));
            }
            Who::Label(label) => text.push_str(&display_safe(label)),
            Who::Unlabelled => text.push_str("(holder without a label)"),
            Who::Unseen => text.push_str("(a holder that came and went between two looks)"),
        }
        let mut details = Vec::new();
        if let Some(left) = remaining {
            details.push(format!("ttl left {}", format_duration(left)));
        }
        if let Some(held) = held {
            details.push(format!("held {}", format_duration(held)));
        }
        if !details.is_empty() {
            text.push_str(&format!(" ({})", details.join(", ")));
        }
        line(&text)?;
        Ok(())
    }
}

/// Whom an event is about.
#[derive(Debug, Clone, Copy)]
enum Who<'a> {
    Label(&'a str),
    Unlabelled,
    /// A holder that was never seen on the key.
    Unseen,
}

impl<'a> Who<'a> {
    fn of(seen: &'a Seen) -> Who<'a> {
        match split_value(&seen.value).1 {
            Some(label) => Who::Label(label),
            None => Who::Unlabelled,
        }
    }
}
