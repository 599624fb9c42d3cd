//! One engine request of a `/generate` call: SGLang's per-request checks
//! (`TokenizerManager._tokenize_one_request`, `_validate_one_request`, `SamplingParams.verify`),
//! the item's native body, and its projection to an [`EngineRequest`].

use genfront_format::GenerateError;
use genfront_protocol::{
    Constraints, EngineInfo, EngineRequest, NativeBody, OutputOptions, PromptLogprobOptions,
    RoutingHints, SamplingOptions, StopConditions,
};
use serde_json::{Number, Value};

use crate::FORMAT_NAME;
use crate::assemble::SubConfig;
use crate::flat::FlatTop;
use crate::json::{Obj, number_to_int};
use crate::pyfmt::{PyNum, int_list_repr};
use crate::request::{Fields, InputKind, Row, fresh_rid};
use crate::sampling::SamplingParams;

/// genfront's answer to a `text` prompt for an engine without a tokenizer (SGLang with
/// `--skip-tokenizer-init` says "The engine initialized with skip_tokenizer_init=True cannot
/// accept text prompts…"). An engine with a tokenizer, or one not known, gets the prompt.
pub const TEXT_UNSUPPORTED: &str = "genfront is token-in only: this server has no tokenizer configured, so it cannot accept text prompts. Please provide input_ids (token ids) instead of text.";
/// genfront's answer to an `input_embeds` prompt.
pub const EMBEDS_UNSUPPORTED: &str = "input_embeds is not supported: genfront is token-in only and its engines take token ids. Please provide input_ids instead.";

/// Everything of one engine request except its native body.
#[derive(Debug, Clone)]
pub(crate) struct ItemSpec {
    /// Index of the prompt in the batch.
    pub b: usize,
    /// Client-visible id (`meta_info.id`, abort key).
    pub rid: String,
    /// Whether the client sent `rid` (then the item body carries the item's rid).
    pub body_rid: bool,
    /// Whether `n > 1` fanned this prompt out (then the item body says `n: 1`).
    pub fanned_out: bool,
    /// Which copy of the fan-out this is (0 without one): `SamplingOptions::sample_index`.
    pub copy: u32,
    /// Prompt token ids (validated `< vocab_size`).
    pub token_ids: Vec<u32>,
    /// Typed `sampling_params` of the item.
    pub sampling: SamplingParams,
    /// `return_logprob`.
    pub return_logprob: bool,
    /// `logprob_start_len` (`-1` = output only).
    pub logprob_start_len: i64,
    /// `top_logprobs_num`.
    pub top_logprobs_num: u32,
    /// The prompt top-logprob form (`return_flat_raw_top_logprobs[_b64]`).
    pub flat_top: FlatTop,
    /// `token_ids_logprob` after SGLang's normalization (`[]` and `null` → `None`).
    pub token_ids_logprob: Option<Vec<u32>>,
    /// `return_sampling_mask`.
    pub return_sampling_mask: bool,
    /// `return_routed_experts`.
    pub routed_experts: bool,
    /// `routed_experts_start_len`.
    pub routed_experts_start: u32,
    /// `return_prompt_token_ids`.
    pub return_prompt_token_ids: bool,
    /// Routing hints read from the body (the DP-rank header is applied in [`build`]).
    pub routing: RoutingHints,
}

/// A validated engine request with its native body.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// The validated fields.
    pub spec: ItemSpec,
    /// The item's native body: the client's object (key order and unknown keys kept), with the
    /// batch-shaped keys sliced to this item.
    pub body: Value,
}

