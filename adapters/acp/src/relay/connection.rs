//! The relay's WebSocket to the gateway: the address, the key, and what a refusal means.

use futures::StreamExt;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message, http};

use crate::rpc::framing::MAX_MESSAGE_BYTES;

/// The WebSocket address of `/acp` for a gateway URL: `http`/`https` become `ws`/`wss`, and a
/// URL without a path gets `/acp`. Anything else (another scheme, credentials in the URL, a
/// query) is refused with the reason.
pub fn endpoint(url: &str) -> Result<String, String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{url:?} is not a URL (https://host[:port])"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => "wss",
        "http" | "ws" => "ws",
        other => return Err(format!("the gateway URL must be http(s) or ws(s), not {other:?}")),
    };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    if authority.is_empty() || authority.contains('@') {
        return Err("the gateway URL needs a host, and no credentials (the key goes in GATEWAY_API_KEY or `gateway login --url`)".into());
    }
    if path.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the gateway URL must not carry a query, a fragment or spaces".into());
    }
    let path = path.trim_end_matches('/');
    let path = if path.is_empty() { "acp".to_owned() } else { path.to_owned() };
    Ok(format!("{scheme}://{authority}/{path}"))
}

pub(super) type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One live connection to the gateway.
pub(super) struct Conn {
    pub(super) ws: Ws,
    /// Counts connections, so an answer to a request asked on an earlier one is recognised.
    pub(super) generation: u64,
    /// Until the re-opening requests are answered, the editor's requests wait.
    pub(super) reopening: usize,
    pub(super) heard: Instant,
}

/// The next frame of the connection, or never when there is none.
pub(super) async fn next_frame(conn: &mut Option<Conn>) -> Option<Result<Message, tungstenite::Error>> {
    match conn {
        Some(c) => c.ws.next().await,
        None => std::future::pending().await,
    }
}

/// Why a connection could not be made.
pub(super) enum Failure {
    /// The gateway refused the key (401, 403): trying again will not help.
    Refused(String),
    Other(String),
}

pub(super) async fn open(endpoint: &str, key: Option<String>) -> Result<Ws, Failure> {
    let mut request = endpoint.into_client_request().map_err(|e| Failure::Other(e.to_string()))?;
    let headers = request.headers_mut();
    if let Some(key) = key {
        let value = http::HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| Failure::Refused("the key holds characters a header cannot carry".into()))?;
        headers.insert(http::header::AUTHORIZATION, value);
    }
    headers.insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("gateway-acp-relay/", env!("CARGO_PKG_VERSION"))),
    );
    let config =
        WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE_BYTES)).max_frame_size(Some(MAX_MESSAGE_BYTES));
    match tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, None).await {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Http(response)) => {
            let status = response.status();
            let body =
                response.body().as_ref().map(|b| String::from_utf8_lossy(b).trim().to_owned()).unwrap_or_default();
            let said = crate::rpc::clip(&body, 300).to_owned();
            let reason = if said.is_empty() { status.to_string() } else { format!("{status}: {said}") };
            match status.as_u16() {
                401 | 403 => Err(Failure::Refused(reason)),
                _ => Err(Failure::Other(reason)),
            }
        }
        Err(e) => Err(Failure::Other(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_gateway_url_becomes_its_acp_endpoint_and_a_bad_one_is_refused_with_the_reason() {
        assert_eq!(endpoint("https://gw.example").expect("accepted"), "wss://gw.example/acp");
        assert_eq!(endpoint("http://127.0.0.1:8080/").expect("accepted"), "ws://127.0.0.1:8080/acp");
        assert_eq!(endpoint("wss://gw.example/team/acp").expect("accepted"), "wss://gw.example/team/acp");
        for bad in
            ["gw.example", "ftp://gw.example", "https://user:pw@gw.example", "https://gw.example/acp?x=1", "https://"]
        {
            assert!(endpoint(bad).is_err(), "{bad} is refused");
        }
    }
}
