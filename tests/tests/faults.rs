#![allow(clippy::unwrap_used)]
//! Fault tests of issue 13, on real processes: kill -9 during a burst of SQLite writes (F4),
//! the SQLite database on a full filesystem (F14), PostgreSQL restarted under load (F3), and
//! a worker whose clock is five minutes off (F15). Each asserts what a client sees: status
//! codes and their `retry-after`, readiness, and every acknowledged write still there.
//!
//! F4 runs `GATEWAY_FAULT_ROUNDS` rounds (default 10 here and in `scripts/test`; the issue's
//! full count is `GATEWAY_FAULT_ROUNDS=50`). F14 mounts a tmpfs and so needs root; F3 starts a
//! private PostgreSQL cluster (the shared one must never restart); F15 needs libfaketime.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::SessionId;
use gateway_core::event::{EventKind, EventPayload};
use gateway_store::conformance::harness::PgHarness;
use gateway_store::conformance::{msg, session_with};
use gateway_store::{EventLog, PgStore, Store, StoreOptions};
use gateway_tests::load::{Load, Outcome, Record, Workload, classify};
use gateway_tests::pg_cluster::PgCluster;
use gateway_tests::tmpfs::Tmpfs;
use gateway_tests::{Gateway, GatewayBuilder, eventually, workdir};
use nix::sys::signal::Signal;
use sqlx::Connection;

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");
/// Debian's libfaketime (package `libfaketime`, pinned in `scripts/test`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A gateway on `database_url` whose other local state lives in `data_dir`.
fn gateway(name: &str, database_url: &str, data_dir: &Path) -> GatewayBuilder {
    GatewayBuilder::new(TESTBED, name)
        .env("GATEWAY_DATA_DIR", data_dir.display())
        .env("GATEWAY_DATABASE_URL", database_url)
        .env("GATEWAY_WORKERS__POLL_MS", 200)
        .env("GATEWAY_WORKERS__SHUTDOWN_GRACE_SECS", 1)
}

