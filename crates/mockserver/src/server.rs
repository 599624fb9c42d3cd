//! [`MockServer`] (build a router over one mock engine), [`serve`] (run it on a listener) and
//! [`spawn`] (run it on an ephemeral loopback port, for tests).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use genfront_format::{GenerateFormat, Route};
use genfront_frontend::{AppState, FrontendConfig};
use genfront_mocker::{MockConfigError, MockEngine};
use genfront_protocol::Engine;
use genfront_router::{RetryConfig, Role, RouterConfig, RouterMetrics, WorkerSpec};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::aborts::AbortLog;
use crate::args::{Api, MockRole, MockServerArgs};
use crate::control::{self, Control};
use crate::fault::{HttpAction, HttpFault};
use crate::inject::{self, Injector};
use crate::peer::{self, PeerRooms};

/// Why a [`MockServer`] cannot be built from its flags.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// The model facts or timing are unusable.
    #[error("invalid mock engine configuration: {0}")]
    Mock(#[from] MockConfigError),
    /// `abort-status` was given for an API other than SGLang.
    #[error("fault `{0}`: abort-status is SGLang's abort shape; it needs --api sglang")]
    AbortStatusNeedsSglang(String),
}

/// A native mock engine server: the shared genfront frontend restricted to one native API, over
/// one in-process [`MockEngine`], plus the engine's auxiliary routes and the HTTP fault layer.
///
/// Routes: the format's generate, abort and auxiliary routes (SGLang: `POST`/`PUT /generate`,
/// `POST /abort_request`, `GET /health_generate`, `/get_model_info`, `/model_info`; vLLM:
/// `POST /inference/v1/generate`, `POST /inference/v1/abort_requests`, `GET /v1/models`), SGLang's
/// `GET /get_server_info` and `/server_info`, the frontend's `GET /health` (200, empty),
/// `/ready` and `/metrics`, the format's fleet-control routes answered natively by the engine
/// (see the crate docs), and the test-control `GET /_mock/room/{room}` (this process's
/// bootstrap-room state: `pending`, `ready` or `failed`), `GET`/`DELETE /_mock/control_log` and
/// `GET`/`POST /_mock/config`.
#[derive(Debug)]
pub struct MockServer {
    /// The engine behind the server; its counters (`running()`, `aborted()`, `completed()`, …)
    /// show what the server's requests did.
    pub engine: Arc<MockEngine>,
    /// The frontend state (in-flight registry, metrics).
    pub state: Arc<AppState>,
    injector: Arc<Injector>,
    router: Router,
}

/// Build a server from `args` (its `--host`/`--port` only show in `/get_server_info`; the
/// listener is given to [`MockServer::serve`]).
///
/// # Errors
/// [`BuildError`] for an invalid engine configuration or a fault the API cannot express.
pub fn build(args: &MockServerArgs) -> Result<MockServer, BuildError> {
    let api = args.api;
    let http_faults = args.http_faults();
    if api != Api::Sglang
        && let Some(f) = http_faults
            .iter()
            .find(|f| matches!(f.action, HttpAction::AbortStatus { .. }))
    {
        return Err(BuildError::AbortStatusNeedsSglang(f.to_string()));
    }
    let engine = Arc::new(match (&args.prefill_peer, args.role) {
        (Some(peer), MockRole::Decode) => MockEngine::with_room_waiter(
            args.mock_config(),
            Arc::new(PeerRooms::new(peer, args.kv_timeout)),
        )?,
        _ => MockEngine::new(args.mock_config())?,
    });
    Ok(MockServer::over(args, engine, http_faults))
}

impl MockServer {
    fn over(args: &MockServerArgs, engine: Arc<MockEngine>, faults: Vec<HttpFault>) -> Self {
        let api = args.api;
        let entry = api.catalog_entry();
        // In a P/D role the format plays the engine's side of the hand-off (genfront serve's
        // formats refuse or pass through what the router owns).
        let role = args.role.pd_role();
        let format: Arc<dyn GenerateFormat> = match api {
            // vLLM's `--enable-prompt-tokens-details` is a server flag of the format.
            Api::Vllm => Arc::new(
                genfront_vllm::VllmFormat::new()
                    .with_prompt_tokens_details(args.enable_prompt_tokens_details)
                    .with_engine_role(role),
            ),
            Api::Sglang => Arc::new(
                genfront_sglang::SglangFormat::new(&genfront_sglang::SglangSettings {
                    incremental_streaming: args.incremental_streaming,
                })
                .with_engine_role(role),
            ),
        };
        let route = Route {
            path: entry.native_path.to_owned(),
            methods: entry.native_methods.to_vec(),
            format: format.clone(),
        };
        let config = FrontendConfig::default();
        let body_limit = config.body_limit;
        // One engine, no retries: the mock server is one engine, not a router.
        let engines = genfront_router::Router::new(
            RouterConfig {
                retry: RetryConfig {
                    max_retries: 0,
                    ..RetryConfig::default()
                },
                ..RouterConfig::default()
            },
            RouterMetrics::default(),
        );
        engines.add_engine(
            WorkerSpec {
                id: Some("mock".to_owned()),
                url: "mock".to_owned(),
                kind: None,
                role: Role::Aggregated,
                handoff: None,
            },
            engine.clone() as Arc<dyn Engine>,
        );
        let state = AppState::new(engines, config);
        let injector = Arc::new(Injector {
            api,
            format,
            faults,
            requests: AtomicU64::new(0),
            aborts: AbortLog::default(),
            body_limit,
        });
        // SGLang's `/server_info` is one of the format's auxiliary routes: it relays the mock
        // engine's `EngineInfo::server_info` (built by `MockServerArgs::mock_config`).
        // The engine's own control routes answer natively (not with genfront's fan-out report).
        let control = Arc::new(Control {
            api,
            format: injector.format.clone(),
            engine: engine.clone(),
            body_limit,
        });
        let router = genfront_frontend::app(state.clone(), &[route])
            .route(peer::ROOM_PATH, axum::routing::get(peer::room_route))
            .layer(axum::middleware::from_fn_with_state(
                control,
                control::layer,
            ))
            .layer(axum::middleware::from_fn_with_state(
                injector.clone(),
                inject::layer,
            ));
        Self {
            engine,
            state,
            injector,
            router,
        }
    }

