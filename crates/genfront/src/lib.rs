//! The `genfront` binary's library: command-line configuration ([`Cli`]) and the commands it
//! runs. `genfront serve` runs the shared HTTP frontend over in-process mock engines;
//! `genfront bench` load-tests a running server.
//!
//! Start at [`run`] and [`Server::serve`]; the connection limits, timeouts and shutdown are in
//! [`serving`].

mod catalog;
mod config;
mod discovery;
pub mod serving;
pub mod tls;
mod workers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
pub use catalog::{CATALOG, FormatArgs};
pub use config::{
    Cli, Command, RegisterArgs, ServeArgs, SidecarArgs, SidecarEngine, parse_byte_size,
    parse_duration,
};
use genfront_format::{Route, resolve_routes};
use genfront_frontend::{AppState, LimitMetrics, Metrics, TraceSink};
use genfront_protocol::Engine;
use genfront_router::{Role, Router, RouterMetrics};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
pub use workers::{WorkerFacts, WorkerSpec};

/// Install the `tracing` subscriber (`RUST_LOG`, default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Run a parsed command line to completion.
///
/// # Errors
/// Start-up configuration errors (unknown format, duplicate route, bind failure, …).
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    match cli.command {
        Command::Serve(args) => rt.block_on(async move {
            let fds = serving::raise_fd_limit();
            let server = Server::build(&args).await?;
            tracing::info!(
                max_connections = server.conn_limits.max_connections,
                fd_limit = fds.map_or_else(|| "unlimited".to_owned(), |n| n.to_string()),
                "connection limit"
            );
            let addr = SocketAddr::new(args.host, args.port);
            let tls = match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(tls::server_config(cert, key)?),
                _ => None,
            };
            warn_open_access(&server.state.config.api_keys, addr, tls.is_some());
            let listener = bind(addr)?;
            let shutdown = CancellationToken::new();
            tokio::spawn(watch_signals(shutdown.clone()));
            if let Some(url) = &args.discovery {
                let drain = server.state.config.drain_timeout;
                discovery::follow(url, server.state.router.clone(), drain, shutdown.clone())?;
            }
            match tls {
                Some(config) => server.serve_tls(listener, config, shutdown).await,
                None => server.serve(listener, shutdown).await,
            }
        }),
        Command::Mocker(args) => rt.block_on(async move {
            let addr = args.addr();
            let listener = bind(addr)?;
            tracing::info!(address = %addr, api = ?args.api, "native mock engine serving");
            let shutdown = CancellationToken::new();
            tokio::spawn(watch_signals(shutdown.clone()));
            genfront_mockserver::serve(&args, listener, shutdown).await
        }),
        Command::Sidecar(args) => rt.block_on(async move {
            let registration = discovery::Plan::for_sidecar(&args)?;
            let engine: Arc<dyn Engine> = match &args.engine {
                SidecarEngine::Mock => {
                    let mut cfg = if args.mock_zero_delay {
                        genfront_mocker::MockConfig::zero_delay()
                    } else {
                        genfront_mocker::MockConfig::default()
                    };
                    // As `serve --mock`: no sampling masks unless asked (vLLM's default).
                    cfg.info.sampling_mask = false;
                    Arc::new(genfront_mocker::MockEngine::new(cfg)?)
                }
                SidecarEngine::Worker(spec) => spec.connect().await?,
            };
            let tls = sidecar_tls(&args)?;
            if !args.listen.ip().is_loopback() && args.tls_client_ca.is_none() {
                tracing::warn!(
                    address = %args.listen,
                    "SIDECAR OPEN TO THE NETWORK: no --tls-client-ca, so anyone who can reach this address can run generations on the engine; require client certificates (mTLS) or bind loopback"
                );
            }
            let listener = bind(args.listen)?;
            tracing::info!(address = %args.listen, engine = ?args.engine, tls = tls.is_some(), "sidecar serving");
            let shutdown = CancellationToken::new();
            tokio::spawn(watch_signals(shutdown.clone()));
            let mut server = genfront_sidecar::SidecarServer::new(engine);
            if let Some(tls) = tls {
                server = server.tls(tls);
            }
            // Revoked as soon as shutdown starts, so frontends stop sending while it drains.
            let held = registration.map(discovery::start).transpose()?.map(|held| {
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    stop.cancelled().await;
                    held.release().await;
                })
            });
            server.serve(listener, shutdown).await?;
            if let Some(held) = held {
                let _ = held.await;
            }
            Ok(())
        }),
        Command::Register(args) => rt.block_on(async move {
            let held = discovery::start(discovery::Plan::for_register(&args))?;
            let shutdown = CancellationToken::new();
            tokio::spawn(watch_signals(shutdown.clone()));
            shutdown.cancelled().await;
            held.release().await;
            Ok(())
        }),
        Command::Bench(args) => rt.block_on(async move {
            let report = genfront_bench::run(&args).await?;
            genfront_bench::print_table(&report);
            Ok(())
        }),
    }
}

