//! HTTP-level faults: each gives its documented client-visible result, only to the request it
//! names, and leaves no engine request running.

mod common;

use common::{
    WAIT, assert_idle, client, post, post_json, post_text, read_until_end, sglang_body, sse_events,
    sse_payloads, start, vllm_body,
};
use genfront_mockserver::Api;
use serde_json::{Value, json};

const VLLM: &str = "/inference/v1/generate";

#[tokio::test]
async fn http_status_answers_the_native_envelope_without_reaching_the_engine() {
    let s = start(
        Api::Sglang,
        &["http-status@2:503", "http-status@3:429:slow down"],
    )
    .await;
    let (status, _) = post_json(&s, "/generate", &sglang_body("a", false, 2)).await;
    assert_eq!(status, 200, "request 1 is not faulted");
    let (status, v) = post_json(&s, "/generate", &sglang_body("b", true, 2)).await;
    assert_eq!(status, 503);
    assert_eq!(
        v,
        json!({"object":"error","message":"Service Unavailable","type":"503","param":null,"code":503})
    );
    let (status, v) = post_json(&s, "/generate", &sglang_body("c", false, 2)).await;
    assert_eq!(status, 429);
    assert_eq!(v["message"], "slow down");
    assert_eq!(
        s.engine.requests(),
        1,
        "faulted requests never reach the engine"
    );
    assert_eq!(s.generate_requests(), 3);

    let v_s = start(Api::Vllm, &["http-status@*:503"]).await;
    let (status, v) = post_json(&v_s, VLLM, &vllm_body("x", false, 2)).await;
    assert_eq!(status, 503);
    assert_eq!(
        v,
        json!({"error":{"message":"Service Unavailable","type":"Service Unavailable","param":null,"code":503}})
    );
    assert_idle(&s).await;
    assert_idle(&v_s).await;
}

#[tokio::test]
async fn drop_cuts_an_sglang_stream_after_n_token_events() {
    let s = start(Api::Sglang, &["drop@1:2"]).await;
    // Long enough that the zero-delay engine is still generating when the cut comes: the
    // frontend writes up to 64 ready events at once, so a short stream can be all out already.
    let resp = post(&s, "/generate", &sglang_body("d", true, 4000)).await;
    assert_eq!(resp.status().as_u16(), 200);
    let (body, failed) = read_until_end(resp).await;
    assert!(
        failed,
        "the body must end with an error, not cleanly: {body:?}"
    );
    assert!(!body.contains("[DONE]"));
    let payloads = sse_payloads(&body);
    assert_eq!(payloads.len(), 2, "{body:?}");
    let last: Value = serde_json::from_str(&payloads[1]).expect("json");
    assert_eq!(last["meta_info"]["completion_tokens"], 2);
    assert_idle(&s).await;
    assert_eq!(s.engine.aborted(), 1, "the cut aborts the engine request");

    // The next request is untouched.
    let (_, _, body) = post_text(&s, "/generate", &sglang_body("e", true, 3)).await;
    assert_eq!(sse_events(&body).len(), 3);
}

#[tokio::test]
async fn drop_cuts_a_vllm_stream_and_zero_cuts_before_any_event() {
    let s = start(Api::Vllm, &["drop@1:1", "drop@2:0"]).await;
    let (body, failed) = read_until_end(post(&s, VLLM, &vllm_body("a", true, 50)).await).await;
    assert!(failed);
    let payloads = sse_payloads(&body);
    assert_eq!(payloads.len(), 1, "{body:?}");
    let ev: Value = serde_json::from_str(&payloads[0]).expect("json");
    assert_eq!(
        ev["choices"][0]["token_ids"].as_array().map(Vec::len),
        Some(1)
    );

    // No response head at all would be as good as a head and a cut body.
    if let Ok(resp) = client()
        .post(s.url(VLLM))
        .json(&vllm_body("b", true, 50))
        .send()
        .await
    {
        let (body, failed) = read_until_end(resp).await;
        assert!(failed && body.is_empty(), "{body:?}");
    }
    assert_idle(&s).await;
}

#[tokio::test]
async fn drop_on_a_unary_request_closes_without_a_response() {
    let s = start(Api::Sglang, &["drop@1:0"]).await;
    let r = client()
        .post(s.url("/generate"))
        .json(&sglang_body("u", false, 3))
        .send()
        .await;
    assert!(r.is_err(), "no response expected, got {r:?}");
    assert_idle(&s).await;
    let (status, _) = post_json(&s, "/generate", &sglang_body("v", false, 3)).await;
    assert_eq!(status, 200, "the server keeps serving");
}

