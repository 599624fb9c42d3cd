//! The timing model, on tokio's paused clock.

use std::time::Duration;

use futures::StreamExt;
use genfront_protocol::Engine;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{engine, prompt, request};
use crate::{MockConfig, MockEngine};

/// tokio's timer fires on whole milliseconds: a deadline may be hit up to 1 ms late.
#[track_caller]
fn assert_times(actual: &[Duration], expected: &[Duration]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!(
            *a >= *e && *a < *e + Duration::from_millis(1),
            "{actual:?} vs {expected:?}"
        );
    }
}

/// Arrival time of every item, relative to the first poll.
async fn arrivals(e: &MockEngine, req: genfront_protocol::EngineRequest) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut stream = e.generate(req, CancellationToken::new());
    let mut times = Vec::new();
    while let Some(item) = stream.next().await {
        item.expect("no error");
        times.push(t0.elapsed());
    }
    times
}

#[tokio::test(start_paused = true)]
async fn ttft_grows_with_uncached_prompt_and_itl_is_fixed() {
    let e = MockEngine::default();
    let mut req = request(&prompt(1000), 3);
    req.stop.ignore_eos = true;
    let ms = Duration::from_millis;
    // 20 ms + 1000 × 0.02 ms, then 10 ms per token.
    assert_times(&arrivals(&e, req.clone()).await, &[ms(40), ms(50), ms(60)]);
    // Repeat: 992 tokens cached, 8 computed.
    let ttft = ms(20) + Duration::from_micros(20 * 8);
    assert_times(
        &arrivals(&e, req.clone()).await,
        &[ttft, ttft + ms(10), ttft + ms(20)],
    );
    // Two choices advance together: one delay per step, not per item.
    req.sampling.n = 2;
    req.routing.cache_salt = Some("cold".to_owned());
    assert_times(
        &arrivals(&e, req).await,
        &[ms(40), ms(40), ms(50), ms(50), ms(60), ms(60)],
    );
}

#[tokio::test(start_paused = true)]
async fn speedup_divides_every_delay() {
    let e = MockEngine::new(MockConfig {
        speedup: 4.0,
        ..MockConfig::default()
    })
    .expect("valid");
    let mut req = request(&prompt(1000), 2);
    req.stop.ignore_eos = true;
    assert_times(
        &arrivals(&e, req).await,
        &[Duration::from_millis(10), Duration::from_micros(12_500)],
    );
}

#[tokio::test(start_paused = true)]
async fn zero_delay_never_advances_the_clock() {
    let e = engine();
    let mut req = request(&prompt(1000), 50);
    req.stop.ignore_eos = true;
    let times = arrivals(&e, req).await;
    assert_eq!(times.len(), 50);
    assert!(times.iter().all(Duration::is_zero));
}

#[test]
fn zero_delay_streams_need_no_tokio_runtime() {
    let e = engine();
    let mut req = request(&prompt(10), 5);
    req.stop.ignore_eos = true;
    let items: Vec<_> =
        futures::executor::block_on(e.generate(req, CancellationToken::new()).collect());
    assert_eq!(items.len(), 5);
}
