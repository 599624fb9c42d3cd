//! `sampling_params`: typed reads and SGLang's `SamplingParams.__post_init__` / `normalize` /
//! `verify` rules (`python/sglang/srt/sampling/sampling_params.py`), with its exact messages.
//!
//! Only the keys genfront projects are read; every other key (`skip_special_tokens`,
//! `no_stop_trim`, `custom_params`, future keys…) stays untouched in the native body, and
//! [`SAMPLING_KEYS`] says which of them another engine kind gets typed or must refuse.

use genfront_format::GenerateError;
use genfront_protocol::{LogitBias, StructuredOutput};
use serde_json::{Number, Value};

use crate::{
    Carry::{NativeOnly, Typed},
    SchemaKey, Unset,
    Unset::Empty,
    key,
};

use crate::json::{self, Obj, int_of, num_of, present, type_error};
use crate::pyfmt::{PyNum, str_list_repr, str_repr};

/// Every key of SGLang's `SamplingParams` a client may send (`sampling_params.py`, the API
/// fields; `beam_width` is read by `io_struct`) and how it reaches a non-SGLang engine.
///
/// Typed: the limits, penalties and sampling knobs, `stop` strings (an engine with a tokenizer
/// matches them), `stop_token_ids`, `ignore_eos`, `sampling_seed`, `logit_bias`
/// ([`genfront_protocol::Constraints::logit_bias`]) and the grammar that SGLang's scheduler picks
/// — `json_schema`, else `regex`, else `ebnf`, else a non-empty `structural_tag`
/// ([`genfront_protocol::StructuredOutput`]). `n` fans out into `n` engine requests.
pub const SAMPLING_KEYS: &[SchemaKey] = &[
    key("max_new_tokens", Typed),
    key("stop", Typed),
    key("stop_token_ids", Typed),
    key("stop_regex", NativeOnly(Empty)),
    key("temperature", Typed),
    key("top_p", Typed),
    key("top_k", Typed),
    key("min_p", Typed),
    key("frequency_penalty", Typed),
    key("presence_penalty", Typed),
    key("repetition_penalty", Typed),
    key("min_new_tokens", Typed),
    key("n", Typed),
    key("json_schema", Typed),
    key("regex", Typed),
    key("ebnf", Typed),
    key("structural_tag", Typed),
    key("ignore_eos", Typed),
    key("skip_special_tokens", NativeOnly(Unset::True)),
    key("spaces_between_special_tokens", NativeOnly(Unset::True)),
    key("no_stop_trim", NativeOnly(Empty)),
    key("custom_params", NativeOnly(Empty)),
    key("stream_interval", NativeOnly(Empty)),
    key("logit_bias", Typed),
    key("sampling_seed", Typed),
    // Beam search (SGLang's `beam_search/`): an SGLang engine gets it in the native body; the
    // in-process mock samples one ordinary sequence; another engine's client refuses it.
    key("beam_width", NativeOnly(Unset::One)),
];

/// The set [`Carry::NativeOnly`](crate::Carry::NativeOnly) keys of one `sampling_params`
/// object as `sampling_params.<key>`, plus `sampling_params.logit_bias` when an entry cannot be
/// carried typed (a value that is not a number).
pub(crate) fn native_only(sp: &Obj) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in sp {
        let unset = match SAMPLING_KEYS.iter().find(|s| s.key == k) {
            Some(SchemaKey {
                carry: NativeOnly(unset),
                ..
            }) => *unset,
            _ if k == "logit_bias" && !v.is_null() && logit_bias(sp).is_none() => {
                out.push(format!("sampling_params.{k}"));
                continue;
            }
            _ => continue,
        };
        if !unset.is_unset(v) {
            out.push(format!("sampling_params.{k}"));
        }
    }
    out
}

/// `logit_bias` as typed entries, in the client's order (`None` when an entry cannot be carried:
/// a key that is not a token id or a value that is not a number). Absent or `null`: empty.
pub(crate) fn logit_bias(sp: &Obj) -> Option<Vec<LogitBias>> {
    let Some(Value::Object(map)) = present(sp, "logit_bias") else {
        return Some(Vec::new());
    };
    map.iter()
        .map(|(k, v)| {
            Some(LogitBias {
                token_id: parse_py_int(k).and_then(|id| u32::try_from(id).ok())?,
                bias: v.as_f64()?,
            })
        })
        .collect()
}

