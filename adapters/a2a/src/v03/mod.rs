//! v0.3 at the edges (protocols/a2a.md §8): JSON-RPC with `kind` discriminators and REST in
//! the ProtoJSON of the v0.3 proto (a third shape). Requests are rewritten into the v1.0 shape
//! before parsing; responses are rewritten from the v1.0 values the service produces.
//!
//! Working on `serde_json::Value` keeps the v1.0 types the single typed model: each shape is
//! a pure tree rewrite, testable on its own.

use serde_json::{Map, Value, json};

use crate::error::A2aError;
use crate::wire::{self, TaskState};

/// Which v0.3 shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    JsonRpc,
    Rest,
}

fn take(m: &mut Map<String, Value>, k: &str) -> Option<Value> {
    m.remove(k).filter(|v| !v.is_null())
}

// ---- requests: v0.3 -> v1.0 ----

/// A v0.3 part (either shape) as a v1.0 part.
pub fn part_in(p: Value) -> Value {
    let Value::Object(mut m) = p else { return p };
    let mut out = Map::new();
    if let Some(md) = take(&mut m, "metadata") {
        out.insert("metadata".into(), md);
    }
    let kind = take(&mut m, "kind");
    if let Some(t) = take(&mut m, "text") {
        out.insert("text".into(), t);
    } else if let Some(Value::Object(mut f)) = take(&mut m, "file") {
        let uri = take(&mut f, "uri").or_else(|| take(&mut f, "fileWithUri")).or_else(|| take(&mut f, "file_with_uri"));
        let bytes =
            take(&mut f, "bytes").or_else(|| take(&mut f, "fileWithBytes")).or_else(|| take(&mut f, "file_with_bytes"));
        if let Some(u) = uri {
            out.insert("url".into(), u);
        }
        if let Some(b) = bytes {
            out.insert("raw".into(), b);
        }
        if let Some(n) = take(&mut f, "name") {
            out.insert("filename".into(), n);
        }
        if let Some(mt) = take(&mut f, "mimeType").or_else(|| take(&mut f, "mime_type")) {
            out.insert("mediaType".into(), mt);
        }
    } else if let Some(d) = take(&mut m, "data") {
        // JSON-RPC: {kind: data, data: {...}}; REST: {data: {data: {...}}}.
        let d = match (kind.as_ref().and_then(Value::as_str), d) {
            (None, Value::Object(mut inner)) if inner.len() == 1 && inner.contains_key("data") => {
                inner.remove("data").unwrap_or(Value::Null)
            }
            (_, d) => d,
        };
        out.insert("data".into(), d);
    }
    Value::Object(out)
}

/// A v0.3 message as a v1.0 message.
pub fn message_in(msg: Value) -> Value {
    let Value::Object(mut m) = msg else { return msg };
    m.remove("kind");
    let parts = take(&mut m, "parts").or_else(|| take(&mut m, "content"));
    if let Some(Value::Array(ps)) = parts {
        m.insert("parts".into(), Value::Array(ps.into_iter().map(part_in).collect()));
    }
    Value::Object(m)
}

/// v0.3 `PushNotificationConfig` (`authentication.schemes[]`) as a v1.0 config.
pub fn push_config_in(cfg: Value, task_id: Option<&str>) -> Value {
    let Value::Object(mut m) = cfg else { return cfg };
    if let Some(Value::Object(mut auth)) = take(&mut m, "authentication") {
        let scheme = match take(&mut auth, "schemes") {
            Some(Value::Array(s)) => s.into_iter().next().unwrap_or(Value::Null),
            _ => take(&mut auth, "scheme").unwrap_or(Value::Null),
        };
        let mut a = Map::new();
        a.insert("scheme".into(), scheme);
        if let Some(c) = take(&mut auth, "credentials") {
            a.insert("credentials".into(), c);
        }
        m.insert("authentication".into(), Value::Object(a));
    }
    if let Some(t) = task_id {
        m.insert("taskId".into(), json!(t));
    }
    Value::Object(m)
}

