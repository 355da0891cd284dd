//! The file tools' happy paths and error rules.

use serde_json::json;

use super::{Fixture, Harness, policy};

pub async fn read_numbers_lines_and_honours_view_range(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("a.txt", "one\ntwo\nthree\n");
    let all = "     1\tone\n     2\ttwo\n     3\tthree\n";
    assert_eq!(f.ok("read", json!({"file_path": "a.txt"})).await, all);
    assert_eq!(f.ok("read", json!({"file_path": f.inner("a.txt")})).await, all, "absolute inside");
    assert_eq!(f.ok("read", json!({"file_path": "./a.txt"})).await, all);
    let tail = "     2\ttwo\n     3\tthree\n";
    assert_eq!(f.ok("read", json!({"file_path": "a.txt", "view_range": [2, 3]})).await, tail);
    assert_eq!(f.ok("read", json!({"file_path": "a.txt", "view_range": [2, -1]})).await, tail);
    assert_eq!(f.ok("read", json!({"file_path": "a.txt", "view_range": [3, 3]})).await, "     3\tthree\n");
    assert_eq!(f.ok("read", json!({"file_path": "a.txt", "view_range": [1, 99]})).await, all);
    let past = f.err("read", json!({"file_path": "a.txt", "view_range": [4, -1]})).await;
    assert!(past.contains("3 lines"), "{past}");
    for bad in [json!([0, 1]), json!([3, 2]), json!([1]), json!([1, -5]), json!("1:2")] {
        f.err("read", json!({"file_path": "a.txt", "view_range": bad})).await;
    }
    // No trailing newline, and numbering wider than one digit stays right-aligned.
    f.put("b.txt", (1..=12).map(|i| format!("l{i}")).collect::<Vec<_>>().join("\n"));
    let b = f.ok("read", json!({"file_path": "b.txt", "view_range": [10, -1]})).await;
    assert_eq!(b, "    10\tl10\n    11\tl11\n    12\tl12\n");
}

pub async fn read_refuses_binary_missing_and_directories_and_caps_output(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("bin.dat", b"ELF\0\x01\x02text");
    let bin = f.err("read", json!({"file_path": "bin.dat"})).await;
    assert!(bin.contains("binary"), "{bin}");
    let missing = f.err("read", json!({"file_path": "nope.txt"})).await;
    assert!(missing.contains("no such file"), "{missing}");
    f.put("d/x.txt", "x");
    let dir = f.err("read", json!({"file_path": "d"})).await;
    assert!(dir.contains("directory"), "{dir}");
    f.err("read", json!({"file_path": "."})).await;

    let mut small = policy();
    small.limits.output_cap = 300;
    let f = Fixture::with_policy(h, small);
    f.put("long.txt", (1..=200).map(|i| format!("line number {i}\n")).collect::<String>());
    let out = f.ok("read", json!({"file_path": "long.txt"})).await;
    assert!(out.contains("     1\tline number 1\n"), "{out}");
    assert!(!out.contains("line number 200"), "{out}");
    assert!(out.contains("truncated"), "{out}");
    assert!(out.len() < 300 + 200, "{} bytes", out.len());
    let later = f.ok("read", json!({"file_path": "long.txt", "view_range": [200, 200]})).await;
    assert_eq!(later, "   200\tline number 200\n");
}

pub async fn write_creates_parents_and_overwrites(h: &dyn Harness) {
    let f = Fixture::new(h);
    let out = f.ok("write", json!({"file_path": "d1/d2/f.txt", "content": "hello"})).await;
    assert!(out.contains("wrote 5 bytes"), "{out}");
    assert_eq!(std::fs::read_to_string(f.host("d1/d2/f.txt")).unwrap(), "hello");
    f.ok("write", json!({"file_path": "d1/d2/f.txt", "content": "hi"})).await;
    assert_eq!(std::fs::read_to_string(f.host("d1/d2/f.txt")).unwrap(), "hi", "overwrite truncates");
    f.ok("write", json!({"file_path": f.inner("abs.txt"), "content": ""})).await;
    assert_eq!(std::fs::read(f.host("abs.txt")).unwrap(), b"");
    // What the file tools write, processes in the sandbox see.
    assert_eq!(f.sh("cat d1/d2/f.txt").await, "hi");
    let dir = f.err("write", json!({"file_path": "d1", "content": "x"})).await;
    assert!(dir.contains("directory"), "{dir}");
    f.err("write", json!({"file_path": ".", "content": "x"})).await;
}

