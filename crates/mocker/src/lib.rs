//! genfront's in-process **mock engine**: a deterministic [`genfront_protocol::Engine`] that needs
//! no GPU and no model, used as the embedded default worker, by benchmarks, and as the oracle the
//! SGLang/vLLM formats and the HTTP frontend are tested against.
//!
//! Start at [`MockEngine`] (built from a [`MockConfig`]); failure injection is in
//! [`ScriptedFault`].
//!
//! What this crate owns:
//! - **A synthetic model**: for every token context a ranked, self-consistent next-token
//!   distribution (distinct candidates, strictly decreasing valid logprobs, a logprob and rank for
//!   *every* token id), derived only from the engine seed and the tokens so far. Sampling draws
//!   from it honouring temperature, top-k, top-p and min-p; greedy takes rank 1.
//! - **Determinism**: the same request (prompt, sampling options incl. seed, choice index) always
//!   gives the same tokens and logprobs, whatever the timing or other requests. Without a seed the
//!   draws are keyed by the prompt. Greedy choices are identical; sampled choices differ.
//! - **Output shape**: one [`genfront_protocol::EngineOutput`] per new token per choice, with
//!   cumulative usage. A choice's first item carries prompt logprobs (`start..prompt_len`, `None` at
//!   position 0) and routed-expert rows for prompt positions `routed_experts_start..prompt_len`;
//!   each later item one expert row (the forward pass of the previous token), so after `c` tokens
//!   a choice has `prompt_len - start + c - 1` rows. The finishing item carries the last token.
//!   `max_tokens: Some(0)` yields one item per choice with no tokens and `Length { length: 0 }`.
//!   Choices advance in lock step: each step yields one item per unfinished choice, in index
//!   order.
//! - **Constraints have no effect**: the typed [`genfront_protocol::Constraints`] (logit bias,
//!   structured output) and the native-only keys of a request
//!   ([`genfront_protocol::EngineRequest::native_only`]) are accepted and ignored by the toy
//!   model; they are never refused here (a real engine client honours or refuses them).
//! - **Stops**: `max_tokens` (clamped to the context), `min_tokens` (EOS and stop ids cannot be
//!   drawn before it), stop token ids, EOS (natural stops with [`MockConfig::eos_probability`];
//!   with `ignore_eos` EOS ids are ordinary tokens). Stop strings are
//!   [`genfront_protocol::ErrorKind::Unsupported`] (no tokenizer).
//! - **Timing**: TTFT grows with uncached prompt tokens; fixed inter-token latency; a speedup
//!   divisor; a zero-delay mode that arms no timer.
//! - **A prefix cache**: an LRU of hashed full prompt blocks shared by the engine's requests;
//!   `cached_tokens` reports hits and shortens TTFT.
//! - **Cancellation and accounting**: firing the token ends every unfinished choice with
//!   `FinishReason::Cancelled { message: "Aborted" }`, promptly even while sleeping; dropping the
//!   stream stops all work (no task is spawned). Counters ([`MockEngine::running`],
//!   [`MockEngine::aborted`], …) are kept by an RAII guard inside the stream.
//! - **Fleet control** ([`genfront_protocol::Engine::control`]): pause (`abort` ends in-flight
//!   requests with `Cancelled { "Aborted" }` after their partial tokens; `in_place` / `retract` /
//!   `keep` freeze them; `wait` answers once they finished), resume, cache flush, weight updates
//!   and versions, answered in the native bodies of the call's format (SGLang or vLLM). While
//!   paused, new requests are held before they start (a vLLM `abort`/`wait` pause refuses them
//!   with a retryable 503 instead, as vLLM does). Once a weight version is set, outputs
//!   carry it in `engine_data` (SGLang's `meta_info.weight_version`, vLLM's `weight_versions`
//!   spans). A failure knob ([`MockEngine::set_update_weights_fail`]) makes weight updates fail
//!   natively, and every call is logged ([`MockEngine::control_log`], [`ControlRecord`]). The
//!   answers and the rules, with their engine sources, are in [`control`].
//!
//! ```
//! use futures::StreamExt;
//! use genfront_mocker::{MockEngine, ScriptedFault};
//! use genfront_protocol::{Engine, EngineRequest, FinishReason};
//! use tokio_util::sync::CancellationToken;
//!
//! let engine = MockEngine::zero_delay(); // no timers: runs on any executor
//! let mut request = EngineRequest::default();
//! request.token_ids = vec![1, 2, 3];
//! request.stop.max_tokens = Some(4);
//! request.stop.ignore_eos = true;
//! let items: Vec<_> = futures::executor::block_on(
//!     engine.generate(request, CancellationToken::new()).collect(),
//! );
//! assert_eq!(items.len(), 4); // one delta per token
//! let last = items[3].as_ref().expect("no fault scripted");
//! assert_eq!(last.finish_reason, Some(FinishReason::Length { length: 4 }));
//! assert_eq!((engine.completed(), engine.running()), (1, 0));
//!
//! // The second request from now on fails before its first token.
//! engine.add_fault("error@2:unavailable".parse::<ScriptedFault>()?);
//! # Ok::<(), genfront_mocker::ParseFaultError>(())
//! ```
//!
//! Output logprobs are those of the model's raw distribution (before temperature and filters), as
//! vLLM reports by default. Sampling penalties are accepted and ignored.

mod cache;
mod config;
pub mod control;
mod engine;
mod fault;
mod hash;
mod model;
pub mod rooms;
mod run;
mod validate;

pub use config::{ExpertsConfig, MockConfig, MockConfigError, PrefixCacheConfig};
pub use control::{
    CONTROL_LOG_CAPACITY, ControlRecord, SGLANG_FLUSH_CACHE_FAILED, SGLANG_FLUSH_CACHE_TEXT,
    VLLM_PAUSED_MESSAGE,
};
pub use engine::{MockEngine, MockStats};
pub use fault::{
    DEFAULT_FAULT_MESSAGE, FaultAction, FaultTrigger, ParseFaultError, ScriptedFault, parse_kind,
};
pub use rooms::{RoomState, RoomWaiter};
