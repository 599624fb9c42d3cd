//! The lossless mapping between the engine contract (`genfront-protocol`) and the gRPC messages in
//! [`crate::pb`].
//!
//! Every `encode_*` consumes its value and moves the vectors and strings into the message (no
//! per-token copy); every `decode_*` does the same the other way. For all values,
//! `decode_x(encode_x(v)?)? == v`, bit for bit for floating point (NaN included), and JSON values
//! keep their 64-bit integers and key order (property-tested in `tests/wire.rs`).
//!
//! The only inputs `decode_*` rejects are messages no `encode_*` produces: a missing required
//! part, invalid JSON text, a sampling mask whose lengths do not add up, an out-of-range status
//! code. Unknown error kinds decode as [`ErrorKind::Internal`] (forward compatibility).
//!
//! Control calls ([`encode_control`] / [`decode_control`]) carry a format name, which the
//! contract holds as `&'static str`: the decoder maps it onto a static name ([`intern_format`]:
//! `"sglang"`, `"vllm"`, and at most [`MAX_INTERNED_FORMATS`] others, kept for the process's
//! life), so a peer cannot grow memory without bound.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use genfront_protocol::{
    Bootstrap, Candidate, Constraints, ControlAction, ControlCall, ControlReply, EngineError,
    EngineInfo, EngineOutput, EngineRequest, ErrorKind, FinishReason, LogitBias, NativeBody,
    OutputOptions, PauseMode, PdLeg, PdRole, PromptLogprobOptions, PromptLogprobs, RoutedExperts,
    RoutingHints, SamplingOptions, StopConditions, StopMatch, StructuredOutput, TokenLogprob,
    Usage,
};
use serde_json::Value;

use crate::pb;
use crate::pb::finish_reason::Reason;
use crate::pb::generate_response::Item;

