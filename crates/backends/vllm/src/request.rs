//! Phase *parse*: the body of `POST /inference/v1/generate` read the way FastAPI + pydantic read
//! vLLM's `GenerateRequest` (`token_in_token_out/protocol.py`).
//!
//! The body stays a `serde_json::Map` (client key order, unknown keys included) that later becomes
//! `EngineRequest.native`; typed fields are read from it by reference. Type errors are collected
//! like pydantic collects them (every field, in declaration order) and reported together.

mod fast;
mod json_error;

use genfront_format::GenerateError;
use genfront_protocol::{LogitBias, StructuredOutput};
use http::HeaderMap;
use serde_json::{Map, Value};

use crate::features::{self, Features};
use crate::fields::{Fields, int};
use crate::schema::{
    Issue, Loc, PyInt, child, json_decode_error, loc, schema_error, schema_error_text, to_bool,
    to_float, to_int, to_str,
};
use crate::validate;
use crate::{
    Carry::{Inert, NativeOnly, Owned, Rendered, Typed},
    SchemaKey, Unset,
    Unset::{Empty, Zero},
    key,
};

/// Every top-level key of vLLM 0.33.0's `GenerateRequest` (`token_in_token_out/protocol.py`)
/// and how it reaches a non-vLLM engine; `sampling_params` holds [`SAMPLING_KEYS`]. The
/// projection records the set [`Carry::NativeOnly`](crate::Carry::NativeOnly) keys from this
/// list, so a key added here is refused on another engine until it is carried.
pub const REQUEST_KEYS: &[SchemaKey] = &[
    key("request_id", Owned),
    key("token_ids", Typed),
    // Filled by `/render` for `return_token_offsets`; generate does not read them.
    key("token_offsets", Inert),
    key("features", NativeOnly(Empty)),
    key("content_parts", NativeOnly(Empty)),
    key("sampling_params", Typed),
    // The base model (nothing to carry) or a LoRA adapter (`RoutingHints::lora`).
    key("model", Typed),
    key("reasoning_ended", NativeOnly(Empty)),
    key("reasoning_parser_kwargs", NativeOnly(Empty)),
    key("return_token_ids", Rendered),
    // `"text"`: the text shapes are rendered from the engine's own text (an engine with a
    // tokenizer detokenizes anyway); refused by the format for an engine without one.
    key("output_mode", Rendered),
    // Read only for `output_mode="derender"`, which is refused.
    key("parse_context", Inert),
    key("stream", Owned),
    key("stream_options", Owned),
    key("cache_salt", Typed),
    key("priority", Typed),
    // `EngineRequest::handoff`; an SGLang engine refuses it by name.
    key("kv_transfer_params", Typed),
    key("ec_transfer_params", NativeOnly(Empty)),
];

/// Every public key of vLLM 0.33.0's `SamplingParams` (`sampling_params.py`) and how it reaches
/// a non-vLLM engine. Typed: the limits, penalties and sampling knobs, `stop` strings (an engine
/// with a tokenizer matches them), the logprob options, `logit_bias`
/// ([`genfront_protocol::Constraints::logit_bias`]) and `structured_outputs`
/// ([`STRUCTURED_OUTPUT_KEYS`]).
pub const SAMPLING_KEYS: &[SchemaKey] = &[
    key("n", Typed),
    key("presence_penalty", Typed),
    key("frequency_penalty", Typed),
    key("repetition_penalty", Typed),
    key("temperature", Typed),
    key("top_p", Typed),
    key("top_k", Typed),
    key("min_p", Typed),
    key("seed", Typed),
    key("stop", Typed),
    key("stop_token_ids", Typed),
    key("ignore_eos", Typed),
    key("max_tokens", Typed),
    key("min_tokens", Typed),
    key("logprobs", Typed),
    key("prompt_logprobs", Typed),
    key("detokenize", NativeOnly(Unset::True)),
    key("skip_special_tokens", NativeOnly(Unset::True)),
    key("spaces_between_special_tokens", NativeOnly(Unset::True)),
    key("include_stop_str_in_output", NativeOnly(Empty)),
    // The server sets it from `stream` (`serve_tokens`).
    key("output_kind", Inert),
    key("stream_interval", NativeOnly(Empty)),
    key("skip_clone", NativeOnly(Empty)),
    key("output_text_buffer_length", NativeOnly(Zero)),
    key("watermarking", NativeOnly(Empty)),
    key("structured_outputs", Typed),
    key("logit_bias", Typed),
    key("allowed_token_ids", NativeOnly(Empty)),
    key("extra_args", NativeOnly(Empty)),
    key("bad_words", NativeOnly(Empty)),
    key("skip_reading_prefix_cache", NativeOnly(Empty)),
    key("thinking_token_budget", NativeOnly(Empty)),
    key("repetition_detection", NativeOnly(Empty)),
    // Effective only with routed experts on (`--enable-return-routed-experts`), as on vLLM.
    key("routed_experts_prompt_start", Typed),
    key("trace_decode_token_ids", NativeOnly(Empty)),
    key("prompt_logprob_token_ids", NativeOnly(Empty)),
    key("prompt_logprob_start", Typed),
    key("logprob_token_ids", Typed),
    key("flat_logprobs", NativeOnly(Empty)),
];

/// The keys of `StructuredOutputsParams`: the constraint kinds SGLang shares are typed
/// ([`genfront_protocol::StructuredOutput`]: `json` → JSON schema, `regex`, `grammar` → EBNF,
/// `structural_tag`); `choice`, `json_object` and the options have no SGLang counterpart.
pub const STRUCTURED_OUTPUT_KEYS: &[SchemaKey] = &[
    key("json", Typed),
    key("regex", Typed),
    key("choice", NativeOnly(Empty)),
    key("grammar", Typed),
    key("json_object", NativeOnly(Empty)),
    key("structural_tag", Typed),
    key("disable_fallback", NativeOnly(Empty)),
    key("disable_any_whitespace", NativeOnly(Empty)),
    key("disable_additional_properties", NativeOnly(Empty)),
    key("whitespace_pattern", NativeOnly(Empty)),
];

fn set_keys<'a>(
    table: &'static [SchemaKey],
    obj: &'a Map<String, Value>,
) -> impl Iterator<Item = &'a String> + 'a {
    obj.iter()
        .filter_map(move |(k, v)| match table.iter().find(|s| s.key == k) {
            Some(SchemaKey {
                carry: NativeOnly(unset),
                ..
            }) if !unset.is_unset(v) => Some(k),
            _ => None,
        })
}

