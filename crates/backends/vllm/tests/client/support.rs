//! The scripted fake vLLM server, vLLM wire shapes and request helpers shared by the tests.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::{Stream, StreamExt};
use genfront_format::{Assembler, GenerateFormat, ParseInput};
use genfront_protocol::{Engine, EngineError, EngineOutput, EngineRequest, Usage};
use genfront_vllm::{VllmEngine, VllmEngineOptions, VllmFormat};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub(crate) const ID: &str = "0123456789abcdef0123456789abcdef";
pub(crate) const NATIVE_ID: &str = "generate-tokens-0123456789abcdef0123456789abcdef";

// === the fake server ===

/// One step of a scripted SSE body.
#[derive(Clone)]
pub(crate) enum Step {
    /// Write these bytes as one network chunk.
    Send(Vec<u8>),
    /// Wait.
    Sleep(Duration),
    /// Wait until `abort_requests` was called.
    WaitAbort,
    /// Never finish (until the client goes away).
    Hang,
    /// Break the connection.
    Fail,
}

/// The answer to one generate call.
#[derive(Clone)]
pub(crate) enum Script {
    Stream(Vec<Step>),
    Json(u16, Value),
}

#[derive(Default)]
pub(crate) struct Record {
    pub(crate) scripts: VecDeque<Script>,
    pub(crate) generate: Vec<(HeaderMap, Value)>,
    pub(crate) aborts: Vec<Value>,
    /// SSE bodies dropped before their script ended (the client went away).
    pub(crate) disconnects: usize,
    pub(crate) health: u16,
    pub(crate) models: Option<(u16, Value)>,
}

#[derive(Clone, Default)]
pub(crate) struct Fake {
    record: Arc<Mutex<Record>>,
    aborted: Arc<Notify>,
}

impl Fake {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn script(&self, script: Script) {
        self.lock().scripts.push_back(script);
    }

    pub(crate) fn aborts(&self) -> Vec<Value> {
        self.lock().aborts.clone()
    }

    pub(crate) fn disconnects(&self) -> usize {
        self.lock().disconnects
    }

    pub(crate) fn generate_calls(&self) -> Vec<(HeaderMap, Value)> {
        self.lock().generate.clone()
    }

    pub(crate) async fn wait_abort(&self) {
        loop {
            let notified = self.aborted.notified();
            if !self.lock().aborts.is_empty() {
                return;
            }
            notified.await;
        }
    }
}

pub(crate) async fn models(State(fake): State<Fake>) -> Response {
    let (status, body) = fake.lock().models.clone().unwrap_or((
        200,
        json!({"object": "list", "data": [
            {"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen3-8B",
             "parent": null, "max_model_len": 8192},
            {"id": "qwen", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen3-8B",
             "parent": null, "max_model_len": 8192},
            {"id": "sql-lora", "object": "model", "owned_by": "vllm", "root": "/loras/sql",
             "parent": "Qwen/Qwen3-8B", "max_model_len": 8192}]}),
    ));
    (status_of(status), axum::Json(body)).into_response()
}

pub(crate) async fn health(State(fake): State<Fake>) -> StatusCode {
    status_of(fake.lock().health)
}

pub(crate) fn status_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::OK)
}

pub(crate) async fn abort(State(fake): State<Fake>, body: Bytes) -> StatusCode {
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    fake.lock().aborts.push(value);
    fake.aborted.notify_waiters();
    StatusCode::OK
}

pub(crate) async fn generate(
    State(fake): State<Fake>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let script = {
        let mut record = fake.lock();
        record.generate.push((headers, value));
        record.scripts.pop_front()
    };
    match script {
        None => (StatusCode::INTERNAL_SERVER_ERROR, "no script").into_response(),
        Some(Script::Json(status, body)) => (status_of(status), axum::Json(body)).into_response(),
        Some(Script::Stream(steps)) => Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::from_stream(ScriptBody {
                steps: steps.into(),
                fake,
                waiting: None,
                done: false,
            }))
            .unwrap_or_default(),
    }
}

/// An SSE body played from a script; counts a disconnect when dropped before its end.
pub(crate) struct ScriptBody {
    steps: VecDeque<Step>,
    fake: Fake,
    waiting: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    done: bool,
}

impl Stream for ScriptBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(wait) = &mut self.waiting {
                match wait.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => self.waiting = None,
                }
            }
            let Some(step) = self.steps.pop_front() else {
                self.done = true;
                return Poll::Ready(None);
            };
            match step {
                Step::Send(bytes) => return Poll::Ready(Some(Ok(Bytes::from(bytes)))),
                Step::Sleep(d) => self.waiting = Some(Box::pin(tokio::time::sleep(d))),
                Step::WaitAbort => {
                    let fake = self.fake.clone();
                    self.waiting = Some(Box::pin(async move { fake.wait_abort().await }));
                }
                Step::Hang => self.waiting = Some(Box::pin(std::future::pending())),
                Step::Fail => {
                    self.done = true;
                    return Poll::Ready(Some(Err(std::io::Error::other("connection broken"))));
                }
            }
        }
    }
}

