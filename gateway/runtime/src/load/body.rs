//! Request bodies under two bounds, so that slow uploads can neither pin the process's memory
//! nor hold their request places for ever (issue 28, finding 4: a thousand trickling 1 MB
//! uploads took the process from 145 MB to 2.4 GB).
//!
//! - **A byte budget for the whole process** (`max_body_bytes_in_flight`). Every byte of a
//!   body is charged as it arrives, up to what its route can hold at once (the whole body for
//!   a JSON route, which buffers it; one chunk for a file upload, which streams it to the
//!   store), and given back when the request ends. A body that would take the budget past its
//!   bound is refused as busy: the client retries later, the process keeps its memory.
//! - **A minimum rate** (`min_body_bytes_per_sec`, after `body_rate_grace_secs`). The idle
//!   deadline of the HTTP server cuts a body that stops; this cuts one that trickles just
//!   inside it. Checked when a piece arrives, on the average since the request's head.
//!
//! The face that admitted the request reads the [`Charge`] once its handler is done: a body
//! cut off here fails the handler's extraction, and the face answers with its own busy (or
//! request timeout) shape instead of the extractor's error.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::{AdmissionLimits, Busy, BusyCause, RequestPermit};
use gateway_services::metrics::Metrics;

/// Why a body was cut off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefusal {
    /// The process holds as many body bytes as it may: retry later.
    #[error(transparent)]
    Busy(Busy),
    /// The body arrived more slowly than the minimum rate.
    #[error("the request body arrived more slowly than {min_bytes_per_sec} bytes per second")]
    TooSlow { min_bytes_per_sec: u64 },
}

/// The process's body budget.
pub(super) struct Budget {
    limit: usize,
    used: AtomicUsize,
    min_rate: u64,
    grace: Duration,
    retry_after: Duration,
    metrics: Arc<Metrics>,
}

impl Budget {
    pub(super) fn new(limits: &AdmissionLimits, metrics: Arc<Metrics>) -> Self {
        Self {
            limit: limits.max_body_bytes_in_flight,
            used: AtomicUsize::new(0),
            min_rate: limits.min_body_bytes_per_sec,
            grace: limits.body_rate_grace,
            retry_after: limits.retry_after,
            metrics,
        }
    }

    /// Takes `n` more bytes, or none at all if they would pass the bound.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }
}

/// What one request's body costs the budget: held until both the body and the face that
/// admitted the request have dropped it, then given back.
pub struct Charge {
    budget: Arc<Budget>,
    /// The most this request may hold of the budget at once.
    cap: usize,
    held: AtomicUsize,
    refusal: Mutex<Option<BodyRefusal>>,
}

