//! Python `repr()` of the values SGLang interpolates into its error messages.
//!
//! SGLang builds messages with f-strings (`f"got {self.temperature}."`, `f"stop={stop_strs!r}"`), so
//! a number prints as Python prints the parsed JSON value (an int stays an int, a float uses Python's
//! shortest round-trip `repr`) and strings print with Python's quoting rules. The primitives are
//! shared with the other formats in [`genfront_format::pyrepr`].

pub(crate) use genfront_format::pyrepr::{
    PyNum, float_repr, int_list_repr, str_list_repr, str_repr,
};
