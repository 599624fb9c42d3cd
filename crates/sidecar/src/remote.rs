//! [`RemoteEngine`]: an [`Engine`] that forwards to a sidecar over gRPC.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::{Stream, StreamExt};
use genfront_protocol::{
    ControlCall, ControlFuture, Engine, EngineError, EngineInfo, EngineOutput, EngineRequest,
    ErrorKind, FinishReason, OutputStream, ProbeFuture, Usage,
};
use tokio_util::sync::{CancellationToken, DropGuard, WaitForCancellationFutureOwned};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::pb::engine_service_client::EngineServiceClient;
use crate::{ENGINE_SERVICE_NAME, MAX_MESSAGE_SIZE, pb, wire};

/// The message of the [`FinishReason::Cancelled`] items a [`RemoteEngine`] stream makes up when its
/// cancellation token fires (SGLang's wording, as the mocker uses).
pub const CANCELLED_MESSAGE: &str = "Aborted";

/// Time allowed to establish a TCP connection to the sidecar.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for the whole of [`RemoteEngine::connect`] (connect, `Info`, health check).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive ping interval, and how long an unanswered ping keeps the connection.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// Extra time a control call is given over its own timeout, so the sidecar's timeout (with its
/// message) answers before the client's deadline.
const CONTROL_SLACK: Duration = Duration::from_secs(1);
/// Longest deadline sent as `grpc-timeout` (its 8-digit field); longer calls send none.
const MAX_GRPC_TIMEOUT: Duration = Duration::from_secs(99_999_999);
/// Health watch retry backoff: first delay and cap.
const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(100);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// An [`Engine`] served by a remote sidecar ([`crate::SidecarServer`]).
///
/// - [`RemoteEngine::connect`] connects, fetches [`EngineInfo`] once (kept for [`Engine::info`])
///   and the initial health; the underlying channel reconnects lazily after a connection loss.
/// - [`Engine::generate`] returns at once; the RPC opens on the stream's first poll. Dropping the
///   stream cancels the RPC (HTTP/2 `RST_STREAM`), and the sidecar drops the engine stream and
///   fires its token: the engine aborts. Firing the `cancel` token does the same, and the stream
///   then yields, for every unfinished choice, one item with
///   `FinishReason::Cancelled { message: CANCELLED_MESSAGE }` and the choice's last reported usage
///   (or, before the choice's first item, the prompt length and zeros), so the delivered tokens
///   are exactly what the client got. These items are made up locally and at once: the engine's
///   own `Cancelled` items (and their `engine_data`) do not cross the hop.
/// - Errors: the engine's own [`EngineError`]s arrive with their kind, message, status code and
///   type unchanged. A failure to reach the sidecar is [`ErrorKind::Unavailable`]; a stream that
///   breaks (or ends) before every choice finished is [`ErrorKind::StreamIncomplete`].
/// - [`Engine::ready`] is a load of a flag kept by a background task that watches the sidecar's
///   `grpc.health.v1` status (a server-push stream on the same connection, so no RPC per call):
///   true while the sidecar reports SERVING, false while it reports otherwise or the watch is
///   down (connection lost; re-established with backoff, 100 ms to 1 s). The task stops when the
///   last clone of the engine is dropped.
/// - [`Engine::probe`] is one `grpc.health.v1` `Check` RPC bounded by the timeout (SERVING →
///   `Ok`); the sidecar answers it with a probe of its engine, so it is an end-to-end check.
/// - [`Engine::native_format`] is the sidecar engine's own (fetched with the `Info` call): a
///   sidecar in front of an SGLang engine reports `"sglang"`, so fleet control sends it SGLang's
///   calls; `None` for an engine that speaks every format (the mocker) and for older sidecars.
/// - [`Engine::control`] is one `Control` RPC: the engine's own answer (any status) is `Ok`;
///   the engine's failure arrives with its kind (a sidecar-side timeout as
///   [`ErrorKind::Timeout`]); no answer within the call's timeout (plus 1 s for the sidecar's
///   own timeout to answer first) is `Timeout`; a sidecar that cannot be reached is
///   `Unavailable`; one without the RPC (older) is `Unsupported`.
///
/// Cheap to clone; clones share the connection and the health state.
#[derive(Clone)]
pub struct RemoteEngine {
    inner: Arc<Inner>,
}

