//! Refreshing an `oauth` credential's access token through its token endpoint (RFC 6749 §6,
//! resource indicators per RFC 8707), so a credential outlives its first access token.
//!
//! Contract of [`VaultService::refreshed`]:
//! - **No network unless due.** A credential is refreshed only when it is `oauth` with a
//!   `refresh` config, holds a refresh token, and either the caller forces it (its server
//!   answered 401) or its `expires_at` is within [`REFRESH_MARGIN`] of now ([`refresh_due`], a
//!   pure function). Anything else comes back as it was given.
//! - **The store is the truth.** Before calling the endpoint the stored credential is read
//!   again: when its token is no longer the one the caller holds, another process (or an API
//!   update) already replaced it, and that one is used (refreshed only if it is itself due).
//!   The new access token, the rotated refresh token (else the old one) and the new
//!   `expires_at` are written back in one store update, so every process sees them.
//! - **Two refreshes of one credential may race** (two processes, both due): there is no lock
//!   across processes. Both call the endpoint; the last write wins, and each caller uses the
//!   token it got, which stays valid unless the server revokes on reuse. When a server rotates
//!   refresh tokens and refuses the loser's (`invalid_grant`), the loser reads the store again
//!   and takes the winner's token instead of failing. What is not covered: a server that
//!   revokes the *winner's* tokens on seeing a reused refresh token (RFC 9700 §4.14.2); the
//!   credential then needs a new grant, as it would after any revocation.
//! - **The endpoint is user-supplied**: it goes through the SSRF guard ([`ssrf::check_url`],
//!   then [`ssrf::client`]: public-only resolver, no redirects) unless the service was built
//!   with [`VaultService::with_private_token_endpoints`]. The answer is read up to
//!   [`MAX_TOKEN_RESPONSE`] bytes within [`TOKEN_TIMEOUT`].
//! - **Errors never carry a secret**: [`RefreshError`] holds only the status, the OAuth error
//!   code and description (cut, with any of the credential's secrets blanked out, in case a
//!   server echoes them), or a transport reason without the URL.

use std::time::Duration;

use base64::Engine as _;
use gateway_core::Timestamp;
use gateway_core::session::Secret;
use gateway_core::vault::{ClientAuth, Credential, CredentialAuth, CredentialSecret, MAX_SECRET, OAuthRefresh};
use gateway_store::{Guard, StoreError};
use serde::Deserialize;

use super::{VaultError, VaultService, open_secret};
use crate::ssrf::{self, TargetError};

/// How long before `expires_at` a credential counts as due: enough for one call to its
/// server to start and finish on the old token.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// The whole token request, connect to last byte.
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// The most bytes of a token endpoint's answer read.
pub const MAX_TOKEN_RESPONSE: usize = 64 * 1024;
/// The most characters of a server-supplied error code or description kept in an error.
const MAX_REASON_CHARS: usize = 200;

/// Why a refresh failed. None of them holds a token or the client secret.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RefreshError {
    /// `client_secret_basic` or `client_secret_post` without a client secret in the credential.
    #[error("the credential authenticates with {} but holds no client secret", client_auth_name(*.0))]
    NoClientSecret(ClientAuth),
    /// The token endpoint is not a URL the gateway may call (malformed, or non-public while
    /// private token endpoints are not allowed); it was not contacted.
    #[error("token endpoint refused: {0}")]
    Target(#[from] TargetError),
    /// The request did not complete (connect, timeout, reset), as `ssrf::send_failure` says it.
    #[error("{0}")]
    Send(String),
    /// The endpoint answered with an error status; `error` is the OAuth error code
    /// (`invalid_grant`: the refresh token is expired or revoked, a new grant is needed).
    #[error("the token endpoint answered HTTP {status}{}", oauth_reason(.error, .description))]
    Refused { status: u16, error: Option<String>, description: Option<String> },
    /// A success status whose body is not a usable token response.
    #[error("the token endpoint's answer is unusable: {0}")]
    BadAnswer(&'static str),
}

impl RefreshError {
    /// The OAuth error code of a refused refresh (`invalid_grant`, `invalid_client`, ...).
    pub fn oauth_error(&self) -> Option<&str> {
        match self {
            RefreshError::Refused { error, .. } => error.as_deref(),
            _ => None,
        }
    }
}

fn client_auth_name(auth: ClientAuth) -> &'static str {
    match auth {
        ClientAuth::None => "none",
        ClientAuth::ClientSecretBasic => "client_secret_basic",
        ClientAuth::ClientSecretPost => "client_secret_post",
    }
}

