//! Accepting HTTP connections, with the bounds a server exposed to untrusted peers needs
//! before any request is authenticated.
//!
//! `axum::serve` reads headers for as long as a client cares to send them: 300 connections
//! trickling one byte at a time held their file descriptors forever, and at a low descriptor
//! limit they locked every other client out. So each connection here has
//! - a deadline for its request head ([`HttpLimits::header_read_timeout`], also what an idle
//!   keep-alive connection gets before it is closed),
//! - a deadline between two pieces of a request body ([`HttpLimits::body_idle_timeout`]),
//! - a place among at most [`HttpLimits::max_connections_per_peer`] from one address and
//!   [`HttpLimits::max_connections`] in all. A connection past either bound is answered
//!   `503 Service Unavailable` with `Retry-After` and closed: the client learns it is busy
//!   rather than seeing its connection hang, and the process keeps descriptors for its
//!   database, its sandboxes and the clients it already serves.
//!
//! A body that trickles one byte just inside the idle deadline is still served: the caps
//! bound how many such bodies one address holds.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceBuilder;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tracing::{debug, info, warn};

use gateway_services::places::Places;

/// `[http]`: what one connection may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpLimits {
    /// The longest a client may take to send a request's head, and the longest an idle
    /// keep-alive connection stays open.
    #[serde(rename = "header_read_timeout_secs", with = "gateway_core::durations::secs")]
    pub header_read_timeout: Duration,
    /// The longest a request body may pause between two of its pieces.
    #[serde(rename = "body_idle_timeout_secs", with = "gateway_core::durations::secs")]
    pub body_idle_timeout: Duration,
    /// The longest a client may leave the gateway unable to write to it (it stopped reading
    /// a stream): past it the connection is closed, and the client resumes from its last
    /// event id like after any other disconnection.
    #[serde(rename = "write_stall_timeout_secs", with = "gateway_core::durations::secs")]
    pub write_stall_timeout: Duration,
    /// Open connections from one IP address. Behind a proxy every client shares the
    /// proxy's address: raise this there.
    pub max_connections_per_peer: usize,
    /// Open connections in all; default half the process's file descriptor limit.
    pub max_connections: Option<usize>,
    /// Event streams (SSE, any face) one key may hold open at once; keyless local clients
    /// count as one key. Enforced by the router (`http::govern_streams`).
    pub max_streams_per_key: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(15),
            body_idle_timeout: Duration::from_secs(30),
            write_stall_timeout: Duration::from_secs(60),
            max_connections_per_peer: 1024,
            max_connections: None,
            max_streams_per_key: 1000,
        }
    }
}

/// How long a refused connection's request is read and discarded after the 503, so the
/// client sees the answer rather than a reset.
const REFUSAL_LINGER: Duration = Duration::from_millis(200);

/// After an accept error (descriptors exhausted): a pause before the next accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown`, then gives open connections `grace` to end.
/// Every connection task is joined before this returns (or abandoned past the grace).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    fd_limit: u64,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let max_total = limits.max_connections.unwrap_or_else(|| usize::try_from(fd_limit / 2).unwrap_or(usize::MAX));
    let places: Places<IpAddr> = Places::new(limits.max_connections_per_peer, max_total);
    info!(
        max_connections = max_total,
        max_connections_per_peer = limits.max_connections_per_peer,
        header_read_timeout_secs = limits.header_read_timeout.as_secs_f64(),
        body_idle_timeout_secs = limits.body_idle_timeout.as_secs_f64(),
        "accepting HTTP connections"
    );
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let connections = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        // `::ffff:a.b.c.d` is the same peer as `a.b.c.d`.
        let place = match places.take(peer.ip().to_canonical()) {
            Ok(place) => place,
            Err(full) => {
                warn!(%peer, per_peer = full.holder, total = full.total, "connection refused: too many open connections");
                connections.spawn(refuse(tcp));
                continue;
            }
        };
        // Small SSE frames must not wait for Nagle plus delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            debug!(error = %e, "could not set TCP_NODELAY");
        }
        let service = ServiceBuilder::new()
            .layer(RequestBodyTimeoutLayer::new(limits.body_idle_timeout))
            .map_request(move |mut req: axum::http::Request<_>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            })
            .service(app.clone());
        let (builder, watcher, header_deadline) = (builder.clone(), graceful.watcher(), limits.header_read_timeout);
        let stall = limits.write_stall_timeout;
        connections.spawn(async move {
            let _place = place;
            if !first_bytes(&tcp, header_deadline).await {
                debug!(%peer, "connection closed: no request began within the header deadline");
                return;
            }
            let io = TokioIo::new(StallGuard::new(tcp, stall));
            let connection = builder.serve_connection_with_upgrades(io, TowerToHyperService::new(service));
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            warn!("open connections did not close within {grace:?}; exiting without them");
            return;
        }
    }
    connections.wait().await;
}

/// Waits, at most `deadline`, for the first bytes of a connection to say which HTTP it
/// speaks; false if they do not come. The deadline of a request head runs only once hyper
/// reads one, and it reads none before it knows the version: without this wait, a connection
/// that sends nothing (or the HTTP/2 preface a byte at a time) would be held for ever.
async fn first_bytes(tcp: &TcpStream, deadline: Duration) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let decided = async {
        let mut head = [0u8; PREFACE.len()];
        loop {
            let n = tcp.peek(&mut head).await?;
            // End of stream, the whole preface, or bytes that are not the preface: decided.
            if n == 0 || n == PREFACE.len() || head[..n] != PREFACE[..n] {
                return Ok::<(), std::io::Error>(());
            }
            // A prefix of the preface: `peek` returns at once until more arrives.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    matches!(tokio::time::timeout(deadline, decided).await, Ok(Ok(())))
}

/// A connection whose writes may not stay blocked longer than `stall`: a client that stops
/// reading (a stream it never consumes) is disconnected instead of holding its connection,
/// its subscription and the socket's buffers for ever. The server's memory does not grow
/// meanwhile either way (streams are pulled as the socket takes them); this bounds how long.
struct StallGuard {
    tcp: TcpStream,
    stall: Duration,
    /// Set while a write is blocked: when the stall began to count.
    blocked: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl StallGuard {
    fn new(tcp: TcpStream, stall: Duration) -> Self {
        Self { tcp, stall, blocked: None }
    }

    /// What a write that left the socket full answers: pending until the deadline, then an
    /// error that ends the connection.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        let stall = self.stall;
        let deadline = self.blocked.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {stall:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn written(&mut self, done: Poll<std::io::Result<usize>>, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        match done {
            Poll::Pending => self.stalled(cx),
            done => {
                self.blocked = None;
                done
            }
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let done = Pin::new(&mut self.tcp).poll_write(cx, data);
        self.written(done, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let done = Pin::new(&mut self.tcp).poll_write_vectored(cx, data);
        self.written(done, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Answers a connection past a bound, without reading its request first.
async fn refuse(mut tcp: TcpStream) {
    const BODY: &str = "too many connections: retry later\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 1\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    if tcp.write_all(head.as_bytes()).await.is_err() || tcp.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
}
