use genfront_protocol::{
    Candidate, EngineError, EngineOutput, ErrorKind, FinishReason, StopMatch, TokenLogprob, Usage,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{DecodeConfig, FrameDecoder};

fn cfg(incremental: bool) -> DecodeConfig {
    DecodeConfig {
        incremental,
        prompt_len: 3,
        eos_token_ids: vec![2],
        stop_token_ids: vec![9],
        ..DecodeConfig::default()
    }
}

fn dec(d: &mut FrameDecoder, v: Value) -> Result<EngineOutput, EngineError> {
    d.decode(v.to_string().as_bytes())
}

fn ok(d: &mut FrameDecoder, v: Value) -> EngineOutput {
    match dec(d, v) {
        Ok(o) => o,
        Err(e) => panic!("decode failed: {e}"),
    }
}

fn err(d: &mut FrameDecoder, v: Value) -> EngineError {
    match dec(d, v) {
        Ok(o) => panic!("decoded {o:?}"),
        Err(e) => e,
    }
}

fn frame(ids: &[u32], finish: Value, extra: Value) -> Value {
    let mut meta = json!({"id": "r", "finish_reason": finish, "prompt_tokens": 3, "weight_version": "default"});
    if let (Some(m), Value::Object(x)) = (meta.as_object_mut(), extra) {
        m.extend(x);
    }
    json!({"output_ids": ids, "meta_info": meta})
}

#[test]
fn cumulative_and_incremental_ids() {
    let mut c = FrameDecoder::new(cfg(false));
    assert_eq!(
        ok(&mut c, frame(&[5], Value::Null, json!({}))).token_ids,
        [5]
    );
    assert_eq!(
        ok(&mut c, frame(&[5, 6, 7], Value::Null, json!({}))).token_ids,
        [6, 7]
    );
    let last = ok(
        &mut c,
        frame(
            &[5, 6, 7, 8],
            json!({"type":"length","length":4}),
            json!({"completion_tokens": 4, "cached_tokens": 1}),
        ),
    );
    assert_eq!(last.token_ids, [8]);
    assert_eq!(last.finish_reason, Some(FinishReason::Length { length: 4 }));
    assert_eq!(
        last.usage,
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
            cached_tokens: 1
        })
    );
    assert!(c.finished());
    assert_eq!(
        err(&mut c, frame(&[], Value::Null, json!({}))).kind,
        ErrorKind::Internal
    );

    let mut i = FrameDecoder::new(cfg(true));
    assert_eq!(
        ok(&mut i, frame(&[5], Value::Null, json!({}))).token_ids,
        [5]
    );
    let o = ok(&mut i, frame(&[6, 7], Value::Null, json!({})));
    assert_eq!(o.token_ids, [6, 7]);
    // Missing counts default to the prompt length and the ids delivered.
    assert_eq!(o.usage.map(|u| u.completion_tokens), Some(3));

    // A cumulative list that shrinks is a contract error, except on an abort.
    let mut c = FrameDecoder::new(cfg(false));
    ok(&mut c, frame(&[5, 6], Value::Null, json!({})));
    assert_eq!(
        err(&mut c, frame(&[5], Value::Null, json!({}))).kind,
        ErrorKind::Internal
    );
    let mut c = FrameDecoder::new(cfg(false));
    ok(&mut c, frame(&[5, 6], Value::Null, json!({})));
    let o = ok(
        &mut c,
        frame(
            &[6],
            json!({"type":"abort","message":"Abort in waiting queue"}),
            json!({}),
        ),
    );
    assert!(o.token_ids.is_empty());
}

