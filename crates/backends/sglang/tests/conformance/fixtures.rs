//! Every recorded SGLang `/generate` request (the SGLang examples and the RL-client shapes) is either
//! prepared, or refused with the native error (`text` → the token-in-only 400).

use std::path::PathBuf;

use genfront_format::{CONTENT_TYPE_SSE, GenerateError, GenerateFormat};
use genfront_protocol::EngineInfo;
use genfront_sglang::TEXT_UNSUPPORTED;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::Value;

use crate::support::*;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/fixtures")
}

fn records(rel: &str) -> Vec<Value> {
    let path = fixtures_dir().join(rel);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A model large enough for the recorded prompts (Llama-3 ids up to 128000, 8k-token budgets).
fn big_engine() -> EngineInfo {
    EngineInfo {
        vocab_size: Some(152_064),
        max_context_len: 32_768,
        // A real engine's features, not reported here: LoRA and DP checks are the engine's.
        features: genfront_protocol::EngineFeatures::default(),
        ..EngineInfo::default()
    }
}

/// The response fields genfront produces, as paths the RL fixtures use in `reads`.
const PRODUCED: &[&str] = &[
    "output_ids",
    "meta_info.output_token_logprobs",
    "meta_info.input_token_logprobs",
    "meta_info.input_top_logprobs",
    "meta_info.input_token_ids_logprobs",
    "meta_info.finish_reason",
    "meta_info.weight_version",
    "meta_info.cached_tokens",
    "meta_info.prompt_tokens",
    "meta_info.completion_tokens",
    "meta_info.routed_experts",
];

fn check(body: &Value, headers: &HeaderMap, reads: &[&str], source: &str) -> &'static str {
    let text = serde_json::to_string(body).unwrap();
    let info = big_engine();
    match prepare_with(&text, headers, &info, false) {
        Err(r) => {
            let has_text = body.get("text").is_some() && body.get("input_ids").is_none();
            assert!(has_text, "{source}: unexpected rejection {:?}", r.error);
            assert_eq!(
                r.error,
                GenerateError::validation(TEXT_UNSUPPORTED),
                "{source}"
            );
            let answer = format(false).error_response(&r.error, r.stream);
            if body["stream"] == true {
                assert_eq!(answer.status, StatusCode::OK, "{source}");
                assert_eq!(answer.content_type, CONTENT_TYPE_SSE);
            } else {
                assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{source}");
            }
            "rejected"
        }
        Ok(p) => {
            let single =
                p.subs.len() == 1 && body["input_ids"].get(0).is_some_and(Value::is_number);
            if single {
                // Lossless: the native body, with the typed ids in its `input_ids`
                // placeholder, re-serializes to exactly what the client sent.
                let r = &p.subs[0].request;
                let mut native = r.native.body.clone();
                if native.get("input_ids").is_some_and(Value::is_null) {
                    native["input_ids"] = serde_json::json!(r.token_ids);
                }
                assert_eq!(serde_json::to_string(&native).unwrap(), text, "{source}");
            }
            if let Some(rid) = body.get("rid").and_then(Value::as_str) {
                assert_eq!(p.client_id.as_deref(), Some(rid), "{source}");
                assert_eq!(p.subs[0].abort_key, rid);
            }
            let stream = p.stream;
            let run = run(p, |i| Script {
                seed: i as u32,
                ..Script::tokens(3)
            });
            let answers: Vec<Value> = if stream {
                assert!(matches!(run.stream_end, Some(Ok(()))), "{source}");
                run.chunks.last().cloned().into_iter().collect()
            } else {
                match unary_body(&run) {
                    Value::Array(items) => items,
                    one => vec![one],
                }
            };
            for answer in &answers {
                for read in reads {
                    let path = read.split(['[', ' ', '|']).next().unwrap_or(read);
                    let requested =
                        path != "meta_info.routed_experts" || body["return_routed_experts"] == true;
                    if !PRODUCED.contains(&path) || !requested {
                        continue;
                    }
                    let mut v = answer;
                    for seg in path.split('.') {
                        v = v
                            .get(seg)
                            .unwrap_or_else(|| panic!("{source}: missing {path}"));
                    }
                }
            }
            "prepared"
        }
    }
}

