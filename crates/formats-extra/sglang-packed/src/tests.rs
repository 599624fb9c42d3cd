use genfront_format::{GenerateFormat, ParseInput, Prepared, Rejection};
use genfront_protocol::{EngineInfo, EngineOutput, FinishReason, Usage};
use http::HeaderMap;
use serde_json::{Value, json};

use super::*;
use crate::codec::pack;

fn engine() -> EngineInfo {
    EngineInfo {
        vocab_size: Some(1000),
        max_context_len: 4096,
        ..EngineInfo::default()
    }
}

fn packed_format() -> SglangPackedFormat {
    SglangPackedFormat::new(SglangFormat::default(), 1 << 20)
}

fn prepare(f: &dyn GenerateFormat, body: &Value) -> Result<Prepared, Rejection> {
    let bytes = serde_json::to_vec(body).expect("json");
    // What a JSON client sends: SGLang reads no other body as JSON.
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    f.prepare(ParseInput {
        headers: &headers,
        body: &bytes,
        engine: &engine(),
    })
}

/// What the engine would be sent, per sub-request (a minted rid replaced by `RID`: SGLang mints
/// one per copy of a batch with `n > 1`).
fn subs(p: &Prepared) -> Vec<String> {
    p.subs
        .iter()
        .map(|s| format!("{:?}", s.request).replace(&s.abort_key, "RID"))
        .collect()
}

#[test]
fn a_packed_request_projects_like_its_plain_twin() {
    let plain = json!({"rid": "r", "input_ids": [[1, 2, 3], [4]], "return_logprob": true,
        "sampling_params": {"max_new_tokens": 2, "n": 2}});
    let packed = json!({"rid": "r", "input_ids": [{"b64zstd": pack(&[1, 2, 3])}, [4]],
        "return_logprob": true, "sampling_params": {"max_new_tokens": 2, "n": 2},
        "packed_output": true});
    let a = prepare(&SglangFormat::default(), &plain).expect("plain");
    let b = prepare(&packed_format(), &packed).expect("packed");
    assert_eq!(subs(&a), subs(&b));
    assert_eq!((a.client_id, a.stream), (b.client_id, b.stream));
}

#[test]
fn out_of_vocabulary_packed_ids_get_sglangs_own_refusal() {
    let plain = json!({"input_ids": [1, 5000]});
    let packed = json!({"input_ids": {"b64zstd": pack(&[1, 5000])}});
    let a = prepare(&SglangFormat::default(), &plain).expect_err("refused");
    let b = prepare(&packed_format(), &packed).expect_err("refused");
    assert_eq!(a.error, b.error);
    assert!(a.error.public_message().contains("input_ids"));
}

