//! vLLM failures → typed [`EngineError`]s (one mapping for HTTP statuses and for `{"error":…}`
//! events inside a stream).
//!
//! | vLLM answer | [`ErrorKind`] |
//! |---|---|
//! | 401, 403 (API key, scale-out endpoints disabled) | `Internal`: genfront is misconfigured, not the client |
//! | 404 / 405 without vLLM's `{"error":{…}}` envelope (route not served) | `Internal` |
//! | 429 | `Overloaded` |
//! | other 4xx | `InvalidArgument`, vLLM's message, `status_code`, `err_type` = `error.type` |
//! | 502, 503, 504; connection failure | `Unavailable` |
//! | other 5xx, anything else | `Internal` |

use genfront_protocol::{EngineError, ErrorKind};
use serde_json::Value;

/// At most this much of a non-JSON error body goes into an (internal) message.
const SNIPPET: usize = 512;

/// The parts of a vLLM error answer.
#[derive(Debug, Default)]
struct Parsed {
    message: Option<String>,
    err_type: Option<String>,
    /// `error.code` when it is an integer.
    code: Option<u16>,
    /// The body is vLLM's `{"error": {...}}` envelope.
    envelope: bool,
}

fn parse(value: &Value) -> Parsed {
    match value.get("error") {
        Some(Value::Object(e)) => Parsed {
            message: e.get("message").and_then(Value::as_str).map(str::to_owned),
            err_type: e.get("type").and_then(Value::as_str).map(str::to_owned),
            code: e
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok()),
            envelope: true,
        },
        // `{"error": "Unauthorized"}` (vLLM's API-key middleware).
        Some(Value::String(s)) => Parsed {
            message: Some(s.clone()),
            ..Parsed::default()
        },
        _ => Parsed {
            // FastAPI's `{"detail": …}`, or an older flat `{"object":"error","message":…}`.
            message: value
                .get("message")
                .or_else(|| value.get("detail"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            err_type: value.get("type").and_then(Value::as_str).map(str::to_owned),
            envelope: value.get("object").and_then(Value::as_str) == Some("error"),
            ..Parsed::default()
        },
    }
}

fn classify(status: u16, envelope: bool) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Internal,
        404 | 405 if !envelope => ErrorKind::Internal,
        429 => ErrorKind::Overloaded,
        400..=499 => ErrorKind::InvalidArgument,
        502..=504 => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    }
}

/// The error for a non-2xx HTTP answer with `body`.
pub(crate) fn status_error(status: u16, body: &[u8]) -> EngineError {
    let parsed = serde_json::from_slice::<Value>(body)
        .map(|v| parse(&v))
        .unwrap_or_default();
    let kind = classify(status, parsed.envelope);
    let message = match (kind, parsed.message) {
        (ErrorKind::InvalidArgument, Some(m)) => m,
        (ErrorKind::InvalidArgument, None) => format!("vLLM rejected the request (HTTP {status})"),
        (_, Some(m)) => format!("vLLM answered HTTP {status}: {m}"),
        (_, None) => format!("vLLM answered HTTP {status}: {}", snippet(body)),
    };
    EngineError {
        kind,
        message,
        status_code: Some(status),
        err_type: parsed.err_type,
    }
}

/// The error for an `{"error": …}` event inside a started stream (or a unary 200 body). Without
/// an integer `code`, the Rust frontend's string codes are honoured; anything else is a 500.
pub(crate) fn event_error(error: &Value) -> EngineError {
    let wrapped = serde_json::json!({ "error": error });
    let parsed = parse(&wrapped);
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
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(SNIPPET)]);
    if text.trim().is_empty() {
        "(empty body)".to_owned()
    } else {
        text.into_owned()
    }
}
