//! Request validation: everything the mock engine refuses, with client-facing messages.

use genfront_protocol::{EngineError, EngineInfo, EngineRequest};

/// Check `req` against `info` and the mock's capabilities.
///
/// Sampling penalties are accepted and ignored; `max_tokens` beyond the context is clamped later
/// rather than rejected (formats enforce their engine's own rule).
pub(crate) fn validate(info: &EngineInfo, req: &EngineRequest) -> Result<(), EngineError> {
    let invalid = |m: String| Err(EngineError::invalid_argument(m));
    let s = &req.sampling;
    if s.n == 0 {
        return invalid("n must be at least 1".to_owned());
    }
    if let Some(max) = info.max_num_seqs
        && s.n > max
    {
        return invalid(format!(
            "n ({}) exceeds the maximum number of parallel samples ({max})",
            s.n
        ));
    }
    // The mock always knows its vocabulary (`MockConfig::validate`).
    let vocab_size = info.vocab_size.unwrap_or(u32::MAX);
    let prompt_len = req.token_ids.len();
    if prompt_len == 0 {
        return invalid("the prompt must contain at least one token".to_owned());
    }
    if prompt_len >= info.max_context_len as usize {
        return invalid(format!(
            "the prompt has {prompt_len} tokens, which leaves no room for output in the context \
             length of {} tokens",
            info.max_context_len
        ));
    }
    if let Some((pos, id)) = req
        .token_ids
        .iter()
        .enumerate()
        .find(|&(_, &id)| id >= vocab_size)
    {
        return invalid(format!(
            "prompt token id {id} at position {pos} is outside the vocabulary (vocab_size {vocab_size})"
        ));
    }
    if let Some(id) = req
        .output
        .token_ids_logprobs
        .iter()
        .find(|&&id| id >= vocab_size)
    {
        return invalid(format!(
            "logprob token id {id} is outside the vocabulary (vocab_size {vocab_size})"
        ));
    }
    if !req.stop.stop.is_empty() {
        return Err(EngineError::unsupported(
            "stop strings need a tokenizer; the mock engine is token-only (use stop token ids)",
        ));
    }
    if let Some(t) = s.temperature
        && !(t.is_finite() && t >= 0.0)
    {
        return invalid(format!("temperature must be a finite number >= 0, got {t}"));
    }
    if let Some(p) = s.top_p
        && !(p > 0.0 && p <= 1.0)
    {
        return invalid(format!("top_p must be in (0, 1], got {p}"));
    }
    if let Some(p) = s.min_p
        && !(0.0..=1.0).contains(&p)
    {
        return invalid(format!("min_p must be in [0, 1], got {p}"));
    }
    if let Some(p) = &req.output.prompt_logprobs
        && p.start as usize > prompt_len
    {
        return invalid(format!(
            "prompt logprobs start ({}) is beyond the prompt length ({prompt_len})",
            p.start
        ));
    }
    if req.output.routed_experts {
        if !info.routed_experts {
            return Err(EngineError::unsupported(
                "this engine does not report routed experts",
            ));
        }
        if req.output.routed_experts_start as usize > prompt_len {
            return invalid(format!(
                "routed experts start ({}) is beyond the prompt length ({prompt_len})",
                req.output.routed_experts_start
            ));
        }
    }
    if req.output.sampling_mask && !info.sampling_mask {
        return Err(EngineError::unsupported(
            "this engine does not report sampling masks",
        ));
    }
    Ok(())
}
