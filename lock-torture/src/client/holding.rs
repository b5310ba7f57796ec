//! How the holder of an auto-renewed lease spends its hold: it looks at the lease every
//! quarter of a TTL, as code that checks before each step of its work would.
//!
//! Each look is logged: `Observed` with the validity the lease reports while it is not
//! lost (the renewer moves it in the background), `LostDetected` the first time it is. A
//! careful holder also listens for the loss signal and stops working then, but keeps
//! looking for one more TTL; a naive one goes on looking until its hold is over. Loss is
//! final, so once a look (or the signal) said lost, no later look may say otherwise: a
//! renewal sent before the lease ran out and answered after it (as late as two one-way
//! delays later) must not revive it (rule `revived-lease`).

use std::time::Duration;

use super::guard::Guard;
use super::Ctx;
use crate::clock::{self, Nanos};
use crate::event::Event;

/// Holds `lease` for `hold`; true when the holder learnt that it was lost.
pub(super) async fn renewed(
    ctx: &Ctx,
    lease: &Guard,
    id: &str,
    hold: Duration,
    careful: bool,
    sabotage: Nanos,
) -> bool {
    let lost_detected = |how: &str| {
        ctx.log(&Event::LostDetected {
            id: id.to_owned(),
            t: clock::now(),
            how: how.to_owned(),
        });
    };
    let mut end = tokio::time::Instant::now() + hold;
    let mut lost = false;
    let mut stopped = false;
    loop {
        let step = end
            .saturating_duration_since(tokio::time::Instant::now())
            .min(ctx.ttl() / 4);
        if step.is_zero() {
            return lost;
        }
        // `--mode steal`: a naive holder listens too, until it is told (then holds on).
        if (careful && !stopped) || (ctx.args.steal_watch && !lost) {
            tokio::select! {
                () = tokio::time::sleep(step) => {}
                () = lease.lost() => {
                    lost = true;
                    lost_detected("signal");
                }
            }
        } else {
            tokio::time::sleep(step).await;
        }
        look(ctx, lease, id, &mut lost, sabotage);
        if careful && lost && !stopped {
            // Stop working, but keep an eye on the lease for one more TTL, by when any
            // renewal in flight has come back.
            stopped = true;
            end = tokio::time::Instant::now() + ctx.ttl();
        }
    }
}

/// One look at the lease, logged.
fn look(ctx: &Ctx, lease: &Guard, id: &str, lost: &mut bool, sabotage: Nanos) {
    if !lease.is_lost() {
        observe(ctx, lease, id, sabotage);
    } else if !*lost {
        *lost = true;
        ctx.log(&Event::LostDetected {
            id: id.to_owned(),
            t: clock::now(),
            how: "is_lost".to_owned(),
        });
    }
}

/// Logs the validity an auto-renewed lease reports now: the renewer moves it in the
/// background, and the holder trusts whatever it reads. Stamped with the reading itself
/// (the instant just before it, and its end that far ahead), never with an earlier stamp:
/// a client stopped (`pause`) between a stamp and the reading would otherwise log, as seen
/// before the stop, an end read after it. A reading of nothing left claims nothing and is
/// not logged (its end would be the reading's own instant, as if trusted until then).
pub(super) fn observe(ctx: &Ctx, lease: &Guard, id: &str, sabotage: Nanos) {
    let (t, left, valid_until) = clock::reading(|| lease.expires_in());
    if left.is_zero() {
        return;
    }
    ctx.log(&Event::Observed {
        id: id.to_owned(),
        t,
        valid_until: valid_until + sabotage,
    });
}
