//! Through the hop: a mock engine behind a sidecar, reached with a remote engine, answers exactly
//! as the mock does in-process; engine errors keep their kind; the health service reports the
//! engine's readiness.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use genfront_mocker::{MockConfig, MockEngine, ScriptedFault};
use genfront_protocol::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, ErrorKind, FinishReason,
    OutputStream, PromptLogprobOptions,
};
use genfront_sidecar::{ENGINE_SERVICE_NAME, RemoteEngine};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use common::{eventually, request, start, start_with, within};

type Items = Vec<Result<EngineOutput, EngineError>>;

async fn run(engine: &dyn Engine, request: EngineRequest) -> Items {
    within(
        "stream end",
        engine.generate(request, CancellationToken::new()).collect(),
    )
    .await
}

/// Requests covering every output option the mock supports.
fn requests() -> Vec<EngineRequest> {
    let mut all = Vec::new();

    all.push(request(1, 8));

    let mut sampled = request(2, 6);
    sampled.sampling.n = 3;
    sampled.sampling.temperature = Some(0.8);
    sampled.sampling.top_p = Some(0.9);
    sampled.sampling.seed = Some(7);
    sampled.output.logprobs = Some(5);
    sampled.output.token_ids_logprobs = vec![1, 2, 3];
    all.push(sampled);

    let mut everything = request(3, 5);
    everything.sampling.n = 2;
    everything.sampling.temperature = Some(0.0);
    everything.output.logprobs = Some(2);
    everything.output.prompt_logprobs = Some(PromptLogprobOptions { start: 0, top_k: 3 });
    everything.output.token_ids_logprobs = vec![4, 5];
    everything.output.routed_experts = true;
    everything.output.routed_experts_start = 1;
    everything.output.sampling_mask = true;
    everything.handoff =
        Some(json!({"bootstrap_room": 5731906216386620393_u64, "host": "10.0.0.1"}));
    all.push(everything);

    let mut prefill_only = request(4, 0);
    prefill_only.output.prompt_logprobs = Some(PromptLogprobOptions { start: 2, top_k: 1 });
    prefill_only.output.routed_experts = true;
    all.push(prefill_only);

    // The same prompt again: the prefix cache now reports cached tokens.
    let mut stops = request(5, 40);
    stops.stop.ignore_eos = false;
    stops.stop.min_tokens = 2;
    stops.stop.stop_token_ids = vec![100, 200, 300];
    stops.sampling.temperature = Some(1.0);
    stops.sampling.top_k = Some(40);
    stops.routing.cache_salt = Some("salt".to_owned());
    all.push(stops);

    all
}

#[tokio::test]
async fn outputs_through_the_hop_equal_the_engine_in_process() {
    let direct = MockEngine::zero_delay();
    let served = MockEngine::zero_delay();
    let hop = start(&served).await;
    assert_eq!(hop.remote.info(), direct.info());

    for request in requests() {
        let expected = run(&direct, request.clone()).await;
        let got = run(&hop.remote, request.clone()).await;
        assert!(expected.iter().all(Result::is_ok), "{expected:?}");
        assert_eq!(got, expected, "request {}", request.request_id);
    }
    assert_eq!(served.stats(), direct.stats());
    assert!(served.completed() >= 5);
}

#[tokio::test]
async fn outputs_match_under_timing_and_across_clones() {
    let config = MockConfig {
        inter_token_latency: Duration::from_millis(1),
        ..MockConfig::zero_delay()
    };
    let direct = MockEngine::new(config.clone()).expect("valid config");
    let served = MockEngine::new(config).expect("valid config");
    let hop = start(&served).await;
    let remote: Arc<dyn Engine> = Arc::new(hop.remote.clone());
    let mut request = request(9, 12);
    request.sampling.n = 2;
    request.output.logprobs = Some(3);
    assert_eq!(
        run(remote.as_ref(), request.clone()).await,
        run(&direct, request).await
    );
}

