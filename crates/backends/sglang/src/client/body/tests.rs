use genfront_protocol::{
    Bootstrap, EngineError, EngineInfo, EngineRequest, ErrorKind, NativeBody, PdLeg, PdRole,
    PromptLogprobOptions,
};
use serde_json::{Value, json};

use super::{Caps, Dispatch, plan};

/// A native SGLang request as the frontend hands it over (the typed `stream` flag mirrors the
/// client's `stream`).
fn native(body: Value) -> EngineRequest {
    EngineRequest {
        request_id: "0123abcd".into(),
        token_ids: vec![7, 8, 9],
        output: genfront_protocol::OutputOptions {
            stream: body["stream"] == Value::Bool(true),
            ..Default::default()
        },
        native: NativeBody {
            format: "sglang".into(),
            body,
        },
        ..EngineRequest::default()
    }
}

fn bodies(req: &EngineRequest, caps: Caps) -> Result<Vec<(Dispatch, Value)>, EngineError> {
    let info = EngineInfo {
        max_context_len: 100,
        ..EngineInfo::default()
    };
    Ok(plan(req, &req.request_id, &info, caps)?
        .into_iter()
        .map(|d| {
            let v = serde_json::from_slice(&d.body).unwrap_or(Value::Null);
            (d, v)
        })
        .collect())
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn streaming_clients_stream_upstream() {
    let client = json!({"rid": "r", "input_ids": [1], "stream": true});
    let out = bodies(&native(client), Caps::default()).unwrap_or_default();
    let (d, v) = &out[0];
    assert_eq!(v["stream"], true);
    assert!(!d.unary);
}

#[test]
fn native_body_is_lossless_with_surgical_edits() {
    let client = json!({
        "text": "ignored",
        "rid": "client-rid",
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 4, "future_key": [1], "temperature": 0.5},
        "return_logprob": true,
        "custom_unknown": {"x": 1},
        "stream": false,
        "input_embeds": null,
    });
    let out = bodies(&native(client), Caps::default()).unwrap_or_default();
    assert_eq!(out.len(), 1);
    let (d, v) = &out[0];
    assert_eq!((d.rid.as_str(), d.index), ("0123abcd", 0));
    assert_eq!(
        keys(v),
        [
            "rid",
            "input_ids",
            "sampling_params",
            "return_logprob",
            "custom_unknown",
            "stream"
        ]
    );
    assert_eq!(v["rid"], "0123abcd");
    assert_eq!(v["input_ids"], json!([7, 8, 9]));
    // A unary client gets SGLang's unary answer: one native body instead of a growing stream.
    assert_eq!(v["stream"], false);
    assert!(d.unary);
    assert_eq!(
        v["sampling_params"],
        json!({"max_new_tokens": 4, "future_key": [1], "temperature": 0.5})
    );
    assert_eq!(v["custom_unknown"], json!({"x": 1}));

    // Missing keys are appended; DP rank and router-owned bootstrap fields are applied (a
    // client's null bootstrap key is dropped: the router owns them).
    let mut req =
        native(json!({"sampling_params": {}, "bootstrap_room": null, "return_logprob": [true]}));
    req.routing.dp_rank = Some(3);
    req.pd = Some(PdLeg {
        role: PdRole::Decode,
        bootstrap: Some(Bootstrap {
            host: "10.0.0.1".into(),
            port: None,
            room: 77,
        }),
        kv_transfer_params: None,
    });
    req.output.logprobs = Some(0);
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    let v = &out[0].1;
    assert_eq!(
        keys(v),
        [
            "sampling_params",
            "return_logprob",
            "rid",
            "input_ids",
            "stream",
            "routed_dp_rank",
            "bootstrap_host",
            "bootstrap_port",
            "bootstrap_room"
        ]
    );
    assert_eq!(v["bootstrap_room"], 77);
    assert_eq!(v["bootstrap_port"], Value::Null);
    assert_eq!(
        v["return_logprob"], true,
        "batch-shaped list replaced by the typed value"
    );
    assert_eq!(v["routed_dp_rank"], 3);
    // A body naming its DP rank keeps it.
    let mut req = native(json!({"data_parallel_rank": 1}));
    req.routing.dp_rank = Some(3);
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    assert!(out[0].1.get("routed_dp_rank").is_none());
    assert_eq!(out[0].1["data_parallel_rank"], 1);

    // No native body object: rebuilt from the typed request.
    let out = bodies(&native(Value::Null), Caps::default()).unwrap_or_default();
    assert_eq!(out[0].1["rid"], "0123abcd");
    assert_eq!(out[0].1["input_ids"], json!([7, 8, 9]));
    assert_eq!(out[0].1["stream"], true);
}

