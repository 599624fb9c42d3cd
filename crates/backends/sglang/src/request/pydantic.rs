//! SGLang 0.5.23's pydantic pass over `/generate` bodies, with its exact message.
//!
//! FastAPI binds the body (parsed by `orjson`, `http_server.py:472-480`: integers outside
//! `[-2^63, 2^64)` become floats, as serde_json reads them) to the `GenerateReqInput` dataclass
//! (`managers/io_struct.py:177-420`) in pydantic's lax *python* mode. Every field is validated,
//! in the dataclass's field order (keyword-only `rid`, `session_id`, `http_worker_ipc` last), and
//! every failure is collected; any failure is answered by SGLang's `RequestValidationError`
//! handler (`http_server.py:635-690`) as 400 `{"object":"error","message":…,"type":"Bad
//! Request",…}` with `message = f"{str(exc)} {exc.errors()}"`:
//!
//! ```text
//! 2 validation errors:
//!   {'type': 'string_type', 'loc': ('body', 'rid', 'str'), 'msg': 'Input should be a valid string', 'input': 5}
//!   {'type': 'list_type', 'loc': ('body', 'rid', 'list[str]'), 'msg': 'Input should be a valid list', 'input': 5}
//!
//!   File "…/sglang/srt/entrypoints/http_server.py", line 928, in generate_request
//!     POST /generate [{…}, {…}]
//! ```
//!
//! Unions report one error list per failing choice, the loc tagged with the choice's label
//! (`'list[nullable[str]]'`); lists report every failing index. Lax conversions follow
//! pydantic-core 2: an `int` takes a bool, an integral float strictly inside the `i64` range
//! (`int_parsing_size` outside it) and a numeric string (`' 2 '`, `'1_000'`, `'1.0'`); a `bool`
//! takes `0`/`1`, `0.0`/`1.0` and the usual words; a `float` takes bools and numeric strings; a
//! `str` only a string. `input_ids` has SGLang's own `PlainValidator`
//! (`utils/field_validators.py:40-81`): its `ValueError` texts are reproduced.
//!
//! Deliberate deviation: an error's `input` is printed up to [`INPUT_BUDGET`] bytes (then `...`);
//! SGLang prints it whole, twice, so a 64 MiB bad `input_ids` would make a message of that size.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::OnceLock;

use genfront_format::pyrepr::str_repr;
use serde_json::{Map, Value};

use crate::pyfmt::value_repr;

/// How many bytes of an error's `input` are printed (see the module docs).
pub(crate) const INPUT_BUDGET: usize = 2048;

/// Where FastAPI says the endpoint is (`_format_endpoint_context`): the route function of
/// `generate_request` (`http_server.py:928`), with the file as it sits in an installed wheel.
const ENDPOINT_CONTEXT: &str = "\n  File \"sglang/srt/entrypoints/http_server.py\", line 928, in generate_request\n    POST /generate";

