//! [`AbortLog`]: every native abort call the server received, for tests that assert "the engine
//! was told to abort rid X".

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

/// One call to the native abort route (`POST /abort_request` or
/// `POST /inference/v1/abort_requests`), recorded before it is served.
#[derive(Debug, Clone, PartialEq)]
pub struct AbortRecord {
    /// The raw request body.
    pub body: Bytes,
    /// The body as JSON, when it is JSON.
    pub json: Option<Value>,
}

impl AbortRecord {
    /// The ids the call names: SGLang's `rid` (when non-empty), or vLLM's `request_ids` (a
    /// list, or one string); string items only.
    pub fn ids(&self) -> Vec<String> {
        let Some(v) = &self.json else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(rid) = v.get("rid").and_then(Value::as_str)
            && !rid.is_empty()
        {
            out.push(rid.to_owned());
        }
        match v.get("request_ids") {
            Some(Value::String(id)) => out.push(id.clone()),
            Some(Value::Array(items)) => {
                out.extend(items.iter().filter_map(|i| i.as_str().map(str::to_owned)));
            }
            _ => {}
        }
        out
    }

    /// Whether the call is SGLang's `abort_all: true`.
    pub fn abort_all(&self) -> bool {
        self.json
            .as_ref()
            .and_then(|v| v.get("abort_all"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The abort calls a mock server received, in arrival order. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct AbortLog {
    records: Arc<watch::Sender<Vec<AbortRecord>>>,
}

impl Default for AbortLog {
    fn default() -> Self {
        Self {
            records: Arc::new(watch::Sender::new(Vec::new())),
        }
    }
}

impl AbortLog {
    /// Append a call.
    pub(crate) fn record(&self, body: Bytes) {
        let json = serde_json::from_slice(&body).ok();
        self.records
            .send_modify(|r| r.push(AbortRecord { body, json }));
    }

    /// Every call so far.
    pub fn records(&self) -> Vec<AbortRecord> {
        self.records.borrow().clone()
    }

    /// Number of calls so far.
    pub fn len(&self) -> usize {
        self.records.borrow().len()
    }

    /// Whether no call arrived yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether some call named `id` (see [`AbortRecord::ids`]).
    pub fn contains(&self, id: &str) -> bool {
        self.records
            .borrow()
            .iter()
            .any(|r| r.ids().iter().any(|i| i == id))
    }

    /// Wait up to `limit` until `done` holds for the calls so far; returns whether it did.
    pub async fn wait_for(
        &self,
        limit: Duration,
        mut done: impl FnMut(&[AbortRecord]) -> bool,
    ) -> bool {
        let mut rx = self.records.subscribe();
        matches!(
            tokio::time::timeout(limit, rx.wait_for(|r| done(r))).await,
            Ok(Ok(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_ids_and_waits() {
        let log = AbortLog::default();
        assert!(log.is_empty());
        log.record(Bytes::from_static(br#"{"rid":"abc","abort_all":false}"#));
        log.record(Bytes::from_static(
            br#"{"request_ids":["generate-tokens-1", 5]}"#,
        ));
        log.record(Bytes::from_static(br#"{"rid":"","abort_all":true}"#));
        log.record(Bytes::from_static(b"not json"));
        assert_eq!(log.len(), 4);
        assert!(log.contains("abc") && log.contains("generate-tokens-1"));
        assert!(!log.contains("ab"));
        let r = log.records();
        assert!(r[2].abort_all() && r[2].ids().is_empty());
        assert!(r[3].json.is_none() && r[3].ids().is_empty());

        let waiter = log.clone();
        let h = tokio::spawn(async move {
            waiter
                .wait_for(Duration::from_secs(5), |r| r.len() == 5)
                .await
        });
        log.record(Bytes::from_static(br#"{"rid":"late"}"#));
        assert!(h.await.expect("task"));
        assert!(
            !log.wait_for(Duration::from_millis(1), |r| r.len() > 5)
                .await
        );
    }
}
