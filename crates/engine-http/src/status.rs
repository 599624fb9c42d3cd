//! Upstream HTTP answers and transport failures → [`EngineError`]: the one table (see the crate
//! docs), the error-body parser both engines' shapes go through, and the error for a request that
//! could not be sent.

use genfront_protocol::{EngineError, ErrorKind};
use http::HeaderMap;
use http::header::RETRY_AFTER;
use serde_json::Value;

/// Most bytes of a non-JSON error body quoted in a message.
const SNIPPET: usize = 512;

/// What an engine's error body says, whatever its shape: `{"error":{"message","type","code"}}`,
/// `{"error":"…"}`, the flat `{"object":"error","message","type",…}`, FastAPI's `{"detail":…}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorBody {
    /// The human message: `error.message`, else `error` when it is a string, else `message`, else
    /// `detail` (a non-string value as its JSON text).
    pub message: Option<String>,
    /// `error.type`, or the flat shape's `type`.
    pub err_type: Option<String>,
    /// `error.code` (or the flat shape's `code`) when it is an integer HTTP status.
    pub code: Option<u16>,
    /// The body is the engine's own error envelope (`{"error":{…}}` or the flat
    /// `{"object":"error",…}`), i.e. the engine itself answered, not a router or a framework
    /// default page.
    pub envelope: bool,
}

impl ErrorBody {
    /// Parse an error body; a body that is not JSON has no parts.
    pub fn parse(body: &[u8]) -> Self {
        serde_json::from_slice::<Value>(body)
            .map(|v| Self::from_value(&v))
            .unwrap_or_default()
    }

    /// The parts of a parsed error body (also used for `{"error": …}` events inside a stream).
    pub fn from_value(value: &Value) -> Self {
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        };
        let code = |v: Option<&Value>| {
            v.and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
        };
        let str_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        match value.get("error") {
            Some(Value::Object(e)) => Self {
                message: text(e.get("message")),
                err_type: str_of(e.get("type")),
                code: code(e.get("code")),
                envelope: true,
            },
            // `{"error": "Unauthorized"}` (vLLM's API-key middleware).
            Some(Value::String(s)) => Self {
                message: Some(s.clone()),
                ..Self::default()
            },
            _ => {
                let envelope = value.get("object").and_then(Value::as_str) == Some("error");
                Self {
                    message: text(value.get("message")).or_else(|| text(value.get("detail"))),
                    err_type: str_of(value.get("type")),
                    code: if envelope {
                        code(value.get("code"))
                    } else {
                        None
                    },
                    envelope,
                }
            }
        }
    }
}

/// The [`ErrorKind`] of an upstream HTTP `status` (the crate docs' table); `envelope`: the body
/// is the engine's own error envelope ([`ErrorBody::envelope`]).
pub fn classify(status: u16, envelope: bool) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Internal,
        404 | 405 if !envelope => ErrorKind::Internal,
        429 => ErrorKind::Overloaded,
        400..=499 => ErrorKind::InvalidArgument,
        502..=504 => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    }
}

/// The error for a non-2xx answer of `engine` (its display name, e.g. `"SGLang"`) with `status`,
/// its `headers` (for `Retry-After`) and (a prefix of) its `body`.
///
/// The message is the engine's own for `InvalidArgument` (client-facing): [`ErrorBody::message`],
/// else a short non-empty text body, else `"<engine> rejected the request (HTTP <status>)"`. For
/// every other kind it is an internal description that quotes the body.
pub fn status_error(engine: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> EngineError {
    let parsed = ErrorBody::parse(body);
    let kind = classify(status, parsed.envelope);
    let detail = parsed.message.clone().or_else(|| short_text(body));
    let message = match (kind, status) {
        (ErrorKind::InvalidArgument, _) => {
            detail.unwrap_or_else(|| format!("{engine} rejected the request (HTTP {status})"))
        }
        (_, 401 | 403) => format!(
            "{engine} refused genfront's credentials (HTTP {status}): {}",
            detail_or_snippet(detail, body)
        ),
        (_, 404 | 405) => format!(
            "{engine} does not serve this route (HTTP {status}): {}",
            detail_or_snippet(detail, body)
        ),
        (ErrorKind::Overloaded, _) => format!(
            "{engine} is overloaded (HTTP {status}): {}",
            detail_or_snippet(detail, body)
        ),
        (ErrorKind::Unavailable, _) => format!(
            "{engine} is unavailable (HTTP {status}): {}",
            detail_or_snippet(detail, body)
        ),
        _ => format!(
            "{engine} failed (HTTP {status}): {}",
            detail_or_snippet(detail, body)
        ),
    };
    EngineError {
        kind,
        message,
        status_code: Some(status),
        err_type: parsed.err_type,
        retry_after_secs: if matches!(status, 429 | 503) {
            retry_after(headers)
        } else {
            None
        },
        native: None,
    }
}

/// `Retry-After` in whole seconds, when the header is the delay-seconds form (an HTTP-date is
/// ignored).
pub fn retry_after(headers: &HeaderMap) -> Option<u32> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: only an overflow fails, and then the delay is "very long".
    Some(value.parse::<u32>().unwrap_or(u32::MAX))
}