/// A pydantic core schema, as far as `GenerateReqInput` uses them.
#[derive(Debug)]
enum Ty {
    Any,
    Str,
    Int,
    Float,
    Bool,
    List(&'static Ty),
    /// `dict[<keys label>, <values>]`; JSON keys are strings, so only the values are checked.
    Dict(&'static str, &'static Ty),
    Nullable(&'static Ty),
    /// Smart union: the first choice that passes; else every choice's errors, tagged.
    Union(&'static [Ty]),
    Literal(&'static [&'static str]),
    /// `input_ids`' `PlainValidator(validate_optional_list_i64_1d_2d)`.
    InputIds,
    /// `KvHintsEnvelope` in python mode (`union[is-instance, function-after(typed-dict)]`).
    KvEnvelope,
}

use Ty::*;

const STR_OR_LIST: Ty = Nullable(&Union(&[Str, List(&Str)]));
const OPT_STR_LIST_OR_STR: Ty = Nullable(&Union(&[List(&Nullable(&Str)), Str]));
const OPT_INT_LIST_OR_INT: Ty = Nullable(&Union(&[List(&Nullable(&Int)), Int]));
const BOOL_LIST_OR_BOOL: Ty = Nullable(&Union(&[List(&Bool), Bool]));
const INT_LIST_OR_INT: Ty = Nullable(&Union(&[List(&Int), Int]));
const INTS_2D_OR_1D: Ty = Nullable(&Union(&[List(&List(&Int)), List(&Int)]));
const OPT_INT: Ty = Nullable(&Int);
const OPT_STR: Ty = Nullable(&Str);
const DICT_STR_ANY: Ty = Dict("str", &Any);
const DICT_ANY_ANY: Ty = Dict("any", &Any);
const SAMPLING_MODE: Ty = Literal(&["selected", "support"]);
const HIDDEN_ONE: Ty = Union(&[Bool, Literal(&["last"])]);

/// `GenerateReqInput`'s fields in pydantic's order, with their schemas (`io_struct.py:177-420`).
const FIELDS: &[(&str, Ty)] = &[
    ("text", STR_OR_LIST),
    ("input_ids", InputIds),
    (
        "input_embeds",
        Nullable(&Union(&[List(&List(&List(&Float))), List(&List(&Float))])),
    ),
    // The multimodal unions include `Any` (PIL images): every value passes pydantic.
    ("image_data", Any),
    ("video_data", Any),
    ("audio_data", Any),
    (
        "mm_hashes",
        Nullable(&Union(&[List(&Str), List(&List(&Str))])),
    ),
    (
        "mm_content_hashes",
        Nullable(&Union(&[
            List(&Nullable(&Str)),
            List(&List(&Nullable(&Str))),
        ])),
    ),
    ("use_audio_in_video", Bool),
    ("video_config", Nullable(&DICT_STR_ANY)),
    (
        "sampling_params",
        Nullable(&Union(&[List(&DICT_STR_ANY), DICT_STR_ANY])),
    ),
    ("watermark", Any),
    ("return_logprob", BOOL_LIST_OR_BOOL),
    ("logprob_start_len", INT_LIST_OR_INT),
    ("top_logprobs_num", INT_LIST_OR_INT),
    ("token_ids_logprob", INTS_2D_OR_1D),
    ("return_sampling_mask", BOOL_LIST_OR_BOOL),
    (
        "sampling_logprobs_mode",
        Nullable(&Union(&[List(&Nullable(&SAMPLING_MODE)), SAMPLING_MODE])),
    ),
    ("return_text_in_logprobs", Bool),
    ("return_flat_raw_top_logprobs", Bool),
    ("return_flat_raw_output_top_logprobs", Bool),
    ("return_flat_raw_top_logprobs_b64", Bool),
    ("stream", Bool),
    ("log_metrics", Bool),
    (
        "return_hidden_states",
        Union(&[List(&HIDDEN_ONE), Bool, Literal(&["last"])]),
    ),
    ("return_routed_experts", Bool),
    ("routed_experts_start_len", Int),
    ("return_indexer_topk", Bool),
    ("modalities", Nullable(&List(&Str))),
    ("session_params", Nullable(&DICT_STR_ANY)),
    ("lora_path", OPT_STR_LIST_OR_STR),
    ("lora_id", OPT_STR_LIST_OR_STR),
    ("custom_logit_processor", OPT_STR_LIST_OR_STR),
    ("positional_embed_overrides", Any),
    ("bootstrap_host", OPT_STR_LIST_OR_STR),
    ("bootstrap_port", OPT_INT_LIST_OR_INT),
    ("bootstrap_room", OPT_INT_LIST_OR_INT),
    ("bootstrap_pair_key", OPT_STR_LIST_OR_STR),
    ("decode_tp_size", OPT_INT_LIST_OR_INT),
    ("routed_dp_rank", OPT_INT),
    ("data_parallel_rank", OPT_INT),
    ("disagg_prefill_dp_rank", OPT_INT),
    ("routing_key", OPT_STR),
    ("conversation_id", OPT_STR),
    ("background", Bool),
    ("require_reasoning", Bool),
    ("max_thinking_tokens", OPT_INT),
    ("priority", OPT_INT),
    ("extra_key", STR_OR_LIST),
    ("no_logs", Bool),
    ("custom_labels", Nullable(&Dict("str", &Str))),
    ("return_bytes", Bool),
    ("return_entropy", Bool),
    ("return_prompt_token_ids", Bool),
    ("external_trace_header", Nullable(&DICT_STR_ANY)),
    ("received_time", Nullable(&Float)),
    ("need_wait_for_mm_inputs", Nullable(&Bool)),
    // dict[Modality, list[int]]: the enum keys are not modelled.
    ("num_items_assigned", Nullable(&Dict("any", &List(&Int)))),
    ("encoder_urls", Nullable(&List(&Str))),
    ("max_dynamic_patch", OPT_INT),
    ("min_dynamic_patch", OPT_INT),
    ("image_max_dynamic_patch", OPT_INT),
    ("video_max_dynamic_patch", OPT_INT),
    ("images_config", Nullable(&DICT_ANY_ANY)),
    ("mm_processor_kwargs", Nullable(&DICT_ANY_ANY)),
    ("multi_item_delimiter_indices", INTS_2D_OR_1D),
    ("token_indices_to_pool", INTS_2D_OR_1D),
    ("cache_salt", STR_OR_LIST),
    (
        "kv_hints",
        Nullable(&Union(&[
            List(&Nullable(&Union(&[DICT_ANY_ANY, KvEnvelope]))),
            DICT_ANY_ANY,
            KvEnvelope,
        ])),
    ),
    ("rid", STR_OR_LIST),
    ("session_id", OPT_STR),
    ("http_worker_ipc", OPT_STR),
];

/// The label pydantic-core tags a union choice's errors with.
fn label(t: &Ty) -> String {
    match t {
        Any => "any".into(),
        Str => "str".into(),
        Int => "int".into(),
        Float => "float".into(),
        Bool => "bool".into(),
        List(t) => format!("list[{}]", label(t)),
        Dict(k, v) => format!("dict[{k},{}]", label(v)),
        Nullable(t) => format!("nullable[{}]", label(t)),
        Union(c) => format!(
            "union[{}]",
            c.iter().map(label).collect::<Vec<_>>().join(",")
        ),
        Literal(l) => format!(
            "literal[{}]",
            l.iter().map(|s| str_repr(s)).collect::<Vec<_>>().join(",")
        ),
        InputIds => "function-plain[validate_optional_list_i64_1d_2d()]".into(),
        KvEnvelope => KV_ENVELOPE.into(),
    }
}

const KV_ENVELOPE: &str = "json-or-python[json=function-after[build_struct(), KvHintsEnvelope],python=union[is-instance[KvHintsEnvelope],function-after[build_struct(), KvHintsEnvelope]]]";

/// One part of an error's `loc`.
#[derive(Debug, Clone)]
enum Loc {
    Key(String),
    Index(usize),
}

/// One pydantic error (`exc.errors()` entry).
#[derive(Debug, Clone)]
pub(crate) struct PyError {
    kind: &'static str,
    loc: Vec<Loc>,
    msg: String,
    /// `repr(input)`, cut at [`INPUT_BUDGET`].
    input: String,
    /// `repr(ctx)`, when the error has one.
    ctx: Option<String>,
}

impl PyError {
    fn new(kind: &'static str, loc: &[Loc], msg: impl Into<String>, input: &Value) -> Self {
        Self {
            kind,
            loc: loc.to_vec(),
            msg: msg.into(),
            input: value_repr(input, INPUT_BUDGET),
            ctx: None,
        }
    }

    fn with_ctx(mut self, ctx: String) -> Self {
        self.ctx = Some(ctx);
        self
    }

    /// `str(error_dict)`.
    fn repr(&self) -> String {
        let mut out = format!("{{'type': {}, 'loc': (", str_repr(self.kind));
        for (i, l) in self.loc.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match l {
                Loc::Key(k) => out.push_str(&str_repr(k)),
                Loc::Index(n) => {
                    let _ = write!(out, "{n}");
                }
            }
        }
        if self.loc.len() == 1 {
            out.push(',');
        }
        let _ = write!(
            out,
            "), 'msg': {}, 'input': {}",
            str_repr(&self.msg),
            self.input
        );
        if let Some(ctx) = &self.ctx {
            let _ = write!(out, ", 'ctx': {ctx}");
        }
        out.push('}');
        out
    }
}

/// `str(RequestValidationError)` + `" "` + `str(exc.errors())`, as SGLang's handler joins them.
pub(crate) fn message(errors: &[PyError]) -> String {
    let n = errors.len();
    let reprs: Vec<String> = errors.iter().map(PyError::repr).collect();
    let mut exc = format!("{n} validation error{}:\n", if n == 1 { "" } else { "s" });
    for r in &reprs {
        exc.push_str("  ");
        exc.push_str(r);
        exc.push('\n');
    }
    exc.push_str(ENDPOINT_CONTEXT);
    let exc = exc.trim_end();
    format!("{exc} [{}]", reprs.join(", "))
}

/// The errors of the whole body (empty: pydantic binds it). `skip_input_ids`: the ids were
/// already read as a valid id list (the fast path).
pub(crate) fn validate_body(body: &Value, skip_input_ids: bool) -> Vec<PyError> {
    let mut errors = Vec::new();
    if body.is_null() {
        // No body (FastAPI reads an empty body, and JSON `null`, as none).
        errors.push(PyError::new(
            "missing",
            &[Loc::Key("body".into())],
            "Field required",
            body,
        ));
        return errors;
    }
    let Value::Object(obj) = body else {
        errors.push(
            PyError::new(
                "dataclass_type",
                &[Loc::Key("body".into())],
                "Input should be a dictionary or an instance of GenerateReqInput",
                body,
            )
            .with_ctx("{'class_name': 'GenerateReqInput'}".into()),
        );
        return errors;
    };
    validate_obj(obj, skip_input_ids, &mut errors);
    errors
}

/// The one error of a body FastAPI does not read as JSON (`request::media`): the raw bytes are
/// no `GenerateReqInput`, so pydantic's `dataclass_type` with `repr(bytes)` as the `input`, cut
/// at [`INPUT_BUDGET`] like every other `input` (SGLang prints the whole repr, up to 4× the body,
/// twice).
pub(crate) fn bytes_body(body: &[u8]) -> Vec<PyError> {
    vec![PyError {
        kind: "dataclass_type",
        loc: vec![Loc::Key("body".into())],
        msg: "Input should be a dictionary or an instance of GenerateReqInput".into(),
        input: super::media::bytes_repr(body, INPUT_BUDGET),
        ctx: Some("{'class_name': 'GenerateReqInput'}".into()),
    }]
}

/// The one error of a body orjson refused (`request::json_error`): FastAPI's `json_invalid` at
/// `('body', pos)` with input `{}` and `ctx: {'error': msg}` (`fastapi/routing.py`).
pub(crate) fn json_invalid(msg: &str, pos: usize) -> Vec<PyError> {
    vec![PyError {
        kind: "json_invalid",
        loc: vec![Loc::Key("body".into()), Loc::Index(pos)],
        msg: "JSON decode error".into(),
        input: "{}".into(),
        ctx: Some(format!("{{'error': {}}}", str_repr(msg))),
    }]
}

/// [`validate_body`] for a body already known to be an object.
pub(crate) fn validate_obj(
    obj: &Map<String, Value>,
    skip_input_ids: bool,
    errors: &mut Vec<PyError>,
) {
    // The common case, a body that binds: each key the body has is checked against its schema
    // with no `loc` built (one lookup per key sent, not one per field). Only a body with an
    // error takes the loop below, which reports every error in pydantic's field order.
    let fields = field_index();
    let binds = obj.iter().all(|(name, v)| {
        (skip_input_ids && name == "input_ids")
            || fields.get(name.as_str()).is_none_or(|ty| valid(ty, v))
    });
    if binds {
        return;
    }
    for (name, ty) in FIELDS {
        if skip_input_ids && *name == "input_ids" {
            continue;
        }
        if let Some(v) = obj.get(*name) {
            let loc = [Loc::Key("body".into()), Loc::Key((*name).into())];
            check(ty, v, &loc, errors);
        }
    }
}

/// [`FIELDS`] by name.
fn field_index() -> &'static HashMap<&'static str, &'static Ty> {
    static INDEX: OnceLock<HashMap<&'static str, &'static Ty>> = OnceLock::new();
    INDEX.get_or_init(|| FIELDS.iter().map(|(name, ty)| (*name, ty)).collect())
}

