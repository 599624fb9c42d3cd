//! genfront's **shared HTTP handler**: one handler serves every format in the catalog.
//!
//! It owns everything around the format logic: the route table (built from
//! [`genfront_format::resolve_routes`]), body limits, private request ids, the call into the
//! router's one seam ([`genfront_router::Router::dispatch`]: the frontend holds no routing or
//! health code), SSE delivery with backpressure, cancellation on client disconnect (RAII: dropping the
//! response body drops the engine streams, which aborts the work), abort-by-id endpoints, and the
//! one error path that renders [`genfront_format::GenerateError`] in the format's native envelope.
//! It contains no format-specific code: SSE delimiters and terminator, content types and the
//! bodies of its own HTTP-level refusals (404, 405, a missing `Host`, oversized headers) are the
//! format's [`genfront_format::Framing`] — the app-wide ones (404, 405, the strict-HTTP checks)
//! those of the format serving the first route (`/generate`).
//!
//! # Limits (the handler's share; the serving loop in `genfront::serving` owns the connection
//! limits, `genfront_engine_http::TimedEngine` the engine time limits)
//!
//! In order, before any work: strict HTTP on every route (HTTP/1.1 without `Host` → 400, a head
//! over [`FrontendConfig::max_header_bytes`] → 431, both FastAPI's `{"detail": …}`); on generate
//! and abort routes `Content-Length` over `--body-limit` → 413 without reading the body (so no
//! `100 Continue`), a `Content-Encoding` other than `identity` → 415, and on abort and control
//! routes a missing or non-JSON `Content-Type` → 415 ([`genfront_format::GenerateError::Http`],
//! the route's native envelope; on generate routes the format judges the type as its engine does,
//! a 400); then the body, within
//! `--body-limit` (413) and `--body-read-timeout` in total (408); only then the
//! `--max-concurrent-requests` permit (503), so a client trickling its body holds none. Each hit
//! is counted in `genfront_limit_hits_total{limit}` ([`LimitMetrics`]).
//!
//! After the format's parse, the output caps (`--max-engine-requests`, `--max-top-logprobs`,
//! `--max-logprob-token-ids`, `--max-logprob-entries`, `--max-routed-expert-entries` up front;
//! `--max-answer-bytes` (on a running estimate never below the real size, before each engine
//! output is folded) and `--max-stream-bytes` while the answer is made): a native 400 (or, once
//! a stream has started, the native error event) naming the flag, counted under the flag's
//! name. The rules, the estimates and why the defaults pass ordinary RL traffic are in [`caps`]
//! (`caps.rs`). Big unary answers are folded, rendered and freed on the blocking pool (at most
//! one job per core), never on the async workers.
//!
//! # Authentication and abort isolation
//!
//! With API keys configured ([`ApiKeys`], `--api-key`/`--admin-api-key`) every generate, abort
//! and server-info route needs one (401 in the native envelope + `WWW-Authenticate: Bearer`
//! otherwise); a request's owner is its key, a tenant's aborts reach only its own requests and
//! `abort_all` needs the admin key (403). Without keys every route is open and anyone aborts
//! anything, as on the engines. The table is in [`auth`] (`auth.rs`). Abort routes also require a
//! JSON `Content-Type` (absent → 415, unlike generate routes: no cross-origin form or
//! `text/plain` posts), at most `--max-abort-ids` ids (400), and look ids up in an index
//! ([`InFlight`]: `O(ids)`, in chunks, never a scan under the lock). `/health_generate` runs one
//! probe per format at a time and reuses its result for [`PROBE_CACHE_TTL`].
//!
//! Start at [`app`] and [`generate`](handler).

mod auth;
mod caps;
pub mod control;
mod handler;
mod ids;
mod metrics;
mod registry;
mod sse;
mod trace;
mod track;

use std::sync::Arc;
use std::time::Duration;

