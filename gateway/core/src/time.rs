//! Timestamps: milliseconds since the Unix epoch, as stored in both databases.
//!
//! Stored times come from the database clock (see gateway-store), so that leases and event
//! times agree across gateway processes whose clocks may drift.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    /// The local clock; only for values that are not compared across processes. Leases and
    /// stored times use the database clock instead, so clippy refuses calls to this
    /// (`clippy.toml`, `disallowed-methods`) unless gateway-core or gateway-store allows one
    /// where it is made, with a comment saying why.
    pub fn now_local() -> Self {
        Self((OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64)
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-29T12:00:00.123Z`.
    pub fn to_rfc3339(self) -> String {
        let dt =
            OffsetDateTime::from_unix_timestamp_nanos(self.0 as i128 * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let fmt =
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
        dt.format(&fmt).unwrap_or_default()
    }

    /// Parses any RFC 3339 timestamp (any offset, 0-9 fraction digits), truncating to ms.
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let dt = OffsetDateTime::parse(s, &Rfc3339).ok()?;
        Some(Self((dt.unix_timestamp_nanos() / 1_000_000) as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp(1_764_417_600_123);
        let s = t.to_rfc3339();
        assert_eq!(s, "2025-11-29T12:00:00.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&s), Some(t));
        assert_eq!(Timestamp::parse_rfc3339("2025-11-29T13:00:00.123456789+01:00"), Some(t));
        assert_eq!(Timestamp::parse_rfc3339("yesterday"), None);
    }
}
