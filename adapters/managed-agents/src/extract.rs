//! Request extraction: JSON bodies with errors that name the problem, resource ids in the
//! path, and the query-string conventions of the official SDKs (`key[]=v` arrays,
//! `created_at[gte]=…` ranges).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use gateway_core::{
    AgentId, ApiKeyId, CredentialId, EnvironmentId, FileId, ResourceId, SessionId, SkillId, SkillVersionId, Timestamp,
    VaultId, WebhookId, WorkId,
};
use gateway_store::TimeRange;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Largest request body accepted (the official API's limit).
pub const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// A JSON body. Malformed JSON and shape errors are 400s naming the problem and its path;
/// bodies over the limit are 413.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(BODY_LIMIT)
            } else {
                ApiError::invalid(format!("could not read the request body: {e}"))
            }
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid("the request body is empty; a JSON object was expected"));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::invalid(format!("malformed JSON in the request body: {inner}"))
        } else if path == "." || path.is_empty() {
            ApiError::invalid(format!("invalid request body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid request body at `{path}`: {inner}"))
        }
    })
}

/// The kinds of id a request path names, with the words their "not found" answer uses.
pub trait PathKind: std::str::FromStr {
    /// What the id names, as the message says it (`session`, `skill version`).
    const KIND: &'static str;
    /// The error code of the answer (`session_not_found`).
    const CODE: &'static str;
}

macro_rules! path_kinds {
    ($($id:ty => $kind:literal, $code:literal;)*) => {$(
        impl PathKind for $id {
            const KIND: &'static str = $kind;
            const CODE: &'static str = $code;
        }
    )*};
}

path_kinds! {
    AgentId => "agent", "agent_not_found";
    ApiKeyId => "environment key", "environment_key_not_found";
    EnvironmentId => "environment", "environment_not_found";
    FileId => "file", "file_not_found";
    ResourceId => "session resource", "session_resource_not_found";
    SessionId => "session", "session_not_found";
    SkillId => "skill", "skill_not_found";
    SkillVersionId => "skill version", "skill_not_found";
    WebhookId => "webhook endpoint", "webhook_not_found";
    WorkId => "work item", "work_not_found";
    VaultId => "vault", "vault_not_found";
    CredentialId => "vault credential", "credential_not_found";
}

/// Parses a path id of the expected kind. Ids are opaque to clients, so a malformed one is
/// answered as any unknown one: not found.
pub fn path_id<T: PathKind>(raw: &str) -> Result<T, ApiError> {
    raw.parse::<T>().map_err(|_| ApiError::not_found(format!("{} {raw:?} not found", T::KIND)).code(T::CODE))
}

/// The one id of a route's path (`/v1/agents/{id}`), parsed as [`path_id`] does.
pub struct PathId<T>(pub T);

impl<S: Send + Sync, T: PathKind> FromRequestParts<S> for PathId<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("the request path cannot be read: {}", e.body_text())))?;
        path_id(&raw).map(PathId)
    }
}

/// The two ids of a nested route's path (`/v1/vaults/{id}/credentials/{id}`), each parsed as
/// [`path_id`] does, the outer one first.
pub struct PathIds<A, B>(pub A, pub B);

impl<S: Send + Sync, A: PathKind, B: PathKind> FromRequestParts<S> for PathIds<A, B> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((outer, inner)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("the request path cannot be read: {}", e.body_text())))?;
        Ok(PathIds(path_id(&outer)?, path_id(&inner)?))
    }
}

/// The decoded query string, keeping repeated keys.
#[derive(Debug, Default, Clone)]
pub struct QueryParams(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        if raw.len() > 64 * 1024 {
            return Err(ApiError::invalid("query string too long"));
        }
        let pairs = url_pairs(raw);
        if pairs.len() > 512 {
            return Err(ApiError::invalid("too many query parameters"));
        }
        Ok(QueryParams(pairs))
    }
}

/// `application/x-www-form-urlencoded` pairs (`+` is a space, `%XX` escapes).
fn url_pairs(raw: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

impl QueryParams {
    /// The single value of `key` (the last one if repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every value of `key[]` (and, tolerantly, of a plain repeated `key`).
    pub fn all(&self, key: &str) -> Vec<&str> {
        let bracketed = format!("{key}[]");
        self.0.iter().filter(|(k, _)| *k == bracketed || k == key).map(|(_, v)| v.as_str()).collect()
    }

    pub fn bool(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some("false") | Some("0") => Ok(false),
            Some(other) => {
                Err(ApiError::invalid(format!("query parameter {key} must be true or false, not {other:?}")))
            }
        }
    }

    pub fn limit(&self, default: u32, max: u32) -> Result<u32, ApiError> {
        match self.get("limit") {
            None | Some("") => Ok(default),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::invalid(format!("limit must be an integer from 1 to {max}, not {v:?}"))),
            },
        }
    }

    /// `created_at[gt|gte|lt|lte]` as RFC 3339 times.
    pub fn created(&self) -> Result<TimeRange, ApiError> {
        let time = |k: &str| -> Result<Option<Timestamp>, ApiError> {
            match self.get(k) {
                None | Some("") => Ok(None),
                Some(v) => Timestamp::parse_rfc3339(v)
                    .map(Some)
                    .ok_or_else(|| ApiError::invalid(format!("{k} must be an RFC 3339 timestamp, not {v:?}"))),
            }
        };
        Ok(TimeRange {
            gt: time("created_at[gt]")?,
            gte: time("created_at[gte]")?,
            lt: time("created_at[lt]")?,
            lte: time("created_at[lte]")?,
        })
    }
}

/// A multipart body that cannot be read (uploads of files and skills).
pub fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::invalid(format!("the multipart body cannot be read: {}", e.body_text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_conventions_of_the_sdks() {
        let q = QueryParams(url_pairs(
            "types%5B%5D=agent.message&types[]=session.status_idle&created_at%5Bgte%5D=2026-01-01T00%3A00%3A00Z&limit=5&beta=true",
        ));
        assert_eq!(q.all("types"), vec!["agent.message", "session.status_idle"]);
        assert_eq!(q.limit(20, 100).unwrap(), 5);
        assert!(q.created().unwrap().gte.is_some());
        assert!(QueryParams(url_pairs("limit=101")).limit(20, 100).is_err());
        assert_eq!(url_pairs("q=a+b%2Cc%zz%"), vec![("q".to_owned(), "a b,c%zz%".to_owned())]);
    }
}
