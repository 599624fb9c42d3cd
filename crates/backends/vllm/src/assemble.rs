//! Phase *assemble*: engine deltas → vLLM 0.33.0 `GenerateTokensResponse` (unary) or
//! `GenerateTokensStreamResponse` SSE chunks (`token_in_token_out/serving.py`, spec §6–§7).
//!
//! Field order follows the pydantic models (`model_dump()` puts base-class fields first), and
//! `null`s are present where vLLM writes them: every field in the unary body; in stream chunks
//! everything except `prompt_token_ids` / `mm_placeholders` / `metrics` when null; the final
//! usage chunk with `exclude_none`.
//!
//! Native pass-through: when an output's `engine_data` is a vLLM frame (what genfront's vLLM
//! engine client puts there: the stream chunk, or the unary body with that one choice), its
//! `ec_transfer_params`, `prompt_token_id_logprobs` and `metrics` (top level) and the choice's
//! `weight_versions` are passed through, and a choice vLLM ended with `"repetition"` (decoded as
//! a stop on text) is rendered with `finish_reason: "repetition"` again. An output whose
//! routed experts came with vLLM's own base64 `.npy` text is rendered with that text (so vLLM's
//! dtype, e.g. `uint8`, survives) instead of a re-encoded `<i4`. A flat
//! `{"weight_versions": …}` object is accepted too.
//!
//! **Relay** (issue 15): a request the format marked
//! [`OutputOptions::relay`](genfront_protocol::OutputOptions::relay) (one sample, nothing
//! genfront renders itself) may be answered by genfront's vLLM engine client with vLLM's own
//! bytes ([`EngineOutput::native`]): the unary body (the choice's one output), or each SSE
//! chunk of a stream vLLM wrote for the client's own `stream_options` (the usage-only chunk
//! included). The assembler then sends those bytes with one edit, `request_id` (the engine's
//! `generate-tokens-<dispatch id>`) replaced by the client-visible id, and renders nothing:
//! every other byte — key order, float spelling, `created`, `model`, usage, logprobs, routed
//! experts, `metrics`, unknown keys — is vLLM's. Outputs without native bytes (another engine
//! kind, the mocker, a P/D pair) take the typed path above, for the same request; in a relayed
//! stream the one typed output taken is the token-less `Cancelled` finish the engine client
//! makes itself when vLLM sent no `"abort"` chunk within the cancel grace, which ends the stream
//! without a chunk of genfront's own.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use genfront_format::{Assembler, GenerateError, NativeResponse};
use genfront_protocol::{
    EngineError, EngineOutput, ErrorKind, FinishReason, PromptLogprobs, StopMatch, TokenLogprob,
};
use http::StatusCode;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::logprobs::{LogprobMode, Logprobs, Positions, PromptLogprobsJson, TextLogprobs};
use crate::npy::routed_experts_b64;

/// What a response needs to know about its request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResponseConfig {
    /// `generate-tokens-<id>`.
    pub request_id: String,
    /// Served model or LoRA name.
    pub model: String,
    /// Number of choices.
    pub n: u32,
    /// SSE or one JSON body.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`.
    pub continuous_usage: bool,
    /// Output logprobs, when requested.
    pub logprobs: Option<LogprobMode>,
    /// Prompt logprobs top-k, when requested.
    pub prompt_logprobs: Option<usize>,
    /// Prompt length in tokens.
    pub prompt_len: u32,
    /// `return_token_ids`: the prompt ids and the `mm_placeholders` to echo.
    pub return_token_ids: Option<(Vec<u32>, Option<Value>)>,
    /// Emulate `--enable-prompt-tokens-details` (report `cached_tokens`).
    pub prompt_tokens_details: bool,
    /// `output_mode="text"`: `GenerateTextResponse` / `GenerateTextStreamResponse` shapes (a
    /// per-choice `text`, decoded logprobs, `output_mode: "text"`).
    pub text_mode: bool,
}