/// `GET path`: its status, or 0 without an answer within `timeout`.
async fn status(http: &reqwest::Client, g: &Gateway, path: &str, timeout: Duration) -> u16 {
    http.get(g.url(path)).timeout(timeout).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// The ids a database holds: sessions and events.
type Ids = (HashSet<String>, HashSet<String>);

/// `PRAGMA integrity_check` of a SQLite file (read-only, beside a running gateway) and the
/// ids it holds.
async fn sqlite_check(db: &Path) -> (String, Ids) {
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(db).read_only(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("open the database");
    let rows: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check").fetch_all(&mut conn).await.unwrap();
    let integrity = rows.into_iter().map(|(r,)| r).collect::<Vec<_>>().join("; ");
    let sessions: Vec<(String,)> = sqlx::query_as("SELECT id FROM sessions").fetch_all(&mut conn).await.unwrap();
    let events: Vec<(String,)> = sqlx::query_as("SELECT id FROM events").fetch_all(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    (integrity, (sessions.into_iter().map(|r| r.0).collect(), events.into_iter().map(|r| r.0).collect()))
}

/// Asserts that every write `record` saw acknowledged is among `ids`.
fn assert_all_present(record: &Record, ids: &Ids, when: &str) {
    let missing = record.missing(&ids.0, &ids.1);
    assert!(
        missing.is_empty(),
        "{when}: {} acknowledged writes lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

/// A user of the API still sees an acknowledged write: the session and its message.
async fn assert_visible(http: &reqwest::Client, g: &Gateway, record: &Record) {
    let Some((session, event)) = record.events.last() else { return };
    assert_eq!(status(http, g, &format!("/v1/sessions/{session}"), Duration::from_secs(10)).await, 200);
    let listed: serde_json::Value =
        http.get(g.url(&format!("/v1/sessions/{session}/events"))).send().await.unwrap().json().await.unwrap();
    assert!(listed["data"].as_array().unwrap().iter().any(|e| e["id"] == event.as_str()), "{event} listed: {listed}");
}

fn fault_rounds() -> usize {
    std::env::var("GATEWAY_FAULT_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10)
}

/// F4: kill -9 a gateway on a SQLite file in the middle of a burst of writes (sessions and
/// user messages from 12 concurrent clients), round after round. After each restart the file
/// passes `PRAGMA integrity_check` and holds every write any client saw acknowledged, in
/// every round so far; the API shows the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f4_sqlite_kill_9_during_a_burst_of_writes_loses_nothing_acknowledged() {
    let dir = workdir("faults-f4");
    let db = dir.join("gateway.db");
    let url = format!("sqlite://{}", db.display());
    let http = reqwest::Client::new();
    let mut g = gateway("f4", &url, &dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let workload = Workload::setup(&http, &g.url("")).await;
    let mut all = Record::default();
    let rounds = fault_rounds();
    for round in 0..rounds {
        let load = Load::start(&workload, &g.url(""), 12, Duration::from_secs(30));
        // Mid-burst: writes are being acknowledged, then a pseudo-random 0-250 ms more.
        eventually(30, "writes acknowledged", || async { (load.acked() >= 10).then_some(()) }).await;
        tokio::time::sleep(Duration::from_millis((round as u64 * 7919) % 250)).await;
        g.signal(Signal::SIGKILL);
        assert_eq!(g.exit_code(Duration::from_secs(10)).await, None, "killed by the signal");
        let record = load.stop().await;
        assert!(record.violations.is_empty(), "round {round}: {:?}", record.violations);
        all.merge(record);

        g = gateway("f4", &url, &dir).spawn();
        g.ready(Duration::from_secs(30)).await;
        let (integrity, ids) = sqlite_check(&db).await;
        assert_eq!(integrity, "ok", "round {round}: integrity_check");
        assert_all_present(&all, &ids, &format!("after round {round}"));
        assert_visible(&http, &g, &all).await;
    }
    eprintln!(
        "F4: {rounds} rounds, {} sessions and {} events acknowledged and present; {} requests cut by the kills",
        all.sessions.len(),
        all.events.len(),
        all.unanswered
    );
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One step of the workload (a session and its message); whether it was acknowledged.
async fn one_write(http: &reqwest::Client, g: &Gateway, w: &Workload, record: &mut Record) -> bool {
    let before = record.acknowledged();
    w.step(http, &g.url(""), Duration::from_secs(15), record).await;
    record.acknowledged() > before
}

/// F14: the SQLite database on a 4 MiB tmpfs that fills up. Writes then fail cleanly (503 with
/// `retry-after`, answered at once: no 500, no hang, no crash) and `/readyz` says not ready
/// while they do; once the space returns the gateway is ready and writes again, and the file
/// passes `integrity_check` with every acknowledged write in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f14_a_full_disk_fails_writes_cleanly_and_recovers() {
    let fs = Tmpfs::mount("f14", "4m");
    let dir = workdir("faults-f14");
    let db = fs.dir.join("gateway.db");
    let mut g = gateway("f14", &format!("sqlite://{}", db.display()), &dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let workload = Workload::setup(&http, &g.url("")).await;
    let mut record = Record::default();
    for _ in 0..5 {
        assert!(one_write(&http, &g, &workload, &mut record).await, "{record:?}");
    }

    let filled = fs.fill("filler");
    assert!(filled > 0, "the filler took the free space");
    // Writes fail now; each answer comes at once. A few may still fit in the WAL's last page.
    let mut failed = 0;
    for _ in 0..40 {
        let started = Instant::now();
        if !one_write(&http, &g, &workload, &mut record).await {
            failed += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "a write on a full disk took {:?}", started.elapsed());
        if failed >= 5 {
            break;
        }
    }
    assert!(record.violations.is_empty(), "{:?}", record.violations);
    assert_eq!((record.timeouts, record.unanswered), (0, 0), "every write answered: {record:?}");
    assert!(failed >= 5 && record.refusals.get(&503).is_some_and(|&n| n >= 5), "writes refused with 503: {record:?}");
    assert_eq!(status(&http, &g, "/readyz", Duration::from_secs(5)).await, 503, "not ready while writes fail");
    assert_eq!(status(&http, &g, "/healthz", Duration::from_secs(5)).await, 200, "alive");
    assert!(!one_write(&http, &g, &workload, &mut record).await, "still full");
    assert_eq!(status(&http, &g, "/readyz", Duration::from_secs(5)).await, 503, "still not ready");
    assert!(g.child.try_wait().unwrap().is_none(), "the gateway did not crash; log:\n{}", g.log());

    std::fs::remove_file(fs.dir.join("filler")).unwrap();
    let ready_in = Instant::now();
    eventually(10, "ready once space returns", || async {
        (status(&http, &g, "/readyz", Duration::from_secs(5)).await == 200).then_some(())
    })
    .await;
    eprintln!("F14: {failed} writes refused on the full disk; ready {:?} after space returned", ready_in.elapsed());
    for _ in 0..5 {
        assert!(one_write(&http, &g, &workload, &mut record).await, "writes again: {record:?}");
    }
    assert!(record.violations.is_empty(), "{:?}", record.violations);
    let (integrity, ids) = sqlite_check(&db).await;
    assert_eq!(integrity, "ok");
    assert_all_present(&record, &ids, "after space returned");
    assert_visible(&http, &g, &record).await;

    // And across a crash: what the full disk left in the WAL recovers whole.
    g.signal(Signal::SIGKILL);
    let _ = g.exit_code(Duration::from_secs(10)).await;
    g = gateway("f14", &format!("sqlite://{}", db.display()), &dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let (integrity, ids) = sqlite_check(&db).await;
    assert_eq!(integrity, "ok", "after a restart");
    assert_all_present(&record, &ids, "after a restart");
    drop(g);
    drop(fs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ids a PostgreSQL database holds.
async fn pg_ids(url: &str) -> Ids {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let sessions: Vec<(String,)> = sqlx::query_as("SELECT id FROM sessions").fetch_all(&mut conn).await.unwrap();
    let events: Vec<(String,)> = sqlx::query_as("SELECT id FROM events").fetch_all(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    (sessions.into_iter().map(|r| r.0).collect(), events.into_iter().map(|r| r.0).collect())
}

/// Polls `/readyz` until it answers `want`; how long that took from `since`.
async fn readyz_becomes(http: &reqwest::Client, g: &Gateway, want: u16, since: Instant, within: Duration) -> Duration {
    loop {
        if status(http, g, "/readyz", Duration::from_secs(3)).await == want {
            return since.elapsed();
        }
        assert!(since.elapsed() < within, "/readyz not {want} within {within:?}; log:\n{}", g.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// F3: a private PostgreSQL cluster stopped under load, first with `-m immediate` (a crash),
/// then with `-m fast` (an operator's restart: every session gets a FATAL `57P01`), and
/// started again 2 s later each time. `/readyz` goes 503 within 1 s of the stop and 200
/// within 5 s of the database's return; meanwhile clients get 503 with `retry-after`, never a
/// 500; nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f3_postgres_crash_restart_under_load() {
    let pg = PgCluster::start("f3");
    let dir = workdir("faults-f3");
    let g = gateway("f3", &pg.url(), &dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let workload = Workload::setup(&http, &g.url("")).await;
    let mut all = Record::default();
    for mode in ["immediate", "fast"] {
        let load = Load::start(&workload, &g.url(""), 12, Duration::from_secs(30));
        eventually(30, "writes acknowledged", || async { (load.acked() >= 30).then_some(()) }).await;

        pg.stop(mode);
        let down = Instant::now();
        let not_ready = readyz_becomes(&http, &g, 503, down, Duration::from_secs(10)).await;
        let until = down + Duration::from_secs(2);
        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
        pg.start_server();
        let up = Instant::now();
        let ready = readyz_becomes(&http, &g, 200, up, Duration::from_secs(30)).await;
        let acked_back = load.acked();
        eventually(30, "writes acknowledged again", || async { (load.acked() >= acked_back + 30).then_some(()) }).await;
        let record = load.stop().await;
        eprintln!(
            "F3 -m {mode}: readyz 503 {not_ready:?} after the stop, 200 {ready:?} after the start; {} writes \
             acknowledged, refusals {:?}",
            record.acknowledged(),
            record.refusals
        );
        assert!(not_ready <= Duration::from_secs(1), "-m {mode}: readyz not ready {not_ready:?} after the stop");
        assert!(ready <= Duration::from_secs(5), "-m {mode}: readyz ready {ready:?} after the database returned");
        assert!(record.violations.is_empty(), "-m {mode}: {:?}", record.violations);
        assert_eq!(record.timeouts, 0, "-m {mode}: no request hung");
        all.merge(record);
        assert_all_present(&all, &pg_ids(&pg.url()).await, &format!("after the -m {mode} restart"));
    }
    // Requests in flight when the server went away were refused; ones that waited for a
    // connection through the outage may have been served late, and admission may shed load
    // with 529 meanwhile, so some phase, not each, shows the 503.
    assert!(all.refusals.get(&503).is_some_and(|&n| n > 0), "clients were told 503: {:?}", all.refusals);
    assert_visible(&http, &g, &all).await;
    drop(g);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway on the shared PostgreSQL test database (`schema` URL) with 2 s leases.
fn leased(name: &str, url: &str, dir: &Path) -> GatewayBuilder {
    gateway(name, url, dir).env("GATEWAY_WORKERS__LEASE_SECS", 2).env("GATEWAY_WORKERS__MAX_TURNS", 16)
}

/// The same gateway with its process clock moved by `offset` (libfaketime, e.g. `+5m`).
fn skewed(name: &str, url: &str, dir: &Path, offset: &str) -> GatewayBuilder {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's libfaketime (scripts/test does)"
    );
    leased(name, url, dir).env("LD_PRELOAD", LIBFAKETIME).env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", 1)
}

/// Seconds into the UTC day of the first `"timestamp":"…T12:34:56` in a JSON log.
fn first_log_second(log: &str) -> Option<i64> {
    let at = log.find("\"timestamp\":\"")? + "\"timestamp\":\"".len();
    let time = log.get(at..)?.split('T').nth(1)?.get(..8)?;
    let mut parts = time.split(':').map(|p| p.parse::<i64>().ok());
    Some(parts.next()?? * 3600 + parts.next()?? * 60 + parts.next()??)
}

/// The skew the gateway's log shows against this process's clock, in seconds.
fn log_skew(g: &Gateway) -> i64 {
    let logged = first_log_second(&g.log()).unwrap_or_else(|| panic!("no timestamp in the log:\n{}", g.log()));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64 % 86_400;
    (logged - now + 43_200).rem_euclid(86_400) - 43_200
}

/// The run of a session: (owner, epoch, state, crash count).
async fn run_of(store: &PgStore, session: &SessionId) -> Option<(Option<String>, i64, String, i64)> {
    sqlx::query_as("SELECT lease_owner, lease_epoch, state, crash_count FROM runs WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_optional(store.pool())
        .await
        .ok()
        .flatten()
}

/// Steps of a turn in F15, 400 ms apart: 4 s, twice the lease, so a lease the other process
/// wrongly sees expired is taken while the turn still runs.
const STEPS: usize = 10;

/// A session whose turn commits [`STEPS`] steps.
async fn long_turn(store: &Arc<PgStore>) -> SessionId {
    let dyn_store: Arc<dyn Store> = store.clone();
    session_with(&dyn_store, vec![msg(&format!("steps {STEPS} 400"))]).await.id
}

/// Waits until `owner` runs the session's turn and has committed a step; its epoch.
async fn held_by(store: &PgStore, session: &SessionId, owner: &str) -> i64 {
    eventually(30, &format!("{owner} runs the turn"), || async {
        let (by, epoch, state, _) = run_of(store, session).await?;
        let stepped =
            store.events_after(session, 0, 100).await.ok()?.iter().any(|e| e.kind() == EventKind::AgentMessage);
        (state == "running" && by.as_deref() == Some(owner) && stepped).then_some(epoch)
    })
    .await
}

/// Waits for the turn to end; asserts it ran once (each step once) and every event of it
/// was committed under `epoch` by the first claim (no takeover, no crash).
async fn ends_under(store: &PgStore, session: &SessionId, epoch: i64, what: &str) {
    eventually(30, "the turn ends", || async {
        let (_, _, state, _) = run_of(store, session).await?;
        (state == "completed").then_some(())
    })
    .await;
    let (_, final_epoch, _, crashes) = run_of(store, session).await.unwrap();
    assert_eq!((final_epoch, crashes), (epoch, 0), "{what}: the lease was never taken over");
    let log = store.events_after(session, 0, 1000).await.unwrap();
    let steps = log.iter().filter(|e| matches!(e.payload, EventPayload::AgentMessage { .. })).count();
    assert_eq!(steps, STEPS, "{what}: each step once");
    assert!(log.iter().all(|e| e.epoch.is_none_or(|x| x == epoch)), "{what}: one epoch");
}

/// F15: a worker process whose clock is `offset` off, beside one whose clock is right, on one
/// PostgreSQL database with 2 s leases. Leases follow the database clock: (1) the normal
/// process does not take a live lease of the skewed one (a slow clock would write leases that
/// already expired); (2) the skewed one does not take a live lease of the normal one (a fast
/// clock would see it expired); (3) when the skewed holder stops, the normal process takes
/// over within the lease plus a poll (a fast clock would write a lease 5 minutes long).
async fn leases_follow_the_database_clock(offset: &str, want_skew: i64) {
    let url = PgHarness::new_schema_url().await;
    let store = Arc::new(PgStore::connect(&url, &StoreOptions::default()).await.expect("connect"));
    store.migrate().await.expect("migrate");
    let dir = workdir(&format!("faults-f15{offset}"));

    // (1) The skewed process holds a turn; the normal one starts beside it.
    let mut skew = skewed("skew", &url, &dir, offset).spawn();
    skew.ready(Duration::from_secs(30)).await;
    let seen = log_skew(&skew);
    assert!((seen - want_skew).abs() < 60, "the skewed process's clock is {seen} s off, not {want_skew}");
    let first = long_turn(&store).await;
    let epoch = held_by(&store, &first, "skew").await;
    let mut normal = leased("normal", &url, &dir).spawn();
    normal.ready(Duration::from_secs(30)).await;
    ends_under(&store, &first, epoch, "the skewed process's turn").await;

    // (2) The normal process holds a turn; the skewed one (restarted) runs beside it.
    skew.signal(Signal::SIGTERM);
    assert_eq!(skew.exit_code(Duration::from_secs(20)).await, Some(0));
    let second = long_turn(&store).await;
    let epoch = held_by(&store, &second, "normal").await;
    skew = skewed("skew", &url, &dir, offset).spawn();
    skew.ready(Duration::from_secs(30)).await;
    ends_under(&store, &second, epoch, "the normal process's turn").await;

    // (3) The skewed process holds a turn and stops answering: its lease expires on time.
    normal.signal(Signal::SIGTERM);
    assert_eq!(normal.exit_code(Duration::from_secs(20)).await, Some(0));
    let third = long_turn(&store).await;
    let epoch = held_by(&store, &third, "skew").await;
    normal = leased("normal", &url, &dir).spawn();
    normal.ready(Duration::from_secs(30)).await;
    skew.signal(Signal::SIGSTOP);
    let stopped = Instant::now();
    eventually(30, "the normal process takes the stopped holder's turn over", || async {
        let (by, e, _, _) = run_of(&store, &third).await?;
        (by.as_deref() == Some("normal") && e > epoch).then_some(())
    })
    .await;
    let took = stopped.elapsed();
    skew.signal(Signal::SIGCONT);
    eventually(30, "the taker finishes the turn", || async {
        (run_of(&store, &third).await?.2 == "completed").then_some(())
    })
    .await;
    eprintln!("F15 {offset}: the stopped skewed holder's 2 s lease was taken over after {took:?}");
    assert!(took < Duration::from_secs(6), "takeover after {took:?}: the lease outlived its 2 s");
    let log = store.events_after(&third, 0, 1000).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "no duplicate or missing seq");
    drop((skew, normal));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f15_a_clock_five_minutes_fast_neither_steals_nor_keeps_leases() {
    leases_follow_the_database_clock("+5m", 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f15_a_clock_five_minutes_slow_neither_steals_nor_keeps_leases() {
    leases_follow_the_database_clock("-5m", -300).await;
}

/// The classifier the load tests rely on: a 503 without `retry-after` is a violation, not a
/// refusal (a test whose classifier accepted anything could not fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_without_retry_after_is_a_violation() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                .await;
        }
    });
    let http = reqwest::Client::new();
    let outcome = classify(http.get(format!("http://127.0.0.1:{port}/")), "probe").await;
    assert!(matches!(outcome, Outcome::Violation(_)));
}