/// The set keys of a request body that have no typed counterpart, as dotted paths in body order
/// ([`EngineRequest::native_only`](genfront_protocol::EngineRequest::native_only)), plus
/// `sampling_params.logit_bias` when an entry cannot be carried typed. Keys outside the schema
/// are not listed.
pub(crate) fn native_only(map: &Map<String, Value>) -> Vec<String> {
    let mut out: Vec<String> = set_keys(REQUEST_KEYS, map).cloned().collect();
    if let Some(Value::Object(sp)) = map.get("sampling_params") {
        for (k, v) in sp {
            if k == "structured_outputs"
                && let Value::Object(so) = v
            {
                out.extend(
                    set_keys(STRUCTURED_OUTPUT_KEYS, so)
                        .map(|k| format!("sampling_params.structured_outputs.{k}")),
                );
            } else if k == "logit_bias" && logit_bias(sp).is_none() {
                out.push("sampling_params.logit_bias".to_owned());
            } else if set_keys(SAMPLING_KEYS, sp).any(|s| s == k) {
                out.push(format!("sampling_params.{k}"));
            }
        }
    }
    out
}

/// `sampling_params.logit_bias` as typed entries in the client's order (pydantic's lax int keys
/// and float values); `None` when an entry is not a token id and a finite number.
pub(crate) fn logit_bias(sp: &Map<String, Value>) -> Option<Vec<LogitBias>> {
    let Some(Value::Object(m)) = sp.get("logit_bias") else {
        return Some(Vec::new());
    };
    m.iter()
        .map(|(k, v)| {
            let id = to_int(&Value::String(k.clone())).ok()?.get();
            Some(LogitBias {
                token_id: u32::try_from(id).ok()?,
                bias: to_float(v).ok().filter(|b| b.is_finite())?,
            })
        })
        .collect()
}

/// The constraint of `sampling_params.structured_outputs` in typed form (`json` as JSON text
/// when given as a dict); `None` for none or for a kind SGLang does not share.
pub(crate) fn structured(sp: &Map<String, Value>) -> Option<StructuredOutput> {
    let so = sp.get("structured_outputs")?.as_object()?;
    let text = |key: &str| {
        so.get(key).filter(|v| !v.is_null()).map(|v| match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        })
    };
    text("json")
        .map(StructuredOutput::JsonSchema)
        .or_else(|| text("regex").map(StructuredOutput::Regex))
        .or_else(|| text("grammar").map(StructuredOutput::Grammar))
        .or_else(|| text("structural_tag").map(StructuredOutput::StructuralTag))
}

/// `stream_options` (`StreamOptions` in `generate/base/protocol.py`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StreamOptions {
    /// Send a usage-only chunk before `[DONE]`.
    pub include_usage: bool,
    /// Put usage on every chunk.
    pub continuous_usage_stats: bool,
}

/// `sampling_params` (vLLM `SamplingParams`), the keys genfront reads. Defaults are vLLM's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sampling {
    pub n: PyInt,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    pub repetition_penalty: f64,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: PyInt,
    pub min_p: f64,
    pub seed: Option<PyInt>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<PyInt>,
    pub ignore_eos: bool,
    /// `None` when omitted *or* explicitly null (`max_tokens_provided` tells which).
    pub max_tokens: Option<PyInt>,
    /// Whether the client sent the `max_tokens` key (`is_sampling_param_provided`).
    pub max_tokens_provided: bool,
    pub min_tokens: PyInt,
    pub logprobs: Option<PyInt>,
    pub prompt_logprobs: Option<PyInt>,
    /// `prompt_logprob_token_ids` when sent and not null: its shape and id range.
    pub prompt_logprob_token_ids: Option<PromptIdsShape>,
    pub prompt_logprob_start: Option<PyInt>,
    pub logprob_token_ids: Option<Vec<PyInt>>,
    pub detokenize: bool,
    pub stream_interval: Option<PyInt>,
    pub bad_words: Vec<String>,
    pub thinking_token_budget: Option<PyInt>,
    /// `trace_decode_token_ids` when sent and not null.
    pub trace_decode_token_ids: Option<Vec<PyInt>>,
    /// Whether `repetition_detection` is set (not null).
    pub repetition_detection: bool,
    pub routed_experts_prompt_start: PyInt,
    pub logit_bias_ids: Vec<PyInt>,
    pub allowed_token_ids: Option<Vec<PyInt>>,
    /// Some integer in the params does not fit msgpack's 64-bit range.
    pub overflow: bool,
    /// Some integer in a non-empty `extra_args` does not fit it (`_verify_extra_args`).
    pub extra_args_overflow: bool,
    /// `structured_outputs`: how many constraint kinds are set, and the dict's Python repr.
    pub structured_outputs: Option<(usize, String)>,
    /// The `VLLMValidationError` of `RepetitionDetectionParams.__post_init__`, which aborts the
    /// whole request (pydantic does not catch it).
    pub repetition_error: Option<&'static str>,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            n: PyInt::new(1),
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: PyInt::new(0),
            min_p: 0.0,
            seed: None,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            max_tokens: Some(PyInt::new(16)),
            max_tokens_provided: false,
            min_tokens: PyInt::new(0),
            logprobs: None,
            prompt_logprobs: None,
            prompt_logprob_token_ids: None,
            prompt_logprob_start: None,
            logprob_token_ids: None,
            detokenize: true,
            stream_interval: None,
            bad_words: Vec::new(),
            thinking_token_budget: None,
            trace_decode_token_ids: None,
            repetition_detection: false,
            routed_experts_prompt_start: PyInt::new(0),
            logit_bias_ids: Vec::new(),
            allowed_token_ids: None,
            overflow: false,
            extra_args_overflow: false,
            structured_outputs: None,
            repetition_error: None,
        }
    }
}

/// The shape and id range of `sampling_params.prompt_logprob_token_ids`, for the checks of
/// `SamplingParams._validate_logprobs` (`sampling_params.py:983-1048`) and the input
/// processor's row count (`v1/engine/input_processor.py:464-475`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PromptIdsShape {
    /// Number of rows.
    pub rows: usize,
    /// The longest row (`num_ids`).
    pub width: usize,
    /// Some row is shorter than `width` (numpy pads it with -1).
    pub padded: bool,
    /// Smallest and largest id sent (`None` when no row holds an id).
    pub lo: Option<i128>,
    /// See `lo`.
    pub hi: Option<i128>,
}