#[derive(Debug, Default)]
struct Choice {
    token_ids: Vec<u32>,
    logprobs: Vec<Option<TokenLogprob>>,
    routed: Option<(u32, u32, Vec<i32>)>,
    /// vLLM's own `.npy` text for `routed` (kept so its dtype survives), when it came in one
    /// piece.
    routed_native: Option<String>,
    mask: Option<Vec<Vec<u32>>>,
    /// The engine's output text so far (text mode): its deltas concatenated.
    text: String,
    weight_versions: Option<Value>,
    finish: Option<FinishReason>,
    /// vLLM ended the choice with `"repetition"`.
    repetition: bool,
    completion_tokens: u32,
}

/// The vLLM [`Assembler`].
#[derive(Debug)]
pub(crate) struct VllmAssembler {
    cfg: ResponseConfig,
    created: u64,
    choices: Vec<Choice>,
    prompt_logprobs: Option<PromptLogprobs>,
    kv_transfer_params: Option<Value>,
    ec_transfer_params: Option<Value>,
    prompt_token_id_logprobs: Option<Value>,
    metrics: Option<Value>,
    cached_tokens: Option<u32>,
    prompt_ids_sent: bool,
    /// vLLM's own unary answer, relayed as it is but for its `request_id` (module docs).
    relayed: Option<genfront_protocol::NativeAnswer>,
    /// The stream's chunks are vLLM's own, relayed (module docs).
    relaying: bool,
    /// The client's `request_id` as a JSON string, made once for the relayed chunks.
    relay_id: Option<Vec<u8>>,
}

impl VllmAssembler {
    pub(crate) fn new(cfg: ResponseConfig) -> Self {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let choices = (0..cfg.n).map(|_| Choice::default()).collect();
        Self {
            cfg,
            created,
            choices,
            prompt_logprobs: None,
            kv_transfer_params: None,
            ec_transfer_params: None,
            prompt_token_id_logprobs: None,
            metrics: None,
            cached_tokens: None,
            prompt_ids_sent: false,
            relayed: None,
            relaying: false,
            relay_id: None,
        }
    }

    fn usage(&self, completion_tokens: u32, details: bool, exclude_none: bool) -> UsageJson {
        UsageJson {
            prompt_tokens: self.cfg.prompt_len,
            completion_tokens,
            cached_tokens: self
                .cached_tokens
                .filter(|_| details && self.cfg.prompt_tokens_details),
            exclude_none,
        }
    }

    fn stream_chunk(
        &mut self,
        out: &EngineOutput,
        native: &NativeFrame,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError> {
        let index = out.index as usize;
        let completion = self.choices.get(index).map_or(0, |c| c.completion_tokens);
        let usage = self
            .cfg
            .continuous_usage
            .then(|| self.usage(completion, false, false));
        let (prompt_ids, placeholders) = match (&self.cfg.return_token_ids, self.prompt_ids_sent) {
            (Some((ids, mm)), false) => (Some(ids.as_slice()), mm.as_ref()),
            _ => (None, None),
        };
        let (finish_reason, stop_reason) =
            finish_fields(out.finish_reason.as_ref(), native.repetition);
        let weight_versions = out
            .finish_reason
            .as_ref()
            .and_then(|_| self.choices.get(index))
            .and_then(|c| c.weight_versions.as_ref());
        let chunk = StreamChunk {
            request_id: &self.cfg.request_id,
            usage,
            prompt_token_ids: prompt_ids,
            mm_placeholders: placeholders,
            output_mode: self.output_mode(),
            choices: [ChoiceJson {
                index: out.index,
                finish_reason,
                stop_reason,
                token_ids: &out.token_ids,
                // Held until the choice's final chunk (see `hold_routed`).
                routed_experts: out
                    .finish_reason
                    .as_ref()
                    .and_then(|_| self.choices.get(index))
                    .and_then(routed_b64),
                sampling_mask: out.sampling_mask.as_deref(),
                weight_versions,
                text: self
                    .cfg
                    .text_mode
                    .then(|| native.text.as_deref().unwrap_or_default()),
                logprobs: self.cfg.logprobs.map(|mode| {
                    ChoiceLogprobs::new(
                        Logprobs {
                            tokens: &out.token_ids,
                            positions: Positions::Delta(out.logprobs.as_deref()),
                            mode,
                        },
                        self.cfg.text_mode,
                    )
                }),
            }],
        };
        events.push(to_bytes(&chunk)?);
        self.prompt_ids_sent = true;
        Ok(())
    }

    /// `output_mode` of every chunk and of the unary body.
    fn output_mode(&self) -> &'static str {
        if self.cfg.text_mode { "text" } else { "tokens" }
    }

