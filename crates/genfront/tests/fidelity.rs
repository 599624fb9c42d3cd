//! Differential fidelity: for thousands of randomized requests per format, the body returned
//! through genfront (direct mode, and through a sidecar) equals the body the native mock server
//! returns when called directly, field for field — ignoring only timing fields and the ids
//! genfront rewrites by design.
//!
//! Each path gets two identically configured native mock servers fed the same request sequence:
//! one called directly (the oracle), one behind genfront. Their prefix caches therefore see the
//! same history, so even `cached_tokens` must agree.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use genfront::{CATALOG, ServeArgs, Server};
use genfront_format::resolve_routes;
use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const REQUESTS_PER_FORMAT: usize = 2000;
const SIDECAR_REQUESTS: usize = 300;

fn mock_args(api: Api) -> MockServerArgs {
    let mut a = MockServerArgs::new(api);
    a.zero_delay = true;
    a.enable_return_routed_experts = true;
    a.return_sampling_mask = api == Api::Vllm;
    a
}

struct Genfront {
    addr: SocketAddr,
    shutdown: CancellationToken,
}

async fn genfront(workers: &[String]) -> Genfront {
    let mut argv = vec!["serve".to_owned()];
    for w in workers {
        argv.push("--worker".into());
        argv.push(w.clone());
    }
    let args = ServeArgs::parse_from(argv);
    let routes = resolve_routes(&CATALOG, &args.route_config()).expect("routes");
    let _ = routes;
    let server = Server::build(&args).await.expect("genfront with workers");
    assert!(
        server.wait_ready(std::time::Duration::from_secs(10)).await,
        "workers connect"
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    tokio::spawn(server.serve(listener, shutdown.clone()));
    Genfront { addr, shutdown }
}

async fn sidecar_for(upstream: &SpawnedMockServer, api: Api) -> (String, CancellationToken) {
    let spec = match api {
        Api::Sglang => format!("sglang={}", upstream.base_url()),
        Api::Vllm => format!("vllm={}", upstream.base_url()),
    };
    let engine: Arc<dyn genfront_protocol::Engine> = spec
        .parse::<genfront::WorkerSpec>()
        .expect("spec")
        .connect()
        .await
        .expect("connect");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    tokio::spawn(genfront_sidecar::serve(engine, listener, shutdown.clone()));
    (format!("grpc://{addr}"), shutdown)
}

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

fn sglang_request(rng: &mut StdRng, i: usize) -> Value {
    let len = rng.random_range(1..=48usize);
    let ids: Vec<u32> = (0..len).map(|_| rng.random_range(3..150_000)).collect();
    let mut sp = json!({
        "max_new_tokens": pick(rng, &[0u32, 1, 2, 5, 9, 16]),
        "temperature": pick(rng, &[0.0, 0.5, 1.0]),
        "top_p": pick(rng, &[1.0, 0.9]),
        "top_k": pick(rng, &[-1i64, 5, 40]),
        "sampling_seed": rng.random_range(0..1_000_000u64),
        "ignore_eos": rng.random_bool(0.5),
    });
    if rng.random_bool(0.2) {
        sp["stop_token_ids"] = json!([ids[0], 7]);
    }
    if rng.random_bool(0.15) {
        sp["n"] = json!(2);
    }
    let mut body = json!({"rid": format!("fid-{i}"), "input_ids": ids, "sampling_params": sp,
                          "stream": rng.random_bool(0.5)});
    if rng.random_bool(0.6) {
        body["return_logprob"] = json!(true);
        body["logprob_start_len"] = json!(pick(rng, &[-1i64, 0, (len as i64 - 1).max(0)]));
        body["top_logprobs_num"] = json!(pick(rng, &[0u32, 1, 3]));
        if rng.random_bool(0.3) {
            body["token_ids_logprob"] = json!([1, 2, 3]);
        }
    }
    if rng.random_bool(0.2) {
        body["return_routed_experts"] = json!(true);
    }
    if rng.random_bool(0.1) {
        body["custom_unknown_key"] = json!({"kept": [1, 2, 3]});
    }
    body
}

fn vllm_request(rng: &mut StdRng, i: usize) -> Value {
    let len = rng.random_range(1..=48usize);
    let ids: Vec<u32> = (0..len).map(|_| rng.random_range(3..150_000)).collect();
    let temperature = pick(rng, &[0.0, 0.7, 1.0]);
    let stream = rng.random_bool(0.5);
    let mut sp = json!({
        "max_tokens": pick(rng, &[1u32, 2, 5, 9, 16]),
        "temperature": temperature,
        "top_p": pick(rng, &[1.0, 0.9]),
        "top_k": pick(rng, &[0i64, 5, 40]),
        "seed": rng.random_range(0..1_000_000u64),
        "ignore_eos": rng.random_bool(0.5),
    });
    if temperature > 0.0 && rng.random_bool(0.2) {
        sp["n"] = json!(2);
    }
    if rng.random_bool(0.6) {
        sp["logprobs"] = json!(pick(rng, &[0u32, 1, 5]));
    }
    if !stream && rng.random_bool(0.3) {
        sp["prompt_logprobs"] = json!(pick(rng, &[0u32, 2]));
    }
    if rng.random_bool(0.2) {
        sp["stop_token_ids"] = json!([7, 9]);
    }
    let mut body = json!({"request_id": format!("fid-{i}"), "token_ids": ids, "sampling_params": sp,
                          "stream": stream});
    if stream && rng.random_bool(0.5) {
        body["stream_options"] =
            json!({"include_usage": true, "continuous_usage_stats": rng.random_bool(0.5)});
    }
    if rng.random_bool(0.1) {
        body["future_top_level"] = json!("kept");
    }
    body
}

/// Remove the fields that legitimately differ between two runs: timings, and for SGLang `n > 1`
/// the regenerated ids and the cache hits of concurrently started samples.
fn normalize(v: &mut Value, regenerated_ids: bool) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(|x| normalize(x, regenerated_ids)),
        Value::Object(o) => {
            o.remove("created");
            if let Some(Value::Object(m)) = o.get_mut("meta_info") {
                m.remove("e2e_latency");
                m.remove("response_sent_to_client_ts");
                if regenerated_ids {
                    // Parallel samples are separate engine requests that start concurrently, so
                    // which of them finds the others' prefix already cached is a race — in
                    // SGLang too.
                    m.remove("id");
                    m.remove("cached_tokens");
                }
            }
        }
        _ => {}
    }
}

