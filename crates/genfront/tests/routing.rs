//! The router end to end, against in-process native mock servers: start-up with a worker down,
//! what is relayed and what counts against a worker, the breaker, and the prefix policy's cache
//! hits on a GRPO workload. (`kill -9` of real `genfront mocker` processes: `worker_kill.rs`.)

mod common;

use common::{genfront, sglang_body};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn, spawn_on};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// A loopback port held without listening: connections to it are refused, and no other
/// server can take it until the socket is listened on or dropped.
fn held_port() -> (tokio::net::TcpSocket, u16) {
    let s = tokio::net::TcpSocket::new_v4().expect("socket");
    s.set_reuseaddr(true).expect("reuseaddr");
    s.bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
    let port = s.local_addr().expect("addr").port();
    (s, port)
}

async fn metrics(client: &reqwest::Client, url: &str) -> String {
    client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// The value of the series `name{labels…}` (labels given as a substring), if present.
fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_with_its_worker_down_and_serves_once_it_is_up() {
    let (held, port) = held_port();
    let (url, server, _stop) =
        genfront(&["--worker".into(), format!("sglang=http://127.0.0.1:{port}")]).await;
    let client = reqwest::Client::new();
    let ready = client
        .get(format!("{url}/ready"))
        .send()
        .await
        .expect("ready");
    assert_eq!(ready.status().as_u16(), 503);
    let ready: Value = ready.json().await.expect("json");
    assert_eq!(ready["code"], "no_available_workers");
    for stream in [false, true] {
        let t0 = Instant::now();
        let r = client
            .post(format!("{url}/generate"))
            .json(&sglang_body(4, stream))
            .send()
            .await
            .expect("answer");
        let took = t0.elapsed();
        assert_eq!(r.status().as_u16(), 503);
        assert!(took < Duration::from_millis(100), "503 took {took:?}");
        assert!(r.headers().get("retry-after").is_some());
        let v: Value = r.json().await.expect("native envelope");
        assert_eq!(v["type"], "no_available_workers", "{v}");
        assert_eq!(v["code"], 503);
    }
    let m = metrics(&client, &url).await;
    assert_eq!(
        metric(&m, "genfront_worker_state", "state=\"connecting\""),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "genfront_worker_in_flight_requests",
            "worker=\"sglang-0\""
        ),
        Some(0.0),
        "families exist before the first request"
    );

    // Bring the engine up on that port: ready without a restart.
    let listener = held.listen(1024).expect("listen on the worker's port");
    let mut a = MockServerArgs::new(Api::Sglang);
    a.zero_delay = true;
    let _engine = spawn_on(&a, listener).await.expect("mock");
    assert!(server.wait_ready(Duration::from_secs(10)).await);
    let r = client
        .get(format!("{url}/ready"))
        .send()
        .await
        .expect("ready");
    assert_eq!(r.status().as_u16(), 200);
    let r = client
        .post(format!("{url}/generate"))
        .json(&sglang_body(4, false))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()
            .get("x-genfront-worker")
            .and_then(|v| v.to_str().ok()),
        Some("sglang-0")
    );
    // Pinning: a known worker is used; an unknown id is the client's mistake (400, no retry).
    for (pin, want) in [("sglang-0", 200), ("sglang-9", 400)] {
        let r = client
            .post(format!("{url}/generate"))
            .header("x-genfront-worker", pin)
            .json(&sglang_body(2, false))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), want, "pin {pin}");
    }
    let m = metrics(&client, &url).await;
    assert!(
        metric(&m, "genfront_router_no_worker_total", "role=\"agg\"").is_some_and(|v| v >= 2.0),
        "early refusals are counted: {m}"
    );
}

