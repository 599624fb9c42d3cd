//! Chunk → delta rules, one behaviour per test, plus "no panic on any upstream bytes".

use std::collections::VecDeque;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use genfront_protocol::{
    Candidate, EngineError, EngineOutput, ErrorKind, FinishReason, PromptLogprobOptions,
    RoutedExperts, StopMatch, TokenLogprob, Usage,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::client::decode::{CANCELLED_MESSAGE, DecodeSpec, Decoder, Flow, Item, REPETITION};
use crate::npy::{npy_i32, parse_npy_ints, routed_experts_from_b64};

fn spec(n: u32) -> DecodeSpec {
    DecodeSpec {
        n,
        prompt_len: 3,
        ..DecodeSpec::default()
    }
}

fn feed(dec: &mut Decoder, events: &[Value]) -> (Vec<Item>, Flow) {
    let mut queue = VecDeque::new();
    let mut flow = Flow::More;
    for e in events {
        assert_eq!(flow, Flow::More, "fed after the end");
        flow = dec.on_event(e.to_string().as_bytes(), &mut queue);
    }
    (queue.into_iter().collect(), flow)
}

fn done() -> Value {
    // Not JSON: `[DONE]` is raw text.
    Value::Null
}

fn feed_done(dec: &mut Decoder, events: &[Value]) -> Vec<Item> {
    let mut queue = VecDeque::new();
    for e in events {
        let bytes = if e.is_null() {
            b"[DONE]".to_vec()
        } else {
            e.to_string().into_bytes()
        };
        if dec.on_event(&bytes, &mut queue) == Flow::Done {
            break;
        }
    }
    queue.into_iter().collect()
}

fn ok(items: Vec<Item>) -> Vec<EngineOutput> {
    items
        .into_iter()
        .map(|i| {
            let mut o = i.expect("no error");
            o.engine_data = None;
            o
        })
        .collect()
}

fn chunk(index: u32, tokens: &[u32], finish: Option<&str>, stop: Value) -> Value {
    json!({"request_id": "generate-tokens-x", "usage": null, "output_mode": "tokens",
        "choices": [{"index": index, "finish_reason": finish, "stop_reason": stop,
            "token_ids": tokens, "routed_experts": null, "sampling_mask": null,
            "weight_versions": null, "logprobs": null}]})
}

fn finish_of(finish: &str, stop: Value, tokens: &[u32]) -> Item {
    let mut dec = Decoder::new(spec(1));
    let mut items = feed_done(
        &mut dec,
        &[
            chunk(0, &[5], None, Value::Null),
            chunk(0, tokens, Some(finish), stop),
            done(),
        ],
    );
    items.pop().expect("finishing item")
}

fn usage(prompt: u32, completion: u32, cached: u32) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_tokens: cached,
    })
}

/// Found by the fuzz harness (`tests/fuzz.rs`): two finishing entries of one choice in one chunk
/// were both emitted, so choice 0 finished twice and the request counted as done with choice 1
/// unfinished. The second entry is output after the finish: a contract error.
#[test]
fn a_choice_finishing_twice_in_one_chunk_is_a_contract_error() {
    let mut dec = Decoder::new(spec(2));
    let mut twice = chunk(0, &[5], Some("length"), Value::Null);
    let entry = twice["choices"][0].clone();
    twice["choices"] = json!([entry.clone(), entry]);
    let items = feed_done(&mut dec, &[twice, done()]);
    let finishes = items
        .iter()
        .filter(|i| matches!(i, Ok(o) if o.finish_reason.is_some()))
        .count();
    assert_eq!(finishes, 0, "{items:?}");
    let last = items
        .last()
        .expect("an item")
        .as_ref()
        .expect_err("an error");
    assert_eq!(last.kind, ErrorKind::Internal);
    assert!(last.message.contains("after it finished"), "{last:?}");

    // The same in a unary body.
    let mut dec = Decoder::new(spec(2));
    let mut queue = VecDeque::new();
    let body = json!({"request_id": "r", "choices": [
        {"index": 1, "token_ids": [5], "finish_reason": "length"},
        {"index": 1, "token_ids": [6], "finish_reason": "length"}]});
    dec.on_unary(body.to_string().as_bytes(), &mut queue);
    let items: Vec<Item> = queue.into_iter().collect();
    assert!(
        items.iter().all(|i| i.as_ref().is_err()),
        "no output of a body that breaks the contract: {items:?}"
    );
}

