#![allow(clippy::unwrap_used)] // test support: a failed setup should abort the test loudly
//! The sandbox conformance suite: one set of behaviours, run on every provider.
//!
//! Each test takes a [`Harness`] that names the provider under test; fixtures open a fresh
//! temporary workspace with it and put a [`Hand`] on top. The providers' test files
//! instantiate every test with [`conformance_suite!`](crate::conformance_suite); providers
//! that claim to be a security boundary also run [`isolation_suite!`](crate::isolation_suite)
//! (identity, capabilities, network, read-only system, private `/tmp`, limits).
//!
//! The tests assert what a caller of the Hand sees (tool outputs, files on the host), never
//! internals.

pub mod agent_io;
pub mod bash;
pub mod escape;
pub mod files;
pub mod harness;
pub mod isolation;
pub mod lifecycle;
pub mod paths;
pub mod readonly;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{Hand, Limits, Sandbox, SandboxPolicy, SandboxProvider, ToolOutput, WorkspaceDir};

/// Names the provider under test.
pub trait Harness: Send + Sync {
    fn provider(&self) -> Arc<dyn SandboxProvider>;
}

/// Instantiates every conformance test for a harness expression.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@each $harness;
            files::read_numbers_lines_and_honours_view_range,
            files::read_refuses_binary_missing_and_directories_and_caps_output,
            files::write_creates_parents_and_overwrites,
            files::edit_requires_one_match_unless_replace_all,
            files::glob_lists_matching_files_sorted,
            files::grep_reports_path_line_and_text,
            files::bad_inputs_are_errors_not_panics,
            files::special_files_are_refused_without_hanging,
            escape::file_tools_refuse_parent_escapes,
            escape::file_tools_refuse_absolute_paths_outside,
            escape::file_tools_refuse_symlinks_leading_out,
            escape::file_tools_refuse_nul_bytes,
            escape::a_symlink_swapped_during_reads_never_leaks,
            escape::workspaces_cannot_see_each_other,
            lifecycle::files_survive_hibernate_and_a_new_hand,
            lifecycle::hibernate_kills_background_work,
            lifecycle::hibernate_interrupts_a_running_command,
            lifecycle::dropping_a_hand_kills_its_shell,
            lifecycle::release_kills_children_that_left_their_process_group,
            bash::bash_runs_in_the_workspace_with_merged_output,
            bash::shell_state_persists_until_restart,
            bash::exit_statuses_are_reported,
            bash::the_environment_is_minimal,
            bash::a_timeout_kills_the_process_group,
            bash::timeouts_are_bounded_by_the_policy,
            bash::output_is_capped_and_the_shell_stays_in_sync,
            bash::cancel_kills_the_command,
            bash::commands_cannot_forge_their_completion,
            isolation::no_descriptor_leaks_into_the_sandbox,
            agent_io::text_files_are_read_and_written_inside_the_workspace,
            agent_io::terminals_run_report_output_and_exit,
            agent_io::terminal_output_is_limited_from_the_start,
            agent_io::killed_terminals_stop_with_their_children,
            agent_io::operator_variables_stay_out_of_argv,
            agent_io::terminal_variables_stay_out_of_argv,
            readonly::mounted_files_refuse_the_file_tools,
            paths::the_reported_inner_root_is_where_processes_see_the_workspace,
            paths::additional_directories_are_seen_at_their_own_paths
        );
    };
    (@each $harness:expr; $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness = $harness;
                $crate::conformance::$module::$name(&harness).await;
            }
        )*
    };
}

/// Instantiates the isolation tests, for providers that are a security boundary.
#[macro_export]
macro_rules! isolation_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@each $harness;
            isolation::processes_run_unprivileged,
            isolation::the_only_network_interface_is_loopback,
            isolation::the_system_is_read_only,
            isolation::tmp_is_private,
            isolation::a_networked_sandbox_never_reaches_the_hosts_loopback,
            isolation::a_fork_bomb_stops_at_the_process_limit,
            isolation::host_files_and_other_workspaces_are_invisible,
            isolation::resource_limits_apply,
            isolation::the_hostname_is_the_sandbox,
            readonly::mounted_files_refuse_sandboxed_processes,
            readonly::a_file_mounted_while_the_shell_runs_is_read_only_to_its_next_command
        );
    };
}

