//! Python-compatible text for values quoted in vLLM's messages.
//!
//! vLLM builds its error messages with f-strings (`str(value)`) and pydantic's error dicts with
//! `repr(...)`, so a float is `3.0` (not `3`), `None`/`True` are capitalised and strings are quoted
//! with `'`. These helpers reproduce that text for JSON values.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// Python `repr(float)` / `str(float)`: shortest round-trip digits, positional for exponents in
/// `-4..16`, otherwise `1e+16` / `1.5e-07`.
pub(crate) fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = (exp + 1) as usize;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(mantissa);
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// Python `repr(str)`.
pub(crate) fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Something whose Python `repr()` can be quoted in a pydantic error dict.
pub(crate) trait PyRepr {
    /// Append the repr to `out`, stopping early once `out` exceeds `budget` bytes.
    fn write_py(&self, out: &mut String, budget: usize);
}

impl PyRepr for Value {
    fn write_py(&self, out: &mut String, budget: usize) {
        write_repr(self, out, budget);
    }
}

impl PyRepr for Map<String, Value> {
    fn write_py(&self, out: &mut String, budget: usize) {
        write_map(self, out, budget);
    }
}

/// Python `repr()` of the object `json.loads` would build from `value`, cut off once it exceeds
/// `budget` bytes (the cut text ends with `...`). Large inputs cost at most `budget` bytes.
pub(crate) fn py_repr<T: PyRepr + ?Sized>(value: &T, budget: usize) -> String {
    let mut out = String::new();
    value.write_py(&mut out, budget);
    if out.len() > budget {
        let mut cut = budget;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

fn write_repr(value: &Value, out: &mut String, budget: usize) {
    if out.len() > budget {
        return;
    }
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&py_number(n)),
        Value::String(s) => out.push_str(&py_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out, budget);
                if out.len() > budget {
                    return;
                }
            }
            out.push(']');
        }
        Value::Object(map) => write_map(map, out, budget),
    }
}

fn write_map(map: &Map<String, Value>, out: &mut String, budget: usize) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&py_str(k));
        out.push_str(": ");
        write_repr(v, out, budget);
        if out.len() > budget {
            return;
        }
    }
    out.push('}');
}

/// Python text of a JSON number (`json.loads` makes integers `int` and everything else `float`).
pub(crate) fn py_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        py_float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Python `str(list[int])`.
pub(crate) fn py_int_list<T: std::fmt::Display>(items: &[T]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{item}");
    }
    out.push(']');
    out
}
