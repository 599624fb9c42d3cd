//! [`Engine`]: the worker contract.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::{ControlCall, ControlFuture, EngineError, EngineOutput, EngineRequest};

/// A stream of deltas for one [`EngineRequest`]. It ends after every choice has finished, or with
/// one `Err` item.
pub type OutputStream = Pin<Box<dyn Stream<Item = Result<EngineOutput, EngineError>> + Send>>;

/// The future of one [`Engine::probe`].
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = Result<(), EngineError>> + Send + 'a>>;

/// Static facts about the model an engine serves; formats validate requests against them.
///
/// A fact is learned from the worker when it reports it (SGLang `/server_info`, vLLM
/// `/v1/models`), else taken from the operator's per-worker flags; a fact that is neither is
/// **unknown** (`None`, or [`UNKNOWN_CONTEXT_LEN`] for the context length) and formats then skip
/// the check that needs it, leaving it to the engine (whose own 400 is relayed). A default that
/// could reject valid input (e.g. a guessed vocabulary size) is never used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// Served model name (vLLM `model`, SGLang `model_path`).
    pub model: String,
    /// Other names the model is served under (vLLM `--served-model-name a b …`: every name is a
    /// valid `model`).
    #[serde(default)]
    pub model_aliases: Vec<String>,
    /// Vocabulary size: valid token ids are `0..vocab_size`. `None`: unknown (neither SGLang's
    /// nor vLLM's HTTP API reports it), so token ids are not range-checked by genfront.
    #[serde(default)]
    pub vocab_size: Option<u32>,
    /// Maximum context length (prompt + output) in tokens; [`UNKNOWN_CONTEXT_LEN`] when unknown
    /// (then no length check is made by genfront). Use [`EngineInfo::context_limit`].
    pub max_context_len: u32,
    /// End-of-sequence token ids (empty: unknown).
    #[serde(default)]
    pub eos_token_ids: Vec<u32>,
    /// Maximum top-logprobs per position (vLLM `--max-logprobs`). `None`: unknown or no cap
    /// (SGLang has none), so not checked by genfront.
    #[serde(default)]
    pub max_logprobs: Option<u32>,
    /// Maximum parallel samples per request (vLLM `max_num_seqs`, SGLang
    /// `max_running_requests`). `None`: unknown, so `n` is not bounded by genfront.
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    /// Whether the engine can report routed experts.
    pub routed_experts: bool,
    /// Whether the engine can report sampling masks.
    pub sampling_mask: bool,
    /// Whether the engine loads a tokenizer (SGLang without `--skip-tokenizer-init`, vLLM without
    /// `--tokens-only`). `Some(true)`: text features (`text` in answers, stop strings, text
    /// prompts, vLLM `output_mode: "text"`) are accepted and forwarded, and the engine's text is
    /// passed through. `Some(false)`: refused with the engine's own message. `None`: unknown, so
    /// left to the engine (its own 400 is relayed). genfront has no tokenizer of its own.
    #[serde(default)]
    pub tokenizer: Option<bool>,
    /// Server features that decide whether some request fields are served (LoRA, reasoning,
    /// trace replay, data-parallel ranks). Each is unknown (`None`) unless the worker reports it
    /// or the operator gives it; formats check only what is known.
    #[serde(default)]
    pub features: EngineFeatures,
    /// The worker's own server-info document, as it reported it (SGLang `GET /server_info`), for
    /// auxiliary routes that relay it. `None` for engines without one (mock, vLLM, sidecars that
    /// do not forward it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<serde_json::Value>,
}

/// Server launch flags that make an engine accept or refuse some request fields
/// ([`EngineInfo::features`]). `None`: unknown, so the check is left to the engine (its own 400
/// is relayed); `Some`: the format applies the engine's own rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineFeatures {
    /// LoRA adapters are served (SGLang `--enable-lora`, `server_info.enable_lora`; vLLM
    /// `--enable-lora`). `Some(false)`: a request naming an adapter gets the engine's refusal.
    #[serde(default)]
    pub lora: Option<bool>,
    /// A reasoning parser / reasoning config is set (vLLM `--reasoning-parser` or
    /// `--reasoning-config`: without it `thinking_token_budget` is refused,
    /// `v1/engine/input_processor.py`; SGLang `server_info.reasoning_parser`).
    #[serde(default)]
    pub reasoning: Option<bool>,
    /// vLLM `--enable-trace-replay`: without it a non-empty `trace_decode_token_ids` is refused
    /// (`v1/engine/input_processor.py`).
    #[serde(default)]
    pub trace_replay: Option<bool>,
    /// Data-parallel ranks (SGLang `--dp-size`, `server_info.dp_size`): a request's
    /// `data_parallel_rank` / `routed_dp_rank` must be in `0..dp_size`.
    #[serde(default)]
    pub dp_size: Option<u32>,
}

