//! Command-line configuration: one typed tree, every flag with an env name.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand};
pub use genfront_bench::args::parse_duration;
use genfront_format::RouteConfig;
use genfront_frontend::FrontendConfig;
use genfront_mocker::{MockConfig, MockEngine, ScriptedFault};
use genfront_protocol::Engine;
use genfront_router::{
    AffinityConfig, BreakerConfig, HealthConfig, PolicyKind, RetryConfig, RouterConfig,
};

use crate::workers::WorkerSpec;

/// genfront: a frontend for LLM inference engines that serves their native token-in/token-out
/// APIs (SGLang `/generate`, vLLM `/inference/v1/generate`).
#[derive(Debug, Parser)]
#[command(name = "genfront", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the frontend (with in-process mock engines: `--mock N`).
    Serve(Box<ServeArgs>),
    /// Run a native mock engine server (SGLang or vLLM API) with scripted faults.
    Mocker(genfront_mockserver::MockServerArgs),
    /// Serve one engine (a native SGLang/vLLM server, or a mock) to frontends over gRPC.
    Sidecar(Box<SidecarArgs>),
    /// Load-test a running SGLang- or vLLM-native server (genfront or an engine) and report
    /// throughput, latency/TTFT/ITL percentiles and per-process CPU and memory.
    Bench(genfront_bench::BenchArgs),
    /// Register a plain engine in etcd for `serve --discovery` frontends and keep the
    /// registration alive until SIGTERM/SIGINT (then revoke it). Needs the `etcd` feature.
    Register(RegisterArgs),
}

/// `genfront register` flags.
#[derive(Debug, Clone, Args)]
pub struct RegisterArgs {
    /// The engine, as `serve --worker` takes it: `sglang=URL[#FACTS]`, `vllm=URL[#FACTS]` or
    /// `grpc://HOST:PORT`. Frontends connect to this address, so it must be reachable from them.
    #[arg(long, env = "GENFRONT_REGISTER_WORKER")]
    pub worker: WorkerSpec,
    /// Where to register: `etcd://HOST:PORT[,HOST:PORT…]/PREFIX` (the frontends' `--discovery`).
    #[arg(long, env = "GENFRONT_REGISTER_ETCD")]
    pub etcd: String,
    /// The worker's role.
    #[arg(long, env = "GENFRONT_REGISTER_ROLE", default_value = "agg", value_parser = ["agg", "prefill", "decode"])]
    pub role: String,
    /// The worker's id (ASCII letters, digits, `.`, `_`, `-`; at most 128); default: from the
    /// worker's kind and address, e.g. `sglang-10.0.0.5-30000`.
    #[arg(long, env = "GENFRONT_REGISTER_ID")]
    pub id: Option<String>,
    /// Lease TTL: a registrant that dies without revoking disappears this long after its last
    /// keep-alive (whole seconds, at least 1 s).
    #[arg(long, env = "GENFRONT_REGISTER_TTL", default_value = "10s", value_parser = parse_duration)]
    pub ttl: Duration,
}

