//! Direct mode against the independent Python oracle (`../shared/oracle/oracle_engine.py`):
//! genfront with `--worker sglang=<oracle>` / `vllm=<oracle>` answers exactly what the oracle
//! answers when called directly, field for field (timing and minted-id fields excepted), for
//! randomized requests per format against an oracle **with** a tokenizer (text, stop strings,
//! `matched` strings, text prompts) and one **without** (`--skip-tokenizer-init`: the native
//! refusals), unary and SSE, stop strings and stop ids, the logprob options. Plus the UTF-8 split
//! case, the 201k-vocabulary case, status relay and SGLang's server-info routes.
//!
//! Each configuration runs two identical oracles — one called directly, one behind genfront —
//! fed the same requests in the same order, so their prefix caches (`cached_tokens`) agree.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::oracle::Oracle;
use common::random::{
    fetch, normalize, pick, sglang_request, sglang_text_in_logprobs, stream_index,
    tokens_logprobs_as_text, vllm_request, vllm_text_mode,
};
use genfront::{ServeArgs, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Randomized requests compared per format and tokenizer mode.
const REQUESTS: usize = 500;

/// Stop strings that the oracle's toy detokenizer (`" " + base-26 letters` per token) produces
/// often enough to end generations early.
const STOP_STRINGS: &[&str] = &["a", " b", "zz", "q"];

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
        server.wait_ready(Duration::from_secs(10)).await,
        "genfront ready over the oracle"
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

/// One configuration: the oracle called directly, its twin behind genfront, and genfront.
struct Setup {
    direct: Oracle,
    behind: Oracle,
    gf: Genfront,
}

async fn setup(api: &str, tokenizer: bool) -> Setup {
    let mut args = vec!["--api", api];
    if !tokenizer {
        args.push("--skip-tokenizer-init");
    }
    let direct = Oracle::start(&args);
    let behind = Oracle::start(&args);
    let gf = genfront(&["--worker".into(), format!("{api}={}", behind.base_url())]).await;
    Setup { direct, behind, gf }
}

fn path(api: &str) -> &'static str {
    if api == "sglang" {
        "/generate"
    } else {
        "/inference/v1/generate"
    }
}

/// A randomized SGLang request with the text features on top of the token ones.
fn sglang_text_request(rng: &mut StdRng, i: usize, tokenizer: bool) -> Value {
    let mut body = sglang_request(rng, i);
    let sp = &mut body["sampling_params"];
    random_samples_only_greedy(sp);
    // UNRESOLVED (oracle vs SGLang): the oracle run with `--skip-tokenizer-init` accepts stop
    // strings that SGLang's `SamplingParams.normalize(None)` refuses (genfront gives SGLang's
    // message), so they are sent only to the oracle with a tokenizer.
    if tokenizer && rng.random_bool(0.4) {
        sp["stop"] = if rng.random_bool(0.5) {
            json!(pick(rng, STOP_STRINGS))
        } else {
            json!([pick(rng, STOP_STRINGS), pick(rng, STOP_STRINGS)])
        };
        if rng.random_bool(0.3) {
            sp["no_stop_trim"] = json!(true);
        }
    }
    // UNRESOLVED (oracle vs SGLang): likewise `min_new_tokens > 0`, which SGLang 0.5.23's
    // `SamplingParams.normalize(None)` refuses (`raise_if_tokenizer_required`,
    // sglang/srt/sampling/sampling_params.py: "…unavailable when skip_tokenizer_init=True…") and
    // genfront with it; the oracle without a tokenizer accepts it.
    if rng.random_bool(0.2) {
        let choices: &[u32] = if tokenizer { &[0, 1, 2] } else { &[0] };
        sp["min_new_tokens"] = json!(pick(rng, choices));
    }
    // A text prompt: only an engine with a tokenizer takes it. UNRESOLVED (oracle vs SGLang):
    // the oracle with `--skip-tokenizer-init` tokenizes text prompts anyway, where SGLang
    // refuses them ("…skip_tokenizer_init=True cannot accept text prompts…"), so only the oracle
    // with a tokenizer gets them.
    if tokenizer
        && rng.random_bool(0.1)
        && sp["n"].is_null()
        && let Some(o) = body.as_object_mut()
    {
        // Logprob options stay: the prompt's ids, its length and the padded first position's id
        // come only from the engine (genfront has no tokenizer).
        o.remove("input_ids");
        o.remove("return_routed_experts");
        o.insert("text".into(), json!("hello oracle"));
    }
    // Decoded token text in the logprob triples: strings from the oracle with a tokenizer,
    // `null` from the one without (`return_text_in_logprobs and not skip_tokenizer_init`).
    sglang_text_in_logprobs(rng, &mut body);
    body
}

