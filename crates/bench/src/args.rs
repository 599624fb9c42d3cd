//! The command line: [`BenchArgs`] and its one [`BenchArgs::validate`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

/// Which native wire format the target speaks; picks the default path and the body/response shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// SGLang `POST /generate` (`input_ids`, `sampling_params.max_new_tokens`, `meta_info`).
    Sglang,
    /// vLLM `POST /inference/v1/generate` (`token_ids`, `sampling_params.max_tokens`, `choices`).
    Vllm,
}

impl Format {
    /// The route this format is served on when `--path` is not given.
    pub fn default_path(self) -> &'static str {
        match self {
            Format::Sglang => "/generate",
            Format::Vllm => "/inference/v1/generate",
        }
    }
}

/// How open-loop (`--rate`) arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// Exponential inter-arrival times with mean `1/rate` (a Poisson process), drawn from `--seed`.
    #[default]
    Poisson,
    /// Exactly `1/rate` between arrivals.
    Fixed,
}

/// `genfront bench`: drive a native generate route and report throughput, latency and server cost.
///
/// Closed loop (`--concurrency`, the default) keeps C requests in flight. Open loop (`--rate`)
/// starts requests on a schedule regardless of completions; latency is then measured from the
/// *scheduled* start, so a server that falls behind is charged for the queueing it causes.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Base URL of the server (`http://host:port`, optionally with a path prefix). Plain HTTP only.
    #[arg(long, env = "GENFRONT_BENCH_URL", help_heading = "Target")]
    pub url: String,

    /// Wire format of the target; picks the request/response shapes and the default path.
    #[arg(
        long,
        value_enum,
        env = "GENFRONT_BENCH_FORMAT",
        help_heading = "Target"
    )]
    pub format: Format,

    /// Route to POST to, overriding the format's default (`/generate` or `/inference/v1/generate`).
    #[arg(long, env = "GENFRONT_BENCH_PATH", help_heading = "Target")]
    pub path: Option<String>,

    /// Measured requests to send (default 100 when `--duration` is not given either).
    #[arg(
        long,
        env = "GENFRONT_BENCH_REQUESTS",
        conflicts_with = "duration",
        help_heading = "Load"
    )]
    pub requests: Option<u64>,

    /// Send requests for this long (e.g. `500ms`, `10s`, `2m`), then wait for the ones in flight.
    #[arg(long, env = "GENFRONT_BENCH_DURATION", value_parser = parse_duration, help_heading = "Load")]
    pub duration: Option<Duration>,

    /// Closed loop: requests kept in flight (with `--rate`, only the warmup uses it).
    #[arg(
        long,
        env = "GENFRONT_BENCH_CONCURRENCY",
        default_value_t = 8,
        help_heading = "Load"
    )]
    pub concurrency: usize,

    /// Open loop: requests started per second, whatever the server's pace (no in-flight cap).
    #[arg(long, env = "GENFRONT_BENCH_RATE", help_heading = "Load")]
    pub rate: Option<f64>,

    /// Open loop: spacing of arrivals.
    #[arg(
        long,
        value_enum,
        env = "GENFRONT_BENCH_ARRIVAL",
        default_value_t = Arrival::Poisson,
        help_heading = "Load"
    )]
    pub arrival: Arrival,

    /// Requests sent before measuring (closed loop at `--concurrency`); not counted anywhere.
    #[arg(
        long,
        env = "GENFRONT_BENCH_WARMUP",
        default_value_t = 4,
        help_heading = "Load"
    )]
    pub warmup: u64,

    /// Per-request deadline (whole response, including the stream); expiry counts as `timeout`.
    #[arg(long, env = "GENFRONT_BENCH_TIMEOUT", value_parser = parse_duration, default_value = "60s", help_heading = "Load")]
    pub timeout: Duration,

    /// Prompt length in tokens.
    #[arg(
        long,
        env = "GENFRONT_BENCH_PROMPT_LEN",
        default_value_t = 128,
        help_heading = "Request"
    )]
    pub prompt_len: usize,

    /// Every request sends the same prompt (prefix-cache friendly); by default prompts differ.
    #[arg(long, env = "GENFRONT_BENCH_SHARED_PREFIX", help_heading = "Request")]
    pub shared_prefix: bool,

    /// Token ids are drawn uniformly from `0..vocab-size`.
    #[arg(
        long,
        env = "GENFRONT_BENCH_VOCAB_SIZE",
        default_value_t = 32_000,
        help_heading = "Request"
    )]
    pub vocab_size: u32,

    /// Seed for prompts and Poisson arrivals; the same seed sends the same bytes on the same schedule.
    #[arg(
        long,
        env = "GENFRONT_BENCH_SEED",
        default_value_t = 0,
        help_heading = "Request"
    )]
    pub seed: u64,

    /// Output tokens per request, sent with `ignore_eos: true` so every answer has this length.
    #[arg(
        long,
        env = "GENFRONT_BENCH_MAX_NEW_TOKENS",
        default_value_t = 16,
        help_heading = "Request"
    )]
    pub max_new_tokens: u32,

    /// Ask for a streamed (SSE) answer; enables TTFT and ITL.
    #[arg(long, env = "GENFRONT_BENCH_STREAM", help_heading = "Request")]
    pub stream: bool,

    /// SGLang only: send `input_ids` packed (`{"b64zstd": …}`, base64 of zstd of little-endian
    /// u32) with `"packed_output": true`, as genfront's `sglang-packed` format takes them; the
    /// default path becomes `/generate_packed`.
    #[arg(long, env = "GENFRONT_BENCH_PACKED", help_heading = "Request")]
    pub packed: bool,

    /// Ask for K top logprobs per output token.
    #[arg(
        long,
        value_name = "K",
        env = "GENFRONT_BENCH_LOGPROBS",
        help_heading = "Request"
    )]
    pub logprobs: Option<u32>,

    /// SGLang only: send `"return_routed_experts": true`, so each answer carries the MoE routing
    /// of every prompt and output position (`meta_info.routed_experts`, base64 of i32
    /// `[positions, layers, top_k]`; a long prompt makes it megabytes). The engine must report
    /// them (`--enable-return-routed-experts`), otherwise it answers 400.
    #[arg(long, env = "GENFRONT_BENCH_ROUTED_EXPERTS", help_heading = "Request")]
    pub routed_experts: bool,

    /// Server process to account CPU and RSS for over the measured window (repeatable).
    #[arg(
        long = "pid",
        value_name = "PID",
        env = "GENFRONT_BENCH_PID",
        value_delimiter = ',',
        help_heading = "Report"
    )]
    pub pids: Vec<u32>,

    /// Also write the report as JSON to this file.
    #[arg(long, env = "GENFRONT_BENCH_JSON", help_heading = "Report")]
    pub json: Option<PathBuf>,

    /// No progress bar (it is also off when stdout is not a terminal).
    #[arg(long, env = "GENFRONT_BENCH_NO_PROGRESS", help_heading = "Report")]
    pub no_progress: bool,
}

