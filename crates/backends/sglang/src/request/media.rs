//! Whether SGLang 0.5.23 reads a `/generate` body as JSON at all: FastAPI 0.136's body rule
//! (`fastapi/routing.py:405-426`, `strict_content_type` left at its default `True`), and the
//! Python `repr()` of the raw bytes pydantic then reports.
//!
//! FastAPI reads the body bytes; an empty body is no body (`missing`). Otherwise it parses them
//! as JSON only when the `Content-Type` header is present, non-empty, and names `application/json`
//! or `application/<x>+json` as `email.message.Message` reads it:
//!
//! - the value up to its first `;` (parameters ignored: `application/json; charset=utf-8` is
//!   JSON), stripped of Python whitespace (`str.strip()` on the latin-1 text Starlette decodes),
//!   lower-cased;
//! - a type with not exactly one `/` is `text/plain` (`application`, `application/json/x`);
//! - main type `application` (no inner spaces: `application /json` is not JSON), subtype
//!   `json` or ending in `+json` (`application/vnd.api+json`, even `application/+json`).
//!
//! Anything else — `text/plain`, a form type (`curl -d` without `-H`), **no `Content-Type` at
//! all** — hands pydantic the raw bytes, which `GenerateReqInput` (a dataclass) refuses with one
//! `dataclass_type` error whose `input` is `repr(body_bytes)` ([`bytes_repr`]), whatever the
//! bytes are (valid JSON included), with SGLang's usual 400 for a failed bind
//! (`request::pydantic::message`). The frontend leaves this decision to the format on generate
//! routes.

use http::HeaderMap;

/// Whether FastAPI parses a body sent with these headers as JSON (see the module docs). The
/// first `Content-Type` header counts (Starlette's `headers.get`); an empty one is absent.
pub(crate) fn body_is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    is_json_content_type(value.as_bytes())
}

/// `email.message.Message`'s reading of a `Content-Type` value (bytes as latin-1), as FastAPI
/// tests it: `application/json` or `application/*+json`.
pub(crate) fn is_json_content_type(value: &[u8]) -> bool {
    if value.is_empty() {
        return false;
    }
    let mime = value.split(|&b| b == b';').next().unwrap_or(value);
    let mime = py_strip(mime);
    let mut parts = mime.split(|&b| b == b'/');
    let (Some(main), Some(sub), None) = (parts.next(), parts.next(), parts.next()) else {
        // Not exactly one `/`: RFC 2045's fallback, `text/plain`.
        return false;
    };
    main.eq_ignore_ascii_case(b"application")
        && (sub.eq_ignore_ascii_case(b"json")
            || (sub.len() >= 5 && sub[sub.len() - 5..].eq_ignore_ascii_case(b"+json")))
}