/// Whether [`check`] would report no error for `v` (without building any `loc`).
fn valid(ty: &Ty, v: &Value) -> bool {
    match ty {
        Any => true,
        Str => v.is_string(),
        Int => int_error(v).is_none(),
        Float => float_error(v).is_none(),
        Bool => bool_error(v).is_none(),
        List(item) => v
            .as_array()
            .is_some_and(|items| items.iter().all(|x| valid(item, x))),
        Dict(_, values) => v
            .as_object()
            .is_some_and(|m| m.values().all(|x| valid(values, x))),
        Nullable(t) => v.is_null() || valid(t, v),
        Union(choices) => choices.iter().any(|c| valid(c, v)),
        Literal(allowed) => v.as_str().is_some_and(|s| allowed.contains(&s)),
        InputIds => input_ids_error(v).is_none(),
        KvEnvelope => v.is_object(),
    }
}

fn check(ty: &Ty, v: &Value, loc: &[Loc], errors: &mut Vec<PyError>) {
    match ty {
        Any => {}
        Str => {
            if !v.is_string() {
                errors.push(PyError::new(
                    "string_type",
                    loc,
                    "Input should be a valid string",
                    v,
                ));
            }
        }
        Int => {
            if let Some((kind, msg)) = int_error(v) {
                errors.push(PyError::new(kind, loc, msg, v));
            }
        }
        Float => {
            if let Some((kind, msg)) = float_error(v) {
                errors.push(PyError::new(kind, loc, msg, v));
            }
        }
        Bool => {
            if let Some((kind, msg)) = bool_error(v) {
                errors.push(PyError::new(kind, loc, msg, v));
            }
        }
        List(item) => match v {
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    let mut l = loc.to_vec();
                    l.push(Loc::Index(i));
                    check(item, x, &l, errors);
                }
            }
            _ => errors.push(PyError::new(
                "list_type",
                loc,
                "Input should be a valid list",
                v,
            )),
        },
        Dict(_, values) => match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let mut l = loc.to_vec();
                    l.push(Loc::Key(k.clone()));
                    check(values, x, &l, errors);
                }
            }
            _ => errors.push(PyError::new(
                "dict_type",
                loc,
                "Input should be a valid dictionary",
                v,
            )),
        },
        Nullable(t) => {
            if !v.is_null() {
                check(t, v, loc, errors);
            }
        }
        Union(choices) => {
            let mut all = Vec::new();
            for c in *choices {
                let mut l = loc.to_vec();
                l.push(Loc::Key(label(c)));
                let before = all.len();
                check(c, v, &l, &mut all);
                if all.len() == before {
                    return;
                }
            }
            errors.extend(all);
        }
        Literal(allowed) => {
            if !v.as_str().is_some_and(|s| allowed.contains(&s)) {
                let expected = literal_expected(allowed);
                errors.push(
                    PyError::new(
                        "literal_error",
                        loc,
                        format!("Input should be {expected}"),
                        v,
                    )
                    .with_ctx(format!("{{'expected': {}}}", str_repr(&expected))),
                );
            }
        }
        InputIds => {
            if let Some(text) = input_ids_error(v) {
                errors.push(
                    PyError::new("value_error", loc, format!("Value error, {text}"), v)
                        .with_ctx(format!("{{'error': ValueError({})}}", str_repr(&text))),
                );
            }
        }
        KvEnvelope => {
            if !v.is_object() {
                let mut l = loc.to_vec();
                l.push(Loc::Key("is-instance[KvHintsEnvelope]".into()));
                errors.push(
                    PyError::new(
                        "is_instance_of",
                        &l,
                        "Input should be an instance of KvHintsEnvelope",
                        v,
                    )
                    .with_ctx("{'class': 'KvHintsEnvelope'}".into()),
                );
                let mut l = loc.to_vec();
                l.push(Loc::Key(
                    "function-after[build_struct(), KvHintsEnvelope]".into(),
                ));
                errors.push(PyError::new(
                    "dict_type",
                    &l,
                    "Input should be a valid dictionary",
                    v,
                ));
            }
        }
    }
}

