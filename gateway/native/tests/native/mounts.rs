//! Uploaded files mounted into sessions (docs/adr/0017): placed before execution depends on
//! them, whole or not at all, and named to the model where they really are.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::{PermissionPolicy, SkillRef};
use gateway_core::environment::Provisioning;
use gateway_core::event::{ErrorKind, EventPayload, StopReason};
use gateway_core::session::{Checkout, EnvironmentState, ResourceKind, Secret};
use gateway_runtime::{EnvironmentsConfig, RuntimeError};
use gateway_services::checkout::CheckoutConfig;
use gateway_store::StoredFile;

use crate::common::stop_of;
use crate::git_server::{self, GitServer};
use crate::harness::{Native, cloud, native, native_configured, native_on_stub, session_error, tool_results, toolset};

async fn upload(n: &Native, content: &[u8]) -> StoredFile {
    let mut upload = n.coordinator.upload();
    // In uneven pieces, as a network delivers them.
    for piece in content.chunks(70_001) {
        upload.push(piece).await.unwrap();
    }
    upload.finish("f".into(), "application/octet-stream".into()).await.unwrap()
}

fn file(f: &StoredFile, mount_path: &str) -> ResourceKind {
    ResourceKind::File { file_id: f.meta.id.to_string(), mount_path: mount_path.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mounted_files_are_placed_before_the_first_model_request_and_the_model_is_told_where() {
    let (stub, n) = native_on_stub().await;
    let pool = n.workers(0);
    let text = upload(&n, b"hello mounted world\n").await;
    // Across a chunk boundary of the store, every byte value.
    let binary: Vec<u8> = (0..(1 << 20) + 4099).map(|i| (i * 31 % 256) as u8).collect();
    let blob = upload(&n, &binary).await;
    let blob_path = format!("/mnt/session/uploads/{}", blob.meta.id);
    let s = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            // Deferred provisioning: the mounts alone force the realization.
            cloud(Provisioning::OnToolUse, "local"),
            vec![file(&text, "/workspace/data/notes.txt"), file(&blob, &blob_path)],
        )
        .await
        .unwrap();

    let talk = n.turn(&s, "just talk").await;
    assert_eq!(stop_of(talk.last().unwrap()), Some(StopReason::EndTurn));
    assert_eq!(n.state(&s).await, EnvironmentState::Realized, "realized although no tool ran");
    let workspace = n.workspaces.path().join(s.id.as_str());
    assert_eq!(std::fs::read(workspace.join("data/notes.txt")).unwrap(), b"hello mounted world\n");
    let placed = workspace.join("mnt/session/uploads").join(blob.meta.id.as_str());
    assert_eq!(std::fs::read(&placed).unwrap(), binary);
    assert_eq!(std::fs::metadata(&placed).unwrap().permissions().mode() & 0o777, 0o444, "read-only");

    // The first model request already named both files: the local sandbox cannot show them
    // at their mount paths, so the real ones are given.
    let requests = stub.requests();
    let system =
        requests.iter().find(|r| r.path == "/v1/messages").expect("a model request").body["system"].to_string();
    assert!(system.contains("/workspace/data/notes.txt"), "{system}");
    assert!(system.contains(&workspace.join("data/notes.txt").display().to_string()), "{system}");
    assert!(system.contains(&placed.display().to_string()), "{system}");

    let read = n.turn(&s, r#"tool:read {"file_path": "data/notes.txt"}"#).await;
    let (out, is_error) = tool_results(&read).remove(0);
    assert!(!is_error && out.contains("hello mounted world"), "{out}");
    // The session-mount view resolves for the file tools on every provider.
    let read = n.turn(&s, &format!(r#"tool:read {{"file_path": "{blob_path}"}}"#)).await;
    let (out, _) = tool_results(&read).remove(0);
    assert!(out.contains("binary"), "the blob is found (and refused as binary): {out}");

    // A file added between turns is there before the next one.
    let later = upload(&n, b"added later").await;
    n.coordinator.add_resource(&s.id, file(&later, "/workspace/later.txt")).await.unwrap();
    let read = n.turn(&s, r#"tool:read {"file_path": "later.txt"}"#).await;
    assert!(tool_results(&read)[0].0.contains("added later"), "{:?}", tool_results(&read));
    pool.shutdown().await;
    stub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_that_cannot_be_placed_fails_the_turn_naming_it_and_leaves_nothing_behind() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    // The agent makes `data` a file; a mount below it cannot be placed.
    n.turn(&s, r#"tool:write {"file_path": "data", "content": "in the way"}"#).await;
    let f = upload(&n, b"never placed").await;
    let (_, rid) = n.coordinator.add_resource(&s.id, file(&f, "/workspace/data/x.txt")).await.unwrap();
    let es = n.turn(&s, "hello").await;
    let (kind, message) = session_error(&es).expect("a typed error event");
    assert_eq!(kind, ErrorKind::MountFailed);
    assert!(message.contains(rid.as_str()) && message.contains("/workspace/data/x.txt"), "{message}");
    assert!(!es.iter().any(|e| matches!(e.payload, EventPayload::ModelRequestStarted {})), "the model was not asked");
    let workspace = n.workspaces.path().join(s.id.as_str());
    assert_eq!(std::fs::read(workspace.join("data")).unwrap(), b"in the way");
    let left: Vec<_> = std::fs::read_dir(&workspace).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("data")], "no partial file");

    // Removing the resource lets the session go on.
    n.coordinator.remove_resource(&s.id, &rid).await.unwrap();
    let es = n.turn(&s, "hello again").await;
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::EndTurn));
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mount_paths_are_checked_when_the_session_is_created() {
    let n = native().await;
    let f = upload(&n, b"x").await;
    for bad in [
        vec![file(&f, "/etc/passwd")],
        vec![file(&f, "/workspace/../etc/passwd")],
        vec![file(&f, "/workspace/a"), file(&f, "/workspace/a")],
        vec![file(&f, "/workspace/a"), file(&f, "/workspace/a/b")],
    ] {
        let refused =
            n.session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), bad).await;
        assert!(matches!(refused, Err(RuntimeError::Invalid(_))), "{refused:?}");
    }
    let missing =
        ResourceKind::File { file_id: gateway_core::FileId::new().to_string(), mount_path: "/workspace/m".into() };
    let refused =
        n.session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![missing]).await;
    assert!(matches!(refused, Err(RuntimeError::NotFound { kind: "file", .. })), "{refused:?}");
}

