//! Turning a Chat Completions server's failures into typed [`ModelError`]s.
//!
//! OpenAI answers an error with an HTTP status and `{"error":{"message","type","param","code"}}`;
//! mid-stream (status 200 already sent) only the body arrives, as a `data:` chunk holding
//! `error`. Servers imitating the API differ in the envelope: vLLM has sent the error object
//! at the top level (`{"object":"error","message",...,"code":400}`), Ollama's native routes a
//! bare string (`{"error":"..."}`); all three are read. The status decides the kind (the
//! shared rule, [`http::status_error`]); `insufficient_quota`, which OpenAI sends with a 429,
//! is refined to a permanent failure, because no wait ends it.

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::ModelError;
use crate::http::{self, Hint};

/// What an error body says.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ErrorObject {
    pub message: String,
    /// `type`, e.g. `invalid_request_error`, `server_error`, `insufficient_quota`.
    pub kind: String,
    /// `code`: a string (`rate_limit_exceeded`, `invalid_api_key`), a number (vLLM puts the
    /// HTTP status there), or absent.
    pub code: Option<Value>,
}

impl ErrorObject {
    /// The error object of a body, if it has one in any of the known envelopes.
    pub fn from_body(body: &Value) -> Option<Self> {
        let text = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        match body.get("error") {
            Some(Value::String(message)) => Some(Self { message: message.clone(), ..Self::default() }),
            Some(error @ Value::Object(_)) => Some(Self {
                message: text(error, "message"),
                kind: text(error, "type"),
                code: error.get("code").filter(|c| !c.is_null()).cloned(),
            }),
            _ if body.get("object").and_then(Value::as_str) == Some("error") => Some(Self {
                message: text(body, "message"),
                kind: text(body, "type"),
                code: body.get("code").filter(|c| !c.is_null()).cloned(),
            }),
            _ => None,
        }
    }

    fn names(&self) -> [&str; 2] {
        [self.kind.as_str(), self.code.as_ref().and_then(Value::as_str).unwrap_or_default()]
    }

    fn hint(&self) -> Hint {
        if self.names().contains(&"insufficient_quota") { Hint::Permanent } else { Hint::None }
    }

    /// The message, or failing that whatever names the error.
    fn into_message(self) -> String {
        let [kind, code] = self.names();
        [self.message.as_str(), code, kind].into_iter().find(|s| !s.is_empty()).unwrap_or("unknown error").to_owned()
    }
}

/// The error for an unsuccessful HTTP response.
pub(crate) fn from_status(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> ModelError {
    let error = serde_json::from_slice::<Value>(body).ok().as_ref().and_then(ErrorObject::from_body);
    let (message, hint) = match error {
        Some(error) => {
            let hint = error.hint();
            (error.into_message(), hint)
        }
        None => (http::quote_body(status, body), Hint::None),
    };
    http::status_error(status, message, http::retry_after(headers), hint)
}

/// The error for an `error` chunk inside a stream, whose HTTP status was 200: the status is
/// the one the error names (vLLM's numeric `code`), or the one OpenAI uses for its type.
pub(crate) fn from_stream_error(error: ErrorObject) -> ModelError {
    let named = |names: &[&str]| error.names().iter().any(|n| names.contains(n));
    let numeric = error.code.as_ref().and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
    let code = match numeric.filter(|c| (400..=599).contains(c)) {
        Some(code) => code,
        None if named(&["rate_limit_exceeded", "rate_limit_error", "insufficient_quota", "requests", "tokens"]) => 429,
        None if named(&["authentication_error", "invalid_api_key"]) => 401,
        None if named(&["permission_error"]) => 403,
        None if named(&["not_found_error", "model_not_found"]) => 404,
        None if named(&["invalid_request_error", "context_length_exceeded"]) => 400,
        // `server_error` and anything newer: an internal failure of the server.
        None => 500,
    };
    let hint = error.hint();
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    http::status_error(status, error.into_message(), None, hint)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(code: u16, body: Value) -> ModelError {
        from_status(StatusCode::from_u16(code).unwrap(), &HeaderMap::new(), body.to_string().as_bytes())
    }

    #[test]
    fn every_envelope_gives_its_message() {
        let openai = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                       "param": null, "code": "invalid_api_key"}});
        assert_eq!(
            at(401, openai),
            ModelError::Authentication { status: 401, message: "Incorrect API key provided".into() }
        );
        let vllm = json!({"object": "error", "message": "max_tokens is too large", "type": "BadRequestError",
                          "param": null, "code": 400});
        assert_eq!(
            at(400, vllm),
            ModelError::InvalidRequest { status: 400, message: "max_tokens is too large".into() }
        );
        let ollama = json!({"error": "model \"llama9\" not found, try pulling it first"});
        assert!(
            matches!(at(404, ollama), ModelError::InvalidRequest { status: 404, message } if message.contains("llama9"))
        );
        let bare = json!({"error": {"message": "", "type": "server_error"}});
        assert_eq!(
            at(500, bare),
            ModelError::Server { status: 500, message: "server_error".into(), retry_after: None }
        );
    }

    #[test]
    fn an_exhausted_quota_is_not_worth_a_retry() {
        let quota = json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                                      "param": null, "code": "insufficient_quota"}});
        let error = at(429, quota);
        assert!(matches!(error, ModelError::InvalidRequest { status: 429, .. }), "{error:?}");
        assert!(!error.is_transient());
        let limited =
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}});
        assert!(at(429, limited).is_transient());
    }

    #[test]
    fn stream_errors_map_to_kinds() {
        let event = |body: Value| from_stream_error(ErrorObject::from_body(&body).unwrap());
        let kind = |body: Value| event(body).kind();
        assert_eq!(kind(json!({"error": {"message": "m", "type": "server_error"}})), "server");
        assert_eq!(kind(json!({"error": {"message": "m", "type": "brand_new"}})), "server");
        assert_eq!(
            kind(json!({"error": {"message": "m", "type": "tokens", "code": "rate_limit_exceeded"}})),
            "rate_limited"
        );
        assert_eq!(kind(json!({"error": {"message": "m", "type": "invalid_request_error"}})), "invalid_request");
        assert_eq!(kind(json!({"error": {"message": "m", "code": "invalid_api_key"}})), "authentication");
        assert_eq!(
            event(json!({"object": "error", "message": "m", "type": "ServiceUnavailableError", "code": 503})),
            ModelError::Server { status: 503, message: "m".into(), retry_after: None }
        );
    }
}
