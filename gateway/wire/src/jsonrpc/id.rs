//! Request ids as the other side wrote them. JSON-RPC lets an id be any string, number or
//! `null`, and an answer must carry the id byte for byte. A `serde_json::Value` holds integers
//! only up to 64 bits (a 40-digit id would come back as `1.2345678901234567e39`), so an id is
//! kept as its raw JSON text, as [`envelope::parse_message`](super::envelope::parse_message)
//! read it.

use serde_json::value::RawValue;

/// The id an answer carries.
#[derive(Debug, Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// For answers to messages whose id could not be read.
    pub fn null() -> Self {
        Self::of(RawValue::NULL)
    }

    /// The id as read from a message.
    pub fn of(raw: &RawValue) -> Self {
        Self(raw.to_owned())
    }

    pub fn raw(&self) -> &RawValue {
        &self.0
    }

    /// The key an answer is matched by against this side's outstanding requests: a string id's
    /// text, or a number's digits (this side's ids are integers).
    pub fn key(raw: &RawValue) -> String {
        serde_json::from_str::<String>(raw.get()).unwrap_or_else(|_| raw.get().to_owned())
    }
}