/// The per-request checks for every prompt, in SGLang's order, then the parallel-sampling
/// expansion (`n` copies per prompt, batch-major, each with a fresh `uuid4().hex` rid).
pub(crate) fn validate_and_expand(
    f: &Fields<'_>,
    kind: InputKind,
    rows: Vec<Row>,
    n: usize,
    engine: &EngineInfo,
    is_single: bool,
) -> Result<Vec<ItemSpec>, GenerateError> {
    let invalid = |m: String| Err(GenerateError::validation(m));
    let default_sampling = SamplingParams::read(&Obj::new(), "body.sampling_params")?;
    // Unknown facts skip their checks: the engine makes them and its own 400 is relayed. Ids
    // above `u32::MAX` are outside every vocabulary (and cannot be carried), so they are refused
    // even then.
    let context = engine.context_limit().map(i128::from);
    let max_req_input_len = max_req_input_len(engine).map(i128::from);
    let vocab = engine.vocab_size;
    let id_bound = vocab.map_or(i64::from(u32::MAX) + 1, i64::from);
    let vocab_text = vocab.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    let mut specs = Vec::with_capacity(rows.len().saturating_mul(n));
    for row in rows {
        // _tokenize_one_request
        // A text prompt goes to an engine that tokenizes it (or may: unknown is left to the
        // engine); genfront has no tokenizer, so its token-count checks are the engine's.
        let text_prompt = kind == (InputKind::Text { with_ids: false });
        let ids = match (kind, row.ids) {
            _ if text_prompt && engine.tokenizer != Some(false) => {
                crate::request::PromptIds::default()
            }
            (InputKind::Text { with_ids: false }, _) => return invalid(TEXT_UNSUPPORTED.into()),
            (InputKind::Embeds, _) => return invalid(EMBEDS_UNSUPPORTED.into()),
            (_, Some(ids)) => ids,
            (_, None) => return invalid(TEXT_UNSUPPORTED.into()),
        };
        if ids.is_empty() && !text_prompt {
            return invalid("input_ids cannot be empty.".into());
        }
        let sampling = match &f.sampling {
            None => default_sampling.clone(),
            Some(s) => s.item(row.b).unwrap_or_else(|| default_sampling.clone()),
        };
        // _validate_one_request
        let input_tokens = ids.len() as i128;
        let context = context.filter(|_| !text_prompt);
        if let Some(context) = context
            && input_tokens >= context
        {
            return invalid(format!(
                "The input ({input_tokens} tokens) is longer than the model's context length ({context} tokens)."
            ));
        }
        if let Some(context) = context
            && let Some(raw) = &sampling.max_new_tokens_raw
            && let Some(max_new) = number_to_int(raw)
            && max_new + input_tokens > context
        {
            let total = PyTotal(raw, input_tokens);
            return invalid(format!(
                "Requested token count exceeds the model's maximum context length of {context} tokens. You requested a total of {total} tokens: {input_tokens} tokens from the input messages and {} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
                PyNum(raw)
            ));
        }
        if ids.any_at_least(id_bound) {
            return invalid(format!(
                "The input_ids {} contains values greater than the vocab size ({vocab_text}).",
                int_list_repr(&ids.to_wide())
            ));
        }
        if let Some(neg) = ids.first_negative() {
            return invalid(format!(
                "The input_ids contain the negative token id {neg}; valid token ids are in [0, {vocab_text})."
            ));
        }
        let token_ids_logprob = match row.token_ids_logprob {
            None => None,
            Some(list) => {
                if let Some(bad) = list.iter().find(|&&id| id < 0 || id >= id_bound) {
                    return invalid(format!(
                        "token_ids_logprob contains out-of-vocabulary token id {bad}; valid range is [0, {vocab_text})."
                    ));
                }
                Some(
                    list.iter()
                        .filter_map(|&id| u32::try_from(id).ok())
                        .collect(),
                )
            }
        };
        if f.hidden_states {
            return invalid("The server is not configured to return hidden states. Please set `--return-hidden-states-mode last`, `--return-hidden-states-mode full`, or the legacy `--enable-return-hidden-states` flag.".into());
        }
        if row.custom_logit_processor {
            return invalid("The server is not configured to enable custom logit processor. Please set `--enable-custom-logit-processor` to enable this feature.".into());
        }
        // `tokenizer_manager.py:1431-1435` (`is not None`: a single request's list, even `[]`,
        // is set; a batch item's is its entry)
        let mode_set = match f.sampling_logprobs_mode {
            Some(Value::Array(_)) if is_single => true,
            Some(Value::Array(modes)) => modes.get(row.b).is_some_and(|m| !m.is_null()),
            Some(m) => !m.is_null(),
            None => false,
        };
        if mode_set && !row.return_sampling_mask {
            return invalid(
                "sampling_logprobs_mode can only be set when return_sampling_mask=true.".into(),
            );
        }
        // _create_tokenized_object: a top-level watermark goes into the sampling kwargs
        // (`tokenizer_manager.py:1553-1559`), checked by SamplingParams.__init__; then
        // SamplingParams(**sampling_params).normalize(None).verify(vocab_size), then the
        // watermark against the server's settings.
        // A single request's watermark is the value as sent (a list too); a batch item's is
        // its entry (`_normalize_watermark`).
        let top_watermark = if is_single {
            f.watermark_raw
        } else {
            f.watermark
                .as_ref()
                .and_then(|w| w.item(row.b))
                .filter(|v| !v.is_null())
        };
        let watermark = match (top_watermark, &sampling.watermark) {
            (Some(_), Some(_)) => {
                return invalid(
                    "watermark must be provided either at the request top level or inside sampling_params, not both".into(),
                );
            }
            (Some(top), None) => Some(top),
            (None, sp) => sp.as_ref(),
        };
        if let Some(e) = watermark.and_then(crate::sampling::watermark_shape_error) {
            return invalid(e.into());
        }
        // `SamplingParams(**sampling_kwargs)` (`tokenizer_manager.py:1565`) has no `choice`
        // argument (a `TypeError`: SGLang answers 500): genfront's 400.
        if sampling.choice {
            return invalid(
                "sampling_params.choice is not supported: SGLang's SamplingParams has no `choice` argument.".into(),
            );
        }
        sampling.verify(vocab, engine.tokenizer)?;
        if let Some(e) = watermark.and_then(crate::sampling::watermark_resolve_error) {
            return invalid(e.into());
        }
        // `SessionParams(**obj.session_params)` (`tokenizer_manager.py:1572-1574`,
        // `io_struct.py:135-156`): an unknown key is a `TypeError` (SGLang answers 500):
        // genfront's 400.
        if let Some(key) = f.session_params_obj.and_then(|m| {
            m.keys()
                .find(|k| !SESSION_PARAMS_KEYS.contains(&k.as_str()))
        }) {
            return invalid(format!(
                "session_params has an unexpected key {}: SGLang's SessionParams takes id, rid, offset, replace and drop_previous_output.",
                crate::pyfmt::str_repr(key)
            ));
        }
        // The scheduler's checks (`Scheduler.handle_generate_request`), run up front here.
        // The sampling mask's `top_k` (`scheduler.py:3160-3182`): after `normalize`
        // (`sampling_params.py:244-250`: a temperature in `[0, 1e-6)` is greedy, `top_k = 1`;
        // `-1` or unset is the whole vocabulary, `1 << 30`).
        if row.return_sampling_mask {
            let cap = engine
                .server_info
                .as_ref()
                .and_then(|s| s.get("sampling_mask_max_tokens"))
                .and_then(Value::as_i64)
                .unwrap_or(SAMPLING_MASK_MAX_TOKENS);
            let greedy = sampling
                .temperature()
                .is_some_and(|t| (0.0..1e-6).contains(&t));
            let top_k = if greedy {
                1
            } else {
                sampling.top_k().unwrap_or(1 << 30)
            };
            if top_k != 1 && !(1 < top_k && top_k <= cap) {
                return invalid(format!(
                    "return_sampling_mask requires top_k=1 for greedy sampling or finite 1 < top_k <= {cap}; got top_k={top_k}. Lower top_k or increase --sampling-mask-max-tokens."
                ));
            }
        }
        // `validate_input_length` (`managers/utils.py:259-289`).
        if let Some(max) = max_req_input_len.filter(|_| !text_prompt)
            && input_tokens >= max
        {
            return invalid(format!(
                "Input length ({input_tokens} tokens) exceeds the maximum allowed length ({max} tokens). Use a shorter input or enable --allow-auto-truncate."
            ));
        }
        let (logprob_start_len, top_logprobs_num) = if row.return_logprob {
            let start = row.logprob_start_len;
            if start < -1 {
                return invalid(format!(
                    "logprob_start_len must be -1 (output tokens only) or a non-negative prompt position, got {start}."
                ));
            }
            let prefill_only = sampling.max_new_tokens == Some(0);
            if start >= input_tokens && !prefill_only && !text_prompt {
                return invalid(format!(
                    "req.logprob_start_len={start} is higher than the number of input tokens len(req.origin_input_ids)={input_tokens}. Please use a smaller logprob_start_len."
                ));
            }
            let Ok(top) = u32::try_from(row.top_logprobs_num) else {
                return invalid(format!(
                    "top_logprobs_num must be a non-negative integer, got {}.",
                    row.top_logprobs_num
                ));
            };
            (i64::try_from(start).unwrap_or(i64::MAX), top)
        } else {
            (-1, 0)
        };
        let routed_experts_start = match u32::try_from(f.routed_experts_start_len) {
            _ if !f.routed_experts => 0,
            Ok(s) if i128::from(s) <= input_tokens || text_prompt => s,
            Ok(s) => {
                return invalid(format!(
                    "routed_experts_start_len={s} is higher than the number of input tokens {input_tokens}. Please use a smaller routed_experts_start_len."
                ));
            }
            Err(_) => {
                return invalid(format!(
                    "routed_experts_start_len must be non-negative, got {}.",
                    f.routed_experts_start_len
                ));
            }
        };
        // Moved, not copied, on the fast path: a 64 MiB prompt is held once.
        let mut token_ids: Vec<u32> = ids.into_u32();
        let routing = RoutingHints {
            dp_rank: f.dp_rank.and_then(|r| u32::try_from(r).ok()),
            priority: f.priority.and_then(|p| i64::try_from(p).ok()),
            cache_salt: row.cache_salt.or(row.extra_key),
            session_id: f.session_id.map(str::to_owned),
            lora: row.lora,
        };
        for copy in 0..n {
            specs.push(ItemSpec {
                b: row.b,
                rid: match (&row.rid, n) {
                    (Some(rid), 1) => rid.clone(),
                    _ => fresh_rid(),
                },
                body_rid: f.rid.is_some(),
                fanned_out: n > 1,
                copy: u32::try_from(copy).unwrap_or(u32::MAX),
                token_ids: if copy + 1 == n {
                    std::mem::take(&mut token_ids)
                } else {
                    token_ids.clone()
                },
                sampling: sampling.clone(),
                return_logprob: row.return_logprob,
                logprob_start_len,
                top_logprobs_num,
                flat_top: match (f.flat_top_logprobs, f.flat_top_logprobs_b64) {
                    (false, _) => FlatTop::Nested,
                    (true, false) => FlatTop::Plain,
                    (true, true) => FlatTop::Base64,
                },
                token_ids_logprob: token_ids_logprob.clone(),
                return_sampling_mask: row.return_sampling_mask,
                routed_experts: f.routed_experts,
                routed_experts_start,
                return_prompt_token_ids: f.return_prompt_token_ids,
                routing: routing.clone(),
            });
        }
    }
    Ok(specs)
}

