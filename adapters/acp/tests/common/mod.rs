//! A whole gateway core in one test process: the shipped assembly (`TestGateway`) on a SQLite
//! store, Workers running the ACP backend (against [`fake_agent`]) and the scripted native
//! backend, local sandboxes, and editors connected to the editor face over in-memory lines.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

pub mod fake_agent;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use gateway_acp::backend::{AcpBackend, ProcessTable};
use gateway_acp::editor::{Editor, EditorHandler};
use gateway_acp::rpc::{Handler, Inbound, Peer, PeerOptions, Reply, RpcError};
use gateway_acp::{AcpContext, ExecutorConfig};
use gateway_core::agent::BackendRef;
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::environment::{EnvironmentConfig, Provisioning};
use gateway_core::event::{Event, EventKind, EventPayload, NewEvent};
use gateway_core::session::{ResourceKind, Session};
use gateway_face::FaceContext;
use gateway_runtime::testing::TestGateway;
use gateway_runtime::{
    AdmissionLimits, AgentSelection, CreateSession, Delivery, EnvironmentsConfig, RetryPolicy, RuntimeError,
    SubscribeOptions, WorkerConfig,
};
use gateway_services::PublishedAgents;
use gateway_services::auth::Authenticator;
use gateway_services::published::CONFIG_NAME_KEY;
use gateway_store::conformance::{agent_spec, env_spec};
use gateway_store::{EventFilter, Order, PageRequest};
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use fake_agent::{Caps, FakeConnector};

pub struct Options {
    pub caps: Caps,
    /// Backoff base of transient retries.
    pub retry_base: Duration,
    pub admission: AdmissionLimits,
    /// How long an unused environment stays realized.
    pub environment_idle: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            caps: Caps::default(),
            retry_base: Duration::from_millis(20),
            admission: AdmissionLimits::default(),
            environment_idle: Duration::from_secs(3600),
        }
    }
}

/// The gateway of one test (derefs to its [`TestGateway`]: `r.coordinator`, `r.store`,
/// `r.environments`, `r.start_workers()`, `r.crash_workers()`), the agents it publishes, and
/// the ACP backend's fake agents and process table.
pub struct Rig {
    gw: TestGateway,
    pub agents: PublishedAgents,
    pub fake: Arc<FakeConnector>,
    /// The ACP agent processes, shared by the backend and the editor face.
    pub processes: Arc<ProcessTable>,
    /// Editors' project directories live here.
    pub projects: tempfile::TempDir,
}

impl std::ops::Deref for Rig {
    type Target = TestGateway;
    fn deref(&self) -> &TestGateway {
        &self.gw
    }
}

impl std::ops::DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut TestGateway {
        &mut self.gw
    }
}

pub async fn rig(options: Options) -> Rig {
    let fake = FakeConnector::new(options.caps);
    let processes = Arc::new(ProcessTable::default());
    let (connector, table) = (fake.clone(), Arc::clone(&processes));
    let executor = ExecutorConfig { turn_timeout: Duration::from_secs(30), ..Default::default() };
    let workers = WorkerConfig {
        max_turns: 2,
        claim_batch: 16,
        lease: Duration::from_millis(600),
        poll: Duration::from_millis(50),
        retry: RetryPolicy { max_retries: 2, base: options.retry_base, max: options.retry_base * 2 },
        shutdown_grace: Duration::from_millis(200),
        ..Default::default()
    };
    let gw = TestGateway::builder()
        .scripted()
        .backend_with(BackendRef::Acp { executor: "fake".into() }, move |envs| {
            Arc::new(AcpBackend::with_connector("fake".into(), executor, Arc::clone(envs), table, connector))
        })
        .local_sandbox()
        .environments(EnvironmentsConfig { idle: options.environment_idle, ..Default::default() })
        .subscription_poll(Duration::from_millis(100))
        .instance("t")
        .admission(options.admission)
        .workers(workers)
        .build()
        .await;
    let coordinator = &gw.coordinator;

    let mut fake_agent = agent_spec("fake");
    fake_agent.backend = BackendRef::Acp { executor: "fake".into() };
    fake_agent.metadata.insert(CONFIG_NAME_KEY.into(), "fake".into());
    let fake_agent = coordinator.create_agent(fake_agent).await.unwrap();
    let mut scripted = agent_spec("scripted");
    scripted.metadata.insert(CONFIG_NAME_KEY.into(), "scripted".into());
    let scripted = coordinator.create_agent(scripted).await.unwrap();
    let lazy = coordinator.create_environment(env_spec("lazy")).await.unwrap();
    let mut eager = env_spec("eager");
    if let EnvironmentConfig::Cloud(c) = &mut eager.config {
        c.provisioning = Provisioning::Eager;
    }
    let eager = coordinator.create_environment(eager).await.unwrap();
    let agents = PublishedAgents {
        agents: vec![("fake".into(), fake_agent.id), ("scripted".into(), scripted.id)],
        default: Some("fake".into()),
        environment: Some(lazy.id),
        eager_environment: Some(eager.id),
        ..Default::default()
    };
    Rig { gw, agents, fake, processes, projects: tempfile::tempdir().unwrap() }
}

