//! Cancellation, dropping and the request counters.

use std::time::Duration;

use futures::StreamExt;
use genfront_protocol::{Engine, EngineOutput, FinishReason};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{check, engine, outputs, prompt, request};
use crate::{MockEngine, MockStats};

fn aborted() -> Option<FinishReason> {
    Some(FinishReason::Cancelled {
        message: "Aborted".to_owned(),
    })
}

async fn next_ok(stream: &mut genfront_protocol::OutputStream) -> EngineOutput {
    stream
        .next()
        .await
        .expect("stream still open")
        .expect("no error")
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_stream_ends_with_a_cancelled_item() {
    let e = MockEngine::default();
    let mut req = request(&prompt(20), 100);
    req.stop.ignore_eos = true;
    let cancel = CancellationToken::new();
    let mut stream = e.generate(req.clone(), cancel.clone());
    let mut items = Vec::new();
    for _ in 0..3 {
        items.push(next_ok(&mut stream).await);
    }
    assert_eq!(e.running(), 1);
    let before = Instant::now();
    cancel.cancel();
    let last = next_ok(&mut stream).await;
    assert_eq!(
        before.elapsed(),
        Duration::ZERO,
        "no waiting for the next step"
    );
    assert!(last.token_ids.is_empty());
    assert_eq!(last.finish_reason, aborted());
    assert_eq!(last.usage.map(|u| u.completion_tokens), Some(3));
    items.push(last);
    check(&e, &req, &items);
    assert!(stream.next().await.is_none());
    assert_eq!(
        e.stats(),
        MockStats {
            requests: 1,
            started: 1,
            aborted: 1,
            ..MockStats::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_interrupts_a_sleep_promptly() {
    let e = MockEngine::default();
    let mut req = request(&prompt(10), 10);
    req.sampling.n = 3;
    let cancel = CancellationToken::new();
    let mut stream = e.generate(req, cancel.clone());
    let t0 = Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        cancel.cancel();
    });
    // TTFT is 20.2 ms; the cancel at 5 ms ends all three choices right then.
    let mut indices = Vec::new();
    while let Some(item) = stream.next().await {
        let item = item.expect("no error");
        assert!(item.token_ids.is_empty() && item.prompt_logprobs.is_none());
        assert_eq!(item.finish_reason, aborted());
        indices.push(item.index);
    }
    assert_eq!(t0.elapsed(), Duration::from_millis(5));
    assert_eq!(indices, [0, 1, 2]);
    canceller.await.expect("canceller ran");
    assert_eq!((e.running(), e.aborted()), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn cancel_between_steps_ends_every_unfinished_choice() {
    let e = MockEngine::default();
    let mut req = request(&prompt(10), 10);
    req.sampling.n = 2;
    req.stop.ignore_eos = true;
    let cancel = CancellationToken::new();
    let mut stream = e.generate(req.clone(), cancel.clone());
    let mut items = vec![next_ok(&mut stream).await, next_ok(&mut stream).await];
    cancel.cancel();
    let rest: Vec<EngineOutput> = stream.map(|i| i.expect("no error")).collect().await;
    assert_eq!(rest.len(), 2);
    assert!(rest.iter().all(|o| o.finish_reason == aborted()));
    items.extend(rest);
    check(&e, &req, &items);
    assert_eq!((e.running(), e.aborted(), e.completed()), (0, 1, 0));
}

#[tokio::test]
async fn cancelled_before_the_first_poll() {
    let e = engine();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let items: Vec<_> = e
        .generate(request(&prompt(3), 5), cancel)
        .map(|i| i.expect("no error"))
        .collect()
        .await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].finish_reason, aborted());
    assert_eq!((e.started(), e.aborted(), e.running()), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_stops_and_counts() {
    let e = MockEngine::default();
    let mut req = request(&prompt(10), 100);
    req.stop.ignore_eos = true;
    let mut stream = e.generate(req.clone(), CancellationToken::new());
    next_ok(&mut stream).await;
    next_ok(&mut stream).await;
    assert_eq!(e.running(), 1);
    drop(stream);
    assert_eq!((e.running(), e.aborted(), e.started()), (0, 1, 1));

    // Dropped while sleeping in the TTFT.
    let mut stream = e.generate(req.clone(), CancellationToken::new());
    let waited = tokio::time::timeout(Duration::from_millis(1), stream.next()).await;
    assert!(waited.is_err(), "still in the TTFT");
    assert_eq!(e.running(), 1);
    drop(stream);
    assert_eq!((e.running(), e.aborted()), (0, 2));

    // Never polled: never started.
    drop(e.generate(req, CancellationToken::new()));
    assert_eq!((e.requests(), e.started(), e.running()), (3, 2, 0));
}

#[tokio::test]
async fn completion_is_counted_with_the_last_finish_item() {
    let e = engine();
    let mut req = request(&prompt(10), 3);
    req.sampling.n = 2;
    req.stop.ignore_eos = true;
    let mut stream = e.generate(req.clone(), CancellationToken::new());
    let mut seen = 0;
    while seen < 6 {
        next_ok(&mut stream).await;
        seen += 1;
        assert_eq!(e.running(), u64::from(seen < 6));
    }
    // Dropping a finished stream before it returns `None` is not an abort.
    drop(stream);
    assert_eq!((e.completed(), e.aborted(), e.running()), (1, 0, 0));

    // Concurrent requests are all counted as running.
    let a = e.generate(req.clone(), CancellationToken::new());
    let b = e.generate(req.clone(), CancellationToken::new());
    let (mut a, mut b) = (a, b);
    next_ok(&mut a).await;
    next_ok(&mut b).await;
    assert_eq!(e.running(), 2);
    drop(a);
    outputs(&e, req).await;
    assert_eq!(e.running(), 1);
    drop(b);
    assert_eq!(
        e.stats(),
        MockStats {
            requests: 4,
            rejected: 0,
            started: 4,
            running: 0,
            completed: 2,
            aborted: 2,
            failed: 0,
        }
    );
}
