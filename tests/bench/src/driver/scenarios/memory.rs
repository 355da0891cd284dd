//! (e) Memory of waiting work: the gateway's resident set (VmRSS) with `subscribers` idle SSE
//! streams open (spread over `subscriber_sessions` sessions, all from this one process), and
//! with `parked` sessions whose turn waits on a custom tool the client never answers.
//! `bench-durable` gets the same subscribers, for reference. The parked sessions are measured
//! in a second gateway process on the same database: after the subscribers close, the
//! allocator keeps their memory, which would hide what parking costs.
//!
//! Subscribers are raw TCP connections that send one HTTP/1.1 request, check the `200`, and
//! are then never read again: the cheapest client there is, so what is measured is the
//! server's cost per stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::info;

use super::Ctx;
use crate::driver::clients::ma::{self, MaClient};
use crate::driver::engine::{Database, Engine};
use crate::driver::error::Result;
use crate::driver::procs::Proc;
use crate::driver::results::MemoryResults;
use crate::driver::targets::{self, Publish};

/// Connections opened at once.
const OPEN_CONCURRENCY: usize = 64;
/// Session creations and parked turns at once.
const CONCURRENCY: usize = 16;
const HEAD_LIMIT: usize = 16 * 1024;
const OPEN_TIMEOUT: Duration = Duration::from_secs(20);
/// Descriptors kept free for everything else the driver has open.
const FD_MARGIN: u64 = 512;

/// Opens one idle subscriber: request sent, `200` headers read.
async fn subscribe(addr: String, session: String) -> std::result::Result<TcpStream, String> {
    let mut s = TcpStream::connect(&addr).await.map_err(|e| format!("connect: {}", e.kind()))?;
    let req = format!(
        "GET /v1/sessions/{session}/events/stream HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.map_err(|e| format!("write: {}", e.kind()))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.map_err(|e| format!("read: {}", e.kind()))?;
        if n == 0 || head.len() + n > HEAD_LIMIT {
            return Err("no response head".into());
        }
        head.extend_from_slice(&buf[..n]);
    }
    if head.starts_with(b"HTTP/1.1 200") {
        Ok(s)
    } else {
        Err(String::from_utf8_lossy(&head[..head.len().min(12)]).into_owned())
    }
}

async fn subscribe_all(
    base: &str,
    sessions: &[String],
    n: usize,
    errors: &mut BTreeMap<String, u64>,
) -> Vec<TcpStream> {
    let addr = base.trim_start_matches("http://").to_owned();
    let jobs =
        (0..n).map(|i| {
            let (addr, session) = (addr.clone(), sessions[i % sessions.len()].clone());
            async move {
                tokio::time::timeout(OPEN_TIMEOUT, subscribe(addr, session)).await.unwrap_or(Err("timeout".into()))
            }
        });
    let mut open = Vec::with_capacity(n);
    let mut results = futures::stream::iter(jobs).buffer_unordered(OPEN_CONCURRENCY);
    while let Some(r) = results.next().await {
        match r {
            Ok(s) => open.push(s),
            Err(e) => *errors.entry(format!("subscribe: {e}")).or_default() += 1,
        }
    }
    open
}

async fn create_sessions(client: &MaClient, n: usize) -> Result<Vec<String>> {
    let c = Arc::new(client.clone());
    let results: Vec<_> = futures::stream::iter((0..n).map(|_| {
        let c = Arc::clone(&c);
        async move { c.create_session().await }
    }))
    .buffer_unordered(CONCURRENCY)
    .collect()
    .await;
    Ok(results.into_iter().collect::<std::result::Result<Vec<_>, _>>()?)
}

async fn cpu_cores_over(proc: &Proc, window: Duration) -> Result<f64> {
    let c0 = proc.cpu()?;
    tokio::time::sleep(window).await;
    Ok(proc.cpu()?.saturating_sub(c0).as_secs_f64() / window.as_secs_f64())
}

/// How many subscribers the descriptor limit allows.
fn subscribers_allowed(wanted: usize, nofile: u64) -> usize {
    wanted.min(usize::try_from(nofile.saturating_sub(FD_MARGIN)).unwrap_or(usize::MAX))
}

pub async fn run(ctx: &Ctx, engine: Engine, nofile: u64) -> Result<MemoryResults> {
    let dir = ctx.dir(engine, "memory")?;
    let db = Database::fresh(engine, &dir, &ctx.pg_url).await?;
    let result = run_on(ctx, engine, &dir, &db, nofile).await;
    db.drop().await;
    result
}

