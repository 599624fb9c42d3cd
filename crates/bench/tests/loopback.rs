//! `run()` against an in-process axum server on 127.0.0.1:0 that mimics both native routes,
//! plus scripted faults on other paths. Counts and classifications only; no timing assertions.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::Parser;
use genfront_bench::{BenchArgs, ErrorKind, LoadMode, Report};
use serde_json::{Value, json};

const PROMPT_LEN: usize = 8;
const TOKENS: u64 = 4;

#[derive(Default)]
struct Seen {
    requests: AtomicU64,
}

type Shared = Arc<Seen>;

fn sse(events: Vec<String>) -> Response {
    let chunks = events
        .into_iter()
        .map(|e| Ok::<_, std::convert::Infallible>(format!("data: {e}\n\n")));
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(futures::stream::iter(chunks)),
    )
        .into_response()
}

fn bad(msg: &str) -> Response {
    let body = json!({"error": {"message": msg}});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// SGLang `/generate`: cumulative streaming (the server default), `meta_info` on every frame.
async fn sglang(State(seen): State<Shared>, Json(req): Json<Value>) -> Response {
    seen.requests.fetch_add(1, Ordering::Relaxed);
    let ids = req["input_ids"].as_array().map_or(0, Vec::len);
    let sp = &req["sampling_params"];
    if ids != PROMPT_LEN || sp["ignore_eos"] != json!(true) {
        return bad("unexpected request");
    }
    let Some(n) = sp["max_new_tokens"].as_u64() else {
        return bad("no max_new_tokens");
    };
    let frame = |k: u64| {
        let finish = if k == n {
            json!({"type": "length", "length": n})
        } else {
            Value::Null
        };
        json!({
            "text": "x".repeat(k as usize),
            "output_ids": (0..k).map(|i| 100 + i).collect::<Vec<_>>(),
            "meta_info": {"id": "r", "finish_reason": finish, "prompt_tokens": ids,
                          "completion_tokens": k, "cached_tokens": 0},
        })
    };
    if req["stream"] == json!(true) {
        let mut ev: Vec<String> = (1..=n).map(|k| frame(k).to_string()).collect();
        ev.push("[DONE]".into());
        sse(ev)
    } else {
        Json(frame(n)).into_response()
    }
}

/// vLLM `/inference/v1/generate`: one delta token per chunk.
async fn vllm(State(seen): State<Shared>, Json(req): Json<Value>) -> Response {
    seen.requests.fetch_add(1, Ordering::Relaxed);
    let ids = req["token_ids"].as_array().map_or(0, Vec::len);
    let sp = &req["sampling_params"];
    if ids != PROMPT_LEN || sp["ignore_eos"] != json!(true) {
        return bad("unexpected request");
    }
    let Some(n) = sp["max_tokens"].as_u64() else {
        return bad("no max_tokens");
    };
    if req["stream"] == json!(true) {
        let mut ev: Vec<String> = (0..n)
            .map(|k| {
                let finish = if k + 1 == n {
                    json!("length")
                } else {
                    Value::Null
                };
                json!({"request_id": "generate-tokens-r", "output_mode": "tokens", "usage": null,
                       "choices": [{"index": 0, "finish_reason": finish, "stop_reason": null,
                                    "token_ids": [200 + k], "routed_experts": null}]})
                .to_string()
            })
            .collect();
        ev.push("[DONE]".into());
        sse(ev)
    } else {
        Json(json!({
            "request_id": "generate-tokens-r", "model": "m", "created": 0, "output_mode": "tokens",
            "choices": [{"index": 0, "finish_reason": "length", "stop_reason": null,
                         "token_ids": (0..n).collect::<Vec<_>>(), "routed_experts": null}],
            "usage": {"prompt_tokens": ids, "completion_tokens": n, "total_tokens": ids as u64 + n},
        }))
        .into_response()
    }
}

async fn fail500() -> Response {
    let body = json!({"error": {"message": "boom", "type": "InternalServerError", "param": null, "code": 500}});
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
}

/// Two SGLang frames, then the body ends without `[DONE]`.
async fn drop_stream() -> Response {
    sse(vec![
        json!({"output_ids": [1], "meta_info": {"completion_tokens": 1, "finish_reason": null}})
            .to_string(),
        json!({"output_ids": [1, 2], "meta_info": {"completion_tokens": 2, "finish_reason": null}})
            .to_string(),
    ])
}

async fn error_event() -> Response {
    sse(vec![
        json!({"error": {"message": "too long", "type": "invalid_request_error", "code": 400, "retryable": false}})
            .to_string(),
        "[DONE]".into(),
    ])
}

async fn abort_unary() -> Response {
    Json(json!({"text": "", "output_ids": [], "meta_info": {"id": "r", "completion_tokens": 0,
        "finish_reason": {"type": "abort", "message": "Aborted", "status_code": null, "err_type": null}}}))
    .into_response()
}

async fn not_json() -> Response {
    "<html>nope</html>".into_response()
}

async fn hang() -> Response {
    futures::future::pending::<()>().await;
    StatusCode::OK.into_response()
}

async fn serve() -> (String, Shared) {
    let seen = Shared::default();
    let app = Router::new()
        .route("/generate", post(sglang))
        .route("/inference/v1/generate", post(vllm))
        .route("/fail500", post(fail500))
        .route("/drop", post(drop_stream))
        .route("/error_event", post(error_event))
        .route("/abort", post(abort_unary))
        .route("/not_json", post(not_json))
        .route("/hang", post(hang))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn args(url: &str, extra: &[&str]) -> BenchArgs {
    let prompt_len = PROMPT_LEN.to_string();
    let tokens = TOKENS.to_string();
    let mut argv = vec![
        "bench",
        "--url",
        url,
        "--no-progress",
        "--prompt-len",
        &prompt_len,
        "--max-new-tokens",
        &tokens,
    ];
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).unwrap().bench
}

fn assert_clean(r: &Report, requests: u64) {
    assert!(r.errors.is_empty(), "errors: {:?}", r.errors);
    assert_eq!((r.requests, r.ok), (requests, requests));
    assert_eq!(r.output_tokens, requests * TOKENS);
    let lat = r.latency.expect("latency percentiles");
    assert_eq!(lat.count, requests);
    assert!(lat.p50_us <= lat.p90_us && lat.p90_us <= lat.p99_us && lat.p99_us <= lat.max_us);
    assert!(r.requests_per_s > 0.0 && r.output_tokens_per_s > 0.0);
}

fn only_error(r: &Report, kind: ErrorKind, n: u64) {
    assert_eq!(r.errors.get(&kind), Some(&n), "errors: {:?}", r.errors);
    assert_eq!((r.requests, r.ok, r.error_count()), (n, 0, n));
    assert!(r.latency.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_unary_and_stream_both_formats() {
    let (url, seen) = serve().await;
    let pid = std::process::id().to_string();
    let json_path = std::env::temp_dir().join(format!("genfront-bench-{pid}.json"));
    let json_arg = json_path.to_str().unwrap();

    let a = args(
        &url,
        &[
            "--format",
            "sglang",
            "--requests",
            "12",
            "--concurrency",
            "3",
            "--warmup",
            "2",
        ],
    );
    let r = genfront_bench::run(&a).await.unwrap();
    assert_clean(&r, 12);
    assert!(r.ttft.is_none() && r.itl.is_none());
    assert_eq!(r.config.mode, LoadMode::Closed { concurrency: 3 });
    assert_eq!(r.config.distinct_prompts, 14);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 14);

    let a = args(
        &url,
        &[
            "--format",
            "sglang",
            "--stream",
            "--logprobs",
            "2",
            "--requests",
            "12",
            "--concurrency",
            "4",
            "--pid",
            &pid,
            "--json",
            json_arg,
        ],
    );
    let r = genfront_bench::run(&a).await.unwrap();
    genfront_bench::print_table(&r);
    assert_clean(&r, 12);
    assert_eq!(r.ttft.expect("ttft").count, 12);
    // Cumulative frames of one token each: every token after the first is one ITL sample.
    assert_eq!(r.itl.expect("itl").count, 12 * (TOKENS - 1));
    let p = &r.processes[0];
    assert_eq!(p.pid, std::process::id());
    assert!(p.error.is_none(), "{p:?}");
    assert!(
        p.cpu_s.is_some() && p.cpu_us_per_request.is_some() && p.cpu_us_per_output_token.is_some()
    );
    assert!(p.rss_peak_bytes.unwrap() > 0 && p.vm_hwm_bytes.unwrap() > 0);
    let written: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    std::fs::remove_file(&json_path).unwrap();
    assert_eq!(written["ok"], json!(12));
    assert_eq!(written["processes"][0]["pid"], json!(std::process::id()));

    let a = args(
        &url,
        &["--format", "vllm", "--requests", "10", "--concurrency", "2"],
    );
    assert_clean(&genfront_bench::run(&a).await.unwrap(), 10);

    let a = args(
        &url,
        &[
            "--format",
            "vllm",
            "--stream",
            "--requests",
            "10",
            "--shared-prefix",
        ],
    );
    let r = genfront_bench::run(&a).await.unwrap();
    assert_clean(&r, 10);
    assert_eq!(r.config.distinct_prompts, 1);
    assert_eq!(r.itl.expect("itl").count, 10 * (TOKENS - 1));

    let a = args(
        &url,
        &[
            "--format",
            "vllm",
            "--duration",
            "100ms",
            "--concurrency",
            "2",
            "--warmup",
            "0",
        ],
    );
    let r = genfront_bench::run(&a).await.unwrap();
    assert!(r.requests > 0);
    assert_clean(&r, r.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_counts_and_duration() {
    let (url, _) = serve().await;
    let a = args(
        &url,
        &[
            "--format",
            "vllm",
            "--stream",
            "--rate",
            "400",
            "--requests",
            "10",
        ],
    );
    let r = genfront_bench::run(&a).await.unwrap();
    genfront_bench::print_table(&r);
    assert_clean(&r, 10);
    assert!(matches!(r.config.mode, LoadMode::Open { rate, .. } if rate == 400.0));
    assert_eq!(r.ttft.expect("ttft").count, 10);

    let a = args(
        &url,
        &[
            "--format",
            "sglang",
            "--rate",
            "400",
            "--arrival",
            "fixed",
            "--requests",
            "8",
        ],
    );
    assert_clean(&genfront_bench::run(&a).await.unwrap(), 8);

    // The number started is set by the schedule (every 20 ms for 100 ms), not by the clock.
    let a = args(
        &url,
        &[
            "--format",
            "sglang",
            "--rate",
            "50",
            "--arrival",
            "fixed",
            "--duration",
            "100ms",
        ],
    );
    let r = genfront_bench::run(&a).await.unwrap();
    assert!((5..=6).contains(&r.requests), "{}", r.requests);
    assert_clean(&r, r.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_classified() {
    let (url, _) = serve().await;
    let run = |extra: &'static [&'static str]| {
        let mut all = vec!["--requests", "5", "--warmup", "0", "--concurrency", "2"];
        all.extend_from_slice(extra);
        let a = args(&url, &all);
        async move { genfront_bench::run(&a).await.unwrap() }
    };
    only_error(
        &run(&["--format", "vllm", "--path", "/fail500"]).await,
        ErrorKind::Http5xx,
        5,
    );
    only_error(
        &run(&["--format", "vllm", "--path", "/fail500", "--stream"]).await,
        ErrorKind::Http5xx,
        5,
    );
    only_error(
        &run(&["--format", "sglang", "--path", "/drop", "--stream"]).await,
        ErrorKind::Incomplete,
        5,
    );
    only_error(
        &run(&["--format", "sglang", "--path", "/error_event", "--stream"]).await,
        ErrorKind::ErrorEvent,
        5,
    );
    only_error(
        &run(&["--format", "sglang", "--path", "/abort"]).await,
        ErrorKind::Aborted,
        5,
    );
    only_error(
        &run(&["--format", "vllm", "--path", "/not_json"]).await,
        ErrorKind::InvalidResponse,
        5,
    );
    only_error(
        &run(&["--format", "vllm", "--path", "/nowhere"]).await,
        ErrorKind::Http4xx,
        5,
    );
    only_error(
        &run(&["--format", "vllm", "--path", "/hang", "--timeout", "50ms"]).await,
        ErrorKind::Timeout,
        5,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures() {
    // A port that was just free: bound, read, released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let a = args(
        &url,
        &["--format", "sglang", "--requests", "3", "--warmup", "0"],
    );
    only_error(
        &genfront_bench::run(&a).await.unwrap(),
        ErrorKind::Connect,
        3,
    );
    let a = args(
        &url,
        &["--format", "sglang", "--requests", "3", "--warmup", "2"],
    );
    let e = genfront_bench::run(&a).await.unwrap_err();
    assert!(e.to_string().contains("cannot connect"), "{e:#}");
}