/// The typed view of a `GenerateRequest` body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GenerateRequest {
    pub request_id: Option<String>,
    /// Prompt ids, clamped into `u32` (out-of-range ids are caught by `max_token_id`).
    pub token_ids: Vec<u32>,
    /// The largest prompt id as sent (for the out-of-vocabulary check).
    pub max_token_id: PyInt,
    pub features: Option<Features>,
    pub content_parts: bool,
    pub sampling: Sampling,
    pub model: Option<String>,
    pub return_token_ids: bool,
    pub output_mode: String,
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub cache_salt: Option<String>,
    pub priority: i64,
    pub ec_transfer_params: bool,
    /// Some integer in `kv_transfer_params` / `ec_transfer_params` does not fit 64 bits.
    pub overflow: bool,
}

// === body decoding ===

/// FastAPI's body handling: JSON is decoded when the `Content-Type` is absent or JSON-like;
/// then vLLM's `validate_json_request` demands exactly `application/json`; an empty body is a
/// missing body; a non-object body fails model validation.
///
/// # Errors
/// The `Bad Request` schema error vLLM sends for each case.
pub(crate) fn decode_body(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Map<String, Value>, GenerateError> {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase());
    // FastAPI 0.136's `strict_content_type` (`fastapi/routing.py:411-425`): without a
    // `Content-Type` the body is not parsed at all, so any body — valid JSON or not — meets the
    // route's `validate_json_request` (`api_router.py:47`) below: "Unsupported Media Type".
    let jsonish = match &content_type {
        None => false,
        Some(ct) => {
            let mime = ct.split(';').next().unwrap_or("").trim();
            let (main, sub) = mime.split_once('/').unwrap_or((mime, ""));
            main == "application" && (sub == "json" || sub.ends_with("+json"))
        }
    };
    let mut parsed: Option<Value> = None;
    if !body.is_empty() && jsonish {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => parsed = Some(v),
            Err(e) => {
                // Python's own message and position (`request::json_error`); a body Python
                // would take but serde cannot keeps the serde-derived text.
                let (msg, pos) = match json_error::locate(body) {
                    json_error::Located::Invalid(msg, pos) => (msg, pos),
                    json_error::Located::Undecodable => return Err(json_error::parsing_the_body()),
                    json_error::Located::Valid => {
                        let decoded = json_decode_error(&e, body);
                        (decoded.msg, decoded.pos)
                    }
                };
                let mut issue = Issue::new(
                    "json_invalid",
                    vec![Loc::from("body"), Loc::Idx(pos)],
                    "JSON decode error",
                    &Value::Object(Map::new()),
                );
                issue.ctx = Some(format!("{{'error': {}}}", crate::pyfmt::py_str(msg)));
                return Err(schema_error(&[issue]));
            }
        }
    }
    let media = content_type
        .as_deref()
        .map(|ct| ct.split(';').next().unwrap_or(""))
        .unwrap_or("");
    if media != "application/json" {
        return Err(schema_error_text(
            "Unsupported Media Type: Only 'application/json' is allowed",
        ));
    }
    match parsed {
        // An empty body, or JSON `null`: FastAPI sees no body (`missing`).
        None | Some(Value::Null) => Err(schema_error(&[Issue::missing(
            loc(["body".into()]),
            &Value::Null,
        )])),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(schema_error(&[Issue::new(
            "model_attributes_type",
            loc(["body".into()]),
            "Input should be a valid dictionary or object to extract fields from",
            &other,
        )])),
    }
}

// === GenerateRequest ===

/// The body's fast path ([`fast`]): for a body [`decode_body`] would take as a JSON object (an
/// exact `application/json` type), the object with `token_ids: null` and the ids read straight
/// into `Vec<u32>`, for [`parse_with_ids`]. `None`: decode the whole body with [`decode_body`].
pub(crate) fn decode_fast(
    headers: &HeaderMap,
    body: &[u8],
) -> Option<(Map<String, Value>, Vec<u32>)> {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())?;
    if content_type.split(';').next() != Some("application/json") {
        return None;
    }
    fast::parse(body)
}

/// The native body of `r` with the typed ids in its `token_ids: null` placeholder, as the vLLM
/// engine client sends it (tests compare it with the client's body).
#[cfg(test)]
pub(crate) fn native_with_ids(r: &genfront_protocol::EngineRequest) -> Value {
    let mut body = r.native.body.clone();
    if body.get("token_ids").is_some_and(Value::is_null) {
        body["token_ids"] = serde_json::json!(r.token_ids);
    }
    body
}