/// `genfront serve` flags.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default: give `--host 0.0.0.0` (with `--api-key` and
    /// `--tls-cert`/`--tls-key`) to serve other machines; a non-loopback address without API
    /// keys is served with a loud start-up warning.
    #[arg(long, env = "GENFRONT_HOST", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST), help_heading = "Listener")]
    pub host: IpAddr,
    /// TLS certificate chain (PEM) for the listener; with `--tls-key`, genfront serves HTTPS
    /// (HTTP/1.1 and HTTP/2 via ALPN) instead of plain HTTP.
    #[arg(
        long,
        env = "GENFRONT_TLS_CERT",
        requires = "tls_key",
        help_heading = "Security"
    )]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1) of `--tls-cert`.
    #[arg(
        long,
        env = "GENFRONT_TLS_KEY",
        requires = "tls_cert",
        help_heading = "Security"
    )]
    pub tls_key: Option<PathBuf>,
    /// A tenant API key for the generate, abort and server-info routes (`Authorization: Bearer
    /// KEY`); repeat for several tenants (a tenant aborts only its own requests). In the
    /// environment: comma-separated. With no key at all every route is open (the engines' rule).
    #[arg(
        long = "api-key",
        env = "GENFRONT_API_KEY",
        value_delimiter = ',',
        hide_env_values = true,
        help_heading = "Security"
    )]
    pub api_keys: Vec<genfront_frontend::SecretKey>,
    /// A file of tenant API keys, one per line (blank lines and `#` comments skipped), in
    /// addition to `--api-key`.
    #[arg(long, env = "GENFRONT_API_KEY_FILE", help_heading = "Security")]
    pub api_key_file: Option<PathBuf>,
    /// An admin API key: everything a tenant key may do, plus `abort_all` and aborting any
    /// tenant's requests. Repeatable; comma-separated in the environment.
    #[arg(
        long = "admin-api-key",
        env = "GENFRONT_ADMIN_API_KEY",
        value_delimiter = ',',
        hide_env_values = true,
        help_heading = "Security"
    )]
    pub admin_api_keys: Vec<genfront_frontend::SecretKey>,
    /// CA certificates (PEM) to trust for `grpcs://` workers (TLS sidecars).
    #[arg(long, env = "GENFRONT_WORKER_TLS_CA", help_heading = "Security")]
    pub worker_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) genfront presents to `grpcs://` workers that require mTLS
    /// (`sidecar --tls-client-ca`); with `--worker-tls-key`.
    #[arg(
        long,
        env = "GENFRONT_WORKER_TLS_CERT",
        requires = "worker_tls_key",
        help_heading = "Security"
    )]
    pub worker_tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `--worker-tls-cert`.
    #[arg(
        long,
        env = "GENFRONT_WORKER_TLS_KEY",
        requires = "worker_tls_cert",
        help_heading = "Security"
    )]
    pub worker_tls_key: Option<PathBuf>,
    /// Port to listen on.
    #[arg(
        long,
        env = "GENFRONT_PORT",
        default_value_t = 8000,
        help_heading = "Listener"
    )]
    pub port: u16,

    /// Format of `POST /generate`: `sglang` (default) or `vllm`.
    #[arg(long, env = "DYN_GENERATE_FORMAT", help_heading = "Routes")]
    pub generate_format: Option<String>,
    /// Extra route `PATH=FORMAT` (repeatable; env: comma-separated).
    #[arg(long = "route", env = "GENFRONT_ROUTES", value_delimiter = ',', value_parser = parse_route, help_heading = "Routes")]
    pub routes: Vec<(String, String)>,
    /// The settings the linked formats declare (e.g. SGLang's `--sglang-incremental-streaming`,
    /// env `GENFRONT_SGLANG_INCREMENTAL_STREAMING`): see [`crate::FormatArgs`].
    #[command(flatten)]
    pub format_settings: crate::FormatArgs,

    /// Engine worker (repeatable): `sglang=http://HOST:PORT`, `vllm=http://HOST:PORT` (the
    /// engine's native HTTP API, one hop) or `grpc://HOST:PORT` (a `genfront sidecar`).
    #[arg(
        long = "worker",
        env = "GENFRONT_WORKERS",
        value_delimiter = ',',
        help_heading = "Engines"
    )]
    pub workers: Vec<WorkerSpec>,
    /// Prefill worker of a prefill/decode pair (repeatable; same syntax as `--worker`; an
    /// SGLang prefill may add its bootstrap port: `sglang=URL#bootstrap=8998`).
    #[arg(
        long = "prefill",
        env = "GENFRONT_PREFILL_WORKERS",
        value_delimiter = ',',
        help_heading = "Engines"
    )]
    pub prefill: Vec<WorkerSpec>,
    /// Decode worker of a prefill/decode pair (repeatable; same syntax as `--worker`).
    #[arg(
        long = "decode",
        env = "GENFRONT_DECODE_WORKERS",
        value_delimiter = ',',
        help_heading = "Engines"
    )]
    pub decode: Vec<WorkerSpec>,
    /// Discover workers in etcd: `etcd://HOST:PORT[,HOST:PORT…]/PREFIX`. Workers registered
    /// there (`genfront register`, `genfront sidecar --register`) are added and removed live,
    /// next to any static `--worker`s; with it no static worker is needed. Needs the `etcd`
    /// feature.
    #[arg(long, env = "GENFRONT_DISCOVERY", help_heading = "Engines")]
    pub discovery: Option<String>,
    /// Longest wait for a worker's first output of a request: the whole answer of a unary
    /// request (engines send it when complete), queueing + prefill of a stream. Beyond it the
    /// engine request is aborted, the client gets a 504 and the worker counts as failed at its
    /// circuit breaker. `0` disables it.
    #[arg(long, env = "GENFRONT_ENGINE_FIRST_BYTE_TIMEOUT", default_value = "600s", value_parser = parse_duration, help_heading = "Engines")]
    pub engine_first_byte_timeout: Duration,
    /// Longest gap between two outputs of a worker's stream (as `--engine-first-byte-timeout`
    /// beyond it). `0` disables it.
    #[arg(long, env = "GENFRONT_ENGINE_IDLE_TIMEOUT", default_value = "300s", value_parser = parse_duration, help_heading = "Engines")]
    pub engine_idle_timeout: Duration,
    /// Number of in-process mock engines; default 1 without `--worker`/`--prefill`/`--decode`/
    /// `--mock-prefill`/`--mock-decode`/`--discovery`, else 0.
    #[arg(long, env = "GENFRONT_MOCK", help_heading = "Mock engine")]
    pub mock: Option<usize>,
    /// Number of in-process mock prefill engines (P/D).
    #[arg(
        long,
        env = "GENFRONT_MOCK_PREFILL",
        default_value_t = 0,
        help_heading = "Mock engine"
    )]
    pub mock_prefill: usize,
    /// Number of in-process mock decode engines (P/D).
    #[arg(
        long,
        env = "GENFRONT_MOCK_DECODE",
        default_value_t = 0,
        help_heading = "Mock engine"
    )]
    pub mock_decode: usize,
    /// How mock prefill engines hand the KV to decode: `bootstrap` (SGLang: concurrent legs
    /// sharing a bootstrap room) or `kv_transfer` (vLLM: prefill first, then decode with its
    /// `kv_transfer_params`).
    #[arg(long, env = "GENFRONT_MOCK_HANDOFF", default_value = "bootstrap", value_parser = parse_handoff, help_heading = "Mock engine")]
    pub mock_handoff: genfront_protocol::Handoff,
    /// Divide every mock delay by this factor.
    #[arg(
        long,
        env = "GENFRONT_MOCK_SPEEDUP",
        default_value_t = 1.0,
        help_heading = "Mock engine"
    )]
    pub mock_speedup: f64,
    /// No mock delays at all (for benchmarks).
    #[arg(long, env = "GENFRONT_MOCK_ZERO_DELAY", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Mock engine")]
    pub mock_zero_delay: bool,
    /// Served model name of the mock engines.
    #[arg(
        long,
        env = "GENFRONT_MOCK_MODEL",
        default_value = "genfront-mock",
        help_heading = "Mock engine"
    )]
    pub mock_model: String,
    /// Other names the mock model answers to (repeatable; like vLLM's `--served-model-name a b`).
    #[arg(
        long = "mock-model-alias",
        env = "GENFRONT_MOCK_MODEL_ALIASES",
        value_delimiter = ',',
        help_heading = "Mock engine"
    )]
    pub mock_model_aliases: Vec<String>,
    /// Vocabulary size of the mock model.
    #[arg(
        long,
        env = "GENFRONT_MOCK_VOCAB_SIZE",
        default_value_t = 152_064,
        help_heading = "Mock engine"
    )]
    pub mock_vocab_size: u32,
    /// Context length of the mock model, in tokens.
    #[arg(
        long,
        env = "GENFRONT_MOCK_CONTEXT_LEN",
        default_value_t = 32_768,
        help_heading = "Mock engine"
    )]
    pub mock_context_len: u32,
    /// End-of-sequence token id of the mock model.
    #[arg(
        long,
        env = "GENFRONT_MOCK_EOS_TOKEN_ID",
        default_value_t = 2,
        help_heading = "Mock engine"
    )]
    pub mock_eos_token_id: u32,
    /// Report routed experts (MoE routing replay), like vLLM's `--enable-return-routed-experts`;
    /// SGLang clients still ask per request with `return_routed_experts`.
    #[arg(long, env = "GENFRONT_MOCK_ROUTED_EXPERTS", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = true, default_missing_value = "true", help_heading = "Mock engine")]
    pub mock_routed_experts: bool,
    /// Report sampling masks, like vLLM's `--return-sampling-mask`.
    #[arg(long, env = "GENFRONT_MOCK_SAMPLING_MASK", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Mock engine")]
    pub mock_sampling_mask: bool,
    /// Probability, per decode position, that the mock model ranks an EOS id first (so
    /// generations end naturally), in `[0, 1]`; `0` lets generations run to `max_new_tokens` /
    /// stop ids.
    #[arg(
        long,
        env = "GENFRONT_MOCK_EOS_PROBABILITY",
        default_value_t = 0.01,
        help_heading = "Mock engine"
    )]
    pub mock_eos_probability: f64,
    /// Prefix-cache granularity of the mock engine, in tokens (only full blocks are cached and
    /// reported as cached tokens): `1` is SGLang's radix cache at its default `--page-size 1`,
    /// `16` vLLM's default `--block-size`; `0` disables the cache.
    #[arg(
        long,
        env = "GENFRONT_MOCK_PREFIX_CACHE_BLOCK_SIZE",
        default_value_t = 16,
        help_heading = "Mock engine"
    )]
    pub mock_prefix_cache_block_size: u32,
    /// Scripted fault for every mock engine (repeatable), e.g. `error@3:unavailable`,
    /// `fail-after@2:5`, `stall@1:3`.
    #[arg(
        long = "mock-fault",
        env = "GENFRONT_MOCK_FAULTS",
        value_delimiter = ',',
        help_heading = "Mock engine"
    )]
    pub mock_faults: Vec<ScriptedFault>,

    /// Maximum request body size (bytes, or with a KiB/MiB/GiB suffix).
    #[arg(long, env = "GENFRONT_BODY_LIMIT", default_value = "64MiB", value_parser = parse_byte_size, help_heading = "Limits")]
    pub body_limit: usize,
    /// Most engine requests one client request may expand to (batch size × `n`).
    #[arg(
        long,
        env = "GENFRONT_MAX_ENGINE_REQUESTS",
        default_value_t = 1024,
        help_heading = "Limits"
    )]
    pub max_engine_requests: usize,
    /// Most top logprobs per position one request may ask for (a native 400 beyond it).
    /// Default: vLLM's default `max_logprobs`; SGLang itself accepts up to the vocabulary.
    #[arg(
        long,
        env = "GENFRONT_MAX_TOP_LOGPROBS",
        default_value_t = genfront_frontend::DEFAULT_MAX_TOP_LOGPROBS,
        help_heading = "Limits"
    )]
    pub max_top_logprobs: u32,
    /// Most listed token ids (SGLang `token_ids_logprob`, vLLM `logprob_token_ids`) whose
    /// logprobs one request may ask for at every position (a native 400 beyond it).
    #[arg(
        long,
        env = "GENFRONT_MAX_LOGPROB_TOKEN_IDS",
        default_value_t = genfront_frontend::DEFAULT_MAX_LOGPROB_TOKEN_IDS,
        help_heading = "Limits"
    )]
    pub max_logprob_token_ids: u32,
    /// Most logprob entries one request may ask for: prompt rows × entries per position plus,
    /// with output logprobs, n × max_tokens × entries per position, over all engine requests
    /// (entries per position = max(k, 1) + listed ids). A native 400 beyond it.
    #[arg(
        long,
        env = "GENFRONT_MAX_LOGPROB_ENTRIES",
        default_value_t = genfront_frontend::DEFAULT_MAX_LOGPROB_ENTRIES,
        help_heading = "Limits"
    )]
    pub max_logprob_entries: u64,
    /// Most routed-expert ids one request may ask for (MoE routing replay): (prompt rows from
    /// the routed-experts start + max_tokens) × n × 1,024 ids per row (layers × top-k, assumed:
    /// the engine facts do not carry it), over all engine requests. A native 400 beyond it.
    #[arg(
        long,
        env = "GENFRONT_MAX_ROUTED_EXPERT_ENTRIES",
        default_value_t = genfront_frontend::DEFAULT_MAX_ROUTED_EXPERT_ENTRIES,
        help_heading = "Limits"
    )]
    pub max_routed_expert_entries: u64,
    /// Most bytes of one unary answer, tripped on a running estimate (never below the real
    /// size) while the answer is accumulated (a native 400 beyond it).
    #[arg(long, env = "GENFRONT_MAX_ANSWER_BYTES", default_value = "256MiB", value_parser = parse_byte_size, help_heading = "Limits")]
    pub max_answer_bytes: usize,
    /// Most bytes of one SSE response (SGLang's cumulative mode re-sends the whole answer in
    /// every event); beyond it the stream ends with the native error event and the engine work
    /// is aborted.
    #[arg(long, env = "GENFRONT_MAX_STREAM_BYTES", default_value = "1GiB", value_parser = parse_byte_size, help_heading = "Limits")]
    pub max_stream_bytes: usize,
    /// Most request ids one abort call may name (vLLM's id list); beyond it a native 400 naming
    /// this flag.
    #[arg(
        long,
        env = "GENFRONT_MAX_ABORT_IDS",
        default_value_t = genfront_frontend::DEFAULT_MAX_ABORT_IDS,
        help_heading = "Limits"
    )]
    pub max_abort_ids: usize,
    /// Maximum concurrent generate requests (503 with Retry-After beyond it); unlimited if unset.
    #[arg(
        long,
        env = "GENFRONT_MAX_CONCURRENT_REQUESTS",
        help_heading = "Limits"
    )]
    pub max_concurrent_requests: Option<usize>,
    /// How long in-flight requests may finish after SIGTERM/SIGINT before they are aborted
    /// (e.g. `30s`, `500ms`); 2 s later every connection still open is closed. A second signal
    /// exits at once.
    #[arg(long, env = "GENFRONT_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration, help_heading = "Limits")]
    pub shutdown_grace: Duration,
    /// Most client connections served at once; beyond it new connections wait in the kernel's
    /// accept queue (a rate-limited warning and `genfront_limit_hits_total{limit="max_connections"}`).
    /// Default: half of the open-file limit (`RLIMIT_NOFILE`, raised to its hard limit at
    /// start-up) minus 128, at least 64.
    #[arg(long, env = "GENFRONT_MAX_CONNECTIONS", help_heading = "Limits")]
    pub max_connections: Option<usize>,
    /// HTTP/1: longest wait for a request's headers, the first on a connection and every later
    /// one (so also the keep-alive idle timeout); the connection is closed without an answer.
    /// `0` disables it.
    #[arg(long, env = "GENFRONT_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration, help_heading = "Limits")]
    pub header_read_timeout: Duration,
    /// Longest time a request body may take to arrive, in total (408 in the native envelope).
    /// `0` disables it.
    #[arg(long, env = "GENFRONT_BODY_READ_TIMEOUT", default_value = "60s", value_parser = parse_duration, help_heading = "Limits")]
    pub body_read_timeout: Duration,
    /// Longest time a write to a client may make no progress (a client that stops reading its
    /// stream or unary answer); the connection is closed and the engine work aborted. `0`
    /// disables it.
    #[arg(long, env = "GENFRONT_WRITE_TIMEOUT", default_value = "60s", value_parser = parse_duration, help_heading = "Limits")]
    pub write_timeout: Duration,
    /// Most bytes of request line + headers (431 with a JSON body beyond it; hyper's own
    /// empty-bodied 431 beyond twice it).
    #[arg(long, env = "GENFRONT_MAX_HEADER_BYTES", default_value = "64KiB", value_parser = parse_byte_size, help_heading = "Limits")]
    pub max_header_bytes: usize,
    /// Most header fields of one request (hyper's 431 beyond it).
    #[arg(
        long,
        env = "GENFRONT_MAX_HEADERS",
        default_value_t = 100,
        help_heading = "Limits"
    )]
    pub max_headers: usize,
    /// HTTP/2 keep-alive ping interval (`0`: no pings).
    #[arg(long, env = "GENFRONT_HTTP2_KEEPALIVE_INTERVAL", default_value = "20s", value_parser = parse_duration, help_heading = "Limits")]
    pub http2_keepalive_interval: Duration,
    /// HTTP/2: how long a keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, env = "GENFRONT_HTTP2_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_duration, help_heading = "Limits")]
    pub http2_keepalive_timeout: Duration,
    /// HTTP/2: most concurrent streams per connection.
    #[arg(
        long,
        env = "GENFRONT_HTTP2_MAX_CONCURRENT_STREAMS",
        default_value_t = 256,
        help_heading = "Limits"
    )]
    pub http2_max_concurrent_streams: u32,

    /// Routing policy: `prefix` (default; prefix affinity with a load bound), `round_robin`,
    /// `random`, `least_load`, `power_of_two` or `session`.
    #[arg(
        long,
        env = "GENFRONT_POLICY",
        default_value = "prefix",
        help_heading = "Routing"
    )]
    pub policy: PolicyKind,
    /// Tokens per hashed block of the `prefix` policy.
    #[arg(
        long,
        env = "GENFRONT_PREFIX_BLOCK_TOKENS",
        default_value_t = 16,
        help_heading = "Routing"
    )]
    pub prefix_block_tokens: usize,
    /// Share of the prompt a remembered prefix must cover for the `prefix` policy to follow it.
    #[arg(
        long,
        env = "GENFRONT_PREFIX_CACHE_THRESHOLD",
        default_value_t = 0.5,
        help_heading = "Routing"
    )]
    pub prefix_cache_threshold: f64,
    /// Load bound of the affinity policies, absolute part: a worker more than this many in-flight
    /// requests above the least loaded (and `--balance-rel` times it) is skipped.
    #[arg(
        long,
        env = "GENFRONT_BALANCE_ABS",
        default_value_t = 32,
        help_heading = "Routing"
    )]
    pub balance_abs: u64,
    /// Load bound of the affinity policies, relative part (see `--balance-abs`).
    #[arg(
        long,
        env = "GENFRONT_BALANCE_REL",
        default_value_t = 1.5,
        help_heading = "Routing"
    )]
    pub balance_rel: f64,
    /// `session` policy: re-pin a session when its worker has this many more in-flight requests
    /// than the least loaded.
    #[arg(
        long,
        env = "GENFRONT_SESSION_MARGIN",
        default_value_t = 8,
        help_heading = "Routing"
    )]
    pub session_margin: u64,
    /// Most extra attempts on other workers for a request that fails before its first output
    /// (connect failure, 502/503/504); 0 disables retries.
    #[arg(
        long,
        env = "GENFRONT_RETRY_MAX",
        default_value_t = 2,
        help_heading = "Routing"
    )]
    pub retry_max: u32,
    /// Backoff before the first retry (doubled for each further one, with jitter).
    #[arg(long, env = "GENFRONT_RETRY_BACKOFF", default_value = "20ms", value_parser = parse_duration, help_heading = "Routing")]
    pub retry_backoff: Duration,
    /// Retry budget: retries may add at most this share of requests (plus 10).
    #[arg(
        long,
        env = "GENFRONT_RETRY_BUDGET",
        default_value_t = 0.2,
        help_heading = "Routing"
    )]
    pub retry_budget: f64,
    /// Consecutive worker failures (transport errors, 5xx other than 503, engine timeouts) that
    /// open a worker's circuit breaker; 0 disables the breaker.
    #[arg(
        long,
        env = "GENFRONT_BREAKER_FAILURES",
        default_value_t = 5,
        help_heading = "Routing"
    )]
    pub breaker_failures: u32,
    /// How long an open breaker refuses traffic before one trial request.
    #[arg(long, env = "GENFRONT_BREAKER_OPEN", default_value = "5s", value_parser = parse_duration, help_heading = "Routing")]
    pub breaker_open: Duration,
    /// Time between health probes (native `GET /health`) of each worker.
    #[arg(long, env = "GENFRONT_HEALTH_INTERVAL", default_value = "2s", value_parser = parse_duration, help_heading = "Routing")]
    pub health_interval: Duration,
    /// Time one health probe may take.
    #[arg(long, env = "GENFRONT_HEALTH_TIMEOUT", default_value = "2s", value_parser = parse_duration, help_heading = "Routing")]
    pub health_timeout: Duration,
    /// Consecutive failed probes that take a worker out of rotation.
    #[arg(
        long,
        env = "GENFRONT_HEALTH_FALL",
        default_value_t = 2,
        help_heading = "Routing"
    )]
    pub health_fall: u32,
    /// Consecutive passing probes that put an unhealthy worker back.
    #[arg(
        long,
        env = "GENFRONT_HEALTH_RISE",
        default_value_t = 1,
        help_heading = "Routing"
    )]
    pub health_rise: u32,

    /// Fleet control: how long a new request waits while every worker of its format is paused
    /// before the retryable 503 `paused` (`0`: refuse at once).
    #[arg(long, env = "GENFRONT_PAUSE_WAIT", default_value = "30s", value_parser = parse_duration, help_heading = "Fleet control")]
    pub pause_wait: Duration,
    /// Fleet control: how long one worker may take to answer a control call (pause, weight
    /// update, …); a worker that does not answer in time is reported as `timeout`.
    #[arg(long, env = "GENFRONT_CONTROL_TIMEOUT", default_value = "300s", value_parser = parse_duration, help_heading = "Fleet control")]
    pub control_timeout: Duration,
    /// `DELETE /workers/{id}`: how long the worker's in-flight requests may finish before it is
    /// removed.
    #[arg(long, env = "GENFRONT_WORKER_DRAIN_TIMEOUT", default_value = "30s", value_parser = parse_duration, help_heading = "Fleet control")]
    pub worker_drain_timeout: Duration,
    /// During a refit, route requests only to workers on the fleet's current weight version
    /// (the version named by the last successful weight update or version tag).
    #[arg(long, env = "GENFRONT_ROUTE_CURRENT_VERSION", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Fleet control")]
    pub route_current_version: bool,

    /// Append one JSON line per finished request to this file (RL replay trace).
    #[arg(long, env = "GENFRONT_TRACE_FILE", help_heading = "Observability")]
    pub trace_file: Option<PathBuf>,
}

