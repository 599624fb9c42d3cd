//! Authentication, abort isolation and TLS: API keys on every protected route (401 in the
//! route's native envelope with `WWW-Authenticate: Bearer`), tenants that abort only their own
//! requests, admin-only `abort_all`, JSON-only abort bodies, a bounded and indexed id list that
//! does not stall other streams, TLS on the listener and on the sidecar (mTLS), and a
//! `/health_generate` that shares one engine generation among concurrent callers.

mod common;

use std::io::BufRead as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestServer, start_with};
use futures::StreamExt;
use genfront::{ServeArgs, Server};
use genfront_mocker::{MockConfig, MockEngine};
use genfront_protocol::Engine;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const KEY_A: &str = "tenant-a-key";
const KEY_B: &str = "tenant-b-key";
const ADMIN: &str = "admin-key";

fn keyed() -> Vec<&'static str> {
    vec![
        "--api-key",
        KEY_A,
        "--api-key",
        KEY_B,
        "--admin-api-key",
        ADMIN,
    ]
}

fn slow() -> MockConfig {
    MockConfig {
        ttft_base: Duration::from_millis(5),
        inter_token_latency: Duration::from_millis(5),
        ..MockConfig::default()
    }
}

fn long_sglang(rid: &str) -> Value {
    json!({"rid": rid, "input_ids": [1, 2, 3], "stream": true,
           "sampling_params": {"max_new_tokens": 3000, "ignore_eos": true}})
}

fn long_vllm() -> Value {
    json!({"token_ids": [1, 2, 3], "stream": true,
           "sampling_params": {"max_tokens": 3000, "ignore_eos": true}})
}

