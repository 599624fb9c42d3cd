//! genfront's **one HTTP engine transport**, shared by the native engine clients (SGLang's
//! `SglangEngine`, vLLM's `VllmEngine`). Each backend keeps only what is its own: the request
//! body builder, the frame decoder, the abort body and its facts discovery. This crate owns:
//!
//! - [`build_client`]: the pooled `reqwest` client (connect timeout, `TCP_NODELAY`, no proxy,
//!   optional bearer API key);
//! - [`SseSplitter`]: the one SSE event splitter (per-event size limit, `\n` / `\r\n` / lone `\r`
//!   line ends across reads, WHATWG or lenient end of stream);
//! - [`status_error`], [`classify`], [`ErrorBody`]: the upstream HTTP status → [`EngineError`]
//!   table below, with one parser for every error-body shape both engines use, and
//!   [`error_from_response`] to read a non-2xx answer;
//! - [`send_error`], [`chain`]: the error for a request that could not be sent (with reqwest's
//!   cause chain);
//! - [`probe`]: one `GET` health check (2xx → `Ok`, anything else → `Unavailable`), what each
//!   client's `Engine::probe` runs against its native `/health`; there is no background health
//!   loop any more, routers probe and own worker state;
//! - [`AbortCall`], [`AbortGuard`], [`CancelGrace`]: abort-on-drop (fire-and-forget, with a
//!   timeout, at most twice) and the cancel grace period;
//! - [`TimedEngine`], [`EngineTimeouts`]: the engine-side time limits around any engine (first
//!   output within `--engine-first-byte-timeout`, next stream output within
//!   `--engine-idle-timeout`; `ErrorKind::Timeout` → the client's 504 and a worker failure at
//!   the breaker). The TCP connect timeout is [`ClientOptions::connect_timeout`]. It also
//!   forwards `Engine::native_format` and `Engine::control`, the latter bounded by the call's
//!   own `timeout`;
//! - [`relay_control`]: one native fleet-control call (pause, resume, weight update, cache flush)
//!   sent to the engine unchanged, its status and body returned unchanged, within the call's
//!   timeout and [`CONTROL_BODY_LIMIT`].
//!
//! # Upstream status → [`EngineError`]
//!
//! | upstream answer | [`ErrorKind`] | notes |
//! |---|---|---|
//! | HTTP 401 / 403 | `Internal` | genfront's credentials for the engine are wrong (or the route is disabled): not the client's fault |
//! | HTTP 404 / 405 **without** the engine's error envelope | `Internal` | the route is not served (wrong engine, wrong version, a proxy's page) |
//! | HTTP 404 / 405 **with** the envelope (`{"error":{…}}` or flat `{"object":"error",…}`) | `InvalidArgument` | e.g. vLLM's unknown model |
//! | HTTP 429 | `Overloaded` | `status_code: Some(429)`, `retry_after_secs` from `Retry-After` (seconds form; an HTTP-date → `None`) |
//! | other HTTP 4xx | `InvalidArgument` | the engine's message (client-facing), `status_code`, `err_type` |
//! | HTTP 502 / 504 | `Unavailable` | retryable elsewhere |
//! | HTTP 503 | `Unavailable` | as 502/504, plus `retry_after_secs` when `Retry-After` was sent |
//! | connect / send failure (no status) | `Unavailable` | [`send_error`]: the root cause first (`connection refused`, `timed out`, …), then the cause chain |
//! | other HTTP 5xx, 1xx, 3xx | `Internal` | |
//!
//! Every mapped error keeps `status_code`. The message of an `InvalidArgument` is, in order: the
//! body's `error.message`, `error` (a string), `message` or `detail` (a non-string value as its
//! JSON text); else a short (≤ 512 bytes) non-JSON text body, trimmed; else
//! `"<engine> rejected the request (HTTP <status>)"`. Other kinds get an internal message that
//! names the class and quotes the body (logged, never sent to a client).
//!
//! # What changed for which backend (the unifications)
//!
//! Before this crate each client had its own copy; the differences were resolved as follows.
//!
//! - **SGLang 404/405 without an envelope** (FastAPI's `{"detail":"Not Found"}`, a text page) is
//!   now `Internal` (was `InvalidArgument` with the page's text); with SGLang's envelope it stays
//!   `InvalidArgument`. vLLM already did this.
//! - **429** now carries `retry_after_secs` (both), and **503** too (both); they were `None`.
//! - **`err_type`** is now set for SGLang HTTP errors from `error.type` / the flat `type` (vLLM
//!   already did; SGLang left it `None`).
//! - **InvalidArgument messages**: vLLM now also reads non-string `detail`/`message` values (as
//!   JSON text, e.g. a FastAPI 422 list) and short text bodies (it used its generic "rejected"
//!   sentence); SGLang uses the generic sentence for an empty or long (> 512 bytes) non-JSON body
//!   (it quoted the whole text, or gave an empty message). Internal messages are worded alike for
//!   both ("SGLang is unavailable (HTTP 503): …", "vLLM failed (HTTP 500): …").
//! - **Error bodies** are read up to 64 KiB for at most 5 s (vLLM read up to 10 s and could exceed
//!   the limit by one chunk).
//! - **HTTP client**: SGLang's client now ignores `HTTP_PROXY` & co. (`no_proxy`, as vLLM's did)
//!   and can send a bearer API key.
//! - **SSE**: one splitter. The per-event limit is now checked per event for SGLang too (it
//!   counted a whole network read, so a read holding many small events near the limit could be
//!   refused); the limits themselves stay (SGLang 1 GiB, vLLM 512 MiB). SGLang keeps its lenient
//!   end of stream ([`SseSplitter::finish`]); vLLM keeps WHATWG's (it does not call `finish`).
//! - **Send failures**: both now say `"<engine> <path> could not be reached (<root cause>): <cause chain>"`.
//! - **Health**: the background `GET /health` loops and their options (`health_interval`) are
//!   gone from both clients; `Engine::ready()` is `true` and `Engine::probe()` runs [`probe`].

mod abort;
mod client;
mod control;
mod probe;
mod response;
mod sse;
mod status;
mod timeout;

pub use abort::{AbortCall, AbortGuard, CancelGrace, GraceWake};
pub use client::{ClientOptions, build_client};
pub use control::{CONTROL_BODY_LIMIT, relay_control};
pub use probe::probe;
pub use response::{ERROR_BODY_LIMIT, error_from_response, native_error, read_error_body};
pub use sse::{EventTooLarge, MAX_EVENT_BYTES, SseSplitter};
pub use status::{ErrorBody, chain, classify, retry_after, root_cause, send_error, status_error};
pub use timeout::{EngineTimeouts, TimedEngine, TimeoutObserver, TimeoutPhase, timed};

#[cfg(doc)]
use genfront_protocol::{EngineError, ErrorKind};
