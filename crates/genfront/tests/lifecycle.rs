//! The shared request lifecycle, for every format: disconnects, abort endpoints, ids, metrics,
//! error privacy, limits, graceful shutdown, the request trace.

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, sse_events, start, start_with, zero_delay};
use futures::StreamExt;
use genfront_mocker::MockConfig;
use serde_json::{Value, json};

fn slow() -> MockConfig {
    MockConfig {
        ttft_base: Duration::from_millis(5),
        inter_token_latency: Duration::from_millis(5),
        ..MockConfig::default()
    }
}

fn long_sglang(rid: &str, stream: bool) -> Value {
    json!({"rid": rid, "input_ids": [1, 2, 3], "stream": stream,
           "sampling_params": {"max_new_tokens": 2000, "ignore_eos": true}})
}

/// Read `n` body chunks (0 = none), then drop the response: the client disconnects.
async fn read_then_drop(resp: reqwest::Response, n: usize) {
    let mut stream = resp.bytes_stream();
    for _ in 0..n {
        if !matches!(stream.next().await, Some(Ok(_))) {
            break;
        }
    }
}

async fn wait_for<F: Fn() -> bool>(f: F, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    f()
}

#[tokio::test]
async fn streaming_clients_that_disconnect_abort_their_engine_requests() {
    let s = start_with(&[], slow(), 2).await;
    let n = 12;
    let mut tasks = Vec::new();
    for i in 0..n {
        let client = s.client.clone();
        let url = s.url(if i % 2 == 0 {
            "/generate"
        } else {
            "/inference/v1/generate"
        });
        let body = if i % 2 == 0 {
            long_sglang(&format!("d{i}"), true)
        } else {
            json!({"token_ids": [1, 2, 3], "stream": true, "sampling_params": {"max_tokens": 2000, "ignore_eos": true}})
        };
        tasks.push(tokio::spawn(async move {
            let resp = client.post(url).json(&body).send().await.expect("sent");
            assert_eq!(resp.status().as_u16(), 200);
            // Disconnect after a varying number of chunks (0 = right after the headers).
            read_then_drop(resp, i % 4).await;
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let t0 = Instant::now();
    assert!(
        wait_for(|| s.running() == 0, Duration::from_secs(2)).await,
        "engines still running"
    );
    let took = t0.elapsed();
    assert_eq!(s.aborted(), n as u64, "every engine request aborted");
    eprintln!("all {n} engine requests stopped {took:?} after the last disconnect");
    assert!(s.state.in_flight.is_empty());
}

#[tokio::test]
async fn unary_clients_that_disconnect_abort_their_engine_requests() {
    let s = start_with(&[], slow(), 2).await;
    let n = 8;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(60))
        .build()
        .expect("client");
    let mut tasks = Vec::new();
    for i in 0..n {
        let client = client.clone();
        let url = s.url("/generate");
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&long_sglang(&format!("u{i}"), false))
                .send()
                .await;
            assert!(r.is_err(), "the client gives up first");
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert!(wait_for(|| s.running() == 0, Duration::from_secs(2)).await);
    assert_eq!(s.aborted(), n as u64);
    let m = s.get_text("/metrics").await;
    assert!(
        m.contains("genfront_client_disconnects_total{format=\"sglang\"} 8"),
        "{m}"
    );
}

async fn open_stream(
    s: &TestServer,
    path: &str,
    body: Value,
) -> tokio::task::JoinHandle<Vec<Value>> {
    let resp = s.post(path, &body).await;
    assert_eq!(resp.status().as_u16(), 200);
    tokio::spawn(async move { sse_events(&resp.text().await.expect("body")) })
}

#[tokio::test]
async fn sglang_abort_request_follows_the_prefix_rule() {
    let s = start_with(&[], slow(), 2).await;
    let abc = open_stream(&s, "/generate", long_sglang("abc", true)).await;
    let abc1 = open_stream(&s, "/generate", long_sglang("abc_1", true)).await;
    let xabc = open_stream(&s, "/generate", long_sglang("xabc", true)).await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    // SGLang drops an abort whose rid is not itself in flight: "ab" aborts nothing.
    let r = s.post("/abort_request", &json!({"rid": "ab"})).await;
    assert_eq!(r.status().as_u16(), 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!abc.is_finished() && !abc1.is_finished() && !xabc.is_finished());
    let r = s.post("/abort_request", &json!({"rid": "abc"})).await;
    assert_eq!(r.status().as_u16(), 200);
    for h in [abc, abc1] {
        let evs = tokio::time::timeout(Duration::from_secs(2), h)
            .await
            .expect("aborted in time")
            .expect("task");
        let last = evs.last().expect("chunks");
        assert_eq!(
            last["meta_info"]["finish_reason"]["type"], "abort",
            "{last}"
        );
        assert!(
            !last["output_ids"].as_array().expect("ids").is_empty(),
            "partial tokens kept"
        );
    }
    assert!(!xabc.is_finished());
    let r = s
        .post("/abort_request", &json!({"rid": "", "abort_all": true}))
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let evs = tokio::time::timeout(Duration::from_secs(2), xabc)
        .await
        .expect("aborted")
        .expect("task");
    assert_eq!(
        evs.last().expect("chunks")["meta_info"]["finish_reason"]["type"],
        "abort"
    );
}

#[tokio::test]
async fn unary_abort_answers_200_with_the_partial_tokens() {
    let s = start_with(&[], slow(), 1).await;
    let client = s.client.clone();
    let url = s.url("/generate");
    let h = tokio::spawn(async move {
        let r = client
            .post(url)
            .json(&long_sglang("rollout-7", false))
            .send()
            .await
            .expect("sent");
        (r.status().as_u16(), r.json::<Value>().await.expect("json"))
    });
    tokio::time::sleep(Duration::from_millis(40)).await;
    s.post("/abort_request", &json!({"rid": "rollout-7"})).await;
    let (st, v) = tokio::time::timeout(Duration::from_secs(2), h)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "abort");
    assert_eq!(v["meta_info"]["id"], "rollout-7");
    assert!(!v["output_ids"].as_array().expect("ids").is_empty());
}

/// SGLang refuses a request whose rid is in flight (`TokenizerManager._init_req_state`, 0.5.23:
/// `ValueError("Duplicate request ID detected: {rid}")`, a 400 `{"error":{"message"}}` for a
/// unary request, a 200 SSE error event then `[DONE]` for a stream); the first keeps running
/// and the abort by that rid reaches it. Once it ended, the rid is free again.
#[tokio::test]
async fn a_second_client_with_an_in_flight_rid_is_refused_as_sglang_does() {
    let s = start_with(&[], slow(), 2).await;
    let a = open_stream(&s, "/generate", long_sglang("same", true)).await;
    let other = open_stream(&s, "/generate", long_sglang("different", true)).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (st, v) = s.post_json("/generate", &long_sglang("same", false)).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(
        v,
        json!({"error": {"message": "Duplicate request ID detected: same"}})
    );
    let r = s.post("/generate", &long_sglang("same", true)).await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.text().await.expect("body"),
        "data: {\"error\":{\"message\":\"Duplicate request ID detected: same\",\"type\":\"invalid_request_error\",\"code\":400,\"retryable\":false}}\n\ndata: [DONE]\n\n"
    );
    // vLLM serves two requests with one id (its internal ids are made unique).
    let body = json!({"token_ids": [1, 2, 3], "stream": true,
                      "sampling_params": {"max_tokens": 2000, "ignore_eos": true}});
    let mut vllm = Vec::new();
    for _ in 0..2 {
        let resp = s
            .client
            .post(s.url("/inference/v1/generate"))
            .header("x-request-id", "same")
            .json(&body)
            .send()
            .await
            .expect("sent");
        assert_eq!(resp.status().as_u16(), 200);
        vllm.push(resp);
    }
    drop(vllm);
    s.post("/abort_request", &json!({"rid": "same"})).await;
    let evs = tokio::time::timeout(Duration::from_secs(2), a)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(evs.last().expect("chunk")["meta_info"]["id"], "same");
    assert_eq!(
        evs.last().expect("chunk")["meta_info"]["finish_reason"]["type"],
        "abort"
    );
    assert!(!other.is_finished());
    // The first one ended: the rid can be used again.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"rid": "same", "input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["meta_info"]["id"], "same");
    s.post("/abort_request", &json!({"abort_all": true})).await;
}

#[tokio::test]
async fn vllm_abort_requests_by_prefixed_id() {
    let s = start_with(&[], slow(), 1).await;
    let resp = s
        .client
        .post(s.url("/inference/v1/generate"))
        .header("x-request-id", "r1")
        .json(&json!({"token_ids": [1, 2, 3], "stream": true, "sampling_params": {"max_tokens": 2000, "ignore_eos": true}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.headers()["x-request-id"], "generate-tokens-r1");
    let h = tokio::spawn(async move { sse_events(&resp.text().await.expect("body")) });
    tokio::time::sleep(Duration::from_millis(30)).await;
    let r = s
        .post(
            "/inference/v1/abort_requests",
            &json!({"request_ids": ["r1"]}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        !h.is_finished(),
        "ids must carry the generate-tokens- prefix"
    );
    s.post(
        "/inference/v1/abort_requests",
        &json!({"request_ids": ["generate-tokens-r1"]}),
    )
    .await;
    let evs = tokio::time::timeout(Duration::from_secs(2), h)
        .await
        .expect("in time")
        .expect("task");
    let last = evs
        .iter()
        .rev()
        .find(|e| !e["choices"].as_array().is_some_and(Vec::is_empty))
        .expect("choice chunk");
    assert_eq!(last["choices"][0]["finish_reason"], "abort");
    let (st, v) = s
        .post_json("/inference/v1/abort_requests", &json!({}))
        .await;
    assert_eq!(st, 400);
    assert_eq!(
        v["error"]["message"],
        "Missing 'request_ids' in request body"
    );
}

#[tokio::test]
async fn request_ids_are_echoed_and_never_reused_internally() {
    let dir = std::env::temp_dir().join(format!("genfront-trace-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("ids.jsonl");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("utf8").to_owned();
    let s = start_with(&["--trace-file", &p], zero_delay(), 1).await;
    let r = s.post("/generate", &json!({"rid": "client-rid", "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}})).await;
    assert_eq!(r.headers()["x-request-id"], "client-rid");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["meta_info"]["id"], "client-rid");
    let r = s
        .client
        .post(s.url("/inference/v1/generate"))
        .header("x-request-id", "hdr")
        .json(&json!({"request_id": "body", "token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.headers()["x-request-id"], "generate-tokens-hdr");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["request_id"], "generate-tokens-hdr");
    assert!(
        wait_for(
            || std::fs::read_to_string(&path)
                .map(|t| t.lines().count() >= 2)
                .unwrap_or(false),
            Duration::from_secs(2)
        )
        .await
    );
    for line in std::fs::read_to_string(&path).expect("trace").lines() {
        let rec: Value = serde_json::from_str(line).expect("trace line is JSON");
        for er in rec["engine_requests"].as_array().expect("engine requests") {
            let internal = er["internal_id"].as_str().expect("internal id");
            assert_eq!(internal.len(), 32);
            assert_ne!(Some(internal), rec["client_id"].as_str());
            assert_ne!(internal, er["native_id"].as_str().expect("native id"));
        }
    }
}

#[tokio::test]
async fn trace_lines_match_responses_and_ttft_never_exceeds_duration() {
    let dir = std::env::temp_dir().join(format!("genfront-trace2-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("t.jsonl");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("utf8").to_owned();
    let s = start_with(&["--trace-file", &p], zero_delay(), 2).await;
    let mut outputs = Vec::new();
    for i in 0..5u32 {
        let (st, v) = s
            .post_json("/generate", &json!({"rid": format!("t{i}"), "input_ids": [i + 1, 7, 9], "sampling_params": {"max_new_tokens": 3 + i}}))
            .await;
        assert_eq!(st, 200);
        outputs.push((format!("t{i}"), v["output_ids"].clone()));
    }
    assert!(
        wait_for(
            || std::fs::read_to_string(&path)
                .map(|t| t.lines().count() >= 5)
                .unwrap_or(false),
            Duration::from_secs(2)
        )
        .await
    );
    let text = std::fs::read_to_string(&path).expect("trace");
    for (rid, ids) in outputs {
        let rec: Value = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("json"))
            .find(|r| r["client_id"] == rid.as_str())
            .expect("record for rid");
        assert_eq!(rec["format"], "sglang");
        assert_eq!(rec["status"], 200);
        assert_eq!(rec["engine_requests"][0]["output_token_ids"][0], ids);
        assert_eq!(rec["engine_requests"][0]["prompt_len"], 3);
        assert_eq!(
            rec["engine_requests"][0]["prompt_hash"]
                .as_str()
                .map(str::len),
            Some(16)
        );
        let ttft = rec["ttft_ms"].as_f64().expect("ttft");
        assert!(ttft <= rec["duration_ms"].as_f64().expect("duration"));
    }
}

fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (key, val) = l.rsplit_once(' ')?;
            let (n, rest) = key.split_once('{').unwrap_or((key, ""));
            if n != name
                || !labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
            {
                return None;
            }
            val.parse().ok()
        })
}

#[tokio::test]
async fn metrics_expose_every_family_with_sensible_values() {
    let s = start().await;
    for i in 0..3 {
        let (st, _) = s.post_json("/generate", &json!({"input_ids": [1, 2, 3, i], "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}})).await;
        assert_eq!(st, 200);
    }
    let text = s.post("/generate", &json!({"input_ids": [1, 2], "stream": true, "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}})).await.text().await.expect("body");
    sse_events(&text);
    let (st, _) = s.post_json("/generate", &json!({"input_ids": []})).await;
    assert_eq!(st, 400);
    let r = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(r.status().as_u16(), 200);
    let m = r.text().await.expect("text");
    let ok = sample(
        &m,
        "genfront_requests_total",
        &[("route", "/generate"), ("status", "200")],
    )
    .expect("requests_total 200");
    assert_eq!(ok, 4.0, "{m}");
    let bad = sample(
        &m,
        "genfront_requests_total",
        &[("status", "400"), ("error_type", "validation")],
    )
    .expect("400");
    assert_eq!(bad, 1.0);
    assert_eq!(
        sample(&m, "genfront_output_tokens_total", &[("format", "sglang")]),
        Some(16.0)
    );
    assert_eq!(
        sample(&m, "genfront_input_tokens_total", &[("format", "sglang")]),
        Some(14.0)
    );
    assert_eq!(
        sample(
            &m,
            "genfront_time_to_first_token_seconds_count",
            &[("format", "sglang")]
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &m,
            "genfront_request_duration_seconds_count",
            &[("format", "sglang")]
        ),
        Some(5.0)
    );
    assert!(
        sample(
            &m,
            "genfront_inter_token_latency_seconds_count",
            &[("format", "sglang")]
        )
        .is_some_and(|c| c == 12.0)
    );
    assert_eq!(
        sample(&m, "genfront_requests_in_flight", &[("format", "sglang")]),
        Some(0.0)
    );
    for family in [
        "genfront_cached_tokens_total",
        "genfront_client_disconnects_total",
        "genfront_trace_records_dropped_total",
    ] {
        assert!(
            m.contains(family) || family != "genfront_trace_records_dropped_total",
            "{family} missing: {m}"
        );
    }
    let ttft_sum = sample(
        &m,
        "genfront_time_to_first_token_seconds_sum",
        &[("format", "sglang")],
    )
    .expect("sum");
    let dur_sum = sample(
        &m,
        "genfront_request_duration_seconds_sum",
        &[("format", "sglang")],
    )
    .expect("sum");
    assert!(ttft_sum <= dur_sum);
}

#[tokio::test]
async fn oversize_bodies_get_413_in_the_native_envelope() {
    let s = start_with(&["--body-limit", "1KiB"], zero_delay(), 1).await;
    let big: Vec<u32> = (0..2000).collect();
    let (st, v) = s.post_json("/generate", &json!({"input_ids": big})).await;
    assert_eq!(st, 413);
    // SGLang's HTTPException envelope.
    assert_eq!(v["object"], "error");
    assert_eq!(v["code"], 413);
    let msg = v["message"].as_str().expect("sglang envelope");
    assert!(
        msg.contains("1024") && msg.contains("--body-limit"),
        "{msg}"
    );
    let (st, v) = s
        .post_json(
            "/inference/v1/generate",
            &json!({"token_ids": big, "sampling_params": {}}),
        )
        .await;
    assert_eq!(st, 413);
    assert_eq!(v["error"]["code"], 413);
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--body-limit"))
    );
}

#[tokio::test]
async fn concurrency_limit_answers_503_with_retry_after() {
    let s = start_with(&["--max-concurrent-requests", "1"], slow(), 1).await;
    let h = open_stream(&s, "/generate", long_sglang("hold", true)).await;
    let r = s
        .post(
            "/generate",
            &json!({"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().contains_key("retry-after"));
    s.post("/abort_request", &json!({"abort_all": true})).await;
    let _ = h.await;
    let r = s
        .post(
            "/generate",
            &json!({"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "the permit is released with the body"
    );
}

#[tokio::test]
async fn shutdown_drains_in_flight_requests() {
    let s = start_with(&["--shutdown-grace", "10s"], slow(), 1).await;
    let body = json!({"input_ids": [1, 2, 3], "stream": true, "sampling_params": {"max_new_tokens": 20, "ignore_eos": true}});
    let h = open_stream(&s, "/generate", body).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.shutdown.cancel();
    let evs = tokio::time::timeout(Duration::from_secs(5), h)
        .await
        .expect("drained")
        .expect("task");
    let last = evs.last().expect("chunks");
    assert_eq!(
        last["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 20})
    );
    tokio::time::timeout(Duration::from_secs(5), s.handle)
        .await
        .expect("stopped")
        .expect("join")
        .expect("clean exit");
}

#[tokio::test]
async fn shutdown_grace_expiry_aborts_the_rest() {
    let s = start_with(&["--shutdown-grace", "50ms"], slow(), 1).await;
    let h = open_stream(&s, "/generate", long_sglang("long", true)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.shutdown.cancel();
    let evs = tokio::time::timeout(Duration::from_secs(5), h)
        .await
        .expect("ended")
        .expect("task");
    assert_eq!(
        evs.last().expect("chunks")["meta_info"]["finish_reason"]["type"],
        "abort"
    );
    tokio::time::timeout(Duration::from_secs(5), s.handle)
        .await
        .expect("stopped")
        .expect("join")
        .expect("clean exit");
    assert_eq!(s.engines[0].running(), 0);
}

#[tokio::test]
async fn health_ready_and_model_info() {
    let s = start().await;
    for p in ["/health", "/ready", "/health_generate"] {
        let r = s.client.get(s.url(p)).send().await.expect("sent");
        assert_eq!(r.status().as_u16(), 200, "{p}");
    }
    let v: Value = s.get_json("/get_model_info").await;
    assert_eq!(v["model_path"], "genfront-mock");
    assert_eq!(v["is_generation"], true);
    let v: Value = s.get_json("/v1/models").await;
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "genfront-mock");
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json_and_expansion_is_bounded() {
    let s = start().await;
    let r = s.client.get(s.url("/nope")).send().await.expect("sent");
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"detail": "Not Found"})
    );
    let r = s
        .client
        .delete(s.url("/generate"))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"detail": "Method Not Allowed"})
    );
    // 100 prompts × n=256 is 25,600 engine requests from one small body: refused natively.
    let batch: Vec<Vec<u32>> = (0..100).map(|_| vec![1, 2]).collect();
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"input_ids": batch, "sampling_params": {"n": 256, "max_new_tokens": 1}}),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-engine-requests")),
        "{v}"
    );
    assert_eq!(s.running(), 0);
}

#[tokio::test]
async fn sglang_header_request_id_becomes_the_rid_and_huge_ids_are_not_echoed() {
    let s = start().await;
    let r = s
        .client
        .post(s.url("/generate"))
        .header("x-request-id", "hdr-rid")
        .json(&json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.headers()["x-request-id"], "hdr-rid");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["meta_info"]["id"], "hdr-rid");
    let long = "a".repeat(100_000);
    let r = s
        .post(
            "/generate",
            &json!({"rid": long, "input_ids": [1], "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("x-request-id").is_none());
}

#[tokio::test]
async fn a_slow_client_backpressures_the_engine_instead_of_buffering() {
    let mut cfg = zero_delay();
    cfg.info.max_context_len = 4_000_000;
    // vLLM returns routed experts with every answer when the engine has them on: 3M tokens of
    // them would be over --max-routed-expert-entries (a 400), and this test is about tokens.
    cfg.info.routed_experts = false;
    let s = start_with(&[], cfg, 1).await;
    let resp = s
        .post(
            "/inference/v1/generate",
            &json!({"token_ids": [1, 2, 3], "stream": true,
                    "sampling_params": {"max_tokens": 3_000_000, "ignore_eos": true}}),
        )
        .await;
    assert_eq!(resp.status().as_u16(), 200);
    // Read nothing for a while: a zero-delay engine could produce millions of tokens meanwhile.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let m = s.get_text("/metrics").await;
    let produced = sample(&m, "genfront_output_tokens_total", &[("format", "vllm")]).unwrap_or(0.0);
    eprintln!("tokens pulled from the engine while the client read nothing: {produced}");
    // Only what fits in the socket buffers was pulled from the engine.
    assert!(
        produced < 200_000.0,
        "{produced} tokens pulled from the engine for a client that reads nothing"
    );
    assert_eq!(
        s.running(),
        1,
        "the engine request is still open, waiting on the client"
    );
    drop(resp);
    assert!(wait_for(|| s.running() == 0, Duration::from_secs(2)).await);
    assert_eq!(s.aborted(), 1);
}
