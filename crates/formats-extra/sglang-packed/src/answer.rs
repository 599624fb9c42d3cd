//! The answer side: SGLang's answer objects with their id columns packed ([`pack_answer`]) and
//! the exact inverse for clients and tests ([`unpack_answer`]).

use serde_json::{Map, Value};

use crate::codec::{self, KEY, UnpackError};

/// `meta_info` lists of `[logprob, id, text]` triples, one per position.
pub const TRIPLE_LISTS: &[&str] = &["input_token_logprobs", "output_token_logprobs"];

/// `meta_info` lists with, per position, `null` or a list of `[logprob, id, text]` triples.
pub const NESTED_LISTS: &[&str] = &[
    "input_top_logprobs",
    "output_top_logprobs",
    "input_token_ids_logprobs",
    "output_token_ids_logprobs",
];

fn packed_ids(ids: &[u32]) -> Value {
    let mut m = Map::with_capacity(1);
    m.insert(KEY.to_owned(), Value::String(codec::pack(ids)));
    Value::Object(m)
}

fn as_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// The columns of a run of triples, or `None` when one is not `[logprob, u32 id, text]`.
fn columns<'a>(
    triples: impl Iterator<Item = &'a Value>,
    logprobs: &mut Vec<Value>,
    ids: &mut Vec<u32>,
    texts: &mut Vec<Value>,
) -> Option<()> {
    for t in triples {
        let [lp, id, text] = t.as_array()?.as_slice() else {
            return None;
        };
        logprobs.push(lp.clone());
        ids.push(as_id(id)?);
        texts.push(text.clone());
    }
    Some(())
}

fn columns_object(logprobs: Vec<Value>, ids: &[u32], texts: Vec<Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("logprobs".to_owned(), Value::Array(logprobs));
    m.insert("ids".to_owned(), packed_ids(ids));
    if texts.iter().any(|t| !t.is_null()) {
        m.insert("texts".to_owned(), Value::Array(texts));
    }
    m
}

