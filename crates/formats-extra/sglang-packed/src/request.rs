//! The request side: a packed body rewritten into the SGLang body it stands for, before SGLang's
//! own parser sees it.

use genfront_format::{GenerateError, Rejection};
use serde_json::{Map, Value};

use crate::codec::{self, KEY};

/// The client's `"packed_output"` switch.
pub const PACKED_OUTPUT: &str = "packed_output";

/// What [`rewrite`] made of a body.
#[derive(Debug, PartialEq)]
pub(crate) struct Rewritten {
    /// The SGLang body to parse instead of the client's, or `None` to parse the client's as it
    /// is (nothing packed in it, or not a JSON object: SGLang's parser then answers it).
    pub body: Option<Vec<u8>>,
    /// Whether the client asked for a packed answer.
    pub packed_output: bool,
}

/// One batch row of `input_ids` as rewritten.
enum Row {
    /// Unpacked from `{"b64zstd": …}`.
    Ids(Vec<u32>),
    /// Left as the client sent it (SGLang validates it).
    Plain(Value),
}

/// `input_ids` as rewritten.
enum InputIds {
    Flat(Vec<u32>),
    Rows(Vec<Row>),
}

/// SGLang's pydantic-style 400 (`GenerateError::Schema`, the flat `"Bad Request"` envelope, also
/// for `stream: true`) naming the field: `body.input_ids: …`, `body.input_ids.<row>: …`,
/// `body.packed_output: …`.
fn refuse(path: &str, what: impl std::fmt::Display, stream: bool) -> Rejection {
    Rejection {
        error: GenerateError::Schema {
            message: format!("{path}: {what}"),
            param: Some(path.to_owned()),
        },
        stream,
    }
}

/// Unpack one `{"b64zstd": "…"}` object at `path`, within `budget` bytes (decreased by what it
/// used).
fn unpack_object(
    obj: &Map<String, Value>,
    path: &str,
    budget: &mut usize,
    stream: bool,
) -> Result<Vec<u32>, Rejection> {
    let text = match (obj.len(), obj.get(KEY)) {
        (1, Some(Value::String(s))) => s,
        _ => {
            return Err(refuse(
                path,
                "a packed id list must be {\"b64zstd\": \"<base64 of zstd of little-endian u32 ids>\"}",
                stream,
            ));
        }
    };
    let ids = codec::unpack(text, *budget).map_err(|e| refuse(path, e, stream))?;
    *budget -= ids.len() * 4;
    Ok(ids)
}

/// Rewrite `body`: take out `packed_output` (a boolean; `null` = false) and unpack `input_ids`
/// given as `{"b64zstd": …}` (whole, or per batch row), all rows together within `limit`
/// decompressed bytes. Every other key keeps its value and its position.
///
/// # Errors
/// A [`Rejection`] with SGLang's 400 naming the field, for a `packed_output` that is not a
/// boolean or a packed id list that does not unpack.
pub(crate) fn rewrite(body: &[u8], limit: usize) -> Result<Rewritten, Rejection> {
    let untouched = Rewritten {
        body: None,
        packed_output: false,
    };
    // Nothing packed and no packed answer asked for: SGLang's body as it is (no extra parse).
    if memchr::memmem::find(body, KEY.as_bytes()).is_none()
        && memchr::memmem::find(body, PACKED_OUTPUT.as_bytes()).is_none()
    {
        return Ok(untouched);
    }
    let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(body) else {
        // Not JSON, or not an object: SGLang's parser gives its own answer.
        return Ok(untouched);
    };
    let stream = obj.get("stream") == Some(&Value::Bool(true));
    let packed_output = match obj.shift_remove(PACKED_OUTPUT) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(refuse(
                "body.packed_output",
                "Input should be a valid boolean",
                stream,
            ));
        }
    };
    let mut budget = limit;
    let ids = match obj.get_mut("input_ids") {
        Some(Value::Object(m)) => Some(InputIds::Flat(unpack_object(
            m,
            "body.input_ids",
            &mut budget,
            stream,
        )?)),
        Some(Value::Array(rows)) if rows.iter().any(Value::is_object) => {
            let mut out = Vec::with_capacity(rows.len());
            for (i, row) in rows.iter_mut().enumerate() {
                out.push(match row {
                    Value::Object(m) => Row::Ids(unpack_object(
                        m,
                        &format!("body.input_ids.{i}"),
                        &mut budget,
                        stream,
                    )?),
                    other => Row::Plain(other.take()),
                });
            }
            Some(InputIds::Rows(out))
        }
        _ => None,
    };
    Ok(Rewritten {
        body: Some(serialize(&obj, ids.as_ref())),
        packed_output,
    })
}

