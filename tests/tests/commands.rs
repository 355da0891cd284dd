#![allow(clippy::unwrap_used)]
//! The operator's commands as a person runs them: `gateway sessions list | tail` against a
//! running gateway (`--url`) and against its database, and `gateway check`. Each test
//! asserts what the terminal shows: the lines on stdout, and the exit status.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_tests::{Gateway, GatewayBuilder, eventually, free_port, workdir};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

/// A gateway in `dir` on `port`, running the shipped native backend with the offline fake
/// model (which does what the user types: `tool:bash {...}` calls bash).
fn gateway(dir: &Path, port: u16) -> Gateway {
    GatewayBuilder::new(TESTBED, "commands")
        .cwd(dir)
        .env("GATEWAY_LISTEN", format!("127.0.0.1:{port}"))
        .env("GATEWAY_TESTBED_NATIVE", "model")
        .spawn()
}

/// The `gateway` command line in `dir`, with none of the caller's gateway settings.
fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(TESTBED);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("GATEWAY_CONFIG")
        .env_remove("GATEWAY_URL")
        .env_remove("GATEWAY_API_KEY")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    cmd
}

/// Runs a command to its end: (exit code, stdout, stderr).
fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

async fn post(http: &reqwest::Client, g: &Gateway, path: &str, body: Value) -> Value {
    let r = http.post(g.url(path)).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{path}: {v}");
    v
}

/// An agent named `name` with the built-in tools, always allowed; its id.
async fn agent(http: &reqwest::Client, g: &Gateway, name: &str) -> String {
    let tools = json!([{"type": "agent_toolset_20260401",
        "default_config": {"enabled": true, "permission_policy": {"type": "always_allow"}}}]);
    let a = post(http, g, "/v1/agents", json!({"name": name, "model": "claude-sonnet-4-6", "tools": tools})).await;
    a["id"].as_str().unwrap().to_owned()
}

async fn session(http: &reqwest::Client, g: &Gateway, agent: &str) -> String {
    let env = post(http, g, "/v1/environments", json!({"name": "e", "config": {"type": "cloud"}})).await;
    let s = post(http, g, "/v1/sessions", json!({"agent": agent, "environment_id": env["id"]})).await;
    s["id"].as_str().unwrap().to_owned()
}

