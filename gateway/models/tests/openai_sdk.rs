//! The stub's Chat Completions wire format against the official `openai` Python package
//! (openai==3.63.0, pinned in `peers/requirements.txt`): `peers/chat_wire.py` validates every
//! body and chunk strictly against the package's types and reads them with the SDK itself. The
//! OpenAI client's own tests run against the stub, so this is what ties them to the real API.
//!
//! The package lives in `.cache/venv-openai`, installed by `gateway/models/tests/peers/install`
//! (scripts/test runs it); without it this test fails, never skips.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use gateway_models::stub::{Fault, StubServer};

const INSTALL: &str = "gateway/models/tests/peers/install";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn the_official_openai_sdk_reads_the_stub_chat_completions() {
    let root = repo_root();
    let python = root.join(".cache/venv-openai/bin/python");
    assert!(
        python.exists(),
        "the official openai Python package (openai==3.63.0) is not installed at {}; install it with: {INSTALL}",
        python.display()
    );
    let stub = StubServer::start().await;
    // The script's first request checks OpenAI's error shape with this.
    stub.push_fault(Fault::Status {
        status: 429,
        error_type: "rate_limit_exceeded".into(),
        retry_after_secs: None,
        retry_after_ms: None,
    });
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(root.join("gateway/models/tests/peers/chat_wire.py"))
        .arg(format!("{}/v1", stub.base_url()))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    // The stub is on loopback; no proxy or SDK setting from the environment may get between.
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "OPENAI_BASE_URL"]
    {
        command.env_remove(name);
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("chat_wire.py finishes within 2 minutes")
        .expect("run the venv's python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "chat_wire.py failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("chat wire valid for openai==3.63.0"), "{stdout}");

    let requests = stub.requests();
    assert_eq!(requests.len(), 8, "the 429, three completions, four streams");
    for request in &requests {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(request.header("authorization"), Some("Bearer x"));
    }
    // What the SDK sends, the stub parsed the way this crate's client sends it.
    assert_eq!(requests[3].body["messages"][2]["role"], "tool");
    assert_eq!(requests[4].body["stream_options"], serde_json::json!({"include_usage": true}));
}
