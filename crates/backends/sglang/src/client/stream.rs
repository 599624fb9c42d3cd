//! The per-request output stream: dispatch, SSE reading, cancellation and aborts.
//!
//! Each choice is one `POST /generate` read by a [`Choice`] state machine
//! (start → sending → reading → draining → done). Cancellation:
//!
//! - **`cancel` fires** before anything was sent: the choice ends with `Cancelled` at once. After
//!   it was sent: `POST /abort_request {"rid": <dispatch id>, "abort_all": false}` goes out (once
//!   per request, from a spawned task) and the stream keeps reading until SGLang's abort frame
//!   (`finish_reason {"type":"abort"}` with the tokens so far), which becomes the `Cancelled`
//!   finish. If SGLang still sends a token frame afterwards (the abort may have raced ahead of the
//!   request's registration) the abort is sent once more. If no terminal frame comes within
//!   [`SglangEngineOptions::cancel_grace`](super::SglangEngineOptions::cancel_grace), or the
//!   stream breaks, the client ends the choice with `Cancelled{"Aborted"}` itself and drops the
//!   HTTP stream. New tokens carried by the abort frame are delivered as a delta of their own, so
//!   the `Cancelled` item carries none (the [`genfront_protocol::Engine`] contract).
//! - **The stream is dropped** before every choice reached its terminal frame: the abort is sent
//!   from `Drop` (on the current Tokio runtime, if any) and the HTTP streams are dropped.
//! - For `n > 1` the choices' rids share the dispatch id as prefix, so the one abort reaches all.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use genfront_engine_http::{AbortCall, CancelGrace, GraceWake, SseSplitter};
use genfront_protocol::{
    EngineError, EngineOutput, EngineRequest, ErrorKind, FinishReason, NativeError, OutputStream,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::body::{self, Caps, Dispatch};
use super::decode::{DecodeConfig, FrameDecoder, Relay};

/// SGLang's message for a stream that ended before its terminal frame (the Dynamo sidecar's
/// wording, `spec/sglang-native.md` §9.4): `StreamIncomplete` for a body closed, or a `[DONE]`,
/// before a terminal frame.
pub const CLOSED_EARLY: &str = "SGLang /generate closed before a terminal response";

type Item = Result<EngineOutput, EngineError>;

/// The largest unary answer accepted (routed experts of long sequences reach tens of MB).
const UNARY_BODY_LIMIT: usize = 1 << 30;

/// How long a choice keeps retrying a connect that failed for lack of a local resource (file
/// descriptors, ephemeral ports) before it gives up. Such a failure happens before anything was
/// sent, so a retry cannot duplicate work on the engine; descriptors free up as other streams end.
const EXHAUSTED_RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);
/// First and largest pause between those retries (doubling in between).
const EXHAUSTED_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(20);
const EXHAUSTED_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether a connect error was caused by local resource exhaustion (`EMFILE`, `ENFILE`,
/// `EADDRNOTAVAIL`) rather than by the engine (refused, unreachable, timed out).
fn local_exhaustion(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            // ENFILE and EMFILE are 23 and 24 on Linux, macOS and the BSDs.
            return io.kind() == std::io::ErrorKind::AddrNotAvailable
                || (cfg!(unix) && matches!(io.raw_os_error(), Some(23 | 24)));
        }
        source = cause.source();
    }
    false
}

/// SGLang's default abort message, used for the `Cancelled` finishes the client makes itself.
const ABORTED: &str = "Aborted";

