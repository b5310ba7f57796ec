//! Times when the client's own runtime did not run: the process was not scheduled (a
//! loaded machine, a SIGSTOP), or a synchronous step (a log write waiting for the disk)
//! held the thread. No request can return meanwhile, whatever the library does, so the
//! checker does not count such time against a request's deadline.
//!
//! A ticker on the client's runtime expects to run every [`TICK`]; when it runs more than
//! [`NOTICEABLE`] late, the lateness is logged as an [`Event::Hiccup`]. It ticks until every
//! workload task has ended, not merely until the client is told to stop: the requests in
//! flight then end afterwards, judged like any other, and a stall during them (the whole
//! machine busy as a run winds down) must be seen too.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Ctx;
use crate::clock;
use crate::event::Event;

/// How often the ticker runs.
const TICK: Duration = Duration::from_millis(5);

/// Lateness below this is ordinary timer and scheduling jitter, not logged.
const NOTICEABLE: Duration = Duration::from_millis(10);

/// Runs until every workload task has ended, then takes one last look (so a stall up to
/// the end is logged).
pub(super) async fn watch(ctx: &Ctx) {
    let tick = clock::nanos(TICK);
    let noticeable = clock::nanos(NOTICEABLE);
    let mut last = clock::now();
    loop {
        let over = ctx.workload_over.load(Ordering::Relaxed);
        tokio::time::sleep(TICK).await;
        let now = clock::now();
        let expected = last + tick;
        if now > expected + noticeable {
            ctx.log(&Event::Hiccup {
                client: ctx.args.id,
                t_start: expected,
                t_end: now,
            });
        }
        last = now;
        if over {
            return;
        }
    }
}
