//! The HTTP envelope of `gateway_wire::jsonrpc`: what a body parses to, ids echoed as sent.

use gateway_wire::jsonrpc::{RpcError, code, envelope};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A body and what it parses to: `Ok((method, raw id))` or `Err((code, raw id answered))`.
type Case = (&'static str, Result<(&'static str, Option<&'static str>), (i64, &'static str)>);

#[test]
fn bodies_parse_or_are_refused_with_the_standard_codes() {
    let cases: [Case; 9] = [
        (r#"{"jsonrpc":"2.0","id":7,"method":"m"}"#, Ok(("m", Some("7")))),
        (r#"{"jsonrpc":"2.0","method":"m"}"#, Ok(("m", None))),
        (
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}"#,
            Ok(("m", Some("123456789012345678901234567890"))),
        ),
        (r#"{"jsonrpc":"2.0","id":null,"method":"m","x":[[[[]]]]}"#, Ok(("m", Some("null")))),
        ("{not json", Err((code::PARSE_ERROR, "null"))),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#, Err((code::INVALID_REQUEST, "null"))),
        (r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#, Err((code::INVALID_REQUEST, "null"))),
        (r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#, Err((code::INVALID_REQUEST, "null"))),
        (r#"{"jsonrpc":"1.0","id":"a","method":"m"}"#, Err((code::INVALID_REQUEST, r#""a""#))),
    ];
    for (body, want) in cases {
        let got = envelope::parse_request(body.as_bytes())
            .map(|r| (r.method, r.id.map(|i| i.get().to_owned())))
            .map_err(|e| (e.code, e.id.get().to_owned()));
        let want = want.map(|(m, i)| (m.to_owned(), i.map(str::to_owned))).map_err(|(c, i)| (c, i.to_owned()));
        assert_eq!(got, want, "{body}");
    }
}

#[test]
fn responses_read_back_as_result_error_or_not_a_response() {
    assert_eq!(envelope::read_response(&json!({"result": 1, "error": null})), Ok(json!(1)));
    assert_eq!(envelope::read_response(&json!({"error": null})), Err(envelope::Answer::NotAResponse));
    let e = envelope::read_response(&json!({"error": {"code": -32001, "message": "gone"}}));
    assert_eq!(e, Err(envelope::Answer::Error(RpcError::new(-32001, "gone"))));
    // Passed on by a bridge: the error as it was, or an internal error for no answer.
    assert_eq!(RpcError::from(envelope::Answer::Error(RpcError::new(-32001, "gone"))), RpcError::new(-32001, "gone"));
    assert_eq!(RpcError::from(envelope::Answer::NotAResponse).code, -32603);
}

proptest! {
    #[test]
    fn ids_are_echoed_byte_for_byte(digits in "-?[1-9][0-9]{0,40}", s in "\\PC{0,20}") {
        for id in [digits.clone(), serde_json::to_string(&s).unwrap()] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            let req = envelope::parse_request(body.as_bytes()).unwrap();
            let text = envelope::response::<RpcError>(req.id.unwrap(), Ok(&Value::Null));
            prop_assert_eq!(text, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":null}}"#));
        }
    }
}

/// A line as the symmetric peer reads it: what kind of message it is, or the refusal's code.
#[test]
fn messages_are_requests_notifications_or_responses() {
    let kind = |line: &str| match envelope::parse_message(line.as_bytes()) {
        Ok(envelope::Message::Request(r)) if r.id.is_some() => format!("request {}", r.method),
        Ok(envelope::Message::Request(r)) => format!("notification {}", r.method),
        Ok(envelope::Message::Response(r)) => format!("response {} {:?}", r.id.get(), r.answer()),
        Err(e) => format!("refused {} {}", e.code, e.id.get()),
    };
    let cases = [
        (r#"{"jsonrpc":"2.0","id":3,"method":"m"}"#, "request m"),
        (r#"{"jsonrpc":"2.0","method":"m","params":{}}"#, "notification m"),
        (r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#, "request m"),
        (r#"{"jsonrpc":"2.0","id":4,"result":null}"#, "response 4 Ok(Null)"),
        (r#"{"jsonrpc":"2.0","id":"x","result":1,"error":null}"#, r#"response "x" Ok(Number(1))"#),
        (
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32001,"message":"gone"}}"#,
            r#"response 5 Err(RpcError { code: -32001, message: "gone", data: None })"#,
        ),
        (r#"{"jsonrpc":"2.0","id":6,"error":null}"#, "refused -32600 6"),
        (r#"{"jsonrpc":"2.0","id":6}"#, "refused -32600 6"),
        (r#"{"id":7,"method":"m"}"#, "refused -32600 7"),
        (r#"{"jsonrpc":"2.0","id":8,"method":"m","method":"n"}"#, "refused -32600 null"),
        (r#"{"jsonrpc":"2.0","id":9,"result":1,"result":2}"#, "refused -32600 null"),
        (r#"{"jsonrpc":"2.0","id":10,"method":7}"#, "refused -32600 10"),
        (r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#, "refused -32600 null"),
        ("[]", "refused -32600 null"),
        ("{", "refused -32700 null"),
    ];
    for (line, want) in cases {
        assert_eq!(kind(line), want, "{line}");
    }
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(kind(&deep), "refused -32700 null", "nesting past serde's limit is not JSON, so not a batch");
    let long = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#, "m".repeat(envelope::MAX_METHOD_LEN + 1));
    assert_eq!(kind(&long), "refused -32600 1");
}
