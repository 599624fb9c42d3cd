//! Fleet control through the hop: a remote engine relays control calls to the sidecar's engine
//! and gets the engine's own answer; the engine's native format crosses with `Info`; failures
//! keep their kind; the wire maps every action both ways.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use genfront_mocker::MockEngine;
use genfront_protocol::{
    ControlAction, ControlCall, ControlFuture, ControlReply, Engine, EngineError, EngineInfo,
    EngineRequest, ErrorKind, FinishReason, OutputStream, PauseMode,
};
use genfront_sidecar::{pb, wire};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use common::{PATIENCE, request, start, start_with, timed_mock, within};

fn call(
    format: &'static str,
    action: ControlAction,
    path: &str,
    query: &str,
    body: &str,
) -> ControlCall {
    ControlCall {
        format,
        method: if action.is_read_only() { "GET" } else { "POST" }.to_owned(),
        action,
        path: path.to_owned(),
        query: query.to_owned(),
        body: Bytes::from(body.to_owned()),
        timeout: PATIENCE,
    }
}

fn json_of(reply: &ControlReply) -> Value {
    serde_json::from_slice(&reply.body).expect("a JSON answer")
}

#[tokio::test]
async fn pause_and_resume_through_the_hop() {
    let mock = timed_mock();
    let hop = start(&mock).await;
    assert_eq!(
        hop.remote.native_format(),
        None,
        "the mock speaks every format"
    );

    let mut stream = hop
        .remote
        .generate(request(1, 40), CancellationToken::new());
    let first = within("first item", stream.next())
        .await
        .expect("an item")
        .expect("no error");
    assert_eq!(first.token_ids.len(), 1);

    let pause = call(
        "sglang",
        ControlAction::Pause {
            mode: PauseMode::InPlace,
        },
        "/pause_generation",
        "",
        r#"{"mode":"in_place"}"#,
    );
    let reply = within("pause", hop.remote.control(pause))
        .await
        .expect("answered");
    assert_eq!(
        (reply.status, reply.content_type.as_deref()),
        (200, Some("application/json"))
    );
    assert_eq!(
        json_of(&reply),
        json!({"message": "Generation paused successfully.", "status": "ok"})
    );
    assert_eq!(mock.pause_mode(), Some(PauseMode::InPlace));
    // Frozen: once the tokens already on the wire are read, nothing more arrives while paused.
    let mut got = first.token_ids.len();
    while let Ok(item) = tokio::time::timeout(Duration::from_millis(150), stream.next()).await {
        got += item.expect("an item").expect("no error").token_ids.len();
        assert!(got < 40, "the request kept generating while paused");
    }
    assert_eq!(mock.running(), 1, "frozen, not ended");

    let paused = within(
        "is_paused",
        hop.remote
            .control(call("vllm", ControlAction::IsPaused, "/is_paused", "", "")),
    )
    .await
    .expect("answered");
    assert_eq!(json_of(&paused), json!({"is_paused": true}));

    let resume = call(
        "sglang",
        ControlAction::Resume,
        "/continue_generation",
        "",
        "{}",
    );
    let reply = within("resume", hop.remote.control(resume))
        .await
        .expect("answered");
    assert_eq!(
        json_of(&reply),
        json!({"message": "Generation continued successfully.", "status": "ok"})
    );
    let rest: Vec<_> = within("the rest", stream.collect::<Vec<_>>()).await;
    let last = rest.last().expect("items").as_ref().expect("no error");
    assert_eq!(
        last.finish_reason,
        Some(FinishReason::Length { length: 40 })
    );

    // The mock recorded the relayed calls exactly as sent.
    let log = mock.control_log();
    assert_eq!(log.len(), 3);
    assert_eq!(
        (
            log[0].format.as_str(),
            log[0].action,
            log[0].mode,
            log[0].path.as_str(),
            log[0].body.as_str()
        ),
        (
            "sglang",
            "pause",
            Some("in_place"),
            "/pause_generation",
            r#"{"mode":"in_place"}"#
        )
    );
    assert_eq!(
        (log[1].method.as_str(), log[1].path.as_str()),
        ("GET", "/is_paused")
    );
}

