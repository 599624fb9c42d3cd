//! The fault layer: an axum middleware around the shared frontend router. It numbers generate
//! HTTP requests, applies [`HttpFault`]s to them by wrapping the response (status, body bytes or
//! SSE events), and records native abort calls. Requests without a fault pass through untouched
//! (the body is not even looked at), so the frontend's own answer — ids included — is what the
//! client gets.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use axum::body::{Body, BodyDataStream};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use genfront_format::{GenerateError, GenerateFormat};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::aborts::AbortLog;
use crate::args::Api;
use crate::fault::{HttpAction, HttpFault};

/// The bad frame `malformed@K:N` sends.
const MALFORMED_EVENT: &[u8] = b"data: {not json\n\n";
/// The body `malformed@K:N` gives a unary answer.
const MALFORMED_BODY: &[u8] = b"{not json";

/// Shared state of the fault layer.
pub(crate) struct Injector {
    pub(crate) api: Api,
    pub(crate) format: Arc<dyn GenerateFormat>,
    pub(crate) faults: Vec<HttpFault>,
    pub(crate) requests: AtomicU64,
    pub(crate) aborts: AbortLog,
    pub(crate) body_limit: usize,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector")
            .field("api", &self.api)
            .field("faults", &self.faults)
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

/// The middleware: abort recording, request numbering and fault application.
pub(crate) async fn layer(State(inj): State<Arc<Injector>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == inj.api.abort_path() && req.method() == Method::POST {
        return inj.record_abort(req, next).await;
    }
    if path == inj.api.generate_path()
        && inj
            .api
            .catalog_entry()
            .native_methods
            .contains(req.method())
    {
        let n = inj.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(fault) = inj.faults.iter().find(|f| f.applies_to(n)) {
            tracing::info!(request = n, fault = %fault, "injecting HTTP fault");
            return inj.apply(fault.action.clone(), req, next).await;
        }
    }
    next.run(req).await
}

// === impl Injector ===

impl Injector {
    async fn record_abort(&self, req: Request, next: Next) -> Response {
        let (parts, body) = req.into_parts();
        match axum::body::to_bytes(body, self.body_limit).await {
            Ok(bytes) => {
                self.aborts.record(bytes.clone());
                next.run(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
            Err(e) => {
                let err = GenerateError::Schema {
                    message: format!("Failed to read the request body: {e}"),
                    param: None,
                };
                let r = self.format.error_response(&err, false);
                json_response(r.status, r.body)
            }
        }
    }

    async fn apply(&self, action: HttpAction, req: Request, next: Next) -> Response {
        match action {
            HttpAction::Status { status, message } => {
                let message = message
                    .unwrap_or_else(|| status.canonical_reason().unwrap_or("Error").to_owned());
                let mut resp = json_response(status, status_envelope(self.api, status, &message));
                // A throttling proxy or gateway in front of an engine says when to come back.
                if matches!(status.as_u16(), 429 | 503) {
                    resp.headers_mut().insert(
                        http::header::RETRY_AFTER,
                        http::HeaderValue::from_static(MOCK_RETRY_AFTER),
                    );
                }
                resp
            }
            HttpAction::Drop { events } => {
                let resp = next.run(req).await;
                if is_sse(&resp) {
                    rewrite_sse(resp, Rewrite::Drop { events })
                } else {
                    drop(resp);
                    no_response()
                }
            }
            HttpAction::Malformed { events } => {
                let resp = next.run(req).await;
                if is_sse(&resp) {
                    rewrite_sse(resp, Rewrite::Malformed { events })
                } else {
                    replace_body(resp, Bytes::from_static(MALFORMED_BODY))
                }
            }
            HttpAction::AbortStatus { status, message } => {
                let resp = next.run(req).await;
                if is_sse(&resp) {
                    let err_type = if status.is_client_error() {
                        Value::from("BadRequestError")
                    } else {
                        Value::Null
                    };
                    let finish = json!({
                        "type": "abort",
                        "message": message,
                        "status_code": status.as_u16(),
                        "err_type": err_type,
                    });
                    rewrite_sse(resp, Rewrite::Abort { finish })
                } else if resp.status() == StatusCode::OK {
                    let body = if status.is_client_error() {
                        to_vec(&json!({"error": {"message": message}}))
                    } else {
                        status_envelope(Api::Sglang, status, &message)
                    };
                    let (mut parts, _) = resp.into_parts();
                    parts.status = status;
                    parts.headers.remove(CONTENT_LENGTH);
                    parts
                        .headers
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    Response::from_parts(parts, Body::from(body))
                } else {
                    resp
                }
            }
        }
    }
}

fn to_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// `Retry-After` (seconds) sent with an `http-status@K:429` or `:503` answer.
pub const MOCK_RETRY_AFTER: &str = "2";

fn json_response(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = (status, body.into()).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The native envelope of an HTTP error raised before any header: SGLang's `HTTPException`
/// shape, or vLLM's `ErrorResponse` with the HTTP phrase as `type` (what vLLM's
/// `HTTPException` handler sends).
fn status_envelope(api: Api, status: StatusCode, message: &str) -> Vec<u8> {
    let code = status.as_u16();
    to_vec(&match api {
        Api::Sglang => json!({
            "object": "error",
            "message": message,
            "type": code.to_string(),
            "param": null,
            "code": code,
        }),
        Api::Vllm => json!({
            "error": {
                "message": message,
                "type": status.canonical_reason().unwrap_or("Error"),
                "param": null,
                "code": code,
            }
        }),
    })
}

fn is_sse(resp: &Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

fn replace_body(resp: Response, body: Bytes) -> Response {
    let (mut parts, _) = resp.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

/// A response whose body fails before its first byte: hyper then closes the connection without
/// writing the (still buffered) status line, so the client sees no response at all.
fn no_response() -> Response {
    Response::new(Body::from_stream(futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::other("scripted connection drop"))
    })))
}

fn rewrite_sse(resp: Response, rewrite: Rewrite) -> Response {
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(
        parts,
        Body::from_stream(SseRewrite::new(body.into_data_stream(), rewrite)),
    )
}

// === SSE rewriting ===

/// What to do to an SSE body.
#[derive(Debug)]
enum Rewrite {
    /// Cut the connection after `events` token-bearing events.
    Drop { events: u32 },
    /// Send [`MALFORMED_EVENT`] and end after `events` token-bearing events.
    Malformed { events: u32 },
    /// Install `finish` as `meta_info.finish_reason` of every terminal SGLang chunk.
    Abort { finish: Value },
}

type Item = Result<Bytes, io::Error>;

/// An SSE body re-framed by event (blank-line delimited, whatever the network chunking), with a
/// [`Rewrite`] applied. Dropping the inner body (on a cut) drops the frontend's request guard,
/// which aborts the engine request.
struct SseRewrite {
    inner: Option<BodyDataStream>,
    buf: BytesMut,
    out: VecDeque<Item>,
    rewrite: Rewrite,
    tokens: TokenCounter,
    token_events: u32,
    ended: bool,
    /// Before an error goes out: a short pause so hyper writes and flushes what it has (an
    /// immediate wake lets its dispatcher poll the body again before flushing, and it drops
    /// unflushed bytes — headers included — on a body error). `None` until the error is next.
    flush_pause: Option<Pin<Box<tokio::time::Sleep>>>,
    yielded_before_error: bool,
}

/// How long a scripted cut waits for hyper to flush the events before it (see
/// [`SseRewrite::flush_pause`]).
const FLUSH_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

impl SseRewrite {
    fn new(inner: BodyDataStream, rewrite: Rewrite) -> Self {
        let mut s = Self {
            inner: Some(inner),
            buf: BytesMut::new(),
            out: VecDeque::new(),
            rewrite,
            tokens: TokenCounter::default(),
            token_events: 0,
            ended: false,
            flush_pause: None,
            yielded_before_error: false,
        };
        if let Rewrite::Drop { events: 0 } | Rewrite::Malformed { events: 0 } = s.rewrite {
            s.fire();
        }
        s
    }

    /// The fault fires now: stop reading the frontend's body and end the way the fault says.
    fn fire(&mut self) {
        self.inner = None;
        self.ended = true;
        self.buf.clear();
        match self.rewrite {
            Rewrite::Drop { .. } => self
                .out
                .push_back(Err(io::Error::other("scripted connection drop"))),
            Rewrite::Malformed { .. } => {
                self.out.push_back(Ok(Bytes::from_static(MALFORMED_EVENT)))
            }
            Rewrite::Abort { .. } => {}
        }
    }

    fn on_event(&mut self, event: Bytes) {
        match &self.rewrite {
            Rewrite::Drop { events } | Rewrite::Malformed { events } => {
                let limit = *events;
                let bearing = self.tokens.observe(&event);
                self.out.push_back(Ok(event));
                if bearing {
                    self.token_events += 1;
                    if self.token_events >= limit {
                        self.fire();
                    }
                }
            }
            Rewrite::Abort { finish } => {
                let event = abort_event(event, finish);
                self.out.push_back(Ok(event));
            }
        }
    }

    fn drain_events(&mut self) {
        while !self.ended {
            let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") else {
                return;
            };
            let event = self.buf.split_to(pos + 2).freeze();
            self.on_event(event);
        }
    }
}

impl Stream for SseRewrite {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = &mut *self;
        loop {
            if let Some(front) = this.out.front() {
                if front.is_err() && !this.yielded_before_error {
                    // Let hyper flush what was written so far before the error tears the
                    // connection down (it drops unflushed bytes on a body error).
                    let pause = this
                        .flush_pause
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(FLUSH_PAUSE)));
                    ready!(pause.as_mut().poll(cx));
                    this.yielded_before_error = true;
                }
                return Poll::Ready(this.out.pop_front());
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let Some(inner) = this.inner.as_mut() else {
                this.ended = true;
                continue;
            };
            match ready!(inner.poll_next_unpin(cx)) {
                Some(Ok(chunk)) => {
                    this.buf.extend_from_slice(&chunk);
                    this.drain_events();
                }
                Some(Err(e)) => {
                    this.inner = None;
                    this.ended = true;
                    this.out.push_back(Err(io::Error::other(e)));
                }
                None => {
                    this.inner = None;
                    this.ended = true;
                    if !this.buf.is_empty() {
                        let rest = this.buf.split().freeze();
                        this.out.push_back(Ok(rest));
                    }
                }
            }
        }
    }
}

