//! Pydantic-style schema errors and the lax type coercions pydantic applies to a JSON body.
//!
//! vLLM parses the body with FastAPI + pydantic. Type errors, missing fields and `ValueError`s of
//! field/model validators become one `RequestValidationError`, which vLLM renders as HTTP 400 with
//! `"type": "Bad Request"`, `param` = the first error's cleaned `loc` (`body.token_ids`) and the
//! message `"{count} validation error(s):\n  {error dict}"`
//! (`entrypoints/serve/exception_handling/handlers/validation.py`, vLLM 0.33.0). Each listed error
//! dict is `_format_error`'s: `loc` is the joined, cleaned string (`'body.token_ids'`, not a
//! tuple), `input` is `_summarize_error_input`'s stand-in (`'<list of 3 items>'`, `'5'`, a string
//! cut at 200 characters), the dict text is cut at 1000 characters with `...[truncated]`, at most
//! 10 errors are listed and the rest counted as `  ...and N more errors`.

use std::fmt::{self, Write as _};

use genfront_format::GenerateError;
use serde_json::Value;

use crate::pyfmt::{PyRepr, py_float, py_str};

/// At most this many errors are listed in a message (`_MAX_REPORTED_ERRORS`; the count still
/// covers all of them).
const MAX_LISTED: usize = 10;
/// Each listed error is cut to this many characters (`_MAX_ERROR_CHARS`).
const MAX_ERROR_CHARS: usize = 1000;
/// A string input is cut to this many characters (`_MAX_ERROR_INPUT_CHARS`).
const MAX_ERROR_INPUT_CHARS: usize = 200;

/// One element of a pydantic error location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Loc {
    /// A field or dict key.
    Key(String),
    /// A list index.
    Idx(usize),
}

impl From<&str> for Loc {
    fn from(k: &str) -> Self {
        Loc::Key(k.to_owned())
    }
}

impl From<usize> for Loc {
    fn from(i: usize) -> Self {
        Loc::Idx(i)
    }
}

/// Build a location path from parts.
pub(crate) fn loc<const N: usize>(parts: [Loc; N]) -> Vec<Loc> {
    parts.into()
}

/// Extend a location with one more part.
pub(crate) fn child(base: &[Loc], part: impl Into<Loc>) -> Vec<Loc> {
    let mut v = base.to_vec();
    v.push(part.into());
    v
}

/// One pydantic error dict: `{'type', 'loc', 'msg', 'input'[, 'ctx']}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Issue {
    /// Pydantic error type, e.g. `missing`, `int_parsing`, `value_error`.
    pub kind: &'static str,
    /// Location, starting with `body`.
    pub loc: Vec<Loc>,
    /// Pydantic message, e.g. `Field required`.
    pub msg: String,
    /// `repr()` of `_summarize_error_input(input)` (always a quoted string).
    pub input: String,
    /// `repr()` of the `ctx` dict, when pydantic sets one.
    pub ctx: Option<String>,
}

impl Issue {
    /// An issue about `input`.
    pub(crate) fn new<I: PyRepr + ?Sized>(
        kind: &'static str,
        loc: Vec<Loc>,
        msg: impl Into<String>,
        input: &I,
    ) -> Self {
        Self {
            kind,
            loc,
            msg: msg.into(),
            input: py_str(&input.summary(MAX_ERROR_INPUT_CHARS)),
            ctx: None,
        }
    }

    /// A `ValueError` raised by a validator: `msg` is `Value error, {message}` and `ctx` holds the
    /// exception.
    pub(crate) fn value_error<I: PyRepr + ?Sized>(loc: Vec<Loc>, message: &str, input: &I) -> Self {
        let mut issue = Self::new("value_error", loc, format!("Value error, {message}"), input);
        issue.ctx = Some(format!("{{'error': ValueError({})}}", py_str(message)));
        issue
    }

    /// A required field that is absent; `container` is the dict it should be in.
    pub(crate) fn missing<I: PyRepr + ?Sized>(loc: Vec<Loc>, container: &I) -> Self {
        Self::new("missing", loc, "Field required", container)
    }
}

impl fmt::Display for Issue {
    /// `str()` of the error dict as `_format_error` leaves it (before the 1000-character cut).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{'type': {}, 'loc': {}, 'msg': {}, 'input': {}",
            py_str(self.kind),
            py_str(&clean_loc(&self.loc)),
            py_str(&self.msg),
            self.input
        )?;
        if let Some(ctx) = &self.ctx {
            write!(f, ", 'ctx': {ctx}")?;
        }
        f.write_str("}")
    }
}

/// Pydantic-internal wrapper / union-branch markers that `clean_loc_for_param` drops.
const INTERNAL_LOC_MARKERS: &[&str] = &[
    "function-wrap",
    "function-after",
    "function-before",
    "function-plain",
    "json-or-python",
    "lax-or-strict",
    "chain",
    "default",
    "nullable",
    "tagged-union",
    "union",
    "call",
    "arguments",
    "is-instance",
    "is-subclass",
    "callable",
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "bytearray",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "complex",
    "none",
    "nonetype",
];

