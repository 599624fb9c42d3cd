//! Fleet control: pause modes, the admission hold, cache flushes, weight updates and versions,
//! the native answers of both formats and the call log.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use genfront_protocol::{
    ControlAction, ControlCall, ControlReply, Engine, EngineOutput, ErrorKind, FinishReason,
    OutputStream, PauseMode,
};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{check, engine, outputs, prompt, request, tokens};
use crate::{MockEngine, SGLANG_FLUSH_CACHE_FAILED, SGLANG_FLUSH_CACHE_TEXT, VLLM_PAUSED_MESSAGE};

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
        timeout: Duration::from_secs(30),
    }
}

fn pause(format: &'static str, mode: PauseMode) -> ControlCall {
    match format {
        "sglang" => call(
            format,
            ControlAction::Pause { mode },
            "/pause_generation",
            "",
            &format!(r#"{{"mode":"{}"}}"#, mode.as_str()),
        ),
        _ => call(
            format,
            ControlAction::Pause { mode },
            "/pause",
            &format!("mode={}", mode.as_str()),
            "",
        ),
    }
}

fn resume(format: &'static str) -> ControlCall {
    let path = if format == "sglang" {
        "/continue_generation"
    } else {
        "/resume"
    };
    call(format, ControlAction::Resume, path, "", "{}")
}

fn body(reply: &ControlReply) -> Value {
    assert_eq!(reply.content_type.as_deref(), Some("application/json"));
    serde_json::from_slice(&reply.body).expect("a JSON answer")
}

async fn ok(e: &MockEngine, c: ControlCall) -> Value {
    let reply = e.control(c).await.expect("the call is answered");
    assert_eq!(reply.status, 200, "{reply:?}");
    body(&reply)
}

fn long_request(n: u32) -> genfront_protocol::EngineRequest {
    let mut req = request(&prompt(20), 50);
    req.stop.ignore_eos = true;
    req.sampling.n = n;
    req
}

async fn next_ok(stream: &mut OutputStream) -> EngineOutput {
    stream
        .next()
        .await
        .expect("stream still open")
        .expect("no error")
}

/// Whether `stream` yields nothing within `wait` (virtual time).
async fn quiet(stream: &mut OutputStream, wait: Duration) -> bool {
    tokio::time::timeout(wait, stream.next()).await.is_err()
}

#[tokio::test(start_paused = true)]
async fn pause_abort_ends_in_flight_requests_with_partial_tokens() {
    for format in ["sglang", "vllm"] {
        let e = MockEngine::default();
        let req = long_request(2);
        let mut stream = e.generate(req.clone(), CancellationToken::new());
        let mut items = Vec::new();
        for _ in 0..6 {
            items.push(next_ok(&mut stream).await);
        }
        // The pause answers only once the aborted request ended, so the stream is read alongside.
        let reader = tokio::spawn(async move {
            let rest: Vec<EngineOutput> = stream.map(|i| i.expect("no error")).collect().await;
            rest
        });
        let answer = ok(&e, pause(format, PauseMode::Abort)).await;
        let expected = match format {
            "sglang" => json!({"message": "Generation paused successfully.", "status": "ok"}),
            _ => json!({"status": "paused"}),
        };
        assert_eq!(answer, expected);
        let rest = reader.await.expect("reader ran");
        assert_eq!(
            rest.len(),
            2,
            "one Cancelled item per unfinished choice: {rest:?}"
        );
        for item in &rest {
            assert!(item.token_ids.is_empty());
            assert_eq!(
                item.finish_reason,
                Some(FinishReason::Cancelled {
                    message: "Aborted".to_owned()
                })
            );
            assert_eq!(item.usage.map(|u| u.completion_tokens), Some(3));
        }
        items.extend(rest);
        check(&e, &req, &items);
        assert_eq!(tokens(&items, 0).len(), 3, "the tokens made so far stay");
        assert_eq!((e.running(), e.aborted()), (0, 1));
        assert_eq!(e.pause_mode(), Some(PauseMode::Abort));
    }
}

#[tokio::test(start_paused = true)]
async fn new_requests_are_held_while_paused_and_start_on_resume() {
    let e = MockEngine::default();
    ok(&e, pause("sglang", PauseMode::Abort)).await;
    assert!(e.is_paused());
    assert_eq!(
        ok(
            &e,
            call("vllm", ControlAction::IsPaused, "/is_paused", "", "")
        )
        .await,
        json!({"is_paused": true})
    );
    let req = long_request(1);
    let mut stream = e.generate(req.clone(), CancellationToken::new());
    assert!(
        quiet(&mut stream, Duration::from_secs(10)).await,
        "held while paused"
    );
    assert_eq!(
        (e.started(), e.running()),
        (0, 0),
        "a held request is not running"
    );
    // An abort-all while it is held does not end it: it was never scheduled.
    ok(&e, pause("sglang", PauseMode::Abort)).await;
    assert_eq!(ok(&e, resume("vllm")).await, json!({"status": "resumed"}));
    assert!(!e.is_paused());
    let t0 = Instant::now();
    let mut items = vec![next_ok(&mut stream).await];
    items.extend(
        stream
            .map(|i| i.expect("no error"))
            .collect::<Vec<_>>()
            .await,
    );
    assert!(t0.elapsed() < Duration::from_secs(1));
    check(&e, &req, &items);
    // The same tokens as a request that was never held.
    let fresh = outputs(&MockEngine::default(), req).await;
    assert_eq!(tokens(&items, 0), tokens(&fresh, 0));
    assert_eq!(e.completed(), 1);
}

#[tokio::test(start_paused = true)]
async fn vllm_abort_and_wait_pauses_refuse_new_requests_and_keep_holds_them() {
    for mode in [PauseMode::Abort, PauseMode::Wait] {
        let e = MockEngine::default();
        ok(&e, pause("vllm", mode)).await;
        let err = super::single_error(&e, long_request(1)).await;
        assert_eq!(
            (err.kind, err.status_code, err.message.as_str()),
            (ErrorKind::Unavailable, Some(503), VLLM_PAUSED_MESSAGE)
        );
        assert!(
            err.retry_elsewhere() && !err.is_worker_failure(),
            "{mode:?}"
        );
        assert_eq!(e.rejected(), 1);
        ok(&e, resume("vllm")).await;
        let items = outputs(&e, long_request(1)).await;
        assert_eq!(
            tokens(&items, 0).len(),
            50,
            "accepted again after the resume"
        );
    }
    let e = MockEngine::default();
    ok(&e, pause("vllm", PauseMode::Keep)).await;
    let mut stream = e.generate(long_request(1), CancellationToken::new());
    assert!(
        quiet(&mut stream, Duration::from_secs(5)).await,
        "keep queues new requests"
    );
    assert_eq!(e.rejected(), 0);
    ok(&e, resume("vllm")).await;
    assert_eq!(stream.count().await, 50);
}

#[tokio::test(start_paused = true)]
async fn a_held_request_can_be_cancelled() {
    let e = MockEngine::default();
    ok(&e, pause("sglang", PauseMode::InPlace)).await;
    let cancel = CancellationToken::new();
    let mut stream = e.generate(long_request(1), cancel.clone());
    assert!(quiet(&mut stream, Duration::from_secs(1)).await);
    cancel.cancel();
    let last = next_ok(&mut stream).await;
    assert!(matches!(
        last.finish_reason,
        Some(FinishReason::Cancelled { .. })
    ));
    assert!(stream.next().await.is_none());
    assert_eq!((e.running(), e.aborted()), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn freezing_pauses_keep_requests_without_progress_until_resume() {
    for (format, mode) in [
        ("sglang", PauseMode::InPlace),
        ("sglang", PauseMode::Retract),
        ("vllm", PauseMode::Keep),
    ] {
        let e = MockEngine::default();
        let req = long_request(1);
        let mut stream = e.generate(req.clone(), CancellationToken::new());
        let mut items = Vec::new();
        for _ in 0..4 {
            items.push(next_ok(&mut stream).await);
        }
        ok(&e, pause(format, mode)).await;
        assert!(
            quiet(&mut stream, Duration::from_secs(60)).await,
            "{mode:?}: frozen"
        );
        assert_eq!(e.running(), 1, "a frozen request is still in flight");
        ok(&e, resume(format)).await;
        // The step served before the freeze is emitted at once; then timing restarts from the
        // resume: one token per step again, not a burst of overdue ones.
        items.push(next_ok(&mut stream).await);
        let t0 = Instant::now();
        items.push(next_ok(&mut stream).await);
        assert_eq!(t0.elapsed(), Duration::from_millis(10), "{mode:?}");
        items.extend(
            stream
                .map(|i| i.expect("no error"))
                .collect::<Vec<_>>()
                .await,
        );
        check(&e, &req, &items);
        let fresh = outputs(&MockEngine::default(), req).await;
        assert_eq!(
            tokens(&items, 0),
            tokens(&fresh, 0),
            "{mode:?}: same tokens"
        );
        assert_eq!(e.completed(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn wait_answers_after_in_flight_requests_finish() {
    let e = MockEngine::default();
    let req = long_request(1);
    let stream = e.generate(req.clone(), CancellationToken::new());
    let reader = tokio::spawn(async move {
        stream
            .map(|i| i.expect("no error"))
            .collect::<Vec<_>>()
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(e.running(), 1);
    let answer = ok(&e, pause("vllm", PauseMode::Wait)).await;
    assert_eq!(answer, json!({"status": "paused"}));
    assert_eq!(e.running(), 0, "answered after the request finished");
    let items = reader.await.expect("reader ran");
    check(&e, &req, &items);
    assert_eq!(tokens(&items, 0).len(), 50, "the request was not cut short");
    assert_eq!(e.completed(), 1);
}

#[tokio::test(start_paused = true)]
async fn wait_times_out_when_requests_do_not_finish() {
    let e = MockEngine::default();
    // Far longer than the wait allows.
    let mut req = long_request(1);
    req.stop.max_tokens = Some(100_000);
    let stream = e.generate(req, CancellationToken::new());
    let reader = tokio::spawn(async move { stream.count().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut c = pause("vllm", PauseMode::Wait);
    c.timeout = Duration::from_millis(200);
    let err = e
        .control(c)
        .await
        .expect_err("the request outlives the timeout");
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert_eq!(
        e.pause_mode(),
        Some(PauseMode::Wait),
        "the pause stays in force"
    );
    let log = e.control_log();
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].status, log[0].mode), (None, Some("wait")));
    assert!(
        log[0]
            .error
            .as_deref()
            .is_some_and(|m| m.contains("still running"))
    );
    ok(&e, pause("vllm", PauseMode::Abort)).await;
    assert!(reader.await.expect("reader ran") > 0);
}

#[tokio::test(start_paused = true)]
async fn sglang_flush_cache_refuses_while_requests_run() {
    let e = MockEngine::default();
    let flush = || call("sglang", ControlAction::FlushCache, "/flush_cache", "", "");
    outputs(&e, request(&prompt(40), 2)).await;
    assert!(e.cached_blocks() > 0);
    let mut stream = e.generate(long_request(1), CancellationToken::new());
    next_ok(&mut stream).await;
    let refused = e.control(flush()).await.expect("answered");
    assert_eq!(refused.status, 400);
    assert_eq!(refused.body, SGLANG_FLUSH_CACHE_FAILED.as_bytes());
    assert_eq!(
        refused.content_type, None,
        "Starlette's Response without a media type"
    );
    assert!(e.cached_blocks() > 0, "nothing flushed");
    drop(stream);
    let done = e.control(flush()).await.expect("answered");
    assert_eq!(
        (done.status, done.body.as_ref()),
        (200, SGLANG_FLUSH_CACHE_TEXT.as_bytes())
    );
    assert_eq!(e.cached_blocks(), 0);
}

#[tokio::test]
async fn vllm_reset_prefix_cache_and_pause_clear_the_cache() {
    let e = engine();
    outputs(&e, request(&prompt(40), 2)).await;
    assert!(e.cached_blocks() > 0);
    let reset = |query: &str| {
        call(
            "vllm",
            ControlAction::FlushCache,
            "/reset_prefix_cache",
            query,
            "",
        )
    };
    assert_eq!(ok(&e, reset("")).await, json!({"success": true}));
    assert_eq!(e.cached_blocks(), 0);
    // While a request runs the engine keeps its blocks (still a 200), unless told otherwise.
    outputs(&e, request(&prompt(40), 2)).await;
    let mut stream = e.generate(long_request(1), CancellationToken::new());
    next_ok(&mut stream).await;
    assert_eq!(ok(&e, reset("")).await, json!({"success": false}));
    assert!(e.cached_blocks() > 0);
    assert_eq!(
        ok(&e, reset("reset_running_requests=true")).await,
        json!({"success": true})
    );
    drop(stream);
    assert_eq!(e.cached_blocks(), 0);
    // A pause clears it unless clear_cache=false; keep never does.
    outputs(&e, request(&prompt(40), 2)).await;
    let mut keep_cache = pause("vllm", PauseMode::Abort);
    keep_cache.query.push_str("&clear_cache=false");
    ok(&e, keep_cache).await;
    assert!(e.cached_blocks() > 0);
    ok(&e, pause("vllm", PauseMode::Keep)).await;
    assert!(e.cached_blocks() > 0);
    ok(&e, pause("vllm", PauseMode::Abort)).await;
    assert_eq!(e.cached_blocks(), 0);
}

#[tokio::test]
async fn weight_updates_set_the_version_reported_in_outputs() {
    let e = engine();
    let info = || {
        call(
            "sglang",
            ControlAction::WeightInfo,
            "/get_weight_version",
            "",
            "",
        )
    };
    assert_eq!(ok(&e, info()).await, json!({"weight_version": "default"}));
    let vllm_info = call("vllm", ControlAction::WeightInfo, "/weight_info", "", "");
    assert_eq!(ok(&e, vllm_info).await, json!({"weight_version": null}));
    // Before any version is set, outputs carry nothing (the formats' defaults stand).
    let before = outputs(&e, request(&prompt(8), 3)).await;
    assert!(before.iter().all(|o| o.engine_data.is_none()));

    let update = call(
        "sglang",
        ControlAction::UpdateWeights {
            version: Some("v2".to_owned()),
        },
        "/update_weights_from_disk",
        "",
        r#"{"model_path":"/m","weight_version":"v2"}"#,
    );
    let answer = ok(&e, update).await;
    assert_eq!(
        answer,
        json!({"success": true, "message": "Succeeded to update model weights. Weight version updated to v2.", "num_paused_requests": 0})
    );
    assert_eq!(e.weight_version().as_deref(), Some("v2"));
    assert_eq!(ok(&e, info()).await, json!({"weight_version": "v2"}));

    let mut req = request(&prompt(8), 3);
    req.sampling.n = 2;
    let items = outputs(&e, req).await;
    for o in &items {
        let data = o.engine_data.as_ref().expect("the version is attached");
        assert_eq!(data["meta_info"]["weight_version"], "v2");
        if o.finish_reason.is_some() {
            assert_eq!(
                data["weight_versions"],
                json!([{"version": "v2", "start": 0, "end": 3}])
            );
        } else {
            assert!(data.get("weight_versions").is_none());
        }
    }

    let set = call(
        "vllm",
        ControlAction::SetWeightVersion {
            version: "v3".to_owned(),
        },
        "/update_weight_version",
        "",
        r#"{"new_version":"v3"}"#,
    );
    assert_eq!(
        ok(&e, set).await,
        json!({"success": true, "new_version": "v3"})
    );
    assert_eq!(
        ok(
            &e,
            call("vllm", ControlAction::WeightInfo, "/weight_info", "", "")
        )
        .await,
        json!({"weight_version": "v3"})
    );
}

#[tokio::test(start_paused = true)]
async fn a_version_change_mid_request_splits_the_spans() {
    let e = MockEngine::default();
    let req = long_request(1);
    let mut stream = e.generate(req, CancellationToken::new());
    for _ in 0..4 {
        let o = next_ok(&mut stream).await;
        assert!(o.engine_data.is_none());
    }
    ok(&e, pause("vllm", PauseMode::Keep)).await;
    let set = |v: &str| {
        call(
            "vllm",
            ControlAction::SetWeightVersion {
                version: v.to_owned(),
            },
            "/update_weight_version",
            "",
            "{}",
        )
    };
    ok(&e, set("a")).await;
    ok(&e, resume("vllm")).await;
    for _ in 0..6 {
        next_ok(&mut stream).await;
    }
    ok(&e, set("b")).await;
    let rest: Vec<EngineOutput> = stream.map(|i| i.expect("no error")).collect().await;
    let last = rest.last().expect("a last item");
    assert!(last.finish_reason.is_some());
    let data = last.engine_data.as_ref().expect("attached");
    assert_eq!(data["meta_info"]["weight_version"], "b");
    assert_eq!(
        data["weight_versions"],
        json!([
            {"version": "default", "start": 0, "end": 4},
            {"version": "a", "start": 4, "end": 10},
            {"version": "b", "start": 10, "end": 50},
        ])
    );
}

#[tokio::test]
async fn the_failure_knob_fails_updates_natively_until_cleared() {
    let e = engine();
    e.set_update_weights_fail(Some(String::new()));
    let update = |format: &'static str, path: &str| {
        call(
            format,
            ControlAction::UpdateWeights {
                version: Some("v9".to_owned()),
            },
            path,
            "",
            r#"{"model_path":"/ckpt/9","weight_version":"v9"}"#,
        )
    };
    let failed = e
        .control(update("sglang", "/update_weights_from_disk"))
        .await
        .expect("answered");
    assert_eq!(failed.status, 400);
    assert_eq!(
        body(&failed),
        json!({"success": false, "message": "Failed to get weights iterator: /ckpt/9.", "num_paused_requests": 0})
    );
    e.set_update_weights_fail(Some("NCCL timeout".to_owned()));
    let failed = e
        .control(update("sglang", "/update_weights_from_distributed"))
        .await
        .expect("answered");
    assert_eq!(
        (failed.status, body(&failed)),
        (400, json!({"success": false, "message": "NCCL timeout"}))
    );
    let failed = e
        .control(update("vllm", "/update_weights"))
        .await
        .expect("answered");
    let vllm_failure = json!({"error": {
        "message": "Call to collective_rpc method failed: NCCL timeout",
        "type": "InternalServerError", "param": null, "code": 500}});
    assert_eq!((failed.status, body(&failed)), (500, vllm_failure.clone()));
    let failed = e
        .control(update("vllm", "/finish_weight_update"))
        .await
        .expect("answered");
    assert_eq!((failed.status, body(&failed)), (500, vllm_failure));
    assert_eq!(
        e.weight_version(),
        None,
        "a failed update keeps the version"
    );
    assert_eq!(e.update_weights_fail().as_deref(), Some("NCCL timeout"));

    e.set_update_weights_fail(None);
    let done = ok(&e, update("vllm", "/update_weights")).await;
    assert_eq!(done, json!({"message": "Weights updated"}));
    assert_eq!(e.weight_version().as_deref(), Some("v9"));
    let done = ok(
        &e,
        call(
            "vllm",
            ControlAction::UpdateWeights {
                version: Some("v10".to_owned()),
            },
            "/finish_weight_update",
            "",
            r#"{"weight_version":"v10"}"#,
        ),
    )
    .await;
    assert_eq!(done, json!({"message": "Weight update finished"}));
    assert_eq!(e.weight_version().as_deref(), Some("v10"));
}

#[tokio::test]
async fn vllm_weight_transfer_routes_answer_their_messages() {
    let e = engine();
    e.set_update_weights_fail(Some(String::new()));
    for (path, message) in [
        (
            "/init_weight_transfer_engine",
            "Weight transfer initialized",
        ),
        ("/start_weight_update", "Weight update started"),
        (
            "/shutdown_weight_transfer_engine",
            "Weight transfer shut down",
        ),
        ("/start_draft_weight_update", "Draft weight update started"),
    ] {
        let got = ok(
            &e,
            call("vllm", ControlAction::InitWeightsGroup, path, "", ""),
        )
        .await;
        assert_eq!(
            got,
            json!({"message": message}),
            "{path}: the knob fails only updates"
        );
    }
    let failed = e
        .control(call(
            "vllm",
            ControlAction::UpdateWeights { version: None },
            "/update_weights",
            "",
            r#"{"update_info":{}}"#,
        ))
        .await
        .expect("answered");
    assert_eq!(failed.status, 500);
    assert_eq!(
        body(&failed)["error"]["message"],
        "Call to collective_rpc method failed: mock weight update failure"
    );
}

#[tokio::test]
async fn the_failure_knob_can_start_on() {
    let e = super::engine_with(|c| c.update_weights_fail = Some("boom".to_owned()));
    let reply = e
        .control(call(
            "sglang",
            ControlAction::UpdateWeights { version: None },
            "/update_weights_from_tensor",
            "",
            "{}",
        ))
        .await
        .expect("answered");
    assert_eq!(
        (reply.status, body(&reply)),
        (400, json!({"success": false, "message": "boom"}))
    );
}

#[tokio::test]
async fn other_calls_answer_natively() {
    let e = engine();
    assert_eq!(
        ok(
            &e,
            call(
                "sglang",
                ControlAction::InitWeightsGroup,
                "/init_weights_update_group",
                "",
                "{}"
            )
        )
        .await,
        json!({"success": true, "message": "Succeeded to initialize custom process group."})
    );
    assert_eq!(
        ok(
            &e,
            call(
                "vllm",
                ControlAction::InitWeightsGroup,
                "/init_weight_transfer_engine",
                "",
                "{}"
            )
        )
        .await,
        json!({"message": "Weight transfer initialized"})
    );
    assert_eq!(
        ok(&e, resume("sglang")).await,
        json!({"message": "Generation continued successfully.", "status": "ok"})
    );
    assert_eq!(
        ok(
            &e,
            call("sglang", ControlAction::IsPaused, "/is_paused", "", "")
        )
        .await,
        json!({"is_paused": false})
    );
    let err = e
        .control(call("openai", ControlAction::Resume, "/resume", "", ""))
        .await
        .expect_err("unknown format");
    assert_eq!(err.kind, ErrorKind::Unsupported);
}

#[tokio::test]
async fn every_call_is_recorded() {
    let e = engine();
    let mut p = pause("vllm", PauseMode::Keep);
    p.query = "mode=keep&clear_cache=false".to_owned();
    ok(&e, p).await;
    ok(
        &e,
        call(
            "sglang",
            ControlAction::UpdateWeights { version: None },
            "/update_weights_from_disk",
            "",
            r#"{"model_path":"/m"}"#,
        ),
    )
    .await;
    let log = e.control_log();
    assert_eq!(log.len(), 2);
    assert_eq!(
        (
            log[0].format.as_str(),
            log[0].action,
            log[0].mode,
            log[0].method.as_str(),
            log[0].path.as_str()
        ),
        ("vllm", "pause", Some("keep"), "POST", "/pause")
    );
    assert_eq!(log[0].query, "mode=keep&clear_cache=false");
    assert_eq!(log[0].status, Some(200));
    assert_eq!(
        (log[1].action, log[1].body.as_str()),
        ("update_weights", r#"{"model_path":"/m"}"#)
    );
    assert!(log[1].at_unix_ms >= log[0].at_unix_ms && log[0].at_unix_ms > 0);
    let json = serde_json::to_value(&log).expect("serialisable");
    assert_eq!(json[0]["action"], "pause");
    e.clear_control_log();
    assert!(e.control_log().is_empty());
}

#[tokio::test]
async fn sglang_version_updates_abort_in_flight_requests_unless_told_not_to() {
    let set = |body: &str| {
        call(
            "sglang",
            ControlAction::SetWeightVersion {
                version: "v1".to_owned(),
            },
            "/update_weight_version",
            "",
            body,
        )
    };
    for (body, aborts) in [
        (r#"{"new_version":"v1"}"#, true),
        (r#"{"new_version":"v1","abort_all_requests":true}"#, true),
        (r#"{"new_version":"v1","abort_all_requests":false}"#, false),
    ] {
        let e = engine();
        let mut stream = e.generate(long_request(1), CancellationToken::new());
        next_ok(&mut stream).await;
        ok(&e, set(body)).await;
        let next = next_ok(&mut stream).await;
        let cancelled = matches!(next.finish_reason, Some(FinishReason::Cancelled { .. }));
        assert_eq!(cancelled, aborts, "{body}");
        assert!(!e.is_paused(), "no pause: only an abort");
    }
    // vLLM's route aborts nothing.
    let e = engine();
    let mut stream = e.generate(long_request(1), CancellationToken::new());
    next_ok(&mut stream).await;
    let vllm = call(
        "vllm",
        ControlAction::SetWeightVersion {
            version: "v1".to_owned(),
        },
        "/update_weight_version",
        "",
        r#"{"new_version":"v1"}"#,
    );
    ok(&e, vllm).await;
    assert_eq!(next_ok(&mut stream).await.finish_reason, None);
}