pub async fn edit_requires_one_match_unless_replace_all(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("c.txt", "x = 1\ny = 1\n");
    let many = f.err("edit", json!({"file_path": "c.txt", "old_string": "1", "new_string": "2"})).await;
    assert!(many.contains("2 times") && many.contains("replace_all"), "{many}");
    assert_eq!(std::fs::read_to_string(f.host("c.txt")).unwrap(), "x = 1\ny = 1\n", "unchanged");
    let one = f.ok("edit", json!({"file_path": "c.txt", "old_string": "x = 1", "new_string": "x = 2"})).await;
    assert!(one.contains("replaced 1"), "{one}");
    assert_eq!(std::fs::read_to_string(f.host("c.txt")).unwrap(), "x = 2\ny = 1\n");
    let none = f.err("edit", json!({"file_path": "c.txt", "old_string": "zzz", "new_string": "q"})).await;
    assert!(none.contains("not found"), "{none}");
    let same = f.err("edit", json!({"file_path": "c.txt", "old_string": "y", "new_string": "y"})).await;
    assert!(same.contains("same"), "{same}");
    f.err("edit", json!({"file_path": "c.txt", "old_string": "", "new_string": "q"})).await;
    f.err("edit", json!({"file_path": "missing.txt", "old_string": "a", "new_string": "b"})).await;

    f.put("r.txt", "a-a-a");
    let all =
        f.ok("edit", json!({"file_path": "r.txt", "old_string": "a", "new_string": "bb", "replace_all": true})).await;
    assert!(all.contains("replaced 3"), "{all}");
    assert_eq!(std::fs::read_to_string(f.host("r.txt")).unwrap(), "bb-bb-bb");
    // Deleting text is an edit too.
    f.ok("edit", json!({"file_path": f.inner("r.txt"), "old_string": "-bb-", "new_string": ""})).await;
    assert_eq!(std::fs::read_to_string(f.host("r.txt")).unwrap(), "bbbb");
    f.put("bin.dat", b"a\0b");
    f.err("edit", json!({"file_path": "bin.dat", "old_string": "a", "new_string": "c"})).await;
}

