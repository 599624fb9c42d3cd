//! Determinism, choices, stop conditions and request validation.

use genfront_protocol::{Engine, ErrorKind, FinishReason, StopMatch};

use super::{check, engine, engine_with, finish, outputs, prompt, request, single_error, tokens};
use tokio_util::sync::CancellationToken;

use crate::{MockConfig, MockEngine};

#[tokio::test]
async fn same_request_same_output_whatever_else_ran() {
    let e = engine();
    let mut req = request(&prompt(50), 20);
    req.sampling.temperature = Some(0.8);
    req.sampling.seed = Some(7);
    req.output.logprobs = Some(3);
    let first = outputs(&e, req.clone()).await;
    // Unrelated traffic in between must not matter, nor a fresh engine with the same config.
    outputs(&e, request(&prompt(9), 5)).await;
    let second = outputs(&e, req.clone()).await;
    let fresh = outputs(&engine(), req.clone()).await;
    assert_eq!(first.len(), 20);
    check(&e, &req, &first);
    let strip = |items: Vec<_>| -> Vec<_> {
        items
            .into_iter()
            .map(|mut o: genfront_protocol::EngineOutput| {
                o.usage = None; // cached_tokens legitimately differs on repeat
                o
            })
            .collect()
    };
    assert_eq!(strip(first.clone()), strip(second));
    assert_eq!(strip(first), strip(fresh));
}

#[tokio::test]
async fn seeds_and_engine_salt_change_samples() {
    let e = engine();
    let mut req = request(&prompt(10), 16);
    req.sampling.temperature = Some(1.0);
    req.sampling.seed = Some(1);
    let one = tokens(&outputs(&e, req.clone()).await, 0);
    req.sampling.seed = Some(2);
    let two = tokens(&outputs(&e, req.clone()).await, 0);
    assert_ne!(one, two);
    // No seed: still deterministic (keyed by the prompt).
    req.sampling.seed = None;
    let a = tokens(&outputs(&e, req.clone()).await, 0);
    let b = tokens(&outputs(&e, req.clone()).await, 0);
    assert_eq!(a, b);
    let salted = engine_with(|c| c.seed = 99);
    assert_ne!(tokens(&outputs(&salted, req.clone()).await, 0), a);
}

#[tokio::test]
async fn greedy_choices_agree_and_sampled_choices_differ() {
    let e = engine();
    let mut req = request(&prompt(10), 12);
    req.sampling.n = 3;
    req.sampling.temperature = Some(0.0);
    req.stop.ignore_eos = true;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_eq!(items.len(), 36);
    // Lock step: each step yields choices 0, 1, 2 in order.
    let order: Vec<u32> = items.iter().take(6).map(|o| o.index).collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2]);
    let t0 = tokens(&items, 0);
    assert_eq!(t0, tokens(&items, 1));
    assert_eq!(t0, tokens(&items, 2));
    // Greedy with n = 1 gives the same sequence.
    req.sampling.n = 1;
    assert_eq!(tokens(&outputs(&e, req.clone()).await, 0), t0);

    req.sampling.n = 2;
    req.sampling.temperature = Some(1.0);
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_ne!(tokens(&items, 0), tokens(&items, 1));
}

#[tokio::test]
async fn max_tokens_and_prefill_only() {
    let e = engine();
    let mut req = request(&prompt(8), 5);
    req.stop.ignore_eos = true;
    let items = outputs(&e, req.clone()).await;
    assert_eq!(items.len(), 5);
    assert_eq!(finish(&items, 0), FinishReason::Length { length: 5 });
    assert_eq!(
        items[4].token_ids.len(),
        1,
        "the finish item carries the last token"
    );
    assert!(items[..4].iter().all(|o| o.finish_reason.is_none()));

    req.stop.max_tokens = Some(0);
    req.sampling.n = 2;
    req.output.prompt_logprobs =
        Some(genfront_protocol::PromptLogprobOptions { start: 0, top_k: 2 });
    req.output.routed_experts = true;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_eq!(items.len(), 2, "one item per choice");
    for o in &items {
        assert!(o.token_ids.is_empty());
        assert_eq!(o.finish_reason, Some(FinishReason::Length { length: 0 }));
        assert_eq!(o.prompt_logprobs.as_ref().map(|p| p.entries.len()), Some(8));
        assert_eq!(o.routed_experts.as_ref().map(|r| r.rows()), Some(8));
        assert_eq!(o.usage.map(|u| u.completion_tokens), Some(0));
    }
}

