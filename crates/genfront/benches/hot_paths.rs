//! Criterion micro-benchmarks of the per-request and per-token hot paths of both formats:
//! parse + validate + project, SSE frame assembly per token, unary assembly with logprobs, and
//! an SGLang unary answer and a cumulative SGLang stream on the typed path (decode → deltas →
//! re-render) against the relay path (scan → the engine's bytes with the rid edited), and that
//! relay path from the engine's SSE bytes to the client's body chunks (`relay_wire`: splitter,
//! scan, rid edit, framing).
//!
//! Run with `cargo bench -p genfront --bench hot_paths`. Numbers are per iteration; compare runs
//! side by side on the same machine rather than reading absolute times.

#![allow(missing_docs)]

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use genfront_format::{GenerateFormat, ParseInput, Prepared};
use genfront_protocol::{Candidate, EngineInfo, EngineOutput, FinishReason, TokenLogprob, Usage};
use http::HeaderMap;
use serde_json::json;

const PROMPT: usize = 512;
const TOKENS: u32 = 256;

fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h
}

fn sglang(incremental: bool) -> Box<dyn GenerateFormat> {
    let f = genfront_sglang::SglangFormat::new(&genfront_sglang::SglangSettings {
        incremental_streaming: incremental,
    });
    Box::new(f)
}

fn vllm() -> Box<dyn GenerateFormat> {
    Box::new(genfront_vllm::VllmFormat::new())
}

fn sglang_body(stream: bool, logprobs: bool) -> Vec<u8> {
    let ids: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 7919) % 150_000).collect();
    serde_json::to_vec(&json!({
        "rid": "bench", "input_ids": ids, "stream": stream,
        "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0.7, "top_p": 0.95, "ignore_eos": true,
                            "skip_special_tokens": false, "no_stop_trim": true},
        "return_logprob": logprobs, "top_logprobs_num": if logprobs { 5 } else { 0 },
    }))
    .unwrap_or_default()
}

fn vllm_body(stream: bool, logprobs: bool) -> Vec<u8> {
    let ids: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 7919) % 150_000).collect();
    let mut sp =
        json!({"max_tokens": TOKENS, "temperature": 0.7, "top_p": 0.95, "ignore_eos": true});
    if logprobs {
        sp["logprobs"] = json!(5);
    }
    serde_json::to_vec(
        &json!({"request_id": "bench", "token_ids": ids, "stream": stream, "sampling_params": sp}),
    )
    .unwrap_or_default()
}

fn engine() -> EngineInfo {
    EngineInfo {
        routed_experts: false,
        sampling_mask: false,
        ..EngineInfo::default()
    }
}

fn prepare(format: &dyn GenerateFormat, body: &[u8]) -> Prepared {
    let h = headers();
    let info = engine();
    format
        .prepare(ParseInput {
            headers: &h,
            body,
            engine: &info,
        })
        .unwrap_or_else(|r| panic!("bench request rejected: {:?}", r.error))
}

fn outputs(logprobs: bool) -> Vec<EngineOutput> {
    (0..TOKENS)
        .map(|i| {
            let token = (i * 31 + 7) % 150_000;
            EngineOutput {
                token_ids: vec![token],
                logprobs: logprobs.then(|| {
                    vec![TokenLogprob {
                        token_id: token,
                        logprob: -0.25 - f64::from(i % 7) * 0.1,
                        rank: Some(1),
                        top: (0..5)
                            .map(|k| Candidate {
                                token_id: token + k,
                                logprob: -0.25 - f64::from(k) * 0.5,
                                rank: Some(k + 1),
                                text: None,
                            })
                            .collect(),
                        selected: Vec::new(),
                        text: None,
                    }]
                }),
                usage: Some(Usage {
                    prompt_tokens: PROMPT as u32,
                    completion_tokens: i + 1,
                    cached_tokens: 0,
                }),
                finish_reason: (i + 1 == TOKENS).then_some(FinishReason::Length { length: TOKENS }),
                ..EngineOutput::default()
            }
        })
        .collect()
}

fn bench_prepare(c: &mut Criterion) {
    let mut g = c.benchmark_group("prepare");
    g.throughput(Throughput::Elements(1));
    let s = sglang(false);
    let sb = sglang_body(false, true);
    g.bench_function("sglang_512_tokens", |b| {
        b.iter(|| black_box(prepare(&*s, black_box(&sb))))
    });
    let v = vllm();
    let vb = vllm_body(false, true);
    g.bench_function("vllm_512_tokens", |b| {
        b.iter(|| black_box(prepare(&*v, black_box(&vb))))
    });
    g.finish();
}

