//! Parse a `/generate` body into a validated [`GenerateRequest`], following SGLang's
//! `GenerateReqInput.normalize_batch_and_arguments` (`io_struct.py`) and the per-request checks of
//! `TokenizerManager` (`tokenizer_manager.py`), in their order and with their messages.
//!
//! Phases: `Content-Type` (FastAPI's rule, `request::media`) → JSON + types (pydantic:
//! [`GenerateError::Schema`]) → input selection, batch size,
//! parallel sampling, per-item lists, rids (`ValueError`s: [`GenerateError::Validation`]) →
//! per-item checks ([`crate::item`]).

mod contract;
mod fast;
mod json_error;
mod media;
mod pydantic;

pub(crate) use pydantic::lax_bool;

use genfront_format::{GenerateError, ParseInput, Rejection};
use genfront_protocol::Bootstrap;
use serde_json::Value;

use crate::item::{self, Item, ItemSpec};
use crate::json::{
    self, Obj, OneOrList, TokenLists, opt_int, opt_one_or_list, opt_str, opt_token_lists, present,
    req_bool,
};
use crate::pyfmt::str_list_repr;
use crate::sampling::SamplingParams;
use crate::{
    Carry::{NativeOnly, Owned, Refused, Rendered, Typed},
    SchemaKey, Unset,
    Unset::Empty,
    key,
};

/// Every top-level key of SGLang's `GenerateReqInput` (`io_struct.py`, the fields a client may
/// send) and how it reaches a non-SGLang engine; `sampling_params` holds [`crate::SAMPLING_KEYS`].
/// The projection records the set [`Carry::NativeOnly`](crate::Carry::NativeOnly) keys from this
/// list, so a key added here is refused on another engine until it is carried.
pub const REQUEST_KEYS: &[SchemaKey] = &[
    key("rid", Owned),
    // The prompt: ids are typed; a text-only prompt has no typed form and is recorded as
    // `text` in `native_only` (only an engine that tokenizes it can serve it).
    key("text", Typed),
    key("input_ids", Typed),
    key("input_embeds", Refused),
    key("image_data", NativeOnly(Empty)),
    key("video_data", NativeOnly(Empty)),
    key("audio_data", NativeOnly(Empty)),
    key("use_audio_in_video", NativeOnly(Empty)),
    key("video_config", NativeOnly(Empty)),
    key("modalities", NativeOnly(Empty)),
    key("mm_hashes", NativeOnly(Empty)),
    key("mm_content_hashes", NativeOnly(Empty)),
    key("sampling_params", Typed),
    key("return_logprob", Typed),
    key("logprob_start_len", Typed),
    key("top_logprobs_num", Typed),
    key("token_ids_logprob", Typed),
    key("return_text_in_logprobs", NativeOnly(Empty)),
    key("return_sampling_mask", Typed),
    key("return_flat_raw_top_logprobs", Rendered),
    key("return_flat_raw_top_logprobs_b64", Rendered),
    key("stream", Owned),
    key("log_metrics", NativeOnly(Unset::True)),
    key("return_hidden_states", Refused),
    key("return_routed_experts", Typed),
    key("routed_experts_start_len", Typed),
    key("return_indexer_topk", NativeOnly(Empty)),
    key("session_id", Typed),
    key("session_params", NativeOnly(Empty)),
    key("lora_path", Typed),
    key("lora_id", NativeOnly(Empty)),
    key("custom_logit_processor", Refused),
    key("positional_embed_overrides", NativeOnly(Empty)),
    // Forwarded as given to an SGLang engine (an aggregated one ignores them); on a P/D leg the
    // engine client writes the router's coordinates instead (`client/body.rs`).
    key("bootstrap_host", NativeOnly(Empty)),
    key("bootstrap_port", NativeOnly(Empty)),
    key("bootstrap_room", NativeOnly(Empty)),
    key("bootstrap_pair_key", NativeOnly(Empty)),
    key("decode_tp_size", NativeOnly(Empty)),
    key("require_reasoning", NativeOnly(Empty)),
    key("routed_dp_rank", Typed),
    key("disagg_prefill_dp_rank", NativeOnly(Empty)),
    key("data_parallel_rank", Typed),
    key("background", NativeOnly(Empty)),
    key("conversation_id", NativeOnly(Empty)),
    key("kv_router_hint", NativeOnly(Empty)),
    key("routing_key", NativeOnly(Empty)),
    key("priority", Typed),
    key("extra_key", Typed),
    key("cache_salt", Typed),
    key("max_thinking_tokens", Refused),
    key("no_logs", NativeOnly(Empty)),
    key("custom_labels", NativeOnly(Empty)),
    key("return_bytes", NativeOnly(Empty)),
    key("return_entropy", NativeOnly(Empty)),
    key("return_prompt_token_ids", Rendered),
    key("external_trace_header", NativeOnly(Empty)),
    key("received_time", NativeOnly(Empty)),
    key("http_worker_ipc", NativeOnly(Empty)),
    key("need_wait_for_mm_inputs", NativeOnly(Empty)),
    key("num_items_assigned", NativeOnly(Empty)),
    key("encoder_urls", NativeOnly(Empty)),
    key("images_config", NativeOnly(Empty)),
    key("max_dynamic_patch", NativeOnly(Empty)),
    key("min_dynamic_patch", NativeOnly(Empty)),
    key("image_max_dynamic_patch", NativeOnly(Empty)),
    key("video_max_dynamic_patch", NativeOnly(Empty)),
    key("multi_item_delimiter_indices", NativeOnly(Empty)),
];

/// The set keys of one item body (top level, then `sampling_params`) that have no typed
/// counterpart, as dotted paths in body order: [`Carry::NativeOnly`](crate::Carry::NativeOnly)
/// keys whose value is not their default, and `text` for a text-only prompt. Keys outside the
/// schema are not listed: SGLang itself ignores unknown top-level keys.
pub(crate) fn native_only(body: &Value, text_prompt: bool) -> Vec<String> {
    let mut out = Vec::new();
    let Value::Object(obj) = body else {
        return out;
    };
    for (k, v) in obj {
        if k == "text" && text_prompt && !v.is_null() {
            out.push(k.clone());
        } else if k == "sampling_params"
            && let Value::Object(sp) = v
        {
            out.extend(crate::sampling::native_only(sp));
        } else if let Some(SchemaKey {
            carry: NativeOnly(unset),
            ..
        }) = REQUEST_KEYS.iter().find(|s| s.key == k)
            && !unset.is_unset(v)
        {
            out.push(k.clone());
        }
    }
    // One typed namespace (`RoutingHints::cache_salt`) takes `cache_salt`; an `extra_key` next
    // to it has nowhere to go.
    let set = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if set("extra_key") && set("cache_salt") {
        out.push("extra_key".to_owned());
    }
    out
}

