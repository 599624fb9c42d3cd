//! Validation parity with SGLang 0.5.23 (`lib.rs`, "Validation parity"): the rules the
//! validation-oracle tool found and the engine's source settles, each pinned here with the
//! engine's file and line (the tool does not run in CI).

use genfront_format::{CONTENT_TYPE_JSON, GenerateFormat, Prepared, Rejection};
use genfront_protocol::{EngineFeatures, EngineInfo};
use http::{HeaderMap, StatusCode};

use crate::support::*;

fn prepare_on(body: &str, info: &EngineInfo) -> Result<Prepared, Rejection> {
    prepare_with(body, &HeaderMap::new(), info, false)
}

/// The `{"error":{"message"}}` 400 of `body` on `info`.
fn refusal_on(body: &str, info: &EngineInfo) -> String {
    let r = match prepare_on(body, info) {
        Ok(p) => panic!("unexpectedly accepted {body}: {:?}", p.subs.len()),
        Err(r) => r,
    };
    let answer = format(false).error_response(&r.error, r.stream);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(answer.content_type, CONTENT_TYPE_JSON, "{body}");
    let v = json_of(&answer.body);
    v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}: {v}"))
        .to_owned()
}

fn accepted_on(body: &str, info: &EngineInfo) -> Prepared {
    prepare_on(body, info)
        .unwrap_or_else(|r| panic!("unexpected rejection of {body}: {:?}", r.error))
}

