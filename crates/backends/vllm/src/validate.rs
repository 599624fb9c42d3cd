//! Phase *validate*: vLLM's checks, in vLLM's order, with vLLM's messages (spec §3.2–§3.6, §4.2).
//!
//! Three stages, matching where vLLM runs them:
//! 1. while pydantic parses the body: `SamplingParams.__post_init__` ([`post_init`]) and the
//!    `GenerateRequest` validators ([`model_validators`], [`cache_salt`]; the
//!    `MultiModalFeatures` one is in `features.rs`);
//! 2. in `serve_tokens` before the engine is called ([`serve_checks`]);
//! 3. in the engine's input processor, on the generator's first step ([`engine_checks`]); for a
//!    streaming request vLLM reports these inside the 200 SSE stream.
//!
//! # Parity: vLLM 0.33.0 rules checked against the wheel (issue 12)
//!
//! Compared body by body with the validation-oracle tool (`../shared/tools/validation-oracle`,
//! vLLM's own route, schemas and input processor); where `../shared/spec` says otherwise, these
//! win. Paths are in the `vllm` package of the 0.33.0 wheel; each rule has a unit test in
//! `tests/validation.rs`.
//! - pydantic's lax `bool` reads a number as an `i64` first (pydantic-core `float_as_int`): `0.5`,
//!   `inf`, anything past the `i64` range is `bool_type`, `2` / `2.0` `bool_parsing`; strings are
//!   not stripped (`' t '` is refused) (`schema::to_bool`).
//! - `stream_options`, `parse_context`, `reasoning_parser_kwargs` that are not objects are
//!   `model_attributes_type` (FastAPI validates with `from_attributes`); `structured_outputs` is
//!   the `dataclass_type` of `StructuredOutputsParams`; a JSON `null` body is `missing`.
//! - The structured-outputs refusals print `StructuredOutputsParams.__dict__` — every field with
//!   its default and the non-init `_backend` pair (`sampling_params.py:102-140`); raised while
//!   the field is built, they abort validation ahead of any other field's type error.
//! - `stop` lists with a bad item fail both union members, the `str` one first;
//!   `prompt_logprob_token_ids` rows and ids and `content_parts` items are typed per element;
//!   `output_kind` past `i64` is `int_parsing_size` for an integer literal, `enum` for a float.
//! - Integers keep full precision (`wide.rs`): Python's `json` keeps integer literals exact, so
//!   `-9223372036854775809` is past msgpack's range ("can't serialize ints …",
//!   `token_in_token_out/serving.py:262-270`) and is printed with its digits; a *float* literal
//!   in an `int` field is refused past `i64` (`int_parsing_size`, pydantic-core `float_as_int`,
//!   `1e+30` included). Unknown and private (`_…`) sampling keys are dropped before the msgpack
//!   round trip, so their integers never overflow (`v1/serial_utils.py:539-546`); floats never
//!   do (`_verify_extra_args`, `sampling_params.py:749-767`, checks ints only).
//! - `routed_experts_prompt_start` is a non-nullable `int` and must lie in `[0, prompt_len]`
//!   (`v1/engine/input_processor.py:455-462`).
//! - `prompt_logprob_start` requires `prompt_logprob_token_ids` and is non-negative with them;
//!   the ids must be a non-empty `[rows, ids]` array with at most `max_model_len - 1` rows,
//!   `max_logprobs` ids per row and in-vocabulary ids (a short row pads with -1)
//!   (`sampling_params.py:983-1048`); the rows must number `prompt_len - 1 - start`
//!   (`input_processor.py:464-475`); with `stream: true` they are refused
//!   (`serving.py:217-221`).
//! - `SamplingParams.verify` runs in its order (`sampling_params.py:904-920`): logprobs, logit
//!   bias, trace replay, stop ids, allowed ids; then the server-flag gates
//!   (`input_processor.py:203-220`): `thinking_token_budget` without a reasoning config and a
//!   non-empty `trace_decode_token_ids` without `--enable-trace-replay`, applied only where
//!   [`EngineInfo::features`] knows the flag (`None`: left to the engine). A
//!   `thinking_token_budget` of `-1` is no budget (`validate_thinking_token_budget`,
//!   `sampling_params.py:65-85`) and meets no gate.
//! - Structured outputs on an engine without a tokenizer ([`EngineInfo::tokenizer`]
//!   `Some(false)`, `--tokens-only`, the mocker) are refused last in `verify()`
//!   ([`STRUCTURED_OUTPUTS_NEED_TOKENIZER`], `sampling_params.py:1242-1245`); an engine whose
//!   tokenizer is unknown gets them (its own 400 is relayed).
//! - `stream_options` without `stream: true` is admitted, and so are `prompt_logprobs` with
//!   `stream: true` (the stream chunk schema, `GenerateStreamResponseBase` in
//!   `token_in_token_out/protocol.py`, has no field for them, so none are streamed). vLLM's Rust
//!   frontend refuses both (fixture 11, `rust/src/server/src/routes/inference/generate/validate.rs`);
//!   genfront follows the pinned 0.33.0 Python server.
//! - `logprob_token_ids` ask for those ids' logprobs, not a top k (`num_logprobs`,
//!   `sampling_params.py:888-895`): the engine request asks for none (`logprobs: 0` plus the
//!   listed ids), so 128 ids are not a top-128 request for the output caps.
//! - A request without `max_tokens` whose prompt exceeds the context is refused by
//!   `get_max_tokens` before the engine ("Input length (N) exceeds model's maximum context
//!   length (M).", `entrypoints/serve/utils/api_utils.py:246-250`, run by `serving.py:352-359`);
//!   with one, the input processor's prompt-length messages answer (`input_processor.py:557-602`).
//! - An explicit `max_tokens` past the context is admitted: the input processor only fills an
//!   unset one (`input_processor.py:476-487`) and the scheduler stops the request at
//!   `max_model_len` with `finish_reason: "length"` (`v1/core/sched/utils.py:114-119`). The engine
//!   request carries the room left (`min(max_tokens, context - prompt_len)`), which the mocker
//!   runs to the same `length` finish; `min_tokens` is still checked against the value sent.
//! - A UTF-8 BOM before the body is skipped (Starlette's `json.loads(bytes)` detects
//!   `utf-8-sig`).
//!
//! # Deliberate deviations (vLLM 0.33.0 answers 5xx or crashes)
//!
//! - `prompt_len + max_tokens` past `2**31 - 1` is refused (400, the decoder-prompt message with
//!   the requested count): the 0.33.0 wheel admits it, then the V2 model runner stores it in an
//!   int32 `max_seq_len` (`v1/worker/gpu/states.py:73,104`), which overflows and kills the engine
//!   core (the bound of vllm PR #54175; fixture `test_generate_rejects_unbounded_max_tokens`).
//!   The oracle, which stops before the runner, counts these as "engine accepts".
//! - `_validate_trace_replay`'s plain `ValueError`s (`trace_decode_token_ids` empty, negative,
//!   with `n > 1`, `prompt_logprobs`, structured outputs, …, `sampling_params.py:1104-1138`)
//!   are HTTP 500s from vLLM (an SSE error event without a message when streaming); genfront
//!   answers 400 with the same text.
//!
//! - Bodies that are not JSON (RFC 8259) but that Python's `json` reads — `NaN`, `Infinity`,
//!   `-Infinity`, `1e999` (as `inf`), a lone `\ud800`, encoded surrogates, UTF-16/32 bodies,
//!   more than 128 levels of nesting — are refused as `json_invalid` (`Expecting value` at the
//!   constant): `serde_json::Value` cannot carry a non-finite number, and genfront does not
//!   forward non-JSON to engines and peers that would read it differently. vLLM reports the
//!   field's own check instead (for the float fields the tool sends, also a 400: `temperature
//!   must be a finite number, got nan.`). Every other syntax error carries Python's own message
//!   and position, and bytes that do not decode get FastAPI's `{"detail": "There was an error
//!   parsing the body"}` (`request/json_error.rs`).
//!
//! # Known gaps
//!
//! - A body holding the same `f64` both as an integer literal past 64 bits and as a float
//!   literal reads both as the integer (`wide.rs`).

