//! Property tests: no input panics, and the `EngineOutput` invariants hold for random requests.

use futures::StreamExt;
use genfront_protocol::{
    Engine, EngineRequest, PromptLogprobOptions, SamplingOptions, StopConditions,
};
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

use super::{check, engine_with};
use crate::MockEngine;

const VOCAB: u32 = 300;
const CONTEXT: u32 = 64;

fn small_engine() -> MockEngine {
    engine_with(|c| {
        c.info.vocab_size = Some(VOCAB);
        c.info.max_context_len = CONTEXT;
        c.info.eos_token_ids = vec![2, 3];
        c.info.max_num_seqs = Some(4);
        c.eos_probability = 0.1;
        c.prefix_cache.block_size = 4;
        c.prefix_cache.capacity_blocks = 8;
    })
}

prop_compose! {
    fn sampling()(
        n in 1u32..=3,
        temperature in prop::option::of(prop_oneof![Just(0.0), 0.01f64..3.0]),
        top_p in prop::option::of(0.01f64..=1.0),
        top_k in prop::option::of(-1i64..100),
        min_p in prop::option::of(0.0f64..=1.0),
        seed in prop::option::of(any::<u64>()),
    ) -> SamplingOptions {
        SamplingOptions { n, temperature, top_p, top_k, min_p, seed, ..SamplingOptions::default() }
    }
}

prop_compose! {
    fn valid_request()(
        prompt in prop::collection::vec(0u32..VOCAB, 1..(CONTEXT as usize - 1)),
        max_tokens in prop::option::of(0u32..24),
        min_tokens in 0u32..6,
        stop_token_ids in prop::collection::vec(0u32..VOCAB, 0..3),
        ignore_eos in any::<bool>(),
        sampling in sampling(),
        logprobs in prop::option::of(0u32..8),
        prompt_lp in prop::option::of((0u32..80, 0u32..4)),
        token_ids_logprobs in prop::collection::vec(0u32..VOCAB, 0..3),
        routed_experts in any::<bool>(),
        routed_start in 0u32..80,
        sampling_mask in any::<bool>(),
    ) -> EngineRequest {
        let len = prompt.len() as u32;
        let mut r = EngineRequest {
            token_ids: prompt,
            stop: StopConditions { max_tokens, min_tokens, stop_token_ids, ignore_eos, ..StopConditions::default() },
            sampling,
            ..EngineRequest::default()
        };
        r.output.logprobs = logprobs;
        r.output.prompt_logprobs =
            prompt_lp.map(|(start, top_k)| PromptLogprobOptions { start: start % (len + 1), top_k });
        r.output.token_ids_logprobs = token_ids_logprobs;
        r.output.routed_experts = routed_experts;
        r.output.routed_experts_start = routed_start % (len + 1);
        r.output.sampling_mask = sampling_mask;
        r
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn valid_requests_uphold_the_invariants(req in valid_request(), cancel_after in prop::option::of(0usize..12)) {
        let e = small_engine();
        runtime().block_on(async {
            let cancel = CancellationToken::new();
            let mut stream = e.generate(req.clone(), cancel.clone());
            let mut items = Vec::new();
            while let Some(item) = stream.next().await {
                items.push(item.expect("valid requests do not fail"));
                if cancel_after == Some(items.len()) {
                    cancel.cancel();
                }
            }
            check(&e, &req, &items);
            if cancel_after.is_none() {
                // Deterministic: a second run gives the same tokens and logprobs.
                let again: Vec<_> = e
                    .generate(req.clone(), CancellationToken::new())
                    .map(|i| i.expect("no error"))
                    .collect()
                    .await;
                let strip = |v: &[genfront_protocol::EngineOutput]| -> Vec<_> {
                    v.iter().map(|o| (o.index, o.token_ids.clone(), o.logprobs.clone(), o.finish_reason.clone())).collect()
                };
                assert_eq!(strip(&items), strip(&again));
            }
        });
        prop_assert_eq!(e.running(), 0);
        let s = e.stats();
        prop_assert_eq!(s.started, s.completed + s.aborted + s.failed);
    }

    #[test]
    fn arbitrary_requests_never_panic(
        prompt in prop::collection::vec(any::<u32>(), 0..70),
        max_tokens in prop::option::of(any::<u32>()),
        n in 0u32..6,
        temperature in prop::option::of(any::<f64>()),
        top_p in prop::option::of(any::<f64>()),
        top_k in prop::option::of(any::<i64>()),
        min_p in prop::option::of(any::<f64>()),
        logprobs in prop::option::of(0u32..400),
        start in any::<u32>(),
        stop in prop::collection::vec(".*", 0..2),
    ) {
        let e = small_engine();
        let mut req = EngineRequest {
            token_ids: prompt,
            stop: StopConditions { max_tokens: max_tokens.map(|m| m % 40), stop, ..StopConditions::default() },
            sampling: SamplingOptions { n, temperature, top_p, top_k, min_p, ..SamplingOptions::default() },
            ..EngineRequest::default()
        };
        req.output.logprobs = logprobs;
        req.output.prompt_logprobs = Some(PromptLogprobOptions { start, top_k: 3 });
        req.output.routed_experts = true;
        req.output.routed_experts_start = start;
        req.output.sampling_mask = true;
        runtime().block_on(async {
            let items: Vec<_> = e.generate(req.clone(), CancellationToken::new()).collect().await;
            match items.as_slice() {
                [Err(err)] => assert!(err.is_public(), "rejections are client-facing: {err}"),
                _ => {
                    let ok: Vec<_> = items.into_iter().map(|i| i.expect("no error after the start")).collect();
                    check(&e, &req, &ok);
                }
            }
        });
        prop_assert_eq!(e.running(), 0);
    }
}
