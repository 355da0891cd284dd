//! JSON-RPC 2.0 messages one at a time: how one is read (a line of the symmetric peer, or an
//! HTTP body) and how a request, notification or response is written. A protocol keeps its
//! method names, its error codes and what a refusal looks like to its clients; the message
//! rules live here once, for every reader:
//! - A message's members are read as raw text (borrowed from the line or body, not parsed into
//!   a tree), so an id is echoed byte for byte (a 40-digit integer, `1e400`) and params are
//!   parsed once, by whoever handles them.
//! - Text that is not JSON is `-32700`; JSON that is not one message object (a batch, a member
//!   of the wrong type, a member given twice, no `"jsonrpc": "2.0"`) is `-32600`.
//! - An id is a string, a number or `null`; a request without an `id` member is a
//!   notification (`"id": null` is an id, answered as such).
//! - A response read back is its `error` if that is an object, else its `result`; neither
//!   (`"error": null` alone included) is not a response.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::error::Category;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{RpcError, code};

/// The longest method name a request may carry.
pub const MAX_METHOD_LEN: usize = 100;

/// One request read from a body.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: String,
    /// `None` for a notification (no `id` member); an `id` of `null` is `Some`.
    pub id: Option<&'a RawValue>,
    /// The `params` member as sent, if any.
    pub params: Option<&'a RawValue>,
}

/// Why a body is not a request, with the id its error answer carries (`null` when the id could
/// not be read).
#[derive(Debug)]
pub struct Refused<'a> {
    /// [`code::PARSE_ERROR`] or [`code::INVALID_REQUEST`].
    pub code: i64,
    pub message: String,
    pub id: &'a RawValue,
}

impl Refused<'_> {
    pub fn is_parse_error(&self) -> bool {
        self.code == code::PARSE_ERROR
    }
}

/// One message read from a line or a body.
#[derive(Debug)]
pub enum Message<'a> {
    /// A request, or a notification when its `id` is `None`.
    Request(Request<'a>),
    /// An answer to a request this side sent.
    Response(Response<'a>),
}

/// An answer read back: its id and its `result`, or its `error` object.
#[derive(Debug)]
pub struct Response<'a> {
    pub id: &'a RawValue,
    pub outcome: Result<&'a RawValue, &'a RawValue>,
}

impl Response<'_> {
    /// The answer as the caller waiting for it sees it: the result, or the error object read
    /// as an [`RpcError`].
    pub fn answer(&self) -> Result<Value, RpcError> {
        let unreadable = |e: serde_json::Error| RpcError::internal(format!("an unreadable answer: {e}"));
        match self.outcome {
            Ok(result) => serde_json::from_str(result.get()).map_err(unreadable),
            Err(error) => Err(serde_json::from_str(error.get()).map_or_else(unreadable, |e| RpcError::from_wire(&e))),
        }
    }
}