use genfront_format::GenerateError;
use genfront_protocol::EngineInfo;
use serde_json::Value;

use crate::errors::{bad_request, validation};
use crate::pyfmt::{py_int_list, py_str};
use crate::request::{GenerateRequest, Sampling};
use crate::schema::{PyInt, float_text};

/// The largest `prompt_len + max_tokens` the V2 model runner's int32 `max_seq_len` holds
/// (`v1/worker/gpu/states.py:73,104`).
pub const MAX_SEQ_LEN: i128 = i32::MAX as i128;
/// `VLLM_MAX_N_SEQUENCES` default.
pub const MAX_N_SEQUENCES: i128 = 16_384;
/// `MAX_LOGPROB_TOKEN_IDS`.
pub const MAX_LOGPROB_TOKEN_IDS: usize = 128;
/// `_MAX_TEMP`: temperatures in `(0, 0.01)` are raised to it.
const MIN_TEMPERATURE: f64 = 1e-2;
/// `_SAMPLING_EPS`: temperatures below it mean greedy sampling.
const SAMPLING_EPS: f64 = 1e-5;

/// Message of `MultiModalFeatures` / `GenerateRequest` validators for metadata-only items.
pub const METADATA_NEEDS_EC: &str = "metadata-only multimodal items require ec_transfer_params";
/// Message for `stop` on a `--tokens-only` server (vllm#57052), used when the engine has no
/// tokenizer ([`EngineInfo::tokenizer`] `Some(false)`).
pub const STOP_ON_TOKENS_ONLY: &str = "stop strings are not supported on a --tokens-only server because detokenization is disabled. Check stop strings on the coordinator, or use stop_token_ids.";

