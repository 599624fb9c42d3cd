//! SGLang 0.5.23's JSON contract gate for `/generate` (`srt/entrypoints/http_server.py:933-940`,
//! `srt/entrypoints/api_contract.py`): after FastAPI/pydantic bound the body to
//! `GenerateReqInput`, the route decodes the same parsed JSON with the generated
//! `GenerateRequest.from_json_value` (`sglang/api/v1/api_types.py`, generated from
//! `proto/sglang/api/v1`) and answers its first `JsonContractError` as HTTP 400
//! `{"error": "<text>"}`, for `stream: true` too (the gate runs before any stream starts).
//!
//! The decoder is strict where pydantic is lax: a bool is only `true`/`false`, an integer only a
//! JSON integer (`5.0` is refused), a float any number; unknown keys of `sampling_params`,
//! `sampling_params.watermark` and a media reference are refused with serde's `unknown field`
//! text (unknown top-level keys are ignored). Keys are visited in body order and the first
//! violation is the answer. The texts are serde's `Unexpected` display, as `_unexpected` spells
//! them (`api_types.py:30-46`): ``invalid type: floating point `5.0`, expected i64``.
//!
//! Integer literals past the 64-bit range reach genfront as floats (serde_json without arbitrary
//! precision) and are judged as floats here, where Python sees an `int`.

use serde_json::{Map, Value};

use crate::json::Obj;

/// `_FIELDS_SamplingParams` (`api_types.py:1256`).
const SAMPLING_FIELDS: &[&str] = &[
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
];

/// `_FIELDS_WatermarkRequestConfig` (`api_types.py:1384`).
const WATERMARK_FIELDS: &[&str] = &["enabled", "key", "context_window"];

/// `_FIELDS_MediaRef` (`api_types.py:1902`).
const MEDIA_REF_FIELDS: &[&str] = &[
    "url",
    "detail",
    "max_dynamic_patch",
    "content_hash",
    "min_pixels",
    "max_pixels",
    "total_max_pixels",
    "fps",
    "num_frames",
    "min_frames",
    "max_frames",
    "max_tokens_per_frame",
    "max_image_tokens",
    "use_audio",
    "image_grid_thw",
];

type R = Result<(), String>;

/// The gate's verdict on a parsed body: `Some(text)` is the 400 `{"error": text}` SGLang sends.
pub(crate) fn check(body: &Obj) -> Option<String> {
    generate_request(body).err()
}

/// serde's `Unexpected` display of a JSON value (`_unexpected`).
fn unexpected(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if is_int(v) => format!("integer `{n}`"),
        Value::Number(n) => format!(
            "floating point `{}`",
            genfront_format::pyrepr::float_repr(n.as_f64().unwrap_or(f64::NAN))
        ),
        Value::String(s) => format!("string \"{s}\""),
        Value::Array(_) => "sequence".to_owned(),
        Value::Object(_) => "map".to_owned(),
    }
}

fn invalid_type(v: &Value, expected: &str) -> String {
    format!("invalid type: {}, expected {expected}", unexpected(v))
}

/// `_is_int`: a JSON integer (not a bool, not a float).
fn is_int(v: &Value) -> bool {
    matches!(v, Value::Number(n) if n.is_i64() || n.is_u64())
}

/// `_is_number`: an integer or a float, not a bool.
fn is_number(v: &Value) -> bool {
    v.is_number()
}

fn expect_bool(v: &Value) -> R {
    if v.is_boolean() {
        Ok(())
    } else {
        Err(invalid_type(v, "a boolean"))
    }
}

