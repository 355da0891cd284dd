//! Prefixed, unguessable, time-sortable identifiers.
//!
//! An id is `<prefix><22 base62 chars>` encoding 128 bits: 48 bits of Unix milliseconds followed
//! by 80 random bits from the OS CSPRNG. 80 random bits make ids unguessable (they double as
//! capability-like handles in URLs), and the time prefix makes the byte order of two ids follow
//! their creation order, which keeps B-tree inserts local and gives lists a stable tiebreak.

use std::fmt;

use serde::{Deserialize, Serialize};

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// 62^22 > 2^128, so 22 digits always suffice.
const ENCODED_LEN: usize = 22;

/// An id failed to parse: wrong prefix, wrong length or a character outside base62.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind} id {value:?}: expected {prefix} followed by {ENCODED_LEN} base62 characters")]
pub struct IdError {
    pub kind: &'static str,
    pub prefix: &'static str,
    pub value: String,
}

fn random_suffix() -> String {
    let millis =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    // The OS random source failing is not recoverable; ids must never be predictable.
    getrandom::fill(&mut bytes[6..]).expect("operating system random source unavailable");
    encode(u128::from_be_bytes(bytes))
}

fn encode(mut n: u128) -> String {
    let mut out = [b'0'; ENCODED_LEN];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(n % 62) as usize];
        n /= 62;
    }
    out.iter().map(|&b| b as char).collect()
}

/// The Unix milliseconds in the time prefix of an encoded suffix (0 if it does not decode).
fn minted_millis(suffix: &str) -> i64 {
    let n = suffix.bytes().try_fold(0u128, |n, b| {
        let digit = ALPHABET.iter().position(|&a| a == b)? as u128;
        n.checked_mul(62)?.checked_add(digit)
    });
    n.map(|n| (n >> 80) as i64).unwrap_or(0)
}

fn valid_suffix(s: &str) -> bool {
    s.len() == ENCODED_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh, unguessable id.
            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                Self(format!("{}{}", $prefix, random_suffix()))
            }

            /// Parses an id received from outside; rejects anything that is not exactly
            /// the prefix plus 22 base62 characters.
            pub fn parse(s: &str) -> Result<Self, IdError> {
                match s.strip_prefix($prefix) {
                    Some(rest) if valid_suffix(rest) => Ok(Self(s.to_owned())),
                    _ => Err(IdError { kind: $kind, prefix: $prefix, value: s.chars().take(80).collect() }),
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// When the id was minted (its time prefix, Unix milliseconds of the minting
            /// process's clock): an ordering key for ids, never a time to compare across
            /// processes or to lease by.
            pub fn minted_millis(&self) -> i64 {
                minted_millis(&self.0[$prefix.len()..])
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::parse(&s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }
    };
}

define_id!(/// An agent (all its versions share the id).
    AgentId, "agent_", "agent");
define_id!(/// An environment definition.
    EnvironmentId, "env_", "environment");
define_id!(/// A session: one conversation.
    SessionId, "sesn_", "session");
define_id!(/// A committed event.
    EventId, "sevt_", "event");
define_id!(/// One dispatched unit of work (a turn).
    RunId, "run_", "run");
define_id!(/// A session resource (mounted file or repository).
    ResourceId, "sesrsc_", "session resource");
define_id!(/// An uploaded file (its metadata and content live in the store).
    FileId, "file_", "file");
define_id!(/// A skill (all its versions share the id).
    SkillId, "skill_", "skill");
define_id!(/// One immutable version of a skill's files.
    SkillVersionId, "skillver_", "skill version");
define_id!(/// An API key (the id, never the secret).
    ApiKeyId, "key_", "api key");
define_id!(/// An outbound HTTP delivery (webhook, push notification).
    DeliveryId, "dlv_", "delivery");
define_id!(/// A webhook endpoint.
    WebhookId, "whk_", "webhook endpoint");
define_id!(/// A self-hosted environment's work item: one executor's hold on one session.
    WorkId, "work_", "work item");
define_id!(/// A vault: write-only credentials a session names.
    VaultId, "vlt_", "vault");
define_id!(/// One credential of a vault (for one MCP server).
    CredentialId, "vcrd_", "vault credential");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_garbage() {
        let id = SessionId::new();
        assert!(id.as_str().starts_with("sesn_"));
        assert_eq!(id.as_str().len(), 5 + ENCODED_LEN);
        assert_eq!(SessionId::parse(id.as_str()).unwrap(), id);
        assert!(SessionId::parse("sesn_short").is_err());
        assert!(SessionId::parse(&id.as_str().replace("sesn_", "agent_")).is_err());
        assert!(SessionId::parse(&format!("{}!", &id.as_str()[..id.as_str().len() - 1])).is_err());
        assert!(AgentId::parse(id.as_str()).is_err());
    }

    #[test]
    fn ids_sort_by_creation_time() {
        let a = EventId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = EventId::new();
        assert!(a < b, "{a} should sort before {b}");
    }

    #[test]
    fn ids_carry_the_millisecond_they_were_minted() {
        let before =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap();
        let id = EventId::new();
        let after =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap();
        assert!((before..=after).contains(&id.minted_millis()), "{} not in {before}..={after}", id.minted_millis());
        assert_eq!(minted_millis(&encode(42u128 << 80)), 42);
    }

    #[test]
    fn ids_are_distinct() {
        let set: std::collections::HashSet<_> = (0..10_000).map(|_| RunId::new()).collect();
        assert_eq!(set.len(), 10_000);
    }

    #[test]
    fn encoding_is_fixed_width() {
        assert_eq!(encode(0).len(), ENCODED_LEN);
        assert_eq!(encode(u128::MAX).len(), ENCODED_LEN);
    }
}
