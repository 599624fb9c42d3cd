//! [`SglangEngine`] against the fake server: connect, decoding, errors, cancellation.

use std::time::Duration;

use futures::StreamExt;
use genfront_format::Prepared;
use genfront_protocol::{
    Engine, EngineError, EngineOutput, EngineRequest, ErrorKind, FinishReason, NativeBody,
    OutputStream, StopMatch,
};
use genfront_sglang::client::CLOSED_EARLY;
use genfront_sglang::{SglangEngine, SglangEngineOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fake::{self, End, Fake, Reply, chunks, frame, sse, wait_for};
use crate::roundtrip::prepare;

const RID: &str = "0123456789abcdef0123456789abcdef";

fn options() -> SglangEngineOptions {
    SglangEngineOptions {
        eos_token_ids: vec![2],
        cancel_grace: Duration::from_millis(300),
        ..SglangEngineOptions::default()
    }
}

async fn connect(fake: &Fake, opts: SglangEngineOptions) -> SglangEngine {
    match SglangEngine::connect(&fake.url(), opts).await {
        Ok(e) => e,
        Err(e) => panic!("connect failed: {e}"),
    }
}

/// The engine request the SGLang format makes of `body`, with the dispatch id [`RID`]. Without a
/// `stream` key the client is taken to stream (these tests exercise the streaming upstream; a
/// unary client gets SGLang's unary answer, see `unary_clients_get_the_unary_answer`).
fn native_request(engine: &SglangEngine, mut body: Value) -> (EngineRequest, Prepared) {
    if let Some(o) = body.as_object_mut() {
        o.entry("stream").or_insert(json!(true));
    }
    let mut p = prepare(&body, engine.info(), engine.incremental_streaming());
    let mut req = p.subs[0].request.clone();
    req.request_id = RID.into();
    // As the frontend does: the typed flag mirrors the client's `stream`.
    req.output.stream = p.stream;
    p.subs[0].request.request_id = RID.into();
    (req, p)
}

async fn collect(mut s: OutputStream) -> Vec<Result<EngineOutput, EngineError>> {
    let mut out = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("stream stalled")
    {
        out.push(item);
    }
    out
}

fn oks(items: &[Result<EngineOutput, EngineError>]) -> Vec<EngineOutput> {
    items
        .iter()
        .map(|i| i.clone().unwrap_or_else(|e| panic!("unexpected error {e}")))
        .collect()
}

fn last_err(items: &[Result<EngineOutput, EngineError>]) -> EngineError {
    match items.last() {
        Some(Err(e)) => e.clone(),
        other => panic!("expected an error last, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_learns_server_facts() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let info = e.info();
    assert_eq!(info.model, "org/tiny-moe");
    assert_eq!(info.model_aliases, ["tiny"]);
    assert_eq!(info.max_context_len, 4096, "max_req_input_len + 1");
    assert_eq!(info.max_num_seqs, Some(48));
    assert_eq!(
        info.vocab_size, None,
        "SGLang does not report its vocabulary"
    );
    assert_eq!(info.max_logprobs, None, "SGLang has no logprob cap");
    assert_eq!(
        info.server_info
            .as_ref()
            .map(|s| s["max_req_input_len"].clone()),
        Some(json!(4095)),
        "the server's own document is kept for /server_info"
    );
    assert_eq!(info.eos_token_ids, [2]);
    assert!(!info.routed_experts && !info.sampling_mask);
    assert!(!e.incremental_streaming());
    assert!(e.ready());
    assert_eq!(e.probe(Duration::from_secs(5)).await, Ok(()));

    // Incremental mode; the newer `/server_info` and `/model_info` when the `get_` spellings are
    // gone; option overrides.
    let fake = fake::start(true).await;
    *fake.shared.legacy_model_info.lock().unwrap() = true;
    *fake.shared.new_server_info_only.lock().unwrap() = true;
    fake.shared.server_info.lock().unwrap()["context_length"] = json!(2048);
    let e = connect(
        &fake,
        SglangEngineOptions {
            experts_shape: Some((2, 4)),
            vocab_size: Some(1000),
            ..options()
        },
    )
    .await;
    assert!(e.incremental_streaming());
    assert_eq!(e.info().model, "org/tiny-moe");
    assert_eq!(e.info().max_context_len, 2048);
    assert_eq!(e.info().vocab_size, Some(1000));
    assert!(e.info().routed_experts);

    // Nothing listening: unavailable.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = SglangEngine::connect(&format!("http://127.0.0.1:{port}"), options())
        .await
        .err()
        .map(|e| e.kind);
    assert_eq!(err, Some(ErrorKind::Unavailable));
}

#[tokio::test]
async fn cumulative_stream_split_across_chunks() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let frames = [
        frame(&[5], Value::Null, 1, json!({"dp_rank": 0})),
        frame(&[5, 6, 7], Value::Null, 3, json!({})),
        frame(
            &[5, 6, 7, 2],
            json!({"type": "stop", "matched": 2}),
            4,
            json!({"e2e_latency": 0.1}),
        ),
    ];
    let body = sse(&frames, true);
    fake.shared
        .push(Reply::Sse(chunks(&body, &[7, 3, 50, 1, 1]), End::Close));
    let client_body = json!({"rid": "client-rid", "input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8, "custom_params": {"zzz": 1}}, "custom": [1], "stream": true});
    let (req, _) = native_request(&e, client_body);
    let outs = oks(&collect(e.generate(req, CancellationToken::new())).await);
    let ids: Vec<Vec<u32>> = outs.iter().map(|o| o.token_ids.clone()).collect();
    assert_eq!(ids, [vec![5], vec![6, 7], vec![2]]);
    assert_eq!(
        outs[2].finish_reason,
        Some(FinishReason::Eos { token_id: 2 })
    );
    assert_eq!(outs[2].usage.map(|u| u.completion_tokens), Some(4));
    assert!(outs[..2].iter().all(|o| o.finish_reason.is_none()));
    assert_eq!(
        outs[0]
            .engine_data
            .as_ref()
            .map(|d| d["meta_info"]["dp_rank"].clone()),
        Some(json!(0))
    );

    // The body sent: the client's keys in order, private rid, streaming, token ids.
    let sent = fake.shared.bodies();
    let sent = &sent[0];
    let keys: Vec<&String> = sent.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["rid", "input_ids", "sampling_params", "custom", "stream"]
    );
    assert_eq!(sent["rid"], RID);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["input_ids"], json!([1, 2, 3]));
    assert_eq!(sent["sampling_params"]["custom_params"], json!({"zzz": 1}));
    assert!(
        fake.shared.aborts().is_empty(),
        "a finished stream is not aborted"
    );
}

#[tokio::test]
async fn incremental_stream_with_logprobs() {
    let fake = fake::start(true).await;
    let e = connect(&fake, options()).await;
    assert!(e.incremental_streaming());
    let lp = |x: f64, id: u32| json!([x, id, null]);
    let frames = [
        frame(
            &[5],
            Value::Null,
            1,
            json!({
                "input_token_logprobs": [[null, 1, null], lp(-1.5, 2), lp(-2.5, 3)],
                "output_token_logprobs": [lp(-0.25, 5)],
                "output_top_logprobs": [[lp(-0.25, 5)]],
            }),
        ),
        frame(
            &[6, 9],
            json!({"type": "stop", "matched": 9}),
            3,
            json!({
                "input_token_logprobs": [[null, 1, null], lp(-1.5, 2), lp(-2.5, 3)],
                "output_token_logprobs": [lp(-0.5, 6), lp(-0.75, 9)],
                "output_top_logprobs": [[lp(-0.5, 6)], [lp(-0.1, 4)]],
            }),
        ),
    ];
    fake.shared.push(Reply::Sse(
        chunks(&sse(&frames, true), &[1, 2, 5, 64]),
        End::Close,
    ));
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"stop_token_ids": [9]}, "return_logprob": true, "top_logprobs_num": 1, "logprob_start_len": 0});
    let (req, _) = native_request(&e, body);
    let outs = oks(&collect(e.generate(req, CancellationToken::new())).await);
    assert_eq!(outs.len(), 2);
    assert_eq!(outs[1].token_ids, [6, 9]);
    let p = outs[0].prompt_logprobs.clone().unwrap();
    assert_eq!((p.start, p.entries.len()), (0, 3));
    assert!(outs[1].prompt_logprobs.is_none());
    let lps = outs[1].logprobs.clone().unwrap();
    assert_eq!(
        lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        [-0.5, -0.75]
    );
    assert_eq!(lps[1].top[0].token_id, 4);
    assert_eq!(
        outs[1].finish_reason,
        Some(FinishReason::Stop {
            matched: StopMatch::TokenId(9)
        })
    );
}

