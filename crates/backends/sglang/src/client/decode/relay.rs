//! The relay scan: an SGLang unary answer read only for what genfront derives from it
//! (output ids, finish reason, usage) and where its `meta_info.id` sits, so the answer itself
//! can be relayed byte for byte ([`FrameDecoder::relay`]).
//!
//! One pass of `serde_json` over the body into borrowed structs: `meta_info.id` as a borrowed
//! raw value (its byte range is its offset in the body), the output ids as `u32`s, the finish
//! reason as a small `Value`, the three counts as integers; every other key (logprob lists,
//! routed experts, text, `e2e_latency`, unknown keys) is skipped without being built. An answer
//! the scan does not take as it is (not an object, an `error` key, duplicate keys, a missing
//! finish reason or `meta_info`, an id that is not the dispatch id, ids or counts that are not
//! `u32`) goes to the typed decoder instead, which answers it exactly as before.

use genfront_protocol::{EngineError, EngineOutput, NativeAnswer, Usage};
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
    /// ends the decoder's stream.
    pub fn relay(&mut self, body: Vec<u8>, rid: &str) -> Relay {
        if self.finished {
            return Relay::Typed(body);
        }
        let scanned = match scan(&body, rid) {
            Some(s) => s,
            None => return Relay::Typed(body),
        };
        let Scanned {
            token_ids,
            finish,
            counts,
            id,
        } = scanned;
        let completion_default = u32::try_from(token_ids.len()).unwrap_or(u32::MAX);
        let last_token = token_ids.last().copied();
        self.finished = true;
        let finish_reason = match self.finish_reason(&finish, last_token, completion_default) {
            Ok(f) => f,
            Err(e) => return Relay::Failed(e),
        };
        let usage = Usage {
            prompt_tokens: counts[0].unwrap_or(self.cfg.prompt_len),
            completion_tokens: counts[1].unwrap_or(completion_default),
            cached_tokens: counts[2].unwrap_or(0),
        };
        self.delivered = token_ids.len();
        self.last_token = last_token;
        self.usage = usage;
        Relay::Output(Box::new(EngineOutput {
            index: self.cfg.index,
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

/// What the scan read.
struct Scanned {
    token_ids: Vec<u32>,
    finish: Value,
    counts: [Option<u32>; 3],
    id: std::ops::Range<usize>,
}

/// Read `body`; `None` when it is not a plain answer to `rid`.
fn scan(body: &[u8], rid: &str) -> Option<Scanned> {
    let answer: Answer<'_> = serde_json::from_slice(body).ok()?;
    if answer.error.is_some() {
        return None;
    }
    let meta = answer.meta_info;
    let finish = meta.finish_reason.filter(|f| !f.is_null())?;
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
        finish,
        counts: [
            meta.prompt_tokens,
            meta.completion_tokens,
            meta.cached_tokens,
        ],
        id: start..end,
    })
}