#[tokio::test]
async fn no_max_tokens_runs_to_the_context() {
    let e = engine_with(|c| c.info.max_context_len = 40);
    let mut req = request(&prompt(30), 0);
    req.stop.max_tokens = None;
    req.stop.ignore_eos = true;
    let items = outputs(&e, req.clone()).await;
    assert_eq!(finish(&items, 0), FinishReason::Length { length: 10 });
    // An oversized max_tokens is clamped to the room left and ends like vLLM's scheduler ends
    // it (`num_tokens >= max_model_len` is `FINISHED_LENGTH_CAPPED`, finish reason `length`,
    // `v1/core/sched/utils.py:114-119` in vLLM 0.33.0; the vLLM format admits such a request).
    req.stop.max_tokens = Some(1000);
    let items = outputs(&e, req.clone()).await;
    assert_eq!(items.len(), 10);
    assert_eq!(finish(&items, 0), FinishReason::Length { length: 10 });
    // At most `u32::MAX` (what a format carries for a value past it) runs the same way.
    req.stop.max_tokens = Some(u32::MAX);
    let items = outputs(&e, req).await;
    assert_eq!(finish(&items, 0), FinishReason::Length { length: 10 });
}

#[tokio::test]
async fn stop_token_ids_end_with_the_token() {
    let e = engine();
    let mut req = request(&prompt(12), 10);
    req.sampling.temperature = Some(0.0);
    req.stop.ignore_eos = true;
    let free = tokens(&outputs(&e, req.clone()).await, 0);
    // Stop on the 4th token (first occurrence), which the model produces anyway.
    let stop = free[3];
    let at = free.iter().position(|&t| t == stop).expect("present");
    req.stop.stop_token_ids = vec![400_000, stop];
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_eq!(tokens(&items, 0), free[..=at]);
    assert_eq!(
        finish(&items, 0),
        FinishReason::Stop {
            matched: StopMatch::TokenId(stop)
        }
    );
    // min_tokens suppresses the stop token before it.
    req.stop.min_tokens = at as u32 + 1;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert!(!tokens(&items, 0)[..=at].contains(&stop));
}

#[tokio::test]
async fn eos_ignore_eos_and_min_tokens() {
    // EOS is ranked first at every position: greedy stops at once.
    let e = engine_with(|c| c.eos_probability = 1.0);
    let mut req = request(&prompt(5), 6);
    req.sampling.temperature = Some(0.0);
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_eq!(tokens(&items, 0), [2]);
    assert_eq!(finish(&items, 0), FinishReason::Eos { token_id: 2 });

    // ignore_eos: EOS is an ordinary token and the budget decides.
    req.stop.ignore_eos = true;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_eq!(tokens(&items, 0), [2; 6]);
    assert_eq!(finish(&items, 0), FinishReason::Length { length: 6 });

    // min_tokens: EOS cannot be drawn before it, then ends the request.
    req.stop.ignore_eos = false;
    req.stop.min_tokens = 3;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    let t = tokens(&items, 0);
    assert_eq!(t.len(), 4);
    assert!(!t[..3].contains(&2));
    assert_eq!(finish(&items, 0), FinishReason::Eos { token_id: 2 });
}

#[tokio::test]
async fn the_budget_wins_over_min_tokens() {
    let e = engine_with(|c| c.eos_probability = 1.0);
    let mut req = request(&prompt(5), 2);
    req.stop.min_tokens = 5;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    assert_eq!(finish(&items, 0), FinishReason::Length { length: 2 });
}

#[tokio::test]
async fn natural_stops_happen_with_the_default_eos_probability() {
    let e = MockEngine::new(MockConfig {
        eos_probability: 0.2,
        ..MockConfig::zero_delay()
    })
    .expect("valid");
    let mut eos = 0;
    for seed in 0..20 {
        let mut req = request(&prompt(4), 100);
        req.sampling.seed = Some(seed);
        let items = outputs(&e, req.clone()).await;
        check(&e, &req, &items);
        eos += usize::from(matches!(finish(&items, 0), FinishReason::Eos { .. }));
    }
    assert!(eos >= 15, "most runs end with EOS, got {eos}");
}

