//! A PostgreSQL cluster of one test's own, for tests that stop or restart the database: the
//! shared server on 5432 serves other tests and must never go down.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's PostgreSQL 15 server programs live.
const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A private cluster in a temporary directory, on a free port, run as the `postgres` user
/// (initdb refuses root). Stopped (`-m immediate`) and deleted when dropped, whatever the
/// test's outcome.
pub struct PgCluster {
    dir: PathBuf,
    pub port: u16,
}

impl PgCluster {
    /// Creates and starts a cluster; panics with the tool's output if it cannot.
    pub fn start(name: &str) -> Self {
        let port = crate::free_port();
        let dir = std::env::temp_dir().join(format!("gateway-pg-{name}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster directory");
        // Constructed before initdb, so a failure below still removes the directory.
        let cluster = Self { dir, port };
        run(Command::new("chown").arg("postgres:postgres").arg(&cluster.dir), "chown the cluster directory");
        cluster.as_postgres(
            "initdb",
            &["-D", &cluster.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
        );
        cluster.start_server();
        cluster
    }

    /// `postgres://` URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start_server(&self) {
        let options =
            format!("-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=50", self.port, self.dir.display());
        let log = self.dir.join("server.log");
        self.as_postgres(
            "pg_ctl",
            &["-D", &self.data(), "-o", &options, "-l", &log.display().to_string(), "-w", "-t", "30", "start"],
        );
    }

    /// Stops the server in `mode`: `immediate` as a crash would (every backend killed, no
    /// checkpoint; the next start replays the WAL), `fast` as an operator's restart does (every
    /// session ended with an error, a checkpoint).
    pub fn stop(&self, mode: &str) {
        self.as_postgres("pg_ctl", &["-D", &self.data(), "-m", mode, "-w", "stop"]);
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn as_postgres(&self, tool: &str, args: &[&str]) {
        let program = Path::new(BIN).join(tool);
        run(Command::new("runuser").args(["-u", "postgres", "--"]).arg(program).args(args), tool);
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(Path::new(BIN).join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
