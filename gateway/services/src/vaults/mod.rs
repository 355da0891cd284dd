//! Vaults as the faces and the tool loop use them (docs/adr/0024): a credential's secret is
//! sealed with the gateway's key before the store sees it and opened only for the code that
//! calls the credential's server; reads and secret-free writes go to the store as they are.
//! OAuth credentials are refreshed through their token endpoint when due (`refresh.rs`,
//! [`VaultService::refreshed`]).

mod refresh;
mod validate;

use std::sync::{Arc, OnceLock};

use gateway_core::session::Secret;
use gateway_core::vault::{Credential, CredentialSecret, CredentialSpec, Vault, credential_for};
use gateway_core::{CredentialId, VaultId};
use gateway_store::{NewCredential, SealedCredential, Store, StoreError, Vaults};

use crate::secrets::{SecretBox, SecretError};

pub use refresh::{MAX_TOKEN_RESPONSE, REFRESH_MARGIN, RefreshError, TOKEN_TIMEOUT, refresh_due};
pub use validate::{ProbeOutcome, RefreshOutcome, ServerProbe, Validation, ValidationStatus};

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored secret did not open (another key, or altered): the credential is unusable.
    #[error("the credential's secret cannot be opened: {0}")]
    Secret(#[from] SecretError),
    /// Refreshing an OAuth credential's access token failed; the stored credential is as it
    /// was. `endpoint` is the token endpoint without its query; nothing secret is said.
    #[error("credential {credential}: refreshing its access token at {endpoint} failed: {reason}")]
    Refresh { credential: CredentialId, endpoint: String, reason: RefreshError },
}

/// The secrets an update replaces; `None` keeps the stored one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretPatch {
    pub token: Option<Secret>,
    pub refresh_token: Option<Secret>,
    pub client_secret: Option<Secret>,
}

impl SecretPatch {
    pub fn is_empty(&self) -> bool {
        self.token.is_none() && self.refresh_token.is_none() && self.client_secret.is_none()
    }

    fn apply(self, mut current: CredentialSecret) -> CredentialSecret {
        if let Some(t) = self.token {
            current.token = t;
        }
        if let Some(t) = self.refresh_token {
            current.refresh_token = Some(t);
        }
        if let Some(t) = self.client_secret {
            current.client_secret = Some(t);
        }
        current
    }
}

/// What a session's vaults hold when a turn resolves them: the vaults found (archived ones
/// included, to be reported), those not found, and the live credentials, still sealed.
#[derive(Debug, Clone)]
pub struct SessionCredentials {
    pub order: Vec<VaultId>,
    pub vaults: Vec<Vault>,
    pub missing: Vec<VaultId>,
    credentials: Vec<SealedCredential>,
}

impl SessionCredentials {
    /// The credential that answers for `server_url` (`gateway_core::vault::credential_for`),
    /// opened; None: call the server without authentication.
    pub fn for_server(
        &self,
        secrets: &SecretBox,
        server_url: &str,
    ) -> Result<Option<(Credential, CredentialSecret)>, VaultError> {
        let live: Vec<Credential> = self.credentials.iter().map(|c| c.credential.clone()).collect();
        let Some(chosen) = credential_for(&self.order, &live, server_url) else {
            return Ok(None);
        };
        let sealed = self.credentials.iter().find(|c| c.credential.id == chosen.id).map(|c| c.sealed_secret.as_str());
        let secret = open_secret(secrets, sealed.unwrap_or_default())?;
        Ok(Some((chosen.clone(), secret)))
    }
}

fn open_secret(secrets: &SecretBox, sealed: &str) -> Result<CredentialSecret, VaultError> {
    let json = secrets.open(sealed)?;
    serde_json::from_str(&json.0).map_err(|_| VaultError::Secret(SecretError::Malformed("not a credential secret")))
}

#[derive(Clone)]
pub struct VaultService {
    store: Arc<dyn Store>,
    secrets: SecretBox,
    /// Token endpoints may be non-public addresses ([`VaultService::with_private_token_endpoints`]).
    private_token_endpoints: bool,
    /// The SSRF-guarded client for token endpoints, made at the first refresh.
    token_client: Arc<OnceLock<reqwest::Client>>,
}

impl VaultService {
    /// A service whose token endpoints must be public addresses.
    pub fn new(store: Arc<dyn Store>, secrets: SecretBox) -> Self {
        Self { store, secrets, private_token_endpoints: false, token_client: Arc::default() }
    }

    /// Reads, and writes that carry no secret (vaults; archiving and deleting credentials).
    pub fn store(&self) -> &dyn Vaults {
        &*self.store
    }

    pub fn secrets(&self) -> &SecretBox {
        &self.secrets
    }

