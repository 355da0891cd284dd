//! The operations both bindings dispatch to, and how their v1.0 results render in each
//! version and shape.

use axum::response::Response;
use serde_json::{Value, json};
use tracing::info;

use crate::A2aContext;
use crate::error::{A2aError, Result};
use crate::server::sse;
use crate::server::version::Version;
use crate::tasks::service;
use crate::tasks::watch::Watch;
use crate::v03::{self, Shape};
use crate::wire::{ListTasksRequest, PushConfig, SendMessageRequest, StreamResponse};

pub enum Op {
    Send { req: Box<SendMessageRequest>, stream: bool },
    Get { id: String, history_length: Option<i64> },
    List(ListTasksRequest),
    Cancel { id: String },
    Subscribe { id: String },
    PushCreate(PushConfig),
    PushGet { task_id: String, id: String },
    PushList { task_id: String },
    PushDelete { task_id: String, id: String },
    ExtendedCard,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Send { stream: false, .. } => "SendMessage",
            Op::Send { stream: true, .. } => "SendStreamingMessage",
            Op::Get { .. } => "GetTask",
            Op::List(_) => "ListTasks",
            Op::Cancel { .. } => "CancelTask",
            Op::Subscribe { .. } => "SubscribeToTask",
            Op::PushCreate(_) => "CreateTaskPushNotificationConfig",
            Op::PushGet { .. } => "GetTaskPushNotificationConfig",
            Op::PushList { .. } => "ListTaskPushNotificationConfigs",
            Op::PushDelete { .. } => "DeleteTaskPushNotificationConfig",
            Op::ExtendedCard => "GetExtendedAgentCard",
        }
    }
}

/// What kind of value a result is, so the v0.3 renderers know its shape.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SendResponse,
    Task,
    TaskList,
    PushConfig,
    PushConfigList,
    Empty,
}

pub enum Outcome {
    Value(Kind, Value),
    Stream { watch: Box<Watch>, min_seq: u64, send: bool, history_length: Option<i64> },
}

fn value<T: serde::Serialize>(kind: Kind, v: &T) -> Result<Outcome> {
    Ok(Outcome::Value(kind, serde_json::to_value(v).map_err(|e| A2aError::Internal(e.to_string()))?))
}

