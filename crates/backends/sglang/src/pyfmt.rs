//! Python `repr()` of the values SGLang interpolates into its error messages.
//!
//! SGLang builds messages with f-strings (`f"got {self.temperature}."`, `f"stop={stop_strs!r}"`), so
//! a number prints as Python prints the parsed JSON value (an int stays an int, a float uses Python's
//! shortest round-trip `repr`) and strings print with Python's quoting rules. The primitives are
//! shared with the other formats in [`genfront_format::pyrepr`].

pub(crate) use genfront_format::pyrepr::{
    PyNum, float_repr, int_list_repr, str_list_repr, str_repr,
};

use serde_json::Value;

/// Python `repr()` of the object `orjson.loads` builds from `value` (dict keys in body order,
/// `None`/`True`/`False`, ints as ints, floats as [`float_repr`]), cut once it passes `budget`
/// bytes (the cut text ends with `...`), so a huge value costs at most `budget` bytes.
pub(crate) fn value_repr(value: &Value, budget: usize) -> String {
    let mut out = String::new();
    write_repr(value, &mut out, budget);
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
        Value::Number(n) => out.push_str(&PyNum(n).to_string()),
        Value::String(s) => out.push_str(&str_repr(s)),
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
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&str_repr(k));
                out.push_str(": ");
                write_repr(v, out, budget);
                if out.len() > budget {
                    return;
                }
            }
            out.push('}');
        }
    }
}