async fn mock(faults: &[&str]) -> SpawnedMockServer {
    let mut a = MockServerArgs::new(Api::Sglang);
    a.zero_delay = true;
    a.faults = faults.iter().map(|f| f.parse().expect("fault")).collect();
    spawn(&a).await.expect("mock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_and_429s_are_relayed_and_leave_the_worker_in_rotation() {
    let client = reqwest::Client::new();
    for (status, fault) in [
        (400, "http-status@*:400:bad thing"),
        (429, "http-status@*:429"),
    ] {
        let m = mock(&[fault]).await;
        let (url, server, _stop) = genfront(&[
            "--worker".into(),
            format!("sglang={}", m.base_url()),
            "--breaker-failures".into(),
            "3".into(),
        ])
        .await;
        assert!(server.wait_ready(Duration::from_secs(10)).await);
        for _ in 0..10 {
            let r = client
                .post(format!("{url}/generate"))
                .json(&sglang_body(4, false))
                .send()
                .await
                .expect("answer");
            assert_eq!(r.status().as_u16(), status);
            if status == 429 {
                assert_eq!(
                    r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
                    Some(genfront_mockserver::MOCK_RETRY_AFTER),
                    "the engine's Retry-After is relayed"
                );
            }
        }
        assert_eq!(m.generate_requests(), 10, "each tried once, none retried");
        let m = metrics(&client, &url).await;
        assert_eq!(
            metric(&m, "genfront_worker_breaker_state", "worker=\"sglang-0\""),
            Some(0.0),
            "{status}: breaker stays closed"
        );
        assert_eq!(
            metric(&m, "genfront_worker_failures_total", "worker=\"sglang-0\""),
            Some(0.0)
        );
        assert!(server.is_ready(), "{status}: still in rotation");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures_open_the_breaker_and_half_open_recovers_it() {
    let client = reqwest::Client::new();
    let a = mock(&[]).await;
    let b = mock(&[]).await;
    let b_addr = b.addr;
    let (url, server, _stop) = genfront(&[
        "--worker".into(),
        format!("sglang={}", a.base_url()),
        "--worker".into(),
        format!("sglang={}", b.base_url()),
        "--policy".into(),
        "round_robin".into(),
        "--breaker-failures".into(),
        "3".into(),
        "--breaker-open".into(),
        "300ms".into(),
        // Probes would also take B out; this test is about the passive path.
        "--health-interval".into(),
        "1h".into(),
    ])
    .await;
    assert!(server.wait_ready(Duration::from_secs(10)).await);
    assert!(server.wait_all_workers(Duration::from_secs(10)).await);
    b.shutdown().await.expect("b stops");
    // Hold B's port without listening: connections are refused, and no other test's server can
    // take the port meanwhile.
    let hold = tokio::net::TcpSocket::new_v4().expect("socket");
    hold.set_reuseaddr(true).expect("reuseaddr");
    hold.bind(b_addr).expect("hold b's port");
    for _ in 0..20 {
        let r = client
            .post(format!("{url}/generate"))
            .json(&sglang_body(2, false))
            .send()
            .await
            .expect("answer");
        let status = r.status().as_u16();
        let by = r.headers().get("x-genfront-worker").cloned();
        let text = r.text().await.unwrap_or_default();
        assert_eq!(status, 200, "retried on the live worker: {text}");
        assert_eq!(
            by.as_ref().and_then(|v| v.to_str().ok()),
            Some("sglang-0"),
            "the header names the worker that answered, not the one that failed"
        );
    }
    // A stream, too, names the worker that serves it (the headers wait for the first output).
    let r = client
        .post(format!("{url}/generate"))
        .json(&sglang_body(2, true))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.headers()["x-genfront-worker"], "sglang-0");
    let _ = r.text().await;
    let text = metrics(&client, &url).await;
    assert_eq!(
        metric(
            &text,
            "genfront_worker_breaker_state",
            "worker=\"sglang-1\""
        ),
        Some(1.0),
        "open"
    );
    assert_eq!(
        metric(
            &text,
            "genfront_worker_failures_total",
            "worker=\"sglang-1\""
        ),
        Some(3.0),
        "three connect failures, then no more traffic"
    );
    assert_eq!(
        metric(
            &text,
            "genfront_worker_retries_total",
            "worker=\"sglang-1\""
        ),
        Some(3.0)
    );
    // B comes back; after the cool-down one trial closes the breaker.
    drop(hold);
    let listener = TcpListener::bind(b_addr).await.expect("rebind b");
    let mut args = MockServerArgs::new(Api::Sglang);
    args.zero_delay = true;
    let b2 = spawn_on(&args, listener).await.expect("b again");
    tokio::time::sleep(Duration::from_millis(350)).await;
    for _ in 0..10 {
        let r = client
            .post(format!("{url}/generate"))
            .json(&sglang_body(2, false))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), 200);
    }
    let text = metrics(&client, &url).await;
    assert_eq!(
        metric(
            &text,
            "genfront_worker_breaker_state",
            "worker=\"sglang-1\""
        ),
        Some(0.0),
        "closed again"
    );
    assert!(b2.generate_requests() >= 4, "B takes traffic again");
}

