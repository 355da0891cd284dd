//! The Coordinator: the one application service adapters call.
//!
//! It owns the rules that sit between a protocol request and the store: placement at session
//! creation, validation of published backends, input admission (through the store's
//! transaction), and subscriptions. Adapters translate wire formats; they never touch the
//! store directly.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use gateway_core::agent::{Agent, AgentOverrides, AgentSpec, BackendRef};
use gateway_core::environment::{Environment, EnvironmentSpec};
use gateway_core::event::{Event, EventPayload, NewEvent};
use gateway_core::placement::{LocalInputs, Offer, place};
use gateway_core::session::{
    ClientToolServer, MAX_CLIENT_TOOL_SERVERS, Resource, ResourceKind, Session, SessionSnapshot,
};
use gateway_core::vault::MAX_SESSION_VAULTS;
use gateway_core::{AgentId, EnvironmentId, EventId, Metadata, ResourceId, SessionId, Timestamp, VaultId};
use gateway_store::{
    AdmissionWrites, AgentFilter, EnvironmentFilter, EventFilter, Guard, NewSession, Page, PageRequest, SessionFilter,
    SessionPatch, Store,
};

use crate::environment::Environments;
use crate::error::{Result, RuntimeError};
use crate::load::{AdmissionLimits, Load};
use crate::previews::PreviewBus;
use crate::subscription::{self, Ahead, Delivery, SubscribeOptions};
use gateway_services::files::FilesConfig;
use gateway_services::metrics::Metrics;

mod mounts;
use mounts::{check_resources, check_skill_refs};

/// Which agent version a new session runs, and how it differs for this session.
#[derive(Debug, Clone)]
pub struct AgentSelection {
    pub id: AgentId,
    /// None: the latest version.
    pub version: Option<u32>,
    pub overrides: Option<AgentOverrides>,
}

/// A session creation request, already parsed from its protocol.
#[derive(Debug, Clone)]
pub struct CreateSession {
    pub agent: AgentSelection,
    pub environment_id: EnvironmentId,
    pub title: Option<String>,
    pub metadata: Metadata,
    pub resources: Vec<ResourceKind>,
    pub initial_inputs: Vec<NewEvent>,
    /// The session's vaults, highest priority first: each must exist and not be archived.
    pub vault_ids: Vec<VaultId>,
    /// Tool servers the client brings (an editor's MCP servers), secrets in clear: they are
    /// sealed before the session is stored.
    pub client_tool_servers: Vec<ClientToolServer>,
    /// Its spend ceiling, if it has one (only now can it get one).
    pub budget: Option<gateway_core::session::Budget>,
}

/// A request that will start a turn, admitted by [`Coordinator::check_new_turn`]: handed to
/// the admission it prepared, so the load is checked once, before the preparation.
#[must_use = "hand the pass to the admission, or it checks the load again"]
#[derive(Debug)]
pub struct TurnPass(());

#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// How often subscriptions read the store when no wake-up arrives.
    pub subscription_poll: Duration,
    /// The bounds beyond which work is refused as busy.
    pub admission: AdmissionLimits,
    /// What uploads may be.
    pub files: FilesConfig,
    /// A host not seen for this long is gone (`workers.host_ttl_secs`, the Workers' rule):
    /// only then may a session's environment there be released by request.
    pub host_ttl: Duration,
}

impl Default for CoordinatorOptions {
    fn default() -> Self {
        Self {
            subscription_poll: Duration::from_millis(500),
            admission: AdmissionLimits::default(),
            files: FilesConfig::default(),
            host_ttl: crate::worker::WorkerConfig::default().host_ttl,
        }
    }
}

#[derive(Clone)]
pub struct Coordinator {
    store: Arc<dyn Store>,
    previews: PreviewBus,
    offer: Arc<Offer>,
    options: CoordinatorOptions,
    environments: Option<Arc<Environments>>,
    executors: Option<Arc<crate::executors::Executors>>,
    metrics: Arc<Metrics>,
    load: Arc<Load>,
    handoff: Option<Arc<crate::worker::Handoff>>,
}

