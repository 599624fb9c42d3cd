//! Output caps: bounds on what one client request may make the engine and genfront produce.
//!
//! Checked up front, on the projected engine requests (so one rule for every format, after the
//! format's own native checks such as vLLM's `max_logprobs`), each a 400 in the route's native
//! envelope naming its flag, counted in `genfront_limit_hits_total{limit}`:
//!
//! - `--max-top-logprobs` (default 20, vLLM's default `max_logprobs`): top logprobs per position
//!   (output `logprobs`/`top_logprobs_num`, prompt `prompt_logprobs`). SGLang itself
//!   accepts `top_logprobs_num` up to the vocabulary, which is how an 11 KB request (a 2k-token
//!   prompt with `logprob_start_len: 0` and `top_logprobs_num` = vocabulary) made 19 GB.
//! - `--max-logprob-token-ids` (default 1024): the listed ids whose logprobs are reported at
//!   every position (SGLang `token_ids_logprob`, vLLM `logprob_token_ids`; SGLang's own fixtures
//!   list a few dozen, hence a larger default than the top-k cap).
//! - `--max-logprob-entries` (default 4 Mi = 4,194,304): logprob entries of the whole request,
//!   summed over its engine requests: prompt rows × per-position entries, rows =
//!   `prompt_len − start` (SGLang `logprob_start_len`, vLLM from 0), plus, when output logprobs are
//!   on, `n × max_tokens` × per-position entries; per-position entries = `max(k, 1)` + listed ids.
//!   An unknown `max_tokens` counts the rest of the context (0 when the context is unknown: the
//!   byte caps below still bound it). The default passes ordinary RL traffic with room: a
//!   32k-token prompt with prompt logprobs at k = 20 plus a 32k-token answer at k = 20 is
//!   2 × 32,768 × 20 = 1.3 Mi entries; three such requests fit in one batch.
//!
//! - `--max-routed-expert-entries` (default 64 Mi = 67,108,864): routed-expert ids of the whole
//!   request (MoE routing replay, SGLang `return_routed_experts`, vLLM's routed experts), summed
//!   over its engine requests: rows × width, rows = `prompt_len − routed_experts_start` plus
//!   `max_tokens` (an unknown `max_tokens` counts the rest of the context), times `n`; width =
//!   layers × top-k of the model. genfront's engine facts do not carry the MoE shape, so the
//!   width is taken as [`ASSUMED_EXPERT_WIDTH`] = 1,024 (above every common MoE model:
//!   DeepSeek-V3 58 × 8 = 464, Qwen3-235B-A22B 94 × 8 = 752). The default passes a 32k-token
//!   prompt plus a 32k-token answer (65,536 rows × 1,024 = 64 Mi); on a narrower model the cap
//!   is generous by the ratio. Routed experts go out as base64 of 4-byte ids (~5.3 bytes each),
//!   so `--max-answer-bytes` bounds them again while the answer is made.
//!
//! Enforced while the answer is made (the engine work is aborted once over):
//!
//! - `--max-answer-bytes` (default 256 MiB): the bytes of a unary answer, tripped **while it is
//!   accumulated**, on a running estimate that is never below the real size
//!   ([`AnswerBudget`]: a base per engine request from its prompt length, plus each engine
//!   output's bound from [`output_bound`], counted before the output is folded), so an answer
//!   over the cap is never built; the exact size is checked again once the body is built. Over
//!   it the request fails with the native 400 and the engine work is aborted. The estimate is
//!   about 2–3× the real size for logprob-heavy answers in SGLang's shape (its per-entry
//!   allowances fit vLLM's longer keys too): a 32k-token answer with k = 20 top logprobs is
//!   about 20 MB in SGLang's format and estimated below 60 MB.
//! - `--max-stream-bytes` (default 1 GiB): the bytes of one SSE response. SGLang's default
//!   cumulative streaming re-sends the whole answer in every event, so its size is quadratic in
//!   the answer length (a 32k-token cumulative stream is about 4 GB; use
//!   `--incremental-streaming-output` or unary for long answers). Over it the stream ends with
//!   the format's native error event (then `[DONE]`) and the engine work is aborted.

