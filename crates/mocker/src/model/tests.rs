use std::collections::HashSet;

use genfront_protocol::SamplingOptions;

use super::{Model, Sampler, gcd, mod_inverse};
use crate::ExpertsConfig;

fn model(vocab: u32, eos_probability: f64) -> Model {
    Model::new(
        vocab,
        64,
        20,
        42,
        &[2],
        eos_probability,
        ExpertsConfig::default(),
    )
}

#[test]
fn modular_inverse() {
    for m in [2u64, 3, 10, 32_000, 151_936, u64::from(u32::MAX)] {
        for a in [1u64, 3, 7, 12_345, m - 1] {
            if gcd(a, m) == 1 {
                assert_eq!(
                    (a as u128 * mod_inverse(a, m) as u128) % m as u128,
                    1,
                    "{a} mod {m}"
                );
            }
        }
    }
    assert_eq!(mod_inverse(5, 1), 0);
}

#[test]
fn ranks_and_tokens_are_a_bijection() {
    for eos_probability in [0.0, 1.0] {
        let m = model(32_000, eos_probability);
        for step in 0..20u32 {
            let ctx = Model::extend(m.root(), step);
            let d = m.dist(ctx);
            let top = d.top(64);
            let ids: HashSet<u32> = top.iter().map(|c| c.token_id).collect();
            assert_eq!(ids.len(), 64, "candidates are distinct");
            for r in (0..200).chain(31_900..32_000) {
                let t = d.token_at(r);
                assert!(t < 32_000);
                assert_eq!(d.rank_of(t), r);
            }
            if eos_probability == 1.0 {
                assert_eq!(d.token_at(0), 2, "EOS swapped to rank 1");
            }
        }
    }
}

#[test]
fn logprobs_strictly_decrease_with_rank() {
    let m = model(1000, 0.0);
    let d = m.dist(m.root());
    let mut previous = 0.0f64;
    let mut mass = 0.0;
    for r in 0..1000 {
        let lp = d.logprob_at(r);
        assert!(
            lp.is_finite() && lp < previous || r == 0 && lp <= 0.0,
            "rank {r}: {lp}"
        );
        previous = lp;
        mass += lp.exp();
    }
    assert!((0.9..=1.0 + 1e-9).contains(&mass), "total mass {mass}");
}

#[test]
fn tiny_vocabularies_work() {
    for vocab in [1u32, 2, 3, 5, 63, 64, 65] {
        let m = model(vocab, 0.5);
        assert_eq!(u64::from(m.candidates()), u64::from(vocab).min(64));
        let d = m.dist(m.root());
        let top = d.top(100);
        assert_eq!(top.len() as u32, vocab.min(100));
        for t in 0..vocab {
            assert_eq!(d.token_at(d.rank_of(t)), t);
            assert!(d.candidate(t).logprob <= 0.0);
        }
        let mut scratch = Vec::new();
        let sampler = Sampler::new(&SamplingOptions::default());
        let draw = m.sample(&d, &sampler, 0.999, &[], true, &mut scratch);
        assert!(draw.token < vocab);
        assert!(draw.support.is_some_and(|s| s.contains(&draw.token)));
    }
}

#[test]
fn sampling_honours_filters_and_suppression() {
    let m = model(32_000, 1.0);
    let d = m.dist(m.root());
    let mut scratch = Vec::new();
    let greedy = Sampler::new(&SamplingOptions {
        temperature: Some(0.0),
        ..SamplingOptions::default()
    });
    assert_eq!(
        m.sample(&d, &greedy, 0.5, &[], false, &mut scratch).token,
        2
    );
    let next = m.sample(&d, &greedy, 0.5, &[2], true, &mut scratch);
    assert_eq!(next.token, d.token_at(1), "EOS suppressed → rank 2");
    assert_eq!(next.support, Some(vec![d.token_at(1)]));

    let top1 = Sampler::new(&SamplingOptions {
        top_k: Some(1),
        ..SamplingOptions::default()
    });
    for u in [0.0, 0.5, 0.999] {
        let draw = m.sample(&d, &top1, u, &[2], true, &mut scratch);
        assert_eq!(draw.token, d.token_at(1));
        assert_eq!(draw.support.map(|s| s.len()), Some(1));
    }

    let nucleus = Sampler::new(&SamplingOptions {
        top_p: Some(1e-9),
        ..SamplingOptions::default()
    });
    assert_eq!(
        m.sample(&d, &nucleus, 0.99, &[], false, &mut scratch).token,
        2
    );

    let wide = Sampler::new(&SamplingOptions {
        temperature: Some(100.0),
        top_k: Some(10),
        ..SamplingOptions::default()
    });
    let draw = m.sample(&d, &wide, 0.999, &[], true, &mut scratch);
    let support = draw.support.expect("asked for");
    assert_eq!(support.len(), 10);
    assert!(support.windows(2).all(|w| w[0] < w[1]), "sorted");
    assert!(support.contains(&draw.token));
    assert_ne!(
        draw.token, 2,
        "a high draw at high temperature leaves rank 1"
    );
}

#[test]
fn prompt_logprobs_follow_the_context() {
    let m = model(500, 0.1);
    let prompt = [5u32, 9, 1, 300, 42];
    let all = m.prompt_logprobs(&prompt, 0, 3, &[7, 5]);
    assert_eq!(all.start, 0);
    assert_eq!(all.entries.len(), 5);
    assert!(all.entries[0].is_none());
    for (i, entry) in all.entries.iter().enumerate().skip(1) {
        let e = entry.as_ref().expect("positions > 0 have logprobs");
        let d = m.dist(m.context_of(&prompt[..i]));
        assert_eq!(e.token_id, prompt[i]);
        assert_eq!(e.logprob, d.candidate(prompt[i]).logprob);
        assert_eq!(e.top.len(), 3);
        assert_eq!(
            e.selected.iter().map(|c| c.token_id).collect::<Vec<_>>(),
            vec![7, 5]
        );
    }
    let tail = m.prompt_logprobs(&prompt, 3, 0, &[]);
    assert_eq!(tail.start, 3);
    assert_eq!(
        tail.entries,
        all.entries[3..]
            .iter()
            .map(|e| e.clone().map(|mut e| {
                e.top.clear();
                e.selected.clear();
                e
            }))
            .collect::<Vec<_>>()
    );
    assert!(m.prompt_logprobs(&prompt, 5, 0, &[]).entries.is_empty());
}

#[test]
fn expert_rows_are_distinct_per_layer() {
    let m = model(500, 0.0);
    let experts = m.prompt_experts(&[1, 2, 3, 4], 1);
    assert_eq!(experts.rows(), 3);
    assert_eq!((experts.num_layers, experts.top_k), (4, 2));
    for layer in experts.ids.chunks(2) {
        assert_ne!(layer[0], layer[1]);
        assert!(layer.iter().all(|&e| (0..8).contains(&e)));
    }
    assert_eq!(m.prompt_experts(&[1, 2, 3, 4], 4).rows(), 0);
}