/// vLLM's refusal of `structured_outputs` on an engine without a tokenizer
/// (`_validate_structured_outputs`, `sampling_params.py:1242-1245`), a `VLLMValidationError`
/// without a parameter; used when [`EngineInfo::tokenizer`] is `Some(false)`.
pub const STRUCTURED_OUTPUTS_NEED_TOKENIZER: &str =
    "Structured outputs requires a tokenizer so it can't be used with 'skip_tokenizer_init'";

/// genfront's refusal of `output_mode="derender"` on an engine that loads a tokenizer: the parsed
/// assistant message (`GenerateDerenderResponse`) is not rendered by genfront.
pub const DERENDER_NOT_SERVED: &str =
    "output_mode='derender' is not served by genfront; use output_mode='text' or 'tokens'.";

/// `validate_cache_salt` (`entrypoints/generate/base/protocol.py:42-58`, run by the
/// `mode="before"` model validator `_validate_cache_salt`): a non-empty string of at most 128
/// characters without `@`, `/`, `\` or NUL. It raises `VLLMValidationError(parameter="cache_salt")`,
/// which is not a `ValueError`: pydantic does not catch it, so it aborts validation of the whole
/// body and vLLM's `VLLMError` handler answers 400 `BadRequestError` with `param: "cache_salt"`
/// and the message `... (parameter=cache_salt)`. The Python literal `'\\\\'` prints as two
/// backslashes.
///
/// # Errors
/// vLLM's error.
pub(crate) fn cache_salt(v: &Value) -> Result<(), GenerateError> {
    let fail = |m: &str| Err(validation(m, Some("cache_salt"), None));
    let Some(s) = v.as_str().filter(|s| !s.is_empty()) else {
        return fail("Parameter 'cache_salt' must be a non-empty string if provided.");
    };
    if s.chars().count() > 128 || s.contains(['@', '/', '\\', '\0']) {
        return fail(
            "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL.",
        );
    }
    Ok(())
}

/// `StructuredOutputsParams.__post_init__` (`sampling_params.py:102-140`): exactly one kind of
/// constraint.
pub(crate) fn structured_outputs_refusal(s: &Sampling) -> Option<GenerateError> {
    match &s.structured_outputs {
        Some((0, repr)) => Some(bad_request(format!(
            "You must use one kind of structured outputs constraint but none are specified: {repr}"
        ))),
        Some((kinds, repr)) if *kinds > 1 => Some(bad_request(format!(
            "You can only use one kind of structured outputs constraint but multiple are specified: {repr}"
        ))),
        _ => None,
    }
}

/// `SamplingParams.__post_init__`: normalisation, `_verify_args` and the greedy check.
///
/// # Errors
/// The `VLLMValidationError` vLLM raises (400 `BadRequestError`).
pub(crate) fn post_init(s: &mut Sampling) -> Result<(), GenerateError> {
    // `StructuredOutputsParams.__post_init__` runs first, while its field is built.
    if let Some(error) = structured_outputs_refusal(s) {
        return Err(error);
    }
    if 0.0 < s.temperature && s.temperature < MIN_TEMPERATURE {
        s.temperature = MIN_TEMPERATURE;
    }
    if s.seed.is_some_and(|x| x.get() == -1) {
        s.seed = None;
    }
    // `validate_thinking_token_budget` (`sampling_params.py:65-85`): -1 means unlimited and
    // becomes `None`, so it meets no reasoning-config gate.
    if s.thinking_token_budget.is_some_and(|b| b.get() == -1) {
        s.thinking_token_budget = None;
    }
    if let Some(b) = s.thinking_token_budget
        && b.get() < -1
    {
        return Err(validation(
            "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
            Some("thinking_token_budget"),
            Some(b.to_string()),
        ));
    }
    verify_args(s)?;
    if s.temperature < SAMPLING_EPS {
        s.top_p = 1.0;
        s.top_k = PyInt::new(0);
        s.min_p = 0.0;
        if s.n.get() > 1 {
            return Err(bad_request(format!(
                "n must be 1 when using greedy sampling, got {}.",
                s.n
            )));
        }
    }
    Ok(())
}

