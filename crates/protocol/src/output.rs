//! [`EngineOutput`]: one delta of a generation stream.

use serde::{Deserialize, Serialize};

/// One item of a generation stream: a **delta** (only what is new since the previous item of the
/// same choice), plus the finish reason on the choice's last item.
///
/// Invariants an [`crate::Engine`] upholds: for each choice `index`, `logprobs` (when present) has
/// one entry per `token_ids` entry, `sampling_mask` likewise, and exactly one item carries a
/// `finish_reason`, after which no item of that choice follows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineOutput {
    /// Choice index in `0..n` (parallel sampling).
    #[serde(default)]
    pub index: u32,
    /// New output token ids.
    #[serde(default)]
    pub token_ids: Vec<u32>,
    /// One entry per new token, when output logprobs were requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// Prompt logprobs; sent at most once per choice (with its first item).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<PromptLogprobs>,
    /// New rows of routed experts, when requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_experts: Option<RoutedExperts>,
    /// One support set per new token (the token ids sampling could choose from), when requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_mask: Option<Vec<Vec<u32>>>,
    /// Set on the choice's last item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Cumulative token counts for this choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// P/D hand-off parameters returned by the engine (vLLM `kv_transfer_params`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<serde_json::Value>,
    /// The engine's native frame, opaque, for formats that pass native fields through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_data: Option<serde_json::Value>,
    /// The engine's native answer bytes, relayed (see [`crate::OutputOptions::relay`]): set only
    /// by an engine client of the request's own native format when the request asked for relay
    /// — the whole unary answer (then the choice's only item) or one stream frame (then every
    /// item of the choice carries one, save a `Cancelled` finish the client makes itself when
    /// no abort frame came in time). `token_ids` (the new ids), `finish_reason` and `usage`
    /// come from a cheap scan (for metrics, traces and abort bookkeeping; a `Cancelled` finish
    /// may carry tokens here), the other typed fields are empty, and the format sends `native`
    /// with its ids replaced, nothing else changed. Not serialized.
    #[serde(skip)]
    pub native: Option<NativeAnswer>,
}

/// An engine's native answer, as bytes, with where the engine's own request ids sit in it
/// (see [`EngineOutput::native`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NativeAnswer {
    /// The answer exactly as the engine sent it (SGLang: the JSON object of `POST /generate`
    /// with `"stream": false`).
    pub body: bytes::Bytes,
    /// Byte ranges of `body` holding the engine-side request id (the private dispatch id), each
    /// a whole JSON string literal, quotes included, in ascending order without overlap. A
    /// relaying format replaces each with the client-visible id as a JSON string.
    pub ids: Vec<std::ops::Range<usize>>,
}

impl NativeAnswer {
    /// `body` with every id range replaced by `replacement` (the bytes of a JSON string
    /// literal). Ranges out of order or past the end are skipped, so a broken list yields the
    /// body with fewer edits, never a panic.
    pub fn with_ids(&self, replacement: &[u8]) -> Vec<u8> {
        let body = &self.body[..];
        let mut out = Vec::with_capacity(body.len() + self.ids.len() * replacement.len());
        let mut at = 0;
        for r in &self.ids {
            if r.start < at || r.end < r.start || r.end > body.len() {
                continue;
            }
            out.extend_from_slice(&body[at..r.start]);
            out.extend_from_slice(replacement);
            at = r.end;
        }
        out.extend_from_slice(&body[at..]);
        out
    }
}

/// Logprob information for one token position.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token at this position (sampled for output, given for the prompt).
    pub token_id: u32,
    /// Its natural-log probability (may be `-inf` from a real engine; formats clamp as they must).
    pub logprob: f64,
    /// Its 1-based rank in the distribution, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The top alternatives, best first (as many as requested).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<Candidate>,
    /// Logprobs of the explicitly requested token ids, in request order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected: Vec<Candidate>,
    /// The engine's decoded text of this token, when it reports one: the token decoded on its
    /// own (SGLang `return_text_in_logprobs`: the third slot of the logprob triple,
    /// `tokenizer.batch_decode` per id; vLLM: `decoded_token` of prompt logprobs and the `token`
    /// string of `output_mode: "text"` logprobs). `None`: the engine reported none (no
    /// tokenizer, or not asked) — genfront has no tokenizer and never derives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// One token and its logprob.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Token id.
    pub token_id: u32,
    /// Natural-log probability.
    pub logprob: f64,
    /// 1-based rank, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The engine's decoded text of this token, when it reports one (as [`TokenLogprob::text`]).
    /// A candidate the engine named by its text only (vLLM `output_mode: "text"` alternatives
    /// carry no id) has `token_id` [`Candidate::UNKNOWN_ID`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl Candidate {
    /// The `token_id` of a candidate the engine reported by its decoded text only (vLLM's
    /// `output_mode: "text"` top logprobs are `{token, logprob, bytes}`, without an id).
    pub const UNKNOWN_ID: u32 = u32::MAX;
}

