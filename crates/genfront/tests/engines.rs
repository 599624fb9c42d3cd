//! Real-engine paths on loopback: client → genfront (direct) → native mock server, and client →
//! genfront → sidecar → native mock server. Faults give the documented client-visible result,
//! and disconnects reach the engine as its native abort for the private dispatch id.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use genfront::{ServeArgs, Server};
use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

fn args(api: Api, faults: &[&str], slow: bool) -> MockServerArgs {
    let mut a = MockServerArgs::new(api);
    a.zero_delay = !slow;
    if slow {
        a.mock_speedup = 4.0;
    }
    a.faults = faults
        .iter()
        .map(|f| f.parse().expect("fault spec"))
        .collect();
    a
}

fn spec(api: Api, m: &SpawnedMockServer) -> String {
    match api {
        Api::Sglang => format!("sglang={}", m.base_url()),
        Api::Vllm => format!("vllm={}", m.base_url()),
    }
}

async fn genfront(worker: String) -> (String, CancellationToken) {
    let args = ServeArgs::parse_from(["serve", "--worker", &worker]);
    let server = Server::build(&args).await.expect("genfront");
    assert!(
        server.wait_ready(Duration::from_secs(10)).await,
        "workers connect"
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    tokio::spawn(server.serve(listener, shutdown.clone()));
    (url, shutdown)
}

async fn sidecar(worker: String) -> (String, CancellationToken) {
    let engine: Arc<dyn genfront_protocol::Engine> = worker
        .parse::<genfront::WorkerSpec>()
        .expect("spec")
        .connect()
        .await
        .expect("connect");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let uri = format!("grpc://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    tokio::spawn(genfront_sidecar::serve(engine, listener, shutdown.clone()));
    (uri, shutdown)
}

/// genfront in front of `m`, directly or through a sidecar.
async fn front(api: Api, m: &SpawnedMockServer, via_sidecar: bool) -> String {
    let worker = spec(api, m);
    let worker = if via_sidecar {
        sidecar(worker).await.0
    } else {
        worker
    };
    genfront(worker).await.0
}

fn path(api: Api) -> &'static str {
    match api {
        Api::Sglang => "/generate",
        Api::Vllm => "/inference/v1/generate",
    }
}

/// POST `body` to genfront at `url` on `api`'s generate path.
async fn post(client: &reqwest::Client, url: &str, api: Api, body: &Value) -> reqwest::Response {
    client
        .post(format!("{url}{}", path(api)))
        .json(body)
        .send()
        .await
        .expect("sent")
}

fn body(api: Api, stream: bool, tokens: u32) -> Value {
    match api {
        Api::Sglang => json!({"rid": "client-rid", "input_ids": [1, 2, 3], "stream": stream,
                              "sampling_params": {"max_new_tokens": tokens, "ignore_eos": true}}),
        Api::Vllm => json!({"request_id": "client-rid", "token_ids": [1, 2, 3], "stream": stream,
                            "sampling_params": {"max_tokens": tokens, "ignore_eos": true}}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_and_sse_through_both_paths_for_both_formats() {
    let client = reqwest::Client::new();
    for api in [Api::Sglang, Api::Vllm] {
        for via_sidecar in [false, true] {
            let m = spawn(&args(api, &[], false)).await.expect("mock");
            let url = front(api, &m, via_sidecar).await;
            let r = post(&client, &url, api, &body(api, false, 4)).await;
            assert_eq!(r.status().as_u16(), 200, "{api:?} sidecar={via_sidecar}");
            let v: Value = r.json().await.expect("json");
            let ids = match api {
                Api::Sglang => v["output_ids"].clone(),
                Api::Vllm => v["choices"][0]["token_ids"].clone(),
            };
            assert_eq!(ids.as_array().map(Vec::len), Some(4), "{v}");
            let text = post(&client, &url, api, &body(api, true, 4))
                .await
                .text()
                .await
                .expect("body");
            let evs = common::sse_events(&text);
            assert!(!evs.is_empty());
            assert!(m.wait_idle(Duration::from_secs(2)).await);
        }
    }
}

/// Each scripted fault of the native mock server gives the documented client-visible result
/// through genfront, and leaves nothing running at the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_give_the_documented_client_visible_result() {
    let client = reqwest::Client::new();
    for api in [Api::Sglang, Api::Vllm] {
        // HTTP 503 on request 1 → the engine is unavailable → 503 through genfront.
        let m = spawn(&args(api, &["http-status@1:503"], false))
            .await
            .expect("mock");
        let url = front(api, &m, false).await;
        let r = post(&client, &url, api, &body(api, false, 3)).await;
        assert_eq!(r.status().as_u16(), 503, "{api:?}");
        let r = post(&client, &url, api, &body(api, false, 3)).await;
        assert_eq!(
            r.status().as_u16(),
            200,
            "{api:?}: the next request is served"
        );

        // HTTP 400 on request 1 → invalid argument → 400 with the upstream message.
        let m = spawn(&args(api, &["http-status@1:400:upstream says no"], false))
            .await
            .expect("mock");
        let url = front(api, &m, false).await;
        let r = post(&client, &url, api, &body(api, false, 3)).await;
        assert_eq!(r.status().as_u16(), 400, "{api:?}");
        assert!(r.text().await.expect("body").contains("upstream says no"));

        // Connection dropped after 2 tokens (stream) → error event + [DONE], never a hang.
        let m = spawn(&args(api, &["drop@1:2"], false)).await.expect("mock");
        let url = front(api, &m, false).await;
        let text = post(&client, &url, api, &body(api, true, 8))
            .await
            .text()
            .await
            .expect("body");
        let evs = common::sse_events(&text);
        assert!(
            evs.last().is_some_and(|e| e.get("error").is_some()),
            "{api:?}: {text}"
        );
        assert!(
            m.wait_idle(Duration::from_secs(2)).await,
            "{api:?}: engine left running"
        );

        // Malformed frame → error event + [DONE].
        let m = spawn(&args(api, &["malformed@1:1"], false))
            .await
            .expect("mock");
        let url = front(api, &m, false).await;
        let text = post(&client, &url, api, &body(api, true, 8))
            .await
            .text()
            .await
            .expect("body");
        let evs = common::sse_events(&text);
        assert!(
            evs.last().is_some_and(|e| e.get("error").is_some()),
            "{api:?}: {text}"
        );
        assert!(m.wait_idle(Duration::from_secs(2)).await);

        // Engine error before the first token → 5xx without internals.
        let m = spawn(&args(api, &["error@1:internal:SECRET-detail"], false))
            .await
            .expect("mock");
        let url = front(api, &m, false).await;
        let r = post(&client, &url, api, &body(api, false, 3)).await;
        assert!(r.status().is_server_error(), "{api:?}");
        assert!(!r.text().await.expect("body").contains("SECRET-detail"));
    }
    // SGLang abort with a 4xx status_code → the client gets that 400 with the message.
    let m = spawn(&args(
        Api::Sglang,
        &["abort-status@1:400:input too long"],
        false,
    ))
    .await
    .expect("mock");
    let url = front(Api::Sglang, &m, false).await;
    let r = client
        .post(format!("{url}/generate"))
        .json(&body(Api::Sglang, false, 3))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["message"], "input too long");
}

/// A client that disconnects makes the native engine receive its abort for the private dispatch
/// id — directly and through a sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnects_reach_the_engine_as_native_aborts() {
    let client = reqwest::Client::new();
    for api in [Api::Sglang, Api::Vllm] {
        for via_sidecar in [false, true] {
            let m = spawn(&args(api, &[], true)).await.expect("mock");
            let url = front(api, &m, via_sidecar).await;
            let resp = post(&client, &url, api, &body(api, true, 5000)).await;
            let mut stream = resp.bytes_stream();
            let _ = stream.next().await;
            drop(stream);
            let seen = m
                .aborts()
                .wait_for(Duration::from_secs(3), |recs| {
                    recs.iter().any(|r| !r.ids().is_empty())
                })
                .await;
            assert!(
                seen,
                "{api:?} sidecar={via_sidecar}: no native abort received"
            );
            let ids: Vec<String> = m.aborts().records().iter().flat_map(|r| r.ids()).collect();
            for id in &ids {
                assert!(
                    !id.contains("client-rid"),
                    "abort must name the private dispatch id, got {id}"
                );
            }
            assert!(
                m.wait_idle(Duration::from_secs(3)).await,
                "{api:?} sidecar={via_sidecar}: engine still running"
            );
            assert!(m.engine.aborted() >= 1);
        }
    }
}
