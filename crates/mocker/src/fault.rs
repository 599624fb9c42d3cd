//! [`ScriptedFault`]: deterministic failure injection (never random rates), with a compact text
//! form for a `--fault` flag.
//!
//! Syntax: `ACTION@WHEN[:ARGS]`, where `WHEN` is the 1-based number of the `generate` call the
//! fault applies to, or `*` for every request:
//!
//! | text | meaning |
//! |---|---|
//! | `error@3:unavailable[:MESSAGE]` | request 3 fails before its first token with that [`ErrorKind`] (default `unavailable`) |
//! | `fail-after@2:5[:KIND[:MESSAGE]]` | request 2 yields `Err` after 5 tokens per choice (default kind `internal`) |
//! | `stall@1:3` | request 1 produces nothing after 3 tokens per choice, until cancelled or dropped |
//! | `finish-error@*:4[:MESSAGE]` | every request's choices end with [`genfront_protocol::FinishReason::Error`] after 4 tokens |
//!
//! Kinds are the snake_case names of [`ErrorKind`] (`invalid_argument`, `unsupported`,
//! `unavailable`, `overloaded`, `stream_incomplete`, `cancelled`, `internal`) or their
//! `backend.*` codes. A message is the rest of the text, so it may contain `:`.

use std::fmt;
use std::str::FromStr;

use genfront_protocol::ErrorKind;
use serde::{Deserialize, Serialize};

/// Message used when a fault's text form gives none.
pub const DEFAULT_FAULT_MESSAGE: &str = "scripted fault";

/// One scripted fault: *which* requests it hits and *what* happens to them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedFault {
    /// Which requests the fault applies to.
    pub when: FaultTrigger,
    /// What happens to them.
    pub action: FaultAction,
}

/// Which requests a [`ScriptedFault`] applies to. Requests are numbered by `generate` call order,
/// starting at 1, per engine (rejected requests count too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultTrigger {
    /// Only the k-th `generate` call (1-based).
    Request(u64),
    /// Every request.
    Every,
}

/// What a [`ScriptedFault`] does. Token counts are per choice: the fault fires once every
/// still-running choice has produced `tokens` tokens (choices advance in lock step); it never fires
/// if all choices finish earlier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FaultAction {
    /// The stream's first (and only) item is `Err(EngineError{kind, message})`; nothing is
    /// generated and the request counts as rejected.
    Error {
        /// Error kind.
        kind: ErrorKind,
        /// Error message.
        message: String,
    },
    /// After `tokens` tokens the stream yields `Err(EngineError{kind, message})` and ends.
    FailAfter {
        /// Tokens per choice delivered before the error.
        tokens: u32,
        /// Error kind.
        kind: ErrorKind,
        /// Error message.
        message: String,
    },
    /// After `tokens` tokens the stream yields nothing more until it is cancelled (then every
    /// unfinished choice gets its `Cancelled` item) or dropped.
    StallAfter {
        /// Tokens per choice delivered before the stall.
        tokens: u32,
    },
    /// After `tokens` tokens every unfinished choice ends with one item (no new tokens) whose
    /// finish reason is `FinishReason::Error{message}`.
    FinishError {
        /// Tokens per choice delivered before the error finish.
        tokens: u32,
        /// The finish reason's message.
        message: String,
    },
}

/// Why a fault's text form did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFaultError {
    /// No `@` between action and trigger.
    #[error("fault `{0}`: expected ACTION@WHEN[:ARGS], e.g. error@3:unavailable")]
    Shape(String),
    /// Unknown action name.
    #[error("unknown fault action `{0}` (expected error, fail-after, stall or finish-error)")]
    Action(String),
    /// The trigger is neither `*` nor a positive integer.
    #[error("fault trigger `{0}` must be a request number >= 1 or `*`")]
    Trigger(String),
    /// A required token count is missing or not a number.
    #[error("fault `{0}` needs a token count, e.g. stall@1:3")]
    Tokens(String),
    /// Unknown error kind.
    #[error("unknown error kind `{0}`")]
    Kind(String),
    /// Arguments that the action does not take.
    #[error("fault `{0}` has unexpected arguments")]
    Extra(String),
}

// === impl ScriptedFault ===

impl ScriptedFault {
    /// A fault doing `action` to the requests selected by `when`.
    pub fn new(when: FaultTrigger, action: FaultAction) -> Self {
        Self { when, action }
    }

    /// Whether the fault applies to the `request`-th `generate` call (1-based).
    pub fn applies_to(&self, request: u64) -> bool {
        match self.when {
            FaultTrigger::Request(k) => k == request,
            FaultTrigger::Every => true,
        }
    }
}

