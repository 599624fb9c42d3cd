//! Relay (issue 15): a unary, single-item, `n = 1` SGLang request on an SGLang engine gets the
//! engine's own answer bytes with only `meta_info.id` edited — through the client's scan
//! ([`genfront_sglang::client::FrameDecoder::relay`]) and the format's assembler.

use std::time::Duration;

use futures::StreamExt;
use genfront_format::GenerateFormat;
use genfront_protocol::{Engine, EngineOutput, ErrorKind, FinishReason, StopMatch, Usage};
use genfront_sglang::{SglangEngine, SglangEngineOptions, SglangFormat, SglangSettings};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fake::{self, End, Fake, Reply, chunks};
use crate::roundtrip::prepare;

const RID: &str = "0123456789abcdef0123456789abcdef";

async fn connect(fake: &Fake) -> SglangEngine {
    let opts = SglangEngineOptions {
        eos_token_ids: vec![2],
        cancel_grace: Duration::from_millis(300),
        ..SglangEngineOptions::default()
    };
    match SglangEngine::connect(&fake.url(), opts).await {
        Ok(e) => e,
        Err(e) => panic!("connect failed: {e}"),
    }
}

/// An SGLang unary answer as orjson writes it, with what a re-rendering would not keep as is:
/// a float spelled `1e-05`, an unknown top-level key, meta keys in an unusual order, an
/// unknown meta key and a nested `text` with escapes.
fn answer(rid: &str, finish: &str) -> String {
    format!(
        r#"{{"text":"a\"b\u00e9","output_ids":[5,6,2],"meta_info":{{"id":"{rid}","finish_reason":{finish},"prompt_tokens":3,"weight_version":"w7","num_retractions":0,"output_token_logprobs":[[-1e-05,5,null],[-0.25,6,null],[-3.0,2,null]],"completion_tokens":3,"cached_tokens":1,"spec_verify_ct":0,"e2e_latency":0.012345678901234568}},"future_key":[1,{{"x":null}}]}}"#
    )
}

/// The engine request and prepared answer of `body`, dispatched as [`RID`] (as the frontend
/// does).
fn request(
    engine: &SglangEngine,
    body: &Value,
) -> (genfront_protocol::EngineRequest, genfront_format::Prepared) {
    let mut p = prepare(body, engine.info(), engine.incremental_streaming());
    let mut req = p.subs[0].request.clone();
    req.request_id = RID.into();
    req.output.stream = p.stream;
    p.subs[0].request.request_id = RID.into();
    (req, p)
}

async fn collect(
    mut s: genfront_protocol::OutputStream,
) -> Vec<Result<EngineOutput, genfront_protocol::EngineError>> {
    let mut out = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("stream stalled")
    {
        out.push(item);
    }
    out
}

#[tokio::test]
async fn relayed_answer_is_the_engines_bytes_with_the_rid_edited() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    let finish = r#"{"type":"stop","matched":2}"#;
    let body = answer(RID, finish);
    fake.shared
        .push(Reply::Sse(chunks(body.as_bytes(), &[7, 50]), End::Close));
    let (req, p) = request(
        &e,
        &json!({"rid": "client-1", "input_ids": [1, 2, 3], "stream": false, "return_logprob": true}),
    );
    assert!(req.output.relay, "a unary single request asks for relay");
    let items = collect(e.generate(req, CancellationToken::new())).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let out = items[0].clone().unwrap_or_else(|e| panic!("{e}"));
    // The scan: what the frontend derives (tokens, finish, usage) without decoding the rest.
    assert_eq!(out.token_ids, [5, 6, 2]);
    assert_eq!(out.finish_reason, Some(FinishReason::Eos { token_id: 2 }));
    assert_eq!(
        out.usage,
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 3,
            cached_tokens: 1
        })
    );
    assert!(out.logprobs.is_none(), "nothing decoded beyond the scan");
    let native = out.native.clone().expect("native bytes");
    assert_eq!(&native.body[..], body.as_bytes());
    assert_eq!(native.ids.len(), 1);
    assert_eq!(
        &native.body[native.ids[0].clone()],
        format!("\"{RID}\"").as_bytes()
    );
    // The format's assembler sends exactly those bytes, the rid edited.
    let mut assembler = p.assembler;
    assembler
        .on_output(0, out, &mut Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let resp = assembler.finish_unary().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&resp.body),
        answer("client-1", finish)
    );
}