/// The grammar SGLang's scheduler compiles for these params (`json_schema`, else `regex`, else
/// `ebnf`, else a non-empty `structural_tag`); a non-string value is carried as its JSON text.
pub(crate) fn structured(sp: &Obj) -> Option<StructuredOutput> {
    let text = |key: &str| {
        present(sp, key).map(|v| match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        })
    };
    if let Some(t) = text("json_schema") {
        return Some(StructuredOutput::JsonSchema(t));
    }
    if let Some(t) = text("regex") {
        return Some(StructuredOutput::Regex(t));
    }
    if let Some(t) = text("ebnf") {
        return Some(StructuredOutput::Grammar(t));
    }
    text("structural_tag")
        .filter(|t| !t.is_empty())
        .map(StructuredOutput::StructuralTag)
}

/// SGLang's default `max_new_tokens` (the code default; old docs said 16).
pub(crate) const DEFAULT_MAX_NEW_TOKENS: i128 = 128;
/// SGLang's greedy threshold: `0 <= temperature < 1e-6` means greedy.
const SAMPLING_EPS: f64 = 1e-6;

/// `MAX_STOP_COUNT` / `MAX_STOP_REGEX_COUNT` (`sampling_params.py:44-46`).
const MAX_STOP_COUNT: usize = 32;
/// `MAX_STOP_REGEX_LEN`: bytes of one `stop_regex` pattern.
const MAX_STOP_REGEX_LEN: usize = 256;
/// `REQUEST_REASONING_END_TOKEN_IDS_KEY` of `custom_params` (`sampling_params.py:55-56`).
const REASONING_END_TOKEN_IDS_KEY: &str = "__sglang_reasoning_end_token_ids";
/// `MAX_REQUEST_REASONING_END_TOKEN_IDS`.
const MAX_REASONING_END_TOKEN_IDS: usize = 32;

/// The typed view of one `sampling_params` object. An explicit JSON `null` on a key means that
/// key's default (SGLang's `__post_init__`), except `max_new_tokens`, which is `Optional` in SGLang:
/// `null` there means "no limit" (the engine caps it at the context length).
#[derive(Debug, Clone)]
pub(crate) struct SamplingParams {
    /// `max_new_tokens` as sent (`None` when absent or `null`), for the context-length check,
    /// which SGLang runs on the raw dict value.
    pub max_new_tokens_raw: Option<Number>,
    /// `max_new_tokens` after defaults: absent → 128, `null` → `None` (unlimited).
    pub max_new_tokens: Option<i128>,
    min_new_tokens: Option<Number>,
    temperature: Option<Number>,
    top_p: Option<Number>,
    top_k: Option<Number>,
    min_p: Option<Number>,
    frequency_penalty: Option<Number>,
    presence_penalty: Option<Number>,
    repetition_penalty: Option<Number>,
    /// `stop_token_ids` without `null` entries, de-duplicated in first-seen order (SGLang keeps a
    /// set). Ids outside `u32` can never match a token and are dropped.
    pub stop_token_ids: Vec<u32>,
    /// `ignore_eos`.
    pub ignore_eos: bool,
    /// `n` (parallel samples); `null` → 1.
    pub n: i128,
    /// `n` was sent as `null` (SGLang compares it with 1 and fails: see `request.rs`).
    pub n_null: bool,
    /// `choice` was sent (any value): the contract gate admits it, but `SamplingParams` has no
    /// such argument.
    pub choice: bool,
    /// `sampling_seed` as a 64-bit seed.
    pub seed: Option<u64>,
    /// `beam_width` (`null`/absent → 1).
    pub beam_width: i128,
    /// `stop` normalized to a list (`None` when absent or `null`).
    stop: Option<Vec<String>>,
    /// `stop_regex` normalized to a list.
    stop_regex: Option<Vec<String>>,
    /// `logit_bias` keys, in order.
    logit_bias_keys: Vec<String>,
    /// How many of `json_schema`, `regex`, `ebnf` are set.
    grammars: usize,
    /// `watermark` as sent (`None` when absent or `null`).
    pub watermark: Option<Value>,
    /// `sampling_seed` as sent, for its range check.
    seed_raw: Option<i128>,
    /// `custom_params.__sglang_reasoning_end_token_ids`, when the key is present.
    reasoning_end_ids: Option<Value>,
}

