//! (b) A2A `SendMessage` (blocking, v1.0 JSON-RPC) through a gateway agent published on an
//! `a2a:` remote, against the same `bench-a2a-echo` remote called directly:
//!
//! - open loop at each of `a2a_rates` for `a2a_window`, the remote answering after
//!   `a2a_delay`, latency from each request's due time;
//! - closed-loop saturation (`sat_connections`, `sat_text_bytes` of text) with an instant remote;
//! - open loop against the instant remote at half the throughput the gateway reached at
//!   saturation: with a remote that waits 1 s, a steady tail of a few tens of milliseconds
//!   hides inside the second; with one that answers at once it is the whole difference;
//! - the gateway offered twice the throughput it reached at saturation: goodput, how fast
//!   refusals come, timeouts.
//!
//! Every gateway segment gets a fresh gateway and database: an overloaded gateway keeps a
//! backlog of queued turns for minutes, and the next segment must not inherit it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::{Ctx, Pairing};
use crate::driver::clients::a2a::A2aClient;
use crate::driver::engine::{Database, Engine};
use crate::driver::error::Result;
use crate::driver::load::{self, Side, Tally};
use crate::driver::results::{A2aResults, Comparison, Figures};
use crate::driver::targets::{self, Publish, Server};

const SLOW: &str = "echo-slow";
const FAST: &str = "echo-fast";

/// Minimum offered rate of the overload step (when saturation found almost nothing).
const MIN_OVERLOAD_RATE: f64 = 20.0;
/// Minimum offered rate of the half-load step, likewise.
const MIN_HALF_LOAD_RATE: f64 = 10.0;

struct Setup<'a> {
    ctx: &'a Ctx,
    engine: Engine,
    dir: &'a Path,
    publish: Publish,
    slow: Server,
    fast: Server,
    notes: Vec<String>,
}

/// A gateway with its own database, for one segment.
struct Fresh {
    server: Server,
    db: Database,
}

impl Fresh {
    async fn stop(self) {
        self.server.stop().await;
        self.db.drop().await;
    }
}

impl Setup<'_> {
    async fn gateway(&self, segment: &str) -> Result<Fresh> {
        let dir = self.dir.join(format!("gateway-{segment}"));
        std::fs::create_dir_all(&dir)?;
        let db = Database::fresh(self.engine, &dir, &self.ctx.pg_url).await?;
        match targets::gateway_serve(&self.ctx.bins, &self.ctx.http, &dir, &db, &self.publish).await {
            Ok(server) => Ok(Fresh { server, db }),
            Err(e) => {
                db.drop().await;
                Err(e)
            }
        }
    }

    fn client(&self, base: &str, agent: Option<&str>) -> A2aClient {
        let url = match agent {
            Some(a) => format!("{base}/a2a/{a}"),
            None => format!("{base}/"),
        };
        A2aClient::new(self.ctx.http.clone(), url)
    }
}

async fn warm(client: &A2aClient) {
    let sends = (0..4).map(|i| client.send(i, "warm up"));
    let _ = futures::future::join_all(sends).await;
}

fn open(
    client: A2aClient,
    rate: f64,
    window: Duration,
    timeout: Duration,
    text: Arc<String>,
) -> impl Future<Output = Tally> {
    let client = Arc::new(client);
    load::open_loop(rate, window, timeout, move |i| {
        let (c, text) = (Arc::clone(&client), Arc::clone(&text));
        async move { c.outcome(i, &text).await }
    })
}

fn closed(
    client: A2aClient,
    n: usize,
    window: Duration,
    timeout: Duration,
    text: Arc<String>,
) -> impl Future<Output = Tally> {
    let client = Arc::new(client);
    load::closed_loop(n, window, timeout, move |i| {
        let (c, text) = (Arc::clone(&client), Arc::clone(&text));
        async move { c.outcome(i, &text).await }
    })
}

/// Which load a comparison applies.
#[derive(Clone, Copy)]
enum Shape {
    Open(f64),
    Closed(usize),
}

