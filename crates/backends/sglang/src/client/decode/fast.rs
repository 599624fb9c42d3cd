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
use serde_json::value::RawValue;

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
    key: Box<[u8]>,
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
        self.spans
            .iter()
            .find(|s| s.level == level && s.string == string && &*s.key == key)
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
    fn key(&mut self) -> Option<&'a [u8]> {
        self.ws();
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos + 1;
        let len = self.b.get(start..)?.iter().position(|&c| c == b'"')?;
        let key = self.b.get(start..start + len)?;
        if key.iter().any(|&c| c == b'\\' || c < 0x20) {
            return None;
        }
        std::str::from_utf8(key).ok()?;
        self.pos = start + len + 1;
        Some(key)
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
                    tail.push(c.value::<u32>()?);
                    Some(())
                })?;
                if skipped > delivered {
                    return None;
                }
                spans.push(span(Level::Top, key, range, count, skipped));
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
    let raw = meta.id?;
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner != rid {
        return None;
    }
    let start = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    if body.get(start..end) != Some(raw.as_bytes()) {
        return None;
    }
    let (token_ids, skipped) = ids.unwrap_or_default();
    Some((
        Scanned {
            token_ids,
            skipped,
            finish: meta.finish.flatten().filter(|f| !f.is_null()),
            counts: meta.counts.map(Option::flatten),
            id: start..end,
        },
        Spans(spans),
    ))
}

/// `meta_info` as far as the scan reads it (`Some(None)`: present as `null`).
struct MetaRead<'a> {
    id: Option<&'a str>,
    finish: Option<Option<Value>>,
    counts: [Option<Option<u32>>; 3],
}

fn meta_info<'a>(cur: &mut Cur<'a>, memo: &Memo, spans: &mut Vec<Span>) -> Option<MetaRead<'a>> {
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
                if m.id.is_some() {
                    return None;
                }
                m.id = Some(cur.value::<&'a RawValue>()?.get());
            }
            b"finish_reason" => {
                if m.finish.is_some() {
                    return None;
                }
                m.finish = Some(cur.value::<Option<Value>>()?);
            }
            _ if count_at.is_some() => {
                let slot = m.counts.get_mut(count_at?)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(cur.value::<Option<u32>>()?);
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
        let mut s = span(level, key, range, 0, skipped);
        s.string = true;
        spans.push(s);
        return Some(());
    }
    if cur.peek()? != b'[' {
        cur.value::<IgnoredAny>()?;
        return Some(());
    }
    let prev = remembered(memo, level, key);
    let (range, count, skipped) = cur.array(prev, |c| c.value::<IgnoredAny>().map(drop))?;
    spans.push(span(level, key, range, count, skipped));
    Some(())
}

fn remembered<'m>(memo: &'m Memo, level: Level, key: &[u8]) -> Option<(&'m [u8], usize)> {
    let s = memo.find(level, key, false)?;
    Some((memo.body.get(s.range.clone())?, s.count))
}

fn span(
    level: Level,
    key: &[u8],
    range: std::ops::Range<usize>,
    count: usize,
    skipped: usize,
) -> Span {
    Span {
        level,
        key: key.into(),
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
        let growing = spans.0.iter().filter(|s| &*s.key != b"routed" && !s.string);
        // The text resumes after its previous content (there is one once a frame was read).
        let text_ok = memo.spans.is_empty()
            || spans
                .0
                .iter()
                .filter(|s| s.string && &*s.key == b"text")
                .all(|t| t.skipped == 1);
        let least = growing.map(|s| s.skipped).min().unwrap_or(0);
        *memo = spans.into_memo(bytes::Bytes::copy_from_slice(body));
        Some(if text_ok { least } else { usize::MAX })
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