/// A validated, normalized `/generate` request: one [`Item`] per engine request (batch items ×
/// parallel samples, batch-major, as SGLang's `_handle_batch_request` orders them).
#[derive(Debug)]
pub(crate) struct GenerateRequest {
    /// `stream`.
    pub stream: bool,
    /// Single request (answered with an object) vs batch or `n > 1` (answered with an array).
    pub is_single: bool,
    /// The body `rid` when it is a string, else the `x-request-id` header.
    pub client_id: Option<String>,
    /// The engine requests.
    pub items: Vec<Item>,
    /// Engine side only (a mock engine server in a P/D role): each item's bootstrap
    /// coordinates, as the client (genfront's router) sent them; empty otherwise.
    pub bootstraps: Vec<Option<Bootstrap>>,
}

/// Which input decides the batch shape (SGLang: `text` > `input_ids` > `input_embeds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputKind {
    /// `text` (with `input_ids` also present, the ids are used for the tokens).
    Text {
        /// Whether `input_ids` supplies the tokens.
        with_ids: bool,
    },
    /// `input_ids`.
    Ids,
    /// `input_embeds`.
    Embeds,
}

/// The token ids of one prompt, as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PromptIds {
    /// From the JSON tree: any integer (the checks name negative or out-of-range ids).
    Wide(Vec<i64>),
    /// From the body's fast path ([`fast`]): every id fits a `u32`.
    Narrow(Vec<u32>),
}

impl Default for PromptIds {
    fn default() -> Self {
        PromptIds::Narrow(Vec::new())
    }
}

impl PromptIds {
    /// Number of ids.
    pub(crate) fn len(&self) -> usize {
        match self {
            PromptIds::Wide(v) => v.len(),
            PromptIds::Narrow(v) => v.len(),
        }
    }

    /// Whether there are no ids.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an id is `>= bound`.
    pub(crate) fn any_at_least(&self, bound: i64) -> bool {
        match self {
            PromptIds::Wide(v) => v.iter().any(|&id| id >= bound),
            PromptIds::Narrow(v) => v.iter().any(|&id| i64::from(id) >= bound),
        }
    }

    /// The first negative id.
    pub(crate) fn first_negative(&self) -> Option<i64> {
        match self {
            PromptIds::Wide(v) => v.iter().copied().find(|&id| id < 0),
            PromptIds::Narrow(_) => None,
        }
    }

    /// The ids as `i64`s (for error messages).
    pub(crate) fn to_wide(&self) -> Vec<i64> {
        match self {
            PromptIds::Wide(v) => v.clone(),
            PromptIds::Narrow(v) => v.iter().map(|&id| i64::from(id)).collect(),
        }
    }

    /// The ids that fit a `u32` (all of them once the checks passed), moved when narrow.
    pub(crate) fn into_u32(self) -> Vec<u32> {
        match self {
            PromptIds::Wide(v) => v.iter().filter_map(|&id| u32::try_from(id).ok()).collect(),
            PromptIds::Narrow(v) => v,
        }
    }
}

/// `input_ids`: one prompt's ids or a batch of them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum IdLists {
    /// `[1, 2, 3]` (also `[]`).
    Flat(PromptIds),
    /// `[[1, 2], [3]]`.
    Nested(Vec<PromptIds>),
}

impl From<TokenLists> for IdLists {
    fn from(t: TokenLists) -> Self {
        match t {
            TokenLists::Flat(v) => IdLists::Flat(PromptIds::Wide(v)),
            TokenLists::Nested(rows) => {
                IdLists::Nested(rows.into_iter().map(PromptIds::Wide).collect())
            }
        }
    }
}

/// The typed view of the top-level fields genfront reads (schema-checked).
#[derive(Debug)]
pub(crate) struct Fields<'a> {
    pub rid: Option<OneOrList<&'a str>>,
    pub text: Option<OneOrList<&'a str>>,
    pub input_ids: Option<IdLists>,
    pub input_embeds: Option<&'a Vec<Value>>,
    pub sampling: Option<OneOrList<SamplingParams>>,
    pub return_logprob: Option<OneOrList<bool>>,
    pub logprob_start_len: Option<OneOrList<i128>>,
    pub top_logprobs_num: Option<OneOrList<i128>>,
    pub token_ids_logprob: Option<TokenLists>,
    pub return_sampling_mask: Option<OneOrList<bool>>,
    pub flat_top_logprobs: bool,
    pub flat_top_logprobs_b64: bool,
    /// `return_flat_raw_output_top_logprobs`.
    pub flat_output_top_logprobs: bool,
    /// `multi_item_delimiter_indices` is set.
    pub multi_item_delimiters: bool,
    /// `stream`.
    pub stream: bool,
    /// `sampling_logprobs_mode` as sent (one mode, or one per batch item).
    pub sampling_logprobs_mode: Option<&'a Value>,
    pub hidden_states: bool,
    pub routed_experts: bool,
    pub routed_experts_start_len: i128,
    pub return_prompt_token_ids: bool,
    pub session_id: Option<&'a str>,
    pub session_params: bool,
    /// `session_params` as sent (an object).
    pub session_params_obj: Option<&'a Obj>,
    pub lora_path: Option<OneOrList<Option<&'a str>>>,
    /// `kv_hints` as sent (one envelope, or one per batch item).
    pub kv_hints: Option<&'a Value>,
    /// The bootstrap keys sent as a per-item list, with the list's length.
    pub bootstrap_lists: Vec<(&'static str, usize)>,
    pub custom_logit_processor: Option<OneOrList<Option<&'a str>>>,
    pub dp_rank: Option<i128>,
    pub priority: Option<i128>,
    pub extra_key: Option<OneOrList<&'a str>>,
    pub cache_salt: Option<OneOrList<&'a str>>,
    pub max_thinking_tokens: Option<i128>,
    /// The top-level `watermark` (one for every item, or one per batch item).
    pub watermark: Option<OneOrList<&'a Value>>,
    /// The top-level `watermark` as sent (a single request's list is one value).
    pub watermark_raw: Option<&'a Value>,
}

