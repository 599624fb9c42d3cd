//! Prefill/decode disaggregation on in-process mocks: for randomized requests of both formats
//! (unary and SSE, every logprob option, `max_new_tokens` 0/1/k, routed experts, batches and
//! `n > 1`), the answer through a prefill/decode pair equals the aggregated answer for the same
//! request, field for field (timing and id fields excepted), for both hand-off styles; failures
//! of either leg end both; a missing role is refused at once.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::random::{fetch, normalize, sglang_request, stream_index, vllm_request};
use genfront::{ServeArgs, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const REQUESTS_PER_FORMAT: usize = 1000;

struct Running {
    addr: SocketAddr,
    server_state: std::sync::Arc<genfront_frontend::AppState>,
    _stop: tokio_util::sync::DropGuard,
}

async fn start(argv: &[&str]) -> Running {
    let mut full = vec![
        "serve",
        "--mock-zero-delay",
        "--mock-prefix-cache-block-size",
        "0",
    ];
    full.extend_from_slice(argv);
    let args = ServeArgs::parse_from(full);
    let server = Server::build(&args).await.expect("genfront builds");
    assert!(server.wait_ready(Duration::from_secs(5)).await);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let state = server.state.clone();
    tokio::spawn(server.serve(listener, stop.clone()));
    Running {
        addr,
        server_state: state,
        _stop: stop.drop_guard(),
    }
}

/// A batch of the request's prompt and a second prompt, sometimes.
fn maybe_batch(rng: &mut StdRng, mut body: Value, key: &str) -> Value {
    if key == "input_ids" && rng.random_bool(0.15) && body["sampling_params"]["n"].is_null() {
        let first = body[key].clone();
        body[key] = json!([first, [11, 12, 13]]);
        if let Some(o) = body.as_object_mut() {
            o.remove("rid");
        }
    }
    body
}

async fn differential(format: &str, handoff: &str, n: usize, seed: u64) -> usize {
    let agg = start(&["--mock", "1"]).await;
    let pd = start(&[
        "--mock-prefill",
        "1",
        "--mock-decode",
        "1",
        "--mock-handoff",
        handoff,
    ])
    .await;
    let path = if format == "sglang" {
        "/generate"
    } else {
        "/inference/v1/generate"
    };
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    for i in 0..n {
        let body = if format == "sglang" {
            let b = sglang_request(&mut rng, i);
            maybe_batch(&mut rng, b, "input_ids")
        } else {
            vllm_request(&mut rng, i)
        };
        let (s1, mut want) = fetch(&client, &format!("http://{}{path}", agg.addr), &body).await;
        let (s2, mut got) = fetch(&client, &format!("http://{}{path}", pd.addr), &body).await;
        let regenerated = body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1
            || body["input_ids"][0].is_array();
        for v in want.iter_mut().chain(got.iter_mut()) {
            normalize(v, regenerated);
            strip_ids(v);
        }
        want.sort_by_key(stream_index);
        got.sort_by_key(stream_index);
        assert_eq!(
            s1, s2,
            "{format}/{handoff} status differs for request {i}: {body}"
        );
        if got != want {
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "{format}/{handoff} request {i} differs ({} vs {} events, first at {first})\nrequest: {body}\nP/D: {}\naggregated: {}",
                got.len(),
                want.len(),
                got.get(first).map(Value::to_string).unwrap_or_default(),
                want.get(first).map(Value::to_string).unwrap_or_default(),
            );
        }
        compared += 1;
    }
    let idle = pd
        .server_state
        .router
        .workers()
        .iter()
        .all(|w| w.load().requests() == 0);
    assert!(idle, "no leg left running");
    compared
}

