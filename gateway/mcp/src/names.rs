//! The names tools are offered to a model under, when several MCP servers and the built-in toolset
//! are offered at once, and the way back from an offered name to (server, tool).
//!
//! The rule, in one place:
//! 1. A tool keeps its own name when no other source (another server, or a reserved built-in
//!    name) offers the same name.
//! 2. When two or more sources offer a name, every MCP server's copy is offered as
//!    `<server>__<name>`; a reserved built-in keeps its plain name.
//! 3. Model APIs accept tool names matching `^[a-zA-Z0-9_-]{1,64}$`: other characters become `_`;
//!    a name that is still too long, or that now equals a name already taken, is cut and suffixed
//!    with `_` and 8 hex digits of a SHA-256 of `server`, NUL, `tool`, so it is stable across runs.
//!    Names that needed no change are placed first, so they never lose their name to a changed one.
//!
//! [`OfferedNames::resolve`] also accepts `<server>/<name>`, the fake model's spelling.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sha2::{Digest, Sha256};

/// The longest tool name model APIs accept.
pub const MAX_NAME_LEN: usize = 64;
const HASH_HEX: usize = 8;

/// The tools of several servers, named for a model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OfferedNames {
    /// offered name -> (server, tool)
    by_offered: BTreeMap<String, (String, String)>,
    /// (server, tool) -> offered name
    by_source: HashMap<(String, String), String>,
}

impl OfferedNames {
    /// Names every `(server, tool)` of `servers` (server name -> its tool names), avoiding
    /// `reserved` (the built-in tools' names, offered as they are).
    pub fn new<'a, S, T>(servers: S, reserved: &BTreeSet<String>) -> Self
    where
        S: IntoIterator<Item = (&'a str, T)>,
        T: IntoIterator<Item = &'a str>,
    {
        let mut sources: BTreeSet<(String, String)> = BTreeSet::new();
        for (server, tools) in servers {
            for tool in tools {
                sources.insert((server.to_owned(), tool.to_owned()));
            }
        }
        let mut offered_by: HashMap<&str, usize> = HashMap::new();
        for (_, tool) in &sources {
            *offered_by.entry(tool.as_str()).or_default() += 1;
        }
        let base = |server: &str, tool: &str| {
            if offered_by.get(tool) == Some(&1) && !reserved.contains(tool) {
                tool.to_owned()
            } else {
                format!("{server}__{tool}")
            }
        };

        let mut names = OfferedNames::default();
        let mut taken: BTreeSet<String> = reserved.clone();
        let (exact, changed): (Vec<_>, Vec<_>) = sources.iter().partition(|(server, tool)| {
            let b = base(server, tool);
            sanitize(&b) == b
        });
        for (server, tool) in exact.into_iter().chain(changed) {
            let wanted = sanitize(&base(server, tool));
            let name = if taken.contains(&wanted) || wanted.len() > MAX_NAME_LEN {
                hashed(&wanted, server, tool, &taken)
            } else {
                wanted
            };
            taken.insert(name.clone());
            names.by_offered.insert(name.clone(), (server.clone(), tool.clone()));
            names.by_source.insert((server.clone(), tool.clone()), name);
        }
        names
    }

    /// The (server, tool) an offered name stands for. Also accepts `<server>/<tool>`.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        if let Some((server, tool)) = self.by_offered.get(name) {
            return Some((server, tool));
        }
        let (server, tool) = name.split_once('/')?;
        let key = (server.to_owned(), tool.to_owned());
        self.by_source.get_key_value(&key).map(|((s, t), _)| (s.as_str(), t.as_str()))
    }

    /// The name a server's tool is offered under.
    pub fn offered(&self, server: &str, tool: &str) -> Option<&str> {
        self.by_source.get(&(server.to_owned(), tool.to_owned())).map(String::as_str)
    }

    /// Every offered name with its (server, tool), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.by_offered.iter().map(|(n, (s, t))| (n.as_str(), s.as_str(), t.as_str()))
    }

    pub fn len(&self) -> usize {
        self.by_offered.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_offered.is_empty()
    }
}

/// `name` with every character outside `[a-zA-Z0-9_-]` replaced by `_` (an empty name is `_`).
fn sanitize(name: &str) -> String {
    let s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if s.is_empty() { "_".into() } else { s }
}