/// pydantic's `expected` text of a literal: `'a'`, `'a' or 'b'`, `'a', 'b' or 'c'`.
fn literal_expected(allowed: &[&str]) -> String {
    let reprs: Vec<String> = allowed.iter().map(|s| str_repr(s)).collect();
    match reprs.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

type Fail = Option<(&'static str, &'static str)>;

const INT_TYPE: (&str, &str) = ("int_type", "Input should be a valid integer");
const INT_PARSING: (&str, &str) = (
    "int_parsing",
    "Input should be a valid integer, unable to parse string as an integer",
);

/// pydantic-core's lax `int` in python mode.
fn int_error(v: &Value) -> Fail {
    match v {
        Value::Bool(_) => None,
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                return None;
            }
            let f = n.as_f64().unwrap_or(f64::NAN);
            float_as_int(f)
        }
        Value::String(s) => (!str_is_int(s)).then_some(INT_PARSING),
        _ => Some(INT_TYPE),
    }
}

/// pydantic-core's `float_as_int`.
fn float_as_int(f: f64) -> Fail {
    if !f.is_finite() {
        Some(("finite_number", "Input should be a finite number"))
    } else if f.fract() != 0.0 {
        Some((
            "int_from_float",
            "Input should be a valid integer, got a number with a fractional part",
        ))
    } else if (i64::MIN as f64) < f && f < (i64::MAX as f64) {
        None
    } else {
        Some((
            "int_parsing_size",
            "Unable to parse input string as an integer, exceeded maximum size",
        ))
    }
}

