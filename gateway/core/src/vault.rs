//! Vaults: write-only credentials a session names, each for one MCP server the gateway calls on
//! the session's behalf (DESIGN §2 "Vault"). What a credential is *for* (its server, its kind,
//! how it is refreshed) may be read back; what it *holds* ([`CredentialSecret`]) is only ever
//! stored sealed and opened where the server is called.
//!
//! The rules every face and the tool loop share live here: how a server URL is normalized, and
//! which credential of a session's vaults answers for a server.

use serde::{Deserialize, Serialize};

use crate::session::Secret;
use crate::{CredentialId, Metadata, Timestamp, VaultId};

/// The most vaults one session names.
pub const MAX_SESSION_VAULTS: usize = 16;
/// The most live (unarchived) credentials one vault holds.
pub const MAX_VAULT_CREDENTIALS: u64 = 256;
/// Longest server or token endpoint URL.
pub const MAX_URL: usize = 2048;
/// Longest secret (token, refresh token, client secret).
pub const MAX_SECRET: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VaultSpec {
    pub display_name: String,
    #[serde(default)]
    pub metadata: Metadata,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vault {
    pub id: VaultId,
    pub spec: VaultSpec,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived_at: Option<Timestamp>,
}

/// How the gateway authenticates to a server with a credential, without the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CredentialAuth {
    /// A fixed bearer token.
    StaticBearer { server_url: String },
    /// An OAuth access token, refreshed through its token endpoint when `refresh` is set.
    #[serde(rename = "oauth")]
    OAuth {
        server_url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at: Option<Timestamp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refresh: Option<OAuthRefresh>,
    },
}

impl CredentialAuth {
    /// The server the credential answers for, as given (see [`normalize_server_url`]).
    pub fn server_url(&self) -> &str {
        match self {
            CredentialAuth::StaticBearer { server_url } | CredentialAuth::OAuth { server_url, .. } => server_url,
        }
    }

    /// The kind's name, stable across updates (a credential's kind never changes).
    pub fn kind(&self) -> &'static str {
        match self {
            CredentialAuth::StaticBearer { .. } => "static_bearer",
            CredentialAuth::OAuth { .. } => "oauth",
        }
    }
}

/// How an OAuth access token is refreshed (RFC 6749 §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthRefresh {
    pub client_id: String,
    pub token_endpoint: String,
    pub client_auth: ClientAuth,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// How the client authenticates to the token endpoint (RFC 6749 §2.3.1); the client secret,
/// if any, is part of the [`CredentialSecret`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    None,
    ClientSecretBasic,
    ClientSecretPost,
}

/// What a credential holds: written, sealed, opened only to call its server or token endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialSecret {
    /// The bearer or access token.
    pub token: Secret,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Secret>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default)]
    pub metadata: Metadata,
    pub auth: CredentialAuth,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub id: CredentialId,
    pub vault_id: VaultId,
    pub spec: CredentialSpec,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub archived_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UrlError(pub String);

/// The form two server URLs are compared in: scheme and host lowercased, the scheme's default
/// port dropped, the fragment dropped, trailing slashes of the path dropped; path and query
/// kept as written (servers may treat their case as significant). Only `http` and `https`
/// URLs with a host and no user information are accepted.
pub fn normalize_server_url(raw: &str) -> Result<String, UrlError> {
    let raw = raw.trim();
    if raw.len() > MAX_URL {
        return Err(UrlError(format!("a server URL holds at most {MAX_URL} bytes")));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError("a server URL holds no spaces or control characters".into()));
    }
    let (scheme, rest) =
        raw.split_once("://").ok_or_else(|| UrlError(format!("{raw:?} is not an absolute http(s) URL")))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => "443",
        "http" => "80",
        _ => return Err(UrlError(format!("{raw:?}: only http and https servers are supported"))),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    if authority.contains('@') {
        return Err(UrlError("a server URL carries no user information; put credentials in a vault".into()));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) =
                v6.split_once(']').ok_or_else(|| UrlError(format!("{raw:?}: unterminated IPv6 address")))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| UrlError(format!("{raw:?}: malformed port")))?),
            };
            (format!("[{}]", addr.to_ascii_lowercase()), port)
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (authority.to_ascii_lowercase(), None),
        },
    };
    if host.is_empty() || host == "[]" {
        return Err(UrlError(format!("{raw:?} names no host")));
    }
    let port = match port {
        Some(p) if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err() => {
            return Err(UrlError(format!("{raw:?}: malformed port")));
        }
        Some(p) if p.trim_start_matches('0') == default_port => None,
        Some(p) => Some(p.trim_start_matches('0').to_owned()),
        None => None,
    };
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let mut out = format!("{scheme}://{host}");
    if let Some(port) = port {
        out.push(':');
        out.push_str(&port);
    }
    out.push_str(path.trim_end_matches('/'));
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        out.push('?');
        out.push_str(q);
    }
    Ok(out)
}

