//! vLLM responses → engine deltas: one SSE chunk (`GenerateTokensStreamResponse`) or one unary
//! body (`GenerateTokensResponse`) at a time, into [`EngineOutput`]s (spec §6–§7).
//!
//! The [`Decoder`] is pure (no I/O, no clock), so the stream driver, the unit tests and the
//! assembler round-trip property all run the same code. The rules are in the crate docs
//! ("Engine client: chunk → delta").

use std::collections::VecDeque;

use genfront_protocol::{
    Candidate, EngineError, EngineOutput, ErrorKind, FinishReason, PromptLogprobOptions,
    PromptLogprobs, RoutedExperts, StopMatch, TokenLogprob, Usage,
};
use serde_json::{Map, Value};

use super::errors;
use crate::logprobs::FLOOR;
use crate::npy::routed_experts_from_b64;

/// One item of an engine stream.
pub(crate) type Item = Result<EngineOutput, EngineError>;

/// The message of the [`FinishReason::Cancelled`] items of a cancelled request (the same wording
/// as the mocker and the sidecar use).
pub const CANCELLED_MESSAGE: &str = "Aborted";

/// What the decoder needs to know about the request.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DecodeSpec {
    /// Number of choices (`sampling_params.n`).
    pub n: u32,
    /// Prompt length in tokens (usage before vLLM reports one).
    pub prompt_len: u32,
    /// The prompt ids; kept only when prompt logprobs were requested (the entries are keyed by
    /// the prompt token).
    pub prompt: Vec<u32>,
    /// Output top-k (`logprobs`), when output logprobs were requested.
    pub logprobs: Option<u32>,
    /// `logprob_token_ids`: the alternatives are these ids (into [`TokenLogprob::selected`]),
    /// not the top k.
    pub selected: Vec<u32>,
    /// Prompt logprobs, when requested.
    pub prompt_logprobs: Option<PromptLogprobOptions>,
    /// Decode `routed_experts` (otherwise they stay only in `engine_data`).
    pub routed_experts: bool,
    /// Decode `sampling_mask`.
    pub sampling_mask: bool,
    /// The request asked for no output tokens (`max_tokens: 0`), sent to vLLM as
    /// `max_tokens: 1`: the one generated token is dropped and the choice ends with
    /// `Length { length: 0 }`.
    pub discard_output: bool,
    /// EOS id reported for a `"stop"` finish of a choice that produced no token at all.
    pub fallback_eos: u32,
}

/// Whether the stream goes on after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Feed more.
    More,
    /// The request is over (every item, including a final error, is queued).
    Done,
}

#[derive(Debug, Clone, Copy, Default)]
struct ChoiceState {
    /// Output tokens delivered so far.
    tokens: u32,
    /// The last output token.
    last: Option<u32>,
    finished: bool,
}

/// How a native finish maps, before the output is emitted.
enum Finish {
    Reason(FinishReason),
    /// `"abort"` after genfront cancelled: tokens (if any) as a delta, then `Cancelled`.
    Cancelled,
}

/// Per-request decoder state.
#[derive(Debug)]
pub(crate) struct Decoder {
    spec: DecodeSpec,
    /// Per choice, grown on demand (a large `n` allocates nothing up front).
    choices: Vec<ChoiceState>,
    finished: u32,
    prompt_tokens: u32,
    cached_tokens: u32,
    cancelled: bool,
    /// The finishing item of the last choice, held until the usage-only chunk (or the end) so
    /// that it carries `cached_tokens`.
    held: Option<EngineOutput>,
}

impl Decoder {
    pub(crate) fn new(spec: DecodeSpec) -> Self {
        Self {
            prompt_tokens: spec.prompt_len,
            spec,
            choices: Vec::new(),
            finished: 0,
            cached_tokens: 0,
            cancelled: false,
            held: None,
        }
    }

    /// genfront cancelled the request: an `"abort"` finish from now on means `Cancelled`.
    pub(crate) fn set_cancelled(&mut self) {
        self.cancelled = true;
    }

    /// Whether every choice has finished.
    pub(crate) fn all_finished(&self) -> bool {
        self.finished >= self.spec.n
    }

    fn state(&self, index: u32) -> ChoiceState {
        self.choices
            .get(index as usize)
            .copied()
            .unwrap_or_default()
    }

