//! v1.0 wire types (ProtoJSON): tolerant on input, exact on output.
//!
//! Input is first normalised by [`normalize`]: snake_case keys become lowerCamelCase (ProtoJSON
//! parsers accept both), except inside free-form values (`data`, `metadata`, `params`), whose
//! keys belong to the sender. `""` is read as absent for optional strings, enums are accepted
//! by name or number, unknown fields are ignored. Output skips absent optional fields and
//! empty repeated ones.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::A2aError;

/// Keys whose values are free-form JSON: never rewritten.
const OPAQUE: [&str; 4] = ["data", "metadata", "params", "header"];

/// Rewrites snake_case keys to lowerCamelCase, outside opaque values. Depth is bounded by
/// the JSON parser (serde_json refuses nesting deeper than 128).
pub fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (k, mut val) in old {
                let key = camel(&k);
                if !OPAQUE.contains(&key.as_str()) {
                    normalize(&mut val);
                }
                map.entry(key).or_insert(val);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn camel(k: &str) -> String {
    if !k.contains('_') {
        return k.to_owned();
    }
    let mut out = String::with_capacity(k.len());
    let mut up = false;
    for c in k.chars() {
        if c == '_' {
            up = !out.is_empty();
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses a request message after normalising it.
pub fn parse<T: for<'de> Deserialize<'de>>(mut v: Value) -> Result<T, A2aError> {
    normalize(&mut v);
    serde_json::from_value(v).map_err(|e| A2aError::InvalidParams(e.to_string()))
}

fn opt_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

fn req_str<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

fn vec_or_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl TaskState {
    pub const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::AuthRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::Rejected,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
        }
    }

    /// The v0.3 JSON-RPC spelling.
    pub fn v03(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::AuthRequired => "auth-required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
            TaskState::Rejected => "rejected",
        }
    }

    fn number(self) -> i64 {
        match self {
            TaskState::Submitted => 1,
            TaskState::Working => 2,
            TaskState::Completed => 3,
            TaskState::Failed => 4,
            TaskState::Canceled => 5,
            TaskState::InputRequired => 6,
            TaskState::Rejected => 7,
            TaskState::AuthRequired => 8,
        }
    }

    /// Accepts v1.0 names, v0.3 names (`input-required`, `TASK_STATE_CANCELLED`) and numbers.
    pub fn parse(v: &Value) -> Option<Self> {
        if let Some(n) = v.as_i64() {
            return Self::ALL.into_iter().find(|s| s.number() == n);
        }
        let s = v.as_str()?;
        let s = s.strip_prefix("TASK_STATE_").unwrap_or(s).to_ascii_lowercase().replace('_', "-");
        let s = if s == "cancelled" { "canceled".to_owned() } else { s };
        Self::ALL.into_iter().find(|x| x.v03() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected)
    }

    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

impl Serialize for TaskState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for TaskState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::parse(&v).ok_or_else(|| serde::de::Error::custom(format!("unknown task state {v}")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Agent,
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Role::User => "ROLE_USER",
            Role::Agent => "ROLE_AGENT",
        })
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match (v.as_str(), v.as_i64()) {
            (Some("ROLE_USER" | "user"), _) | (_, Some(1)) => Ok(Role::User),
            (Some("ROLE_AGENT" | "agent"), _) | (_, Some(2)) => Ok(Role::Agent),
            _ => Err(serde::de::Error::custom(format!("unknown role {v}"))),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64 bytes.
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    pub fn text(t: impl Into<String>) -> Self {
        Part { text: Some(t.into()), ..Default::default() }
    }
    pub fn data(v: Value) -> Self {
        Part { data: Some(v), ..Default::default() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default, deserialize_with = "req_str")]
    pub message_id: String,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    #[serde(default, deserialize_with = "vec_or_null")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "vec_or_null", skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, deserialize_with = "vec_or_null", skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    pub fn agent(id: impl Into<String>, parts: Vec<Part>) -> Self {
        Message {
            message_id: id.into(),
            context_id: None,
            task_id: None,
            role: Role::Agent,
            parts,
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    #[serde(default, deserialize_with = "req_str")]
    pub artifact_id: String,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "vec_or_null")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    #[serde(default, deserialize_with = "req_str")]
    pub id: String,
    #[serde(default, deserialize_with = "req_str")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, deserialize_with = "vec_or_null", skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, deserialize_with = "vec_or_null", skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusUpdate {
    #[serde(default, deserialize_with = "req_str")]
    pub task_id: String,
    #[serde(default, deserialize_with = "req_str")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactUpdate {
    #[serde(default, deserialize_with = "req_str")]
    pub task_id: String,
    #[serde(default, deserialize_with = "req_str")]
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(default, skip_serializing_if = "is_false")]
    pub append: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// One stream event / push body: exactly one member key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    Message(Message),
    StatusUpdate(StatusUpdate),
    ArtifactUpdate(ArtifactUpdate),
}

impl StreamResponse {
    /// Decodes a stream event: the first known member key wins (tolerant of extra keys).
    pub fn from_value(mut v: Value) -> Result<Self, A2aError> {
        normalize(&mut v);
        let Value::Object(mut m) = v else {
            return Err(A2aError::InvalidAgentResponse("stream event is not an object".into()));
        };
        let bad = |e: serde_json::Error| A2aError::InvalidAgentResponse(e.to_string());
        for key in ["task", "message", "statusUpdate", "artifactUpdate"] {
            if let Some(inner) = m.remove(key) {
                return Ok(match key {
                    "task" => StreamResponse::Task(serde_json::from_value(inner).map_err(bad)?),
                    "message" => StreamResponse::Message(serde_json::from_value(inner).map_err(bad)?),
                    "statusUpdate" => StreamResponse::StatusUpdate(serde_json::from_value(inner).map_err(bad)?),
                    _ => StreamResponse::ArtifactUpdate(serde_json::from_value(inner).map_err(bad)?),
                });
            }
        }
        Err(A2aError::InvalidAgentResponse(
            "stream event has none of task, message, statusUpdate, artifactUpdate".into(),
        ))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthInfo {
    #[serde(default, deserialize_with = "req_str")]
    pub scheme: String,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfig {
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, deserialize_with = "req_str")]
    pub url: String,
    #[serde(default, deserialize_with = "opt_str", skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendConfig {
    #[serde(default, deserialize_with = "vec_or_null")]
    pub accepted_output_modes: Vec<String>,
    pub task_push_notification_config: Option<PushConfig>,
    pub history_length: Option<i64>,
    pub return_immediately: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    pub message: Message,
    pub configuration: Option<SendConfig>,
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdRequest {
    #[serde(default, deserialize_with = "req_str")]
    pub id: String,
    pub history_length: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    #[serde(default, deserialize_with = "opt_str")]
    pub context_id: Option<String>,
    pub status: Option<Value>,
    pub page_size: Option<i64>,
    #[serde(default, deserialize_with = "opt_str")]
    pub page_token: Option<String>,
    pub history_length: Option<i64>,
    #[serde(default, deserialize_with = "opt_str")]
    pub status_timestamp_after: Option<String>,
    pub include_artifacts: Option<bool>,
}

/// Get/Delete/List of push configs: `{taskId, id}` (id absent for List).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfigRef {
    #[serde(default, deserialize_with = "req_str")]
    pub task_id: String,
    #[serde(default, deserialize_with = "opt_str")]
    pub id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_is_tolerant() {
        let m: Message = parse(json!({
            "message_id": "m1", "role": 1, "parts": [{"text": "hi", "filename": ""},
            {"data": {"snake_key": 1}}], "unknown": true, "context_id": ""
        }))
        .unwrap();
        assert_eq!(m.message_id, "m1");
        assert_eq!(m.role, Role::User);
        assert_eq!(m.context_id, None, "empty string is absent");
        assert_eq!(m.parts[0].filename, None);
        assert_eq!(m.parts[1].data, Some(json!({"snake_key": 1})), "data keys are the sender's");
        assert_eq!(TaskState::parse(&json!("input-required")), Some(TaskState::InputRequired));
        assert_eq!(TaskState::parse(&json!("TASK_STATE_CANCELLED")), Some(TaskState::Canceled));
        assert_eq!(TaskState::parse(&json!(3)), Some(TaskState::Completed));
    }

    #[test]
    fn output_is_exact() {
        let t = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus { state: TaskState::Working, message: None, timestamp: None },
            artifacts: vec![],
            history: vec![],
            metadata: None,
        };
        let v = serde_json::to_value(StreamResponse::Task(t)).unwrap();
        assert_eq!(v, json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}));
        let back = StreamResponse::from_value(v).unwrap();
        assert!(matches!(back, StreamResponse::Task(_)));
    }
}
