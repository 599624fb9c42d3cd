//! The body's fast path: the top-level object is read with every key but `token_ids` as a JSON
//! [`Value`], and `token_ids` straight into a `Vec<u32>`, so a large prompt never becomes a tree
//! of 32-byte `Value`s (one per id). The map keeps `token_ids: null` in the key's position; the
//! vLLM engine client writes the typed ids there (`client/body.rs`).
//!
//! It answers `None` for anything it does not take as it is — a body that is not a JSON object,
//! invalid JSON, a `token_ids` that is not a non-empty list of integers in `0..=u32::MAX` — and
//! the format then decodes the whole body as before ([`super::decode_body`]). A request that
//! fails any check on this path is also re-run on the full path, so every error (some print the
//! client's input) is exactly the full path's.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Read `body` on the fast path: the object (with `token_ids: null`) and the ids. `None` when
/// the body has no `token_ids` or the full path must decide.
pub(crate) fn parse(body: &[u8]) -> Option<(Map<String, Value>, Vec<u32>)> {
    let top: TopLevel<'_> = serde_json::from_slice(body).ok()?;
    let ids: Vec<u32> = serde_json::from_str(top.ids?.get()).ok()?;
    if ids.is_empty() {
        return None;
    }
    Some((top.map, ids))
}

/// The top-level object, `token_ids` kept as its raw text.
struct TopLevel<'a> {
    map: Map<String, Value>,
    ids: Option<&'a RawValue>,
}

impl<'de> de::Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = Map::new();
                let mut ids = None;
                // A repeated key keeps its first position and its last value, as
                // `serde_json::Map` does.
                while let Some(key) = access.next_key::<String>()? {
                    if key == "token_ids" {
                        ids = Some(access.next_value::<&'de RawValue>()?);
                        map.insert(key, Value::Null);
                    } else {
                        let v: Value = access.next_value()?;
                        map.insert(key, v);
                    }
                }
                Ok(TopLevel { map, ids })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_into_u32_and_keeps_the_key() {
        let (map, ids) =
            parse(br#"{"sampling_params": {}, "token_ids": [1, 4294967295], "stream": false}"#)
                .expect("fast path");
        assert_eq!(ids, vec![1, u32::MAX]);
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        assert_eq!(keys, ["sampling_params", "token_ids", "stream"]);
        assert_eq!(map["token_ids"], Value::Null);
    }

    #[test]
    fn anything_else_takes_the_full_path() {
        for body in [
            r#"{"token_ids": []}"#,
            r#"{"token_ids": [1, -2]}"#,
            r#"{"token_ids": [1, 2.0]}"#,
            r#"{"token_ids": [4294967296]}"#,
            r#"{"token_ids": [[1]]}"#,
            r#"{"token_ids": null}"#,
            r#"{"sampling_params": {}}"#,
            r#"[1]"#,
            r#"{"token_ids": [1]"#,
        ] {
            assert!(parse(body.as_bytes()).is_none(), "{body}");
        }
    }
}