fn verify_args(s: &Sampling) -> Result<(), GenerateError> {
    let n = s.n;
    if n.get() < 1 {
        return Err(bad_request(format!("n must be at least 1, got {n}.")));
    }
    if n.get() > MAX_N_SEQUENCES {
        return Err(bad_request(format!(
            "n must be at most {MAX_N_SEQUENCES}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable."
        )));
    }
    // _verify_extra_args (`sampling_params.py:749-767`), right after the `n` bounds.
    if s.extra_args_overflow {
        return Err(validation(
            "extra_args integers must be between -2**63 and 2**64 - 1.",
            Some("extra_args"),
            None,
        ));
    }
    for (name, v) in [
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
    ] {
        if !(-2.0..=2.0).contains(&v) {
            return Err(bad_request(format!(
                "{name} must be in [-2, 2], got {}.",
                float_text(v)
            )));
        }
    }
    let rp = s.repetition_penalty;
    if !rp.is_finite() {
        return Err(bad_request(format!(
            "repetition_penalty must be a finite number, got {}.",
            float_text(rp)
        )));
    }
    if rp <= 0.0 {
        return Err(bad_request(format!(
            "repetition_penalty must be greater than zero, got {}.",
            float_text(rp)
        )));
    }
    let t = s.temperature;
    let temp_err = |msg: String| validation(msg, Some("temperature"), Some(float_text(t)));
    if !t.is_finite() {
        return Err(temp_err(format!(
            "temperature must be a finite number, got {}.",
            float_text(t)
        )));
    }
    if t < 0.0 {
        return Err(temp_err(format!(
            "temperature must be non-negative, got {}.",
            float_text(t)
        )));
    }
    if t > 2.0 {
        return Err(temp_err(format!(
            "temperature must be in [0, 2], got {}.",
            float_text(t)
        )));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return Err(validation(
            format!("top_p must be in (0, 1], got {}.", float_text(s.top_p)),
            Some("top_p"),
            Some(float_text(s.top_p)),
        ));
    }
    if s.top_k.get() < -1 {
        return Err(bad_request(format!(
            "top_k must be 0 (disable), or at least 1, got {}.",
            s.top_k
        )));
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return Err(bad_request(format!(
            "min_p must be in [0, 1], got {}.",
            float_text(s.min_p)
        )));
    }
    if let Some(m) = s.max_tokens
        && m.get() < 1
    {
        return Err(validation(
            format!("max_tokens must be at least 1, got {m}."),
            Some("max_tokens"),
            Some(m.to_string()),
        ));
    }
    if s.min_tokens.get() < 0 {
        return Err(bad_request(format!(
            "min_tokens must be greater than or equal to 0, got {}.",
            s.min_tokens
        )));
    }
    if let Some(m) = s.max_tokens
        && s.min_tokens.get() > m.get()
    {
        return Err(bad_request(format!(
            "min_tokens must be less than or equal to max_tokens={m}, got {}.",
            s.min_tokens
        )));
    }
    for (name, v) in [
        ("logprobs", s.logprobs),
        ("prompt_logprobs", s.prompt_logprobs),
    ] {
        if let Some(k) = v
            && k.get() < -1
        {
            return Err(validation(
                format!("{name} must be non-negative or -1, got {k}."),
                Some(name),
                Some(k.to_string()),
            ));
        }
    }
    if s.stop.iter().any(String::is_empty) {
        return Err(bad_request("stop cannot contain an empty string."));
    }
    if !s.stop.is_empty() && !s.detokenize {
        return Err(bad_request(
            "stop strings are only supported when detokenize is True. Set detokenize=True to use stop.",
        ));
    }
    if s.bad_words.iter().any(String::is_empty) {
        let words: Vec<String> = s.bad_words.iter().map(|w| py_str(w)).collect();
        return Err(bad_request(format!(
            "bad_words cannot contain an empty string. Got bad_words={}",
            py_int_list(&words)
        )));
    }
    if let Some(i) = s.stream_interval
        && i.get() < 1
    {
        return Err(validation(
            format!("stream_interval must be at least 1, got {i}."),
            Some("stream_interval"),
            Some(i.to_string()),
        ));
    }
    Ok(())
}

/// The `mode="after"` validators of `GenerateRequest`, in declaration order.
///
/// # Errors
/// The `ValueError` text.
pub(crate) fn model_validators(r: &GenerateRequest) -> Result<(), String> {
    if r.content_parts && r.features.is_some() {
        return Err("content_parts and features are mutually exclusive".to_owned());
    }
    if let Some(f) = &r.features
        && let Some(metadata) = &f.metadata
        && metadata.iter().any(|(_, items)| items.iter().any(|p| *p))
        && !r.ec_transfer_params
    {
        for (modality, items) in metadata {
            let kwargs = f
                .kwargs
                .as_ref()
                .and_then(|k| k.iter().find(|(m, _)| m == modality))
                .map(|(_, k)| k.as_slice());
            let metadata_only = items
                .iter()
                .enumerate()
                .any(|(i, meta)| *meta && !kwargs.and_then(|k| k.get(i)).copied().unwrap_or(false));
            if metadata_only {
                return Err(METADATA_NEEDS_EC.to_owned());
            }
        }
    }
    if r.output_mode != "tokens" && !r.sampling.detokenize {
        return Err(format!(
            "output_mode={} requires sampling_params.detokenize to be true",
            py_str(&r.output_mode)
        ));
    }
    if let Some(f) = &r.features {
        let prompt_len = r.token_ids.len() as i128;
        if f.placeholders
            .iter()
            .flat_map(|(_, ranges)| ranges)
            .any(|(o, l)| o.saturating_add(*l) > prompt_len)
        {
            return Err("mm_placeholders must remain within the token_ids sequence".to_owned());
        }
    }
    Ok(())
}

