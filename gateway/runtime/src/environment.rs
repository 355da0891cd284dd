//! Session Environments: the workspace + sandbox lifecycle of each session on this host, and
//! its one Hand.
//!
//! Why one Hand per session: `acquire` holds the manager's lock while it looks up or creates
//! the session's slot, so two callers can never create two Hands for one session in this
//! process; and a session has at most one running run (store invariant 1), so at most one
//! process uses its environment at a time.
//!
//! Lifecycle (invariant 8): `none` → `realized` on the first acquisition (the caller commits
//! the change with its fenced events); `realized` → `hibernated` when idle (the persistent
//! shell is stopped, the files stay); `hibernated` → `realized` at the next acquisition,
//! through the same provider, over the same workspace; `released` at session delete, which
//! removes the workspace and is final. An environment whose workspace vanished is never
//! silently recreated: acquisition fails with `Vanished`.
//!
//! Workspaces are opened, never looked up (invariant 19): every realization and every wake
//! opens the workspace directory once, without following a symlink anywhere on its path
//! (beneath its allowed root, for a network editor's workspace), checks that a mounted
//! workspace is still the directory recorded when the session was created (device and
//! inode), and hands the sandbox that descriptor. Nothing after that uses the path, so a
//! directory swapped for a symlink, or renamed over, between the check and the use fails the
//! acquisition instead of mounting something else; every face gets this, because every
//! turn comes through here.

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gateway_core::environment::ProviderTier;
use gateway_core::event::{ErrorKind, Event, EventPayload, NewEvent, RetryStatus};
use gateway_core::placement::{EnvironmentPlan, NetworkControl, ProviderOffer};
use gateway_core::session::{EnvironmentState, ResourceKind, Secret, Session};
use gateway_core::{FileId, SessionId, SkillVersionId, mounts};
use gateway_sandbox::{DirError, Hand, Limits, ProviderSettings, SandboxPolicy, SandboxProvider, WorkspaceDir};
use gateway_store::{EnvironmentChange, Store, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tracing::{info, warn};

use gateway_services::checkout::CheckoutConfig;
use gateway_services::secrets::SecretBox;

/// Why a session's environment could not be provided. Each maps to a typed session error.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    #[error("session {0} needs no local environment")]
    NotNeeded(SessionId),
    #[error("sandbox provider {provider:?} is not available on this host: {reason}")]
    ProviderUnavailable { provider: String, reason: String },
    #[error("the environment of session {0} was released and cannot be used again")]
    Released(SessionId),
    #[error("the environment of session {session} is {state} but its workspace {path} is gone; it is not recreated")]
    Vanished { session: SessionId, state: &'static str, path: String },
    #[error("cannot prepare the workspace {path}: {reason}")]
    Workspace { path: String, reason: String },
    /// A mounted input could not be placed; the turn must not run without it.
    #[error("session resource {resource} ({mount_path}) could not be mounted: {reason}")]
    Mount { resource: String, mount_path: String, reason: String },
    /// The workspace is not (or no longer) the directory that was checked: fail closed.
    #[error("the workspace of session {session} cannot be used: {source}")]
    WorkspaceRefused { session: SessionId, source: DirError },
    /// Every live environment of this process stayed in use for the whole wait: the turn is
    /// retried later rather than opened past `max_live` (which runs the process out of file
    /// descriptors).
    #[error(
        "all {max_live} live environments of this process (environments.max_live) stayed in use for {waited:?} (environments.realize_wait_secs); the turn will be retried"
    )]
    Busy { max_live: usize, waited: Duration },
}

impl EnvironmentError {
    /// The neutral error kind a failed turn reports.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EnvironmentError::Vanished { .. } => ErrorKind::EnvironmentLost,
            EnvironmentError::Mount { .. } => ErrorKind::MountFailed,
            _ => ErrorKind::PlacementFailed,
        }
    }
}

/// How long a turn refused for want of a live place waits before it is tried again.
const BUSY_RETRY_AFTER: Duration = Duration::from_secs(2);

impl From<EnvironmentError> for crate::backend::BackendError {
    fn from(e: EnvironmentError) -> Self {
        match e {
            EnvironmentError::Busy { .. } => crate::backend::BackendError::Transient {
                kind: e.kind(),
                message: e.to_string(),
                retry_after: Some(BUSY_RETRY_AFTER),
            },
            _ => crate::backend::BackendError::Failed { kind: e.kind(), message: e.to_string() },
        }
    }
}