struct Inner {
    uri: Arc<str>,
    info: EngineInfo,
    native_format: Option<&'static str>,
    client: EngineServiceClient<Channel>,
    health: HealthClient<Channel>,
    ready: Arc<AtomicBool>,
    /// Stops the health watch when the last clone is dropped.
    _health: DropGuard,
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("uri", &self.inner.uri)
            .field("model", &self.inner.info.model)
            .field("ready", &self.ready())
            .finish()
    }
}

// === impl RemoteEngine ===

impl RemoteEngine {
    /// Connect to the sidecar at `uri` (`grpc://host:port`, `http://host:port` or `host:port` in
    /// clear text; `grpcs://host:port` over TLS with the [`set_client_tls`] settings), fetch its [`EngineInfo`] and health, and start watching its health. Must be
    /// called inside a tokio runtime.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a malformed address, or a TLS one without client TLS;
    /// [`ErrorKind::Unavailable`] when the sidecar cannot be reached or does not answer within
    /// 10 s; the mapped gRPC status when the `Info` call fails.
    pub async fn connect(uri: &str) -> Result<Self, EngineError> {
        Self::connect_with(uri, None).await
    }

    /// As [`RemoteEngine::connect`], with `tls` for a `grpcs://` address instead of the
    /// process-wide [`set_client_tls`].
    ///
    /// # Errors
    /// As [`RemoteEngine::connect`]; a `grpcs://` address without any client TLS is
    /// [`ErrorKind::InvalidArgument`].
    pub async fn connect_with(uri: &str, tls: Option<&ClientTls>) -> Result<Self, EngineError> {
        let endpoint = endpoint(uri, tls)?;
        let handshake = async {
            let channel = endpoint.connect().await.map_err(|e| {
                EngineError::unavailable(format!("sidecar {uri}: cannot connect: {}", chain(&e)))
            })?;
            let mut client = EngineServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE);
            let info = client
                .info(pb::InfoRequest {})
                .await
                .map_err(|status| open_error(uri, &status))?
                .into_inner();
            // A format name beyond the interned ones is treated as none (speaks every format).
            let native_format = info.native_format.as_deref().and_then(wire::intern_format);
            let info = wire::decode_info(&info).map_err(EngineError::from)?;
            let mut health = HealthClient::new(channel);
            let serving = health
                .check(health_request())
                .await
                .is_ok_and(|r| r.get_ref().status == ServingStatus::Serving as i32);
            Ok::<_, EngineError>((client, health, info, native_format, serving))
        };
        let (client, health, info, native_format, serving) =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
                .await
                .map_err(|_| {
                    EngineError::unavailable(format!(
                        "sidecar {uri}: no answer within {HANDSHAKE_TIMEOUT:?}"
                    ))
                })??;
        let ready = Arc::new(AtomicBool::new(serving));
        let stop = CancellationToken::new();
        tokio::spawn(watch_health(
            health.clone(),
            Arc::clone(&ready),
            stop.clone(),
        ));

        Ok(Self {
            inner: Arc::new(Inner {
                uri: Arc::from(uri),
                info,
                native_format,
                client,
                health,
                ready,
                _health: stop.drop_guard(),
            }),
        })
    }

    /// The address this engine was connected with.
    pub fn uri(&self) -> &str {
        &self.inner.uri
    }
}

impl Engine for RemoteEngine {
    fn info(&self) -> &EngineInfo {
        &self.inner.info
    }

    /// The sidecar's last health status (see the type's docs); no RPC.
    fn ready(&self) -> bool {
        self.inner.ready.load(Ordering::Relaxed)
    }

