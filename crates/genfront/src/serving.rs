//! The serving loop: accept TCP connections and serve each with hyper (HTTP/1.1 and HTTP/2,
//! `hyper_util`'s auto builder), with a time or size limit on every step a client controls.
//!
//! | step | limit (flag) | what the client sees |
//! |---|---|---|
//! | connections open at once | `--max-connections` (default from `RLIMIT_NOFILE`, see [`default_max_connections`]) | beyond it new connections wait in the kernel's accept queue; a `warn!` (at most one per 10 s) and `genfront_limit_hits_total{limit="max_connections"}` |
//! | request head (HTTP/1): the first one and every later one on a keep-alive connection | `--header-read-timeout` (hyper's `header_read_timeout`: the timer runs whenever hyper waits for a head, so it is also the keep-alive idle timeout; a connection's first bytes, which the auto builder reads before hyper's timer starts, have the same deadline) | the connection is closed without an answer |
//! | head size | `--max-header-bytes` (hyper's buffer is twice it), `--max-headers` | 431 (JSON within the buffer, hyper's empty one beyond) |
//! | writes to the client | `--write-timeout` (`tokio-io-timeout`: a write that makes no progress for this long fails) | the connection is closed; the response body is dropped, which aborts the engine work |
//! | HTTP/2 idle | `--header-read-timeout` again, as the keep-alive idle timeout of HTTP/2: a connection (its first bytes the HTTP/2 preface) with no open stream for this long (no request in flight, no response body still being sent) | `GOAWAY` (hyper's graceful shutdown), then the connection is closed (dropped one more timeout later if the peer does not finish the shutdown); counted as `genfront_limit_hits_total{limit="idle_timeout"}`. hyper has no HTTP/2 idle timeout: the serving loop counts the streams of each connection (a request counts from its head to the end of its response body) |
//! | HTTP/2 liveness | `--http2-keepalive-interval` / `--http2-keepalive-timeout` (hyper's pings) | a peer that stops answering pings is closed |
//! | HTTP/2 streams | `--http2-max-concurrent-streams` | hyper's `REFUSED_STREAM` beyond it |
//!
//! Body read time, body size, concurrency and the strict-HTTP rules are the handler's
//! (`genfront_frontend`); engine time limits are [`genfront_engine_http::TimedEngine`]'s.
//!
//! **Shutdown**: when `shutdown` fires the listener closes and every connection is told to finish
//! (HTTP/1 closes after the response in progress, HTTP/2 sends `GOAWAY`: hyper's graceful
//! shutdown via [`hyper_util::server::graceful::GracefulShutdown`]); after the grace period the
//! in-flight engine requests are aborted (their responses end with the native abort shape), and
//! [`FORCE_CLOSE_AFTER`] later every connection still open (a client that does not read) is
//! dropped. A second SIGINT/SIGTERM exits the process at once (see `watch_signals`).
//!
//! The loop accepts from any [`Acceptor`] (plain TCP, or the TLS acceptor).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use genfront_frontend::{AppState, LimitMetrics};
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// How long connections may stay open after the grace period aborted their requests (time for
/// the abort answers to be written) before they are dropped.
pub const FORCE_CLOSE_AFTER: Duration = Duration::from_secs(2);

/// The smallest `--max-connections` the default derivation gives.
const MIN_DEFAULT_CONNECTIONS: usize = 64;
/// File descriptors kept for everything but client connections (listeners, logs, trace file,
/// health probes, DNS, …) when deriving the default `--max-connections`.
const FD_HEADROOM: u64 = 128;

/// Connection-level limits of the serving loop (see the module docs for what each does).
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Most client connections served at once.
    pub max_connections: usize,
    /// HTTP/1 request-head timeout (also the keep-alive idle timeout), and the HTTP/2 idle
    /// timeout (no open stream for this long: `GOAWAY`); `None` disables both.
    pub header_read_timeout: Option<Duration>,
    /// Longest time a write to the client may make no progress; `None` disables it.
    pub write_timeout: Option<Duration>,
    /// Request line + headers limit in bytes (hyper's buffer is twice it).
    pub max_header_bytes: usize,
    /// Most header fields of one request.
    pub max_headers: usize,
    /// HTTP/2 ping interval; `None` disables pings.
    pub http2_keepalive_interval: Option<Duration>,
    /// HTTP/2: how long a ping may go unanswered.
    pub http2_keepalive_timeout: Duration,
    /// HTTP/2: most concurrent streams per connection.
    pub http2_max_concurrent_streams: u32,
}