#[tokio::test]
async fn pause_abort_ends_remote_streams_with_the_engine_abort() {
    let mock = timed_mock();
    let hop = start(&mock).await;
    let mut stream = hop
        .remote
        .generate(request(2, 200), CancellationToken::new());
    for _ in 0..3 {
        within("an item", stream.next())
            .await
            .expect("an item")
            .expect("no error");
    }
    let remote = hop.remote.clone();
    let reader = tokio::spawn(async move { stream.collect::<Vec<_>>().await });
    let pause = call(
        "vllm",
        ControlAction::Pause {
            mode: PauseMode::Abort,
        },
        "/pause",
        "mode=abort",
        "",
    );
    let reply = within("pause", remote.control(pause))
        .await
        .expect("answered");
    assert_eq!(json_of(&reply), json!({"status": "paused"}));
    let rest = within("reader", reader).await.expect("reader ran");
    let last = rest.last().expect("items").as_ref().expect("no error");
    assert_eq!(
        last.finish_reason,
        Some(FinishReason::Cancelled {
            message: "Aborted".to_owned()
        })
    );
    assert!(
        last.usage.is_some_and(|u| u.completion_tokens >= 3),
        "partial tokens kept: {last:?}"
    );
}

#[tokio::test]
async fn an_engine_error_status_is_a_reply() {
    let mock = MockEngine::zero_delay();
    mock.set_update_weights_fail(Some("disk full".to_owned()));
    let hop = start(&mock).await;
    let update = call(
        "sglang",
        ControlAction::UpdateWeights {
            version: Some("v2".to_owned()),
        },
        "/update_weights_from_disk",
        "",
        r#"{"model_path":"/m","weight_version":"v2"}"#,
    );
    let reply = within("update", hop.remote.control(update))
        .await
        .expect("answered");
    assert_eq!(reply.status, 400);
    assert_eq!(
        json_of(&reply),
        json!({"success": false, "message": "disk full", "num_paused_requests": 0})
    );
    // A reply without a content type crosses without one.
    let flush = call("sglang", ControlAction::FlushCache, "/flush_cache", "", "");
    let reply = within("flush", hop.remote.control(flush))
        .await
        .expect("answered");
    assert_eq!((reply.status, reply.content_type), (200, None));
    assert_eq!(
        reply.body,
        genfront_mocker::SGLANG_FLUSH_CACHE_TEXT.as_bytes()
    );
}

/// An engine with SGLang's native face that records the calls it is given and answers each with
/// a fixed reply, or never (`hang`).
struct NativeSglang {
    info: EngineInfo,
    seen: Mutex<Vec<ControlCall>>,
    hang: bool,
}

impl Engine for NativeSglang {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn ready(&self) -> bool {
        true
    }

    fn generate(&self, _request: EngineRequest, _cancel: CancellationToken) -> OutputStream {
        Box::pin(futures::stream::iter([Err(EngineError::unsupported(
            "no generation here",
        ))]))
    }

    fn native_format(&self) -> Option<&'static str> {
        Some("sglang")
    }

    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        self.seen.lock().expect("not poisoned").push(call);
        let hang = self.hang;
        Box::pin(async move {
            if hang {
                futures::future::pending::<()>().await;
            }
            Ok(ControlReply {
                status: 503,
                content_type: Some("text/plain".to_owned()),
                body: Bytes::from_static(b"busy"),
            })
        })
    }
}

fn native(hang: bool) -> Arc<NativeSglang> {
    Arc::new(NativeSglang {
        info: MockEngine::zero_delay().info().clone(),
        seen: Mutex::new(Vec::new()),
        hang,
    })
}

#[tokio::test]
async fn a_sidecar_before_an_sglang_engine_reports_and_relays_its_format() {
    let engine = native(false);
    let hop = start_with(engine.clone(), |s| s).await;
    assert_eq!(hop.remote.native_format(), Some("sglang"));
    let mut sent = call(
        "sglang",
        ControlAction::UpdateWeights {
            version: Some("step-7".to_owned()),
        },
        "/update_weights_from_distributed",
        "x=1&y=%20",
        "{\"names\":[\"w\"],\"weight_version\":\"step-7\"}",
    );
    sent.timeout = Duration::from_millis(4321);
    let reply = within("relay", hop.remote.control(sent.clone()))
        .await
        .expect("answered");
    assert_eq!(
        reply,
        ControlReply {
            status: 503,
            content_type: Some("text/plain".to_owned()),
            body: Bytes::from_static(b"busy"),
        }
    );
    let seen = engine.seen.lock().expect("not poisoned").clone();
    assert_eq!(
        seen,
        vec![sent],
        "the call crossed unchanged, timeout included"
    );
}