use genfront_format::{GenerateError, SubRequest};
use genfront_protocol::{Candidate, EngineInfo, EngineOutput, TokenLogprob};
use serde_json::Value;

/// Default `--max-top-logprobs`: vLLM's default `max_logprobs`.
pub const DEFAULT_MAX_TOP_LOGPROBS: u32 = 20;
/// Default `--max-logprob-token-ids`.
pub const DEFAULT_MAX_LOGPROB_TOKEN_IDS: u32 = 1024;
/// Default `--max-logprob-entries` (see the module docs for the arithmetic).
pub const DEFAULT_MAX_LOGPROB_ENTRIES: u64 = 4 * 1024 * 1024;
/// Default `--max-routed-expert-entries`: 64 Mi ids (see the module docs).
pub const DEFAULT_MAX_ROUTED_EXPERT_ENTRIES: u64 = 64 * 1024 * 1024;
/// Routed-expert ids per row (layers × top-k) assumed by the up-front routed-expert cap: the
/// engine facts do not carry the MoE shape (see the module docs).
pub const ASSUMED_EXPERT_WIDTH: u64 = 1024;
/// Default `--max-answer-bytes`: 256 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;
/// Default `--max-stream-bytes`: 1 GiB.
pub const DEFAULT_MAX_STREAM_BYTES: u64 = 1024 * 1024 * 1024;

/// A refused request: the limit's metric label (the flag without dashes) and the native error.
pub(crate) type CapHit = (&'static str, GenerateError);

/// Logprob entries of one position: `max(k, 1)` top entries plus the listed ids.
fn per_position(k: u32, listed: usize) -> u64 {
    u64::from(k.max(1)).saturating_add(listed as u64)
}

/// The up-front caps of one client request (flag values).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpFront {
    /// `--max-top-logprobs`.
    pub max_top_logprobs: u32,
    /// `--max-logprob-token-ids`.
    pub max_listed: u32,
    /// `--max-logprob-entries`.
    pub max_entries: u64,
    /// `--max-routed-expert-entries`.
    pub max_routed: u64,
}

