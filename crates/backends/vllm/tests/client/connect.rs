//! Connecting: served names, context length, typed failures, readiness.

use std::time::Duration;

use genfront_protocol::{Engine, ErrorKind};
use genfront_vllm::VllmEngine;
use serde_json::json;

use crate::support::{engine, options, serve};

// === connect and readiness ===

#[tokio::test]
async fn connect_reads_served_names_and_context_length() {
    let (_, engine) = engine().await;
    let info = engine.info();
    assert_eq!(info.model, "Qwen/Qwen3-8B");
    assert_eq!(info.model_aliases, vec!["qwen".to_owned()]);
    assert_eq!(info.max_context_len, 8192);
    assert_eq!(
        (info.vocab_size, info.max_logprobs, info.max_num_seqs),
        (Some(1000), None, None),
        "facts /v1/models does not report stay unknown unless configured"
    );
    assert!(info.routed_experts && info.sampling_mask);
    assert_eq!(engine.lora_adapters(), ["sql-lora".to_owned()]);
    assert!(engine.ready());
    assert!(
        engine.base_url().starts_with("http://127.0.0.1:") && !engine.base_url().ends_with('/')
    );
}

#[tokio::test]
async fn connect_failures_are_typed() {
    let err = VllmEngine::connect("https://example.com", options())
        .await
        .expect_err("no TLS");
    assert_eq!(err.kind, ErrorKind::InvalidArgument);

    // Nothing listens on a port we just released.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let err = VllmEngine::connect(&format!("127.0.0.1:{port}"), options())
        .await
        .expect_err("refused");
    assert_eq!(err.kind, ErrorKind::Unavailable);

    let (fake, addr) = serve().await;
    fake.lock().models = Some((401, json!({"error": "Unauthorized"})));
    let err = VllmEngine::connect(&addr.to_string(), options())
        .await
        .expect_err("auth");
    assert_eq!(err.kind, ErrorKind::Internal);
    fake.lock().models = Some((
        503,
        json!({"error": {"message": "starting", "type": "x", "code": 503}}),
    ));
    let err = VllmEngine::connect(&addr.to_string(), options())
        .await
        .expect_err("starting");
    assert_eq!(err.kind, ErrorKind::Unavailable);
    fake.lock().models = Some((200, json!({"data": []})));
    let err = VllmEngine::connect(&addr.to_string(), options())
        .await
        .expect_err("no model");
    assert_eq!(err.kind, ErrorKind::Internal);
}

#[tokio::test]
async fn probe_follows_get_health() {
    let (fake, addr) = serve().await;
    let engine = VllmEngine::connect(&addr.to_string(), options())
        .await
        .expect("connect");
    let probe = || engine.probe(Duration::from_secs(5));
    assert_eq!(probe().await, Ok(()));
    fake.lock().health = 503;
    let err = probe().await.expect_err("503");
    assert_eq!(
        (err.kind, err.status_code),
        (ErrorKind::Unavailable, Some(503))
    );
    assert!(
        engine.ready(),
        "readiness is the router's, not the client's"
    );
    fake.lock().health = 200;
    assert_eq!(probe().await, Ok(()));
}