fn repository(url: &str, mount_path: &str, checkout: Option<Checkout>, token: Option<&str>) -> ResourceKind {
    ResourceKind::Repository {
        url: url.into(),
        mount_path: mount_path.into(),
        checkout,
        authorization_token: token.map(|t| Secret(t.into())),
    }
}

/// Events, as their JSON, for looking for a secret in them.
fn json_of(es: &[gateway_core::event::Event]) -> String {
    es.iter().map(|e| serde_json::to_string(&e.payload).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repositories_are_checked_out_at_their_branch_or_commit_and_the_token_stays_out_of_sight() {
    const TOKEN: &str = "tok-5ecret-4b2c9e";
    let repos = tempfile::tempdir().unwrap();
    let first = git_server::repository(repos.path(), "project");
    // Slow enough to catch git at work in the process table.
    let server = GitServer::start(repos.path(), Some(TOKEN), Duration::from_millis(400)).await;
    let logs = LogCapture::install();
    let config = EnvironmentsConfig {
        checkout: CheckoutConfig { allow_private_repositories: true, ..Default::default() },
        ..Default::default()
    };
    let n = native_configured(config).await;
    let pool = n.workers(0);
    let url = server.url("project.git");
    let s = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            cloud(Provisioning::OnToolUse, "local"),
            vec![
                repository(&url, "/workspace/main", None, Some(TOKEN)),
                repository(&url, "/workspace/feature", Some(Checkout::Branch { name: "feature".into() }), Some(TOKEN)),
                repository(&url, "/mnt/session/old", Some(Checkout::Commit { sha: first.clone() }), Some(TOKEN)),
            ],
        )
        .await
        .unwrap();

    let watcher = tokio::spawn(async {
        let mut seen = String::new();
        for _ in 0..40 {
            let ps = std::process::Command::new("ps").args(["-eww", "-o", "args"]).output().unwrap();
            seen.push_str(&String::from_utf8_lossy(&ps.stdout));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen
    });
    let es = n.turn(&s, "hello").await;
    let ps = watcher.await.unwrap();
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::EndTurn), "{es:?}");
    assert!(ps.contains("clone --quiet"), "git was seen running");
    assert!(!ps.contains(TOKEN), "the token is not in any process's argv");

    let workspace = n.workspaces.path().join(s.id.as_str());
    let readme = |dir: &str| std::fs::read_to_string(workspace.join(dir).join("README")).unwrap();
    assert_eq!(readme("main"), "v2\n", "the default branch");
    assert_eq!(readme("feature"), "feature\n", "the branch asked for");
    assert_eq!(readme("mnt/session/old"), "v1\n", "the commit asked for");
    let head = git_server::git(&workspace.join("mnt/session/old"), &["rev-parse", "HEAD"]);
    assert_eq!(head.trim(), first);
    for dir in ["main", "feature", "mnt/session/old"] {
        let config = std::fs::read_to_string(workspace.join(dir).join(".git/config")).unwrap();
        assert!(!config.contains(TOKEN) && !config.contains("extraheader"), "{dir}/.git/config: {config}");
        assert!(config.contains(&url), "the remote is the URL as given");
    }
    let auth = server.authorizations();
    assert!(!auth.is_empty() && auth.iter().all(|a| a.starts_with("Basic ")), "the token went as a header");
    let all = n
        .coordinator
        .list_events(&s.id, &Default::default(), &gateway_store::PageRequest::first(1000, gateway_store::Order::Asc))
        .await
        .unwrap();
    assert!(!json_of(&all.items).contains(TOKEN), "the token is in no event");
    assert!(logs.text().contains("repository checked out"), "the logs were captured");
    assert!(!logs.text().contains(TOKEN), "the token is in no log line");
    // At rest it is sealed: the snapshot is stored as this JSON.
    let stored = serde_json::to_string(&n.coordinator.get_session(&s.id).await.unwrap().snapshot).unwrap();
    assert!(!stored.contains(TOKEN) && stored.contains("authorization_token"), "{stored}");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_that_cannot_be_checked_out_fails_the_turn_naming_it_and_leaves_nothing() {
    let repos = tempfile::tempdir().unwrap();
    git_server::repository(repos.path(), "private");
    let server = GitServer::start(repos.path(), Some("right"), Duration::ZERO).await;
    let allowed = EnvironmentsConfig {
        checkout: CheckoutConfig { allow_private_repositories: true, ..Default::default() },
        ..Default::default()
    };
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let fetch = |addr: std::net::SocketAddr| format!("could not fetch the repository from {}", addr.ip());
    for (config, url, token, why) in [
        (allowed.clone(), server.url("private.git"), Some("wrong"), fetch(server.addr)),
        (allowed.clone(), server.url("private.git"), None, fetch(server.addr)),
        (allowed.clone(), format!("http://{closed}/gone.git"), None, fetch(closed)),
        (allowed.clone(), server.url("missing.git"), Some("right"), fetch(server.addr)),
    ] {
        let n = native_configured(config).await;
        let pool = n.workers(0);
        let mount = repository(&url, "/workspace/src/repo", None, token);
        let s = n
            .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![mount])
            .await
            .unwrap();
        let rid = s.snapshot.resources[0].id.clone();
        let es = n.turn(&s, "hello").await;
        let (kind, message) = session_error(&es).unwrap_or_else(|| panic!("{url}: a typed error event in {es:?}"));
        assert_eq!(kind, ErrorKind::MountFailed, "{url}");
        assert!(message.contains(rid.as_str()) && message.contains(&why), "{url}: {message}");
        assert!(!message.contains("right"), "{message}");
        // What the network answered stays in the operator's log: a checkout is no port
        // scanner that reads back (finding 2).
        let port = url.split(':').nth(2).and_then(|p| p.split('/').next()).unwrap();
        for said in
            ["fatal", "HTTP", "401", "404", "refused", "unable to access", "Failed to connect", "Empty reply", port]
        {
            assert!(!message.contains(said), "{url}: git's report reached the client: {message}");
        }
        assert!(!es.iter().any(|e| matches!(e.payload, EventPayload::ModelRequestStarted {})));
        let workspace = n.workspaces.path().join(s.id.as_str());
        assert!(!workspace.join("src").exists(), "{url}: no partial directory");
        let staged: Vec<_> = std::fs::read_dir(n.workspaces.path().join(".staging"))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(staged.is_empty(), "{url}: nothing left in staging: {staged:?}");
        pool.shutdown().await;
    }
}