/// Why a message could not be mapped to or from the engine contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A part every encoder sets is absent.
    #[error("sidecar wire: missing `{0}`")]
    Missing(&'static str),
    /// A JSON field holds invalid JSON text, or a value could not be written as JSON.
    #[error("sidecar wire: `{field}` is not valid JSON: {reason}")]
    Json {
        /// The field.
        field: &'static str,
        /// The parser's or writer's message.
        reason: String,
    },
    /// A sampling mask whose set lengths do not add up to its token ids.
    #[error("sidecar wire: sampling mask lengths cover {covered} ids, but {sent} were sent")]
    MaskShape {
        /// Sum of the set lengths.
        covered: u64,
        /// Number of token ids sent.
        sent: u64,
    },
    /// A number outside the range of its contract type.
    #[error("sidecar wire: `{0}` is out of range")]
    OutOfRange(&'static str),
    /// A format name beyond the [`MAX_INTERNED_FORMATS`] distinct ones a process keeps.
    #[error("sidecar wire: format `{0}` is unknown and no more format names are kept")]
    Format(String),
}

impl From<WireError> for EngineError {
    /// A wire mismatch breaks the transport's contract: [`ErrorKind::Internal`].
    fn from(error: WireError) -> Self {
        EngineError::internal(error.to_string())
    }
}

// === Generate request ===

/// Map a request onto the wire.
///
/// # Errors
/// [`WireError::Json`] when a JSON value cannot be written (not possible for a
/// `serde_json::Value`, but reported rather than unwrapped).
pub fn encode_request(request: EngineRequest) -> Result<pb::GenerateRequest, WireError> {
    let EngineRequest {
        request_id,
        token_ids,
        stop,
        sampling,
        output,
        routing,
        handoff,
        native,
        pd,
        constraints,
        native_only,
    } = request;
    Ok(pb::GenerateRequest {
        request_id,
        token_ids,
        stop: Some(pb::StopConditions {
            max_tokens: stop.max_tokens,
            min_tokens: stop.min_tokens,
            stop_token_ids: stop.stop_token_ids,
            stop: stop.stop,
            ignore_eos: stop.ignore_eos,
        }),
        sampling: Some(pb::SamplingOptions {
            n: sampling.n,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            min_p: sampling.min_p,
            frequency_penalty: sampling.frequency_penalty,
            presence_penalty: sampling.presence_penalty,
            repetition_penalty: sampling.repetition_penalty,
            seed: sampling.seed,
            sample_index: sampling.sample_index,
        }),
        output: Some(pb::OutputOptions {
            logprobs: output.logprobs,
            prompt_logprobs: output.prompt_logprobs.map(|p| pb::PromptLogprobOptions {
                start: p.start,
                top_k: p.top_k,
            }),
            token_ids_logprobs: output.token_ids_logprobs,
            routed_experts: output.routed_experts,
            routed_experts_start: output.routed_experts_start,
            sampling_mask: output.sampling_mask,
            stream: output.stream,
        }),
        routing: Some(pb::RoutingHints {
            dp_rank: routing.dp_rank,
            priority: routing.priority,
            cache_salt: routing.cache_salt,
            session_id: routing.session_id,
            lora: routing.lora,
        }),
        handoff: handoff.map(|v| encode_json(&v, "handoff")).transpose()?,
        native: Some(pb::NativeBody {
            format: native.format,
            body: encode_json(&native.body, "native.body")?,
        }),
        pd: pd.map(encode_pd).transpose()?,
        constraints: (!constraints.is_empty()).then(|| encode_constraints(constraints)),
        native_only,
    })
}

fn encode_constraints(c: Constraints) -> pb::Constraints {
    use pb::constraints::Structured;
    pb::Constraints {
        logit_bias: c
            .logit_bias
            .into_iter()
            .map(|b| pb::LogitBias {
                token_id: b.token_id,
                bias: Some(b.bias),
            })
            .collect(),
        structured: c.structured.map(|s| match s {
            StructuredOutput::Regex(t) => Structured::Regex(t),
            StructuredOutput::JsonSchema(t) => Structured::JsonSchema(t),
            StructuredOutput::Grammar(t) => Structured::Grammar(t),
            StructuredOutput::StructuralTag(t) => Structured::StructuralTag(t),
        }),
    }
}

fn decode_constraints(c: pb::Constraints) -> Constraints {
    use pb::constraints::Structured;
    Constraints {
        logit_bias: c
            .logit_bias
            .into_iter()
            .map(|b| LogitBias {
                token_id: b.token_id,
                bias: b.bias.unwrap_or(0.0),
            })
            .collect(),
        structured: c.structured.map(|s| match s {
            Structured::Regex(t) => StructuredOutput::Regex(t),
            Structured::JsonSchema(t) => StructuredOutput::JsonSchema(t),
            Structured::Grammar(t) => StructuredOutput::Grammar(t),
            Structured::StructuralTag(t) => StructuredOutput::StructuralTag(t),
        }),
    }
}

fn encode_pd(leg: PdLeg) -> Result<pb::PdLeg, WireError> {
    Ok(pb::PdLeg {
        role: match leg.role {
            PdRole::Prefill => 1,
            PdRole::Decode => 2,
        },
        bootstrap: leg.bootstrap.map(|b| pb::Bootstrap {
            host: b.host,
            port: b.port.map(u32::from),
            room: b.room,
        }),
        kv_transfer_params: leg
            .kv_transfer_params
            .map(|v| encode_json(&v, "pd.kv_transfer_params"))
            .transpose()?,
    })
}

fn decode_pd(leg: pb::PdLeg) -> Result<PdLeg, WireError> {
    let role = match leg.role {
        1 => PdRole::Prefill,
        2 => PdRole::Decode,
        _ => return Err(WireError::OutOfRange("pd.role")),
    };
    let bootstrap = leg
        .bootstrap
        .map(|b| {
            let port = b
                .port
                .map(|p| u16::try_from(p).map_err(|_| WireError::OutOfRange("pd.bootstrap.port")))
                .transpose()?;
            Ok::<_, WireError>(Bootstrap {
                host: b.host,
                port,
                room: b.room,
            })
        })
        .transpose()?;
    Ok(PdLeg {
        role,
        bootstrap,
        kv_transfer_params: leg
            .kv_transfer_params
            .map(|b| decode_json(&b, "pd.kv_transfer_params"))
            .transpose()?,
    })
}

/// Map a wire request back to the contract. Absent option messages decode as the contract's
/// defaults (the encoder always sends them).
///
/// # Errors
/// [`WireError::Missing`] without a native body; [`WireError::Json`] for invalid JSON text.
pub fn decode_request(request: pb::GenerateRequest) -> Result<EngineRequest, WireError> {
    let pb::GenerateRequest {
        request_id,
        token_ids,
        stop,
        sampling,
        output,
        routing,
        handoff,
        native,
        pd,
        constraints,
        native_only,
    } = request;
    let stop = stop.unwrap_or_default();
    let output = output.unwrap_or_default();
    let routing = routing.unwrap_or_default();
    let native = native.ok_or(WireError::Missing("native"))?;
    Ok(EngineRequest {
        request_id,
        token_ids,
        stop: StopConditions {
            max_tokens: stop.max_tokens,
            min_tokens: stop.min_tokens,
            stop_token_ids: stop.stop_token_ids,
            stop: stop.stop,
            ignore_eos: stop.ignore_eos,
        },
        sampling: sampling.map_or_else(SamplingOptions::default, |s| SamplingOptions {
            n: s.n,
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k,
            min_p: s.min_p,
            frequency_penalty: s.frequency_penalty,
            presence_penalty: s.presence_penalty,
            repetition_penalty: s.repetition_penalty,
            seed: s.seed,
            sample_index: s.sample_index,
        }),
        output: OutputOptions {
            logprobs: output.logprobs,
            prompt_logprobs: output.prompt_logprobs.map(|p| PromptLogprobOptions {
                start: p.start,
                top_k: p.top_k,
            }),
            token_ids_logprobs: output.token_ids_logprobs,
            routed_experts: output.routed_experts,
            routed_experts_start: output.routed_experts_start,
            sampling_mask: output.sampling_mask,
            stream: output.stream,
            relay: false,
        },
        routing: RoutingHints {
            dp_rank: routing.dp_rank,
            priority: routing.priority,
            cache_salt: routing.cache_salt,
            session_id: routing.session_id,
            lora: routing.lora,
        },
        handoff: handoff.map(|b| decode_json(&b, "handoff")).transpose()?,
        pd: pd.map(decode_pd).transpose()?,
        native: NativeBody {
            format: native.format,
            body: decode_json(&native.body, "native.body")?,
        },
        constraints: constraints.map(decode_constraints).unwrap_or_default(),
        native_only,
    })
}

// === Generate response ===

/// Map one stream item onto the wire: a delta becomes `Output`, a failure `Error`.
///
/// # Errors
/// As [`encode_output`].
pub fn encode_item(
    item: Result<EngineOutput, EngineError>,
) -> Result<pb::GenerateResponse, WireError> {
    let item = match item {
        Ok(output) => Item::Output(encode_output(output)?),
        Err(error) => Item::Error(encode_error(error)),
    };
    Ok(pb::GenerateResponse { item: Some(item) })
}

/// Map a wire stream item back to the contract.
///
/// # Errors
/// [`WireError::Missing`] for an empty item, else as [`decode_output`] and [`decode_error`].
pub fn decode_item(
    response: pb::GenerateResponse,
) -> Result<Result<EngineOutput, EngineError>, WireError> {
    match response.item {
        Some(Item::Output(output)) => decode_output(output).map(Ok),
        Some(Item::Error(error)) => decode_error(error).map(Err),
        None => Err(WireError::Missing("item")),
    }
}

/// Map one delta onto the wire.
///
/// # Errors
/// [`WireError::OutOfRange`] for a sampling-mask set longer than `u32::MAX` ids;
/// [`WireError::Json`] as for [`encode_request`].
pub fn encode_output(output: EngineOutput) -> Result<pb::Output, WireError> {
    let EngineOutput {
        index,
        token_ids,
        logprobs,
        prompt_logprobs,
        routed_experts,
        sampling_mask,
        finish_reason,
        usage,
        handoff,
        engine_data,
        native: _,
    } = output;
    Ok(pb::Output {
        index,
        token_ids,
        logprobs: logprobs.map(|entries| pb::TokenLogprobs {
            entries: entries.into_iter().map(encode_token_logprob).collect(),
        }),
        prompt_logprobs: prompt_logprobs.map(|p| pb::PromptLogprobs {
            start: p.start,
            entries: p
                .entries
                .into_iter()
                .map(|e| pb::PromptLogprobEntry {
                    logprob: e.map(encode_token_logprob),
                })
                .collect(),
            first_text: p.first_text,
            first_token_id: p.first_token_id,
        }),
        routed_experts: routed_experts.map(|r| pb::RoutedExperts {
            num_layers: r.num_layers,
            top_k: r.top_k,
            ids: r.ids,
        }),
        sampling_mask: sampling_mask.map(encode_mask).transpose()?,
        finish_reason: finish_reason.map(encode_finish),
        usage: usage.map(|u| pb::Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
        }),
        handoff: handoff.map(|v| encode_json(&v, "handoff")).transpose()?,
        engine_data: engine_data
            .map(|v| encode_json(&v, "engine_data"))
            .transpose()?,
    })
}

