//! The relay scan of a cumulative SSE frame without re-reading what the previous frame already
//! held.
//!
//! A cumulative SGLang frame repeats every output id delivered so far, and with logprobs every
//! `meta_info.output_token_logprobs` / `output_top_logprobs` entry too, so lexing each whole
//! frame costs O(output) per frame, O(output²) per stream. This scan remembers, for every array
//! directly under the top level or under `meta_info`, the byte span of its elements in the
//! previous accepted frame ([`Memo`]). When the new frame's array starts with exactly those
//! bytes and the next token after them is `,` or `]`, those elements are skipped with one byte
//! compare (they are byte for byte elements the previous scan already validated, in the same
//! array context, so they are still valid and — for `output_ids` — still `u32`s); only the
//! tail is lexed. A string value the scan does not read (the cumulative `text`) is resumed the
//! same way: when it starts with the previous frame's content, only the rest is lexed (as
//! `serde_json` lexes an ignored string). Everything else is lexed with `serde_json` one value
//! at a time.
//!
//! The scan is conservative: whatever it does not take as the plain common shape (escaped or
//! non-UTF-8 keys, duplicate read keys, an `error` key, `null` ids, a non-object frame, …)
//! answers `None`, and the caller runs the full `serde_json` scan instead, which decides as
//! before. So an answer of this scan is always the full scan's (tested in `tests.rs` on
//! generated streams).

use bytes::Bytes;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::relay::Scanned;

/// Where an array sits: directly under the top level, or under `meta_info`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Level {
    Top,
    Meta,
}

/// One remembered array: its key, the byte range of its elements (from just after `[` to the
/// end of the last element) in [`Memo::body`], and how many elements that range holds.
#[derive(Debug, Clone)]
struct Span {
    level: Level,
    /// Where the key's bytes (quotes excluded) sit in the frame (no copy of its own).
    key: std::ops::Range<usize>,
    /// A string value (`range`: its content, quotes excluded; `count` 0), not an array.
    string: bool,
    range: std::ops::Range<usize>,
    count: usize,
    /// How many of those elements this frame skipped (read from the previous frame's span);
    /// read by the tests, which check that plain frames skip their whole prefix.
    #[cfg_attr(not(test), allow(dead_code))]
    skipped: usize,
}

/// The previous accepted frame and its arrays' element spans.
#[derive(Debug, Clone, Default)]
pub(super) struct Memo {
    /// The previous frame (a cheap clone of the relayed bytes).
    body: Bytes,
    spans: Vec<Span>,
}

impl Memo {
    fn find(&self, level: Level, key: &[u8], string: bool) -> Option<&Span> {
        self.spans.iter().find(|s| {
            s.level == level && s.string == string && self.body.get(s.key.clone()) == Some(key)
        })
    }
}

/// What [`scan`] read beside the [`Scanned`] fields: the spans of this frame, to remember
/// with its bytes once it is accepted.
pub(super) struct Spans(Vec<Span>);

impl Spans {
    /// The memo for the next frame: `body` is this frame.
    pub(super) fn into_memo(self, body: Bytes) -> Memo {
        Memo {
            body,
            spans: self.0,
        }
    }
}