/// `obj` as JSON text, with `input_ids` (when rewritten) written straight from the ids (no
/// `Value` per id).
fn serialize(obj: &Map<String, Value>, ids: Option<&InputIds>) -> Vec<u8> {
    let id_bytes = match ids {
        Some(InputIds::Flat(v)) => v.len() * 11,
        Some(InputIds::Rows(rows)) => rows
            .iter()
            .map(|r| match r {
                Row::Ids(v) => v.len() * 11,
                Row::Plain(_) => 64,
            })
            .sum(),
        None => 0,
    };
    let mut out = Vec::with_capacity(id_bytes + 1024);
    out.push(b'{');
    for (i, (k, v)) in obj.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(&mut out, k);
        out.push(b':');
        match (k.as_str(), ids) {
            ("input_ids", Some(InputIds::Flat(v))) => write_json(&mut out, v),
            ("input_ids", Some(InputIds::Rows(rows))) => {
                out.push(b'[');
                for (j, r) in rows.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    match r {
                        Row::Ids(v) => write_json(&mut out, v),
                        Row::Plain(v) => write_json(&mut out, v),
                    }
                }
                out.push(b']');
            }
            _ => write_json(&mut out, v),
        }
    }
    out.push(b'}');
    out
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Serializing plain JSON values and integers into a Vec cannot fail.
    let _ = serde_json::to_writer(out, v);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::codec::pack;

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    fn rewritten(v: Value) -> (Value, bool) {
        let r = rewrite(&body(v), 1 << 20).expect("rewrites");
        let b = r.body.expect("rewritten");
        (serde_json::from_slice(&b).expect("json"), r.packed_output)
    }

    #[test]
    fn packed_ids_become_plain_ids_in_place() {
        let (v, packed) = rewritten(json!({
            "rid": "a", "input_ids": {"b64zstd": pack(&[5, 6, 7])}, "stream": false,
            "packed_output": true,
        }));
        assert!(packed);
        assert_eq!(
            v,
            json!({"rid": "a", "input_ids": [5, 6, 7], "stream": false})
        );
        assert_eq!(
            v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["rid".into(), "input_ids".into(), "stream".into()])
        );
        let (v, packed) = rewritten(json!({
            "input_ids": [{"b64zstd": pack(&[1])}, [2, 3], {"b64zstd": pack(&[])}],
        }));
        assert!(!packed);
        assert_eq!(v, json!({"input_ids": [[1], [2, 3], []]}));
    }

    #[test]
    fn nothing_packed_is_left_alone() {
        let plain = body(json!({"input_ids": [1, 2]}));
        assert_eq!(
            rewrite(&plain, 100),
            Ok(Rewritten {
                body: None,
                packed_output: false
            })
        );
        // Not JSON: SGLang answers it.
        assert_eq!(rewrite(b"{\"b64zstd\"", 100).map(|r| r.body), Ok(None));
    }

    fn refusal(v: Value) -> (String, Option<String>) {
        match rewrite(&body(v), 64).map_err(|r| r.error) {
            Err(GenerateError::Schema { message, param }) => (message, param),
            other => panic!("expected a schema 400, got {other:?}"),
        }
    }

    #[test]
    fn bad_packing_names_the_field() {
        let (m, p) = refusal(json!({"input_ids": {"b64zstd": "%%%"}}));
        assert!(
            m.starts_with("body.input_ids: b64zstd is not valid base64"),
            "{m}"
        );
        assert_eq!(p.as_deref(), Some("body.input_ids"));
        let (m, _) = refusal(json!({"input_ids": [[1], {"b64zstd": "AAAA"}]}));
        assert!(
            m.starts_with("body.input_ids.1: b64zstd is not a valid zstd"),
            "{m}"
        );
        let (m, _) = refusal(json!({"input_ids": {"b64zstd": pack(&[0; 17])}}));
        assert!(m.contains("more than 64 bytes"), "{m}");
        // The budget is shared by the rows.
        let (m, _) = refusal(
            json!({"input_ids": [{"b64zstd": pack(&[0; 10])}, {"b64zstd": pack(&[0; 10])}]}),
        );
        assert!(m.starts_with("body.input_ids.1:"), "{m}");
        let (m, _) = refusal(json!({"input_ids": {"b64zstd": 3}}));
        assert!(m.contains("must be {\"b64zstd\""), "{m}");
        let (m, _) = refusal(json!({"input_ids": {"b64zstd": pack(&[1]), "x": 1}}));
        assert!(m.contains("must be {\"b64zstd\""), "{m}");
        let (m, p) = refusal(json!({"input_ids": [1], "packed_output": "yes"}));
        assert_eq!(m, "body.packed_output: Input should be a valid boolean");
        assert_eq!(p.as_deref(), Some("body.packed_output"));
    }
}
