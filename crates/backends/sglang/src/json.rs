//! Typed reads from the client's JSON body, with pydantic-style type errors.
//!
//! SGLang binds `/generate` bodies to the `GenerateReqInput` dataclass through FastAPI/pydantic, so a
//! value of the wrong JSON type is rejected before the handler runs (HTTP 400, the flat
//! `{"object":"error",...}` envelope: [`GenerateError::Schema`]). These helpers give that check for
//! every field genfront reads; fields it does not read are never inspected.

use genfront_format::GenerateError;
use serde_json::{Number, Value};

/// A JSON object (key order preserved).
pub(crate) type Obj = serde_json::Map<String, Value>;

/// A pydantic-style type error at `path` (e.g. `body.sampling_params.temperature`).
pub(crate) fn type_error(path: &str, expected: &str) -> GenerateError {
    GenerateError::Schema {
        message: format!("{path}: Input should be {expected}"),
        param: Some(path.to_owned()),
    }
}

/// The body path of a top-level key.
pub(crate) fn body_path(key: &str) -> String {
    format!("body.{key}")
}

/// A scalar or a per-item list (`Union[T, List[T]]` in `GenerateReqInput`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OneOrList<T> {
    /// One value for every item.
    One(T),
    /// One value per item.
    List(Vec<T>),
}

impl<T: Clone> OneOrList<T> {
    /// The value for batch item `i` (a list shorter than the batch yields `None`).
    pub(crate) fn item(&self, i: usize) -> Option<T> {
        match self {
            OneOrList::One(v) => Some(v.clone()),
            OneOrList::List(l) => l.get(i).cloned(),
        }
    }
}

/// The value of `key`, treating an explicit `null` like an absent key.
pub(crate) fn present<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// An integer as pydantic's lax mode reads it: a JSON integer, or a float with no fractional part.
pub(crate) fn int_of(v: &Value, path: &str) -> Result<i128, GenerateError> {
    match v {
        Value::Number(n) => number_to_int(n).ok_or_else(|| type_error(path, "a valid integer")),
        _ => Err(type_error(path, "a valid integer")),
    }
}

/// The integer pydantic's lax `int` makes of a value it admitted (`true` → 1, `"  2 "` → 2,
/// `"1_0"` → 10, `"3.0"` → 3, `2.0` → 2); `None` for anything else.
pub(crate) fn lax_int(v: &Value) -> Option<i128> {
    match v {
        Value::Bool(b) => Some(i128::from(*b)),
        Value::Number(n) => number_to_int(n),
        Value::String(s) => {
            let t = s.trim();
            let t = match t.split_once('.') {
                Some((i, frac)) if frac.chars().all(|c| c == '0') => i,
                Some(_) => return None,
                None => t,
            };
            t.replace('_', "").parse::<i128>().ok()
        }
        _ => None,
    }
}

/// Python's `not value` for a JSON value: `null`, `false`, `0`, `0.0`, `""`, `[]`, `{}`.
pub(crate) fn py_falsy(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The integer value of `n`, if it is integral.
pub(crate) fn number_to_int(n: &Number) -> Option<i128> {
    if let Some(i) = n.as_i64() {
        Some(i128::from(i))
    } else if let Some(u) = n.as_u64() {
        Some(i128::from(u))
    } else {
        let f = n.as_f64()?;
        // 2^100 bounds every integral float this API can meaningfully carry.
        (f.fract() == 0.0 && f.abs() < 1.27e30).then_some(f as i128)
    }
}

/// A number (`float` fields accept ints too).
pub(crate) fn num_of<'a>(v: &'a Value, path: &str) -> Result<&'a Number, GenerateError> {
    match v {
        Value::Number(n) => Ok(n),
        _ => Err(type_error(path, "a valid number")),
    }
}

/// A boolean (strict JSON `true`/`false`).
pub(crate) fn bool_of(v: &Value, path: &str) -> Result<bool, GenerateError> {
    v.as_bool()
        .ok_or_else(|| type_error(path, "a valid boolean"))
}

/// A boolean as pydantic's lax bind reads it (`0`/`1`, `"yes"`, ...: the value SGLang's
/// `GenerateReqInput` holds; where SGLang is strict, its JSON contract gate refused the body
/// first).
pub(crate) fn lax_bool_of(v: &Value, path: &str) -> Result<bool, GenerateError> {
    crate::request::lax_bool(v).ok_or_else(|| type_error(path, "a valid boolean"))
}

/// A `bool` field of `GenerateReqInput` with a default, read as [`lax_bool_of`] does.
pub(crate) fn req_lax_bool(obj: &Obj, key: &str, default: bool) -> Result<bool, GenerateError> {
    match obj.get(key) {
        None => Ok(default),
        Some(v) => lax_bool_of(v, &body_path(key)),
    }
}

