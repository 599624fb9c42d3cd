//! Decoded deltas, the upstream body, and "through genfront == direct to vLLM".

use genfront_protocol::{EngineRequest, FinishReason, RoutedExperts, StopMatch};
use serde_json::{Value, json};

use crate::support::{
    DONE, ID, NATIVE_ID, Script, Step, chunk, engine, npy_u8, oks, prepare, run, sse, usage,
    usage_chunk,
};

// === decoding ===

#[tokio::test]
async fn streams_decode_into_deltas_and_the_request_is_edited_surgically() {
    let (fake, engine) = engine().await;
    let experts = npy_u8((2, 1, 2), &[3, 4, 5, 6]);
    let mut a = chunk(0, &[7], 1, None, Value::Null);
    a["choices"][0]["logprobs"] = json!({"content": [{"token_id": 7, "logprob": -0.5, "rank": 2,
        "top_logprobs": [{"token_id": 7, "logprob": -0.5, "rank": 2}, {"token_id": 9, "logprob": -0.25, "rank": 1}]}]});
    a["choices"][0]["routed_experts"] = json!(experts);
    a["choices"][0]["sampling_mask"] = json!([[7, 9]]);
    let mut b = chunk(1, &[8, 2], 2, Some("stop"), Value::Null);
    b["choices"][0]["logprobs"] = json!({"content": [
        {"token_id": 8, "logprob": -0.1, "rank": 1, "top_logprobs": [{"token_id": 8, "logprob": -0.1, "rank": 1}, {"token_id": 4, "logprob": -3.0, "rank": 2}]},
        {"token_id": 2, "logprob": -0.2, "rank": 1, "top_logprobs": [{"token_id": 2, "logprob": -0.2, "rank": 1}, {"token_id": 5, "logprob": -2.0, "rank": 2}]}]});
    let mut c = chunk(0, &[11], 2, Some("length"), Value::Null);
    c["choices"][0]["logprobs"] = json!({"content": [{"token_id": 11, "logprob": -1.0, "rank": 1,
        "top_logprobs": [{"token_id": 11, "logprob": -1.0, "rank": 1}, {"token_id": 12, "logprob": -1.5, "rank": 2}]}]});
    let mut wire = sse(&[a, b, c, usage_chunk(4, 2)]);
    wire.extend_from_slice(DONE);
    // Network chunks cut through events, several events per chunk, 7 bytes at a time at first.
    let mut steps: Vec<Step> = wire[..70]
        .chunks(7)
        .map(|c| Step::Send(c.to_vec()))
        .collect();
    steps.push(Step::Send(wire[70..].to_vec()));
    fake.script(Script::Stream(steps));

    let client = json!({"model": "qwen", "token_ids": [1, 2, 3], "stream": true, "request_id": "mine",
        "future_key": {"kept": true},
        "sampling_params": {"n": 2, "logprobs": 2, "max_tokens": 2, "future_sampling_key": 7}});
    let (request, _) = prepare(&engine, &client);
    let out = oks(run(&engine, request).await);

    // What vLLM received.
    let calls = fake.generate_calls();
    let (headers, body) = &calls[0];
    assert_eq!(headers["x-request-id"], ID);
    assert_eq!(headers["x-data-parallel-rank"], "1");
    assert_eq!(body["request_id"], json!(ID));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(
        body["stream_options"],
        json!({"include_usage": true, "continuous_usage_stats": true})
    );
    assert_eq!(body["future_key"], json!({"kept": true}));
    assert_eq!(body["sampling_params"], client["sampling_params"]);
    assert_eq!(
        body.as_object().expect("object").keys().collect::<Vec<_>>(),
        [
            "model",
            "token_ids",
            "stream",
            "request_id",
            "future_key",
            "sampling_params",
            "stream_options"
        ]
    );

    assert_eq!(out.len(), 3);
    assert_eq!(
        (out[0].index, &out[0].token_ids, out[0].usage),
        (0, &vec![7], usage(1, 0))
    );
    let lp = &out[0].logprobs.as_ref().expect("logprobs")[0];
    assert_eq!(
        (
            lp.token_id,
            lp.rank,
            lp.top.iter().map(|c| c.token_id).collect::<Vec<_>>()
        ),
        (7, Some(2), vec![9, 7])
    );
    assert_eq!(
        out[0].routed_experts,
        Some(RoutedExperts {
            num_layers: 1,
            top_k: 2,
            ids: vec![3, 4, 5, 6]
        })
    );
    assert_eq!(out[0].sampling_mask, Some(vec![vec![7, 9]]));
    assert_eq!(
        out[1].finish_reason,
        Some(FinishReason::Eos { token_id: 2 })
    );
    assert_eq!(out[1].usage, usage(2, 0));
    assert_eq!(
        out[2].finish_reason,
        Some(FinishReason::Length { length: 2 })
    );
    assert_eq!(
        out[2].usage,
        usage(2, 2),
        "the last item carries the final cached tokens"
    );
    assert!(out.iter().all(|o| o.engine_data.is_some()));
    assert!(
        fake.aborts().is_empty(),
        "a finished request is not aborted"
    );
}