/// `ServerArgs.sampling_mask_max_tokens`' default (`--sampling-mask-max-tokens`).
const SAMPLING_MASK_MAX_TOKENS: i64 = 4096;

/// The fields of SGLang's `SessionParams` (`io_struct.py:135-156`).
const SESSION_PARAMS_KEYS: &[&str] = &["id", "rid", "offset", "replace", "drop_previous_output"];

/// The scheduler's `max_req_input_len`: a native SGLang worker's own figure (its server info's
/// `max_req_input_len`), else what SGLang computes from the context length when the KV pool
/// is not the bound: `min(context_len - 1, kv_capacity - 1) - 5` (`managers/tp_worker.py:
/// 568-572`), i.e. `context_len - 6` (the mock: 32,762). `None` when the context is unknown.
pub(crate) fn max_req_input_len(engine: &EngineInfo) -> Option<u64> {
    if let Some(n) = engine
        .server_info
        .as_ref()
        .and_then(|s| s.get("max_req_input_len"))
        .and_then(Value::as_u64)
    {
        return Some(n);
    }
    engine
        .context_limit()
        .map(|c| u64::from(c).saturating_sub(6))
}

/// `max_new_tokens + input_tokens` printed as Python prints the sum (a float stays a float).
struct PyTotal<'a>(&'a Number, i128);

