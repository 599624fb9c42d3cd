//! [`FrameDecoder`]: one SGLang `/generate` stream frame → one [`EngineOutput`] delta.
//!
//! The only parser of SGLang response frames in genfront (the client, the round-trip property
//! and the cross-checks all use it). Rules, per `spec/sglang-native.md` §6–§10:
//!
//! - **`output_ids`**: cumulative mode (SGLang's default) carries every id so far, so the delta is
//!   the part past the ids already delivered; incremental mode (`--incremental-streaming-output`)
//!   carries only new ids. A cumulative list shorter than what was delivered is a contract error,
//!   except on an abort frame (SGLang may send only the last id there), which then adds nothing.
//! - **Output-side lists** (`output_token_logprobs`, `output_top_logprobs`,
//!   `output_token_ids_logprobs`, `output_token_sampling_mask`) are aligned with the new ids. Both
//!   shapes are accepted in either mode — the full list (`delivered + new` entries) or the slice
//!   (`new` entries) — because builds differ on which lists they slice; any other length is a
//!   contract error. A triple `[logprob, id, text]` with a `null` logprob (orjson writes `-inf` as
//!   `null`) decodes to `-inf`; a `null` top/id-logprob entry is an empty list. Top candidates get
//!   rank `j + 1` (SGLang lists them best first) and are cut to the requested count; the sampled
//!   token's rank is its position in the top list when it appears there. The third slot (a
//!   string with `return_text_in_logprobs` on an engine with a tokenizer: the id decoded on its
//!   own, `tokenizer_manager.py` `detokenize_logprob_tokens`; `null` otherwise) becomes
//!   [`TokenLogprob::text`] / [`Candidate::text`], on every list, output and prompt side.
//! - **Input-side lists** (`input_token_logprobs`, `input_top_logprobs` or the flat
//!   `input_top_logprobs_*` forms, `input_token_ids_logprobs`) are decoded **once**, from the first
//!   frame that carries a non-empty `input_token_logprobs`, and only when the request asked for
//!   prompt logprobs. They cover the last `len` prompt positions (`start = prompt_len − len`). A
//!   `null` logprob there is a position without a logprob (SGLang pads the first entry with
//!   `null`) and decodes to `None`; its decoded text, when sent, goes to
//!   [`PromptLogprobs::first_text`].
//! - **`finish_reason`** (§8): `{"type":"stop","matched":<int>}` → [`FinishReason::Eos`] when the id
//!   is an EOS id of the engine (and `ignore_eos` is off), [`FinishReason::Stop`] with the id when
//!   it is one of the request's `stop_token_ids`, and `Eos` otherwise (SGLang only stops on a token
//!   that is an EOS-like id of the model or a requested stop id, so an id in neither list is one of
//!   the model's own stop ids the client was not told about). A list `matched` uses its last id.
//!   `matched` string → `Stop{Text}`. `matched` `null`/absent → `Eos` with the last output id when
//!   that id is an EOS id, else `Stop{Text("")}` (no stop string or id is known).
//!   `{"type":"length"}` → `Length` (its `length`, else the output count). `{"type":"abort"}` with a
//!   4xx `status_code` → `Err(InvalidArgument)` with SGLang's `message`, `status_code` and `err_type`
//!   (what SGLang itself answers a unary client with: a 400 `{"error":{"message"}}`); 502/503/504 →
//!   `Err(Unavailable)`, other 5xx → `Err(Internal)` (SGLang raises an `HTTPException` with that
//!   status); any other abort (no status: a user abort, `abort_all`, a weight update, the waiting
//!   queue) → [`FinishReason::Cancelled`] with SGLang's message, **whoever asked for it**: a client
//!   talking to SGLang directly gets a normal 200 answer with the tokens so far there, and RL
//!   pipelines resume partial rollouts from exactly that. The Dynamo spellings `eos`, `cancelled`,
//!   `error`, `content_filter` are accepted too.
//! - **Usage**: `prompt_tokens`, `completion_tokens`, `cached_tokens` (missing: the prompt length,
//!   the ids delivered so far, 0), on every delta.
//! - **`routed_experts`** (base64 of little-endian `int32`, shape `(rows, layers, top_k)`): the
//!   native string stays in `engine_data` (the SGLang assembler re-emits it as is); when the engine
//!   was configured with its MoE shape it is also decoded into [`RoutedExperts`].
//! - **`text`** (an engine with a tokenizer): `engine_data.text` is the text **delta** of the
//!   frame in both upstream modes (a cumulative frame's text minus the text already delivered),
//!   so formats rebuild cumulative or incremental text from the engine's own strings.
//! - **`engine_data`** is the native frame, minus the lists decoded into typed fields above
//!   (`output_ids` and the logprob/mask lists, which grow with the output in cumulative mode), so
//!   every other `meta_info` key (`weight_version`, `dp_rank`, `spec_*`, unknown ones) passes
//!   through to formats that echo it.
//! - **`{"error":{…}}` frames** → `Err`: `code` 4xx (or no code: SGLang's stream handler only
//!   reports `ValueError`s, i.e. validation failures) → `InvalidArgument` with the message;
//!   429 → `Overloaded`; 502/503/504 → `Unavailable`; other codes → `Internal`.