impl SamplingParams {
    /// Read the object at `path` (e.g. `body.sampling_params`). Wrong types are schema errors.
    pub(crate) fn read(obj: &Obj, path: &str) -> Result<Self, GenerateError> {
        let p = |key: &str| format!("{path}.{key}");
        let number = |key: &str| -> Result<Option<Number>, GenerateError> {
            present(obj, key)
                .map(|v| num_of(v, &p(key)).cloned())
                .transpose()
        };
        let integer = |key: &str| -> Result<Option<Number>, GenerateError> {
            present(obj, key)
                .map(|v| int_of(v, &p(key)).map(|_| v.as_number().cloned()))
                .transpose()
                .map(Option::flatten)
        };
        let max_new_tokens_raw = integer("max_new_tokens")?;
        let max_new_tokens = match obj.get("max_new_tokens") {
            None => Some(DEFAULT_MAX_NEW_TOKENS),
            Some(_) => max_new_tokens_raw.as_ref().and_then(json::number_to_int),
        };
        let n = match present(obj, "n") {
            Some(v) => int_of(v, &p("n"))?,
            None => 1,
        };
        let beam_width = match present(obj, "beam_width") {
            Some(v) => int_of(v, &p("beam_width"))?,
            None => 1,
        };
        let mut seed_raw = None;
        let seed = match present(obj, "sampling_seed") {
            Some(v) => {
                let s = int_of(v, &p("sampling_seed"))?;
                seed_raw = Some(s);
                Some(
                    u64::try_from(s)
                        .ok()
                        .or_else(|| i64::try_from(s).ok().map(|x| x as u64))
                        .ok_or_else(|| type_error(&p("sampling_seed"), "a valid integer"))?,
                )
            }
            None => None,
        };
        let ignore_eos = match present(obj, "ignore_eos") {
            Some(v) => json::bool_of(v, &p("ignore_eos"))?,
            None => false,
        };
        let logit_bias_keys = match present(obj, "logit_bias") {
            Some(v) => json::obj_of(v, &p("logit_bias"))?.keys().cloned().collect(),
            None => Vec::new(),
        };
        // An empty grammar is "unset" (`sampling_params.py:238-242`).
        let grammars = ["json_schema", "regex", "ebnf", "structural_tag"]
            .iter()
            .filter(|k| present(obj, k).is_some_and(|v| v.as_str() != Some("")))
            .count();
        Ok(Self {
            max_new_tokens_raw,
            max_new_tokens,
            min_new_tokens: integer("min_new_tokens")?,
            temperature: number("temperature")?,
            top_p: number("top_p")?,
            top_k: integer("top_k")?,
            min_p: number("min_p")?,
            frequency_penalty: number("frequency_penalty")?,
            presence_penalty: number("presence_penalty")?,
            repetition_penalty: number("repetition_penalty")?,
            stop_token_ids: stop_token_ids(obj, &p("stop_token_ids"))?,
            ignore_eos,
            n,
            n_null: obj.get("n").is_some_and(Value::is_null),
            choice: obj.contains_key("choice"),
            seed,
            beam_width,
            stop: str_or_list(present(obj, "stop"), &p("stop"))?,
            stop_regex: str_or_list(present(obj, "stop_regex"), &p("stop_regex"))?,
            logit_bias_keys,
            grammars,
            watermark: present(obj, "watermark").cloned(),
            seed_raw,
            reasoning_end_ids: present(obj, "custom_params")
                .and_then(Value::as_object)
                .and_then(|c| c.get(REASONING_END_TOKEN_IDS_KEY))
                .cloned(),
        })
    }