/// The error for a request to `what` (e.g. `"SGLang /generate"`) that could not be sent or
/// answered (no HTTP status): `Unavailable`, with the [`root_cause`] first and reqwest's cause
/// chain after it (reqwest's own `Display` is "error sending request", which omits "connection
/// refused", "timed out", …): `SGLang /generate could not be reached (connection refused):
/// error sending request for url (…): …`.
pub fn send_error(what: &str, err: &reqwest::Error) -> EngineError {
    EngineError::unavailable(format!(
        "{what} could not be reached ({}): {}",
        root_cause(err),
        chain(err)
    ))
}

/// A short name for why a connection or request failed: the kind of the innermost I/O error
/// (`connection refused`, `timed out`, `connection reset`, …), `timed out` for a client timeout,
/// else the innermost cause's text.
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost: &(dyn std::error::Error + 'static) = error;
    let mut io: Option<&std::io::Error> = None;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<std::io::Error>() {
            io = Some(found);
        }
        innermost = e;
        current = e.source();
    }
    if let Some(io) = io {
        use std::io::ErrorKind as K;
        let name = match io.kind() {
            K::ConnectionRefused => "connection refused",
            K::ConnectionReset => "connection reset",
            K::ConnectionAborted => "connection aborted",
            K::TimedOut => "timed out",
            K::AddrNotAvailable => "address not available",
            K::HostUnreachable => "host unreachable",
            K::NetworkUnreachable => "network unreachable",
            K::BrokenPipe => "broken pipe",
            K::UnexpectedEof => "connection closed",
            _ => "",
        };
        if !name.is_empty() {
            return name.to_owned();
        }
    }
    if error
        .downcast_ref::<reqwest::Error>()
        .is_some_and(reqwest::Error::is_timeout)
    {
        return "timed out".to_owned();
    }
    innermost.to_string()
}

