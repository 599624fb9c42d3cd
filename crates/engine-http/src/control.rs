//! [`relay_control`]: one native fleet-control call ([`ControlCall`]) relayed to an engine's HTTP
//! server unchanged, and the engine's own answer ([`ControlReply`]) back.
//!
//! Rules (the contract of `Engine::control` for native HTTP clients):
//!
//! - The request is the call's `method` on `{base}{path}` plus `?{query}` when the query is not
//!   empty; the query and path are sent as given (no re-encoding). A non-empty body is sent as is
//!   with `Content-Type: application/json` (every control route of both engines takes JSON or
//!   nothing); an empty body is sent without one.
//! - Whatever status the engine answers is `Ok`: the reply carries the status, the
//!   `Content-Type` and the body unchanged (an SGLang 400 `{"success": false, …}` stays that).
//! - The whole exchange (connect, send, headers, body) is bounded by `call.timeout`; past it the
//!   call fails with `ErrorKind::Timeout`. A connect or send failure, or a body that breaks while
//!   it is read, is `ErrorKind::Unavailable` (with the cause chain).
//! - The body is read up to [`CONTROL_BODY_LIMIT`] (16 MiB): a longer answer (by
//!   `Content-Length` or as it streams) fails with `ErrorKind::Unavailable` naming the limit, so a
//!   misbehaving engine cannot make the frontend buffer without bound.

use genfront_protocol::{ControlCall, ControlReply, EngineError};
use http::header::CONTENT_TYPE;

#[cfg(doc)]
use genfront_protocol::ErrorKind;

/// Most bytes of a control answer's body that are read (16 MiB; control answers are small JSON
/// documents or one line of text).
pub const CONTROL_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Send `call` to the engine at `base_url` (`http://host:port`, no trailing slash) through `http`
/// (the engine client's pooled client, with its API key) and return the engine's own answer.
/// `engine` is the engine's display name for messages (`"SGLang"`, `"vLLM"`).
///
/// # Errors
/// [`EngineError`] `InvalidArgument` for a method that is not an HTTP token; `Unavailable` for a
/// transport failure or an answer over [`CONTROL_BODY_LIMIT`]; `Timeout` when the exchange takes
/// longer than `call.timeout`.
pub async fn relay_control(
    http: &reqwest::Client,
    engine: &str,
    base_url: &str,
    call: ControlCall,
) -> Result<ControlReply, EngineError> {
    relay_limited(http, engine, base_url, call, CONTROL_BODY_LIMIT).await
}

