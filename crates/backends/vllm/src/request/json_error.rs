//! Where and why Python's `json` refuses a body: FastAPI reads a vLLM request body with
//! `json.loads(body_bytes)` (`fastapi/routing.py`), and wraps its `JSONDecodeError` as
//! pydantic's `json_invalid` at `body.<e.pos>` with `ctx: {'error': e.msg}`; any other failure
//! (bytes that do not decode) is `HTTPException(400, "There was an error parsing the body")`.
//!
//! [`locate`] runs only after serde_json refused the bytes (the hot path never sees it). It
//! follows `json.loads` step by step:
//!
//! - the bytes are decoded first: `json.detect_encoding` (UTF-8 with or without BOM, UTF-16 and
//!   UTF-32 by BOM or by the zero bytes of the first four), with `surrogatepass` (encoded
//!   surrogates pass, everything else that does not decode is [`Located::Undecodable`]);
//! - then CPython 3.11's C scanner (`Modules/_json.c`, same texts as `json/decoder.py`) walks the
//!   characters: `Expecting value`, `Expecting property name enclosed in double quotes`,
//!   `Expecting ':' delimiter`, `Expecting ',' delimiter`, `Unterminated string starting at`
//!   (the opening quote), `Invalid control character at`, `Invalid \escape` (the backslash),
//!   `Invalid \uXXXX escape` (the `u`), `Extra data`; `pos` counts characters of the decoded
//!   text (the BOM excluded). Numbers end where the grammar stops (`01` is `0` then `Expecting
//!   ',' delimiter`); `NaN`, `Infinity`, `-Infinity` and `1e999` are values. (Python 3.13 says
//!   `Illegal trailing comma before end of object` where 3.11 expects a property name.)
//!
//! A document Python takes but serde_json refused is [`Located::Valid`]: `NaN` / `Infinity` /
//! an overflowing float (vLLM then validates the field as a float, see `validate.rs`), a lone
//! `\ud800`, encoded surrogates, UTF-16/32, more than 128 levels of nesting. The caller keeps its
//! own answer for those. Python's nesting limit (its recursion limit, a `RecursionError` and so
//! the parsing-the-body answer) is not modelled: the walk has no depth limit and no recursion.

/// What `json.loads(body)` does with bytes serde_json refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Located {
    /// A `JSONDecodeError`: its `msg` and `pos` (characters).
    Invalid(&'static str, usize),
    /// The bytes do not decode (`UnicodeDecodeError`): FastAPI's generic 400.
    Undecodable,
    /// Python parses it.
    Valid,
}

/// `json.loads(body)`'s verdict on `body`.
pub(crate) fn locate(body: &[u8]) -> Located {
    let Some(chars) = decode(body) else {
        return Located::Undecodable;
    };
    let scanner = Scanner { s: &chars };
    match scanner.document() {
        Ok(()) => Located::Valid,
        Err((msg, pos)) => Located::Invalid(msg, pos),
    }
}

/// FastAPI's answer to a body that fails to parse other than by `JSONDecodeError`
/// (`routing.py`: `HTTPException(400, "There was an error parsing the body")`). vLLM's own
/// `HTTPException` handler does not see it (the pinned server answers FastAPI's bare
/// `{"detail": …}`), so it rides as the engine's verbatim answer
/// ([`genfront_protocol::NativeError`], which the frontend relays as is): a client fault, 400.
pub(crate) fn parsing_the_body() -> genfront_format::GenerateError {
    const DETAIL: &[u8] = br#"{"detail":"There was an error parsing the body"}"#;
    let error = genfront_protocol::EngineError::new(
        genfront_protocol::ErrorKind::InvalidArgument,
        "There was an error parsing the body",
    )
    .with_status(400)
    .with_native(genfront_protocol::NativeError {
        format: crate::FORMAT_NAME,
        status: Some(400),
        body: bytes::Bytes::from_static(DETAIL),
        content_type: Some("application/json".to_owned()),
        retry_after: None,
    });
    genfront_format::GenerateError::Engine(error)
}

// === json.detect_encoding + bytes.decode(..., 'surrogatepass') ===