/// Python's `str.strip()` on the latin-1 text of `bytes`: the whitespace code points below 256.
fn py_strip(bytes: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b'\t'..=b'\r' | 0x1c..=0x1f | b' ' | 0x85 | 0xa0);
    let start = bytes.iter().position(|b| !ws(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !ws(b)).map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Python `repr(bytes)`, cut once it passes `budget` bytes (the cut text ends with `...`, as
/// [`crate::pyfmt::value_repr`] cuts), so a 64 MiB body costs at most `budget` bytes here
/// (the whole repr would be up to 4× the body: `\xNN` for every byte).
///
/// Python's rules: `b'…'`, or `b"…"` when the bytes hold a `'` and no `"`; `\\`, the quote
/// (`\'` inside single quotes), `\t`, `\n`, `\r` escaped; any other byte below `0x20` or from
/// `0x7f` up as `\xNN` (lower-case hex); printable ASCII as itself.
pub(crate) fn bytes_repr(bytes: &[u8], budget: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let double = bytes.contains(&b'\'') && !bytes.contains(&b'"');
    let quote = if double { '"' } else { '\'' };
    let mut out = String::with_capacity(budget.min(bytes.len().saturating_add(3)) + 8);
    out.push('b');
    out.push(quote);
    for &b in bytes {
        if out.len() > budget {
            break;
        }
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' if !double => out.push_str("\\'"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                out.push_str("\\x");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
    out.push(quote);
    if out.len() > budget {
        // ASCII only: every index is a char boundary.
        out.truncate(budget);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn json(ct: &[u8]) -> bool {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_bytes(ct).expect("header"),
        );
        body_is_json(&h)
    }

    /// Each case checked against `email.message.Message` in Python 3.11 (FastAPI's reader).
    #[test]
    fn content_type_rule_is_fastapis() {
        assert!(!body_is_json(&HeaderMap::new()), "absent: bytes");
        for ct in [
            &b"application/json"[..],
            b"APPLICATION/JSON",
            b" application/json ",
            b"application/json; charset=utf-8",
            b"application/json;",
            b"application/json\t;q=1",
            b"application/vnd.api+json",
            b"application/+json",
            b"application/JSON+Json",
            b"\xa0application/json",
        ] {
            assert!(json(ct), "{:?} is JSON", String::from_utf8_lossy(ct));
        }
        for ct in [
            &b""[..],
            b"text/plain",
            b"application/x-www-form-urlencoded",
            b"multipart/form-data; boundary=x",
            b"application",
            b"application/json/x",
            b"application/ json",
            b"application /json",
            b"application/json , text/plain",
            b"\"application/json\"",
            b"a/b/c;x=application/json",
            b"application/json(comment)",
            b"text/json",
            b"application/jsonx",
            b"application/x+jsonx",
        ] {
            assert!(!json(ct), "{:?} is not JSON", String::from_utf8_lossy(ct));
        }
    }

    /// Bytes hyper refuses in a header value, as the reader sees them.
    #[test]
    fn python_whitespace_is_stripped() {
        assert!(is_json_content_type(b"\x1capplication/json\x0b\x85"));
        assert!(!is_json_content_type(b"\x1c"));
    }

    /// Python 3.11's `repr(bytes)` for each case.
    #[test]
    fn bytes_repr_is_pythons() {
        let r = |b: &[u8]| bytes_repr(b, usize::MAX);
        assert_eq!(r(b""), "b''");
        assert_eq!(r(b"ab"), "b'ab'");
        assert_eq!(r(b"a'b"), "b\"a'b\"");
        assert_eq!(r(b"a\"b"), "b'a\"b'");
        assert_eq!(r(b"a'\"b"), "b'a\\'\"b'");
        assert_eq!(r(b"\\"), "b'\\\\'");
        assert_eq!(r(b"\"'\\"), "b'\"\\'\\\\'");
        assert_eq!(r(b"'\\"), "b\"'\\\\\"");
        assert_eq!(
            r(b"\t\n\r\x00\x0b\x1f\x7f\x80\xff"),
            "b'\\t\\n\\r\\x00\\x0b\\x1f\\x7f\\x80\\xff'"
        );
        assert_eq!(r(" é".as_bytes()), "b' \\xc3\\xa9'");
        assert_eq!(
            r(br#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}"#),
            r#"b'{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}'"#
        );
    }

    /// SGLang 0.5.23's whole message for a `text/plain` body (the validation oracle's, the
    /// endpoint path relative to site-packages).
    #[test]
    fn message_is_sglangs() {
        let body = br#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}"#;
        let err = "{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an instance of GenerateReqInput', 'input': b'{\"input_ids\": [1, 2, 3], \"sampling_params\": {\"max_new_tokens\": 4}}', 'ctx': {'class_name': 'GenerateReqInput'}}";
        let want = format!(
            "1 validation error:\n  {err}\n\n  File \"sglang/srt/entrypoints/http_server.py\", line 928, in generate_request\n    POST /generate [{err}]"
        );
        assert_eq!(
            super::super::pydantic::message(&super::super::pydantic::bytes_body(body)),
            want
        );
    }

    #[test]
    fn bytes_repr_is_bounded() {
        assert_eq!(bytes_repr(b"abcdef", 5), "b'abc...");
        assert_eq!(bytes_repr(b"abc", 6), "b'abc'");
        assert_eq!(bytes_repr(b"abc", 5), "b'abc...");
        assert_eq!(bytes_repr(b"abcd", 5), "b'abc...");
        let huge = vec![0xffu8; 64 << 20];
        let r = bytes_repr(&huge, 2048);
        assert_eq!(r.len(), 2048 + 3);
        assert!(r.starts_with("b'\\xff\\xff") && r.ends_with("..."));
        assert!(r.capacity() < 4096, "no copy of the body: {}", r.capacity());
    }
}
