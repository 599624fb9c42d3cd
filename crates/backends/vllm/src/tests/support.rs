//! Shared helpers: a test engine, request preparation, error rendering, output builders.

use bytes::Bytes;
use genfront_format::{GenerateError, GenerateFormat, ParseInput, Prepared, Rejection};
use genfront_protocol::{Candidate, EngineInfo, EngineOutput, FinishReason, TokenLogprob};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};

use crate::VllmFormat;

/// The served model of [`engine`].
pub const MODEL: &str = "test-model";

/// A small engine: vocab 1000, context 1024, max 20 logprobs, 256 sequences.
pub fn engine() -> EngineInfo {
    EngineInfo {
        model: MODEL.to_owned(),
        model_aliases: Vec::new(),
        vocab_size: Some(1000),
        max_context_len: 1024,
        eos_token_ids: vec![2],
        max_logprobs: Some(20),
        max_num_seqs: Some(256),
        routed_experts: true,
        sampling_mask: true,
        tokenizer: Some(false),
        features: Default::default(),
        server_info: None,
    }
}

/// `Content-Type: application/json`.
pub fn json_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h
}

/// Prepare raw bytes with the given headers and engine, on a server run with
/// `--enable-prompt-tokens-details` (the tests read `usage.prompt_tokens_details`).
pub fn prepare_raw(
    body: &[u8],
    headers: &HeaderMap,
    engine: &EngineInfo,
) -> Result<Prepared, Rejection> {
    VllmFormat::new()
        .with_prompt_tokens_details(true)
        .prepare(ParseInput {
            headers,
            body,
            engine,
        })
}

/// Prepare a JSON body against [`engine`].
pub fn prepare(body: &Value) -> Result<Prepared, Rejection> {
    prepare_on(body, &engine())
}

/// Prepare a JSON body against `engine`.
pub fn prepare_on(body: &Value, engine: &EngineInfo) -> Result<Prepared, Rejection> {
    let bytes = serde_json::to_vec(body).expect("serialise");
    prepare_raw(&bytes, &json_headers(), engine)
}

/// A valid request with the given `sampling_params`.
pub fn with_sampling(sampling: Value) -> Value {
    json!({"token_ids": [1, 2, 3], "sampling_params": sampling})
}

/// The rejection of a body that must fail.
pub fn reject(body: &Value) -> Rejection {
    match prepare(body) {
        Ok(p) => panic!("expected a rejection, got {p:?}"),
        Err(r) => r,
    }
}

/// The native JSON error answer (status, body) for an error, rendered as before headers.
pub fn render(error: &GenerateError) -> (StatusCode, Value) {
    let r = VllmFormat::new().error_response(error, false);
    assert_eq!(r.content_type, "application/json");
    (
        r.status,
        serde_json::from_slice(&r.body).expect("error body is JSON"),
    )
}

/// Assert a body is rejected with HTTP 400 `BadRequestError`, `message` and `param`.
pub fn assert_bad_request(body: &Value, message: &str, param: Option<&str>) {
    let rejection = reject(body);
    let (status, json) = render(&rejection.error);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert_eq!(
        json,
        json!({"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}),
    );
}

/// Assert a body is rejected with a pydantic-style schema error; returns the message.
pub fn assert_schema(body: &Value, param: Option<&str>) -> String {
    let rejection = reject(body);
    let (status, json) = render(&rejection.error);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert_eq!(json["error"]["type"], "Bad Request", "{json}");
    assert_eq!(json["error"]["code"], 400);
    assert_eq!(json["error"]["param"], json!(param), "{json}");
    json["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned()
}

/// A delta for choice `index` with tokens and optional logprobs.
pub fn delta(index: u32, tokens: &[u32]) -> EngineOutput {
    EngineOutput {
        index,
        token_ids: tokens.to_vec(),
        ..EngineOutput::default()
    }
}

/// A logprob entry for `token` with `top` alternatives `(id, logprob)` ranked 1.. in order.
pub fn lp(token: u32, logprob: f64, rank: u32, top: &[(u32, f64)]) -> TokenLogprob {
    TokenLogprob {
        token_id: token,
        logprob,
        rank: Some(rank),
        top: top
            .iter()
            .enumerate()
            .map(|(i, (id, l))| Candidate {
                token_id: *id,
                logprob: *l,
                rank: Some(i as u32 + 1),
                text: None,
            })
            .collect(),
        selected: Vec::new(),
        text: None,
    }
}

/// `Length` finish.
pub fn length(n: u32) -> Option<FinishReason> {
    Some(FinishReason::Length { length: n })
}

/// Feed outputs to a prepared request and return the unary JSON body.
pub fn run_unary(prepared: Prepared, outputs: Vec<EngineOutput>) -> Value {
    let mut asm = prepared.assembler;
    let mut events = Vec::new();
    for o in outputs {
        asm.on_output(0, o, &mut events).expect("on_output");
    }
    assert!(events.is_empty());
    let resp = asm.finish_unary().expect("finish_unary");
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.content_type, "application/json");
    serde_json::from_slice(&resp.body).expect("unary JSON")
}

/// Feed outputs to a prepared streaming request and return the parsed SSE payloads.
pub fn run_stream(prepared: Prepared, outputs: Vec<EngineOutput>) -> Vec<Value> {
    let mut asm = prepared.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    for o in outputs {
        asm.on_output(0, o, &mut events).expect("on_output");
    }
    asm.finish_stream(&mut events).expect("finish_stream");
    events
        .iter()
        .map(|b| serde_json::from_slice(b).expect("event JSON"))
        .collect()
}