#[test]
fn parallel_samples_split_with_prefixed_rids() {
    let mut req =
        native(json!({"input_ids": [1], "sampling_params": {"n": 3, "temperature": 1.0}}));
    req.sampling.n = 3;
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    let rids: Vec<&str> = out.iter().map(|(d, _)| d.rid.as_str()).collect();
    assert_eq!(rids, ["0123abcd-0", "0123abcd-1", "0123abcd-2"]);
    let idx: Vec<u32> = out.iter().map(|(d, _)| d.index).collect();
    assert_eq!(idx, [0, 1, 2]);
    for (d, v) in &out {
        assert_eq!(v["rid"], d.rid.as_str());
        assert_eq!(v["sampling_params"], json!({"n": 1, "temperature": 1.0}));
    }
}

#[test]
fn typed_body_from_another_format() {
    let mut req = native(json!({"model": "m", "vllm_only": true}));
    req.native.format = "vllm".into();
    req.stop.max_tokens = None;
    req.stop.min_tokens = 2;
    req.stop.stop_token_ids = vec![5];
    req.stop.ignore_eos = true;
    req.sampling.temperature = Some(0.0);
    req.sampling.top_k = Some(0);
    req.sampling.seed = Some(42);
    req.output.logprobs = Some(2);
    req.output.prompt_logprobs = Some(PromptLogprobOptions { start: 0, top_k: 5 });
    req.output.token_ids_logprobs = vec![4];
    req.routing.priority = Some(0);
    req.routing.cache_salt = Some("salt".into());
    req.routing.lora = Some("adapter".into());
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    let v = &out[0].1;
    assert_eq!(
        *v,
        json!({
            "rid": "0123abcd",
            "input_ids": [7, 8, 9],
            "sampling_params": {
                "max_new_tokens": 97,
                "min_new_tokens": 2,
                "stop_token_ids": [5],
                "ignore_eos": true,
                "temperature": 0.0,
                "top_k": -1,
                "sampling_seed": 42,
            },
            "return_logprob": true,
            "logprob_start_len": 0,
            "top_logprobs_num": 5,
            "token_ids_logprob": [4],
            "stream": true,
            "lora_path": "adapter",
            "extra_key": "salt",
        })
    );

    // What SGLang cannot produce is refused before sending.
    let unsupported = |req: &EngineRequest, caps: Caps| bodies(req, caps).err().map(|e| e.kind);
    let mut r = req.clone();
    r.output.sampling_mask = true;
    assert_eq!(
        unsupported(&r, Caps::default()),
        Some(ErrorKind::Unsupported)
    );
    assert!(
        unsupported(
            &r,
            Caps {
                sampling_mask: true,
                ..Caps::default()
            }
        )
        .is_none()
    );
    let mut r = req.clone();
    r.output.routed_experts = true;
    assert_eq!(
        unsupported(&r, Caps::default()),
        Some(ErrorKind::Unsupported)
    );
    assert!(
        unsupported(
            &r,
            Caps {
                typed_routed_experts: true,
                ..Caps::default()
            }
        )
        .is_none()
    );
    let mut r = req;
    r.handoff = Some(json!({"do_remote_decode": true}));
    assert_eq!(
        unsupported(&r, Caps::default()),
        Some(ErrorKind::Unsupported)
    );
}

/// The leg the router gives both sides of an SGLang P/D pair.
fn leg(role: PdRole, host: &str, port: Option<u16>, room: u64) -> PdLeg {
    PdLeg {
        role,
        bootstrap: Some(Bootstrap {
            host: host.into(),
            port,
            room,
        }),
        kv_transfer_params: None,
    }
}

