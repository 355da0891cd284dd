//! (b) A2A `SendMessage` (blocking, v1.0 JSON-RPC) through a gateway agent published on an
//! `a2a:` remote, against the same `bench-a2a-echo` remote called directly and, where the
//! gateway's durability has a price, against `bench-a2a-durable` (the minimal durable proxy:
//! one fsynced commit before the remote is called, one before the client is answered):
//!
//! - open loop at each of `a2a_rates` for `a2a_window`, the remote answering after
//!   `a2a_delay`, latency from each request's due time (gateway against direct);
//! - closed-loop saturation (`sat_connections`, `sat_text_bytes` of text) with an instant
//!   remote, interleaved three ways: gateway, durable baseline, direct (the reference);
//! - open loop against the instant remote at half the throughput the gateway reached at
//!   saturation: with a remote that waits 1 s, a steady tail of a few tens of milliseconds
//!   hides inside the second; with one that answers at once it is the whole difference;
//! - the gateway offered twice the throughput it reached at saturation, and the durable
//!   baseline twice what it reached: goodput, how fast refusals come, timeouts, and what a
//!   refusal costs in CPU as a residual (the CPU beyond what the completed messages cost at
//!   saturation, over the refusals);
//! - interleaved with those, a gateway configured to refuse every new turn
//!   (`[admission] max_queued_runs = 0`) offered the gateway's overload rate: what a refusal
//!   costs in CPU, measured directly (nothing served, so nothing to subtract).
//!
//! Every gateway and durable-baseline segment gets a fresh process and database: an
//! overloaded server keeps a backlog of queued turns for minutes, and the next segment must
//! not inherit it. Scenario (g) (`processes`) reuses these segments with two gateway
//! processes on one database.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::{Ctx, Pairing};
use crate::driver::clients::a2a::A2aClient;
use crate::driver::engine::{Database, Engine};
use crate::driver::error::Result;
use crate::driver::load::{self, Outcome, Side, Tally};
use crate::driver::procs::Proc;
use crate::driver::results::{A2aResults, Comparison, Figures, RefusalCost};
use crate::driver::targets::{self, Admission, Host, Publish, Server};

const SLOW: &str = "echo-slow";
/// The agent on the remote that answers at once.
pub(super) const FAST: &str = "echo-fast";

/// Minimum offered rate of the overload step (when saturation found almost nothing).
const MIN_OVERLOAD_RATE: f64 = 20.0;
/// Minimum offered rate of the half-load step, likewise.
const MIN_HALF_LOAD_RATE: f64 = 10.0;

/// The admission setting of [`Target::Refusing`]: `Load::check_queue` refuses a message that
/// would start a turn while at least `max_queued_runs` runs wait to be claimed, so with 0 it
/// refuses every one, through the check (`Coordinator::check_new_turn`) and the busy answer
/// (503) of a saturated gateway's refusals.
const REFUSE_EVERY_TURN: Admission<'static> = &[("max_queued_runs", 0)];

pub(super) struct Setup<'a> {
    ctx: &'a Ctx,
    engine: Engine,
    dir: &'a Path,
    publish: Publish,
    slow: Server,
    fast: Server,
    notes: Vec<String>,
}

/// Gateway processes with their own database, for one segment.
struct Fresh {
    servers: Vec<Server>,
    db: Database,
}

impl Fresh {
    async fn stop(self) {
        for server in self.servers {
            server.stop().await;
        }
        self.db.drop().await;
    }
}

