//! Behaviour tests of [`MockEngine`], by area, plus the shared helpers and the invariant checker.

mod basics;
mod cancel;
mod control;
mod faults;
mod logprobs;
mod properties;
mod timing;

use futures::StreamExt;
use genfront_protocol::{
    Engine, EngineError, EngineOutput, EngineRequest, FinishReason, StopMatch,
};
use tokio_util::sync::CancellationToken;

use crate::{MockConfig, MockEngine};

type Item = Result<EngineOutput, EngineError>;

/// A zero-delay engine with `f` applied to its config.
fn engine_with(f: impl FnOnce(&mut MockConfig)) -> MockEngine {
    let mut config = MockConfig::zero_delay();
    f(&mut config);
    MockEngine::new(config).expect("test config is valid")
}

fn engine() -> MockEngine {
    engine_with(|_| {})
}

fn request(prompt: &[u32], max_tokens: u32) -> EngineRequest {
    let mut r = EngineRequest {
        token_ids: prompt.to_vec(),
        ..EngineRequest::default()
    };
    r.stop.max_tokens = Some(max_tokens);
    r
}

fn prompt(len: u32) -> Vec<u32> {
    (0..len).map(|i| (i * 7919 + 13) % 32_000).collect()
}

async fn collect(engine: &MockEngine, req: EngineRequest) -> Vec<Item> {
    engine
        .generate(req, CancellationToken::new())
        .collect()
        .await
}

async fn outputs(engine: &MockEngine, req: EngineRequest) -> Vec<EngineOutput> {
    collect(engine, req)
        .await
        .into_iter()
        .map(|item| item.expect("no error expected"))
        .collect()
}

