//! Hardening: genfront attacked as a hostile client. Every limit and timeout of the serving loop,
//! the handler and the engine side, with small values set by flags: idle and slowloris
//! connections are closed, slow bodies hold no concurrency permit, a client that stops reading
//! loses its stream (and the engine work is aborted), a hung engine is timed out and leaves
//! rotation, the strict-HTTP rules answer JSON, and a second signal ends a draining server.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::oracle::Oracle;
use common::{TestServer, sglang_body, start_with, zero_delay};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read until EOF (or an error), at most `limit`; returns the bytes and whether the peer closed.
async fn read_to_close(tcp: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, false),
        }
    }
}

/// Send `request` on a fresh connection and return the whole answer (the server closes the
/// connection: every request here ends with `Connection: close` or is refused).
async fn raw(server: &TestServer, request: &[u8]) -> String {
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(request).await.expect("write");
    let (bytes, _) = read_to_close(&mut tcp, Duration::from_secs(10)).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The status and JSON body of a raw HTTP/1.1 answer.
fn parse_answer(answer: &str) -> (u16, Value) {
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("body not JSON ({e}): {answer:?}"));
    (status, json)
}

fn hits(server: &TestServer, limit: &str) -> u64 {
    server.state.metrics.limits().hits(limit)
}

/// A canary SGLang request must succeed within `within`. Each canary opens its own connection:
/// a pooled keep-alive connection can be closed by the server's idle timeout (which these tests
/// set to 1 s) just as the client reuses it, a race every HTTP client has with any idle timeout.
async fn canary(server: &TestServer, within: Duration) {
    let t = Instant::now();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let resp = tokio::time::timeout(
        within,
        client
            .post(server.url("/generate"))
            .json(&sglang_body(2, false))
            .send(),
    )
    .await
    .expect("canary answered in time")
    .expect("canary sent");
    assert_eq!(resp.status(), 200, "canary after {:?}", t.elapsed());
}

#[tokio::test]
async fn idle_connections_are_closed_by_the_header_timeout_while_a_canary_gets_through() {
    let server = start_with(&["--header-read-timeout", "1s"], zero_delay(), 1).await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // A half-sent head (slowloris) is closed on the same clock, trickling or not.
    let mut slow = TcpStream::connect(server.addr).await.expect("connect");
    slow.write_all(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    canary(&server, Duration::from_millis(500)).await;
    let t = Instant::now();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = slow.write_all(b"X-Slow: 1\r\n").await;
    }
    let (bytes, closed) = read_to_close(&mut slow, Duration::from_secs(3)).await;
    assert!(closed, "a slowloris head must be closed");
    assert!(bytes.is_empty(), "closed without an answer: {bytes:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    for tcp in &mut idle {
        let (_, closed) = read_to_close(tcp, Duration::from_secs(3)).await;
        assert!(
            closed,
            "an idle connection must be closed by the header timeout"
        );
    }
    assert!(hits(&server, "header_read_timeout") >= 201);
    canary(&server, Duration::from_millis(500)).await;
    server.shutdown.cancel();
}

