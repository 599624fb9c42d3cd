//! Fleet-control relay against real engine models (`oracle_engine.py`): a native engine client
//! (behind `TimedEngine`, as the binary wraps it) sends the call a format's control route parsed,
//! unchanged, and hands back the engine's own status, content type and body — an engine's error
//! answer included — within the call's timeout.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::oracle::Oracle;
use genfront_engine_http::{EngineTimeouts, TimedEngine};
use genfront_format::ControlRoute;
use genfront_protocol::{ControlAction, ControlCall, ControlReply, Engine, ErrorKind, PauseMode};
use serde_json::{Value, json};

/// The call the frontend would build for `method path?query` with `body`: the action comes from
/// the format's own route table.
fn call(
    routes: &'static [ControlRoute],
    format: &'static str,
    method: &str,
    path: &str,
    query: &str,
    body: &str,
    timeout: Duration,
) -> ControlCall {
    let route = routes
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("{format} has no control route {path}"));
    let action = (route.parse)(query, body.as_bytes()).unwrap_or_else(|r| {
        panic!(
            "{path} refused: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        )
    });
    ControlCall {
        format,
        action,
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        body: Bytes::from(body.to_owned()),
        timeout,
    }
}

fn timed(engine: Arc<dyn Engine>) -> TimedEngine {
    TimedEngine::new(engine, EngineTimeouts::default(), None)
}

fn json_of(reply: &ControlReply) -> Value {
    serde_json::from_slice(&reply.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&reply.body)))
}

const SECOND: Duration = Duration::from_secs(5);

