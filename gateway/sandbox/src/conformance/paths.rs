//! Where processes see the workspace: the provider says it without a sandbox
//! ([`SandboxProvider::inner_root`](crate::SandboxProvider::inner_root)), and editors map the
//! paths an agent names through that answer. A provider that mounts the workspace elsewhere
//! than it reports fails here, not in an editor showing wrong paths.

use std::time::Duration;

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