impl Rig {
    /// Stops the gateway as the binary does (Workers, backends, tasks, store).
    pub async fn stop(self) {
        self.gw.stop().await;
    }

    /// Stops the session's agent process and hibernates its environment (an environment
    /// idle: zero rig), so the next turn realizes it again, checking its directories.
    pub async fn put_to_sleep(&self, session: &str) {
        self.processes.close(&gateway_core::SessionId::parse(session).unwrap()).await;
        // The process's lease goes with the last of its tasks.
        for _ in 0..100 {
            if self.environments.census().await.0 == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.environments.hibernate_idle(&self.store).await;
        assert_eq!(self.environments.census().await, (0, 0), "the environment is hibernated");
    }

    /// A project directory for an editor.
    pub fn project(&self, name: &str) -> String {
        let dir = self.projects.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir.display().to_string()
    }

    /// A session of the fake ACP agent (or of `agent`), with a workspace, made directly.
    pub async fn session(&self, agent: &str) -> Session {
        let id = self.agents.get(agent).unwrap().clone();
        let a = self.coordinator.get_agent(&id, None).await.unwrap();
        let environment_id = self.agents.environment_for(&a.spec.backend).unwrap().clone();
        let req = CreateSession {
            budget: None,
            agent: AgentSelection { id, version: None, overrides: None },
            environment_id,
            title: None,
            metadata: Default::default(),
            resources: vec![ResourceKind::workspace(self.project(&format!("ws-{agent}")), None)],
            initial_inputs: vec![],
            vault_ids: Vec::new(),
            client_tool_servers: Vec::new(),
        };
        self.coordinator.create_session(req).await.unwrap().0
    }

    pub async fn say(&self, session: &Session, text: &str) -> u64 {
        let e = self.coordinator.submit(&session.id, vec![user(text)]).await.unwrap();
        e.last().unwrap().seq
    }

    pub async fn stream(&self, session: &Session, after: u64) -> BoxStream<'static, Result<Delivery, RuntimeError>> {
        self.coordinator.subscribe(session, SubscribeOptions { after_seq: after, previews: false, poll: None }).boxed()
    }

    pub async fn events(&self, session: &Session) -> Vec<Event> {
        let page = PageRequest::first(1000, Order::Asc);
        self.coordinator.list_events(&session.id, &EventFilter::default(), &page).await.unwrap().items
    }

    /// The ACP context of an editor connection; `roots` as on the WebSocket endpoint.
    pub fn context(&self, roots: Option<Vec<std::path::PathBuf>>) -> AcpContext {
        AcpContext {
            face: FaceContext {
                coordinator: self.coordinator.clone(),
                auth: Arc::new(Authenticator::new(Arc::clone(&self.store))),
                public_url: "http://127.0.0.1".into(),
                // Its own signal (a test may stop one editor face), which stopping the gateway sends too.
                shutdown: self.gw.shutdown.child_token(),
                tasks: self.gw.tasks.clone(),
                models: Arc::new(gateway_core::models::ModelCatalog::single("fake")),
            },
            agents: self.agents.clone(),
            workspace_roots: roots,
            processes: Arc::clone(&self.processes),
            sign_in: None,
            channels: Arc::default(),
        }
    }
}

pub fn user(text: &str) -> NewEvent {
    NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text(text)] })
}

/// Committed events until one matches `done` (inclusive), within `secs`.
pub async fn until(
    stream: impl Stream<Item = Result<Delivery, RuntimeError>>,
    secs: u64,
    done: impl Fn(&Event) -> bool,
) -> Vec<Event> {
    let mut out = Vec::new();
    let mut stream = std::pin::pin!(stream);
    let finished = tokio::time::timeout(Duration::from_secs(secs), async {
        while let Some(d) = stream.next().await {
            if let Delivery::Event(e) = d.unwrap() {
                let stop = done(&e);
                out.push(e);
                if stop {
                    return;
                }
            }
        }
    })
    .await;
    assert!(finished.is_ok(), "timed out; got {:?}", out.iter().map(|e| e.kind()).collect::<Vec<_>>());
    out
}

pub fn turn_ended(e: &Event) -> bool {
    e.kind() == EventKind::TurnEnded
}