    fn gather(
        &mut self,
        out: EngineOutput,
        native_routed: Option<String>,
        text: Option<String>,
    ) -> Result<(), GenerateError> {
        let want_logprobs = self.cfg.logprobs.is_some();
        let Some(choice) = self.choices.get_mut(out.index as usize) else {
            return Err(contract("output for an unknown choice"));
        };
        if let Some(t) = text {
            choice.text.push_str(&t);
        }
        let n = out.token_ids.len();
        if want_logprobs {
            let mut given = out.logprobs.unwrap_or_default().into_iter();
            choice.logprobs.extend((0..n).map(|_| given.next()));
        }
        if choice.token_ids.is_empty() {
            choice.token_ids = out.token_ids;
        } else {
            choice.token_ids.extend_from_slice(&out.token_ids);
        }
        hold_routed(choice, out.routed_experts, native_routed)?;
        if let Some(mask) = out.sampling_mask {
            choice.mask.get_or_insert_with(Vec::new).extend(mask);
        }
        Ok(())
    }
}

/// What an output's native vLLM frame (`engine_data`) contributes to its own chunk.
#[derive(Debug, Default)]
struct NativeFrame {
    /// vLLM ended the choice with `"repetition"`.
    repetition: bool,
    /// vLLM's base64 `.npy` for this output's routed experts.
    routed_experts: Option<String>,
    /// The output's text delta: the vLLM choice's `text` (text mode), or `engine_data.text`
    /// (the delta an SGLang engine client puts there).
    text: Option<String>,
}

impl VllmAssembler {
    /// Take the pass-through fields from `out.engine_data` (see the module docs).
    fn native_frame(&mut self, index: usize, out: &mut EngineOutput) -> NativeFrame {
        let Some(Value::Object(mut data)) = out.engine_data.take() else {
            return NativeFrame::default();
        };
        if let Some(ec) = data.remove("ec_transfer_params").filter(|v| !v.is_null()) {
            self.ec_transfer_params = Some(ec);
        }
        if let Some(p) = data
            .remove("prompt_token_id_logprobs")
            .filter(|v| !v.is_null())
        {
            self.prompt_token_id_logprobs = Some(p);
        }
        if let Some(m) = data.remove("metrics").filter(|v| !v.is_null()) {
            self.metrics = Some(m);
        }
        let mut choice = match data.remove("choices") {
            Some(Value::Array(mut choices)) if choices.len() == 1 => match choices.pop() {
                Some(Value::Object(c)) => c,
                _ => serde_json::Map::new(),
            },
            _ => serde_json::Map::new(),
        };
        let repetition = choice.get("finish_reason").and_then(Value::as_str) == Some("repetition")
            && matches!(
                out.finish_reason,
                Some(FinishReason::Stop {
                    matched: StopMatch::Text(_)
                })
            );
        let text = match choice.remove("text").or_else(|| data.remove("text")) {
            Some(Value::String(t)) => Some(t),
            _ => None,
        };
        let routed_experts = match choice.remove("routed_experts") {
            Some(Value::String(text)) if out.routed_experts.is_some() => Some(text),
            _ => None,
        };
        let wv = data
            .remove("weight_versions")
            .or_else(|| choice.remove("weight_versions"));
        if let Some(wv) = wv.filter(|v| !v.is_null())
            && let Some(c) = self.choices.get_mut(index)
        {
            c.weight_versions = Some(wv);
        }
        NativeFrame {
            repetition,
            routed_experts,
            text,
        }
    }
}

