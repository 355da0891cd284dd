//! `gateway check`: is this host and configuration ready to serve? One line per item (`ok`,
//! `warn`, `FAIL`), a reason, and a hint where there is something to do; the exit status is
//! non-zero when any item fails.
//!
//! A failure is something `gateway serve` would refuse, or a setup that cannot work as
//! configured: a configuration that does not load, a database that does not answer or was
//! migrated by a newer gateway, the configured sandbox provider unusable, a real model
//! without credentials or without a sandbox boundary, a public listener whose links would
//! point nowhere. A warning is something that works but that an operator should decide on
//! knowingly: pending migrations (`serve` applies them at start), a missing optional tool
//! (slirp4netns), no API keys on a non-loopback listener, plain HTTP to the outside.
//!
//! The checks only read: the database is opened without migrating or creating it, nothing
//! is written, and no credential is printed (only the name of the variable it came from).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use gateway_sandbox::SandboxProvider;

use crate::compose;
use crate::config::{Config, redact_url};
use crate::term::Paint;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One checked item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub level: Level,
    pub name: &'static str,
    pub text: String,
    pub hint: Option<String>,
}

impl Item {
    fn ok(name: &'static str, text: impl Into<String>) -> Self {
        Self { level: Level::Ok, name, text: text.into(), hint: None }
    }
    fn warn(name: &'static str, text: impl Into<String>, hint: impl Into<String>) -> Self {
        Self { level: Level::Warn, name, text: text.into(), hint: Some(hint.into()) }
    }
    fn fail(name: &'static str, text: impl Into<String>, hint: impl Into<String>) -> Self {
        Self { level: Level::Fail, name, text: text.into(), hint: Some(hint.into()) }
    }

    fn line(&self, paint: Paint) -> String {
        let (word, code) = match self.level {
            Level::Ok => ("ok", "32"),
            Level::Warn => ("warn", "33"),
            Level::Fail => ("FAIL", "1;31"),
        };
        let mut line = format!("{} {:<11} {}", paint.paint(code, &format!("{word:<4}")), self.name, self.text);
        if let Some(h) = &self.hint {
            line.push_str(" (hint: ");
            line.push_str(h);
            line.push(')');
        }
        line
    }
}

/// Runs every check, prints one line each, and says how the command exits.
pub fn main(file: Option<&Path>) -> ExitCode {
    let items = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(check(file)),
        Err(e) => vec![Item::fail("runtime", format!("cannot start the async runtime: {e}"), "see the error")],
    };
    let paint = Paint::for_stdout();
    for item in &items {
        println!("{}", item.line(paint));
    }
    let count = |l: Level| items.iter().filter(|i| i.level == l).count();
    let (warn, fail) = (count(Level::Warn), count(Level::Fail));
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    println!("{} ok, {warn} warning{}, {fail} failure{}", count(Level::Ok), plural(warn), plural(fail));
    if count(Level::Fail) > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

pub async fn check(file: Option<&Path>) -> Vec<Item> {
    let config = match Config::load(file) {
        Ok(c) => c,
        Err(e) => {
            return vec![Item::fail("config", e.to_string(), "fix the file or the GATEWAY_* variable it names")];
        }
    };
    let source = file.map_or_else(|| "defaults and GATEWAY_* variables".to_owned(), |f| format!("{}", f.display()));
    let mut items = vec![Item::ok("config", format!("loaded ({source}), every key known"))];
    let keys = database(&config, &mut items).await;
    items.extend(sandbox(&config));
    items.extend(models(&config));
    items.push(web_search(&config));
    items.extend(state(&config));
    items.extend(exposure(&config, keys));
    items
}

