//! [`Engine`]: the worker contract.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::{EngineError, EngineOutput, EngineRequest};

/// A stream of deltas for one [`EngineRequest`]. It ends after every choice has finished, or with
/// one `Err` item.
pub type OutputStream = Pin<Box<dyn Stream<Item = Result<EngineOutput, EngineError>> + Send>>;

/// The future of one [`Engine::probe`].
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = Result<(), EngineError>> + Send + 'a>>;

/// Static facts about the model an engine serves; formats validate requests against them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// Served model name (vLLM `model`, SGLang `model_path`).
    pub model: String,
    /// Other names the model is served under (vLLM `--served-model-name a b …`: every name is a
    /// valid `model`).
    #[serde(default)]
    pub model_aliases: Vec<String>,
    /// Vocabulary size: valid token ids are `0..vocab_size`.
    pub vocab_size: u32,
    /// Maximum context length (prompt + output) in tokens.
    pub max_context_len: u32,
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
    /// Maximum top-logprobs per position (vLLM `--max-logprobs`).
    pub max_logprobs: u32,
    /// Maximum parallel samples per request (vLLM `max_num_seqs`).
    pub max_num_seqs: u32,
    /// Whether the engine can report routed experts.
    pub routed_experts: bool,
    /// Whether the engine can report sampling masks.
    pub sampling_mask: bool,
}

impl EngineInfo {
    /// Whether `name` is the served model or one of its aliases.
    pub fn serves(&self, name: &str) -> bool {
        self.model == name || self.model_aliases.iter().any(|a| a == name)
    }
}

impl Default for EngineInfo {
    fn default() -> Self {
        Self {
            model: "genfront-mock".to_owned(),
            model_aliases: Vec::new(),
            vocab_size: 152_064,
            max_context_len: 32_768,
            eos_token_ids: vec![2],
            max_logprobs: 20,
            max_num_seqs: 256,
            routed_experts: true,
            sampling_mask: true,
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
}
