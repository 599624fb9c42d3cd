use super::{StreamCounter, StreamStep, unary_tokens};
use crate::args::Format;
use crate::error::ErrorKind;

/// `sglang/examples.jsonl` #3: a unary reply with `completion_tokens` and 32 `output_ids`.
const SGL_UNARY: &str = r#"{"text": " Paris. It is the largest city in Europe and the second largest city in the world. It is located in the south of France, on the banks of the", "output_ids": [12095, 13, 1084, 374, 279, 7772, 3283, 304, 4505, 323, 279, 2086, 7772, 3283, 304, 279, 1879, 13, 1084, 374, 7407, 304, 279, 9806, 315, 9625, 11, 389, 279, 13959, 315, 279], "meta_info": {"id": "da1400d4dd1243d988babe6b3b0f1d07", "finish_reason": {"type": "length", "length": 32}, "prompt_tokens": 5, "weight_version": "default", "total_retractions": 0, "completion_tokens": 32, "cached_tokens": 2, "cached_tokens_details": null, "dp_rank": null, "e2e_latency": 0.1991789350286126, "response_sent_to_client_ts": 1773649398.4025595}}"#;

fn steps(format: Format, events: &[&str]) -> (Vec<Result<StreamStep, ErrorKind>>, u64) {
    let mut c = StreamCounter::new(format);
    let out = events.iter().map(|e| c.on_event(e.as_bytes())).collect();
    (out, c.total())
}

fn toks(n: u64) -> Result<StreamStep, ErrorKind> {
    Ok(StreamStep::Tokens { new_tokens: n })
}

#[test]
fn sglang_unary_counts_completion_tokens() {
    assert_eq!(unary_tokens(Format::Sglang, SGL_UNARY.as_bytes()), Ok(32));
    // Without meta_info.completion_tokens, the ids count.
    let body = r#"{"output_ids":[1,2,3],"meta_info":{"id":"x","finish_reason":{"type":"stop","matched":2}}}"#;
    assert_eq!(unary_tokens(Format::Sglang, body.as_bytes()), Ok(3));
}

#[test]
fn sglang_packed_answers_count_completion_tokens() {
    let body = r#"{"output_ids":{"b64zstd":"KLUv/SAIQQAAAQAAAAIAAAA="},"meta_info":{"completion_tokens":2}}"#;
    assert_eq!(unary_tokens(Format::Sglang, body.as_bytes()), Ok(2));
}

#[test]
fn sglang_unary_errors() {
    let abort = r#"{"text":"","output_ids":[],"meta_info":{"id":"x","finish_reason":{"type":"abort","message":"Aborted","status_code":null,"err_type":null},"completion_tokens":0}}"#;
    assert_eq!(
        unary_tokens(Format::Sglang, abort.as_bytes()),
        Err(ErrorKind::Aborted)
    );
    let err = r#"{"error":{"message":"boom"}}"#;
    assert_eq!(
        unary_tokens(Format::Sglang, err.as_bytes()),
        Err(ErrorKind::ErrorEvent)
    );
    assert_eq!(
        unary_tokens(Format::Sglang, b"not json"),
        Err(ErrorKind::InvalidResponse)
    );
    assert_eq!(
        unary_tokens(Format::Sglang, b"{}"),
        Err(ErrorKind::InvalidResponse)
    );
    // A batch answer is not what the bench sends.
    assert_eq!(
        unary_tokens(Format::Sglang, b"[{}]"),
        Err(ErrorKind::InvalidResponse)
    );
}

#[test]
fn sglang_cumulative_stream() {
    let (s, total) = steps(
        Format::Sglang,
        &[
            r#"{"text":" Paris","output_ids":[12095],"meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,"completion_tokens":1,"cached_tokens":0}}"#,
            r#"{"text":" Paris.","output_ids":[12095,13],"meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,"completion_tokens":2,"cached_tokens":0}}"#,
            r#"{"text":" Paris. It is","output_ids":[12095,13,1084,374],"meta_info":{"id":"a","finish_reason":{"type":"length","length":4},"prompt_tokens":5,"completion_tokens":4,"cached_tokens":0,"e2e_latency":0.1}}"#,
            "[DONE]",
        ],
    );
    assert_eq!(s, vec![toks(1), toks(1), toks(2), Ok(StreamStep::Done)]);
    assert_eq!(total, 4);
}

#[test]
fn sglang_incremental_stream_with_logprobs() {
    let (s, total) = steps(
        Format::Sglang,
        &[
            r#"{"output_ids":[12095],"meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,"completion_tokens":1,"output_token_logprobs":[[-0.1,12095,null]],"output_top_logprobs":[[[-0.1,12095,null],[-2.5,7,null]]],"input_token_logprobs":[[null,128000,null]]}}"#,
            r#"{"output_ids":[13,1084],"meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,"completion_tokens":3}}"#,
            r#"{"output_ids":[],"meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":5,"completion_tokens":3}}"#,
            "[DONE]",
        ],
    );
    assert_eq!(s, vec![toks(1), toks(2), toks(0), Ok(StreamStep::Done)]);
    assert_eq!(total, 3);
}

