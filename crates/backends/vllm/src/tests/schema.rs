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
    // vLLM's check is not lenient: a missing header fails too, and as FastAPI (strict content
    // type) does not parse the body then, so does a body that is not JSON at all.
    assert_eq!(raw_error(body, &HeaderMap::new()), expected);
    assert_eq!(raw_error(b"{", &HeaderMap::new()), expected);
    assert_eq!(raw_error(b"\xff", &HeaderMap::new()), expected);
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
        "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.17', 'msg': 'JSON decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}"
    );
    // Malformed JSON fails first even with a wrong content type... only when FastAPI parses it.
    let json = raw_error(b"", &json_headers());
    assert_eq!(
        json["error"]["message"],
        "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': 'Field required', 'input': 'None'}"
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
        "2 validation errors:\n  {'type': 'missing', 'loc': 'body.token_ids', 'msg': 'Field required', 'input': '<dict of 1 items>'}\n  {'type': 'missing', 'loc': 'body.sampling_params', 'msg': 'Field required', 'input': '<dict of 1 items>'}"
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
    assert!(message.contains("'loc': 'body.token_ids.1'"), "{message}");
    assert!(
        message.contains("unable to parse string as an integer"),
        "{message}"
    );
    let message = assert_schema(
        &with_sampling(json!({"temperature": "hot"})),
        Some("body.sampling_params"),
    );
    assert!(message.contains("'type': 'float_parsing'"), "{message}");
    assert!(
        message.contains("'loc': 'body.sampling_params.temperature'"),
        "{message}"
    );
    let message = assert_schema(
        &with_sampling(json!({"max_tokens": 1.5})),
        Some("body.sampling_params"),
    );
    assert!(message.contains("'type': 'int_from_float'"), "{message}");
    assert!(
        message.contains("'loc': 'body.sampling_params.max_tokens'"),
        "{message}"
    );
    // `stop: str | list[str] | None`: one error per union branch, both cleaned to the field.
    let message = assert_schema(
        &with_sampling(json!({"stop": 5})),
        Some("body.sampling_params"),
    );
    assert!(message.starts_with("3 validation errors:"), "{message}");
    assert!(
        message.contains("'loc': 'body.sampling_params.stop'"),
        "{message}"
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
            Some("body.sampling_params"),
        );
        assert!(
            message.contains(&format!("'loc': 'body.sampling_params.{key}'")),
            "{message}"
        );
        assert!(message.contains(&format!("'type': '{kind}'")), "{message}");
        assert!(message.contains("'input': 'None'"), "{message}");
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

/// The `SamplingParams` keys genfront does not read are still typed as vLLM 0.33.0 types them
/// (`sampling_params.py:285-446`), and their errors come in declaration order.
#[test]
fn unread_sampling_keys_are_typed() {
    for (sp, loc, kind) in [
        (json!({"output_kind": 3}), "output_kind", "enum"),
        (json!({"output_kind": "1"}), "output_kind", "enum"),
        (json!({"output_kind": null}), "output_kind", "enum"),
        (json!({"watermarking": "x"}), "watermarking", "bool_parsing"),
        (json!({"skip_clone": null}), "skip_clone", "bool_type"),
        (
            json!({"output_text_buffer_length": 1.5}),
            "output_text_buffer_length",
            "int_from_float",
        ),
        (
            json!({"trace_decode_token_ids": [1, "a"]}),
            "trace_decode_token_ids.1",
            "int_parsing",
        ),
        (
            json!({"repetition_detection": 5}),
            "repetition_detection",
            "dataclass_type",
        ),
        (
            json!({"repetition_detection": {"min_count": "x"}}),
            "repetition_detection.min_count",
            "int_parsing",
        ),
    ] {
        let message = assert_schema(&with_sampling(sp.clone()), Some("body.sampling_params"));
        assert!(
            message.contains(&format!(
                "'type': '{kind}', 'loc': 'body.sampling_params.{loc}'"
            )),
            "{sp}: {message}"
        );
    }
    let message = assert_schema(
        &with_sampling(json!({"output_kind": 7})),
        Some("body.sampling_params"),
    );
    assert!(
        message.ends_with("{'type': 'enum', 'loc': 'body.sampling_params.output_kind', 'msg': 'Input should be 0, 1 or 2', 'input': '7', 'ctx': {'expected': '0, 1 or 2'}}"),
        "{message}"
    );
    for sp in [
        json!({"output_kind": 2, "watermarking": null, "skip_clone": true,
               "output_text_buffer_length": 3, "trace_decode_token_ids": null,
               "repetition_detection": {"max_pattern_size": 4, "min_pattern_size": 2, "min_count": 3}}),
        json!({"output_kind": 1.0}),
        json!({"output_kind": true}),
        json!({"repetition_detection": null}),
    ] {
        prepare(&with_sampling(sp.clone())).unwrap_or_else(|e| panic!("{sp}: {e:?}"));
    }
    // Declaration order, whatever order the body has.
    let message = assert_schema(
        &with_sampling(json!({"skip_clone": "x", "n": "x", "top_p": "x"})),
        Some("body.sampling_params"),
    );
    let at = |k: &str| message.find(&format!("'loc': 'body.sampling_params.{k}'"));
    assert!(
        at("n") < at("top_p") && at("top_p") < at("skip_clone"),
        "{message}"
    );
}

/// `RepetitionDetectionParams.__post_init__` raises `VLLMValidationError`, which pydantic does not
/// catch: a BadRequestError that wins over every schema error of the body.
#[test]
fn repetition_detection_rules() {
    for (rd, message) in [
        (
            json!({"max_pattern_size": -1}),
            crate::request::REPETITION_SIZES,
        ),
        (
            json!({"max_pattern_size": 2, "min_pattern_size": 3, "min_count": 2}),
            crate::request::REPETITION_SIZES,
        ),
        (
            json!({"max_pattern_size": 2}),
            crate::request::REPETITION_MIN_COUNT,
        ),
    ] {
        let body =
            json!({"token_ids": "bad", "sampling_params": {"n": "x", "repetition_detection": rd}});
        super::support::assert_bad_request(&body, message, None);
    }
}

/// vLLM 0.33.0's `_format_error` (`exception_handling/handlers/validation.py`): the location is
/// one joined string, the input a bounded summary, long errors are cut and more than ten are
/// counted, not listed.
#[test]
fn error_dicts_as_vllm_0_33_prints_them() {
    let message = assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "request_id": "x".repeat(300).len()}),
        Some("body.request_id"),
    );
    assert_eq!(
        message,
        "1 validation error:\n  {'type': 'string_type', 'loc': 'body.request_id', 'msg': 'Input should be a valid string', 'input': '300'}"
    );
    let message = assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "request_id": null, "model": "y".repeat(250).chars().map(|_| 1).collect::<Vec<u8>>()}),
        Some("body.request_id"),
    );
    assert!(
        message.contains("'input': '<list of 250 items>'"),
        "{message}"
    );
    let ids: Vec<&str> = vec!["a"; 12];
    let message = assert_schema(
        &json!({"token_ids": ids, "sampling_params": {}}),
        Some("body.token_ids.0"),
    );
    assert!(message.starts_with("12 validation errors:\n"), "{message}");
    assert!(message.ends_with("\n  ...and 2 more errors"), "{message}");
    assert_eq!(message.matches("'type': 'int_parsing'").count(), 10);
    let long = "z".repeat(300);
    let message = assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "stream": long}),
        Some("body.stream"),
    );
    assert!(
        message.contains(&format!("'input': '{}...[truncated]'", "z".repeat(200))),
        "{message}"
    );
}

