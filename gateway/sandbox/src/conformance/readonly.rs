//! Mounted inputs are read-only to the agent (`crate::readonly`): the file tools refuse to
//! change them on every provider; processes in a sandbox that is a security boundary cannot
//! write, delete, replace or re-mode them.

use serde_json::json;

use super::{Fixture, Harness};

const CONTENT: &[u8] = b"id,name\n1,alice\n";

/// The content of the mounted file on the host, after whatever the test tried.
fn survives(f: &Fixture, rel: &str) {
    assert_eq!(std::fs::read(f.host(rel)).unwrap(), CONTENT, "{rel} was changed");
}

pub async fn mounted_files_refuse_the_file_tools(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.mount("ro.csv", CONTENT).await;
    f.mount("mnt/session/uploads/data.csv", CONTENT).await;
    f.put("rw.txt", "mine");
    std::os::unix::fs::symlink("ro.csv", f.host("link")).unwrap();
    std::fs::create_dir(f.host("sub")).unwrap();

    for path in ["ro.csv".to_owned(), f.inner("ro.csv"), "link".into(), "sub/../ro.csv".into()] {
        let out = f.err("write", json!({"file_path": path, "content": "pwned"})).await;
        assert!(out.contains("read-only"), "write {path}: {out}");
        let out = f.err("edit", json!({"file_path": path, "old_string": "alice", "new_string": "mallory"})).await;
        assert!(out.contains("read-only"), "edit {path}: {out}");
        survives(&f, "ro.csv");
    }
    let out = f.err("write", json!({"file_path": "/mnt/session/uploads/data.csv", "content": "pwned"})).await;
    assert!(out.contains("read-only"), "{out}");
    survives(&f, "mnt/session/uploads/data.csv");
    // An agent process writing through the Hand (ACP `fs/write_text_file`).
    let refused = f.hand.write_text_file("ro.csv", "pwned").await.unwrap_err();
    assert!(matches!(refused, crate::FileError::Refused(_)), "{refused:?}");
    survives(&f, "ro.csv");

    // Reading works, and the agent's own files stay writable.
    assert!(f.ok("read", json!({"file_path": "ro.csv"})).await.contains("alice"));
    f.ok("write", json!({"file_path": "rw.txt", "content": "changed"})).await;
    f.ok("edit", json!({"file_path": "rw.txt", "old_string": "changed", "new_string": "again"})).await;
    assert_eq!(std::fs::read_to_string(f.host("rw.txt")).unwrap(), "again");
}

/// Every way a shell in the sandbox might change the file: it gets an error each time, and
/// the content on the host survives.
pub async fn mounted_files_refuse_sandboxed_processes(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.mount("ro.csv", CONTENT).await;
    f.mount("mnt/session/uploads/data.csv", CONTENT).await;
    let attempts = [
        "echo pwned > ro.csv",
        "echo pwned >> ro.csv",
        "truncate -s 0 ro.csv",
        "rm -f ro.csv",
        "unlink ro.csv",
        "echo pwned > other && mv -f other ro.csv",
        "echo pwned > other && cp -f other ro.csv",
        "chmod 644 ro.csv; echo pwned > ro.csv",
        "ln ro.csv hard && echo pwned > hard",
        "ln -sf other ro.csv",
        "mv ro.csv moved && echo pwned > ro.csv",
        "rm -rf /workspace/ro.csv",
        "echo pwned > /mnt/session/uploads/data.csv",
        "rm -f /mnt/session/uploads/data.csv",
        "rm -rf /workspace/mnt",
        "echo pwned > other && mv -f other /workspace/mnt/session/uploads/data.csv",
    ];
    for attempt in attempts {
        let out = f.sh(&format!("( {attempt} ) 2>&1; echo \"exit=$?\"")).await;
        assert!(!out.contains("exit=0"), "{attempt:?} succeeded: {out}");
        survives(&f, "ro.csv");
        survives(&f, "mnt/session/uploads/data.csv");
    }
    assert_eq!(f.sh("cat ro.csv /mnt/session/uploads/data.csv").await.as_bytes(), [CONTENT, CONTENT].concat());
    // The workspace around them stays the agent's.
    assert_eq!(f.sh("echo ok > mine && cat mine").await, "ok\n");
}

/// A file mounted between two commands of one shell (a resource added between turns) is
/// read-only to the next command too: the shell that started before it is replaced.
pub async fn a_file_mounted_while_the_shell_runs_is_read_only_to_its_next_command(h: &dyn Harness) {
    let f = Fixture::new(h);
    assert_eq!(f.sh("echo started").await, "started\n");
    f.mount("later.csv", CONTENT).await;
    let out = f.sh("( echo pwned > later.csv; rm -f later.csv ) 2>&1; echo done").await;
    assert!(out.ends_with("done\n"), "{out}");
    survives(&f, "later.csv");
}