/// What the pre-engine checks resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    /// LoRA adapter named by `model`, when it is not the base model.
    pub lora: Option<String>,
    /// The model name the response reports.
    pub model_name: String,
    /// The token budget; `None` when the prompt leaves no room (reported by [`engine_checks`]).
    pub max_tokens: Option<u32>,
}

/// `serve_tokens` before the engine: model lookup (404), genfront's stream-only checks (as the
/// Rust frontend does them), `max_num_seqs`, the tokens-only server rules, the 64-bit msgpack
/// round trip, the vocabulary and the `max_tokens` bound (vllm PR #54175).
///
/// # Errors
/// vLLM's 400/404 errors.
pub(crate) fn serve_checks(
    r: &GenerateRequest,
    engine: &EngineInfo,
    loras: &[String],
) -> Result<Resolved, GenerateError> {
    let lora = match r.model.as_deref() {
        None | Some("") => None,
        Some(m) if engine.serves(m) => None,
        Some(m) if loras.iter().any(|l| l == m) => Some(m.to_owned()),
        Some(m) => {
            let names: Vec<&str> = std::iter::once(engine.model.as_str())
                .chain(engine.model_aliases.iter().map(String::as_str))
                .chain(loras.iter().map(String::as_str))
                .collect();
            return Err(GenerateError::NotFound {
                message: format!(
                    "The model `{m}` does not exist. Valid aliases: {}.",
                    names.join(", ")
                ),
                param: Some("model".to_owned()),
            });
        }
    };
    let s = &r.sampling;
    // vLLM 0.33.0's Python route admits `stream_options` without `stream`, and `prompt_logprobs`
    // with `stream: true` (its stream chunks have no field for them, so none are streamed); so
    // does genfront. vLLM's Rust frontend refuses the latter (fixture 11); genfront follows the
    // pinned Python server.
    if let Some(max_num_seqs) = engine.max_num_seqs
        && s.n.get() > i128::from(max_num_seqs)
    {
        return Err(bad_request(format!(
            "sampling_params.n must be at most the server's max_num_seqs ({max_num_seqs}), got {}.",
            s.n
        )));
    }
    // `serve_tokens` (`token_in_token_out/serving.py:217-221`).
    if r.stream && s.prompt_logprob_token_ids.is_some() {
        return Err(bad_request(
            "prompt_logprob_token_ids are not available when stream=true.",
        ));
    }
    // Stop strings need the engine's tokenizer: refused for a `--tokens-only` engine, forwarded
    // to one that loads a tokenizer or whose kind is unknown (its own 400 is then relayed).
    if !s.stop.is_empty() && engine.tokenizer == Some(false) {
        return Err(bad_request(STOP_ON_TOKENS_ONLY));
    }
    // `output_mode="text"` needs the engine's tokenizer: refused for a `--tokens-only` engine
    // with vLLM's message (`serve_tokens`: "The no-op detokenizer returns \"\"…"), forwarded to
    // one that loads a tokenizer or whose kind is unknown (the engine's text and decoded
    // logprobs are relayed; its own 400 is relayed too).
    if r.output_mode != "tokens" && engine.tokenizer == Some(false) {
        return Err(bad_request(format!(
            "output_mode={} requires a tokenizer, but this server does not load one (--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a tokenizer, or use output_mode='tokens'.",
            py_str(&r.output_mode)
        )));
    }
    // `output_mode="derender"` (`serve_tokens`, `token_in_token_out/serving.py:243-249`): never
    // streamed. genfront does not render the parsed assistant message, so it refuses the mode
    // for an engine that could serve it (a deliberate deviation, see the crate docs).
    if r.output_mode == "derender" {
        if r.stream {
            return Err(bad_request(
                "output_mode='derender' does not support stream=true.",
            ));
        }
        return Err(bad_request(DERENDER_NOT_SERVED));
    }
    if s.overflow || r.overflow {
        return Err(bad_request("can't serialize ints < -2**63 or > 2**64 - 1"));
    }
    // Unknown vocabulary: only ids no vocabulary can hold (above `u32::MAX`) are refused here;
    // the engine checks the rest.
    if r.max_token_id.get() >= vocab_bound(engine) {
        return Err(bad_request(format!(
            "Token id {} is out of vocabulary",
            r.max_token_id
        )));
    }
    let prompt_len = r.token_ids.len() as i128;
    // `get_max_tokens` (`entrypoints/serve/utils/api_utils.py:234-251`), which `serve_tokens`
    // runs for a request without `max_tokens` (`token_in_token_out/serving.py:352-359`).
    if !s.max_tokens_provided
        && let Some(context) = engine.context_limit().map(i128::from)
        && prompt_len > context
    {
        return Err(bad_request(format!(
            "Input length ({prompt_len}) exceeds model's maximum context length ({context})."
        )));
    }
    let explicit = s.max_tokens.filter(|_| s.max_tokens_provided);
    // An explicit `max_tokens` past the context is admitted (the engine stops at
    // `max_model_len` with `finish_reason: "length"`, `v1/core/sched/utils.py:114-119`), except
    // where `prompt_len + max_tokens` overflows the V2 runner's int32 `max_seq_len`
    // (`v1/worker/gpu/states.py:73,104`): that crashes the engine core (a deliberate deviation).
    if let Some(m) = explicit
        && prompt_len + m.get() > MAX_SEQ_LEN
    {
        let context = engine.context_limit().map_or(MAX_SEQ_LEN, i128::from);
        return Err(prompt_too_long(prompt_len, context, Some(m)));
    }
    let max_tokens = match engine.context_limit().map(i128::from) {
        // The engine runs an explicit `max_tokens` only to the context (`check_stop`), so the
        // budget genfront carries (and its output caps count) is the room left.
        Some(context) => match explicit {
            Some(m) if prompt_len < context => {
                u32::try_from(m.get().min(context - prompt_len)).ok()
            }
            Some(_) => None,
            None if prompt_len < context => u32::try_from(context - prompt_len).ok(),
            None => None,
        },
        // Unknown context length: an explicit `max_tokens` is carried, otherwise the engine
        // applies its own `max_model_len - prompt` default.
        None => s
            .max_tokens
            .filter(|_| s.max_tokens_provided)
            .and_then(|m| u32::try_from(m.get()).ok()),
    };
    Ok(Resolved {
        lora,
        model_name: r
            .model
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| engine.model.clone()),
        max_tokens,
    })
}

