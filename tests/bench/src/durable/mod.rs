//! `bench-durable`: the minimal durable server for the Managed Agents round trip, the
//! yardstick of scenario (a). It does what a durable gateway must do for one echo turn and
//! nothing more: three fsynced SQLite commits (the session row; the `user.message`, before
//! the send is acknowledged; `session.status_running` + `agent.message` +
//! `session.status_idle` in one transaction, streamed after the commit) through one writer
//! connection, over the same HTTP and SSE wire as the gateway.

mod api;
pub mod hub;
pub mod store;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use tokio_util::task::TaskTracker;

use api::App;

/// Largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("serving: {0}")]
    Serve(std::io::Error),
}

pub struct Options {
    pub listen: SocketAddr,
    pub database: PathBuf,
}

fn router(app: App) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/v1/agents", post(api::create_agent))
        .route("/v1/environments", post(api::create_environment))
        .route("/v1/sessions", post(api::create_session))
        .route("/v1/sessions/{id}/events", post(api::send))
        .route("/v1/sessions/{id}/events/stream", get(api::stream))
        .route("/v1/sessions/{id}/stream", get(api::stream))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

/// Serves until SIGTERM or SIGINT, then waits for turns in flight.
pub async fn serve(opts: Options) -> Result<(), DurableError> {
    let store = store::Store::open(&opts.database).await?;
    let app = App { store, hub: hub::Hub::default(), turns: TaskTracker::new() };
    let turns = app.turns.clone();
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| DurableError::Bind(opts.listen, e))?
        .tap_io(|tcp| {
            // Small SSE frames must not wait for Nagle plus delayed ACK (as in the gateway).
            let _ = tcp.set_nodelay(true);
        });
    tracing::info!(listen = %opts.listen, database = %opts.database.display(), "bench-durable serving");
    let token = crate::signals::on_terminate();
    let server = axum::serve(listener, router(app)).with_graceful_shutdown(token.clone().cancelled_owned());
    crate::signals::serve_until(token, async { server.await.map_err(DurableError::Serve) }).await?;
    turns.close();
    turns.wait().await;
    Ok(())
}
