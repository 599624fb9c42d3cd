//! Relay (issue 15): a one-choice vLLM-format request goes upstream as the client asked it
//! (`stream: false`, or its own `stream_options`), and vLLM's unary body or SSE chunks are only
//! scanned (ids, finish, usage, where `request_id` sits) and handed over whole; the format's
//! assembler answers them byte for byte with only `request_id` edited. Bodies the scan does not
//! take are decoded as before.

use futures::StreamExt;
use genfront_protocol::{Engine, FinishReason, StopMatch};
use genfront_vllm::CANCELLED_MESSAGE;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{NATIVE_ID, Script, Step, engine, oks, prepare, run, usage};

/// vLLM's unary answer to `id` as its `JSONResponse` writes it, with spellings genfront's
/// renderer would not reproduce: a float `1e-05`, `-0.0`, an escape, an unknown key, the keys of
/// a build newer than genfront's model.
fn answer(id: &str, finish: &str, stop_reason: &str) -> String {
    format!(
        r#"{{"request_id":"{id}","model":"Qwen/Qwen3-8B","created":1700000000,"usage":{{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,"prompt_tokens_details":{{"cached_tokens":1}},"completion_tokens_details":null}},"prompt_logprobs":null,"prompt_token_id_logprobs":null,"metrics":{{"ttft_ms":1e-05}},"kv_transfer_params":null,"ec_transfer_params":null,"output_mode":"tokens","future":"a\"b\u00e9","choices":[{{"index":0,"finish_reason":{finish},"stop_reason":{stop_reason},"token_ids":[5,7],"routed_experts":null,"sampling_mask":null,"weight_versions":[{{"version":"default","start":0,"end":2}}],"logprobs":{{"content":[{{"token_id":5,"logprob":-0.0,"rank":1,"top_logprobs":[]}},{{"token_id":7,"logprob":-1e-05,"rank":1,"top_logprobs":[]}}]}}}}]}}"#
    )
}

fn unary_body() -> Value {
    json!({"request_id": "client-1", "token_ids": [1, 2, 3], "stream": false,
        "sampling_params": {"max_tokens": 2, "logprobs": 0}})
}

fn raw(body: String) -> Script {
    Script::Stream(vec![Step::Send(body.into_bytes())])
}

