//! What git may be given: the one rule for a repository resource's URL and checkout, applied
//! when a session is created or a resource added (a 400 naming why) and again right before
//! git runs.
//!
//! Why the URL must be written exactly as it is read: the gateway checks the host it parses
//! (the WHATWG parser of the `url` crate), and git hands the URL text to curl, which parses
//! it its own way. Wherever the two disagree, the host checked is not the host fetched: in
//! `http://public.example\@127.0.0.1/r.git` the WHATWG parser reads `\` as `/` (host
//! `public.example`) while curl reads `public.example\` as a user name and connects to
//! loopback; `#@` and `?@` play the same trick with a fragment or a query; whitespace, control
//! characters, percent-encoded or numeric-shorthand hosts (`127.1`, `0x7f.1`, `%31`) and
//! missing or extra slashes after the scheme are normalised by one parser and not the other.
//! So a URL is accepted only when its text is its own serialization (up to the case of the
//! scheme and host, a default port and an empty path), and git is given that serialization:
//! what was checked is, byte for byte, what git fetches.

use std::net::Ipv6Addr;

use gateway_core::session::Checkout;
use reqwest::Url;

use crate::ssrf;

/// Longest accepted repository URL, in bytes.
pub const MAX_URL: usize = 2048;
/// Longest accepted branch name, in bytes.
const MAX_BRANCH: usize = 255;

/// Why a repository resource cannot be checked out as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepositoryError {
    #[error("the repository url is longer than {MAX_URL} bytes")]
    TooLong,
    #[error("the repository url must be an absolute http or https URL (scheme://host/path)")]
    NotHttp,
    #[error(
        "the repository url must not hold credentials or an `@` before its path (give a token as authorization_token)"
    )]
    Credentials,
    /// Something URL parsers read differently (see the module documentation).
    #[error("the repository url contains {0}, which git and the gateway would read differently")]
    Ambiguous(&'static str),
    #[error("the repository url's host is written {given:?} but read as {read:?}; write it as {read:?}")]
    Host { given: String, read: String },
    #[error("the repository url's port must be a decimal number")]
    Port,
    #[error("the repository url is not written the way it is read; write it as {0}")]
    NotCanonical(String),
    #[error(
        "the repository host {0} is a loopback, private or link-local address (environments.allow_private_repositories is off)"
    )]
    Private(String),
    #[error("{0:?} is not a branch name git accepts")]
    Branch(String),
    #[error("{0:?} is not a commit id (4 to 64 hexadecimal digits)")]
    Commit(String),
}

/// The URL git is given for `raw`, or why there is none. With `allow_private` false, a
/// literal loopback, private or link-local host (and `localhost`) is refused here; a name is
/// resolved and checked when the checkout runs.
pub fn repository_url(raw: &str, allow_private: bool) -> Result<Url, RepositoryError> {
    if raw.len() > MAX_URL {
        return Err(RepositoryError::TooLong);
    }
    if let Some(c) = raw.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(RepositoryError::Ambiguous(if c.is_ascii() {
            "whitespace or a control character"
        } else {
            "a non-ASCII character (write the host in punycode and percent-encode the path)"
        }));
    }
    for (c, what) in [('\\', "a backslash"), ('#', "a fragment (`#`)"), ('?', "a query (`?`)")] {
        if raw.contains(c) {
            return Err(RepositoryError::Ambiguous(what));
        }
    }
    let parsed = Url::parse(raw).map_err(|_| RepositoryError::NotHttp)?;
    let scheme = parsed.scheme();
    if !matches!(scheme, "http" | "https") {
        return Err(RepositoryError::NotHttp);
    }
    // The text after `scheme://` up to the path: exactly two slashes (WHATWG also reads
    // `http:host`, `http:/host` and `http:///host`; curl does not).
    let prefix = format!("{scheme}://");
    let rest = match raw.get(..prefix.len()) {
        Some(p) if p.eq_ignore_ascii_case(&prefix) => &raw[prefix.len()..],
        _ => return Err(RepositoryError::NotHttp),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(RepositoryError::Credentials);
    }
    check_authority(authority, &parsed)?;
    let path = if path.is_empty() { "/" } else { path };
    if path != parsed.path() {
        return Err(RepositoryError::NotCanonical(parsed.as_str().to_owned()));
    }
    if !allow_private {
        match ssrf::check_url(parsed.as_str(), false) {
            Ok(_) => {}
            Err(ssrf::TargetError::Private(host)) => return Err(RepositoryError::Private(host)),
            Err(ssrf::TargetError::BadUrl(_)) => return Err(RepositoryError::NotHttp),
        }
    }
    Ok(parsed)
}