/// Start generating `request` (lazily: nothing is sent before the first poll).
pub(crate) fn generate(
    inner: Arc<Inner>,
    request: EngineRequest,
    cancel: CancellationToken,
) -> OutputStream {
    let rid = if request.request_id.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        request.request_id.clone()
    };
    let caps = Caps {
        typed_routed_experts: inner.opts.experts_shape.is_some(),
        sampling_mask: inner.opts.sampling_mask,
    };
    let dispatches = match body::plan(&request, &rid, &inner.info, caps) {
        Ok(d) => d,
        Err(e) => return Box::pin(stream::iter([Err(e)])),
    };
    let call = AbortCall::new(
        inner.http.clone(),
        Arc::clone(&inner.abort_url),
        &serde_json::json!({"rid": rid, "abort_all": false}),
        inner.opts.abort_timeout,
    )
    .counted(Arc::clone(&inner.aborts_sent));
    let guard = Arc::new(AbortGuard {
        abort: genfront_engine_http::AbortGuard::new(call),
        open: AtomicUsize::new(dispatches.len()),
    });
    let n_dispatch = dispatches.len();
    let mut choices: Vec<BoxStream<'static, Item>> = dispatches
        .into_iter()
        .map(|d| {
            // Relay: the request asks for it and this is SGLang's answer to the whole request
            // (one dispatch, no P/D leg), never a split sample: its unary answer, or its stream
            // when the server streams cumulatively (the SGLang format asks for stream relay
            // only on a cumulative route). Only an SGLang client's own request: another
            // format's relay flag means its own engine's bytes, never SGLang's.
            let relay = request.output.relay
                && request.native.format == crate::FORMAT_NAME
                && n_dispatch == 1
                && request.pd.is_none()
                && (d.unary || !inner.incremental);
            // Native errors: SGLang's own error answer is kept for an SGLang client's own
            // request (not a P/D leg) whose call has the client's own mode, so the client gets
            // it verbatim (`EngineError::native`).
            let native_errors = request.native.format == crate::FORMAT_NAME
                && request.pd.is_none()
                && d.unary != request.output.stream;
            // A unary answer is one cumulative frame.
            let cfg = DecodeConfig::for_request(
                &request,
                d.index,
                inner.incremental && !d.unary,
                &inner.info.eos_token_ids,
                inner.opts.experts_shape,
            );
            Choice::new(
                Arc::clone(&inner),
                Arc::clone(&guard),
                cancel.clone(),
                d,
                cfg,
                relay,
            )
            .keep_native_errors(native_errors)
            .into_stream()
        })
        .collect();
    if choices.len() == 1
        && let Some(only) = choices.pop()
    {
        return only;
    }
    // Interleave the choices; the first error ends the whole stream (the contract's "one `Err`
    // item"), and dropping the rest aborts them.
    Box::pin(stream::select_all(choices).scan(false, |failed, item| {
        let out = if *failed {
            None
        } else {
            *failed = item.is_err();
            Some(item)
        };
        futures::future::ready(out)
    }))
}

// === impl AbortGuard ===

/// The request's abort (`POST /abort_request {"rid": <dispatch id>, "abort_all": false}`), shared
/// by its choices: armed when a choice is sent, disarmed when every choice delivered its terminal
/// item; sent on demand (cancel, errors) or from `Drop` while armed (the transport's guard).
#[derive(Debug)]
struct AbortGuard {
    abort: genfront_engine_http::AbortGuard,
    /// Choices without a terminal item yet.
    open: AtomicUsize,
}

impl AbortGuard {
    /// A choice delivered its terminal item; after the last one there is nothing to abort.
    fn choice_done(&self) {
        let before = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before == Ok(1) {
            self.abort.disarm();
        }
    }
}

impl std::ops::Deref for AbortGuard {
    type Target = genfront_engine_http::AbortGuard;

    fn deref(&self) -> &Self::Target {
        &self.abort
    }
}

// === impl Choice ===

