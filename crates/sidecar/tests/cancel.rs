//! Cancellation and failure across the hop: dropping the remote stream or firing its token aborts
//! the engine request; a sidecar that shuts down or dies ends the remote stream with an error,
//! never a hang; an unreachable sidecar is `Unavailable`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use genfront_mocker::MockEngine;
use genfront_protocol::{Engine, EngineInfo, EngineRequest, ErrorKind, FinishReason, OutputStream};
use genfront_sidecar::{CANCELLED_MESSAGE, RemoteEngine, SidecarServer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use common::{eventually, request, start, start_with, timed_mock, within};

#[tokio::test]
async fn dropping_the_remote_stream_aborts_the_engine_request() {
    let mock = timed_mock();
    let hop = start(&mock).await;
    let mut stream = hop
        .remote
        .generate(request(1, 100_000), CancellationToken::new());
    for _ in 0..3 {
        let item = within("a token", stream.next()).await.expect("an item");
        assert_eq!(item.expect("no error").token_ids.len(), 1);
    }
    assert_eq!(mock.running(), 1);
    drop(stream);
    eventually("the engine request is aborted", || {
        mock.running() == 0 && mock.aborted() == 1
    })
    .await;
    assert_eq!(mock.completed(), 0);
}

#[tokio::test]
async fn firing_the_token_ends_every_choice_as_cancelled_and_aborts_the_engine() {
    let mock = timed_mock();
    let hop = start(&mock).await;
    let cancel = CancellationToken::new();
    let mut req = request(1, 100_000);
    req.sampling.n = 3;
    let mut stream = hop.remote.generate(req, cancel.clone());
    let mut delivered = [0_u32; 3];
    for _ in 0..6 {
        let item = within("a token", stream.next())
            .await
            .expect("an item")
            .expect("no error");
        delivered[item.index as usize] += 1;
    }
    cancel.cancel();
    let rest: Vec<_> = within("the stream ends", stream.collect()).await;
    assert_eq!(
        rest.len(),
        3,
        "one Cancelled item per unfinished choice: {rest:?}"
    );
    for (i, item) in rest.into_iter().enumerate() {
        let item = item.expect("no error");
        assert_eq!(item.index as usize, i);
        assert!(item.token_ids.is_empty());
        assert_eq!(
            item.finish_reason,
            Some(FinishReason::Cancelled {
                message: CANCELLED_MESSAGE.to_owned()
            })
        );
        let usage = item.usage.expect("usage");
        assert_eq!(
            usage.completion_tokens, delivered[i],
            "usage counts the delivered tokens"
        );
    }
    eventually("the engine request is aborted", || {
        mock.running() == 0 && mock.aborted() == 1
    })
    .await;
}

#[tokio::test]
async fn a_token_fired_before_the_first_poll_never_reaches_the_engine() {
    let mock = timed_mock();
    let hop = start(&mock).await;
    let cancel = CancellationToken::new();
    let mut req = request(1, 10);
    req.sampling.n = 2;
    let stream = hop.remote.generate(req, cancel.clone());
    cancel.cancel();
    let items: Vec<_> = within("the stream ends", stream.collect()).await;
    let reasons: Vec<_> = items
        .into_iter()
        .map(|i| i.expect("no error").finish_reason.map(|r| r.label()))
        .collect();
    assert_eq!(reasons, [Some("cancelled"), Some("cancelled")]);
    assert_eq!(mock.requests(), 0);
}

#[tokio::test]
async fn sidecar_shutdown_mid_stream_ends_the_remote_stream_with_an_error() {
    let mock = timed_mock();
    let hop = start(&mock).await;
    let mut stream = hop
        .remote
        .generate(request(1, 100_000), CancellationToken::new());
    for _ in 0..2 {
        within("a token", stream.next())
            .await
            .expect("an item")
            .expect("no error");
    }
    hop.shutdown.cancel();
    let rest: Vec<_> = within("the stream ends", stream.collect()).await;
    let last = rest
        .last()
        .expect("an error item")
        .as_ref()
        .expect_err("an error");
    assert!(
        matches!(
            last.kind,
            ErrorKind::StreamIncomplete | ErrorKind::Unavailable
        ),
        "{last:?}"
    );
    assert!(rest[..rest.len() - 1].iter().all(Result::is_ok));
    within("server stops", hop.server)
        .await
        .expect("server task")
        .expect("server result");
    eventually("the engine request is aborted", || {
        mock.running() == 0 && mock.aborted() == 1
    })
    .await;

    // The sidecar is gone: a new request cannot reach it.
    let items: Vec<_> = within(
        "the stream ends",
        hop.remote
            .generate(request(2, 3), CancellationToken::new())
            .collect(),
    )
    .await;
    assert_eq!(items.len(), 1);
    let e = items[0].as_ref().expect_err("unreachable");
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e:?}");
    assert!(!hop.remote.ready());
}

