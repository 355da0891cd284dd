//! The file tools cannot reach outside their workspace: not by `..`, not by absolute paths,
//! not through symlinks, not through a symlink swapped while they work.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use super::{Fixture, Harness, unique};

const SECRET: &str = "TOPSECRET-outside-the-workspace";

/// A directory beside the workspace with a secret in it.
struct Outside {
    dir: tempfile::TempDir,
}

impl Outside {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret.txt"), SECRET).unwrap();
        Self { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The secret as a path relative to the workspace (`../<outside>/secret.txt`).
    fn relative_from(&self, f: &Fixture) -> String {
        let ws = std::fs::canonicalize(f.sandbox.workspace().path()).unwrap();
        let out = std::fs::canonicalize(self.dir.path()).unwrap();
        let up = ws.components().count() - 1;
        format!("{}{}/secret.txt", "../".repeat(up), out.strip_prefix("/").unwrap().display())
    }

    fn untouched(&self) {
        assert_eq!(std::fs::read_to_string(self.path("secret.txt")).unwrap(), SECRET);
        let names: Vec<_> = std::fs::read_dir(self.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["secret.txt"], "nothing was created outside");
    }
}

fn no_leak(text: &str) {
    assert!(!text.contains(SECRET), "leaked the outside secret: {text}");
    assert!(!text.contains("root:x:0:0"), "leaked /etc/passwd: {text}");
}

/// Every file tool on `path` must fail without showing anything from outside.
async fn all_tools_refuse(f: &Fixture, path: &str) {
    for (tool, input) in [
        ("read", json!({"file_path": path})),
        ("write", json!({"file_path": path, "content": "pwned"})),
        ("edit", json!({"file_path": path, "old_string": SECRET, "new_string": "pwned"})),
        ("glob", json!({"pattern": "**/*", "path": path})),
        ("grep", json!({"pattern": ".", "path": path})),
    ] {
        let out = f.call(tool, input).await;
        assert!(out.is_error, "{tool} on {path} should be refused, answered: {}", out.text);
        no_leak(&out.text);
    }
}

pub async fn file_tools_refuse_parent_escapes(h: &dyn Harness) {
    let f = Fixture::new(h);
    let outside = Outside::new();
    f.put("sub/inside.txt", "in");
    let rel = outside.relative_from(&f);
    all_tools_refuse(&f, &rel).await;
    all_tools_refuse(&f, &format!("sub/../{rel}")).await;
    all_tools_refuse(&f, "..").await;
    all_tools_refuse(&f, "sub/../../x").await;
    // `..` that stays inside is fine.
    assert_eq!(f.ok("read", json!({"file_path": "sub/../sub/inside.txt"})).await, "     1\tin\n");
    // Patterns cannot climb out either: they only match what the walk found inside.
    no_leak(&f.ok("glob", json!({"pattern": "../**"})).await);
    no_leak(&f.ok("grep", json!({"pattern": "TOP.ECRET"})).await);
    outside.untouched();
}

pub async fn file_tools_refuse_absolute_paths_outside(h: &dyn Harness) {
    let f = Fixture::new(h);
    let outside = Outside::new();
    all_tools_refuse(&f, "/etc/passwd").await;
    all_tools_refuse(&f, "/etc").await;
    all_tools_refuse(&f, "/").await;
    all_tools_refuse(&f, &outside.path("secret.txt").display().to_string()).await;
    all_tools_refuse(&f, &outside.path("new.txt").display().to_string()).await;
    all_tools_refuse(&f, &format!("{}/../{}", f.inner(""), outside.relative_from(&f))).await;
    // A sibling that merely shares the workspace's name as a prefix is outside too.
    all_tools_refuse(&f, &format!("{}-sibling/x.txt", f.inner(""))).await;
    outside.untouched();
}

pub async fn file_tools_refuse_symlinks_leading_out(h: &dyn Harness) {
    let f = Fixture::new(h);
    let outside = Outside::new();
    symlink("/etc", f.host("etc")).unwrap();
    symlink("/etc/passwd", f.host("passwd")).unwrap();
    symlink(outside.dir.path(), f.host("out")).unwrap();
    symlink(outside.path("secret.txt"), f.host("outfile")).unwrap();
    symlink(outside.relative_from(&f), f.host("rel_out")).unwrap();
    for path in ["etc", "etc/passwd", "passwd", "out", "out/secret.txt", "outfile", "rel_out"] {
        all_tools_refuse(&f, path).await;
    }
    let planted = unique("gateway-sandbox-escape");
    f.err("write", json!({"file_path": format!("etc/{planted}"), "content": "x"})).await;
    assert!(!Path::new("/etc").join(&planted).exists(), "wrote into the host's /etc");
    f.err("write", json!({"file_path": "out/new/deeper.txt", "content": "x"})).await;
    // Walking the workspace lists the links but never enters or reads through them.
    let listed = f.ok("glob", json!({"pattern": "**/*"})).await;
    assert!(!listed.contains("etc/") && !listed.contains("secret.txt"), "{listed}");
    no_leak(&f.ok("grep", json!({"pattern": "root:|TOPSECRET"})).await);
    outside.untouched();
}

pub async fn file_tools_refuse_nul_bytes(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("a.txt", "a");
    for path in ["a.txt\0", "a\0.txt", "\0/etc/passwd"] {
        for (tool, input) in [
            ("read", json!({"file_path": path})),
            ("write", json!({"file_path": path, "content": "x"})),
            ("edit", json!({"file_path": path, "old_string": "a", "new_string": "b"})),
            ("glob", json!({"pattern": "*", "path": path})),
            ("grep", json!({"pattern": "a", "path": path})),
        ] {
            let out = f.err(tool, input).await;
            assert!(out.contains("NUL"), "{tool}: {out}");
        }
    }
    assert_eq!(std::fs::read_to_string(f.host("a.txt")).unwrap(), "a");
}

/// A thread flips `link` (and `dir`) between a benign target and targets outside as fast as
/// it can while the tools read through them: no interleaving may yield outside content.
pub async fn a_symlink_swapped_during_reads_never_leaks(h: &dyn Harness) {
    let f = Fixture::new(h);
    let outside = Outside::new();
    f.put("benign.txt", "benign content");
    f.put("real/passwd", "benign passwd");
    f.put("real/secret.txt", "benign secret");
    let ws = f.sandbox.workspace().path().to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = Arc::clone(&stop);
        let evil_file = outside.path("secret.txt");
        let evil_dir = outside.dir.path().to_owned();
        std::thread::spawn(move || {
            let targets = [
                (PathBuf::from("benign.txt"), "link"),
                (PathBuf::from("/etc/passwd"), "link"),
                (evil_file, "link"),
                (PathBuf::from("real"), "dir"),
                (PathBuf::from("/etc"), "dir"),
                (evil_dir, "dir"),
            ];
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (target, name) in &targets {
                    let tmp = ws.join(format!(".{name}.tmp"));
                    let _ = std::fs::remove_file(&tmp);
                    if symlink(target, &tmp).is_ok() && std::fs::rename(&tmp, ws.join(name)).is_ok() {
                        swaps += 1;
                    }
                }
            }
            swaps
        })
    };
    let mut benign = 0;
    for i in 0..400 {
        let (tool, input) = match i % 4 {
            0 => ("read", json!({"file_path": "link"})),
            1 => ("read", json!({"file_path": "dir/passwd"})),
            2 => ("read", json!({"file_path": "dir/secret.txt"})),
            _ => ("grep", json!({"pattern": ".", "path": "dir"})),
        };
        let out = f.call(tool, input).await;
        no_leak(&out.text);
        if !out.is_error && out.text.contains("benign") {
            benign += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100, "the swapper barely ran ({swaps} swaps)");
    assert!(benign > 0, "no read ever succeeded through the benign target: the test proves nothing");
    outside.untouched();
}

pub async fn workspaces_cannot_see_each_other(h: &dyn Harness) {
    let a = Fixture::new(h);
    let b = Fixture::new(h);
    b.put("secret.txt", SECRET);
    let b_host = b.host("secret.txt").display().to_string();
    all_tools_refuse(&a, &b_host).await;
    all_tools_refuse(&a, &b.sandbox.workspace().path().display().to_string()).await;
    let ws_a = std::fs::canonicalize(a.sandbox.workspace().path()).unwrap();
    let up = "../".repeat(ws_a.components().count() - 1);
    let b_rel = format!("{up}{}", b.host("secret.txt").strip_prefix("/").unwrap().display());
    all_tools_refuse(&a, &b_rel).await;
    // Each Hand writes into its own workspace only.
    a.ok("write", json!({"file_path": "secret.txt", "content": "mine"})).await;
    assert_eq!(std::fs::read_to_string(b.host("secret.txt")).unwrap(), SECRET);
    assert_eq!(b.ok("read", json!({"file_path": "secret.txt"})).await, format!("     1\t{SECRET}\n"));
}