impl VllmAssembler {
    /// Take vLLM's relayed output (module docs). Unary: keep the answer's bytes (the choice's
    /// one output) for [`Assembler::finish_unary`]. Stream: push the chunk with `request_id`
    /// edited as this output's event (a usage-only chunk too). Either way the scanned finish
    /// and token count feed the completeness checks.
    ///
    /// # Errors
    /// A contract error for a request with more than one choice, another choice index, a unary
    /// answer without a finish or after other outputs, a chunk after typed outputs or after the
    /// choice's finish (other than the usage-only chunk); the engine's error finish as vLLM's
    /// 500 (as on the typed path).
    fn relay(
        &mut self,
        out: EngineOutput,
        native: genfront_protocol::NativeAnswer,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError> {
        if self.cfg.n != 1 || out.index != 0 {
            return Err(contract(
                "a relayed answer for a request that is not a one-choice one",
            ));
        }
        if let Some(FinishReason::Error { message }) = out.finish_reason {
            return Err(GenerateError::Engine(EngineError::internal(message)));
        }
        let streaming = self.cfg.stream;
        let relaying = self.relaying;
        let unary_relayed = self.relayed.is_some();
        let Some(choice) = self.choices.first_mut() else {
            return Err(contract("choice index out of range"));
        };
        let added = u32::try_from(out.token_ids.len()).unwrap_or(u32::MAX);
        if streaming {
            let typed_before =
                !relaying && (choice.finish.is_some() || choice.completion_tokens > 0);
            let after_finish =
                choice.finish.is_some() && (added > 0 || out.finish_reason.is_some());
            if typed_before || after_finish {
                return Err(contract("a relayed chunk after other outputs"));
            }
            self.relaying = true;
            choice.completion_tokens = choice.completion_tokens.saturating_add(added);
            if out.finish_reason.is_some() {
                choice.finish = out.finish_reason;
            }
            let id = match &self.relay_id {
                Some(id) => id,
                None => self.relay_id.insert(
                    serde_json::to_vec(self.cfg.request_id.as_str())
                        .map_err(|e| GenerateError::Internal(format!("serialising an id: {e}")))?,
                ),
            };
            events.push(Bytes::from(native.with_ids(id)));
            return Ok(());
        }
        if choice.finish.is_some() || !choice.token_ids.is_empty() || unary_relayed {
            return Err(contract("a relayed answer after other outputs"));
        }
        let Some(finish) = out.finish_reason else {
            return Err(contract("a relayed answer without a finish reason"));
        };
        choice.completion_tokens = added;
        choice.finish = Some(finish);
        self.relayed = Some(native);
        Ok(())
    }

    /// A typed output in a relayed stream: only the token-less `Cancelled` finish the engine
    /// client makes itself when vLLM sent no `"abort"` chunk within the cancel grace, recorded
    /// without a chunk of genfront's own.
    ///
    /// # Errors
    /// vLLM's 500 for an error finish (a chunk with `finish_reason: "error"`, decoded typed, as
    /// on the typed path); a contract error for any other output.
    fn relayed_stream_typed(&mut self, out: &EngineOutput) -> Result<(), GenerateError> {
        if let Some(FinishReason::Error { message }) = &out.finish_reason {
            return Err(GenerateError::Engine(EngineError::internal(
                message.clone(),
            )));
        }
        match (self.choices.get_mut(out.index as usize), &out.finish_reason) {
            (Some(c), Some(f @ FinishReason::Cancelled { .. }))
                if out.token_ids.is_empty() && c.finish.is_none() =>
            {
                c.finish = Some(f.clone());
                Ok(())
            }
            _ => Err(contract("a typed output in a relayed stream")),
        }
    }
}

fn contract(what: &str) -> GenerateError {
    GenerateError::Internal(format!("engine output breaks the contract: {what}"))
}

fn to_bytes<T: Serialize>(value: &T) -> Result<Bytes, GenerateError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| GenerateError::Internal(format!("serialising a response: {e}")))
}

