//! Test helpers: preparing requests, a tiny synthetic engine, and driving the assembler.

use bytes::Bytes;
use genfront_format::{
    GenerateError, GenerateFormat, NativeResponse, ParseInput, Prepared, Rejection,
};
use genfront_protocol::{
    Candidate, EngineInfo, EngineOutput, EngineRequest, FinishReason, PromptLogprobs,
    RoutedExperts, StopMatch, TokenLogprob, Usage,
};
use genfront_sglang::SglangFormat;
use http::HeaderMap;
use serde_json::Value;

/// The model facts tests validate against. Server features are unknown (as for a real engine
/// that has not reported them): LoRA and DP-rank checks are left to the engine; tests of the
/// flag-dependent rules use [`mock_engine`].
pub fn engine() -> EngineInfo {
    EngineInfo {
        vocab_size: Some(1000),
        max_context_len: 4096,
        features: genfront_protocol::EngineFeatures::default(),
        ..EngineInfo::default()
    }
}

/// [`engine`] with the mock's known features (LoRA off, one DP rank).
pub fn mock_engine() -> EngineInfo {
    EngineInfo {
        features: genfront_protocol::EngineFeatures::mock(),
        ..engine()
    }
}

pub fn format(incremental: bool) -> SglangFormat {
    SglangFormat::new(&genfront_sglang::SglangSettings {
        incremental_streaming: incremental,
    })
}

/// `body` through the format with `headers`, plus `Content-Type: application/json` when they
/// have none (what a JSON client sends: SGLang reads no other body as JSON).
pub fn prepare_with(
    body: &str,
    headers: &HeaderMap,
    info: &EngineInfo,
    incremental: bool,
) -> Result<Prepared, Rejection> {
    let mut headers = headers.clone();
    headers
        .entry(http::header::CONTENT_TYPE)
        .or_insert(http::HeaderValue::from_static("application/json"));
    format(incremental).prepare(ParseInput {
        headers: &headers,
        body: body.as_bytes(),
        engine: info,
    })
}

pub fn prepare(body: &str) -> Result<Prepared, Rejection> {
    prepare_with(body, &HeaderMap::new(), &engine(), false)
}

pub fn prepared(body: &str) -> Prepared {
    match prepare(body) {
        Ok(p) => p,
        Err(r) => panic!("unexpected rejection of {body}: {:?}", r.error),
    }
}

/// The rejection of `body` (panics when it is accepted).
pub fn rejected(body: &str) -> Rejection {
    match prepare(body) {
        Ok(p) => panic!("unexpectedly accepted {body}: {p:?}"),
        Err(r) => r,
    }
}

/// The native error answer for `body` as the frontend would send it.
pub fn error_answer(body: &str) -> NativeResponse {
    let r = rejected(body);
    format(false).error_response(&r.error, r.stream)
}

