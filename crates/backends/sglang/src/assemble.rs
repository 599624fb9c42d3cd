//! The per-request [`Assembler`]: engine deltas → SGLang's unary body or SSE chunks
//! (`spec/sglang-native.md` §6–§9; `TokenizerManager._handle_batch_output` and
//! `add_logprob_to_meta_info`).
//!
//! Every token's data (id, logprob triple, top/selected candidates, mask) is rendered to JSON once,
//! into per-sub-request byte buffers. A cumulative SSE chunk (SGLang's default mode) copies those
//! buffers; an incremental chunk copies only the part added by the current delta. Each chunk is one
//! allocation, handed over as [`Bytes`] without another copy.
//!
//! `meta_info` keys come in the order `_handle_batch_output` builds them: `id`, `finish_reason`,
//! `prompt_tokens`, `weight_version`, `num_retractions`, the logprob lists (when
//! `return_logprob`), the sampling mask, `reasoning_tokens`, `completion_tokens`,
//! `cached_tokens`, pass-through keys, then on the finishing answer `routed_experts` (collected at
//! finish, as SGLang does) and `e2e_latency`; `response_sent_to_client_ts` goes on the first chunk
//! sent (streams) or the answer (unary).
//!
//! Text: an engine with a tokenizer puts `text` in its frames; the SGLang client turns it into a
//! delta (`engine_data.text`). The item then starts with `"text"`: everything so far (unary,
//! cumulative chunks) or this delta (incremental chunks), exactly the engine's strings
//! concatenated — genfront has no tokenizer and never re-derives text. An engine without one
//! (`--skip-tokenizer-init`, the mock) sends none, and the item has no `text` key.
//!
//! Native pass-through: when an output's `engine_data` is a native SGLang frame
//! (`{"meta_info": {...}, ...}`), its `weight_version`, `num_retractions` (or the older
//! `total_retractions`) and `reasoning_tokens` replace genfront's defaults (`"default"`, 0, 0),
//! and every other `meta_info` key genfront does not compute (`dp_rank`,
//! `cached_tokens_details`, `spec_*`, …) is passed through, the latest value winning. Its
//! `routed_experts` string (base64, shape unknown to genfront) is re-emitted as is when the request
//! asked for routed experts and no typed [`RoutedExperts`](genfront_protocol::RoutedExperts) rows
//! arrived: typed rows win, the native string is the fallback.
//!
//! **Relay** (issue 15): a request the format marked
//! [`OutputOptions::relay`](genfront_protocol::OutputOptions::relay) (one item, `n = 1`,
//! nothing genfront renders itself, unary or cumulative SSE) may be answered by the SGLang
//! engine client with the engine's own bytes ([`EngineOutput::native`]: the unary answer, or
//! each SSE frame). The assembler then sends those bytes with one edit, `meta_info.id` (the
//! private dispatch id) replaced by the client-visible rid, and renders nothing: every other
//! byte — key order, float spelling, `e2e_latency`, `response_sent_to_client_ts`, text, routed
//! experts, unknown keys — is the engine's. Outputs without native bytes (another engine kind,
//! the mocker, a P/D pair, an incremental-mode server) take the typed path above, for the same
//! request. In a relayed stream, the one typed output taken is a `Cancelled` finish without
//! tokens that the client made itself (SGLang sent no abort frame within the cancel grace): it
//! ends the stream without a frame of genfront's own.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use genfront_format::{Assembler, GenerateError, NativeResponse};
use genfront_protocol::{Candidate, EngineError, EngineOutput, ErrorKind, FinishReason, Usage};
use http::StatusCode;
use serde_json::Value;

use crate::flat::{self, FlatTop};
use crate::json::Obj;
use crate::render;

