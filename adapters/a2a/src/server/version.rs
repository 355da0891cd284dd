//! Version negotiation (protocols/a2a.md §1): `A2A-Version` header or query parameter,
//! `Major.Minor` only (patch ignored), absent or empty read as 0.3.

use axum::http::HeaderMap;

use crate::error::A2aError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V03,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "1.0",
            Version::V03 => "0.3",
        }
    }
}

/// What the client asked for: `None` when it named no version (which means 0.3).
pub fn requested(headers: &HeaderMap, query: Option<&str>) -> Result<Option<Version>, A2aError> {
    let header = headers.get("a2a-version").and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty());
    let from_query = query.and_then(|q| {
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.eq_ignore_ascii_case("a2a-version") && !v.is_empty()).then(|| v.to_owned())
        })
    });
    match header.map(str::to_owned).or(from_query) {
        None => Ok(None),
        Some(raw) => parse(&raw).map(Some),
    }
}

/// Parses `1.0`, `1.0.1`, `0.3`, `0.3.0`; anything else is unsupported.
pub fn parse(raw: &str) -> Result<Version, A2aError> {
    let mut it = raw.trim().split('.');
    let major = it.next().and_then(|m| m.parse::<u32>().ok());
    let minor = it.next().and_then(|m| m.parse::<u32>().ok());
    match (major, minor) {
        (Some(1), Some(0)) => Ok(Version::V1),
        (Some(0), Some(3)) => Ok(Version::V03),
        _ => Err(A2aError::VersionNotSupported(format!(
            "A2A-Version {:?} is not supported; this server speaks 1.0 and 0.3",
            raw.chars().take(32).collect::<String>()
        ))),
    }
}

/// The error a v1.0 operation gets when the client did not ask for 1.0.
pub fn v1_required(asked: Option<Version>) -> Result<(), A2aError> {
    match asked {
        Some(Version::V1) => Ok(()),
        None => Err(A2aError::VersionNotSupported(
            "the A2A-Version header is missing, which means 0.3; v1.0 operations require the header A2A-Version: 1.0"
                .into(),
        )),
        Some(Version::V03) => Err(A2aError::VersionNotSupported(
            "A2A-Version 0.3 was requested for a v1.0 operation; send A2A-Version: 1.0".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_negotiate_by_major_minor() {
        assert_eq!(parse("1.0").unwrap(), Version::V1);
        assert_eq!(parse("1.0.1").unwrap(), Version::V1);
        assert_eq!(parse("0.3.0").unwrap(), Version::V03);
        let e = parse("2.0").unwrap_err();
        assert_eq!(e.code(), -32009);
        let mut h = HeaderMap::new();
        assert_eq!(requested(&h, None).unwrap(), None);
        assert_eq!(requested(&h, Some("A2A-Version=1.0")).unwrap(), Some(Version::V1));
        h.insert("a2a-version", "".parse().unwrap());
        assert_eq!(requested(&h, None).unwrap(), None, "empty reads as absent");
        let e = v1_required(None).unwrap_err();
        assert!(e.to_string().contains("A2A-Version header"), "{e}");
    }
}