#[test]
fn output_logprobs_both_shapes() {
    let mut config = cfg(false);
    config.logprobs = Some(2);
    config.selected = true;
    let lp = |x: f64, id: u32| json!([x, id, null]);
    // Cumulative lists in cumulative mode.
    let mut c = FrameDecoder::new(config.clone());
    let extra = json!({
        "output_token_logprobs": [lp(-0.5, 5)],
        "output_top_logprobs": [[lp(-0.5, 5), lp(-1.5, 6), lp(-3.0, 1)]],
        "output_token_ids_logprobs": [[lp(-4.0, 8)]],
    });
    let o = ok(&mut c, frame(&[5], Value::Null, extra));
    assert_eq!(
        o.logprobs,
        Some(vec![TokenLogprob {
            token_id: 5,
            logprob: -0.5,
            rank: Some(1),
            top: vec![
                Candidate {
                    token_id: 5,
                    logprob: -0.5,
                    rank: Some(1),
                    text: None
                },
                Candidate {
                    token_id: 6,
                    logprob: -1.5,
                    rank: Some(2),
                    text: None
                },
            ],
            selected: vec![Candidate {
                token_id: 8,
                logprob: -4.0,
                rank: None,
                text: None
            }],
            text: None,
        }])
    );
    let extra = json!({
        "output_token_logprobs": [lp(-0.5, 5), [null, 7, null]],
        "output_top_logprobs": [[lp(-0.5, 5)], null],
        "output_token_ids_logprobs": [[lp(-4.0, 8)], [lp(-2.0, 8)]],
    });
    let o = ok(&mut c, frame(&[5, 7], Value::Null, extra));
    let lps = o.logprobs.unwrap_or_default();
    assert_eq!(lps.len(), 1);
    assert_eq!(lps[0].token_id, 7);
    assert_eq!(lps[0].logprob, f64::NEG_INFINITY);
    assert!(lps[0].top.is_empty());
    assert_eq!(lps[0].rank, None);
    // Sliced lists are accepted in cumulative mode too; misaligned ones are not.
    let o = ok(
        &mut c,
        frame(
            &[5, 7, 9],
            Value::Null,
            json!({"output_token_logprobs": [lp(-0.25, 9)]}),
        ),
    );
    assert_eq!(o.logprobs.map(|l| l.len()), Some(1));
    let e = err(
        &mut c,
        frame(
            &[5, 7, 9, 1],
            Value::Null,
            json!({"output_token_logprobs": [lp(-1.0, 1), lp(-1.0, 1)]}),
        ),
    );
    assert_eq!(e.kind, ErrorKind::Internal);

    // New ids without logprobs when they were asked for: contract error.
    let mut c = FrameDecoder::new(config);
    assert_eq!(
        err(&mut c, frame(&[5], Value::Null, json!({}))).kind,
        ErrorKind::Internal
    );
}

#[test]
fn prompt_logprobs_once() {
    let mut config = cfg(true);
    config.prompt_len = 4;
    config.logprobs = Some(1);
    config.prompt_logprobs = Some(1);
    let mut d = FrameDecoder::new(config.clone());
    let input = json!({
        "input_token_logprobs": [[null, 11, null], [-1.25, 12, null], [-2.5, 13, null]],
        "input_top_logprobs": [null, [[-0.5, 40, null], [-0.9, 41, null]], [[-0.1, 13, null]]],
        "output_token_logprobs": [[-0.5, 5, null]],
        "output_top_logprobs": [[[-0.5, 5, null]]],
    });
    let o = ok(&mut d, frame(&[5], Value::Null, input.clone()));
    let p = o.prompt_logprobs.unwrap_or_default();
    assert_eq!(p.start, 1);
    assert_eq!(p.entries.len(), 3);
    assert_eq!(p.entries[0], None);
    let e1 = p.entries[1].clone().unwrap_or_default();
    assert_eq!((e1.token_id, e1.logprob, e1.rank), (12, -1.25, None));
    assert_eq!(e1.top.len(), 1, "cut to the requested count");
    assert_eq!(p.entries[2].as_ref().and_then(|e| e.rank), Some(1));
    // Input-side lists repeat in later frames: not delivered again.
    let mut again = input;
    again["output_token_logprobs"] = json!([[-0.7, 6, null]]);
    again["output_top_logprobs"] = json!([[[-0.7, 6, null]]]);
    assert!(
        ok(&mut d, frame(&[6], Value::Null, again))
            .prompt_logprobs
            .is_none()
    );

    // Not requested (SGLang's default logprob_start_len still sends one padded entry).
    config.prompt_logprobs = None;
    let mut d = FrameDecoder::new(config);
    let o = ok(
        &mut d,
        frame(
            &[5],
            Value::Null,
            json!({"input_token_logprobs": [[null, 14, null]], "output_token_logprobs": [[-0.5, 5, null]]}),
        ),
    );
    assert!(o.prompt_logprobs.is_none());
}

