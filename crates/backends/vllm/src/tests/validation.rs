//! vLLM's semantic checks (spec §3.5, §3.6, §4.2, §9): one test per message.

use genfront_format::GenerateError;
use http::StatusCode;
use serde_json::json;

use super::support::{
    MODEL, assert_bad_request, engine, prepare, prepare_on, reject, render, with_sampling,
};
use crate::{GenerateFormat, VllmFormat};

#[test]
fn n_bounds() {
    assert_bad_request(
        &with_sampling(json!({"n": 0})),
        "n must be at least 1, got 0.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"n": 16385})),
        "n must be at most 16384, got 16385. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"n": 257})),
        "sampling_params.n must be at most the server's max_num_seqs (256), got 257.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"n": 2, "temperature": 0})),
        "n must be 1 when using greedy sampling, got 2.",
        None,
    );
    assert!(prepare(&with_sampling(json!({"n": 256, "max_tokens": 4}))).is_ok());
}

#[test]
fn structured_outputs_need_exactly_one_constraint() {
    assert_bad_request(
        &with_sampling(json!({"structured_outputs": {"disable_any_whitespace": true}})),
        "You must use one kind of structured outputs constraint but none are specified: {'json': None, 'regex': None, 'choice': None, 'grammar': None, 'json_object': None, 'disable_any_whitespace': True, 'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, '_backend': None, '_backend_was_auto': False}",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"structured_outputs": {"regex": "a+", "choice": ["a"]}})),
        "You can only use one kind of structured outputs constraint but multiple are specified: {'json': None, 'regex': 'a+', 'choice': ['a'], 'grammar': None, 'json_object': None, 'disable_any_whitespace': False, 'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, '_backend': None, '_backend_was_auto': False}",
        None,
    );
    let unknown = genfront_protocol::EngineInfo {
        tokenizer: None,
        ..engine()
    };
    assert!(
        prepare_on(
            &with_sampling(json!({"structured_outputs": {"choice": ["yes", "no"]}})),
            &unknown
        )
        .is_ok()
    );
    // The constraint error aborts validation (`StructuredOutputsParams.__post_init__` raises
    // while the field is built), ahead of a later field's type error.
    assert_bad_request(
        &with_sampling(json!({"trace_decode_token_ids": 20, "structured_outputs": {}})),
        "You must use one kind of structured outputs constraint but none are specified: {'json': None, 'regex': None, 'choice': None, 'grammar': None, 'json_object': None, 'disable_any_whitespace': False, 'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, '_backend': None, '_backend_was_auto': False}",
        None,
    );
}

/// `_validate_structured_outputs` (`sampling_params.py:1242-1245`): a well-formed constraint
/// needs the engine's tokenizer. Refused for a tokens-only engine after the other `verify()`
/// checks (an input-processor error: an SSE error event when streaming), forwarded to an engine
/// that loads a tokenizer or whose tokenizer is unknown.
#[test]
fn structured_outputs_need_a_tokenizer() {
    let message =
        "Structured outputs requires a tokenizer so it can't be used with 'skip_tokenizer_init'";
    assert_eq!(crate::STRUCTURED_OUTPUTS_NEED_TOKENIZER, message);
    for so in [
        json!({"regex": "a+"}),
        json!({"json": {"type": "object"}}),
        json!({"choice": ["a", "b"]}),
        json!({"grammar": "root ::= \"a\""}),
        json!({"json_object": true}),
        json!({"structural_tag": "{}"}),
    ] {
        let body = with_sampling(json!({"structured_outputs": so}));
        assert_bad_request(&body, message, None);
        for tokenizer in [None, Some(true)] {
            let e = genfront_protocol::EngineInfo {
                tokenizer,
                ..engine()
            };
            assert!(prepare_on(&body, &e).is_ok(), "{so} on {tokenizer:?}");
        }
    }
    // Streaming: the input processor's error, an SSE error event.
    let stream = json!({"token_ids": [1, 2, 3], "stream": true,
        "sampling_params": {"structured_outputs": {"regex": "a+"}}});
    let r = prepare(&stream).expect_err("no tokenizer");
    assert_eq!(r.error.public_message(), message);
    assert!(r.stream);
    // `verify()`'s order: the earlier checks answer first (allowed ids here), the constraint's
    // `__post_init__` refusals ahead of everything.
    assert_bad_request(
        &with_sampling(json!({"allowed_token_ids": [], "structured_outputs": {"regex": "a+"}})),
        "allowed_token_ids is not None and empty! (parameter=allowed_token_ids, value=[])",
        Some("allowed_token_ids"),
    );
    assert!(
        reject(&with_sampling(json!({"structured_outputs": {}})))
            .error
            .public_message()
            .starts_with("You must use one kind of structured outputs constraint")
    );
}

/// vLLM's input processor bounds `routed_experts_prompt_start` by the prompt
/// (`v1/engine/input_processor.py:455-462`).
#[test]
fn routed_experts_prompt_start_within_the_prompt() {
    for start in [-1, 4] {
        assert_bad_request(
            &with_sampling(json!({"routed_experts_prompt_start": start})),
            &format!(
                "routed_experts_prompt_start must be between 0 and the prompt length (3), inclusive. (parameter=routed_experts_prompt_start, value={start})"
            ),
            Some("routed_experts_prompt_start"),
        );
    }
}

