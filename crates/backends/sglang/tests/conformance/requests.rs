//! Request side: validation messages and envelopes, projection, native bodies, batch and `n > 1`.

use genfront_format::{CONTENT_TYPE_JSON, CONTENT_TYPE_SSE, GenerateError, GenerateFormat};
use genfront_protocol::{EngineInfo, PromptLogprobOptions};
use genfront_sglang::{EMBEDS_UNSUPPORTED, TEXT_UNSUPPORTED};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};

use crate::support::*;

fn ids(n: usize) -> String {
    let v: Vec<String> = (0..n).map(|i| (i % 900 + 1).to_string()).collect();
    format!("[{}]", v.join(","))
}

/// `{"error":{"message": m}}` with status 400.
fn assert_value_error(body: &str, message: &str) {
    let r = error_answer(body);
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(r.content_type, CONTENT_TYPE_JSON);
    assert_eq!(
        json_of(&r.body),
        json!({"error": {"message": message}}),
        "{body}"
    );
}

#[test]
fn validation_messages() {
    let long = ids(4096);
    let cases: Vec<(String, String)> = vec![
        ("{}".into(), "Either text, input_ids or input_embeds should be provided.".into()),
        (r#"{"rid":"x","sampling_params":{}}"#.into(), "Either text, input_ids or input_embeds should be provided.".into()),
        (r#"{"text":"a","input_ids":[1],"input_embeds":[[0.5]]}"#.into(), "Either text, input_ids or input_embeds should be provided.".into()),
        (r#"{"input_ids":[]}"#.into(), "input_ids cannot be empty.".into()),
        (r#"{"input_ids":[[1],[]]}"#.into(), "input_ids cannot be empty.".into()),
        (r#"{"text":"hi"}"#.into(), TEXT_UNSUPPORTED.into()),
        (r#"{"text":["a","b"],"sampling_params":{"temperature":-1}}"#.into(), TEXT_UNSUPPORTED.into()),
        (r#"{"input_embeds":[[0.1,0.2]]}"#.into(), EMBEDS_UNSUPPORTED.into()),
        (format!(r#"{{"input_ids":{long}}}"#), "The input (4096 tokens) is longer than the model's context length (4096 tokens).".into()),
        (r#"{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4094}}"#.into(),
            "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 4097 tokens: 3 tokens from the input messages and 4094 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.".into()),
        (r#"{"input_ids":[1,1000],"sampling_params":{"temperature":-1}}"#.into(), "The input_ids [1, 1000] contains values greater than the vocab size (1000).".into()),
        (r#"{"input_ids":[[1],[2,5000]]}"#.into(), "The input_ids [2, 5000] contains values greater than the vocab size (1000).".into()),
        (r#"{"input_ids":[1,-3]}"#.into(), "The input_ids contain the negative token id -3; valid token ids are in [0, 1000).".into()),
        (r#"{"input_ids":[1],"token_ids_logprob":[5,1000]}"#.into(), "token_ids_logprob contains out-of-vocabulary token id 1000; valid range is [0, 1000).".into()),
        (r#"{"input_ids":[1],"token_ids_logprob":[-1]}"#.into(), "token_ids_logprob contains out-of-vocabulary token id -1; valid range is [0, 1000).".into()),
        (r#"{"input_ids":[1],"token_ids_logprob":[[5]]}"#.into(), "token_ids_logprob must be a flat list of integers.".into()),
        (r#"{"input_ids":[[1],[2]],"rid":["a","a"]}"#.into(), "Duplicate request IDs detected within the request: ['a']".into()),
        (r#"{"input_ids":[[1],[2],[3],[4]],"rid":["b","a","b","a"]}"#.into(), "Duplicate request IDs detected within the request: ['b', 'a']".into()),
        (r#"{"input_ids":[[1],[2]],"rid":["a"]}"#.into(), "The specified rids length mismatch with the batch_size for batch processing.".into()),
        (r#"{"input_ids":[[1],[2]],"sampling_params":{"n":2},"return_logprob":[true,false]}"#.into(), "Cannot use list return_logprob with parallel_sample_num > 1".into()),
        (r#"{"input_ids":[[1],[2]],"sampling_params":{"n":2},"logprob_start_len":[0,0]}"#.into(), "Cannot use list logprob_start_len with parallel_sample_num > 1".into()),
        (r#"{"input_ids":[[1],[2]],"sampling_params":{"n":2},"top_logprobs_num":[1,1]}"#.into(), "Cannot use list top_logprobs_num with parallel_sample_num > 1".into()),
        (r#"{"input_ids":[[1],[2]],"sampling_params":{"n":2},"token_ids_logprob":[[1],[2]]}"#.into(), "Cannot use list token_ids_logprob with parallel_sample_num > 1".into()),
        (r#"{"input_ids":[[1],[2]],"sampling_params":{"n":2},"custom_logit_processor":["a","b"]}"#.into(), "Cannot use list custom_logit_processor with parallel_sample_num > 1".into()),
        (r#"{"input_ids":[[1],[2]],"sampling_params":[{"n":2},{"n":3}]}"#.into(), "The parallel_sample_num should be the same for all samples in sample params.".into()),
        (r#"{"input_ids":[1],"session_id":"s","session_params":{"id":"x"}}"#.into(), "session_id and session_params cannot both be set.".into()),
        (r#"{"input_ids":[1],"return_flat_raw_top_logprobs_b64":true}"#.into(), "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs or return_flat_raw_output_top_logprobs.".into()),
        (r#"{"input_ids":[1],"sampling_logprobs_mode":"support"}"#.into(), "sampling_logprobs_mode can only be set when return_sampling_mask=true.".into()),
        (r#"{"input_ids":[1],"return_hidden_states":true}"#.into(), "The server is not configured to return hidden states. Please set `--return-hidden-states-mode last`, `--return-hidden-states-mode full`, or the legacy `--enable-return-hidden-states` flag.".into()),
        (r#"{"input_ids":[1],"custom_logit_processor":"x"}"#.into(), "The server is not configured to enable custom logit processor. Please set `--enable-custom-logit-processor` to enable this feature.".into()),
        (r#"{"input_ids":[1],"max_thinking_tokens":5}"#.into(), "max_thinking_tokens requires the server to be launched with --enable-strict-thinking".into()),
        (r#"{"input_ids":[1],"extra_key":["a"]}"#.into(), "extra_key should be a string for a single request.".into()),
        (r#"{"input_ids":[[1],[2]],"cache_salt":["a"]}"#.into(), "The length of cache_salt should be equal to the batch size.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"stop":"x","temperature":-1}}"#.into(), "stop=['x'] is unavailable when skip_tokenizer_init=True (requires tokenizer to decode tokens to text for matching).".into()),
        (r#"{"input_ids":[1],"sampling_params":{"temperature":-1}}"#.into(), "temperature must be a non-negative finite number, got -1.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"top_p":0.0}}"#.into(), "top_p must be in (0, 1], got 0.0.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"min_p":-0.1}}"#.into(), "min_p must be in [0, 1], got -0.1.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"top_k":0}}"#.into(), "top_k must be -1 (disable) or at least 1, got 0.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"frequency_penalty":2.5}}"#.into(), "frequency_penalty must be in [-2, 2], got 2.5.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"presence_penalty":-3}}"#.into(), "presence_penalty must be in [-2, 2], got -3.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"repetition_penalty":2.5}}"#.into(), "repetition_penalty must be in (0, 2] (1.0 = no penalty), got 2.5.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"min_new_tokens":-2}}"#.into(), "min_new_tokens must be in [0, max_new_tokens], got -2.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"min_new_tokens":9,"max_new_tokens":8}}"#.into(), "min_new_tokens=9 is unavailable when skip_tokenizer_init=True (requires tokenizer for eos_token_id).".into()),
        (r#"{"input_ids":[1],"sampling_params":{"max_new_tokens":-1}}"#.into(), "max_new_tokens must be at least 0, got -1.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"logit_bias":{"1000":1}}}"#.into(), "logit_bias must has keys in [0, 999], got 1000.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"json_schema":"{}","regex":"a"}}"#.into(), "Only one of json_schema, regex, ebnf, or structural_tag can be set.".into()),
        (r#"{"input_ids":[1],"return_logprob":true,"logprob_start_len":-2}"#.into(), "logprob_start_len must be -1 (output tokens only) or a non-negative prompt position, got -2.".into()),
        (r#"{"input_ids":[1,2,3],"return_logprob":true,"logprob_start_len":3}"#.into(), "req.logprob_start_len=3 is higher than the number of input tokens len(req.origin_input_ids)=3. Please use a smaller logprob_start_len.".into()),
        (r#"{"input_ids":[1],"return_logprob":true,"top_logprobs_num":-1}"#.into(), "top_logprobs_num must be a non-negative integer, got -1.".into()),
        (r#"{"input_ids":[1,2],"return_routed_experts":true,"routed_experts_start_len":3}"#.into(), "routed_experts_start_len=3 is higher than the number of input tokens 2. Please use a smaller routed_experts_start_len.".into()),
        (r#"{"input_ids":[1,2],"return_routed_experts":true,"routed_experts_start_len":-1}"#.into(), "routed_experts_start_len must be non-negative, got -1.".into()),
        (r#"{"input_ids":[1],"sampling_params":{"n":1000000000}}"#.into(), "sampling_params.n=1000000000 exceeds the maximum number of parallel samples (4096).".into()),
    ];
    for (body, message) in &cases {
        assert_value_error(body, message);
    }
}

#[test]
fn schema_errors_use_the_pydantic_envelope() {
    for body in [
        "not json",
        "[1, 2]",
        r#"{"input_ids":"abc"}"#,
        r#"{"input_ids":[1,2],"sampling_params":5}"#,
        r#"{"input_ids":[1],"stream":null}"#,
        r#"{"input_ids":[1.5]}"#,
        r#"{"input_ids":[1,[2]]}"#,
        r#"{"input_ids":[1],"rid":5}"#,
        r#"{"input_ids":[1],"sampling_params":[5]}"#,
        r#"{"input_ids":"abc","stream":true}"#,
        r#"{"input_ids":[1],"routing_key":5,"stream":true}"#,
        r#"{"input_ids":[1],"bootstrap_room":"x"}"#,
    ] {
        let r = rejected(body);
        assert!(
            matches!(r.error, GenerateError::Schema { .. }),
            "{body}: {:?}",
            r.error
        );
        let answer = format(false).error_response(&r.error, r.stream);
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.content_type, CONTENT_TYPE_JSON);
        let v = json_of(&answer.body);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["object", "message", "type", "param", "code"],
            "{body}"
        );
        assert_eq!(v["object"], "error");
        assert_eq!(v["type"], "Bad Request");
        assert_eq!(v["param"], Value::Null);
        assert_eq!(v["code"], 400);
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

#[test]
fn streaming_validation_errors_are_200_sse_events() {
    for (body, message) in [
        (
            r#"{"input_ids":[],"stream":true}"#,
            "input_ids cannot be empty.",
        ),
        (r#"{"text":"hi","stream":true}"#, TEXT_UNSUPPORTED),
        (
            r#"{"input_ids":[1],"stream":true,"sampling_params":{"top_p":2}}"#,
            "top_p must be in (0, 1], got 2.",
        ),
        (
            r#"{"input_ids":[1],"stream":true,"return_flat_raw_output_top_logprobs":true}"#,
            "return_flat_raw_output_top_logprobs is only set on the finished response and does not support stream=True.",
        ),
    ] {
        let r = rejected(body);
        assert!(r.stream, "{body}");
        let answer = format(false).error_response(&r.error, r.stream);
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.content_type, CONTENT_TYPE_SSE);
        let text = std::str::from_utf8(&answer.body).unwrap();
        let event = json!({"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": false}});
        assert_eq!(text, format!("data: {event}\n\ndata: [DONE]\n\n"));
    }
}

/// SGLang 0.5.23's JSON contract gate (`http_server.py:933-940`, `api/v1/api_types.py`): strict
/// types and unknown `sampling_params` keys are a 400 `{"error": "<text>"}`, for `stream: true`
/// too, after pydantic's binding and before the tokenizer manager's checks.
#[test]
fn contract_gate_answers_plain_400() {
    for (body, text) in [
        (
            r#"{"input_ids":[1],"sampling_params":{"max_new_tokens":5.0},"stream":true}"#,
            "invalid type: floating point `5.0`, expected i64",
        ),
        (
            r#"{"input_ids":[1],"sampling_params":{"foo":1}}"#,
            "unknown field `foo`, expected one of `max_new_tokens`, `stop`, `stop_token_ids`, `stop_regex`, `temperature`, `top_p`, `top_k`, `min_p`, `frequency_penalty`, `presence_penalty`, `repetition_penalty`, `min_new_tokens`, `n`, `json_schema`, `regex`, `ebnf`, `structural_tag`, `ignore_eos`, `skip_special_tokens`, `spaces_between_special_tokens`, `no_stop_trim`, `stream_interval`, `logit_bias`, `sampling_seed`, `custom_params`, `beam_width`, `watermark`, `choice`",
        ),
        // pydantic's lax bind admits these; the strict gate does not.
        (
            r#"{"input_ids":[1],"stream":"yes"}"#,
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            r#"{"input_ids":[1],"return_logprob":"true"}"#,
            "invalid type: string \"true\", expected a value or an array of values for BoolOrList",
        ),
        (
            r#"{"input_ids":[1],"sampling_params":{"temperature":"hot"}}"#,
            "invalid type: string \"hot\", expected f64",
        ),
        (
            r#"{"input_ids":[1],"sampling_params":{"max_new_tokens":1.5}}"#,
            "invalid type: floating point `1.5`, expected i64",
        ),
        (
            r#"{"input_ids":[1],"sampling_params":{"stop":5}}"#,
            "invalid type: integer `5`, expected a value or an array of values for StringOrList",
        ),
        (
            r#"{"input_ids":[1],"sampling_params":{"stop_token_ids":["a"]}}"#,
            "invalid type: string \"a\", expected i64",
        ),
        // The gate runs before the tokenizer manager's own checks (here: empty input_ids).
        (
            r#"{"input_ids":[],"sampling_params":{"n":2.0}}"#,
            "invalid type: floating point `2.0`, expected i64",
        ),
    ] {
        let answer = error_answer(body);
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(json_of(&answer.body), json!({ "error": text }), "{body}");
    }
}

#[test]
fn checks_run_in_sglang_order() {
    // Text is refused at tokenization, before the sampling checks.
    assert_value_error(
        r#"{"text":"hi","sampling_params":{"stop":["x"],"temperature":-1}}"#,
        TEXT_UNSUPPORTED,
    );
    // Length before vocabulary before token_ids_logprob before sampling.
    assert_value_error(
        r#"{"input_ids":[1,2],"sampling_params":{"max_new_tokens":5000,"temperature":-1},"token_ids_logprob":[5000]}"#,
        "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 5002 tokens: 2 tokens from the input messages and 5000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
    );
    assert_value_error(
        r#"{"input_ids":[1,2],"sampling_params":{"temperature":-1},"token_ids_logprob":[5000]}"#,
        "token_ids_logprob contains out-of-vocabulary token id 5000; valid range is [0, 1000).",
    );
    // Normalization errors come before per-item ones.
    assert_value_error(
        r#"{"input_ids":[[1],[5000]],"rid":["a","a"]}"#,
        "Duplicate request IDs detected within the request: ['a']",
    );
}

#[test]
fn text_with_input_ids_uses_the_ids() {
    let p = prepared(r#"{"text":"hello","input_ids":[5,6]}"#);
    assert_eq!(p.subs.len(), 1);
    assert_eq!(p.subs[0].request.token_ids, vec![5, 6]);
    let p = prepared(r#"{"text":["a","b"],"input_ids":[[5],[6,7]]}"#);
    assert_eq!(p.subs.len(), 2);
    assert_eq!(p.subs[1].request.token_ids, vec![6, 7]);
    // input_ids wins over input_embeds.
    let p = prepared(r#"{"input_ids":[5],"input_embeds":[[0.5]]}"#);
    assert_eq!(p.subs[0].request.token_ids, vec![5]);
}

#[test]
fn single_request_projection() {
    let body = r#"{"input_ids":[5,6,7],"sampling_params":{"temperature":0.7,"top_p":0.9,"top_k":-1,"min_p":0.05,"frequency_penalty":0.1,"presence_penalty":-0.2,"repetition_penalty":1.1,"min_new_tokens":2,"max_new_tokens":64,"stop_token_ids":[2,9],"ignore_eos":true,"sampling_seed":43,"n":1,"skip_special_tokens":false,"custom_params":{"x":1}},"return_logprob":true,"logprob_start_len":1,"top_logprobs_num":3,"token_ids_logprob":[4,8],"return_routed_experts":true,"routed_experts_start_len":2,"priority":-3,"lora_path":"my_lora","cache_salt":"salt","session_id":"sess","routed_dp_rank":2,"stream":false}"#;
    // min_new_tokens needs the engine's tokenizer (SGLang refuses it with skip_tokenizer_init).
    let info = EngineInfo {
        tokenizer: Some(true),
        ..engine()
    };
    let p = prepare_with(body, &HeaderMap::new(), &info, false).unwrap();
    assert!(!p.stream);
    assert_eq!(p.client_id, None);
    assert_eq!(p.subs.len(), 1);
    let sub = &p.subs[0];
    let r = &sub.request;
    assert_eq!(r.request_id, "");
    assert_eq!(r.token_ids, vec![5, 6, 7]);
    assert_eq!(r.stop.max_tokens, Some(64));
    assert_eq!(r.stop.min_tokens, 2);
    assert_eq!(r.stop.stop_token_ids, vec![2, 9]);
    assert!(r.stop.stop.is_empty());
    assert!(r.stop.ignore_eos);
    assert_eq!(r.sampling.n, 1);
    assert_eq!(r.sampling.temperature, Some(0.7));
    assert_eq!(r.sampling.top_p, Some(0.9));
    assert_eq!(r.sampling.top_k, None);
    assert_eq!(r.sampling.min_p, Some(0.05));
    assert_eq!(r.sampling.frequency_penalty, Some(0.1));
    assert_eq!(r.sampling.presence_penalty, Some(-0.2));
    assert_eq!(r.sampling.repetition_penalty, Some(1.1));
    assert_eq!(r.sampling.seed, Some(43));
    assert_eq!(r.output.logprobs, Some(3));
    assert_eq!(
        r.output.prompt_logprobs,
        Some(PromptLogprobOptions { start: 1, top_k: 3 })
    );
    assert_eq!(r.output.token_ids_logprobs, vec![4, 8]);
    assert!(r.output.routed_experts);
    assert_eq!(r.output.routed_experts_start, 2);
    assert_eq!(r.routing.priority, Some(-3));
    assert_eq!(r.routing.lora.as_deref(), Some("my_lora"));
    assert_eq!(r.routing.cache_salt.as_deref(), Some("salt"));
    assert_eq!(r.routing.session_id.as_deref(), Some("sess"));
    assert_eq!(r.routing.dp_rank, Some(2));
    assert_eq!(r.native.format, "sglang");
    // The native body is the client's object, byte-exact when re-serialized with the typed ids
    // in its `input_ids: null` placeholder (the ids are held once, in `token_ids`).
    assert_eq!(r.native.body["input_ids"], Value::Null);
    assert_eq!(serde_json::to_string(&with_ids(r)).unwrap(), body);
    // Without a client rid, the abort key is the fresh uuid4 hex SGLang would mint.
    assert_eq!(sub.abort_key.len(), 32);
    assert!(sub.abort_key.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn defaults_and_explicit_nulls() {
    let p = prepared(r#"{"input_ids":[1]}"#);
    let r = &p.subs[0].request;
    assert_eq!(r.stop.max_tokens, Some(128));
    assert_eq!(r.sampling.temperature, None);
    assert_eq!(r.output.logprobs, None);
    assert_eq!(r.output.prompt_logprobs, None);
    assert!(r.output.token_ids_logprobs.is_empty());
    assert!(!r.output.routed_experts);

    let p = prepared(
        r#"{"input_ids":[1],"sampling_params":null,"return_logprob":null,"logprob_start_len":null,"top_logprobs_num":null,"token_ids_logprob":null,"lora_path":null,"image_data":null,"rid":null}"#,
    );
    let r = &p.subs[0].request;
    assert_eq!(r.stop.max_tokens, Some(128));
    assert_eq!(r.output.logprobs, None);
    assert_eq!(r.routing.lora, None);

    let p = prepared(
        r#"{"input_ids":[1],"sampling_params":{"temperature":null,"top_p":null,"top_k":null,"min_p":null,"stop":null,"stop_token_ids":null,"ignore_eos":null,"min_new_tokens":null,"max_new_tokens":null}}"#,
    );
    // (`n: null` is SGLang's `None > 1` crash: genfront's 400, `parity.rs`.)
    let r = &p.subs[0].request;
    // `max_new_tokens` is Optional in SGLang: null means no limit (capped by the context).
    assert_eq!(r.stop.max_tokens, None);
    assert_eq!(r.stop.min_tokens, 0);
    assert_eq!(r.sampling.temperature, None);
    assert_eq!(r.sampling.top_k, None);
    assert!(!r.stop.ignore_eos);

    // return_logprob with the default logprob_start_len (-1): output logprobs only.
    let p = prepared(r#"{"input_ids":[1],"return_logprob":true,"token_ids_logprob":[]}"#);
    let r = &p.subs[0].request;
    assert_eq!(r.output.logprobs, Some(0));
    assert_eq!(r.output.prompt_logprobs, None);
    assert!(r.output.token_ids_logprobs.is_empty());
    // token_ids_logprob without return_logprob is validated but not projected.
    let p = prepared(r#"{"input_ids":[1],"token_ids_logprob":[3]}"#);
    assert!(p.subs[0].request.output.token_ids_logprobs.is_empty());
    // Without return_logprob the logprob knobs are ignored (SGLang resets them in the scheduler).
    let p = prepared(r#"{"input_ids":[1],"logprob_start_len":-5,"top_logprobs_num":-1}"#);
    assert_eq!(p.subs[0].request.output.prompt_logprobs, None);
    // routed_experts_start_len only matters when routed experts are asked for.
    let p = prepared(r#"{"input_ids":[1],"routed_experts_start_len":9}"#);
    assert_eq!(p.subs[0].request.output.routed_experts_start, 0);
    // A prefill-only (max_new_tokens 0) scoring request may start at the prompt's end.
    prepared(
        r#"{"input_ids":[1,2],"return_logprob":true,"logprob_start_len":2,"sampling_params":{"max_new_tokens":0}}"#,
    );
    // temperature 0 is greedy; top_k 0 is then fine (SGLang rewrites top_k to 1).
    let p = prepared(r#"{"input_ids":[1],"sampling_params":{"temperature":0,"top_k":0}}"#);
    assert!(p.subs[0].request.sampling.is_greedy());
}

#[test]
fn unknown_keys_and_big_rooms_survive_byte_exact() {
    let body = r#"{"zeta":{"nested":[1,2.5,null,"x"]},"rid":"5d7a_D","input_ids":[146,746],"sampling_params":{"temperature":1.0,"top_p":1.0,"top_k":-1,"repetition_penalty":1.0,"max_new_tokens":2048,"custom_params":{"a":1}},"return_logprob":true,"image_data":null,"beta":5731906216386620393,"alpha":18446744073709551615,"return_indexer_topk":false}"#;
    let p = prepared(body);
    let r = &p.subs[0].request;
    assert_eq!(serde_json::to_string(&with_ids(r)).unwrap(), body);
    assert_eq!(
        r.native.body["beta"].as_u64(),
        Some(5_731_906_216_386_620_393)
    );
    assert_eq!(r.handoff, None);
    assert_eq!(p.client_id.as_deref(), Some("5d7a_D"));
    assert_eq!(p.subs[0].abort_key, "5d7a_D");
}

#[test]
fn client_id_and_routing_headers() {
    let mut h = HeaderMap::new();
    h.insert("x-request-id", HeaderValue::from_static("hdr-id"));
    h.insert("x-data-parallel-rank", HeaderValue::from_static("3"));
    let info = engine();
    let p = prepare_with(r#"{"input_ids":[1]}"#, &h, &info, false).unwrap();
    assert_eq!(p.client_id.as_deref(), Some("hdr-id"));
    assert_eq!(p.subs[0].request.routing.dp_rank, Some(3));
    // The body rid wins over the header; the body DP rank wins over the header.
    let p = prepare_with(
        r#"{"input_ids":[1],"rid":"body-id","data_parallel_rank":1}"#,
        &h,
        &info,
        false,
    )
    .unwrap();
    assert_eq!(p.client_id.as_deref(), Some("body-id"));
    assert_eq!(p.subs[0].request.routing.dp_rank, Some(1));
    let p = prepare_with(
        r#"{"input_ids":[1],"routed_dp_rank":0,"data_parallel_rank":1}"#,
        &h,
        &info,
        false,
    )
    .unwrap();
    assert_eq!(p.subs[0].request.routing.dp_rank, Some(0));
    // An unparseable header is ignored, as SGLang and Dynamo do.
    let mut bad = HeaderMap::new();
    bad.insert("x-data-parallel-rank", HeaderValue::from_static("two"));
    let p = prepare_with(r#"{"input_ids":[1]}"#, &bad, &info, false).unwrap();
    assert_eq!(p.subs[0].request.routing.dp_rank, None);
    // extra_key is the cache namespace when cache_salt is absent; empty strings mean none.
    let p = prepared(r#"{"input_ids":[1],"extra_key":"ek"}"#);
    assert_eq!(p.subs[0].request.routing.cache_salt.as_deref(), Some("ek"));
    let p = prepared(r#"{"input_ids":[1],"extra_key":"","cache_salt":""}"#);
    assert_eq!(p.subs[0].request.routing.cache_salt, None);
}

#[test]
fn batch_with_rid_list_str_and_none() {
    let body = r#"{"input_ids":[[1,2],[3]],"rid":["r-a","r-b"],"sampling_params":[{"max_new_tokens":4},{"max_new_tokens":5,"ignore_eos":false}],"return_logprob":[true,false],"lora_path":["l0",null],"bootstrap_room":[null,null],"keep":{"k":1},"image_data":null,"stream":true}"#;
    let p = prepared(body);
    assert!(p.stream);
    assert_eq!(p.client_id, None);
    let keys: Vec<&str> = p.subs.iter().map(|s| s.abort_key.as_str()).collect();
    assert_eq!(keys, ["r-a", "r-b"]);
    let (a, b) = (&p.subs[0].request, &p.subs[1].request);
    assert_eq!(a.token_ids, vec![1, 2]);
    assert_eq!(b.token_ids, vec![3]);
    assert_eq!((a.stop.max_tokens, b.stop.max_tokens), (Some(4), Some(5)));
    assert_eq!((a.output.logprobs, b.output.logprobs), (Some(0), None));
    assert_eq!(a.routing.lora.as_deref(), Some("l0"));
    assert_eq!(b.routing.lora, None);
    assert_eq!(
        serde_json::to_string(&with_ids(a)).unwrap(),
        r#"{"input_ids":[1,2],"rid":"r-a","sampling_params":{"max_new_tokens":4},"return_logprob":true,"lora_path":"l0","bootstrap_room":null,"keep":{"k":1},"image_data":null,"stream":true}"#
    );
    assert_eq!(
        serde_json::to_string(&with_ids(b)).unwrap(),
        r#"{"input_ids":[3],"rid":"r-b","sampling_params":{"max_new_tokens":5,"ignore_eos":false},"return_logprob":false,"lora_path":null,"bootstrap_room":null,"keep":{"k":1},"image_data":null,"stream":true}"#
    );

    let p = prepared(r#"{"input_ids":[[1],[2],[3]],"rid":"base"}"#);
    let keys: Vec<&str> = p.subs.iter().map(|s| s.abort_key.as_str()).collect();
    assert_eq!(keys, ["base_0", "base_1", "base_2"]);
    assert_eq!(p.client_id.as_deref(), Some("base"));
    assert_eq!(p.subs[2].request.native.body["rid"], "base_2");

    let p = prepared(r#"{"input_ids":[[1],[2]]}"#);
    assert_ne!(p.subs[0].abort_key, p.subs[1].abort_key);
    assert!(p.subs.iter().all(|s| s.abort_key.len() == 32));
    assert!(p.subs[0].request.native.body.get("rid").is_none());
}

#[test]
fn parallel_sampling_fans_out_batch_major() {
    let p =
        prepared(r#"{"input_ids":[5,6],"rid":"mine","sampling_params":{"n":3,"temperature":0.8}}"#);
    assert_eq!(p.subs.len(), 3);
    let keys: Vec<&str> = p.subs.iter().map(|s| s.abort_key.as_str()).collect();
    for k in &keys {
        assert_eq!(k.len(), 32, "fresh uuid4 hex rid");
        assert_ne!(*k, "mine");
    }
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);
    for s in &p.subs {
        assert_eq!(s.request.sampling.n, 1);
        assert_eq!(s.request.token_ids, vec![5, 6]);
        assert_eq!(s.request.native.body["sampling_params"]["n"], 1);
        assert_eq!(
            s.request.native.body["rid"].as_str(),
            Some(s.abort_key.as_str())
        );
        assert_eq!(with_ids(&s.request)["input_ids"], json!([5, 6]));
    }
    let p = prepared(r#"{"input_ids":[[1],[2]],"sampling_params":{"n":2},"return_logprob":true}"#);
    let prompts: Vec<Vec<u32>> = p.subs.iter().map(|s| s.request.token_ids.clone()).collect();
    assert_eq!(prompts, vec![vec![1], vec![1], vec![2], vec![2]]);
    assert!(p.subs.iter().all(|s| s.request.output.logprobs == Some(0)));
    // n = 1 (or less) does not fan out.
    assert_eq!(
        prepared(r#"{"input_ids":[1],"sampling_params":{"n":1}}"#)
            .subs
            .len(),
        1
    );
}

#[test]
fn put_and_post_and_catalog() {
    use genfront_sglang::CATALOG_ENTRY;
    assert_eq!(CATALOG_ENTRY.name, "sglang");
    assert_eq!(CATALOG_ENTRY.native_path, "/generate");
    assert_eq!(
        CATALOG_ENTRY.native_methods,
        [http::Method::POST, http::Method::PUT]
    );
    assert_eq!(
        CATALOG_ENTRY.generate_methods,
        [http::Method::POST, http::Method::PUT]
    );
    let f = (CATALOG_ENTRY.build)(&Default::default());
    assert_eq!(f.name(), "sglang");
    let abort = f.abort_route().unwrap();
    assert_eq!(abort.path, "/abort_request");
    assert_eq!(
        (abort.parse)(br#"{"rid":"abc","abort_all":false}"#),
        Ok(genfront_format::AbortSelector::Prefix("abc".into()))
    );
    let aux: Vec<&str> = f.aux_routes().iter().map(|r| r.path).collect();
    assert_eq!(
        aux,
        [
            "/model_info",
            "/get_model_info",
            "/server_info",
            "/get_server_info",
            "/health_generate"
        ]
    );
    if let genfront_format::AuxKind::ModelInfo(info) = f.aux_routes()[0].kind {
        let body = json_of(&info(&engine(), &genfront_format::FleetView::default()).body);
        assert_eq!(body["weight_version"], "default");
        let v2 = genfront_format::FleetView {
            weight_version: Some("v2"),
        };
        assert_eq!(json_of(&info(&engine(), &v2).body)["weight_version"], "v2");
        assert_eq!(body["model_path"], "genfront-mock");
        assert_eq!(body["is_generation"], true);
    } else {
        panic!("model info route");
    }
}

#[test]
fn client_bootstrap_fields_are_accepted_and_forwarded() {
    // SGLang's own server accepts the P/D bootstrap fields from any client (an aggregated
    // server ignores them): genfront validates them as SGLang does and forwards them as sent;
    // on a P/D route the engine client writes the router's over them (tests/client/engine.rs).
    for body in [
        r#"{"input_ids":[1],"bootstrap_room":9223372036854775807}"#,
        r#"{"input_ids":[1],"bootstrap_room":9223372036854775808}"#,
        r#"{"input_ids":[1],"bootstrap_host":"10.0.0.1"}"#,
        r#"{"input_ids":[1],"bootstrap_host":["h"]}"#,
        r#"{"input_ids":[1],"bootstrap_port":8998}"#,
        r#"{"input_ids":[1],"bootstrap_port":0}"#,
        r#"{"input_ids":[[1],[2]],"bootstrap_room":[null,7]}"#,
        r#"{"input_ids":[1],"stream":true,"bootstrap_room":1}"#,
        r#"{"input_ids":[1],"bootstrap_host":null,"bootstrap_port":null,"bootstrap_room":null}"#,
        r#"{"input_ids":[[1],[2]],"bootstrap_room":[null,null]}"#,
    ] {
        let p = prepared(body);
        let sent: Value = serde_json::from_str(body).unwrap();
        assert!(p.subs.iter().all(|r| r.request.pd.is_none()), "{body}");
        if let [one] = p.subs.as_slice() {
            for k in ["bootstrap_host", "bootstrap_port", "bootstrap_room"] {
                assert_eq!(one.request.native.body.get(k), sent.get(k), "{body}");
            }
        }
    }
    // A set one has no meaning on another engine kind: recorded as native-only.
    let p = prepared(r#"{"input_ids":[1],"bootstrap_room":7,"bootstrap_host":null}"#);
    assert_eq!(p.subs[0].request.native_only, ["bootstrap_room"]);
    // Types are SGLang's (pydantic, then the contract gate).
    assert_eq!(
        rejected(r#"{"input_ids":[1],"bootstrap_room":"x"}"#)
            .error
            .status(),
        StatusCode::BAD_REQUEST
    );
    // A batch list shorter than the batch: SGLang indexes past it (`IndexError`, a 500);
    // genfront's 400 names it.
    assert_eq!(
        rejected(r#"{"input_ids":[[1],[2]],"bootstrap_room":[7]}"#).error,
        GenerateError::validation(
            "The length of bootstrap_room should be equal to the batch size."
        )
    );
    // The optional companions are the client's on an aggregated engine (miles sends
    // `disagg_prefill_dp_rank`).
    let p = prepared(r#"{"input_ids":[1],"disagg_prefill_dp_rank":1,"bootstrap_pair_key":"k"}"#);
    assert_eq!(p.subs[0].request.native.body["disagg_prefill_dp_rank"], 1);
}

/// The native body with the typed ids written into its `input_ids` placeholder, as the SGLang
/// engine client sends it.
fn with_ids(r: &genfront_protocol::EngineRequest) -> Value {
    let mut body = r.native.body.clone();
    if body.get("input_ids").is_some_and(Value::is_null) {
        body["input_ids"] = json!(r.token_ids);
    }
    body
}