/// What the assembler needs to know about one engine request.
#[derive(Debug, Clone, Default)]
pub(crate) struct SubConfig {
    /// Client-visible id (`meta_info.id`).
    pub rid: String,
    /// Prompt length.
    pub prompt_len: u32,
    /// Prompt ids, kept only when needed (prompt logprobs or `return_prompt_token_ids`).
    pub prompt: Vec<u32>,
    /// `return_logprob`.
    pub return_logprob: bool,
    /// `top_logprobs_num > 0` (adds `*_top_logprobs`).
    pub top_logprobs: bool,
    /// `top_logprobs_num` (the row width of the flat prompt top-logprobs).
    pub top_logprobs_num: u32,
    /// The prompt top-logprob form (`return_flat_raw_top_logprobs[_b64]`).
    pub flat_top: FlatTop,
    /// `token_ids_logprob` set (adds `*_token_ids_logprobs`).
    pub token_ids_logprob: bool,
    /// `return_sampling_mask`.
    pub sampling_mask: bool,
    /// `return_routed_experts`.
    pub routed_experts: bool,
    /// `routed_experts_start_len`.
    pub routed_experts_start: u32,
    /// `return_prompt_token_ids`.
    pub return_prompt_token_ids: bool,
}

impl SubConfig {
    /// Whether the engine's own answer can be relayed for this sub (see the module docs): it asks
    /// for nothing genfront renders itself (`return_prompt_token_ids`, the flat prompt
    /// top-logprob forms).
    pub(crate) fn relayable(&self) -> bool {
        !self.return_prompt_token_ids && self.flat_top == FlatTop::Nested
    }
}

/// How the answer is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One JSON body at the end.
    Unary,
    /// SSE, each chunk carrying everything so far (SGLang's default).
    Cumulative,
    /// SSE, each chunk carrying only the new output items (`--incremental-streaming-output`).
    Incremental,
}

/// A list rendered as comma-separated JSON items, with an item count.
#[derive(Debug, Default)]
struct Rendered {
    items: Vec<u8>,
    count: usize,
}

/// Where the current delta starts in each output-side buffer (for incremental chunks).
#[derive(Debug, Default, Clone, Copy)]
struct Marks {
    ids: usize,
    lp: usize,
    top: usize,
    tid: usize,
    mask: usize,
    text: usize,
}

/// The part of a rendered list from `mark` on (all of it for `None`), without the separator that
/// joined it to the earlier items.
fn out(items: &[u8], mark: Option<usize>) -> &[u8] {
    let tail = items.get(mark.unwrap_or(0)..).unwrap_or_default();
    tail.strip_prefix(b",").unwrap_or(tail)
}

/// Accumulated state of one engine request.
#[derive(Debug, Default)]
struct Sub {
    cfg: SubConfig,
    output_ids: Rendered,
    out_lp: Rendered,
    out_top: Vec<u8>,
    out_tid: Vec<u8>,
    in_lp: Vec<u8>,
    in_top: Vec<u8>,
    in_tid: Vec<u8>,
    /// Raw prompt top candidates, kept only for the flat form.
    in_top_raw: Vec<Option<Vec<Candidate>>>,
    /// The flat prompt top-logprob fields (`None`: nested form).
    in_top_flat: Option<Vec<u8>>,
    mask: Rendered,
    mask_seen: bool,
    experts: Option<(u32, u32, Vec<i32>)>,
    /// The engine's native `routed_experts` string (from `engine_data`), latest wins.
    native_experts: Option<String>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    e2e_latency: f64,
    weight_version: Option<Value>,
    num_retractions: Option<Value>,
    reasoning_tokens: Option<Value>,
    extra_meta: Obj,
    /// The output text so far (engines with a tokenizer): the concatenated `text` deltas of the
    /// native frames. `None`: the engine sent no text (`--skip-tokenizer-init`), so the item has
    /// no `text` key.
    text: Option<String>,
    sent_first: bool,
    /// The engine's native answer, relayed as it is but for its ids (see the module docs).
    relayed: Option<genfront_protocol::NativeAnswer>,
    /// The engine's SSE frames are relayed for this sub (cumulative streams).
    relaying: bool,
    /// The client-visible rid as a JSON string, rendered at the first relayed frame (each
    /// frame's id is replaced by it).
    relay_id: Vec<u8>,
}