impl std::fmt::Display for PyTotal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_f64() {
            let sum = self.0.as_f64().unwrap_or(0.0) + self.1 as f64;
            f.write_str(&crate::pyfmt::float_repr(sum))
        } else {
            write!(f, "{}", number_to_int(self.0).unwrap_or(0) + self.1)
        }
    }
}

// === native bodies ===

/// Keys whose list form holds one value per batch item (`GenerateReqInput.__getitem__`).
const PER_ITEM_LIST_KEYS: &[&str] = &[
    "text",
    "input_ids",
    "input_embeds",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "return_sampling_mask",
    "lora_path",
    "custom_logit_processor",
    "extra_key",
    "cache_salt",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "bootstrap_pair_key",
    "decode_tp_size",
    "return_hidden_states",
];
/// Keys that are per item only when given as a list of batch length (multimodal data, hashes).
const BATCH_LENGTH_KEYS: &[&str] = &[
    "image_data",
    "video_data",
    "audio_data",
    "mm_hashes",
    "mm_content_hashes",
];
/// Keys whose per-item form is a list of lists.
const NESTED_KEYS: &[&str] = &["token_ids_logprob", "multi_item_delimiter_indices"];

/// Attach native bodies (and the header DP rank) to the specs. A single request's body is the
/// client's object itself (moved, not copied); batch and `n > 1` items get the object with the
/// batch-shaped keys sliced to their prompt.
pub(crate) fn build(
    obj: Obj,
    is_single: bool,
    specs: Vec<ItemSpec>,
    header_dp_rank: Option<u32>,
) -> Vec<Item> {
    let batch_size = specs.iter().map(|s| s.b + 1).max().unwrap_or(0);
    let finish = |mut spec: ItemSpec, body: Value| {
        if spec.routing.dp_rank.is_none() {
            spec.routing.dp_rank = header_dp_rank;
        }
        Item { spec, body }
    };
    if is_single && specs.len() == 1 {
        return specs
            .into_iter()
            .next()
            .map(|spec| finish(spec, Value::Object(obj)))
            .into_iter()
            .collect();
    }
    specs
        .into_iter()
        .map(|spec| {
            let body = item_body(&obj, &spec, batch_size);
            finish(spec, body)
        })
        .collect()
}

