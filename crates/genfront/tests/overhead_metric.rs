//! `genfront_frontend_overhead_seconds{format,stage}` (issue 15, part 3): the time genfront
//! itself adds to a request — `dispatch` (arrival → engine request handed to the engine client,
//! the client's body upload excluded) and `relay` (engine output in hand → encoded bytes handed
//! to the client connection) — over the embedded mocker.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::{sglang_body, sse_events, start, start_with, zero_delay};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FAMILY: &str = "genfront_frontend_overhead_seconds";

/// The value of the sample `name{…}` whose labels include every `labels` pair.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, val) = l.rsplit_once(' ')?;
        let (n, rest) = key.split_once('{').unwrap_or((key, ""));
        if n != name
            || !labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        {
            return None;
        }
        val.parse().ok()
    })
}

/// `(count, sum)` of the overhead histogram of `stage` for the SGLang format.
fn stage(text: &str, stage: &str) -> (f64, f64) {
    let l = [("format", "sglang"), ("stage", stage)];
    let count = sample(text, &format!("{FAMILY}_count"), &l)
        .unwrap_or_else(|| panic!("{stage} count missing: {text}"));
    let sum = sample(text, &format!("{FAMILY}_sum"), &l)
        .unwrap_or_else(|| panic!("{stage} sum missing: {text}"));
    (count, sum)
}

fn duration_sum(text: &str) -> f64 {
    sample(
        text,
        "genfront_request_duration_seconds_sum",
        &[("format", "sglang")],
    )
    .expect("duration sum")
}

#[tokio::test]
async fn both_stages_are_in_a_scrape_from_start_up_with_microsecond_buckets() {
    let s = start().await;
    let m = s.get_text("/metrics").await;
    for st in ["dispatch", "relay"] {
        assert_eq!(stage(&m, st), (0.0, 0.0), "{m}");
        // The first bucket is 5 µs: the stage is measured in seconds at µs resolution.
        assert!(
            m.contains(&format!(
                "{FAMILY}_bucket{{le=\"0.000005\",format=\"sglang\",stage=\"{st}\"}} 0"
            )),
            "no 5 µs bucket for {st}: {m}"
        );
    }
    assert!(m.contains(&format!("# TYPE {FAMILY} histogram")), "{m}");
}

#[tokio::test]
async fn unary_and_streaming_requests_observe_each_stage_with_small_positive_times() {
    let s = start().await;
    let before = s.get_text("/metrics").await;
    let (d0, r0, dur0) = (
        stage(&before, "dispatch"),
        stage(&before, "relay"),
        duration_sum(&before),
    );

    // Three unary requests: one dispatch and one relay observation each.
    for _ in 0..3 {
        let (st, v) = s.post_json("/generate", &sglang_body(8, false)).await;
        assert_eq!(st, 200, "{v}");
    }
    let m = s.get_text("/metrics").await;
    let (d1, r1) = (stage(&m, "dispatch"), stage(&m, "relay"));
    assert_eq!(d1.0 - d0.0, 3.0, "dispatch count: {m}");
    assert_eq!(r1.0 - r0.0, 3.0, "relay count (unary: one per answer): {m}");

    // Two streams of 16 tokens: one dispatch each, and one relay observation per body chunk
    // that carries engine outputs — at least one per stream, at most one per event sent.
    let mut events = 0usize;
    for _ in 0..2 {
        let r = s.post("/generate", &sglang_body(16, true)).await;
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.expect("body");
        let n = sse_events(&text).len();
        assert!(n >= 1, "{text}");
        events += n;
    }
    let after = s.get_text("/metrics").await;
    let (d2, r2, dur2) = (
        stage(&after, "dispatch"),
        stage(&after, "relay"),
        duration_sum(&after),
    );
    assert_eq!(d2.0 - d1.0, 2.0, "dispatch count (streams): {after}");
    let chunks = r2.0 - r1.0;
    assert!(
        (2.0..=events as f64).contains(&chunks),
        "relay observations {chunks} for 2 streams of {events} events: {after}"
    );

    // Sums: positive, plausibly small (a debug build on a busy 2-core machine: a mean under
    // 50 ms per observation), and never more than the requests' own durations.
    let dispatch = (d2.1 - d0.1, d2.0 - d0.0);
    let relay = (r2.1 - r0.1, r2.0 - r0.0);
    let total = dur2 - dur0;
    for (name, (sum, count)) in [("dispatch", dispatch), ("relay", relay)] {
        eprintln!(
            "{name}: {count} observations, mean {:.1} µs",
            sum / count * 1e6
        );
        assert!(sum > 0.0, "{name} sum {sum}: {after}");
        assert!(sum / count < 0.05, "{name} mean {} s: {after}", sum / count);
        assert!(
            sum <= total,
            "{name} sum {sum} s exceeds the requests' total duration {total} s"
        );
    }
}