fn pack_triples(list: &[Value]) -> Option<Value> {
    let (mut lp, mut ids, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    columns(list.iter(), &mut lp, &mut ids, &mut texts)?;
    Some(Value::Object(columns_object(lp, &ids, texts)))
}

fn pack_nested(list: &[Value]) -> Option<Value> {
    let (mut lp, mut ids, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    let mut lengths = Vec::with_capacity(list.len());
    for pos in list {
        match pos {
            Value::Null => lengths.push(Value::Null),
            Value::Array(ts) => {
                lengths.push(Value::from(ts.len()));
                columns(ts.iter(), &mut lp, &mut ids, &mut texts)?;
            }
            _ => return None,
        }
    }
    let mut m = Map::new();
    m.insert("lengths".to_owned(), Value::Array(lengths));
    m.extend(columns_object(lp, &ids, texts));
    Some(Value::Object(m))
}

fn pack_object(o: &mut Map<String, Value>) {
    if let Some(Value::Array(ids)) = o.get("output_ids")
        && let Some(ids) = ids.iter().map(as_id).collect::<Option<Vec<u32>>>()
    {
        o.insert("output_ids".to_owned(), packed_ids(&ids));
    }
    let Some(Value::Object(meta)) = o.get_mut("meta_info") else {
        return;
    };
    for key in TRIPLE_LISTS {
        if let Some(Value::Array(list)) = meta.get(*key)
            && let Some(packed) = pack_triples(list)
        {
            meta.insert((*key).to_owned(), packed);
        }
    }
    for key in NESTED_LISTS {
        if let Some(Value::Array(list)) = meta.get(*key)
            && let Some(packed) = pack_nested(list)
        {
            meta.insert((*key).to_owned(), packed);
        }
    }
}

/// Pack an SGLang answer in place: an answer object, or a list of them (batch, `n > 1`). In
/// each object `output_ids` becomes `{"b64zstd": …}`, and in its `meta_info` every list of
/// [`TRIPLE_LISTS`] and [`NESTED_LISTS`] becomes its columns (see the crate docs). A list that
/// does not have the expected shape (an id that is not a `u32`, a triple that is not three
/// items) is left as it is; anything else (error objects included) is untouched.
pub fn pack_answer(v: &mut Value) {
    match v {
        Value::Object(o) => pack_object(o),
        Value::Array(items) => {
            for item in items {
                if let Value::Object(o) = item {
                    pack_object(o);
                }
            }
        }
        _ => {}
    }
}

fn unpack_ids(v: &Value, limit: usize) -> Result<Vec<u32>, String> {
    match v
        .as_object()
        .and_then(|m| m.get(KEY))
        .and_then(Value::as_str)
    {
        Some(s) => codec::unpack(s, limit).map_err(|e: UnpackError| e.to_string()),
        None => Err("expected {\"b64zstd\": …}".to_owned()),
    }
}

fn triple(lp: &Value, id: u32, text: Option<&Value>) -> Value {
    Value::Array(vec![
        lp.clone(),
        Value::from(id),
        text.cloned().unwrap_or(Value::Null),
    ])
}

fn unpack_columns(m: &Map<String, Value>, limit: usize) -> Result<Vec<Value>, String> {
    let lps = m
        .get("logprobs")
        .and_then(Value::as_array)
        .ok_or("no logprobs column")?;
    let ids = unpack_ids(m.get("ids").unwrap_or(&Value::Null), limit)?;
    let texts = m.get("texts").and_then(Value::as_array);
    if ids.len() != lps.len() || texts.is_some_and(|t| t.len() != ids.len()) {
        return Err("columns of different lengths".to_owned());
    }
    Ok(lps
        .iter()
        .zip(&ids)
        .enumerate()
        .map(|(i, (lp, id))| triple(lp, *id, texts.and_then(|t| t.get(i))))
        .collect())
}

fn unpack_object(o: &mut Map<String, Value>, limit: usize) -> Result<(), String> {
    if let Some(v @ Value::Object(_)) = o.get("output_ids") {
        let ids = unpack_ids(v, limit)?;
        o.insert(
            "output_ids".to_owned(),
            Value::Array(ids.into_iter().map(Value::from).collect()),
        );
    }
    let Some(Value::Object(meta)) = o.get_mut("meta_info") else {
        return Ok(());
    };
    for key in TRIPLE_LISTS {
        if let Some(Value::Object(m)) = meta.get(*key) {
            let list = unpack_columns(m, limit)?;
            meta.insert((*key).to_owned(), Value::Array(list));
        }
    }
    for key in NESTED_LISTS {
        if let Some(Value::Object(m)) = meta.get(*key) {
            let flat = unpack_columns(m, limit)?;
            let lengths = m
                .get("lengths")
                .and_then(Value::as_array)
                .ok_or("no lengths column")?;
            let mut flat = flat.into_iter();
            let mut list = Vec::with_capacity(lengths.len());
            for n in lengths {
                list.push(match n {
                    Value::Null => Value::Null,
                    n => {
                        let n = n.as_u64().ok_or("a length is not a count")? as usize;
                        let row: Vec<Value> = flat.by_ref().take(n).collect();
                        if row.len() != n {
                            return Err("lengths add up to more than the columns".to_owned());
                        }
                        Value::Array(row)
                    }
                });
            }
            if flat.next().is_some() {
                return Err("lengths add up to less than the columns".to_owned());
            }
            meta.insert((*key).to_owned(), Value::Array(list));
        }
    }
    Ok(())
}

/// The exact inverse of [`pack_answer`] (for clients and tests): packed `output_ids` and
/// column objects back to SGLang's lists, each id list unpacked within `limit` bytes.
///
/// # Errors
/// A packed field that does not unpack (bad packing, columns of different lengths).
pub fn unpack_answer(v: &mut Value, limit: usize) -> Result<(), String> {
    match v {
        Value::Object(o) => unpack_object(o, limit),
        Value::Array(items) => items.iter_mut().try_for_each(|item| match item {
            Value::Object(o) => unpack_object(o, limit),
            _ => Ok(()),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer() -> Value {
        json!({
            "output_ids": [5, 9, 2],
            "meta_info": {
                "id": "r",
                "input_token_logprobs": [[null, 1, null], [-0.5, 2, null]],
                "output_token_logprobs": [[-0.25, 5, "a"], [-1.0, 9, null], [-2.0, 2, "c"]],
                "input_top_logprobs": [null, [[-0.1, 3, null], [-0.2, 4, null]]],
                "output_top_logprobs": [[[-0.25, 5, null]], [], [[-2.0, 2, null]]],
                "output_token_ids_logprobs": [[[-3.0, 7, null]], null, null],
                "completion_tokens": 3,
            },
        })
    }

    #[test]
    fn pack_then_unpack_is_the_identity() {
        for original in [
            answer(),
            json!([answer(), answer()]),
            json!({"error": {"message": "x"}}),
        ] {
            let mut v = original.clone();
            pack_answer(&mut v);
            let mut back = v.clone();
            unpack_answer(&mut back, 1 << 20).expect("unpacks");
            assert_eq!(back, original);
        }
        let mut v = answer();
        pack_answer(&mut v);
        assert!(v["output_ids"]["b64zstd"].is_string());
        let m = &v["meta_info"];
        assert_eq!(m["input_token_logprobs"]["logprobs"], json!([null, -0.5]));
        assert!(m["input_token_logprobs"].get("texts").is_none());
        assert_eq!(m["output_token_logprobs"]["texts"], json!(["a", null, "c"]));
        assert_eq!(m["input_top_logprobs"]["lengths"], json!([null, 2]));
        assert_eq!(m["output_top_logprobs"]["lengths"], json!([1, 0, 1]));
        assert_eq!(m["completion_tokens"], 3);
    }

    #[test]
    fn lists_of_another_shape_are_left_alone() {
        let mut v =
            json!({"output_ids": [1, -2], "meta_info": {"output_token_logprobs": [[-1.0, 2]]}});
        let before = v.clone();
        pack_answer(&mut v);
        assert_eq!(v, before);
    }
}