fn vllm_text_request(rng: &mut StdRng, i: usize) -> Value {
    let mut body = vllm_request(rng, i);
    let sp = &mut body["sampling_params"];
    random_samples_only_greedy(sp);
    if rng.random_bool(0.4) {
        sp["stop"] = json!([pick(rng, STOP_STRINGS)]);
        if rng.random_bool(0.3) {
            sp["include_stop_str_in_output"] = json!(true);
        }
    }
    // `output_mode: "text"`: relayed from the oracle with a tokenizer, refused with vLLM's
    // message by genfront for the one without.
    vllm_text_mode(rng, &mut body);
    body
}

/// Parallel samples only with greedy sampling: genfront sends each sample as its own engine
/// request (as SGLang's tokenizer manager does), and which random sample each one draws is not
/// something two engine runs agree on (the oracle keys it by the sample index).
fn random_samples_only_greedy(sp: &mut Value) {
    if sp["n"].as_u64().unwrap_or(1) > 1 && sp["temperature"].as_f64() != Some(0.0) {
        sp["temperature"] = json!(0.0);
    }
}

/// Timing fields and minted ids. `k`: the request's vLLM `logprobs` (text-mode logprobs).
fn strip(v: &mut Value, regenerated: bool, k: i64) {
    normalize(v, regenerated);
    match v {
        Value::Array(items) => items.iter_mut().for_each(|x| strip(x, regenerated, k)),
        Value::Object(o) => {
            if let Some(Value::Object(m)) = o.get_mut("meta_info") {
                // Fresh uuid rids when the client sent none.
                m.remove("id");
                // ORACLE differs from SGLang here: SGLang pads the first returned prompt
                // position with `None` whatever `logprob_start_len` is
                // (scheduler_output_processor_mixin.py `_process_input_token_logprobs`:
                // `[None] + input_token_logprobs[:-1]`; genfront commit e095866); the oracle
                // pads only position 0. The first entry of each input list is not compared,
                // except its token id and decoded text (`return_text_in_logprobs`), which both
                // have.
                for k in [
                    "input_token_logprobs",
                    "input_top_logprobs",
                    "input_token_ids_logprobs",
                ] {
                    if let Some(Value::Array(l)) = m.get_mut(k)
                        && let Some(first) = l.first_mut()
                    {
                        match first {
                            Value::Array(t) if k == "input_token_logprobs" && t.len() == 3 => {
                                t[0] = Value::Null;
                            }
                            _ => *first = Value::Null,
                        }
                    }
                }
            }
            // ORACLE differs from vLLM here: in `output_mode: "text"` the oracle writes the
            // tokens-shape logprobs (`token_id`, `rank`); vLLM 0.33.0 writes
            // `ChatCompletionLogProbs` (`_create_text_logprobs`: `token`, `logprob`, `bytes`,
            // the sampled-first list cut to `max(k, 1)`). genfront relays the engine's decoded
            // tokens in vLLM's shape, and where the engine gave none (this oracle) writes vLLM's
            // no-tokenizer form, `"token_id:N"` with `bytes: null`; the oracle's answer is
            // compared after the same mapping (ids, logprobs, order and cut all checked).
            if o.get("output_mode") == Some(&json!("text"))
                && let Some(Value::Array(choices)) = o.get_mut("choices")
            {
                for c in choices.iter_mut() {
                    if let Some(lp) = c.get_mut("logprobs").filter(|l| !l.is_null()) {
                        tokens_logprobs_as_text(lp, k);
                    }
                }
            }
            // UNRESOLVED (genfront vs oracle): vLLM stream chunks before the last carry
            // `"weight_versions": null` through genfront; the oracle omits the key
            // (spec/vllm-native.md §7 says "final chunk only" without saying which).
            // UNRESOLVED (genfront vs oracle): with `continuous_usage_stats`, genfront's chunk
            // usage carries `"prompt_tokens_details": null, "completion_tokens_details": null`;
            // the oracle omits them.
            if let Some(Value::Object(u)) = o.get_mut("usage") {
                u.retain(|_, v| !v.is_null());
            }
            if let Some(Value::Array(choices)) = o.get_mut("choices") {
                for c in choices.iter_mut().filter_map(Value::as_object_mut) {
                    if c.get("weight_versions") == Some(&Value::Null) {
                        c.remove("weight_versions");
                    }
                }
            }
        }
        _ => {}
    }
}