/// The raw `"bootstrap_room":…` text of a body (the digits as sent, no float round trip).
fn raw_room(d: &Dispatch) -> String {
    let text = String::from_utf8_lossy(&d.body);
    let start = text.find("\"bootstrap_room\":").map_or(0, |i| i + 17);
    text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

#[test]
fn pd_legs_carry_the_bootstrap_triple_with_exact_rooms() {
    const ROOM: u64 = (1 << 63) - 1;
    let client = json!({
        "rid": "client",
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": true,
        "logprob_start_len": 0,
        "stream": true,
    });
    for role in [PdRole::Prefill, PdRole::Decode] {
        let mut req = native(client.clone());
        req.pd = Some(leg(role, "[fd00::17]", Some(8998), ROOM));
        let out = bodies(&req, Caps::default()).unwrap_or_default();
        assert_eq!(out.len(), 1);
        let (d, v) = &out[0];
        assert_eq!(v["bootstrap_host"], "[fd00::17]", "{role:?}");
        assert_eq!(v["bootstrap_port"], 8998);
        assert_eq!(v["bootstrap_room"].as_u64(), Some(ROOM));
        assert_eq!(raw_room(d), "9223372036854775807");
        // Everything else is the client's body with the usual edits, the same on both legs.
        assert_eq!(v["sampling_params"], client["sampling_params"]);
        assert_eq!(v["return_logprob"], true);
        assert_eq!(v["stream"], true);
        assert!(!d.unary);
    }

    // Unknown port: null. A unary client still asks for a unary answer on both legs.
    let mut req = native(json!({"input_ids": [1], "stream": false}));
    req.pd = Some(leg(PdRole::Prefill, "10.0.0.9", None, 5));
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    let (d, v) = &out[0];
    assert!(d.unary);
    assert!(v["bootstrap_port"].is_null());
    assert_eq!(v["bootstrap_room"], 5);

    // A client's companion key (`disagg_prefill_dp_rank`) passes through on an aggregated
    // engine but not onto a P/D leg, whose coordinates the router chose.
    let client = json!({"input_ids": [1], "disagg_prefill_dp_rank": 1, "bootstrap_room": null});
    let out = bodies(&native(client.clone()), Caps::default()).unwrap_or_default();
    assert_eq!(out[0].1["disagg_prefill_dp_rank"], 1);
    assert!(out[0].1["bootstrap_room"].is_null());
    let mut req = native(client);
    req.pd = Some(leg(PdRole::Decode, "h", Some(1), 3));
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    assert!(out[0].1.get("disagg_prefill_dp_rank").is_none());
    assert_eq!(
        keys(&out[0].1),
        [
            "input_ids",
            "rid",
            "stream",
            "bootstrap_host",
            "bootstrap_port",
            "bootstrap_room"
        ]
    );

    // Without bootstrap coordinates (e.g. a plain aggregated server) nothing is added.
    let mut req = native(json!({"input_ids": [1]}));
    req.pd = Some(PdLeg {
        role: PdRole::Decode,
        bootstrap: None,
        kv_transfer_params: None,
    });
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    assert!(out[0].1.get("bootstrap_room").is_none());
}

#[test]
fn pd_split_samples_get_one_room_each_on_both_legs() {
    const ROOM: u64 = (1 << 63) - 2;
    let rooms = |role| {
        let mut req = native(json!({"input_ids": [1], "sampling_params": {"n": 3}}));
        req.sampling.n = 3;
        req.pd = Some(leg(role, "h", Some(1), ROOM));
        bodies(&req, Caps::default())
            .unwrap_or_default()
            .iter()
            .map(|(d, v)| (raw_room(d), v["sampling_params"]["n"].clone()))
            .collect::<Vec<_>>()
    };
    let prefill = rooms(PdRole::Prefill);
    assert_eq!(
        prefill,
        [
            ("9223372036854775806".to_owned(), json!(1)),
            ("9223372036854775807".to_owned(), json!(1)),
            ("0".to_owned(), json!(1)),
        ],
        "rooms stay in [0, 2^63 - 1]"
    );
    assert_eq!(prefill, rooms(PdRole::Decode));
}

#[test]
fn pd_typed_body_carries_the_bootstrap_triple() {
    const ROOM: u64 = (1 << 63) - 1;
    let mut req = native(Value::Null);
    req.native.format = "vllm".into();
    req.stop.max_tokens = Some(4);
    req.pd = Some(leg(PdRole::Decode, "10.1.2.3", Some(9000), ROOM));
    let out = bodies(&req, Caps::default()).unwrap_or_default();
    let (d, v) = &out[0];
    assert_eq!(v["bootstrap_host"], "10.1.2.3");
    assert_eq!(v["bootstrap_port"], 9000);
    assert_eq!(raw_room(d), "9223372036854775807");
}

/// A vLLM-format request as the vLLM projection hands it over, with `constraints` and
/// `native_only` set.
fn from_vllm(constraints: genfront_protocol::Constraints, native_only: &[&str]) -> EngineRequest {
    EngineRequest {
        request_id: "0123abcd".into(),
        token_ids: vec![7, 8, 9],
        constraints,
        native_only: native_only.iter().map(|k| (*k).to_owned()).collect(),
        native: NativeBody {
            format: "vllm".into(),
            body: json!({"token_ids": [7, 8, 9], "sampling_params": {}}),
        },
        ..EngineRequest::default()
    }
}

#[test]
fn typed_body_carries_logit_bias_and_the_grammar() {
    use genfront_protocol::{Constraints, LogitBias, StructuredOutput};
    for (structured, key) in [
        (StructuredOutput::JsonSchema("{}".into()), "json_schema"),
        (StructuredOutput::Regex("[a-z]+".into()), "regex"),
        (StructuredOutput::Grammar("root ::= \"a\"".into()), "ebnf"),
        (
            StructuredOutput::StructuralTag("{}".into()),
            "structural_tag",
        ),
    ] {
        let text = match &structured {
            StructuredOutput::JsonSchema(t)
            | StructuredOutput::Regex(t)
            | StructuredOutput::Grammar(t)
            | StructuredOutput::StructuralTag(t) => t.clone(),
        };
        let req = from_vllm(
            Constraints {
                logit_bias: vec![
                    LogitBias {
                        token_id: 9,
                        bias: -1.5,
                    },
                    LogitBias {
                        token_id: 5,
                        bias: 2.0,
                    },
                ],
                structured: Some(structured),
            },
            &[],
        );
        let out = bodies(&req, Caps::default()).expect("typed body");
        let sp = &out[0].1["sampling_params"];
        assert_eq!(sp["logit_bias"], json!({"9": -1.5, "5": 2.0}));
        assert_eq!(keys(&sp["logit_bias"]), ["9", "5"], "client order kept");
        assert_eq!(sp[key], json!(text), "{key}");
    }
}

#[test]
fn typed_body_refuses_native_only_keys_by_name() {
    let req = from_vllm(
        Default::default(),
        &["sampling_params.bad_words", "features"],
    );
    let err = bodies(&req, Caps::default()).expect_err("refused");
    assert_eq!(err.kind, ErrorKind::Unsupported);
    assert!(
        err.message
            .contains("sampling_params.bad_words, features have no equivalent"),
        "{}",
        err.message
    );
    // The same keys on an SGLang client's own request are the engine's: forwarded natively.
    let mut own = native(json!({"input_ids": [7, 8, 9], "custom": 1}));
    own.native_only = vec!["sampling_params.stop_regex".into()];
    assert!(bodies(&own, Caps::default()).is_ok());
}

#[test]
fn typed_body_names_kv_transfer_params() {
    let mut req = from_vllm(Default::default(), &[]);
    req.handoff = Some(json!({"do_remote_decode": true}));
    let err = bodies(&req, Caps::default()).expect_err("refused");
    assert!(
        err.message.starts_with("kv_transfer_params"),
        "{}",
        err.message
    );
}

#[test]
fn ids_are_written_as_serde_json_writes_them() {
    for ids in [
        vec![],
        vec![0],
        vec![7, 8, 9],
        vec![9, 10, 99, 100, 999_999, 1_000_000, 4_294_967_294, u32::MAX],
        // Past one stack buffer (4096 bytes), with every digit count.
        (0..5_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) >> (i % 32))
            .collect(),
        vec![u32::MAX; 1_000],
        // The short buffer's worst case (64 ids of 10 digits), and one id past it.
        vec![u32::MAX; 64],
        vec![u32::MAX; 65],
    ] {
        let mut out = Vec::new();
        super::write_ids(&mut out, &ids);
        assert_eq!(
            out,
            serde_json::to_vec(&ids).expect("ids serialise"),
            "{ids:?}"
        );
    }
    let mut out = b"{".to_vec();
    let first = &mut true;
    super::ids_member(&mut out, first, "input_ids", &[1, 20]);
    super::ids_member(&mut out, first, "x", &[]);
    assert_eq!(out, br#"{"input_ids":[1,20],"x":[]"#);
}
