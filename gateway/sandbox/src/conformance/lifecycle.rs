//! Hibernation and Hands coming and going: files stay, processes do not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Fixture, Harness, call, open_dir, policy};
use crate::Hand;

pub async fn files_survive_hibernate_and_a_new_hand(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.ok("write", json!({"file_path": "notes/a.txt", "content": "from the tool"})).await;
    f.sh("echo from the shell > b.txt; export STATE=kept").await;
    assert_eq!(f.sh("echo $STATE").await, "kept\n");
    f.hand.hibernate().await;
    f.hand.hibernate().await; // twice is harmless
    assert_eq!(f.ok("read", json!({"file_path": "notes/a.txt"})).await, "     1\tfrom the tool\n");
    assert_eq!(f.sh("cat b.txt; echo ${STATE:-gone}").await, "from the shell\ngone\n", "a fresh shell, same files");

    // A new sandbox and Hand over the same directory, as after a gateway restart.
    let sandbox = h.provider().open(open_dir(f.sandbox.workspace().path()), &policy()).unwrap();
    let hand = Hand::new(Arc::clone(&sandbox)).unwrap();
    assert_eq!(hand.workspace(), f.sandbox.workspace().path());
    let read = call(&hand, "read", json!({"file_path": "b.txt"})).await;
    assert_eq!(read.text, "     1\tfrom the shell\n");
    let cat = call(&hand, "bash", json!({"command": "cat notes/a.txt"})).await;
    assert_eq!(cat.text, "from the tool");
}

/// A background job must not outlive `hibernate()`: it would write to the workspace later.
pub async fn hibernate_kills_background_work(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.sh("(sleep 1.5; echo late > late.txt) > /dev/null 2>&1 &").await;
    f.hand.hibernate().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!f.host("late.txt").exists(), "a background job survived hibernation");
}

/// Hibernating while a command runs does not wait for the command's time limit.
pub async fn hibernate_interrupts_a_running_command(h: &dyn Harness) {
    let f = Fixture::new(h);
    let begun = Instant::now();
    let running = call(&f.hand, "bash", json!({"command": "echo started; sleep 30", "timeout_ms": 60_000}));
    let hibernate = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        f.hand.hibernate().await;
    };
    let (out, ()) = tokio::join!(running, hibernate);
    assert!(out.is_error && out.text.starts_with("started\n") && out.text.contains("cancelled"), "{out:?}");
    assert!(begun.elapsed() < Duration::from_secs(10), "took {:?}", begun.elapsed());
    assert_eq!(f.sh("echo after").await, "after\n", "the Hand still works after hibernating");
}

pub async fn dropping_a_hand_kills_its_shell(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.sh("(sleep 1.5; echo late > late.txt) > /dev/null 2>&1 &").await;
    let Fixture { dir, sandbox, hand } = f;
    drop(hand);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!sandbox.workspace().path().join("late.txt").exists(), "a background job survived its Hand");
    drop(dir);
}

/// Session delete (`Hand::release`) stops every process the sandbox started, also one that
/// called `setsid()` to leave the shell's process group.
pub async fn release_kills_children_that_left_their_process_group(h: &dyn Harness) {
    let f = Fixture::new(h);
    assert!(
        f.sandbox.contains_descendants(),
        "the provider must hold a sandbox's processes in a cgroup here (the gateway runs as root or has a \
         delegated cgroup); README: what `local` does not protect"
    );
    let marker = super::unique("gw-setsid");
    f.sh(&format!("setsid bash -c 'exec -a {marker} sleep 60' </dev/null >/dev/null 2>&1 &")).await;
    assert!(
        super::eventually(Duration::from_secs(5), || !super::processes_with(&marker).is_empty()).await,
        "the detached child never started"
    );
    f.hand.release().await;
    assert!(
        super::eventually(Duration::from_secs(5), || super::processes_with(&marker).is_empty()).await,
        "a setsid child outlived release"
    );
}
