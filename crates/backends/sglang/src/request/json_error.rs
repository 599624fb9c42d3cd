//! Where and why orjson refuses a body: SGLang's `ORJSONRequest.json()` parses `/generate`
//! bodies with `orjson.loads` (`http_server.py` `ORJSONRoute`), and FastAPI wraps its
//! `JSONDecodeError` as pydantic's `json_invalid` at `('body', e.pos)` with
//! `ctx: {'error': e.msg}`.
//!
//! [`locate`] runs only after serde_json refused the bytes (the hot path never sees it): it
//! walks the bytes with orjson 3.13's grammar and returns orjson's message and its `pos`, a
//! character offset. The rules, as the pinned orjson answers (the tests pin its texts):
//!
//! - bytes that are not UTF-8 (anywhere): `str is not valid UTF-8: surrogates not allowed` at 0;
//!   a UTF-8 BOM: `UTF-8 byte order mark (BOM) is not supported` at 0; only whitespace:
//!   `input data is empty` at 0;
//! - running out of bytes anywhere: `unexpected end of data` at the end;
//! - a value that does not start a value: `unexpected character, expected a JSON value`; a bad
//!   `true`/`false`/`null`: `invalid literal, expected 'true'` at the literal's start;
//! - objects: `unexpected character, expected a string key`, `... expected ':' after key`,
//!   `... expected ',' or '}'`; arrays: `... expected ',' or ']'`; a comma before the closing
//!   bracket: `trailing comma is not allowed` at the comma; more than 1024 open containers:
//!   `depth limit exceeded` just after the 1025th bracket;
//! - numbers: `no digit after sign` (after `-`, or at a leading `+`/`.`), `number with leading
//!   zero is not allowed` (at the `0`), `no digit after decimal point`, `no digit after exponent
//!   sign` (where the digit should be), `number is infinity when parsed as double` (at the
//!   number's start);
//! - strings: `unexpected control character in string` (at the character),
//!   `invalid escaped sequence in string` (`invalid escape in string` for the low half of a
//!   pair), `no low surrogate in string`, `invalid low surrogate
//!   in string`, `invalid high surrogate in string` (all at the escape's backslash);
//! - after the document: `unexpected content after document`.
//!
//! When the walk finds nothing wrong (a document orjson takes but serde_json does not, e.g.
//! more than 128 levels of nesting or a `\ud800\udc00` pair serde refuses), [`locate`] answers
//! `None` and the caller keeps its own text.

/// orjson's nesting limit (`depth limit exceeded` past it).
const MAX_DEPTH: usize = 1024;

/// orjson's `JSONDecodeError` for `body`: its `msg` and `pos` (characters before the point
/// where orjson stopped). `None`: orjson would take the bytes.
pub(crate) fn locate(body: &[u8]) -> Option<(&'static str, usize)> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Some(("str is not valid UTF-8: surrogates not allowed", 0));
    };
    if body.is_empty() {
        return Some(("Input is a zero-length, empty document", 0));
    }
    if body.starts_with(b"\xef\xbb\xbf") {
        return Some(("UTF-8 byte order mark (BOM) is not supported", 0));
    }
    let mut s = Scanner { b: body, pos: 0 };
    let (msg, at) = match s.document() {
        Ok(()) => return None,
        Err(e) => e,
    };
    let at = at.min(body.len());
    Some((
        msg,
        text.as_bytes()[..at]
            .iter()
            .filter(|b| (**b & 0xC0) != 0x80)
            .count(),
    ))
}

