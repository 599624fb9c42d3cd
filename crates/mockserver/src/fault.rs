//! [`MockFault`]: the `--fault SPEC` value, either an engine fault (handed to the
//! [`genfront_mocker::MockEngine`]) or an HTTP-level fault (applied by this crate's fault layer).
//!
//! Syntax `ACTION@WHEN[:ARGS]`; `WHEN` is a 1-based request number or `*` (every request).
//! Engine faults number *engine* requests (batch items × `n`, and `/health_generate` probes
//! too); HTTP faults number *generate HTTP requests* on this server (valid or not).
//!
//! | text | what the client sees |
//! |---|---|
//! | `error@K:KIND[:MSG]`, `fail-after@K:N[:KIND[:MSG]]`, `stall@K:N`, `finish-error@K:N[:MSG]` | engine faults ([`genfront_mocker::ScriptedFault`]), rendered by the format like any engine error |
//! | `http-status@K:STATUS[:MSG]` | request K is answered at once (the engine never sees it) with HTTP STATUS and the native error envelope; MSG defaults to the status's reason phrase |
//! | `drop@K:N` | SSE: after N token-bearing events the connection is cut (body error: no `[DONE]`, no clean end). Unary: the request runs, its answer is discarded and the connection closes without a response |
//! | `malformed@K:N` | SSE: after N token-bearing events one `data: {not json` event is sent and the body ends (no `[DONE]`). Unary: the request runs and the body is replaced by `{not json` |
//! | `abort-status@K:STATUS[:MSG]` | SGLang only. Unary: a 200 answer becomes HTTP STATUS with `{"error":{"message":MSG}}` (4xx) or the flat `HTTPException` envelope (5xx). SSE: every terminal chunk's `meta_info.finish_reason` becomes `{"type":"abort","message":MSG,"status_code":STATUS,"err_type":…}` (`"BadRequestError"` for 4xx, `null` otherwise), then `[DONE]` |
//!
//! A *token-bearing* event carries at least one new output token: a vLLM chunk with non-empty
//! `choices[].token_ids`, or an SGLang chunk whose `meta_info.completion_tokens` grew for its
//! `index`. A stream with fewer than N of them is passed through untouched. MSG is the rest of
//! the text (it may contain `:`); default [`genfront_mocker::DEFAULT_FAULT_MESSAGE`] for
//! `abort-status`.
//!
//! `abort-status` is built in this crate's layer, because the engine contract's
//! `FinishReason::Cancelled` has no status code and the SGLang format always renders
//! `"status_code":null,"err_type":null`: the generation runs to its normal end (the engine counts
//! it completed) and only the answer is rewritten. Rewritten chunks are re-serialised by
//! `serde_json` (same values and key order; a float may be spelled differently from Python's
//! `repr`).

use std::fmt;
use std::str::FromStr;

use genfront_mocker::{DEFAULT_FAULT_MESSAGE, FaultTrigger, ParseFaultError, ScriptedFault};
use http::StatusCode;

/// One `--fault` value.
#[derive(Debug, Clone, PartialEq)]
pub enum MockFault {
    /// A fault of the in-process engine.
    Engine(ScriptedFault),
    /// A fault of the HTTP layer in front of the format.
    Http(HttpFault),
}

/// An HTTP-level fault: *which* generate requests it hits and *what* happens to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpFault {
    /// Which generate HTTP requests (1-based, in arrival order) it applies to.
    pub when: FaultTrigger,
    /// What happens to them.
    pub action: HttpAction,
}

/// What an [`HttpFault`] does (see the module table for the wire result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpAction {
    /// `http-status@K:STATUS[:MSG]`: answer STATUS with the native error envelope.
    Status {
        /// A 4xx or 5xx status.
        status: StatusCode,
        /// Message; `None` = the status's reason phrase.
        message: Option<String>,
    },
    /// `drop@K:N`: cut the connection after N token-bearing SSE events (unary: no response).
    Drop {
        /// Token-bearing events delivered before the cut.
        events: u32,
    },
    /// `malformed@K:N`: after N token-bearing SSE events send `data: {not json` and end
    /// (unary: body `{not json`).
    Malformed {
        /// Token-bearing events delivered before the bad frame.
        events: u32,
    },
    /// `abort-status@K:STATUS[:MSG]`: SGLang only; the request ends with SGLang's abort shape
    /// carrying `status_code` STATUS.
    AbortStatus {
        /// A 4xx or 5xx status.
        status: StatusCode,
        /// The abort message.
        message: String,
    },
}