/// The body's characters (code points; lone surrogates kept), or `None` when it does not
/// decode.
fn decode(b: &[u8]) -> Option<Vec<u32>> {
    if b.starts_with(&[0, 0, 0xFE, 0xFF]) {
        return utf32(&b[4..], false);
    }
    if b.starts_with(&[0xFF, 0xFE, 0, 0]) {
        return utf32(&b[4..], true);
    }
    if b.starts_with(&[0xFE, 0xFF]) {
        return utf16(&b[2..], false);
    }
    if b.starts_with(&[0xFF, 0xFE]) {
        return utf16(&b[2..], true);
    }
    if let Some(rest) = b.strip_prefix(b"\xef\xbb\xbf") {
        return utf8(rest);
    }
    if b.len() >= 4 {
        if b[0] == 0 {
            return if b[1] != 0 {
                utf16(b, false)
            } else {
                utf32(b, false)
            };
        }
        if b[1] == 0 {
            return if b[2] != 0 || b[3] != 0 {
                utf16(b, true)
            } else {
                utf32(b, true)
            };
        }
    } else if b.len() == 2 {
        if b[0] == 0 {
            return utf16(b, false);
        }
        if b[1] == 0 {
            return utf16(b, true);
        }
    }
    utf8(b)
}

/// UTF-8 with `surrogatepass`: `ED A0..BF xx` (an encoded surrogate) decodes too.
fn utf8(b: &[u8]) -> Option<Vec<u32>> {
    if let Ok(s) = std::str::from_utf8(b) {
        return Some(s.chars().map(u32::from).collect());
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match std::str::from_utf8(&b[i..]) {
            Ok(s) => {
                out.extend(s.chars().map(u32::from));
                break;
            }
            Err(e) => {
                let good = e.valid_up_to();
                let s = std::str::from_utf8(&b[i..i + good]).ok()?;
                out.extend(s.chars().map(u32::from));
                i += good;
                // The one sequence `surrogatepass` adds: a three-byte surrogate.
                match b.get(i..i + 3) {
                    Some(&[0xED, b1 @ 0xA0..=0xBF, b2 @ 0x80..=0xBF]) => {
                        out.push(0xD000 | (u32::from(b1 & 0x3F) << 6) | u32::from(b2 & 0x3F));
                        i += 3;
                    }
                    _ => return None,
                }
            }
        }
    }
    Some(out)
}

fn utf16(b: &[u8], le: bool) -> Option<Vec<u32>> {
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let units: Vec<u16> = b
        .chunks_exact(2)
        .map(|c| {
            if le {
                u16::from_le_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], c[1]])
            }
        })
        .collect();
    let mut out = Vec::with_capacity(units.len());
    let mut i = 0;
    while i < units.len() {
        let u = u32::from(units[i]);
        let next = units.get(i + 1).map(|n| u32::from(*n));
        match next {
            Some(lo) if (0xD800..0xDC00).contains(&u) && (0xDC00..0xE000).contains(&lo) => {
                out.push(0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00));
                i += 2;
            }
            _ => {
                out.push(u);
                i += 1;
            }
        }
    }
    Some(out)
}

fn utf32(b: &[u8], le: bool) -> Option<Vec<u32>> {
    if !b.len().is_multiple_of(4) {
        return None;
    }
    b.chunks_exact(4)
        .map(|c| {
            let v = if le {
                u32::from_le_bytes([c[0], c[1], c[2], c[3]])
            } else {
                u32::from_be_bytes([c[0], c[1], c[2], c[3]])
            };
            (v <= 0x10FFFF).then_some(v)
        })
        .collect()
}

// === the scanner (Modules/_json.c) ===

/// An error: Python's message and the character offset it names.
type Fail = (&'static str, usize);

const VALUE: &str = "Expecting value";
const COMMA: &str = "Expecting ',' delimiter";
const KEY: &str = "Expecting property name enclosed in double quotes";

#[derive(Clone, Copy, PartialEq)]
enum Open {
    Array,
    Object,
}

struct Scanner<'a> {
    s: &'a [u32],
}

fn is_ws(c: u32) -> bool {
    matches!(c, 0x20 | 0x09 | 0x0A | 0x0D)
}

