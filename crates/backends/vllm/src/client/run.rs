//! The stream [`super::VllmEngine::generate`] returns: send the request on first poll, read the
//! SSE (or unary) body, decode, cancel.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use genfront_engine_http::{AbortCall, AbortGuard, CancelGrace, GraceWake, SseSplitter, chain};
use genfront_protocol::{EngineError, ErrorKind, NativeError, OutputStream};
use http::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::body::Upstream;
use super::decode::{Decoder, Flow, Item, Relay};
use crate::project::REQUEST_ID_PREFIX;

/// Largest SSE event, unary body or error body accepted from vLLM (routed experts of a long
/// prompt ride on one event).
pub(crate) const MAX_BODY_BYTES: usize = 512 << 20;
/// Time allowed for one `abort_requests` call.
const ABORT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a request needs from its engine.
#[derive(Clone)]
pub(crate) struct Shared {
    pub http: reqwest::Client,
    pub generate_url: Arc<str>,
    pub abort_url: Arc<str>,
    pub grace: Duration,
}

enum Phase {
    /// Not sent yet.
    Start(Box<Upstream>),
    /// Reading SSE events.
    Stream(reqwest::Response, SseSplitter),
    /// Reading a unary body.
    Unary(reqwest::Response, Vec<u8>),
    Done,
}

struct Run {
    shared: Shared,
    phase: Phase,
    decoder: Decoder,
    cancel: CancellationToken,
    /// Started when `cancel` fired: how long to wait for vLLM's `"abort"` finishes.
    grace: CancelGrace,
    /// `POST /inference/v1/abort_requests {"request_ids": ["generate-tokens-<dispatch id>"]}`,
    /// armed once the request is sent; sent when fired or dropped armed. Without a runtime the
    /// dropped connection is the abort (vLLM aborts on disconnect).
    abort: AbortGuard,
    queue: VecDeque<Item>,
    /// `Some(native id)` when the answer is relayed (scanned, not decoded:
    /// [`Decoder::relay_unary`], [`Decoder::relay_event`]).
    relay: Option<String>,
    /// vLLM's own error answers are kept on the errors ([`EngineError::native`]).
    native_errors: bool,
}

/// The output stream of one request.
pub(crate) fn stream(
    shared: Shared,
    upstream: Upstream,
    decoder: Decoder,
    cancel: CancellationToken,
) -> OutputStream {
    let native_id = format!("{REQUEST_ID_PREFIX}{}", upstream.request_id);
    let relay = upstream.relay.then(|| native_id.clone());
    let native_errors = upstream.native_errors;
    let abort = AbortGuard::new(AbortCall::new(
        shared.http.clone(),
        Arc::clone(&shared.abort_url),
        &serde_json::json!({ "request_ids": [native_id] }),
        ABORT_TIMEOUT,
    ));
    let run = Run {
        grace: CancelGrace::new(shared.grace),
        shared,
        phase: Phase::Start(Box::new(upstream)),
        decoder,
        cancel,
        abort,
        queue: VecDeque::new(),
        relay,
        native_errors,
    };
    // Boxed: each item moves a pointer, not the whole state, through the unfold.
    Box::pin(futures::stream::unfold(
        Box::new(run),
        |mut run| async move {
            let item = run.next().await?;
            Some((item, run))
        },
    ))
}

/// A stream that yields `error` and ends.
pub(crate) fn failed(error: EngineError) -> OutputStream {
    Box::pin(futures::stream::iter([Err(error)]))
}

