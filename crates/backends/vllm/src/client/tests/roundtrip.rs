//! Property: engine deltas → this crate's vLLM assembler → the engine client's decoder give back
//! the same deltas (ids, logprobs with rank/top/selected, finish reasons, usage, routed experts,
//! sampling masks, prompt logprobs, hand-off). This is "through genfront == direct to engine"
//! for the vLLM format on the vLLM engine.

use std::collections::VecDeque;

use bytes::Bytes;
use genfront_format::{GenerateFormat, ParseInput, Prepared};
use genfront_protocol::{
    Candidate, EngineInfo, EngineOutput, EngineRequest, FinishReason, PromptLogprobs,
    RoutedExperts, StopMatch, TokenLogprob, Usage,
};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::VllmFormat;
use crate::client::body;
use crate::client::decode::{CANCELLED_MESSAGE, Decoder, Flow, Item};
use genfront_engine_http::SseSplitter;

const VOCAB: u32 = 1000;

fn info() -> EngineInfo {
    EngineInfo {
        model: "m".to_owned(),
        model_aliases: Vec::new(),
        vocab_size: Some(VOCAB),
        max_context_len: 4096,
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

fn prepare(body: &Value) -> (Prepared, EngineRequest) {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let bytes = serde_json::to_vec(body).expect("body");
    let prepared = VllmFormat::new()
        .with_prompt_tokens_details(true)
        .prepare(ParseInput {
            headers: &headers,
            body: &bytes,
            engine: &info(),
        })
        .expect("valid request");
    let mut request = prepared.subs[0].request.clone();
    request.request_id = "0123456789abcdef0123456789abcdef".to_owned();
    (prepared, request)
}

fn decoder(request: &EngineRequest) -> (Decoder, bool) {
    let (upstream, spec) =
        body::build(request.clone(), &info(), body::BodyOptions::default()).expect("buildable");
    (Decoder::new(spec), upstream.unary)
}

/// How output logprobs are requested.
#[derive(Debug, Clone)]
enum Mode {
    None,
    Top(u32),
    Selected(Vec<u32>),
}

/// One generated token: id, 1-based rank of the sampled token, base logprob, cut after it.
type Tok = (u32, u32, f64, bool);

#[derive(Debug, Clone)]
struct Scenario {
    prompt: Vec<u32>,
    mode: Mode,
    /// `(num_layers, top_k)` of routed experts, when every delta carries some.
    experts: Option<(u32, u32)>,
    mask: bool,
    choices: Vec<(Vec<Tok>, u8)>,
    picks: Vec<usize>,
    cached: u32,
    cancel: bool,
    splits: Vec<usize>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let mode = prop_oneof![
        Just(Mode::None),
        (0u32..=4).prop_map(Mode::Top),
        prop::collection::vec(3u32..40, 1..4).prop_map(Mode::Selected),
    ];
    let tok = (3u32..VOCAB, 1u32..=6, -5.0f64..0.0, any::<bool>());
    let choice = (prop::collection::vec(tok, 1..7), 0u8..5);
    (
        prop::collection::vec(3u32..VOCAB, 1..6),
        mode,
        prop::option::of((1u32..=3, 1u32..=3)),
        any::<bool>(),
        prop::collection::vec(choice, 1..=3),
        prop::collection::vec(0usize..16, 0..24),
        0u32..5,
        any::<bool>(),
        prop::collection::vec(1usize..64, 0..12),
    )
        .prop_map(
            |(prompt, mode, experts, mask, choices, picks, cached, cancel, splits)| Scenario {
                prompt,
                mode,
                experts,
                mask,
                choices,
                picks,
                cached,
                cancel,
                splits,
            },
        )
}

/// A consistent logprob entry: the sampled token at rank `rank` of a ranked list whose other
/// entries are distinct ids; `top` is the list's first `k`.
fn ranked(token: u32, rank: u32, base: f64, k: u32) -> TokenLogprob {
    let len = k.max(rank);
    let list: Vec<Candidate> = (0..len)
        .map(|i| Candidate {
            token_id: if i == rank - 1 {
                token
            } else {
                (token + 1 + i) % VOCAB
            },
            logprob: base - f64::from(i) * 0.75,
            rank: Some(i + 1),
            text: None,
        })
        .collect();
    let own = &list[(rank - 1) as usize];
    TokenLogprob {
        token_id: token,
        logprob: own.logprob,
        rank: own.rank,
        top: list[..k as usize].to_vec(),
        selected: Vec::new(),
        text: None,
    }
}

fn score(id: u32, pos: usize) -> Candidate {
    Candidate {
        token_id: id,
        logprob: -f64::from(id % 97) / 8.0 - pos as f64 * 0.01,
        rank: Some(1 + id % 50),
        text: None,
    }
}

fn selected(token: u32, ids: &[u32], pos: usize) -> TokenLogprob {
    let own = score(token, pos);
    TokenLogprob {
        token_id: token,
        logprob: own.logprob,
        rank: own.rank,
        top: Vec::new(),
        selected: ids.iter().map(|id| score(*id, pos)).collect(),
        text: None,
    }
}

/// Per choice, its deltas in order (finish on the last).
fn deltas(s: &Scenario) -> Vec<Vec<EngineOutput>> {
    let mut expert_id = 0i32;
    s.choices
        .iter()
        .enumerate()
        .map(|(index, (toks, finish))| {
            let index = index as u32;
            let mut out = Vec::new();
            let mut current = EngineOutput {
                index,
                ..EngineOutput::default()
            };
            for (pos, &(token, rank, base, cut)) in toks.iter().enumerate() {
                current.token_ids.push(token);
                match &s.mode {
                    Mode::None => {}
                    Mode::Top(k) => current
                        .logprobs
                        .get_or_insert_with(Vec::new)
                        .push(ranked(token, rank, base, *k)),
                    Mode::Selected(ids) => current
                        .logprobs
                        .get_or_insert_with(Vec::new)
                        .push(selected(token, ids, pos)),
                }
                if s.mask {
                    current
                        .sampling_mask
                        .get_or_insert_with(Vec::new)
                        .push(vec![token, (token + 7) % VOCAB]);
                }
                if cut || pos + 1 == toks.len() {
                    if let Some((layers, k)) = s.experts {
                        let rows = (rank % 3) as usize;
                        let ids = (0..rows * (layers * k) as usize)
                            .map(|_| {
                                expert_id += 1;
                                expert_id * if rank % 2 == 0 { 1 } else { -1 }
                            })
                            .collect();
                        current.routed_experts = Some(RoutedExperts {
                            num_layers: layers,
                            top_k: k,
                            ids,
                        });
                    }
                    out.push(std::mem::replace(
                        &mut current,
                        EngineOutput {
                            index,
                            ..EngineOutput::default()
                        },
                    ));
                }
            }
            let last_token = toks.last().map_or(0, |t| t.0);
            let reason = match finish {
                0 => FinishReason::Length {
                    length: toks.len() as u32,
                },
                1 => FinishReason::Eos {
                    token_id: last_token,
                },
                2 => FinishReason::Stop {
                    matched: StopMatch::TokenId(last_token),
                },
                3 if !s.cancel => FinishReason::Stop {
                    matched: StopMatch::Text("</s>".to_owned()),
                },
                _ => FinishReason::Cancelled {
                    message: CANCELLED_MESSAGE.to_owned(),
                },
            };
            if matches!(reason, FinishReason::Cancelled { .. }) && s.cancel {
                // The contract: a cancelled choice's last item has no new tokens.
                out.push(EngineOutput {
                    index,
                    finish_reason: Some(reason),
                    ..EngineOutput::default()
                });
            } else if let Some(last) = out.last_mut() {
                last.finish_reason = Some(match reason {
                    FinishReason::Cancelled { .. } => FinishReason::Stop {
                        matched: StopMatch::Text("stop-str".to_owned()),
                    },
                    other => other,
                });
            }
            out
        })
        .collect()
}

/// Interleave the choices' deltas, keeping each choice's order.
fn interleave(mut per_choice: Vec<Vec<EngineOutput>>, picks: &[usize]) -> Vec<EngineOutput> {
    for d in &mut per_choice {
        d.reverse();
    }
    let mut out = Vec::new();
    for p in picks {
        let c = p % per_choice.len();
        if let Some(d) = per_choice[c].pop() {
            out.push(d);
        }
    }
    for d in &mut per_choice {
        while let Some(x) = d.pop() {
            out.push(x);
        }
    }
    out
}

fn sampling(s: &Scenario) -> Value {
    let mut sp = json!({"n": s.choices.len(), "max_tokens": 50, "temperature": 1.0});
    match &s.mode {
        Mode::None => {}
        Mode::Top(k) => sp["logprobs"] = json!(k),
        Mode::Selected(ids) => sp["logprob_token_ids"] = json!(ids),
    }
    sp
}

fn with_cached(mut outputs: Vec<EngineOutput>, prompt: u32, cached: u32) -> Vec<EngineOutput> {
    if let Some(last) = outputs.last_mut() {
        last.usage = Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: 0,
            cached_tokens: cached,
        });
    }
    outputs
}

