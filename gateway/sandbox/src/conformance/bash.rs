//! The `bash` tool: a persistent shell in the workspace, bounded in time and output.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Fixture, Harness, eventually, policy, processes_with, unique};

pub async fn bash_runs_in_the_workspace_with_merged_output(h: &dyn Harness) {
    let f = Fixture::new(h);
    assert_eq!(f.sh("pwd").await, format!("{}\n", f.inner("")));
    assert_eq!(f.sh("echo out; echo err >&2; echo out2").await, "out\nerr\nout2\n");
    f.sh("mkdir -p made && echo content > made/file.txt").await;
    assert_eq!(std::fs::read_to_string(f.host("made/file.txt")).unwrap(), "content\n");
    assert_eq!(f.sh("printf 'no newline'").await, "no newline");
    assert_eq!(f.sh("true").await, "(no output)");
    // Commands read an empty stdin, never the shell's command pipe.
    assert_eq!(f.sh("cat; echo after").await, "after\n");
    // Quotes, here-documents and multi-line commands go through unchanged.
    let multi = "cat <<'EOF'\nit's \"quoted\" $HOME\nEOF\necho done";
    assert_eq!(f.sh(multi).await, "it's \"quoted\" $HOME\ndone\n");
}

pub async fn shell_state_persists_until_restart(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.sh("mkdir -p sub && cd sub && X=42 && greet() { echo hello $1; }").await;
    assert_eq!(f.sh("pwd; echo $X; greet you").await, format!("{}\n42\nhello you\n", f.inner("sub")));
    let restarted = f.ok("bash", json!({"restart": true, "command": "pwd; echo ${X:-unset}"})).await;
    assert_eq!(restarted, format!("{}\nunset\n", f.inner("")));
    f.sh("Y=1").await;
    let bare = f.ok("bash", json!({"restart": true})).await;
    assert!(bare.contains("restarted"), "{bare}");
    assert_eq!(f.sh("echo ${Y:-unset}").await, "unset\n");
}

pub async fn exit_statuses_are_reported(h: &dyn Harness) {
    let f = Fixture::new(h);
    assert_eq!(f.sh("false").await, "exit code: 1");
    assert_eq!(f.sh("echo partial; sh -c 'exit 7'").await, "partial\nexit code: 7");
    // A syntax error is the command's error; the shell keeps working.
    let syntax = f.sh("echo \"unterminated").await;
    assert!(syntax.contains("exit code: 2"), "{syntax}");
    assert_eq!(f.sh("echo still here").await, "still here\n");
    // `exit` ends the shell itself: the call says so, and the next call gets a fresh shell.
    let exited = f.err("bash", json!({"command": "echo bye; exit 5"})).await;
    assert!(exited.starts_with("bye\n") && exited.contains("shell exited"), "{exited}");
    assert_eq!(f.sh("echo fresh").await, "fresh\n");
    // A shell that dies between calls (killed from outside) is replaced without a failed call.
    f.sh("(sleep 0.2; kill -9 $$) > /dev/null 2>&1 &").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(f.sh("echo replaced").await, "replaced\n");
}

pub async fn the_environment_is_minimal(h: &dyn Harness) {
    let f = Fixture::new(h);
    let env = f.sh("env").await;
    let names: BTreeSet<&str> = env.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
    let allowed: BTreeSet<&str> = ["PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "OLDPWD", "_"].into();
    assert!(names.is_subset(&allowed), "unexpected variables: {:?}", names.difference(&allowed).collect::<Vec<_>>());
    // Nothing of this test process's environment (cargo's, CI's, the gateway's secrets) gets in.
    // Without unsafe code the test cannot set a marker variable of its own; cargo's test
    // runners always set some (`CARGO_PKG_NAME`, ...), which serve as markers.
    assert!(std::env::vars().any(|(k, _)| !allowed.contains(k.as_str())), "no marker variable to leak");
    for (key, value) in std::env::vars() {
        if !allowed.contains(key.as_str()) {
            assert!(!names.contains(key.as_str()), "{key} leaked");
        }
        if value.len() >= 12 && !allowed.contains(key.as_str()) {
            assert!(!env.contains(&value), "the value of {key} leaked");
        }
    }
    assert_eq!(f.sh("echo $HOME").await, format!("{}\n", f.inner("")));
    assert_eq!(f.sh("echo $PATH").await, "/usr/local/bin:/usr/bin:/bin\n");
    assert_eq!(f.sh("echo $LANG $TERM").await, "C.UTF-8 dumb\n");
}

pub async fn a_timeout_kills_the_process_group(h: &dyn Harness) {
    let f = Fixture::new(h);
    // A unique duration makes the sleep findable among the host's processes.
    let digits: String = unique("x").chars().filter(char::is_ascii_digit).take(6).collect();
    let marker = format!("61.{digits}1");
    let command = format!("echo started; (sleep 2; touch survived) > /dev/null 2>&1 & sleep {marker}");
    let begun = Instant::now();
    let out = f.err("bash", json!({"command": command, "timeout_ms": 800})).await;
    assert!(begun.elapsed() < Duration::from_secs(10), "took {:?}", begun.elapsed());
    assert!(out.starts_with("started\n") && out.contains("timed out after"), "{out}");
    let gone = eventually(Duration::from_secs(3), || processes_with(&format!("sleep {marker}")).is_empty()).await;
    assert!(gone, "the timed-out command is still running");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!f.host("survived").exists(), "a background child survived the timeout");
    assert_eq!(f.sh("echo alive").await, "alive\n", "the next call gets a working shell");
}

