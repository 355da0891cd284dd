//! OAuth refresh of vault credentials (`VaultService::refreshed`) against a token endpoint on
//! loopback and a SQLite store: the request each client authentication makes, what is stored
//! after a refresh, when nothing is sent, a refused refresh, the SSRF rule, and two refreshes
//! racing against a server that rotates refresh tokens. No network beyond 127.0.0.1.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use axum::{Form, Json, Router};
use base64::Engine as _;
use gateway_core::session::Secret;
use gateway_core::vault::{
    ClientAuth, Credential, CredentialAuth, CredentialSecret, CredentialSpec, OAuthRefresh, VaultSpec,
};
use gateway_core::{Metadata, Timestamp, VaultId};
use gateway_services::SecretBox;
use gateway_services::ssrf::TargetError;
use gateway_services::vaults::{RefreshError, VaultError, VaultService};
use gateway_store::{SqliteStore, Store, StoreOptions};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const SERVER: &str = "https://mcp.example.com/mcp";
const ACCESS: &str = "access-token-1-9f3a";
const REFRESH: &str = "refresh-token-1-c2d7";
const CLIENT_SECRET: &str = "client-secret-1-77ab";

/// What the token endpoint received.
#[derive(Debug, Clone)]
struct Seen {
    authorization: Option<String>,
    form: HashMap<String, String>,
}

/// A token endpoint that records each request and gives one fixed answer.
#[derive(Clone)]
struct Endpoint {
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Arc<(StatusCode, Value)>,
}

async fn token(
    State(e): State<Endpoint>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap().to_owned());
    e.seen.lock().unwrap().push(Seen { authorization, form });
    (e.answer.0, Json(e.answer.1.clone()))
}

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// A token endpoint at `http://127.0.0.1:port/token` answering `answer` with `status`.
async fn endpoint(status: StatusCode, answer: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let e = Endpoint { seen: Arc::default(), answer: Arc::new((status, answer)) };
    let seen = e.seen.clone();
    let addr = serve(Router::new().route("/token", post(token)).with_state(e)).await;
    (format!("http://{addr}/token"), seen)
}

fn rotated() -> Value {
    json!({"access_token": "access-token-2", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "refresh-token-2"})
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    secrets: SecretBox,
    vault: VaultId,
}

impl Fixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("vaults.db").display());
        let store = SqliteStore::connect(&url, &StoreOptions::default()).await.unwrap();
        store.migrate().await.unwrap();
        let store: Arc<dyn Store> = Arc::new(store);
        let vault = VaultId::new();
        store.create_vault(&vault, VaultSpec { display_name: "v".into(), metadata: Metadata::new() }).await.unwrap();
        Self { _dir: dir, store, secrets: SecretBox::generate(), vault }
    }

    /// The service as the gateway makes it: token endpoints must be public.
    fn public_only(&self) -> VaultService {
        VaultService::new(self.store.clone(), self.secrets.clone())
    }

    fn service(&self) -> VaultService {
        self.public_only().with_private_token_endpoints(true)
    }

    async fn credential(
        &self,
        token_endpoint: &str,
        client_auth: ClientAuth,
        expires_at: Option<i64>,
    ) -> (Credential, CredentialSecret) {
        let spec = CredentialSpec {
            display_name: Some("mcp".into()),
            metadata: Metadata::new(),
            auth: CredentialAuth::OAuth {
                server_url: SERVER.into(),
                expires_at: expires_at.map(Timestamp),
                refresh: Some(OAuthRefresh {
                    client_id: "client:1".into(),
                    token_endpoint: token_endpoint.into(),
                    client_auth,
                    resource: Some(SERVER.into()),
                    scope: Some("tools read".into()),
                }),
            },
        };
        let secret = CredentialSecret {
            token: Secret(ACCESS.into()),
            refresh_token: Some(Secret(REFRESH.into())),
            client_secret: Some(Secret(CLIENT_SECRET.into())),
        };
        let c = self.service().create_credential(&self.vault, spec, &secret).await.unwrap();
        (c, secret)
    }

    /// The credential for [`SERVER`] as a session's turn would open it from the store.
    async fn stored(&self) -> (Credential, CredentialSecret) {
        let service = self.service();
        let creds = service.session_credentials(std::slice::from_ref(&self.vault)).await.unwrap();
        creds.for_server(service.secrets(), SERVER).unwrap().unwrap()
    }
}

fn expires_at(c: &Credential) -> Option<Timestamp> {
    match &c.spec.auth {
        CredentialAuth::OAuth { expires_at, .. } => *expires_at,
        CredentialAuth::StaticBearer { .. } => panic!("not oauth"),
    }
}