/// The up-front caps over the engine requests of one client request (see the module docs).
///
/// # Errors
/// The limit's label and a [`GenerateError::Validation`] naming the flag.
pub(crate) fn check_request(
    subs: &[SubRequest],
    engine: &EngineInfo,
    caps: UpFront,
) -> Result<(), CapHit> {
    let UpFront {
        max_top_logprobs,
        max_listed,
        max_entries,
        max_routed,
    } = caps;
    let mut entries: u64 = 0;
    let mut routed: u64 = 0;
    for sub in subs {
        let r = &sub.request;
        let out = &r.output;
        let n = u64::from(r.sampling.n.max(1));
        let prompt_len = r.token_ids.len() as u64;
        // An unknown `max_tokens` counts the rest of the context (0 when that is unknown too).
        let max_tokens = match r.stop.max_tokens {
            Some(m) => u64::from(m),
            None => engine
                .context_limit()
                .map_or(0, |c| u64::from(c).saturating_sub(prompt_len)),
        };
        if out.routed_experts {
            let rows = prompt_len
                .saturating_sub(u64::from(out.routed_experts_start))
                .saturating_add(max_tokens);
            routed =
                routed.saturating_add(rows.saturating_mul(ASSUMED_EXPERT_WIDTH).saturating_mul(n));
        }
        let k = out
            .logprobs
            .unwrap_or(0)
            .max(out.prompt_logprobs.as_ref().map_or(0, |p| p.top_k));
        if k > max_top_logprobs {
            // `u32::MAX` is vLLM's `logprobs: -1` (the whole vocabulary).
            let asked = if k == u32::MAX {
                "the whole vocabulary's logprobs (-1)".to_owned()
            } else {
                format!("{k} top logprobs")
            };
            return Err((
                "max_top_logprobs",
                GenerateError::validation(format!(
                    "The request asks for {asked} per position; this server returns at most {max_top_logprobs} (--max-top-logprobs)."
                )),
            ));
        }
        let wants_logprobs = out.logprobs.is_some() || out.prompt_logprobs.is_some();
        let listed = if wants_logprobs {
            out.token_ids_logprobs.len()
        } else {
            0
        };
        if listed > max_listed as usize {
            return Err((
                "max_logprob_token_ids",
                GenerateError::validation(format!(
                    "The request asks for the logprobs of {listed} listed token ids per position; this server returns at most {max_listed} (--max-logprob-token-ids)."
                )),
            ));
        }
        if let Some(p) = &out.prompt_logprobs {
            let rows = prompt_len.saturating_sub(u64::from(p.start));
            entries = entries.saturating_add(rows.saturating_mul(per_position(p.top_k, listed)));
        }
        if let Some(k) = out.logprobs {
            let positions = max_tokens.saturating_mul(n);
            entries = entries.saturating_add(positions.saturating_mul(per_position(k, listed)));
        }
    }
    if entries > max_entries {
        return Err((
            "max_logprob_entries",
            GenerateError::validation(format!(
                "The request asks for {entries} logprob entries (prompt positions and output tokens × logprobs per position, over all engine requests); this server returns at most {max_entries} (--max-logprob-entries)."
            )),
        ));
    }
    if routed > max_routed {
        return Err((
            "max_routed_expert_entries",
            GenerateError::validation(format!(
                "The request asks for up to {routed} routed-expert ids (prompt and output rows × {ASSUMED_EXPERT_WIDTH} ids per row, over all engine requests); this server returns at most {max_routed} (--max-routed-expert-entries)."
            )),
        ));
    }
    Ok(())
}

/// The error of a unary answer of `len` bytes over `--max-answer-bytes`.
pub(crate) fn answer_too_large(len: usize, max: usize) -> GenerateError {
    GenerateError::validation(format!(
        "The answer is {len} bytes; this server sends at most {max} bytes in one answer (--max-answer-bytes)."
    ))
}

/// The error of a unary answer refused while it was accumulated: its estimate (never below the
/// real size) passed `--max-answer-bytes`.
pub(crate) fn answer_estimate_too_large(estimate: u64, max: usize) -> GenerateError {
    GenerateError::validation(format!(
        "The answer would pass the limit: its estimate reached {estimate} bytes while it was assembled; this server sends at most {max} bytes in one answer (--max-answer-bytes)."
    ))
}

// Per-item allowances of the answer estimate, in bytes of JSON. Each is at least what the
// largest native shape spends on the item (SGLang's `[logprob, id, text]` triples and lists;
// vLLM's `{"token_id":…,"logprob":…,"rank":…}` alternatives, `"<id>":{"logprob":…,"rank":…,
// "decoded_token":…}` prompt entries and `{"token":…,"bytes":[…],…}` text-mode entries).

