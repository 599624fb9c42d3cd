//! The vLLM **engine client**: [`VllmEngine`], an [`Engine`] that talks to a real vLLM server's
//! `/inference/v1/generate` (the rules are in the crate docs).
//!
//! Layout: `body` (request → upstream body), `run` (the output stream: send, read, cancel),
//! `decode` (chunks → deltas), `errors` (error events → [`EngineError`]). The HTTP transport
//! (client, SSE splitting, upstream status → [`EngineError`], probes, abort-on-drop, cancel
//! grace) is `genfront-engine-http`'s, and so is the fleet-control relay: [`Engine::control`]
//! sends a control call (`/pause`, `/resume`, `/is_paused`, `/reset_prefix_cache`, …; see the
//! crate's `control` module) to the server unchanged and returns vLLM's own status and body;
//! [`Engine::native_format`] is `"vllm"`.
//!
//! For a vLLM client's own request (not a P/D leg, sent in the client's own mode), vLLM's error
//! answer — an HTTP error's status, body, `Content-Type` and `Retry-After`, or an `{"error": …}`
//! event of a started stream — rides on the typed error as
//! [`genfront_protocol::EngineError::native`], so the client gets it verbatim.

mod body;
mod decode;
mod errors;
mod run;

use std::sync::Arc;
use std::time::Duration;

use genfront_engine_http::ClientOptions;
use genfront_protocol::{
    ControlCall, ControlFuture, Engine, EngineError, EngineInfo, EngineRequest, ErrorKind,
    OutputStream, ProbeFuture,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use decode::CANCELLED_MESSAGE;

use crate::GENERATE_PATH;
use crate::abort::ABORT_PATH;

/// Facts about the vLLM server that `GET /v1/models` does not report, and client settings.
///
/// The model name(s) and `max_model_len` come from the server (`GET /v1/models` cards carry
/// `id`, `root`, `parent`, `max_model_len`, and nothing about the vocabulary or the limits). Set
/// the rest to match the server's flags (`--max-logprobs`, `--max-num-seqs`,
/// `--enable-return-routed-experts`, `--return-sampling-mask`) and the model (vocabulary, EOS
/// ids) when you know them: formats then validate requests against them before vLLM sees them.
/// A fact left `None` is unknown and its check is vLLM's (its own 400 is relayed).
#[derive(Debug, Clone, PartialEq)]
pub struct VllmEngineOptions {
    /// Vocabulary size (token ids must be below it). Default `None`: unknown.
    pub vocab_size: Option<u32>,
    /// End-of-sequence ids; the first one is reported for an EOS finish of a choice that produced
    /// no token (which vLLM never sends in practice). Default empty (then 0).
    pub eos_token_ids: Vec<u32>,
    /// vLLM `--max-logprobs`. Default `None`: unknown (vLLM's own default is 20).
    pub max_logprobs: Option<u32>,
    /// vLLM `--max-num-seqs` (bounds `n`). Default `None`: unknown (vLLM's default depends on
    /// the hardware).
    pub max_num_seqs: Option<u32>,
    /// The server runs with `--enable-return-routed-experts`. Default false.
    pub routed_experts: bool,
    /// The server runs with `--return-sampling-mask`. Default false.
    pub sampling_mask: bool,
    /// Whether the server loads a tokenizer: `Some(false)` for `vllm serve --tokens-only` (or
    /// `--skip-tokenizer-init`), `Some(true)` for one that does (then `stop` strings and
    /// `output_mode: "text"` are forwarded). vLLM's HTTP API does not report it. Default `None`:
    /// unknown, so those requests are forwarded and vLLM's own 400 is relayed.
    pub tokenizer: Option<bool>,
    /// Server features the operator gives (vLLM's HTTP API reports none). Default: all
    /// unknown, so those checks are left to vLLM.
    pub features: genfront_protocol::EngineFeatures,
    /// Context length to use when `/v1/models` does not report `max_model_len`. Default none
    /// (then such a server is refused).
    pub max_context_len: Option<u32>,
    /// vLLM `--api-key`, sent as `Authorization: Bearer …` on every call. Default none.
    pub api_key: Option<String>,
    /// TCP connect timeout of every call. Default 5 s.
    pub connect_timeout: Duration,
    /// Time allowed for [`VllmEngine::connect`]'s `GET /v1/models`. Default 10 s.
    pub handshake_timeout: Duration,
    /// After `cancel` fires, how long to wait for vLLM's `"abort"` finishes (which carry the
    /// tokens produced meanwhile) before making up `Cancelled` items. Capped at 2 s.
    /// Default 2 s.
    pub cancel_grace: Duration,
    /// Also send a P/D leg's `kv_transfer_params` under `sampling_params.extra_args` (where
    /// vLLM builds before 0.33 read it; newer ones copy the top-level key there themselves).
    /// Default false: top level only.
    pub nest_kv_transfer_params: bool,
}

impl Default for VllmEngineOptions {
    fn default() -> Self {
        Self {
            vocab_size: None,
            eos_token_ids: Vec::new(),
            max_logprobs: None,
            max_num_seqs: None,
            routed_experts: false,
            sampling_mask: false,
            tokenizer: None,
            features: genfront_protocol::EngineFeatures::default(),
            max_context_len: None,
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            cancel_grace: Duration::from_secs(2),
            nest_kv_transfer_params: false,
        }
    }
}

/// The longest [`VllmEngineOptions::cancel_grace`].
pub const MAX_CANCEL_GRACE: Duration = Duration::from_secs(2);

/// An [`Engine`] backed by a vLLM server's native token-in/token-out API.
///
/// - [`VllmEngine::connect`] reads the served model(s) once; [`Engine::info`] returns them with
///   the option facts.
/// - [`Engine::generate`] returns at once; the HTTP call starts on the stream's first poll.
///   Dropping the stream, or firing `cancel`, aborts the request at vLLM (see the crate docs,
///   "Engine client: cancellation").
/// - [`Engine::probe`] is one `GET /health` (2xx → healthy); there is no background probe, the
///   router calls it and owns worker state. [`Engine::ready`] is always true.
///
/// Cheap to clone: clones share the HTTP connection pool.
#[derive(Clone)]
pub struct VllmEngine {
    inner: Arc<Inner>,
}

struct Inner {
    base_url: String,
    info: EngineInfo,
    lora_adapters: Vec<String>,
    health_url: String,
    shared: run::Shared,
    body: body::BodyOptions,
}

impl std::fmt::Debug for VllmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VllmEngine")
            .field("base_url", &self.inner.base_url)
            .field("model", &self.inner.info.model)
            .finish_non_exhaustive()
    }
}