pub fn texts(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::AgentMessage { content } => Some(plain_text(content)),
            _ => None,
        })
        .collect()
}

pub fn errors(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::SessionError { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// Waits until `cond` holds (at most `secs`).
pub async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "condition not reached in {secs}s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An editor on the editor face, connected over in-memory lines.
pub struct EditorClient {
    /// Our side: requests to the gateway.
    pub peer: Peer,
    /// The gateway's side (kept alive).
    gateway: Peer,
    pub updates: Arc<Mutex<Vec<Value>>>,
    /// The seq each update carried (`_meta` `gateway.seq`, sent for a relay's prompts).
    pub seqs: Arc<Mutex<Vec<Option<u64>>>>,
    /// The option kind permission requests are answered with.
    pub answer: Arc<Mutex<String>>,
}

struct EditorSide {
    updates: Arc<Mutex<Vec<Value>>>,
    seqs: Arc<Mutex<Vec<Option<u64>>>>,
    answer: Arc<Mutex<String>>,
}

impl Handler for EditorSide {
    fn request(&self, _peer: &Peer, method: &str, params: Value) -> Reply {
        let kind = self.answer.lock().unwrap().clone();
        match method {
            "session/request_permission" => Box::pin(async move {
                let option = params["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|o| o["kind"] == kind.as_str())
                    .map(|o| o["optionId"].clone());
                Ok(match option {
                    Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
                    None => json!({"outcome": {"outcome": "cancelled"}}),
                })
            }),
            other => {
                let e = RpcError::method_not_found(other);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn notification(&self, _peer: &Peer, method: &str, params: Value) {
        if method == "session/update" {
            self.updates.lock().unwrap().push(params["update"].clone());
            self.seqs.lock().unwrap().push(params["_meta"]["gateway.seq"].as_u64());
        }
    }
}

/// Moves frames from one peer's output into another's input.
fn pipe(mut from: mpsc::Receiver<gateway_acp::rpc::Frame>, to: mpsc::Sender<Inbound>) {
    tokio::spawn(async move {
        while let Some(frame) = from.recv().await {
            if to.send(Inbound::Line(frame.text().to_owned())).await.is_err() {
                return;
            }
        }
    });
}

pub fn connect(ctx: AcpContext) -> EditorClient {
    connect_as(ctx, None)
}

/// An editor connection whose new sessions get `agent` (`gateway acp --agent`).
pub fn connect_as(ctx: AcpContext, agent: Option<&str>) -> EditorClient {
    let updates = Arc::new(Mutex::new(Vec::new()));
    let seqs = Arc::new(Mutex::new(Vec::new()));
    let answer = Arc::new(Mutex::new("allow_once".to_owned()));
    let handler = Arc::new(EditorHandler(Editor::new(ctx, agent.map(str::to_owned))));
    let (to_gateway, gateway_in) = mpsc::channel(64);
    let (gateway, gateway_out, _) = Peer::start("editor", gateway_in, handler, PeerOptions::default());
    let (to_editor, editor_in) = mpsc::channel(64);
    let side =
        Arc::new(EditorSide { updates: Arc::clone(&updates), seqs: Arc::clone(&seqs), answer: Arc::clone(&answer) });
    let (peer, editor_out, _) = Peer::start("client", editor_in, side, PeerOptions::default());
    pipe(gateway_out, to_editor);
    pipe(editor_out, to_gateway);
    EditorClient { peer, gateway, updates, seqs, answer }
}

impl EditorClient {
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        tokio::time::timeout(Duration::from_secs(30), self.peer.request(method, params))
            .await
            .unwrap_or_else(|_| panic!("{method} did not answer in 30 s"))
    }

    pub async fn initialize(&self) {
        self.call("initialize", json!({"protocolVersion": 1})).await.unwrap();
    }

    pub async fn new_session(&self, cwd: &str) -> Result<String, RpcError> {
        let r = self.call("session/new", json!({"cwd": cwd, "mcpServers": []})).await?;
        Ok(r["sessionId"].as_str().unwrap().to_owned())
    }

    /// Sends a prompt; the answer arrives through the returned task.
    pub fn prompt(&self, session: &str, text: &str) -> tokio::task::JoinHandle<Result<Value, RpcError>> {
        let peer = self.peer.clone();
        let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
        tokio::spawn(async move { peer.request("session/prompt", params).await })
    }

    pub async fn cancel(&self, session: &str) {
        self.peer.notify("session/cancel", json!({"sessionId": session})).await;
    }

    /// The text of the agent message chunks received so far.
    pub fn text(&self) -> String {
        self.updates
            .lock()
            .unwrap()
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
            .collect()
    }

    pub fn gateway(&self) -> &Peer {
        &self.gateway
    }
}
