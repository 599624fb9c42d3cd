//! The shared generate and abort handlers.
//!
//! Phases (see `docs/request-lifecycle.md`): receive (header checks → body within its size and
//! time limits → concurrency permit) → parse/validate (format) → mint ids → dispatch (router) →
//! assemble (format) → respond (unary body or SSE) → record.
//!
//! Relay: a format may mark a request [`genfront_protocol::OutputOptions::relay`]; an engine
//! client of that native format then answers with the engine's own bytes
//! ([`EngineOutput::native`], typed fields from a cheap scan), which the handler budgets, tracks
//! and hands to the format's assembler like any output — the assembler sends them with only the
//! ids edited. Nothing here depends on which path a request took.
//!
//! Engine errors: an error carrying the engine's own answer for this format
//! ([`EngineError::native`], a client of the engine's own format, never a P/D leg) is answered
//! with that answer verbatim — an HTTP error as its status, body, `Content-Type` and
//! `Retry-After`, also for a stream request refused before its first output (never a 200 SSE
//! stream the engine did not send); an error event after the headers is the format's to send
//! (it sends the engine's payload). Every other error is rendered by the format.
//!
//! SGLang refuses a request whose rid is already in flight (`Duplicate request ID detected`);
//! genfront does the same per owner for every format whose
//! [`GenerateFormat::duplicate_id_error`] is set ([`crate::registry::InFlight::register_unique`]).

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use genfront_format::{
    AbortRoute, AbortSelector, GenerateError, GenerateFormat, NativeResponse, ParseInput, Prepared,
};
use genfront_protocol::{EngineError, EngineOutput};
use genfront_router::RouteContext;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, HeaderName, StatusCode};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use crate::auth::{Caller, Need, Refusal};
use crate::registry::Registration;
use crate::sse::SseBody;
use crate::track::Tracker;
use crate::{AppState, ids};

/// `x-request-id`.
pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `x-genfront-worker`: in a request, pins it to a worker id (debugging); in a response, names
/// the worker(s) chosen (comma-separated, in sub-request order, each once).
pub(crate) static X_GENFRONT_WORKER: HeaderName = HeaderName::from_static("x-genfront-worker");
/// `x-session-id`: session affinity key.
static X_SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");
/// `x-smg-routing-key`: the SGLang model gateway's routing key header (session affinity).
static X_SMG_ROUTING_KEY: HeaderName = HeaderName::from_static("x-smg-routing-key");

fn header_str(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// One engine output tagged with the index of its sub-request.
pub(crate) type Tagged = (usize, Result<EngineOutput, EngineError>);

/// What a request holds until its response body is dropped: the concurrency permit, abort
/// registrations and the request token (cancelled on drop, so engines that only watch the token
/// stop too).
#[derive(Debug)]
pub(crate) struct RequestGuard {
    pub(crate) tracker: Tracker,
    _permit: Option<OwnedSemaphorePermit>,
    _registrations: Vec<Registration>,
    cancel: CancellationToken,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn native(resp: NativeResponse) -> Response {
    let mut r = (resp.status, resp.body).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(resp.content_type));
    r
}

/// The engine's own HTTP error answer, verbatim, when `err` carries one for a client of
/// `format` ([`EngineError::native`]: the request came in the engine's own format, not as a P/D
/// leg): the engine's status, body, `Content-Type` and `Retry-After`, nothing of genfront's
/// added. `None` for every other error (typed rendering).
fn relayed_error(format: &dyn GenerateFormat, err: &EngineError) -> Option<Response> {
    let native = err.native_for(format.name())?;
    let status = StatusCode::from_u16(native.status?).ok()?;
    let mut resp = Response::new(Body::from(native.body.clone()));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    for (name, value) in [
        (CONTENT_TYPE, &native.content_type),
        (RETRY_AFTER, &native.retry_after),
    ] {
        if let Some(v) = value.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(name, v);
        }
    }
    Some(resp)
}

fn error(
    format: &dyn GenerateFormat,
    err: &GenerateError,
    stream: bool,
    retry_after_default: u32,
) -> Response {
    if err.status().is_server_error()
        && !matches!(err, GenerateError::NoEngine { .. } | GenerateError::Paused)
    {
        tracing::warn!(format = format.name(), code = err.code(), error = %err, "request failed");
    } else {
        tracing::debug!(format = format.name(), code = err.code(), error = %err, "request rejected");
    }
    if let GenerateError::Engine(e) = err
        && let Some(resp) = relayed_error(format, e)
    {
        return resp;
    }
    let mut resp = native(format.error_response(err, stream));
    if let Some(secs) = err.retry_after(retry_after_default)
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(RETRY_AFTER, v);
    }
    resp
}