    /// SGLang's `normalize(tokenizer)` then `verify(vocab_size)`, in its order, with its
    /// messages. String stop conditions need the engine's tokenizer: an engine without one
    /// (`tokenizer == Some(false)`, SGLang `--skip-tokenizer-init`) gets SGLang's rejection from
    /// `normalize(None)`; an engine with one, or one not known, matches them itself.
    /// (`min_new_tokens > 0` is *not* rejected: the engine knows its EOS ids and enforces
    /// `min_tokens` itself.)
    ///
    /// With `vocab_size` unknown (`None`), `logit_bias` keys are only checked to be integers
    /// that fit a token id; the range check is the engine's.
    pub(crate) fn verify(
        &self,
        vocab_size: Option<u32>,
        tokenizer: Option<bool>,
    ) -> Result<(), GenerateError> {
        let invalid = |m: String| Err(GenerateError::validation(m));
        let no_tokenizer = tokenizer == Some(false);
        // normalize (`sampling_params.py:331-386`): the stop lists' bounds, then
        // raise_if_tokenizer_required (`:440-470`).
        if let Some(stop) = self.stop.as_deref()
            && stop.len() > MAX_STOP_COUNT
        {
            return invalid(format!(
                "at most {MAX_STOP_COUNT} stop strings are allowed, got {}",
                stop.len()
            ));
        }
        if let Some(stop) = self.stop_regex.as_deref() {
            if stop.len() > MAX_STOP_COUNT {
                return invalid(format!(
                    "at most {MAX_STOP_COUNT} stop_regex patterns are allowed, got {}",
                    stop.len()
                ));
            }
            if let Some(long) = stop.iter().find(|r| r.len() > MAX_STOP_REGEX_LEN) {
                return invalid(format!(
                    "stop_regex is {} bytes, over the {MAX_STOP_REGEX_LEN}-byte limit",
                    long.len()
                ));
            }
        }
        if let Some(stop) = self
            .stop
            .as_deref()
            .filter(|s| no_tokenizer && !s.is_empty())
        {
            return invalid(format!(
                "stop={} is unavailable when skip_tokenizer_init=True (requires tokenizer to decode tokens to text for matching).",
                str_list_repr(stop.iter().map(String::as_str))
            ));
        }
        if let Some(stop) = self
            .stop_regex
            .as_deref()
            .filter(|s| no_tokenizer && !s.is_empty())
        {
            return invalid(format!(
                "stop_regex={} is unavailable when skip_tokenizer_init=True (requires tokenizer to decode tokens to text for matching).",
                str_list_repr(stop.iter().map(String::as_str))
            ));
        }
        if no_tokenizer && self.min_new_tokens() > 0 {
            return invalid(format!(
                "min_new_tokens={} is unavailable when skip_tokenizer_init=True (requires tokenizer for eos_token_id).",
                self.min_display()
            ));
        }
        // verify (`sampling_params.py:252-329`)
        if self.beam_width < 1 {
            return invalid(format!(
                "beam_width must be at least 1, got {}.",
                self.beam_width
            ));
        }
        let f = |n: &Option<Number>, default: f64| {
            n.as_ref().and_then(Number::as_f64).unwrap_or(default)
        };
        let temperature = f(&self.temperature, 1.0);
        let greedy = (0.0..SAMPLING_EPS).contains(&temperature);
        if let Some(t) = &self.temperature
            && !(temperature.is_finite() && temperature >= 0.0)
        {
            return invalid(format!(
                "temperature must be a non-negative finite number, got {}.",
                PyNum(t)
            ));
        }
        if let Some(v) = &self.top_p {
            let x = f(&self.top_p, 1.0);
            if !(x > 0.0 && x <= 1.0) {
                return invalid(format!("top_p must be in (0, 1], got {}.", PyNum(v)));
            }
        }
        if let Some(v) = &self.min_p {
            let x = f(&self.min_p, 0.0);
            if !(0.0..=1.0).contains(&x) {
                return invalid(format!("min_p must be in [0, 1], got {}.", PyNum(v)));
            }
        }
        if let Some(v) = &self.top_k {
            let k = json::number_to_int(v).unwrap_or(-1);
            if !greedy && k != -1 && k < 1 {
                return invalid(format!(
                    "top_k must be -1 (disable) or at least 1, got {}.",
                    PyNum(v)
                ));
            }
        }
        for (name, value) in [
            ("frequency_penalty", &self.frequency_penalty),
            ("presence_penalty", &self.presence_penalty),
        ] {
            if let Some(v) = value
                && !(-2.0..=2.0).contains(&f(value, 0.0))
            {
                return invalid(format!("{name} must be in [-2, 2], got {}.", PyNum(v)));
            }
        }
        if let Some(v) = &self.repetition_penalty {
            let x = f(&self.repetition_penalty, 1.0);
            if !(x > 0.0 && x <= 2.0) {
                return invalid(format!(
                    "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {}.",
                    PyNum(v)
                ));
            }
        }
        let min_new = self.min_new_tokens();
        if min_new < 0 {
            return invalid(format!(
                "min_new_tokens must be in [0, max_new_tokens], got {}.",
                self.min_display()
            ));
        }
        if let Some(max_new) = self.max_new_tokens {
            let max_display = self
                .max_new_tokens_raw
                .as_ref()
                .map_or_else(|| max_new.to_string(), |n| PyNum(n).to_string());
            if max_new < 0 {
                return invalid(format!(
                    "max_new_tokens must be at least 0, got {max_display}."
                ));
            }
            if min_new > max_new {
                return invalid(format!(
                    "min_new_tokens must be in [0, max_new_tokens({max_display})], got {}.",
                    self.min_display()
                ));
            }
        }
        for key in &self.logit_bias_keys {
            match parse_py_int(key) {
                Some(id)
                    if (0..vocab_size.map_or(i128::from(u32::MAX) + 1, i128::from))
                        .contains(&id) => {}
                Some(_) => {
                    return invalid(format!(
                        "logit_bias must has keys in [0, {}], got {key}.",
                        vocab_size.map_or_else(
                            || "vocab_size - 1".to_owned(),
                            |v| (i128::from(v) - 1).to_string()
                        )
                    ));
                }
                None => {
                    return invalid(format!(
                        "invalid literal for int() with base 10: {}",
                        str_repr(key)
                    ));
                }
            }
        }
        if let Some(seed) = self.seed_raw
            && !(i128::from(i64::MIN)..=i128::from(i64::MAX)).contains(&seed)
        {
            return invalid(format!(
                "sampling_seed must be in [-2**63, 2**63 - 1], got {seed}."
            ));
        }
        // get_request_reasoning_end_token_ids(strict=True) (`sampling_params.py:59-98`)
        if let Some(ids) = &self.reasoning_end_ids {
            let bound = vocab_size.map(i128::from);
            let ok = ids.as_array().is_some_and(|l| {
                !l.is_empty()
                    && l.len() <= MAX_REASONING_END_TOKEN_IDS
                    && l.iter().all(|x| {
                        (x.is_i64() || x.is_u64())
                            && json::number_to_int(x.as_number().unwrap_or(&0.into()))
                                .is_some_and(|i| i >= 0 && bound.is_none_or(|b| i < b))
                    })
            });
            if !ok {
                return invalid(format!(
                    "request reasoning end token IDs must be a non-empty, vocabulary-bounded list of at most {MAX_REASONING_END_TOKEN_IDS} integers"
                ));
            }
        }
        if self.grammars > 1 {
            return invalid(
                "Only one of json_schema, regex, ebnf, or structural_tag can be set.".to_owned(),
            );
        }
        Ok(())
    }