use base64::Engine as _;
use genfront_protocol::{
    Candidate, EngineError, EngineOutput, EngineRequest, ErrorKind, FinishReason, PromptLogprobs,
    RoutedExperts, StopMatch, TokenLogprob, Usage,
};
use serde_json::{Map, Value};

/// What the decoder needs to know about the request a stream answers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecodeConfig {
    /// The upstream streams incremental frames (`--incremental-streaming-output`).
    pub incremental: bool,
    /// The choice index put on every output ([`EngineOutput::index`]).
    pub index: u32,
    /// Prompt length (default `prompt_tokens`, and the end of the prompt-logprob range).
    pub prompt_len: u32,
    /// The engine's EOS token ids.
    pub eos_token_ids: Vec<u32>,
    /// The request's stop token ids.
    pub stop_token_ids: Vec<u32>,
    /// The request ignores EOS (a matched id is then always a stop id).
    pub ignore_eos: bool,
    /// Output logprobs with this many top alternatives (`None`: no output logprobs).
    pub logprobs: Option<u32>,
    /// Prompt logprobs with this many top alternatives (`None`: no prompt logprobs).
    pub prompt_logprobs: Option<u32>,
    /// Token-id logprobs (`token_ids_logprob`) were requested.
    pub selected: bool,
    /// Sampling masks were requested.
    pub sampling_mask: bool,
    /// Routed experts were requested.
    pub routed_experts: bool,
    /// The engine's MoE shape `(num_layers, top_k)`, to decode `routed_experts` into
    /// [`RoutedExperts`]; `None` keeps only the native string in `engine_data`.
    pub experts_shape: Option<(u32, u32)>,
}

impl DecodeConfig {
    /// The configuration for choice `index` of `request`, served by an upstream in the given
    /// streaming mode with the given EOS ids and MoE shape.
    pub fn for_request(
        request: &EngineRequest,
        index: u32,
        incremental: bool,
        eos_token_ids: &[u32],
        experts_shape: Option<(u32, u32)>,
    ) -> Self {
        let out = &request.output;
        Self {
            incremental,
            index,
            prompt_len: u32::try_from(request.token_ids.len()).unwrap_or(u32::MAX),
            eos_token_ids: eos_token_ids.to_vec(),
            stop_token_ids: request.stop.stop_token_ids.clone(),
            ignore_eos: request.stop.ignore_eos,
            logprobs: out.logprobs,
            prompt_logprobs: out.prompt_logprobs.as_ref().map(|p| p.top_k),
            selected: !out.token_ids_logprobs.is_empty(),
            sampling_mask: out.sampling_mask,
            routed_experts: out.routed_experts,
            experts_shape,
        }
    }
}

/// Meta-info lists decoded into typed fields and left out of `engine_data`.
const TYPED_META_LISTS: &[&str] = &[
    "output_token_logprobs",
    "output_top_logprobs",
    "output_token_ids_logprobs",
    "output_token_sampling_mask",
    "input_token_logprobs",
    "input_top_logprobs",
    "input_token_ids_logprobs",
    "input_top_logprobs_val_flat",
    "input_top_logprobs_idx_flat",
    "input_top_logprobs_val_flat_b64",
    "input_top_logprobs_idx_flat_b64",
];