/// A cursor over one frame.
struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cur<'a> {
    fn ws(&mut self) {
        while let Some(c) = self.b.get(self.pos) {
            if matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    /// Skip whitespace, then take `c`.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        if self.peek()? == c {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    /// An object key with no escapes and no control characters, valid UTF-8 (else `None`).
    /// A plain ASCII key is found eight bytes at a time ([`plain_key_len`]); any other goes
    /// byte by byte, with the UTF-8 check.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.ws();
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos + 1;
        let rest = self.b.get(start..)?;
        let len = match plain_key_len(rest) {
            Some(len) => len,
            None => {
                let len = rest.iter().position(|&c| c == b'"')?;
                let key = rest.get(..len)?;
                if key.iter().any(|&c| c == b'\\' || c < 0x20) {
                    return None;
                }
                std::str::from_utf8(key).ok()?;
                len
            }
        };
        self.pos = start + len + 1;
        rest.get(..len)
    }

    /// Skip the literal `lit` (`null`, `true`, `false`) when it is next.
    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.b.get(self.pos..)?.starts_with(lit) {
            self.pos += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// Skip the number that starts here, in JSON's grammar (`-`, `0` or a digit run without a
    /// leading zero, an optional fraction, an optional exponent), as `serde_json` ignores one
    /// (digits are not converted). `None`: not a JSON number.
    fn number(&mut self) -> Option<()> {
        let b = self.b;
        let mut i = self.pos;
        let digits = |mut i: usize| {
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            i
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i = digits(i + 1),
            _ => return None,
        }
        if b.get(i) == Some(&b'.') {
            let from = i + 1;
            i = digits(from);
            if i == from {
                return None;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let from = i;
            i = digits(from);
            if i == from {
                return None;
            }
        }
        self.pos = i;
        Some(())
    }

    /// Skip one JSON value (leading whitespace skipped), as `serde_json` ignores one: literals,
    /// numbers, strings and (up to a few levels deep) arrays of them lexed here, anything else
    /// (objects, deeper arrays) by `serde_json`. `None`: not a valid value.
    fn skip(&mut self, depth: u8) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.string(None).map(drop),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.number(),
            b'[' if depth < 4 => {
                self.pos += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.pos += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    self.ws();
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => self.value::<IgnoredAny>().map(drop),
        }
    }

    /// A `u32` (leading whitespace skipped): a plain digit run read here; anything else (a
    /// leading zero, a fraction, an exponent, a sign, out of range) read by `serde_json`, which
    /// decides as the full scan does.
    fn u32(&mut self) -> Option<u32> {
        self.ws();
        let start = self.pos;
        let mut i = start;
        let mut v: u64 = 0;
        while let Some(&d @ b'0'..=b'9') = self.b.get(i) {
            v = v * 10 + u64::from(d - b'0');
            if v > u64::from(u32::MAX) {
                return self.value::<u32>();
            }
            i += 1;
        }
        let plain = i > start
            && (self.b.get(start) != Some(&b'0') || i == start + 1)
            && !matches!(self.b.get(i), Some(b'.' | b'e' | b'E'));
        if !plain {
            return self.value::<u32>();
        }
        self.pos = i;
        u32::try_from(v).ok()
    }

    /// An optional `u32` (`null` as `None`), as [`Cur::u32`].
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        self.ws();
        if self.peek()? == b'n' {
            return self.literal(b"null").map(|()| None);
        }
        self.u32().map(Some)
    }

    /// One JSON value read as `T` by `serde_json` (leading whitespace skipped); the cursor
    /// moves just past it.
    fn value<T: Deserialize<'a>>(&mut self) -> Option<T> {
        let rest = self.b.get(self.pos..)?;
        let mut it = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
        let v = it.next()?.ok()?;
        self.pos += it.byte_offset();
        Some(v)
    }

    /// The elements of the array whose `[` is next (after whitespace), the first
    /// `prev.count` of them skipped when they are the bytes `prev` remembers. `each` reads
    /// one element (and its index among those not skipped). Returns the span of all elements
    /// and how many were skipped.
    fn array(
        &mut self,
        prev: Option<(&[u8], usize)>,
        mut each: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<(std::ops::Range<usize>, usize, usize)> {
        self.eat(b'[')?;
        let start = self.pos;
        let mut count = 0;
        let mut skipped = 0;
        if let Some((bytes, n)) = prev
            && n > 0
            && self.b.get(start..)?.starts_with(bytes)
        {
            let mut after = Cur {
                b: self.b,
                pos: start + bytes.len(),
            };
            after.ws();
            if matches!(after.peek(), Some(b',' | b']')) {
                self.pos = start + bytes.len();
                count = n;
                skipped = n;
            }
        }
        let mut end = self.pos;
        loop {
            self.ws();
            if self.peek()? == b']' {
                self.pos += 1;
                return Some((start..end, count, skipped));
            }
            if count > 0 {
                self.eat(b',')?;
            }
            each(self)?;
            end = self.pos;
            count += 1;
        }
    }
}