#[tokio::test]
async fn a_stop_id_and_a_length_finish_are_scanned_like_decoded() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    for (finish, want) in [
        (
            r#"{"type":"stop","matched":6}"#,
            FinishReason::Stop {
                matched: StopMatch::TokenId(6),
            },
        ),
        (
            r#"{"type":"length","length":3}"#,
            FinishReason::Length { length: 3 },
        ),
    ] {
        let body = answer(RID, finish);
        fake.shared
            .push(Reply::Sse(chunks(body.as_bytes(), &[4096]), End::Close));
        let (req, _) = request(
            &e,
            &json!({"input_ids": [1, 2, 3], "stream": false, "sampling_params": {"stop_token_ids": [6]}}),
        );
        let items = collect(e.generate(req, CancellationToken::new())).await;
        let out = items[0].clone().unwrap_or_else(|e| panic!("{e}"));
        assert!(out.native.is_some());
        assert_eq!(out.finish_reason, Some(want));
    }
}

#[tokio::test]
async fn what_the_scan_does_not_take_is_decoded_typed() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    let finish = r#"{"type":"stop","matched":2}"#;
    // Another id than the dispatch id, and a duplicate key: both go to the typed decoder.
    let other = answer("someone-else", finish);
    let dup = answer(RID, finish).replacen(
        r#""cached_tokens":1"#,
        r#""cached_tokens":1,"cached_tokens":1"#,
        1,
    );
    for body in [other, dup] {
        fake.shared
            .push(Reply::Sse(chunks(body.as_bytes(), &[4096]), End::Close));
        let (req, _) = request(&e, &json!({"input_ids": [1, 2, 3], "stream": false}));
        let items = collect(e.generate(req, CancellationToken::new())).await;
        let out = items[0].clone().unwrap_or_else(|e| panic!("{e}"));
        assert!(out.native.is_none(), "typed: {body}");
        assert_eq!(out.token_ids, [5, 6, 2]);
        assert_eq!(out.finish_reason, Some(FinishReason::Eos { token_id: 2 }));
    }
    // An incremental route, a split or a batch request never asks for relay.
    let p = prepare(
        &json!({"input_ids": [1, 2, 3], "stream": true}),
        e.info(),
        true,
    );
    assert!(!p.subs[0].request.output.relay);
    let p = prepare(
        &json!({"input_ids": [[1, 2, 3]], "stream": false}),
        e.info(),
        false,
    );
    assert!(
        !p.subs[0].request.output.relay,
        "a batch of one answers an array"
    );
    let (req, _) = request(
        &e,
        &json!({"input_ids": [1, 2, 3], "stream": false, "sampling_params": {"n": 2}}),
    );
    assert!(!req.output.relay);
    let (req, _) = request(
        &e,
        &json!({"input_ids": [1, 2, 3], "stream": false, "return_prompt_token_ids": true}),
    );
    assert!(
        !req.output.relay,
        "genfront renders return_prompt_token_ids itself"
    );
}

#[tokio::test]
async fn engine_errors_of_a_relayed_request_keep_their_native_answer() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    // SGLang's unary answer for a request it aborted with a status: an error, as decoded.
    let body = answer(
        RID,
        r#"{"type":"abort","message":"Bad grammar","status_code":400,"err_type":"BadRequestError"}"#,
    );
    fake.shared
        .push(Reply::Sse(chunks(body.as_bytes(), &[4096]), End::Close));
    // An HTTP error answer.
    fake.shared.push(Reply::Status(
        400,
        r#"{"error":{"message":"The input is too long."}}"#.into(),
    ));
    let format = SglangFormat::new(&SglangSettings::default());
    for want in ["Bad grammar", "The input is too long."] {
        let (req, _) = request(&e, &json!({"input_ids": [1, 2, 3], "stream": false}));
        let items = collect(e.generate(req, CancellationToken::new())).await;
        assert_eq!(items.len(), 1);
        let err = match &items[0] {
            Err(e) => e.clone(),
            Ok(o) => panic!("expected an error, got {o:?}"),
        };
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert!(err.message.contains(want), "{}", err.message);
        let resp = format.error_response(&genfront_format::GenerateError::from(err), false);
        assert_eq!(resp.status, 400);
        let v: Value = serde_json::from_slice(&resp.body).unwrap_or_default();
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(want)),
            "{v}"
        );
    }
}