/// Keys of `meta_info` genfront computes itself; the engine's native frame cannot override them.
const OWNED_META_KEYS: &[&str] = &[
    "id",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "input_token_logprobs",
    "output_token_logprobs",
    "output_token_logprobs_length",
    "input_top_logprobs",
    "output_top_logprobs",
    "input_top_logprobs_val_flat",
    "input_top_logprobs_idx_flat",
    "input_top_logprobs_val_flat_b64",
    "input_top_logprobs_idx_flat_b64",
    "input_top_logprobs_val_flat_b64_dtype",
    "input_top_logprobs_idx_flat_b64_dtype",
    "input_top_logprobs_shape",
    "input_top_logprobs_null_prefix",
    "input_token_ids_logprobs",
    "output_token_ids_logprobs",
    "output_token_sampling_mask",
    "output_token_sampling_mask_length",
    "routed_experts",
    "routed_experts_start_len",
    "e2e_latency",
    "response_sent_to_client_ts",
];

/// Turns engine deltas into SGLang's native answer.
#[derive(Debug)]
pub(crate) struct SglangAssembler {
    mode: Mode,
    /// A batch or `n > 1` request: unary answers are arrays, stream chunks carry `"index"`.
    batch: bool,
    started: Instant,
    subs: Vec<Sub>,
    /// Size of the last chunk, to size the next one's buffer.
    last_len: usize,
}