impl Cur<'_> {
    /// The string whose `"` is next, its content skipped as far as it starts with `prev` (the
    /// previous frame's content of this string: complete characters and escapes, so lexing
    /// resumes after it in the state it ended in), the rest lexed as `serde_json` lexes a
    /// string it ignores (escapes checked, control characters refused, UTF-8 not checked).
    /// Returns the content's range and 1 when `prev` was skipped.
    fn string(&mut self, prev: Option<&[u8]>) -> Option<(std::ops::Range<usize>, usize)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos + 1;
        self.pos = start;
        let mut skipped = 0;
        if let Some(p) = prev
            && !p.is_empty()
            && self.b.get(start..)?.starts_with(p)
        {
            self.pos = start + p.len();
            skipped = 1;
        }
        loop {
            let c = *self.b.get(self.pos)?;
            self.pos += 1;
            match c {
                b'"' => return Some((start..self.pos - 1, skipped)),
                b'\\' => {
                    let e = *self.b.get(self.pos)?;
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.b.get(self.pos..self.pos + 4)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.pos += 4;
                        }
                        _ => return None,
                    }
                }
                0..0x20 => return None,
                _ => {}
            }
        }
    }
}

/// The length of the key content at the start of `b` up to its closing `"`, when every byte
/// before that quote is printable ASCII other than `\\`; `None` otherwise (another byte first,
/// or no quote). Eight bytes per step: in each word the lowest byte that is `"`, `\\`, below
/// `0x20` or above `0x7f` is found with the usual borrow tricks (they can flag a byte above a
/// flagged one spuriously, never below, so the lowest flag is exact).
fn plain_key_len(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let flagged = |c: u8| c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c);
    let mut i = 0;
    while let Some(word) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().ok()?);
        let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
        let below_space = w.wrapping_sub(LO * 0x20) & !w & HI;
        let m = zero(w ^ (LO * u64::from(b'"')))
            | zero(w ^ (LO * u64::from(b'\\')))
            | below_space
            | (w & HI);
        if m != 0 {
            let at = i + (m.trailing_zeros() / 8) as usize;
            return (*b.get(at)? == b'"').then_some(at);
        }
        i += 8;
    }
    let at = i + b.get(i..)?.iter().position(|&c| flagged(c))?;
    (*b.get(at)? == b'"').then_some(at)
}

/// Scan cumulative frame `body` of dispatch `rid`, skipping the array prefixes `memo`
/// remembers; `delivered`: output ids delivered before it. `None`: not the plain shape (run
/// the full scan). The [`Scanned`] ids are those past the skipped prefix, `skipped` of them
/// left out, never more than `delivered`.
pub(super) fn scan(
    body: &[u8],
    rid: &str,
    memo: &Memo,
    delivered: usize,
) -> Option<(Scanned, Spans)> {
    let mut cur = Cur { b: body, pos: 0 };
    let mut spans = Vec::new();
    let mut ids: Option<(Vec<u32>, usize)> = None;
    let mut meta: Option<MetaRead> = None;
    cur.eat(b'{')?;
    cur.ws();
    if cur.peek()? == b'}' {
        return None;
    }
    loop {
        let key = cur.key()?;
        cur.eat(b':')?;
        cur.ws();
        match key {
            b"output_ids" => {
                if ids.is_some() || cur.peek()? != b'[' {
                    return None;
                }
                let prev = remembered(memo, Level::Top, key);
                let mut tail = Vec::new();
                let (range, count, skipped) = cur.array(prev, |c| {
                    tail.push(c.u32()?);
                    Some(())
                })?;
                if skipped > delivered {
                    return None;
                }
                spans.push(span(body, Level::Top, key, range, count, skipped));
                ids = Some((tail, skipped));
            }
            b"meta_info" => {
                if meta.is_some() {
                    return None;
                }
                meta = Some(meta_info(&mut cur, memo, &mut spans)?);
            }
            b"error" => return None,
            _ => other(&mut cur, memo, &mut spans, Level::Top, key)?,
        }
        cur.ws();
        match cur.peek()? {
            b',' => cur.pos += 1,
            b'}' => {
                cur.pos += 1;
                break;
            }
            _ => return None,
        }
    }
    cur.ws();
    if cur.pos != body.len() {
        return None;
    }
    let meta = meta?;
    let id = meta.id?;
    if body.get(id.start + 1..id.end - 1) != Some(rid.as_bytes()) {
        return None;
    }
    let (token_ids, skipped) = ids.unwrap_or_default();
    Some((
        Scanned {
            token_ids,
            skipped,
            finish: meta.finish.flatten().filter(|f| !f.is_null()),
            counts: meta.counts.map(Option::flatten),
            id,
        },
        Spans(spans),
    ))
}

