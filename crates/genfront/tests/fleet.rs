//! Fleet control end to end, against independent engines: three `oracle_engine.py` processes per
//! test (the oracle models SGLang's and vLLM's RL control routes from their source), genfront in
//! front of them with `--worker`.
//!
//! - pause (`abort`) while 50 streams run: every stream ends with SGLang's native abort and its
//!   partial tokens; a new request waits `--pause-wait`, then gets the retryable 503 `paused`; a
//!   resume during a wait lets the waiting request through; after the resume every worker
//!   takes traffic again.
//! - a weight update on 3 workers with one failing: the report shows 2 ok / 1 failed (the
//!   engine's own 400 body), that worker gets no traffic, and the next successful update
//!   restores it; `--route-current-version` keeps traffic on the workers of the current version.
//! - vLLM `/pause?mode=keep`, `/is_paused`, `/resume` on a `workers=` subset.
//! - admin API: `GET/POST /workers`, `DELETE /workers/{id}`; every control and admin route
//!   refuses without the admin key.

mod common;

use std::time::{Duration, Instant};

use common::oracle::Oracle;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn sglang_oracles(n: usize) -> Vec<Oracle> {
    (0..n)
        .map(|_| Oracle::start(&["--api", "sglang"]))
        .collect()
}

fn vllm_oracles(n: usize) -> Vec<Oracle> {
    (0..n).map(|_| Oracle::start(&["--api", "vllm"])).collect()
}

/// genfront over `oracles` (all of `kind`), with `extra` flags; waits until every worker is
/// connected.
async fn front(
    kind: &str,
    oracles: &[Oracle],
    extra: &[&str],
) -> (String, genfront::Server, CancellationToken) {
    let urls: Vec<String> = oracles.iter().map(Oracle::base_url).collect();
    front_at(kind, &urls, extra).await
}

/// genfront over the engines at `urls` (all of `kind`), round robin, with `extra` flags; waits
/// until every worker is connected.
async fn front_at(
    kind: &str,
    urls: &[String],
    extra: &[&str],
) -> (String, genfront::Server, CancellationToken) {
    let mut argv: Vec<String> = Vec::new();
    for u in urls {
        argv.push("--worker".to_owned());
        argv.push(format!("{kind}={u}"));
    }
    argv.extend(["--policy", "round_robin", "--health-interval", "200ms"].map(str::to_owned));
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    let (url, server, shutdown) = common::genfront(&argv).await;
    assert!(
        server.wait_all_workers(Duration::from_secs(20)).await,
        "workers did not connect"
    );
    (url, server, shutdown)
}

/// Three zero-delay native mock servers of `api` (`genfront mocker`'s faces, in process).
async fn mock_servers(
    api: genfront_mockserver::Api,
) -> Vec<genfront_mockserver::SpawnedMockServer> {
    let mut mocks = Vec::new();
    for _ in 0..3 {
        let mut a = genfront_mockserver::MockServerArgs::new(api);
        a.zero_delay = true;
        mocks.push(genfront_mockserver::spawn(&a).await.expect("mock server"));
    }
    mocks
}

async fn post(url: &str, body: &Value) -> (u16, Value, reqwest::header::HeaderMap) {
    let r = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v, headers)
}

async fn get(url: &str) -> (u16, Value) {
    let r = reqwest::Client::new().get(url).send().await.expect("get");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `/generate` calls the oracle has seen.
async fn generate_calls(o: &Oracle) -> usize {
    let log = o.log().await;
    log["requests"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|e| e["path"] == "/generate").count())
}