/// vLLM's input-processor messages for a prompt that does not fit, plus the bound on an explicit
/// `max_tokens`.
fn prompt_too_long(prompt_len: i128, context: i128, max_tokens: Option<PyInt>) -> GenerateError {
    if prompt_len > context {
        bad_request(format!(
            "The decoder prompt (length {prompt_len}) is longer than the maximum model length of {context}. Make sure that `max_model_len` is no smaller than the number of text tokens."
        ))
    } else if prompt_len == context || max_tokens.is_none() {
        bad_request(format!(
            "The decoder prompt (length {prompt_len}) plus the number of requested output tokens (at least 1) is longer than the maximum model length of {context}. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens)."
        ))
    } else {
        let m = max_tokens.map(|m| m.to_string()).unwrap_or_default();
        bad_request(format!(
            "The decoder prompt (length {prompt_len}) plus the number of requested output tokens ({m}) is longer than the maximum model length of {context}. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens)."
        ))
    }
}

/// The engine's input processor, in its order (`v1/engine/input_processor.py:138-222,389-488`):
/// `SamplingParams.verify()` (`sampling_params.py:904-920`: logprobs, logit bias, trace replay,
/// stop ids, allowed ids, structured outputs), the server-flag gates (`thinking_token_budget`,
/// `trace_decode_token_ids`) where the flag is known, the prompt length, then the per-prompt
/// checks (`routed_experts_prompt_start`, the `prompt_logprob_token_ids` row count).
///
/// # Errors
/// vLLM's 400 errors; for a streaming request vLLM sends them as an SSE error event.
pub(crate) fn engine_checks(
    r: &GenerateRequest,
    engine: &EngineInfo,
    resolved: &Resolved,
) -> Result<(), GenerateError> {
    let s = &r.sampling;
    let vocab = vocab_bound(engine);
    logprob_checks(s, engine, vocab)?;
    oov_check(&s.logit_bias_ids, vocab, "logit_bias")?;
    trace_replay_checks(s, vocab)?;
    oov_check(&s.stop_token_ids, vocab, "stop_token_ids")?;
    if let Some(allowed) = &s.allowed_token_ids {
        if allowed.is_empty() {
            return Err(validation(
                "allowed_token_ids is not None and empty!",
                Some("allowed_token_ids"),
                Some("[]".to_owned()),
            ));
        }
        let invalid: Vec<PyInt> = allowed
            .iter()
            .copied()
            .filter(|t| t.get() < 0 || t.get() >= vocab)
            .collect();
        if !invalid.is_empty() {
            return Err(validation(
                "allowed_token_ids contains out-of-vocab token id!",
                Some("allowed_token_ids"),
                Some(py_int_list(&invalid)),
            ));
        }
    }
    // `_validate_structured_outputs` (`sampling_params.py:1242-1245`): a constraint needs the
    // engine's tokenizer; refused for a tokens-only engine, left to one not known.
    if s.structured_outputs.is_some() && engine.tokenizer == Some(false) {
        return Err(bad_request(STRUCTURED_OUTPUTS_NEED_TOKENIZER));
    }
    // The server-flag gates (`input_processor.py:203-220`), only where the flag is known.
    if s.thinking_token_budget.is_some() && engine.features.reasoning == Some(false) {
        return Err(bad_request(THINKING_BUDGET_NEEDS_REASONING));
    }
    if s.trace_decode_token_ids
        .as_ref()
        .is_some_and(|t| !t.is_empty())
        && engine.features.trace_replay == Some(false)
    {
        return Err(bad_request(TRACE_REPLAY_NOT_ENABLED));
    }
    // `_validate_prompt_len` (`input_processor.py:557-602`).
    let prompt_len = r.token_ids.len() as i128;
    if let Some(context) = engine.context_limit().map(i128::from)
        && prompt_len >= context
    {
        return Err(prompt_too_long(prompt_len, context, None));
    }
    // The per-prompt checks (`input_processor.py:455-475`).
    let start = s.routed_experts_prompt_start;
    if !(0..=prompt_len).contains(&start.get()) {
        return Err(validation(
            format!(
                "routed_experts_prompt_start must be between 0 and the prompt length ({prompt_len}), inclusive."
            ),
            Some("routed_experts_prompt_start"),
            Some(start.to_string()),
        ));
    }
    if let Some(shape) = &s.prompt_logprob_token_ids {
        let start = s.prompt_logprob_start.map_or(0, PyInt::get);
        let num_rows = (prompt_len - 1 - start).max(0);
        if shape.rows as i128 != num_rows {
            return Err(validation(
                format!(
                    "prompt_logprob_token_ids has {} rows, but the prompt has {num_rows} scored rows (prompt_len - 1 - prompt_logprob_start).",
                    shape.rows
                ),
                Some("prompt_logprob_token_ids"),
                Some(shape.rows.to_string()),
            ));
        }
    }
    if resolved.max_tokens.is_none()
        && let Some(context) = engine.context_limit()
    {
        return Err(prompt_too_long(
            r.token_ids.len() as i128,
            i128::from(context),
            None,
        ));
    }
    Ok(())
}

