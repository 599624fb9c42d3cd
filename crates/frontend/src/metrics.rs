//! Every metric family of the frontend, declared in one place. Handlers call methods on
//! [`Metrics`] and never spell metric names.

use std::sync::{PoisonError, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of `genfront_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Route path.
    pub route: String,
    /// Format name.
    pub format: String,
    /// HTTP status sent (499 for a client that went away before the end).
    pub status: u16,
    /// Error label ([`genfront_format::GenerateError::code`], `client_disconnect`, or empty).
    pub error_type: String,
}

/// Labels of per-format families.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FormatLabels {
    /// Format name.
    pub format: String,
}

/// Labels of `genfront_frontend_overhead_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OverheadLabels {
    /// Format name.
    pub format: String,
    /// Which part of the request: `dispatch` (arrival → engine request handed to the engine
    /// client, client and pause waits excluded) or `relay` (engine output in hand → encoded
    /// bytes handed to the client connection).
    pub stage: String,
}

/// Labels of `genfront_engine_aborts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AbortLabels {
    /// Format name.
    pub format: String,
    /// Why: `client_disconnect`, `abort_request` or `shutdown`.
    pub reason: String,
}

/// Labels of `genfront_limit_hits_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// The limit, named after its flag without the dashes: `max_connections`,
    /// `header_read_timeout`, `write_timeout`, `body_read_timeout`, `body_limit`,
    /// `max_concurrent_requests`, `engine_first_byte_timeout`, `engine_idle_timeout`, the output
    /// caps `max_top_logprobs`, `max_logprob_token_ids`, `max_logprob_entries`, `max_answer_bytes`, `max_stream_bytes`; and the
    /// strict-HTTP rules `host_required`, `content_type`, `content_encoding`, `max_header_bytes`.
    pub limit: String,
}

/// The counters of genfront's limits and timeouts, shared by the serving loop (connections),
/// the handler (bodies, strict HTTP) and the engine wrappers (engine timeouts). Cheap to clone
/// (the families are shared); made before the [`Metrics`] so engines connected earlier can count
/// into it.
#[derive(Clone, Debug, Default)]
pub struct LimitMetrics {
    hits: Family<LimitLabels, Counter>,
    connections: Gauge,
}

impl LimitMetrics {
    /// Count one hit of `limit` (`genfront_limit_hits_total{limit}`).
    pub fn hit(&self, limit: &str) {
        self.hits
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
            })
            .inc();
    }

    /// How often `limit` was hit so far.
    pub fn hits(&self, limit: &str) -> u64 {
        self.hits
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
            })
            .get()
    }

    /// `genfront_connections_open`: client connections being served now.
    pub fn connections(&self) -> &Gauge {
        &self.connections
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~52 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

fn overhead_histogram() -> Histogram {
    // 5 µs .. ~82 ms (15 buckets, doubling), then +Inf.
    Histogram::new(exponential_buckets(0.000_005, 2.0, 15))
}

/// The frontend's metric families (Prometheus text at `GET /metrics`).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    in_flight: Family<FormatLabels, Gauge>,
    duration: HistogramFamily<FormatLabels>,
    ttft: HistogramFamily<FormatLabels>,
    itl: HistogramFamily<FormatLabels>,
    overhead: HistogramFamily<OverheadLabels>,
    input_tokens: Family<FormatLabels, Counter>,
    output_tokens: Family<FormatLabels, Counter>,
    cached_tokens: Family<FormatLabels, Counter>,
    disconnects: Family<FormatLabels, Counter>,
    engine_aborts: Family<AbortLabels, Counter>,
    trace_dropped: Counter,
    limits: LimitMetrics,
    auth_refusals: Family<crate::auth::AuthLabels, Counter>,
    /// [`FormatHandles`] already resolved, per format: a request takes a clone instead of a
    /// dozen label lookups (each a lock, a hash and owned label strings).
    handle_cache: RwLock<Vec<(String, FormatHandles)>>,
    /// `genfront_requests_total` series already resolved (at most [`REQUEST_CACHE_MAX`]), so
    /// the common outcomes of a request cost no label allocation.
    request_cache: RwLock<Vec<(RequestLabels, Counter)>>,
}