/// Prompt logprobs for positions `start..prompt_len`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptLogprobs {
    /// First prompt position covered.
    pub start: u32,
    /// One entry per position from `start`; `None` where no logprob exists (position 0).
    pub entries: Vec<Option<TokenLogprob>>,
    /// The engine's decoded text of the token at `start` when `entries[0]` is `None` (SGLang
    /// pads the first returned prompt position with a `null` logprob but, with
    /// `return_text_in_logprobs`, still decodes its token: `[null, id, text]`). `None`: no text
    /// reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_text: Option<String>,
    /// The engine's token id at `start` when `entries[0]` is `None` (SGLang's `[null, id, …]`):
    /// the one id a client of a text prompt cannot get from genfront, which has no tokenizer.
    /// `None`: not reported (the prompt's own id is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_id: Option<u32>,
}

/// Routed experts (MoE routing replay): `ids` is a row-major `(rows, num_layers, top_k)` tensor of
/// expert ids, one row per forward-pass token position.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoutedExperts {
    /// Number of MoE layers per row.
    pub num_layers: u32,
    /// Experts per token per layer.
    pub top_k: u32,
    /// Expert ids, `rows * num_layers * top_k` entries.
    pub ids: Vec<i32>,
}

impl RoutedExperts {
    /// Number of token rows in `ids`.
    pub fn rows(&self) -> usize {
        let width = (self.num_layers as usize) * (self.top_k as usize);
        self.ids.len().checked_div(width).unwrap_or(0)
    }
}

/// Cumulative token counts for one choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Output tokens generated so far for this choice.
    pub completion_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

/// Why a choice finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-sequence token (included in the output ids).
    Eos {
        /// The EOS token id produced.
        token_id: u32,
    },
    /// A stop condition matched.
    Stop {
        /// The stop token id or stop string that matched.
        matched: StopMatch,
    },
    /// The token budget ran out after `length` output tokens.
    Length {
        /// Number of output tokens generated.
        length: u32,
    },
    /// The request was cancelled or aborted (client disconnect, abort call, shutdown).
    Cancelled {
        /// Human-readable reason, e.g. SGLang's `"Aborted"`.
        message: String,
    },
    /// The engine failed this choice. The message is internal (logged, never sent to clients).
    Error {
        /// Internal detail.
        message: String,
    },
}

impl FinishReason {
    /// Stable short label, for metrics and traces.
    pub fn label(&self) -> &'static str {
        match self {
            FinishReason::Eos { .. } => "eos",
            FinishReason::Stop { .. } => "stop",
            FinishReason::Length { .. } => "length",
            FinishReason::Cancelled { .. } => "cancelled",
            FinishReason::Error { .. } => "error",
        }
    }
}

/// What a stop condition matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopMatch {
    /// A stop token id.
    TokenId(u32),
    /// A stop string.
    Text(String),
}

#[cfg(test)]
mod tests {
    use super::NativeAnswer;

    #[test]
    fn with_ids_replaces_each_range_and_skips_broken_ones() {
        let answer = NativeAnswer {
            body: bytes::Bytes::from_static(br#"{"id":"abc","x":1,"y":"abc"}"#),
            ids: vec![6..11, 22..27],
        };
        assert_eq!(
            answer.with_ids(br#""client""#),
            br#"{"id":"client","x":1,"y":"client"}"#
        );
        let broken = NativeAnswer {
            body: answer.body.clone(),
            ids: vec![22..27, 6..11, 20..99],
        };
        assert_eq!(
            broken.with_ids(b"\"c\""),
            br#"{"id":"abc","x":1,"y":"c"}"#,
            "out of order and out of range skipped"
        );
    }
}