/// A string.
pub(crate) fn str_of<'a>(v: &'a Value, path: &str) -> Result<&'a str, GenerateError> {
    v.as_str().ok_or_else(|| type_error(path, "a valid string"))
}

/// An object.
pub(crate) fn obj_of<'a>(v: &'a Value, path: &str) -> Result<&'a Obj, GenerateError> {
    v.as_object()
        .ok_or_else(|| type_error(path, "a valid dictionary"))
}

/// A list.
pub(crate) fn list_of<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>, GenerateError> {
    v.as_array().ok_or_else(|| type_error(path, "a valid list"))
}

/// A non-optional `bool` field with a default: absent → `default`; `null` is a type error.
pub(crate) fn req_bool(obj: &Obj, key: &str, default: bool) -> Result<bool, GenerateError> {
    match obj.get(key) {
        None => Ok(default),
        Some(v) => bool_of(v, &body_path(key)),
    }
}

/// An `Optional[int]` field.
pub(crate) fn opt_int(obj: &Obj, key: &str) -> Result<Option<i128>, GenerateError> {
    present(obj, key)
        .map(|v| int_of(v, &body_path(key)))
        .transpose()
}

/// An `Optional[str]` field.
pub(crate) fn opt_str<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a str>, GenerateError> {
    present(obj, key)
        .map(|v| str_of(v, &body_path(key)))
        .transpose()
}

/// An `Optional[Union[T, List[T]]]` field read with `one`.
pub(crate) fn opt_one_or_list<'a, T>(
    obj: &'a Obj,
    key: &str,
    one: impl Fn(&'a Value, &str) -> Result<T, GenerateError>,
) -> Result<Option<OneOrList<T>>, GenerateError> {
    let Some(v) = present(obj, key) else {
        return Ok(None);
    };
    let path = body_path(key);
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| one(item, &format!("{path}.{i}")))
            .collect::<Result<Vec<_>, _>>()
            .map(|l| Some(OneOrList::List(l))),
        v => one(v, &path).map(|x| Some(OneOrList::One(x))),
    }
}

/// Token ids as `GenerateReqInput` accepts them: a flat list of ints or a list of lists of ints.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenLists {
    /// `[1, 2, 3]` (also `[]`).
    Flat(Vec<i64>),
    /// `[[1, 2], [3]]`.
    Nested(Vec<Vec<i64>>),
}

/// Read an `Optional[Union[List[List[int]], List[int]]]` field.
pub(crate) fn opt_token_lists(obj: &Obj, key: &str) -> Result<Option<TokenLists>, GenerateError> {
    let Some(v) = present(obj, key) else {
        return Ok(None);
    };
    let path = body_path(key);
    let items = list_of(v, &path)?;
    match items.first() {
        Some(Value::Array(_)) => items
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let row_path = format!("{path}.{i}");
                ints(list_of(row, &row_path)?, &row_path)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|rows| Some(TokenLists::Nested(rows))),
        _ => ints(items, &path).map(|l| Some(TokenLists::Flat(l))),
    }
}

/// A list of JSON integers that fit in i64 (no floats: token ids are exact).
fn ints(items: &[Value], path: &str) -> Result<Vec<i64>, GenerateError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i64()
                .ok_or_else(|| type_error(&format!("{path}.{i}"), "a valid integer"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(m) => m,
            _ => Obj::new(),
        }
    }

    #[test]
    fn token_lists_read_both_shapes() {
        let o =
            obj(json!({"a": [1, 2], "b": [[1], [2, 3]], "c": [], "d": [1, [2]], "e": [[1], 2]}));
        assert_eq!(
            opt_token_lists(&o, "a").ok().flatten(),
            Some(TokenLists::Flat(vec![1, 2]))
        );
        assert_eq!(
            opt_token_lists(&o, "b").ok().flatten(),
            Some(TokenLists::Nested(vec![vec![1], vec![2, 3]]))
        );
        assert_eq!(
            opt_token_lists(&o, "c").ok().flatten(),
            Some(TokenLists::Flat(vec![]))
        );
        assert!(opt_token_lists(&o, "d").is_err());
        assert!(opt_token_lists(&o, "e").is_err());
        assert_eq!(opt_token_lists(&o, "missing").ok().flatten(), None);
    }

    #[test]
    fn ints_accept_integral_floats() {
        assert_eq!(int_of(&json!(5.0), "x").ok(), Some(5));
        assert!(int_of(&json!(5.5), "x").is_err());
        assert!(int_of(&json!("5"), "x").is_err());
        assert_eq!(
            int_of(&json!(u64::MAX), "x").ok(),
            Some(i128::from(u64::MAX))
        );
    }
}
