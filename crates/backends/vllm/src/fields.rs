//! A reader for typed fields of one JSON dict that records pydantic-style issues instead of
//! stopping at the first one (pydantic validates every field and reports all errors).

use serde_json::{Map, Value};

use crate::schema::{Issue, Loc, PyInt, child, to_int, to_str};

/// Reads typed fields of one dict, recording pydantic-style issues.
pub(crate) struct Fields<'a, 'i> {
    pub map: &'a Map<String, Value>,
    pub base: Vec<Loc>,
    pub issues: &'i mut Vec<Issue>,
}

impl<'a> Fields<'a, '_> {
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    pub(crate) fn fail(
        &mut self,
        key: &str,
        (kind, msg): (&'static str, &'static str),
        input: &Value,
    ) {
        self.issues
            .push(Issue::new(kind, child(&self.base, key), msg, input));
    }

    pub(crate) fn with<T>(
        &mut self,
        key: &str,
        f: impl Fn(&Value) -> Result<T, (&'static str, &'static str)>,
    ) -> Option<T> {
        let v = self.get(key)?;
        match f(v) {
            Ok(t) => Some(t),
            Err(fail) => {
                self.fail(key, fail, v);
                None
            }
        }
    }

    /// A non-nullable field: null is a type error.
    pub(crate) fn req<T>(
        &mut self,
        key: &str,
        default: T,
        f: impl Fn(&Value) -> Result<T, (&'static str, &'static str)>,
    ) -> T {
        self.with(key, f).unwrap_or(default)
    }

    /// A nullable field: absent or null → `None`.
    pub(crate) fn opt<T>(
        &mut self,
        key: &str,
        f: impl Fn(&Value) -> Result<T, (&'static str, &'static str)>,
    ) -> Option<T> {
        match self.get(key) {
            None | Some(Value::Null) => None,
            Some(_) => self.with(key, f),
        }
    }

    pub(crate) fn required(&mut self, key: &str) -> Option<&'a Value> {
        let v = self.get(key);
        if v.is_none() {
            self.issues
                .push(Issue::missing(child(&self.base, key), self.map));
        }
        v
    }

    /// `list[int]` (nullable when `nullable`), each item coerced like `int`.
    pub(crate) fn int_list(&mut self, key: &str, nullable: bool) -> Option<Vec<PyInt>> {
        let v = self.get(key)?;
        if nullable && v.is_null() {
            return None;
        }
        let Some(items) = v.as_array() else {
            self.fail(key, ("list_type", "Input should be a valid list"), v);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match to_int(item) {
                Ok(x) => out.push(x),
                Err((kind, msg)) => {
                    ok = false;
                    let l = child(&child(&self.base, key), i);
                    self.issues.push(Issue::new(kind, l, msg, item));
                }
            }
        }
        ok.then_some(out)
    }

    /// `list[str] | None`.
    pub(crate) fn str_list(&mut self, key: &str) -> Option<Vec<String>> {
        let v = self.get(key)?;
        if v.is_null() {
            return None;
        }
        let Some(items) = v.as_array() else {
            self.fail(key, ("list_type", "Input should be a valid list"), v);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match to_str(item) {
                Ok(s) => out.push(s.to_owned()),
                Err((kind, msg)) => {
                    let l = child(&child(&self.base, key), i);
                    self.issues.push(Issue::new(kind, l, msg, item));
                }
            }
        }
        Some(out)
    }

    /// `dict[str, Any] | None`.
    /// A nested pydantic model or dataclass field: `issue` (kind, message, ctx) when the value is
    /// neither `null` nor an object.
    pub(crate) fn opt_model(
        &mut self,
        key: &str,
        issue: (&'static str, &'static str, Option<&'static str>),
    ) -> Option<&'a Map<String, Value>> {
        let v = self.get(key)?;
        match v {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                let mut i = Issue::new(issue.0, child(&self.base, key), issue.1, other);
                i.ctx = issue.2.map(str::to_owned);
                self.issues.push(i);
                None
            }
        }
    }

    pub(crate) fn opt_dict(&mut self, key: &str) -> Option<&'a Map<String, Value>> {
        let v = self.get(key)?;
        match v {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                self.fail(
                    key,
                    ("dict_type", "Input should be a valid dictionary"),
                    other,
                );
                None
            }
        }
    }
}

pub(crate) fn int(v: &Value) -> Result<PyInt, (&'static str, &'static str)> {
    to_int(v)
}