fn contract(message: impl Into<String>) -> GenerateError {
    GenerateError::Engine(EngineError::internal(message))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl SglangAssembler {
    /// An assembler for `configs` (one per engine request, in `Prepared::subs` order).
    pub(crate) fn new(mode: Mode, batch: bool, configs: Vec<SubConfig>) -> Self {
        Self {
            mode,
            batch,
            started: Instant::now(),
            subs: configs
                .into_iter()
                .map(|cfg| Sub {
                    cfg,
                    ..Sub::default()
                })
                .collect(),
            last_len: 256,
        }
    }

    /// Write the item object of sub `i`. `marks` selects the incremental slices of the output-side
    /// lists (`None`: everything so far).
    fn write_item(&self, buf: &mut Vec<u8>, i: usize, marks: Option<Marks>, sent_ts: Option<f64>) {
        let Some(s) = self.subs.get(i) else {
            return;
        };
        let c = &s.cfg;
        buf.push(b'{');
        if let Some(text) = &s.text {
            // `out_dict = {"text", "output_ids", "meta_info"}`: cumulative text, or in
            // incremental mode `state.text[state.last_text_offset:]`.
            let part = marks.map_or(Some(text.as_str()), |m| text.get(m.text..));
            buf.extend_from_slice(b"\"text\":");
            render::json(buf, part.unwrap_or_default());
            buf.push(b',');
        }
        buf.extend_from_slice(b"\"output_ids\":");
        render::list(buf, out(&s.output_ids.items, marks.map(|m| m.ids)));
        buf.extend_from_slice(b",\"meta_info\":{\"id\":");
        render::json(buf, c.rid.as_str());
        buf.extend_from_slice(b",\"finish_reason\":");
        render::finish_reason(buf, s.finish.as_ref());
        let usage = s.usage.unwrap_or(Usage {
            prompt_tokens: c.prompt_len,
            completion_tokens: u32::try_from(s.output_ids.count).unwrap_or(u32::MAX),
            cached_tokens: 0,
        });
        buf.extend_from_slice(b",\"prompt_tokens\":");
        render::u32(buf, usage.prompt_tokens);
        buf.extend_from_slice(b",\"weight_version\":");
        match &s.weight_version {
            Some(v) => render::json(buf, v),
            None => buf.extend_from_slice(b"\"default\""),
        }
        buf.extend_from_slice(b",\"num_retractions\":");
        match &s.num_retractions {
            Some(v) => render::json(buf, v),
            None => buf.push(b'0'),
        }
        if c.return_logprob {
            buf.extend_from_slice(b",\"input_token_logprobs\":");
            render::list(buf, &s.in_lp);
            buf.extend_from_slice(b",\"output_token_logprobs\":");
            render::list(buf, out(&s.out_lp.items, marks.map(|m| m.lp)));
            buf.extend_from_slice(b",\"output_token_logprobs_length\":");
            render::json(buf, &s.out_lp.count);
            if c.top_logprobs {
                if let Some(flat) = &s.in_top_flat {
                    buf.push(b',');
                    buf.extend_from_slice(flat);
                } else {
                    buf.extend_from_slice(b",\"input_top_logprobs\":");
                    render::list(buf, &s.in_top);
                }
                buf.extend_from_slice(b",\"output_top_logprobs\":");
                render::list(buf, out(&s.out_top, marks.map(|m| m.top)));
            }
            if c.token_ids_logprob {
                buf.extend_from_slice(b",\"input_token_ids_logprobs\":");
                render::list(buf, &s.in_tid);
                buf.extend_from_slice(b",\"output_token_ids_logprobs\":");
                render::list(buf, out(&s.out_tid, marks.map(|m| m.tid)));
            }
        }
        if c.sampling_mask && s.mask_seen {
            // Sliced in incremental mode like the logprob lists (SGLang's
            // `_INCREMENTAL_STREAMING_META_INFO_KEYS`); the length stays cumulative.
            buf.extend_from_slice(b",\"output_token_sampling_mask\":");
            render::list(buf, out(&s.mask.items, marks.map(|m| m.mask)));
            buf.extend_from_slice(b",\"output_token_sampling_mask_length\":");
            render::json(buf, &s.mask.count);
        }
        buf.extend_from_slice(b",\"reasoning_tokens\":");
        match &s.reasoning_tokens {
            Some(v) => render::json(buf, v),
            None => buf.push(b'0'),
        }
        buf.extend_from_slice(b",\"completion_tokens\":");
        render::u32(buf, usage.completion_tokens);
        buf.extend_from_slice(b",\"cached_tokens\":");
        render::u32(buf, usage.cached_tokens);
        for (k, v) in &s.extra_meta {
            buf.push(b',');
            render::json(buf, k.as_str());
            buf.push(b':');
            render::json(buf, v);
        }
        if s.finish.is_some() {
            let experts_written = match (&s.experts, &s.native_experts) {
                _ if !c.routed_experts => false,
                (Some((_, _, ids)), _) => {
                    let mut raw = Vec::with_capacity(ids.len() * 4);
                    for id in ids {
                        raw.extend_from_slice(&id.to_le_bytes());
                    }
                    buf.extend_from_slice(b",\"routed_experts\":\"");
                    buf.extend_from_slice(
                        base64::engine::general_purpose::STANDARD
                            .encode(raw)
                            .as_bytes(),
                    );
                    buf.push(b'"');
                    true
                }
                (None, Some(native)) => {
                    buf.extend_from_slice(b",\"routed_experts\":");
                    render::json(buf, native.as_str());
                    true
                }
                (None, None) => false,
            };
            if experts_written && c.routed_experts_start > 0 {
                buf.extend_from_slice(b",\"routed_experts_start_len\":");
                render::u32(buf, c.routed_experts_start);
            }
            buf.extend_from_slice(b",\"e2e_latency\":");
            render::f64(buf, s.e2e_latency);
        }
        if let Some(ts) = sent_ts {
            buf.extend_from_slice(b",\"response_sent_to_client_ts\":");
            render::f64(buf, ts);
        }
        buf.push(b'}');
        if c.return_prompt_token_ids {
            buf.extend_from_slice(b",\"prompt_token_ids\":[");
            for (j, id) in c.prompt.iter().enumerate() {
                if j > 0 {
                    buf.push(b',');
                }
                render::u32(buf, *id);
            }
            buf.push(b']');
        }
        if self.batch && self.mode != Mode::Unary {
            buf.extend_from_slice(b",\"index\":");
            render::json(buf, &i);
        }
        buf.push(b'}');
    }

    /// Take sub `i`'s relayed native answer or frame. Unary: keep the bytes (the sub's one
    /// output) for [`Assembler::finish_unary`]. Cumulative SSE: push the frame with the rid
    /// edited as this delta's event. Either way the scanned finish and usage feed the
    /// completeness checks.
    ///
    /// # Errors
    /// A contract error for a batch, an incremental stream, a unary answer without a finish
    /// reason, a sub that already received typed tokens or finished, or an unknown sub; the
    /// engine's error finish.
    fn relay(
        &mut self,
        i: usize,
        output: EngineOutput,
        native: genfront_protocol::NativeAnswer,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError> {
        if self.mode == Mode::Incremental || self.batch {
            return Err(contract(
                "engine relayed a native answer for a request that is not a single unary or cumulative one",
            ));
        }
        if self.mode == Mode::Cumulative {
            let Some(s) = self.subs.get_mut(i) else {
                return Err(GenerateError::Internal(format!(
                    "engine output for unknown sub-request {i}"
                )));
            };
            if s.finish.is_some() || s.output_ids.count > 0 {
                return Err(contract(format!(
                    "engine relayed a frame for sub-request {i} after other outputs"
                )));
            }
            if let Some(FinishReason::Error { message }) = &output.finish_reason {
                return Err(contract(message.clone()));
            }
            s.relaying = true;
            s.usage = output.usage.or(s.usage);
            s.finish = output.finish_reason;
            if s.relay_id.is_empty() {
                render::json(&mut s.relay_id, s.cfg.rid.as_str());
            }
            events.push(Bytes::from(native.with_ids(&s.relay_id)));
            return Ok(());
        }
        let Some(s) = self.subs.get_mut(i) else {
            return Err(GenerateError::Internal(format!(
                "engine output for unknown sub-request {i}"
            )));
        };
        if s.finish.is_some() || s.output_ids.count > 0 {
            return Err(contract(format!(
                "engine relayed a native answer for sub-request {i} after other outputs"
            )));
        }
        let Some(finish) = output.finish_reason else {
            return Err(contract(
                "engine relayed a native answer without a finish reason",
            ));
        };
        if let FinishReason::Error { message } = &finish {
            return Err(contract(message.clone()));
        }
        s.usage = output.usage;
        s.finish = Some(finish);
        s.relayed = Some(native);
        Ok(())
    }

    /// Fold one delta into sub `i`'s state; returns where the delta starts in the output buffers.
    fn absorb(&mut self, i: usize, mut output: EngineOutput) -> Result<Marks, GenerateError> {
        let started = self.started;
        let Some(s) = self.subs.get_mut(i) else {
            return Err(GenerateError::Internal(format!(
                "engine output for unknown sub-request {i}"
            )));
        };
        if s.finish.is_some() {
            return Err(contract(format!(
                "engine output for sub-request {i} after its finish reason"
            )));
        }
        let c = &s.cfg;
        let marks = Marks {
            ids: s.output_ids.items.len(),
            lp: s.out_lp.items.len(),
            top: s.out_top.len(),
            tid: s.out_tid.len(),
            mask: s.mask.items.len(),
            text: s.text.as_ref().map_or(0, String::len),
        };
        // The engine's text delta (the client decoder makes every frame's `text` a delta).
        if let Some(Value::Object(frame)) = &mut output.engine_data
            && let Some(Value::String(delta)) = frame.shift_remove("text")
        {
            match &mut s.text {
                Some(text) => text.push_str(&delta),
                None => s.text = Some(delta),
            }
        }
        for id in &output.token_ids {
            render::sep(&mut s.output_ids.items);
            render::u32(&mut s.output_ids.items, *id);
        }
        s.output_ids.count += output.token_ids.len();
        if c.return_logprob && !output.token_ids.is_empty() {
            let lps = output.logprobs.as_deref().unwrap_or_default();
            if lps.len() != output.token_ids.len() {
                return Err(contract(format!(
                    "engine sent {} logprobs for {} tokens",
                    lps.len(),
                    output.token_ids.len()
                )));
            }
            for (lp, id) in lps.iter().zip(&output.token_ids) {
                render::position(
                    (&mut s.out_lp.items, &mut s.out_top, &mut s.out_tid),
                    Some(lp),
                    (*id, None),
                    c.top_logprobs,
                    c.token_ids_logprob,
                );
            }
            s.out_lp.count += lps.len();
        }
        if c.return_logprob
            && let Some(prompt) = &output.prompt_logprobs
        {
            // SGLang pads the first returned position with `None` whatever `logprob_start_len`
            // is (scheduler_output_processor_mixin.py `_process_input_token_logprobs`:
            // `[None] + input_token_logprobs[:-1]`, and `[None]` first for the top and
            // token-id lists), so position `start` never has a logprob even when `start > 0`.
            for (j, entry) in prompt.entries.iter().enumerate() {
                let pos = (prompt.start as usize).saturating_add(j);
                // The id of a position without a logprob: the engine's own for the padded first
                // one (a text prompt's ids are known only to the engine), else the prompt's.
                let fallback = match (entry, j) {
                    (Some(e), _) => Some(e.token_id),
                    (None, 0) => prompt.first_token_id,
                    (None, _) => None,
                }
                .or_else(|| c.prompt.get(pos).copied())
                .unwrap_or_default();
                // The padded first position keeps the token's decoded text when the entry
                // carries one (SGLang decodes `input_token_logprobs_idx`, which is not padded).
                let text = match entry {
                    Some(e) => e.text.as_deref(),
                    None if j == 0 => prompt.first_text.as_deref(),
                    None => None,
                };
                render::position(
                    (&mut s.in_lp, &mut s.in_top, &mut s.in_tid),
                    entry.as_ref().filter(|_| j > 0),
                    (fallback, text),
                    c.top_logprobs,
                    c.token_ids_logprob,
                );
            }
        }
        if c.return_logprob
            && c.top_logprobs
            && c.flat_top != FlatTop::Nested
            && (output.prompt_logprobs.is_some() || s.in_top_flat.is_none())
        {
            if let Some(prompt) = &output.prompt_logprobs {
                s.in_top_raw.extend(
                    prompt
                        .entries
                        .iter()
                        .enumerate()
                        .map(|(j, e)| e.as_ref().filter(|_| j > 0).map(|e| e.top.clone())),
                );
            }
            s.in_top_flat = flat::fields(&s.in_top_raw, c.top_logprobs_num, c.flat_top);
        }
        if c.sampling_mask
            && let Some(masks) = &output.sampling_mask
        {
            s.mask_seen = true;
            for set in masks {
                render::sep(&mut s.mask.items);
                render::json(&mut s.mask.items, set);
            }
            s.mask.count += masks.len();
        }
        if c.routed_experts
            && output.routed_experts.is_none()
            && let Some(Value::Object(frame)) = &mut output.engine_data
            && let Some(Value::Object(meta)) = frame.get_mut("meta_info")
            && let Some(Value::String(native)) = meta.shift_remove("routed_experts")
        {
            s.native_experts = Some(native);
        }
        if c.routed_experts
            && let Some(re) = output.routed_experts
        {
            match &mut s.experts {
                Some((_, _, ids)) => ids.extend_from_slice(&re.ids),
                None => s.experts = Some((re.num_layers, re.top_k, re.ids)),
            }
        }
        if let Some(usage) = output.usage {
            s.usage = Some(usage);
        }
        if let Some(Value::Object(frame)) = &output.engine_data
            && let Some(Value::Object(meta)) = frame.get("meta_info")
        {
            // The values rarely change from frame to frame: clone only what did.
            let keep = |slot: &mut Option<Value>, v: &Value| {
                if slot.as_ref() != Some(v) {
                    *slot = Some(v.clone());
                }
            };
            for (k, v) in meta {
                match k.as_str() {
                    "weight_version" => keep(&mut s.weight_version, v),
                    "num_retractions" | "total_retractions" => keep(&mut s.num_retractions, v),
                    "reasoning_tokens" => keep(&mut s.reasoning_tokens, v),
                    k if OWNED_META_KEYS.contains(&k) => {}
                    _ => match s.extra_meta.get_mut(k) {
                        Some(old) if old == v => {}
                        Some(old) => *old = v.clone(),
                        None => {
                            s.extra_meta.insert(k.to_owned(), v.clone());
                        }
                    },
                }
            }
        }
        if let Some(reason) = output.finish_reason {
            s.e2e_latency = started.elapsed().as_secs_f64();
            s.finish = Some(reason);
        }
        Ok(marks)
    }

    /// The failure of a sub that finished with an engine error, if any.
    fn failed(&self) -> Option<GenerateError> {
        self.subs.iter().find_map(|s| match &s.finish {
            Some(FinishReason::Error { message }) => Some(contract(message.clone())),
            _ => None,
        })
    }

    fn check_complete(&self) -> Result<(), GenerateError> {
        if let Some(e) = self.failed() {
            return Err(e);
        }
        if self.subs.iter().any(|s| s.finish.is_none()) {
            return Err(GenerateError::Engine(EngineError::new(
                ErrorKind::StreamIncomplete,
                "engine stream ended before a finish reason",
            )));
        }
        Ok(())
    }
}

impl Assembler for SglangAssembler {
    fn on_output(
        &mut self,
        sub: usize,
        output: EngineOutput,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError> {
        let mut output = output;
        if let Some(native) = output.native.take() {
            return self.relay(sub, output, native, events);
        }
        if let Some(s) = self.subs.get_mut(sub)
            && s.relaying
        {
            // A relayed stream the client ended itself after a cancel (no abort frame in
            // time): the finish is recorded, no frame of genfront's is made up.
            return match output.finish_reason {
                Some(reason) if output.token_ids.is_empty() && s.finish.is_none() => {
                    if let FinishReason::Error { message } = &reason {
                        return Err(contract(message.clone()));
                    }
                    s.usage = output.usage.or(s.usage);
                    s.finish = Some(reason);
                    Ok(())
                }
                _ => Err(contract(format!(
                    "engine sent a typed output for sub-request {sub} of a relayed stream"
                ))),
            };
        }
        let marks = self.absorb(sub, output)?;
        if let Some(Some(FinishReason::Error { message })) = self.subs.get(sub).map(|s| &s.finish) {
            return Err(contract(message.clone()));
        }
        if self.mode == Mode::Unary {
            return Ok(());
        }
        let sent_ts = match self.subs.get_mut(sub) {
            Some(s) if !s.sent_first => {
                s.sent_first = true;
                Some(unix_now())
            }
            _ => None,
        };
        let marks = (self.mode == Mode::Incremental).then_some(marks);
        let mut buf = Vec::with_capacity(self.last_len + 64);
        self.write_item(&mut buf, sub, marks, sent_ts);
        self.last_len = buf.len();
        events.push(Bytes::from(buf));
        Ok(())
    }

    fn finish_stream(&mut self, _events: &mut Vec<Bytes>) -> Result<(), GenerateError> {
        self.check_complete()
    }

    fn finish_unary(self: Box<Self>) -> Result<NativeResponse, GenerateError> {
        self.check_complete()?;
        if !self.batch
            && let Some(s) = self.subs.first()
            && let Some(native) = &s.relayed
        {
            let mut id = Vec::with_capacity(s.cfg.rid.len() + 2);
            render::json(&mut id, s.cfg.rid.as_str());
            return Ok(NativeResponse::json(
                StatusCode::OK,
                Bytes::from(native.with_ids(&id)),
            ));
        }
        let ts = unix_now();
        let mut buf = Vec::with_capacity(self.last_len.max(256));
        if self.batch {
            buf.push(b'[');
            for i in 0..self.subs.len() {
                if i > 0 {
                    buf.push(b',');
                }
                self.write_item(&mut buf, i, None, Some(ts));
            }
            buf.push(b']');
        } else {
            self.write_item(&mut buf, 0, None, Some(ts));
        }
        Ok(NativeResponse::json(StatusCode::OK, Bytes::from(buf)))
    }
}

#[cfg(test)]
mod tests {
    use genfront_protocol::{PromptLogprobs, TokenLogprob};
    use serde_json::json;

    use super::*;

    fn cand(id: u32, lp: f64, text: &str) -> Candidate {
        Candidate {
            token_id: id,
            logprob: lp,
            rank: None,
            text: Some(text.to_owned()),
        }
    }

    fn entry(id: u32, lp: f64, text: &str) -> TokenLogprob {
        TokenLogprob {
            token_id: id,
            logprob: lp,
            rank: Some(1),
            top: vec![cand(id, lp, text), cand(9, -2.5, " j")],
            selected: vec![cand(8, -4.0, " i")],
            text: Some(text.to_owned()),
        }
    }

    fn outputs() -> Vec<EngineOutput> {
        let first = EngineOutput {
            token_ids: vec![110_837],
            logprobs: Some(vec![entry(110_837, -0.442, " ghyz")]),
            prompt_logprobs: Some(PromptLogprobs {
                start: 0,
                entries: vec![None, Some(entry(6, -2.0, " g"))],
                first_text: Some(" f".to_owned()),
                first_token_id: None,
            }),
            ..EngineOutput::default()
        };
        let second = EngineOutput {
            token_ids: vec![7],
            logprobs: Some(vec![entry(7, -0.25, "\u{e9}")]),
            finish_reason: Some(FinishReason::Length { length: 2 }),
            ..EngineOutput::default()
        };
        vec![first, second]
    }

    fn assembler(mode: Mode) -> SglangAssembler {
        let cfg = SubConfig {
            rid: "r".to_owned(),
            prompt_len: 2,
            prompt: vec![5, 6],
            return_logprob: true,
            top_logprobs: true,
            top_logprobs_num: 2,
            token_ids_logprob: true,
            ..SubConfig::default()
        };
        SglangAssembler::new(mode, false, vec![cfg])
    }

    fn meta(chunk: &[u8]) -> Value {
        serde_json::from_slice::<Value>(chunk).unwrap_or_default()["meta_info"].clone()
    }

    /// `return_text_in_logprobs`: the engine's decoded token text fills the third slot of every
    /// triple, output and prompt side, in the unary answer and both SSE modes; the padded first
    /// prompt position keeps its token's text (`first_text`).
    #[test]
    fn decoded_text_in_every_triple() {
        let mut a = Box::new(assembler(Mode::Unary));
        for o in outputs() {
            a.on_output(0, o, &mut Vec::new())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let body = a.finish_unary().unwrap_or_else(|e| panic!("{e}"));
        let m = meta(&body.body);
        assert_eq!(
            m["output_token_logprobs"],
            json!([[-0.442, 110_837, " ghyz"], [-0.25, 7, "\u{e9}"]])
        );
        assert_eq!(
            m["output_top_logprobs"][0],
            json!([[-0.442, 110_837, " ghyz"], [-2.5, 9, " j"]])
        );
        assert_eq!(m["output_token_ids_logprobs"][1], json!([[-4.0, 8, " i"]]));
        assert_eq!(
            m["input_token_logprobs"],
            json!([[null, 5, " f"], [-2.0, 6, " g"]])
        );
        assert_eq!(m["input_top_logprobs"][1][0], json!([-2.0, 6, " g"]));
        assert_eq!(m["input_token_ids_logprobs"][1], json!([[-4.0, 8, " i"]]));

        for mode in [Mode::Cumulative, Mode::Incremental] {
            let mut a = assembler(mode);
            let mut events = Vec::new();
            for o in outputs() {
                a.on_output(0, o, &mut events)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            let last = meta(&events[1]);
            let want = if mode == Mode::Cumulative {
                json!([[-0.442, 110_837, " ghyz"], [-0.25, 7, "\u{e9}"]])
            } else {
                json!([[-0.25, 7, "\u{e9}"]])
            };
            assert_eq!(last["output_token_logprobs"], want, "{mode:?}");
            assert_eq!(
                meta(&events[0])["input_token_logprobs"][1],
                json!([-2.0, 6, " g"])
            );
        }
    }
}