impl<'a> Setup<'a> {
    /// Both remotes started and published as the agents `SLOW` and `FAST`.
    pub(super) async fn start(ctx: &'a Ctx, engine: Engine, dir: &'a Path) -> Result<Setup<'a>> {
        let slow = targets::echo(&ctx.bins, &ctx.http, dir, "echo-slow", ctx.plan.a2a_delay).await?;
        let fast = targets::echo(&ctx.bins, &ctx.http, dir, "echo-fast", Duration::ZERO).await?;
        let publish = Publish {
            agents: vec![(SLOW.into(), "a2a:slow".into()), (FAST.into(), "a2a:fast".into())],
            remotes: vec![("slow".into(), slow.base.clone()), ("fast".into(), fast.base.clone())],
            executors: vec![],
        };
        Ok(Setup { ctx, engine, dir, publish, slow, fast, notes: vec![] })
    }

    pub(super) async fn stop(self) {
        self.slow.stop().await;
        self.fast.stop().await;
    }

    /// `n` gateway processes on one fresh database: one as an operator starts it, or several
    /// the way docs/ops/several-processes.md says (one secret key file; a data directory and
    /// a host id each); `admission`'s settings besides the defaults.
    async fn gateways(&self, segment: &str, n: usize, admission: Admission<'_>) -> Result<Fresh> {
        let dir = self.dir.join(format!("gateway-{segment}"));
        std::fs::create_dir_all(&dir)?;
        let db = Database::fresh(self.engine, &dir, &self.ctx.pg_url).await?;
        let mut fresh = Fresh { servers: Vec::with_capacity(n), db };
        for k in 0..n {
            let (own_dir, host) = if n == 1 {
                (dir.clone(), Host::local(&dir.join("data")))
            } else {
                let own = dir.join(format!("process-{k}"));
                let host = Host {
                    data_dir: own.join("data"),
                    id: Some(format!("bench-host-{k}")),
                    secret_key_file: Some(dir.join("secret.key")),
                };
                (own, host)
            };
            let (bins, http) = (&self.ctx.bins, &self.ctx.http);
            match targets::gateway_serve_as(bins, http, &own_dir, &fresh.db, &self.publish, &host, admission).await {
                Ok(server) => fresh.servers.push(server),
                Err(e) => {
                    fresh.stop().await;
                    return Err(e);
                }
            }
        }
        Ok(fresh)
    }

    /// The client of the agent `agent` on each of `bases` (`None`: the server's own endpoint).
    fn clients(&self, bases: &[&Server], agent: Option<&str>) -> Spread {
        let url = |base: &str| match agent {
            Some(a) => format!("{base}/a2a/{a}"),
            None => format!("{base}/"),
        };
        Spread(Arc::new(bases.iter().map(|s| A2aClient::new(self.ctx.http.clone(), url(&s.base))).collect()))
    }
}

/// The clients a segment's load goes to: request `i` to the `i mod len`-th. A closed loop's
/// connection `c` of `n` sends requests `c`, `c + n`, `c + 2n`, …, so with two clients and an
/// even `n` each connection keeps to one of them, half the connections on each.
#[derive(Clone)]
struct Spread(Arc<Vec<A2aClient>>);

impl Spread {
    async fn outcome(&self, i: u64, text: &str) -> Outcome {
        match self.0.get((i % self.0.len().max(1) as u64) as usize) {
            Some(c) => c.outcome(i, text).await,
            None => Outcome::Broken("no client".into()),
        }
    }

    async fn warm(&self) {
        for client in self.0.iter() {
            let sends = (0..4).map(|i| client.send(i, "warm up"));
            let _ = futures::future::join_all(sends).await;
        }
    }
}

fn open(
    client: Spread,
    rate: f64,
    window: Duration,
    timeout: Duration,
    text: Arc<String>,
) -> impl Future<Output = Tally> {
    load::open_loop(rate, window, timeout, move |i| {
        let (c, text) = (client.clone(), Arc::clone(&text));
        async move { c.outcome(i, &text).await }
    })
}

fn closed(
    client: Spread,
    n: usize,
    window: Duration,
    timeout: Duration,
    text: Arc<String>,
) -> impl Future<Output = Tally> {
    load::closed_loop(n, window, timeout, move |i| {
        let (c, text) = (client.clone(), Arc::clone(&text));
        async move { c.outcome(i, &text).await }
    })
}

/// Which load a comparison applies.
#[derive(Clone, Copy)]
pub(super) enum Shape {
    Open(f64),
    Closed(usize),
}

/// What one segment measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// A fresh gateway and database, the agent published on the remote.
    Gateway,
    /// Two fresh gateways on one fresh database, the load split between them (scenario (g)).
    TwoGateways,
    /// A fresh gateway and database configured to refuse every new turn
    /// ([`REFUSE_EVERY_TURN`]); its warm-up requests are refused too.
    Refusing,
    /// A fresh `bench-a2a-durable` (and SQLite file) in front of the remote.
    Durable,
    /// The remote itself.
    Direct,
}

