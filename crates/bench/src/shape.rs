//! Output-token counting for each response shape, without building a JSON tree.
//!
//! Only the few fields that matter are decoded (token-id arrays are reduced to a length and their
//! first id; everything else, including logprob lists, is skipped by serde without allocating):
//!
//! | shape | tokens from |
//! |---|---|
//! | SGLang unary | `meta_info.completion_tokens`, else `output_ids` length |
//! | SGLang stream (cumulative or incremental) | `meta_info.completion_tokens` (cumulative in both modes), else `output_ids` (see [`StreamCounter`]) |
//! | vLLM unary | `usage.completion_tokens`, else the sum of `choices[].token_ids` lengths |
//! | vLLM stream | the sum of `choices[].token_ids` deltas; a `usage.completion_tokens` (continuous or final usage chunk) raises the total if larger |

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};

use crate::args::Format;
use crate::error::ErrorKind;

/// What one SSE event meant for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStep {
    /// A data event; `new_tokens` may be 0 (e.g. a finish-only or usage-only chunk).
    Tokens {
        /// Output tokens this event added.
        new_tokens: u64,
    },
    /// `data: [DONE]`: the stream is complete.
    Done,
}

/// Per-request stream state: turns each event into the number of output tokens it added.
///
/// SGLang without `completion_tokens` falls back to `output_ids`: a frame whose ids are longer
/// than the count so far and start with the stream's first id is taken as cumulative, anything
/// else as an incremental delta; once a frame is seen to be a delta, the stream stays incremental.
#[derive(Debug, Clone)]
pub struct StreamCounter {
    format: Format,
    total: u64,
    first_id: Option<u64>,
    incremental: bool,
}

impl StreamCounter {
    /// A fresh counter for one request.
    pub fn new(format: Format) -> Self {
        Self {
            format,
            total: 0,
            first_id: None,
            incremental: false,
        }
    }

    /// Output tokens counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Account one event's data. Error objects, abort finishes and malformed JSON are errors.
    pub fn on_event(&mut self, data: &[u8]) -> Result<StreamStep, ErrorKind> {
        if data.trim_ascii() == b"[DONE]" {
            return Ok(StreamStep::Done);
        }
        let new_tokens = match self.format {
            Format::Sglang => self.on_sglang(data)?,
            Format::Vllm => self.on_vllm(data)?,
        };
        Ok(StreamStep::Tokens { new_tokens })
    }

    fn on_sglang(&mut self, data: &[u8]) -> Result<u64, ErrorKind> {
        let frame: SglFrame<'_> = parse(data)?;
        frame.check()?;
        let before = self.total;
        if let Some(ct) = frame.meta_info.as_ref().and_then(|m| m.completion_tokens) {
            self.total = self.total.max(ct);
        } else if let Some(ids) = frame.output_ids {
            let first = *self.first_id.get_or_insert(ids.first.unwrap_or(0));
            let cumulative = !self.incremental
                && self.total > 0
                && ids.len >= self.total
                && ids.first == Some(first);
            if cumulative {
                self.total = ids.len;
            } else {
                if self.total > 0 {
                    self.incremental = true;
                }
                self.total += ids.len;
            }
        }
        Ok(self.total - before)
    }

    fn on_vllm(&mut self, data: &[u8]) -> Result<u64, ErrorKind> {
        let frame: VllmBody<'_> = parse(data)?;
        frame.check()?;
        let delta = frame.choices.tokens;
        self.total += delta;
        if let Some(u) = frame.usage.and_then(|u| u.completion_tokens)
            && u > self.total
        {
            let extra = u - self.total;
            self.total = u;
            return Ok(delta + extra);
        }
        Ok(delta)
    }
}

/// Output tokens in a unary (`stream: false`) body.
pub fn unary_tokens(format: Format, body: &[u8]) -> Result<u64, ErrorKind> {
    match format {
        Format::Sglang => {
            let b: SglFrame<'_> = parse(body)?;
            b.check()?;
            b.meta_info
                .as_ref()
                .and_then(|m| m.completion_tokens)
                .or(b.output_ids.map(|ids| ids.len))
                .ok_or(ErrorKind::InvalidResponse)
        }
        Format::Vllm => {
            let b: VllmBody<'_> = parse(body)?;
            b.check()?;
            Ok(b.usage
                .and_then(|u| u.completion_tokens)
                .unwrap_or(b.choices.tokens))
        }
    }
}

