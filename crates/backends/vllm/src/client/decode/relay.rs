//! The relay scan (issue 15): a vLLM unary `GenerateTokensResponse` ([`Decoder::relay_unary`])
//! or SSE chunk `GenerateTokensStreamResponse` ([`Decoder::relay_event`]) read only for what
//! genfront derives from it — the choice's `token_ids` and `finish_reason` / `stop_reason`, the
//! usage's `prompt_tokens` and `prompt_tokens_details.cached_tokens` — and where its
//! `request_id` sits, so the bytes themselves can be relayed with only that id edited.
//!
//! One pass of `serde_json` over the body into borrowed structs: `request_id` as a borrowed raw
//! value (its byte range is its offset in the body), the ids as `u32`s, the finish as a string,
//! `stop_reason` as a small `Value`; every other key (logprobs, routed experts, sampling masks,
//! `prompt_logprobs`, `metrics`, `weight_versions`, text, unknown keys) is skipped without being
//! built. A body the scan does not take as it is goes to the typed decoder
//! ([`Decoder::on_unary`]), which answers it exactly as before: not a JSON object, an `error`
//! key, duplicate keys the scan reads, a `request_id` other than the dispatch's native id, not
//! exactly one choice (a stream's usage-only chunk has none) or its `index` not 0, a chunk for
//! a choice that already finished, `[DONE]`, ids or counts that are not unsigned integers in
//! range, a finish the typed decoder maps to an error (`"error"`, unknown values), or a request
//! whose output genfront discards (`max_tokens: 0` sent as 1).

use genfront_protocol::{EngineOutput, FinishReason, NativeAnswer};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Decoder, Finish, cancelled, saturate};

/// What [`Decoder::relay_unary`] made of a body.
#[derive(Debug)]
pub(crate) enum Relay {
    /// The body's one output: [`EngineOutput::native`] holds the body, the typed fields what the
    /// scan read.
    Output(Box<EngineOutput>),
    /// Not a plain answer: decode these bytes with [`Decoder::on_unary`].
    Typed(Vec<u8>),
}

/// The top level of a unary answer, as far as the scan reads it.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    request_id: &'a RawValue,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default)]
    choices: Option<Vec<ChoiceIn>>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// `usage`, as far as the scan reads it (`completion_tokens` is counted from the ids, as the
/// typed decoder counts it).
#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<DetailsIn>,
}

#[derive(Deserialize)]
struct DetailsIn {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// One choice, as far as the scan reads it.
#[derive(Deserialize)]
struct ChoiceIn {
    index: u64,
    #[serde(default)]
    token_ids: Option<Vec<u32>>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    stop_reason: Option<Value>,
}

impl Decoder {
    /// Scan vLLM's unary answer `body` to the request vLLM calls `native_id`
    /// (`generate-tokens-<dispatch id>`) for relay (see the module docs): one output with the
    /// body and the byte range of its `request_id` in [`EngineOutput::native`], the choice's
    /// ids, its finish (mapped as [`Decoder::on_unary`] maps it: `"stop"` + id / string / null,
    /// `"length"`, `"repetition"`, `"abort"` → `Cancelled` with the tokens on the same item, a
    /// missing finish → `"stop"`) and the usage (prompt tokens as vLLM reports them, the ids
    /// counted, cached tokens from `prompt_tokens_details`). Like [`Decoder::on_unary`], it
    /// finishes the request.
    pub(crate) fn relay_unary(&mut self, body: Vec<u8>, native_id: &str) -> Relay {
        self.relay_any(body, native_id, true)
    }

    /// Scan one SSE event's data (a `GenerateTokensStreamResponse` chunk) of `native_id` for
    /// relay, as [`Decoder::relay_unary`] does a unary answer: the output's `token_ids` are the
    /// chunk's delta, its finish the chunk's (`None` while `null`), its `native` the chunk's
    /// bytes. The usage-only chunk (`choices: []`, sent with `stream_options.include_usage`)
    /// is an output of its own, without tokens or finish, carrying the final usage.
    pub(crate) fn relay_event(&mut self, data: Vec<u8>, native_id: &str) -> Relay {
        self.relay_any(data, native_id, false)
    }

    fn relay_any(&mut self, body: Vec<u8>, native_id: &str, unary: bool) -> Relay {
        // A typed finishing item held for the usage chunk keeps the stream typed to its end, so
        // the items stay in order.
        if self.spec.n != 1
            || self.spec.discard_output
            || self.held.is_some()
            || body.as_slice() == b"[DONE]"
        {
            return Relay::Typed(body);
        }
        let Some((choice, usage, id)) = scan(&body, native_id) else {
            return Relay::Typed(body);
        };
        let state = self.state(0);
        let (token_ids, finish_reason) = match choice {
            None if unary => return Relay::Typed(body),
            None => (Vec::new(), None),
            Some(_) if state.finished => return Relay::Typed(body),
            Some(choice) => {
                let token_ids = choice.token_ids.unwrap_or_default();
                let added = saturate(token_ids.len() as u64);
                let tokens = state.tokens.saturating_add(added);
                let last = token_ids.last().copied().or(state.last);
                let reason = match choice.finish_reason.as_deref() {
                    Some(r) => Some(r),
                    None if unary => Some("stop"),
                    None => None,
                };
                let stop_reason = choice.stop_reason.unwrap_or(Value::Null);
                let finish = match reason.map(|r| self.finish(r, &stop_reason, last, tokens)) {
                    None => None,
                    Some(Finish::Reason(FinishReason::Error { .. })) => {
                        return Relay::Typed(body);
                    }
                    Some(Finish::Reason(r)) => Some(r),
                    Some(Finish::Cancelled) => Some(cancelled()),
                };
                let state = self.state_mut(0);
                state.tokens = tokens;
                state.last = last;
                if finish.is_some() {
                    state.finished = true;
                    self.finished = 1;
                }
                (token_ids, finish)
            }
        };
        if let Some(u) = usage {
            if let Some(p) = u.prompt_tokens {
                self.prompt_tokens = saturate(p);
            }
            if let Some(c) = u.prompt_tokens_details.and_then(|d| d.cached_tokens) {
                self.cached_tokens = saturate(c);
            }
        }
        let usage = self.usage(0);
        Relay::Output(Box::new(EngineOutput {
            index: 0,
            token_ids,
            finish_reason,
            usage: Some(usage),
            native: Some(NativeAnswer {
                body: body.into(),
                ids: vec![id],
            }),
            ..EngineOutput::default()
        }))
    }
}

/// What the scan read: the chunk's one choice (`None` for none), its usage, the id's range.
type Scanned = (Option<ChoiceIn>, Option<UsageIn>, std::ops::Range<usize>);

/// Read `body`; `None` when it is not a plain answer or chunk (at most one choice) to
/// `native_id`.
fn scan(body: &[u8], native_id: &str) -> Option<Scanned> {
    let answer: Answer<'_> = serde_json::from_slice(body).ok()?;
    if answer.error.is_some() {
        return None;
    }
    let mut choices = answer.choices.unwrap_or_default();
    if choices.len() > 1 {
        return None;
    }
    let choice = choices.pop();
    if choice.as_ref().is_some_and(|c| c.index != 0) {
        return None;
    }
    // The id must be the native id as a plain JSON string (a minted id needs no escapes).
    let raw = answer.request_id.get();
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner != native_id {
        return None;
    }
    let start = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    if body.get(start..end) != Some(raw.as_bytes()) {
        return None;
    }
    Some((choice, answer.usage, start..end))
}
