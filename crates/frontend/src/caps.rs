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
//! Enforced while the answer is made (the engine work is aborted once over):
//!
//! - `--max-answer-bytes` (default 256 MiB): the bytes of a unary answer, checked when the native
//!   body is built (before anything is sent); over it the request fails with the native 400. A
//!   32k-token answer with k = 20 top logprobs is about 20 MB in SGLang's format.
//! - `--max-stream-bytes` (default 1 GiB): the bytes of one SSE response. SGLang's default
//!   cumulative streaming re-sends the whole answer in every event, so its size is quadratic in
//!   the answer length (a 32k-token cumulative stream is about 4 GB; use
//!   `--incremental-streaming-output` or unary for long answers). Over it the stream ends with
//!   the format's native error event (then `[DONE]`) and the engine work is aborted.

use genfront_format::{GenerateError, SubRequest};
use genfront_protocol::EngineInfo;

/// Default `--max-top-logprobs`: vLLM's default `max_logprobs`.
pub const DEFAULT_MAX_TOP_LOGPROBS: u32 = 20;
/// Default `--max-logprob-token-ids`.
pub const DEFAULT_MAX_LOGPROB_TOKEN_IDS: u32 = 1024;
/// Default `--max-logprob-entries` (see the module docs for the arithmetic).
pub const DEFAULT_MAX_LOGPROB_ENTRIES: u64 = 4 * 1024 * 1024;
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

/// The up-front caps over the engine requests of one client request (see the module docs).
///
/// # Errors
/// The limit's label and a [`GenerateError::Validation`] naming the flag.
pub(crate) fn check_request(
    subs: &[SubRequest],
    engine: &EngineInfo,
    max_top_logprobs: u32,
    max_listed: u32,
    max_entries: u64,
) -> Result<(), CapHit> {
    let mut entries: u64 = 0;
    for sub in subs {
        let r = &sub.request;
        let out = &r.output;
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
        let prompt_len = r.token_ids.len() as u64;
        if let Some(p) = &out.prompt_logprobs {
            let rows = prompt_len.saturating_sub(u64::from(p.start));
            entries = entries.saturating_add(rows.saturating_mul(per_position(p.top_k, listed)));
        }
        if let Some(k) = out.logprobs {
            let max_tokens = match r.stop.max_tokens {
                Some(m) => u64::from(m),
                None => engine
                    .context_limit()
                    .map_or(0, |c| u64::from(c).saturating_sub(prompt_len)),
            };
            let positions = max_tokens.saturating_mul(u64::from(r.sampling.n.max(1)));
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
    Ok(())
}

/// The error of a unary answer of `len` bytes over `--max-answer-bytes`.
pub(crate) fn answer_too_large(len: usize, max: usize) -> GenerateError {
    GenerateError::validation(format!(
        "The answer is {len} bytes; this server sends at most {max} bytes in one answer (--max-answer-bytes)."
    ))
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

    fn check(subs: &[SubRequest], k: u32, entries: u64) -> Result<(), &'static str> {
        check_request(subs, &EngineInfo::default(), k, k, entries).map_err(|(l, _)| l)
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
            20,
            20,
            u64::MAX,
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
        assert!(check_request(std::slice::from_ref(&o), &info, 20, 20, 600).is_ok());
        assert!(check_request(&[o], &info, 20, 20, 599).is_err());
    }

    #[test]
    fn messages_name_the_flags() {
        let (_, e) = check_request(
            &[sub(10, Some(50), None)],
            &EngineInfo::default(),
            20,
            20,
            1,
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
}
