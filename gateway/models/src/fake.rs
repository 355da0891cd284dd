//! The offline, deterministic model: the gateway's default, and the brain of the test stub.
//!
//! [`FakeModel`] never talks to a network. It answers from a small script driven by the
//! conversation, so that tests (and people trying the gateway without an API key) can make it
//! say something, call a tool, or loop, just by what they type:
//!
//! - **After a tool result.** If the last message is a user message holding a `tool_result`
//!   block (the model's tool call was answered) and no text of the user's own (a message sent
//!   while the call ran, or after an interrupt, is newer than the result: the script answers
//!   that text instead), the reply is the text `done: <the first 200 characters of that
//!   result's text>` (the result's text parts concatenated; characters, not bytes), with stop
//!   reason `end_turn`. Exception: when the last user text (below) is a `repeat:` command, the
//!   tool is called again.
//! - **Otherwise** the script reads the *last user text*: the last text block of the most
//!   recent user message that has any text. (Not all its text blocks: the native loop merges
//!   consecutive user inputs into one message, and the fake answers the latest of them.)
//!   Blocks starting with `<system-reminder>`, which Claude Code adds next to the user's
//!   words, are passed over unless the message has nothing else.
//!   - `tool:<name> <json object>` → one `tool_use` block calling `<name>` with that input,
//!     stop reason `tool_use`.
//!   - `custom:<name> <json object>` → exactly the same. The model does not know which tools
//!     are built in; the gateway decides that from the name.
//!   - `repeat:<name> <json object>` → a `tool_use` every time, even after results, so tests
//!     can reach the gateway's limit on tool rounds.
//!   - Commands chained on lines starting `then ` (`tool:a {…}\nthen tool:b {…}`) are issued
//!     one per round of the same turn: the first, then after its result the second, and so on;
//!     the `done:` reply comes after the last one's result. (A turn whose tools change between
//!     rounds needs a model that calls the new one.)
//!   - If the text after the name is not a JSON object, the reply is the text
//!     `fake model: invalid JSON input for tool <name>: <parse error>` with `end_turn`
//!     (and `fake model: missing tool name` when the name is empty).
//!   - `drip:<ms> <text>` → the text `<text>`, `end_turn`, streamed one word per chunk with
//!     `<ms>` milliseconds (at most 10 000) before each chunk after the first: a model that
//!     takes its time, for tests and benchmarks of streaming.
//!   - Anything else → the text `echo: <last user text>`, `end_turn`.
//!
//!   A command is recognised at the start of that text (leading whitespace ignored).
//! - **Tool-use ids** are `toolu_fake_<k>`, where `k` is the number of assistant messages in
//!   the conversation plus one: deterministic, and unique within a conversation.
//! - **Streaming** reports each text block as a `TextStart` followed by at least two
//!   `TextDelta` chunks (for texts of two characters or more), split on character boundaries;
//!   the chunks concatenate to the block's text. [`FakeModel::with_chunk_delay`] sleeps
//!   between chunks so tests can interrupt a response mid-stream.
//! - **Usage** is deterministic: `input_tokens` = characters of the request's system prompt
//!   and message contents / 4, `output_tokens` = characters of the reply / 4 (each at least 1).
//!   A tool call counts its name plus its input serialized as JSON.

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Block, JsonObject, Message, ModelClient, ModelError, ModelRequest, ModelResponse, Role, StopReason, StreamEvent,
    ToolResultContent, Usage,
};

/// How many characters of a tool result the `done:` reply quotes.
const DONE_QUOTE_CHARS: usize = 200;

/// The offline, deterministic model. See the [module documentation](self) for its script.
#[derive(Debug, Clone, Default)]
pub struct FakeModel {
    chunk_delay: Duration,
}

impl FakeModel {
    pub fn new() -> Self {
        Self::default()
    }

    /// A fake model that sleeps `delay` between streamed text chunks.
    pub fn with_chunk_delay(delay: Duration) -> Self {
        Self { chunk_delay: delay }
    }

    /// The scripted reply to `request`: a pure function of the conversation.
    pub fn respond(&self, request: &ModelRequest) -> ModelResponse {
        let (content, stop_reason) = script(&request.messages);
        let usage = Usage {
            input_tokens: tokens(request_chars(request)),
            output_tokens: tokens(content.iter().map(block_chars).sum()),
            ..Usage::default()
        };
        ModelResponse { content, stop_reason, usage }
    }
}

