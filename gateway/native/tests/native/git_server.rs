//! A git smart-HTTP server for the repository tests: `git http-backend` (git's own CGI
//! program) behind a small HTTP server, serving the repositories under a directory, optionally
//! only to requests that carry a token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use base64::Engine as _;
use tokio::io::AsyncWriteExt as _;

struct Shared {
    root: PathBuf,
    token: Option<String>,
    /// Every `Authorization` header received (to show where the token travelled).
    authorizations: Mutex<Vec<String>>,
    /// Requests received (to show git never came).
    requests: std::sync::atomic::AtomicUsize,
    /// Held before answering the first request of each clone, so a test can look at the
    /// running git process.
    delay: std::time::Duration,
}

pub struct GitServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _task: tokio::task::JoinHandle<()>,
}

impl GitServer {
    /// Serves the repositories under `root` (`http://<addr>/<name>.git`).
    pub async fn start(root: &Path, token: Option<&str>, delay: std::time::Duration) -> Self {
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            token: token.map(str::to_owned),
            authorizations: Mutex::new(Vec::new()),
            requests: std::sync::atomic::AtomicUsize::new(0),
            delay,
        });
        let app = axum::Router::new().fallback(cgi).with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, shared, _task: task }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}", self.addr)
    }

    pub fn authorizations(&self) -> Vec<String> {
        self.shared.authorizations.lock().unwrap().clone()
    }

    /// How many requests it has received.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn cgi(State(s): State<Arc<Shared>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    s.requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let auth = header("authorization");
    if !auth.is_empty() {
        s.authorizations.lock().unwrap().push(auth.clone());
    }
    if let Some(token) = &s.token {
        let given = auth
            .strip_prefix("Basic ")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok());
        if given.as_deref().and_then(|g| g.split_once(':')).map(|(_, p)| p) != Some(token.as_str()) {
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Basic realm=\"git\"")
                .body(Body::empty())
                .unwrap();
        }
    }
    if uri.path().ends_with("/info/refs") {
        tokio::time::sleep(s.delay).await;
    }
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &s.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feed = async move {
        let _ = stdin.write_all(&body).await;
    };
    let (out, ()) = tokio::join!(child.wait_with_output(), feed);
    let out = out.unwrap().stdout;
    // CGI: headers, a blank line, the body.
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    let split = split.or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (end, gap) = split.unwrap_or((out.len(), 0));
    let mut response = Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(&out[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        if name.eq_ignore_ascii_case("status") {
            let code = value.trim().split(' ').next().and_then(|c| c.parse().ok()).unwrap_or(500);
            response = response.status(code);
        } else {
            response = response.header(name.trim(), value.trim());
        }
    }
    response.body(Body::from(out[end + gap..].to_vec())).unwrap()
}

/// Runs git in `dir` (a test fixture's own repository).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A bare repository `<root>/<name>.git` holding one commit of `files` empty files (in
/// directories of 100).
pub fn repository_of_many_files(root: &Path, name: &str, files: usize) -> PathBuf {
    let work = root.join(format!("{name}-work"));
    for i in 0..files {
        let dir = work.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), b"").unwrap();
    }
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    git(&work, &["add", "."]);
    git(&work, &["commit", "--quiet", "-m", "many"]);
    let bare = root.join(format!("{name}.git"));
    git(root, &["clone", "--quiet", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    bare
}

/// A bare repository `<root>/<name>.git` with two commits on `main` (README says "v1", then
/// "v2") and a branch `feature` (README "feature"). Returns the first commit's id.
pub fn repository(root: &Path, name: &str) -> String {
    let work = root.join(format!("{name}-work"));
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(work.join("README"), "v1\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "--quiet", "-m", "one"]);
    let first = git(&work, &["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(work.join("README"), "v2\n").unwrap();
    git(&work, &["commit", "--quiet", "-am", "two"]);
    git(&work, &["checkout", "--quiet", "-b", "feature"]);
    std::fs::write(work.join("README"), "feature\n").unwrap();
    git(&work, &["commit", "--quiet", "-am", "three"]);
    git(&work, &["checkout", "--quiet", "main"]);
    let bare = root.join(format!("{name}.git"));
    git(root, &["clone", "--quiet", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    first
}
