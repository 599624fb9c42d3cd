//! vLLM relay end to end (issue 15): `genfront serve --worker vllm=<engine>` answers a
//! one-choice vLLM request, unary or streamed, with the engine's own bytes, only `request_id`
//! edited, while metrics,
//! engine errors and aborts work as on the typed path. The engine is a small scripted vLLM
//! server (`/v1/models`, `/health`, `/inference/v1/generate`, `/inference/v1/abort_requests`).

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// What the scripted engine saw.
#[derive(Default)]
struct Seen {
    generate: Mutex<Vec<(Option<String>, Value)>>,
    aborts: Mutex<Vec<Value>>,
}

/// vLLM's unary answer to `id` as its `JSONResponse` writes it, with spellings genfront's own
/// renderer would not reproduce (`1e-05`, `-0.0`, an escape, an unknown key, a `model` and
/// `created` of the engine's).
fn answer(id: &str, finish: &str) -> String {
    format!(
        r#"{{"request_id":"{id}","model":"org/tiny","created":1700000001,"usage":{{"prompt_tokens":3,"total_tokens":6,"completion_tokens":3,"prompt_tokens_details":{{"cached_tokens":1}},"completion_tokens_details":null}},"prompt_logprobs":null,"prompt_token_id_logprobs":null,"metrics":{{"speculative_decoding":null,"queue_time_ms":1e-05}},"kv_transfer_params":null,"ec_transfer_params":null,"output_mode":"tokens","future_key":"a\"b\u00e9","choices":[{{"index":0,"finish_reason":"{finish}","stop_reason":null,"token_ids":[5,6,2],"routed_experts":null,"sampling_mask":null,"weight_versions":[{{"version":"default","start":0,"end":3}}],"logprobs":{{"content":[{{"token_id":5,"logprob":-0.0,"rank":1,"top_logprobs":[]}},{{"token_id":6,"logprob":-1e-05,"rank":1,"top_logprobs":[]}},{{"token_id":2,"logprob":-3.0,"rank":1,"top_logprobs":[]}}]}}}}]}}"#
    )
}