/// v0.3 JSON-RPC parts are discriminated by `kind` (the v0.3 schema requires it; a2a-sdk 0.3
/// refuses a part without one): a part without a known `kind` is invalid params, not guessed.
fn kinds_present(message: &Value) -> Result<(), A2aError> {
    let parts = message.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (i, p) in parts.iter().enumerate() {
        if !matches!(p.get("kind").and_then(Value::as_str), Some("text" | "file" | "data")) {
            return Err(A2aError::InvalidParams(format!(
                "message.parts[{i}] needs a kind (\"text\", \"file\" or \"data\") in A2A 0.3"
            )));
        }
    }
    Ok(())
}

/// A v0.3 push config creation, in any shape a client sends, as a v1.0 config of `task_id`:
/// the REST `CreateTaskPushNotificationConfigRequest` (`{parent, configId, config:
/// {name, pushNotificationConfig}}`, what a2a-sdk 0.3's REST client sends), a
/// `TaskPushNotificationConfig` (`{taskId, pushNotificationConfig}`), or a bare config.
pub fn push_create_in(body: Value, task_id: &str) -> Value {
    let mut body = body;
    wire::normalize(&mut body);
    let Value::Object(mut m) = body else { return push_config_in(body, Some(task_id)) };
    let config_id = take(&mut m, "configId");
    let outer = match take(&mut m, "config") {
        Some(Value::Object(c)) => c,
        _ => m,
    };
    let mut inner = match outer.get("pushNotificationConfig") {
        Some(Value::Object(i)) => i.clone(),
        _ => outer,
    };
    if let Some(id) = config_id
        && inner.get("id").is_none_or(|v| v.as_str().is_none_or(str::is_empty))
    {
        inner.insert("id".into(), id);
    }
    push_config_in(Value::Object(inner), Some(task_id))
}

/// v0.3 send params (`message/send` params or the REST body) as a v1.0 SendMessageRequest.
/// An absent `blocking` means blocking over JSON-RPC (what v0.3 servers did) but not over
/// REST, where it is a proto3 `bool` whose default (false) is never written.
pub fn send_in(params: Value, shape: Shape) -> Result<Value, A2aError> {
    let mut params = params;
    wire::normalize(&mut params);
    let Value::Object(mut m) = params else { return Ok(params) };
    let message = take(&mut m, "message").or_else(|| take(&mut m, "request"));
    if let (Some(msg), Shape::JsonRpc) = (&message, shape) {
        kinds_present(msg)?;
    }
    let message = message.map(message_in);
    let mut out = Map::new();
    if let Some(msg) = message {
        out.insert("message".into(), msg);
    }
    if let Some(Value::Object(mut c)) = take(&mut m, "configuration") {
        let mut cfg = Map::new();
        if let Some(modes) = take(&mut c, "acceptedOutputModes") {
            cfg.insert("acceptedOutputModes".into(), modes);
        }
        if let Some(h) = take(&mut c, "historyLength") {
            cfg.insert("historyLength".into(), h);
        }
        let immediate = take(&mut c, "blocking").and_then(|b| b.as_bool()).map(|b| !b).unwrap_or(shape == Shape::Rest);
        cfg.insert("returnImmediately".into(), json!(immediate));
        if let Some(p) = take(&mut c, "pushNotificationConfig").or_else(|| take(&mut c, "pushNotification")) {
            cfg.insert("taskPushNotificationConfig".into(), push_config_in(p, None));
        }
        out.insert("configuration".into(), Value::Object(cfg));
    }
    if let Some(md) = take(&mut m, "metadata") {
        out.insert("metadata".into(), md);
    }
    Ok(Value::Object(out))
}

// ---- responses: v1.0 -> v0.3 ----

