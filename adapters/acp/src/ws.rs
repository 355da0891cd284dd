//! ACP over WebSocket at `/acp` (experimental, per the draft remote-transport RFD): one
//! JSON-RPC message per text frame, binary frames ignored, the first message `initialize`.
//! Each connection is one editor connection; sessions outlive it (reconnect, then
//! `session/load` or `session/resume`). The Streamable HTTP profile is not offered.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use std::net::SocketAddr;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use gateway_runtime::auth::{AuthError, Caller};
use tokio::sync::mpsc;

use crate::AcpContext;
use crate::editor::{Editor, EditorHandler};
use crate::rpc::framing::{Inbound, MAX_MESSAGE_BYTES};
use crate::rpc::{Peer, PeerOptions};

pub fn router(ctx: AcpContext) -> Router {
    Router::new().route("/acp", get(upgrade)).with_state(ctx)
}

/// How long a closing connection may take to flush its last frames to a client.
const WRITER_GRACE: Duration = Duration::from_secs(2);

/// Refuses a connection without a valid gateway key (`x-api-key` or bearer; loopback peers
/// need none while no key exists, unless they are web pages: see [`Caller`]), as every HTTP
/// face does, before the upgrade.
async fn authenticate(ctx: &AcpContext, headers: &HeaderMap, peer: Option<SocketAddr>) -> Result<(), Response> {
    let Some(auth) = &ctx.auth else { return Ok(()) };
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let key = gateway_runtime::auth::presented_key(value("x-api-key"), value(header::AUTHORIZATION.as_str()));
    let caller = Caller::of(peer.is_some_and(|p| p.ip().is_loopback()), headers.contains_key(header::ORIGIN));
    match auth.authenticate(key, caller).await {
        Ok(_) => Ok(()),
        Err(AuthError::Unavailable(e)) => {
            Err((StatusCode::SERVICE_UNAVAILABLE, format!("cannot check credentials: {e}")).into_response())
        }
        Err(e) => {
            let mut r = (StatusCode::UNAUTHORIZED, e.to_string()).into_response();
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"gateway\""));
            Err(r)
        }
    }
}

async fn upgrade(
    State(ctx): State<AcpContext>,
    extensions: Extensions,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let peer = extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    if let Err(refused) = authenticate(&ctx, &headers, peer).await {
        return refused;
    }
    // Random and unguessable like every gateway id; only used to correlate logs.
    let connection =
        format!("acpc_{}", &gateway_core::ResourceId::new().as_str()[gateway_core::ResourceId::PREFIX.len()..]);
    let span_id = connection.clone();
    let mut response = ws
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| serve(ctx, socket, span_id));
    if let Ok(v) = HeaderValue::from_str(&connection) {
        response.headers_mut().insert("acp-connection-id", v);
    }
    response
}

async fn serve(ctx: AcpContext, socket: WebSocket, connection: String) {
    tracing::info!(%connection, "ACP WebSocket connection opened");
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
    let handler = Arc::new(EditorHandler(Editor::new(ctx, None)));
    let (peer, mut frames, loop_task) = Peer::start("editor-ws", incoming, handler, PeerOptions::default());
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