/// `error` and its sources, joined with `: `.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// A non-JSON body short enough to be a message (trimmed), if any.
fn short_text(body: &[u8]) -> Option<String> {
    if body.len() > SNIPPET || serde_json::from_slice::<Value>(body).is_ok() {
        return None;
    }
    let text = String::from_utf8_lossy(body).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// `detail`, else the first [`SNIPPET`] bytes of `body`, else `(empty body)`.
fn detail_or_snippet(detail: Option<String>, body: &[u8]) -> String {
    detail.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body.get(..body.len().min(SNIPPET)).unwrap_or(body));
        let text = text.trim();
        if text.is_empty() {
            "(empty body)".to_owned()
        } else {
            text.to_owned()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn err(status: u16, body: &[u8]) -> EngineError {
        status_error("X", status, &HeaderMap::new(), body)
    }

    #[test]
    fn the_table() {
        let envelope = br#"{"error":{"message":"m","type":"T","code":404}}"#;
        for (status, body, kind) in [
            (400, &b""[..], ErrorKind::InvalidArgument),
            (401, b"", ErrorKind::Internal),
            (403, envelope, ErrorKind::Internal),
            (404, b"Not Found", ErrorKind::Internal),
            (404, br#"{"detail":"Not Found"}"#, ErrorKind::Internal),
            (
                405,
                br#"{"detail":"Method Not Allowed"}"#,
                ErrorKind::Internal,
            ),
            (404, envelope, ErrorKind::InvalidArgument),
            (
                404,
                br#"{"object":"error","message":"no such model","code":404}"#,
                ErrorKind::InvalidArgument,
            ),
            (413, b"", ErrorKind::InvalidArgument),
            (
                422,
                br#"{"detail":[{"loc":["body"]}]}"#,
                ErrorKind::InvalidArgument,
            ),
            (429, b"", ErrorKind::Overloaded),
            (500, b"boom", ErrorKind::Internal),
            (501, b"", ErrorKind::Internal),
            (502, b"", ErrorKind::Unavailable),
            (503, b"", ErrorKind::Unavailable),
            (504, b"", ErrorKind::Unavailable),
            (505, b"", ErrorKind::Internal),
            (302, b"", ErrorKind::Internal),
            (101, b"", ErrorKind::Internal),
        ] {
            let e = err(status, body);
            assert_eq!((e.kind, e.status_code), (kind, Some(status)), "{status}");
        }
    }

    #[test]
    fn messages_of_every_shape() {
        let e = err(
            400,
            br#"{"error":{"message":"bad input","type":"BadRequestError"}}"#,
        );
        assert_eq!(e.message, "bad input");
        assert_eq!(e.err_type.as_deref(), Some("BadRequestError"));
        let flat =
            br#"{"object":"error","message":"flat","type":"Bad Request","param":null,"code":400}"#;
        assert_eq!(err(400, flat).message, "flat");
        assert_eq!(err(400, flat).err_type.as_deref(), Some("Bad Request"));
        assert_eq!(err(422, br#"{"detail":"nope"}"#).message, "nope");
        assert_eq!(
            err(422, br#"{"detail":[{"msg":"x"}]}"#).message,
            r#"[{"msg":"x"}]"#
        );
        assert_eq!(err(400, br#"{"error":"plain"}"#).message, "plain");
        assert_eq!(err(400, b" short text \n").message, "short text");
        assert_eq!(err(400, b"").message, "X rejected the request (HTTP 400)");
        assert_eq!(
            err(400, &[b'x'; 600]).message,
            "X rejected the request (HTTP 400)"
        );
        assert_eq!(err(400, b"\xff\xfe").message, "\u{fffd}\u{fffd}");
        assert_eq!(
            err(503, b"").message,
            "X is unavailable (HTTP 503): (empty body)"
        );
        assert_eq!(
            err(401, br#"{"error":"Unauthorized"}"#).message,
            "X refused genfront's credentials (HTTP 401): Unauthorized"
        );
    }

    #[test]
    fn retry_after_on_429_and_503() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        for (status, want) in [(429, Some(7)), (503, Some(7)), (502, None), (400, None)] {
            let e = status_error("X", status, &headers, b"");
            assert_eq!(e.retry_after_secs, want, "{status}");
        }
        let e = status_error("X", 429, &HeaderMap::new(), b"");
        assert_eq!((e.kind, e.retry_after_secs), (ErrorKind::Overloaded, None));
        for (value, want) in [
            (" 12 ", Some(12)),
            ("0", Some(0)),
            ("99999999999", Some(u32::MAX)),
            ("Wed, 21 Oct 2015 07:28:00 GMT", None),
            ("-1", None),
            ("1.5", None),
            ("", None),
        ] {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_str(value).expect("header"));
            assert_eq!(retry_after(&h), want, "{value:?}");
        }
    }

    #[test]
    fn error_body_parts() {
        let b = ErrorBody::parse(br#"{"error":{"message":"m","type":"T","code":429}}"#);
        assert_eq!(
            b,
            ErrorBody {
                message: Some("m".into()),
                err_type: Some("T".into()),
                code: Some(429),
                envelope: true
            }
        );
        assert_eq!(ErrorBody::parse(b"not json"), ErrorBody::default());
        assert!(!ErrorBody::parse(br#"{"detail":"x"}"#).envelope);
    }
}