/// vLLM's refusal of `thinking_token_budget` without a reasoning config
/// (`v1/engine/input_processor.py:203-211`).
pub const THINKING_BUDGET_NEEDS_REASONING: &str = "thinking_token_budget is set but reasoning_config is not configured. Please set --reasoning-parser and/or --reasoning-config to use thinking_token_budget.";
/// vLLM's refusal of `trace_decode_token_ids` without `--enable-trace-replay`
/// (`v1/engine/input_processor.py:212-220`).
pub const TRACE_REPLAY_NOT_ENABLED: &str = "trace_decode_token_ids is set but trace replay is not enabled. Start the engine with --enable-trace-replay to use it.";

/// `SamplingParams._validate_logprobs` (`sampling_params.py:922-1048`).
fn logprob_checks(s: &Sampling, engine: &EngineInfo, vocab: i128) -> Result<(), GenerateError> {
    // `-1` asks for the whole vocabulary; with the vocabulary or the cap unknown, the engine
    // checks the count.
    let over_cap = |k: PyInt| -> Option<(i128, i128)> {
        let cap = i128::from(engine.max_logprobs?);
        let num = if k.get() == -1 {
            i128::from(engine.vocab_size?)
        } else {
            k.get()
        };
        (num > cap).then_some((num, cap))
    };
    if let Some(k) = s.logprobs.filter(|k| k.get() != 0)
        && let Some((num, max_logprobs)) = over_cap(k)
    {
        return Err(validation(
            format!(
                "Requested sample logprobs of {num}, which is greater than max allowed: {max_logprobs}"
            ),
            Some("logprobs"),
            Some(num.to_string()),
        ));
    }
    if let Some(ids) = &s.logprob_token_ids {
        let n = ids.len();
        if n > MAX_LOGPROB_TOKEN_IDS {
            return Err(validation(
                format!(
                    "Requested logprob_token_ids of length {n}, which is greater than max allowed: {MAX_LOGPROB_TOKEN_IDS}"
                ),
                Some("logprob_token_ids"),
                Some(n.to_string()),
            ));
        }
        oov_check(ids, vocab, "logprob_token_ids")?;
        if let Some(k) = s.logprobs
            && k.get() != n as i128
        {
            return Err(validation(
                format!(
                    "When both logprobs and logprob_token_ids are set, logprobs must equal len(logprob_token_ids). Got logprobs={k}, len(logprob_token_ids)={n}."
                ),
                Some("logprob_token_ids"),
                Some(n.to_string()),
            ));
        }
    }
    if let Some(k) = s.prompt_logprobs.filter(|k| k.get() != 0)
        && let Some((num, max_logprobs)) = over_cap(k)
    {
        return Err(validation(
            format!(
                "Requested prompt logprobs of {num}, which is greater than max allowed: {max_logprobs}"
            ),
            Some("prompt_logprobs"),
            Some(num.to_string()),
        ));
    }
    let param = Some("prompt_logprob_token_ids");
    if let Some(shape) = &s.prompt_logprob_token_ids {
        if shape.rows == 0 || shape.width == 0 {
            return Err(validation(
                "prompt_logprob_token_ids must be a non-empty integer array of shape [num_rows, num_ids].",
                param,
                Some("list".to_owned()),
            ));
        }
        if let Some(context) = engine.context_limit() {
            let max_rows = i128::from(context) - 1;
            if shape.rows as i128 > max_rows {
                return Err(validation(
                    format!(
                        "prompt_logprob_token_ids has {} rows, but a prompt has at most {max_rows} scored rows (max_model_len - 1).",
                        shape.rows
                    ),
                    param,
                    Some(shape.rows.to_string()),
                ));
            }
        }
        if let Some(cap) = engine.max_logprobs
            && shape.width as i128 > i128::from(cap)
        {
            let num_ids = shape.width;
            return Err(validation(
                format!(
                    "Requested {num_ids} token ids per row in prompt_logprob_token_ids, which is greater than max allowed: {cap}. Set max_logprobs (--max-logprobs) to at least {num_ids}."
                ),
                param,
                Some(num_ids.to_string()),
            ));
        }
        let (lo, hi) = (shape.lo.unwrap_or(-1), shape.hi.unwrap_or(-1));
        // `make_ndarray_with_pad(…, np.int64)` overflows past the int64 range.
        if lo < i128::from(i64::MIN) || hi > i128::from(i64::MAX) {
            return Err(validation(
                "prompt_logprob_token_ids must contain integer token ids.",
                param,
                None,
            ));
        }
        let lo = if shape.padded { lo.min(-1) } else { lo };
        let hi = if shape.padded { hi.max(-1) } else { hi };
        if lo < -1 || hi >= vocab {
            return Err(validation(
                format!(
                    "prompt_logprob_token_ids contain out-of-vocab token ids (-1 pads a row). Vocabulary size: {}",
                    vocab_text(vocab)
                ),
                param,
                Some(format!("[{lo}, {hi}]")),
            ));
        }
        if let Some(start) = s.prompt_logprob_start
            && start.get() < 0
        {
            return Err(validation(
                "prompt_logprob_start must be non-negative.",
                Some("prompt_logprob_start"),
                Some(start.to_string()),
            ));
        }
    } else if let Some(start) = s.prompt_logprob_start {
        return Err(validation(
            "prompt_logprob_start requires prompt_logprob_token_ids.",
            Some("prompt_logprob_start"),
            Some(start.to_string()),
        ));
    }
    Ok(())
}

