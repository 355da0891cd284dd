//! Context compaction: when the next request would not fit the serving model's context
//! window, the conversation's older part is summarised by the model, and the summary is
//! committed as an event (`context_compacted`) that names the last event it covers. The model
//! is then shown the summary in place of those events ([`crate::conversation`]); the log keeps
//! them, so every face, and a gateway restarted mid-session, shows the same history.
//!
//! What fits is estimated, not counted: providers tokenise differently and counting would
//! cost a request. The estimate errs large (a token per four characters of the request's JSON).

use gateway_core::event::{Event, EventKind, EventPayload};
use gateway_models::{Block, Message, ModelRequest, Role};

/// What the model is asked for when it summarises.
const INSTRUCTION: &str = "The conversation above is about to be compacted: write a summary that will replace it. \
Keep what is needed to continue the work: the user's goals and instructions, what has been done (files, commands \
and their results), decisions taken, open questions, and the next steps. Write only the summary; do not call tools.";

/// A generous estimate of the tokens `request` reads.
pub fn estimate_tokens(request: &ModelRequest) -> u64 {
    let chars = json_len(&request.messages) + json_len(&request.tools) + request.system.as_ref().map_or(0, String::len);
    (chars as u64).div_ceil(4)
}

/// Whether `request` leaves too little of `window` for its answer (its `max_tokens`, or a
/// quarter of the window when that is less).
pub fn too_long(request: &ModelRequest, window: u64) -> bool {
    let room = u64::from(request.max_tokens).min(window / 4);
    estimate_tokens(request).saturating_add(room) > window
}

/// The seq through which the next compaction summarises `view`: everything before the
/// conversation's last clean boundary (the latest user message or model request, so the part
/// kept whole never splits a tool call from its result). `None` when nothing new precedes
/// that boundary: compacting again could not make the request smaller.
pub fn cut(view: &[Event]) -> Option<u64> {
    let since = view
        .iter()
        .rev()
        .find_map(|e| match &e.payload {
            EventPayload::ContextCompacted { through, .. } => Some(*through),
            _ => None,
        })
        .unwrap_or(0);
    let live: Vec<&Event> = view.iter().filter(|e| e.seq > since && e.kind() != EventKind::ContextCompacted).collect();
    // A round starts at its request's start, when output follows (a summary's own request
    // is followed by none).
    let output = |e: Option<&&Event>| {
        e.is_some_and(|e| matches!(e.kind(), EventKind::AgentMessage | EventKind::AgentThinking | EventKind::ToolUse))
    };
    let boundary = (0..live.len()).rev().find(|&i| match live[i].kind() {
        EventKind::UserMessage => true,
        EventKind::ModelRequestStarted => output(live.get(i + 1)),
        _ => false,
    })?;
    let conversational = |e: &&&Event| {
        matches!(
            e.kind(),
            EventKind::UserMessage
                | EventKind::AgentMessage
                | EventKind::ToolUse
                | EventKind::ToolResult
                | EventKind::ClientToolResult
        )
    };
    live[..boundary].iter().any(|e| conversational(&e)).then(|| live[boundary - 1].seq)
}

/// The request that asks the model to summarise `conversation` (the part a compaction
/// covers, an earlier summary first), with the tools the conversation's calls name (the API
/// wants them defined) and no extended thinking.
pub fn summary_request(base: &ModelRequest, mut conversation: Vec<Message>) -> ModelRequest {
    let instruction = Block::Text { text: INSTRUCTION.to_owned() };
    match conversation.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(instruction),
        _ => conversation.push(Message { role: Role::User, content: vec![instruction] }),
    }
    ModelRequest {
        model: base.model.clone(),
        system: base.system.clone(),
        messages: conversation,
        tools: base.tools.clone(),
        max_tokens: base.max_tokens.saturating_sub(base.thinking.unwrap_or(0)).max(1024),
        thinking: None,
    }
}

/// The summary a response holds: its text.
pub fn summary_of(content: &[Block]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The length of a value's JSON.
fn json_len<T: serde::Serialize>(v: &T) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::event::{NewEvent, Usage};
    use gateway_core::{EventId, SessionId, Timestamp};

    fn log(payloads: Vec<EventPayload>) -> Vec<Event> {
        let session = SessionId::new();
        payloads
            .into_iter()
            .enumerate()
            .map(|(i, payload)| {
                let n = NewEvent::new(payload);
                Event {
                    id: n.id,
                    session_id: session.clone(),
                    seq: i as u64 + 1,
                    created_at: Timestamp(0),
                    run_id: None,
                    epoch: None,
                    payload: n.payload,
                }
            })
            .collect()
    }

    fn user(t: &str) -> EventPayload {
        EventPayload::UserMessage { content: vec![gateway_core::content::ContentBlock::text(t)] }
    }

    fn agent(t: &str) -> EventPayload {
        EventPayload::AgentMessage { content: vec![gateway_core::content::ContentBlock::text(t)] }
    }

    fn ended() -> EventPayload {
        EventPayload::ModelRequestEnded { start_id: EventId::new(), is_error: false, usage: Usage::default() }
    }

    #[test]
    fn the_cut_keeps_the_last_turn_or_round_whole() {
        // Two turns: the cut keeps the second's user message.
        let view = log(vec![user("a"), EventPayload::ModelRequestStarted {}, agent("b"), ended(), user("c")]);
        assert_eq!(cut(&view), Some(4));
        // Mid-turn: the cut keeps the last round (its call and its result).
        let mut payloads = vec![user("a"), EventPayload::ModelRequestStarted {}, agent("b"), ended()];
        payloads.push(EventPayload::ModelRequestStarted {});
        payloads.push(agent("calling"));
        let view = log(payloads);
        assert_eq!(cut(&view), Some(4));
        // Nothing before the only boundary: nothing to compact.
        assert_eq!(cut(&log(vec![user("huge")])), None);
        // After a compaction through 4, nothing new precedes the boundary at 5.
        let mut payloads = vec![user("a"), EventPayload::ModelRequestStarted {}, agent("b"), ended(), user("c")];
        payloads.push(EventPayload::ContextCompacted { summary: "s".into(), through: 4 });
        assert_eq!(cut(&log(payloads.clone())), None);
        // A summary's own request is no round: it does not make the message before it cuttable.
        payloads.splice(5..5, [EventPayload::ModelRequestStarted {}, ended()]);
        assert_eq!(cut(&log(payloads)), None);
    }

    #[test]
    fn a_request_is_too_long_when_its_answer_would_not_fit() {
        let request = ModelRequest {
            model: "m".into(),
            system: Some("x".repeat(4000)),
            messages: vec![],
            tools: vec![],
            max_tokens: 8192,
            thinking: None,
        };
        assert!(estimate_tokens(&request) >= 1000);
        assert!(too_long(&request, 1200), "1000 tokens and a quarter of 1200 for the answer");
        assert!(!too_long(&request, 2000));
    }
}
