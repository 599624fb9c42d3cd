//! Parsing a frame without building what the decoder will not read.
//!
//! A cumulative frame repeats every output id (and every logprob/mask entry) delivered so far, so
//! a plain `serde_json::Value` parse allocates O(output) per frame, O(output²) per stream. Here the
//! first `delivered` elements of cumulative `output_ids` are only lexed and counted (the decoder
//! reads past them), and those of the output-side `meta_info` lists are only lexed and kept as
//! borrowed [`RawValue`]s. Once the frame is read and the number of new ids is known, those list
//! prefixes become `null` when the list has `delivered + new` entries (the decoder reads past
//! them), or are parsed after all when it has exactly `new` entries (the sliced form). The decoder
//! therefore sees a [`Value`] that differs from the full parse only in entries it never reads.

use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, de};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

/// Output-side `meta_info` lists, aligned with the output ids (full or sliced).
const OUTPUT_LISTS: &[&str] = &[
    "output_token_logprobs",
    "output_top_logprobs",
    "output_token_ids_logprobs",
    "output_token_sampling_mask",
];

/// A logprob triple `[logprob|null, id|null, text|null]` read straight into numbers (and the
/// decoded text SGLang puts in the third slot with `return_text_in_logprobs`).
pub(super) type Triple = (Option<f64>, Option<u32>, Option<String>);

/// Output logprob lists read without building [`Value`]s, for the entries the decoder reads (the
/// `Value` lists then hold `null` there). `None` when absent or not in the simple shape (the
/// decoder then reads the `Value`s, errors included).
#[derive(Debug, Default)]
pub(super) struct Typed {
    /// `output_token_logprobs`.
    pub lp: Option<Vec<Triple>>,
    /// `output_top_logprobs`: one list of candidates (all with an id) or `null` per position.
    pub top: Option<Vec<Option<Vec<Triple>>>>,
}

/// Which typed list a seed reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TypedKey {
    Lp,
    Top,
}

/// Parse one frame. `delivered`: output ids delivered before it; `incremental`: its `output_ids`
/// carry only new ids. Returns the frame and how many leading `output_ids` were left out of it.
pub(super) fn frame(
    data: &[u8],
    delivered: usize,
    incremental: bool,
) -> Result<(Value, usize, Typed), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(data);
    let node = Seed {
        kind: Kind::Top,
        delivered,
        skip: 0,
        incremental,
        ids: false,
        typed: None,
    }
    .deserialize(&mut de)?;
    de.end()?;
    let ids = match &node {
        Node::Map(entries) => entries.iter().rev().find(|(k, _)| k == "output_ids"),
        _ => None,
    };
    let ids_len = ids.map_or(0, |(_, v)| v.list_len());
    let skipped = match ids {
        Some((_, Node::Ids { skipped, .. })) => *skipped,
        _ => 0,
    };
    let new = if incremental {
        ids_len
    } else {
        ids_len.saturating_sub(delivered)
    };
    let mut typed = Typed::default();
    let value = node.into_value(delivered + new, new, &mut typed)?;
    Ok((value, skipped, typed))
}

/// What is being parsed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The frame object.
    Top,
    /// `meta_info`.
    Meta,
    /// A list whose first `skip` entries may be left unparsed.
    List,
    /// Anything else.
    Plain,
}

/// A parsed value, with skipped list prefixes still unparsed.
enum Node<'a> {
    Value(Value),
    Map(Vec<(String, Node<'a>)>),
    /// A list: the unparsed prefix, then the parsed rest; `ids`: it is `output_ids`.
    List {
        prefix: Vec<&'a RawValue>,
        rest: Vec<Value>,
    },
    /// A logprob list that may be read typed: the unparsed prefix and rest.
    Typed {
        prefix: Vec<&'a RawValue>,
        rest: Vec<&'a RawValue>,
        key: TypedKey,
    },
    /// Cumulative `output_ids`: the number of leading ids skipped (only lexed), then the rest.
    Ids {
        skipped: usize,
        rest: Vec<Value>,
    },
}

impl Node<'_> {
    fn list_len(&self) -> usize {
        match self {
            Node::Value(Value::Array(a)) => a.len(),
            Node::List { prefix, rest } => prefix.len() + rest.len(),
            Node::Ids { skipped, rest } => skipped + rest.len(),
            Node::Typed { prefix, rest, .. } => prefix.len() + rest.len(),
            _ => 0,
        }
    }

    /// The plain value. `full`: the length of a list in full form; `new`: in sliced form.
    /// `typed` receives the typed lists (the latest occurrence of a key wins, as in the map).
    fn into_value(
        self,
        full: usize,
        new: usize,
        typed: &mut Typed,
    ) -> Result<Value, serde_json::Error> {
        Ok(match self {
            Node::Value(v) => v,
            Node::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for (k, v) in entries {
                    if k == "meta_info" {
                        // A later `meta_info` replaces an earlier one whole.
                        *typed = Typed::default();
                    }
                    map.insert(k, v.into_value(full, new, typed)?);
                }
                Value::Object(map)
            }
            Node::Typed { prefix, rest, key } => {
                let len = prefix.len() + rest.len();
                match key {
                    TypedKey::Lp => typed.lp = None,
                    TypedKey::Top => typed.top = None,
                }
                // The decoder reads exactly `rest` when the list is the slice with nothing
                // before it, or the full list.
                let reads_rest = (len == new && prefix.is_empty()) || (len == full && len != new);
                if reads_rest {
                    let done = match key {
                        TypedKey::Lp => rest
                            .iter()
                            .map(|r| serde_json::from_str::<TypedTriple>(r.get()).map(|t| t.0))
                            .collect::<Result<Vec<_>, _>>()
                            .map(|v| typed.lp = Some(v))
                            .is_ok(),
                        TypedKey::Top => rest
                            .iter()
                            .map(|r| serde_json::from_str::<TypedTop>(r.get()).map(|t| t.0))
                            .collect::<Result<Vec<_>, _>>()
                            .map(|v| typed.top = Some(v))
                            .is_ok(),
                    };
                    if done {
                        return Ok(Value::Array(vec![Value::Null; len]));
                    }
                }
                let mut out = Vec::with_capacity(len);
                if len == new && len != full {
                    for raw in prefix {
                        out.push(serde_json::from_str(raw.get())?);
                    }
                } else {
                    out.resize(prefix.len(), Value::Null);
                }
                for raw in rest {
                    out.push(serde_json::from_str(raw.get())?);
                }
                Value::Array(out)
            }
            // The caller accounts for the skipped ids.
            Node::Ids { rest, .. } => Value::Array(rest),
            Node::List { prefix, rest } => {
                let len = prefix.len() + rest.len();
                let mut out = Vec::with_capacity(len);
                // Read whole when the list has exactly `new` entries (the sliced form).
                if len == new && len != full {
                    for raw in prefix {
                        out.push(serde_json::from_str(raw.get())?);
                    }
                } else {
                    out.resize(prefix.len(), Value::Null);
                }
                out.extend(rest);
                Value::Array(out)
            }
        })
    }
}