impl Setup<'_> {
    async fn segment(&mut self, side: Side, shape: Shape, agent: &str, label: &str) -> Result<Tally> {
        let plan = &self.ctx.plan;
        let (window, text) = match shape {
            Shape::Open(_) => (plan.a2a_window, Arc::new("hello".to_owned())),
            Shape::Closed(_) => (plan.sat_window, Arc::new("x".repeat(plan.sat_text_bytes))),
        };
        let run = |client: A2aClient| async move {
            match shape {
                Shape::Open(rate) => open(client, rate, window, plan.a2a_timeout, text).await,
                Shape::Closed(n) => closed(client, n, window, plan.a2a_timeout, text).await,
            }
        };
        match side {
            Side::Gateway => {
                let fresh = self.gateway(label).await?;
                let client = self.client(&fresh.server.base, Some(agent));
                warm(&client).await;
                let cpu0 = fresh.server.proc.cpu()?;
                let mut t = run(client).await;
                t.cpu = fresh.server.proc.cpu()?.saturating_sub(cpu0);
                fresh.stop().await;
                Ok(t)
            }
            Side::Baseline => {
                let remote = if agent == SLOW { &self.slow } else { &self.fast };
                let client = self.client(&remote.base, None);
                warm(&client).await;
                let cpu0 = remote.proc.cpu()?;
                let mut t = run(client).await;
                t.cpu = remote.proc.cpu()?.saturating_sub(cpu0);
                Ok(t)
            }
        }
    }

    async fn compare(&mut self, scenario: &str, shape: Shape, agent: &str) -> Result<Comparison> {
        let mut pairing = Pairing::default();
        for (round, side) in load::schedule(self.ctx.plan.rounds) {
            let t = self.segment(side, shape, agent, &format!("{scenario}-{round}")).await?;
            info!(
                engine = self.engine.name(),
                scenario,
                ?side,
                round,
                ok_per_s = format!("{:.1}", t.throughput()),
                p50_ms = format!("{:.1}", t.ok.summary().p50_ms),
                timeouts = t.timeouts,
                errors = t.errors.values().sum::<u64>(),
                "(b) segment"
            );
            pairing.add(round, side, t, None);
        }
        let rate = match shape {
            Shape::Open(r) => Some(r),
            Shape::Closed(_) => None,
        };
        Ok(pairing.finish(scenario, self.engine, rate, true, std::mem::take(&mut self.notes)))
    }

    async fn overload(&mut self, capacity: f64) -> Result<Figures> {
        let rate = (capacity * 2.0).max(MIN_OVERLOAD_RATE).round();
        let mut total = Tally::default();
        for round in 0..self.ctx.plan.rounds {
            let t = self.segment(Side::Gateway, Shape::Open(rate), FAST, &format!("overload-{round}")).await?;
            info!(
                engine = self.engine.name(),
                rate,
                ok_per_s = format!("{:.1}", t.throughput()),
                timeouts = t.timeouts,
                refused = t.refused.len(),
                "(b) overload segment"
            );
            total.merge(&t);
        }
        Ok(Figures::from_tally(&total, Some(rate), true))
    }
}

pub async fn run(ctx: &Ctx, engine: Engine) -> Result<A2aResults> {
    let dir = ctx.dir(engine, "a2a")?;
    let slow = targets::echo(&ctx.bins, &ctx.http, &dir, "echo-slow", ctx.plan.a2a_delay).await?;
    let fast = targets::echo(&ctx.bins, &ctx.http, &dir, "echo-fast", Duration::ZERO).await?;
    let publish = Publish {
        agents: vec![(SLOW.into(), "a2a:slow".into()), (FAST.into(), "a2a:fast".into())],
        remotes: vec![("slow".into(), slow.base.clone()), ("fast".into(), fast.base.clone())],
        executors: vec![],
    };
    let mut s = Setup { ctx, engine, dir: &dir, publish, slow, fast, notes: vec![] };
    let result = async {
        let mut open_loop = Vec::new();
        for &rate in &ctx.plan.a2a_rates {
            open_loop.push(s.compare(&format!("a2a_open_{rate}"), Shape::Open(rate), SLOW).await?);
        }
        let saturation = s.compare("a2a_saturation", Shape::Closed(ctx.plan.sat_connections), FAST).await?;
        let half = (saturation.gateway.throughput / 2.0).max(MIN_HALF_LOAD_RATE).round();
        let instant = s.compare(&format!("a2a_instant_open_{half}"), Shape::Open(half), FAST).await?;
        let overload = s.overload(saturation.gateway.throughput).await?;
        Ok::<_, crate::driver::error::BenchError>((open_loop, saturation, instant, overload))
    }
    .await;
    let notes = std::mem::take(&mut s.notes);
    s.slow.stop().await;
    s.fast.stop().await;
    let (open_loop, saturation, instant, overload) = result?;
    Ok(A2aResults {
        engine,
        remote_delay_ms: ctx.plan.a2a_delay.as_millis() as u64,
        open_loop,
        saturation: Some(saturation),
        instant_half_load: Some(instant),
        overload: Some(overload),
        notes,
    })
}