fn parse<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, ErrorKind> {
    serde_json::from_slice(data).map_err(|_| ErrorKind::InvalidResponse)
}

// === SGLang shapes (spec/sglang-native.md §6, §8, §9) ===

#[derive(Deserialize)]
struct SglFrame<'a> {
    #[serde(default)]
    output_ids: Option<IdSummary>,
    #[serde(default, borrow)]
    meta_info: Option<SglMeta<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct SglMeta<'a> {
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default, borrow)]
    finish_reason: Option<Finish<'a>>,
}

impl SglFrame<'_> {
    fn check(&self) -> Result<(), ErrorKind> {
        if self.error.is_some() {
            return Err(ErrorKind::ErrorEvent);
        }
        match self
            .meta_info
            .as_ref()
            .and_then(|m| m.finish_reason.as_ref())
        {
            Some(f) if f.kind() == Some("abort") => Err(ErrorKind::Aborted),
            _ => Ok(()),
        }
    }
}

/// `{"type": "...", ...}` (SGLang) or a bare string; anything else is ignored.
#[derive(Deserialize)]
#[serde(untagged)]
enum Finish<'a> {
    Object {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
    },
    Name(#[serde(borrow)] Cow<'a, str>),
    #[allow(dead_code, reason = "any other shape is accepted and ignored")]
    Other(IgnoredAny),
}

impl Finish<'_> {
    fn kind(&self) -> Option<&str> {
        match self {
            Finish::Object { kind } | Finish::Name(kind) => Some(kind),
            Finish::Other(_) => None,
        }
    }
}

// === vLLM shapes (spec/vllm-native.md §6, §7) ===

#[derive(Deserialize)]
struct VllmBody<'a> {
    #[serde(default, borrow)]
    choices: Choices<'a>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct VllmChoice<'a> {
    #[serde(default)]
    token_ids: Option<IdSummary>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

impl VllmBody<'_> {
    fn check(&self) -> Result<(), ErrorKind> {
        if self.error.is_some() || self.choices.errored {
            return Err(ErrorKind::ErrorEvent);
        }
        if self.choices.aborted {
            return Err(ErrorKind::Aborted);
        }
        Ok(())
    }
}

/// `choices[]` folded while parsing: token count and terminal states, no `Vec`.
#[derive(Default)]
struct Choices<'a> {
    tokens: u64,
    aborted: bool,
    errored: bool,
    _borrow: std::marker::PhantomData<&'a ()>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Choices::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Choices::default();
                while let Some(c) = seq.next_element::<VllmChoice<'de>>()? {
                    out.tokens += c.token_ids.map_or(0, |t| t.len);
                    match c.finish_reason.as_deref() {
                        Some("abort") => out.aborted = true,
                        Some("error") => out.errored = true,
                        _ => {}
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

// === token-id arrays ===

/// A token-id array reduced to its length and first id.
#[derive(Debug, Clone, Copy)]
struct IdSummary {
    len: u64,
    first: Option<u64>,
}

impl<'de> Deserialize<'de> for IdSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdSummary;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of token ids")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdSummary, A::Error> {
                let first = seq.next_element::<u64>()?;
                let mut len = u64::from(first.is_some());
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    len += 1;
                }
                Ok(IdSummary { len, first })
            }
            /// A packed list (`{"b64zstd": …}`, genfront's `sglang-packed`): not decoded; its
            /// answers carry `meta_info.completion_tokens`, which is counted instead.
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<IdSummary, A::Error> {
                let mut packed = false;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    packed |= key == "b64zstd";
                    map.next_value::<IgnoredAny>()?;
                }
                if !packed {
                    return Err(serde::de::Error::custom("not a packed id list"));
                }
                Ok(IdSummary {
                    len: 0,
                    first: None,
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
