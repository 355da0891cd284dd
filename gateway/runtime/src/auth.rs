//! Who may call the gateway's HTTP surfaces.
//!
//! Adapters extract the presented key from their protocol's headers; this module decides.
//! Keys are random secrets (`gwk_` + 32 base62 characters) stored only as SHA-256 hashes.
//! With no live key configured, only loopback peers are served (whatever they present), so
//! a zero-config gateway is usable locally and closed to the network. A web page is not a
//! loopback client even when its browser runs on this host: any page the user visits can
//! send requests (and open WebSockets) to `127.0.0.1`, and CORS stops only the reading of
//! answers, not their effects. Browsers always mark such requests with `Origin` and cannot
//! attach our key headers, so a request carrying `Origin` gets no loopback trust.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::ApiKeyId;
use gateway_store::Store;
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

/// Where a request comes from, as far as trust without keys goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A program on this host (loopback address, no `Origin`).
    Local,
    /// A web page, wherever its browser runs (an `Origin` header).
    Browser,
    /// Any other address.
    Remote,
}

impl Caller {
    pub fn of(loopback_address: bool, has_origin: bool) -> Self {
        match (has_origin, loopback_address) {
            (true, _) => Caller::Browser,
            (false, true) => Caller::Local,
            (false, false) => Caller::Remote,
        }
    }
}

/// Who a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// No keys exist and the peer is on loopback.
    Loopback,
    Key(ApiKeyId),
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
        "this gateway has no API keys configured, and requests from web pages (with an Origin header) need one; create it with `gateway keys create`"
    )]
    BrowserWithoutKeys,
    #[error("the key store is unavailable: {0}")]
    Unavailable(String),
}

/// How long positive answers are cached (revocation takes effect within this time).
const CACHE_TTL: Duration = Duration::from_secs(10);

struct Cache {
    live_keys: Option<(u64, Instant)>,
    known: Vec<(String, ApiKeyId, Instant)>,
}

/// Authenticates presented keys against the store.
pub struct Authenticator {
    store: Arc<dyn Store>,
    cache: Mutex<Cache>,
}

/// A new API key: the secret (shown once) and its hash (stored).
pub struct NewKey {
    pub secret: String,
    pub hash: String,
}

/// The key a client presented: the `x-api-key` header's value, else the token of an
/// `Authorization: Bearer` header. Every HTTP face reads credentials this one way.
pub fn presented_key<'a>(x_api_key: Option<&'a str>, authorization: Option<&'a str>) -> Option<&'a str> {
    if let Some(k) = x_api_key {
        return Some(k);
    }
    let (scheme, token) = authorization?.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// Makes a new random key.
pub fn generate_key() -> NewKey {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut bytes = [0u8; 32];
    // Same reasoning as ids: a failing OS random source is unrecoverable.
    getrandom::fill(&mut bytes).expect("operating system random source unavailable");
    let body: String = bytes.iter().map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char).collect();
    let secret = format!("gwk_{body}");
    let hash = hash_key(&secret);
    NewKey { secret, hash }
}

pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

impl Authenticator {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, cache: Mutex::new(Cache { live_keys: None, known: Vec::new() }) }
    }

    /// Decides a request: `presented` is the key the client sent (if any), `caller` where it
    /// comes from.
    pub async fn authenticate(&self, presented: Option<&str>, caller: Caller) -> Result<Principal, AuthError> {
        let live = self.live_keys().await?;
        if live == 0 {
            return match caller {
                Caller::Local => Ok(Principal::Loopback),
                Caller::Browser => Err(AuthError::BrowserWithoutKeys),
                Caller::Remote => Err(AuthError::RemoteWithoutKeys),
            };
        }
        let Some(secret) = presented.map(str::trim).filter(|s| !s.is_empty()) else {
            return Err(AuthError::Missing);
        };
        if secret.len() > 256 {
            return Err(AuthError::Invalid);
        }
        let hash = hash_key(secret);
        {
            let mut cache = self.cache.lock().await;
            cache.known.retain(|(_, _, at)| at.elapsed() < CACHE_TTL);
            if let Some((_, id, _)) = cache.known.iter().find(|(h, _, _)| *h == hash) {
                return Ok(Principal::Key(id.clone()));
            }
        }
        match self.store.find_api_key(&hash).await {
            Ok(Some(key)) => {
                let mut cache = self.cache.lock().await;
                if cache.known.len() < 1024 {
                    cache.known.push((hash, key.id.clone(), Instant::now()));
                }
                Ok(Principal::Key(key.id))
            }
            Ok(None) => Err(AuthError::Invalid),
            Err(e) => Err(AuthError::Unavailable(e.to_string())),
        }
    }

    /// Whether any live key exists (cached briefly). Logged at start-up.
    pub async fn live_keys(&self) -> Result<u64, AuthError> {
        let mut cache = self.cache.lock().await;
        if let Some((n, at)) = cache.live_keys
            && at.elapsed() < CACHE_TTL
        {
            return Ok(n);
        }
        let n = self.store.count_api_keys().await.map_err(|e| AuthError::Unavailable(e.to_string()))?;
        cache.live_keys = Some((n, Instant::now()));
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
}
