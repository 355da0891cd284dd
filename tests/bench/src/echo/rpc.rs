//! JSON-RPC 2.0 envelopes and the A2A v1.0 error codes the echo agent (and the durable A2A
//! baseline in front of it) answer with.

use serde_json::{Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A2A `TaskNotFoundError`.
pub const TASK_NOT_FOUND: i64 = -32001;

#[derive(Debug)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error(id: &Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
}

/// A parsed request: its id (echoed back), method and params.
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

pub fn parse(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| (Value::Null, RpcError::new(PARSE_ERROR, e.to_string())))?;
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    if v.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::new(INVALID_REQUEST, "jsonrpc must be \"2.0\"")));
    }
    let method = v
        .get("method")
        .and_then(Value::as_str)
        .ok_or_else(|| (id.clone(), RpcError::new(INVALID_REQUEST, "method is required")))?;
    Ok(Request { method: method.to_owned(), params: v.get("params").cloned().unwrap_or(Value::Null), id })
}

/// The concatenated text parts of `params.message`, and its contextId if any.
pub fn message_text(params: &Value) -> Result<(String, Option<String>), RpcError> {
    let m = params.get("message").ok_or_else(|| RpcError::new(INVALID_PARAMS, "params.message is required"))?;
    let parts = m
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "message.parts is required"))?;
    let text: String = parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect();
    let context = m.get("contextId").and_then(Value::as_str).filter(|c| !c.is_empty()).map(str::to_owned);
    Ok((text, context))
}

pub fn task_id(params: &Value) -> Result<&str, RpcError> {
    params.get("id").and_then(Value::as_str).ok_or_else(|| RpcError::new(INVALID_PARAMS, "params.id is required"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_keep_their_id() {
        let r = parse(br#"{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"parts":[{"text":"a"},{"text":"b"}]}}}"#).unwrap();
        assert_eq!((r.id.clone(), r.method.as_str()), (json!(7), "SendMessage"));
        assert_eq!(message_text(&r.params).unwrap().0, "ab");
        let (id, e) = parse(br#"{"jsonrpc":"1.0","id":"x","method":"m"}"#).err().unwrap();
        assert_eq!((id, e.code), (json!("x"), INVALID_REQUEST));
        assert_eq!(parse(b"{").err().unwrap().1.code, PARSE_ERROR);
    }
}