/// Where a choice's HTTP exchange is.
enum Phase {
    /// Nothing sent yet.
    Start,
    /// Waiting for the response headers.
    Sending(BoxFuture<'static, reqwest::Result<reqwest::Response>>),
    /// Reading frames.
    Reading(BoxStream<'static, reqwest::Result<Bytes>>),
    /// Terminal frame seen: reading the rest of the body (`[DONE]`, then the end, so the pooled
    /// connection can be reused), until the deadline.
    Draining(BoxStream<'static, reqwest::Result<Bytes>>, Instant),
    /// Finished; the stream ends once `pending` is empty.
    Done,
}

/// What woke a choice up.
enum Wake {
    Cancel,
    Deadline,
    Response(reqwest::Result<reqwest::Response>),
    Chunk(Option<reqwest::Result<Bytes>>),
}

impl From<GraceWake> for Wake {
    fn from(wake: GraceWake) -> Self {
        match wake {
            GraceWake::Cancelled => Wake::Cancel,
            GraceWake::Expired => Wake::Deadline,
        }
    }
}

/// One choice: one SGLang request and its stream.
struct Choice {
    inner: Arc<Inner>,
    guard: Arc<AbortGuard>,
    cancel: CancellationToken,
    /// The request body (kept, cheaply cloned, for a retried connect).
    body: Bytes,
    /// Pause before the next connect attempt, after a resource-exhaustion connect failure.
    retry_at: Option<Instant>,
    /// When such retries stop (set at the first one).
    retry_until: Option<Instant>,
    decoder: FrameDecoder,
    splitter: SseSplitter,
    /// `Some(body so far)` when SGLang answers unary (see [`Dispatch::unary`]).
    unary: Option<Vec<u8>>,
    /// The dispatch rid, when the unary answer is relayed (scanned, not decoded).
    relay: Option<String>,
    /// SGLang's own error answers (an HTTP error, an `{"error":…}` event) are kept on the
    /// error as [`EngineError::native`].
    native_errors: bool,
    phase: Phase,
    pending: VecDeque<Item>,
    /// Started when `cancel` was seen after sending.
    grace: CancelGrace,
}

impl Choice {
    fn new(
        inner: Arc<Inner>,
        guard: Arc<AbortGuard>,
        cancel: CancellationToken,
        dispatch: Dispatch,
        cfg: DecodeConfig,
        relay: bool,
    ) -> Self {
        let grace = CancelGrace::new(inner.opts.cancel_grace);
        Self {
            relay: relay.then(|| dispatch.rid.clone()),
            inner,
            guard,
            cancel,
            body: Bytes::from(dispatch.body),
            retry_at: None,
            retry_until: None,
            decoder: FrameDecoder::new(cfg),
            splitter: SseSplitter::new(),
            unary: dispatch.unary.then(Vec::new),
            native_errors: false,
            phase: Phase::Start,
            pending: VecDeque::new(),
            grace,
        }
    }

    /// Keep SGLang's own error answers on the errors ([`EngineError::native`]) when `keep`.
    fn keep_native_errors(mut self, keep: bool) -> Self {
        self.native_errors = keep;
        self
    }

    /// The choice as a stream. The state is boxed so that each item moves a pointer, not the
    /// whole choice, in and out of the stream's future.
    fn into_stream(self) -> BoxStream<'static, Item> {
        Box::pin(stream::unfold(Box::new(self), |mut choice| async move {
            let item = choice.next().await?;
            Some((item, choice))
        }))
    }

    /// The next item, or `None` at the end.
    async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            let wake = match &mut self.phase {
                Phase::Done => return None,
                Phase::Start => {
                    if let Some(at) = self.retry_at.take() {
                        tokio::select! {
                            biased;
                            () = self.cancel.cancelled() => {},
                            () = tokio::time::sleep_until(at) => {},
                        }
                        continue;
                    }
                    if self.cancel.is_cancelled() {
                        self.end_cancelled();
                        continue;
                    }
                    let accept = if self.unary.is_some() {
                        "application/json"
                    } else {
                        "text/event-stream"
                    };
                    let req = self
                        .inner
                        .http
                        .post(&self.inner.generate_url)
                        .header(ACCEPT, accept)
                        .header(CONTENT_TYPE, "application/json")
                        .body(self.body.clone());
                    self.guard.arm();
                    self.phase = Phase::Sending(Box::pin(req.send()));
                    continue;
                }
                Phase::Sending(fut) => tokio::select! {
                    biased;
                    w = self.grace.wait(&self.cancel) => w.into(),
                    r = fut => Wake::Response(r),
                },
                Phase::Reading(body) => {
                    match self.splitter.next_event() {
                        Ok(Some(event)) => {
                            self.on_frame(event);
                            continue;
                        }
                        Ok(None) => {}
                        Err(too_large) => {
                            self.too_large(too_large);
                            continue;
                        }
                    }
                    tokio::select! {
                        biased;
                        w = self.grace.wait(&self.cancel) => w.into(),
                        c = body.next() => Wake::Chunk(c),
                    }
                }
                Phase::Draining(body, until) => {
                    let until = *until;
                    tokio::select! {
                        c = body.next() => if !matches!(c, Some(Ok(_))) {
                            self.phase = Phase::Done;
                        },
                        () = tokio::time::sleep_until(until) => self.phase = Phase::Done,
                    }
                    continue;
                }
            };
            match wake {
                Wake::Cancel => {
                    self.guard.fire();
                    self.grace.start();
                }
                Wake::Deadline => self.end_cancelled(),
                Wake::Response(Ok(resp)) => self.on_response(resp).await,
                Wake::Response(Err(e)) => {
                    if e.is_connect() && !self.grace.started() && local_exhaustion(&e) {
                        let now = Instant::now();
                        let until = *self.retry_until.get_or_insert(now + EXHAUSTED_RETRY_BUDGET);
                        if now < until {
                            let waited = self.retry_until.map_or(std::time::Duration::ZERO, |u| {
                                EXHAUSTED_RETRY_BUDGET.saturating_sub(u - now)
                            });
                            let pause = waited.clamp(EXHAUSTED_BACKOFF_MIN, EXHAUSTED_BACKOFF_MAX);
                            self.retry_at = Some(now + pause);
                            self.phase = Phase::Start;
                            continue;
                        }
                    }
                    if !e.is_connect() {
                        // The request may have reached the server.
                        self.guard.fire();
                    }
                    self.fail(genfront_engine_http::send_error("SGLang /generate", &e));
                }
                Wake::Chunk(Some(Ok(bytes))) if self.unary.is_some() => {
                    let body = self.unary.get_or_insert_with(Vec::new);
                    if body.len() + bytes.len() > UNARY_BODY_LIMIT {
                        self.guard.fire();
                        self.fail(EngineError::internal(
                            "SGLang sent a unary answer larger than the client accepts",
                        ));
                    } else {
                        body.extend_from_slice(&bytes);
                    }
                }
                Wake::Chunk(None) if self.unary.is_some() => {
                    let body = self.unary.take().unwrap_or_default();
                    let body = match self.relay.as_deref() {
                        Some(rid) => match self.decoder.relay(body, rid) {
                            Relay::Output(out) => {
                                self.guard.choice_done();
                                self.pending.push_back(Ok(*out));
                                self.phase = Phase::Done;
                                continue;
                            }
                            Relay::Failed(e) => {
                                self.guard.fire();
                                self.fail(e);
                                continue;
                            }
                            Relay::Typed(body) => body,
                        },
                        None => body,
                    };
                    self.on_event(&body);
                    if matches!(self.phase, Phase::Reading(_) | Phase::Draining(..)) {
                        if self
                            .pending
                            .back()
                            .is_some_and(|i| i.as_ref().is_ok_and(|o| o.finish_reason.is_some()))
                        {
                            self.phase = Phase::Done;
                        } else {
                            self.fail(EngineError::new(ErrorKind::StreamIncomplete, CLOSED_EARLY));
                        }
                    }
                }
                Wake::Chunk(Some(Ok(bytes))) => self.splitter.push(&bytes),
                Wake::Chunk(Some(Err(e))) => {
                    self.guard.fire();
                    self.fail(EngineError::new(
                        ErrorKind::StreamIncomplete,
                        format!("{CLOSED_EARLY} (reading the stream failed: {e})"),
                    ));
                }
                Wake::Chunk(None) => {
                    // End of body: a last event may lack its closing blank line.
                    loop {
                        match self.splitter.finish() {
                            Ok(Some(event)) => self.on_frame(event),
                            Ok(None) => break,
                            Err(too_large) => {
                                self.too_large(too_large);
                                break;
                            }
                        }
                        if !matches!(self.phase, Phase::Reading(_)) {
                            break;
                        }
                    }
                    if matches!(self.phase, Phase::Reading(_)) {
                        self.fail(EngineError::new(ErrorKind::StreamIncomplete, CLOSED_EARLY));
                    }
                }
            }
        }
    }

