//! The body's fast path: the top-level object is read with every key but `input_ids` as a JSON
//! [`Value`], and `input_ids` straight into `Vec<u32>` rows, so a 64 MiB body of ids never
//! becomes a tree of 32-byte `Value`s (one per id: about 10× the body, 2.9 GB peak measured
//! before). The placeholder `input_ids: null` keeps the key's position in the native body; the
//! engine clients write the typed ids there (`client/body.rs`).
//!
//! Anything the fast path does not take as it is — a body that is not a JSON object, invalid
//! JSON, an `input_ids` that is not a flat or nested list of integers in `0..=u32::MAX` (a
//! negative id, a float, a string, `null`, mixed nesting) — makes [`parse`] answer `None`, and
//! the caller parses the whole body as a `Value` tree as before, so every error message and
//! every lax-mode reading (`1.0` as an id) stays exactly the full path's.
//!
//! **Id prescan.** Before serde reads the body, [`prescan`] walks the top-level object's keys
//! by hand (skipping every other value without decoding it) to the first key spelled
//! `"input_ids"` and lexes its list in one tight loop of its own (serde's per-element
//! `SeqAccess` was ~60% of the frontend's CPU on a 1 MiB prompt, ~230 instructions an id;
//! callgrind). serde then reads a copy of the body with that list replaced by `null`: the
//! copy's bytes before the list are the body's own, so an invalid body fails serde at the same
//! byte either way, and a valid body gives the same object. The prescan takes only what is
//! plainly a list of JSON integers in `0..=u32::MAX` (no sign, fraction, exponent or leading
//! zero) and gives up on anything else — an escaped key before the ids, another shape, a byte
//! it does not expect — leaving the body to the serde fast path below, unchanged.
//!
//! Peak memory of a body on this path: the body bytes, plus 4 bytes per id (the `Vec<u32>`),
//! plus the other keys' `Value`s. The densest id body, `0,0,0,…`, has 2 bytes per id, so the
//! ids take at most 2× the body and the body with its ids at most 3× (README "Limits and
//! timeouts").

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{IdLists, PromptIds};
use crate::json::Obj;

/// Read `body` on the fast path: the object (with `input_ids: null` when the body has the key)
/// and the typed ids. `None`: take the full `Value` path.
///
/// The ids are read in the same single pass over the body as the other keys (no raw-text skip
/// and re-parse: on a 1 MiB body of ids that second pass was a fifth of the frontend's CPU).
/// An `input_ids` the fast path does not take fails the whole read, so the caller falls back.
pub(crate) fn parse(body: &[u8]) -> Option<(Obj, Option<IdLists>)> {
    if let Some(pre) = prescan(body) {
        let mut rest = Vec::with_capacity(body.len() - (pre.end - pre.start) + 4);
        rest.extend_from_slice(&body[..pre.start]);
        rest.extend_from_slice(b"null");
        rest.extend_from_slice(&body[pre.end..]);
        return read(&rest, Some(pre.ids));
    }
    read(body, None)
}

/// serde's read of `body`; `pre`: the ids of the first `input_ids`, whose value in `body` is
/// the `null` put in its place.
fn read(body: &[u8], pre: Option<IdLists>) -> Option<(Obj, Option<IdLists>)> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = TopLevelSeed(pre).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some((top.obj, top.ids))
}

/// The top-level object (with the `input_ids` placeholder) and the typed ids.
struct TopLevel {
    obj: Obj,
    ids: Option<IdLists>,
}

/// Reads a [`TopLevel`]; holds the prescanned ids of the first `input_ids`, if any.
struct TopLevelSeed(Option<IdLists>);

impl<'de> DeserializeSeed<'de> for TopLevelSeed {
    type Value = TopLevel;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<TopLevel, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopLevelSeed {
    type Value = TopLevel;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pre = self.0;
        let mut obj = Obj::new();
        let mut ids = None;
        // A repeated key keeps its first position and its last value, as
        // `serde_json::Map` does (every repeat must be ids the fast path takes).
        while let Some(key) = map.next_key::<String>()? {
            if key == "input_ids" {
                ids = Some(match pre.take() {
                    // The prescan's placeholder: the first `input_ids` (no key before it
                    // was escaped, so serde meets the same key first).
                    Some(pre) => {
                        map.next_value::<de::IgnoredAny>()?;
                        pre
                    }
                    None => map.next_value_seed(IdsSeed)?,
                });
                obj.insert(key, Value::Null);
            } else {
                let v: Value = map.next_value()?;
                obj.insert(key, v);
            }
        }
        Ok(TopLevel { obj, ids })
    }
}

