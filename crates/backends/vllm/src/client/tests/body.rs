//! The upstream body: native pass-through with surgical edits, and the typed build for other
//! formats.

use genfront_protocol::{
    EngineInfo, EngineRequest, ErrorKind, NativeBody, OutputOptions, PdLeg, PdRole,
    PromptLogprobOptions, RoutingHints, SamplingOptions, StopConditions,
};
use serde_json::{Value, json};

use crate::client::body::{BodyOptions, Upstream, build};
use crate::client::decode::DecodeSpec;

const ID: &str = "0123456789abcdef0123456789abcdef";

fn info() -> EngineInfo {
    EngineInfo {
        eos_token_ids: vec![151645],
        ..EngineInfo::default()
    }
}

fn native(body: Value) -> EngineRequest {
    EngineRequest {
        request_id: ID.to_owned(),
        token_ids: vec![1, 2, 3],
        native: NativeBody {
            format: "vllm".to_owned(),
            body,
        },
        ..EngineRequest::default()
    }
}

fn built(request: EngineRequest) -> (Upstream, DecodeSpec, Value) {
    let (upstream, spec) = build(request, &info(), BodyOptions::default()).expect("buildable");
    let body = serde_json::from_slice(&upstream.body).expect("JSON");
    (upstream, spec, body)
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect()
}

#[test]
fn native_body_keeps_every_key_in_order_with_surgical_edits() {
    let client = json!({"model": "m", "request_id": "client-id", "token_ids": [9, 9],
        "future_top_level": {"x": [1, 2]}, "stream": true,
        "stream_options": {"include_usage": false}, "sampling_params": {"max_tokens": 5,
        "future_sampling_field": 1, "temperature": 0.5}, "priority": -3, "cache_salt": "s"});
    let (upstream, spec, body) = built(native(client.clone()));
    assert_eq!(
        keys(&body),
        [
            "model",
            "request_id",
            "token_ids",
            "future_top_level",
            "stream",
            "stream_options",
            "sampling_params",
            "priority",
            "cache_salt"
        ]
    );
    assert_eq!(body["request_id"], json!(ID));
    assert_eq!(body["token_ids"], json!([1, 2, 3]));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(
        body["stream_options"],
        json!({"include_usage": true, "continuous_usage_stats": true})
    );
    for key in [
        "model",
        "future_top_level",
        "sampling_params",
        "priority",
        "cache_salt",
    ] {
        assert_eq!(body[key], client[key], "{key}");
    }
    assert_eq!(
        keys(&body["sampling_params"]),
        ["max_tokens", "future_sampling_field", "temperature"]
    );
    assert!(!upstream.unary);
    assert_eq!(upstream.request_id, ID);
    assert_eq!((spec.n, spec.prompt_len, spec.fallback_eos), (1, 3, 151645));
}

#[test]
fn native_body_without_stream_keys_gets_them_appended() {
    let (_, _, body) = built(native(json!({"token_ids": [1], "sampling_params": {}})));
    assert_eq!(
        keys(&body),
        [
            "token_ids",
            "sampling_params",
            "request_id",
            "stream",
            "stream_options"
        ]
    );
}

#[test]
fn prompt_logprobs_and_prefill_legs_go_unary() {
    let mut request = native(json!({"token_ids": [1, 2, 3], "stream_options": null,
        "sampling_params": {"prompt_logprobs": 2}}));
    request.output.prompt_logprobs = Some(PromptLogprobOptions { start: 0, top_k: 2 });
    let (upstream, spec, body) = built(request);
    assert!(upstream.unary);
    assert_eq!(body["stream"], json!(false));
    assert!(body.get("stream_options").is_none());
    assert_eq!(spec.prompt, vec![1, 2, 3]);

    let request = native(json!({"token_ids": [1], "sampling_params":
        {"prompt_logprob_token_ids": [[1]]}}));
    assert!(built(request).0.unary);

    // The prefill leg is read from the typed hand-off (where the vLLM projection puts
    // `kv_transfer_params`), not from the native body.
    let kv = json!({"do_remote_decode": true, "do_remote_prefill": false});
    let mut request = native(
        json!({"token_ids": [1], "sampling_params": {"max_tokens": 1}, "kv_transfer_params": kv}),
    );
    assert!(
        !built(request.clone()).0.unary,
        "the native body alone decides nothing"
    );
    request.handoff = Some(kv);
    assert!(built(request).0.unary);
    // The decode leg streams.
    let mut request = native(json!({"token_ids": [1], "sampling_params": {}}));
    request.handoff = Some(json!({"do_remote_prefill": true, "remote_block_ids": [1]}));
    let (upstream, _, body) = built(request);
    assert!(!upstream.unary);
    assert_eq!(
        body["kv_transfer_params"],
        json!({"do_remote_prefill": true, "remote_block_ids": [1]})
    );
}

