//! (c) ACP prompt round trips, one at a time: an editor talking to `gateway acp` (whose agent
//! runs on `acp:stub`, i.e. `bench-acp-stub` as the gateway's ACP agent process) against the
//! same editor talking to `bench-acp-stub` directly. Latency is request written → response
//! read; the first prompts (which start the stub behind the gateway) are warm-up.

use std::time::Instant;

use tracing::info;

use super::{Ctx, Pairing};
use crate::driver::clients::acp::AcpPeer;
use crate::driver::engine::{Database, Engine};
use crate::driver::error::Result;
use crate::driver::load::{self, Outcome, Side, Tally};
use crate::driver::results::Comparison;
use crate::driver::targets::{self, Publish};

const WARMUP_PROMPTS: usize = 10;

async fn prompts(peer: &mut AcpPeer, session: &str, n: usize) -> Result<Tally> {
    let mut t = Tally::default();
    let cpu0 = peer.proc.cpu()?;
    let start = Instant::now();
    for i in 0..n {
        let t0 = Instant::now();
        let outcome = match peer.prompt(session, &format!("hello {i}")).await {
            Ok(()) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        let elapsed = t0.elapsed();
        match outcome {
            Outcome::Ok => t.ok.record(elapsed),
            Outcome::Refused(l) | Outcome::Broken(l) => *t.errors.entry(l).or_default() += 1,
        }
        t.offered += 1;
    }
    t.seconds = start.elapsed().as_secs_f64();
    t.cpu = peer.proc.cpu()?.saturating_sub(cpu0);
    Ok(t)
}

pub async fn run(ctx: &Ctx, engine: Engine) -> Result<Comparison> {
    let dir = ctx.dir(engine, "acp")?;
    let db = Database::fresh(engine, &dir, &ctx.pg_url).await?;
    let result = run_on(ctx, engine, &dir, &db).await;
    db.drop().await;
    result
}

async fn run_on(ctx: &Ctx, engine: Engine, dir: &std::path::Path, db: &Database) -> Result<Comparison> {
    let publish = Publish {
        agents: vec![("stub".into(), "acp:stub".into())],
        executors: vec![("stub".into(), ctx.bins.acp_stub.clone())],
        ..Publish::default()
    };
    let workspace = dir.join("project");
    std::fs::create_dir_all(&workspace)?;
    let mut gw = AcpPeer::new(targets::gateway_acp(&ctx.bins, &dir.join("gateway"), db, &publish, "stub")?)?;
    let mut direct = AcpPeer::new(targets::acp_stub(&ctx.bins, &dir.join("stub"))?)?;
    gw.initialize().await?;
    direct.initialize().await?;
    let gw_session = gw.new_session(&workspace).await?;
    let direct_session = direct.new_session(&workspace).await?;
    prompts(&mut gw, &gw_session, WARMUP_PROMPTS).await?;
    prompts(&mut direct, &direct_session, WARMUP_PROMPTS).await?;
    let mut pairing = Pairing::default();
    for (round, side) in load::schedule(ctx.plan.rounds) {
        let t = match side {
            Side::Gateway => prompts(&mut gw, &gw_session, ctx.plan.acp_prompts).await?,
            Side::Baseline => prompts(&mut direct, &direct_session, ctx.plan.acp_prompts).await?,
        };
        info!(
            engine = engine.name(),
            ?side,
            round,
            p50_ms = format!("{:.3}", t.ok.summary().p50_ms),
            errors = t.errors.values().sum::<u64>(),
            "(c) segment"
        );
        pairing.add(round, side, t, None);
    }
    gw.stop().await;
    direct.stop().await;
    Ok(pairing.finish("acp_prompt", engine, None, true, vec![]))
}