// === impl VllmEngine ===

impl VllmEngine {
    /// Connect to the vLLM server at `base_url` (`http://host:port`, or `host:port`; no TLS),
    /// and read `GET /v1/models`.
    ///
    /// From `/v1/models`: the cards without a `parent` are the served names (the first is
    /// [`EngineInfo::model`], the others [`EngineInfo::model_aliases`]) and the first one's
    /// `max_model_len` is [`EngineInfo::max_context_len`]; cards with a `parent` are LoRA
    /// adapters ([`VllmEngine::lora_adapters`]).
    ///
    /// # Errors
    /// `InvalidArgument` for a malformed or `https` address; `Unavailable` when the server cannot
    /// be reached, does not answer in time, or answers 502/503/504; `Internal` for 401/403 (API
    /// key) and for a model list genfront cannot use.
    pub async fn connect(base_url: &str, options: VllmEngineOptions) -> Result<Self, EngineError> {
        let base_url = normalise_base(base_url)?;
        let http = genfront_engine_http::build_client(
            "vLLM",
            &ClientOptions {
                connect_timeout: options.connect_timeout,
                api_key: options.api_key.clone(),
            },
        )?;

        let models_url = format!("{base_url}/v1/models");
        let answer = tokio::time::timeout(options.handshake_timeout, async {
            let what = format!("vLLM {models_url}");
            let response = http
                .get(&models_url)
                .send()
                .await
                .map_err(|e| genfront_engine_http::send_error(&what, &e))?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response
                .bytes()
                .await
                .map_err(|e| genfront_engine_http::send_error(&what, &e))?;
            if !status.is_success() {
                let mut error =
                    genfront_engine_http::status_error("vLLM", status.as_u16(), &headers, &body);
                if error.is_public() {
                    // A 4xx here is genfront's fault, not a client's.
                    error.kind = ErrorKind::Internal;
                }
                return Err(error);
            }
            serde_json::from_slice::<Value>(&body)
                .map_err(|e| EngineError::internal(format!("vLLM {models_url} is not JSON: {e}")))
        })
        .await
        .map_err(|_| {
            EngineError::unavailable(format!(
                "vLLM {models_url}: no answer within {:?}",
                options.handshake_timeout
            ))
        })??;
        let models = served_models(&answer)?;
        let max_context_len = models
            .max_model_len
            .or(options.max_context_len)
            .ok_or_else(|| {
                EngineError::internal(format!(
                    "vLLM {models_url} reports no max_model_len and no context length is configured"
                ))
            })?;
        let info = EngineInfo {
            model: models.model,
            model_aliases: models.aliases,
            vocab_size: options.vocab_size,
            max_context_len,
            eos_token_ids: options.eos_token_ids.clone(),
            max_logprobs: options.max_logprobs,
            max_num_seqs: options.max_num_seqs,
            routed_experts: options.routed_experts,
            sampling_mask: options.sampling_mask,
            tokenizer: options.tokenizer,
            features: options.features.clone(),
            server_info: None,
        };

        let shared = run::Shared {
            http,
            generate_url: Arc::from(format!("{base_url}{GENERATE_PATH}")),
            abort_url: Arc::from(format!("{base_url}{ABORT_PATH}")),
            grace: options.cancel_grace.min(MAX_CANCEL_GRACE),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                health_url: format!("{base_url}/health"),
                base_url,
                info,
                lora_adapters: models.loras,
                shared,
                body: body::BodyOptions {
                    nest_kv_transfer_params: options.nest_kv_transfer_params,
                },
            }),
        })
    }

    /// The server address (`http://host:port`, no trailing slash).
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// LoRA adapters the server listed at connect time (its `/v1/models` cards with a `parent`),
    /// for `VllmFormat::with_lora_adapters`.
    pub fn lora_adapters(&self) -> &[String] {
        &self.inner.lora_adapters
    }
}

