//! [`build_client`]: the pooled HTTP client every call to one engine goes through.

use std::time::Duration;

use genfront_protocol::EngineError;
use http::HeaderMap;
use http::header::{AUTHORIZATION, HeaderValue};

/// How the client for one engine connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// TCP connect timeout of every call.
    pub connect_timeout: Duration,
    /// The engine's API key, sent as `Authorization: Bearer …` (marked sensitive) on every call.
    pub api_key: Option<String>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            api_key: None,
        }
    }
}

/// The HTTP client for `engine` (its display name, for messages): connection pooling (reqwest's
/// pool, HTTP/1.1 keep-alive; idle connections are reused by later requests), `TCP_NODELAY`
/// (every SSE frame is a small write), the connect timeout, no proxy (engines are addressed
/// directly; a node's `HTTP_PROXY` must not reroute token traffic), and the bearer key.
///
/// # Errors
/// `InvalidArgument` when the API key is not a valid header value; `Internal` when the client
/// cannot be built.
pub fn build_client(engine: &str, options: &ClientOptions) -> Result<reqwest::Client, EngineError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = &options.api_key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            EngineError::invalid_argument(format!(
                "the {engine} API key is not a valid header value"
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        .default_headers(headers)
        .build()
        .map_err(|e| {
            EngineError::internal(format!(
                "cannot build the HTTP client for {engine}: {}",
                crate::chain(&e)
            ))
        })
}