/// What a differential run compared.
#[derive(Debug, Default)]
struct Counts {
    /// Requests compared.
    compared: usize,
    /// Answers that carried a `text` key.
    with_text: usize,
    /// 200 answers to requests that asked for decoded tokens (SGLang `return_text_in_logprobs`
    /// with logprobs, vLLM `output_mode: "text"`).
    decoded: usize,
    /// Of those, the ones with decoded token strings in the logprobs.
    decoded_strings: usize,
}

/// An SGLang answer (or chunk, or batch) with a logprob triple whose text slot is a string.
fn has_decoded_triple(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(has_decoded_triple),
        Value::Object(o) => o.get("meta_info").is_some_and(|m| {
            ["output_token_logprobs", "input_token_logprobs"]
                .iter()
                .any(|k| {
                    m[*k]
                        .as_array()
                        .is_some_and(|l| l.iter().any(|t| t[2].is_string()))
                })
        }),
        _ => false,
    }
}

/// Send `n` randomized requests to the direct oracle and through genfront; panic on the first
/// difference.
async fn differential(api: &str, tokenizer: bool, n: usize, seed: u64) -> Counts {
    let s = setup(api, tokenizer).await;
    let client = reqwest::Client::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut counts = Counts::default();
    for i in 0..n {
        let body = if api == "sglang" {
            sglang_text_request(&mut rng, i, tokenizer)
        } else {
            vllm_text_request(&mut rng, i)
        };
        let (s1, mut want) = fetch(&client, &s.direct.url(path(api)), &body).await;
        let (s2, mut got) = fetch(&client, &s.gf.url(path(api)), &body).await;
        let regenerated = body["sampling_params"]["n"].as_u64().unwrap_or(1) > 1
            || body["input_ids"][0].is_array();
        let k = body["sampling_params"]["logprobs"].as_i64().unwrap_or(0);
        for v in want.iter_mut().chain(got.iter_mut()) {
            strip(v, regenerated, k);
        }
        want.sort_by_key(stream_index);
        got.sort_by_key(stream_index);
        assert_eq!(
            s1,
            s2,
            "{api} (tokenizer {tokenizer}) status differs for request {i}: {body}\ngenfront: {}\noracle: {}",
            Value::from(got.clone()),
            Value::from(want.clone())
        );
        if got != want {
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "{api} (tokenizer {tokenizer}) request {i} differs ({} vs {} events, first at {first})\nrequest: {body}\ngenfront: {}\noracle:   {}",
                got.len(),
                want.len(),
                got.get(first).map(Value::to_string).unwrap_or_default(),
                want.get(first).map(Value::to_string).unwrap_or_default(),
            );
        }
        let answer = Value::from(want.clone()).to_string();
        if answer.contains("\"text\"") {
            counts.with_text += 1;
        }
        let asked = body["return_text_in_logprobs"] == json!(true) || body["output_mode"] == "text";
        if asked && s1 == 200 {
            counts.decoded += 1;
            if want.iter().any(has_decoded_triple) {
                counts.decoded_strings += 1;
            }
        }
        counts.compared += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_with_tokenizer_equals_oracle() {
    let c = differential("sglang", true, REQUESTS, 31).await;
    assert_eq!(c.compared, REQUESTS);
    assert!(c.with_text > REQUESTS / 2, "most answers carry text: {c:?}");
    assert!(
        c.decoded >= 50,
        "return_text_in_logprobs compared often: {c:?}"
    );
    // Answers without a logprob entry (no output and `logprob_start_len: -1`) have no slot.
    assert!(
        c.decoded_strings > c.decoded * 3 / 4,
        "decoded token text in the triples: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_without_tokenizer_equals_oracle() {
    let c = differential("sglang", false, REQUESTS, 32).await;
    assert_eq!(c.compared, REQUESTS);
    assert_eq!(
        c.with_text, 0,
        "a --skip-tokenizer-init engine sends no text"
    );
    assert!(
        c.decoded >= 50,
        "return_text_in_logprobs compared often: {c:?}"
    );
    assert_eq!(
        c.decoded_strings, 0,
        "null text slots without a tokenizer: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_with_tokenizer_equals_oracle() {
    let c = differential("vllm", true, REQUESTS, 33).await;
    assert_eq!(c.compared, REQUESTS);
    assert!(c.decoded >= 50, "output_mode text compared often: {c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_without_tokenizer_equals_oracle() {
    let c = differential("vllm", false, REQUESTS, 34).await;
    assert_eq!(c.compared, REQUESTS);
    // UNRESOLVED (oracle vs vLLM): `--skip-tokenizer-init` makes only the oracle's SGLang face
    // token-only; its vLLM face still answers text mode, and a vLLM worker does not report
    // `--tokens-only`, so genfront forwards it and both answer alike. genfront's refusal for a
    // `--tokens-only` engine is pinned by the vLLM crate's unit tests.
    assert!(c.decoded >= 50, "output_mode text compared often: {c:?}");
}

/// A character split across tokens (and the body across TCP writes of a few bytes) reaches the
/// client as valid UTF-8 JSON events whose text is the engine's: the incremental deltas
/// concatenate to the unary text, the cumulative chunks end with it, and both equal the oracle's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utf8_split_across_tokens_and_writes() {
    // "é" = c3 a9, "😀" = f0 9f 98 80, each split over tokens.
    let hexes = ["68", "c3", "a9", "f0", "9f", "98", "80", "21"];
    let script = json!({"match": "any", "tokens": [300, 301, 302, 303, 304, 305, 306, 307],
                        "token_bytes_hex": hexes, "finish": "length", "split_writes": 3});
    for incremental in [false, true] {
        let mut args = vec!["--api", "sglang"];
        if incremental {
            args.push("--incremental-streaming");
        }
        let direct = Oracle::start(&args);
        let behind = Oracle::start(&args);
        direct.script(script.clone()).await;
        behind.script(script.clone()).await;
        let mut argv = vec![
            "--worker".to_owned(),
            format!("sglang={}", behind.base_url()),
        ];
        if incremental {
            argv.push("--sglang-incremental-streaming".to_owned());
        }
        let gf = genfront(&argv).await;
        let client = reqwest::Client::new();
        let body = |stream: bool| {
            json!({"rid": "u8", "input_ids": [1, 2, 3], "stream": stream,
                   "sampling_params": {"max_new_tokens": 8}})
        };
        let (_, unary) = fetch(&client, &gf.url("/generate"), &body(false)).await;
        // The same call to the direct oracle, so both prefix caches stay alike.
        let (_, direct_unary) = fetch(&client, &direct.url("/generate"), &body(false)).await;
        assert_eq!(unary[0]["text"], direct_unary[0]["text"]);
        assert_eq!(unary[0]["text"], json!("hé😀!"), "{}", unary[0]);
        let (_, events) = fetch(&client, &gf.url("/generate"), &body(true)).await;
        let texts: Vec<&str> = events.iter().filter_map(|e| e["text"].as_str()).collect();
        let whole = if incremental {
            texts.concat()
        } else {
            texts.last().copied().unwrap_or_default().to_owned()
        };
        assert_eq!(whole, "hé😀!", "events: {events:?}");
        let (_, mut direct_events) = fetch(&client, &direct.url("/generate"), &body(true)).await;
        let mut got = events.clone();
        for v in got.iter_mut().chain(direct_events.iter_mut()) {
            strip(v, false, 0);
        }
        assert_eq!(got, direct_events, "incremental {incremental}");
    }
}

/// Ids up to 201,087 (a 201k-token vocabulary: `<|start|>` is 200006) are served end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_vocabulary_through_direct_mode() {
    for api in ["sglang", "vllm"] {
        let s = setup(api, true).await;
        let client = reqwest::Client::new();
        let body = if api == "sglang" {
            json!({"input_ids": [200006, 201087, 5], "sampling_params": {"max_new_tokens": 3}})
        } else {
            json!({"token_ids": [200006, 201087, 5], "sampling_params": {"max_tokens": 3}})
        };
        let (s1, mut want) = fetch(&client, &s.direct.url(path(api)), &body).await;
        let (s2, mut got) = fetch(&client, &s.gf.url(path(api)), &body).await;
        assert_eq!((s1, s2), (200, 200), "{api}: {got:?}");
        for v in want.iter_mut().chain(got.iter_mut()) {
            strip(v, false, 0);
            if let Some(o) = v.as_object_mut() {
                o.remove("request_id");
            }
        }
        assert_eq!(got, want, "{api}");
    }
}

/// An engine error status is relayed with the engine's body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_status_is_relayed() {
    for api in ["sglang", "vllm"] {
        let s = setup(api, true).await;
        let err = json!({"match": "any", "error": {"status": 400,
                         "body": {"error": {"message": "scripted refusal"}}}});
        s.direct.script(err.clone()).await;
        s.behind.script(err).await;
        let client = reqwest::Client::new();
        let body = if api == "sglang" {
            json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}})
        } else {
            json!({"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}})
        };
        let d = client
            .post(s.direct.url(path(api)))
            .json(&body)
            .send()
            .await
            .expect("sent");
        let g = client
            .post(s.gf.url(path(api)))
            .json(&body)
            .send()
            .await
            .expect("sent");
        assert_eq!(g.status(), d.status(), "{api}");
        let (d, g) = (
            d.json::<Value>().await.expect("json"),
            g.json::<Value>().await.expect("json"),
        );
        assert_eq!(g["error"]["message"], d["error"]["message"], "{api}: {g}");
    }
}

