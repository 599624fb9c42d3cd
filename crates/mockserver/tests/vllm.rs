//! `--api vllm`: every route answers natively; request ids; abort recorded and applied.

mod common;

use std::time::Duration;

use common::{
    WAIT, assert_idle, client, get_json, post, post_json, post_text, sse_events, start, vllm_body,
};
use genfront_mockserver::{Api, MockServerArgs, build, spawn};
use serde_json::json;

const GENERATE: &str = "/inference/v1/generate";
const ABORT: &str = "/inference/v1/abort_requests";

#[tokio::test]
async fn unary_and_stream_are_vllm_shaped() {
    let s = start(Api::Vllm, &[]).await;
    let (status, v) = post_json(&s, GENERATE, &vllm_body("r1", false, 4)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["request_id"], "generate-tokens-r1");
    assert_eq!(
        v["choices"][0]["token_ids"].as_array().map(Vec::len),
        Some(4)
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["prompt_tokens"], 3);

    let resp = post(&s, GENERATE, &vllm_body("r2", true, 3)).await;
    assert_eq!(resp.headers()["x-request-id"], "generate-tokens-r2");
    let evs = sse_events(&resp.text().await.expect("body"));
    assert_eq!(evs.len(), 3);
    assert!(evs.iter().all(|e| e["request_id"] == "generate-tokens-r2"));
    assert!(
        evs.iter()
            .all(|e| e["choices"][0]["token_ids"].as_array().map(Vec::len) == Some(1))
    );
    assert_eq!(evs[2]["choices"][0]["finish_reason"], "length");

    // The SGLang routes are not served.
    let (status, _, _) = post_text(&s, "/generate", &json!({"input_ids": [1]})).await;
    assert_eq!(status, 404);
    let r = client()
        .get(s.url("/get_server_info"))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 404);
    assert_idle(&s).await;
}

#[tokio::test]
async fn errors_use_the_vllm_envelope() {
    let s = start(Api::Vllm, &["error@1:unavailable"]).await;
    let (status, v) = post_json(&s, GENERATE, &vllm_body("e", false, 4)).await;
    assert_eq!(status, 503);
    assert_eq!(v["error"]["code"], 503);
    assert_eq!(v["error"]["type"], "ServiceUnavailableError");
    let (status, v) = post_json(&s, GENERATE, &json!({"token_ids": "x"})).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["type"], "Bad Request");
    assert!(v.get("object").is_none());
}

#[tokio::test]
async fn auxiliary_routes_answer_natively() {
    let mut a = MockServerArgs::new(Api::Vllm);
    a.zero_delay = true;
    a.model = "org/m".into();
    let s = spawn(&a).await.expect("starts");
    let r = client().get(s.url("/health")).send().await.expect("sent");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().await.expect("body"), "");
    let (status, v) = get_json(&s, "/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "org/m");
    assert_eq!(v["data"][0]["max_model_len"], 32768);
}

#[tokio::test]
async fn server_flags_reach_the_answers() {
    let mut a = common::args(Api::Vllm, &[]);
    a.enable_return_routed_experts = true;
    a.return_sampling_mask = true;
    let s = spawn(&a).await.expect("starts");
    let (status, v) = post_json(&s, GENERATE, &vllm_body("f", false, 2)).await;
    assert_eq!(status, 200, "{v}");
    assert!(!v["choices"][0]["routed_experts"].is_null(), "{v}");
    assert!(!v["choices"][0]["sampling_mask"].is_null(), "{v}");
    let s = start(Api::Vllm, &[]).await;
    let (_, v) = post_json(&s, GENERATE, &vllm_body("g", false, 2)).await;
    assert!(v["choices"][0]["routed_experts"].is_null(), "{v}");
}

#[tokio::test]
async fn abort_requests_is_recorded_and_aborts_by_exact_id() {
    let s = start(Api::Vllm, &["stall@*:1"]).await;
    let resp = post(&s, GENERATE, &vllm_body("r9", true, 100)).await;
    assert_eq!(resp.status().as_u16(), 200);
    let h = tokio::spawn(async move { sse_events(&resp.text().await.expect("body")) });
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.engine.running() < 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let r = post(&s, ABORT, &json!({"request_ids": ["r9"]})).await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(s.aborts().contains("r9"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !h.is_finished(),
        "vLLM ids carry the generate-tokens- prefix"
    );

    post(&s, ABORT, &json!({"request_ids": ["generate-tokens-r9"]})).await;
    let evs = tokio::time::timeout(WAIT, h)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(
        evs.last().expect("chunk")["choices"][0]["finish_reason"],
        "abort"
    );
    assert!(s.aborts().contains("generate-tokens-r9"));
    assert_eq!(s.aborts().len(), 2);

    let (status, v) = post_json(&s, ABORT, &json!({})).await;
    assert_eq!(status, 400);
    assert_eq!(
        v["error"]["message"],
        "Missing 'request_ids' in request body"
    );
    assert_eq!(s.aborts().len(), 3, "bad calls are recorded too");
    assert_idle(&s).await;
}

#[test]
fn abort_status_needs_sglang() {
    let a = common::args(Api::Vllm, &["abort-status@1:400"]);
    assert!(build(&a).is_err());
}