/// An error: orjson's message and the byte offset it names.
type Fail = (&'static str, usize);

const EOF: &str = "unexpected end of data";

/// One open container on the explicit stack (no recursion: nesting depth is the client's).
#[derive(Clone, Copy, PartialEq)]
enum Open {
    Array,
    Object,
}

struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// `expected` at the cursor, or the end of data when the bytes ran out.
    fn unexpected(&self, expected: &'static str) -> Fail {
        if self.pos >= self.b.len() {
            (EOF, self.b.len())
        } else {
            (expected, self.pos)
        }
    }

    fn document(&mut self) -> Result<(), Fail> {
        self.ws();
        if self.pos >= self.b.len() {
            return Err(("input data is empty", 0));
        }
        let mut stack: Vec<Open> = Vec::new();
        // Parse a value; containers push and continue with their first member.
        'value: loop {
            match self.peek() {
                Some(b'{') => {
                    stack.push(Open::Object);
                    self.pos += 1;
                    if stack.len() > MAX_DEPTH {
                        return Err(("depth limit exceeded", self.pos));
                    }
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        stack.pop();
                    } else {
                        self.key()?;
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    stack.push(Open::Array);
                    self.pos += 1;
                    if stack.len() > MAX_DEPTH {
                        return Err(("depth limit exceeded", self.pos));
                    }
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        stack.pop();
                    } else {
                        continue 'value;
                    }
                }
                _ => self.scalar()?,
            }
            // After a complete value: close containers or move to their next member.
            loop {
                let Some(&top) = stack.last() else {
                    self.ws();
                    return match self.peek() {
                        None => Ok(()),
                        Some(_) => Err(("unexpected content after document", self.pos)),
                    };
                };
                self.ws();
                let (close, expected) = match top {
                    Open::Array => (b']', "unexpected character, expected ',' or ']'"),
                    Open::Object => (b'}', "unexpected character, expected ',' or '}'"),
                };
                match self.peek() {
                    Some(b',') => {
                        let comma = self.pos;
                        self.pos += 1;
                        self.ws();
                        if self.peek() == Some(close) {
                            return Err(("trailing comma is not allowed", comma));
                        }
                        if top == Open::Object {
                            self.key()?;
                        }
                        continue 'value;
                    }
                    Some(c) if c == close => {
                        self.pos += 1;
                        stack.pop();
                    }
                    _ => return Err(self.unexpected(expected)),
                }
            }
        }
    }

    /// An object key, its `:` and the whitespace before the value.
    fn key(&mut self) -> Result<(), Fail> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("unexpected character, expected a string key"));
        }
        self.string()?;
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.unexpected("unexpected character, expected ':' after key"));
        }
        self.pos += 1;
        self.ws();
        Ok(())
    }

    fn scalar(&mut self) -> Result<(), Fail> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'-' | b'+' | b'.' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal(b"true", "invalid literal, expected 'true'"),
            Some(b'f') => self.literal(b"false", "invalid literal, expected 'false'"),
            Some(b'n') => self.literal(b"null", "invalid literal, expected 'null'"),
            _ => Err(self.unexpected("unexpected character, expected a JSON value")),
        }
    }

    fn literal(&mut self, lit: &[u8], invalid: &'static str) -> Result<(), Fail> {
        let start = self.pos;
        for (i, want) in lit.iter().enumerate() {
            match self.b.get(start + i) {
                None => return Err((EOF, self.b.len())),
                Some(c) if c == want => {}
                Some(_) => return Err((invalid, start)),
            }
        }
        self.pos = start + lit.len();
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let from = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - from
    }

    fn number(&mut self) -> Result<(), Fail> {
        let start = self.pos;
        match self.peek() {
            Some(b'+' | b'.') => return Err(("no digit after sign", self.pos)),
            Some(b'-') => self.pos += 1,
            _ => {}
        }
        match self.peek() {
            None => return Err((EOF, self.b.len())),
            Some(b'0') => {
                self.pos += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(("number with leading zero is not allowed", self.pos - 1));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            Some(_) => return Err(("no digit after sign", self.pos)),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.unexpected("no digit after decimal point"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.unexpected("no digit after exponent sign"));
            }
        }
        let lexeme = std::str::from_utf8(&self.b[start..self.pos]).unwrap_or("0");
        if lexeme.parse::<f64>().is_ok_and(f64::is_infinite) {
            return Err(("number is infinity when parsed as double", start));
        }
        Ok(())
    }

    /// Four hex digits at `at`: their value, `Err(true)` when the bytes ran out first.
    fn hex4(&self, at: usize) -> Result<u32, bool> {
        let mut v = 0;
        for i in 0..4 {
            let Some(c) = self.b.get(at + i) else {
                return Err(true);
            };
            let d = (*c as char).to_digit(16).ok_or(false)?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// Whether the bytes from `at` run out while still a prefix of a low surrogate's digits
    /// (`d`, `dc`..`df`, three digits of one).
    fn cut_low(&self, at: usize) -> bool {
        let got = &self.b[at.min(self.b.len())..];
        got.len() < 4
            && got.iter().all(u8::is_ascii_hexdigit)
            && got.first().is_none_or(|c| c.eq_ignore_ascii_case(&b'd'))
            && got
                .get(1)
                .is_none_or(|c| matches!(c, b'c'..=b'f' | b'C'..=b'F'))
    }

    fn string(&mut self) -> Result<(), Fail> {
        self.pos += 1; // the opening quote
        loop {
            let Some(c) = self.peek() else {
                return Err((EOF, self.b.len()));
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                0..=0x1f => return Err(("unexpected control character in string", self.pos)),
                b'\\' => self.escape()?,
                _ => self.pos += 1,
            }
        }
    }

    fn escape(&mut self) -> Result<(), Fail> {
        const BAD: &str = "invalid escaped sequence in string";
        let at = self.pos;
        let eof = (EOF, self.b.len());
        match self.b.get(at + 1) {
            None => Err(eof),
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.pos += 2;
                Ok(())
            }
            Some(b'u') => {
                let hi = match self.hex4(at + 2) {
                    Ok(v) => v,
                    Err(true) => return Err(eof),
                    Err(false) => return Err((BAD, at)),
                };
                self.pos = at + 6;
                let surrogate = (0xD800..=0xDFFF).contains(&hi);
                if surrogate && at + 6 >= self.b.len() {
                    return Err(eof);
                }
                match hi {
                    0xD800..=0xDBFF => {}
                    0xDC00..=0xDFFF => {
                        // A lone low half; orjson still waits for a cut-short `\udc..` after it.
                        let cut = match (self.b.get(at + 6), self.b.get(at + 7)) {
                            (Some(b'\\'), None) => true,
                            (Some(b'\\'), Some(b'u')) => self.cut_low(at + 8),
                            _ => false,
                        };
                        return Err(if cut {
                            eof
                        } else {
                            ("invalid high surrogate in string", at)
                        });
                    }
                    _ => return Ok(()),
                }
                if self.b.get(at + 6) != Some(&b'\\') {
                    return Err(("no low surrogate in string", at));
                }
                match self.b.get(at + 7) {
                    None => return Err(eof),
                    Some(b'u') => {}
                    Some(_) => return Err(("no low surrogate in string", at)),
                }
                // The low half: four hex digits in DC00-DFFF. Cut short, orjson waits for
                // more bytes only while they could still make a low surrogate.
                let rest = &self.b[(at + 8).min(self.b.len())..];
                let got = &rest[..rest.len().min(4)];
                if !got.iter().all(u8::is_ascii_hexdigit) {
                    return Err(("invalid escape in string", at));
                }
                if got.len() < 4 {
                    return Err(if self.cut_low(at + 8) {
                        eof
                    } else {
                        ("invalid escape in string", at)
                    });
                }
                let lo = self.hex4(at + 8).unwrap_or(0);
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return Err(("invalid low surrogate in string", at));
                }
                self.pos = at + 12;
                Ok(())
            }
            Some(_) => Err((BAD, at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::locate;

    /// (body, orjson 3.13's `msg`, its `pos`), as `orjson.loads(body)` raises them.
    const CASES: &[(&[u8], &str, usize)] = &[
        (b"{", "unexpected end of data", 1),
        (b"  ", "input data is empty", 0),
        (b"{'a':1}", "unexpected character, expected a string key", 1),
        (b"{\"a\":1,}", "trailing comma is not allowed", 6),
        (b"[1, ]", "trailing comma is not allowed", 2),
        (
            b"{\"x\":1} trailing",
            "unexpected content after document",
            8,
        ),
        (
            b"{\"a\":1e999}",
            "number is infinity when parsed as double",
            5,
        ),
        (
            b"{\"a\":-1e999}",
            "number is infinity when parsed as double",
            5,
        ),
        (
            b"{\"a\":NaN}",
            "unexpected character, expected a JSON value",
            5,
        ),
        (b"{\"a\":-Infinity}", "no digit after sign", 6),
        (b"{\"a\":-}", "no digit after sign", 6),
        (b"{\"a\":-", "unexpected end of data", 6),
        (b"{\"a\":+1}", "no digit after sign", 5),
        (b"{\"a\":.5}", "no digit after sign", 5),
        (b"{\"a\":01}", "number with leading zero is not allowed", 5),
        (b"{\"a\":-01}", "number with leading zero is not allowed", 6),
        (b"{\"a\":1.}", "no digit after decimal point", 7),
        (b"{\"a\":1e}", "no digit after exponent sign", 7),
        (b"{\"a\":1e+}", "no digit after exponent sign", 8),
        (
            b"\xef\xbb\xbf{}",
            "UTF-8 byte order mark (BOM) is not supported",
            0,
        ),
        (
            b"{\"x\":\"\xff\"}",
            "str is not valid UTF-8: surrogates not allowed",
            0,
        ),
        (
            b"{\"x\":\"\xed\xa0\x80\"}",
            "str is not valid UTF-8: surrogates not allowed",
            0,
        ),
        (
            b"{\"a\" 1}",
            "unexpected character, expected ':' after key",
            5,
        ),
        (
            b"{\"a\":1 \"b\":2}",
            "unexpected character, expected ',' or '}'",
            7,
        ),
        (b"[1 2]", "unexpected character, expected ',' or ']'", 3),
        (b"{\"a\":tru}", "invalid literal, expected 'true'", 5),
        (b"{\"a\":tr", "unexpected end of data", 7),
        (b"{\"a\":nul}", "invalid literal, expected 'null'", 5),
        (b"{\"a\":fals", "unexpected end of data", 9),
        (b"{\"a\":\"\\x\"}", "invalid escaped sequence in string", 6),
        (
            b"{\"a\":\"\\u12\"}",
            "invalid escaped sequence in string",
            6,
        ),
        (b"{\"a\":\"\\u12", "unexpected end of data", 10),
        (b"{\"a\":\"\\ud800\"}", "no low surrogate in string", 6),
        (
            b"{\"a\":\"\\ud800\\u0041\"}",
            "invalid low surrogate in string",
            6,
        ),
        (b"{\"a\":\"\\ud800\\udc0\"}", "invalid escape in string", 6),
        (b"{\"a\":\"\\ud800\\udc", "unexpected end of data", 16),
        (
            b"{\"a\":\"\\udc00\"}",
            "invalid high surrogate in string",
            6,
        ),
        (b"{\"a\":\"\\udc00\\ud", "unexpected end of data", 15),
        (
            b"{\"a\":\"\x01\"}",
            "unexpected control character in string",
            6,
        ),
        (b"{\"a\":\"abc", "unexpected end of data", 9),
        (
            b"{\"\xc3\xa9\":x}",
            "unexpected character, expected a JSON value",
            5,
        ),
        (
            b"{\"\xc3\xa9\":1}\xc3\xa9",
            "unexpected content after document",
            7,
        ),
        (b"{1:2}", "unexpected character, expected a string key", 1),
        (b"[,]", "unexpected character, expected a JSON value", 1),
        (
            b"{\"a\":[1,2,}",
            "unexpected character, expected a JSON value",
            10,
        ),
        (
            b"/* c */{}",
            "unexpected character, expected a JSON value",
            0,
        ),
        (b"\x00", "unexpected character, expected a JSON value", 0),
    ];

    #[test]
    fn orjson_messages_and_positions() {
        for (body, msg, pos) in CASES {
            assert_eq!(
                locate(body),
                Some((*msg, *pos)),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn rendered_as_sglang_prints_it() {
        let (msg, pos) = locate(b"{").unwrap_or_default();
        let text = super::super::pydantic::message(&super::super::pydantic::json_invalid(msg, pos));
        let error = "{'type': 'json_invalid', 'loc': ('body', 1), 'msg': 'JSON decode error', \
                     'input': {}, 'ctx': {'error': 'unexpected end of data'}}";
        assert_eq!(
            text,
            format!(
                "1 validation error:\n  {error}\n\n  File \"sglang/srt/entrypoints/http_server.py\", \
                 line 928, in generate_request\n    POST /generate [{error}]"
            )
        );
    }

    #[test]
    fn limits() {
        let deep = |n: usize| [b"[".repeat(n), b"]".repeat(n)].concat();
        assert_eq!(locate(&deep(1024)), None);
        assert_eq!(locate(&deep(1025)), Some(("depth limit exceeded", 1025)));
        // A million open brackets: no recursion, no panic.
        assert_eq!(
            locate(&b"[".repeat(1_000_000)),
            Some(("depth limit exceeded", 1025))
        );
        let huge = [&b"{\"a\":"[..], &b"9".repeat(400), b"}"].concat();
        assert_eq!(
            locate(&huge),
            Some(("number is infinity when parsed as double", 5))
        );
        // Documents orjson takes: serde's text stays.
        assert_eq!(locate(b"{\"a\":\"\\ud800\\udc00\"}"), None);
        assert_eq!(
            locate(b" {\"a\":[1, 2.5e-3, true, null, \"\\u00e9\"]} "),
            None
        );
    }
}
