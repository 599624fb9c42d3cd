//! Python `repr()` of the values native servers interpolate into their error messages.
//!
//! SGLang and vLLM build their validation messages with f-strings (`f"got {self.temperature}."`,
//! `f"stop={stop_strs!r}"`) and pydantic error dicts with `repr(...)`. These helpers reproduce
//! CPython's `repr` of those values — floats with Python's shortest round-trip digits, strings with
//! Python's quoting and escaping, lists, and JSON numbers as `json.loads` types them — so a
//! native validation message rendered by genfront matches the native server's byte for byte.

use std::fmt::{self, Write};

use serde_json::Number;

/// A JSON number displayed as CPython's `repr()` of the value `json.loads` gives for it: an
/// integer stays an `int`, anything else is a `float` (see [`float_repr`]).
#[derive(Debug, Clone, Copy)]
pub struct PyNum<'a>(pub &'a Number);

impl fmt::Display for PyNum<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(i) = self.0.as_i64() {
            write!(f, "{i}")
        } else if let Some(u) = self.0.as_u64() {
            write!(f, "{u}")
        } else {
            f.write_str(&float_repr(self.0.as_f64().unwrap_or(f64::NAN)))
        }
    }
}

/// CPython's `repr()` of the value `json.loads` gives for a JSON number, as a `String` (the same
/// text as [`PyNum`]'s `Display`).
pub fn number_repr(n: &Number) -> String {
    PyNum(n).to_string()
}

/// CPython's `repr(float)` (and `str(float)`): shortest round-trip digits, fixed notation for
/// decimal exponents in `[-4, 16)`, otherwise `1e-05` / `1.5e+16` style; `nan`, `inf`, `-0.0`.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "-2.0437331199645996e0".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let n = digits.len() as i32;
    let decpt = exp + 1;
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if (-4 < decpt) && (decpt <= 16) {
        if decpt <= 0 {
            out.push_str("0.");
            for _ in 0..(-decpt) {
                out.push('0');
            }
            out.push_str(&digits);
        } else if decpt < n {
            let (a, b) = digits.split_at(decpt as usize);
            out.push_str(a);
            out.push('.');
            out.push_str(b);
        } else {
            out.push_str(&digits);
            for _ in 0..(decpt - n) {
                out.push('0');
            }
            out.push_str(".0");
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// CPython's `repr(str)`: single quotes unless the text holds `'` and no `"`, backslash escapes
/// for the quote, `\\`, `\n`, `\r`, `\t`, and `\xNN` / `\uNNNN` / `\UNNNNNNNN` for characters
/// that are not printable.
pub fn str_repr(s: &str) -> String {
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
            c if is_printable(c) => out.push(c),
            c => {
                let code = c as u32;
                let _ = if code < 0x100 {
                    write!(out, "\\x{code:02x}")
                } else if code < 0x1_0000 {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
        }
    }
    out.push(quote);
    out
}

/// An approximation of Python's `str.isprintable` (control, format and separator characters other
/// than the ASCII space are not printable).
fn is_printable(c: char) -> bool {
    let code = c as u32;
    !(code < 0x20
        || (0x7f..=0xa0).contains(&code)
        || code == 0xad
        || code == 0x1680
        || (0x2000..=0x200f).contains(&code)
        || (0x2028..=0x202f).contains(&code)
        || (0x205f..=0x206f).contains(&code)
        || code == 0x3000
        || code == 0xfeff
        || (0xd800..=0xdfff).contains(&code)
        || (0xe000..=0xf8ff).contains(&code))
}

/// CPython's `repr(list_of_str)`: `['a', 'b']`.
pub fn str_list_repr<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (i, s) in items.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&str_repr(s));
    }
    out.push(']');
    out
}

/// CPython's `repr(list_of_int)` (and `str`): `[1, 2, 3]`.
pub fn int_list_repr<T: fmt::Display>(items: &[T]) -> String {
    let mut out = String::with_capacity(items.len() * 6 + 2);
    out.push('[');
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{v}");
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (1.0, "1.0"),
            (3.0, "3.0"),
            (-0.5, "-0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345.0, "123456789012345.0"),
            (1e22, "1e+22"),
            (123.456, "123.456"),
            (2.5, "2.5"),
            (-2.0437331199645996, "-2.0437331199645996"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn numbers_keep_their_json_kind() {
        let n: Number = serde_json::from_str("-1").expect("int");
        assert_eq!(PyNum(&n).to_string(), "-1");
        assert_eq!(number_repr(&n), "-1");
        let n: Number = serde_json::from_str("-1.0").expect("float");
        assert_eq!(PyNum(&n).to_string(), "-1.0");
        assert_eq!(number_repr(&n), "-1.0");
        let n: Number = serde_json::from_str("2.5").expect("float");
        assert_eq!(number_repr(&n), "2.5");
        let n: Number = serde_json::from_str("18446744073709551615").expect("u64");
        assert_eq!(PyNum(&n).to_string(), "18446744073709551615");
        assert_eq!(number_repr(&n), "18446744073709551615");
    }

    #[test]
    fn strings_quote_like_python() {
        assert_eq!(str_repr("abc"), "'abc'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(str_repr("x\ny\\"), "'x\\ny\\\\'");
        assert_eq!(str_repr("a\\b\n"), "'a\\\\b\\n'");
        assert_eq!(str_repr("\u{1}é"), "'\\x01é'");
        assert_eq!(
            str_list_repr(["</search>", "</answer>"]),
            "['</search>', '</answer>']"
        );
    }

    #[test]
    fn int_lists_print_like_python() {
        assert_eq!(int_list_repr(&[1, 2, 3]), "[1, 2, 3]");
        assert_eq!(int_list_repr::<i64>(&[]), "[]");
        assert_eq!(int_list_repr(&[-1_i32, 7]), "[-1, 7]");
        assert_eq!(int_list_repr(&[u32::MAX]), "[4294967295]");
    }
}