/// Longest client id echoed in `x-request-id`: a longer one (ids are echoed in the body anyway)
/// would make the header unreadable for common clients (Python's `http.client` caps header lines
/// at 64 KiB).
const MAX_ECHOED_ID: usize = 1024;

fn with_request_id(mut resp: Response, client_id: Option<&str>) -> Response {
    if let Some(v) = client_id
        .filter(|id| id.len() <= MAX_ECHOED_ID)
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        resp.headers_mut().insert(X_REQUEST_ID.clone(), v);
    }
    resp
}

/// A native answer built by a format, as an axum response.
pub(crate) fn native_response(resp: NativeResponse) -> Response {
    native(resp)
}

/// `err` in `format`'s envelope, as answered before any header (with `Retry-After` where it
/// applies).
pub(crate) fn error_for(
    state: &AppState,
    format: &dyn GenerateFormat,
    err: &GenerateError,
) -> Response {
    error(format, err, false, retry_after_secs(state))
}

/// A control or admin route's body: the header checks ([`check_headers`]: 413 before reading,
/// 415 for a non-JSON type or an encoding) and limits (`--body-limit`, `--body-read-timeout`).
pub(crate) async fn read_control_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, GenerateError> {
    check_headers(state, headers)?;
    read_body(state, body).await
}

/// Read the whole request body: at most `--body-limit` bytes (413) within
/// `--body-read-timeout` in total (408). tower-http's `RequestBodyTimeoutLayer` is not used: its
/// timer restarts with every frame, so a client trickling one byte a second never trips it.
async fn read_body(state: &AppState, body: Body) -> Result<Bytes, GenerateError> {
    let limit = state.config.body_limit;
    let read = axum::body::to_bytes(body, limit);
    let result = match state.config.body_read_timeout {
        None => read.await,
        Some(limit_time) => match tokio::time::timeout(limit_time, read).await {
            Ok(r) => r,
            Err(_) => {
                state.metrics.limits().hit("body_read_timeout");
                return Err(GenerateError::Http {
                    status: StatusCode::REQUEST_TIMEOUT,
                    message: format!(
                        "The request body was not received within {limit_time:?} (--body-read-timeout)."
                    ),
                });
            }
        },
    };
    result.map_err(|e| {
        let inner = e.into_inner();
        if inner
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            state.metrics.limits().hit("body_limit");
            GenerateError::PayloadTooLarge {
                limit_bytes: limit,
                flag: "--body-limit",
            }
        } else {
            GenerateError::Schema {
                message: format!("Failed to read the request body: {inner}"),
                param: None,
            }
        }
    })
}

/// The checks on a generate, abort or control request's headers, before its body is read:
/// [`check_transport`], then the `Content-Type` gate of the abort and control routes: JSON
/// (`application/json` or `application/*+json`, parameters ignored) or absent → else 415 (an
/// abort also refuses an absent type, see [`abort`]). Generate routes do not use it: there the
/// format decides ([`check_transport`]).
fn check_headers(state: &AppState, headers: &HeaderMap) -> Result<(), GenerateError> {
    check_transport(state, headers)?;
    if let Some(v) = headers.get(CONTENT_TYPE) {
        let text = v.to_str().unwrap_or("");
        if !is_json_media_type(text) {
            state.metrics.limits().hit("content_type");
            return Err(GenerateError::Http {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: format!(
                    "Unsupported Content-Type `{}`: the body must be JSON (application/json).",
                    text.trim()
                ),
            });
        }
    }
    Ok(())
}