#[tokio::test]
async fn the_connection_cap_queues_new_connections_and_counts_the_hit() {
    let server = start_with(
        &["--max-connections", "8", "--header-read-timeout", "1s"],
        zero_delay(),
        1,
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // Give the accept loop time to take all 8.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    // The canary waits in the accept queue until the idle connections time out, then is served.
    canary(&server, Duration::from_secs(4)).await;
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "served while 8 idle connections held the cap: {:?}",
        t.elapsed()
    );
    assert!(hits(&server, "max_connections") >= 1);
    let metrics = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("genfront_limit_hits_total{limit=\"max_connections\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("genfront_connections_open"), "{metrics}");
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_slow_body_times_out_with_408_and_holds_no_permit() {
    let server = start_with(
        &[
            "--max-concurrent-requests",
            "1",
            "--body-read-timeout",
            "1500ms",
        ],
        zero_delay(),
        1,
    )
    .await;
    let mut slow = TcpStream::connect(server.addr).await.expect("connect");
    slow.write_all(
        b"POST /inference/v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .await
    .expect("write");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The only permit is free while the slow body trickles in.
    canary(&server, Duration::from_millis(500)).await;
    let t = Instant::now();
    for _ in 0..3 {
        let _ = slow.write_all(b" ").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (bytes, _) = read_to_close(&mut slow, Duration::from_secs(5)).await;
    let answer = String::from_utf8_lossy(&bytes).into_owned();
    let (status, body) = parse_answer(&answer);
    assert_eq!(status, 408, "{answer}");
    // vLLM's envelope, naming the flag.
    assert_eq!(body["error"]["code"], 408, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--body-read-timeout"), "{body}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(hits(&server, "body_read_timeout"), 1);
    canary(&server, Duration::from_millis(500)).await;
    server.shutdown.cancel();
}

#[tokio::test]
async fn strict_http_answers_json_in_the_native_envelope() {
    let server = start_with(&["--body-limit", "1KiB"], zero_delay(), 1).await;
    // HTTP/1.1 without Host.
    let (status, body) = parse_answer(
        &raw(
            &server,
            b"POST /generate HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await,
    );
    assert_eq!(status, 400);
    assert!(
        body["detail"].as_str().unwrap_or_default().contains("Host"),
        "{body}"
    );
    // HTTP/1.0 needs no Host.
    let answer = raw(&server, b"GET /health HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");

    // text/plain on a generate route: the engines' own 400s (the format decides; see
    // tests/content_type.rs), not a 415.
    let (status, body) = parse_answer(
        &raw(
            &server,
            b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await,
    );
    assert_eq!(status, 400);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("'dataclass_type'"),
        "{body}"
    );
    let (status, body) = parse_answer(
        &raw(
            &server,
            b"POST /inference/v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await,
    );
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Unsupported Media Type"),
        "{body}"
    );
    // `application/json; charset=utf-8` and `application/vnd.x+json` are JSON.
    let resp = server
        .client
        .post(server.url("/generate"))
        .header("content-type", "application/json; charset=utf-8")
        .body(sglang_body(1, false).to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    // The abort route too.
    let (status, _) = parse_answer(
        &raw(
            &server,
            b"POST /abort_request HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await,
    );
    assert_eq!(status, 415);

    // gzip → 415 naming the coding.
    let (status, body) = parse_answer(
        &raw(
            &server,
            b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await,
    );
    assert_eq!(status, 415);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("gzip"),
        "{body}"
    );

    // An oversized Content-Length with Expect: 100-continue: 413 at once, no `100 Continue`,
    // and no body byte is ever sent.
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(
        b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 1000000000\r\n\r\n",
    )
    .await
    .expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut buf))
        .await
        .expect("answered without the body")
        .expect("read");
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains("--body-limit"), "{answer}");
    // Without Expect too.
    let (status, _) = parse_answer(
        &raw(
            &server,
            b"POST /inference/v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n",
        )
        .await,
    );
    assert_eq!(status, 413);

    // A head over --max-header-bytes (64 KiB default) → 431 with a JSON body.
    let mut big = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 70_000));
    big.extend_from_slice(b"\r\n\r\n");
    let (status, body) = parse_answer(&raw(&server, &big).await);
    assert_eq!(status, 431);
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("--max-header-bytes"),
        "{body}"
    );

    for limit in [
        "host_required",
        "content_type",
        "content_encoding",
        "body_limit",
        "max_header_bytes",
    ] {
        assert!(hits(&server, limit) >= 1, "{limit}");
    }
    server.shutdown.cancel();
}

#[tokio::test]
async fn http2_prior_knowledge_is_served_without_a_host_header() {
    let server = start_with(&["--header-read-timeout", "1s"], zero_delay(), 1).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let resp = h2
        .post(server.url("/generate"))
        .json(&sglang_body(2, false))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    // The idle connection is closed by the idle timeout (GOAWAY); the client opens a new one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(hits(&server, "idle_timeout") >= 1);
    let resp = h2
        .post(server.url("/generate"))
        .json(&sglang_body(2, false))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    server.shutdown.cancel();
}

/// The frame types of an HTTP/2 byte stream from the server (9-byte headers, then payloads).
fn h2_frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let len =
            (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
        types.push(bytes[3]);
        bytes = bytes.get(9 + len..).unwrap_or_default();
    }
    types
}

/// HTTP/2 has an idle timeout too (`--header-read-timeout`, the keep-alive idle timeout of both
/// protocols): a connection that sent the preface and no stream gets a `GOAWAY` and is closed
/// once it has been idle that long (not before; a peer that does not finish the shutdown is
/// dropped one timeout later), counted as `idle_timeout`; a connection whose
/// stream lasts longer than the timeout is not cut, and is closed once idle after it.
#[tokio::test]
async fn idle_http2_connections_are_closed_after_the_idle_timeout_but_busy_ones_are_not() {
    let mut cfg = zero_delay();
    cfg.inter_token_latency = Duration::from_millis(1);
    let server = start_with(&["--header-read-timeout", "1s"], cfg, 1).await;
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    let t = Instant::now();
    // The client preface and an empty SETTINGS frame.
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    tcp.write_all(&hello).await.expect("write");
    // This peer never answers the server's SETTINGS or shutdown ping, so after the GOAWAY it
    // gets one more timeout before the connection is dropped.
    let (bytes, closed) = read_to_close(&mut tcp, Duration::from_secs(6)).await;
    let elapsed = t.elapsed();
    assert!(closed, "an idle HTTP/2 connection must be closed");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "closed after the idle timeout: {elapsed:?}"
    );
    let types = h2_frame_types(&bytes);
    assert!(
        types.contains(&7),
        "a GOAWAY before the close: frame types {types:?}"
    );
    assert_eq!(hits(&server, "idle_timeout"), 1);

    // A stream open past the timeout (3,000 tokens at 1 ms each) keeps its connection.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let t = Instant::now();
    let resp = h2
        .post(server.url("/generate"))
        .json(&json!({"input_ids": [1, 2, 3], "stream": true,
                      "sampling_params": {"max_new_tokens": 3000, "ignore_eos": true}}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let text = resp.text().await.expect("the whole stream");
    assert!(
        t.elapsed() > Duration::from_millis(1200),
        "{:?}",
        t.elapsed()
    );
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the stream ended normally"
    );
    assert_eq!(hits(&server, "idle_timeout"), 1, "not cut while busy");
    // Idle afterwards: closed.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(hits(&server, "idle_timeout"), 2);
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_client_that_stops_reading_loses_its_stream_and_the_engine_work_is_aborted() {
    let server = start_with(&["--write-timeout", "1s"], zero_delay(), 1).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut tcp = socket.connect(server.addr).await.expect("connect");
    // Cumulative SGLang streaming: every event repeats all output so far, so a few thousand
    // tokens fill any socket buffer.
    let body = sglang_body(20_000, true).to_string();
    let head = format!(
        "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    // Never read. The engine request starts, then the writes stall and time out.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut started = false;
    loop {
        let running = server.running();
        started |= running > 0 || server.aborted() > 0;
        if started && running == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the engine request still runs {running}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(hits(&server, "write_timeout") >= 1);
    assert!(server.aborted() >= 1, "the engine request was aborted");
    drop(tcp);
    server.shutdown.cancel();
}

/// genfront over one oracle SGLang worker with 1 s engine timeouts and a breaker that opens on
/// the first failure.
async fn over_oracle(
    oracle: &Oracle,
) -> (
    String,
    genfront::Server,
    tokio_util::sync::CancellationToken,
) {
    let argv: Vec<String> = [
        "--worker",
        &format!("sglang={}", oracle.base_url()),
        "--engine-first-byte-timeout",
        "1s",
        "--engine-idle-timeout",
        "1s",
        "--breaker-failures",
        "1",
        "--breaker-open",
        "60s",
        "--retry-max",
        "0",
        "--health-interval",
        "60s",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let (url, server, shutdown) = common::genfront(&argv).await;
    assert!(
        server.wait_all_workers(Duration::from_secs(20)).await,
        "worker connects"
    );
    (url, server, shutdown)
}

#[tokio::test]
async fn a_hung_engine_is_timed_out_with_504_and_leaves_rotation() {
    let oracle = Oracle::start(&["--api", "sglang"]);
    let (url, server, shutdown) = over_oracle(&oracle).await;
    let client = reqwest::Client::new();
    oracle.script(json!({"match": "any", "hold": true})).await;
    let t = Instant::now();
    let resp = client
        .post(format!("{url}/generate"))
        .json(&sglang_body(4, false))
        .send()
        .await
        .expect("send");
    let elapsed = t.elapsed();
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(
        (body["object"].clone(), body["code"].clone()),
        (json!("error"), json!(504)),
        "{body}"
    );
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    assert_eq!(
        server
            .state
            .metrics
            .limits()
            .hits("engine_first_byte_timeout"),
        1
    );
    // The engine request was ended (the oracle saw the disconnect or an abort).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = oracle.log().await;
        if log["running"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running on the oracle: {}",
            log["running"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The worker left rotation: its breaker is open, so genfront is not ready and refuses at once.
    assert!(!server.is_ready(), "a timed-out worker must leave rotation");
    let resp = client
        .post(format!("{url}/generate"))
        .json(&sglang_body(4, false))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["type"], "no_available_workers", "{body}");
    shutdown.cancel();
}

#[tokio::test]
async fn a_stream_that_goes_silent_is_ended_by_the_idle_timeout() {
    let oracle = Oracle::start(&["--api", "sglang"]);
    let (url, server, shutdown) = over_oracle(&oracle).await;
    oracle
        .script(json!({"match": "any", "first_token_delay": 0, "token_delay": 30}))
        .await;
    let t = Instant::now();
    let text = reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(&sglang_body(4, true))
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("body");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let events = common::sse_events(&text);
    assert!(events.len() >= 2, "{text}");
    let last = events.last().cloned().unwrap_or_default();
    assert!(
        last.to_string().contains("504") || last.to_string().contains("timeout"),
        "the stream ends with the timeout error: {text}"
    );
    assert_eq!(server.state.metrics.limits().hits("engine_idle_timeout"), 1);
    assert!(!server.is_ready(), "a timed-out worker must leave rotation");
    shutdown.cancel();
}

#[test]
fn a_second_signal_exits_a_draining_server_at_once() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_genfront"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--mock",
            "1",
            "--shutdown-grace",
            "60s",
        ])
        .env("RUST_LOG", "info")
        // The log goes to stdout.
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn genfront");
    let stderr = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let port = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("genfront logs its address");
        if let Some(rest) = line.split("address=127.0.0.1:").nth(1) {
            break rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .expect("port");
        }
    };
    // A stuck client: a long stream (default mock delays) that it never reads.
    let mut stuck = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let body = sglang_body(20_000, true).to_string();
    std::io::Write::write_all(
        &mut stuck,
        format!(
            "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .expect("write");
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    let kill = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig}");
    };
    kill("-TERM");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the first signal drains (grace 60 s) instead of exiting"
    );
    let t = Instant::now();
    kill("-TERM");
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if t.elapsed() > Duration::from_secs(3) {
            let _ = child.kill();
            panic!("a second SIGTERM must exit at once");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(143), "{status:?}");
    drop(stuck);
}

#[test]
fn a_start_up_connect_error_names_its_cause_first() {
    // Port 1 on loopback: nothing listens, the connect is refused at once.
    let out = Command::new(env!("CARGO_BIN_EXE_genfront"))
        .args([
            "sidecar",
            "--engine",
            "sglang=http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "off")
        .output()
        .expect("run genfront sidecar");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not be reached (connection refused)"),
        "{err}"
    );
}
