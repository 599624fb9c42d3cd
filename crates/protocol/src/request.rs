//! [`EngineRequest`]: what a format plugin hands to a worker.

use serde::{Deserialize, Serialize};

/// One generation request as every engine sees it: a single prompt of token ids, with stop
/// conditions, sampling and output options, routing hints and the client's native body.
///
/// Built by a format plugin's projection step from a validated native request; the frontend then
/// fills [`EngineRequest::request_id`] with a private id it minted, so a client can never choose the
/// id an engine sees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineRequest {
    /// Internal request id minted by the frontend (32 lowercase hex chars, prefix-free among
    /// in-flight requests). Used for engine dispatch, aborts, logs and traces. Never client-chosen.
    pub request_id: String,
    /// The prompt, as token ids (each `< EngineInfo::vocab_size`).
    pub token_ids: Vec<u32>,
    /// When generation stops.
    pub stop: StopConditions,
    /// How tokens are sampled.
    pub sampling: SamplingOptions,
    /// What the engine reports besides token ids.
    pub output: OutputOptions,
    /// Hints for the router and the engine scheduler.
    pub routing: RoutingHints,
    /// Client-given hand-off parameters (a vLLM client's own `kv_transfer_params`), opaque and
    /// passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<serde_json::Value>,
    /// The P/D leg, when the router split the request over a prefill and a decode worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<crate::PdLeg>,
    /// Sampling constraints both engines honour with the same meaning (logit bias, structured
    /// output), so a request of one format can carry them to the other engine.
    #[serde(default, skip_serializing_if = "Constraints::is_empty")]
    pub constraints: Constraints,
    /// The native keys of [`EngineRequest::native`] that are set (present with a value other
    /// than the key's default) but have no typed counterpart, as dotted paths of the client's
    /// own key names (`sampling_params.custom_params`, `return_entropy`, …), in body order.
    ///
    /// Filled by the format's projection. An engine client for the format's own engine carries
    /// the native body and ignores this list; a client for another engine kind refuses a
    /// request whose list is not empty with [`crate::EngineError::unsupported`] naming the first
    /// key, since it could only drop it. The in-process mocker takes the native body and ignores
    /// it too (its toy model has no use for these keys).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub native_only: Vec<String>,
    /// The client's native request, so an engine client for the same engine can rebuild the exact
    /// native body (unknown keys included).
    pub native: NativeBody,
}

/// Sampling constraints with the same meaning on SGLang and vLLM. Empty = unconstrained.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Constraints {
    /// Additive biases on the next-token logits, in the client's order (SGLang
    /// `sampling_params.logit_bias` `{"<id>": bias}`, vLLM `sampling_params.logit_bias`
    /// `{id: bias}`). vLLM clamps each bias to [-100, 100]; SGLang adds it as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logit_bias: Vec<LogitBias>,
    /// Grammar-constrained decoding, when requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<StructuredOutput>,
}

impl Constraints {
    /// Whether nothing is constrained.
    pub fn is_empty(&self) -> bool {
        self.logit_bias.is_empty() && self.structured.is_none()
    }
}

/// One logit bias entry.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogitBias {
    /// Token id (`< EngineInfo::vocab_size` when the vocabulary is known).
    pub token_id: u32,
    /// Added to the token's logit.
    pub bias: f64,
}

/// A grammar the output must match. Both engines compile these with xgrammar by default (SGLang
/// `--grammar-backend xgrammar`, vLLM `structured_outputs_config.backend auto`), so the texts
/// mean the same on either.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// A regular expression (SGLang `regex`, vLLM `structured_outputs.regex`).
    Regex(String),
    /// A JSON schema as JSON text (SGLang `json_schema`, vLLM `structured_outputs.json`; a
    /// vLLM dict is carried as its JSON text).
    JsonSchema(String),
    /// An EBNF (GBNF) grammar (SGLang `ebnf`, vLLM `structured_outputs.grammar`).
    Grammar(String),
    /// An xgrammar structural tag as JSON text (SGLang `structural_tag`, vLLM
    /// `structured_outputs.structural_tag`).
    StructuralTag(String),
}

/// Stop conditions. Token counts are in tokens of output.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StopConditions {
    /// Maximum number of new tokens; `None` = up to the engine's context length.
    /// `Some(0)` is a prefill-only (scoring) request: no token is generated.
    pub max_tokens: Option<u32>,
    /// Minimum number of new tokens before EOS or a stop token may end the request.
    pub min_tokens: u32,
    /// Token ids that end generation (the matched id is reported in [`crate::StopMatch`]).
    pub stop_token_ids: Vec<u32>,
    /// Stop strings (need a tokenizer; token-only engines reject them).
    pub stop: Vec<String>,
    /// Keep generating past EOS.
    pub ignore_eos: bool,
}

