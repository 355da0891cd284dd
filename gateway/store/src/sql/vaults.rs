//! Vaults and their credentials (`crate::vaults`).

use async_trait::async_trait;
use gateway_core::vault::{Credential, CredentialSpec, MAX_VAULT_CREDENTIALS, Vault, VaultSpec, normalize_server_url};
use gateway_core::{CredentialId, Timestamp, VaultId};

use super::conn::{Arg, from_row};
use super::read::{Decode, keyset_sql};
use super::{Engine, Hints, SqlStore, WriteTx, query, query_as};
use crate::error::{Guard, Result, StoreError};
use crate::model::{Page, PageRequest};
use crate::{NewCredential, SealedCredential, Vaults};

struct VaultRow {
    id: String,
    spec: String,
    created_at: i64,
    updated_at: i64,
    archived_at: Option<i64>,
}
from_row!(VaultRow { id, spec, created_at, updated_at, archived_at });

impl Decode for VaultRow {
    type Out = Vault;
    fn decode(self) -> Result<Vault> {
        Ok(Vault {
            id: VaultId::parse(&self.id).map_err(StoreError::corrupt)?,
            spec: serde_json::from_str(&self.spec)?,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            archived_at: self.archived_at.map(Timestamp),
        })
    }
}

struct CredentialRow {
    id: String,
    vault_id: String,
    spec: String,
    secret: String,
    created_at: i64,
    updated_at: i64,
    archived_at: Option<i64>,
}
from_row!(CredentialRow { id, vault_id, spec, secret, created_at, updated_at, archived_at });

impl CredentialRow {
    fn sealed(mut self) -> Result<SealedCredential> {
        let sealed_secret = std::mem::take(&mut self.secret);
        Ok(SealedCredential { credential: self.decode()?, sealed_secret })
    }
}

impl Decode for CredentialRow {
    type Out = Credential;
    fn decode(self) -> Result<Credential> {
        Ok(Credential {
            id: CredentialId::parse(&self.id).map_err(StoreError::corrupt)?,
            vault_id: VaultId::parse(&self.vault_id).map_err(StoreError::corrupt)?,
            spec: serde_json::from_str(&self.spec)?,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            archived_at: self.archived_at.map(Timestamp),
        })
    }
}

const VAULT_BY_ID: &str = "SELECT id, spec, created_at, updated_at, archived_at FROM vaults WHERE id = $1";

/// `$1` include archived, `$2,$3` keyset bound, `$4` limit.
const LIST_VAULTS: [&str; 2] = keyset_sql!(
    "SELECT id, spec, created_at, updated_at, archived_at FROM vaults WHERE ($1 OR archived_at IS NULL) AND",
    "",
    2,
    3,
    4
);

macro_rules! credential_cols {
    () => {
        "id, vault_id, spec, secret, created_at, updated_at, archived_at"
    };
}

const CREDENTIAL_BY_ID: &str =
    concat!("SELECT ", credential_cols!(), " FROM vault_credentials WHERE vault_id = $1 AND id = $2");

/// `$1` vault, `$2` include archived, `$3,$4` keyset bound, `$5` limit.
const LIST_CREDENTIALS: [&str; 2] = keyset_sql!(
    concat!(
        "SELECT ",
        credential_cols!(),
        " FROM vault_credentials WHERE vault_id = $1 AND ($2 OR archived_at IS NULL) AND"
    ),
    "",
    3,
    4,
    5
);

/// A credential's server as it is compared: normalized, or refused as unstorable.
fn server_key(spec: &CredentialSpec) -> Result<String> {
    normalize_server_url(spec.auth.server_url()).map_err(|e| StoreError::Unstorable(e.0))
}

impl<E: Engine> SqlStore<E> {
    async fn vault_in(tx: &mut WriteTx<E>, id: &VaultId) -> Result<Vault> {
        query_as::<VaultRow>(VAULT_BY_ID).bind(id.as_str()).found(&mut **tx, "vault", id).await
    }

    /// The vault, which must be live for its credentials to change.
    async fn live_vault_in(tx: &mut WriteTx<E>, id: &VaultId) -> Result<Vault> {
        let vault = Self::vault_in(tx, id).await?;
        if vault.archived_at.is_some() {
            return Err(StoreError::Guard(Guard::VaultArchived(id.to_string())));
        }
        Ok(vault)
    }