fn collect(queue: VecDeque<Item>) -> Vec<EngineOutput> {
    queue
        .into_iter()
        .map(|item| {
            let mut o = item.expect("no error");
            assert!(o.engine_data.is_some(), "the native frame is kept");
            o.engine_data = None;
            o
        })
        .collect()
}

/// Stream mode: the SSE bytes (split at `splits`) through the splitter and the decoder.
fn stream_round_trip(s: &Scenario) -> (Vec<EngineOutput>, Vec<EngineOutput>) {
    let body = json!({"token_ids": s.prompt, "stream": true, "sampling_params": sampling(s),
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let (prepared, request) = prepare(&body);
    let prompt = s.prompt.len() as u32;
    let outputs = interleave(deltas(s), &s.picks);

    let mut asm = prepared.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    for o in with_cached(outputs.clone(), prompt, s.cached) {
        asm.on_output(0, o, &mut events).expect("on_output");
    }
    asm.finish_stream(&mut events).expect("finish_stream");
    let mut wire = Vec::new();
    for e in &events {
        wire.extend_from_slice(b"data: ");
        wire.extend_from_slice(e);
        wire.extend_from_slice(b"\n\n");
    }
    wire.extend_from_slice(b"data: [DONE]\n\n");

    let (mut dec, unary) = decoder(&request);
    assert!(!unary);
    if s.cancel {
        dec.set_cancelled();
    }
    let mut queue = VecDeque::new();
    let mut sse = SseSplitter::with_limit(1 << 20);
    let mut rest = wire.as_slice();
    let mut done = false;
    for cut in s.splits.iter().copied().chain(std::iter::once(usize::MAX)) {
        let (chunk, tail) = rest.split_at(cut.min(rest.len()));
        rest = tail;
        sse.push(chunk);
        while let Some(event) = sse.next_event().expect("small events") {
            assert!(!done, "nothing after [DONE]");
            done = dec.on_event(&event, &mut queue) == Flow::Done;
        }
    }
    assert!(done);

    // What the decoder must give back: the same deltas, with cumulative usage per choice; the
    // last item carries the cached tokens of the final usage chunk; a choice's routed experts
    // all come on its final chunk (as vLLM sends them).
    let mut counts = vec![0u32; s.choices.len()];
    let mut rows: Vec<Option<RoutedExperts>> = vec![None; s.choices.len()];
    for o in &outputs {
        if let Some(r) = &o.routed_experts {
            match &mut rows[o.index as usize] {
                Some(all) => all.ids.extend_from_slice(&r.ids),
                slot => *slot = Some(r.clone()),
            }
        }
    }
    let total = outputs.len();
    let expected = outputs
        .into_iter()
        .enumerate()
        .map(|(i, mut o)| {
            o.routed_experts = if o.finish_reason.is_some() {
                rows[o.index as usize].take()
            } else {
                None
            };
            counts[o.index as usize] += o.token_ids.len() as u32;
            o.usage = Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: counts[o.index as usize],
                cached_tokens: if i + 1 == total { s.cached } else { 0 },
            });
            o
        })
        .collect();
    (collect(queue), expected)
}