/// vLLM's SSE body to `id` for a client that asked `include_usage` only, as vLLM writes it.
fn sse(id: &str) -> String {
    let frames = [
        format!(
            r#"{{"request_id":"{id}","usage":null,"output_mode":"tokens","choices":[{{"index":0,"finish_reason":null,"stop_reason":null,"token_ids":[5],"routed_experts":null,"sampling_mask":null,"weight_versions":null,"logprobs":null}}]}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","usage":null,"output_mode":"tokens","choices":[{{"index":0,"finish_reason":"stop","stop_reason":2,"token_ids":[6,2],"routed_experts":null,"sampling_mask":null,"weight_versions":[{{"version":"w7","start":0,"end":3}}],"logprobs":null}}]}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","choices":[],"usage":{{"prompt_tokens":3,"total_tokens":6,"completion_tokens":3,"prompt_tokens_details":{{"cached_tokens":1}}}},"output_mode":"tokens"}}"#
        ),
    ];
    let mut out = String::new();
    for f in frames {
        out.push_str("data: ");
        out.push_str(&f);
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

async fn models() -> Response {
    axum::Json(json!({"object": "list", "data": [
        {"id": "org/tiny", "object": "model", "owned_by": "vllm", "root": "org/tiny",
         "parent": null, "max_model_len": 4096}]}))
    .into_response()
}

/// `/inference/v1/generate`: `max_tokens` picks the script — 1: a 400 in vLLM's envelope; 9:
/// wait for an abort of this request, then answer with `"abort"`; else a normal answer.
async fn generate(State(s): State<Arc<Seen>>, headers: HeaderMap, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = headers
        .get("x-request-id")
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let native = format!(
        "generate-tokens-{}",
        v["request_id"].as_str().unwrap_or_default()
    );
    let script = v["sampling_params"]["max_tokens"].as_u64().unwrap_or(0);
    let stream = v["stream"] == json!(true);
    s.generate.lock().unwrap().push((header, v));
    if stream {
        return ([("content-type", "text/event-stream")], sse(&native)).into_response();
    }
    let finish = match script {
        1 => {
            let err = json!({"error": {"message": "bad grammar", "type": "BadRequestError",
                "param": null, "code": 400}});
            return (StatusCode::BAD_REQUEST, axum::Json(err)).into_response();
        }
        9 => {
            for _ in 0..1000 {
                let aborted = s.aborts.lock().unwrap().iter().any(|a| {
                    a["request_ids"]
                        .as_array()
                        .is_some_and(|ids| ids.iter().any(|i| *i == native.as_str()))
                });
                if aborted {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            "abort"
        }
        _ => "stop",
    };
    (
        [("content-type", "application/json")],
        answer(&native, finish),
    )
        .into_response()
}

async fn abort(State(s): State<Arc<Seen>>, body: Bytes) -> StatusCode {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.aborts.lock().unwrap().push(v);
    StatusCode::OK
}

/// The scripted engine and genfront over it.
type Setup = (
    Arc<Seen>,
    String,
    genfront::Server,
    tokio_util::sync::CancellationToken,
);

async fn setup(extra: &[&str]) -> Setup {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/inference/v1/generate", post(generate))
        .route("/inference/v1/abort_requests", post(abort))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let engine = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mut argv = vec!["--worker".to_owned(), format!("vllm={engine}")];
    argv.extend(extra.iter().map(|a| (*a).to_owned()));
    let (url, server, stop) = common::genfront(&argv).await;
    assert!(server.wait_ready(Duration::from_secs(10)).await, "ready");
    (seen, url, server, stop)
}

fn body(id: Option<&str>, max_tokens: u32) -> Value {
    let mut b = json!({"token_ids": [1, 2, 3], "stream": false,
        "sampling_params": {"max_tokens": max_tokens, "logprobs": 0}});
    if let Some(id) = id {
        b["request_id"] = json!(id);
    }
    b
}

const GENERATE: &str = "/inference/v1/generate";

#[tokio::test]
async fn the_client_gets_the_engines_bytes_with_its_id_and_metrics_count_them() {
    let (seen, url, _server, _stop) = setup(&[]).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{url}{GENERATE}"))
        .json(&body(Some("client-7"), 3))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let got = resp.text().await.unwrap();
    assert_eq!(
        got,
        answer("generate-tokens-client-7", "stop"),
        "byte for byte, request_id edited"
    );
    // The engine saw genfront's private id (body and header), never the client's, and the
    // client's unary request.
    let (header, sent) = seen.generate.lock().unwrap()[0].clone();
    let internal = sent["request_id"].as_str().unwrap().to_owned();
    assert_ne!(internal, "client-7");
    assert_eq!(header.as_deref(), Some(internal.as_str()));
    assert_eq!(sent["stream"], json!(false));
    // An X-Request-Id header names the client's id, as vLLM's `_base_request_id` does.
    let got = client
        .post(format!("{url}{GENERATE}"))
        .header("x-request-id", "hdr-1")
        .json(&body(None, 3))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(got, answer("generate-tokens-hdr-1", "stop"));
    // Usage and finish from the scan reach the metrics.
    let metrics = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = |name: &str| common::metric_value(&metrics, name, "vllm");
    assert_eq!(line("genfront_output_tokens_total"), 6.0, "{metrics}");
    assert_eq!(line("genfront_cached_tokens_total"), 2.0, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("genfront_requests_total")
                && l.contains("format=\"vllm\"")
                && l.contains("status=\"200\"")
                && l.ends_with(" 2")),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_engine_error_is_vllms_native_error() {
    let (_seen, url, _server, _stop) = setup(&[]).await;
    let resp = reqwest::Client::new()
        .post(format!("{url}{GENERATE}"))
        .json(&body(Some("e"), 1))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], "bad grammar", "{v}");
    assert_eq!(v["error"]["code"], 400, "{v}");
}

#[tokio::test]
async fn aborting_a_relayed_request_reaches_the_engine_and_relays_its_answer() {
    let (seen, url, _server, _stop) = setup(&[]).await;
    let client = reqwest::Client::new();
    let run = {
        let client = client.clone();
        let url = url.clone();
        tokio::spawn(async move {
            client
                .post(format!("{url}{GENERATE}"))
                .json(&body(Some("long-1"), 9))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        })
    };
    for _ in 0..500 {
        if !seen.generate.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let internal = seen.generate.lock().unwrap()[0].1["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The client's abort names its own id; the engine gets genfront's.
    let r = client
        .post(format!("{url}/inference/v1/abort_requests"))
        .json(&json!({"request_ids": ["generate-tokens-long-1"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, answer("generate-tokens-long-1", "abort"));
    let aborts = seen.aborts.lock().unwrap().clone();
    assert!(
        aborts.contains(&json!({"request_ids": [format!("generate-tokens-{internal}")]})),
        "{aborts:?}"
    );
}

#[tokio::test]
async fn a_relayed_answer_counts_against_max_answer_bytes() {
    let (_seen, url, _server, _stop) = setup(&["--max-answer-bytes", "300"]).await;
    let resp = reqwest::Client::new()
        .post(format!("{url}{GENERATE}"))
        .json(&body(Some("big"), 3))
        .send()
        .await
        .unwrap();
    // The engine's answer is over 700 bytes: refused like a typed one, never sent half.
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("--max-answer-bytes"), "{v}");
}

#[tokio::test]
async fn a_stream_is_the_engines_chunks_with_the_id_edited() {
    let (seen, url, _server, _stop) = setup(&[]).await;
    let mut b = body(Some("st-1"), 3);
    b["stream"] = json!(true);
    b["stream_options"] = json!({"include_usage": true});
    let resp = reqwest::Client::new()
        .post(format!("{url}{GENERATE}"))
        .json(&b)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(resp.text().await.unwrap(), sse("generate-tokens-st-1"));
    let sent = seen.generate.lock().unwrap()[0].1.clone();
    assert_ne!(sent["request_id"], "st-1");
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
}