/// Phase *parse/validate*: the whole of SGLang's request handling up to dispatch. With
/// `engine_side` (the format plays a P/D engine) the bootstrap triple is accepted and read into
/// [`GenerateRequest::bootstraps`] instead of refused.
pub(crate) fn parse(
    input: &ParseInput<'_>,
    engine_side: bool,
) -> Result<GenerateRequest, Rejection> {
    // FastAPI reads the bytes as JSON only for a JSON `Content-Type` (`request::media`); any
    // other non-empty body (no type at all included) is pydantic's `dataclass_type`.
    if !input.body.is_empty() && !media::body_is_json(input.headers) {
        return Err(schema_error(&pydantic::bytes_body(input.body)).into());
    }
    let (mut obj, fast_ids) = match fast::parse(input.body) {
        Some(parsed) => parsed,
        // An empty body is no body: pydantic's `missing` (as for JSON `null`).
        None if input.body.is_empty() => {
            return Err(schema_error(&pydantic::validate_body(&Value::Null, false)).into());
        }
        None => {
            let value: Value = serde_json::from_slice(input.body).map_err(|e| {
                // orjson's own message and position (`request::json_error`); a body orjson
                // would take but serde cannot (see there) keeps serde's text.
                Rejection::from(match json_error::locate(input.body) {
                    Some((msg, pos)) => schema_error(&pydantic::json_invalid(msg, pos)),
                    None => GenerateError::Schema {
                        message: format!("JSON decode error: {e}"),
                        param: Some("body".to_owned()),
                    },
                })
            })?;
            let Value::Object(obj) = value else {
                return Err(schema_error(&pydantic::validate_body(&value, false)).into());
            };
            (obj, None)
        }
    };
    // No body rid: the `x-request-id` header is the rid (as the reference frontend does), so
    // the echoed header and `meta_info.id` agree.
    if obj.get("rid").is_none_or(Value::is_null)
        && let Some(h) = input
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    {
        obj.insert("rid".to_owned(), Value::String(h.to_owned()));
    }
    // pydantic binds the whole body first (every field, every error), as the client sent it.
    let mut py_errors = Vec::new();
    pydantic::validate_obj(&obj, fast_ids.is_some(), &mut py_errors);
    if !py_errors.is_empty() {
        // A refused bind never starts a stream: the flat 400 whatever `stream` says.
        return Err(schema_error(&py_errors).into());
    }
    // The JSON contract gate runs after pydantic bound the body, on the body as sent; its
    // answer is a plain 400 whatever `stream` says.
    if let Some(text) = contract::check(&obj) {
        return Err(contract_error(text).into());
    }
    let stream = req_bool(&obj, "stream", false)?;
    let reject = |error: GenerateError| Rejection { error, stream };
    let mut fields = Fields::read(&obj).map_err(reject)?;
    if fast_ids.is_some() {
        fields.input_ids = fast_ids;
    }
    check_other_types(&obj).map_err(reject)?;
    let client_id = match &fields.rid {
        Some(OneOrList::One(rid)) => Some((*rid).to_owned()),
        _ => input
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
    };
    let header_dp_rank = input
        .headers
        .get("x-data-parallel-rank")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok());
    let (is_single, specs) = normalize(&mut fields, input).map_err(reject)?;
    drop(fields);
    let bootstraps = if engine_side {
        bootstraps(&obj, &specs).map_err(reject)?
    } else {
        Vec::new()
    };
    grammar_needs_tokenizer(&obj, &specs, input.engine).map_err(reject)?;
    let items = item::build(obj, is_single, specs, header_dp_rank);
    Ok(GenerateRequest {
        stream,
        is_single,
        client_id,
        items,
        bootstraps,
    })
}

/// SGLang's abort of a grammar request on a server without a grammar backend, which a
/// `--skip-tokenizer-init` server never builds (`constrained/grammar_manager.py:36-45`).
pub const GRAMMAR_NEEDS_TOKENIZER: &str = "Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported when the server is launched with --grammar-backend none";

/// The scheduler's last check (`Scheduler.handle_generate_request` →
/// `GrammarManager.process_req_with_grammar`, `constrained/grammar_manager.py:148-159`): an item
/// with `json_schema`, `regex`, `ebnf` or `structural_tag` (each read as `value or None`,
/// `sampling_params.py:238-242`) is aborted with a 400 ([`GRAMMAR_NEEDS_TOKENIZER`]) where
/// there is no tokenizer. Applied only for an engine known to have none
/// ([`genfront_protocol::EngineInfo::tokenizer`] `Some(false)`); run after every item's other
/// checks (SGLang runs it per item, after that item's scheduler checks).
fn grammar_needs_tokenizer(
    obj: &Obj,
    specs: &[ItemSpec],
    engine: &genfront_protocol::EngineInfo,
) -> Result<(), GenerateError> {
    if engine.tokenizer != Some(false) {
        return Ok(());
    }
    let truthy = |v: &Value| match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(t) => !t.is_empty(),
        Value::Array(l) => !l.is_empty(),
        Value::Object(o) => !o.is_empty(),
    };
    let grammar = |b: usize| {
        let sp = match present(obj, "sampling_params") {
            Some(Value::Array(list)) => list.get(b),
            sp => sp,
        };
        sp.and_then(Value::as_object).is_some_and(|sp| {
            ["json_schema", "regex", "ebnf", "structural_tag"]
                .iter()
                .any(|k| sp.get(*k).is_some_and(truthy))
        })
    };
    if specs.iter().any(|s| grammar(s.b)) {
        return Err(GenerateError::validation(GRAMMAR_NEEDS_TOKENIZER));
    }
    Ok(())
}

/// SGLang's answer to a failed pydantic bind (`request::pydantic`): the flat 400 envelope with
/// FastAPI's message.
fn schema_error(errors: &[pydantic::PyError]) -> GenerateError {
    GenerateError::Schema {
        message: pydantic::message(errors),
        param: None,
    }
}

/// The `param` that marks a [`GenerateError::Validation`] as the JSON contract gate's refusal
/// (`http_server.py:937-939`), which SGLang answers 400 `{"error": "<text>"}` whether or not the
/// request streams (`errors::error_response` renders it so).
pub(crate) const CONTRACT_GATE: &str = "sglang.api.v1.GenerateRequest";

/// The contract gate's refusal with its text ([`CONTRACT_GATE`]).
pub(crate) fn contract_error(text: String) -> GenerateError {
    GenerateError::Validation {
        message: text,
        param: Some(CONTRACT_GATE.to_owned()),
    }
}

// === impl Fields ===

