//! SGLang `/generate` end to end: every fixture request record, unary vs streaming, batch, n>1.

mod common;

use common::{jsonl, sse_events, start, start_with, zero_delay};
use serde_json::{Value, json};

fn is_token_in(body: &Value) -> bool {
    body.get("input_ids").is_some_and(|v| !v.is_null())
}

fn check_item(item: &Value, body: &Value) {
    let meta = &item["meta_info"];
    assert!(
        item.get("text").is_none(),
        "no tokenizer → no text key: {item}"
    );
    let ids = item["output_ids"].as_array().expect("output_ids");
    assert!(meta["id"].is_string(), "{meta}");
    let ft = meta["finish_reason"]["type"]
        .as_str()
        .expect("finish_reason.type");
    assert!(["length", "stop"].contains(&ft), "{meta}");
    assert_eq!(meta["completion_tokens"].as_u64(), Some(ids.len() as u64));
    assert!(meta["prompt_tokens"].as_u64().is_some());
    assert!(meta["cached_tokens"].as_u64().is_some());
    if body["return_logprob"] == json!(true) {
        let lp = meta["output_token_logprobs"]
            .as_array()
            .expect("output_token_logprobs");
        assert_eq!(lp.len(), ids.len());
        for (e, id) in lp.iter().zip(ids) {
            assert_eq!(&e[1], id);
            assert!(e[0].as_f64().is_some_and(|x| x <= 0.0));
        }
    }
}

async fn check_record(s: &common::TestServer, headers: &Value, body: &Value) {
    let mut req = s.client.post(s.url("/generate")).json(body);
    if let Some(h) = headers.as_object() {
        for (k, v) in h {
            req = req.header(k.as_str(), v.as_str().unwrap_or_default());
        }
    }
    let resp = req.send().await.expect("sent");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_owned());
    let text = resp.text().await.expect("body");
    let stream = body["stream"] == json!(true);
    if !is_token_in(body) {
        // Text input with no tokenizer: the native error, in SGLang's shapes.
        if stream && status == 200 {
            let evs = sse_events(&text);
            assert_eq!(evs.len(), 1, "{text}");
            assert!(
                evs[0]["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("token"))
            );
        } else {
            assert_eq!(status, 400, "{text}");
            let v: Value = serde_json::from_str(&text).expect("json");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("token")),
                "{v}"
            );
        }
        return;
    }
    assert_eq!(status, 200, "{body} → {text}");
    if stream {
        assert_eq!(ctype.as_deref(), Some("text/event-stream"));
        let evs = sse_events(&text);
        let last = evs.last().expect("at least one chunk");
        check_item(last, body);
    } else {
        let v: Value = serde_json::from_str(&text).expect("json");
        match &v {
            Value::Array(items) => {
                assert_eq!(
                    items.len(),
                    body["input_ids"].as_array().map_or(0, Vec::len)
                );
                for it in items {
                    check_item(it, body);
                }
            }
            item => check_item(item, body),
        }
    }
}

#[tokio::test]
async fn every_sglang_fixture_request_gets_the_native_answer() {
    // The fixtures come from engines launched with LoRA adapters and data-parallel ranks
    // (`lora_path: "miles_lora"`, `routed_dp_rank: 1`): a mock with the same flags serves them.
    let mut cfg = zero_delay();
    cfg.info.features.lora = Some(true);
    cfg.info.features.dp_size = Some(8);
    let s = start_with(&[], cfg, 2).await;
    let mut n = 0;
    for rec in jsonl("sglang/examples.jsonl") {
        if rec["kind"] == "request" {
            check_record(&s, &json!({}), &rec["json"]).await;
            n += 1;
        }
    }
    for rec in jsonl("clients/rl_requests.jsonl") {
        if rec["endpoint"] == "/generate" {
            check_record(&s, &rec["headers"], &rec["body"]).await;
            n += 1;
        }
    }
    assert!(n >= 15, "read {n} records");
    assert!(s.wait_idle(std::time::Duration::from_secs(5)).await);
}

