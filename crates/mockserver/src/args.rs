//! [`MockServerArgs`]: the `genfront mocker` flags, one typed tree, every flag with an env name.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, ValueEnum};
use genfront_format::CatalogEntry;
use genfront_mocker::{MockConfig, ScriptedFault};
use genfront_protocol::PdRole;

use crate::fault::{HttpFault, MockFault};

/// Default vocabulary size (Qwen2-sized).
pub const DEFAULT_VOCAB_SIZE: u32 = 152_064;
/// Default context length, in tokens.
pub const DEFAULT_CONTEXT_LEN: u32 = 32_768;
/// Default end-of-sequence token id.
pub const DEFAULT_EOS_TOKEN_ID: u32 = 2;
/// Default EOS probability per decode position (the mock engine's default).
pub const DEFAULT_EOS_PROBABILITY: f64 = 0.01;
/// Default prefix-cache block size, in tokens (the mock engine's default).
pub const DEFAULT_PREFIX_CACHE_BLOCK_SIZE: u32 = 16;
/// Default served model name.
pub const DEFAULT_MODEL: &str = "genfront-mock";
/// How long a decode mock waits for its prefill's KV before it fails the request
/// (`--kv-timeout`).
pub const DEFAULT_KV_TIMEOUT: Duration = Duration::from_secs(30);

/// Which side of a prefill/decode pair the mock engine plays (`--role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum MockRole {
    /// Aggregated: one engine runs the whole request (P/D hand-off fields are refused by SGLang
    /// and passed through by vLLM, as on `genfront serve`).
    #[default]
    Agg,
    /// Prefill (SGLang `--disaggregation-mode prefill`, a vLLM KV producer): needs
    /// `bootstrap_room` or `kv_transfer_params` with `do_remote_decode`; answers prompt logprobs
    /// and one token, then releases the room or returns `kv_transfer_params`.
    Prefill,
    /// Decode (SGLang `--disaggregation-mode decode`, a vLLM KV consumer): needs `bootstrap_room`
    /// or `kv_transfer_params` with `do_remote_prefill` (native 400 otherwise) and waits for its
    /// prefill's room.
    Decode,
}

impl MockRole {
    /// The engine contract's role (`None` for aggregated).
    pub fn pd_role(self) -> Option<PdRole> {
        match self {
            MockRole::Agg => None,
            MockRole::Prefill => Some(PdRole::Prefill),
            MockRole::Decode => Some(PdRole::Decode),
        }
    }
}

/// A duration like `500ms`, `30s` (a bare number is seconds) or `2m`.
///
/// # Errors
/// A message for a value that is not such a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s or 2m"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" => 60.0,
        other => return Err(format!("unknown duration unit {other:?} (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{s:?}: {e}"))
}

/// Which engine's native API the mock server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Api {
    /// SGLang: `POST`/`PUT /generate`, `POST /abort_request`, `/health_generate`, model and
    /// server info. Default port 30000, like `sglang.launch_server`.
    Sglang,
    /// vLLM: `POST /inference/v1/generate`, `POST /inference/v1/abort_requests`, `/v1/models`.
    /// Default port 8000, like `vllm serve`.
    Vllm,
}

impl Api {
    /// The engine's own default port: 30000 for SGLang, 8000 for vLLM.
    pub fn default_port(self) -> u16 {
        match self {
            Api::Sglang => 30000,
            Api::Vllm => 8000,
        }
    }

    /// The format's catalog entry (native path, methods, constructor).
    pub fn catalog_entry(self) -> &'static CatalogEntry {
        match self {
            Api::Sglang => &genfront_sglang::CATALOG_ENTRY,
            Api::Vllm => &genfront_vllm::CATALOG_ENTRY,
        }
    }

    /// The native generate path (`/generate` or `/inference/v1/generate`).
    pub fn generate_path(self) -> &'static str {
        self.catalog_entry().native_path
    }

    /// The native abort path (`/abort_request` or `/inference/v1/abort_requests`).
    pub fn abort_path(self) -> &'static str {
        match self {
            Api::Sglang => genfront_sglang::ABORT_PATH,
            Api::Vllm => genfront_vllm::ABORT_PATH,
        }
    }

    /// Lower-case name, as `--api` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Api::Sglang => "sglang",
            Api::Vllm => "vllm",
        }
    }
}