/// Database, migrations; returns how many API keys exist (`None` if unknown).
async fn database(config: &Config, items: &mut Vec<Item>) -> Option<u64> {
    let shown = redact_url(&config.database_url);
    if let Some(file) = crate::db::sqlite_file(&config.database_url)
        && !file.exists()
    {
        items.push(Item::warn(
            "database",
            format!("no database yet at {}", file.display()),
            "`gateway serve` creates it at start, or `gateway migrate` now",
        ));
        return Some(0);
    }
    let store = match crate::db::open_existing(config).await {
        Ok(s) => s,
        Err(e) => {
            items.push(Item::fail(
                "database",
                format!("{e:#}"),
                "check database_url (GATEWAY_DATABASE_URL) and that the database server is up",
            ));
            return None;
        }
    };
    if let Err(e) = store.ping().await {
        items.push(Item::fail("database", format!("{shown} does not answer: {e}"), "is the database server up?"));
        store.close().await;
        return None;
    }
    items.push(Item::ok("database", format!("{} at {shown} answers", store.engine())));
    let mut schema_ok = false;
    match store.migration_status().await {
        Err(e) => items.push(Item::fail("migrations", format!("cannot read them: {e}"), "run `gateway migrate`")),
        Ok(s) if !s.unknown.is_empty() => items.push(Item::fail(
            "migrations",
            format!("the database was migrated by a newer gateway (versions {:?} are unknown here)", s.unknown),
            "run the newer gateway binary",
        )),
        Ok(s) if !s.failed.is_empty() => items.push(Item::fail(
            "migrations",
            format!("migrations {:?} failed part way", s.failed),
            "see the database's _sqlx_migrations table and repair by hand",
        )),
        Ok(s) if !s.pending.is_empty() => items.push(Item::warn(
            "migrations",
            format!("{} pending (next: {})", s.pending.len(), s.pending[0]),
            "`gateway serve` applies them at start; `gateway migrate` applies them now",
        )),
        Ok(_) => {
            schema_ok = true;
            items.push(Item::ok("migrations", "all applied"));
        }
    }
    let keys = if schema_ok { store.count_api_keys().await.ok() } else { None };
    store.close().await;
    keys
}

/// The configured sandbox provider (a failure), the others offered (warnings), what
/// networked sandboxes need (slirp4netns), and the guard that refuses a real model without a
/// sandbox boundary. What is said of each provider is the provider's own
/// ([`SandboxProvider::notes`]).
fn sandbox(config: &Config) -> Vec<Item> {
    let mut items = Vec::new();
    let mut offered: Vec<Arc<dyn SandboxProvider>> = Vec::new();
    for provider in compose::sandbox_providers(config) {
        let tier = provider.tier();
        let chosen = tier.as_str() == config.sandbox;
        let notes = provider.notes();
        match provider.check() {
            Ok(()) => {
                items.push(Item::ok("sandbox", format!("{tier}: works ({})", notes.works)));
                offered.push(provider);
            }
            Err(e) if chosen => items.push(Item::fail(
                "sandbox",
                format!("{tier} (the configured sandbox) is unusable: {e}"),
                notes.unusable_hint,
            )),
            Err(e) => items.push(Item::warn(
                "sandbox",
                format!("{tier} is unusable, so environments asking for it are refused: {e}"),
                notes.unusable_hint,
            )),
        }
    }
    for provider in &offered {
        if let Err(e) = provider.check_networking() {
            items.push(Item::warn(
                "network",
                format!("{e}: {} sessions whose environment allows networking fail", provider.tier()),
                provider.notes().networking_hint,
            ));
        }
    }
    if let Err(e) = compose::startup_guard(config, &offered) {
        items.push(Item::fail("sandbox", format!("`gateway serve` would refuse to start: {e}"), "see the message"));
    }
    items
}

/// The model client builds: credentials present (only the variable's name is shown).
/// Whether `web_search` has a provider and its key (without one, the tool answers an error
/// naming the setting: a warning, not a failure).
fn web_search(config: &Config) -> Item {
    match gateway_services::web::search_readiness(&config.web) {
        Ok(()) => Item::ok("web_search", "a search provider and its key are configured"),
        Err(e) => {
            Item::warn("web_search", e, "see [web.search] in the README; the agent's web_search answers this error")
        }
    }
}