#[tokio::test]
async fn a_unary_answer_is_relayed_with_only_the_request_id_edited() {
    let (fake, engine) = engine().await;
    let wire = answer(NATIVE_ID, r#""stop""#, "7");
    fake.script(raw(wire.clone()));
    let (request, mut assembler) = prepare(&engine, &unary_body());
    assert!(
        request.output.relay,
        "a unary one-choice request asks for relay"
    );
    let out = oks(run(&engine, request).await);
    // Upstream: the client's unary request, not genfront's stream.
    let sent = &fake.generate_calls()[0].1;
    assert_eq!(sent["stream"], json!(false));
    assert!(sent.get("stream_options").is_none());
    assert_eq!(out.len(), 1);
    let item = &out[0];
    let native = item.native.as_ref().expect("relayed");
    assert_eq!(&native.body[..], wire.as_bytes());
    assert_eq!(native.ids.len(), 1);
    assert_eq!(
        &wire[native.ids[0].clone()],
        format!("\"{NATIVE_ID}\""),
        "the id range is the request_id literal"
    );
    assert_eq!(item.token_ids, [5, 7]);
    assert_eq!(
        item.finish_reason,
        Some(FinishReason::Stop {
            matched: StopMatch::TokenId(7)
        })
    );
    assert_eq!(item.usage, usage(2, 1));
    assert!(item.engine_data.is_none() && item.logprobs.is_none());
    for item in out {
        assembler
            .on_output(0, item, &mut Vec::new())
            .expect("on_output");
    }
    let resp = assembler.finish_unary().expect("answer");
    assert_eq!(resp.status.as_u16(), 200);
    assert_eq!(
        std::str::from_utf8(&resp.body).expect("utf-8"),
        answer("generate-tokens-client-1", r#""stop""#, "7"),
        "byte for byte, only request_id edited"
    );
}

#[tokio::test]
async fn an_engine_abort_is_relayed_as_a_cancelled_finish_with_its_tokens() {
    let (fake, engine) = engine().await;
    let wire = answer(NATIVE_ID, r#""abort""#, "null");
    fake.script(Script::Stream(vec![
        Step::WaitAbort,
        Step::Send(wire.clone().into_bytes()),
    ]));
    let (request, mut assembler) = prepare(&engine, &unary_body());
    let cancel = CancellationToken::new();
    let stream = engine.generate(request, cancel.clone());
    let collect = tokio::spawn(async move { stream.collect::<Vec<_>>().await });
    crate::support::eventually("the call", || !fake.generate_calls().is_empty()).await;
    cancel.cancel();
    let out = oks(collect.await.expect("join"));
    assert_eq!(fake.aborts(), vec![json!({"request_ids": [NATIVE_ID]})]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].token_ids, [5, 7]);
    assert_eq!(
        out[0].finish_reason,
        Some(FinishReason::Cancelled {
            message: CANCELLED_MESSAGE.to_owned()
        })
    );
    for item in out {
        assembler
            .on_output(0, item, &mut Vec::new())
            .expect("on_output");
    }
    let resp = assembler.finish_unary().expect("answer");
    assert_eq!(
        std::str::from_utf8(&resp.body).expect("utf-8"),
        answer("generate-tokens-client-1", r#""abort""#, "null")
    );
}

#[tokio::test]
async fn bodies_the_scan_does_not_take_are_decoded_as_before() {
    let one = answer(NATIVE_ID, r#""length""#, "null");
    let cases = [
        // Another request's id.
        answer("generate-tokens-other", r#""length""#, "null"),
        // Two choices.
        one.replace(
            r#""choices":[{"index":0"#,
            r#""choices":[{"index":0,"token_ids":[1],"finish_reason":"stop"},{"index":0"#,
        ),
        // An error finish: the typed decoder's error finish.
        answer(NATIVE_ID, r#""error""#, "null"),
        // Not an object.
        "[1]".to_owned(),
    ];
    for (i, wire) in cases.into_iter().enumerate() {
        let (fake, engine) = engine().await;
        fake.script(raw(wire));
        let (request, _) = prepare(&engine, &unary_body());
        let out = run(&engine, request).await;
        assert!(
            out.iter()
                .all(|o| o.as_ref().map_or(true, |o| o.native.is_none())),
            "case {i}: {out:?}"
        );
        match i {
            0 => assert_eq!(oks(out)[0].token_ids, [5, 7]),
            // The assembler answers it with vLLM's 500.
            2 => assert!(matches!(
                oks(out)[0].finish_reason,
                Some(FinishReason::Error { .. })
            )),
            _ => assert!(out.iter().any(Result::is_err), "case {i}: {out:?}"),
        }
    }
}

#[tokio::test]
async fn several_choices_and_discarded_outputs_stay_typed() {
    let (_fake, engine) = engine().await;
    for body in [
        json!({"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2, "n": 2}}),
        json!({"token_ids": [1, 2, 3], "stream": true, "sampling_params": {"max_tokens": 2, "n": 2}}),
    ] {
        let (request, _) = prepare(&engine, &body);
        assert!(!request.output.relay, "{body}");
    }
}

/// vLLM's stream chunks to `id` for a client with `include_usage` only: `usage: null` on the
/// choice chunks, the final usage chunk with `exclude_none`.
fn chunks(id: &str, last_finish: &str) -> Vec<String> {
    vec![
        format!(
            r#"{{"request_id":"{id}","usage":null,"output_mode":"tokens","choices":[{{"index":0,"finish_reason":null,"stop_reason":null,"token_ids":[5],"routed_experts":null,"sampling_mask":null,"weight_versions":null,"logprobs":{{"content":[{{"token_id":5,"logprob":-1e-05,"rank":1,"top_logprobs":[]}}]}}}}]}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","usage":null,"output_mode":"tokens","choices":[{{"index":0,"finish_reason":{last_finish},"stop_reason":null,"token_ids":[7],"routed_experts":null,"sampling_mask":null,"weight_versions":[{{"version":"default","start":0,"end":2}}],"logprobs":{{"content":[{{"token_id":7,"logprob":-0.0,"rank":1,"top_logprobs":[]}}]}}}}]}}"#
        ),
        format!(
            r#"{{"request_id":"{id}","choices":[],"usage":{{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,"prompt_tokens_details":{{"cached_tokens":2}}}},"output_mode":"tokens"}}"#
        ),
    ]
}

fn sse_of(frames: &[String]) -> Vec<u8> {
    let mut out = String::new();
    for f in frames {
        out.push_str("data: ");
        out.push_str(f);
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

fn stream_body() -> Value {
    json!({"request_id": "client-1", "token_ids": [1, 2, 3], "stream": true,
        "stream_options": {"include_usage": true},
        "sampling_params": {"max_tokens": 2, "logprobs": 0}})
}

#[tokio::test]
async fn a_stream_is_vllms_chunks_with_only_the_request_id_edited() {
    let (fake, engine) = engine().await;
    let wire = chunks(NATIVE_ID, r#""length""#);
    // Network chunks that split events.
    let bytes = sse_of(&wire);
    let (a, b) = bytes.split_at(bytes.len() / 3);
    fake.script(Script::Stream(vec![
        Step::Send(a.to_vec()),
        Step::Send(b.to_vec()),
    ]));
    let (request, mut assembler) = prepare(&engine, &stream_body());
    assert!(request.output.relay);
    let out = oks(run(&engine, request).await);
    // Upstream: the client's own stream options, not genfront's.
    let sent = &fake.generate_calls()[0].1;
    assert_eq!(sent["stream"], json!(true));
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(out.iter().all(|o| o.native.is_some()));
    assert_eq!(out[0].token_ids, [5]);
    assert_eq!(out[0].finish_reason, None);
    assert_eq!(out[1].token_ids, [7]);
    assert_eq!(
        out[1].finish_reason,
        Some(FinishReason::Length { length: 2 })
    );
    assert!(out[2].token_ids.is_empty() && out[2].finish_reason.is_none());
    assert_eq!(out[2].usage, usage(2, 2), "the usage chunk's cached tokens");
    let mut events = Vec::new();
    for item in out {
        assembler
            .on_output(0, item, &mut events)
            .expect("on_output");
    }
    assembler.finish_stream(&mut events).expect("finish");
    let got: Vec<String> = events
        .iter()
        .map(|e| String::from_utf8(e.to_vec()).expect("utf-8"))
        .collect();
    assert_eq!(got, chunks("generate-tokens-client-1", r#""length""#));
}

#[tokio::test]
async fn a_cancelled_stream_relays_vllms_abort_chunk() {
    let (fake, engine) = engine().await;
    let wire = chunks(NATIVE_ID, r#""abort""#);
    let mut first = sse_of(&wire[..1]);
    first.truncate(first.len() - b"data: [DONE]\n\n".len());
    let rest = sse_of(&wire[1..]);
    fake.script(Script::Stream(vec![
        Step::Send(first),
        Step::WaitAbort,
        Step::Send(rest),
    ]));
    let (request, mut assembler) = prepare(&engine, &stream_body());
    let cancel = CancellationToken::new();
    let mut stream = engine.generate(request, cancel.clone());
    let head = stream.next().await.expect("item").expect("ok");
    assert_eq!(head.token_ids, [5]);
    cancel.cancel();
    let mut out = vec![head];
    out.extend(oks(stream.collect().await));
    assert_eq!(fake.aborts(), vec![json!({"request_ids": [NATIVE_ID]})]);
    assert_eq!(
        out[1].finish_reason,
        Some(FinishReason::Cancelled {
            message: CANCELLED_MESSAGE.to_owned()
        })
    );
    assert_eq!(out[1].token_ids, [7], "the tokens produced meanwhile");
    let mut events = Vec::new();
    for item in out {
        assembler
            .on_output(0, item, &mut events)
            .expect("on_output");
    }
    assembler.finish_stream(&mut events).expect("finish");
    assert_eq!(events.len(), 3);
    assert_eq!(
        String::from_utf8(events[1].to_vec()).expect("utf-8"),
        chunks("generate-tokens-client-1", r#""abort""#)[1]
    );
}

#[tokio::test]
async fn an_error_chunk_in_a_relayed_stream_is_vllms_500() {
    let (fake, engine) = engine().await;
    let wire = chunks(NATIVE_ID, r#""error""#);
    fake.script(Script::Stream(vec![Step::Send(sse_of(&wire))]));
    let (request, mut assembler) = prepare(&engine, &stream_body());
    let out = oks(run(&engine, request).await);
    // The first chunk relayed; the error chunk decoded typed, the usage chunk after it too.
    assert!(out[0].native.is_some());
    assert!(out[1..].iter().all(|o| o.native.is_none()), "{out:?}");
    let mut events = Vec::new();
    let mut failed = None;
    for item in out {
        if let Err(e) = assembler.on_output(0, item, &mut events) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("an error");
    assert_eq!(e.status().as_u16(), 500, "{e}");
    assert_eq!(events.len(), 1);
}