pub async fn glob_lists_matching_files_sorted(h: &dyn Harness) {
    let f = Fixture::new(h);
    for p in ["src/main.rs", "src/lib.rs", "src/sub/mod.rs", "README.md", ".hidden/x.rs", "src/notes.txt"] {
        f.put(p, "x");
    }
    let rs = f.ok("glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(rs, ".hidden/x.rs\nsrc/lib.rs\nsrc/main.rs\nsrc/sub/mod.rs\n");
    assert_eq!(f.ok("glob", json!({"pattern": "*.md"})).await, "README.md\n");
    let under = f.ok("glob", json!({"pattern": "*.rs", "path": "src"})).await;
    assert_eq!(under, "src/lib.rs\nsrc/main.rs\n", "matched relative to path, shown relative to the workspace");
    let abs = f.ok("glob", json!({"pattern": "**/mod.rs", "path": f.inner("src")})).await;
    assert_eq!(abs, "src/sub/mod.rs\n");
    let absolute = f.ok("glob", json!({"pattern": format!("{}/src/*.rs", f.inner(""))})).await;
    assert_eq!(absolute, "src/lib.rs\nsrc/main.rs\n", "an absolute pattern inside the workspace");
    let none = f.ok("glob", json!({"pattern": "*.zig"})).await;
    assert!(none.contains("no paths match"), "{none}");
    f.err("glob", json!({"pattern": "a[", "path": "src"})).await;
    f.err("glob", json!({"pattern": "*", "path": "nope"})).await;
    f.err("glob", json!({"pattern": "*", "path": "README.md"})).await;
}

pub async fn grep_reports_path_line_and_text(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("a.txt", "foo\nbar\nfoo bar\n");
    f.put("sub/b.txt", "nothing\nfood\n");
    f.put("bin.dat", b"foo\0foo");
    let all = f.ok("grep", json!({"pattern": "foo"})).await;
    assert_eq!(all, "a.txt:1:foo\na.txt:3:foo bar\nsub/b.txt:2:food\n");
    let one = f.ok("grep", json!({"pattern": "^bar$", "path": "a.txt"})).await;
    assert_eq!(one, "a.txt:2:bar\n");
    let sub = f.ok("grep", json!({"pattern": "fo+d", "path": "sub"})).await;
    assert_eq!(sub, "sub/b.txt:2:food\n");
    let none = f.ok("grep", json!({"pattern": "zzz"})).await;
    assert!(none.contains("no lines match"), "{none}");
    let bad = f.err("grep", json!({"pattern": "("})).await;
    assert!(bad.contains("regular expression"), "{bad}");
    f.err("grep", json!({"pattern": "x", "path": "missing"})).await;
}

pub async fn bad_inputs_are_errors_not_panics(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("a.txt", "a");
    let long = "a/".repeat(3000);
    let cases = [
        ("read", json!({})),
        ("read", json!({"file_path": 3})),
        ("read", json!({"file_path": ""})),
        ("read", json!({"file_path": long})),
        ("read", json!({"file_path": "a.txt", "view_range": "x"})),
        ("write", json!({"file_path": "a.txt"})),
        ("write", json!({"content": "x"})),
        ("edit", json!({"file_path": "a.txt", "old_string": "a"})),
        ("edit", json!({"file_path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": "yes"})),
        ("glob", json!({})),
        ("glob", json!({"pattern": ["*"]})),
        ("grep", json!({"pattern": 5})),
        ("bash", json!({})),
        ("bash", json!({"command": 5})),
        ("bash", json!({"command": "true", "timeout_ms": -1})),
        ("bash", json!({"command": "true", "timeout_ms": 0})),
        ("bash", json!({"command": "true", "restart": "yes"})),
        ("nope", json!({})),
    ];
    for (tool, input) in cases {
        f.err(tool, input).await;
    }
    // The web tools run in the gateway: a sandbox refuses them, reaching nothing.
    let fetch = f.err("web_fetch", json!({"url": "https://example.com"})).await;
    assert!(fetch.contains("does not run in a sandbox"), "{fetch}");
    let search = f.err("web_search", json!({"query": "rust"})).await;
    assert!(search.contains("does not run in a sandbox"), "{search}");
    assert_eq!(std::fs::read_to_string(f.host("a.txt")).unwrap(), "a", "nothing was changed by bad inputs");
}

/// A FIFO or a symlink loop planted in the workspace (a sandboxed process can make both)
/// gets an error, not a tool that hangs or spins.
pub async fn special_files_are_refused_without_hanging(h: &dyn Harness) {
    let f = Fixture::new(h);
    nix::unistd::mkfifo(&f.host("pipe"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    std::os::unix::fs::symlink("loop2", f.host("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", f.host("loop2")).unwrap();
    f.put("ok.txt", "fine");
    let calls = async {
        for path in ["pipe", "loop1"] {
            f.err("read", json!({"file_path": path})).await;
            f.err("write", json!({"file_path": path, "content": "x"})).await;
            f.err("edit", json!({"file_path": path, "old_string": "a", "new_string": "b"})).await;
            f.err("grep", json!({"pattern": "a", "path": path})).await;
        }
        // Walks list them but do not open them.
        assert_eq!(f.ok("grep", json!({"pattern": "fine"})).await, "ok.txt:1:fine\n");
        assert_eq!(f.ok("glob", json!({"pattern": "*"})).await, "loop1\nloop2\nok.txt\npipe\n");
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), calls).await.expect("a file tool hung");
}
