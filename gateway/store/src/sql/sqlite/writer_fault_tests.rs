//! A grouped batch whose commit (and so its fsync) never happened acknowledged nothing, and
//! nothing of it survives: the writes ran in the shared transaction, the process was killed
//! (SIGKILL) before the commit, and after a restart the store holds exactly what had been
//! acknowledged before.
//!
//! The test runs itself twice: as the parent, and as a child process (the same test binary,
//! selected by an environment variable) that the parent kills once its committer stalled.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::conformance::{msg, session};
use crate::{AdmissionWrites, Store, StoreOptions};
use gateway_core::ids::SessionId;

use super::STALL_BEFORE_COMMIT;

const CHILD: &str = "GATEWAY_TEST_STALLED_COMMIT_DB";
const NAME: &str = "sql::sqlite::writer::fault_tests::a_batch_killed_before_its_commit_acknowledged_nothing";
const WRITES: usize = 8;

async fn open(path: &str) -> Arc<dyn Store> {
    crate::open(&format!("sqlite://{path}"), &StoreOptions::default()).await.expect("open the store")
}

/// The child: one acknowledged session, then concurrent messages into a batch that stalls.
async fn child(path: &str) {
    let store = open(path).await;
    store.migrate().await.expect("migrate");
    let s = session(&store).await;
    println!("SESSION {}", s.id);
    STALL_BEFORE_COMMIT.store(true, Ordering::SeqCst);
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..WRITES {
        let (store, id) = (Arc::clone(&store), s.id.clone());
        writes.spawn(async move {
            if store.submit_inputs(&id, vec![msg(&format!("m{i}"))], AdmissionWrites::default()).await.is_ok() {
                println!("ACKED {i}");
            }
        });
    }
    while writes.join_next().await.is_some() {}
    println!("UNREACHABLE: the stalled batch answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_killed_before_its_commit_acknowledged_nothing() {
    if let Ok(path) = std::env::var(CHILD) {
        child(&path).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db").display().to_string();
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(proc.stdout.take().unwrap()).lines();
    let (mut session_id, mut stalled, mut acked) = (None, None, Vec::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        // libtest may print its own words before ours on a line.
        if let Some((_, id)) = line.split_once("SESSION ") {
            session_id = Some(SessionId::parse(id).unwrap());
        } else if let Some((_, n)) = line.split_once("STALLED ") {
            stalled = Some(n.parse::<usize>().unwrap());
            break;
        } else if line.contains("ACKED") || line.contains("UNREACHABLE") {
            acked.push(line);
        }
    }
    // Killed with writes executed in the open transaction, between them and their commit.
    proc.kill().unwrap();
    let _ = proc.wait();
    let Some(session_id) = session_id else {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut proc.stderr.take().unwrap(), &mut err).unwrap();
        panic!("the child created no session ({:?}); it said: {err}", proc.wait());
    };
    let stalled = stalled.expect("the child's committer stalled with writes in its batch");
    assert!(stalled >= 1, "the batch held {stalled} writes");
    assert!(acked.is_empty(), "writes acknowledged before their commit: {acked:?}");

    let store = open(&path).await;
    let s = store.get_session(&session_id).await.expect("the acknowledged session survived");
    assert_eq!(s.last_seq, 0, "no event of the killed batch survived");
    assert_eq!(store.queue_stats().await.unwrap().queued, 0, "no run of the killed batch survived");
}