/// The JSON payload of a `data: …\n\n` event (`None` for `[DONE]` or non-JSON).
fn payload(event: &[u8]) -> Option<Value> {
    let data = event.strip_prefix(b"data:")?;
    let data = data.strip_prefix(b" ").unwrap_or(data);
    serde_json::from_slice(data.trim_ascii_end()).ok()
}

/// `event` with `meta_info.finish_reason` replaced by `finish` when it is terminal (non-null);
/// other events unchanged.
fn abort_event(event: Bytes, finish: &Value) -> Bytes {
    let Some(mut v) = payload(&event) else {
        return event;
    };
    let Some(meta) = v.get_mut("meta_info").and_then(Value::as_object_mut) else {
        return event;
    };
    if meta.get("finish_reason").is_none_or(Value::is_null) {
        return event;
    }
    meta.insert("finish_reason".to_owned(), finish.clone());
    let mut out = b"data: ".to_vec();
    out.extend_from_slice(&to_vec(&v));
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Tells token-bearing events apart: a vLLM chunk with non-empty `choices[].token_ids`, or an
/// SGLang chunk whose cumulative `meta_info.completion_tokens` grew for its `index`.
#[derive(Debug, Default)]
struct TokenCounter {
    completion_tokens: HashMap<u64, u64>,
}

impl TokenCounter {
    fn observe(&mut self, event: &[u8]) -> bool {
        let Some(v) = payload(event) else {
            return false;
        };
        if let Some(choices) = v.get("choices").and_then(Value::as_array) {
            return choices.iter().any(|c| {
                c.get("token_ids")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty())
            });
        }
        let Some(tokens) = v
            .get("meta_info")
            .and_then(|m| m.get("completion_tokens"))
            .and_then(Value::as_u64)
        else {
            return false;
        };
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let seen = self.completion_tokens.entry(index).or_insert(0);
        let grew = tokens > *seen;
        *seen = tokens.max(*seen);
        grew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str) -> Bytes {
        Bytes::from(format!("data: {s}\n\n"))
    }

    #[test]
    fn token_bearing_events() {
        let mut c = TokenCounter::default();
        assert!(c.observe(&ev(r#"{"meta_info":{"completion_tokens":1}}"#)));
        assert!(!c.observe(&ev(r#"{"meta_info":{"completion_tokens":1}}"#)));
        assert!(c.observe(&ev(r#"{"index":1,"meta_info":{"completion_tokens":1}}"#)));
        assert!(c.observe(&ev(r#"{"meta_info":{"completion_tokens":2}}"#)));
        assert!(c.observe(&ev(r#"{"choices":[{"token_ids":[4]}]}"#)));
        assert!(!c.observe(&ev(r#"{"choices":[{"token_ids":[]}]}"#)));
        assert!(!c.observe(&ev(r#"{"choices":[],"usage":{}}"#)));
        assert!(!c.observe(b"data: [DONE]\n\n"));
        assert!(!c.observe(&ev(r#"{"error":{"message":"x"}}"#)));
    }

    #[test]
    fn abort_rewrites_only_terminal_chunks() {
        let finish =
            json!({"type":"abort","message":"m","status_code":400,"err_type":"BadRequestError"});
        let mid = ev(r#"{"output_ids":[1],"meta_info":{"id":"r","finish_reason":null}}"#);
        assert_eq!(abort_event(mid.clone(), &finish), mid);
        let done = Bytes::from_static(b"data: [DONE]\n\n");
        assert_eq!(abort_event(done.clone(), &finish), done);
        let last = ev(
            r#"{"output_ids":[1,2],"meta_info":{"id":"r","finish_reason":{"type":"length","length":2},"completion_tokens":2}}"#,
        );
        let out = abort_event(last, &finish);
        assert_eq!(
            std::str::from_utf8(&out).ok(),
            Some(
                "data: {\"output_ids\":[1,2],\"meta_info\":{\"id\":\"r\",\"finish_reason\":{\"type\":\"abort\",\"message\":\"m\",\"status_code\":400,\"err_type\":\"BadRequestError\"},\"completion_tokens\":2}}\n\n"
            )
        );
    }

    #[test]
    fn envelopes() {
        let v: Value = serde_json::from_slice(&status_envelope(
            Api::Sglang,
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
        ))
        .expect("json");
        assert_eq!(
            v,
            json!({"object":"error","message":"Service Unavailable","type":"503","param":null,"code":503})
        );
        let v: Value = serde_json::from_slice(&status_envelope(
            Api::Vllm,
            StatusCode::TOO_MANY_REQUESTS,
            "slow down",
        ))
        .expect("json");
        assert_eq!(
            v,
            json!({"error":{"message":"slow down","type":"Too Many Requests","param":null,"code":429}})
        );
    }
}