/// Map a wire delta back to the contract.
///
/// # Errors
/// [`WireError::MaskShape`], [`WireError::Missing`] for a finish reason without a reason,
/// [`WireError::Json`] for invalid JSON text.
pub fn decode_output(output: pb::Output) -> Result<EngineOutput, WireError> {
    let pb::Output {
        index,
        token_ids,
        logprobs,
        prompt_logprobs,
        routed_experts,
        sampling_mask,
        finish_reason,
        usage,
        handoff,
        engine_data,
    } = output;
    Ok(EngineOutput {
        index,
        token_ids,
        logprobs: logprobs.map(|l| l.entries.into_iter().map(decode_token_logprob).collect()),
        prompt_logprobs: prompt_logprobs.map(|p| PromptLogprobs {
            start: p.start,
            entries: p
                .entries
                .into_iter()
                .map(|e| e.logprob.map(decode_token_logprob))
                .collect(),
            first_text: p.first_text,
            first_token_id: p.first_token_id,
        }),
        routed_experts: routed_experts.map(|r| RoutedExperts {
            num_layers: r.num_layers,
            top_k: r.top_k,
            ids: r.ids,
        }),
        sampling_mask: sampling_mask.map(decode_mask).transpose()?,
        finish_reason: finish_reason.map(decode_finish).transpose()?,
        usage: usage.map(|u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
        }),
        handoff: handoff.map(|b| decode_json(&b, "handoff")).transpose()?,
        engine_data: engine_data
            .map(|b| decode_json(&b, "engine_data"))
            .transpose()?,
        // Relay never crosses the wire (the sidecar's engine answers typed).
        native: None,
    })
}