/// The header checks every body-carrying route makes before its body is read:
///
/// - `Content-Length` above `--body-limit` → 413 at once: the body is never read, and a client
///   that sent `Expect: 100-continue` gets no `100 Continue` (hyper sends it only when the body
///   is first read);
/// - `Content-Encoding` must be absent or `identity` → else 415. A **deliberate deviation** on
///   generate routes: neither engine (nor uvicorn) decodes a compressed request body, so the
///   engine answers a gzip body with its JSON-decode 400 (vLLM's `json_invalid`; SGLang's
///   orjson error, or its `dataclass_type` 400 without a JSON type); genfront names the cause.
///
/// **`Content-Type` on generate routes is the format's decision** (it sees the headers in
/// [`ParseInput`]), as the engines' own routes decide it: SGLang 0.5.23 (FastAPI 0.136's
/// `strict_content_type`) reads a body without a JSON type — `text/plain`, a form-encoded
/// `curl -d` without `-H 'Content-Type: application/json'`, or **no type at all** — as raw bytes
/// and answers pydantic's 400 `dataclass_type`; vLLM answers 400 "Unsupported Media Type: Only
/// 'application/json' is allowed". Such a refusal is counted in
/// `genfront_limit_hits_total{limit="content_type"}` by [`generate`] — any refusal of a request
/// whose type is absent or other than `application/json`, whatever the format's reason (an empty
/// body without a type, refused for having none, counts too; see [`not_plain_json_typed`]) —
/// as the abort and control routes' own 415s ([`check_headers`]) are.
fn check_transport(state: &AppState, headers: &HeaderMap) -> Result<(), GenerateError> {
    let limit = state.config.body_limit;
    if let Some(len) = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        && len > limit as u64
    {
        state.metrics.limits().hit("body_limit");
        return Err(GenerateError::PayloadTooLarge {
            limit_bytes: limit,
            flag: "--body-limit",
        });
    }
    for v in headers.get_all(http::header::CONTENT_ENCODING) {
        let text = v.to_str().unwrap_or("?");
        for coding in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("identity") {
                state.metrics.limits().hit("content_encoding");
                return Err(GenerateError::Http {
                    status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    message: format!(
                        "Unsupported Content-Encoding `{coding}`: request bodies must be sent uncompressed (identity)."
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Whether a generate request's `Content-Type` is absent or other than `application/json`
/// (parameters ignored, any case): its refusal is counted as a `content_type` limit hit. Both
/// engines read that type as JSON; vLLM refuses every other (`application/*+json` included),
/// SGLang reads `application/*+json` too, so an SGLang `+json` request refused for another
/// reason is counted as well.
fn not_plain_json_typed(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_none_or(|v| {
        let text = v.to_str().unwrap_or("");
        !text
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
    })
}

/// `application/json` or `application/<x>+json`, case-insensitive, parameters ignored, read as
/// FastAPI reads it (`email.message.Message`: the type before `;` trimmed, exactly one `/`, no
/// inner spaces — `application/ json` is not JSON).
fn is_json_media_type(value: &str) -> bool {
    let mime = value.split(';').next().unwrap_or("").trim();
    let mut parts = mime.split('/');
    let (Some(main), Some(sub), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    main.eq_ignore_ascii_case("application")
        && (sub.eq_ignore_ascii_case("json")
            || sub
                .len()
                .checked_sub(5)
                .and_then(|i| sub.get(i..))
                .is_some_and(|tail| tail.eq_ignore_ascii_case("+json")))
}

/// The caller of a route that needs `need`, or the refusal to answer: a 401 (with
/// `WWW-Authenticate: Bearer`) or 403 in `format`'s native envelope, counted in
/// `genfront_auth_refusals_total{route}`. Without keys configured everyone passes (see
/// [`crate::auth`]).
pub(crate) fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    need: Need,
    format: &dyn GenerateFormat,
    route: &str,
) -> Result<Caller, Box<Response>> {
    state
        .config
        .api_keys
        .check(headers, need)
        .map_err(|refusal| Box::new(refuse(state, format, route, refusal)))
}

fn refuse(
    state: &AppState,
    format: &dyn GenerateFormat,
    route: &str,
    refusal: Refusal,
) -> Response {
    state.metrics.auth_refused(route);
    let mut resp = error(format, &refusal.error(), false, retry_after_secs(state));
    if refusal == Refusal::Unauthenticated {
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
    }
    resp
}

/// Serve one generate request with `format` on `route`.
pub(crate) async fn generate(
    state: Arc<AppState>,
    route: Arc<str>,
    format: Arc<dyn GenerateFormat>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut tracker = Tracker::start(state.clone(), route.clone(), format.name());
    // Authentication first: a client without a key learns nothing else about the server.
    let caller = match authorize(&state, &headers, Need::ApiKey, &*format, &route) {
        Ok(c) => c,
        Err(resp) => {
            tracker.complete(resp.status().as_u16(), "unauthorized");
            return *resp;
        }
    };
    if let Err(e) = check_transport(&state, &headers) {
        return reject(&state, &mut tracker, &*format, &e, false);
    }
    // No worker can take it: say so at once (503 + Retry-After), before reading the body —
    // unless a pause (fleet control) is what stands in the way: then wait up to --pause-wait for
    // a resume, and refuse with the retryable `paused` 503 if none comes.
    tracker.wait_started();
    if !state.router.ready_for(format.name()) {
        if state.router.paused_for(format.name()) {
            if !state
                .router
                .wait_unpaused(format.name(), state.config.pause_wait)
                .await
            {
                let err = if state.router.paused_for(format.name()) {
                    GenerateError::Paused
                } else {
                    no_engine(state.router.count_refusal(format.name()))
                };
                return reject(&state, &mut tracker, &*format, &err, false);
            }
        } else {
            let role = state.router.count_refusal(format.name());
            return reject(&state, &mut tracker, &*format, &no_engine(role), false);
        }
    }
    let body = match read_body(&state, body).await {
        Ok(b) => b,
        Err(e) => return reject(&state, &mut tracker, &*format, &e, false),
    };
    tracker.wait_ended();
    // The permit is taken only once the body is in: a client trickling its body must not hold
    // one of `--max-concurrent-requests` while it does.
    let permit = match &state.permits {
        None => None,
        Some(sem) => match sem.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                state.metrics.limits().hit("max_concurrent_requests");
                return reject(
                    &state,
                    &mut tracker,
                    &*format,
                    &GenerateError::Overloaded,
                    false,
                );
            }
        },
    };
    let Some(facts) = state.router.facts_for(format.name()) else {
        return reject(
            &state,
            &mut tracker,
            &*format,
            &GenerateError::NoEngine { role: None },
            false,
        );
    };
    let prepared = match format.prepare(ParseInput {
        headers: &headers,
        body: &body,
        engine: &facts,
    }) {
        Ok(p) => p,
        Err(rej) => {
            if not_plain_json_typed(&headers) {
                state.metrics.limits().hit("content_type");
            }
            return reject(&state, &mut tracker, &*format, &rej.error, rej.stream);
        }
    };
    drop(body);
    let limit = state.config.max_engine_requests;
    if prepared.subs.len() > limit {
        let err = GenerateError::validation(format!(
            "The request expands to {} engine requests (batch size × n); this server accepts at most {limit} (--max-engine-requests).",
            prepared.subs.len()
        ));
        let resp = reject(&state, &mut tracker, &*format, &err, prepared.stream);
        return with_request_id(resp, prepared.client_id.as_deref());
    }
    let caps = crate::caps::UpFront {
        max_top_logprobs: state.config.max_top_logprobs,
        max_listed: state.config.max_logprob_token_ids,
        max_entries: state.config.max_logprob_entries,
        max_routed: state.config.max_routed_expert_entries,
    };
    if let Err((limit, err)) = crate::caps::check_request(&prepared.subs, &facts, caps) {
        state.metrics.limits().hit(limit);
        let resp = reject(&state, &mut tracker, &*format, &err, prepared.stream);
        return with_request_id(resp, prepared.client_id.as_deref());
    }
    let ctx = RouteContext {
        format: format.name(),
        session_id: header_str(&headers, &X_SESSION_ID),
        routing_key: header_str(&headers, &X_SMG_ROUTING_KEY),
        rid: prepared.client_id.clone(),
        pinned: header_str(&headers, &X_GENFRONT_WORKER),
        pd_merge: format.pd_merge(),
    };
    dispatch(state, format, prepared, ctx, permit, tracker, caller.owner).await
}

/// The 503 for a request no worker can take, naming the missing role when it is a P/D role.
fn no_engine(role: genfront_router::Role) -> GenerateError {
    let role = match role {
        genfront_router::Role::Aggregated => None,
        r => Some(r.label()),
    };
    GenerateError::NoEngine { role }
}

fn retry_after_secs(state: &AppState) -> u32 {
    u32::try_from(state.config.retry_after.as_secs().max(1)).unwrap_or(u32::MAX)
}

fn reject(
    state: &AppState,
    tracker: &mut Tracker,
    format: &dyn GenerateFormat,
    err: &GenerateError,
    stream: bool,
) -> Response {
    let resp = error(format, err, stream, retry_after_secs(state));
    tracker.complete(resp.status().as_u16(), err.code());
    resp
}

async fn dispatch(
    state: Arc<AppState>,
    format: Arc<dyn GenerateFormat>,
    prepared: Prepared,
    ctx: RouteContext,
    permit: Option<OwnedSemaphorePermit>,
    mut tracker: Tracker,
    owner: u32,
) -> Response {
    let Prepared {
        client_id,
        stream: streaming,
        subs,
        assembler,
    } = prepared;
    tracker.client_id = client_id.clone();
    let budget = crate::caps::AnswerBudget::new(&subs, state.config.max_answer_bytes);
    let cancel = CancellationToken::new();
    let mut registrations = Vec::with_capacity(subs.len());
    let mut streams: Vec<BoxStream<'static, Tagged>> = Vec::with_capacity(subs.len());
    let mut workers: Vec<String> = Vec::new();
    let mut served: Vec<(Option<genfront_router::WorkerId>, genfront_router::ServedBy)> =
        Vec::new();
    // SGLang refuses a request whose rid is already in flight (per owner here, see
    // `InFlight::register_unique`): its requests are registered, all or none, before any is
    // dispatched, as SGLang registers the request state before it reaches the scheduler.
    // Whether the format's engine refuses duplicates at all (its refusal does not depend on the id).
    let unique = format.duplicate_id_error("").is_some();
    let mut tokens = Vec::new();
    if unique {
        tokens = subs.iter().map(|_| cancel.child_token()).collect();
        let entries = subs
            .iter()
            .zip(&tokens)
            .map(|(s, t)| (s.abort_key.clone(), t.clone()))
            .collect();
        match state
            .in_flight
            .register_unique(format.name(), owner, entries)
        {
            Ok(r) => registrations = r,
            Err(rid) => {
                let err = format.duplicate_id_error(&rid).unwrap_or_else(|| {
                    GenerateError::validation(format!("Duplicate request ID detected: {rid}"))
                });
                let resp = reject(&state, &mut tracker, &*format, &err, streaming);
                return with_request_id(resp, client_id.as_deref());
            }
        }
    }
    let mut tokens = tokens.into_iter();
    for (i, sub) in subs.into_iter().enumerate() {
        let mut request = sub.request;
        request.request_id = ids::mint_request_id();
        request.output.stream = streaming;
        tracing::debug!(
            format = format.name(),
            internal_id = %request.request_id,
            client_id = client_id.as_deref().unwrap_or(""),
            native_id = %sub.abort_key,
            prompt_tokens = request.token_ids.len(),
            "dispatch"
        );
        tracker.dispatched(
            &request.request_id,
            &sub.abort_key,
            &request.token_ids,
            request.sampling.n,
        );
        let token = tokens.next().unwrap_or_else(|| cancel.child_token());
        let dispatched = match state.router.dispatch(request, &ctx, token.clone()) {
            Ok(d) => d,
            Err(no) => {
                tracing::debug!(
                    format = format.name(),
                    reason = no.reason,
                    "no worker for request"
                );
                // A pin to a worker that does not exist is the client's mistake: a retry cannot
                // help. Otherwise 503. Dropping `streams` aborts the sub-requests already
                // dispatched.
                let pinned = ctx.pinned.as_deref().unwrap_or("");
                let err = if no.reason == "unknown_worker" {
                    GenerateError::validation(format!(
                        "x-genfront-worker names no worker of this server: {pinned}"
                    ))
                } else if no.reason == "pinned_role_mismatch" {
                    GenerateError::validation(format!(
                        "x-genfront-worker: {pinned} does not name a worker of that role; pin an aggregated worker by its id, a prefill/decode pair as PREFILL+DECODE"
                    ))
                } else {
                    no_engine(no.role)
                };
                let resp = reject(&state, &mut tracker, &*format, &err, streaming);
                return with_request_id(resp, client_id.as_deref());
            }
        };
        // A P/D pair is named `prefill+decode`.
        let worker = match &dispatched.prefill_worker {
            Some(p) => format!("{p}+{}", dispatched.worker),
            None => dispatched.worker.to_string(),
        };
        if !workers.contains(&worker) {
            workers.push(worker);
        }
        served.push((dispatched.prefill_worker.clone(), dispatched.served_by()));
        tracker.served_by(dispatched.served_by(), dispatched.prefill_worker.as_ref());
        if !unique {
            registrations.push(state.in_flight.register(
                format.name(),
                owner,
                sub.abort_key,
                token,
            ));
        }
        streams.push(dispatched.stream.map(move |item| (i, item)).boxed());
    }
    tracker.handed_over();
    let worker_header = HeaderValue::from_str(&workers.join(",")).ok();
    let mut guard = RequestGuard {
        tracker,
        _permit: permit,
        _registrations: registrations,
        cancel,
    };
    let outputs = stream::select_all(streams);

    if streaming {
        // Wait for the first output (or the end) before sending the headers, so
        // `x-genfront-worker` names the worker that serves it: a retry before the first token may
        // have moved the request. The client gets nothing earlier than that anyway.
        let mut outputs = outputs;
        let first = outputs.next().await;
        let worker_header = answered_header(&served).or(worker_header);
        // The engine refused with an HTTP error before any output: a client of its own format
        // gets that answer as the engine sent it (status, body, headers), not an SSE stream.
        if let Some((_, Err(e))) = &first
            && let Some(resp) = relayed_error(&*format, e)
        {
            tracing::debug!(format = format.name(), error = %e, "engine error relayed");
            guard.tracker.complete(
                resp.status().as_u16(),
                GenerateError::from(e.clone()).code(),
            );
            drop(outputs);
            drop(guard);
            return with_worker(with_request_id(resp, client_id.as_deref()), worker_header);
        }
        let cap = (
            state.config.max_stream_bytes,
            state.metrics.limits().clone(),
        );
        let framing = format.framing();
        let body = SseBody::new(outputs, Some(first), assembler, format, guard, cap);
        let mut resp = Response::new(Body::from_stream(body));
        let h = resp.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(framing.sse_content_type),
        );
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if let Some(v) = worker_header {
            h.insert(X_GENFRONT_WORKER.clone(), v);
        }
        return with_request_id(resp, client_id.as_deref());
    }

    // Unary: dropping this future (client gone) drops the engine streams, which aborts them, and
    // the guard, which counts the disconnect.
    let id_len = client_id.as_deref().map_or(0, str::len);
    let resp = match unary(outputs, assembler, budget, id_len, &mut guard).await {
        Ok(r) => {
            let resp = native(r);
            guard.tracker.complete_unary(resp.status().as_u16());
            resp
        }
        Err(e) => {
            if matches!(e, UnaryError::TooLarge(_)) {
                state.metrics.limits().hit("max_answer_bytes");
            }
            reject(&state, &mut guard.tracker, &*format, e.error(), false)
        }
    };
    drop(guard);
    // Unary: name the workers that actually answered (after any retry).
    let worker_header = answered_header(&served).or(worker_header);
    with_worker(with_request_id(resp, client_id.as_deref()), worker_header)
}

/// Engine outputs at least this heavy ([`crate::caps::output_weight`]: ids plus logprob
/// candidates, about 30–90 bytes of JSON each) are bounded and folded into the answer on the
/// blocking pool, and an answer whose estimate reached [`OFFLOAD_ANSWER_BYTES`] is finished
/// (rendered) and dropped there: rendering a 100 MB answer takes a runtime worker for a second
/// or more (in a debug build), stalling every other connection it serves.
const OFFLOAD_OUTPUT_WEIGHT: u64 = 16 * 1024;
/// See [`OFFLOAD_OUTPUT_WEIGHT`]: the estimated answer size from which finishing runs on the
/// blocking pool.
const OFFLOAD_ANSWER_BYTES: u64 = 1024 * 1024;

/// An upper bound on the bytes `out` adds to a unary answer: [`crate::caps::output_bound`] of
/// its typed fields, plus, for a relayed native answer ([`EngineOutput::native`]), its bytes and
/// room for each engine id to become the client's id (`id_len` bytes, escaped at worst to six
/// bytes a byte, plus quotes).
fn answer_bound(out: &EngineOutput, id_len: usize) -> u64 {
    let native = out.native.as_ref().map_or(0, |n| {
        let per_id = 6 * id_len as u64 + 2 + 64;
        n.body.len() as u64 + n.ids.len() as u64 * per_id
    });
    crate::caps::output_bound(out).saturating_add(native)
}

/// Why a unary answer failed.
enum UnaryError {
    /// The answer passed `--max-answer-bytes` (estimated while it was accumulated, or measured).
    TooLarge(GenerateError),
    /// Any other failure (engine error, broken contract, incomplete outputs).
    Other(GenerateError),
}

impl UnaryError {
    fn error(&self) -> &GenerateError {
        match self {
            UnaryError::TooLarge(e) | UnaryError::Other(e) => e,
        }
    }
}

/// Drop `value` on the blocking pool when it is big (freeing a 100 MB answer's buffers is not
/// free either), else here.
fn drop_maybe_blocking<T: Send + 'static>(value: T, big: bool) {
    if big {
        tokio::task::spawn_blocking(move || drop(value));
    } else {
        drop(value);
    }
}

/// Permits for big unary work on the blocking pool: one per core. Each big fold or finish holds
/// an engine output or an answer's buffers while it grows them; unbounded, six clients' big
/// answers would all grow at once (peak memory of six transients instead of one per core) and
/// crowd the cores the runtime workers need.
fn big_work() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        tokio::sync::Semaphore::new(cores)
    })
}

