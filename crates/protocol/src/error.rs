//! [`EngineError`]: typed failures of the engine contract.

use serde::{Deserialize, Serialize};

/// Who caused a failure. Decides the status class: client → 4xx, engine → 502/503, frontend → 500.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The request was invalid.
    Client,
    /// The engine (or the network to it) failed.
    Engine,
    /// genfront itself failed.
    Frontend,
}

/// What went wrong, with a stable reason code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The engine rejected the request as invalid (message is client-facing).
    InvalidArgument,
    /// The engine cannot produce something the request asked for (message is client-facing).
    Unsupported,
    /// The engine is unreachable, starting or shutting down; safe to retry elsewhere.
    Unavailable,
    /// The engine is at capacity; safe to retry later.
    Overloaded,
    /// The stream ended before a terminal item; safe to retry.
    StreamIncomplete,
    /// The request was cancelled before the engine produced a result.
    Cancelled,
    /// The engine made no progress within genfront's engine timeouts (no first output within
    /// `--engine-first-byte-timeout`, or no next output of a stream within
    /// `--engine-idle-timeout`): the request is aborted on the engine, the client gets a 504 and
    /// the worker is counted as failed (breaker), because a hung engine must leave rotation. Not
    /// retried elsewhere: the engine may still be working on it, and the client's wait is bounded
    /// by one timeout.
    Timeout,
    /// The engine returned something that breaks the contract, or failed internally.
    Internal,
}

impl ErrorKind {
    /// Stable reason code, used in logs and as a metric label.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "backend.invalid_argument",
            ErrorKind::Unsupported => "backend.unsupported",
            ErrorKind::Unavailable => "backend.unavailable",
            ErrorKind::Overloaded => "backend.overloaded",
            ErrorKind::StreamIncomplete => "backend.stream_incomplete",
            ErrorKind::Cancelled => "backend.cancelled",
            ErrorKind::Timeout => "backend.timeout",
            ErrorKind::Internal => "backend.internal",
        }
    }

    /// Who is at fault.
    pub fn fault(self) -> Fault {
        match self {
            ErrorKind::InvalidArgument | ErrorKind::Unsupported | ErrorKind::Cancelled => {
                Fault::Client
            }
            ErrorKind::Unavailable
            | ErrorKind::Overloaded
            | ErrorKind::StreamIncomplete
            | ErrorKind::Timeout => Fault::Engine,
            ErrorKind::Internal => Fault::Engine,
        }
    }

    /// Whether the same request may safely be retried (on this or another worker).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Unavailable | ErrorKind::Overloaded | ErrorKind::StreamIncomplete
        )
    }
}

/// A typed engine failure.
///
/// `message` is client-facing only for [`ErrorKind::InvalidArgument`] and
/// [`ErrorKind::Unsupported`]; for every other kind it is an internal detail that is logged and
/// never sent to a client.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{} ({}): {message}", kind.code(), match kind.fault() { Fault::Client => "client", Fault::Engine => "engine", Fault::Frontend => "frontend" })]
pub struct EngineError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Detail (see the type's docs for who may see it).
    pub message: String,
    /// The engine's own HTTP-ish status, when it gave one (e.g. SGLang abort `status_code`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The engine's own error type, when it gave one (e.g. SGLang `err_type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err_type: Option<String>,
    /// The engine's `Retry-After`, in whole seconds, when it sent one (HTTP 429 / 503); relayed
    /// to the client with the same status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u32>,
    /// The engine's own error answer, kept when the request came in the engine's own native
    /// format (and is not a P/D leg): the frontend then sends it to the client verbatim
    /// instead of rendering this typed error (see [`NativeError`]). `None` otherwise. Not
    /// serialized (a sidecar's engine answers typed).
    #[serde(skip)]
    pub native: Option<Box<NativeError>>,
}

/// An engine's error answer exactly as the engine sent it, for a client of the engine's own
/// format ([`EngineError::native`]): what comes back through genfront is what the engine itself
/// would have returned.
///
/// Set only by an engine client of format [`NativeError::format`] for a request of that same
/// format whose upstream call has the client's own mode (unary or stream). The typed fields of
/// the [`EngineError`] it rides on stay as they are, so routers count the outcome as before
/// (a 4xx never trips a breaker; 5xx and transport failures do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeError {
    /// The native format (`"sglang"`, `"vllm"`) the answer is in; only that format relays it.
    pub format: &'static str,
    /// The HTTP status the engine answered with, before any body (the answer is then
    /// `content_type` + `body`); `None`: `body` is the payload of an SSE error event inside a
    /// stream the engine had already started with 200.
    pub status: Option<u16>,
    /// The error body, or the event's payload (without `data: ` and the blank line).
    pub body: bytes::Bytes,
    /// The engine's `Content-Type` for an HTTP answer, as sent.
    pub content_type: Option<String>,
    /// The engine's `Retry-After` for an HTTP answer, as sent.
    pub retry_after: Option<String>,
}

impl EngineError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status_code: None,
            err_type: None,
            retry_after_secs: None,
            native: None,
        }
    }

    /// The same error carrying the engine's own answer `native` (see [`EngineError::native`]).
    pub fn with_native(mut self, native: NativeError) -> Self {
        self.native = Some(Box::new(native));
        self
    }

    /// The engine's own answer, when it was kept for a client of `format`
    /// ([`EngineError::native`]).
    pub fn native_for(&self, format: &str) -> Option<&NativeError> {
        self.native.as_deref().filter(|n| n.format == format)
    }

    /// The same error with the engine's HTTP `status` recorded.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status_code = Some(status);
        self
    }

    /// Whether this failure says the *worker* is unhealthy (as opposed to the request being bad
    /// or the worker being busy): transport failures (no status), 5xx answers other than the
    /// backpressure 503, and [`ErrorKind::Timeout`] (a hung engine). Routers count only these
    /// towards a worker's circuit breaker; 4xx and 429 never count.
    pub fn is_worker_failure(&self) -> bool {
        match self.kind {
            ErrorKind::InvalidArgument | ErrorKind::Unsupported | ErrorKind::Cancelled => false,
            ErrorKind::Overloaded => false,
            ErrorKind::Timeout => true,
            ErrorKind::Unavailable | ErrorKind::StreamIncomplete | ErrorKind::Internal => {
                !matches!(self.status_code, Some(503) | Some(429) | Some(400..=499))
            }
        }
    }

    /// Whether a router may send the same request to another worker, **provided no output has
    /// reached the client yet**: connect/send failures and HTTP 502/503/504 (`Unavailable`), and a
    /// stream that closed before its first item. Never 4xx, 429 or other 5xx.
    pub fn retry_elsewhere(&self) -> bool {
        match self.kind {
            ErrorKind::Unavailable => {
                matches!(self.status_code, None | Some(502) | Some(503) | Some(504))
            }
            ErrorKind::StreamIncomplete => true,
            _ => false,
        }
    }

    /// Shorthand for [`ErrorKind::InvalidArgument`].
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// Shorthand for [`ErrorKind::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// Shorthand for [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// Shorthand for [`ErrorKind::Timeout`].
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }

    /// Shorthand for [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Whether `message` may be shown to the client.
    pub fn is_public(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::InvalidArgument | ErrorKind::Unsupported
        )
    }
}