/// Warms `clients` up, then runs `load` over them and charges the CPU `procs` used
/// meanwhile (summed over them).
async fn measure<F, Fut>(procs: &[&Proc], clients: Spread, load: F) -> Result<Tally>
where
    F: FnOnce(Spread) -> Fut,
    Fut: Future<Output = Tally>,
{
    let cpu = || procs.iter().map(|p| p.cpu()).sum::<Result<Duration>>();
    clients.warm().await;
    let cpu0 = cpu()?;
    let mut t = load(clients).await;
    t.cpu = cpu()?.saturating_sub(cpu0);
    Ok(t)
}

impl Setup<'_> {
    fn remote(&self, agent: &str) -> &Server {
        if agent == SLOW { &self.slow } else { &self.fast }
    }

    pub(super) async fn segment(&mut self, target: Target, shape: Shape, agent: &str, label: &str) -> Result<Tally> {
        let plan = &self.ctx.plan;
        let (window, text) = match shape {
            Shape::Open(_) => (plan.a2a_window, Arc::new("hello".to_owned())),
            Shape::Closed(_) => (plan.sat_window, Arc::new("x".repeat(plan.sat_text_bytes))),
        };
        let load = |client: Spread| async move {
            match shape {
                Shape::Open(rate) => open(client, rate, window, plan.a2a_timeout, text).await,
                Shape::Closed(n) => closed(client, n, window, plan.a2a_timeout, text).await,
            }
        };
        match target {
            Target::Gateway | Target::TwoGateways | Target::Refusing => {
                let n = if target == Target::TwoGateways { 2 } else { 1 };
                let admission = if target == Target::Refusing { REFUSE_EVERY_TURN } else { &[] };
                let fresh = self.gateways(label, n, admission).await?;
                let servers: Vec<&Server> = fresh.servers.iter().collect();
                let procs: Vec<&Proc> = servers.iter().map(|s| &s.proc).collect();
                let t = measure(&procs, self.clients(&servers, Some(agent)), load).await;
                fresh.stop().await;
                t
            }
            Target::Durable => {
                let dir = self.dir.join(format!("durable-{label}"));
                let remote = format!("{}/", self.remote(agent).base);
                let proxy = targets::a2a_durable(&self.ctx.bins, &self.ctx.http, &dir, &remote).await?;
                let t = measure(&[&proxy.proc], self.clients(&[&proxy], None), load).await;
                proxy.stop().await;
                t
            }
            Target::Direct => {
                let remote = self.remote(agent);
                measure(&[&remote.proc], self.clients(&[remote], None), load).await
            }
        }
    }

    /// Gateway segments interleaved with direct ones and, if `durable`, with durable-baseline
    /// ones (gateway, durable, direct; then backwards): the gateway against each, its segments
    /// counted in both comparisons.
    async fn compare(
        &mut self,
        scenario: &str,
        shape: Shape,
        agent: &str,
        durable: bool,
    ) -> Result<(Comparison, Option<Comparison>)> {
        let targets: Vec<Target> = [Target::Gateway, Target::Durable, Target::Direct]
            .into_iter()
            .filter(|t| durable || *t != Target::Durable)
            .collect();
        let (mut direct, mut vs_durable) = (Pairing::default(), durable.then(Pairing::default));
        for (round, target) in load::interleave(self.ctx.plan.rounds, &targets) {
            let t = self.segment(target, shape, agent, &format!("{scenario}-{round}")).await?;
            info!(
                engine = self.engine.name(),
                scenario,
                ?target,
                round,
                ok_per_s = format!("{:.1}", t.throughput()),
                p50_ms = format!("{:.1}", t.ok.summary().p50_ms),
                timeouts = t.timeouts,
                errors = t.errors.values().sum::<u64>(),
                "(b) segment"
            );
            match target {
                Target::Gateway => {
                    if let Some(p) = &mut vs_durable {
                        p.add(round, Side::Gateway, t.clone(), None);
                    }
                    direct.add(round, Side::Gateway, t, None);
                }
                Target::Durable => {
                    if let Some(p) = &mut vs_durable {
                        p.add(round, Side::Baseline, t, None);
                    }
                }
                Target::Direct => direct.add(round, Side::Baseline, t, None),
                // Two gateways are scenario (g)'s; a gateway refusing every turn, the
                // overload step's.
                Target::TwoGateways | Target::Refusing => {}
            }
        }
        let rate = match shape {
            Shape::Open(r) => Some(r),
            Shape::Closed(_) => None,
        };
        let notes = std::mem::take(&mut self.notes);
        let vs_durable = vs_durable.map(|p| p.finish(&format!("{scenario}_durable"), self.engine, rate, true, vec![]));
        Ok((direct.finish(scenario, self.engine, rate, true, notes), vs_durable))
    }

    /// Each target offered twice the throughput it reached at saturation (`capacity`; for
    /// [`Target::Refusing`], the gateway's), the targets interleaved round by round; their
    /// figures in the order given.
    async fn overload(&mut self, targets: &[(Target, f64)]) -> Result<Vec<Figures>> {
        let rate = |capacity: f64| (capacity * 2.0).max(MIN_OVERLOAD_RATE).round();
        let mut totals = vec![Tally::default(); targets.len()];
        for (round, i) in load::interleave(self.ctx.plan.rounds, &(0..targets.len()).collect::<Vec<_>>()) {
            let (target, capacity) = targets[i];
            let rate = rate(capacity);
            // A segment's directory (and SQLite file) is named after its label.
            let label = match target {
                Target::Refusing => format!("refusal-{round}"),
                _ => format!("overload-{round}"),
            };
            let t = self.segment(target, Shape::Open(rate), FAST, &label).await?;
            info!(
                engine = self.engine.name(),
                ?target,
                rate,
                ok_per_s = format!("{:.1}", t.throughput()),
                timeouts = t.timeouts,
                refused = t.refused.len(),
                cpu_ms = format!("{:.1}", t.cpu.as_secs_f64() * 1000.0),
                "(b) overload segment"
            );
            totals[i].merge(&t);
        }
        Ok(targets
            .iter()
            .zip(totals)
            .map(|((_, capacity), t)| Figures::from_tally(&t, Some(rate(*capacity)), true))
            .collect())
    }
}