    /// `min_new_tokens` (default 0).
    pub(crate) fn min_new_tokens(&self) -> i128 {
        self.min_new_tokens
            .as_ref()
            .and_then(json::number_to_int)
            .unwrap_or(0)
    }

    fn min_display(&self) -> String {
        self.min_new_tokens
            .as_ref()
            .map_or_else(|| "0".to_owned(), |n| PyNum(n).to_string())
    }

    /// `stop` strings, normalized to a list (empty when absent or `null`).
    pub(crate) fn stop_strings(&self) -> Vec<String> {
        self.stop.clone().unwrap_or_default()
    }

    /// `temperature` as sent (`None` = engine default).
    pub(crate) fn temperature(&self) -> Option<f64> {
        self.temperature.as_ref().and_then(Number::as_f64)
    }

    /// `top_p` as sent.
    pub(crate) fn top_p(&self) -> Option<f64> {
        self.top_p.as_ref().and_then(Number::as_f64)
    }

    /// `top_k` as sent; `-1` (SGLang's "disabled") → `None`.
    pub(crate) fn top_k(&self) -> Option<i64> {
        self.top_k
            .as_ref()
            .and_then(json::number_to_int)
            .filter(|&k| k != -1)
            .map(|k| i64::try_from(k).unwrap_or(i64::MAX))
    }

    /// `min_p` as sent.
    pub(crate) fn min_p(&self) -> Option<f64> {
        self.min_p.as_ref().and_then(Number::as_f64)
    }

    /// `frequency_penalty` as sent.
    pub(crate) fn frequency_penalty(&self) -> Option<f64> {
        self.frequency_penalty.as_ref().and_then(Number::as_f64)
    }

    /// `presence_penalty` as sent.
    pub(crate) fn presence_penalty(&self) -> Option<f64> {
        self.presence_penalty.as_ref().and_then(Number::as_f64)
    }

    /// `repetition_penalty` as sent.
    pub(crate) fn repetition_penalty(&self) -> Option<f64> {
        self.repetition_penalty.as_ref().and_then(Number::as_f64)
    }
}

