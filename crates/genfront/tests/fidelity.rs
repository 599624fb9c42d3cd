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

use common::random::{fetch, normalize, sglang_request, stream_index, vllm_request};
use genfront::{CATALOG, ServeArgs, Server};
use genfront_format::resolve_routes;
use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;
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
