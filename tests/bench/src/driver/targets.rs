//! The processes under test: the `gateway` binary (serve or acp, with a generated TOML
//! configuration) and the four baselines, all found next to the `bench` binary unless told
//! otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use super::engine::Database;
use super::error::{BenchError, Result};
use super::procs::{self, Proc};

/// How long a process may take to answer its readiness probe (PostgreSQL migrations included).
const READY: Duration = Duration::from_secs(60);
/// SIGTERM grace before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Bins {
    pub gateway: PathBuf,
    pub durable: PathBuf,
    pub a2a_durable: PathBuf,
    pub echo: PathBuf,
    pub acp_stub: PathBuf,
}

impl Bins {
    /// `gateway` from `--gateway` or next to this executable; the baselines next to it.
    pub fn locate(gateway: Option<PathBuf>) -> Result<Bins> {
        let here = std::env::current_exe()?.parent().map(Path::to_path_buf).unwrap_or_default();
        let find = |name: &str| -> Result<PathBuf> {
            let p = here.join(name);
            if p.is_file() { Ok(p) } else { Err(BenchError::MissingBinary(p.display().to_string())) }
        };
        let gateway = match gateway {
            Some(p) if p.is_file() => std::fs::canonicalize(p)?,
            Some(p) => return Err(BenchError::MissingBinary(p.display().to_string())),
            None => find("gateway")?,
        };
        Ok(Bins {
            gateway,
            durable: find("bench-durable")?,
            a2a_durable: find("bench-a2a-durable")?,
            echo: find("bench-a2a-echo")?,
            acp_stub: find("bench-acp-stub")?,
        })
    }
}

/// What a gateway publishes besides the API's defaults.
#[derive(Debug, Clone, Default)]
pub struct Publish {
    /// `[agents.NAME] backend = ...`
    pub agents: Vec<(String, String)>,
    /// `[remotes.a2a.NAME] url = ...`
    pub remotes: Vec<(String, String)>,
    /// `[executors.acp.NAME] command = ...`
    pub executors: Vec<(String, PathBuf)>,
}