/// How many `genfront_requests_total` series [`Metrics::request_done`] keeps at hand; others
/// go through the family's own lookup.
const REQUEST_CACHE_MAX: usize = 64;

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Per-request handles, resolved once so the per-token path does no label lookups.
#[derive(Debug, Clone)]
pub(crate) struct FormatHandles {
    pub(crate) in_flight: Gauge,
    pub(crate) duration: Histogram,
    pub(crate) ttft: Histogram,
    pub(crate) itl: Histogram,
    /// `genfront_frontend_overhead_seconds{stage="dispatch"}`.
    pub(crate) dispatch_overhead: Histogram,
    /// `genfront_frontend_overhead_seconds{stage="relay"}`.
    pub(crate) relay_overhead: Histogram,
    pub(crate) input_tokens: Counter,
    pub(crate) output_tokens: Counter,
    pub(crate) cached_tokens: Counter,
    pub(crate) disconnects: Counter,
    pub(crate) disconnect_aborts: Counter,
}

impl Metrics {
    /// Register every family.
    pub fn new() -> Self {
        Self::with_router(&genfront_router::RouterMetrics::default())
    }

    /// Register every family, the router's (`router`, shared with the [`genfront_router::Router`])
    /// included.
    pub fn with_router(router: &genfront_router::RouterMetrics) -> Self {
        Self::with_limits(router, LimitMetrics::default())
    }

