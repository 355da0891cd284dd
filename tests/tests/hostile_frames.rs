#![allow(clippy::unwrap_used)]
//! F7: hostile frames against a real gateway, on HTTP (the Managed Agents API and A2A
//! JSON-RPC) and on ACP over stdio: bodies of 100 MB, endless chunked bodies, nesting 100,000
//! deep, invalid UTF-8, batches of 10,000, duplicate ids. Each must get the protocol's error
//! (never a 5xx, never a hang), the process must keep its memory, and it must serve the next
//! well-formed request. An id no 64-bit integer holds is echoed byte for byte.

use std::process::Stdio;
use std::time::Duration;

use gateway_tests::{Gateway, GatewayBuilder, rss_mib, workdir};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const TESTBED: &str = env!("CARGO_BIN_EXE_gateway-testbed");

/// Sends a request head, then `body_bytes` of body in 1 MiB pieces (chunked when `chunked`,
/// for ever as far as the server knows) while reading the answer; the status line and how
/// many body bytes were sent before the server answered.
async fn flood(g: &Gateway, path: &str, extra: &str, chunked: bool, body_bytes: usize) -> (String, usize) {
    let tcp = TcpStream::connect(("127.0.0.1", g.port)).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let length =
        if chunked { "transfer-encoding: chunked".to_owned() } else { format!("content-length: {body_bytes}") };
    let head =
        format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n{extra}{length}\r\n\r\n");
    write.write_all(head.as_bytes()).await.unwrap();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&sent);
    let sender = tokio::spawn(async move {
        let piece = vec![b'['; 1 << 20];
        while counted.load(std::sync::atomic::Ordering::Relaxed) < body_bytes {
            let ok = if chunked {
                write.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await.is_ok()
                    && write.write_all(&piece).await.is_ok()
                    && write.write_all(b"\r\n").await.is_ok()
            } else {
                write.write_all(&piece).await.is_ok()
            };
            if !ok {
                break;
            }
            counted.fetch_add(piece.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(got.is_ok(), "no answer to a flooding {path} within 20 s");
    sender.abort();
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    let text = String::from_utf8_lossy(&answer);
    (text.lines().next().unwrap_or_default().to_owned(), sent)
}

/// A JSON-RPC `POST` of raw bytes to the default agent's A2A endpoint: status and body.
async fn a2a_raw(http: &reqwest::Client, g: &Gateway, body: Vec<u8>) -> (u16, Value) {
    let r = http
        .post(g.url("/a2a/default"))
        .header("a2a-version", "1.0")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_http_bodies_get_protocol_errors_and_cost_no_memory() {
    let dir = workdir("hostile-http");
    let g = GatewayBuilder::new(TESTBED, "hostile-http").cwd(&dir).spawn();
    g.ready(Duration::from_secs(30)).await;
    let before = rss_mib(g.child.id());

    // 100 MB announced, and a chunked body that never ends: refused as soon as the limit
    // is passed, not read to the end.
    // Managed Agents answers 413; A2A JSON-RPC answers its -32600 in a 200 (compat/a2a.md).
    let code = |status: &str| status.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok()).unwrap_or(0);
    for (path, extra, want) in [("/v1/sessions", "", 413..414), ("/a2a/default", "a2a-version: 1.0\r\n", 200..201)] {
        let (status, sent) = flood(&g, path, extra, false, 100 << 20).await;
        assert!(want.contains(&code(&status)), "100 MB to {path}: {status}");
        assert!(sent < 100 << 20, "the server answered before reading 100 MB ({sent} sent)");
        let (status, sent) = flood(&g, path, extra, true, 256 << 20).await;
        assert!(want.contains(&code(&status)), "endless chunked body to {path}: {status}");
        assert!(sent < 256 << 20, "an endless body is cut off ({sent} bytes sent)");
    }

    let http = reqwest::Client::new();
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
    let batch = serde_json::to_vec(&vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
        10_000
    ])
    .unwrap();
    let mut bad_utf8 = br#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": ""#.to_vec();
    bad_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    bad_utf8.extend_from_slice(br#""}}"#);
    let mut nested_object = br#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": "#.to_vec();
    nested_object.extend(deep(100_000));
    nested_object.push(b'}');
    for (what, body) in [
        ("nesting 100,000 deep", deep(100_000)),
        ("nested params", nested_object),
        ("a batch of 10,000", batch),
        ("invalid UTF-8", bad_utf8),
    ] {
        let (status, body) = a2a_raw(&http, &g, body).await;
        assert!(status < 500, "{what}: HTTP {status}");
        let code = body["error"]["code"].as_i64();
        assert!(code.is_some_and(|c| c < 0), "{what}: a JSON-RPC error, got {body}");
    }
    let ma = http
        .post(g.url("/v1/sessions"))
        .header("content-type", "application/json")
        .body(deep(100_000))
        .send()
        .await
        .unwrap();
    assert_eq!(ma.status().as_u16(), 400, "Managed Agents, nesting 100,000 deep");
    let body: Value = ma.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");

    let after = rss_mib(g.child.id());
    assert!(after < before + 128, "memory grew from {before} MiB to {after} MiB");
    let healthy = http.get(g.url("/healthz")).send().await.unwrap();
    assert_eq!(healthy.status().as_u16(), 200, "the gateway still serves");
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gateway acp` on stdio, fed the same frames as lines: each gets its JSON-RPC error with
/// id `null` where none can be given, and the editor connection carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_acp_frames_get_json_rpc_errors_and_the_connection_carries_on() {
    let dir = workdir("hostile-acp");
    let mut child = tokio::process::Command::new(TESTBED)
        .arg("acp")
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .env("GATEWAY_DATABASE_URL", format!("sqlite://{}/gateway.db", dir.display()))
        .env("GATEWAY_DATA_DIR", dir.join("data").display().to_string())
        .env("GATEWAY_LOG__FORMAT", "json")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut raw_answer = async || -> String {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.expect("an answer").unwrap();
        line.expect("stdout open")
    };

    let batch = serde_json::to_vec(&vec![json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"}); 10_000]).unwrap();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();
    let mut bad_utf8 = b"{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"".to_vec();
    bad_utf8.extend_from_slice(&[0xff, 0xfe]);
    bad_utf8.extend_from_slice(b"\"}");
    let frames: [(&str, Vec<u8>, i64, Value); 4] = [
        ("a line of 100 MB", vec![b'x'; 100 << 20], -32700, Value::Null),
        ("nesting 100,000 deep", deep, -32700, Value::Null),
        ("a batch of 10,000", batch, -32600, Value::Null),
        ("a method name of invalid UTF-8", bad_utf8, -32601, json!(7)),
    ];
    let before = rss_mib(pid);
    for (what, mut frame, code, id) in frames {
        frame.push(b'\n');
        stdin.write_all(&frame).await.unwrap();
        let got: Value = serde_json::from_str(&raw_answer().await).unwrap();
        assert_eq!(got["error"]["code"].as_i64(), Some(code), "{what}: {got}");
        assert_eq!(got["id"], id, "{what}: {got}");
    }
    // An id no 64-bit integer holds comes back byte for byte (not rounded through f64).
    let huge = "123456789012345678901234567890123456789";
    let unknown = format!(r#"{{"jsonrpc": "2.0", "id": {huge}, "method": "no/such"}}"#);
    stdin.write_all(format!("{unknown}\n").as_bytes()).await.unwrap();
    let got = raw_answer().await;
    assert!(got.contains(&format!(r#""id":{huge}"#)), "{got}");
    // Two requests under one id (the client's mistake): each is answered, under that id.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    stdin.write_all(format!("{init}\n{init}\n").as_bytes()).await.unwrap();
    for _ in 0..2 {
        let got: Value = serde_json::from_str(&raw_answer().await).unwrap();
        assert_eq!(got["id"], 1, "{got}");
        assert!(got["result"]["protocolVersion"].is_number(), "the connection carries on: {got}");
    }
    let after = rss_mib(pid);
    assert!(after < before + 128, "memory grew from {before} MiB to {after} MiB");
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let _ = std::fs::remove_dir_all(&dir);
}
