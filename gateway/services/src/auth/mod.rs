//! Who may call the gateway's HTTP surfaces.
//!
//! Every HTTP face hands its request's peer address, URI and headers to
//! [`Authenticator::authorize`]; this module reads the presented key and decides. Keys are
//! random secrets (`gwk_` + 32 base62 characters) stored only as SHA-256 hashes.
//!
//! With no live key configured, only programs on this host are served (whatever they
//! present), so a zero-config gateway is usable locally and closed to the network. "On this
//! host" means three things at once (see [`caller`]): the peer is on loopback, the request is
//! not a web page's (no `Origin`, no cross-site `Sec-Fetch-Site`), and it addresses one of
//! the gateway's own names (no DNS rebinding). Once a key exists, a valid key is required
//! from everyone and those three facts no longer matter.

mod caller;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use caller::{Caller, OwnNames};
use gateway_core::{ApiKeyId, EnvironmentId};
use gateway_store::Store;
use http::{HeaderMap, Uri};
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

/// Who a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// No keys exist and the request is a local program's (see [`Caller`]).
    Loopback,
    Key(ApiKeyId),
    /// An environment key: only its environment's work queue and sessions.
    Environment {
        key: ApiKeyId,
        environment: EnvironmentId,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no API key was presented (send x-api-key or Authorization: Bearer)")]
    Missing,
    #[error("the API key is not valid")]
    Invalid,
    #[error(
        "this gateway has no API keys configured and serves loopback clients only; create one with `gateway keys create`"
    )]
    RemoteWithoutKeys,
    #[error(
        "this gateway has no API keys configured, and requests from web pages (with an Origin header, or Sec-Fetch-Site cross-site or same-site) need one; create it with `gateway keys create`"
    )]
    BrowserWithoutKeys,
    /// The request addressed a name that is not this gateway's (DNS rebinding): HTTP 421.
    #[error(
        "Host header {host} is not this gateway's; without API keys only localhost, loopback addresses and the public_url host are served"
    )]
    ForeignHost { host: String },
    #[error("the key store is unavailable: {0}")]
    Unavailable(String),
}

impl AuthError {
    /// The HTTP status every face answers this refusal with (each in its own body format):
    /// 421 Misdirected Request for a foreign host, 503 when keys cannot be checked, else 401.
    pub fn http_status(&self) -> http::StatusCode {
        match self {
            AuthError::ForeignHost { .. } => http::StatusCode::MISDIRECTED_REQUEST,
            AuthError::Unavailable(_) => http::StatusCode::SERVICE_UNAVAILABLE,
            AuthError::Missing | AuthError::Invalid | AuthError::RemoteWithoutKeys | AuthError::BrowserWithoutKeys => {
                http::StatusCode::UNAUTHORIZED
            }
        }
    }
}

/// How long positive answers are cached (revocation takes effect within this time).
const CACHE_TTL: Duration = Duration::from_secs(10);
/// How long "no API keys exist" is believed before the store is asked again: a key created
/// by another process (`gateway keys create` writes to the database) closes keyless access
/// within this time. A count costs ~9 µs on SQLite and ~160 µs on PostgreSQL (a round trip
/// and a pooled connection; measured on loopback): one per second costs nothing, one per
/// keyless request would add that to every request a local program makes.
pub const NO_KEYS_TTL: Duration = Duration::from_secs(1);

struct Cache {
    live_keys: Option<(u64, Instant)>,
    /// Whether the last count found no keys (keyless access open), to log the changes.
    keyless: Option<bool>,
    known: Vec<(String, Principal, Instant)>,
}

/// Authenticates presented keys against the store.
pub struct Authenticator {
    store: Arc<dyn Store>,
    cache: Mutex<Cache>,
    /// The names keyless requests must address.
    names: OwnNames,
    /// API keys seen revoked by this process: open streams of theirs end (see
    /// [`Authenticator::until_revoked`]).
    revoked: watch::Sender<Arc<HashSet<ApiKeyId>>>,
}

/// A new API key: the secret (shown once) and its hash (stored).
pub struct NewKey {
    pub secret: String,
    pub hash: String,
}

/// How an API key's secret starts.
const API_KEY_PREFIX: &str = "gwk_";
/// How an environment key's secret starts.
const ENVIRONMENT_KEY_PREFIX: &str = "gwe_";

/// The key a client presented: the `x-api-key` header's value, else the token of an
/// `Authorization: Bearer` header. Every HTTP face reads credentials this one way. An empty
/// value is no key: an empty `x-api-key:` (which some clients send when unset) must not hide
/// the bearer token beside it.
pub fn presented_key<'a>(x_api_key: Option<&'a str>, authorization: Option<&'a str>) -> Option<&'a str> {
    if let Some(k) = x_api_key.map(str::trim).filter(|k| !k.is_empty()) {
        return Some(k);
    }
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// [`presented_key`] of a request's headers.
pub fn presented_key_in(headers: &HeaderMap) -> Option<&str> {
    let value = |name| headers.get(name).and_then(|v: &http::HeaderValue| v.to_str().ok());
    presented_key(value("x-api-key"), value(http::header::AUTHORIZATION.as_str()))
}

/// Makes a new random API key.
pub fn generate_key() -> NewKey {
    random_key(API_KEY_PREFIX)
}

/// Makes a new random environment key.
pub fn generate_environment_key() -> NewKey {
    random_key(ENVIRONMENT_KEY_PREFIX)
}

fn random_key(prefix: &str) -> NewKey {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut bytes = [0u8; 32];
    // Same reasoning as ids: a failing OS random source is unrecoverable.
    getrandom::fill(&mut bytes).expect("operating system random source unavailable");
    let body: String = bytes.iter().map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char).collect();
    let secret = format!("{prefix}{body}");
    let hash = hash_key(&secret);
    NewKey { secret, hash }
}

pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

impl Authenticator {
    /// An authenticator whose keyless names are loopback literals and `localhost` only; a
    /// served gateway adds its `public_url` with [`Authenticator::with_names`].
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            cache: Mutex::new(Cache { live_keys: None, keyless: None, known: Vec::new() }),
            names: OwnNames::default(),
            revoked: watch::Sender::new(Arc::default()),
        }
    }

    /// The names keyless requests may address (see [`OwnNames`]).
    pub fn with_names(mut self, names: OwnNames) -> Self {
        self.names = names;
        self
    }

    /// Where a request comes from, judged against this gateway's names.
    pub fn caller(&self, peer: Option<SocketAddr>, uri: &Uri, headers: &HeaderMap) -> Caller {
        Caller::of_request(peer, uri, headers, &self.names)
    }

    /// Decides a request of any HTTP face from its peer address, URI and headers: the one
    /// entry point of the Managed Agents, A2A and `/acp` layers.
    pub async fn authorize(
        &self,
        peer: Option<SocketAddr>,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Principal, AuthError> {
        self.authenticate(presented_key_in(headers), &self.caller(peer, uri, headers)).await
    }

    /// For the operator's routes (`/metrics`): once a key exists, an API key (an
    /// environment key is an executor's, not an operator's); while none exists, any peer may
    /// read them (a scraper on another host), but the request must still address one of this
    /// gateway's names, so a rebound page cannot.
    pub async fn authorize_operator(
        &self,
        peer: Option<SocketAddr>,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<(), AuthError> {
        if self.live_keys().await? > 0 {
            return match self.authenticate(presented_key_in(headers), &self.caller(peer, uri, headers)).await? {
                Principal::Key(_) => Ok(()),
                Principal::Loopback | Principal::Environment { .. } => Err(AuthError::Invalid),
            };
        }
        match self.caller(peer, uri, headers).foreign_host {
            Some(host) => Err(AuthError::ForeignHost { host }),
            None => Ok(()),
        }
    }

    /// Resolves when `principal`'s key is revoked (never for [`Principal::Loopback`]), so an
    /// open stream authorised by it can end: a revoked key must not keep reading. Seen
    /// within [`CACHE_TTL`] of a revocation by any process while
    /// [`Authenticator::watch_revocations`] runs, at once for one made through this process.
    pub fn until_revoked(&self, principal: &Principal) -> impl Future<Output = ()> + Send + 'static {
        let key = match principal {
            Principal::Key(k) | Principal::Environment { key: k, .. } => Some(k.clone()),
            Principal::Loopback => None,
        };
        let mut revoked = self.revoked.subscribe();
        async move {
            let Some(key) = key else { return std::future::pending().await };
            loop {
                if revoked.borrow_and_update().contains(&key) {
                    return;
                }
                if revoked.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }

    /// Reads the revoked API keys every [`CACHE_TTL`] until `shutdown`, for
    /// [`Authenticator::until_revoked`]: one query per process, whatever the number of streams.
    pub async fn watch_revocations(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            match self.store.list_api_keys().await {
                Ok(keys) => self.note_revoked(keys.into_iter().filter(|k| k.revoked_at.is_some()).map(|k| k.id)),
                Err(e) => tracing::warn!(error = %e, "cannot read revoked API keys"),
            }
            tokio::select! {
                _ = tokio::time::sleep(CACHE_TTL) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Decides a request: `presented` is the key the client sent (if any), `caller` where it
    /// comes from. Without keys, a foreign host is refused first (whatever the peer: a LAN
    /// browser can be rebound to this host's LAN address too), then web pages, then other
    /// addresses.
    pub async fn authenticate(&self, presented: Option<&str>, caller: &Caller) -> Result<Principal, AuthError> {
        // An environment key is its own credential, keys or no keys: an executor on another
        // host presents it to a gateway that may have no API key at all.
        if let Some(secret) = presented.map(str::trim).filter(|s| s.starts_with(ENVIRONMENT_KEY_PREFIX)) {
            return self.lookup(secret).await;
        }
        let live = self.live_keys().await?;
        if live == 0 {
            return match caller {
                Caller { foreign_host: Some(host), .. } => Err(AuthError::ForeignHost { host: host.clone() }),
                Caller { web_page: true, .. } => Err(AuthError::BrowserWithoutKeys),
                Caller { loopback: false, .. } => Err(AuthError::RemoteWithoutKeys),
                Caller { loopback: true, web_page: false, foreign_host: None } => Ok(Principal::Loopback),
            };
        }
        let Some(secret) = presented.map(str::trim).filter(|s| !s.is_empty()) else {
            return Err(AuthError::Missing);
        };
        self.lookup(secret).await
    }

    /// The principal a presented secret names, keys or no keys (cached briefly).
    pub async fn principal_of(&self, secret: &str) -> Result<Principal, AuthError> {
        self.lookup(secret.trim()).await
    }

    /// The principal a presented secret names (cached briefly).
    async fn lookup(&self, secret: &str) -> Result<Principal, AuthError> {
        if secret.len() > 256 {
            return Err(AuthError::Invalid);
        }
        let hash = hash_key(secret);
        {
            let mut cache = self.cache.lock().await;
            cache.known.retain(|(_, _, at)| at.elapsed() < CACHE_TTL);
            if let Some((_, principal, _)) = cache.known.iter().find(|(h, _, _)| *h == hash) {
                // A revocation seen since the answer was cached wins over the cache.
                return match principal {
                    Principal::Key(k) | Principal::Environment { key: k, .. } if self.revoked.borrow().contains(k) => {
                        Err(AuthError::Invalid)
                    }
                    _ => Ok(principal.clone()),
                };
            }
        }
        match self.store.find_api_key(&hash).await {
            Ok(Some(key)) => {
                let principal = match key.environment_id {
                    Some(environment) => Principal::Environment { key: key.id, environment },
                    None => Principal::Key(key.id),
                };
                let mut cache = self.cache.lock().await;
                if cache.known.len() < 1024 {
                    cache.known.push((hash, principal.clone(), Instant::now()));
                }
                Ok(principal)
            }
            Ok(None) => Err(AuthError::Invalid),
            Err(e) => Err(AuthError::Unavailable(e.to_string())),
        }
    }

    /// Drops a revoked key from the cache, so this process refuses it at once (other
    /// processes within the cache's lifetime).
    pub async fn forget(&self, id: &ApiKeyId) {
        let mut cache = self.cache.lock().await;
        cache
            .known
            .retain(|(_, p, _)| !matches!(p, Principal::Key(k) | Principal::Environment { key: k, .. } if k == id));
        cache.live_keys = None;
        drop(cache);
        self.note_revoked([id.clone()]);
    }

    /// Adds `ids` to the keys seen revoked, waking [`Authenticator::until_revoked`] only when
    /// one is new.
    fn note_revoked(&self, ids: impl IntoIterator<Item = ApiKeyId>) {
        let ids: Vec<ApiKeyId> = ids.into_iter().collect();
        self.revoked.send_if_modified(|seen| {
            if ids.iter().all(|k| seen.contains(k)) {
                return false;
            }
            *seen = Arc::new(seen.iter().chain(&ids).cloned().collect());
            true
        });
    }

    /// How many live API keys exist: a count of none is trusted for [`NO_KEYS_TTL`], any
    /// other for [`CACHE_TTL`] (so a new key closes keyless access within a second, and the
    /// last key's revocation opens it within ten). Logged at start-up by the server; every
    /// change seen later is logged here, once.
    pub async fn live_keys(&self) -> Result<u64, AuthError> {
        let mut cache = self.cache.lock().await;
        if let Some((n, at)) = cache.live_keys
            && at.elapsed() < if n == 0 { NO_KEYS_TTL } else { CACHE_TTL }
        {
            return Ok(n);
        }
        let n = self.store.count_api_keys().await.map_err(|e| AuthError::Unavailable(e.to_string()))?;
        cache.live_keys = Some((n, Instant::now()));
        let keyless = n == 0;
        match cache.keyless.replace(keyless) {
            Some(false) if keyless => {
                tracing::warn!("no API keys exist any more; keyless access is open to programs on this host")
            }
            Some(true) if !keyless => tracing::info!(keys = n, "API keys now exist; keyless access is closed"),
            _ => {}
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_prefixed_and_hashed() {
        let a = generate_key();
        let b = generate_key();
        assert!(a.secret.starts_with("gwk_") && a.secret.len() == 36);
        assert_ne!(a.secret, b.secret);
        assert_eq!(a.hash, hash_key(&a.secret));
        assert_eq!(a.hash.len(), 64);
        assert!(!a.hash.contains(&a.secret[4..]));
    }

    #[test]
    fn an_empty_header_is_no_key_and_hides_no_other() {
        assert_eq!(presented_key(Some(""), Some("Bearer gwk_b")), Some("gwk_b"));
        assert_eq!(presented_key(Some("  "), Some("bearer  gwk_b ")), Some("gwk_b"));
        assert_eq!(presented_key(Some("gwk_a"), Some("Bearer gwk_b")), Some("gwk_a"), "x-api-key first");
        assert_eq!(presented_key(Some(""), Some("Bearer ")), None);
        assert_eq!(presented_key(None, Some("Basic dTpw")), None);
        assert_eq!(presented_key(Some(""), None), None);
    }
}
