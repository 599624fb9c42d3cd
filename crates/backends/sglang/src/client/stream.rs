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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use genfront_protocol::{
    EngineError, EngineOutput, EngineRequest, ErrorKind, FinishReason, OutputStream,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::body::{self, Caps, Dispatch};
use super::decode::{DecodeConfig, FrameDecoder};
use super::errors::{self, CLOSED_EARLY};
use super::sse::SseSplitter;

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
    let guard = Arc::new(AbortGuard {
        inner: Arc::clone(&inner),
        rid,
        open: AtomicUsize::new(dispatches.len()),
        dispatched: AtomicBool::new(false),
        fired: AtomicBool::new(false),
        resent: AtomicBool::new(false),
    });
    let mut choices: Vec<BoxStream<'static, Item>> = dispatches
        .into_iter()
        .map(|d| {
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
            )
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

/// Sends `POST /abort_request` for a request: on demand (cancel, errors) or, when dropped while
/// a choice is still open, from `Drop`.
#[derive(Debug)]
struct AbortGuard {
    inner: Arc<Inner>,
    rid: String,
    /// Choices without a terminal item yet.
    open: AtomicUsize,
    /// A `/generate` was sent (nothing to abort before that).
    dispatched: AtomicBool,
    /// The abort was sent.
    fired: AtomicBool,
    /// The abort was sent a second time.
    resent: AtomicBool,
}

impl AbortGuard {
    /// Send the abort, unless it was already sent.
    fn fire(&self) {
        if !self.fired.swap(true, Ordering::AcqRel) {
            self.send();
        }
    }

    /// Send the abort a second time (once): a token frame arrived after the first one.
    fn fire_again(&self) {
        if self.fired.load(Ordering::Acquire) && !self.resent.swap(true, Ordering::AcqRel) {
            self.send();
        }
    }

    /// A choice delivered its terminal item.
    fn choice_done(&self) {
        let _ = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Fire-and-forget `POST /abort_request` on the current runtime.
    fn send(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = &self.inner;
        inner.aborts_sent.fetch_add(1, Ordering::Relaxed);
        let req = inner
            .http
            .post(&inner.abort_url)
            .timeout(inner.opts.abort_timeout)
            .json(&serde_json::json!({"rid": self.rid, "abort_all": false}));
        handle.spawn(async move {
            let _ = req.send().await;
        });
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if self.open.load(Ordering::Acquire) > 0 && self.dispatched.load(Ordering::Acquire) {
            self.fire();
        }
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
    phase: Phase,
    pending: VecDeque<Item>,
    /// Set when `cancel` was seen after sending: the end of the grace period.
    deadline: Option<Instant>,
}

/// Sleep until `deadline`, or forever.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Choice {
    fn new(
        inner: Arc<Inner>,
        guard: Arc<AbortGuard>,
        cancel: CancellationToken,
        dispatch: Dispatch,
        cfg: DecodeConfig,
    ) -> Self {
        Self {
            inner,
            guard,
            cancel,
            body: Bytes::from(dispatch.body),
            retry_at: None,
            retry_until: None,
            decoder: FrameDecoder::new(cfg),
            splitter: SseSplitter::new(),
            unary: dispatch.unary.then(Vec::new),
            phase: Phase::Start,
            pending: VecDeque::new(),
            deadline: None,
        }
    }

    fn into_stream(self) -> BoxStream<'static, Item> {
        Box::pin(stream::unfold(self, |mut choice| async move {
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
                    self.guard.dispatched.store(true, Ordering::Release);
                    self.phase = Phase::Sending(Box::pin(req.send()));
                    continue;
                }
                Phase::Sending(fut) => tokio::select! {
                    biased;
                    () = self.cancel.cancelled(), if self.deadline.is_none() => Wake::Cancel,
                    () = sleep_until(self.deadline) => Wake::Deadline,
                    r = fut => Wake::Response(r),
                },
                Phase::Reading(body) => {
                    if let Some(event) = self.splitter.next_event() {
                        self.on_event(&event);
                        continue;
                    }
                    tokio::select! {
                        biased;
                        () = self.cancel.cancelled(), if self.deadline.is_none() => Wake::Cancel,
                        () = sleep_until(self.deadline) => Wake::Deadline,
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
                    self.deadline = Some(Instant::now() + self.inner.opts.cancel_grace);
                }
                Wake::Deadline => self.end_cancelled(),
                Wake::Response(Ok(resp)) => self.on_response(resp).await,
                Wake::Response(Err(e)) => {
                    if e.is_connect() && self.deadline.is_none() && local_exhaustion(&e) {
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
                    if e.is_connect() {
                        self.inner.set_ready(false);
                    } else {
                        // The request may have reached the server.
                        self.guard.fire();
                    }
                    self.fail(errors::send_error(&e));
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
                Wake::Chunk(Some(Ok(bytes))) => {
                    if self.splitter.push(&bytes).is_err() {
                        self.guard.fire();
                        self.fail(EngineError::internal(
                            "SGLang sent an SSE event larger than the client accepts",
                        ));
                    }
                }
                Wake::Chunk(Some(Err(e))) => {
                    self.guard.fire();
                    self.fail(EngineError::new(
                        ErrorKind::StreamIncomplete,
                        format!("{CLOSED_EARLY} (reading the stream failed: {e})"),
                    ));
                }
                Wake::Chunk(None) => {
                    // End of body: a last event may lack its closing blank line.
                    if let Some(event) = self.splitter.finish() {
                        self.on_event(&event);
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
        let status = resp.status();
        if status.is_success() {
            self.inner.set_ready(true);
            self.phase = Phase::Reading(Box::pin(resp.bytes_stream()));
            return;
        }
        let body = read_limited(resp).await;
        let err = errors::http_error(status.as_u16(), &body);
        if err.kind == ErrorKind::Unavailable {
            self.inner.set_ready(false);
        }
        self.fail(err);
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
                if self.deadline.is_some() && cancelled && !out.token_ids.is_empty() {
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
                if self.deadline.is_some() {
                    self.guard.fire_again();
                }
                self.pending.push_back(Ok(out));
            }
            Err(e) => {
                // A broken frame leaves the server's state unknown; an abort is harmless.
                self.guard.fire();
                self.fail(e);
            }
        }
    }

    /// End the choice with `err` — or, once the client asked to cancel, with `Cancelled`.
    fn fail(&mut self, err: EngineError) {
        if self.deadline.is_some() {
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

/// The first [`errors::ERROR_BODY_LIMIT`] bytes of an error response's body.
async fn read_limited(resp: reqwest::Response) -> Vec<u8> {
    let mut body = Box::pin(resp.bytes_stream());
    let mut out = Vec::new();
    let read = async {
        while let Some(Ok(chunk)) = body.next().await {
            let room = errors::ERROR_BODY_LIMIT.saturating_sub(out.len());
            out.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
            if out.len() >= errors::ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), read).await;
    out
}