/// `genfront mocker` flags: one native mock engine server (SGLang- or vLLM-native) over one
/// in-process [`genfront_mocker::MockEngine`], with scripted engine- and HTTP-level faults.
#[derive(Debug, Clone, Args)]
pub struct MockServerArgs {
    /// Native API to serve.
    #[arg(long, env = "GENFRONT_MOCKER_API", value_enum, default_value_t = Api::Sglang, help_heading = "Server")]
    pub api: Api,
    /// Address to listen on.
    #[arg(long, env = "GENFRONT_MOCKER_HOST", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST), help_heading = "Server")]
    pub host: IpAddr,
    /// Port to listen on [default: 30000 with `--api sglang`, 8000 with `--api vllm`].
    #[arg(long, env = "GENFRONT_MOCKER_PORT", help_heading = "Server")]
    pub port: Option<u16>,
    /// SGLang only: stream incremental chunks (SGLang's `--incremental-streaming-output`)
    /// instead of the default cumulative ones. Ignored with `--api vllm`.
    #[arg(long, env = "GENFRONT_MOCKER_INCREMENTAL_STREAMING", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Server")]
    pub incremental_streaming: bool,

    /// Divide every mock delay by this factor.
    #[arg(
        long,
        env = "GENFRONT_MOCKER_SPEEDUP",
        default_value_t = 1.0,
        help_heading = "Timing"
    )]
    pub mock_speedup: f64,
    /// No delays at all: tokens are produced as fast as they are read.
    #[arg(long, env = "GENFRONT_MOCKER_ZERO_DELAY", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Timing")]
    pub zero_delay: bool,

    /// Served model name (SGLang `model_path`, vLLM `model`).
    #[arg(long, env = "GENFRONT_MOCKER_MODEL", default_value = DEFAULT_MODEL, help_heading = "Model")]
    pub model: String,
    /// Vocabulary size: valid token ids are `0..N`.
    #[arg(long, env = "GENFRONT_MOCKER_VOCAB_SIZE", default_value_t = DEFAULT_VOCAB_SIZE, help_heading = "Model")]
    pub vocab_size: u32,
    /// Context length (prompt + output), in tokens.
    #[arg(long, env = "GENFRONT_MOCKER_CONTEXT_LEN", default_value_t = DEFAULT_CONTEXT_LEN, help_heading = "Model")]
    pub context_len: u32,
    /// End-of-sequence token id.
    #[arg(long, env = "GENFRONT_MOCKER_EOS_TOKEN_ID", default_value_t = DEFAULT_EOS_TOKEN_ID, help_heading = "Model")]
    pub eos_token_id: u32,
    /// Report routed experts (vLLM's `--enable-return-routed-experts`; SGLang clients also ask
    /// per request with `return_routed_experts`).
    #[arg(long, env = "GENFRONT_MOCKER_ENABLE_RETURN_ROUTED_EXPERTS", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Model")]
    pub enable_return_routed_experts: bool,
    /// Report sampling masks (vLLM's `--return-sampling-mask`).
    #[arg(long, env = "GENFRONT_MOCKER_RETURN_SAMPLING_MASK", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Model")]
    pub return_sampling_mask: bool,

    /// vLLM only: fill `usage.prompt_tokens_details` (`{"cached_tokens": N}`), as vLLM's
    /// `--enable-prompt-tokens-details` does; without it vLLM sends `null`. Ignored with
    /// `--api sglang` (SGLang reports `meta_info.cached_tokens` always).
    #[arg(long, env = "GENFRONT_MOCKER_ENABLE_PROMPT_TOKENS_DETAILS", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true", help_heading = "Server")]
    pub enable_prompt_tokens_details: bool,

    /// Probability, per decode position, that the synthetic model ranks an EOS id first (so
    /// generations end naturally), in `[0, 1]`. `0`: generations end only at `max_new_tokens` /
    /// stop ids (unless sampling picks an EOS id that is among the candidates).
    #[arg(long, env = "GENFRONT_MOCKER_EOS_PROBABILITY", default_value_t = DEFAULT_EOS_PROBABILITY, help_heading = "Model")]
    pub eos_probability: f64,
    /// Prefix-cache granularity in tokens: only full blocks of this many prompt tokens are
    /// cached and reported as `cached_tokens`. `1` matches SGLang's radix cache at its default
    /// `--page-size 1` (token-granular); `16` matches vLLM's default `--block-size 16`
    /// (full-block prefix caching). `0` disables the cache.
    #[arg(long, env = "GENFRONT_MOCKER_PREFIX_CACHE_BLOCK_SIZE", default_value_t = DEFAULT_PREFIX_CACHE_BLOCK_SIZE, help_heading = "Model")]
    pub prefix_cache_block_size: u32,

    /// P/D role of the engine: `agg` (whole requests), `prefill` or `decode` (SGLang bootstrap
    /// rooms or vLLM `kv_transfer_params`, as genfront's router sends them).
    #[arg(long, env = "GENFRONT_MOCKER_ROLE", value_enum, default_value_t = MockRole::Agg, help_heading = "P/D")]
    pub role: MockRole,
    /// Decode role, SGLang bootstrap style: the prefill mock server (`http://HOST:PORT`) to ask
    /// whether a room's KV is ready (its `GET /_mock/room/{room}`, polled every few ms). Without
    /// it, the room is looked up in this process (in-process mock pairs).
    #[arg(long, env = "GENFRONT_MOCKER_PREFILL_PEER", help_heading = "P/D")]
    pub prefill_peer: Option<String>,
    /// Decode role: how long to wait for the prefill's KV before the request fails (as SGLang's
    /// decode fails a transfer that never completes).
    #[arg(long, env = "GENFRONT_MOCKER_KV_TIMEOUT", default_value = "30s", value_parser = parse_duration, help_heading = "P/D")]
    pub kv_timeout: Duration,

    /// Scripted fault (repeatable; env: comma-separated). Engine faults: `error@K:KIND[:MSG]`,
    /// `fail-after@K:N[:KIND[:MSG]]`, `stall@K:N`, `finish-error@K:N[:MSG]` (K counts engine
    /// requests). HTTP faults: `http-status@K:STATUS[:MSG]`, `drop@K:N`, `malformed@K:N`,
    /// `abort-status@K:STATUS[:MSG]` (SGLang only; K counts generate HTTP requests). K is
    /// 1-based or `*` for every request.
    #[arg(
        long = "fault",
        env = "GENFRONT_MOCKER_FAULTS",
        value_delimiter = ',',
        help_heading = "Faults"
    )]
    pub faults: Vec<MockFault>,
    /// Make every weight update fail with the engine's failure answer (SGLang 400
    /// `{"success":false,"message":MESSAGE}`, vLLM 500), until `POST /_mock/config
    /// {"update_weights_fail": false}`. An empty MESSAGE means the engine's default text.
    #[arg(
        long,
        env = "GENFRONT_MOCKER_UPDATE_WEIGHTS_FAIL",
        value_name = "MESSAGE",
        help_heading = "Faults"
    )]
    pub update_weights_fail: Option<String>,
}