#[tokio::test]
async fn through_genfront_equals_direct_to_vllm() {
    let (fake, engine) = engine().await;
    let first = chunk(0, &[7, 8], 2, None, Value::Null);
    let mut last = chunk(0, &[9], 3, Some("repetition"), json!("repetition_detected"));
    last["choices"][0]["weight_versions"] = json!([{"version": "v7", "start": 0, "end": 3}]);
    // vLLM attaches a choice's routed experts when it stops: one blob for the whole sequence
    // (3 prompt + 3 output - 1 rows), on the final chunk, in the engine's own dtype.
    last["choices"][0]["routed_experts"] = json!(npy_u8((5, 1, 1), &[1, 2, 3, 4, 5]));
    let native = vec![first, last, usage_chunk(3, 1)];
    let mut wire = sse(&native);
    wire.extend_from_slice(DONE);
    fake.script(Script::Stream(vec![Step::Send(wire)]));

    let client = json!({"token_ids": [1, 2, 3], "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
        "sampling_params": {"max_tokens": 3}});
    let (request, mut assembler) = prepare(&engine, &client);
    let mut events = Vec::new();
    for item in run(&engine, request).await {
        assembler
            .on_output(0, item.expect("ok"), &mut events)
            .expect("assemble");
    }
    assembler.finish_stream(&mut events).expect("finish");
    let ours: Vec<Value> = events
        .iter()
        .map(|e| {
            let mut v: Value = serde_json::from_slice(e).expect("json");
            // The only difference: the client's own id instead of the dispatch id.
            assert!(
                v["request_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("generate-tokens-"))
            );
            v["request_id"] = json!(NATIVE_ID);
            v
        })
        .collect();
    assert_eq!(ours, native);
}

#[tokio::test]
async fn prompt_logprobs_use_a_unary_call() {
    let (fake, engine) = engine().await;
    fake.script(Script::Json(
        200,
        json!({"request_id": NATIVE_ID, "model": "qwen", "created": 1,
            "usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1, "prompt_tokens_details": null},
            "prompt_logprobs": [null, {"2": {"logprob": -1.0, "rank": 1, "decoded_token": null}},
                                {"3": {"logprob": -2.0, "rank": 2, "decoded_token": null},
                                 "6": {"logprob": -0.5, "rank": 1, "decoded_token": null}}],
            "prompt_token_id_logprobs": null, "kv_transfer_params": null, "output_mode": "tokens",
            "choices": [{"index": 0, "finish_reason": "length", "stop_reason": null, "token_ids": [4],
                "routed_experts": null, "logprobs": null}]}),
    ));
    let (mut request, _) = prepare(
        &engine,
        &json!({"token_ids": [1, 2, 3], "sampling_params": {"prompt_logprobs": 1, "max_tokens": 1}}),
    );
    // The typed decoding of the unary body (a relayed one is only scanned: `relay.rs`).
    assert!(request.output.relay);
    request.output.relay = false;
    let out = oks(run(&engine, request).await);
    let body = &fake.generate_calls()[0].1;
    assert_eq!(body["stream"], json!(false));
    assert!(body.get("stream_options").is_none());
    assert_eq!(out.len(), 1);
    let plp = out[0].prompt_logprobs.as_ref().expect("prompt logprobs");
    assert_eq!(plp.entries.len(), 3);
    assert!(plp.entries[0].is_none());
    let third = plp.entries[2].as_ref().expect("position 2");
    assert_eq!(
        (third.token_id, third.rank, third.top[0].token_id),
        (3, Some(2), 6)
    );
    assert_eq!(
        out[0].finish_reason,
        Some(FinishReason::Length { length: 1 })
    );
}

#[tokio::test]
async fn sglang_clients_get_a_typed_body() {
    let (fake, engine) = engine().await;
    let mut wire = sse(&[chunk(0, &[151645], 1, Some("stop"), json!(151645))]);
    wire.extend_from_slice(DONE);
    fake.script(Script::Stream(vec![Step::Send(wire)]));
    let mut request = EngineRequest {
        request_id: ID.to_owned(),
        token_ids: vec![1, 2, 3],
        ..EngineRequest::default()
    };
    request.native.format = "sglang".to_owned();
    request.native.body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}});
    request.stop.max_tokens = Some(4);
    request.stop.stop_token_ids = vec![151645];
    let out = oks(run(&engine, request).await);
    assert_eq!(
        out[0].finish_reason,
        Some(FinishReason::Stop {
            matched: StopMatch::TokenId(151645)
        })
    );
    let body = &fake.generate_calls()[0].1;
    assert_eq!(
        body["sampling_params"],
        json!({"n": 1, "max_tokens": 4, "stop_token_ids": [151645]})
    );
    assert!(body.get("input_ids").is_none());
}