#[tokio::test]
async fn error_frames_and_error_aborts() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let msg = "The input (4 tokens) is longer than the model's context length (3 tokens).";
    fake.shared.push(Reply::Sse(
        chunks(&sse(&[json!({"error": {"message": msg}})], true), &[9]),
        End::Close,
    ));
    fake.shared.push(Reply::Sse(
        chunks(
            &sse(
                &[frame(
                    &[],
                    json!({"type": "abort", "message": "Bad grammar", "status_code": 400, "err_type": "BadRequestError"}),
                    0,
                    json!({}),
                )],
                true,
            ),
            &[4096],
        ),
        End::Close,
    ));
    for (want, status) in [(msg, None), ("Bad grammar", Some(400))] {
        let (req, _) = native_request(&e, json!({"input_ids": [1, 2, 3]}));
        let items = collect(e.generate(req, CancellationToken::new())).await;
        assert_eq!(items.len(), 1);
        let err = last_err(&items);
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert_eq!(err.message, want);
        assert_eq!(err.status_code, status);
    }
}

#[tokio::test]
async fn http_errors_map_by_class() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let cases = [
        (
            400,
            r#"{"error":{"message":"bad sampling"}}"#,
            ErrorKind::InvalidArgument,
            Some("bad sampling"),
        ),
        (
            400,
            r#"{"object":"error","message":"flat shape","type":"Bad Request","param":null,"code":400}"#,
            ErrorKind::InvalidArgument,
            Some("flat shape"),
        ),
        (
            401,
            r#"{"error":"unauthorized"}"#,
            ErrorKind::Internal,
            None,
        ),
        (403, "", ErrorKind::Internal, None),
        // A route SGLang does not serve (FastAPI's default 404) is genfront's problem; SGLang's
        // own 404 envelope is the client's.
        (404, r#"{"detail":"Not Found"}"#, ErrorKind::Internal, None),
        (
            404,
            r#"{"object":"error","message":"no such adapter","type":"NotFoundError","param":null,"code":404}"#,
            ErrorKind::InvalidArgument,
            Some("no such adapter"),
        ),
        (429, "", ErrorKind::Overloaded, None),
        (500, "boom", ErrorKind::Internal, None),
        (502, "", ErrorKind::Unavailable, None),
        (
            503,
            r#"{"object":"error","message":"starting","type":"503","param":null,"code":503}"#,
            ErrorKind::Unavailable,
            None,
        ),
        (504, "", ErrorKind::Unavailable, None),
    ];
    for (status, body, kind, message) in cases {
        fake.shared.push(Reply::Status(status, body.into()));
        let (req, _) = native_request(&e, json!({"input_ids": [1]}));
        let items = collect(e.generate(req, CancellationToken::new())).await;
        assert_eq!(items.len(), 1, "HTTP {status}");
        let err = last_err(&items);
        assert_eq!(
            (err.kind, err.status_code),
            (kind, Some(status)),
            "HTTP {status}"
        );
        if let Some(m) = message {
            assert_eq!(err.message, m);
        }
    }
    // Request outcomes do not change readiness: the router owns worker state.
    assert!(e.ready());
}