    /// The axum app (for `Router::oneshot` tests or a custom listener).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The API this server speaks.
    pub fn api(&self) -> Api {
        self.injector.api
    }

    /// The native abort calls received so far.
    pub fn aborts(&self) -> &AbortLog {
        &self.injector.aborts
    }

    /// Generate HTTP requests received so far (what HTTP faults number).
    pub fn generate_requests(&self) -> u64 {
        self.injector.requests.load(Ordering::Relaxed)
    }

    /// Serve on `listener` until `shutdown` fires. Shutdown is immediate, as for an engine that
    /// stops: every in-flight request is cancelled (its answer ends with the native abort
    /// shape), new connections are refused, and this returns once open connections close.
    ///
    /// # Errors
    /// Accept-loop I/O errors.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let local = listener.local_addr().ok();
        tracing::info!(address = ?local, api = self.api().name(), "genfront mock engine serving");
        let state = self.state.clone();
        let sd = shutdown.clone();
        let aborter = tokio::spawn(async move {
            sd.cancelled().await;
            state.abort_all_for_shutdown();
        });
        // Small SSE frames must not wait for Nagle + delayed ACK (40 ms stalls per frame).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let result = axum::serve(listener, self.router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .context("mock server error");
        aborter.abort();
        result
    }
}

/// Build from `args` and serve on `listener` until `shutdown` fires (see
/// [`MockServer::serve`]). `/get_server_info` reports the listener's address.
///
/// # Errors
/// [`BuildError`] (as `anyhow`) or accept-loop I/O errors.
pub async fn serve(
    args: &MockServerArgs,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut args = args.clone();
    if let Ok(addr) = listener.local_addr() {
        args.host = addr.ip();
        args.port = Some(addr.port());
    }
    build(&args)?.serve(listener, shutdown).await
}

/// Start a mock server on `127.0.0.1:0` (bound before serving: no port race) on the current
/// tokio runtime. `args.host`/`args.port` are ignored.
///
/// # Errors
/// [`BuildError`] or a bind failure.
pub async fn spawn(args: &MockServerArgs) -> anyhow::Result<SpawnedMockServer> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind 127.0.0.1:0")?;
    spawn_on(args, listener).await
}

/// Start a mock server on `listener` (e.g. bound to a fixed port, to bring an engine "back" on
/// the address it had).
///
/// # Errors
/// [`BuildError`] or a listener without a local address.
pub async fn spawn_on(
    args: &MockServerArgs,
    listener: TcpListener,
) -> anyhow::Result<SpawnedMockServer> {
    let addr = listener.local_addr().context("no local address")?;
    let mut args = args.clone();
    args.host = addr.ip();
    args.port = Some(addr.port());
    let server = build(&args)?;
    let engine = server.engine.clone();
    let state = server.state.clone();
    let injector = server.injector.clone();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(server.serve(listener, shutdown.clone()));
    Ok(SpawnedMockServer {
        addr,
        engine,
        state,
        injector,
        shutdown,
        handle: Some(handle),
    })
}

/// A mock server running on a loopback port (see [`spawn`]). Dropping it starts shutdown.
#[derive(Debug)]
pub struct SpawnedMockServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its engine (counters: `running()`, `aborted()`, `completed()`, …).
    pub engine: Arc<MockEngine>,
    /// Its frontend state.
    pub state: Arc<AppState>,
    injector: Arc<Injector>,
    shutdown: CancellationToken,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

impl SpawnedMockServer {
    /// `http://ADDR`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The API it speaks.
    pub fn api(&self) -> Api {
        self.injector.api
    }

    /// The native abort calls received so far.
    pub fn aborts(&self) -> &AbortLog {
        &self.injector.aborts
    }

    /// Generate HTTP requests received so far.
    pub fn generate_requests(&self) -> u64 {
        self.injector.requests.load(Ordering::Relaxed)
    }

    /// Wait up to `limit` until the engine runs no request; returns whether it got there.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.engine.running() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }

    /// The token that stops the server.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stop the server (in-flight requests are aborted) and wait for it to finish.
    ///
    /// # Errors
    /// The server's own error, or a panicked server task.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        match self.handle.take() {
            Some(h) => h.await.context("mock server task failed")?,
            None => Ok(()),
        }
    }
}

impl Drop for SpawnedMockServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
