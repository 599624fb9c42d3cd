//! [`GenerateError`]: every way a generate request can fail, with one status mapping.

use std::borrow::Cow;

use genfront_protocol::{EngineError, ErrorKind, Fault};
use http::StatusCode;

/// Every failure of a generate request. Formats render it in their native envelope;
/// [`GenerateError::status`] is the single exhaustive mapping to an HTTP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    /// The request is well-formed but invalid (a native validation message).
    #[error("validation: {message}")]
    Validation {
        /// Native message, sent to the client.
        message: String,
        /// The offending parameter, when the native API names one.
        param: Option<String>,
    },
    /// The body is not valid JSON or has wrong types (the native "schema" error).
    #[error("schema: {message}")]
    Schema {
        /// Native message, sent to the client.
        message: String,
        /// The offending location, when known.
        param: Option<String>,
    },
    /// The named model (or other resource) does not exist.
    #[error("not found: {message}")]
    NotFound {
        /// Native message, sent to the client.
        message: String,
        /// The offending parameter.
        param: Option<String>,
    },
    /// The body exceeded the configured limit.
    #[error("payload too large: limit {limit_bytes} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit_bytes: usize,
        /// The flag that sets it.
        flag: &'static str,
    },
    /// The request was refused at the HTTP layer, before its body was parsed: HTTP/1.1 without
    /// `Host` (400), a body not sent within `--body-read-timeout` (408), a `Content-Type` that is
    /// not JSON or a `Content-Encoding` other than `identity` (415). `message` names the rule or
    /// the flag and is sent to the client in the format's envelope.
    #[error("http {status}: {message}")]
    Http {
        /// The status (a 4xx).
        status: StatusCode,
        /// Client-facing message.
        message: String,
    },
    /// The frontend's concurrency limit is reached.
    #[error("too many concurrent requests")]
    Overloaded,
    /// No worker can take the request: none is connected and ready, every breaker is open, or
    /// all are paused or draining. 503 with `Retry-After`; machine-readable code
    /// `no_available_workers`.
    #[error("no available workers")]
    NoEngine {
        /// The prefill/decode role (`"prefill"`, `"decode"`) that has no routable worker, named
        /// in the message; `None` when no aggregated worker (nor pair) can take the request.
        role: Option<&'static str>,
    },
    /// Every worker that could take the request is paused (fleet control) and none resumed
    /// within `--pause-wait`. 503 with `Retry-After`; machine-readable code `paused`, and the
    /// envelope says `"retryable": true`.
    #[error("paused")]
    Paused,
    /// The engine failed (see [`EngineError`] for which messages are public).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// genfront failed internally. The detail is logged, never sent.
    #[error("internal: {0}")]
    Internal(String),
}

impl GenerateError {
    /// Shorthand for a validation error without a parameter.
    pub fn validation(message: impl Into<String>) -> Self {
        GenerateError::Validation {
            message: message.into(),
            param: None,
        }
    }

    /// HTTP status for this error (the one exhaustive mapping).
    pub fn status(&self) -> StatusCode {
        match self {
            GenerateError::Validation { .. } | GenerateError::Schema { .. } => {
                StatusCode::BAD_REQUEST
            }
            GenerateError::NotFound { .. } => StatusCode::NOT_FOUND,
            GenerateError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            GenerateError::Http { status, .. } => *status,
            GenerateError::Overloaded | GenerateError::NoEngine { .. } | GenerateError::Paused => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            GenerateError::Engine(e) => match e.kind {
                ErrorKind::InvalidArgument | ErrorKind::Unsupported => e
                    .status_code
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .filter(StatusCode::is_client_error)
                    .unwrap_or(StatusCode::BAD_REQUEST),
                // An upstream 429 stays a 429 (with its Retry-After); other backpressure is 503.
                ErrorKind::Overloaded if e.status_code == Some(429) => {
                    StatusCode::TOO_MANY_REQUESTS
                }
                ErrorKind::Unavailable | ErrorKind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::StreamIncomplete => StatusCode::BAD_GATEWAY,
                ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
                // 499: the client went away; nobody normally reads this status.
                ErrorKind::Cancelled => {
                    StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
                }
                ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            },
            GenerateError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            GenerateError::Validation { .. }
            | GenerateError::Schema { .. }
            | GenerateError::NotFound { .. }
            | GenerateError::PayloadTooLarge { .. }
            | GenerateError::Http { .. } => Fault::Client,
            GenerateError::Overloaded | GenerateError::NoEngine { .. } | GenerateError::Paused => {
                Fault::Engine
            }
            GenerateError::Engine(e) => e.kind.fault(),
            GenerateError::Internal(_) => Fault::Frontend,
        }
    }

