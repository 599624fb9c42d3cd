//! Bounded work and bounded memory per request: the output caps (`--max-top-logprobs`,
//! `--max-logprob-entries`, `--max-answer-bytes`, `--max-stream-bytes`) answer in each format's
//! native envelope and count in `genfront_limit_hits_total`, and a 64 MiB id body is parsed
//! without a JSON tree of every id (the peak RSS of a `genfront serve --mock 1` child).

mod common;

use std::time::Duration;

use common::{TestServer, sse_events, start_with, zero_delay};
use serde_json::{Value, json};

fn hits(server: &TestServer, limit: &str) -> u64 {
    server.state.metrics.limits().hits(limit)
}

fn vocab(server: &TestServer) -> u32 {
    server.engines[0]
        .info()
        .vocab_size
        .expect("the mock knows its vocabulary")
}

/// `len` prompt ids below `vocab`, spread over it.
fn prompt(len: usize, vocab: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7919) + 11) % vocab)
        .collect()
}

/// The issue's amplification request: an 11 KB SGLang body asking for the whole vocabulary of
/// prompt logprobs at every position of a 2k-token prompt. Refused up front with SGLang's 400,
/// naming the flag; the engine never sees it.
#[tokio::test]
async fn sglang_amplification_request_is_a_native_400() {
    let server = start_with(&[], zero_delay(), 1).await;
    let v = vocab(&server);
    let body = json!({
        "input_ids": prompt(2048, v),
        "return_logprob": true,
        "logprob_start_len": 0,
        "top_logprobs_num": v,
        "sampling_params": {"max_new_tokens": 1},
    });
    let size = serde_json::to_vec(&body).expect("json").len();
    assert!(size < 16 * 1024, "the request is small: {size} bytes");
    let (status, answer) = server.post_json("/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-top-logprobs"), "{answer}");
    assert!(message.contains(&format!("{v} top logprobs")), "{answer}");
    assert_eq!(hits(&server, "max_top_logprobs"), 1);
    assert_eq!(server.engines[0].running(), 0);
    // At the cap it is served.
    let ok = json!({
        "input_ids": prompt(64, v),
        "return_logprob": true,
        "logprob_start_len": 0,
        "top_logprobs_num": 20,
        "sampling_params": {"max_new_tokens": 2},
    });
    let (status, answer) = server.post_json("/generate", &ok).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["meta_info"]["input_top_logprobs"]
            .as_array()
            .map(Vec::len),
        Some(64)
    );
}

/// `token_ids_logprob` longer than `--max-logprob-token-ids` is refused up front.
#[tokio::test]
async fn sglang_token_ids_logprob_over_the_cap() {
    let server = start_with(&["--max-logprob-token-ids", "4"], zero_delay(), 1).await;
    let body = json!({
        "input_ids": [1, 2, 3],
        "return_logprob": true,
        "token_ids_logprob": [1, 2, 3, 4, 5],
        "sampling_params": {"max_new_tokens": 1},
    });
    let (status, answer) = server.post_json("/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("5 listed token ids") && message.contains("--max-logprob-token-ids"),
        "{answer}"
    );
    assert_eq!(hits(&server, "max_logprob_token_ids"), 1);
}

/// Prompt rows × k over `--max-logprob-entries`: SGLang (rows from `logprob_start_len`) and vLLM
/// (`prompt_logprobs` × prompt length), each in its own envelope.
#[tokio::test]
async fn logprob_entries_over_the_cap_in_both_envelopes() {
    let server = start_with(&["--max-logprob-entries", "1000"], zero_delay(), 1).await;
    let v = vocab(&server);
    // 300 rows × 5 = 1500 > 1000.
    let body = json!({
        "input_ids": prompt(300, v),
        "return_logprob": true,
        "logprob_start_len": 0,
        "top_logprobs_num": 5,
        "sampling_params": {"max_new_tokens": 0},
    });
    let (status, answer) = server.post_json("/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("1500 logprob entries") && message.contains("--max-logprob-entries"),
        "{answer}"
    );
    // Starting later asks for fewer rows: 150 × 5 = 750 passes.
    let mut later = body.clone();
    later["logprob_start_len"] = json!(150);
    let (status, answer) = server.post_json("/generate", &later).await;
    assert_eq!(status, 200, "{answer}");

    let body = json!({"token_ids": prompt(300, v), "sampling_params": {"max_tokens": 1, "prompt_logprobs": 5}});
    let (status, answer) = server.post_json("/inference/v1/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "BadRequestError", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-logprob-entries"), "{answer}");
    // Output logprobs count n × max_tokens × k: 4 × 100 × 5 = 2000 > 1000.
    let body = json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 100, "n": 4, "logprobs": 5}});
    let (status, answer) = server.post_json("/inference/v1/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("2000 logprob entries"),
        "{answer}"
    );
    assert_eq!(hits(&server, "max_logprob_entries"), 3);
}

