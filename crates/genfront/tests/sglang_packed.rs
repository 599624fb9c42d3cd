//! The `sglang-packed` format end to end on in-process mocks: for randomized SGLang requests
//! (unary and SSE, every logprob option, batches, `n > 1`, routed experts), the packed request
//! (`input_ids` as `{"b64zstd": …}`, whole or per row, and `"packed_output": true`) answers,
//! once unpacked, exactly what the plain request answers on SGLang's `/generate` — aggregated and
//! through a prefill/decode pair; malformed packing is SGLang's 400 naming the field.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::random::{fetch, normalize, sglang_request, stream_index};
use genfront::{ServeArgs, Server};
use genfront_sglang_packed::answer::unpack_answer;
use genfront_sglang_packed::codec::pack;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

struct Running {
    addr: SocketAddr,
    _stop: tokio_util::sync::DropGuard,
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

async fn start(argv: &[&str]) -> Running {
    let mut full = vec![
        "serve",
        "--mock-zero-delay",
        "--mock-prefix-cache-block-size",
        "0",
    ];
    full.extend_from_slice(argv);
    let server = Server::build(&ServeArgs::parse_from(full))
        .await
        .expect("genfront builds");
    assert!(server.wait_ready(Duration::from_secs(5)).await);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(listener, stop.clone()));
    Running {
        addr,
        _stop: stop.drop_guard(),
    }
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .map(|n| n as u32)
                .collect()
        })
        .unwrap_or_default()
}