#[tokio::test]
async fn an_expired_credential_is_refreshed_with_basic_client_authentication() {
    let f = Fixture::new().await;
    let (url, seen) = endpoint(StatusCode::OK, rotated()).await;
    let (c, secret) = f.credential(&url, ClientAuth::ClientSecretBasic, Some(1_000)).await;

    let before = now_ms();
    let (got, opened) = f.service().refreshed(&c, secret, false).await.unwrap();
    let after = now_ms();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let form = &seen[0].form;
    assert_eq!(form["grant_type"], "refresh_token");
    assert_eq!(form["refresh_token"], REFRESH);
    assert_eq!(form["resource"], SERVER);
    assert_eq!(form["scope"], "tools read");
    assert!(!form.contains_key("client_id") && !form.contains_key("client_secret"), "{form:?}");
    // RFC 6749 §2.3.1: client id and secret form-encoded, then Basic.
    let basic = seen[0].authorization.as_deref().unwrap().strip_prefix("Basic ").unwrap();
    let decoded = base64::engine::general_purpose::STANDARD.decode(basic).unwrap();
    assert_eq!(String::from_utf8(decoded).unwrap(), format!("client%3A1:{CLIENT_SECRET}"));

    assert_eq!(opened.token, Secret("access-token-2".into()));
    assert_eq!(opened.refresh_token, Some(Secret("refresh-token-2".into())), "rotated");
    assert_eq!(opened.client_secret, Some(Secret(CLIENT_SECRET.into())), "kept");
    let at = expires_at(&got).unwrap().millis();
    assert!((before + 3_600_000..=after + 3_600_000).contains(&at), "{before} {at} {after}");

    // Stored, as another process would open it.
    let (stored, stored_secret) = f.stored().await;
    assert_eq!(stored_secret, opened);
    assert_eq!(expires_at(&stored), expires_at(&got));
    assert_eq!(stored.spec.display_name.as_deref(), Some("mcp"), "the rest of the spec kept");
}

#[tokio::test]
async fn post_and_none_put_the_client_in_the_body() {
    for (auth, want_secret) in [(ClientAuth::ClientSecretPost, true), (ClientAuth::None, false)] {
        let f = Fixture::new().await;
        // Not rotating, no expiry: the refresh token is kept and the expiry becomes unknown.
        let (url, seen) =
            endpoint(StatusCode::OK, json!({"access_token": "access-token-2", "token_type": "bearer"})).await;
        let (c, secret) = f.credential(&url, auth, Some(1_000)).await;
        let (got, opened) = f.service().refreshed(&c, secret, false).await.unwrap();

        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{auth:?}");
        assert_eq!(seen[0].authorization, None, "{auth:?}");
        let form = &seen[0].form;
        assert_eq!(form["grant_type"], "refresh_token");
        assert_eq!(form["refresh_token"], REFRESH);
        assert_eq!(form["client_id"], "client:1", "{auth:?}");
        assert_eq!(form.get("client_secret").map(String::as_str), want_secret.then_some(CLIENT_SECRET), "{auth:?}");

        assert_eq!(opened.token, Secret("access-token-2".into()));
        assert_eq!(opened.refresh_token, Some(Secret(REFRESH.into())), "not rotated: kept");
        assert_eq!(expires_at(&got), None);
        assert_eq!(f.stored().await.1, opened);
    }
}

#[tokio::test]
async fn a_credential_not_near_expiry_is_refreshed_only_when_forced() {
    let f = Fixture::new().await;
    let (url, seen) = endpoint(StatusCode::OK, rotated()).await;
    let later = now_ms() + 3_600_000;
    let (c, secret) = f.credential(&url, ClientAuth::ClientSecretPost, Some(later)).await;
    let service = f.service();

    let (same, same_secret) = service.refreshed(&c, secret.clone(), false).await.unwrap();
    assert_eq!((same, &same_secret), (c.clone(), &secret));
    assert!(seen.lock().unwrap().is_empty(), "not due: no request");

    // The server answered 401: refreshed whatever the expiry says.
    let (_, opened) = service.refreshed(&c, secret.clone(), true).await.unwrap();
    assert_eq!(opened.token, Secret("access-token-2".into()));
    assert_eq!(seen.lock().unwrap().len(), 1);

    // A caller still holding the old token, forced: another refresh already stored a newer
    // one, which it gets without a request.
    let (_, again) = service.refreshed(&c, secret, true).await.unwrap();
    assert_eq!(again, opened);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_refused_refresh_is_a_typed_error_that_names_no_secret_and_changes_nothing() {
    let f = Fixture::new().await;
    // A server that echoes what it was sent in its description.
    let (url, seen) = endpoint(
        StatusCode::BAD_REQUEST,
        json!({"error": "invalid_grant", "error_description": format!("refresh token {REFRESH} is revoked ({CLIENT_SECRET})")}),
    )
    .await;
    let (c, secret) = f.credential(&url, ClientAuth::ClientSecretPost, Some(1_000)).await;

    let err = f.service().refreshed(&c, secret.clone(), false).await.unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 1);
    let VaultError::Refresh { credential, endpoint, reason } = &err else { panic!("{err:?}") };
    assert_eq!(credential, &c.id);
    assert_eq!(endpoint, &url);
    assert!(matches!(reason, RefreshError::Refused { status: 400, .. }), "{reason:?}");
    assert_eq!(reason.oauth_error(), Some("invalid_grant"));
    let said = format!("{err} / {err:?}");
    assert!(said.contains("invalid_grant") && said.contains("revoked"), "{said}");
    for s in [ACCESS, REFRESH, CLIENT_SECRET] {
        assert!(!said.contains(s), "{said}");
    }

    let (stored, stored_secret) = f.stored().await;
    assert_eq!(stored_secret, secret, "unchanged");
    assert_eq!(expires_at(&stored), Some(Timestamp(1_000)));
}

