//! A worker killed (`kill -9`) mid-run, with 200 concurrent streams over two `genfront mocker`
//! processes: its streams end fast with the native error event, the rest finish, later requests
//! succeed, and a restarted worker gets traffic back. A test binary of its own, so no other test
//! competes for the two cores while it measures how fast streams end.

mod common;

use common::{genfront, sglang_body};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Child processes killed (and reaped) on drop, so a failing assertion leaves none behind.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `genfront mocker` child process on `port`.
fn mocker_process(port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_genfront"))
        .args([
            "mocker",
            "--api",
            "sglang",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            // 40 ms per token: 200 streams stay light enough for a 2-core debug build.
            "--mock-speedup",
            "0.25",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn genfront mocker")
}

async fn wait_health(client: &reqwest::Client, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await
            && r.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("mocker on {port} did not come up");
}

/// How one streaming client ended.
#[derive(Debug)]
struct StreamEnd {
    worker: String,
    ended: Instant,
    error_event: bool,
    done: bool,
    finished: bool,
    started: Instant,
    /// The last error event, if any.
    last_error: Option<Value>,
}

/// Tokens per stream in the kill test (~2.4 s at 40 ms per token).
const STREAM_TOKENS: u32 = 60;

async fn stream_once(client: reqwest::Client, url: String) -> StreamEnd {
    let started = Instant::now();
    let r = client
        .post(format!("{url}/generate"))
        .json(&sglang_body(STREAM_TOKENS, true))
        .send()
        .await
        .expect("stream starts");
    let worker = r
        .headers()
        .get("x-genfront-worker")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut body = r.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(b) => text.push_str(&String::from_utf8_lossy(&b)),
            Err(_) => break,
        }
    }
    let events = common::sse_events(&text);
    StreamEnd {
        worker,
        ended: Instant::now(),
        error_event: events.iter().any(|e| e.get("error").is_some()),
        started,
        last_error: events
            .iter()
            .rev()
            .find(|e| e.get("error").is_some())
            .cloned(),
        done: text.trim_end().ends_with("data: [DONE]"),
        finished: events.iter().any(|e| {
            e["meta_info"]["finish_reason"]["type"] == "length"
                && e["meta_info"]["completion_tokens"] == STREAM_TOKENS
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_fails_its_streams_fast_and_comes_back() {
    let client = reqwest::Client::new();
    let ports = [free_port(), free_port()];
    let mut children = Children(ports.iter().map(|p| mocker_process(*p)).collect());
    for p in ports {
        wait_health(&client, p).await;
    }
    let (url, server, _stop) = genfront(&[
        "--worker".into(),
        format!("sglang=http://127.0.0.1:{}", ports[0]),
        "--worker".into(),
        format!("sglang=http://127.0.0.1:{}", ports[1]),
        "--policy".into(),
        "round_robin".into(),
        "--health-interval".into(),
        "200ms".into(),
    ])
    .await;
    assert!(server.wait_ready(Duration::from_secs(10)).await);
    assert!(server.wait_all_workers(Duration::from_secs(10)).await);

    // 200 concurrent streams of 60 tokens (~2.4 s each).
    let tasks: Vec<_> = (0..200)
        .map(|_| tokio::spawn(stream_once(client.clone(), url.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let killed_at = Instant::now();
    children.0[0].kill().expect("kill -9");
    let _ = children.0[0].wait();
    let mut ends = Vec::new();
    for t in tasks {
        let end = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("no client hangs")
            .expect("task");
        ends.push(end);
    }
    let (on_killed, on_survivor): (Vec<_>, Vec<_>) =
        ends.iter().partition(|e| e.worker == "sglang-0");
    assert!(
        !on_killed.is_empty() && !on_survivor.is_empty(),
        "{} on the killed worker, {} on the survivor; first: {:?}",
        on_killed.len(),
        on_survivor.len(),
        ends.first()
    );
    let mut afters: Vec<_> = on_killed
        .iter()
        .map(|e| e.ended.saturating_duration_since(killed_at))
        .collect();
    afters.sort();
    println!(
        "killed worker: {} streams ended after the kill: min {:?}, median {:?}, max {:?}",
        afters.len(),
        afters[0],
        afters[afters.len() / 2],
        afters[afters.len() - 1]
    );
    for e in &on_killed {
        assert!(
            e.error_event && e.done,
            "native error event + [DONE]: {e:?}"
        );
        let code = e.last_error.as_ref().map(|v| v["error"]["code"].clone());
        assert_eq!(
            code,
            Some(json!(502)),
            "a broken upstream stream is a 502: {e:?}"
        );
        let after = e.ended.saturating_duration_since(killed_at);
        assert!(
            after < Duration::from_secs(1),
            "ended {after:?} after the kill, started {:?} before it: {e:?}",
            killed_at.saturating_duration_since(e.started)
        );
    }
    for e in &on_survivor {
        assert!(e.finished && e.done && !e.error_event, "{e:?}");
    }

    // After the kill every request succeeds (retried on, then routed to, the survivor).
    for _ in 0..20 {
        let r = client
            .post(format!("{url}/generate"))
            .json(&sglang_body(4, false))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.headers()["x-genfront-worker"], "sglang-1");
    }

    // Restart the killed worker on its port: traffic returns without a genfront restart.
    children.0[0] = mocker_process(ports[0]);
    wait_health(&client, ports[0]).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut back = false;
    while Instant::now() < deadline && !back {
        let r = client
            .post(format!("{url}/generate"))
            .json(&sglang_body(2, false))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), 200);
        back = r.headers()["x-genfront-worker"] == "sglang-0";
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "traffic returned to the restarted worker");
    drop(children);
}