#[derive(Parser)]
struct MockerOnly {
    #[command(flatten)]
    args: MockServerArgs,
}

impl Default for MockServerArgs {
    /// [`MockServerArgs::new`] for SGLang.
    fn default() -> Self {
        Self::new(Api::Sglang)
    }
}

impl MockServerArgs {
    /// The flag defaults for `api` (no environment is read): loopback, the engine's default
    /// port, cumulative streaming, realistic timing, no faults.
    pub fn new(api: Api) -> Self {
        Self {
            api,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            incremental_streaming: false,
            mock_speedup: 1.0,
            zero_delay: false,
            model: DEFAULT_MODEL.to_owned(),
            vocab_size: DEFAULT_VOCAB_SIZE,
            context_len: DEFAULT_CONTEXT_LEN,
            eos_token_id: DEFAULT_EOS_TOKEN_ID,
            enable_return_routed_experts: false,
            return_sampling_mask: false,
            enable_prompt_tokens_details: false,
            eos_probability: DEFAULT_EOS_PROBABILITY,
            prefix_cache_block_size: DEFAULT_PREFIX_CACHE_BLOCK_SIZE,
            role: MockRole::Agg,
            prefill_peer: None,
            update_weights_fail: None,
            kv_timeout: DEFAULT_KV_TIMEOUT,
            faults: Vec::new(),
        }
    }

    /// Parse the flags from an argv (first item = program name; environment variables apply).
    ///
    /// # Errors
    /// clap's error for unknown flags or bad values (print it with `err.exit()` in a binary).
    pub fn try_parse_from<I, T>(argv: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        MockerOnly::try_parse_from(argv).map(|m| m.args)
    }