/// The host and port as written must be the host and port as parsed.
fn check_authority(authority: &str, parsed: &Url) -> Result<(), RepositoryError> {
    let read = parsed.host_str().unwrap_or_default().to_owned();
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    let same_host = match (host.strip_prefix('[').and_then(|h| h.strip_suffix(']')), read.strip_prefix('[')) {
        // IPv6 literals are compared as addresses (the serialization compresses them).
        (Some(given), Some(read)) => {
            let read = read.strip_suffix(']').unwrap_or(read);
            given.parse::<Ipv6Addr>().is_ok_and(|g| read.parse::<Ipv6Addr>().is_ok_and(|r| g == r))
        }
        (None, None) => host.eq_ignore_ascii_case(&read),
        _ => false,
    };
    if !same_host {
        return Err(RepositoryError::Host { given: host.chars().take(255).collect(), read });
    }
    if let Some(port) = port {
        let valid = !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
        if !valid || port.parse::<u16>().ok() != parsed.port_or_known_default() {
            return Err(RepositoryError::Port);
        }
    }
    Ok(())
}

/// A checkout git will read as a branch name or a commit id, never as an option or a
/// revision expression.
pub fn check_checkout(checkout: &Checkout) -> Result<(), RepositoryError> {
    match checkout {
        Checkout::Branch { name } => check_branch(name),
        Checkout::Commit { sha } => check_sha(sha),
    }
}

/// A branch name as `git check-ref-format --branch` accepts it: no option (`-…`), no
/// whitespace, control characters (NUL included) or `~^:?*[\`, no `..` or `@{`, no component
/// starting with `.` or ending in `.lock`, no empty component, not `@`.
pub(crate) fn check_branch(name: &str) -> Result<(), RepositoryError> {
    let bad = || RepositoryError::Branch(name.chars().take(MAX_BRANCH).collect());
    if name.is_empty()
        || name.len() > MAX_BRANCH
        || name.starts_with('-')
        || name == "@"
        || name.ends_with('.')
        || name.contains("..")
        || name.contains("@{")
        || name.chars().any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c))
    {
        return Err(bad());
    }
    if name.split('/').any(|part| part.is_empty() || part.starts_with('.') || part.ends_with(".lock")) {
        return Err(bad());
    }
    Ok(())
}

