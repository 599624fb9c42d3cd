//! Upstream failures → [`EngineError`].
//!
//! | upstream | kind | notes |
//! |---|---|---|
//! | HTTP 401 / 403 | `Internal` | genfront's credentials for the engine are wrong: not the client's fault |
//! | HTTP 429 | `Overloaded` | retry later |
//! | other HTTP 4xx | `InvalidArgument` | SGLang's message (`{"error":{"message"}}`, the flat `{"object":"error","message"}`, FastAPI's `{"detail"}`, or the text), `status_code` kept |
//! | HTTP 502 / 503 / 504, connect failure, send failure | `Unavailable` | retryable elsewhere |
//! | other HTTP 5xx (and 1xx/3xx) | `Internal` | |
//! | body closed, or `[DONE]`, before a terminal frame | `StreamIncomplete` | `SGLang /generate closed before a terminal response` |
//! | error frames and error aborts inside the stream | see [`super::decode`] | |

use genfront_protocol::{EngineError, ErrorKind};
use serde_json::Value;

/// SGLang's message for a stream that ended before its terminal frame (the Dynamo sidecar's
/// wording, `spec/sglang-native.md` §9.4).
pub const CLOSED_EARLY: &str = "SGLang /generate closed before a terminal response";

/// Most bytes of an error body read for its message.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The error for a non-2xx answer with `status` and (a prefix of) its `body`.
pub(crate) fn http_error(status: u16, body: &[u8]) -> EngineError {
    let detail = message_of(body);
    let (kind, message) = match status {
        401 | 403 => (
            ErrorKind::Internal,
            format!("SGLang refused genfront's credentials (HTTP {status}): {detail}"),
        ),
        429 => (
            ErrorKind::Overloaded,
            format!("SGLang is overloaded (HTTP 429): {detail}"),
        ),
        400..=499 => (ErrorKind::InvalidArgument, detail),
        502..=504 => (
            ErrorKind::Unavailable,
            format!("SGLang is unavailable (HTTP {status}): {detail}"),
        ),
        _ => (
            ErrorKind::Internal,
            format!("SGLang failed (HTTP {status}): {detail}"),
        ),
    };
    let mut e = EngineError::new(kind, message);
    e.status_code = Some(status);
    e
}

/// The error for a request that could not be sent or answered (no HTTP status).
pub(crate) fn send_error(err: &reqwest::Error) -> EngineError {
    // reqwest's Display omits the cause (connection refused, timed out, reset…): append the chain.
    let mut msg = format!("SGLang /generate could not be reached: {err}");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        msg.push_str(": ");
        msg.push_str(&cause.to_string());
        source = cause.source();
    }
    EngineError::unavailable(msg)
}

/// The human message of an error body: `{"error":{"message"}}`, `{"error":"…"}`, the flat
/// `{"object":"error","message"}`, FastAPI's `{"detail": …}`, else the text itself.
pub(crate) fn message_of(body: &[u8]) -> String {
    let text = || String::from_utf8_lossy(body).trim().to_owned();
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return text();
    };
    let found = match v.get("error") {
        Some(Value::Object(e)) => e.get("message").cloned(),
        Some(Value::String(s)) => Some(Value::String(s.clone())),
        _ => None,
    }
    .or_else(|| v.get("message").cloned())
    .or_else(|| v.get("detail").cloned());
    match found {
        Some(Value::String(s)) => s,
        Some(other) if !other.is_null() => other.to_string(),
        _ => text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_messages() {
        let e = http_error(400, br#"{"error":{"message":"bad input"}}"#);
        assert_eq!(
            (e.kind, e.message.as_str(), e.status_code),
            (ErrorKind::InvalidArgument, "bad input", Some(400))
        );
        let e = http_error(
            400,
            br#"{"object":"error","message":"flat","type":"Bad Request","param":null,"code":400}"#,
        );
        assert_eq!(e.message, "flat");
        assert_eq!(http_error(422, br#"{"detail":"nope"}"#).message, "nope");
        assert_eq!(http_error(404, b"Not Found").message, "Not Found");
        assert_eq!(http_error(401, b"x").kind, ErrorKind::Internal);
        assert_eq!(http_error(403, b"x").kind, ErrorKind::Internal);
        assert_eq!(http_error(429, b"x").kind, ErrorKind::Overloaded);
        for s in [502, 503, 504] {
            assert_eq!(http_error(s, b"").kind, ErrorKind::Unavailable);
        }
        for s in [500, 501, 505, 302] {
            assert_eq!(http_error(s, b"").kind, ErrorKind::Internal);
        }
        assert_eq!(message_of(br#"{"error":"plain"}"#), "plain");
        assert_eq!(message_of(b"\xff\xfe"), "\u{fffd}\u{fffd}");
    }
}