fn oauth_reason(error: &Option<String>, description: &Option<String>) -> String {
    match (error, description) {
        (Some(e), Some(d)) => format!(" ({e}: {d})"),
        (Some(e), None) => format!(" ({e})"),
        (None, Some(d)) => format!(" ({d})"),
        (None, None) => String::new(),
    }
}

/// Whether a credential is to be refreshed now: `oauth` with a refresh config, a refresh
/// token held, and either forced (the server answered 401) or `expires_at` within
/// [`REFRESH_MARGIN`] of `now`. An unknown expiry is refreshed only when forced.
pub fn refresh_due(auth: &CredentialAuth, secret: &CredentialSecret, now: Timestamp, force: bool) -> bool {
    let CredentialAuth::OAuth { expires_at, refresh: Some(_), .. } = auth else {
        return false;
    };
    if secret.refresh_token.as_ref().is_none_or(|t| t.0.is_empty()) {
        return false;
    }
    let margin = i64::try_from(REFRESH_MARGIN.as_millis()).unwrap_or(i64::MAX);
    force || expires_at.is_some_and(|at| at.millis().saturating_sub(margin) <= now.millis())
}

/// The local clock, read once per refresh decision.
///
/// Why not the database clock: `expires_at` is derived from the authorization server's
/// `expires_in`, a duration on *its* clock, so no clock here is authoritative; the local one
/// is read before the request (so the stored expiry is early, never late). Two gateway
/// processes whose clocks differ by less than [`REFRESH_MARGIN`] agree on what is due; a
/// larger skew costs an early refresh or a 401 followed by a forced one, never a wrong token.
fn local_now() -> Timestamp {
    #[allow(clippy::disallowed_methods)] // See above: a token's expiry is not a lease.
    Timestamp::now_local()
}

/// `application/x-www-form-urlencoded` encoding of one name or value (WHATWG URL, as RFC 6749
/// appendix B asks): ASCII alphanumerics and `*-._` as they are, space as `+`, every other
/// byte of the UTF-8 as `%XX`.
pub(crate) fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => out.push(char::from(b)),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A refresh request as it goes on the wire: the form body and the `Authorization` header.
/// Secrets inside, so no `Debug`.
pub(crate) struct TokenRequest {
    pub body: String,
    pub authorization: Option<String>,
}

/// The refresh request for `refresh` with `refresh_token` (RFC 6749 §6): `grant_type`,
/// `refresh_token`, then `resource` (RFC 8707) and `scope` when set, and the client's
/// authentication (§2.3.1): `none` sends `client_id` in the body; `client_secret_post` sends
/// `client_id` and `client_secret` in the body; `client_secret_basic` sends them, each
/// form-encoded, as HTTP Basic credentials, and nothing in the body.
pub(crate) fn token_request(
    refresh: &OAuthRefresh,
    refresh_token: &Secret,
    client_secret: Option<&Secret>,
) -> Result<TokenRequest, RefreshError> {
    let mut pairs: Vec<(&str, &str)> = vec![("grant_type", "refresh_token"), ("refresh_token", &refresh_token.0)];
    if let Some(resource) = &refresh.resource {
        pairs.push(("resource", resource));
    }
    if let Some(scope) = &refresh.scope {
        pairs.push(("scope", scope));
    }
    let mut authorization = None;
    let needs_secret = || client_secret.ok_or(RefreshError::NoClientSecret(refresh.client_auth));
    match refresh.client_auth {
        ClientAuth::None => pairs.push(("client_id", &refresh.client_id)),
        ClientAuth::ClientSecretPost => {
            let secret = needs_secret()?;
            pairs.push(("client_id", &refresh.client_id));
            pairs.push(("client_secret", &secret.0));
        }
        ClientAuth::ClientSecretBasic => {
            let secret = needs_secret()?;
            let pair = format!("{}:{}", form_encode(&refresh.client_id), form_encode(&secret.0));
            authorization = Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)));
        }
    }
    let body =
        pairs.iter().map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v))).collect::<Vec<_>>().join("&");
    Ok(TokenRequest { body, authorization })
}

/// A successful token response (RFC 6749 §5.1), read tolerantly: `token_type` may be missing
/// (some servers omit it) but must be `Bearer` when present; `expires_in` may be a number or a
/// numeric string; unknown fields are ignored.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<Seconds>,
    #[serde(default)]
    refresh_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Number(f64),
    Text(String),
}

