//! A 5xx body never carries an internal error string; the log does.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{start_with, zero_delay};
use genfront_mocker::ScriptedFault;
use serde_json::json;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const SECRET: &str = "SECRET-MARKER-7f3a";

#[tokio::test]
async fn engine_failures_are_logged_but_never_sent() {
    let buf = Buf::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_env_filter("info")
        .with_ansi(false)
        .init();
    let mut cfg = zero_delay();
    cfg.faults = vec![
        format!("error@*:internal:{SECRET}")
            .parse::<ScriptedFault>()
            .expect("fault spec"),
    ];
    let s = start_with(&[], cfg, 1).await;
    let cases = [
        (
            "/generate",
            json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}),
        ),
        (
            "/generate",
            json!({"input_ids": [1, 2], "stream": true, "sampling_params": {"max_new_tokens": 2}}),
        ),
        (
            "/inference/v1/generate",
            json!({"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}),
        ),
        (
            "/inference/v1/generate",
            json!({"token_ids": [1, 2], "stream": true, "sampling_params": {"max_tokens": 2}}),
        ),
    ];
    for (path, body) in cases {
        let r = s.post(path, &body).await;
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        assert!(
            !text.contains(SECRET),
            "{path}: internal detail leaked: {text}"
        );
        if body["stream"] == json!(true) {
            assert_eq!(status, 200);
            assert!(
                text.contains("\"error\"") && text.ends_with("data: [DONE]\n\n"),
                "{text}"
            );
        } else {
            assert_eq!(status, 500, "{text}");
            assert!(text.contains("Internal server error"), "{text}");
        }
    }
    let logs = String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf8");
    assert!(
        logs.contains(SECRET),
        "the detail must be in the logs: {logs}"
    );
}