fn encode_token_logprob(t: TokenLogprob) -> pb::TokenLogprob {
    pb::TokenLogprob {
        token_id: t.token_id,
        logprob: Some(t.logprob),
        rank: t.rank,
        top: t.top.into_iter().map(encode_candidate).collect(),
        selected: t.selected.into_iter().map(encode_candidate).collect(),
        text: t.text,
    }
}

fn decode_token_logprob(t: pb::TokenLogprob) -> TokenLogprob {
    TokenLogprob {
        token_id: t.token_id,
        logprob: t.logprob.unwrap_or_default(),
        rank: t.rank,
        top: t.top.into_iter().map(decode_candidate).collect(),
        selected: t.selected.into_iter().map(decode_candidate).collect(),
        text: t.text,
    }
}

fn encode_candidate(c: Candidate) -> pb::Candidate {
    pb::Candidate {
        token_id: c.token_id,
        logprob: Some(c.logprob),
        rank: c.rank,
        text: c.text,
    }
}

fn decode_candidate(c: pb::Candidate) -> Candidate {
    Candidate {
        token_id: c.token_id,
        logprob: c.logprob.unwrap_or_default(),
        rank: c.rank,
        text: c.text,
    }
}

fn encode_mask(sets: Vec<Vec<u32>>) -> Result<pb::SamplingMask, WireError> {
    let mut lengths = Vec::with_capacity(sets.len());
    let mut token_ids = Vec::with_capacity(sets.iter().map(Vec::len).sum());
    for set in sets {
        lengths.push(u32::try_from(set.len()).map_err(|_| WireError::OutOfRange("sampling_mask"))?);
        token_ids.extend_from_slice(&set);
    }
    Ok(pb::SamplingMask { lengths, token_ids })
}

