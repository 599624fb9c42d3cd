//! Shared fixtures: a mock engine behind a sidecar on `127.0.0.1:0`, and a remote engine to it.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use genfront_mocker::{MockConfig, MockEngine};
use genfront_protocol::{Engine, EngineRequest, NativeBody};
use genfront_sidecar::{RemoteEngine, ServeError, SidecarServer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Upper bound for every wait in these tests; a hang fails instead of blocking CI.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A running sidecar serving `engine`, and a remote engine connected to it.
pub struct Hop {
    pub remote: RemoteEngine,
    pub addr: SocketAddr,
    pub shutdown: CancellationToken,
    pub server: JoinHandle<Result<(), ServeError>>,
}

/// Serve `engine` with `server` settings on a fresh port and connect a remote engine to it.
pub async fn start_with(
    engine: Arc<dyn Engine>,
    configure: fn(SidecarServer) -> SidecarServer,
) -> Hop {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let addr = listener.local_addr().expect("bound address");
    let shutdown = CancellationToken::new();
    let server =
        tokio::spawn(configure(SidecarServer::new(engine)).serve(listener, shutdown.clone()));
    let remote = RemoteEngine::connect(&format!("grpc://{addr}"))
        .await
        .expect("connect to the sidecar");
    Hop {
        remote,
        addr,
        shutdown,
        server,
    }
}

/// Serve `mock` with default settings.
pub async fn start(mock: &MockEngine) -> Hop {
    start_with(Arc::new(mock.clone()), |s| s).await
}

/// A mock that takes a few milliseconds per token, so a test can act mid-generation.
pub fn timed_mock() -> MockEngine {
    MockEngine::new(MockConfig {
        ttft_base: Duration::from_millis(1),
        ttft_per_prompt_token: Duration::ZERO,
        inter_token_latency: Duration::from_millis(3),
        ..MockConfig::zero_delay()
    })
    .expect("valid mock config")
}

/// A request for `max_tokens` tokens after a short prompt, ignoring EOS, with a native body that
/// holds a 64-bit integer.
pub fn request(id: u32, max_tokens: u32) -> EngineRequest {
    let mut request = EngineRequest {
        request_id: format!("{id:032x}"),
        token_ids: vec![
            11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
        ],
        native: NativeBody {
            format: "sglang".to_owned(),
            body: json!({"input_ids": [11, 12], "rid": 5731906216386620393_u64, "sampling_params": {"max_new_tokens": max_tokens}}),
        },
        ..EngineRequest::default()
    };
    request.stop.max_tokens = Some(max_tokens);
    request.stop.ignore_eos = true;
    request
}

/// Poll `condition` every few milliseconds until it holds; panics after [`PATIENCE`].
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `future`, or a panic naming `what` after [`PATIENCE`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}
