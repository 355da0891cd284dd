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