/// Python's digit groups: digits with single `_` between them.
fn digits_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars().all(|c| c.is_ascii_digit() || c == '_')
}

/// A string pydantic reads as an int: stripped, an optional sign, digit groups, and an optional
/// `.` followed only by zeros.
fn str_is_int(s: &str) -> bool {
    let s = s.trim();
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let int_part = match s.split_once('.') {
        Some((i, frac)) => {
            if frac.is_empty() || !frac.chars().all(|c| c == '0') {
                return false;
            }
            i
        }
        None => s,
    };
    digits_ok(int_part)
}

/// A string Python's `float()` reads.
fn str_is_float(s: &str) -> bool {
    let s = s.trim();
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return true;
    }
    let (mant, exp) = match lower.split_once('e') {
        Some((m, e)) => (m, Some(e)),
        None => (lower.as_str(), None),
    };
    if let Some(e) = exp {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        if !digits_ok(e) {
            return false;
        }
    }
    match mant.split_once('.') {
        Some((i, f)) => {
            (!i.is_empty() || !f.is_empty())
                && (i.is_empty() || digits_ok(i))
                && (f.is_empty() || digits_ok(f))
        }
        None => digits_ok(mant),
    }
}

/// pydantic-core's lax `float` in python mode.
fn float_error(v: &Value) -> Fail {
    match v {
        Value::Bool(_) | Value::Number(_) => None,
        Value::String(s) => (!str_is_float(s)).then_some((
            "float_parsing",
            "Input should be a valid number, unable to parse string as a number",
        )),
        _ => Some(("float_type", "Input should be a valid number")),
    }
}

