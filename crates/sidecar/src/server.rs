//! [`SidecarServer`]: serves one [`Engine`] over gRPC, with the standard health service.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use genfront_protocol::{Engine, EngineError, OutputStream};
use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard, WaitForCancellationFutureOwned};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::pb::engine_service_server::{EngineService, EngineServiceServer};
use crate::{MAX_MESSAGE_SIZE, pb, wire};

/// The full gRPC name of the engine service, also the health service name a sidecar reports on.
pub const ENGINE_SERVICE_NAME: &str = pb::engine_service_server::SERVICE_NAME;

/// Why [`SidecarServer::serve`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The gRPC server failed (accepting connections, or building a connection's service).
    #[error("sidecar server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// TLS for a sidecar ([`SidecarServer::tls`]): PEM bytes of its certificate chain and key, and
/// optionally of the CA(s) whose client certificates it requires (mTLS: a frontend without one
/// cannot even complete the handshake). tonic's rustls (ring) TLS.
#[derive(Clone)]
pub struct ServerTls {
    /// Certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// Private key, PEM.
    pub key_pem: Vec<u8>,
    /// CA certificates, PEM, that client certificates must chain to; `None`: no client auth.
    pub client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("mtls", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves an [`Engine`] to remote frontends ([`crate::RemoteEngine`]) over gRPC (HTTP/2;
/// over TLS, with optional client certificates, after [`SidecarServer::tls`]).
///
/// Per request, the engine gets a fresh [`CancellationToken`] (a child of the shutdown token). The response stream owns the
/// engine stream and is polled only as the client makes room (HTTP/2 flow control), so a slow
/// client slows the engine instead of filling a buffer. When the call ends early (the client
/// drops its stream, resets it, or the connection dies) tonic drops the response stream, which
/// fires the token and drops the engine stream: the engine aborts the request.
///
/// Shutdown (the `shutdown` token given to [`SidecarServer::serve`]) stops accepting, reports
/// NOT_SERVING, ends every in-flight generation with gRPC status UNAVAILABLE (aborting the engine
/// request; the remote reports [`genfront_protocol::ErrorKind::StreamIncomplete`]) and ends
/// health watches; then it waits up to the drain timeout for connections to close.
#[derive(Clone)]
pub struct SidecarServer {
    engine: Arc<dyn Engine>,
    health_poll_interval: Duration,
    drain_timeout: Duration,
    http2_keepalive: Duration,
    tls: Option<ServerTls>,
}

impl std::fmt::Debug for SidecarServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidecarServer")
            .field("model", &self.engine.info().model)
            .field("health_poll_interval", &self.health_poll_interval)
            .field("drain_timeout", &self.drain_timeout)
            .field("http2_keepalive", &self.http2_keepalive)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Serve `engine` on `listener` until `shutdown` fires: [`SidecarServer::new`] with defaults, then
/// [`SidecarServer::serve`].
///
/// # Errors
/// [`ServeError`] when the gRPC server fails.
pub async fn serve(
    engine: Arc<dyn Engine>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    SidecarServer::new(engine).serve(listener, shutdown).await
}

// === impl SidecarServer ===

impl SidecarServer {
    /// A server for `engine` with defaults: health watches probe the engine
    /// ([`Engine::probe`]) every second,
    /// shutdown waits up to 5 s for connections to drain, HTTP/2 keepalive pings every 10 s (a
    /// peer that does not answer within 10 s is dropped, and its requests aborted).
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        Self {
            engine,
            health_poll_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(5),
            http2_keepalive: Duration::from_secs(10),
            tls: None,
        }
    }

    /// Serve over TLS with `tls` (frontends connect with `grpcs://`).
    #[must_use]
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How often a health watch probes the engine ([`Engine::probe`]; a check probes it on every
    /// call).
    #[must_use]
    pub fn health_poll_interval(mut self, interval: Duration) -> Self {
        self.health_poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How long shutdown waits for connections to close after every call has ended; after it,
    /// [`SidecarServer::serve`] returns and lingering connections are left to the runtime.
    #[must_use]
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// HTTP/2 keepalive: ping interval, and how long an unanswered ping keeps a connection (and
    /// its requests) alive.
    #[must_use]
    pub fn http2_keepalive(mut self, interval: Duration) -> Self {
        self.http2_keepalive = interval;
        self
    }

    /// Serve on `listener` (bind it first, e.g. to port 0 in tests) until `shutdown` fires, then
    /// shut down as described on [`SidecarServer`].
    ///
    /// # Errors
    /// [`ServeError`] when the gRPC server fails.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), ServeError> {
        let local = listener.local_addr().ok();
        let handler = EngineHandler {
            engine: Arc::clone(&self.engine),
            shutdown: shutdown.clone(),
        };
        let health = EngineHealth {
            engine: Arc::clone(&self.engine),
            shutdown: shutdown.clone(),
            poll_interval: self.health_poll_interval,
        };
        let engine_service = EngineServiceServer::new(handler)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut builder = Server::builder();
        if let Some(tls) = &self.tls {
            let mut cfg = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem),
            );
            if let Some(ca) = &tls.client_ca_pem {
                cfg = cfg.client_ca_root(tonic::transport::Certificate::from_pem(ca));
            }
            builder = builder.tls_config(cfg)?;
        }
        let server = builder
            .http2_keepalive_interval(Some(self.http2_keepalive))
            .http2_keepalive_timeout(Some(self.http2_keepalive))
            .add_service(HealthServer::new(health))
            .add_service(engine_service)
            .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned());
        tracing::info!(addr = ?local, model = %self.engine.info().model, "sidecar serving");
        let drain = async {
            shutdown.cancelled().await;
            tokio::time::sleep(self.drain_timeout).await;
        };
        tokio::select! {
            result = server => result?,
            () = drain => tracing::warn!(addr = ?local, "sidecar drain timed out; connections left open"),
        }
        tracing::info!(addr = ?local, "sidecar stopped");
        Ok(())
    }
}

