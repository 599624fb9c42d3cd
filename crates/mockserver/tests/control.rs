//! The engines' own control routes on the mock servers: native answers (not genfront's fan-out
//! report), native refusals, the pause semantics seen over HTTP, weight versions in answers, the
//! failure knob and the control-call log.

mod common;

use std::time::Duration;

use common::{WAIT, args, client, get_json, post_json, sglang_body, sse_events, start, vllm_body};
use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn};
use serde_json::{Value, json};

/// Realistic timing (10 ms per token), so a request is still running when a control call lands.
async fn timed(api: Api) -> SpawnedMockServer {
    spawn(&MockServerArgs::new(api))
        .await
        .expect("server starts")
}

async fn send(
    s: &SpawnedMockServer,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Option<String>, String) {
    let mut r = client().request(method, s.url(path));
    if let Some(b) = body {
        r = r.json(b);
    }
    let r = r.send().await.expect("sent");
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, ctype, r.text().await.expect("body"))
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

async fn wait_running(s: &SpawnedMockServer, n: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.engine.running() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reached {n} running"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn sglang_pause_abort_ends_a_stream_with_the_native_abort_and_partial_tokens() {
    let s = timed(Api::Sglang).await;
    let url = s.url("/generate");
    let reader = tokio::spawn(async move {
        client()
            .post(url)
            .json(&sglang_body("rl-1", true, 500))
            .send()
            .await
            .expect("sent")
            .text()
            .await
            .expect("body")
    });
    wait_running(&s, 1).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let (status, v) = post_json(&s, "/pause_generation", &json!({"mode": "abort"})).await;
    assert_eq!(
        (status, v),
        (
            200,
            json!({"message": "Generation paused successfully.", "status": "ok"})
        )
    );
    let body = tokio::time::timeout(WAIT, reader)
        .await
        .expect("the stream ends")
        .expect("reader ran");
    let events = sse_events(&body);
    let last = events.last().expect("events");
    let finish = &last["meta_info"]["finish_reason"];
    assert_eq!(
        (finish["type"].clone(), finish["message"].clone()),
        (json!("abort"), json!("Aborted")),
        "{finish}"
    );
    let made = last["output_ids"].as_array().map_or(0, Vec::len);
    assert!(made > 0 && made < 500, "partial tokens: {made}");
    assert_eq!(last["meta_info"]["completion_tokens"], made);

    // Paused: a new request is held, not answered, until the engine continues.
    let url = s.url("/generate");
    let held = tokio::spawn(async move {
        client()
            .post(url)
            .json(&sglang_body("rl-2", false, 3))
            .send()
            .await
            .expect("sent")
            .json::<Value>()
            .await
            .expect("json")
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished(), "held while paused");
    let (_, cfg) = get_json(&s, "/_mock/config").await;
    assert_eq!(
        (cfg["paused"].clone(), cfg["pause_mode"].clone()),
        (json!(true), json!("abort"))
    );
    let (status, v) = post_json(&s, "/continue_generation", &json!({})).await;
    assert_eq!(
        (status, v),
        (
            200,
            json!({"message": "Generation continued successfully.", "status": "ok"})
        )
    );
    let v = tokio::time::timeout(WAIT, held)
        .await
        .expect("answered")
        .expect("ran");
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 3})
    );
}

#[tokio::test]
async fn sglang_refusals_are_the_formats_and_flush_follows_the_engine() {
    let s = start(Api::Sglang, &[]).await;
    let (status, _, text) = send(
        &s,
        reqwest::Method::POST,
        "/pause_generation",
        Some(&json!({"mode": "sideways"})),
    )
    .await;
    assert_eq!(status, 400, "SGLang's validation answer: {text}");
    assert_eq!(parse(&text)["code"], 400);
    assert!(!s.engine.is_paused(), "a refused call changes nothing");
    assert!(
        s.engine.control_log().is_empty(),
        "refused before the engine"
    );

    // Idle: flushed, SGLang's text, no content type.
    let (status, ctype, text) = send(&s, reqwest::Method::GET, "/flush_cache", None).await;
    assert_eq!((status, ctype), (200, None));
    assert!(text.starts_with("Cache flushed."), "{text}");
    let (status, _, _) = send(&s, reqwest::Method::POST, "/flush_cache", None).await;
    assert_eq!(status, 200);
    // A method the route does not take is the frontend's (the engine's) 405.
    let (status, _, _) = send(&s, reqwest::Method::GET, "/pause_generation", None).await;
    assert_eq!(status, 405);
}