#[tokio::test]
async fn incomplete_streams() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let first = frame(&[5], Value::Null, 1, json!({}));
    // Connection broken mid-stream, closed without a terminal frame, `[DONE]` before one, cut
    // in the middle of a frame.
    let mut cut = sse(std::slice::from_ref(&first), false);
    cut.extend_from_slice(b"data: {\"output_ids\":[5,6");
    let scripts = [
        Reply::Sse(
            chunks(&sse(std::slice::from_ref(&first), false), &[5]),
            End::Break,
        ),
        Reply::Sse(
            chunks(&sse(std::slice::from_ref(&first), false), &[5]),
            End::Close,
        ),
        Reply::Sse(
            chunks(&sse(std::slice::from_ref(&first), true), &[5]),
            End::Close,
        ),
        Reply::Sse(chunks(&cut, &[11]), End::Close),
    ];
    for (i, script) in scripts.into_iter().enumerate() {
        fake.shared.push(script);
        let (req, _) = native_request(&e, json!({"input_ids": [1]}));
        let items = collect(e.generate(req, CancellationToken::new())).await;
        assert_eq!(items.len(), 2, "case {i}: {items:?}");
        assert_eq!(
            items[0].as_ref().map(|o| o.token_ids.clone()).ok(),
            Some(vec![5])
        );
        let err = last_err(&items);
        assert_eq!(err.kind, ErrorKind::StreamIncomplete, "case {i}");
        assert!(
            err.message.starts_with(CLOSED_EARLY),
            "case {i}: {}",
            err.message
        );
        if i > 0 {
            assert_eq!(err.message, CLOSED_EARLY);
        }
    }
}

