//! `/v1/vaults` and `/v1/vaults/{id}/credentials` (`client.beta.vaults`, docs/adr/0024):
//! write-only credentials for the MCP servers agents call. A credential's secrets are sealed by
//! the vault service before the store sees them and never answered.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use gateway_core::{CredentialId, VaultId};
use gateway_runtime::RuntimeError;
use gateway_store::Order;
use serde_json::json;

use super::Reply;
use crate::ManagedAgents;
use crate::extract::{ApiJson, PathId, PathIds, QueryParams};
use crate::pagination;
use crate::wire::vault::{
    CredentialCreate, CredentialUpdate, VaultCreate, VaultUpdate, credential_out, validation_out, vault_out,
};
use gateway_services::vaults::{ProbeOutcome, ServerProbe};

pub async fn create(State(api): State<Arc<ManagedAgents>>, ApiJson(body): ApiJson<VaultCreate>) -> Reply {
    let spec = body.into_spec()?;
    let vault = api.vaults.store().create_vault(&VaultId::new(), spec).await.map_err(RuntimeError::from)?;
    Ok(Json(vault_out(&vault)))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<VaultId>) -> Reply {
    Ok(Json(vault_out(&api.vaults.store().get_vault(&id).await.map_err(RuntimeError::from)?)))
}

/// Display name and metadata (a patch: `null` deletes a key); refused once archived.
pub async fn update(
    State(api): State<Arc<ManagedAgents>>,
    PathId(id): PathId<VaultId>,
    ApiJson(body): ApiJson<VaultUpdate>,
) -> Reply {
    let store = api.vaults.store();
    let current = store.get_vault(&id).await.map_err(RuntimeError::from)?;
    let spec = body.apply(&current.spec)?;
    if spec == current.spec {
        return Ok(Json(vault_out(&current)));
    }
    Ok(Json(vault_out(&store.update_vault(&id, spec).await.map_err(RuntimeError::from)?)))
}

pub async fn list(State(api): State<Arc<ManagedAgents>>, q: QueryParams) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let result =
        api.vaults.store().list_vaults(q.bool("include_archived")?, &page).await.map_err(RuntimeError::from)?;
    Ok(Json(pagination::list(&result, page.order, vault_out)))
}

/// Archived vaults keep their credentials, unused: a session naming one runs without them.
pub async fn archive(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<VaultId>) -> Reply {
    Ok(Json(vault_out(&api.vaults.store().archive_vault(&id).await.map_err(RuntimeError::from)?)))
}

pub async fn delete(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<VaultId>) -> Reply {
    api.vaults.store().delete_vault(&id).await.map_err(RuntimeError::from)?;
    Ok(Json(json!({"id": id, "type": "vault_deleted"})))
}

pub async fn create_credential(
    State(api): State<Arc<ManagedAgents>>,
    PathId(vault): PathId<VaultId>,
    ApiJson(body): ApiJson<CredentialCreate>,
) -> Reply {
    let (spec, secret) = body.into_parts()?;
    Ok(Json(credential_out(&api.vaults.create_credential(&vault, spec, &secret).await?)))
}

pub async fn retrieve_credential(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(vault, credential): PathIds<VaultId, CredentialId>,
) -> Reply {
    let c = api.vaults.store().get_credential(&vault, &credential).await.map_err(RuntimeError::from)?;
    Ok(Json(credential_out(&c)))
}

/// `auth` keeps its `type` and its server; the secrets it names replace the stored ones.
pub async fn update_credential(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(vault, credential): PathIds<VaultId, CredentialId>,
    ApiJson(body): ApiJson<CredentialUpdate>,
) -> Reply {
    let current = api.vaults.store().get_credential(&vault, &credential).await.map_err(RuntimeError::from)?;
    let (spec, secrets) = body.apply(&current.spec)?;
    if spec == current.spec && secrets.is_empty() {
        return Ok(Json(credential_out(&current)));
    }
    Ok(Json(credential_out(&api.vaults.update_credential(&vault, &credential, spec, secrets).await?)))
}

pub async fn list_credentials(
    State(api): State<Arc<ManagedAgents>>,
    PathId(vault): PathId<VaultId>,
    q: QueryParams,
) -> Reply {
    let page = pagination::request(&q, Order::Desc, 20, 100)?;
    let result = api
        .vaults
        .store()
        .list_credentials(&vault, q.bool("include_archived")?, &page)
        .await
        .map_err(RuntimeError::from)?;
    Ok(Json(pagination::list(&result, page.order, credential_out)))
}

pub async fn archive_credential(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(vault, credential): PathIds<VaultId, CredentialId>,
) -> Reply {
    let c = api.vaults.store().archive_credential(&vault, &credential).await.map_err(RuntimeError::from)?;
    Ok(Json(credential_out(&c)))
}

/// Probes the credential's server with its token (a handshake and a tool listing); after a
/// refusal, one forced refresh when the credential can refresh. Any credential kind.
pub async fn validate_credential(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(vault, credential): PathIds<VaultId, CredentialId>,
) -> Reply {
    let validation = match &api.server_probe {
        Some(probe) => api.vaults.validate(&vault, &credential, probe.as_ref()).await?,
        None => api.vaults.validate(&vault, &credential, &NoProbe).await?,
    };
    Ok(Json(validation_out(&validation)))
}

/// A process without an MCP client cannot ask the server.
struct NoProbe;

#[async_trait::async_trait]
impl ServerProbe for NoProbe {
    async fn probe(&self, _url: &str, _token: &str) -> ProbeOutcome {
        ProbeOutcome::Failed { message: "this gateway process has no MCP client".into() }
    }
}

pub async fn delete_credential(
    State(api): State<Arc<ManagedAgents>>,
    PathIds(vault, credential): PathIds<VaultId, CredentialId>,
) -> Reply {
    api.vaults.store().delete_credential(&vault, &credential).await.map_err(RuntimeError::from)?;
    Ok(Json(json!({"id": credential, "type": "vault_credential_deleted"})))
}