/// A triple in the simple shape: an array whose first entry is a number or `null`, whose
/// second is a `u32` or `null` and whose third (if any) is a string or `null` (the rest is
/// ignored). Anything else fails.
struct TypedTriple(Triple);

impl<'de> Deserialize<'de> for TypedTriple {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TypedTriple;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a logprob triple")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TypedTriple, A::Error> {
                let logprob = seq.next_element::<Option<f64>>()?.flatten();
                let id = seq.next_element::<Option<u32>>()?.flatten();
                let text = seq.next_element::<Option<String>>()?.flatten();
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TypedTriple((logprob, id, text)))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A top-candidate position: `null` or a list of simple triples that all have an id.
struct TypedTop(Option<Vec<Triple>>);

impl<'de> Deserialize<'de> for TypedTop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let list = Option::<Vec<TypedTriple>>::deserialize(d)?;
        let Some(list) = list else {
            return Ok(TypedTop(None));
        };
        if list.iter().any(|t| t.0.1.is_none()) {
            return Err(de::Error::custom("a candidate without an id"));
        }
        Ok(TypedTop(Some(list.into_iter().map(|t| t.0).collect())))
    }
}

#[derive(Clone, Copy)]
struct Seed {
    kind: Kind,
    delivered: usize,
    /// Leading list entries to leave unparsed.
    skip: usize,
    incremental: bool,
    /// The seed is for `output_ids`.
    ids: bool,
    /// The seed is for a list that may be read typed.
    typed: Option<TypedKey>,
}

impl Seed {
    fn child(self, key: &str) -> Self {
        let typed = match (self.kind, key) {
            (Kind::Meta, "output_token_logprobs") => Some(TypedKey::Lp),
            (Kind::Meta, "output_top_logprobs") => Some(TypedKey::Top),
            _ => None,
        };
        let (kind, skip, ids) = match (self.kind, key) {
            (Kind::Top, "output_ids") => (
                Kind::List,
                if self.incremental { 0 } else { self.delivered },
                true,
            ),
            (Kind::Top, "meta_info") => (Kind::Meta, 0, false),
            (Kind::Meta, k) if OUTPUT_LISTS.contains(&k) => (Kind::List, self.delivered, false),
            _ => (Kind::Plain, 0, false),
        };
        Self {
            kind,
            skip,
            ids,
            typed,
            ..self
        }
    }
}

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Node<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if self.kind == Kind::Plain {
            return Value::deserialize(d).map(Node::Value);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::Number(v.into())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::Number(v.into())))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Node::Value(
            Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Node::Value(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if let (Kind::List, Some(key)) = (self.kind, self.typed) {
            let mut prefix = Vec::with_capacity(self.skip);
            let mut rest = Vec::new();
            while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                if prefix.len() < self.skip {
                    prefix.push(raw);
                } else {
                    rest.push(raw);
                }
            }
            return Ok(Node::Typed { prefix, rest, key });
        }
        if self.kind != Kind::List || self.skip == 0 {
            return Value::deserialize(SeqAccessDeserializer::new(seq)).map(Node::Value);
        }
        if self.ids {
            let mut skipped = 0;
            while skipped < self.skip {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(Node::Ids {
                        skipped,
                        rest: Vec::new(),
                    });
                }
                skipped += 1;
            }
            let mut rest = Vec::new();
            while let Some(v) = seq.next_element::<Value>()? {
                rest.push(v);
            }
            return Ok(Node::Ids { skipped, rest });
        }
        let mut prefix = Vec::with_capacity(self.skip);
        while prefix.len() < self.skip {
            match seq.next_element::<&'de RawValue>()? {
                Some(raw) => prefix.push(raw),
                None => {
                    return Ok(Node::List {
                        prefix,
                        rest: Vec::new(),
                    });
                }
            }
        }
        let mut rest = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            rest.push(v);
        }
        Ok(Node::List { prefix, rest })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if !matches!(self.kind, Kind::Top | Kind::Meta) {
            return Value::deserialize(MapAccessDeserializer::new(map)).map(Node::Value);
        }
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(&key);
            let value = map.next_value_seed(child)?;
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}
