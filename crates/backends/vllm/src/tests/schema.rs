//! Schema errors: vLLM's `RequestValidationError` handler (`"type": "Bad Request"`, cleaned `loc`
//! as `param`, pydantic error dicts in the message) and FastAPI's body handling.

use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::json;

use super::support::{
    assert_schema, engine, json_headers, prepare, prepare_raw, render, with_sampling,
};

fn raw_error(body: &[u8], headers: &HeaderMap) -> serde_json::Value {
    let r = prepare_raw(body, headers, &engine()).expect_err("must fail");
    let (status, json) = render(&r.error);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    json
}

#[test]
fn content_type_must_be_application_json() {
    let expected = json!({"error": {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request", "param": null, "code": 400}});
    let body = br#"{"token_ids":[1],"sampling_params":{}}"#;
    let mut text = HeaderMap::new();
    text.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    assert_eq!(raw_error(body, &text), expected);
    // vLLM's check is not lenient: a missing header fails too.
    assert_eq!(raw_error(body, &HeaderMap::new()), expected);
    // Parameters after `;` are fine, and the media type is case-insensitive.
    let mut charset = HeaderMap::new();
    charset.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("Application/JSON; charset=utf-8"),
    );
    assert!(prepare_raw(body, &charset, &engine()).is_ok());
}

#[test]
fn malformed_json() {
    let json = raw_error(b"{\"token_ids\": [1,", &json_headers());
    assert_eq!(json["error"]["type"], "Bad Request");
    assert_eq!(json["error"]["param"], "body.17");
    assert_eq!(
        json["error"]["message"],
        "1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 17), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}"
    );
    // Malformed JSON fails first even with a wrong content type... only when FastAPI parses it.
    let json = raw_error(b"", &json_headers());
    assert_eq!(
        json["error"]["message"],
        "1 validation error:\n  {'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}"
    );
    assert_eq!(json["error"]["param"], "body");
    let json = raw_error(b"[1, 2]", &json_headers());
    assert!(
        json["error"]["message"]
            .as_str()
            .expect("msg")
            .contains("'model_attributes_type'")
    );
}

#[test]
fn missing_required_fields_are_all_reported() {
    let message = assert_schema(&json!({"model": "m"}), Some("body.token_ids"));
    assert_eq!(
        message,
        "2 validation errors:\n  {'type': 'missing', 'loc': ('body', 'token_ids'), 'msg': 'Field required', 'input': {'model': 'm'}}\n  {'type': 'missing', 'loc': ('body', 'sampling_params'), 'msg': 'Field required', 'input': {'model': 'm'}}"
    );
}

#[test]
fn wrong_types() {
    let message = assert_schema(
        &json!({"token_ids": "abc", "sampling_params": {}}),
        Some("body.token_ids"),
    );
    assert!(message.contains("'type': 'list_type'"), "{message}");
    let message = assert_schema(
        &json!({"token_ids": [1, "x"], "sampling_params": {}}),
        Some("body.token_ids.1"),
    );
    assert!(
        message.contains("'loc': ('body', 'token_ids', 1)"),
        "{message}"
    );
    assert!(
        message.contains("unable to parse string as an integer"),
        "{message}"
    );
    let message = assert_schema(
        &with_sampling(json!({"temperature": "hot"})),
        Some("body.sampling_params.temperature"),
    );
    assert!(message.contains("'type': 'float_parsing'"), "{message}");
    let message = assert_schema(
        &with_sampling(json!({"max_tokens": 1.5})),
        Some("body.sampling_params.max_tokens"),
    );
    assert!(message.contains("'type': 'int_from_float'"), "{message}");
    assert_schema(
        &with_sampling(json!({"stop": 5})),
        Some("body.sampling_params.stop"),
    );
    assert_schema(
        &json!({"token_ids": [1], "sampling_params": []}),
        Some("body.sampling_params"),
    );
    assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "priority": 9_223_372_036_854_775_808_u64}),
        Some("body.priority"),
    );
    assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "stream": "maybe"}),
        Some("body.stream"),
    );
    assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "request_id": 5}),
        Some("body.request_id"),
    );
    // pydantic's lax coercions are accepted.
    let p = prepare(&json!({"token_ids": ["7", 8.0, true], "sampling_params": {"n": "2", "ignore_eos": "yes", "max_tokens": 4.0}, "stream": 0}))
        .expect("lax");
    let r = &p.subs[0].request;
    assert_eq!(r.token_ids, vec![7, 8, 1]);
    assert_eq!(r.sampling.n, 2);
    assert!(r.stop.ignore_eos);
    assert_eq!(r.stop.max_tokens, Some(4));
}

#[test]
fn explicit_null_on_sampling_keys() {
    // Non-Optional fields of SamplingParams reject null like pydantic does...
    for (key, kind) in [
        ("n", "int_type"),
        ("temperature", "float_type"),
        ("top_k", "int_type"),
        ("ignore_eos", "bool_type"),
    ] {
        let message = assert_schema(
            &with_sampling(json!({key: null})),
            Some(&format!("body.sampling_params.{key}")),
        );
        assert!(message.contains(&format!("'type': '{kind}'")), "{message}");
        assert!(message.contains("'input': None"), "{message}");
    }
    // ...and Optional ones take null as their default.
    let p = prepare(&with_sampling(
        json!({"seed": null, "logprobs": null, "prompt_logprobs": null, "stop": null,
        "stop_token_ids": null, "logprob_token_ids": null, "bad_words": null}),
    ))
    .expect("nullable keys");
    let r = &p.subs[0].request;
    assert_eq!(r.sampling.seed, None);
    assert_eq!(r.output.logprobs, None);
    assert_eq!(r.output.prompt_logprobs, None);
    // Null top-level optional fields too.
    assert!(prepare(&json!({"token_ids": [1], "sampling_params": {}, "model": null, "stream": null, "features": null,
        "cache_salt": null, "kv_transfer_params": null, "stream_options": null})).is_ok());
}

#[test]
fn long_inputs_are_cut() {
    let ids: Vec<i64> = (0..50_000)
        .map(|i| if i == 49_999 { -1 } else { i % 900 })
        .collect();
    let message = assert_schema(
        &json!({"token_ids": ids, "sampling_params": {}}),
        Some("body.token_ids"),
    );
    assert!(message.len() < 1100, "{}", message.len());
}