#[test]
fn penalties() {
    assert_bad_request(
        &with_sampling(json!({"presence_penalty": 3})),
        "presence_penalty must be in [-2, 2], got 3.0.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"frequency_penalty": -2.5})),
        "frequency_penalty must be in [-2, 2], got -2.5.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"repetition_penalty": 0})),
        "repetition_penalty must be greater than zero, got 0.0.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"repetition_penalty": "inf"})),
        "repetition_penalty must be a finite number, got inf.",
        None,
    );
}

#[test]
fn temperature_top_p_top_k_min_p() {
    assert_bad_request(
        &with_sampling(json!({"temperature": 3})),
        "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)",
        Some("temperature"),
    );
    assert_bad_request(
        &with_sampling(json!({"temperature": -0.5})),
        "temperature must be non-negative, got -0.5. (parameter=temperature, value=-0.5)",
        Some("temperature"),
    );
    assert_bad_request(
        &with_sampling(json!({"temperature": "nan"})),
        "temperature must be a finite number, got nan. (parameter=temperature, value=nan)",
        Some("temperature"),
    );
    assert_bad_request(
        &with_sampling(json!({"top_p": 0})),
        "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)",
        Some("top_p"),
    );
    assert_bad_request(
        &with_sampling(json!({"top_k": -2})),
        "top_k must be 0 (disable), or at least 1, got -2.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"min_p": 1.5})),
        "min_p must be in [0, 1], got 1.5.",
        None,
    );
    // -1 is accepted as "disabled"; a tiny temperature is raised to 0.01.
    let p = prepare(&with_sampling(json!({"top_k": -1, "temperature": 0.001}))).expect("ok");
    let s = &p.subs[0].request.sampling;
    assert_eq!(s.top_k, Some(-1));
    assert_eq!(s.temperature, Some(0.01));
}

#[test]
fn greedy_forces_neutral_sampling() {
    let p = prepare(&with_sampling(
        json!({"temperature": 0, "top_p": 0.5, "top_k": 7, "min_p": 0.3}),
    ))
    .expect("ok");
    let s = &p.subs[0].request.sampling;
    assert!(s.is_greedy());
    assert_eq!((s.top_p, s.top_k, s.min_p), (Some(1.0), Some(0), Some(0.0)));
}

#[test]
fn max_and_min_tokens() {
    assert_bad_request(
        &with_sampling(json!({"max_tokens": 0})),
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        Some("max_tokens"),
    );
    assert_bad_request(
        &with_sampling(json!({"min_tokens": -1})),
        "min_tokens must be greater than or equal to 0, got -1.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"min_tokens": 10, "max_tokens": 5})),
        "min_tokens must be less than or equal to max_tokens=5, got 10.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"stream_interval": 0})),
        "stream_interval must be at least 1, got 0. (parameter=stream_interval, value=0)",
        Some("stream_interval"),
    );
    assert_bad_request(
        &with_sampling(json!({"thinking_token_budget": -2})),
        "`thinking_token_budget` must be a non-negative integer or -1 for unlimited. (parameter=thinking_token_budget, value=-2)",
        Some("thinking_token_budget"),
    );
}

/// vLLM 0.33.0 does not bound an explicit `max_tokens` by the context (the input processor only
/// fills an unset one, `v1/engine/input_processor.py:476-487`); the scheduler stops the request
/// at `max_model_len` with `finish_reason: "length"` (`v1/core/sched/utils.py:114-119`). The
/// engine request carries the room left. Past `prompt_len + max_tokens = 2**31 - 1` (the V2
/// runner's int32 `max_seq_len`) genfront refuses it: the engine would crash.
#[test]
fn max_tokens_boundary_at_context_length() {
    let ok = prepare(&with_sampling(json!({"max_tokens": 1021}))).expect("1021 fits");
    assert_eq!(ok.subs[0].request.stop.max_tokens, Some(1021));
    for m in [1022, 5000, 2_147_483_644] {
        let p = prepare(&with_sampling(json!({"max_tokens": m}))).expect("past the context");
        assert_eq!(p.subs[0].request.stop.max_tokens, Some(1021), "{m}");
    }
    assert_bad_request(
        &with_sampling(json!({"max_tokens": 2_147_483_645})),
        "The decoder prompt (length 3) plus the number of requested output tokens (2147483645) is longer than the maximum model length of 1024. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens).",
        None,
    );
    // `min_tokens` is checked against the explicit value, not the room.
    assert!(
        prepare(&with_sampling(
            json!({"max_tokens": 5000, "min_tokens": 4000})
        ))
        .is_ok()
    );
}

#[test]
fn unbounded_max_tokens_are_rejected_not_crashing() {
    for raw in [
        "2147483647",
        "2147483648",
        "9223372036854775808",
        "1e18",
        "18446744073709551616",
        "1e300",
    ] {
        let body = format!(
            r#"{{"token_ids":[1,2,3],"sampling_params":{{"max_tokens":{raw},"temperature":0.0}}}}"#
        );
        let r = super::support::prepare_raw(
            body.as_bytes(),
            &super::support::json_headers(),
            &engine(),
        )
        .expect_err(raw);
        assert_eq!(r.error.status(), StatusCode::BAD_REQUEST, "{raw}");
        assert!(!r.stream);
    }
}