    /// As [`Metrics::with_router`], with the limit counters `limits` (made earlier and shared
    /// with the serving loop and the engine wrappers).
    pub fn with_limits(router: &genfront_router::RouterMetrics, limits: LimitMetrics) -> Self {
        let mut registry = Registry::with_prefix("genfront");
        router.register(&mut registry);
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Generate requests by route, format, HTTP status and error type",
            requests.clone(),
        );
        let in_flight = Family::<FormatLabels, Gauge>::default();
        registry.register(
            "requests_in_flight",
            "Generate requests in flight",
            in_flight.clone(),
        );
        let duration: HistogramFamily<FormatLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "Time from request arrival (queueing included) to the last byte handed to the connection",
            duration.clone(),
        );
        let ttft: HistogramFamily<FormatLabels> = Family::new_with_constructor(latency_histogram);
        registry.register(
            "time_to_first_token_seconds",
            "Time from request arrival to the first output token",
            ttft.clone(),
        );
        let itl: HistogramFamily<FormatLabels> = Family::new_with_constructor(latency_histogram);
        registry.register(
            "inter_token_latency_seconds",
            "Time between consecutive output deltas of a request, per token",
            itl.clone(),
        );
        let overhead: HistogramFamily<OverheadLabels> =
            Family::new_with_constructor(overhead_histogram);
        registry.register(
            "frontend_overhead_seconds",
            "Time genfront itself adds to a request, by stage: dispatch (arrival to the engine request handed to the engine client, once per request, the client's body upload and a pause wait excluded) and relay (an engine output in hand to its encoded bytes handed to the client connection, once per response chunk; unary: last output to the response body ready)",
            overhead.clone(),
        );
        let input_tokens = Family::<FormatLabels, Counter>::default();
        registry.register(
            "input_tokens",
            "Prompt tokens of finished engine requests",
            input_tokens.clone(),
        );
        let output_tokens = Family::<FormatLabels, Counter>::default();
        registry.register(
            "output_tokens",
            "Output tokens delivered",
            output_tokens.clone(),
        );
        let cached_tokens = Family::<FormatLabels, Counter>::default();
        registry.register(
            "cached_tokens",
            "Prompt tokens served from the engine's prefix cache",
            cached_tokens.clone(),
        );
        let disconnects = Family::<FormatLabels, Counter>::default();
        registry.register(
            "client_disconnects",
            "Requests whose client went away before the response was complete",
            disconnects.clone(),
        );
        let engine_aborts = Family::<AbortLabels, Counter>::default();
        registry.register(
            "engine_aborts",
            "Engine requests cancelled by the frontend, by reason",
            engine_aborts.clone(),
        );
        let trace_dropped = Counter::default();
        registry.register(
            "trace_records_dropped",
            "Request trace records dropped because the trace writer was behind",
            trace_dropped.clone(),
        );
        registry.register(
            "limit_hits",
            "Times a limit or timeout refused or ended a connection or request, by limit (flag name)",
            limits.hits.clone(),
        );
        registry.register(
            "connections_open",
            "Client connections being served now (capped by --max-connections)",
            limits.connections.clone(),
        );
        let auth_refusals = Family::<crate::auth::AuthLabels, Counter>::default();
        registry.register(
            "auth_refusals",
            "Requests refused for a missing, wrong or insufficient API key (401/403), by route",
            auth_refusals.clone(),
        );
        Self {
            auth_refusals,
            registry,
            requests,
            in_flight,
            duration,
            ttft,
            itl,
            overhead,
            input_tokens,
            output_tokens,
            cached_tokens,
            disconnects,
            engine_aborts,
            trace_dropped,
            limits,
            handle_cache: RwLock::new(Vec::new()),
            request_cache: RwLock::new(Vec::new()),
        }
    }

    /// Count one refusal on `route` (`genfront_auth_refusals_total{route}`).
    pub fn auth_refused(&self, route: &str) {
        self.auth_refusals
            .get_or_create(&crate::auth::AuthLabels {
                route: route.to_owned(),
            })
            .inc();
    }

    /// The limit counters.
    pub fn limits(&self) -> &LimitMetrics {
        &self.limits
    }

    /// Prometheus text exposition of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Create the per-format series of `format` now (zeros until the first request), so every
    /// family is present in a scrape from start-up.
    pub fn declare_format(&self, format: &str) {
        self.declare_route("", format);
        let _ = self.handles(format);
        let _ = self.engine_aborts.get_or_create(&AbortLabels {
            format: format.to_owned(),
            reason: "abort_request".into(),
        });
    }

    /// Create `genfront_requests_total{route, format, status="200", error_type=""}` at 0, so the
    /// family is in a scrape before the first request. An empty `route` declares nothing.
    pub fn declare_route(&self, route: &str, format: &str) {
        if route.is_empty() {
            return;
        }
        let _ = self.requests.get_or_create(&RequestLabels {
            route: route.to_owned(),
            format: format.to_owned(),
            status: 200,
            error_type: String::new(),
        });
    }

    pub(crate) fn handles(&self, format: &str) -> FormatHandles {
        let cache = self
            .handle_cache
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, h)) = cache.iter().find(|(f, _)| f == format) {
            return h.clone();
        }
        drop(cache);
        let handles = self.resolve_handles(format);
        let mut cache = self
            .handle_cache
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if !cache.iter().any(|(f, _)| f == format) {
            cache.push((format.to_owned(), handles.clone()));
        }
        handles
    }

    /// The label lookups behind [`Metrics::handles`].
    fn resolve_handles(&self, format: &str) -> FormatHandles {
        let l = FormatLabels {
            format: format.to_owned(),
        };
        FormatHandles {
            in_flight: self.in_flight.get_or_create(&l).clone(),
            duration: self.duration.get_or_create(&l).clone(),
            ttft: self.ttft.get_or_create(&l).clone(),
            itl: self.itl.get_or_create(&l).clone(),
            dispatch_overhead: self.overhead_stage(format, "dispatch"),
            relay_overhead: self.overhead_stage(format, "relay"),
            input_tokens: self.input_tokens.get_or_create(&l).clone(),
            output_tokens: self.output_tokens.get_or_create(&l).clone(),
            cached_tokens: self.cached_tokens.get_or_create(&l).clone(),
            disconnects: self.disconnects.get_or_create(&l).clone(),
            disconnect_aborts: self
                .engine_aborts
                .get_or_create(&AbortLabels {
                    format: format.to_owned(),
                    reason: "client_disconnect".into(),
                })
                .clone(),
        }
    }

    fn overhead_stage(&self, format: &str, stage: &str) -> Histogram {
        self.overhead
            .get_or_create(&OverheadLabels {
                format: format.to_owned(),
                stage: stage.to_owned(),
            })
            .clone()
    }

    pub(crate) fn request_done(&self, route: &str, format: &str, status: u16, error_type: &str) {
        let is = |l: &RequestLabels| {
            l.status == status
                && l.route == route
                && l.format == format
                && l.error_type == error_type
        };
        let cache = self
            .request_cache
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, c)) = cache.iter().find(|(l, _)| is(l)) {
            c.inc();
            return;
        }
        drop(cache);
        let labels = RequestLabels {
            route: route.to_owned(),
            format: format.to_owned(),
            status,
            error_type: error_type.to_owned(),
        };
        let counter = self.requests.get_or_create(&labels).clone();
        counter.inc();
        let mut cache = self
            .request_cache
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() < REQUEST_CACHE_MAX && !cache.iter().any(|(l, _)| is(l)) {
            cache.push((labels, counter));
        }
    }

    pub(crate) fn engine_aborts(&self, format: &str, reason: &str, n: u64) {
        self.engine_aborts
            .get_or_create(&AbortLabels {
                format: format.to_owned(),
                reason: reason.to_owned(),
            })
            .inc_by(n);
    }

    pub(crate) fn trace_dropped(&self) {
        self.trace_dropped.inc();
    }
}