fn decode_mask(mask: pb::SamplingMask) -> Result<Vec<Vec<u32>>, WireError> {
    let covered: u64 = mask.lengths.iter().map(|&l| u64::from(l)).sum();
    let sent = mask.token_ids.len() as u64;
    if covered != sent {
        return Err(WireError::MaskShape { covered, sent });
    }
    let mut rest = mask.token_ids.as_slice();
    let mut sets = Vec::with_capacity(mask.lengths.len());
    for len in mask.lengths {
        // In range: the lengths add up to `rest.len()`.
        let (set, tail) = rest.split_at(len as usize);
        sets.push(set.to_vec());
        rest = tail;
    }
    Ok(sets)
}

fn encode_finish(reason: FinishReason) -> pb::FinishReason {
    let reason = match reason {
        FinishReason::Eos { token_id } => Reason::EosTokenId(token_id),
        FinishReason::Stop {
            matched: StopMatch::TokenId(id),
        } => Reason::StopTokenId(id),
        FinishReason::Stop {
            matched: StopMatch::Text(text),
        } => Reason::StopText(text),
        FinishReason::Length { length } => Reason::Length(length),
        FinishReason::Cancelled { message } => Reason::Cancelled(message),
        FinishReason::Error { message } => Reason::Error(message),
    };
    pb::FinishReason {
        reason: Some(reason),
    }
}

fn decode_finish(reason: pb::FinishReason) -> Result<FinishReason, WireError> {
    Ok(
        match reason
            .reason
            .ok_or(WireError::Missing("finish_reason.reason"))?
        {
            Reason::EosTokenId(token_id) => FinishReason::Eos { token_id },
            Reason::StopTokenId(id) => FinishReason::Stop {
                matched: StopMatch::TokenId(id),
            },
            Reason::StopText(text) => FinishReason::Stop {
                matched: StopMatch::Text(text),
            },
            Reason::Length(length) => FinishReason::Length { length },
            Reason::Cancelled(message) => FinishReason::Cancelled { message },
            Reason::Error(message) => FinishReason::Error { message },
        },
    )
}

// === Errors ===

/// Map an engine failure onto the wire.
pub fn encode_error(error: EngineError) -> pb::Error {
    let kind = match error.kind {
        ErrorKind::InvalidArgument => pb::ErrorKind::InvalidArgument,
        ErrorKind::Unsupported => pb::ErrorKind::Unsupported,
        ErrorKind::Unavailable => pb::ErrorKind::Unavailable,
        ErrorKind::Overloaded => pb::ErrorKind::Overloaded,
        ErrorKind::StreamIncomplete => pb::ErrorKind::StreamIncomplete,
        ErrorKind::Cancelled => pb::ErrorKind::Cancelled,
        ErrorKind::Internal => pb::ErrorKind::Internal,
        // The wire has no timeout kind: it travels as `Unavailable` with HTTP 504 (a gateway
        // timeout, as an engine's own 504 maps), so the frontend still answers 504.
        ErrorKind::Timeout => pb::ErrorKind::Unavailable,
    };
    let status_code = if error.kind == ErrorKind::Timeout {
        Some(504)
    } else {
        error.status_code.map(u32::from)
    };
    pb::Error {
        kind: kind.into(),
        message: error.message,
        status_code,
        err_type: error.err_type,
        retry_after_secs: error.retry_after_secs,
    }
}

/// Map a wire failure back to the contract; an unknown or unspecified kind becomes
/// [`ErrorKind::Internal`].
///
/// # Errors
/// [`WireError::OutOfRange`] for a status code above `u16::MAX`.
pub fn decode_error(error: pb::Error) -> Result<EngineError, WireError> {
    let kind = match pb::ErrorKind::try_from(error.kind) {
        Ok(pb::ErrorKind::InvalidArgument) => ErrorKind::InvalidArgument,
        Ok(pb::ErrorKind::Unsupported) => ErrorKind::Unsupported,
        Ok(pb::ErrorKind::Unavailable) => ErrorKind::Unavailable,
        Ok(pb::ErrorKind::Overloaded) => ErrorKind::Overloaded,
        Ok(pb::ErrorKind::StreamIncomplete) => ErrorKind::StreamIncomplete,
        Ok(pb::ErrorKind::Cancelled) => ErrorKind::Cancelled,
        Ok(pb::ErrorKind::Internal | pb::ErrorKind::Unspecified) | Err(_) => ErrorKind::Internal,
    };
    let status_code = error
        .status_code
        .map(|c| u16::try_from(c).map_err(|_| WireError::OutOfRange("status_code")))
        .transpose()?;
    Ok(EngineError {
        kind,
        message: error.message,
        status_code,
        err_type: error.err_type,
        retry_after_secs: error.retry_after_secs,
        native: None,
    })
}

