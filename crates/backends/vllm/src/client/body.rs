//! [`EngineRequest`] → the `POST /inference/v1/generate` body vLLM receives, and the decoder's
//! view of the request.
//!
//! Two paths (rules in the crate docs, "Engine client: the upstream request"):
//! - the native body of a `vllm`-format client, kept byte-for-byte in meaning and key order,
//!   with surgical edits (`request_id`, `token_ids`, `stream`, `stream_options`,
//!   `kv_transfer_params`);
//! - a body built from the typed request for every other format.
//!
//! A P/D leg (`request.pd`, `spec/vllm-native.md` §10) is one more set of edits, on both paths:
//! its `kv_transfer_params` at the top level (overriding a client's own), and also under
//! `sampling_params.extra_args.kv_transfer_params` with [`BodyOptions::nest_kv_transfer_params`]
//! (engines older than 0.33 read it only there). The typed fields already describe the leg; the
//! native body is edited to match:
//! - **prefill**: `max_tokens: 1` (0 kept when the client asked 0), `min_tokens` at most that,
//!   `n: 1`, `stream: false` without `stream_options` (the answer's `kv_transfer_params` is in
//!   the unary body only), `prompt_logprobs` kept (prefill computes them); without parameters
//!   from the router it asks for `{"do_remote_decode": true, "do_remote_prefill": false}`;
//! - **decode**: the client's request, minus the prompt-logprob keys (`prompt_logprobs`,
//!   `prompt_logprob_token_ids`, `prompt_logprob_start`: decode never ran the prompt, and a vLLM
//!   decode answers 500 to them).
//!
//! Both legs carry the same `request_id` (the router gives both the engine request's id).

use genfront_protocol::{EngineError, EngineInfo, EngineRequest, PdLeg, PdRole, StructuredOutput};
use serde_json::{Map, Value, json};

use super::decode::DecodeSpec;
use crate::project::FORMAT_NAME;

/// Client options that shape the body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BodyOptions {
    /// Also send a P/D leg's `kv_transfer_params` under `sampling_params.extra_args`.
    pub nest_kv_transfer_params: bool,
}

/// `sampling_params` keys about the prompt, which a decode leg never gets.
const PROMPT_LOGPROB_KEYS: &[&str] = &[
    "prompt_logprobs",
    "prompt_logprob_token_ids",
    "prompt_logprob_start",
];

/// What a prefill leg asks for when the router gave no parameters (`spec/vllm-native.md` §10.2).
fn remote_decode() -> Value {
    json!({"do_remote_decode": true, "do_remote_prefill": false})
}

/// What to send upstream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Upstream {
    /// The JSON body.
    pub body: Vec<u8>,
    /// Sent with `stream: false` (the answer is one JSON body).
    pub unary: bool,
    /// The answer is relayed ([`relayable`]): the unary body, or each SSE chunk, is only
    /// scanned and handed over as [`genfront_protocol::EngineOutput::native`].
    pub relay: bool,
    /// vLLM's own error answers (an HTTP error, an `{"error":…}` event) are kept on the error as
    /// [`genfront_protocol::EngineError::native`]: a vLLM client's own request, not a P/D leg,
    /// sent in the client's own mode (unary or stream), so the client gets them verbatim.
    pub native_errors: bool,
    /// The private dispatch id (`X-Request-Id`); vLLM calls the request
    /// `generate-tokens-<id>`.
    pub request_id: String,
    /// `X-data-parallel-rank`.
    pub dp_rank: Option<u32>,
    /// `X-Session-ID`.
    pub session_id: Option<String>,
}

/// `stream_options` genfront always asks for on a stream: usage on every chunk and at the end.
fn stream_options() -> Value {
    json!({"include_usage": true, "continuous_usage_stats": true})
}