/// Validate `body` as vLLM's `GenerateRequest`, running `SamplingParams.__post_init__` and the
/// model validators in vLLM's order. `fast_ids`: the prompt ids the fast path read
/// ([`decode_fast`]: non-empty, each a `u32`), `map` then holding `token_ids: null`; `None`: the
/// ids are read from `map`.
///
/// # Errors
/// A `Bad Request` schema error for type errors and validator `ValueError`s, or the
/// `BadRequestError` of a `SamplingParams` check (which aborts parsing like the exception does).
/// A caller on the fast path re-runs a failing request on the full path for the exact message
/// (some print the client's input).
pub(crate) fn parse_with_ids(
    map: &Map<String, Value>,
    fast_ids: Option<Vec<u32>>,
) -> Result<GenerateRequest, GenerateError> {
    // `mode="before"` validator: runs on the raw dict, before any field.
    if let Some(salt) = map.get("cache_salt").filter(|v| !v.is_null()) {
        validate::cache_salt(salt)?;
    }
    let mut issues = Vec::new();
    let mut f = Fields {
        map,
        base: loc(["body".into()]),
        issues: &mut issues,
    };

    let request_id = f.with("request_id", |v| to_str(v).map(str::to_owned));
    let (token_ids, max_token_id) = match fast_ids {
        Some(ids) => {
            let max = ids.iter().copied().max().unwrap_or(0);
            (ids, PyInt::new(i128::from(max)))
        }
        None => parse_token_ids(&mut f),
    };
    parse_token_offsets(&mut f);
    let features = match f.get("features") {
        None | Some(Value::Null) => None,
        Some(v) => features::parse(v, f.issues),
    };
    let content_parts = match f.get("content_parts") {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => {
            // Each part is a typed dict: a non-object is `dict_type` at its index.
            let at = child(&f.base, "content_parts");
            for (i, item) in items.iter().enumerate().filter(|(_, v)| !v.is_object()) {
                f.issues.push(Issue::new(
                    "dict_type",
                    child(&at, i),
                    "Input should be a valid dictionary",
                    item,
                ));
            }
            !items.is_empty()
        }
        Some(other) => {
            f.fail(
                "content_parts",
                ("list_type", "Input should be a valid list"),
                other,
            );
            false
        }
    };
    let sampling = match f.required("sampling_params") {
        None => None,
        Some(Value::Object(sp)) => {
            let before = f.issues.len();
            let base = child(&f.base, "sampling_params");
            let mut sampling = parse_sampling(sp, base, f.issues);
            // `StructuredOutputsParams.__post_init__` (field 30) raises `VLLMValidationError`
            // while the field is built, when its own fields are valid: like the repetition
            // error (field 39) it aborts the request, whatever pydantic had collected.
            let so_issue = f.issues[before..].iter().any(|i| {
                i.loc
                    .iter()
                    .skip_while(|l| **l != Loc::Key("sampling_params".into()))
                    .nth(1)
                    .is_some_and(|l| *l == Loc::Key("structured_outputs".into()))
            });
            if !so_issue && let Some(error) = validate::structured_outputs_refusal(&sampling) {
                return Err(error);
            }
            if let Some(message) = sampling.repetition_error {
                return Err(crate::errors::bad_request(message));
            }
            if f.issues.len() > before {
                f.issues.insert(before, sampling_instance_issue(sp));
            } else {
                // `SamplingParams.__post_init__` raises `VLLMValidationError`, which pydantic
                // does not catch: it aborts validation of the whole request.
                validate::post_init(&mut sampling)?;
            }
            Some(sampling)
        }
        Some(other) => {
            f.issues.push(sampling_instance_issue(other));
            f.fail(
                "sampling_params",
                ("dict_type", "Input should be a valid dictionary"),
                other,
            );
            None
        }
    };
    let model = f.opt("model", |v| to_str(v).map(str::to_owned));
    f.opt("reasoning_ended", to_bool);
    parse_reasoning_parser_kwargs(&mut f);
    let return_token_ids = f.opt("return_token_ids", to_bool).unwrap_or(false);
    let output_mode = match f.get("output_mode") {
        None => "tokens".to_owned(),
        Some(Value::String(m)) if OUTPUT_MODES.contains(&m.as_str()) => m.clone(),
        Some(other) => {
            let mut issue = Issue::new(
                "literal_error",
                child(&f.base, "output_mode"),
                "Input should be 'tokens', 'text' or 'derender'",
                other,
            );
            issue.ctx = Some(r#"{'expected': "'tokens', 'text' or 'derender'"}"#.to_owned());
            f.issues.push(issue);
            "tokens".to_owned()
        }
    };
    parse_parse_context(&mut f);
    let stream = f.opt("stream", to_bool).unwrap_or(false);
    let stream_options = parse_stream_options(&mut f);
    let cache_salt = f.opt("cache_salt", |v| to_str(v).map(str::to_owned));
    let priority = f
        .with("priority", |v| {
            let p = to_int(v)?;
            if p.get() < i128::from(i64::MIN) {
                Err((
                    "greater_than_equal",
                    "Input should be greater than or equal to -9223372036854775808",
                ))
            } else if p.get() > i128::from(i64::MAX) {
                Err((
                    "less_than_equal",
                    "Input should be less than or equal to 9223372036854775807",
                ))
            } else {
                Ok(p.get() as i64)
            }
        })
        .unwrap_or(0);
    let kv = f.opt_dict("kv_transfer_params");
    let ec = f.opt_dict("ec_transfer_params");
    let overflow = kv.is_some_and(|m| m.values().any(has_overflow))
        || ec.is_some_and(|m| m.values().any(has_overflow));
    let ec_transfer_params = ec.is_some_and(|m| !m.is_empty());

    if !issues.is_empty() {
        return Err(schema_error(&issues));
    }
    let request = GenerateRequest {
        request_id,
        token_ids,
        max_token_id,
        features,
        content_parts,
        sampling: sampling.unwrap_or_default(),
        model,
        return_token_ids,
        output_mode,
        stream,
        stream_options,
        cache_salt,
        priority,
        ec_transfer_params,
        overflow,
    };
    // `mode="after"` model validators, in declaration order.
    if let Err(message) = validate::model_validators(&request) {
        return Err(schema_error(&[Issue::value_error(
            loc(["body".into()]),
            &message,
            map,
        )]));
    }
    Ok(request)
}

/// `OutputMode = Literal["tokens", "text", "derender"]` (`token_in_token_out/protocol.py:49`).
const OUTPUT_MODES: &[&str] = &["tokens", "text", "derender"];

/// `token_offsets: list[tuple[int, int]] | None` (`protocol.py:240`), type-checked only (generate
/// does not read it): an item that is not a list is `tuple_type` (a string is not a tuple here),
/// a short one `missing` at its absent index, a long one `too_long`.
fn parse_token_offsets(f: &mut Fields<'_, '_>) {
    let Some(v) = f.get("token_offsets").filter(|v| !v.is_null()) else {
        return;
    };
    let Some(items) = v.as_array() else {
        f.fail(
            "token_offsets",
            ("list_type", "Input should be a valid list"),
            v,
        );
        return;
    };
    let base = child(&f.base, "token_offsets");
    for (i, item) in items.iter().enumerate() {
        let at = child(&base, i);
        let Some(pair) = item.as_array() else {
            f.issues.push(Issue::new(
                "tuple_type",
                at,
                "Input should be a valid tuple",
                item,
            ));
            continue;
        };
        if pair.len() > 2 {
            let mut issue = Issue::new(
                "too_long",
                at,
                format!(
                    "Tuple should have at most 2 items after validation, not {}",
                    pair.len()
                ),
                item,
            );
            issue.ctx = Some(format!(
                "{{'field_type': 'Tuple', 'max_length': 2, 'actual_length': {}}}",
                pair.len()
            ));
            f.issues.push(issue);
            continue;
        }
        for (j, x) in pair.iter().enumerate() {
            if let Err((kind, msg)) = to_int(x) {
                f.issues.push(Issue::new(kind, child(&at, j), msg, x));
            }
        }
        for j in pair.len()..2 {
            f.issues.push(Issue::missing(child(&at, j), item));
        }
    }
}

/// A nested pydantic model that is not a dict: `model_type` naming the class.
/// FastAPI validates with `from_attributes`, so a non-dict is `model_attributes_type`.
fn model_type_issue(f: &mut Fields<'_, '_>, key: &str, _class: &str, input: &Value) {
    f.issues.push(Issue::new(
        "model_attributes_type",
        child(&f.base, key),
        MODEL_ATTRIBUTES_MSG,
        input,
    ));
}

/// pydantic's `model_attributes_type` message.
const MODEL_ATTRIBUTES_MSG: &str =
    "Input should be a valid dictionary or object to extract fields from";

/// `reasoning_parser_kwargs: ReasoningParserKwargs | None` (`protocol.py:211-218`, `extra="forbid"`,
/// one field `chat_template_kwargs: dict[str, Any]`).
fn parse_reasoning_parser_kwargs(f: &mut Fields<'_, '_>) {
    let key = "reasoning_parser_kwargs";
    let m = match f.get(key) {
        None | Some(Value::Null) => return,
        Some(Value::Object(m)) => m,
        Some(other) => return model_type_issue(f, key, "ReasoningParserKwargs", other),
    };
    let mut inner = Fields {
        map: m,
        base: child(&f.base, key),
        issues: &mut *f.issues,
    };
    if let Some(v) = inner.get("chat_template_kwargs")
        && !v.is_object()
    {
        inner.fail(
            "chat_template_kwargs",
            ("dict_type", "Input should be a valid dictionary"),
            v,
        );
    }
    for (k, v) in m {
        if k != "chat_template_kwargs" {
            inner.fail(k, ("extra_forbidden", "Extra inputs are not permitted"), v);
        }
    }
}

/// `parse_context: ParseContext | None` (`protocol.py:52-75`, `extra="allow"`): the scalar fields
/// are type-checked in declaration order (`tools` and `tool_choice` are left to the engine, which
/// reads them only for `output_mode="derender"`).
fn parse_parse_context(f: &mut Fields<'_, '_>) {
    let key = "parse_context";
    let m = match f.get(key) {
        None | Some(Value::Null) => return,
        Some(Value::Object(m)) => m,
        Some(other) => return model_type_issue(f, key, "ParseContext", other),
    };
    let mut inner = Fields {
        map: m,
        base: child(&f.base, key),
        issues: &mut *f.issues,
    };
    inner.opt("parallel_tool_calls", to_bool);
    inner.with("include_reasoning", to_bool);
    if let Some(v) = inner.get("chat_template_kwargs")
        && !v.is_object()
    {
        inner.fail(
            "chat_template_kwargs",
            ("dict_type", "Input should be a valid dictionary"),
            v,
        );
    }
    if let Some(v) = inner.get("history_tool_call_cnt") {
        match to_int(v) {
            Err(fail) => inner.fail("history_tool_call_cnt", fail, v),
            Ok(n) if n.get() < 0 => {
                let mut issue = Issue::new(
                    "greater_than_equal",
                    child(&inner.base, "history_tool_call_cnt"),
                    "Input should be greater than or equal to 0",
                    v,
                );
                issue.ctx = Some("{'ge': 0}".to_owned());
                inner.issues.push(issue);
            }
            Ok(_) => {}
        }
    }
}

/// The first error of a failing `sampling_params`: the bridge of `v1/serial_utils.py:586-593`
/// makes the field a union of `is_instance(SamplingParams)` and the typed dict, and pydantic
/// reports every branch's errors, the `is_instance_of` one first (its location cleans to
/// `body.sampling_params`).
fn sampling_instance_issue<I: crate::pyfmt::PyRepr + ?Sized>(input: &I) -> Issue {
    let mut issue = Issue::new(
        "is_instance_of",
        loc(["body".into(), "sampling_params".into()]),
        "Input should be an instance of SamplingParams",
        input,
    );
    issue.ctx = Some("{'class': 'SamplingParams'}".to_owned());
    issue
}

fn parse_token_ids(f: &mut Fields<'_, '_>) -> (Vec<u32>, PyInt) {
    let mut max = PyInt::new(0);
    let Some(v) = f.required("token_ids") else {
        return (Vec::new(), max);
    };
    let Some(items) = v.as_array() else {
        f.fail(
            "token_ids",
            ("list_type", "Input should be a valid list"),
            v,
        );
        return (Vec::new(), max);
    };
    let base = child(&f.base, "token_ids");
    let mut ids = Vec::with_capacity(items.len());
    let (mut bad, mut negative) = (false, false);
    for (i, item) in items.iter().enumerate() {
        match to_int(item) {
            Ok(t) => {
                negative |= t.get() < 0;
                if t.get() > max.get() {
                    max = t;
                }
                ids.push(u32::try_from(t.get()).unwrap_or(u32::MAX));
            }
            Err((kind, msg)) => {
                bad = true;
                f.issues.push(Issue::new(kind, child(&base, i), msg, item));
            }
        }
    }
    if bad {
        return (Vec::new(), max);
    }
    if ids.is_empty() {
        let mut issue = Issue::new(
            "too_short",
            base,
            "List should have at least 1 item after validation, not 0",
            v,
        );
        issue.ctx = Some("{'field_type': 'List', 'min_length': 1, 'actual_length': 0}".to_owned());
        f.issues.push(issue);
        return (Vec::new(), max);
    }
    if negative {
        f.issues.push(Issue::value_error(
            base,
            "token_ids must not contain negative values",
            v,
        ));
        return (Vec::new(), max);
    }
    (ids, max)
}

fn parse_stream_options(f: &mut Fields<'_, '_>) -> Option<StreamOptions> {
    let m = f.opt_model(
        "stream_options",
        ("model_attributes_type", MODEL_ATTRIBUTES_MSG, None),
    )?;
    let mut inner = Fields {
        map: m,
        base: child(&f.base, "stream_options"),
        issues: &mut *f.issues,
    };
    Some(StreamOptions {
        include_usage: inner.opt("include_usage", to_bool).unwrap_or(false),
        continuous_usage_stats: inner
            .opt("continuous_usage_stats", to_bool)
            .unwrap_or(false),
    })
}

/// The constraint kinds of `StructuredOutputsParams`; exactly one must be set.
const STRUCTURED_OUTPUT_KINDS: &[&str] = &[
    "json",
    "regex",
    "choice",
    "grammar",
    "json_object",
    "structural_tag",
];

/// Keys of `SamplingParams` typed as `float`: their values are floats in Python, so large values
/// are not integers that could overflow msgpack.
const FLOAT_KEYS: &[&str] = &[
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "top_p",
    "min_p",
    "logit_bias",
];

fn parse_sampling(sp: &Map<String, Value>, base: Vec<Loc>, issues: &mut Vec<Issue>) -> Sampling {
    let d = Sampling::default();
    let first_issue = issues.len();
    let mut f = Fields {
        map: sp,
        base,
        issues,
    };
    let mut s = Sampling {
        n: f.req("n", d.n, int),
        presence_penalty: f.req("presence_penalty", d.presence_penalty, to_float),
        frequency_penalty: f.req("frequency_penalty", d.frequency_penalty, to_float),
        repetition_penalty: f.req("repetition_penalty", d.repetition_penalty, to_float),
        temperature: f.req("temperature", d.temperature, to_float),
        top_p: f.req("top_p", d.top_p, to_float),
        top_k: f.req("top_k", d.top_k, int),
        min_p: f.req("min_p", d.min_p, to_float),
        seed: f.opt("seed", int),
        stop: parse_stop(&mut f),
        stop_token_ids: f.int_list("stop_token_ids", true).unwrap_or_default(),
        ignore_eos: f.req("ignore_eos", d.ignore_eos, to_bool),
        max_tokens: match f.get("max_tokens") {
            None => d.max_tokens,
            Some(Value::Null) => None,
            Some(_) => f.with("max_tokens", int),
        },
        max_tokens_provided: sp.contains_key("max_tokens"),
        min_tokens: f.req("min_tokens", d.min_tokens, int),
        logprobs: f.opt("logprobs", int),
        prompt_logprobs: f.opt("prompt_logprobs", int),
        prompt_logprob_token_ids: match f.get("prompt_logprob_token_ids") {
            None | Some(Value::Null) => None,
            // `list[list[int]]` rows; an element that is not a JSON integer is `int_type`
            // (vLLM 0.33.0 reads it strictly: `1.5` is not `int_from_float`).
            Some(Value::Array(rows)) => {
                let at = child(&f.base, "prompt_logprob_token_ids");
                let mut shape = PromptIdsShape {
                    rows: rows.len(),
                    ..PromptIdsShape::default()
                };
                for (i, row) in rows.iter().enumerate() {
                    match row {
                        Value::Array(ids) => {
                            shape.width = shape.width.max(ids.len());
                            for (j, id) in ids.iter().enumerate() {
                                let exact = id
                                    .as_i64()
                                    .map(i128::from)
                                    .or_else(|| id.as_u64().map(i128::from));
                                match exact {
                                    Some(x) => {
                                        shape.lo = Some(shape.lo.map_or(x, |l| l.min(x)));
                                        shape.hi = Some(shape.hi.map_or(x, |h| h.max(x)));
                                    }
                                    None => f.issues.push(Issue::new(
                                        "int_type",
                                        child(&child(&at, i), j),
                                        "Input should be a valid integer",
                                        id,
                                    )),
                                }
                            }
                        }
                        other => f.issues.push(Issue::new(
                            "list_type",
                            child(&at, i),
                            "Input should be a valid list",
                            other,
                        )),
                    }
                }
                // `make_ndarray_with_pad(ids, -1, …)` pads short rows with -1.
                shape.padded = rows
                    .iter()
                    .any(|r| r.as_array().is_some_and(|ids| ids.len() < shape.width));
                Some(shape)
            }
            Some(other) => {
                f.fail(
                    "prompt_logprob_token_ids",
                    ("list_type", "Input should be a valid list"),
                    other,
                );
                None
            }
        },
        prompt_logprob_start: f.opt("prompt_logprob_start", int),
        logprob_token_ids: f.int_list("logprob_token_ids", true),
        detokenize: f.req("detokenize", d.detokenize, to_bool),
        stream_interval: f.opt("stream_interval", int),
        bad_words: f.str_list("bad_words").unwrap_or_default(),
        thinking_token_budget: f.opt("thinking_token_budget", int),
        trace_decode_token_ids: None,
        repetition_detection: false,
        // `routed_experts_prompt_start: int = 0` is not nullable (`sampling_params.py`).
        routed_experts_prompt_start: f.req(
            "routed_experts_prompt_start",
            d.routed_experts_prompt_start,
            int,
        ),
        logit_bias_ids: parse_logit_bias(&mut f),
        allowed_token_ids: f.int_list("allowed_token_ids", true),
        overflow: false,
        extra_args_overflow: false,
        structured_outputs: None,
        repetition_error: None,
    };
    for key in [
        "flat_logprobs",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
    ] {
        f.req(key, false, to_bool);
    }
    f.opt("skip_reading_prefix_cache", to_bool);
    f.opt_dict("extra_args");
    // Typed but not read by genfront (`sampling_params.py:285-446`).
    f.opt("watermarking", to_bool);
    if let Some(v) = f.get("output_kind")
        && let Err((kind, msg)) = output_kind(v)
    {
        let mut issue = Issue::new(kind, child(&f.base, "output_kind"), msg, v);
        issue.ctx = (kind == "enum").then(|| "{'expected': '0, 1 or 2'}".to_owned());
        f.issues.push(issue);
    }
    f.req("skip_clone", false, to_bool);
    f.with("output_text_buffer_length", int);
    s.trace_decode_token_ids = f.int_list("trace_decode_token_ids", true);
    s.repetition_detection = f.get("repetition_detection").is_some_and(|v| !v.is_null());
    let repetition = parse_repetition_detection(&mut f);
    s.structured_outputs = f
        .opt_model(
            "structured_outputs",
            (
                "dataclass_type",
                "Input should be a dictionary or an instance of StructuredOutputsParams",
                Some("{'class_name': 'StructuredOutputsParams'}"),
            ),
        )
        .map(|so| {
            let kinds = STRUCTURED_OUTPUT_KINDS
                .iter()
                .filter(|k| so.get(**k).is_some_and(|v| !v.is_null()))
                .count();
            (kinds, structured_outputs_repr(so))
        });

    let typed_ints = [s.n, s.top_k, s.min_tokens, s.routed_experts_prompt_start]
        .into_iter()
        .chain(s.seed)
        .chain(s.max_tokens)
        .chain(s.logprobs)
        .chain(s.prompt_logprobs)
        .chain(s.prompt_logprob_start)
        .chain(s.stream_interval)
        .chain(s.thinking_token_budget)
        .chain(s.stop_token_ids.iter().copied())
        .chain(s.logit_bias_ids.iter().copied())
        .chain(s.logprob_token_ids.iter().flatten().copied())
        .chain(s.allowed_token_ids.iter().flatten().copied());
    s.repetition_error = repetition;
    sort_by_declaration(&mut f.issues[first_issue..]);
    s.extra_args_overflow = sp
        .get("extra_args")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty() && has_overflow(&Value::Object(m.clone())));
    s.overflow = typed_ints.into_iter().any(|i| !i.fits_msgpack())
        || sp.iter().any(|(k, v)| {
            // Unknown and private keys are dropped before the msgpack round trip
            // (`v1/serial_utils.py:539-546`), so their integers never reach it.
            SAMPLING_FIELD_ORDER.contains(&k.as_str())
                && !FLOAT_KEYS.contains(&k.as_str())
                && has_overflow(v)
        });
    s
}