impl Run {
    async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if matches!(self.phase, Phase::Done) {
                return None;
            }
            self.step().await;
        }
    }

    fn finish(&mut self, flow: Flow) {
        if flow == Flow::Done {
            self.phase = Phase::Done;
        }
        if self.decoder.all_finished() {
            // Nothing left to abort at the engine.
            self.abort.disarm();
        }
    }

    /// `cancel` fired: tell vLLM now, then wait (at most the grace period) for its `"abort"`
    /// finishes, which carry the tokens produced meanwhile.
    fn on_cancel(&mut self) {
        self.decoder.set_cancelled();
        self.abort.fire();
        self.abort.disarm();
        self.grace.start();
    }

    /// The grace period is over (or the body broke after a cancel): made-up `Cancelled` items.
    fn give_up(&mut self) {
        self.decoder.cancel_rest(&mut self.queue);
        self.phase = Phase::Done;
    }

    async fn step(&mut self) {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Start(upstream) => self.send(*upstream).await,
            Phase::Stream(response, sse) => self.read_stream(response, sse).await,
            Phase::Unary(response, buf) => self.read_unary(response, buf).await,
            Phase::Done => {}
        }
    }

    async fn send(&mut self, upstream: Upstream) {
        if self.cancel.is_cancelled() {
            // Never sent: nothing to abort.
            self.decoder.set_cancelled();
            self.give_up();
            return;
        }
        let mut call = self
            .shared
            .http
            .post(&*self.shared.generate_url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("x-request-id", upstream.request_id.as_str());
        if !upstream.unary {
            call = call.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(rank) = upstream.dp_rank {
            call = call.header("x-data-parallel-rank", rank.to_string());
        }
        if let Some(session) = &upstream.session_id {
            call = call.header("x-session-id", session.as_str());
        }
        let unary = upstream.unary;
        let call = call.body(upstream.body).send();
        tokio::pin!(call);
        self.abort.arm();
        let response = tokio::select! {
            biased;
            () = self.cancel.cancelled() => {
                self.on_cancel();
                if !unary {
                    self.give_up();
                    return;
                }
                // vLLM writes a unary answer's headers with its body, when the request ends:
                // the aborted answer (its `"abort"` finish with the tokens produced meanwhile)
                // is still coming, within the grace period.
                tokio::select! {
                    biased;
                    _ = self.grace.wait(&self.cancel) => {
                        self.give_up();
                        return;
                    }
                    response = &mut call => response,
                }
            }
            response = &mut call => response,
        };
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                if e.is_connect() {
                    self.abort.disarm();
                }
                self.queue.push_back(Err(genfront_engine_http::send_error(
                    &format!("vLLM {}", self.shared.generate_url),
                    &e,
                )));
                return;
            }
        };
        if !response.status().is_success() {
            // Not admitted: nothing runs at the engine.
            self.abort.disarm();
            if !self.native_errors {
                let error = genfront_engine_http::error_from_response("vLLM", response).await;
                self.queue.push_back(Err(error));
                return;
            }
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = genfront_engine_http::read_error_body(response).await;
            let error = genfront_engine_http::status_error("vLLM", status, &headers, &body);
            let engines_own = !(matches!(status, 401 | 403)
                || (matches!(status, 404 | 405) && error.kind == ErrorKind::Internal));
            // A 401/403 refuses genfront's own credentials and a 404/405 without vLLM's
            // envelope is a server without the route: genfront's fault, kept typed (500).
            let error = match genfront_engine_http::native_error(
                crate::FORMAT_NAME,
                status,
                &headers,
                body,
            )
            .filter(|_| engines_own)
            {
                Some(native) => error.with_native(native),
                None => error,
            };
            self.queue.push_back(Err(error));
            return;
        }
        self.phase = if unary {
            Phase::Unary(response, Vec::new())
        } else {
            Phase::Stream(response, SseSplitter::with_limit(MAX_BODY_BYTES))
        };
    }

    /// Wait for the next body chunk, the cancel token or the grace deadline.
    async fn next_chunk(&mut self, response: &mut reqwest::Response) -> Next {
        tokio::select! {
            biased;
            wake = self.grace.wait(&self.cancel) => match wake {
                GraceWake::Cancelled => Next::Cancelled,
                GraceWake::Expired => Next::Deadline,
            },
            chunk = response.chunk() => match chunk {
                Ok(Some(bytes)) => Next::Bytes(bytes),
                Ok(None) => Next::End,
                Err(e) => Next::Broken(chain(&e)),
            },
        }
    }

    async fn read_stream(&mut self, mut response: reqwest::Response, mut sse: SseSplitter) {
        match self.next_chunk(&mut response).await {
            Next::Cancelled => {
                self.on_cancel();
                self.phase = Phase::Stream(response, sse);
            }
            Next::Deadline => self.give_up(),
            Next::Bytes(bytes) => {
                sse.push(&bytes);
                loop {
                    match sse.next_event() {
                        Ok(Some(event)) => {
                            let event = match self.relay.as_deref() {
                                Some(native_id) => match self.decoder.relay_event(event, native_id)
                                {
                                    Relay::Output(out) => {
                                        self.queue.push_back(Ok(*out));
                                        self.finish(Flow::More);
                                        continue;
                                    }
                                    Relay::Typed(event) => event,
                                },
                                None => event,
                            };
                            let flow = self.decoder.on_event(&event, &mut self.queue);
                            if self.native_errors && flow == Flow::Done {
                                self.keep_native_event(&event);
                            }
                            self.finish(flow);
                            if flow == Flow::Done {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(too_large) => {
                            self.queue.push_back(Err(EngineError::internal(format!(
                                "vLLM sent an SSE event larger than {} bytes",
                                too_large.limit
                            ))));
                            return;
                        }
                    }
                }
                if self.grace.started() && self.decoder.all_finished() {
                    // Cancelled and every choice has its finish: no need to wait for [DONE].
                    let flow = self.decoder.end(&mut self.queue, "after the cancellation");
                    self.finish(flow);
                    return;
                }
                self.phase = Phase::Stream(response, sse);
            }
            Next::End => {
                let flow = self.decoder.end(&mut self.queue, "without [DONE]");
                self.finish(flow);
            }
            Next::Broken(why) => self.broken(&why),
        }
    }

    async fn read_unary(&mut self, mut response: reqwest::Response, mut buf: Vec<u8>) {
        match self.next_chunk(&mut response).await {
            Next::Cancelled => {
                self.on_cancel();
                self.phase = Phase::Unary(response, buf);
            }
            Next::Deadline => self.give_up(),
            Next::Bytes(bytes) => {
                if buf.len() + bytes.len() > MAX_BODY_BYTES {
                    self.queue.push_back(Err(EngineError::internal(format!(
                        "vLLM sent a response larger than {MAX_BODY_BYTES} bytes"
                    ))));
                    return;
                }
                buf.extend_from_slice(&bytes);
                self.phase = Phase::Unary(response, buf);
            }
            Next::End => {
                let buf = match self.relay.as_deref() {
                    Some(native_id) => match self.decoder.relay_unary(buf, native_id) {
                        Relay::Output(out) => {
                            self.queue.push_back(Ok(*out));
                            self.finish(Flow::Done);
                            return;
                        }
                        Relay::Typed(buf) => buf,
                    },
                    None => buf,
                };
                let flow = self.decoder.on_unary(&buf, &mut self.queue);
                self.finish(flow);
            }
            Next::Broken(why) => self.broken(&why),
        }
    }

    /// The stream ended on `event`: when that was vLLM's `{"error": …}` event, keep its payload
    /// on the error it became ([`EngineError::native`]).
    fn keep_native_event(&mut self, event: &[u8]) {
        let Some(Err(error)) = self.queue.back_mut() else {
            return;
        };
        if error.native.is_some() || !is_error_event(event) {
            return;
        }
        error.native = Some(Box::new(NativeError {
            format: crate::FORMAT_NAME,
            status: None,
            body: bytes::Bytes::copy_from_slice(event),
            content_type: None,
            retry_after: None,
        }));
    }

    /// The body broke mid-way.
    fn broken(&mut self, why: &str) {
        if self.grace.started() {
            self.give_up();
            return;
        }
        self.decoder.release_held(&mut self.queue);
        if !self.decoder.all_finished() {
            self.queue.push_back(Err(EngineError::new(
                ErrorKind::StreamIncomplete,
                format!("vLLM response body broke: {why}"),
            )));
        }
    }
}

enum Next {
    Cancelled,
    Deadline,
    Bytes(bytes::Bytes),
    End,
    Broken(String),
}

/// Whether an SSE event's payload is vLLM's `{"error": …}` event (`create_streaming_error_response`),
/// as opposed to a chunk that failed to decode.
fn is_error_event(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data)
        .is_ok_and(|v| v.get("error").is_some_and(|e| !e.is_null()))
}