#[async_trait]
impl ModelClient for FakeModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        Ok(self.respond(request))
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ModelResponse, ModelError> {
        let response = self.respond(request);
        let drip = drip(&request.messages).map(|(delay, _)| delay);
        for (index, block) in response.content.iter().enumerate() {
            let Block::Text { text } = block else { continue };
            on_event(StreamEvent::TextStart { index });
            let (chunks, delay) = match drip {
                Some(delay) if text.contains(' ') => (text.split_inclusive(' ').collect(), delay),
                _ => (text_chunks(text), self.chunk_delay),
            };
            for (n, chunk) in chunks.into_iter().enumerate() {
                if n > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                on_event(StreamEvent::TextDelta { index, text: chunk.to_owned() });
            }
        }
        Ok(response)
    }
}

/// Splits `text` into the chunks a stream delivers: at least two when it has two characters
/// or more (so consumers always see a real stream), at most eight, cut on char boundaries.
pub(crate) fn text_chunks(text: &str) -> Vec<&str> {
    let chars = text.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let pieces = (chars / 24).clamp(2, 8).min(chars);
    let mut chunks = Vec::with_capacity(pieces);
    let mut start = 0;
    let mut boundaries = text.char_indices().map(|(at, _)| at);
    let mut consumed = 0;
    for k in 1..pieces {
        let target = chars * k / pieces;
        // `boundaries` yields the byte offset of every char in order; skip to char `target`.
        let Some(at) = boundaries.nth(target - consumed) else { break };
        consumed = target + 1;
        chunks.push(&text[start..at]);
        start = at;
    }
    chunks.push(&text[start..]);
    chunks
}

/// The script proper: the reply's content and stop reason.
fn script(messages: &[Message]) -> (Vec<Block>, StopReason) {
    let (last_text, command) = last_user_command(messages);
    let tool_id = format!("toolu_fake_{}", messages.iter().filter(|m| m.role == Role::Assistant).count() + 1);

    if let Some(result) = answered_tool_result(messages) {
        if let Some(Command { kind: Kind::Repeat, name, input: Ok(input) }) = command
            && !name.is_empty()
        {
            return tool_use(tool_id, name, input);
        }
        if let Some(step) = last_text.split("\nthen ").nth(rounds_since_user_text(messages))
            && let Some(Command { name, input: Ok(input), .. }) = parse_command(step)
            && !name.is_empty()
        {
            return tool_use(tool_id, name, input);
        }
        let quoted: String = result.chars().take(DONE_QUOTE_CHARS).collect();
        return text_reply(format!("done: {quoted}"));
    }

    if let Some((_, text)) = drip(messages) {
        return text_reply(text.to_owned());
    }
    match command {
        Some(Command { name: "", .. }) => text_reply("fake model: missing tool name".to_owned()),
        Some(Command { name, input: Ok(input), .. }) => tool_use(tool_id, name, input),
        Some(Command { name, input: Err(error), .. }) => {
            text_reply(format!("fake model: invalid JSON input for tool {name}: {error}"))
        }
        None => text_reply(format!("echo: {last_text}")),
    }
}

/// The longest pause `drip:` takes between chunks.
const DRIP_MAX: Duration = Duration::from_secs(10);

/// A `drip:<ms> <text>` command in the last user text, unless a tool result is being answered:
/// the pause between chunks and the text to say.
fn drip(messages: &[Message]) -> Option<(Duration, &str)> {
    if answered_tool_result(messages).is_some() {
        return None;
    }
    let (text, _) = last_user_command(messages);
    let (ms, said) = text.trim_start().strip_prefix("drip:")?.split_once(' ')?;
    Some((Duration::from_millis(ms.parse().ok()?).min(DRIP_MAX), said))
}

fn text_reply(text: String) -> (Vec<Block>, StopReason) {
    (vec![Block::Text { text }], StopReason::EndTurn)
}

fn tool_use(id: String, name: &str, input: JsonObject) -> (Vec<Block>, StopReason) {
    (vec![Block::ToolUse { id, name: name.to_owned(), input }], StopReason::ToolUse)
}