#[tokio::test]
async fn a_batch_is_one_dispatch_observation_and_an_error_none() {
    let s = start().await;
    let before = s.get_text("/metrics").await;
    let (d0, r0) = (stage(&before, "dispatch"), stage(&before, "relay"));
    // A batch of three prompts: three engine requests, one request to the client.
    let (st, v) = s
        .post_json(
            "/generate",
            &json!({"input_ids": [[1, 2], [3, 4], [5, 6]],
                    "sampling_params": {"max_new_tokens": 2, "ignore_eos": true}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    // A validation error never reaches an engine: no observation in either stage.
    let (st, _) = s.post_json("/generate", &json!({"input_ids": []})).await;
    assert_eq!(st, 400);
    let m = s.get_text("/metrics").await;
    assert_eq!(stage(&m, "dispatch").0 - d0.0, 1.0, "{m}");
    assert_eq!(stage(&m, "relay").0 - r0.0, 1.0, "{m}");
}

/// A client that uploads its body slowly: the upload is the client's time, not genfront's, so
/// the dispatch stage stays far below the request's duration.
#[tokio::test]
async fn a_slow_body_upload_is_not_counted_as_frontend_overhead() {
    let s = start_with(&[], zero_delay(), 1).await;
    let before = s.get_text("/metrics").await;
    let (d0, dur0) = (stage(&before, "dispatch"), duration_sum(&before));

    let body = serde_json::to_vec(&sglang_body(4, false)).unwrap();
    let (head, tail) = body.split_at(body.len() / 2);
    let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    conn.set_nodelay(true).unwrap();
    let headers = format!(
        "POST /generate HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        s.addr,
        body.len()
    );
    conn.write_all(headers.as_bytes()).await.unwrap();
    conn.write_all(head).await.unwrap();
    conn.flush().await.unwrap();
    let pause = Duration::from_millis(400);
    tokio::time::sleep(pause).await;
    conn.write_all(tail).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer))
        .await
        .expect("answer in time")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let m = s.get_text("/metrics").await;
    let (d1, dur1) = (stage(&m, "dispatch"), duration_sum(&m));
    assert_eq!(d1.0 - d0.0, 1.0, "{m}");
    let spent = d1.1 - d0.1;
    let total = dur1 - dur0;
    assert!(
        total >= pause.as_secs_f64(),
        "the request took {total} s, the upload alone {pause:?}"
    );
    assert!(
        spent > 0.0 && spent < 0.1,
        "dispatch overhead {spent} s for a request of {total} s whose body took {pause:?} to arrive"
    );
}

/// A scripted SGLang HTTP engine (cumulative streaming, no tokenizer) answering every
/// `/generate` with two tokens: genfront's SGLang client relays its bytes (issue 15's fast
/// path), and both stages are still observed.
async fn scripted_sglang() -> String {
    use axum::routing::{get, post};
    async fn info() -> axum::Json<serde_json::Value> {
        axum::Json(json!({
            "model_path": "org/tiny", "context_length": 4096, "max_running_requests": 8,
            "incremental_streaming_output": false, "skip_tokenizer_init": true,
            "version": "0.5.0", "is_generation": true,
        }))
    }
    async fn generate(body: axum::body::Bytes) -> axum::response::Response {
        use axum::response::IntoResponse;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let rid = v["rid"].as_str().unwrap_or_default().to_owned();
        let meta = |finish: &str, n: u32| {
            format!(
                r#""meta_info":{{"id":"{rid}","finish_reason":{finish},"prompt_tokens":3,"completion_tokens":{n},"cached_tokens":0,"e2e_latency":0.001}}"#
            )
        };
        let eos = r#"{"type":"stop","matched":2}"#;
        if v["stream"] == json!(true) {
            let body = format!(
                "data: {{\"output_ids\":[5],{}}}\n\ndata: {{\"output_ids\":[5,2],{}}}\n\ndata: [DONE]\n\n",
                meta("null", 1),
                meta(eos, 2)
            );
            return ([("content-type", "text/event-stream")], body).into_response();
        }
        let body = format!(r#"{{"text":"","output_ids":[5,2],{}}}"#, meta(eos, 2));
        ([("content-type", "application/json")], body).into_response()
    }
    let app = axum::Router::new()
        .route("/get_server_info", get(info))
        .route("/server_info", get(info))
        .route("/get_model_info", get(info))
        .route("/model_info", get(info))
        .route("/health", get(|| async { "" }))
        .route("/generate", post(generate))
        .route("/abort_request", post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::test]
async fn relayed_sglang_answers_and_streams_are_observed_too() {
    let engine = scripted_sglang().await;
    let (url, server, _stop) =
        common::genfront(&["--worker".to_owned(), format!("sglang={engine}")]).await;
    assert!(server.wait_ready(Duration::from_secs(10)).await, "ready");
    let client = reqwest::Client::new();
    let scrape = || async {
        client
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let before = scrape().await;
    let (d0, r0) = (stage(&before, "dispatch"), stage(&before, "relay"));
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}});
    let r = client
        .post(format!("{url}/generate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let id = v["meta_info"]["id"].as_str().unwrap();
    // The engine's bytes, only the id edited: the relay path answered.
    assert_eq!(
        text,
        format!(
            r#"{{"text":"","output_ids":[5,2],"meta_info":{{"id":"{id}","finish_reason":{{"type":"stop","matched":2}},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"e2e_latency":0.001}}}}"#
        )
    );
    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let r = client
        .post(format!("{url}/generate"))
        .json(&stream)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let events = sse_events(&r.text().await.unwrap());
    assert_eq!(events.len(), 2);
    let m = scrape().await;
    let (d1, r1) = (stage(&m, "dispatch"), stage(&m, "relay"));
    assert_eq!(d1.0 - d0.0, 2.0, "{m}");
    let relay = r1.0 - r0.0;
    // The unary answer once, the stream once per chunk (its two frames may share one).
    assert!(
        (2.0..=3.0).contains(&relay),
        "relay observations {relay}: {m}"
    );
    assert!(d1.1 > d0.1 && r1.1 > r0.1, "{m}");
    assert!(
        (d1.1 - d0.1) / 2.0 < 0.05 && (r1.1 - r0.1) / relay < 0.05,
        "{m}"
    );
}