fn output(tokens: &[u32], finish: bool) -> EngineOutput {
    EngineOutput {
        token_ids: tokens.to_vec(),
        logprobs: Some(
            tokens
                .iter()
                .map(|&t| genfront_protocol::TokenLogprob {
                    token_id: t,
                    logprob: -0.5,
                    ..Default::default()
                })
                .collect(),
        ),
        finish_reason: finish.then_some(FinishReason::Length { length: 2 }),
        usage: finish.then(|| Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn answer(f: &dyn GenerateFormat, body: &Value) -> (Value, Vec<Value>) {
    let mut unary = prepare(f, body).expect("accepted");
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let mut streamed = prepare(f, &stream_body).expect("accepted");
    let mut events = Vec::new();
    for out in [output(&[7], false), output(&[9], true)] {
        unary
            .assembler
            .on_output(0, out.clone(), &mut Vec::new())
            .expect("delta");
        streamed
            .assembler
            .on_output(0, out, &mut events)
            .expect("delta");
    }
    streamed.assembler.finish_stream(&mut events).expect("end");
    let r = unary.assembler.finish_unary().expect("answer");
    let v: Value = serde_json::from_slice(&r.body).expect("json");
    let evs = events
        .iter()
        .map(|e| serde_json::from_slice(e).expect("event json"))
        .collect();
    (v, evs)
}

fn without_timing(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("meta_info").and_then(Value::as_object_mut) {
        m.remove("e2e_latency");
        m.remove("response_sent_to_client_ts");
    }
    v
}

#[test]
fn a_packed_answer_unpacks_to_the_plain_answer() {
    let plain = json!({"rid": "r", "input_ids": [1, 2, 3], "return_logprob": true,
        "top_logprobs_num": 0, "sampling_params": {"max_new_tokens": 2}});
    let mut packed = plain.clone();
    packed["input_ids"] = json!({"b64zstd": pack(&[1, 2, 3])});
    packed["packed_output"] = json!(true);
    let (a, a_events) = answer(&SglangFormat::default(), &plain);
    let (mut b, b_events) = answer(&packed_format(), &packed);
    assert!(b["output_ids"]["b64zstd"].is_string(), "{b}");
    assert!(b["meta_info"]["output_token_logprobs"]["ids"]["b64zstd"].is_string());
    answer::unpack_answer(&mut b, 1 << 20).expect("unpacks");
    assert_eq!(without_timing(a), without_timing(b));
    assert_eq!(a_events.len(), b_events.len());
    for (a, mut b) in a_events.into_iter().zip(b_events) {
        answer::unpack_answer(&mut b, 1 << 20).expect("unpacks");
        assert_eq!(without_timing(a), without_timing(b));
    }
}

#[test]
fn without_packed_output_the_answer_is_sglangs_byte_for_byte() {
    let plain =
        json!({"rid": "r", "input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}});
    let mut packed = plain.clone();
    packed["input_ids"] = json!({"b64zstd": pack(&[1, 2, 3])});
    let (a, _) = answer(&SglangFormat::default(), &plain);
    let (b, _) = answer(&packed_format(), &packed);
    assert_eq!(without_timing(a), without_timing(b));
}

#[test]
fn malformed_packing_is_sglangs_400_never_a_panic() {
    let f = packed_format();
    let b64 = |b: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(b)
    };
    let bomb = zstd::bulk::compress(&vec![0u8; 8 << 20], 19).expect("compress");
    let cases = [
        (
            json!({"input_ids": {"b64zstd": "@@"}}),
            "body.input_ids: b64zstd is not valid base64",
        ),
        (
            json!({"input_ids": {"b64zstd": b64(b"nope")}}),
            "body.input_ids: b64zstd is not a valid zstd",
        ),
        (
            json!({"input_ids": {"b64zstd": b64(&zstd::bulk::compress(&[1, 2, 3, 4, 5], 3).expect("z"))}}),
            "body.input_ids: b64zstd decompresses to 5 bytes",
        ),
        (
            json!({"input_ids": [[1], {"b64zstd": b64(&bomb)}]}),
            "body.input_ids.1: b64zstd decompresses to more than 1048576 bytes",
        ),
        (
            json!({"input_ids": [1], "packed_output": 1, "stream": true}),
            "body.packed_output: Input should be a valid boolean",
        ),
    ];
    for (body, start) in cases {
        let r = prepare(&f, &body).expect_err("refused");
        let resp = f.error_response(&r.error, r.stream);
        assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{body}");
        let v: Value = serde_json::from_slice(&resp.body).expect("json");
        assert_eq!(v["type"], "Bad Request", "{v}");
        let m = v["message"].as_str().unwrap_or_default();
        assert!(m.starts_with(start), "{m} does not start with {start}");
    }
}

#[test]
fn the_catalog_entry_and_rules_are_consistent() {
    let f = (CATALOG_ENTRY.build)(&FormatSettings::default());
    assert_eq!(f.name(), FORMAT_NAME);
    assert!(std::ptr::eq(f.framing(), &genfront_sglang::FRAMING));
    let base = genfront_format::pd::MergeRules::parse(genfront_sglang::PD_RULES).expect("sglang");
    let ext = genfront_format::pd::MergeRules::parse(PD_RULES).expect("packed");
    let merged = base.extend(&ext).expect("extends sglang");
    merged.check_complete().expect("complete");
    assert_eq!(merged, merge_rules());
    // Packing changes no merge: the id fields join as SGLang's do (decode, concatenate, encode).
    for field in ext.rules.keys() {
        assert_eq!(merged.rule(field), base.rule(field), "{field}");
    }
    let small = FormatSettings::default().with(
        MAX_UNPACKED_BYTES.flag,
        genfront_format::SettingValue::Integer(8),
    );
    let f = (CATALOG_ENTRY.build)(&small);
    let body = json!({"input_ids": {"b64zstd": pack(&[1, 2, 3])}});
    let r = prepare(&*f, &body).expect_err("over the limit");
    assert!(r.error.public_message().contains("more than 8 bytes"));
}