fn sglang(output: OutputOptions) -> EngineRequest {
    EngineRequest {
        request_id: ID.to_owned(),
        token_ids: vec![5, 6, 7],
        stop: StopConditions {
            max_tokens: Some(8),
            min_tokens: 2,
            stop_token_ids: vec![151643],
            stop: Vec::new(),
            ignore_eos: true,
        },
        sampling: SamplingOptions {
            n: 2,
            temperature: Some(0.7),
            top_p: Some(0.9),
            top_k: Some(-1),
            min_p: None,
            frequency_penalty: Some(0.1),
            presence_penalty: None,
            repetition_penalty: Some(1.05),
            seed: Some(42),
            sample_index: 0,
        },
        output,
        routing: RoutingHints {
            dp_rank: Some(1),
            priority: Some(5),
            cache_salt: Some("salt".to_owned()),
            session_id: Some("sess".to_owned()),
            lora: Some("adapter".to_owned()),
        },
        handoff: Some(json!({"do_remote_prefill": true})),
        pd: None,
        native: NativeBody {
            format: "sglang".to_owned(),
            body: json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 8}}),
        },
        ..EngineRequest::default()
    }
}

#[test]
fn other_formats_get_a_body_built_from_the_typed_request() {
    let (upstream, spec, body) = built(sglang(OutputOptions {
        logprobs: Some(3),
        routed_experts: true,
        routed_experts_start: 2,
        ..OutputOptions::default()
    }));
    assert_eq!(
        body,
        json!({"request_id": ID, "token_ids": [5, 6, 7], "sampling_params": {
            "n": 2, "temperature": 0.7, "top_p": 0.9, "frequency_penalty": 0.1,
            "repetition_penalty": 1.05, "top_k": -1, "seed": 42, "max_tokens": 8, "min_tokens": 2,
            "stop_token_ids": [151643], "ignore_eos": true, "logprobs": 3,
            "routed_experts_prompt_start": 2},
            "model": "adapter", "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true},
            "priority": -5, "cache_salt": "salt", "kv_transfer_params": {"do_remote_prefill": true}})
    );
    assert_eq!(
        (upstream.dp_rank, upstream.session_id.as_deref()),
        (Some(1), Some("sess"))
    );
    assert_eq!(
        (spec.n, spec.logprobs, spec.routed_experts),
        (2, Some(3), true)
    );
}

#[test]
fn typed_logprob_options() {
    let (_, spec, body) = built(sglang(OutputOptions {
        logprobs: Some(0),
        token_ids_logprobs: vec![10, 11],
        ..OutputOptions::default()
    }));
    assert_eq!(body["sampling_params"]["logprobs"], json!(2));
    assert_eq!(
        body["sampling_params"]["logprob_token_ids"],
        json!([10, 11])
    );
    assert_eq!(spec.selected, vec![10, 11]);

    let (upstream, spec, body) = built(sglang(OutputOptions {
        prompt_logprobs: Some(PromptLogprobOptions { start: 2, top_k: 1 }),
        ..OutputOptions::default()
    }));
    assert!(upstream.unary);
    assert_eq!(body["stream"], json!(false));
    assert_eq!(body["sampling_params"]["prompt_logprobs"], json!(1));
    // vLLM 0.33.0 refuses `prompt_logprob_start` without `prompt_logprob_token_ids`: the whole
    // prompt is scored and the decoder cuts the rows before the start.
    assert!(
        body["sampling_params"]
            .get("prompt_logprob_start")
            .is_none()
    );
    assert_eq!(
        spec.prompt_logprobs,
        Some(PromptLogprobOptions { start: 2, top_k: 1 })
    );
    assert_eq!(spec.prompt, vec![5, 6, 7]);

    for output in [
        OutputOptions {
            logprobs: Some(2),
            token_ids_logprobs: vec![10],
            ..OutputOptions::default()
        },
        OutputOptions {
            prompt_logprobs: Some(PromptLogprobOptions { start: 0, top_k: 0 }),
            token_ids_logprobs: vec![10],
            ..OutputOptions::default()
        },
    ] {
        let err = build(sglang(output), &info(), BodyOptions::default()).expect_err("unsupported");
        assert_eq!(err.kind, ErrorKind::Unsupported, "{err}");
    }
}