// === Info ===

/// Map model facts onto the wire (as JSON, see `InfoResponse` in the `.proto`).
///
/// # Errors
/// [`WireError::Json`] when the facts cannot be written as JSON.
pub fn encode_info(info: &EngineInfo) -> Result<pb::InfoResponse, WireError> {
    serde_json::to_vec(info)
        .map(|json| pb::InfoResponse {
            info: Bytes::from(json),
            native_format: None,
        })
        .map_err(|e| WireError::Json {
            field: "info",
            reason: e.to_string(),
        })
}

/// Map wire model facts back to the contract.
///
/// # Errors
/// [`WireError::Json`] when the text is not the JSON form of [`EngineInfo`].
pub fn decode_info(info: &pb::InfoResponse) -> Result<EngineInfo, WireError> {
    serde_json::from_slice(&info.info).map_err(|e| WireError::Json {
        field: "info",
        reason: e.to_string(),
    })
}

// === JSON ===

fn encode_json(value: &Value, field: &'static str) -> Result<Bytes, WireError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| WireError::Json {
            field,
            reason: e.to_string(),
        })
}

fn decode_json(text: &[u8], field: &'static str) -> Result<Value, WireError> {
    serde_json::from_slice(text).map_err(|e| WireError::Json {
        field,
        reason: e.to_string(),
    })
}

// === Control ===

/// At most this many format names besides `"sglang"` and `"vllm"` are interned per process.
pub const MAX_INTERNED_FORMATS: usize = 32;

static INTERNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The static name for format `name`: `"sglang"` and `"vllm"` as they are, another name leaked
/// once and reused (at most [`MAX_INTERNED_FORMATS`] of them; `None` beyond).
pub fn intern_format(name: &str) -> Option<&'static str> {
    match name {
        "sglang" => return Some("sglang"),
        "vllm" => return Some("vllm"),
        _ => {}
    }
    let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = interned.iter().find(|n| **n == name) {
        return Some(known);
    }
    if interned.len() >= MAX_INTERNED_FORMATS {
        return None;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    interned.push(leaked);
    Some(leaked)
}

