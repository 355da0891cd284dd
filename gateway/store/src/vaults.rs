//! Vaults and their credentials (`gateway_core::vault`). The store never sees a secret in
//! clear: a credential's secret arrives sealed and leaves sealed, and only
//! [`Vaults::live_credentials`] hands it out, to the code that calls the credential's server.

use async_trait::async_trait;
use gateway_core::vault::{Credential, CredentialSpec, Vault, VaultSpec};
use gateway_core::{CredentialId, VaultId};

use crate::error::Result;
use crate::{Page, PageRequest};

/// A credential to store: its spec and its secret, sealed by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCredential {
    pub id: CredentialId,
    pub spec: CredentialSpec,
    pub sealed_secret: String,
}

/// A live credential with its sealed secret, as the caller of its server needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedCredential {
    pub credential: Credential,
    pub sealed_secret: String,
}

#[async_trait]
pub trait Vaults: Send + Sync {
    async fn create_vault(&self, id: &VaultId, spec: VaultSpec) -> Result<Vault>;
    async fn get_vault(&self, id: &VaultId) -> Result<Vault>;
    /// Newest first unless `page.order` says otherwise.
    async fn list_vaults(&self, include_archived: bool, page: &PageRequest) -> Result<Page<Vault>>;
    /// Replaces the display name and metadata; refused once archived (`Guard::VaultArchived`).
    async fn update_vault(&self, id: &VaultId, spec: VaultSpec) -> Result<Vault>;
    /// Archives the vault (idempotent): its credentials are no longer used or changed.
    async fn archive_vault(&self, id: &VaultId) -> Result<Vault>;
    /// Deletes the vault with its credentials.
    async fn delete_vault(&self, id: &VaultId) -> Result<()>;

    /// Adds a credential to a live vault: at most
    /// [`gateway_core::vault::MAX_VAULT_CREDENTIALS`] live ones (`Guard::VaultFull`), one live
    /// credential per normalized server URL (`Guard::CredentialExists`).
    async fn create_credential(&self, vault: &VaultId, new: NewCredential) -> Result<Credential>;
    async fn get_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<Credential>;
    /// The credential with its sealed secret (to merge an update into the secret it replaces).
    async fn sealed_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<SealedCredential>;
    /// Newest first unless `page.order` says otherwise.
    async fn list_credentials(
        &self,
        vault: &VaultId,
        include_archived: bool,
        page: &PageRequest,
    ) -> Result<Page<Credential>>;
    /// Replaces the spec and, when given, the sealed secret of a live credential of a live
    /// vault; its kind and server are the caller's to keep (`gateway_core::vault`).
    async fn update_credential(
        &self,
        vault: &VaultId,
        id: &CredentialId,
        spec: CredentialSpec,
        sealed_secret: Option<String>,
    ) -> Result<Credential>;
    /// Archives the credential (idempotent): it is no longer used, and its server URL is free.
    async fn archive_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<Credential>;
    async fn delete_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<()>;

    /// The vaults among `ids` that exist, and the live credentials (with their sealed secrets)
    /// of those that are not archived: what a session's turn resolves its servers against.
    async fn live_credentials(&self, ids: &[VaultId]) -> Result<(Vec<Vault>, Vec<SealedCredential>)>;
}