// === impl EngineHandler ===

/// The `EngineService` implementation: one engine, plus the server's shutdown token.
struct EngineHandler {
    engine: Arc<dyn Engine>,
    shutdown: CancellationToken,
}

#[tonic::async_trait]
impl EngineService for EngineHandler {
    type GenerateStream = ServeStream;

    async fn generate(
        &self,
        request: Request<pb::GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let shutdown = Box::pin(self.shutdown.clone().cancelled_owned());
        let request = match wire::decode_request(request.into_inner()) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, "sidecar: malformed generate request");
                let failed: OutputStream = Box::pin(stream::iter([Err(EngineError::from(error))]));
                return Ok(Response::new(ServeStream::new(
                    String::new(),
                    failed,
                    None,
                    shutdown,
                )));
            }
        };
        let request_id = request.request_id.clone();
        tracing::debug!(%request_id, "sidecar: generate");
        // A child of the shutdown token: shutdown aborts the engine request even while the call is
        // stalled on flow control and its stream is not being polled.
        let cancel = self.shutdown.child_token();
        let engine = self.engine.generate(request, cancel.clone());
        Ok(Response::new(ServeStream::new(
            request_id,
            engine,
            Some(cancel),
            shutdown,
        )))
    }

    async fn info(
        &self,
        _request: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        let mut info =
            wire::encode_info(self.engine.info()).map_err(|e| Status::internal(e.to_string()))?;
        info.native_format = self.engine.native_format().map(str::to_owned);
        Ok(Response::new(info))
    }

    /// Relays the call to the engine's [`Engine::control`], bounded by the call's timeout
    /// (`Timeout` when the engine does not answer in it) and by shutdown (`Unavailable`). A
    /// request the wire cannot map (no action, unknown pause mode) is `InvalidArgument`.
    async fn control(
        &self,
        request: Request<pb::ControlRequest>,
    ) -> Result<Response<pb::ControlResponse>, Status> {
        let result = match wire::decode_control(request.into_inner()) {
            Err(error) => {
                tracing::warn!(%error, "sidecar: malformed control request");
                Err(EngineError::invalid_argument(error.to_string()))
            }
            Ok(call) => {
                let timeout = call.timeout;
                tracing::debug!(action = call.action.label(), path = %call.path, "sidecar: control");
                tokio::select! {
                    () = self.shutdown.cancelled() => Err(EngineError::unavailable(
                        "sidecar is shutting down; the control call was not answered",
                    )),
                    answered = tokio::time::timeout(timeout, self.engine.control(call)) => {
                        answered.unwrap_or_else(|_| Err(EngineError::timeout(format!(
                            "the engine did not answer the control call within {timeout:?}"
                        ))))
                    }
                }
            }
        };
        Ok(Response::new(wire::encode_control_result(result)))
    }
}

// === impl ServeStream ===