async fn send(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> reqwest::Response {
    let mut req = s.client.request(method, s.url(path));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    req.send().await.expect("sent")
}

/// A streaming generate with `key`; its task returns the SSE body once the stream ends.
async fn open_stream(
    s: &TestServer,
    path: &str,
    key: &str,
    body: Value,
    vllm_id: Option<&str>,
) -> tokio::task::JoinHandle<String> {
    let mut req = s.client.post(s.url(path)).bearer_auth(key).json(&body);
    if let Some(id) = vllm_id {
        req = req.header("x-request-id", id);
    }
    let resp = req.send().await.expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    tokio::spawn(async move { resp.text().await.expect("body") })
}

fn aborted(body: &str) -> bool {
    body.contains("\"abort\"")
}

/// The protected routes of the default route table: (method, path, body for a working call).
fn protected() -> Vec<(reqwest::Method, &'static str, Option<Value>)> {
    let small = json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}});
    let small_vllm = json!({"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}});
    vec![
        (reqwest::Method::POST, "/generate", Some(small)),
        (
            reqwest::Method::POST,
            "/inference/v1/generate",
            Some(small_vllm),
        ),
        (
            reqwest::Method::POST,
            "/abort_request",
            Some(json!({"rid": "nothing-here"})),
        ),
        (
            reqwest::Method::POST,
            "/inference/v1/abort_requests",
            Some(json!({"request_ids": ["nothing-here"]})),
        ),
        (reqwest::Method::GET, "/get_model_info", None),
        (reqwest::Method::GET, "/model_info", None),
        (reqwest::Method::GET, "/server_info", None),
        (reqwest::Method::GET, "/get_server_info", None),
        (reqwest::Method::GET, "/v1/models", None),
    ]
}

#[tokio::test]
async fn every_protected_route_refuses_without_the_right_key() {
    let s = start_with(&keyed(), common::zero_delay(), 1).await;
    for (method, path, body) in protected() {
        for key in [None, Some("wrong-key"), Some("tenant-a-ke")] {
            let r = send(&s, method.clone(), path, key, body.as_ref()).await;
            assert_eq!(r.status().as_u16(), 401, "{method} {path} with {key:?}");
            assert_eq!(r.headers()["www-authenticate"], "Bearer", "{method} {path}");
            let v: Value = r.json().await.expect("a JSON envelope");
            let text = v.to_string();
            assert!(text.contains("Unauthorized"), "{path}: {text}");
            // The route's native envelope: SGLang's top-level error object, vLLM's
            // `{"error": {…}}`.
            if path.starts_with("/inference") || path == "/v1/models" {
                assert_eq!(v["error"]["code"], 401, "{path}: {v}");
                assert_eq!(v["error"]["type"], "Unauthorized", "{path}: {v}");
            } else {
                assert_eq!(
                    (&v["object"], &v["code"]),
                    (&json!("error"), &json!(401)),
                    "{path}: {v}"
                );
            }
        }
        for key in [KEY_A, KEY_B, ADMIN] {
            let r = send(&s, method.clone(), path, Some(key), body.as_ref()).await;
            assert_eq!(r.status().as_u16(), 200, "{method} {path} with a valid key");
        }
    }
    // Probes and the scrape stay open.
    for path in ["/health", "/ready", "/metrics", "/health_generate"] {
        let r = send(&s, reqwest::Method::GET, path, None, None).await;
        assert_eq!(r.status().as_u16(), 200, "{path} stays open");
    }
    let metrics = s.get_text("/metrics").await;
    assert!(
        metrics.contains("genfront_auth_refusals_total{route=\"/generate\"} 3"),
        "{metrics}"
    );
    // The keys never show in Debug output of the configuration.
    let dbg = format!("{:?}", s.state.config);
    assert!(!dbg.contains(KEY_A) && !dbg.contains(ADMIN), "{dbg}");
    let args = ServeArgs::parse_from(["serve", "--api-key", KEY_A]);
    assert!(!format!("{args:?}").contains(KEY_A));
}

#[tokio::test]
async fn a_tenants_prefix_aborts_leave_another_tenants_streams_running() {
    let s = start_with(&keyed(), slow(), 2).await;
    // Tenant B's streams: rids starting with hex digits, and a vLLM one.
    let b1 = open_stream(&s, "/generate", KEY_B, long_sglang("0b-rollout"), None).await;
    let b2 = open_stream(&s, "/generate", KEY_B, long_sglang("fb-rollout"), None).await;
    let b3 = open_stream(&s, "/inference/v1/generate", KEY_B, long_vllm(), Some("b3")).await;
    // Tenant A's own stream.
    let a1 = open_stream(&s, "/generate", KEY_A, long_sglang("a-own"), None).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Every one-character prefix, and B's exact rids (an SGLang abort acts when the rid itself
    // is in flight, then by prefix): none reaches another tenant's requests.
    let rids = "0123456789abcdef".chars().map(|c| c.to_string()).chain([
        "0b-rollout".to_owned(),
        "fb-rollout".to_owned(),
        "0".to_owned(),
    ]);
    for rid in rids {
        let r = send(
            &s,
            reqwest::Method::POST,
            "/abort_request",
            Some(KEY_A),
            Some(&json!({ "rid": rid })),
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
    }
    let r = send(
        &s,
        reqwest::Method::POST,
        "/inference/v1/abort_requests",
        Some(KEY_A),
        Some(&json!({"request_ids": ["generate-tokens-b3"]})),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    // A's own request is reachable by A.
    let r = send(
        &s,
        reqwest::Method::POST,
        "/abort_request",
        Some(KEY_A),
        Some(&json!({"rid": "a-own"})),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let a_body = tokio::time::timeout(Duration::from_secs(5), a1)
        .await
        .expect("A's own stream aborted in time")
        .expect("task");
    assert!(aborted(&a_body), "{a_body}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    for h in [&b1, &b2, &b3] {
        assert!(!h.is_finished(), "tenant B's streams keep running");
    }
    // abort_all is the admin's.
    for key in [KEY_A, KEY_B] {
        let r = send(
            &s,
            reqwest::Method::POST,
            "/abort_request",
            Some(key),
            Some(&json!({"abort_all": true})),
        )
        .await;
        assert_eq!(r.status().as_u16(), 403);
    }
    for h in [&b1, &b2, &b3] {
        assert!(!h.is_finished());
    }
    let r = send(
        &s,
        reqwest::Method::POST,
        "/abort_request",
        Some(ADMIN),
        Some(&json!({"abort_all": true})),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    // The admin's exact-id abort reaches B's vLLM stream.
    let r = send(
        &s,
        reqwest::Method::POST,
        "/inference/v1/abort_requests",
        Some(ADMIN),
        Some(&json!({"request_ids": ["generate-tokens-b3"]})),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    for h in [b1, b2, b3] {
        let body = tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .expect("ended by the admin")
            .expect("task");
        assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    }
}

#[tokio::test]
async fn without_keys_anyone_aborts_anything_and_start_up_says_so() {
    let s = start_with(&[], slow(), 1).await;
    let h = open_stream(&s, "/generate", "ignored", long_sglang("7f-someone"), None).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let r = send(
        &s,
        reqwest::Method::POST,
        "/abort_request",
        None,
        Some(&json!({"rid": "7f-someone"})),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let body = tokio::time::timeout(Duration::from_secs(5), h)
        .await
        .expect("aborted")
        .expect("task");
    assert!(aborted(&body));

    // The binary warns at start-up (tracing writes to stdout).
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_genfront"))
        .args(["serve", "--mock", "1", "--port", "0"])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("genfront starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let mut warned = false;
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                warned |= line.contains("WARN") && line.contains("no API keys");
                seen.push(line);
                if warned {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned, "no start-up warning: {seen:#?}");
}

#[tokio::test]
async fn abort_bodies_must_be_json() {
    for argv in [vec![], keyed()] {
        let s = start_with(&argv, common::zero_delay(), 1).await;
        for path in ["/abort_request", "/inference/v1/abort_requests"] {
            for ct in [
                Some("text/plain"),
                Some("application/x-www-form-urlencoded"),
                Some("multipart/form-data; boundary=x"),
                None,
            ] {
                let mut req = s
                    .client
                    .post(s.url(path))
                    .bearer_auth(ADMIN)
                    .body(r#"{"abort_all": true}"#);
                if let Some(ct) = ct {
                    req = req.header("content-type", ct);
                }
                let r = req.send().await.expect("sent");
                assert_eq!(r.status().as_u16(), 415, "{path} {ct:?} (keys: {argv:?})");
            }
        }
    }
}

#[tokio::test]
async fn the_abort_id_list_is_bounded() {
    let s = start_with(&["--max-abort-ids", "10"], common::zero_delay(), 1).await;
    let ids: Vec<String> = (0..11).map(|i| format!("generate-tokens-{i}")).collect();
    let r = send(
        &s,
        reqwest::Method::POST,
        "/inference/v1/abort_requests",
        None,
        Some(&json!({ "request_ids": ids })),
    )
    .await;
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.expect("body");
    assert!(text.contains("--max-abort-ids"), "{text}");
    assert_eq!(s.state.metrics.limits().hits("max_abort_ids"), 1);
    let ids: Vec<String> = (0..10).map(|i| format!("generate-tokens-{i}")).collect();
    let r = send(
        &s,
        reqwest::Method::POST,
        "/inference/v1/abort_requests",
        None,
        Some(&json!({ "request_ids": ids })),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
}

/// A 1M-id vLLM abort while a canary streams: the canary's largest inter-chunk gap around the
/// abort stays small. The issue's bound is 50 ms; on a shared 2-core CI machine in a debug build
/// the assertion is 250 ms, and the measured figure is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_id_abort_does_not_stall_other_streams() {
    let s = start_with(&["--max-abort-ids", "1000000"], slow(), 2).await;
    let resp = s
        .client
        .post(s.url("/inference/v1/generate"))
        .header("x-request-id", "canary")
        .json(&long_vllm())
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let canary = tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        while let Some(Ok(_)) = body.next().await {
            if tx.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    let victim = open_stream(
        &s,
        "/inference/v1/generate",
        "-",
        long_vllm(),
        Some("victim"),
    )
    .await;
    // 999,999 ids nobody uses, then the victim's.
    let mut body = String::with_capacity(40 << 20);
    body.push_str("{\"request_ids\":[");
    for i in 0..999_999u32 {
        body.push_str("\"generate-tokens-");
        body.push_str(&format!("{i:08x}-0000-4000-8000-000000000000"));
        body.push_str("\",");
    }
    body.push_str("\"generate-tokens-victim\"]}");
    let bytes = body.len();
    tokio::time::sleep(Duration::from_millis(100)).await;
    while rx.try_recv().is_ok() {}
    let start = Instant::now();
    let r = s
        .client
        .post(s.url("/inference/v1/abort_requests"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("sent");
    let took = start.elapsed();
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut last = start;
    let mut worst = Duration::ZERO;
    while let Ok(t) = rx.try_recv() {
        worst = worst.max(t.saturating_duration_since(last));
        last = t;
    }
    let victim_body = tokio::time::timeout(Duration::from_secs(5), victim)
        .await
        .expect("victim aborted")
        .expect("task");
    assert!(aborted(&victim_body), "{victim_body}");
    assert!(!canary.is_finished(), "the canary is not in the list");
    eprintln!(
        "1M-id abort ({} MB): answered in {took:?}; canary's largest inter-chunk gap {worst:?}",
        bytes >> 20
    );
    assert!(
        worst < Duration::from_millis(250),
        "canary stalled {worst:?}"
    );
    canary.abort();
}

#[tokio::test]
async fn health_generate_shares_one_generation_among_concurrent_callers() {
    let cfg = MockConfig {
        ttft_base: Duration::from_millis(50),
        ..MockConfig::default()
    };
    let s = start_with(&[], cfg, 1).await;
    let before = s.engines[0].requests();
    let calls = (0..200).map(|_| {
        let c = s.client.clone();
        let url = s.url("/health_generate");
        async move { c.get(url).send().await.expect("sent").status().as_u16() }
    });
    let statuses = futures::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let generations = s.engines[0].requests() - before;
    assert!(
        (1..=3).contains(&generations),
        "200 probes became {generations} engine generations"
    );
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, PEM.
struct Pki {
    dir: PathBuf,
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

impl Pki {
    fn new(name: &str) -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = rcgen::KeyPair::generate().expect("key");
        let server = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("params")
            .signed_by(&server_key, &issuer)
            .expect("server cert");
        let client_key = rcgen::KeyPair::generate().expect("key");
        let client = rcgen::CertificateParams::new(vec!["frontend".into()])
            .expect("params")
            .signed_by(&client_key, &issuer)
            .expect("client cert");
        let dir = std::env::temp_dir().join(format!(
            "genfront-auth-{name}-{}-{}",
            std::process::id(),
            genfront_frontend::mint_request_id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self {
            dir,
            ca: ca_cert.pem(),
            server_cert: server.pem(),
            server_key: server_key.serialize_pem(),
            client_cert: client.pem(),
            client_key: client_key.serialize_pem(),
        }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write pem");
        p
    }

    /// A rustls client configuration trusting only this CA.
    fn client(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.ca.as_bytes()).expect("ca pem"))
            .expect("root");
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    }
}

/// One HTTP/1.1 request over TLS to 127.0.0.1:`port` (`Connection: close`); returns the status
/// and the body (not chunked: genfront answers unary JSON with a length).
async fn https(
    tls: &tokio_rustls::TlsConnector,
    port: u16,
    path: &str,
    key: Option<&str>,
    body: &Value,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut stream = tls.connect(name, tcp).await.expect("TLS handshake");
    let body = body.to_string();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(body.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn tls_on_the_listener() {
    let pki = Pki::new("listener");
    let cert = pki.file("cert.pem", &pki.server_cert);
    let key = pki.file("key.pem", &pki.server_key);
    let args = ServeArgs::parse_from([
        "serve",
        "--mock",
        "1",
        "--mock-zero-delay",
        "--api-key",
        KEY_A,
        "--tls-cert",
        cert.to_str().expect("path"),
        "--tls-key",
        key.to_str().expect("path"),
    ]);
    let server = Server::build(&args).await.expect("builds");
    let config = genfront::tls::server_config(&cert, &key).expect("tls config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(server.serve_tls(listener, config, shutdown.clone()));
    let tls = pki.client();
    let body = json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}});
    let (status, text) = https(&tls, port, "/generate", Some(KEY_A), &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["output_ids"].as_array().map(Vec::len), Some(3), "{v}");
    let (status, _) = https(&tls, port, "/generate", None, &body).await;
    assert_eq!(status, 401);
    // Plain HTTP on the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/health"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err() || !plain.expect("resp").status().is_success());
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
}

#[tokio::test]
async fn tls_sidecar_with_client_certificates() {
    let pki = Pki::new("sidecar");
    let engine: Arc<dyn Engine> =
        Arc::new(MockEngine::new(MockConfig::zero_delay()).expect("mock"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let server = genfront_sidecar::SidecarServer::new(engine).tls(genfront_sidecar::ServerTls {
        cert_pem: pki.server_cert.clone().into_bytes(),
        key_pem: pki.server_key.clone().into_bytes(),
        client_ca_pem: Some(pki.ca.clone().into_bytes()),
    });
    tokio::spawn(server.serve(listener, shutdown.clone()));
    let uri = format!("grpcs://{addr}");
    // Without a client certificate the handshake fails.
    let no_identity = genfront_sidecar::ClientTls {
        ca_pem: pki.ca.clone().into_bytes(),
        identity: None,
    };
    assert!(
        genfront_sidecar::RemoteEngine::connect_with(&uri, Some(&no_identity))
            .await
            .is_err()
    );
    // Clear text to a TLS sidecar fails too.
    assert!(
        genfront_sidecar::RemoteEngine::connect(&format!("grpc://{addr}"))
            .await
            .is_err()
    );
    // genfront with its client certificate serves through the sidecar.
    let ca = pki.file("ca.pem", &pki.ca);
    let cert = pki.file("client.pem", &pki.client_cert);
    let key = pki.file("client-key.pem", &pki.client_key);
    let argv: Vec<String> = [
        "--worker",
        uri.as_str(),
        "--worker-tls-ca",
        ca.to_str().expect("path"),
        "--worker-tls-cert",
        cert.to_str().expect("path"),
        "--worker-tls-key",
        key.to_str().expect("path"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let (url, server, stop) = common::genfront(&argv).await;
    assert!(
        server.wait_ready(Duration::from_secs(20)).await,
        "genfront reaches the TLS sidecar"
    );
    let r = reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(&json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["output_ids"].as_array().map(Vec::len), Some(3), "{v}");
    stop.cancel();
    shutdown.cancel();
}
