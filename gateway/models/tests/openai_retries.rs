//! How the OpenAI client maps HTTP failures (OpenAI's error body) and when it retries them.

mod common;

use std::time::{Duration, Instant};

use gateway_models::conformance::{request, user};
use gateway_models::openai::{OpenAiClient, OpenAiConfig};
use gateway_models::stub::{Fault, StubServer};
use gateway_models::{Block, ModelClient, ModelError};

fn rate_limited(retry_after_secs: Option<u64>, retry_after_ms: Option<u64>) -> Fault {
    Fault::Status { status: 429, error_type: "rate_limit_exceeded".into(), retry_after_secs, retry_after_ms }
}

/// A client for `stub` with its config adjusted by `tune`.
fn client(stub: &StubServer, tune: impl FnOnce(&mut OpenAiConfig)) -> OpenAiClient {
    let mut config = common::openai_config(stub, Some(common::OPENAI_KEY));
    tune(&mut config);
    OpenAiClient::new(config).expect("client for the stub")
}

fn gap(stub: &StubServer, from: usize) -> Duration {
    let requests = stub.requests();
    requests[from + 1].received_at - requests[from].received_at
}

#[tokio::test]
async fn a_429_waits_retry_after_then_succeeds() {
    let stub = StubServer::start().await;
    let client = client(&stub, |c| c.patience.max_retry_after = Duration::from_secs(2));
    stub.push_fault(rate_limited(Some(1), None));
    let response = client.complete(&request(vec![user("patience")])).await.unwrap();
    assert_eq!(response.content, vec![Block::Text { text: "echo: patience".into() }]);
    assert_eq!(stub.requests().len(), 2);
    assert!(gap(&stub, 0) >= Duration::from_secs(1), "retried after {:?}", gap(&stub, 0));

    // retry-after-ms wins over retry-after; a stream is retried the same way before any text.
    stub.push_fault(rate_limited(Some(30), Some(300)));
    let (result, events) = common::stream(&client, &request(vec![user("patience")])).await;
    let response = result.unwrap();
    assert_eq!(stub.requests().len(), 4);
    assert!(gap(&stub, 2) >= Duration::from_millis(300), "retried after {:?}", gap(&stub, 2));
    let deltas = gateway_models::conformance::assert_events_spell_the_text(&events, &response);
    assert_eq!(deltas.len(), 1, "one text block, announced once: {events:?}");
}

#[tokio::test]
async fn exhausted_retries_return_the_last_typed_error() {
    let (client, stub) = common::openai_client().await; // max_retries: 2 (the default)
    type Check = fn(&ModelError) -> bool;
    let cases: [(Fault, Check); 3] = [
        (rate_limited(None, Some(20)), |e| {
            matches!(e, ModelError::RateLimited { retry_after: Some(d), message } if *d == Duration::from_millis(20)
                && message == "stub fault: rate_limit_exceeded")
        }),
        (Fault::status(500, "server_error"), |e| matches!(e, ModelError::Server { status: 500, .. })),
        (Fault::status(503, "service_unavailable"), |e| matches!(e, ModelError::Server { status: 503, .. })),
    ];
    let mut seen = 0;
    for (fault, expected) in cases {
        for _ in 0..3 {
            stub.push_fault(fault.clone());
        }
        let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
        assert!(expected(&error), "{fault:?} gave {error:?}");
        assert!(error.is_transient());
        seen += 3;
        assert_eq!(stub.requests().len(), seen, "1 attempt + 2 retries for {fault:?}");
    }
}

#[tokio::test]
async fn client_errors_and_an_exhausted_quota_are_not_retried() {
    let (client, stub) = common::openai_client().await;
    let cases = [
        (400, "invalid_request_error"),
        (401, "invalid_request_error"),
        (403, "permission_error"),
        (404, "invalid_request_error"),
        (422, "invalid_request_error"),
        (429, "insufficient_quota"),
    ];
    for (n, (status, error_type)) in cases.into_iter().enumerate() {
        stub.push_fault(Fault::status(status, error_type));
        let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
        let message = format!("stub fault: {error_type}");
        let expected = match status {
            401 | 403 => ModelError::Authentication { status, message },
            _ => ModelError::InvalidRequest { status, message },
        };
        assert_eq!(error, expected);
        assert!(!error.is_transient());
        assert_eq!(stub.requests().len(), n + 1, "{status} must not be retried");
    }
}

#[tokio::test]
async fn a_wait_longer_than_the_limit_is_left_to_the_caller() {
    let stub = StubServer::start().await;
    let client = client(&stub, |c| c.patience.max_retry_after = Duration::from_secs(1));
    stub.push_fault(rate_limited(Some(30), None));
    let started = Instant::now();
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn the_server_can_veto_a_retry_and_unparseable_bodies_keep_their_status() {
    let (client, stub) = common::openai_client().await;
    let body = r#"{"error":{"message":"do not retry","type":"server_error","param":null,"code":null}}"#;
    stub.push_fault(Fault::Raw {
        status: 500,
        headers: vec![("content-type".into(), "application/json".into()), ("x-should-retry".into(), "false".into())],
        body: body.into(),
    });
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert_eq!(error, ModelError::Server { status: 500, message: "do not retry".into(), retry_after: None });
    assert_eq!(stub.requests().len(), 1);

    stub.push_fault(Fault::Raw { status: 502, headers: vec![], body: "<html>bad gateway</html>".into() });
    let response = client.complete(&request(vec![user("x")])).await.unwrap();
    assert_eq!(stub.requests().len(), 3, "a 502 is transient");
    assert_eq!(response.content, vec![Block::Text { text: "echo: x".into() }]);
}

#[tokio::test]
async fn a_refused_connection_is_a_network_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let stub = StubServer::start().await; // only for the config's defaults
    let client = client(&stub, |c| c.base_url = format!("http://127.0.0.1:{port}/v1"));
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert!(matches!(error, ModelError::Network(_)), "{error:?}");
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::Network(_))), "{result:?}");
    assert!(events.is_empty());
}

#[tokio::test]
async fn a_slow_answer_times_out_and_is_retried_and_a_cut_body_too() {
    let stub = StubServer::start().await;
    let client = client(&stub, |c| {
        c.patience.request_timeout = Duration::from_millis(300);
        c.patience.max_retries = 1;
    });
    stub.push_fault(Fault::Delay(Duration::from_secs(3)));
    let started = Instant::now();
    let response = client.complete(&request(vec![user("late")])).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(response.content, vec![Block::Text { text: "echo: late".into() }]);
    assert_eq!(stub.requests().len(), 2);

    stub.push_fault(Fault::CutAfterEvents(0));
    let response = client.complete(&request(vec![user("whole")])).await.unwrap();
    assert_eq!(response.content, vec![Block::Text { text: "echo: whole".into() }]);
    assert_eq!(stub.requests().len(), 4);
}