#[test]
fn omitted_max_tokens_is_the_remaining_context() {
    let p = prepare(&with_sampling(json!({}))).expect("ok");
    assert_eq!(p.subs[0].request.stop.max_tokens, Some(1024 - 3));
    // Explicit null means "no limit", which is also the remaining context.
    let p = prepare(&with_sampling(json!({"max_tokens": null}))).expect("ok");
    assert_eq!(p.subs[0].request.stop.max_tokens, Some(1024 - 3));
}

#[test]
fn prompt_that_fills_the_context() {
    let mut small = engine();
    small.max_context_len = 3;
    let body = with_sampling(json!({}));
    let r = prepare_on(&body, &small).expect_err("no room");
    assert_eq!(
        r.error.public_message(),
        "The decoder prompt (length 3) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 3. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens)."
    );
    small.max_context_len = 2;
    // Without `max_tokens`, `serve_tokens` computes the default first (`get_max_tokens`,
    // `entrypoints/serve/utils/api_utils.py:246-250`), a plain 400 even for a stream.
    let r = prepare_on(&body, &small).expect_err("too long");
    assert_eq!(
        r.error.public_message(),
        "Input length (3) exceeds model's maximum context length (2)."
    );
    assert!(!r.stream);
    // With one, the input processor's prompt-length check answers.
    let r = prepare_on(&with_sampling(json!({"max_tokens": 1})), &small).expect_err("too long");
    assert_eq!(
        r.error.public_message(),
        "The decoder prompt (length 3) is longer than the maximum model length of 2. Make sure that `max_model_len` is no smaller than the number of text tokens."
    );
    small.max_context_len = 3;
    let r = prepare_on(&with_sampling(json!({"max_tokens": 100})), &small).expect_err("full");
    assert_eq!(
        r.error.public_message(),
        "The decoder prompt (length 3) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 3. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens)."
    );
}

#[test]
fn logprobs_limits() {
    assert_bad_request(
        &with_sampling(json!({"logprobs": -2})),
        "logprobs must be non-negative or -1, got -2. (parameter=logprobs, value=-2)",
        Some("logprobs"),
    );
    assert_bad_request(
        &with_sampling(json!({"prompt_logprobs": -3})),
        "prompt_logprobs must be non-negative or -1, got -3. (parameter=prompt_logprobs, value=-3)",
        Some("prompt_logprobs"),
    );
    assert_bad_request(
        &with_sampling(json!({"logprobs": 21})),
        "Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)",
        Some("logprobs"),
    );
    // -1 means the whole vocabulary, which exceeds --max-logprobs unless that covers it.
    assert_bad_request(
        &with_sampling(json!({"logprobs": -1})),
        "Requested sample logprobs of 1000, which is greater than max allowed: 20 (parameter=logprobs, value=1000)",
        Some("logprobs"),
    );
    assert_bad_request(
        &with_sampling(json!({"prompt_logprobs": 21})),
        "Requested prompt logprobs of 21, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=21)",
        Some("prompt_logprobs"),
    );
    let mut wide = engine();
    wide.max_logprobs = Some(1000);
    let p = prepare_on(
        &with_sampling(json!({"logprobs": -1, "prompt_logprobs": -1})),
        &wide,
    )
    .expect("ok");
    let out = &p.subs[0].request.output;
    assert_eq!(out.logprobs, Some(1000));
    assert_eq!(out.prompt_logprobs.as_ref().map(|p| p.top_k), Some(1000));
    // 0 = the sampled token only.
    let p = prepare(&with_sampling(json!({"logprobs": 0}))).expect("ok");
    assert_eq!(p.subs[0].request.output.logprobs, Some(0));
}

#[test]
fn logprob_token_ids_rules() {
    let many: Vec<u32> = (0..129).collect();
    assert_bad_request(
        &with_sampling(json!({"logprob_token_ids": many})),
        "Requested logprob_token_ids of length 129, which is greater than max allowed: 128 (parameter=logprob_token_ids, value=129)",
        Some("logprob_token_ids"),
    );
    assert_bad_request(
        &with_sampling(json!({"logprob_token_ids": [5, 1000, 1001]})),
        "token_id(s) [1000, 1001] in logprob_token_ids contain out-of-vocab token ids. Vocabulary size: 1000 (parameter=logprob_token_ids, value=[1000, 1001])",
        Some("logprob_token_ids"),
    );
    assert_bad_request(
        &with_sampling(json!({"logprob_token_ids": [5, 6], "logprobs": 3})),
        "When both logprobs and logprob_token_ids are set, logprobs must equal len(logprob_token_ids). Got logprobs=3, len(logprob_token_ids)=2. (parameter=logprob_token_ids, value=2)",
        Some("logprob_token_ids"),
    );
    // vLLM reports the listed ids, not a top k (`num_logprobs`, `sampling_params.py:888-895`):
    // the engine request asks for no top logprobs, so 128 listed ids pass the
    // `--max-top-logprobs` cap as they pass vLLM's `max_logprobs`.
    let p = prepare(&with_sampling(json!({"logprob_token_ids": [5, 6]}))).expect("ok");
    let out = &p.subs[0].request.output;
    assert_eq!(out.logprobs, Some(0));
    assert_eq!(out.token_ids_logprobs, vec![5, 6]);
    let many: Vec<u32> = (0..128).collect();
    let p = prepare(&with_sampling(json!({"logprob_token_ids": many}))).expect("128 ids");
    assert_eq!(p.subs[0].request.output.logprobs, Some(0));
}