/// Prompt logprobs for positions `start..`, consistent with a top `k`.
fn prompt_logprobs(prompt: &[u32], start: usize, k: u32) -> PromptLogprobs {
    PromptLogprobs {
        start: start as u32,
        entries: (start..prompt.len())
            .map(|pos| {
                (pos > 0).then(|| ranked(prompt[pos], 1 + (pos as u32 % 4), -0.5 - pos as f64, k))
            })
            .collect(),
        first_text: None,
        first_token_id: None,
    }
}

/// Unary mode: one item per choice, everything concatenated.
fn unary_round_trip(
    s: &Scenario,
    prompt_k: u32,
    prompt_start: usize,
) -> (Vec<EngineOutput>, Vec<EngineOutput>) {
    let mut sp = sampling(s);
    sp["prompt_logprobs"] = json!(prompt_k);
    // vLLM 0.33.0 refuses `prompt_logprob_start` without `prompt_logprob_token_ids`
    // (`sampling_params.py:1043-1048`), so a vLLM body scores the prompt from its start.
    let _ = prompt_start;
    let body = json!({"token_ids": s.prompt, "sampling_params": sp});
    let (prepared, request) = prepare(&body);
    let prompt = s.prompt.len() as u32;
    let start = 0;
    let plp = prompt_logprobs(&s.prompt, start, prompt_k);
    let handoff = json!({"remote_engine_id": "e", "remote_block_ids": [1, 2]});
    let per_choice = deltas(s);
    let mut outputs = interleave(per_choice.clone(), &s.picks);
    if let Some(first) = outputs.first_mut() {
        first.prompt_logprobs = Some(plp.clone());
        first.handoff = Some(handoff.clone());
    }

    let mut asm = prepared.assembler;
    let mut events = Vec::new();
    for o in with_cached(outputs, prompt, s.cached) {
        asm.on_output(0, o, &mut events).expect("on_output");
    }
    let response = asm.finish_unary().expect("finish_unary");

    let (mut dec, unary) = decoder(&request);
    assert!(unary, "prompt logprobs are fetched with a unary call");
    let mut queue = VecDeque::new();
    assert_eq!(dec.on_unary(&response.body, &mut queue), Flow::Done);

    let expected = per_choice
        .into_iter()
        .map(|deltas| {
            let mut merged = EngineOutput {
                index: deltas[0].index,
                prompt_logprobs: Some(plp.clone()),
                handoff: Some(handoff.clone()),
                ..EngineOutput::default()
            };
            for d in deltas {
                merged.token_ids.extend(d.token_ids);
                if let Some(l) = d.logprobs {
                    merged.logprobs.get_or_insert_with(Vec::new).extend(l);
                }
                if let Some(m) = d.sampling_mask {
                    merged.sampling_mask.get_or_insert_with(Vec::new).extend(m);
                }
                if let Some(r) = d.routed_experts {
                    match &mut merged.routed_experts {
                        Some(all) => all.ids.extend(r.ids),
                        None => merged.routed_experts = Some(r),
                    }
                }
                merged.finish_reason = d.finish_reason;
            }
            merged.usage = Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: merged.token_ids.len() as u32,
                cached_tokens: s.cached,
            });
            merged
        })
        .collect();
    (collect(queue), expected)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn stream_assembler_then_decoder_is_identity(s in scenario()) {
        let (got, expected) = stream_round_trip(&s);
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn unary_assembler_then_decoder_is_identity(
        mut s in scenario(),
        prompt_k in 0u32..=3,
        prompt_start in 0usize..=6,
    ) {
        s.cancel = false;
        let (got, expected) = unary_round_trip(&s, prompt_k, prompt_start);
        prop_assert_eq!(got, expected);
    }
}

