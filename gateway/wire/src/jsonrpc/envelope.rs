//! JSON-RPC 2.0 envelopes one at a time, as an HTTP binding carries them: one request per body
//! and its one response, or one request sent and its response read. A protocol keeps its
//! method names, its error codes and what a refusal looks like to its clients; the envelope's
//! rules live here once:
//! - A request's members are read as raw text (borrowed from the body, not parsed into a
//!   tree), so its id is echoed byte for byte (a 40-digit integer, `1e400`) and its params are
//!   parsed once, by the protocol.
//! - A body that is not JSON is `-32700`; JSON that is not one request object (a batch, a
//!   member of the wrong type, a member given twice) is `-32600`.
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

/// The members of a request, each as raw text. Serde refuses a member given twice.
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
    /// `None` only when the member is absent (a notification); `null` is an id.
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn string_of(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// Reads one request from a body.
pub fn parse_request(body: &[u8]) -> Result<Request<'_>, Refused<'_>> {
    let refuse = |code, message: String, id| Refused { code, message, id };
    let null = RawValue::NULL;
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        let m = "the request must be one JSON-RPC object (batches are not supported)";
        return Err(refuse(code::INVALID_REQUEST, m.into(), null));
    }
    let members: Members<'_> = match serde_json::from_slice(body) {
        Ok(m) => m,
        Err(e) if e.classify() == Category::Data => {
            let m = format!("the request must be one JSON-RPC object: {e}");
            return Err(refuse(code::INVALID_REQUEST, m, null));
        }
        Err(e) => return Err(refuse(code::PARSE_ERROR, e.to_string(), null)),
    };
    if members.id.is_some_and(|id| !matches!(id.get().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n'))) {
        return Err(refuse(code::INVALID_REQUEST, "id must be a string, number or null".into(), null));
    }
    match (string_of(members.jsonrpc).as_deref(), string_of(members.method)) {
        (Some("2.0"), Some(method)) if method.len() <= MAX_METHOD_LEN => {
            Ok(Request { method, id: members.id, params: members.params })
        }
        _ => Err(refuse(
            code::INVALID_REQUEST,
            "expected jsonrpc \"2.0\" and a method".into(),
            members.id.unwrap_or(null),
        )),
    }
}

#[derive(Serialize)]
struct Response<'a, E> {
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
    serde_json::to_string(&Response { jsonrpc: "2.0", id, result, error })
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

/// The result of a received response, or its error.
pub fn read_response(envelope: &Value) -> Result<Value, Answer> {
    match envelope.get("error") {
        Some(e) if !e.is_null() => Err(Answer::Error(RpcError::from_wire(e))),
        _ => envelope.get("result").cloned().ok_or(Answer::NotAResponse),
    }
}