/// The sub-request an SSE event belongs to (SGLang `index`, vLLM `choices[0].index`).
fn stream_index(v: &Value) -> u64 {
    v["index"]
        .as_u64()
        .or_else(|| v["choices"][0]["index"].as_u64())
        .unwrap_or(0)
}

async fn fetch(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Vec<Value>) {
    let r = client.post(url).json(body).send().await.expect("sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    let stream = body["stream"] == json!(true) && status == 200;
    let values = if stream {
        common::sse_events(&text)
    } else {
        vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))]
    };
    (status, values)
}

async fn differential(api: Api, through_sidecar: bool, n: usize, seed: u64) -> usize {
    let oracle = spawn(&mock_args(api)).await.expect("oracle");
    let upstream = spawn(&mock_args(api)).await.expect("upstream");
    let (worker, sidecar) = if through_sidecar {
        let (uri, token) = sidecar_for(&upstream, api).await;
        (uri, Some(token))
    } else {
        let spec = match api {
            Api::Sglang => format!("sglang={}", upstream.base_url()),
            Api::Vllm => format!("vllm={}", upstream.base_url()),
        };
        (spec, None)
    };
    let gf = genfront(&[worker]).await;
    let path = match api {
        Api::Sglang => "/generate",
        Api::Vllm => "/inference/v1/generate",
    };
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    for i in 0..n {
        let body = match api {
            Api::Sglang => sglang_request(&mut rng, i),
            Api::Vllm => vllm_request(&mut rng, i),
        };
        let (s1, mut direct) = fetch(&client, &oracle.url(path), &body).await;
        let (s2, mut through) = fetch(&client, &format!("http://{}{}", gf.addr, path), &body).await;
        let regenerated =
            api == Api::Sglang && body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1;
        direct.iter_mut().for_each(|v| normalize(v, regenerated));
        through.iter_mut().for_each(|v| normalize(v, regenerated));
        // Events of different sub-requests (batch items, parallel samples, vLLM choices)
        // interleave in arrival order, natively too; compare each one's own sequence.
        direct.sort_by_key(stream_index);
        through.sort_by_key(stream_index);
        assert_eq!(s1, s2, "status differs for request {i}: {body}");
        if through != direct {
            let first = through
                .iter()
                .zip(&direct)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!(
                "{api:?} sidecar={through_sidecar} request {i} differs ({} vs {} events, first difference at {first})\nrequest: {body}\nthrough genfront: {}\ndirect: {}",
                through.len(),
                direct.len(),
                through.get(first).map(Value::to_string).unwrap_or_default(),
                direct.get(first).map(Value::to_string).unwrap_or_default(),
            );
        }
        compared += 1;
    }
    assert!(upstream.wait_idle(std::time::Duration::from_secs(5)).await);
    gf.shutdown.cancel();
    if let Some(t) = sidecar {
        t.cancel();
    }
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_2000_randomized_requests_through_genfront_equal_direct() {
    let n = differential(Api::Sglang, false, REQUESTS_PER_FORMAT, 7).await;
    eprintln!("sglang direct mode: {n} randomized requests identical through genfront");
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_2000_randomized_requests_through_genfront_equal_direct() {
    let n = differential(Api::Vllm, false, REQUESTS_PER_FORMAT, 11).await;
    eprintln!("vllm direct mode: {n} randomized requests identical through genfront");
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_300_randomized_requests_through_genfront_and_sidecar_equal_direct() {
    let n = differential(Api::Sglang, true, SIDECAR_REQUESTS, 13).await;
    eprintln!("sglang via sidecar: {n} randomized requests identical through genfront + sidecar");
    assert_eq!(n, SIDECAR_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_300_randomized_requests_through_genfront_and_sidecar_equal_direct() {
    let n = differential(Api::Vllm, true, SIDECAR_REQUESTS, 17).await;
    eprintln!("vllm via sidecar: {n} randomized requests identical through genfront + sidecar");
    assert_eq!(n, SIDECAR_REQUESTS);
}
