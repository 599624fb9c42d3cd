//! Python-compatible text for values quoted in vLLM's messages.
//!
//! vLLM builds its error messages with f-strings (`str(value)`) and pydantic's error dicts with
//! `repr(...)`, so a float is `3.0` (not `3`), `None`/`True` are capitalised and strings are quoted
//! with `'`. These helpers reproduce that text for JSON values; the primitives (float, string,
//! number and list `repr`) are shared with the other formats in [`genfront_format::pyrepr`].

pub(crate) use crate::wide::number_text as py_number;
pub(crate) use genfront_format::pyrepr::{
    float_repr as py_float, int_list_repr as py_int_list, str_repr as py_str,
};
use serde_json::{Map, Value};

/// Something whose Python `repr()` can be quoted in a pydantic error dict.
pub(crate) trait PyRepr {
    /// Append the repr to `out`, stopping early once `out` exceeds `budget` bytes.
    fn write_py(&self, out: &mut String, budget: usize);

    /// vLLM 0.33.0's `_summarize_error_input` (`exception_handling/handlers/validation.py`): a
    /// string cut at `max_chars` characters plus `...[truncated]`, a list or dict as
    /// `<list of N items>` / `<dict of N items>`, anything else as its `str()` (`5`, `1.5`,
    /// `None`, `True`).
    fn summary(&self, max_chars: usize) -> String;
}

impl PyRepr for Value {
    fn write_py(&self, out: &mut String, budget: usize) {
        write_repr(self, out, budget);
    }

    fn summary(&self, max_chars: usize) -> String {
        match self {
            Value::String(s) if s.chars().count() > max_chars => {
                s.chars().take(max_chars).collect::<String>() + "...[truncated]"
            }
            Value::String(s) => s.clone(),
            Value::Array(a) => format!("<list of {} items>", a.len()),
            Value::Object(o) => format!("<dict of {} items>", o.len()),
            Value::Null => "None".into(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Number(n) => py_number(n),
        }
    }
}

impl PyRepr for Map<String, Value> {
    fn write_py(&self, out: &mut String, budget: usize) {
        write_map(self, out, budget);
    }

    fn summary(&self, _max_chars: usize) -> String {
        format!("<dict of {} items>", self.len())
    }
}

/// Python `repr()` of the object `json.loads` would build from `value`, cut off once it exceeds
/// `budget` bytes (the cut text ends with `...`). Large inputs cost at most `budget` bytes.
pub(crate) fn py_repr<T: PyRepr + ?Sized>(value: &T, budget: usize) -> String {
    let mut out = String::new();
    value.write_py(&mut out, budget);
    if out.len() > budget {
        let mut cut = budget;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

fn write_repr(value: &Value, out: &mut String, budget: usize) {
    if out.len() > budget {
        return;
    }
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&py_number(n)),
        Value::String(s) => out.push_str(&py_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out, budget);
                if out.len() > budget {
                    return;
                }
            }
            out.push(']');
        }
        Value::Object(map) => write_map(map, out, budget),
    }
}

fn write_map(map: &Map<String, Value>, out: &mut String, budget: usize) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&py_str(k));
        out.push_str(": ");
        write_repr(v, out, budget);
        if out.len() > budget {
            return;
        }
    }
    out.push('}');
}
