//! `return_flat_raw_top_logprobs`: prompt top-logprobs as flat arrays plus shape metadata instead
//! of nested per-position triples (`tokenizer_manager.py` `_build_flat_input_top_logprobs_fields`).
//!
//! The leading positions without alternatives (position 0) are counted in
//! `input_top_logprobs_null_prefix`; the remaining `rows` positions hold exactly `k` entries each,
//! row-major. With `return_flat_raw_top_logprobs_b64`, the arrays are base64 of little-endian
//! `float32` / `int32`. When the rows are ragged SGLang falls back to the nested form, and so does
//! this module (it returns `None`).

use base64::Engine as _;
use genfront_protocol::Candidate;

use crate::render;

/// Which prompt top-logprob form a request asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum FlatTop {
    /// Nested `input_top_logprobs` (the default).
    #[default]
    Nested,
    /// `input_top_logprobs_val_flat` / `_idx_flat` JSON arrays.
    Plain,
    /// `input_top_logprobs_val_flat_b64` / `_idx_flat_b64` base64 arrays.
    Base64,
}

/// The flat fields (`"key":value` pairs joined by commas, no leading comma) for `rows`, or `None`
/// when the rows are ragged.
pub(crate) fn fields(rows: &[Option<Vec<Candidate>>], k: u32, form: FlatTop) -> Option<Vec<u8>> {
    let null_prefix = rows
        .iter()
        .take_while(|r| r.as_ref().is_none_or(Vec::is_empty))
        .count();
    let body = rows.get(null_prefix..).unwrap_or_default();
    let width = k as usize;
    if body
        .iter()
        .any(|r| r.as_ref().is_none_or(|c| c.len() != width))
    {
        return None;
    }
    let cands = || body.iter().flatten().flatten();
    let mut out = Vec::with_capacity(body.len().saturating_mul(width).saturating_mul(12) + 128);
    match form {
        FlatTop::Nested => return None,
        FlatTop::Plain => {
            out.extend_from_slice(b"\"input_top_logprobs_val_flat\":[");
            for (i, c) in cands().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                render::f64(&mut out, c.logprob);
            }
            out.extend_from_slice(b"],\"input_top_logprobs_idx_flat\":[");
            for (i, c) in cands().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                render::u32(&mut out, c.token_id);
            }
            out.push(b']');
        }
        FlatTop::Base64 => {
            let b64 = base64::engine::general_purpose::STANDARD;
            let vals: Vec<u8> = cands()
                .flat_map(|c| (c.logprob as f32).to_le_bytes())
                .collect();
            let ids: Vec<u8> = cands()
                .flat_map(|c| i32::try_from(c.token_id).unwrap_or(i32::MAX).to_le_bytes())
                .collect();
            out.extend_from_slice(b"\"input_top_logprobs_val_flat_b64\":\"");
            out.extend_from_slice(b64.encode(vals).as_bytes());
            out.extend_from_slice(b"\",\"input_top_logprobs_idx_flat_b64\":\"");
            out.extend_from_slice(b64.encode(ids).as_bytes());
            out.extend_from_slice(
                b"\",\"input_top_logprobs_val_flat_b64_dtype\":\"float32\",\"input_top_logprobs_idx_flat_b64_dtype\":\"int32\"",
            );
        }
    }
    out.extend_from_slice(b",\"input_top_logprobs_shape\":[");
    render::json(&mut out, &body.len());
    out.push(b',');
    render::u32(&mut out, k);
    out.extend_from_slice(b"],\"input_top_logprobs_null_prefix\":");
    render::json(&mut out, &null_prefix);
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn cand(id: u32, lp: f64) -> Candidate {
        Candidate {
            token_id: id,
            logprob: lp,
            rank: None,
            text: None,
        }
    }

    fn parse(fragment: &[u8]) -> Value {
        let mut s = b"{".to_vec();
        s.extend_from_slice(fragment);
        s.push(b'}');
        serde_json::from_slice(&s).unwrap_or(Value::Null)
    }

    #[test]
    fn plain_and_base64() {
        let rows = vec![
            None,
            Some(vec![cand(5, -0.5), cand(6, -1.5)]),
            Some(vec![cand(7, -0.25), cand(8, -2.0)]),
        ];
        let plain = fields(&rows, 2, FlatTop::Plain).map(|f| parse(&f));
        assert_eq!(
            plain,
            Some(json!({
                "input_top_logprobs_val_flat": [-0.5, -1.5, -0.25, -2.0],
                "input_top_logprobs_idx_flat": [5, 6, 7, 8],
                "input_top_logprobs_shape": [2, 2],
                "input_top_logprobs_null_prefix": 1,
            }))
        );
        let b64 = fields(&rows, 2, FlatTop::Base64).map(|f| parse(&f));
        let b64 = b64.unwrap_or(Value::Null);
        let vals = base64::engine::general_purpose::STANDARD
            .decode(
                b64["input_top_logprobs_val_flat_b64"]
                    .as_str()
                    .unwrap_or(""),
            )
            .unwrap_or_default();
        assert_eq!(vals.len(), 16);
        assert_eq!(&vals[..4], &(-0.5f32).to_le_bytes());
        assert_eq!(b64["input_top_logprobs_idx_flat_b64_dtype"], "int32");
        assert_eq!(b64["input_top_logprobs_shape"], json!([2, 2]));
        // Ragged rows fall back to the nested form; no rows is an empty (0, k) array.
        let ragged = vec![None, Some(vec![cand(1, -1.0)])];
        assert!(fields(&ragged, 2, FlatTop::Plain).is_none());
        assert_eq!(
            fields(&[], 3, FlatTop::Plain).map(|f| parse(&f)),
            Some(json!({
                "input_top_logprobs_val_flat": [],
                "input_top_logprobs_idx_flat": [],
                "input_top_logprobs_shape": [0, 3],
                "input_top_logprobs_null_prefix": 0,
            }))
        );
    }
}
