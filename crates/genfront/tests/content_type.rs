//! `Content-Type` on the generate routes is the format's decision, answered as each engine does
//! (issue 12; `genfront_sglang` `request::media`, vLLM's `decode_body`): SGLang 0.5.23 (FastAPI
//! 0.136's `strict_content_type`) reads a body without a JSON type — none at all included — as raw
//! bytes and answers pydantic's 400 `dataclass_type`; vLLM answers 400 "Unsupported Media Type"
//! for anything but `application/json`. The abort routes keep their 415, as does a
//! `Content-Encoding`.

mod common;

use common::{TestServer, start_with, zero_delay};
use serde_json::{Value, json};

const SGLANG_BODY: &str = r#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}"#;
const VLLM_BODY: &str = r#"{"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4}}"#;

/// POST `body` to `path` with `content_type` (`None`: no `Content-Type` header at all).
async fn post(
    server: &TestServer,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let mut req = server.client.post(server.url(path)).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = req.send().await.expect("sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// SGLang 0.5.23's message for `SGLANG_BODY` sent without a JSON type (the validation oracle's,
/// the endpoint path relative to site-packages).
fn sglang_bytes_message(repr: &str) -> String {
    let err = format!(
        "{{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an instance of GenerateReqInput', 'input': {repr}, 'ctx': {{'class_name': 'GenerateReqInput'}}}}"
    );
    format!(
        "1 validation error:\n  {err}\n\n  File \"sglang/srt/entrypoints/http_server.py\", line 928, in generate_request\n    POST /generate [{err}]"
    )
}

fn content_type_hits(server: &TestServer) -> u64 {
    server.state.metrics.limits().hits("content_type")
}

#[tokio::test]
async fn sglang_reads_only_json_typed_bodies_as_json() {
    let server = start_with(&[], zero_delay(), 1).await;
    let want = sglang_bytes_message(&format!("b'{SGLANG_BODY}'"));
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
        Some("application/ json"),
    ] {
        let (status, body) = post(&server, "/generate", ct, SGLANG_BODY).await;
        assert_eq!(status, 400, "{ct:?}: {body}");
        assert_eq!(body["object"], "error", "{ct:?}: {body}");
        assert_eq!(body["type"], "Bad Request", "{ct:?}: {body}");
        assert_eq!(body["message"].as_str(), Some(want.as_str()), "{ct:?}");
    }
    assert_eq!(content_type_hits(&server), 4);
    // A streaming body too: a failed bind is the flat 400, never an SSE answer.
    let streaming = r#"{"input_ids": [1], "stream": true}"#;
    let (status, body) = post(&server, "/generate", Some("text/plain"), streaming).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"].as_str(),
        Some(sglang_bytes_message(&format!("b'{streaming}'")).as_str())
    );
    // Bytes that are not JSON at all, with Python's bytes repr (a `'` and no `"`: b"…").
    let (status, body) = post(&server, "/generate", None, &b"it's\n\xff"[..]).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"].as_str(),
        Some(sglang_bytes_message("b\"it's\\n\\xff\"").as_str())
    );
    // JSON types: `application/*+json` and parameters are JSON.
    for ct in [
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "application/vnd.api+json",
    ] {
        let (status, body) = post(&server, "/generate", Some(ct), SGLANG_BODY).await;
        assert_eq!(status, 200, "{ct}: {body}");
    }
    // An empty body is no body (`missing`), whatever the type.
    let (status, body) = post(&server, "/generate", Some("text/plain"), "").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("'type': 'missing'")),
        "{body}"
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn vllm_refuses_every_type_but_application_json() {
    let server = start_with(&[], zero_delay(), 1).await;
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
        Some("application/vnd.api+json"),
    ] {
        let (status, body) = post(&server, "/inference/v1/generate", ct, VLLM_BODY).await;
        assert_eq!(status, 400, "{ct:?}: {body}");
        assert_eq!(body["error"]["type"], "Bad Request", "{ct:?}: {body}");
        assert_eq!(
            body["error"]["message"],
            json!(
                "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
            ),
            "{ct:?}: {body}"
        );
    }
    assert_eq!(content_type_hits(&server), 4);
    for ct in ["application/json", "application/json; charset=utf-8"] {
        let (status, body) = post(&server, "/inference/v1/generate", Some(ct), VLLM_BODY).await;
        assert_eq!(status, 200, "{ct}: {body}");
    }
    server.shutdown.cancel();
}

#[tokio::test]
async fn abort_routes_and_encodings_keep_their_415() {
    let server = start_with(&[], zero_delay(), 1).await;
    for (path, body) in [
        ("/abort_request", r#"{"rid": "x"}"#),
        ("/inference/v1/abort_requests", r#"{"request_ids": ["x"]}"#),
    ] {
        for ct in [Some("text/plain"), None] {
            let (status, answer) = post(&server, path, ct, body).await;
            assert_eq!(status, 415, "{path} {ct:?}: {answer}");
        }
    }
    let resp = server
        .client
        .post(server.url("/generate"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(SGLANG_BODY)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 415);
    server.shutdown.cancel();
}

/// A 64 MiB body without a JSON type (the default `--body-limit`): the answer is SGLang's
/// message with the `input` cut at 2048 bytes (SGLang prints the whole repr, up to 4× the body,
/// twice), so it stays small.
#[tokio::test]
async fn a_huge_untyped_body_gets_a_bounded_answer() {
    let server = start_with(&[], zero_delay(), 1).await;
    let mut body = Vec::with_capacity(64 << 20);
    body.extend_from_slice(br#"{"input_ids": ["#);
    while body.len() < (64 << 20) - 64 {
        body.extend_from_slice(b"\xff1,");
    }
    body.extend_from_slice(b"1]}");
    let (status, answer) = post(&server, "/generate", Some("text/plain"), body).await;
    assert_eq!(status, 400);
    let message = answer["message"].as_str().expect("message");
    assert!(message.len() < 8 * 1024, "{} bytes", message.len());
    assert!(
        message.contains("'input': b'{\"input_ids\": [\\xff1,\\xff1,"),
        "{message:.300}"
    );
    assert!(message.contains("...,"), "{message:.300}");
    server.shutdown.cancel();
}