/// The members of a message, each as raw text. Serde refuses a member given twice.
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
    /// `None` only when the member is absent (a notification); `null` is an id.
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    /// Present even when `null` (which is not a method: the message is refused).
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    /// Present (`null` included) in a successful response.
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    /// An error response's object; `"error": null` is no error.
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn string_of(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// Reads one message (a request, a notification or a response) from a line or a body.
pub fn parse_message(text: &[u8]) -> Result<Message<'_>, Refused<'_>> {
    let refuse = |code, message: String, id| Refused { code, message, id };
    let null = RawValue::NULL;
    // Read only on the way to a refusal: whether the text is JSON at all, within serde_json's
    // nesting limit (which a `Value` keeps and an ignored value does not).
    let not_json = |text: &[u8]| serde_json::from_slice::<Value>(text).err();
    if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        // An array is a batch only if it is JSON (100,000 brackets deep is not: a parse error).
        if let Some(e) = not_json(text) {
            return Err(refuse(code::PARSE_ERROR, format!("parse error: {e}"), null));
        }
        let m = "a message must be one JSON-RPC object (batches are not supported)";
        return Err(refuse(code::INVALID_REQUEST, m.into(), null));
    }
    let members: Members<'_> = match serde_json::from_slice(text) {
        Ok(m) => m,
        // Serde stops at the first member of the wrong type; text that is not JSON further on
        // is still a parse error.
        Err(e) if e.classify() == Category::Data && not_json(text).is_none() => {
            let m = format!("a message must be one JSON-RPC object: {e}");
            return Err(refuse(code::INVALID_REQUEST, m, null));
        }
        Err(e) => {
            let e = not_json(text).unwrap_or(e);
            return Err(refuse(code::PARSE_ERROR, format!("parse error: {e}"), null));
        }
    };
    if members.id.is_some_and(|id| !matches!(id.get().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n'))) {
        return Err(refuse(code::INVALID_REQUEST, "id must be a string, number or null".into(), null));
    }
    let id = members.id.unwrap_or(null);
    if string_of(members.jsonrpc).as_deref() != Some("2.0") {
        return Err(refuse(code::INVALID_REQUEST, "expected jsonrpc \"2.0\"".into(), id));
    }
    match (members.method, members.id, members.result, members.error) {
        (Some(method), ..) => match string_of(Some(method)) {
            Some(method) if method.len() <= MAX_METHOD_LEN => {
                Ok(Message::Request(Request { method, id: members.id, params: members.params }))
            }
            _ => Err(refuse(
                code::INVALID_REQUEST,
                format!("method must be a string of at most {MAX_METHOD_LEN} characters"),
                id,
            )),
        },
        (None, Some(id), _, Some(error)) if error.get() != "null" => {
            Ok(Message::Response(Response { id, outcome: Err(error) }))
        }
        (None, Some(id), Some(result), _) => Ok(Message::Response(Response { id, outcome: Ok(result) })),
        _ => Err(refuse(code::INVALID_REQUEST, "not a JSON-RPC 2.0 request, notification or response".into(), id)),
    }
}

/// Reads one request (or notification) from a body: a response is not one.
pub fn parse_request(body: &[u8]) -> Result<Request<'_>, Refused<'_>> {
    match parse_message(body)? {
        Message::Request(request) => Ok(request),
        Message::Response(r) => Err(Refused {
            code: code::INVALID_REQUEST,
            message: "expected a request: a method is missing".into(),
            id: r.id,
        }),
    }
}

/// A response as written.
#[derive(Serialize)]
struct Outgoing<'a, E> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a E>,
}

/// The text of a response to the request whose id is `id` (its raw text, echoed as is): its
/// result, or its error object (an [`RpcError`], or a protocol's own error value).
pub fn response<E: Serialize>(id: &RawValue, outcome: Result<&Value, &E>) -> String {
    let (result, error) = match outcome {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    serde_json::to_string(&Outgoing { jsonrpc: "2.0", id, result, error })
        .unwrap_or_else(|e| format!(r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#, id.get(), internal(&e)))
}

fn internal(e: &serde_json::Error) -> Value {
    json!({"code": code::INTERNAL_ERROR, "message": format!("could not serialize the answer: {e}")})
}

/// A request to send.
pub fn request(id: impl Serialize, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification to send.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// What a received response says, if it is one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Answer {
    /// The other side answered with an error object.
    #[error(transparent)]
    Error(RpcError),
    /// Neither an `error` object nor a `result`.
    #[error("not a JSON-RPC response: no result")]
    NotAResponse,
}

/// A response read for a peer that passes it on: its error as it was, or an internal error
/// saying there was none (the relay's and the editor face's MCP bridges answer so).
impl From<Answer> for RpcError {
    fn from(a: Answer) -> Self {
        match a {
            Answer::Error(e) => e,
            Answer::NotAResponse => RpcError::internal(a.to_string()),
        }
    }
}

/// The result of a received response, or its error.
pub fn read_response(envelope: &Value) -> Result<Value, Answer> {
    match envelope.get("error") {
        Some(e) if !e.is_null() => Err(Answer::Error(RpcError::from_wire(e))),
        _ => envelope.get("result").cloned().ok_or(Answer::NotAResponse),
    }
}
