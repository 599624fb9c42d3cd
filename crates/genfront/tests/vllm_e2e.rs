//! vLLM `/inference/v1/generate` end to end: fixture records, streaming, `DYN_GENERATE_FORMAT=vllm`.

mod common;

use common::{fixture, jsonl, sse_events, start, start_with, zero_delay};
use serde_json::{Value, json};

/// Replace the sources' placeholders (e.g. `"<chat-templated ids>"`) with real token ids.
fn concrete(mut body: Value) -> Value {
    if !body["token_ids"].is_array() {
        body["token_ids"] = json!([1, 2, 3, 4, 5, 6, 7, 8]);
    }
    body
}

fn check_unary(v: &Value, body: &Value) {
    assert!(
        v["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("generate-tokens-")),
        "{v}"
    );
    assert!(v["created"].is_u64());
    let choices = v["choices"].as_array().expect("choices");
    let n = body["sampling_params"]["n"].as_u64().unwrap_or(1) as usize;
    assert_eq!(choices.len(), n);
    let prompt = body["token_ids"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(v["usage"]["prompt_tokens"], prompt);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert!(c["token_ids"].is_array());
        assert!(
            ["stop", "length"].contains(&c["finish_reason"].as_str().expect("finish")),
            "{c}"
        );
        for key in ["stop_reason", "routed_experts", "sampling_mask", "logprobs"] {
            assert!(
                c.get(key).is_some(),
                "choice key {key} must be present (null allowed): {c}"
            );
        }
    }
    if body["sampling_params"]["prompt_logprobs"].is_number() {
        let pl = v["prompt_logprobs"].as_array().expect("prompt_logprobs");
        assert_eq!(pl.len() as u64, prompt);
        assert!(pl[0].is_null());
    }
}

async fn check_record(
    s: &common::TestServer,
    headers: &Value,
    body: &Value,
    expected: Option<u64>,
) {
    let mut req = s.client.post(s.url("/inference/v1/generate")).json(body);
    if let Some(h) = headers.as_object() {
        for (k, v) in h {
            req = req.header(k.as_str(), v.as_str().unwrap_or_default());
        }
    }
    let resp = req.send().await.expect("sent");
    let status = resp.status().as_u16() as u64;
    let text = resp.text().await.expect("body");
    if let Some(exp) = expected {
        assert_eq!(status, exp, "{body} → {text}");
    }
    if status != 200 {
        let v: Value = serde_json::from_str(&text).expect("json error");
        assert!(v["error"]["message"].is_string(), "{v}");
        assert_eq!(v["error"]["code"].as_u64(), Some(status), "{v}");
        return;
    }
    if body["stream"] == json!(true) {
        let evs = sse_events(&text);
        let last_choice = evs
            .iter()
            .rev()
            .find(|e| e["choices"].as_array().is_some_and(|c| !c.is_empty()));
        assert!(
            last_choice.is_some_and(|e| !e["choices"][0]["finish_reason"].is_null()),
            "{text}"
        );
    } else {
        check_unary(&serde_json::from_str(&text).expect("json"), body);
    }
}

#[tokio::test]
async fn every_vllm_fixture_request_gets_the_native_answer() {
    // Serve the model names the recorded clients ask for, as a vLLM started with
    // `--served-model-name` would.
    let mut cfg = zero_delay();
    cfg.info.model = "Qwen/Qwen3-0.6B".into();
    cfg.info.model_aliases = [
        "Qwen/Qwen3-4B-Instruct-2507",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen1.5-0.5B-Chat",
        "llava-v1.5-7b",
    ]
    .map(String::from)
    .to_vec();
    let s = start_with(&[], cfg, 2).await;
    let mut n = 0;
    for rec in jsonl("vllm/examples.jsonl") {
        if rec["kind"] == "request" && rec["endpoint"] == "/inference/v1/generate" {
            let body = concrete(rec["json"].clone());
            // genfront follows the pinned Python server (vLLM 0.33.0): a refusal recorded from
            // vLLM's Rust frontend (`rust/src/server/…`), which the Python route does not make
            // (`prompt_logprobs` with `stream: true`), is not expected here.
            let rust_frontend = rec["source_repo_path"]
                .as_str()
                .is_some_and(|p| p.contains(":rust/src/server/"))
                && body["stream"] == json!(true)
                && !body["sampling_params"]["prompt_logprobs"].is_null();
            let expected = rec["expected_status"].as_u64().filter(|_| !rust_frontend);
            check_record(&s, &json!({}), &body, expected).await;
            n += 1;
        }
    }
    for rec in jsonl("clients/rl_requests.jsonl") {
        if rec["endpoint"] == "/inference/v1/generate" {
            check_record(&s, &rec["headers"], &rec["body"], None).await;
            n += 1;
        }
    }
    let full: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("dynamo-inference-generate/request-full.json"))
            .expect("read"),
    )
    .expect("json");
    check_record(&s, &json!({}), &full, None).await;
    assert!(n >= 10, "read {n} records");
}