fn is_internal_segment(segment: &str) -> bool {
    segment.contains(['[', ']', '{', '}', '(', ')'])
        || INTERNAL_LOC_MARKERS.contains(&segment.to_ascii_lowercase().as_str())
}

/// vLLM's `clean_loc_for_param`: the dotted location without pydantic's internal markers, e.g.
/// `body.sampling_params.n`.
pub(crate) fn clean_loc(loc: &[Loc]) -> String {
    let text = |part: &Loc| match part {
        Loc::Key(k) => k.clone(),
        Loc::Idx(i) => i.to_string(),
    };
    let parts: Vec<String> = loc
        .iter()
        .map(text)
        .filter(|p| !is_internal_segment(p))
        .collect();
    if parts.is_empty() {
        loc.iter().map(text).collect::<Vec<_>>().join(".")
    } else {
        parts.join(".")
    }
}

/// The `Bad Request` error for a list of issues (must not be empty to carry a `param`).
pub(crate) fn schema_error(issues: &[Issue]) -> GenerateError {
    let count = issues.len();
    let label = if count == 1 { "error" } else { "errors" };
    let mut message = format!("{count} validation {label}:\n");
    for issue in issues.iter().take(MAX_LISTED) {
        let mut text = issue.to_string();
        if text.chars().count() > MAX_ERROR_CHARS {
            text = text.chars().take(MAX_ERROR_CHARS).collect::<String>() + "...[truncated]";
        }
        let _ = writeln!(message, "  {text}");
    }
    if count > MAX_LISTED {
        let _ = writeln!(message, "  ...and {} more {label}", count - MAX_LISTED);
    }
    let message = message.trim_end().to_owned();
    GenerateError::Schema {
        message,
        param: issues.first().map(|i| clean_loc(&i.loc)),
    }
}

/// A schema error whose only "error" is a plain string (vLLM raises `RequestValidationError`
/// with a list of strings for the media-type check), so there is no `param`.
pub(crate) fn schema_error_text(text: &str) -> GenerateError {
    GenerateError::Schema {
        message: format!("1 validation error:\n  {text}"),
        param: None,
    }
}

// === Python's json.JSONDecodeError text ===

/// Python's `json.JSONDecodeError` for a serde error on `body`: the short message
/// (`Expecting value`, `Extra data`, …), the character offset, and its line and column.
pub(crate) struct JsonDecodeError {
    /// Python's `msg`.
    pub msg: &'static str,
    /// Python's `pos` (characters from the start).
    pub pos: usize,
    /// 1-based line of `pos`.
    pub line: usize,
    /// 1-based column of `pos`.
    pub column: usize,
}

/// Map a serde error to what Python's `json.loads` reports for the same bytes.
pub(crate) fn json_decode_error(err: &serde_json::Error, body: &[u8]) -> JsonDecodeError {
    let text = err.to_string();
    let msg = if text.contains("trailing characters") {
        "Extra data"
    } else if text.contains("EOF while parsing a string") || text.contains("control character") {
        "Unterminated string starting at"
    } else if text.contains("key must be a string") {
        "Expecting property name enclosed in double quotes"
    } else if text.contains("expected `:`") {
        "Expecting ':' delimiter"
    } else if text.contains("expected `,` or `}`") || text.contains("expected `,` or `]`") {
        "Expecting ',' delimiter"
    } else {
        "Expecting value"
    };
    let byte = if err.classify() == serde_json::error::Category::Eof {
        body.len()
    } else {
        let (line, column) = (err.line().max(1), err.column().max(1));
        let line_start = body
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line.saturating_sub(2))
            .map_or(0, |(i, _)| if line > 1 { i + 1 } else { 0 });
        let mut at = (line_start + column - 1).min(body.len());
        if msg == "Expecting value" {
            // serde fails inside a bad literal (`nul`, `not`); Python reports where it starts.
            let mut start = at;
            while start > 0 && body[start - 1].is_ascii_whitespace() {
                start -= 1;
            }
            if start > 0 && body[start - 1].is_ascii_alphabetic() {
                while start > 0 && body[start - 1].is_ascii_alphabetic() {
                    start -= 1;
                }
                at = start;
            }
        }
        at
    };
    let before = String::from_utf8_lossy(&body[..byte]);
    let pos = before.chars().count();
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    JsonDecodeError {
        msg,
        pos,
        line,
        column,
    }
}

/// Python's `str(json.JSONDecodeError)`: `Expecting value: line 1 column 1 (char 0)`.
pub(crate) fn json_decode_message(err: &serde_json::Error, body: &[u8]) -> String {
    let e = json_decode_error(err, body);
    format!(
        "{}: line {} column {} (char {})",
        e.msg, e.line, e.column, e.pos
    )
}

// === lax coercions (pydantic python mode) ===