#[test]
fn prefill_only_requests_generate_one_token_that_is_dropped() {
    let mut request = sglang(OutputOptions::default());
    request.stop.max_tokens = Some(0);
    let (_, spec, body) = built(request);
    assert_eq!(body["sampling_params"]["max_tokens"], json!(1));
    assert!(spec.discard_output);
}

#[test]
fn a_missing_dispatch_id_is_minted() {
    let mut request = native(json!({"token_ids": [1], "sampling_params": {}}));
    request.request_id.clear();
    let (upstream, _, body) = built(request);
    assert_eq!(upstream.request_id.len(), 32);
    assert_eq!(body["request_id"], json!(upstream.request_id));
}

/// The returned hand-off of a NIXL prefill (`spec/vllm-native.md` §10.2).
fn nixl() -> Value {
    json!({"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [1, 2],
           "remote_engine_id": "e0", "remote_request_id": format!("generate-tokens-{ID}"),
           "remote_host": "10.0.0.2", "remote_port": 5600, "tp_size": 1})
}

fn leg(role: PdRole, kv: Option<Value>) -> PdLeg {
    PdLeg {
        role,
        bootstrap: None,
        kv_transfer_params: kv,
    }
}

fn built_with(request: EngineRequest, nest: bool) -> (Upstream, DecodeSpec, Value) {
    let options = BodyOptions {
        nest_kv_transfer_params: nest,
    };
    let (upstream, spec) = build(request, &info(), options).expect("buildable");
    let body = serde_json::from_slice(&upstream.body).expect("JSON");
    (upstream, spec, body)
}

/// A streaming vLLM client asking for prompt logprobs, `n = 2`, 8..=32 tokens.
fn pd_client() -> Value {
    json!({"model": "m", "token_ids": [1, 2, 3], "stream": true,
           "stream_options": {"include_usage": false},
           "sampling_params": {"max_tokens": 32, "min_tokens": 8, "n": 2, "temperature": 0.5,
                               "prompt_logprobs": 1, "prompt_logprob_start": 1,
                               "extra_args": {"mine": 1}},
           "client_key": {"k": [1]}})
}

#[test]
fn pd_prefill_leg_asks_for_one_token_unary_with_remote_decode() {
    let asked = json!({"do_remote_decode": true, "do_remote_prefill": false});
    for nest in [false, true] {
        let mut request = native(pd_client());
        request.sampling.n = 1;
        request.stop.max_tokens = Some(1);
        request.pd = Some(leg(PdRole::Prefill, Some(asked.clone())));
        let (upstream, spec, body) = built_with(request, nest);
        assert!(
            upstream.unary,
            "the returned kv_transfer_params are unary-only"
        );
        assert_eq!(upstream.request_id, ID);
        assert_eq!(body["request_id"], ID);
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert_eq!(body["kv_transfer_params"], asked);
        let sp = &body["sampling_params"];
        assert_eq!(
            (&sp["max_tokens"], &sp["min_tokens"], &sp["n"]),
            (&json!(1), &json!(1), &json!(1))
        );
        assert_eq!(sp["prompt_logprobs"], 1, "prefill computes them");
        assert_eq!(sp["prompt_logprob_start"], 1);
        assert_eq!(sp["temperature"], 0.5);
        assert_eq!(body["client_key"], json!({"k": [1]}));
        assert_eq!(spec.n, 1);
        let nested = &sp["extra_args"];
        if nest {
            assert_eq!(*nested, json!({"mine": 1, "kv_transfer_params": asked}));
        } else {
            assert_eq!(*nested, json!({"mine": 1}));
        }
        // Key order is the client's, appended keys last.
        assert_eq!(
            keys(&body),
            [
                "model",
                "token_ids",
                "stream",
                "sampling_params",
                "client_key",
                "request_id",
                "kv_transfer_params"
            ]
        );
    }

    // A client asking 0 tokens keeps 0 (min_tokens follows); without parameters from the router,
    // the prefill asks for a remote decode itself; the typed `n` already says 1.
    let mut request = native(json!({"token_ids": [1], "sampling_params":
        {"max_tokens": 0, "min_tokens": 3}}));
    request.stop.max_tokens = Some(0);
    request.pd = Some(leg(PdRole::Prefill, None));
    let (upstream, _, body) = built_with(request, true);
    assert!(upstream.unary);
    let sp = &body["sampling_params"];
    assert_eq!(
        (&sp["max_tokens"], &sp["min_tokens"]),
        (&json!(0), &json!(0))
    );
    assert!(sp.get("n").is_none(), "vLLM's default n is 1");
    let asked = json!({"do_remote_decode": true, "do_remote_prefill": false});
    assert_eq!(body["kv_transfer_params"], asked);
    assert_eq!(sp["extra_args"], json!({"kv_transfer_params": asked}));

    // No max_tokens in the body (vLLM's default 16): 1 is appended.
    let mut request = native(json!({"token_ids": [1]}));
    request.pd = Some(leg(PdRole::Prefill, None));
    let body = built_with(request, false).2;
    assert_eq!(body["sampling_params"], json!({"max_tokens": 1}));
}

