//! The defaults of every entry point, in one place; the crate docs ("Defaults") give the
//! table and the reasons.

use std::time::Duration;

/// How long a lock outlives a holder that crashed, unless the locker or request says.
pub(crate) const TTL: Duration = Duration::from_secs(30);

/// How long a business call waits for a busy lock: long enough to queue behind a holder
/// doing the same short work (the book's `acquire_timeout`), short enough to fail visibly.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// How long a waiting request keeps trying while Redis does not answer: long enough to
/// ride out a dropped connection or a quick restart, short enough that an outage fails a
/// locked call quickly instead of stalling it for its whole wait.
pub(crate) const UNREACHABLE: Duration = Duration::from_secs(2);

/// How long an HTTP request waits for a busy lock: not at all. The client is told 409 with
/// `Retry-After` at once instead of holding a connection (and a server slot) while the
/// holder works; it decides whether to retry.
pub(crate) const HANDLER_WAIT: Duration = Duration::ZERO;