/// A fresh workspace, its sandbox and a Hand on it. The directory goes when this is dropped.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub sandbox: Arc<dyn Sandbox>,
    pub hand: Hand,
}

impl Fixture {
    pub fn new(harness: &dyn Harness) -> Self {
        Self::with_policy(harness, policy())
    }

    pub fn with_policy(harness: &dyn Harness, policy: SandboxPolicy) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = harness.provider().open(open_dir(dir.path()), &policy).expect("the provider opens a sandbox");
        let hand = Hand::new(Arc::clone(&sandbox)).expect("a Hand on the sandbox");
        Self { dir, sandbox, hand }
    }

    /// A fresh workspace with one additional directory (`extra`, its own temporary
    /// directory; `WorkspaceDir::extra`).
    pub fn with_extra(harness: &dyn Harness) -> (Self, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let extra = tempfile::tempdir().unwrap();
        let workspace = open_dir(dir.path()).with_extra(vec![open_dir(extra.path())]);
        let sandbox = harness.provider().open(workspace, &policy()).expect("the provider opens a sandbox");
        let hand = Hand::new(Arc::clone(&sandbox)).expect("a Hand on the sandbox");
        (Self { dir, sandbox, hand }, extra)
    }

    /// The workspace on the host.
    pub fn host(&self, rel: &str) -> PathBuf {
        self.sandbox.workspace().path().join(rel)
    }

    /// Where processes and absolute tool paths see `rel`.
    pub fn inner(&self, rel: &str) -> String {
        let root = self.sandbox.inner_root();
        if rel.is_empty() { root.display().to_string() } else { root.join(rel).display().to_string() }
    }

    /// Writes a file on the host, behind the Hand's back.
    pub fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.host(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Places `content` at `rel` as a mounted input (whole, then read-only), as the runtime
    /// places a session's files.
    pub async fn mount(&self, rel: &str, content: &[u8]) {
        let mut writer = self.hand.place(Path::new(rel)).await.unwrap();
        writer.write(content.to_vec()).await.unwrap();
        writer.finish().await.unwrap();
        self.hand.protect(Path::new(rel)).await.unwrap();
    }

    pub async fn call(&self, tool: &str, input: Value) -> ToolOutput {
        call(&self.hand, tool, input).await
    }

    /// Calls a tool that must succeed; its text.
    pub async fn ok(&self, tool: &str, input: Value) -> String {
        let shown = input.to_string();
        let out = self.call(tool, input).await;
        assert!(!out.is_error, "{tool} {shown} failed: {}", out.text);
        out.text
    }

    /// Calls a tool that must fail; its text.
    pub async fn err(&self, tool: &str, input: Value) -> String {
        let shown = input.to_string();
        let out = self.call(tool, input).await;
        assert!(out.is_error, "{tool} {shown} should have failed but answered: {}", out.text);
        out.text
    }

    /// Runs a bash command that must complete; its output.
    pub async fn sh(&self, command: &str) -> String {
        self.ok("bash", serde_json::json!({ "command": command, "timeout_ms": 30_000 })).await
    }
}

/// The policy fixtures use unless a test needs another: no network, short wall clock.
pub fn policy() -> SandboxPolicy {
    SandboxPolicy {
        network: false,
        limits: Limits {
            wall_clock: Duration::from_secs(30),
            max_wall_clock: Duration::from_secs(60),
            ..Default::default()
        },
    }
}

/// An existing directory opened as a workspace (canonicalized first: temp paths may run
/// through symlinks, which a workspace path may not).
pub fn open_dir(path: &Path) -> WorkspaceDir {
    WorkspaceDir::open(&std::fs::canonicalize(path).unwrap(), None).expect("the workspace opens")
}

pub async fn call(hand: &Hand, tool: &str, input: Value) -> ToolOutput {
    let input = input.as_object().cloned().expect("tool input must be a JSON object");
    hand.run(tool, &input, &CancellationToken::new()).await
}

/// A fresh random name, so concurrent tests and host files cannot collide.
pub fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Waits until `cond` holds, at most `limit`; whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Host processes whose command line contains `needle` (zombies have none and do not count).
pub fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(Path::new("/proc").join(pid.to_string()).join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle))
        })
        .collect()
}