/// A float: the longest shortest-round-trip `f64` (`-2.2250738585072014e-308`), 24 bytes.
const FLOAT: u64 = 24;
/// Keys, brackets and separators of one candidate: vLLM's text-mode alternative
/// `{"token":…,"token_id":…,"logprob":…,"rank":…,"bytes":[…]},` needs 53 (its text and bytes are
/// in [`text_bound`]), its prompt entry `"<id>":{"logprob":…,"rank":…,"decoded_token":…},` 41,
/// its token-mode alternative `{"token_id":…,"logprob":…,"rank":…},` 33, SGLang's triple
/// `[…,…,…],` 5.
const CANDIDATE_FRAME: u64 = 53;
/// Keys, brackets and separators of one position beyond its candidates (vLLM's
/// `{"token_id":…,"logprob":…,"rank":…,"top_logprobs":[…]}` and SGLang's per-position lists).
const POSITION_FRAME: u64 = 72;
/// A rank slot of unknown value (`null` or up to 10 digits).
const RANK: u64 = 10;
/// A string's bytes: JSON escapes take at most 6 bytes per input byte (`\u00XX`), and vLLM's
/// text mode repeats the token as a `bytes` list (at most 4 per byte: `255,`).
const TEXT_PER_BYTE: u64 = 10;
/// A routed-expert id: base64 of 4 bytes (5⅓ bytes) rounded up.
const EXPERT_ID: u64 = 6;
/// Fixed part of one engine request's answer: finish reason, usage, timings, model, keys
/// (about 400 bytes in SGLang's shape; the client's id is counted apart).
const PER_REQUEST: u64 = 1024;
/// Fixed part of one choice (vLLM's per-choice `index`, `finish_reason`, `stop_reason`,
/// `null` fields).
const PER_CHOICE: u64 = 512;
/// Per prompt token, for echoes of the prompt (SGLang `return_prompt_token_ids`, vLLM's
/// `prompt_token_ids` and the `null` entries of its prompt logprobs before the start): an id
/// with its comma plus a `null,`.
const PER_PROMPT_TOKEN: u64 = 16;

/// Decimal digits of `v` (1 for 0).
fn digits(v: u32) -> u64 {
    v.checked_ilog10().map_or(1, |d| d as u64 + 1)
}

fn text_bound(text: Option<&str>) -> u64 {
    text.map_or(4, |t| (t.len() as u64).saturating_mul(TEXT_PER_BYTE) + 2)
}

/// A rank slot: its digits, or `null` (4).
fn rank_bound(rank: Option<u32>) -> u64 {
    rank.map_or(4, digits)
}

fn candidate_bound(c: &Candidate) -> u64 {
    CANDIDATE_FRAME
        + digits(c.token_id)
        + FLOAT
        + rank_bound(c.rank)
        + text_bound(c.text.as_deref())
}

fn position_bound(lp: &TokenLogprob) -> u64 {
    // The sampled token twice (vLLM lists it first among its alternatives too).
    // Its rank may come from a candidate's (vLLM), so its slot is the widest.
    let own = 2 * (CANDIDATE_FRAME + digits(lp.token_id) + FLOAT + RANK)
        + 2 * text_bound(lp.text.as_deref());
    let alternatives: u64 = lp.top.iter().chain(&lp.selected).map(candidate_bound).sum();
    POSITION_FRAME + own + alternatives
}

/// A bound on the JSON bytes of `v` (strings at the escape worst case, numbers at 24 bytes).
fn json_bound(v: &Value) -> u64 {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => FLOAT,
        Value::String(s) => (s.len() as u64).saturating_mul(6) + 2,
        Value::Array(items) => 2 + items.iter().map(|i| json_bound(i) + 1).sum::<u64>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| (k.len() as u64) * 6 + 4 + json_bound(v))
                .sum::<u64>()
        }
    }
}

/// A cheap size class of one engine output, O(positions): token ids plus logprob candidates,
/// prompt entries, routed-expert ids / 16 and mask ids. Decides whether folding the output (and
/// computing its [`output_bound`]) runs on the blocking pool.
pub(crate) fn output_weight(out: &EngineOutput) -> u64 {
    let per = |lp: &TokenLogprob| 2 + (lp.top.len() + lp.selected.len()) as u64;
    let mut w = out.token_ids.len() as u64;
    if let Some(lps) = &out.logprobs {
        w += lps.iter().map(per).sum::<u64>();
    }
    if let Some(p) = &out.prompt_logprobs {
        w += p
            .entries
            .iter()
            .map(|e| e.as_ref().map_or(1, per))
            .sum::<u64>();
    }
    if let Some(re) = &out.routed_experts {
        w += re.ids.len() as u64 / 16;
    }
    if let Some(masks) = &out.sampling_mask {
        w += masks.iter().map(|m| 1 + m.len() as u64).sum::<u64>();
    }
    w
}