/// The credential that answers for `server_url` among a session's vaults: the live credential
/// of the first vault in `order` (the session's `vault_ids`, highest priority first) whose
/// server URL normalizes to the same. `credentials` holds the vaults' live credentials in any
/// order. None: the server is called without authentication.
pub fn credential_for<'a>(
    order: &[VaultId],
    credentials: &'a [Credential],
    server_url: &str,
) -> Option<&'a Credential> {
    let want = normalize_server_url(server_url).ok()?;
    order.iter().find_map(|vault| {
        credentials.iter().find(|c| {
            &c.vault_id == vault
                && c.archived_at.is_none()
                && normalize_server_url(c.spec.auth.server_url()).is_ok_and(|u| u == want)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_normalize_to_one_form_and_bad_ones_are_refused() {
        for (raw, want) in [
            ("https://MCP.Example.com/mcp/", "https://mcp.example.com/mcp"),
            ("HTTPS://mcp.example.com:443/mcp", "https://mcp.example.com/mcp"),
            ("https://mcp.example.com:8443/mcp#frag", "https://mcp.example.com:8443/mcp"),
            ("http://mcp.example.com:80", "http://mcp.example.com"),
            ("http://[::1]:8080/Mcp?x=1", "http://[::1]:8080/Mcp?x=1"),
            ("https://h/", "https://h"),
            ("  https://h/a//  ", "https://h/a"),
        ] {
            assert_eq!(normalize_server_url(raw).as_deref(), Ok(want), "{raw}");
        }
        for bad in [
            "ftp://h/x",
            "h/x",
            "https://user:pw@h/x",
            "https:///x",
            "https://h:99999/",
            "https://h:/",
            "https://[::1/",
            "https://h/a b",
        ] {
            assert!(normalize_server_url(bad).is_err(), "{bad}");
        }
        assert!(normalize_server_url(&format!("https://h/{}", "a".repeat(MAX_URL))).is_err());
    }

    fn credential(vault: &VaultId, url: &str, archived: bool) -> Credential {
        Credential {
            id: CredentialId::new(),
            vault_id: vault.clone(),
            spec: CredentialSpec {
                display_name: None,
                metadata: Metadata::new(),
                auth: CredentialAuth::StaticBearer { server_url: url.into() },
            },
            created_at: Timestamp(0),
            updated_at: Timestamp(0),
            archived_at: archived.then_some(Timestamp(1)),
        }
    }

    #[test]
    fn the_first_vault_in_order_with_a_live_match_answers() {
        let (a, b) = (VaultId::new(), VaultId::new());
        let creds = [
            credential(&b, "https://mcp.example.com/mcp", false),
            credential(&a, "https://MCP.example.com/mcp/", true),
            credential(&a, "https://other.example.com/mcp", false),
        ];
        // a's match is archived, so b's answers although a comes first.
        let got = credential_for(&[a.clone(), b.clone()], &creds, "https://mcp.example.com:443/mcp").unwrap();
        assert_eq!(got.vault_id, b);
        let creds2 = [creds[0].clone(), credential(&a, "https://mcp.example.com/mcp", false)];
        assert_eq!(
            credential_for(&[a.clone(), b.clone()], &creds2, "https://mcp.example.com/mcp").unwrap().vault_id,
            a
        );
        assert_eq!(
            credential_for(&[b.clone(), a.clone()], &creds2, "https://mcp.example.com/mcp").unwrap().vault_id,
            b
        );
        assert!(credential_for(&[a], &creds, "https://nowhere.example.com/mcp").is_none());
        assert!(credential_for(&[], &creds, "https://mcp.example.com/mcp").is_none());
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let s = CredentialSecret {
            token: Secret("tok-123".into()),
            refresh_token: Some(Secret("ref-456".into())),
            client_secret: None,
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("tok-123") && !shown.contains("ref-456"), "{shown}");
    }
}