/// vLLM's `finish_reason` and `stop_reason` for an engine finish.
///
/// `repetition`: vLLM itself ended the choice with `"repetition"` (genfront's engine client decodes
/// it as a stop on the text of its `stop_reason`), rendered back as `"repetition"`.
fn finish_fields(
    finish: Option<&FinishReason>,
    repetition: bool,
) -> (Option<&'static str>, Option<StopReason<'_>>) {
    match finish {
        Some(FinishReason::Stop {
            matched: StopMatch::Text(s),
        }) if repetition => (Some("repetition"), Some(StopReason::Text(s))),
        None => (None, None),
        Some(FinishReason::Eos { .. }) => (Some("stop"), None),
        Some(FinishReason::Stop { matched }) => (
            Some("stop"),
            Some(match matched {
                StopMatch::TokenId(t) => StopReason::Id(*t),
                StopMatch::Text(s) => StopReason::Text(s),
            }),
        ),
        Some(FinishReason::Length { .. }) => (Some("length"), None),
        Some(FinishReason::Cancelled { .. }) => (Some("abort"), None),
        Some(FinishReason::Error { .. }) => (Some("error"), None),
    }
}

impl Assembler for VllmAssembler {
    fn on_output(
        &mut self,
        sub: usize,
        mut out: EngineOutput,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError> {
        if sub != 0 {
            return Err(contract("output for an unknown sub-request"));
        }
        if let Some(native) = out.native.take() {
            return self.relay(out, native, events);
        }
        if self.relaying {
            return self.relayed_stream_typed(&out);
        }
        let index = out.index as usize;
        match self.choices.get(index) {
            None => return Err(contract("choice index out of range")),
            Some(c) if c.finish.is_some() => {
                return Err(contract("output after the choice finished"));
            }
            Some(_) => {}
        }
        if let Some(FinishReason::Error { message }) = &out.finish_reason {
            // `_raise_if_error`: a `GenerationError("Internal server error")`, HTTP 500.
            return Err(GenerateError::Engine(EngineError::internal(
                message.clone(),
            )));
        }
        if let Some(h) = out.handoff.take() {
            self.kv_transfer_params = Some(h);
        }
        let native = self.native_frame(index, &mut out);
        if let Some(u) = out.usage {
            self.cached_tokens = Some(self.cached_tokens.unwrap_or(0).max(u.cached_tokens));
        }
        if let Some(p) = out.prompt_logprobs.take()
            && self.prompt_logprobs.is_none()
        {
            self.prompt_logprobs = Some(p);
        }
        let added = u32::try_from(out.token_ids.len()).unwrap_or(u32::MAX);
        if let Some(c) = self.choices.get_mut(index) {
            c.completion_tokens = c.completion_tokens.saturating_add(added);
        }
        let finish = out.finish_reason.clone();
        if self.cfg.stream {
            if let Some(c) = self.choices.get_mut(index) {
                hold_routed(c, out.routed_experts.take(), native.routed_experts.clone())?;
            }
            // "Terminal outputs are always emitted"; other deltas without tokens are skipped,
            // except, in text mode, text held back for stop-string matching, which can arrive
            // without token ids.
            let held_text =
                self.cfg.text_mode && native.text.as_deref().is_some_and(|t| !t.is_empty());
            if !out.token_ids.is_empty() || finish.is_some() || held_text {
                self.stream_chunk(&out, &native, events)?;
            }
        } else {
            self.gather(out, native.routed_experts, native.text)?;
        }
        if let Some(c) = self.choices.get_mut(index) {
            c.finish = finish;
            c.repetition = native.repetition;
        }
        Ok(())
    }

    fn finish_stream(&mut self, events: &mut Vec<Bytes>) -> Result<(), GenerateError> {
        incomplete(&self.choices)?;
        if self.relaying {
            // vLLM's own usage chunk was relayed when the client asked for it.
            return Ok(());
        }
        if self.cfg.include_usage {
            let total = self
                .choices
                .iter()
                .map(|c| c.completion_tokens)
                .fold(0u32, u32::saturating_add);
            let chunk = UsageChunk {
                request_id: &self.cfg.request_id,
                usage: self.usage(total, true, true),
                output_mode: self.output_mode(),
                choices: [(); 0],
            };
            events.push(to_bytes(&chunk)?);
        }
        Ok(())
    }

    fn finish_unary(self: Box<Self>) -> Result<NativeResponse, GenerateError> {
        incomplete(&self.choices)?;
        if let Some(native) = &self.relayed {
            let id = serde_json::to_vec(self.cfg.request_id.as_str())
                .map_err(|e| GenerateError::Internal(format!("serialising an id: {e}")))?;
            return Ok(NativeResponse::json(
                StatusCode::OK,
                Bytes::from(native.with_ids(&id)),
            ));
        }
        let total = self
            .choices
            .iter()
            .map(|c| c.completion_tokens)
            .fold(0u32, u32::saturating_add);
        let choices: Vec<ChoiceJson<'_>> = self
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (finish_reason, stop_reason) = finish_fields(c.finish.as_ref(), c.repetition);
                ChoiceJson {
                    index: i as u32,
                    finish_reason: finish_reason.or(Some("stop")),
                    stop_reason,
                    token_ids: &c.token_ids,
                    routed_experts: routed_b64(c),
                    sampling_mask: c.mask.as_deref(),
                    weight_versions: c.weight_versions.as_ref(),
                    text: self.cfg.text_mode.then_some(c.text.as_str()),
                    logprobs: self.cfg.logprobs.map(|mode| {
                        ChoiceLogprobs::new(
                            Logprobs {
                                tokens: &c.token_ids,
                                positions: Positions::Gathered(&c.logprobs),
                                mode,
                            },
                            self.cfg.text_mode,
                        )
                    }),
                }
            })
            .collect();
        let (prompt_ids, placeholders) = match &self.cfg.return_token_ids {
            Some((ids, mm)) => (Some(ids.as_slice()), mm.as_ref()),
            None => (None, None),
        };
        let body = UnaryResponse {
            request_id: &self.cfg.request_id,
            model: &self.cfg.model,
            created: self.created,
            usage: self.usage(total, true, false),
            prompt_logprobs: self.cfg.prompt_logprobs.map(|k| PromptLogprobsJson {
                prompt_len: self.cfg.prompt_len as usize,
                data: self.prompt_logprobs.as_ref(),
                k,
            }),
            prompt_token_id_logprobs: self.prompt_token_id_logprobs.as_ref(),
            prompt_token_ids: prompt_ids,
            mm_placeholders: placeholders,
            metrics: self.metrics.as_ref(),
            kv_transfer_params: self.kv_transfer_params.as_ref(),
            ec_transfer_params: self.ec_transfer_params.as_ref(),
            output_mode: self.output_mode(),
            choices,
        };
        Ok(NativeResponse::json(StatusCode::OK, to_bytes(&body)?))
    }
}