/// An upper bound on the bytes `out` adds to a unary answer in any built-in format (see the
/// allowances above): token ids at their digits, every logprob position and candidate at its
/// frame plus float, rank and text allowances, routed experts at 6 bytes per id, mask sets at
/// their ids' digits, and the engine's native frame (`engine_data`) counted whole (formats pass
/// only part of it through, so the estimate over-counts there).
pub(crate) fn output_bound(out: &EngineOutput) -> u64 {
    let mut b: u64 = out.token_ids.iter().map(|&t| digits(t) + 1).sum();
    if let Some(lps) = &out.logprobs {
        b += lps.iter().map(position_bound).sum::<u64>();
    }
    if let Some(p) = &out.prompt_logprobs {
        b += p
            .entries
            .iter()
            .map(|e| {
                e.as_ref().map_or(
                    POSITION_FRAME + 2 * (CANDIDATE_FRAME + 10 + FLOAT + RANK),
                    position_bound,
                )
            })
            .sum::<u64>();
        b += 2 * text_bound(p.first_text.as_deref());
    }
    if let Some(re) = &out.routed_experts {
        b += (re.ids.len() as u64).saturating_mul(EXPERT_ID) + 256;
    }
    if let Some(masks) = &out.sampling_mask {
        b += masks
            .iter()
            .map(|m| 3 + m.iter().map(|&t| digits(t) + 1).sum::<u64>())
            .sum::<u64>();
    }
    if let Some(v) = &out.engine_data {
        b += json_bound(v);
    }
    if let Some(v) = &out.handoff {
        b += json_bound(v);
    }
    b
}

/// The running estimate of one unary answer against `--max-answer-bytes`: never below the
/// bytes the format will write (a base per engine request, see [`AnswerBudget::new`], plus
/// [`output_bound`] of every output folded).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerBudget {
    /// The estimate so far, in bytes.
    pub estimate: u64,
    /// `--max-answer-bytes`.
    pub max: usize,
}

impl AnswerBudget {
    /// The base of an answer to `subs`: per engine request 1 KiB (finish reason, usage,
    /// timings, model, keys), 512 bytes per choice, its client-visible id at the escape worst case
    /// (6 bytes per byte, SGLang `meta_info.id`, vLLM `request_id`) and 16 bytes per prompt token
    /// (prompt echoes).
    pub(crate) fn new(subs: &[SubRequest], max: usize) -> Self {
        let estimate = subs
            .iter()
            .map(|s| {
                let r = &s.request;
                PER_REQUEST
                    + PER_CHOICE * u64::from(r.sampling.n.max(1))
                    + (s.abort_key.len() as u64).saturating_mul(6)
                    + (r.token_ids.len() as u64).saturating_mul(PER_PROMPT_TOKEN)
            })
            .fold(0u64, u64::saturating_add);
        Self { estimate, max }
    }

    /// Add `bytes`; the refusal once the estimate passes the cap.
    ///
    /// # Errors
    /// [`answer_estimate_too_large`] when the estimate passes `max`.
    pub(crate) fn add(&mut self, bytes: u64) -> Result<(), GenerateError> {
        self.estimate = self.estimate.saturating_add(bytes);
        if self.estimate > self.max as u64 {
            Err(answer_estimate_too_large(self.estimate, self.max))
        } else {
            Ok(())
        }
    }
}

/// The error event of a stream that would pass `--max-stream-bytes`.
pub(crate) fn stream_too_large(max: u64) -> GenerateError {
    GenerateError::validation(format!(
        "The stream reached the limit of {max} bytes of one response (--max-stream-bytes); use incremental streaming or a unary request for long answers."
    ))
}

#[cfg(test)]
mod tests {
    use genfront_protocol::{EngineRequest, PromptLogprobOptions};

    use super::*;