#[test]
fn sglang_examples() {
    let mut outcomes = Vec::new();
    for (i, rec) in records("sglang/examples.jsonl").iter().enumerate() {
        if rec["kind"] != "request" {
            continue;
        }
        let source = format!("sglang/examples.jsonl #{}", i + 1);
        outcomes.push(check(&rec["json"], &HeaderMap::new(), &[], &source));
    }
    // #1, #2, #4 send text; #7 (batch with logprobs) and #10 (token-in) are served.
    assert_eq!(
        outcomes,
        ["rejected", "rejected", "rejected", "prepared", "prepared"]
    );
}

#[test]
fn rl_client_requests() {
    let mut outcomes = Vec::new();
    for (i, rec) in records("clients/rl_requests.jsonl").iter().enumerate() {
        if rec["endpoint"] != "/generate" {
            continue;
        }
        let mut headers = HeaderMap::new();
        for (k, v) in rec["headers"].as_object().into_iter().flatten() {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v.as_str().unwrap()).unwrap(),
            );
        }
        let reads: Vec<&str> = rec["reads"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let source = format!("clients/rl_requests.jsonl #{} ({})", i + 1, rec["source"]);
        outcomes.push(check(&rec["body"], &headers, &reads, &source));
    }
    assert_eq!(outcomes.len(), 13);
    // Only the search-r1 shape (#4) sends text. verl's own P/D decode leg (#11) sets bootstrap
    // fields: accepted, as SGLang accepts them (the router's replace them on a P/D route).
    let rejected: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == "rejected")
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(rejected, [4]);
}

#[test]
fn rl_projection_details() {
    let recs = records("clients/rl_requests.jsonl");
    let body = |i: usize| serde_json::to_string(&recs[i - 1]["body"]).unwrap();
    let info = big_engine();
    let h = HeaderMap::new();
    // verl decode leg: without its bootstrap fields (router-owned) its 63-bit-era body is
    // served, and its rid is the client id.
    let mut verl = recs[10]["body"].clone();
    if let Some(m) = verl.as_object_mut() {
        m.retain(|k, _| !k.starts_with("bootstrap_"));
    }
    let p = prepare_with(&verl.to_string(), &h, &info, false).unwrap();
    assert_eq!(p.subs[0].request.handoff, None);
    assert_eq!(
        p.client_id.as_deref(),
        Some("5d7a0c2e9f1b4a3c8e6d2f0a1b9c7e4d_D")
    );
    // With them: forwarded as sent (an aggregated engine ignores them), no P/D leg of its own.
    let p = prepare_with(&body(11), &h, &info, false).unwrap();
    let r = &p.subs[0].request;
    assert!(r.pd.is_none());
    assert_eq!(
        r.native.body["bootstrap_host"],
        recs[10]["body"]["bootstrap_host"]
    );
    assert_eq!(
        r.native.body["bootstrap_room"],
        recs[10]["body"]["bootstrap_room"]
    );
    // P/D stress client: DP pinning and incremental routed experts.
    let p = prepare_with(&body(8), &h, &info, false).unwrap();
    let r = &p.subs[0].request;
    assert_eq!(r.routing.dp_rank, Some(1));
    assert!(r.output.routed_experts);
    assert_eq!(r.output.routed_experts_start, 109);
    assert!(r.stop.ignore_eos);
    // OPD teacher scoring: prefill-only with prompt top-k and fixed-id logprobs.
    let p = prepare_with(&body(7), &h, &info, false).unwrap();
    let r = &p.subs[0].request;
    assert_eq!(r.stop.max_tokens, Some(0));
    assert_eq!(
        r.output
            .prompt_logprobs
            .as_ref()
            .map(|o| (o.start, o.top_k)),
        Some((0, 8))
    );
    assert_eq!(r.output.token_ids_logprobs.len(), 24);
    // AReaL: top_k 1e8 and stop ids; miles: LoRA adapter.
    let p = prepare_with(&body(9), &h, &info, false).unwrap();
    assert_eq!(p.subs[0].request.sampling.top_k, Some(100_000_000));
    assert_eq!(p.subs[0].request.stop.stop_token_ids, vec![2, 5]);
    let p = prepare_with(&body(6), &h, &info, false).unwrap();
    assert_eq!(
        p.subs[0].request.routing.lora.as_deref(),
        Some("miles_lora")
    );
    // slime: custom_params and the seed pass through; explicit nulls are defaults.
    let p = prepare_with(&body(2), &h, &info, false).unwrap();
    let r = &p.subs[0].request;
    assert_eq!(r.sampling.seed, Some(43));
    assert_eq!(
        r.native.body["sampling_params"]["custom_params"]["return_top_p_token_ids"],
        true
    );
    assert!(r.stop.stop_token_ids.is_empty());
}