#[tokio::test]
async fn invalid_requests_are_rejected() {
    let e = engine_with(|c| {
        c.info.max_context_len = 100;
        c.info.routed_experts = false;
    });
    let cases: Vec<(genfront_protocol::EngineRequest, ErrorKind, &str)> = vec![
        (
            request(&[], 1),
            ErrorKind::InvalidArgument,
            "at least one token",
        ),
        (
            request(&prompt(100), 1),
            ErrorKind::InvalidArgument,
            "context length of 100",
        ),
        (
            request(&[1, 152_064], 1),
            ErrorKind::InvalidArgument,
            "position 1",
        ),
        (
            {
                let mut r = request(&[1], 1);
                r.stop.stop = vec!["\n".to_owned()];
                r
            },
            ErrorKind::Unsupported,
            "stop strings",
        ),
        (
            {
                let mut r = request(&[1], 1);
                r.output.routed_experts = true;
                r
            },
            ErrorKind::Unsupported,
            "routed experts",
        ),
        (
            {
                let mut r = request(&[1], 1);
                r.output.token_ids_logprobs = vec![5, 1 << 20];
                r
            },
            ErrorKind::InvalidArgument,
            "logprob token id",
        ),
        (
            {
                let mut r = request(&[1], 1);
                r.sampling.n = 0;
                r
            },
            ErrorKind::InvalidArgument,
            "n must be",
        ),
        (
            {
                let mut r = request(&[1], 1);
                r.sampling.temperature = Some(f64::NAN);
                r
            },
            ErrorKind::InvalidArgument,
            "temperature",
        ),
        (
            {
                let mut r = request(&[1], 1);
                r.sampling.top_p = Some(0.0);
                r
            },
            ErrorKind::InvalidArgument,
            "top_p",
        ),
        (
            {
                let mut r = request(&[1, 2], 1);
                r.output.prompt_logprobs =
                    Some(genfront_protocol::PromptLogprobOptions { start: 3, top_k: 0 });
                r
            },
            ErrorKind::InvalidArgument,
            "beyond the prompt length",
        ),
    ];
    let total = cases.len() as u64;
    for (req, kind, needle) in cases {
        let err = single_error(&e, req).await;
        assert_eq!(err.kind, kind, "{err}");
        assert!(
            err.message.contains(needle),
            "{:?} lacks {needle:?}",
            err.message
        );
    }
    assert_eq!(e.rejected(), total);
    assert_eq!(e.started(), 0);
    assert_eq!(e.requests(), total);
}

#[tokio::test]
async fn repeated_prompt_hits_the_prefix_cache() {
    let e = engine();
    let req = request(&prompt(100), 1);
    let first = outputs(&e, req.clone()).await;
    assert_eq!(first[0].usage.map(|u| u.cached_tokens), Some(0));
    assert_eq!(e.cached_blocks(), 6);
    let second = outputs(&e, req.clone()).await;
    assert_eq!(second[0].usage.map(|u| u.cached_tokens), Some(96));
    // Another cache namespace starts cold.
    let mut salted = req.clone();
    salted.routing.cache_salt = Some("tenant-b".to_owned());
    let third = outputs(&e, salted).await;
    assert_eq!(third[0].usage.map(|u| u.cached_tokens), Some(0));
    // A block-aligned prompt never counts its last token as cached.
    let aligned = request(&prompt(32), 1);
    outputs(&e, aligned.clone()).await;
    let again = outputs(&e, aligned).await;
    assert_eq!(again[0].usage.map(|u| u.cached_tokens), Some(31));
}

#[test]
fn info_and_readiness() {
    let e = MockEngine::default();
    assert!(e.ready());
    assert!(Engine::ready(&e));
    assert_eq!(Engine::info(&e), e.info());
    assert_eq!(e.info().vocab_size, Some(152_064));
    assert!(
        MockEngine::new(MockConfig {
            speedup: -1.0,
            ..MockConfig::default()
        })
        .is_err()
    );
    // Cloned engines share state.
    let clone = e.clone();
    drop(clone.generate(request(&[1], 1), CancellationToken::new()));
    assert_eq!(e.requests(), 1);
}