    /// One health `Check` of the sidecar within `timeout`.
    fn probe(&self, timeout: Duration) -> ProbeFuture<'_> {
        let mut health = self.inner.health.clone();
        let uri = Arc::clone(&self.inner.uri);
        Box::pin(async move {
            let mut request = tonic::Request::new(health_request());
            request.set_timeout(timeout);
            match tokio::time::timeout(timeout, health.check(request)).await {
                Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32 => Ok(()),
                Ok(Ok(r)) => Err(EngineError::unavailable(format!(
                    "sidecar {uri}: health status {:?}",
                    r.get_ref().status()
                ))),
                Ok(Err(status)) => Err(EngineError::unavailable(format!(
                    "sidecar {uri}: health check failed: {} ({})",
                    status.message(),
                    status.code()
                ))),
                Err(_) => Err(EngineError::unavailable(format!(
                    "sidecar {uri}: no health answer within {timeout:?}"
                ))),
            }
        })
    }

    fn native_format(&self) -> Option<&'static str> {
        self.inner.native_format
    }

    /// One `Control` RPC (see the type's docs).
    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        let mut client = self.inner.client.clone();
        let uri = Arc::clone(&self.inner.uri);
        Box::pin(async move {
            let deadline = call.timeout.saturating_add(CONTROL_SLACK);
            let mut request = tonic::Request::new(wire::encode_control(call));
            if deadline <= MAX_GRPC_TIMEOUT {
                request.set_timeout(deadline);
            }
            let late = || {
                EngineError::timeout(format!(
                    "sidecar {uri}: no answer to the control call within {deadline:?}"
                ))
            };
            match tokio::time::timeout(deadline, client.control(request)).await {
                Err(_) => Err(late()),
                Ok(Err(status)) if status.code() == Code::DeadlineExceeded => Err(late()),
                Ok(Err(status)) => Err(open_error(&uri, &status)),
                Ok(Ok(response)) => {
                    wire::decode_control_result(response.into_inner()).map_err(EngineError::from)?
                }
            }
        })
    }

    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        let choices = request.sampling.n;
        let prompt_tokens = u32::try_from(request.token_ids.len()).unwrap_or(u32::MAX);
        let state = match wire::encode_request(request) {
            Ok(request) => State::Idle(Box::new(request)),
            Err(error) => State::Failed(EngineError::from(error)),
        };
        Box::pin(RemoteStream {
            state,
            client: self.inner.client.clone(),
            uri: Arc::clone(&self.inner.uri),
            cancel: Box::pin(cancel.cancelled_owned()),
            choices,
            prompt_tokens,
            seen: Vec::new(),
            finished: 0,
            next_cancelled: 0,
        })
    }
}

/// Client TLS for `grpcs://` sidecars: the CA(s) to trust, PEM, and optionally the client
/// certificate and key, PEM, to present to a sidecar that requires one (`--tls-client-ca`).
#[derive(Clone)]
pub struct ClientTls {
    /// CA certificates, PEM, the sidecar's certificate must chain to.
    pub ca_pem: Vec<u8>,
    /// Client certificate chain and private key, PEM (mTLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

static CLIENT_TLS: std::sync::OnceLock<ClientTls> = std::sync::OnceLock::new();

/// Set the process-wide client TLS that [`RemoteEngine::connect`] uses for `grpcs://` addresses
/// (genfront sets it once at start-up from `--worker-tls-ca`, `--worker-tls-cert`,
/// `--worker-tls-key`). Only the first call takes effect; returns whether this one did.
pub fn set_client_tls(tls: ClientTls) -> bool {
    CLIENT_TLS.set(tls).is_ok()
}

/// Build the channel endpoint for `uri`: `grpc://`, `http://` or a bare `host:port` in clear
/// text; `grpcs://` or `https://` over TLS with `tls` (else the process-wide
/// [`set_client_tls`]), which must then be set.
fn endpoint(uri: &str, tls: Option<&ClientTls>) -> Result<Endpoint, EngineError> {
    let invalid = |reason: &str| {
        EngineError::invalid_argument(format!("invalid sidecar address `{uri}`: {reason}"))
    };
    let (url, secure) = if let Some(rest) = uri.strip_prefix("grpc://") {
        (format!("http://{rest}"), false)
    } else if let Some(rest) = uri.strip_prefix("grpcs://") {
        (format!("https://{rest}"), true)
    } else if uri.starts_with("http://") {
        (uri.to_owned(), false)
    } else if uri.starts_with("https://") {
        (uri.to_owned(), true)
    } else if uri.contains("://") {
        return Err(invalid(
            "expected grpc://host:port, grpcs://host:port (TLS) or http(s)://host:port",
        ));
    } else {
        (format!("http://{uri}"), false)
    };
    let mut endpoint = Endpoint::from_shared(url).map_err(|e| invalid(&chain(&e)))?;
    if secure {
        let Some(tls) = tls.or_else(|| CLIENT_TLS.get()) else {
            return Err(invalid(
                "a TLS sidecar needs the CA to trust (genfront serve --worker-tls-ca)",
            ));
        };
        let mut cfg = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&tls.ca_pem));
        if let Some((cert, key)) = &tls.identity {
            cfg = cfg.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        endpoint = endpoint.tls_config(cfg).map_err(|e| invalid(&chain(&e)))?;
    }
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .keep_alive_while_idle(true))
}

