//! ACP's use of the shared JSON-RPC peer (`gateway_wire::jsonrpc`): its error codes beyond
//! JSON-RPC's own, and its spans (`ACP <method>`, joining the trace context an editor or agent
//! carries in `params._meta`). The method names stay with their handlers (`editor`, `backend`).

use gateway_wire::jsonrpc::Spans;
pub use gateway_wire::jsonrpc::{
    Frame, Handler, Inbound, MAX_IN_FLIGHT, OUT_BYTES, Peer, PeerOptions, Reply, RpcError, clip, framing, params,
};
use serde_json::Value;

/// JSON-RPC's error codes and ACP's.
pub mod code {
    pub use gateway_wire::jsonrpc::code::*;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    pub const AUTH_REQUIRED: i64 = -32000;
}

/// ACP's "resource not found" error.
pub fn not_found(message: impl Into<String>) -> RpcError {
    RpcError::new(code::RESOURCE_NOT_FOUND, message)
}

/// ACP's "authentication required" error: the editor offers the user the `authMethods` of
/// `initialize`, then calls `authenticate`.
pub fn auth_required(message: impl Into<String>) -> RpcError {
    RpcError::new(code::AUTH_REQUIRED, message)
}

/// The options of an ACP connection: `lenient` for an agent's stdout.
pub fn options(lenient: bool) -> PeerOptions {
    PeerOptions { lenient, spans: &AcpSpans }
}

/// `acp_request` spans named `ACP <method>`.
struct AcpSpans;

/// The one `acp_request` span, either way: `kind` is `client` for the calls this side makes,
/// `server` for those it answers.
fn acp_span(kind: &'static str, peer: &'static str, method: &str) -> tracing::Span {
    tracing::info_span!(
        "acp_request",
        otel.name = format!("ACP {}", clip(method, 100)),
        otel.kind = kind,
        rpc.system = "jsonrpc",
        rpc.method = %clip(method, 100),
        peer,
    )
}

impl Spans for AcpSpans {
    fn outbound(&self, peer: &'static str, method: &str) -> tracing::Span {
        acp_span("client", peer, method)
    }

    /// A child of the trace context the caller sent in `params._meta.traceparent` (and
    /// `tracestate`), where present.
    fn inbound(&self, peer: &'static str, method: &str, params: &Value) -> tracing::Span {
        let span = acp_span("server", peer, method);
        let meta = params.get("_meta");
        let carried = meta.and_then(|m| m.get("traceparent")).and_then(Value::as_str).and_then(|traceparent| {
            gateway_core::trace::TraceContext::from_headers(
                traceparent,
                meta.and_then(|m| m.get("tracestate")).and_then(Value::as_str),
            )
        });
        gateway_core::trace::adopt(&span, carried.as_ref());
        span
    }
}
