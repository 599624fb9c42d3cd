//! Phase *project*: a validated vLLM request → the engine contract's [`EngineRequest`] and the
//! response settings its assembler needs.

use genfront_protocol::{
    Constraints, EngineInfo, EngineRequest, NativeBody, OutputOptions, PdLeg, PdRole,
    PromptLogprobOptions, RoutingHints, SamplingOptions, StopConditions,
};
use http::HeaderMap;
use serde_json::{Map, Value};

use crate::assemble::ResponseConfig;
use crate::logprobs::LogprobMode;
use crate::request::GenerateRequest;
use crate::schema::PyInt;
use crate::validate::Resolved;

/// The prefix vLLM puts before every request id (`serve_tokens`).
pub const REQUEST_ID_PREFIX: &str = "generate-tokens-";

/// Format name used in [`NativeBody::format`].
pub const FORMAT_NAME: &str = "vllm";

/// The id vLLM answers with: `generate-tokens-` + (`X-Request-Id` header, trimmed and non-empty)
/// or the body's `request_id` or a fresh `uuid4().hex`.
pub(crate) fn client_request_id(headers: &HeaderMap, body_id: Option<&str>) -> String {
    let header = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let base = match (header, body_id) {
        (Some(h), _) => h.to_owned(),
        (None, Some(b)) => b.to_owned(),
        (None, None) => uuid::Uuid::new_v4().simple().to_string(),
    };
    format!("{REQUEST_ID_PREFIX}{base}")
}

/// `X-data-parallel-rank`, read like vLLM's `_get_data_parallel_rank`: Python `int()` of the
/// header; a value that does not parse is ignored (vLLM returns `None`), as is a negative one.
pub(crate) fn dp_rank(headers: &HeaderMap) -> Option<u32> {
    let raw = headers.get("x-data-parallel-rank")?.to_str().ok()?;
    let cleaned: String = raw.trim().chars().filter(|c| *c != '_').collect();
    cleaned.parse::<u32>().ok()
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

fn clamp_u32(x: PyInt) -> u32 {
    u32::try_from(x.get().max(0)).unwrap_or(u32::MAX)
}

/// A seed as torch's `manual_seed` takes it: negative values wrap to `u64`.
fn seed(x: PyInt) -> u64 {
    let v = x.get();
    if v < 0 {
        (v as i64) as u64
    } else {
        u64::try_from(v).unwrap_or(u64::MAX)
    }
}

/// Format options that mirror vLLM server flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerFlags {
    /// `--enable-prompt-tokens-details`.
    pub prompt_tokens_details: bool,
    /// The P/D role this format plays as an engine (`--kv-transfer-config` with a producer or
    /// consumer role; genfront's mock server only): a request's `kv_transfer_params` then
    /// become [`EngineRequest::pd`] instead of an opaque hand-off.
    pub engine_role: Option<PdRole>,
}

/// A P/D engine's reading of a request's `kv_transfer_params` (top level, else under
/// `sampling_params.extra_args`): a prefill engine's leg when they ask `do_remote_decode`, a
/// decode engine's when they say `do_remote_prefill`; otherwise none (the engine refuses).
fn engine_leg(map: &Map<String, Value>, role: PdRole) -> Option<PdLeg> {
    let kv = map
        .get("kv_transfer_params")
        .filter(|v| v.is_object())
        .or_else(|| {
            map.get("sampling_params")?
                .get("extra_args")?
                .get("kv_transfer_params")
                .filter(|v| v.is_object())
        })?;
    let flag = match role {
        PdRole::Prefill => "do_remote_decode",
        PdRole::Decode => "do_remote_prefill",
    };
    (kv.get(flag) == Some(&Value::Bool(true))).then(|| PdLeg {
        role,
        bootstrap: None,
        kv_transfer_params: Some(kv.clone()),
    })
}