/// Decodes the frames of one SGLang stream (one choice) into deltas. Stateful: it remembers how
/// much was delivered, to slice cumulative frames.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    cfg: DecodeConfig,
    /// Output ids delivered so far.
    delivered: usize,
    /// The last output id delivered.
    last_token: Option<u32>,
    /// Bytes of output text delivered so far (cumulative frames carry all of it).
    text_len: usize,
    /// Prompt logprobs were delivered.
    prompt_sent: bool,
    /// The latest usage.
    usage: Usage,
    /// A terminal frame was decoded.
    finished: bool,
    /// The previous relayed cumulative frame's array spans, so the next relay scan skips
    /// what it repeats (see `fast`).
    memo: fast::Memo,
}

fn internal(message: impl Into<String>) -> EngineError {
    EngineError::internal(message)
}

impl FrameDecoder {
    /// A decoder for a fresh stream.
    pub fn new(cfg: DecodeConfig) -> Self {
        let usage = Usage {
            prompt_tokens: cfg.prompt_len,
            completion_tokens: 0,
            cached_tokens: 0,
        };
        Self {
            cfg,
            delivered: 0,
            last_token: None,
            text_len: 0,
            prompt_sent: false,
            usage,
            finished: false,
            memo: fast::Memo::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DecodeConfig {
        &self.cfg
    }

    /// The latest usage (prompt length and nothing generated before the first frame).
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Whether a terminal frame (one with a finish reason, or an error) was decoded.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Decode one SSE `data` payload (not `[DONE]`).
    ///
    /// # Errors
    /// An [`EngineError`] for error frames, error aborts and frames that break the contract
    /// (invalid JSON, misaligned lists, a frame after the terminal one).
    pub fn decode(&mut self, data: &[u8]) -> Result<EngineOutput, EngineError> {
        let (value, skipped, typed) = parse::frame(data, self.delivered, self.cfg.incremental)
            .map_err(|e| internal(format!("SGLang sent a frame that is not valid JSON: {e}")))?;
        self.decode_parsed(value, skipped, &typed)
    }

    /// Decode one frame already parsed as JSON.
    ///
    /// # Errors
    /// As [`FrameDecoder::decode`].
    pub fn decode_value(&mut self, frame: Value) -> Result<EngineOutput, EngineError> {
        self.decode_parsed(frame, 0, &parse::Typed::default())
    }

    /// Decode a frame whose first `skipped` (cumulative) output ids were left out and whose
    /// `typed` lists were read ahead.
    fn decode_parsed(
        &mut self,
        frame: Value,
        skipped: usize,
        typed: &parse::Typed,
    ) -> Result<EngineOutput, EngineError> {
        let result = self.decode_frame(frame, skipped, typed);
        if !matches!(&result, Ok(o) if o.finish_reason.is_none()) {
            self.finished = true;
        }
        result
    }

    fn decode_frame(
        &mut self,
        frame: Value,
        skipped: usize,
        typed: &parse::Typed,
    ) -> Result<EngineOutput, EngineError> {
        if self.finished {
            return Err(internal("SGLang sent a frame after the terminal response"));
        }
        let Value::Object(mut frame) = frame else {
            return Err(internal("SGLang sent a frame that is not a JSON object"));
        };
        if let Some(err) = frame.get("error") {
            return Err(error_frame(err));
        }
        let empty = Map::new();
        let meta = match frame.get("meta_info") {
            Some(Value::Object(m)) => m,
            None | Some(Value::Null) => &empty,
            Some(_) => return Err(internal("SGLang frame meta_info is not an object")),
        };
        let finish_raw = meta.get("finish_reason").filter(|v| !v.is_null());
        let is_abort =
            finish_raw.is_some_and(|f| f.get("type").and_then(Value::as_str) == Some("abort"));

        // output_ids
        let ids: &[Value] = match frame.get("output_ids") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(_) => return Err(internal("SGLang frame output_ids is not a list")),
        };
        let new_ids: &[Value] = if self.cfg.incremental {
            ids
        } else if let Some(tail) = self
            .delivered
            .checked_sub(skipped)
            .and_then(|from| ids.get(from..))
        {
            tail
        } else if is_abort {
            &[]
        } else {
            return Err(internal(format!(
                "SGLang cumulative output_ids shrank from {} to {} ids",
                self.delivered,
                skipped + ids.len()
            )));
        };
        let token_ids = new_ids
            .iter()
            .map(|v| token_id(v, "output_ids"))
            .collect::<Result<Vec<u32>, _>>()?;
        let new = token_ids.len();

        let logprobs = match self.cfg.logprobs {
            Some(k) => Some(self.output_logprobs(meta, &token_ids, k, typed)?),
            None => None,
        };
        let sampling_mask = if self.cfg.sampling_mask {
            match aligned(meta, "output_token_sampling_mask", self.delivered, new)? {
                Some(rows) => Some(
                    rows.iter()
                        .map(|row| token_list(row, "output_token_sampling_mask"))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                None => None,
            }
        } else {
            None
        };
        let prompt_logprobs = self.prompt_logprobs(meta)?;
        let routed_experts = self.routed_experts(meta)?;

        let completion_default = u32::try_from(self.delivered + new).unwrap_or(u32::MAX);
        let usage = Usage {
            prompt_tokens: opt_u32(meta, "prompt_tokens")?.unwrap_or(self.cfg.prompt_len),
            completion_tokens: opt_u32(meta, "completion_tokens")?.unwrap_or(completion_default),
            cached_tokens: opt_u32(meta, "cached_tokens")?.unwrap_or(0),
        };
        let last_token = token_ids.last().copied().or(self.last_token);
        let finish_reason = match finish_raw {
            None => None,
            Some(f) => Some(self.finish_reason(f, last_token, completion_default)?),
        };

        // Commit.
        self.delivered += new;
        self.last_token = last_token;
        self.usage = usage;
        if prompt_logprobs.is_some() {
            self.prompt_sent = true;
        }
        self.text_delta(&mut frame);
        strip_typed(&mut frame);
        Ok(EngineOutput {
            index: self.cfg.index,
            token_ids,
            logprobs,
            prompt_logprobs,
            routed_experts,
            sampling_mask,
            finish_reason,
            usage: Some(usage),
            handoff: None,
            engine_data: Some(Value::Object(frame)),
            native: None,
        })
    }

    /// Turn the frame's `text` (an engine with a tokenizer) into the text *delta* of this frame,
    /// whatever the upstream mode: an incremental frame's text already is one; a cumulative
    /// frame's (and a unary answer's) is everything so far, so the delta is the part past the
    /// bytes already delivered. SGLang's text only grows (`TokenizerManager` appends the
    /// detokenizer's increments to `state.text`, which holds back incomplete UTF-8 and may hold
    /// back a tail that can still become a stop string), so the text delivered so far is always
    /// a prefix; were it not (not SGLang's behaviour), the frame adds no text. The text is the
    /// engine's own, never re-derived: concatenated deltas equal its cumulative text.
    fn text_delta(&mut self, frame: &mut Map<String, Value>) {
        let Some(Value::String(text)) = frame.get_mut("text") else {
            return;
        };
        if self.cfg.incremental {
            self.text_len += text.len();
            return;
        }
        let total = text.len();
        if text.is_char_boundary(self.text_len) {
            let delta = text.split_off(self.text_len);
            *text = delta;
            self.text_len = total;
        } else {
            text.clear();
        }
    }

    /// Output-token logprobs for the new ids, with `k` top alternatives.
    fn output_logprobs(
        &self,
        meta: &Map<String, Value>,
        token_ids: &[u32],
        k: u32,
        typed: &parse::Typed,
    ) -> Result<Vec<TokenLogprob>, EngineError> {
        let new = token_ids.len();
        let Some(lps) = aligned(meta, "output_token_logprobs", self.delivered, new)? else {
            if new == 0 {
                return Ok(Vec::new());
            }
            return Err(internal(format!(
                "SGLang frame has {new} new output ids but no output_token_logprobs"
            )));
        };
        let tops = if k > 0 {
            aligned(meta, "output_top_logprobs", self.delivered, new)?
        } else {
            None
        };
        let sel = if self.cfg.selected {
            aligned(meta, "output_token_ids_logprobs", self.delivered, new)?
        } else {
            None
        };
        let mut out = Vec::with_capacity(new);
        for (j, (lp, &id)) in lps.iter().zip(token_ids).enumerate() {
            let (logprob, lp_id, text) = match typed.lp.as_ref().and_then(|t| t.get(j)) {
                Some(t) => t.clone(),
                None => triple(lp, "output_token_logprobs")?,
            };
            let mut top = match tops.and_then(|t| t.get(j)) {
                Some(v) => match typed.top.as_ref().and_then(|t| t.get(j)) {
                    Some(row) => typed_candidates(row.as_deref()),
                    None => candidates(v, "output_top_logprobs", true)?,
                },
                None => Vec::new(),
            };
            top.truncate(k as usize);
            let selected = match sel.and_then(|s| s.get(j)) {
                Some(v) => candidates(v, "output_token_ids_logprobs", false)?,
                None => Vec::new(),
            };
            let rank = top
                .iter()
                .position(|c| c.token_id == id)
                .and_then(|p| u32::try_from(p + 1).ok());
            out.push(TokenLogprob {
                token_id: lp_id.unwrap_or(id),
                logprob: logprob.unwrap_or(f64::NEG_INFINITY),
                rank,
                top,
                selected,
                text,
            });
        }
        Ok(out)
    }

    /// Prompt logprobs, once, when requested and present.
    fn prompt_logprobs(
        &self,
        meta: &Map<String, Value>,
    ) -> Result<Option<PromptLogprobs>, EngineError> {
        let Some(k) = self.cfg.prompt_logprobs else {
            return Ok(None);
        };
        if self.prompt_sent {
            return Ok(None);
        }
        let lps = match meta.get("input_token_logprobs") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            None | Some(Value::Null) | Some(Value::Array(_)) => return Ok(None),
            Some(_) => return Err(internal("SGLang input_token_logprobs is not a list")),
        };
        let len = lps.len();
        let nested_top = match meta.get("input_top_logprobs") {
            Some(Value::Array(a)) if a.len() == len => Some(a.as_slice()),
            Some(Value::Array(a)) if !a.is_empty() => {
                return Err(internal(format!(
                    "SGLang input_top_logprobs has {} entries for {len} prompt positions",
                    a.len()
                )));
            }
            _ => None,
        };
        let flat_top = if nested_top.is_none() && k > 0 {
            flat_top(meta, len)?
        } else {
            None
        };
        let sel = match meta.get("input_token_ids_logprobs") {
            Some(Value::Array(a)) if a.len() == len && self.cfg.selected => Some(a.as_slice()),
            _ => None,
        };
        let mut entries = Vec::with_capacity(len);
        let (mut first_text, mut first_token_id) = (None, None);
        for (j, lp) in lps.iter().enumerate() {
            let (logprob, id, text) = triple(lp, "input_token_logprobs")?;
            let Some(logprob) = logprob else {
                if j == 0 {
                    first_text = text;
                    first_token_id = id;
                }
                entries.push(None);
                continue;
            };
            let mut top = match (nested_top.and_then(|t| t.get(j)), &flat_top) {
                (Some(v), _) => candidates(v, "input_top_logprobs", true)?,
                (None, Some(rows)) => rows.get(j).cloned().unwrap_or_default(),
                (None, None) => Vec::new(),
            };
            top.truncate(k as usize);
            let selected = match sel.and_then(|s| s.get(j)) {
                Some(v) => candidates(v, "input_token_ids_logprobs", false)?,
                None => Vec::new(),
            };
            let token_id =
                id.ok_or_else(|| internal("SGLang input_token_logprobs entry has no id"))?;
            let rank = top
                .iter()
                .position(|c| c.token_id == token_id)
                .and_then(|p| u32::try_from(p + 1).ok());
            entries.push(Some(TokenLogprob {
                token_id,
                logprob,
                rank,
                top,
                selected,
                text,
            }));
        }
        let covered = u32::try_from(len).unwrap_or(u32::MAX);
        Ok(Some(PromptLogprobs {
            // A text prompt's length is known only to the engine (`meta_info.prompt_tokens`).
            start: if self.cfg.prompt_len > 0 {
                self.cfg.prompt_len
            } else {
                meta.get("prompt_tokens")
                    .and_then(Value::as_u64)
                    .and_then(|v| u32::try_from(v).ok())
                    .unwrap_or(0)
            }
            .saturating_sub(covered),
            entries,
            first_text,
            first_token_id,
        }))
    }

    /// Typed routed experts, when requested, present and the MoE shape is known.
    fn routed_experts(
        &self,
        meta: &Map<String, Value>,
    ) -> Result<Option<RoutedExperts>, EngineError> {
        let (Some((num_layers, top_k)), true) = (self.cfg.experts_shape, self.cfg.routed_experts)
        else {
            return Ok(None);
        };
        let Some(Value::String(b64)) = meta.get("routed_experts") else {
            return Ok(None);
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| internal(format!("SGLang routed_experts is not base64: {e}")))?;
        let width = (num_layers as usize) * (top_k as usize) * 4;
        if width == 0 || raw.len() % width != 0 {
            return Err(internal(format!(
                "SGLang routed_experts has {} bytes, not whole rows of {num_layers} layers x {top_k} experts",
                raw.len()
            )));
        }
        let ids = raw
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Some(RoutedExperts {
            num_layers,
            top_k,
            ids,
        }))
    }

