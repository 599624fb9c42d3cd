//! Nothing dropped silently: for every key of each format's request schema
//! ([`genfront_sglang::REQUEST_KEYS`] / [`genfront_sglang::SAMPLING_KEYS`],
//! [`genfront_vllm::REQUEST_KEYS`] / [`genfront_vllm::SAMPLING_KEYS`] /
//! [`genfront_vllm::STRUCTURED_OUTPUT_KEYS`]) and for each engine kind, the key either reaches
//! the engine or the request is refused with the format's native 400 naming it.
//!
//! Engine kinds: the SGLang HTTP client and the vLLM HTTP client (genfront direct mode over the
//! independent oracle, `../shared/oracle/oracle_engine.py`), the gRPC sidecar in front of each
//! of those, and the embedded mocker. For each format × key × engine kind the test sends a valid
//! base request without and with the key set to a non-default valid value. Against an oracle
//! the case passes iff (a) genfront answers 400 with the key in its message, or (b) what the
//! oracle received (`GET /_oracle/log`: the bodies, private ids removed, plus the routing headers)
//! differs between the two requests. The mocker is in-process and receives the whole native body
//! by construction (its toy model ignores constraints): there the case passes iff the answer is a
//! 200 or the native 400 naming the key — never a 5xx. The mocker has no tokenizer: where the
//! engine refuses a key for that with a message naming no key (vLLM's structured outputs), that
//! native refusal is the key's accepted answer there, never a drop.
//!
//! Keys genfront owns by design, renders itself, or that the engine itself ignores are listed in
//! [`SEPARATE`] with the reason and checked by what they do instead. Every schema key must have a
//! case here: a key added to a schema table without one fails the test.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::oracle::Oracle;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const SGLANG_PATH: &str = "/generate";
const VLLM_PATH: &str = "/inference/v1/generate";

/// The formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Sglang,
    Vllm,
}

impl Format {
    fn path(self) -> &'static str {
        match self {
            Format::Sglang => SGLANG_PATH,
            Format::Vllm => VLLM_PATH,
        }
    }

    fn base(self) -> Value {
        match self {
            Format::Sglang => {
                json!({"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 2}})
            }
            Format::Vllm => {
                json!({"token_ids": [5, 6, 7, 8], "sampling_params": {"max_tokens": 2}})
            }
        }
    }

    /// Every schema key of the format as a dotted path.
    fn schema_paths(self) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Format::Sglang => {
                out.extend(
                    genfront_sglang::REQUEST_KEYS
                        .iter()
                        .map(|k| k.key.to_owned()),
                );
                out.extend(
                    genfront_sglang::SAMPLING_KEYS
                        .iter()
                        .map(|k| format!("sampling_params.{}", k.key)),
                );
            }
            Format::Vllm => {
                out.extend(genfront_vllm::REQUEST_KEYS.iter().map(|k| k.key.to_owned()));
                out.extend(
                    genfront_vllm::SAMPLING_KEYS
                        .iter()
                        .map(|k| format!("sampling_params.{}", k.key)),
                );
                out.extend(
                    genfront_vllm::STRUCTURED_OUTPUT_KEYS
                        .iter()
                        .map(|k| format!("sampling_params.structured_outputs.{}", k.key)),
                );
            }
        }
        out
    }
}