/// Prompt `len` tokens for group `g`: a shared 64-token system prompt, then the group's own.
fn grpo_prompt(g: u32, len: usize) -> Vec<u32> {
    let mut p: Vec<u32> = (10_000..10_064).collect();
    p.extend((0..(len - 64) as u32).map(|i| 20_000 + g * 500 + i));
    p
}

/// Cache-hit rate (cached prompt tokens / prompt tokens) of 64 groups × 8 samples sent as
/// separate requests, 4 workers, under `policy`.
async fn grpo_hit_rate(policy: &str) -> f64 {
    let client = reqwest::Client::new();
    let mut mocks = Vec::new();
    let mut argv = vec!["--policy".to_owned(), policy.to_owned()];
    for _ in 0..4 {
        let m = mock(&[]).await;
        argv.push("--worker".into());
        argv.push(format!("sglang={}", m.base_url()));
        mocks.push(m);
    }
    let (url, server, _stop) = genfront(&argv).await;
    assert!(server.wait_ready(Duration::from_secs(10)).await);
    assert!(server.wait_all_workers(Duration::from_secs(10)).await);
    let (mut cached, mut prompt) = (0u64, 0u64);
    for g in 0..64 {
        let p = grpo_prompt(g, 512);
        let answers = futures::future::join_all((0..8).map(|_| {
            client
                .post(format!("{url}/generate"))
                .json(&json!({"input_ids": p, "sampling_params": {"max_new_tokens": 2}}))
                .send()
        }))
        .await;
        for a in answers {
            let v: Value = a.expect("answer").json().await.expect("json");
            cached += v["meta_info"]["cached_tokens"]
                .as_u64()
                .expect("cached_tokens");
            prompt += v["meta_info"]["prompt_tokens"]
                .as_u64()
                .expect("prompt_tokens");
        }
    }
    cached as f64 / prompt as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_policy_hits_the_cache_on_a_grpo_workload() {
    let prefix = grpo_hit_rate("prefix").await;
    let rr = grpo_hit_rate("round_robin").await;
    println!(
        "GRPO 64 groups x 8 samples, 4 workers: cache-hit rate prefix {prefix:.3}, round_robin {rr:.3}"
    );
    // Prefix: each group's first sample misses (but for the system prompt), the other 7 hit.
    assert!(prefix > 0.8, "prefix {prefix}");
    assert!(prefix > rr + 0.2, "prefix {prefix} vs round robin {rr}");
}

/// Each policy's distribution over three native mock servers, read from `x-genfront-worker`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_distributes_as_documented_over_native_mocks() {
    let client = reqwest::Client::new();
    let mocks = [mock(&[]).await, mock(&[]).await, mock(&[]).await];
    for policy in [
        "round_robin",
        "random",
        "least_load",
        "power_of_two",
        "prefix",
        "session",
    ] {
        let mut argv = vec!["--policy".to_owned(), policy.to_owned()];
        for m in &mocks {
            argv.push("--worker".into());
            argv.push(format!("sglang={}", m.base_url()));
        }
        let (url, server, _stop) = genfront(&argv).await;
        assert!(server.wait_all_workers(Duration::from_secs(10)).await);
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        let mut per_prompt = std::collections::BTreeMap::<u32, Vec<String>>::new();
        for i in 0..60u32 {
            // 12 distinct prompts, each sent 5 times; sessions follow the prompt.
            let p = i % 12;
            let r = client
                .post(format!("{url}/generate"))
                .header("x-session-id", format!("s{p}"))
                .json(
                    &json!({"input_ids": (0..40).map(|t| p * 100 + t).collect::<Vec<u32>>(),
                               "sampling_params": {"max_new_tokens": 1}}),
                )
                .send()
                .await
                .expect("answer");
            assert_eq!(r.status().as_u16(), 200);
            let w = r.headers()["x-genfront-worker"]
                .to_str()
                .expect("ascii")
                .to_owned();
            *counts.entry(w.clone()).or_default() += 1;
            per_prompt.entry(p).or_default().push(w);
        }
        let sticky = per_prompt.values().all(|ws| ws.iter().all(|w| w == &ws[0]));
        match policy {
            "round_robin" => assert!(counts.values().all(|&n| n == 20), "{policy}: {counts:?}"),
            "random" | "power_of_two" | "least_load" => {
                assert_eq!(counts.len(), 3, "{policy} uses every worker: {counts:?}");
            }
            _ => {
                assert!(
                    sticky,
                    "{policy}: a prompt/session stays on its worker: {per_prompt:?}"
                );
                assert_eq!(counts.len(), 3, "{policy} spreads prompts: {counts:?}");
            }
        }
    }
}