impl Seconds {
    /// Whole milliseconds, at least 0; an unreadable value counts as absent.
    fn millis(&self) -> Option<i64> {
        let secs = match self {
            Seconds::Number(n) => *n,
            Seconds::Text(t) => t.trim().parse::<f64>().ok()?,
        };
        secs.is_finite().then(|| (secs.max(0.0) * 1000.0).min(i64::MAX as f64) as i64)
    }
}

/// An error response (RFC 6749 §5.2).
#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// What a successful refresh brings: the new secret and its expiry.
struct Refreshed {
    secret: CredentialSecret,
    expires_at: Option<Timestamp>,
}

/// Server-supplied text made fit for an error: control characters dropped, cut to
/// [`MAX_REASON_CHARS`], and every secret of the credential blanked out (as written and
/// form-encoded), in case the server echoes what it was sent.
fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut text: String = text.chars().filter(|c| !c.is_control()).collect();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        for form in [s.to_string(), form_encode(s)] {
            text = text.replace(&form, "<redacted>");
        }
    }
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// Reads at most [`MAX_TOKEN_RESPONSE`] bytes of the body; more is an error.
async fn read_bounded(response: reqwest::Response) -> Result<Vec<u8>, RefreshError> {
    let capped = crate::web::read_capped(response, MAX_TOKEN_RESPONSE as u64)
        .await
        .map_err(|e| RefreshError::Send(ssrf::send_failure(e)))?;
    if capped.cut {
        return Err(RefreshError::BadAnswer("the answer is larger than 64 KiB"));
    }
    Ok(capped.bytes)
}

/// The endpoint as an error may name it: scheme, host, port and path, never a query.
fn endpoint_for_errors(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}",
            u.scheme(),
            u.host_str().unwrap_or_default(),
            match u.port() {
                Some(p) => format!(":{p}{}", u.path()),
                None => u.path().to_owned(),
            }
        ),
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().chars().take(200).collect(),
    }
}

impl VaultService {
    /// Allows token endpoints on loopback, private and other non-public addresses (off by
    /// default: the endpoint is user-supplied). For gateways whose authorization server is
    /// on the operator's own network, and for tests.
    pub fn with_private_token_endpoints(mut self, allow: bool) -> Self {
        self.private_token_endpoints = allow;
        self.token_client = Default::default();
        self
    }

    /// The credential with a usable access token: refreshed through its token endpoint when
    /// due ([`refresh_due`]; `force` when its server answered 401), else as given (no
    /// network). See the module documentation for the contract, races included.
    ///
    /// On success the refreshed credential is already stored; on failure the stored one is
    /// unchanged and the error says why without any secret
    /// ([`VaultError::Refresh`]; `invalid_grant` means the credential needs a new grant).
    pub async fn refreshed(
        &self,
        credential: &Credential,
        secret: CredentialSecret,
        force: bool,
    ) -> Result<(Credential, CredentialSecret), VaultError> {
        let now = local_now();
        if !refresh_due(&credential.spec.auth, &secret, now, force) {
            return Ok((credential.clone(), secret));
        }
        // The store is the truth: another process may have refreshed already.
        let (stored, stored_secret) = self.stored(credential).await?;
        // A token other than the caller's is newer: a 401 for the old one says nothing about it.
        let force = force && stored_secret.token == secret.token;
        if !refresh_due(&stored.spec.auth, &stored_secret, now, force) {
            return Ok((stored, stored_secret));
        }
        let CredentialAuth::OAuth { refresh: Some(refresh), .. } = &stored.spec.auth else {
            return Ok((stored, stored_secret)); // Not reached: `refresh_due` said it has a refresh config.
        };
        let refresh = refresh.clone();
        let failed = |reason| VaultError::Refresh {
            credential: stored.id.clone(),
            endpoint: endpoint_for_errors(&refresh.token_endpoint),
            reason,
        };
        let got = match self.call_token_endpoint(&refresh, &stored_secret, now).await {
            Ok(got) => got,
            Err(reason) => {
                // Lost a race against a rotating server? The winner's token is in the store.
                if reason.oauth_error() == Some("invalid_grant") {
                    let (again, again_secret) = self.stored(&stored).await?;
                    if again_secret.refresh_token != stored_secret.refresh_token {
                        return Ok((again, again_secret));
                    }
                }
                return Err(failed(reason));
            }
        };
        let mut spec = stored.spec.clone();
        if let CredentialAuth::OAuth { expires_at, .. } = &mut spec.auth {
            *expires_at = got.expires_at;
        }
        let sealed = self.seal(&got.secret)?;
        let updated = self.store.update_credential(&stored.vault_id, &stored.id, spec, Some(sealed)).await?;
        tracing::info!(credential = %updated.id, vault = %updated.vault_id, "refreshed an OAuth access token");
        Ok((updated, got.secret))
    }

