//! (g) Two gateway processes on one PostgreSQL database against one: (b)'s saturation load
//! (closed loop of `sat_connections`, `sat_text_bytes` of text, the instant remote) sent to
//! one `gateway serve` on a fresh database, and split across two on one fresh database
//! (configured as docs/ops/several-processes.md says: one secret key file, a data directory
//! and a host id each; half the connections on each), the two interleaved round by round.
//! CPU per message counts both processes. There is no target: the row shows what a second
//! process on the same database adds on this machine, whose cores the driver, the remote,
//! PostgreSQL and the gateways share. PostgreSQL only: SQLite is one process's file.

use tracing::info;

use super::Ctx;
use super::a2a::{FAST, Setup, Shape, Target};
use crate::driver::engine::Engine;
use crate::driver::error::Result;
use crate::driver::load::{self, Tally};
use crate::driver::results::{Figures, ProcessSegment, ProcessesResults};

pub async fn run(ctx: &Ctx) -> Result<ProcessesResults> {
    let engine = Engine::Postgres;
    let dir = ctx.dir(engine, "processes")?;
    let mut s = Setup::start(ctx, engine, &dir).await?;
    let plan = &ctx.plan;
    let (mut one, mut two, mut segments) = (Tally::default(), Tally::default(), Vec::new());
    let measured = async {
        for (round, processes) in load::interleave(plan.rounds, &[1, 2]) {
            let target = if processes == 1 { Target::Gateway } else { Target::TwoGateways };
            let label = format!("processes-{processes}-{round}");
            let t = s.segment(target, Shape::Closed(plan.sat_connections), FAST, &label).await?;
            let errors = t.errors.values().sum();
            info!(
                processes,
                round,
                ok_per_s = format!("{:.1}", t.throughput()),
                p50_ms = format!("{:.1}", t.ok.summary().p50_ms),
                cpu_ms_per_msg = format!("{:.3}", t.cpu.as_secs_f64() * 1000.0 / t.ok.len().max(1) as f64),
                errors,
                "(g) segment"
            );
            segments.push(ProcessSegment {
                round,
                processes,
                throughput: t.throughput(),
                p50_ms: t.ok.summary().p50_ms,
                ok: t.ok.len(),
                errors,
            });
            if processes == 1 { &mut one } else { &mut two }.merge(&t);
        }
        Ok::<_, crate::driver::error::BenchError>(())
    }
    .await;
    s.stop().await;
    measured?;
    Ok(ProcessesResults {
        engine,
        connections: plan.sat_connections as u64,
        text_bytes: plan.sat_text_bytes as u64,
        one: Figures::from_tally(&one, None, true),
        two: Figures::from_tally(&two, None, true),
        segments,
    })
}
