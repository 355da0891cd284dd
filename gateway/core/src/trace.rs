//! Distributed trace context, carried as opaque W3C strings.
//!
//! A turn runs later than the request that admitted it, maybe in another process, so the
//! request's trace context travels durably with the run (`Run::trace`, stored by the store)
//! and the Worker opens the turn's span under it. The crates that carry it never interpret
//! it: only the binary's telemetry edge knows the tracing system (OpenTelemetry), and it
//! plugs in here once, at start-up, through [`install`].
//!
//! Why a process-wide hook rather than a value handed down: it extends the `tracing`
//! dispatcher, which is itself process-wide, and the span it reads ("the current one") is
//! only reachable through that dispatcher. Until [`install`] runs (telemetry off, tests,
//! library users) every function here is a no-op that costs one atomic load.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The longest `traceparent` or `tracestate` value kept; anything longer is not carried
/// (W3C bounds `tracestate` at 32 members of 256 bytes; a `traceparent` is 55 bytes).
pub const MAX_LEN: usize = 512;

/// One span's context in W3C Trace Context form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// The `traceparent` header value (`00-<trace id>-<span id>-<flags>`).
    pub traceparent: String,
    /// The `tracestate` header value, if any.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A context from the two header values as received, if they are within bounds and
    /// printable ASCII (they come from the network; the telemetry edge parses them).
    pub fn from_headers(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let fits = |v: &str| !v.is_empty() && v.len() <= MAX_LEN && v.bytes().all(|b| (0x20..0x7f).contains(&b));
        if !fits(traceparent) {
            return None;
        }
        Some(Self {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.filter(|s| fits(s)).map(str::to_owned),
        })
    }

    /// The headers that carry this context on an outbound HTTP request.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        std::iter::once(("traceparent", self.traceparent.as_str()))
            .chain(self.tracestate.as_deref().map(|s| ("tracestate", s)))
    }
}

/// What the telemetry edge provides: reading the current span's context and adopting a
/// carried one as a span's parent.
pub trait Propagation: Send + Sync {
    /// The context of the current `tracing` span, if it is being traced.
    fn current(&self) -> Option<TraceContext>;
    /// Makes `parent` (carried from elsewhere) the parent of `span`, which must not have
    /// been entered yet.
    fn adopt(&self, span: &tracing::Span, parent: &TraceContext);
}

static PROPAGATION: OnceLock<Box<dyn Propagation>> = OnceLock::new();

/// Plugs the telemetry edge in; the first call wins (the binary calls it once).
pub fn install(propagation: Box<dyn Propagation>) {
    let _ = PROPAGATION.set(propagation);
}

/// Whether traces are exported: callers skip spans that only tracing needs.
pub fn enabled() -> bool {
    PROPAGATION.get().is_some()
}

/// The current span's context, to store with a run or send on an outbound request; `None`
/// while tracing is off.
pub fn current() -> Option<TraceContext> {
    PROPAGATION.get()?.current()
}

/// Makes `span` a child of `parent` when tracing is on and a context was carried.
pub fn adopt(span: &tracing::Span, parent: Option<&TraceContext>) {
    if let (Some(p), Some(parent)) = (PROPAGATION.get(), parent) {
        p.adopt(span, parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_headers_keeps_only_bounded_printable_values() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        type Headers<'a> = (&'a str, Option<&'a str>);
        let cases: &[(&str, Option<&str>, Option<Headers>)] = &[
            (tp, None, Some((tp, None))),
            (tp, Some("a=1,b=2"), Some((tp, Some("a=1,b=2")))),
            (tp, Some("bad\nstate"), Some((tp, None))),
            ("", None, None),
            ("00-\u{7f}", None, None),
        ];
        for (traceparent, tracestate, want) in cases {
            let got = TraceContext::from_headers(traceparent, *tracestate);
            let want = want.map(|(p, s)| TraceContext { traceparent: p.into(), tracestate: s.map(Into::into) });
            assert_eq!(got, want, "{traceparent:?} {tracestate:?}");
        }
        assert!(TraceContext::from_headers(&"0".repeat(MAX_LEN + 1), None).is_none());
    }
}