#[tokio::test]
async fn sglang_weight_updates_move_the_reported_version_and_the_knob_fails_them() {
    let s = start(Api::Sglang, &[]).await;
    let update = json!({"model_path": "/ckpt/step-3", "weight_version": "step-3"});
    let (status, v) = post_json(&s, "/update_weights_from_disk", &update).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"success": true, "message": "Succeeded to update model weights. Weight version updated to step-3.", "num_paused_requests": 0})
    );
    let (_, out) = post_json(&s, "/generate", &sglang_body("after", false, 2)).await;
    assert_eq!(out["meta_info"]["weight_version"], "step-3");
    for path in [
        "/model_info",
        "/get_model_info",
        "/server_info",
        "/get_server_info",
    ] {
        let (status, info) = get_json(&s, path).await;
        assert_eq!(
            (status, info["weight_version"].clone()),
            (200, json!("step-3")),
            "{path}"
        );
    }

    // The knob: the engine's own 400, the version unchanged, until it is turned off.
    let (status, v) = post_json(&s, "/_mock/config", &json!({"update_weights_fail": true})).await;
    assert_eq!((status, v["ok"].clone()), (200, json!(true)));
    let next = json!({"model_path": "/ckpt/step-4", "weight_version": "step-4"});
    let (status, v) = post_json(&s, "/update_weights_from_disk", &next).await;
    assert_eq!(status, 400);
    assert_eq!(
        v,
        json!({"success": false, "message": "Failed to get weights iterator: /ckpt/step-4.", "num_paused_requests": 0})
    );
    assert_eq!(s.engine.weight_version().as_deref(), Some("step-3"));
    let (status, v) = post_json(
        &s,
        "/_mock/config",
        &json!({"update_weights_fail": "no disk"}),
    )
    .await;
    assert_eq!(
        (status, v["config"]["update_weights_fail"].clone()),
        (200, json!("no disk"))
    );
    let (status, v) = post_json(&s, "/update_weights_from_disk", &next).await;
    assert_eq!((status, v["message"].clone()), (400, json!("no disk")));
    let (status, _) = post_json(&s, "/_mock/config", &json!({"update_weights_fail": false})).await;
    assert_eq!(status, 200);
    let (status, _) = post_json(&s, "/update_weights_from_disk", &next).await;
    assert_eq!(status, 200);
    assert_eq!(s.engine.weight_version().as_deref(), Some("step-4"));

    // A bad config call changes nothing.
    let (status, v) = post_json(&s, "/_mock/config", &json!({"update_weights_fail": 3})).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = post_json(&s, "/_mock/config", &json!({"nope": true})).await;
    assert_eq!(
        (status, v["error"].clone()),
        (400, json!("unknown config key nope"))
    );
    assert_eq!(s.engine.update_weights_fail(), None);

    // Every engine-bound call is in the log, in order, with its answer.
    let (status, log) = get_json(&s, "/_mock/control_log").await;
    assert_eq!(status, 200);
    let log = log.as_array().expect("a list");
    let seen: Vec<(String, u64)> = log
        .iter()
        .map(|r| {
            (
                r["path"].as_str().expect("path").to_owned(),
                r["status"].as_u64().expect("status"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("/update_weights_from_disk".to_owned(), 200),
            ("/update_weights_from_disk".to_owned(), 400),
            ("/update_weights_from_disk".to_owned(), 400),
            ("/update_weights_from_disk".to_owned(), 200),
        ]
    );
    assert_eq!(log[0]["format"], "sglang");
    assert_eq!(log[0]["action"], "update_weights");
    assert_eq!(log[0]["method"], "POST");
    assert_eq!(parse(log[0]["body"].as_str().expect("body")), update);
    assert!(log[0]["at_unix_ms"].as_u64().is_some_and(|t| t > 0));
    let (status, _, _) = send(&s, reqwest::Method::DELETE, "/_mock/control_log", None).await;
    assert_eq!(status, 200);
    let (_, log) = get_json(&s, "/_mock/control_log").await;
    assert_eq!(log, json!([]));
}

#[tokio::test]
async fn the_failure_knob_can_start_on_from_a_flag() {
    let mut a = args(Api::Sglang, &[]);
    a.update_weights_fail = Some("bad shard".to_owned());
    let s = spawn(&a).await.expect("server starts");
    let (status, v) = post_json(
        &s,
        "/update_weights_from_disk",
        &json!({"model_path": "/m"}),
    )
    .await;
    assert_eq!((status, v["message"].clone()), (400, json!("bad shard")));
    let (_, cfg) = get_json(&s, "/_mock/config").await;
    assert_eq!(cfg["update_weights_fail"], "bad shard");
}

#[tokio::test]
async fn vllm_keep_pause_freezes_a_stream_and_resume_finishes_it() {
    let s = timed(Api::Vllm).await;
    let url = s.url("/inference/v1/generate");
    let reader = tokio::spawn(async move {
        client()
            .post(url)
            .json(&vllm_body("keep-1", true, 40))
            .send()
            .await
            .expect("sent")
            .text()
            .await
            .expect("body")
    });
    wait_running(&s, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, ctype, text) = send(&s, reqwest::Method::POST, "/pause?mode=keep", None).await;
    assert_eq!(
        (status, ctype.as_deref(), parse(&text)),
        (200, Some("application/json"), json!({"status": "paused"}))
    );
    let (status, v) = get_json(&s, "/is_paused").await;
    assert_eq!((status, v), (200, json!({"is_paused": true})));
    // Frozen well past the request's own length (40 tokens = 0.4 s).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!reader.is_finished(), "frozen while paused");
    assert_eq!(s.engine.running(), 1);
    let (status, _, text) = send(&s, reqwest::Method::POST, "/resume", None).await;
    assert_eq!((status, parse(&text)), (200, json!({"status": "resumed"})));
    let body = tokio::time::timeout(WAIT, reader)
        .await
        .expect("ends")
        .expect("ran");
    let events = sse_events(&body);
    let ids: usize = events
        .iter()
        .filter_map(|e| e["choices"][0]["token_ids"].as_array().map(Vec::len))
        .sum();
    assert_eq!(ids, 40, "the frozen request finished whole");
    let log = s.engine.control_log();
    assert_eq!(
        log.iter()
            .map(|r| (r.action, r.query.as_str()))
            .collect::<Vec<_>>(),
        [("pause", "mode=keep"), ("is_paused", ""), ("resume", "")]
    );
}

#[tokio::test]
async fn vllm_versions_reset_and_refusals() {
    let s = start(Api::Vllm, &[]).await;
    let (status, v) = get_json(&s, "/weight_info").await;
    assert_eq!((status, v), (200, json!({"weight_version": null})));
    let (status, v) = post_json(&s, "/update_weight_version", &json!({"new_version": "v7"})).await;
    assert_eq!(
        (status, v),
        (200, json!({"success": true, "new_version": "v7"}))
    );
    let (_, v) = get_json(&s, "/weight_info").await;
    assert_eq!(v, json!({"weight_version": "v7"}));
    let (status, out) = post_json(&s, "/inference/v1/generate", &vllm_body("wv", false, 3)).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        out["choices"][0]["weight_versions"],
        json!([{"version": "v7", "start": 0, "end": 3}])
    );
    let (status, _, text) = send(&s, reqwest::Method::POST, "/reset_prefix_cache", None).await;
    assert_eq!((status, parse(&text)), (200, json!({"success": true})));

    // The format refuses what vLLM refuses, before the engine sees it.
    let (status, _, text) = send(&s, reqwest::Method::POST, "/pause?mode=sideways", None).await;
    assert_eq!(status, 400, "{text}");
    assert_eq!(parse(&text)["error"]["param"], "query.mode");
    let (status, _) = post_json(&s, "/update_weight_version", &json!({})).await;
    assert_eq!(status, 400);
    assert!(!s.engine.is_paused());

    // An abort pause refuses new requests (vLLM's retryable 503) until resumed.
    let (status, _, _) = send(&s, reqwest::Method::POST, "/pause", None).await;
    assert_eq!(status, 200);
    let (status, v) = post_json(&s, "/inference/v1/generate", &vllm_body("late", false, 3)).await;
    assert_eq!(status, 503, "{v}");
    let (status, _, _) = send(&s, reqwest::Method::POST, "/resume", None).await;
    assert_eq!(status, 200);
    let (status, _) = post_json(&s, "/inference/v1/generate", &vllm_body("again", false, 3)).await;
    assert_eq!(status, 200);
}