/// A Python `int` from JSON: exact below 2^127, otherwise kept as the float it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PyInt {
    value: i128,
    huge: Option<f64>,
}

impl PyInt {
    /// An exact value.
    pub(crate) fn new(value: i128) -> Self {
        Self { value, huge: None }
    }

    /// The value, saturated to the `i128` range.
    pub(crate) fn get(self) -> i128 {
        self.value
    }

    /// Whether msgpack can carry it (`-2^63 ..= 2^64 - 1`), the range vLLM's msgpack round trip
    /// accepts.
    pub(crate) fn fits_msgpack(self) -> bool {
        self.huge.is_none() && (-(1i128 << 63)..=(1i128 << 64) - 1).contains(&self.value)
    }
}

impl fmt::Display for PyInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.huge {
            Some(x) => write!(f, "{x:.0}"),
            None => write!(f, "{}", self.value),
        }
    }
}

/// A failed coercion: pydantic error type and message.
pub(crate) type Fail = (&'static str, &'static str);

const INT_TYPE: Fail = ("int_type", "Input should be a valid integer");

/// Pydantic's lax `int`.
pub(crate) fn to_int(v: &Value) -> Result<PyInt, Fail> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(PyInt::new(i128::from(i)))
            } else if let Some(u) = n.as_u64() {
                Ok(PyInt::new(i128::from(u)))
            } else {
                let x = n.as_f64().unwrap_or(f64::NAN);
                match crate::wide::lookup(x) {
                    // An integer literal past 64 bits: a Python int, exact.
                    Some(Some(exact)) => Ok(PyInt::new(exact)),
                    Some(None) => Ok(PyInt {
                        value: if x > 0.0 { i128::MAX } else { i128::MIN },
                        huge: Some(x),
                    }),
                    None => float_to_int(x),
                }
            }
        }
        Value::Bool(b) => Ok(PyInt::new(i128::from(*b))),
        Value::String(s) => s.trim().parse::<i128>().map(PyInt::new).map_err(|_| {
            (
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
            )
        }),
        _ => Err(INT_TYPE),
    }
}

fn float_to_int(x: f64) -> Result<PyInt, Fail> {
    if !x.is_finite() {
        return Err(("finite_number", "Input should be a finite number"));
    }
    if x.fract() != 0.0 {
        return Err((
            "int_from_float",
            "Input should be a valid integer, got a number with a fractional part",
        ));
    }
    // pydantic-core `float_as_int`: a float takes an int's place only strictly inside `i64`.
    if (i64::MIN as f64) < x && x < (i64::MAX as f64) {
        Ok(PyInt::new(x as i128))
    } else {
        Err((
            "int_parsing_size",
            "Unable to parse input string as an integer, exceeded maximum size",
        ))
    }
}

/// Pydantic's lax `float`.
pub(crate) fn to_float(v: &Value) -> Result<f64, Fail> {
    match v {
        Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
        Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        Value::String(s) => {
            let t = s.trim().to_ascii_lowercase();
            match t.as_str() {
                "inf" | "+inf" | "infinity" | "+infinity" => Ok(f64::INFINITY),
                "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                "nan" | "+nan" | "-nan" => Ok(f64::NAN),
                _ => t.parse::<f64>().map_err(|_| {
                    (
                        "float_parsing",
                        "Input should be a valid number, unable to parse string as a number",
                    )
                }),
            }
        }
        _ => Err(("float_type", "Input should be a valid number")),
    }
}

/// Pydantic's lax `bool`.
pub(crate) fn to_bool(v: &Value) -> Result<bool, Fail> {
    const TYPE: Fail = ("bool_type", "Input should be a valid boolean");
    const PARSING: Fail = (
        "bool_parsing",
        "Input should be a valid boolean, unable to interpret input",
    );
    match v {
        Value::Bool(b) => Ok(*b),
        // Read as an `i64` first: an int past it, or a float that is not an integral value
        // strictly inside it, is the type error; then it must be 0 or 1.
        Value::Number(n) => match n.as_i64() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(_) => Err(PARSING),
            None if n.is_u64() => Err(TYPE),
            None => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if !x.is_finite()
                    || x.fract() != 0.0
                    || !((i64::MIN as f64) < x && x < (i64::MAX as f64))
                {
                    Err(TYPE)
                } else if x == 0.0 {
                    Ok(false)
                } else if x == 1.0 {
                    Ok(true)
                } else {
                    Err(PARSING)
                }
            }
        },
        // No whitespace stripping: `' t '` is refused.
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(true),
            _ => Err(PARSING),
        },
        _ => Err(TYPE),
    }
}

/// Pydantic's `str` (no coercion from numbers).
pub(crate) fn to_str(v: &Value) -> Result<&str, Fail> {
    v.as_str()
        .ok_or(("string_type", "Input should be a valid string"))
}

/// Python `str()` of a float for messages (`3.0`, `inf`).
pub(crate) fn float_text(x: f64) -> String {
    py_float(x)
}