/// The default `--max-connections`: half of the file-descriptor limit (`RLIMIT_NOFILE`, soft,
/// after [`raise_fd_limit`]) minus a headroom of 128, at least 64. Half, because every client
/// connection with a request in flight holds a second descriptor: its pooled connection to the
/// engine. Without a limit (or off Unix) 32,768.
pub fn default_max_connections() -> usize {
    match fd_limit() {
        Some(n) => usize::try_from(n.saturating_sub(FD_HEADROOM) / 2)
            .unwrap_or(usize::MAX)
            .max(MIN_DEFAULT_CONNECTIONS),
        None => 32_768,
    }
}

#[cfg(unix)]
fn fd_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

#[cfg(not(unix))]
fn fd_limit() -> Option<u64> {
    None
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (the common 1,024 soft limit is far below
/// what a server needs; the hard limit is usually 524,288 or more). Returns the soft limit in
/// force afterwards (`None`: unlimited or unknown).
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        if limit.current != limit.maximum {
            let raised = Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            if let Err(e) = setrlimit(Resource::Nofile, raised) {
                tracing::debug!(error = %e, "cannot raise RLIMIT_NOFILE");
            }
        }
    }
    fd_limit()
}

/// A source of client connections: plain TCP today; a TLS acceptor can wrap it. Accepting is
/// split in two so a slow handshake never stalls the accept loop: [`Acceptor::accept`] runs in
/// the loop and should only take the next socket; [`Acceptor::handshake`] runs in the
/// connection's own task, bounded by `--header-read-timeout`.
pub trait Acceptor: Send + 'static {
    /// What [`Acceptor::accept`] yields (a TCP stream).
    type Raw: Send + 'static;
    /// The connection type served (the TCP stream, or a TLS stream over it).
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection (errors are per-connection or transient: the loop logs and goes on).
    fn accept(&mut self) -> Pin<Box<dyn Future<Output = std::io::Result<Self::Raw>> + Send + '_>>;
    /// Turn an accepted connection into the one served (a TLS handshake); identity for TCP.
    fn handshake(
        &self,
        raw: Self::Raw,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Self::Io>> + Send + 'static>>;
}

/// Plain TCP with `TCP_NODELAY` (small SSE frames must not wait for Nagle + delayed ACK).
#[derive(Debug)]
pub struct TcpAcceptor(pub TcpListener);

impl Acceptor for TcpAcceptor {
    type Raw = tokio::net::TcpStream;
    type Io = tokio::net::TcpStream;

    fn accept(&mut self) -> Pin<Box<dyn Future<Output = std::io::Result<Self::Raw>> + Send + '_>> {
        Box::pin(async move {
            let (tcp, _) = self.0.accept().await?;
            let _ = tcp.set_nodelay(true);
            Ok(tcp)
        })
    }

    fn handshake(
        &self,
        raw: Self::Raw,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Self::Io>> + Send + 'static>> {
        Box::pin(std::future::ready(Ok(raw)))
    }
}

/// The marker inside the `TimedOut` error of [`FirstRead`].
#[derive(Debug)]
struct FirstByteTimeout;

impl std::fmt::Display for FirstByteTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no request bytes within --header-read-timeout")
    }
}

impl std::error::Error for FirstByteTimeout {}

pin_project_lite::pin_project! {
    /// A deadline for a connection's first bytes. hyper's `header_read_timeout` starts only
    /// once `hyper_util`'s auto builder has read enough to tell HTTP/1 from HTTP/2, and that read
    /// has no timeout: a connection that sends nothing would be held forever. After the first
    /// bytes arrive the deadline is gone and hyper's own timers take over.
    ///
    /// It also notes the connection's protocol from its first bytes (see [`Protocol`]).
    struct FirstRead<I> {
        #[pin]
        io: I,
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        protocol: Arc<AtomicU8>,
    }
}

