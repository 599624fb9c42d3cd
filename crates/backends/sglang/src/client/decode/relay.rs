//! The relay scan: an SGLang unary answer ([`FrameDecoder::relay`]) or SSE frame
//! ([`FrameDecoder::relay_frame`]) read only for what genfront derives from it (output ids,
//! finish reason, usage) and where its `meta_info.id` sits, so the bytes themselves can be
//! relayed.
//!
//! One pass of `serde_json` over the body into borrowed structs: `meta_info.id` as a borrowed
//! raw value (its byte range is its offset in the body), the output ids as `u32`s, the finish
//! reason as a small `Value`, the three counts as integers; every other key (logprob lists,
//! routed experts, text, `e2e_latency`, unknown keys) is skipped without being built. An answer
//! the scan does not take as it is (not an object, an `error` key, duplicate keys, no
//! `meta_info`, an id that is not the dispatch id, ids or counts that are not `u32`, a unary
//! answer without a finish reason, a cumulative frame whose ids shrank without an abort) goes to
//! the typed decoder instead, which answers it exactly as before.

use genfront_protocol::{EngineError, EngineOutput, FinishReason, NativeAnswer, Usage};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::FrameDecoder;

/// What [`FrameDecoder::relay`] made of an answer.
#[derive(Debug)]
pub enum Relay {
    /// The answer's one output: [`EngineOutput::native`] holds the body, the typed fields what
    /// the scan read.
    Output(Box<EngineOutput>),
    /// The answer is an error: SGLang's abort with a 4xx/5xx `status_code`, or a finish reason
    /// of type `error` (as the typed decoder maps them).
    Failed(EngineError),
    /// Not a plain answer: decode these bytes with [`FrameDecoder::decode`].
    Typed(Vec<u8>),
}

/// The top level of an SGLang unary answer, as far as the scan reads it.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(default)]
    output_ids: Option<Vec<u32>>,
    #[serde(borrow)]
    meta_info: Meta<'a>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// `meta_info`, as far as the scan reads it.
#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(default)]
    finish_reason: Option<Value>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    cached_tokens: Option<u32>,
}

impl FrameDecoder {
    /// Scan SGLang's unary answer `body` to dispatch `rid` for relay (see the module docs):
    /// the output carries the body and the byte range of its `meta_info.id` in
    /// [`EngineOutput::native`], the output ids, the finish reason (mapped as
    /// [`FrameDecoder::decode`] maps it: EOS ids, stop ids, `length`, `Cancelled` for a
    /// plain abort) and the usage; nothing else is decoded. Like a decoded terminal frame, it
    /// ends the decoder's stream. An answer without a finish reason is [`Relay::Typed`].
    pub fn relay(&mut self, body: Vec<u8>, rid: &str) -> Relay {
        self.relay_any(body, rid, true)
    }

    /// Scan one SSE frame (`data` payload) of dispatch `rid` for relay, as [`FrameDecoder::relay`]
    /// does a unary answer: the output's `token_ids` are the frame's new ids (past those
    /// delivered, in cumulative mode), its `native` the frame's bytes. A frame with a finish
    /// reason ends the stream.
    pub fn relay_frame(&mut self, frame: Vec<u8>, rid: &str) -> Relay {
        self.relay_any(frame, rid, false)
    }