    fn state_mut(&mut self, index: u32) -> &mut ChoiceState {
        let i = index as usize;
        if self.choices.len() <= i {
            self.choices.resize(i + 1, ChoiceState::default());
        }
        &mut self.choices[i]
    }

    fn usage(&self, index: u32) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.state(index).tokens,
            cached_tokens: self.cached_tokens,
        }
    }

    // === streaming ===

    /// One SSE event's data.
    pub(crate) fn on_event(&mut self, data: &[u8], out: &mut VecDeque<Item>) -> Flow {
        if data == b"[DONE]" {
            return self.end(out, "at [DONE]");
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(value) => self.on_chunk(value, out),
            Err(e) => self.fail(
                out,
                EngineError::internal(format!("vLLM sent an SSE event that is not JSON: {e}")),
            ),
        }
    }

    fn fail(&mut self, out: &mut VecDeque<Item>, error: EngineError) -> Flow {
        self.release_held(out);
        out.push_back(Err(error));
        Flow::Done
    }

    /// One decoded stream chunk.
    fn on_chunk(&mut self, value: Value, out: &mut VecDeque<Item>) -> Flow {
        let Value::Object(map) = &value else {
            return self.fail(
                out,
                EngineError::internal("vLLM sent an SSE event that is not a JSON object"),
            );
        };
        if let Some(error) = map.get("error") {
            return self.fail(out, errors::event_error(error));
        }
        self.read_usage(map.get("usage"));
        let handoff = map
            .get("kv_transfer_params")
            .filter(|v| !v.is_null())
            .cloned();
        let choices: &[Value] = match map.get("choices") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(items)) => items,
            Some(_) => {
                return self.fail(
                    out,
                    EngineError::internal("vLLM chunk `choices` is not a list"),
                );
            }
        };
        if choices.is_empty() {
            // The usage-only chunk: the held last item gets the final usage.
            if let Some(held) = &mut self.held {
                let completion = held.usage.map_or(0, |u| u.completion_tokens);
                held.usage = Some(Usage {
                    prompt_tokens: self.prompt_tokens,
                    completion_tokens: completion,
                    cached_tokens: self.cached_tokens,
                });
            }
            return Flow::More;
        }
        let mut decoded = Vec::with_capacity(choices.len());
        for choice in choices {
            match self.decode_choice(choice, false) {
                Ok(d) => {
                    self.mark_finished(&d);
                    decoded.push(d);
                }
                Err(e) => return self.fail(out, e),
            }
        }
        let last = decoded.len() - 1;
        let mut value = Some(value);
        for (i, mut items) in decoded.into_iter().enumerate() {
            let data = if i == last {
                value.take()
            } else {
                value.clone()
            };
            if let Some(item) = items.last_mut() {
                item.engine_data = data;
                item.handoff.clone_from(&handoff);
            }
            for item in items {
                self.emit(item, true, out);
            }
        }
        Flow::More
    }

    /// The stream ended: `why` is `"at [DONE]"` or `"without [DONE]"`.
    pub(crate) fn end(&mut self, out: &mut VecDeque<Item>, why: &str) -> Flow {
        self.release_held(out);
        if !self.all_finished() {
            if self.cancelled {
                self.cancel_rest(out);
            } else {
                let unfinished = self.spec.n - self.finished;
                out.push_back(Err(EngineError::new(
                    ErrorKind::StreamIncomplete,
                    format!(
                        "vLLM stream ended {why} with {unfinished} of {} choices unfinished",
                        self.spec.n
                    ),
                )));
            }
        }
        Flow::Done
    }

    /// After a cancellation, one `Cancelled` item (no tokens, last usage) per unfinished choice.
    pub(crate) fn cancel_rest(&mut self, out: &mut VecDeque<Item>) {
        self.release_held(out);
        for index in 0..self.spec.n {
            if self.state(index).finished {
                continue;
            }
            self.state_mut(index).finished = true;
            self.finished += 1;
            out.push_back(Ok(EngineOutput {
                index,
                finish_reason: Some(cancelled()),
                usage: Some(self.usage(index)),
                ..EngineOutput::default()
            }));
        }
    }

    /// Queue the held finishing item, if any.
    pub(crate) fn release_held(&mut self, out: &mut VecDeque<Item>) {
        if let Some(held) = self.held.take() {
            out.push_back(Ok(held));
        }
    }

    /// Count and queue one output; the finishing item of the last choice is held when `hold`.
    fn emit(&mut self, mut item: EngineOutput, hold: bool, out: &mut VecDeque<Item>) {
        let index = item.index;
        let finishes = item.finish_reason.is_some();
        {
            let added = u32::try_from(item.token_ids.len()).unwrap_or(u32::MAX);
            let last = item.token_ids.last().copied();
            let state = self.state_mut(index);
            state.tokens = state.tokens.saturating_add(added);
            if last.is_some() {
                state.last = last;
            }
            if finishes {
                state.finished = true;
            }
        }
        if finishes {
            self.finished += 1;
        }
        item.usage = Some(self.usage(index));
        if finishes && hold && self.all_finished() {
            self.held = Some(item);
        } else {
            out.push_back(Ok(item));
        }
    }

    fn read_usage(&mut self, usage: Option<&Value>) {
        let Some(Value::Object(u)) = usage else {
            return;
        };
        if let Some(p) = u.get("prompt_tokens").and_then(Value::as_u64) {
            self.prompt_tokens = saturate(p);
        }
        if let Some(c) = u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
        {
            self.cached_tokens = saturate(c);
        }
    }

    // === unary ===

    /// A whole unary body: one item per choice, then the end checks.
    pub(crate) fn on_unary(&mut self, body: &[u8], out: &mut VecDeque<Item>) -> Flow {
        let value = match serde_json::from_slice::<Value>(body) {
            Ok(v) => v,
            Err(e) => {
                return self.fail(
                    out,
                    EngineError::internal(format!("vLLM sent a response that is not JSON: {e}")),
                );
            }
        };
        let Value::Object(mut map) = value else {
            return self.fail(
                out,
                EngineError::internal("vLLM sent a response that is not a JSON object"),
            );
        };
        if let Some(error) = map.get("error") {
            return self.fail(out, errors::event_error(error));
        }
        self.read_usage(map.get("usage"));
        let choices = match map.shift_remove("choices") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items,
            Some(_) => {
                return self.fail(
                    out,
                    EngineError::internal("vLLM response `choices` is not a list"),
                );
            }
        };
        let prompt_logprobs = match (
            self.spec.prompt_logprobs.clone(),
            map.shift_remove("prompt_logprobs"),
        ) {
            (Some(opts), Some(Value::Array(list))) => Some(self.prompt_logprobs(&opts, &list)),
            _ => None,
        };
        let handoff = map
            .get("kv_transfer_params")
            .filter(|v| !v.is_null())
            .cloned();
        // `engine_data` of each item: the body's other top-level keys plus that one choice, the
        // shape of a stream chunk.
        let mut decoded = Vec::with_capacity(choices.len());
        for choice in &choices {
            match self.decode_choice(choice, true) {
                Ok(d) => {
                    self.mark_finished(&d);
                    decoded.push(d);
                }
                Err(e) => return self.fail(out, e),
            }
        }
        for (mut items, choice) in decoded.into_iter().zip(choices) {
            if let Some(first) = items.first_mut() {
                first.prompt_logprobs.clone_from(&prompt_logprobs);
            }
            if let Some(item) = items.last_mut() {
                let mut data: Map<String, Value> = map.clone();
                data.insert("choices".to_owned(), Value::Array(vec![choice]));
                item.engine_data = Some(Value::Object(data));
                item.handoff.clone_from(&handoff);
            }
            for item in items {
                self.emit(item, false, out);
            }
        }
        self.end(out, "in the unary response")
    }

    fn prompt_logprobs(&self, opts: &PromptLogprobOptions, list: &[Value]) -> PromptLogprobs {
        let len = self.spec.prompt.len();
        let start = (opts.start as usize).min(len);
        // A list shorter than the prompt covers its tail (a server that honours
        // `prompt_logprob_start` may send only the positions it computed).
        let offset = len.saturating_sub(list.len());
        let k = opts.top_k as usize;
        let entries = (start..len)
            .map(|pos| {
                if pos == 0 {
                    return None;
                }
                let value = pos.checked_sub(offset).and_then(|i| list.get(i))?;
                prompt_entry(value, self.spec.prompt[pos], k)
            })
            .collect();
        PromptLogprobs {
            start: saturate(start as u64),
            entries,
            first_text: None,
            first_token_id: None,
        }
    }

    /// A choice that finishes in the entry just decoded is finished for the rest of the same
    /// chunk (or unary body) too: a second entry with its index is output after its finish
    /// (found by the fuzz harness: two finishing entries of one index in one chunk were both
    /// emitted, and the request counted as done with another choice unfinished).
    fn mark_finished(&mut self, items: &[EngineOutput]) {
        if let Some(done) = items.iter().find(|o| o.finish_reason.is_some()) {
            self.state_mut(done.index).finished = true;
        }
    }

    // === one choice ===

    /// Decode one native choice into one item, or two (tokens, then `Cancelled`) for an
    /// `"abort"` after genfront cancelled. `usage` and `engine_data` are filled by the caller.
    fn decode_choice(
        &mut self,
        choice: &Value,
        unary: bool,
    ) -> Result<Vec<EngineOutput>, EngineError> {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .ok_or_else(|| EngineError::internal("vLLM choice without an integer `index`"))?;
        let index = u32::try_from(index)
            .ok()
            .filter(|i| *i < self.spec.n)
            .ok_or_else(|| {
                EngineError::internal(format!(
                    "vLLM sent choice {index}, but the request has n = {}",
                    self.spec.n
                ))
            })?;
        if self.state(index).finished {
            return Err(EngineError::internal(format!(
                "vLLM sent output for choice {index} after it finished"
            )));
        }
        let mut token_ids = token_list(choice.get("token_ids")).ok_or_else(|| {
            EngineError::internal("vLLM choice `token_ids` is not a list of token ids")
        })?;
        let mut logprobs = self.spec.logprobs.and_then(|k| {
            output_logprobs(choice.get("logprobs")?, &token_ids, k, &self.spec.selected)
        });
        let routed_experts = if self.spec.routed_experts {
            choice
                .get("routed_experts")
                .and_then(Value::as_str)
                .and_then(|b64| routed_experts_from_b64(b64).ok())
                .map(|(num_layers, top_k, ids)| RoutedExperts {
                    num_layers,
                    top_k,
                    ids,
                })
        } else {
            None
        };
        let mut sampling_mask = if self.spec.sampling_mask {
            choice
                .get("sampling_mask")
                .and_then(mask_list)
                .filter(|m| m.len() == token_ids.len())
        } else {
            None
        };
        let native_finish = match choice.get("finish_reason") {
            Some(Value::String(s)) => Some(s.as_str()),
            _ if unary => Some("stop"),
            _ => None,
        };
        if self.spec.discard_output {
            token_ids.clear();
            logprobs = None;
            sampling_mask = None;
        }
        let last_token = token_ids.last().copied().or(self.state(index).last);
        let tokens_after = self
            .state(index)
            .tokens
            .saturating_add(u32::try_from(token_ids.len()).unwrap_or(u32::MAX));
        let finish = native_finish.map(|reason| {
            self.finish(
                reason,
                choice.get("stop_reason").unwrap_or(&Value::Null),
                last_token,
                tokens_after,
            )
        });
        let mut output = EngineOutput {
            index,
            token_ids,
            logprobs,
            routed_experts,
            sampling_mask,
            ..EngineOutput::default()
        };
        Ok(match finish {
            None => vec![output],
            Some(Finish::Reason(reason)) => {
                output.finish_reason = Some(reason);
                vec![output]
            }
            Some(Finish::Cancelled) if output.token_ids.is_empty() => {
                // No new tokens: one `Cancelled` item, keeping the choice's routed experts
                // (vLLM sends a choice's whole blob on its final chunk, an abort's included).
                output.finish_reason = Some(cancelled());
                output.logprobs = None;
                output.sampling_mask = None;
                vec![output]
            }
            Some(Finish::Cancelled) => {
                let last = EngineOutput {
                    index,
                    finish_reason: Some(cancelled()),
                    ..EngineOutput::default()
                };
                vec![output, last]
            }
        })
    }

    /// A native `finish_reason` (+ `stop_reason`) as an engine finish.
    fn finish(&self, reason: &str, stop_reason: &Value, last: Option<u32>, tokens: u32) -> Finish {
        if self.spec.discard_output && reason != "abort" && reason != "error" {
            return Finish::Reason(FinishReason::Length { length: 0 });
        }
        Finish::Reason(match reason {
            "stop" => match stop_reason {
                Value::Number(n) => match n.as_u64().and_then(|t| u32::try_from(t).ok()) {
                    Some(t) => FinishReason::Stop {
                        matched: StopMatch::TokenId(t),
                    },
                    None => FinishReason::Stop {
                        matched: StopMatch::Text(n.to_string()),
                    },
                },
                Value::String(s) => FinishReason::Stop {
                    matched: StopMatch::Text(s.clone()),
                },
                _ => FinishReason::Eos {
                    token_id: last.unwrap_or(self.spec.fallback_eos),
                },
            },
            "length" => FinishReason::Length { length: tokens },
            "repetition" => FinishReason::Stop {
                matched: StopMatch::Text(stop_reason.as_str().unwrap_or(REPETITION).to_owned()),
            },
            // Also an abort genfront did not ask for (an orchestrator aborting on the engine
            // before a weight update): a client talking to vLLM directly gets `"abort"` with its
            // partial tokens and resumes from them, so it must get the same through genfront.
            "abort" => return Finish::Cancelled,
            "error" => FinishReason::Error {
                message: "vLLM finished the choice with finish_reason \"error\"".to_owned(),
            },
            other => FinishReason::Error {
                message: format!("vLLM sent an unknown finish_reason {other:?}"),
            },
        })
    }
}