/// `/get_server_info` and `/server_info` through genfront are the worker's own document, for an
/// engine with and without a tokenizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_info_routes_relay_the_worker() {
    for tokenizer in [true, false] {
        let s = setup("sglang", tokenizer).await;
        let client = reqwest::Client::new();
        for route in ["/get_server_info", "/server_info"] {
            let get = |url: String| {
                let client = client.clone();
                async move {
                    client
                        .get(url)
                        .send()
                        .await
                        .expect("sent")
                        .json::<Value>()
                        .await
                        .expect("json")
                }
            };
            let mut want = get(s.direct.url(route)).await;
            let mut got = get(s.gf.url(route)).await;
            for v in [&mut want, &mut got] {
                if let Some(o) = v.as_object_mut() {
                    // Per-process values of the two oracles.
                    o.remove("internal_states");
                    o.remove("port");
                }
            }
            assert_eq!(got, want, "{route} tokenizer {tokenizer}");
            assert_eq!(got["skip_tokenizer_init"], json!(!tokenizer));
        }
    }
}

/// An SGLang client's `logprob_start_len` on a vLLM worker: the vLLM engine client asks plain
/// `prompt_logprobs` (vLLM 0.33.0 refuses `prompt_logprob_start` without
/// `prompt_logprob_token_ids`, `sampling_params.py:1043-1048`; the oracle does not model that
/// refusal, so the body it received is checked) and cuts the rows before the start itself. The
/// rows are the oracle's own prompt logprobs from that position, asked of it directly; the
/// first returned position has no logprob, as SGLang pads it (`[None] + …`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_logprob_start_len_on_a_vllm_worker() {
    let oracle = Oracle::start(&["--api", "vllm"]);
    let gf = genfront(&["--worker".into(), format!("vllm={}", oracle.base_url())]).await;
    let client = reqwest::Client::new();
    let prompt: Vec<u32> = vec![5, 6, 7, 8, 9, 10, 11];
    let (k, start) = (2usize, 2usize);
    let (status, direct) = fetch(
        &client,
        &oracle.url("/inference/v1/generate"),
        &json!({"token_ids": prompt, "sampling_params": {"max_tokens": 1, "prompt_logprobs": k}}),
    )
    .await;
    assert_eq!(status, 200, "{direct:?}");
    let truth = direct[0]["prompt_logprobs"]
        .as_array()
        .expect("the oracle's prompt logprobs")
        .clone();
    assert_eq!(truth.len(), prompt.len());

    oracle.reset().await;
    let (status, answer) = fetch(
        &client,
        &gf.url("/generate"),
        &json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 1},
            "return_logprob": true, "logprob_start_len": start, "top_logprobs_num": k}),
    )
    .await;
    assert_eq!(status, 200, "{answer:?}");
    let log = oracle.log().await;
    let sent: Vec<&Value> = log["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["path"] == json!("/inference/v1/generate"))
        .map(|e| &e["body"]["sampling_params"])
        .collect();
    assert_eq!(sent.len(), 1, "{log}");
    assert_eq!(sent[0]["prompt_logprobs"], json!(k), "{}", sent[0]);
    assert!(
        sent[0].get("prompt_logprob_start").is_none(),
        "vLLM 0.33.0 refuses prompt_logprob_start alone: {}",
        sent[0]
    );

    let meta = &answer[0]["meta_info"];
    let rows = meta["input_token_logprobs"].as_array().expect("rows");
    let tops = meta["input_top_logprobs"].as_array().expect("top rows");
    assert_eq!(rows.len(), prompt.len() - start, "{meta}");
    assert_eq!(tops.len(), rows.len(), "{meta}");
    for (i, (row, top)) in rows.iter().zip(tops).enumerate() {
        let pos = start + i;
        assert_eq!(row[1], json!(prompt[pos]), "position {pos}: {row}");
        if i == 0 {
            assert_eq!(row[0], Value::Null, "SGLang pads the first position: {row}");
            assert!(top.is_null(), "{top}");
            continue;
        }
        let want = &truth[pos];
        assert_eq!(
            row[0],
            want[prompt[pos].to_string()]["logprob"],
            "position {pos}: {row} vs {want}"
        );
        // The top k, best first, as the oracle ranked them.
        let mut ranked: Vec<(u64, u32, &Value)> = want
            .as_object()
            .expect("a row")
            .iter()
            .filter_map(|(id, c)| Some((c["rank"].as_u64()?, id.parse().ok()?, &c["logprob"])))
            .filter(|(rank, ..)| (1..=k as u64).contains(rank))
            .collect();
        ranked.sort_by_key(|(rank, ..)| *rank);
        let got: Vec<(u32, &Value)> = top
            .as_array()
            .expect("top list")
            .iter()
            .map(|t| (t[1].as_u64().unwrap_or(u64::MAX) as u32, &t[0]))
            .collect();
        let expected: Vec<(u32, &Value)> = ranked.iter().map(|(_, id, lp)| (*id, *lp)).collect();
        assert_eq!(got, expected, "position {pos}");
    }
}