/// Map a control call onto the wire. The timeout travels in whole milliseconds (rounded down;
/// saturating at `u64::MAX`).
pub fn encode_control(call: ControlCall) -> pb::ControlRequest {
    use pb::control_action::{Kind, Pause, SetWeightVersion, UpdateWeights};
    let unit = pb::Unit {};
    let kind = match call.action {
        ControlAction::Pause { mode } => Kind::Pause(Pause {
            mode: encode_pause_mode(mode).into(),
        }),
        ControlAction::Resume => Kind::Resume(unit),
        ControlAction::FlushCache => Kind::FlushCache(unit),
        ControlAction::UpdateWeights { version } => Kind::UpdateWeights(UpdateWeights { version }),
        ControlAction::InitWeightsGroup => Kind::InitWeightsGroup(unit),
        ControlAction::SetWeightVersion { version } => {
            Kind::SetWeightVersion(SetWeightVersion { version })
        }
        ControlAction::IsPaused => Kind::IsPaused(unit),
        ControlAction::WeightInfo => Kind::WeightInfo(unit),
    };
    pb::ControlRequest {
        format: call.format.to_owned(),
        action: Some(pb::ControlAction { kind: Some(kind) }),
        method: call.method,
        path: call.path,
        query: call.query,
        body: call.body,
        timeout_ms: u64::try_from(call.timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

/// Map a wire control call back to the contract.
///
/// # Errors
/// [`WireError::Missing`] without an action (or its kind), [`WireError::OutOfRange`] for an
/// unknown or unspecified pause mode, [`WireError::Format`] for a format name that cannot be
/// interned.
pub fn decode_control(request: pb::ControlRequest) -> Result<ControlCall, WireError> {
    use pb::control_action::Kind;
    let kind = request
        .action
        .and_then(|a| a.kind)
        .ok_or(WireError::Missing("action"))?;
    let action = match kind {
        Kind::Pause(p) => ControlAction::Pause {
            mode: decode_pause_mode(p.mode)?,
        },
        Kind::Resume(_) => ControlAction::Resume,
        Kind::FlushCache(_) => ControlAction::FlushCache,
        Kind::UpdateWeights(u) => ControlAction::UpdateWeights { version: u.version },
        Kind::InitWeightsGroup(_) => ControlAction::InitWeightsGroup,
        Kind::SetWeightVersion(v) => ControlAction::SetWeightVersion { version: v.version },
        Kind::IsPaused(_) => ControlAction::IsPaused,
        Kind::WeightInfo(_) => ControlAction::WeightInfo,
    };
    let format = intern_format(&request.format).ok_or(WireError::Format(request.format))?;
    Ok(ControlCall {
        format,
        action,
        method: request.method,
        path: request.path,
        query: request.query,
        body: request.body,
        timeout: Duration::from_millis(request.timeout_ms),
    })
}

fn encode_pause_mode(mode: PauseMode) -> pb::PauseMode {
    match mode {
        PauseMode::Abort => pb::PauseMode::Abort,
        PauseMode::InPlace => pb::PauseMode::InPlace,
        PauseMode::Retract => pb::PauseMode::Retract,
        PauseMode::Wait => pb::PauseMode::Wait,
        PauseMode::Keep => pb::PauseMode::Keep,
    }
}

fn decode_pause_mode(mode: i32) -> Result<PauseMode, WireError> {
    match pb::PauseMode::try_from(mode) {
        Ok(pb::PauseMode::Abort) => Ok(PauseMode::Abort),
        Ok(pb::PauseMode::InPlace) => Ok(PauseMode::InPlace),
        Ok(pb::PauseMode::Retract) => Ok(PauseMode::Retract),
        Ok(pb::PauseMode::Wait) => Ok(PauseMode::Wait),
        Ok(pb::PauseMode::Keep) => Ok(PauseMode::Keep),
        Ok(pb::PauseMode::Unspecified) | Err(_) => Err(WireError::OutOfRange("action.pause.mode")),
    }
}

/// Map an engine's control answer (or failure) onto the wire; a failure as [`encode_error`].
pub fn encode_control_result(result: Result<ControlReply, EngineError>) -> pb::ControlResponse {
    use pb::control_response::Result as Answer;
    let result = match result {
        Ok(reply) => Answer::Reply(pb::ControlReply {
            status: u32::from(reply.status),
            content_type: reply.content_type,
            body: reply.body,
        }),
        Err(error) => Answer::Error(encode_error(error)),
    };
    pb::ControlResponse {
        result: Some(result),
    }
}

/// Map a wire control answer back to the contract. A failure decodes as [`decode_error`], except
/// that `Unavailable` with status code 504 is [`ErrorKind::Timeout`] again (how
/// [`encode_error`] sends a timeout; an engine's own 504 answer is a reply, not a failure).
///
/// # Errors
/// [`WireError::Missing`] without a result, [`WireError::OutOfRange`] for a status above
/// `u16::MAX`.
pub fn decode_control_result(
    response: pb::ControlResponse,
) -> Result<Result<ControlReply, EngineError>, WireError> {
    use pb::control_response::Result as Answer;
    match response.result.ok_or(WireError::Missing("result"))? {
        Answer::Reply(reply) => Ok(Ok(ControlReply {
            status: u16::try_from(reply.status).map_err(|_| WireError::OutOfRange("status"))?,
            content_type: reply.content_type,
            body: reply.body,
        })),
        Answer::Error(error) => {
            let mut error = decode_error(error)?;
            if error.kind == ErrorKind::Unavailable && error.status_code == Some(504) {
                error.kind = ErrorKind::Timeout;
                error.status_code = None;
            }
            Ok(Err(error))
        }
    }
}