impl Default for ServeArgs {
    fn default() -> Self {
        Self::parse_from(["serve"])
    }
}

#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    args: ServeArgs,
}

impl ServeArgs {
    /// Parse `serve` flags from an argv (first item = program name); handy for tests.
    pub fn parse_from<I, T>(argv: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        ServeOnly::parse_from(argv).args
    }

    /// Route configuration for [`genfront_format::resolve_routes`].
    pub fn route_config(&self) -> RouteConfig {
        RouteConfig {
            generate_format: self.generate_format.clone(),
            extra_routes: self.routes.clone(),
            settings: self.format_settings.0.clone(),
        }
    }

    /// Router configuration.
    pub fn router_config(&self) -> RouterConfig {
        RouterConfig {
            policy: self.policy,
            prefill_policy: None,
            decode_policy: None,
            affinity: AffinityConfig {
                block_tokens: self.prefix_block_tokens,
                cache_threshold: self.prefix_cache_threshold,
                balance_abs: self.balance_abs,
                balance_rel: self.balance_rel,
                session_margin: self.session_margin,
                ..AffinityConfig::default()
            },
            breaker: BreakerConfig {
                failure_threshold: self.breaker_failures,
                open_for: self.breaker_open,
            },
            retry: RetryConfig {
                max_retries: self.retry_max,
                backoff: self.retry_backoff,
                budget_ratio: self.retry_budget,
                ..RetryConfig::default()
            },
            health: HealthConfig {
                interval: self.health_interval,
                timeout: self.health_timeout,
                fall: self.health_fall,
                rise: self.health_rise,
                ..HealthConfig::default()
            },
            route_current_version: self.route_current_version,
        }
    }

