//! Engine errors through genfront against the independent Python oracle
//! (`../shared/oracle/oracle_engine.py`), issues 12/13 fidelity: a client of the engine's own
//! format gets the engine's error answer **verbatim** — status, body, `Content-Type`,
//! `Retry-After` — unary and streamed, for SGLang and vLLM, exactly as the same oracle answers
//! when called directly; a mid-stream error event is the engine's own payload; a cross-format
//! client keeps genfront's typed rendering, and so does an engine refusing genfront's own
//! credentials or route (401/403/404: genfront's fault); the router still counts the outcome (4xx, 429 and
//! the backpressure 503 never count against the worker, a 500 does). And SGLang's refusal of an
//! rid already in flight (`TokenizerManager._init_req_state`, 0.5.23), per tenant with keys.

mod common;

use std::time::Duration;

use common::oracle::Oracle;
use serde_json::{Value, json};

/// genfront over one oracle of `api`, with a breaker that never opens in these tests.
struct Setup {
    api: &'static str,
    oracle: Oracle,
    url: String,
    _stop: tokio_util::sync::DropGuard,
    client: reqwest::Client,
}

async fn setup(api: &'static str, extra: &[&str]) -> Setup {
    let oracle = Oracle::start(&["--api", api]);
    let mut argv = vec![
        "--worker".to_owned(),
        format!("{api}={}", oracle.base_url()),
        "--breaker-failures".to_owned(),
        "1000".to_owned(),
    ];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    let (url, server, stop) = common::genfront(&argv).await;
    assert!(
        server.wait_ready(Duration::from_secs(10)).await,
        "genfront ready over the oracle"
    );
    Setup {
        api,
        oracle,
        url,
        _stop: stop.drop_guard(),
        client: reqwest::Client::new(),
    }
}

fn path(api: &str) -> &'static str {
    if api == "sglang" {
        "/generate"
    } else {
        "/inference/v1/generate"
    }
}