/// A commit id: 4 to 64 hexadecimal digits.
pub(crate) fn check_sha(sha: &str) -> Result<(), RepositoryError> {
    if !(4..=64).contains(&sha.len()) || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(RepositoryError::Commit(sha.chars().take(64).collect()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The URL forms of the attack, and others where two parsers disagree: refused, naming why.
    #[test]
    fn urls_read_differently_by_git_and_the_gateway_are_refused() {
        use RepositoryError::*;
        for (raw, want) in [
            ("http://public.example\\@127.0.0.1:9/r.git", Ambiguous("a backslash")),
            ("http://public.example#@127.0.0.1:9/r.git", Ambiguous("a fragment (`#`)")),
            ("http://public.example?@127.0.0.1:9/r.git", Ambiguous("a query (`?`)")),
            ("http://public.example/r.git#main", Ambiguous("a fragment (`#`)")),
            ("http://public.example /r.git", Ambiguous("whitespace or a control character")),
            ("http://public.example\t@127.0.0.1/r.git", Ambiguous("whitespace or a control character")),
            ("http://public.example\n@127.0.0.1/r.git", Ambiguous("whitespace or a control character")),
            (" http://public.example/r.git", Ambiguous("whitespace or a control character")),
            ("http://public.example/r.git\0", Ambiguous("whitespace or a control character")),
            ("http://user@public.example/r.git", Credentials),
            ("http://user:pw@public.example/r.git", Credentials),
            ("http://@public.example/r.git", Credentials),
            ("http:public.example/r.git", NotHttp),
            ("http:/public.example/r.git", NotHttp),
            ("file:///etc/passwd", NotHttp),
            ("ext::sh -c id", Ambiguous("whitespace or a control character")),
            ("git://public.example/r.git", NotHttp),
        ] {
            assert_eq!(repository_url(raw, true), Err(want), "{raw:?}");
        }
        for raw in [
            "http:///127.0.0.1/r.git",
            "http://127.0.0.%31/r.git",
            "http://%31%32%37.0.0.1/r.git",
            "http://127.1/r.git",
            "http://0x7f.0.0.1/r.git",
            "http://2130706433/r.git",
            "http://017700000001/r.git",
        ] {
            assert!(matches!(repository_url(raw, true), Err(Host { .. })), "{raw:?}: {:?}", repository_url(raw, true));
        }
        for raw in [
            "http://public.example/a/../r.git",
            "http://public.example/%2e%2e/r.git",
            "http://h.example/a\"b",
            "http://h.example/{x}",
        ] {
            assert!(
                matches!(repository_url(raw, true), Err(NotCanonical(_))),
                "{raw:?}: {:?}",
                repository_url(raw, true)
            );
        }
        assert_eq!(repository_url("http://h.example:/r.git", true), Err(Port));
        assert_eq!(repository_url("http://h.example:+80/r.git", true), Err(NotHttp));
        let long = format!("https://h.example/{}", "a".repeat(MAX_URL));
        assert_eq!(repository_url(&long, true), Err(TooLong));
    }

    #[test]
    fn a_canonical_url_is_what_git_gets() {
        for (raw, given) in [
            ("https://github.com/o/r.git", "https://github.com/o/r.git"),
            ("HTTPS://GitHub.com/o/r", "https://github.com/o/r"),
            ("https://github.com:443/o/r.git", "https://github.com/o/r.git"),
            ("http://git.example:8080/o/r.git", "http://git.example:8080/o/r.git"),
            ("https://git.example", "https://git.example/"),
            ("https://[2606:4700::1111]/r.git", "https://[2606:4700::1111]/r.git"),
            ("https://git.example/o/r%20x.git", "https://git.example/o/r%20x.git"),
        ] {
            assert_eq!(repository_url(raw, false).map(|u| u.to_string()), Ok(given.to_owned()), "{raw}");
        }
    }

    /// Finding 15: literal non-public hosts are refused when the resource is given, not only
    /// when the clone runs.
    #[test]
    fn literal_private_hosts_are_refused_unless_allowed() {
        for raw in [
            "http://127.0.0.1:8080/r.git",
            "http://localhost/r.git",
            "http://10.1.2.3/r.git",
            "http://169.254.169.254/r.git",
            "http://[::1]/r.git",
            "http://[::ffff:0:7f00:1]/r.git",
        ] {
            assert!(matches!(repository_url(raw, false), Err(RepositoryError::Private(_))), "{raw}");
            assert!(repository_url(raw, true).is_ok(), "{raw} with private repositories allowed");
        }
    }

    #[test]
    fn only_names_and_ids_reach_git_as_refs() {
        for good in ["main", "feature/x-1", "release-1.2", "v1.0", "a@b"] {
            assert_eq!(check_branch(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-c",
            "--upload-pack=x",
            "a b",
            "a\nb",
            "main\0",
            "a..b",
            "a~1",
            "a^",
            "a:b",
            "a*",
            "a[b",
            "a\\b",
            "@",
            "a@{1}",
            "a/",
            "/a",
            "a//b",
            ".hidden",
            "a/.b",
            "a.lock",
            "a.",
            &"a".repeat(256),
        ] {
            assert!(check_branch(bad).is_err(), "{bad:?}");
        }
        assert!(check_sha("0123abcd").is_ok());
        for bad in ["", "abc", "--x", "xyz123", "abcd\0", &"a".repeat(65)] {
            assert!(check_sha(bad).is_err(), "{bad:?}");
        }
    }
}