    /// The API keys of `--api-key`, `--api-key-file` and `--admin-api-key`.
    ///
    /// # Errors
    /// The keys file cannot be read, or a key is empty or given twice.
    pub fn api_keys(&self) -> anyhow::Result<genfront_frontend::ApiKeys> {
        let mut tenants: Vec<String> = self
            .api_keys
            .iter()
            .map(|k| k.expose().to_owned())
            .collect();
        if let Some(path) = &self.api_key_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("cannot read --api-key-file {}: {e}", path.display())
            })?;
            tenants.extend(genfront_frontend::ApiKeys::parse_file(&text));
        }
        let admins: Vec<String> = self
            .admin_api_keys
            .iter()
            .map(|k| k.expose().to_owned())
            .collect();
        genfront_frontend::ApiKeys::new(&tenants, &admins).map_err(|e| anyhow::anyhow!(e))
    }

    /// Frontend limits.
    pub fn frontend_config(&self) -> FrontendConfig {
        FrontendConfig {
            body_limit: self.body_limit,
            max_concurrent_requests: self.max_concurrent_requests,
            max_engine_requests: self.max_engine_requests,
            body_read_timeout: nonzero(self.body_read_timeout),
            max_header_bytes: self.max_header_bytes,
            max_top_logprobs: self.max_top_logprobs,
            max_logprob_token_ids: self.max_logprob_token_ids,
            max_logprob_entries: self.max_logprob_entries,
            max_routed_expert_entries: self.max_routed_expert_entries,
            max_answer_bytes: self.max_answer_bytes,
            max_stream_bytes: self.max_stream_bytes as u64,
            max_abort_ids: self.max_abort_ids,
            pause_wait: self.pause_wait,
            control_timeout: self.control_timeout.max(Duration::from_millis(1)),
            drain_timeout: self.worker_drain_timeout,
            ..FrontendConfig::default()
        }
    }

    /// Engine time limits of `--worker`/`--prefill`/`--decode` engines (`0` disables one).
    pub fn engine_timeouts(&self) -> genfront_engine_http::EngineTimeouts {
        genfront_engine_http::EngineTimeouts {
            first_byte: nonzero(self.engine_first_byte_timeout),
            idle: nonzero(self.engine_idle_timeout),
        }
    }

    /// Connection-level limits of the serving loop.
    pub fn conn_limits(&self) -> crate::serving::ConnLimits {
        crate::serving::ConnLimits {
            max_connections: self
                .max_connections
                .unwrap_or_else(crate::serving::default_max_connections),
            header_read_timeout: nonzero(self.header_read_timeout),
            write_timeout: nonzero(self.write_timeout),
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            http2_keepalive_interval: nonzero(self.http2_keepalive_interval),
            http2_keepalive_timeout: self.http2_keepalive_timeout,
            http2_max_concurrent_streams: self.http2_max_concurrent_streams,
        }
    }

    /// The mock engine configuration these flags describe.
    pub fn mock_config(&self) -> MockConfig {
        let mut cfg = if self.mock_zero_delay {
            MockConfig::zero_delay()
        } else {
            MockConfig::default()
        };
        cfg.speedup = self.mock_speedup;
        cfg.info.model = self.mock_model.clone();
        cfg.info.model_aliases = self.mock_model_aliases.clone();
        cfg.info.vocab_size = Some(self.mock_vocab_size);
        cfg.info.max_context_len = self.mock_context_len;
        cfg.info.eos_token_ids = vec![self.mock_eos_token_id];
        cfg.info.routed_experts = self.mock_routed_experts;
        cfg.info.sampling_mask = self.mock_sampling_mask;
        cfg.eos_probability = self.mock_eos_probability;
        cfg.prefix_cache.block_size = self.mock_prefix_cache_block_size;
        cfg.faults = self.mock_faults.clone();
        cfg
    }

    /// Number of mock engines to run.
    pub fn mock_count(&self) -> usize {
        let others = !self.workers.is_empty()
            || !self.prefill.is_empty()
            || !self.decode.is_empty()
            || self.mock_prefill > 0
            || self.mock_decode > 0
            || self.discovery.is_some();
        self.mock.unwrap_or(if others { 0 } else { 1 })
    }

    /// Build the `--mock-prefill N` (role prefill) or `--mock-decode M` (role decode) engines.
    ///
    /// # Errors
    /// An invalid mock configuration.
    pub fn mock_pd_engines(
        &self,
        role: genfront_protocol::PdRole,
    ) -> anyhow::Result<Vec<Arc<dyn Engine>>> {
        let mut cfg = self.mock_config();
        cfg.role = Some(role);
        let n = match role {
            genfront_protocol::PdRole::Prefill => self.mock_prefill,
            genfront_protocol::PdRole::Decode => self.mock_decode,
        };
        (0..n)
            .map(|_| Ok(Arc::new(MockEngine::new(cfg.clone())?) as Arc<dyn Engine>))
            .collect()
    }

    /// Build the `--mock N` engines.
    ///
    /// # Errors
    /// An invalid mock configuration.
    pub fn mock_engines(&self) -> anyhow::Result<Vec<Arc<dyn Engine>>> {
        let cfg = self.mock_config();
        (0..self.mock_count())
            .map(|_| Ok(Arc::new(MockEngine::new(cfg.clone())?) as Arc<dyn Engine>))
            .collect()
    }
}