/// `stop` / `stop_regex`: `str | [str]`, normalized to a list as SGLang's `normalize` does.
fn str_or_list(v: Option<&Value>, path: &str) -> Result<Option<Vec<String>>, GenerateError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, s)| json::str_of(s, &format!("{path}.{i}")).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(type_error(path, "a valid string or list of strings")),
    }
}

/// `stop_token_ids`: `[int | null]`; `null` entries are dropped (SGLang `__post_init__`).
fn stop_token_ids(obj: &Obj, path: &str) -> Result<Vec<u32>, GenerateError> {
    let Some(v) = present(obj, "stop_token_ids") else {
        return Ok(Vec::new());
    };
    let mut ids: Vec<u32> = Vec::new();
    for (i, item) in json::list_of(v, path)?.iter().enumerate() {
        if item.is_null() {
            continue;
        }
        let id = int_of(item, &format!("{path}.{i}"))?;
        if let Ok(id) = u32::try_from(id)
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Python's `int(str)` for base 10: surrounding whitespace, one sign, digits with single `_`
/// separators.
fn parse_py_int(s: &str) -> Option<i128> {
    let t = s.trim();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    // Longer than i128 can hold: certainly out of any vocabulary range.
    let v = clean.parse::<i128>().unwrap_or(i128::MAX);
    Some(if neg { -v } else { v })
}

/// `normalize_watermark_request` (`sampling/watermarking/core.py:163-196`), which
/// `SamplingParams.__init__` runs (`sampling_params.py:236`): the shape of a request's watermark.
pub(crate) fn watermark_shape_error(wm: &Value) -> Option<&'static str> {
    let Value::Object(m) = wm else {
        return Some("watermark must be an object");
    };
    if m.keys()
        .any(|k| !matches!(k.as_str(), "enabled" | "key" | "context_window"))
    {
        return Some("watermark contains unknown fields");
    }
    let get = |k: &str| m.get(k).filter(|v| !v.is_null());
    if get("enabled").is_some_and(|v| !v.is_boolean()) {
        return Some("watermark enabled must be a boolean");
    }
    if let Some(key) = get("key") {
        // parse_watermark_key (`watermarking/config.py:44-53`)
        let Some(key) = key.as_str() else {
            return Some("watermark key must be a hex string");
        };
        let digits = if key.to_lowercase().starts_with("0x") {
            key.get(2..).unwrap_or("")
        } else {
            key
        };
        let n = digits.chars().count();
        if !(1..=16).contains(&n) {
            return Some("watermark key must contain 1 to 16 hex digits");
        }
        if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some("watermark key must contain only hex digits");
        }
    }
    if let Some(cw) = get("context_window") {
        let positive = cw.as_i64().is_some_and(|i| i >= 1) || cw.is_u64();
        if !positive {
            return Some("watermark context_window must be a positive integer");
        }
    }
    None
}

