//! `POST /inference/v1/abort_requests` (spec §8): `{"request_ids": ["generate-tokens-…"]}`.
//!
//! vLLM reads the body with `raw_request.json()` and raises `HTTPException(400)` for bad JSON
//! (`JSON decode error: …`) or a missing key (`Missing 'request_ids' in request body`); the abort
//! itself runs in the background and the answer is an empty 200.

use genfront_format::{AbortRoute, AbortSelector, GenerateError};
use serde_json::Value;

use crate::schema::json_decode_message;

/// vLLM's abort path.
pub const ABORT_PATH: &str = "/inference/v1/abort_requests";

/// The abort route of the vLLM format.
pub(crate) const ROUTE: AbortRoute = AbortRoute {
    path: ABORT_PATH,
    parse: parse_abort,
};

/// An `HTTPException(400, detail)`: `{"error":{"message": detail, "type": "Bad Request",
/// "param": null, "code": 400}}`, which is the schema-error envelope without a `param`.
fn http_400(detail: String) -> GenerateError {
    GenerateError::Schema {
        message: detail,
        param: None,
    }
}

/// Parse an abort body into the ids to abort (they carry the `generate-tokens-` prefix, which
/// is also [`genfront_format::SubRequest::abort_key`]).
///
/// `request_ids` may also be one string (vLLM's `engine.abort` accepts `str | Iterable[str]`);
/// non-string list items select nothing.
///
/// # Errors
/// The 400 `HTTPException`s described in the module docs. A body that is not a JSON object is
/// answered like a missing key (vLLM would fail with a 500 on `.get`).
pub fn parse_abort(body: &[u8]) -> Result<AbortSelector, GenerateError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        http_400(format!(
            "JSON decode error: {}",
            json_decode_message(&e, body)
        ))
    })?;
    let missing = || http_400("Missing 'request_ids' in request body".to_owned());
    match value.get("request_ids") {
        None | Some(Value::Null) => Err(missing()),
        Some(Value::String(id)) => Ok(AbortSelector::Exact(vec![id.clone()])),
        Some(Value::Array(items)) => Ok(AbortSelector::Exact(
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        )),
        Some(_) => Ok(AbortSelector::Nothing),
    }
}
