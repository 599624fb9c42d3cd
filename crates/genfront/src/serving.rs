//! The serving loop: accept TCP connections and serve each with hyper (HTTP/1.1 and HTTP/2,
//! `hyper_util`'s auto builder), with a time or size limit on every step a client controls.
//!
//! | step | limit (flag) | what the client sees |
//! |---|---|---|
//! | connections open at once | `--max-connections` (default from `RLIMIT_NOFILE`, see [`default_max_connections`]) | beyond it new connections wait in the kernel's accept queue; a `warn!` (at most one per 10 s) and `genfront_limit_hits_total{limit="max_connections"}` |
//! | request head (HTTP/1): the first one and every later one on a keep-alive connection | `--header-read-timeout` (hyper's `header_read_timeout`: the timer runs whenever hyper waits for a head, so it is also the keep-alive idle timeout; a connection's first bytes, which the auto builder reads before hyper's timer starts, have the same deadline) | the connection is closed without an answer |
//! | head size | `--max-header-bytes` (hyper's buffer is twice it), `--max-headers` | 431 (JSON within the buffer, hyper's empty one beyond) |
//! | writes to the client | `--write-timeout` (`tokio-io-timeout`: a write that makes no progress for this long fails) | the connection is closed; the response body is dropped, which aborts the engine work |
//! | HTTP/2 liveness | `--http2-keepalive-interval` / `--http2-keepalive-timeout` (hyper's pings) | a peer that stops answering pings is closed; an idle HTTP/2 connection whose peer answers them stays open (hyper has no HTTP/2 idle timeout), within `--max-connections` |
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
//! The loop accepts from any [`Acceptor`], so a TLS acceptor can wrap the TCP one later.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use genfront_frontend::{AppState, LimitMetrics};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
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
    /// HTTP/1 request-head timeout (also the keep-alive idle timeout); `None` disables it.
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
    struct FirstRead<I> {
        #[pin]
        io: I,
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<I> FirstRead<I> {
    fn new(io: I, limit: Option<Duration>) -> Self {
        Self {
            io,
            deadline: limit.map(|d| Box::pin(tokio::time::sleep(d))),
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
        let polled = this.io.poll_read(cx, buf);
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
    let graceful = GracefulShutdown::new();
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
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
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
            let mut timed =
                tokio_io_timeout::TimeoutStream::new(FirstRead::new(io, header_read_timeout));
            timed.set_write_timeout(write_timeout);
            let io = TokioIo::new(Box::pin(timed));
            let conn = builder.serve_connection_with_upgrades(io, service);
            let conn = watcher.watch(conn.into_owned());
            tokio::select! {
                r = conn => if let Err(e) = r {
                    let limit = limit_of(&*e);
                    if let Some(limit) = limit {
                        metrics.hit(limit);
                    }
                    tracing::debug!(error = %e, limit = limit.unwrap_or(""), "connection ended with an error");
                },
                () = force.cancelled() => {}
            }
            metrics.connections().dec();
            drop(permit);
        });
    }
    drop(acceptor);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(connections = open, grace = ?grace, "draining connections");
    }
    let drained = graceful.shutdown();
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
