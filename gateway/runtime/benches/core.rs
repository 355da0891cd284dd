//! `scripts/bench`: the gateway's durable paths against the hardware's own limits, measured
//! in one run on this machine, printed as ratios.
//!
//! Baselines are the cheapest durable thing each database can do: one single-row write
//! transaction with the same durability settings (SQLite WAL + synchronous=FULL; PostgreSQL
//! default synchronous_commit). A durable gateway cannot beat that per transaction; the ratios
//! say how much of it the gateway keeps, and how much batching buys.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gateway_core::Metadata;
use gateway_core::agent::BackendRef;
use gateway_core::content::ContentBlock;
use gateway_core::environment::ProviderTier;
use gateway_core::event::{EventKind, EventPayload, NewEvent};
use gateway_core::run::WorkerOffer;
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{AgentSelection, Coordinator, CreateSession, Delivery, SubscribeOptions, WorkerConfig};
use gateway_store::conformance::harness::{PgHarness, SqliteHarness};
use gateway_store::conformance::{Harness, agent_spec, env_spec, placement_offer};
use gateway_store::{Commit, LeaseTerms, Store};

fn say(t: &str) -> NewEvent {
    NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text(t)] })
}

fn out(t: &str) -> NewEvent {
    NewEvent::new(EventPayload::AgentMessage { content: vec![ContentBlock::text(t)] })
}

/// The shipped assembly on `store` with the scripted echo backend; Workers only if asked.
async fn gateway(store: &Arc<dyn Store>, workers: Option<WorkerConfig>) -> TestGateway {
    let builder = TestGateway::builder()
        .store(Arc::clone(store))
        .scripted()
        .offer(placement_offer())
        .subscription_poll(Duration::from_secs(1));
    match workers {
        Some(w) => builder.workers(w),
        None => builder.no_workers(),
    }
    .build()
    .await
}

async fn session(c: &Coordinator) -> gateway_core::session::Session {
    let agent = c.create_agent(agent_spec("bench")).await.unwrap();
    let env = c.create_environment(env_spec("bench")).await.unwrap();
    let req = CreateSession {
        budget: None,
        agent: AgentSelection { id: agent.id, version: None, overrides: None },
        environment_id: env.id,
        title: None,
        metadata: Metadata::new(),
        resources: vec![],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        client_tool_servers: Vec::new(),
    };
    c.create_session(req).await.unwrap().0
}