    async fn credential_in(tx: &mut WriteTx<E>, vault: &VaultId, id: &CredentialId) -> Result<Credential> {
        query_as::<CredentialRow>(CREDENTIAL_BY_ID)
            .bind(vault.as_str())
            .bind(id.as_str())
            .found(&mut **tx, "vault credential", id)
            .await
    }

    /// Refuses a second live credential for one server in a vault (`except`: the one being
    /// updated).
    async fn check_server_free(
        tx: &mut WriteTx<E>,
        vault: &VaultId,
        server: &str,
        except: &CredentialId,
    ) -> Result<()> {
        let existing = query_as::<(String,)>(
            "SELECT id FROM vault_credentials WHERE vault_id = $1 AND server_url = $2 AND archived_at IS NULL AND id <> $3",
        )
        .bind(vault.as_str())
        .bind(server)
        .bind(except.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        match existing {
            Some((existing,)) => Err(StoreError::Guard(Guard::CredentialExists {
                vault: vault.to_string(),
                existing,
                server_url: server.to_owned(),
            })),
            None => Ok(()),
        }
    }

    /// A unique-index refusal of a write that raced another for the same server (PostgreSQL:
    /// both passed [`Self::check_server_free`] before either committed) reads as that guard.
    fn server_taken(e: super::conn::DbError, vault: &VaultId, server: &str) -> StoreError {
        if e.is_unique_violation() {
            StoreError::Guard(Guard::CredentialExists {
                vault: vault.to_string(),
                existing: "(created concurrently)".into(),
                server_url: server.to_owned(),
            })
        } else {
            e.into()
        }
    }
}

#[async_trait]
impl<E: Engine> Vaults for SqlStore<E> {
    async fn create_vault(&self, id: &VaultId, spec: VaultSpec) -> Result<Vault> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query("INSERT INTO vaults (id, spec, created_at, updated_at) VALUES ($1, $2, $3, $3)")
            .bind(id.as_str())
            .bind(serde_json::to_string(&spec)?)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(Vault { id: id.clone(), spec, created_at: Timestamp(now), updated_at: Timestamp(now), archived_at: None })
    }

    async fn get_vault(&self, id: &VaultId) -> Result<Vault> {
        self.by_id::<VaultRow>(VAULT_BY_ID, "vault", id.as_str()).await
    }

    async fn list_vaults(&self, include_archived: bool, page: &PageRequest) -> Result<Page<Vault>> {
        self.list_page::<VaultRow>(page, LIST_VAULTS, [Arg::from(include_archived)]).await
    }