impl Drop for ScriptBody {
    fn drop(&mut self) {
        if !self.done {
            self.fake.lock().disconnects += 1;
        }
    }
}

pub(crate) async fn serve() -> (Fake, SocketAddr) {
    let fake = Fake::default();
    fake.lock().health = 200;
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/inference/v1/generate", post(generate))
        .route("/inference/v1/abort_requests", post(abort))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (fake, addr)
}

pub(crate) fn options() -> VllmEngineOptions {
    VllmEngineOptions {
        vocab_size: Some(1000),
        eos_token_ids: vec![2],
        routed_experts: true,
        sampling_mask: true,
        cancel_grace: Duration::from_millis(300),
        ..VllmEngineOptions::default()
    }
}

pub(crate) async fn engine() -> (Fake, VllmEngine) {
    let (fake, addr) = serve().await;
    let engine = VllmEngine::connect(&format!("http://{addr}/"), options())
        .await
        .expect("connect");
    (fake, engine)
}

// === vLLM wire shapes ===

pub(crate) fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        out.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }
    out
}

pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// A vLLM 0.33.0 stream chunk with continuous usage.
pub(crate) fn chunk(
    index: u32,
    tokens: &[u32],
    completion: u32,
    finish: Option<&str>,
    stop: Value,
) -> Value {
    json!({"request_id": NATIVE_ID,
        "usage": {"prompt_tokens": 3, "total_tokens": 3 + completion, "completion_tokens": completion,
                  "prompt_tokens_details": null, "completion_tokens_details": null},
        "output_mode": "tokens",
        "choices": [{"index": index, "finish_reason": finish, "stop_reason": stop, "token_ids": tokens,
            "routed_experts": null, "sampling_mask": null, "weight_versions": null, "logprobs": null}]})
}

pub(crate) fn usage_chunk(completion: u32, cached: u32) -> Value {
    json!({"request_id": NATIVE_ID,
        "usage": {"prompt_tokens": 3, "total_tokens": 3 + completion, "completion_tokens": completion,
                  "prompt_tokens_details": {"cached_tokens": cached}},
        "output_mode": "tokens", "choices": []})
}

/// `np.save` of a `uint8` array `(rows, layers, k)`, base64.
pub(crate) fn npy_u8(shape: (usize, usize, usize), data: &[u8]) -> String {
    let header = format!(
        "{{'descr': '|u1', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
        shape.0, shape.1, shape.2
    );
    let pad = 64 - (10 + header.len() + 1) % 64;
    let header = format!("{header}{}\n", " ".repeat(pad % 64));
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    STANDARD.encode(bytes)
}

// === requests ===

pub(crate) fn headers() -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h.insert("x-data-parallel-rank", http::HeaderValue::from_static("1"));
    h
}

/// Prepare a vLLM-format client body against `engine`: the projected request (dispatch id set)
/// and its assembler. The format plays a server with `--enable-prompt-tokens-details`, like the
/// fake vLLM (it sends `prompt_tokens_details`).
pub(crate) fn prepare(engine: &VllmEngine, body: &Value) -> (EngineRequest, Box<dyn Assembler>) {
    let bytes = serde_json::to_vec(body).expect("body");
    let prepared = VllmFormat::new()
        .with_prompt_tokens_details(true)
        .prepare(ParseInput {
            headers: &headers(),
            body: &bytes,
            engine: engine.info(),
        })
        .expect("valid request");
    let mut request = prepared.subs[0].request.clone();
    request.request_id = ID.to_owned();
    (request, prepared.assembler)
}

pub(crate) fn request(engine: &VllmEngine, sampling: Value) -> EngineRequest {
    prepare(
        engine,
        &json!({"token_ids": [1, 2, 3], "stream": true, "sampling_params": sampling}),
    )
    .0
}

pub(crate) async fn run(
    engine: &VllmEngine,
    request: EngineRequest,
) -> Vec<Result<EngineOutput, EngineError>> {
    engine
        .generate(request, CancellationToken::new())
        .collect()
        .await
}

pub(crate) fn oks(items: Vec<Result<EngineOutput, EngineError>>) -> Vec<EngineOutput> {
    items.into_iter().map(|i| i.expect("no error")).collect()
}

pub(crate) fn last_error(items: &[Result<EngineOutput, EngineError>]) -> EngineError {
    items
        .last()
        .expect("items")
        .clone()
        .expect_err("the stream ends with an error")
}

/// Poll until `check` holds (at most 5 s).
pub(crate) async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

pub(crate) fn usage(completion: u32, cached: u32) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: 3,
        completion_tokens: completion,
        cached_tokens: cached,
    })
}
