//! What request bodies the A2A routes take: at most [`BODY_LIMIT`] bytes and at most
//! [`MAX_VALUES`] JSON values, refused in the binding's error shape (not axum's
//! `413 text/plain`).
//!
//! Why a value bound as well as a byte bound: the bindings parse params into
//! `serde_json::Value` (the v0.3 rewrites and the snake_case normalisation are tree rewrites),
//! and a `Value` costs tens of bytes per node whatever its text costs, so 8 MiB of `[0,0,…]`
//! became ~135 MB. Counting the values first (one pass over the bytes, nothing allocated)
//! keeps a parsed body within a small multiple of its size: strings cost their length, and
//! at most `MAX_VALUES` nodes cost the rest.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;

use crate::error::A2aError;

/// Largest request body the A2A routes accept.
pub const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Most JSON values a request body may hold, counted as the `{`, `[` and `,` outside strings
/// (an upper bound of the nodes a parse allocates beyond the first). Far above any A2A
/// request (64 parts of a few fields each); a data part with a larger array is refused.
pub const MAX_VALUES: usize = 1 << 16;

/// The body, or the error that refuses it: too many bytes (axum stopped reading at the
/// limit) or too many values.
pub fn accept(body: Result<Bytes, BytesRejection>) -> Result<Bytes, A2aError> {
    let body = body.map_err(|r| match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            A2aError::TooLarge(format!("the body is larger than {} MiB", BODY_LIMIT >> 20))
        }
        _ => A2aError::InvalidRequest(format!("the body could not be read: {r}")),
    })?;
    if values(&body) > MAX_VALUES {
        return Err(A2aError::TooLarge(format!("the body holds more than {MAX_VALUES} JSON values")));
    }
    Ok(body)
}

/// The `{`, `[` and `,` outside JSON strings (the text need not be valid JSON).
fn values(bytes: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (0, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' => n += 1,
                _ => {}
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_outside_strings_only() {
        let cases: [(&str, usize); 6] = [
            (r#"{"a":1}"#, 1),
            (r#"[1,2,3]"#, 3),
            (r#"{"a":"x,[{"}"#, 1),
            (r#"{"a":"q\",[","b":[]}"#, 3),
            (r#""\\",,"#, 2),
            ("", 0),
        ];
        for (text, want) in cases {
            assert_eq!(values(text.as_bytes()), want, "{text}");
        }
    }

    #[test]
    fn a_body_of_many_small_values_is_refused_before_it_is_parsed() {
        let mut many = b"[0".to_vec();
        many.extend(b",0".repeat(MAX_VALUES));
        many.push(b']');
        assert!(matches!(accept(Ok(Bytes::from(many))), Err(A2aError::TooLarge(_))));
        let text = format!(r#"{{"text":"{}"}}"#, ",".repeat(BODY_LIMIT / 2));
        assert!(accept(Ok(Bytes::from(text))).is_ok(), "commas inside a string are text");
    }
}