/// The default model, then each `[models]` table: what serves it, and whether its client
/// builds with the credential it names (only the variable's name is shown).
fn models(config: &Config) -> Vec<Item> {
    let mut items = vec![default_model(config)];
    let catalog = compose::model_catalog(config);
    for (name, entry) in catalog.named() {
        let mut text = format!("{} model {}", entry.provider, entry.model.as_deref().unwrap_or(name));
        if let Some(table) = config.models.get(name) {
            if let Some(url) = &table.base_url {
                text.push_str(&format!(" at {url}"));
            }
            if let Some(var) = &table.api_key_env {
                text.push_str(&format!(", credential from {var}"));
            }
        }
        match entry.context_window {
            Some(w) => text.push_str(&format!(", context window {w} tokens")),
            None => text.push_str(", no context window (never compacted)"),
        }
        match entry.prices {
            Some(p) => text.push_str(&format!(
                ", list USD/Mtok input {} output {} cache write {} cache read {}",
                p.input, p.output, p.cache_write, p.cache_read
            )),
            None => text.push_str(", no prices (no list cost, no budgets)"),
        }
        if config.model == name {
            text.push_str(" (the default)");
        }
        let result = config.models.get(name).map(|t| compose::table_client(config, name, t));
        items.push(match result {
            Some(Err(e)) => Item::fail(
                "model",
                format!("models.{name}: {e:#}"),
                "export the credential in the gateway's environment (never in the config file)",
            ),
            _ => Item::ok("model", format!("models.{name}: {text}")),
        });
    }
    items
}

fn default_model(config: &Config) -> Item {
    match compose::model_client(config) {
        Ok(_) if config.model == "fake" => Item::ok(
            "model",
            "default: fake, the offline scripted model (set model = \"anthropic\" or name a [models] table for a real one)",
        ),
        Ok(_) if config.model == "anthropic" => {
            let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
            let from = if set("ANTHROPIC_API_KEY") {
                "ANTHROPIC_API_KEY"
            } else if set("ANTHROPIC_AUTH_TOKEN") {
                "ANTHROPIC_AUTH_TOKEN"
            } else {
                "the key `gateway login` stored"
            };
            Item::ok("model", format!("default: anthropic, credentials from {from}"))
        }
        Ok(_) => Item::ok("model", format!("default: the [models.{}] table", config.model)),
        Err(e) => Item::fail(
            "model",
            format!("{e:#}"),
            "export the credential in the gateway's environment (never in the config file)",
        ),
    }
}

/// `data_dir` and the secret key file: private, and present where several hosts share keys.
fn state(config: &Config) -> Vec<Item> {
    let mut items = Vec::new();
    let dir = Path::new(&config.data_dir);
    match std::fs::metadata(dir) {
        Err(_) => items.push(Item::ok("data_dir", format!("{} is created (0700) at first start", dir.display()))),
        Ok(m) if m.permissions().mode() & 0o077 != 0 => items.push(Item::warn(
            "data_dir",
            format!("{} is readable by other users; it holds workspaces and the secret key", dir.display()),
            format!("chmod 700 {}", dir.display()),
        )),
        Ok(_) => items.push(Item::ok("data_dir", format!("{} is private", dir.display()))),
    }
    let path = config.secret_key_path();
    let shared = crate::db::sqlite_file(&config.database_url).is_none();
    if Config::secret_key_from_env().is_some() {
        items.push(Item::ok("secret key", "from GATEWAY_SECRET_KEY"));
    } else {
        match std::fs::metadata(&path) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => items.push(Item::warn(
                "secret key",
                format!("{} is readable by other users", path.display()),
                format!("chmod 600 {}", path.display()),
            )),
            Ok(_) => items.push(Item::ok("secret key", format!("{} (back it up)", path.display()))),
            Err(_) if shared => items.push(Item::warn(
                "secret key",
                format!("none yet at {}; every gateway on a shared database must use the same key", path.display()),
                "set GATEWAY_SECRET_KEY to the same value on every host",
            )),
            Err(_) => items.push(Item::ok("secret key", format!("created at first start at {}", path.display()))),
        }
    }
    items
}

/// Where the listen address is reachable from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Loopback,
    /// `0.0.0.0` or `[::]`: every interface.
    Everywhere,
    Specific,
}

fn reach(listen: &str) -> Reach {
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return match addr.ip() {
            ip if ip.is_loopback() => Reach::Loopback,
            ip if ip.is_unspecified() => Reach::Everywhere,
            _ => Reach::Specific,
        };
    }
    match listen.rsplit_once(':').map(|(host, _)| host) {
        Some("localhost") => Reach::Loopback,
        _ => Reach::Specific,
    }
}