#[tokio::test]
async fn prefill_only_scoring_returns_prompt_logprobs() {
    let s = start().await;
    let prompt: Vec<u32> = (5..25).collect();
    let (status, v) = s
        .post_json(
            "/generate",
            &json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                    "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 3,
                    "token_ids_logprob": [5, 9]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let m = &v["meta_info"];
    assert_eq!(v["output_ids"], json!([]));
    assert_eq!(m["finish_reason"], json!({"type": "length", "length": 0}));
    let input = m["input_token_logprobs"]
        .as_array()
        .expect("input_token_logprobs");
    assert_eq!(input.len(), 20);
    assert_eq!(input[0], json!([null, 5, null]));
    assert_eq!(m["input_top_logprobs"].as_array().map(Vec::len), Some(20));
    assert_eq!(
        m["input_token_ids_logprobs"].as_array().map(Vec::len),
        Some(20)
    );
}

fn strip_volatile(v: &mut Value) {
    if let Some(m) = v.get_mut("meta_info").and_then(Value::as_object_mut) {
        m.remove("e2e_latency");
        m.remove("response_sent_to_client_ts");
        m.remove("cached_tokens");
        m.remove("id");
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("index");
    }
}

#[tokio::test]
async fn cumulative_and_incremental_streams_fold_to_the_unary_body() {
    for incremental in [false, true] {
        let argv: &[&str] = if incremental {
            &["--sglang-incremental-streaming"]
        } else {
            &[]
        };
        let s = start_with(argv, zero_delay(), 1).await;
        for seed in 0..6u64 {
            let body = json!({"input_ids": [11, 12, 13, 14 + seed], "return_logprob": true,
                "logprob_start_len": (seed % 3) as i64 - 1, "top_logprobs_num": seed % 3,
                "sampling_params": {"max_new_tokens": 3 + seed, "temperature": 0.7, "sampling_seed": seed}});
            let (st, mut unary) = s.post_json("/generate", &body).await;
            assert_eq!(st, 200, "{unary}");
            let mut sbody = body.clone();
            sbody["stream"] = json!(true);
            let text = s
                .post("/generate", &sbody)
                .await
                .text()
                .await
                .expect("body");
            let evs = sse_events(&text);
            let mut folded = if incremental {
                let mut acc = evs[0].clone();
                for ev in &evs[1..] {
                    let ids = ev["output_ids"].as_array().cloned().unwrap_or_default();
                    acc["output_ids"].as_array_mut().expect("ids").extend(ids);
                    for key in ["output_token_logprobs", "output_top_logprobs"] {
                        if let Some(more) = ev["meta_info"][key].as_array().cloned() {
                            acc["meta_info"][key]
                                .as_array_mut()
                                .expect(key)
                                .extend(more);
                        }
                    }
                    for (k, val) in ev["meta_info"].as_object().expect("meta") {
                        if k != "output_token_logprobs" && k != "output_top_logprobs" {
                            acc["meta_info"][k] = val.clone();
                        }
                    }
                }
                acc
            } else {
                evs.last().cloned().expect("chunks")
            };
            strip_volatile(&mut unary);
            strip_volatile(&mut folded);
            assert_eq!(folded, unary, "incremental={incremental} seed={seed}");
        }
    }
}

#[tokio::test]
async fn batch_answers_an_array_in_input_order_and_streams_carry_index() {
    let s = start().await;
    let body = json!({"input_ids": [[1, 2, 3], [4, 5, 6, 7]], "rid": ["a", "b"],
                      "sampling_params": {"max_new_tokens": 2}});
    let (st, v) = s.post_json("/generate", &body).await;
    assert_eq!(st, 200, "{v}");
    let items = v.as_array().expect("array");
    assert_eq!(items[0]["meta_info"]["id"], "a");
    assert_eq!(items[1]["meta_info"]["id"], "b");
    assert_eq!(items[0]["meta_info"]["prompt_tokens"], 3);
    assert_eq!(items[1]["meta_info"]["prompt_tokens"], 4);
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let text = s.post("/generate", &sb).await.text().await.expect("body");
    let evs = sse_events(&text);
    let mut seen = [false, false];
    for ev in &evs {
        let i = ev["index"].as_u64().expect("index") as usize;
        seen[i] = true;
    }
    assert_eq!(seen, [true, true]);
}

#[tokio::test]
async fn parallel_sampling_gives_n_results_with_their_own_ids() {
    let s = start().await;
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"input_ids": [1, 2, 3], "rid": "x", "sampling_params": {"n": 3, "max_new_tokens": 2}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let items = v.as_array().expect("array of n results");
    assert_eq!(items.len(), 3);
    let ids: std::collections::HashSet<_> = items
        .iter()
        .map(|i| i["meta_info"]["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(!ids.contains("x"));
    // The copies are separate engine requests; like a real engine's, their samples differ.
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"input_ids": [201, 6, 7, 8, 9],
                "sampling_params": {"n": 3, "max_new_tokens": 4, "temperature": 1.0}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let outs: std::collections::HashSet<String> = v
        .as_array()
        .expect("array of n results")
        .iter()
        .map(|i| i["output_ids"].to_string())
        .collect();
    assert_eq!(outs.len(), 3, "three different samples: {v}");
}

#[tokio::test]
async fn validation_errors_use_sglang_envelopes() {
    let s = start().await;
    let (st, v) = s.post_json("/generate", &json!({"input_ids": []})).await;
    assert_eq!(
        (st, v),
        (
            400,
            json!({"error": {"message": "input_ids cannot be empty."}})
        )
    );
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"input_ids": [1], "sampling_params": {"top_p": 0}}),
        )
        .await;
    assert_eq!(st, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("top_p must be in (0, 1], got 0")),
        "{v}"
    );
    let r = s
        .client
        .post(s.url("/generate"))
        .body("{not json")
        .header("content-type", "application/json")
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["object"], "error");
    assert_eq!(v["type"], "Bad Request");
    assert_eq!(v["code"], 400);
    // A streaming request's validation error arrives inside a 200 SSE stream, as SGLang sends it.
    let r = s
        .post("/generate", &json!({"input_ids": [], "stream": true}))
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let evs = sse_events(&r.text().await.expect("body"));
    assert_eq!(evs[0]["error"]["message"], "input_ids cannot be empty.");
    assert_eq!(evs[0]["error"]["code"], 400);
}

#[tokio::test]
async fn put_generate_is_served_too() {
    let s = start().await;
    let r = s
        .client
        .put(s.url("/generate"))
        .json(&json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 200);
}