/// The response stream of one `Generate` call: the engine stream mapped onto the wire, cut short
/// by server shutdown. Dropping it before the engine stream ended (the call was cancelled or its
/// connection lost) fires the engine's cancellation token and drops the engine stream.
pub(crate) struct ServeStream {
    request_id: String,
    // Declared before `engine`, so that on drop the token fires before the stream is dropped.
    cancel: Option<DropGuard>,
    engine: Option<OutputStream>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl ServeStream {
    fn new(
        request_id: String,
        engine: OutputStream,
        cancel: Option<CancellationToken>,
        shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    ) -> Self {
        Self {
            request_id,
            cancel: cancel.map(CancellationToken::drop_guard),
            engine: Some(engine),
            shutdown,
        }
    }

    /// Stop early: fire the engine's token, then drop its stream.
    fn abort(&mut self) {
        self.cancel = None;
        self.engine = None;
    }
}

impl Stream for ServeStream {
    type Item = Result<pb::GenerateResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(engine) = this.engine.as_mut() else {
            return Poll::Ready(None);
        };
        if this.shutdown.as_mut().poll(cx).is_ready() {
            tracing::debug!(request_id = %this.request_id, "sidecar: shutting down; aborting");
            this.abort();
            return Poll::Ready(Some(Err(Status::unavailable(
                "sidecar is shutting down; the request was aborted",
            ))));
        }
        match ready!(engine.poll_next_unpin(cx)) {
            Some(item) => match wire::encode_item(item) {
                Ok(message) => Poll::Ready(Some(Ok(message))),
                Err(error) => {
                    // The remote ends its stream at this error item, so stop the engine now.
                    tracing::warn!(request_id = %this.request_id, %error, "sidecar: cannot encode an engine item");
                    this.abort();
                    let item = wire::encode_item(Err(EngineError::from(error)));
                    Poll::Ready(Some(item.map_err(|e| Status::internal(e.to_string()))))
                }
            },
            None => {
                // Finished: nothing to abort.
                if let Some(guard) = this.cancel.take() {
                    guard.disarm();
                }
                this.engine = None;
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for ServeStream {
    fn drop(&mut self) {
        if self.engine.is_some() {
            tracing::debug!(request_id = %self.request_id, "sidecar: call ended early; aborting");
        }
    }
}

// === impl EngineHealth ===

/// Time allowed for one engine probe behind a health check or watch.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `grpc.health.v1.Health` backed directly by [`Engine::probe`] (instead of tonic-health's
/// `HealthReporter`): a check probes the engine at once (bounded by [`PROBE_TIMEOUT`]), so a
/// frontend's periodic check of the sidecar is a health check of the engine behind it; watches
/// probe every poll interval and end on shutdown, so they never hold the server's graceful
/// shutdown open.
struct EngineHealth {
    engine: Arc<dyn Engine>,
    shutdown: CancellationToken,
    poll_interval: Duration,
}

impl EngineHealth {
    /// The status of `service` (one engine probe), or `None` for a service this server does not
    /// serve.
    async fn status(
        engine: &dyn Engine,
        shutdown: &CancellationToken,
        service: &str,
    ) -> Option<ServingStatus> {
        if !service.is_empty() && service != ENGINE_SERVICE_NAME {
            return None;
        }
        if shutdown.is_cancelled() {
            return Some(ServingStatus::NotServing);
        }
        let healthy = tokio::select! {
            () = shutdown.cancelled() => false,
            probed = engine.probe(PROBE_TIMEOUT) => probed.is_ok(),
        };
        Some(if healthy && !shutdown.is_cancelled() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        })
    }
}

fn health_response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status.into(),
    }
}

/// The health watch stream type.
type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for EngineHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        match Self::status(self.engine.as_ref(), &self.shutdown, service).await {
            Some(status) => Ok(Response::new(health_response(status))),
            None => Err(Status::not_found(format!("unknown service `{service}`"))),
        }
    }

    type WatchStream = WatchStream;

    /// Sends the current status, then every change (checked every poll interval); ends after
    /// reporting NOT_SERVING on shutdown.
    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        struct Watch {
            engine: Arc<dyn Engine>,
            shutdown: CancellationToken,
            service: String,
            interval: tokio::time::Interval,
            last: Option<ServingStatus>,
        }
        let mut interval = tokio::time::interval(self.poll_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let watch = Watch {
            engine: Arc::clone(&self.engine),
            shutdown: self.shutdown.clone(),
            service: request.into_inner().service,
            interval,
            last: None,
        };
        let updates = stream::unfold(watch, |mut w| async move {
            loop {
                let now = EngineHealth::status(w.engine.as_ref(), &w.shutdown, &w.service)
                    .await
                    .unwrap_or(ServingStatus::ServiceUnknown);
                if w.last != Some(now) {
                    w.last = Some(now);
                    return Some((Ok(health_response(now)), w));
                }
                if w.shutdown.is_cancelled() {
                    return None;
                }
                tokio::select! {
                    () = w.shutdown.cancelled() => {}
                    _ = w.interval.tick() => {}
                }
            }
        });
        Ok(Response::new(Box::pin(updates)))
    }
}