#[tokio::test]
async fn unusable_answers_are_refused_and_change_nothing() {
    let huge = json!({"access_token": "a".repeat(70 * 1024), "token_type": "Bearer"});
    let dpop = json!({"access_token": "access-token-2", "token_type": "DPoP"});
    let no_token = json!({"token_type": "Bearer", "expires_in": 60});
    for (answer, why) in [(huge, "larger than 64 KiB"), (dpop, "not Bearer"), (no_token, "string access_token")] {
        let f = Fixture::new().await;
        let (url, seen) = endpoint(StatusCode::OK, answer).await;
        let (c, secret) = f.credential(&url, ClientAuth::None, Some(1_000)).await;
        let err = f.service().refreshed(&c, secret.clone(), false).await.unwrap_err();
        assert!(matches!(&err, VaultError::Refresh { reason: RefreshError::BadAnswer(_), .. }), "{err:?}");
        assert!(err.to_string().contains(why), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert_eq!(f.stored().await.1, secret, "{why}: unchanged");
    }
}

#[tokio::test]
async fn a_loopback_token_endpoint_is_refused_unless_private_endpoints_are_allowed() {
    let f = Fixture::new().await;
    let (url, seen) = endpoint(StatusCode::OK, rotated()).await;
    let (c, secret) = f.credential(&url, ClientAuth::ClientSecretBasic, Some(1_000)).await;

    let err = f.public_only().refreshed(&c, secret.clone(), false).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::Refresh { reason: RefreshError::Target(TargetError::Private(_)), .. }),
        "{err:?}"
    );
    assert!(seen.lock().unwrap().is_empty(), "never contacted");
    assert_eq!(f.stored().await.1, secret);
    // A name that resolves to loopback is refused by the resolver at connect time
    // (`ssrf` tests it: `the_resolver_refuses_names_that_resolve_to_loopback`).
}

/// A server that rotates refresh tokens and refuses a used one. Both requests are held until
/// both have arrived (so both callers read the store before either wrote); the first is
/// answered, the second gets `invalid_grant` once the first's refresh is stored.
#[derive(Clone)]
struct Rotating {
    current: Arc<Mutex<(String, u32)>>,
    arrived: Arc<tokio::sync::Barrier>,
    store: Arc<dyn Store>,
    vault: VaultId,
    requests: Arc<Mutex<u32>>,
}

async fn rotating(State(r): State<Rotating>, Form(form): Form<HashMap<String, String>>) -> (StatusCode, Json<Value>) {
    *r.requests.lock().unwrap() += 1;
    r.arrived.wait().await;
    let answer = {
        let mut current = r.current.lock().unwrap();
        if form["refresh_token"] == current.0 {
            current.1 += 1;
            current.0 = format!("refresh-token-r{}", current.1);
            Some(json!({"access_token": format!("access-token-r{}", current.1), "token_type": "Bearer",
                        "expires_in": 600, "refresh_token": current.0}))
        } else {
            None
        }
    };
    if let Some(answer) = answer {
        return (StatusCode::OK, Json(answer));
    }
    // The loser: answer once the winner's refresh is in the store.
    for _ in 0..500 {
        let creds = r.store.live_credentials(std::slice::from_ref(&r.vault)).await.unwrap().1;
        if creds.iter().any(|c| expires_at(&c.credential).is_some_and(|t| t.millis() > now_ms())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (StatusCode::BAD_REQUEST, Json(json!({"error": "invalid_grant"})))
}

#[tokio::test]
async fn two_racing_refreshes_both_end_with_the_winners_token() {
    let f = Fixture::new().await;
    let r = Rotating {
        current: Arc::new(Mutex::new((REFRESH.to_owned(), 0))),
        arrived: Arc::new(tokio::sync::Barrier::new(2)),
        store: f.store.clone(),
        vault: f.vault.clone(),
        requests: Arc::default(),
    };
    let requests = r.requests.clone();
    let addr = serve(Router::new().route("/token", post(rotating)).with_state(r)).await;
    let (c, secret) = f.credential(&format!("http://{addr}/token"), ClientAuth::None, Some(1_000)).await;

    // Two gateway processes on one store.
    let (one, two) = (f.service(), f.service());
    let both = async { tokio::join!(one.refreshed(&c, secret.clone(), false), two.refreshed(&c, secret, false)) };
    let (a, b) = tokio::time::timeout(Duration::from_secs(20), both).await.unwrap();
    let (a, b) = (a.unwrap().1, b.unwrap().1);
    assert_eq!(*requests.lock().unwrap(), 2, "both called the endpoint");
    assert_eq!(a, b, "the loser took the winner's token");
    assert_eq!(a.token, Secret("access-token-r1".into()));
    assert_eq!(a.refresh_token, Some(Secret("refresh-token-r1".into())));
    assert_eq!(f.stored().await.1, a);
}
