//! Which configured model serves an agent's model id, and what its tokens cost.
//!
//! An agent names a model (`claude-sonnet-4-5`, `gpt-4.1`, `my-local`); the operator's
//! configuration decides what answers it: a named model table (a provider, the id sent
//! upstream, its context window and list prices) or, for any name no table configures, the
//! process's default model. Faces show the answer on agents and sessions, the native loop
//! routes its requests and prices their usage by it, and `gateway check` lists it: one
//! lookup, here, so the three cannot disagree.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::Usage;

/// List prices in US dollars per million tokens of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    /// Writing the prompt cache (the API bills it above plain input).
    #[serde(default)]
    pub cache_write: f64,
    /// Reading the prompt cache (billed well below plain input).
    #[serde(default)]
    pub cache_read: f64,
}

impl Prices {
    /// Refuses prices that cannot be a price (negative, not finite).
    pub fn check(&self) -> Result<(), String> {
        let all = [
            ("input", self.input),
            ("output", self.output),
            ("cache_write", self.cache_write),
            ("cache_read", self.cache_read),
        ];
        match all.iter().find(|(_, p)| !p.is_finite() || *p < 0.0) {
            Some((name, p)) => Err(format!("price {name} must be a non-negative number, not {p}")),
            None => Ok(()),
        }
    }

    /// What `usage` costs at these prices, in millionths of a US dollar, rounded up: a budget
    /// compares against it, and rounding up makes it stop at or before the real charge.
    pub fn cost_micros(&self, usage: &Usage) -> u64 {
        // Dollars per million tokens are exactly micro-dollars per token.
        let micros = usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_creation_input_tokens as f64 * self.cache_write
            + usage.cache_read_input_tokens as f64 * self.cache_read;
        // f64 -> u64 saturates; the products are far inside f64's exact range for real usage.
        micros.ceil() as u64
    }
}

/// The model that answers an agent's model id.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    /// The configured model's name (its table's), or [`DEFAULT_NAME`] for the default.
    pub name: String,
    /// `anthropic`, `openai` or `fake`.
    pub provider: String,
    /// The id sent to the provider.
    pub model: String,
    /// Tokens the model reads at most (prompt and answer); `None`: not configured, so the
    /// conversation is never compacted for it.
    pub context_window: Option<u64>,
    /// `None`: the model has no list price, so its cost is unknown and no budget can
    /// measure it.
    pub prices: Option<Prices>,
}

/// The name [`ServedModel::name`] has when the default model answers an id no table names.
pub const DEFAULT_NAME: &str = "default";

/// One configured model, as the catalog keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelEntry {
    pub provider: String,
    /// The id sent upstream; `None` sends the agent's own model id (the default model).
    pub model: Option<String>,
    pub context_window: Option<u64>,
    pub prices: Option<Prices>,
}

/// Every configured model by name, and the default.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCatalog {
    named: BTreeMap<String, ModelEntry>,
    /// The table the default is, if the process's `model` names one.
    default_name: Option<String>,
    default: ModelEntry,
}

impl ModelCatalog {
    /// A catalog of `named` tables whose default is `default` (the name of a table, or an
    /// entry of its own).
    pub fn new(named: BTreeMap<String, ModelEntry>, default: Result<String, ModelEntry>) -> Result<Self, String> {
        let (default_name, default) = match default {
            Ok(name) => match named.get(&name) {
                Some(entry) => (Some(name), entry.clone()),
                None => return Err(format!("the default model {name:?} is not configured")),
            },
            Err(entry) => (None, entry),
        };
        Ok(Self { named, default_name, default })
    }

    /// Only a default of `provider` that sends each agent's own model id: what a process
    /// with no model tables has.
    pub fn single(provider: &str) -> Self {
        let default = ModelEntry { provider: provider.to_owned(), model: None, context_window: None, prices: None };
        Self { named: BTreeMap::new(), default_name: None, default }
    }

    /// What serves `requested` (an agent's model id): the table of that name, else the default.
    pub fn serving(&self, requested: &str) -> ServedModel {
        let (name, entry) = match self.named.get_key_value(requested) {
            Some((name, entry)) => (name.as_str(), entry),
            None => (self.default_name.as_deref().unwrap_or(DEFAULT_NAME), &self.default),
        };
        ServedModel {
            name: name.to_owned(),
            provider: entry.provider.clone(),
            model: entry.model.clone().unwrap_or_else(|| requested.to_owned()),
            context_window: entry.context_window,
            prices: entry.prices,
        }
    }

    /// The configured tables, by name.
    pub fn named(&self) -> impl Iterator<Item = (&str, &ModelEntry)> {
        self.named.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The default: its table's name if it is one, and its entry.
    pub fn default_model(&self) -> (Option<&str>, &ModelEntry) {
        (self.default_name.as_deref(), &self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(provider: &str, model: &str, prices: Option<Prices>) -> ModelEntry {
        ModelEntry { provider: provider.into(), model: Some(model.into()), context_window: Some(1000), prices }
    }

    #[test]
    fn a_table_serves_its_name_and_the_default_serves_the_rest() {
        let named = BTreeMap::from([("local".to_owned(), entry("openai", "qwen3:8b", None))]);
        let catalog = ModelCatalog::new(
            named,
            Err(ModelEntry { provider: "fake".into(), model: None, context_window: None, prices: None }),
        )
        .unwrap();
        let local = catalog.serving("local");
        assert_eq!(
            (local.name.as_str(), local.provider.as_str(), local.model.as_str()),
            ("local", "openai", "qwen3:8b")
        );
        let other = catalog.serving("claude-sonnet-4-5");
        assert_eq!(
            (other.name.as_str(), other.provider.as_str(), other.model.as_str()),
            ("default", "fake", "claude-sonnet-4-5"),
            "an unconfigured id goes to the default, as asked"
        );
    }

    #[test]
    fn the_default_may_be_a_table() {
        let named = BTreeMap::from([("sonnet".to_owned(), entry("anthropic", "claude-sonnet-4-5", None))]);
        let catalog = ModelCatalog::new(named.clone(), Ok("sonnet".into())).unwrap();
        let s = catalog.serving("anything");
        assert_eq!((s.name.as_str(), s.model.as_str()), ("sonnet", "claude-sonnet-4-5"));
        assert!(ModelCatalog::new(named, Ok("nope".into())).is_err());
    }

    #[test]
    fn costs_round_up_to_the_micro_dollar() {
        let p = Prices { input: 3.0, output: 15.0, cache_write: 3.75, cache_read: 0.3 };
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 100,
            cache_creation_input_tokens: 10,
            cache_read_input_tokens: 1,
            ..Usage::default()
        };
        // 3000 + 1500 + 37.5 + 0.3 = 4537.8 micro-dollars.
        assert_eq!(p.cost_micros(&u), 4538);
        assert!(Prices { input: -1.0, ..p }.check().is_err());
        assert!(Prices { output: f64::NAN, ..p }.check().is_err());
        assert!(p.check().is_ok());
    }
}