/// A unary vLLM body decoded and assembled again is the same body: the fields genfront does not
/// model (`prompt_token_id_logprobs`, `metrics`, `weight_versions`, a `"repetition"` finish, a
/// `uint8` routed-experts payload) ride through `engine_data`.
#[test]
fn unary_native_fields_pass_through() {
    use base64::Engine as _;
    let body = json!({"token_ids": [1, 2, 3],
        "sampling_params": {"max_tokens": 2, "prompt_logprob_token_ids": [[5], [6]]}});
    let (prepared, request) = prepare(&body);
    let header = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 1), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16 + 1).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend_from_slice(b"\n\x07\x09");
    let native = json!({"request_id": "generate-tokens-x", "model": "m", "created": 5,
        "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 1}, "completion_tokens_details": null},
        "prompt_logprobs": null, "prompt_token_id_logprobs": "k05VTVBZAQB2AHs=",
        "prompt_token_ids": null, "mm_placeholders": null,
        "metrics": {"speculative_decoding": {"mean_acceptance_length": 1.5}},
        "kv_transfer_params": null, "ec_transfer_params": {"h": {"peer_port": 1}},
        "output_mode": "tokens",
        "choices": [{"index": 0, "finish_reason": "repetition", "stop_reason": "repetition_detected",
            "token_ids": [4, 4], "routed_experts": base64::engine::general_purpose::STANDARD.encode(&npy),
            "sampling_mask": null, "weight_versions": [{"version": "v1", "start": 0, "end": 2}],
            "logprobs": null}]});
    let (mut dec, unary) = decoder(&request);
    assert!(unary);
    let mut queue = VecDeque::new();
    assert_eq!(
        dec.on_unary(native.to_string().as_bytes(), &mut queue),
        Flow::Done
    );
    let mut asm = prepared.assembler;
    for item in queue {
        asm.on_output(0, item.expect("ok"), &mut Vec::new())
            .expect("assemble");
    }
    let response = asm.finish_unary().expect("unary");
    let mut ours: Value = serde_json::from_slice(&response.body).expect("json");
    ours["request_id"] = json!("generate-tokens-x");
    ours["created"] = json!(5);
    assert_eq!(ours, native);
}