#[tokio::test]
async fn engine_errors_keep_their_kind_and_message() {
    let faults = [
        "error@1:invalid_argument:bad: prompt",
        "error@2:overloaded:queue full",
        "fail-after@3:2:unavailable:engine died",
        "finish-error@4:1:kernel fault",
    ];
    let direct = MockEngine::zero_delay();
    let served = MockEngine::zero_delay();
    for fault in faults {
        let fault: ScriptedFault = fault.parse().expect("valid fault");
        direct.add_fault(fault.clone());
        served.add_fault(fault);
    }
    let hop = start(&served).await;

    let mut out_of_vocab = request(5, 3);
    out_of_vocab.token_ids.push(1_000_000);
    let mut stop_strings = request(6, 3);
    stop_strings.stop.stop = vec!["\n".to_owned()];

    let mut results = Vec::new();
    for request in [
        request(1, 3),
        request(2, 3),
        request(3, 5),
        request(4, 5),
        out_of_vocab,
        stop_strings,
    ] {
        let expected = run(&direct, request.clone()).await;
        let got = run(&hop.remote, request).await;
        assert_eq!(got, expected);
        results.push(got);
    }

    let first_error = |items: &Items| items.iter().find_map(|i| i.as_ref().err()).cloned();
    let e = first_error(&results[0]).expect("an error");
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::InvalidArgument, "bad: prompt")
    );
    let e = first_error(&results[1]).expect("an error");
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::Overloaded, "queue full")
    );
    let e = first_error(&results[2]).expect("an error");
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::Unavailable, "engine died")
    );
    assert_eq!(results[2].len(), 3, "two tokens, then the error");
    let last = results[3]
        .last()
        .and_then(|i| i.as_ref().ok())
        .expect("an item");
    assert_eq!(
        last.finish_reason,
        Some(FinishReason::Error {
            message: "kernel fault".to_owned()
        })
    );
    assert_eq!(
        first_error(&results[4]).map(|e| e.kind),
        Some(ErrorKind::InvalidArgument)
    );
    assert_eq!(
        first_error(&results[5]).map(|e| e.kind),
        Some(ErrorKind::Unsupported)
    );
}

/// An engine whose readiness the test switches.
struct Switched {
    mock: MockEngine,
    ready: Arc<AtomicBool>,
}

impl Engine for Switched {
    fn info(&self) -> &EngineInfo {
        self.mock.info()
    }
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        self.mock.generate(request, cancel)
    }
}

async fn check(addr: std::net::SocketAddr, service: &str) -> Result<ServingStatus, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("valid uri")
        .connect()
        .await
        .expect("connect the health client");
    let mut client = HealthClient::new(channel);
    let response = client
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await?;
    Ok(response.into_inner().status())
}

#[tokio::test]
async fn health_service_reports_engine_readiness() {
    let ready = Arc::new(AtomicBool::new(true));
    let engine = Arc::new(Switched {
        mock: MockEngine::zero_delay(),
        ready: Arc::clone(&ready),
    });
    let hop = start_with(engine, |s| s.health_poll_interval(Duration::from_millis(5))).await;

    assert_eq!(check(hop.addr, "").await.ok(), Some(ServingStatus::Serving));
    assert_eq!(
        check(hop.addr, ENGINE_SERVICE_NAME).await.ok(),
        Some(ServingStatus::Serving)
    );
    let unknown = check(hop.addr, "no.such.Service")
        .await
        .expect_err("unknown service");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    eventually("remote ready", || hop.remote.ready()).await;
    assert_eq!(hop.remote.probe(Duration::from_secs(5)).await, Ok(()));

    ready.store(false, Ordering::Relaxed);
    assert_eq!(
        check(hop.addr, "").await.ok(),
        Some(ServingStatus::NotServing)
    );
    let probed = hop.remote.probe(Duration::from_secs(5)).await;
    assert_eq!(probed.map_err(|e| e.kind), Err(ErrorKind::Unavailable));
    eventually("remote not ready", || !hop.remote.ready()).await;
    ready.store(true, Ordering::Relaxed);
    eventually("remote ready again", || hop.remote.ready()).await;

    hop.shutdown.cancel();
    eventually("remote not ready after shutdown", || !hop.remote.ready()).await;
    within("server stops", hop.server)
        .await
        .expect("server task")
        .expect("server result");
}

#[tokio::test]
async fn connect_accepts_grpc_http_and_bare_addresses() {
    let hop = start(&MockEngine::zero_delay()).await;
    for uri in [format!("http://{}", hop.addr), hop.addr.to_string()] {
        let remote = RemoteEngine::connect(&uri).await.expect("connect");
        assert_eq!(remote.uri(), uri);
        assert_eq!(run(&remote, request(1, 2)).await.len(), 2);
    }
    let e = RemoteEngine::connect(&format!("https://{}", hop.addr))
        .await
        .expect_err("no TLS");
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
}
