//! The benchmark driver: starts every process it measures, runs the scenarios of issue 10
//! (a: Managed Agents round trip, b: A2A, c: ACP, d: the fsync floor, e: memory, f: previews
//! across processes, PostgreSQL only) and since (g: two processes on one PostgreSQL database
//! against one) on each engine, interleaving gateway and baseline segments (A, B, B, A, …) so
//! slow drifts of the machine hit both sides alike, and writes the JSON results, the SVG plots
//! and `docs/benchmarks.md`. Progress goes to stderr.

pub mod clients;
pub mod engine;
pub mod error;
pub mod load;
pub mod machine;
pub mod plan;
pub mod plot;
pub mod procs;
pub mod report;
pub mod results;
pub mod scenarios;
pub mod stats;
pub mod targets;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use tracing::{info, warn};

use engine::Engine;
use error::Result;
use results::{Meta, Results};
use scenarios::Ctx;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Managed Agents round trip vs bench-durable.
    #[value(name = "a")]
    ManagedAgents,
    /// A2A SendMessage through an a2a: agent vs straight to bench-a2a-echo.
    #[value(name = "b")]
    A2a,
    /// ACP prompt through `gateway acp` vs straight to bench-acp-stub.
    #[value(name = "c")]
    Acp,
    /// The latency of one fsynced commit.
    #[value(name = "d")]
    Fsync,
    /// RSS with idle SSE subscribers and parked sessions.
    #[value(name = "e")]
    Memory,
    /// Previews of a turn run by one gateway process, streamed from another (PostgreSQL).
    #[value(name = "f")]
    Previews,
    /// A2A saturation on two gateway processes sharing one PostgreSQL database vs on one.
    #[value(name = "g")]
    Processes,
}

#[derive(Debug, Parser)]
#[command(
    about = "End-to-end benchmarks of the gateway binary against minimal baselines, written to docs/benchmarks.md"
)]
pub struct Args {
    /// A few seconds per scenario (indicative figures) instead of the full plan.
    #[arg(long)]
    pub quick: bool,
    /// Scenarios to run (default: all): a,b,c,d,e,f,g.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<Scenario>,
    /// Engines the gateway runs on.
    #[arg(long, value_delimiter = ',', default_values = ["sqlite", "postgres"])]
    pub engines: Vec<Engine>,
    /// Interleaved rounds per comparison (1 = A B, 2 = A B B A); default 1 quick, 2 full.
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Offered rates (messages/s) of the A2A open-loop comparisons, instead of the plan's.
    #[arg(long, value_delimiter = ',')]
    pub a2a_rates: Vec<f64>,
    /// The gateway binary (default: `gateway` next to this executable).
    #[arg(long)]
    pub gateway: Option<PathBuf>,
    /// PostgreSQL database the gateway's schemas are made in.
    #[arg(long, env = "GATEWAY_TEST_DATABASE_URL", default_value = engine::DEFAULT_PG_URL)]
    pub database_url: String,
    /// Where benchmarks.md and benchmarks/ (plots, results.json) are written.
    #[arg(long, default_value = "docs")]
    pub docs: PathBuf,
    /// Parent of the temporary work directory (databases, configs, logs); default $TMPDIR.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the work directory (process logs) afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Measure nothing: rewrite benchmarks.md and the plots from this results.json.
    #[arg(long, value_name = "RESULTS_JSON")]
    pub render: Option<PathBuf>,
}

/// Writes results.json (unless it is the file rendered from), the plots and the markdown.
fn write_docs(results: &Results, docs: &std::path::Path, json: bool) -> Result<()> {
    let out = docs.join("benchmarks");
    std::fs::create_dir_all(&out)?;
    if json {
        std::fs::write(out.join("results.json"), serde_json::to_string_pretty(results)?)?;
    }
    let plots = report::plots(results, &out)?;
    std::fs::write(docs.join("benchmarks.md"), report::markdown(results, &plots))?;
    info!(docs = %docs.join("benchmarks.md").display(), plots = plots.len(), failures = results.failures.len(), "docs written");
    Ok(())
}