/// Add an output's routed-expert rows to its choice: vLLM reports a choice's routed experts
/// once, as one `(num_tokens - 1, layers, top_k)` blob covering the whole sequence (the
/// scheduler attaches them when the request stops, so a stream carries them on the choice's
/// final chunk only), so rows are held per choice, whatever segments the engine delivered them
/// in, and rendered when the choice ends.
fn hold_routed(
    choice: &mut Choice,
    rows: Option<genfront_protocol::RoutedExperts>,
    native_routed: Option<String>,
) -> Result<(), GenerateError> {
    let Some(r) = rows else {
        return Ok(());
    };
    // The native text stands for the whole choice only if it is the only segment.
    choice.routed_native = if choice.routed.is_none() {
        native_routed
    } else {
        None
    };
    match &mut choice.routed {
        None => choice.routed = Some((r.num_layers, r.top_k, r.ids)),
        Some((layers, k, ids)) if *layers == r.num_layers && *k == r.top_k => ids.extend(r.ids),
        Some(_) => return Err(contract("routed experts changed shape within a choice")),
    }
    Ok(())
}

/// The base64 `.npy` of a choice's held routed experts (vLLM's own text when it came in one).
fn routed_b64(choice: &Choice) -> Option<String> {
    choice.routed_native.clone().or_else(|| {
        choice
            .routed
            .as_ref()
            .map(|(l, k, ids)| routed_experts_b64(*l, *k, ids))
    })
}