/// pydantic-core's lax `bool` in python mode.
pub(crate) fn lax_bool(v: &Value) -> Option<bool> {
    if bool_error(v).is_some() {
        return None;
    }
    Some(match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() == Some(1.0),
        Value::String(s) => matches!(
            s.to_ascii_lowercase().as_str(),
            "1" | "on" | "t" | "true" | "y" | "yes"
        ),
        _ => false,
    })
}

/// Why pydantic-core's lax `bool` refuses `v`, in python mode.
fn bool_error(v: &Value) -> Fail {
    const PARSING: (&str, &str) = (
        "bool_parsing",
        "Input should be a valid boolean, unable to interpret input",
    );
    const TYPE: (&str, &str) = ("bool_type", "Input should be a valid boolean");
    match v {
        Value::Bool(_) => None,
        // A number is read as an `i64` first (an int past it, or a float that is not an
        // integral value strictly inside it, is the type error), then must be 0 or 1.
        Value::Number(n) => match n.as_i64() {
            Some(0 | 1) => None,
            Some(_) => Some(PARSING),
            None if n.is_u64() => Some(TYPE),
            None => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if float_as_int(f).is_some() {
                    Some(TYPE)
                } else if f == 0.0 || f == 1.0 {
                    None
                } else {
                    Some(PARSING)
                }
            }
        },
        Value::String(s) => {
            let l = s.to_ascii_lowercase();
            (!matches!(
                l.as_str(),
                "0" | "off" | "f" | "false" | "n" | "no" | "1" | "on" | "t" | "true" | "y" | "yes"
            ))
            .then_some(PARSING)
        }
        _ => Some(TYPE),
    }
}

