//! Prefill/decode disaggregation through genfront against the independent Python oracle
//! (`../shared/oracle/oracle_engine.py` run with `--role prefill|decode`): for randomized
//! requests of both formats the P/D answer equals the aggregated oracle's answer field for field
//! (timing and minted-id fields excepted), and failing or abandoned legs end on both workers, as
//! the oracles' own logs show.
//!
//! Prefix-cache hits (`cached_tokens`) are compared too: the aggregated oracle and the prefill
//! oracle see the same prompts in the same order, and under P/D `cached_tokens` is the prefill
//! leg's. Only where SGLang itself races (parallel samples and batch rows, which start
//! concurrently) is it excluded, as `normalize` does.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::oracle::Oracle;
use common::random::{fetch, normalize, sglang_request, stream_index, vllm_request};
use genfront::{ServeArgs, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Randomized requests compared per format.
const REQUESTS_PER_FORMAT: usize = 1000;

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

/// Start genfront with `argv` (after `serve`) and wait until it is ready.
async fn genfront(argv: &[String]) -> Genfront {
    let mut full = vec!["serve".to_owned()];
    full.extend(argv.iter().cloned());
    let args = ServeArgs::parse_from(full);
    let server = Server::build(&args).await.expect("genfront builds");
    assert!(
        server.wait_ready(Duration::from_secs(10)).await,
        "genfront ready over the oracles"
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

/// An aggregated oracle, a prefill oracle and a decode oracle waiting on that prefill's rooms,
/// and genfront over the pair.
struct PdSetup {
    agg: Oracle,
    prefill: Oracle,
    decode: Oracle,
    gf: Genfront,
}

async fn pd_setup(api: &str, extra: &[&str]) -> PdSetup {
    let mut base = vec!["--api", api, "--skip-tokenizer-init"];
    base.extend_from_slice(extra);
    let with = |more: &[&str]| {
        let mut a = base.clone();
        a.extend_from_slice(more);
        Oracle::start(&a)
    };
    let agg = with(&[]);
    let prefill = with(&["--role", "prefill"]);
    let peer = prefill.base_url();
    let decode = with(&["--role", "decode", "--prefill-peer", &peer]);
    let gf = genfront(&[
        "--prefill".into(),
        format!("{api}={}", prefill.base_url()),
        "--decode".into(),
        format!("{api}={}", decode.base_url()),
    ])
    .await;
    PdSetup {
        agg,
        prefill,
        decode,
        gf,
    }
}

/// A batch of the request's prompt and its reverse, sometimes (SGLang only).
fn maybe_batch(rng: &mut StdRng, mut body: Value) -> Value {
    if rng.random_bool(0.15) && body["sampling_params"]["n"].is_null() {
        // The second prompt has the first one's length, so `logprob_start_len` suits both.
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

/// Ids minted per request (SGLang `meta_info.id`).
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

/// Where the oracle knowingly departs from the engine whose source genfront follows, make the
/// aggregated answer what that engine gives (each case is named in the report of this test):
///
/// - SGLang, `logprob_start_len > 0`: SGLang pads the first returned prompt position with `None`
///   whatever the start (`scheduler_output_processor_mixin.py` `_process_input_token_logprobs`:
///   `[None] + input_token_logprobs[:-1]`; `[None]` first for the top and token-id lists too);
///   the oracle gives that position a real logprob.
/// - vLLM: `decoded_token` in `prompt_logprobs` — genfront has no tokenizer and renders `null`
///   (`crates/backends/vllm/src/logprobs.rs`), as vLLM does without one; the oracle fills the
///   strings even under `--skip-tokenizer-init`. Not a P/D question (aggregated genfront does the
///   same), so it is blanked on both sides.
/// - vLLM SSE: a non-final chunk's `weight_versions` — genfront writes `null` (a pydantic field
///   left `None` is dumped as `null` by `model_dump_json(exclude=…)`, which excludes only
///   `prompt_token_ids`, `mm_placeholders`, `metrics`), the oracle omits the key. Also not a P/D
///   question; a `null` is dropped on both sides. Likewise the `null`
///   `prompt_tokens_details`/`completion_tokens_details` of a stream chunk's continuous `usage`
///   (genfront writes them, as `UsageInfo` dumped without `exclude_none` does; the oracle omits
///   them).
fn oracle_deviations(api: &str, body: &Value, want: &mut [Value], got: &mut [Value]) {
    if api == "sglang" {
        let start = body["logprob_start_len"].as_i64().unwrap_or(-1);
        if body["return_logprob"] == json!(true) && start > 0 {
            for v in want.iter_mut() {
                for_each_object(v, &mut |o| {
                    let Some(Value::Object(m)) = o.get_mut("meta_info") else {
                        return;
                    };
                    if let Some(first) = m
                        .get_mut("input_token_logprobs")
                        .and_then(|l| l.get_mut(0))
                        .and_then(|e| e.get_mut(0))
                    {
                        *first = Value::Null;
                    }
                    for key in ["input_top_logprobs", "input_token_ids_logprobs"] {
                        if let Some(first) = m.get_mut(key).and_then(|l| l.get_mut(0)) {
                            *first = Value::Null;
                        }
                    }
                });
            }
        }
    } else {
        for v in want.iter_mut().chain(got.iter_mut()) {
            if let Some(Value::Object(u)) = v.get_mut("usage") {
                for key in ["prompt_tokens_details", "completion_tokens_details"] {
                    if u.get(key) == Some(&Value::Null) {
                        u.remove(key);
                    }
                }
            }
            if let Some(Value::Array(choices)) = v.get_mut("choices") {
                for c in choices.iter_mut().filter_map(Value::as_object_mut) {
                    if c.get("weight_versions") == Some(&Value::Null) {
                        c.remove("weight_versions");
                    }
                }
            }
            if let Some(Value::Array(rows)) = v.get_mut("prompt_logprobs") {
                for row in rows.iter_mut().filter_map(Value::as_object_mut) {
                    for cand in row.values_mut().filter_map(Value::as_object_mut) {
                        cand.insert("decoded_token".into(), Value::Null);
                    }
                }
            }
        }
    }
}

/// Call `f` on `v` when it is an object, or on each object of an array (SGLang batches).
fn for_each_object(v: &mut Value, f: &mut dyn FnMut(&mut serde_json::Map<String, Value>)) {
    match v {
        Value::Object(o) => f(o),
        Value::Array(items) => items.iter_mut().for_each(|x| for_each_object(x, f)),
        _ => {}
    }
}

/// JSON-pointer paths where `a` and `b` differ (at most a few), for failure messages.
fn diff_paths(a: &Value, b: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (x.get(k), y.get(k));
                if va != vb {
                    out.extend(diff_paths(
                        va.unwrap_or(&Value::Null),
                        vb.unwrap_or(&Value::Null),
                        &format!("{at}/{k}"),
                    ));
                    if va.is_none() || vb.is_none() {
                        out.push(format!("{at}/{k} (missing on one side)"));
                    }
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (j, (va, vb)) in x.iter().zip(y).enumerate() {
                if va != vb {
                    out.extend(diff_paths(va, vb, &format!("{at}/{j}")));
                }
            }
        }
        _ if a != b => out.push(format!("{at}: {a} != {b}")),
        _ => {}
    }
    out.truncate(6);
    out
}

/// The last request each leg's oracle logged (what genfront sent and what it answered), for
/// failure messages.
async fn last_legs(s: &PdSetup) -> String {
    let mut out = String::new();
    for (name, o) in [("prefill", &s.prefill), ("decode", &s.decode)] {
        let log = o.log().await;
        let last = log["requests"]
            .as_array()
            .map(|r| Value::from(r[r.len().saturating_sub(2)..].to_vec()));
        out.push_str(&format!("\n{name}: {}", last.unwrap_or_default()));
    }
    out
}

/// Send `n` randomized requests to the aggregated oracle directly and through genfront P/D;
/// panic on the first difference. Returns how many were compared.
async fn differential(api: &str, n: usize, seed: u64) -> usize {
    // SGLang asks for routed experts per request (`max_new_tokens: 0` included). vLLM reports
    // them for every request when the server runs with `--enable-return-routed-experts`
    // (whole-sequence blob, on a stream's final chunk): the three vLLM oracles toggle that
    // server setting together before each request, so about half the requests carry them.
    let s = pd_setup(api, &[]).await;
    let path = if api == "sglang" {
        "/generate"
    } else {
        "/inference/v1/generate"
    };
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    for i in 0..n {
        let body = if api == "sglang" {
            let mut b = sglang_request(&mut rng, i);
            // SGLang `n > 1` is left out: genfront sends parallel samples as separate engine
            // requests with the client's `sampling_seed`, which the oracle (keyed on the sample
            // index) answers with one token stream for all; whether SGLang's seeded sampler does
            // the same is a sampling question, not a P/D one (the mock differential covers it).
            if let Some(sp) = b["sampling_params"].as_object_mut() {
                sp.remove("n");
            }
            maybe_batch(&mut rng, b)
        } else {
            let routed = rng.random_bool(0.5);
            for o in [&s.agg, &s.prefill, &s.decode] {
                o.config(json!({"routed_experts": routed})).await;
            }
            vllm_request(&mut rng, i)
        };
        let (s1, mut want) = fetch(&client, &s.agg.url(path), &body).await;
        let (s2, mut got) = fetch(&client, &s.gf.url(path), &body).await;
        let regenerated = body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1
            || body["input_ids"][0].is_array();
        for v in want.iter_mut().chain(got.iter_mut()) {
            normalize(v, regenerated);
            strip_ids(v);
        }
        oracle_deviations(api, &body, &mut want, &mut got);
        want.sort_by_key(stream_index);
        got.sort_by_key(stream_index);
        assert_eq!(
            s1,
            s2,
            "{api} status differs for request {i}: {body}\nP/D: {}\naggregated: {}",
            Value::from(got.clone()),
            Value::from(want.clone())
        );
        if got != want {
            let legs = last_legs(&s).await;
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            let paths = diff_paths(
                got.get(first).unwrap_or(&Value::Null),
                want.get(first).unwrap_or(&Value::Null),
                "",
            );
            panic!(
                "{api} request {i} differs ({} vs {} events, first at {first}) at {paths:?}\nrequest: {body}\nP/D: {}\naggregated: {}\nlegs: {legs}",
                got.len(),
                want.len(),
                got.get(first).map(Value::to_string).unwrap_or_default(),
                want.get(first).map(Value::to_string).unwrap_or_default(),
            );
        }
        compared += 1;
    }
    for o in [&s.prefill, &s.decode] {
        assert_eq!(o.log().await["running"], json!([]), "no leg left running");
    }
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_randomized_requests_pd_equals_aggregated_oracle() {
    let n = differential("sglang", REQUESTS_PER_FORMAT, 21).await;
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_randomized_requests_pd_equals_aggregated_oracle() {
    let n = differential("vllm", REQUESTS_PER_FORMAT, 22).await;
    assert_eq!(n, REQUESTS_PER_FORMAT);
}

/// The harness starts an oracle, talks to it, and leaves no process behind when dropped.
#[tokio::test]
async fn oracle_harness_smoke() {
    let oracle = Oracle::start(&["--api", "sglang", "--skip-tokenizer-init"]);
    let (status, body) = oracle
        .post_text(
            "/generate",
            &json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let log = oracle.log().await;
    assert_eq!(log["requests"].as_array().map(Vec::len), Some(1), "{log}");
    oracle.reset().await;
    assert_eq!(oracle.log().await["requests"], json!([]));
    let pid = oracle.pid();
    drop(oracle);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "oracle {pid} still alive after drop"
    );
}