/// Listen backlog asked of the kernel, which caps it at `net.core.somaxconn` (4096 on current
/// Linux). `TcpListener::bind` asks for 1024: a burst of thousands of new connections (10k streams
/// opened at once) overflows that queue, the kernel drops the SYNs, and clients retry only after
/// 1 s, 3 s, 7 s, … — past a 5 s connect timeout some of them fail.
const LISTEN_BACKLOG: u32 = 65_535;

/// Bind `addr` (with `SO_REUSEADDR`, as `TcpListener::bind`) and listen with [`LISTEN_BACKLOG`].
fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .with_context(|| format!("cannot create a socket for {addr}"))?;
    #[cfg(unix)]
    socket
        .set_reuseaddr(true)
        .with_context(|| format!("cannot set SO_REUSEADDR for {addr}"))?;
    socket
        .bind(addr)
        .with_context(|| format!("cannot bind {addr}"))?;
    socket
        .listen(LISTEN_BACKLOG)
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Cancel `shutdown` on the first SIGINT/SIGTERM; on a second one exit the process at once
/// (status 130 for SIGINT, 143 for SIGTERM), whatever is still draining.
async fn watch_signals(shutdown: CancellationToken) {
    let first = next_signal().await;
    tracing::info!(
        signal = first.0,
        "shutdown signal received; draining in-flight requests (a second signal exits at once)"
    );
    shutdown.cancel();
    let second = next_signal().await;
    tracing::warn!(signal = second.0, "second shutdown signal; exiting at once");
    std::process::exit(second.1);
}

/// The next SIGINT or SIGTERM: its name and the exit status it asks for.
async fn next_signal() -> (&'static str, i32) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // Registered anew each call: tokio keeps the handler installed process-wide, so a signal
        // that arrives between two calls is still delivered to the next listener.
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => ("SIGINT", 130),
            _ = term.recv() => ("SIGTERM", 143),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        ("ctrl-c", 130)
    }
}

/// The factory `POST /workers` and discovery build workers with: a spec string as `--worker`
/// takes it, connected with the engine time limits like the static workers.
pub fn worker_factory(
    timeouts: genfront_engine_http::EngineTimeouts,
    observer: genfront_engine_http::TimeoutObserver,
) -> genfront_router::WorkerFactory {
    Arc::new(move |spec: &str, role: Role| {
        let spec: workers::WorkerSpec = spec.parse()?;
        Ok((
            spec.router_spec(role),
            spec.timed_connector(timeouts, Some(observer.clone())),
        ))
    })
}

/// Log how the server is protected: with API keys, which routes need them; without, that every
/// route is open and anyone may abort anything (the engines' native rule), loudly when the
/// listener is reachable from other machines.
fn warn_open_access(keys: &genfront_frontend::ApiKeys, addr: SocketAddr, tls: bool) {
    if keys.enabled() {
        tracing::info!(
            tenant_keys = keys.tenants(),
            tls,
            "API keys required on generate, abort and server-info routes; a tenant aborts only its own requests"
        );
        if !tls && !addr.ip().is_loopback() {
            tracing::warn!(address = %addr, "API keys travel in clear text: serve with --tls-cert/--tls-key");
        }
        return;
    }
    tracing::warn!(
        "no API keys (--api-key/--admin-api-key): every route is open and any client may abort any request, abort_all included (the engines' native rule)"
    );
    tracing::warn!(
        "fleet-control and admin routes are open (no --admin-api-key): any client may pause, resume, update weights, flush caches and add or remove workers"
    );
    if !addr.ip().is_loopback() {
        tracing::warn!(
            address = %addr,
            "LISTENING ON A NON-LOOPBACK ADDRESS WITHOUT API KEYS: anyone who can reach it can generate and abort every client's requests"
        );
    }
}

/// The sidecar's TLS from `--tls-cert`, `--tls-key` and `--tls-client-ca`.
fn sidecar_tls(args: &SidecarArgs) -> anyhow::Result<Option<genfront_sidecar::ServerTls>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let read = |p: &std::path::Path, flag: &str| {
        std::fs::read(p).with_context(|| format!("cannot read {flag} {}", p.display()))
    };
    Ok(Some(genfront_sidecar::ServerTls {
        cert_pem: read(cert, "--tls-cert")?,
        key_pem: read(key, "--tls-key")?,
        client_ca_pem: match &args.tls_client_ca {
            Some(p) => Some(read(p, "--tls-client-ca")?),
            None => None,
        },
    }))
}