impl fmt::Display for ScriptedFault {
    /// The canonical text form, which [`ScriptedFault::from_str`] parses back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let when = match self.when {
            FaultTrigger::Request(k) => k.to_string(),
            FaultTrigger::Every => "*".to_owned(),
        };
        match &self.action {
            FaultAction::Error { kind, message } => {
                write!(f, "error@{when}:{}:{message}", kind_name(*kind))
            }
            FaultAction::FailAfter {
                tokens,
                kind,
                message,
            } => write!(
                f,
                "fail-after@{when}:{tokens}:{}:{message}",
                kind_name(*kind)
            ),
            FaultAction::StallAfter { tokens } => write!(f, "stall@{when}:{tokens}"),
            FaultAction::FinishError { tokens, message } => {
                write!(f, "finish-error@{when}:{tokens}:{message}")
            }
        }
    }
}

impl FromStr for ScriptedFault {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let (action, rest) = text
            .split_once('@')
            .ok_or_else(|| ParseFaultError::Shape(text.to_owned()))?;
        let (when, args) = match rest.split_once(':') {
            Some((when, args)) => (when, Some(args)),
            None => (rest, None),
        };
        let when = parse_trigger(when)?;
        let message = |m: Option<&str>| m.unwrap_or(DEFAULT_FAULT_MESSAGE).to_owned();
        let action = match action.trim().to_ascii_lowercase().as_str() {
            "error" => {
                let mut it = args.map(|a| a.splitn(2, ':'));
                let kind = it.as_mut().and_then(Iterator::next);
                let msg = it.as_mut().and_then(Iterator::next);
                FaultAction::Error {
                    kind: kind.map_or(Ok(ErrorKind::Unavailable), parse_kind)?,
                    message: message(msg),
                }
            }
            "fail-after" | "fail_after" => {
                let mut it = args.unwrap_or_default().splitn(3, ':');
                let tokens = parse_tokens(it.next(), text)?;
                FaultAction::FailAfter {
                    tokens,
                    kind: it.next().map_or(Ok(ErrorKind::Internal), parse_kind)?,
                    message: message(it.next()),
                }
            }
            "stall" | "stall-after" | "stall_after" => {
                let mut it = args.unwrap_or_default().splitn(2, ':');
                let tokens = parse_tokens(it.next(), text)?;
                if it.next().is_some() {
                    return Err(ParseFaultError::Extra(text.to_owned()));
                }
                FaultAction::StallAfter { tokens }
            }
            "finish-error" | "finish_error" => {
                let mut it = args.unwrap_or_default().splitn(2, ':');
                let tokens = parse_tokens(it.next(), text)?;
                FaultAction::FinishError {
                    tokens,
                    message: message(it.next()),
                }
            }
            other => return Err(ParseFaultError::Action(other.to_owned())),
        };
        Ok(Self { when, action })
    }
}

fn parse_trigger(s: &str) -> Result<FaultTrigger, ParseFaultError> {
    let s = s.trim();
    if matches!(s, "*" | "every" | "all") {
        return Ok(FaultTrigger::Every);
    }
    match s.parse::<u64>() {
        Ok(k) if k >= 1 => Ok(FaultTrigger::Request(k)),
        _ => Err(ParseFaultError::Trigger(s.to_owned())),
    }
}

fn parse_tokens(s: Option<&str>, text: &str) -> Result<u32, ParseFaultError> {
    s.and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| ParseFaultError::Tokens(text.to_owned()))
}

/// Parse an [`ErrorKind`] from its snake_case name or its `backend.*` code.
pub fn parse_kind(s: &str) -> Result<ErrorKind, ParseFaultError> {
    let name = s.trim();
    let name = name.strip_prefix("backend.").unwrap_or(name);
    ALL_KINDS
        .iter()
        .copied()
        .find(|&k| kind_name(k).eq_ignore_ascii_case(name))
        .ok_or_else(|| ParseFaultError::Kind(s.to_owned()))
}

const ALL_KINDS: [ErrorKind; 7] = [
    ErrorKind::InvalidArgument,
    ErrorKind::Unsupported,
    ErrorKind::Unavailable,
    ErrorKind::Overloaded,
    ErrorKind::StreamIncomplete,
    ErrorKind::Cancelled,
    ErrorKind::Internal,
];

fn kind_name(kind: ErrorKind) -> &'static str {
    let code = kind.code();
    code.strip_prefix("backend.").unwrap_or(code)
}

#[cfg(test)]
mod tests;