#[tokio::test]
async fn malformed_sends_a_bad_frame_and_ends_without_done() {
    let s = start(Api::Sglang, &["malformed@1:2", "malformed@2:0"]).await;
    let (body, failed) =
        read_until_end(post(&s, "/generate", &sglang_body("m", true, 50)).await).await;
    assert!(!failed, "the body ends cleanly");
    let payloads = sse_payloads(&body);
    assert_eq!(payloads.len(), 3, "{body:?}");
    assert_eq!(payloads[2], "{not json");
    assert!(!body.contains("[DONE]"));
    assert!(serde_json::from_str::<Value>(&payloads[1]).is_ok());

    let (status, _, body) = post_text(&s, "/generate", &sglang_body("n", false, 3)).await;
    assert_eq!(status, 200);
    assert_eq!(body, "{not json");
    assert_idle(&s).await;

    let v = start(Api::Vllm, &["malformed@1:1"]).await;
    let (body, failed) = read_until_end(post(&v, VLLM, &vllm_body("m", true, 50)).await).await;
    assert!(!failed);
    assert_eq!(
        sse_payloads(&body).last().map(String::as_str),
        Some("{not json")
    );
    assert_idle(&v).await;
}

#[tokio::test]
async fn abort_status_unary_answers_the_sglang_error() {
    let s = start(
        Api::Sglang,
        &["abort-status@1:400:Input is too long", "abort-status@2:503"],
    )
    .await;
    let r = post(&s, "/generate", &sglang_body("rid-a", false, 3)).await;
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v, json!({"error": {"message": "Input is too long"}}));
    let (status, v) = post_json(&s, "/generate", &sglang_body("rid-b", false, 3)).await;
    assert_eq!(status, 503);
    assert_eq!(
        v,
        json!({"object":"error","message":"scripted fault","type":"503","param":null,"code":503})
    );
    assert_idle(&s).await;
}

#[tokio::test]
async fn abort_status_stream_ends_with_the_abort_chunk() {
    let s = start(Api::Sglang, &["abort-status@*:400:Input is too long"]).await;
    let (status, _, body) = post_text(&s, "/generate", &sglang_body("rid-s", true, 3)).await;
    assert_eq!(status, 200);
    let evs = sse_events(&body);
    assert_eq!(evs.len(), 3);
    assert!(
        evs[..2]
            .iter()
            .all(|e| e["meta_info"]["finish_reason"].is_null())
    );
    let last = &evs[2];
    assert_eq!(last["meta_info"]["id"], "rid-s");
    assert_eq!(
        last["meta_info"]["finish_reason"],
        json!({"type":"abort","message":"Input is too long","status_code":400,"err_type":"BadRequestError"})
    );
    assert_eq!(last["output_ids"].as_array().map(Vec::len), Some(3));

    // A batch: every item's terminal chunk carries the abort.
    let (_, _, body) = post_text(
        &s,
        "/generate",
        &json!({"input_ids": [[1, 2], [3, 4]], "stream": true, "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    let terminal: Vec<Value> = sse_events(&body)
        .into_iter()
        .filter(|e| !e["meta_info"]["finish_reason"].is_null())
        .collect();
    assert_eq!(terminal.len(), 2);
    assert!(
        terminal
            .iter()
            .all(|e| e["meta_info"]["finish_reason"]["status_code"] == 400)
    );
    assert_idle(&s).await;
}

#[tokio::test]
async fn faults_count_generate_requests_only() {
    let s = start(Api::Sglang, &["http-status@2:500"]).await;
    // Abort calls, health probes and info reads do not count.
    post(&s, "/abort_request", &json!({"rid": "nothing"})).await;
    client()
        .get(s.url("/health_generate"))
        .send()
        .await
        .expect("probe");
    client()
        .get(s.url("/get_server_info"))
        .send()
        .await
        .expect("info");
    let (status, _) = post_json(&s, "/generate", &sglang_body("1", false, 1)).await;
    assert_eq!(status, 200);
    let (status, _) = post_json(&s, "/generate", &sglang_body("2", false, 1)).await;
    assert_eq!(status, 500);
    let (status, _) = post_json(&s, "/generate", &sglang_body("3", false, 1)).await;
    assert_eq!(status, 200);
    assert_eq!(s.generate_requests(), 3);
    assert!(s.wait_idle(WAIT).await);
}