#[test]
fn out_of_vocab_sampling_ids() {
    assert_bad_request(
        &with_sampling(json!({"logit_bias": {"7": 1.0, "4000": -1.0}})),
        "token_id(s) [4000] in logit_bias contain out-of-vocab token ids. Vocabulary size: 1000 (parameter=logit_bias, value=[4000])",
        Some("logit_bias"),
    );
    assert_bad_request(
        &with_sampling(json!({"stop_token_ids": [2, 1000]})),
        "token_id(s) [1000] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: 1000 (parameter=stop_token_ids, value=[1000])",
        Some("stop_token_ids"),
    );
    assert_bad_request(
        &with_sampling(json!({"allowed_token_ids": []})),
        "allowed_token_ids is not None and empty! (parameter=allowed_token_ids, value=[])",
        Some("allowed_token_ids"),
    );
    assert_bad_request(
        &with_sampling(json!({"allowed_token_ids": [1, 5000]})),
        "allowed_token_ids contains out-of-vocab token id! (parameter=allowed_token_ids, value=[5000])",
        Some("allowed_token_ids"),
    );
}

#[test]
fn stop_strings() {
    assert_bad_request(
        &with_sampling(json!({"stop": ""})),
        "stop cannot contain an empty string.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"stop": ["27 member"], "detokenize": false})),
        "stop strings are only supported when detokenize is True. Set detokenize=True to use stop.",
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"stop": ["done"]})),
        crate::validate::STOP_ON_TOKENS_ONLY,
        None,
    );
    assert_bad_request(
        &with_sampling(json!({"bad_words": ["x", ""]})),
        "bad_words cannot contain an empty string. Got bad_words=['x', '']",
        None,
    );
    // An empty list or null is no stop string at all.
    assert!(prepare(&with_sampling(json!({"stop": []}))).is_ok());
    assert!(prepare(&with_sampling(json!({"stop": null}))).is_ok());
    // Stop token ids are deduplicated.
    let p = prepare(&with_sampling(json!({"stop_token_ids": [9, 4, 9]}))).expect("ok");
    assert_eq!(p.subs[0].request.stop.stop_token_ids, vec![9, 4]);
}

/// vLLM 0.33.0's Python route admits `stream_options` without `stream` and `prompt_logprobs`
/// with `stream: true` (its Rust frontend refuses both); it refuses `prompt_logprob_token_ids`
/// with `stream: true` (`token_in_token_out/serving.py:217-221`).
#[test]
fn stream_only_options() {
    let body =
        json!({"token_ids": [1], "sampling_params": {}, "stream_options": {"include_usage": true}});
    assert!(prepare(&body).is_ok());
    let body =
        json!({"token_ids": [11, 22], "stream": true, "sampling_params": {"prompt_logprobs": 0}});
    assert!(prepare(&body).is_ok());
    let body = json!({"token_ids": [1], "stream": true, "sampling_params": {"prompt_logprob_token_ids": [[1]]}});
    assert_bad_request(
        &body,
        "prompt_logprob_token_ids are not available when stream=true.",
        None,
    );
}

#[test]
fn prompt_token_ids() {
    assert_bad_request(
        &json!({"token_ids": [1, 5000, 1200], "sampling_params": {}}),
        "Token id 5000 is out of vocabulary",
        None,
    );
    let message = super::support::assert_schema(
        &json!({"token_ids": [1, -5], "sampling_params": {}}),
        Some("body.token_ids"),
    );
    assert_eq!(
        message,
        "1 validation error:\n  {'type': 'value_error', 'loc': 'body.token_ids', 'msg': 'Value error, token_ids must not contain negative values', 'input': '<list of 2 items>', 'ctx': {'error': ValueError('token_ids must not contain negative values')}}"
    );
    let message = super::support::assert_schema(
        &json!({"token_ids": [], "sampling_params": {}}),
        Some("body.token_ids"),
    );
    assert_eq!(
        message,
        "1 validation error:\n  {'type': 'too_short', 'loc': 'body.token_ids', 'msg': 'List should have at least 1 item after validation, not 0', 'input': '<list of 0 items>', 'ctx': {'field_type': 'List', 'min_length': 1, 'actual_length': 0}}"
    );
}

#[test]
fn cache_salt_rules() {
    // `validate_cache_salt` raises `VLLMValidationError(parameter="cache_salt")`, which aborts
    // pydantic validation (`generate/base/protocol.py:42-58`): a BadRequestError, ahead of any
    // schema error elsewhere in the body. The Python literal prints two backslashes.
    let non_empty =
        "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)";
    let shape = "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL. (parameter=cache_salt)";
    for (salt, expected) in [
        (json!(""), non_empty),
        (json!(5), non_empty),
        (json!("Qwen/Qwen3-8B@7"), shape),
        (json!("a\\b"), shape),
        (json!("x".repeat(129)), shape),
    ] {
        let body = json!({"token_ids": [1], "sampling_params": {}, "cache_salt": salt});
        assert_bad_request(&body, expected, Some("cache_salt"));
        let body = json!({"token_ids": "bad", "sampling_params": {"n": "x"}, "cache_salt": salt});
        assert_bad_request(&body, expected, Some("cache_salt"));
    }
    let p =
        prepare(&json!({"token_ids": [1], "sampling_params": {}, "cache_salt": "x".repeat(128)}))
            .expect("ok");
    assert_eq!(
        p.subs[0].request.routing.cache_salt.as_deref(),
        Some("x".repeat(128).as_str())
    );
}