/// What [`prescan`] found: the byte range of the first `input_ids` value and its ids.
struct Prescanned {
    start: usize,
    end: usize,
    ids: IdLists,
}

/// JSON's whitespace.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// A cursor over the body; every step answers `None` on a byte it does not expect.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|&c| is_ws(c)) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? != c {
            return None;
        }
        self.i += 1;
        Some(())
    }

    /// A string's bytes between its quotes (the cursor at the opening quote), and whether
    /// it had an escape.
    fn string(&mut self) -> Option<(&[u8], bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let at = self.i + memchr::memchr2(b'"', b'\\', self.b.get(self.i..)?)?;
            if self.b[at] == b'"' {
                self.i = at + 1;
                return Some((&self.b[start..at], escaped));
            }
            escaped = true;
            self.i = at + 2;
        }
    }

    /// Skip one value without reading it (serde reads it later): a string, a container with
    /// everything in it, or a scalar's bytes.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
                {
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    /// One id: decimal digits, no leading zero, at most `u32::MAX`, not followed by a
    /// fraction or an exponent.
    fn id(&mut self) -> Option<u32> {
        let first = self.peek()?;
        if !first.is_ascii_digit() {
            return None;
        }
        let mut v = u64::from(first - b'0');
        self.i += 1;
        let start = self.i;
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            if first == b'0' || self.i - start >= 9 {
                return None;
            }
            v = v * 10 + u64::from(c - b'0');
            self.i += 1;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        u32::try_from(v).ok()
    }

    /// `[id, …]` (the cursor at `[`); `Some(empty)` for `[]`.
    fn ids(&mut self, out: &mut Vec<u32>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            out.push(self.id()?);
            if !self.more()? {
                return Some(());
            }
        }
    }

    /// After a list element: `Some(true)` past a `,` (and the whitespace after it),
    /// `Some(false)` past the list's closing `]`.
    fn more(&mut self) -> Option<bool> {
        self.ws();
        let more = match self.peek()? {
            b',' => true,
            b']' => false,
            _ => return None,
        };
        self.i += 1;
        self.ws();
        Some(more)
    }

    /// `[id, …]` or `[[id, …], …]` (the cursor at the outer `[`).
    fn id_lists(&mut self) -> Option<IdLists> {
        let open = self.i;
        self.eat(b'[')?;
        self.ws();
        if self.peek()? != b'[' {
            self.i = open;
            // n ids have n - 1 commas: the commas from here on bound the count (a memchr
            // count, ~0.1 ns a byte), so the list is sized once and never reallocated, and a
            // dense body (`0,0,…`) gets no spare capacity (README "Limits and timeouts").
            let mut ids =
                Vec::with_capacity(memchr::memchr_iter(b',', &self.b[open..]).count() + 1);
            self.ids(&mut ids)?;
            return Some(IdLists::Flat(PromptIds::Narrow(ids)));
        }
        let mut rows = Vec::new();
        loop {
            let mut row = Vec::new();
            self.ids(&mut row)?;
            rows.push(PromptIds::Narrow(row));
            if !self.more()? {
                return Some(IdLists::Nested(rows));
            }
        }
    }
}

/// Find the first top-level `"input_ids"` of `body` and lex its list (module docs, "Id
/// prescan"). `None`: no such key, or anything the prescan does not take as it is.
fn prescan(body: &[u8]) -> Option<Prescanned> {
    let mut c = Cursor { b: body, i: 0 };
    c.ws();
    c.eat(b'{')?;
    loop {
        c.ws();
        let (key, escaped) = c.string()?;
        if escaped {
            // It could spell `input_ids`: serde would meet that key first.
            return None;
        }
        let is_ids = key == b"input_ids";
        c.ws();
        c.eat(b':')?;
        c.ws();
        if is_ids {
            let start = c.i;
            let ids = c.id_lists()?;
            return Some(Prescanned {
                start,
                end: c.i,
                ids,
            });
        }
        c.skip_value()?;
        c.ws();
        match c.peek()? {
            b',' => c.i += 1,
            _ => return None,
        }
    }
}

/// Reads `[id, …]` or `[[id, …], …]`.
struct IdsSeed;