fn part_out(p: &Value, shape: Shape) -> Value {
    let mut out = Map::new();
    if let Some(md) = p.get("metadata") {
        out.insert("metadata".into(), md.clone());
    }
    if let Some(t) = p.get("text") {
        if shape == Shape::JsonRpc {
            out.insert("kind".into(), json!("text"));
        }
        out.insert("text".into(), t.clone());
    } else if p.get("url").is_some() || p.get("raw").is_some() {
        let mut f = Map::new();
        let (uri_key, bytes_key, mime_key) = match shape {
            Shape::JsonRpc => ("uri", "bytes", "mimeType"),
            Shape::Rest => ("fileWithUri", "fileWithBytes", "mimeType"),
        };
        if let Some(u) = p.get("url") {
            f.insert(uri_key.into(), u.clone());
        }
        if let Some(b) = p.get("raw") {
            f.insert(bytes_key.into(), b.clone());
        }
        if let Some(n) = p.get("filename") {
            f.insert("name".into(), n.clone());
        }
        if let Some(mt) = p.get("mediaType") {
            f.insert(mime_key.into(), mt.clone());
        }
        if shape == Shape::JsonRpc {
            out.insert("kind".into(), json!("file"));
        }
        out.insert("file".into(), Value::Object(f));
    } else if let Some(d) = p.get("data") {
        // v0.3 data parts are objects: wrap anything else.
        let obj = if d.is_object() { d.clone() } else { json!({"value": d}) };
        match shape {
            Shape::JsonRpc => {
                out.insert("kind".into(), json!("data"));
                out.insert("data".into(), obj);
            }
            Shape::Rest => {
                out.insert("data".into(), json!({"data": obj}));
            }
        }
    }
    Value::Object(out)
}

fn parts_out(ps: Option<&Value>, shape: Shape) -> Value {
    Value::Array(
        ps.and_then(Value::as_array).map(|a| a.iter().map(|p| part_out(p, shape)).collect()).unwrap_or_default(),
    )
}

pub fn message_out(m: &Value, shape: Shape) -> Value {
    let mut out = m.as_object().cloned().unwrap_or_default();
    let parts = parts_out(m.get("parts"), shape);
    out.remove("parts");
    match shape {
        Shape::JsonRpc => {
            out.insert("kind".into(), json!("message"));
            let role = if m.get("role").and_then(Value::as_str) == Some("ROLE_USER") { "user" } else { "agent" };
            out.insert("role".into(), json!(role));
            out.insert("parts".into(), parts);
        }
        Shape::Rest => {
            out.insert("content".into(), parts);
            out.remove("referenceTaskIds");
        }
    }
    Value::Object(out)
}

fn state_out(s: &Value, shape: Shape) -> Value {
    let state = TaskState::parse(s).unwrap_or(TaskState::Working);
    match (shape, state) {
        (Shape::JsonRpc, s) => json!(s.v03()),
        (Shape::Rest, TaskState::Canceled) => json!("TASK_STATE_CANCELLED"),
        (Shape::Rest, s) => json!(s.name()),
    }
}

fn status_out(st: &Value, shape: Shape) -> Value {
    let mut out = Map::new();
    out.insert("state".into(), state_out(&st["state"], shape));
    if let Some(m) = st.get("message") {
        out.insert("message".into(), message_out(m, shape));
    }
    if let Some(t) = st.get("timestamp") {
        out.insert("timestamp".into(), t.clone());
    }
    Value::Object(out)
}

fn artifact_out(a: &Value, shape: Shape) -> Value {
    let mut out = a.as_object().cloned().unwrap_or_default();
    out.insert("parts".into(), parts_out(a.get("parts"), shape));
    Value::Object(out)
}

pub fn task_out(t: &Value, shape: Shape) -> Value {
    let mut out = t.as_object().cloned().unwrap_or_default();
    if shape == Shape::JsonRpc {
        out.insert("kind".into(), json!("task"));
    }
    out.insert("status".into(), status_out(&t["status"], shape));
    if let Some(Value::Array(a)) = t.get("artifacts") {
        out.insert("artifacts".into(), Value::Array(a.iter().map(|x| artifact_out(x, shape)).collect()));
    }
    if let Some(Value::Array(h)) = t.get("history") {
        out.insert("history".into(), Value::Array(h.iter().map(|x| message_out(x, shape)).collect()));
    }
    Value::Object(out)
}

