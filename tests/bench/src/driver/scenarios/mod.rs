//! The scenarios (a)–(g). Each starts the processes it measures, in its own temporary
//! directory and database, and stops them before it returns.

pub mod a2a;
pub mod acp;
pub mod fsync;
pub mod managed_agents;
pub mod memory;
pub mod previews;
pub mod processes;

use std::path::PathBuf;
use std::time::Duration;

use super::engine::Engine;
use super::load::{Side, Tally};
use super::plan::Plan;
use super::results::{Comparison, Figures, Segment};
use super::targets::Bins;

/// What every scenario needs.
pub struct Ctx {
    pub bins: Bins,
    pub http: reqwest::Client,
    pub plan: Plan,
    pub work: PathBuf,
    pub pg_url: String,
}

impl Ctx {
    /// A fresh directory for one scenario on one engine.
    pub fn dir(&self, engine: Engine, name: &str) -> std::io::Result<PathBuf> {
        let d = self.work.join(format!("{name}-{engine:?}-{}", crate::ids::new("r")).to_ascii_lowercase());
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }
}

/// Segments of an interleaved comparison, merged per side as they come.
#[derive(Default)]
pub struct Pairing {
    gateway: Tally,
    baseline: Tally,
    segments: Vec<Segment>,
}

impl Pairing {
    pub fn add(&mut self, round: usize, side: Side, t: Tally, settle: Option<Duration>) {
        let errors = t.errors.values().sum();
        self.segments.push(Segment {
            round,
            side,
            throughput: t.throughput(),
            p50_ms: t.ok.summary().p50_ms,
            ok: t.ok.len(),
            errors,
            settle_s: settle.map(|d| d.as_secs_f64()),
        });
        match side {
            Side::Gateway => self.gateway.merge(&t),
            Side::Baseline => self.baseline.merge(&t),
        }
    }

    pub fn finish(
        self,
        scenario: &str,
        engine: Engine,
        rate: Option<f64>,
        cpu: bool,
        notes: Vec<String>,
    ) -> Comparison {
        Comparison {
            scenario: scenario.to_owned(),
            engine,
            gateway: Figures::from_tally(&self.gateway, rate, cpu),
            baseline: Figures::from_tally(&self.baseline, rate, cpu),
            segments: self.segments,
            notes,
        }
    }
}

/// A note for segments after which the server stayed busy.
pub fn settle_note(what: &str, settle: Option<Duration>, max: Duration) -> Option<String> {
    settle.is_none().then(|| format!("{what} was still busy {} s after a segment ended (backlog)", max.as_secs()))
}
