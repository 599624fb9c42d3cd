//! Relay end to end (issue 15): `genfront serve --worker sglang=<engine>` answers a unary,
//! single-item SGLang request with the engine's own bytes, only `meta_info.id` edited, while
//! metrics, engine errors and aborts work as on the typed path. The engine is a small scripted
//! SGLang server (info routes, `/generate`, `/abort_request`).

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// What the scripted engine saw.
#[derive(Default)]
struct Seen {
    generate: Mutex<Vec<Value>>,
    aborts: Mutex<Vec<Value>>,
}

/// SGLang's unary answer to `rid` as orjson writes it (a float spelled `1e-05`, an unknown
/// top-level key, an unknown meta key, escapes in `text`).
fn answer(rid: &str, finish: &str) -> String {
    format!(
        r#"{{"text":"a\"b\u00e9","output_ids":[5,6,2],"meta_info":{{"id":"{rid}","finish_reason":{finish},"prompt_tokens":3,"weight_version":"w7","num_retractions":0,"output_token_logprobs":[[-1e-05,5,null],[-0.25,6,null],[-3.0,2,null]],"completion_tokens":3,"cached_tokens":1,"spec_verify_ct":0,"e2e_latency":0.012345678901234568}},"future_key":[1,{{"x":null}}]}}"#
    )
}

const EOS: &str = r#"{"type":"stop","matched":2}"#;

/// SGLang's cumulative SSE frames to `rid` (two tokens, then EOS).
fn frames(rid: &str) -> Vec<String> {
    [("[5]", "null"), ("[5,2]", EOS)]
        .iter()
        .map(|(ids, finish)| {
            format!(
                r#"{{"output_ids":{ids},"meta_info":{{"id":"{rid}","finish_reason":{finish},"prompt_tokens":3,"weight_version":"default","completion_tokens":1,"cached_tokens":0,"e2e_latency":1e-05}}}}"#
            )
        })
        .collect()
}

