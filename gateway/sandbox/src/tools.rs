//! Built-in tool definitions of `agent_toolset_20260401`.

/// A built-in tool as the model sees it.
#[derive(Debug, Clone)]
pub struct BuiltinToolDefinition {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: serde_json::Value,
}

/// Definitions of all eight built-in tools, in a stable order.
pub fn builtin_tool_definitions() -> Vec<BuiltinToolDefinition> {
    Vec::new()
}