/// `genfront sidecar` flags.
#[derive(Debug, Clone, Args)]
pub struct SidecarArgs {
    /// The engine to serve: `sglang=http://HOST:PORT`, `vllm=http://HOST:PORT`, or `mock` (an
    /// in-process mock engine with the `--mock-*` settings).
    #[arg(long, env = "GENFRONT_SIDECAR_ENGINE")]
    pub engine: SidecarEngine,
    /// gRPC listen address. Loopback by default; a non-loopback address without
    /// `--tls-client-ca` (mTLS: only frontends with a certificate from that CA may call) is
    /// served with a loud start-up warning, since anyone who reaches it can generate.
    #[arg(
        long,
        env = "GENFRONT_SIDECAR_LISTEN",
        default_value = "127.0.0.1:50051"
    )]
    pub listen: SocketAddr,
    /// TLS certificate chain (PEM): serve gRPC over TLS (frontends use `grpcs://`).
    #[arg(long, env = "GENFRONT_SIDECAR_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of `--tls-cert`.
    #[arg(long, env = "GENFRONT_SIDECAR_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM): require every client to present a certificate signed by one
    /// (mTLS). Needs `--tls-cert`.
    #[arg(long, env = "GENFRONT_SIDECAR_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With `--engine mock`: no mock delays.
    #[arg(long, env = "GENFRONT_SIDECAR_MOCK_ZERO_DELAY", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub mock_zero_delay: bool,
    /// Register this sidecar in etcd (`etcd://HOST:PORT[,HOST:PORT…]/PREFIX`) while it serves,
    /// for `serve --discovery` frontends; the registration is revoked on SIGTERM/SIGINT. Needs
    /// `--advertise` and the `etcd` feature.
    #[arg(long, env = "GENFRONT_SIDECAR_REGISTER", requires = "advertise")]
    pub register: Option<String>,
    /// The address frontends reach this sidecar at, as `grpc://HOST:PORT` (or `grpcs://…` with
    /// TLS); registered with `--register`.
    #[arg(long, env = "GENFRONT_SIDECAR_ADVERTISE")]
    pub advertise: Option<WorkerSpec>,
    /// The registered worker id (as `register --id`); default from the advertised address.
    #[arg(long, env = "GENFRONT_SIDECAR_WORKER_ID")]
    pub worker_id: Option<String>,
    /// The registered role.
    #[arg(long, env = "GENFRONT_SIDECAR_ROLE", default_value = "agg", value_parser = ["agg", "prefill", "decode"])]
    pub role: String,
    /// Lease TTL of the registration (as `register --ttl`).
    #[arg(long, env = "GENFRONT_SIDECAR_REGISTER_TTL", default_value = "10s", value_parser = parse_duration)]
    pub register_ttl: Duration,
}