/// Why a `--fault` value did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseMockFaultError {
    /// An engine fault that the mocker refused.
    #[error(transparent)]
    Engine(#[from] ParseFaultError),
    /// The trigger is neither `*` nor a positive integer.
    #[error("fault trigger `{0}` must be a request number >= 1 or `*`")]
    Trigger(String),
    /// A status that is missing, not a number, or not in 400..=599.
    #[error("fault `{0}` needs an HTTP error status in 400..=599, e.g. http-status@1:503")]
    Status(String),
    /// A missing or non-numeric event count.
    #[error("fault `{0}` needs an event count, e.g. drop@1:3")]
    Events(String),
    /// Arguments the action does not take.
    #[error("fault `{0}` has unexpected arguments")]
    Extra(String),
}

// === impl HttpFault ===

impl HttpFault {
    /// Whether the fault applies to the `request`-th generate HTTP request (1-based).
    pub fn applies_to(&self, request: u64) -> bool {
        match self.when {
            FaultTrigger::Request(k) => k == request,
            FaultTrigger::Every => true,
        }
    }
}

impl fmt::Display for HttpFault {
    /// The canonical text form, which parses back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let when = match self.when {
            FaultTrigger::Request(k) => k.to_string(),
            FaultTrigger::Every => "*".to_owned(),
        };
        match &self.action {
            HttpAction::Status { status, message } => {
                write!(f, "http-status@{when}:{}", status.as_u16())?;
                match message {
                    Some(m) => write!(f, ":{m}"),
                    None => Ok(()),
                }
            }
            HttpAction::Drop { events } => write!(f, "drop@{when}:{events}"),
            HttpAction::Malformed { events } => write!(f, "malformed@{when}:{events}"),
            HttpAction::AbortStatus { status, message } => {
                write!(f, "abort-status@{when}:{}:{message}", status.as_u16())
            }
        }
    }
}

// === impl MockFault ===

impl fmt::Display for MockFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MockFault::Engine(e) => e.fmt(f),
            MockFault::Http(h) => h.fmt(f),
        }
    }
}

impl FromStr for MockFault {
    type Err = ParseMockFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let Some((action, rest)) = text.split_once('@') else {
            return Ok(MockFault::Engine(text.parse()?));
        };
        let action = action.trim().to_ascii_lowercase();
        if !matches!(
            action.as_str(),
            "http-status" | "http_status" | "drop" | "malformed" | "abort-status" | "abort_status"
        ) {
            return Ok(MockFault::Engine(text.parse()?));
        }
        let (when, args) = match rest.split_once(':') {
            Some((w, a)) => (w, Some(a)),
            None => (rest, None),
        };
        let when = parse_trigger(when)?;
        let status = |a: Option<&str>| -> Result<StatusCode, ParseMockFaultError> {
            a.and_then(|s| s.trim().parse::<u16>().ok())
                .filter(|s| (400..=599).contains(s))
                .and_then(|s| StatusCode::from_u16(s).ok())
                .ok_or_else(|| ParseMockFaultError::Status(text.to_owned()))
        };
        let events = |a: Option<&str>| -> Result<u32, ParseMockFaultError> {
            let a = a.ok_or_else(|| ParseMockFaultError::Events(text.to_owned()))?;
            if a.contains(':') {
                return Err(ParseMockFaultError::Extra(text.to_owned()));
            }
            a.trim()
                .parse()
                .map_err(|_| ParseMockFaultError::Events(text.to_owned()))
        };
        let mut split = args.map(|a| a.splitn(2, ':'));
        let first = split.as_mut().and_then(Iterator::next);
        let message = split.as_mut().and_then(Iterator::next).map(str::to_owned);
        let action = match action.as_str() {
            "http-status" | "http_status" => HttpAction::Status {
                status: status(first)?,
                message,
            },
            "abort-status" | "abort_status" => HttpAction::AbortStatus {
                status: status(first)?,
                message: message.unwrap_or_else(|| DEFAULT_FAULT_MESSAGE.to_owned()),
            },
            "drop" => HttpAction::Drop {
                events: events(args)?,
            },
            _ => HttpAction::Malformed {
                events: events(args)?,
            },
        };
        Ok(MockFault::Http(HttpFault { when, action }))
    }
}