/// A v1.0 StreamResponse (or SendMessageResponse) value in v0.3 form. For JSON-RPC the
/// result is the bare object with `kind`; for REST the wrapper key stays.
pub fn stream_out(v: &Value, shape: Shape) -> Value {
    let inner = if let Some(t) = v.get("task") {
        ("task", task_out(t, shape))
    } else if let Some(m) = v.get("message") {
        ("message", message_out(m, shape))
    } else if let Some(s) = v.get("statusUpdate") {
        let mut out = s.as_object().cloned().unwrap_or_default();
        let state = TaskState::parse(&s["status"]["state"]).unwrap_or(TaskState::Working);
        out.insert("status".into(), status_out(&s["status"], shape));
        // v0.3 marks the last status event; v1.0 closes the stream instead.
        out.insert("final".into(), json!(state.is_terminal() || state.is_interrupted()));
        if shape == Shape::JsonRpc {
            out.insert("kind".into(), json!("status-update"));
        }
        ("statusUpdate", Value::Object(out))
    } else if let Some(a) = v.get("artifactUpdate") {
        let mut out = a.as_object().cloned().unwrap_or_default();
        out.insert("artifact".into(), artifact_out(&a["artifact"], shape));
        if shape == Shape::JsonRpc {
            out.insert("kind".into(), json!("artifact-update"));
        }
        ("artifactUpdate", Value::Object(out))
    } else {
        return v.clone();
    };
    match shape {
        Shape::JsonRpc => inner.1,
        Shape::Rest => json!({ inner.0: inner.1 }),
    }
}

