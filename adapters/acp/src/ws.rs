//! ACP over WebSocket at `/acp` (the draft remote-transport RFD's framing): one JSON-RPC
//! message per text frame, binary frames ignored, the first message `initialize`. Editors
//! reach it through the relay `gateway acp --url` (`crate::relay`, ADR 0030).
//! Each connection is one editor connection; sessions outlive it (reconnect, then
//! `session/load` or `session/resume`). The Streamable HTTP profile is not offered.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use gateway_face::{FaceContext, GuardedFace, Refusal};
use gateway_services::auth::Principal;
use tokio::sync::mpsc;

use crate::AcpContext;
use crate::editor::{Editor, EditorHandler};
use crate::rpc::Peer;
use crate::rpc::framing::{Inbound, MAX_MESSAGE_BYTES};

/// `/acp`, behind the guard every face runs (`gateway_face::guard`): the upgrade is answered
/// only once the process has a place for the request and the caller is one `/acp` serves.
pub fn router(ctx: AcpContext) -> Router {
    Router::new()
        .route("/acp", get(upgrade))
        .route_layer(middleware::from_fn_with_state(Arc::new(ctx.clone()), gateway_face::guard::<AcpContext>))
        .with_state(ctx)
}

/// How long a closing connection may take to flush its last frames to a client.
const WRITER_GRACE: Duration = Duration::from_secs(2);

/// Refuses a connection without a valid gateway key (`x-api-key` or bearer), as every HTTP
/// face does, before the upgrade, in plain text: 401 with a challenge, 421 for a request
/// addressed to a host name that is not this gateway's, 403 for a key that does not reach this
/// face ([`admitted`]), 503 with `Retry-After` when the process is busy. The keyless rules
/// (loopback peers, no web pages, only this gateway's names) are the shared
/// [`Authenticator`](gateway_services::auth::Authenticator)'s.
impl GuardedFace for AcpContext {
    type Denied = &'static str;

    fn context(&self) -> &FaceContext {
        &self.face
    }

    async fn admits(&self, principal: &Principal, _: &Method, _: &Uri) -> Result<(), &'static str> {
        admitted(principal)
    }

    fn refusal(&self, refusal: Refusal<&'static str>, _: &Method, _: &Uri) -> Response {
        let status = refusal.status();
        let retry_after = match &refusal {
            Refusal::Busy(busy) => Some(HeaderValue::from(busy.retry_after.as_secs().max(1))),
            _ => None,
        };
        let mut r = (status, refusal.to_string()).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, gateway_face::guard::CHALLENGE);
        }
        if let Some(after) = retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, after);
        }
        r
    }
}

/// Whom `/acp` serves. An editor connection opens, loads and prompts any session whose
/// workspace lies under the roots, so only an API key (or, while no key exists, a local
/// program) may open one. An environment key is an executor's credential for one self-hosted
/// environment's work queue and sessions on the Managed Agents API (invariant 31, ADR 0013):
/// it reaches nothing here, keys or no keys, from any address. The match is exhaustive so that
/// a new kind of caller is decided here too.
fn admitted(principal: &Principal) -> Result<(), &'static str> {
    match principal {
        Principal::Loopback | Principal::Key(_) => Ok(()),
        Principal::Environment { .. } => Err("an environment key is valid only for its own environment's work \
             queue and sessions on the Managed Agents API; /acp needs an API key"),
    }
}

/// Resolves when the key that opened a connection is revoked.
type Revoked = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Upgrades a request the guard let through; the connection lives until its key (the guard's
/// principal) is revoked, the editor leaves or the process stops.
async fn upgrade(
    State(ctx): State<AcpContext>,
    Extension(principal): Extension<Principal>,
    ws: WebSocketUpgrade,
) -> Response {
    let revoked: Revoked = Box::pin(ctx.auth.until_revoked(&principal));
    // Random and unguessable like every gateway id; only used to correlate logs.
    let connection =
        format!("acpc_{}", &gateway_core::ResourceId::new().as_str()[gateway_core::ResourceId::PREFIX.len()..]);
    let span_id = connection.clone();
    let mut response =
        ws.max_message_size(MAX_MESSAGE_BYTES).max_frame_size(MAX_MESSAGE_BYTES).on_upgrade(move |socket| {
            // Tracked: the process waits for its editor connections before it closes the store.
            let tasks = ctx.tasks.clone();
            tasks.track_future(serve(ctx, socket, span_id, revoked))
        });
    if let Ok(v) = HeaderValue::from_str(&connection) {
        response.headers_mut().insert("acp-connection-id", v);
    }
    response
}

async fn serve(ctx: AcpContext, socket: WebSocket, connection: String, revoked: Revoked) {
    tracing::info!(%connection, "ACP WebSocket connection opened");
    let _connected = gateway_services::metrics::GaugeGuard::new(&ctx.coordinator.metrics().editor_connections);
    let shutdown = ctx.shutdown.clone();
    let (mut sink, mut stream) = socket.split();
    let (tx, incoming) = mpsc::channel(64);
    let reader = tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            let inbound = match msg {
                Message::Text(t) => Inbound::Line(t.to_string()),
                Message::Close(_) => break,
                _ => continue,
            };
            if tx.send(inbound).await.is_err() {
                break;
            }
        }
    });
    let tasks = ctx.tasks.clone();
    let handler = Arc::new(EditorHandler(Editor::new(ctx, None)));
    let (peer, mut frames, loop_task) =
        Peer::start_tracked("editor-ws", incoming, handler, crate::rpc::options(false), &tasks);
    let writer = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if sink.send(Message::Text(frame.text().into())).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    tokio::select! {
        _ = loop_task => {}
        _ = shutdown.cancelled() => peer.close(),
        _ = revoked => {
            tracing::info!(%connection, "closing an ACP WebSocket connection: its API key was revoked");
            peer.close();
        }
    }
    reader.abort();
    drop(peer);
    // A client that stopped reading must not hold the task (and shutdown) forever.
    let abort = writer.abort_handle();
    if tokio::time::timeout(WRITER_GRACE, writer).await.is_err() {
        abort.abort();
    }
    tracing::info!(%connection, "ACP WebSocket connection closed");
}