/// The cheapest durable write each engine can do: single-row transactions, same settings.
enum Raw {
    /// The directory is held so the database file outlives the pool.
    Sqlite(sqlx::SqlitePool, #[allow(dead_code)] tempfile::TempDir),
    Pg(sqlx::PgPool),
}

impl Raw {
    async fn sqlite() -> Self {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
        let dir = tempfile::tempdir().unwrap();
        let opts = SqliteConnectOptions::new()
            .filename(dir.path().join("raw.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(opts).await.unwrap();
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        Raw::Sqlite(pool, dir)
    }

    async fn pg(url: &str) -> Self {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::query("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)").execute(&pool).await.unwrap();
        Raw::Pg(pool)
    }

    /// `n` single-row transactions; returns transactions per second.
    async fn rate(&self, n: u32) -> f64 {
        let started = Instant::now();
        for _ in 0..n {
            match self {
                Raw::Sqlite(pool, _) => {
                    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
                    sqlx::query("INSERT INTO t (body) VALUES ($1)").bind("x").execute(&mut *tx).await.unwrap();
                    tx.commit().await.unwrap();
                }
                Raw::Pg(pool) => {
                    let mut tx = pool.begin().await.unwrap();
                    sqlx::query("INSERT INTO t (body) VALUES ($1)").bind("x").execute(&mut *tx).await.unwrap();
                    tx.commit().await.unwrap();
                }
            }
        }
        f64::from(n) / started.elapsed().as_secs_f64()
    }
}

/// A claimed run to commit into.
async fn fence(store: &Arc<dyn Store>) -> gateway_core::run::Fence {
    let gw = gateway(store, None).await;
    let c = &gw.coordinator;
    let s = session(c).await;
    c.submit(&s.id, vec![say("go")]).await.unwrap();
    let worker = WorkerOffer {
        worker: "bench".into(),
        host: "h".into(),
        backends: vec![BackendRef::Native],
        providers: vec![ProviderTier::new("local")],
    };
    let lease = LeaseTerms { lease: Duration::from_secs(3600), host_ttl: Duration::from_secs(3600) };
    store.claim_run(&worker, lease).await.unwrap().unwrap().fence
}

/// `n` fenced commits of `per_commit` events; returns commits per second.
async fn commit_rate(store: &Arc<dyn Store>, fence: &gateway_core::run::Fence, n: u32, per_commit: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        let events = (0..per_commit).map(|_| out("x")).collect();
        store.commit(fence, Commit { events, environment: None, bindings: vec![] }).await.unwrap();
    }
    f64::from(n) / started.elapsed().as_secs_f64()
}

/// Median of a list.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Whole turns per second through the Coordinator and 4 Workers (scripted echo backend).
async fn turn_rate(store: &Arc<dyn Store>, sessions: usize, turns_each: usize) -> f64 {
    let cfg = WorkerConfig { max_turns: 4, poll: Duration::from_millis(200), ..WorkerConfig::default() };
    let mut gw = gateway(store, Some(cfg)).await;
    let c = gw.coordinator.clone();
    let mut ids = Vec::new();
    for _ in 0..sessions {
        ids.push(session(&c).await.id);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for id in ids {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for t in 0..turns_each {
                let read = c.get_session(&id).await.unwrap();
                let stream =
                    c.subscribe(&read, SubscribeOptions { after_seq: read.last_seq, previews: false, poll: None });
                c.submit(&id, vec![say(&format!("turn {t}"))]).await.unwrap();
                let mut stream = Box::pin(stream);
                while let Some(d) = stream.next().await {
                    if matches!(d.unwrap(), Delivery::Event(e) if e.kind() == EventKind::TurnEnded) {
                        break;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = (sessions * turns_each) as f64 / started.elapsed().as_secs_f64();
    // The store is the caller's: only the Workers stop.
    gw.stop_workers().await;
    rate
}

/// Commit-to-delivery latency with `fanout` subscribers on one session: (p50, p99) in µs.
async fn fanout_latency(store: &Arc<dyn Store>, fanout: usize, events: usize) -> (u128, u128) {
    let gw = gateway(store, None).await;
    let c = &gw.coordinator;
    let s = session(c).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let mut subs = Vec::new();
    for _ in 0..fanout {
        let stream = c.subscribe(&s, SubscribeOptions::default());
        let tx = tx.clone();
        subs.push(tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            while let Some(Ok(Delivery::Event(e))) = stream.next().await {
                let _ = tx.send((e.seq, Instant::now()));
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut committed_at = Vec::new();
    for i in 0..events {
        let e = c.submit(&s.id, vec![NewEvent::new(EventPayload::UserInterrupt {})]).await.unwrap();
        committed_at.push((e[0].seq, Instant::now()));
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while latencies.len() < fanout * events && Instant::now() < deadline {
        if let Ok(Some((seq, at))) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await
            && let Some((_, c_at)) = committed_at.iter().find(|(s, _)| *s == seq)
        {
            latencies.push(at.saturating_duration_since(*c_at).as_micros());
        }
    }
    for s in subs {
        s.abort();
    }
    latencies.sort_unstable();
    let p = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0);
    (p(0.5), p(0.99))
}

/// Resident memory per open (idle) subscription, in bytes.
async fn memory_per_subscription(store: &Arc<dyn Store>, n: usize) -> u64 {
    fn rss() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
            })
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    }
    let gw = gateway(store, None).await;
    let c = &gw.coordinator;
    let s = session(c).await;
    let before = rss();
    // Each subscription driven by a task of its own, as an open stream connection is.
    let mut held = Vec::new();
    for _ in 0..n {
        let stream = c.subscribe(&s, SubscribeOptions { previews: true, ..Default::default() });
        held.push(tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            while stream.next().await.is_some() {}
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss();
    for t in held {
        t.abort();
    }
    after.saturating_sub(before) / n as u64
}

/// Alternates baseline and candidate rounds so machine noise hits both alike; reports the
/// medians and the median of the per-round ratios.
const ROUNDS: usize = 5;

async fn engine(name: &str, h: &dyn Harness, raw: Raw) {
    let store = h.fresh().await;
    let f = fence(&store).await;
    println!("\n{name}");
    let (mut base, mut one, mut ten, mut r1, mut r10) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let b = raw.rate(100).await;
        let c1 = commit_rate(&store, &f, 100, 1).await;
        let c10 = commit_rate(&store, &f, 30, 10).await * 10.0;
        base.push(b);
        one.push(c1);
        ten.push(c10);
        r1.push(c1 / b);
        r10.push(c10 / b);
    }
    println!("  {:<44} {:>9.0} tx/s         (baseline)", "raw single-row durable transaction", median(base.clone()));
    println!("  {:<44} {:>9.0} commits/s    {:.2}x baseline", "fenced commit, 1 event", median(one), median(r1));
    println!(
        "  {:<44} {:>9.0} events/s     {:.2}x baseline (batching)",
        "fenced commit, 10 events",
        median(ten),
        median(r10)
    );
    let (mut turns, mut rt) = (vec![], vec![]);
    for _ in 0..3 {
        let b = raw.rate(100).await;
        let t = turn_rate(&store, 8, 5).await;
        turns.push(t);
        // A turn is 5 write transactions: submit, claim, turn start, message, settlement.
        rt.push(t * 5.0 / b);
    }
    println!(
        "  {:<44} {:>9.0} turns/s      {:.2}x baseline (5 writes/turn, 4 workers)",
        "whole turns",
        median(turns),
        median(rt)
    );
    let (p50, p99) = fanout_latency(&store, 100, 100).await;
    println!("  {:<44} {:>7} µs p50    {:>7} µs p99", "commit -> delivery, 100 subscribers", p50, p99);
    let mem = memory_per_subscription(&store, 2000).await;
    println!("  {:<44} {:>9} bytes", "memory per open subscription (task + stream)", mem);
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    println!(
        "gateway core benchmark ({} CPUs); ratios compare against the same machine's raw database",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let sqlite = SqliteHarness::new(true);
    engine("SQLite (WAL, synchronous=FULL)", &sqlite, Raw::sqlite().await).await;
    match tokio::time::timeout(Duration::from_secs(5), PgHarness::new_schema_url()).await {
        Ok(url) => {
            let raw = Raw::pg(&url).await;
            engine("PostgreSQL (one gateway process, LISTEN/NOTIFY on)", &PgHarness::new(true), raw).await;
        }
        Err(_) => println!("\nPostgreSQL: not reachable, skipped"),
    }
}
