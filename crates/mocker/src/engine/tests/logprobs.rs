//! Logprobs, prompt logprobs, routed experts and sampling masks.

use genfront_protocol::{EngineRequest, PromptLogprobOptions};

use super::{check, engine, outputs, prompt, request, tokens};

fn logprob_request() -> EngineRequest {
    let mut req = request(&prompt(12), 8);
    req.sampling.temperature = Some(1.0);
    req.sampling.seed = Some(3);
    req.stop.ignore_eos = true;
    req.output.logprobs = Some(5);
    req.output.token_ids_logprobs = vec![9, 1, 31_999];
    req
}

#[tokio::test]
async fn output_logprobs_are_consistent() {
    let e = engine();
    let req = logprob_request();
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    for o in &items {
        let lp = &o.logprobs.as_ref().expect("asked for")[0];
        assert_eq!(lp.top.len(), 5);
        assert_eq!(lp.selected.len(), 3);
    }
    // k = 0: the sampled token only.
    let mut bare = req.clone();
    bare.output.logprobs = Some(0);
    bare.output.token_ids_logprobs.clear();
    let items = outputs(&e, bare).await;
    assert!(items.iter().all(|o| {
        let lp = &o.logprobs.as_ref().expect("asked for")[0];
        lp.top.is_empty() && lp.selected.is_empty() && lp.rank.is_some()
    }));
    // No logprobs requested: none reported.
    let mut none = req;
    none.output.logprobs = None;
    assert!(outputs(&e, none).await.iter().all(|o| o.logprobs.is_none()));
}

#[tokio::test]
async fn greedy_tokens_are_rank_one() {
    let e = engine();
    let mut req = logprob_request();
    req.sampling.temperature = Some(0.0);
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    for o in &items {
        let lp = &o.logprobs.as_ref().expect("asked for")[0];
        assert_eq!(lp.rank, Some(1));
        assert_eq!(lp.top[0].token_id, o.token_ids[0]);
    }
}

#[tokio::test]
async fn prompt_logprobs_shape_and_self_consistency() {
    let e = engine();
    let mut req = logprob_request();
    req.output.prompt_logprobs = Some(PromptLogprobOptions { start: 0, top_k: 3 });
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    let p = items[0].prompt_logprobs.as_ref().expect("first item");
    assert_eq!((p.start, p.entries.len()), (0, 12));
    assert!(p.entries[0].is_none());
    assert!(p.entries[1..].iter().all(Option::is_some));

    // Feeding prompt + output back as a prompt scores the output tokens exactly as sampled.
    let generated = tokens(&items, 0);
    let mut whole = req.token_ids.clone();
    whole.extend_from_slice(&generated);
    let mut score = request(&whole, 0);
    score.output.prompt_logprobs = Some(PromptLogprobOptions {
        start: 12,
        top_k: 5,
    });
    score.output.token_ids_logprobs = req.output.token_ids_logprobs.clone();
    let scored = outputs(&e, score.clone()).await;
    check(&e, &score, &scored);
    let p = scored[0].prompt_logprobs.as_ref().expect("asked for");
    assert_eq!((p.start, p.entries.len()), (12, generated.len()));
    for (entry, item) in p.entries.iter().zip(&items) {
        let from_prompt = entry.as_ref().expect("position > 0");
        let from_output = &item.logprobs.as_ref().expect("asked for")[0];
        assert_eq!(from_prompt, from_output);
    }
}

#[tokio::test]
async fn routed_experts_rows_accumulate() {
    let e = engine();
    let mut req = logprob_request();
    req.output.routed_experts = true;
    req.output.routed_experts_start = 4;
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    let rows: Vec<usize> = items
        .iter()
        .map(|o| o.routed_experts.as_ref().map_or(0, |r| r.rows()))
        .collect();
    assert_eq!(rows, [8, 1, 1, 1, 1, 1, 1, 1]);
    // After c tokens: prompt_len - start + c - 1 rows.
    assert_eq!(rows.iter().sum::<usize>(), 12 - 4 + 8 - 1);
    // Rows are a function of the context: a second run repeats them (the 12-token prompt is below
    // one cache block, so even usage is identical).
    assert_eq!(outputs(&e, req).await, items);
}

#[tokio::test]
async fn sampling_mask_holds_the_sampled_token() {
    let e = engine();
    let mut req = logprob_request();
    req.output.sampling_mask = true;
    req.sampling.top_k = Some(7);
    let items = outputs(&e, req.clone()).await;
    check(&e, &req, &items);
    for o in &items {
        let mask = &o.sampling_mask.as_ref().expect("asked for")[0];
        assert!(!mask.is_empty() && mask.len() <= 7);
        assert!(mask.contains(&o.token_ids[0]));
    }
    req.sampling.temperature = Some(0.0);
    let items = outputs(&e, req).await;
    for o in &items {
        assert_eq!(o.sampling_mask, Some(vec![o.token_ids.clone()]));
    }
}