/// Found by the fuzz harness (`tests/fuzz.rs`): a placeholder length near `i128::MAX` (pydantic
/// takes an integral float such as `1.45e127` as an int) overflowed `offset + length`, a panic
/// in builds with overflow checks. Both checks that add them refuse it like vLLM does.
#[test]
fn huge_placeholder_lengths_are_refused_without_overflow() {
    let features = |ranges: serde_json::Value, hashes: usize| {
        json!({"token_ids": [1, 2, 3, 4], "sampling_params": {}, "features": {
            "mm_hashes": {"image": vec!["h"; hashes]}, "mm_placeholders": {"image": ranges}}})
    };
    // A float past the `i64` range is no int (pydantic-core `float_as_int`).
    let message = super::support::assert_schema(
        &features(json!([{"offset": 1, "length": 1.4507303363161613e127}]), 1),
        Some("body.features.mm_placeholders.image.0.length"),
    );
    assert!(message.contains("'type': 'int_parsing_size'"), "{message}");
    for length in [json!(u64::MAX), json!(u64::MAX - 1)] {
        // Two ranges: the first ends past the second's offset.
        let body = features(
            json!([{"offset": 1, "length": length}, {"offset": 2, "length": 1}]),
            2,
        );
        let message = super::support::assert_schema(&body, Some("body.features"));
        assert!(
            message.contains("mm_placeholders must be globally non-overlapping and sorted"),
            "{message}"
        );
        // One range: it ends past the prompt.
        let rejection = reject(&features(json!([{"offset": 1, "length": length}]), 1));
        let (status, body) = render(&rejection.error);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body.to_string()
                .contains("mm_placeholders must remain within the token_ids sequence"),
            "{body}"
        );
    }
}

#[test]
fn features_consistency() {
    let base = |features: serde_json::Value| json!({"token_ids": [1, 2, 3, 4], "sampling_params": {}, "features": features});
    let cases = [
        (
            json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"audio": [{"offset": 0, "length": 1}]}}),
            "mm_hashes and mm_placeholders must use the same modalities",
        ),
        (
            json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": 0, "length": 1}]}, "kwargs_data": {"audio": [null]}}),
            "kwargs_data must use the same modalities as mm_hashes",
        ),
        (
            json!({"mm_hashes": {"image": ["a", "b"]}, "mm_placeholders": {"image": [{"offset": 0, "length": 1}]}}),
            "image mm_hashes and mm_placeholders must have the same length",
        ),
        (
            json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": 0, "length": 1}]}, "mm_metadata": {"image": [null, null]}}),
            "image mm_metadata and mm_hashes must have the same length",
        ),
        (
            json!({"mm_hashes": {"image": ["a", "b"]}, "mm_placeholders": {"image": [{"offset": 0, "length": 2}, {"offset": 1, "length": 2}]}}),
            "mm_placeholders must be globally non-overlapping and sorted",
        ),
    ];
    for (features, expected) in cases {
        let message = super::support::assert_schema(&base(features), Some("body.features"));
        assert!(
            message.contains(&format!("'msg': 'Value error, {expected}'")),
            "{message}"
        );
    }
    let model_level = [
        (
            json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": 3, "length": 2}]}}),
            "mm_placeholders must remain within the token_ids sequence",
        ),
        (
            json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": 0, "length": 1}]}, "mm_metadata": {"image": ["meta"]}}),
            crate::validate::METADATA_NEEDS_EC,
        ),
    ];
    for (features, expected) in model_level {
        let message = super::support::assert_schema(&base(features), Some("body"));
        assert!(
            message.contains(&format!("'msg': 'Value error, {expected}'")),
            "{message}"
        );
    }
    let message = super::support::assert_schema(
        &base(
            json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": -1, "length": 0}]}}),
        ),
        Some("body.features.mm_placeholders.image.0.offset"),
    );
    assert!(message.starts_with("2 validation errors:"), "{message}");
    // Metadata-only items are fine with ec_transfer_params, and items with kwargs need nothing.
    let mut ok = base(
        json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": 1, "length": 2}]}, "mm_metadata": {"image": ["meta"]}}),
    );
    ok["ec_transfer_params"] = json!({"peer": 1});
    assert!(prepare(&ok).is_ok());
    let ok = base(
        json!({"mm_hashes": {"image": ["a"]}, "mm_placeholders": {"image": [{"offset": 1, "length": 2}]}, "kwargs_data": {"image": ["k"]}, "mm_metadata": {"image": ["meta"]}}),
    );
    assert!(prepare(&ok).is_ok());
    let message = super::support::assert_schema(
        &json!({"token_ids": [1, 2], "sampling_params": {}, "content_parts": [{"type": "image_url", "url": "u"}],
                "features": {"mm_hashes": {}, "mm_placeholders": {}}}),
        Some("body"),
    );
    assert!(
        message.contains("content_parts and features are mutually exclusive"),
        "{message}"
    );
}