impl Coordinator {
    /// `metrics` counts open subscriptions and refusals (shared with the Workers for
    /// `/metrics`).
    pub fn new(
        store: Arc<dyn Store>,
        previews: PreviewBus,
        offer: Offer,
        options: CoordinatorOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        let load = Arc::new(Load::new(options.admission.clone(), Arc::clone(&metrics)));
        Self {
            store,
            previews,
            offer: Arc::new(offer),
            options,
            environments: None,
            executors: None,
            metrics,
            load,
            handoff: None,
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Reads the figures `/metrics` shows that cost a query (the outbox) or a lock (this
    /// process's environments), right before they are rendered: nobody scraping, nothing read.
    /// A figure that cannot be read keeps its last value.
    pub async fn refresh_metrics(&self) {
        if let Ok(stats) = self.store.outbox_stats().await {
            self.metrics.outbox(stats);
        }
        if let Some(envs) = &self.environments {
            let (in_use, idle) = envs.census().await;
            self.metrics.environments(in_use, idle);
        }
    }

    /// The admission bounds: each face takes a request permit here before it reads a body.
    pub fn load(&self) -> &Arc<Load> {
        &self.load
    }

    /// Refuses a request that will start a turn, as early as its face knows it will: before
    /// the reads that prepare its admission, which an overload would otherwise queue up
    /// behind. The pass goes to the admission, which then does not check again: refused
    /// after those reads, the request would be refused late, having spent what the refusal
    /// was to save (under load, a hundred milliseconds of reads and more).
    pub fn check_new_turn(&self) -> Result<TurnPass> {
        self.load.check_queue(self.store.as_ref())?;
        Ok(TurnPass(()))
    }

    /// Refuses inputs that would start a turn while too many turns wait to start, unless
    /// they come with a pass; answers and interrupts finish accepted work, so they always pass.
    fn check_load(&self, inputs: &[NewEvent], pass: Option<TurnPass>) -> Result<()> {
        if pass.is_none() && inputs.iter().any(|e| matches!(e.payload, EventPayload::UserMessage { .. })) {
            self.load.check_queue(self.store.as_ref())?;
        }
        Ok(())
    }

    /// Where the processes of `session`'s sandbox see its workspace, as its provider says
    /// ([`Environments::inner_root`]): a face showing the paths an agent names maps them back
    /// through this, never through a provider's name. `None` without a local environment.
    pub fn inner_root(&self, session: &Session) -> Option<std::path::PathBuf> {
        self.environments.as_ref()?.inner_root(session)
    }

    /// Lets session deletes release environments held on this host at once (other hosts
    /// release theirs in their periodic sweep).
    pub fn with_environments(mut self, environments: Arc<Environments>) -> Self {
        self.environments = Some(environments);
        self
    }

    /// Hands the turns this coordinator's admissions can claim to the process's Workers
    /// (`worker::Handoff`): the admission and the turn's start become one commit.
    pub fn with_handoff(mut self, handoff: Arc<crate::worker::Handoff>) -> Self {
        self.handoff = Some(handoff);
        self
    }

    /// Serves self-hosted environments' work queues through `executors`.
    pub fn with_executors(mut self, executors: Arc<crate::executors::Executors>) -> Self {
        self.executors = Some(executors);
        self
    }

    /// Self-hosted executors (the work queue faces call it); `Unavailable` in a coordinator
    /// assembled without them.
    pub fn executors(&self) -> Result<&Arc<crate::executors::Executors>> {
        self.executors
            .as_ref()
            .ok_or_else(|| crate::error::RuntimeError::Unavailable("self-hosted executors are not served here".into()))
    }

    /// What this deployment offers (providers, executors, remotes).
    pub fn offer(&self) -> &Offer {
        &self.offer
    }

    /// Health: whether the store answers.
    pub async fn ready(&self) -> Result<()> {
        Ok(self.store.ping().await?)
    }

    /// Waits until every write begun so far is durable (see `Store::sync`): after a write is
    /// refused for a conflict, what it conflicted with is then visible to reads.
    pub async fn sync(&self) -> Result<()> {
        Ok(self.store.sync().await?)
    }

    // ---- agents ----

    /// Rejects a published backend this gateway does not offer.
    pub fn check_backend(&self, backend: &BackendRef) -> Result<()> {
        match backend {
            BackendRef::Native => Ok(()),
            BackendRef::Acp { executor } if self.offer.acp_executors.contains(executor) => Ok(()),
            BackendRef::A2a { remote } if self.offer.a2a_remotes.contains(remote) => Ok(()),
            BackendRef::Acp { executor } => Err(RuntimeError::Invalid(format!(
                "backend \"acp:{executor}\": no ACP executor named {executor:?} is configured (configured: {})",
                list(&self.offer.acp_executors)
            ))),
            BackendRef::A2a { remote } => Err(RuntimeError::Invalid(format!(
                "backend \"a2a:{remote}\": no A2A remote named {remote:?} is configured (configured: {})",
                list(&self.offer.a2a_remotes)
            ))),
            BackendRef::Builtin { name } if self.offer.builtins.contains(name) => Ok(()),
            BackendRef::Builtin { name } => Err(RuntimeError::Invalid(format!(
                "backend \"builtin:{name}\": no built-in agent named {name:?} is enabled"
            ))),
        }
    }

    pub async fn create_agent(&self, spec: AgentSpec) -> Result<Agent> {
        self.check_backend(&spec.backend)?;
        check_skill_refs(&spec)?;
        Ok(self.store.create_agent(spec).await?)
    }

    pub async fn get_agent(&self, id: &AgentId, version: Option<u32>) -> Result<Agent> {
        Ok(self.store.get_agent(id, version).await?)
    }

    /// Stores `spec` as the version after `base`; `StaleVersion` if someone else got there first.
    pub async fn update_agent(&self, id: &AgentId, base: u32, spec: AgentSpec) -> Result<Agent> {
        self.check_backend(&spec.backend)?;
        check_skill_refs(&spec)?;
        Ok(self.store.update_agent(id, base, spec).await?)
    }

    pub async fn archive_agent(&self, id: &AgentId) -> Result<Agent> {
        Ok(self.store.archive_agent(id).await?)
    }

    pub async fn list_agents(&self, filter: &AgentFilter, page: &PageRequest) -> Result<Page<Agent>> {
        Ok(self.store.list_agents(filter, page).await?)
    }

    pub async fn list_agent_versions(&self, id: &AgentId, page: &PageRequest) -> Result<Page<Agent>> {
        Ok(self.store.list_agent_versions(id, page).await?)
    }

    // ---- environments ----

    pub async fn create_environment(&self, spec: EnvironmentSpec) -> Result<Environment> {
        Ok(self.store.create_environment(spec).await?)
    }

    pub async fn get_environment(&self, id: &EnvironmentId) -> Result<Environment> {
        Ok(self.store.get_environment(id).await?)
    }

    pub async fn update_environment(&self, id: &EnvironmentId, spec: EnvironmentSpec) -> Result<Environment> {
        Ok(self.store.update_environment(id, spec).await?)
    }

    pub async fn archive_environment(&self, id: &EnvironmentId) -> Result<Environment> {
        Ok(self.store.archive_environment(id).await?)
    }

    pub async fn delete_environment(&self, id: &EnvironmentId) -> Result<()> {
        Ok(self.store.delete_environment(id).await?)
    }

    pub async fn list_environments(&self, filter: &EnvironmentFilter, page: &PageRequest) -> Result<Page<Environment>> {
        Ok(self.store.list_environments(filter, page).await?)
    }

    // ---- sessions ----

    /// Creates a session: resolves the agent version, applies overrides, decides placement
    /// (rejecting what cannot be honoured, naming the rule), freezes the snapshot, and admits
    /// the initial inputs, all before answering.
    pub async fn create_session(&self, req: CreateSession) -> Result<(Session, Vec<Event>)> {
        self.create_session_with(req, SessionId::new(), AdmissionWrites::default(), None).await
    }

    /// [`create_session`](Self::create_session) with the id the session gets (so `writes` can
    /// name it) and adapter state committed in the same transaction as the session and its
    /// initial inputs (DESIGN §3): a conflicting document (`Guard::DocumentConflict`) or a
    /// refused input leaves none of it behind. With a `pass` from
    /// [`check_new_turn`](Self::check_new_turn), the load is not checked again.
    pub async fn create_session_with(
        &self,
        req: CreateSession,
        id: SessionId,
        mut writes: AdmissionWrites,
        pass: Option<TurnPass>,
    ) -> Result<(Session, Vec<Event>)> {
        self.check_load(&req.initial_inputs, pass)?;
        writes.trace = writes.trace.or_else(gateway_core::trace::current);
        let mut agent = self.store.get_agent(&req.agent.id, req.agent.version).await?;
        if let Some(o) = &req.agent.overrides {
            o.apply(&mut agent.spec);
        }
        self.check_backend(&agent.spec.backend)?;
        let environment = self.store.get_environment(&req.environment_id).await?;
        // Placement first: a combination that cannot exist at all is the clearest answer.
        let inputs = local_inputs(&agent.spec, &req.resources);
        let requirements = place(&agent.spec.backend, &environment.spec.config, &inputs, &self.offer)?;
        check_resources(&req.resources, self.allow_private_repositories())?;
        self.resolve_skills(&mut agent.spec, &req.resources).await?;
        self.check_vaults(&req.vault_ids).await?;
        check_client_tool_servers(&agent.spec, &requirements, &req.client_tool_servers)?;
        let mut req = req;
        let mut tool_servers = std::mem::take(&mut req.client_tool_servers);
        if let Some(envs) = &self.environments {
            tool_servers.iter_mut().flat_map(ClientToolServer::secrets_mut).for_each(|s| envs.seal_secret(s));
        }
        self.seal_tokens(req.resources.iter_mut());
        let mut resources = Vec::with_capacity(req.resources.len());
        for kind in req.resources {
            // A client workspace is opened and its identity recorded now, so that no later
            // realization can be pointed at another directory (invariant 19).
            let kind = crate::environment::check_resource(kind).map_err(|e| RuntimeError::Invalid(e.to_string()))?;
            // The store stamps the creation time from the database clock.
            resources.push(Resource { id: ResourceId::new(), kind, created_at: Timestamp(0) });
        }
        let new = NewSession {
            id,
            environment_id: req.environment_id,
            snapshot: SessionSnapshot {
                agent,
                requirements,
                resources,
                vault_ids: req.vault_ids,
                client_tool_servers: tool_servers,
            },
            title: req.title,
            metadata: req.metadata,
            budget: req.budget,
            initial_inputs: req.initial_inputs,
            writes,
        };
        let Some(reserved) = self.reserve_turn(&new.initial_inputs) else {
            return Ok(self.store.create_session(new).await?);
        };
        let (session, events, claim) =
            self.store.create_session_and_claim(new, &reserved.offer, reserved.terms).await?;
        self.hand_over(reserved, claim).await;
        Ok((session, events))
    }

    /// A session names at most [`MAX_SESSION_VAULTS`] distinct vaults, each existing and not
    /// archived when it is named (one archived or deleted later is reported at the turn).
    async fn check_vaults(&self, ids: &[VaultId]) -> Result<()> {
        if ids.len() > MAX_SESSION_VAULTS {
            return Err(RuntimeError::Invalid(format!("a session names at most {MAX_SESSION_VAULTS} vaults")));
        }
        if ids.iter().enumerate().any(|(i, id)| ids[..i].contains(id)) {
            return Err(RuntimeError::Invalid("vault_ids names a vault twice".into()));
        }
        for id in ids {
            if self.store.get_vault(id).await?.archived_at.is_some() {
                return Err(RuntimeError::Guard(Guard::VaultArchived(id.to_string())));
            }
        }
        Ok(())
    }

    pub async fn get_session(&self, id: &SessionId) -> Result<Session> {
        Ok(self.store.get_session(id).await?)
    }

    pub async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>> {
        Ok(self.store.list_sessions(filter, page).await?)
    }

    pub async fn update_session(&self, id: &SessionId, patch: SessionPatch) -> Result<Session> {
        Ok(self.store.update_session(id, patch).await?)
    }

    /// The snapshot a session would run with after a change of its agent's definition (tools,
    /// MCP servers) or its vaults: placement, the vaults and the client's tool servers are
    /// checked again, and a change its environment cannot honour is refused with the rule's
    /// error. The store applies it only while the session is idle.
    pub async fn redefine_session(
        &self,
        current: &Session,
        agent: Option<AgentSpec>,
        vault_ids: Option<Vec<VaultId>>,
    ) -> Result<SessionSnapshot> {
        let mut snapshot = current.snapshot.clone();
        if let Some(spec) = agent {
            self.check_backend(&spec.backend)?;
            let environment = self.store.get_environment(&current.environment_id).await?;
            let kinds: Vec<ResourceKind> = snapshot.resources.iter().map(|r| r.kind.clone()).collect();
            let requirements =
                place(&spec.backend, &environment.spec.config, &local_inputs(&spec, &kinds), &self.offer)?;
            check_client_tool_servers(&spec, &requirements, &snapshot.client_tool_servers)?;
            snapshot.agent.spec = spec;
            snapshot.requirements = requirements;
        }
        if let Some(ids) = vault_ids {
            self.check_vaults(&ids).await?;
            snapshot.vault_ids = ids;
        }
        Ok(snapshot)
    }

    pub async fn archive_session(&self, id: &SessionId) -> Result<Session> {
        Ok(self.store.archive_session(id).await?)
    }

    /// Deletes a session (refused while running) and releases its environment, irreversibly.
    pub async fn delete_session(&self, id: &SessionId) -> Result<()> {
        let session = self.store.get_session(id).await?;
        self.store.delete_session(id).await?;
        if let Some(envs) = &self.environments {
            envs.release(&session).await;
        }
        Ok(())
    }

    /// Gives up the environment of an idle session whose host is gone, by request (a client
    /// or an operator): its turns fail with `environment_lost` until then, since a session is
    /// never re-homed silently ([`crate::environment::release_lost`]). Refused while the host
    /// lives or the session runs (`Guard::EnvironmentNotLost`, `Guard::SessionRunning`).
    pub async fn release_lost_environment(&self, id: &SessionId) -> Result<Event> {
        Ok(crate::environment::release_lost(self.store.as_ref(), id, self.options.host_ttl).await?)
    }

    /// Replaces the agent of a session that has no history yet (an editor picking another
    /// agent before its first prompt): placement runs again for the new agent.
    pub async fn switch_agent(&self, session: &SessionId, agent: AgentSelection) -> Result<Session> {
        let current = self.store.get_session(session).await?;
        let mut chosen = self.store.get_agent(&agent.id, agent.version).await?;
        if let Some(o) = &agent.overrides {
            o.apply(&mut chosen.spec);
        }
        self.check_backend(&chosen.spec.backend)?;
        let environment = self.store.get_environment(&current.environment_id).await?;
        let kinds: Vec<ResourceKind> = current.snapshot.resources.iter().map(|r| r.kind.clone()).collect();
        self.resolve_skills(&mut chosen.spec, &kinds).await?;
        let inputs = local_inputs(&chosen.spec, &kinds);
        let requirements = place(&chosen.spec.backend, &environment.spec.config, &inputs, &self.offer)?;
        check_client_tool_servers(&chosen.spec, &requirements, &current.snapshot.client_tool_servers)?;
        let snapshot = SessionSnapshot {
            agent: chosen,
            requirements,
            resources: current.snapshot.resources.clone(),
            vault_ids: current.snapshot.vault_ids.clone(),
            client_tool_servers: current.snapshot.client_tool_servers.clone(),
        };
        Ok(self.store.replace_snapshot(session, snapshot).await?)
    }

    // ---- adapter state ----

    /// A session's bindings (facts its backend committed to find again after a restart).
    pub async fn bindings(&self, session: &SessionId) -> Result<std::collections::BTreeMap<String, String>> {
        Ok(self.store.bindings(session).await?)
    }

    /// Adapter-owned documents (compare-and-set on `version`).
    pub fn documents(&self) -> &dyn gateway_store::Documents {
        self.store.as_ref()
    }

    /// Webhook endpoints and the event feed that hands lifecycle events to them.
    pub fn webhooks(&self) -> &dyn gateway_store::Webhooks {
        self.store.as_ref()
    }

    /// The durable delivery outbox (webhooks, push notifications).
    pub fn feeds(&self) -> &dyn gateway_store::Feeds {
        self.store.as_ref()
    }

    pub fn outbox(&self) -> &dyn gateway_store::Outbox {
        self.store.as_ref()
    }

    /// Records how one delivery attempt on `channel` (`webhook`, `a2a_push`) ended, `took`
    /// after it began, in the outbox and in the metrics: the one place a delivery's outcome is
    /// settled, so every deliverer counts alike (an attempt refused before it was sent too).
    pub async fn settle_delivery(
        &self,
        channel: &'static str,
        id: &gateway_core::DeliveryId,
        took: Duration,
        settle: gateway_services::metrics::Settle<'_>,
    ) -> std::result::Result<(), gateway_store::StoreError> {
        use gateway_services::metrics::Settle;
        self.metrics.delivery(channel, &settle, took);
        match settle {
            Settle::Delivered => self.store.delivered(id).await,
            Settle::Retry { after, error } => self.store.retry_delivery(id, after, error).await,
            Settle::Failed { error } => self.store.fail_delivery(id, error).await,
        }
    }

    // ---- inputs ----

    /// Admits client inputs. Returns only after they are committed (invariant 4).
    pub async fn submit(&self, session: &SessionId, inputs: Vec<NewEvent>) -> Result<Vec<Event>> {
        self.submit_with(session, inputs, AdmissionWrites::default(), None).await
    }

    /// [`submit`](Self::submit) with adapter state (documents, bindings) that explains the
    /// inputs, committed in the same transaction (DESIGN §3): if the inputs are refused or a
    /// document conflicts, nothing is written and the adapter has nothing to undo. With a
    /// `pass` from [`check_new_turn`](Self::check_new_turn), the load is not checked again.
    pub async fn submit_with(
        &self,
        session: &SessionId,
        inputs: Vec<NewEvent>,
        mut writes: AdmissionWrites,
        pass: Option<TurnPass>,
    ) -> Result<Vec<Event>> {
        self.check_load(&inputs, pass)?;
        // The request's trace context travels with the run it may queue (see `gateway_core::trace`).
        writes.trace = writes.trace.or_else(gateway_core::trace::current);
        let Some(reserved) = self.reserve_turn(&inputs) else {
            return Ok(self.store.submit_inputs(session, inputs, writes).await?);
        };
        let (events, claim) =
            self.store.submit_and_claim(session, inputs, writes, &reserved.offer, reserved.terms).await?;
        self.hand_over(reserved, claim).await;
        Ok(events)
    }

    /// A turn slot of this process's Workers for inputs that may start a turn, if one is
    /// free and the Workers keep up with the queue (`Load::keeping_up`): the admission then
    /// claims its own run (`worker::Handoff`, ADR 0016).
    fn reserve_turn(&self, inputs: &[NewEvent]) -> Option<crate::worker::Reserved> {
        if inputs.is_empty() || !self.load.keeping_up(self.store.as_ref()) {
            return None;
        }
        self.handoff.as_ref()?.reserve()
    }

    /// Gives an admission's claim to the Workers its slot was reserved in; if they stopped
    /// meanwhile, the run goes back to the queue for whoever runs next.
    async fn hand_over(&self, reserved: crate::worker::Reserved, claim: Option<gateway_core::run::Claim>) {
        let Some(Err(fence)) = claim.map(|c| reserved.deliver(c)) else { return };
        if let Err(e) = self.store.release_run(&fence).await {
            tracing::warn!(error = %e, run = %fence.run_id, "could not release a claim nobody runs; its lease will expire");
        }
    }

    /// Starts the backend of an idle session before its first input (`Sessions::open_session`):
    /// an editor opening a session on an ACP agent shows the agent's modes and settings from
    /// its first answer, as connected directly. False if the session was not idle or had a run.
    pub async fn open_session(&self, session: &SessionId) -> Result<bool> {
        Ok(self.store.open_session(session).await?)
    }

    /// Interrupts whatever the session is doing.
    pub async fn interrupt(&self, session: &SessionId) -> Result<Vec<Event>> {
        self.submit(session, vec![NewEvent::new(EventPayload::UserInterrupt {})]).await
    }

    // ---- events ----

    pub async fn list_events(
        &self,
        session: &SessionId,
        filter: &EventFilter,
        page: &PageRequest,
    ) -> Result<Page<Event>> {
        self.store.get_session(session).await?;
        Ok(self.store.list_events(session, filter, page).await?)
    }

    pub async fn find_event(&self, session: &SessionId, id: &EventId) -> Result<Option<Event>> {
        Ok(self.store.find_event(session, id).await?)
    }

    /// Committed events after `options.after_seq`, then the live tail (and previews if asked).
    /// Takes the session as read (every subscriber reads it first, for its `last_seq` or its
    /// agent): the read is the proof that it exists, and is not made twice.
    pub fn subscribe(
        &self,
        session: &Session,
        options: SubscribeOptions,
    ) -> impl Stream<Item = Result<Delivery>> + Send + use<> {
        self.open_subscription(session.id.clone(), options, None)
    }

    /// Opens `session`'s watch before a write of this process to it (its creation, an
    /// admission), for [`subscribe_ahead`](Self::subscribe_ahead) once the write returned.
    pub fn watch_ahead(&self, session: &SessionId) -> Ahead {
        Ahead { session: session.clone(), watch: self.store.wakeups().watch_session(session) }
    }

    /// [`subscribe`](Self::subscribe) after a write the caller holds the events of (through
    /// `options.after_seq`), with the watch opened before it: no read of the store to learn
    /// what the caller already knows, and the next commit's events come from memory when it
    /// was this process's (`subscription::subscribe`).
    pub fn subscribe_ahead(
        &self,
        ahead: Ahead,
        options: SubscribeOptions,
    ) -> impl Stream<Item = Result<Delivery>> + Send + use<> {
        self.open_subscription(ahead.session, options, Some(ahead.watch))
    }

    fn open_subscription(
        &self,
        session: SessionId,
        mut options: SubscribeOptions,
        ahead: Option<tokio::sync::watch::Receiver<gateway_store::Tip>>,
    ) -> impl Stream<Item = Result<Delivery>> + Send + use<> {
        options.poll = options.poll.or(Some(self.options.subscription_poll));
        subscription::subscribe(
            Arc::clone(&self.store),
            &self.previews,
            session,
            options,
            Arc::clone(&self.metrics),
            ahead,
        )
    }
}

pub(super) fn local_inputs(agent: &AgentSpec, resources: &[ResourceKind]) -> LocalInputs {
    let mut inputs = LocalInputs { executable_skills: !agent.skills.is_empty(), ..LocalInputs::default() };
    for r in resources {
        match r {
            ResourceKind::File { .. } => inputs.files += 1,
            ResourceKind::Repository { .. } => inputs.repositories += 1,
            ResourceKind::Workspace { .. } => inputs.workspace = true,
        }
    }
    inputs
}

fn list(names: &std::collections::BTreeSet<String>) -> String {
    if names.is_empty() { "none".into() } else { names.iter().cloned().collect::<Vec<_>>().join(", ") }
}

/// Tool servers a client brings: at most [`MAX_CLIENT_TOOL_SERVERS`], named uniquely and apart
/// from the agent's own MCP servers (one namespace: a call names its server), for a backend
/// that uses them (the native loop, an ACP agent process); a command needs a sandbox of the
/// gateway's to run in (not a self-hosted environment's).
fn check_client_tool_servers(
    agent: &AgentSpec,
    requirements: &gateway_core::placement::Requirements,
    servers: &[ClientToolServer],
) -> Result<()> {
    if servers.is_empty() {
        return Ok(());
    }
    if servers.len() > MAX_CLIENT_TOOL_SERVERS {
        return Err(RuntimeError::Invalid(format!("at most {MAX_CLIENT_TOOL_SERVERS} MCP servers per session")));
    }
    if !matches!(agent.backend, BackendRef::Native | BackendRef::Acp { .. }) {
        return Err(RuntimeError::Invalid(format!(
            "the agent runs on backend {}, which does not take MCP servers from the client",
            agent.backend
        )));
    }
    for (i, s) in servers.iter().enumerate() {
        let name = s.name();
        if name.is_empty() || name.len() > 64 {
            return Err(RuntimeError::Invalid("an MCP server's name is 1 to 64 bytes".into()));
        }
        if servers[..i].iter().any(|o| o.name() == name) || agent.mcp_servers.iter().any(|m| m.name == name) {
            return Err(RuntimeError::Invalid(format!("MCP server name {name:?} is used twice")));
        }
        match s {
            ClientToolServer::Stdio { command, .. } if command.is_empty() => {
                return Err(RuntimeError::Invalid(format!("MCP server {name:?} needs a command")));
            }
            ClientToolServer::Stdio { .. }
                if requirements.tool_execution == gateway_core::placement::ToolExecution::External =>
            {
                return Err(RuntimeError::Invalid(format!(
                    "MCP server {name:?} is a command, and this session's tools run on a self-hosted environment"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}