/// The other typed top-level fields genfront does not read (`token_in_token_out/protocol.py`).
#[test]
fn unread_top_level_fields_are_typed() {
    for (extra, loc, kind) in [
        (json!({"token_offsets": 5}), "token_offsets", "list_type"),
        (
            json!({"token_offsets": ["ab"]}),
            "token_offsets.0",
            "tuple_type",
        ),
        (
            json!({"token_offsets": [[1]]}),
            "token_offsets.0.1",
            "missing",
        ),
        (
            json!({"token_offsets": [[1, 2, 3]]}),
            "token_offsets.0",
            "too_long",
        ),
        (
            json!({"token_offsets": [["a", 2]]}),
            "token_offsets.0.0",
            "int_parsing",
        ),
        (
            json!({"reasoning_parser_kwargs": 5}),
            "reasoning_parser_kwargs",
            "model_attributes_type",
        ),
        (
            json!({"reasoning_parser_kwargs": {"x": 1}}),
            "reasoning_parser_kwargs.x",
            "extra_forbidden",
        ),
        (
            json!({"parse_context": []}),
            "parse_context",
            "model_attributes_type",
        ),
        (
            json!({"stream_options": "x"}),
            "stream_options",
            "model_attributes_type",
        ),
        (
            json!({"parse_context": {"history_tool_call_cnt": -1}}),
            "parse_context.history_tool_call_cnt",
            "greater_than_equal",
        ),
        (
            json!({"parse_context": {"include_reasoning": null}}),
            "parse_context.include_reasoning",
            "bool_type",
        ),
    ] {
        let mut body = json!({"token_ids": [1], "sampling_params": {}});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let message = assert_schema(&body, Some(&format!("body.{loc}")));
        assert!(
            message.contains(&format!("'type': '{kind}', 'loc': 'body.{loc}'")),
            "{extra}: {message}"
        );
    }
    prepare(
        &json!({"token_ids": [1], "sampling_params": {}, "token_offsets": [[0, 1]],
        "reasoning_parser_kwargs": {"chat_template_kwargs": {}},
        "parse_context": {"future_field": 1, "history_tool_call_cnt": 2}}),
    )
    .expect("well-typed");
}

