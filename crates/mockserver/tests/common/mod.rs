//! Shared helpers: a mock server on a loopback port, a client, and SSE parsing.

#![allow(dead_code, missing_docs)]

use std::time::Duration;

use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn};
use serde_json::Value;

pub const WAIT: Duration = Duration::from_secs(5);

/// Zero-delay flags for `api` plus `faults`.
pub fn args(api: Api, faults: &[&str]) -> MockServerArgs {
    let mut a = MockServerArgs::new(api);
    a.zero_delay = true;
    a.faults = faults
        .iter()
        .map(|f| f.parse().expect("fault parses"))
        .collect();
    a
}

pub async fn start(api: Api, faults: &[&str]) -> SpawnedMockServer {
    spawn(&args(api, faults)).await.expect("server starts")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

pub async fn post(s: &SpawnedMockServer, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(s.url(path))
        .json(body)
        .send()
        .await
        .expect("request sent")
}

/// Status, content type and body text.
pub async fn post_text(s: &SpawnedMockServer, path: &str, body: &Value) -> (u16, String, String) {
    let r = post(s, path, body).await;
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, ctype, r.text().await.expect("body"))
}

pub async fn post_json(s: &SpawnedMockServer, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, text) = post_text(s, path, body).await;
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

pub async fn get_json(s: &SpawnedMockServer, path: &str) -> (u16, Value) {
    let r = client().get(s.url(path)).send().await.expect("sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

/// Every `data:` payload of a complete SSE body (`[DONE]` excluded), asserting the framing and
/// the final `[DONE]`.
pub fn sse_events(body: &str) -> Vec<Value> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "stream must end with [DONE]: {body:?}"
    );
    sse_payloads(body)
        .into_iter()
        .filter(|p| p != "[DONE]")
        .map(|p| serde_json::from_str(&p).unwrap_or_else(|e| panic!("bad JSON {e}: {p}")))
        .collect()
}

/// The raw `data:` payloads of an SSE body, in order.
pub fn sse_payloads(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("bad event {e:?}"))
                .to_owned()
        })
        .collect()
}

/// Read a streaming body chunk by chunk until it ends or fails: the bytes received and whether
/// it ended with an error (a cut connection).
pub async fn read_until_end(resp: reqwest::Response) -> (String, bool) {
    let mut resp = resp;
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            Ok(None) => return (String::from_utf8_lossy(&buf).into_owned(), false),
            Err(_) => return (String::from_utf8_lossy(&buf).into_owned(), true),
        }
    }
}

pub fn sglang_body(rid: &str, stream: bool, max_new_tokens: u32) -> Value {
    serde_json::json!({
        "rid": rid,
        "input_ids": [1, 2, 3],
        "stream": stream,
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": true},
    })
}

pub fn vllm_body(request_id: &str, stream: bool, max_tokens: u32) -> Value {
    serde_json::json!({
        "request_id": request_id,
        "token_ids": [1, 2, 3],
        "stream": stream,
        "sampling_params": {"max_tokens": max_tokens, "ignore_eos": true},
    })
}

/// Assert the engine settles with nothing running (bounded wait).
pub async fn assert_idle(s: &SpawnedMockServer) {
    assert!(
        s.wait_idle(WAIT).await,
        "engine still runs {} request(s)",
        s.engine.running()
    );
}