/// Finding 2, the attack: URL forms where the WHATWG parser (which the gateway checked) and
/// curl (which git fetches with) read different hosts, aimed at a loopback git server with
/// private repositories disallowed; and finding 15: loopback literals and branches git would
/// not read as names. Each is refused when the session is created (and when the resource is
/// added later), git never runs, nothing is cloned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repository_urls_that_git_would_read_differently_are_refused_when_given() {
    let repos = tempfile::tempdir().unwrap();
    git_server::repository(repos.path(), "project");
    let server = GitServer::start(repos.path(), None, Duration::ZERO).await;
    let n = native_configured(EnvironmentsConfig::default()).await;
    let pool = n.workers(0);
    let port = server.addr.port();
    let loopback = server.addr.to_string();
    let attacks = [
        (format!("http://example.com\\@{loopback}/project.git"), None, "backslash"),
        (format!("http://example.com#@{loopback}/project.git"), None, "fragment"),
        (format!("http://example.com?@{loopback}/project.git"), None, "query"),
        (format!("http://example.com @{loopback}/project.git"), None, "whitespace"),
        (format!("http://example.com\t@{loopback}/project.git"), None, "whitespace"),
        (format!("http://example.com\n@{loopback}/project.git"), None, "whitespace"),
        (format!("http://example.com/\r\nx@{loopback}/project.git"), None, "whitespace"),
        (format!("http://127.0.0.%31:{port}/project.git"), None, "host"),
        (format!("http://127.1:{port}/project.git"), None, "host"),
        (format!("http://2130706433:{port}/project.git"), None, "host"),
        (format!("http:///{loopback}/project.git"), None, "host"),
        (format!("http://x@{loopback}/project.git"), None, "credentials"),
        (server.url("project.git"), None, "loopback, private"),
        (format!("http://localhost:{port}/project.git"), None, "loopback, private"),
        (format!("http://[::ffff:0:7f00:1]:{port}/project.git"), None, "loopback, private"),
        ("https://example.com/r.git".to_owned(), Some(Checkout::Branch { name: "main\0x".into() }), "branch"),
        ("https://example.com/r.git".to_owned(), Some(Checkout::Branch { name: "--upload-pack=id".into() }), "branch"),
        ("https://example.com/r.git".to_owned(), Some(Checkout::Commit { sha: "HEAD~1".into() }), "commit"),
    ];
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    for (url, checkout, why) in attacks {
        let mount = repository(&url, "/workspace/repo", checkout.clone(), None);
        let refused = n
            .session(
                toolset(PermissionPolicy::AlwaysAllow),
                cloud(Provisioning::OnToolUse, "local"),
                vec![mount.clone()],
            )
            .await;
        match &refused {
            Err(RuntimeError::Invalid(m)) => assert!(m.contains(why), "{url:?}: {m}"),
            other => panic!("{url:?} {checkout:?} was not refused at creation: {other:?}"),
        }
        let added = n.coordinator.add_resource(&s.id, mount).await;
        assert!(matches!(added, Err(RuntimeError::Invalid(_))), "{url:?} added later: {added:?}");
    }
    // Nothing reached git: the session still runs, with nothing mounted, and the server was
    // never asked.
    let es = n.turn(&s, "hello").await;
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::EndTurn));
    assert_eq!(server.requests(), 0, "git never ran");
    assert!(!n.workspaces.path().join(s.id.as_str()).join("repo").exists(), "nothing cloned");
    pool.shutdown().await;
}

