//! `--api sglang`: every route answers natively; streaming modes; server info; rid echo; abort.

mod common;

use std::time::Duration;

use common::{
    WAIT, assert_idle, client, get_json, post, post_json, post_text, sglang_body, sse_events, start,
};
use genfront_mockserver::{Api, MockServerArgs, spawn};
use serde_json::{Value, json};

#[tokio::test]
async fn unary_generate_is_sglang_shaped_and_echoes_the_rid() {
    let s = start(Api::Sglang, &[]).await;
    let (status, v) = post_json(&s, "/generate", &sglang_body("my-rid", false, 4)).await;
    assert_eq!(status, 200, "{v}");
    assert!(v.get("text").is_none(), "no tokenizer → no text: {v}");
    assert_eq!(v["output_ids"].as_array().map(Vec::len), Some(4));
    let meta = &v["meta_info"];
    assert_eq!(meta["id"], "my-rid");
    assert_eq!(
        meta["finish_reason"],
        json!({"type": "length", "length": 4})
    );
    assert_eq!(meta["prompt_tokens"], 3);
    assert_eq!(meta["completion_tokens"], 4);
    // PUT works too, and a batch is an array.
    let r = client()
        .put(s.url("/generate"))
        .json(&json!({"input_ids": [[1, 2], [3, 4]], "sampling_params": {"max_new_tokens": 2}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 200);
    let batch: Value = r.json().await.expect("json");
    assert_eq!(batch.as_array().map(Vec::len), Some(2));
    assert_eq!(s.engine.completed(), 3);
    assert_eq!(s.generate_requests(), 2);
    // The vLLM route is not served.
    let (status, _, _) = post_text(&s, "/inference/v1/generate", &json!({"token_ids": [1]})).await;
    assert_eq!(status, 404);
    assert_idle(&s).await;
}

#[tokio::test]
async fn validation_errors_use_sglang_envelopes() {
    let s = start(Api::Sglang, &[]).await;
    let (status, v) = post_json(&s, "/generate", &json!({"text": "hi"})).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].is_string(), "{v}");
    let (status, v) = post_json(&s, "/generate", &json!({"input_ids": "x"})).await;
    assert_eq!(status, 400);
    assert_eq!(v["object"], "error");
    assert_eq!(v["type"], "Bad Request");
    let (status, ctype, body) =
        post_text(&s, "/generate", &json!({"text": "hi", "stream": true})).await;
    assert_eq!((status, ctype.as_str()), (200, "text/event-stream"));
    let evs = sse_events(&body);
    assert_eq!(evs[0]["error"]["code"], 400);
}