/// A unary answer over `--max-answer-bytes` is a native 400 naming the flag.
#[tokio::test]
async fn unary_answer_over_the_byte_cap() {
    let server = start_with(&["--max-answer-bytes", "2KiB"], zero_delay(), 1).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1000, "ignore_eos": true}});
    let (status, answer) = server.post_json("/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-answer-bytes"), "{answer}");
    assert_eq!(hits(&server, "max_answer_bytes"), 1);
    let small = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}});
    let (status, answer) = server.post_json("/generate", &small).await;
    assert_eq!(status, 200, "{answer}");
}

/// SGLang's cumulative stream re-sends the whole answer every event: once its bytes pass
/// `--max-stream-bytes` the stream ends with SGLang's error event and `[DONE]`, and the engine
/// request is aborted (it had thousands of tokens left).
#[tokio::test]
async fn cumulative_stream_over_the_byte_cap_ends_with_the_native_error_event() {
    let mut cfg = zero_delay();
    cfg.inter_token_latency = Duration::from_millis(1);
    let server = start_with(&["--max-stream-bytes", "64KiB"], cfg, 1).await;
    let body = json!({"input_ids": [1, 2, 3], "stream": true,
        "sampling_params": {"max_new_tokens": 20000, "ignore_eos": true}});
    let resp = server.post("/generate", &body).await;
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.expect("body");
    assert!(text.len() <= 64 * 1024 + 1024, "{} bytes", text.len());
    let events = sse_events(&text);
    assert!(events.len() > 2, "some events before the cap");
    let last: &Value = events.last().expect("events");
    let message = last["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-stream-bytes"), "{last}");
    // The events before it are cumulative answers (SGLang's default mode).
    assert!(events[events.len() - 2]["output_ids"].is_array());
    assert!(
        server.wait_idle(Duration::from_secs(5)).await,
        "engine work stopped"
    );
    assert_eq!(server.aborted(), 1, "the engine request was aborted");
    assert_eq!(hits(&server, "max_stream_bytes"), 1);
}

/// Peak resident memory (`VmHWM`, bytes) of process `pid`.
fn vm_hwm(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kb * 1024
}

/// A `genfront serve --mock 1` child on an ephemeral port; returns it and its port.
fn spawn_genfront(extra: &[&str]) -> (std::process::Child, u16) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut args = vec![
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--mock",
        "1",
        "--mock-zero-delay",
    ];
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_genfront"))
        .args(&args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn genfront");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let port = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("genfront logs its address");
        if let Some(rest) = line.split("address=127.0.0.1:").nth(1) {
            break rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .expect("port");
        }
    };
    (child, port)
}