impl Engine for VllmEngine {
    fn info(&self) -> &EngineInfo {
        &self.inner.info
    }

    /// `GET /health` within `timeout`.
    fn probe(&self, timeout: Duration) -> ProbeFuture<'_> {
        Box::pin(genfront_engine_http::probe(
            &self.inner.shared.http,
            &self.inner.health_url,
            timeout,
        ))
    }

    /// Build the vLLM body now (an unsupported request yields one `Unsupported` error); send it
    /// on the stream's first poll.
    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        match body::build(request, &self.inner.info, self.inner.body) {
            Ok((upstream, spec)) => run::stream(
                self.inner.shared.clone(),
                upstream,
                decode::Decoder::new(spec),
                cancel,
            ),
            Err(error) => run::failed(error),
        }
    }

    /// `"vllm"`: fleet control sends this engine vLLM's control calls only.
    fn native_format(&self) -> Option<&'static str> {
        Some(crate::FORMAT_NAME)
    }

    /// The call's method on `{base}{path}?{query}` with its body, unchanged; vLLM's own status,
    /// `Content-Type` and body back (an error status is an `Ok` reply), within `call.timeout`
    /// and a 16 MiB answer (`genfront_engine_http::relay_control`).
    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        Box::pin(genfront_engine_http::relay_control(
            &self.inner.shared.http,
            "vLLM",
            &self.inner.base_url,
            call,
        ))
    }
}

/// `http://host:port` without a trailing slash.
fn normalise_base(base_url: &str) -> Result<String, EngineError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let invalid = |why: &str| {
        EngineError::invalid_argument(format!("invalid vLLM address `{base_url}`: {why}"))
    };
    let url = if trimmed.starts_with("http://") {
        trimmed.to_owned()
    } else if trimmed.contains("://") {
        return Err(invalid("expected http://host:port (no TLS)"));
    } else {
        format!("http://{trimmed}")
    };
    match url.strip_prefix("http://") {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(url),
        _ => Err(invalid("no host")),
    }
}

/// What `GET /v1/models` tells.
#[derive(Debug, Clone, PartialEq)]
struct ServedModels {
    model: String,
    aliases: Vec<String>,
    loras: Vec<String>,
    max_model_len: Option<u32>,
}

fn served_models(body: &Value) -> Result<ServedModels, EngineError> {
    let cards = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| EngineError::internal("vLLM /v1/models has no `data` list"))?;
    let id = |c: &Value| c.get("id").and_then(Value::as_str).map(str::to_owned);
    let is_base = |c: &&Value| c.get("parent").is_none_or(Value::is_null);
    let mut base = cards.iter().filter(is_base);
    let first = base
        .next()
        .or_else(|| cards.first())
        .ok_or_else(|| EngineError::internal("vLLM /v1/models lists no model"))?;
    let model = id(first).ok_or_else(|| EngineError::internal("vLLM model card without an id"))?;
    let aliases = base.filter_map(id).filter(|a| *a != model).collect();
    let loras = cards
        .iter()
        .filter(|c| !is_base(c))
        .filter_map(id)
        .filter(|l| *l != model)
        .collect();
    let max_model_len = first
        .get("max_model_len")
        .and_then(Value::as_u64)
        .map(|m| u32::try_from(m).unwrap_or(u32::MAX));
    Ok(ServedModels {
        model,
        aliases,
        loras,
        max_model_len,
    })
}

#[cfg(test)]
mod tests;