fn drive(prepared: Prepared, outs: &[EngineOutput], stream: bool) -> usize {
    let mut asm = prepared.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    let mut bytes = 0;
    for o in outs {
        asm.on_output(0, o.clone(), &mut events)
            .unwrap_or_else(|e| panic!("{e}"));
        bytes += events.drain(..).map(|e| e.len()).sum::<usize>();
    }
    if stream {
        asm.finish_stream(&mut events)
            .unwrap_or_else(|e| panic!("{e}"));
        bytes + events.iter().map(Bytes::len).sum::<usize>()
    } else {
        asm.finish_unary()
            .map(|r| r.body.len())
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// (name, format, request body, streaming).
type Case = (String, Box<dyn GenerateFormat>, Vec<u8>, bool);

fn bench_assembly(c: &mut Criterion) {
    let mut g = c.benchmark_group("assemble_256_tokens");
    g.throughput(Throughput::Elements(u64::from(TOKENS)));
    for logprobs in [false, true] {
        let outs = outputs(logprobs);
        let lp = if logprobs { "_logprobs5" } else { "" };
        let cases: Vec<Case> = vec![
            (
                format!("sglang_unary{lp}"),
                sglang(false),
                sglang_body(false, logprobs),
                false,
            ),
            (
                format!("sglang_sse_incremental{lp}"),
                sglang(true),
                sglang_body(true, logprobs),
                true,
            ),
            (
                format!("sglang_sse_cumulative{lp}"),
                sglang(false),
                sglang_body(true, logprobs),
                true,
            ),
            (
                format!("vllm_unary{lp}"),
                vllm(),
                vllm_body(false, logprobs),
                false,
            ),
            (
                format!("vllm_sse{lp}"),
                vllm(),
                vllm_body(true, logprobs),
                true,
            ),
        ];
        for (name, format, body, stream) in cases {
            g.bench_function(&name, |b| {
                b.iter_batched(
                    || prepare(&*format, &body),
                    |p| black_box(drive(p, &outs, stream)),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    g.finish();
}

/// SGLang's unary answer to a request of `TOKENS` new tokens (as the engine writes it: the
/// typed assembler's rendering, `meta_info.id` the dispatch id `rid`).
fn sglang_answer(logprobs: bool, rid: &str) -> Vec<u8> {
    let mut body: serde_json::Value = serde_json::from_slice(&sglang_body(false, logprobs))
        .unwrap_or_else(|e| panic!("bench body: {e}"));
    body["rid"] = json!(rid);
    let p = prepare(&*sglang(false), body.to_string().as_bytes());
    let mut asm = p.assembler;
    for o in outputs(logprobs) {
        asm.on_output(0, o, &mut Vec::new())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    asm.finish_unary()
        .map(|r| r.body.to_vec())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One SGLang unary answer from the engine's bytes to the client's body: `relay` scans it and
/// relays the bytes (rid edited); otherwise it is decoded into a delta and re-rendered.
fn answer_path(prepared: Prepared, answer: &[u8], rid: &str, relay: bool) -> usize {
    use genfront_sglang::client::{DecodeConfig, FrameDecoder, Relay};
    let req = &prepared.subs[0].request;
    let mut dec = FrameDecoder::new(DecodeConfig::for_request(req, 0, false, &[2], None));
    let out = if relay {
        match dec.relay(answer.to_vec(), rid) {
            Relay::Output(o) => *o,
            other => panic!("not relayed: {other:?}"),
        }
    } else {
        dec.decode(answer).unwrap_or_else(|e| panic!("{e}"))
    };
    let mut asm = prepared.assembler;
    asm.on_output(0, out, &mut Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    asm.finish_unary()
        .map(|r| r.body.len())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn bench_relay(c: &mut Criterion) {
    let mut g = c.benchmark_group("sglang_unary_answer_256_tokens");
    g.throughput(Throughput::Elements(1));
    let rid = "0123456789abcdef0123456789abcdef";
    let format = sglang(false);
    for logprobs in [false, true] {
        let answer = sglang_answer(logprobs, rid);
        let body = sglang_body(false, logprobs);
        let lp = if logprobs { "_logprobs5" } else { "" };
        for (path, relay) in [("typed", false), ("relay", true)] {
            g.bench_function(format!("{path}{lp}"), |b| {
                b.iter_batched(
                    || prepare(&*format, &body),
                    |p| black_box(answer_path(p, &answer, rid, relay)),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    g.finish();
}

/// SGLang's cumulative SSE frames (`data` payloads) for a stream of `TOKENS` tokens to dispatch
/// `rid`, as the engine writes them (the typed assembler's rendering).
fn sglang_frames(logprobs: bool, rid: &str) -> Vec<Vec<u8>> {
    let mut body: serde_json::Value = serde_json::from_slice(&sglang_body(true, logprobs))
        .unwrap_or_else(|e| panic!("bench body: {e}"));
    body["rid"] = json!(rid);
    let p = prepare(&*sglang(false), body.to_string().as_bytes());
    let mut asm = p.assembler;
    let mut events = Vec::new();
    for o in outputs(logprobs) {
        asm.on_output(0, o, &mut events)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    events.into_iter().map(|e| e.to_vec()).collect()
}

/// One cumulative SGLang stream from the engine's frames to the client's events: `relay` scans
/// each frame and relays it (rid edited); otherwise each is decoded and re-rendered.
fn stream_path(prepared: Prepared, frames: &[Vec<u8>], rid: &str, relay: bool) -> usize {
    use genfront_sglang::client::{DecodeConfig, FrameDecoder, Relay};
    let req = &prepared.subs[0].request;
    let mut dec = FrameDecoder::new(DecodeConfig::for_request(req, 0, false, &[2], None));
    let mut asm = prepared.assembler;
    let mut events = Vec::new();
    let mut bytes = 0;
    for f in frames {
        let out = if relay {
            match dec.relay_frame(f.clone(), rid) {
                Relay::Output(o) => *o,
                other => panic!("not relayed: {other:?}"),
            }
        } else {
            dec.decode(f).unwrap_or_else(|e| panic!("{e}"))
        };
        asm.on_output(0, out, &mut events)
            .unwrap_or_else(|e| panic!("{e}"));
        bytes += events.drain(..).map(|e| e.len()).sum::<usize>();
    }
    bytes
}

/// The relay path of one cumulative SGLang stream from the wire to the client's body: the
/// engine's SSE bytes in network-sized reads through the splitter, each frame scanned and
/// relayed (rid edited), the events framed into body chunks as the SSE body frames them (large
/// frames handed on uncopied). Returns the body bytes.
fn wire_path(prepared: Prepared, wire: &[u8], rid: &str) -> usize {
    use genfront_sglang::client::{DecodeConfig, FrameDecoder, Relay, SseSplitter};
    let req = &prepared.subs[0].request;
    let mut dec = FrameDecoder::new(DecodeConfig::for_request(req, 0, false, &[2], None));
    let mut asm = prepared.assembler;
    let framing = sglang(false).framing();
    let mut splitter = SseSplitter::new();
    let mut events = Vec::new();
    let mut chunks = std::collections::VecDeque::new();
    let mut bytes = 0;
    for read in wire.chunks(16 * 1024) {
        splitter.push(read);
        while let Some(frame) = splitter.next_event().unwrap_or_else(|e| panic!("{e}")) {
            if frame == b"[DONE]" {
                continue;
            }
            let out = match dec.relay_frame(frame, rid) {
                Relay::Output(o) => *o,
                other => panic!("not relayed: {other:?}"),
            };
            asm.on_output(0, out, &mut events)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        framing.frame_events_into(&mut events, false, 4096, &mut chunks);
        bytes += chunks.drain(..).map(|c| c.len()).sum::<usize>();
    }
    bytes
}

fn bench_stream_relay(c: &mut Criterion) {
    let mut g = c.benchmark_group("sglang_cumulative_stream_256_tokens");
    g.throughput(Throughput::Elements(u64::from(TOKENS)));
    let rid = "0123456789abcdef0123456789abcdef";
    let format = sglang(false);
    for logprobs in [false, true] {
        let frames = sglang_frames(logprobs, rid);
        let body = sglang_body(true, logprobs);
        let lp = if logprobs { "_logprobs5" } else { "" };
        for (path, relay) in [("typed", false), ("relay", true)] {
            g.bench_function(format!("{path}{lp}"), |b| {
                b.iter_batched(
                    || prepare(&*format, &body),
                    |p| black_box(stream_path(p, &frames, rid, relay)),
                    BatchSize::SmallInput,
                )
            });
        }
        let mut wire = Vec::new();
        for f in &frames {
            wire.extend_from_slice(b"data: ");
            wire.extend_from_slice(f);
            wire.extend_from_slice(b"\n\n");
        }
        wire.extend_from_slice(b"data: [DONE]\n\n");
        g.bench_function(format!("relay_wire{lp}"), |b| {
            b.iter_batched(
                || prepare(&*format, &body),
                |p| black_box(wire_path(p, &wire, rid)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_prepare,
    bench_assembly,
    bench_relay,
    bench_stream_relay
);
criterion_main!(benches);
