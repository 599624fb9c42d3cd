//! Round trip: random engine deltas → this crate's SGLang assembler (cumulative and incremental
//! SSE frames) → [`FrameDecoder`] gives back the same deltas. This is what makes a request through
//! genfront's SGLang format on an SGLang engine equal to the engine's own answer.

use bytes::Bytes;
use genfront_format::{GenerateFormat, ParseInput, Prepared};
use genfront_protocol::{
    Candidate, EngineInfo, EngineOutput, EngineRequest, FinishReason, PromptLogprobs,
    RoutedExperts, StopMatch, TokenLogprob, Usage,
};
use genfront_sglang::SglangFormat;
use genfront_sglang::client::{DecodeConfig, FrameDecoder};
use http::HeaderMap;
use proptest::prelude::*;
use serde_json::{Value, json};

/// The SGLang format's projection of `body` (panics on rejection).
pub fn prepare(body: &Value, info: &EngineInfo, incremental: bool) -> Prepared {
    let format = SglangFormat::new(&genfront_sglang::SglangSettings {
        incremental_streaming: incremental,
    });
    // What a JSON client sends: SGLang reads no other body as JSON.
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let bytes = body.to_string();
    match format.prepare(ParseInput {
        headers: &headers,
        body: bytes.as_bytes(),
        engine: info,
    }) {
        Ok(p) => p,
        Err(r) => panic!("rejected {body}: {:?}", r.error),
    }
}

