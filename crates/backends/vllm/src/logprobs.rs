//! Logprob JSON in vLLM 0.33.0's `output_mode="tokens"` and `"text"` shapes (spec §6.3), serialised straight
//! from the engine's [`TokenLogprob`]s without building intermediate JSON values.
//!
//! - Output: `GenerateLogProbs` = `{"content":[{"token_id","logprob","rank","top_logprobs":[…]}]}`.
//!   `top_logprobs` lists the sampled token first, then the requested alternatives without it
//!   (vLLM builds a dict keyed by token id), so it has `k` entries, or `k + 1` when the sampled
//!   token is outside the top `k`. Logprobs are clamped to `-9999.0`; NaN becomes `-9999.0` with
//!   `rank: null`; rank 0 is sent as `null`. A position without data gives
//!   `{"token_id": t, "logprob": -9999.0, "rank": null, "top_logprobs": []}`.
//! - Prompt: `prompt_logprobs` = `[null, {"<id>": {"logprob","rank","decoded_token"}}, …]` (first
//!   position `null`, `-inf` clamped to `-9999.0`; `decoded_token` is the engine's decoded text
//!   ([`TokenLogprob::text`]): a string from an engine with a tokenizer, `null` from a
//!   `--tokens-only` one — genfront never decodes).
//! - `output_mode="text"`: [`TextLogprobs`], OpenAI `ChatCompletionLogProbs` with the engine's
//!   decoded token strings.

use genfront_protocol::{Candidate, PromptLogprobs, TokenLogprob};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// The floor vLLM's OpenAI-shaped logprobs use for `-inf` (and NaN).
pub(crate) const FLOOR: f64 = -9999.0;

/// What the request asked for per output position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogprobMode {
    /// Number of alternatives (`logprobs`, or `len(logprob_token_ids)`).
    pub k: usize,
    /// Alternatives are the `logprob_token_ids` ([`TokenLogprob::selected`]), not the top k.
    pub selected: bool,
}

/// `_clamp_logprob`: NaN and values below the floor become the floor.
pub(crate) fn clamp(x: f64) -> f64 {
    if x.is_nan() {
        FLOOR
    } else if x == f64::INFINITY {
        0.0
    } else {
        x.max(FLOOR)
    }
}

fn rank_of(logprob: f64, rank: Option<u32>) -> Option<u32> {
    if logprob.is_nan() {
        None
    } else {
        rank.filter(|r| *r != 0)
    }
}

/// Per-position logprobs of one delta or one whole choice.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Positions<'a> {
    /// One engine delta: entries line up with the tokens (missing tail = no data).
    Delta(Option<&'a [TokenLogprob]>),
    /// A whole unary choice, with gaps where a delta carried no logprobs.
    Gathered(&'a [Option<TokenLogprob>]),
}

impl<'a> Positions<'a> {
    fn get(self, i: usize) -> Option<&'a TokenLogprob> {
        match self {
            Positions::Delta(v) => v.and_then(|v| v.get(i)),
            Positions::Gathered(v) => v.get(i).and_then(Option::as_ref),
        }
    }
}

/// `GenerateLogProbs` for `tokens`.
pub(crate) struct Logprobs<'a> {
    pub tokens: &'a [u32],
    pub positions: Positions<'a>,
    pub mode: LogprobMode,
}

impl Serialize for Logprobs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("content", &Content(self))?;
        map.end()
    }
}

struct Content<'a, 'b>(&'b Logprobs<'a>);

impl Serialize for Content<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let lp = self.0;
        let mut seq = s.serialize_seq(Some(lp.tokens.len()))?;
        for (i, token) in lp.tokens.iter().enumerate() {
            let entry = lp.positions.get(i).filter(|e| e.token_id == *token);
            seq.serialize_element(&Entry {
                token: *token,
                entry,
                mode: lp.mode,
            })?;
        }
        seq.end()
    }
}