#[test]
fn interleaved_choices_with_cumulative_usage_and_final_cached_tokens() {
    let mut dec = Decoder::new(spec(2));
    let mut a = chunk(1, &[7, 8], None, Value::Null);
    a["usage"] = json!({"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6});
    let items = feed_done(
        &mut dec,
        &[
            a,
            chunk(0, &[9], None, Value::Null),
            chunk(1, &[10], Some("length"), Value::Null),
            chunk(0, &[2], Some("stop"), Value::Null),
            json!({"request_id": "r", "usage": {"prompt_tokens": 4, "total_tokens": 9,
                "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 3}},
                "output_mode": "tokens", "choices": []}),
            done(),
        ],
    );
    let out = ok(items);
    type Summary = (u32, Vec<u32>, Option<FinishReason>, Option<Usage>);
    let summary: Vec<Summary> = out
        .into_iter()
        .map(|o| (o.index, o.token_ids, o.finish_reason, o.usage))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, vec![7, 8], None, usage(4, 2, 0)),
            (0, vec![9], None, usage(4, 1, 0)),
            (
                1,
                vec![10],
                Some(FinishReason::Length { length: 3 }),
                usage(4, 3, 0)
            ),
            // Held until the usage-only chunk: it carries the cached tokens.
            (
                0,
                vec![2],
                Some(FinishReason::Eos { token_id: 2 }),
                usage(4, 2, 3)
            ),
        ]
    );
}

#[test]
fn finish_reasons() {
    let cases: Vec<(&str, Value, &[u32], FinishReason)> = vec![
        (
            "stop",
            json!(151645),
            &[151645],
            FinishReason::Stop {
                matched: StopMatch::TokenId(151645),
            },
        ),
        ("stop", Value::Null, &[2], FinishReason::Eos { token_id: 2 }),
        // The EOS token arrived with an earlier chunk.
        ("stop", Value::Null, &[], FinishReason::Eos { token_id: 5 }),
        (
            "stop",
            json!("</s>"),
            &[4],
            FinishReason::Stop {
                matched: StopMatch::Text("</s>".into()),
            },
        ),
        (
            "length",
            Value::Null,
            &[4, 4],
            FinishReason::Length { length: 3 },
        ),
        (
            "repetition",
            json!("repetition_detected"),
            &[4],
            FinishReason::Stop {
                matched: StopMatch::Text("repetition_detected".into()),
            },
        ),
        (
            "repetition",
            Value::Null,
            &[4],
            FinishReason::Stop {
                matched: StopMatch::Text(REPETITION.into()),
            },
        ),
    ];
    for (finish, stop, tokens, expected) in cases {
        let item = finish_of(finish, stop.clone(), tokens).expect("item");
        assert_eq!(item.finish_reason, Some(expected), "{finish} {stop}");
    }
    for other in ["error", "content_filter"] {
        let item = finish_of(other, Value::Null, &[4]).expect("item");
        assert!(
            matches!(item.finish_reason, Some(FinishReason::Error { .. })),
            "{other}"
        );
    }
}

#[test]
fn an_abort_genfront_did_not_ask_for_is_still_cancelled_with_the_partial_tokens() {
    let mut dec = Decoder::new(spec(1));
    let (mut items, _) = feed(&mut dec, &[chunk(0, &[5, 6], Some("abort"), Value::Null)]);
    let mut queue = VecDeque::new();
    assert_eq!(dec.end(&mut queue, "at [DONE]"), Flow::Done);
    items.extend(queue);
    let out = ok(items);
    let ids: Vec<u32> = out.iter().flat_map(|o| o.token_ids.clone()).collect();
    assert_eq!(ids, vec![5, 6]);
    assert!(matches!(
        out.last().and_then(|o| o.finish_reason.clone()),
        Some(FinishReason::Cancelled { .. })
    ));
}

#[test]
fn abort_after_cancel_splits_tokens_from_the_cancelled_item() {
    let mut dec = Decoder::new(spec(2));
    dec.set_cancelled();
    let (mut items, _) = feed(
        &mut dec,
        &[
            chunk(0, &[5, 6], Some("abort"), Value::Null),
            chunk(1, &[], Some("abort"), Value::Null),
        ],
    );
    // The last finish is held until the end of input.
    assert_eq!(items.len(), 2);
    let mut queue = VecDeque::new();
    assert_eq!(dec.end(&mut queue, "at [DONE]"), Flow::Done);
    items.extend(queue);
    let cancelled = Some(FinishReason::Cancelled {
        message: CANCELLED_MESSAGE.to_owned(),
    });
    let out = ok(items);
    assert_eq!(out.len(), 3);
    assert_eq!(
        (out[0].index, &out[0].token_ids, &out[0].finish_reason),
        (0, &vec![5, 6], &None)
    );
    assert_eq!(
        (
            out[1].index,
            out[1].token_ids.is_empty(),
            &out[1].finish_reason
        ),
        (0, true, &cancelled)
    );
    assert_eq!(out[1].usage, usage(3, 2, 0));
    assert_eq!((out[2].index, &out[2].finish_reason), (1, &cancelled));
}