#[tokio::test]
async fn a_call_the_engine_does_not_answer_in_time_is_a_timeout() {
    let hop = start_with(native(true), |s| s).await;
    let mut slow = call("sglang", ControlAction::FlushCache, "/flush_cache", "", "");
    slow.timeout = Duration::from_millis(200);
    let started = tokio::time::Instant::now();
    let err = within("timeout", hop.remote.control(slow))
        .await
        .expect_err("no answer");
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(
        err.message.contains("did not answer"),
        "the sidecar's own timeout: {err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// An engine without a control face (the trait's default).
struct Plain(EngineInfo);

impl Engine for Plain {
    fn info(&self) -> &EngineInfo {
        &self.0
    }

    fn ready(&self) -> bool {
        true
    }

    fn generate(&self, _request: EngineRequest, _cancel: CancellationToken) -> OutputStream {
        Box::pin(futures::stream::empty())
    }
}

#[tokio::test]
async fn an_engine_without_control_is_unsupported_and_an_unreachable_sidecar_unavailable() {
    let hop = start_with(
        Arc::new(Plain(MockEngine::zero_delay().info().clone())),
        |s| s,
    )
    .await;
    let err = within(
        "unsupported",
        hop.remote
            .control(call("vllm", ControlAction::Resume, "/resume", "", "")),
    )
    .await
    .expect_err("no control face");
    assert_eq!(err.kind, ErrorKind::Unsupported);
    hop.shutdown.cancel();
    within("server stops", hop.server)
        .await
        .expect("joined")
        .expect("clean stop");
    let err = within(
        "unreachable",
        hop.remote
            .control(call("vllm", ControlAction::Resume, "/resume", "", "")),
    )
    .await
    .expect_err("gone");
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
}

#[test]
fn every_action_crosses_the_wire_unchanged() {
    let actions = [
        ControlAction::Pause {
            mode: PauseMode::Abort,
        },
        ControlAction::Pause {
            mode: PauseMode::InPlace,
        },
        ControlAction::Pause {
            mode: PauseMode::Retract,
        },
        ControlAction::Pause {
            mode: PauseMode::Wait,
        },
        ControlAction::Pause {
            mode: PauseMode::Keep,
        },
        ControlAction::Resume,
        ControlAction::FlushCache,
        ControlAction::UpdateWeights { version: None },
        ControlAction::UpdateWeights {
            version: Some(String::new()),
        },
        ControlAction::UpdateWeights {
            version: Some("v1".to_owned()),
        },
        ControlAction::InitWeightsGroup,
        ControlAction::SetWeightVersion {
            version: "v2".to_owned(),
        },
        ControlAction::IsPaused,
        ControlAction::WeightInfo,
    ];
    for (i, action) in actions.into_iter().enumerate() {
        let format = if i % 2 == 0 { "sglang" } else { "vllm" };
        let mut c = call(format, action, "/p", "a=b", "{\"k\":1}");
        c.timeout = Duration::from_millis(u64::try_from(i).expect("small") * 1000 + 7);
        let back = wire::decode_control(wire::encode_control(c.clone())).expect("decodes");
        assert_eq!(back, c);
    }
    // Another format name is interned once and comes back as the same static string.
    let c = call(
        "sglang-packed",
        ControlAction::Resume,
        "/continue_generation",
        "",
        "",
    );
    let a = wire::decode_control(wire::encode_control(c.clone())).expect("decodes");
    let b = wire::decode_control(wire::encode_control(c)).expect("decodes");
    assert!(std::ptr::eq(a.format, b.format));
    assert_eq!(a.format, "sglang-packed");
}

#[test]
fn malformed_control_messages_are_refused() {
    let mut m = wire::encode_control(call("sglang", ControlAction::Resume, "/x", "", ""));
    m.action = None;
    assert_eq!(
        wire::decode_control(m),
        Err(wire::WireError::Missing("action"))
    );
    let mut m = wire::encode_control(call(
        "sglang",
        ControlAction::Pause {
            mode: PauseMode::Abort,
        },
        "/x",
        "",
        "",
    ));
    if let Some(pb::ControlAction {
        kind: Some(pb::control_action::Kind::Pause(p)),
    }) = &mut m.action
    {
        p.mode = 0;
    }
    assert_eq!(
        wire::decode_control(m),
        Err(wire::WireError::OutOfRange("action.pause.mode"))
    );
    // Results: a reply, an engine failure (a timeout comes back as one), nothing.
    let reply = ControlReply::json(202, b"{}".to_vec());
    assert_eq!(
        wire::decode_control_result(wire::encode_control_result(Ok(reply.clone()))),
        Ok(Ok(reply))
    );
    let timeout = EngineError::timeout("late");
    let back = wire::decode_control_result(wire::encode_control_result(Err(timeout)))
        .expect("decodes")
        .expect_err("a failure");
    assert_eq!(
        (back.kind, back.status_code, back.message.as_str()),
        (ErrorKind::Timeout, None, "late")
    );
    let overloaded = EngineError::new(ErrorKind::Overloaded, "full");
    let back = wire::decode_control_result(wire::encode_control_result(Err(overloaded.clone())))
        .expect("decodes");
    assert_eq!(back, Err(overloaded));
    assert_eq!(
        wire::decode_control_result(pb::ControlResponse { result: None }),
        Err(wire::WireError::Missing("result"))
    );
}

/// The whole chain: a remote engine → a sidecar → genfront's SGLang engine client → an SGLang
/// (mock) server. The sidecar reports SGLang's format, and control calls reach the server as the
/// engine's own HTTP calls, answered with its own bodies.
#[tokio::test]
async fn a_sidecar_before_a_real_sglang_client_relays_to_the_server() {
    let mut args = genfront_mockserver::MockServerArgs::new(genfront_mockserver::Api::Sglang);
    args.zero_delay = true;
    let server = genfront_mockserver::spawn(&args)
        .await
        .expect("mock server starts");
    let client = genfront_sglang::SglangEngine::connect(
        &server.base_url(),
        genfront_sglang::SglangEngineOptions::default(),
    )
    .await
    .expect("the SGLang client connects");
    assert_eq!(client.native_format(), Some("sglang"));
    let hop = start_with(Arc::new(client), |s| s).await;
    assert_eq!(hop.remote.native_format(), Some("sglang"));

    let pause = call(
        "sglang",
        ControlAction::Pause {
            mode: PauseMode::Retract,
        },
        "/pause_generation",
        "",
        r#"{"mode":"retract"}"#,
    );
    let reply = within("pause", hop.remote.control(pause))
        .await
        .expect("answered");
    assert_eq!(reply.status, 200);
    assert_eq!(
        json_of(&reply),
        json!({"message": "Generation paused successfully.", "status": "ok"})
    );
    assert_eq!(server.engine.pause_mode(), Some(PauseMode::Retract));
    let resume = call(
        "sglang",
        ControlAction::Resume,
        "/continue_generation",
        "",
        "{}",
    );
    within("resume", hop.remote.control(resume))
        .await
        .expect("answered");
    assert!(!server.engine.is_paused());

    // The server's own failure answer crosses every hop unchanged.
    server
        .engine
        .set_update_weights_fail(Some("corrupt shard".to_owned()));
    let update = call(
        "sglang",
        ControlAction::UpdateWeights {
            version: Some("v5".to_owned()),
        },
        "/update_weights_from_disk",
        "",
        r#"{"model_path":"/m","weight_version":"v5"}"#,
    );
    let reply = within("update", hop.remote.control(update))
        .await
        .expect("answered");
    assert_eq!(reply.status, 400);
    assert_eq!(
        json_of(&reply),
        json!({"success": false, "message": "corrupt shard", "num_paused_requests": 0})
    );
    let log = server.engine.control_log();
    assert_eq!(
        log.iter().map(|r| (r.action, r.status)).collect::<Vec<_>>(),
        [
            ("pause", Some(200)),
            ("resume", Some(200)),
            ("update_weights", Some(400))
        ]
    );
    assert_eq!(log[0].body, r#"{"mode":"retract"}"#);
}