/// `SamplingParams._validate_trace_replay` (`sampling_params.py:1095-1152`). Its plain
/// `ValueError`s are HTTP 500s from vLLM 0.33.0 (not a `VLLMValidationError`); genfront answers
/// them 400 with the same text (a deliberate deviation).
fn trace_replay_checks(s: &Sampling, vocab: i128) -> Result<(), GenerateError> {
    let Some(ids) = &s.trace_decode_token_ids else {
        return Ok(());
    };
    let refuse = |m: &str| Err(bad_request(m));
    if ids.is_empty() {
        return refuse("trace_decode_token_ids must be a non-empty list.");
    }
    if s.n.get() != 1 {
        return refuse("trace_decode_token_ids requires n=1.");
    }
    if ids.iter().any(|t| t.get() < 0) {
        return refuse("trace_decode_token_ids must contain non-negative integers.");
    }
    if s.prompt_logprobs.is_some() {
        return refuse("trace_decode_token_ids is not supported with prompt_logprobs.");
    }
    if s.prompt_logprob_token_ids.is_some() {
        return refuse("trace_decode_token_ids is not supported with prompt_logprob_token_ids.");
    }
    if s.structured_outputs.is_some() {
        return refuse("trace_decode_token_ids is not supported with structured outputs.");
    }
    if s.repetition_detection {
        return refuse("trace_decode_token_ids is not supported with repetition_detection.");
    }
    if s.thinking_token_budget.is_some() {
        return refuse("trace_decode_token_ids is not supported with thinking_token_budget.");
    }
    if !s.bad_words.is_empty() {
        return refuse("trace_decode_token_ids is not supported with bad_words.");
    }
    oov_check(ids, vocab, "trace_decode_token_ids")
}

/// The vocabulary size as messages print it.
fn vocab_text(vocab: i128) -> String {
    if vocab > i128::from(u32::MAX) {
        "unknown".to_owned()
    } else {
        vocab.to_string()
    }
}

/// The exclusive upper bound of a valid token id: the vocabulary size, or `u32::MAX + 1` (the
/// ids genfront can carry) when it is unknown.
fn vocab_bound(engine: &EngineInfo) -> i128 {
    engine
        .vocab_size
        .map_or(i128::from(u32::MAX) + 1, i128::from)
}

fn oov_check(ids: &[PyInt], vocab: i128, name: &str) -> Result<(), GenerateError> {
    let invalid: Vec<PyInt> = ids
        .iter()
        .copied()
        .filter(|t| t.get() < 0 || t.get() >= vocab)
        .collect();
    if invalid.is_empty() {
        return Ok(());
    }
    let list = py_int_list(&invalid);
    Err(validation(
        format!(
            "token_id(s) {list} in {name} contain out-of-vocab token ids. Vocabulary size: {}",
            vocab_text(vocab)
        ),
        Some(name),
        Some(list),
    ))
}
