//! Checking a credential against its server before a session needs it (`mcp_oauth_validate`):
//! the server is probed with the stored token (an MCP handshake and a tool listing, by whoever
//! implements [`ServerProbe`]: the tool loop's MCP client); a refusal is followed by one forced
//! refresh when the credential can refresh, and the probe is tried again with the new token.

use async_trait::async_trait;
use gateway_core::vault::{CredentialAuth, CredentialSecret};
use gateway_core::{CredentialId, Timestamp, VaultId};

use super::{RefreshError, VaultError, VaultService, open_secret};

/// How a server answered a probe with a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The handshake and the tool listing succeeded.
    Accepted,
    /// The server refused the credential (HTTP 401 or 403).
    Refused { status: u16 },
    /// Nothing usable came back (unreachable, refused by the SSRF rule, not MCP, timed out).
    Failed { message: String },
}

/// Tries a token against a server: the port the MCP client implements, so this service needs
/// no MCP of its own.
#[async_trait]
pub trait ServerProbe: Send + Sync {
    async fn probe(&self, url: &str, token: &str) -> ProbeOutcome;
}

/// The verdict on a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationStatus {
    /// The server accepted it (after a refresh, if one was needed).
    Valid,
    /// The server refused it and no refresh made it accepted.
    Invalid,
    /// The server could not be asked.
    Unknown,
}

/// What a forced refresh came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshOutcome {
    Succeeded,
    /// The token endpoint answered an error status.
    Failed {
        status: u16,
    },
    /// The token endpoint could not be reached (or was refused by the SSRF rule).
    ConnectError,
    NoRefreshToken,
}

/// The outcome of [`VaultService::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    pub vault_id: VaultId,
    pub credential_id: CredentialId,
    pub status: ValidationStatus,
    pub has_refresh_token: bool,
    /// The failing probe (the last one tried), or None when it succeeded.
    pub probe: Option<ProbeOutcome>,
    /// The refresh tried after a refusal, if one was.
    pub refresh: Option<RefreshOutcome>,
    pub validated_at: Timestamp,
}

impl VaultService {
    /// Probes the credential's server with its token; on a refusal, refreshes once (an OAuth
    /// credential with a refresh token) and probes again. The refreshed token is stored.
    pub async fn validate(
        &self,
        vault: &VaultId,
        id: &CredentialId,
        probe: &dyn ServerProbe,
    ) -> Result<Validation, VaultError> {
        let sealed = self.store().sealed_credential(vault, id).await?;
        let credential = sealed.credential;
        let secret: CredentialSecret = open_secret(self.secrets(), &sealed.sealed_secret)?;
        let url = credential.spec.auth.server_url().to_owned();
        let can_refresh = matches!(&credential.spec.auth, CredentialAuth::OAuth { refresh: Some(_), .. });
        let has_refresh_token = secret.refresh_token.as_ref().is_some_and(|t| !t.0.is_empty());
        let first = probe.probe(&url, &secret.token.0).await;
        let (status, probe_failure, refresh) = match first {
            ProbeOutcome::Accepted => (ValidationStatus::Valid, None, None),
            ProbeOutcome::Failed { .. } => (ValidationStatus::Unknown, Some(first), None),
            ProbeOutcome::Refused { .. } if !can_refresh || !has_refresh_token => {
                let refresh = can_refresh.then_some(RefreshOutcome::NoRefreshToken);
                (ValidationStatus::Invalid, Some(first), refresh)
            }
            ProbeOutcome::Refused { .. } => match self.refreshed(&credential, secret, true).await {
                Ok((_, fresh)) => match probe.probe(&url, &fresh.token.0).await {
                    ProbeOutcome::Accepted => (ValidationStatus::Valid, None, Some(RefreshOutcome::Succeeded)),
                    again @ ProbeOutcome::Refused { .. } => {
                        (ValidationStatus::Invalid, Some(again), Some(RefreshOutcome::Succeeded))
                    }
                    again => (ValidationStatus::Unknown, Some(again), Some(RefreshOutcome::Succeeded)),
                },
                Err(VaultError::Refresh { reason, .. }) => {
                    let outcome = match reason {
                        RefreshError::Refused { status, .. } => RefreshOutcome::Failed { status },
                        _ => RefreshOutcome::ConnectError,
                    };
                    (ValidationStatus::Invalid, Some(first), Some(outcome))
                }
                Err(other) => return Err(other),
            },
        };
        // When the verdict was given (this process's clock: it is a report, not a lease).
        #[allow(clippy::disallowed_methods)]
        let validated_at = Timestamp::now_local();
        Ok(Validation {
            vault_id: vault.clone(),
            credential_id: id.clone(),
            status,
            has_refresh_token,
            probe: probe_failure,
            refresh,
            validated_at,
        })
    }
}