    /// Map a non-null `finish_reason`.
    fn finish_reason(
        &self,
        f: &Value,
        last_token: Option<u32>,
        completion: u32,
    ) -> Result<FinishReason, EngineError> {
        let kind = match f {
            Value::String(s) => s.as_str(),
            Value::Object(o) => o.get("type").and_then(Value::as_str).unwrap_or(""),
            _ => "",
        };
        let field = |k: &str| f.get(k).filter(|v| !v.is_null());
        let message = || {
            field("message")
                .and_then(Value::as_str)
                .unwrap_or("Aborted")
                .to_owned()
        };
        match kind {
            "stop" => Ok(match field("matched") {
                Some(Value::String(s)) => FinishReason::Stop {
                    matched: StopMatch::Text(s.clone()),
                },
                Some(Value::Array(list)) => match list.last() {
                    Some(v) => self.matched_token(token_id(v, "finish_reason.matched")?),
                    None => self.unknown_stop(last_token),
                },
                Some(v) => self.matched_token(token_id(v, "finish_reason.matched")?),
                None => self.unknown_stop(last_token),
            }),
            "eos" => Ok(FinishReason::Eos {
                token_id: last_token
                    .or_else(|| self.cfg.eos_token_ids.first().copied())
                    .unwrap_or(0),
            }),
            "length" => Ok(FinishReason::Length {
                length: match field("length") {
                    Some(v) => u32_of(v, "finish_reason.length")?,
                    None => completion,
                },
            }),
            "abort" => {
                let status = field("status_code").and_then(Value::as_u64);
                match status.and_then(|s| u16::try_from(s).ok()) {
                    Some(code) if (400..600).contains(&code) => {
                        let mut e = EngineError::new(status_kind(code), message());
                        e.status_code = Some(code);
                        e.err_type = field("err_type").and_then(Value::as_str).map(str::to_owned);
                        Err(e)
                    }
                    _ => Ok(FinishReason::Cancelled { message: message() }),
                }
            }
            "cancelled" => Ok(FinishReason::Cancelled { message: message() }),
            "content_filter" => Ok(FinishReason::Stop {
                matched: StopMatch::Text(String::new()),
            }),
            "error" => Err(internal(format!(
                "SGLang finished the request with an error: {}",
                field("message").and_then(Value::as_str).unwrap_or("")
            ))),
            other => Err(internal(format!(
                "SGLang sent an unknown finish_reason type {other:?}"
            ))),
        }
    }