/// A connection's protocol as its first bytes tell (an `AtomicU8` shared with its task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Protocol {
    /// Nothing read yet.
    Unknown = 0,
    /// Anything but the HTTP/2 preface (HTTP/1.x).
    Http1 = 1,
    /// The first bytes start the HTTP/2 connection preface (`PRI * HTTP/2.0`), with prior
    /// knowledge or after TLS ALPN `h2`.
    Http2 = 2,
}

impl Protocol {
    fn of(cell: &AtomicU8) -> Self {
        match cell.load(Ordering::Relaxed) {
            1 => Protocol::Http1,
            2 => Protocol::Http2,
            _ => Protocol::Unknown,
        }
    }
}

/// The HTTP/2 connection preface's first line.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

impl<I> FirstRead<I> {
    fn new(io: I, limit: Option<Duration>, protocol: Arc<AtomicU8>) -> Self {
        Self {
            io,
            deadline: limit.map(|d| Box::pin(tokio::time::sleep(d))),
            protocol,
        }
    }
}

impl<I: AsyncRead> AsyncRead for FirstRead<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.io.poll_read(cx, buf);
        if Protocol::of(this.protocol) == Protocol::Unknown
            && let std::task::Poll::Ready(Ok(())) = &polled
        {
            let got = buf.filled().get(before..).unwrap_or_default();
            if !got.is_empty() {
                let n = got.len().min(H2_PREFACE.len());
                let p = if got.get(..n) == H2_PREFACE.get(..n) {
                    Protocol::Http2
                } else {
                    Protocol::Http1
                };
                this.protocol.store(p as u8, Ordering::Relaxed);
            }
        }
        let Some(deadline) = this.deadline.as_mut() else {
            return polled;
        };
        if polled.is_ready() {
            *this.deadline = None;
        } else if deadline.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                FirstByteTimeout,
            )));
        }
        polled
    }
}

impl<I: AsyncWrite> AsyncWrite for FirstRead<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The open streams of one connection: a request counts from its head until its response body
/// is dropped (sent, or abandoned), so a long SSE stream keeps its connection busy.
type StreamCount = Arc<watch::Sender<usize>>;

/// One open stream of a [`StreamCount`] (decremented on drop).
#[derive(Debug)]
struct StreamGuard(StreamCount);

impl StreamGuard {
    fn open(count: &StreamCount) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count.clone())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

pin_project_lite::pin_project! {
    /// A response body holding its stream's [`StreamGuard`]; frames, size hint (so
    /// `Content-Length`) and end pass through unchanged.
    struct Guarded {
        #[pin]
        body: axum::body::Body,
        guard: StreamGuard,
    }
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The app as a hyper service that counts its connection's open streams.
#[derive(Clone)]
struct Counted {
    inner: TowerToHyperService<axum::Router>,
    streams: StreamCount,
}

type CountedFuture = Pin<
    Box<
        dyn Future<Output = Result<http::Response<Guarded>, std::convert::Infallible>>
            + Send
            + 'static,
    >,
>;

impl hyper::service::Service<http::Request<Incoming>> for Counted {
    type Response = http::Response<Guarded>;
    type Error = std::convert::Infallible;
    type Future = CountedFuture;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let guard = StreamGuard::open(&self.streams);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|body| Guarded { body, guard }))
        })
    }
}

/// Resolves once the connection has had no open stream for `idle` (a stream opened meanwhile
/// restarts the wait).
async fn idle_for(streams: &StreamCount, idle: Duration) {
    let mut rx = streams.subscribe();
    loop {
        // (`wait_for`'s guard is dropped at once: it must not be held across an await.)
        let quiet = rx.wait_for(|n| *n == 0).await.is_ok();
        if !quiet {
            return std::future::pending().await;
        }
        let busy =
            tokio::time::timeout(idle, async { rx.wait_for(|n| *n > 0).await.is_ok() }).await;
        match busy {
            Err(_) => return,
            Ok(true) => {}
            Ok(false) => return std::future::pending().await,
        }
    }
}

