//! Reading tool inputs: typed fields with size bounds and messages the model can act on.
//!
//! Every failure is a [`BadInput`] whose text names the field and what was expected; the Hand
//! turns it into an `is_error` output.

use crate::hand::JsonObject;

/// A tool input that cannot be used, with the reason as the model will read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type InputResult<T> = Result<T, BadInput>;

/// Longest path accepted (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest `content` / `old_string` / `new_string`, and largest file `edit` rewrites.
pub const MAX_TEXT_BYTES: usize = 16 << 20;
/// Largest bash command.
pub const MAX_COMMAND_BYTES: usize = 1 << 20;
/// Longest glob or regex pattern.
pub const MAX_PATTERN_BYTES: usize = 4096;

/// A string field; `None` when absent or null.
pub fn opt_str<'a>(input: &'a JsonObject, field: &str, max: usize) -> InputResult<Option<&'a str>> {
    match input.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if s.len() > max => {
            Err(BadInput(format!("`{field}` is too long ({} bytes; at most {max})", s.len())))
        }
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(BadInput(format!("`{field}` must be a string, not {}", kind(other)))),
    }
}

/// A required string field.
pub fn req_str<'a>(input: &'a JsonObject, field: &str, max: usize) -> InputResult<&'a str> {
    opt_str(input, field, max)?.ok_or_else(|| BadInput(format!("`{field}` is required")))
}

/// An optional boolean field, `false` when absent.
pub fn flag(input: &JsonObject, field: &str) -> InputResult<bool> {
    match input.get(field) {
        None | Some(serde_json::Value::Null) => Ok(false),
        Some(serde_json::Value::Bool(b)) => Ok(*b),
        Some(other) => Err(BadInput(format!("`{field}` must be a boolean, not {}", kind(other)))),
    }
}

/// An optional positive integer field.
pub fn opt_positive(input: &JsonObject, field: &str) -> InputResult<Option<u64>> {
    match input.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(BadInput(format!("`{field}` must be a positive integer"))),
        },
    }
}

/// `view_range`: `[start, end]`, 1-based inclusive, `end == -1` meaning the last line.
pub fn view_range(input: &JsonObject) -> InputResult<Option<(u64, Option<u64>)>> {
    let bad = || BadInput("`view_range` must be [start, end]: 1-based line numbers, end >= start or -1".into());
    let Some(v) = input.get("view_range").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let items = v.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
    let start = items[0].as_u64().filter(|s| *s >= 1).ok_or_else(bad)?;
    let end = match items[1].as_i64() {
        Some(-1) => None,
        Some(e) if e >= 1 && e as u64 >= start => Some(e as u64),
        _ => return Err(bad()),
    };
    Ok(Some((start, end)))
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> JsonObject {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn strings_are_typed_and_bounded() {
        let i = obj(json!({"a": "x", "b": 3, "c": "long"}));
        assert_eq!(req_str(&i, "a", 10), Ok("x"));
        assert!(req_str(&i, "b", 10).is_err_and(|e| e.0.contains("must be a string")));
        assert!(req_str(&i, "c", 2).is_err_and(|e| e.0.contains("too long")));
        assert!(req_str(&i, "z", 2).is_err_and(|e| e.0.contains("required")));
        assert_eq!(opt_str(&i, "z", 2), Ok(None));
    }

    #[test]
    fn flags_and_integers() {
        let i = obj(json!({"t": true, "n": 5, "z": 0, "s": "1"}));
        assert_eq!(flag(&i, "t"), Ok(true));
        assert_eq!(flag(&i, "missing"), Ok(false));
        assert!(flag(&i, "n").is_err());
        assert_eq!(opt_positive(&i, "n"), Ok(Some(5)));
        assert!(opt_positive(&i, "z").is_err());
        assert!(opt_positive(&i, "s").is_err());
    }

    #[test]
    fn view_ranges() {
        assert_eq!(view_range(&obj(json!({}))), Ok(None));
        assert_eq!(view_range(&obj(json!({"view_range": [2, 4]}))), Ok(Some((2, Some(4)))));
        assert_eq!(view_range(&obj(json!({"view_range": [3, -1]}))), Ok(Some((3, None))));
        for bad in [json!([0, 2]), json!([3, 2]), json!([1]), json!("1-2"), json!([1, -2])] {
            assert!(view_range(&obj(json!({ "view_range": bad }))).is_err());
        }
    }
}