impl Scanner<'_> {
    fn at(&self, i: usize) -> Option<u32> {
        self.s.get(i).copied()
    }

    fn ws(&self, mut i: usize) -> usize {
        while self.at(i).is_some_and(is_ws) {
            i += 1;
        }
        i
    }

    fn is(&self, i: usize, c: u8) -> bool {
        self.at(i) == Some(u32::from(c))
    }

    /// `json.JSONDecoder.decode`: one value between whitespace, then nothing.
    fn document(&self) -> Result<(), Fail> {
        let mut stack: Vec<Open> = Vec::new();
        let mut i = self.ws(0);
        'value: loop {
            // `scan_once` at `i` (whitespace already skipped by the caller).
            match self.at(i).map(char::from_u32) {
                Some(Some('{')) => {
                    i = self.ws(i + 1);
                    if self.is(i, b'}') {
                        i += 1;
                    } else {
                        stack.push(Open::Object);
                        i = self.key(i)?;
                        continue 'value;
                    }
                }
                Some(Some('[')) => {
                    i = self.ws(i + 1);
                    if self.is(i, b']') {
                        i += 1;
                    } else {
                        stack.push(Open::Array);
                        continue 'value;
                    }
                }
                _ => i = self.scalar(i)?,
            }
            // After a complete value.
            loop {
                let Some(&top) = stack.last() else {
                    let end = self.ws(i);
                    if end != self.s.len() {
                        return Err(("Extra data", end));
                    }
                    return Ok(());
                };
                i = self.ws(i);
                let close = if top == Open::Array { b']' } else { b'}' };
                if self.is(i, close) {
                    i += 1;
                    stack.pop();
                    continue;
                }
                if !self.is(i, b',') {
                    return Err((COMMA, i));
                }
                i = self.ws(i + 1);
                if top == Open::Object {
                    i = self.key(i)?;
                }
                continue 'value;
            }
        }
    }

    /// An object key at `i`, its `:`, and the whitespace after it: the value's index.
    fn key(&self, i: usize) -> Result<usize, Fail> {
        if !self.is(i, b'"') {
            return Err((KEY, i));
        }
        let i = self.ws(self.string(i + 1)?);
        if !self.is(i, b':') {
            return Err(("Expecting ':' delimiter", i));
        }
        Ok(self.ws(i + 1))
    }

    /// `s[i:]` starts with `word` (and the C scanner's bounds check passes).
    fn word(&self, i: usize, word: &[u8]) -> bool {
        word.iter()
            .enumerate()
            .all(|(k, c)| self.at(i + k) == Some(u32::from(*c)))
    }

    /// A string, constant or number at `i`: the index after it.
    fn scalar(&self, i: usize) -> Result<usize, Fail> {
        let Some(c) = self.at(i) else {
            return Err((VALUE, i));
        };
        if c == u32::from(b'"') {
            return self.string(i + 1);
        }
        for word in [
            &b"null"[..],
            b"true",
            b"false",
            b"NaN",
            b"Infinity",
            b"-Infinity",
        ] {
            if self.word(i, word) {
                return Ok(i + word.len());
            }
        }
        self.number(i).ok_or((VALUE, i))
    }

    fn digit(&self, i: usize) -> bool {
        self.at(i).is_some_and(|c| (0x30..=0x39).contains(&c))
    }

    /// `_match_number_unicode`: the index after the number, `None` when there is none.
    fn number(&self, start: usize) -> Option<usize> {
        let mut i = start;
        if self.is(i, b'-') {
            i += 1;
        }
        if self.is(i, b'0') {
            i += 1;
        } else if self.digit(i) {
            while self.digit(i) {
                i += 1;
            }
        } else {
            return None;
        }
        if self.is(i, b'.') && self.digit(i + 1) {
            i += 2;
            while self.digit(i) {
                i += 1;
            }
        }
        if self.is(i, b'e') || self.is(i, b'E') {
            let mut j = i + 1;
            if self.is(j, b'-') || self.is(j, b'+') {
                j += 1;
            }
            if self.digit(j) {
                while self.digit(j) {
                    j += 1;
                }
                i = j;
            }
        }
        Some(i)
    }

    /// `scanstring_unicode` from just after the opening quote: the index after the closing one.
    fn string(&self, mut end: usize) -> Result<usize, Fail> {
        let begin = end - 1;
        let len = self.s.len();
        let hex4 = |from: usize| -> Option<u32> {
            (from..from + 4).try_fold(0u32, |v, k| {
                char::from_u32(self.at(k)?)?
                    .to_digit(16)
                    .map(|d| v * 16 + d)
            })
        };
        loop {
            let mut next = end;
            while next < len {
                let d = self.s[next];
                if d == u32::from(b'"') || d == u32::from(b'\\') {
                    break;
                }
                if d <= 0x1F {
                    return Err(("Invalid control character at", next));
                }
                next += 1;
            }
            if next >= len {
                return Err(("Unterminated string starting at", begin));
            }
            if self.s[next] == u32::from(b'"') {
                return Ok(next + 1);
            }
            // A backslash.
            next += 1;
            if next == len {
                return Err(("Unterminated string starting at", begin));
            }
            if self.s[next] != u32::from(b'u') {
                end = next + 1;
                if !matches!(
                    char::from_u32(self.s[next]),
                    Some('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't')
                ) {
                    return Err(("Invalid \\escape", end - 2));
                }
                continue;
            }
            let u = next;
            end = u + 5;
            if end >= len {
                return Err(("Invalid \\uXXXX escape", u));
            }
            let c = hex4(u + 1).ok_or(("Invalid \\uXXXX escape", u))?;
            if (0xD800..0xDC00).contains(&c)
                && end + 6 < len
                && self.is(end, b'\\')
                && self.is(end + 1, b'u')
            {
                let c2 = hex4(end + 2).ok_or(("Invalid \\uXXXX escape", end + 1))?;
                if (0xDC00..0xE000).contains(&c2) {
                    end += 6;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Located, locate};

    /// (body, CPython 3.11 `json.loads(body)`'s `msg`, its `pos`).
    const CASES: &[(&[u8], &str, usize)] = &[
        (b"{", "Expecting property name enclosed in double quotes", 1),
        (b"  ", "Expecting value", 2),
        (
            b"{'a':1}",
            "Expecting property name enclosed in double quotes",
            1,
        ),
        (
            b"{\"a\":1,}",
            "Expecting property name enclosed in double quotes",
            7,
        ),
        (b"[1, ]", "Expecting value", 4),
        (b"{\"x\":1} trailing", "Extra data", 8),
        (b"{\"a\":-}", "Expecting value", 5),
        (b"{\"a\":+1}", "Expecting value", 5),
        (b"{\"a\":01}", "Expecting ',' delimiter", 6),
        (b"{\"a\":1.}", "Expecting ',' delimiter", 6),
        (b"{\"a\":1e}", "Expecting ',' delimiter", 6),
        (b"{\"a\" 1}", "Expecting ':' delimiter", 5),
        (b"{\"a\":1 \"b\":2}", "Expecting ',' delimiter", 7),
        (b"[1 2]", "Expecting ',' delimiter", 3),
        (b"{\"a\":tru}", "Expecting value", 5),
        (b"{\"a\":\"\\x\"}", "Invalid \\escape", 6),
        (b"{\"a\":\"\\u12\"}", "Invalid \\uXXXX escape", 7),
        (b"{\"a\":\"\\u", "Invalid \\uXXXX escape", 7),
        (b"{\"a\":\"\\ud800\\uzz00\"}", "Invalid \\uXXXX escape", 13),
        (b"{\"a\":\"\x01\"}", "Invalid control character at", 6),
        (b"{\"a\":\"abc", "Unterminated string starting at", 5),
        (b"{\"a\":\"x\\", "Unterminated string starting at", 5),
        (b"{\"a\"", "Expecting ':' delimiter", 4),
        (b"{\"a\":", "Expecting value", 5),
        (b"{\"a\":1", "Expecting ',' delimiter", 6),
        (b"{\"\xc3\xa9\":x}", "Expecting value", 5),
        (
            b"\xef\xbb\xbf{",
            "Expecting property name enclosed in double quotes",
            1,
        ),
        (b"{\"\xf0\x9f\x98\x80\":1}x", "Extra data", 7),
        (b"{\"a\":[}", "Expecting value", 6),
        (
            b"{\"a\":{]}",
            "Expecting property name enclosed in double quotes",
            6,
        ),
        (b"{\"a\": -Infinity", "Expecting ',' delimiter", 15),
        (b"{\"a\":1}\x00", "Extra data", 7),
        // UTF-16 (BOM): positions count the decoded characters.
        (
            b"\xff\xfe{\x00\"\x00a\x00\"\x00:\x00 \x001\x00,\x00}\x00",
            "Expecting property name enclosed in double quotes",
            8,
        ),
        (
            b"\xff\xfe{\x00",
            "Expecting property name enclosed in double quotes",
            1,
        ),
    ];

    #[test]
    fn python_messages_and_positions() {
        for (body, msg, pos) in CASES {
            assert_eq!(
                locate(body),
                Located::Invalid(msg, *pos),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let deep = [b"[".repeat(200), b"x".to_vec()].concat();
        assert_eq!(locate(&deep), Located::Invalid("Expecting value", 200));
        // A million open brackets: no recursion, no panic.
        assert_eq!(
            locate(&b"[".repeat(1_000_000)),
            Located::Invalid("Expecting value", 1_000_000)
        );
    }

    #[test]
    fn undecodable_and_valid() {
        for body in [&b"{\"x\":\"\xff\"}"[..], b"\xff", b"{\"a\":\"\xed\xa0\"}"] {
            assert_eq!(locate(body), Located::Undecodable);
        }
        for body in [
            &b"{\x00\"\x00a\x00\"\x00:\x00 \x001\x00}\x00"[..],
            b"{\"a\":NaN}",
            b"{\"a\":[Infinity, -Infinity, 1e999]}",
            b"{\"a\":\"\\ud800\"}",
            b"{\"a\":\"\xed\xa0\x80\"}",
        ] {
            assert_eq!(locate(body), Located::Valid);
        }
    }
}