/// `StructuredOutputsParams.__dict__` as its `__post_init__` prints it (`sampling_params.py:
/// 102-140`): every field in declaration order with its default when not sent, the two
/// non-init fields last; a bool field holds what pydantic's lax bool made of the value.
fn structured_outputs_repr(so: &Map<String, Value>) -> String {
    const FIELDS: [(&str, &str); 9] = [
        ("json", "None"),
        ("regex", "None"),
        ("choice", "None"),
        ("grammar", "None"),
        ("json_object", "None"),
        ("disable_any_whitespace", "False"),
        ("disable_additional_properties", "False"),
        ("whitespace_pattern", "None"),
        ("structural_tag", "None"),
    ];
    let mut out = String::from("{");
    for (name, default) in FIELDS {
        out.push_str(&crate::pyfmt::py_str(name));
        out.push_str(": ");
        match so.get(name) {
            None => out.push_str(default),
            Some(v) => match (name, crate::schema::to_bool(v)) {
                (
                    "json_object" | "disable_any_whitespace" | "disable_additional_properties",
                    Ok(b),
                ) => out.push_str(if b { "True" } else { "False" }),
                _ => out.push_str(&crate::pyfmt::py_repr(v, 1000)),
            },
        }
        out.push_str(", ");
    }
    out.push_str("'_backend': None, '_backend_was_auto': False}");
    out
}

