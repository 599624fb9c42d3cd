//! The relay scan (issue 15): a vLLM unary `GenerateTokensResponse` read only for what genfront
//! derives from it — the one choice's `token_ids` and `finish_reason` / `stop_reason`, the
//! usage's `prompt_tokens` and `prompt_tokens_details.cached_tokens` — and where its
//! `request_id` sits, so the body itself can be relayed byte for byte
//! ([`Decoder::relay_unary`]).
//!
//! One pass of `serde_json` over the body into borrowed structs: `request_id` as a borrowed raw
//! value (its byte range is its offset in the body), the ids as `u32`s, the finish as a string,
//! `stop_reason` as a small `Value`; every other key (logprobs, routed experts, sampling masks,
//! `prompt_logprobs`, `metrics`, `weight_versions`, text, unknown keys) is skipped without being
//! built. A body the scan does not take as it is goes to the typed decoder
//! ([`Decoder::on_unary`]), which answers it exactly as before: not a JSON object, an `error`
//! key, duplicate keys the scan reads, a `request_id` other than the dispatch's native id, not
//! exactly one choice or its `index` not 0, ids or counts that are not unsigned integers in
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
        if self.spec.n != 1 || self.spec.discard_output || self.finished > 0 {
            return Relay::Typed(body);
        }
        let Some((choice, usage, id)) = scan(&body, native_id) else {
            return Relay::Typed(body);
        };
        let token_ids = choice.token_ids.unwrap_or_default();
        let tokens = saturate(token_ids.len() as u64);
        let last = token_ids.last().copied();
        let reason = choice.finish_reason.as_deref().unwrap_or("stop");
        let stop_reason = choice.stop_reason.unwrap_or(Value::Null);
        let finish_reason = match self.finish(reason, &stop_reason, last, tokens) {
            Finish::Reason(FinishReason::Error { .. }) => return Relay::Typed(body),
            Finish::Reason(r) => r,
            Finish::Cancelled => cancelled(),
        };
        if let Some(u) = usage {
            if let Some(p) = u.prompt_tokens {
                self.prompt_tokens = saturate(p);
            }
            if let Some(c) = u.prompt_tokens_details.and_then(|d| d.cached_tokens) {
                self.cached_tokens = saturate(c);
            }
        }
        let state = self.state_mut(0);
        state.tokens = tokens;
        state.last = last;
        state.finished = true;
        self.finished = 1;
        let usage = self.usage(0);
        Relay::Output(Box::new(EngineOutput {
            index: 0,
            token_ids,
            finish_reason: Some(finish_reason),
            usage: Some(usage),
            native: Some(NativeAnswer {
                body: body.into(),
                ids: vec![id],
            }),
            ..EngineOutput::default()
        }))
    }
}

/// Read `body`; `None` when it is not a plain one-choice answer to `native_id`.
fn scan(
    body: &[u8],
    native_id: &str,
) -> Option<(ChoiceIn, Option<UsageIn>, std::ops::Range<usize>)> {
    let answer: Answer<'_> = serde_json::from_slice(body).ok()?;
    if answer.error.is_some() {
        return None;
    }
    let mut choices = answer.choices?;
    if choices.len() != 1 {
        return None;
    }
    let choice = choices.pop()?;
    if choice.index != 0 {
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
