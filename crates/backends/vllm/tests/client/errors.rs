//! Every error class: HTTP statuses, unreachable engines, error events, truncated streams.

use std::time::Duration;

use genfront_protocol::{Engine, EngineError, ErrorKind};
use genfront_vllm::VllmEngine;
use serde_json::{Value, json};

use crate::support::{
    DONE, Fake, Script, Step, chunk, engine, last_error, options, request, run, sse,
};

// === errors ===

async fn error_for(script: Script) -> (EngineError, Fake, VllmEngine) {
    let (fake, engine) = engine().await;
    fake.script(script);
    let items = run(&engine, request(&engine, json!({"max_tokens": 4}))).await;
    (last_error(&items), fake, engine)
}

#[tokio::test]
async fn http_errors_are_typed() {
    let (e, _, _) = error_for(Script::Json(
        400,
        json!({"error": {"message": "Requested sample logprobs of 30, which is greater than max allowed: 20",
            "type": "BadRequestError", "param": "logprobs", "code": 400}}),
    ))
    .await;
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert_eq!(
        e.message,
        "Requested sample logprobs of 30, which is greater than max allowed: 20"
    );
    assert_eq!(
        (e.status_code, e.err_type.as_deref()),
        (Some(400), Some("BadRequestError"))
    );

    let (e, _, _) = error_for(Script::Json(
        404,
        json!({"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}}),
    ))
    .await;
    assert_eq!(
        (e.kind, e.status_code),
        (ErrorKind::InvalidArgument, Some(404))
    );
    assert_eq!(e.err_type.as_deref(), Some("NotFoundError"));
    // A missing route is genfront's problem.
    let (e, _, _) = error_for(Script::Json(404, json!({"detail": "Not Found"}))).await;
    assert_eq!(e.kind, ErrorKind::Internal);

    let (e, _, engine) = error_for(Script::Json(
        503,
        json!({"error": {"message": "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.",
            "type": "Service Unavailable", "param": null, "code": 503}}),
    ))
    .await;
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(
        engine.ready(),
        "request outcomes leave readiness to the router"
    );
    for (status, body) in [
        (
            500,
            json!({"error": {"message": "EngineCore died", "type": "InternalServerError", "code": 500}}),
        ),
        (
            501,
            json!({"error": {"message": "The model does not support generate tokens API", "type": "NotImplementedError", "code": 501}}),
        ),
        (401, json!({"error": "Unauthorized"})),
        (
            403,
            json!({"error": {"message": "Scale-out endpoints are disabled.", "type": "PermissionDeniedError", "code": 403}}),
        ),
    ] {
        let (e, fake, _) = error_for(Script::Json(status, body)).await;
        assert_eq!(e.kind, ErrorKind::Internal, "{status}");
        assert_eq!(e.status_code, Some(status));
        assert!(fake.aborts().is_empty(), "a refused request is not aborted");
    }
}

#[tokio::test]
async fn an_engine_that_went_away_is_unavailable() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A one-shot server: answers `/v1/models` once, then stops listening.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf).await;
        let body = r#"{"data": [{"id": "m", "parent": null, "max_model_len": 128}]}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = socket.write_all(answer.as_bytes()).await;
    });
    let engine = VllmEngine::connect(&addr.to_string(), options())
        .await
        .expect("connect");
    server.await.expect("server");
    let items = run(&engine, request(&engine, json!({}))).await;
    let error = last_error(&items);
    assert_eq!(error.kind, ErrorKind::Unavailable);
    assert!(error.message.contains("could not be reached"), "{error:?}");
    let probe = engine
        .probe(Duration::from_secs(2))
        .await
        .expect_err("gone");
    assert_eq!(probe.kind, ErrorKind::Unavailable);
}

#[tokio::test]
async fn error_events_in_a_started_stream() {
    let mut wire = sse(&[
        chunk(0, &[5], 1, None, Value::Null),
        json!({"error": {"message": "token_id(s) [5000] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: 1000",
            "type": "BadRequestError", "param": "stop_token_ids", "code": 400}}),
    ]);
    wire.extend_from_slice(DONE);
    let (e, _, _) = error_for(Script::Stream(vec![Step::Send(wire)])).await;
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.starts_with("token_id(s) [5000]"), "{}", e.message);
}

#[tokio::test]
async fn truncated_streams_are_incomplete() {
    // The body ends cleanly but without a finish or [DONE].
    let (e, _, _) = error_for(Script::Stream(vec![Step::Send(sse(&[chunk(
        0,
        &[5],
        1,
        None,
        Value::Null,
    )]))]))
    .await;
    assert_eq!(e.kind, ErrorKind::StreamIncomplete);
    // The connection breaks mid-event, after the headers went out.
    let (e, _, _) = error_for(Script::Stream(vec![
        Step::Send(b"data: {\"choices\": [".to_vec()),
        Step::Sleep(Duration::from_millis(50)),
        Step::Fail,
    ]))
    .await;
    assert_eq!(e.kind, ErrorKind::StreamIncomplete);
    // It breaks at once (before or right after the headers): retryable either way.
    let (e, _, _) = error_for(Script::Stream(vec![Step::Fail])).await;
    assert!(
        matches!(e.kind, ErrorKind::Unavailable | ErrorKind::StreamIncomplete),
        "{e}"
    );
    // [DONE] before every choice finished.
    let mut wire = sse(&[chunk(0, &[5], 1, None, Value::Null)]);
    wire.extend_from_slice(DONE);
    let (e, _, _) = error_for(Script::Stream(vec![Step::Send(wire)])).await;
    assert_eq!(e.kind, ErrorKind::StreamIncomplete);
}
