//! `anthropic-stub [PORT]`: the loopback stub of the Anthropic Messages API
//! (`gateway_models::stub::StubServer`, answering with the fake model's script) as a process,
//! for third-party agents under test (claude-agent-acp in `tests/compat/run-acp`). Prints
//! `listening http://127.0.0.1:PORT` on stdout once it accepts connections; stops on SIGTERM
//! or SIGINT, then prints `x-api-key <value>` for each distinct key the requests carried and
//! `model <id>` for each distinct model they asked for, in the order first seen (what tests of
//! credentials and of an editor's model choice read; `tests/compat/acp/editor_auth.py`). Test
//! support only.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use gateway_models::stub::StubServer;
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> ExitCode {
    let port: u16 = match std::env::args().nth(1).map(|p| p.parse()) {
        None => 0,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("anthropic-stub: bad port: {e}");
            return ExitCode::from(2);
        }
    };
    let stub = match StubServer::try_start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("anthropic-stub: cannot listen on port {port}: {e}");
            return ExitCode::from(1);
        }
    };
    // The one line a caller waits for (stdout is this test tool's interface).
    println!("listening {}", stub.base_url());
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return ExitCode::from(1);
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let recorded = stub.requests();
    let requests = recorded.len();
    let keys: std::collections::BTreeSet<&str> = recorded.iter().filter_map(|r| r.header("x-api-key")).collect();
    for key in keys {
        println!("x-api-key {key}");
    }
    let mut models: Vec<&str> = Vec::new();
    for model in recorded.iter().filter_map(|r| r.body.get("model").and_then(serde_json::Value::as_str)) {
        if !models.contains(&model) {
            models.push(model);
        }
    }
    for model in models {
        println!("model {model}");
    }
    stub.stop().await;
    eprintln!("anthropic-stub: stopped after {requests} requests");
    ExitCode::SUCCESS
}