pub async fn run(ctx: &Ctx, engine: Engine) -> Result<A2aResults> {
    let dir = ctx.dir(engine, "a2a")?;
    let mut s = Setup::start(ctx, engine, &dir).await?;
    let result = async {
        let mut open_loop = Vec::new();
        for &rate in &ctx.plan.a2a_rates {
            open_loop.push(s.compare(&format!("a2a_open_{rate}"), Shape::Open(rate), SLOW, false).await?.0);
        }
        let (saturation, vs_durable) =
            s.compare("a2a_saturation", Shape::Closed(ctx.plan.sat_connections), FAST, true).await?;
        let half = (saturation.gateway.throughput / 2.0).max(MIN_HALF_LOAD_RATE).round();
        let instant = s.compare(&format!("a2a_instant_open_{half}"), Shape::Open(half), FAST, false).await?.0;
        let mut capacities = vec![(Target::Gateway, saturation.gateway.throughput)];
        capacities.extend(vs_durable.as_ref().map(|c| (Target::Durable, c.baseline.throughput)));
        capacities.push((Target::Refusing, saturation.gateway.throughput));
        let mut figures = s.overload(&capacities).await?.into_iter();
        let overload = figures.next();
        let overload_durable = if vs_durable.is_some() { figures.next() } else { None };
        let refusal = figures.next().map(|f| RefusalCost::measure(f, saturation.gateway.cpu_ms_per_op));
        Ok::<_, crate::driver::error::BenchError>((
            open_loop,
            saturation,
            vs_durable,
            instant,
            overload,
            overload_durable,
            refusal,
        ))
    }
    .await;
    let notes = std::mem::take(&mut s.notes);
    s.stop().await;
    let (open_loop, saturation, saturation_durable, instant, overload, overload_durable, refusal) = result?;
    Ok(A2aResults {
        engine,
        remote_delay_ms: ctx.plan.a2a_delay.as_millis() as u64,
        open_loop,
        saturation: Some(saturation),
        instant_half_load: Some(instant),
        overload,
        saturation_durable,
        overload_durable,
        refusal,
        notes,
    })
}