#[test]
fn sglang_stream_without_completion_tokens_uses_ids() {
    // Cumulative ids.
    let (s, total) = steps(
        Format::Sglang,
        &[
            r#"{"output_ids":[7]}"#,
            r#"{"output_ids":[7,8]}"#,
            r#"{"output_ids":[7,8,9,10]}"#,
        ],
    );
    assert_eq!(s, vec![toks(1), toks(1), toks(2)]);
    assert_eq!(total, 4);
    // Incremental ids, latched after the first delta.
    let (s, total) = steps(
        Format::Sglang,
        &[
            r#"{"output_ids":[7]}"#,
            r#"{"output_ids":[8]}"#,
            r#"{"output_ids":[7,9,9]}"#,
        ],
    );
    assert_eq!(s, vec![toks(1), toks(1), toks(3)]);
    assert_eq!(total, 5);
    // Historical shape: only text and completion_tokens.
    let (s, _) = steps(
        Format::Sglang,
        &[
            r#"{"text":" The","meta_info":{"prompt_tokens":1811,"completion_tokens":576,"completion_tokens_wo_jump_forward":1,"id":"4874646a6004403ab33cb0efad6d3aa5"}}"#,
        ],
    );
    assert_eq!(s, vec![toks(576)]);
}

#[test]
fn sglang_stream_error_and_abort_frames() {
    let (s, _) = steps(
        Format::Sglang,
        &[
            r#"{"error":{"message":"too long","type":"invalid_request_error","code":400,"retryable":false}}"#,
        ],
    );
    assert_eq!(s, vec![Err(ErrorKind::ErrorEvent)]);
    let (s, _) = steps(
        Format::Sglang,
        &[
            r#"{"meta_info":{"id":"a","finish_reason":{"type":"abort","message":"Abort in waiting queue"},"completion_tokens":0}}"#,
        ],
    );
    assert_eq!(s, vec![Err(ErrorKind::Aborted)]);
    let (s, _) = steps(Format::Sglang, &["{\"output_ids\":[1,"]);
    assert_eq!(s, vec![Err(ErrorKind::InvalidResponse)]);
}

#[test]
fn vllm_unary() {
    let body = r#"{"request_id":"generate-tokens-abc123","model":"m","created":1,"choices":[{"index":0,"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":[28715,5,6],"routed_experts":null}],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null,"output_mode":"tokens"}"#;
    assert_eq!(unary_tokens(Format::Vllm, body.as_bytes()), Ok(3));
    // The older shape has no usage: count the ids.
    let old = r#"{"request_id":"generate-tokens-abc123","choices":[{"index":0,"logprobs":null,"finish_reason":"length","token_ids":[28715],"routed_experts":null}],"prompt_logprobs":null}"#;
    assert_eq!(unary_tokens(Format::Vllm, old.as_bytes()), Ok(1));
    // `sglang/examples`-style prefill leg with no choices.
    let empty = r#"{"request_id":"generate-tokens-abc123","choices":[],"ec_transfer_params":{"h":{"peer_port":5501}}}"#;
    assert_eq!(unary_tokens(Format::Vllm, empty.as_bytes()), Ok(0));
    let err = r#"{"error":{"message":"The model `X` does not exist.","type":"NotFoundError","param":"model","code":404}}"#;
    assert_eq!(
        unary_tokens(Format::Vllm, err.as_bytes()),
        Err(ErrorKind::ErrorEvent)
    );
    let abort = r#"{"choices":[{"index":0,"finish_reason":"abort","token_ids":[]}]}"#;
    assert_eq!(
        unary_tokens(Format::Vllm, abort.as_bytes()),
        Err(ErrorKind::Aborted)
    );
    assert_eq!(
        unary_tokens(Format::Vllm, br#"{"choices":5}"#),
        Err(ErrorKind::InvalidResponse)
    );
}

#[test]
fn vllm_stream_deltas_usage_and_errors() {
    let (s, total) = steps(
        Format::Vllm,
        &[
            r#"{"request_id":"generate-tokens-1","output_mode":"tokens","usage":null,"choices":[{"index":0,"finish_reason":null,"stop_reason":null,"token_ids":[55],"routed_experts":null,"sampling_mask":null,"logprobs":{"content":[{"token_id":55,"logprob":-0.1,"rank":1,"top_logprobs":[{"token_id":55,"logprob":-0.1,"rank":1}]}]}}]}"#,
            r#"{"request_id":"generate-tokens-1","output_mode":"tokens","usage":null,"choices":[{"index":0,"finish_reason":"length","stop_reason":null,"token_ids":[56,57],"weight_versions":[{"version":"default","start":0,"end":3}]}]}"#,
            r#"{"request_id":"generate-tokens-1","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7},"output_mode":"tokens"}"#,
            "[DONE]",
        ],
    );
    assert_eq!(s, vec![toks(1), toks(2), toks(0), Ok(StreamStep::Done)]);
    assert_eq!(total, 3);

    let (s, _) = steps(
        Format::Vllm,
        &[
            r#"{"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}"#,
        ],
    );
    assert_eq!(s, vec![Err(ErrorKind::ErrorEvent)]);
    let (s, _) = steps(
        Format::Vllm,
        &[r#"{"choices":[{"index":0,"finish_reason":"abort","token_ids":[]}]}"#],
    );
    assert_eq!(s, vec![Err(ErrorKind::Aborted)]);
}

#[test]
fn dynamo_fixture_chunk_with_usage() {
    // dynamo-inference-generate/response-stream.json (first chunk): delta and continuous usage agree.
    let chunk = r#"{"request_id":"generate-fixture","choices":[{"index":0,"token_ids":[55],"logprobs":{"content":[{"token":"token_id:55","logprob":-0.1,"bytes":null,"top_logprobs":[{"token":"token_id:55","logprob":-0.1,"bytes":null}]}]},"finish_reason":null,"routed_experts":null}],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5,"prompt_tokens_details":null}}"#;
    let (s, total) = steps(Format::Vllm, &[chunk]);
    assert_eq!(s, vec![toks(1)]);
    assert_eq!(total, 1);
}
