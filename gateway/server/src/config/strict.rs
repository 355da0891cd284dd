//! Strict keys: a key the gateway does not know refuses the start, naming the key and the
//! nearest known one. A misspelt `[workres]` or `max_turn` would otherwise start a gateway
//! that does something other than what its operator wrote, with nothing in the logs.
//!
//! The known keys are not a list kept beside the types: they are read from the types' own
//! serialisation of their defaults (which writes every key, renamed and flattened as the
//! deserialiser reads them), so a key added to a component is known here at once. Tables
//! keyed by the operator's own names (`[agents.NAME]`, `[executors.acp.NAME]`,
//! `[remotes.a2a.NAME]`, `[[webhooks]]`) are given the shape of one entry. A table that
//! serialises empty (an agent process's `env`) takes any key, and so does an optional value
//! that is unset by default.
//!
//! Environment variables are checked when they are nested (`GATEWAY_SECTION__KEY`): those
//! can only mean configuration. A single-level `GATEWAY_NAME` that is not a key is left
//! alone, because clients of the gateway read variables of that shape (`GATEWAY_URL`,
//! `GATEWAY_API_KEY`) from the same environment.

use std::path::Path;

use figment::Provider;
use figment::providers::{Env, Format, Toml};
use figment::value::Value;
use serde_json::{Map, Value as Json};

use super::{AgentConfig, Config, ModelTable};
use gateway_managed_agents::webhooks::WebhookConfig;

/// Which entry of a table keyed by the operator's names stands for all of them.
const ANY: &str = "*";

/// A key in the file or the environment that names nothing.
#[derive(Debug, PartialEq, Eq)]
pub struct UnknownKey {
    /// As the operator wrote it: `workers.max_turn` or `GATEWAY_WORKERS__MAX_TURN`.
    pub key: String,
    /// The known key nearest to it, spelt the same way.
    pub nearest: Option<String>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown configuration key `{}`", self.key)?;
        match &self.nearest {
            Some(n) => write!(f, " (the nearest known key is `{n}`)"),
            None => Ok(()),
        }
    }
}

/// Every unknown key of the file (if any) and of the nested `GATEWAY_*` variables, in the
/// order they appear. Syntax errors are not reported here: loading reports them.
pub fn unknown_keys(file: Option<&Path>, env: &Env) -> Vec<UnknownKey> {
    let schema = schema();
    let mut out = Vec::new();
    if let Some(path) = file
        && let Ok(data) = Toml::file(path).data()
    {
        for dict in data.into_values() {
            for (key, value) in dict {
                check(&schema, &key, &value, &mut vec![], &mut out);
            }
        }
    }
    let mut from_env = Vec::new();
    if let Ok(data) = env.data() {
        for dict in data.into_values() {
            for (key, value) in dict {
                // Single-level names are left to whoever else reads them (see the module doc).
                if matches!(value, Value::Dict(..)) {
                    check(&schema, &key, &value, &mut vec![], &mut from_env);
                }
            }
        }
    }
    out.extend(
        from_env.into_iter().map(|u| UnknownKey { key: env_name(&u.key), nearest: u.nearest.as_deref().map(env_name) }),
    );
    out
}

fn env_name(dotted: &str) -> String {
    format!("GATEWAY_{}", dotted.replace('.', "__").to_ascii_uppercase())
}

/// The shape of the configuration (see the module doc).
fn schema() -> Json {
    fn json<T: serde::Serialize>(v: T) -> Json {
        serde_json::to_value(v).unwrap_or(Json::Null)
    }
    fn any_name(entry: Json) -> Json {
        Json::Object(Map::from_iter([(ANY.to_owned(), entry)]))
    }
    let mut root = json(Config::default());
    if let Json::Object(top) = &mut root {
        top.insert("agents".into(), any_name(json(AgentConfig::default())));
        // Its prices are a table of known keys, though unset by default.
        let model = ModelTable { prices: Some(Default::default()), ..ModelTable::default() };
        top.insert("models".into(), any_name(json(model)));
        let webhook = WebhookConfig { url: String::new(), secret: String::new(), event_types: Vec::new() };
        top.insert("webhooks".into(), Json::Array(vec![json(webhook)]));
        if let Some(Json::Object(executors)) = top.get_mut("executors") {
            executors.insert("acp".into(), any_name(json(gateway_acp::ExecutorConfig::default())));
        }
        if let Some(Json::Object(remotes)) = top.get_mut("remotes") {
            remotes.insert("a2a".into(), any_name(json(gateway_a2a::RemoteConfig::default())));
        }
    }
    root
}

/// Checks `value`, found at `key` under the table `schema` describes.
fn check(schema: &Json, key: &str, value: &Value, path: &mut Vec<String>, out: &mut Vec<UnknownKey>) {
    let Json::Object(known) = schema else { return };
    if known.is_empty() {
        return; // a free-form table
    }
    path.push(key.to_owned());
    match known.get(key).or_else(|| known.get(ANY)) {
        None => out.push(UnknownKey {
            key: path.join("."),
            nearest: nearest(key, known.keys().filter(|k| *k != ANY)).map(|n| {
                let mut p = path[..path.len() - 1].to_vec();
                p.push(n.to_owned());
                p.join(".")
            }),
        }),
        Some(sub) => check_value(sub, value, path, out),
    }
    path.pop();
}

fn check_value(schema: &Json, value: &Value, path: &mut Vec<String>, out: &mut Vec<UnknownKey>) {
    match (schema, value) {
        (Json::Object(_), Value::Dict(_, dict)) => {
            for (k, v) in dict {
                check(schema, k, v, path, out);
            }
        }
        (Json::Array(items), Value::Array(_, values)) => {
            if let Some(item) = items.first() {
                for (i, v) in values.iter().enumerate() {
                    let last = path.pop().unwrap_or_default();
                    path.push(format!("{last}[{i}]"));
                    check_value(item, v, path, out);
                    path.pop();
                    path.push(last);
                }
            }
        }
        // A type mismatch is the deserialiser's to report.
        _ => {}
    }
}

/// The candidate with the fewest single-character edits from `key`.
fn nearest<'a>(key: &str, candidates: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    candidates.min_by_key(|c| (edits(key, c), c.as_str())).map(String::as_str)
}

/// Levenshtein distance: insertions, deletions and substitutions, one each.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_count_single_character_changes() {
        assert_eq!(edits("max_turn", "max_turns"), 1);
        assert_eq!(edits("workres", "workers"), 2);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("same", "same"), 0);
    }
}