pub use auth::{ApiKeys, AuthLabels, Caller, Need, Refusal, SecretKey};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, get, on};
pub use caps::{
    ASSUMED_EXPERT_WIDTH, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_LOGPROB_ENTRIES,
    DEFAULT_MAX_LOGPROB_TOKEN_IDS, DEFAULT_MAX_ROUTED_EXPERT_ENTRIES, DEFAULT_MAX_STREAM_BYTES,
    DEFAULT_MAX_TOP_LOGPROBS,
};
use futures::StreamExt;
use genfront_format::{AuxKind, Framing, Route};
use genfront_protocol::{EngineRequest, SamplingOptions, StopConditions};
use genfront_router::RouteContext;
pub use genfront_router::Router;
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};
pub use ids::mint_request_id;
pub use metrics::{LimitLabels, LimitMetrics, Metrics};
pub use registry::{ABORT_CHUNK, AbortScope, InFlight};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
pub use trace::{TRACE_CHANNEL_CAPACITY, TraceEngineRequest, TraceRecord, TraceSink, prompt_hash};

/// Default request body limit: 64 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024 * 1024;

/// Default `--max-abort-ids`: most ids one abort call may name.
pub const DEFAULT_MAX_ABORT_IDS: usize = 100_000;

/// How long a `/health_generate` result is reused (concurrent and later callers within it share
/// one engine generation).
pub const PROBE_CACHE_TTL: Duration = Duration::from_secs(1);

/// Default limit of request line + headers: 64 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