struct Entry<'a> {
    token: u32,
    entry: Option<&'a TokenLogprob>,
    mode: LogprobMode,
}

#[derive(Serialize)]
struct Alt {
    token_id: u32,
    logprob: f64,
    rank: Option<u32>,
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("token_id", &self.token)?;
        let Some(e) = self.entry else {
            map.serialize_entry("logprob", &FLOOR)?;
            map.serialize_entry("rank", &None::<u32>)?;
            map.serialize_entry("top_logprobs", &[(); 0])?;
            return map.end();
        };
        let alternatives = alternatives(e, self.mode);
        let rank = e.rank.or_else(|| {
            alternatives
                .iter()
                .find(|c| c.token_id == e.token_id)
                .and_then(|c| c.rank)
        });
        let sampled = Alt {
            token_id: e.token_id,
            logprob: clamp(e.logprob),
            rank: rank_of(e.logprob, rank),
        };
        map.serialize_entry("logprob", &sampled.logprob)?;
        map.serialize_entry("rank", &sampled.rank)?;
        map.serialize_entry(
            "top_logprobs",
            &TopList {
                sampled: &sampled,
                alternatives,
                dedup: self.mode.selected,
            },
        )?;
        map.end()
    }
}

fn alternatives(e: &TokenLogprob, mode: LogprobMode) -> &[Candidate] {
    let source = if mode.selected { &e.selected } else { &e.top };
    &source[..source.len().min(mode.k)]
}

struct TopList<'a> {
    sampled: &'a Alt,
    alternatives: &'a [Candidate],
    dedup: bool,
}

impl Serialize for TopList<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        seq.serialize_element(self.sampled)?;
        for (i, c) in self.alternatives.iter().enumerate() {
            if c.token_id == self.sampled.token_id
                || (self.dedup
                    && self.alternatives[..i]
                        .iter()
                        .any(|p| p.token_id == c.token_id))
            {
                continue;
            }
            seq.serialize_element(&Alt {
                token_id: c.token_id,
                logprob: clamp(c.logprob),
                rank: rank_of(c.logprob, c.rank),
            })?;
        }
        seq.end()
    }
}

/// `prompt_logprobs` for a prompt of `prompt_len` tokens: one entry per position, `null` for
/// position 0 and for positions the engine gave no data for.
pub(crate) struct PromptLogprobsJson<'a> {
    pub prompt_len: usize,
    pub data: Option<&'a PromptLogprobs>,
    pub k: usize,
}

impl Serialize for PromptLogprobsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.prompt_len))?;
        for pos in 0..self.prompt_len {
            let entry = self
                .data
                .filter(|_| pos > 0)
                .and_then(|d| {
                    pos.checked_sub(d.start as usize)
                        .and_then(|i| d.entries.get(i))
                })
                .and_then(Option::as_ref);
            match entry {
                None => seq.serialize_element(&None::<()>)?,
                Some(e) => seq.serialize_element(&PromptEntry {
                    entry: e,
                    k: self.k,
                })?,
            }
        }
        seq.end()
    }
}

struct PromptEntry<'a> {
    entry: &'a TokenLogprob,
    k: usize,
}

#[derive(Serialize)]
struct PromptLogprob<'a> {
    logprob: f64,
    rank: Option<u32>,
    decoded_token: Option<&'a str>,
}

impl Serialize for PromptEntry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.entry;
        let top = &e.top[..e.top.len().min(self.k)];
        let mut map = s.serialize_map(None)?;
        let rank = e.rank.or_else(|| {
            top.iter()
                .find(|c| c.token_id == e.token_id)
                .and_then(|c| c.rank)
        });
        map.serialize_entry(
            &e.token_id.to_string(),
            &PromptLogprob {
                logprob: clamp(e.logprob),
                rank,
                decoded_token: e.text.as_deref(),
            },
        )?;
        for c in top.iter().filter(|c| c.token_id != e.token_id) {
            map.serialize_entry(
                &c.token_id.to_string(),
                &PromptLogprob {
                    logprob: clamp(c.logprob),
                    rank: c.rank,
                    decoded_token: c.text.as_deref(),
                },
            )?;
        }
        map.end()
    }
}