impl<'de> DeserializeSeed<'de> for IdsSeed {
    type Value = IdLists;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<IdLists, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for IdsSeed {
    type Value = IdLists;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of token ids or of token id lists")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdLists, A::Error> {
        match seq.next_element::<Elem>()? {
            None => Ok(IdLists::Flat(PromptIds::Narrow(Vec::new()))),
            Some(Elem::Id(first)) => {
                let mut ids = vec![first];
                while let Some(id) = seq.next_element::<u32>()? {
                    ids.push(id);
                }
                Ok(IdLists::Flat(PromptIds::Narrow(ids)))
            }
            Some(Elem::Row(first)) => {
                let mut rows = vec![PromptIds::Narrow(first)];
                while let Some(row) = seq.next_element::<Vec<u32>>()? {
                    rows.push(PromptIds::Narrow(row));
                }
                Ok(IdLists::Nested(rows))
            }
        }
    }
}

/// The first element of `input_ids`: it decides the shape.
enum Elem {
    Id(u32),
    Row(Vec<u32>),
}

impl<'de> de::Deserialize<'de> for Elem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Elem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token id or a list of token ids")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Elem, E> {
                u32::try_from(v)
                    .map(Elem::Id)
                    .map_err(|_| E::custom("id out of range"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elem, A::Error> {
                let mut row = Vec::new();
                while let Some(id) = seq.next_element::<u32>()? {
                    row.push(id);
                }
                Ok(Elem::Row(row))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(body: &str) -> Option<Option<IdLists>> {
        parse(body.as_bytes()).map(|(_, ids)| ids)
    }

    #[test]
    fn reads_both_shapes_into_u32() {
        assert_eq!(
            ids(r#"{"input_ids": [1, 2, 4294967295]}"#),
            Some(Some(IdLists::Flat(PromptIds::Narrow(vec![1, 2, u32::MAX]))))
        );
        assert_eq!(
            ids(r#"{"input_ids": [[1], [], [2, 3]]}"#),
            Some(Some(IdLists::Nested(vec![
                PromptIds::Narrow(vec![1]),
                PromptIds::Narrow(vec![]),
                PromptIds::Narrow(vec![2, 3]),
            ])))
        );
        assert_eq!(
            ids(r#"{"input_ids": []}"#),
            Some(Some(IdLists::Flat(PromptIds::Narrow(vec![]))))
        );
        assert_eq!(ids(r#"{"text": "hi"}"#), Some(None));
    }

    #[test]
    fn keeps_key_order_with_a_placeholder() {
        let (obj, _) =
            parse(br#"{"rid": "a", "input_ids": [1], "stream": true, "input_ids": [2]}"#)
                .expect("fast path");
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        assert_eq!(keys, ["rid", "input_ids", "stream"]);
        assert_eq!(obj["input_ids"], Value::Null);
        // The last of repeated keys wins, as in `serde_json::Map`.
        assert_eq!(
            ids(r#"{"input_ids": [1], "input_ids": [2]}"#),
            Some(Some(IdLists::Flat(PromptIds::Narrow(vec![2]))))
        );
    }

    #[test]
    fn anything_else_takes_the_full_path() {
        for body in [
            r#"{"input_ids": [1, -2]}"#,
            r#"{"input_ids": [1, 2.0]}"#,
            r#"{"input_ids": [1, 4294967296]}"#,
            r#"{"input_ids": [1, [2]]}"#,
            r#"{"input_ids": [[1], 2]}"#,
            r#"{"input_ids": ["1"]}"#,
            r#"{"input_ids": null}"#,
            r#"{"input_ids": 3}"#,
            r#"[1, 2]"#,
            r#"{"input_ids": [1]"#,
            r#"{"input_ids": [1]} x"#,
            // A repeat is read like the first, so an invalid first one falls back too.
            r#"{"input_ids": [-1], "input_ids": [1]}"#,
        ] {
            assert!(parse(body.as_bytes()).is_none(), "{body}");
        }
    }

    /// The serde-only read (no prescan): what [`parse`] must agree with.
    fn serde_only(body: &[u8]) -> Option<(Obj, Option<IdLists>)> {
        read(body, None)
    }

    #[test]
    fn the_prescan_takes_plain_id_lists_and_gives_up_on_the_rest() {
        let flat = |v: Vec<u32>| IdLists::Flat(PromptIds::Narrow(v));
        let pre = |body: &str| prescan(body.as_bytes()).map(|p| p.ids);
        assert_eq!(
            pre(r#"{"input_ids":[1,22,4294967295]}"#),
            Some(flat(vec![1, 22, u32::MAX]))
        );
        assert_eq!(
            pre(" {\n\t\"input_ids\" :\r[ 0 , 7 ] }"),
            Some(flat(vec![0, 7]))
        );
        assert_eq!(
            pre(
                r#"{"text": "a\"input_ids\": [9]", "s": {"input_ids": [8]}, "n": -1.5e3, "b": [true, null, {"x": "]"}], "input_ids": [3]}"#
            ),
            Some(flat(vec![3]))
        );
        assert_eq!(
            pre(r#"{"input_ids": [[], [1, 2]]}"#),
            Some(IdLists::Nested(vec![
                PromptIds::Narrow(vec![]),
                PromptIds::Narrow(vec![1, 2])
            ]))
        );
        assert_eq!(pre(r#"{"input_ids": []}"#), Some(flat(vec![])));
        for body in [
            r#"{"input_ids": [01]}"#,
            r#"{"input_ids": [1.0]}"#,
            r#"{"input_ids": [1e2]}"#,
            r#"{"input_ids": [-1]}"#,
            r#"{"input_ids": [4294967296]}"#,
            r#"{"input_ids": [12345678901]}"#,
            r#"{"input_ids": [1,]}"#,
            r#"{"input_ids": [1 2]}"#,
            r#"{"input_ids": [[1], 2]}"#,
            r#"{"input_ids": [1, [2]]}"#,
            r#"{"input_\u0069ds": [5], "input_ids": [1]}"#,
            r#"{"text": "x"}"#,
            r#"{"input_ids": [1"#,
            r#"["input_ids"]"#,
        ] {
            assert!(pre(body).is_none(), "{body}");
        }
    }

    #[test]
    fn the_prescan_changes_no_answer() {
        for body in [
            r#"{"rid": "a", "input_ids": [1, 2], "stream": true}"#,
            r#"{"input_ids": [1], "input_ids": [2]}"#,
            r#"{"input_ids": [1], "input_ids": [-2]}"#,
            r#"{"input_ids": [1], "input_ids": null}"#,
            r#"{"input_ids": [1]} x"#,
            r#"{"input_ids": [1]"#,
            r#"{"input_ids": [1], }"#,
            r#"{"a": tru, "input_ids": [1]}"#,
            r#"{"a": "\u00e9\n", "input_ids": [[3], []], "sampling_params": {"max_new_tokens": 4}}"#,
            r#"{"a": "x
y", "input_ids": [1]}"#,
            r#"{"input_\u0069ds": [5], "input_ids": [1]}"#,
            r#"{"s": {"input_ids": "x"}, "input_ids": [1, 2, 3]}"#,
        ] {
            assert_eq!(
                parse(body.as_bytes()),
                serde_only(body.as_bytes()),
                "{body}"
            );
        }
    }

    proptest::proptest! {
        /// Bodies built from JSON-ish fragments around an id list: the prescan plus serde reads
        /// exactly what serde alone reads, valid or not.
        #[test]
        fn prescan_and_serde_agree(
            before in proptest::collection::vec(proptest::sample::select(vec![
                r#""rid": "a""#, r#""t": "\"input_ids\": [1]""#, r#""s": {"input_ids": [2]}"#,
                r#""l": [1, "]", {}]"#, r#""n": -1.5"#, r#""b": true"#, r#""x": nul"#, r#""e": "\\""#,
            ]), 0..4),
            ids in proptest::collection::vec(proptest::sample::select(vec![
                "0", "1", "42", "4294967295", "4294967296", "01", "1.0", "-3", "7e1", "[1]", "[]",
            ]), 0..6),
            sep in proptest::sample::select(vec![",", ", ", " ,\n", ",,", " "]),
            after in proptest::sample::select(vec!["", r#", "stream": true"#, r#", "input_ids": [9]"#, ", ", "} ", "]"]),
        ) {
            let mut body = String::from("{");
            for b in &before {
                body.push_str(b);
                body.push_str(", ");
            }
            body.push_str(r#""input_ids": ["#);
            body.push_str(&ids.join(sep));
            body.push(']');
            body.push_str(after);
            body.push('}');
            proptest::prop_assert_eq!(parse(body.as_bytes()), serde_only(body.as_bytes()), "{}", body);
        }
    }
}
