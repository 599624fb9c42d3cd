//! The contract ⇄ wire mapping is lossless: random requests, outputs, errors and model facts
//! survive `encode` → protobuf bytes → `decode` exactly (floats bit for bit, NaN and -inf
//! included; JSON with 64-bit integers and key order), and malformed messages are rejected.

use genfront_protocol::{
    Bootstrap, Candidate, Constraints, EngineError, EngineInfo, EngineOutput, EngineRequest,
    ErrorKind, FinishReason, LogitBias, NativeBody, OutputOptions, PdLeg, PdRole,
    PromptLogprobOptions, PromptLogprobs, RoutedExperts, RoutingHints, SamplingOptions,
    StopConditions, StopMatch, StructuredOutput, TokenLogprob, Usage,
};
use genfront_sidecar::{WireError, pb, wire};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use prost::Message;
use serde_json::{Map, Number, Value, json};

// === strategies ===

/// Any `f64`, with the special values a real engine produces made likely.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => any::<f64>(),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(f64::NAN),
        1 => Just(-0.0),
        1 => -30.0..=0.0_f64,
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(Value::from(5_731_906_216_386_620_393_u64)),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec((".{0,8}", inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn candidate() -> impl Strategy<Value = Candidate> {
    (
        any::<u32>(),
        float(),
        option::of(any::<u32>()),
        option::of(".{0,6}"),
    )
        .prop_map(|(token_id, logprob, rank, text)| Candidate {
            token_id,
            logprob,
            rank,
            text,
        })
}

fn token_logprob() -> impl Strategy<Value = TokenLogprob> {
    (
        any::<u32>(),
        float(),
        option::of(any::<u32>()),
        vec(candidate(), 0..5),
        vec(candidate(), 0..3),
        option::of(".{0,6}"),
    )
        .prop_map(
            |(token_id, logprob, rank, top, selected, text)| TokenLogprob {
                token_id,
                logprob,
                rank,
                top,
                selected,
                text,
            },
        )
}

fn finish_reason() -> impl Strategy<Value = FinishReason> {
    prop_oneof![
        any::<u32>().prop_map(|token_id| FinishReason::Eos { token_id }),
        any::<u32>().prop_map(|id| FinishReason::Stop {
            matched: StopMatch::TokenId(id)
        }),
        ".{0,10}".prop_map(|s| FinishReason::Stop {
            matched: StopMatch::Text(s)
        }),
        any::<u32>().prop_map(|length| FinishReason::Length { length }),
        ".{0,10}".prop_map(|message| FinishReason::Cancelled { message }),
        ".{0,10}".prop_map(|message| FinishReason::Error { message }),
    ]
}

prop_compose! {
    fn output()(
        index in any::<u32>(),
        token_ids in vec(any::<u32>(), 0..6),
        logprobs in option::of(vec(token_logprob(), 0..4)),
        prompt_logprobs in option::of((any::<u32>(), vec(option::of(token_logprob()), 0..4), option::of(".{0,6}"), option::of(any::<u32>()))),
        routed_experts in option::of((any::<u32>(), any::<u32>(), vec(any::<i32>(), 0..12))),
        sampling_mask in option::of(vec(vec(any::<u32>(), 0..5), 0..4)),
        finish_reason in option::of(finish_reason()),
        usage in option::of(any::<(u32, u32, u32)>()),
        handoff in option::of(json_value()),
        engine_data in option::of(json_value()),
    ) -> EngineOutput {
        EngineOutput {
            index,
            token_ids,
            logprobs,
            prompt_logprobs: prompt_logprobs.map(|(start, entries, first_text, first_token_id)| PromptLogprobs { start, entries, first_text, first_token_id }),
            routed_experts: routed_experts.map(|(num_layers, top_k, ids)| RoutedExperts { num_layers, top_k, ids }),
            sampling_mask,
            finish_reason,
            usage: usage.map(|(prompt_tokens, completion_tokens, cached_tokens)| Usage {
                prompt_tokens,
                completion_tokens,
                cached_tokens,
            }),
            handoff,
            engine_data,
            native: None,
        }
    }
}

prop_compose! {
    fn sampling()(
        n in any::<u32>(),
        floats in any::<[bool; 6]>(),
        values in [float(), float(), float(), float(), float(), float()],
        top_k in option::of(any::<i64>()),
        seed in option::of(any::<u64>()),
        sample_index in any::<u32>(),
    ) -> SamplingOptions {
        let pick = |i: usize| floats[i].then_some(values[i]);
        SamplingOptions {
            n,
            temperature: pick(0),
            top_p: pick(1),
            top_k,
            min_p: pick(2),
            frequency_penalty: pick(3),
            presence_penalty: pick(4),
            repetition_penalty: pick(5),
            seed,
            sample_index,
        }
    }
}

prop_compose! {
    fn request()(
        request_id in "[0-9a-f]{0,32}",
        token_ids in vec(any::<u32>(), 0..10),
        stop in (option::of(any::<u32>()), any::<u32>(), vec(any::<u32>(), 0..3), vec(".{0,6}", 0..3), any::<bool>()),
        sampling in sampling(),
        output in (
            option::of(any::<u32>()),
            option::of(any::<(u32, u32)>()),
            vec(any::<u32>(), 0..3),
            any::<bool>(),
            any::<u32>(),
            any::<bool>(),
        ),
        routing in (
            option::of(any::<u32>()),
            option::of(any::<i64>()),
            option::of(".{0,6}"),
            option::of(".{0,6}"),
            option::of(".{0,6}"),
        ),
        handoff in option::of(json_value()),
        pd in option::of((any::<bool>(), option::of((".{0,8}", option::of(any::<u16>()), 0..=i64::MAX as u64)), option::of(json_value()))),
        format in "[a-z]{0,6}",
        body in json_value(),
        constraints in (vec((any::<u32>(), float()), 0..3), option::of((0..4u8, ".{0,6}"))),
        native_only in vec("[a-z_.]{1,12}", 0..3),
    ) -> EngineRequest {
        EngineRequest {
            request_id,
            token_ids,
            stop: StopConditions {
                max_tokens: stop.0,
                min_tokens: stop.1,
                stop_token_ids: stop.2,
                stop: stop.3,
                ignore_eos: stop.4,
            },
            sampling,
            output: OutputOptions {
                logprobs: output.0,
                prompt_logprobs: output.1.map(|(start, top_k)| PromptLogprobOptions { start, top_k }),
                token_ids_logprobs: output.2,
                routed_experts: output.3,
                routed_experts_start: output.4,
                sampling_mask: output.5,
                stream: output.5 ^ output.3,
                relay: false,
            },
            routing: RoutingHints {
                dp_rank: routing.0,
                priority: routing.1,
                cache_salt: routing.2,
                session_id: routing.3,
                lora: routing.4,
            },
            handoff,
            pd: pd.map(|(prefill, bootstrap, kv)| PdLeg {
                role: if prefill { PdRole::Prefill } else { PdRole::Decode },
                bootstrap: bootstrap.map(|(host, port, room)| Bootstrap { host, port, room }),
                kv_transfer_params: kv,
            }),
            native: NativeBody { format, body },
            constraints: Constraints {
                logit_bias: constraints
                    .0
                    .into_iter()
                    .map(|(token_id, bias)| LogitBias { token_id, bias })
                    .collect(),
                structured: constraints.1.map(|(kind, text)| match kind {
                    0 => StructuredOutput::Regex(text),
                    1 => StructuredOutput::JsonSchema(text),
                    2 => StructuredOutput::Grammar(text),
                    _ => StructuredOutput::StructuralTag(text),
                }),
            },
            native_only,
        }
    }
}

fn error_kind() -> impl Strategy<Value = ErrorKind> {
    prop_oneof![
        Just(ErrorKind::InvalidArgument),
        Just(ErrorKind::Unsupported),
        Just(ErrorKind::Unavailable),
        Just(ErrorKind::Overloaded),
        Just(ErrorKind::StreamIncomplete),
        Just(ErrorKind::Cancelled),
        Just(ErrorKind::Internal),
    ]
}

prop_compose! {
    fn error()(
        kind in error_kind(),
        message in ".{0,20}",
        status_code in option::of(any::<u16>()),
        err_type in option::of(".{0,8}"),
        retry_after_secs in option::of(any::<u32>()),
    ) -> EngineError {
        EngineError { kind, message, status_code, err_type, retry_after_secs, native: None }
    }
}

// === helpers ===

/// Through protobuf bytes, as on the network.
fn through_bytes<M: Message + Default>(message: &M) -> M {
    M::decode(message.encode_to_vec().as_slice()).expect("decodes what it encoded")
}

/// Equality that also holds for NaN: `Debug` prints every float in its shortest exact form
/// (`-0.0`, `-inf` and `NaN` distinct from everything else), and serde_json numbers by kind.
fn same<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

// === properties ===

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn requests_round_trip(request in request()) {
        let wire = wire::encode_request(request.clone()).expect("encodes");
        let back = wire::decode_request(through_bytes(&wire)).expect("decodes");
        prop_assert!(same(&back, &request), "{back:?}\n!=\n{request:?}");
    }

    #[test]
    fn outputs_round_trip(output in output()) {
        let wire = wire::encode_item(Ok(output.clone())).expect("encodes");
        let back = wire::decode_item(through_bytes(&wire)).expect("decodes").expect("an output");
        prop_assert!(same(&back, &output), "{back:?}\n!=\n{output:?}");
    }

    #[test]
    fn errors_round_trip(error in error()) {
        let wire = wire::encode_item(Err(error.clone())).expect("encodes");
        let back = wire::decode_item(through_bytes(&wire)).expect("decodes").expect_err("an error");
        prop_assert_eq!(back, error);
    }

    #[test]
    #[allow(clippy::needless_update)]
    fn info_round_trips(
        model in ".{0,12}",
        numbers in any::<[u32; 4]>(),
        eos_token_ids in vec(any::<u32>(), 0..4),
        flags in any::<(bool, bool)>(),
    ) {
        let info = EngineInfo {
            model,
            vocab_size: Some(numbers[0]),
            max_context_len: numbers[1],
            eos_token_ids,
            max_logprobs: Some(numbers[2]),
            max_num_seqs: Some(numbers[3]),
            routed_experts: flags.0,
            sampling_mask: flags.1,
            // Fields added to `EngineInfo` later keep their defaults.
            ..EngineInfo::default()
        };
        let wire = wire::encode_info(&info).expect("encodes");
        let back = wire::decode_info(&through_bytes(&wire)).expect("decodes");
        prop_assert_eq!(back, info);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in vec(any::<u8>(), 0..256)) {
        if let Ok(message) = pb::GenerateResponse::decode(bytes.as_slice()) {
            let _ = wire::decode_item(message);
        }
        if let Ok(message) = pb::GenerateRequest::decode(bytes.as_slice()) {
            let _ = wire::decode_request(message);
        }
    }
}

// === examples ===

#[test]
fn nan_payloads_and_negative_zero_keep_their_bits() {
    let odd_nan = f64::from_bits(0x7ff8_0000_0000_1234);
    let output = EngineOutput {
        logprobs: Some(vec![TokenLogprob {
            logprob: odd_nan,
            top: vec![Candidate {
                token_id: 1,
                logprob: -0.0,
                rank: Some(0),
                text: None,
            }],
            ..TokenLogprob::default()
        }]),
        ..EngineOutput::default()
    };
    let wire = wire::encode_output(output).expect("encodes");
    let back = wire::decode_output(through_bytes(&wire)).expect("decodes");
    let entry = &back.logprobs.expect("logprobs")[0];
    assert_eq!(entry.logprob.to_bits(), odd_nan.to_bits());
    assert_eq!(entry.top[0].logprob.to_bits(), (-0.0_f64).to_bits());
    assert_eq!(entry.top[0].rank, Some(0));
}

#[test]
fn native_body_keeps_64_bit_integers_and_key_order() {
    let body = json!({"z": 5_731_906_216_386_620_393_u64, "a": -9_223_372_036_854_775_808_i64, "m": 1.0, "k": 1});
    let request = EngineRequest {
        native: NativeBody {
            format: "vllm".to_owned(),
            body: body.clone(),
        },
        ..EngineRequest::default()
    };
    let wire = wire::encode_request(request).expect("encodes");
    assert_eq!(
        std::str::from_utf8(&wire.native.as_ref().expect("native").body).expect("utf-8"),
        r#"{"z":5731906216386620393,"a":-9223372036854775808,"m":1.0,"k":1}"#
    );
    let back = wire::decode_request(through_bytes(&wire)).expect("decodes");
    assert_eq!(back.native.body, body);
    let keys: Vec<_> = back
        .native
        .body
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["z", "a", "m", "k"]);
}