pub fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("invalid JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// How the synthetic engine answers one engine request.
#[derive(Debug, Clone)]
pub struct Script {
    /// Output tokens per delta (empty deltas allowed).
    pub chunks: Vec<usize>,
    pub finish: FinishReason,
    /// Seed for token ids and logprobs.
    pub seed: u32,
    pub cached_tokens: u32,
}

impl Script {
    pub fn tokens(n: usize) -> Self {
        Self {
            chunks: vec![1; n],
            finish: FinishReason::Length { length: n as u32 },
            seed: 7,
            cached_tokens: 0,
        }
    }
}

fn lp(seed: u32, pos: u32) -> f64 {
    -(f64::from((seed.wrapping_mul(31).wrapping_add(pos * 17)) % 1000) / 97.0) - 0.25
}

fn token_logprob(
    req: &EngineRequest,
    seed: u32,
    pos: u32,
    token_id: u32,
    top_k: u32,
) -> TokenLogprob {
    TokenLogprob {
        token_id,
        logprob: lp(seed, pos),
        rank: None,
        top: (0..top_k)
            .map(|j| Candidate {
                token_id: (token_id + j) % 1000,
                logprob: lp(seed, pos) - f64::from(j) * 0.5,
                rank: Some(j + 1),
                text: None,
            })
            .collect(),
        selected: req
            .output
            .token_ids_logprobs
            .iter()
            .map(|&t| Candidate {
                token_id: t,
                logprob: lp(seed ^ t, pos),
                rank: None,
                text: None,
            })
            .collect(),
        text: None,
    }
}

/// A tiny deterministic engine: the deltas it sends for `req` under `script`.
pub fn synth(req: &EngineRequest, script: &Script) -> Vec<EngineOutput> {
    let top_k = req.output.logprobs.unwrap_or(0);
    let prompt_len = req.token_ids.len() as u32;
    let mut outs = Vec::new();
    let mut produced = 0u32;
    let (layers, k) = (2u32, 2u32);
    let chunks = if script.chunks.is_empty() {
        vec![0]
    } else {
        script.chunks.clone()
    };
    for (c, &len) in chunks.iter().enumerate() {
        let ids: Vec<u32> = (0..len as u32)
            .map(|j| (script.seed * 13 + (produced + j) * 7) % 1000)
            .collect();
        let logprobs = req.output.logprobs.map(|_| {
            ids.iter()
                .enumerate()
                .map(|(j, &id)| {
                    token_logprob(req, script.seed, produced + j as u32 + 1000, id, top_k)
                })
                .collect()
        });
        let prompt_logprobs = match (&req.output.prompt_logprobs, c) {
            (Some(opts), 0) => Some(PromptLogprobs {
                start: opts.start.min(prompt_len.saturating_sub(1)),
                entries: (opts.start.min(prompt_len.saturating_sub(1))..prompt_len)
                    .map(|pos| {
                        (pos > 0).then(|| {
                            token_logprob(
                                req,
                                script.seed,
                                pos,
                                req.token_ids[pos as usize],
                                opts.top_k,
                            )
                        })
                    })
                    .collect(),
                first_text: None,
                first_token_id: None,
            }),
            _ => None,
        };
        // Rows for the prompt (first delta, from the start position) and one per new token.
        let rows = if c == 0 {
            prompt_len.saturating_sub(req.output.routed_experts_start) + len as u32
        } else {
            len as u32
        };
        let routed_experts = req.output.routed_experts.then(|| RoutedExperts {
            num_layers: layers,
            top_k: k,
            ids: (0..rows * layers * k)
                .map(|x| ((x + produced) % 64) as i32)
                .collect(),
        });
        produced += len as u32;
        let last = c + 1 == chunks.len();
        outs.push(EngineOutput {
            index: 0,
            token_ids: ids,
            logprobs,
            prompt_logprobs,
            routed_experts,
            sampling_mask: req
                .output
                .sampling_mask
                .then(|| (0..len).map(|j| vec![j as u32, 999]).collect()),
            finish_reason: last.then(|| match &script.finish {
                FinishReason::Length { .. } => FinishReason::Length { length: produced },
                other => other.clone(),
            }),
            usage: Some(Usage {
                prompt_tokens: prompt_len,
                completion_tokens: produced,
                cached_tokens: script.cached_tokens,
            }),
            handoff: None,
            engine_data: None,
            native: None,
        });
    }
    outs
}

/// Everything a run produced.
pub struct Run {
    pub chunks: Vec<Value>,
    pub unary: Option<Result<NativeResponse, GenerateError>>,
    pub stream_end: Option<Result<(), GenerateError>>,
}

/// Feed `outputs` (sub index, delta) in order, then finish.
pub fn drive(prepared: Prepared, outputs: Vec<(usize, EngineOutput)>) -> Run {
    let stream = prepared.stream;
    let mut asm = prepared.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    for (sub, out) in outputs {
        if let Err(e) = asm.on_output(sub, out, &mut events) {
            return Run {
                chunks: events.iter().map(|b| json_of(b)).collect(),
                unary: (!stream).then_some(Err(e.clone())),
                stream_end: stream.then_some(Err(e)),
            };
        }
    }
    if stream {
        let end = asm.finish_stream(&mut events);
        Run {
            chunks: events.iter().map(|b| json_of(b)).collect(),
            unary: None,
            stream_end: Some(end),
        }
    } else {
        Run {
            chunks: Vec::new(),
            unary: Some(asm.finish_unary()),
            stream_end: None,
        }
    }
}

/// Run every sub-request of `prepared` under `script(sub)`, interleaving deltas round-robin.
pub fn run(prepared: Prepared, script: impl Fn(usize) -> Script) -> Run {
    let per_sub: Vec<Vec<EngineOutput>> = prepared
        .subs
        .iter()
        .enumerate()
        .map(|(i, s)| synth(&s.request, &script(i)))
        .collect();
    drive(prepared, interleave(per_sub))
}

pub fn interleave(per_sub: Vec<Vec<EngineOutput>>) -> Vec<(usize, EngineOutput)> {
    let mut iters: Vec<_> = per_sub.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for (i, it) in iters.iter_mut().enumerate() {
            if let Some(o) = it.next() {
                out.push((i, o));
                any = true;
            }
        }
        if !any {
            return out;
        }
    }
}

/// The unary body of a successful run.
pub fn unary_body(run: &Run) -> Value {
    match &run.unary {
        Some(Ok(r)) => {
            assert_eq!(r.status, http::StatusCode::OK);
            assert_eq!(r.content_type, genfront_format::CONTENT_TYPE_JSON);
            json_of(&r.body)
        }
        other => panic!(
            "no unary body: {:?}",
            other.as_ref().map(|r| r.as_ref().err())
        ),
    }
}

pub fn stop_text(s: &str) -> FinishReason {
    FinishReason::Stop {
        matched: StopMatch::Text(s.to_owned()),
    }
}