/// Sampling options. `None` means the engine's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingOptions {
    /// Number of parallel samples for this prompt; outputs carry [`crate::EngineOutput::index`].
    pub n: u32,
    /// Temperature; `Some(0.0)` means greedy.
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1].
    pub top_p: Option<f64>,
    /// Top-k; `None` or a value `< 1` means disabled.
    pub top_k: Option<i64>,
    /// Min-p in [0, 1].
    pub min_p: Option<f64>,
    /// Frequency penalty in [-2, 2].
    pub frequency_penalty: Option<f64>,
    /// Presence penalty in [-2, 2].
    pub presence_penalty: Option<f64>,
    /// Repetition penalty (> 0; 1.0 = none).
    pub repetition_penalty: Option<f64>,
    /// Seed for reproducible sampling.
    pub seed: Option<u64>,
    /// Which of the client's parallel samples this engine request is, when a format fans `n` out
    /// into separate engine requests of `n = 1` (SGLang: one request per copy, each with its own
    /// rid). Real engines sample each unseeded request on its own; an engine whose unseeded
    /// sampling is a function of the request (the mocker) offsets its sample keys by it, so the
    /// copies differ as they do on a real engine; seeded copies share the seed and sample alike,
    /// as on SGLang. 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample_index: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Default for SamplingOptions {
    fn default() -> Self {
        Self {
            n: 1,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            frequency_penalty: None,
            presence_penalty: None,
            repetition_penalty: None,
            seed: None,
            sample_index: 0,
        }
    }
}

impl SamplingOptions {
    /// Whether sampling is greedy (temperature below 1e-5, the threshold both engines use).
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_some_and(|t| t < 1e-5)
    }
}

/// What the engine reports besides output token ids.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputOptions {
    /// Output-token logprobs: `None` = none; `Some(k)` = the sampled token's logprob plus the top
    /// `k` alternatives (`k = 0`: sampled token only).
    pub logprobs: Option<u32>,
    /// Prompt-token logprobs, when requested.
    pub prompt_logprobs: Option<PromptLogprobOptions>,
    /// Token ids whose logprobs are reported at every position (SGLang `token_ids_logprob`, vLLM
    /// `logprob_token_ids`), for the output side and, when prompt logprobs are on, the prompt side.
    pub token_ids_logprobs: Vec<u32>,
    /// Report the routed experts (MoE routing replay, "R3").
    pub routed_experts: bool,
    /// First prompt position whose routed experts are reported.
    pub routed_experts_start: u32,
    /// Report the sampling mask (the support set each token was sampled from).
    pub sampling_mask: bool,
    /// The client asked for a streamed answer. An engine client may use the engine's unary call
    /// when this is false (the answer is delivered whole anyway); set by the format's projection.
    #[serde(default)]
    pub stream: bool,
    /// The client's format can answer with the engine's own native answer, only its ids edited
    /// (**relay**): set by the format's projection when its client speaks the engine's native
    /// API and the answer needs nothing genfront renders itself (SGLang: a single-item, `n = 1`
    /// request without genfront-rendered keys, unary or streamed in SGLang's default cumulative
    /// mode). An engine client of that native format may then deliver the answer, or each
    /// stream frame, as [`crate::EngineOutput::native`] (with the typed fields filled only from
    /// a cheap scan) instead of fully decoded deltas — for a stream only when the engine streams
    /// in that same default mode; any other engine ignores the flag, and the format's assembler
    /// takes typed deltas as always. Never sent over the sidecar wire (a sidecar's engine
    /// answers typed).
    #[serde(default)]
    pub relay: bool,
}

/// Which prompt positions get logprobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptLogprobOptions {
    /// First prompt position reported (0 = the whole prompt; position 0 has no logprob).
    pub start: u32,
    /// Number of top alternatives per position.
    pub top_k: u32,
}

/// Routing hints for the router and the engine's scheduler.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoutingHints {
    /// Data-parallel rank to pin the request to.
    pub dp_rank: Option<u32>,
    /// Scheduling priority as the native API defines it.
    pub priority: Option<i64>,
    /// Prefix-cache namespace (vLLM `cache_salt`, SGLang `cache_salt`/`extra_key`).
    pub cache_salt: Option<String>,
    /// Session / conversation id for affinity.
    pub session_id: Option<String>,
    /// LoRA adapter name.
    pub lora: Option<String>,
}

/// The client's native request, kept so an engine client for the same engine can rebuild it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NativeBody {
    /// Format name (`"sglang"`, `"vllm"`, …) that produced `body`.
    pub format: String,
    /// The native JSON object for this one engine request (for a batch: the item's own body),
    /// with every key the client sent, in the client's order, unknown keys included.
    pub body: serde_json::Value,
}