fn outcomes(report: &Value) -> Vec<String> {
    report["workers"]
        .as_array()
        .expect("workers in report")
        .iter()
        .map(|w| w["outcome"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_abort_ends_streams_with_partial_tokens_and_new_requests_wait_then_get_retryable_503()
{
    let oracles = sglang_oracles(3);
    for o in &oracles {
        o.config(json!({"token_delay": 0.02})).await;
    }
    let (url, _server, _stop) = front("sglang", &oracles, &["--pause-wait", "1s"]).await;

    // 50 long streams.
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for i in 0..50 {
        let client = client.clone();
        let url = format!("{url}/generate");
        streams.push(tokio::spawn(async move {
            let body = json!({"input_ids": [1, 2, 3, i], "stream": true,
                              "sampling_params": {"max_new_tokens": 2000, "ignore_eos": true}});
            let r = client.post(url).json(&body).send().await.expect("stream");
            assert_eq!(r.status(), 200);
            r.text().await.expect("stream body")
        }));
    }
    // Let every stream make some tokens.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut running = 0;
        for o in &oracles {
            running += o.log().await["running"].as_array().map_or(0, Vec::len);
        }
        if running >= 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {running} of 50 streams running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (status, report, _) = post(
        &format!("{url}/pause_generation"),
        &json!({"mode": "abort"}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["success"], true);
    assert_eq!(outcomes(&report), ["ok", "ok", "ok"]);
    assert_eq!(
        report["workers"][0]["body"],
        json!({"message": "Generation paused successfully.", "status": "ok"}),
        "the engine's own body is relayed"
    );

    for s in streams {
        let text = tokio::time::timeout(Duration::from_secs(20), s)
            .await
            .expect("stream ended after the pause")
            .expect("task");
        let events = common::sse_events(&text);
        let last = events.last().expect("events");
        let finish = &last["meta_info"]["finish_reason"];
        assert_eq!(finish["type"], "abort", "native abort: {last}");
        let n = last["output_ids"].as_array().map_or(0, Vec::len);
        assert!(
            n > 0 && n < 2000,
            "partial tokens ({n}) kept in the abort: {last}"
        );
        assert!(
            text.trim_end().ends_with("data: [DONE]"),
            "stream closed natively"
        );
    }

    // While every worker is paused, a new request waits --pause-wait, then the retryable 503.
    let started = Instant::now();
    let (status, body, headers) =
        post(&format!("{url}/generate"), &common::sglang_body(4, false)).await;
    let waited = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "paused", "{body}");
    assert_eq!(body["retryable"], true, "{body}");
    assert!(headers.get("retry-after").is_some(), "Retry-After");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "waited {waited:?}"
    );
    let before: Vec<usize> = futures::future::join_all(oracles.iter().map(generate_calls)).await;

    // A request waiting when the resume comes goes through.
    let waiting = tokio::spawn({
        let url = url.clone();
        async move { post(&format!("{url}/generate"), &common::sglang_body(4, false)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, report, _) = post(&format!("{url}/continue_generation"), &json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(outcomes(&report), ["ok", "ok", "ok"]);
    let (status, body, _) = waiting.await.expect("task");
    assert_eq!(
        status, 200,
        "the waiting request was served after the resume: {body}"
    );
    assert_eq!(body["meta_info"]["finish_reason"]["type"], "length");

    // Traffic flows to every worker again.
    for _ in 0..9 {
        let (status, body, _) =
            post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
        assert_eq!(status, 200, "{body}");
    }
    let after: Vec<usize> = futures::future::join_all(oracles.iter().map(generate_calls)).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a > b,
            "worker {i} got no traffic after the resume ({b} -> {a})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_weight_update_takes_the_worker_out_until_an_update_succeeds() {
    let oracles = sglang_oracles(3);
    let (url, _server, _stop) = front("sglang", &oracles, &[]).await;
    oracles[1]
        .config(json!({"update_weights_fail": "Failed to get weights iterator: /models/v2."}))
        .await;

    let update = json!({"model_path": "/models/v2", "weight_version": "v2"});
    let (status, report, _) = post(&format!("{url}/update_weights_from_disk"), &update).await;
    assert_eq!(status, 502, "one worker failed: {report}");
    assert_eq!(report["success"], false);
    assert_eq!(outcomes(&report), ["ok", "error", "ok"]);
    let failed = &report["workers"][1];
    assert_eq!(failed["status"], 400);
    assert_eq!(
        failed["body"]["success"], false,
        "the engine's own body: {failed}"
    );
    assert_eq!(
        failed["body"]["message"],
        "Failed to get weights iterator: /models/v2."
    );
    assert_eq!(report["workers"][0]["body"]["success"], true);

    let (status, workers) = get(&format!("{url}/workers")).await;
    assert_eq!(status, 200);
    let ws = workers["workers"].as_array().expect("workers");
    assert_eq!(ws[1]["weights_failed"], true);
    assert_eq!(ws[0]["weights_failed"], false);
    assert_eq!(ws[0]["weight_version"], "v2");
    assert_eq!(ws[2]["weight_version"], "v2");
    assert_eq!(workers["current_weight_version"], "v2");
    let (_, info) = get(&format!("{url}/get_model_info")).await;
    assert_eq!(info["weight_version"], "v2", "the fleet's version: {info}");
    let (_, info) = get(&format!("{url}/server_info")).await;
    assert_eq!(
        info["weight_version"], "v2",
        "the fleet's version in server info"
    );

    let before = generate_calls(&oracles[1]).await;
    for _ in 0..12 {
        let (status, body, _) =
            post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["meta_info"]["weight_version"], "v2",
            "served by an updated worker"
        );
    }
    assert_eq!(
        generate_calls(&oracles[1]).await,
        before,
        "the failed worker got traffic"
    );

    // The next successful update restores it.
    oracles[1]
        .config(json!({"update_weights_fail": null}))
        .await;
    let update = json!({"model_path": "/models/v3", "weight_version": "v3"});
    let (status, report, _) = post(&format!("{url}/update_weights_from_disk"), &update).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(outcomes(&report), ["ok", "ok", "ok"]);
    for _ in 0..6 {
        let (status, _, _) = post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
        assert_eq!(status, 200);
    }
    assert!(
        generate_calls(&oracles[1]).await > before,
        "the restored worker takes traffic again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_current_version_keeps_traffic_on_updated_workers() {
    let oracles = sglang_oracles(3);
    let (url, server, _stop) = front("sglang", &oracles, &["--route-current-version"]).await;
    let ids: Vec<String> = server
        .state
        .router
        .workers()
        .iter()
        .map(|w| w.id().to_string())
        .collect();
    // Refit two of the three (a rolling update): only they take traffic until the third is done.
    let update = json!({"model_path": "/models/v2", "weight_version": "v2"});
    let (status, report, _) = post(
        &format!(
            "{url}/update_weights_from_disk?workers={},{}",
            ids[0], ids[2]
        ),
        &update,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["workers"].as_array().map(Vec::len), Some(2));
    let before = generate_calls(&oracles[1]).await;
    for _ in 0..9 {
        let (status, body, _) =
            post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        generate_calls(&oracles[1]).await,
        before,
        "stale worker got traffic"
    );
    let (status, _, _) = post(
        &format!("{url}/update_weights_from_disk?workers={}", ids[1]),
        &update,
    )
    .await;
    assert_eq!(status, 200);
    for _ in 0..6 {
        post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    }
    assert!(generate_calls(&oracles[1]).await > before);
    // An unknown id is the format's 404, nothing is sent.
    let (status, body, _) = post(
        &format!("{url}/update_weights_from_disk?workers=nope"),
        &update,
    )
    .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_pause_keep_is_paused_and_resume_on_a_subset() {
    let oracles = vllm_oracles(3);
    let (url, server, _stop) = front("vllm", &oracles, &["--pause-wait", "0s"]).await;
    let ids: Vec<String> = server
        .state
        .router
        .workers()
        .iter()
        .map(|w| w.id().to_string())
        .collect();
    let client = reqwest::Client::new();
    // Pause one worker: the others keep serving.
    let r = client
        .post(format!("{url}/pause?mode=keep&workers={}", ids[0]))
        .send()
        .await
        .expect("pause");
    assert_eq!(r.status(), 200);
    let report: Value = r.json().await.expect("report");
    assert_eq!(report["workers"][0]["body"], json!({"status": "paused"}));
    let log = oracles[0].log().await;
    assert_eq!(log["paused"], true);
    assert_eq!(
        log["pause_mode"], "keep",
        "the query reached the engine unchanged"
    );
    assert_eq!(oracles[1].log().await["paused"], false);
    let (status, report) = get(&format!("{url}/is_paused")).await;
    assert_eq!(status, 200);
    let paused: Vec<Value> = report["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["body"]["is_paused"].clone())
        .collect();
    assert_eq!(paused, [json!(true), json!(false), json!(false)]);
    // An unknown mode is vLLM 0.33.0's own 400 (its validation handler, not FastAPI's 422),
    // answered without a fan-out: no engine sees the call.
    let seen = oracles[1].log().await["others"]
        .as_array()
        .map_or(0, Vec::len);
    let r = client
        .post(format!("{url}/pause?mode=sideways"))
        .send()
        .await
        .expect("pause");
    assert_eq!(r.status(), 400);
    let refusal: Value = r.json().await.expect("json");
    assert_eq!(refusal["error"]["code"], 400, "vLLM's envelope: {refusal}");
    let others = oracles[1].log().await["others"].clone();
    assert!(
        !others.as_array().is_some_and(|o| o[seen.min(o.len())..]
            .iter()
            .any(|e| e["path"].as_str().is_some_and(|p| p.starts_with("/pause")))),
        "the refused call reached an engine: {others}"
    );
    // Pause the rest: with --pause-wait 0 a request is refused at once, retryably.
    let r = client
        .post(format!("{url}/pause?mode=abort"))
        .send()
        .await
        .expect("pause");
    assert_eq!(r.status(), 200);
    let body_gen = json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}});
    let (status, body, headers) = post(&format!("{url}/inference/v1/generate"), &body_gen).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "paused", "{body}");
    assert_eq!(body["error"]["retryable"], true);
    assert!(headers.get("retry-after").is_some());
    let r = client
        .post(format!("{url}/resume"))
        .send()
        .await
        .expect("resume");
    assert_eq!(r.status(), 200);
    let (status, body, _) = post(&format!("{url}/inference/v1/generate"), &body_gen).await;
    assert_eq!(status, 200, "{body}");
    for o in &oracles {
        assert_eq!(o.log().await["paused"], false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_lists_adds_and_removes_workers() {
    let oracles = sglang_oracles(2);
    let (url, _server, _stop) = front("sglang", &oracles[..1], &[]).await;
    let (status, list) = get(&format!("{url}/workers")).await;
    assert_eq!(status, 200);
    assert_eq!(list["workers"].as_array().map(Vec::len), Some(1));
    assert_eq!(list["workers"][0]["state"], "ready");
    assert_eq!(list["workers"][0]["kind"], "sglang");

    let spec = format!("sglang={}", oracles[1].base_url());
    let (status, added, _) = post(
        &format!("{url}/workers"),
        &json!({"worker": spec, "id": "extra"}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["id"], "extra");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, list) = get(&format!("{url}/workers")).await;
        let ready = list["workers"].as_array().is_some_and(|w| {
            w.iter()
                .any(|w| w["id"] == "extra" && w["state"] == "ready")
        });
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "added worker never ready: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..4 {
        post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    }
    assert!(generate_calls(&oracles[1]).await > 0, "added worker serves");

    let (status, bad, _) = post(&format!("{url}/workers"), &json!({"worker": "ftp://x"})).await;
    assert_eq!(status, 400, "{bad}");

    let r = reqwest::Client::new()
        .delete(format!("{url}/workers/extra"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 200);
    let removed: Value = r.json().await.expect("json");
    assert_eq!(removed["removed"], true);
    let before = generate_calls(&oracles[1]).await;
    for _ in 0..4 {
        post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    }
    assert_eq!(
        generate_calls(&oracles[1]).await,
        before,
        "removed worker got traffic"
    );
    let r = reqwest::Client::new()
        .delete(format!("{url}/workers/extra"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_and_admin_routes_need_the_admin_key() {
    let sg = sglang_oracles(1);
    let vl = vllm_oracles(1);
    let argv: Vec<String> = [
        "--worker".to_owned(),
        format!("sglang={}", sg[0].base_url()),
        "--worker".to_owned(),
        format!("vllm={}", vl[0].base_url()),
        "--api-key".to_owned(),
        "tenant-key".to_owned(),
        "--admin-api-key".to_owned(),
        "admin-key".to_owned(),
    ]
    .to_vec();
    let (url, server, _shutdown) = common::genfront(&argv).await;
    assert!(server.wait_all_workers(Duration::from_secs(20)).await);
    let mut routes: Vec<(&'static str, genfront_format::ControlMethods)> = Vec::new();
    for r in &server.routes {
        for c in r.format.control_routes() {
            if !routes.iter().any(|(p, _)| *p == c.path) {
                routes.push((c.path, c.methods));
            }
        }
    }
    assert!(routes.len() >= 6, "control routes: {routes:?}");
    let client = reqwest::Client::new();
    for (path, methods) in &routes {
        let method = match methods {
            genfront_format::ControlMethods::Get => reqwest::Method::GET,
            _ => reqwest::Method::POST,
        };
        let send = |key: Option<&str>| {
            let mut req = client.request(method.clone(), format!("{url}{path}"));
            if let Some(k) = key {
                req = req.bearer_auth(k);
            }
            if method == reqwest::Method::POST {
                req = req.json(&json!({}));
            }
            req.send()
        };
        let r = send(None).await.expect("send");
        assert_eq!(r.status(), 401, "{path} without a key");
        assert_eq!(
            r.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        let r = send(Some("tenant-key")).await.expect("send");
        assert_eq!(r.status(), 403, "{path} with a tenant key");
        let r = send(Some("admin-key")).await.expect("send");
        assert!(
            ![401, 403].contains(&r.status().as_u16()),
            "{path} with the admin key: {}",
            r.status()
        );
    }
    for (method, path) in [
        (reqwest::Method::GET, "/workers"),
        (reqwest::Method::POST, "/workers"),
        (reqwest::Method::DELETE, "/workers/x"),
    ] {
        let r = client
            .request(method.clone(), format!("{url}{path}"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 401, "{method} {path}");
    }
    let r = client
        .get(format!("{url}/workers"))
        .bearer_auth("admin-key")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
}

/// The embedded mocker speaks fleet control too: `--mock 3` and a P/D pair of mocks, paused and
/// resumed through genfront (the mocks' own abort, freeze and hold semantics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_mocks_pause_abort_streams_and_pd_workers_are_all_reached() {
    let argv: Vec<String> = ["--mock", "3", "--pause-wait", "300ms"]
        .map(str::to_owned)
        .to_vec();
    let (url, _server, _stop) = common::genfront(&argv).await;
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for i in 0..12 {
        let client = client.clone();
        let url = format!("{url}/generate");
        streams.push(tokio::spawn(async move {
            let body = json!({"input_ids": [9, 8, 7, i], "stream": true,
                              "sampling_params": {"max_new_tokens": 3000, "ignore_eos": true}});
            client
                .post(url)
                .json(&body)
                .send()
                .await
                .expect("stream")
                .text()
                .await
                .expect("body")
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, report, _) = post(
        &format!("{url}/pause_generation"),
        &json!({"mode": "abort"}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(outcomes(&report), ["ok", "ok", "ok"]);
    for s in streams {
        let text = tokio::time::timeout(Duration::from_secs(10), s)
            .await
            .expect("stream ended after the pause")
            .expect("task");
        let events = common::sse_events(&text);
        let last = events.last().expect("events");
        assert_eq!(
            last["meta_info"]["finish_reason"]["type"], "abort",
            "{last}"
        );
        let n = last["output_ids"].as_array().map_or(0, Vec::len);
        assert!(n > 0 && n < 3000, "partial tokens: {n}");
    }
    let (status, body, _) = post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "paused");
    let (status, _, _) = post(&format!("{url}/continue_generation"), &json!({})).await;
    assert_eq!(status, 200);
    let (status, body, _) = post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    assert_eq!(status, 200, "{body}");

    // P/D: a pause reaches the prefill and the decode worker.
    let argv: Vec<String> = ["--mock-prefill", "1", "--mock-decode", "1"]
        .map(str::to_owned)
        .to_vec();
    let (url, _server, _stop2) = common::genfront(&argv).await;
    let (status, report, _) = post(
        &format!("{url}/pause_generation"),
        &json!({"mode": "in_place"}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let roles: Vec<&str> = report["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["role"].as_str())
        .collect();
    assert_eq!(roles, ["prefill", "decode"]);
    let (_, list) = get(&format!("{url}/workers")).await;
    assert!(
        list["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .all(|w| w["state"] == "paused"),
        "{list}"
    );
    let (status, _, _) = post(&format!("{url}/continue_generation"), &json!({})).await;
    assert_eq!(status, 200);
    let (status, body, _) = post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    assert_eq!(status, 200, "{body}");
}

/// Three native mock servers (`genfront mocker`'s faces, in process), which answer the engines'
/// own control routes and record every call: genfront's fan-out reaches each, a weight update
/// failing on one isolates it, the next good update restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_mock_servers_record_the_fanned_out_calls_and_isolate_a_failed_update() {
    let mocks = mock_servers(genfront_mockserver::Api::Sglang).await;
    let urls: Vec<String> = mocks.iter().map(|m| m.base_url()).collect();
    let (url, _server, _stop) = front_at("sglang", &urls, &[]).await;

    let (status, _, _) = post(
        &mocks[2].url("/_mock/config"),
        &json!({"update_weights_fail": true}),
    )
    .await;
    assert_eq!(status, 200);
    let update = json!({"model_path": "/ckpt/7", "weight_version": "step-7"});
    let (status, report, _) = post(&format!("{url}/update_weights_from_disk"), &update).await;
    assert_eq!(status, 502, "{report}");
    assert_eq!(outcomes(&report), ["ok", "ok", "error"]);
    for m in &mocks {
        let (_, log) = get(&m.url("/_mock/control_log")).await;
        let calls = log.as_array().expect("control log");
        assert_eq!(calls.len(), 1, "one call per mock: {log}");
        assert_eq!(calls[0]["path"], "/update_weights_from_disk");
        let body: Value =
            serde_json::from_str(calls[0]["body"].as_str().unwrap_or("")).expect("body");
        assert_eq!(body, update, "the body as sent");
    }
    let before = mocks[2].generate_requests();
    for _ in 0..9 {
        let (status, body, _) =
            post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["meta_info"]["weight_version"], "step-7");
    }
    assert_eq!(
        mocks[2].generate_requests(),
        before,
        "the failed worker got traffic"
    );

    post(
        &mocks[2].url("/_mock/config"),
        &json!({"update_weights_fail": false}),
    )
    .await;
    let (status, report, _) = post(&format!("{url}/update_weights_from_disk"), &update).await;
    assert_eq!(status, 200, "{report}");
    for _ in 0..6 {
        post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    }
    assert!(
        mocks[2].generate_requests() > before,
        "restored worker serves again"
    );
}

/// vLLM's weight-transfer flow over three native vLLM mock servers: init → start →
/// `update_weights` per bucket (one mock failing, as the engine answers a failed
/// `collective_rpc`: 500) → finish with a version. Each failed call reports 2 ok / 1 error and
/// leaves the failed worker out of rotation; `/weight_info` shows the version on the others; a
/// malformed bucket is vLLM's own 400 before any fan-out; a later full flow restores the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_weight_transfer_flow_isolates_a_failed_bucket_until_a_full_refit_succeeds() {
    let mocks = mock_servers(genfront_mockserver::Api::Vllm).await;
    let urls: Vec<String> = mocks.iter().map(|m| m.base_url()).collect();
    let (url, _server, _stop) = front_at("vllm", &urls, &[]).await;
    let failing = mocks[2].base_url().to_string();
    let outcome_of = |report: &Value, base: &str| -> Value {
        report["workers"]
            .as_array()
            .expect("workers in report")
            .iter()
            .find(|w| {
                w["url"]
                    .as_str()
                    .is_some_and(|u| u.trim_end_matches('/') == base.trim_end_matches('/'))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no worker {base} in {report}"))
    };
    let count =
        |report: &Value, outcome: &str| outcomes(report).iter().filter(|o| *o == outcome).count();
    let body_gen = json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}});

    let (status, _, _) = post(
        &mocks[2].url("/_mock/config"),
        &json!({"update_weights_fail": true}),
    )
    .await;
    assert_eq!(status, 200);
    let init = json!({"init_info": {"master_address": "10.0.0.9", "master_port": 29500, "rank_offset": 1, "world_size": 4}});
    let (status, report, _) = post(&format!("{url}/init_weight_transfer_engine"), &init).await;
    assert_eq!(
        status, 200,
        "init does not use the failing update path: {report}"
    );
    for w in report["workers"].as_array().expect("workers") {
        assert_eq!(w["body"], json!({"message": "Weight transfer initialized"}));
    }
    let (status, report, _) = post(&format!("{url}/start_weight_update"), &json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["workers"][0]["body"],
        json!({"message": "Weight update started"})
    );

    // A malformed bucket: vLLM's own 400, refused before any engine sees it.
    let (status, refusal, _) = post(
        &format!("{url}/update_weights"),
        &json!({"update_info": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{refusal}");
    assert_eq!(refusal["error"]["param"], "body.update_info", "{refusal}");
    for m in &mocks {
        let (_, log) = get(&m.url("/_mock/control_log")).await;
        assert!(
            !log.as_array()
                .expect("log")
                .iter()
                .any(|c| c["path"] == "/update_weights"),
            "the refused bucket reached a mock: {log}"
        );
    }

    for bucket in 0..2 {
        let update = json!({"update_info": {"names": [format!("layers.{bucket}.w")], "dtype_names": ["bfloat16"], "shapes": [[8, 8]]}});
        let (status, report, _) = post(&format!("{url}/update_weights"), &update).await;
        assert_eq!(status, 502, "{report}");
        assert_eq!(
            (count(&report, "ok"), count(&report, "error")),
            (2, 1),
            "{report}"
        );
        let failed = outcome_of(&report, &failing);
        assert_eq!(failed["outcome"], "error");
        assert_eq!(failed["status"], 500);
        assert_eq!(
            failed["body"]["error"]["type"], "InternalServerError",
            "{failed}"
        );
    }
    let (status, report, _) = post(
        &format!("{url}/finish_weight_update"),
        &json!({"weight_version": "step-3"}),
    )
    .await;
    assert_eq!(status, 502, "{report}");
    assert_eq!(
        (count(&report, "ok"), count(&report, "error")),
        (2, 1),
        "{report}"
    );
    for w in report["workers"].as_array().expect("workers") {
        if w["outcome"] == "ok" {
            assert_eq!(w["body"], json!({"message": "Weight update finished"}));
        }
    }
    let (_, workers) = get(&format!("{url}/workers")).await;
    let flagged: Vec<bool> = workers["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["weights_failed"] == true)
        .collect();
    assert_eq!(flagged.iter().filter(|f| **f).count(), 1, "{workers}");

    let before = mocks[2].generate_requests();
    for _ in 0..9 {
        let (status, body, _) = post(&format!("{url}/inference/v1/generate"), &body_gen).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        mocks[2].generate_requests(),
        before,
        "the failed worker got traffic"
    );
    let (status, info) = get(&format!("{url}/weight_info")).await;
    assert_eq!(status, 200, "{info}");
    for w in info["workers"].as_array().expect("workers") {
        let base = w["url"].as_str().unwrap_or_default();
        let expected = if base.trim_end_matches('/') == failing.trim_end_matches('/') {
            Value::Null
        } else {
            json!("step-3")
        };
        assert_eq!(w["body"]["weight_version"], expected, "{info}");
    }

    // The trainer redoes the refit once the engine is healthy: every call succeeds.
    post(
        &mocks[2].url("/_mock/config"),
        &json!({"update_weights_fail": false}),
    )
    .await;
    for (path, body) in [
        ("/start_weight_update", json!({})),
        (
            "/update_weights",
            json!({"update_info": [{"names": ["layers.0.w"]}, {"names": ["layers.1.w"]}]}),
        ),
        ("/finish_weight_update", json!({"weight_version": "step-4"})),
    ] {
        let (status, report, _) = post(&format!("{url}{path}"), &body).await;
        assert_eq!(status, 200, "{path}: {report}");
    }
    let (_, info) = get(&format!("{url}/weight_info")).await;
    for w in info["workers"].as_array().expect("workers") {
        assert_eq!(w["body"]["weight_version"], "step-4", "{info}");
    }
    for _ in 0..6 {
        post(&format!("{url}/inference/v1/generate"), &body_gen).await;
    }
    assert!(
        mocks[2].generate_requests() > before,
        "restored worker serves again"
    );
}

/// Edge cases a reviewer found: a pause that times out keeps the worker paused (the engine may
/// still pause); a mixed fleet's SGLang requests wait for the paused SGLang workers instead of
/// spilling to vLLM; a taken id or a duplicate engine is a 409; an empty `workers=` is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_pauses_stay_paused_mixed_fleets_do_not_spill_and_duplicates_conflict() {
    let sg = sglang_oracles(2);
    let vl = vllm_oracles(1);
    let argv: Vec<String> = vec![
        "--worker".into(),
        format!("sglang={}", sg[0].base_url()),
        "--worker".into(),
        format!("sglang={}", sg[1].base_url()),
        "--worker".into(),
        format!("vllm={}", vl[0].base_url()),
        "--control-timeout".into(),
        "500ms".into(),
        "--pause-wait".into(),
        "300ms".into(),
        "--health-interval".into(),
        "60s".into(),
    ];
    let (url, server, _stop) = common::genfront(&argv).await;
    assert!(server.wait_all_workers(Duration::from_secs(20)).await);

    // A hung engine: its pause times out, and the worker stays out of rotation.
    let pid = sg[1].pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let (status, report, _) = post(
        &format!("{url}/pause_generation"),
        &json!({"mode": "abort"}),
    )
    .await;
    assert!(
        std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .expect("kill")
            .success()
    );
    assert_eq!(status, 502, "{report}");
    assert_eq!(outcomes(&report), ["ok", "timeout"]);
    let (_, list) = get(&format!("{url}/workers")).await;
    let states: Vec<&str> = list["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["state"].as_str())
        .collect();
    assert_eq!(states, ["paused", "paused", "ready"], "{list}");

    // Both SGLang workers paused: SGLang requests wait and get the retryable 503, they do not
    // run on the vLLM worker.
    let (status, body, _) = post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "paused");
    let vllm_body = json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}});
    let (status, body, _) = post(&format!("{url}/inference/v1/generate"), &vllm_body).await;
    assert_eq!(status, 200, "vLLM requests still run: {body}");
    let (status, _, _) = post(&format!("{url}/continue_generation"), &json!({})).await;
    assert_eq!(status, 200);
    let (status, body, _) = post(&format!("{url}/generate"), &common::sglang_body(2, false)).await;
    assert_eq!(status, 200, "{body}");

    // Conflicts and an empty selection.
    let ids: Vec<String> = server
        .state
        .router
        .workers()
        .iter()
        .map(|w| w.id().to_string())
        .collect();
    let (status, body, _) = post(
        &format!("{url}/workers"),
        &json!({"worker": format!("sglang={}", sg[0].base_url()), "id": "fresh"}),
    )
    .await;
    assert_eq!(status, 409, "same engine twice: {body}");
    let (status, body, _) = post(
        &format!("{url}/workers"),
        &json!({"worker": "sglang=http://127.0.0.1:9", "id": ids[0]}),
    )
    .await;
    assert_eq!(status, 409, "taken id: {body}");
    let (status, _, _) = post(&format!("{url}/pause_generation?workers="), &json!({})).await;
    assert_eq!(status, 400);
}