/// `data: <frame>\n\n` each, then `data: [DONE]\n\n`, as SGLang writes its stream.
fn sse(frames: &[String]) -> String {
    let mut out = String::new();
    for f in frames {
        out.push_str("data: ");
        out.push_str(f);
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}
const ABORTED: &str = r#"{"type":"abort","message":"Aborted","status_code":null,"err_type":null}"#;
const BAD: &str =
    r#"{"type":"abort","message":"Bad grammar","status_code":400,"err_type":"BadRequestError"}"#;

async fn server_info() -> Response {
    axum::Json(json!({
        "model_path": "org/tiny", "context_length": 4096, "max_running_requests": 8,
        "incremental_streaming_output": false, "skip_tokenizer_init": true, "version": "0.5.0",
    }))
    .into_response()
}

async fn model_info() -> Response {
    axum::Json(json!({"model_path": "org/tiny", "is_generation": true})).into_response()
}

/// `/generate`: `max_new_tokens` picks the script — 1: an error abort (status 400); 9: wait for
/// an abort of this rid, then answer SGLang's aborted answer; else a normal answer.
async fn generate(State(s): State<Arc<Seen>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rid = v["rid"].as_str().unwrap_or_default().to_owned();
    let script = v["sampling_params"]["max_new_tokens"].as_u64().unwrap_or(0);
    let stream = v["stream"] == json!(true);
    s.generate.lock().unwrap().push(v);
    if stream {
        return ([("content-type", "text/event-stream")], sse(&frames(&rid))).into_response();
    }
    let finish = match script {
        1 => BAD,
        9 => {
            for _ in 0..1000 {
                if s.aborts
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|a| a["rid"] == rid.as_str())
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ABORTED
        }
        _ => EOS,
    };
    ([("content-type", "application/json")], answer(&rid, finish)).into_response()
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

async fn setup() -> Setup {
    setup_with(&[]).await
}

/// [`setup`] with more `serve` flags.
async fn setup_with(extra: &[&str]) -> Setup {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/get_server_info", get(server_info))
        .route("/server_info", get(server_info))
        .route("/get_model_info", get(model_info))
        .route("/model_info", get(model_info))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/generate", post(generate))
        .route("/abort_request", post(abort))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let engine = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mut argv = vec!["--worker".to_owned(), format!("sglang={engine}")];
    argv.extend(extra.iter().map(|a| (*a).to_owned()));
    let (url, server, stop) = common::genfront(&argv).await;
    assert!(server.wait_ready(Duration::from_secs(10)).await, "ready");
    (seen, url, server, stop)
}

fn body(rid: Option<&str>, max_new_tokens: u32) -> Value {
    let mut b = json!({"input_ids": [1, 2, 3], "stream": false, "return_logprob": true,
        "sampling_params": {"max_new_tokens": max_new_tokens}});
    if let Some(r) = rid {
        b["rid"] = json!(r);
    }
    b
}

#[tokio::test]
async fn the_client_gets_the_engines_bytes_with_its_rid_and_metrics_count_them() {
    let (seen, url, _server, _stop) = setup().await;
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{url}/generate"))
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
        answer("client-7", EOS),
        "byte for byte, the rid edited"
    );
    // The engine saw genfront's private id, never the client's.
    let sent = seen.generate.lock().unwrap().clone();
    let internal = sent[0]["rid"].as_str().unwrap().to_owned();
    assert_eq!(internal.len(), 32);
    assert_ne!(internal, "client-7");
    // Without a client rid: a fresh one in its place, never the internal id.
    let got = client
        .post(format!("{url}/generate"))
        .json(&body(None, 3))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&got).unwrap();
    let fresh = v["meta_info"]["id"].as_str().unwrap().to_owned();
    let internal = seen.generate.lock().unwrap()[1]["rid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(fresh, internal);
    assert_eq!(got, answer(&fresh, EOS));
    // Usage and finish from the scan reach the metrics.
    let metrics = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = |name: &str| common::metric_value(&metrics, name, "sglang");
    assert_eq!(line("genfront_output_tokens_total"), 6.0, "{metrics}");
    assert_eq!(line("genfront_cached_tokens_total"), 2.0, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("genfront_requests_total")
                && l.contains("status=\"200\"")
                && l.ends_with(" 2")),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_engine_error_answer_is_sglangs_native_error() {
    let (_seen, url, _server, _stop) = setup().await;
    let resp = reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(&body(Some("e"), 1))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], "Bad grammar", "{v}");
}

#[tokio::test]
async fn aborting_a_relayed_request_reaches_the_engine_and_relays_its_answer() {
    let (seen, url, _server, _stop) = setup().await;
    let client = reqwest::Client::new();
    let run = {
        let client = client.clone();
        let url = url.clone();
        tokio::spawn(async move {
            client
                .post(format!("{url}/generate"))
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
    let internal = seen.generate.lock().unwrap()[0]["rid"]
        .as_str()
        .unwrap()
        .to_owned();
    // The client's abort names its own rid; the engine gets genfront's.
    let r = client
        .post(format!("{url}/abort_request"))
        .json(&json!({"rid": "long-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, answer("long-1", ABORTED));
    let aborts = seen.aborts.lock().unwrap().clone();
    assert_eq!(aborts, [json!({"rid": internal, "abort_all": false})]);
}

#[tokio::test]
async fn a_relayed_answer_counts_against_max_answer_bytes() {
    let (_seen, url, _server, _stop) = setup_with(&["--max-answer-bytes", "300"]).await;
    let resp = reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(&body(Some("big"), 3))
        .send()
        .await
        .unwrap();
    // The engine's answer is over 400 bytes: refused like a typed one, never sent half.
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("--max-answer-bytes"), "{v}");
}

#[tokio::test]
async fn a_cumulative_stream_is_the_engines_frames_with_the_rid_edited() {
    let (seen, url, _server, _stop) = setup().await;
    let mut b = body(Some("st-1"), 2);
    b["stream"] = json!(true);
    let resp = reqwest::Client::new()
        .post(format!("{url}/generate"))
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
    let got = resp.text().await.unwrap();
    assert_eq!(got, sse(&frames("st-1")));
    assert_ne!(seen.generate.lock().unwrap()[0]["rid"], "st-1");
}