pub async fn timeouts_are_bounded_by_the_policy(h: &dyn Harness) {
    let mut p = policy();
    p.limits.wall_clock = Duration::from_millis(500);
    p.limits.max_wall_clock = Duration::from_secs(1);
    let f = Fixture::with_policy(h, p);
    let begun = Instant::now();
    let default = f.err("bash", json!({"command": "sleep 30"})).await;
    assert!(default.contains("timed out after 500ms"), "{default}");
    let capped = f.err("bash", json!({"command": "sleep 30", "timeout_ms": 600_000})).await;
    assert!(capped.contains("timed out after 1s"), "{capped}");
    assert!(begun.elapsed() < Duration::from_secs(12), "took {:?}", begun.elapsed());
    let shorter = f.ok("bash", json!({"command": "sleep 0.1; echo quick", "timeout_ms": 5_000})).await;
    assert_eq!(shorter, "quick\n");
}

pub async fn output_is_capped_and_the_shell_stays_in_sync(h: &dyn Harness) {
    let mut p = policy();
    p.limits.output_cap = 1000;
    let f = Fixture::with_policy(h, p);
    let out = f.sh("head -c 200000 /dev/zero | tr '\\0' x; echo; echo tail-line").await;
    assert!(out.starts_with(&"x".repeat(1000)), "{}", &out[..out.len().min(100)]);
    assert!(!out.contains(&"x".repeat(1001)), "more than the cap was kept");
    assert!(out.contains("truncated") && out.contains("199011 more bytes"), "{}", &out[1000..]);
    assert!(!out.contains("tail-line"), "output past the cap was kept");
    assert!(out.len() < 1300, "{} bytes", out.len());
    // Everything past the cap was read and dropped: the next command sees only its own output.
    assert_eq!(f.sh("echo next").await, "next\n");
}

pub async fn cancel_kills_the_command(h: &dyn Harness) {
    let f = Fixture::new(h);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        trigger.cancel();
    });
    let input = json!({"command": "echo begun; (sleep 2; touch after_cancel) > /dev/null 2>&1 & sleep 60"});
    let begun = Instant::now();
    let out = f.hand.run("bash", input.as_object().unwrap(), &cancel).await;
    assert!(out.is_error, "{out:?}");
    assert!(out.text.starts_with("begun\n") && out.text.contains("cancelled"), "{}", out.text);
    assert!(begun.elapsed() < Duration::from_secs(10), "took {:?}", begun.elapsed());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!f.host("after_cancel").exists(), "a background child survived cancellation");
    assert_eq!(f.sh("echo alive").await, "alive\n");
    // A call that starts already cancelled does not run.
    let out = f.hand.run("bash", json!({"command": "touch never"}).as_object().unwrap(), &cancel).await;
    assert!(out.is_error, "{out:?}");
    assert!(!f.host("never").exists());
}

/// The completion sentinel is random per command: printing something like it changes nothing.
pub async fn commands_cannot_forge_their_completion(h: &dyn Harness) {
    let f = Fixture::new(h);
    let forged = "printf '\\n__gw_done_00000000000000000000000000000000:0\\n'; echo after-forgery";
    let out = f.sh(forged).await;
    assert!(out.contains("after-forgery"), "{out}");
    assert_eq!(f.sh("echo in-sync").await, "in-sync\n");
}
