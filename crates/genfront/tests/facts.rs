//! Model facts are learned from the worker or given per worker, never guessed: a model with a
//! 201,088-token vocabulary is served end to end through direct mode (genfront → native mock
//! server), an id outside the vocabulary gets the engine's own 400 relayed when genfront does
//! not know the vocabulary, and `#vocab_size=…` on `--worker` lets genfront check it itself.
//! SGLang's `/server_info` through genfront relays what the worker reported.

use std::time::Duration;

use genfront::{ServeArgs, Server};
use genfront_mockserver::{Api, MockServerArgs, SpawnedMockServer, spawn};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A `o200k`-sized vocabulary (e.g. gpt-oss): ids up to 201,087 are valid.
const VOCAB: u32 = 201_088;

async fn mock(api: Api) -> SpawnedMockServer {
    let mut a = MockServerArgs::new(api);
    a.zero_delay = true;
    a.vocab_size = VOCAB;
    a.eos_probability = 0.0;
    spawn(&a).await.expect("mock server")
}

/// genfront in direct mode over `worker` (a `--worker` spec).
async fn genfront(worker: &str) -> (String, CancellationToken) {
    let args = ServeArgs::parse_from(["serve", "--worker", worker]);
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

fn spec(api: Api, m: &SpawnedMockServer, facts: &str) -> String {
    let kind = match api {
        Api::Sglang => "sglang",
        Api::Vllm => "vllm",
    };
    format!("{kind}={}{facts}", m.base_url())
}

fn body(api: Api, ids: &[u32]) -> Value {
    match api {
        Api::Sglang => json!({
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 4, "temperature": 0},
        }),
        Api::Vllm => json!({
            "token_ids": ids,
            "sampling_params": {"max_tokens": 4, "temperature": 0},
        }),
    }
}

async fn post(base: &str, api: Api, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{}", api.generate_path()))
        .json(body)
        .send()
        .await
        .expect("sent");
    let status = r.status().as_u16();
    let v = r.json::<Value>().await.expect("json body");
    (status, v)
}

fn output_ids(api: Api, v: &Value) -> Vec<u64> {
    let ids = match api {
        Api::Sglang => &v["output_ids"],
        Api::Vllm => &v["choices"][0]["token_ids"],
    };
    ids.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// The message of a native 400 (SGLang `{"error": {"message"}}` or the flat envelope; vLLM
/// `{"error": {"message"}}`).
fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .or_else(|| v["message"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn large_vocabulary_served_end_to_end_in_direct_mode() {
    for api in [Api::Sglang, Api::Vllm] {
        let m = mock(api).await;
        let (front, shutdown) = genfront(&spec(api, &m, "")).await;
        // `<|start|>` of a 201k-token model, the last id, and a small one.
        let prompt = [200_006, VOCAB - 1, 5];
        let (direct_status, direct) = post(&m.base_url(), api, &body(api, &prompt)).await;
        assert_eq!(direct_status, 200, "{api:?} mock: {direct}");
        let (status, through) = post(&front, api, &body(api, &prompt)).await;
        assert_eq!(status, 200, "{api:?} through genfront: {through}");
        let ids = output_ids(api, &through);
        assert_eq!(ids.len(), 4, "{api:?}: {through}");
        assert_eq!(
            ids,
            output_ids(api, &direct),
            "{api:?}: greedy, same engine"
        );
        shutdown.cancel();
        m.shutdown().await.expect("mock stops");
    }
}

#[tokio::test]
async fn unknown_vocabulary_relays_the_engines_own_400() {
    for api in [Api::Sglang, Api::Vllm] {
        let m = mock(api).await;
        let (front, shutdown) = genfront(&spec(api, &m, "")).await;
        let bad = body(api, &[1, VOCAB]);
        let (direct_status, direct) = post(&m.base_url(), api, &bad).await;
        assert_eq!(direct_status, 400, "{api:?} mock: {direct}");
        assert!(
            message(&direct).contains(&VOCAB.to_string()),
            "{api:?}: the engine names its vocabulary: {direct}"
        );
        let before = m.generate_requests();
        let (status, through) = post(&front, api, &bad).await;
        assert_eq!(status, 400, "{api:?} through genfront: {through}");
        assert_eq!(
            message(&through),
            message(&direct),
            "{api:?}: the engine's message is relayed"
        );
        // The engine saw the request: genfront did not refuse it with a guessed vocabulary.
        assert_eq!(
            m.generate_requests(),
            before + 1,
            "{api:?}: reached the engine"
        );
        assert_eq!(m.engine.completed(), 0, "{api:?}: nothing generated");
        shutdown.cancel();
        m.shutdown().await.expect("mock stops");
    }
}

#[tokio::test]
async fn per_worker_vocabulary_flag_checks_in_genfront() {
    for api in [Api::Sglang, Api::Vllm] {
        let m = mock(api).await;
        let (front, shutdown) = genfront(&spec(api, &m, &format!("#vocab_size={VOCAB}"))).await;
        let (status, ok) = post(&front, api, &body(api, &[VOCAB - 1])).await;
        assert_eq!(status, 200, "{api:?}: {ok}");
        let before = m.generate_requests();
        let (status, through) = post(&front, api, &body(api, &[1, VOCAB])).await;
        assert_eq!(status, 400, "{api:?}: {through}");
        assert_eq!(
            m.generate_requests(),
            before,
            "{api:?}: refused by genfront"
        );
        let (_, direct) = post(&m.base_url(), api, &body(api, &[1, VOCAB])).await;
        assert_eq!(
            message(&through),
            message(&direct),
            "{api:?}: genfront's own check says what the engine says"
        );
        shutdown.cancel();
        m.shutdown().await.expect("mock stops");
    }
}

#[tokio::test]
async fn server_info_relays_the_sglang_workers_document() {
    let m = mock(Api::Sglang).await;
    let (front, shutdown) = genfront(&spec(Api::Sglang, &m, "")).await;
    let client = reqwest::Client::new();
    let direct: Value = client
        .get(m.url("/server_info"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    for path in ["/server_info", "/get_server_info"] {
        let r = client
            .get(format!("{front}{path}"))
            .send()
            .await
            .expect("sent");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v, direct, "{path}: the worker's own document");
        assert_eq!(v["port"], m.addr.port());
        assert_eq!(v["skip_tokenizer_init"], true);
        assert!(v["max_req_input_len"].as_u64().is_some());
    }
    shutdown.cancel();
    m.shutdown().await.expect("mock stops");
}
