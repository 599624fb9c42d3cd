//! SGLang's `POST /abort_request` (`spec/sglang-native.md` §11): `{"rid": str, "abort_all": bool}`.
//!
//! The scheduler aborts every request whose rid *starts with* the given rid, but only once the
//! tokenizer manager found that rid itself in flight (`TokenizerManager.abort_request`,
//! sglang/srt/managers/tokenizer_manager.py:2241, SGLang 0.5.23: an unknown rid returns before
//! the scheduler sees it), so the selector is a prefix gated on an exact match (see
//! [`AbortSelector::Prefix`]); `abort_all` selects everything; an empty rid without `abort_all` is ignored (SGLang logs
//! "Ignore abort_request with empty rid and abort_all=False").

use genfront_format::{AbortSelector, GenerateError};
use serde_json::Value;

use crate::json::{self, req_bool};

/// Parse an `/abort_request` body. Malformed JSON and wrong types get SGLang's pydantic error
/// ([`GenerateError::Schema`]); unknown keys are ignored, as the `AbortReq` model does.
///
/// # Errors
/// [`GenerateError::Schema`] for a body that is not a JSON object or has a non-string `rid` /
/// non-boolean `abort_all`.
pub fn parse_abort(body: &[u8]) -> Result<AbortSelector, GenerateError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| GenerateError::Schema {
        message: format!("JSON decode error: {e}"),
        param: Some("body".to_owned()),
    })?;
    let Value::Object(obj) = value else {
        return Err(json::type_error("body", "a valid dictionary"));
    };
    let rid = match obj.get("rid") {
        None => "",
        Some(v) => json::str_of(v, "body.rid")?,
    };
    let abort_all = req_bool(&obj, "abort_all", false)?;
    Ok(if abort_all {
        AbortSelector::All
    } else if rid.is_empty() {
        AbortSelector::Nothing
    } else {
        AbortSelector::Prefix(rid.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let p = |b: &str| parse_abort(b.as_bytes());
        assert_eq!(
            p(r#"{"rid":"abc"}"#),
            Ok(AbortSelector::Prefix("abc".into()))
        );
        assert_eq!(
            p(r#"{"rid":"abc","abort_all":false}"#),
            Ok(AbortSelector::Prefix("abc".into()))
        );
        assert_eq!(p(r#"{"rid":"","abort_all":true}"#), Ok(AbortSelector::All));
        assert_eq!(p(r#"{"abort_all":true,"rid":"x"}"#), Ok(AbortSelector::All));
        assert_eq!(p(r#"{"rid":""}"#), Ok(AbortSelector::Nothing));
        assert_eq!(p(r#"{}"#), Ok(AbortSelector::Nothing));
        assert_eq!(
            p(r#"{"rid":"a","extra":1}"#),
            Ok(AbortSelector::Prefix("a".into()))
        );
        for bad in [
            "",
            "nope",
            "[]",
            r#"{"rid":5}"#,
            r#"{"rid":null}"#,
            r#"{"abort_all":"yes"}"#,
        ] {
            assert!(matches!(p(bad), Err(GenerateError::Schema { .. })), "{bad}");
        }
    }
}
