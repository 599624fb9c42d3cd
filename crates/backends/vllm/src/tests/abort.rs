//! `POST /inference/v1/abort_requests`.

use genfront_format::{AbortSelector, GenerateError};
use serde_json::json;

use super::support::render;
use crate::{ABORT_PATH, GenerateFormat, VllmFormat, parse_abort};

#[test]
fn route_and_ids() {
    let route = VllmFormat::new().abort_route().expect("abort route");
    assert_eq!(route.path, ABORT_PATH);
    assert_eq!(
        (route.parse)(br#"{"request_ids": ["generate-tokens-42", "generate-tokens-7"]}"#),
        Ok(AbortSelector::Exact(vec![
            "generate-tokens-42".to_owned(),
            "generate-tokens-7".to_owned()
        ]))
    );
    assert_eq!(
        parse_abort(br#"{"request_ids": "generate-tokens-1"}"#),
        Ok(AbortSelector::Exact(vec!["generate-tokens-1".to_owned()]))
    );
    assert_eq!(
        parse_abort(br#"{"request_ids": []}"#),
        Ok(AbortSelector::Exact(vec![]))
    );
}

#[test]
fn errors_use_the_http_exception_shape() {
    let missing = parse_abort(br#"{"ids": ["x"]}"#).expect_err("missing");
    assert_eq!(
        render(&missing).1,
        json!({"error": {"message": "Missing 'request_ids' in request body", "type": "Bad Request", "param": null, "code": 400}})
    );
    assert!(matches!(
        parse_abort(br#"{"request_ids": null}"#),
        Err(GenerateError::Schema { .. })
    ));
    let bad = parse_abort(b"not json").expect_err("bad json");
    assert_eq!(
        render(&bad).1,
        json!({"error": {"message": "JSON decode error: Expecting value: line 1 column 1 (char 0)", "type": "Bad Request", "param": null, "code": 400}})
    );
    let empty = parse_abort(b"").expect_err("empty");
    assert_eq!(
        render(&empty).1["error"]["message"],
        "JSON decode error: Expecting value: line 1 column 1 (char 0)"
    );
}