/// Whether the request needs a field only vLLM's unary body carries: prompt logprobs
/// (`prompt_logprobs`, `prompt_token_id_logprobs`) or the P/D prefill leg's returned
/// `kv_transfer_params` (`do_remote_decode: true`).
///
/// Decided on typed fields, except `prompt_logprob_token_ids`, which has no typed counterpart
/// (`OutputOptions::token_ids_logprobs` covers the prompt side only with prompt logprobs on), so
/// a vLLM-format client's native body is read for it.
fn needs_unary(request: &EngineRequest) -> bool {
    let role = request.pd.as_ref().map(|pd| pd.role);
    if role == Some(PdRole::Prefill) {
        return true;
    }
    let sampling = request.native.body.get("sampling_params");
    // A decode leg's body has no prompt-logprob keys left.
    let native_prompt_ids = request.native.format == FORMAT_NAME
        && role != Some(PdRole::Decode)
        && sampling
            .and_then(|s| s.get("prompt_logprob_token_ids"))
            .is_some_and(|v| !v.is_null());
    // The typed hand-off (the vLLM projection carries `kv_transfer_params` there).
    let prefill_leg = request
        .handoff
        .as_ref()
        .and_then(|h| h.get("do_remote_decode"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    request.output.prompt_logprobs.is_some() || native_prompt_ids || prefill_leg
}

/// Whether the engine's answer is the client's own, so it can be relayed with only
/// `request_id` edited (issue 15; the vLLM format asks with
/// [`genfront_protocol::OutputOptions::relay`]): a vLLM client's own body, one sample, not a
/// P/D leg, its output kept (`max_tokens: 0` is sent as 1 and dropped). A unary client's body
/// then goes upstream with `stream: false`, so vLLM writes the unary answer the client asked
/// for; a streaming client's with its own `stream` and `stream_options` (not genfront's usual
/// `include_usage` + `continuous_usage_stats`), so each chunk is the one vLLM would send it —
/// unless the stream needs genfront's unary upstream ([`needs_unary`]), which stays typed.
fn relayable(request: &EngineRequest) -> bool {
    request.output.relay
        && request.native.format == FORMAT_NAME
        && request.pd.is_none()
        && request.sampling.n == 1
        && request.stop.max_tokens != Some(0)
        && (!request.output.stream || !needs_unary(request))
}

/// Build the upstream request and the decoder spec.
///
/// # Errors
/// [`genfront_protocol::ErrorKind::Unsupported`] for what vLLM cannot produce; `Internal` if
/// the body cannot be serialised.
pub(crate) fn build(
    mut request: EngineRequest,
    info: &EngineInfo,
    options: BodyOptions,
) -> Result<(Upstream, DecodeSpec), EngineError> {
    if request.request_id.is_empty() {
        // The frontend always mints one; a bare caller still gets an abortable id.
        request.request_id = uuid::Uuid::new_v4().simple().to_string();
    }
    let relay = relayable(&request);
    let unary = (relay && !request.output.stream) || needs_unary(&request);
    let prefill = request
        .pd
        .as_ref()
        .is_some_and(|pd| pd.role == PdRole::Prefill);
    let spec = DecodeSpec {
        // A prefill leg asks for one sample, whatever the client's `n`.
        n: if prefill { 1 } else { request.sampling.n },
        prompt_len: u32::try_from(request.token_ids.len()).unwrap_or(u32::MAX),
        prompt: if request.output.prompt_logprobs.is_some() {
            request.token_ids.clone()
        } else {
            Vec::new()
        },
        logprobs: request.output.logprobs,
        selected: request.output.token_ids_logprobs.clone(),
        prompt_logprobs: request.output.prompt_logprobs.clone(),
        // vLLM returns these per server flag, not per request: for a vLLM-format client, pass
        // through whatever the server sends.
        routed_experts: request.output.routed_experts || request.native.format == FORMAT_NAME,
        sampling_mask: request.output.sampling_mask || request.native.format == FORMAT_NAME,
        discard_output: request.stop.max_tokens == Some(0),
        fallback_eos: info.eos_token_ids.first().copied().unwrap_or(0),
    };
    let native = std::mem::take(&mut request.native.body);
    let mut map = match native {
        Value::Object(map) if request.native.format == FORMAT_NAME => {
            native_body(map, &request, unary, relay)
        }
        _ => typed_body(&request, info, unary)?,
    };
    if let Some(pd) = &request.pd {
        put_kv_transfer_params(&mut map, pd, options);
    }
    let body = serde_json::to_vec(&Value::Object(map))
        .map_err(|e| EngineError::internal(format!("serialising the vLLM request: {e}")))?;
    Ok((
        Upstream {
            body,
            unary,
            relay,
            native_errors: request.native.format == FORMAT_NAME
                && request.pd.is_none()
                && unary != request.output.stream,
            request_id: request.request_id,
            dp_rank: request.routing.dp_rank,
            session_id: request.routing.session_id,
        },
        spec,
    ))
}

/// Set `key` in place (keeping the client's key order), or append it.
fn set(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get_mut(key) {
        Some(slot) => *slot = value,
        None => {
            map.insert(key.to_owned(), value);
        }
    }
}

fn set_stream(map: &mut Map<String, Value>, unary: bool) {
    if unary {
        set(map, "stream", Value::Bool(false));
        map.shift_remove("stream_options");
    } else {
        set(map, "stream", Value::Bool(true));
        set(map, "stream_options", stream_options());
    }
}

/// A P/D leg's `kv_transfer_params`: top level, and under `sampling_params.extra_args` when
/// configured. A decode leg without parameters keeps the client's own (if any).
fn put_kv_transfer_params(map: &mut Map<String, Value>, pd: &PdLeg, options: BodyOptions) {
    let kv = match (&pd.kv_transfer_params, pd.role) {
        (Some(kv), _) => kv.clone(),
        (None, PdRole::Prefill) => remote_decode(),
        (None, PdRole::Decode) => return,
    };
    if options.nest_kv_transfer_params {
        with_sampling_params(map, |sp| {
            let extra = sp
                .entry("extra_args")
                .or_insert_with(|| Value::Object(Map::new()));
            if !extra.is_object() {
                *extra = Value::Object(Map::new());
            }
            if let Value::Object(extra) = extra {
                set(extra, "kv_transfer_params", kv.clone());
            }
        });
    }
    set(map, "kv_transfer_params", kv);
}

/// Edit the body's `sampling_params` object (created, or replacing a non-object, when needed).
fn with_sampling_params(map: &mut Map<String, Value>, edit: impl FnOnce(&mut Map<String, Value>)) {
    let slot = map
        .entry("sampling_params")
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(sp) = slot {
        edit(sp);
    }
}

/// The native body edits of a P/D leg (module docs); `kv_transfer_params` is set by
/// [`put_kv_transfer_params`].
fn edit_leg(map: &mut Map<String, Value>, role: PdRole, request: &EngineRequest) {
    match role {
        PdRole::Prefill => with_sampling_params(map, |sp| {
            let asked_zero = request.stop.max_tokens == Some(0)
                || sp.get("max_tokens").and_then(Value::as_i64) == Some(0);
            let max = i64::from(!asked_zero);
            set(sp, "max_tokens", json!(max));
            if sp
                .get("min_tokens")
                .and_then(Value::as_i64)
                .is_some_and(|m| m > max)
            {
                set(sp, "min_tokens", json!(max));
            }
            if sp.contains_key("n") {
                set(sp, "n", json!(1));
            }
        }),
        PdRole::Decode => {
            if let Some(Value::Object(sp)) = map.get_mut("sampling_params") {
                for key in PROMPT_LOGPROB_KEYS {
                    sp.shift_remove(*key);
                }
            }
        }
    }
}

/// The client's own vLLM body with the surgical edits; a relayed stream keeps the client's own
/// `stream` and `stream_options`.
fn native_body(
    mut map: Map<String, Value>,
    request: &EngineRequest,
    unary: bool,
    relay: bool,
) -> Map<String, Value> {
    set(
        &mut map,
        "request_id",
        Value::String(request.request_id.clone()),
    );
    set(&mut map, "token_ids", json!(request.token_ids));
    if !relay || unary {
        set_stream(&mut map, unary);
    }
    if let Some(handoff) = &request.handoff {
        set(&mut map, "kv_transfer_params", handoff.clone());
    }
    if let Some(pd) = &request.pd {
        edit_leg(&mut map, pd.role, request);
    }
    map
}

/// The refusal of a request whose native keys have no vLLM counterpart
/// ([`EngineRequest::native_only`]): every such key, by the client's own name.
fn native_only_error(request: &EngineRequest) -> EngineError {
    let keys = request.native_only.join(", ");
    let format = request.native.format.as_str();
    let (verb, it) = if request.native_only.len() == 1 {
        ("has", "it")
    } else {
        ("have", "them")
    };
    EngineError::unsupported(format!(
        "{keys} {verb} no equivalent on the vLLM engine serving this request, so genfront \
         cannot honour {it}; remove {it} or send the request to a {format} engine."
    ))
}

/// A vLLM body for a request that came from another format.
fn typed_body(
    request: &EngineRequest,
    info: &EngineInfo,
    unary: bool,
) -> Result<Map<String, Value>, EngineError> {
    if !request.native_only.is_empty() {
        return Err(native_only_error(request));
    }
    let out = &request.output;
    // vLLM reports these per server flag, not per request: asked of an engine without the flag,
    // they could only be dropped.
    if out.routed_experts && !info.routed_experts {
        return Err(EngineError::unsupported(
            "return_routed_experts: the vLLM engine serving this request does not report routed \
             experts (it runs without --enable-return-routed-experts).",
        ));
    }
    if out.sampling_mask && !info.sampling_mask {
        return Err(EngineError::unsupported(
            "return_sampling_mask: the vLLM engine serving this request does not report sampling \
             masks (it runs without --return-sampling-mask).",
        ));
    }
    let mut sp = Map::new();
    sp.insert("n".to_owned(), json!(request.sampling.n));
    let s = &request.sampling;
    let floats = [
        ("temperature", s.temperature),
        ("top_p", s.top_p),
        ("min_p", s.min_p),
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
        ("repetition_penalty", s.repetition_penalty),
    ];
    for (key, value) in floats {
        if let Some(v) = value {
            sp.insert(key.to_owned(), json!(v));
        }
    }
    if let Some(k) = s.top_k {
        // vLLM: 0 or -1 disables; both engines treat values below 1 as "off".
        sp.insert("top_k".to_owned(), json!(if k < 1 { -1 } else { k }));
    }
    if let Some(seed) = s.seed {
        sp.insert("seed".to_owned(), json!(seed));
    }
    let stop = &request.stop;
    match stop.max_tokens {
        // vLLM needs at least one token: generate one and drop it (see `DecodeSpec`).
        Some(0) => {
            sp.insert("max_tokens".to_owned(), json!(1));
        }
        Some(m) => {
            sp.insert("max_tokens".to_owned(), json!(m));
        }
        None => {}
    }
    if stop.min_tokens > 0 {
        sp.insert("min_tokens".to_owned(), json!(stop.min_tokens));
    }
    if !stop.stop_token_ids.is_empty() {
        sp.insert("stop_token_ids".to_owned(), json!(stop.stop_token_ids));
    }
    if !stop.stop.is_empty() {
        // A server that loads a tokenizer honours them; a `--tokens-only` one answers with its
        // own 400, which reaches the client unchanged.
        sp.insert("stop".to_owned(), json!(stop.stop));
    }
    if stop.ignore_eos {
        sp.insert("ignore_eos".to_owned(), json!(true));
    }
    let ids = &out.token_ids_logprobs;
    match out.logprobs {
        Some(k) if ids.is_empty() => {
            sp.insert("logprobs".to_owned(), json!(k));
        }
        Some(0) => {
            // vLLM: `logprobs` must equal `len(logprob_token_ids)`.
            sp.insert("logprobs".to_owned(), json!(ids.len()));
            sp.insert("logprob_token_ids".to_owned(), json!(ids));
        }
        Some(k) => {
            return Err(EngineError::unsupported(format!(
                "vLLM reports either the top {k} logprobs or the logprobs of the requested token ids \
                 at each position, not both; request top logprobs or token-id logprobs, not both \
                 (token_ids_logprob has {} ids)",
                ids.len()
            )));
        }
        None => {}
    }
    if let Some(p) = &out.prompt_logprobs {
        if !ids.is_empty() {
            return Err(EngineError::unsupported(
                "vLLM cannot report the logprobs of requested token ids at prompt positions \
                 together with prompt top logprobs; drop token_ids_logprob or the prompt logprobs",
            ));
        }
        // Plain `prompt_logprobs` whatever the start: vLLM 0.33.0 refuses `prompt_logprob_start`
        // without `prompt_logprob_token_ids` (`sampling_params.py:1043-1048`), so the engine
        // scores the whole prompt and the decoder cuts the rows before `p.start`.
        sp.insert("prompt_logprobs".to_owned(), json!(p.top_k));
    }
    let c = &request.constraints;
    if !c.logit_bias.is_empty() {
        // vLLM: `dict[int, float]` (JSON keys are strings; pydantic reads them as ints).
        let bias: Map<String, Value> = c
            .logit_bias
            .iter()
            .map(|b| (b.token_id.to_string(), json!(b.bias)))
            .collect();
        sp.insert("logit_bias".to_owned(), Value::Object(bias));
    }
    if let Some(structured) = &c.structured {
        let (key, text) = match structured {
            StructuredOutput::JsonSchema(t) => ("json", t),
            StructuredOutput::Regex(t) => ("regex", t),
            StructuredOutput::Grammar(t) => ("grammar", t),
            StructuredOutput::StructuralTag(t) => ("structural_tag", t),
        };
        sp.insert("structured_outputs".to_owned(), json!({ key: text }));
    }
    if out.routed_experts && out.routed_experts_start > 0 {
        sp.insert(
            "routed_experts_prompt_start".to_owned(),
            json!(out.routed_experts_start),
        );
    }

    let mut map = Map::new();
    map.insert("request_id".to_owned(), json!(request.request_id));
    map.insert("token_ids".to_owned(), json!(request.token_ids));
    map.insert("sampling_params".to_owned(), Value::Object(sp));
    if let Some(lora) = &request.routing.lora {
        map.insert("model".to_owned(), json!(lora));
    }
    set_stream(&mut map, unary);
    if let Some(p) = request.routing.priority.filter(|p| *p != 0) {
        // SGLang: larger = more urgent; vLLM: smaller = earlier.
        let p = if request.native.format == "sglang" {
            p.saturating_neg()
        } else {
            p
        };
        map.insert("priority".to_owned(), json!(p));
    }
    if let Some(salt) = &request.routing.cache_salt {
        map.insert("cache_salt".to_owned(), json!(salt));
    }
    if let Some(handoff) = &request.handoff {
        map.insert("kv_transfer_params".to_owned(), handoff.clone());
    }
    Ok(map)
}