#[test]
fn output_mode_needs_a_tokenizer() {
    assert_bad_request(
        &json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 32}, "output_mode": "text"}),
        "output_mode='text' requires a tokenizer, but this server does not load one (--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a tokenizer, or use output_mode='tokens'.",
        None,
    );
    let message = super::support::assert_schema(
        &json!({"token_ids": [1], "sampling_params": {"detokenize": false}, "output_mode": "text"}),
        Some("body"),
    );
    assert!(
        message.contains("output_mode='text' requires sampling_params.detokenize to be true"),
        "{message}"
    );
    // `derender` is a member of vLLM 0.33.0's `OutputMode` (`protocol.py:49`): on a tokens-only
    // server it meets the tokenizer check like `text`.
    assert_bad_request(
        &json!({"token_ids": [1], "sampling_params": {}, "output_mode": "derender"}),
        "output_mode='derender' requires a tokenizer, but this server does not load one (--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a tokenizer, or use output_mode='tokens'.",
        None,
    );
    let message = super::support::assert_schema(
        &json!({"token_ids": [1], "sampling_params": {}, "output_mode": "json"}),
        Some("body.output_mode"),
    );
    assert!(
        message.ends_with(r#"{'type': 'literal_error', 'loc': 'body.output_mode', 'msg': "Input should be 'tokens', 'text' or 'derender'", 'input': 'json', 'ctx': {'expected': "'tokens', 'text' or 'derender'"}}"#),
        "{message}"
    );
}

#[test]
fn ints_beyond_64_bits() {
    let body = br#"{"token_ids":[1],"sampling_params":{"seed":18446744073709551616}}"#;
    let r = super::support::prepare_raw(body, &super::support::json_headers(), &engine())
        .expect_err("overflow");
    assert_eq!(
        r.error,
        GenerateError::Validation {
            message: "can't serialize ints < -2**63 or > 2**64 - 1".to_owned(),
            param: None,
        }
    );
    let body =
        br#"{"token_ids":[1],"sampling_params":{"extra_args":{"x":[-9223372036854785809]}}}"#;
    assert!(super::support::prepare_raw(body, &super::support::json_headers(), &engine()).is_err());
    let body = br#"{"token_ids":[1],"sampling_params":{},"kv_transfer_params":{"room":99999999999999999999}}"#;
    assert!(super::support::prepare_raw(body, &super::support::json_headers(), &engine()).is_err());
    // The largest u64 and 63-bit values are exact and accepted.
    let body = br#"{"token_ids":[1],"sampling_params":{"seed":18446744073709551615,"extra_args":{"room":9223372036854775807}}}"#;
    let p = super::support::prepare_raw(body, &super::support::json_headers(), &engine())
        .expect("fits");
    assert_eq!(p.subs[0].request.sampling.seed, Some(u64::MAX));
    assert_eq!(
        p.subs[0].request.native.body["sampling_params"]["extra_args"]["room"],
        json!(9_223_372_036_854_775_807_i64)
    );
    // seed -1 means "no seed".
    let p = prepare(&with_sampling(json!({"seed": -1}))).expect("ok");
    assert_eq!(p.subs[0].request.sampling.seed, None);
}

#[test]
fn unknown_model_is_404() {
    let body = json!({"model": "other", "token_ids": [1], "sampling_params": {}});
    let r = reject(&body);
    let (status, json) = render(&r.error);
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        json,
        json!({"error": {"message": "The model `other` does not exist. Valid aliases: test-model.", "type": "NotFoundError", "param": "model", "code": 404}})
    );
    let p = prepare(&json!({"model": MODEL, "token_ids": [1], "sampling_params": {}}))
        .expect("base model");
    assert_eq!(p.subs[0].request.routing.lora, None);
}

#[test]
fn lora_adapters_are_models() {
    let format = VllmFormat::new().with_lora_adapters(["sql-lora"]);
    let body = serde_json::to_vec(
        &json!({"model": "sql-lora", "token_ids": [1], "sampling_params": {"max_tokens": 1}}),
    )
    .expect("json");
    let headers = super::support::json_headers();
    let info = engine();
    let p = format
        .prepare(genfront_format::ParseInput {
            headers: &headers,
            body: &body,
            engine: &info,
        })
        .expect("lora");
    assert_eq!(p.subs[0].request.routing.lora.as_deref(), Some("sql-lora"));
    let out = super::support::run_unary(
        p,
        vec![genfront_protocol::EngineOutput {
            finish_reason: super::support::length(1),
            ..super::support::delta(0, &[5])
        }],
    );
    assert_eq!(out["model"], "sql-lora");
}

#[test]
fn engine_side_errors_stream_inside_a_200() {
    let body = json!({"token_ids": [1], "stream": true, "sampling_params": {"logprobs": 50}});
    let r = reject(&body);
    assert!(r.stream);
    let resp = VllmFormat::new().error_response(&r.error, r.stream);
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.content_type, "text/event-stream");
    let text = std::str::from_utf8(&resp.body).expect("utf8");
    assert!(
        text.starts_with("data: {\"error\":{\"message\":\"Requested sample logprobs of 50"),
        "{text}"
    );
    assert!(text.ends_with("\n\ndata: [DONE]\n\n"), "{text}");
    // Pre-engine errors stay plain 400s even for streaming requests.
    let r = reject(&json!({"token_ids": [1], "stream": true, "sampling_params": {"n": 0}}));
    assert!(!r.stream);
    // Dispatch failures are never rendered as SSE.
    let resp = VllmFormat::new().error_response(&GenerateError::NoEngine { role: None }, true);
    assert_eq!(resp.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.content_type, "application/json");
}

