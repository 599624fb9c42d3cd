//! The **SGLang engine client**: [`SglangEngine`] implements the worker contract
//! ([`genfront_protocol::Engine`]) against a real SGLang HTTP server.
//!
//! - [`SglangEngine::connect`] learns the server's facts (`GET /get_server_info`, falling back to
//!   `/server_info`; `GET /get_model_info`, falling back to `/model_info`).
//! - [`Engine::generate`] sends `POST /generate` (SSE) per choice and decodes the stream frame by
//!   frame ([`SseSplitter`] → [`FrameDecoder`]) into [`EngineOutput`] deltas.
//! - **Relay** ([`genfront_protocol::OutputOptions::relay`], set by the SGLang format for a
//!   single-item, `n = 1` request, unary or cumulative SSE): the unary answer, or each SSE frame
//!   of a server that streams cumulatively, of an SGLang body that is neither split nor a P/D
//!   leg is only scanned ([`FrameDecoder::relay`], [`FrameDecoder::relay_frame`]: output ids,
//!   finish, usage, where `meta_info.id` is) and delivered as [`EngineOutput::native`], so the
//!   format relays SGLang's bytes with the rid edited instead of re-rendering them. What the
//!   scan does not take (`[DONE]`, error frames, odd answers) goes through the typed decoder as
//!   before; cancellation and aborts are unchanged (an abort frame's new tokens stay on its one
//!   relayed item).
//! - **Native errors**: for an SGLang client's own request (not a P/D leg; the call has the
//!   client's own mode), SGLang's error answer — an HTTP error's status, body, `Content-Type`
//!   and `Retry-After`, or an `{"error": …}` event of a started stream — rides on the typed
//!   error as [`genfront_protocol::EngineError::native`], so the client gets it verbatim (an HTTP
//!   body cut at `genfront_engine_http::ERROR_BODY_LIMIT` is not kept).
//! - Cancellation: firing the token, or dropping the stream before its terminal frame, sends
//!   `POST /abort_request {"rid": <dispatch id>, "abort_all": false}` (see `stream.rs`).
//! - [`Engine::probe`] is one `GET /health`; there is no background health loop (routers probe
//!   and own worker state), and [`Engine::ready`] is always true.
//! - [`Engine::control`] relays a fleet-control call (`/pause_generation`, `/flush_cache`,
//!   `/update_weights_from_disk`, …; see the crate's `control` module) to the server unchanged
//!   with `genfront_engine_http::relay_control` and returns SGLang's own status and body;
//!   [`Engine::native_format`] is `"sglang"`.
//!
//! The HTTP transport (client, SSE splitting, upstream status → [`EngineError`], probes,
//! abort-on-drop, cancel grace) is `genfront-engine-http`'s; this module keeps what is SGLang's:
//! request bodies (`body.rs`), frame decoding (`decode.rs`), the abort body and the stream state
//! machine (`stream.rs`) and the facts discovery (here).

