//! P/D failure semantics (issue 11, item 5) through genfront against the independent Python
//! oracle (`../shared/oracle/oracle_engine.py --role prefill|decode`), for SGLang's bootstrap
//! hand-off (decode waits on the prefill's room via `--prefill-peer`) and vLLM's
//! `kv_transfer_params` hand-off. Every test asserts on the oracles' own logs: which legs were
//! sent, how each ended (`aborted`, `disconnected`, …) and that nothing is still running.
//!
//! | failure | client sees | legs |
//! |---|---|---|
//! | prefill answers a 4xx | that 4xx in the native envelope / native error event + `[DONE]`, within 1 s | SGLang: decode ended (never a wait for the decode's 30 s KV timeout); vLLM: decode never sent |
//! | prefill transport failure (RST) | native 502/503 | as above |
//! | decode fails mid-stream | native error event + `[DONE]` | prefill not left running |
//! | client disconnects mid-stream | — | both legs ended within 1 s |
//! | SGLang `/abort_request` with the client's rid | the stream ends | both legs ended within 1 s |
//! | no decode worker routable | 503 `no_available_workers` naming `decode`, within 100 ms | prefill receives nothing |

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::oracle::Oracle;
use genfront::{ServeArgs, Server};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The decode oracle's `--kv-timeout`: far longer than any bound asserted here, so a decode leg
/// left waiting for a failed prefill's KV would show up as still running.
const KV_TIMEOUT: &str = "30";

/// How soon after a failure both legs must have ended.
const SETTLE: Duration = Duration::from_secs(1);

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

/// Start genfront with `argv` (after `serve`); when `ready`, wait until it is ready.
async fn genfront(argv: &[String], ready: bool) -> Genfront {
    let mut full = vec!["serve".to_owned()];
    full.extend(argv.iter().cloned());
    let args = ServeArgs::parse_from(full);
    let server = Server::build(&args).await.expect("genfront builds");
    if ready {
        assert!(
            server.wait_ready(Duration::from_secs(10)).await,
            "genfront ready over the oracles"
        );
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(listener, stop.clone()));
    Genfront {
        addr,
        _stop: stop.drop_guard(),
    }
}

/// A prefill oracle, a decode oracle (SGLang: waiting on that prefill's rooms with a long KV
/// timeout) and genfront over the pair.
struct Pair {
    api: &'static str,
    prefill: Oracle,
    decode: Oracle,
    gf: Genfront,
    client: reqwest::Client,
}

async fn pair(api: &'static str) -> Pair {
    let base = ["--api", api, "--skip-tokenizer-init"];
    let prefill = Oracle::start(&[&base[..], &["--role", "prefill"]].concat());
    let peer = prefill.base_url();
    let decode = if api == "sglang" {
        Oracle::start(
            &[
                &base[..],
                &[
                    "--role",
                    "decode",
                    "--prefill-peer",
                    &peer,
                    "--kv-timeout",
                    KV_TIMEOUT,
                ],
            ]
            .concat(),
        )
    } else {
        Oracle::start(&[&base[..], &["--role", "decode"]].concat())
    };
    let gf = genfront(
        &[
            "--prefill".into(),
            format!("{api}={}", prefill.base_url()),
            "--decode".into(),
            format!("{api}={}", decode.base_url()),
        ],
        true,
    )
    .await;
    Pair {
        api,
        prefill,
        decode,
        gf,
        client: reqwest::Client::new(),
    }
}

/// The format's generate path.
fn path(api: &str) -> &'static str {
    if api == "sglang" {
        "/generate"
    } else {
        "/inference/v1/generate"
    }
}

/// A request of `api` for `max` new tokens, streamed or not, with the client id `rid`.
fn request(api: &str, max: u32, stream: bool, rid: &str) -> Value {
    if api == "sglang" {
        json!({"rid": rid, "input_ids": [11, 12, 13, 14, 15],
               "sampling_params": {"max_new_tokens": max, "ignore_eos": true}, "stream": stream})
    } else {
        json!({"request_id": rid, "token_ids": [11, 12, 13, 14, 15],
               "sampling_params": {"max_tokens": max, "ignore_eos": true}, "stream": stream})
    }
}