fn parse_trigger(s: &str) -> Result<FaultTrigger, ParseMockFaultError> {
    let s = s.trim();
    if matches!(s, "*" | "every" | "all") {
        return Ok(FaultTrigger::Every);
    }
    match s.parse::<u64>() {
        Ok(k) if k >= 1 => Ok(FaultTrigger::Request(k)),
        _ => Err(ParseMockFaultError::Trigger(s.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(s: &str) -> HttpFault {
        match s.parse::<MockFault>() {
            Ok(MockFault::Http(h)) => h,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn http_faults_parse_and_round_trip() {
        let h = http("http-status@2:503");
        assert_eq!(h.when, FaultTrigger::Request(2));
        assert_eq!(
            h.action,
            HttpAction::Status {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: None
            }
        );
        assert!(h.applies_to(2) && !h.applies_to(1));
        assert_eq!(
            http("http-status@*:429:slow: down").action,
            HttpAction::Status {
                status: StatusCode::TOO_MANY_REQUESTS,
                message: Some("slow: down".into())
            }
        );
        assert!(http("drop@*:0").applies_to(7));
        assert_eq!(http("drop@1:3").action, HttpAction::Drop { events: 3 });
        assert_eq!(
            http("malformed@4:1").action,
            HttpAction::Malformed { events: 1 }
        );
        assert_eq!(
            http("abort-status@1:400").action,
            HttpAction::AbortStatus {
                status: StatusCode::BAD_REQUEST,
                message: DEFAULT_FAULT_MESSAGE.into()
            }
        );
        for s in [
            "http-status@2:503",
            "http-status@*:429:slow: down",
            "drop@1:3",
            "malformed@*:0",
            "abort-status@3:503:Aborted by AbortReq.",
        ] {
            let f: MockFault = s.parse().expect("parses");
            assert_eq!(f.to_string(), s);
            assert_eq!(f.to_string().parse::<MockFault>(), Ok(f));
        }
    }

    #[test]
    fn engine_faults_pass_to_the_mocker() {
        for s in [
            "error@3:unavailable",
            "fail-after@2:5",
            "stall@1:3",
            "finish-error@*:4",
        ] {
            assert!(
                matches!(s.parse::<MockFault>(), Ok(MockFault::Engine(_))),
                "{s}"
            );
        }
    }

    #[test]
    fn bad_faults_are_typed_errors() {
        let e = |s: &str| s.parse::<MockFault>().err();
        assert!(matches!(
            e("explode@1"),
            Some(ParseMockFaultError::Engine(_))
        ));
        assert!(matches!(
            e("nonsense"),
            Some(ParseMockFaultError::Engine(_))
        ));
        assert!(matches!(
            e("drop@0:1"),
            Some(ParseMockFaultError::Trigger(_))
        ));
        assert!(matches!(e("drop@1"), Some(ParseMockFaultError::Events(_))));
        assert!(matches!(
            e("drop@1:x"),
            Some(ParseMockFaultError::Events(_))
        ));
        assert!(matches!(
            e("drop@1:2:3"),
            Some(ParseMockFaultError::Extra(_))
        ));
        assert!(matches!(
            e("http-status@1:200"),
            Some(ParseMockFaultError::Status(_))
        ));
        assert!(matches!(
            e("http-status@1"),
            Some(ParseMockFaultError::Status(_))
        ));
        assert!(matches!(
            e("abort-status@1:600"),
            Some(ParseMockFaultError::Status(_))
        ));
    }
}