/// pydantic-core's lax `bool` (python mode): a number is read as an `i64` first, so `0.5`,
/// `inf` and anything past the `i64` range are `bool_type`, `2` / `2.0` are `bool_parsing`;
/// strings are not stripped.
#[test]
fn lax_bool_follows_pydantic_core() {
    use crate::schema::to_bool;
    for (v, want) in [
        (json!(1.0), Ok(true)),
        (json!(0), Ok(false)),
        (json!("Yes"), Ok(true)),
        (json!(2.0), Err("bool_parsing")),
        (json!(2), Err("bool_parsing")),
        (json!(" t "), Err("bool_parsing")),
        (json!(0.5), Err("bool_type")),
        (json!(9223372036854775808u64), Err("bool_type")),
        (json!(1e30), Err("bool_type")),
        (json!(null), Err("bool_type")),
    ] {
        assert_eq!(to_bool(&v).map_err(|e| e.0), want, "{v}");
    }
}

/// `prompt_logprob_token_ids` rows and `content_parts` items are typed per element, as vLLM
/// 0.33.0's pydantic bind reports them.
#[test]
fn nested_list_elements_are_typed() {
    let body = json!({"token_ids": [1, 2, 3],
        "sampling_params": {"prompt_logprob_token_ids": [[1], "a", [1.5]]}});
    let m = assert_schema(&body, Some("body.sampling_params"));
    assert!(
        m.contains("'type': 'list_type', 'loc': 'body.sampling_params.prompt_logprob_token_ids.1'")
            && m.contains(
                "'type': 'int_type', 'loc': 'body.sampling_params.prompt_logprob_token_ids.2.0'"
            ),
        "{m}"
    );
    let body =
        json!({"token_ids": [1], "sampling_params": {}, "content_parts": [1, {"type": "x"}, "a"]});
    let m = assert_schema(&body, Some("body.content_parts.0"));
    assert!(
        m.starts_with("2 validation errors:") && m.contains("'loc': 'body.content_parts.2'"),
        "{m}"
    );
}

/// A bad `stop` list fails both union members (`str` first, then the list's items); an
/// `output_kind` past `i64` is `int_parsing_size`, not the enum error; a JSON `null` body is
/// FastAPI's `missing` body.
#[test]
fn stop_union_output_kind_size_and_null_body() {
    let m = assert_schema(
        &json!({"token_ids": [1], "sampling_params": {"stop": [1]}}),
        Some("body.sampling_params"),
    );
    let str_branch =
        m.find("'loc': 'body.sampling_params.stop', 'msg': 'Input should be a valid string'");
    let item = m.find("'loc': 'body.sampling_params.stop.0'");
    assert!(
        str_branch.is_some() && item.is_some() && str_branch < item,
        "{m}"
    );
    let m = assert_schema(
        &json!({"token_ids": [1], "sampling_params": {"output_kind": 9223372036854775808u64}}),
        Some("body.sampling_params"),
    );
    assert!(
        m.contains("'type': 'int_parsing_size', 'loc': 'body.sampling_params.output_kind'")
            && !m.contains("'expected'"),
        "{m}"
    );
    let m = assert_schema(
        &json!({"token_ids": [1], "sampling_params": {"output_kind": 9223372036854775807i64}}),
        Some("body.sampling_params"),
    );
    assert!(m.contains("'type': 'enum'"), "{m}");
    let r = super::support::prepare_raw(
        b"null",
        &super::support::json_headers(),
        &super::support::engine(),
    )
    .expect_err("null body");
    assert!(
        r.error
            .public_message()
            .contains("{'type': 'missing', 'loc': 'body', 'msg': 'Field required'"),
        "{:?}",
        r.error
    );
}
