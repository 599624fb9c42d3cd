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
    let top: TopLevel = serde_json::from_slice(body).ok()?;
    Some((top.obj, top.ids))
}

/// The top-level object (with the `input_ids` placeholder) and the typed ids.
struct TopLevel {
    obj: Obj,
    ids: Option<IdLists>,
}

impl<'de> de::Deserialize<'de> for TopLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopLevel;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut obj = Obj::new();
                let mut ids = None;
                // A repeated key keeps its first position and its last value, as
                // `serde_json::Map` does (every repeat must be ids the fast path takes).
                while let Some(key) = map.next_key::<String>()? {
                    if key == "input_ids" {
                        ids = Some(map.next_value_seed(IdsSeed)?);
                        obj.insert(key, Value::Null);
                    } else {
                        let v: Value = map.next_value()?;
                        obj.insert(key, v);
                    }
                }
                Ok(TopLevel { obj, ids })
            }
        }
        d.deserialize_map(V)
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
}
