//! Built-in tool definitions of `agent_toolset_20260401`.
//!
//! The schemas describe exactly what [`Hand::run`](crate::Hand::run) accepts; the Hand still
//! validates every input, since a model does not always follow a schema.

use serde_json::json;

/// A built-in tool as the model sees it.
#[derive(Debug, Clone)]
pub struct BuiltinToolDefinition {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: serde_json::Value,
}

/// The toolset these definitions belong to.
pub const TOOLSET: &str = "agent_toolset_20260401";

/// Definitions of all eight built-in tools, in a stable order.
pub fn builtin_tool_definitions() -> Vec<BuiltinToolDefinition> {
    let path = |what: &str| json!({"type": "string", "description": what});
    vec![
        BuiltinToolDefinition {
            name: "bash",
            description: "Run a command in a persistent bash shell in the workspace (state such as the \
                          current directory and variables persists between calls). stdout and stderr are \
                          merged; stdin is empty. `restart: true` starts a fresh shell.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run."},
                    "restart": {"type": "boolean", "description": "Restart the shell first."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "Time limit in milliseconds."}
                },
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "read",
            description: "Read a text file, with line numbers. `view_range: [start, end]` selects lines \
                          (1-based, inclusive; end -1 means the last line).",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "file_path": path("Path of the file, relative to the workspace or absolute inside it."),
                    "view_range": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "minItems": 2,
                        "maxItems": 2,
                        "description": "[start, end] line numbers; end -1 reads to the end."
                    }
                },
                "required": ["file_path"],
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "write",
            description: "Create or overwrite a file with the given content, creating parent directories.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "file_path": path("Path of the file, relative to the workspace or absolute inside it."),
                    "content": {"type": "string", "description": "The whole new content of the file."}
                },
                "required": ["file_path", "content"],
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "edit",
            description: "Replace `old_string` by `new_string` in a file. `old_string` must occur exactly \
                          once unless `replace_all` is true.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "file_path": path("Path of the file, relative to the workspace or absolute inside it."),
                    "old_string": {"type": "string", "description": "The exact text to replace."},
                    "new_string": {"type": "string", "description": "The replacement text."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence."}
                },
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "glob",
            description: "List files whose path matches a glob pattern (`*` within a directory, `**` across \
                          directories), sorted.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern, e.g. `**/*.rs`."},
                    "path": path("Directory to search from (default: the workspace).")
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "grep",
            description: "Search file contents with a regular expression; answers `path:line:text` lines.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax)."},
                    "path": path("File or directory to search (default: the workspace).")
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "web_fetch",
            description: "Fetch an http(s) URL with a GET and return its content as text: HTML pages are \
                          converted to readable text (links listed at the end), text, JSON and XML are returned \
                          as they are, other content (images, binaries) is only described. Long content is cut \
                          and the result says so. Private and loopback addresses are refused unless the \
                          operator allows them.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "maxLength": 2048, "description": "The absolute http or https URL to fetch."},
                    "max_chars": {"type": "integer", "minimum": 1,
                                  "description": "The most characters of text to return (the gateway's own bound applies too)."}
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        },
        BuiltinToolDefinition {
            name: "web_search",
            description: "Search the web through the gateway's search provider. Returns numbered results, each \
                          with a title, a URL and a short description; use web_fetch to read a result.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 400,
                              "description": "The search query (at most 400 characters and 50 words)."},
                    "count": {"type": "integer", "minimum": 1, "maximum": 20,
                              "description": "How many results to return (default set by the gateway)."}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_eight_tools_in_a_stable_order() {
        let names: Vec<_> = builtin_tool_definitions().iter().map(|d| d.name).collect();
        assert_eq!(names, ["bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search"]);
    }

    #[test]
    fn schemas_are_objects_whose_required_fields_exist() {
        for def in builtin_tool_definitions() {
            let schema = &def.input_schema;
            assert_eq!(schema["type"], "object", "{}", def.name);
            let props = schema["properties"].as_object().expect("properties");
            for req in schema.get("required").and_then(|r| r.as_array()).into_iter().flatten() {
                assert!(props.contains_key(req.as_str().expect("name")), "{}: {req}", def.name);
            }
            assert!(!def.description.is_empty());
        }
    }
}
