//! Rebuilding the model conversation from the committed event log.
//!
//! The model request is a pure function of the events a run may see, so a resumed run (after
//! a crash, a retry or a parked turn) asks the model exactly what the log says happened. Our
//! event ids double as the model's tool-use ids, so a tool result always names its call.

use std::collections::HashSet;

use gateway_core::agent::{AgentSpec, ToolSpec};
use gateway_core::content::{ContentBlock, MediaSource};
use gateway_core::event::{Event, EventPayload, ThinkingSeal, ToolOrigin};
use gateway_models::{Block, ImageSource, Message, Role, ToolDefinition, ToolResultContent};

fn blocks(content: &[ContentBlock]) -> Vec<Block> {
    content.iter().filter_map(block).collect()
}

fn block(c: &ContentBlock) -> Option<Block> {
    let text = |t: String| Some(Block::Text { text: t });
    match c {
        ContentBlock::Text { text: t } => text(t.clone()),
        ContentBlock::Image { source: MediaSource::Base64 { media_type, data } } => {
            Some(Block::Image { source: ImageSource::Base64 { media_type: media_type.clone(), data: data.clone() } })
        }
        ContentBlock::Image { source: MediaSource::Url { url } } => {
            Some(Block::Image { source: ImageSource::Url { url: url.clone() } })
        }
        ContentBlock::Image { source } => text(format!("[image not available to the model: {}]", source_label(source))),
        ContentBlock::Document { source: MediaSource::Text { data, .. }, title, .. } => {
            text(format!("Document{}:\n{data}", title.as_ref().map(|t| format!(" \"{t}\"")).unwrap_or_default()))
        }
        ContentBlock::Document { source, title, .. } => text(format!(
            "[document{} not available to the model: {}]",
            title.as_ref().map(|t| format!(" \"{t}\"")).unwrap_or_default(),
            source_label(source)
        )),
        ContentBlock::Link { uri, name, .. } => {
            text(format!("[resource: {}{uri}]", name.as_ref().map(|n| format!("{n} at ")).unwrap_or_default()))
        }
        ContentBlock::Resource { uri, text: Some(t), .. } => text(format!("Contents of {uri}:\n{t}")),
        ContentBlock::Resource { uri, .. } => text(format!("[binary resource {uri} not shown]")),
        ContentBlock::Data { data } => text(data.to_string()),
        ContentBlock::Redacted => None,
    }
}

fn source_label(s: &MediaSource) -> String {
    match s {
        MediaSource::Base64 { media_type, .. } => format!("inline {media_type}"),
        MediaSource::Url { url } => url.clone(),
        MediaSource::File { file_id } => format!("file {file_id}"),
        MediaSource::Text { media_type, .. } => format!("inline {media_type}"),
    }
}

fn result_text(content: &[ContentBlock]) -> Vec<ToolResultContent> {
    let text = gateway_core::content::plain_text(content);
    vec![ToolResultContent::Text { text }]
}

fn push(msgs: &mut Vec<Message>, role: Role, mut content: Vec<Block>) {
    if content.is_empty() {
        return;
    }
    match msgs.last_mut() {
        Some(last) if last.role == role => last.content.append(&mut content),
        _ => msgs.push(Message { role, content }),
    }
}

/// Puts a tool result right after the assistant message holding its call, ahead of any user
/// text there: the API wants every result in the message that immediately follows its call,
/// and a user message committed mid-turn may sit between them in the log.
fn place_result(msgs: &mut Vec<Message>, tool_use_id: &str, result: Block) {
    let Some(i) = msgs.iter().rposition(|m| {
        m.role == Role::Assistant
            && m.content.iter().any(|b| matches!(b, Block::ToolUse { id, .. } if id == tool_use_id))
    }) else {
        return; // a result for a call this view does not hold: nothing to answer
    };
    match msgs.get_mut(i + 1) {
        Some(next) if next.role == Role::User => {
            let at = next.content.iter().take_while(|b| matches!(b, Block::ToolResult { .. })).count();
            next.content.insert(at, result);
        }
        _ => msgs.insert(i + 1, Message { role: Role::User, content: vec![result] }),
    }
}

/// How the model is shown a compaction's summary.
fn summary_text(summary: &str) -> String {
    format!("[The earlier part of this conversation was compacted. Its summary:]\n\n{summary}")
}

/// The conversation of `view` in Messages API form, without the model's reasoning.
pub fn messages(view: &[Event]) -> Vec<Message> {
    messages_with(view, &|_, _| None, false)
}