/// The client TLS for `grpcs://` workers from `--worker-tls-ca`, `--worker-tls-cert` and
/// `--worker-tls-key`, installed process-wide ([`genfront_sidecar::set_client_tls`]).
fn install_worker_tls(args: &ServeArgs) -> anyhow::Result<()> {
    let Some(ca) = &args.worker_tls_ca else {
        return Ok(());
    };
    let read = |p: &std::path::Path, flag: &str| {
        std::fs::read(p).with_context(|| format!("cannot read {flag} {}", p.display()))
    };
    let identity = match (&args.worker_tls_cert, &args.worker_tls_key) {
        (Some(c), Some(k)) => Some((read(c, "--worker-tls-cert")?, read(k, "--worker-tls-key")?)),
        _ => None,
    };
    genfront_sidecar::set_client_tls(genfront_sidecar::ClientTls {
        ca_pem: read(ca, "--worker-tls-ca")?,
        identity,
    });
    Ok(())
}

/// A configured frontend, ready to serve on a listener.
#[derive(Debug)]
pub struct Server {
    /// Shared state (engines, in-flight registry, metrics).
    pub state: Arc<AppState>,
    /// The resolved route table.
    pub routes: Vec<Route>,
    /// How long in-flight requests may run after shutdown starts.
    pub shutdown_grace: Duration,
    /// Connection-level limits of the serving loop.
    pub conn_limits: serving::ConnLimits,
}

impl Server {
    /// Build the router (mock engines at once; `--worker`s connected in the background, so
    /// start-up never waits for them), resolve routes and open the trace file from `args`.
    ///
    /// # Errors
    /// An unknown `DYN_GENERATE_FORMAT`, duplicate or invalid routes, no engines, a bad mock
    /// configuration, or a trace file that cannot be opened.
    pub async fn build(args: &ServeArgs) -> anyhow::Result<Self> {
        let routes = resolve_routes(&CATALOG, &args.route_config())?;
        install_worker_tls(args)?;
        let mocks = args.mock_engines()?;
        let mock_prefill = args.mock_pd_engines(genfront_protocol::PdRole::Prefill)?;
        let mock_decode = args.mock_pd_engines(genfront_protocol::PdRole::Decode)?;
        let prefill_count = mock_prefill.len() + args.prefill.len();
        let decode_count = mock_decode.len() + args.decode.len();
        if (prefill_count == 0) != (decode_count == 0) {
            anyhow::bail!(
                "prefill/decode needs both roles: {prefill_count} prefill and {decode_count} decode workers configured (--prefill/--mock-prefill, --decode/--mock-decode)"
            );
        }
        if mocks.is_empty()
            && args.workers.is_empty()
            && prefill_count == 0
            && args.discovery.is_none()
        {
            anyhow::bail!(
                "no engines configured: start with --mock N (N >= 1), --worker sglang=http://HOST:PORT, or --prefill … --decode …"
            );
        }
        let config = args.router_config();
        config.validate().map_err(|e| anyhow::anyhow!(e))?;
        let limits = LimitMetrics::default();
        let timeouts = args.engine_timeouts();
        let observer: genfront_engine_http::TimeoutObserver = {
            let limits = limits.clone();
            Arc::new(move |phase: genfront_engine_http::TimeoutPhase| limits.hit(phase.label()))
        };
        let metrics = RouterMetrics::default();
        let router = Router::new(config, metrics.clone());
        router.set_factory(worker_factory(timeouts, observer.clone()));
        for engine in mocks {
            router.add_engine(workers::mock_spec(Role::Aggregated, None), engine);
        }
        for engine in mock_prefill {
            let handoff = Some(args.mock_handoff.clone());
            router.add_engine(workers::mock_spec(Role::Prefill, handoff), engine);
        }
        for engine in mock_decode {
            router.add_engine(workers::mock_spec(Role::Decode, None), engine);
        }
        for (role, specs) in [
            (Role::Aggregated, &args.workers),
            (Role::Prefill, &args.prefill),
            (Role::Decode, &args.decode),
        ] {
            for spec in specs {
                let connector = spec.timed_connector(timeouts, Some(observer.clone()));
                let id = router.add_worker(spec.router_spec(role), connector);
                tracing::info!(worker = %id, spec = %spec, role = role.label(), "worker added; connecting in the background");
            }
        }
        Self::with_parts(args, routes, router, metrics, limits)
    }