/// Frontend limits and behaviour.
#[derive(Debug, Clone)]
pub struct FrontendConfig {
    /// Maximum request body size in bytes (`--body-limit`).
    pub body_limit: usize,
    /// Maximum concurrent generate requests; `None` = unlimited (`--max-concurrent-requests`).
    pub max_concurrent_requests: Option<usize>,
    /// `Retry-After` sent with 503 when the concurrency limit is reached.
    pub retry_after: Duration,
    /// How long a generation probe (`/health_generate`) waits for a token.
    pub probe_timeout: Duration,
    /// Most engine requests one client request may expand to (batch size × `n`); beyond it the
    /// request is refused with a 400 in the native envelope.
    pub max_engine_requests: usize,
    /// Longest time a request body may take to arrive, in total (`--body-read-timeout`); beyond
    /// it the request is refused with a 408 in the native envelope. `None`: no limit. The clock
    /// starts when the handler starts reading (after the headers).
    pub body_read_timeout: Option<Duration>,
    /// Most bytes of request line + headers (`--max-header-bytes`, each header counted as
    /// `name: value\r\n`); beyond it a 431 with a JSON body. The HTTP parser's own buffer is
    /// twice this, so only larger heads get its empty-bodied 431.
    pub max_header_bytes: usize,
    /// Most top logprobs per position one request may ask for (`--max-top-logprobs`); beyond it
    /// a 400 in the native envelope. See the `caps` rules in the crate docs.
    pub max_top_logprobs: u32,
    /// Most listed token ids (SGLang `token_ids_logprob`, vLLM `logprob_token_ids`) one request
    /// may ask logprobs for at every position (`--max-logprob-token-ids`); beyond it a 400.
    pub max_logprob_token_ids: u32,
    /// Most logprob entries (prompt rows and output tokens × entries per position, over all
    /// engine requests) one request may ask for (`--max-logprob-entries`); beyond it a 400.
    pub max_logprob_entries: u64,
    /// Most routed-expert ids (rows × an assumed 1,024 per row, over all engine requests) one
    /// request may ask for (`--max-routed-expert-entries`); beyond it a 400.
    pub max_routed_expert_entries: u64,
    /// Most bytes of one unary answer (`--max-answer-bytes`), tripped on a running estimate
    /// while the answer is accumulated; beyond it a 400.
    pub max_answer_bytes: usize,
    /// Most bytes of one SSE response (`--max-stream-bytes`); beyond it the stream ends with the
    /// format's error event and the engine work is aborted.
    pub max_stream_bytes: u64,
    /// Most ids one abort call may name (`--max-abort-ids`); beyond it a native 400 naming the
    /// flag, counted as `genfront_limit_hits_total{limit="max_abort_ids"}`.
    pub max_abort_ids: usize,
    /// API keys (`--api-key`, `--admin-api-key`); none: every route open (see [`ApiKeys`]).
    pub api_keys: ApiKeys,
    /// How long a new request waits while every worker of its format is paused (fleet control)
    /// before the retryable `paused` 503 (`--pause-wait`). Default 30 s.
    pub pause_wait: Duration,
    /// How long one worker may take to answer a fleet-control call (`--control-timeout`); a
    /// worker that does not answer is reported as `timeout`. Default 300 s (weight loads are
    /// slow).
    pub control_timeout: Duration,
    /// How long `DELETE /workers/{id}` lets the worker's in-flight requests finish before it is
    /// removed (`--worker-drain-timeout`). Default 30 s.
    pub drain_timeout: Duration,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        Self {
            body_limit: DEFAULT_BODY_LIMIT,
            max_concurrent_requests: None,
            retry_after: Duration::from_secs(1),
            probe_timeout: Duration::from_secs(20),
            max_engine_requests: 1024,
            body_read_timeout: Some(Duration::from_secs(60)),
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_top_logprobs: DEFAULT_MAX_TOP_LOGPROBS,
            max_logprob_token_ids: DEFAULT_MAX_LOGPROB_TOKEN_IDS,
            max_logprob_entries: DEFAULT_MAX_LOGPROB_ENTRIES,
            max_routed_expert_entries: DEFAULT_MAX_ROUTED_EXPERT_ENTRIES,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            max_abort_ids: DEFAULT_MAX_ABORT_IDS,
            api_keys: ApiKeys::default(),
            pause_wait: Duration::from_secs(30),
            control_timeout: Duration::from_secs(300),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// Shared state of the app.
#[derive(Debug)]
pub struct AppState {
    /// The router engine requests are dispatched through.
    pub router: Arc<Router>,
    /// In-flight requests, for abort-by-id.
    pub in_flight: InFlight,
    /// Configuration.
    pub config: FrontendConfig,
    /// Metric families.
    pub metrics: Arc<Metrics>,
    /// Request trace writer, when `--trace-file` is set.
    pub trace: Option<TraceSink>,
    /// Concurrency permits, when limited.
    permits: Option<Arc<Semaphore>>,
}

impl AppState {
    /// State over `router` with `config`, metrics that include the router's, and no trace.
    pub fn new(router: Arc<Router>, config: FrontendConfig) -> Arc<Self> {
        let metrics = Arc::new(Metrics::with_router(router.metrics()));
        Self::with_metrics(router, config, metrics, None)
    }

    /// State with the given metrics and trace sink (the trace sink counts drops in `metrics`).
    /// `metrics` should have been made with [`Metrics::with_router`] over the router's families.
    pub fn with_metrics(
        router: Arc<Router>,
        config: FrontendConfig,
        metrics: Arc<Metrics>,
        trace: Option<TraceSink>,
    ) -> Arc<Self> {
        let permits = config
            .max_concurrent_requests
            .map(|n| Arc::new(Semaphore::new(n)));
        Arc::new(Self {
            router,
            in_flight: InFlight::default(),
            config,
            metrics,
            trace,
            permits,
        })
    }

    /// Graceful-shutdown deadline: cancel every in-flight engine request (engines abort them and
    /// the responses end with the native abort shape). Returns how many were cancelled.
    pub fn abort_all_for_shutdown(&self) -> usize {
        let n = self.in_flight.abort_everything();
        self.metrics.engine_aborts("all", "shutdown", n as u64);
        n
    }
}

fn native_response(r: genfront_format::NativeResponse) -> Response {
    let mut resp = (r.status, r.body).into_response();
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    resp
}

/// An HTTP-level refusal in `framing`'s shape; without a format (an app with no routes) a bare
/// status.
fn refusal(framing: Option<&'static Framing>, status: StatusCode, message: &str) -> Response {
    match framing {
        Some(f) => native_response((f.http_error)(status, message)),
        None => status.into_response(),
    }
}

/// `GET /ready`: 200 only when every served format can be routed now (a worker is connected,
/// ready and admitting); otherwise 503 naming the formats that cannot.
async fn ready(state: Arc<AppState>, formats: Arc<[&'static str]>) -> Response {
    let missing: Vec<&str> = formats
        .iter()
        .copied()
        .filter(|f| !state.router.ready_for(f))
        .collect();
    if missing.is_empty() {
        (StatusCode::OK, "").into_response()
    } else {
        let body = serde_json::json!({
            "detail": "no available workers",
            "code": "no_available_workers",
            "formats": missing,
        })
        .to_string();
        let mut r = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    }
}

async fn metrics_text(state: Arc<AppState>) -> Response {
    let mut r = state.metrics.encode().into_response();
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

/// The last `/health_generate` result of one format, behind an async lock: one probe in flight
/// per format, its result reused for [`PROBE_CACHE_TTL`].
#[derive(Debug, Default)]
struct ProbeCache(tokio::sync::Mutex<Option<(std::time::Instant, StatusCode)>>);

/// `/health_generate`: a real one-token generation ([`generate_probe`]) at most once per
/// [`PROBE_CACHE_TTL`] per format. Callers arriving while a probe runs wait for it (the lock is
/// fair) and share its result, so a flood of probes is at most one engine request a second.
async fn cached_probe(
    state: Arc<AppState>,
    format: &'static str,
    cache: Arc<ProbeCache>,
) -> Response {
    let mut slot = cache.0.lock().await;
    if let Some((at, status)) = *slot
        && at.elapsed() < PROBE_CACHE_TTL
    {
        return status.into_response();
    }
    let status = generate_probe(state, format).await.status();
    *slot = Some((std::time::Instant::now(), status));
    status.into_response()
}

/// One-token generation on a worker the router picks; 200 when a token (or a finish) arrives
/// within the probe timeout, 503 otherwise.
async fn generate_probe(state: Arc<AppState>, format: &'static str) -> Response {
    let request = EngineRequest {
        request_id: format!("HEALTH_CHECK_{}", ids::mint_request_id()),
        token_ids: vec![0],
        stop: StopConditions {
            max_tokens: Some(1),
            ..Default::default()
        },
        sampling: SamplingOptions {
            temperature: Some(0.0),
            ..Default::default()
        },
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let ctx = RouteContext {
        format,
        ..RouteContext::default()
    };
    let Ok(dispatched) = state.router.dispatch(request, &ctx, cancel) else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let mut stream = dispatched.stream;
    match tokio::time::timeout(state.config.probe_timeout, stream.next()).await {
        Ok(Some(Ok(_))) => StatusCode::OK.into_response(),
        _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// Build the router: every resolved generate route, each format's abort and auxiliary routes,
/// `GET /health` (process up), `GET /ready` (an engine is ready) and `GET /metrics`. Which
/// routes need which API key is in [`auth`] (`auth.rs`); with no keys configured every route is
/// open.
pub fn app(state: Arc<AppState>, routes: &[Route]) -> axum::Router {
    let st = state.clone();
    let st2 = state.clone();
    let mut formats: Vec<&'static str> = Vec::new();
    for r in routes {
        state.metrics.declare_route(&r.path, r.format.name());
        if !formats.contains(&r.format.name()) {
            formats.push(r.format.name());
            state.metrics.declare_format(r.format.name());
        }
    }
    let formats: Arc<[&'static str]> = Arc::from(formats);
    // App-wide answers (unknown path, wrong method, strict HTTP) in the framing of the format
    // serving the first route (`/generate`).
    let framing: Option<&'static Framing> = routes.first().map(|r| r.format.framing());
    let mut router = axum::Router::new()
        .fallback(move || async move {
            match framing {
                Some(f) => native_response((f.not_found)()),
                None => StatusCode::NOT_FOUND.into_response(),
            }
        })
        .route("/health", get(|| async { "" }))
        .route("/ready", get(move || ready(st.clone(), formats.clone())))
        .route("/metrics", get(move || metrics_text(st2.clone())));
    let mut abort_paths: Vec<&'static str> = Vec::new();
    let mut aux_paths: Vec<&'static str> = Vec::new();
    for route in routes {
        let mut filter: Option<MethodFilter> = None;
        for m in &route.methods {
            if let Ok(f) = MethodFilter::try_from(m.clone()) {
                filter = Some(filter.map_or(f, |acc| acc.or(f)));
            }
        }
        let Some(filter) = filter else { continue };
        let st = state.clone();
        let format = route.format.clone();
        let path: Arc<str> = Arc::from(route.path.as_str());
        router = router.route(
            &route.path,
            on(filter, move |headers, body| {
                handler::generate(st.clone(), path.clone(), format.clone(), headers, body)
            }),
        );
        for aux in route.format.aux_routes() {
            if aux_paths.contains(&aux.path) || routes.iter().any(|r| r.path == aux.path) {
                continue;
            }
            aux_paths.push(aux.path);
            let st = state.clone();
            let name = route.format.name();
            let fmt = route.format.clone();
            router = match aux.kind {
                AuxKind::ModelInfo(render) => router.route(
                    aux.path,
                    get(move |headers: http::HeaderMap| {
                        let st = st.clone();
                        let fmt = fmt.clone();
                        async move {
                            if let Err(refused) =
                                handler::authorize(&st, &headers, Need::ApiKey, &*fmt, aux.path)
                            {
                                return *refused;
                            }
                            let Some(facts) = st.router.facts_for(name) else {
                                return refusal(
                                    Some(fmt.framing()),
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    "no available workers",
                                );
                            };
                            let version = st.router.current_version_for(name);
                            let fleet = genfront_format::FleetView {
                                weight_version: version.as_deref(),
                            };
                            native_response(render(&facts, &fleet))
                        }
                    }),
                ),
                AuxKind::GenerateProbe => {
                    let cache = Arc::new(ProbeCache::default());
                    router.route(
                        aux.path,
                        get(move || cached_probe(st.clone(), name, cache.clone())),
                    )
                }
            };
        }
        if let Some(abort) = route.format.abort_route()
            && !abort_paths.contains(&abort.path)
        {
            {
                abort_paths.push(abort.path);
                let st = state.clone();
                let format = route.format.clone();
                router = router.route(
                    abort.path,
                    axum::routing::post(move |headers, body| {
                        handler::abort(st.clone(), format.clone(), abort, headers, body)
                    }),
                );
            }
        }
    }
    router = control::mount(router, &state, routes);
    // Applies to the routes registered above, so it comes last.
    router = router.method_not_allowed_fallback(move || async move {
        match framing {
            Some(f) => native_response((f.method_not_allowed)()),
            None => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        }
    });
    // Every route, the fallbacks included.
    router.layer(axum::middleware::from_fn_with_state(
        (state, framing),
        strict_http,
    ))
}

/// Strict HTTP on every route, before any handler: an HTTP/1.1 request without `Host` is a 400
/// (RFC 9112 §3.2; hyper accepts it, the engines' uvicorn/h11 refuses it), and a request line +
/// headers larger than [`FrontendConfig::max_header_bytes`] is a 431, both in the first
/// route's [`Framing::http_error`] shape and counted in
/// `genfront_limit_hits_total{limit="host_required"|"max_header_bytes"}`.
async fn strict_http(
    axum::extract::State((state, framing)): axum::extract::State<(
        Arc<AppState>,
        Option<&'static Framing>,
    )>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.version() == http::Version::HTTP_11
        && !request.headers().contains_key(http::header::HOST)
    {
        state.metrics.limits().hit("host_required");
        return refusal(
            framing,
            StatusCode::BAD_REQUEST,
            "Invalid HTTP request: an HTTP/1.1 request needs a Host header",
        );
    }
    let head = request_head_bytes(&request);
    if head > state.config.max_header_bytes {
        state.metrics.limits().hit("max_header_bytes");
        return refusal(
            framing,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!(
                "Request header fields too large: {head} bytes, the limit is {} (--max-header-bytes)",
                state.config.max_header_bytes
            ),
        );
    }
    next.run(request).await
}

/// Bytes of `request`'s request line and headers as sent on HTTP/1.1 (`name: value\r\n` each).
fn request_head_bytes(request: &axum::extract::Request) -> usize {
    let line = request.method().as_str().len() + request.uri().to_string().len() + 11;
    line + request
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
}