fn body(api: &str, stream: bool) -> Value {
    if api == "sglang" {
        json!({"input_ids": [5, 6, 7, 8], "stream": stream,
               "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}})
    } else {
        json!({"token_ids": [5, 6, 7, 8], "stream": stream,
               "sampling_params": {"max_tokens": 4, "ignore_eos": true}})
    }
}

/// What a client sees of an answer: status, `Content-Type`, `Retry-After`, body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    retry_after: Option<String>,
    body: String,
}

async fn call(client: &reqwest::Client, url: &str, body: &Value, key: Option<&str>) -> Answer {
    let mut req = client.post(url).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.expect("answer");
    let header = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type");
    let retry_after = header("retry-after");
    Answer {
        status: r.status().as_u16(),
        content_type,
        retry_after,
        body: r.text().await.expect("body"),
    }
}

impl Setup {
    /// Script every request of the oracle with `behaviour` (until the next call).
    async fn script(&self, behaviour: Value) {
        self.oracle.script(json!({"clear": true})).await;
        let mut s = behaviour;
        s["match"] = json!("any");
        self.oracle.script(s).await;
    }

    async fn direct(&self, body: &Value) -> Answer {
        call(&self.client, &self.oracle.url(path(self.api)), body, None).await
    }

    async fn via(&self, body: &Value) -> Answer {
        call(
            &self.client,
            &format!("{}{}", self.url, path(self.api)),
            body,
            None,
        )
        .await
    }

    async fn failures(&self) -> f64 {
        let text = self
            .client
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        let worker = format!("worker=\"{}-0\"", self.api);
        text.lines()
            .filter(|l| l.starts_with("genfront_worker_failures_total") && l.contains(&worker))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    }
}

/// Error bodies genfront's typed rendering would not reproduce (other shapes, extra keys,
/// messages it would replace by a generic text), with the status and `Retry-After`.
fn http_errors(api: &str) -> Vec<(u16, Value, Option<&'static str>)> {
    if api == "sglang" {
        vec![
            // SGLang's flat HTTPException envelope on a 400 (typed: `{"error":{"message"}}`).
            (
                400,
                json!({"object": "error", "message": "The input is too long.", "type": "BadRequest", "param": null, "code": 400}),
                None,
            ),
            (
                429,
                json!({"error": {"message": "Too many pending requests (max_queued_requests=8)."}}),
                Some("7"),
            ),
            (
                503,
                json!({"object": "error", "message": "Server is busy, retry later.", "type": "503", "param": null, "code": 503}),
                Some("3"),
            ),
        ]
    } else {
        vec![
            (
                400,
                json!({"error": {"message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "type": "BadRequestError", "param": "max_tokens", "code": 400, "extra": [1]}}),
                None,
            ),
            (
                429,
                json!({"error": {"message": "The server is at capacity.", "type": "TooManyRequests", "param": null, "code": 429}}),
                Some("11"),
            ),
            (
                503,
                json!({"error": {"message": "The engine is sleeping.", "type": "ServiceUnavailableError", "param": null, "code": 503}}),
                Some("2"),
            ),
        ]
    }
}

/// 400, 429 and 503, unary and streamed: genfront answers as the oracle does directly (a stream
/// request refused with an HTTP error gets that error, never a 200 SSE stream), and none counts
/// against the worker; a 500 is relayed as well and does count.
async fn http_errors_are_relayed_verbatim(api: &'static str) {
    let s = setup(api, &[]).await;
    for (status, err_body, retry_after) in http_errors(api) {
        let mut error = json!({"status": status, "body": err_body});
        if let Some(ra) = retry_after {
            error["headers"] = json!({"Retry-After": ra});
        }
        s.script(json!({"error": error})).await;
        for stream in [false, true] {
            let b = body(api, stream);
            let direct = s.direct(&b).await;
            let via = s.via(&b).await;
            assert_eq!(direct.status, status, "{api} direct: {direct:?}");
            assert_eq!(direct.retry_after.as_deref(), retry_after);
            assert_eq!(via, direct, "{api} {status} stream={stream}");
        }
    }
    assert_eq!(
        s.failures().await,
        0.0,
        "{api}: 4xx, 429, 503 are no failures"
    );
    let err_body = json!({"object": "error", "message": "CUDA error: an illegal memory access", "type": "500", "param": null, "code": 500});
    s.script(json!({"error": {"status": 500, "body": err_body}}))
        .await;
    let b = body(api, false);
    let direct = s.direct(&b).await;
    let via = s.via(&b).await;
    assert_eq!(via, direct, "{api} 500");
    assert!(
        s.failures().await >= 1.0,
        "{api}: a 500 counts against the worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_http_errors_are_relayed_verbatim() {
    http_errors_are_relayed_verbatim("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_http_errors_are_relayed_verbatim() {
    http_errors_are_relayed_verbatim("vllm").await;
}

/// The SSE events of a body (`data: ` payloads, `[DONE]` included), as sent.
fn events(body: &str) -> Vec<&str> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap_or(e))
        .collect()
}

/// An error event after the first event of a started stream: the engine's own payload, then
/// `[DONE]`, as the oracle sends it directly (genfront's typed event would say "Internal server
/// error" with its own keys).
async fn stream_errors_are_the_engines_events(api: &'static str) {
    let s = setup(api, &[]).await;
    let payload = if api == "sglang" {
        json!({"error": {"message": "The scheduler ran out of KV cache.", "type": "internal_error", "code": 500, "retryable": true}})
    } else {
        json!({"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.", "type": "InternalServerError", "param": null, "code": 500}})
    };
    for after in [0, 1] {
        s.script(json!({"stream_error": {"after_events": after, "body": payload}}))
            .await;
        let b = body(api, true);
        let direct = s.direct(&b).await;
        let via = s.via(&b).await;
        assert_eq!(via.status, 200);
        assert_eq!(via.status, direct.status);
        let (d, v) = (events(&direct.body), events(&via.body));
        assert_eq!(d.len(), v.len(), "{api}: {direct:?} vs {via:?}");
        assert_eq!(v.last(), Some(&"[DONE]"));
        assert_eq!(
            v[v.len() - 2],
            d[d.len() - 2],
            "{api} after {after}: the engine's event"
        );
        let sent: Value = serde_json::from_str(v[v.len() - 2]).expect("JSON event");
        assert_eq!(sent, payload);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_stream_errors_are_the_engines_events() {
    stream_errors_are_the_engines_events("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_stream_errors_are_the_engines_events() {
    stream_errors_are_the_engines_events("vllm").await;
}

/// A vLLM client served by an SGLang engine gets vLLM's typed envelope for SGLang's 429, never
/// SGLang's bytes (they are another API's), with the status and `Retry-After` kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_format_errors_stay_typed() {
    let s = setup("sglang", &[]).await;
    let sglang_body = json!({"error": {"message": "Too many pending requests."}});
    s.script(
        json!({"error": {"status": 429, "body": sglang_body, "headers": {"Retry-After": "5"}}}),
    )
    .await;
    let a = call(
        &s.client,
        &format!("{}/inference/v1/generate", s.url),
        &body("vllm", false),
        None,
    )
    .await;
    assert_eq!(a.status, 429, "{a:?}");
    assert_eq!(a.retry_after.as_deref(), Some("5"));
    let v: Value = serde_json::from_str(&a.body).expect("JSON");
    assert_ne!(v, sglang_body);
    assert_eq!(v["error"]["code"], 429, "vLLM's envelope: {v}");
    assert!(v["error"]["type"].is_string(), "{v}");
}

/// SGLang's `Duplicate request ID detected: {rid}` for an rid in flight, unary and streamed, as
/// its HTTP handler answers a `ValueError`; the refused request never reaches the engine, the
/// first keeps running. With keys, another tenant's request with that rid is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_refuses_an_rid_in_flight_per_tenant() {
    const A: &str = "tenant-a";
    const B: &str = "tenant-b";
    let s = setup("sglang", &["--api-key", A, "--api-key", B]).await;
    s.oracle.config(json!({"token_delay": 0.02})).await;
    let url = format!("{}/generate", s.url);
    let long = |stream: bool| {
        json!({"rid": "dup", "input_ids": [5, 6, 7, 8], "stream": stream,
               "sampling_params": {"max_new_tokens": 1000, "ignore_eos": true}})
    };
    let first = s
        .client
        .post(&url)
        .bearer_auth(A)
        .json(&long(true))
        .send()
        .await
        .expect("first");
    assert_eq!(first.status().as_u16(), 200);
    let unary = call(&s.client, &url, &long(false), Some(A)).await;
    assert_eq!(unary.status, 400, "{unary:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&unary.body).expect("JSON"),
        json!({"error": {"message": "Duplicate request ID detected: dup"}})
    );
    let stream = call(&s.client, &url, &long(true), Some(A)).await;
    assert_eq!(stream.status, 200);
    assert_eq!(
        stream.body,
        "data: {\"error\":{\"message\":\"Duplicate request ID detected: dup\",\"type\":\"invalid_request_error\",\"code\":400,\"retryable\":false}}\n\ndata: [DONE]\n\n"
    );
    // Tenant B's rid "dup" is another request.
    let other = s
        .client
        .post(&url)
        .bearer_auth(B)
        .json(&long(true))
        .send()
        .await
        .expect("tenant B");
    assert_eq!(other.status().as_u16(), 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = s.oracle.log().await;
    let sent = log["requests"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["path"] == "/generate").count());
    assert_eq!(sent, 2, "the refused requests never reached SGLang: {log}");
    drop(first);
    drop(other);
}

/// An engine refusing genfront's own credentials (401/403) or a server without the route (a
/// 404 without the engine's envelope) is genfront's fault, not the client's request: those stay
/// typed (a 500 in the native envelope), never relayed as the client's own 401/404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genfronts_own_faults_stay_typed() {
    for api in ["sglang", "vllm"] {
        let s = setup(api, &[]).await;
        for (status, err_body) in [
            (401, json!({"error": "Unauthorized"})),
            (403, json!({"error": "Forbidden"})),
            (404, json!({"detail": "Not Found"})),
        ] {
            s.script(json!({"error": {"status": status, "body": err_body}}))
                .await;
            for stream in [false, true] {
                let a = s.via(&body(api, stream)).await;
                assert_ne!(a.status, status, "{api} {status}: {a:?}");
                assert!(
                    !a.body.contains("Unauthorized")
                        && !a.body.contains("Forbidden")
                        && !a.body.contains("Not Found"),
                    "{api} {status}: {a:?}"
                );
            }
        }
    }
}
