//! Where a request comes from and whom it addresses: the facts that decide trust while no
//! API key exists, read the same way for every HTTP face.
//!
//! Without keys the gateway trusts programs on this host. Three kinds of request only look
//! like one:
//!
//! - **another address**: the peer is not on loopback;
//! - **a web page**: browsers mark the requests a page sends with `Origin`, or with
//!   `Sec-Fetch-Site: cross-site | same-site`, and cannot attach our key headers. CORS stops
//!   only the reading of answers, not the effects of requests;
//! - **a page whose name was rebound** (DNS rebinding): `rebind.example` first resolves to the
//!   attacker's server, then to `127.0.0.1`. The browser now sends same-origin requests to us
//!   without `Origin`, but its `Host` (HTTP/2 `:authority`) still names the attacker's
//!   domain. The gateway therefore serves keyless requests only when they address one of
//!   its own names ([`OwnNames`]).
//!
//! A request with no `Host` at all is not refused for that: every browser sends one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::{HeaderMap, Uri, header};

/// Longest host shown back in an error message.
const MAX_SHOWN_HOST: usize = 255;

/// The names a keyless gateway answers to: loopback IP literals (`127.0.0.0/8`, `[::1]`),
/// `localhost`, and the host of `public_url`, each with any port.
///
/// Subdomains of `localhost` (`app.localhost`) are **not** included: browsers pin them to
/// loopback, but a system resolver without that rule sends them to DNS, where a hostile
/// resolver can point them anywhere. An operator who wants one sets it as `public_url`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnNames {
    /// The host of `public_url`, normalized like a presented host.
    public_host: Option<String>,
}

impl OwnNames {
    /// Loopback literals and `localhost`, plus the host of `public_url` (e.g.
    /// `https://gw.example.com/prefix` adds `gw.example.com`). A URL without a readable host
    /// adds nothing.
    pub fn with_public_url(public_url: &str) -> Self {
        let public_host = public_url
            .parse::<Uri>()
            .ok()
            .and_then(|u| u.authority().and_then(|a| host_of(a.as_str())))
            .filter(|h| !is_loopback_name(h));
        Self { public_host }
    }

    /// Whether `authority` (a `Host` value: host with an optional port) is one of ours.
    pub fn contains(&self, authority: &str) -> bool {
        let Some(host) = host_of(authority) else { return false };
        if is_loopback_name(&host) {
            return true;
        }
        self.public_host.as_deref().is_some_and(|p| dns_equal(p, &host))
    }
}

/// A loopback IP literal or exactly `localhost`.
fn is_loopback_name(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6
            .parse::<Ipv6Addr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
    }
    host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// DNS names compare without case (already lowered) and without one trailing dot.
fn dns_equal(a: &str, b: &str) -> bool {
    a.strip_suffix('.').unwrap_or(a) == b.strip_suffix('.').unwrap_or(b)
}

/// The host of an authority, lowercased, IPv6 literals kept in brackets; `None` when it is
/// not a well-formed `host[:port]` (userinfo never belongs in `Host`, so `@` is refused).
fn host_of(authority: &str) -> Option<String> {
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inner, after) = rest.split_once(']')?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':')?),
            };
            (&authority[..inner.len() + 2], port)
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() || port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    Some(host.to_ascii_lowercase())
}

/// What trust without keys depends on, read from one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The peer address is a loopback address.
    pub loopback: bool,
    /// A browser sent it on a page's behalf.
    pub web_page: bool,
    /// The host the request addressed, when that is not one of this gateway's names.
    pub foreign_host: Option<String>,
}

impl Caller {
    /// A program on this host addressing us by one of our names.
    pub const LOCAL: Caller = Caller { loopback: true, web_page: false, foreign_host: None };
    /// A program on another host.
    pub const REMOTE: Caller = Caller { loopback: false, web_page: false, foreign_host: None };
    /// A web page, wherever its browser runs.
    pub const WEB_PAGE: Caller = Caller { loopback: true, web_page: true, foreign_host: None };

    /// Reads a request: its peer address (`None` when the server did not record one, which
    /// counts as not loopback), the request URI (its authority is HTTP/2's `:authority` or an
    /// absolute-form target, and wins over `Host`, as RFC 9112 §3.2.2 says) and its headers.
    pub fn of_request(peer: Option<SocketAddr>, uri: &Uri, headers: &HeaderMap, names: &OwnNames) -> Caller {
        let loopback = peer.is_some_and(|p| is_loopback_ip(p.ip()));
        let fetch_site = headers.get("sec-fetch-site").map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase());
        let web_page = headers.contains_key(header::ORIGIN)
            || fetch_site.is_some_and(|s| !matches!(s.as_str(), "none" | "same-origin"));
        Caller { loopback, web_page, foreign_host: foreign_host(uri, headers, names) }
    }
}

fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// The first addressed name that is not ours: the URI authority if present, else every
/// `Host` header (a browser sends exactly one; two that disagree must not pass on the first).
fn foreign_host(uri: &Uri, headers: &HeaderMap, names: &OwnNames) -> Option<String> {
    if let Some(authority) = uri.authority() {
        return (!names.contains(authority.as_str())).then(|| shown(authority.as_str()));
    }
    headers.get_all(header::HOST).iter().find_map(|v| match v.to_str() {
        Ok(h) if names.contains(h.trim()) => None,
        Ok(h) => Some(shown(h.trim())),
        Err(_) => Some("(not visible ASCII)".to_owned()),
    })
}

