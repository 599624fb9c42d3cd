//! Prefill/decode disaggregation through genfront over **native mock servers** in P/D roles
//! (`genfront mocker --role prefill|decode`): for randomized requests of both formats the
//! answer through the pair equals the aggregated mock server's direct answer, field for field
//! (timing and minted ids excepted). The SGLang decode server learns its rooms from its prefill
//! peer over HTTP (`--prefill-peer`, `GET /_mock/room/{room}`), not from the process registry;
//! a decode server refuses a request without hand-off info with the native 400, and fails a
//! room whose prefill never comes after its `--kv-timeout`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::random::{fetch, normalize, sglang_request, stream_index, vllm_request};
use genfront::{ServeArgs, Server};
use genfront_mockserver::{Api, MockRole, MockServerArgs, SpawnedMockServer, spawn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Randomized requests compared per format.
const REQUESTS_PER_FORMAT: usize = 250;

/// genfront serving in-process on an ephemeral loopback port; stops when dropped.
struct Genfront {
    addr: SocketAddr,
    _stop: tokio_util::sync::DropGuard,
}

impl Genfront {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

async fn genfront(argv: &[String]) -> Genfront {
    let mut full = vec!["serve".to_owned()];
    full.extend(argv.iter().cloned());
    let args = ServeArgs::parse_from(full);
    let server = Server::build(&args).await.expect("genfront builds");
    assert!(
        server.wait_all_workers(Duration::from_secs(10)).await,
        "genfront sees both mock servers ready"
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(listener, stop.clone()));
    Genfront {
        addr,
        _stop: stop.drop_guard(),
    }
}

fn mock_args(api: Api, role: MockRole) -> MockServerArgs {
    let mut a = MockServerArgs::new(api);
    a.zero_delay = true;
    a.enable_return_routed_experts = true;
    a.role = role;
    a
}

/// An aggregated mock server, a prefill and a decode mock server (the decode asking the
/// prefill for its rooms), and genfront over the pair.
struct Setup {
    agg: SpawnedMockServer,
    prefill: SpawnedMockServer,
    decode: SpawnedMockServer,
    gf: Genfront,
}

async fn setup(api: Api) -> Setup {
    let agg = spawn(&mock_args(api, MockRole::Agg)).await.expect("agg");
    let prefill = spawn(&mock_args(api, MockRole::Prefill))
        .await
        .expect("prefill");
    let mut d = mock_args(api, MockRole::Decode);
    d.prefill_peer = Some(prefill.base_url());
    let decode = spawn(&d).await.expect("decode");
    let name = api.name();
    let gf = genfront(&[
        "--prefill".into(),
        format!("{name}={}", prefill.base_url()),
        "--decode".into(),
        format!("{name}={}", decode.base_url()),
    ])
    .await;
    Setup {
        agg,
        prefill,
        decode,
        gf,
    }
}

/// A batch of the request's prompt and its reverse, sometimes (SGLang only). The second prompt
/// has the first one's length, so `logprob_start_len` suits both: a streamed batch whose second
/// item the engine refuses is answered with only the error event through the pair, but with the
/// first item's events and then the error event by the aggregated server (see docs/pd.md).
fn maybe_batch(rng: &mut StdRng, mut body: Value) -> Value {
    if rng.random_bool(0.15) && body["sampling_params"]["n"].is_null() {
        let first = body["input_ids"].clone();
        let mut second: Vec<Value> = first.as_array().cloned().unwrap_or_default();
        second.reverse();
        body["input_ids"] = json!([first, second]);
        if let Some(o) = body.as_object_mut() {
            o.remove("rid");
        }
    }
    body
}

/// Ids minted per request (SGLang `meta_info.id` of batches and samples).
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

/// Send `n` randomized requests to the aggregated mock server and through genfront P/D; panic on
/// the first difference. Returns how many were compared.
async fn differential(api: Api, n: usize, seed: u64) -> usize {
    let s = setup(api).await;
    let path = api.generate_path();
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    for i in 0..n {
        let body = match api {
            Api::Sglang => {
                let b = sglang_request(&mut rng, i);
                maybe_batch(&mut rng, b)
            }
            Api::Vllm => vllm_request(&mut rng, i),
        };
        let (s1, mut want) = fetch(&client, &s.agg.url(path), &body).await;
        let (s2, mut got) = fetch(&client, &s.gf.url(path), &body).await;
        let regenerated = body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1
            || body["input_ids"][0].is_array();
        for v in want.iter_mut().chain(got.iter_mut()) {
            normalize(v, regenerated);
            strip_ids(v);
        }
        want.sort_by_key(stream_index);
        got.sort_by_key(stream_index);
        assert_eq!(
            (s1, got.len()),
            (s2, want.len()),
            "{api:?} status/event count differs for request {i}: {body}\nP/D: {}\naggregated: {}",
            Value::from(got.clone()),
            Value::from(want.clone())
        );
        assert_eq!(
            Value::from(got),
            Value::from(want),
            "{api:?} request {i} differs: {body}"
        );
        compared += 1;
    }
    for m in [&s.prefill, &s.decode] {
        assert!(m.wait_idle(Duration::from_secs(1)).await, "no leg running");
    }
    assert_eq!(s.decode.engine.failed(), 0);
    assert_eq!(s.prefill.engine.completed(), s.decode.engine.completed());
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_pd_over_mock_servers_equals_aggregated_mock_server() {
    let n = differential(Api::Sglang, REQUESTS_PER_FORMAT, 31).await;
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_pd_over_mock_servers_equals_aggregated_mock_server() {
    let n = differential(Api::Vllm, REQUESTS_PER_FORMAT, 32).await;
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_mock_server_refuses_a_request_without_handoff() {
    let client = reqwest::Client::new();
    for (api, body) in [
        (
            Api::Sglang,
            json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}}),
        ),
        (
            Api::Vllm,
            json!({"token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 2}}),
        ),
    ] {
        for role in [MockRole::Decode, MockRole::Prefill] {
            let m = spawn(&mock_args(api, role)).await.expect("mock");
            let r = client
                .post(m.url(api.generate_path()))
                .json(&body)
                .send()
                .await
                .expect("answer");
            let status = r.status().as_u16();
            let text = r.text().await.expect("body");
            assert_eq!(status, 400, "{api:?} {role:?}: {text}");
            assert!(text.contains("mode"), "{api:?} {role:?}: {text}");
            assert_eq!(m.engine.started(), 0);
        }
    }
    // genfront serve's own SGLang format accepts a client's bootstrap fields as SGLang does
    // (an aggregated engine ignores them; on a P/D route the router's replace them).
    let gf = genfront(&["--mock-zero-delay".into()]).await;
    let r = client
        .post(gf.url("/generate"))
        .json(&json!({"input_ids": [5, 6], "bootstrap_room": 7}))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_mock_server_waits_for_its_peer_then_times_out_or_is_cancelled() {
    let prefill = spawn(&mock_args(Api::Sglang, MockRole::Prefill))
        .await
        .expect("prefill");
    let mut d = mock_args(Api::Sglang, MockRole::Decode);
    d.prefill_peer = Some(prefill.base_url());
    d.kv_timeout = Duration::from_millis(300);
    let decode = spawn(&d).await.expect("decode");
    let client = reqwest::Client::new();
    let room: u64 = rand::random::<u64>() >> 1;
    let body = json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2},
                      "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998,
                      "bootstrap_room": room});
    let state = client
        .get(prefill.url(&format!("/_mock/room/{room}")))
        .send()
        .await
        .expect("room")
        .json::<Value>()
        .await
        .expect("json");
    assert_eq!(state, json!({"room": room, "state": "pending"}));

    // No prefill for the room: the decode fails once the KV timeout is over.
    let t0 = Instant::now();
    let r = client
        .post(decode.url("/generate"))
        .json(&body)
        .send()
        .await
        .expect("answer");
    let took = t0.elapsed();
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    // The engine's internal error, as the frontend renders one (its message is not relayed).
    assert_eq!(status, 500, "{text}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(decode.engine.failed(), 1);

    // A waiting decode is cancelled by its client going away.
    let mut waiting = body.clone();
    waiting["bootstrap_room"] = json!(room ^ 1);
    let url = decode.url("/generate");
    let c = client.clone();
    let pending = tokio::spawn(async move { c.post(url).json(&waiting).send().await });
    let deadline = Instant::now() + Duration::from_secs(2);
    while decode.engine.running() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(decode.engine.running(), 1, "decode waits for its room");
    pending.abort();
    assert!(decode.wait_idle(Duration::from_secs(1)).await);
    assert_eq!(decode.engine.aborted(), 1);

    // The prefill publishes the room: the peer's route says ready, and a decode for it runs.
    let mut pre = body.clone();
    pre["bootstrap_room"] = json!(room ^ 2);
    let r = client
        .post(prefill.url("/generate"))
        .json(&pre)
        .send()
        .await
        .expect("prefill answer");
    assert_eq!(r.status().as_u16(), 200);
    let state = client
        .get(prefill.url(&format!("/_mock/room/{}", room ^ 2)))
        .send()
        .await
        .expect("room")
        .json::<Value>()
        .await
        .expect("json");
    assert_eq!(state["state"], "ready");
    let r = client
        .post(decode.url("/generate"))
        .json(&pre)
        .send()
        .await
        .expect("decode answer");
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
    assert_eq!(decode.engine.completed(), 1);
}