impl<'a> Fields<'a> {
    /// Type-check and read every field genfront uses (pydantic's pass over `GenerateReqInput`).
    pub(crate) fn read(obj: &'a Obj) -> Result<Self, GenerateError> {
        let sampling = match present(obj, "sampling_params") {
            None => None,
            Some(Value::Array(list)) => Some(OneOrList::List(
                list.iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let path = format!("body.sampling_params.{i}");
                        SamplingParams::read(json::obj_of(v, &path)?, &path)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            )),
            Some(v) => Some(OneOrList::One(SamplingParams::read(
                json::obj_of(v, "body.sampling_params")?,
                "body.sampling_params",
            )?)),
        };
        let input_embeds = present(obj, "input_embeds")
            .map(|v| json::list_of(v, "body.input_embeds"))
            .transpose()?;
        let opt_str_item = |v: &'a Value, path: &str| -> Result<Option<&'a str>, GenerateError> {
            if v.is_null() {
                Ok(None)
            } else {
                json::str_of(v, path).map(Some)
            }
        };
        // pydantic's lax `int` (`true` → 1, `" 2 "` → 2): the contract gate is strict on
        // `routed_dp_rank` only, so the deprecated alias keeps pydantic's coercions.
        let lax = |key: &str| {
            present(obj, key)
                .map(|v| {
                    json::lax_int(v)
                        .ok_or_else(|| json::type_error(&json::body_path(key), "a valid integer"))
                })
                .transpose()
        };
        let dp_rank = match lax("routed_dp_rank")? {
            Some(r) => Some(r),
            None => lax("data_parallel_rank")?,
        };
        Ok(Self {
            rid: opt_one_or_list(obj, "rid", json::str_of)?,
            text: opt_one_or_list(obj, "text", json::str_of)?,
            input_ids: opt_token_lists(obj, "input_ids")?.map(IdLists::from),
            input_embeds,
            sampling,
            return_logprob: opt_one_or_list(obj, "return_logprob", json::lax_bool_of)?,
            logprob_start_len: opt_one_or_list(obj, "logprob_start_len", json::int_of)?,
            top_logprobs_num: opt_one_or_list(obj, "top_logprobs_num", json::int_of)?,
            token_ids_logprob: opt_token_lists(obj, "token_ids_logprob")?,
            return_sampling_mask: opt_one_or_list(obj, "return_sampling_mask", json::lax_bool_of)?,
            flat_top_logprobs: json::req_lax_bool(obj, "return_flat_raw_top_logprobs", false)?,
            flat_top_logprobs_b64: json::req_lax_bool(
                obj,
                "return_flat_raw_top_logprobs_b64",
                false,
            )?,
            flat_output_top_logprobs: json::req_lax_bool(
                obj,
                "return_flat_raw_output_top_logprobs",
                false,
            )?,
            multi_item_delimiters: present(obj, "multi_item_delimiter_indices").is_some(),
            stream: json::req_lax_bool(obj, "stream", false)?,
            sampling_logprobs_mode: present(obj, "sampling_logprobs_mode"),
            hidden_states: hidden_states_requested(obj)?,
            routed_experts: json::req_lax_bool(obj, "return_routed_experts", false)?,
            routed_experts_start_len: match obj.get("routed_experts_start_len") {
                None => 0,
                Some(v) => json::int_of(v, "body.routed_experts_start_len")?,
            },
            return_prompt_token_ids: json::req_lax_bool(obj, "return_prompt_token_ids", false)?,
            session_id: opt_str(obj, "session_id")?,
            session_params: present(obj, "session_params")
                .map(|v| json::obj_of(v, "body.session_params"))
                .transpose()?
                .is_some(),
            session_params_obj: present(obj, "session_params").and_then(Value::as_object),
            lora_path: opt_one_or_list(obj, "lora_path", opt_str_item)?,
            kv_hints: present(obj, "kv_hints"),
            bootstrap_lists: BOOTSTRAP_KEYS
                .iter()
                .filter_map(|k| match obj.get(*k) {
                    Some(Value::Array(l)) => Some((*k, l.len())),
                    _ => None,
                })
                .collect(),
            custom_logit_processor: opt_one_or_list(obj, "custom_logit_processor", opt_str_item)?,
            dp_rank,
            priority: opt_int(obj, "priority")?,
            extra_key: opt_one_or_list(obj, "extra_key", json::str_of)?,
            cache_salt: opt_one_or_list(obj, "cache_salt", json::str_of)?,
            max_thinking_tokens: opt_int(obj, "max_thinking_tokens")?,
            watermark: match present(obj, "watermark") {
                None => None,
                Some(Value::Array(items)) => Some(OneOrList::List(items.iter().collect())),
                Some(v) => Some(OneOrList::One(v)),
            },
            watermark_raw: present(obj, "watermark"),
        })
    }
}

/// SGLang's P/D bootstrap keys (`GenerateReqInput`, "For disaggregated inference"), each a
/// scalar or a per-item list. A client may send them, as SGLang's own server accepts them
/// (pydantic types and the contract gate check them; `_normalize_bootstrap_params`,
/// `io_struct.py:907-950`, spreads them over a batch): an aggregated engine ignores them and
/// gets them as sent; on a P/D route genfront's router picks the prefill and the room and the
/// engine client writes the router's `bootstrap_host` / `_port` / `_room` over the client's
/// (and drops the companions), so a client value never reaches a P/D leg (`client/body.rs`).
const BOOTSTRAP_KEYS: &[&str] = &[
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "bootstrap_pair_key",
    "decode_tp_size",
];

/// Type checks (pydantic) of fields genfront does not otherwise use.
fn check_other_types(obj: &Obj) -> Result<(), GenerateError> {
    json::req_lax_bool(obj, "return_text_in_logprobs", false)?;
    json::req_lax_bool(obj, "log_metrics", true)?;
    opt_int(obj, "disagg_prefill_dp_rank")?;
    Ok(())
}

/// The bootstrap coordinates of each engine request, as an SGLang P/D engine reads them: per
/// prompt a scalar or the prompt's entry of a list (`bootstrap_host`, `bootstrap_port`,
/// `bootstrap_room`); a scalar room is offset by the engine request's flat index (batch-major,
/// as genfront's client numbers split samples), a listed room by the sample index within its
/// prompt. An item without a room has none (a P/D engine refuses it).
fn bootstraps(obj: &Obj, specs: &[ItemSpec]) -> Result<Vec<Option<Bootstrap>>, GenerateError> {
    fn at(obj: &Obj, key: &str, b: usize) -> (Option<Value>, bool) {
        match obj.get(key) {
            None | Some(Value::Null) => (None, false),
            Some(Value::Array(items)) => (items.get(b).filter(|v| !v.is_null()).cloned(), true),
            Some(v) => (Some(v.clone()), false),
        }
    }
    let mut out = Vec::with_capacity(specs.len());
    let mut prev_b = None;
    let mut sample = 0u64;
    for (flat, spec) in specs.iter().enumerate() {
        let b = spec.b;
        sample = if prev_b == Some(b) { sample + 1 } else { 0 };
        prev_b = Some(b);
        let (room, listed) = at(obj, "bootstrap_room", b);
        let Some(room) = room else {
            out.push(None);
            continue;
        };
        let room = json::int_of(&room, "body.bootstrap_room")?;
        let room = u64::try_from(room)
            .map_err(|_| json::type_error("body.bootstrap_room", "a non-negative integer"))?;
        let offset = if listed { sample } else { flat as u64 };
        let host = match at(obj, "bootstrap_host", b).0 {
            Some(v) => json::str_of(&v, "body.bootstrap_host")?.to_owned(),
            None => String::new(),
        };
        let port = match at(obj, "bootstrap_port", b).0 {
            Some(v) => Some(
                u16::try_from(json::int_of(&v, "body.bootstrap_port")?)
                    .map_err(|_| json::type_error("body.bootstrap_port", "a valid port"))?,
            ),
            None => None,
        };
        out.push(Some(Bootstrap {
            host,
            port,
            room: room.wrapping_add(offset) & (i64::MAX as u64),
        }));
    }
    Ok(out)
}

