//! Reading a non-2xx answer into its [`EngineError`].

use std::time::Duration;

use genfront_protocol::{EngineError, NativeError};

/// Most bytes of an error body read for its message.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// An engine's HTTP error answer `status` + `headers` + `body` (as [`read_error_body`] read it),
/// kept verbatim as `format`'s own ([`EngineError::native`]: the body, its `Content-Type` and
/// `Retry-After`). `None` when the body may have been cut at [`ERROR_BODY_LIMIT`]: then it is
/// not the engine's answer any more.
pub fn native_error(
    format: &'static str,
    status: u16,
    headers: &http::HeaderMap,
    body: Vec<u8>,
) -> Option<NativeError> {
    if body.len() >= ERROR_BODY_LIMIT {
        return None;
    }
    let text = |name: http::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    Some(NativeError {
        format,
        status: Some(status),
        body: bytes::Bytes::from(body),
        content_type: text(http::header::CONTENT_TYPE),
        retry_after: text(http::header::RETRY_AFTER),
    })
}

/// How long reading an error body may take.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// The first [`ERROR_BODY_LIMIT`] bytes of `response`'s body, read for at most 5 s (whatever
/// arrived by then; a broken body ends the read).
pub async fn read_error_body(mut response: reqwest::Response) -> Vec<u8> {
    let mut out = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = ERROR_BODY_LIMIT.saturating_sub(out.len());
            out.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
            if out.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_BODY_TIMEOUT, read).await;
    out
}

/// The error for `engine`'s non-2xx `response` ([`crate::status_error`] of its status, headers
/// and [`read_error_body`]).
pub async fn error_from_response(engine: &str, response: reqwest::Response) -> EngineError {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = read_error_body(response).await;
    crate::status_error(engine, status, &headers, &body)
}