/// Run `f` on the blocking pool under a [`big_work`] permit; a panic there becomes an internal
/// error (never a crash).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, GenerateError> {
    let _permit = big_work()
        .acquire()
        .await
        .map_err(|e| GenerateError::Internal(format!("unary assembly failed: {e}")))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| GenerateError::Internal(format!("unary assembly failed: {e}")))
}

/// Accumulate a unary answer from `outputs` and finish it, within `budget`
/// (`--max-answer-bytes`, see [`crate::caps`]).
///
/// Memory: each engine output is moved into the assembler and released once folded (the
/// assembler keeps its own rendered or typed form, never the output); the estimate (never below
/// the real size) trips before an output that would pass the cap is folded, so an answer over
/// the cap is never built. The finished body is the only other copy, made once by
/// `finish_unary` while the assembler's state is still alive (so a peak of about twice the
/// answer), then the assembler is dropped. A relayed answer ([`EngineOutput::native`], see
/// `docs/request-lifecycle.md`) is held as the engine's bytes and copied once, ids edited.
///
/// Time: outputs of weight ≥ [`OFFLOAD_OUTPUT_WEIGHT`] are bounded and folded on the blocking
/// pool, and answers estimated at ≥ [`OFFLOAD_ANSWER_BYTES`] are finished and freed there, so
/// the runtime workers keep serving other connections (`/metrics`, small requests) meanwhile.
async fn unary(
    mut outputs: stream::SelectAll<BoxStream<'static, Tagged>>,
    mut assembler: Box<dyn genfront_format::Assembler>,
    mut budget: crate::caps::AnswerBudget,
    id_len: usize,
    guard: &mut RequestGuard,
) -> Result<NativeResponse, UnaryError> {
    let mut sink = Vec::new();
    while let Some((sub, item)) = outputs.next().await {
        let out = match item {
            Ok(out) => out,
            Err(e) => {
                drop_maybe_blocking(assembler, budget.estimate >= OFFLOAD_ANSWER_BYTES);
                return Err(UnaryError::Other(GenerateError::from(e)));
            }
        };
        guard.tracker.observe(sub, &out);
        let folded = if crate::caps::output_weight(&out) >= OFFLOAD_OUTPUT_WEIGHT {
            let mut b = budget;
            let r = blocking(move || {
                let r = match b.add(answer_bound(&out, id_len)) {
                    Ok(()) => assembler
                        .on_output(sub, out, &mut Vec::new())
                        .map_err(UnaryError::Other),
                    // Over the cap: the output is dropped here, never folded.
                    Err(e) => Err(UnaryError::TooLarge(e)),
                };
                (assembler, b, r)
            })
            .await;
            match r {
                Ok((a, b, r)) => {
                    assembler = a;
                    budget = b;
                    r
                }
                Err(e) => return Err(UnaryError::Other(e)),
            }
        } else {
            match budget.add(answer_bound(&out, id_len)) {
                Ok(()) => assembler
                    .on_output(sub, out, &mut sink)
                    .map_err(UnaryError::Other),
                Err(e) => Err(UnaryError::TooLarge(e)),
            }
        };
        if let Err(e) = folded {
            drop_maybe_blocking(assembler, budget.estimate >= OFFLOAD_ANSWER_BYTES);
            return Err(e);
        }
    }
    // The engine streams are done: release them before the answer is rendered.
    drop(outputs);
    let max = budget.max;
    let finish = move || {
        // `finish_unary` consumes the assembler: its buffers are freed as it returns, on this
        // thread.
        match assembler.finish_unary() {
            Ok(r) if r.body.len() > max => {
                let err = crate::caps::answer_too_large(r.body.len(), max);
                drop(r);
                Err(UnaryError::TooLarge(err))
            }
            Ok(r) => Ok(r),
            Err(e) => Err(UnaryError::Other(e)),
        }
    };
    if budget.estimate >= OFFLOAD_ANSWER_BYTES {
        blocking(finish).await.map_err(UnaryError::Other)?
    } else {
        finish()
    }
}