/// A 64 MiB SGLang body of ids (one prompt of ~9.7M ids spread over a 150k vocabulary, as JSON
/// of about 6.9 bytes an id) is served by a `genfront serve --mock 1` child whose peak RSS stays
/// below 200 MB: the ids are read straight into `Vec<u32>` (no `Value` per id), moved into the
/// engine request, and the native body keeps no copy of them.
#[tokio::test]
async fn a_64_mib_id_body_peaks_below_200_mb() {
    const LIMIT: usize = 64 * 1024 * 1024;
    let vocab = 150_000u32;
    let mut body = String::with_capacity(LIMIT);
    body.push_str(
        r#"{"sampling_params": {"max_new_tokens": 1, "ignore_eos": true}, "input_ids": ["#,
    );
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut count = 0usize;
    while body.len() < LIMIT - 32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if count > 0 {
            body.push(',');
        }
        body.push_str(&(x % u64::from(vocab)).to_string());
        count += 1;
    }
    body.push_str("]}");
    assert!(body.len() <= LIMIT);
    let context = (count + 16).to_string();
    let flags = [
        "--mock-vocab-size",
        "150000",
        "--mock-context-len",
        &context,
        "--body-limit",
        "64MiB",
        // The mock's vLLM answers carry routed experts for every prompt token by default (a
        // blob of ~40 bytes a token): not what this test measures.
        "--mock-routed-experts",
        "false",
    ];
    let (mut child, port) = spawn_genfront(&flags);
    let before = vm_hwm(child.id());
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("http://127.0.0.1:{port}/generate"))
        .header("content-type", "application/json")
        .body(body.clone())
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("sent");
    let sent = body;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await.expect("json");
    let peak = vm_hwm(child.id());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["meta_info"]["prompt_tokens"].as_u64(),
        Some(count as u64)
    );
    eprintln!(
        "SGLang, 64 MiB body, {count} ids: VmHWM {} MB (at start {} MB)",
        peak / 1_000_000,
        before / 1_000_000
    );
    assert!(peak < 200_000_000, "VmHWM {peak} bytes");
    let _ = child.kill();
    let _ = child.wait();
    // The same ids as vLLM's `token_ids` (one prompt), on a fresh child.
    let (mut child, port) = spawn_genfront(&flags);
    let ids_start = body_ids_start(&sent);
    let mut vllm = String::with_capacity(LIMIT);
    vllm.push_str(r#"{"sampling_params": {"max_tokens": 1}, "token_ids": ["#);
    vllm.push_str(&sent[ids_start..sent.len() - 1]);
    vllm.push('}');
    drop(sent);
    let resp = client
        .post(format!("http://127.0.0.1:{port}/inference/v1/generate"))
        .header("content-type", "application/json")
        .body(vllm)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("sent");
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await.expect("json");
    let peak = vm_hwm(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{answer}");
    eprintln!("vLLM, same ids: VmHWM {} MB", peak / 1_000_000);
    assert!(peak < 200_000_000, "VmHWM {peak} bytes");
}

/// Where the ids of the SGLang body start (after `"input_ids": [`).
fn body_ids_start(body: &str) -> usize {
    body.find(r#""input_ids": ["#).expect("ids") + r#""input_ids": ["#.len()
}

/// The `--max-answer-bytes` estimate is never below the real size: for each answer shape
/// (SGLang with output, prompt and listed-id logprobs, a batch with `n > 1`, routed experts and
/// prompt echoes; vLLM with logprobs, prompt logprobs and token-id echoes), a cap one byte below
/// the real answer is tripped **while the answer is accumulated** (the estimate's message, not
/// the measured one), counted once; and the estimate stays within 3× of the real size for a
/// logprob-heavy SGLang answer, so a cap three times the answer serves it.
#[tokio::test]
async fn the_answer_estimate_trips_before_building_and_is_never_below_the_real_size() {
    let mut cfg = zero_delay();
    cfg.info.routed_experts = true;
    let server = start_with(&[], cfg.clone(), 1).await;
    let v = vocab(&server);
    let cases = [
        (
            "/generate",
            json!({"input_ids": prompt(300, v), "return_logprob": true, "logprob_start_len": 0,
                   "top_logprobs_num": 20, "token_ids_logprob": [1, 2, 3],
                   "sampling_params": {"max_new_tokens": 200, "ignore_eos": true}}),
        ),
        (
            "/generate",
            json!({"input_ids": [prompt(20, v), prompt(30, v)], "return_logprob": true,
                   "top_logprobs_num": 3, "return_prompt_token_ids": true,
                   "return_routed_experts": true,
                   "sampling_params": {"max_new_tokens": 40, "n": 2, "ignore_eos": true}}),
        ),
        (
            "/inference/v1/generate",
            json!({"token_ids": prompt(200, v), "return_token_ids": true,
                   "sampling_params": {"max_tokens": 150, "logprobs": 5, "prompt_logprobs": 5,
                                       "n": 2, "ignore_eos": true}}),
        ),
    ];
    for (i, (path, body)) in cases.iter().enumerate() {
        let resp = server.post(path, body).await;
        assert_eq!(resp.status().as_u16(), 200, "case {i}");
        let real = resp.bytes().await.expect("body").len();
        let capped = start_with(
            &["--max-answer-bytes", &(real - 1).to_string()],
            cfg.clone(),
            1,
        )
        .await;
        let (status, answer) = capped.post_json(path, body).await;
        assert_eq!(status, 400, "case {i}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("--max-answer-bytes") && message.contains("estimate reached"),
            "case {i}: refused while accumulated, not after building: {answer}"
        );
        assert_eq!(hits(&capped, "max_answer_bytes"), 1, "case {i}");
        capped.shutdown.cancel();
        if i == 0 {
            let roomy = start_with(
                &["--max-answer-bytes", &(3 * real).to_string()],
                cfg.clone(),
                1,
            )
            .await;
            let (status, answer) = roomy.post_json(path, body).await;
            assert_eq!(status, 200, "a {real}-byte answer fits a 3x cap: {answer}");
            roomy.shutdown.cancel();
        }
    }
}

/// Routed experts are capped up front (`--max-routed-expert-entries`): rows (prompt from
/// `routed_experts_start_len`, plus `max_new_tokens`) × 1,024 assumed ids per row, a native
/// 400 naming the flag before any engine sees the request.
#[tokio::test]
async fn routed_experts_over_the_up_front_cap_are_a_native_400() {
    let mut cfg = zero_delay();
    cfg.info.routed_experts = true;
    let server = start_with(&["--max-routed-expert-entries", "100000"], cfg, 1).await;
    let v = vocab(&server);
    // (100 + 10) rows × 1024 = 112,640 > 100,000.
    let body = json!({"input_ids": prompt(100, v), "return_routed_experts": true,
                      "sampling_params": {"max_new_tokens": 10}});
    let (status, answer) = server.post_json("/generate", &body).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("112640") && message.contains("--max-routed-expert-entries"),
        "{answer}"
    );
    assert_eq!(hits(&server, "max_routed_expert_entries"), 1);
    assert_eq!(server.engines[0].running(), 0);
    // Starting the prompt rows later fits: (100 - 20 + 10) × 1024 = 92,160.
    let mut later = body.clone();
    later["routed_experts_start_len"] = json!(20);
    let (status, answer) = server.post_json("/generate", &later).await;
    assert_eq!(status, 200, "{answer}");
    // Without routed experts nothing is counted.
    let mut plain = body.clone();
    plain["return_routed_experts"] = json!(false);
    let (status, _) = server.post_json("/generate", &plain).await;
    assert_eq!(status, 200);
}