/// `return_hidden_states` (`bool`, a mode string, or a per-item list): whether any item asks for
/// hidden states. genfront's engines cannot return them.
fn hidden_states_requested(obj: &Obj) -> Result<bool, GenerateError> {
    fn one(v: &Value, path: &str) -> Result<bool, GenerateError> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::String(s) => Ok(!s.is_empty() && s != "none"),
            _ => Err(json::type_error(path, "a valid boolean or string")),
        }
    }
    match obj.get("return_hidden_states") {
        None => Ok(false),
        Some(Value::Array(items)) => {
            let mut any = false;
            for (i, v) in items.iter().enumerate() {
                any |= one(v, &format!("body.return_hidden_states.{i}"))?;
            }
            Ok(any)
        }
        Some(v) => one(v, "body.return_hidden_states"),
    }
}

// === normalization ===

/// SGLang's `normalize_batch_and_arguments` and the checks `generate_request` runs right after it,
/// then the per-item checks. Returns whether the request is single and one spec per engine request.
fn normalize(
    f: &mut Fields<'_>,
    input: &ParseInput<'_>,
) -> Result<(bool, Vec<ItemSpec>), GenerateError> {
    let invalid = |m: &str| Err(GenerateError::validation(m));
    // _validate_inputs
    let given = [
        f.text.is_some(),
        f.input_ids.is_some(),
        f.input_embeds.is_some(),
    ];
    if given.iter().all(|g| !g) || given.iter().all(|g| *g) {
        return invalid("Either text, input_ids or input_embeds should be provided.");
    }
    if f.flat_top_logprobs && f.multi_item_delimiters {
        return invalid(
            "return_flat_raw_top_logprobs does not support multi-item scoring: delimiter-sparse top logprob rows have no contiguous position mapping.",
        );
    }
    if f.flat_output_top_logprobs && f.stream {
        return invalid(
            "return_flat_raw_output_top_logprobs is only set on the finished response and does not support stream=True.",
        );
    }
    if f.flat_top_logprobs_b64 && !(f.flat_top_logprobs || f.flat_output_top_logprobs) {
        return invalid(
            "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs or return_flat_raw_output_top_logprobs.",
        );
    }
    // _determine_batch_size
    let (kind, mut is_single, batch_size) = if let Some(text) = &f.text {
        let with_ids = f.input_ids.is_some();
        match text {
            OneOrList::One(_) => (InputKind::Text { with_ids }, true, 1),
            OneOrList::List(l) => (InputKind::Text { with_ids }, false, l.len()),
        }
    } else if let Some(ids) = &f.input_ids {
        match ids {
            IdLists::Flat(v) if v.is_empty() => return invalid("input_ids cannot be empty."),
            IdLists::Flat(_) => (InputKind::Ids, true, 1),
            IdLists::Nested(rows) => (InputKind::Ids, false, rows.len()),
        }
    } else {
        let embeds = f.input_embeds.map(Vec::as_slice).unwrap_or_default();
        let single = matches!(embeds.first(), Some(Value::Array(row)) if matches!(row.first(), Some(Value::Number(_))));
        (
            InputKind::Embeds,
            single,
            if single { 1 } else { embeds.len() },
        )
    };
    if f.session_id.is_some() && f.session_params {
        return invalid("session_id and session_params cannot both be set.");
    }
    // _handle_parallel_sampling
    let n = match &f.sampling {
        None => 1,
        Some(OneOrList::One(sp)) => sp.n,
        Some(OneOrList::List(list)) => {
            let first = list.first().map_or(1, |sp| sp.n);
            if list.iter().any(|sp| sp.n != first) {
                return invalid(
                    "The parallel_sample_num should be the same for all samples in sample params.",
                );
            }
            first
        }
    };
    // `_handle_beam_search_parallel_sampling` (`io_struct.py:525-529`): a beam request
    // (`beam_width > 1`, the first item's for a batch) is not fanned out: its `n` is the number
    // of returned beams, which the engine's beam coordinator bounds (`n <= beam_width`).
    let beam = match &f.sampling {
        Some(OneOrList::One(sp)) => sp.beam_width,
        Some(OneOrList::List(list)) => list.first().map_or(1, |sp| sp.beam_width),
        None => 1,
    };
    let n = if beam > 1 { 1 } else { n };
    // `n: null` (the first item's for a batch) is compared with 1 (`None > 1`, a `TypeError`:
    // SGLang answers 500): genfront's 400.
    let n_null = match &f.sampling {
        Some(OneOrList::One(sp)) => sp.n_null,
        Some(OneOrList::List(list)) => list.first().is_some_and(|sp| sp.n_null),
        None => false,
    };
    if n_null && beam <= 1 {
        return invalid("sampling_params.n must be an integer, got None.");
    }
    // SGLang has no cap of its own, but each sample is an engine request holding its own copy
    // of the prompt: the fan-out is bounded by the engine's `max_running_requests` or
    // [`crate::MAX_FANOUT_UNKNOWN`], whichever is larger (SGLang queues samples beyond its
    // running capacity, so the engine's figure alone is not its limit).
    let max_n = i128::from(
        input
            .engine
            .max_num_seqs
            .unwrap_or(0)
            .max(crate::MAX_FANOUT_UNKNOWN),
    );
    if n > max_n {
        return Err(GenerateError::validation(format!(
            "sampling_params.n={n} exceeds the maximum number of parallel samples ({max_n})."
        )));
    }
    let n = usize::try_from(n.max(1)).unwrap_or(1);
    if n > 1 && is_single {
        is_single = false;
    }
    let rows = if is_single {
        single_rows(f, kind)?
    } else {
        batch_rows(f, kind, batch_size, n)?
    };
    let f = &*f;
    // generate_request: checks after normalization. `_set_default_priority`
    // (`tokenizer_manager.py:4013-4026`) first.
    if f.priority.is_some_and(|p| i64::try_from(p).is_err()) {
        return invalid(
            "priority must be a signed 64-bit integer between -9223372036854775808 and 9223372036854775807",
        );
    }
    if f.max_thinking_tokens.is_some() {
        return invalid(
            "max_thinking_tokens requires the server to be launched with --enable-strict-thinking",
        );
    }
    // `routed_dp_rank` (or its `data_parallel_rank` alias) against the engine's DP ranks
    // (`tokenizer_manager.py:915-925`): 0 is ignored on a single-rank engine.
    if let (Some(rank), Some(ranks)) = (f.dp_rank, dp_ranks(input.engine))
        && !(ranks <= 1 && rank == 0)
        && (rank < 0 || rank >= ranks)
    {
        return Err(GenerateError::validation(format!(
            "routed_dp_rank={rank} out of range [0, {ranks})"
        )));
    }
    // `_validate_and_resolve_lora` (`tokenizer_manager.py:3723-3742`): on a server without
    // LoRA, any truthy `lora_path` (a non-empty string, a non-empty list) is refused naming the
    // first non-empty adapter (`None` when there is none).
    if input.engine.features.lora == Some(false)
        && let Some(first) = lora_requested(f.lora_path.as_ref(), is_single)
    {
        return Err(GenerateError::validation(format!(
            "LoRA adapter '{}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.",
            first.unwrap_or("None")
        )));
    }
    if !is_single
        && let Some(OneOrList::List(l)) = &f.lora_path
        && l.len() < batch_size
    {
        // SGLang indexes past the list's end (`IndexError`, a 500): genfront's 400.
        return invalid("The length of lora_path should be equal to the batch size.");
    }
    if is_single
        && let Some(OneOrList::List(l)) = &f.lora_path
        && !l.is_empty()
    {
        // A LoRA server resolves a list for one request as if it were a batch; genfront
        // refuses it (a documented deviation).
        return invalid("lora_path should be a scalar for a single request.");
    }
    item::validate_and_expand(f, kind, rows, n, input.engine, is_single)
        .map(|specs| (is_single, specs))
}

