//! The JSON-RPC peer over in-memory lines: what the other side sees on the wire.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use gateway_wire::jsonrpc::framing::Inbound;
use gateway_wire::jsonrpc::{Frame, Handler, MAX_IN_FLIGHT, Peer, PeerOptions, Reply, RpcError};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Echoes `echo`, calls the other side back for `ask` (while its own request is open),
/// records notifications.
struct Test {
    notes: mpsc::UnboundedSender<(String, Value)>,
}

impl Handler for Test {
    fn request(&self, peer: &Peer, method: &str, params: Value) -> Reply {
        let peer = peer.clone();
        match method {
            "echo" => Box::pin(async move { Ok(params) }),
            "ask" => Box::pin(async move {
                let answer = peer.request("question", json!({"q": 1})).await?;
                Ok(json!({"they_said": answer}))
            }),
            "fail" => Box::pin(async { Err(RpcError::invalid_params("bad")) }),
            // Asks for a notification behind its answer, after a pause that a notification
            // sent at once would have overtaken.
            "then" => Box::pin(async move {
                assert!(gateway_wire::jsonrpc::notify_after_answer("made", json!({"of": params["n"]})));
                tokio::time::sleep(Duration::from_millis(20)).await;
                if params["fail"] == true {
                    return Err(RpcError::invalid_params("refused"));
                }
                Ok(json!({"n": params["n"]}))
            }),
            "hang" => Box::pin(std::future::pending()),
            other => {
                let e = RpcError::method_not_found(other);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn notification(&self, _peer: &Peer, method: &str, params: Value) {
        let _ = self.notes.send((method.to_owned(), params));
    }
}

struct Wire {
    to_peer: mpsc::Sender<Inbound>,
    from_peer: mpsc::Receiver<Frame>,
    peer: Peer,
    notes: mpsc::UnboundedReceiver<(String, Value)>,
}

impl Wire {
    fn new(options: PeerOptions) -> Self {
        let (to_peer, incoming) = mpsc::channel(16);
        let (tx, notes) = mpsc::unbounded_channel();
        let (peer, from_peer, _task) = Peer::start("test", incoming, Arc::new(Test { notes: tx }), options);
        Self { to_peer, from_peer, peer, notes }
    }

    async fn send(&self, line: &str) {
        self.to_peer.send(Inbound::Line(line.to_owned())).await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let frame = tokio::time::timeout(Duration::from_secs(5), self.from_peer.recv()).await.unwrap().unwrap();
        let line = frame.text();
        assert!(!line.contains('\n'), "a frame is one line: {line}");
        serde_json::from_str(line).unwrap()
    }
}

#[tokio::test]
async fn malformed_lines_are_parse_errors_and_the_connection_stays_up() {
    let mut w = Wire::new(PeerOptions::default());
    w.send("{not json").await;
    let e = w.recv().await;
    assert_eq!(e["error"]["code"], -32700);
    assert_eq!(e["id"], Value::Null);
    w.to_peer.send(Inbound::TooLong(99_999_999)).await.unwrap();
    assert_eq!(w.recv().await["error"]["code"], -32700);
    w.send(r#"[{"jsonrpc":"2.0","id":1,"method":"echo"}]"#).await;
    assert_eq!(w.recv().await["error"]["code"], -32600, "batches are refused");
    w.send(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"echo"}"#).await;
    assert_eq!(w.recv().await["error"]["code"], -32600, "an object id is not valid");
    // The envelope's rules are the HTTP bindings' (one reader): a member given twice, or no
    // `"jsonrpc": "2.0"`, is not a message.
    w.send(r#"{"jsonrpc":"2.0","id":5,"method":"echo","method":"fail"}"#).await;
    assert_eq!(w.recv().await["error"]["code"], -32600, "a member given twice is refused");
    w.send(r#"{"id":6,"method":"echo"}"#).await;
    let e = w.recv().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(6), json!(-32600)));
    w.send(r#"{"jsonrpc":"2.0","id":1e400,"method":"echo","params":1}"#).await;
    let frame = tokio::time::timeout(Duration::from_secs(5), w.from_peer.recv()).await.unwrap().unwrap();
    assert_eq!(frame.text(), r#"{"jsonrpc":"2.0","id":1e400,"result":1}"#, "the id goes back as it came");
    w.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":{"a":1}}"#).await;
    assert_eq!(w.recv().await, json!({"jsonrpc": "2.0", "id": 7, "result": {"a": 1}}));
}

#[tokio::test]
async fn unknown_methods_and_handler_errors_answer_their_request_only() {
    let mut w = Wire::new(PeerOptions::default());
    w.send(r#"{"jsonrpc":"2.0","id":"a","method":"nope"}"#).await;
    let e = w.recv().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!("a"), json!(-32601)));
    w.send(r#"{"jsonrpc":"2.0","id":2,"method":"fail"}"#).await;
    assert_eq!(w.recv().await["error"]["code"], -32602);
    // Unknown notifications and $/cancel_request are tolerated silently.
    w.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":2}}"#).await;
    w.send(r#"{"jsonrpc":"2.0","method":"_vendor/thing","params":{}}"#).await;
    assert_eq!(w.notes.recv().await.unwrap().0, "_vendor/thing");
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":[]}"#).await;
    assert_eq!(w.recv().await["id"], 3);
}

#[tokio::test]
async fn a_handler_may_call_the_other_side_without_blocking_the_read_loop() {
    let mut w = Wire::new(PeerOptions::default());
    w.send(r#"{"jsonrpc":"2.0","id":1,"method":"ask"}"#).await;
    let question = w.recv().await;
    assert_eq!(question["method"], "question");
    // While "ask" waits for our answer, other requests are still served.
    w.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":"meanwhile"}"#).await;
    assert_eq!(w.recv().await["result"], "meanwhile");
    let reply = json!({"jsonrpc": "2.0", "id": question["id"], "result": 42});
    w.send(&reply.to_string()).await;
    assert_eq!(w.recv().await, json!({"jsonrpc": "2.0", "id": 1, "result": {"they_said": 42}}));
}

#[tokio::test]
async fn responses_match_requests_by_id_and_errors_come_back_typed() {
    let mut w = Wire::new(PeerOptions::default());
    let peer = w.peer.clone();
    let first = tokio::spawn({
        let p = peer.clone();
        async move { p.request("one", json!({})).await }
    });
    let second = tokio::spawn(async move { peer.request("two", json!({})).await });
    let a = w.recv().await;
    let b = w.recv().await;
    let (one, two) = if a["method"] == "one" { (a, b) } else { (b, a) };
    // Answer out of order.
    w.send(&json!({"jsonrpc": "2.0", "id": two["id"], "error": {"code": -32002, "message": "gone"}}).to_string()).await;
    w.send(&json!({"jsonrpc": "2.0", "id": one["id"], "result": "first"}).to_string()).await;
    assert_eq!(first.await.unwrap().unwrap(), json!("first"));
    let e = second.await.unwrap().unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (-32002, "gone"));
    // A response to nothing is dropped, not answered.
    w.send(r#"{"jsonrpc":"2.0","id":999,"result":1}"#).await;
    w.send(r#"{"jsonrpc":"2.0","id":5,"method":"echo","params":1}"#).await;
    assert_eq!(w.recv().await["id"], 5);
}

#[tokio::test]
async fn outstanding_requests_fail_when_the_connection_closes() {
    let w = Wire::new(PeerOptions::default());
    let peer = w.peer.clone();
    let pending = tokio::spawn(async move { peer.request("never", json!({})).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(w.to_peer); // EOF
    let e = tokio::time::timeout(Duration::from_secs(5), pending).await.unwrap().unwrap().unwrap_err();
    assert!(e.message.contains("closed"), "{e:?}");
    assert!(w.peer.is_closed());
    assert!(!w.peer.notify("late", json!({})).await);
}

#[tokio::test]
async fn lenient_connections_skip_noise_lines() {
    let mut w = Wire::new(PeerOptions { lenient: true, ..PeerOptions::default() });
    w.send("Starting agent v1.2 ...").await;
    w.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"x"}"#).await;
    assert_eq!(w.recv().await, json!({"jsonrpc": "2.0", "id": 1, "result": "x"}), "no parse error was sent");
}

#[tokio::test]
async fn a_dropped_request_forgets_its_id() {
    let mut w = Wire::new(PeerOptions::default());
    let peer = w.peer.clone();
    let asking = tokio::spawn(async move { peer.request("slow", json!({})).await });
    let sent = w.recv().await;
    assert_eq!(w.peer.outstanding(), 1);
    asking.abort();
    let _ = asking.await;
    assert_eq!(w.peer.outstanding(), 0, "the caller stopped waiting: its entry is gone");
    // Its late answer is dropped, and the connection goes on.
    w.send(&json!({"jsonrpc": "2.0", "id": sent["id"], "result": 1}).to_string()).await;
    w.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":"on"}"#).await;
    assert_eq!(w.recv().await["result"], "on");
}

#[tokio::test]
async fn requests_beyond_the_in_flight_limit_are_refused_at_once() {
    let mut w = Wire::new(PeerOptions::default());
    for i in 0..MAX_IN_FLIGHT {
        w.send(&json!({"jsonrpc": "2.0", "id": i, "method": "hang"}).to_string()).await;
    }
    w.send(r#"{"jsonrpc":"2.0","id":"over","method":"echo","params":1}"#).await;
    let e = w.recv().await;
    assert_eq!(e["id"], "over");
    assert_eq!(e["error"]["code"], -32603);
    assert!(e["error"]["message"].as_str().unwrap().contains("too many requests"), "{e}");
    // The read loop itself never waited: notifications and responses still get through.
    w.send(r#"{"jsonrpc":"2.0","method":"note","params":{}}"#).await;
    assert_eq!(w.notes.recv().await.unwrap().0, "note");
}

#[tokio::test]
async fn the_outgoing_queue_is_bounded_and_try_notify_never_waits() {
    let mut w = Wire::new(PeerOptions::default());
    // Nobody writes the frames out: the queue fills, then try_notify refuses at once.
    let mut queued = 0;
    while w.peer.try_notify("n", json!({"i": queued})) {
        queued += 1;
        assert!(queued < 100_000, "the queue is unbounded");
    }
    assert!(queued >= 16, "{queued}");
    let waiting = tokio::time::timeout(Duration::from_millis(100), w.peer.notify("n", json!({}))).await;
    assert!(waiting.is_err(), "notify waits for room");
    // Room again once a frame is written.
    assert_eq!(w.recv().await["params"]["i"], 0);
    assert!(w.peer.try_notify("n", json!({})));
}

#[tokio::test]
async fn notifications_asked_by_an_answer_follow_it_and_only_a_result() {
    let mut w = Wire::new(PeerOptions::default());
    assert!(!gateway_wire::jsonrpc::notify_after_answer("x", json!({})), "outside an answer nothing is queued");
    w.send(r#"{"jsonrpc":"2.0","id":1,"method":"then","params":{"n":1}}"#).await;
    let answer = w.recv().await;
    assert_eq!((answer["id"].clone(), answer["result"]["n"].clone()), (json!(1), json!(1)), "{answer}");
    let note = w.recv().await;
    assert_eq!((note["method"].as_str(), note["params"]["of"].clone(), note.get("id")), (Some("made"), json!(1), None));
    // An error answer takes its notifications with it.
    w.send(r#"{"jsonrpc":"2.0","id":2,"method":"then","params":{"n":2,"fail":true}}"#).await;
    assert_eq!(w.recv().await["error"]["code"], -32602);
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":{"k":3}}"#).await;
    assert_eq!(w.recv().await["id"], 3, "nothing was sent between the error and the next answer");
}
