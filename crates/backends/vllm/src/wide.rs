//! Integer literals past the 64-bit range, kept exact.
//!
//! vLLM decodes the body with Python's `json`, which keeps every integer literal a Python `int`
//! of arbitrary size (`-9223372036854775809`, `1000000000000000000000000000000`) and every
//! literal with a fraction or exponent a `float` (`1e+30`). serde_json (without
//! `arbitrary_precision`) reads an integer literal outside `i64`/`u64` as the nearest `f64`,
//! which loses both its digits and the fact that it was an integer. The two differ in vLLM:
//! an `int` field refuses the float `1e+30` (`int_parsing_size`, pydantic-core `float_as_int`)
//! but takes the int `10**30` (then msgpack refuses it: "can't serialize ints …"), and
//! `-9223372036854775809` is past msgpack's range while its `f64`, `-2**63`, is not.
//!
//! So while one body is validated ([`WideScope`]), the body's integer literals that serde_json
//! read as floats are kept in a per-thread table, keyed by the `f64` serde_json made of them;
//! [`lookup`] tells a float that came from such a literal, with its exact value. The table is
//! filled only when the decoded body holds such a float (an integral `f64` of magnitude at least
//! `2^63`), so ordinary bodies pay one walk over their non-id values and no re-lexing. A body
//! holding the same `f64` both as an integer literal and as a float literal is read as the
//! integer for both (the only imprecision left).

use std::cell::RefCell;

use serde_json::{Map, Value};

/// One integer literal read as a float: the `f64` serde_json made of it and its exact value
/// (`None` past the `i128` range).
#[derive(Debug, Clone, Copy, PartialEq)]
struct WideInt {
    approx: f64,
    exact: Option<i128>,
}

thread_local! {
    static TABLE: RefCell<Vec<WideInt>> = const { RefCell::new(Vec::new()) };
}

/// Keeps the wide-integer table of one body for the current thread; clears it when dropped.
#[derive(Debug)]
pub(crate) struct WideScope(());

impl WideScope {
    /// Fill the table from `body` when `map` (its decoded object) holds a float that may have
    /// been a wide integer literal.
    pub(crate) fn new(body: &[u8], map: &Map<String, Value>) -> Self {
        let found = if map.values().any(suspect) {
            scan(body)
        } else {
            Vec::new()
        };
        TABLE.with(|t| *t.borrow_mut() = found);
        Self(())
    }
}

impl Drop for WideScope {
    fn drop(&mut self) {
        TABLE.with(|t| t.borrow_mut().clear());
    }
}

/// For a float serde_json read from an integer literal of the current body: `Some(exact)`
/// (`exact` `None` past the `i128` range). `None`: a float literal (or no body in scope).
pub(crate) fn lookup(x: f64) -> Option<Option<i128>> {
    TABLE.with(|t| {
        t.borrow()
            .iter()
            .find(|w| w.approx.to_bits() == x.to_bits())
            .map(|w| w.exact)
    })
}

/// The Python `str()` of a number of the current body: a wide integer literal's digits, else
/// [`genfront_format::pyrepr::number_repr`].
pub(crate) fn number_text(n: &serde_json::Number) -> String {
    if !n.is_i64()
        && !n.is_u64()
        && let Some(x) = n.as_f64()
        && let Some(exact) = lookup(x)
    {
        return match exact {
            Some(i) => i.to_string(),
            None => format!("{x:.0}"),
        };
    }
    genfront_format::pyrepr::number_repr(n)
}

/// Whether `v` holds a float that an integer literal past 64 bits may have become.
fn suspect(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            !n.is_i64()
                && !n.is_u64()
                && n.as_f64().is_some_and(|x| {
                    x.is_finite() && x.fract() == 0.0 && x.abs() >= 9_223_372_036_854_775_808.0
                })
        }
        Value::Array(items) => items.iter().any(suspect),
        Value::Object(m) => m.values().any(suspect),
        _ => false,
    }
}

/// The integer literals of `body` (outside strings) that fit neither `i64` nor `u64`.
fn scan(body: &[u8]) -> Vec<WideInt> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                i += 1;
                while i < body.len() && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                let mut integer = true;
                while i < body.len() {
                    match body[i] {
                        b'0'..=b'9' => {}
                        b'.' | b'e' | b'E' | b'+' | b'-' => integer = false,
                        _ => break,
                    }
                    i += 1;
                }
                let Ok(text) = std::str::from_utf8(&body[start..i]) else {
                    continue;
                };
                if integer && text.parse::<i64>().is_err() && text.parse::<u64>().is_err() {
                    let approx = text.parse::<f64>().unwrap_or(f64::NAN);
                    let exact = text.parse::<i128>().ok();
                    if approx.is_finite() {
                        out.push(WideInt { approx, exact });
                    }
                }
            }
            _ => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_literals_keep_their_digits_float_literals_stay_floats() {
        let body = br#"{"a": -9223372036854775809, "b": 1e+30, "c": "99999999999999999999", "d": [1000000000000000000000000000000]}"#;
        let map: Map<String, Value> = serde_json::from_slice(body).expect("json");
        let _scope = WideScope::new(body, &map);
        let a = map["a"].as_f64().expect("f64");
        assert_eq!(lookup(a), Some(Some(-9_223_372_036_854_775_809)));
        assert_eq!(
            number_text(map["a"].as_number().expect("n")),
            "-9223372036854775809"
        );
        // `1e+30` is a float literal; the list's `10**30` literal is another f64 value.
        let b = map["b"].as_f64().expect("f64");
        let d = map["d"][0].as_f64().expect("f64");
        assert_eq!(b, d, "the same f64: read as the integer (documented)");
        assert_eq!(lookup(d), Some(Some(10i128.pow(30))));
        drop(_scope);
        assert_eq!(lookup(a), None, "the table lives for one body");
    }

    #[test]
    fn ordinary_bodies_are_not_rescanned() {
        let body = br#"{"token_ids": [1, 2, 3], "x": 2.5, "y": 1e300}"#;
        let map: Map<String, Value> = serde_json::from_slice(body).expect("json");
        let _scope = WideScope::new(body, &map);
        assert!(TABLE.with(|t| t.borrow().is_empty()));
    }
}