/// What a sidecar serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarEngine {
    /// An in-process mock engine.
    Mock,
    /// A native engine server.
    Worker(WorkerSpec),
}

impl std::str::FromStr for SidecarEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim() == "mock" {
            return Ok(SidecarEngine::Mock);
        }
        match s.parse::<WorkerSpec>()? {
            WorkerSpec::Grpc(_) => {
                Err("a sidecar serves a native engine or `mock`, not another sidecar".into())
            }
            w => Ok(SidecarEngine::Worker(w)),
        }
    }
}

/// `None` for a zero duration (the flags' "disabled").
fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

fn parse_handoff(s: &str) -> Result<genfront_protocol::Handoff, String> {
    match s.trim() {
        "bootstrap" => Ok(genfront_protocol::Handoff::Bootstrap {
            host: "mock".to_owned(),
            port: None,
        }),
        "kv_transfer" | "kv-transfer" => Ok(genfront_protocol::Handoff::KvTransfer),
        other => Err(format!(
            "unknown hand-off `{other}`: expected bootstrap or kv_transfer"
        )),
    }
}

fn parse_route(s: &str) -> Result<(String, String), String> {
    let (path, format) = s
        .split_once('=')
        .ok_or_else(|| format!("expected PATH=FORMAT, got `{s}`"))?;
    Ok((path.trim().to_owned(), format.trim().to_owned()))
}

