//! Vaults and credentials (`client.beta.vaults`, `.credentials`): request parsing and the
//! response shapes. Secrets (`token`, `access_token`, `refresh_token`, `client_secret`) are
//! read here and never written back: every response is built from the spec, which has none.

use std::collections::BTreeMap;

use gateway_core::session::Secret;
use gateway_core::vault::{
    ClientAuth, Credential, CredentialAuth, CredentialSecret, CredentialSpec, MAX_SECRET, MAX_URL, OAuthRefresh, Vault,
    VaultSpec, normalize_server_url,
};
use gateway_core::{Metadata, Timestamp};
use gateway_services::vaults::{ProbeOutcome, RefreshOutcome, SecretPatch, Validation, ValidationStatus};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Patch, check_metadata, check_text, merge_metadata, opt_time, time};
use crate::error::ApiError;

const MAX_NAME: usize = 255;
/// Longest client id, scope or resource indicator.
const MAX_FIELD: usize = 1024;

#[derive(Debug, Deserialize)]
pub struct VaultCreate {
    pub display_name: String,
    pub metadata: Option<Metadata>,
}

impl VaultCreate {
    pub fn into_spec(self) -> Result<VaultSpec, ApiError> {
        check_text("display_name", &self.display_name, MAX_NAME)?;
        let metadata = self.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        Ok(VaultSpec { display_name: self.display_name, metadata })
    }
}

#[derive(Debug, Deserialize)]
pub struct VaultUpdate {
    pub display_name: Option<String>,
    pub metadata: Option<BTreeMap<String, Option<String>>>,
}

impl VaultUpdate {
    pub fn apply(self, current: &VaultSpec) -> Result<VaultSpec, ApiError> {
        let mut spec = current.clone();
        if let Some(name) = self.display_name {
            check_text("display_name", &name, MAX_NAME)?;
            spec.display_name = name;
        }
        if let Some(patch) = self.metadata {
            spec.metadata = merge_metadata(&spec.metadata, patch)?;
        }
        Ok(spec)
    }
}

pub fn vault_out(v: &Vault) -> Value {
    json!({
        "id": v.id,
        "type": "vault",
        "display_name": v.spec.display_name,
        "metadata": v.spec.metadata,
        "created_at": time(v.created_at),
        "updated_at": time(v.updated_at),
        "archived_at": opt_time(v.archived_at),
    })
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TokenEndpointAuthIn {
    None,
    ClientSecretBasic { client_secret: String },
    ClientSecretPost { client_secret: String },
}

#[derive(Debug, Deserialize)]
pub struct RefreshIn {
    client_id: String,
    refresh_token: String,
    token_endpoint: String,
    token_endpoint_auth: TokenEndpointAuthIn,
    resource: Option<String>,
    scope: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AuthIn {
    StaticBearer {
        token: String,
        mcp_server_url: String,
    },
    McpOauth {
        access_token: String,
        mcp_server_url: String,
        expires_at: Option<String>,
        refresh: Option<RefreshIn>,
    },
    /// Read only to refuse it by name (see [`not_injected`]).
    EnvironmentVariable {},
}

#[derive(Debug, Deserialize)]
pub struct CredentialCreate {
    pub auth: AuthIn,
    pub display_name: Option<String>,
    pub metadata: Option<Metadata>,
}

/// Why `environment_variable` credentials are refused (docs/adr/0024).
fn not_injected() -> ApiError {
    ApiError::invalid(
        "environment_variable credentials are not supported by this gateway: it injects vault credentials only into \
         the MCP server connections it makes itself, never into a sandbox's processes; use static_bearer or mcp_oauth",
    )
    .code("credential_type_not_supported")
}

fn secret(field: &str, v: String) -> Result<Secret, ApiError> {
    if v.is_empty() || v.len() > MAX_SECRET || v.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!("{field} must be 1 to {MAX_SECRET} bytes without control characters")));
    }
    Ok(Secret(v))
}

fn server_url(v: &str) -> Result<String, ApiError> {
    normalize_server_url(v).map_err(|e| ApiError::invalid(format!("mcp_server_url: {}", e.0)))?;
    Ok(v.trim().to_owned())
}

fn field(name: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(v) if v.len() > MAX_FIELD => Err(ApiError::invalid(format!("{name} holds at most {MAX_FIELD} bytes"))),
        v => Ok(v.filter(|v| !v.is_empty())),
    }
}