/// `_verify_extra_args` (`sampling_params.py:749-767`) names `extra_args` for an integer past
/// msgpack's 64-bit range, before the penalties are checked.
#[test]
fn extra_args_integers_fit_64_bits() {
    // An integer literal past 64 bits (kept exact, `wide.rs`) is refused before the penalty;
    // a float literal of the same size is not an integer.
    let raw = |extra: &str| {
        let body = format!(
            r#"{{"token_ids":[1,2,3],"sampling_params":{{"extra_args":{{"k":[{extra}]}},"presence_penalty":3}}}}"#
        );
        super::support::prepare_raw(body.as_bytes(), &super::support::json_headers(), &engine())
            .expect_err(extra)
            .error
            .public_message()
            .into_owned()
    };
    assert_eq!(
        raw("18446744073709551616"),
        "extra_args integers must be between -2**63 and 2**64 - 1. (parameter=extra_args)"
    );
    assert_eq!(
        raw("-9223372036854775809"),
        "extra_args integers must be between -2**63 and 2**64 - 1. (parameter=extra_args)"
    );
    assert_eq!(
        raw("18446744073709551616.0"),
        "presence_penalty must be in [-2, 2], got 3.0."
    );
    assert!(
        prepare(&with_sampling(
            json!({"extra_args": {"k": 18446744073709551615u64}})
        ))
        .is_ok()
    );
}

// === vLLM 0.33.0 parity rules (issue 12; the module docs of `validate.rs` cite each) ===

/// A raw body against [`engine`], its rejection's public message (or `None` when accepted).
fn raw_message(body: &str) -> Option<String> {
    super::support::prepare_raw(body.as_bytes(), &super::support::json_headers(), &engine())
        .err()
        .map(|r| r.error.public_message().into_owned())
}

/// `prompt_logprob_start` needs `prompt_logprob_token_ids` and is non-negative with them; the
/// ids are a non-empty `[rows, ids]` array within the context, `max_logprobs` and the
/// vocabulary (-1 pads), and the rows match the prompt (`sampling_params.py:983-1048`,
/// `v1/engine/input_processor.py:464-475`).
#[test]
fn prompt_logprob_token_ids_rules() {
    let bad = |sp: serde_json::Value, message: &str, param: &str| {
        assert_bad_request(&with_sampling(sp), message, Some(param));
    };
    bad(
        json!({"prompt_logprob_start": 0}),
        "prompt_logprob_start requires prompt_logprob_token_ids. (parameter=prompt_logprob_start, value=0)",
        "prompt_logprob_start",
    );
    bad(
        json!({"prompt_logprob_start": -1, "prompt_logprob_token_ids": [[1], [2]]}),
        "prompt_logprob_start must be non-negative. (parameter=prompt_logprob_start, value=-1)",
        "prompt_logprob_start",
    );
    for empty in [json!([]), json!([[]])] {
        bad(
            json!({"prompt_logprob_token_ids": empty}),
            "prompt_logprob_token_ids must be a non-empty integer array of shape [num_rows, num_ids]. (parameter=prompt_logprob_token_ids, value=list)",
            "prompt_logprob_token_ids",
        );
    }
    let wide: Vec<u32> = (0..21).collect();
    bad(
        json!({"prompt_logprob_token_ids": [wide, [1]]}),
        "Requested 21 token ids per row in prompt_logprob_token_ids, which is greater than max allowed: 20. Set max_logprobs (--max-logprobs) to at least 21. (parameter=prompt_logprob_token_ids, value=21)",
        "prompt_logprob_token_ids",
    );
    bad(
        json!({"prompt_logprob_token_ids": [[1000], [5, 6]]}),
        "prompt_logprob_token_ids contain out-of-vocab token ids (-1 pads a row). Vocabulary size: 1000 (parameter=prompt_logprob_token_ids, value=[-1, 1000])",
        "prompt_logprob_token_ids",
    );
    bad(
        json!({"prompt_logprob_token_ids": [[1]]}),
        "prompt_logprob_token_ids has 1 rows, but the prompt has 2 scored rows (prompt_len - 1 - prompt_logprob_start). (parameter=prompt_logprob_token_ids, value=1)",
        "prompt_logprob_token_ids",
    );
    assert!(
        prepare(&with_sampling(
            json!({"prompt_logprob_token_ids": [[1], [2, 3]]})
        ))
        .is_ok()
    );
    assert!(
        prepare(&with_sampling(
            json!({"prompt_logprob_token_ids": [[1]], "prompt_logprob_start": 1})
        ))
        .is_ok()
    );
}

