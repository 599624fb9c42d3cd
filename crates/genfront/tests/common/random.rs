//! Randomized native requests of both formats and the helpers that compare answers.

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

pub fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

pub fn sglang_request(rng: &mut StdRng, i: usize) -> Value {
    let len = rng.random_range(1..=48usize);
    let ids: Vec<u32> = (0..len).map(|_| rng.random_range(3..150_000)).collect();
    let mut sp = json!({
        "max_new_tokens": pick(rng, &[0u32, 1, 2, 5, 9, 16]),
        "temperature": pick(rng, &[0.0, 0.5, 1.0]),
        "top_p": pick(rng, &[1.0, 0.9]),
        "top_k": pick(rng, &[-1i64, 5, 40]),
        "sampling_seed": rng.random_range(0..1_000_000u64),
        "ignore_eos": rng.random_bool(0.5),
    });
    if rng.random_bool(0.2) {
        sp["stop_token_ids"] = json!([ids[0], 7]);
    }
    if rng.random_bool(0.15) {
        sp["n"] = json!(2);
    }
    let mut body = json!({"rid": format!("fid-{i}"), "input_ids": ids, "sampling_params": sp,
                          "stream": rng.random_bool(0.5)});
    if rng.random_bool(0.6) {
        body["return_logprob"] = json!(true);
        body["logprob_start_len"] = json!(pick(rng, &[-1i64, 0, (len as i64 - 1).max(0)]));
        body["top_logprobs_num"] = json!(pick(rng, &[0u32, 1, 3]));
        if rng.random_bool(0.3) {
            body["token_ids_logprob"] = json!([1, 2, 3]);
        }
    }
    if rng.random_bool(0.2) {
        body["return_routed_experts"] = json!(true);
    }
    if rng.random_bool(0.1) {
        body["custom_unknown_key"] = json!({"kept": [1, 2, 3]});
    }
    body
}

pub fn vllm_request(rng: &mut StdRng, i: usize) -> Value {
    let len = rng.random_range(1..=48usize);
    let ids: Vec<u32> = (0..len).map(|_| rng.random_range(3..150_000)).collect();
    let temperature = pick(rng, &[0.0, 0.7, 1.0]);
    let stream = rng.random_bool(0.5);
    let mut sp = json!({
        "max_tokens": pick(rng, &[1u32, 2, 5, 9, 16]),
        "temperature": temperature,
        "top_p": pick(rng, &[1.0, 0.9]),
        "top_k": pick(rng, &[0i64, 5, 40]),
        "seed": rng.random_range(0..1_000_000u64),
        "ignore_eos": rng.random_bool(0.5),
    });
    if temperature > 0.0 && rng.random_bool(0.2) {
        sp["n"] = json!(2);
    }
    if rng.random_bool(0.6) {
        sp["logprobs"] = json!(pick(rng, &[0u32, 1, 5]));
    }
    if !stream && rng.random_bool(0.3) {
        sp["prompt_logprobs"] = json!(pick(rng, &[0u32, 2]));
    }
    if rng.random_bool(0.2) {
        sp["stop_token_ids"] = json!([7, 9]);
    }
    let mut body = json!({"request_id": format!("fid-{i}"), "token_ids": ids, "sampling_params": sp,
                          "stream": stream});
    if stream && rng.random_bool(0.5) {
        body["stream_options"] =
            json!({"include_usage": true, "continuous_usage_stats": rng.random_bool(0.5)});
    }
    if rng.random_bool(0.1) {
        body["future_top_level"] = json!("kept");
    }
    body
}

/// Remove the fields that legitimately differ between two runs: timings, and for SGLang `n > 1`
/// the regenerated ids and the cache hits of concurrently started samples.
pub fn normalize(v: &mut Value, regenerated_ids: bool) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(|x| normalize(x, regenerated_ids)),
        Value::Object(o) => {
            o.remove("created");
            if let Some(Value::Object(m)) = o.get_mut("meta_info") {
                m.remove("e2e_latency");
                m.remove("response_sent_to_client_ts");
                if regenerated_ids {
                    // Parallel samples are separate engine requests that start concurrently, so
                    // which of them finds the others' prefix already cached is a race — in
                    // SGLang too.
                    m.remove("id");
                    m.remove("cached_tokens");
                }
            }
        }
        _ => {}
    }
}

/// The sub-request an SSE event belongs to (SGLang `index`, vLLM `choices[0].index`).
pub fn stream_index(v: &Value) -> u64 {
    v["index"]
        .as_u64()
        .or_else(|| v["choices"][0]["index"].as_u64())
        .unwrap_or(0)
}

pub async fn fetch(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Vec<Value>) {
    let r = client.post(url).json(body).send().await.expect("sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    let stream = body["stream"] == json!(true) && status == 200;
    let values = if stream {
        super::sse_events(&text)
    } else {
        vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))]
    };
    (status, values)
}

/// Sometimes ask an SGLang request with logprobs for the decoded token text in each triple
/// (`return_text_in_logprobs`; SGLang fills it only with a tokenizer, `null` otherwise).
pub fn sglang_text_in_logprobs(rng: &mut StdRng, body: &mut Value) {
    if body.get("return_logprob").is_some() && rng.random_bool(0.5) {
        body["return_text_in_logprobs"] = json!(true);
    }
}

/// Sometimes ask a vLLM request for `output_mode: "text"` (a per-choice `text`, decoded
/// logprobs), more often when it has logprobs, unary or SSE as drawn. An engine without a
/// tokenizer refuses it with vLLM's message.
pub fn vllm_text_mode(rng: &mut StdRng, body: &mut Value) {
    let p = if body["sampling_params"].get("logprobs").is_some() {
        0.5
    } else {
        0.25
    };
    if rng.random_bool(p) {
        body["output_mode"] = json!("text");
    }
}

/// vLLM text-mode logprobs as vLLM writes them for entries it has no decoded token for
/// (`_create_text_logprobs` without a tokenizer: `"token_id:N"`, `bytes: null`, no rank, the
/// per-position list — sampled token first — cut to `max(k, 1)`), built from tokens-shape
/// entries (`{"token_id", "logprob", "rank", "top_logprobs"}`). Entries already in the text
/// shape are left alone.
pub fn tokens_logprobs_as_text(logprobs: &mut Value, k: i64) {
    let Some(content) = logprobs.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    let alt = |c: &Value| {
        json!({"token": format!("token_id:{}", c["token_id"]), "logprob": c["logprob"],
               "bytes": null})
    };
    for e in content.iter_mut() {
        if e.get("token_id").is_none() {
            continue;
        }
        let width = if k < 0 { usize::MAX } else { k.max(1) as usize };
        let top: Vec<Value> = e["top_logprobs"]
            .as_array()
            .map(|t| t.iter().take(width).map(alt).collect())
            .unwrap_or_default();
        let mut entry = alt(e);
        entry["top_logprobs"] = Value::Array(top);
        *e = entry;
    }
}
