//! Cancellation: dropping or cancelling aborts at vLLM.

use std::time::Duration;

use futures::StreamExt;
use genfront_protocol::{Engine, FinishReason, Usage};
use genfront_vllm::CANCELLED_MESSAGE;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{
    DONE, NATIVE_ID, Script, Step, chunk, engine, eventually, oks, request, run, sse, usage,
};

// === cancellation ===

fn native_abort() -> Value {
    json!({"request_ids": [NATIVE_ID]})
}

#[tokio::test]
async fn dropping_the_stream_aborts_at_vllm() {
    let (fake, engine) = engine().await;
    fake.script(Script::Stream(vec![
        Step::Send(sse(&[chunk(0, &[5], 1, None, Value::Null)])),
        Step::Hang,
    ]));
    let mut stream = engine.generate(request(&engine, json!({})), CancellationToken::new());
    let first = stream.next().await.expect("item").expect("ok");
    assert_eq!(first.token_ids, vec![5]);
    drop(stream);
    eventually("abort_requests", || !fake.aborts().is_empty()).await;
    assert_eq!(fake.aborts(), vec![native_abort()]);
    eventually("disconnect", || fake.disconnects() == 1).await;
}

#[tokio::test]
async fn cancel_waits_for_vllm_abort_finishes() {
    let (fake, engine) = engine().await;
    let mut tail = sse(&[
        chunk(1, &[9], 1, Some("abort"), Value::Null),
        chunk(0, &[], 1, Some("abort"), Value::Null),
    ]);
    tail.extend_from_slice(DONE);
    fake.script(Script::Stream(vec![
        Step::Send(sse(&[chunk(0, &[5], 1, None, Value::Null)])),
        Step::WaitAbort,
        Step::Send(tail),
    ]));
    let cancel = CancellationToken::new();
    let mut stream = engine.generate(request(&engine, json!({"n": 2})), cancel.clone());
    assert_eq!(
        stream.next().await.expect("item").expect("ok").token_ids,
        vec![5]
    );
    cancel.cancel();
    let rest = oks(stream.collect().await);
    assert_eq!(fake.aborts(), vec![native_abort()]);
    let cancelled = Some(FinishReason::Cancelled {
        message: CANCELLED_MESSAGE.to_owned(),
    });
    let summary: Vec<(u32, Vec<u32>, bool, Option<Usage>)> = rest
        .into_iter()
        .map(|o| (o.index, o.token_ids, o.finish_reason == cancelled, o.usage))
        .collect();
    assert_eq!(
        summary,
        vec![
            // Tokens produced between the cancel and the abort, then the cancelled finish.
            (1, vec![9], false, usage(1, 0)),
            (1, vec![], true, usage(1, 0)),
            (0, vec![], true, usage(1, 0)),
        ]
    );
}

#[tokio::test]
async fn cancel_gives_up_after_the_grace_period() {
    let (fake, engine) = engine().await;
    fake.script(Script::Stream(vec![
        Step::Send(sse(&[chunk(1, &[5, 6], 2, None, Value::Null)])),
        Step::Hang,
    ]));
    let cancel = CancellationToken::new();
    let mut stream = engine.generate(request(&engine, json!({"n": 2})), cancel.clone());
    assert_eq!(
        stream.next().await.expect("item").expect("ok").token_ids,
        vec![5, 6]
    );
    cancel.cancel();
    let started = tokio::time::Instant::now();
    let rest = oks(stream.collect().await);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "waited for the grace period"
    );
    assert_eq!(
        rest.iter().map(|o| (o.index, o.usage)).collect::<Vec<_>>(),
        vec![(0, usage(0, 0)), (1, usage(2, 0))]
    );
    assert!(rest.iter().all(|o| o.token_ids.is_empty()
        && matches!(&o.finish_reason, Some(FinishReason::Cancelled { message }) if message == CANCELLED_MESSAGE)));
    assert_eq!(fake.aborts(), vec![native_abort()]);
    eventually("disconnect", || fake.disconnects() == 1).await;
}

#[tokio::test]
async fn cancel_before_the_first_poll_sends_nothing() {
    let (fake, engine) = engine().await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let out = oks(engine
        .generate(request(&engine, json!({"n": 2})), cancel)
        .collect()
        .await);
    assert_eq!(out.len(), 2);
    assert!(
        out.iter()
            .all(|o| matches!(o.finish_reason, Some(FinishReason::Cancelled { .. })))
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(fake.generate_calls().is_empty() && fake.aborts().is_empty());
}

#[tokio::test]
async fn a_foreign_abort_is_cancelled_with_the_partial_tokens() {
    let (fake, engine) = engine().await;
    let mut wire = sse(&[chunk(0, &[5], 1, Some("abort"), Value::Null)]);
    wire.extend_from_slice(DONE);
    fake.script(Script::Stream(vec![Step::Send(wire)]));
    let out = oks(run(&engine, request(&engine, json!({}))).await);
    let ids: Vec<u32> = out.iter().flat_map(|o| o.token_ids.clone()).collect();
    assert_eq!(ids, vec![5]);
    assert!(matches!(
        out.last().and_then(|o| o.finish_reason.clone()),
        Some(FinishReason::Cancelled { .. })
    ));
}