    /// Stable snake_case label for metrics and logs.
    pub fn code(&self) -> &'static str {
        match self {
            GenerateError::Validation { .. } => "validation",
            GenerateError::Schema { .. } => "schema",
            GenerateError::NotFound { .. } => "not_found",
            GenerateError::PayloadTooLarge { .. } => "payload_too_large",
            GenerateError::Http { status, .. } => match status.as_u16() {
                401 => "unauthorized",
                403 => "forbidden",
                408 => "request_timeout",
                415 => "unsupported_media_type",
                _ => "bad_request",
            },
            GenerateError::Overloaded => "overloaded",
            GenerateError::NoEngine { .. } => "no_available_workers",
            GenerateError::Paused => "paused",
            GenerateError::Engine(e) => match e.kind {
                ErrorKind::InvalidArgument => "engine_invalid_argument",
                ErrorKind::Unsupported => "unsupported",
                ErrorKind::Unavailable => "unavailable",
                ErrorKind::Overloaded => "overloaded",
                ErrorKind::StreamIncomplete => "stream_incomplete",
                ErrorKind::Cancelled => "cancelled",
                ErrorKind::Timeout => "engine_timeout",
                ErrorKind::Internal => "engine_error",
            },
            GenerateError::Internal(_) => "internal",
        }
    }

    /// The message a client may see. Engine and internal details are replaced by a generic text.
    pub fn public_message(&self) -> Cow<'_, str> {
        match self {
            GenerateError::Validation { message, .. }
            | GenerateError::Schema { message, .. }
            | GenerateError::NotFound { message, .. }
            | GenerateError::Http { message, .. } => Cow::Borrowed(message),
            GenerateError::PayloadTooLarge { limit_bytes, flag } => Cow::Owned(format!(
                "Request body is larger than the limit of {limit_bytes} bytes; raise it with {flag}."
            )),
            GenerateError::Overloaded => {
                Cow::Borrowed("The server is at its concurrency limit. Please try again later.")
            }
            GenerateError::NoEngine { role: None } => Cow::Borrowed(
                "No available workers: no engine can take this request now. Please try again later.",
            ),
            GenerateError::NoEngine { role: Some(role) } => Cow::Owned(format!(
                "No available {role} workers: a prefill/decode pair needs one and none can take this request now. Please try again later."
            )),
            GenerateError::Paused => Cow::Borrowed(
                "Generation is paused on every worker that can take this request (fleet control). Please try again later.",
            ),
            GenerateError::Engine(e) => match e.kind {
                ErrorKind::InvalidArgument | ErrorKind::Unsupported => Cow::Borrowed(&e.message),
                ErrorKind::Unavailable | ErrorKind::StreamIncomplete => {
                    Cow::Borrowed("Service temporarily unavailable")
                }
                ErrorKind::Overloaded => Cow::Borrowed("Service temporarily overloaded"),
                ErrorKind::Cancelled => Cow::Borrowed("Request cancelled"),
                ErrorKind::Timeout => {
                    Cow::Borrowed("Gateway timeout: the engine did not answer in time")
                }
                ErrorKind::Internal => Cow::Borrowed("Internal server error"),
            },
            GenerateError::Internal(_) => Cow::Borrowed("Internal server error"),
        }
    }

    /// Whether the client should be told to retry later, and after how many seconds (`None`: no
    /// `Retry-After` header). The frontend's own 503s use its configured delay
    /// (`default_secs`); an engine's 429/503 relays the engine's own `Retry-After` when it sent one.
    pub fn retry_after(&self, default_secs: u32) -> Option<u32> {
        match self {
            GenerateError::Overloaded | GenerateError::NoEngine { .. } | GenerateError::Paused => {
                Some(default_secs)
            }
            GenerateError::Engine(e) => match e.kind {
                ErrorKind::Overloaded | ErrorKind::Unavailable => {
                    e.retry_after_secs
                        .or(if self.status() == StatusCode::SERVICE_UNAVAILABLE {
                            Some(default_secs)
                        } else {
                            None
                        })
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The parameter the error is about, when known.
    pub fn param(&self) -> Option<&str> {
        match self {
            GenerateError::Validation { param, .. }
            | GenerateError::Schema { param, .. }
            | GenerateError::NotFound { param, .. } => param.as_deref(),
            _ => None,
        }
    }
}