/// One key's case: the value set, the changes made to the base for both requests, the key the
/// value replaces (removed from the request with the key: another prompt input), the text a
/// refusal must contain (default: the key's last segment), and the engine's own refusal of the
/// key on an engine without a tokenizer, which there counts as a refusal by name too.
struct Case {
    value: Value,
    base: Vec<(&'static str, Value)>,
    replaces: Option<&'static str>,
    needle: Option<&'static str>,
    tokenizer_refusal: Option<&'static str>,
}

fn case(value: Value) -> Case {
    Case {
        value,
        base: Vec::new(),
        replaces: None,
        needle: None,
        tokenizer_refusal: None,
    }
}

/// A vLLM structured-outputs case: an engine without a tokenizer (the mocker, a `--tokens-only`
/// server) refuses the constraint natively ("Structured outputs requires a tokenizer…",
/// `sampling_params.py:1242-1245`), which names no key; that refusal is its answer there, with
/// the constraint in the base request too (the options' cases).
fn needs_tokenizer(c: Case) -> Case {
    Case {
        tokenizer_refusal: Some(genfront_vllm::STRUCTURED_OUTPUTS_NEED_TOKENIZER),
        ..c
    }
}

fn with(value: Value, base: &[(&'static str, Value)]) -> Case {
    Case {
        base: base.to_vec(),
        ..case(value)
    }
}

fn needle(value: Value, needle: &'static str) -> Case {
    Case {
        needle: Some(needle),
        ..case(value)
    }
}

fn instead_of(value: Value, replaces: &'static str) -> Case {
    Case {
        replaces: Some(replaces),
        ..case(value)
    }
}

/// How a separately checked key is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The client's id never reaches the engine (the private id does); the answer echoes it.
    PrivateId,
    /// The answer is an SSE stream.
    Stream,
    /// The answer's shape (key paths and value types) changes.
    Rendered,
    /// Accepted (200) and nothing else to see: the engine itself ignores the key here.
    Accepted,
}

/// Keys checked separately, with the reason.
const SEPARATE: &[(Format, &str, Check, &str)] = &[
    (
        Format::Sglang,
        "rid",
        Check::PrivateId,
        "genfront mints the id an engine sees; the client's rid is answered as meta_info.id",
    ),
    (
        Format::Sglang,
        "stream",
        Check::Stream,
        "genfront streams from every engine and answers in the client's mode",
    ),
    (
        Format::Sglang,
        "sampling_params",
        Check::Accepted,
        "the container: each of its keys is a case of its own",
    ),
    (
        Format::Sglang,
        "return_flat_raw_top_logprobs",
        Check::Rendered,
        "the format renders the prompt top logprobs as flat arrays from typed logprobs",
    ),
    (
        Format::Sglang,
        "return_flat_raw_top_logprobs_b64",
        Check::Rendered,
        "as return_flat_raw_top_logprobs, base64-encoded",
    ),
    (
        Format::Sglang,
        "return_prompt_token_ids",
        Check::Rendered,
        "the format answers the prompt ids it validated",
    ),
    (
        Format::Vllm,
        "request_id",
        Check::PrivateId,
        "genfront mints the id an engine sees; the answer keeps generate-tokens-<client id>",
    ),
    (
        Format::Vllm,
        "stream",
        Check::Stream,
        "genfront streams from every engine and answers in the client's mode",
    ),
    (
        Format::Vllm,
        "stream_options",
        Check::Accepted,
        "genfront asks every engine for usage itself and applies the client's options to its answer",
    ),
    (
        Format::Vllm,
        "sampling_params",
        Check::Accepted,
        "the container: each of its keys is a case of its own",
    ),
    (
        Format::Vllm,
        "sampling_params.structured_outputs",
        Check::Accepted,
        "the container: each of its keys is a case of its own",
    ),
    (
        Format::Vllm,
        "return_token_ids",
        Check::Rendered,
        "the format answers the prompt ids it validated",
    ),
    (
        Format::Vllm,
        "output_mode",
        Check::Rendered,
        "text shapes rendered from the engine's own text (refused by name without a tokenizer)",
    ),
    (
        Format::Vllm,
        "model",
        Check::Accepted,
        "the base model's name selects nothing (a LoRA name is RoutingHints::lora)",
    ),
    (
        Format::Vllm,
        "token_offsets",
        Check::Accepted,
        "vLLM's generate does not read it (filled by /render)",
    ),
    (
        Format::Vllm,
        "parse_context",
        Check::Accepted,
        "vLLM reads it only for output_mode=derender, which genfront refuses",
    ),
    (
        Format::Vllm,
        "sampling_params.output_kind",
        Check::Accepted,
        "vLLM's server sets it from stream itself",
    ),
    (
        Format::Vllm,
        "sampling_params.routed_experts_prompt_start",
        Check::Accepted,
        "effective only on an engine that returns routed experts; vLLM ignores it otherwise too",
    ),
];

fn separate(format: Format, path: &str) -> Option<Check> {
    SEPARATE
        .iter()
        .find(|(f, p, ..)| *f == format && *p == path)
        .map(|(_, _, c, _)| *c)
}

const SCHEMA: &str = r#"{"type":"object"}"#;
const EBNF: &str = r#"root ::= "a" | "b""#;
const TAG: &str = r#"{"type":"structural_tag","structures":[],"triggers":[]}"#;

fn sglang_case(path: &str) -> Option<Case> {
    let logprob = [("return_logprob", json!(true))];
    Some(match path {
        "text" => instead_of(json!("hello oracle"), "input_ids"),
        "input_ids" => case(json!([9, 10, 11])),
        // SGLang ignores input_embeds next to input_ids (ids win), so it replaces them.
        "input_embeds" => instead_of(json!([[0.5, 0.25]]), "input_ids"),
        "image_data" => case(json!("https://example.invalid/a.png")),
        "video_data" => case(json!("https://example.invalid/a.mp4")),
        "audio_data" => case(json!("https://example.invalid/a.wav")),
        "use_audio_in_video" => case(json!(true)),
        "video_config" => case(json!({"fps": 1})),
        "modalities" => case(json!(["image"])),
        "mm_hashes" => case(json!(["h1"])),
        "mm_content_hashes" => case(json!(["h1"])),
        "return_logprob" => case(json!(true)),
        "logprob_start_len" => with(json!(1), &logprob),
        "top_logprobs_num" => with(json!(2), &logprob),
        "token_ids_logprob" => with(json!([1, 2]), &logprob),
        "return_text_in_logprobs" => with(json!(true), &logprob),
        "return_sampling_mask" => case(json!(true)),
        "log_metrics" => case(json!(false)),
        "return_hidden_states" => needle(json!(true), "hidden states"),
        "return_routed_experts" => case(json!(true)),
        "routed_experts_start_len" => with(json!(1), &[("return_routed_experts", json!(true))]),
        "return_indexer_topk" => case(json!(true)),
        "session_id" => case(json!("session-1")),
        "session_params" => case(json!({"id": "session-1"})),
        // The mocker serves no LoRA: SGLang's own refusal names the adapter, not the key.
        "lora_path" => needle(json!("adapter-1"), "LoRA"),
        "lora_id" => case(json!("lora-1")),
        "custom_logit_processor" => needle(json!("processor"), "custom logit processor"),
        "positional_embed_overrides" => case(json!({"positions": [1]})),
        "bootstrap_host" => case(json!("10.0.0.1")),
        "bootstrap_port" => case(json!(8998)),
        "bootstrap_room" => case(json!(7)),
        "bootstrap_pair_key" => case(json!("pair")),
        "decode_tp_size" => case(json!(2)),
        "require_reasoning" => case(json!(true)),
        "routed_dp_rank" => case(json!(0)),
        "disagg_prefill_dp_rank" => case(json!(0)),
        "data_parallel_rank" => case(json!(0)),
        "background" => case(json!(true)),
        "conversation_id" => case(json!("conv-1")),
        "kv_router_hint" => case(json!("hint")),
        "routing_key" => case(json!("key-1")),
        "priority" => case(json!(3)),
        "extra_key" => case(json!("namespace-1")),
        "cache_salt" => case(json!("salt-1")),
        "max_thinking_tokens" => case(json!(5)),
        "no_logs" => case(json!(true)),
        "custom_labels" => case(json!({"team": "rl"})),
        "return_bytes" => case(json!(true)),
        "return_entropy" => case(json!(true)),
        "external_trace_header" => case(json!({"traceparent": "00-0-0-01"})),
        "received_time" => case(json!(1.5)),
        "http_worker_ipc" => case(json!("ipc:///tmp/x")),
        "need_wait_for_mm_inputs" => case(json!(true)),
        "num_items_assigned" => case(json!({"image": [1]})),
        "encoder_urls" => case(json!(["http://encoder.invalid"])),
        "images_config" => case(json!({"max_pixels": 100})),
        "max_dynamic_patch" => case(json!(4)),
        "min_dynamic_patch" => case(json!(1)),
        "image_max_dynamic_patch" => case(json!(4)),
        "video_max_dynamic_patch" => case(json!(4)),
        "multi_item_delimiter_indices" => case(json!([1])),
        "sampling_params.max_new_tokens" => case(json!(3)),
        "sampling_params.stop" => case(json!(["zz"])),
        "sampling_params.stop_token_ids" => case(json!([7])),
        "sampling_params.stop_regex" => case(json!("a+")),
        "sampling_params.temperature" => case(json!(0.5)),
        "sampling_params.top_p" => case(json!(0.9)),
        "sampling_params.top_k" => case(json!(5)),
        "sampling_params.min_p" => case(json!(0.1)),
        "sampling_params.frequency_penalty" => case(json!(0.5)),
        "sampling_params.presence_penalty" => case(json!(0.5)),
        "sampling_params.repetition_penalty" => case(json!(1.1)),
        "sampling_params.min_new_tokens" => case(json!(1)),
        "sampling_params.n" => case(json!(2)),
        "sampling_params.json_schema" => case(json!(SCHEMA)),
        "sampling_params.regex" => case(json!("[a-z]+")),
        "sampling_params.ebnf" => case(json!(EBNF)),
        "sampling_params.structural_tag" => case(json!(TAG)),
        "sampling_params.ignore_eos" => case(json!(true)),
        "sampling_params.skip_special_tokens" => case(json!(false)),
        "sampling_params.spaces_between_special_tokens" => case(json!(false)),
        "sampling_params.no_stop_trim" => case(json!(true)),
        "sampling_params.custom_params" => case(json!({"k": 1})),
        "sampling_params.stream_interval" => case(json!(2)),
        "sampling_params.logit_bias" => case(json!({"5": 2.5, "9": -1.0})),
        "sampling_params.sampling_seed" => case(json!(7)),
        "sampling_params.beam_width" => case(json!(2)),
        _ => return None,
    })
}

fn vllm_case(path: &str) -> Option<Case> {
    let regex = [(
        "sampling_params.structured_outputs",
        json!({"regex": "[a-z]+"}),
    )];
    Some(match path {
        "token_ids" => case(json!([9, 10, 11])),
        "features" => case(json!({"mm_hashes": {"image": ["h1"]}})),
        "content_parts" => {
            case(json!([{"type": "image_url", "url": "https://example.invalid/a.png"}]))
        }
        "reasoning_ended" => case(json!(true)),
        "reasoning_parser_kwargs" => case(json!({"chat_template_kwargs": {"thinking": true}})),
        "output_mode" => case(json!("text")),
        "cache_salt" => case(json!("salt-1")),
        "priority" => case(json!(2)),
        "kv_transfer_params" => case(json!({"do_remote_prefill": false, "x": 1})),
        "ec_transfer_params" => case(json!({"x": 1})),
        "model" => case(json!("oracle/toy-moe")),
        "token_offsets" => case(json!([[0, 1]])),
        "parse_context" => case(json!({"tools": []})),
        "sampling_params.n" => case(json!(2)),
        "sampling_params.presence_penalty" => case(json!(0.5)),
        "sampling_params.frequency_penalty" => case(json!(0.5)),
        "sampling_params.repetition_penalty" => case(json!(1.1)),
        "sampling_params.temperature" => case(json!(0.5)),
        "sampling_params.top_p" => case(json!(0.9)),
        "sampling_params.top_k" => case(json!(5)),
        "sampling_params.min_p" => case(json!(0.1)),
        "sampling_params.seed" => case(json!(7)),
        "sampling_params.stop" => case(json!(["zz"])),
        "sampling_params.stop_token_ids" => case(json!([7])),
        "sampling_params.ignore_eos" => case(json!(true)),
        "sampling_params.max_tokens" => case(json!(3)),
        "sampling_params.min_tokens" => case(json!(1)),
        "sampling_params.logprobs" => case(json!(2)),
        "sampling_params.prompt_logprobs" => case(json!(1)),
        "sampling_params.detokenize" => case(json!(false)),
        "sampling_params.skip_special_tokens" => case(json!(false)),
        "sampling_params.spaces_between_special_tokens" => case(json!(false)),
        "sampling_params.include_stop_str_in_output" => case(json!(true)),
        "sampling_params.output_kind" => case(json!(2)),
        "sampling_params.stream_interval" => case(json!(2)),
        "sampling_params.skip_clone" => case(json!(true)),
        "sampling_params.output_text_buffer_length" => case(json!(2)),
        "sampling_params.watermarking" => case(json!({"key": 1})),
        "sampling_params.structured_outputs" => needs_tokenizer(case(json!({"regex": "[a-z]+"}))),
        "sampling_params.logit_bias" => case(json!({"5": 2.5, "9": -1.0})),
        "sampling_params.allowed_token_ids" => case(json!([5, 6])),
        "sampling_params.extra_args" => case(json!({"k": 1})),
        "sampling_params.bad_words" => case(json!(["zz"])),
        "sampling_params.skip_reading_prefix_cache" => case(json!(true)),
        "sampling_params.thinking_token_budget" => case(json!(5)),
        "sampling_params.repetition_detection" => {
            case(json!({"max_pattern_size": 4, "min_pattern_size": 1, "min_count": 3}))
        }
        "sampling_params.routed_experts_prompt_start" => case(json!(1)),
        "sampling_params.trace_decode_token_ids" => case(json!([5])),
        "sampling_params.prompt_logprob_token_ids" => with(
            json!([[5], [6], [7], [8]]),
            &[("sampling_params.prompt_logprobs", json!(1))],
        ),
        "sampling_params.prompt_logprob_start" => {
            with(json!(1), &[("sampling_params.prompt_logprobs", json!(1))])
        }
        "sampling_params.logprob_token_ids" => case(json!([5, 6])),
        "sampling_params.flat_logprobs" => case(json!(true)),
        "sampling_params.structured_outputs.json" => needs_tokenizer(case(
            json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        )),
        "sampling_params.structured_outputs.regex" => needs_tokenizer(case(json!("[a-z]+"))),
        "sampling_params.structured_outputs.choice" => needs_tokenizer(case(json!(["a", "b"]))),
        "sampling_params.structured_outputs.grammar" => needs_tokenizer(case(json!(EBNF))),
        "sampling_params.structured_outputs.json_object" => needs_tokenizer(case(json!(true))),
        "sampling_params.structured_outputs.structural_tag" => needs_tokenizer(case(json!(TAG))),
        "sampling_params.structured_outputs.disable_fallback" => {
            needs_tokenizer(with(json!(true), &regex))
        }
        "sampling_params.structured_outputs.disable_any_whitespace" => {
            needs_tokenizer(with(json!(true), &regex))
        }
        "sampling_params.structured_outputs.disable_additional_properties" => {
            needs_tokenizer(with(json!(true), &regex))
        }
        "sampling_params.structured_outputs.whitespace_pattern" => {
            needs_tokenizer(with(json!(" "), &regex))
        }
        "request_id" => case(json!("client-id-1")),
        "stream" => case(json!(true)),
        "stream_options" => with(json!({"include_usage": true}), &[("stream", json!(true))]),
        "return_token_ids" => case(json!(true)),
        "sampling_params" => case(json!({"max_tokens": 2})),
        _ => return None,
    })
}

fn case_for(format: Format, path: &str) -> Option<Case> {
    match (format, path) {
        (Format::Sglang, "rid") => Some(case(json!("client-rid-1"))),
        (Format::Sglang, "stream") => Some(case(json!(true))),
        (Format::Sglang, "sampling_params") => Some(case(json!({"max_new_tokens": 2}))),
        (Format::Sglang, "return_flat_raw_top_logprobs") => Some(with(
            json!(true),
            &[
                ("return_logprob", json!(true)),
                ("logprob_start_len", json!(0)),
                ("top_logprobs_num", json!(2)),
            ],
        )),
        (Format::Sglang, "return_flat_raw_top_logprobs_b64") => Some(with(
            json!(true),
            &[
                ("return_logprob", json!(true)),
                ("logprob_start_len", json!(0)),
                ("top_logprobs_num", json!(2)),
                ("return_flat_raw_top_logprobs", json!(true)),
            ],
        )),
        (Format::Sglang, "return_prompt_token_ids") => Some(case(json!(true))),
        (Format::Sglang, p) => sglang_case(p),
        (Format::Vllm, p) => vllm_case(p),
    }
}

/// Set (`Some`) or remove (`None`) the value at a dotted path, creating objects on the way.
fn set_path(body: &mut Value, path: &str, value: Option<Value>) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().expect("a path");
    let mut node = body;
    for p in parts {
        let Value::Object(obj) = node else {
            panic!("not an object at {p}");
        };
        node = obj
            .entry(p.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let Value::Object(obj) = node else {
        panic!("not an object at {last}");
    };
    match value {
        Some(v) => {
            obj.insert(last.to_owned(), v);
        }
        None => {
            obj.shift_remove(last);
        }
    }
}

/// The two bodies of a case: without and with the key.
fn bodies(format: Format, path: &str, c: &Case, model: &str) -> (Value, Value) {
    let mut without = format.base();
    for (k, v) in &c.base {
        set_path(&mut without, k, Some(v.clone()));
    }
    let mut with = without.clone();
    if let Some(k) = c.replaces {
        set_path(&mut with, k, None);
    }
    // The served model's own name (each engine kind serves another).
    let value = if format == Format::Vllm && path == "model" {
        json!(model)
    } else {
        c.value.clone()
    };
    set_path(&mut with, path, Some(value));
    (without, with)
}

// === setups ===

/// One engine kind behind genfront.
struct Setup {
    name: &'static str,
    url: String,
    /// The oracle the engine requests reach (`None`: the in-process mocker).
    oracle: Option<Arc<Oracle>>,
    /// Whether the engine loads a tokenizer (the oracles do; the mocker does not).
    tokenizer: bool,
    /// The served model's name (`GET /v1/models`).
    model: String,
    _stop: Vec<tokio_util::sync::DropGuard>,
}

async fn genfront_over(worker: String) -> (String, tokio_util::sync::DropGuard) {
    let (url, server, shutdown) = common::genfront(&["--worker".to_owned(), worker]).await;
    assert!(
        server.wait_ready(Duration::from_secs(10)).await,
        "genfront ready"
    );
    (url, shutdown.drop_guard())
}

async fn sidecar(worker: String) -> (String, tokio_util::sync::DropGuard) {
    let engine: Arc<dyn genfront_protocol::Engine> = worker
        .parse::<genfront::WorkerSpec>()
        .expect("worker spec")
        .connect()
        .await
        .expect("engine connects");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let uri = format!("grpc://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    tokio::spawn(genfront_sidecar::serve(engine, listener, shutdown.clone()));
    (uri, shutdown.drop_guard())
}

async fn setups() -> Vec<Setup> {
    let sglang = Arc::new(Oracle::start(&["--api", "sglang"]));
    let vllm = Arc::new(Oracle::start(&["--api", "vllm"]));
    let mut out = Vec::new();
    for (name, api, oracle) in [
        ("sglang-http", "sglang", &sglang),
        ("vllm-http", "vllm", &vllm),
    ] {
        let (url, stop) = genfront_over(format!("{api}={}", oracle.base_url())).await;
        out.push(Setup {
            name,
            url,
            oracle: Some(oracle.clone()),
            tokenizer: true,
            model: String::new(),
            _stop: vec![stop],
        });
    }
    for (name, api, oracle) in [
        ("sidecar-sglang", "sglang", &sglang),
        ("sidecar-vllm", "vllm", &vllm),
    ] {
        let (uri, side) = sidecar(format!("{api}={}", oracle.base_url())).await;
        let (url, stop) = genfront_over(uri).await;
        out.push(Setup {
            name,
            url,
            oracle: Some(oracle.clone()),
            tokenizer: true,
            model: String::new(),
            _stop: vec![stop, side],
        });
    }
    let mock = common::start().await;
    out.push(Setup {
        name: "mocker",
        url: format!("http://{}", mock.addr),
        oracle: None,
        tokenizer: false,
        model: String::new(),
        _stop: vec![mock.shutdown.clone().drop_guard()],
    });
    let client = reqwest::Client::new();
    for s in &mut out {
        let models: Value = client
            .get(format!("{}/v1/models", s.url))
            .send()
            .await
            .expect("models")
            .json()
            .await
            .expect("models JSON");
        s.model = models["data"][0]["id"]
            .as_str()
            .expect("a model")
            .to_owned();
    }
    out
}

// === one exchange ===

/// What one request produced: genfront's answer and what the engine received.
struct Exchange {
    status: u16,
    content_type: String,
    text: String,
    /// The generate requests the oracle logged, normalized and sorted.
    received: Vec<Value>,
}

/// A logged engine request without what genfront mints per request: the private id in the body
/// (`rid` / `request_id`), and every header but the routing ones genfront sets from the client.
fn normalize(entry: &Value) -> Value {
    let mut body = entry["body"].clone();
    if let Value::Object(o) = &mut body {
        o.shift_remove("rid");
        o.shift_remove("request_id");
    }
    let headers: Map<String, Value> = entry["headers"]
        .as_object()
        .map(|h| {
            h.iter()
                .filter(|(k, _)| {
                    let k = k.to_ascii_lowercase();
                    k == "x-data-parallel-rank" || k == "x-session-id"
                })
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    json!({"body": body, "headers": headers})
}

async fn exchange(client: &reqwest::Client, setup: &Setup, path: &str, body: &Value) -> Exchange {
    if let Some(o) = &setup.oracle {
        o.reset().await;
    }
    let r = client
        .post(format!("{}{path}", setup.url))
        .json(body)
        .send()
        .await
        .expect("request sent");
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = r.text().await.expect("answer body");
    let mut received = Vec::new();
    if let Some(o) = &setup.oracle {
        let log = o.log().await;
        for entry in log["requests"].as_array().into_iter().flatten() {
            let p = entry["path"].as_str().unwrap_or("");
            if p == SGLANG_PATH || p == VLLM_PATH {
                received.push(normalize(entry));
            }
        }
        received.sort_by_key(Value::to_string);
    }
    Exchange {
        status,
        content_type,
        text,
        received,
    }
}

/// The message of a native error answer (SGLang `{"error":{"message"}}` or flat `{"message"}`,
/// vLLM `{"error":{"message"}}`), or of an SSE error event.
fn error_message(text: &str) -> String {
    let payload = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(text);
    let v: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    v["error"]["message"]
        .as_str()
        .or_else(|| v["message"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// The answer's shape: every key path with its value's JSON type (ids and numbers aside).
fn shape(text: &str) -> BTreeSet<String> {
    fn walk(v: &Value, at: String, out: &mut BTreeSet<String>) {
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        out.insert(format!("{at}:{kind}"));
        match v {
            Value::Array(items) => {
                for item in items {
                    walk(item, format!("{at}[]"), out);
                }
            }
            Value::Object(o) => {
                for (k, item) in o {
                    walk(item, format!("{at}.{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(
        &serde_json::from_str(text).unwrap_or(Value::Null),
        String::new(),
        &mut out,
    );
    out
}

/// Check one case on one setup; `Err` says why it fails.
async fn check(
    client: &reqwest::Client,
    setup: &Setup,
    format: Format,
    path: &str,
    c: &Case,
) -> Result<(), String> {
    let (without_body, with_body) = bodies(format, path, c, &setup.model);
    let needle = c
        .needle
        .unwrap_or_else(|| path.rsplit('.').next().unwrap_or(path));
    let without = exchange(client, setup, format.path(), &without_body).await;
    let with = exchange(client, setup, format.path(), &with_body).await;
    // The engine's own refusal of the key without a tokenizer, where it has none.
    let tokenizer_refusal = |text: &str| {
        !setup.tokenizer
            && c.tokenizer_refusal
                .is_some_and(|t| error_message(text).contains(t))
    };
    if without.status != 200 {
        // The key's companion (e.g. `return_routed_experts` for `routed_experts_start_len`, the
        // constraint next to a structured-outputs option without a tokenizer) is refused on
        // this engine kind: the key cannot be dropped if the request is.
        let companion_refused = setup.oracle.is_some() || tokenizer_refusal(&without.text);
        return if without.status == 400 && with.status == 400 && companion_refused {
            Ok(())
        } else {
            Err(format!(
                "the base request failed: {} {}",
                without.status, without.text
            ))
        };
    }
    let refused = with.status == 400
        && (error_message(&with.text).contains(needle) || tokenizer_refusal(&with.text));
    match separate(format, path) {
        Some(Check::PrivateId) => {
            let client_id = c.value.as_str().unwrap_or_default();
            if with.status != 200 || !with.text.contains(client_id) {
                return Err(format!(
                    "the answer does not echo {client_id:?}: {}",
                    with.text
                ));
            }
            if setup.oracle.is_some() {
                let raw = setup
                    .oracle
                    .as_ref()
                    .map(|o| o.log())
                    .expect("an oracle")
                    .await
                    .to_string();
                if raw.contains(&format!("\"{client_id}\"")) {
                    return Err("the client's id reached the engine".to_owned());
                }
            }
            Ok(())
        }
        Some(Check::Stream) => {
            if with.status == 200 && with.content_type.starts_with("text/event-stream") {
                Ok(())
            } else {
                Err(format!(
                    "not an SSE answer: {} {}",
                    with.status, with.content_type
                ))
            }
        }
        Some(Check::Rendered) => {
            if refused || (with.status == 200 && shape(&with.text) != shape(&without.text)) {
                Ok(())
            } else {
                Err(format!("the answer's shape did not change: {}", with.text))
            }
        }
        Some(Check::Accepted) => {
            if with.status == 200 || refused {
                Ok(())
            } else {
                Err(format!("not accepted: {} {}", with.status, with.text))
            }
        }
        None if setup.oracle.is_none() => {
            if with.status == 200 || refused {
                Ok(())
            } else {
                Err(format!(
                    "neither accepted nor refused by name: {} {}",
                    with.status, with.text
                ))
            }
        }
        None => {
            if refused || (!with.received.is_empty() && with.received != without.received) {
                Ok(())
            } else {
                Err(format!(
                    "dropped: answer {} {}; the engine received the same as without it: {}",
                    with.status,
                    with.text.chars().take(300).collect::<String>(),
                    Value::from(with.received.clone())
                ))
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schema_key_reaches_the_engine_or_is_refused_by_name() {
    let setups = setups().await;
    let client = reqwest::Client::new();
    let mut failures = Vec::new();
    let mut checked = 0usize;
    for format in [Format::Sglang, Format::Vllm] {
        let paths = format.schema_paths();
        for (f, p, _, reason) in SEPARATE {
            assert!(
                *f != format || paths.iter().any(|q| q == p),
                "{format:?} {p} is listed as separate ({reason}) but is not a schema key"
            );
        }
        for path in &paths {
            let Some(c) = case_for(format, path) else {
                failures.push(format!(
                    "{format:?} {path}: a schema key without a case in this test"
                ));
                continue;
            };
            for setup in &setups {
                checked += 1;
                if let Err(why) = check(&client, setup, format, path, &c).await {
                    failures.push(format!("{format:?} {path} on {}: {why}", setup.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} key × engine-kind cases fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
