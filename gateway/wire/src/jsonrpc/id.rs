//! Request ids as the other side wrote them. JSON-RPC lets an id be any string or number; ours
//! are integers or strings of any length, and an answer must carry the id byte for byte. A
//! `serde_json::Value` holds integers only up to 64 bits (a 40-digit id would come back as
//! `1.2345678901234567e39`), so an id is kept as its raw JSON text.

use serde_json::Value;
use serde_json::value::RawValue;

/// The id an answer carries.
#[derive(Debug, Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// For answers to messages whose id could not be read.
    pub fn null() -> Self {
        Self(RawValue::from_string("null".to_owned()).expect("null is JSON"))
    }

    /// The id of a request, if valid: a string, or an integer of any size. `line` is the
    /// message it came in, read again only for a number too large for a `Value` (rare), to
    /// recover the digits the parse rounded.
    pub fn of_request(id: &Value, line: &str) -> Option<Self> {
        match id {
            Value::String(_) => serde_json::value::to_raw_value(id).ok().map(Self),
            Value::Number(n) if n.is_i64() || n.is_u64() => serde_json::value::to_raw_value(id).ok().map(Self),
            Value::Number(_) => {
                #[derive(serde::Deserialize)]
                struct Raw {
                    id: Box<RawValue>,
                }
                let raw = serde_json::from_str::<Raw>(line).ok()?.id;
                let digits = raw.get().strip_prefix('-').unwrap_or(raw.get());
                (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(Self(raw))
            }
            _ => None,
        }
    }

    pub fn raw(&self) -> &RawValue {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_text() {
        let cases = [
            (r#"{"id":7}"#, Some("7")),
            (r#"{"id":"a\nb"}"#, Some(r#""a\nb""#)),
            (r#"{"id":-123456789012345678901234567890}"#, Some("-123456789012345678901234567890")),
            (r#"{"id":18446744073709551616}"#, Some("18446744073709551616")),
            (r#"{"id":1.5}"#, None),
            (r#"{"id":1e3}"#, None),
            (r#"{"id":null}"#, None),
            (r#"{"id":{}}"#, None),
        ];
        for (line, want) in cases {
            let v: Value = serde_json::from_str(line).unwrap_or_default();
            let got = Id::of_request(&v["id"], line);
            assert_eq!(got.as_ref().map(|i| i.raw().get()), want, "{line}");
        }
    }
}