    fn sub(prompt: usize, logprobs: Option<u32>, prompt_k: Option<(u32, u32)>) -> SubRequest {
        let mut request = EngineRequest {
            token_ids: vec![1; prompt],
            ..EngineRequest::default()
        };
        request.sampling.n = 1;
        request.stop.max_tokens = Some(100);
        request.output.logprobs = logprobs;
        request.output.prompt_logprobs =
            prompt_k.map(|(start, top_k)| PromptLogprobOptions { start, top_k });
        SubRequest {
            abort_key: String::new(),
            request,
        }
    }

    fn caps(k: u32, entries: u64) -> UpFront {
        UpFront {
            max_top_logprobs: k,
            max_listed: k,
            max_entries: entries,
            max_routed: u64::MAX,
        }
    }

    fn check(subs: &[SubRequest], k: u32, entries: u64) -> Result<(), &'static str> {
        check_request(subs, &EngineInfo::default(), caps(k, entries)).map_err(|(l, _)| l)
    }

    #[test]
    fn top_logprobs_per_position() {
        assert_eq!(
            check(&[sub(10, Some(21), None)], 20, u64::MAX),
            Err("max_top_logprobs")
        );
        assert_eq!(
            check(&[sub(10, None, Some((0, 21)))], 20, u64::MAX),
            Err("max_top_logprobs")
        );
        assert_eq!(
            check(&[sub(10, Some(20), Some((0, 20)))], 20, u64::MAX),
            Ok(())
        );
        let mut listed = sub(10, Some(0), None);
        listed.request.output.token_ids_logprobs = vec![1; 21];
        assert_eq!(
            check(std::slice::from_ref(&listed), 20, u64::MAX),
            Err("max_logprob_token_ids")
        );
        // Listed ids without logprobs produce nothing.
        listed.request.output.logprobs = None;
        assert_eq!(check(&[listed], 20, u64::MAX), Ok(()));
        // vLLM's `logprobs: -1` (the whole vocabulary) is named as such, not as 2^32 - 1.
        let all = check_request(
            &[sub(10, Some(u32::MAX), None)],
            &EngineInfo::default(),
            caps(20, u64::MAX),
        );
        let Err((_, err)) = all else {
            panic!("refused")
        };
        let text = format!("{err:?}");
        assert!(
            text.contains("whole vocabulary") && !text.contains("4294967295"),
            "{text}"
        );
    }

    #[test]
    fn entries_count_prompt_rows_and_output_tokens() {
        // Prompt rows (1000 - 200) × 5 = 4000.
        let p = sub(1000, None, Some((200, 5)));
        assert_eq!(check(std::slice::from_ref(&p), 20, 4000), Ok(()));
        assert_eq!(
            check(std::slice::from_ref(&p), 20, 3999),
            Err("max_logprob_entries")
        );
        // k = 0 still reports one entry per position.
        assert_eq!(
            check(&[sub(1000, None, Some((0, 0)))], 20, 999),
            Err("max_logprob_entries")
        );
        // Output: n × max_tokens × max(k, 1) = 3 × 100 × 2 = 600, summed over the subs.
        let mut o = sub(10, Some(2), None);
        o.request.sampling.n = 3;
        assert_eq!(check(std::slice::from_ref(&o), 20, 600), Ok(()));
        assert_eq!(check(&[o.clone(), p], 20, 4599), Err("max_logprob_entries"));
        // Unknown max_tokens counts the rest of the context.
        o.request.stop.max_tokens = None;
        let info = EngineInfo {
            max_context_len: 110,
            ..EngineInfo::default()
        };
        assert!(check_request(std::slice::from_ref(&o), &info, caps(20, 600)).is_ok());
        assert!(check_request(&[o], &info, caps(20, 599)).is_err());
    }

    #[test]
    fn messages_name_the_flags() {
        let (_, e) = check_request(
            &[sub(10, Some(50), None)],
            &EngineInfo::default(),
            caps(20, 1),
        )
        .expect_err("over");
        assert!(e.public_message().contains("--max-top-logprobs"));
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST);
        assert!(
            answer_too_large(10, 5)
                .public_message()
                .contains("--max-answer-bytes")
        );
        assert!(
            stream_too_large(5)
                .public_message()
                .contains("--max-stream-bytes")
        );
    }

    #[test]
    fn routed_experts_count_prompt_and_output_rows_at_the_assumed_width() {
        let mut r = sub(1000, None, None);
        r.request.output.routed_experts = true;
        r.request.output.routed_experts_start = 200;
        r.request.sampling.n = 2;
        // (1000 - 200 + 100) rows × 1024 × n = 2.
        let want = 900 * ASSUMED_EXPERT_WIDTH * 2;
        let at = |r: &SubRequest, max| {
            check_request(
                std::slice::from_ref(r),
                &EngineInfo::default(),
                UpFront {
                    max_routed: max,
                    ..caps(20, u64::MAX)
                },
            )
        };
        assert!(at(&r, want).is_ok());
        let Err((label, err)) = at(&r, want - 1) else {
            panic!("over the routed-expert cap")
        };
        assert_eq!(label, "max_routed_expert_entries");
        assert!(err.public_message().contains("--max-routed-expert-entries"));
        assert_eq!(err.status(), http::StatusCode::BAD_REQUEST);
        // Not asked: nothing counted.
        r.request.output.routed_experts = false;
        assert!(at(&r, 0).is_ok());
        // Ordinary RL traffic passes the default: a 32k prompt plus a 32k answer.
        let mut rl = sub(32 * 1024, None, None);
        rl.request.stop.max_tokens = Some(32 * 1024);
        rl.request.output.routed_experts = true;
        assert!(
            check_request(
                &[rl],
                &EngineInfo::default(),
                UpFront {
                    max_routed: DEFAULT_MAX_ROUTED_EXPERT_ENTRIES,
                    ..caps(20, u64::MAX)
                },
            )
            .is_ok()
        );
    }

    fn worst_candidate(id: u32) -> Candidate {
        Candidate {
            token_id: id,
            logprob: -2.225_073_858_507_201_4e-308,
            rank: Some(u32::MAX),
            text: Some("\u{1}\"".to_owned()),
        }
    }

    #[test]
    fn the_output_bound_covers_the_widest_rendering_of_each_item() {
        // A vLLM-shaped alternative at its longest, with its text in vLLM's text mode
        // (escaped string plus its `bytes` list), is within one candidate's allowance.
        let c = worst_candidate(u32::MAX);
        let rendered = format!(
            "{{\"token\":{},\"token_id\":{},\"logprob\":{},\"rank\":{},\"bytes\":[1,34]}},",
            serde_json::to_string(c.text.as_deref().unwrap_or_default()).unwrap_or_default(),
            c.token_id,
            serde_json::to_string(&c.logprob).unwrap_or_default(),
            u32::MAX
        );
        assert!(
            candidate_bound(&c) >= rendered.len() as u64,
            "{} < {}",
            candidate_bound(&c),
            rendered.len()
        );
        let out = EngineOutput {
            token_ids: vec![u32::MAX, 7],
            logprobs: Some(vec![
                TokenLogprob {
                    token_id: u32::MAX,
                    logprob: -1.0,
                    rank: Some(3),
                    top: vec![worst_candidate(1); 4],
                    selected: vec![worst_candidate(2)],
                    text: None,
                };
                2
            ]),
            ..EngineOutput::default()
        };
        let weight = output_weight(&out);
        assert_eq!(weight, 2 + 2 * (2 + 5));
        let bound = output_bound(&out);
        // Ids (11 + 2 bytes) + 2 positions × (frame + sampled twice + 5 candidates).
        assert!(bound >= 13 + 2 * (POSITION_FRAME + 5 * candidate_bound(&worst_candidate(1))));
        // The budget trips once the running estimate passes the cap, not before.
        let mut budget = AnswerBudget {
            estimate: 0,
            max: usize::try_from(bound).unwrap_or(usize::MAX),
        };
        assert!(budget.add(bound).is_ok());
        let err = budget.add(1).expect_err("over");
        assert!(err.public_message().contains("--max-answer-bytes"));
    }
}