async fn run_on(ctx: &Ctx, engine: Engine, dir: &std::path::Path, db: &Database, nofile: u64) -> Result<MemoryResults> {
    let plan = &ctx.plan;
    let mut r = MemoryResults { engine: Some(engine), ..MemoryResults::default() };
    let n = subscribers_allowed(plan.subscribers, nofile);
    if n < plan.subscribers {
        r.notes.push(format!("RLIMIT_NOFILE {nofile} allows {n} of the {} subscribers asked for", plan.subscribers));
    }
    r.subscribers_wanted = plan.subscribers as u64;
    r.parked_wanted = plan.parked as u64;

    let gateway = targets::gateway_serve(&ctx.bins, &ctx.http, &dir.join("gateway"), db, &Publish::default()).await?;
    let client = MaClient::setup(ctx.http.clone(), &gateway.base, &ma::parking_agent()).await?;
    r.rss_ready_kib = gateway.proc.rss_kib()?;
    let sessions = create_sessions(&client, plan.subscriber_sessions.max(1)).await?;
    r.sessions = sessions.len() as u64;
    r.rss_sessions_kib = gateway.proc.rss_kib()?;
    info!(engine = engine.name(), subscribers = n, sessions = sessions.len(), "(e) opening idle subscribers");
    let mut errors = BTreeMap::new();
    let subs = subscribe_all(&gateway.base, &sessions, n, &mut errors).await;
    r.subscribers = subs.len() as u64;
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.rss_subscribed_kib = gateway.proc.rss_kib()?;
    r.idle_cpu_cores = cpu_cores_over(&gateway.proc, Duration::from_secs(3)).await?;
    r.kib_per_subscriber = per(r.rss_subscribed_kib, r.rss_sessions_kib, r.subscribers);
    drop(subs);
    tokio::time::sleep(Duration::from_secs(1)).await;
    r.rss_unsubscribed_kib = gateway.proc.rss_kib()?;
    info!(
        engine = engine.name(),
        rss_mib = r.rss_subscribed_kib / 1024,
        per_subscriber_kib = format!("{:.1}", r.kib_per_subscriber),
        "(e) subscribers"
    );

    // Parked sessions get a gateway process of their own (same database, same data
    // directory and so the same secret key): the allocator keeps what the closed
    // subscribers used, which would hide what parking costs.
    gateway.stop().await;
    let gateway = targets::gateway_serve(&ctx.bins, &ctx.http, &dir.join("gateway"), db, &Publish::default()).await?;
    let client = MaClient::setup(ctx.http.clone(), &gateway.base, &ma::parking_agent()).await?;
    info!(engine = engine.name(), parked = plan.parked, "(e) parking sessions");
    r.rss_before_parked_kib = gateway.proc.rss_kib()?;
    let c = Arc::new(client);
    let parks: Vec<_> = futures::stream::iter((0..plan.parked).map(|_| {
        let c = Arc::clone(&c);
        async move { c.park().await }
    }))
    .buffer_unordered(CONCURRENCY)
    .collect()
    .await;
    for p in parks {
        match p {
            Ok(()) => r.parked += 1,
            Err(e) => *r.park_errors.entry(e.to_string().chars().take(120).collect()).or_default() += 1,
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    r.rss_parked_kib = gateway.proc.rss_kib()?;
    r.kib_per_parked = per(r.rss_parked_kib, r.rss_before_parked_kib, r.parked);
    info!(engine = engine.name(), parked = r.parked, rss_mib = r.rss_parked_kib / 1024, "(e) parked");
    gateway.stop().await;

    let baseline = targets::durable(&ctx.bins, &ctx.http, &dir.join("durable")).await?;
    let base_client = MaClient::setup(ctx.http.clone(), &baseline.base, &ma::echo_agent()).await?;
    let base_sessions = create_sessions(&base_client, plan.subscriber_sessions.max(1)).await?;
    r.baseline_rss_ready_kib = baseline.proc.rss_kib()?;
    let subs = subscribe_all(&baseline.base, &base_sessions, n, &mut errors).await;
    r.baseline_subscribers = subs.len() as u64;
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.baseline_rss_subscribed_kib = baseline.proc.rss_kib()?;
    drop(subs);
    baseline.stop().await;
    for (e, count) in errors {
        r.notes.push(format!("{count} × {e}"));
    }
    Ok(r)
}

fn per(after: u64, before: u64, n: u64) -> f64 {
    if n == 0 { 0.0 } else { after.saturating_sub(before) as f64 / n as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_limit_caps_the_subscribers() {
        assert_eq!(subscribers_allowed(10_000, 20_000), 10_000);
        assert_eq!(subscribers_allowed(10_000, 1024), 512);
        assert_eq!(per(3000, 1000, 1000), 2.0);
        assert_eq!(per(1000, 3000, 10), 0.0);
    }
}
