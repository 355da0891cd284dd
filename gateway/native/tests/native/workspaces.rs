//! Attacks on a mounted workspace (invariant 19): the directory checked when a session is
//! created is the only one its environment ever mounts, whoever swaps what on the path and
//! whenever, and a turn that cannot have it fails closed, naming it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::agent::PermissionPolicy;
use gateway_core::environment::Provisioning;
use gateway_core::event::{ErrorKind, Event, EventPayload, StopReason};
use gateway_core::session::{EnvironmentState, ResourceKind, Session};
use gateway_models::fake::FakeModel;
use gateway_sandbox::namespace::NamespaceProvider;

use crate::common::stop_of;
use crate::harness::{Native, cloud, native_on, offer, tool_results, toolset};

/// A host file whose content must never show up in a session: it is what a sandbox that got
/// the host's `/` as its workspace would read at `/workspace/<path>`.
struct HostSecret {
    path: PathBuf,
    content: String,
}

impl HostSecret {
    fn new() -> Self {
        let content = format!("host-secret-{}", gateway_core::EventId::new());
        let path = std::env::temp_dir().join(format!("gw-{}", gateway_core::EventId::new()));
        std::fs::write(&path, &content).unwrap();
        Self { path, content }
    }

    /// A command that reads the secret through `/workspace` and leaves a file at
    /// `/workspace/<escape>`: harmless in a real workspace, a breach if `/workspace` is `/`.
    fn probe(&self, escape: &str) -> String {
        let inner = Path::new("/workspace").join(self.path.strip_prefix("/").unwrap());
        format!(
            r#"tool:bash {{"command": "cat {} 2>/dev/null; echo probed > /workspace/{escape}; echo ran"}}"#,
            inner.display()
        )
    }

    fn leaked_in(&self, es: &[Event]) -> bool {
        es.iter().any(|e| format!("{:?}", e.payload).contains(&self.content))
    }
}