    /// A stop on token `id`.
    fn matched_token(&self, id: u32) -> FinishReason {
        let eos = !self.cfg.ignore_eos && self.cfg.eos_token_ids.contains(&id);
        if !eos && (self.cfg.ignore_eos || self.cfg.stop_token_ids.contains(&id)) {
            FinishReason::Stop {
                matched: StopMatch::TokenId(id),
            }
        } else {
            FinishReason::Eos { token_id: id }
        }
    }

    /// A stop whose `matched` is `null`.
    fn unknown_stop(&self, last_token: Option<u32>) -> FinishReason {
        match last_token {
            Some(id) if self.cfg.eos_token_ids.contains(&id) => FinishReason::Eos { token_id: id },
            _ => FinishReason::Stop {
                matched: StopMatch::Text(String::new()),
            },
        }
    }
}

/// The kind of an error with HTTP-ish status `code`.
pub(crate) fn status_kind(code: u16) -> ErrorKind {
    match code {
        429 => ErrorKind::Overloaded,
        400..=499 => ErrorKind::InvalidArgument,
        502..=504 => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    }
}

/// A `{"error": {...}}` frame.
fn error_frame(err: &Value) -> EngineError {
    let message = match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("SGLang reported an error without a message")
            .to_owned(),
        other => other.to_string(),
    };
    let code = err
        .get("code")
        .or_else(|| err.get("status"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let kind = match code {
        // SGLang's stream handler reports only `ValueError`s (validation) as error frames.
        None => ErrorKind::InvalidArgument,
        Some(c) => status_kind(c),
    };
    let mut e = EngineError::new(kind, message);
    e.status_code = code;
    e.err_type = err.get("type").and_then(Value::as_str).map(str::to_owned);
    e
}

/// The output-side list `key`, aligned with `new` ids after `delivered`: the full list or the
/// slice, returned as the slice. `None` when absent.
fn aligned<'a>(
    meta: &'a Map<String, Value>,
    key: &str,
    delivered: usize,
    new: usize,
) -> Result<Option<&'a [Value]>, EngineError> {
    let list = match meta.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err(internal(format!("SGLang {key} is not a list"))),
    };
    if list.len() == new {
        Ok(Some(list))
    } else if list.len() == delivered + new {
        Ok(list.get(delivered..))
    } else {
        Err(internal(format!(
            "SGLang {key} has {} entries, expected {new} new (or {} in all)",
            list.len(),
            delivered + new
        )))
    }
}