/// Whether `lora_path` asks for an adapter as SGLang reads it after normalization (`not
/// obj.lora_path` skips the check), and the adapter its refusal names: the string, or the first
/// non-empty entry of the list. A batch's string became a list of copies, so even `""` asks
/// (naming `None`).
fn lora_requested<'a>(
    lora: Option<&OneOrList<Option<&'a str>>>,
    is_single: bool,
) -> Option<Option<&'a str>> {
    match lora? {
        OneOrList::One(None) => None,
        OneOrList::One(Some("")) => (!is_single).then_some(None),
        OneOrList::One(Some(s)) => Some(Some(*s)),
        OneOrList::List(l) if l.is_empty() => None,
        OneOrList::List(l) => Some(l.iter().flatten().copied().find(|s| !s.is_empty())),
    }
}

/// The engine's DP rank count: [`genfront_protocol::EngineFeatures::dp_size`] when known (the
/// mock: 1), else a native SGLang worker's own server info (`dp_size`). `None` when neither
/// says: the rank is then left to the engine.
fn dp_ranks(engine: &genfront_protocol::EngineInfo) -> Option<i128> {
    if let Some(n) = engine.features.dp_size {
        return Some(i128::from(n));
    }
    engine
        .server_info
        .as_ref()?
        .get("dp_size")
        .and_then(Value::as_u64)
        .map(i128::from)
}

/// One prompt of the (normalized) batch, before parallel-sampling expansion.
#[derive(Debug)]
pub(crate) struct Row {
    /// Batch index.
    pub b: usize,
    /// The client-visible rid (`None` for `n > 1`, where each copy gets a fresh uuid).
    pub rid: Option<String>,
    /// The token ids (`None` for text-only or embeds inputs).
    pub ids: Option<PromptIds>,
    pub return_logprob: bool,
    pub logprob_start_len: i128,
    pub top_logprobs_num: i128,
    pub token_ids_logprob: Option<Vec<i64>>,
    pub return_sampling_mask: bool,
    pub lora: Option<String>,
    pub custom_logit_processor: bool,
    pub extra_key: Option<String>,
    pub cache_salt: Option<String>,
}

/// A fresh `uuid4().hex` rid (SGLang's `normalize` / `regenerate_rid`).
pub(crate) fn fresh_rid() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// `_normalize_single_inputs`.
fn single_rows(f: &mut Fields<'_>, kind: InputKind) -> Result<Vec<Row>, GenerateError> {
    let scalar = |name: &str| {
        GenerateError::validation(format!("{name} should be a scalar for a single request."))
    };
    let rid = match &f.rid {
        None => fresh_rid(),
        Some(OneOrList::One(r)) => (*r).to_owned(),
        Some(OneOrList::List(_)) => {
            return Err(GenerateError::validation(
                "rid should be a string for a single request.",
            ));
        }
    };
    if matches!(f.sampling, Some(OneOrList::List(_))) {
        return Err(GenerateError::validation(
            "sampling_params should be a dict for a single request.",
        ));
    }
    // `_normalize_single_inputs` (`io_struct.py:559-587`) leaves a list where one request
    // holds a scalar; SGLang then reads it by Python truthiness (`if obj.return_logprob`): an
    // empty list is off, a non-empty one on.
    let one = |v: &Option<OneOrList<bool>>, default: bool| match v {
        None => default,
        Some(OneOrList::One(x)) => *x,
        Some(OneOrList::List(l)) => !l.is_empty(),
    };
    let return_logprob = one(&f.return_logprob, false);
    // A list start or count is ignored without logprobs (the scheduler resets the start,
    // `scheduler.py:3256-3258`); with them SGLang's scheduler compares the list with ints and
    // fails (`TypeError`): genfront refuses that (a documented deviation).
    let one_int = |v: &Option<OneOrList<i128>>, name: &str, default: i128| match v {
        None => Ok(default),
        Some(OneOrList::One(x)) => Ok(*x),
        Some(OneOrList::List(_)) if !return_logprob => Ok(default),
        Some(OneOrList::List(_)) => Err(scalar(name)),
    };
    let token_ids_logprob = match &f.token_ids_logprob {
        None => None,
        Some(TokenLists::Flat(v)) if v.is_empty() => None,
        Some(TokenLists::Flat(v)) => Some(v.clone()),
        Some(TokenLists::Nested(_)) => {
            return Err(GenerateError::validation(
                "token_ids_logprob must be a flat list of integers.",
            ));
        }
    };
    let key = |v: &Option<OneOrList<&str>>, name: &str| match v {
        None => Ok(None),
        Some(OneOrList::One(s)) => Ok(Some(*s).filter(|s| !s.is_empty()).map(str::to_owned)),
        Some(OneOrList::List(_)) => Err(GenerateError::validation(format!(
            "{name} should be a string for a single request."
        ))),
    };
    // `kv_hints` (`io_struct.py:583-587`): one envelope, decoded when truthy.
    match f.kv_hints {
        Some(Value::Array(_)) => {
            return Err(GenerateError::validation(
                "kv_hints should be a single envelope for one request.",
            ));
        }
        Some(v) if !crate::json::py_falsy(v) => {
            if let Some(e) = kv_hints_error(v) {
                return Err(GenerateError::validation(e));
            }
        }
        _ => {}
    }
    let ids = match (kind, &mut f.input_ids) {
        (InputKind::Ids | InputKind::Text { with_ids: true }, Some(IdLists::Flat(v))) => {
            Some(std::mem::take(v))
        }
        (InputKind::Text { with_ids: true }, Some(IdLists::Nested(_))) => {
            return Err(GenerateError::validation(
                "input_ids should be a flat list of integers for a single text request.",
            ));
        }
        _ => None,
    };
    Ok(vec![Row {
        b: 0,
        rid: Some(rid),
        ids,
        return_logprob,
        logprob_start_len: one_int(&f.logprob_start_len, "logprob_start_len", -1)?,
        top_logprobs_num: one_int(&f.top_logprobs_num, "top_logprobs_num", 0)?,
        token_ids_logprob,
        return_sampling_mask: one(&f.return_sampling_mask, false),
        // A non-empty list was answered in `normalize` (LoRA off: the engine's refusal; else
        // genfront's); an empty one is no adapter.
        lora: match &f.lora_path {
            Some(OneOrList::One(s)) => s.map(str::to_owned),
            _ => None,
        },
        // Truthy: a non-empty string, or a non-empty list (refused as the server has no custom
        // logit processors, `tokenizer_manager.py:1412-1419`).
        custom_logit_processor: match &f.custom_logit_processor {
            None => false,
            Some(OneOrList::One(s)) => s.is_some_and(|s| !s.is_empty()),
            Some(OneOrList::List(l)) => !l.is_empty(),
        },
        extra_key: key(&f.extra_key, "extra_key")?,
        cache_salt: key(&f.cache_salt, "cache_salt")?,
    }])
}