/// A client workspace as it will be frozen into a new session: opened now without following
/// symlinks (beneath its root, if it has one), and its identity recorded so that every
/// later realization can tell it is still the same directory. Other resources pass as given.
/// Gives up the environment of an idle session whose host is gone (not seen within
/// `host_ttl`), by request: what `Coordinator::release_lost_environment` and
/// `gateway sessions release-environment` do. Appends a `session_error`
/// (`environment_lost`) saying the old workspace is lost; the next turn realizes a fresh
/// environment. A session is never re-homed without this (docs/adr/0036).
pub async fn release_lost(store: &dyn Store, id: &SessionId, host_ttl: Duration) -> Result<Event, StoreError> {
    let session = store.get_session(id).await?;
    let host = session.environment_host.as_deref().unwrap_or("-");
    let lost = NewEvent::new(EventPayload::SessionError {
        kind: ErrorKind::EnvironmentLost,
        message: format!(
            "the environment realized on host {host}, which is gone, was released on request: its workspace and \
             everything in it are lost; the next turn starts in a fresh environment"
        ),
        retry: RetryStatus::Exhausted,
        server: None,
    });
    store.release_lost_environment(id, host_ttl, lost).await
}

pub fn check_resource(kind: ResourceKind) -> Result<ResourceKind, DirError> {
    match kind {
        ResourceKind::Workspace { path, root, additional, .. } => {
            let dir = WorkspaceDir::open(Path::new(&path), root.as_deref().map(Path::new))?;
            let additional = additional
                .into_iter()
                .map(|extra| {
                    let dir = WorkspaceDir::open(Path::new(&extra.path), extra.root.as_deref().map(Path::new))?;
                    Ok(gateway_core::session::ExtraRoot { identity: Some(dir.identity()), ..extra })
                })
                .collect::<Result<_, DirError>>()?;
            Ok(ResourceKind::Workspace { path, root, identity: Some(dir.identity()), additional })
        }
        other => Ok(other),
    }
}

/// A session's Hand, and the lifecycle change the caller must commit with its next events.
pub struct Acquired {
    pub hand: Arc<Hand>,
    pub change: Option<EnvironmentChange>,
}

struct Slot {
    hand: Arc<Hand>,
    last_used: Instant,
    /// Acquisitions not yet released by their callers; a slot in use is never hibernated.
    users: usize,
}

/// `[environments]`: how this host's Session Environments behave. Deserializable with the
/// documented keys (`idle_secs`, the command [`Limits`], `bwrap`); missing keys keep these
/// defaults. Where they live and which host they are pinned to are facts of the process,
/// given to [`Environments::new`] beside this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnvironmentsConfig {
    /// A Hand idle this long is hibernated (its shell stopped, its files kept).
    #[serde(rename = "idle_secs", with = "gateway_core::durations::secs")]
    pub idle: Duration,
    /// What each command may use.
    #[serde(flatten)]
    pub limits: Limits,
    /// What building the sandbox providers takes (`bwrap`):
    /// [`gateway_sandbox::providers::host_providers`].
    #[serde(flatten)]
    pub providers: ProviderSettings,
    /// Built-in tool calls (bash, file tools) running at once in this process, all sessions
    /// together; more wait for a place (an interrupt still ends the wait). A command holds its
    /// place while it runs, sleeping or not, so the default is generous: four per core, at
    /// least 16.
    pub max_commands: usize,
    /// Live environments (each a running shell holding a few file descriptors) kept in this
    /// process, those being realized included: realizing one more first hibernates the least
    /// recently used idle one, and when every one is in use it waits for one to become idle
    /// (up to `realize_wait`), so neither many idle sessions nor a burst of first tool calls
    /// can exhaust the descriptors every client and turn needs. Unset: what the process's
    /// open files limit allows ([`EnvironmentsConfig::live_for`]).
    pub max_live: Option<usize>,
    /// How long a realization waits for a place under `max_live` while every live
    /// environment is in use (a turn holds its environment until it ends); past it, the turn
    /// fails with a retryable error (`placement_failed`, retried like a model overload).
    #[serde(rename = "realize_wait_secs", with = "gateway_core::durations::secs")]
    pub realize_wait: Duration,
    /// How long a self-hosted session's input waits for an executor to connect.
    #[serde(rename = "connect_timeout_secs", with = "gateway_core::durations::secs")]
    pub connect_timeout: Duration,
    /// The lease of a self-hosted executor's work item: it lapses (the session is
    /// disconnected) when no heartbeat renews it for this long.
    #[serde(rename = "heartbeat_ttl_secs", with = "gateway_core::durations::secs")]
    pub heartbeat_ttl: Duration,
    /// Distinct workers (`Anthropic-Worker-ID`, a value the executor chooses) one self-hosted
    /// environment records as polling within the 30 s window; polls from more are served but
    /// not counted in `workers_polling`, and rows outside the window are pruned.
    pub max_polling_workers: u64,
    /// How repository resources are checked out (`git`, `allow_private_repositories`,
    /// `checkout_timeout_secs`, `max_repository_bytes`, `max_repository_entries`).
    #[serde(flatten)]
    pub checkout: CheckoutConfig,
}