/// Every field of vLLM 0.33.0's `SamplingParams` in declaration order (`sampling_params.py:285-446`,
/// private `_` fields left out as the pydantic bridge does, `v1/serial_utils.py:539-546`):
/// pydantic validates the typed-dict fields in this order, so its errors come in this order.
const SAMPLING_FIELD_ORDER: &[&str] = &[
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "watermarking",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
    "prompt_logprob_token_ids",
    "prompt_logprob_start",
    "logprob_token_ids",
    "flat_logprobs",
    "detokenize",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "output_kind",
    "stream_interval",
    "skip_clone",
    "output_text_buffer_length",
    "structured_outputs",
    "logit_bias",
    "allowed_token_ids",
    "extra_args",
    "bad_words",
    "skip_reading_prefix_cache",
    "thinking_token_budget",
    "repetition_detection",
    "routed_experts_prompt_start",
    "trace_decode_token_ids",
];

/// Put the issues of one `sampling_params` dict in `SamplingParams` declaration order (stable:
/// the issues of one field keep their order). Each issue's field is the location part after the
/// `sampling_params` base.
fn sort_by_declaration(issues: &mut [Issue]) {
    let rank = |i: &Issue| {
        i.loc
            .iter()
            .skip_while(|l| **l != Loc::Key("sampling_params".into()))
            .nth(1)
            .and_then(|l| match l {
                Loc::Key(k) => SAMPLING_FIELD_ORDER.iter().position(|f| f == k),
                Loc::Idx(_) => None,
            })
            .unwrap_or(usize::MAX)
    };
    issues.sort_by_key(rank);
}

