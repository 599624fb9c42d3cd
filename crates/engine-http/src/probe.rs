//! [`probe`]: one active health check.

use std::time::Duration;

use genfront_protocol::EngineError;

/// `GET url` (an engine's native health route), bounded by `timeout` for the whole exchange: `Ok`
/// on a 2xx answer. The body is read (and discarded) so the connection returns to the pool.
///
/// # Errors
/// [`EngineError`] `Unavailable`: a non-2xx answer (its `status_code` recorded), a connect or
/// send failure (the cause chain in the message), or no answer within `timeout`.
pub async fn probe(
    http: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<(), EngineError> {
    let exchange = async {
        let response = http
            .get(url)
            .send()
            .await
            .map_err(|e| crate::send_error(&format!("health probe {url}"), &e))?;
        let status = response.status();
        // Drain for connection reuse; a body error does not change the verdict.
        let _ = response.bytes().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(EngineError::unavailable(format!(
                "health probe {url} answered HTTP {}",
                status.as_u16()
            ))
            .with_status(status.as_u16()))
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(EngineError::unavailable(format!(
                "health probe {url}: no answer within {timeout:?}"
            )))
        })
}
