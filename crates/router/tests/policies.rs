//! Router behaviour over fake engines: each policy's distribution, affinity and its load bound,
//! sessions and their margin, retries before the first output, the breaker and what counts
//! towards it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use genfront_protocol::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, FinishReason, OutputStream,
    StopConditions,
};
use genfront_router::{
    BreakerConfig, BreakerState, PolicyKind, RetryConfig, Role, RouteContext, Router, RouterConfig,
    RouterMetrics, WorkerSpec,
};
use tokio_util::sync::CancellationToken;

/// What a fake engine does with each request.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// One token and a finish.
    Ok,
    /// An error before any output.
    Fail(fn() -> EngineError),
    /// One token, then never ends (holds load until dropped).
    Hold,
    /// One token, then the stream breaks (a worker that cuts every stream).
    TokenThenBreak,
}

struct Fake {
    info: EngineInfo,
    mode: Mutex<Mode>,
    calls: AtomicU64,
}

impl Fake {
    fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Self {
            info: EngineInfo::default(),
            mode: Mutex::new(mode),
            calls: AtomicU64::new(0),
        })
    }
    fn set(&self, mode: Mode) {
        *self.mode.lock().expect("lock") = mode;
    }
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Engine for Fake {
    fn info(&self) -> &EngineInfo {
        &self.info
    }
    fn generate(&self, _: EngineRequest, _: CancellationToken) -> OutputStream {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let token = EngineOutput {
            token_ids: vec![7],
            ..Default::default()
        };
        match *self.mode.lock().expect("lock") {
            Mode::Ok => Box::pin(futures::stream::iter(vec![Ok(EngineOutput {
                finish_reason: Some(FinishReason::Length { length: 1 }),
                ..token
            })])),
            Mode::Fail(e) => Box::pin(futures::stream::iter(vec![Err(e())])),
            Mode::Hold => {
                Box::pin(futures::stream::iter(vec![Ok(token)]).chain(futures::stream::pending()))
            }
            Mode::TokenThenBreak => Box::pin(futures::stream::iter(vec![
                Ok(token),
                Err(EngineError::new(
                    genfront_protocol::ErrorKind::StreamIncomplete,
                    "closed early",
                )),
            ])),
        }
    }
}

fn router(policy: PolicyKind, fakes: &[Arc<Fake>]) -> Arc<Router> {
    router_with(
        RouterConfig {
            policy,
            ..RouterConfig::default()
        },
        fakes,
    )
}

fn router_with(config: RouterConfig, fakes: &[Arc<Fake>]) -> Arc<Router> {
    let r = Router::new(config, RouterMetrics::default());
    for (i, f) in fakes.iter().enumerate() {
        r.add_engine(
            WorkerSpec {
                id: Some(format!("w{i}")),
                url: "fake".into(),
                kind: None,
                role: Role::Aggregated,
                handoff: None,
            },
            f.clone(),
        );
    }
    r
}