/// `meta_info` as far as the scan reads it (`Some(None)`: present as `null`).
struct MetaRead {
    /// The byte range of `meta_info.id`, quotes included, when it is a string.
    id: Option<std::ops::Range<usize>>,
    finish: Option<Option<Value>>,
    counts: [Option<Option<u32>>; 3],
}

fn meta_info(cur: &mut Cur<'_>, memo: &Memo, spans: &mut Vec<Span>) -> Option<MetaRead> {
    let mut m = MetaRead {
        id: None,
        finish: None,
        counts: [None; 3],
    };
    cur.eat(b'{')?;
    cur.ws();
    if cur.peek()? == b'}' {
        cur.pos += 1;
        return Some(m);
    }
    loop {
        let key = cur.key()?;
        cur.eat(b':')?;
        cur.ws();
        let count_at = match key {
            b"prompt_tokens" => Some(0),
            b"completion_tokens" => Some(1),
            b"cached_tokens" => Some(2),
            _ => None,
        };
        match key {
            b"id" => {
                // A string lexed as `serde_json` lexes one (its content is checked against the
                // dispatch id, which needs no escapes); anything else is the full scan's to judge.
                if m.id.is_some() {
                    return None;
                }
                let (content, _) = cur.string(None)?;
                m.id = Some(content.start - 1..content.end + 1);
            }
            b"finish_reason" => {
                if m.finish.is_some() {
                    return None;
                }
                m.finish = Some(if cur.peek()? == b'n' {
                    cur.literal(b"null")?;
                    None
                } else {
                    cur.value::<Option<Value>>()?
                });
            }
            _ if count_at.is_some() => {
                let slot = m.counts.get_mut(count_at?)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(cur.opt_u32()?);
            }
            _ => other(cur, memo, spans, Level::Meta, key)?,
        }
        cur.ws();
        match cur.peek()? {
            b',' => cur.pos += 1,
            b'}' => {
                cur.pos += 1;
                return Some(m);
            }
            _ => return None,
        }
    }
}

/// A value the scan does not read: an array (its remembered prefix skipped), or anything
/// else lexed whole.
fn other(
    cur: &mut Cur<'_>,
    memo: &Memo,
    spans: &mut Vec<Span>,
    level: Level,
    key: &[u8],
) -> Option<()> {
    if cur.peek()? == b'"' {
        let prev = memo
            .find(level, key, true)
            .and_then(|s| memo.body.get(s.range.clone()));
        let (range, skipped) = cur.string(prev)?;
        let mut s = span(cur.b, level, key, range, 0, skipped);
        s.string = true;
        spans.push(s);
        return Some(());
    }
    if cur.peek()? != b'[' {
        return cur.skip(0);
    }
    let prev = remembered(memo, level, key);
    let (range, count, skipped) = cur.array(prev, |c| c.skip(1))?;
    spans.push(span(cur.b, level, key, range, count, skipped));
    Some(())
}

fn remembered<'m>(memo: &'m Memo, level: Level, key: &[u8]) -> Option<(&'m [u8], usize)> {
    let s = memo.find(level, key, false)?;
    Some((memo.body.get(s.range.clone())?, s.count))
}