/// Parse a byte size: a plain number of bytes or a number with `KiB`, `MiB`, `GiB` (or `K`, `M`,
/// `G`, `KB`, `MB`, `GB`, all binary) suffix.
///
/// # Errors
/// Not a number, unknown suffix, or overflow.
pub fn parse_byte_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("invalid size `{s}`"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit `{other}` in `{s}`")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size `{s}` overflows"))
}

#[cfg(test)]
mod tests {
    use genfront_frontend::DEFAULT_BODY_LIMIT;

    use super::*;

    #[test]
    fn defaults() {
        let a = ServeArgs::default();
        assert_eq!(a.port, 8000);
        assert_eq!(a.body_limit, DEFAULT_BODY_LIMIT);
        // The output caps' flag defaults are the frontend's defaults.
        let f = a.frontend_config();
        let d = FrontendConfig::default();
        assert_eq!(
            (f.max_top_logprobs, f.max_logprob_token_ids),
            (d.max_top_logprobs, d.max_logprob_token_ids)
        );
        assert_eq!(f.max_logprob_entries, d.max_logprob_entries);
        assert_eq!(
            (f.max_answer_bytes, f.max_stream_bytes),
            (d.max_answer_bytes, d.max_stream_bytes)
        );
        assert_eq!(a.shutdown_grace, Duration::from_secs(30));
        assert_eq!(a.mock_count(), 1);
        let w = ServeArgs::parse_from(["serve", "--worker", "grpc://127.0.0.1:1"]);
        assert_eq!(w.mock_count(), 0);
        assert!(
            !a.format_settings
                .0
                .bool(&genfront_sglang::INCREMENTAL_STREAMING)
        );
        assert!(a.max_concurrent_requests.is_none());
        let limits = a.conn_limits();
        assert_eq!(limits.header_read_timeout, Some(Duration::from_secs(30)));
        assert_eq!(limits.write_timeout, Some(Duration::from_secs(60)));
        assert!(limits.max_connections >= 64);
        assert_eq!(
            a.frontend_config().body_read_timeout,
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            a.engine_timeouts().first_byte,
            Some(Duration::from_secs(600))
        );
    }