fn request(tokens: Vec<u32>) -> EngineRequest {
    EngineRequest {
        token_ids: tokens,
        stop: StopConditions {
            max_tokens: Some(8),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn ctx() -> RouteContext {
    RouteContext {
        format: "sglang",
        ..RouteContext::default()
    }
}

/// Dispatch and drain; returns the worker that served it.
async fn run(r: &Arc<Router>, req: EngineRequest, ctx: &RouteContext) -> String {
    let d = r
        .dispatch(req, ctx, CancellationToken::new())
        .expect("a worker");
    let served = d.served_by();
    let items: Vec<_> = d.stream.collect().await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    served.get().to_string()
}

fn counts(served: &[String]) -> HashMap<String, usize> {
    let mut c = HashMap::new();
    for s in served {
        *c.entry(s.clone()).or_insert(0) += 1;
    }
    c
}

fn prompt(group: u32, len: u32) -> Vec<u32> {
    (0..len).map(|i| group * 1000 + i).collect()
}

#[tokio::test]
async fn round_robin_is_even() {
    let fakes: Vec<_> = (0..3).map(|_| Fake::new(Mode::Ok)).collect();
    let r = router(PolicyKind::RoundRobin, &fakes);
    let mut served = Vec::new();
    for i in 0..300 {
        served.push(run(&r, request(prompt(1, 4 + i % 3)), &ctx()).await);
    }
    let c = counts(&served);
    assert_eq!(
        c.values().copied().collect::<Vec<_>>(),
        vec![100; 3],
        "{c:?}"
    );
}

#[tokio::test]
async fn random_spreads_roughly_evenly() {
    let fakes: Vec<_> = (0..4).map(|_| Fake::new(Mode::Ok)).collect();
    let r = router(PolicyKind::Random, &fakes);
    let mut served = Vec::new();
    for _ in 0..4000 {
        served.push(run(&r, request(prompt(1, 8)), &ctx()).await);
    }
    let c = counts(&served);
    assert_eq!(c.len(), 4);
    for (w, n) in &c {
        assert!((800..1200).contains(n), "{w}: {n} of 4000 ({c:?})");
    }
}

#[tokio::test]
async fn least_load_and_power_of_two_avoid_the_busy_worker() {
    for policy in [PolicyKind::LeastLoad, PolicyKind::PowerOfTwo] {
        let fakes: Vec<_> = (0..3).map(|_| Fake::new(Mode::Ok)).collect();
        let r = router(policy, &fakes);
        // Pin 10 long requests on w0.
        let mut held = Vec::new();
        fakes[0].set(Mode::Hold);
        for _ in 0..10 {
            let c = RouteContext {
                pinned: Some("w0".into()),
                ..ctx()
            };
            let mut d = r
                .dispatch(request(prompt(9, 100)), &c, CancellationToken::new())
                .expect("pinned");
            assert!(d.stream.next().await.is_some_and(|i| i.is_ok()));
            held.push(d);
        }
        let w0 = r.worker("w0").expect("w0");
        assert_eq!(w0.load().requests(), 10);
        let mut served = Vec::new();
        for _ in 0..200 {
            served.push(run(&r, request(prompt(1, 8)), &ctx()).await);
        }
        let c = counts(&served);
        let on_busy = c.get("w0").copied().unwrap_or(0);
        match policy {
            PolicyKind::LeastLoad => assert_eq!(on_busy, 0, "{c:?}"),
            // w0 wins only when both random picks are w0 — impossible with distinct picks.
            _ => assert_eq!(on_busy, 0, "{c:?}"),
        }
        assert!(c.len() == 2, "both idle workers share the rest: {c:?}");
        drop(held);
        assert_eq!(w0.load().requests(), 0, "load released with the streams");
        assert_eq!(w0.load().tokens(), 0);
    }
}

#[tokio::test]
async fn prefix_keeps_groups_together_and_spreads_groups() {
    let fakes: Vec<_> = (0..4).map(|_| Fake::new(Mode::Hold)).collect();
    let r = router(PolicyKind::Prefix, &fakes);
    // 64 groups × 8 samples, sent as separate concurrent requests of equal length, every prompt
    // starting with the same 48-token system prompt (25% of each prompt).
    let system: Vec<u32> = (50_000..50_048).collect();
    let mut held = Vec::new();
    let mut by_group: HashMap<u32, Vec<String>> = HashMap::new();
    for g in 0..64 {
        let mut p = system.clone();
        p.extend(prompt(g + 1, 144));
        for _ in 0..8 {
            let mut d = r
                .dispatch(request(p.clone()), &ctx(), CancellationToken::new())
                .expect("worker");
            by_group.entry(g).or_default().push(d.worker.to_string());
            assert!(d.stream.next().await.is_some());
            held.push(d);
        }
        // Groups complete over time (a rollout step): release the oldest groups' load.
        if held.len() > 64 {
            held.drain(..8);
        }
    }
    for (g, ws) in &by_group {
        assert!(ws.iter().all(|w| w == &ws[0]), "group {g} split: {ws:?}");
    }
    let per_worker = counts(
        &by_group
            .values()
            .map(|ws| ws[0].clone())
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        per_worker.len(),
        4,
        "groups spread over all workers: {per_worker:?}"
    );
    for n in per_worker.values() {
        assert!((8..=24).contains(n), "uneven: {per_worker:?}");
    }
}

#[tokio::test]
async fn prefix_spills_when_the_affine_worker_is_overloaded() {
    let fakes: Vec<_> = (0..2).map(|_| Fake::new(Mode::Hold)).collect();
    let r = router(PolicyKind::Prefix, &fakes);
    let p = prompt(3, 64);
    let mut held = Vec::new();
    let mut served = Vec::new();
    for _ in 0..100 {
        let mut d = r
            .dispatch(request(p.clone()), &ctx(), CancellationToken::new())
            .expect("worker");
        served.push(d.worker.to_string());
        assert!(d.stream.next().await.is_some());
        held.push(d);
    }
    let c = counts(&served);
    // The bound: busy > least + 32 and busy > 1.5 × least.
    let max = *c.values().max().expect("some");
    let min = *c.values().min().expect("some");
    assert!(min > 0, "a hot prefix spills: {c:?}");
    assert!(
        max <= min + 33 || (max as f64) <= 1.5 * min as f64 + 1.0,
        "{c:?}"
    );
    assert!(max > min, "but affinity still wins while in bounds: {c:?}");
}

#[tokio::test]
async fn sessions_stay_pinned_until_the_margin_trips() {
    let fakes: Vec<_> = (0..2).map(|_| Fake::new(Mode::Hold)).collect();
    let r = router(PolicyKind::Session, &fakes);
    let session = |id: &str| RouteContext {
        session_id: Some(id.into()),
        ..ctx()
    };
    let mut held = Vec::new();
    let mut d = r
        .dispatch(
            request(prompt(1, 8)),
            &session("s1"),
            CancellationToken::new(),
        )
        .expect("worker");
    let home = d.worker.to_string();
    assert!(d.stream.next().await.is_some());
    held.push(d);
    // Different prompts, same session: same worker, until it is 8 requests busier.
    let mut moved_at = None;
    for i in 0..20 {
        let mut d = r
            .dispatch(
                request(prompt(i + 2, 8)),
                &session("s1"),
                CancellationToken::new(),
            )
            .expect("worker");
        assert!(d.stream.next().await.is_some());
        if d.worker.as_str() != home && moved_at.is_none() {
            moved_at = Some(i);
        }
        held.push(d);
    }
    assert_eq!(moved_at, Some(8), "re-pinned once 9 > 0 + margin 8");
    // The rid lineage is a session key too: turns of one rollout share a worker.
    let rid = |r: &str| RouteContext {
        rid: Some(r.into()),
        ..ctx()
    };
    drop(held);
    for f in &fakes {
        f.set(Mode::Ok);
    }
    let a = run(&r, request(prompt(40, 8)), &rid("rollout-5_t1")).await;
    let b = run(&r, request(prompt(41, 8)), &rid("rollout-5_t2")).await;
    let c = run(&r, request(prompt(42, 8)), &rid("rollout-5_t2_r1")).await;
    assert_eq!((a.as_str(), b.as_str()), (c.as_str(), c.as_str()));
}

fn unavailable() -> EngineError {
    EngineError::unavailable("connection refused")
}
fn bad_request() -> EngineError {
    EngineError::invalid_argument("bad").with_status(400)
}
fn too_many() -> EngineError {
    let mut e = EngineError::new(genfront_protocol::ErrorKind::Overloaded, "slow down");
    e.status_code = Some(429);
    e.retry_after_secs = Some(3);
    e
}

#[tokio::test]
async fn failures_before_output_retry_elsewhere_and_open_the_breaker() {
    let fakes = vec![Fake::new(Mode::Fail(unavailable)), Fake::new(Mode::Ok)];
    let r = router_with(
        RouterConfig {
            policy: PolicyKind::RoundRobin,
            breaker: BreakerConfig {
                failure_threshold: 3,
                open_for: std::time::Duration::from_millis(200),
            },
            retry: RetryConfig {
                backoff: std::time::Duration::from_millis(1),
                ..RetryConfig::default()
            },
            ..RouterConfig::default()
        },
        &fakes,
    );
    for _ in 0..20 {
        assert_eq!(run(&r, request(prompt(1, 8)), &ctx()).await, "w1");
    }
    let w0 = r.worker("w0").expect("w0");
    assert_eq!(
        fakes[0].calls(),
        3,
        "three failures, then the breaker is open"
    );
    assert_eq!(w0.breaker_state(), BreakerState::Open);
    // Recovery: half-open after the cool-down, one trial, closed again.
    fakes[0].set(Mode::Ok);
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    assert_eq!(w0.breaker_state(), BreakerState::HalfOpen);
    let mut served = Vec::new();
    for _ in 0..10 {
        served.push(run(&r, request(prompt(1, 8)), &ctx()).await);
    }
    assert_eq!(w0.breaker_state(), BreakerState::Closed);
    assert!(
        served.iter().filter(|w| *w == "w0").count() >= 4,
        "{served:?}"
    );
}

#[tokio::test]
async fn client_errors_and_429_never_count_against_a_worker() {
    for mode in [Mode::Fail(bad_request), Mode::Fail(too_many)] {
        let fakes = vec![Fake::new(mode)];
        let r = router(PolicyKind::Prefix, &fakes);
        for _ in 0..10 {
            let d = r
                .dispatch(request(prompt(1, 8)), &ctx(), CancellationToken::new())
                .expect("still routable");
            let items: Vec<_> = d.stream.collect().await;
            let err = items[0].as_ref().expect_err("the engine's error");
            assert!(
                matches!(err.status_code, Some(400 | 429)),
                "relayed as is: {err:?}"
            );
        }
        assert_eq!(fakes[0].calls(), 10, "no retries for {mode:?}");
        let w = r.worker("w0").expect("w0");
        assert_eq!(w.breaker_state(), BreakerState::Closed);
        assert!(r.ready_for("sglang"));
    }
}

#[tokio::test]
async fn no_routable_worker_is_refused_at_once() {
    let fakes = vec![Fake::new(Mode::Ok)];
    let r = router(PolicyKind::Prefix, &fakes);
    assert!(r.set_state("w0", genfront_router::WorkerState::Draining));
    assert!(!r.ready_for("sglang"));
    let err = r
        .dispatch(request(prompt(1, 8)), &ctx(), CancellationToken::new())
        .expect_err("nobody");
    assert_eq!(err.reason, "no_routable_worker");
    let pinned = RouteContext {
        pinned: Some("nope".into()),
        ..ctx()
    };
    assert_eq!(
        r.dispatch(request(prompt(1, 8)), &pinned, CancellationToken::new())
            .expect_err("unknown")
            .reason,
        "unknown_worker"
    );
    assert_eq!(fakes[0].calls(), 0);
}

#[tokio::test]
async fn a_worker_that_breaks_every_stream_after_its_first_token_opens_its_breaker() {
    let fakes = vec![Fake::new(Mode::TokenThenBreak)];
    let r = router_with(
        RouterConfig {
            breaker: BreakerConfig {
                failure_threshold: 3,
                open_for: std::time::Duration::from_secs(60),
            },
            ..RouterConfig::default()
        },
        &fakes,
    );
    for _ in 0..3 {
        let d = r
            .dispatch(request(prompt(1, 8)), &ctx(), CancellationToken::new())
            .expect("routable");
        let items: Vec<_> = d.stream.collect().await;
        assert!(
            items[0].is_ok() && items[1].is_err(),
            "no silent re-generation: {items:?}"
        );
    }
    assert_eq!(
        r.worker("w0").expect("w0").breaker_state(),
        BreakerState::Open
    );
    assert!(!r.ready_for("sglang"));
}

/// With aggregated workers and a P/D pair, idle sequential requests go to both kinds in turn
/// (neither starves at low concurrency), and a busy decode side sends new requests to the
/// aggregated worker.
#[tokio::test]
async fn mixed_fleet_alternates_at_equal_load_and_follows_load() {
    let r = Router::new(RouterConfig::default(), RouterMetrics::default());
    // The prefill answers (a pair's first output waits for it); decode and aggregated hold.
    let fakes = [Mode::Hold, Mode::Ok, Mode::Hold].map(Fake::new);
    for (f, (id, role)) in fakes.iter().zip([
        ("agg", Role::Aggregated),
        ("pre", Role::Prefill),
        ("dec", Role::Decode),
    ]) {
        r.add_engine(
            WorkerSpec {
                id: Some(id.into()),
                url: "fake".into(),
                kind: None,
                role,
                handoff: None,
            },
            f.clone(),
        );
    }
    let mut served = HashMap::<String, u32>::new();
    for i in 0..8u32 {
        let d = r
            .dispatch(request(vec![i]), &ctx(), CancellationToken::new())
            .expect("a worker");
        *served.entry(d.served_by().get().to_string()).or_default() += 1;
        drop(d);
    }
    assert_eq!(served.get("agg"), Some(&4), "{served:?}");
    assert_eq!(
        served.len(),
        2,
        "an aggregated worker and the pair: {served:?}"
    );
    // A decode side busier than the aggregated worker: new requests go aggregated.
    let held = r
        .dispatch(
            request(vec![1]),
            &RouteContext {
                pinned: Some("pre+dec".into()),
                ..ctx()
            },
            CancellationToken::new(),
        )
        .expect("the pinned pair");
    let mut s = held.stream;
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), s.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))), "{first:?}");
    for i in 0..4u32 {
        let d = r
            .dispatch(request(vec![i]), &ctx(), CancellationToken::new())
            .expect("a worker");
        assert_eq!(d.served_by().get().to_string(), "agg");
    }
}
