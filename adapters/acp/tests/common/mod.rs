//! A whole gateway core in one test process: a SQLite store, a Coordinator, Workers running
//! the ACP backend (against [`fake_agent`]) and the scripted native backend, local sandboxes,
//! and editors connected to the editor face over in-memory lines.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

pub mod fake_agent;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use gateway_acp::editor::{Editor, EditorHandler};
use gateway_acp::rpc::{Handler, Inbound, Peer, PeerOptions, Reply, RpcError};
use gateway_acp::{AcpContext, ExecutorConfig};
use gateway_core::agent::BackendRef;
use gateway_core::content::{ContentBlock, plain_text};
use gateway_core::environment::{EnvironmentConfig, Provisioning};
use gateway_core::event::{Event, EventKind, EventPayload, NewEvent};
use gateway_core::placement::Offer;
use gateway_core::session::{ResourceKind, Session};
use gateway_runtime::published::CONFIG_NAME_KEY;
use gateway_runtime::testing::ScriptedBackend;
use gateway_runtime::{
    AgentSelection, BackendRegistry, Coordinator, CoordinatorOptions, CreateSession, Delivery, Environments,
    EnvironmentsConfig, EventFilter, Order, PageRequest, PreviewBus, PublishedAgents, RetryPolicy, RuntimeError,
    SubscribeOptions, WorkerConfig, WorkerPool,
};
use gateway_sandbox::LocalProvider;
use gateway_store::Store;
use gateway_store::conformance::harness::SqliteHarness;
use gateway_store::conformance::{Harness, agent_spec, env_spec};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use fake_agent::{Caps, FakeConnector};

pub struct Options {
    pub caps: Caps,
    /// Backoff base of transient retries.
    pub retry_base: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self { caps: Caps::default(), retry_base: Duration::from_millis(20) }
    }
}

pub struct Rig {
    pub store: Arc<dyn Store>,
    pub coordinator: Coordinator,
    pub environments: Arc<Environments>,
    pub agents: PublishedAgents,
    pub fake: Arc<FakeConnector>,
    pub pool: Option<WorkerPool>,
    previews: PreviewBus,
    retry_base: Duration,
    /// Editors' project directories live here.
    pub projects: tempfile::TempDir,
    _data: tempfile::TempDir,
    _harness: SqliteHarness,
}

pub async fn rig(options: Options) -> Rig {
    let harness = SqliteHarness::new(true);
    let store = harness.fresh().await;
    let data = tempfile::tempdir().unwrap();
    let environments = Environments::new(
        EnvironmentsConfig {
            host: "h".into(),
            root: data.path().join("workspaces"),
            limits: Default::default(),
            idle: Duration::from_secs(3600),
        },
        vec![Arc::new(LocalProvider::new())],
    );
    let offer =
        Offer { providers: environments.offers(), acp_executors: ["fake".to_owned()].into(), ..Default::default() };
    let previews = PreviewBus::default();
    let coordinator = Coordinator::new(
        Arc::clone(&store),
        previews.clone(),
        offer,
        CoordinatorOptions { subscription_poll: Duration::from_millis(100) },
    )
    .with_environments(Arc::clone(&environments));

    let mut fake = agent_spec("fake");
    fake.backend = BackendRef::Acp { executor: "fake".into() };
    fake.metadata.insert(CONFIG_NAME_KEY.into(), "fake".into());
    let fake = coordinator.create_agent(fake).await.unwrap();
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
        agents: vec![("fake".into(), fake.id), ("scripted".into(), scripted.id)],
        default: Some("fake".into()),
        environment: Some(lazy.id),
        eager_environment: Some(eager.id),
    };
    let mut rig = Rig {
        store,
        coordinator,
        environments,
        agents,
        fake: FakeConnector::new(options.caps),
        pool: None,
        previews,
        retry_base: options.retry_base,
        projects: tempfile::tempdir().unwrap(),
        _data: data,
        _harness: harness,
    };
    rig.start_workers();
    rig
}

impl Rig {
    /// Starts Workers (after [`Rig::crash_workers`], as a restarted gateway would).
    pub fn start_workers(&mut self) {
        let mut backends = BackendRegistry::new();
        backends.register(BackendRef::Native, Arc::new(ScriptedBackend));
        let config = ExecutorConfig { turn_timeout: Duration::from_secs(30), ..Default::default() };
        let acp = gateway_acp::backend::AcpBackend::with_connector(
            "fake".into(),
            config,
            Arc::clone(&self.environments),
            self.fake.clone(),
        );
        backends.register(BackendRef::Acp { executor: "fake".into() }, Arc::new(acp));
        let config = WorkerConfig {
            instance: "t".into(),
            host: "h".into(),
            workers: 2,
            lease: Duration::from_millis(600),
            poll: Duration::from_millis(50),
            retry: RetryPolicy { max_retries: 2, base: self.retry_base, max: self.retry_base * 2 },
            shutdown_grace: Duration::from_millis(200),
            ..Default::default()
        };
        self.pool = Some(WorkerPool::start(Arc::clone(&self.store), backends, self.previews.clone(), config));
    }

    /// Kills the Workers without settling anything (a gateway crash).
    pub fn crash_workers(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.abort();
        }
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
            agent: AgentSelection { id, version: None, overrides: None },
            environment_id,
            title: None,
            metadata: Default::default(),
            resources: vec![ResourceKind::workspace(self.project(&format!("ws-{agent}")), None)],
            initial_inputs: vec![],
        };
        self.coordinator.create_session(req).await.unwrap().0
    }

    pub async fn say(&self, session: &Session, text: &str) -> u64 {
        let e = self.coordinator.submit(&session.id, vec![user(text)]).await.unwrap();
        e.last().unwrap().seq
    }

    pub async fn stream(&self, session: &Session, after: u64) -> BoxStream<'static, Result<Delivery, RuntimeError>> {
        self.coordinator
            .subscribe(&session.id, SubscribeOptions { after_seq: after, previews: false, poll: None })
            .await
            .unwrap()
            .boxed()
    }

    pub async fn events(&self, session: &Session) -> Vec<Event> {
        let page = PageRequest::first(1000, Order::Asc);
        self.coordinator.list_events(&session.id, &EventFilter::default(), &page).await.unwrap().items
    }

    /// The ACP context of an editor connection; `roots` as on the WebSocket endpoint.
    pub fn context(&self, roots: Option<Vec<std::path::PathBuf>>) -> AcpContext {
        AcpContext {
            coordinator: self.coordinator.clone(),
            agents: self.agents.clone(),
            auth: None,
            workspace_roots: roots,
            shutdown: CancellationToken::new(),
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
    /// The option kind permission requests are answered with.
    pub answer: Arc<Mutex<String>>,
}

struct EditorSide {
    updates: Arc<Mutex<Vec<Value>>>,
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
    let answer = Arc::new(Mutex::new("allow_once".to_owned()));
    let handler = Arc::new(EditorHandler(Editor::new(ctx, agent.map(str::to_owned))));
    let (to_gateway, gateway_in) = mpsc::channel(64);
    let (gateway, gateway_out, _) = Peer::start("editor", gateway_in, handler, PeerOptions::default());
    let (to_editor, editor_in) = mpsc::channel(64);
    let side = Arc::new(EditorSide { updates: Arc::clone(&updates), answer: Arc::clone(&answer) });
    let (peer, editor_out, _) = Peer::start("client", editor_in, side, PeerOptions::default());
    pipe(gateway_out, to_editor);
    pipe(editor_out, to_gateway);
    EditorClient { peer, gateway, updates, answer }
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