/// `output_kind: RequestOutputKind` (a plain `Enum` of `0`, `1`, `2`, `sampling_params.py:208-214`):
/// pydantic's enum validator looks the value up by equality, so `1`, `1.0` and `true` are
/// members; `"1"`, `null` and `3` are the `enum` error.
fn output_kind(v: &Value) -> Result<(), (&'static str, &'static str)> {
    const SIZE: (&str, &str) = (
        "int_parsing_size",
        "Unable to parse input string as an integer, exceeded maximum size",
    );
    let member = match v {
        Value::Bool(_) => true,
        // Read as an `i64` before the members are compared: past it is `int_parsing_size`.
        Value::Number(n) if n.is_i64() => n.as_i64().is_some_and(|x| (0..=2).contains(&x)),
        Value::Number(n) if n.is_u64() => return Err(SIZE),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            // An integer literal past 64 bits is a Python int (`wide`); a float literal is
            // compared with the members as it is (`1e+30` is `enum`).
            if crate::wide::lookup(x).is_some() {
                return Err(SIZE);
            }
            x == 0.0 || x == 1.0 || x == 2.0
        }
        _ => false,
    };
    if member {
        Ok(())
    } else {
        Err(("enum", "Input should be 0, 1 or 2"))
    }
}

/// Message of `RepetitionDetectionParams.__post_init__` for bad pattern sizes
/// (`sampling_params.py:189-199`).
pub(crate) const REPETITION_SIZES: &str = "max_pattern_size, min_pattern_size must be >=0, with min_pattern_size <= max_pattern_size. Set both to 0 to disable repetitive pattern detection.";
/// Message of `RepetitionDetectionParams.__post_init__` for a too small `min_count`
/// (`sampling_params.py:200-205`).
pub(crate) const REPETITION_MIN_COUNT: &str = "min_count must be >= 2 to detect repetitive patterns in engine output. If you do not wish to detect repetitive patterns, set max_pattern_size to 0.";