/// The native 4xx a prefill is scripted to answer, in the format's envelope.
fn native_4xx(api: &str) -> Value {
    if api == "sglang" {
        json!({"error": {"message": "prefill says no"}})
    } else {
        json!({"error": {"message": "prefill says no", "type": "BadRequestError",
                         "param": null, "code": 400}})
    }
}

impl Pair {
    async fn send(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.gf.url(path(self.api)))
            .json(body)
            .send()
            .await
            .expect("sent to genfront")
    }

    /// `(status, body text, elapsed)` of one request through genfront.
    async fn call(&self, body: &Value) -> (u16, String, Duration) {
        let t = Instant::now();
        let r = self.send(body).await;
        let status = r.status().as_u16();
        let text = r.text().await.expect("genfront body");
        (status, text, t.elapsed())
    }

    /// Both oracles' logs once neither has anything running, waiting at most `limit`; panics
    /// naming what still runs.
    async fn settled(&self, limit: Duration) -> (Value, Value) {
        let deadline = Instant::now() + limit;
        loop {
            let (p, d) = (self.prefill.log().await, self.decode.log().await);
            if p["running"] == json!([]) && d["running"] == json!([]) {
                return (p, d);
            }
            assert!(
                Instant::now() < deadline,
                "{}: legs still running after {limit:?}\nprefill: {}\ndecode: {}",
                self.api,
                p["running_items"],
                d["running_items"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The states of every item of every generate request in an oracle log.
fn states(log: &Value) -> Vec<String> {
    log["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["items"].as_array().cloned().unwrap_or_default())
        .map(|it| it["state"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// For a leg sent concurrently with a prefill that failed at once (SGLang): genfront ended it, or
/// dropped it before its request reached the engine. Either way nothing runs there.
fn assert_ended_or_never_sent(what: &str, log: &Value) {
    if !states(log).is_empty() {
        assert_ended(what, log);
    }
}

/// Assert that the leg an oracle logged was ended by genfront (aborted or its connection
/// dropped), not finished and not still running.
fn assert_ended(what: &str, log: &Value) {
    let s = states(log);
    assert!(
        !s.is_empty() && s.iter().all(|x| x == "aborted" || x == "disconnected"),
        "{what}: expected aborted/disconnected, got {s:?}\n{}",
        log["requests"]
    );
}

/// Assert that an oracle received no generate request.
fn assert_never_sent(what: &str, log: &Value) {
    assert_eq!(
        log["requests"].as_array().map(Vec::len),
        Some(0),
        "{what}: expected no request, got {}",
        log["requests"]
    );
}

/// The SSE events of a body (`data:` payloads, `[DONE]` included as a string).
fn sse(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data:"))
        .map(|d| {
            let d = d.trim();
            serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_owned()))
        })
        .collect()
}

/// Assert a stream ended with the native error event (`error.code == code` when given) and then
/// `[DONE]`.
fn assert_error_then_done(what: &str, text: &str, code: Option<u64>) {
    let ev = sse(text);
    let n = ev.len();
    assert!(
        n >= 2 && ev[n - 1] == json!("[DONE]") && ev[n - 2]["error"].is_object(),
        "{what}: expected an error event then [DONE], got {text}"
    );
    if let Some(c) = code {
        assert_eq!(ev[n - 2]["error"]["code"], json!(c), "{what}: {text}");
    }
}

/// Read a stream until its first data event (bounded), then return the still-open response.
async fn first_event(mut r: reqwest::Response) -> reqwest::Response {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("data:") {
        assert!(Instant::now() < deadline, "no first event");
        let chunk = tokio::time::timeout(Duration::from_secs(10), r.chunk())
            .await
            .expect("first event in time")
            .expect("stream readable")
            .expect("stream not ended before its first event");
        seen.extend_from_slice(&chunk);
    }
    r
}

// ---- 1. prefill answers a 4xx -----------------------------------------------------------------

async fn prefill_4xx(api: &'static str) {
    let p = pair(api).await;
    for stream in [false, true] {
        p.prefill.reset().await;
        p.decode.reset().await;
        p.prefill
            .script(json!({"match": "next", "error": {"status": 400, "body": native_4xx(api)}}))
            .await;
        let (status, text, took) = p.call(&request(api, 8, stream, "p4xx")).await;
        let what = format!("{api} stream={stream}");
        assert!(
            took < SETTLE,
            "{what}: answered after {took:?}, not at once"
        );
        if stream {
            assert_eq!(status, 200, "{what}: {text}");
            assert_error_then_done(&what, &text, Some(400));
            assert!(text.contains("prefill says no"), "{what}: {text}");
        } else {
            assert_eq!(status, 400, "{what}: {text}");
            let v: Value = serde_json::from_str(&text).expect("JSON error body");
            if api == "sglang" {
                assert_eq!(v["error"]["message"], json!("prefill says no"), "{what}");
            } else {
                assert_eq!(
                    v["error"]["message"],
                    json!("prefill says no"),
                    "{what}: {v}"
                );
                assert_eq!(v["error"]["code"], json!(400), "{what}: {v}");
            }
        }
        let (pl, dl) = p.settled(SETTLE).await;
        assert_eq!(states(&pl), ["error"], "{what}: prefill {}", pl["requests"]);
        if api == "sglang" {
            // Sent at once with the prefill (it would wait 30 s for a room that never comes),
            // unless the prefill's answer came back before it left.
            assert_ended_or_never_sent(&format!("{what} decode"), &dl);
        } else {
            assert_never_sent(&format!("{what} decode"), &dl);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_prefill_4xx_fails_fast_and_ends_decode() {
    prefill_4xx("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_prefill_4xx_fails_fast_and_sends_no_decode() {
    prefill_4xx("vllm").await;
}

// ---- 1b. decode answers a 4xx (SGLang: while its prefill is still running) --------------------

async fn decode_4xx(api: &'static str) {
    let p = pair(api).await;
    for stream in [false, true] {
        p.prefill.reset().await;
        p.decode.reset().await;
        if api == "sglang" {
            // The prefill would run until aborted: only genfront ending it stops it.
            p.prefill
                .script(json!({"match": "next", "hold": true}))
                .await;
        }
        // SGLang: the decode error waits 200 ms so the concurrently sent prefill has surely reached
        // its engine (an error at once can beat it, and then the prefill is never sent at all).
        let delay = if api == "sglang" { 0.2 } else { 0.0 };
        p.decode
            .script(json!({"match": "next", "headers_delay": delay,
                           "error": {"status": 400, "body": native_4xx(api)}}))
            .await;
        let (status, text, took) = p.call(&request(api, 8, stream, "d4xx")).await;
        let what = format!("{api} stream={stream}");
        assert!(
            took < SETTLE,
            "{what}: answered after {took:?}, not at once"
        );
        if stream {
            assert_eq!(status, 200, "{what}: {text}");
            assert_error_then_done(&what, &text, Some(400));
        } else {
            assert_eq!(status, 400, "{what}: {text}");
        }
        assert!(text.contains("prefill says no"), "{what}: {text}");
        let (pl, dl) = p.settled(SETTLE).await;
        assert_eq!(states(&dl), ["error"], "{what}: decode {}", dl["requests"]);
        if api == "sglang" {
            // Sent concurrently and held: genfront must end it when decode fails.
            assert_ended(&format!("{what} prefill"), &pl);
        } else {
            // vLLM legs are sequential: the prefill had finished before decode was sent.
            assert_eq!(
                states(&pl),
                ["finished"],
                "{what}: prefill {}",
                pl["requests"]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_decode_4xx_while_prefill_runs_fails_fast_and_ends_prefill() {
    decode_4xx("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_decode_4xx_is_relayed_at_once() {
    decode_4xx("vllm").await;
}

// ---- 2. prefill transport failure -------------------------------------------------------------

async fn prefill_transport(api: &'static str) {
    let p = pair(api).await;
    for stream in [false, true] {
        p.prefill.reset().await;
        p.decode.reset().await;
        p.prefill
            .script(json!({"match": "next", "drop_after_events": 0, "reset": true}))
            .await;
        let (status, text, took) = p.call(&request(api, 8, stream, "ptransport")).await;
        let what = format!("{api} stream={stream}");
        assert!(took < SETTLE, "{what}: answered after {took:?}");
        if stream {
            assert_eq!(status, 200, "{what}: {text}");
            assert_error_then_done(&what, &text, None);
            let code = sse(&text)
                .iter()
                .rev()
                .nth(1)
                .map(|e| e["error"]["code"].clone());
            assert!(
                code == Some(json!(502)) || code == Some(json!(503)),
                "{what}: {text}"
            );
        } else {
            assert!(status == 502 || status == 503, "{what}: {status} {text}");
            let v: Value = serde_json::from_str(&text).expect("JSON error body");
            // SGLang's `create_error_response` envelope; vLLM's `ErrorResponse {error: …}`.
            let code = if api == "sglang" {
                &v["code"]
            } else {
                &v["error"]["code"]
            };
            assert_eq!(code, &json!(status), "{what}: {v}");
        }
        let (pl, dl) = p.settled(SETTLE).await;
        assert_eq!(
            states(&pl),
            ["dropped"],
            "{what}: prefill {}",
            pl["requests"]
        );
        if api == "sglang" {
            assert_ended_or_never_sent(&format!("{what} decode"), &dl);
        } else {
            assert_never_sent(&format!("{what} decode"), &dl);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_prefill_transport_failure_is_502_or_503_and_ends_decode() {
    prefill_transport("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_prefill_transport_failure_is_502_or_503_and_sends_no_decode() {
    prefill_transport("vllm").await;
}

// ---- 3. decode fails mid-stream ---------------------------------------------------------------

async fn decode_mid_stream(api: &'static str) {
    let p = pair(api).await;
    let scripts = [
        json!({"match": "next", "stream_error": {"after_events": 2}}),
        json!({"match": "next", "drop_after_events": 2}),
    ];
    for script in scripts {
        p.prefill.reset().await;
        p.decode.reset().await;
        p.decode.script(script.clone()).await;
        let (status, text, took) = p.call(&request(api, 12, true, "dmid")).await;
        let what = format!("{api} {script}");
        assert!(took < SETTLE, "{what}: answered after {took:?}");
        assert_eq!(status, 200, "{what}: {text}");
        assert_error_then_done(&what, &text, None);
        let (pl, dl) = p.settled(SETTLE).await;
        // The prefill leg had finished its part before decode streamed; it is not left running.
        assert!(
            states(&pl).iter().all(|s| s == "finished"),
            "{what}: prefill {}",
            pl["requests"]
        );
        assert_eq!(states(&dl).len(), 1, "{what}: decode {}", dl["requests"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_decode_failing_mid_stream_gives_error_event_and_done() {
    decode_mid_stream("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_decode_failing_mid_stream_gives_error_event_and_done() {
    decode_mid_stream("vllm").await;
}

// ---- 4. client disconnects --------------------------------------------------------------------

async fn client_disconnect(api: &'static str) {
    let p = pair(api).await;

    // a) After the first event: decode streams slowly; dropping the response ends it.
    p.decode
        .script(json!({"match": "next", "token_delay": 0.1}))
        .await;
    let r = p.send(&request(api, 200, true, "gone-after-first")).await;
    assert_eq!(r.status(), 200);
    let r = first_event(r).await;
    drop(r);
    let (pl, dl) = p.settled(SETTLE).await;
    assert!(
        states(&pl).iter().all(|s| s == "finished"),
        "{api}: prefill {}",
        pl["requests"]
    );
    assert_ended(&format!("{api} decode after first event"), &dl);

    // b) While the prefill still runs (held): both legs in flight (SGLang) or prefill only
    // (vLLM: decode waits for the prefill's kv_transfer_params).
    p.prefill.reset().await;
    p.decode.reset().await;
    p.prefill
        .script(json!({"match": "next", "hold": true}))
        .await;
    let client = p.client.clone();
    let url = p.gf.url(path(api));
    let body = request(api, 200, true, "gone-during-prefill");
    let call = tokio::spawn(async move {
        let r = client.post(url).json(&body).send().await;
        if let Ok(mut r) = r {
            while let Ok(Some(_)) = r.chunk().await {}
        }
    });
    wait_for_request(&p.prefill).await;
    if api == "sglang" {
        wait_for_request(&p.decode).await;
    }
    call.abort();
    let _ = call.await;
    let (pl, dl) = p.settled(SETTLE).await;
    assert_ended(&format!("{api} prefill during prefill"), &pl);
    if api == "sglang" {
        assert_ended(&format!("{api} decode during prefill"), &dl);
    } else {
        assert_never_sent(&format!("{api} decode during prefill"), &dl);
    }
}

/// Wait (at most 5 s) until `oracle` logged a generate request.
async fn wait_for_request(oracle: &Oracle) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while oracle.log().await["requests"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < deadline, "no request reached the oracle");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_client_disconnect_ends_both_legs() {
    client_disconnect("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_client_disconnect_ends_both_legs() {
    client_disconnect("vllm").await;
}

// ---- 5. /abort_request with the client's rid (SGLang) -----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_abort_request_with_client_rid_ends_both_legs() {
    let p = pair("sglang").await;
    // a) Both legs in flight (prefill held, decode waiting on its room).
    // b) Prefill done, decode streaming slowly.
    for held_prefill in [true, false] {
        p.prefill.reset().await;
        p.decode.reset().await;
        if held_prefill {
            p.prefill
                .script(json!({"match": "next", "hold": true}))
                .await;
        } else {
            p.decode
                .script(json!({"match": "next", "token_delay": 0.1}))
                .await;
        }
        let rid = format!("client-rid-{held_prefill}");
        let client = p.client.clone();
        let url = p.gf.url("/generate");
        let body = request("sglang", 200, true, &rid);
        let call = tokio::spawn(async move {
            let r = client.post(url).json(&body).send().await.expect("sent");
            tokio::time::timeout(Duration::from_secs(10), r.text())
                .await
                .expect("stream ends after the abort")
                .unwrap_or_default()
        });
        wait_for_request(&p.prefill).await;
        wait_for_request(&p.decode).await;
        if !held_prefill {
            // Let decode stream a little first.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let r = p
            .client
            .post(p.gf.url("/abort_request"))
            .json(&json!({"rid": rid}))
            .send()
            .await
            .expect("abort sent");
        assert_eq!(r.status(), 200, "abort_request");
        let (pl, dl) = p.settled(SETTLE).await;
        let text = call.await.expect("stream task");
        let what = format!("held_prefill={held_prefill}");
        if held_prefill {
            assert_ended(&format!("{what} prefill"), &pl);
        } else {
            assert!(
                states(&pl).iter().all(|s| s == "finished"),
                "{what}: prefill {}",
                pl["requests"]
            );
        }
        assert_ended(&format!("{what} decode"), &dl);
        assert!(text.contains("[DONE]"), "{what}: {text}");
    }
}

// ---- 6. no decode worker routable -------------------------------------------------------------

/// Whether genfront's `/metrics` reports the prefill worker ready.
async fn prefill_ready(client: &reqwest::Client, gf: &Genfront) -> bool {
    let Ok(r) = client.get(gf.url("/metrics")).send().await else {
        return false;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines().any(|l| {
        l.starts_with("genfront_worker_state{")
            && l.contains("role=\"prefill\"")
            && l.contains("state=\"ready\"")
            && l.ends_with(" 1")
    })
}

async fn no_decode(api: &'static str) {
    let prefill = Oracle::start(&["--api", api, "--skip-tokenizer-init", "--role", "prefill"]);
    // A port nothing listens on: the decode worker stays connecting.
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let gf = genfront(
        &[
            "--prefill".into(),
            format!("{api}={}", prefill.base_url()),
            "--decode".into(),
            format!("{api}=http://127.0.0.1:{refused}"),
        ],
        false,
    )
    .await;
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !prefill_ready(&client, &gf).await {
        assert!(
            Instant::now() < deadline,
            "{api}: prefill worker never ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    prefill.reset().await;
    for stream in [false, true] {
        let t = Instant::now();
        let r = client
            .post(gf.url(path(api)))
            .json(&request(api, 4, stream, "nodecode"))
            .send()
            .await
            .expect("sent");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        let took = t.elapsed();
        let what = format!("{api} stream={stream}");
        assert!(took < Duration::from_millis(100), "{what}: took {took:?}");
        assert_eq!(status, 503, "{what}: {text}");
        let v: Value = serde_json::from_str(&text).expect("JSON body");
        let flat = v.to_string();
        assert!(flat.contains("no_available_workers"), "{what}: {text}");
        assert!(
            flat.contains("decode"),
            "{what}: the body names no role: {text}"
        );
    }
    assert_never_sent(&format!("{api} prefill"), &prefill.log().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_no_decode_worker_is_503_naming_decode_and_prefill_gets_nothing() {
    no_decode("sglang").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_no_decode_worker_is_503_naming_decode_and_prefill_gets_nothing() {
    no_decode("vllm").await;
}
