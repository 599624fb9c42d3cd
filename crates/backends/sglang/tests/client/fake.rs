//! A tiny scripted SGLang server: info routes, `/generate` answering scripted replies (SSE frames
//! split into arbitrary network chunks, HTTP errors, abrupt closes, hangs, aborts) and
//! `/abort_request` recording its bodies. Bound on `127.0.0.1:0`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// How a `/generate` stream ends after its chunks.
#[derive(Debug, Clone)]
pub enum End {
    /// Close the body normally.
    Close,
    /// Break the connection (an error mid-body).
    Break,
    /// Keep the stream open until the client goes away.
    Hang,
    /// Wait for an `/abort_request` matching the rid (prefix), then send these chunks and close.
    OnAbort(Vec<Bytes>),
}

/// One scripted `/generate` answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An HTTP error status with a body.
    Status(u16, String),
    /// An SSE body in these network chunks, then `End`.
    Sse(Vec<Bytes>, End),
}

/// What the fake recorded, and its script.
#[derive(Debug, Default)]
pub struct Shared {
    pub server_info: Mutex<Value>,
    /// `/get_model_info` answers 404 (only `/model_info` works).
    pub legacy_model_info: Mutex<bool>,
    /// `/get_server_info` answers 404 (only `/server_info` works).
    pub new_server_info_only: Mutex<bool>,
    pub replies: Mutex<VecDeque<Reply>>,
    pub bodies: Mutex<Vec<Value>>,
    pub aborts: Mutex<Vec<Value>>,
    /// `/generate` bodies whose client went away before the stream ended.
    pub disconnects: AtomicUsize,
    pub health_calls: AtomicUsize,
    /// The status `/health` answers (0: 200).
    pub health_status: std::sync::atomic::AtomicU16,
    /// How long `/health` takes to answer, in ms.
    pub health_delay_ms: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub fn push(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    pub fn aborts(&self) -> Vec<Value> {
        self.aborts.lock().unwrap().clone()
    }

    fn aborted(&self, rid: &str) -> bool {
        self.aborts.lock().unwrap().iter().any(|a| {
            a["rid"]
                .as_str()
                .is_some_and(|p| !p.is_empty() && rid.starts_with(p))
        })
    }
}

pub struct Fake {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
}

impl Fake {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Start a fake server; `incremental` sets `incremental_streaming_output` in its server info.
pub async fn start(incremental: bool) -> Fake {
    let shared = Arc::new(Shared::default());
    *shared.server_info.lock().unwrap() = json!({
        "model_path": "org/tiny-moe",
        "served_model_name": "tiny",
        "context_length": null,
        "max_req_input_len": 4095,
        "max_running_requests": 48,
        "incremental_streaming_output": incremental,
        "skip_tokenizer_init": true,
        "version": "0.5.0",
    });
    let app = Router::new()
        .route("/get_server_info", get(server_info))
        .route("/server_info", get(server_info_new))
        .route("/get_model_info", get(model_info))
        .route("/model_info", get(model_info_new))
        .route("/health", get(health))
        .route("/generate", post(generate))
        .route("/abort_request", post(abort))
        .with_state(Arc::clone(&shared));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Fake { addr, shared }
}

async fn server_info(State(s): State<Arc<Shared>>) -> Response {
    if *s.new_server_info_only.lock().unwrap() {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(s.server_info.lock().unwrap().clone()).into_response()
}

async fn server_info_new(State(s): State<Arc<Shared>>) -> Response {
    axum::Json(s.server_info.lock().unwrap().clone()).into_response()
}

fn model_info_body() -> Value {
    json!({"model_path": "org/tiny-moe", "tokenizer_path": "org/tiny-moe", "is_generation": true, "weight_version": "default"})
}

async fn model_info(State(s): State<Arc<Shared>>) -> Response {
    if *s.legacy_model_info.lock().unwrap() {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(model_info_body()).into_response()
}

async fn model_info_new() -> Response {
    axum::Json(model_info_body()).into_response()
}

async fn health(State(s): State<Arc<Shared>>) -> StatusCode {
    s.health_calls.fetch_add(1, Ordering::Relaxed);
    let delay = s.health_delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    match s.health_status.load(Ordering::Relaxed) {
        0 => StatusCode::OK,
        code => StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

async fn abort(State(s): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.aborts.lock().unwrap().push(v);
    StatusCode::OK
}

async fn generate(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rid = v["rid"].as_str().unwrap_or_default().to_owned();
    s.bodies.lock().unwrap().push(v);
    let reply = s
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Status(500, "no scripted reply".into()));
    let (chunks, end) = match reply {
        Reply::Status(code, body) => {
            return Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap();
        }
        Reply::Sse(chunks, end) => (chunks, end),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let shared = Arc::clone(&s);
    tokio::spawn(async move {
        for c in chunks {
            if tx.send(Ok(c)).await.is_err() {
                shared.disconnects.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // Give each chunk its own write.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        match end {
            End::Close => {}
            End::Break => {
                let _ = tx.send(Err(std::io::Error::other("boom"))).await;
            }
            End::Hang => {
                tx.closed().await;
                shared.disconnects.fetch_add(1, Ordering::Relaxed);
            }
            End::OnAbort(after) => {
                for _ in 0..1000 {
                    if shared.aborted(&rid) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                for c in after {
                    if tx.send(Ok(c)).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// `data: <json>\n\n` for each frame, then `data: [DONE]\n\n` when `done`.
pub fn sse(frames: &[Value], done: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(f.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    if done {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
    out
}

/// Cut `body` into network chunks of the given sizes (cycled).
pub fn chunks(body: &[u8], sizes: &[usize]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < body.len() {
        let n = sizes
            .get(i % sizes.len().max(1))
            .copied()
            .unwrap_or(body.len())
            .max(1);
        let end = (at + n).min(body.len());
        out.push(Bytes::copy_from_slice(&body[at..end]));
        at = end;
        i += 1;
    }
    out
}

/// A frame: `output_ids` plus `meta_info` (`id`, `finish_reason`, counts, extra keys).
pub fn frame(ids: &[u32], finish: Value, completion: usize, extra: Value) -> Value {
    let mut meta = json!({
        "id": "x",
        "finish_reason": finish,
        "prompt_tokens": 3,
        "weight_version": "default",
        "completion_tokens": completion,
        "cached_tokens": 0,
    });
    if let (Some(m), Value::Object(x)) = (meta.as_object_mut(), extra) {
        m.extend(x);
    }
    json!({"output_ids": ids, "meta_info": meta})
}

/// Wait (bounded) until `cond` holds.
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}
