//! Real peers for the integration tests: the Python SDK's Streamable HTTP server
//! (`peers/bearer_server.py` in `.cache/venv-mcp`) and the npm `server-everything` over stdio
//! (`.cache/npm-mcp`). Both are installed by `gateway/mcp/tests/peers/install`; a missing peer
//! fails the test with that instruction, never a skip.

#![allow(dead_code, reason = "each test binary uses part of the helpers")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

pub const INSTALL: &str = "gateway/mcp/tests/peers/install";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn require(path: &Path, what: &str) -> PathBuf {
    assert!(path.exists(), "{what} is not installed at {}; install the MCP test peers with: {INSTALL}", path.display());
    path.to_owned()
}

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// `bearer_server.py` on a free port, killed on drop.
pub struct PythonServer {
    child: Child,
    pub port: u16,
    pub token: String,
    calls: tempfile::NamedTempFile,
}

impl PythonServer {
    /// Starts the server requiring `token`; `challenge` decides whether its 401 carries
    /// `WWW-Authenticate`. Waits until the port accepts connections.
    pub async fn start(token: &str, challenge: bool) -> Self {
        let root = repo_root();
        let python = require(&root.join(".cache/venv-mcp/bin/python"), "the Python MCP SDK (mcp==2.3.0)");
        let script = root.join("gateway/mcp/tests/peers/bearer_server.py");
        let calls = tempfile::NamedTempFile::new().expect("call log file");
        let port = free_port();
        let child = Command::new(python)
            .arg(&script)
            .arg(port.to_string())
            .env("MCP_TEST_TOKEN", token)
            .env("MCP_CALL_LOG", calls.path())
            .env("MCP_TEST_CHALLENGE", if challenge { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn bearer_server.py");
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "bearer_server.py did not listen on {port} within 30s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { child, port, token: token.to_owned(), calls }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The tool calls the server received, one JSON value per call.
    pub fn calls(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.calls.path())
            .expect("read call log")
            .lines()
            .map(|l| serde_json::from_str(l).expect("call log line is JSON"))
            .collect()
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `server-everything` on stdio: the child with piped stdin/stdout, killed on drop.
pub fn spawn_everything() -> Child {
    let root = repo_root();
    let script = require(
        &root.join(".cache/npm-mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "@modelcontextprotocol/server-everything@2026.8.31",
    );
    Command::new("node")
        .arg(script)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node (install Node.js: apt-get install -y nodejs npm)")
}