impl EnvironmentsConfig {
    /// How many environments may stay live under an open files limit of `fd_limit`: a
    /// sixteenth of it (a live environment holds a shell and about four descriptors, so a
    /// quarter of them at most), between 8 and 256.
    pub fn live_for(fd_limit: u64) -> usize {
        usize::try_from(fd_limit / 16).unwrap_or(usize::MAX).clamp(8, 256)
    }

    /// What self-hosted executors are held to.
    pub fn executors(&self) -> crate::executors::ExecutorSettings {
        crate::executors::ExecutorSettings {
            connect_timeout: self.connect_timeout,
            heartbeat_ttl: self.heartbeat_ttl,
            max_polling_workers: self.max_polling_workers,
            output_cap: self.limits.output_cap,
            ..Default::default()
        }
    }
}

impl Default for EnvironmentsConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            idle: Duration::from_secs(300),
            limits: Limits::default(),
            providers: ProviderSettings::default(),
            max_commands: (4 * cores).max(16),
            max_live: None,
            realize_wait: Duration::from_secs(60),
            connect_timeout: crate::executors::ExecutorSettings::default().connect_timeout,
            heartbeat_ttl: crate::executors::ExecutorSettings::default().heartbeat_ttl,
            max_polling_workers: crate::executors::ExecutorSettings::default().max_polling_workers,
            checkout: CheckoutConfig::default(),
        }
    }
}

/// The offers of `providers` (those that work on this host:
/// [`gateway_sandbox::providers::available`]), for placement.
pub fn offers_of<'a>(providers: impl IntoIterator<Item = &'a Arc<dyn SandboxProvider>>) -> Vec<ProviderOffer> {
    let mut out: Vec<ProviderOffer> = providers
        .into_iter()
        .map(|p| ProviderOffer { tier: p.tier(), network: p.network_control(), installs_packages: false })
        .collect();
    out.sort();
    out
}

/// The Session Environments of this host.
pub struct Environments {
    /// The host identity environments are pinned to.
    host: String,
    /// Where session workspaces live (`<root>/<session id>`).
    root: PathBuf,
    config: EnvironmentsConfig,
    providers: HashMap<ProviderTier, Arc<dyn SandboxProvider>>,
    slots: Mutex<HashMap<SessionId, Slot>>,
    /// Told whenever a slot becomes idle or is removed: realizations waiting for a place
    /// under `max_live` look again.
    freed: Arc<tokio::sync::Notify>,
    /// `max_commands`, shared by every Hand.
    commands: Arc<tokio::sync::Semaphore>,
    /// Where mounted files' content and skills' files are read from.
    content: Arc<dyn Store>,
    /// Seals repository tokens at rest ([`Environments::seal_tokens`]); without one they are
    /// kept as given (tests, tools).
    secrets: Option<SecretBox>,
}

/// Releases its acquisition when dropped, so a caller can never keep a slot busy forever.
pub struct Lease {
    envs: Arc<Environments>,
    session: SessionId,
    pub acquired: Acquired,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let envs = Arc::clone(&self.envs);
        let session = self.session.clone();
        tokio::spawn(async move {
            if let Some(slot) = envs.slots.lock().await.get_mut(&session) {
                slot.users = slot.users.saturating_sub(1);
                slot.last_used = Instant::now();
                if slot.users == 0 {
                    envs.freed.notify_waiters();
                }
            }
        });
    }
}

