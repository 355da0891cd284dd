//! The neutral shape of a tool a server offers, and the bounds a listing must keep.

use std::io;

use rmcp::model::Tool;
use serde_json::{Map, Value};

use crate::error::McpError;
use crate::limits::Limits;

/// One tool of one server, as the model loop offers it: no MCP types.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema whose `type` is `object` (model APIs accept nothing else).
    pub input_schema: Value,
}

/// Accumulates the pages of one listing and refuses it once a bound is passed, before the
/// next page is requested.
#[derive(Debug)]
pub(crate) struct Listing<'a> {
    limits: &'a Limits,
    tools: Vec<ToolSpec>,
    schema_bytes: usize,
}

impl<'a> Listing<'a> {
    pub(crate) fn new(limits: &'a Limits) -> Self {
        Self { limits, tools: Vec::new(), schema_bytes: 0 }
    }

    /// Adds one page. A name already listed keeps its first definition (a server must not list a
    /// name twice; the model must not see two definitions). A schema whose `type` is not `object`
    /// is skipped with a warning: a model API would refuse the whole request for it.
    pub(crate) fn add_page(&mut self, page: Vec<Tool>) -> Result<(), McpError> {
        for tool in page {
            if self.tools.iter().any(|t| t.name == tool.name) {
                tracing::warn!(tool = %tool.name, "MCP server listed a tool name twice; keeping the first");
                continue;
            }
            let Some(input_schema) = object_schema(&tool.input_schema) else {
                tracing::warn!(tool = %tool.name, "MCP tool's input schema is not an object schema; skipped");
                continue;
            };
            if self.tools.len() >= self.limits.max_tools {
                return Err(McpError::TooLarge(format!("the server offers more than {} tools", self.limits.max_tools)));
            }
            let description = tool.description.map(|d| d.into_owned());
            self.schema_bytes = self
                .schema_bytes
                .saturating_add(json_len(&input_schema))
                .saturating_add(description.as_ref().map_or(0, String::len))
                .saturating_add(tool.name.len());
            if self.schema_bytes > self.limits.max_schema_bytes {
                return Err(McpError::TooLarge(format!(
                    "the server's tool names, descriptions and schemas exceed {} bytes",
                    self.limits.max_schema_bytes
                )));
            }
            self.tools.push(ToolSpec { name: tool.name.into_owned(), description, input_schema });
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Vec<ToolSpec> {
        self.tools
    }
}

/// The schema as an object schema: `type` defaults to `object` when absent (older servers omit
/// it); any other `type` is refused.
fn object_schema(schema: &Map<String, Value>) -> Option<Value> {
    match schema.get("type") {
        None => {
            let mut schema = schema.clone();
            schema.insert("type".into(), Value::String("object".into()));
            Some(Value::Object(schema))
        }
        Some(Value::String(t)) if t == "object" => Some(Value::Object(schema.clone())),
        Some(_) => None,
    }
}

/// The length of a value's JSON text, counted without building the text.
pub(crate) fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn tool(name: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else { panic!("object") };
        Tool::new(name.to_owned(), format!("{name} tool"), Arc::new(schema))
    }

    #[test]
    fn count_bound_refuses_the_listing() {
        let limits = Limits { max_tools: 2, ..Limits::default() };
        let mut listing = Listing::new(&limits);
        listing.add_page(vec![tool("a", json!({"type": "object"})), tool("b", json!({}))]).expect("two fit");
        let err = listing.add_page(vec![tool("c", json!({"type": "object"}))]).expect_err("third refused");
        assert!(matches!(err, McpError::TooLarge(m) if m.contains("more than 2 tools")));
    }

    #[test]
    fn schema_bytes_bound_refuses_the_listing() {
        let limits = Limits { max_schema_bytes: 200, ..Limits::default() };
        let mut listing = Listing::new(&limits);
        let big = json!({"type": "object", "description": "x".repeat(300)});
        assert!(matches!(listing.add_page(vec![tool("a", big)]), Err(McpError::TooLarge(_))));
    }

    #[test]
    fn schemas_are_object_schemas_and_names_unique() {
        let limits = Limits::default();
        let mut listing = Listing::new(&limits);
        listing
            .add_page(vec![
                tool("a", json!({"properties": {}})),
                tool("a", json!({"type": "object"})),
                tool("s", json!({"type": "string"})),
            ])
            .expect("fits");
        let tools = listing.finish();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].input_schema, json!({"type": "object", "properties": {}}));
        assert_eq!(tools[0].description.as_deref(), Some("a tool"));
    }

    #[test]
    fn json_len_matches_serialization() {
        let v = json!({"a": [1, "two", null], "b": {"c": "é"}});
        assert_eq!(json_len(&v), serde_json::to_vec(&v).expect("serializes").len());
    }
}