/// The HTTP/2 idle watchdog of one connection: resolves when an HTTP/2 connection had no open
/// stream for `idle`. Never for HTTP/1 (hyper's `header_read_timeout` is its idle timeout) nor
/// for a connection that sent nothing ([`FirstRead`]'s deadline, the same one, covers those): an
/// HTTP/2 client sends its preface at once.
async fn http2_idle(streams: StreamCount, protocol: Arc<AtomicU8>, idle: Option<Duration>) {
    let Some(idle) = idle else {
        return std::future::pending().await;
    };
    idle_for(&streams, idle).await;
    match Protocol::of(&protocol) {
        Protocol::Http2 => {}
        // HTTP/1, or nothing read within the timeout ([`FirstRead`] closes that one now).
        Protocol::Http1 | Protocol::Unknown => std::future::pending().await,
    }
}

/// Logs a `warn!` at most once per interval (the first hit logs at once).
#[derive(Debug)]
struct RateLimitedWarn {
    last_ms: AtomicU64,
    start: Instant,
    every: Duration,
    suppressed: AtomicU64,
}

impl RateLimitedWarn {
    fn new(every: Duration) -> Self {
        Self {
            last_ms: AtomicU64::new(u64::MAX),
            start: Instant::now(),
            every,
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether to log now, and how many hits were not logged since the last line.
    fn check(&self) -> Option<u64> {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.last_ms.load(Ordering::Relaxed);
        let every = u64::try_from(self.every.as_millis()).unwrap_or(u64::MAX);
        if last == u64::MAX || now.saturating_sub(last) >= every {
            self.last_ms.store(now, Ordering::Relaxed);
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The hyper builder for `limits`.
fn builder(limits: &ConnLimits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    let head_buffer = limits.max_header_bytes.saturating_mul(2).max(8192);
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(head_buffer)
        .max_headers(limits.max_headers)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keepalive_interval)
        .keep_alive_timeout(limits.http2_keepalive_timeout)
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(head_buffer).unwrap_or(u32::MAX));
    b
}

/// Which limit a connection error is (for `genfront_limit_hits_total`), if any.
fn limit_of(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_timeout()
        {
            return Some("header_read_timeout");
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            if io
                .get_ref()
                .is_some_and(|inner| inner.is::<FirstByteTimeout>())
            {
                return Some("header_read_timeout");
            }
            return Some("write_timeout");
        }
        current = e.source();
    }
    None
}

/// Serve `app` on connections from `acceptor` until `shutdown`, then drain (see the module docs):
/// after `grace` the in-flight engine requests of `state` are aborted, [`FORCE_CLOSE_AFTER`]
/// later the remaining connections are dropped.
pub async fn serve<A: Acceptor>(
    mut acceptor: A,
    app: axum::Router,
    state: Arc<AppState>,
    limits: ConnLimits,
    metrics: LimitMetrics,
    grace: Duration,
    shutdown: CancellationToken,
) {
    let builder = Arc::new(builder(&limits));
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Connections still being served (for the drain), and the signal that starts it.
    let open: StreamCount = Arc::new(watch::Sender::new(0));
    let drain = CancellationToken::new();
    let force = CancellationToken::new();
    let warn = RateLimitedWarn::new(Duration::from_secs(10));
    let accept_warn = RateLimitedWarn::new(Duration::from_secs(10));
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                metrics.hit("max_connections");
                if let Some(suppressed) = warn.check() {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        not_logged = suppressed,
                        "connection limit reached (--max-connections); new connections wait until one closes"
                    );
                }
                tokio::select! {
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let io = tokio::select! {
            r = acceptor.accept() => r,
            () = shutdown.cancelled() => break,
        };
        let raw = match io {
            Ok(raw) => raw,
            Err(e) => {
                // EMFILE/ENFILE and friends: back off instead of spinning (as `axum::serve`).
                if let Some(suppressed) = accept_warn.check() {
                    tracing::warn!(error = %e, not_logged = suppressed, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handshake = acceptor.handshake(raw);
        let streams: StreamCount = Arc::new(watch::Sender::new(0));
        let service = Counted {
            inner: TowerToHyperService::new(app.clone()),
            streams: streams.clone(),
        };
        let builder = builder.clone();
        let open_guard = StreamGuard::open(&open);
        let drain = drain.clone();
        let force = force.clone();
        let metrics = metrics.clone();
        let header_read_timeout = limits.header_read_timeout;
        let write_timeout = limits.write_timeout;
        tokio::spawn(async move {
            metrics.connections().inc();
            let io = match header_read_timeout {
                None => handshake.await,
                Some(limit) => tokio::time::timeout(limit, handshake)
                    .await
                    .unwrap_or_else(|_| {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            FirstByteTimeout,
                        ))
                    }),
            };
            let io = match io {
                Ok(io) => io,
                Err(e) => {
                    if let Some(limit) = limit_of(&e) {
                        metrics.hit(limit);
                    }
                    tracing::debug!(error = %e, "connection handshake failed");
                    metrics.connections().dec();
                    return;
                }
            };
            let protocol = Arc::new(AtomicU8::new(Protocol::Unknown as u8));
            let mut timed = tokio_io_timeout::TimeoutStream::new(FirstRead::new(
                io,
                header_read_timeout,
                protocol.clone(),
            ));
            timed.set_write_timeout(write_timeout);
            let io = TokioIo::new(Box::pin(timed));
            let conn = builder
                .serve_connection_with_upgrades(io, service)
                .into_owned();
            tokio::pin!(conn);
            let watchdog = http2_idle(streams, protocol, header_read_timeout);
            tokio::pin!(watchdog);
            // Graceful shutdown (HTTP/1: close after the response in progress; HTTP/2: `GOAWAY`,
            // then close once the open streams end) on the drain signal or the HTTP/2 idle
            // timeout; dropped outright on `force`.
            let mut closing = false;
            // After an idle `GOAWAY`, the peer gets one more idle timeout to finish the
            // handshake (hyper's graceful HTTP/2 shutdown waits for a ping answer), then the
            // connection is dropped: a peer that never answers cannot hold it.
            let hard_close = tokio::time::sleep(Duration::MAX);
            tokio::pin!(hard_close);
            let mut hard_armed = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            let limit = limit_of(&*e);
                            if let Some(limit) = limit {
                                metrics.hit(limit);
                            }
                            tracing::debug!(error = %e, limit = limit.unwrap_or(""), "connection ended with an error");
                        }
                        break;
                    }
                    () = drain.cancelled(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    () = &mut watchdog, if !closing => {
                        closing = true;
                        metrics.hit("idle_timeout");
                        tracing::debug!("HTTP/2 connection idle past --header-read-timeout; closing");
                        conn.as_mut().graceful_shutdown();
                        if let Some(idle) = header_read_timeout {
                            hard_close.as_mut().reset(tokio::time::Instant::now() + idle);
                            hard_armed = true;
                        }
                    }
                    () = &mut hard_close, if hard_armed => break,
                    () = force.cancelled() => break,
                }
            }
            metrics.connections().dec();
            drop(permit);
            drop(open_guard);
        });
    }
    drop(acceptor);
    let n_open = *open.borrow();
    if n_open > 0 {
        tracing::info!(connections = n_open, grace = ?grace, "draining connections");
    }
    drain.cancel();
    let mut open_rx = open.subscribe();
    let drained = async move {
        let _ = open_rx.wait_for(|n| *n == 0).await;
    };
    tokio::pin!(drained);
    tokio::select! {
        () = &mut drained => return,
        () = tokio::time::sleep(grace) => {}
    }
    let n = state.abort_all_for_shutdown();
    if n > 0 {
        tracing::warn!(
            aborted = n,
            "shutdown grace elapsed; aborted in-flight requests"
        );
    }
    tokio::select! {
        () = &mut drained => return,
        () = tokio::time::sleep(FORCE_CLOSE_AFTER) => {}
    }
    tracing::warn!("connections still open after the shutdown grace; closing them");
    force.cancel();
    // Let the connection tasks see the cancellation and close their sockets.
    let _ = tokio::time::timeout(Duration::from_secs(1), drained).await;
}