    /// The stored credential and its opened secret; an archived one is not refreshed.
    async fn stored(&self, credential: &Credential) -> Result<(Credential, CredentialSecret), VaultError> {
        let sealed = self.store.sealed_credential(&credential.vault_id, &credential.id).await?;
        if sealed.credential.archived_at.is_some() {
            return Err(StoreError::Guard(Guard::CredentialArchived(credential.id.to_string())).into());
        }
        let secret = open_secret(&self.secrets, &sealed.sealed_secret)?;
        Ok((sealed.credential, secret))
    }

    async fn call_token_endpoint(
        &self,
        refresh: &OAuthRefresh,
        secret: &CredentialSecret,
        now: Timestamp,
    ) -> Result<Refreshed, RefreshError> {
        let Some(refresh_token) = &secret.refresh_token else {
            return Err(RefreshError::BadAnswer("no refresh token held")); // refresh_due checked it
        };
        let url = ssrf::check_url(&refresh.token_endpoint, self.private_token_endpoints)?;
        let request = token_request(refresh, refresh_token, secret.client_secret.as_ref())?;
        let client = self.token_client.get_or_init(|| ssrf::client(self.private_token_endpoints, TOKEN_TIMEOUT));
        let mut call = client
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(http::header::ACCEPT, "application/json")
            .body(request.body);
        if let Some(authorization) = request.authorization {
            call = call.header(http::header::AUTHORIZATION, authorization);
        }
        let response = call.send().await.map_err(|e| RefreshError::Send(ssrf::send_failure(e)))?;
        let status = response.status();
        let body = read_bounded(response).await?;
        let secrets: Vec<&str> = [Some(&secret.token), Some(refresh_token), secret.client_secret.as_ref()]
            .into_iter()
            .flatten()
            .map(|s| s.0.as_str())
            .collect();
        if !status.is_success() {
            let answer = serde_json::from_slice::<ErrorAnswer>(&body).ok();
            return Err(RefreshError::Refused {
                status: status.as_u16(),
                error: answer.as_ref().map(|a| scrub(&a.error, &secrets)),
                description: answer.and_then(|a| a.error_description).map(|d| scrub(&d, &secrets)),
            });
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| RefreshError::BadAnswer("not a JSON token response with a string access_token"))?;
        if answer.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer")) {
            return Err(RefreshError::BadAnswer("the token_type is not Bearer"));
        }
        if answer.access_token.is_empty() || answer.access_token.len() > MAX_SECRET {
            return Err(RefreshError::BadAnswer("the access_token is empty or longer than 16 KiB"));
        }
        let rotated = answer.refresh_token.filter(|t| !t.is_empty());
        if rotated.as_ref().is_some_and(|t| t.len() > MAX_SECRET) {
            return Err(RefreshError::BadAnswer("the refresh_token is longer than 16 KiB"));
        }
        Ok(Refreshed {
            secret: CredentialSecret {
                token: Secret(answer.access_token),
                refresh_token: Some(rotated.map_or_else(|| refresh_token.clone(), Secret)),
                client_secret: secret.client_secret.clone(),
            },
            expires_at: answer.expires_in.and_then(|s| s.millis()).map(|ms| Timestamp(now.millis().saturating_add(ms))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth(expires_at: Option<i64>, refresh: bool) -> CredentialAuth {
        CredentialAuth::OAuth {
            server_url: "https://mcp.example.com/mcp".into(),
            expires_at: expires_at.map(Timestamp),
            refresh: refresh.then(|| OAuthRefresh {
                client_id: "client one".into(),
                token_endpoint: "https://auth.example.com/token".into(),
                client_auth: ClientAuth::None,
                resource: None,
                scope: None,
            }),
        }
    }

    fn secret(refresh_token: Option<&str>) -> CredentialSecret {
        CredentialSecret {
            token: Secret("at".into()),
            refresh_token: refresh_token.map(|t| Secret(t.into())),
            client_secret: None,
        }
    }

    #[test]
    fn what_is_due_is_decided_by_one_table() {
        let now = Timestamp(1_000_000);
        let static_bearer = CredentialAuth::StaticBearer { server_url: "https://h".into() };
        for (auth, secret, force, want, why) in [
            (oauth(Some(0), true), secret(Some("rt")), false, true, "expired"),
            (oauth(Some(1_000_000 + 59_000), true), secret(Some("rt")), false, true, "within the margin"),
            (oauth(Some(1_000_000 + 61_000), true), secret(Some("rt")), false, false, "outside the margin"),
            (oauth(Some(1_000_000 + 61_000), true), secret(Some("rt")), true, true, "forced"),
            (oauth(None, true), secret(Some("rt")), false, false, "unknown expiry"),
            (oauth(None, true), secret(Some("rt")), true, true, "unknown expiry, forced"),
            (oauth(Some(0), false), secret(Some("rt")), true, false, "no refresh config"),
            (oauth(Some(0), true), secret(None), true, false, "no refresh token"),
            (oauth(Some(0), true), secret(Some("")), true, false, "an empty refresh token"),
            (static_bearer, secret(Some("rt")), true, false, "a static bearer"),
        ] {
            assert_eq!(refresh_due(&auth, &secret, now, force), want, "{why}");
        }
    }

    #[test]
    fn form_encoding_follows_whatwg() {
        assert_eq!(form_encode("aZ09*-._"), "aZ09*-._");
        assert_eq!(form_encode("a b+c/d=e&f:g%"), "a+b%2Bc%2Fd%3De%26f%3Ag%25");
        assert_eq!(form_encode("é~"), "%C3%A9%7E");
    }

    #[test]
    fn each_client_authentication_puts_the_client_where_rfc_6749_says() {
        let mut refresh = OAuthRefresh {
            client_id: "id:1".into(),
            token_endpoint: "https://auth.example.com/token".into(),
            client_auth: ClientAuth::ClientSecretBasic,
            resource: Some("https://mcp.example.com/mcp".into()),
            scope: Some("read write".into()),
        };
        let (rt, cs) = (Secret("r/t".into()), Secret("s&c".into()));
        let basic = token_request(&refresh, &rt, Some(&cs)).unwrap();
        assert_eq!(
            basic.body,
            "grant_type=refresh_token&refresh_token=r%2Ft&resource=https%3A%2F%2Fmcp.example.com%2Fmcp&scope=read+write"
        );
        // base64("id%3A1:s%26c")
        assert_eq!(basic.authorization.as_deref(), Some("Basic aWQlM0ExOnMlMjZj"));
        let Err(missing) = token_request(&refresh, &rt, None) else { panic!("no client secret") };
        assert_eq!(missing, RefreshError::NoClientSecret(ClientAuth::ClientSecretBasic));
        assert_eq!(
            missing.to_string(),
            "the credential authenticates with client_secret_basic but holds no client secret"
        );

        refresh.client_auth = ClientAuth::ClientSecretPost;
        let post = token_request(&refresh, &rt, Some(&cs)).unwrap();
        assert!(post.authorization.is_none());
        assert!(post.body.ends_with("&client_id=id%3A1&client_secret=s%26c"), "{}", post.body);

        refresh.client_auth = ClientAuth::None;
        let none = token_request(&refresh, &rt, Some(&cs)).unwrap();
        assert!(none.authorization.is_none());
        assert!(none.body.ends_with("&client_id=id%3A1") && !none.body.contains("s%26c"), "{}", none.body);
    }

    #[test]
    fn server_text_in_errors_is_cut_and_never_repeats_a_secret() {
        let said = scrub("bad token r/t (r%2Ft)\n", &["r/t", ""]);
        assert_eq!(said, "bad token <redacted> (<redacted>)");
        assert_eq!(scrub(&"x".repeat(500), &[]).chars().count(), MAX_REASON_CHARS + 3);
        let e = RefreshError::Refused { status: 400, error: Some("invalid_grant".into()), description: None };
        assert_eq!(e.to_string(), "the token endpoint answered HTTP 400 (invalid_grant)");
        assert_eq!(e.oauth_error(), Some("invalid_grant"));
    }

    #[test]
    fn expiry_reads_numbers_and_numeric_strings() {
        for (json, want) in [
            (r#"{"access_token":"a","expires_in":3600}"#, Some(3_600_000)),
            (r#"{"access_token":"a","expires_in":"60"}"#, Some(60_000)),
            (r#"{"access_token":"a","expires_in":-5}"#, Some(0)),
            (r#"{"access_token":"a","expires_in":"soon"}"#, None),
            (r#"{"access_token":"a","expires_in":null}"#, None),
            (r#"{"access_token":"a"}"#, None),
        ] {
            let answer: TokenAnswer = serde_json::from_str(json).unwrap();
            assert_eq!(answer.expires_in.and_then(|s| s.millis()), want, "{json}");
        }
        assert_eq!(endpoint_for_errors("https://auth.example.com:8443/t?k=v"), "https://auth.example.com:8443/t");
    }
}