mod body;
mod decode;
mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use genfront_engine_http::ClientOptions;
use genfront_protocol::{
    ControlCall, ControlFuture, Engine, EngineError, EngineInfo, EngineRequest, ErrorKind,
    OutputStream, ProbeFuture,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

pub use decode::{DecodeConfig, FrameDecoder, Relay};
pub use genfront_engine_http::{EventTooLarge, MAX_EVENT_BYTES, SseSplitter};
pub use stream::CLOSED_EARLY;

#[cfg(doc)]
use genfront_protocol::EngineOutput;

/// How [`SglangEngine::connect`] and the client behave, and the model facts SGLang's HTTP API
/// does not report.
///
/// A fact left unset that the server does not report either stays unknown in [`EngineInfo`]:
/// genfront then skips the check and SGLang makes it (its own 400 is relayed). SGLang's
/// `/server_info` (server args, scheduler info, `internal_states`, `version`;
/// `http_server.py`) reports `context_length` (null unless `--context-length` is given),
/// `max_req_input_len`, `max_running_requests`, `served_model_name` and the streaming mode, but
/// no vocabulary size, EOS ids or logprob cap.
#[derive(Debug, Clone, PartialEq)]
pub struct SglangEngineOptions {
    /// Served model name. `None`: SGLang's `model_path` (its `served_model_name`, when different,
    /// becomes an alias).
    pub model: Option<String>,
    /// Vocabulary size (valid token ids are `0..vocab_size`). `None` (default): the server's
    /// `vocab_size` if it reports one (SGLang does not), else unknown.
    pub vocab_size: Option<u32>,
    /// EOS token ids, used to tell an EOS finish from a stop-token finish. Default: none (every
    /// matched token that is not a requested stop id is then reported as EOS).
    pub eos_token_ids: Vec<u32>,
    /// Context length. `None`: the server's `context_length`, else `max_req_input_len + 1`, else
    /// unknown ([`genfront_protocol::UNKNOWN_CONTEXT_LEN`]).
    pub max_context_len: Option<u32>,
    /// Most top logprobs a request may ask for. `None` (default): no cap (SGLang has none).
    pub max_logprobs: Option<u32>,
    /// Most parallel samples. `None`: the server's `max_running_requests`, else unknown.
    pub max_num_seqs: Option<u32>,
    /// The model's MoE shape `(num_layers, top_k)`. With it, `routed_experts` are also decoded
    /// into typed rows, so formats other than SGLang can serve them, and [`EngineInfo`] says the
    /// engine reports routed experts. Without it they stay native (`engine_data`), which the
    /// SGLang format passes through as is.
    pub experts_shape: Option<(u32, u32)>,
    /// The server returns sampling masks (`return_sampling_mask`, newer SGLang builds). Default
    /// false.
    pub sampling_mask: bool,
    /// Server features the operator gives; each given one overrides what `/server_info`
    /// reports (`enable_lora`, `reasoning_parser`, `dp_size`). Default: none given.
    pub features: genfront_protocol::EngineFeatures,
    /// Override the discovered streaming mode (`incremental_streaming_output`).
    pub incremental_streaming: Option<bool>,
    /// TCP connect timeout. Default 5 s.
    pub connect_timeout: Duration,
    /// Timeout of the info calls made by [`SglangEngine::connect`]. Default 10 s.
    pub info_timeout: Duration,
    /// How long, after `cancel` fires, the stream waits for SGLang's abort frame before it ends
    /// the choice with a `Cancelled` finish of its own. Default 2 s.
    pub cancel_grace: Duration,
    /// How long, after the terminal frame, the stream waits for `[DONE]` (reading it lets the
    /// connection be reused). Default 100 ms.
    pub drain_timeout: Duration,
    /// Timeout of one `POST /abort_request`. Default 5 s.
    pub abort_timeout: Duration,
    /// SGLang `--api-key`, sent as `Authorization: Bearer …` on every call. Default none.
    pub api_key: Option<String>,
}

impl Default for SglangEngineOptions {
    fn default() -> Self {
        Self {
            model: None,
            vocab_size: None,
            eos_token_ids: Vec::new(),
            max_context_len: None,
            max_logprobs: None,
            max_num_seqs: None,
            experts_shape: None,
            sampling_mask: false,
            features: genfront_protocol::EngineFeatures::default(),
            incremental_streaming: None,
            connect_timeout: Duration::from_secs(5),
            info_timeout: Duration::from_secs(10),
            cancel_grace: Duration::from_secs(2),
            drain_timeout: Duration::from_millis(100),
            abort_timeout: Duration::from_secs(5),
            api_key: None,
        }
    }
}

/// State shared by the engine handle and its streams.
#[derive(Debug)]
pub(crate) struct Inner {
    pub http: reqwest::Client,
    /// `http://host:port`, no trailing slash.
    pub base_url: String,
    pub generate_url: String,
    pub abort_url: Arc<str>,
    pub health_url: String,
    pub info: EngineInfo,
    pub incremental: bool,
    pub opts: SglangEngineOptions,
    pub aborts_sent: Arc<AtomicU64>,
}

/// A client for one SGLang server, usable as a genfront [`Engine`].
///
/// Cheap to share behind an `Arc`; every request gets its own HTTP stream on a pooled connection.
/// Health is [`Engine::probe`] (`GET /health`, 2xx → healthy), called by whoever owns worker
/// state (the router); [`Engine::ready`] is always true.
#[derive(Debug, Clone)]
pub struct SglangEngine {
    inner: Arc<Inner>,
}

impl SglangEngine {
    /// Connect to the SGLang server at `base_url` (`http://host:port`) and learn its facts:
    /// streaming mode (`incremental_streaming_output`, older `stream_output`), context length,
    /// model path, limits, and whether it loads a tokenizer (`skip_tokenizer_init`).
    ///
    /// # Errors
    /// [`EngineError`] `Unavailable` when the server cannot be reached or answers 502/503/504
    /// (e.g. still starting); `InvalidArgument` for an API key that is not a header value;
    /// `Internal` for other failures or answers that are not JSON.
    pub async fn connect(
        base_url: &str,
        options: SglangEngineOptions,
    ) -> Result<Self, EngineError> {
        let base = base_url.trim_end_matches('/').to_owned();
        let http = genfront_engine_http::build_client(
            "SGLang",
            &ClientOptions {
                connect_timeout: options.connect_timeout,
                api_key: options.api_key.clone(),
            },
        )?;
        let timeout = options.info_timeout;
        let server = get_json(&http, &base, &["/get_server_info", "/server_info"], timeout).await?;
        let model_info = get_json(&http, &base, &["/get_model_info", "/model_info"], timeout).await;
        let str_of = |m: &Map<String, Value>, k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let model_path = match &model_info {
            Ok(m) => str_of(m, "model_path"),
            Err(_) => None,
        }
        .or_else(|| str_of(&server, "model_path"));
        let model = match (options.model.clone(), model_path) {
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => {
                return Err(model_info
                    .err()
                    .unwrap_or_else(|| EngineError::internal("SGLang reported no model_path")));
            }
        };
        let aliases = str_of(&server, "served_model_name")
            .filter(|n| *n != model)
            .into_iter()
            .collect();
        let num = |k: &str| {
            server
                .get(k)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        let max_context_len = options
            .max_context_len
            .or_else(|| num("context_length"))
            .or_else(|| num("max_req_input_len").map(|n| n.saturating_add(1)))
            .unwrap_or(genfront_protocol::UNKNOWN_CONTEXT_LEN);
        let flag = |k: &str| server.get(k).and_then(Value::as_bool);
        let incremental = options
            .incremental_streaming
            .or_else(|| flag("incremental_streaming_output"))
            .or_else(|| flag("stream_output"))
            .unwrap_or(false);
        let routed_experts =
            options.experts_shape.is_some() && flag("enable_return_routed_experts") != Some(false);
        let info = EngineInfo {
            model,
            model_aliases: aliases,
            vocab_size: options.vocab_size.or_else(|| num("vocab_size")),
            max_context_len,
            eos_token_ids: options.eos_token_ids.clone(),
            max_logprobs: options.max_logprobs,
            max_num_seqs: options.max_num_seqs.or_else(|| num("max_running_requests")),
            routed_experts,
            sampling_mask: options.sampling_mask,
            // `--skip-tokenizer-init` is a server arg, so `/server_info` reports it (absent in
            // a document that is not SGLang's: unknown).
            tokenizer: flag("skip_tokenizer_init").map(|skip| !skip),
            // Server args `/server_info` reports (absent: unknown, left to the engine).
            features: genfront_protocol::EngineFeatures {
                lora: options.features.lora.or_else(|| flag("enable_lora")),
                reasoning: options.features.reasoning.or_else(|| {
                    server
                        .get("reasoning_parser")
                        .map(|p| p.as_str().is_some_and(|p| !p.is_empty()))
                }),
                trace_replay: options.features.trace_replay,
                dp_size: options.features.dp_size.or_else(|| num("dp_size")),
            },
            server_info: Some(Value::Object(server.clone())),
        };
        let inner = Arc::new(Inner {
            http,
            base_url: base.clone(),
            generate_url: format!("{base}/generate"),
            abort_url: Arc::from(format!("{base}/abort_request")),
            health_url: format!("{base}/health"),
            info,
            incremental,
            opts: options,
            aborts_sent: Arc::new(AtomicU64::new(0)),
        });
        Ok(Self { inner })
    }

    /// Whether the server streams incremental frames (`--incremental-streaming-output`) rather
    /// than cumulative ones.
    pub fn incremental_streaming(&self) -> bool {
        self.inner.incremental
    }

    /// The options this engine was connected with.
    pub fn options(&self) -> &SglangEngineOptions {
        &self.inner.opts
    }

    /// Number of `POST /abort_request` calls sent so far (for metrics and tests).
    pub fn aborts_sent(&self) -> u64 {
        self.inner.aborts_sent.load(Ordering::Relaxed)
    }
}

impl Engine for SglangEngine {
    fn info(&self) -> &EngineInfo {
        &self.inner.info
    }

    /// `GET /health` within `timeout` (SGLang's `/health` may run a one-token generation, so a
    /// long prefill can delay it: give it a few seconds).
    fn probe(&self, timeout: Duration) -> ProbeFuture<'_> {
        Box::pin(genfront_engine_http::probe(
            &self.inner.http,
            &self.inner.health_url,
            timeout,
        ))
    }

    /// One `POST /generate` per choice (`sampling.n` of them, rids `<id>-<i>` when `n > 1`). An
    /// SGLang-format request is forwarded as its native body with the dispatch edits; any other
    /// format is rebuilt from the typed request, and what SGLang cannot produce fails at once with
    /// `Unsupported`. Network work starts on the first poll.
    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        stream::generate(Arc::clone(&self.inner), request, cancel)
    }

    /// `"sglang"`: fleet control sends this engine SGLang's control calls only.
    fn native_format(&self) -> Option<&'static str> {
        Some(crate::FORMAT_NAME)
    }

    /// The call's method on `{base}{path}?{query}` with its body, unchanged; SGLang's own status,
    /// `Content-Type` and body back (its 400 `{"success": false, …}` is an `Ok` reply), within
    /// `call.timeout` and a 16 MiB answer (`genfront_engine_http::relay_control`).
    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        Box::pin(genfront_engine_http::relay_control(
            &self.inner.http,
            "SGLang",
            &self.inner.base_url,
            call,
        ))
    }
}

/// `GET` the first of `paths` that exists (404/405 falls through to the next) as a JSON object.
async fn get_json(
    http: &reqwest::Client,
    base: &str,
    paths: &[&str],
    timeout: Duration,
) -> Result<Map<String, Value>, EngineError> {
    for path in paths {
        let what = format!("SGLang {path}");
        let resp = http
            .get(format!("{base}{path}"))
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| genfront_engine_http::send_error(&what, &e))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| genfront_engine_http::send_error(&what, &e))?;
        if status == 404 || status == 405 {
            // Not served by this SGLang version: try the next path.
            continue;
        }
        if !(200..300).contains(&status) {
            let mut e = genfront_engine_http::status_error("SGLang", status, &headers, &bytes);
            if e.kind == ErrorKind::InvalidArgument {
                // A 4xx here is genfront's fault, not a client's.
                e.kind = ErrorKind::Internal;
            }
            e.message = format!("{what}: {}", e.message);
            return Err(e);
        }
        return match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(EngineError::internal(format!(
                "SGLang {path} did not answer a JSON object"
            ))),
        };
    }
    Err(EngineError::internal(format!(
        "SGLang at {base} answers none of {}",
        paths.join(", ")
    )))
}