#[test]
fn cancel_rest_makes_up_items_for_unfinished_choices_only() {
    let mut dec = Decoder::new(spec(3));
    let (items, _) = feed(
        &mut dec,
        &[
            chunk(1, &[5], Some("length"), Value::Null),
            chunk(2, &[7, 8], None, Value::Null),
        ],
    );
    assert_eq!(items.len(), 2);
    dec.set_cancelled();
    let mut queue = VecDeque::new();
    dec.cancel_rest(&mut queue);
    let out = ok(queue.into_iter().collect());
    assert_eq!(
        out.iter().map(|o| (o.index, o.usage)).collect::<Vec<_>>(),
        vec![(0, usage(3, 0, 0)), (2, usage(3, 2, 0))]
    );
    assert!(out.iter().all(|o| matches!(&o.finish_reason,
        Some(FinishReason::Cancelled { message }) if message == CANCELLED_MESSAGE)));
    assert!(dec.all_finished());
}

#[test]
fn incomplete_streams() {
    let mut dec = Decoder::new(spec(2));
    let items = feed_done(
        &mut dec,
        &[chunk(0, &[5], Some("length"), Value::Null), done()],
    );
    let err = items
        .last()
        .expect("items")
        .clone()
        .expect_err("incomplete");
    assert_eq!(err.kind, ErrorKind::StreamIncomplete);

    let mut dec = Decoder::new(spec(1));
    let (_, _) = feed(&mut dec, &[chunk(0, &[5], None, Value::Null)]);
    let mut queue = VecDeque::new();
    dec.end(&mut queue, "without [DONE]");
    let err = queue.pop_back().expect("error").expect_err("incomplete");
    assert_eq!(err.kind, ErrorKind::StreamIncomplete);
    assert!(err.message.contains("without [DONE]"), "{}", err.message);

    // Every choice finished: a missing [DONE] is fine.
    let mut dec = Decoder::new(spec(1));
    let (items, _) = feed(&mut dec, &[chunk(0, &[5], Some("length"), Value::Null)]);
    assert!(items.is_empty(), "the last finish is held");
    let mut queue = VecDeque::new();
    dec.end(&mut queue, "without [DONE]");
    assert_eq!(queue.len(), 1);
    assert!(queue[0].is_ok());
}

fn error_of(event: Value) -> EngineError {
    let mut dec = Decoder::new(spec(1));
    let (mut items, flow) = feed(&mut dec, &[chunk(0, &[5], None, Value::Null), event]);
    assert_eq!(flow, Flow::Done);
    items.pop().expect("error").expect_err("an error")
}