impl EngineFeatures {
    /// The in-process mock engine's features: all known, none enabled, one data-parallel rank
    /// (an engine launched with default flags).
    pub fn mock() -> Self {
        Self {
            lora: Some(false),
            reasoning: Some(false),
            trace_replay: Some(false),
            dp_size: Some(1),
        }
    }
}

/// [`EngineInfo::max_context_len`] of an engine whose context length is unknown.
pub const UNKNOWN_CONTEXT_LEN: u32 = u32::MAX;

impl EngineInfo {
    /// Whether `name` is the served model or one of its aliases.
    pub fn serves(&self, name: &str) -> bool {
        self.model == name || self.model_aliases.iter().any(|a| a == name)
    }

    /// The context length, when known (`None` for [`UNKNOWN_CONTEXT_LEN`]).
    pub fn context_limit(&self) -> Option<u32> {
        (self.max_context_len != UNKNOWN_CONTEXT_LEN).then_some(self.max_context_len)
    }
}

impl Default for EngineInfo {
    /// The in-process mock engine's facts (all known; no tokenizer).
    fn default() -> Self {
        Self {
            model: "genfront-mock".to_owned(),
            model_aliases: Vec::new(),
            vocab_size: Some(152_064),
            max_context_len: 32_768,
            eos_token_ids: vec![2],
            max_logprobs: Some(20),
            max_num_seqs: Some(256),
            routed_experts: true,
            sampling_mask: true,
            tokenizer: Some(false),
            features: EngineFeatures::mock(),
            server_info: None,
        }
    }
}

/// A worker that generates tokens: the in-process mocker, a native engine client, or a remote
/// sidecar.
///
/// Lifecycle: [`Engine::generate`] returns at once; work starts when the stream is first polled.
/// **Dropping the stream or firing `cancel` must abort the work at the engine** (SGLang
/// `POST /abort_request`, vLLM `POST /inference/v1/abort_requests` or a connection drop). After
/// `cancel` fires, every unfinished choice gets one last item (no new tokens) whose finish reason
/// is [`crate::FinishReason::Cancelled`]; the tokens produced before it were already delivered as
/// deltas, so a client can resume from them (RL partial rollouts). The stream then ends.
pub trait Engine: Send + Sync + 'static {
    /// Model facts used for validation.
    fn info(&self) -> &EngineInfo;

    /// Whether the engine currently accepts requests, as far as the engine client itself knows
    /// (e.g. a sidecar's health stream). Routers keep their own state from [`Engine::probe`] and
    /// request outcomes; this is one input to it.
    fn ready(&self) -> bool {
        true
    }

    /// One active health probe (SGLang/vLLM `GET /health`, a sidecar's gRPC health check, …),
    /// bounded by `timeout`. `Ok` when the engine answered healthy. The default follows
    /// [`Engine::ready`]. Routers call this periodically; it must not hold any lock.
    ///
    /// # Errors
    /// [`EngineError`] `Unavailable` for an unhealthy answer, a transport failure or a timeout.
    fn probe(&self, timeout: std::time::Duration) -> ProbeFuture<'_> {
        let _ = timeout;
        let ready = self.ready();
        Box::pin(async move {
            if ready {
                Ok(())
            } else {
                Err(EngineError::unavailable("engine reports not ready"))
            }
        })
    }

    /// Start generating for `request`.
    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream;

    /// The native API this engine speaks (`"sglang"`, `"vllm"`), when it is one engine's face;
    /// `None` for engines that answer every format (the in-process mocker). Fleet control sends a
    /// format's control calls only to engines of that format (or of none).
    fn native_format(&self) -> Option<&'static str> {
        None
    }

    /// Relay one native fleet-control call ([`ControlCall`]: pause, resume, weight update, cache
    /// flush, …) and return the engine's own answer, within `call.timeout`. A native HTTP client
    /// sends the call's method, path, query and body as they are; a sidecar forwards it to its
    /// engine; the mocker acts on [`ControlCall::action`] and answers in the call's format.
    ///
    /// # Errors
    /// [`EngineError`] `Unsupported` when the engine has no control face (the default),
    /// `Unavailable` for a transport failure, `Timeout` when no answer came in time. An answer
    /// with an error status is an `Ok` [`ControlReply`], not an error.
    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        let _ = call;
        Box::pin(async {
            Err(EngineError::unsupported(
                "this engine does not take fleet-control calls",
            ))
        })
    }
}