#[test]
fn flat_prompt_top_logprobs() {
    use base64::Engine as _;
    let mut config = cfg(false);
    config.prompt_len = 3;
    config.prompt_logprobs = Some(2);
    let base = json!({
        "input_token_logprobs": [[null, 1, null], [-1.0, 2, null], [-2.0, 3, null]],
        "input_top_logprobs_shape": [2, 2],
        "input_top_logprobs_null_prefix": 1,
    });
    let mut plain = base.clone();
    plain["input_top_logprobs_val_flat"] = json!([-0.5, -1.5, -0.25, -2.0]);
    plain["input_top_logprobs_idx_flat"] = json!([5, 6, 7, 8]);
    let o = ok(
        &mut FrameDecoder::new(config.clone()),
        frame(&[], Value::Null, plain),
    );
    let p = o.prompt_logprobs.unwrap_or_default();
    let tops: Vec<Vec<(u32, f64)>> = p
        .entries
        .iter()
        .map(|e| {
            e.iter()
                .flat_map(|e| e.top.iter().map(|c| (c.token_id, c.logprob)))
                .collect()
        })
        .collect();
    assert_eq!(
        tops,
        vec![
            vec![],
            vec![(5, -0.5), (6, -1.5)],
            vec![(7, -0.25), (8, -2.0)]
        ]
    );

    let b64 = base64::engine::general_purpose::STANDARD;
    let vals: Vec<u8> = [-0.5f32, -1.5, -0.25, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let ids: Vec<u8> = [5i32, 6, 7, 8]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut packed = base.clone();
    packed["input_top_logprobs_val_flat_b64"] = json!(b64.encode(vals));
    packed["input_top_logprobs_idx_flat_b64"] = json!(b64.encode(ids));
    let o = ok(
        &mut FrameDecoder::new(config.clone()),
        frame(&[], Value::Null, packed),
    );
    let p = o.prompt_logprobs.unwrap_or_default();
    assert_eq!(p.entries[2].as_ref().map(|e| e.top[1].token_id), Some(8));

    let mut bad = base;
    bad["input_top_logprobs_val_flat"] = json!([-0.5]);
    bad["input_top_logprobs_idx_flat"] = json!([5]);
    assert_eq!(
        err(&mut FrameDecoder::new(config), frame(&[], Value::Null, bad)).kind,
        ErrorKind::Internal
    );
}

#[test]
fn finish_reasons() {
    let one = |config: DecodeConfig, ids: &[u32], finish: Value| {
        let mut d = FrameDecoder::new(config);
        dec(&mut d, frame(ids, finish, json!({})))
    };
    let fin = |ids: &[u32], finish: Value| one(cfg(true), ids, finish).map(|o| o.finish_reason);
    let stop_id = |id| {
        Ok(Some(FinishReason::Stop {
            matched: StopMatch::TokenId(id),
        }))
    };
    let stop_text = |s: &str| {
        Ok(Some(FinishReason::Stop {
            matched: StopMatch::Text(s.into()),
        }))
    };
    assert_eq!(
        fin(&[2], json!({"type":"stop","matched":2})),
        Ok(Some(FinishReason::Eos { token_id: 2 }))
    );
    assert_eq!(fin(&[9], json!({"type":"stop","matched":9})), stop_id(9));
    // An id in neither list is one of the model's own stop ids.
    assert_eq!(
        fin(&[7], json!({"type":"stop","matched":7})),
        Ok(Some(FinishReason::Eos { token_id: 7 }))
    );
    assert_eq!(
        fin(&[9], json!({"type":"stop","matched":[4, 9]})),
        stop_id(9)
    );
    assert_eq!(
        fin(&[5], json!({"type":"stop","matched":"</s>"})),
        stop_text("</s>")
    );
    assert_eq!(
        fin(&[2], json!({"type":"stop","matched":null})),
        Ok(Some(FinishReason::Eos { token_id: 2 }))
    );
    assert_eq!(fin(&[5], json!({"type":"stop"})), stop_text(""));
    assert_eq!(
        fin(&[5, 6], json!({"type":"length","length":2})),
        Ok(Some(FinishReason::Length { length: 2 }))
    );
    assert_eq!(
        fin(&[5, 6], json!({"type":"length"})),
        Ok(Some(FinishReason::Length { length: 2 }))
    );
    assert_eq!(
        fin(&[5], json!("eos")),
        Ok(Some(FinishReason::Eos { token_id: 5 }))
    );
    assert_eq!(
        fin(
            &[5],
            json!({"type":"abort","message":"Aborted","status_code":null,"err_type":null})
        ),
        Ok(Some(FinishReason::Cancelled {
            message: "Aborted".into()
        }))
    );
    assert_eq!(
        fin(&[], json!({"type":"abort"})),
        Ok(Some(FinishReason::Cancelled {
            message: "Aborted".into()
        }))
    );
    // ignore_eos: a matched EOS id is a stop on that id.
    let mut ig = cfg(true);
    ig.ignore_eos = true;
    assert_eq!(
        one(ig, &[2], json!({"type":"stop","matched":2})).map(|o| o.finish_reason),
        stop_id(2)
    );

    let e = fin(
        &[],
        json!({"type":"abort","message":"The input is too long.","status_code":400,"err_type":"BadRequestError"}),
    );
    let e = e.err().unwrap_or_else(|| EngineError::internal("none"));
    assert_eq!(
        (
            e.kind,
            e.message.as_str(),
            e.status_code,
            e.err_type.as_deref()
        ),
        (
            ErrorKind::InvalidArgument,
            "The input is too long.",
            Some(400),
            Some("BadRequestError")
        )
    );
    let kind = |f: Value| fin(&[], f).err().map(|e| e.kind);
    assert_eq!(
        kind(json!({"type":"abort","message":"timeout","status_code":503})),
        Some(ErrorKind::Unavailable)
    );
    assert_eq!(
        kind(json!({"type":"abort","message":"boom","status_code":500})),
        Some(ErrorKind::Internal)
    );
    assert_eq!(kind(json!({"type":"weird"})), Some(ErrorKind::Internal));
    assert_eq!(
        kind(json!({"type":"error","message":"x"})),
        Some(ErrorKind::Internal)
    );
}

#[test]
fn error_frames() {
    let e = |v: Value| {
        let mut d = FrameDecoder::new(cfg(false));
        let e = err(&mut d, v);
        assert!(d.finished());
        e
    };
    let old = e(
        json!({"error": {"message": "The input (5 tokens) is longer than the model's context length (4 tokens)."}}),
    );
    assert_eq!(old.kind, ErrorKind::InvalidArgument);
    assert!(old.message.starts_with("The input (5 tokens)"));
    let new = e(
        json!({"error": {"message": "bad", "type": "invalid_request_error", "code": 400, "retryable": false}}),
    );
    assert_eq!(
        (new.kind, new.status_code, new.err_type.as_deref()),
        (
            ErrorKind::InvalidArgument,
            Some(400),
            Some("invalid_request_error")
        )
    );
    assert_eq!(
        e(json!({"error": {"message": "x", "code": 503}})).kind,
        ErrorKind::Unavailable
    );
    assert_eq!(
        e(json!({"error": {"message": "x", "code": 500}})).kind,
        ErrorKind::Internal
    );
    assert_eq!(
        e(json!({"error": {"message": "x", "code": 429}})).kind,
        ErrorKind::Overloaded
    );
    assert_eq!(
        e(json!({"error": {"message": "x", "status": 502}})).kind,
        ErrorKind::Unavailable
    );
    assert_eq!(e(json!([1, 2])).kind, ErrorKind::Internal);
    let mut d = FrameDecoder::new(cfg(false));
    assert_eq!(
        d.decode(b"{not json").map_err(|e| e.kind).err(),
        Some(ErrorKind::Internal)
    );
}

#[test]
fn engine_data_and_routed_experts() {
    use base64::Engine as _;
    let raw: Vec<u8> = (0..8i32).flat_map(|x| x.to_le_bytes()).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
    let mut config = cfg(false);
    config.routed_experts = true;
    config.logprobs = Some(0);
    let extra = json!({
        "output_token_logprobs": [[-0.5, 5, null]],
        "dp_rank": 1,
        "spec_accept_rate": 0.5,
        "routed_experts": b64,
        "completion_tokens": 1,
    });
    let f = frame(&[5], json!({"type":"length","length":1}), extra);
    // Shape unknown: native only.
    let o = ok(&mut FrameDecoder::new(config.clone()), f.clone());
    assert!(o.routed_experts.is_none());
    let data = o.engine_data.unwrap_or_default();
    assert!(data.get("output_ids").is_none());
    let meta = &data["meta_info"];
    assert!(meta.get("output_token_logprobs").is_none());
    assert_eq!(meta["dp_rank"], 1);
    assert_eq!(meta["routed_experts"], json!(b64));
    let keys: Vec<&String> = meta
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "id",
            "finish_reason",
            "prompt_tokens",
            "weight_version",
            "dp_rank",
            "spec_accept_rate",
            "routed_experts",
            "completion_tokens"
        ],
        "native key order kept"
    );
    // Shape known: typed rows too.
    config.experts_shape = Some((2, 2));
    let o = ok(&mut FrameDecoder::new(config.clone()), f.clone());
    let re = o.routed_experts.unwrap_or_default();
    assert_eq!(
        (re.num_layers, re.top_k, re.ids),
        (2, 2, (0..8).collect::<Vec<i32>>())
    );
    config.experts_shape = Some((3, 2));
    assert_eq!(
        err(&mut FrameDecoder::new(config), f).kind,
        ErrorKind::Internal
    );
}