/// The item's body: every key of the client's object in its order, batch-shaped keys sliced.
fn item_body(obj: &Obj, spec: &ItemSpec, batch_size: usize) -> Value {
    let b = spec.b;
    let mut out = Obj::new();
    for (key, value) in obj {
        let k = key.as_str();
        let sliced = match (k, value) {
            ("rid", _) if spec.body_rid => Value::String(spec.rid.clone()),
            ("sampling_params", Value::Array(list)) => {
                sampling_body(list.get(b).unwrap_or(&Value::Null), spec.fanned_out)
            }
            ("sampling_params", v @ Value::Object(_)) => sampling_body(v, spec.fanned_out),
            ("input_ids", Value::Array(rows)) if matches!(rows.first(), Some(Value::Array(_))) => {
                rows.get(b).cloned().unwrap_or(Value::Null)
            }
            ("input_ids", v) => v.clone(),
            (k, Value::Array(list)) if PER_ITEM_LIST_KEYS.contains(&k) => {
                list.get(b).cloned().unwrap_or(Value::Null)
            }
            (k, Value::Array(list))
                if NESTED_KEYS.contains(&k) && matches!(list.first(), Some(Value::Array(_))) =>
            {
                list.get(b).cloned().unwrap_or(Value::Null)
            }
            (k, Value::Array(list))
                if BATCH_LENGTH_KEYS.contains(&k) && list.len() == batch_size =>
            {
                list.get(b).cloned().unwrap_or(Value::Null)
            }
            (_, v) => v.clone(),
        };
        out.insert(key.clone(), sliced);
    }
    Value::Object(out)
}

/// The item's `sampling_params` object; a fanned-out copy asks for one sample.
fn sampling_body(v: &Value, fanned_out: bool) -> Value {
    match v {
        Value::Object(sp) if fanned_out && sp.contains_key("n") => {
            let mut sp = sp.clone();
            sp.insert("n".to_owned(), Value::from(1));
            Value::Object(sp)
        }
        v => v.clone(),
    }
}

