//! Response side: unary bodies, `meta_info` key order, logprob shapes, finish reasons, streaming.

use base64::Engine as _;
use genfront_format::GenerateFormat;
use genfront_protocol::{EngineOutput, ErrorKind, FinishReason, StopMatch};
use http::StatusCode;
use serde_json::{Value, json};

use crate::support::*;

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[test]
fn unary_shape_and_meta_info_order() {
    let p = prepared(r#"{"input_ids":[1,2,3],"rid":"r1","sampling_params":{"max_new_tokens":3}}"#);
    let run = run(p, |_| Script::tokens(3));
    let body = unary_body(&run);
    assert_eq!(
        keys(&body),
        ["output_ids", "meta_info"],
        "no `text`: skip-tokenizer-init shape"
    );
    assert_eq!(body["output_ids"].as_array().unwrap().len(), 3);
    let meta = &body["meta_info"];
    assert_eq!(
        keys(meta),
        [
            "id",
            "finish_reason",
            "prompt_tokens",
            "weight_version",
            "num_retractions",
            "reasoning_tokens",
            "completion_tokens",
            "cached_tokens",
            "e2e_latency",
            "response_sent_to_client_ts"
        ]
    );
    assert_eq!(meta["id"], "r1");
    assert_eq!(
        meta["finish_reason"],
        json!({"type": "length", "length": 3})
    );
    assert_eq!(meta["prompt_tokens"], 3);
    assert_eq!(meta["weight_version"], "default");
    assert_eq!(meta["num_retractions"], 0);
    assert_eq!(meta["completion_tokens"], 3);
    assert_eq!(meta["cached_tokens"], 0);
    assert!(meta["e2e_latency"].as_f64().is_some_and(|x| x >= 0.0));
    assert!(
        meta["response_sent_to_client_ts"]
            .as_f64()
            .is_some_and(|x| x > 1.0e9)
    );
}

#[test]
fn logprob_keys_follow_sglang_order() {
    let p = prepared(r#"{"input_ids":[1,2,3],"return_logprob":true}"#);
    let body = unary_body(&run(p, |_| Script::tokens(2)));
    let meta = &body["meta_info"];
    assert_eq!(
        keys(meta),
        [
            "id",
            "finish_reason",
            "prompt_tokens",
            "weight_version",
            "num_retractions",
            "input_token_logprobs",
            "output_token_logprobs",
            "output_token_logprobs_length",
            "reasoning_tokens",
            "completion_tokens",
            "cached_tokens",
            "e2e_latency",
            "response_sent_to_client_ts"
        ]
    );
    // logprob_start_len -1: no prompt logprobs, but the key is there (SGLang always sets it).
    assert_eq!(meta["input_token_logprobs"], json!([]));
    let out = meta["output_token_logprobs"].as_array().unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(meta["output_token_logprobs_length"], 2);
    for (entry, id) in out.iter().zip(body["output_ids"].as_array().unwrap()) {
        let e = entry.as_array().unwrap();
        assert_eq!(e.len(), 3);
        assert!(e[0].is_f64());
        assert_eq!(&e[1], id);
        assert_eq!(e[2], Value::Null);
    }
}

#[test]
fn prompt_logprobs_from_start_zero_and_k() {
    let p = prepared(
        r#"{"input_ids":[11,12,13,14],"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":2,"token_ids_logprob":[7,9]}"#,
    );
    let body = unary_body(&run(p, |_| Script::tokens(2)));
    let meta = &body["meta_info"];
    assert_eq!(
        keys(meta)[5..12],
        [
            "input_token_logprobs",
            "output_token_logprobs",
            "output_token_logprobs_length",
            "input_top_logprobs",
            "output_top_logprobs",
            "input_token_ids_logprobs",
            "output_token_ids_logprobs"
        ]
    );
    let input = meta["input_token_logprobs"].as_array().unwrap();
    assert_eq!(input.len(), 4);
    assert_eq!(input[0], json!([null, 11, null]));
    assert!(input[1][0].is_f64());
    assert_eq!(input[3][1], 14);
    let top = meta["input_top_logprobs"].as_array().unwrap();
    assert_eq!(top[0], Value::Null);
    assert_eq!(top[1].as_array().unwrap().len(), 2);
    assert_eq!(top[1][0].as_array().unwrap().len(), 3);
    let tid = meta["input_token_ids_logprobs"].as_array().unwrap();
    assert_eq!(tid[0], Value::Null);
    let ids: Vec<&Value> = tid[2].as_array().unwrap().iter().map(|t| &t[1]).collect();
    assert_eq!(ids, [&json!(7), &json!(9)]);
    let out_top = meta["output_top_logprobs"].as_array().unwrap();
    assert_eq!(out_top.len(), 2);
    assert_eq!(out_top[0].as_array().unwrap().len(), 2);
    assert_eq!(
        meta["output_token_ids_logprobs"].as_array().unwrap().len(),
        2
    );

    let p = prepared(r#"{"input_ids":[11,12,13,14],"return_logprob":true,"logprob_start_len":2}"#);
    let body = unary_body(&run(p, |_| Script::tokens(1)));
    let input = body["meta_info"]["input_token_logprobs"]
        .as_array()
        .unwrap();
    assert_eq!(input.len(), 2);
    // SGLang pads the first returned position with None whatever logprob_start_len is
    // (scheduler_output_processor_mixin.py: `[None] + input_token_logprobs[:-1]`).
    assert!(input[0][0].is_null(), "position 2 is padded: {input:?}");
    assert_eq!(input[0][1], 13);
    assert!(input[1][0].is_f64(), "position 3 has a logprob");
    assert_eq!(input[1][1], 14);
    assert!(
        body["meta_info"].get("input_top_logprobs").is_none(),
        "top_logprobs_num 0"
    );

    let p = prepared(
        r#"{"input_ids":[11,12,13,14],"return_logprob":true,"logprob_start_len":1,"top_logprobs_num":2,"token_ids_logprob":[7]}"#,
    );
    let body = unary_body(&run(p, |_| Script::tokens(1)));
    let meta = &body["meta_info"];
    assert_eq!(meta["input_token_logprobs"][0][0], Value::Null);
    assert!(meta["input_token_logprobs"][1][0].is_f64());
    assert_eq!(meta["input_top_logprobs"][0], Value::Null);
    assert_eq!(
        meta["input_top_logprobs"][1].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(meta["input_token_ids_logprobs"][0], Value::Null);
}

#[test]
fn finish_reasons() {
    let cases = [
        (
            FinishReason::Eos { token_id: 2 },
            json!({"type": "stop", "matched": 2}),
        ),
        (
            FinishReason::Stop {
                matched: StopMatch::TokenId(9),
            },
            json!({"type": "stop", "matched": 9}),
        ),
        (
            stop_text("</answer>"),
            json!({"type": "stop", "matched": "</answer>"}),
        ),
        (
            FinishReason::Length { length: 0 },
            json!({"type": "length", "length": 2}),
        ),
        (
            FinishReason::Cancelled {
                message: "Aborted".into(),
            },
            json!({"type": "abort", "message": "Aborted", "status_code": null, "err_type": null}),
        ),
    ];
    for (finish, want) in cases {
        let p = prepared(r#"{"input_ids":[1]}"#);
        let body = unary_body(&run(p, |_| Script {
            finish: finish.clone(),
            ..Script::tokens(2)
        }));
        assert_eq!(body["meta_info"]["finish_reason"], want);
        // Aborted requests are a normal 200 with the partial tokens (RL clients resume from them).
        assert_eq!(body["output_ids"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn engine_failures_fail_the_request() {
    let p = prepared(r#"{"input_ids":[1]}"#);
    let run = run(p, |_| Script {
        finish: FinishReason::Error {
            message: "CUDA oom at 0xdead".into(),
        },
        ..Script::tokens(2)
    });
    let err = run.unary.unwrap().unwrap_err();
    assert_eq!(err.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let answer = format(false).error_response(&err, false);
    assert_eq!(
        json_of(&answer.body),
        json!({"object": "error", "message": "Internal server error", "type": "500", "param": null, "code": 500})
    );

    // Streaming: the failing delta is an error, the frontend then sends the error event.
    let p = prepared(r#"{"input_ids":[1],"stream":true}"#);
    let run = run_stream_fail(p);
    assert!(run.is_err());

    // A stream that ends without a finish reason is incomplete.
    let p = prepared(r#"{"input_ids":[1]}"#);
    let outs = vec![(
        0,
        EngineOutput {
            token_ids: vec![4],
            ..Default::default()
        },
    )];
    let err = drive(p, outs).unary.unwrap().unwrap_err();
    assert!(
        matches!(err, genfront_format::GenerateError::Engine(ref e) if e.kind == ErrorKind::StreamIncomplete)
    );

    // Missing logprobs break the contract.
    let p = prepared(r#"{"input_ids":[1],"return_logprob":true}"#);
    let outs = vec![(
        0,
        EngineOutput {
            token_ids: vec![4],
            finish_reason: Some(FinishReason::Length { length: 1 }),
            ..Default::default()
        },
    )];
    assert!(drive(p, outs).unary.unwrap().is_err());

    // Output after the finish reason breaks it too; so does an unknown sub index.
    let p = prepared(r#"{"input_ids":[1]}"#);
    let fin = EngineOutput {
        token_ids: vec![4],
        finish_reason: Some(FinishReason::Length { length: 1 }),
        ..Default::default()
    };
    assert!(
        drive(p, vec![(0, fin.clone()), (0, fin.clone())])
            .unary
            .unwrap()
            .is_err()
    );
    let p = prepared(r#"{"input_ids":[1]}"#);
    assert!(drive(p, vec![(3, fin)]).unary.unwrap().is_err());
}

fn run_stream_fail(p: genfront_format::Prepared) -> Result<(), genfront_format::GenerateError> {
    let mut asm = p.assembler;
    let mut events = Vec::new();
    asm.on_output(
        0,
        EngineOutput {
            token_ids: vec![1],
            ..Default::default()
        },
        &mut events,
    )?;
    assert_eq!(events.len(), 1);
    asm.on_output(
        0,
        EngineOutput {
            finish_reason: Some(FinishReason::Error {
                message: "boom".into(),
            }),
            ..Default::default()
        },
        &mut events,
    )
}

#[test]
fn batch_unary_is_an_array_in_input_order() {
    let p = prepared(r#"{"input_ids":[[1],[2,3],[4]],"rid":["a","b","c"]}"#);
    // Finish the last item first.
    let per_sub: Vec<Vec<EngineOutput>> = p
        .subs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            synth(
                &s.request,
                &Script {
                    seed: i as u32,
                    ..Script::tokens(1 + i)
                },
            )
        })
        .collect();
    let mut outs: Vec<(usize, EngineOutput)> = interleave(per_sub);
    outs.sort_by_key(|(sub, _)| std::cmp::Reverse(*sub));
    let body = unary_body(&drive(p, outs));
    let arr = body.as_array().unwrap();
    let ids: Vec<&Value> = arr.iter().map(|x| &x["meta_info"]["id"]).collect();
    assert_eq!(ids, [&json!("a"), &json!("b"), &json!("c")]);
    assert!(arr.iter().all(|x| x.get("index").is_none()));
    assert_eq!(arr[1]["meta_info"]["prompt_tokens"], 2);

    // A single prompt with n > 1 is answered as an array too, each with its own fresh id.
    let p = prepared(r#"{"input_ids":[1],"rid":"x","sampling_params":{"n":2}}"#);
    let body = unary_body(&run(p, |_| Script::tokens(1)));
    let arr = body.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_ne!(arr[0]["meta_info"]["id"], arr[1]["meta_info"]["id"]);
    assert_ne!(arr[0]["meta_info"]["id"], "x");
}

#[test]
fn cumulative_stream_chunks() {
    let p = prepared(
        r#"{"input_ids":[1,2],"stream":true,"return_logprob":true,"logprob_start_len":0}"#,
    );
    let run = run(p, |_| Script {
        chunks: vec![1, 2, 0, 1],
        ..Script::tokens(4)
    });
    assert!(matches!(run.stream_end, Some(Ok(()))));
    assert_eq!(run.chunks.len(), 4, "one chunk per engine output");
    let mut prev: Vec<Value> = Vec::new();
    for (i, c) in run.chunks.iter().enumerate() {
        assert_eq!(
            keys(c),
            ["output_ids", "meta_info"],
            "single stream: no index"
        );
        let ids = c["output_ids"].as_array().unwrap().clone();
        assert!(ids.starts_with(&prev));
        prev = ids;
        let meta = &c["meta_info"];
        assert_eq!(meta["input_token_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(
            meta["output_token_logprobs"].as_array().unwrap().len(),
            prev.len()
        );
        assert_eq!(meta["completion_tokens"], prev.len());
        let last = i == 3;
        assert_eq!(meta["finish_reason"].is_null(), !last);
        assert_eq!(meta.get("e2e_latency").is_some(), last);
        assert_eq!(meta.get("response_sent_to_client_ts").is_some(), i == 0);
    }
    assert_eq!(prev.len(), 4);
}

#[test]
fn incremental_stream_chunks() {
    let info = engine();
    let body = r#"{"input_ids":[1,2],"stream":true,"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":1}"#;
    let p = prepare_with(body, &Default::default(), &info, true).unwrap();
    let run = run(p, |_| Script {
        chunks: vec![2, 1, 0, 3],
        ..Script::tokens(6)
    });
    let lens: Vec<usize> = run
        .chunks
        .iter()
        .map(|c| c["output_ids"].as_array().unwrap().len())
        .collect();
    assert_eq!(lens, [2, 1, 0, 3]);
    let mut total = 0;
    for c in &run.chunks {
        let meta = &c["meta_info"];
        let n = c["output_ids"].as_array().unwrap().len();
        total += n;
        assert_eq!(meta["output_token_logprobs"].as_array().unwrap().len(), n);
        assert_eq!(meta["output_top_logprobs"].as_array().unwrap().len(), n);
        assert_eq!(meta["output_token_logprobs_length"], total, "cumulative");
        assert_eq!(meta["completion_tokens"], total, "cumulative");
        // Input-side lists are repeated in full in every chunk.
        assert_eq!(meta["input_token_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(meta["input_top_logprobs"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn batch_stream_chunks_carry_index() {
    let p = prepared(r#"{"input_ids":[[1],[2]],"rid":["a","b"],"stream":true}"#);
    let run = run(p, |i| Script {
        seed: i as u32,
        ..Script::tokens(2)
    });
    assert_eq!(run.chunks.len(), 4);
    for c in &run.chunks {
        assert_eq!(keys(c), ["output_ids", "meta_info", "index"]);
        let want = if c["meta_info"]["id"] == "a" { 0 } else { 1 };
        assert_eq!(c["index"], want);
    }
}

#[test]
fn routed_experts_only_on_the_final_answer() {
    let p = prepared(
        r#"{"input_ids":[1,2,3],"return_routed_experts":true,"routed_experts_start_len":1,"stream":true}"#,
    );
    let req = p.subs[0].request.clone();
    let outs = synth(&req, &Script::tokens(3));
    let mut want: Vec<u8> = Vec::new();
    for o in &outs {
        for id in &o.routed_experts.as_ref().unwrap().ids {
            want.extend_from_slice(&id.to_le_bytes());
        }
    }
    let run = drive(p, outs.into_iter().map(|o| (0, o)).collect());
    let (last, rest) = run.chunks.split_last().unwrap();
    assert!(
        rest.iter()
            .all(|c| c["meta_info"].get("routed_experts").is_none())
    );
    let meta = &last["meta_info"];
    let b64 = meta["routed_experts"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
        want
    );
    assert_eq!(meta["routed_experts_start_len"], 1);
    let k = keys(meta);
    let pos = |name: &str| k.iter().position(|x| *x == name).unwrap();
    assert!(
        pos("cached_tokens") < pos("routed_experts") && pos("routed_experts") < pos("e2e_latency")
    );
}

#[test]
fn prompt_token_ids_sampling_mask_and_engine_meta() {
    let p = prepared(
        r#"{"input_ids":[4,5],"return_prompt_token_ids":true,"return_sampling_mask":true,"sampling_params":{"top_k":2}}"#,
    );
    let req = p.subs[0].request.clone();
    assert!(req.output.sampling_mask);
    let mut outs = synth(&req, &Script::tokens(2));
    outs[1].engine_data = Some(
        json!({"meta_info": {"weight_version": "v7", "dp_rank": 1, "id": "ignored", "spec_verify_ct": 3}}),
    );
    let body = unary_body(&drive(p, outs.into_iter().map(|o| (0, o)).collect()));
    assert_eq!(keys(&body), ["output_ids", "meta_info", "prompt_token_ids"]);
    assert_eq!(body["prompt_token_ids"], json!([4, 5]));
    let meta = &body["meta_info"];
    assert_eq!(meta["weight_version"], "v7");
    assert_eq!(meta["dp_rank"], 1);
    assert_eq!(meta["spec_verify_ct"], 3);
    assert_ne!(meta["id"], "ignored");
    assert_eq!(
        meta["output_token_sampling_mask"],
        json!([[0, 999], [0, 999]])
    );
    assert_eq!(meta["output_token_sampling_mask_length"], 2);
}

#[test]
fn incremental_streams_slice_the_sampling_mask() {
    // SGLang's `_INCREMENTAL_STREAMING_META_INFO_KEYS` slices the mask like the logprob lists;
    // its length stays cumulative.
    let body = r#"{"input_ids":[4,5],"return_sampling_mask":true,"stream":true,"sampling_params":{"top_k":2}}"#;
    let p = prepare_with(body, &http::HeaderMap::new(), &engine(), true).unwrap();
    let req = p.subs[0].request.clone();
    let run = run(p, |_| Script::tokens(3));
    let masks: Vec<(Value, Value)> = run
        .chunks
        .iter()
        .map(|c| {
            let m = &c["meta_info"];
            (
                m["output_token_sampling_mask"].clone(),
                m["output_token_sampling_mask_length"].clone(),
            )
        })
        .collect();
    assert!(req.output.sampling_mask);
    assert_eq!(
        masks,
        [
            (json!([[0, 999]]), json!(1)),
            (json!([[0, 999]]), json!(2)),
            (json!([[0, 999]]), json!(3)),
        ]
    );
}

#[test]
fn stream_error_events() {
    let f = format(false);
    let e = genfront_format::GenerateError::validation("bad input");
    assert_eq!(
        json_of(&f.stream_error_event(&e)),
        json!({"error": {"message": "bad input", "type": "invalid_request_error", "code": 400, "retryable": false}})
    );
    let e = genfront_format::GenerateError::Engine(genfront_protocol::EngineError::new(
        ErrorKind::Overloaded,
        "queue full on node 7",
    ));
    assert_eq!(
        json_of(&f.stream_error_event(&e)),
        json!({"error": {"message": "Service temporarily overloaded", "type": "service_unavailable", "code": 503, "retryable": true}})
    );
}

#[test]
fn flat_prompt_top_logprobs() {
    let p = prepared(
        r#"{"input_ids":[11,12,13],"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":2,"return_flat_raw_top_logprobs":true}"#,
    );
    let body = unary_body(&run(p, |_| Script::tokens(1)));
    let meta = &body["meta_info"];
    assert!(meta.get("input_top_logprobs").is_none());
    assert_eq!(
        keys(meta)[5..13],
        [
            "input_token_logprobs",
            "output_token_logprobs",
            "output_token_logprobs_length",
            "input_top_logprobs_val_flat",
            "input_top_logprobs_idx_flat",
            "input_top_logprobs_shape",
            "input_top_logprobs_null_prefix",
            "output_top_logprobs"
        ]
    );
    assert_eq!(meta["input_top_logprobs_shape"], json!([2, 2]));
    assert_eq!(meta["input_top_logprobs_null_prefix"], 1);
    assert_eq!(
        meta["input_top_logprobs_val_flat"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    let p = prepared(
        r#"{"input_ids":[11,12,13],"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":2,"return_flat_raw_top_logprobs":true,"return_flat_raw_top_logprobs_b64":true}"#,
    );
    let body = unary_body(&run(p, |_| Script::tokens(1)));
    let meta = &body["meta_info"];
    let vals = base64::engine::general_purpose::STANDARD
        .decode(meta["input_top_logprobs_val_flat_b64"].as_str().unwrap())
        .unwrap();
    assert_eq!(vals.len(), 2 * 2 * 4);
    assert_eq!(meta["input_top_logprobs_val_flat_b64_dtype"], "float32");
    assert_eq!(meta["input_top_logprobs_idx_flat_b64_dtype"], "int32");
}
