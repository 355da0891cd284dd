//! Session lifecycle on the editor face: new, load (with replay), resume, list, close, delete,
//! and the session's config options (the agent, a native session's model and permission preset,
//! an ACP agent's own settings).

use std::path::{Path, PathBuf};

use gateway_core::SessionId;
use gateway_core::agent::{AgentOverrides, BackendRef, PermissionPreset, ToolSpec};
use gateway_core::event::{EventKind, EventPayload};
use gateway_core::session::{ClientToolServer, MAX_CLIENT_TOOL_SERVERS, ResourceKind, Secret, Session};
use gateway_runtime::{AgentSelection, CreateSession, RuntimeError};
use gateway_store::{EventFilter, Keyset, Order, PageCursor, PageRequest, SessionFilter, SessionPatch};
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{info, warn};

use super::{Editor, Open, Projector, agent_name, opening, runtime_error, workspace_of};
use crate::names::{PENDING_SETTINGS_NS, PERMISSIONS_NS, SETTINGS_SENT_BINDING, seq_of};
use crate::rpc::{Peer, RpcError, params};

/// Sessions per `session/list` page.
const LIST_PAGE: u32 = 50;
/// The config option that picks the agent.
const AGENT_OPTION: &str = "agent";
/// The config option that picks a native session's permission preset.
const PERMISSIONS_OPTION: &str = "permissions";
/// The config option that picks the model a native session runs on.
const MODEL_OPTION: &str = "model";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewParams {
    cwd: String,
    #[serde(default)]
    mcp_servers: Vec<Value>,
    #[serde(default)]
    additional_directories: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadParams {
    session_id: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    additional_directories: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetOptionParams {
    session_id: String,
    config_id: String,
    value: Value,
}

/// The projector of `session`'s events for an editor at `cwd`: paths mapped back from the
/// sandbox, and the context window of the model that serves its agent.
pub(super) fn projector(ed: &Editor, cwd: impl Into<PathBuf>, session: &Session, show_user: bool) -> Projector {
    let window = ed.ctx.models.serving(&session.snapshot.agent.spec.model.id).context_window;
    Projector::new(cwd, show_user).with_inner_root(ed.ctx.coordinator.inner_root(session)).with_context_window(window)
}

fn session_id(raw: &str) -> Result<SessionId, RpcError> {
    SessionId::parse(raw).map_err(|_| crate::rpc::not_found(format!("session {} not found", crate::rpc::clip(raw, 80))))
}

/// Where a session's workspace may be on this connection: any directory on stdio (the
/// editor started the gateway with its user's rights); on network transports only under one
/// of `[acp] workspace_roots`, compared after resolving symlinks and `..`. Returns the
/// resolved path (what was checked is what is mounted: the Coordinator opens it without
/// following symlinks and records which directory it is) and, on network transports, the
/// root it lies under (every realization opens it beneath that root).
pub(super) fn allowed_cwd(ed: &Editor, cwd: &str) -> Result<(String, Option<String>), RpcError> {
    allowed_dir(ed, "`cwd`", cwd)
}

/// [`allowed_cwd`] for any directory an editor names (`what` it is, for the error).
fn allowed_dir(ed: &Editor, what: &str, cwd: &str) -> Result<(String, Option<String>), RpcError> {
    if !Path::new(cwd).is_absolute() {
        return Err(RpcError::invalid_params(format!("{what} must be an absolute path, not {cwd:?}")));
    }
    let not_a_dir = || RpcError::invalid_params(format!("{what} {cwd:?} is not a directory on the gateway's host"));
    let Some(roots) = &ed.ctx.workspace_roots else {
        return match std::fs::canonicalize(cwd) {
            Ok(real) if real.is_dir() => Ok((real.display().to_string(), None)),
            _ => Err(not_a_dir()),
        };
    };
    // The roots are checked first, so a network client learns nothing about paths outside.
    let real = std::fs::canonicalize(cwd).ok();
    match real.as_deref().and_then(|real| root_of(real, roots).map(|root| (real, root))) {
        Some((real, root)) if real.is_dir() => Ok((real.display().to_string(), Some(root.display().to_string()))),
        Some(_) => Err(not_a_dir()),
        None if roots.is_empty() => Err(RpcError::invalid_params(
            "this endpoint opens no workspace: the gateway's `[acp] workspace_roots` is empty (configure the \
             directories network editors may use)",
        )),
        None => Err(RpcError::invalid_params(format!(
            "{what} {cwd:?} is not under one of the gateway's `[acp] workspace_roots`"
        ))),
    }
}

/// The first of the roots (themselves resolved) that a resolved path lies in.
fn root_of(real: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    roots.iter().filter_map(|r| std::fs::canonicalize(r).ok()).find(|root| real.starts_with(root))
}

/// Whether a resolved path lies in one of the roots (themselves resolved).
fn under_roots(real: &Path, roots: &[PathBuf]) -> bool {
    root_of(real, roots).is_some()
}

pub(super) async fn new_session(ed: &Editor, peer: &Peer, raw: Value) -> Result<Value, RpcError> {
    let mut p: NewParams = params(raw)?;
    let (cwd, root) = allowed_cwd(ed, &p.cwd)?;
    p.cwd = cwd;
    let additional = additional_dirs(ed, &p.additional_directories)?;
    let (name, agent_id) = ed.default_agent()?;
    let agent = ed.ctx.coordinator.get_agent(&agent_id, None).await.map_err(runtime_error)?;
    let backend = agent.spec.backend.clone();
    ed.require_auth(&backend)?;
    let tool_servers = tool_servers(&name, &backend, &p.mcp_servers)?;
    let environment_id = ed
        .ctx
        .agents
        .environment_for(&backend)
        .cloned()
        .ok_or_else(|| RpcError::internal("no default environment is published for editors"))?;
    let request = CreateSession {
        budget: None,
        agent: AgentSelection { id: agent_id, version: None, overrides: overrides_for(&agent.spec) },
        environment_id,
        title: None,
        metadata: Default::default(),
        // The Coordinator checks the directories apart and none a system directory
        // (`gateway_core::mounts::check_extra_roots`), and records which each one is.
        resources: vec![ResourceKind::workspace_with(p.cwd.clone(), root, additional)],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
        // The editor's MCP servers are kept with the session (their secret values sealed): the
        // native loop calls them, an ACP agent process gets them.
        client_tool_servers: tool_servers,
    };
    let (session, _) = ed.ctx.coordinator.create_session(request).await.map_err(runtime_error)?;
    info!(session = %session.id, agent = %name, cwd = %p.cwd, "ACP session created");
    // An ACP agent's process starts now, so the answer has its modes and settings. One that
    // cannot start fails the request, and the session goes: the editor never learnt its id.
    if let Err(e) = opening::start_agent(ed, &session).await {
        if let Err(d) = ed.ctx.coordinator.delete_session(&session.id).await {
            warn!(session = %session.id, error = %d, "could not delete the session its agent could not open");
        }
        return Err(e);
    }
    carry_servers(ed, peer, &session);
    let mut projector = projector(ed, &p.cwd, &session, true);
    ed.remember(session.id.clone(), p.cwd);
    let mut result = opening_answer(ed, &session, &mut projector, false).await?;
    result["sessionId"] = json!(session.id.to_string());
    Ok(result)
}

/// The answer that opens a session on the editor (`new`, `load`, `resume`): the agent's modes
/// and the session's config options (the gateway's, then an ACP agent's own), its commands
/// following the answer.
async fn opening_answer(
    ed: &Editor,
    session: &Session,
    projector: &mut Projector,
    replayed: bool,
) -> Result<Value, RpcError> {
    let agent = opening::agent_state(ed, session, projector, replayed).await?;
    let mut result = json!({});
    if let Some(modes) = agent.modes {
        result["modes"] = modes;
    }
    let mut options = config_options(ed, session).await.and_then(|o| o.as_array().cloned()).unwrap_or_default();
    options.extend(agent.settings.as_ref().and_then(Value::as_array).into_iter().flatten().cloned());
    if !options.is_empty() {
        result["configOptions"] = Value::Array(options);
    }
    // A load's replay showed the commands in their place already.
    if !replayed {
        opening::send_commands_after(session, agent.commands);
    }
    Ok(result)
}

/// Most additional directories a session takes (`gateway_core::mounts::MAX_EXTRA_ROOTS`).
const MAX_ADDITIONAL: usize = gateway_core::mounts::MAX_EXTRA_ROOTS;

/// The editor's `additionalDirectories`, each checked like `cwd` (absolute, an existing
/// directory, resolved; under the roots on network transports), as `(path, root)`.
fn additional_dirs(ed: &Editor, dirs: &[String]) -> Result<Vec<(String, Option<String>)>, RpcError> {
    if dirs.len() > MAX_ADDITIONAL {
        return Err(RpcError::invalid_params(format!("at most {MAX_ADDITIONAL} `additionalDirectories`")));
    }
    dirs.iter().map(|d| allowed_dir(ed, "additional directory", d)).collect()
}

/// The additional directories a session was created with.
pub(super) fn additional_of(session: &Session) -> Vec<String> {
    session
        .snapshot
        .resources
        .iter()
        .find_map(|r| match &r.kind {
            ResourceKind::Workspace { additional, .. } => Some(additional.iter().map(|e| e.path.clone()).collect()),
            _ => None,
        })
        .unwrap_or_default()
}

/// A `session/load` or `session/resume` that names additional directories must name the
/// session's own (its sandbox was made with them); naming none keeps them.
fn same_additional(ed: &Editor, session: &Session, asked: &[String]) -> Result<(), RpcError> {
    if asked.is_empty() {
        return Ok(());
    }
    let asked: Vec<String> = additional_dirs(ed, asked)?.into_iter().map(|(path, _)| path).collect();
    let own = additional_of(session);
    if asked != own {
        return Err(RpcError::invalid_params(format!(
            "`additionalDirectories` of session {} are fixed when it is created: {own:?}",
            session.id
        )));
    }
    Ok(())
}

/// A session with MCP servers its editor runs (`type: "acp"`) is reached through this
/// connection while it has the session open ([`super::EditorChannels`]).
fn carry_servers(ed: &Editor, peer: &Peer, session: &Session) {
    if session.snapshot.client_tool_servers.iter().any(|s| matches!(s, ClientToolServer::OnClient { .. })) {
        ed.ctx.channels.attach(session.id.as_str(), ed.channel_id, peer);
    }
}

/// Editors cannot answer custom tools: a native agent's are removed for editor sessions.
fn overrides_for(spec: &gateway_core::agent::AgentSpec) -> Option<AgentOverrides> {
    let has_custom = spec.tools.iter().any(|t| matches!(t, ToolSpec::Custom { .. }));
    (spec.backend == BackendRef::Native && has_custom).then(|| AgentOverrides {
        tools: Some(spec.tools.iter().filter(|t| !matches!(t, ToolSpec::Custom { .. })).cloned().collect()),
        ..Default::default()
    })
}

/// The editor's MCP servers (stdio and http; `mcpCapabilities.sse` is false), for agents that
/// take them: the native loop and ACP agent processes. Others refuse them by name.
fn tool_servers(name: &str, backend: &BackendRef, servers: &[Value]) -> Result<Vec<ClientToolServer>, RpcError> {
    if servers.is_empty() {
        return Ok(Vec::new());
    }
    if servers.len() > MAX_CLIENT_TOOL_SERVERS {
        return Err(RpcError::invalid_params(format!("at most {MAX_CLIENT_TOOL_SERVERS} MCP servers per session")));
    }
    if !matches!(backend, BackendRef::Native | BackendRef::Acp { .. }) {
        return Err(RpcError::invalid_params(format!(
            "agent {name:?} runs on backend {backend}, which does not take MCP servers from the editor; \
             pass `mcpServers: []` or pick another agent"
        )));
    }
    let servers: Vec<ClientToolServer> = servers.iter().map(tool_server).collect::<Result<_, _>>()?;
    if let (BackendRef::Acp { .. }, Some(s)) =
        (backend, servers.iter().find(|s| matches!(s, ClientToolServer::OnClient { .. })))
    {
        return Err(RpcError::invalid_params(format!(
            "agent {name:?} runs on backend {backend}, which cannot reach the MCP server {:?} the editor runs \
             itself; pass it as a stdio or http server, or pick a native agent",
            s.name()
        )));
    }
    Ok(servers)
}

/// One `McpServer` of ACP's schema.
fn tool_server(v: &Value) -> Result<ClientToolServer, RpcError> {
    #[derive(Deserialize)]
    struct Pair {
        name: String,
        value: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Server {
        #[serde(rename = "type")]
        kind: Option<String>,
        name: String,
        command: Option<String>,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: Vec<Pair>,
        url: Option<String>,
        #[serde(default)]
        headers: Vec<Pair>,
        server_id: Option<String>,
    }
    let s: Server = serde_json::from_value(v.clone())
        .map_err(|e| RpcError::invalid_params(format!("an MCP server is malformed: {e}")))?;
    let pairs = |p: Vec<Pair>| p.into_iter().map(|p| (p.name, Secret(p.value))).collect();
    match (s.kind.as_deref(), s.command, s.url) {
        (None | Some("stdio"), Some(command), _) => {
            Ok(ClientToolServer::Stdio { name: s.name, command, args: s.args, env: pairs(s.env) })
        }
        (Some("http"), _, Some(url)) => Ok(ClientToolServer::Http { name: s.name, url, headers: pairs(s.headers) }),
        // A server the editor runs and carries over this connection (ACP's MCP-over-ACP).
        (Some("acp"), ..) => match s.server_id.filter(|id| !id.is_empty() && id.len() <= 200) {
            Some(server_id) => Ok(ClientToolServer::OnClient { name: s.name, server_id }),
            None => Err(RpcError::invalid_params("an `acp` MCP server needs a `serverId` (at most 200 bytes)")),
        },
        (Some("sse"), ..) => {
            Err(RpcError::invalid_params("SSE MCP servers are not supported (mcpCapabilities.sse is false)"))
        }
        _ => Err(RpcError::invalid_params("an MCP server needs `name` and `command` (stdio) or `url` (http)")),
    }
}

/// `session/load` (replays the committed history, then answers) and `session/resume` (no
/// replay). Either opens the session on this connection.
pub(super) async fn load(ed: &Editor, peer: &Peer, raw: Value, replay: bool) -> Result<Value, RpcError> {
    let p: LoadParams = params(raw)?;
    let id = session_id(&p.session_id)?;
    let session = ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
    let cwd = loadable_workspace(ed, &session, p.cwd.as_deref())?;
    same_additional(ed, &session, &p.additional_directories)?;
    // A load replays the history; a resume only reads it for what an ACP agent last said
    // about its modes, settings and commands (both answer with them, as the agent would).
    let mut projector = projector(ed, &cwd, &session, true);
    if replay {
        let sid = id.to_string();
        project_history(ed, &id, false, &mut projector, |update| {
            peer.notify("session/update", json!({"sessionId": sid, "update": update}))
        })
        .await?;
    }
    if session.title.is_some() {
        peer.notify("session/update", json!({"sessionId": id.to_string(), "update": super::session_info(&session)}))
            .await;
    }
    carry_servers(ed, peer, &session);
    ed.remember(id, cwd);
    opening_answer(ed, &session, &mut projector, replay).await
}

/// Projects a session's committed history in order, handing each update to `send`; with
/// `reports_only`, only the agent's reports (what its modes and settings are now).
pub(super) async fn project_history<F, Fut>(
    ed: &Editor,
    id: &SessionId,
    reports_only: bool,
    projector: &mut Projector,
    send: F,
) -> Result<(), RpcError>
where
    F: Fn(Value) -> Fut,
    Fut: std::future::Future,
{
    let kinds = if reports_only { vec![EventKind::AgentReport] } else { Vec::new() };
    let filter = EventFilter { kinds, ..Default::default() };
    let mut page = PageRequest::first(1000, Order::Asc);
    loop {
        let batch = ed.ctx.coordinator.list_events(id, &filter, &page).await.map_err(runtime_error)?;
        for e in &batch.items {
            for update in projector.event(e) {
                send(update).await;
            }
        }
        match batch.next {
            Some(c) => page.cursor = Some(c),
            None => return Ok(()),
        }
    }
}

/// The directory a `session/load` or `session/resume` opens the session in: its own editor
/// workspace, which must be the `cwd` the editor names (when it names one) and, on network
/// transports, lie under the roots. A session without one (every session of the Managed
/// Agents and A2A faces) is refused on every transport: its tools run in a workspace of the
/// gateway's own, not in the editor's project, so naming a project directory would show the
/// editor paths that are not where the agent works (and, over the network, open a workspace
/// outside the roots). All refusals are `-32602`, like `session/new`'s.
fn loadable_workspace(ed: &Editor, session: &Session, asked: Option<&str>) -> Result<String, RpcError> {
    let Some(own) = workspace_of(session) else {
        return Err(RpcError::invalid_params(format!(
            "session {} has no editor workspace (it was not created by an editor), so it cannot be opened here; \
             use session/new",
            session.id
        )));
    };
    if ed.ctx.workspace_roots.is_some() {
        // The session's own workspace (what the connection would reach) first, so a network
        // client learns nothing about a session outside the roots.
        allowed_cwd(ed, own)?;
    }
    let Some(asked) = asked else { return Ok(own.to_owned()) };
    // Workspaces are recorded resolved; so is what the editor names (checked against the
    // roots like a new session's `cwd` over the network).
    let asked_real = match ed.ctx.workspace_roots {
        Some(_) => allowed_cwd(ed, asked)?.0,
        None => std::fs::canonicalize(asked).map(|r| r.display().to_string()).unwrap_or_else(|_| asked.to_owned()),
    };
    if asked_real != own {
        return Err(RpcError::invalid_params(format!(
            "`cwd` {:?} is not the workspace of session {} ({own:?}); an editor opens a session in its own workspace",
            crate::rpc::clip(asked, 200),
            session.id
        )));
    }
    Ok(own.to_owned())
}

pub(super) async fn list(ed: &Editor, raw: Value) -> Result<Value, RpcError> {
    let p: ListParams = if raw.is_null() { ListParams::default() } else { params(raw)? };
    let cursor = p.cursor.as_deref().map(decode_cursor).transpose()?;
    let page = PageRequest { limit: LIST_PAGE, order: Order::Desc, cursor };
    let found = ed.ctx.coordinator.list_sessions(&SessionFilter::default(), &page).await.map_err(runtime_error)?;
    let sessions: Vec<Value> = found
        .items
        .iter()
        .filter_map(|s| {
            let cwd = workspace_of(s)?;
            // Workspaces are recorded resolved; so is the filter.
            let want = p
                .cwd
                .as_deref()
                .map(|w| std::fs::canonicalize(w).map(|r| r.display().to_string()).unwrap_or_else(|_| w.to_owned()));
            if want.is_some_and(|want| want != cwd) {
                return None;
            }
            // A network editor sees only sessions it could open.
            if let Some(roots) = &ed.ctx.workspace_roots
                && !std::fs::canonicalize(cwd).is_ok_and(|real| under_roots(&real, roots))
            {
                return None;
            }
            let mut v = json!({"sessionId": s.id.to_string(), "cwd": cwd, "updatedAt": s.updated_at.to_rfc3339()});
            if let Some(t) = &s.title {
                v["title"] = json!(t);
            }
            let additional = additional_of(s);
            if !additional.is_empty() {
                v["additionalDirectories"] = json!(additional);
            }
            Some(v)
        })
        .collect();
    let mut result = json!({"sessions": sessions});
    if let Some(next) = found.next {
        result["nextCursor"] = json!(encode_cursor(&next));
    }
    Ok(result)
}

fn encode_cursor(c: &PageCursor) -> String {
    format!("{}.{}", c.key.at, c.key.id)
}

fn decode_cursor(raw: &str) -> Result<PageCursor, RpcError> {
    let bad = || RpcError::invalid_params("`cursor` is not one this gateway returned");
    let (at, id) = raw.split_once('.').ok_or_else(bad)?;
    let at: i64 = at.parse().map_err(|_| bad())?;
    if id.is_empty() || id.len() > 64 {
        return Err(bad());
    }
    Ok(PageCursor { key: Keyset { at, id: id.to_owned() }, backward: false })
}

/// `session/close`: its prompt is cancelled (by the caller, in wire order), the session is
/// no longer open here, and an ACP agent process serving it is stopped once the interrupted
/// turn has ended (at most [`crate::backend::CLOSE_WAIT`]), so the turn ends `cancelled`
/// rather than failing as a crash.
pub(super) async fn close(ed: &Editor, open: Option<std::sync::Arc<Open>>, raw_id: &str) -> Result<Value, RpcError> {
    let id = session_id(raw_id)?;
    ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
    if open.is_some_and(|o| o.prompt.lock().unwrap_or_else(|p| p.into_inner()).is_some()) {
        // Interrupt right away: the prompt task's own interrupt may not run before it stops.
        let _ = ed.ctx.coordinator.interrupt(&id).await;
    }
    ed.ctx.processes.close_after_turn(&id, crate::backend::CLOSE_WAIT).await;
    Ok(json!({}))
}

/// `session/delete`: a session an editor opened (in its own workspace, under the roots on a
/// network transport), deleted through the core like the Managed Agents delete: its
/// environment released, its agent process stopped. A running turn is interrupted first; the
/// delete waits for it to end (at most [`DELETE_WAIT`]).
pub(super) async fn delete(ed: &Editor, open: Option<std::sync::Arc<Open>>, raw_id: &str) -> Result<Value, RpcError> {
    let id = session_id(raw_id)?;
    let coordinator = &ed.ctx.coordinator;
    let session = coordinator.get_session(&id).await.map_err(runtime_error)?;
    loadable_workspace(ed, &session, None)?;
    drop(open);
    let deadline = tokio::time::Instant::now() + DELETE_WAIT;
    let mut interrupted = false;
    loop {
        match coordinator.delete_session(&id).await {
            Ok(()) => break,
            Err(RuntimeError::Guard(_)) if tokio::time::Instant::now() < deadline => {
                if !interrupted {
                    interrupted = true;
                    let _ = coordinator.interrupt(&id).await;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => return Err(runtime_error(e)),
        }
    }
    ed.ctx.processes.close_after_turn(&id, crate::backend::CLOSE_WAIT).await;
    info!(session = %id, "ACP session deleted");
    Ok(json!({}))
}

/// How long `session/delete` waits for an interrupted turn to end.
const DELETE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `session/set_mode`: only an ACP agent has modes; it decides ([`forward_setting`]).
pub(super) async fn set_mode(ed: &Editor, raw: Value) -> Result<Value, RpcError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct SetMode {
        session_id: String,
        mode_id: String,
    }
    let p: SetMode = params(raw)?;
    ed.open(&p.session_id)?;
    let session = ed.ctx.coordinator.get_session(&session_id(&p.session_id)?).await.map_err(runtime_error)?;
    if !matches!(session.snapshot.agent.spec.backend, BackendRef::Acp { .. }) {
        return Err(RpcError::invalid_params("this session's agent has no modes (see its `permissions` option)"));
    }
    forward_setting(ed, &session, "session/set_mode", json!({"modeId": p.mode_id})).await
}

/// A setting the editor changes on an ACP agent (`session/set_mode`, `session/set_config_option`
/// of an option the agent offers) goes to the agent (ADR 0028): at once when its process runs
/// in this gateway process, with the agent's answer (or error) passed back; otherwise it is
/// kept and sent before the session's next prompt (`backend::apply_pending_settings`), and the
/// editor is answered with the settings as they will be.
async fn forward_setting(ed: &Editor, session: &Session, method: &str, params: Value) -> Result<Value, RpcError> {
    if serde_json::to_vec(&params).map_or(usize::MAX, |b| b.len()) > MAX_SETTING_BYTES {
        return Err(RpcError::invalid_params(format!("a setting is at most {MAX_SETTING_BYTES} bytes of JSON")));
    }
    if let Some(process) = ed.ctx.processes.get(&session.id).await.filter(|p| p.alive()) {
        let mut sent = params.clone();
        sent["sessionId"] = json!(process.agent_session);
        info!(session = %session.id, method, "a setting sent to the agent");
        let answer = tokio::time::timeout(SETTING_WAIT, process.peer.request(method, sent))
            .await
            .map_err(|_| RpcError::internal(format!("the agent did not answer {method} within {SETTING_WAIT:?}")))??;
        // What the agent accepted is kept as its report by the next run (the log has no
        // writer between turns), so a later load shows the setting.
        keep_setting(ed, session, method, params, Some(&answer)).await?;
        return Ok(answer);
    }
    keep_setting(ed, session, method, params.clone(), None).await?;
    info!(session = %session.id, method, "a setting kept for the agent's next prompt");
    if method != "session/set_config_option" {
        return Ok(json!({}));
    }
    // The settings as the agent last reported them, with this change.
    let mut projector = Projector::new("/", false);
    project_history(ed, &session.id, true, &mut projector, |_| async {}).await?;
    let mut options = projector.agent_state().settings.as_ref().and_then(Value::as_array).cloned().unwrap_or_default();
    for o in &mut options {
        if o.get("id") == params.get("configId") {
            o["currentValue"] = params["value"].clone();
        }
    }
    Ok(json!({"configOptions": options}))
}

/// Adds a setting to the session's kept settings (`names::PENDING_SETTINGS_NS`): one to send
/// before the next prompt, or, with the agent's `answer`, one it accepted already, whose report
/// the next run keeps.
async fn keep_setting(
    ed: &Editor,
    session: &Session,
    method: &str,
    params: Value,
    answer: Option<&Value>,
) -> Result<(), RpcError> {
    let documents = ed.ctx.coordinator.documents();
    let current = documents
        .get_document(PENDING_SETTINGS_NS, session.id.as_str())
        .await
        .map_err(|e| RpcError::internal(format!("cannot keep the setting for the agent: {e}")))?;
    let (mut requests, version) = match current {
        Some(doc) => {
            (doc.body.get("requests").and_then(Value::as_array).cloned().unwrap_or_default(), Some(doc.version))
        }
        None => (Vec::new(), None),
    };
    // Those the agent was sent already are dropped (the backend records the last it sent).
    let bindings = ed.ctx.coordinator.bindings(&session.id).await.map_err(runtime_error)?;
    let sent = seq_of(&bindings, SETTINGS_SENT_BINDING);
    let n = requests.iter().filter_map(|r| r.get("n").and_then(Value::as_u64)).max().unwrap_or(sent).max(sent) + 1;
    requests.retain(|r| r.get("n").and_then(Value::as_u64).is_some_and(|k| k > sent));
    if requests.len() >= MAX_PENDING_SETTINGS {
        return Err(RpcError::invalid_params("too many settings wait for the agent; send a prompt first"));
    }
    let mut entry = json!({"n": n, "method": method, "params": params});
    if let Some(answer) = answer {
        entry["answer"] = answer.clone();
    }
    requests.push(entry);
    documents
        .put_document(PENDING_SETTINGS_NS, session.id.as_str(), &json!({"requests": requests}), version)
        .await
        .map_err(|e| RpcError::internal(format!("cannot keep the setting for the agent: {e}")))?;
    ed.ctx.processes.settings_kept(&session.id);
    Ok(())
}

/// Settings kept for an agent whose process is not running, at most.
const MAX_PENDING_SETTINGS: usize = 32;
/// The largest setting passed to an agent (its JSON form).
const MAX_SETTING_BYTES: usize = 4096;
/// How long the agent may take to answer a setting.
const SETTING_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The session's config options: the agent (when more than one is published; only before the
/// first prompt) and, for a native agent, the permission preset (between prompts).
pub(super) async fn config_options(ed: &Editor, session: &Session) -> Option<Value> {
    let mut out = Vec::new();
    let agents = &ed.ctx.agents.agents;
    if agents.len() >= 2 {
        let current = agent_name(session).unwrap_or("");
        let options: Vec<Value> = agents.iter().map(|(n, _)| json!({"value": n, "name": n})).collect();
        out.push(json!({
            "id": AGENT_OPTION,
            "name": "Agent",
            "description": "The published agent that runs this session (only before the first prompt)",
            "type": "select",
            "currentValue": current,
            "options": options,
        }));
    }
    if session.snapshot.agent.spec.backend == BackendRef::Native {
        let current = &session.snapshot.agent.spec.model.id;
        let options: Vec<Value> = model_choices(ed, session).iter().map(|m| json!({"value": m, "name": m})).collect();
        out.push(json!({
            "id": MODEL_OPTION,
            "name": "Model",
            "description": "The model this session runs on (between prompts)",
            "category": "model",
            "type": "select",
            "currentValue": current,
            "options": options,
        }));
        let current = current_preset(ed, &session.id).await;
        let options: Vec<Value> = PermissionPreset::ALL
            .iter()
            .map(|p| {
                let (name, description) = preset_words(*p);
                json!({"value": p.as_str(), "name": name, "description": description})
            })
            .collect();
        out.push(json!({
            "id": PERMISSIONS_OPTION,
            "name": "Permissions",
            "description": "What the agent may do without asking (between prompts)",
            "category": "mode",
            "type": "select",
            "currentValue": current.as_str(),
            "options": options,
        }));
    }
    (!out.is_empty()).then_some(Value::Array(out))
}

/// The models a native session may run on: its agent's (`[agents.NAME] model` and `models`),
/// with the one it runs on now first if it is not among them (an agent whose configuration
/// changed since).
fn model_choices(ed: &Editor, session: &Session) -> Vec<String> {
    let current = &session.snapshot.agent.spec.model.id;
    let mut choices = agent_name(session).and_then(|n| ed.ctx.agents.models.get(n)).cloned().unwrap_or_default();
    if !choices.contains(current) {
        choices.insert(0, current.clone());
    }
    choices
}

/// Runs the session on `model` from its next turn (the rest of its definition as it is),
/// through the core's redefinition, so the other faces see `session.updated` with the agent's
/// new model. Refused while a turn runs.
async fn set_model(ed: &Editor, session: &Session, model: &str) -> Result<Session, RpcError> {
    let mut spec = session.snapshot.agent.spec.clone();
    spec.model.id = model.to_owned();
    redefine(ed, session, spec, "the model can only change between prompts").await
}

/// A native session's agent redefined through the core (`session.updated` on every face),
/// between turns only: a running turn keeps the definition it started with.
async fn redefine(
    ed: &Editor,
    session: &Session,
    spec: gateway_core::agent::AgentSpec,
    busy: &'static str,
) -> Result<Session, RpcError> {
    let coordinator = &ed.ctx.coordinator;
    let snapshot = coordinator.redefine_session(session, Some(spec), None).await.map_err(runtime_error)?;
    let patch = SessionPatch { snapshot: Some(snapshot), ..Default::default() };
    coordinator.update_session(&session.id, patch).await.map_err(|e| match e {
        RuntimeError::Guard(_) => RpcError::invalid_params(busy),
        e => runtime_error(e),
    })
}

fn preset_words(p: PermissionPreset) -> (&'static str, &'static str) {
    match p {
        PermissionPreset::AsDefined => {
            ("As the agent is configured", "Each tool asks or runs as the agent's definition says")
        }
        PermissionPreset::AskBeforeChanges => {
            ("Ask before changes", "Reading runs at once; commands, edits and MCP tools ask")
        }
        PermissionPreset::AllowAll => ("Allow everything", "Every tool runs without asking"),
        PermissionPreset::ReadOnly => ("Read only", "Only reading tools; commands, edits and MCP tools are off"),
    }
}

/// The preset the session runs under (kept as an adapter document; none: as defined).
async fn current_preset(ed: &Editor, id: &SessionId) -> PermissionPreset {
    match ed.ctx.coordinator.documents().get_document(PERMISSIONS_NS, id.as_str()).await {
        Ok(Some(doc)) => doc.body.get("preset").and_then(Value::as_str).and_then(PermissionPreset::parse),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "cannot read the session's permission preset");
            None
        }
    }
    .unwrap_or(PermissionPreset::AsDefined)
}

/// Runs the session under `preset` from its next turn: the agent version it froze, as editor
/// sessions run it, with the preset applied, through the core's redefinition (so the other
/// faces see `session.updated` with the agent's new tool settings). Refused while a turn runs.
async fn set_preset(ed: &Editor, id: &SessionId, preset: PermissionPreset) -> Result<Session, RpcError> {
    let coordinator = &ed.ctx.coordinator;
    let session = coordinator.get_session(id).await.map_err(runtime_error)?;
    let frozen = &session.snapshot.agent;
    let mut spec = coordinator.get_agent(&frozen.id, Some(frozen.version)).await.map_err(runtime_error)?.spec;
    if let Some(o) = overrides_for(&spec) {
        o.apply(&mut spec);
    }
    // Skills were resolved when the session was created, and the editor may have chosen
    // another model since: keep the session's.
    spec.skills = frozen.spec.skills.clone();
    spec.model = frozen.spec.model.clone();
    let session =
        redefine(ed, &session, spec.with_preset(preset), "the permissions can only change between prompts").await?;
    let documents = coordinator.documents();
    let version = documents.get_document(PERMISSIONS_NS, id.as_str()).await.ok().flatten().map(|d| d.version);
    if let Err(e) =
        documents.put_document(PERMISSIONS_NS, id.as_str(), &json!({"preset": preset.as_str()}), version).await
    {
        tracing::warn!(session = %id, error = %e, "cannot keep the session's permission preset");
    }
    info!(session = %id, preset = preset.as_str(), "permission preset set");
    Ok(session)
}

pub(super) async fn set_config_option(ed: &Editor, raw: Value) -> Result<Value, RpcError> {
    let p: SetOptionParams = params(raw)?;
    ed.open(&p.session_id)?;
    let id = session_id(&p.session_id)?;
    if p.config_id == PERMISSIONS_OPTION {
        let preset = p.value.as_str().and_then(PermissionPreset::parse).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "`value` must be one of {}",
                PermissionPreset::ALL.map(PermissionPreset::as_str).join(", ")
            ))
        })?;
        let session = ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
        if session.snapshot.agent.spec.backend != BackendRef::Native {
            return Err(RpcError::invalid_params("only a native agent's session takes a permission preset"));
        }
        let session = set_preset(ed, &id, preset).await?;
        return Ok(json!({"configOptions": config_options(ed, &session).await.unwrap_or_else(|| json!([]))}));
    }
    if p.config_id == MODEL_OPTION {
        let session = ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
        if session.snapshot.agent.spec.backend == BackendRef::Native {
            let choices = model_choices(ed, &session);
            let model = p.value.as_str().filter(|m| choices.iter().any(|c| c == m)).ok_or_else(|| {
                RpcError::invalid_params(format!("`value` must be one of the agent's models: {}", choices.join(", ")))
            })?;
            let session = set_model(ed, &session, model).await?;
            info!(session = %id, model, "model set");
            return Ok(json!({"configOptions": config_options(ed, &session).await.unwrap_or_else(|| json!([]))}));
        }
    }
    if p.config_id != AGENT_OPTION || ed.ctx.agents.agents.len() < 2 {
        let session = ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
        if matches!(session.snapshot.agent.spec.backend, BackendRef::Acp { .. }) {
            let params = json!({"configId": p.config_id, "value": p.value});
            return forward_setting(ed, &session, "session/set_config_option", params).await;
        }
        return Err(RpcError::invalid_params(format!(
            "unknown config option {:?}",
            crate::rpc::clip(&p.config_id, 80)
        )));
    }
    let name = p.value.as_str().ok_or_else(|| RpcError::invalid_params("`value` must be an agent name"))?;
    let agent_id = ed.ctx.agents.get(name).cloned().ok_or_else(|| {
        RpcError::invalid_params(format!("no published agent is named {:?}", crate::rpc::clip(name, 80)))
    })?;
    let session = ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
    let prompted = ed
        .ctx
        .coordinator
        .list_events(&id, &EventFilter::default(), &PageRequest::first(1000, Order::Asc))
        .await
        .map_err(runtime_error)?
        .items
        .iter()
        .any(|e| matches!(e.payload, EventPayload::UserMessage { .. }));
    if prompted {
        return Err(RpcError::invalid_params("the agent can only be changed before the first prompt"));
    }
    let agent = ed.ctx.coordinator.get_agent(&agent_id, None).await.map_err(runtime_error)?;
    if agent.spec.backend != session.snapshot.agent.spec.backend
        && ed.ctx.agents.environment_for(&agent.spec.backend) != Some(&session.environment_id)
    {
        return Err(RpcError::invalid_params(format!(
            "agent {name:?} needs another kind of environment than this session's; start a new session for it"
        )));
    }
    let selection = AgentSelection { id: agent_id, version: None, overrides: overrides_for(&agent.spec) };
    let mut session = ed.ctx.coordinator.switch_agent(&id, selection).await.map_err(runtime_error)?;
    info!(session = %id, agent = %name, "agent switched");
    // The agent process the session was opened with goes; the new agent's starts (its modes
    // and settings replace the old one's: later reports win).
    ed.ctx.processes.close(&id).await;
    opening::start_agent(ed, &session).await?;
    // A preset chosen before the switch applies to the new agent too.
    let preset = current_preset(ed, &id).await;
    if preset != PermissionPreset::AsDefined && session.snapshot.agent.spec.backend == BackendRef::Native {
        session = set_preset(ed, &id, preset).await?;
    }
    let cwd = ed.open(&p.session_id)?.cwd.clone();
    let mut projector = projector(ed, &cwd, &session, true);
    let answer = opening_answer(ed, &session, &mut projector, false).await?;
    Ok(json!({"configOptions": answer.get("configOptions").cloned().unwrap_or_else(|| json!([]))}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let c = PageCursor { key: Keyset { at: 42, id: "sesn_x".into() }, backward: false };
        assert_eq!(decode_cursor(&encode_cursor(&c)).expect("decodes"), c);
        for bad in ["", "x", "1", "a.b", "1."] {
            assert!(decode_cursor(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn editor_mcp_servers_are_read_for_native_and_acp_agents_and_refused_elsewhere_by_name() {
        let stdio = json!({"name": "m", "command": "/bin/m", "args": ["-v"], "env": [{"name": "K", "value": "v"}]});
        let http = json!({"type": "http", "name": "h", "url": "http://x/mcp",
                          "headers": [{"name": "Authorization", "value": "Bearer t"}]});
        let both = vec![stdio, http];
        for backend in [BackendRef::Native, BackendRef::Acp { executor: "x".into() }] {
            let servers = tool_servers("a", &backend, &both).expect("taken");
            assert_eq!(
                servers,
                vec![
                    ClientToolServer::Stdio {
                        name: "m".into(),
                        command: "/bin/m".into(),
                        args: vec!["-v".into()],
                        env: vec![("K".into(), Secret("v".into()))],
                    },
                    ClientToolServer::Http {
                        name: "h".into(),
                        url: "http://x/mcp".into(),
                        headers: vec![("Authorization".into(), Secret("Bearer t".into()))],
                    },
                ]
            );
        }
        let e = tool_servers("helper", &BackendRef::A2a { remote: "r".into() }, &both).expect_err("refused");
        assert!(e.message.contains("helper") && e.message.contains("a2a:r"), "{e:?}");
        let sse = vec![json!({"type": "sse", "name": "s", "url": "http://x", "headers": []})];
        assert!(tool_servers("a", &BackendRef::Native, &sse).expect_err("refused").message.contains("SSE"));
        // A server the editor runs and carries (the relay's): native agents only.
        let carried = vec![json!({"type": "acp", "name": "fs", "serverId": "stdio-1"})];
        assert_eq!(
            tool_servers("a", &BackendRef::Native, &carried).expect("taken"),
            vec![ClientToolServer::OnClient { name: "fs".into(), server_id: "stdio-1".into() }]
        );
        let e = tool_servers("a", &BackendRef::Acp { executor: "x".into() }, &carried).expect_err("refused");
        assert!(e.message.contains("\"fs\""), "{e:?}");
        assert!(
            tool_servers("a", &BackendRef::Native, &[json!({"type": "acp", "name": "fs"})]).is_err(),
            "no serverId"
        );
        let nameless = vec![json!({"command": "/bin/m"})];
        assert!(tool_servers("a", &BackendRef::Native, &nameless).is_err());
        assert!(tool_servers("a", &BackendRef::Native, &[]).expect("none").is_empty());
    }
}