    /// Response headers arrived.
    async fn on_response(&mut self, resp: reqwest::Response) {
        if resp.status().is_success() {
            self.phase = Phase::Reading(Box::pin(resp.bytes_stream()));
            return;
        }
        if !self.native_errors {
            let err = genfront_engine_http::error_from_response("SGLang", resp).await;
            self.fail(err);
            return;
        }
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = genfront_engine_http::read_error_body(resp).await;
        let err = genfront_engine_http::status_error("SGLang", status, &headers, &body);
        let err =
            match genfront_engine_http::native_error(crate::FORMAT_NAME, status, &headers, body)
                .filter(|_| engines_own(&err))
            {
                Some(native) => err.with_native(native),
                None => err,
            };
        self.fail(err);
    }

    /// An SSE event larger than the splitter accepts.
    fn too_large(&mut self, too_large: genfront_engine_http::EventTooLarge) {
        self.guard.fire();
        self.fail(EngineError::internal(format!(
            "SGLang sent an SSE event larger than the client accepts ({too_large})"
        )));
    }

    /// One SSE event of a relayed stream: scanned and handed over as the engine's bytes
    /// ([`FrameDecoder::relay_frame`]), or decoded when the scan does not take it (`[DONE]`,
    /// error frames) or the stream is not relayed.
    fn on_frame(&mut self, event: Vec<u8>) {
        let event = match self.relay.as_deref() {
            Some(rid) if self.unary.is_none() => match self.decoder.relay_frame(event, rid) {
                Relay::Output(out) => {
                    // Unboxed straight into the queue: one move of the output, not two.
                    if out.finish_reason.is_some() {
                        self.guard.choice_done();
                        self.pending.push_back(Ok(*out));
                        self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
                            Phase::Reading(body) => Phase::Draining(
                                body,
                                Instant::now() + self.inner.opts.drain_timeout,
                            ),
                            _ => Phase::Done,
                        };
                    } else {
                        if self.grace.started() {
                            self.guard.fire_again();
                        }
                        self.pending.push_back(Ok(*out));
                    }
                    return;
                }
                Relay::Failed(e) => {
                    self.guard.fire();
                    self.fail(e);
                    return;
                }
                Relay::Typed(event) => event,
            },
            _ => event,
        };
        self.on_event(&event);
    }

    /// One SSE event of the body.
    fn on_event(&mut self, data: &[u8]) {
        if data == b"[DONE]" {
            self.fail(EngineError::new(ErrorKind::StreamIncomplete, CLOSED_EARLY));
            return;
        }
        match self.decoder.decode(data) {
            Ok(out) if out.finish_reason.is_some() => {
                self.guard.choice_done();
                let cancelled = matches!(out.finish_reason, Some(FinishReason::Cancelled { .. }));
                if self.grace.started() && cancelled && !out.token_ids.is_empty() {
                    // Tokens first, then a `Cancelled` item without tokens.
                    let mut tokens = out;
                    let end = EngineOutput {
                        index: tokens.index,
                        finish_reason: tokens.finish_reason.take(),
                        usage: tokens.usage,
                        ..EngineOutput::default()
                    };
                    self.pending.push_back(Ok(tokens));
                    self.pending.push_back(Ok(end));
                } else {
                    self.pending.push_back(Ok(out));
                }
                self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
                    Phase::Reading(body) => {
                        Phase::Draining(body, Instant::now() + self.inner.opts.drain_timeout)
                    }
                    _ => Phase::Done,
                };
            }
            Ok(out) => {
                if self.grace.started() {
                    self.guard.fire_again();
                }
                self.pending.push_back(Ok(out));
            }
            Err(e) => {
                // A broken frame leaves the server's state unknown; an abort is harmless.
                self.guard.fire();
                let e = if self.native_errors && self.unary.is_none() && is_error_event(data) {
                    e.with_native(NativeError {
                        format: crate::FORMAT_NAME,
                        status: None,
                        body: Bytes::copy_from_slice(data),
                        content_type: None,
                        retry_after: None,
                    })
                } else {
                    e
                };
                self.fail(e);
            }
        }
    }

    /// End the choice with `err` — or, once the client asked to cancel, with `Cancelled`.
    fn fail(&mut self, err: EngineError) {
        if self.grace.started() {
            self.end_cancelled();
            return;
        }
        self.guard.choice_done();
        self.pending.push_back(Err(err));
        self.phase = Phase::Done;
    }

    /// End the choice with a `Cancelled` finish made by the client.
    fn end_cancelled(&mut self) {
        self.guard.choice_done();
        self.pending.push_back(Ok(EngineOutput {
            index: self.decoder.config().index,
            finish_reason: Some(FinishReason::Cancelled {
                message: ABORTED.to_owned(),
            }),
            usage: Some(self.decoder.usage()),
            ..EngineOutput::default()
        }));
        self.phase = Phase::Done;
    }
}

/// Whether an HTTP error is the engine's answer to the request rather than a sign that genfront
/// reached the wrong thing: a 401/403 refuses genfront's own credentials (`--worker` key), and a
/// 404/405 without the engine's envelope is a server that does not serve the route; those stay
/// typed (500), as the client's own request is not what failed.
pub(crate) fn engines_own(err: &EngineError) -> bool {
    !(matches!(err.status_code, Some(401 | 403))
        || (matches!(err.status_code, Some(404 | 405)) && err.kind == ErrorKind::Internal))
}

/// Whether an SSE event's payload is SGLang's `{"error": …}` event (what its stream handler
/// yields for a `ValueError`), as opposed to a frame that failed to decode.
fn is_error_event(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data)
        .is_ok_and(|v| v.get("error").is_some_and(|e| !e.is_null()))
}
