//! Property: for random requests and random engine deltas, the last cumulative chunk of each item
//! equals its unary body, and so do the incremental chunks folded together (timing fields, the
//! per-run rids and the stream `index` aside).

use genfront_protocol::{FinishReason, StopMatch};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::*;

#[derive(Debug, Clone)]
struct Case {
    prompts: Vec<Vec<u32>>,
    nested: bool,
    n: usize,
    return_logprob: bool,
    start: i64,
    top: u32,
    token_ids: Option<Vec<u32>>,
    routed: bool,
    prompt_ids: bool,
    mask: bool,
    flat: u8,
    scripts: Vec<(Vec<usize>, u8)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(prop::collection::vec(0u32..1000, 1..6), 1..4),
        any::<bool>(),
        1usize..3,
        any::<bool>(),
        -1i64..3,
        0u32..3,
        prop::option::of(prop::collection::vec(0u32..1000, 1..3)),
        (any::<bool>(), any::<bool>(), any::<bool>(), 0u8..3),
        prop::collection::vec((prop::collection::vec(0usize..3, 1..5), 0u8..5), 9),
    )
        .prop_map(
            |(
                prompts,
                nested,
                n,
                return_logprob,
                start,
                top,
                token_ids,
                (routed, prompt_ids, mask, flat),
                scripts,
            )| Case {
                nested: nested || prompts.len() > 1,
                prompts,
                n,
                return_logprob,
                start,
                top,
                token_ids,
                routed,
                prompt_ids,
                mask,
                flat,
                scripts,
            },
        )
}

fn body(c: &Case, stream: bool) -> String {
    let input_ids = if c.nested {
        json!(c.prompts)
    } else {
        json!(c.prompts[0])
    };
    let min_len = c.prompts.iter().map(Vec::len).min().unwrap_or(1) as i64;
    let mut b = json!({
        "rid": "p",
        "input_ids": input_ids,
        // A finite top_k: SGLang refuses a sampling mask over the whole vocabulary.
        "sampling_params": {"n": c.n, "max_new_tokens": 64, "temperature": 0.5, "top_k": 40},
        "return_logprob": c.return_logprob,
        "logprob_start_len": c.start.min(min_len - 1),
        "top_logprobs_num": c.top,
        "return_routed_experts": c.routed,
        "return_prompt_token_ids": c.prompt_ids,
        "return_sampling_mask": c.mask,
        "return_flat_raw_top_logprobs": c.flat > 0,
        "return_flat_raw_top_logprobs_b64": c.flat > 1,
        "stream": stream,
    });
    if let Some(t) = &c.token_ids {
        b["token_ids_logprob"] = json!(t);
    }
    b.to_string()
}

fn script(c: &Case, i: usize) -> Script {
    let (chunks, f) = &c.scripts[i % c.scripts.len()];
    let total: usize = chunks.iter().sum();
    let finish = match f {
        0 => FinishReason::Length {
            length: total as u32,
        },
        1 => FinishReason::Eos { token_id: 2 },
        2 => FinishReason::Stop {
            matched: StopMatch::TokenId(5),
        },
        3 => FinishReason::Stop {
            matched: StopMatch::Text("x\"y".into()),
        },
        _ => FinishReason::Cancelled {
            message: "Aborted".into(),
        },
    };
    Script {
        chunks: chunks.clone(),
        finish,
        seed: i as u32,
        cached_tokens: i as u32,
    }
}

fn strip(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("index");
        if let Some(m) = o.get_mut("meta_info").and_then(Value::as_object_mut) {
            for k in ["id", "e2e_latency", "response_sent_to_client_ts"] {
                m.remove(k);
            }
        }
    }
    v
}

/// SGLang's `_INCREMENTAL_STREAMING_META_INFO_KEYS` (the ones genfront renders).
const DELTA_KEYS: &[&str] = &[
    "output_token_logprobs",
    "output_top_logprobs",
    "output_token_ids_logprobs",
    "output_token_sampling_mask",
];

fn fold(chunks: &[Value]) -> Value {
    let mut acc = chunks[0].clone();
    for c in &chunks[1..] {
        let mut ids = acc["output_ids"].as_array().unwrap().clone();
        ids.extend(c["output_ids"].as_array().unwrap().iter().cloned());
        let mut meta = c["meta_info"].clone();
        for k in DELTA_KEYS {
            if let Some(new) = c["meta_info"].get(*k) {
                let mut all = acc["meta_info"][*k].as_array().unwrap().clone();
                all.extend(new.as_array().unwrap().iter().cloned());
                meta[*k] = Value::Array(all);
            }
        }
        let mut next = c.clone();
        next["output_ids"] = Value::Array(ids);
        next["meta_info"] = meta;
        acc = next;
    }
    acc
}