/// A v1.0 push config in v0.3 form.
pub fn push_config_out(c: &Value, shape: Shape) -> Value {
    let task_id = c.get("taskId").and_then(Value::as_str).unwrap_or_default();
    let id = c.get("id").and_then(Value::as_str).unwrap_or_default();
    let mut inner = Map::new();
    for k in ["id", "url", "token"] {
        if let Some(v) = c.get(k) {
            inner.insert(k.into(), v.clone());
        }
    }
    if let Some(a) = c.get("authentication") {
        let mut auth = Map::new();
        auth.insert("schemes".into(), json!([a.get("scheme").cloned().unwrap_or(Value::Null)]));
        if let Some(cr) = a.get("credentials") {
            auth.insert("credentials".into(), cr.clone());
        }
        inner.insert("authentication".into(), Value::Object(auth));
    }
    match shape {
        Shape::JsonRpc => json!({"taskId": task_id, "pushNotificationConfig": inner}),
        Shape::Rest => {
            json!({"name": format!("tasks/{task_id}/pushNotificationConfigs/{id}"), "pushNotificationConfig": inner})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonrpc_send_params_become_v1() {
        let v = send_in(
            json!({
                "message": {"kind": "message", "messageId": "m", "role": "user", "parts": [
                    {"kind": "text", "text": "hi"},
                    {"kind": "file", "file": {"uri": "https://x/y", "name": "y", "mimeType": "text/plain"}},
                    {"kind": "data", "data": {"a": 1}}]},
                "configuration": {"blocking": false, "pushNotificationConfig": {"url": "http://h", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}}
            }),
            Shape::JsonRpc,
        )
        .unwrap();
        let req: wire::SendMessageRequest = wire::parse(v).unwrap();
        assert_eq!(req.message.parts[0].text.as_deref(), Some("hi"));
        assert_eq!(req.message.parts[1].url.as_deref(), Some("https://x/y"));
        assert_eq!(req.message.parts[1].media_type.as_deref(), Some("text/plain"));
        assert_eq!(req.message.parts[2].data, Some(json!({"a": 1})));
        let cfg = req.configuration.unwrap();
        assert_eq!(cfg.return_immediately, Some(true));
        assert_eq!(cfg.task_push_notification_config.unwrap().authentication.unwrap().scheme, "Bearer");
    }

    #[test]
    fn rest_send_body_becomes_v1() {
        let v = send_in(
            json!({
                "request": {"message_id": "m", "role": "ROLE_USER", "content": [{"text": "hi"}, {"data": {"data": {"k": 2}}}]},
                "configuration": {"blocking": true}
            }),
            Shape::Rest,
        )
        .unwrap();
        let req: wire::SendMessageRequest = wire::parse(v).unwrap();
        assert_eq!(req.message.message_id, "m");
        assert_eq!(req.message.parts[1].data, Some(json!({"k": 2})));
        assert_eq!(req.configuration.unwrap().return_immediately, Some(false));
    }

    #[test]
    fn jsonrpc_parts_without_a_kind_are_invalid_params() {
        for part in [json!({"text": "hi"}), json!({"kind": "texte", "text": "hi"})] {
            let params = json!({"message": {"kind": "message", "messageId": "m", "role": "user", "parts": [part]}});
            let refused = send_in(params.clone(), Shape::JsonRpc).unwrap_err();
            assert!(matches!(&refused, A2aError::InvalidParams(m) if m.contains("parts[0]")), "{refused:?}");
            // The REST shape (ProtoJSON) has no kind at all.
            assert!(send_in(params, Shape::Rest).is_ok());
        }
    }

    #[test]
    fn rest_push_config_bodies_of_every_client_shape_become_v1() {
        let inner = json!({"url": "https://h/hook", "token": "t", "authentication": {"schemes": ["Bearer"], "credentials": "c"}});
        let shapes = [
            // a2a-sdk 0.3's REST client: the CreateTaskPushNotificationConfigRequest.
            json!({"parent": "tasks/t1", "configId": "c1",
                   "config": {"name": "tasks/t1/pushNotificationConfigs/c1", "pushNotificationConfig": inner}}),
            json!({"pushNotificationConfig": {"id": "c1", "url": "https://h/hook", "token": "t",
                   "authentication": {"schemes": ["Bearer"], "credentials": "c"}}}),
            json!({"id": "c1", "url": "https://h/hook", "token": "t",
                   "authentication": {"schemes": ["Bearer"], "credentials": "c"}}),
        ];
        for body in shapes {
            let cfg: wire::PushConfig = wire::parse(push_create_in(body.clone(), "t1")).unwrap();
            assert_eq!(cfg.url, "https://h/hook", "{body}");
            assert_eq!(cfg.id.as_deref(), Some("c1"), "{body}");
            assert_eq!(cfg.task_id.as_deref(), Some("t1"), "{body}");
            assert_eq!(cfg.authentication.unwrap().scheme, "Bearer", "{body}");
        }
    }

    #[test]
    fn responses_take_each_v03_shape() {
        let status =
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_CANCELED"}}});
        let rpc = stream_out(&status, Shape::JsonRpc);
        assert_eq!(rpc["kind"], "status-update");
        assert_eq!(rpc["status"]["state"], "canceled");
        assert_eq!(rpc["final"], true);
        let rest = stream_out(&status, Shape::Rest);
        assert_eq!(rest["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELLED");
        let task = json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
            "history": [{"messageId": "m", "role": "ROLE_AGENT", "parts": [{"data": [1]}]}]}});
        let rpc = stream_out(&task, Shape::JsonRpc);
        assert_eq!(rpc["kind"], "task");
        assert_eq!(rpc["history"][0]["role"], "agent");
        assert_eq!(rpc["history"][0]["parts"][0], json!({"kind": "data", "data": {"value": [1]}}));
        let rest = stream_out(&task, Shape::Rest);
        assert_eq!(rest["task"]["history"][0]["content"][0], json!({"data": {"data": {"value": [1]}}}));
    }
}