fn expect_int_as(v: &Value, expected: &str) -> R {
    if is_int(v) {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn expect_int(v: &Value) -> R {
    expect_int_as(v, "i64")
}

/// `_expect_uint`: a non-negative JSON integer.
fn expect_uint(v: &Value) -> R {
    match v {
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|i| i < 0) => {
            Err(format!("invalid value: integer `{n}`, expected u64"))
        }
        _ if is_int(v) => Ok(()),
        _ => Err(invalid_type(v, "u64")),
    }
}

fn expect_float(v: &Value) -> R {
    if is_number(v) {
        Ok(())
    } else {
        Err(invalid_type(v, "f64"))
    }
}

fn expect_str_as(v: &Value, expected: &str) -> R {
    if v.is_string() {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn expect_str(v: &Value) -> R {
    expect_str_as(v, "a string")
}

fn expect_seq(v: &Value) -> Result<&Vec<Value>, String> {
    v.as_array().ok_or_else(|| invalid_type(v, "a sequence"))
}

fn expect_map<'a>(v: &'a Value, expected: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| invalid_type(v, expected))
}

/// serde's `unknown_field` text (`_unknown_field`, `api_types.py:97-111`).
fn unknown_field(key: &str, fields: &[&str]) -> String {
    match fields {
        [] => format!("unknown field `{key}`, there are no fields"),
        [one] => format!("unknown field `{key}`, expected `{one}`"),
        [a, b] => format!("unknown field `{key}`, expected `{a}` or `{b}`"),
        _ => {
            let listed: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
            format!(
                "unknown field `{key}`, expected one of {}",
                listed.join(", ")
            )
        }
    }
}

/// `None if x is None else decode(x)`.
fn opt(v: &Value, decode: impl Fn(&Value) -> R) -> R {
    if v.is_null() { Ok(()) } else { decode(v) }
}

fn each(v: &Value, decode: impl Fn(&Value) -> R) -> R {
    expect_seq(v)?.iter().try_for_each(decode)
}

/// `decode_<T>OrList` for a scalar `T`: a list is `decode_<T>List`, anything else one `T`.
fn scalar_or_list(
    v: &Value,
    name: &str,
    item: impl Fn(&Value) -> R,
    one: fn(&Value, &str) -> R,
) -> R {
    if v.is_array() {
        each(v, item)
    } else {
        one(v, &format!("a value or an array of values for {name}"))
    }
}

fn bool_as(v: &Value, expected: &str) -> R {
    if v.is_boolean() {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn string_or_list(v: &Value) -> R {
    scalar_or_list(v, "StringOrList", expect_str, expect_str_as)
}

fn optional_string_or_list(v: &Value) -> R {
    scalar_or_list(
        v,
        "OptionalStringOrList",
        |e| opt(e, expect_str),
        expect_str_as,
    )
}

fn bool_or_list(v: &Value) -> R {
    scalar_or_list(v, "BoolOrList", expect_bool, bool_as)
}

fn int64_or_list(v: &Value) -> R {
    scalar_or_list(v, "Int64OrList", expect_int, expect_int_as)
}

fn optional_int64_or_list(v: &Value) -> R {
    scalar_or_list(
        v,
        "OptionalInt64OrList",
        |e| opt(e, expect_int),
        expect_int_as,
    )
}

/// `decode_TokenIdsOrList`: `[]` and `[number, ...]` are one flat list of `i64`, any other list
/// a batch of them.
fn token_ids_or_list(v: &Value) -> R {
    let Some(items) = v.as_array() else {
        return Err(invalid_type(
            v,
            "a value or an array of values for TokenIdsOrList",
        ));
    };
    if items.first().is_none_or(is_number) {
        items.iter().try_for_each(expect_int)
    } else {
        items.iter().try_for_each(|row| each(row, expect_int))
    }
}

/// `decode_StringListOrList`: `[]` and `[str, ...]` are one list, any other list a batch.
fn string_list_or_list(v: &Value) -> R {
    let Some(items) = v.as_array() else {
        return Err(invalid_type(
            v,
            "a value or an array of values for StringListOrList",
        ));
    };
    if items.first().is_none_or(Value::is_string) {
        items.iter().try_for_each(expect_str)
    } else {
        items.iter().try_for_each(|row| each(row, expect_str))
    }
}

fn watermark(v: &Value) -> R {
    for (key, x) in expect_map(v, "struct WatermarkRequestConfig")? {
        match key.as_str() {
            "enabled" => opt(x, expect_bool)?,
            "key" => opt(x, expect_str)?,
            "context_window" => opt(x, expect_int)?,
            _ => return Err(unknown_field(key, WATERMARK_FIELDS)),
        }
    }
    Ok(())
}

/// `decode_SamplingParams` (`api_types.py:1259-1321`): unknown keys refused.
fn sampling_params(v: &Value, expected: &str) -> R {
    for (key, x) in expect_map(v, expected)? {
        match key.as_str() {
            "max_new_tokens" | "top_k" | "min_new_tokens" | "n" | "stream_interval"
            | "sampling_seed" | "beam_width" => opt(x, expect_int)?,
            "stop" | "stop_regex" => opt(x, string_or_list)?,
            "stop_token_ids" => opt(x, |e| each(e, expect_int))?,
            "temperature" | "top_p" | "min_p" | "frequency_penalty" | "presence_penalty"
            | "repetition_penalty" => opt(x, expect_float)?,
            "json_schema" | "regex" | "ebnf" | "structural_tag" => opt(x, expect_str)?,
            "ignore_eos"
            | "skip_special_tokens"
            | "spaces_between_special_tokens"
            | "no_stop_trim" => opt(x, expect_bool)?,
            "logit_bias" => opt(x, |m| {
                expect_map(m, "a map")?.values().try_for_each(expect_float)
            })?,
            "custom_params" => {}
            "watermark" => opt(x, watermark)?,
            "choice" => opt(x, |e| each(e, expect_str))?,
            _ => return Err(unknown_field(key, SAMPLING_FIELDS)),
        }
    }
    Ok(())
}

/// `decode_SamplingParamsOrList`.
fn sampling_params_or_list(v: &Value) -> R {
    if v.is_array() {
        each(v, |e| sampling_params(e, "struct SamplingParams"))
    } else {
        sampling_params(v, "a value or an array of values for SamplingParamsOrList")
    }
}

fn media_ref(v: &Value) -> R {
    for (key, x) in expect_map(v, "struct MediaRef")? {
        match key.as_str() {
            "url" => expect_str(x)?,
            "detail" | "content_hash" => opt(x, expect_str)?,
            "max_dynamic_patch"
            | "min_pixels"
            | "max_pixels"
            | "total_max_pixels"
            | "num_frames"
            | "min_frames"
            | "max_frames"
            | "max_tokens_per_frame"
            | "max_image_tokens" => opt(x, expect_int)?,
            "fps" => opt(x, expect_float)?,
            "use_audio" => opt(x, expect_bool)?,
            "image_grid_thw" => opt(x, |g| each(g, |row| each(row, expect_int)))?,
            _ => return Err(unknown_field(key, MEDIA_REF_FIELDS)),
        }
    }
    Ok(())
}

/// `decode_MediaItem`: a string or a media reference.
fn media_item(v: &Value) -> R {
    match v {
        Value::String(_) => Ok(()),
        Value::Object(_) => media_ref(v),
        _ => Err(invalid_type(v, "one of the MediaItem shapes")),
    }
}

/// `decode_MediaInput`: one item, a list of optional items, or a batch of such lists.
fn media_input(v: &Value) -> R {
    match v {
        Value::String(_) | Value::Object(_) => media_item(v),
        Value::Array(items) if items.first().is_some_and(Value::is_array) => items
            .iter()
            .try_for_each(|row| opt(row, |r| each(r, |e| opt(e, media_item)))),
        Value::Array(items) => items.iter().try_for_each(|e| opt(e, media_item)),
        _ => Err(invalid_type(v, "one of the MediaInput shapes")),
    }
}

fn kv_hint_action(v: &Value) -> R {
    for (key, x) in expect_map(v, "struct KvHintAction")? {
        match key.as_str() {
            "action_id" | "action_type" | "action_version" => expect_str(x)?,
            _ => {}
        }
    }
    Ok(())
}

fn kv_hints_envelope(v: &Value) -> R {
    for (key, x) in expect_map(v, "struct KvHintsEnvelope")? {
        match key.as_str() {
            "protocol_version" | "message_id" => expect_str(x)?,
            "actions" => opt(x, |a| each(a, kv_hint_action))?,
            _ => {}
        }
    }
    Ok(())
}

fn kv_hints_or_list(v: &Value) -> R {
    if v.is_array() {
        each(v, |e| opt(e, kv_hints_envelope))
    } else {
        expect_map(v, "a value or an array of values for KvHintsEnvelopeOrList")?;
        kv_hints_envelope(v)
    }
}

fn images_config(v: &Value) -> R {
    for (key, x) in expect_map(v, "struct ImagesConfig")? {
        match key.as_str() {
            "image_mode" => opt(x, expect_str)?,
            "prefix" => expect_str(x)?,
            _ => {}
        }
    }
    Ok(())
}

/// `decode_GenerateRequest` (`api_types.py:1413-1495`): unknown top-level keys are ignored.
fn generate_request(m: &Obj) -> R {
    for (key, x) in m {
        match key.as_str() {
            "rid" | "text" | "extra_key" | "cache_salt" => opt(x, string_or_list)?,
            "input_ids" | "token_ids_logprob" => opt(x, token_ids_or_list)?,
            "stream" | "return_text_in_logprobs" | "require_reasoning" => opt(x, expect_bool)?,
            "sampling_params" => opt(x, sampling_params_or_list)?,
            "return_logprob" | "return_hidden_states" | "return_sampling_mask" => {
                opt(x, bool_or_list)?;
            }
            "logprob_start_len" | "top_logprobs_num" => opt(x, int64_or_list)?,
            "bootstrap_host" | "bootstrap_pair_key" | "lora_path" | "custom_logit_processor" => {
                opt(x, optional_string_or_list)?;
            }
            "bootstrap_port" | "bootstrap_room" | "decode_tp_size" => {
                opt(x, optional_int64_or_list)?;
            }
            "routed_dp_rank" | "disagg_prefill_dp_rank" | "priority" => opt(x, expect_int)?,
            "image_data" | "video_data" | "audio_data" => opt(x, media_input)?,
            "mm_hashes" => opt(x, string_list_or_list)?,
            "kv_hints" => opt(x, kv_hints_or_list)?,
            "routing_key" | "session_id" => opt(x, expect_str)?,
            "max_thinking_tokens" => opt(x, expect_uint)?,
            "custom_labels" => opt(x, |c| {
                expect_map(c, "a map")?.values().try_for_each(expect_str)
            })?,
            "images_config" => opt(x, images_config)?,
            // Not optional in the schema: `null` is refused.
            "return_prompt_token_ids" => expect_bool(x)?,
            "routed_experts_start_len" => expect_int(x)?,
            "modalities" => opt(x, |l| each(l, |e| opt(e, expect_str)))?,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn gate(v: Value) -> Option<String> {
        check(v.as_object().expect("object"))
    }

    #[test]
    fn admitted_bodies() {
        for body in [
            json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4, "temperature": 1}}),
            json!({"input_ids": [[1], [2]], "sampling_params": [{}, {"stop": ["a"]}], "stream": true}),
            json!({"text": "hi", "sampling_params": null, "unknown_top_level": 5, "custom_labels": {"a": "b"}}),
            json!({"input_ids": [], "return_logprob": [true, false], "logprob_start_len": [1, 2], "bootstrap_port": [null, 8]}),
            json!({"input_ids": [1], "modalities": ["image", null], "routing_key": "k", "max_thinking_tokens": 0}),
        ] {
            assert_eq!(gate(body.clone()), None, "{body}");
        }
    }

    /// The texts of `api_types.py`'s `_invalid_type` / `_unknown_field`, pinned case by case.
    #[test]
    fn refusals_in_serde_words() {
        for (body, text) in [
            (
                json!({"sampling_params": {"max_new_tokens": 5.0}}),
                "invalid type: floating point `5.0`, expected i64",
            ),
            (
                json!({"sampling_params": {"ignore_eos": 1}}),
                "invalid type: integer `1`, expected a boolean",
            ),
            (
                json!({"sampling_params": {"temperature": "1"}}),
                "invalid type: string \"1\", expected f64",
            ),
            (
                json!({"sampling_params": {"max_tokens": 5}}),
                "unknown field `max_tokens`, expected one of `max_new_tokens`, `stop`, `stop_token_ids`, `stop_regex`, `temperature`, `top_p`, `top_k`, `min_p`, `frequency_penalty`, `presence_penalty`, `repetition_penalty`, `min_new_tokens`, `n`, `json_schema`, `regex`, `ebnf`, `structural_tag`, `ignore_eos`, `skip_special_tokens`, `spaces_between_special_tokens`, `no_stop_trim`, `stream_interval`, `logit_bias`, `sampling_seed`, `custom_params`, `beam_width`, `watermark`, `choice`",
            ),
            (
                json!({"sampling_params": {"watermark": {"on": true}}}),
                "unknown field `on`, expected one of `enabled`, `key`, `context_window`",
            ),
            (
                json!({"sampling_params": 5}),
                "invalid type: integer `5`, expected a value or an array of values for SamplingParamsOrList",
            ),
            (
                json!({"stream": "yes"}),
                "invalid type: string \"yes\", expected a boolean",
            ),
            (
                json!({"input_ids": [1.5]}),
                "invalid type: floating point `1.5`, expected i64",
            ),
            (
                json!({"input_ids": [true]}),
                "invalid type: boolean `true`, expected a sequence",
            ),
            (
                json!({"input_ids": "1 2"}),
                "invalid type: string \"1 2\", expected a value or an array of values for TokenIdsOrList",
            ),
            (
                json!({"routing_key": 7}),
                "invalid type: integer `7`, expected a string",
            ),
            (
                json!({"custom_labels": {"a": 1}}),
                "invalid type: integer `1`, expected a string",
            ),
            (
                json!({"custom_labels": []}),
                "invalid type: sequence, expected a map",
            ),
            (
                json!({"modalities": "image"}),
                "invalid type: string \"image\", expected a sequence",
            ),
            (
                json!({"max_thinking_tokens": -1}),
                "invalid value: integer `-1`, expected u64",
            ),
            (
                json!({"return_prompt_token_ids": null}),
                "invalid type: null, expected a boolean",
            ),
            (
                json!({"priority": 1.0}),
                "invalid type: floating point `1.0`, expected i64",
            ),
            (
                json!({"return_logprob": [1]}),
                "invalid type: integer `1`, expected a boolean",
            ),
            (
                json!({"return_logprob": 0}),
                "invalid type: integer `0`, expected a value or an array of values for BoolOrList",
            ),
            (
                json!({"image_data": 5}),
                "invalid type: integer `5`, expected one of the MediaInput shapes",
            ),
        ] {
            assert_eq!(gate(body.clone()).as_deref(), Some(text), "{body}");
        }
    }

    #[test]
    fn first_violation_in_body_order() {
        let body = json!({"stream": 1, "sampling_params": {"bogus": 1}});
        assert_eq!(
            gate(body).as_deref(),
            Some("invalid type: integer `1`, expected a boolean")
        );
    }
}