/// `[admission]` settings besides the gateway's defaults (`AdmissionLimits`): a key and its
/// value, every one of them an integer. Empty for every gateway but (b)'s refusal segment.
pub type Admission<'a> = &'a [(&'a str, u64)];

/// A TOML basic string (JSON string escapes are valid TOML escapes).
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Where a gateway keeps its local state and which host it says it is. Processes on one
/// database must be one host (the same data directory) or have distinct host ids, and must
/// seal secrets with one key (docs/ops/several-processes.md).
#[derive(Debug, Clone)]
pub struct Host {
    pub data_dir: PathBuf,
    /// `host_id`; the gateway's default (the hostname) when `None`.
    pub id: Option<String>,
    /// `secret_key_file`; the gateway's default (`<data_dir>/secret.key`) when `None`.
    pub secret_key_file: Option<PathBuf>,
}

impl Host {
    /// The gateway's defaults, with its data directory at `data_dir`.
    pub fn local(data_dir: &Path) -> Host {
        Host { data_dir: data_dir.to_path_buf(), id: None, secret_key_file: None }
    }
}

/// The configuration file: defaults everywhere but the addresses, the state locations (and the
/// host's identity, when given), the published agents, a 1 s shutdown grace (it only shortens
/// the bench's own stops) and no connection or stream caps (every client of the bench comes
/// from 127.0.0.1, as they would through a proxy, and the idle-subscriber test holds 10,000 of
/// them: the open files limit decides), plus any `admission` settings given.
pub fn config_toml(listen: &str, db: &Database, host: &Host, publish: &Publish, admission: Admission<'_>) -> String {
    let mut t = format!(
        "listen = {}\ndatabase_url = {}\ndata_dir = {}\n",
        q(listen),
        q(&db.url),
        q(&host.data_dir.display().to_string())
    );
    if let Some(id) = &host.id {
        t.push_str(&format!("host_id = {}\n", q(id)));
    }
    if let Some(key) = &host.secret_key_file {
        t.push_str(&format!("secret_key_file = {}\n", q(&key.display().to_string())));
    }
    t.push_str(
        "\n[workers]\nshutdown_grace_secs = 1\n\n\
         [http]\nmax_connections_per_peer = 1000000\nmax_connections = 1000000\nmax_streams_per_key = 1000000\n",
    );
    if !admission.is_empty() {
        t.push_str("\n[admission]\n");
        for (key, value) in admission {
            t.push_str(&format!("{} = {value}\n", q(key)));
        }
    }
    for (name, backend) in &publish.agents {
        t.push_str(&format!("\n[agents.{}]\nbackend = {}\n", q(name), q(backend)));
    }
    for (name, url) in &publish.remotes {
        t.push_str(&format!("\n[remotes.a2a.{}]\nurl = {}\n", q(name), q(url)));
    }
    for (name, command) in &publish.executors {
        t.push_str(&format!("\n[executors.acp.{}]\ncommand = {}\n", q(name), q(&command.display().to_string())));
    }
    t
}

pub struct Server {
    pub proc: Proc,
    pub base: String,
}

impl Server {
    pub async fn stop(self) {
        self.proc.stop(STOP_GRACE).await;
    }
}

fn write_config(
    dir: &Path,
    listen: &str,
    db: &Database,
    host: &Host,
    publish: &Publish,
    admission: Admission<'_>,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config_toml(listen, db, host, publish, admission))?;
    Ok(path)
}

/// `gateway serve` on a free port with its data directory in `dir/data`, ready (`/readyz`)
/// when this returns.
pub async fn gateway_serve(
    bins: &Bins,
    http: &reqwest::Client,
    dir: &Path,
    db: &Database,
    publish: &Publish,
) -> Result<Server> {
    gateway_serve_as(bins, http, dir, db, publish, &Host::local(&dir.join("data")), &[]).await
}

/// `gateway serve` with its configuration and log in `dir` and its data directory at
/// `data_dir`. Two processes on one database must be one host (the same data directory) or
/// have distinct host ids; a shared `data_dir` is the former, and needs nothing else.
pub async fn gateway_serve_with_data_dir(
    bins: &Bins,
    http: &reqwest::Client,
    dir: &Path,
    db: &Database,
    publish: &Publish,
    data_dir: &Path,
) -> Result<Server> {
    gateway_serve_as(bins, http, dir, db, publish, &Host::local(data_dir), &[]).await
}

/// `gateway serve` as `host`, with its configuration and log in `dir` and `admission`'s
/// settings besides the defaults.
pub async fn gateway_serve_as(
    bins: &Bins,
    http: &reqwest::Client,
    dir: &Path,
    db: &Database,
    publish: &Publish,
    host: &Host,
    admission: Admission<'_>,
) -> Result<Server> {
    let port = procs::free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let config = write_config(dir, &listen, db, host, publish, admission)?;
    let mut cmd = Command::new(&bins.gateway);
    procs::clean_env(&mut cmd);
    cmd.arg("serve").arg("--config").arg(&config).current_dir(dir);
    let mut proc = Proc::spawn("gateway serve", cmd, &dir.join("gateway.log"), false)?;
    let base = format!("http://{listen}");
    proc.wait_http(http, &format!("{base}/readyz"), READY).await?;
    Ok(Server { proc, base })
}

/// `gateway acp --agent AGENT` with piped stdio.
pub fn gateway_acp(bins: &Bins, dir: &Path, db: &Database, publish: &Publish, agent: &str) -> Result<Proc> {
    // The listen address is unused by `gateway acp`, but must be a valid one.
    let config = write_config(dir, "127.0.0.1:0", db, &Host::local(&dir.join("data")), publish, &[])?;
    let mut cmd = Command::new(&bins.gateway);
    procs::clean_env(&mut cmd);
    cmd.arg("acp").arg("--config").arg(&config).arg("--agent").arg(agent).current_dir(dir);
    Proc::spawn("gateway acp", cmd, &dir.join("gateway-acp.log"), true)
}

/// `bench-durable` on a free port with its own database file in `dir`.
pub async fn durable(bins: &Bins, http: &reqwest::Client, dir: &Path) -> Result<Server> {
    std::fs::create_dir_all(dir)?;
    let listen = format!("127.0.0.1:{}", procs::free_port()?);
    let mut cmd = Command::new(&bins.durable);
    cmd.arg("--listen").arg(&listen).arg("--database").arg(dir.join("durable.db"));
    let mut proc = Proc::spawn("bench-durable", cmd, &dir.join("durable.log"), false)?;
    let base = format!("http://{listen}");
    proc.wait_http(http, &format!("{base}/readyz"), READY).await?;
    Ok(Server { proc, base })
}

/// `bench-a2a-durable` on a free port with its own database file in `dir`, in front of the
/// A2A JSON-RPC endpoint `remote`.
pub async fn a2a_durable(bins: &Bins, http: &reqwest::Client, dir: &Path, remote: &str) -> Result<Server> {
    std::fs::create_dir_all(dir)?;
    let listen = format!("127.0.0.1:{}", procs::free_port()?);
    let mut cmd = Command::new(&bins.a2a_durable);
    cmd.arg("--listen").arg(&listen).arg("--database").arg(dir.join("a2a-durable.db")).arg("--remote").arg(remote);
    let mut proc = Proc::spawn("bench-a2a-durable", cmd, &dir.join("a2a-durable.log"), false)?;
    let base = format!("http://{listen}");
    proc.wait_http(http, &format!("{base}/readyz"), READY).await?;
    Ok(Server { proc, base })
}

/// `bench-a2a-echo` answering after `delay`.
pub async fn echo(bins: &Bins, http: &reqwest::Client, dir: &Path, name: &str, delay: Duration) -> Result<Server> {
    std::fs::create_dir_all(dir)?;
    let listen = format!("127.0.0.1:{}", procs::free_port()?);
    let mut cmd = Command::new(&bins.echo);
    cmd.arg("--listen").arg(&listen).arg("--delay-ms").arg(delay.as_millis().to_string());
    let mut proc = Proc::spawn(name, cmd, &dir.join(format!("{name}.log")), false)?;
    let base = format!("http://{listen}");
    proc.wait_http(http, &format!("{base}/.well-known/agent-card.json"), READY).await?;
    Ok(Server { proc, base })
}

/// `bench-acp-stub` with piped stdio.
pub fn acp_stub(bins: &Bins, dir: &Path) -> Result<Proc> {
    std::fs::create_dir_all(dir)?;
    let cmd = Command::new(&bins.acp_stub);
    Proc::spawn("bench-acp-stub", cmd, &dir.join("acp-stub.log"), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_quotes_everything_it_writes() {
        let db = Database::existing("sqlite:///tmp/a \"b\"/g.db");
        let p = Publish {
            agents: vec![("echo-slow".into(), "a2a:slow".into())],
            remotes: vec![("slow".into(), "http://127.0.0.1:1".into())],
            executors: vec![("stub".into(), PathBuf::from("/bin/stub"))],
        };
        let t = config_toml("127.0.0.1:9", &db, &Host::local(Path::new("/tmp/d")), &p, &[]);
        assert!(t.contains("database_url = \"sqlite:///tmp/a \\\"b\\\"/g.db\""), "{t}");
        assert!(t.contains("[agents.\"echo-slow\"]\nbackend = \"a2a:slow\""), "{t}");
        assert!(t.contains("[remotes.a2a.\"slow\"]\nurl = \"http://127.0.0.1:1\""), "{t}");
        assert!(t.contains("[executors.acp.\"stub\"]\ncommand = \"/bin/stub\""), "{t}");
        assert!(!t.contains("host_id") && !t.contains("secret_key_file") && !t.contains("[admission]"), "{t}");
    }

    #[test]
    fn a_host_of_its_own_is_written_before_the_first_table() {
        let db = Database::existing("postgres://h/db");
        let host = Host {
            data_dir: PathBuf::from("/tmp/d1"),
            id: Some("bench-1".into()),
            secret_key_file: Some(PathBuf::from("/tmp/secret.key")),
        };
        let t = config_toml("127.0.0.1:9", &db, &host, &Publish::default(), &[]);
        let top = t.split("\n[").next().unwrap_or_default();
        assert!(top.contains("data_dir = \"/tmp/d1\"\nhost_id = \"bench-1\"\n"), "{t}");
        assert!(top.contains("secret_key_file = \"/tmp/secret.key\"\n"), "{t}");
    }

    #[test]
    fn admission_settings_get_a_table_of_their_own() {
        let db = Database::existing("sqlite:///tmp/g.db");
        let p = Publish { agents: vec![("echo-fast".into(), "a2a:fast".into())], ..Publish::default() };
        let t = config_toml("127.0.0.1:9", &db, &Host::local(Path::new("/tmp/d")), &p, &[("max_queued_runs", 0)]);
        let table = t.split("\n[admission]\n").nth(1).unwrap_or_default();
        let table = table.split("\n[").next().unwrap_or_default();
        assert_eq!(table, "\"max_queued_runs\" = 0\n", "{t}");
    }
}