fn per_item(chunks: &[Value], items: usize, batch: bool) -> Vec<Vec<Value>> {
    let mut out = vec![Vec::new(); items];
    for c in chunks {
        let i = if batch {
            c["index"].as_u64().unwrap() as usize
        } else {
            0
        };
        out[i].push(c.clone());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn streams_fold_to_the_unary_body(c in case()) {
        let unary = unary_body(&run(prepared(&body(&c, false)), |i| script(&c, i)));
        let items: Vec<Value> = match unary {
            Value::Array(a) => a,
            one => vec![one],
        };
        let batch = c.nested || c.n > 1;
        prop_assert_eq!(items.len(), c.prompts.len() * c.n);

        let cumulative = run(prepared(&body(&c, true)), |i| script(&c, i));
        prop_assert!(matches!(cumulative.stream_end, Some(Ok(()))));
        for (i, chunks) in per_item(&cumulative.chunks, items.len(), batch).iter().enumerate() {
            prop_assert_eq!(chunks.len(), c.scripts[i % c.scripts.len()].0.len());
            for (j, ch) in chunks.iter().enumerate() {
                prop_assert_eq!(ch["meta_info"]["finish_reason"].is_null(), j + 1 < chunks.len());
            }
            prop_assert_eq!(strip(chunks.last().unwrap().clone()), strip(items[i].clone()));
        }

        let info = engine();
        let p = prepare_with(&body(&c, true), &Default::default(), &info, true).unwrap();
        let incremental = run(p, |i| script(&c, i));
        for (i, chunks) in per_item(&incremental.chunks, items.len(), batch).iter().enumerate() {
            prop_assert_eq!(strip(fold(chunks)), strip(items[i].clone()));
        }
    }
}

const KEYS: &[&str] = &[
    "rid",
    "text",
    "input_ids",
    "input_embeds",
    "sampling_params",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "token_ids_logprob",
    "return_sampling_mask",
    "return_flat_raw_top_logprobs",
    "return_flat_raw_top_logprobs_b64",
    "stream",
    "return_hidden_states",
    "return_routed_experts",
    "routed_experts_start_len",
    "return_prompt_token_ids",
    "session_id",
    "session_params",
    "lora_path",
    "custom_logit_processor",
    "routed_dp_rank",
    "data_parallel_rank",
    "priority",
    "extra_key",
    "cache_salt",
    "bootstrap_room",
    "max_thinking_tokens",
    "n",
    "max_new_tokens",
    "min_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "stop_token_ids",
    "logit_bias",
    "beam_width",
    "sampling_seed",
    "image_data",
    "unknown",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..5).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-3.0f64..3.0).prop_map(Value::from),
        "[a-z_ ]{0,4}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

fn output() -> impl Strategy<Value = (usize, genfront_protocol::EngineOutput)> {
    use genfront_protocol::{EngineOutput, PromptLogprobs, RoutedExperts, TokenLogprob};
    (
        0usize..4,
        prop::collection::vec(any::<u32>(), 0..3),
        prop::option::of(prop::collection::vec(any::<u32>(), 0..3)),
        prop::option::of((
            0u32..10,
            prop::collection::vec(prop::option::of(any::<u32>()), 0..4),
        )),
        prop::option::of((0u32..3, 0u32..3, prop::collection::vec(any::<i32>(), 0..7))),
        0u8..7,
    )
        .prop_map(|(sub, ids, lps, prompt, experts, finish)| {
            let tl = |id: u32| TokenLogprob {
                token_id: id,
                logprob: -f64::from(id % 7),
                ..Default::default()
            };
            (
                sub,
                EngineOutput {
                    token_ids: ids,
                    logprobs: lps.map(|v| v.into_iter().map(tl).collect()),
                    prompt_logprobs: prompt.map(|(start, e)| PromptLogprobs {
                        start,
                        entries: e.into_iter().map(|x| x.map(tl)).collect(),
                        first_text: None,
                        first_token_id: None,
                    }),
                    routed_experts: experts.map(|(num_layers, top_k, ids)| RoutedExperts {
                        num_layers,
                        top_k,
                        ids,
                    }),
                    finish_reason: match finish {
                        0 => Some(FinishReason::Length { length: 1 }),
                        1 => Some(FinishReason::Error {
                            message: "x".into(),
                        }),
                        2 => Some(FinishReason::Cancelled {
                            message: String::new(),
                        }),
                        _ => None,
                    },
                    ..Default::default()
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bodies and arbitrary (even contract-breaking) engine outputs never panic.
    #[test]
    fn never_panics(body in json_value(), outs in prop::collection::vec(output(), 0..8), raw in prop::collection::vec(any::<u8>(), 0..16)) {
        let _ = prepare(&String::from_utf8_lossy(&raw));
        let text = body.to_string();
        if let Ok(p) = prepare(&text) {
            let _ = drive(p, outs.clone());
        }
        let mut wrapped = json!({"input_ids": [[1, 2], [3]], "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 1, "return_routed_experts": true, "return_flat_raw_top_logprobs": true});
        if let Value::Object(extra) = body {
            for (k, v) in extra {
                wrapped[k] = v;
            }
        }
        if let Ok(p) = prepare(&wrapped.to_string()) {
            let _ = drive(p, outs);
        }
    }
}
