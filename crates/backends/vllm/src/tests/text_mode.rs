//! `output_mode="text"` (vLLM 0.33.0 `GenerateTextResponse` / `GenerateTextStreamResponse`,
//! `_create_text_logprobs`): accepted for an engine with a tokenizer, the engine's text and
//! decoded tokens relayed in the text shapes.

use genfront_protocol::{Candidate, EngineInfo, EngineOutput, FinishReason, TokenLogprob};
use serde_json::{Value, json};

use super::support::{assert_bad_request, engine, prepare_on, run_stream, run_unary};

fn with_tokenizer() -> EngineInfo {
    EngineInfo {
        tokenizer: Some(true),
        ..engine()
    }
}

fn alt(text: &str, logprob: f64) -> Candidate {
    Candidate {
        token_id: Candidate::UNKNOWN_ID,
        logprob,
        rank: None,
        text: Some(text.to_owned()),
    }
}

/// What genfront's vLLM engine client decodes from a text-mode choice: the sampled token's text,
/// the alternatives by text only.
fn entry(token: u32, text: &str, logprob: f64, alts: &[(&str, f64)]) -> TokenLogprob {
    TokenLogprob {
        token_id: token,
        logprob,
        rank: None,
        top: alts.iter().map(|(t, l)| alt(t, *l)).collect(),
        selected: Vec::new(),
        text: Some(text.to_owned()),
    }
}

/// One output with its native text delta (`choices[0].text`, as the engine client keeps it).
fn out(
    tokens: &[u32],
    lps: Vec<TokenLogprob>,
    text: &str,
    finish: Option<FinishReason>,
) -> EngineOutput {
    EngineOutput {
        token_ids: tokens.to_vec(),
        logprobs: Some(lps),
        finish_reason: finish,
        engine_data: Some(json!({"choices": [{"index": 0, "text": text}]})),
        ..EngineOutput::default()
    }
}

fn outputs() -> Vec<EngineOutput> {
    vec![
        out(
            &[11],
            vec![entry(11, " gh", -0.5, &[(" gl", -1.25), ("\u{e9}", -2.0)])],
            " gh",
            None,
        ),
        out(
            &[12],
            vec![entry(12, "\u{e9}", -0.25, &[])],
            "\u{e9}",
            Some(FinishReason::Length { length: 2 }),
        ),
    ]
}

fn request(stream: bool) -> Value {
    json!({"request_id": "t", "token_ids": [1, 2, 3], "output_mode": "text", "stream": stream,
           "sampling_params": {"max_tokens": 2, "logprobs": 2}})
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn unary_text_shape() {
    let p = prepare_on(&request(false), &with_tokenizer()).expect("accepted with a tokenizer");
    let body = run_unary(p, outputs());
    assert_eq!(body["output_mode"], "text");
    let c = &body["choices"][0];
    assert_eq!(
        keys(c),
        [
            "index",
            "finish_reason",
            "stop_reason",
            "token_ids",
            "routed_experts",
            "sampling_mask",
            "weight_versions",
            "text",
            "logprobs"
        ]
    );
    assert_eq!(c["text"], " gh\u{e9}");
    assert_eq!(
        c["logprobs"],
        json!({"content": [
            {"token": " gh", "logprob": -0.5, "bytes": [32, 103, 104], "top_logprobs": [
                {"token": " gh", "logprob": -0.5, "bytes": [32, 103, 104]},
                {"token": " gl", "logprob": -1.25, "bytes": [32, 103, 108]}]},
            {"token": "\u{e9}", "logprob": -0.25, "bytes": [195, 169], "top_logprobs": [
                {"token": "\u{e9}", "logprob": -0.25, "bytes": [195, 169]}]}
        ]})
    );
    assert_eq!(
        keys(&c["logprobs"]["content"][0]),
        ["token", "logprob", "bytes", "top_logprobs"]
    );
}

#[test]
fn stream_text_deltas_and_held_back_text() {
    let p = prepare_on(
        &json!({"request_id": "t", "token_ids": [1, 2, 3], "output_mode": "text", "stream": true,
                "stream_options": {"include_usage": true},
                "sampling_params": {"max_tokens": 2, "logprobs": 0}}),
        &with_tokenizer(),
    )
    .expect("accepted");
    let mut outs = outputs();
    // Text held back for stop-string matching arrives without tokens and still gets a chunk.
    outs.insert(1, out(&[], Vec::new(), "!", None));
    let events = run_stream(p, outs);
    assert_eq!(events.len(), 4, "{events:?}");
    let texts: Vec<&str> = events[..3]
        .iter()
        .map(|e| e["choices"][0]["text"].as_str().unwrap_or("<none>"))
        .collect();
    assert_eq!(texts, [" gh", "!", "\u{e9}"]);
    for e in &events {
        assert_eq!(e["output_mode"], "text");
    }
    // logprobs 0: the sampled token only, `max(k, 1)` entries.
    assert_eq!(
        events[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"],
        json!([{"token": " gh", "logprob": -0.5, "bytes": [32, 103, 104]}])
    );
    assert_eq!(events[1]["choices"][0]["token_ids"], json!([]));
    assert_eq!(events[3]["choices"], json!([]));
}

/// A token the engine reported without text (another kind of engine) gets vLLM's no-tokenizer
/// placeholder; an id-bearing top list loses the sampled token, which goes first.
#[test]
fn placeholder_without_decoded_text() {
    let p = prepare_on(&request(false), &with_tokenizer()).expect("accepted");
    let ranked = TokenLogprob {
        token_id: 11,
        logprob: -0.5,
        rank: Some(2),
        top: vec![
            Candidate {
                token_id: 9,
                logprob: -0.1,
                rank: Some(1),
                text: None,
            },
            Candidate {
                token_id: 11,
                logprob: -0.5,
                rank: Some(2),
                text: None,
            },
        ],
        selected: Vec::new(),
        text: None,
    };
    let mut o = out(
        &[11],
        vec![ranked],
        "x",
        Some(FinishReason::Length { length: 1 }),
    );
    o.engine_data = Some(json!({"text": "x"}));
    let body = run_unary(p, vec![o]);
    let c = &body["choices"][0];
    assert_eq!(c["text"], "x");
    assert_eq!(
        c["logprobs"]["content"][0],
        json!({"token": "token_id:11", "logprob": -0.5, "bytes": null, "top_logprobs": [
            {"token": "token_id:11", "logprob": -0.5, "bytes": null},
            {"token": "token_id:9", "logprob": -0.1, "bytes": null}]})
    );
}

#[test]
fn tokens_only_engine_still_refuses() {
    assert_bad_request(
        &request(false),
        "output_mode='text' requires a tokenizer, but this server does not load one (--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a tokenizer, or use output_mode='tokens'.",
        None,
    );
    // An engine of unknown kind decides.
    let unknown = EngineInfo {
        tokenizer: None,
        ..engine()
    };
    assert!(prepare_on(&request(true), &unknown).is_ok());
}