/// The server-flag gates apply only where the flag is known (`EngineInfo::features`):
/// `thinking_token_budget` without a reasoning config, a non-empty `trace_decode_token_ids`
/// without `--enable-trace-replay` (`v1/engine/input_processor.py:203-220`); `-1` is no budget
/// (`validate_thinking_token_budget`, `sampling_params.py:65-85`).
#[test]
fn server_flag_gates_follow_known_features() {
    let mut off = engine();
    off.features = genfront_protocol::EngineFeatures::mock();
    let budget = with_sampling(json!({"thinking_token_budget": 10}));
    let r = prepare_on(&budget, &off).expect_err("no reasoning config");
    assert_eq!(
        r.error.public_message(),
        crate::validate::THINKING_BUDGET_NEEDS_REASONING
    );
    assert!(prepare(&budget).is_ok(), "unknown: left to the engine");
    assert!(prepare_on(&with_sampling(json!({"thinking_token_budget": -1})), &off).is_ok());
    assert!(prepare_on(&with_sampling(json!({"thinking_token_budget": "-1"})), &off).is_ok());
    let mut on = off.clone();
    on.features.reasoning = Some(true);
    assert!(prepare_on(&budget, &on).is_ok());

    let trace = with_sampling(json!({"trace_decode_token_ids": [1, 2]}));
    let mut stream = trace.clone();
    stream["stream"] = json!(true);
    let r = prepare_on(&stream, &off).expect_err("no trace replay");
    assert_eq!(
        r.error.public_message(),
        crate::validate::TRACE_REPLAY_NOT_ENABLED
    );
    assert!(r.stream, "the input processor's error: an SSE error event");
    assert!(prepare(&trace).is_ok(), "unknown: left to the engine");
}

/// `_validate_trace_replay`'s plain `ValueError`s are 500s from vLLM 0.33.0; genfront answers
/// 400 with the same text (a deliberate deviation).
#[test]
fn trace_replay_value_errors_are_400s() {
    for (sp, message) in [
        (
            json!({"trace_decode_token_ids": []}),
            "trace_decode_token_ids must be a non-empty list.",
        ),
        (
            json!({"trace_decode_token_ids": [-1]}),
            "trace_decode_token_ids must contain non-negative integers.",
        ),
        (
            json!({"trace_decode_token_ids": [1], "n": 2}),
            "trace_decode_token_ids requires n=1.",
        ),
        (
            json!({"trace_decode_token_ids": [1], "bad_words": ["x"]}),
            "trace_decode_token_ids is not supported with bad_words.",
        ),
    ] {
        assert_bad_request(&with_sampling(sp), message, None);
    }
}

/// Integers keep full precision: a literal past 64 bits is a Python int (exact in messages,
/// refused by the msgpack round trip), a float literal past `i64` is no int
/// (`int_parsing_size`), and unknown or private sampling keys never reach msgpack.
#[test]
fn integers_past_64_bits_keep_their_digits() {
    const BASE: &str = r#"{"token_ids":[1,2,3],"sampling_params":{"#;
    let sp = |inner: &str| raw_message(&format!("{BASE}{inner}}}}}"));
    let overflow = Some("can't serialize ints < -2**63 or > 2**64 - 1".to_owned());
    assert_eq!(sp(r#""seed":-9223372036854775809"#), overflow);
    assert_eq!(
        sp(r#""output_text_buffer_length":-9223372036854775809"#),
        overflow
    );
    assert_eq!(sp(r#""seed":-9223372036854775808"#), None);
    assert_eq!(
        sp(r#""prompt_logprobs":-9223372036854775809"#).as_deref(),
        Some(
            "prompt_logprobs must be non-negative or -1, got -9223372036854775809. (parameter=prompt_logprobs, value=-9223372036854775809)"
        )
    );
    let size = sp(r#""n":1e30"#).expect("refused");
    assert!(size.contains("'type': 'int_parsing_size'"), "{size}");
    assert!(size.contains("'input': '1e+30'"), "{size}");
    assert_eq!(
        sp(r#""n":1000000000000000000000000000000"#).as_deref(),
        Some(
            "n must be at most 16384, got 1000000000000000000000000000000. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable."
        )
    );
    for unknown in [
        r#""future_sampling_field":18446744073709551616"#,
        r#""_all_stop_token_ids":1e30"#,
    ] {
        assert_eq!(sp(unknown), None, "{unknown}");
    }
    let top = |field: &str| {
        raw_message(&format!(
            r#"{{"token_ids":[1,2,3],"sampling_params":{{}},{field}}}"#
        ))
    };
    assert_eq!(
        top(r#""kv_transfer_params":{"x":[-9223372036854775809]}"#),
        overflow
    );
    assert_eq!(top(r#""kv_transfer_params":{"x":[1e30]}"#), None);
    let priority = top(r#""priority":-9223372036854775809"#).expect("refused");
    assert!(
        priority.contains("'input': '-9223372036854775809'"),
        "{priority}"
    );
    // `output_kind`: an int literal past `i64` is `int_parsing_size`, a float literal `enum`.
    let kind = sp(r#""output_kind":1e30"#).expect("refused");
    assert!(kind.contains("'type': 'enum'"), "{kind}");
    let kind = sp(r#""output_kind":100000000000000000000"#).expect("refused");
    assert!(kind.contains("'type': 'int_parsing_size'"), "{kind}");
}

/// `routed_experts_prompt_start: int = 0` is not nullable; a UTF-8 BOM is skipped as
/// `json.loads` skips it on bytes.
#[test]
fn small_schema_rules() {
    let null = super::support::assert_schema(
        &with_sampling(json!({"routed_experts_prompt_start": null})),
        Some("body.sampling_params"),
    );
    assert!(
        null.contains(
            "'type': 'int_type', 'loc': 'body.sampling_params.routed_experts_prompt_start'"
        ),
        "{null}"
    );
    assert_eq!(
        raw_message("\u{feff}{\"token_ids\": [1, 2, 3], \"sampling_params\": {}}"),
        None
    );
}