impl Environments {
    /// The environments of `host`, with session workspaces under `root`, made by `providers`,
    /// mounted files and skills read from `content`, repository tokens sealed with `secrets`.
    pub fn new(
        host: impl Into<String>,
        root: impl Into<PathBuf>,
        config: EnvironmentsConfig,
        providers: Vec<Arc<dyn SandboxProvider>>,
        content: Arc<dyn Store>,
        secrets: Option<SecretBox>,
    ) -> Arc<Self> {
        let commands = Arc::new(tokio::sync::Semaphore::new(config.max_commands.max(1)));
        Arc::new(Self {
            host: host.into(),
            root: root.into(),
            config,
            providers: providers.into_iter().map(|p| (p.tier(), p)).collect(),
            slots: Mutex::new(HashMap::new()),
            freed: Arc::new(tokio::sync::Notify::new()),
            commands,
            content,
            secrets,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn config(&self) -> &EnvironmentsConfig {
        &self.config
    }

    /// The providers that work on this host right now, for placement.
    pub fn offers(&self) -> Vec<ProviderOffer> {
        offers_of(&gateway_sandbox::providers::available(self.providers.values()))
    }

    /// Where the processes of `session`'s sandbox see its workspace, as its provider says
    /// ([`SandboxProvider::inner_root`]); known whether the sandbox is live, hibernated or on
    /// another host. `None` when the session has no local environment or its provider is not
    /// one this host builds.
    pub fn inner_root(&self, session: &Session) -> Option<PathBuf> {
        let provider = self.providers.get(session.snapshot.requirements.provider()?)?;
        Some(provider.inner_root(&self.workspace_of(session).0))
    }

    /// Where a session's workspace lives: the client's own directory for a mounted workspace
    /// (an editor's `cwd`), else a directory of its own under the root. For messages and
    /// removal only: it is never opened by this path (see [`Environments::open_workspace`]).
    pub fn workspace_of(&self, session: &Session) -> (PathBuf, bool) {
        for r in &session.snapshot.resources {
            if let ResourceKind::Workspace { path, .. } = &r.kind {
                return (PathBuf::from(path), false);
            }
        }
        (self.root.join(session.id.as_str()), true)
    }

    /// Opens the session's workspace for a realization or a wake: a mounted workspace beneath
    /// its root, without symlinks, and only if it is still the directory recorded at
    /// creation; the session's own directory under the root, created (0700) only by the first
    /// realization. A workspace that vanished after it was realized is `Vanished`.
    fn open_workspace(&self, session: &Session) -> Result<WorkspaceDir, EnvironmentError> {
        let was_realized =
            matches!(session.environment_state, EnvironmentState::Realized | EnvironmentState::Hibernated);
        let refused = |source| EnvironmentError::WorkspaceRefused { session: session.id.clone(), source };
        let vanished = |path: &Path| EnvironmentError::Vanished {
            session: session.id.clone(),
            state: session.environment_state.as_str(),
            path: path.display().to_string(),
        };
        let mounted = session.snapshot.resources.iter().find_map(|r| match &r.kind {
            ResourceKind::Workspace { path, root, identity, additional } => Some((path, root, identity, additional)),
            _ => None,
        });
        if let Some((path, root, identity, additional)) = mounted {
            // Each directory as it was checked at creation, or none: a session never runs
            // with one of its directories swapped for another.
            let open = |path: &str, root: &Option<String>, identity: &Option<gateway_core::session::DirIdentity>| {
                let dir = match WorkspaceDir::open(Path::new(path), root.as_deref().map(Path::new)) {
                    Ok(dir) => dir,
                    Err(DirError::Missing { .. }) if was_realized => return Err(vanished(Path::new(path))),
                    Err(e) => return Err(refused(e)),
                };
                match identity {
                    Some(expected) => dir.expect(*expected).map_err(refused),
                    // Recorded before identities were (ADR 0010): no symlink was followed.
                    None => Ok(dir),
                }
            };
            let extra = additional
                .iter()
                .map(|e| open(&e.path, &e.root, &e.identity))
                .collect::<Result<Vec<_>, EnvironmentError>>()?;
            return Ok(open(path, root, identity)?.with_extra(extra));
        }
        let root = self.root_dir()?;
        match root.child(session.id.as_str(), !was_realized) {
            Ok(dir) => Ok(dir),
            Err(DirError::Missing { .. }) => Err(vanished(&self.root.join(session.id.as_str()))),
            Err(e) => Err(refused(e)),
        }
    }

    /// Where repositories are cloned and skills written before they move into a workspace: beside the
    /// workspaces (one filesystem, so the move is a rename), private to the gateway, under a
    /// name no session id can have (the release sweep passes it over).
    fn staging_dir(&self) -> Result<PathBuf, String> {
        let dir = self.root.join(".staging");
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|e| e.to_string())?;
        std::fs::canonicalize(&dir).map_err(|e| e.to_string())
    }

    /// Seals the repository tokens among `resources` for storage (those already sealed are
    /// left as they are). The one place tokens are sealed; [`Environments::open_token`] is the
    /// one place they are opened, right before a checkout.
    pub fn seal_tokens<'a>(&self, resources: impl IntoIterator<Item = &'a mut ResourceKind>) {
        for r in resources {
            if let ResourceKind::Repository { authorization_token: Some(token), .. } = r {
                self.seal_secret(token);
            }
        }
    }

    /// Seals a secret in place (once: a sealed value stays as it is).
    pub fn seal_secret(&self, secret: &mut Secret) {
        if let Some(secrets) = &self.secrets
            && !SecretBox::is_sealed(&secret.0)
        {
            secret.0 = secrets.seal(&secret.0);
        }
    }

    /// A secret [`Self::seal_secret`] sealed, opened (a value never sealed comes back as it is).
    pub fn open_secret(&self, secret: &Secret) -> Result<Secret, String> {
        self.open_token(secret)
    }

    fn open_token(&self, token: &Secret) -> Result<Secret, String> {
        match &self.secrets {
            Some(secrets) if SecretBox::is_sealed(&token.0) => {
                secrets.open(&token.0).map_err(|e| format!("cannot open the token: {e}"))
            }
            _ => Ok(token.clone()),
        }
    }

    /// Whether repository resources can be checked out here (git runs).
    pub fn checks_out_repositories(&self) -> bool {
        self.config.checkout.available()
    }

    /// The directory session workspaces live in, created private (0700) if missing. It is the
    /// operator's own path, so symlinks in it are resolved once, here.
    fn root_dir(&self) -> Result<WorkspaceDir, EnvironmentError> {
        let root = &self.root;
        let failed = |reason: String| EnvironmentError::Workspace { path: root.display().to_string(), reason };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(root).map_err(|e| failed(e.to_string()))?;
        let real = std::fs::canonicalize(root).map_err(|e| failed(e.to_string()))?;
        WorkspaceDir::open(&real, None).map_err(|e| failed(e.to_string()))
    }

    /// The session's Hand, realizing (or waking) its environment if needed. The returned
    /// `change` must be committed by the caller under its fence before the Hand is used for
    /// work whose effects must be attributed to the realized environment.
    pub async fn acquire(self: &Arc<Self>, session: &Session) -> Result<Lease, EnvironmentError> {
        let sandbox = match &session.snapshot.requirements.environment {
            EnvironmentPlan::Never => return Err(EnvironmentError::NotNeeded(session.id.clone())),
            EnvironmentPlan::OnFirstLocalTool { sandbox } | EnvironmentPlan::BeforeExecution { sandbox, .. } => sandbox,
        };
        if session.environment_state == EnvironmentState::Released {
            return Err(EnvironmentError::Released(session.id.clone()));
        }
        let mut slots = self.place_for(session).await?;
        if let Some(slot) = slots.get_mut(&session.id) {
            slot.users += 1;
            slot.last_used = Instant::now();
            let change = (session.environment_state != EnvironmentState::Realized)
                .then(|| EnvironmentChange { state: EnvironmentState::Realized, host: Some(self.host.clone()) });
            let acquired = Acquired { hand: Arc::clone(&slot.hand), change };
            drop(slots);
            let lease = Lease { envs: Arc::clone(self), session: session.id.clone(), acquired };
            self.place_mounts(session, &lease.acquired.hand).await?;
            return Ok(lease);
        }

        let provider = self.providers.get(&sandbox.provider).ok_or_else(|| EnvironmentError::ProviderUnavailable {
            provider: sandbox.provider.to_string(),
            reason: "not configured on this host".into(),
        })?;
        provider.check().map_err(|e| EnvironmentError::ProviderUnavailable {
            provider: sandbox.provider.to_string(),
            reason: e.to_string(),
        })?;
        if sandbox.network && provider.network_control() == NetworkControl::None {
            // Placement checked this already; a provider swapped under a live session must not
            // weaken it.
            tracing::debug!("provider cannot restrict the network; the environment allows it");
        }
        let workspace = self.open_workspace(session)?;
        let shown = workspace.path().display().to_string();
        let policy = SandboxPolicy { network: sandbox.network, limits: self.config.limits.clone() };
        let opened = provider.open(workspace, &policy).map_err(|e| EnvironmentError::ProviderUnavailable {
            provider: sandbox.provider.to_string(),
            reason: e.to_string(),
        })?;
        let hand = Arc::new(
            Hand::new(opened)
                .map_err(|e| EnvironmentError::Workspace { path: shown.clone(), reason: e.to_string() })?
                .with_command_slots(Arc::clone(&self.commands)),
        );
        info!(session = %session.id, provider = %sandbox.provider, workspace = %shown, "environment realized");
        slots.insert(session.id.clone(), Slot { hand: Arc::clone(&hand), last_used: Instant::now(), users: 1 });
        let change = (session.environment_state != EnvironmentState::Realized)
            .then(|| EnvironmentChange { state: EnvironmentState::Realized, host: Some(self.host.clone()) });
        drop(slots);
        let lease = Lease { envs: Arc::clone(self), session: session.id.clone(), acquired: Acquired { hand, change } };
        self.place_mounts(session, &lease.acquired.hand).await?;
        Ok(lease)
    }

    /// Places the session's mounts that its workspace does not hold yet: all of them at the
    /// first realization, those added since at a later acquisition (so a resource added
    /// between turns is there before the next turn runs). Outside the slots' lock: it reads
    /// the store and runs git. Each mount appears at its place whole or not at all; any
    /// failure names the resource and fails the acquisition, so no turn runs without its
    /// inputs (invariant 34).
    async fn place_mounts(&self, session: &Session, hand: &Hand) -> Result<(), EnvironmentError> {
        for r in &session.snapshot.resources {
            let (ResourceKind::File { mount_path, .. } | ResourceKind::Repository { mount_path, .. }) = &r.kind else {
                continue;
            };
            let failed = |reason: String| EnvironmentError::Mount {
                resource: r.id.to_string(),
                mount_path: mount_path.clone(),
                reason,
            };
            let rel = mounts::workspace_relative(mount_path).map_err(|e| failed(e.to_string()))?;
            let placed = hand.occupied(&rel).await;
            match &r.kind {
                // Placed or not, a file is made read-only to this Hand (a new Hand after a wake
                // knows nothing of earlier ones); something else at its place fails the turn.
                ResourceKind::File { file_id, .. } => {
                    if !placed {
                        self.place_file(hand, file_id, &rel).await.map_err(failed)?;
                        info!(session = %session.id, resource = %r.id, mount_path, "file mounted");
                    }
                    hand.protect(&rel).await.map_err(|e| failed(format!("cannot make it read-only: {e}")))?;
                }
                _ if placed => {}
                ResourceKind::Repository { url, checkout, authorization_token, .. } => {
                    let token = authorization_token.as_ref().map(|t| self.open_token(t)).transpose().map_err(failed)?;
                    let clone = |dest: PathBuf| async move {
                        let cloned = self.config.checkout.clone_into(&dest, url, checkout.as_ref(), token.as_ref());
                        cloned.await.map_err(|e| e.to_string())
                    };
                    let name = format!("{}-{}", session.id, r.id);
                    self.stage_and_adopt(hand, &rel, &name, clone).await.map_err(failed)?;
                    info!(session = %session.id, resource = %r.id, mount_path, "repository checked out");
                }
                ResourceKind::Workspace { .. } => {}
            }
        }
        for skill in &session.snapshot.agent.spec.skills {
            let Some(resolved) = &skill.resolved else { continue };
            let rel = mounts::skill_relative(&resolved.name);
            let failed = |reason: String| EnvironmentError::Mount {
                resource: format!("skill {} ({})", skill.skill_id, resolved.version_id),
                mount_path: rel.display().to_string(),
                reason,
            };
            if hand.occupied(&rel).await {
                continue;
            }
            let version = SkillVersionId::parse(&resolved.version_id).map_err(|e| failed(e.to_string()))?;
            let files = self.content.skill_files(&version).await.map_err(|e| failed(e.to_string()))?;
            if files.is_empty() {
                return Err(failed("the skill version no longer exists".into()));
            }
            let write = |dest: PathBuf| async move {
                tokio::task::spawn_blocking(move || write_skill(&dest, &files))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            };
            let name = format!("{}-{}", session.id, version);
            self.stage_and_adopt(hand, &rel, &name, write).await.map_err(failed)?;
            info!(session = %session.id, skill = %skill.skill_id, version = %version, "skill placed");
        }
        Ok(())
    }

    /// Writes an uploaded file at `rel`, checked against its recorded size and digest before
    /// it appears there.
    async fn place_file(&self, hand: &Hand, file_id: &str, rel: &Path) -> Result<(), String> {
        let id = FileId::parse(file_id).map_err(|e| e.to_string())?;
        let file = self.content.get_file(&id).await.map_err(|e| e.to_string())?;
        let mut writer = hand.place(rel).await.map_err(|e| e.to_string())?;
        let mut digest = Sha256::new();
        let mut size = 0u64;
        for seq in 0..file.meta.chunks {
            let bytes = self.content.file_chunk(&id, seq).await.map_err(|e| e.to_string())?;
            digest.update(&bytes);
            size += bytes.len() as u64;
            writer.write(bytes).await.map_err(|e| e.to_string())?;
        }
        if size != file.meta.size_bytes || hex::encode(digest.finalize()) != file.meta.sha256 {
            return Err(format!("the stored content of file {id} does not match its size and digest"));
        }
        writer.finish().await.map_err(|e| e.to_string())
    }

    /// Prepares the directory `name` in the staging directory (`prepare` gets its path, which
    /// does not exist yet) and moves it to `rel` in the workspace. Whatever fails, nothing is
    /// left in staging; if another acquisition placed the same mount meanwhile, that one
    /// stands.
    async fn stage_and_adopt<F, Fut>(&self, hand: &Hand, rel: &Path, name: &str, prepare: F) -> Result<(), String>
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let staging = self.staging_dir()?;
        let dest = staging.join(name);
        let placed = match prepare(dest.clone()).await {
            Ok(()) => hand.adopt(&staging, Path::new(name), rel).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if placed.is_err() {
            let _ = std::fs::remove_dir_all(&dest);
            if hand.occupied(rel).await {
                return Ok(());
            }
        }
        placed
    }

    /// The live environments of this host: how many are in use (a command or a turn holds
    /// them) and how many idle.
    pub async fn census(&self) -> (usize, usize) {
        let slots = self.slots.lock().await;
        let in_use = slots.values().filter(|s| s.users > 0).count();
        (in_use, slots.len() - in_use)
    }

    /// Hibernates every Hand idle longer than the configured time and records the state. The
    /// lock is held throughout, so no acquisition can slip between the recorded state and the
    /// Hand it describes.
    pub async fn hibernate_idle(&self, store: &Arc<dyn Store>) {
        let mut slots = self.slots.lock().await;
        let due: Vec<SessionId> = slots
            .iter()
            .filter(|(_, s)| s.users == 0 && s.last_used.elapsed() >= self.config.idle)
            .map(|(id, _)| id.clone())
            .collect();
        for session in due {
            if hibernate(&mut slots, &session, store.as_ref(), "idle").await {
                self.freed.notify_waiters();
            }
        }
    }

    /// The slots, locked, once `session` has a slot or there is room for a new one under
    /// `max_live` (idle Hands hibernated to make it). While every live Hand is in use, waits
    /// for one to become idle, up to `realize_wait`, then refuses with `Busy`: opening past
    /// the cap is what ran a burst of first tool calls out of file descriptors. A Hand being
    /// realized is in the slots (inserted under this lock) before the lock is released, so it
    /// counts too.
    async fn place_for(
        &self,
        session: &Session,
    ) -> Result<tokio::sync::MutexGuard<'_, HashMap<SessionId, Slot>>, EnvironmentError> {
        let max_live = self.max_live();
        let deadline = Instant::now() + self.config.realize_wait;
        let mut waited = false;
        loop {
            // Registered before the slots are looked at, so a slot freed right after the
            // look still wakes this wait.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let mut slots = self.slots.lock().await;
            if slots.contains_key(&session.id) || self.make_room(&mut slots, max_live).await {
                return Ok(slots);
            }
            if !waited {
                warn!(
                    session = %session.id,
                    live = slots.len(),
                    max_live,
                    "every live environment is in use; waiting for one to become idle (environments.max_live)"
                );
                waited = true;
            }
            drop(slots);
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(EnvironmentError::Busy { max_live, waited: self.config.realize_wait });
            }
        }
    }

    /// `max_live`; unset where nothing derived it from a limit (an embedding, a test): the most.
    fn max_live(&self) -> usize {
        self.config.max_live.unwrap_or_else(|| EnvironmentsConfig::live_for(u64::MAX)).max(1)
    }

    /// Before a new Hand joins `slots` (whose lock the caller holds): hibernates the least
    /// recently used idle Hands until there is room under `max_live`. False when there is no
    /// room: every Hand is in use (or a hibernation could not be recorded).
    async fn make_room(&self, slots: &mut HashMap<SessionId, Slot>, max_live: usize) -> bool {
        while slots.len() >= max_live {
            let lru = slots.iter().filter(|(_, s)| s.users == 0).min_by_key(|(_, s)| s.last_used).map(|(id, _)| id);
            let Some(lru) = lru.cloned() else { return false };
            if !hibernate(slots, &lru, self.content.as_ref(), "least recently used").await {
                return false;
            }
        }
        true
    }

    /// Releases a deleted session's environment on this host: stops its Hand and removes its
    /// own workspace (never a client's mounted directory). Irreversible.
    pub async fn release(&self, session: &Session) {
        if let Some(slot) = self.slots.lock().await.remove(&session.id) {
            self.freed.notify_waiters();
            slot.hand.release().await;
        }
        let (workspace, owned) = self.workspace_of(session);
        if owned {
            remove_workspace(&workspace);
        }
    }

    /// Removes workspaces under the root whose session no longer exists (deleted while this
    /// host was down, or on another host's request).
    pub async fn sweep_released(&self, store: &Arc<dyn Store>) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| SessionId::parse(n).ok()) else {
                continue;
            };
            if let Err(gateway_store::StoreError::NotFound { .. }) = store.get_session(&id).await {
                if self.slots.lock().await.remove(&id).is_some() {
                    self.freed.notify_waiters();
                }
                remove_workspace(&entry.path());
            }
        }
    }

    /// Runs hibernation and the release sweep until `stop`.
    pub async fn maintain(self: Arc<Self>, store: Arc<dyn Store>, stop: tokio_util::sync::CancellationToken) {
        self.sweep_released(&store).await;
        let every = (self.config.idle / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut sweeps = 0u32;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            self.hibernate_idle(&store).await;
            sweeps = sweeps.wrapping_add(1);
            if sweeps.is_multiple_of(10) {
                self.sweep_released(&store).await;
            }
        }
    }
}

