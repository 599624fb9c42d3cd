//! `{"error": …}` events inside a started vLLM stream (or a unary 200 body) → typed
//! [`EngineError`]s. HTTP statuses are mapped by the shared transport's one table
//! ([`genfront_engine_http::status_error`]); an event's status goes through the same
//! [`genfront_engine_http::classify`], as if it came with vLLM's envelope.

use genfront_engine_http::{ErrorBody, classify};
use genfront_protocol::{EngineError, ErrorKind};
use serde_json::Value;

/// The error for an `{"error": …}` event inside a started stream (or a unary 200 body). Without
/// an integer `code`, the Rust frontend's string codes are honoured; anything else is a 500.
pub(crate) fn event_error(error: &Value) -> EngineError {
    let wrapped = serde_json::json!({ "error": error });
    let parsed = ErrorBody::from_value(&wrapped);
    let status = parsed
        .code
        .unwrap_or_else(|| match error.get("code").and_then(Value::as_str) {
            Some("invalid_request_error" | "json_parse_error") => 400,
            Some("model_not_found") => 404,
            _ => 500,
        });
    let kind = classify(status, true);
    let message = match (kind, parsed.message) {
        (ErrorKind::InvalidArgument, Some(m)) => m,
        (_, Some(m)) => format!("vLLM stream error ({status}): {m}"),
        (_, None) => format!("vLLM stream error ({status}): {error}"),
    };
    EngineError {
        kind,
        message,
        status_code: Some(status),
        err_type: parsed.err_type,
        retry_after_secs: None,
        native: None,
    }
}