    /// A server over the given, already connected engines (tests use this to keep handles on
    /// mock engines).
    ///
    /// # Errors
    /// The trace file cannot be opened.
    pub fn with_engines(
        args: &ServeArgs,
        routes: Vec<Route>,
        engines: Vec<Arc<dyn Engine>>,
    ) -> anyhow::Result<Self> {
        let metrics = RouterMetrics::default();
        let router = Router::new(args.router_config(), metrics.clone());
        for engine in engines {
            router.add_engine(workers::mock_spec(Role::Aggregated, None), engine);
        }
        Self::with_router(args, routes, router, metrics)
    }

    /// A server over `router`, whose series are `router_metrics`.
    ///
    /// # Errors
    /// The trace file cannot be opened.
    pub fn with_router(
        args: &ServeArgs,
        routes: Vec<Route>,
        router: Arc<Router>,
        router_metrics: RouterMetrics,
    ) -> anyhow::Result<Self> {
        Self::with_parts(
            args,
            routes,
            router,
            router_metrics,
            LimitMetrics::default(),
        )
    }

    fn with_parts(
        args: &ServeArgs,
        routes: Vec<Route>,
        router: Arc<Router>,
        router_metrics: RouterMetrics,
        limits: LimitMetrics,
    ) -> anyhow::Result<Self> {
        let metrics = Arc::new(Metrics::with_limits(&router_metrics, limits));
        let trace = match &args.trace_file {
            Some(path) => Some(
                TraceSink::open(path, metrics.clone())
                    .with_context(|| format!("cannot open trace file {}", path.display()))?,
            ),
            None => None,
        };
        let mut config = args.frontend_config();
        config.api_keys = args.api_keys()?;
        let state = AppState::with_metrics(router, config, metrics, trace);
        Ok(Self {
            state,
            routes,
            shutdown_grace: args.shutdown_grace,
            conn_limits: args.conn_limits(),
        })
    }

    /// Whether every served format can be routed (what `GET /ready` reports).
    pub fn is_ready(&self) -> bool {
        self.routes
            .iter()
            .all(|r| self.state.router.ready_for(r.format.name()))
    }

    /// Wait until [`Server::is_ready`] (workers connect in the background), at most `limit`.
    /// Returns whether it became ready.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.is_ready() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Wait until every worker is connected and ready (stricter than [`Server::wait_ready`],
    /// which needs one routable worker per format), at most `limit`. Returns whether they are.
    pub async fn wait_all_workers(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let workers = self.state.router.workers();
            if workers
                .iter()
                .all(|w| w.state() == genfront_router::WorkerState::Ready)
            {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The axum app.
    pub fn router(&self) -> axum::Router {
        genfront_frontend::app(self.state.clone(), &self.routes)
    }

    /// Serve until `shutdown` fires, then stop accepting, let in-flight requests finish for up
    /// to the grace period, cancel the rest (engine aborts), and close the connections still
    /// open [`serving::FORCE_CLOSE_AFTER`] later (see [`serving`] for every connection limit).
    ///
    /// # Errors
    /// None today (accept errors are logged and retried); the `Result` leaves room for a TLS
    /// acceptor's set-up errors.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let local = listener.local_addr().ok();
        let routes: Vec<_> = self
            .routes
            .iter()
            .map(|r| format!("{} ({})", r.path, r.format.name()))
            .collect();
        let address = local.map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(address = %address, routes = ?routes, workers = self.state.router.workers().len(), "genfront serving");
        let app = self.router();
        let metrics = self.state.metrics.limits().clone();
        serving::serve(
            serving::TcpAcceptor(listener),
            app,
            self.state.clone(),
            self.conn_limits.clone(),
            metrics,
            self.shutdown_grace,
            shutdown,
        )
        .await;
        tracing::info!("genfront stopped");
        Ok(())
    }

    /// As [`Server::serve`], over TLS with `config` (see [`tls`]).
    ///
    /// # Errors
    /// None today (handshake failures are per connection and logged at debug).
    pub async fn serve_tls(
        self,
        listener: TcpListener,
        config: Arc<rustls::ServerConfig>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let address = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        tracing::info!(address = %address, workers = self.state.router.workers().len(), "genfront serving over TLS");
        let app = self.router();
        let metrics = self.state.metrics.limits().clone();
        serving::serve(
            tls::TlsAcceptor::new(serving::TcpAcceptor(listener), config),
            app,
            self.state.clone(),
            self.conn_limits.clone(),
            metrics,
            self.shutdown_grace,
            shutdown,
        )
        .await;
        tracing::info!("genfront stopped");
        Ok(())
    }
}
