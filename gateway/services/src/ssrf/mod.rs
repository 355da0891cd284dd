//! The SSRF filter for outbound deliveries to addresses clients name (A2A push targets,
//! protocols/a2a.md §7; webhook endpoints registered through the API): loopback, private,
//! link-local, unspecified and other non-global addresses are refused unless the operator
//! allowed private targets. The check runs when a config is registered and again at connect time,
//! through a DNS resolver that drops refused addresses, so a name that re-resolves to a
//! private address later (DNS rebinding) still cannot be reached. Redirects are never followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether an address is one a push may reach without `allow_private_push_targets`.
///
/// IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated
/// `::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`)
/// are judged by that IPv4 address, however they are spelled (`[::ffff:0:7f00:1]` is
/// 127.0.0.1), since a translator, relay or the host's own stack delivers them there;
/// transition forms whose target cannot be read (Teredo, local-use NAT64) and the rest of the
/// reserved `::/8` are refused.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10 shared address space
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24 IETF protocol assignments
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18/15 benchmarking
                || o[0] >= 224)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // fc00::/7 unique local
                || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 link-local
                || (s[0] & 0xffc0) == 0xfec0 // fec0::/10 site-local (deprecated, still routed locally)
                || (s[0] & 0xff00) == 0 // ::/8 reserved (its IPv4-carrying forms were judged above)
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // 64:ff9b:1::/48 local-use NAT64
                || (s[0] == 0x2001 && s[1] == 0) // 2001::/32 Teredo
                || (s[0] == 0x2001 && s[1] == 0xdb8) // 2001:db8::/32 documentation
                || (s[0] == 0x100 && s[1] == 0 && s[2] == 0 && s[3] == 0)) // 100::/64 discard
        }
    }
}

/// The IPv4 address an IPv6 address stands for, if it is one of the forms that carry one.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    // IPv4-translated (SIIT) ::ffff:0:a.b.c.d.
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some(low);
    }
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    // 6to4 2002:AABB:CCDD::/48 relays to AA.BB.CC.DD.
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    // IPv4-compatible ::a.b.c.d (deprecated); :: and ::1 are themselves, not IPv4.
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(low);
    }
    None
}

/// Why a target was refused: at registration ([`check_url`]) or at connect time (the
/// resolver of [`client`], found in a send error's source chain by [`refusal`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TargetError {
    #[error("target URL must be absolute http or https: {0}")]
    BadUrl(String),
    #[error("target {0} is a non-public address (loopback, private, link-local or other special-purpose)")]
    Private(String),
}

/// The refusal of a non-public target inside a failed send of [`client`], if that is why it
/// failed: reqwest reports it only as "error sending request" and keeps the resolver's
/// [`TargetError`] in its source chain.
pub fn refusal(error: &reqwest::Error) -> Option<&TargetError> {
    let mut source = std::error::Error::source(error);
    while let Some(s) = source {
        if let Some(refused) = s.downcast_ref::<TargetError>() {
            return Some(refused);
        }
        source = s.source();
    }
    None
}

/// A failed send of [`client`] as an operator should read it (log lines, an outbox's last
/// error): a refused target says it is non-public; anything else gives reqwest's reason and
/// its causes, never the URL (a query may hold a credential).
pub fn send_failure(error: reqwest::Error) -> String {
    if let Some(refused) = refusal(&error) {
        return refused.to_string();
    }
    let error = error.without_url();
    format!("request failed: {}", gateway_wire::causes::causes(&error))
}

/// Checks a target URL without resolving names (literal addresses and `localhost`).
pub fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, TargetError> {
    let bad = || TargetError::BadUrl(url.chars().take(200).collect());
    if url.len() > 2048 {
        return Err(bad());
    }
    let parsed = reqwest::Url::parse(url).map_err(|_| bad())?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad());
    }
    let host = parsed.host_str().ok_or_else(bad)?.to_ascii_lowercase();
    if allow_private {
        return Ok(parsed);
    }
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let private = match literal.parse::<IpAddr>() {
        Ok(ip) => !is_public(ip),
        Err(_) => {
            let d = host.trim_end_matches('.');
            d == "localhost" || d.ends_with(".localhost")
        }
    };
    if private {
        return Err(TargetError::Private(parsed.host_str().unwrap_or_default().to_owned()));
    }
    Ok(parsed)
}