#[test]
fn dp_rank_is_checked_against_the_known_dp_size() {
    // `tokenizer_manager.py:915-925`: rank 0 is ignored on one rank; others out of
    // `[0, num_dp_ranks)` are refused. `data_parallel_rank` is the deprecated alias
    // (`io_struct.py:419-429`), bound by pydantic's lax `int` (no contract-gate check).
    let mock = mock_engine();
    for (body, rank) in [
        (r#"{"input_ids":[1],"routed_dp_rank":1}"#, "1"),
        (r#"{"input_ids":[1],"routed_dp_rank":-1}"#, "-1"),
        (r#"{"input_ids":[1],"data_parallel_rank":1}"#, "1"),
        (r#"{"input_ids":[1],"data_parallel_rank":true}"#, "1"),
        (r#"{"input_ids":[1],"data_parallel_rank":"1"}"#, "1"),
        (r#"{"input_ids":[1],"data_parallel_rank":" 2 "}"#, "2"),
        (
            r#"{"input_ids":[1],"data_parallel_rank":3,"stream":false}"#,
            "3",
        ),
    ] {
        assert_eq!(
            refusal_on(body, &mock),
            format!("routed_dp_rank={rank} out of range [0, 1)"),
            "{body}"
        );
    }
    for body in [
        r#"{"input_ids":[1],"routed_dp_rank":0}"#,
        r#"{"input_ids":[1],"data_parallel_rank":false}"#,
        r#"{"input_ids":[1],"data_parallel_rank":"0"}"#,
    ] {
        accepted_on(body, &mock);
    }
    // Four ranks: 3 is served and routed; 4 is refused. Unknown: left to the engine.
    let four = EngineInfo {
        features: EngineFeatures {
            dp_size: Some(4),
            ..EngineFeatures::default()
        },
        ..engine()
    };
    let p = accepted_on(r#"{"input_ids":[1],"data_parallel_rank":"3"}"#, &four);
    assert_eq!(p.subs[0].request.routing.dp_rank, Some(3));
    assert_eq!(
        refusal_on(r#"{"input_ids":[1],"routed_dp_rank":4}"#, &four),
        "routed_dp_rank=4 out of range [0, 4)"
    );
    accepted_on(r#"{"input_ids":[1],"routed_dp_rank":7}"#, &engine());
}

#[test]
fn lora_path_without_lora_gets_the_engines_refusal() {
    // `tokenizer_manager.py:3723-3742` (after normalization): truthy `lora_path` on a server
    // without `--enable-lora`, naming the first non-empty adapter.
    let mock = mock_engine();
    let msg = |a: &str| {
        format!(
            "LoRA adapter '{a}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint."
        )
    };
    for (body, adapter) in [
        (r#"{"input_ids":[1],"lora_path":"lora1"}"#, "lora1"),
        (r#"{"input_ids":[1],"lora_path":" 2 "}"#, " 2 "),
        (r#"{"input_ids":[1],"lora_path":[null]}"#, "None"),
        (r#"{"input_ids":[1],"lora_path":["a"]}"#, "a"),
        (r#"{"input_ids":[1],"lora_path":[null,"","b"]}"#, "b"),
        // A batch's string is spread into a list first: even `""` asks (for `None`).
        (r#"{"input_ids":[[1],[2]],"lora_path":""}"#, "None"),
        (r#"{"input_ids":[[1],[2]],"lora_path":["x"]}"#, "x"),
    ] {
        assert_eq!(refusal_on(body, &mock), msg(adapter), "{body}");
    }
    for body in [
        r#"{"input_ids":[1],"lora_path":""}"#,
        r#"{"input_ids":[1],"lora_path":[]}"#,
        r#"{"input_ids":[1],"lora_path":null}"#,
    ] {
        accepted_on(body, &mock);
    }
    // LoRA on (or unknown): the adapter is routed; a list for one request is genfront's 400.
    let p = accepted_on(r#"{"input_ids":[1],"lora_path":"l0"}"#, &engine());
    assert_eq!(p.subs[0].request.routing.lora.as_deref(), Some("l0"));
    assert_eq!(
        refusal_on(r#"{"input_ids":[1],"lora_path":["a"]}"#, &engine()),
        "lora_path should be a scalar for a single request."
    );
}

#[test]
fn single_request_lists_are_read_as_python_reads_them() {
    // `_normalize_single_inputs` (`io_struct.py:559-587`) keeps a list where one request holds
    // a scalar; SGLang tests it for truthiness, and without logprobs the scheduler ignores a
    // start or count (`scheduler.py:3256-3258`).
    for body in [
        r#"{"input_ids":[1,2,3],"return_logprob":[]}"#,
        r#"{"input_ids":[1,2,3],"logprob_start_len":[0]}"#,
        r#"{"input_ids":[1,2,3],"logprob_start_len":[]}"#,
        r#"{"input_ids":[1,2,3],"top_logprobs_num":[1,2]}"#,
        r#"{"input_ids":[1,2,3],"return_sampling_mask":[]}"#,
        r#"{"input_ids":[1,2,3],"custom_logit_processor":[]}"#,
    ] {
        let p = prepared(body);
        assert!(p.subs[0].request.output.logprobs.is_none(), "{body}");
    }
    let p = prepared(r#"{"input_ids":[1,2,3],"return_logprob":[true]}"#);
    assert_eq!(p.subs[0].request.output.logprobs, Some(0));
    // With logprobs on, SGLang's scheduler compares the list with ints (`TypeError`): refused.
    assert_eq!(
        rejected(r#"{"input_ids":[1,2,3],"return_logprob":true,"top_logprobs_num":[1]}"#).error,
        genfront_format::GenerateError::validation(
            "top_logprobs_num should be a scalar for a single request."
        )
    );
    // A non-empty processor list is truthy: the server's refusal (`tokenizer_manager.py:1412`).
    assert_eq!(
        refusal_on(
            r#"{"input_ids":[1],"custom_logit_processor":[null]}"#,
            &engine()
        ),
        "The server is not configured to enable custom logit processor. Please set `--enable-custom-logit-processor` to enable this feature."
    );
    // `sampling_logprobs_mode is not None` (`tokenizer_manager.py:1431-1435`): a list, even
    // empty, is set; the top-level `watermark` is moved into the sampling kwargs whole
    // (`tokenizer_manager.py:1553-1559`) and must be an object.
    for (body, message) in [
        (
            r#"{"input_ids":[1],"sampling_logprobs_mode":[]}"#,
            "sampling_logprobs_mode can only be set when return_sampling_mask=true.",
        ),
        (
            r#"{"input_ids":[1],"sampling_logprobs_mode":[null]}"#,
            "sampling_logprobs_mode can only be set when return_sampling_mask=true.",
        ),
        (
            r#"{"input_ids":[1],"watermark":[]}"#,
            "watermark must be an object",
        ),
        (
            r#"{"input_ids":[1],"watermark":[null]}"#,
            "watermark must be an object",
        ),
    ] {
        assert_eq!(refusal_on(body, &engine()), message, "{body}");
    }
}

#[test]
fn kv_hints_are_decoded_as_msgspec_does() {
    // `io_struct.py:583-587` (single) and `888-905` (batch); `managers/kv_hints.py:31-55`.
    let e = engine();
    for (body, message) in [
        (
            r#"{"input_ids":[1],"kv_hints":[]}"#,
            "kv_hints should be a single envelope for one request.",
        ),
        (
            r#"{"input_ids":[1],"kv_hints":[null]}"#,
            "kv_hints should be a single envelope for one request.",
        ),
        (
            r#"{"input_ids":[1],"kv_hints":{"a":1}}"#,
            "Malformed kv_hints envelope: Object missing required field `protocol_version`",
        ),
        (
            r#"{"input_ids":[1],"kv_hints":{"protocol_version":"1"}}"#,
            "Malformed kv_hints envelope: Object missing required field `message_id`",
        ),
        (
            r#"{"input_ids":[1],"kv_hints":{"protocol_version":"1","message_id":"m","actions":[{}]}}"#,
            "Malformed kv_hints envelope: Object missing required field `action_id` - at `$.actions[0]`",
        ),
        (
            r#"{"input_ids":[[1],[2]],"kv_hints":{}}"#,
            "Malformed kv_hints envelope: Object missing required field `protocol_version`",
        ),
        (
            r#"{"input_ids":[[1],[2]],"kv_hints":[null]}"#,
            "The length of kv_hints should be equal to the batch size.",
        ),
    ] {
        assert_eq!(refusal_on(body, &e), message, "{body}");
    }
    accepted_on(r#"{"input_ids":[1],"kv_hints":{}}"#, &e);
    accepted_on(
        r#"{"input_ids":[1],"kv_hints":{"protocol_version":"1","message_id":"m"}}"#,
        &e,
    );
    accepted_on(r#"{"input_ids":[[1],[2]],"kv_hints":[null,{}]}"#, &e);
}

#[test]
fn priority_input_length_beam_and_fan_out() {
    let e = engine();
    // `_set_default_priority` (`tokenizer_manager.py:4013-4026`).
    for body in [
        r#"{"input_ids":[1],"priority":9223372036854775808}"#,
        r#"{"input_ids":[1],"priority":18446744073709551615}"#,
    ] {
        assert_eq!(
            refusal_on(body, &e),
            "priority must be a signed 64-bit integer between -9223372036854775808 and 9223372036854775807"
        );
    }
    accepted_on(r#"{"input_ids":[1],"priority":-9223372036854775808}"#, &e);
    // `validate_input_length` (`managers/utils.py:259-289`) with `max_req_input_len =
    // context_len - 6` (`tp_worker.py:568-572`): 4096 → 4090; `max_new_tokens` is the
    // tokenizer manager's separate total check.
    let ids = |n: usize| format!("[{}]", vec!["1"; n].join(","));
    assert_eq!(
        refusal_on(
            &format!(
                r#"{{"input_ids":{},"sampling_params":{{"max_new_tokens":0}}}}"#,
                ids(4090)
            ),
            &e
        ),
        "Input length (4090 tokens) exceeds the maximum allowed length (4090 tokens). Use a shorter input or enable --allow-auto-truncate."
    );
    accepted_on(
        &format!(
            r#"{{"input_ids":{},"sampling_params":{{"max_new_tokens":0}}}}"#,
            ids(4089)
        ),
        &e,
    );
    // Beam search is real in SGLang 0.5.23 (`beam_search/`): accepted and forwarded in the
    // native body; `n` is the number of returned beams, not a fan-out (`io_struct.py:525-529`).
    let p = accepted_on(
        r#"{"input_ids":[1],"sampling_params":{"beam_width":4,"n":2}}"#,
        &e,
    );
    assert_eq!(p.subs.len(), 1);
    assert_eq!(
        p.subs[0].request.native.body["sampling_params"]["beam_width"],
        4
    );
    assert_eq!(
        p.subs[0].request.native_only,
        ["sampling_params.beam_width"]
    );
    let p = accepted_on(
        r#"{"input_ids":[1],"sampling_params":{"beam_width":1}}"#,
        &e,
    );
    assert!(p.subs[0].request.native_only.is_empty());
    // SGLang fans out any `n`; genfront bounds it at the larger of `max_running_requests`
    // and 4096 (a documented deviation).
    let p = accepted_on(r#"{"input_ids":[1],"sampling_params":{"n":257}}"#, &e);
    assert_eq!(p.subs.len(), 257);
    assert_eq!(
        refusal_on(r#"{"input_ids":[1],"sampling_params":{"n":4097}}"#, &e),
        "sampling_params.n=4097 exceeds the maximum number of parallel samples (4096)."
    );
}

#[test]
fn engine_crash_paths_get_a_400() {
    // Bodies SGLang's own code fails on with a 500 (a `TypeError` after the contract gate
    // admitted them): genfront's 400 (documented deviations).
    let e = engine();
    for (body, message) in [
        // `SamplingParams(**kwargs)` has no `choice` (`tokenizer_manager.py:1565`).
        (
            r#"{"input_ids":[1],"sampling_params":{"choice":["a"]}}"#,
            "sampling_params.choice is not supported: SGLang's SamplingParams has no `choice` argument.",
        ),
        (
            r#"{"input_ids":[1],"sampling_params":{"choice":null}}"#,
            "sampling_params.choice is not supported: SGLang's SamplingParams has no `choice` argument.",
        ),
        // `None > 1` in `_handle_parallel_sampling` (`io_struct.py:531-558`).
        (
            r#"{"input_ids":[1],"sampling_params":{"n":null}}"#,
            "sampling_params.n must be an integer, got None.",
        ),
        // `SessionParams(**session_params)` (`tokenizer_manager.py:1572-1574`).
        (
            r#"{"input_ids":[1],"session_params":{"x":"y"}}"#,
            "session_params has an unexpected key 'x': SGLang's SessionParams takes id, rid, offset, replace and drop_previous_output.",
        ),
    ] {
        assert_eq!(refusal_on(body, &e), message, "{body}");
    }
    // A beam request takes no fan-out, so `n: null` is never compared there.
    accepted_on(
        r#"{"input_ids":[1],"sampling_params":{"n":null,"beam_width":2}}"#,
        &e,
    );
    accepted_on(
        r#"{"input_ids":[1],"session_params":{"id":"s","offset":1}}"#,
        &e,
    );
}

#[test]
fn sampling_mask_needs_a_finite_top_k() {
    // `scheduler.py:3160-3182`, after `SamplingParams.normalize` (`sampling_params.py:244-250`).
    let e = engine();
    let msg = |k: &str| {
        format!(
            "return_sampling_mask requires top_k=1 for greedy sampling or finite 1 < top_k <= 4096; got top_k={k}. Lower top_k or increase --sampling-mask-max-tokens."
        )
    };
    assert_eq!(
        refusal_on(r#"{"input_ids":[1],"return_sampling_mask":true}"#, &e),
        msg("1073741824")
    );
    assert_eq!(
        refusal_on(r#"{"input_ids":[1],"return_sampling_mask":[true]}"#, &e),
        msg("1073741824")
    );
    assert_eq!(
        refusal_on(
            r#"{"input_ids":[1],"return_sampling_mask":true,"sampling_params":{"top_k":4097}}"#,
            &e
        ),
        msg("4097")
    );
    for body in [
        r#"{"input_ids":[1],"return_sampling_mask":true,"sampling_params":{"top_k":1}}"#,
        r#"{"input_ids":[1],"return_sampling_mask":true,"sampling_params":{"top_k":4096}}"#,
        r#"{"input_ids":[1],"return_sampling_mask":true,"sampling_params":{"temperature":0}}"#,
    ] {
        let p = accepted_on(body, &e);
        assert!(p.subs[0].request.output.sampling_mask, "{body}");
    }
}