#[test]
fn sampling_masks() {
    let mut config = cfg(true);
    config.sampling_mask = true;
    let mut d = FrameDecoder::new(config);
    let o = ok(
        &mut d,
        frame(
            &[5],
            Value::Null,
            json!({"output_token_sampling_mask": [[5, 6]]}),
        ),
    );
    assert_eq!(o.sampling_mask, Some(vec![vec![5, 6]]));
    // A cumulative mask in incremental mode is sliced.
    let o = ok(
        &mut d,
        frame(
            &[7],
            Value::Null,
            json!({"output_token_sampling_mask": [[5, 6], [7]]}),
        ),
    );
    assert_eq!(o.sampling_mask, Some(vec![vec![7]]));
    let o = ok(&mut d, frame(&[8], Value::Null, json!({})));
    assert_eq!(o.sampling_mask, None);
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z_]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("output_ids".to_owned()),
                        Just("meta_info".to_owned()),
                        Just("finish_reason".to_owned()),
                        Just("type".to_owned()),
                        Just("matched".to_owned()),
                        Just("output_token_logprobs".to_owned()),
                        Just("output_top_logprobs".to_owned()),
                        Just("input_token_logprobs".to_owned()),
                        Just("input_top_logprobs_shape".to_owned()),
                        Just("routed_experts".to_owned()),
                        Just("error".to_owned()),
                        "[a-z]{1,4}",
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn full_config() -> impl Strategy<Value = DecodeConfig> {
    (
        any::<bool>(),
        0u32..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(incremental, k, prompt, selected, experts)| DecodeConfig {
            incremental,
            prompt_len: 4,
            eos_token_ids: vec![2],
            logprobs: Some(k),
            prompt_logprobs: prompt.then_some(k),
            selected,
            sampling_mask: true,
            routed_experts: experts,
            experts_shape: experts.then_some((1, 1)),
            ..DecodeConfig::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes never panic the decoder.
    #[test]
    fn arbitrary_bytes_never_panic(cfg in full_config(), frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..4)) {
        let mut d = FrameDecoder::new(cfg);
        for f in frames {
            let _ = d.decode(&f);
        }
    }

    /// Arbitrary JSON frames (biased to SGLang's keys) never panic the decoder.
    #[test]
    fn arbitrary_json_never_panics(cfg in full_config(), frames in prop::collection::vec(json_value(), 0..4)) {
        let mut d = FrameDecoder::new(cfg);
        for f in frames {
            let _ = d.decode_value(f);
        }
    }
}

/// Renders one list entry for a token id.
type Entry = Box<dyn Fn(u32) -> Value>;

/// A cumulative stream: per frame, the new ids and, per output-side list, its form (0 absent,
/// 1 full, 2 sliced); optionally a finish on the last frame or a shrunk abort frame.
fn cumulative_frames(steps: &[(u8, [u8; 4])], finish: u8) -> Vec<Value> {
    let mut ids: Vec<u32> = Vec::new();
    let mut frames = Vec::new();
    let lp = |id: u32| json!([-0.5 - f64::from(id) / 7.0, id, null]);
    for (j, (n, forms)) in steps.iter().enumerate() {
        let start = ids.len();
        ids.extend((0..u32::from(*n)).map(|x| x + 3 * j as u32 + 4));
        let mut meta = json!({"id": "r", "finish_reason": null, "prompt_tokens": 4, "x": [1, 2]});
        let lists: [(&str, Entry); 4] = [
            ("output_token_logprobs", Box::new(lp)),
            (
                "output_top_logprobs",
                Box::new(move |id| json!([lp(id), lp(id + 1)])),
            ),
            (
                "output_token_ids_logprobs",
                Box::new(move |id| json!([lp(id)])),
            ),
            (
                "output_token_sampling_mask",
                Box::new(|id| json!([id, id + 1])),
            ),
        ];
        for ((key, make), form) in lists.iter().zip(forms) {
            let from = match form % 3 {
                0 => continue,
                1 => 0,
                _ => start,
            };
            let list: Vec<Value> = ids
                .get(from..)
                .unwrap_or_default()
                .iter()
                .map(|&i| make(i))
                .collect();
            meta[*key] = Value::Array(list);
        }
        frames.push(json!({"output_ids": ids, "meta_info": meta}));
    }
    if let Some(Value::Object(last)) = frames.last_mut() {
        match finish % 3 {
            1 => last["meta_info"]["finish_reason"] = json!({"type": "length"}),
            2 => {
                last["meta_info"]["finish_reason"] = json!({"type": "abort"});
                last["output_ids"] = json!([ids.last().copied().unwrap_or(1)]);
            }
            _ => {}
        }
    }
    frames
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Decoding the bytes (which skips the delivered prefixes) equals decoding the full parse.
    #[test]
    fn bytes_decode_as_full_parse(
        cfg in full_config(),
        steps in prop::collection::vec((0u8..4, any::<[u8; 4]>()), 1..6),
        finish in any::<u8>(),
    ) {
        let mut by_bytes = FrameDecoder::new(cfg.clone());
        let mut by_value = FrameDecoder::new(cfg);
        for f in cumulative_frames(&steps, finish) {
            let a = by_bytes.decode(f.to_string().as_bytes());
            let b = by_value.decode_value(f);
            prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }

    /// The same for arbitrary JSON frames.
    #[test]
    fn arbitrary_bytes_decode_as_full_parse(cfg in full_config(), frames in prop::collection::vec(json_value(), 0..4)) {
        let mut by_bytes = FrameDecoder::new(cfg.clone());
        let mut by_value = FrameDecoder::new(cfg);
        for f in frames {
            let a = by_bytes.decode(f.to_string().as_bytes());
            let b = by_value.decode_value(f);
            prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }
}

/// `return_text_in_logprobs`: the third slot of every triple (output, top, token-id, prompt) is
/// the engine's decoded token text, read into `text` on the typed path (`decode`) and the
/// `Value` path (`decode_value`) alike, in cumulative and incremental mode.
#[test]
fn decoded_text_in_logprob_triples() {
    for incremental in [false, true] {
        let mut config = cfg(incremental);
        config.logprobs = Some(2);
        config.prompt_logprobs = Some(1);
        config.selected = true;
        let t = |x: Option<f64>, id: u32, text: &str| json!([x, id, text]);
        let first = json!({
            "output_token_logprobs": [t(Some(-0.442), 110_837, " ghyz")],
            "output_top_logprobs": [[t(Some(-0.442), 110_837, " ghyz"), t(Some(-1.5), 6, "\u{fffd}")]],
            "output_token_ids_logprobs": [[t(Some(-4.0), 8, " i")]],
            "input_token_logprobs": [t(None, 5, " f"), t(Some(-2.0), 6, " g"), t(Some(-3.0), 7, " h")],
            "input_top_logprobs": [null, [t(Some(-1.0), 9, " j")], [t(Some(-0.5), 7, " h")]],
            "input_token_ids_logprobs": [null, [t(Some(-5.0), 8, " i")], [t(Some(-6.0), 8, " i")]],
        });
        let frames = [
            frame(&[110_837], Value::Null, first.clone()),
            frame(&[110_837], Value::Null, first),
        ];
        for (typed, f) in frames.into_iter().enumerate() {
            let mut d = FrameDecoder::new(config.clone());
            let o = if typed == 0 {
                ok(&mut d, f)
            } else {
                d.decode_value(f).unwrap_or_else(|e| panic!("{e}"))
            };
            let lps = o.logprobs.unwrap_or_default();
            assert_eq!(lps.len(), 1);
            assert_eq!(lps[0].text.as_deref(), Some(" ghyz"));
            let top: Vec<_> = lps[0].top.iter().map(|c| c.text.as_deref()).collect();
            assert_eq!(top, [Some(" ghyz"), Some("\u{fffd}")]);
            assert_eq!(lps[0].selected[0].text.as_deref(), Some(" i"));
            let prompt = o.prompt_logprobs.unwrap_or_default();
            assert_eq!(prompt.start, 0);
            assert!(prompt.entries[0].is_none());
            assert_eq!(prompt.first_text.as_deref(), Some(" f"));
            // The padded position's id is the engine's (a text prompt's ids are its alone).
            assert_eq!(prompt.first_token_id, Some(5));
            let p1 = prompt.entries[1].clone().unwrap_or_default();
            assert_eq!(p1.text.as_deref(), Some(" g"));
            assert_eq!(p1.top[0].text.as_deref(), Some(" j"));
            assert_eq!(p1.selected[0].text.as_deref(), Some(" i"));
        }
    }
    // Without the flag (or a tokenizer) the slot is `null`: no text.
    let mut config = cfg(false);
    config.logprobs = Some(0);
    let mut d = FrameDecoder::new(config);
    let o = ok(
        &mut d,
        frame(
            &[5],
            Value::Null,
            json!({"output_token_logprobs": [[-0.5, 5, null]]}),
        ),
    );
    assert_eq!(o.logprobs.unwrap_or_default()[0].text, None);
}