/// How much work the measured phase does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Amount {
    Requests(u64),
    Duration(Duration),
}

/// A rejected [`BenchArgs`]: each variant names the flag at fault.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// `--url` is not an absolute `http://` URI.
    #[error("--url {url:?} is not an absolute http:// URL ({reason})")]
    Url {
        /// The value given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// `--path` must start with `/`.
    #[error("--path {0:?} must start with '/'")]
    Path(String),
    /// A count or length that must be positive was zero.
    #[error("--{0} must be at least 1")]
    Zero(&'static str),
    /// `--rate` must be a finite positive number.
    #[error("--rate must be a finite number above 0, got {0}")]
    Rate(f64),
    /// `--duration` or `--timeout` was zero.
    #[error("--{0} must be longer than 0")]
    ZeroDuration(&'static str),
    /// `--packed` with a format other than SGLang.
    #[error("--packed needs --format sglang")]
    Packed,
    /// `--routed-experts` with a format other than SGLang (vLLM has no per-request switch).
    #[error("--routed-experts needs --format sglang")]
    RoutedExperts,
}

impl BenchArgs {
    /// Check what clap's types cannot: URL shape, positive counts, a usable rate.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.base_uri()?;
        if let Some(p) = &self.path
            && !p.starts_with('/')
        {
            return Err(ConfigError::Path(p.clone()));
        }
        if self.requests == Some(0) {
            return Err(ConfigError::Zero("requests"));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::Zero("concurrency"));
        }
        if self.prompt_len == 0 {
            return Err(ConfigError::Zero("prompt-len"));
        }
        if self.vocab_size == 0 {
            return Err(ConfigError::Zero("vocab-size"));
        }
        if self.max_new_tokens == 0 {
            return Err(ConfigError::Zero("max-new-tokens"));
        }
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err(ConfigError::Rate(r));
        }
        if self.duration == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroDuration("duration"));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::ZeroDuration("timeout"));
        }
        if self.packed && self.format != Format::Sglang {
            return Err(ConfigError::Packed);
        }
        if self.routed_experts && self.format != Format::Sglang {
            return Err(ConfigError::RoutedExperts);
        }
        Ok(())
    }

    /// The full target URI (`--url` + path) as a string.
    pub fn target(&self) -> String {
        let default = if self.packed {
            "/generate_packed"
        } else {
            self.format.default_path()
        };
        let path = self.path.as_deref().unwrap_or(default);
        format!("{}{}", self.url.trim_end_matches('/'), path)
    }

    pub(crate) fn amount(&self) -> Amount {
        match (self.requests, self.duration) {
            (_, Some(d)) => Amount::Duration(d),
            (Some(n), None) => Amount::Requests(n),
            (None, None) => Amount::Requests(100),
        }
    }

    fn base_uri(&self) -> Result<http::Uri, ConfigError> {
        let bad = |reason: String| ConfigError::Url {
            url: self.url.clone(),
            reason,
        };
        let uri: http::Uri = self.url.parse().map_err(|e| bad(format!("{e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("only http:// is supported (no TLS)".into()));
        }
        if uri.authority().is_none() {
            return Err(bad("no host".into()));
        }
        if uri.query().is_some() {
            return Err(bad("no query string allowed".into()));
        }
        Ok(uri)
    }
}

/// Parse `250ms`, `1.5s`, `10s`, `2m`, `1h`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 10s or 2m"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests;