    /// `--port`, or the API's default port.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or_else(|| self.api.default_port())
    }

    /// The address to bind: `--host` and [`MockServerArgs::port`].
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port())
    }

    /// The engine-level faults (handed to the mock engine).
    pub fn engine_faults(&self) -> Vec<ScriptedFault> {
        self.faults
            .iter()
            .filter_map(|f| match f {
                MockFault::Engine(e) => Some(e.clone()),
                MockFault::Http(_) => None,
            })
            .collect()
    }

    /// The HTTP-level faults (applied by the server's fault layer), in flag order.
    pub fn http_faults(&self) -> Vec<HttpFault> {
        self.faults
            .iter()
            .filter_map(|f| match f {
                MockFault::Http(h) => Some(h.clone()),
                MockFault::Engine(_) => None,
            })
            .collect()
    }

    /// The mock engine configuration these flags describe (validated by
    /// [`genfront_mocker::MockEngine::new`]).
    pub fn mock_config(&self) -> MockConfig {
        let mut cfg = if self.zero_delay {
            MockConfig::zero_delay()
        } else {
            MockConfig::default()
        };
        cfg.speedup = self.mock_speedup;
        cfg.info.model = self.model.clone();
        cfg.info.vocab_size = Some(self.vocab_size);
        cfg.info.max_context_len = self.context_len;
        cfg.info.eos_token_ids = vec![self.eos_token_id];
        cfg.info.routed_experts = self.enable_return_routed_experts;
        cfg.info.sampling_mask = self.return_sampling_mask;
        cfg.eos_probability = self.eos_probability;
        cfg.prefix_cache.block_size = self.prefix_cache_block_size;
        cfg.faults = self.engine_faults();
        cfg.role = self.role.pd_role();
        cfg.update_weights_fail = self.update_weights_fail.clone();
        if self.api == Api::Sglang {
            cfg.info.server_info = Some(crate::info::server_info(self, &cfg.info));
        }
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_ports() {
        let a = MockServerArgs::try_parse_from(["mocker"]).expect("parses");
        assert_eq!(a.api, Api::Sglang);
        assert_eq!(a.port(), 30000);
        assert_eq!(a.host, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(a.vocab_size, 152_064);
        assert!(!a.incremental_streaming && !a.zero_delay);
        let v = MockServerArgs::try_parse_from(["mocker", "--api", "vllm"]).expect("parses");
        assert_eq!(v.port(), 8000);
        let p = MockServerArgs::try_parse_from(["mocker", "--api", "vllm", "--port", "9"])
            .expect("parses");
        assert_eq!(p.addr().port(), 9);
        assert_eq!(MockServerArgs::new(Api::Vllm).port(), 8000);
    }

    #[test]
    fn flags_parse() {
        let a = MockServerArgs::try_parse_from([
            "mocker",
            "--incremental-streaming",
            "--zero-delay",
            "--enable-return-routed-experts",
            "--return-sampling-mask",
            "--model",
            "m",
            "--context-len",
            "64",
            "--fault",
            "error@3:unavailable",
            "--fault",
            "drop@1:2",
            "--fault",
            "http-status@*:503",
        ])
        .expect("parses");
        assert!(a.incremental_streaming && a.zero_delay);
        assert_eq!(a.engine_faults().len(), 1);
        assert_eq!(a.http_faults().len(), 2);
        let cfg = a.mock_config();
        assert!(cfg.is_zero_delay());
        assert!(cfg.info.routed_experts && cfg.info.sampling_mask);
        assert_eq!(
            (cfg.info.model.as_str(), cfg.info.max_context_len),
            ("m", 64)
        );
        assert_eq!((a.role, a.kv_timeout), (MockRole::Agg, DEFAULT_KV_TIMEOUT));
        assert_eq!(cfg.role, None);
        let d = MockServerArgs::try_parse_from([
            "mocker",
            "--role",
            "decode",
            "--prefill-peer",
            "http://127.0.0.1:30001",
            "--kv-timeout",
            "250ms",
        ])
        .expect("parses");
        assert_eq!(d.mock_config().role, Some(PdRole::Decode));
        assert_eq!(d.prefill_peer.as_deref(), Some("http://127.0.0.1:30001"));
        assert_eq!(d.kv_timeout, Duration::from_millis(250));
        assert!(MockServerArgs::try_parse_from(["mocker", "--role", "both"]).is_err());
        assert!(MockServerArgs::try_parse_from(["mocker", "--fault", "explode@1"]).is_err());
        assert!(MockServerArgs::try_parse_from(["mocker", "--api", "trt"]).is_err());
    }
}