fn health_request() -> HealthCheckRequest {
    HealthCheckRequest {
        service: ENGINE_SERVICE_NAME.to_owned(),
    }
}

/// Keep `ready` equal to the sidecar's watched health status until `stop` fires.
async fn watch_health(
    mut client: HealthClient<Channel>,
    ready: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let mut backoff = WATCH_BACKOFF_MIN;
    loop {
        let watched = tokio::select! {
            () = stop.cancelled() => return,
            watched = client.watch(health_request()) => watched,
        };
        if let Ok(response) = watched {
            let mut updates = response.into_inner();
            loop {
                let update = tokio::select! {
                    () = stop.cancelled() => return,
                    update = updates.message() => update,
                };
                let Ok(Some(update)) = update else { break };
                ready.store(
                    update.status == ServingStatus::Serving as i32,
                    Ordering::Relaxed,
                );
                backoff = WATCH_BACKOFF_MIN;
            }
        }
        ready.store(false, Ordering::Relaxed);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(WATCH_BACKOFF_MAX);
    }
}

// === status mapping ===

/// A gRPC status received before the response started (connecting, or opening the call).
fn open_error(uri: &str, status: &Status) -> EngineError {
    let kind = match status.code() {
        Code::Unavailable
        | Code::Unknown
        | Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted => ErrorKind::Unavailable,
        Code::ResourceExhausted => ErrorKind::Overloaded,
        Code::Unimplemented => ErrorKind::Unsupported,
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            ErrorKind::InvalidArgument
        }
        Code::Ok
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::Internal
        | Code::DataLoss => ErrorKind::Internal,
    };
    EngineError::new(kind, format!("sidecar {uri}: {}", describe(status)))
}

/// A gRPC status that broke a started response stream: the request may have produced tokens, so
/// it is [`ErrorKind::StreamIncomplete`] whatever the code.
fn broken_error(uri: &str, status: &Status) -> EngineError {
    EngineError::new(
        ErrorKind::StreamIncomplete,
        format!("sidecar {uri}: stream broken: {}", describe(status)),
    )
}

fn describe(status: &Status) -> String {
    match status.source() {
        Some(source) => format!(
            "{:?}: {} ({})",
            status.code(),
            status.message(),
            chain(source)
        ),
        None => format!("{:?}: {}", status.code(), status.message()),
    }
}

/// `error` and its sources, joined with `: `.
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

// === impl RemoteStream ===

type OpenFuture = Pin<
    Box<
        dyn Future<Output = Result<tonic::Response<Streaming<pb::GenerateResponse>>, Status>>
            + Send,
    >,
>;

enum State {
    /// Not polled yet: the encoded request.
    Idle(Box<pb::GenerateRequest>),
    /// The request could not be encoded; yield this and end.
    Failed(EngineError),
    /// The call is being opened.
    Opening(OpenFuture),
    /// Response items are arriving.
    Streaming(Streaming<pb::GenerateResponse>),
    /// Cancelled: the call is dropped; yielding `Cancelled` items for unfinished choices.
    Cancelling,
    Done,
}

/// What the stream has seen of one choice.
#[derive(Clone, Copy, Default)]
struct Seen {
    finished: bool,
    usage: Option<Usage>,
}

/// The stream [`RemoteEngine::generate`] returns.
struct RemoteStream {
    state: State,
    client: EngineServiceClient<Channel>,
    uri: Arc<str>,
    cancel: Pin<Box<WaitForCancellationFutureOwned>>,
    /// Number of choices (`sampling.n`).
    choices: u32,
    prompt_tokens: u32,
    /// Per choice index seen so far (grown on demand, so a huge `n` allocates nothing up front).
    seen: Vec<Seen>,
    /// Choices in `0..choices` that have finished.
    finished: u32,
    /// Next index to consider while cancelling.
    next_cancelled: u32,
}