/// Build the engine request and the response settings. `map` (the whole client body) becomes
/// [`EngineRequest::native`] unchanged.
pub(crate) fn project(
    map: Map<String, Value>,
    r: GenerateRequest,
    resolved: Resolved,
    headers: &HeaderMap,
    engine: &EngineInfo,
    flags: &ServerFlags,
    request_id: String,
) -> (EngineRequest, ResponseConfig) {
    let s = &r.sampling;
    // `-1` = the whole vocabulary (unknown: every candidate the engine returns).
    let vocab = engine.vocab_size.unwrap_or(u32::MAX);
    let whole_vocab = |k: PyInt| if k.get() == -1 { vocab } else { clamp_u32(k) };
    let logprob_mode = match (s.logprobs, &s.logprob_token_ids) {
        (Some(k), ids) => Some(LogprobMode {
            k: whole_vocab(k) as usize,
            selected: ids.is_some(),
        }),
        (None, Some(ids)) => Some(LogprobMode {
            k: ids.len(),
            selected: true,
        }),
        (None, None) => None,
    };
    let prompt_top_k = s.prompt_logprobs.map(whole_vocab);
    let mut stop_token_ids: Vec<u32> = Vec::with_capacity(s.stop_token_ids.len());
    for id in s.stop_token_ids.iter().map(|t| clamp_u32(*t)) {
        if !stop_token_ids.contains(&id) {
            stop_token_ids.push(id);
        }
    }
    let pd = flags.engine_role.and_then(|role| engine_leg(&map, role));
    let handoff = match flags.engine_role {
        Some(_) => None,
        None => map
            .get("kv_transfer_params")
            .filter(|v| !v.is_null())
            .cloned(),
    };
    let return_token_ids = r.return_token_ids.then(|| {
        let placeholders = map
            .get("features")
            .and_then(|f| f.get("mm_placeholders"))
            .filter(|p| !p.is_null())
            .cloned();
        (r.token_ids.clone(), placeholders)
    });
    let prompt_len = u32::try_from(r.token_ids.len()).unwrap_or(u32::MAX);
    let n = clamp_u32(s.n);
    let native_only = crate::request::native_only(&map);
    let constraints = match map.get("sampling_params") {
        Some(Value::Object(sp)) => Constraints {
            logit_bias: crate::request::logit_bias(sp).unwrap_or_default(),
            structured: crate::request::structured(sp),
        },
        _ => Constraints::default(),
    };

    let request = EngineRequest {
        request_id: String::new(),
        stop: StopConditions {
            max_tokens: resolved.max_tokens,
            min_tokens: clamp_u32(s.min_tokens),
            stop_token_ids,
            // The engine matches them (the format refused them for one without a tokenizer).
            stop: s.stop.clone(),
            ignore_eos: s.ignore_eos,
        },
        sampling: SamplingOptions {
            n,
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            top_k: Some(i64::try_from(s.top_k.get()).unwrap_or(i64::MAX)),
            min_p: Some(s.min_p),
            frequency_penalty: Some(s.frequency_penalty),
            presence_penalty: Some(s.presence_penalty),
            repetition_penalty: Some(s.repetition_penalty),
            seed: s.seed.map(seed),
            sample_index: 0,
        },
        output: OutputOptions {
            // With `logprob_token_ids` vLLM reports those ids, not the top k (`num_logprobs`,
            // `sampling_params.py:888-895`): the engine request asks for no top logprobs and
            // lists the ids (the protocol's convention, and what the output caps count).
            logprobs: logprob_mode.map(|m| {
                if m.selected {
                    0
                } else {
                    u32::try_from(m.k).unwrap_or(u32::MAX)
                }
            }),
            prompt_logprobs: prompt_top_k.map(|top_k| PromptLogprobOptions {
                start: s.prompt_logprob_start.map_or(0, clamp_u32),
                top_k,
            }),
            token_ids_logprobs: s
                .logprob_token_ids
                .iter()
                .flatten()
                .map(|t| clamp_u32(*t))
                .collect(),
            routed_experts: engine.routed_experts,
            routed_experts_start: clamp_u32(s.routed_experts_prompt_start),
            sampling_mask: engine.sampling_mask,
            stream: r.stream,
            relay: false,
        },
        routing: RoutingHints {
            dp_rank: dp_rank(headers),
            priority: Some(r.priority),
            cache_salt: r.cache_salt.clone(),
            session_id: session_id(headers),
            lora: resolved.lora,
        },
        handoff,
        pd,
        native: NativeBody {
            format: FORMAT_NAME.to_owned(),
            body: Value::Object(map),
        },
        constraints,
        native_only,
        token_ids: r.token_ids,
    };
    let options = r.stream_options.unwrap_or_default();
    let config = ResponseConfig {
        request_id,
        model: resolved.model_name,
        n,
        stream: r.stream,
        include_usage: options.include_usage,
        continuous_usage: options.continuous_usage_stats,
        logprobs: logprob_mode,
        prompt_logprobs: prompt_top_k.map(|k| k as usize),
        prompt_len,
        return_token_ids,
        prompt_tokens_details: flags.prompt_tokens_details,
        text_mode: r.output_mode == "text",
    };
    (request, config)
}