/// A token id.
fn token_id(v: &Value, what: &str) -> Result<u32, EngineError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| internal(format!("SGLang {what} holds an invalid token id {v}")))
}

/// A list of token ids.
fn token_list(v: &Value, what: &str) -> Result<Vec<u32>, EngineError> {
    match v {
        Value::Array(a) => a.iter().map(|x| token_id(x, what)).collect(),
        Value::Null => Ok(Vec::new()),
        _ => Err(internal(format!("SGLang {what} entry is not a list"))),
    }
}

/// A non-negative integer.
fn u32_of(v: &Value, what: &str) -> Result<u32, EngineError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| internal(format!("SGLang {what} is not a count: {v}")))
}

/// An optional count in `meta`.
fn opt_u32(meta: &Map<String, Value>, key: &str) -> Result<Option<u32>, EngineError> {
    match meta.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => u32_of(v, key).map(Some),
    }
}

/// A logprob triple `[logprob|null, id, text|null]` → (logprob, id, text). The text slot is
/// SGLang's `tokenizer.batch_decode` of the id alone (`detokenize_logprob_tokens`), filled only
/// with `return_text_in_logprobs` on an engine with a tokenizer; anything but a string there
/// reads as no text.
fn triple(v: &Value, what: &str) -> Result<parse::Triple, EngineError> {
    let Value::Array(t) = v else {
        return Err(internal(format!("SGLang {what} entry is not a list")));
    };
    let logprob = match t.first() {
        None | Some(Value::Null) => None,
        Some(x) => Some(
            x.as_f64()
                .ok_or_else(|| internal(format!("SGLang {what} logprob is not a number")))?,
        ),
    };
    let id = match t.get(1) {
        None | Some(Value::Null) => None,
        Some(x) => Some(token_id(x, what)?),
    };
    let text = t.get(2).and_then(Value::as_str).map(str::to_owned);
    Ok((logprob, id, text))
}