#[tokio::test]
async fn cumulative_stream_by_default() {
    let s = start(Api::Sglang, &[]).await;
    let (status, ctype, body) = post_text(&s, "/generate", &sglang_body("c", true, 3)).await;
    assert_eq!((status, ctype.as_str()), (200, "text/event-stream"));
    let evs = sse_events(&body);
    let lens: Vec<usize> = evs
        .iter()
        .map(|e| e["output_ids"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(lens, [1, 2, 3]);
    assert!(evs.iter().all(|e| e["meta_info"]["id"] == "c"));
    assert!(evs[1]["meta_info"]["finish_reason"].is_null());
    assert_eq!(evs[2]["meta_info"]["finish_reason"]["type"], "length");
    let (_, info) = get_json(&s, "/get_server_info").await;
    assert_eq!(info["incremental_streaming_output"], false);
}

#[tokio::test]
async fn incremental_stream_with_the_flag() {
    let mut a = common::args(Api::Sglang, &[]);
    a.incremental_streaming = true;
    let s = spawn(&a).await.expect("starts");
    let (_, _, body) = post_text(&s, "/generate", &sglang_body("i", true, 3)).await;
    let evs = sse_events(&body);
    let lens: Vec<usize> = evs
        .iter()
        .map(|e| e["output_ids"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(lens, [1, 1, 1]);
    let completion: Vec<u64> = evs
        .iter()
        .map(|e| e["meta_info"]["completion_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(completion, [1, 2, 3], "completion_tokens stays cumulative");
    for path in ["/get_server_info", "/server_info"] {
        let (status, info) = get_json(&s, path).await;
        assert_eq!(status, 200);
        assert_eq!(info["incremental_streaming_output"], true, "{path}");
    }
}

#[tokio::test]
async fn auxiliary_routes_answer_natively() {
    let mut a = MockServerArgs::new(Api::Sglang);
    a.zero_delay = true;
    a.model = "org/model".into();
    a.context_len = 4096;
    let s = spawn(&a).await.expect("starts");
    let r = client().get(s.url("/health")).send().await.expect("sent");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().await.expect("body"), "");
    let r = client()
        .get(s.url("/health_generate"))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 200);
    for path in ["/get_model_info", "/model_info"] {
        let (status, v) = get_json(&s, path).await;
        assert_eq!(status, 200);
        assert_eq!(v["model_path"], "org/model");
        assert_eq!(v["is_generation"], true);
        assert!(v.get("weight_version").is_some());
    }
    let (status, v) = get_json(&s, "/get_server_info").await;
    assert_eq!(status, 200);
    assert_eq!(v["model_path"], "org/model");
    assert_eq!(v["skip_tokenizer_init"], true);
    assert_eq!(v["context_length"], 4096);
    assert_eq!(v["disaggregation_mode"], "null");
    assert_eq!(v["port"], s.addr.port());
    assert!(v["max_running_requests"].as_u64().is_some());
    assert!(v["version"].is_string());
    assert_eq!(v["internal_states"][0]["num_running_reqs"], 0);
    assert!(v["max_total_num_tokens"].as_u64().is_some());
    // Not an SGLang route.
    let r = client()
        .get(s.url("/v1/models"))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 404);
}

async fn open_stream(
    s: &genfront_mockserver::SpawnedMockServer,
    rid: &str,
) -> tokio::task::JoinHandle<Vec<Value>> {
    let resp = post(s, "/generate", &sglang_body(rid, true, 100)).await;
    assert_eq!(resp.status().as_u16(), 200);
    tokio::spawn(async move { sse_events(&resp.text().await.expect("body")) })
}

#[tokio::test]
async fn abort_request_is_recorded_and_aborts_by_prefix() {
    // Every engine request stalls after 2 tokens until aborted.
    let s = start(Api::Sglang, &["stall@*:2"]).await;
    let abc = open_stream(&s, "abc").await;
    let abc1 = open_stream(&s, "abc_1").await;
    let xabc = open_stream(&s, "xabc").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.engine.running() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(s.engine.running(), 3);

    let r = post(&s, "/abort_request", &json!({"rid": "abc"})).await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().await.expect("body"), "");
    assert!(s.aborts().contains("abc"), "the abort call is recorded");
    for h in [abc, abc1] {
        let evs = tokio::time::timeout(WAIT, h)
            .await
            .expect("in time")
            .expect("task");
        let last = evs.last().expect("chunks");
        assert_eq!(
            last["meta_info"]["finish_reason"]["type"], "abort",
            "{last}"
        );
        assert_eq!(last["output_ids"].as_array().map(Vec::len), Some(2));
    }
    assert!(!xabc.is_finished(), "xabc does not start with abc");
    assert_eq!(s.engine.running(), 1);

    post(&s, "/abort_request", &json!({"rid": "", "abort_all": true})).await;
    let evs = tokio::time::timeout(WAIT, xabc)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(evs.last().expect("chunk")["meta_info"]["id"], "xabc");
    let records = s.aborts().records();
    assert_eq!(records.len(), 2);
    assert!(records[1].abort_all());
    assert_eq!(s.engine.aborted(), 3);
    assert_idle(&s).await;
}

#[tokio::test]
async fn engine_faults_pass_through_as_sglang_renders_them() {
    let s = start(
        Api::Sglang,
        &[
            "error@1:unavailable",
            "fail-after@2:2",
            "error@3:invalid_argument:too long",
        ],
    )
    .await;
    let (status, v) = post_json(&s, "/generate", &sglang_body("a", false, 4)).await;
    assert_eq!(status, 503);
    assert_eq!(
        v,
        json!({"object":"error","message":"Service temporarily unavailable","type":"503","param":null,"code":503})
    );
    let (status, _, body) = post_text(&s, "/generate", &sglang_body("b", true, 8)).await;
    assert_eq!(status, 200);
    let evs = sse_events(&body);
    assert_eq!(evs.len(), 3, "{body}");
    assert_eq!(evs[1]["output_ids"].as_array().map(Vec::len), Some(2));
    assert_eq!(evs[2]["error"]["code"], 500);
    let (status, v) = post_json(&s, "/generate", &sglang_body("c", false, 4)).await;
    assert_eq!(status, 400);
    assert_eq!(v, json!({"error": {"message": "too long"}}));
    assert_idle(&s).await;
}

#[tokio::test]
async fn shutdown_aborts_in_flight_streams() {
    let s = start(Api::Sglang, &["stall@*:1"]).await;
    let resp = post(&s, "/generate", &sglang_body("held", true, 100)).await;
    let h = tokio::spawn(async move { resp.text().await.expect("body") });
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.engine.running() < 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let engine = s.engine.clone();
    tokio::time::timeout(WAIT, s.shutdown())
        .await
        .expect("shuts down in time")
        .expect("clean");
    let body = tokio::time::timeout(WAIT, h)
        .await
        .expect("in time")
        .expect("task");
    let evs = sse_events(&body);
    assert_eq!(
        evs.last().expect("chunk")["meta_info"]["finish_reason"]["type"],
        "abort"
    );
    assert_eq!(engine.running(), 0);
}
