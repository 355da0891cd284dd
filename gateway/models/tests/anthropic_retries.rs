//! How the Anthropic client maps HTTP failures and when it retries them.

mod common;

use std::time::{Duration, Instant};

use gateway_models::anthropic::{AnthropicClient, Credential};
use gateway_models::conformance::{request, user};
use gateway_models::stub::{Fault, StubServer};
use gateway_models::{Block, ModelClient, ModelError};

fn rate_limited(retry_after_ms: Option<u64>) -> Fault {
    Fault::Status { status: 429, error_type: "rate_limit_error".into(), retry_after_secs: None, retry_after_ms }
}

/// A client for `stub` with its config adjusted by `tune`.
fn client(stub: &StubServer, tune: impl FnOnce(&mut gateway_models::anthropic::AnthropicConfig)) -> AnthropicClient {
    let mut config = common::config(stub, Credential::ApiKey(common::API_KEY.into()));
    tune(&mut config);
    AnthropicClient::new(config).expect("client for the stub")
}

fn gap(stub: &StubServer, from: usize) -> Duration {
    let requests = stub.requests();
    requests[from + 1].received_at - requests[from].received_at
}

#[tokio::test]
async fn a_429_waits_retry_after_ms_then_succeeds() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(rate_limited(Some(300)));
    let response = client.complete(&request(vec![user("patience")])).await.unwrap();
    assert_eq!(response.content, vec![Block::Text { text: "echo: patience".into() }]);
    assert_eq!(stub.requests().len(), 2);
    assert!(gap(&stub, 0) >= Duration::from_millis(300), "retried after {:?}", gap(&stub, 0));
}

#[tokio::test]
async fn a_529_is_retried_then_the_stream_succeeds_without_duplicates() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::status(529, "overloaded_error"));
    let request = request(vec![user("busy?")]);
    let (result, events) = common::stream(&client, &request).await;
    let response = result.unwrap();
    assert_eq!(stub.requests().len(), 2);
    let deltas = gateway_models::conformance::assert_events_spell_the_text(&events, &response);
    assert_eq!(deltas.len(), 1, "one text block, announced once: {events:?}");
}

#[tokio::test]
async fn exhausted_retries_return_the_last_typed_error() {
    let (client, stub) = common::stub_client().await; // max_retries: 2 (the default)
    type Check = fn(&ModelError) -> bool;
    let cases: [(Fault, Check); 3] = [
        (
            rate_limited(Some(20)),
            |e| matches!(e, ModelError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_millis(20)),
        ),
        (Fault::status(529, "overloaded_error"), |e| matches!(e, ModelError::Overloaded { status: 529, .. })),
        (Fault::status(503, "api_error"), |e| matches!(e, ModelError::Server { status: 503, .. })),
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
async fn client_errors_are_not_retried() {
    let (client, stub) = common::stub_client().await;
    let cases = [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
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
async fn retry_after_seconds_reach_the_caller() {
    let stub = StubServer::start().await;
    let client = client(&stub, |c| c.patience.max_retries = 0);
    stub.push_fault(Fault::Status {
        status: 529,
        error_type: "overloaded_error".into(),
        retry_after_secs: Some(7),
        retry_after_ms: None,
    });
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    assert!(matches!(error, ModelError::Overloaded { status: 529, .. }));
}

#[tokio::test]
async fn a_wait_longer_than_the_limit_is_left_to_the_caller() {
    let stub = StubServer::start().await;
    let client = client(&stub, |c| c.patience.max_retry_after = Duration::from_secs(1));
    stub.push_fault(Fault::Status {
        status: 429,
        error_type: "rate_limit_error".into(),
        retry_after_secs: Some(30),
        retry_after_ms: None,
    });
    let started = Instant::now();
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn the_server_can_veto_a_retry() {
    let (client, stub) = common::stub_client().await;
    let body = r#"{"type":"error","error":{"type":"api_error","message":"do not retry"}}"#;
    stub.push_fault(Fault::Raw {
        status: 500,
        headers: vec![("content-type".into(), "application/json".into()), ("x-should-retry".into(), "false".into())],
        body: body.into(),
    });
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert_eq!(error, ModelError::Server { status: 500, message: "do not retry".into(), retry_after: None });
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn an_unparseable_error_body_keeps_its_status_kind() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::Raw { status: 502, headers: vec![], body: "<html>bad gateway</html>".into() });
    let response = client.complete(&request(vec![user("x")])).await.unwrap();
    assert_eq!(stub.requests().len(), 2, "a 502 is transient");
    assert_eq!(response.content, vec![Block::Text { text: "echo: x".into() }]);

    stub.push_fault(Fault::Raw { status: 418, headers: vec![], body: "<html>teapot</html>".into() });
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert_eq!(error, ModelError::InvalidRequest { status: 418, message: "<html>teapot</html>".into() });
}

#[tokio::test]
async fn a_refused_connection_is_a_network_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let stub = StubServer::start().await; // only for the config's defaults
    let client = client(&stub, |c| c.base_url = format!("http://127.0.0.1:{port}"));
    let error = client.complete(&request(vec![user("x")])).await.unwrap_err();
    assert!(matches!(error, ModelError::Network(_)), "{error:?}");
    assert!(error.is_transient());
    let (result, events) = common::stream(&client, &request(vec![user("x")])).await;
    assert!(matches!(result, Err(ModelError::Network(_))), "{result:?}");
    assert!(events.is_empty());
}

#[tokio::test]
async fn a_slow_answer_times_out_and_is_retried() {
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

    stub.push_fault(Fault::Delay(Duration::from_secs(3)));
    stub.push_fault(Fault::Delay(Duration::from_secs(3)));
    let (result, _) = common::stream(&client, &request(vec![user("late")])).await;
    assert!(matches!(&result, Err(ModelError::Network(m)) if m.contains("no response within")), "{result:?}");
}

#[tokio::test]
async fn a_cut_json_body_is_retried() {
    let (client, stub) = common::stub_client().await;
    stub.push_fault(Fault::CutAfterEvents(0));
    let response = client.complete(&request(vec![user("whole")])).await.unwrap();
    assert_eq!(response.content, vec![Block::Text { text: "echo: whole".into() }]);
    assert_eq!(stub.requests().len(), 2);
}