    fn relay_any(&mut self, body: Vec<u8>, rid: &str, terminal: bool) -> Relay {
        if self.finished {
            return Relay::Typed(body);
        }
        // A cumulative frame is scanned past the array prefixes the previous accepted frame
        // already held (`fast`); whatever that scan does not take goes to the full scan.
        let memo = std::mem::take(&mut self.memo);
        let (scanned, spans) = match (!self.cfg.incremental && !terminal)
            .then(|| super::fast::scan(&body, rid, &memo, self.delivered))
            .flatten()
        {
            Some((scanned, spans)) => (scanned, Some(spans)),
            None => match scan(&body, rid) {
                Some(scanned) => (scanned, None),
                None => return Relay::Typed(body),
            },
        };
        drop(memo);
        let Scanned {
            mut token_ids,
            skipped,
            finish,
            counts,
            id,
        } = scanned;
        if terminal && finish.is_none() {
            return Relay::Typed(body);
        }
        let is_abort = finish
            .as_ref()
            .is_some_and(|f| f.get("type").and_then(Value::as_str) == Some("abort"));
        // The new ids: all of an incremental frame's; a cumulative frame's past those delivered
        // (an abort frame may carry fewer: it adds none). Any other shrink is the typed
        // decoder's contract error.
        // `token_ids` leaves out the first `skipped` ids (never more than those delivered).
        let total = skipped + token_ids.len();
        let new_ids = if self.cfg.incremental {
            token_ids
        } else if self.delivered <= total {
            match self.delivered.saturating_sub(skipped) {
                // The fast scan's usual case: every id it read is new (no second buffer).
                0 => token_ids,
                at => token_ids.split_off(at),
            }
        } else if is_abort {
            Vec::new()
        } else {
            return Relay::Typed(body);
        };
        let completion_default = u32::try_from(self.delivered + new_ids.len()).unwrap_or(u32::MAX);
        let last_token = new_ids.last().copied().or(self.last_token);
        let finish_reason = match finish {
            None => None,
            Some(f) => {
                self.finished = true;
                match self.finish_reason(&f, last_token, completion_default) {
                    Ok(f) => Some(f),
                    // SGLang 0.5.23 `TokenizerManager._handle_abort_finish_reason`
                    // (sglang/srt/managers/tokenizer_manager.py:1891): only a unary answer
                    // raises an abort with a `status_code`; a stream yields that abort frame
                    // as it is (its message, status_code, err_type and partial ids), then
                    // `[DONE]` — so the relayed stream sends the engine's frame too.
                    Err(e) if !terminal && is_abort => {
                        Some(FinishReason::Cancelled { message: e.message })
                    }
                    Err(e) => return Relay::Failed(e),
                }
            }
        };
        let usage = Usage {
            prompt_tokens: counts[0].unwrap_or(self.cfg.prompt_len),
            completion_tokens: counts[1].unwrap_or(completion_default),
            cached_tokens: counts[2].unwrap_or(0),
        };
        self.delivered += new_ids.len();
        self.last_token = last_token;
        self.usage = usage;
        let body = bytes::Bytes::from(body);
        if let Some(spans) = spans
            && !self.finished
        {
            self.memo = spans.into_memo(body.clone());
        }
        Relay::Output(Box::new(EngineOutput {
            index: self.cfg.index,
            token_ids: new_ids,
            finish_reason,
            usage: Some(usage),
            native: Some(NativeAnswer {
                body,
                ids: vec![id],
            }),
            ..EngineOutput::default()
        }))
    }
}

/// What the scan read.
pub(super) struct Scanned {
    /// The output ids past the first `skipped`.
    pub(super) token_ids: Vec<u32>,
    /// Leading output ids left out of `token_ids` (the fast scan's remembered prefix; 0 for
    /// the full scan).
    pub(super) skipped: usize,
    /// `meta_info.finish_reason`, `null` as `None`.
    pub(super) finish: Option<Value>,
    /// `prompt_tokens`, `completion_tokens`, `cached_tokens`.
    pub(super) counts: [Option<u32>; 3],
    /// The byte range of `meta_info.id` (a JSON string, quotes included).
    pub(super) id: std::ops::Range<usize>,
}

/// Read `body`; `None` when it is not a plain answer to `rid`.
pub(super) fn scan(body: &[u8], rid: &str) -> Option<Scanned> {
    let answer: Answer<'_> = serde_json::from_slice(body).ok()?;
    if answer.error.is_some() {
        return None;
    }
    let meta = answer.meta_info;
    let finish = meta.finish_reason.filter(|f| !f.is_null());
    // The id must be the dispatch id as a plain JSON string (a minted id needs no escapes).
    let raw = meta.id.get();
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner != rid {
        return None;
    }
    let start = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    if body.get(start..end) != Some(raw.as_bytes()) {
        return None;
    }
    Some(Scanned {
        token_ids: answer.output_ids.unwrap_or_default(),
        skipped: 0,
        finish,
        counts: [
            meta.prompt_tokens,
            meta.completion_tokens,
            meta.cached_tokens,
        ],
        id: start..end,
    })
}