/// `wanted` cut to fit a hash suffix, suffixed with a hash of the source; if even that is taken
/// (two sources whose hashes agree in 32 bits), a counter goes into the hash until it is free.
fn hashed(wanted: &str, server: &str, tool: &str, taken: &BTreeSet<String>) -> String {
    let keep = MAX_NAME_LEN - HASH_HEX - 1;
    // `wanted` is ASCII after `sanitize`, so any byte index is a char boundary.
    let stem = &wanted[..wanted.len().min(keep)];
    for attempt in 0u32.. {
        let mut hasher = Sha256::new();
        hasher.update(server.as_bytes());
        hasher.update([0]);
        hasher.update(tool.as_bytes());
        if attempt > 0 {
            hasher.update(attempt.to_be_bytes());
        }
        let digest = hex::encode(hasher.finalize());
        let name = format!("{stem}_{}", &digest[..HASH_HEX]);
        if !taken.contains(&name) {
            return name;
        }
    }
    unreachable!("u32 attempts exhausted")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_NAME_LEN).contains(&name.len())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    fn offer(servers: &[(&str, &[&str])], reserved: &[&str]) -> OfferedNames {
        let reserved = reserved.iter().map(|s| s.to_string()).collect();
        OfferedNames::new(servers.iter().map(|(s, t)| (*s, t.iter().copied())), &reserved)
    }

    #[test]
    fn the_naming_rule_row_by_row() {
        const LONG: &str = "tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt";
        // (servers, reserved, (server, tool), expected offered name or None for "hashed")
        type Row<'a> = (&'a [(&'a str, &'a [&'a str])], &'a [&'a str], (&'a str, &'a str), Option<&'a str>);
        let rows: Vec<Row> = vec![
            (&[("git", &["status"])], &[], ("git", "status"), Some("status")),
            (&[("a", &["search"]), ("b", &["search"])], &[], ("a", "search"), Some("a__search")),
            (&[("a", &["search"]), ("b", &["search"])], &[], ("b", "search"), Some("b__search")),
            (&[("fs", &["bash"])], &["bash"], ("fs", "bash"), Some("fs__bash")),
            (&[("web", &["fetch.url"])], &[], ("web", "fetch.url"), Some("fetch_url")),
            (&[("my srv", &["x"]), ("b", &["x"])], &[], ("my srv", "x"), Some("my_srv__x")),
            (&[("s", &[LONG])], &[], ("s", LONG), None),
            // a changed name that would equal an exact one is hashed; the exact one keeps its name
            (&[("a", &["a_b"]), ("b", &["a.b"])], &[], ("a", "a_b"), Some("a_b")),
            (&[("a", &["a_b"]), ("b", &["a.b"])], &[], ("b", "a.b"), None),
            // a prefixed name equal to another server's plain name
            (&[("x", &["y__z"]), ("y", &["z"]), ("w", &["z"])], &[], ("x", "y__z"), Some("y__z")),
        ];
        for (servers, reserved, (server, tool), expected) in rows {
            let names = offer(servers, reserved);
            let offered = names.offered(server, tool).expect("named");
            assert!(valid(offered), "{offered} is not a valid tool name");
            match expected {
                Some(expected) => assert_eq!(offered, expected, "{server}/{tool}"),
                None => assert!(
                    offered.len() <= MAX_NAME_LEN && offered.rsplit_once('_').is_some_and(|(_, h)| h.len() == 8)
                ),
            }
            assert_eq!(names.resolve(offered), Some((server, tool)));
            for r in reserved {
                assert!(names.resolve(r).is_none(), "a reserved name never resolves to a server");
            }
        }
    }

    #[test]
    fn every_offered_name_is_unique_valid_and_stable() {
        const LONG: &str = "long-name-long-name-long-name-long-name-long-name-long-name-long-name-";
        let servers: &[(&str, &[&str])] =
            &[("a", &["x", "x.y", "x_y", "bash", LONG]), ("b", &["x", "x_y", "ok"]), ("c/d", &["x"])];
        let first = offer(servers, &["bash", "ok"]);
        let second = offer(servers, &["bash", "ok"]);
        assert_eq!(first, second);
        assert_eq!(first.len(), 9);
        let mut seen = BTreeSet::new();
        for (name, server, tool) in first.iter() {
            assert!(valid(name), "{name}");
            assert!(seen.insert(name.to_owned()));
            assert!(name != "bash" && name != "ok");
            assert_eq!(first.resolve(name), Some((server, tool)));
        }
    }

    #[test]
    fn resolve_accepts_the_slash_spelling() {
        let names = offer(&[("git", &["status", "fs/read"])], &[]);
        assert_eq!(names.resolve("git/status"), Some(("git", "status")));
        assert_eq!(names.resolve("git/fs/read"), Some(("git", "fs/read")));
        assert_eq!(names.resolve("nope/status"), None);
        assert_eq!(names.resolve("missing"), None);
    }
}
