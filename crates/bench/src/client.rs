//! One request over a pooled HTTP/1.1 connection, read to a [`Success`] or an [`ErrorKind`].

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;

use crate::args::Format;
use crate::error::ErrorKind;
use crate::shape::{StreamCounter, StreamStep, unary_tokens};
use crate::sse::SseSplitter;
use crate::stats::{Scratch, Success, micros};

/// Pooled keep-alive client; bodies are `Full<Bytes>` over the pre-serialised pool.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// After `data: [DONE]`, how long to wait for the body's end so the connection can go back to
/// the pool. The latency was already taken at `[DONE]`; a server that keeps the body open only
/// costs the connection.
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Most bytes of a non-2xx body read so its connection can be reused.
const DRAIN_LIMIT: usize = 64 << 10;

/// A keep-alive pool without an idle cap (closed loop at C keeps C connections warm), with
/// `TCP_NODELAY` so small request writes are not delayed.
pub(crate) fn build_client() -> HttpClient {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(usize::MAX)
        .build(conn)
}

/// Where and how to send.
#[derive(Debug)]
pub(crate) struct Target {
    pub uri: Uri,
    pub format: Format,
    pub stream: bool,
}

/// Send `body` and read the whole answer. `start` is when the request counts as started (the
/// scheduled time in open loop). `scratch.itl` is cleared and then filled with the gaps.
pub(crate) async fn execute(
    client: &HttpClient,
    target: &Target,
    body: Bytes,
    start: Instant,
    scratch: &mut Scratch,
) -> Result<Success, ErrorKind> {
    scratch.itl.clear();
    let req = Request::builder()
        .method(Method::POST)
        .uri(target.uri.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .body(Full::new(body))
        // Method, a parsed Uri and a static header cannot fail to build.
        .map_err(|_| ErrorKind::InvalidResponse)?;
    let resp = client.request(req).await.map_err(|e| {
        if e.is_connect() {
            ErrorKind::Connect
        } else {
            ErrorKind::Incomplete
        }
    })?;
    let status = resp.status();
    let mut body = resp.into_body();
    if !status.is_success() {
        drain(&mut body, DRAIN_LIMIT).await;
        return Err(ErrorKind::from_status(status));
    }
    if target.stream {
        read_stream(body, target.format, start, scratch).await
    } else {
        let bytes = body
            .collect()
            .await
            .map_err(|_| ErrorKind::Incomplete)?
            .to_bytes();
        let latency = Instant::now().saturating_duration_since(start);
        let tokens = unary_tokens(target.format, &bytes)?;
        Ok(Success {
            latency,
            ttft: None,
            tokens,
        })
    }
}

async fn read_stream(
    mut body: Incoming,
    format: Format,
    start: Instant,
    scratch: &mut Scratch,
) -> Result<Success, ErrorKind> {
    let mut sse = SseSplitter::new();
    let mut counter = StreamCounter::new(format);
    let mut ttft = None;
    let mut last_tokens: Option<Instant> = None;
    let done_at = 'read: loop {
        let Some(frame) = body.frame().await else {
            return Err(ErrorKind::Incomplete);
        };
        let frame = frame.map_err(|_| ErrorKind::Incomplete)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let now = Instant::now();
        sse.push(&data);
        while let Some(event) = sse.next_event() {
            match counter.on_event(&event)? {
                StreamStep::Done => break 'read now,
                StreamStep::Tokens { new_tokens: 0 } => {}
                StreamStep::Tokens { new_tokens: n } => {
                    match last_tokens {
                        None => ttft = Some(now.saturating_duration_since(start)),
                        Some(prev) => {
                            let gap = micros(now.saturating_duration_since(prev));
                            scratch.itl.push((gap / n, n));
                        }
                    }
                    last_tokens = Some(now);
                }
            }
        }
    };
    // Let the connection return to the pool; anything after [DONE] is ignored.
    let _ = tokio::time::timeout(DRAIN_GRACE, drain(&mut body, usize::MAX)).await;
    Ok(Success {
        latency: done_at.saturating_duration_since(start),
        ttft,
        tokens: counter.total(),
    })
}

/// Read and discard up to `limit` bytes of the body.
async fn drain(body: &mut Incoming, limit: usize) {
    let mut seen = 0usize;
    while seen <= limit {
        match body.frame().await {
            Some(Ok(f)) => seen += f.data_ref().map_or(0, Bytes::len),
            _ => return,
        }
    }
}