#[tokio::test]
async fn sglang_pause_continue_and_a_failed_update_come_back_unchanged() {
    let oracle = Oracle::start(&["--api", "sglang"]);
    let client = genfront_sglang::SglangEngine::connect(&oracle.base_url(), Default::default())
        .await
        .expect("connect");
    let engine = timed(Arc::new(client));
    assert_eq!(engine.native_format(), Some("sglang"));
    let routes = &genfront_sglang::CONTROL_ROUTES;

    let pause = call(
        routes,
        "sglang",
        "POST",
        "/pause_generation",
        "",
        r#"{"mode":"in_place"}"#,
        SECOND,
    );
    assert_eq!(
        pause.action,
        ControlAction::Pause {
            mode: PauseMode::InPlace
        }
    );
    let reply = engine.control(pause).await.expect("pause relayed");
    assert_eq!(reply.status, 200);
    assert_eq!(
        json_of(&reply),
        json!({"message": "Generation paused successfully.", "status": "ok"})
    );
    let log = oracle.log().await;
    assert_eq!(log["paused"], json!(true), "{log}");
    assert_eq!(log["pause_mode"], json!("in_place"));

    let resume = call(
        routes,
        "sglang",
        "POST",
        "/continue_generation",
        "",
        "{}",
        SECOND,
    );
    let reply = engine.control(resume).await.expect("continue relayed");
    assert_eq!(reply.status, 200);
    assert_eq!(
        json_of(&reply)["message"],
        json!("Generation continued successfully.")
    );
    assert_eq!(oracle.log().await["paused"], json!(false));

    // A failing weight update: the engine's own 400 and body, byte for byte, as an Ok reply.
    oracle
        .config(json!({"update_weights_fail": "Failed to get weights iterator: /new."}))
        .await;
    let body = r#"{"model_path":"/new","weight_version":"v2"}"#;
    let update = call(
        routes,
        "sglang",
        "POST",
        "/update_weights_from_disk",
        "",
        body,
        SECOND,
    );
    assert_eq!(
        update.action,
        ControlAction::UpdateWeights {
            version: Some("v2".into())
        }
    );
    let relayed = engine
        .control(update.clone())
        .await
        .expect("update relayed");
    let direct = oracle
        .client()
        .post(oracle.url("/update_weights_from_disk"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("direct update");
    let direct_status = direct.status().as_u16();
    let direct_type = direct
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let direct_body = direct.bytes().await.expect("direct body");
    assert_eq!(relayed.status, 400);
    assert!(!relayed.is_success());
    assert_eq!(relayed.status, direct_status);
    assert_eq!(relayed.content_type, direct_type);
    assert_eq!(relayed.body, direct_body);
    assert_eq!(
        json_of(&relayed),
        json!({"success": false, "message": "Failed to get weights iterator: /new.", "num_paused_requests": 0})
    );
    assert_eq!(oracle.log().await["weight_version"], json!("default"));

    // The next update succeeds and moves the version.
    oracle.config(json!({"update_weights_fail": null})).await;
    let reply = engine.control(update).await.expect("update relayed");
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(json_of(&reply)["success"], json!(true));
    assert_eq!(oracle.log().await["weight_version"], json!("v2"));

    // /flush_cache answers text; the relay keeps it as it is.
    let flush = call(routes, "sglang", "GET", "/flush_cache", "", "", SECOND);
    let reply = engine.control(flush).await.expect("flush relayed");
    assert_eq!(reply.status, 200);
    assert!(
        String::from_utf8_lossy(&reply.body).starts_with("Cache flushed."),
        "{reply:?}"
    );
}

#[tokio::test]
async fn vllm_pause_is_paused_resume_and_the_call_timeout() {
    let oracle = Oracle::start(&["--api", "vllm"]);
    let client = genfront_vllm::VllmEngine::connect(&oracle.base_url(), Default::default())
        .await
        .expect("connect");
    let engine = timed(Arc::new(client));
    assert_eq!(engine.native_format(), Some("vllm"));
    let routes = &genfront_vllm::CONTROL_ROUTES;
    let is_paused = || call(routes, "vllm", "GET", "/is_paused", "", "", SECOND);

    let reply = engine.control(is_paused()).await.expect("is_paused");
    assert_eq!(json_of(&reply), json!({"is_paused": false}));

    let pause = call(routes, "vllm", "POST", "/pause", "mode=keep", "", SECOND);
    assert_eq!(
        pause.action,
        ControlAction::Pause {
            mode: PauseMode::Keep
        }
    );
    let reply = engine.control(pause).await.expect("pause relayed");
    assert_eq!(
        (reply.status, json_of(&reply)),
        (200, json!({"status": "paused"}))
    );
    let log = oracle.log().await;
    assert_eq!(log["pause_mode"], json!("keep"), "{log}");
    let reply = engine.control(is_paused()).await.expect("is_paused");
    assert_eq!(json_of(&reply), json!({"is_paused": true}));

    let resume = call(routes, "vllm", "POST", "/resume", "", "", SECOND);
    let reply = engine
        .control(resume.clone())
        .await
        .expect("resume relayed");
    assert_eq!(
        (reply.status, json_of(&reply)),
        (200, json!({"status": "resumed"}))
    );
    let reply = engine.control(is_paused()).await.expect("is_paused");
    assert_eq!(json_of(&reply), json!({"is_paused": false}));

    // The query reaches the engine as sent: the oracle logs the path with it.
    let others = oracle.log().await["others"].to_string();
    assert!(others.contains("/pause?mode=keep"), "{others}");

    // `mode=wait` waits for a running request; the call gives up at its own timeout.
    oracle.config(json!({"token_delay": 0.05})).await;
    let running = oracle
        .client()
        .post(oracle.url("/inference/v1/generate"))
        .json(&json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 400}, "stream": true}))
        .send()
        .await
        .expect("a running request");
    assert_eq!(running.status().as_u16(), 200);
    let wait = call(
        routes,
        "vllm",
        "POST",
        "/pause",
        "mode=wait",
        "",
        Duration::from_millis(300),
    );
    let started = std::time::Instant::now();
    let err = engine.control(wait).await.expect_err("no answer in time");
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(running);
    let reply = engine.control(resume).await.expect("resume relayed");
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn an_unreachable_engine_is_unavailable() {
    let oracle = Oracle::start(&["--api", "vllm"]);
    let client = genfront_vllm::VllmEngine::connect(&oracle.base_url(), Default::default())
        .await
        .expect("connect");
    drop(oracle);
    let routes = &genfront_vllm::CONTROL_ROUTES;
    let err = client
        .control(call(routes, "vllm", "POST", "/resume", "", "", SECOND))
        .await
        .expect_err("the engine is gone");
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
}