async fn single_error(engine: &MockEngine, req: EngineRequest) -> EngineError {
    let mut items = collect(engine, req).await;
    assert_eq!(items.len(), 1, "an error is the stream's only item");
    match items.pop() {
        Some(Err(e)) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn tokens(items: &[EngineOutput], choice: u32) -> Vec<u32> {
    items
        .iter()
        .filter(|o| o.index == choice)
        .flat_map(|o| o.token_ids.iter().copied())
        .collect()
}

fn finish(items: &[EngineOutput], choice: u32) -> FinishReason {
    items
        .iter()
        .filter(|o| o.index == choice)
        .find_map(|o| o.finish_reason.clone())
        .expect("every choice finishes")
}

/// Check every documented invariant of one request's complete output.
fn check(engine: &MockEngine, req: &EngineRequest, items: &[EngineOutput]) {
    let info = engine.info();
    let prompt_len = req.token_ids.len() as u32;
    let room = info.max_context_len - prompt_len;
    let budget = req.stop.max_tokens.map_or(room, |m| m.min(room));
    for choice in 0..req.sampling.n {
        let mine: Vec<&EngineOutput> = items.iter().filter(|o| o.index == choice).collect();
        assert!(!mine.is_empty(), "choice {choice} has items");
        let finishes = mine.iter().filter(|o| o.finish_reason.is_some()).count();
        assert_eq!(finishes, 1, "exactly one finish for choice {choice}");
        let last = mine[mine.len() - 1];
        let reason = last.finish_reason.clone().expect("finish is last");
        let mut generated = Vec::new();
        let mut expert_rows = 0;
        for (pos, o) in mine.iter().enumerate() {
            assert!(o.token_ids.len() <= 1);
            assert!(o.engine_data.is_none() && o.handoff.is_none());
            let cancelled_like = matches!(
                o.finish_reason,
                Some(FinishReason::Cancelled { .. } | FinishReason::Error { .. })
            );
            if cancelled_like {
                assert!(
                    o.token_ids.is_empty(),
                    "a cancel/error finish adds no tokens"
                );
            }
            for (j, &t) in o.token_ids.iter().enumerate() {
                assert!(Some(t) < info.vocab_size);
                check_token_logprob(req, o, j, t);
                if let Some(mask) = &o.sampling_mask {
                    assert!(mask[j].contains(&t), "sampled token in its support set");
                    assert!(mask[j].windows(2).all(|w| w[0] < w[1]), "mask sorted");
                }
                let constrained = (generated.len() as u32) < req.stop.min_tokens;
                if constrained && info.vocab_size > Some(64) {
                    assert!(
                        !req.stop.stop_token_ids.contains(&t),
                        "stop id before min_tokens"
                    );
                    if !req.stop.ignore_eos {
                        assert!(!info.eos_token_ids.contains(&t), "EOS before min_tokens");
                    }
                }
                generated.push(t);
            }
            assert_eq!(
                o.logprobs.as_ref().map(Vec::len),
                req.output
                    .logprobs
                    .is_some()
                    .then_some(o.token_ids.len())
                    .filter(|&n| n > 0),
                "one logprob entry per token, when asked for"
            );
            assert_eq!(
                o.sampling_mask.as_ref().map(Vec::len),
                req.output
                    .sampling_mask
                    .then_some(o.token_ids.len())
                    .filter(|&n| n > 0),
            );
            let usage = o.usage.expect("every item has usage");
            assert_eq!(usage.prompt_tokens, prompt_len);
            assert_eq!(usage.completion_tokens, generated.len() as u32);
            assert!(usage.cached_tokens < prompt_len);
            if pos > 0 {
                assert!(o.prompt_logprobs.is_none(), "prompt logprobs only once");
            }
            if let Some(p) = &o.prompt_logprobs {
                let opts = req.output.prompt_logprobs.as_ref().expect("asked for");
                assert_eq!(p.start, opts.start);
                assert_eq!(p.entries.len() as u32, prompt_len - opts.start);
                for (k, entry) in p.entries.iter().enumerate() {
                    let position = opts.start as usize + k;
                    assert_eq!(entry.is_none(), position == 0);
                    if let Some(e) = entry {
                        assert_eq!(e.token_id, req.token_ids[position]);
                        assert_eq!(
                            e.top.len() as u32,
                            opts.top_k.min(info.vocab_size.unwrap_or(u32::MAX))
                        );
                    }
                }
            }
            if let Some(r) = &o.routed_experts {
                assert!(req.output.routed_experts);
                assert_eq!(r.ids.len(), r.rows() * 8, "4 layers x top 2");
                assert!(r.ids.iter().all(|&e| (0..8).contains(&e)));
                expert_rows += r.rows() as u32;
            }
        }
        if req.output.prompt_logprobs.is_some() && !first_is_bare(mine[0]) {
            assert!(
                mine[0].prompt_logprobs.is_some(),
                "first item has prompt logprobs"
            );
        }
        if req.output.routed_experts && !first_is_bare(mine[0]) {
            let c = generated.len() as u32;
            let start = req.output.routed_experts_start;
            assert_eq!(expert_rows, prompt_len - start + c.saturating_sub(1));
        }
        let c = generated.len() as u32;
        match reason {
            FinishReason::Length { length } => {
                assert_eq!(length, c);
                assert_eq!(c, budget);
            }
            FinishReason::Eos { token_id } => {
                assert_eq!(generated.last(), Some(&token_id));
                assert!(info.eos_token_ids.contains(&token_id) && !req.stop.ignore_eos);
                assert!(c > req.stop.min_tokens);
            }
            FinishReason::Stop { matched } => {
                let StopMatch::TokenId(id) = matched else {
                    panic!("token-only engine matched text")
                };
                assert_eq!(generated.last(), Some(&id));
                assert!(req.stop.stop_token_ids.contains(&id));
                assert!(c > req.stop.min_tokens);
            }
            FinishReason::Cancelled { message } => assert_eq!(message, "Aborted"),
            FinishReason::Error { .. } => {}
        }
        assert!(c <= budget);
    }
}

/// Whether a choice's first item is a cancel/error finish produced before any prefill output.
fn first_is_bare(first: &EngineOutput) -> bool {
    matches!(
        first.finish_reason,
        Some(FinishReason::Cancelled { .. } | FinishReason::Error { .. })
    )
}

fn check_token_logprob(req: &EngineRequest, o: &EngineOutput, j: usize, token: u32) {
    let Some(k) = req.output.logprobs else {
        return;
    };
    let lp = &o.logprobs.as_ref().expect("asked for")[j];
    assert_eq!(lp.token_id, token);
    assert!(lp.logprob.is_finite() && lp.logprob <= 0.0);
    let rank = lp.rank.expect("rank is known");
    assert!(rank >= 1);
    assert!(lp.top.len() as u32 <= k);
    for pair in lp.top.windows(2) {
        assert!(pair[0].logprob > pair[1].logprob, "top strictly descending");
        assert!(pair[0].rank < pair[1].rank);
    }
    for (i, c) in lp.top.iter().enumerate() {
        assert_eq!(c.rank, Some(i as u32 + 1));
        assert!(c.logprob <= 0.0);
    }
    if let Some(at) = lp.top.get(rank as usize - 1) {
        assert_eq!(at.token_id, token, "rank matches the position in top");
        assert_eq!(at.logprob, lp.logprob);
    }
    let ids: Vec<u32> = lp.selected.iter().map(|c| c.token_id).collect();
    assert_eq!(
        ids, req.output.token_ids_logprobs,
        "selected in request order"
    );
    for c in &lp.selected {
        assert!(c.logprob <= 0.0);
        if c.token_id == token {
            assert_eq!(c.logprob, lp.logprob);
        }
    }
    if req.sampling.is_greedy() && req.stop.min_tokens == 0 {
        assert_eq!(rank, 1, "greedy picks rank 1");
    }
}