/// Records `session`'s environment as hibernated and stops its Hand; false (the Hand kept)
/// when the state cannot be recorded.
async fn hibernate(slots: &mut HashMap<SessionId, Slot>, session: &SessionId, store: &dyn Store, why: &str) -> bool {
    match store.transition_environment(session, &[EnvironmentState::Realized], EnvironmentState::Hibernated).await {
        Ok(_) => {
            if let Some(slot) = slots.remove(session) {
                slot.hand.hibernate().await;
            }
            info!(%session, reason = why, "environment hibernated");
            true
        }
        Err(e) => {
            warn!(%session, error = %e, "could not record hibernation; keeping the Hand");
            false
        }
    }
}

/// Writes a skill version's files under `dir` (new), executables 0755, the rest 0644.
fn write_skill(dir: &Path, files: &[gateway_store::SkillFile]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    // The rule the version was accepted by (`skills::version_of`), checked again: a file
    // written here must stay under `dir`.
    mounts::check_tree(files.iter().map(|f| f.path.as_str())).map_err(std::io::Error::other)?;
    std::fs::DirBuilder::new().mode(0o755).create(dir)?;
    for f in files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent)?;
        }
        std::fs::write(&path, &f.bytes)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(if f.executable { 0o755 } else { 0o644 }))?;
    }
    Ok(())
}

fn remove_workspace(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Ok(()) => info!(workspace = %path.display(), "workspace released"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(workspace = %path.display(), error = %e, "could not remove workspace"),
    }
}