impl Drop for HostSecret {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn namespaced(idle: Duration) -> Native {
    native_on(Arc::new(FakeModel::new()), offer(&["namespace"]), idle, vec![Arc::new(NamespaceProvider::default())])
        .await
}

async fn mounted(n: &Native, dir: &Path) -> Session {
    let path = std::fs::canonicalize(dir).unwrap().display().to_string();
    n.session(
        toolset(PermissionPolicy::AlwaysAllow),
        cloud(Provisioning::OnToolUse, "namespace"),
        vec![ResourceKind::workspace(path, None)],
    )
    .await
    .unwrap()
}

/// The turn failed closed: a placement error naming the workspace, no tool ran.
fn failed_closed(es: &[Event], workspace: &Path) -> bool {
    let named = es.iter().any(|e| {
        matches!(&e.payload, EventPayload::SessionError { kind: ErrorKind::PlacementFailed, message, .. }
            if message.contains(&workspace.display().to_string()))
    });
    named && tool_results(es).is_empty() && stop_of(es.last().unwrap()) == Some(StopReason::Failed)
}

/// A face maps the paths an agent names through the session's provider's answer (an editor
/// shows `/workspace/a.rs` under its project), known before anything is realized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_inner_root_is_what_its_provider_says() {
    let providers: Vec<Arc<dyn gateway_sandbox::SandboxProvider>> =
        vec![Arc::new(gateway_sandbox::LocalProvider::new()), Arc::new(NamespaceProvider::default())];
    let n = native_on(Arc::new(FakeModel::new()), offer(&["namespace"]), Duration::from_secs(300), providers).await;
    let base = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(base.path()).unwrap();
    let s = mounted(&n, &project).await;
    assert_eq!(n.coordinator.inner_root(&s), Some(PathBuf::from("/workspace")));
    let path = project.display().to_string();
    let local = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            cloud(Provisioning::OnToolUse, "local"),
            vec![ResourceKind::workspace(path, None)],
        )
        .await
        .unwrap();
    assert_eq!(n.coordinator.inner_root(&local), Some(project), "local shows the workspace where it is");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workspace_swapped_for_a_symlink_to_root_is_never_mounted() {
    let n = namespaced(Duration::from_secs(300)).await;
    let pool = n.workers(0);
    let secret = HostSecret::new();
    let base = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir(&project).unwrap();
    let s = mounted(&n, &project).await;

    // After the session was opened (and checked), the project becomes a symlink to `/`.
    std::fs::rename(&project, project.with_extension("orig")).unwrap();
    std::os::unix::fs::symlink("/", &project).unwrap();
    let escape = format!("gw-escaped-{}", s.id);
    let es = n.turn(&s, &secret.probe(&escape)).await;
    assert!(failed_closed(&es, &project), "{es:#?}");
    assert!(!secret.leaked_in(&es), "the host file was read through the swapped workspace");
    assert!(!Path::new("/").join(&escape).exists(), "a file was written on the host's /");
    assert_eq!(n.state(&s).await, EnvironmentState::None, "nothing was realized");

    // Swapped for another real directory instead: refused too (not the one checked).
    std::fs::remove_file(&project).unwrap();
    std::fs::create_dir(&project).unwrap();
    let es = n.turn(&s, &secret.probe(&escape)).await;
    assert!(failed_closed(&es, &project), "{es:#?}");
    assert!(!project.join(&escape).exists(), "the replacement directory was used");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workspace_swapped_while_hibernated_is_not_woken() {
    let n = namespaced(Duration::from_millis(100)).await;
    let pool = n.workers(0);
    let secret = HostSecret::new();
    let base = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir(&project).unwrap();
    let s = mounted(&n, &project).await;
    let first = n.turn(&s, r#"tool:bash {"command": "echo mine > /workspace/kept; echo ok"}"#).await;
    assert_eq!(tool_results(&first), vec![("ok\n".to_owned(), false)]);
    assert_eq!(std::fs::read_to_string(project.join("kept")).unwrap(), "mine\n");
    tokio::time::sleep(Duration::from_millis(200)).await;
    n.environments.hibernate_idle(&n.store).await;
    assert_eq!(n.state(&s).await, EnvironmentState::Hibernated);

    std::fs::rename(&project, project.with_extension("orig")).unwrap();
    std::os::unix::fs::symlink("/", &project).unwrap();
    let escape = format!("gw-escaped-{}", s.id);
    let es = n.turn(&s, &secret.probe(&escape)).await;
    assert!(failed_closed(&es, &project), "{es:#?}");
    assert!(!secret.leaked_in(&es));
    assert!(!Path::new("/").join(&escape).exists(), "a file was written on the host's /");
    assert_eq!(n.state(&s).await, EnvironmentState::Hibernated, "the wake was refused");
    pool.shutdown().await;
}

/// A second session whose workspace is the parent directory swaps the first one's workspace
/// with a symlink to `/` (`renameat2(RENAME_EXCHANGE)`) in a tight loop for 20 s, while the
/// first session is woken and hibernated again and again: every wake either gets the real
/// directory or is refused; none ever mounts `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rename_exchange_race_from_another_session_never_wins() {
    let n = namespaced(Duration::from_millis(1)).await;
    let pool = n.workers(0);
    let secret = HostSecret::new();
    let base = tempfile::tempdir().unwrap();
    let base_path = std::fs::canonicalize(base.path()).unwrap();
    let victim_dir = base_path.join("a");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = mounted(&n, &victim_dir).await;
    let attacker = mounted(&n, &base_path).await;

    let race = Duration::from_secs(20);
    let script = format!(
        "import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nos.symlink('/', '/workspace/evil')\n\
         end = time.time() + {secs}\nn = 0\nwhile time.time() < end:\n    \
         libc.renameat2(-100, b'/workspace/a', -100, b'/workspace/evil', 2)\n    n += 1\nprint('swaps', n)",
        secs = race.as_secs()
    );
    let command = serde_json::json!({"command": format!("python3 -c \"{script}\""), "timeout_ms": 60_000});
    let attack = {
        let coordinator = n.coordinator.clone();
        let attacker = attacker.clone();
        let stream = n.stream(&attacker, false).await;
        coordinator.submit(&attacker.id, vec![crate::common::say(&format!("tool:bash {command}"))]).await.unwrap();
        tokio::spawn(async move {
            crate::common::events(&crate::common::until(stream, 90, crate::common::turn_ended).await)
        })
    };

    let escape = format!("gw-escaped-{}", victim.id);
    let (mut mounted_real, mut refused, mut bwrap_refused) = (0, 0, 0);
    let started = Instant::now();
    while started.elapsed() < race {
        let es = n.turn(&victim, &secret.probe(&escape)).await;
        assert!(!secret.leaked_in(&es), "the host file was read through the swapped workspace");
        assert!(!Path::new("/").join(&escape).exists(), "a file was written on the host's /");
        match tool_results(&es).first() {
            Some((out, false)) if out.trim_end().ends_with("ran") => mounted_real += 1,
            // bubblewrap checks the bound directory against the descriptor too, and refuses
            // to start the sandbox when the path moved in between.
            Some((out, true)) if out.contains("Race condition binding dirfd") => bwrap_refused += 1,
            // The sandbox died while the swap raced its start (seen under a loaded machine):
            // nothing ran, and the checks above saw nothing leak or land on the host.
            Some((out, true)) if out.contains("before the command finished") => bwrap_refused += 1,
            _ if failed_closed(&es, &victim_dir) => refused += 1,
            _ => panic!("neither the real workspace nor a refusal: {es:#?}"),
        }
        n.environments.hibernate_idle(&n.store).await;
    }
    let attack = attack.await.unwrap();
    let (out, _) = tool_results(&attack).into_iter().next().expect("the attacker's loop ran");
    assert!(out.starts_with("swaps "), "{out}");
    assert!(!Path::new("/").join(&escape).exists());
    assert!(!Path::new("/").join("evil").exists());
    assert!(
        refused > 0 && mounted_real > 0,
        "the race was exercised: {mounted_real} real, {refused} refused, {bwrap_refused} refused by bubblewrap"
    );
    pool.shutdown().await;
}