    #[test]
    fn zero_disables_a_timeout() {
        let a = ServeArgs::parse_from([
            "serve",
            "--header-read-timeout",
            "0",
            "--engine-idle-timeout",
            "0",
            "--max-connections",
            "7",
            "--max-header-bytes",
            "16KiB",
        ]);
        let limits = a.conn_limits();
        assert_eq!(limits.header_read_timeout, None);
        assert_eq!(limits.max_connections, 7);
        assert_eq!(limits.max_header_bytes, 16 << 10);
        assert_eq!(a.engine_timeouts().idle, None);
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_byte_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_byte_size("1024"), Ok(1024));
        assert_eq!(parse_byte_size("2k"), Ok(2048));
        assert!(parse_byte_size("12 parsecs").is_err());
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn flags_parse() {
        let a = ServeArgs::parse_from([
            "serve",
            "--mock",
            "2",
            "--port",
            "9",
            "--route",
            "/x=vllm",
            "--sglang-incremental-streaming",
            "--body-limit",
            "1KiB",
            "--max-concurrent-requests",
            "4",
        ]);
        assert_eq!(a.mock_count(), 2);
        assert_eq!(a.routes, vec![("/x".to_owned(), "vllm".to_owned())]);
        assert!(
            a.format_settings
                .0
                .bool(&genfront_sglang::INCREMENTAL_STREAMING)
        );
        assert_eq!(a.body_limit, 1024);
        assert_eq!(a.max_concurrent_requests, Some(4));
    }
}