/// An expiry, which must be in the future when it is given.
fn expiry(v: Option<String>) -> Result<Option<Timestamp>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let at = Timestamp::parse_rfc3339(&v)
        .ok_or_else(|| ApiError::invalid(format!("expires_at {v:?} is not an RFC 3339 timestamp")))?;
    // Checked against this process's clock: a token a client says expires now or earlier is
    // refused whatever clock the store keeps; a skew of seconds only shifts the edge.
    #[allow(clippy::disallowed_methods)]
    let now = Timestamp::now_local();
    if at <= now {
        return Err(ApiError::invalid("expires_at must be in the future"));
    }
    Ok(Some(at))
}

fn token_endpoint(v: &str) -> Result<String, ApiError> {
    if v.len() > MAX_URL || !(v.starts_with("https://") || v.starts_with("http://")) {
        return Err(ApiError::invalid("refresh.token_endpoint must be an http(s) URL"));
    }
    Ok(v.to_owned())
}

fn name(v: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(n) = &v {
        check_text("display_name", n, MAX_NAME)?;
    }
    Ok(v)
}

impl CredentialCreate {
    pub fn into_parts(self) -> Result<(CredentialSpec, CredentialSecret), ApiError> {
        let metadata = self.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        let display_name = name(self.display_name)?;
        let (auth, secret) = match self.auth {
            AuthIn::StaticBearer { token, mcp_server_url } => (
                CredentialAuth::StaticBearer { server_url: server_url(&mcp_server_url)? },
                CredentialSecret { token: secret("token", token)?, refresh_token: None, client_secret: None },
            ),
            AuthIn::McpOauth { access_token, mcp_server_url, expires_at, refresh } => {
                let token = secret("access_token", access_token)?;
                let (refresh, refresh_token, client_secret) = match refresh {
                    None => (None, None, None),
                    Some(r) => {
                        let (client_auth, client_secret) = match r.token_endpoint_auth {
                            TokenEndpointAuthIn::None => (ClientAuth::None, None),
                            TokenEndpointAuthIn::ClientSecretBasic { client_secret } => {
                                (ClientAuth::ClientSecretBasic, Some(secret("client_secret", client_secret)?))
                            }
                            TokenEndpointAuthIn::ClientSecretPost { client_secret } => {
                                (ClientAuth::ClientSecretPost, Some(secret("client_secret", client_secret)?))
                            }
                        };
                        let client_id = field("refresh.client_id", Some(r.client_id))?
                            .ok_or_else(|| ApiError::invalid("refresh.client_id must not be empty"))?;
                        let refresh = OAuthRefresh {
                            client_id,
                            token_endpoint: token_endpoint(&r.token_endpoint)?,
                            client_auth,
                            resource: field("refresh.resource", r.resource)?,
                            scope: field("refresh.scope", r.scope)?,
                        };
                        (Some(refresh), Some(secret("refresh_token", r.refresh_token)?), client_secret)
                    }
                };
                (
                    CredentialAuth::OAuth {
                        server_url: server_url(&mcp_server_url)?,
                        expires_at: expiry(expires_at)?,
                        refresh,
                    },
                    CredentialSecret { token, refresh_token, client_secret },
                )
            }
            AuthIn::EnvironmentVariable {} => return Err(not_injected()),
        };
        Ok((CredentialSpec { display_name, metadata, auth }, secret))
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TokenEndpointAuthUpdate {
    ClientSecretBasic { client_secret: Option<String> },
    ClientSecretPost { client_secret: Option<String> },
}

#[derive(Debug, Deserialize)]
pub struct RefreshUpdate {
    refresh_token: Option<String>,
    scope: Option<String>,
    token_endpoint_auth: Option<TokenEndpointAuthUpdate>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AuthUpdate {
    StaticBearer {
        token: Option<String>,
    },
    McpOauth {
        access_token: Option<String>,
        #[serde(default)]
        expires_at: Patch<String>,
        refresh: Option<RefreshUpdate>,
    },
    EnvironmentVariable {},
}

#[derive(Debug, Deserialize)]
pub struct CredentialUpdate {
    pub auth: Option<AuthUpdate>,
    #[serde(default)]
    pub display_name: Patch<String>,
    pub metadata: Option<BTreeMap<String, Option<String>>>,
}

impl CredentialUpdate {
    /// The new spec and the secrets to replace. A credential keeps its kind and its server;
    /// a new client secret needs a client that authenticates with one.
    pub fn apply(self, current: &CredentialSpec) -> Result<(CredentialSpec, SecretPatch), ApiError> {
        let mut spec = current.clone();
        spec.display_name = name(self.display_name.apply(spec.display_name))?;
        if let Some(patch) = self.metadata {
            spec.metadata = merge_metadata(&spec.metadata, patch)?;
        }
        let mut secrets = SecretPatch::default();
        let kind_changed = |sent: &str| {
            ApiError::invalid(format!("auth.type {sent} does not match the credential's type, which cannot change"))
        };
        match (self.auth, &mut spec.auth) {
            (None, _) => {}
            (Some(AuthUpdate::EnvironmentVariable {}), _) => return Err(not_injected()),
            (Some(AuthUpdate::StaticBearer { token }), CredentialAuth::StaticBearer { .. }) => {
                secrets.token = token.map(|t| secret("token", t)).transpose()?;
            }
            (
                Some(AuthUpdate::McpOauth { access_token, expires_at, refresh }),
                CredentialAuth::OAuth { expires_at: at, refresh: stored, .. },
            ) => {
                secrets.token = access_token.map(|t| secret("access_token", t)).transpose()?;
                match expires_at {
                    Patch::Keep => {}
                    Patch::Clear => *at = None,
                    Patch::Set(v) => *at = expiry(Some(v))?,
                }
                if let Some(r) = refresh {
                    let stored = stored
                        .as_mut()
                        .ok_or_else(|| ApiError::invalid("the credential has no refresh configuration to update"))?;
                    secrets.refresh_token = r.refresh_token.map(|t| secret("refresh_token", t)).transpose()?;
                    if let Some(scope) = r.scope {
                        stored.scope = field("refresh.scope", Some(scope))?;
                    }
                    let client_secret = match r.token_endpoint_auth {
                        None => None,
                        Some(TokenEndpointAuthUpdate::ClientSecretBasic { client_secret })
                        | Some(TokenEndpointAuthUpdate::ClientSecretPost { client_secret }) => client_secret,
                    };
                    if let Some(s) = client_secret {
                        if stored.client_auth == ClientAuth::None {
                            return Err(ApiError::invalid(
                                "the credential's client authenticates without a secret; a client_secret cannot be set",
                            ));
                        }
                        secrets.client_secret = Some(secret("client_secret", s)?);
                    }
                }
            }
            (Some(AuthUpdate::StaticBearer { .. }), _) => return Err(kind_changed("static_bearer")),
            (Some(AuthUpdate::McpOauth { .. }), _) => return Err(kind_changed("mcp_oauth")),
        }
        Ok((spec, secrets))
    }
}

fn token_endpoint_auth_out(auth: ClientAuth) -> Value {
    json!({"type": match auth {
        ClientAuth::None => "none",
        ClientAuth::ClientSecretBasic => "client_secret_basic",
        ClientAuth::ClientSecretPost => "client_secret_post",
    }})
}

fn auth_out(auth: &CredentialAuth) -> Value {
    match auth {
        CredentialAuth::StaticBearer { server_url } => json!({"type": "static_bearer", "mcp_server_url": server_url}),
        CredentialAuth::OAuth { server_url, expires_at, refresh } => {
            let mut v = json!({"type": "mcp_oauth", "mcp_server_url": server_url});
            if let Some(at) = expires_at {
                v["expires_at"] = time(*at);
            }
            if let Some(r) = refresh {
                v["refresh"] = json!({
                    "client_id": r.client_id,
                    "token_endpoint": r.token_endpoint,
                    "token_endpoint_auth": token_endpoint_auth_out(r.client_auth),
                    "resource": r.resource,
                    "scope": r.scope,
                });
            }
            v
        }
    }
}

/// An HTTP error response as the SDK's validation shows it (the gateway keeps no body of it).
fn http_response(status: u16) -> Value {
    json!({"status_code": status, "content_type": "", "body": "", "body_truncated": false})
}

pub fn validation_out(v: &Validation) -> Value {
    let mcp_probe = match &v.probe {
        None => Value::Null,
        Some(ProbeOutcome::Refused { status }) => {
            json!({"method": "initialize", "http_response": http_response(*status)})
        }
        Some(_) => json!({"method": "initialize", "http_response": null}),
    };
    let refresh = match &v.refresh {
        None => Value::Null,
        Some(RefreshOutcome::Succeeded) => json!({"status": "succeeded", "http_response": null}),
        Some(RefreshOutcome::Failed { status }) => json!({"status": "failed", "http_response": http_response(*status)}),
        Some(RefreshOutcome::ConnectError) => json!({"status": "connect_error", "http_response": null}),
        Some(RefreshOutcome::NoRefreshToken) => json!({"status": "no_refresh_token", "http_response": null}),
    };
    json!({
        "type": "vault_credential_validation",
        "vault_id": v.vault_id,
        "credential_id": v.credential_id,
        "status": match v.status {
            ValidationStatus::Valid => "valid",
            ValidationStatus::Invalid => "invalid",
            ValidationStatus::Unknown => "unknown",
        },
        "has_refresh_token": v.has_refresh_token,
        "mcp_probe": mcp_probe,
        "refresh": refresh,
        "validated_at": time(v.validated_at),
    })
}

pub fn credential_out(c: &Credential) -> Value {
    json!({
        "id": c.id,
        "type": "vault_credential",
        "vault_id": c.vault_id,
        "display_name": c.spec.display_name,
        "metadata": c.spec.metadata,
        "auth": auth_out(&c.spec.auth),
        "created_at": time(c.created_at),
        "updated_at": time(c.updated_at),
        "archived_at": opt_time(c.archived_at),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn create(auth: Value) -> Result<(CredentialSpec, CredentialSecret), ApiError> {
        serde_json::from_value::<CredentialCreate>(json!({"auth": auth})).unwrap().into_parts()
    }

    /// What was written comes back without any secret, whatever the kind.
    #[test]
    fn credentials_come_back_without_their_secrets() {
        let (spec, secret) = create(json!({"type": "mcp_oauth", "access_token": "AT-1",
            "mcp_server_url": "https://mcp.example.com/mcp", "expires_at": "2999-01-01T00:00:00Z",
            "refresh": {"client_id": "cid", "refresh_token": "RT-1", "token_endpoint": "https://auth.example.com/token",
                "token_endpoint_auth": {"type": "client_secret_post", "client_secret": "CS-1"}, "scope": "read"}}))
        .unwrap();
        assert_eq!(secret.token, Secret("AT-1".into()));
        let c = Credential {
            id: gateway_core::CredentialId::new(),
            vault_id: gateway_core::VaultId::new(),
            spec,
            created_at: Timestamp(0),
            updated_at: Timestamp(0),
            archived_at: None,
        };
        let out = credential_out(&c).to_string();
        for s in ["AT-1", "RT-1", "CS-1"] {
            assert!(!out.contains(s), "{s} in {out}");
        }
        assert!(out.contains("client_secret_post") && out.contains("\"scope\":\"read\""), "{out}");
    }

    #[test]
    fn bad_credentials_are_refused_naming_why() {
        let e = create(json!({"type": "environment_variable", "secret_name": "X", "secret_value": "v"})).unwrap_err();
        assert!(e.message.contains("environment_variable"), "{}", e.message);
        let e = create(json!({"type": "static_bearer", "token": "t", "mcp_server_url": "ftp://x"})).unwrap_err();
        assert!(e.message.contains("mcp_server_url"), "{}", e.message);
        let e = create(json!({"type": "static_bearer", "token": "", "mcp_server_url": "https://x"})).unwrap_err();
        assert!(e.message.contains("token"), "{}", e.message);
        let e = create(json!({"type": "mcp_oauth", "access_token": "a", "mcp_server_url": "https://x",
            "expires_at": "2001-01-01T00:00:00Z"}))
        .unwrap_err();
        assert!(e.message.contains("future"), "{}", e.message);
    }

    #[test]
    fn updates_keep_the_kind_and_patch_secrets() {
        let (spec, _) =
            create(json!({"type": "static_bearer", "token": "t", "mcp_server_url": "https://x/mcp"})).unwrap();
        let update = |v: Value| serde_json::from_value::<CredentialUpdate>(v).unwrap().apply(&spec);
        let (same, patch) = update(json!({"display_name": "n", "metadata": {"k": "v"}})).unwrap();
        assert_eq!((same.display_name.as_deref(), patch.is_empty()), (Some("n"), true));
        let (_, patch) = update(json!({"auth": {"type": "static_bearer", "token": "t2"}})).unwrap();
        assert_eq!(patch.token, Some(Secret("t2".into())));
        let e = update(json!({"auth": {"type": "mcp_oauth", "access_token": "a"}})).unwrap_err();
        assert!(e.message.contains("cannot change"), "{}", e.message);
    }
}
