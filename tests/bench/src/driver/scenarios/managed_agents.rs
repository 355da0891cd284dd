//! (a) The Managed Agents round trip (create session, open stream, send `user.message`, read
//! to `session.status_idle`), closed loop with `ma_clients` concurrent clients: the gateway
//! on `engine` against `bench-durable` (always SQLite: it is the fsync floor of the work).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::{Ctx, Pairing, settle_note};
use crate::driver::clients::ma::{self, MaClient};
use crate::driver::engine::{Database, Engine};
use crate::driver::error::Result;
use crate::driver::load::{self, Side};
use crate::driver::results::Comparison;
use crate::driver::targets::{self, Publish};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn measure(client: &MaClient, clients: usize, window: Duration) -> load::Tally {
    let c = Arc::new(client.clone());
    load::closed_loop(clients, window, TIMEOUT, move |i| {
        let c = Arc::clone(&c);
        async move { c.outcome(&format!("hello {i}")).await }
    })
    .await
}

pub async fn run(ctx: &Ctx, engine: Engine) -> Result<Comparison> {
    let dir = ctx.dir(engine, "ma")?;
    let db = Database::fresh(engine, &dir, &ctx.pg_url).await?;
    let result = run_on(ctx, engine, &dir, &db).await;
    db.drop().await;
    result
}

async fn run_on(ctx: &Ctx, engine: Engine, dir: &std::path::Path, db: &Database) -> Result<Comparison> {
    let plan = &ctx.plan;
    let gateway = targets::gateway_serve(&ctx.bins, &ctx.http, &dir.join("gateway"), db, &Publish::default()).await?;
    let baseline = targets::durable(&ctx.bins, &ctx.http, &dir.join("durable")).await?;
    let gw = MaClient::setup(ctx.http.clone(), &gateway.base, &ma::echo_agent()).await?;
    let base = MaClient::setup(ctx.http.clone(), &baseline.base, &ma::echo_agent()).await?;
    info!(engine = engine.name(), "(a) warming up");
    measure(&gw, plan.ma_clients, plan.warmup).await;
    measure(&base, plan.ma_clients, plan.warmup).await;
    let mut pairing = Pairing::default();
    let mut notes = Vec::new();
    for (round, side) in load::schedule(plan.rounds) {
        let (client, server) = match side {
            Side::Gateway => (&gw, &gateway),
            Side::Baseline => (&base, &baseline),
        };
        let cpu0 = server.proc.cpu()?;
        let mut t = measure(client, plan.ma_clients, plan.ma_window).await;
        t.cpu = server.proc.cpu()?.saturating_sub(cpu0);
        let settle = server.proc.settle(plan.settle_max).await;
        notes.extend(settle_note(&server.proc.name, settle, plan.settle_max));
        info!(
            engine = engine.name(),
            ?side,
            round,
            sessions_per_s = format!("{:.1}", t.throughput()),
            p50_ms = format!("{:.2}", t.ok.summary().p50_ms),
            errors = t.errors.values().sum::<u64>(),
            "(a) segment"
        );
        pairing.add(round, side, t, settle);
    }
    gateway.stop().await;
    baseline.stop().await;
    Ok(pairing.finish("managed_agents_round_trip", engine, None, true, notes))
}
