//! Low-level JSON writers for the response path: numbers, strings and SGLang's logprob triples
//! written straight into byte buffers, so a token's data is rendered once and then only copied.

use genfront_protocol::{Candidate, FinishReason, StopMatch, TokenLogprob};
use serde::Serialize;

/// Append `v` as JSON. Writing into a `Vec` cannot fail, and the values written here (numbers,
/// strings, `serde_json::Value`s) always serialize.
pub(crate) fn json<T: Serialize + ?Sized>(buf: &mut Vec<u8>, v: &T) {
    let _ = serde_json::to_writer(&mut *buf, v);
}

/// Append a `u32`.
pub(crate) fn u32(buf: &mut Vec<u8>, v: u32) {
    json(buf, &v);
}

/// Append an `f64` the way orjson does: shortest round-trip digits; `NaN`/`±inf` become `null`.
pub(crate) fn f64(buf: &mut Vec<u8>, v: f64) {
    json(buf, &v);
}

/// Append a list separator when `buf` already holds list items.
pub(crate) fn sep(buf: &mut Vec<u8>) {
    if !buf.is_empty() {
        buf.push(b',');
    }
}

/// `[logprob, token_id, text]`: the text slot is the engine's decoded token text when it reported
/// one (SGLang `return_text_in_logprobs` on an engine with a tokenizer: `detokenize_logprob_tokens`
/// decodes each id on its own), else `null` (not asked, `--skip-tokenizer-init`, the mock) —
/// genfront has no tokenizer and never fills it itself.
pub(crate) fn triple(buf: &mut Vec<u8>, logprob: Option<f64>, token_id: u32, text: Option<&str>) {
    buf.push(b'[');
    match logprob {
        Some(lp) => f64(buf, lp),
        None => buf.extend_from_slice(b"null"),
    }
    buf.push(b',');
    u32(buf, token_id);
    buf.push(b',');
    match text {
        Some(t) => json(buf, t),
        None => buf.extend_from_slice(b"null"),
    }
    buf.push(b']');
}

/// One position of `*_top_logprobs` / `*_token_ids_logprobs`: `null` when empty (SGLang's
/// `detokenize_top_logprobs_tokens`), else a list of triples.
pub(crate) fn candidates(buf: &mut Vec<u8>, cands: Option<&[Candidate]>) {
    match cands {
        Some(c) if !c.is_empty() => {
            buf.push(b'[');
            for (i, cand) in c.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                triple(buf, Some(cand.logprob), cand.token_id, cand.text.as_deref());
            }
            buf.push(b']');
        }
        _ => buf.extend_from_slice(b"null"),
    }
}

/// Append the three per-position renderings of `entry` to the three lists (`lp`, `top`, `ids`);
/// `fallback_id` names the token when the position has no logprob (prompt position 0), and
/// `fallback_text` its decoded text, when known.
pub(crate) fn position(
    lists: (&mut Vec<u8>, &mut Vec<u8>, &mut Vec<u8>),
    entry: Option<&TokenLogprob>,
    (fallback_id, fallback_text): (u32, Option<&str>),
    top: bool,
    ids: bool,
) {
    let (lp, top_buf, ids_buf) = lists;
    sep(lp);
    triple(
        lp,
        entry.map(|e| e.logprob),
        entry.map_or(fallback_id, |e| e.token_id),
        entry.map_or(fallback_text, |e| e.text.as_deref()),
    );
    if top {
        sep(top_buf);
        candidates(top_buf, entry.map(|e| e.top.as_slice()));
    }
    if ids {
        sep(ids_buf);
        candidates(ids_buf, entry.map(|e| e.selected.as_slice()));
    }
}

/// `meta_info.finish_reason` (SGLang `schedule_batch.py` `to_json`). `Error` never reaches the
/// client as a finish reason: the request fails instead.
pub(crate) fn finish_reason(buf: &mut Vec<u8>, reason: Option<&FinishReason>) {
    match reason {
        None | Some(FinishReason::Error { .. }) => buf.extend_from_slice(b"null"),
        Some(FinishReason::Eos { token_id })
        | Some(FinishReason::Stop {
            matched: StopMatch::TokenId(token_id),
        }) => {
            buf.extend_from_slice(b"{\"type\":\"stop\",\"matched\":");
            u32(buf, *token_id);
            buf.push(b'}');
        }
        Some(FinishReason::Stop {
            matched: StopMatch::Text(s),
        }) => {
            buf.extend_from_slice(b"{\"type\":\"stop\",\"matched\":");
            json(buf, s.as_str());
            buf.push(b'}');
        }
        Some(FinishReason::Length { length }) => {
            buf.extend_from_slice(b"{\"type\":\"length\",\"length\":");
            u32(buf, *length);
            buf.push(b'}');
        }
        Some(FinishReason::Cancelled { message }) => {
            buf.extend_from_slice(b"{\"type\":\"abort\",\"message\":");
            json(
                buf,
                if message.is_empty() {
                    "Aborted"
                } else {
                    message
                },
            );
            buf.extend_from_slice(b",\"status_code\":null,\"err_type\":null}");
        }
    }
}

/// Append a JSON list `[items]` whose items are already rendered comma-separated in `items`.
pub(crate) fn list(buf: &mut Vec<u8>, items: &[u8]) {
    buf.push(b'[');
    buf.extend_from_slice(items);
    buf.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(buf: &[u8]) -> &str {
        std::str::from_utf8(buf).unwrap_or("")
    }

    #[test]
    fn triples_and_reasons() {
        let mut b = Vec::new();
        triple(&mut b, Some(-2.0437331199645996), 320, None);
        assert_eq!(s(&b), "[-2.0437331199645996,320,null]");
        b.clear();
        triple(&mut b, None, 128000, None);
        assert_eq!(s(&b), "[null,128000,null]");
        b.clear();
        triple(&mut b, Some(f64::NEG_INFINITY), 1, None);
        assert_eq!(s(&b), "[null,1,null]");
        b.clear();
        // The engine's decoded text (return_text_in_logprobs), JSON-escaped.
        triple(&mut b, Some(-0.442), 110837, Some(" gh\"yz\u{e9}"));
        assert_eq!(s(&b), "[-0.442,110837,\" gh\\\"yz\u{e9}\"]");
        b.clear();
        candidates(&mut b, Some(&[]));
        assert_eq!(s(&b), "null");

        let cases = [
            (
                FinishReason::Eos { token_id: 2 },
                r#"{"type":"stop","matched":2}"#,
            ),
            (
                FinishReason::Stop {
                    matched: StopMatch::Text("</a>".into()),
                },
                r#"{"type":"stop","matched":"</a>"}"#,
            ),
            (
                FinishReason::Length { length: 7 },
                r#"{"type":"length","length":7}"#,
            ),
            (
                FinishReason::Cancelled {
                    message: String::new(),
                },
                r#"{"type":"abort","message":"Aborted","status_code":null,"err_type":null}"#,
            ),
        ];
        for (r, want) in cases {
            b.clear();
            finish_reason(&mut b, Some(&r));
            assert_eq!(s(&b), want);
        }
    }
}
