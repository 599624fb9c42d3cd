//! Response assembly: the unary `GenerateTokensResponse` and the SSE chunks.

use genfront_format::GenerateError;
use genfront_protocol::{
    Candidate, EngineOutput, FinishReason, PromptLogprobs, RoutedExperts, StopMatch, TokenLogprob,
    Usage,
};
use http::StatusCode;
use serde_json::{Value, json};

use super::support::{delta, length, lp, prepare, render, run_stream, run_unary, with_sampling};
use crate::{GenerateFormat, VllmFormat};

fn finished(mut o: EngineOutput, finish: Option<FinishReason>) -> EngineOutput {
    o.finish_reason = finish;
    o
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect()
}

#[test]
fn unary_shape_and_nulls() {
    let p = prepare(
        &json!({"request_id": "r1", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}),
    )
    .expect("ok");
    let out = run_unary(
        p,
        vec![
            delta(0, &[55]),
            finished(delta(0, &[56]), Some(FinishReason::Eos { token_id: 56 })),
        ],
    );
    assert_eq!(
        keys(&out),
        [
            "request_id",
            "model",
            "created",
            "usage",
            "prompt_logprobs",
            "prompt_token_id_logprobs",
            "prompt_token_ids",
            "mm_placeholders",
            "metrics",
            "kv_transfer_params",
            "ec_transfer_params",
            "output_mode",
            "choices"
        ]
    );
    assert_eq!(out["request_id"], "generate-tokens-r1");
    assert_eq!(out["model"], "test-model");
    assert!(out["created"].as_u64().expect("created") > 1_700_000_000);
    assert_eq!(out["output_mode"], "tokens");
    assert_eq!(
        out["usage"],
        json!({"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": null, "completion_tokens_details": null})
    );
    for k in [
        "prompt_logprobs",
        "prompt_token_id_logprobs",
        "prompt_token_ids",
        "mm_placeholders",
        "metrics",
        "kv_transfer_params",
        "ec_transfer_params",
    ] {
        assert_eq!(out[k], Value::Null, "{k}");
    }
    let choice = &out["choices"][0];
    assert_eq!(
        keys(choice),
        [
            "index",
            "finish_reason",
            "stop_reason",
            "token_ids",
            "routed_experts",
            "sampling_mask",
            "weight_versions",
            "logprobs"
        ]
    );
    assert_eq!(choice["token_ids"], json!([55, 56]));
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["stop_reason"], Value::Null);
    assert_eq!(choice["logprobs"], Value::Null);
    assert_eq!(choice["routed_experts"], Value::Null);
}

#[test]
fn finish_reasons() {
    let cases = [
        (
            FinishReason::Eos { token_id: 2 },
            json!("stop"),
            Value::Null,
        ),
        (
            FinishReason::Stop {
                matched: StopMatch::TokenId(9),
            },
            json!("stop"),
            json!(9),
        ),
        (
            FinishReason::Stop {
                matched: StopMatch::Text("END".to_owned()),
            },
            json!("stop"),
            json!("END"),
        ),
        (
            FinishReason::Length { length: 1 },
            json!("length"),
            Value::Null,
        ),
        (
            FinishReason::Cancelled {
                message: "Aborted".to_owned(),
            },
            json!("abort"),
            Value::Null,
        ),
    ];
    for (finish, reason, stop_reason) in cases {
        let p = prepare(&with_sampling(json!({}))).expect("ok");
        let out = run_unary(p, vec![finished(delta(0, &[7]), Some(finish.clone()))]);
        assert_eq!(out["choices"][0]["finish_reason"], reason, "{finish:?}");
        assert_eq!(out["choices"][0]["stop_reason"], stop_reason, "{finish:?}");
        let p =
            prepare(&json!({"token_ids": [1], "stream": true, "sampling_params": {}})).expect("ok");
        let events = run_stream(p, vec![finished(delta(0, &[7]), Some(finish.clone()))]);
        assert_eq!(events[0]["choices"][0]["finish_reason"], reason);
        assert_eq!(events[0]["choices"][0]["stop_reason"], stop_reason);
    }
}