#[tokio::test]
async fn cancelling_a_relayed_request_aborts_it_and_relays_the_abort_answer() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    let aborted = answer(
        RID,
        r#"{"type":"abort","message":"Aborted","status_code":null,"err_type":null}"#,
    );
    // Nothing until the abort arrives, then SGLang's answer with the tokens so far.
    fake.shared.push(Reply::Sse(
        Vec::new(),
        End::OnAbort(chunks(aborted.as_bytes(), &[13])),
    ));
    let (req, p) = request(
        &e,
        &json!({"rid": "mine", "input_ids": [1, 2, 3], "stream": false}),
    );
    let cancel = CancellationToken::new();
    let s = e.generate(req, cancel.clone());
    let run = tokio::spawn(collect(s));
    crate::fake::wait_for("the request to reach the engine", || {
        !fake.shared.bodies().is_empty()
    })
    .await;
    cancel.cancel();
    let items = run.await.unwrap_or_default();
    assert_eq!(
        fake.shared.aborts(),
        [json!({"rid": RID, "abort_all": false})]
    );
    assert_eq!(items.len(), 1, "{items:?}");
    let out = items[0].clone().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out.finish_reason,
        Some(FinishReason::Cancelled {
            message: "Aborted".into()
        })
    );
    assert_eq!(out.token_ids, [5, 6, 2]);
    let mut assembler = p.assembler;
    assembler
        .on_output(0, out, &mut Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let resp = assembler.finish_unary().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        String::from_utf8_lossy(&resp.body),
        answer(
            "mine",
            r#"{"type":"abort","message":"Aborted","status_code":null,"err_type":null}"#
        )
    );
}

/// One cumulative SSE frame to `rid` as SGLang writes it: ids so far, a finish on the last.
fn frame(rid: &str, ids: &[u32], finish: &str) -> String {
    let list = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    format!(
        r#"{{"output_ids":[{list}],"meta_info":{{"id":"{rid}","finish_reason":{finish},"prompt_tokens":3,"weight_version":"default","completion_tokens":{},"cached_tokens":0,"e2e_latency":1e-05,"x_unknown":true}}}}"#,
        ids.len()
    )
}