/// `_normalize_batch_inputs` (with `num = batch_size * n`).
fn batch_rows(
    f: &mut Fields<'_>,
    kind: InputKind,
    batch_size: usize,
    n: usize,
) -> Result<Vec<Row>, GenerateError> {
    let invalid = |m: String| GenerateError::validation(m);
    let length = |name: &str| {
        invalid(format!(
            "The length of {name} should be equal to the batch size."
        ))
    };
    // _expand_inputs
    let single_text = matches!(f.text, Some(OneOrList::One(_)));
    let mut ids: Option<Vec<PromptIds>> = match (kind, &mut f.input_ids) {
        (InputKind::Embeds, _) | (InputKind::Text { with_ids: false }, _) | (_, None) => None,
        (_, Some(IdLists::Nested(rows))) => Some(std::mem::take(rows)),
        // A single prompt fanned out by `n > 1` becomes a batch of one.
        (InputKind::Ids, Some(IdLists::Flat(v))) => Some(vec![std::mem::take(v)]),
        (InputKind::Text { .. }, Some(IdLists::Flat(v))) => {
            if batch_size == 1 && single_text {
                Some(vec![std::mem::take(v)])
            } else {
                return Err(invalid(
                    "input_ids should be a list of lists for batch processing.".to_owned(),
                ));
            }
        }
    };
    if ids.as_ref().is_some_and(|rows| rows.len() != batch_size) {
        return Err(length("input_ids"));
    }
    // _normalize_rid (a fanned-out request's copies get fresh rids later)
    let rids: Vec<String> = match &f.rid {
        None => Vec::new(),
        Some(OneOrList::One(r)) => (0..batch_size).map(|i| format!("{r}_{i}")).collect(),
        Some(OneOrList::List(l)) => {
            if l.len() != batch_size {
                return Err(invalid(
                    "The specified rids length mismatch with the batch_size for batch processing."
                        .to_owned(),
                ));
            }
            l.iter().map(|s| (*s).to_owned()).collect()
        }
    };
    // _normalize_sampling_params: a per-item list must cover the batch (`lora_path`'s is
    // checked after SGLang's LoRA check, in `normalize`).
    if let Some(OneOrList::List(l)) = &f.sampling
        && l.len() < batch_size
    {
        return Err(length("sampling_params"));
    }
    // _normalize_logprob_params
    fn per_item<T: Clone>(
        v: &Option<OneOrList<T>>,
        name: &str,
        n: usize,
        batch_size: usize,
    ) -> Result<(), GenerateError> {
        if let Some(OneOrList::List(l)) = v {
            if n > 1 {
                return Err(GenerateError::validation(format!(
                    "Cannot use list {name} with parallel_sample_num > 1"
                )));
            }
            if l.len() < batch_size {
                return Err(GenerateError::validation(format!(
                    "The length of {name} should be equal to the batch size."
                )));
            }
        }
        Ok(())
    }
    per_item(&f.return_logprob, "return_logprob", n, batch_size)?;
    per_item(&f.logprob_start_len, "logprob_start_len", n, batch_size)?;
    per_item(&f.top_logprobs_num, "top_logprobs_num", n, batch_size)?;
    per_item(
        &f.return_sampling_mask,
        "return_sampling_mask",
        n,
        batch_size,
    )?;
    if let Some(TokenLists::Nested(rows)) = &f.token_ids_logprob {
        if n > 1 {
            return Err(invalid(
                "Cannot use list token_ids_logprob with parallel_sample_num > 1".to_owned(),
            ));
        }
        if rows.len() < batch_size {
            return Err(length("token_ids_logprob"));
        }
    }
    if let Some(OneOrList::List(l)) = &f.custom_logit_processor {
        if n > 1 {
            return Err(invalid(
                "Cannot use list custom_logit_processor with parallel_sample_num > 1".to_owned(),
            ));
        }
        if l.len() < batch_size {
            return Err(length("custom_logit_processor"));
        }
    }
    for (v, name) in [(&f.extra_key, "extra_key"), (&f.cache_salt, "cache_salt")] {
        if let Some(OneOrList::List(l)) = v
            && l.len() != batch_size
        {
            return Err(length(name));
        }
    }
    // _normalize_kv_hints (`io_struct.py:888-905`): one envelope for every item (decoded even
    // when empty), or one per prompt (decoded when truthy).
    match f.kv_hints {
        Some(Value::Array(l)) => {
            if l.len() != batch_size {
                return Err(length("kv_hints"));
            }
            if let Some(e) = l
                .iter()
                .filter(|v| !crate::json::py_falsy(v))
                .find_map(kv_hints_error)
            {
                return Err(invalid(e));
            }
        }
        Some(v) => {
            if let Some(e) = kv_hints_error(v) {
                return Err(invalid(e));
            }
        }
        None => {}
    }
    // _normalize_bootstrap_params (`io_struct.py:907-950`): a list is indexed per prompt, so
    // one shorter than the batch fails in SGLang (`IndexError`, a 500): genfront's 400.
    if let Some((name, _)) = f.bootstrap_lists.iter().find(|(_, len)| *len < batch_size) {
        return Err(length(name));
    }
    // _validate_rid_uniqueness
    if let Some(OneOrList::List(l)) = &f.rid {
        let mut dups: Vec<&str> = Vec::new();
        for (i, r) in l.iter().enumerate() {
            if !dups.contains(r) && l.get(i + 1..).is_some_and(|rest| rest.contains(r)) {
                dups.push(r);
            }
        }
        if !dups.is_empty() {
            return Err(invalid(format!(
                "Duplicate request IDs detected within the request: {}",
                str_list_repr(dups)
            )));
        }
    }
    let rows = (0..batch_size)
        .map(|b| Row {
            b,
            rid: if n > 1 { None } else { rids.get(b).cloned() },
            ids: ids
                .as_mut()
                .and_then(|rows| rows.get_mut(b))
                .map(std::mem::take),
            return_logprob: f
                .return_logprob
                .as_ref()
                .and_then(|v| v.item(b))
                .unwrap_or(false),
            logprob_start_len: f
                .logprob_start_len
                .as_ref()
                .and_then(|v| v.item(b))
                .unwrap_or(-1),
            top_logprobs_num: f
                .top_logprobs_num
                .as_ref()
                .and_then(|v| v.item(b))
                .unwrap_or(0),
            token_ids_logprob: match &f.token_ids_logprob {
                None => None,
                Some(TokenLists::Flat(v)) if v.is_empty() => None,
                Some(TokenLists::Flat(v)) => Some(v.clone()),
                Some(TokenLists::Nested(rows)) => rows.get(b).cloned(),
            },
            return_sampling_mask: f
                .return_sampling_mask
                .as_ref()
                .and_then(|v| v.item(b))
                .unwrap_or(false),
            lora: f
                .lora_path
                .as_ref()
                .and_then(|v| v.item(b))
                .flatten()
                .map(str::to_owned),
            custom_logit_processor: f
                .custom_logit_processor
                .as_ref()
                .and_then(|v| v.item(b))
                .flatten()
                .is_some_and(|s| !s.is_empty()),
            extra_key: f
                .extra_key
                .as_ref()
                .and_then(|v| v.item(b))
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            cache_salt: f
                .cache_salt
                .as_ref()
                .and_then(|v| v.item(b))
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        })
        .collect();
    Ok(rows)
}