/// [`messages`], with an MCP tool's calls named as the tool was offered this run
/// (`offered(server, tool)`; None: its own name), so the model sees the names it was given;
/// with `thinking`, the model's sealed reasoning goes back where it came, first in its
/// assistant turn, exactly as received (the API checks it; without thinking it has no use).
///
/// After a compaction, the model sees its summary first, in place of every event it covers.
pub fn messages_with(view: &[Event], offered: &dyn Fn(&str, &str) -> Option<String>, thinking: bool) -> Vec<Message> {
    let mut msgs: Vec<Message> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let compacted = view.iter().rev().find_map(|e| match &e.payload {
        EventPayload::ContextCompacted { summary, through } => Some((summary, *through)),
        _ => None,
    });
    let mut summarised = 0;
    if let Some((summary, through)) = compacted {
        push(&mut msgs, Role::User, vec![Block::Text { text: summary_text(summary) }]);
        summarised = through;
    }
    for e in view.iter().filter(|e| e.seq > summarised) {
        match &e.payload {
            EventPayload::UserMessage { content } => push(&mut msgs, Role::User, blocks(content)),
            EventPayload::AgentMessage { content } => push(&mut msgs, Role::Assistant, blocks(content)),
            EventPayload::AgentThinking { text, seal: Some(seal) } if thinking => {
                let block = match seal {
                    ThinkingSeal::Signature(signature) => {
                        Block::Thinking { thinking: text.clone().unwrap_or_default(), signature: signature.clone() }
                    }
                    ThinkingSeal::Redacted(data) => Block::RedactedThinking { data: data.clone() },
                };
                push(&mut msgs, Role::Assistant, vec![block]);
            }
            EventPayload::ToolUse { name, input, origin, .. } => {
                let name = match origin {
                    ToolOrigin::Mcp { server } => offered(server, name).unwrap_or_else(|| name.clone()),
                    _ => name.clone(),
                };
                push(
                    &mut msgs,
                    Role::Assistant,
                    vec![Block::ToolUse { id: e.id.to_string(), name, input: input.clone() }],
                )
            }
            EventPayload::ToolResult { tool_use_id, content, is_error, .. }
            | EventPayload::ClientToolResult { tool_use_id, content, is_error, .. } => {
                let id = tool_use_id.to_string();
                if answered.insert(id.clone()) {
                    let result = Block::ToolResult {
                        tool_use_id: id.clone(),
                        content: result_text(content),
                        is_error: *is_error,
                    };
                    place_result(&mut msgs, &id, result);
                }
            }
            _ => {}
        }
    }
    // Calls that never got an answer (an interrupted or abandoned turn) still need one.
    let unanswered: Vec<String> = msgs
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } if !answered.contains(id) => Some(id.clone()),
            _ => None,
        })
        .collect();
    for id in unanswered {
        let result = Block::ToolResult {
            tool_use_id: id.clone(),
            content: vec![ToolResultContent::Text { text: "This tool call was not completed.".into() }],
            is_error: true,
        };
        place_result(&mut msgs, &id, result);
    }
    // The API wants a user message first.
    while msgs.first().is_some_and(|m| m.role == Role::Assistant) {
        msgs.remove(0);
    }
    msgs
}

/// The tools an agent offers the model: its enabled built-ins and its custom tools.
pub fn tool_definitions(agent: &AgentSpec) -> Vec<ToolDefinition> {
    let enabled: HashSet<&str> = agent.enabled_builtin_tools().into_iter().map(|(n, _)| n).collect();
    let mut out: Vec<ToolDefinition> = gateway_sandbox::builtin_tool_definitions()
        .into_iter()
        .filter(|d| enabled.contains(d.name))
        .map(|d| ToolDefinition {
            name: d.name.to_owned(),
            description: d.description.to_owned(),
            input_schema: d.input_schema.as_object().cloned().unwrap_or_default(),
        })
        .collect();
    for t in &agent.tools {
        if let ToolSpec::Custom { name, description, input_schema } = t {
            out.push(ToolDefinition {
                name: name.clone(),
                description: description.clone(),
                input_schema: input_schema.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::event::{ToolOrigin, ToolPermission};
    use gateway_core::{EventId, SessionId, Timestamp};

    fn ev(seq: u64, payload: EventPayload) -> Event {
        Event {
            id: EventId::new(),
            session_id: SessionId::new(),
            seq,
            created_at: Timestamp(0),
            run_id: None,
            epoch: None,
            payload,
        }
    }

    fn user(seq: u64, t: &str) -> Event {
        ev(seq, EventPayload::UserMessage { content: vec![ContentBlock::text(t)] })
    }

    fn tool_use(seq: u64) -> Event {
        ev(
            seq,
            EventPayload::ToolUse {
                name: "bash".into(),
                input: Default::default(),
                origin: ToolOrigin::Builtin,
                permission: ToolPermission::Allow,
                policy: None,
            },
        )
    }

    fn result(seq: u64, of: &Event, text: &str) -> Event {
        ev(
            seq,
            EventPayload::ToolResult {
                tool_use_id: of.id.clone(),
                origin: ToolOrigin::Builtin,
                content: vec![ContentBlock::text(text)],
                is_error: false,
            },
        )
    }

    #[test]
    fn results_follow_their_call_even_when_a_user_message_came_between() {
        let call = tool_use(2);
        let view = vec![user(1, "do it"), call.clone(), user(3, "also this"), result(4, &call, "ok")];
        let msgs = messages(&view);
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1].role, Role::Assistant);
        assert!(
            matches!(&msgs[2].content[0], Block::ToolResult { tool_use_id, .. } if *tool_use_id == call.id.to_string())
        );
        assert!(matches!(&msgs[2].content[1], Block::Text { text } if text == "also this"));
    }

    #[test]
    fn unanswered_calls_get_an_error_result_and_roles_alternate() {
        let call = tool_use(2);
        let view = vec![
            user(1, "a"),
            ev(2, EventPayload::AgentMessage { content: vec![ContentBlock::text("thinking")] }),
            call.clone(),
            user(4, "interrupting"),
        ];
        let msgs = messages(&view);
        let roles: Vec<Role> = msgs.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![Role::User, Role::Assistant, Role::User]);
        assert!(matches!(&msgs[2].content[0], Block::ToolResult { is_error: true, .. }));
        assert!(matches!(&msgs[2].content[1], Block::Text { .. }));
    }
}