/// Ids minted per request (SGLang `meta_info.id`, vLLM `request_id` of a request without one).
fn strip_ids(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(strip_ids),
        Value::Object(o) => {
            if let Some(Value::Object(m)) = o.get_mut("meta_info") {
                m.remove("id");
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_1000_randomized_requests_pd_equals_aggregated_bootstrap() {
    let n = differential("sglang", "bootstrap", REQUESTS_PER_FORMAT, 11).await;
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_1000_randomized_requests_pd_equals_aggregated_kv_transfer() {
    let n = differential("vllm", "kv_transfer", REQUESTS_PER_FORMAT, 12).await;
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_over_the_other_hand_off_style() {
    assert_eq!(differential("sglang", "kv_transfer", 200, 13).await, 200);
    assert_eq!(differential("vllm", "bootstrap", 200, 14).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_role_is_refused_at_once_and_the_other_role_gets_nothing() {
    let pd = start(&["--mock-prefill", "1", "--mock-decode", "1"]).await;
    let router = &pd.server_state.router;
    let decode = router
        .workers()
        .into_iter()
        .find(|w| w.role() == genfront_router::Role::Decode)
        .expect("decode");
    assert!(router.set_state(decode.id().as_str(), genfront_router::WorkerState::Draining));
    let client = reqwest::Client::new();
    let t0 = Instant::now();
    let r = client
        .post(format!("http://{}/generate", pd.addr))
        .json(&json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}))
        .send()
        .await
        .expect("answer");
    assert!(t0.elapsed() < Duration::from_millis(100));
    assert_eq!(r.status().as_u16(), 503);
    let prefill = router
        .workers()
        .into_iter()
        .find(|w| w.role() == genfront_router::Role::Prefill)
        .expect("prefill");
    assert_eq!(prefill.load().requests(), 0);
    let ready = client
        .get(format!("http://{}/ready", pd.addr))
        .send()
        .await
        .expect("ready");
    assert_eq!(ready.status().as_u16(), 503, "no pair, no readiness");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_leg_ends_both_legs_with_its_error() {
    // Every engine request fails (the fault applies to both mocks): the first failing leg ends
    // the other, nothing is left waiting.
    let pd = start(&[
        "--mock-prefill",
        "1",
        "--mock-decode",
        "1",
        "--mock-fault",
        "error@*:invalid_argument:prefill says no",
    ])
    .await;
    let client = reqwest::Client::new();
    for stream in [false, true] {
        let t0 = Instant::now();
        let r = client
            .post(format!("http://{}/generate", pd.addr))
            .json(&json!({"input_ids": [1, 2, 3], "stream": stream,
                           "sampling_params": {"max_new_tokens": 20}}))
            .send()
            .await
            .expect("answer");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        assert!(t0.elapsed() < Duration::from_secs(1), "fails fast");
        assert!(
            text.contains("prefill says no") || text.contains("no"),
            "{text}"
        );
        if !stream {
            assert_eq!(status, 400, "{text}");
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    for w in pd.server_state.router.workers() {
        assert_eq!(w.load().requests(), 0, "{} still busy", w.id());
    }
}

#[test]
fn every_format_declares_complete_merge_rules() {
    for (name, text) in [
        ("sglang", genfront_sglang::PD_RULES),
        ("vllm", genfront_vllm::PD_RULES),
    ] {
        let rules = genfront_format::pd::MergeRules::parse(text).expect("rules parse");
        assert_eq!(rules.format, name);
        rules.check_complete().expect("complete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pd_metrics_and_trace_records_name_both_workers() {
    let dir = std::env::temp_dir().join(format!("genfront-pd-trace-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let trace = dir.join("trace.jsonl");
    let trace_arg = trace.to_string_lossy().into_owned();
    let pd = start(&[
        "--mock-prefill",
        "1",
        "--mock-decode",
        "1",
        "--trace-file",
        &trace_arg,
    ])
    .await;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("http://{}/generate", pd.addr))
        .json(&json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["x-genfront-worker"],
        "prefill-mock-0+decode-mock-0"
    );
    let _ = r.text().await;
    // The pair can be pinned by the name the answer gives it; one half alone is a 400.
    for (pin, want) in [
        ("prefill-mock-0+decode-mock-0", 200),
        ("decode-mock-0", 400),
        ("prefill-mock-0+nope", 400),
    ] {
        let r = client
            .post(format!("http://{}/generate", pd.addr))
            .header("x-genfront-worker", pin)
            .json(&json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), want, "pin {pin}");
        let _ = r.text().await;
    }
    let metrics = client
        .get(format!("http://{}/metrics", pd.addr))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for family in [
        "genfront_pd_prefill_seconds_count 2",
        "genfront_pd_decode_ttft_seconds_count 2",
        "genfront_pd_failures_total{leg=\"prefill\"} 0",
    ] {
        assert!(metrics.contains(family), "{family} in\n{metrics}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        if let Some(l) = text.lines().next() {
            break l.to_owned();
        }
        assert!(Instant::now() < deadline, "trace written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let v: Value = serde_json::from_str(&line).expect("trace JSON");
    assert_eq!(v["engine_requests"][0]["worker"], "decode-mock-0");
    assert_eq!(v["engine_requests"][0]["prefill_worker"], "prefill-mock-0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The native field pointers of a frame: its top-level keys, and the keys of the containers
/// that hold per-request fields (`meta_info`, and vLLM's one `choices` entry), under `prefix`.
fn leaves(v: &Value, prefix: String, out: &mut std::collections::BTreeSet<String>) {
    let Value::Object(m) = v else {
        out.insert(prefix);
        return;
    };
    for (k, x) in m {
        let p = format!("{prefix}/{k}");
        match (k.as_str(), x) {
            ("meta_info", Value::Object(_)) => leaves(x, p, out),
            ("choices", Value::Array(items)) => {
                for item in items {
                    leaves(item, format!("{p}/0"), out);
                }
            }
            _ => {
                out.insert(p);
            }
        }
    }
}

/// The native fields a real engine client passes through (`engine_data`), collected from rich
/// requests against the native mock servers, must each have an explicit merge rule — not just
/// the `/engine_data/*` fallback — so a new field an engine starts sending fails this test until
/// someone decides how P/D legs combine it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_native_field_a_worker_emits_has_an_explicit_merge_rule() {
    use futures::StreamExt;
    use genfront_format::{GenerateFormat, ParseInput};
    use genfront_mockserver::{Api, MockServerArgs, spawn};
    use genfront_protocol::Engine;

    for api in [Api::Sglang, Api::Vllm] {
        let mut args = MockServerArgs::new(api);
        args.zero_delay = true;
        args.enable_return_routed_experts = true;
        args.return_sampling_mask = api == Api::Vllm;
        let server = spawn(&args).await.expect("mock server");
        let (engine, format, rules, bodies): (
            std::sync::Arc<dyn Engine>,
            std::sync::Arc<dyn GenerateFormat>,
            &str,
            Vec<Value>,
        ) = match api {
            Api::Sglang => (
                std::sync::Arc::new(
                    genfront_sglang::SglangEngine::connect(
                        &server.base_url(),
                        genfront_sglang::SglangEngineOptions::default(),
                    )
                    .await
                    .expect("connect"),
                ),
                std::sync::Arc::new(genfront_sglang::SglangFormat::default()),
                genfront_sglang::PD_RULES,
                [false, true]
                    .iter()
                    .map(|s| {
                        json!({"input_ids": [5, 6, 7, 8], "stream": s, "return_logprob": true,
                               "logprob_start_len": 0, "top_logprobs_num": 2,
                               "token_ids_logprob": [1, 2], "return_routed_experts": true,
                               "sampling_params": {"max_new_tokens": 3}})
                    })
                    .collect(),
            ),
            Api::Vllm => (
                std::sync::Arc::new(
                    genfront_vllm::VllmEngine::connect(
                        &server.base_url(),
                        genfront_vllm::VllmEngineOptions {
                            routed_experts: true,
                            sampling_mask: true,
                            ..Default::default()
                        },
                    )
                    .await
                    .expect("connect"),
                ),
                std::sync::Arc::new(genfront_vllm::VllmFormat::new()),
                genfront_vllm::PD_RULES,
                [false, true]
                    .iter()
                    .map(|s| {
                        json!({"token_ids": [5, 6, 7, 8], "stream": s,
                               "stream_options": if *s { json!({"include_usage": true}) } else { Value::Null },
                               "sampling_params": {"max_tokens": 3, "logprobs": 2,
                                                   "prompt_logprobs": if *s { Value::Null } else { json!(1) }}})
                    })
                    .collect(),
            ),
        };
        let rules = genfront_format::pd::MergeRules::parse(rules).expect("rules");
        let mut seen = std::collections::BTreeSet::new();
        for body in bodies {
            let mut body = body;
            if let Some(o) = body.as_object_mut() {
                o.retain(|_, v| !v.is_null());
                if let Some(Value::Object(sp)) = o.get_mut("sampling_params") {
                    sp.retain(|_, v| !v.is_null());
                }
            }
            let bytes = serde_json::to_vec(&body).expect("json");
            let mut headers = http::HeaderMap::new();
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            let prepared = format
                .prepare(ParseInput {
                    headers: &headers,
                    body: &bytes,
                    engine: engine.info(),
                })
                .unwrap_or_else(|r| panic!("{api:?} accepts {body}: {}", r.error));
            for sub in prepared.subs {
                let mut request = sub.request;
                request.request_id = genfront_frontend::mint_request_id();
                // The typed path, as on a P/D leg: a relayed answer carries the engine's bytes,
                // not the pass-through fields the merge rules cover (relay never runs with P/D).
                request.output.relay = false;
                let mut out = engine.generate(request, CancellationToken::new());
                while let Some(item) = out.next().await {
                    let item = item.expect("output");
                    if let Some(data) = &item.engine_data {
                        leaves(data, "/engine_data".to_owned(), &mut seen);
                    }
                }
            }
        }
        assert!(
            !seen.is_empty(),
            "{api:?}: the client passes native fields through"
        );
        let missing: Vec<&String> = seen
            .iter()
            .filter(|f| !rules.rules.contains_key(*f))
            .collect();
        assert!(
            missing.is_empty(),
            "{api:?}: native fields without an explicit merge rule: {missing:?}"
        );
    }
}

/// A sidecar serves either role: prefill and decode mocks behind `genfront sidecar`s, the leg
/// travelling typed over gRPC, give the aggregated answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pd_through_sidecars_equals_aggregated() {
    let mut uris = Vec::new();
    let mut stops = Vec::new();
    for role in [
        genfront_protocol::PdRole::Prefill,
        genfront_protocol::PdRole::Decode,
    ] {
        let mut cfg = genfront_mocker::MockConfig::zero_delay();
        cfg.role = Some(role);
        cfg.prefix_cache.block_size = 0;
        let engine: std::sync::Arc<dyn genfront_protocol::Engine> =
            std::sync::Arc::new(genfront_mocker::MockEngine::new(cfg).expect("mock"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        uris.push(format!("grpc://{}", listener.local_addr().expect("addr")));
        let stop = CancellationToken::new();
        tokio::spawn(genfront_sidecar::serve(engine, listener, stop.clone()));
        stops.push(stop.drop_guard());
    }
    let agg = start(&["--mock", "1"]).await;
    let pd = start(&["--mock", "0", "--prefill", &uris[0], "--decode", &uris[1]]).await;
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(21);
    for i in 0..100 {
        let body = sglang_request(&mut rng, i);
        let (s1, mut want) = fetch(&client, &format!("http://{}/generate", agg.addr), &body).await;
        let (s2, mut got) = fetch(&client, &format!("http://{}/generate", pd.addr), &body).await;
        let regenerated = body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1;
        for v in want.iter_mut().chain(got.iter_mut()) {
            normalize(v, regenerated);
            strip_ids(v);
        }
        want.sort_by_key(stream_index);
        got.sort_by_key(stream_index);
        assert_eq!((s1, &got), (s2, &want), "request {i}: {body}");
    }
}