/// Finding 11: the repository bound counts entries as well as bytes. A repository of many
/// empty files (a tiny pack) over a lowered entry bound fails the turn naming the bound and
/// leaves nothing at the mount path.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_of_too_many_files_fails_the_turn_naming_the_bound_and_leaves_nothing() {
    let repos = tempfile::tempdir().unwrap();
    git_server::repository_of_many_files(repos.path(), "many", 2_000);
    let server = GitServer::start(repos.path(), None, Duration::ZERO).await;
    let config = EnvironmentsConfig {
        checkout: CheckoutConfig {
            allow_private_repositories: true,
            max_repository_entries: 500,
            ..Default::default()
        },
        ..Default::default()
    };
    let n = native_configured(config).await;
    let pool = n.workers(0);
    let mount = repository(&server.url("many.git"), "/workspace/many", None, None);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![mount])
        .await
        .unwrap();
    let es = n.turn(&s, "hello").await;
    let (kind, message) = session_error(&es).expect("a typed error event");
    assert_eq!(kind, ErrorKind::MountFailed);
    assert!(message.contains("more than 500 entries") && message.contains("max_repository_entries"), "{message}");
    assert!(!es.iter().any(|e| matches!(e.payload, EventPayload::ModelRequestStarted {})), "the model was not asked");
    let workspace = n.workspaces.path().join(s.id.as_str());
    assert!(!workspace.join("many").exists(), "nothing at the mount path");
    let staged: Vec<_> = std::fs::read_dir(n.workspaces.path().join(".staging"))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(staged.is_empty(), "nothing left in staging: {staged:?}");
    assert!(server.requests() > 0, "the clone was tried");
    pool.shutdown().await;
}