/// `ChatCompletionLogProbs` for `output_mode="text"` (`_create_text_logprobs`, spec §6.3):
/// `{"content":[{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}]}`.
///
/// - `token` is the engine's decoded text of the token ([`TokenLogprob::text`] /
///   [`Candidate::text`]), `bytes` its UTF-8 bytes (`token.encode("utf-8")`). A token the engine
///   gave no text for (an engine of another kind) is vLLM's placeholder `"token_id:N"` with
///   `bytes: null`, as vLLM writes it without a tokenizer; genfront never decodes.
/// - `top_logprobs`: the sampled token first, then the alternatives in the engine's order
///   without it, `max(k, 1)` entries at most (vLLM cuts its per-position dict, which starts
///   with the sampled token, to that many). No `rank` in this shape.
/// - A position without data: `{"token", "logprob": -9999.0, "bytes", "top_logprobs": []}`.
pub(crate) struct TextLogprobs<'a>(pub Logprobs<'a>);

impl Serialize for TextLogprobs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("content", &TextContent(&self.0))?;
        map.end()
    }
}

struct TextContent<'a, 'b>(&'b Logprobs<'a>);

impl Serialize for TextContent<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let lp = self.0;
        let mut seq = s.serialize_seq(Some(lp.tokens.len()))?;
        for (i, token) in lp.tokens.iter().enumerate() {
            let entry = lp.positions.get(i).filter(|e| e.token_id == *token);
            seq.serialize_element(&TextEntry {
                token: *token,
                entry,
                mode: lp.mode,
            })?;
        }
        seq.end()
    }
}

struct TextEntry<'a> {
    token: u32,
    entry: Option<&'a TokenLogprob>,
    mode: LogprobMode,
}

/// One `{"token","logprob","bytes"}`.
struct TextAlt<'a> {
    token_id: u32,
    text: Option<&'a str>,
    logprob: f64,
}

impl TextAlt<'_> {
    fn write<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        match self.text {
            Some(t) => {
                map.serialize_entry("token", t)?;
                map.serialize_entry("logprob", &clamp(self.logprob))?;
                map.serialize_entry("bytes", t.as_bytes())?;
            }
            None => {
                map.serialize_entry("token", &format!("token_id:{}", self.token_id))?;
                map.serialize_entry("logprob", &clamp(self.logprob))?;
                map.serialize_entry("bytes", &None::<()>)?;
            }
        }
        Ok(())
    }
}

impl Serialize for TextAlt<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        self.write(&mut map)?;
        map.end()
    }
}

impl Serialize for TextEntry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(4))?;
        let Some(e) = self.entry else {
            TextAlt {
                token_id: self.token,
                text: None,
                logprob: FLOOR,
            }
            .write(&mut map)?;
            map.serialize_entry("top_logprobs", &[(); 0])?;
            return map.end();
        };
        let sampled = TextAlt {
            token_id: e.token_id,
            text: e.text.as_deref(),
            logprob: e.logprob,
        };
        sampled.write(&mut map)?;
        let source = if self.mode.selected {
            &e.selected
        } else {
            &e.top
        };
        let others: Vec<TextAlt<'_>> = source
            .iter()
            // An id-bearing list (another engine) holds the sampled token at its rank.
            .filter(|c| c.token_id == Candidate::UNKNOWN_ID || c.token_id != e.token_id)
            .map(|c| TextAlt {
                token_id: c.token_id,
                text: c.text.as_deref(),
                logprob: c.logprob,
            })
            .collect();
        let width = self.mode.k.max(1);
        let top: Vec<&TextAlt<'_>> = std::iter::once(&sampled)
            .chain(others.iter())
            .take(width)
            .collect();
        map.serialize_entry("top_logprobs", &top)?;
        map.end()
    }
}