/// Resolves names and keeps only public addresses (connect-time enforcement).
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = addrs.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(Box::new(TargetError::Private(host)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client deliveries use: no redirects, bounded time, and (unless private targets
/// are allowed) the public-only resolver.
pub fn client(allow_private: bool, timeout: Duration) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy();
    if !allow_private {
        b = b.dns_resolver(Arc::new(PublicOnly));
    }
    b.build().unwrap_or_else(|_| reqwest::Client::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_loopback_targets_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
        ] {
            assert!(matches!(check_url(url, false), Err(TargetError::Private(_))), "{url} should be refused");
            assert!(check_url(url, true).is_ok(), "{url} is allowed with the override");
        }
        assert!(check_url("https://example.com/hook", false).is_ok());
        assert!(check_url("http://8.8.8.8/", false).is_ok());
        for bad in ["ftp://example.com/", "not a url", "http://user:pw@example.com/", "/relative"] {
            assert!(matches!(check_url(bad, true), Err(TargetError::BadUrl(_))), "{bad}");
        }
    }

    #[test]
    fn transition_forms_are_judged_by_the_ipv4_address_they_carry() {
        let refused = [
            ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1"),
            ("64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254"),
            ("64:ff9b::c0a8:101", "NAT64 of 192.168.1.1"),
            ("2002:7f00:1::", "6to4 of 127.0.0.1"),
            ("2002:a00:1::1", "6to4 of 10.0.0.1"),
            ("::127.0.0.1", "IPv4-compatible 127.0.0.1"),
            ("::10.1.2.3", "IPv4-compatible 10.1.2.3"),
            ("fec0::1", "site-local"),
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ];
        for (ip, what) in refused {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_public(ip), "{what} ({ip}) must be refused");
            assert!(
                matches!(check_url(&format!("http://[{ip}]/"), false), Err(TargetError::Private(_))),
                "{what} in a URL"
            );
        }
        for (ip, what) in [
            ("64:ff9b::808:808", "NAT64 of 8.8.8.8"),
            ("2002:808:808::1", "6to4 of 8.8.8.8"),
            ("::8.8.8.8", "IPv4-compatible 8.8.8.8"),
            ("2606:4700::1111", "global unicast"),
        ] {
            assert!(is_public(ip.parse().unwrap()), "{what} is public");
        }
        assert!(!is_public("::".parse().unwrap()) && !is_public("::1".parse().unwrap()));
    }

    #[test]
    fn special_purpose_ipv4_ranges_are_refused() {
        for ip in ["198.18.0.1", "198.19.255.254", "192.0.0.8", "192.0.0.170", "100.64.0.1", "240.0.0.1"] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["198.20.0.1", "198.17.255.255", "192.0.1.1", "1.1.1.1"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    /// Every way of writing a non-public IPv4 address as an IPv6 one, as a registration
    /// would receive it (finding: `[::ffff:0:7f00:1]` was accepted).
    #[test]
    fn every_ipv6_spelling_of_a_non_public_ipv4_address_is_refused() {
        for (url, what) in [
            ("http://[::ffff:127.0.0.1]/", "IPv4-mapped, dotted"),
            ("http://[::ffff:7f00:1]/", "IPv4-mapped, hex"),
            ("http://[0:0:0:0:0:ffff:7f00:0001]/", "IPv4-mapped, long"),
            ("http://[::FFFF:A9FE:A9FE]/", "IPv4-mapped metadata address, upper case"),
            ("http://[::ffff:0:7f00:1]/", "IPv4-translated (SIIT) loopback"),
            ("http://[::ffff:0:127.0.0.1]/", "IPv4-translated, dotted"),
            ("http://[::ffff:0:a00:1]/", "IPv4-translated 10.0.0.1"),
            ("http://[::ffff:0:a9fe:a9fe]/", "IPv4-translated 169.254.169.254"),
            ("http://[::7f00:1]/", "IPv4-compatible loopback"),
            ("http://[::c0a8:101]/", "IPv4-compatible 192.168.1.1"),
            ("http://[64:ff9b::127.0.0.1]/", "NAT64, dotted"),
            ("http://[64:ff9b::a00:1]/", "NAT64 10.0.0.1"),
            ("http://[2002:a9fe:a9fe::1]/", "6to4 of 169.254.169.254"),
            ("http://[::1:7f00:1]/", "elsewhere in the reserved ::/8"),
            ("http://[1::7f00:1]/", "elsewhere in the reserved ::/8"),
        ] {
            assert!(matches!(check_url(url, false), Err(TargetError::Private(_))), "{what}: {url} accepted");
        }
        for (ip, what) in [
            ("::ffff:0:808:808", "IPv4-translated 8.8.8.8"),
            ("::ffff:8.8.8.8", "IPv4-mapped 8.8.8.8"),
            ("64:ff9b::1.1.1.1", "NAT64 1.1.1.1"),
        ] {
            assert!(is_public(ip.parse().unwrap()), "{what} is public");
        }
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_that_resolve_to_loopback() {
        let c = client(false, Duration::from_secs(2));
        let err = c.post("http://localhost:9/hook").send().await.unwrap_err();
        let chain = format!("{err:?}");
        assert!(chain.contains("Private"), "{chain}");
        // reqwest says only "error sending request"; the refusal is found and said.
        assert!(!err.to_string().contains("non-public"), "{err}");
        assert_eq!(refusal(&err), Some(&TargetError::Private("localhost".into())));
        let said = send_failure(err);
        assert!(said.contains("localhost is a non-public address"), "{said}");
    }

    #[tokio::test]
    async fn other_send_failures_keep_their_causes_and_not_the_url() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let c = client(true, Duration::from_secs(2));
        let err = c.post(format!("http://{closed}/hook?token=s3cret")).send().await.unwrap_err();
        assert_eq!(refusal(&err), None);
        let said = send_failure(err);
        assert!(said.starts_with("request failed") && said.to_lowercase().contains("connect"), "{said}");
        assert!(!said.contains("s3cret"), "{said}");
    }
}