/// Log lines written while it lives, for looking for secrets in them.
pub(crate) struct LogCapture(Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    pub(crate) fn install() -> Self {
        let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        Self(buf)
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agents_skills_are_in_its_workspace_before_the_first_step_and_in_its_system_prompt() {
    let (stub, n) = native_on_stub().await;
    let pool = n.workers(0);
    let manifest =
        b"---\nname: greeter\ndescription: Greets people by name with a shell script\n---\nRun scripts/hello.sh NAME\n";
    let (skill, v1) = n
        .coordinator
        .create_skill(
            None,
            vec![
                ("greeter/SKILL.md".into(), manifest.to_vec()),
                ("greeter/scripts/hello.sh".into(), b"#!/bin/sh\necho \"hello, $1\"\n".to_vec()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(skill.display_name, "greeter", "named by its SKILL.md");
    let mut agent = toolset(PermissionPolicy::AlwaysAllow);
    agent.skills = vec![SkillRef {
        source: "custom".into(),
        skill_id: skill.id.to_string(),
        version: "latest".into(),
        resolved: None,
    }];
    let s = n.session(agent.clone(), cloud(Provisioning::OnToolUse, "local"), vec![]).await.unwrap();
    let frozen = s.snapshot.agent.spec.skills[0].resolved.clone().expect("resolved at creation");
    assert_eq!((frozen.version_id.as_str(), frozen.name.as_str()), (v1.id.as_str(), "greeter"));

    // A newer version after the session was created does not change what it runs.
    n.coordinator
        .add_skill_version(
            &skill.id,
            vec![
                ("greeter/SKILL.md".into(), manifest.to_vec()),
                ("greeter/scripts/hello.sh".into(), b"#!/bin/sh\necho \"v2 $1\"\n".to_vec()),
            ],
        )
        .await
        .unwrap();
    let ran = n.turn(&s, r#"tool:bash {"command": "skills/greeter/scripts/hello.sh world"}"#).await;
    let (out, is_error) = tool_results(&ran).remove(0);
    assert!(!is_error && out.contains("hello, world"), "{out}");
    let workspace = n.workspaces.path().join(s.id.as_str());
    let script = std::fs::metadata(workspace.join("skills/greeter/scripts/hello.sh")).unwrap();
    assert_eq!(script.permissions().mode() & 0o777, 0o755, "the script is executable");
    let doc = std::fs::metadata(workspace.join("skills/greeter/SKILL.md")).unwrap();
    assert_eq!(doc.permissions().mode() & 0o777, 0o644);

    let first = stub.requests().into_iter().find(|r| r.path == "/v1/messages").expect("a model request");
    let system = first.body["system"].to_string();
    assert!(system.contains("greeter: Greets people by name with a shell script"), "{system}");
    assert!(system.contains(&workspace.join("skills/greeter").display().to_string()), "{system}");
    assert_eq!(n.state(&s).await, EnvironmentState::Realized);

    // No mount may land where a skill goes.
    let f = upload(&n, b"in the way").await;
    let clash = vec![file(&f, "/workspace/skills/greeter/SKILL.md")];
    let refused = n.session(agent.clone(), cloud(Provisioning::OnToolUse, "local"), clash).await;
    assert!(matches!(&refused, Err(RuntimeError::Invalid(m)) if m.contains("skill")), "{refused:?}");
    let added = n.coordinator.add_resource(&s.id, file(&f, "/workspace/skills")).await;
    assert!(matches!(added, Err(RuntimeError::Invalid(_))), "{added:?}");

    // A skill that does not exist is refused when the session is created.
    agent.skills[0].skill_id = gateway_core::SkillId::new().to_string();
    let refused = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![]).await;
    assert!(matches!(refused, Err(RuntimeError::NotFound { kind: "skill version", .. })), "{refused:?}");
    pool.shutdown().await;
    stub.stop().await;
}

/// Finding 12: a version the placement could never write, and two skills one place, are
/// refused when given (the placement's own rule, `gateway_core::mounts`), naming the path
/// or the name; before, they were accepted and the second skill silently dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skills_that_could_never_be_placed_are_refused_when_given() {
    let n = native().await;
    let manifest = |name: &str| format!("---\nname: {name}\ndescription: d\n---\n").into_bytes();
    let long = format!("greeter/{}", "n".repeat(300));
    for (files, why) in [
        (vec![("greeter/x", b"".to_vec()), ("greeter/x/y", b"".to_vec())], "\"x\" is a file, so \"x/y\""),
        (vec![(long.as_str(), b"".to_vec())], "longer than 255 bytes"),
        (vec![("greeter/SKILL.md/x", b"".to_vec())], "\"SKILL.md\" is a file"),
    ] {
        let mut files: Vec<(String, Vec<u8>)> = files.into_iter().map(|(p, b)| (p.to_owned(), b)).collect();
        files.push(("greeter/SKILL.md".into(), manifest("greeter")));
        let refused = n.coordinator.create_skill(None, files.clone()).await;
        assert!(matches!(&refused, Err(RuntimeError::Invalid(m)) if m.contains(why)), "{why}: {refused:?}");
        let (skill, _) =
            n.coordinator.create_skill(None, vec![("greeter/SKILL.md".into(), manifest("greeter"))]).await.unwrap();
        let refused = n.coordinator.add_skill_version(&skill.id, files).await;
        assert!(matches!(&refused, Err(RuntimeError::Invalid(m)) if m.contains(why)), "{why}: {refused:?}");
    }

    let reference = |id: &gateway_core::SkillId| SkillRef {
        source: "custom".into(),
        skill_id: id.to_string(),
        version: "latest".into(),
        resolved: None,
    };
    let (one, _) = n.coordinator.create_skill(None, vec![("a/SKILL.md".into(), manifest("greeter"))]).await.unwrap();
    let (two, _) = n.coordinator.create_skill(None, vec![("b/SKILL.md".into(), manifest("greeter"))]).await.unwrap();
    let mut agent = toolset(PermissionPolicy::AlwaysAllow);
    agent.skills = vec![reference(&one.id), reference(&one.id)];
    let refused = n.coordinator.create_agent(agent.clone()).await;
    assert!(matches!(&refused, Err(RuntimeError::Invalid(m)) if m.contains("given twice")), "{refused:?}");
    agent.skills = vec![reference(&one.id), reference(&two.id)];
    let refused = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![]).await;
    assert!(
        matches!(&refused, Err(RuntimeError::Invalid(m)) if m.contains("two of the agent's skills are named \"greeter\"")),
        "{refused:?}"
    );
}

/// Finding 13 through the runtime: a mounted file is read-only to the file tools in every
/// turn, also after the environment hibernated and woke with a new Hand, and a file the
/// agent's shell removed (`local`: no boundary) is placed again before the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mounted_files_stay_read_only_across_turns_and_wakes() {
    let n = crate::harness::native_with(
        Arc::new(gateway_models::fake::FakeModel::new()),
        crate::harness::offer(&[]),
        Duration::from_millis(200),
    )
    .await;
    let pool = n.workers(0);
    let f = upload(&n, b"id,name\n1,alice\n").await;
    let s = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            cloud(Provisioning::OnToolUse, "local"),
            vec![file(&f, "/workspace/ro.csv")],
        )
        .await
        .unwrap();
    let on_disk = n.workspaces.path().join(s.id.as_str()).join("ro.csv");
    let attempts = [
        r#"tool:write {"file_path": "ro.csv", "content": "pwned"}"#,
        r#"tool:edit {"file_path": "ro.csv", "old_string": "alice", "new_string": "mallory"}"#,
    ];
    for attempt in attempts {
        let (out, is_error) = tool_results(&n.turn(&s, attempt).await).remove(0);
        assert!(is_error && out.contains("read-only"), "{attempt}: {out}");
        assert_eq!(std::fs::read(&on_disk).unwrap(), b"id,name\n1,alice\n");
    }
    // A new Hand after a wake knows the file too.
    tokio::time::sleep(Duration::from_millis(400)).await;
    n.environments.hibernate_idle(&n.store).await;
    assert_eq!(n.state(&s).await, EnvironmentState::Hibernated);
    let (out, is_error) = tool_results(&n.turn(&s, attempts[0]).await).remove(0);
    assert!(is_error && out.contains("read-only"), "after a wake: {out}");
    assert_eq!(std::fs::read(&on_disk).unwrap(), b"id,name\n1,alice\n");
    // `local` is no boundary: its shell can remove the file; the next turn has it back, whole.
    n.turn(&s, r#"tool:bash {"command": "rm -f ro.csv"}"#).await;
    let (out, _) = tool_results(&n.turn(&s, r#"tool:read {"file_path": "ro.csv"}"#).await).remove(0);
    assert!(out.contains("alice"), "{out}");
    pool.shutdown().await;
}

/// Finding 13 on `namespace`: a shell in the sandbox cannot overwrite, delete, replace or
/// re-mode a mounted file, including one added between turns while its shell ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sandboxed_shell_cannot_change_mounted_files() {
    let n = crate::harness::native_on(
        Arc::new(gateway_models::fake::FakeModel::new()),
        crate::harness::offer(&["namespace"]),
        Duration::from_secs(300),
        vec![Arc::new(gateway_sandbox::NamespaceProvider::default())],
    )
    .await;
    let pool = n.workers(0);
    const CONTENT: &[u8] = b"id,name\n1,alice\n";
    let f = upload(&n, CONTENT).await;
    let s = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            cloud(Provisioning::OnToolUse, "namespace"),
            vec![file(&f, "/workspace/ro.csv")],
        )
        .await
        .unwrap();
    let workspace = n.workspaces.path().join(s.id.as_str());
    let attack = |name: &str| {
        format!(
            r#"tool:bash {{"command": "echo pwned > {name}; rm -f {name}; echo x > o && mv -f o {name}; chmod 644 {name}; echo pwned > {name}; cat {name}"}}"#
        )
    };
    let (out, _) = tool_results(&n.turn(&s, &attack("ro.csv")).await).remove(0);
    assert!(out.contains("alice") && !out.contains("pwned"), "{out}");
    assert_eq!(std::fs::read(workspace.join("ro.csv")).unwrap(), CONTENT);

    // Added between turns, while the session's shell is running.
    let later = upload(&n, CONTENT).await;
    n.coordinator.add_resource(&s.id, file(&later, "/mnt/session/uploads/later.csv")).await.unwrap();
    let (out, _) = tool_results(&n.turn(&s, &attack("/mnt/session/uploads/later.csv")).await).remove(0);
    assert!(out.contains("alice") && !out.contains("pwned"), "{out}");
    assert_eq!(std::fs::read(workspace.join("mnt/session/uploads/later.csv")).unwrap(), CONTENT);
    pool.shutdown().await;
}

/// A client workspace's additional directories (an editor's `additionalDirectories`): the
/// model is told where they are, and its tools reach them by their own absolute paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn additional_directories_are_named_to_the_model_and_reached_by_path() {
    let (stub, n) = native_on_stub().await;
    let _pool = n.workers(0);
    let (project, extra) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let project = std::fs::canonicalize(project.path()).unwrap();
    let beside = std::fs::canonicalize(extra.path()).unwrap();
    let workspace =
        ResourceKind::workspace_with(project.display().to_string(), None, [(beside.display().to_string(), None)]);
    let agent = toolset(PermissionPolicy::AlwaysAllow);
    let s = n.session(agent, cloud(Provisioning::OnToolUse, "local"), vec![workspace]).await.unwrap();
    let target = beside.join("from-model.txt");
    let ran = n.turn(&s, &format!(r#"tool:write {{"file_path": "{}", "content": "beside"}}"#, target.display())).await;
    let (out, is_error) = tool_results(&ran).remove(0);
    assert!(!is_error, "{out}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "beside");
    let first = stub.requests().into_iter().find(|r| r.path == "/v1/messages").expect("a model request");
    let system = first.body["system"].to_string();
    assert!(
        system.contains("Directories beside your workspace") && system.contains(&beside.display().to_string()),
        "{system}"
    );
}