/// `repetition_detection: RepetitionDetectionParams | None`, a pydantic dataclass of three `int`s
/// (default 0). Type errors are issues at `...repetition_detection.<field>` (a non-dict is
/// `dataclass_type`); a `__post_init__` failure is a `VLLMValidationError`, which pydantic does not
/// catch: it is returned here and aborts the whole request like `SamplingParams.__post_init__`.
fn parse_repetition_detection(f: &mut Fields<'_, '_>) -> Option<&'static str> {
    let v = f.get("repetition_detection")?;
    let m = match v {
        Value::Null => return None,
        Value::Object(m) => m,
        other => {
            let mut issue = Issue::new(
                "dataclass_type",
                child(&f.base, "repetition_detection"),
                "Input should be a dictionary or an instance of RepetitionDetectionParams",
                other,
            );
            issue.ctx = Some("{'class_name': 'RepetitionDetectionParams'}".to_owned());
            f.issues.push(issue);
            return None;
        }
    };
    let mut inner = Fields {
        map: m,
        base: child(&f.base, "repetition_detection"),
        issues: &mut *f.issues,
    };
    let zero = PyInt::new(0);
    let max = inner.req("max_pattern_size", zero, int).get();
    let min = inner.req("min_pattern_size", zero, int).get();
    let count = inner.req("min_count", zero, int).get();
    let typed = ["max_pattern_size", "min_pattern_size", "min_count"]
        .iter()
        .all(|k| m.get(*k).is_none_or(|v| to_int(v).is_ok()));
    if !typed {
        return None;
    }
    if max < 0 || min < 0 || min > max {
        Some(REPETITION_SIZES)
    } else if max > 0 && count < 2 {
        Some(REPETITION_MIN_COUNT)
    } else {
        None
    }
}

/// `stop: str | list[str] | None`, normalised to a list like `__post_init__` does.
fn parse_stop(f: &mut Fields<'_, '_>) -> Vec<String> {
    match f.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(list @ Value::Array(_)) => {
            // A list with a bad item fails both union members: the `str` one first.
            let before = f.issues.len();
            let out = f.str_list("stop").unwrap_or_default();
            if f.issues.len() > before {
                let issue = Issue::new(
                    "string_type",
                    child(&f.base, "stop"),
                    "Input should be a valid string",
                    list,
                );
                f.issues.insert(before, issue);
            }
            out
        }
        Some(other) => {
            let base = child(&f.base, "stop");
            f.issues.push(Issue::new(
                "string_type",
                child(&base, "str"),
                "Input should be a valid string",
                other,
            ));
            f.issues.push(Issue::new(
                "list_type",
                child(&base, "list[str]"),
                "Input should be a valid list",
                other,
            ));
            Vec::new()
        }
    }
}

/// `logit_bias: dict[int, float] | None`: the token-id keys (values only type-checked).
fn parse_logit_bias(f: &mut Fields<'_, '_>) -> Vec<PyInt> {
    let Some(m) = f.opt_dict("logit_bias") else {
        return Vec::new();
    };
    let base = child(&f.base, "logit_bias");
    let mut ids = Vec::with_capacity(m.len());
    for (k, v) in m {
        match to_int(&Value::String(k.clone())) {
            Ok(id) => ids.push(id),
            Err((kind, msg)) => f.issues.push(Issue::new(
                kind,
                child(&child(&base, k.as_str()), "[key]"),
                msg,
                &Value::String(k.clone()),
            )),
        }
        if let Err((kind, msg)) = to_float(v) {
            f.issues
                .push(Issue::new(kind, child(&base, k.as_str()), msg, v));
        }
    }
    ids
}

/// Whether an opaque value holds an integer msgpack cannot carry (outside `-2^63 ..= 2^64-1`).
/// JSON integers past `u64` arrive as floats; an integral float that large is taken for one.
fn has_overflow(v: &Value) -> bool {
    match v {
        // Only an integer literal past 64 bits (a Python int) overflows msgpack; a float
        // literal, however large, is a msgpack float (`wide`).
        Value::Number(n) => {
            n.as_i64().is_none()
                && n.as_u64().is_none()
                && n.as_f64()
                    .and_then(crate::wide::lookup)
                    .is_some_and(|exact| {
                        exact.is_none_or(|i| !(-(1i128 << 63)..=(1i128 << 64) - 1).contains(&i))
                    })
        }
        Value::Array(items) => items.iter().any(has_overflow),
        Value::Object(m) => m.values().any(has_overflow),
        _ => false,
    }
}

#[cfg(test)]
mod key_tests {
    use serde_json::json;

    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn native_only_lists_set_keys_without_a_typed_counterpart() {
        let body = map(json!({
            "token_ids": [1], "features": null, "ec_transfer_params": {"a": 1},
            "sampling_params": {"detokenize": true, "skip_special_tokens": false,
                "bad_words": [], "allowed_token_ids": [3], "output_text_buffer_length": 0,
                "structured_outputs": {"regex": "x", "disable_fallback": true, "choice": null},
                "logit_bias": {"5": 1.0}}
        }));
        assert_eq!(
            native_only(&body),
            [
                "ec_transfer_params",
                "sampling_params.skip_special_tokens",
                "sampling_params.allowed_token_ids",
                "sampling_params.structured_outputs.disable_fallback",
            ]
        );
        let bad = map(json!({"sampling_params": {"logit_bias": {"5": "inf"}}}));
        assert_eq!(native_only(&bad), ["sampling_params.logit_bias"]);
    }

    #[test]
    fn constraints_in_typed_form() {
        let sp = map(json!({"logit_bias": {"9": "1.5", "3": -2}}));
        assert_eq!(
            logit_bias(&sp),
            Some(vec![
                LogitBias {
                    token_id: 9,
                    bias: 1.5
                },
                LogitBias {
                    token_id: 3,
                    bias: -2.0
                }
            ])
        );
        let sp = map(json!({"structured_outputs": {"json": {"type": "object"}}}));
        assert_eq!(
            structured(&sp),
            Some(StructuredOutput::JsonSchema(r#"{"type":"object"}"#.into()))
        );
        let sp = map(json!({"structured_outputs": {"grammar": "root ::= \"a\""}}));
        assert_eq!(
            structured(&sp),
            Some(StructuredOutput::Grammar("root ::= \"a\"".into()))
        );
        let sp = map(json!({"structured_outputs": {"choice": ["a"]}}));
        assert_eq!(structured(&sp), None);
    }
}