#[test]
fn engine_error_is_a_500_without_internals() {
    let p = prepare(&with_sampling(json!({}))).expect("ok");
    let mut asm = p.assembler;
    let err = asm
        .on_output(
            0,
            finished(
                delta(0, &[1]),
                Some(FinishReason::Error {
                    message: "CUDA OOM at 0xdeadbeef".to_owned(),
                }),
            ),
            &mut Vec::new(),
        )
        .expect_err("error finish");
    let (status, body) = render(&err);
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        body,
        json!({"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}})
    );
    let event: Value =
        serde_json::from_slice(&VllmFormat::new().stream_error_event(&err)).expect("event");
    assert_eq!(event, body);
}

#[test]
fn incomplete_outputs_fail() {
    let p = prepare(&with_sampling(json!({"n": 2}))).expect("ok");
    let mut asm = p.assembler;
    asm.on_output(0, finished(delta(0, &[1]), length(1)), &mut Vec::new())
        .expect("ok");
    let err = asm.finish_unary().expect_err("choice 1 unfinished");
    assert!(matches!(err, GenerateError::Engine(_)));
    let p = prepare(&with_sampling(json!({}))).expect("ok");
    let mut asm = p.assembler;
    assert!(asm.on_output(1, delta(0, &[1]), &mut Vec::new()).is_err());
    assert!(asm.on_output(0, delta(3, &[1]), &mut Vec::new()).is_err());
    asm.on_output(0, finished(delta(0, &[1]), length(1)), &mut Vec::new())
        .expect("ok");
    assert!(asm.on_output(0, delta(0, &[1]), &mut Vec::new()).is_err());
}

#[test]
fn n_choices_unary_and_streamed() {
    let body = json!({"token_ids": [1, 2], "sampling_params": {"n": 3, "max_tokens": 2}});
    let outputs = || {
        vec![
            delta(2, &[30]),
            delta(0, &[10]),
            finished(delta(1, &[20, 21]), length(2)),
            finished(delta(0, &[11]), length(2)),
            finished(delta(2, &[31]), length(2)),
        ]
    };
    let out = run_unary(prepare(&body).expect("ok"), outputs());
    let choices = out["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 3);
    for (i, tokens) in [[10, 11], [20, 21], [30, 31]].iter().enumerate() {
        assert_eq!(choices[i]["index"], i);
        assert_eq!(choices[i]["token_ids"], json!(tokens));
        assert_eq!(choices[i]["finish_reason"], "length");
    }
    assert_eq!(out["usage"]["completion_tokens"], 6);

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let events = run_stream(prepare(&sbody).expect("ok"), outputs());
    assert_eq!(events.len(), 5);
    for e in &events {
        assert_eq!(e["choices"].as_array().expect("choices").len(), 1);
        assert_eq!(e["output_mode"], "tokens");
        assert_eq!(e["usage"], Value::Null);
        assert_eq!(keys(e), ["request_id", "usage", "output_mode", "choices"]);
    }
    assert_eq!(
        events[2]["choices"][0],
        json!({"index": 1, "finish_reason": "length", "stop_reason": null,
        "token_ids": [20, 21], "routed_experts": null, "sampling_mask": null, "weight_versions": null, "logprobs": null})
    );
}

#[test]
fn stream_usage_options() {
    let body = json!({"token_ids": [1, 2, 3, 4], "stream": true, "sampling_params": {"n": 2},
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let mut last = finished(delta(1, &[8]), length(2));
    last.usage = Some(Usage {
        prompt_tokens: 4,
        completion_tokens: 2,
        cached_tokens: 3,
    });
    let events = run_stream(
        prepare(&body).expect("ok"),
        vec![
            delta(0, &[5]),
            delta(1, &[7]),
            delta(0, &[]),
            finished(delta(0, &[6]), length(2)),
            last,
        ],
    );
    // The empty delta is skipped; every chunk carries its choice's cumulative usage.
    assert_eq!(events.len(), 5);
    assert_eq!(
        events[0]["usage"],
        json!({"prompt_tokens": 4, "total_tokens": 5, "completion_tokens": 1,
        "prompt_tokens_details": null, "completion_tokens_details": null})
    );
    assert_eq!(events[2]["usage"]["completion_tokens"], 2);
    assert_eq!(events[3]["usage"]["completion_tokens"], 2);
    // The final usage-only chunk (exclude_none) with cached tokens.
    assert_eq!(
        events[4],
        json!({"request_id": events[0]["request_id"], "usage": {"prompt_tokens": 4, "total_tokens": 8,
        "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3}}, "output_mode": "tokens", "choices": []})
    );
    assert_eq!(
        keys(&events[4]),
        ["request_id", "usage", "output_mode", "choices"]
    );
}

#[test]
fn abort_without_tokens_is_still_sent() {
    let p = prepare(&json!({"token_ids": [1], "stream": true, "sampling_params": {}})).expect("ok");
    let events = run_stream(
        p,
        vec![
            delta(0, &[4]),
            finished(
                delta(0, &[]),
                Some(FinishReason::Cancelled {
                    message: "client".to_owned(),
                }),
            ),
        ],
    );
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["choices"][0]["token_ids"], json!([]));
    assert_eq!(events[1]["choices"][0]["finish_reason"], "abort");
}

#[test]
fn logprob_rules() {
    let p = prepare(&with_sampling(json!({"logprobs": 2}))).expect("ok");
    let mut d = delta(0, &[5, 6, 7, 8]);
    d.logprobs = Some(vec![
        // sampled token inside the top 2: k entries, sampled first.
        lp(5, -0.1, 1, &[(5, -0.1), (9, -2.0)]),
        // sampled token outside: k + 1 entries; -inf is clamped; more than k given are cut.
        lp(6, f64::NEG_INFINITY, 7, &[(1, -0.5), (2, -0.7), (3, -0.9)]),
        // NaN: -9999.0 with rank null.
        TokenLogprob {
            token_id: 7,
            logprob: f64::NAN,
            rank: Some(0),
            top: vec![],
            selected: vec![],
            text: None,
        },
        // rank 0 is null.
        TokenLogprob {
            token_id: 8,
            logprob: -1.0,
            rank: Some(0),
            top: vec![Candidate {
                token_id: 4,
                logprob: -0.2,
                rank: Some(1),
                text: None,
            }],
            selected: vec![],
            text: None,
        },
    ]);
    d.finish_reason = length(4);
    let out = run_unary(p, vec![d]);
    assert_eq!(
        out["choices"][0]["logprobs"],
        json!({"content": [
            {"token_id": 5, "logprob": -0.1, "rank": 1, "top_logprobs": [
                {"token_id": 5, "logprob": -0.1, "rank": 1}, {"token_id": 9, "logprob": -2.0, "rank": 2}]},
            {"token_id": 6, "logprob": -9999.0, "rank": 7, "top_logprobs": [
                {"token_id": 6, "logprob": -9999.0, "rank": 7}, {"token_id": 1, "logprob": -0.5, "rank": 1},
                {"token_id": 2, "logprob": -0.7, "rank": 2}]},
            {"token_id": 7, "logprob": -9999.0, "rank": null, "top_logprobs": [{"token_id": 7, "logprob": -9999.0, "rank": null}]},
            {"token_id": 8, "logprob": -1.0, "rank": null, "top_logprobs": [
                {"token_id": 8, "logprob": -1.0, "rank": null}, {"token_id": 4, "logprob": -0.2, "rank": 1}]},
        ]})
    );
}

#[test]
fn missing_logprobs_and_selected_ids() {
    let p = prepare(&with_sampling(json!({"logprob_token_ids": [3, 4]}))).expect("ok");
    let mut first = delta(0, &[5, 6]);
    first.logprobs = Some(vec![TokenLogprob {
        token_id: 5,
        logprob: -0.3,
        rank: Some(2),
        top: vec![Candidate {
            token_id: 99,
            logprob: -0.01,
            rank: Some(1),
            text: None,
        }],
        selected: vec![
            Candidate {
                token_id: 3,
                logprob: -4.0,
                rank: Some(9),
                text: None,
            },
            Candidate {
                token_id: 4,
                logprob: -5.0,
                rank: None,
                text: None,
            },
        ],
        text: None,
    }]);
    let out = run_unary(p, vec![first, finished(delta(0, &[7]), length(3))]);
    assert_eq!(
        out["choices"][0]["logprobs"]["content"],
        json!([
            {"token_id": 5, "logprob": -0.3, "rank": 2, "top_logprobs": [
                {"token_id": 5, "logprob": -0.3, "rank": 2}, {"token_id": 3, "logprob": -4.0, "rank": 9},
                {"token_id": 4, "logprob": -5.0, "rank": null}]},
            {"token_id": 6, "logprob": -9999.0, "rank": null, "top_logprobs": []},
            {"token_id": 7, "logprob": -9999.0, "rank": null, "top_logprobs": []},
        ])
    );
}

#[test]
fn prompt_logprobs_shapes() {
    // A one-token prompt has nothing to score: [null].
    let p = prepare(
        &json!({"token_ids": [42], "sampling_params": {"max_tokens": 1, "prompt_logprobs": 1}}),
    )
    .expect("ok");
    let mut d = finished(delta(0, &[7]), length(1));
    d.prompt_logprobs = Some(PromptLogprobs {
        start: 0,
        entries: vec![None],
        first_text: None,
        first_token_id: None,
    });
    assert_eq!(run_unary(p, vec![d])["prompt_logprobs"], json!([null]));
    // Longer prompts: first null, then {id: {logprob, rank, decoded_token}} with the prompt token first.
    let p = prepare(&json!({"token_ids": [11, 22, 33], "sampling_params": {"max_tokens": 1, "prompt_logprobs": 1}})).expect("ok");
    let mut d = finished(delta(0, &[7]), length(1));
    d.prompt_logprobs = Some(PromptLogprobs {
        start: 0,
        entries: vec![
            None,
            Some(lp(22, f64::NEG_INFINITY, 3, &[(5, -0.1), (6, -0.2)])),
            Some(lp(33, -0.01, 1, &[(33, -0.01)])),
        ],
        first_text: None,
        first_token_id: None,
    });
    let out = run_unary(p, vec![d]);
    assert_eq!(
        out["prompt_logprobs"],
        json!([
            null,
            {"22": {"logprob": -9999.0, "rank": 3, "decoded_token": null}, "5": {"logprob": -0.1, "rank": 1, "decoded_token": null}},
            {"33": {"logprob": -0.01, "rank": 1, "decoded_token": null}},
        ])
    );
    assert_eq!(keys(&out["prompt_logprobs"][1]), ["22", "5"]);
}

#[test]
fn routed_experts_and_sampling_mask() {
    let p = prepare(&with_sampling(json!({"max_tokens": 3}))).expect("ok");
    let mut a = delta(0, &[1, 2]);
    a.routed_experts = Some(RoutedExperts {
        num_layers: 2,
        top_k: 2,
        ids: vec![1, 2, 3, 4],
    });
    a.sampling_mask = Some(vec![vec![1, 9], vec![2]]);
    let mut b = finished(delta(0, &[3]), length(3));
    b.routed_experts = Some(RoutedExperts {
        num_layers: 2,
        top_k: 2,
        ids: vec![5, 6, 7, 8],
    });
    b.sampling_mask = Some(vec![vec![3, 4, 5]]);
    let out = run_unary(p, vec![a, b]);
    let choice = &out["choices"][0];
    assert_eq!(choice["sampling_mask"], json!([[1, 9], [2], [3, 4, 5]]));
    use base64::Engine as _;
    let npy = base64::engine::general_purpose::STANDARD
        .decode(choice["routed_experts"].as_str().expect("b64"))
        .expect("decode");
    assert_eq!(
        npy,
        crate::npy::npy_i32(&[2, 2, 2], &[1, 2, 3, 4, 5, 6, 7, 8])
    );
    // A shape change inside one choice breaks the contract.
    let p = prepare(&with_sampling(json!({}))).expect("ok");
    let mut asm = p.assembler;
    let mut a = delta(0, &[1]);
    a.routed_experts = Some(RoutedExperts {
        num_layers: 2,
        top_k: 2,
        ids: vec![1, 2, 3, 4],
    });
    asm.on_output(0, a, &mut Vec::new()).expect("ok");
    let mut b = delta(0, &[1]);
    b.routed_experts = Some(RoutedExperts {
        num_layers: 3,
        top_k: 2,
        ids: vec![0; 6],
    });
    assert!(matches!(
        asm.on_output(0, b, &mut Vec::new()),
        Err(GenerateError::Internal(_))
    ));
}

#[test]
fn echoes_and_token_ids() {
    let body = json!({"token_ids": [1, 2, 3], "return_token_ids": true, "sampling_params": {"max_tokens": 1},
        "kv_transfer_params": {"do_remote_decode": true},
        "features": {"mm_hashes": {"image": ["h"]}, "mm_placeholders": {"image": [{"offset": 1, "length": 2}]}}});
    let mut d = finished(delta(0, &[9]), length(1));
    d.handoff = Some(json!({"remote_block_ids": [[1, 2]], "remote_engine_id": "e"}));
    d.engine_data = Some(
        json!({"ec_transfer_params": {"h": {"peer_port": 1}}, "weight_versions": [{"version": "v1", "start": 0, "end": 1}]}),
    );
    d.usage = Some(Usage {
        prompt_tokens: 3,
        completion_tokens: 1,
        cached_tokens: 2,
    });
    let out = run_unary(prepare(&body).expect("ok"), vec![d.clone()]);
    assert_eq!(
        out["kv_transfer_params"],
        json!({"remote_block_ids": [[1, 2]], "remote_engine_id": "e"})
    );
    assert_eq!(out["ec_transfer_params"], json!({"h": {"peer_port": 1}}));
    assert_eq!(out["prompt_token_ids"], json!([1, 2, 3]));
    assert_eq!(
        out["mm_placeholders"],
        json!({"image": [{"offset": 1, "length": 2}]})
    );
    assert_eq!(
        out["choices"][0]["weight_versions"],
        json!([{"version": "v1", "start": 0, "end": 1}])
    );
    assert_eq!(
        out["usage"]["prompt_tokens_details"],
        json!({"cached_tokens": 2})
    );

    // Streaming: the prompt ids ride on the first chunk only.
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let events = run_stream(prepare(&sbody).expect("ok"), vec![delta(0, &[8]), d]);
    assert_eq!(
        keys(&events[0]),
        [
            "request_id",
            "usage",
            "prompt_token_ids",
            "mm_placeholders",
            "output_mode",
            "choices"
        ]
    );
    assert_eq!(
        keys(&events[1]),
        ["request_id", "usage", "output_mode", "choices"]
    );
    assert_eq!(
        events[1]["choices"][0]["weight_versions"],
        json!([{"version": "v1", "start": 0, "end": 1}])
    );
}

#[test]
fn prompt_tokens_details_can_be_off() {
    // Off is vLLM's default (`--enable-prompt-tokens-details` unset).
    assert_eq!(
        VllmFormat::new(),
        VllmFormat::new().with_prompt_tokens_details(false)
    );
    let format = VllmFormat::new().with_prompt_tokens_details(false);
    let headers = super::support::json_headers();
    let info = super::support::engine();
    let body = serde_json::to_vec(&with_sampling(json!({}))).expect("json");
    let p = format
        .prepare(genfront_format::ParseInput {
            headers: &headers,
            body: &body,
            engine: &info,
        })
        .expect("ok");
    let mut d = finished(delta(0, &[1]), length(1));
    d.usage = Some(Usage {
        prompt_tokens: 3,
        completion_tokens: 1,
        cached_tokens: 3,
    });
    assert_eq!(
        run_unary(p, vec![d])["usage"]["prompt_tokens_details"],
        Value::Null
    );
}