/// A presented host as it may appear in an error message: bounded, printable.
fn shown(host: &str) -> String {
    host.chars().filter(|c| c.is_ascii_graphic()).take(MAX_SHOWN_HOST).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_names_are_loopback_literals_localhost_and_the_public_host() {
        let names = OwnNames::with_public_url("https://GW.example.com:8443/base");
        // (authority, ours?)
        let table = [
            ("127.0.0.1", true),
            ("127.0.0.1:8080", true),
            ("127.8.9.10:1", true),
            ("[::1]", true),
            ("[::1]:8080", true),
            ("[::ffff:127.0.0.1]:80", true),
            ("localhost", true),
            ("LOCALHOST:8080", true),
            ("gw.example.com", true),
            ("gw.example.com:9999", true),
            ("GW.EXAMPLE.COM.", true),
            ("rebind.example", false),
            ("rebind.example:8080", false),
            ("app.localhost", false),
            ("localhost.", false),
            ("localhost.rebind.example", false),
            ("127.0.0.1.rebind.example", false),
            ("128.0.0.1", false),
            ("0.0.0.0", false),
            ("[::2]", false),
            ("[::1", false),
            ("[::1]x", false),
            ("::1", false),
            ("localhost:", false),
            ("localhost:80a", false),
            ("", false),
            ("user@127.0.0.1", false),
            ("127.0.0.1@rebind.example", false),
        ];
        for (authority, ours) in table {
            assert_eq!(names.contains(authority), ours, "{authority:?}");
        }
        assert!(!OwnNames::default().contains("gw.example.com"), "no public_url, no public host");
        assert!(!OwnNames::with_public_url("not a url").contains("not"));
    }

    fn request(host: Option<&str>, extra: &[(&str, &str)]) -> (Uri, HeaderMap) {
        let mut headers = HeaderMap::new();
        if let Some(h) = host {
            headers.insert(header::HOST, h.parse().expect("header"));
        }
        for (k, v) in extra {
            let name = http::HeaderName::from_bytes(k.as_bytes()).expect("header name");
            headers.append(name, v.parse().expect("header"));
        }
        (Uri::from_static("/v1/sessions"), headers)
    }

    /// (peer, Host, other headers, loopback, web page, foreign host)
    type Row =
        (Option<SocketAddr>, Option<&'static str>, Vec<(&'static str, &'static str)>, bool, bool, Option<String>);

    #[test]
    fn callers_are_read_from_peer_host_origin_and_fetch_metadata() {
        let names = OwnNames::with_public_url("http://gw.example.com");
        let lo: Option<SocketAddr> = "127.0.0.1:5000".parse().ok();
        let lo6: Option<SocketAddr> = "[::1]:5000".parse().ok();
        let lan: Option<SocketAddr> = "192.0.2.7:5000".parse().ok();
        let foreign = |h: &str| Some(h.to_owned());
        let table: Vec<Row> = vec![
            (lo, Some("127.0.0.1:8080"), vec![], true, false, None),
            (lo6, Some("[::1]:8080"), vec![], true, false, None),
            (lo, Some("localhost:8080"), vec![], true, false, None),
            (lo, Some("gw.example.com"), vec![], true, false, None),
            (lo, None, vec![], true, false, None),
            (None, Some("127.0.0.1"), vec![], false, false, None),
            (lan, Some("127.0.0.1"), vec![], false, false, None),
            (lo, Some("rebind.example:8080"), vec![], true, false, foreign("rebind.example:8080")),
            (
                lo,
                Some("rebind.example"),
                vec![("sec-fetch-site", "same-origin")],
                true,
                false,
                foreign("rebind.example"),
            ),
            (lo, Some("127.0.0.1"), vec![("origin", "null")], true, true, None),
            (lo, Some("127.0.0.1"), vec![("sec-fetch-site", "cross-site")], true, true, None),
            (lo, Some("127.0.0.1"), vec![("sec-fetch-site", "Same-Site")], true, true, None),
            (lo, Some("127.0.0.1"), vec![("sec-fetch-site", "none")], true, false, None),
            (lo, Some("127.0.0.1"), vec![("sec-fetch-site", "same-origin")], true, false, None),
            (lo, Some("127.0.0.1"), vec![("sec-fetch-site", "bogus")], true, true, None),
            (lo, Some("127.0.0.1"), vec![("host", "rebind.example")], true, false, foreign("rebind.example")),
        ];
        for (peer, host, extra, loopback, web_page, foreign_host) in table {
            let (uri, headers) = request(host, &extra);
            let got = Caller::of_request(peer, &uri, &headers, &names);
            assert_eq!(got, Caller { loopback, web_page, foreign_host }, "{peer:?} {host:?} {extra:?}");
        }
    }

    #[test]
    fn the_uri_authority_wins_over_host() {
        let names = OwnNames::default();
        let (_, headers) = request(Some("127.0.0.1"), &[]);
        let rebound = Uri::from_static("http://rebind.example:8080/v1/sessions");
        let c = Caller::of_request("127.0.0.1:1".parse().ok(), &rebound, &headers, &names);
        assert_eq!(c.foreign_host.as_deref(), Some("rebind.example:8080"), "HTTP/2 :authority is the addressed name");
        let ours = Uri::from_static("http://localhost:8080/v1/sessions");
        let (_, headers) = request(Some("rebind.example"), &[]);
        assert_eq!(Caller::of_request("127.0.0.1:1".parse().ok(), &ours, &headers, &names).foreign_host, None);
    }
}