impl Charge {
    /// Why the body was cut off, if it was.
    pub fn refusal(&self) -> Option<BodyRefusal> {
        self.refusal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Charges `read` bytes read so far, `elapsed` after the request's head.
    fn account(&self, read: u64, elapsed: Duration) -> Result<(), BodyRefusal> {
        if elapsed > self.budget.grace && (read as f64) < self.budget.min_rate as f64 * elapsed.as_secs_f64() {
            return Err(BodyRefusal::TooSlow { min_bytes_per_sec: self.budget.min_rate });
        }
        let wanted = usize::try_from(read).unwrap_or(usize::MAX).min(self.cap);
        let held = self.held.load(Ordering::Acquire);
        if wanted > held {
            if !self.budget.take(wanted - held) {
                self.budget.metrics.refused(BusyCause::BodyBytes);
                return Err(BodyRefusal::Busy(Busy {
                    cause: BusyCause::BodyBytes,
                    limit: self.budget.limit as u64,
                    retry_after: self.budget.retry_after,
                }));
            }
            self.held.store(wanted, Ordering::Release);
        }
        Ok(())
    }

    fn refuse(&self, refusal: BodyRefusal) -> BodyRefusal {
        *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(refusal.clone());
        refusal
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(*self.held.get_mut(), Ordering::AcqRel);
    }
}

impl RequestPermit {
    /// Meters `body` against the process's budget and rate: at most `cap` of its bytes are
    /// charged at once (what the route holds in memory while reading it). The returned
    /// [`Charge`] says afterwards whether the body was cut off.
    pub fn meter<B>(&self, body: B, cap: usize) -> (Metered<B>, Arc<Charge>) {
        let charge = Arc::new(Charge {
            budget: Arc::clone(&self.bodies),
            cap,
            held: AtomicUsize::new(0),
            refusal: Mutex::new(None),
        });
        (Metered { inner: body, charge: Arc::clone(&charge), read: 0, started: Instant::now() }, charge)
    }
}

/// A request body read under its [`Charge`].
pub struct Metered<B> {
    inner: B,
    charge: Arc<Charge>,
    read: u64,
    started: Instant,
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.read += data.len() as u64;
                    if let Err(refusal) = this.charge.account(this.read, this.started.elapsed()) {
                        return Poll::Ready(Some(Err(Box::new(this.charge.refuse(refusal)))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Load;
    use http_body_util::BodyExt;

    fn load(max_body: usize, min_rate: u64, grace: Duration) -> Load {
        let limits = AdmissionLimits {
            max_body_bytes_in_flight: max_body,
            min_body_bytes_per_sec: min_rate,
            body_rate_grace: grace,
            ..Default::default()
        };
        Load::new(limits, Arc::new(Metrics::default()))
    }

    type Frames = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::convert::Infallible>>>;

    fn body(pieces: &[&'static [u8]]) -> http_body_util::StreamBody<Frames> {
        let frames: Vec<_> = pieces.iter().map(|p| Ok(Frame::data(Bytes::from_static(p)))).collect();
        http_body_util::StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn bodies_share_one_budget_up_to_what_their_route_holds_and_give_it_back() {
        let load = load(10, 0, Duration::from_secs(60));
        let a = load.try_request(None).expect("place");
        let (metered, first) = a.meter(body(&[b"123456", b"78"]), usize::MAX);
        metered.collect().await.expect("8 of 10 bytes");
        assert_eq!(first.refusal(), None);

        // A streaming route holds at most its cap, however long its body.
        let b = load.try_request(None).expect("place");
        let (metered, streaming) = b.meter(body(&[b"1", b"2", b"3", b"4", b"5"]), 2);
        metered.collect().await.expect("only 2 bytes are held at once");
        assert_eq!(streaming.refusal(), None);

        // 8 + 2 held: a third body finds the budget spent and is refused as busy.
        let c = load.try_request(None).expect("place");
        let (metered, third) = c.meter(body(&[b"x"]), usize::MAX);
        let err = metered.collect().await.expect_err("refused");
        assert!(err.to_string().contains("bytes of request bodies are being read"), "{err}");
        assert!(matches!(third.refusal(), Some(BodyRefusal::Busy(Busy { cause: BusyCause::BodyBytes, .. }))));

        // Once the first request ends, its bytes are given back.
        drop(first);
        let (metered, again) = c.meter(body(&[b"123456"]), usize::MAX);
        metered.collect().await.expect("the first body's bytes were given back");
        assert_eq!(again.refusal(), None);
    }

    #[tokio::test]
    async fn a_body_slower_than_the_minimum_rate_is_cut_off_after_the_grace() {
        let load = load(1 << 20, 1000, Duration::from_millis(50));
        let permit = load.try_request(None).expect("place");
        let (mut metered, charge) = permit.meter(body(&[b"a", b"b"]), usize::MAX);
        let first = metered.frame().await.expect("a frame").expect("within the grace");
        assert!(first.is_data());
        tokio::time::sleep(Duration::from_millis(120)).await;
        let err = metered.frame().await.expect("a frame").expect_err("2 bytes in 120 ms is too slow");
        assert_eq!(err.to_string(), "the request body arrived more slowly than 1000 bytes per second");
        assert_eq!(charge.refusal(), Some(BodyRefusal::TooSlow { min_bytes_per_sec: 1000 }));
    }
}