async fn relay_limited(
    http: &reqwest::Client,
    engine: &str,
    base_url: &str,
    call: ControlCall,
    limit: usize,
) -> Result<ControlReply, EngineError> {
    let method = reqwest::Method::from_bytes(call.method.as_bytes()).map_err(|_| {
        EngineError::invalid_argument(format!(
            "`{}` is not an HTTP method (control call {})",
            call.method, call.path
        ))
    })?;
    let url = if call.query.is_empty() {
        format!("{base_url}{}", call.path)
    } else {
        format!("{base_url}{}?{}", call.path, call.query)
    };
    let what = format!("{engine} {} {}", call.method, call.path);
    let timeout = call.timeout;
    let exchange = async {
        let mut request = http.request(method, &url);
        if !call.body.is_empty() {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(call.body.clone());
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| crate::send_error(&what, &e))?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let too_large = || {
            EngineError::unavailable(format!(
                "{what} answered more than {limit} bytes (the control answer limit)"
            ))
            .with_status(status)
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            EngineError::unavailable(format!(
                "{what}: the answer broke off while it was read: {}",
                crate::chain(&e)
            ))
        })? {
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(ControlReply {
            status,
            content_type,
            body: body.into(),
        })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(EngineError::timeout(format!(
                "{what}: no answer within {timeout:?}"
            )))
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::Router;
    use axum::body::Bytes as AxumBytes;
    use axum::extract::RawQuery;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::{get, post};
    use bytes::Bytes;
    use genfront_protocol::{ControlAction, ErrorKind, PauseMode};

    use super::*;

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    }

    fn call(method: &str, path: &str, query: &str, body: &str, timeout: Duration) -> ControlCall {
        ControlCall {
            format: "sglang",
            action: ControlAction::Pause {
                mode: PauseMode::Abort,
            },
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            body: Bytes::from(body.to_owned()),
            timeout,
        }
    }

    fn app() -> Router {
        Router::new()
            .route(
                "/echo",
                post(
                    |RawQuery(q): RawQuery, headers: HeaderMap, body: AxumBytes| async move {
                        let ct = headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-")
                            .to_owned();
                        let text = format!(
                            "q={} ct={ct} body={}",
                            q.unwrap_or_default(),
                            String::from_utf8_lossy(&body)
                        );
                        (
                            StatusCode::BAD_REQUEST,
                            [("content-type", "text/x-echo")],
                            text,
                        )
                    },
                ),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route("/big", get(|| async { vec![b'x'; 2048] }))
    }

    #[tokio::test]
    async fn relays_method_query_body_and_answer_unchanged() {
        let base = serve(app()).await;
        let http = reqwest::Client::new();
        let reply = relay_control(
            &http,
            "SGLang",
            &base,
            call(
                "POST",
                "/echo",
                "mode=keep&x=%20",
                "{\"a\":1}",
                Duration::from_secs(5),
            ),
        )
        .await
        .expect("answered");
        assert_eq!(reply.status, 400, "an error status is still an Ok reply");
        assert_eq!(reply.content_type.as_deref(), Some("text/x-echo"));
        assert_eq!(
            reply.body,
            Bytes::from_static(b"q=mode=keep&x=%20 ct=application/json body={\"a\":1}")
        );
        let empty = relay_control(
            &http,
            "SGLang",
            &base,
            call("POST", "/echo", "", "", Duration::from_secs(5)),
        )
        .await
        .expect("answered");
        assert_eq!(empty.body, Bytes::from_static(b"q= ct=- body="));
    }

    #[tokio::test]
    async fn timeout_unreachable_oversized_and_bad_method() {
        let base = serve(app()).await;
        let http = reqwest::Client::new();
        let slow = relay_control(
            &http,
            "vLLM",
            &base,
            call("GET", "/slow", "", "", Duration::from_millis(200)),
        )
        .await
        .expect_err("the call fails");
        assert_eq!(slow.kind, ErrorKind::Timeout, "{slow:?}");

        let big = relay_limited(
            &http,
            "vLLM",
            &base,
            call("GET", "/big", "", "", Duration::from_secs(5)),
            1024,
        )
        .await
        .expect_err("the call fails");
        assert_eq!(big.kind, ErrorKind::Unavailable);
        assert!(big.message.contains("1024 bytes"), "{}", big.message);
        let fits = relay_limited(
            &http,
            "vLLM",
            &base,
            call("GET", "/big", "", "", Duration::from_secs(5)),
            4096,
        )
        .await
        .expect("answered");
        assert_eq!(fits.body.len(), 2048);

        // A port nothing listens on.
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let a = l.local_addr().expect("addr");
            drop(l);
            format!("http://{a}")
        };
        let down = relay_control(
            &http,
            "vLLM",
            &dead,
            call("POST", "/pause", "", "", Duration::from_secs(5)),
        )
        .await
        .expect_err("the call fails");
        assert_eq!(down.kind, ErrorKind::Unavailable, "{down:?}");

        let bad = relay_control(
            &http,
            "vLLM",
            &base,
            call("PO ST", "/pause", "", "", Duration::from_secs(5)),
        )
        .await
        .expect_err("the call fails");
        assert_eq!(bad.kind, ErrorKind::InvalidArgument);
    }
}