async fn say(http: &reqwest::Client, g: &Gateway, session: &str, text: &str) {
    let body = json!({"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]});
    post(http, g, &format!("/v1/sessions/{session}/events"), body).await;
}

/// Waits (through the API) until the session answered `word` and is idle again.
async fn answered(http: &reqwest::Client, g: &Gateway, session: &str, word: &str) {
    eventually(30, "the turn's end", || async {
        let s: Value = http.get(g.url(&format!("/v1/sessions/{session}"))).send().await.ok()?.json().await.ok()?;
        let events = http.get(g.url(&format!("/v1/sessions/{session}/events?limit=1000"))).send().await.ok()?;
        let answered = events.text().await.ok()?.contains(&format!("echo: {word}"));
        (answered && s["status"] == "idle").then_some(())
    })
    .await;
}

/// A running `gateway sessions tail`, its stdout collected line by line as it comes.
struct Tail {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: PathBuf,
}

impl Tail {
    fn start(dir: &Path, name: &str, args: &[&str]) -> Tail {
        let stderr = dir.join(format!("tail-{name}.stderr"));
        let mut child =
            command(dir, args).stdout(Stdio::piped()).stderr(std::fs::File::create(&stderr).unwrap()).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stdout.take().unwrap(), Arc::clone(&lines));
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Tail { child, lines, stderr }
    }

    /// Each line without its time (`HH:MM:SS `): the label and the text.
    fn shown(&self) -> Vec<String> {
        self.lines.lock().unwrap().iter().map(|l| l.get(9..).unwrap_or(l).to_owned()).collect()
    }

    async fn wait_for(&self, what: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !self.shown().iter().any(|l| l == what) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "tail never showed {what:?}; it showed {:#?}\nstderr: {}",
                self.shown(),
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, s: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), s).unwrap();
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Ctrl-C; the exit code.
    async fn interrupt(mut self) -> i32 {
        self.signal(Signal::SIGINT);
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        panic!("tail did not end on Ctrl-C");
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One turn of the fake model running `sleep 2; echo hi` in bash, as the tail shows it.
fn bash_turn() -> Vec<String> {
    [
        r#"user     tool:bash {"command": "sleep 2; echo hi"}"#,
        "status   running",
        r#"tool     bash {"command":"sleep 2; echo hi"}"#,
        "result   bash ok: hi",
        "agent    done: hi",
        "status   idle (end of turn)",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `sessions tail` follows a turn as it happens, the same lines whether it reads the gateway's
/// API or its database: the input, the tool call with its input (shown while the command
/// still runs), its result, the reply and the turn's end, in order, without colour on a pipe;
/// Ctrl-C ends it with status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_shows_a_live_turn_from_the_api_and_from_the_database() {
    let dir = workdir("tail-live");
    let g = gateway(&dir, free_port());
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let agent = agent(&http, &g, "coder").await;
    let session = session(&http, &g, &agent).await;
    let url = g.url("");
    let remote = Tail::start(&dir, "remote", &["sessions", "tail", &session, "--url", &url]);
    let local = Tail::start(&dir, "local", &["sessions", "tail", &session]);
    // Both are following before the turn starts (a session with no events shows nothing).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    say(&http, &g, &session, r#"tool:bash {"command": "sleep 2; echo hi"}"#).await;

    let want = bash_turn();
    for tail in [&remote, &local] {
        tail.wait_for(&want[2]).await;
        assert!(
            !tail.shown().iter().any(|l| l.starts_with("result")),
            "the call shows while the command still runs: {:#?}",
            tail.shown()
        );
    }
    for tail in [&remote, &local] {
        tail.wait_for(&want[5]).await;
        assert_eq!(tail.shown(), want, "stderr: {}", tail.stderr());
        assert!(tail.lines.lock().unwrap().iter().all(|l| !l.contains('\x1b')), "no colour on a pipe");
    }
    assert_eq!(remote.interrupt().await, 0);
    assert_eq!(local.interrupt().await, 0);
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The gateway is killed and restarted while `sessions tail --url` follows a session: the tail
/// reconnects and resumes after the last event it printed. Turns that ran while it was away
/// are shown once each, in order; nothing is shown twice. The database tail, which follows by
/// sequence number, shows the same lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_resumes_after_the_gateway_restarts_without_duplicating_or_losing_lines() {
    let dir = workdir("tail-restart");
    let port = free_port();
    let mut g = gateway(&dir, port);
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let agent = agent(&http, &g, "coder").await;
    let session = session(&http, &g, &agent).await;
    say(&http, &g, &session, "before").await;
    let url = g.url("");
    let remote = Tail::start(&dir, "remote", &["sessions", "tail", &session, "--url", &url, "-n", "100"]);
    let local = Tail::start(&dir, "local", &["sessions", "tail", &session, "-n", "100"]);
    remote.wait_for("agent    echo: before").await;
    say(&http, &g, &session, "first").await;
    remote.wait_for("agent    echo: first").await;

    // The tails sleep through the restart and the next two turns (SIGSTOP), so what those
    // turns said can only reach them by the replay after their reconnect.
    remote.signal(Signal::SIGSTOP);
    local.signal(Signal::SIGSTOP);
    g.signal(Signal::SIGKILL);
    g.exit_code(Duration::from_secs(10)).await;
    drop(g);
    let g = gateway(&dir, port);
    g.ready(Duration::from_secs(30)).await;
    for word in ["second", "third"] {
        say(&http, &g, &session, word).await;
        answered(&http, &g, &session, word).await;
    }

    remote.signal(Signal::SIGCONT);
    local.signal(Signal::SIGCONT);
    let mut want = Vec::new();
    for word in ["before", "first", "second", "third"] {
        want.extend([
            format!("user     {word}"),
            "status   running".to_owned(),
            format!("agent    echo: {word}"),
            "status   idle (end of turn)".to_owned(),
        ]);
    }
    for tail in [&remote, &local] {
        tail.wait_for("agent    echo: third").await;
        eventually(10, "the last turn's end", || async { (tail.shown().len() >= want.len()).then_some(()) }).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(tail.shown(), want, "stderr: {}", tail.stderr());
    }
    assert!(remote.stderr().contains("reconnecting"), "the remote tail lost its stream: {}", remote.stderr());
    assert_eq!(remote.interrupt().await, 0);
    assert_eq!(local.interrupt().await, 0);
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The session ids of a `sessions list` table (the first column, under the header).
fn listed(stdout: &str) -> Vec<String> {
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("ID") && header.contains("STATUS") && header.contains("AGE"), "{stdout}");
    lines.map(|l| l.split_whitespace().next().unwrap().to_owned()).collect()
}

/// `sessions list` filters by status and by agent (id or name), reading the database or the
/// API alike; a row shows status, agent name, backend and environment state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_status_and_agent() {
    let dir = workdir("list");
    let g = gateway(&dir, free_port());
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::new();
    let (alpha, beta) = (agent(&http, &g, "alpha").await, agent(&http, &g, "beta").await);
    let a1 = session(&http, &g, &alpha).await;
    let a2 = session(&http, &g, &alpha).await;
    let b1 = session(&http, &g, &beta).await;
    say(&http, &g, &a2, r#"tool:bash {"command": "sleep 30"}"#).await;
    eventually(30, "a2 running its command", || async {
        let s: Value = http.get(g.url(&format!("/v1/sessions/{a2}"))).send().await.ok()?.json().await.ok()?;
        (s["status"] == "running" && s["environment_state"] == "realized").then_some(())
    })
    .await;

    let url = g.url("");
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    for remote in [false, true] {
        let list = |filters: &[&str]| {
            let mut args = vec!["sessions", "list"];
            args.extend_from_slice(filters);
            if remote {
                args.extend(["--url", url.as_str()]);
            }
            let (code, out, err) = run(&mut command(&dir, &args));
            assert_eq!(code, 0, "{args:?}: {err}");
            (out.clone(), sorted(listed(&out)))
        };
        let (all, ids) = list(&[]);
        assert_eq!(ids, sorted(vec![a1.clone(), a2.clone(), b1.clone()]), "remote={remote}");
        let row = all.lines().find(|l| l.starts_with(&a2)).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cells[1..5], ["running", "alpha", "native", "realized"], "remote={remote}: {all}");
        assert_eq!(list(&["--status", "running"]).1, vec![a2.clone()], "remote={remote}");
        assert_eq!(list(&["--status", "idle"]).1, sorted(vec![a1.clone(), b1.clone()]), "remote={remote}");
        assert_eq!(list(&["--agent", "alpha"]).1, sorted(vec![a1.clone(), a2.clone()]), "remote={remote}");
        assert_eq!(list(&["--agent", &beta]).1, vec![b1.clone()], "remote={remote}");
        assert_eq!(list(&["--agent", "alpha", "--status", "idle"]).1, vec![a1.clone()], "remote={remote}");
        // A name is resolved before the limit applies: b1 is the newest session, not alpha's.
        assert_eq!(list(&["--agent", "alpha", "--limit", "1"]).1, vec![a2.clone()], "remote={remote}");
    }
    let (code, _, err) = run(&mut command(&dir, &["sessions", "list", "--status", "asleep"]));
    assert_ne!(code, 0);
    assert!(err.contains("\"asleep\" is not a status"), "{err}");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gateway check`: a namespace sandbox without bubblewrap fails, naming it, with a non-zero
/// exit (bwrap neither on PATH nor at the configured path); the zero-config default passes;
/// a real model's credential is checked but never printed.
#[test]
fn check_fails_naming_bubblewrap_when_it_is_missing_and_passes_on_defaults() {
    let dir = workdir("check");
    let empty = dir.join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let missing: [(&str, String); 2] = [
        ("PATH", empty.display().to_string()),
        ("GATEWAY_ENVIRONMENTS__BWRAP", dir.join("no-such-bwrap").display().to_string()),
    ];
    for (var, value) in missing {
        let (code, out, _) = run(command(&dir, &["check"]).env("GATEWAY_SANDBOX", "namespace").env(var, &value));
        assert_ne!(code, 0, "{var}: {out}");
        let fail = out.lines().find(|l| l.starts_with("FAIL sandbox")).unwrap_or_else(|| panic!("{var}: {out}"));
        assert!(fail.contains("bubblewrap") && fail.contains("apt install bubblewrap"), "{fail}");
    }

    let (code, out, err) = run(&mut command(&dir, &["check"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("FAIL"), "{out}");
    for item in ["config", "database", "sandbox", "model", "api keys", "public url"] {
        assert!(out.lines().any(|l| l.get(5..).is_some_and(|l| l.starts_with(item))), "no {item} line: {out}");
    }

    let secret = "sk-ant-test-never-printed";
    let (code, out, _) = run(command(&dir, &["check"])
        .env("GATEWAY_MODEL", "anthropic")
        .env("GATEWAY_SANDBOX", "namespace")
        .env("ANTHROPIC_API_KEY", secret));
    assert!(out.contains("ok   model       default: anthropic, credentials from ANTHROPIC_API_KEY"), "{out}");
    assert!(!out.contains(secret), "{out}");
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run(command(&dir, &["check"])
        .env("GATEWAY_MODEL", "anthropic")
        .env("GATEWAY_SANDBOX", "namespace")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN"));
    assert_ne!(code, 0);
    assert!(out.lines().any(|l| l.starts_with("FAIL model") && l.contains("ANTHROPIC_API_KEY")), "{out}");

    // Each [models] table gets a line saying what serves it; one whose credential variable is
    // unset fails, naming the variable and never a value.
    std::fs::write(
        dir.join("gateway.toml"),
        "[models.local]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"qwen3:8b\"\n\
         context_window = 32768\n\
         [models.priced]\nprovider = \"fake\"\nprices = { input = 3.0, output = 15.0 }\n\
         [models.keyed]\nprovider = \"openai\"\napi_key_env = \"GATEWAY_TEST_UNSET_KEY\"\n",
    )
    .unwrap();
    let check = || {
        let mut c = command(&dir, &["check"]);
        c.env("GATEWAY_SANDBOX", "namespace");
        c
    };
    let (code, out, _) = run(check().env_remove("GATEWAY_TEST_UNSET_KEY"));
    assert_ne!(code, 0, "{out}");
    let line = |name: &str| out.lines().find(|l| l.contains(&format!("models.{name}:"))).unwrap_or_default().to_owned();
    assert!(
        line("local").starts_with("ok") && line("local").contains("openai model qwen3:8b at http://127.0.0.1:9/v1"),
        "{out}"
    );
    assert!(line("local").contains("context window 32768") && line("local").contains("no prices"), "{out}");
    assert!(line("priced").contains("input 3 output 15"), "{out}");
    assert!(line("keyed").starts_with("FAIL") && line("keyed").contains("GATEWAY_TEST_UNSET_KEY"), "{out}");
    let (code, out, _) = run(check().env("GATEWAY_TEST_UNSET_KEY", "sk-never-shown"));
    assert!(!out.contains("sk-never-shown") && out.contains("credential from GATEWAY_TEST_UNSET_KEY"), "{out}");
    assert_eq!(code, 0, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With API keys configured, `--url` reads with the key from `GATEWAY_API_KEY` (there is no
/// key option); without it, and no terminal to ask on, the command fails saying the gateway
/// refused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_keys_is_read_with_the_key_from_the_environment() {
    let dir = workdir("remote-key");
    let (code, key, err) = run(&mut command(&dir, &["keys", "create", "--name", "ops"]));
    assert_eq!(code, 0, "{err}");
    let key = key.trim().to_owned();
    let g = gateway(&dir, free_port());
    g.ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::builder()
        .default_headers([("x-api-key".parse().unwrap(), key.parse().unwrap())].into_iter().collect())
        .build()
        .unwrap();
    let agent = agent(&http, &g, "keyed").await;
    let session = session(&http, &g, &agent).await;
    let url = g.url("");

    let (code, out, err) = run(&mut command(&dir, &["sessions", "list", "--url", &url]));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("401") && !err.contains(&key), "{err}");
    let (code, out, err) = run(command(&dir, &["sessions", "list", "--url", &url]).env("GATEWAY_API_KEY", &key));
    assert_eq!(code, 0, "{err}");
    assert_eq!(listed(&out), vec![session.clone()]);
    let (code, out, err) =
        run(command(&dir, &["sessions", "show", &session]).env("GATEWAY_URL", &url).env("GATEWAY_API_KEY", &key));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("id           {session}\nstatus       idle\nagent        keyed")), "{out}");
    let (code, _, err) = run(&mut command(&dir, &["sessions", "list", "--key", &key]));
    assert_ne!(code, 0, "there is no --key option");
    assert!(err.contains("--key"), "{err}");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[agents.NAME] effort` reaches the agent as its `model.effort` (ADR 0034: a native agent
/// then asks for extended thinking); a value the API does not know stops the start, naming
/// the key and the values it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_effort_is_published_and_a_bad_one_stops_the_start() {
    let dir = workdir("effort");
    std::fs::write(dir.join("gateway.toml"), "[agents.thinker]\neffort = \"high\"\n").unwrap();
    let g = gateway(&dir, free_port());
    g.ready(Duration::from_secs(30)).await;
    let agents: Value = reqwest::get(g.url("/v1/agents")).await.unwrap().json().await.unwrap();
    let thinker = agents["data"].as_array().unwrap().iter().find(|a| a["name"] == "thinker").unwrap().clone();
    assert_eq!(thinker["model"]["effort"], serde_json::json!({"type": "high"}), "{thinker}");
    drop(g);

    std::fs::write(dir.join("gateway.toml"), "[agents.thinker]\neffort = \"extreme\"\n").unwrap();
    let mut child = command(&dir, &["serve"])
        .env("GATEWAY_LISTEN", format!("127.0.0.1:{}", free_port()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("a bad effort did not stop the start");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success());
    assert!(err.contains("[agents.thinker].effort") && err.contains("low, medium, high, xhigh, max"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