#[tokio::test]
async fn a_sidecar_that_dies_mid_stream_yields_stream_incomplete() {
    let mock = timed_mock();
    // The sidecar runs on its own runtime; dropping that runtime kills every task and socket, as
    // a process exit would.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    let addr = listener.local_addr().expect("bound address");
    listener.set_nonblocking(true).expect("non-blocking");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("sidecar runtime");
    let engine: Arc<dyn Engine> = Arc::new(mock.clone());
    runtime.spawn(async move {
        let listener = TcpListener::from_std(listener).expect("tokio listener");
        SidecarServer::new(engine)
            .serve(listener, CancellationToken::new())
            .await
    });

    let remote = RemoteEngine::connect(&format!("grpc://{addr}"))
        .await
        .expect("connect");
    let mut stream = remote.generate(request(1, 100_000), CancellationToken::new());
    for _ in 0..2 {
        within("a token", stream.next())
            .await
            .expect("an item")
            .expect("no error");
    }
    runtime.shutdown_background();
    let rest: Vec<_> = within("the stream ends", stream.collect()).await;
    let last = rest
        .last()
        .expect("an error item")
        .as_ref()
        .expect_err("an error");
    assert_eq!(last.kind, ErrorKind::StreamIncomplete, "{last:?}");
    eventually("the engine request is dropped", || mock.running() == 0).await;
    eventually("remote not ready", || !remote.ready()).await;
}

#[tokio::test]
async fn connecting_to_a_closed_port_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let addr = listener.local_addr().expect("bound address");
    drop(listener);
    let error = within(
        "connect fails",
        RemoteEngine::connect(&format!("grpc://{addr}")),
    )
    .await
    .expect_err("nothing listens");
    assert_eq!(error.kind, ErrorKind::Unavailable, "{error:?}");
    assert!(error.kind.retryable());
}

/// The mock, counting the items the sidecar pulls from it.
struct Counting {
    mock: MockEngine,
    pulled: Arc<AtomicU64>,
}

impl Engine for Counting {
    fn info(&self) -> &EngineInfo {
        self.mock.info()
    }
    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        let pulled = Arc::clone(&self.pulled);
        Box::pin(self.mock.generate(request, cancel).inspect(move |_| {
            pulled.fetch_add(1, Ordering::Relaxed);
        }))
    }
}

#[tokio::test]
async fn the_sidecar_does_not_run_ahead_of_a_slow_client() {
    // A zero-delay engine and a client that stops reading: HTTP/2 flow control must stall the
    // engine, rather than the sidecar pulling (and buffering) the whole generation.
    let mock = MockEngine::zero_delay();
    let pulled = Arc::new(AtomicU64::new(0));
    let engine = Counting {
        mock: mock.clone(),
        pulled: Arc::clone(&pulled),
    };
    let hop = start_with(Arc::new(engine), |s| s).await;
    let mut req = request(1, u32::MAX);
    req.output.logprobs = Some(20);
    let total = u64::from(mock.info().max_context_len) - req.token_ids.len() as u64;
    let mut stream = hop.remote.generate(req, CancellationToken::new());
    within("a token", stream.next())
        .await
        .expect("an item")
        .expect("no error");

    // Wait until the sidecar stops pulling (it stops for good only when stalled or done).
    let mut last = u64::MAX;
    within("the sidecar stalls", async {
        while pulled.load(Ordering::Relaxed) != last {
            last = pulled.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    })
    .await;
    assert!(
        last < total,
        "pulled {last} of {total} items for a client that read one"
    );
    assert_eq!(mock.running(), 1);
    drop(stream);
    eventually("the engine request is aborted", || {
        mock.running() == 0 && mock.aborted() == 1
    })
    .await;
}

#[tokio::test]
async fn the_remote_reconnects_to_a_restarted_sidecar() {
    let mock = MockEngine::zero_delay();
    let hop = start(&mock).await;
    hop.shutdown.cancel();
    within("server stops", hop.server)
        .await
        .expect("server task")
        .expect("server result");
    eventually("remote not ready", || !hop.remote.ready()).await;

    // The same address again (the listener sets SO_REUSEADDR).
    let listener = TcpListener::bind(hop.addr).await.expect("rebind the port");
    let shutdown = CancellationToken::new();
    let engine: Arc<dyn Engine> = Arc::new(mock.clone());
    let server = tokio::spawn(SidecarServer::new(engine).serve(listener, shutdown.clone()));

    let items: Vec<_> = within(
        "the stream ends",
        hop.remote
            .generate(request(1, 3), CancellationToken::new())
            .collect(),
    )
    .await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(items.iter().all(Result::is_ok));
    eventually("remote ready again", || hop.remote.ready()).await;
    shutdown.cancel();
    within("server stops", server)
        .await
        .expect("server task")
        .expect("server result");
}

#[tokio::test]
async fn shutdown_returns_after_the_drain_timeout_despite_a_stalled_client() {
    let mock = MockEngine::zero_delay();
    let hop = start_with(Arc::new(mock.clone()), |s| {
        s.drain_timeout(Duration::from_millis(100))
    })
    .await;
    let mut stream = hop
        .remote
        .generate(request(1, u32::MAX), CancellationToken::new());
    within("a token", stream.next())
        .await
        .expect("an item")
        .expect("no error");
    assert_eq!(mock.running(), 1);
    // The client reads no more: the call stalls on flow control and holds its connection open.
    hop.shutdown.cancel();
    within("server stops", hop.server)
        .await
        .expect("server task")
        .expect("server result");
    drop(stream);
    eventually("the engine request is aborted", || {
        mock.running() == 0 && mock.aborted() == 1
    })
    .await;
}