#[tokio::test]
async fn a_request_without_max_tokens_gets_the_remaining_context() {
    let mut cfg = zero_delay();
    cfg.info.max_context_len = 64;
    let s = start_with(&[], cfg, 1).await;
    let ctx = 64;
    let prompt: Vec<u32> = (1..=10).collect();
    let (st, v) = s
        .post_json("/inference/v1/generate", &json!({"token_ids": prompt, "sampling_params": {"ignore_eos": true, "temperature": 0}}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["choices"][0]["token_ids"].as_array().map(Vec::len),
        Some(ctx - 10)
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn streamed_deltas_concatenate_to_the_unary_choice() {
    let s = start_with(&[], zero_delay(), 1).await;
    for seed in 0..5u64 {
        let body = json!({"token_ids": [3, 4, 5, seed + 6], "sampling_params": {
            "max_tokens": 5 + seed, "seed": seed, "temperature": 0.8, "logprobs": seed % 3, "n": 1 + seed % 2}});
        let (st, unary) = s.post_json("/inference/v1/generate", &body).await;
        assert_eq!(st, 200, "{unary}");
        let mut sb = body.clone();
        sb["stream"] = json!(true);
        sb["stream_options"] = json!({"include_usage": true});
        let evs = sse_events(
            &s.post("/inference/v1/generate", &sb)
                .await
                .text()
                .await
                .expect("body"),
        );
        let usage = evs.last().expect("usage chunk");
        assert_eq!(usage["choices"], json!([]));
        // The usage-only chunk is serialised without null fields (vLLM's `exclude_none`).
        let mut unary_usage = unary["usage"].clone();
        unary_usage
            .as_object_mut()
            .expect("usage")
            .retain(|_, v| !v.is_null());
        assert_eq!(usage["usage"], unary_usage);
        for (i, choice) in unary["choices"]
            .as_array()
            .expect("choices")
            .iter()
            .enumerate()
        {
            let mut ids = Vec::new();
            let mut content = Vec::new();
            for ev in &evs {
                for c in ev["choices"].as_array().expect("choices") {
                    if c["index"] == i {
                        ids.extend(c["token_ids"].as_array().cloned().unwrap_or_default());
                        if let Some(lp) = c["logprobs"]["content"].as_array() {
                            content.extend(lp.iter().cloned());
                        }
                    }
                }
            }
            assert_eq!(
                Value::Array(ids),
                choice["token_ids"],
                "seed {seed} choice {i}"
            );
            if choice["logprobs"].is_object() {
                assert_eq!(Value::Array(content), choice["logprobs"]["content"]);
            }
        }
    }
}

#[tokio::test]
async fn generate_format_vllm_serves_vllm_on_generate() {
    let s = start_with(&["--generate-format", "vllm"], zero_delay(), 1).await;
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(v["choices"].is_array());
    let r = s
        .client
        .put(s.url("/generate"))
        .json(&json!({"token_ids": [1]}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 405, "POST only");
    // The native vLLM path still works, and SGLang's /abort_request is not served.
    let (st, _) = s
        .post_json(
            "/inference/v1/generate",
            &json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}),
        )
        .await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn validation_errors_use_vllm_envelopes() {
    let s = start().await;
    let (st, v) = s
        .post_json(
            "/inference/v1/generate",
            &json!({"token_ids": [1], "sampling_params": {"temperature": 3}}),
        )
        .await;
    assert_eq!(st, 400);
    assert_eq!(v["error"]["type"], "BadRequestError");
    assert_eq!(v["error"]["param"], "temperature");
    assert_eq!(v["error"]["code"], 400);
    let (st, v) = s
        .post_json(
            "/inference/v1/generate",
            &json!({"token_ids": [1], "model": "nope", "sampling_params": {}}),
        )
        .await;
    assert_eq!(st, 404);
    assert_eq!(v["error"]["type"], "NotFoundError");
    let (st, v) = s
        .post_json(
            "/inference/v1/generate",
            &json!({"token_ids": [1], "sampling_params": {"max_tokens": 2147483648u64}}),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    let (st, _) = s
        .post_json(
            "/inference/v1/generate",
            &json!({"token_ids": [1], "sampling_params": {"max_tokens": 1}}),
        )
        .await;
    assert_eq!(st, 200, "the server keeps serving");
}