    fn seal(&self, secret: &CredentialSecret) -> Result<String, VaultError> {
        let json = serde_json::to_string(secret).map_err(|e| VaultError::Store(StoreError::Corrupt(e.to_string())))?;
        Ok(self.secrets.seal(&json))
    }

    pub async fn create_credential(
        &self,
        vault: &VaultId,
        spec: CredentialSpec,
        secret: &CredentialSecret,
    ) -> Result<Credential, VaultError> {
        let new = NewCredential { id: CredentialId::new(), spec, sealed_secret: self.seal(secret)? };
        Ok(self.store.create_credential(vault, new).await?)
    }

    /// Replaces the spec; the secrets the patch names replace the stored ones (the rest is
    /// kept, so the stored secret is opened and sealed again).
    pub async fn update_credential(
        &self,
        vault: &VaultId,
        id: &CredentialId,
        spec: CredentialSpec,
        patch: SecretPatch,
    ) -> Result<Credential, VaultError> {
        let sealed = if patch.is_empty() {
            None
        } else {
            let current = self.store.sealed_credential(vault, id).await?;
            Some(self.seal(&patch.apply(open_secret(&self.secrets, &current.sealed_secret)?))?)
        };
        Ok(self.store.update_credential(vault, id, spec, sealed).await?)
    }

    /// The credentials of a session's vaults (`vault_ids`, highest priority first).
    pub async fn session_credentials(&self, order: &[VaultId]) -> Result<SessionCredentials, VaultError> {
        let (vaults, credentials) = self.store.live_credentials(order).await?;
        let missing = order.iter().filter(|id| !vaults.iter().any(|v| &v.id == *id)).cloned().collect();
        Ok(SessionCredentials { order: order.to_vec(), vaults, missing, credentials })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use gateway_core::vault::{ClientAuth, CredentialAuth, OAuthRefresh, VaultSpec};
    use gateway_core::{Metadata, VaultId};
    use gateway_store::{SqliteStore, StoreOptions};

    use super::*;

    fn spec(url: &str) -> CredentialSpec {
        CredentialSpec {
            display_name: None,
            metadata: Metadata::new(),
            auth: CredentialAuth::OAuth {
                server_url: url.into(),
                expires_at: None,
                refresh: Some(OAuthRefresh {
                    client_id: "c".into(),
                    token_endpoint: "https://auth.example.com/token".into(),
                    client_auth: ClientAuth::ClientSecretBasic,
                    resource: None,
                    scope: None,
                }),
            },
        }
    }

    /// A secret goes in sealed, comes out opened for its server only, and an update that
    /// names one secret keeps the others.
    #[tokio::test]
    async fn secrets_are_sealed_at_rest_and_patched_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("vaults.db").display());
        let store = SqliteStore::connect(&url, &StoreOptions::default()).await.unwrap();
        store.migrate().await.unwrap();
        let store: Arc<dyn Store> = Arc::new(store);
        let service = VaultService::new(store.clone(), SecretBox::generate());
        let (a, b) = (VaultId::new(), VaultId::new());
        for id in [&a, &b] {
            store.create_vault(id, VaultSpec { display_name: "v".into(), metadata: Metadata::new() }).await.unwrap();
        }
        let secret = CredentialSecret {
            token: Secret("access-1".into()),
            refresh_token: Some(Secret("refresh-1".into())),
            client_secret: Some(Secret("client-1".into())),
        };
        let c = service.create_credential(&a, spec("https://mcp.example.com/mcp"), &secret).await.unwrap();
        let stored = store.sealed_credential(&a, &c.id).await.unwrap().sealed_secret;
        assert!(SecretBox::is_sealed(&stored) && !stored.contains("access-1"), "{stored}");

        let patch = SecretPatch { token: Some(Secret("access-2".into())), ..SecretPatch::default() };
        service.update_credential(&a, &c.id, c.spec.clone(), patch).await.unwrap();
        let creds = service.session_credentials(&[VaultId::new(), b.clone(), a.clone()]).await.unwrap();
        assert_eq!(creds.missing.len(), 1);
        let (found, opened) = creds.for_server(service.secrets(), "https://MCP.example.com/mcp/").unwrap().unwrap();
        assert_eq!(found.id, c.id);
        assert_eq!(opened.token, Secret("access-2".into()));
        assert_eq!(opened.refresh_token, secret.refresh_token, "kept");
        assert_eq!(opened.client_secret, secret.client_secret, "kept");
        assert!(creds.for_server(service.secrets(), "https://other.example.com/mcp").unwrap().is_none());

        // Sealed with another key: refused, never read as garbage.
        let other = VaultService::new(store.clone(), SecretBox::generate());
        let creds = other.session_credentials(&[a]).await.unwrap();
        assert!(matches!(creds.for_server(other.secrets(), "https://mcp.example.com/mcp"), Err(VaultError::Secret(_))));
    }
}