impl RemoteStream {
    fn seen(&self, index: u32) -> Seen {
        self.seen.get(index as usize).copied().unwrap_or_default()
    }

    /// Record what `output` tells about its choice.
    fn track(&mut self, output: &EngineOutput) {
        if output.index >= self.choices {
            return;
        }
        let i = output.index as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, Seen::default());
        }
        let seen = &mut self.seen[i];
        if output.usage.is_some() {
            seen.usage = output.usage;
        }
        if output.finish_reason.is_some() && !seen.finished {
            seen.finished = true;
            self.finished += 1;
        }
    }

    /// The next made-up `Cancelled` item, or `None` when every choice has finished.
    fn next_cancelled_item(&mut self) -> Option<EngineOutput> {
        while self.next_cancelled < self.choices {
            let index = self.next_cancelled;
            self.next_cancelled += 1;
            let seen = self.seen(index);
            if seen.finished {
                continue;
            }
            let usage = seen.usage.unwrap_or(Usage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: 0,
                cached_tokens: 0,
            });
            return Some(EngineOutput {
                index,
                finish_reason: Some(FinishReason::Cancelled {
                    message: CANCELLED_MESSAGE.to_owned(),
                }),
                usage: Some(usage),
                ..EngineOutput::default()
            });
        }
        None
    }
}

impl Stream for RemoteStream {
    type Item = Result<EngineOutput, EngineError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Done => return Poll::Ready(None),
                State::Failed(_) => {
                    let State::Failed(error) = std::mem::replace(&mut this.state, State::Done)
                    else {
                        continue;
                    };
                    return Poll::Ready(Some(Err(error)));
                }
                State::Cancelling => {
                    let item = this.next_cancelled_item();
                    if item.is_none() {
                        this.state = State::Done;
                    }
                    return Poll::Ready(item.map(Ok));
                }
                State::Idle(_) | State::Opening(_) | State::Streaming(_) => {}
            }
            // Cancellation wins over anything the sidecar has sent: replacing the state drops
            // the call, which resets the HTTP/2 stream and makes the sidecar abort the engine.
            if this.cancel.as_mut().poll(cx).is_ready() {
                this.state = State::Cancelling;
                continue;
            }
            match &mut this.state {
                State::Idle(_) => {
                    let State::Idle(request) = std::mem::replace(&mut this.state, State::Done)
                    else {
                        continue;
                    };
                    let mut client = this.client.clone();
                    this.state =
                        State::Opening(Box::pin(async move { client.generate(*request).await }));
                }
                State::Opening(call) => match ready!(call.as_mut().poll(cx)) {
                    Ok(response) => this.state = State::Streaming(response.into_inner()),
                    Err(status) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(open_error(&this.uri, &status))));
                    }
                },
                State::Streaming(items) => {
                    let item = match ready!(items.poll_next_unpin(cx)) {
                        Some(Ok(message)) => message,
                        Some(Err(status)) => {
                            this.state = State::Done;
                            return Poll::Ready(Some(Err(broken_error(&this.uri, &status))));
                        }
                        None => {
                            this.state = State::Done;
                            if this.finished >= this.choices {
                                return Poll::Ready(None);
                            }
                            return Poll::Ready(Some(Err(EngineError::new(
                                ErrorKind::StreamIncomplete,
                                format!(
                                    "sidecar {}: stream ended with {} of {} choices unfinished",
                                    this.uri,
                                    this.choices - this.finished,
                                    this.choices
                                ),
                            ))));
                        }
                    };
                    match wire::decode_item(item) {
                        Ok(Ok(output)) => {
                            this.track(&output);
                            return Poll::Ready(Some(Ok(output)));
                        }
                        Ok(Err(error)) => {
                            this.state = State::Done;
                            return Poll::Ready(Some(Err(error)));
                        }
                        Err(error) => {
                            this.state = State::Done;
                            return Poll::Ready(Some(Err(EngineError::from(error))));
                        }
                    }
                }
                State::Failed(_) | State::Cancelling | State::Done => {}
            }
        }
    }
}