// === projection ===

impl Item {
    /// Phase *project*: the engine request (the frontend fills `request_id`) and what the
    /// assembler needs to answer for it. The native body is moved, not copied.
    pub(crate) fn project(self) -> (EngineRequest, SubConfig) {
        let Item { spec: s, body } = self;
        let sp = &s.sampling;
        let prompt_logprobs =
            (s.return_logprob && s.logprob_start_len >= 0).then(|| PromptLogprobOptions {
                start: u32::try_from(s.logprob_start_len).unwrap_or(u32::MAX),
                top_k: s.top_logprobs_num,
            });
        let needs_prompt = s.return_prompt_token_ids || prompt_logprobs.is_some();
        let config = SubConfig {
            rid: s.rid.clone(),
            prompt_len: u32::try_from(s.token_ids.len()).unwrap_or(u32::MAX),
            prompt: if needs_prompt {
                s.token_ids.clone()
            } else {
                Vec::new()
            },
            return_logprob: s.return_logprob,
            top_logprobs: s.return_logprob && s.top_logprobs_num > 0,
            top_logprobs_num: s.top_logprobs_num,
            flat_top: s.flat_top,
            token_ids_logprob: s.return_logprob && s.token_ids_logprob.is_some(),
            sampling_mask: s.return_sampling_mask,
            routed_experts: s.routed_experts,
            routed_experts_start: s.routed_experts_start,
            return_prompt_token_ids: s.return_prompt_token_ids,
        };
        // What a non-SGLang engine needs besides the typed fields (module `request`'s and
        // `sampling`'s key tables), read from the item's own native body.
        let native_only = crate::request::native_only(&body, s.token_ids.is_empty());
        let constraints = match body.get("sampling_params") {
            Some(Value::Object(sp)) => Constraints {
                logit_bias: crate::sampling::logit_bias(sp).unwrap_or_default(),
                structured: crate::sampling::structured(sp),
            },
            _ => Constraints::default(),
        };
        let request = EngineRequest {
            request_id: String::new(),
            token_ids: s.token_ids,
            stop: StopConditions {
                max_tokens: sp
                    .max_new_tokens
                    .map(|m| u32::try_from(m.max(0)).unwrap_or(u32::MAX)),
                min_tokens: u32::try_from(sp.min_new_tokens().max(0)).unwrap_or(u32::MAX),
                stop_token_ids: sp.stop_token_ids.clone(),
                // The engine matches them (the format refused them for an engine without a
                // tokenizer).
                stop: sp.stop_strings(),
                ignore_eos: sp.ignore_eos,
            },
            sampling: SamplingOptions {
                n: 1,
                temperature: sp.temperature(),
                top_p: sp.top_p(),
                top_k: sp.top_k(),
                min_p: sp.min_p(),
                frequency_penalty: sp.frequency_penalty(),
                presence_penalty: sp.presence_penalty(),
                repetition_penalty: sp.repetition_penalty(),
                seed: sp.seed,
                sample_index: s.copy,
            },
            output: OutputOptions {
                logprobs: s.return_logprob.then_some(s.top_logprobs_num),
                prompt_logprobs,
                token_ids_logprobs: if s.return_logprob {
                    s.token_ids_logprob.unwrap_or_default()
                } else {
                    Vec::new()
                },
                routed_experts: s.routed_experts,
                routed_experts_start: s.routed_experts_start,
                sampling_mask: s.return_sampling_mask,
                // Set from the request's `stream` by the frontend (one flag for every item).
                stream: false,
                // Decided for the whole request by the format's `prepare`.
                relay: false,
            },
            routing: s.routing,
            // A client's SGLang P/D bootstrap fields stay in the native body (an aggregated
            // engine ignores them); on a P/D route the router puts its own in
            // `EngineRequest::pd` and the engine client writes those over them.
            handoff: None,
            pd: None,
            native: NativeBody {
                format: FORMAT_NAME.to_owned(),
                body,
            },
            constraints,
            native_only,
        };
        (request, config)
    }
}