fn incomplete(choices: &[Choice]) -> Result<(), GenerateError> {
    let unfinished = choices.iter().filter(|c| c.finish.is_none()).count();
    if unfinished == 0 {
        return Ok(());
    }
    Err(GenerateError::Engine(EngineError::new(
        ErrorKind::StreamIncomplete,
        format!(
            "engine stream ended with {unfinished} of {} choices unfinished",
            choices.len()
        ),
    )))
}

// === wire shapes ===

#[derive(Serialize)]
#[serde(untagged)]
enum StopReason<'a> {
    Id(u32),
    Text(&'a str),
}

/// `UsageInfo` (`prompt_tokens, total_tokens, completion_tokens, prompt_tokens_details`, plus
/// `completion_tokens_details` as spec §6.1 lists it).
struct UsageJson {
    prompt_tokens: u32,
    completion_tokens: u32,
    cached_tokens: Option<u32>,
    exclude_none: bool,
}

#[derive(Serialize)]
struct PromptTokensDetails {
    cached_tokens: u32,
}

impl Serialize for UsageJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("prompt_tokens", &self.prompt_tokens)?;
        map.serialize_entry(
            "total_tokens",
            &self.prompt_tokens.saturating_add(self.completion_tokens),
        )?;
        map.serialize_entry("completion_tokens", &self.completion_tokens)?;
        let details = self
            .cached_tokens
            .map(|cached_tokens| PromptTokensDetails { cached_tokens });
        if !self.exclude_none || details.is_some() {
            map.serialize_entry("prompt_tokens_details", &details)?;
        }
        if !self.exclude_none {
            map.serialize_entry("completion_tokens_details", &None::<()>)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct ChoiceJson<'a> {
    index: u32,
    finish_reason: Option<&'static str>,
    stop_reason: Option<StopReason<'a>>,
    token_ids: &'a [u32],
    routed_experts: Option<String>,
    sampling_mask: Option<&'a [Vec<u32>]>,
    weight_versions: Option<&'a Value>,
    /// Text mode only (`GenerateTextChoice.text`, declared before `logprobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    logprobs: Option<ChoiceLogprobs<'a>>,
}

/// A choice's logprobs in the request's output mode.
#[derive(Serialize)]
#[serde(untagged)]
enum ChoiceLogprobs<'a> {
    Tokens(Logprobs<'a>),
    Text(TextLogprobs<'a>),
}

impl<'a> ChoiceLogprobs<'a> {
    fn new(lp: Logprobs<'a>, text_mode: bool) -> Self {
        if text_mode {
            Self::Text(TextLogprobs(lp))
        } else {
            Self::Tokens(lp)
        }
    }
}

#[derive(Serialize)]
struct StreamChunk<'a> {
    request_id: &'a str,
    usage: Option<UsageJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mm_placeholders: Option<&'a Value>,
    output_mode: &'static str,
    choices: [ChoiceJson<'a>; 1],
}

#[derive(Serialize)]
struct UsageChunk<'a> {
    request_id: &'a str,
    usage: UsageJson,
    output_mode: &'static str,
    choices: [(); 0],
}

#[derive(Serialize)]
struct UnaryResponse<'a> {
    request_id: &'a str,
    model: &'a str,
    created: u64,
    usage: UsageJson,
    prompt_logprobs: Option<PromptLogprobsJson<'a>>,
    prompt_token_id_logprobs: Option<&'a Value>,
    prompt_token_ids: Option<&'a [u32]>,
    mm_placeholders: Option<&'a Value>,
    metrics: Option<&'a Value>,
    kv_transfer_params: Option<&'a Value>,
    ec_transfer_params: Option<&'a Value>,
    output_mode: &'static str,
    choices: Vec<ChoiceJson<'a>>,
}