fn now() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn modified(path: &std::path::Path) -> String {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .map(|t| {
            time::OffsetDateTime::from(t).format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
        })
        .unwrap_or_default()
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The commit of the working tree the bench runs in, and whether it has changes.
fn git_state() -> Option<String> {
    let head = command_output("git", &["rev-parse", "--short", "HEAD"])?;
    let changed = command_output("git", &["status", "--porcelain", "--untracked-files=no"])
        .map(|s| s.lines().count())
        .unwrap_or(0);
    Some(if changed > 0 { format!("{head} with {changed} changed files") } else { head })
}

pub async fn run(args: Args) -> Result<()> {
    if let Some(file) = &args.render {
        let results: Results = serde_json::from_slice(&std::fs::read(file)?)?;
        return write_docs(&results, &args.docs, false);
    }
    let nofile = procs::raise_nofile();
    let bins = targets::Bins::locate(args.gateway.clone())?;
    let parent = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent)?;
    let work = tempfile::Builder::new().prefix("gateway-bench-").tempdir_in(&parent)?;
    let mut plan = plan::Plan::new(args.quick, args.rounds);
    if !args.a2a_rates.is_empty() {
        plan.a2a_rates = args.a2a_rates.clone();
    }
    let wanted = |s: Scenario| args.only.is_empty() || args.only.contains(&s);
    let mut results = Results::default();

    let mut engines = args.engines.clone();
    engines.dedup();
    let mut pg_version = None;
    if engines.contains(&Engine::Postgres) {
        match engine::prepare_postgres(&args.database_url).await {
            Ok(v) => pg_version = Some(v),
            Err(e) => {
                warn!(error = %e, "PostgreSQL is not available; its scenarios are skipped");
                results.failures.push(format!("PostgreSQL skipped: {e}"));
                engines.retain(|e| *e != Engine::Postgres);
            }
        }
    }
    results.machine = machine::describe(work.path(), nofile, pg_version);
    results.meta = Meta {
        started: now(),
        quick: plan.quick,
        rounds: plan.rounds,
        gateway_binary: bins.gateway.display().to_string(),
        gateway_version: command_output(&bins.gateway.display().to_string(), &["--version"]).unwrap_or_default(),
        gateway_built: modified(&bins.gateway),
        load_start: load_average(),
        git: git_state(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..Meta::default()
    };
    info!(work = %work.path().display(), quick = plan.quick, engines = ?engines, gateway = %bins.gateway.display(), "bench starting");
    let ctx =
        Ctx { bins, http: clients::http(), plan, work: work.path().to_path_buf(), pg_url: args.database_url.clone() };

    if wanted(Scenario::Fsync) {
        info!("(d) fsynced commit latency");
        match scenarios::fsync::run(&ctx, engines.contains(&Engine::Postgres)).await {
            Ok(r) => results.fsync = Some(r),
            Err(e) => fail(&mut results, "(d)", None, &e),
        }
    }
    for &engine in &engines {
        if wanted(Scenario::ManagedAgents) {
            info!(engine = engine.name(), "(a) Managed Agents round trip");
            match scenarios::managed_agents::run(&ctx, engine).await {
                Ok(r) => results.managed_agents.push(r),
                Err(e) => fail(&mut results, "(a)", Some(engine), &e),
            }
        }
    }
    for &engine in &engines {
        if wanted(Scenario::A2a) {
            info!(engine = engine.name(), "(b) A2A SendMessage");
            match scenarios::a2a::run(&ctx, engine).await {
                Ok(r) => results.a2a.push(r),
                Err(e) => fail(&mut results, "(b)", Some(engine), &e),
            }
        }
    }
    for &engine in &engines {
        if wanted(Scenario::Acp) {
            info!(engine = engine.name(), "(c) ACP prompt round trip");
            match scenarios::acp::run(&ctx, engine).await {
                Ok(r) => results.acp.push(r),
                Err(e) => fail(&mut results, "(c)", Some(engine), &e),
            }
        }
    }
    for &engine in &engines {
        if wanted(Scenario::Memory) {
            info!(engine = engine.name(), "(e) memory");
            match scenarios::memory::run(&ctx, engine, nofile).await {
                Ok(r) => results.memory.push(r),
                Err(e) => fail(&mut results, "(e)", Some(engine), &e),
            }
        }
    }
    if wanted(Scenario::Previews) {
        if engines.contains(&Engine::Postgres) {
            info!("(f) previews across processes");
            match scenarios::previews::run(&ctx).await {
                Ok(r) => results.previews = Some(r),
                Err(e) => fail(&mut results, "(f)", Some(Engine::Postgres), &e),
            }
        } else {
            // Only PostgreSQL relays previews between processes (SQLite is one process's).
            results
                .failures
                .push("(f) skipped: previews across processes need PostgreSQL, not measured in this run".into());
        }
    }
    if wanted(Scenario::Processes) {
        if engines.contains(&Engine::Postgres) {
            info!("(g) two processes on one PostgreSQL database");
            match scenarios::processes::run(&ctx).await {
                Ok(r) => results.processes = Some(r),
                Err(e) => fail(&mut results, "(g)", Some(Engine::Postgres), &e),
            }
        } else {
            // SQLite is one process's file: there is no second process to add.
            results.failures.push(
                "(g) skipped: two processes share a database only on PostgreSQL, not measured in this run".into(),
            );
        }
    }
    results.meta.finished = now();
    results.meta.load_end = load_average();

    write_docs(&results, &args.docs, true)?;
    if args.keep || !results.failures.is_empty() {
        let kept = work.keep();
        info!(work = %kept.display(), "work directory kept (process logs)");
    }
    Ok(())
}

fn fail(results: &mut Results, scenario: &str, engine: Option<Engine>, e: &error::BenchError) {
    let on = engine.map(|e| format!(" on {}", e.name())).unwrap_or_default();
    warn!(error = %e, "{scenario}{on} failed");
    results.failures.push(format!("{scenario}{on}: {e}"));
}