/// SplitMix64: deterministic values from a proptest seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn token(&mut self) -> u32 {
        10 + self.below(990) as u32
    }

    /// A logprob: usually an arbitrary negative double, sometimes exactly 0, sometimes `-inf`.
    fn logprob(&mut self, allow_inf: bool) -> f64 {
        match self.below(16) {
            0 if allow_inf => f64::NEG_INFINITY,
            1 => 0.0,
            _ => -((self.next() >> 11) as f64 / (1u64 << 53) as f64) * 30.0,
        }
    }

    fn cands(&mut self, n: u32, allow_inf: bool) -> Vec<Candidate> {
        (0..n)
            .map(|_| Candidate {
                token_id: self.token(),
                logprob: self.logprob(allow_inf),
                rank: None,
                text: None,
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
enum Finish {
    Eos,
    StopId,
    StopText(String),
    Length,
    Cancelled(String),
}

#[derive(Debug, Clone)]
struct Case {
    incremental: bool,
    prompt_len: usize,
    return_logprob: bool,
    top_k: u32,
    token_ids_logprob: Option<usize>,
    start: Option<usize>,
    mask: bool,
    experts: bool,
    chunks: Vec<usize>,
    finish: Finish,
    cached: u32,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    let finish = prop_oneof![
        Just(Finish::Eos),
        Just(Finish::StopId),
        "[a-z<>/ ]{1,6}".prop_map(Finish::StopText),
        Just(Finish::Length),
        "[A-Za-z ]{1,12}".prop_map(Finish::Cancelled),
    ];
    (
        (
            any::<bool>(),
            1usize..7,
            any::<bool>(),
            0u32..4,
            prop::option::of(1usize..4),
        ),
        (prop::option::of(0usize..7), any::<bool>(), any::<bool>()),
        (
            prop::collection::vec(0usize..4, 1..6),
            finish,
            0u32..3,
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (incremental, prompt_len, return_logprob, top_k, token_ids_logprob),
                (start, mask, experts),
                (chunks, finish, cached, seed),
            )| Case {
                incremental,
                prompt_len,
                return_logprob,
                top_k,
                token_ids_logprob,
                start: start.map(|s| s % prompt_len),
                mask,
                experts,
                chunks,
                finish,
                cached,
                seed,
            },
        )
}

const STOP_ID: u32 = 9;

fn info() -> EngineInfo {
    EngineInfo {
        vocab_size: Some(1000),
        max_context_len: 4096,
        eos_token_ids: vec![2],
        ..EngineInfo::default()
    }
}

/// The request body of `c`.
fn body(c: &Case, rng: &mut Rng) -> Value {
    let prompt: Vec<u32> = (0..c.prompt_len).map(|_| rng.token()).collect();
    let mut b = json!({
        "input_ids": prompt,
        // A finite top_k: SGLang refuses a sampling mask over the whole vocabulary.
        "sampling_params": {"max_new_tokens": 64, "stop_token_ids": [STOP_ID], "top_k": 50},
        "return_logprob": c.return_logprob,
        "top_logprobs_num": c.top_k,
        "logprob_start_len": c.start.map_or(-1, |s| s as i64),
        "return_sampling_mask": c.mask,
        "return_routed_experts": c.experts,
        "stream": true,
    });
    if let Some(n) = c.token_ids_logprob {
        b["token_ids_logprob"] = json!((0..n).map(|_| rng.token()).collect::<Vec<_>>());
    }
    b
}

fn token_logprob(rng: &mut Rng, req: &EngineRequest, id: u32, k: u32, inf: bool) -> TokenLogprob {
    TokenLogprob {
        token_id: id,
        logprob: rng.logprob(inf),
        rank: None,
        top: rng.cands(k, inf),
        selected: req
            .output
            .token_ids_logprobs
            .iter()
            .map(|&t| Candidate {
                token_id: t,
                logprob: rng.logprob(inf),
                rank: None,
                text: None,
            })
            .collect(),
        text: None,
    }
}

/// Random deltas honouring the request.
fn outputs(c: &Case, req: &EngineRequest, rng: &mut Rng) -> Vec<EngineOutput> {
    let prompt_len = req.token_ids.len() as u32;
    let mut produced = 0u32;
    let last = c.chunks.len() - 1;
    c.chunks
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let token_ids: Vec<u32> = (0..n).map(|_| rng.token()).collect();
            produced += n as u32;
            let logprobs = req.output.logprobs.map(|k| {
                token_ids
                    .iter()
                    .map(|&id| token_logprob(rng, req, id, k, true))
                    .collect()
            });
            let prompt_logprobs = match (&req.output.prompt_logprobs, i) {
                (Some(p), 0) => Some(PromptLogprobs {
                    start: p.start,
                    entries: (p.start..prompt_len)
                        .enumerate()
                        .map(|(j, pos)| {
                            // SGLang pads the first covered position with `null`.
                            (j > 0).then(|| {
                                let id = req.token_ids[pos as usize];
                                token_logprob(rng, req, id, p.top_k, false)
                            })
                        })
                        .collect(),
                    first_text: None,
                    first_token_id: None,
                }),
                _ => None,
            };
            let sampling_mask = req.output.sampling_mask.then(|| {
                token_ids
                    .iter()
                    .map(|&id| {
                        let mut set = vec![id];
                        set.extend((0..rng.below(3)).map(|_| rng.token()));
                        set
                    })
                    .collect()
            });
            let routed_experts = req.output.routed_experts.then(|| RoutedExperts {
                num_layers: 2,
                top_k: 2,
                ids: (0..4 * (n + usize::from(i == 0)))
                    .map(|_| rng.below(64) as i32)
                    .collect(),
            });
            let finish_reason = (i == last).then(|| match &c.finish {
                Finish::Eos => FinishReason::Eos { token_id: 2 },
                Finish::StopId => FinishReason::Stop {
                    matched: StopMatch::TokenId(STOP_ID),
                },
                Finish::StopText(s) => FinishReason::Stop {
                    matched: StopMatch::Text(s.clone()),
                },
                Finish::Length => FinishReason::Length { length: produced },
                Finish::Cancelled(m) => FinishReason::Cancelled { message: m.clone() },
            });
            EngineOutput {
                index: 0,
                token_ids,
                logprobs,
                prompt_logprobs,
                routed_experts,
                sampling_mask,
                finish_reason,
                usage: Some(Usage {
                    prompt_tokens: prompt_len,
                    completion_tokens: produced,
                    cached_tokens: c.cached,
                }),
                handoff: None,
                engine_data: None,
                native: None,
            }
        })
        .collect()
}

/// What the SGLang wire carries of a delta (ranks are not on the wire; an empty delta's
/// per-token lists carry nothing either way).
#[derive(Debug, PartialEq)]
struct Wire {
    token_ids: Vec<u32>,
    logprobs: Option<Vec<WireLp>>,
    prompt: Option<(u32, Vec<Option<WireLp>>)>,
    mask: Option<Vec<Vec<u32>>>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
}

type Pair = (u32, f64);

#[derive(Debug, PartialEq)]
struct WireLp {
    token_id: u32,
    logprob: f64,
    top: Vec<Pair>,
    selected: Vec<Pair>,
}

fn wire_lp(l: &TokenLogprob) -> WireLp {
    let pairs = |c: &[Candidate]| c.iter().map(|c| (c.token_id, c.logprob)).collect();
    WireLp {
        token_id: l.token_id,
        logprob: l.logprob,
        top: pairs(&l.top),
        selected: pairs(&l.selected),
    }
}

fn wire(o: &EngineOutput) -> Wire {
    let empty = o.token_ids.is_empty();
    let per_token = |v: Option<Vec<WireLp>>| if empty { None } else { v };
    Wire {
        token_ids: o.token_ids.clone(),
        logprobs: per_token(o.logprobs.as_ref().map(|l| l.iter().map(wire_lp).collect())),
        prompt: o.prompt_logprobs.as_ref().map(|p| {
            (
                p.start,
                p.entries.iter().map(|e| e.as_ref().map(wire_lp)).collect(),
            )
        }),
        mask: if empty { None } else { o.sampling_mask.clone() },
        finish: o.finish_reason.clone(),
        usage: o.usage,
    }
}

fn experts(outs: &[EngineOutput]) -> Vec<i32> {
    outs.iter()
        .filter_map(|o| o.routed_experts.as_ref())
        .flat_map(|r| r.ids.iter().copied())
        .collect()
}

/// Assemble `c`'s deltas into native frames and decode them back.
fn run(c: &Case) -> (Vec<EngineOutput>, Vec<EngineOutput>) {
    let mut rng = Rng(c.seed);
    let info = info();
    let prepared = prepare(&body(c, &mut rng), &info, c.incremental);
    let req = prepared.subs[0].request.clone();
    let sent = outputs(c, &req, &mut rng);
    let mut asm = prepared.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    for o in &sent {
        if let Err(e) = asm.on_output(0, o.clone(), &mut events) {
            panic!("assembler refused {o:?}: {e}");
        }
    }
    assert!(asm.finish_stream(&mut events).is_ok());
    assert_eq!(events.len(), sent.len(), "one native frame per delta");
    let cfg = DecodeConfig::for_request(&req, 0, c.incremental, &info.eos_token_ids, Some((2, 2)));
    let mut decoder = FrameDecoder::new(cfg);
    let got = events
        .iter()
        .map(|e| match decoder.decode(e) {
            Ok(o) => o,
            Err(err) => panic!("decode failed ({err}) for {}", String::from_utf8_lossy(e)),
        })
        .collect();
    (sent, got)
}

fn check(c: &Case) -> Result<(), TestCaseError> {
    let (sent, got) = run(c);
    prop_assert_eq!(sent.len(), got.len());
    for (i, (s, g)) in sent.iter().zip(&got).enumerate() {
        prop_assert_eq!(wire(s), wire(g), "delta {}", i);
    }
    prop_assert_eq!(experts(&sent), experts(&got));
    Ok(())
}

#[test]
fn round_trip_examples() {
    let base = Case {
        incremental: false,
        prompt_len: 4,
        return_logprob: true,
        top_k: 2,
        token_ids_logprob: Some(2),
        start: Some(0),
        mask: true,
        experts: true,
        chunks: vec![1, 0, 3, 2],
        finish: Finish::StopId,
        cached: 1,
        seed: 7,
    };
    for incremental in [false, true] {
        for finish in [
            Finish::Eos,
            Finish::StopId,
            Finish::StopText("</s>".into()),
            Finish::Length,
            Finish::Cancelled("Aborted".into()),
        ] {
            let c = Case {
                incremental,
                finish,
                ..base.clone()
            };
            if let Err(e) = check(&c) {
                panic!("{c:?}: {e}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn assembled_frames_decode_to_the_same_deltas(c in case()) {
        check(&c)?;
    }
}