fn sse_of(frames: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(f.as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

#[tokio::test]
async fn cumulative_frames_are_relayed_with_the_rid_edited() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    let frames = [
        frame(RID, &[5], "null"),
        frame(RID, &[5, 6], "null"),
        frame(RID, &[5, 6, 2], r#"{"type":"stop","matched":2}"#),
    ];
    fake.shared
        .push(Reply::Sse(chunks(&sse_of(&frames), &[11, 40]), End::Close));
    let (req, p) = request(
        &e,
        &json!({"rid": "s-1", "input_ids": [1, 2, 3], "stream": true}),
    );
    assert!(
        req.output.relay,
        "a cumulative single stream asks for relay"
    );
    let items = collect(e.generate(req, CancellationToken::new())).await;
    let outs: Vec<EngineOutput> = items
        .into_iter()
        .map(|i| i.unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(outs.len(), 3);
    // The deltas the frontend sees (TTFT/ITL, metrics) are the new ids of each frame.
    let deltas: Vec<Vec<u32>> = outs.iter().map(|o| o.token_ids.clone()).collect();
    assert_eq!(deltas, [vec![5], vec![6], vec![2]]);
    assert_eq!(
        outs[2].finish_reason,
        Some(FinishReason::Eos { token_id: 2 })
    );
    assert!(outs.iter().all(|o| o.native.is_some()));
    let mut assembler = p.assembler;
    let mut events = Vec::new();
    for o in outs {
        assembler
            .on_output(0, o, &mut events)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assembler
        .finish_stream(&mut events)
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<String> = events
        .iter()
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect();
    let want: Vec<String> = [
        frame("s-1", &[5], "null"),
        frame("s-1", &[5, 6], "null"),
        frame("s-1", &[5, 6, 2], r#"{"type":"stop","matched":2}"#),
    ]
    .to_vec();
    assert_eq!(
        got, want,
        "each frame as the engine sent it, the rid edited"
    );
}

#[tokio::test]
async fn cancelling_a_relayed_stream_relays_the_abort_frame() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    let abort = r#"{"type":"abort","message":"Aborted","status_code":null,"err_type":null}"#;
    fake.shared.push(Reply::Sse(
        chunks(&sse_of(&[frame(RID, &[5], "null")])[..], &[4096])
            .into_iter()
            // Without the `[DONE]` of `sse_of`: the stream stays open.
            .map(|c| c.slice(..c.len() - "data: [DONE]\n\n".len()))
            .collect(),
        End::OnAbort(chunks(&sse_of(&[frame(RID, &[5, 6], abort)]), &[9])),
    ));
    let (req, p) = request(
        &e,
        &json!({"rid": "s-2", "input_ids": [1, 2, 3], "stream": true}),
    );
    let cancel = CancellationToken::new();
    let mut s = e.generate(req, cancel.clone());
    let first = s.next().await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.token_ids, [5]);
    cancel.cancel();
    let rest = collect(s).await;
    assert_eq!(
        fake.shared.aborts(),
        [json!({"rid": RID, "abort_all": false})]
    );
    assert_eq!(rest.len(), 1, "{rest:?}");
    let last = rest[0].clone().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(last.token_ids, [6]);
    assert_eq!(
        last.finish_reason,
        Some(FinishReason::Cancelled {
            message: "Aborted".into()
        })
    );
    let mut assembler = p.assembler;
    let mut events = Vec::new();
    for o in [first, last] {
        assembler
            .on_output(0, o, &mut events)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(
        String::from_utf8_lossy(&events[1]),
        frame("s-2", &[5, 6], abort)
    );
}

/// SGLang 0.5.23 streams an abort that carries a `status_code` (a scheduler abort: server busy,
/// a bad request found late) as the frame it is, then `[DONE]` — `_handle_abort_finish_reason`
/// raises it only for a unary answer — so the relayed stream ends with the engine's own frame.
#[tokio::test]
async fn a_status_coded_abort_frame_of_a_stream_is_relayed_as_the_engine_wrote_it() {
    let fake = fake::start(false).await;
    let e = connect(&fake).await;
    let abort = r#"{"type":"abort","message":"server busy","status_code":503,"err_type":"ServiceUnavailable"}"#;
    let frames = [frame(RID, &[5], "null"), frame(RID, &[5, 6], abort)];
    fake.shared
        .push(Reply::Sse(chunks(&sse_of(&frames), &[13]), End::Close));
    let (req, p) = request(
        &e,
        &json!({"rid": "s-2", "input_ids": [1, 2, 3], "stream": true}),
    );
    assert!(req.output.relay);
    let outs: Vec<EngineOutput> = collect(e.generate(req, CancellationToken::new()))
        .await
        .into_iter()
        .map(|i| i.unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(outs.len(), 2);
    assert_eq!(
        outs[1].finish_reason,
        Some(FinishReason::Cancelled {
            message: "server busy".into()
        })
    );
    let mut assembler = p.assembler;
    let mut events = Vec::new();
    for o in outs {
        assembler
            .on_output(0, o, &mut events)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assembler
        .finish_stream(&mut events)
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<String> = events
        .iter()
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect();
    assert_eq!(
        got,
        [frame("s-2", &[5], "null"), frame("s-2", &[5, 6], abort)],
        "the engine's abort frame, the rid edited"
    );
}