/// Runs an operation on a published agent. Every operation first asks whether the agent is
/// published, so an unknown agent answers the same whatever the operation (MethodNotFound:
/// its URL serves nothing), never an empty list or a missing task.
pub async fn execute(ctx: &A2aContext, agent: &str, op: Op, version: Version) -> Result<Outcome> {
    let v03 = version == Version::V03;
    tracing::debug!(operation = op.name(), agent, version = version.as_str(), "a2a operation");
    service::agent(ctx, agent).await?;
    match op {
        Op::Send { req, stream } => {
            let history_length = req.configuration.as_ref().and_then(|c| c.history_length);
            let immediate = req.configuration.as_ref().and_then(|c| c.return_immediately).unwrap_or(false);
            let mut started = service::send(ctx, agent, &req, v03).await?;
            if stream {
                let watch = started.watch(&ctx.coordinator).await?;
                return Ok(Outcome::Stream {
                    watch: Box::new(watch),
                    min_seq: started.min_seq,
                    send: true,
                    history_length,
                });
            }
            let watch = if immediate {
                started.watch(&ctx.coordinator).await?
            } else {
                service::settle(ctx, &mut started).await?
            };
            match watch.proj.direct_message() {
                Some(m) => value(Kind::SendResponse, &StreamResponse::Message(m.clone())),
                None => value(Kind::SendResponse, &json!({"task": watch.proj.task(history_length, true)})),
            }
        }
        Op::Get { id, history_length } => {
            if history_length.is_some_and(|h| h < 0) {
                return Err(A2aError::InvalidParams("historyLength must not be negative".into()));
            }
            value(Kind::Task, &service::get_task(ctx, agent, &id, history_length).await?)
        }
        Op::List(req) => {
            if v03 {
                return Err(A2aError::MethodNotFound("ListTasks does not exist in A2A 0.3".into()));
            }
            let page = service::list_tasks(ctx, agent, &req).await?;
            value(
                Kind::TaskList,
                &json!({
                    "tasks": page.tasks,
                    "nextPageToken": page.next_page_token,
                    "pageSize": page.page_size,
                    "totalSize": page.total_size,
                }),
            )
        }
        Op::Cancel { id } => value(Kind::Task, &service::cancel(ctx, agent, &id).await?),
        Op::Subscribe { id } => {
            let (rec, _) = service::task_record(ctx, agent, &id).await?;
            let watch = Watch::open(&ctx.coordinator, &rec).await?;
            if watch.proj.is_final() {
                return Err(A2aError::UnsupportedOperation(format!(
                    "task {id} is {}; there is nothing to subscribe to",
                    watch.proj.state().name()
                )));
            }
            let min_seq = watch.opened_at;
            Ok(Outcome::Stream { watch: Box::new(watch), min_seq, send: false, history_length: None })
        }
        Op::PushCreate(cfg) => {
            let task_id = cfg.task_id.clone().unwrap_or_default();
            let (rec, _) = service::task_record(ctx, agent, &task_id).await?;
            value(Kind::PushConfig, &crate::push::create(ctx, &rec, cfg, v03).await?)
        }
        Op::PushGet { task_id, id } => {
            let (rec, _) = service::task_record(ctx, agent, &task_id).await?;
            value(Kind::PushConfig, &crate::push::get(ctx, &rec, &id).await?)
        }
        Op::PushList { task_id } => {
            let (rec, _) = service::task_record(ctx, agent, &task_id).await?;
            let configs = crate::push::list(ctx, &rec).await?;
            value(Kind::PushConfigList, &json!({"configs": configs, "nextPageToken": ""}))
        }
        Op::PushDelete { task_id, id } => {
            let (rec, _) = service::task_record(ctx, agent, &task_id).await?;
            crate::push::delete(ctx, &rec, &id).await?;
            value(Kind::Empty, &json!({}))
        }
        Op::ExtendedCard if v03 => Err(A2aError::ExtendedCardNotConfigured),
        Op::ExtendedCard => Err(A2aError::UnsupportedOperation(
            "this agent declares no extended agent card (capabilities.extendedAgentCard is false)".into(),
        )),
    }
}

/// A v1.0 result in the caller's version and shape.
pub fn render(kind: Kind, v: &Value, version: Version, shape: Shape) -> Value {
    if version == Version::V1 {
        return v.clone();
    }
    match kind {
        Kind::SendResponse => v03::stream_out(v, shape),
        Kind::Task => v03::task_out(v, shape),
        Kind::PushConfig => v03::push_config_out(v, shape),
        Kind::PushConfigList => {
            let items: Vec<Value> = v["configs"]
                .as_array()
                .map(|a| a.iter().map(|c| v03::push_config_out(c, shape)).collect())
                .unwrap_or_default();
            match shape {
                Shape::JsonRpc => Value::Array(items),
                Shape::Rest => json!({"configs": items, "nextPageToken": ""}),
            }
        }
        Kind::TaskList => v.clone(),
        Kind::Empty => match shape {
            Shape::JsonRpc => Value::Null,
            Shape::Rest => json!({}),
        },
    }
}

/// A stream event in the caller's version and shape (before any envelope).
pub fn render_event(u: &StreamResponse, version: Version, shape: Shape) -> Value {
    let v = serde_json::to_value(u).unwrap_or_default();
    match version {
        Version::V1 => v,
        Version::V03 => v03::stream_out(&v, shape),
    }
}

pub fn stream_response(
    ctx: &A2aContext,
    watch: Box<Watch>,
    min_seq: u64,
    send: bool,
    history_length: Option<i64>,
    render: sse::Render,
) -> Response {
    info!(task = %watch.proj.task(Some(0), false).id, "stream opened");
    sse::respond(watch, render, ctx.shutdown.clone(), min_seq, send, history_length)
}