/// One position of a top / token-id logprob list: `null` (none) or a list of triples.
fn candidates(v: &Value, what: &str, ranked: bool) -> Result<Vec<Candidate>, EngineError> {
    let list = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        _ => return Err(internal(format!("SGLang {what} entry is not a list"))),
    };
    let mut out = Vec::with_capacity(list.len());
    for (j, c) in list.iter().enumerate() {
        let (logprob, id, text) = triple(c, what)?;
        out.push(Candidate {
            token_id: id.ok_or_else(|| internal(format!("SGLang {what} candidate has no id")))?,
            logprob: logprob.unwrap_or(f64::NEG_INFINITY),
            rank: if ranked {
                u32::try_from(j + 1).ok()
            } else {
                None
            },
            text,
        });
    }
    Ok(out)
}

/// Ranked candidates from a typed top position (every triple has an id).
fn typed_candidates(row: Option<&[parse::Triple]>) -> Vec<Candidate> {
    row.unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(j, (logprob, id, text))| Candidate {
            token_id: id.unwrap_or_default(),
            logprob: logprob.unwrap_or(f64::NEG_INFINITY),
            rank: u32::try_from(j + 1).ok(),
            text: text.clone(),
        })
        .collect()
}

/// Prompt top candidates from the flat forms (`return_flat_raw_top_logprobs[_b64]`), one row per
/// prompt position (`len` in all; the `null_prefix` first rows are empty). `None` when absent.
fn flat_top(
    meta: &Map<String, Value>,
    len: usize,
) -> Result<Option<Vec<Vec<Candidate>>>, EngineError> {
    let shape = match meta.get("input_top_logprobs_shape") {
        Some(Value::Array(s)) => s,
        _ => return Ok(None),
    };
    let dim = |i: usize| {
        shape
            .get(i)
            .and_then(Value::as_u64)
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| internal("SGLang input_top_logprobs_shape is not [rows, k]"))
    };
    let (rows, k) = (dim(0)?, dim(1)?);
    let null_prefix = match meta.get("input_top_logprobs_null_prefix") {
        Some(v) => u32_of(v, "input_top_logprobs_null_prefix")? as usize,
        None => 0,
    };
    let (vals, ids): (Vec<f64>, Vec<u32>) = if let (Some(v), Some(i)) = (
        meta.get("input_top_logprobs_val_flat_b64")
            .and_then(Value::as_str),
        meta.get("input_top_logprobs_idx_flat_b64")
            .and_then(Value::as_str),
    ) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let bad = |e: base64::DecodeError| internal(format!("SGLang flat top logprobs: {e}"));
        let v = b64.decode(v).map_err(bad)?;
        let i = b64.decode(i).map_err(bad)?;
        (
            v.chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            i.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .map(|x| u32::try_from(x).unwrap_or(0))
                .collect(),
        )
    } else if let (Some(Value::Array(v)), Some(Value::Array(i))) = (
        meta.get("input_top_logprobs_val_flat"),
        meta.get("input_top_logprobs_idx_flat"),
    ) {
        (
            v.iter()
                .map(|x| x.as_f64().unwrap_or(f64::NEG_INFINITY))
                .collect(),
            i.iter()
                .map(|x| token_id(x, "input_top_logprobs_idx_flat"))
                .collect::<Result<_, _>>()?,
        )
    } else {
        return Ok(None);
    };
    let cells = rows.checked_mul(k);
    if cells != Some(vals.len()) || cells != Some(ids.len()) || null_prefix + rows != len {
        return Err(internal(format!(
            "SGLang flat top logprobs do not match their shape [{rows}, {k}] (null prefix {null_prefix}, {len} positions)"
        )));
    }
    let mut out = vec![Vec::new(); null_prefix];
    for r in 0..rows {
        let row = (0..k)
            .filter_map(|j| {
                let at = r * k + j;
                Some(Candidate {
                    token_id: *ids.get(at)?,
                    logprob: *vals.get(at)?,
                    rank: u32::try_from(j + 1).ok(),
                    text: None,
                })
            })
            .collect();
        out.push(row);
    }
    Ok(Some(out))
}

/// Remove the lists decoded into typed fields from the native frame.
fn strip_typed(frame: &mut Map<String, Value>) {
    frame.shift_remove("output_ids");
    if let Some(Value::Object(meta)) = frame.get_mut("meta_info") {
        // One pass without hashing (most frames carry none of them, or a few).
        meta.retain(|k, _| !TYPED_META_LISTS.contains(&k.as_str()));
    }
}

mod fast;
mod parse;
mod relay;

pub use relay::Relay;

#[cfg(test)]
mod tests;