#[tokio::test]
async fn dropping_the_stream_aborts_with_the_dispatch_rid() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    fake.shared.push(Reply::Sse(
        chunks(
            &sse(&[frame(&[5], Value::Null, 1, json!({}))], false),
            &[64],
        ),
        End::Hang,
    ));
    let (req, _) = native_request(&e, json!({"rid": "client-rid", "input_ids": [1]}));
    let mut s = e.generate(req, CancellationToken::new());
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(first.token_ids, [5]);
    drop(s);
    wait_for("the abort", || !fake.shared.aborts().is_empty()).await;
    assert_eq!(
        fake.shared.aborts(),
        [json!({"rid": RID, "abort_all": false})]
    );
    wait_for("the disconnect", || {
        fake.shared
            .disconnects
            .load(std::sync::atomic::Ordering::Relaxed)
            == 1
    })
    .await;
    assert_eq!(e.aborts_sent(), 1);
}

#[tokio::test]
async fn cancel_aborts_and_ends_with_the_servers_abort_frame() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let abort =
        json!({"type": "abort", "message": "Aborted", "status_code": null, "err_type": null});
    let after = sse(&[frame(&[5, 6, 7], abort, 3, json!({}))], true);
    fake.shared.push(Reply::Sse(
        chunks(
            &sse(&[frame(&[5], Value::Null, 1, json!({}))], false),
            &[64],
        ),
        End::OnAbort(chunks(&after, &[10])),
    ));
    let (req, _) = native_request(&e, json!({"input_ids": [1, 2, 3]}));
    let cancel = CancellationToken::new();
    let mut s = e.generate(req, cancel.clone());
    assert_eq!(s.next().await.unwrap().unwrap().token_ids, [5]);
    cancel.cancel();
    let rest = oks(&collect(s).await);
    // The abort frame's new tokens come first, then a `Cancelled` item without tokens.
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(rest[0].token_ids, [6, 7]);
    assert!(rest[0].finish_reason.is_none());
    assert!(rest[1].token_ids.is_empty());
    assert_eq!(
        rest[1].finish_reason,
        Some(FinishReason::Cancelled {
            message: "Aborted".into()
        })
    );
    assert_eq!(rest[1].usage.map(|u| u.completion_tokens), Some(3));
    assert_eq!(
        fake.shared.aborts(),
        [json!({"rid": RID, "abort_all": false})]
    );
}

#[tokio::test]
async fn cancel_without_an_abort_frame_ends_after_the_grace_period() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    fake.shared.push(Reply::Sse(
        chunks(
            &sse(&[frame(&[5, 6], Value::Null, 2, json!({}))], false),
            &[64],
        ),
        End::Hang,
    ));
    let (req, _) = native_request(&e, json!({"input_ids": [1]}));
    let cancel = CancellationToken::new();
    let mut s = e.generate(req, cancel.clone());
    assert_eq!(s.next().await.unwrap().unwrap().token_ids, [5, 6]);
    cancel.cancel();
    let started = std::time::Instant::now();
    let rest = oks(&collect(s).await);
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(rest.len(), 1);
    assert_eq!(
        rest[0].finish_reason,
        Some(FinishReason::Cancelled {
            message: "Aborted".into()
        })
    );
    assert_eq!(rest[0].usage.map(|u| u.completion_tokens), Some(2));
    wait_for("the abort", || fake.shared.aborts().len() == 1).await;
    wait_for("the disconnect", || {
        fake.shared
            .disconnects
            .load(std::sync::atomic::Ordering::Relaxed)
            == 1
    })
    .await;
}