/// API keys and the public URL, given where the gateway listens.
fn exposure(config: &Config, keys: Option<u64>) -> Vec<Item> {
    let reach = reach(&config.listen);
    let listen = &config.listen;
    let mut items = Vec::new();
    match keys {
        None => {}
        Some(0) if reach == Reach::Loopback => items
            .push(Item::ok("api keys", format!("none: only clients on this host are served (listening on {listen})"))),
        Some(0) => items.push(Item::warn(
            "api keys",
            format!("none, listening on {listen}: clients on other hosts are refused until a key exists"),
            "`gateway keys create --name NAME`",
        )),
        Some(n) => items.push(Item::ok("api keys", format!("{n} active"))),
    }
    match (&config.public_url, reach) {
        (None, Reach::Loopback) => {
            items.push(Item::ok("public url", format!("not set: http://{listen} (this host only)")))
        }
        (None, Reach::Everywhere) => items.push(Item::fail(
            "public url",
            format!(
                "not set while listening on {listen}: the links the gateway hands out (agent cards, executors' \
                 remote_url) would point at http://{listen}"
            ),
            "set public_url (GATEWAY_PUBLIC_URL) to the address clients reach the gateway at",
        )),
        (None, _) => items.push(Item::warn(
            "public url",
            format!("not set: links the gateway hands out say http://{listen}"),
            "set public_url (GATEWAY_PUBLIC_URL) to the address clients reach the gateway at",
        )),
        (Some(url), _) if !(url.starts_with("http://") || url.starts_with("https://")) => items.push(Item::fail(
            "public url",
            format!("{url:?} is not an http:// or https:// URL"),
            "set public_url to e.g. https://gateway.example.com",
        )),
        (Some(url), r) if url.starts_with("http://") && r != Reach::Loopback => items.push(Item::warn(
            "public url",
            format!("{url}: plain HTTP, so API keys cross the network unencrypted"),
            "terminate TLS in front of the gateway and use its https:// address",
        )),
        (Some(url), _) => items.push(Item::ok("public url", url.clone())),
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(listen: &str, public_url: Option<&str>, keys: Option<u64>) -> Vec<(&'static str, Level)> {
        let config = Config { listen: listen.into(), public_url: public_url.map(str::to_owned), ..Config::default() };
        exposure(&config, keys).into_iter().map(|i| (i.name, i.level)).collect()
    }

    #[test]
    fn exposure_rules() {
        use Level::*;
        type Case = (&'static str, Option<&'static str>, Option<u64>, Vec<(&'static str, Level)>);
        let cases: [Case; 8] = [
            ("127.0.0.1:8080", None, Some(0), vec![("api keys", Ok), ("public url", Ok)]),
            ("localhost:8080", None, Some(0), vec![("api keys", Ok), ("public url", Ok)]),
            ("[::1]:8080", None, None, vec![("public url", Ok)]),
            ("0.0.0.0:8080", None, Some(0), vec![("api keys", Warn), ("public url", Fail)]),
            ("0.0.0.0:8080", Some("https://gw.example"), Some(2), vec![("api keys", Ok), ("public url", Ok)]),
            ("10.0.0.5:8080", None, Some(1), vec![("api keys", Ok), ("public url", Warn)]),
            ("[::]:8080", Some("http://gw.example"), Some(1), vec![("api keys", Ok), ("public url", Warn)]),
            ("127.0.0.1:8080", Some("gw.example"), Some(0), vec![("api keys", Ok), ("public url", Fail)]),
        ];
        for (listen, url, keys, want) in cases {
            assert_eq!(levels(listen, url, keys), want, "{listen} {url:?} {keys:?}");
        }
    }

    #[test]
    fn a_line_says_level_item_reason_and_hint() {
        let item = Item::fail("sandbox", "namespace is unusable: bubblewrap (bwrap) not found", "install it");
        assert_eq!(
            item.line(Paint { colour: false }),
            "FAIL sandbox     namespace is unusable: bubblewrap (bwrap) not found (hint: install it)"
        );
    }
}
