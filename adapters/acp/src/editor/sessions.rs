//! Session lifecycle on the editor face: new, load (with replay), resume, list, close, and
//! the agent choice as a config option.

use std::path::{Path, PathBuf};

use gateway_core::SessionId;
use gateway_core::agent::{AgentOverrides, BackendRef, ToolSpec};
use gateway_core::event::EventPayload;
use gateway_core::session::{ResourceKind, Session};
use gateway_runtime::{AgentSelection, CreateSession};
use gateway_store::{
    AdmissionWrites, DocumentWrite, EventFilter, Keyset, Order, PageCursor, PageRequest, SessionFilter,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::info;

use super::{Editor, Open, Projector, agent_name, runtime_error, workspace_of};
use crate::names::MCP_SERVERS_NS;
use crate::rpc::{Peer, RpcError, params};

/// `mcpServers` entries accepted per session.
const MAX_MCP_SERVERS: usize = 32;
/// Sessions per `session/list` page.
const LIST_PAGE: u32 = 50;
/// The config option that picks the agent.
const AGENT_OPTION: &str = "agent";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewParams {
    cwd: String,
    #[serde(default)]
    mcp_servers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadParams {
    session_id: String,
    #[serde(default)]
    cwd: Option<String>,
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
    if !Path::new(cwd).is_absolute() {
        return Err(RpcError::invalid_params(format!("`cwd` must be an absolute path, not {cwd:?}")));
    }
    let not_a_dir = || RpcError::invalid_params(format!("`cwd` {cwd:?} is not a directory on the gateway's host"));
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
            "`cwd` {cwd:?} is not under one of the gateway's `[acp] workspace_roots`"
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

pub(super) async fn new_session(ed: &Editor, raw: Value) -> Result<Value, RpcError> {
    let mut p: NewParams = params(raw)?;
    let (cwd, root) = allowed_cwd(ed, &p.cwd)?;
    p.cwd = cwd;
    let (name, agent_id) = ed.default_agent()?;
    let agent = ed.ctx.coordinator.get_agent(&agent_id, None).await.map_err(runtime_error)?;
    let backend = agent.spec.backend.clone();
    check_mcp(&name, &backend, &p.mcp_servers)?;
    let environment_id = ed
        .ctx
        .agents
        .environment_for(&backend)
        .cloned()
        .ok_or_else(|| RpcError::internal("no default environment is published for editors"))?;
    let request = CreateSession {
        agent: AgentSelection { id: agent_id, version: None, overrides: overrides_for(&agent.spec) },
        environment_id,
        title: None,
        metadata: Default::default(),
        resources: vec![ResourceKind::workspace(p.cwd.clone(), root)],
        initial_inputs: vec![],
        vault_ids: Vec::new(),
    };
    // The MCP servers the agent process gets are kept with the session, in its creation.
    let id = SessionId::new();
    let documents = match p.mcp_servers.is_empty() {
        true => vec![],
        false => vec![DocumentWrite::create(MCP_SERVERS_NS, id.as_str(), Value::Array(p.mcp_servers))],
    };
    let writes = AdmissionWrites { documents, ..AdmissionWrites::default() };
    let (session, _) =
        ed.ctx.coordinator.create_session_with(request, id, writes, None).await.map_err(runtime_error)?;
    info!(session = %session.id, agent = %name, cwd = %p.cwd, "ACP session created");
    ed.remember(session.id.clone(), p.cwd);
    let mut result = json!({"sessionId": session.id.to_string()});
    if let Some(options) = config_options(ed, &session) {
        result["configOptions"] = options;
    }
    Ok(result)
}

/// Editors cannot answer custom tools: a native agent's are removed for editor sessions.
fn overrides_for(spec: &gateway_core::agent::AgentSpec) -> Option<AgentOverrides> {
    let has_custom = spec.tools.iter().any(|t| matches!(t, ToolSpec::Custom { .. }));
    (spec.backend == BackendRef::Native && has_custom).then(|| AgentOverrides {
        tools: Some(spec.tools.iter().filter(|t| !matches!(t, ToolSpec::Custom { .. })).cloned().collect()),
        ..Default::default()
    })
}

/// MCP servers go to agents that take them (ACP executors); others refuse them by name.
fn check_mcp(name: &str, backend: &BackendRef, servers: &[Value]) -> Result<(), RpcError> {
    if servers.is_empty() {
        return Ok(());
    }
    if servers.len() > MAX_MCP_SERVERS {
        return Err(RpcError::invalid_params(format!("at most {MAX_MCP_SERVERS} MCP servers per session")));
    }
    match backend {
        BackendRef::Acp { .. } => {
            for s in servers {
                let stdio = s.get("type").is_none() || s.get("type") == Some(&json!("stdio"));
                if !stdio {
                    return Err(RpcError::invalid_params(
                        "only stdio MCP servers are accepted (mcpCapabilities.http and .sse are false)",
                    ));
                }
                if s.get("name").and_then(Value::as_str).is_none() || s.get("command").and_then(Value::as_str).is_none()
                {
                    return Err(RpcError::invalid_params("an MCP server needs `name` and `command`"));
                }
            }
            Ok(())
        }
        other => Err(RpcError::invalid_params(format!(
            "agent {name:?} runs on backend {other}, which does not take MCP servers from the editor; \
             pass `mcpServers: []` or pick an ACP-backed agent"
        ))),
    }
}

/// `session/load` (replays the committed history, then answers) and `session/resume` (no
/// replay). Either opens the session on this connection.
pub(super) async fn load(ed: &Editor, peer: &Peer, raw: Value, replay: bool) -> Result<Value, RpcError> {
    let p: LoadParams = params(raw)?;
    let id = session_id(&p.session_id)?;
    let session = ed.ctx.coordinator.get_session(&id).await.map_err(runtime_error)?;
    let cwd = loadable_workspace(ed, &session, p.cwd.as_deref())?;
    if replay {
        let mut projector = Projector::new(&cwd, true).with_inner_root(ed.ctx.coordinator.inner_root(&session));
        let mut page = PageRequest::first(1000, Order::Asc);
        loop {
            let batch =
                ed.ctx.coordinator.list_events(&id, &EventFilter::default(), &page).await.map_err(runtime_error)?;
            for e in &batch.items {
                for update in projector.event(e) {
                    peer.notify("session/update", json!({"sessionId": id.to_string(), "update": update})).await;
                }
            }
            match batch.next {
                Some(c) => page.cursor = Some(c),
                None => break,
            }
        }
    }
    ed.remember(id, cwd);
    let mut result = json!({});
    if let Some(options) = config_options(ed, &session) {
        result["configOptions"] = options;
    }
    Ok(result)
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

/// The agent choice, offered when more than one agent is published.
pub(super) fn config_options(ed: &Editor, session: &Session) -> Option<Value> {
    let agents = &ed.ctx.agents.agents;
    if agents.len() < 2 {
        return None;
    }
    let current = agent_name(session).unwrap_or("");
    let options: Vec<Value> = agents.iter().map(|(n, _)| json!({"value": n, "name": n})).collect();
    Some(json!([{
        "id": AGENT_OPTION,
        "name": "Agent",
        "description": "The published agent that runs this session (only before the first prompt)",
        "type": "select",
        "currentValue": current,
        "options": options,
    }]))
}

pub(super) async fn set_config_option(ed: &Editor, raw: Value) -> Result<Value, RpcError> {
    let p: SetOptionParams = params(raw)?;
    ed.open(&p.session_id)?;
    let id = session_id(&p.session_id)?;
    if p.config_id != AGENT_OPTION || ed.ctx.agents.agents.len() < 2 {
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
    let session = ed.ctx.coordinator.switch_agent(&id, selection).await.map_err(runtime_error)?;
    info!(session = %id, agent = %name, "agent switched");
    Ok(json!({"configOptions": config_options(ed, &session).unwrap_or_else(|| json!([]))}))
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
    fn mcp_servers_are_refused_by_native_agents_by_name() {
        let one = vec![json!({"name": "m", "command": "/bin/m", "args": [], "env": []})];
        let e = check_mcp("helper", &BackendRef::Native, &one).expect_err("refused");
        assert!(e.message.contains("helper") && e.message.contains("native"), "{e:?}");
        assert!(check_mcp("a", &BackendRef::Acp { executor: "x".into() }, &one).is_ok());
        let http = vec![json!({"type": "http", "name": "m", "url": "http://x", "headers": []})];
        assert!(check_mcp("a", &BackendRef::Acp { executor: "x".into() }, &http).is_err());
        assert!(check_mcp("a", &BackendRef::Native, &[]).is_ok());
    }
}