/// `matched` of a `"repetition"` finish without a string `stop_reason`.
pub(crate) const REPETITION: &str = "repetition";

fn cancelled() -> FinishReason {
    FinishReason::Cancelled {
        message: CANCELLED_MESSAGE.to_owned(),
    }
}

fn saturate(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// A JSON list of token ids (`null`/absent = empty). `None` when it is not one.
fn token_list(value: Option<&Value>) -> Option<Vec<u32>> {
    match value {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect(),
        Some(_) => None,
    }
}

fn mask_list(value: &Value) -> Option<Vec<Vec<u32>>> {
    value
        .as_array()?
        .iter()
        .map(|row| token_list(Some(row)).filter(|_| row.is_array()))
        .collect()
}

/// A candidate `{"token_id", "logprob", "rank"}` (or the older `{"token": "token_id:N", …}`).
fn candidate(value: &Value) -> Option<Candidate> {
    let token_id = match value.get("token_id") {
        Some(v) => u32::try_from(v.as_u64()?).ok()?,
        None => value
            .get("token")?
            .as_str()?
            .strip_prefix("token_id:")?
            .parse()
            .ok()?,
    };
    Some(Candidate {
        token_id,
        logprob: logprob_of(value),
        rank: rank_of(value),
        text: None,
    })
}

fn logprob_of(value: &Value) -> f64 {
    value
        .get("logprob")
        .and_then(Value::as_f64)
        .unwrap_or(FLOOR)
}

fn rank_of(value: &Value) -> Option<u32> {
    value
        .get("rank")
        .and_then(Value::as_u64)
        .and_then(|r| u32::try_from(r).ok())
}

/// Put the sampled (or prompt) token back into its top-`k` list: vLLM lists it first and drops
/// it from the alternatives, so the wire has `k` entries when it is among the top `k`, `k + 1`
/// otherwise. It goes back at its rank (or, without one, by logprob) when it fits in `k`.
fn with_own_token(mut others: Vec<Candidate>, own: Candidate, k: usize) -> Vec<Candidate> {
    if others.len() >= k {
        return others;
    }
    let at = match own.rank {
        Some(r) if r >= 1 && (r as usize) <= k => Some((r as usize - 1).min(others.len())),
        Some(_) => None,
        None => Some(
            others
                .iter()
                .position(|c| c.logprob < own.logprob)
                .unwrap_or(others.len()),
        ),
    };
    if let Some(at) = at {
        others.insert(at, own);
    }
    others
}

/// `GenerateLogProbs` of one delta → one [`TokenLogprob`] per token; `None` when absent or
/// when it does not line up with the tokens.
fn output_logprobs(
    value: &Value,
    tokens: &[u32],
    k: u32,
    selected: &[u32],
) -> Option<Vec<TokenLogprob>> {
    let content = value.get("content")?.as_array()?;
    if content.len() != tokens.len() {
        return None;
    }
    content
        .iter()
        .zip(tokens)
        .map(|(entry, &token)| {
            if let Some(text) = text_token(entry) {
                return Some(text_entry(entry, token, text, selected));
            }
            let own = Candidate {
                token_id: token,
                logprob: logprob_of(entry),
                rank: rank_of(entry),
                text: None,
            };
            let alternatives: Vec<Candidate> = match entry.get("top_logprobs") {
                Some(Value::Array(items)) => items.iter().filter_map(candidate).collect(),
                _ => Vec::new(),
            };
            let (top, chosen) = if selected.is_empty() {
                let others = alternatives
                    .into_iter()
                    .filter(|c| c.token_id != token)
                    .collect();
                (with_own_token(others, own.clone(), k as usize), Vec::new())
            } else {
                let chosen = selected
                    .iter()
                    .filter_map(|id| {
                        if *id == token {
                            Some(own.clone())
                        } else {
                            alternatives.iter().find(|c| c.token_id == *id).cloned()
                        }
                    })
                    .collect();
                (Vec::new(), chosen)
            };
            Some(TokenLogprob {
                token_id: token,
                logprob: own.logprob,
                rank: own.rank,
                top,
                selected: chosen,
                text: None,
            })
        })
        .collect()
}

/// The decoded `token` string of an `output_mode: "text"` entry (`ChatCompletionLogProb`:
/// `{token, logprob, bytes}`, no `token_id`); `None` for the tokens shape and for the older
/// `"token_id:N"` placeholder shape.
fn text_token(entry: &Value) -> Option<&str> {
    if entry.get("token_id").is_some() {
        return None;
    }
    entry
        .get("token")?
        .as_str()
        .filter(|t| !t.starts_with("token_id:"))
}

/// One `output_mode: "text"` position (`_create_text_logprobs`): the sampled token's decoded
/// text and logprob; its `top_logprobs` list the sampled token first (vLLM's per-position dict
/// starts with it), then the alternatives best first, by decoded text only. The first entry
/// becomes the sampled token again; the rest are kept in order as candidates without an id
/// ([`Candidate::UNKNOWN_ID`], no rank) — in `selected` for `logprob_token_ids`, else in `top`.
fn text_entry(entry: &Value, token: u32, text: &str, selected: &[u32]) -> TokenLogprob {
    let alternatives: Vec<Candidate> = match entry.get("top_logprobs") {
        Some(Value::Array(items)) => items
            .iter()
            .skip(1)
            .filter_map(|c| {
                Some(Candidate {
                    token_id: Candidate::UNKNOWN_ID,
                    logprob: logprob_of(c),
                    rank: None,
                    text: Some(c.get("token")?.as_str()?.to_owned()),
                })
            })
            .collect(),
        _ => Vec::new(),
    };
    let (top, chosen) = if selected.is_empty() {
        (alternatives, Vec::new())
    } else {
        (Vec::new(), alternatives)
    };
    TokenLogprob {
        token_id: token,
        logprob: logprob_of(entry),
        rank: None,
        top,
        selected: chosen,
        text: Some(text.to_owned()),
    }
}

/// One prompt position `{"<id>": {"logprob", "rank", "decoded_token"}, …}` for prompt token
/// `token`.
fn prompt_entry(value: &Value, token: u32, k: usize) -> Option<TokenLogprob> {
    let map = value.as_object()?;
    let mut own = None;
    let mut others = Vec::with_capacity(map.len());
    for (key, v) in map {
        let Ok(id) = key.parse::<u32>() else {
            continue;
        };
        let c = Candidate {
            token_id: id,
            logprob: logprob_of(v),
            rank: rank_of(v),
            // An engine with a tokenizer decodes every prompt-logprob token.
            text: v
                .get("decoded_token")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        if id == token && own.is_none() {
            own = Some(c);
        } else if id != token {
            others.push(c);
        }
    }
    let own = own?;
    Some(TokenLogprob {
        token_id: token,
        logprob: own.logprob,
        rank: own.rank,
        text: own.text.clone(),
        top: with_own_token(others, own, k),
        selected: Vec::new(),
    })
}

mod relay;

pub(crate) use relay::Relay;