/// `body` with its ids packed (a batch: every other row, starting at a random one) and a packed
/// answer asked for.
fn packed(rng: &mut StdRng, body: &Value) -> Value {
    let mut p = body.clone();
    let ids = &body["input_ids"];
    p["input_ids"] = if ids[0].is_array() {
        let first = usize::from(rng.random_bool(0.5));
        let rows: Vec<Value> = ids
            .as_array()
            .map(|rows| {
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| {
                        if i % 2 == first {
                            json!({"b64zstd": pack(&ids_of(r))})
                        } else {
                            r.clone()
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Value::Array(rows)
    } else {
        json!({"b64zstd": pack(&ids_of(ids))})
    };
    p["packed_output"] = json!(true);
    p
}

/// A randomized SGLang request, sometimes a batch of two prompts.
fn request(rng: &mut StdRng, i: usize) -> Value {
    let mut body = sglang_request(rng, i);
    if rng.random_bool(0.2) && body["sampling_params"]["n"].is_null() {
        let first = body["input_ids"].clone();
        body["input_ids"] = json!([first, [11, 12, 13]]);
        if let Some(o) = body.as_object_mut() {
            o.remove("rid");
        }
    }
    body
}

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

/// Plain requests to `plain` at `/generate` against their packed twins to `packed` at
/// `/generate_packed`: every answer (and every SSE event), unpacked, equal.
async fn differential(plain: &Running, packed_server: &Running, n: usize, seed: u64) -> usize {
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut packed_fields = 0;
    for i in 0..n {
        let body = request(&mut rng, i);
        let packed_body = packed(&mut rng, &body);
        let (s1, mut want) = fetch(&client, &plain.url("/generate"), &body).await;
        let (s2, mut got) = fetch(
            &client,
            &packed_server.url("/generate_packed"),
            &packed_body,
        )
        .await;
        assert_eq!(s1, s2, "status differs for request {i}: {body}");
        for v in &mut got {
            let text = v.to_string();
            if s2 == 200 && text.contains("b64zstd") {
                packed_fields += 1;
            }
            assert!(
                s2 != 200 || !text.contains("\"output_ids\":[") || text.contains("\"error\""),
                "output_ids not packed: {text}"
            );
            unpack_answer(v, 1 << 24).unwrap_or_else(|e| panic!("request {i}: {e}: {text}"));
        }
        let regenerated = body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1
            || body["input_ids"][0].is_array();
        for v in want.iter_mut().chain(got.iter_mut()) {
            normalize(v, regenerated);
            strip_ids(v);
        }
        want.sort_by_key(stream_index);
        got.sort_by_key(stream_index);
        if got != want {
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "request {i} differs ({} vs {} events, first at {first})\nrequest: {body}\npacked: {}\nplain: {}",
                got.len(),
                want.len(),
                got.get(first).map(Value::to_string).unwrap_or_default(),
                want.get(first).map(Value::to_string).unwrap_or_default(),
            );
        }
    }
    packed_fields
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_answers_unpack_to_the_plain_answers() {
    let s = start(&["--mock", "1", "--route", "/generate_packed=sglang-packed"]).await;
    let packed = differential(&s, &s, 300, 21).await;
    assert!(
        packed > 300,
        "answers were packed ({packed} packed answers)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_answers_through_a_prefill_decode_pair_equal_the_aggregated_plain_ones() {
    let agg = start(&["--mock", "1"]).await;
    let pd = start(&[
        "--mock-prefill",
        "1",
        "--mock-decode",
        "1",
        "--route",
        "/generate_packed=sglang-packed",
    ])
    .await;
    let packed = differential(&agg, &pd, 200, 22).await;
    assert!(packed > 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_streams_pack_each_chunk() {
    let s = start(&[
        "--mock",
        "1",
        "--sglang-incremental-streaming",
        "--route",
        "/generate_packed=sglang-packed",
    ])
    .await;
    differential(&s, &s, 100, 23).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_for_generate_it_serves_generate_and_plain_bodies_stay_sglangs() {
    let s = start(&["--mock", "1", "--generate-format", "sglang-packed"]).await;
    let client = reqwest::Client::new();
    let plain =
        json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3, "temperature": 0}});
    let (st, a) = fetch(&client, &s.url("/generate"), &plain).await;
    assert_eq!(st, 200);
    assert!(
        a[0]["output_ids"].is_array(),
        "no packed_output: plain answer"
    );
    let mut p = plain.clone();
    p["input_ids"] = json!({"b64zstd": pack(&[5, 6, 7])});
    p["packed_output"] = json!(true);
    let (st, mut b) = fetch(&client, &s.url("/generate"), &p).await;
    assert_eq!(st, 200);
    unpack_answer(&mut b[0], 1 << 20).expect("unpacks");
    assert_eq!(b[0]["output_ids"], a[0]["output_ids"]);
    // SGLang's own abort route is this format's.
    let r = client
        .post(s.url("/abort_request"))
        .json(&json!({"rid": "nothing-running"}))
        .send()
        .await
        .expect("abort");
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_packing_is_a_400_naming_the_field() {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let s = start(&[
        "--mock",
        "1",
        "--route",
        "/generate_packed=sglang-packed",
        "--sglang-packed-max-unpacked-bytes",
        "1048576",
    ])
    .await;
    let bomb = b64(&zstd::bulk::compress(&vec![0u8; 32 << 20], 19).expect("z"));
    let cases = [
        (
            json!({"input_ids": {"b64zstd": "not*base64"}}),
            "body.input_ids: b64zstd is not valid base64",
        ),
        (
            json!({"input_ids": {"b64zstd": b64(b"garbage!")}}),
            "body.input_ids: b64zstd is not a valid zstd stream",
        ),
        (
            json!({"input_ids": {"b64zstd": b64(&zstd::bulk::compress(&[1, 0, 0, 0, 2, 0], 3).expect("z"))}}),
            "body.input_ids: b64zstd decompresses to 6 bytes",
        ),
        (
            json!({"input_ids": [[1, 2], {"b64zstd": bomb}], "stream": true}),
            "body.input_ids.1: b64zstd decompresses to more than",
        ),
        (
            json!({"input_ids": {"b64zstd": pack(&[1, 150_000_000])}}),
            "The input_ids",
        ),
        (
            json!({"input_ids": [1], "packed_output": "yes"}),
            "body.packed_output: Input should be a valid boolean",
        ),
    ];
    let client = reqwest::Client::new();
    for (body, start) in cases {
        let r = client
            .post(s.url("/generate_packed"))
            .json(&body)
            .send()
            .await
            .expect("sent");
        assert_eq!(r.status().as_u16(), 400, "{body}");
        let v: Value = r.json().await.expect("json");
        let m = v["message"]
            .as_str()
            .or_else(|| v["error"]["message"].as_str())
            .unwrap_or_default();
        assert!(m.starts_with(start), "{m:?} should start with {start:?}");
    }
    // Still serving.
    let (st, _) = fetch(
        &client,
        &s.url("/generate_packed"),
        &json!({"input_ids": {"b64zstd": pack(&[3, 4])}, "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(st, 200);
}