#[test]
fn pd_decode_leg_is_the_clients_request_without_prompt_logprobs() {
    for nest in [false, true] {
        let mut request = native(pd_client());
        // The router clears the typed prompt logprobs on decode (kv style); the native
        // `prompt_logprob_token_ids` must not force a unary answer either.
        request.output.prompt_logprobs = None;
        request.sampling.n = 2;
        request.handoff = Some(json!({"client": "own"}));
        request.pd = Some(leg(PdRole::Decode, Some(nixl())));
        let (upstream, spec, body) = built_with(request, nest);
        assert!(!upstream.unary, "decode streams as the client asked");
        assert_eq!(upstream.request_id, ID, "same id on both legs");
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["stream_options"],
            json!({"include_usage": true, "continuous_usage_stats": true})
        );
        assert_eq!(
            body["kv_transfer_params"],
            nixl(),
            "the prefill's, not the client's"
        );
        let sp = &body["sampling_params"];
        assert_eq!(
            (&sp["max_tokens"], &sp["min_tokens"], &sp["n"]),
            (&json!(32), &json!(8), &json!(2))
        );
        assert!(sp.get("prompt_logprobs").is_none());
        assert!(sp.get("prompt_logprob_start").is_none());
        assert_eq!(spec.n, 2);
        assert!(spec.prompt_logprobs.is_none());
        if nest {
            assert_eq!(
                sp["extra_args"],
                json!({"mine": 1, "kv_transfer_params": nixl()})
            );
        } else {
            assert_eq!(sp["extra_args"], json!({"mine": 1}));
        }
    }
    let mut request = native(json!({"token_ids": [1], "sampling_params":
        {"prompt_logprob_token_ids": [[1]], "prompt_logprobs": 0}}));
    request.pd = Some(leg(PdRole::Decode, Some(nixl())));
    let (upstream, _, body) = built_with(request, false);
    assert!(!upstream.unary);
    assert_eq!(body["sampling_params"], json!({}));
}

#[test]
fn pd_typed_bodies_carry_the_legs_kv_transfer_params() {
    // An SGLang client on a vLLM pair: the typed fields describe the leg (set by the router).
    let mut request = sglang(OutputOptions::default());
    request.handoff = None;
    request.sampling.n = 1;
    request.stop.max_tokens = Some(1);
    request.stop.min_tokens = 1;
    request.pd = Some(leg(PdRole::Prefill, None));
    let (upstream, _, body) = built_with(request.clone(), true);
    assert!(upstream.unary);
    let asked = json!({"do_remote_decode": true, "do_remote_prefill": false});
    assert_eq!(body["kv_transfer_params"], asked);
    assert_eq!(
        body["sampling_params"]["extra_args"],
        json!({"kv_transfer_params": asked})
    );
    assert_eq!(body["sampling_params"]["max_tokens"], 1);
    assert!(body.get("stream_options").is_none());

    request.pd = Some(leg(PdRole::Decode, Some(nixl())));
    let (upstream, _, body) = built_with(request, false);
    assert!(!upstream.unary);
    assert_eq!(body["kv_transfer_params"], nixl());
    assert!(body["sampling_params"].get("extra_args").is_none());
}