/// The text of the first tool result in the last message, if that message is a user message
/// answering a tool call and holds no text of the user's (system reminders aside).
fn answered_tool_result(messages: &[Message]) -> Option<String> {
    let last = messages.last().filter(|m| m.role == Role::User)?;
    let user_text = last.content.iter().any(|b| matches!(b, Block::Text { text } if !is_reminder(text)));
    if user_text {
        return None;
    }
    last.content.iter().find_map(|block| match block {
        Block::ToolResult { content, .. } => Some(
            content
                .iter()
                .map(|part| match part {
                    ToolResultContent::Text { text } => text.as_str(),
                })
                .collect(),
        ),
        _ => None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tool,
    Repeat,
}

/// A `tool:`/`custom:`/`repeat:` command found in the user's text.
struct Command<'a> {
    kind: Kind,
    name: &'a str,
    input: Result<JsonObject, String>,
}

/// The last user text and the command it holds, if any.
fn last_user_command(messages: &[Message]) -> (&str, Option<Command<'_>>) {
    let texts: Vec<&str> = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|block| match block {
                    Block::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .find(|texts| !texts.is_empty())
        .unwrap_or_default();
    let text = texts.iter().rev().find(|text| !is_reminder(text)).or(texts.last()).copied().unwrap_or_default();
    (text, parse_command(text.split("\nthen ").next().unwrap_or_default()))
}

/// How many assistant messages follow the last user message holding text: the rounds of a
/// chained command already issued.
fn rounds_since_user_text(messages: &[Message]) -> usize {
    messages
        .iter()
        .rev()
        .take_while(|m| {
            !(m.role == Role::User && m.content.iter().any(|b| matches!(b, Block::Text { text } if !is_reminder(text))))
        })
        .filter(|m| m.role == Role::Assistant)
        .count()
}

/// Claude Code's `<system-reminder>` blocks sit beside the user's words; they are not them.
fn is_reminder(text: &str) -> bool {
    text.trim_start().starts_with("<system-reminder>")
}

fn parse_command(text: &str) -> Option<Command<'_>> {
    let text = text.trim_start();
    let (kind, rest) = [("tool:", Kind::Tool), ("custom:", Kind::Tool), ("repeat:", Kind::Repeat)]
        .into_iter()
        .find_map(|(prefix, kind)| text.strip_prefix(prefix).map(|rest| (kind, rest)))?;
    let (name, json) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let input = serde_json::from_str::<JsonObject>(json.trim()).map_err(|e| e.to_string());
    Some(Command { kind, name, input })
}

fn tokens(chars: usize) -> u64 {
    u64::try_from(chars / 4).unwrap_or(u64::MAX).max(1)
}

fn request_chars(request: &ModelRequest) -> usize {
    let system = request.system.as_deref().map_or(0, |s| s.chars().count());
    system + request.messages.iter().flat_map(|m| &m.content).map(block_chars).sum::<usize>()
}

fn block_chars(block: &Block) -> usize {
    match block {
        Block::Text { text } | Block::Thinking { thinking: text, .. } => text.chars().count(),
        Block::Image { .. } | Block::RedactedThinking { .. } => 0,
        Block::ToolUse { name, input, .. } => {
            name.chars().count() + serde_json::to_string(input).map_or(0, |json| json.chars().count())
        }
        Block::ToolResult { content, .. } => content
            .iter()
            .map(|part| match part {
                ToolResultContent::Text { text } => text.chars().count(),
            })
            .sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_on_char_boundaries_and_concatenate() {
        for text in ["ab", "abc", "échos 🌍 ünïcode", &"x".repeat(1000), &"é".repeat(49)] {
            let chunks = text_chunks(text);
            assert!(chunks.len() >= 2, "{text:?} gave {chunks:?}");
            assert!(chunks.len() <= 8);
            assert!(chunks.iter().all(|c| !c.is_empty()), "{chunks:?}");
            assert_eq!(chunks.concat(), text);
        }
        assert_eq!(text_chunks("a"), vec!["a"]);
        assert!(text_chunks("").is_empty());
    }

    fn user_texts(texts: &[&str]) -> Vec<Message> {
        let content = texts.iter().map(|text| Block::Text { text: (*text).to_owned() }).collect();
        vec![Message { role: Role::User, content }]
    }

    #[tokio::test]
    async fn drip_says_its_text_one_word_per_chunk_with_its_pauses() {
        let request = ModelRequest {
            model: "fake".into(),
            system: None,
            messages: user_texts(&["drip:30 one two three"]),
            tools: vec![],
            max_tokens: 100,
            thinking: None,
        };
        let seen = std::sync::Mutex::new(Vec::new());
        let started = std::time::Instant::now();
        let response = FakeModel::new()
            .stream(&request, &|e| {
                if let StreamEvent::TextDelta { text, .. } = e {
                    seen.lock().unwrap().push(text);
                }
            })
            .await
            .unwrap();
        assert_eq!(seen.into_inner().unwrap(), ["one ", "two ", "three"]);
        assert!(started.elapsed() >= Duration::from_millis(60), "two pauses of 30 ms");
        assert_eq!(response.content, text_reply("one two three".into()).0);
        // Not a drip: a bad pause, or a tool result being answered.
        assert_eq!(script(&user_texts(&["drip:x one"])).0, text_reply("echo: drip:x one".into()).0);
    }

    #[test]
    fn the_latest_text_block_decides() {
        // Two user inputs merged into one message: the later one is answered.
        let (content, stop) = script(&user_texts(&["tool:bash {}", "hello"]));
        assert_eq!((content, stop), text_reply("echo: hello".into()));
        let (content, stop) = script(&user_texts(&["hello", "tool:Bash {\"command\":\"ls\"}"]));
        assert_eq!(stop, StopReason::ToolUse);
        assert!(matches!(&content[..], [Block::ToolUse { name, .. }] if name == "Bash"));
    }

    #[test]
    fn chained_commands_are_issued_one_per_round() {
        let round = |k: usize| {
            let call = Block::ToolUse { id: format!("t{k}"), name: "x".into(), input: JsonObject::new() };
            let result = Block::ToolResult {
                tool_use_id: format!("t{k}"),
                content: vec![ToolResultContent::Text { text: format!("r{k}") }],
                is_error: false,
            };
            [
                Message { role: Role::Assistant, content: vec![call] },
                Message { role: Role::User, content: vec![result] },
            ]
        };
        let mut messages = user_texts(&["tool:grow {\"name\":\"sprout\"}\nthen tool:sprout {}"]);
        let (content, _) = script(&messages);
        assert!(
            matches!(&content[..], [Block::ToolUse { name, input, .. }] if name == "grow" && input["name"] == "sprout")
        );
        messages.extend(round(1));
        let (content, stop) = script(&messages);
        assert_eq!(stop, StopReason::ToolUse);
        assert!(matches!(&content[..], [Block::ToolUse { name, input, .. }] if name == "sprout" && input.is_empty()));
        messages.extend(round(2));
        assert_eq!(script(&messages), text_reply("done: r2".into()));
        // A single command is as before: done after its result.
        let mut single = user_texts(&["tool:grow {}"]);
        single.extend(round(1));
        assert_eq!(script(&single), text_reply("done: r1".into()));
    }

    #[test]
    fn system_reminders_are_passed_over() {
        let reminder = "<system-reminder>be nice</system-reminder>";
        for texts in [[reminder, "tool:Bash {}"], ["tool:Bash {}", reminder]] {
            let (_, stop) = script(&user_texts(&texts));
            assert_eq!(stop, StopReason::ToolUse, "{texts:?}");
        }
        let (content, _) = script(&user_texts(&[reminder]));
        assert_eq!(content, vec![Block::Text { text: format!("echo: {reminder}") }]);
    }

    #[test]
    fn the_newest_user_text_wins_over_a_tool_result_beside_it() {
        // An interrupted call's result and the message sent after the interrupt share the
        // user message that follows the call: the message is what is answered.
        let call = Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse { id: "t1".into(), name: "bash".into(), input: JsonObject::new() }],
        };
        let result = Block::ToolResult {
            tool_use_id: "t1".into(),
            content: vec![ToolResultContent::Text { text: "[cancelled: killed]".into() }],
            is_error: true,
        };
        let answered = |extra: Vec<Block>| {
            let mut content = vec![result.clone()];
            content.extend(extra);
            vec![
                Message { role: Role::User, content: vec![Block::Text { text: "tool:bash {}".into() }] },
                call.clone(),
                Message { role: Role::User, content },
            ]
        };
        let (content, _) = script(&answered(vec![Block::Text { text: "what now?".into() }]));
        assert_eq!(content, vec![Block::Text { text: "echo: what now?".into() }]);
        let (content, _) = script(&answered(vec![]));
        assert_eq!(content, vec![Block::Text { text: "done: [cancelled: killed]".into() }]);
        let reminder = Block::Text { text: "<system-reminder>x</system-reminder>".into() };
        let (content, _) = script(&answered(vec![reminder]));
        assert_eq!(
            content,
            vec![Block::Text { text: "done: [cancelled: killed]".into() }],
            "a reminder is not the user"
        );
    }

    #[test]
    fn a_missing_tool_name_is_reported() {
        let messages = vec![Message { role: Role::User, content: vec![Block::Text { text: "tool: {}".into() }] }];
        let (content, _) = script(&messages);
        assert_eq!(content, vec![Block::Text { text: "fake model: missing tool name".into() }]);
    }
}
