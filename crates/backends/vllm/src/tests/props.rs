//! Property: a streamed response concatenates to the unary one (tokens, logprobs, finish
//! reasons, usage), for random outputs, `n`, `logprobs` and delta splits.

use genfront_protocol::{Candidate, EngineOutput, FinishReason, TokenLogprob};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::support::{prepare, run_stream, run_unary};

type Step = (u32, f64, Vec<(u32, f64)>, bool);

fn build(choices: &[Vec<Step>], logprobs: bool, picks: &[usize]) -> Vec<EngineOutput> {
    // Per choice, its deltas in order.
    let mut per_choice: Vec<Vec<EngineOutput>> = choices
        .iter()
        .enumerate()
        .map(|(index, steps)| {
            let mut deltas = Vec::new();
            let mut current = EngineOutput {
                index: index as u32,
                ..EngineOutput::default()
            };
            for (i, (token, logprob, top, cut)) in steps.iter().enumerate() {
                current.token_ids.push(*token);
                if logprobs {
                    current
                        .logprobs
                        .get_or_insert_with(Vec::new)
                        .push(TokenLogprob {
                            token_id: *token,
                            logprob: *logprob,
                            rank: Some(1 + i as u32 % 5),
                            top: top
                                .iter()
                                .enumerate()
                                .map(|(r, (t, l))| Candidate {
                                    token_id: *t,
                                    logprob: *l,
                                    rank: Some(r as u32 + 1),
                                    text: None,
                                })
                                .collect(),
                            selected: Vec::new(),
                            text: None,
                        });
                }
                if *cut || i + 1 == steps.len() {
                    deltas.push(std::mem::replace(
                        &mut current,
                        EngineOutput {
                            index: index as u32,
                            ..EngineOutput::default()
                        },
                    ));
                }
            }
            if let Some(last) = deltas.last_mut() {
                last.finish_reason = Some(if index % 2 == 0 {
                    FinishReason::Length {
                        length: steps.len() as u32,
                    }
                } else {
                    FinishReason::Eos { token_id: 2 }
                });
            }
            deltas.reverse();
            deltas
        })
        .collect();
    // Interleave, keeping each choice's order.
    let mut out = Vec::new();
    for p in picks {
        let c = p % per_choice.len();
        if per_choice[c].len() > 1 {
            if p % 7 == 0 {
                out.push(EngineOutput {
                    index: c as u32,
                    ..EngineOutput::default()
                });
            }
            if let Some(d) = per_choice[c].pop() {
                out.push(d);
            }
        }
    }
    for deltas in &mut per_choice {
        while let Some(d) = deltas.pop() {
            out.push(d);
        }
    }
    out
}

fn strategy() -> impl Strategy<Value = (usize, Option<usize>, Vec<Vec<Step>>, Vec<usize>)> {
    (1usize..=3, prop::option::of(0usize..=3)).prop_flat_map(|(n, k)| {
        let step = (
            3u32..1000,
            prop_oneof![Just(f64::NEG_INFINITY), -30.0f64..0.0],
            prop::collection::vec((3u32..1000, -30.0f64..0.0), 0..5),
            any::<bool>(),
        );
        (
            Just(n),
            Just(k),
            prop::collection::vec(prop::collection::vec(step, 1..12), n),
            prop::collection::vec(0usize..64, 0..40),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn streamed_deltas_concatenate_to_the_unary_response((n, k, choices, picks) in strategy()) {
        let mut sampling = json!({"n": n, "max_tokens": 16});
        if let Some(k) = k {
            sampling["logprobs"] = json!(k);
        }
        let unary_body = json!({"token_ids": [1, 2], "sampling_params": sampling.clone()});
        let stream_body = json!({"token_ids": [1, 2], "stream": true, "sampling_params": sampling,
            "stream_options": {"include_usage": true}});
        let outputs = build(&choices, k.is_some(), &picks);
        let unary = run_unary(prepare(&unary_body).expect("unary"), outputs.clone());
        let events = run_stream(prepare(&stream_body).expect("stream"), outputs);

        let (usage_chunk, chunks) = events.split_last().expect("usage chunk");
        prop_assert_eq!(&usage_chunk["choices"], &json!([]));
        prop_assert_eq!(&usage_chunk["usage"]["completion_tokens"], &unary["usage"]["completion_tokens"]);
        for (i, choice) in unary["choices"].as_array().expect("choices").iter().enumerate() {
            let mine: Vec<&Value> = chunks.iter().filter(|c| c["choices"][0]["index"] == i).collect();
            prop_assert!(!mine.is_empty());
            let tokens: Vec<Value> = mine.iter().flat_map(|c| c["choices"][0]["token_ids"].as_array().expect("ids").clone()).collect();
            prop_assert_eq!(&Value::Array(tokens), &choice["token_ids"]);
            if k.is_some() {
                let content: Vec<Value> = mine.iter().flat_map(|c| c["choices"][0]["logprobs"]["content"].as_array().expect("content").clone()).collect();
                prop_assert_eq!(&Value::Array(content), &choice["logprobs"]["content"]);
            } else {
                prop_assert_eq!(&choice["logprobs"], &Value::Null);
            }
            let (last, rest) = mine.split_last().expect("chunks");
            prop_assert_eq!(&last["choices"][0]["finish_reason"], &choice["finish_reason"]);
            prop_assert!(rest.iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
            prop_assert!(rest.iter().all(|c| !c["choices"][0]["token_ids"].as_array().expect("ids").is_empty()));
        }
    }
}