/// `decode_kv_hints_envelope` (`managers/kv_hints.py:43-55`, `msgspec.convert` into
/// `KvHintsEnvelope {protocol_version: str, message_id: str, actions: List[KvHintAction] = []}`,
/// `KvHintAction {action_id, action_type, action_version: str, payload: Dict = {}}`): the
/// first error in msgspec's order (present keys in body order, then the missing required
/// fields), as `Malformed kv_hints envelope: <msgspec text>`. String types were checked by the
/// contract gate.
fn kv_hints_error(v: &Value) -> Option<String> {
    fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(n) if n.is_f64() => "float",
            Value::Number(_) => "int",
            Value::String(_) => "str",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
    fn missing(m: &Obj, fields: &[&str], at: &str) -> Option<String> {
        let f = fields.iter().find(|f| !m.contains_key(**f))?;
        Some(if at == "$" {
            format!("Object missing required field `{f}`")
        } else {
            format!("Object missing required field `{f}` - at `{at}`")
        })
    }
    fn action(v: &Value, at: &str) -> Option<String> {
        let Value::Object(m) = v else {
            return Some(format!("Expected `object`, got `{}` - at `{at}`", kind(v)));
        };
        if let Some(p) = m.get("payload")
            && !p.is_object()
        {
            return Some(format!(
                "Expected `object`, got `{}` - at `{at}.payload`",
                kind(p)
            ));
        }
        missing(m, &["action_id", "action_type", "action_version"], at)
    }
    let text = (|| {
        let Value::Object(m) = v else {
            return Some(format!("Expected `object`, got `{}`", kind(v)));
        };
        if let Some(a) = m.get("actions") {
            let Value::Array(items) = a else {
                return Some(format!(
                    "Expected `array`, got `{}` - at `$.actions`",
                    kind(a)
                ));
            };
            if let Some(e) = items
                .iter()
                .enumerate()
                .find_map(|(i, x)| action(x, &format!("$.actions[{i}]")))
            {
                return Some(e);
            }
        }
        missing(m, &["protocol_version", "message_id"], "$")
    })()?;
    Some(format!("Malformed kv_hints envelope: {text}"))
}

#[cfg(test)]
mod tests {
    use genfront_format::ParseInput;
    use genfront_protocol::EngineInfo;
    use http::{HeaderMap, HeaderValue, header::CONTENT_TYPE};
    use serde_json::{Value, json};

    use super::{GRAMMAR_NEEDS_TOKENIZER, parse};

    fn outcome(body: &Value, tokenizer: Option<bool>) -> Result<(), (String, bool)> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let engine = EngineInfo {
            tokenizer,
            ..EngineInfo::default()
        };
        let bytes = serde_json::to_vec(body).expect("json");
        parse(
            &ParseInput {
                headers: &headers,
                body: &bytes,
                engine: &engine,
            },
            false,
        )
        .map(drop)
        .map_err(|r| (r.error.public_message().into_owned(), r.stream))
    }

    /// Without a tokenizer SGLang has no grammar backend: the scheduler aborts a constrained
    /// request with a 400 (`constrained/grammar_manager.py:36-45,148-159`); an empty constraint
    /// is unset (`value or None`). With a tokenizer, or an unknown one, it is forwarded.
    #[test]
    fn grammars_need_a_tokenizer() {
        for (key, value) in [
            ("json_schema", json!("{\"type\":\"object\"}")),
            ("regex", json!("[a-z]+")),
            ("ebnf", json!("root ::= \"a\"")),
            ("structural_tag", json!("{}")),
        ] {
            let body = json!({"input_ids": [5, 6, 7], "sampling_params": {key: value}});
            assert_eq!(
                outcome(&body, Some(false)),
                Err((GRAMMAR_NEEDS_TOKENIZER.to_owned(), false)),
                "{key}"
            );
            for tokenizer in [None, Some(true)] {
                assert_eq!(outcome(&body, tokenizer), Ok(()), "{key} on {tokenizer:?}");
            }
            let mut stream = body.clone();
            stream["stream"] = json!(true);
            assert_eq!(
                outcome(&stream, Some(false)),
                Err((GRAMMAR_NEEDS_TOKENIZER.to_owned(), true))
            );
            let empty = json!({"input_ids": [5, 6, 7], "sampling_params": {key: ""}});
            assert_eq!(outcome(&empty, Some(false)), Ok(()), "{key} empty");
        }
        // A batch: any constrained item.
        let batch = json!({"input_ids": [[5, 6], [7, 8]],
            "sampling_params": [{}, {"regex": "a"}]});
        assert_eq!(
            outcome(&batch, Some(false)),
            Err((GRAMMAR_NEEDS_TOKENIZER.to_owned(), false))
        );
        // The item's earlier checks answer first (the tokenizer manager's, here `stop`).
        let stop =
            json!({"input_ids": [5, 6, 7], "sampling_params": {"regex": "a", "stop": ["x"]}});
        assert!(
            outcome(&stop, Some(false))
                .expect_err("stop")
                .0
                .starts_with("stop=['x'] is unavailable")
        );
    }
}