#[test]
fn present_but_empty_differs_from_absent() {
    for output in [
        EngineOutput {
            logprobs: Some(vec![]),
            ..EngineOutput::default()
        },
        EngineOutput {
            sampling_mask: Some(vec![]),
            ..EngineOutput::default()
        },
        EngineOutput {
            sampling_mask: Some(vec![vec![]]),
            ..EngineOutput::default()
        },
        EngineOutput {
            handoff: Some(Value::Null),
            ..EngineOutput::default()
        },
        EngineOutput::default(),
    ] {
        let wire = wire::encode_output(output.clone()).expect("encodes");
        assert_eq!(
            wire::decode_output(through_bytes(&wire)).expect("decodes"),
            output
        );
    }
}

#[test]
fn malformed_messages_are_rejected() {
    let mask = pb::Output {
        sampling_mask: Some(pb::SamplingMask {
            lengths: vec![2, 2],
            token_ids: vec![1, 2, 3],
        }),
        ..pb::Output::default()
    };
    assert_eq!(
        wire::decode_output(mask),
        Err(WireError::MaskShape {
            covered: 4,
            sent: 3
        })
    );
    let finish = pb::Output {
        finish_reason: Some(pb::FinishReason { reason: None }),
        ..pb::Output::default()
    };
    assert!(matches!(
        wire::decode_output(finish),
        Err(WireError::Missing(_))
    ));
    let json = pb::Output {
        engine_data: Some("{nope".into()),
        ..pb::Output::default()
    };
    assert!(matches!(
        wire::decode_output(json),
        Err(WireError::Json {
            field: "engine_data",
            ..
        })
    ));
    assert!(matches!(
        wire::decode_request(pb::GenerateRequest::default()),
        Err(WireError::Missing("native"))
    ));
    assert!(matches!(
        wire::decode_item(pb::GenerateResponse::default()),
        Err(WireError::Missing("item"))
    ));
    let status = pb::Error {
        status_code: Some(70_000),
        ..pb::Error::default()
    };
    assert_eq!(
        wire::decode_error(status),
        Err(WireError::OutOfRange("status_code"))
    );
    let e = EngineError::from(WireError::Missing("item"));
    assert_eq!(e.kind, ErrorKind::Internal);
}

#[test]
fn unknown_error_kinds_decode_as_internal() {
    for kind in [0, 99] {
        let error = pb::Error {
            kind,
            message: "m".to_owned(),
            ..pb::Error::default()
        };
        let back = wire::decode_error(error).expect("decodes");
        assert_eq!(
            (back.kind, back.message.as_str()),
            (ErrorKind::Internal, "m")
        );
    }
}