#[tokio::test]
async fn cancel_before_the_first_poll_sends_nothing() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let (req, _) = native_request(&e, json!({"input_ids": [1]}));
    let cancel = CancellationToken::new();
    let s = e.generate(req, cancel.clone());
    cancel.cancel();
    let items = oks(&collect(s).await);
    assert_eq!(items.len(), 1);
    assert!(matches!(
        items[0].finish_reason,
        Some(FinishReason::Cancelled { .. })
    ));
    // A stream dropped before its first poll sent nothing, so it aborts nothing.
    let (req, _) = native_request(&e, json!({"input_ids": [1]}));
    drop(e.generate(req, CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(fake.shared.bodies().is_empty());
    assert!(fake.shared.aborts().is_empty());
    assert_eq!(e.aborts_sent(), 0);
}

fn typed_request(n: u32) -> EngineRequest {
    let mut req = EngineRequest {
        request_id: RID.into(),
        token_ids: vec![1, 2, 3],
        native: NativeBody {
            format: "vllm".into(),
            body: json!({"model": "tiny", "token_ids": [1, 2, 3]}),
        },
        ..EngineRequest::default()
    };
    req.sampling.n = n;
    req.stop.max_tokens = Some(2);
    req
}

#[tokio::test]
async fn parallel_samples_of_a_typed_request() {
    let fake = fake::start(true).await;
    let e = connect(&fake, options()).await;
    for _ in 0..2 {
        let frames = [
            frame(&[5], Value::Null, 1, json!({})),
            frame(&[6], json!({"type": "length", "length": 2}), 2, json!({})),
        ];
        fake.shared
            .push(Reply::Sse(chunks(&sse(&frames, true), &[13]), End::Close));
    }
    let outs = oks(&collect(e.generate(typed_request(2), CancellationToken::new())).await);
    assert_eq!(outs.len(), 4);
    for index in 0..2 {
        let mine: Vec<&EngineOutput> = outs.iter().filter(|o| o.index == index).collect();
        assert_eq!(mine.len(), 2);
        assert_eq!(
            mine[1].finish_reason,
            Some(FinishReason::Length { length: 2 })
        );
    }
    let mut rids: Vec<String> = fake
        .shared
        .bodies()
        .iter()
        .map(|b| b["rid"].as_str().unwrap().to_owned())
        .collect();
    rids.sort();
    assert_eq!(rids, [format!("{RID}-0"), format!("{RID}-1")]);
    for b in fake.shared.bodies() {
        assert_eq!(b["sampling_params"]["max_new_tokens"], 2);
        assert_eq!(b["stream"], true);
    }

    // One failing choice ends the stream with its error and aborts the rest (one abort, the
    // dispatch id being the prefix of both rids).
    fake.shared
        .push(Reply::Status(400, r#"{"error":{"message":"nope"}}"#.into()));
    fake.shared.push(Reply::Sse(
        chunks(
            &sse(&[frame(&[5], Value::Null, 1, json!({}))], false),
            &[64],
        ),
        End::Hang,
    ));
    let items = collect(e.generate(typed_request(2), CancellationToken::new())).await;
    assert_eq!(last_err(&items).message, "nope");
    wait_for("the abort", || fake.shared.aborts().len() == 1).await;
    assert_eq!(fake.shared.aborts()[0]["rid"], RID);
}

#[tokio::test]
async fn unsupported_typed_requests_fail_before_sending() {
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let mut req = typed_request(1);
    req.output.routed_experts = true;
    let items = collect(e.generate(req, CancellationToken::new())).await;
    assert_eq!(last_err(&items).kind, ErrorKind::Unsupported);
    assert!(fake.shared.bodies().is_empty());
}

#[tokio::test]
async fn native_meta_and_routed_experts_pass_through_the_assembler() {
    use base64::Engine as _;
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(
        (0..12i32)
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    let frames = [
        frame(&[5], Value::Null, 1, json!({"dp_rank": 1})),
        frame(
            &[5, 6],
            json!({"type": "length", "length": 2}),
            2,
            json!({"dp_rank": 1, "spec_accept_rate": 0.75, "routed_experts": b64, "e2e_latency": 0.2}),
        ),
    ];
    fake.shared
        .push(Reply::Sse(chunks(&sse(&frames, true), &[40]), End::Close));
    let body = json!({"input_ids": [1, 2, 3], "return_routed_experts": true, "stream": true});
    let (req, prepared) = native_request(&e, body);
    let outs = oks(&collect(e.generate(req, CancellationToken::new())).await);
    assert!(
        outs.iter().all(|o| o.routed_experts.is_none()),
        "shape unknown"
    );
    let mut asm = prepared.assembler;
    let mut events = Vec::new();
    for o in outs {
        asm.on_output(0, o, &mut events).unwrap();
    }
    asm.finish_stream(&mut events).unwrap();
    let last: Value = serde_json::from_slice(events.last().unwrap()).unwrap();
    let meta = &last["meta_info"];
    assert_eq!(
        meta["routed_experts"],
        json!(b64),
        "native string re-emitted"
    );
    assert_eq!(meta["dp_rank"], 1);
    assert_eq!(meta["spec_accept_rate"], 0.75);
    assert_eq!(last["output_ids"], json!([5, 6]));
    let first: Value = serde_json::from_slice(&events[0]).unwrap();
    assert!(first["meta_info"].get("routed_experts").is_none());
}

#[tokio::test]
async fn probe_is_one_get_health() {
    use std::sync::atomic::Ordering::Relaxed;
    let fake = fake::start(false).await;
    let e = connect(&fake, options()).await;
    let calls = || fake.shared.health_calls.load(Relaxed);
    assert_eq!(calls(), 0, "no background probe");
    assert_eq!(e.probe(Duration::from_secs(5)).await, Ok(()));
    assert_eq!(calls(), 1);

    fake.shared.health_status.store(503, Relaxed);
    let err = e.probe(Duration::from_secs(5)).await.expect_err("503");
    assert_eq!(
        (err.kind, err.status_code),
        (ErrorKind::Unavailable, Some(503))
    );
    // A failed generate does not touch readiness, nor does a failed probe.
    assert!(e.ready());

    fake.shared.health_status.store(0, Relaxed);
    fake.shared.health_delay_ms.store(500, Relaxed);
    let err = e.probe(Duration::from_millis(50)).await.expect_err("slow");
    assert_eq!(err.kind, ErrorKind::Unavailable);
    fake.shared.health_delay_ms.store(0, Relaxed);
    assert_eq!(e.probe(Duration::from_secs(5)).await, Ok(()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(calls(), 4, "one GET per probe, nothing in between");
}

#[tokio::test]
async fn unary_clients_get_the_unary_answer() {
    let fake = fake::start(false).await;
    let e = connect(
        &fake,
        SglangEngineOptions {
            eos_token_ids: vec![2],
            ..SglangEngineOptions::default()
        },
    )
    .await;
    let answer = frame(
        &[5, 6, 2],
        json!({"type": "stop", "matched": 2}),
        3,
        json!({"e2e_latency": 0.1}),
    );
    let bytes = serde_json::to_vec(&answer).expect("json");
    fake.shared
        .push(Reply::Sse(chunks(&bytes, &[4, 9]), End::Close));
    let (req, _) = native_request(
        &e,
        json!({"rid": "c", "input_ids": [1, 2, 3], "stream": false}),
    );
    let outs = oks(&collect(e.generate(req, CancellationToken::new())).await);
    assert_eq!(outs.len(), 1, "one answer, one delta");
    assert_eq!(outs[0].token_ids, vec![5, 6, 2]);
    assert_eq!(
        outs[0].finish_reason,
        Some(FinishReason::Eos { token_id: 2 })
    );
    let sent = fake.shared.bodies();
    assert_eq!(sent[0]["stream"], false);
    assert_eq!(sent[0]["rid"], RID);
}

/// The leg the router gives the prefill side of an SGLang P/D pair.
fn prefill_leg(room: u64) -> genfront_protocol::PdLeg {
    genfront_protocol::PdLeg {
        role: genfront_protocol::PdRole::Prefill,
        bootstrap: Some(genfront_protocol::Bootstrap {
            host: "[fd00::1]".into(),
            port: Some(8998),
            room,
        }),
        kv_transfer_params: None,
    }
}

#[tokio::test]
async fn pd_prefill_answers_decode_with_prompt_side_fields() {
    const ROOM: u64 = (1 << 63) - 1;
    let prompt_side = json!({
        "input_token_logprobs": [[null, 1, null], [-1.5, 2, null], [-0.25, 3, null]],
        "output_token_logprobs": [[-0.5, 5, null]],
        "cached_tokens": 2,
    });
    // SGLang's prefill: its one sampled token (or none), finish `length` 0, unary and streamed.
    let cases = [
        (false, vec![5u32], 1usize),
        (true, vec![5], 1),
        (false, vec![], 0),
        (true, vec![], 0),
    ];
    for (stream, ids, completion) in cases {
        let fake = fake::start(false).await;
        let e = connect(&fake, options()).await;
        let mut extra = prompt_side.clone();
        if ids.is_empty() {
            extra["output_token_logprobs"] = json!([]);
        }
        let answer = frame(
            &ids,
            json!({"type": "length", "length": 0}),
            completion,
            extra,
        );
        let bytes = if stream {
            sse(&[answer], true)
        } else {
            serde_json::to_vec(&answer).expect("json")
        };
        fake.shared
            .push(Reply::Sse(chunks(&bytes, &[7]), End::Close));
        let (mut req, _) = native_request(
            &e,
            json!({"rid": "c", "input_ids": [1, 2, 3], "stream": stream,
                   "sampling_params": {"max_new_tokens": 8},
                   "return_logprob": true, "logprob_start_len": 0}),
        );
        req.pd = Some(prefill_leg(ROOM));
        let outs = oks(&collect(e.generate(req, CancellationToken::new())).await);
        let case = format!("stream {stream}, {} ids", ids.len());
        let last = outs.last().expect("an output");
        assert_eq!(
            last.finish_reason,
            Some(FinishReason::Length { length: 0 }),
            "{case}"
        );
        let tokens: Vec<u32> = outs.iter().flat_map(|o| o.token_ids.clone()).collect();
        assert_eq!(tokens, ids, "{case}");
        let prompt = outs
            .iter()
            .find_map(|o| o.prompt_logprobs.clone())
            .expect("prompt logprobs");
        assert_eq!(prompt.entries.len(), 3, "{case}");
        assert_eq!(
            prompt.entries[1].as_ref().map(|e| (e.token_id, e.logprob)),
            Some((2, -1.5))
        );
        assert_eq!(last.usage.map(|u| u.cached_tokens), Some(2), "{case}");
        let sent = fake.shared.bodies();
        assert_eq!(sent[0]["bootstrap_host"], "[fd00::1]");
        assert_eq!(sent[0]["bootstrap_port"], 8998);
        assert_eq!(sent[0]["bootstrap_room"].as_u64(), Some(ROOM), "{case}");
        assert_eq!(sent[0]["sampling_params"]["max_new_tokens"], 8);
    }
}

/// A client's own bootstrap fields (SGLang accepts them from any client): an aggregated engine
/// gets them as sent; on a P/D route the router's coordinates replace them on both legs, so a
/// client value can never pair a leg with another request's room.
#[tokio::test]
async fn client_bootstrap_fields_never_reach_a_pd_leg() {
    const ROOM: u64 = 4242;
    let client = json!({"rid": "c", "input_ids": [1, 2, 3], "stream": false,
                        "sampling_params": {"max_new_tokens": 2},
                        "bootstrap_host": "10.9.9.9", "bootstrap_port": 1,
                        "bootstrap_room": 7, "bootstrap_pair_key": "theirs",
                        "decode_tp_size": 8});
    let answer = || {
        let f = frame(&[5, 2], json!({"type": "stop", "matched": 2}), 2, json!({}));
        Reply::Sse(
            chunks(&serde_json::to_vec(&f).expect("json"), &[5]),
            End::Close,
        )
    };
    for role in [
        None,
        Some(genfront_protocol::PdRole::Prefill),
        Some(genfront_protocol::PdRole::Decode),
    ] {
        let fake = fake::start(false).await;
        let e = connect(&fake, options()).await;
        fake.shared.push(answer());
        let (mut req, _) = native_request(&e, client.clone());
        if let Some(role) = role {
            let mut leg = prefill_leg(ROOM);
            leg.role = role;
            req.pd = Some(leg);
        }
        let outs = oks(&collect(e.generate(req, CancellationToken::new())).await);
        assert!(!outs.is_empty(), "{role:?}");
        let sent = fake.shared.bodies();
        let body = &sent[0];
        if role.is_none() {
            for k in [
                "bootstrap_host",
                "bootstrap_port",
                "bootstrap_room",
                "bootstrap_pair_key",
            ] {
                assert_eq!(body[k], client[k], "{k}");
            }
        } else {
            assert_eq!(body["bootstrap_host"], "[fd00::1]", "{role:?}");
            assert_eq!(body["bootstrap_port"], 8998, "{role:?}");
            assert_eq!(body["bootstrap_room"].as_u64(), Some(ROOM), "{role:?}");
            assert!(body.get("bootstrap_pair_key").is_none(), "{role:?}");
            assert!(body.get("decode_tp_size").is_none(), "{role:?}");
        }
    }
}
