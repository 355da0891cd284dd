//! Vaults: credentials follow their vault, one live credential per server, and a session's
//! turn sees only live credentials of live vaults, secrets still sealed.

use gateway_core::vault::{CredentialAuth, CredentialSpec, VaultSpec};
use gateway_core::{CredentialId, Metadata, VaultId};

use super::Harness;
use crate::{Guard, NewCredential, Order, PageRequest, StoreError};

fn vault(name: &str) -> VaultSpec {
    VaultSpec { display_name: name.into(), metadata: Metadata::from([("team".into(), "tools".into())]) }
}

fn bearer(url: &str, sealed: &str) -> NewCredential {
    NewCredential {
        id: CredentialId::new(),
        spec: CredentialSpec {
            display_name: Some("token".into()),
            metadata: Metadata::new(),
            auth: CredentialAuth::StaticBearer { server_url: url.into() },
        },
        sealed_secret: sealed.into(),
    }
}

fn guard(e: StoreError) -> Guard {
    match e {
        StoreError::Guard(g) => g,
        other => panic!("expected a guard, got {other:?}"),
    }
}

pub async fn vaults_and_credentials_archive_and_delete_together(h: &dyn Harness) {
    let s = h.fresh().await;
    let (a, b) = (VaultId::new(), VaultId::new());
    let va = s.create_vault(&a, vault("A")).await.unwrap();
    assert_eq!(s.get_vault(&a).await.unwrap(), va);
    s.create_vault(&b, vault("B")).await.unwrap();
    let mut renamed = vault("A2");
    renamed.metadata.clear();
    let updated = s.update_vault(&a, renamed.clone()).await.unwrap();
    assert_eq!((updated.spec, updated.created_at), (renamed, va.created_at));
    assert!(updated.updated_at >= va.updated_at);

    let c = s.create_credential(&a, bearer("https://mcp.example.com/mcp", "sealed:v1:x")).await.unwrap();
    assert_eq!(s.get_credential(&a, &c.id).await.unwrap(), c);
    assert!(matches!(s.get_credential(&b, &c.id).await.unwrap_err(), StoreError::NotFound { .. }), "not b's");

    let archived = s.archive_vault(&a).await.unwrap();
    assert!(archived.archived_at.is_some());
    assert_eq!(s.archive_vault(&a).await.unwrap().archived_at, archived.archived_at, "archiving twice keeps the time");
    assert!(matches!(guard(s.update_vault(&a, vault("x")).await.unwrap_err()), Guard::VaultArchived(_)));
    let refused = s.create_credential(&a, bearer("https://other.example.com", "s")).await.unwrap_err();
    assert!(matches!(guard(refused), Guard::VaultArchived(_)));
    assert!(matches!(
        guard(s.update_credential(&a, &c.id, c.spec.clone(), None).await.unwrap_err()),
        Guard::VaultArchived(_)
    ));

    let live = s.list_vaults(false, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(live.items.iter().map(|v| &v.id).collect::<Vec<_>>(), vec![&b]);
    let all = s.list_vaults(true, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(all.items.iter().map(|v| &v.id).collect::<Vec<_>>(), vec![&b, &a], "newest first");
    let first = s.list_vaults(true, &PageRequest::first(1, Order::Asc)).await.unwrap();
    assert_eq!((first.items[0].id.clone(), first.next.is_some()), (a.clone(), true));

    s.delete_vault(&a).await.unwrap();
    assert!(matches!(s.get_vault(&a).await.unwrap_err(), StoreError::NotFound { .. }));
    assert!(matches!(s.get_credential(&a, &c.id).await.unwrap_err(), StoreError::NotFound { .. }), "gone with it");
    assert!(matches!(s.delete_vault(&a).await.unwrap_err(), StoreError::NotFound { .. }));
    assert!(matches!(
        s.list_credentials(&a, true, &PageRequest::first(10, Order::Asc)).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
}

pub async fn a_vault_holds_one_live_credential_per_server(h: &dyn Harness) {
    let s = h.fresh().await;
    let (a, b) = (VaultId::new(), VaultId::new());
    s.create_vault(&a, vault("A")).await.unwrap();
    s.create_vault(&b, vault("B")).await.unwrap();
    let first = s.create_credential(&a, bearer("https://mcp.example.com/mcp", "one")).await.unwrap();
    // The same server however spelled: refused in the same vault, accepted in another.
    let again = s.create_credential(&a, bearer("HTTPS://MCP.example.com:443/mcp/", "two")).await.unwrap_err();
    assert!(matches!(&guard(again), Guard::CredentialExists { existing, .. } if existing == first.id.as_str()));
    s.create_credential(&b, bearer("https://mcp.example.com/mcp", "b")).await.unwrap();
    let unstorable = s.create_credential(&a, bearer("ftp://mcp.example.com", "x")).await.unwrap_err();
    assert!(matches!(unstorable, StoreError::Unstorable(_)), "{unstorable:?}");

    // An update may move a credential to a free server, not onto a taken one.
    let other = s.create_credential(&a, bearer("https://other.example.com/mcp", "o")).await.unwrap();
    let onto = s.update_credential(&a, &other.id, first.spec.clone(), None).await.unwrap_err();
    assert!(matches!(guard(onto), Guard::CredentialExists { .. }));
    let mut moved = other.spec.clone();
    moved.auth = CredentialAuth::StaticBearer { server_url: "https://third.example.com/mcp".into() };
    moved.display_name = None;
    let updated = s.update_credential(&a, &other.id, moved.clone(), Some("o2".into())).await.unwrap();
    assert_eq!((updated.spec, updated.created_at), (moved, other.created_at));

    // Archiving frees the server; an archived credential no longer changes.
    let archived = s.archive_credential(&a, &first.id).await.unwrap();
    assert!(archived.archived_at.is_some());
    let replacement = s.create_credential(&a, bearer("https://mcp.example.com/mcp", "three")).await.unwrap();
    let stale = s.update_credential(&a, &first.id, first.spec.clone(), None).await.unwrap_err();
    assert!(matches!(guard(stale), Guard::CredentialArchived(_)));

    let live = s.list_credentials(&a, false, &PageRequest::first(10, Order::Asc)).await.unwrap();
    assert_eq!(live.items.iter().map(|c| &c.id).collect::<Vec<_>>(), vec![&other.id, &replacement.id]);
    let all = s.list_credentials(&a, true, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(all.items.iter().map(|c| &c.id).collect::<Vec<_>>(), vec![&replacement.id, &other.id, &first.id]);

    s.delete_credential(&a, &replacement.id).await.unwrap();
    assert!(matches!(s.delete_credential(&a, &replacement.id).await.unwrap_err(), StoreError::NotFound { .. }));
    assert!(matches!(s.delete_credential(&b, &other.id).await.unwrap_err(), StoreError::NotFound { .. }));
}

pub async fn live_credentials_skip_what_is_archived_or_gone(h: &dyn Harness) {
    let s = h.fresh().await;
    let (a, b, c, missing) = (VaultId::new(), VaultId::new(), VaultId::new(), VaultId::new());
    for id in [&a, &b, &c] {
        s.create_vault(id, vault(id.as_str())).await.unwrap();
    }
    let kept = s.create_credential(&a, bearer("https://one.example.com/mcp", "sealed:v1:one")).await.unwrap();
    let dropped = s.create_credential(&a, bearer("https://two.example.com/mcp", "sealed:v1:two")).await.unwrap();
    s.archive_credential(&a, &dropped.id).await.unwrap();
    s.create_credential(&b, bearer("https://one.example.com/mcp", "sealed:v1:b")).await.unwrap();
    s.archive_vault(&b).await.unwrap();
    let from_c = s.create_credential(&c, bearer("https://three.example.com/mcp", "sealed:v1:c")).await.unwrap();
    s.update_credential(&c, &from_c.id, from_c.spec.clone(), Some("sealed:v1:c2".into())).await.unwrap();

    let sealed = s.sealed_credential(&c, &from_c.id).await.unwrap();
    assert_eq!((sealed.credential.id.clone(), sealed.sealed_secret.as_str()), (from_c.id.clone(), "sealed:v1:c2"));
    assert!(matches!(s.sealed_credential(&a, &from_c.id).await.unwrap_err(), StoreError::NotFound { .. }));

    let (vaults, creds) = s.live_credentials(&[c.clone(), missing, a.clone(), b.clone()]).await.unwrap();
    assert_eq!(vaults.iter().map(|v| &v.id).collect::<Vec<_>>(), vec![&c, &a, &b], "in order; the missing one absent");
    assert!(vaults[2].archived_at.is_some(), "an archived vault is reported, its credentials are not");
    let got: Vec<_> = creds.iter().map(|c| (c.credential.id.clone(), c.sealed_secret.as_str())).collect();
    assert_eq!(got, vec![(from_c.id, "sealed:v1:c2"), (kept.id, "sealed:v1:one")], "updated secret; archived left out");
    assert_eq!(s.live_credentials(&[]).await.unwrap(), (vec![], vec![]));
}
