//! Where processes see the workspace: the provider says it without a sandbox
//! ([`SandboxProvider::inner_root`](crate::SandboxProvider::inner_root)), and editors map the
//! paths an agent names through that answer. A provider that mounts the workspace elsewhere
//! than it reports fails here, not in an editor showing wrong paths.

use std::time::Duration;

use serde_json::json;

use super::{Fixture, Harness, unique};

pub async fn the_reported_inner_root_is_where_processes_see_the_workspace(h: &dyn Harness) {
    let f = Fixture::new(h);
    let reported = h.provider().inner_root(f.sandbox.workspace().path());
    assert!(reported.is_absolute(), "{}", reported.display());
    assert_eq!(f.sandbox.inner_root(), reported, "the sandbox and its provider disagree");
    let root = reported.display().to_string();

    // The persistent shell starts there, and a file put on the host is read there.
    let marker = unique("seen");
    f.put("probe/in.txt", &marker);
    assert_eq!(f.sh(&format!("pwd -P; cat {root}/probe/in.txt")).await, format!("{root}\n{marker}"));
    // What a process writes there is in the workspace on the host.
    f.sh(&format!("echo from-inside > {root}/probe/out.txt")).await;
    assert_eq!(std::fs::read_to_string(f.host("probe/out.txt")).unwrap(), "from-inside\n");

    // A process started on its own (an agent, a terminal) sees the same.
    let mut cmd = f.sandbox.command("pwd", &["-P".into()]).unwrap();
    cmd.stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output()).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{root}\n"));
}

/// An additional directory (an editor's `additionalDirectories`) is where the editor sees it,
/// for the file tools, the shell and processes started on their own; what is written there is
/// on the host; nothing beside it is reached through it.
pub async fn additional_directories_are_seen_at_their_own_paths(h: &dyn Harness) {
    let (f, extra) = Fixture::with_extra(h);
    let extra_path = std::fs::canonicalize(extra.path()).unwrap();
    let root = extra_path.display().to_string();
    let marker = unique("extra");
    std::fs::create_dir_all(extra_path.join("lib")).unwrap();
    std::fs::write(extra_path.join("lib/in.txt"), format!("{marker}\n")).unwrap();

    // The file tools, by absolute path; glob and grep name what they find there absolutely.
    assert!(f.ok("read", json!({"file_path": format!("{root}/lib/in.txt")})).await.contains(&marker));
    f.ok("write", json!({"file_path": format!("{root}/new/out.txt"), "content": "written\n"})).await;
    assert_eq!(std::fs::read_to_string(extra_path.join("new/out.txt")).unwrap(), "written\n");
    f.ok("edit", json!({"file_path": format!("{root}/new/out.txt"), "old_string": "written", "new_string": "edited"}))
        .await;
    assert_eq!(std::fs::read_to_string(extra_path.join("new/out.txt")).unwrap(), "edited\n");
    let globbed = f.ok("glob", json!({"pattern": format!("{root}/**/*.txt")})).await;
    assert_eq!(globbed.lines().collect::<Vec<_>>(), [format!("{root}/lib/in.txt"), format!("{root}/new/out.txt")]);
    let grepped = f.ok("grep", json!({"pattern": "edited", "path": root})).await;
    assert!(grepped.starts_with(&format!("{root}/new/out.txt:1:")), "{grepped}");
    // The workspace itself is unchanged in how it is named.
    f.put("w.txt", "in the workspace\n");
    assert!(f.ok("glob", json!({"pattern": "*.txt"})).await.starts_with("w.txt"));

    // The shell and a process of its own see it there, and write through to the host.
    assert_eq!(f.sh(&format!("cat {root}/lib/in.txt")).await.trim_end(), marker);
    f.sh(&format!("echo from-shell > {root}/shell.txt")).await;
    assert_eq!(std::fs::read_to_string(extra_path.join("shell.txt")).unwrap(), "from-shell\n");
    let mut cmd = f.sandbox.command("cat", &[format!("{root}/lib/in.txt")]).unwrap();
    cmd.stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output()).await.unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{marker}\n"));

    // Nothing beside it through it: `..`, a lookalike name, a symlink leading out.
    let beside = tempfile::tempdir().unwrap();
    std::fs::write(beside.path().join("secret.txt"), "secret").unwrap();
    let beside = std::fs::canonicalize(beside.path()).unwrap().display().to_string();
    std::os::unix::fs::symlink(format!("{beside}/secret.txt"), extra_path.join("out")).unwrap();
    for path in
        [format!("{root}/../x"), format!("{root}x/secret.txt"), format!("{root}/out"), format!("{beside}/secret.txt")]
    {
        let said = f.err("read", json!({"file_path": path})).await;
        assert!(said.contains("refused"), "{path}: {said}");
    }
    if h.provider().isolates() {
        // Only the directory itself is in the sandbox, not what lies beside it on the host.
        let shown = f.call("bash", json!({"command": format!("cat {beside}/secret.txt"), "timeout_ms": 30_000})).await;
        assert!(!shown.text.contains("secret\n") && shown.text != "secret", "{}", shown.text);
    }
}
