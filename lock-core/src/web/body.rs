//! The response body of a guarded service: the inner body (holding the lease until its end
//! with [`HoldUntil::BodyEnd`](super::HoldUntil::BodyEnd)), or a rejection's bytes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::held::Held;

type Release = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project! {
    /// The body of a response that went through a [`LockLayer`](super::LockLayer).
    ///
    /// Either the inner service's body, passed through frame by frame, or the body of a
    /// rejection (a problem document). With [`HoldUntil::BodyEnd`](super::HoldUntil::BodyEnd)
    /// it carries the lease: when the inner body ends (or fails) the lock is released *before*
    /// the last frame is handed on, so a client that saw the whole response can take the lock
    /// at once; if the body is dropped early (the client went away), the lease is released in
    /// the background.
    pub struct LockBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            hold: Hold,
        },
        Full {
            data: Option<Bytes>,
        },
    }
}

/// What the body does with the lease.
enum Hold {
    /// No lease (released before the response was returned, or never taken).
    None,
    /// Held until the body ends.
    Lease(Held),
    /// The body ended: the release runs, then `then` (the last frame, or the end) is handed
    /// on.
    Releasing {
        release: Release,
        then: Option<Frame<Bytes>>,
    },
}

impl<B> LockBody<B> {
    /// The inner body, the lock already released (or never taken).
    pub(crate) fn inner(body: B) -> LockBody<B> {
        LockBody {
            kind: Kind::Inner {
                body,
                hold: Hold::None,
            },
        }
    }

    /// The inner body, releasing `lease` when it ends.
    pub(crate) fn holding(body: B, lease: Held) -> LockBody<B> {
        LockBody {
            kind: Kind::Inner {
                body,
                hold: Hold::Lease(lease),
            },
        }
    }

    /// A complete body of its own (a rejection).
    pub(crate) fn full(data: Bytes) -> LockBody<B> {
        LockBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B> Body for LockBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Full { data } => Poll::Ready(data.take().map(|data| Ok(Frame::data(data)))),
            KindProj::Inner { mut body, hold } => loop {
                if let Hold::Releasing { release, then } = hold {
                    ready!(release.as_mut().poll(cx));
                    let frame = then.take();
                    *hold = Hold::None;
                    return Poll::Ready(frame.map(Ok));
                }
                let frame = ready!(body.as_mut().poll_frame(cx));
                if !matches!(hold, Hold::Lease(_)) {
                    return Poll::Ready(frame);
                }
                let last = match frame {
                    Some(Ok(frame)) if !body.is_end_stream() => {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    Some(Ok(frame)) => Some(frame),
                    None => None,
                    Some(Err(err)) => {
                        // The body failed and will not be polled again: dropping the lease
                        // releases it in the background.
                        *hold = Hold::None;
                        return Poll::Ready(Some(Err(err)));
                    }
                };
                if let Hold::Lease(lease) = std::mem::replace(hold, Hold::None) {
                    *hold = Hold::Releasing {
                        release: Box::pin(lease.release()),
                        then: last,
                    };
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data } => data.is_none(),
            Kind::Inner { body, hold } => matches!(hold, Hold::None) && body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
            Kind::Inner { body, .. } => body.size_hint(),
        }
    }
}

impl<B> fmt::Debug for LockBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "Inner",
            Kind::Full { .. } => "Full",
        };
        f.debug_struct("LockBody")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}