/// `x-genfront-worker` naming the workers serving each sub-request now (after retries), each
/// once, a P/D pair as `prefill+decode`.
fn answered_header(
    served: &[(Option<genfront_router::WorkerId>, genfront_router::ServedBy)],
) -> Option<HeaderValue> {
    let mut answered: Vec<String> = Vec::new();
    for (prefill, by) in served {
        let w = match prefill {
            Some(p) => format!("{p}+{}", by.get()),
            None => by.get().to_string(),
        };
        if !answered.contains(&w) {
            answered.push(w);
        }
    }
    HeaderValue::from_str(&answered.join(",")).ok()
}

fn with_worker(mut resp: Response, worker: Option<HeaderValue>) -> Response {
    if let Some(v) = worker {
        resp.headers_mut().insert(X_GENFRONT_WORKER.clone(), v);
    }
    resp
}

/// Abort bodies at least this large are parsed on the blocking pool, so a huge id list (a 1M-id
/// vLLM abort is ~50 MB of JSON) never occupies a runtime worker other requests need.
const BLOCKING_PARSE_BYTES: usize = 256 * 1024;

/// Serve a format's native abort endpoint: cancel every in-flight request it selects, then answer
/// 200 with an empty body (both SGLang and vLLM do).
///
/// Before the selector is applied: the API key (any key; see [`crate::auth`]), the header checks
/// of [`check_headers`] with one more rule, **the body must say it is JSON** (`Content-Type`
/// absent is a 415 here too: a browser can send a cross-origin `text/plain`, form or
/// body-without-type POST without a CORS preflight, never an `application/json` one), and at most
/// `--max-abort-ids` ids (a native 400 naming the flag). With keys, a tenant's abort reaches only
/// its own requests, and `abort_all` needs the admin key (403).
pub(crate) async fn abort(
    state: Arc<AppState>,
    format: Arc<dyn GenerateFormat>,
    route: AbortRoute,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let retry = retry_after_secs(&state);
    let caller = match authorize(&state, &headers, Need::ApiKey, &*format, route.path) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    if let Err(e) = check_headers(&state, &headers) {
        return error(&*format, &e, false, retry);
    }
    if !headers.contains_key(CONTENT_TYPE) {
        state.metrics.limits().hit("content_type");
        let e = GenerateError::Http {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "An abort body must be sent as JSON (Content-Type: application/json)."
                .to_owned(),
        };
        return error(&*format, &e, false, retry);
    }
    let body = match read_body(&state, body).await {
        Ok(b) => b,
        Err(e) => return error(&*format, &e, false, retry),
    };
    let parse = route.parse;
    let parsed = if body.len() >= BLOCKING_PARSE_BYTES {
        match tokio::task::spawn_blocking(move || parse(&body)).await {
            Ok(r) => r,
            Err(e) => Err(GenerateError::Internal(format!("abort parse failed: {e}"))),
        }
    } else {
        parse(&body)
    };
    let selector = match parsed {
        Ok(s) => s,
        Err(e) => return error(&*format, &e, false, retry),
    };
    if let AbortSelector::Exact(ids) = &selector
        && ids.len() > state.config.max_abort_ids
    {
        state.metrics.limits().hit("max_abort_ids");
        let e = GenerateError::validation(format!(
            "The abort names {} request ids; this server accepts at most {} per call (--max-abort-ids).",
            ids.len(),
            state.config.max_abort_ids
        ));
        let n = ids.len();
        // Freeing a million strings is not free either: off the runtime.
        if n > ABORT_FREE_OFFLOAD {
            tokio::task::spawn_blocking(move || drop(selector));
        }
        return error(&*format, &e, false, retry);
    }
    if matches!(selector, AbortSelector::All) && !caller.admin {
        return refuse(&state, &*format, route.path, Refusal::Forbidden);
    }
    let scope = caller.abort_scope();
    let fmt = format.name();
    let (selector, n) = if matches!(&selector, AbortSelector::Exact(ids) if ids.len() > ABORT_FREE_OFFLOAD)
    {
        // Chunked lookups (see `InFlight::abort`) on the blocking pool.
        let in_flight = state.in_flight.clone();
        match tokio::task::spawn_blocking(move || {
            let n = in_flight.abort(fmt, scope, &selector);
            (AbortSelector::Nothing, n)
        })
        .await
        {
            Ok((_, n)) => (None, n),
            Err(e) => {
                let e = GenerateError::Internal(format!("abort failed: {e}"));
                return error(&*format, &e, false, retry);
            }
        }
    } else {
        let n = state.in_flight.abort(fmt, scope, &selector);
        (Some(selector), n)
    };
    state.metrics.engine_aborts(fmt, "abort_request", n as u64);
    // The selector can be huge (100k ids, a 200 kB rid): only its kind at INFO.
    let what = match &selector {
        Some(AbortSelector::All) => "all",
        Some(AbortSelector::Nothing) => "nothing",
        Some(AbortSelector::Prefix(_)) => "prefix",
        Some(AbortSelector::Exact(_)) | None => "ids",
    };
    tracing::info!(
        format = fmt,
        selector = what,
        owner = caller.owner,
        aborted = n,
        "abort request"
    );
    tracing::debug!(format = fmt, ?selector, "abort selector");
    StatusCode::OK.into_response()
}

/// Exact-id aborts with more ids than this are applied (and freed) on the blocking pool.
const ABORT_FREE_OFFLOAD: usize = 4 * crate::registry::ABORT_CHUNK;