/// The span of `range` in frame `body`; `key` is a slice of `body`.
fn span(
    body: &[u8],
    level: Level,
    key: &[u8],
    range: std::ops::Range<usize>,
    count: usize,
    skipped: usize,
) -> Span {
    let at = (key.as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    Span {
        level,
        key: at..at + key.len(),
        string: false,
        range,
        count,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Memo, scan};
    use crate::client::decode::relay;

    /// A tiny deterministic generator for the frame shapes.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// How a generated stream writes its frames.
    struct Style {
        /// Whitespace pieces, chosen per position (stable across frames when `stable`).
        ws: [&'static str; 3],
        stable: bool,
        top_order: Vec<usize>,
        meta_order: Vec<usize>,
        logprobs: Option<usize>,
        text: bool,
    }

    fn ws(style: &Style, rng: &mut Rng, slot: u64) -> &'static str {
        let i = if style.stable { slot % 3 } else { rng.below(3) };
        style.ws[i as usize]
    }

    fn triple(seed: u64, at: u64, id: u32) -> String {
        let rng = &mut Rng((seed ^ at.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        rng.next();
        let lp = match rng.below(4) {
            0 => "-0.0".to_string(),
            1 => format!("-{}e-5", rng.below(100)),
            2 => "null".to_string(),
            _ => format!("-{}.{}", rng.below(9), rng.below(1000)),
        };
        format!("[{lp}, {id}, null]")
    }

    /// The `n`-token cumulative frame of a stream (its elements regenerated from `seed` so each
    /// frame repeats the previous one's).
    fn frame(style: &Style, seed: u64, ids: &[u32], finish: bool, rid: &str) -> String {
        let mut rng = Rng(seed | 1);
        let sep = |rng: &mut Rng, slot| ws(style, rng, slot);
        let list = |rng: &mut Rng, items: Vec<String>| {
            let mut s = String::from("[");
            s.push_str(sep(rng, 1));
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                    s.push_str(sep(rng, 2));
                }
                s.push_str(it);
            }
            s.push_str(sep(rng, 0));
            s.push(']');
            s
        };
        let id_items = ids.iter().map(u32::to_string).collect();
        let ids_json = list(&mut rng, id_items);
        let mut meta: Vec<(String, String)> = vec![
            ("id".into(), format!("\"{rid}\"")),
            (
                "finish_reason".into(),
                if finish {
                    r#"{"type": "length", "length": 9}"#.into()
                } else {
                    "null".into()
                },
            ),
            ("prompt_tokens".into(), "3".into()),
            ("completion_tokens".into(), ids.len().to_string()),
            ("e2e_latency".into(), format!("{}.5", ids.len())),
            ("routed".into(), "[[1, 2], {\"x\": [3]}]".into()),
        ];
        if let Some(k) = style.logprobs {
            let lp = (0u64..)
                .zip(ids)
                .map(|(at, &i)| triple(seed, at * 64, i))
                .collect();
            meta.push(("output_token_logprobs".into(), list(&mut rng, lp)));
            let top = (0u64..)
                .zip(ids)
                .map(|(at, &i)| {
                    let row = (0..k)
                        .map(|j| triple(seed, at * 64 + 1 + j as u64, i.wrapping_add(j as u32)))
                        .collect();
                    list(&mut Rng(seed ^ at | 1), row)
                })
                .collect();
            meta.push(("output_top_logprobs".into(), list(&mut rng, top)));
        }
        let mut top: Vec<(String, String)> = vec![
            ("output_ids".into(), ids_json),
            ("meta_info".into(), String::new()),
            ("index".into(), "0".into()),
        ];
        if style.text {
            let text: String = ids
                .iter()
                .map(|i| ["a", "\"", "é", "\\n"][*i as usize % 4])
                .collect();
            top.push((
                "text".into(),
                serde_json::to_string(&text).unwrap_or_default(),
            ));
        }
        let obj = |rng: &mut Rng, order: &[usize], members: &[(String, String)]| {
            let mut s = String::from("{");
            s.push_str(sep(rng, 1));
            let mut first = true;
            for &i in order {
                let Some((k, v)) = members.get(i) else {
                    continue;
                };
                if !first {
                    s.push(',');
                    s.push_str(sep(rng, 2));
                }
                first = false;
                s.push_str(&format!("\"{k}\"{}:{}{v}", sep(rng, 0), sep(rng, 1)));
            }
            s.push('}');
            s
        };
        let meta_json = obj(&mut rng, &style.meta_order, &meta);
        if let Some(m) = top.iter_mut().find(|(k, _)| k == "meta_info") {
            m.1 = meta_json;
        }
        obj(&mut rng, &style.top_order, &top)
    }

    fn order(rng: &mut Rng, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, rng.below(i as u64 + 1) as usize);
        }
        v
    }

    /// The fast scan against the full scan on one frame: when the fast scan answers, it is
    /// the full scan's answer. Returns the fewest elements it skipped in any growing array
    /// (`usize::MAX` when the text did not resume after its previous content), if it answered.
    fn check(body: &[u8], rid: &str, memo: &mut Memo, delivered: usize) -> Option<usize> {
        let full = relay::scan(body, rid);
        let fast = scan(body, rid, memo, delivered);
        let (fast, spans) = fast?;
        let full = full.expect("the fast scan took a frame the full scan refuses");
        assert_eq!(full.skipped, 0);
        assert!(fast.skipped <= delivered);
        assert_eq!(full.token_ids.len(), fast.skipped + fast.token_ids.len());
        assert_eq!(
            full.token_ids.get(fast.skipped..),
            Some(&fast.token_ids[..])
        );
        assert_eq!(full.finish, fast.finish);
        assert_eq!(full.counts, fast.counts);
        assert_eq!(full.id, fast.id);
        let key = |s: &super::Span| body.get(s.key.clone()).unwrap_or_default();
        let growing = spans.0.iter().filter(|s| key(s) != b"routed" && !s.string);
        // The text resumes after its previous content (there is one once a frame was read).
        let text_ok = memo.spans.is_empty()
            || spans
                .0
                .iter()
                .filter(|s| s.string && key(s) == b"text")
                .all(|t| t.skipped == 1);
        let least = growing.map(|s| s.skipped).min().unwrap_or(0);
        *memo = spans.into_memo(bytes::Bytes::copy_from_slice(body));
        Some(if text_ok { least } else { usize::MAX })
    }

    /// The word-at-a-time key length agrees with a byte loop at every offset.
    #[test]
    fn plain_key_len_is_the_byte_loop() {
        let bytes: &[u8] = &[
            b'a', b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xc3, 0xa9, b'z', b'0',
        ];
        let mut rng = Rng(7);
        for _ in 0..20_000 {
            let len = rng.below(24) as usize;
            let s: Vec<u8> = (0..len)
                .map(|_| bytes[rng.below(bytes.len() as u64) as usize])
                .collect();
            let want = s
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c))
                .filter(|&i| s[i] == b'"');
            assert_eq!(super::plain_key_len(&s), want, "{s:?}");
        }
        assert_eq!(super::plain_key_len(b"completion_tokens\":1"), Some(17));
        assert_eq!(super::plain_key_len(b"caf\xc3\xa9\""), None);
    }

    /// Scalars and arrays the scan lexes itself: where it answers, it answers as the full
    /// scan; the plain shapes it answers; what JSON refuses it does not take.
    #[test]
    fn own_lexing_agrees_with_serde_json() {
        let rid = "r1";
        let frame = |meta_extra: &str, counts: &str| {
            format!(
                r#"{{"output_ids":[1,20,300],"meta_info":{{"id":"r1","finish_reason":null,{counts}{meta_extra}}},"x":[true,false,null,[1,"a\"b"],-0.5e+3]}}"#
            )
        };
        let plain = [
            (
                r#","a":-0,"b":1.25,"c":2E-7,"d":true,"e":[[1,[2,[3,[4,[5]]]]]],"f":{"g":[1]}"#,
                r#""prompt_tokens":3,"completion_tokens":0"#,
            ),
            ("", r#""prompt_tokens":4294967295,"cached_tokens":null"#),
        ];
        for (extra, counts) in plain {
            let body = frame(extra, counts);
            let mut memo = Memo::default();
            assert!(
                check(body.as_bytes(), rid, &mut memo, 0).is_some(),
                "not taken: {body}"
            );
        }
        let odd = [
            (r#","a":01"#, r#""prompt_tokens":3"#),
            (r#","a":-"#, r#""prompt_tokens":3"#),
            (r#","a":1."#, r#""prompt_tokens":3"#),
            (r#","a":1e"#, r#""prompt_tokens":3"#),
            (r#","a":nul"#, r#""prompt_tokens":3"#),
            (r#","a":[1,]"#, r#""prompt_tokens":3"#),
            ("", r#""prompt_tokens":03"#),
            ("", r#""prompt_tokens":4294967296"#),
            ("", r#""prompt_tokens":3.0"#),
            ("", r#""prompt_tokens":3e0"#),
            ("", r#""prompt_tokens":-3"#),
            ("", r#""prompt_tokens":"3""#),
        ];
        for (extra, counts) in odd {
            let body = frame(extra, counts);
            let mut memo = Memo::default();
            // `check` asserts the full scan's answer wherever the fast scan answers.
            let taken = check(body.as_bytes(), rid, &mut memo, 0).is_some();
            assert_eq!(taken, relay::scan(body.as_bytes(), rid).is_some(), "{body}");
        }
        // An escaped id is not the dispatch id (as for the full scan).
        let body = br#"{"output_ids":[1],"meta_info":{"id":"r\u0031","finish_reason":null}}"#;
        assert!(scan(body, rid, &Memo::default(), 0).is_none());
        assert!(relay::scan(body, rid).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Generated cumulative streams (with and without logprobs and text, odd spacing, any
        /// key order, some frames corrupted or respaced): the fast scan answers as the full
        /// scan wherever it answers, and skips the delivered prefix on plain frames.
        #[test]
        fn fast_scan_is_the_full_scan(seed in any::<u64>(), len in 1usize..40, corrupt in 0u8..4) {
            let mut rng = Rng(seed | 1);
            let style = Style {
                ws: [["", " ", "\n  "][rng.below(3) as usize], [" ", "", "\t"][rng.below(3) as usize], ["", "\r\n", " "][rng.below(3) as usize]],
                stable: rng.below(4) != 0,
                top_order: order(&mut rng, 4),
                meta_order: order(&mut rng, 8),
                logprobs: [None, Some(1), Some(5)][rng.below(3) as usize],
                text: rng.below(2) == 0,
            };
            let ids: Vec<u32> = (0..len).map(|_| match rng.below(5) {
                0 => u32::MAX,
                1 => 0,
                _ => rng.below(200_000) as u32,
            }).collect();
            let rid = "0123abcd";
            let mut memo = Memo::default();
            let mut delivered = 0;
            let mut all_skipped = true;
            for n in 1..=len {
                let mut body = frame(&style, seed, &ids[..n], n == len, rid).into_bytes();
                if corrupt > 0 && rng.below(4) == 0 && !body.is_empty() {
                    let at = rng.below(body.len() as u64) as usize;
                    body[at] = [b'1', b',', b' ', b']', b'"', b'x'][rng.below(6) as usize];
                }
                match check(&body, rid, &mut memo, delivered) {
                    Some(least) => {
                        // Every growing array (ids, logprob lists) skipped the elements of
                        // the previous frame, and the text its previous content.
                        all_skipped &= least.checked_add(1) == Some(n);
                        delivered = n;
                    }
                    None => {
                        memo = Memo::default();
                        if relay::scan(&body, rid).is_some() {
                            delivered = n;
                        }
                    }
                }
            }
            if corrupt == 0 && style.stable {
                prop_assert!(all_skipped, "a plain frame re-read its prefix");
            }
        }
    }
}