#[test]
fn error_events_are_typed() {
    let e = error_of(
        json!({"error": {"message": "Requested sample logprobs of 30, which is greater than max allowed: 20",
        "type": "BadRequestError", "param": "logprobs", "code": 400}}),
    );
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert_eq!(
        e.message,
        "Requested sample logprobs of 30, which is greater than max allowed: 20"
    );
    assert_eq!(
        (e.status_code, e.err_type.as_deref()),
        (Some(400), Some("BadRequestError"))
    );

    let e = error_of(
        json!({"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}),
    );
    assert_eq!((e.kind, e.status_code), (ErrorKind::Internal, Some(500)));
    let e = error_of(
        json!({"error": {"message": "busy", "type": "ServiceUnavailableError", "code": 503}}),
    );
    assert_eq!(e.kind, ErrorKind::Unavailable);
    // The Rust frontend's string codes.
    let e = error_of(
        json!({"error": {"message": "bad", "type": "invalid_request_error", "code": "invalid_request_error"}}),
    );
    assert_eq!(
        (e.kind, e.status_code),
        (ErrorKind::InvalidArgument, Some(400))
    );
    let e = error_of(json!({"error": "weird"}));
    assert_eq!(e.kind, ErrorKind::Internal);
}

#[test]
fn contract_violations_are_internal_errors() {
    let cases = [
        vec![chunk(1, &[5], None, Value::Null)],
        vec![
            chunk(0, &[5], Some("length"), Value::Null),
            chunk(0, &[6], None, Value::Null),
        ],
        vec![json!({"choices": [{"index": 0, "token_ids": [-1]}]})],
        vec![json!({"choices": [{"token_ids": [1]}]})],
        vec![json!({"choices": {"0": 1}})],
        vec![json!([1, 2])],
    ];
    for events in cases {
        let mut dec = Decoder::new(spec(1));
        let (items, flow) = feed(&mut dec, &events);
        assert_eq!(flow, Flow::Done, "{events:?}");
        let err = items.last().expect("error").clone().expect_err("error");
        assert_eq!(err.kind, ErrorKind::Internal, "{events:?}");
    }
    let mut dec = Decoder::new(spec(1));
    let mut queue = VecDeque::new();
    assert_eq!(dec.on_event(b"{not json", &mut queue), Flow::Done);
    assert_eq!(
        queue.pop_back().expect("error").expect_err("err").kind,
        ErrorKind::Internal
    );
}

fn lp_entry(token: u32, logprob: f64, rank: u32, top: &[(u32, f64, u32)]) -> Value {
    json!({"token_id": token, "logprob": logprob, "rank": rank,
        "top_logprobs": top.iter().map(|(t, l, r)| json!({"token_id": t, "logprob": l, "rank": r})).collect::<Vec<_>>()})
}

fn cand(token_id: u32, logprob: f64, rank: u32) -> Candidate {
    Candidate {
        token_id,
        logprob,
        rank: Some(rank),
        text: None,
    }
}

#[test]
fn top_logprobs_put_the_sampled_token_back_at_its_rank() {
    let mut dec = Decoder::new(DecodeSpec {
        logprobs: Some(2),
        ..spec(1)
    });
    let mut c = chunk(0, &[5, 6, 7], None, Value::Null);
    c["choices"][0]["logprobs"] = json!({"content": [
        // Sampled rank 2, inside the top 2: the wire has 2 entries.
        lp_entry(5, -0.9, 2, &[(5, -0.9, 2), (9, -0.1, 1)]),
        // Sampled rank 4, outside: 3 entries.
        lp_entry(6, -3.0, 4, &[(6, -3.0, 4), (1, -0.2, 1), (3, -0.5, 2)]),
        // Older shape, no rank: placed by logprob.
        {"token": "token_id:7", "logprob": -0.05, "bytes": null,
         "top_logprobs": [{"token": "token_id:7", "logprob": -0.05}, {"token": "token_id:8", "logprob": -0.7}]},
    ]});
    let (items, _) = feed(&mut dec, &[c]);
    let out = ok(items);
    let lps = out[0].logprobs.clone().expect("logprobs");
    assert_eq!(lps[0].top, vec![cand(9, -0.1, 1), cand(5, -0.9, 2)]);
    assert_eq!(lps[1].top, vec![cand(1, -0.2, 1), cand(3, -0.5, 2)]);
    assert_eq!(
        (
            lps[2].rank,
            lps[2].top.iter().map(|c| c.token_id).collect::<Vec<_>>()
        ),
        (None, vec![7, 8])
    );
}

#[test]
fn logprob_token_ids_fill_selected_in_request_order() {
    let mut dec = Decoder::new(DecodeSpec {
        logprobs: Some(3),
        selected: vec![40, 5, 40],
        ..spec(1)
    });
    let mut c = chunk(0, &[5], None, Value::Null);
    c["choices"][0]["logprobs"] = json!({"content": [
        lp_entry(5, -0.9, 2, &[(5, -0.9, 2), (40, -4.0, 30)]),
    ]});
    let (items, _) = feed(&mut dec, &[c]);
    let lp = &ok(items)[0].logprobs.clone().expect("logprobs")[0];
    assert_eq!(
        lp,
        &TokenLogprob {
            token_id: 5,
            logprob: -0.9,
            rank: Some(2),
            top: Vec::new(),
            selected: vec![cand(40, -4.0, 30), cand(5, -0.9, 2), cand(40, -4.0, 30)],
            text: None,
        }
    );
}

#[test]
fn logprobs_that_do_not_line_up_are_dropped() {
    let mut dec = Decoder::new(DecodeSpec {
        logprobs: Some(0),
        ..spec(1)
    });
    let mut c = chunk(0, &[5, 6], None, Value::Null);
    c["choices"][0]["logprobs"] = json!({"content": [lp_entry(5, -0.9, 2, &[(5, -0.9, 2)])]});
    let (items, _) = feed(&mut dec, &[c]);
    assert_eq!(ok(items)[0].logprobs, None);
}

/// `.npy` bytes with a given dtype string and raw data.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n");
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_integer_dtypes() {
    let u1 = parse_npy_ints(&npy("|u1", "(1, 2, 2)", &[1, 2, 255, 0])).expect("u1");
    assert_eq!((u1.shape, u1.values), (vec![1, 2, 2], vec![1, 2, 255, 0]));
    let u2 = parse_npy_ints(&npy("<u2", "(2,)", &[1, 1, 0xff, 0xff])).expect("u2");
    assert_eq!(u2.values, vec![257, 65535]);
    let i2 = parse_npy_ints(&npy(">i2", "(2,)", &[0xff, 0xfe, 0, 3])).expect("i2");
    assert_eq!(i2.values, vec![-2, 3]);
    let i4 = parse_npy_ints(&npy_i32(&[2, 1, 2], &[1, -2, 3, 4])).expect("i4");
    assert_eq!((i4.shape, i4.values), (vec![2, 1, 2], vec![1, -2, 3, 4]));
    let empty = parse_npy_ints(&npy("<i4", "(0, 3, 2)", &[])).expect("empty");
    assert_eq!((empty.shape, empty.values.len()), (vec![0, 3, 2], 0));
    for bad in [
        npy("<f4", "(1,)", &[0; 4]),
        npy("<i4", "(2,)", &[0; 4]),
        npy("<i3", "(1,)", &[0; 3]),
        b"\x93NUMPY\x01".to_vec(),
        b"PK\x03\x04".to_vec(),
        {
            let mut f = npy("<i4", "(1,)", &[0; 4]);
            f.splice(10..10, *b"'fortran_order': True, ");
            f
        },
    ] {
        assert!(parse_npy_ints(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn routed_experts_are_decoded_when_requested() {
    let b64 = STANDARD.encode(npy("|u1", "(2, 1, 2)", &[3, 4, 5, 6]));
    assert_eq!(routed_experts_from_b64(&b64), Ok((1, 2, vec![3, 4, 5, 6])));
    let mut c = chunk(0, &[5], None, Value::Null);
    c["choices"][0]["routed_experts"] = json!(b64);
    let mut dec = Decoder::new(DecodeSpec {
        routed_experts: true,
        ..spec(1)
    });
    let (items, _) = feed(&mut dec, &[c.clone()]);
    assert_eq!(
        ok(items)[0].routed_experts,
        Some(RoutedExperts {
            num_layers: 1,
            top_k: 2,
            ids: vec![3, 4, 5, 6],
        })
    );
    // Not requested: left in the native frame only.
    let mut dec = Decoder::new(spec(1));
    let (mut items, _) = feed(&mut dec, &[c.clone()]);
    let o = items.pop().expect("item").expect("ok");
    assert_eq!(o.routed_experts, None);
    assert_eq!(
        o.engine_data.expect("frame")["choices"][0]["routed_experts"],
        json!(b64)
    );
    // Undecodable: None, native kept.
    c["choices"][0]["routed_experts"] = json!("not base64!");
    let mut dec = Decoder::new(DecodeSpec {
        routed_experts: true,
        ..spec(1)
    });
    let (mut items, _) = feed(&mut dec, &[c]);
    let o = items.pop().expect("item").expect("ok");
    assert_eq!(o.routed_experts, None);
    assert!(o.engine_data.is_some());
}

#[test]
fn sampling_masks_handoff_and_engine_data() {
    let mut c = chunk(0, &[5, 6], None, Value::Null);
    c["choices"][0]["sampling_mask"] = json!([[5, 9], [6]]);
    c["kv_transfer_params"] = json!({"remote_block_ids": [1]});
    let mut dec = Decoder::new(DecodeSpec {
        sampling_mask: true,
        ..spec(1)
    });
    let (mut items, _) = feed(&mut dec, &[c.clone()]);
    let o = items.pop().expect("item").expect("ok");
    assert_eq!(o.sampling_mask, Some(vec![vec![5, 9], vec![6]]));
    assert_eq!(o.handoff, Some(json!({"remote_block_ids": [1]})));
    assert_eq!(o.engine_data, Some(c.clone()));
    // One row per token, or nothing.
    c["choices"][0]["sampling_mask"] = json!([[5, 9]]);
    let mut dec = Decoder::new(DecodeSpec {
        sampling_mask: true,
        ..spec(1)
    });
    let (mut items, _) = feed(&mut dec, &[c]);
    assert_eq!(items.pop().expect("item").expect("ok").sampling_mask, None);
}

#[test]
fn max_tokens_zero_drops_the_extra_token() {
    let mut dec = Decoder::new(DecodeSpec {
        discard_output: true,
        logprobs: Some(0),
        ..spec(1)
    });
    let mut c = chunk(0, &[5], Some("length"), Value::Null);
    c["choices"][0]["logprobs"] = json!({"content": [lp_entry(5, -0.9, 2, &[(5, -0.9, 2)])]});
    let out = ok(feed_done(&mut dec, &[c, done()]));
    assert_eq!(out.len(), 1);
    assert!(out[0].token_ids.is_empty() && out[0].logprobs.is_none());
    assert_eq!(
        out[0].finish_reason,
        Some(FinishReason::Length { length: 0 })
    );
    assert_eq!(out[0].usage, usage(3, 0, 0));
}

#[test]
fn unary_bodies() {
    let body = json!({"request_id": "generate-tokens-x", "model": "m", "created": 1,
        "usage": {"prompt_tokens": 3, "total_tokens": 6, "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 2}},
        // Only the tail: positions 1 and 2.
        "prompt_logprobs": [{"11": {"logprob": -1.5, "rank": 3, "decoded_token": null},
                             "40": {"logprob": -0.1, "rank": 1, "decoded_token": null}},
                            {"12": {"logprob": -0.2, "rank": 1, "decoded_token": null}}],
        "kv_transfer_params": {"do_remote_prefill": true},
        "output_mode": "tokens",
        "choices": [{"index": 1, "finish_reason": "length", "stop_reason": null, "token_ids": [7]},
                    {"index": 0, "finish_reason": "stop", "stop_reason": 9, "token_ids": [8, 9]}]});
    let mut dec = Decoder::new(DecodeSpec {
        prompt: vec![10, 11, 12],
        prompt_logprobs: Some(PromptLogprobOptions { start: 1, top_k: 1 }),
        ..spec(2)
    });
    let mut queue = VecDeque::new();
    assert_eq!(
        dec.on_unary(body.to_string().as_bytes(), &mut queue),
        Flow::Done
    );
    let items: Vec<Item> = queue.into_iter().collect();
    let frames: Vec<Value> = items
        .iter()
        .map(|i| i.clone().expect("ok").engine_data.expect("frame"))
        .collect();
    assert!(
        frames.iter().all(|f| f.get("prompt_logprobs").is_none()
            && f["choices"].as_array().map(Vec::len) == Some(1))
    );
    let out = ok(items);
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].index, out[0].usage), (1, usage(3, 1, 2)));
    assert_eq!(
        out[1].finish_reason,
        Some(FinishReason::Stop {
            matched: StopMatch::TokenId(9)
        })
    );
    assert_eq!(out[1].handoff, Some(json!({"do_remote_prefill": true})));
    let plp = out[0].prompt_logprobs.clone().expect("prompt logprobs");
    assert_eq!(plp.start, 1);
    assert_eq!(plp.entries.len(), 2);
    let first = plp.entries[0].clone().expect("position 1");
    assert_eq!((first.token_id, first.rank), (11, Some(3)));
    assert_eq!(first.top, vec![cand(40, -0.1, 1)]);

    // No choices at all, or an error body.
    let mut dec = Decoder::new(spec(1));
    let mut queue = VecDeque::new();
    dec.on_unary(br#"{"choices": []}"#, &mut queue);
    assert_eq!(
        queue.pop_back().expect("err").expect_err("e").kind,
        ErrorKind::StreamIncomplete
    );
    let mut dec = Decoder::new(spec(1));
    let mut queue = VecDeque::new();
    dec.on_unary(
        br#"{"error": {"message": "m", "type": "BadRequestError", "code": 400}}"#,
        &mut queue,
    );
    assert_eq!(
        queue.pop_back().expect("err").expect_err("e").kind,
        ErrorKind::InvalidArgument
    );
}

/// The client asks vLLM for plain `prompt_logprobs` (0.33.0 refuses `prompt_logprob_start`
/// without `prompt_logprob_token_ids`), so the unary body scores the whole prompt (`null` at
/// position 0); the decoder keeps the rows from the requested start only.
#[test]
fn whole_prompt_logprobs_are_cut_to_the_requested_start() {
    let row = |id: u32, lp: f64| json!({id.to_string(): {"logprob": lp, "rank": 1, "decoded_token": null}});
    let body = json!({"request_id": "generate-tokens-x",
        "usage": {"prompt_tokens": 5, "total_tokens": 6, "completion_tokens": 1},
        "prompt_logprobs": [null, row(11, -1.0), row(12, -2.0), row(13, -3.0), row(14, -4.0)],
        "choices": [{"index": 0, "finish_reason": "length", "stop_reason": null, "token_ids": [7]}]});
    for start in [0u32, 1, 2, 4, 5, 9] {
        let mut dec = Decoder::new(DecodeSpec {
            prompt: vec![10, 11, 12, 13, 14],
            prompt_len: 5,
            prompt_logprobs: Some(PromptLogprobOptions { start, top_k: 0 }),
            ..spec(1)
        });
        let mut queue = VecDeque::new();
        assert_eq!(
            dec.on_unary(body.to_string().as_bytes(), &mut queue),
            Flow::Done
        );
        let out = ok(queue.into_iter().collect());
        let plp = out[0].prompt_logprobs.clone().expect("prompt logprobs");
        let first = start.min(5);
        assert_eq!(plp.start, first, "start {start}");
        let rows: Vec<Option<(u32, f64)>> = plp
            .entries
            .iter()
            .map(|e| e.as_ref().map(|t| (t.token_id, t.logprob)))
            .collect();
        let expected: Vec<Option<(u32, f64)>> = (first..5)
            .map(|pos| (pos > 0).then(|| (10 + pos, -f64::from(pos))))
            .collect();
        assert_eq!(rows, expected, "start {start}");
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        prop_oneof![
            Just("stop"),
            Just("length"),
            Just("abort"),
            Just("repetition"),
            Just("[DONE]"),
            Just("AAAA"),
            Just("k05VTVBZAQB2AHsnZGVzY3InOiAnPGk0Jywg")
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("index"),
            Just("token_ids"),
            Just("choices"),
            Just("logprobs"),
            Just("content"),
            Just("top_logprobs"),
            Just("finish_reason"),
            Just("stop_reason"),
            Just("usage"),
            Just("routed_experts"),
            Just("sampling_mask"),
            Just("error"),
            Just("token_id"),
            Just("rank"),
            Just("logprob"),
            Just("prompt_logprobs"),
            Just("1"),
            Just("code"),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys, inner), 0..5).prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}

fn full_spec(n: u32) -> DecodeSpec {
    DecodeSpec {
        n,
        prompt_len: 2,
        prompt: vec![1, 2],
        logprobs: Some(2),
        selected: Vec::new(),
        prompt_logprobs: Some(PromptLogprobOptions { start: 0, top_k: 2 }),
        routed_experts: true,
        sampling_mask: true,
        discard_output: false,
        fallback_eos: 2,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(events in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..6), n in 0u32..3) {
        let mut dec = Decoder::new(full_spec(n));
        let mut queue = VecDeque::new();
        for e in &events {
            if dec.on_event(e, &mut queue) == Flow::Done { break; }
        }
        let mut dec = Decoder::new(full_spec(n));
        let _ = dec.on_unary(events.concat().as_slice(), &mut queue);
    }

    #[test]
    fn arbitrary_json_never_panics(events in prop::collection::vec(json_value(), 0..6), n in 0u32..3, cancelled in any::<bool>(), selected in any::<bool>()) {
        let mut spec = full_spec(n);
        if selected {
            spec.selected = vec![1, 5];
        }
        let mut dec = Decoder::new(spec.clone());
        if cancelled { dec.set_cancelled(); }
        let mut queue = VecDeque::new();
        for e in &events {
            if dec.on_event(e.to_string().as_bytes(), &mut queue) == Flow::Done { break; }
        }
        dec.cancel_rest(&mut queue);
        for e in &events {
            let mut dec = Decoder::new(spec.clone());
            let _ = dec.on_unary(e.to_string().as_bytes(), &mut queue);
        }
        prop_assert!(queue.iter().flatten().all(|o| o.index < n.max(1)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_npy_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..160), header in "[ -~]{0,80}") {
        let _ = parse_npy_ints(&bytes);
        let mut framed = b"\x93NUMPY\x01\x00".to_vec();
        framed.extend_from_slice(&(header.len() as u16).to_le_bytes());
        framed.extend_from_slice(header.as_bytes());
        framed.extend_from_slice(&bytes);
        let _ = parse_npy_ints(&framed);
        let _ = routed_experts_from_b64(&STANDARD.encode(&framed));
        let _ = routed_experts_from_b64(&header);
    }

    #[test]
    fn npy_encoder_and_decoder_agree(rows in 0usize..4, layers in 1usize..4, k in 1usize..4, seed in any::<i32>()) {
        let ids: Vec<i32> = (0..rows * layers * k).map(|i| seed.wrapping_add(i as i32 * 7919)).collect();
        let parsed = parse_npy_ints(&npy_i32(&[rows, layers, k], &ids)).expect("own encoding");
        prop_assert_eq!(parsed.shape, vec![rows, layers, k]);
        prop_assert_eq!(parsed.values, ids.iter().map(|i| i64::from(*i)).collect::<Vec<_>>());
    }
}

/// The returned hand-off of a NIXL prefill (`spec/vllm-native.md` §10.2).
fn nixl() -> Value {
    json!({"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [1, 2],
           "remote_engine_id": "e0", "remote_request_id": "generate-tokens-x",
           "remote_host": "10.0.0.2", "remote_port": 5600, "tp_size": 1})
}

#[test]
fn pd_prefill_answer_hands_off_its_kv_transfer_params() {
    // Unary (what genfront asks of a prefill leg): one token, `length`, the hand-off at the top.
    let body = json!({"request_id": "generate-tokens-x", "model": "m",
        "usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1},
        "prompt_logprobs": [null, {"11": {"logprob": -1.5, "rank": 1, "decoded_token": null}},
                            {"12": {"logprob": -0.2, "rank": 1, "decoded_token": null}}],
        "kv_transfer_params": nixl(),
        "choices": [{"index": 0, "finish_reason": "length", "stop_reason": null,
                     "token_ids": [7]}]});
    let mut dec = Decoder::new(DecodeSpec {
        prompt: vec![10, 11, 12],
        prompt_logprobs: Some(PromptLogprobOptions { start: 0, top_k: 0 }),
        ..spec(1)
    });
    let mut queue = VecDeque::new();
    assert_eq!(
        dec.on_unary(body.to_string().as_bytes(), &mut queue),
        Flow::Done
    );
    let out = ok(queue.into_iter().collect());
    let last = out.last().expect("an output");
    assert_eq!(last.handoff, Some(nixl()));
    assert_eq!(last.finish_reason, Some(FinishReason::Length { length: 1 }));
    let tokens: Vec<u32> = out.iter().flat_map(|o| o.token_ids.clone()).collect();
    assert_eq!(tokens, [7]);
    assert!(out[0].prompt_logprobs.is_some(), "prefill computes them");

    // Streamed (a prefill leg of a build that streams anyway): the hand-off on the final chunk
    // reaches the choice's last item, which the usage chunk then completes.
    let mut dec = Decoder::new(spec(1));
    let items = feed_done(
        &mut dec,
        &[
            json!({"choices": [{"index": 0, "token_ids": [7], "finish_reason": "length"}],
                   "kv_transfer_params": nixl()}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                   "total_tokens": 4}}),
            done(),
        ],
    );
    let out = ok(items);
    let last = out.last().expect("an output");
    assert_eq!(last.handoff, Some(nixl()));
    assert_eq!(last.finish_reason, Some(FinishReason::Length { length: 1 }));
    assert!(out[..out.len() - 1].iter().all(|o| o.handoff.is_none()));
}

/// `output_mode: "text"` chunks (`_create_text_logprobs`): `{token, logprob, bytes,
/// top_logprobs}` entries without ids. The sampled token gets its decoded text; the first top
/// entry (the sampled token, vLLM's dict starts with it) is dropped and the rest kept in order
/// by text, without an id; the choice's `text` delta stays in `engine_data`. Prompt logprobs'
/// `decoded_token` (an engine with a tokenizer) becomes the candidates' text.
#[test]
fn text_mode_logprobs_and_decoded_prompt_tokens() {
    let mut dec = Decoder::new(DecodeSpec {
        logprobs: Some(2),
        ..spec(1)
    });
    let mut c = chunk(0, &[110_837], Some("length"), Value::Null);
    c["output_mode"] = json!("text");
    c["choices"][0]["text"] = json!(" ghyz");
    c["choices"][0]["logprobs"] = json!({"content": [{"token": " ghyz", "logprob": -0.442,
        "bytes": [32, 103, 104, 121, 122], "top_logprobs": [
            {"token": " ghyz", "logprob": -0.442, "bytes": [32, 103, 104, 121, 122]},
            {"token": " gliq", "logprob": -0.774, "bytes": [32, 103, 108, 105, 113]}]}]});
    let items = feed_done(&mut dec, &[c, done()]);
    let o = items.into_iter().next().expect("one item").expect("ok");
    assert_eq!(
        o.logprobs,
        Some(vec![TokenLogprob {
            token_id: 110_837,
            logprob: -0.442,
            rank: None,
            top: vec![Candidate {
                token_id: Candidate::UNKNOWN_ID,
                logprob: -0.774,
                rank: None,
                text: Some(" gliq".to_owned()),
            }],
            selected: Vec::new(),
            text: Some(" ghyz".to_owned()),
        }])
    );
    assert_eq!(
        o.engine_data
            .as_ref()
            .map(|d| d["choices"][0]["text"].clone()),
        Some(json!(" ghyz"))
    );

    let mut dec = Decoder::new(DecodeSpec {
        prompt: vec![5, 6],
        prompt_logprobs: Some(PromptLogprobOptions { start: 0, top_k: 1 }),
        ..spec(1)
    });
    let body = json!({"request_id": "generate-tokens-x", "output_mode": "text",
        "prompt_logprobs": [null, {"6": {"logprob": -13.0, "rank": 4139, "decoded_token": " g"},
                                   "9": {"logprob": -0.7, "rank": 1, "decoded_token": " j"}}],
        "choices": [{"index": 0, "finish_reason": "length", "stop_reason": null,
                     "token_ids": [7], "text": " h", "logprobs": null}]});
    let mut queue = VecDeque::new();
    dec.on_unary(body.to_string().as_bytes(), &mut queue);
    let o = queue.pop_front().expect("one item").expect("ok");
    let p = o.prompt_logprobs.expect("prompt logprobs");
    let e = p.entries[1].clone().expect("position 1");
    assert_eq!(e.text.as_deref(), Some(" g"));
    assert_eq!(e.top[0].text.as_deref(), Some(" j"));
}