    async fn update_vault(&self, id: &VaultId, spec: VaultSpec) -> Result<Vault> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        let current = Self::live_vault_in(&mut tx, id).await?;
        query("UPDATE vaults SET spec = $2, updated_at = $3 WHERE id = $1")
            .bind(id.as_str())
            .bind(serde_json::to_string(&spec)?)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.finish(tx, Hints::default()).await?;
        Ok(Vault { spec, updated_at: Timestamp(now), ..current })
    }

    async fn archive_vault(&self, id: &VaultId) -> Result<Vault> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query("UPDATE vaults SET archived_at = COALESCE(archived_at, $2), updated_at = $2 WHERE id = $1")
            .bind(id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let vault = Self::vault_in(&mut tx, id).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(vault)
    }

    async fn delete_vault(&self, id: &VaultId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        if !Self::deleted(&mut tx, "DELETE FROM vaults WHERE id = $1 RETURNING id", id.as_str()).await? {
            return Err(StoreError::not_found("vault", id));
        }
        query("DELETE FROM vault_credentials WHERE vault_id = $1").bind(id.as_str()).execute(&mut *tx).await?;
        self.finish(tx, Hints::default()).await
    }

    async fn create_credential(&self, vault: &VaultId, new: NewCredential) -> Result<Credential> {
        let server = server_key(&new.spec)?;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        Self::live_vault_in(&mut tx, vault).await?;
        let (live,) =
            query_as::<(i64,)>("SELECT COUNT(*) FROM vault_credentials WHERE vault_id = $1 AND archived_at IS NULL")
                .bind(vault.as_str())
                .fetch_one(&mut *tx)
                .await?;
        if u64::try_from(live).map_err(StoreError::corrupt)? >= MAX_VAULT_CREDENTIALS {
            return Err(StoreError::Guard(Guard::VaultFull { vault: vault.to_string(), limit: MAX_VAULT_CREDENTIALS }));
        }
        Self::check_server_free(&mut tx, vault, &server, &new.id).await?;
        query(
            "INSERT INTO vault_credentials (id, vault_id, server_url, spec, secret, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .bind(new.id.as_str())
        .bind(vault.as_str())
        .bind(server.as_str())
        .bind(serde_json::to_string(&new.spec)?)
        .bind(new.sealed_secret.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| Self::server_taken(e, vault, &server))?;
        self.finish(tx, Hints::default()).await?;
        Ok(Credential {
            id: new.id,
            vault_id: vault.clone(),
            spec: new.spec,
            created_at: Timestamp(now),
            updated_at: Timestamp(now),
            archived_at: None,
        })
    }

    async fn get_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<Credential> {
        query_as::<CredentialRow>(CREDENTIAL_BY_ID)
            .bind(vault.as_str())
            .bind(id.as_str())
            .found(&mut *self.reader().await?, "vault credential", id)
            .await
    }

    async fn sealed_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<SealedCredential> {
        query_as::<CredentialRow>(CREDENTIAL_BY_ID)
            .bind(vault.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *self.reader().await?)
            .await?
            .ok_or_else(|| StoreError::not_found("vault credential", id))?
            .sealed()
    }

    async fn list_credentials(
        &self,
        vault: &VaultId,
        include_archived: bool,
        page: &PageRequest,
    ) -> Result<Page<Credential>> {
        self.get_vault(vault).await?;
        self.list_page::<CredentialRow>(
            page,
            LIST_CREDENTIALS,
            [Arg::from(vault.as_str()), Arg::from(include_archived)],
        )
        .await
    }

    async fn update_credential(
        &self,
        vault: &VaultId,
        id: &CredentialId,
        spec: CredentialSpec,
        sealed_secret: Option<String>,
    ) -> Result<Credential> {
        let server = server_key(&spec)?;
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        Self::live_vault_in(&mut tx, vault).await?;
        let current = Self::credential_in(&mut tx, vault, id).await?;
        if current.archived_at.is_some() {
            return Err(StoreError::Guard(Guard::CredentialArchived(id.to_string())));
        }
        Self::check_server_free(&mut tx, vault, &server, id).await?;
        query(
            "UPDATE vault_credentials SET server_url = $3, spec = $4, secret = COALESCE($5, secret), updated_at = $6 \
             WHERE vault_id = $1 AND id = $2",
        )
        .bind(vault.as_str())
        .bind(id.as_str())
        .bind(server.as_str())
        .bind(serde_json::to_string(&spec)?)
        .bind(sealed_secret)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| Self::server_taken(e, vault, &server))?;
        self.finish(tx, Hints::default()).await?;
        Ok(Credential { spec, updated_at: Timestamp(now), ..current })
    }

    async fn archive_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<Credential> {
        let mut tx = self.begin_write().await?;
        let now = Self::now(&mut tx).await?;
        query(
            "UPDATE vault_credentials SET archived_at = COALESCE(archived_at, $3), updated_at = $3 \
             WHERE vault_id = $1 AND id = $2",
        )
        .bind(vault.as_str())
        .bind(id.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let credential = Self::credential_in(&mut tx, vault, id).await?;
        self.finish(tx, Hints::default()).await?;
        Ok(credential)
    }

    async fn delete_credential(&self, vault: &VaultId, id: &CredentialId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let gone = query_as::<(String,)>("DELETE FROM vault_credentials WHERE vault_id = $1 AND id = $2 RETURNING id")
            .bind(vault.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if gone.is_none() {
            return Err(StoreError::not_found("vault credential", id));
        }
        self.finish(tx, Hints::default()).await
    }

    async fn live_credentials(&self, ids: &[VaultId]) -> Result<(Vec<Vault>, Vec<SealedCredential>)> {
        let mut conn = self.reader().await?;
        let (mut vaults, mut credentials) = (Vec::new(), Vec::new());
        // At most `MAX_SESSION_VAULTS` ids, each read by its primary key or index.
        for id in ids {
            let Some(vault) = query_as::<VaultRow>(VAULT_BY_ID).bind(id.as_str()).maybe(&mut *conn).await? else {
                continue;
            };
            if vault.archived_at.is_none() {
                let rows = query_as::<CredentialRow>(concat!(
                    "SELECT ",
                    credential_cols!(),
                    " FROM vault_credentials WHERE vault_id = $1 AND archived_at IS NULL ORDER BY created_at, id"
                ))
                .bind(id.as_str())
                .fetch_all(&mut *conn)
                .await?;
                for row in rows {
                    credentials.push(row.sealed()?);
                }
            }
            vaults.push(vault);
        }
        Ok((vaults, credentials))
    }
}