/// Python's `type(v).__name__` of a JSON value.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// `isinstance(v, int)` (bools are ints in Python).
fn is_py_int(v: &Value) -> bool {
    matches!(v, Value::Bool(_)) || matches!(v, Value::Number(n) if n.is_i64() || n.is_u64())
}

/// `validate_list_i64_1d` (`field_validators.py:40-56`): `array("q", v)` refuses a non-int
/// (`TypeError`) and an int outside `i64` (`OverflowError`).
fn list_i64_error(v: &Value) -> Option<String> {
    let Value::Array(items) = v else {
        return Some(match v {
            Value::Null => "must not be None".into(),
            _ => format!("must be list; got {}", type_name(v)),
        });
    };
    let first = items.first()?;
    if !is_py_int(first) {
        return Some(format!("elements must be int; got {}", type_name(first)));
    }
    for x in items {
        if !is_py_int(x) {
            return Some(format!(
                "contains non-int64 element: '{}' object cannot be interpreted as an integer",
                type_name(x)
            ));
        }
        if let Value::Number(n) = x
            && n.as_i64().is_none()
        {
            return Some("contains non-int64 element: int too big to convert".into());
        }
    }
    None
}

/// `validate_optional_list_i64_1d_2d` (`field_validators.py:58-81`).
fn input_ids_error(v: &Value) -> Option<String> {
    let items = match v {
        Value::Null => return None,
        Value::Array(items) => items,
        _ => return Some(format!("must be list or null; got {}", type_name(v))),
    };
    let first = items.first()?;
    if is_py_int(first) {
        return list_i64_error(v);
    }
    if first.is_array() {
        for (i, row) in items.iter().enumerate() {
            if let Some(e) = list_i64_error(row) {
                return Some(format!("row {i}: {e}"));
            }
        }
        return None;
    }
    Some(format!(
        "elements must be int or list; got {}",
        type_name(first)
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errs(body: Value) -> Vec<String> {
        validate_body(&body, false)
            .iter()
            .map(PyError::repr)
            .collect()
    }

    #[test]
    fn union_errors_carry_choice_labels_in_field_order() {
        // rid is keyword-only: pydantic checks it after every positional field.
        let e = errs(json!({"rid": 5, "text": 5, "session_id": 1}));
        assert_eq!(
            e,
            vec![
                "{'type': 'string_type', 'loc': ('body', 'text', 'str'), 'msg': 'Input should be a valid string', 'input': 5}",
                "{'type': 'list_type', 'loc': ('body', 'text', 'list[str]'), 'msg': 'Input should be a valid list', 'input': 5}",
                "{'type': 'string_type', 'loc': ('body', 'rid', 'str'), 'msg': 'Input should be a valid string', 'input': 5}",
                "{'type': 'list_type', 'loc': ('body', 'rid', 'list[str]'), 'msg': 'Input should be a valid list', 'input': 5}",
                "{'type': 'string_type', 'loc': ('body', 'session_id'), 'msg': 'Input should be a valid string', 'input': 1}",
            ]
        );
    }

    #[test]
    fn lax_conversions() {
        assert!(errs(json!({"priority": "7", "stream": 1, "return_logprob": "yes", "received_time": "1e5"})).is_empty());
        assert!(errs(json!({"priority": 1e18, "routed_experts_start_len": " 2 "})).is_empty());
        let e = errs(
            json!({"priority": 1e30, "background": 0.5, "no_logs": 2.0, "max_thinking_tokens": 1.5}),
        );
        assert_eq!(
            e,
            vec![
                "{'type': 'bool_type', 'loc': ('body', 'background'), 'msg': 'Input should be a valid boolean', 'input': 0.5}",
                "{'type': 'int_from_float', 'loc': ('body', 'max_thinking_tokens'), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 1.5}",
                "{'type': 'int_parsing_size', 'loc': ('body', 'priority'), 'msg': 'Unable to parse input string as an integer, exceeded maximum size', 'input': 1e+30}",
                "{'type': 'bool_parsing', 'loc': ('body', 'no_logs'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 2.0}",
            ]
        );
    }

    #[test]
    fn input_ids_plain_validator_texts() {
        for (ids, text) in [
            (json!("x"), "must be list or null; got str"),
            (json!([1.0]), "elements must be int or list; got float"),
            (
                json!([1, null]),
                "contains non-int64 element: 'NoneType' object cannot be interpreted as an integer",
            ),
            // orjson reads 2^64 as a float, as serde_json does.
            (
                json!([1, 18446744073709551616.0]),
                "contains non-int64 element: 'float' object cannot be interpreted as an integer",
            ),
            (
                json!([1, 18446744073709551615u64]),
                "contains non-int64 element: int too big to convert",
            ),
            (json!([[1], 3]), "row 1: must be list; got int"),
            (
                json!([[1], [2.0]]),
                "row 1: elements must be int; got float",
            ),
        ] {
            assert_eq!(input_ids_error(&ids).as_deref(), Some(text), "{ids}");
        }
        // bools are Python ints: the validator passes them (the contract gate refuses them).
        assert_eq!(input_ids_error(&json!([true, 1])), None);
        assert_eq!(input_ids_error(&json!([])), None);
    }

    #[test]
    fn message_is_fastapi_text_plus_error_list() {
        let e = validate_body(&json!([]), false);
        let one = "{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an instance of GenerateReqInput', 'input': [], 'ctx': {'class_name': 'GenerateReqInput'}}";
        assert_eq!(
            message(&e),
            format!("1 validation error:\n  {one}\n{ENDPOINT_CONTEXT} [{one}]")
        );
        let e = validate_body(&json!({"sampling_logprobs_mode": "full"}), false);
        assert_eq!(
            e.iter().map(PyError::repr).collect::<Vec<_>>(),
            [
                "{'type': 'list_type', 'loc': ('body', 'sampling_logprobs_mode', \"list[nullable[literal['selected','support']]]\"), 'msg': 'Input should be a valid list', 'input': 'full'}",
                "{'type': 'literal_error', 'loc': ('body', 'sampling_logprobs_mode', \"literal['selected','support']\"), 'msg': \"Input should be 'selected' or 'support'\", 'input': 'full', 'ctx': {'expected': \"'selected' or 'support'\"}}",
            ]
        );
    }

    #[test]
    fn missing_body() {
        assert_eq!(
            errs(Value::Null),
            ["{'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}"]
        );
    }

    #[test]
    fn lax_bool_values() {
        for (v, b) in [
            (json!(1), Some(true)),
            (json!(0.0), Some(false)),
            (json!("Off"), Some(false)),
            (json!("y"), Some(true)),
            (json!(2), None),
            (json!(" t "), None),
        ] {
            assert_eq!(lax_bool(&v), b, "{v}");
        }
        // Past the i64 range a number is the type error, not the parsing one.
        let e =
            errs(json!({"stream": 9223372036854775808u64, "background": 1.8446744073709552e19}));
        assert!(
            e[0].contains("'bool_type'") && e[1].contains("'bool_type'"),
            "{e:?}"
        );
        let e = errs(json!({"stream": 2.0}));
        assert!(e[0].contains("'bool_parsing'"), "{e:?}");
    }
}
