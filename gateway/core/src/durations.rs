//! Durations as configuration files write them: whole seconds (`lease_secs = 30`) or whole
//! milliseconds (`poll_ms = 1000`). Components keep a [`Duration`] in their config types and
//! name the unit in the key (`#[serde(rename = "lease_secs", with = "gateway_core::durations::secs")]`),
//! so code never converts units and tests can still set sub-second values directly.
//!
//! Serializing truncates to the unit; only defaults are serialized (the binary layers a file
//! and the environment over them), and defaults are whole units.

use std::time::Duration;

/// A [`Duration`] written as whole seconds.
pub mod secs {
    use super::Duration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// A [`Duration`] written as whole milliseconds.
pub mod millis {
    use super::Duration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Timing {
        #[serde(rename = "lease_secs", with = "secs")]
        lease: Duration,
        #[serde(rename = "poll_ms", with = "millis")]
        poll: Duration,
    }

    #[test]
    fn the_key_names_the_unit_and_the_field_is_a_duration() {
        let t: Timing = serde_json::from_str(r#"{"lease_secs": 30, "poll_ms": 250}"#).expect("parses");
        assert_eq!(t, Timing { lease: Duration::from_secs(30), poll: Duration::from_millis(250) });
        assert_eq!(serde_json::to_string(&t).expect("serializes"), r#"{"lease_secs":30,"poll_ms":250}"#);
        assert!(serde_json::from_str::<Timing>(r#"{"lease_secs": -1, "poll_ms": 1}"#).is_err(), "no negative time");
    }
}
