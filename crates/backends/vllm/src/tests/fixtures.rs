//! The shared wire fixtures: every `/inference/v1/generate` request record of
//! `fixtures/vllm/examples.jsonl` and `fixtures/clients/rl_requests.jsonl`, and
//! `fixtures/dynamo-inference-generate/request-full.json`.

use std::path::PathBuf;

use genfront_format::{AbortSelector, Prepared, Rejection};
use genfront_protocol::{EngineInfo, PromptLogprobs};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::{Value, json};

use super::support::{delta, json_headers, length, lp, prepare_raw, render, run_unary};
use crate::parse_abort;

fn fixture(rel: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../../../../shared/fixtures",
        rel,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn records(rel: &str) -> Vec<Value> {
    fixture(rel)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSONL record"))
        .collect()
}

/// An engine serving `model` with room for the fixtures' token ids.
fn engine_for(body: &Value) -> EngineInfo {
    EngineInfo {
        model: body["model"]
            .as_str()
            .unwrap_or("Qwen/Qwen3-0.6B")
            .to_owned(),
        model_aliases: Vec::new(),
        vocab_size: Some(200_000),
        max_context_len: 4096,
        eos_token_ids: vec![2],
        max_logprobs: Some(20),
        max_num_seqs: Some(256),
        routed_experts: false,
        sampling_mask: true,
        tokenizer: Some(false),
        features: Default::default(),
        server_info: None,
    }
}

fn run(body: &Value, headers: &HeaderMap) -> Result<Prepared, Rejection> {
    let bytes = serde_json::to_vec(body).expect("json");
    prepare_raw(&bytes, headers, &engine_for(body))
}

/// A rejection must render as vLLM's error envelope.
fn check_envelope(r: &Rejection) -> StatusCode {
    let (status, json) = render(&r.error);
    let err = json["error"].as_object().expect("error object");
    assert_eq!(
        err.keys().map(String::as_str).collect::<Vec<_>>(),
        ["message", "type", "param", "code"]
    );
    assert_eq!(json["error"]["code"], status.as_u16());
    status
}

#[test]
fn vllm_examples() {
    let mut seen = 0;
    for record in records("vllm/examples.jsonl") {
        if record["kind"] != "request" {
            continue;
        }
        let mut body = record["json"].clone();
        if record["endpoint"] == "/inference/v1/abort_requests" {
            let bytes = serde_json::to_vec(&body).expect("json");
            assert_eq!(
                parse_abort(&bytes),
                Ok(AbortSelector::Exact(vec!["generate-tokens-42".to_owned()]))
            );
            continue;
        }
        assert_eq!(record["endpoint"], "/inference/v1/generate");
        if body["token_ids"].is_string() {
            body["token_ids"] = json!([1, 2, 3, 4]);
        }
        seen += 1;
        let result = run(&body, &json_headers());
        // A refusal recorded from vLLM's Rust frontend that the pinned Python server (0.33.0)
        // does not make (`prompt_logprobs` with `stream: true`) is not expected of genfront.
        let rust_frontend = record["source_repo_path"]
            .as_str()
            .is_some_and(|p| p.contains(":rust/src/server/"))
            && body["stream"] == json!(true)
            && !body["sampling_params"]["prompt_logprobs"].is_null();
        let expected = record["expected_status"]
            .as_u64()
            .filter(|_| !rust_frontend);
        match (expected, &result) {
            (Some(200), Ok(p)) => assert_eq!(p.stream, body["stream"] == json!(true)),
            (Some(400), Err(r)) => assert_eq!(
                check_envelope(r),
                StatusCode::BAD_REQUEST,
                "{}",
                record["note"]
            ),
            (None, Ok(_)) => {}
            (None, Err(r)) => assert!(check_envelope(r).is_client_error()),
            (expected, got) => panic!(
                "{}: expected {expected:?}, got {:?}",
                record["note"],
                got.as_ref().map(|p| p.stream)
            ),
        }
    }
    assert_eq!(seen, 9);
}

#[test]
fn vllm_examples_outcomes() {
    let recs = records("vllm/examples.jsonl");
    let body = |i: usize| {
        let mut b = recs[i]["json"].clone();
        if b["token_ids"].is_string() {
            b["token_ids"] = json!([1, 2, 3, 4]);
        }
        b
    };
    // #1 output_mode="text": no tokenizer here.
    let r = run(&body(0), &json_headers()).expect_err("text mode");
    assert!(
        r.error
            .public_message()
            .starts_with("output_mode='text' requires a tokenizer")
    );
    // #6: the doc's abbreviated prompt cannot hold a 256-token placeholder.
    let r = run(&body(5), &json_headers()).expect_err("placeholder out of range");
    assert!(
        r.error
            .public_message()
            .contains("mm_placeholders must remain within the token_ids sequence")
    );
    // #9 max_tokens 2147483648 and #10 stop with detokenize=false.
    assert!(run(&body(8), &json_headers()).is_err());
    let r = run(&body(9), &json_headers()).expect_err("stop");
    assert!(
        r.error
            .public_message()
            .starts_with("stop strings are only supported when detokenize is True")
    );
    // #12 llm-d prefill leg: kv_transfer_params nested in extra_args passes through untouched.
    let p = run(&body(11), &json_headers()).expect("llm-d prefill");
    let r = &p.subs[0].request;
    assert_eq!(r.stop.max_tokens, Some(1));
    assert_eq!(r.handoff, None);
    assert_eq!(
        r.native.body["sampling_params"]["extra_args"]["kv_transfer_params"]["do_remote_decode"],
        true
    );
    assert_eq!(p.client_id.as_deref(), Some("generate-tokens-req-abc-123"));
}

#[test]
fn rl_client_requests() {
    let recs: Vec<Value> = records("clients/rl_requests.jsonl")
        .into_iter()
        .filter(|r| r["endpoint"] == "/inference/v1/generate")
        .collect();
    assert_eq!(recs.len(), 3);
    for rec in &recs {
        let mut headers = json_headers();
        for (k, v) in rec["headers"].as_object().expect("headers") {
            let name = HeaderName::from_bytes(k.as_bytes()).expect("name");
            headers.insert(
                name,
                HeaderValue::from_str(v.as_str().expect("str")).expect("value"),
            );
        }
        let body = &rec["body"];
        let prompt_len = body["token_ids"].as_array().expect("ids").len() as u32;
        let source = rec["source"].as_str().expect("source");
        match run(body, &headers) {
            Ok(p) if source.contains("verifiers") => {
                // No max_tokens: the remaining context, not 16.
                let r = &p.subs[0].request;
                assert_eq!(r.stop.max_tokens, Some(4096 - prompt_len));
                assert_eq!(r.routing.session_id.as_deref(), Some("traj-0b7e4f21c9d8"));
                assert_eq!(r.stop.stop_token_ids, vec![4, 9]);
                assert_eq!(r.output.logprobs, Some(1));
                assert_eq!(crate::request::native_with_ids(r), *body);
            }
            Ok(p) if source.contains("prime-rl") => {
                // Prefill scoring via prompt_logprobs: answer with the full prompt list.
                let mut d = delta(0, &[17]);
                d.finish_reason = length(1);
                let ids: Vec<u32> = body["token_ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|v| v.as_u64().expect("id") as u32)
                    .collect();
                d.prompt_logprobs = Some(PromptLogprobs {
                    start: 0,
                    entries: ids
                        .iter()
                        .enumerate()
                        .map(|(i, t)| (i > 0).then(|| lp(*t, -1.5, 4, &[(1, -0.2)])))
                        .collect(),
                    first_text: None,
                    first_token_id: None,
                });
                let out = run_unary(p, vec![d]);
                let pl = out["prompt_logprobs"].as_array().expect("list");
                assert_eq!(pl.len(), ids.len());
                assert_eq!(pl[0], Value::Null);
                assert_eq!(pl[1][ids[1].to_string()]["logprob"], -1.5);
                assert_eq!(out["choices"][0]["token_ids"], json!([17]));
            }
            Err(r) if source.contains("SkyRL") => {
                // cache_salt "Qwen/Qwen3-8B@7" breaks 0.33.0's salt rule.
                assert_eq!(check_envelope(&r), StatusCode::BAD_REQUEST);
                assert!(
                    r.error
                        .public_message()
                        .contains("Parameter 'cache_salt' must be at most 128 characters")
                );
            }
            other => panic!("{source}: unexpected {:?}", other.map(|p| p.client_id)),
        }
    }
}

#[test]
fn dynamo_request_full() {
    let full: Value = serde_json::from_str(&fixture("dynamo-inference-generate/request-full.json"))
        .expect("json");
    // As recorded it carries stop strings, which a tokenizer-less server rejects.
    let r = run(&full, &json_headers()).expect_err("stop strings");
    assert_eq!(
        r.error.public_message(),
        crate::validate::STOP_ON_TOKENS_ONLY
    );
    assert!(!r.stream);

    let mut body = full.clone();
    body["sampling_params"]
        .as_object_mut()
        .expect("sampling")
        .remove("stop");
    // Its `structured_outputs` need a tokenizer too (`sampling_params.py:1242-1245`), refused
    // by the input processor (an SSE error event for this streaming body).
    let r = run(&body, &json_headers()).expect_err("structured outputs");
    assert_eq!(
        r.error.public_message(),
        crate::validate::STRUCTURED_OUTPUTS_NEED_TOKENIZER
    );
    assert!(r.stream);
    // An engine whose tokenizer is unknown gets the whole body.
    let unknown = EngineInfo {
        tokenizer: None,
        ..engine_for(&body)
    };
    let bytes = serde_json::to_vec(&body).expect("json");
    let p = prepare_raw(&bytes, &json_headers(), &unknown).expect("request-full without stop");
    assert!(p.stream);
    assert_eq!(
        p.client_id.as_deref(),
        Some("generate-tokens-generate-fixture")
    );
    let r = &p.subs[0].request;
    // The whole client body, unknown keys included, in the client's order.
    assert_eq!(r.native.format, "vllm");
    assert_eq!(crate::request::native_with_ids(r), body);
    assert_eq!(r.native.body["future_top_level"], json!({"enabled": true}));
    assert_eq!(
        r.native.body["sampling_params"]["future_sampling_field"],
        json!({"kept": true})
    );
    let order: Vec<&str> = r
        .native
        .body
        .as_object()
        .expect("obj")
        .keys()
        .map(String::as_str)
        .collect();
    let original: Vec<&str> = body
        .as_object()
        .expect("obj")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(order, original);
    assert_eq!(r.token_ids, vec![11, 22, 33, 44]);
    assert_eq!(r.sampling.n, 2);
    assert_eq!(r.sampling.seed, Some(42));
    assert_eq!(r.stop.max_tokens, Some(8));
    assert_eq!(r.stop.min_tokens, 1);
    assert_eq!(r.stop.stop_token_ids, vec![99]);
    // `logprobs: 2` with two `logprob_token_ids`: the listed ids, no top k.
    assert_eq!(r.output.logprobs, Some(0));
    assert_eq!(r.output.token_ids_logprobs, vec![7, 8]);
    assert_eq!(r.output.routed_experts_start, 3);
    assert_eq!(r.routing.priority, Some(-3));
    assert_eq!(r.routing.cache_salt.as_deref(), Some("fixture-salt"));
    assert_eq!(r.handoff, Some(json!({"connector": "fixture"})));
}
