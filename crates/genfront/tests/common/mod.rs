//! Shared helpers for the end-to-end tests: a genfront server on an ephemeral loopback port over
//! in-process mock engines the test keeps handles to.

#![allow(dead_code, missing_docs)]

pub mod oracle;
pub mod random;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use genfront::{CATALOG, ServeArgs, Server};
use genfront_format::resolve_routes;
use genfront_frontend::AppState;
use genfront_mocker::{MockConfig, MockEngine};
use genfront_protocol::Engine;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct TestServer {
    pub addr: SocketAddr,
    pub engines: Vec<Arc<MockEngine>>,
    pub state: Arc<AppState>,
    pub shutdown: CancellationToken,
    pub handle: JoinHandle<anyhow::Result<()>>,
    pub client: reqwest::Client,
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.post(path, body).await;
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        (status, v)
    }

    pub async fn get_json(&self, path: &str) -> Value {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("json")
    }

    pub async fn get_text(&self, path: &str) -> String {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("sent")
            .text()
            .await
            .expect("text")
    }

    pub fn running(&self) -> u64 {
        self.engines.iter().map(|e| e.running()).sum()
    }

    pub fn aborted(&self) -> u64 {
        self.engines.iter().map(|e| e.aborted()).sum()
    }

    /// Wait (up to `limit`) until no engine request is running.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self.running() == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.running() == 0
    }
}

pub fn zero_delay() -> MockConfig {
    MockConfig::zero_delay()
}

/// Start genfront with `argv` flags (after `serve`) over `engines` mock engines built from `cfg`.
pub async fn start_with(argv: &[&str], cfg: MockConfig, engines: usize) -> TestServer {
    let mut full = vec!["serve"];
    full.extend_from_slice(argv);
    let args = ServeArgs::parse_from(full);
    let routes = resolve_routes(&CATALOG, &args.route_config()).expect("routes");
    let mocks: Vec<Arc<MockEngine>> = (0..engines)
        .map(|_| Arc::new(MockEngine::new(cfg.clone()).expect("mock config")))
        .collect();
    let dyn_engines: Vec<Arc<dyn Engine>> =
        mocks.iter().map(|m| m.clone() as Arc<dyn Engine>).collect();
    let server = Server::with_engines(&args, routes, dyn_engines).expect("server");
    let state = server.state.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(server.serve(listener, shutdown.clone()));
    TestServer {
        addr,
        engines: mocks,
        state,
        shutdown,
        handle,
        client: reqwest::Client::new(),
    }
}

pub async fn start() -> TestServer {
    start_with(&[], zero_delay(), 2).await
}

/// `../shared/fixtures/<rel>` from the repository root.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures")
        .join(rel)
}

pub fn jsonl(rel: &str) -> Vec<Value> {
    let path = fixture(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("fixture line is JSON"))
        .collect()
}

/// Split an SSE body into its `data:` payloads (without the `[DONE]` sentinel), asserting the
/// framing: every event is `data: <payload>\n\n` and the body ends with `data: [DONE]\n\n`.
pub fn sse_events(body: &str) -> Vec<Value> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "stream must end with [DONE]: {body:?}"
    );
    let mut out = Vec::new();
    for ev in body.split("\n\n").filter(|e| !e.is_empty()) {
        let payload = ev
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("bad event {ev:?}"));
        if payload == "[DONE]" {
            continue;
        }
        out.push(
            serde_json::from_str(payload).unwrap_or_else(|e| panic!("bad JSON {e}: {payload}")),
        );
    }
    out
}

/// genfront with `argv` (after `serve`), serving on an ephemeral port; not waiting for workers.
/// Returns its URL, the server (for readiness checks and its state) and its shutdown token.
pub async fn genfront(argv: &[String]) -> (String, Server, CancellationToken) {
    let mut full = vec!["serve".to_owned()];
    full.extend(argv.iter().cloned());
    let args = ServeArgs::parse_from(full);
    let server = Server::build(&args).await.expect("genfront builds");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    // Serve a second handle on the same state, keep `server` for readiness checks.
    let serving = Server {
        state: server.state.clone(),
        routes: server.routes.clone(),
        shutdown_grace: Duration::from_millis(100),
        conn_limits: server.conn_limits.clone(),
    };
    tokio::spawn(serving.serve(listener, shutdown.clone()));
    (url, server, shutdown)
}

/// A small SGLang body of `tokens` new tokens (EOS ignored), streamed or not.
pub fn sglang_body(tokens: u32, stream: bool) -> Value {
    serde_json::json!({"input_ids": [5, 6, 7, 8], "stream": stream,
           "sampling_params": {"max_new_tokens": tokens, "ignore_eos": true}})
}

/// The value of the first `/metrics` sample of family `name` labelled `format="<format>"`.
pub fn metric_value(metrics: &str, name: &str, format: &str) -> f64 {
    let label = format!("format=\"{format}\"");
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} for {format} in\n{metrics}"))
}