/// `resolve_watermark_request` (`watermarking/core.py:199-246`) under a server without
/// `--enable-watermark` (context window 4, no default key, not enforced), as
/// `_validate_watermark_request` runs it after `verify` (`tokenizer_manager.py:213-225`).
pub(crate) fn watermark_resolve_error(wm: &Value) -> Option<&'static str> {
    let m = wm.as_object()?;
    let get = |k: &str| m.get(k).filter(|v| !v.is_null());
    if get("context_window").is_some_and(|v| v.as_i64().is_none_or(|i| i > 4)) {
        return Some(
            "request watermark context_window cannot exceed the server's watermark context_window",
        );
    }
    let enabled = get("enabled").and_then(Value::as_bool);
    if enabled == Some(false) {
        return get("key")
            .is_some()
            .then_some("request watermark key cannot be combined with enabled=false");
    }
    if enabled != Some(true) && get("key").is_none() {
        return Some("request watermark must set enabled or key");
    }
    Some("request watermarking requires the server to enable --enable-watermark")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn verify(sp: Value) -> Result<(), String> {
        verify_with(sp, Some(false))
    }

    fn verify_with(sp: Value, tokenizer: Option<bool>) -> Result<(), String> {
        let obj = sp.as_object().cloned().unwrap_or_default();
        let params =
            SamplingParams::read(&obj, "body.sampling_params").map_err(|e| e.to_string())?;
        params
            .verify(Some(100), tokenizer)
            .map_err(|e| e.public_message().into_owned())
    }

    #[test]
    fn verify_messages_match_sglang() {
        let cases = [
            (
                json!({"temperature": -1}),
                "temperature must be a non-negative finite number, got -1.",
            ),
            (
                json!({"temperature": -0.5}),
                "temperature must be a non-negative finite number, got -0.5.",
            ),
            (json!({"top_p": 0}), "top_p must be in (0, 1], got 0."),
            (json!({"top_p": 1.5}), "top_p must be in (0, 1], got 1.5."),
            (json!({"min_p": 2.0}), "min_p must be in [0, 1], got 2.0."),
            (
                json!({"top_k": 0}),
                "top_k must be -1 (disable) or at least 1, got 0.",
            ),
            (
                json!({"top_k": -2}),
                "top_k must be -1 (disable) or at least 1, got -2.",
            ),
            (
                json!({"frequency_penalty": 3}),
                "frequency_penalty must be in [-2, 2], got 3.",
            ),
            (
                json!({"presence_penalty": -2.5}),
                "presence_penalty must be in [-2, 2], got -2.5.",
            ),
            (
                json!({"repetition_penalty": 0}),
                "repetition_penalty must be in (0, 2] (1.0 = no penalty), got 0.",
            ),
            (
                json!({"min_new_tokens": -1}),
                "min_new_tokens must be in [0, max_new_tokens], got -1.",
            ),
            // Without a tokenizer, normalize refuses any min_new_tokens > 0 before verify's
            // range check.
            (
                json!({"min_new_tokens": 200}),
                "min_new_tokens=200 is unavailable when skip_tokenizer_init=True (requires tokenizer for eos_token_id).",
            ),
            (
                json!({"beam_width": 0}),
                "beam_width must be at least 1, got 0.",
            ),
            (
                json!({"sampling_seed": 9223372036854775808u64}),
                "sampling_seed must be in [-2**63, 2**63 - 1], got 9223372036854775808.",
            ),
            (
                json!({"custom_params": {"__sglang_reasoning_end_token_ids": []}}),
                "request reasoning end token IDs must be a non-empty, vocabulary-bounded list of at most 32 integers",
            ),
            (
                json!({"stop_regex": vec!["a"; 33]}),
                "at most 32 stop_regex patterns are allowed, got 33",
            ),
            (
                json!({"max_new_tokens": -1}),
                "max_new_tokens must be at least 0, got -1.",
            ),
            (
                json!({"logit_bias": {"100": 1.0}}),
                "logit_bias must has keys in [0, 99], got 100.",
            ),
            (
                json!({"logit_bias": {"x": 1.0}}),
                "invalid literal for int() with base 10: 'x'",
            ),
            (
                json!({"regex": "a", "structural_tag": "b"}),
                "Only one of json_schema, regex, ebnf, or structural_tag can be set.",
            ),
            (
                json!({"stop": "x"}),
                "stop=['x'] is unavailable when skip_tokenizer_init=True (requires tokenizer to decode tokens to text for matching).",
            ),
            (
                json!({"stop": ["</search>", "</answer>"], "temperature": -1}),
                "stop=['</search>', '</answer>'] is unavailable when skip_tokenizer_init=True (requires tokenizer to decode tokens to text for matching).",
            ),
            (
                json!({"stop_regex": "a+"}),
                "stop_regex=['a+'] is unavailable when skip_tokenizer_init=True (requires tokenizer to decode tokens to text for matching).",
            ),
        ];
        for (sp, want) in cases {
            assert_eq!(verify(sp.clone()), Err(want.to_owned()), "{sp}");
        }
        for (sp, want) in [
            (
                json!({"min_new_tokens": 200}),
                "min_new_tokens must be in [0, max_new_tokens(128)], got 200.",
            ),
            (
                json!({"min_new_tokens": 5, "max_new_tokens": 4}),
                "min_new_tokens must be in [0, max_new_tokens(4)], got 5.",
            ),
        ] {
            assert_eq!(
                verify_with(sp.clone(), Some(true)),
                Err(want.to_owned()),
                "{sp}"
            );
        }
        // An empty grammar is unset.
        assert_eq!(verify(json!({"regex": "a", "ebnf": ""})), Ok(()));
    }

    #[test]
    fn defaults_and_nulls_pass() {
        for sp in [
            json!({}),
            json!({"temperature": 0, "top_k": 0}),
            json!({"top_k": -1, "stop": null, "stop_token_ids": null, "stop": []}),
            json!({"temperature": null, "top_p": null, "top_k": null, "min_p": null, "n": null, "max_new_tokens": null, "min_new_tokens": null, "ignore_eos": null}),
            json!({"min_new_tokens": 0, "max_new_tokens": null}),
            json!({"logit_bias": {" 5 ": -1.0, "1_0": 2.0}}),
        ] {
            assert_eq!(verify(sp.clone()), Ok(()), "{sp}");
        }
    }

    #[test]
    fn native_only_lists_set_keys_without_a_typed_counterpart() {
        let sp = json!({"stop_regex": "a+", "skip_special_tokens": true,
                        "spaces_between_special_tokens": false, "no_stop_trim": false,
                        "custom_params": {"k": 1}, "stream_interval": null, "temperature": 0.5,
                        "logit_bias": {"5": 1.0}, "regex": "x"});
        let obj = sp.as_object().cloned().unwrap_or_default();
        assert_eq!(
            native_only(&obj),
            [
                "sampling_params.stop_regex",
                "sampling_params.spaces_between_special_tokens",
                "sampling_params.custom_params",
            ]
        );
        let bad = json!({"logit_bias": {"5": "high"}});
        let obj = bad.as_object().cloned().unwrap_or_default();
        assert_eq!(native_only(&obj), ["sampling_params.logit_bias"]);
    }

    #[test]
    fn constraints_follow_sglang() {
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        let lb = logit_bias(&obj(json!({"logit_bias": {" 7 ": -2, "1_0": 0.5}})));
        assert_eq!(
            lb,
            Some(vec![
                LogitBias {
                    token_id: 7,
                    bias: -2.0
                },
                LogitBias {
                    token_id: 10,
                    bias: 0.5
                }
            ])
        );
        // The scheduler's order: json_schema, regex, ebnf, then a non-empty structural_tag.
        assert_eq!(
            structured(&obj(json!({"structural_tag": "t", "ebnf": "g"}))),
            Some(StructuredOutput::Grammar("g".into()))
        );
        assert_eq!(
            structured(&obj(json!({"structural_tag": "", "regex": null}))),
            None
        );
        assert_eq!(
            structured(&obj(json!({"json_schema": {"type": "object"}}))),
            Some(StructuredOutput::JsonSchema(r#"{"type":"object"}"#.into()))
        );
    }

    #[test]
    fn typed_reads() {
        let obj = json!({"max_new_tokens": null, "stop_token_ids": [2, null, 5, 2, -1], "top_k": -1, "sampling_seed": 43})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let p = SamplingParams::read(&obj, "sp").expect("valid");
        assert_eq!(p.max_new_tokens, None);
        assert_eq!(p.stop_token_ids, vec![2, 5]);
        assert_eq!(p.top_k(), None);
        assert_eq!(p.seed, Some(43));
        let bad = json!({"temperature": "hot"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert!(matches!(
            SamplingParams::read(&bad, "sp"),
            Err(GenerateError::Schema { .. })
        ));
    }

    #[test]
    fn watermark_rules_follow_sglang() {
        use serde_json::json;
        for (wm, shape) in [
            (json!(0), Some("watermark must be an object")),
            (json!({"foo": 1}), Some("watermark contains unknown fields")),
            (
                json!({"enabled": 1}),
                Some("watermark enabled must be a boolean"),
            ),
            (
                json!({"key": 5}),
                Some("watermark key must be a hex string"),
            ),
            (
                json!({"key": "0x"}),
                Some("watermark key must contain 1 to 16 hex digits"),
            ),
            (
                json!({"key": "xyz"}),
                Some("watermark key must contain only hex digits"),
            ),
            (
                json!({"context_window": true}),
                Some("watermark context_window must be a positive integer"),
            ),
            (json!({"enabled": true, "key": "0xAB"}), None),
        ] {
            assert_eq!(watermark_shape_error(&wm), shape, "{wm}");
        }
        for (wm, resolved) in [
            (json!({}), Some("request watermark must set enabled or key")),
            (json!({"enabled": false}), None),
            (
                json!({"enabled": false, "key": "ab"}),
                Some("request watermark key cannot be combined with enabled=false"),
            ),
            (
                json!({"context_window": 5}),
                Some(
                    "request watermark context_window cannot exceed the server's watermark context_window",
                ),
            ),
            (
                json!({"enabled": true}),
                Some("request watermarking requires the server to enable --enable-watermark"),
            ),
        ] {
            assert_eq!(watermark_resolve_error(&wm), resolved, "{wm}");
        }
    }
}
