//! Fuzz harness of the vLLM format: a seeded, structure-aware generator drives the whole request
//! path the shared handler runs ([`GenerateFormat::prepare`], then the native error rendering or
//! the assembler with engine outputs), and the engine client's decoding of untrusted vLLM bytes:
//! SSE chunks and unary bodies, served by a scripted local server to a real [`VllmEngine`]
//! (body building, HTTP, SSE splitting, chunk → [`EngineOutput`]), whose outputs then go through
//! the assembler.
//!
//! Properties, for every input:
//! - nothing panics and no engine stream hangs;
//! - a refused body is a client error: a 4xx [`GenerateError`] of [`Fault::Client`], rendered as
//!   vLLM's `{"error": …}` envelope (a 4xx JSON body, or for the engine-side checks of a
//!   streaming request the 200 SSE error event);
//! - an accepted body projects to one engine request within the limits: prompt ids, stop ids,
//!   `logprob_token_ids` and `logit_bias` ids below the vocabulary when it is known, prompt plus
//!   an explicit `max_tokens` within the context, `n` at most `max_num_seqs` and
//!   [`MAX_N_SEQUENCES`], logprob counts at most `max_logprobs`, at most
//!   [`MAX_LOGPROB_TOKEN_IDS`] logprob token ids;
//! - coherent engine outputs assemble to a 200 JSON body or JSON SSE events; arbitrary ones never
//!   panic and every event or body produced is JSON;
//! - decoded outputs respect the engine contract: choice index below `n`, one logprob and one
//!   mask entry per new token, nothing after a choice's finish.
//!
//! Inputs mix raw random bytes, mutated valid bodies (literals here, plus the recorded vLLM
//! requests in the shared fixtures when they are present beside the repository) and generated
//! bodies: the schema's keys with right and wrong types, huge, negative and float integers, deep
//! nesting, long and unicode strings, duplicate keys, `n > 1`, logprob options at their limits.
//!
//! Case count and seed come from `GENFRONT_FUZZ_CASES` (default 2 000 request cases and 500
//! engine answers, a few seconds; `GENFRONT_FUZZ_ENGINE_CASES` sets the latter alone) and
//! `GENFRONT_FUZZ_SEED`. The 10⁶-case run (an
//! optimised build with debug assertions; see the workspace `[profile.fuzz]` and the README,
//! "Fuzzing"):
//!
//! ```text
//! GENFRONT_FUZZ_CASES=1000000 cargo test --profile fuzz -p genfront-vllm --test fuzz -- --nocapture --test-threads=1
//! ```
//!
//! A failing case prints its seed; `GENFRONT_FUZZ_SEED=<seed> GENFRONT_FUZZ_CASES=1` replays it.
//! `GENFRONT_FUZZ_TRACE=1` names every case first (for aborts, which cannot be caught).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt;
use genfront_format::{
    CONTENT_TYPE_JSON, CONTENT_TYPE_SSE, GenerateError, GenerateFormat, ParseInput, Prepared,
};
use genfront_protocol::{
    Candidate, Engine, EngineInfo, EngineOutput, EngineRequest, Fault, FinishReason, NativeBody,
    OutputOptions, PdRole, PromptLogprobOptions, PromptLogprobs, RoutedExperts, SamplingOptions,
    StopConditions, StopMatch, TokenLogprob, UNKNOWN_CONTEXT_LEN, Usage,
};
use genfront_vllm::{
    MAX_LOGPROB_TOKEN_IDS, MAX_N_SEQUENCES, VllmEngine, VllmEngineOptions, VllmFormat,
};
use http::{HeaderMap, HeaderValue, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

// === settings ===

fn cases() -> u64 {
    std::env::var("GENFRONT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(2_000)
}

fn base_seed() -> u64 {
    std::env::var("GENFRONT_FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0x5eed_5614)
}

/// Run `cases()` cases of `one`, each with its own seed; a panic names the seed and the input.
fn run_cases(name: &str, n: u64, mut one: impl FnMut(u64, &mut Stats)) -> Stats {
    let base = base_seed();
    let mut stats = Stats::default();
    let started = Instant::now();
    // An abort (allocation failure, stack overflow) cannot be caught: trace names its case.
    let trace = trace();
    for i in 0..n {
        let seed = base.wrapping_add(i);
        if trace {
            eprintln!("{name}: case {i}, seed {seed}");
        }
        let result = catch_unwind(AssertUnwindSafe(|| one(seed, &mut stats)));
        if let Err(panic) = result {
            eprintln!(
                "{name}: case {i} failed; replay with GENFRONT_FUZZ_SEED={seed} GENFRONT_FUZZ_CASES=1\ninput: {}",
                stats.last_input
            );
            resume_unwind(panic);
        }
        if (i + 1) % 100_000 == 0 {
            eprintln!(
                "{name}: {} cases, {:.1} s",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "{name}: {n} cases (seed {base}) in {:.1} s: {} accepted, {} refused, {} assembled, {} decoder outputs, {} decoder errors",
        started.elapsed().as_secs_f64(),
        stats.accepted,
        stats.refused,
        stats.assembled,
        stats.decoded,
        stats.decode_errors,
    );
    stats
}

/// `GENFRONT_FUZZ_TRACE` is set.
fn trace() -> bool {
    std::env::var_os("GENFRONT_FUZZ_TRACE").is_some()
}

#[derive(Default)]
struct Stats {
    accepted: u64,
    refused: u64,
    assembled: u64,
    decoded: u64,
    decode_errors: u64,
    /// The input of the running case, printed when it fails.
    last_input: String,
}

// === random source ===

struct G(StdRng);

impl G {
    fn new(seed: u64) -> Self {
        G(StdRng::seed_from_u64(seed))
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }

    fn chance(&mut self, p: f64) -> bool {
        self.0.random_bool(p)
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let mut v = vec![0u8; self.below(max + 1)];
        self.0.fill_bytes(&mut v);
        v
    }
}

// === JSON text with duplicate keys and numbers serde_json cannot hold ===

/// A JSON document as text parts: literals are emitted as they are (so `1e400`, `-0`,
/// `18446744073709551616` and duplicate keys survive until the parser under test sees them).
#[derive(Debug, Clone)]
enum J {
    Lit(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn from_value(v: &Value) -> J {
        match v {
            Value::Array(a) => J::Arr(a.iter().map(J::from_value).collect()),
            Value::Object(o) => J::Obj(
                o.iter()
                    .map(|(k, v)| (k.clone(), J::from_value(v)))
                    .collect(),
            ),
            other => J::Lit(other.to_string()),
        }
    }

    fn emit(&self, out: &mut String) {
        match self {
            J::Lit(s) => out.push_str(s),
            J::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.emit(out);
                }
                out.push(']');
            }
            J::Obj(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    v.emit(out);
                }
                out.push('}');
            }
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        self.emit(&mut s);
        s
    }

    /// Number of nodes (for picking one at random).
    fn size(&self) -> usize {
        match self {
            J::Lit(_) => 1,
            J::Arr(items) => 1 + items.iter().map(J::size).sum::<usize>(),
            J::Obj(entries) => 1 + entries.iter().map(|(_, v)| v.size()).sum::<usize>(),
        }
    }

    /// The `k`-th node in pre-order.
    fn node_mut(&mut self, k: usize) -> Option<&mut J> {
        if k == 0 {
            return Some(self);
        }
        let mut k = k - 1;
        let children: Vec<&mut J> = match self {
            J::Lit(_) => return None,
            J::Arr(items) => items.iter_mut().collect(),
            J::Obj(entries) => entries.iter_mut().map(|(_, v)| v).collect(),
        };
        for child in children {
            let s = child.size();
            if k < s {
                return child.node_mut(k);
            }
            k -= s;
        }
        None
    }
}

fn lit(s: impl Into<String>) -> J {
    J::Lit(s.into())
}

fn jstr(s: &str) -> J {
    J::Lit(Value::String(s.to_owned()).to_string())
}

/// Integers around every bound a parser may meet.
fn int_text(g: &mut G) -> String {
    const EDGES: &[&str] = &[
        "0",
        "1",
        "-1",
        "2",
        "-2",
        "127",
        "999",
        "1000",
        "1001",
        "4095",
        "4096",
        "4097",
        "32767",
        "32768",
        "152063",
        "152064",
        "2147483647",
        "2147483648",
        "-2147483648",
        "4294967295",
        "4294967296",
        "9007199254740993",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "123456789012345678901234567890123456789",
        "-123456789012345678901234567890123456789",
        "1e3",
        "1E2",
        "-0",
    ];
    match g.below(4) {
        0 => g.pick(EDGES).to_string(),
        1 => g.below(8).to_string(),
        2 => (g.below(2000) as i64 - 100).to_string(),
        _ => (g.u64() as i64).to_string(),
    }
}

fn float_text(g: &mut G) -> String {
    const FLOATS: &[&str] = &[
        "0.0",
        "-0.0",
        "0.5",
        "1.0",
        "1.5",
        "2.0",
        "-1.0",
        "-2.5",
        "100.0",
        "1e-10",
        "1e-400",
        "1e308",
        "1.7976931348623157e308",
        "1e309",
        "-1e309",
        "2.00001",
        "0.99999",
        "3.0e0",
        "1e5",
        "4.9e-324",
    ];
    match g.below(3) {
        0 => g.pick(FLOATS).to_string(),
        1 => format!("{:.3}", g.0.random_range(-3.0f64..3.0)),
        _ => format!("{:e}", f64::from_bits(g.u64())).replace("inf", "1e999"),
    }
    .replace("NaN", "0.1")
}

fn string_text(g: &mut G) -> String {
    const STRS: &[&str] = &[
        "",
        "a",
        "rid-1",
        "5",
        "-1",
        "1.5",
        "true",
        "null",
        "inf",
        "-inf",
        "NaN",
        "default",
        "é漢字🙂",
        "\u{0}",
        "\n",
        "\u{202e}rtl",
        "length",
        "stop",
        "abort",
    ];
    match g.below(12) {
        0 => format!(
            "\"{}\"",
            g.pick(&[
                "\\ud800",
                "\\udfff",
                "\\ud83d\\ude00",
                "\\u0000",
                "\\x",
                "\\"
            ])
        ),
        1 => Value::String("x".repeat(g.below(20_000))).to_string(),
        2 => {
            let len = g.below(12);
            let s: String = (0..len)
                .map(|_| char::from_u32(g.below(0x11_0000) as u32).unwrap_or('?'))
                .collect();
            Value::String(s).to_string()
        }
        _ => Value::String(g.pick(STRS).to_string()).to_string(),
    }
}

/// A string that is valid JSON text and short (for engine frames).
fn plain_string(g: &mut G) -> J {
    jstr(g.pick::<&str>(&["", "a", " Paris", "é漢字🙂", "\n", "Aborted", "default"]))
}

fn scalar(g: &mut G) -> J {
    match g.below(10) {
        0..=3 => lit(int_text(g)),
        4 | 5 => lit(float_text(g)),
        6 | 7 => lit(string_text(g)),
        8 => lit(*g.pick(&["true", "false"])),
        _ => lit("null"),
    }
}

/// Any JSON value, deep nesting included.
fn value(g: &mut G, depth: usize) -> J {
    match g.below(30) {
        0 if depth < 4 => J::Arr((0..g.below(5)).map(|_| value(g, depth + 1)).collect()),
        1 if depth < 4 => J::Obj(
            (0..g.below(4))
                .map(|_| (any_key(g), value(g, depth + 1)))
                .collect(),
        ),
        2 => {
            let d = *g.pick(&[2usize, 50, 127, 128, 129, 300, 5000]);
            let (open, close) = if g.chance(0.5) {
                ("[", "]")
            } else {
                ("{\"a\":", "}")
            };
            lit(format!("{}1{}", open.repeat(d), close.repeat(d)))
        }
        3 => J::Arr((0..g.below(40)).map(|_| lit(int_text(g))).collect()),
        _ => scalar(g),
    }
}

// === vLLM bodies ===

/// `GenerateRequest`'s top-level keys (vLLM 0.33 `serving/tokens/protocol.py`) and a few more.
const TOP_KEYS: &[&str] = &[
    "request_id",
    "token_ids",
    "sampling_params",
    "model",
    "stream",
    "stream_options",
    "cache_salt",
    "priority",
    "kv_transfer_params",
    "ec_transfer_params",
    "features",
    "content_parts",
    "output_mode",
    "return_token_ids",
    "mm_hashes",
    "mm_placeholders",
    "routed_experts_prompt_start",
];

/// `SamplingParams` keys vLLM reads from `sampling_params`.
const SAMPLING_KEYS: &[&str] = &[
    "n",
    "max_tokens",
    "min_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "logprobs",
    "prompt_logprobs",
    "prompt_logprob_start",
    "logprob_token_ids",
    "prompt_logprob_token_ids",
    "allowed_token_ids",
    "bad_words",
    "logit_bias",
    "structured_outputs",
    "extra_args",
    "detokenize",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "thinking_token_budget",
    "reasoning_ended",
    "skip_reading_prefix_cache",
    "stream_interval",
    "flat_logprobs",
];

fn any_key(g: &mut G) -> String {
    match g.below(4) {
        0 => (*g.pick::<&str>(TOP_KEYS)).to_owned(),
        1 => (*g.pick::<&str>(SAMPLING_KEYS)).to_owned(),
        2 => g
            .pick(&["", "x", "🙂", "token_ids ", "Token_Ids", "__proto__"])
            .to_string(),
        _ => format!("k{}", g.below(100)),
    }
}

fn token_id(g: &mut G) -> J {
    match g.below(40) {
        0..=33 => lit(g.below(1000).to_string()),
        34..=37 => lit(g.below(152_064).to_string()),
        _ => lit(int_text(g)),
    }
}

fn ids(g: &mut G, max: usize) -> J {
    J::Arr((0..g.below(max + 1)).map(|_| token_id(g)).collect())
}

fn small_int(g: &mut G, lo: i64, hi: i64) -> J {
    if g.chance(0.85) {
        lit((lo + g.below((hi - lo + 1) as usize) as i64).to_string())
    } else {
        lit(int_text(g))
    }
}

fn num(g: &mut G, lo: f64, hi: f64) -> J {
    match g.below(6) {
        0 => lit(int_text(g)),
        1 => lit(float_text(g)),
        2 => lit(*g.pick(&["0", "1", "-1", "0.0", "1.0"])),
        _ => lit(format!("{:.3}", g.0.random_range(lo..hi))),
    }
}

fn opt_string(g: &mut G) -> J {
    if g.chance(0.6) {
        lit("null")
    } else {
        lit(string_text(g))
    }
}

/// A value for sampling key `key`, usually of the right type and near its limits.
fn sampling_value(g: &mut G, key: &str) -> J {
    if g.chance(0.05) {
        return value(g, 2);
    }
    match key {
        "max_tokens" => small_int(g, -1, 70),
        "min_tokens" => small_int(g, -1, 5),
        "n" => small_int(g, 0, 4),
        "temperature" => num(g, -0.5, 3.0),
        "top_p" => num(g, -0.1, 1.2),
        "top_k" => small_int(g, -2, 50),
        "min_p" => num(g, -0.1, 1.1),
        "frequency_penalty" | "presence_penalty" => num(g, -2.5, 2.5),
        "repetition_penalty" => num(g, -0.5, 2.5),
        "logprobs" | "prompt_logprobs" => match g.below(5) {
            0 => lit("null"),
            1 => lit(*g.pick(&["-1", "20", "21", "1000", "-2"])),
            _ => small_int(g, 0, 5),
        },
        "prompt_logprob_start" | "thinking_token_budget" => small_int(g, -1, 12),
        "stop" => match g.below(3) {
            0 => lit(string_text(g)),
            1 => J::Arr((0..g.below(4)).map(|_| lit(string_text(g))).collect()),
            _ => lit("null"),
        },
        "bad_words" => J::Arr((0..g.below(3)).map(|_| lit(string_text(g))).collect()),
        "stop_token_ids" | "allowed_token_ids" => ids(g, 4),
        "logprob_token_ids" | "prompt_logprob_token_ids" => {
            if g.chance(0.05) {
                J::Arr((0..129).map(|i| lit(i.to_string())).collect())
            } else {
                ids(g, 4)
            }
        }
        "ignore_eos"
        | "skip_special_tokens"
        | "spaces_between_special_tokens"
        | "include_stop_str_in_output"
        | "detokenize"
        | "reasoning_ended"
        | "skip_reading_prefix_cache"
        | "flat_logprobs" => {
            lit(*g.pick(&["true", "false", "true", "false", "null", "1", "\"yes\""]))
        }
        "logit_bias" => J::Obj(
            (0..g.below(4))
                .map(|_| {
                    let k = match g.below(4) {
                        0 => "x".to_owned(),
                        1 => int_text(g),
                        _ => g.below(1001).to_string(),
                    };
                    (k, num(g, -150.0, 150.0))
                })
                .collect(),
        ),
        "structured_outputs" => match g.below(4) {
            0 => lit("null"),
            1 => J::Obj(vec![("regex".into(), lit(string_text(g)))]),
            2 => J::Obj(vec![(
                (*g.pick::<&str>(&["json", "grammar", "choice", "structural_tag", "json_object"]))
                    .to_owned(),
                value(g, 1),
            )]),
            _ => value(g, 1),
        },
        "extra_args" => match g.below(3) {
            0 => lit("null"),
            1 => J::Obj(vec![(
                "kv_transfer_params".into(),
                J::Obj(vec![("do_remote_decode".into(), lit("true"))]),
            )]),
            _ => value(g, 1),
        },
        "seed" => lit(int_text(g)),
        "stream_interval" => small_int(g, 0, 3),
        _ => value(g, 2),
    }
}

fn sampling_params(g: &mut G) -> J {
    let mut entries = Vec::new();
    for _ in 0..g.below(6) {
        let key = *g.pick::<&str>(SAMPLING_KEYS);
        entries.push((key.to_owned(), sampling_value(g, key)));
    }
    if g.chance(0.6) {
        entries.push(("max_tokens".to_owned(), small_int(g, 0, 8)));
    }
    J::Obj(entries)
}

/// A value for top-level key `key`.
fn request_value(g: &mut G, key: &str) -> J {
    if g.chance(0.04) {
        return value(g, 2);
    }
    match key {
        "token_ids" => ids(g, 12),
        "sampling_params" => sampling_params(g),
        "model" => match g.below(4) {
            0 => jstr("genfront-mock"),
            1 => jstr("sql-lora"),
            2 => lit("null"),
            _ => lit(string_text(g)),
        },
        "request_id" | "cache_salt" => opt_string(g),
        "stream" => lit(*g.pick(&["true", "false", "true", "false", "null", "0", "1"])),
        "stream_options" => match g.below(3) {
            0 => lit("null"),
            1 => J::Obj(vec![
                ("include_usage".into(), lit(*g.pick(&["true", "false"]))),
                (
                    "continuous_usage_stats".into(),
                    lit(*g.pick(&["true", "false", "null"])),
                ),
            ]),
            _ => value(g, 1),
        },
        "priority" => small_int(g, -2, 4),
        "kv_transfer_params" => match g.below(3) {
            0 => lit("null"),
            1 => J::Obj(vec![
                ("do_remote_decode".into(), lit(*g.pick(&["true", "false"]))),
                ("do_remote_prefill".into(), lit(*g.pick(&["true", "false"]))),
            ]),
            _ => value(g, 1),
        },
        "output_mode" => lit(*g.pick(&["\"tokens\"", "\"text\"", "null", "\"x\"", "1"])),
        "routed_experts_prompt_start" => small_int(g, -1, 12),
        _ => {
            if g.chance(0.5) {
                lit(*g.pick(&["null", "false", "true", "[]", "{}", "\"\""]))
            } else {
                value(g, 2)
            }
        }
    }
}

/// The request keys clients commonly send.
const COMMON_KEYS: &[&str] = &[
    "request_id",
    "stream",
    "stream_options",
    "model",
    "priority",
];

fn generated_body(g: &mut G) -> J {
    let mut entries = Vec::new();
    if g.chance(0.9) {
        entries.push(("token_ids".to_owned(), request_value(g, "token_ids")));
    }
    if g.chance(0.9) {
        entries.push(("sampling_params".to_owned(), sampling_params(g)));
    }
    let common = g.chance(0.5);
    for _ in 0..g.below(5) {
        let key = if common {
            *g.pick::<&str>(COMMON_KEYS)
        } else {
            *g.pick::<&str>(TOP_KEYS)
        };
        entries.push((key.to_owned(), request_value(g, key)));
    }
    if g.chance(0.1) {
        entries.push((any_key(g), value(g, 1)));
    }
    let shuffle = g.below(entries.len().max(1));
    entries.rotate_left(shuffle);
    J::Obj(entries)
}

/// Bodies that vLLM accepts (most of them), to be mutated.
const SEEDS: &[&str] = &[
    r#"{"request_ids":["generate-tokens-42"]}"#,
    r#"{"token_ids":[1,2,3],"sampling_params":{"max_tokens":8,"temperature":0}}"#,
    r#"{"request_id":"mine","token_ids":[5,6,7,8],"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"sampling_params":{"max_tokens":4,"n":2,"logprobs":2}}"#,
    r#"{"token_ids":[9,8,7],"sampling_params":{"max_tokens":3,"prompt_logprobs":1,"prompt_logprob_start":1,"logprob_token_ids":[1,2]}}"#,
    r#"{"model":"genfront-mock","token_ids":[4,4,4,4],"sampling_params":{"max_tokens":5,"min_tokens":2,"ignore_eos":true,"stop_token_ids":[2],"logit_bias":{"7":2.5},"seed":42,"structured_outputs":{"regex":"[a-z]+"}},"priority":1,"cache_salt":"s"}"#,
    r#"{"token_ids":[10,11],"stream":true,"sampling_params":{"max_tokens":0,"n":3,"top_k":-1,"top_p":1.0,"min_p":0.0,"frequency_penalty":0.0,"presence_penalty":0.0,"repetition_penalty":1.0,"logprobs":-1}}"#,
    r#"{"token_ids":[3],"sampling_params":{"max_tokens":2,"logprobs":0,"allowed_token_ids":[3,4,5]},"kv_transfer_params":{"do_remote_decode":true},"routed_experts_prompt_start":0}"#,
    r#"{"token_ids":[1,2],"sampling_params":{"max_tokens":2,"stop":["\n"]},"output_mode":"tokens"}"#,
];

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/fixtures")
}

/// The recorded vLLM generate requests of the shared fixtures, when they are there.
fn fixture_seeds() -> Vec<String> {
    let mut out = Vec::new();
    let dir = fixtures_dir();
    if let Ok(text) = std::fs::read_to_string(dir.join("vllm/examples.jsonl")) {
        for record in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            if record["kind"] == "request" && record["endpoint"] == "/inference/v1/generate" {
                out.push(record["json"].to_string());
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("clients/rl_requests.jsonl")) {
        for record in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            if record["endpoint"] == "/inference/v1/generate" {
                out.push(record["body"].to_string());
            }
        }
    }
    out
}

fn mutate(g: &mut G, doc: &mut J) {
    for _ in 0..1 + g.below(3) {
        let size = doc.size();
        let k = g.below(size);
        let Some(node) = doc.node_mut(k) else {
            continue;
        };
        match g.below(8) {
            0 | 1 => *node = value(g, 1),
            2 => *node = scalar(g),
            3 => {
                if let J::Obj(entries) = node
                    && !entries.is_empty()
                {
                    let i = g.below(entries.len());
                    entries.remove(i);
                }
            }
            4 => {
                // A duplicate key: the parser keeps one of them.
                if let J::Obj(entries) = node
                    && let Some((key, _)) = entries.get(g.below(entries.len().max(1))).cloned()
                {
                    entries.push((key, value(g, 1)));
                }
            }
            5 => {
                if let J::Obj(entries) = node {
                    let key = if g.chance(0.5) {
                        *g.pick::<&str>(TOP_KEYS)
                    } else {
                        *g.pick::<&str>(SAMPLING_KEYS)
                    };
                    let v = if SAMPLING_KEYS.contains(&key) {
                        sampling_value(g, key)
                    } else {
                        request_value(g, key)
                    };
                    entries.push((key.to_owned(), v));
                }
            }
            6 => {
                // Batch shape: wrap the node in a list, or repeat a list item.
                let inner = std::mem::replace(node, J::Lit("null".into()));
                *node = match inner {
                    J::Arr(mut items) if !items.is_empty() && g.chance(0.5) => {
                        let i = g.below(items.len());
                        let copy = items[i].clone();
                        items.push(copy);
                        J::Arr(items)
                    }
                    other => J::Arr(vec![other]),
                };
            }
            _ => {
                if let J::Lit(_) = node {
                    *node = lit(int_text(g));
                }
            }
        }
    }
}

/// Byte-level damage: flips, insertions, deletions, truncation.
fn damage(g: &mut G, text: String) -> Vec<u8> {
    let mut bytes = text.into_bytes();
    for _ in 0..1 + g.below(3) {
        if bytes.is_empty() {
            break;
        }
        let i = g.below(bytes.len());
        match g.below(4) {
            0 => bytes[i] ^= 1 << g.below(8),
            1 => bytes.insert(i, *g.pick(b"{}[],:\"\\0-e.")),
            2 => {
                bytes.remove(i);
            }
            _ => bytes.truncate(i),
        }
    }
    bytes
}

fn body(g: &mut G, seeds: &[String]) -> Vec<u8> {
    match g.below(20) {
        0 => g.bytes(64),
        1 => {
            let b: Vec<u8> = (0..g.below(48))
                .map(|_| *g.pick(b"{}[],:\"0123456789-+.eE truefalsn\\u"))
                .collect();
            b
        }
        2..=8 => {
            let seed = g.pick(seeds);
            let mut doc = J::from_value(&serde_json::from_str(seed).unwrap_or(Value::Null));
            if g.chance(0.9) {
                mutate(g, &mut doc);
            }
            let text = doc.text();
            if g.chance(0.15) {
                damage(g, text)
            } else {
                text.into_bytes()
            }
        }
        _ => {
            let text = generated_body(g).text();
            if g.chance(0.05) {
                damage(g, text)
            } else {
                text.into_bytes()
            }
        }
    }
}

/// What a JSON client sends.
fn json_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h
}

fn headers(g: &mut G) -> HeaderMap {
    let mut h = json_headers();
    if g.chance(0.1) {
        let ct: &str = g.pick::<&str>(&[
            "application/json; charset=utf-8",
            "APPLICATION/JSON",
            "application/vnd.api+json",
            "text/plain",
            "application/x-www-form-urlencoded",
            "",
        ]);
        if let Ok(v) = HeaderValue::from_str(ct) {
            h.insert(http::header::CONTENT_TYPE, v);
        }
    }
    if g.chance(0.02) {
        h.remove(http::header::CONTENT_TYPE);
    }
    if g.chance(0.2) {
        let raw: Vec<u8> = match g.below(3) {
            0 => b"hdr-rid".to_vec(),
            1 => b"  ".to_vec(),
            _ => g
                .bytes(12)
                .into_iter()
                .filter(|&b| b >= 0x20 && b != 0x7f)
                .collect(),
        };
        if let Ok(v) = HeaderValue::from_bytes(&raw) {
            h.insert("x-request-id", v);
        }
    }
    if g.chance(0.1)
        && let Ok(v) = HeaderValue::from_str(&int_text(g))
    {
        h.insert("x-data-parallel-rank", v);
    }
    if g.chance(0.05)
        && let Ok(v) = HeaderValue::from_str(&int_text(g))
    {
        h.insert("x-session-id", v);
    }
    h
}

/// Model facts: known and small, the mock's, all unknown, with a tokenizer, tiny.
fn engine(g: &mut G) -> EngineInfo {
    match g.below(5) {
        0 => EngineInfo {
            vocab_size: Some(1000),
            max_context_len: 4096,
            ..EngineInfo::default()
        },
        1 => EngineInfo::default(),
        2 => EngineInfo {
            vocab_size: None,
            max_context_len: UNKNOWN_CONTEXT_LEN,
            max_num_seqs: None,
            max_logprobs: None,
            tokenizer: None,
            routed_experts: false,
            sampling_mask: false,
            ..EngineInfo::default()
        },
        3 => EngineInfo {
            vocab_size: Some(1000),
            max_context_len: 64,
            tokenizer: Some(true),
            model_aliases: vec!["alias".to_owned()],
            ..EngineInfo::default()
        },
        _ => EngineInfo {
            vocab_size: Some(10),
            max_context_len: 8,
            max_num_seqs: Some(2),
            max_logprobs: Some(1),
            ..EngineInfo::default()
        },
    }
}

fn format(g: &mut G) -> VllmFormat {
    let mut f = VllmFormat::new().with_prompt_tokens_details(g.chance(0.5));
    if g.chance(0.3) {
        f = f.with_lora_adapters(["sql-lora"]);
    }
    match g.below(10) {
        0 => f.with_engine_role(Some(PdRole::Prefill)),
        1 => f.with_engine_role(Some(PdRole::Decode)),
        _ => f,
    }
}

// === checks ===

fn json_of(bytes: &[u8], what: &str) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "{what} is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// A refusal is the client's fault and rendered as vLLM renders it.
fn check_refusal(fmt: &VllmFormat, error: &GenerateError, stream: bool) {
    let status = error.status();
    assert!(
        status.is_client_error(),
        "refused with {status} ({error:?}), not a 4xx"
    );
    assert_eq!(error.fault(), Fault::Client, "{error:?}");
    let answer = fmt.error_response(error, stream);
    if answer.content_type == CONTENT_TYPE_SSE {
        assert!(stream, "SSE error answer for a unary request");
        assert_eq!(answer.status, StatusCode::OK);
        let text = std::str::from_utf8(&answer.body).expect("SSE error is UTF-8");
        let mut events = text.split("\n\n").filter(|e| !e.is_empty());
        let first = events
            .next()
            .and_then(|e| e.strip_prefix("data: "))
            .unwrap_or_else(|| panic!("SSE error answer without data: {text}"));
        let event = json_of(first.as_bytes(), "SSE error event");
        assert!(event.get("error").is_some(), "SSE error event {event}");
    } else {
        assert_eq!(answer.content_type, CONTENT_TYPE_JSON);
        assert!(
            answer.status.is_client_error(),
            "error answer {}",
            answer.status
        );
        let body = json_of(&answer.body, "error body");
        assert!(body.get("error").is_some(), "error body {body}");
    }
    json_of(&fmt.stream_error_event(error), "stream error event");
}

/// An accepted body's engine request respects the model's limits.
fn check_limits(p: &Prepared, info: &EngineInfo) {
    assert_eq!(
        p.subs.len(),
        1,
        "vLLM serves a request as one engine request"
    );
    let r = &p.subs[0].request;
    assert_eq!(r.native.format, "vllm");
    assert!(r.native.body.is_object(), "native body {:?}", r.native.body);
    let n = r.sampling.n;
    assert!(n >= 1 && i128::from(n) <= MAX_N_SEQUENCES, "n = {n}");
    if let Some(max) = info.max_num_seqs {
        assert!(n <= max, "n = {n} over max_num_seqs {max}");
    }
    if let Some(vocab) = info.vocab_size {
        for &id in r
            .token_ids
            .iter()
            .chain(&r.stop.stop_token_ids)
            .chain(&r.output.token_ids_logprobs)
        {
            assert!(id < vocab, "token id {id} not below the vocabulary {vocab}");
        }
        for b in &r.constraints.logit_bias {
            assert!(
                b.token_id < vocab,
                "logit_bias id {} out of vocabulary",
                b.token_id
            );
        }
    }
    assert!(
        r.output.token_ids_logprobs.len() <= MAX_LOGPROB_TOKEN_IDS,
        "{} logprob token ids",
        r.output.token_ids_logprobs.len()
    );
    if let Some(cap) = info.max_logprobs {
        // `logprob_token_ids` have their own cap (vLLM: `logprobs` is then their count).
        if let Some(k) = r.output.logprobs
            && r.output.token_ids_logprobs.is_empty()
        {
            assert!(k <= cap, "logprobs {k} over max_logprobs {cap}");
        }
        if let Some(p) = &r.output.prompt_logprobs {
            assert!(
                p.top_k <= cap,
                "prompt_logprobs {} over max_logprobs {cap}",
                p.top_k
            );
        }
    }
    if let Some(context) = info.context_limit() {
        let len = r.token_ids.len() as u64;
        assert!(
            len <= u64::from(context),
            "prompt of {len} in a context of {context}"
        );
        if let Some(m) = r.stop.max_tokens {
            assert!(
                len + u64::from(m) <= u64::from(context),
                "prompt {len} + max_tokens {m} over the context {context}"
            );
        }
    }
}

// === engine outputs ===

/// Prompt logprobs from position `start` (the other fields, if any, at their defaults).
// Assigned field by field so the harness builds whether or not `PromptLogprobs` has more fields.
#[allow(clippy::field_reassign_with_default)]
fn prompt_logprobs(start: u32, entries: Vec<Option<TokenLogprob>>) -> PromptLogprobs {
    let mut p = PromptLogprobs::default();
    p.start = start;
    p.entries = entries;
    p
}

fn lp(g: &mut G) -> f64 {
    -(g.below(10_000) as f64) / 997.0
}

fn token_logprob(g: &mut G, req: &EngineRequest, id: u32, top_k: u32) -> TokenLogprob {
    TokenLogprob {
        token_id: id,
        logprob: lp(g),
        rank: Some(1 + g.below(5) as u32),
        top: (0..top_k)
            .map(|j| Candidate {
                token_id: id.wrapping_add(j) % 1000,
                logprob: -f64::from(j) * 0.5,
                rank: Some(j + 1),
                ..Candidate::default()
            })
            .collect(),
        selected: req
            .output
            .token_ids_logprobs
            .iter()
            .map(|&t| Candidate {
                token_id: t,
                logprob: -1.0,
                rank: Some(2),
                ..Candidate::default()
            })
            .collect(),
        ..TokenLogprob::default()
    }
}

/// The deltas a well-behaved engine sends for choice `index` of `req`.
fn coherent_outputs(g: &mut G, req: &EngineRequest, index: u32, vocab: u32) -> Vec<EngineOutput> {
    let prompt_len = req.token_ids.len() as u32;
    let budget = req.stop.max_tokens.unwrap_or(6).min(6) as usize;
    let chunks = 1 + g.below(3);
    let mut produced = 0u32;
    let mut outs = Vec::new();
    for c in 0..chunks {
        let last = c + 1 == chunks;
        let room = budget.saturating_sub(produced as usize);
        let len = g.below(3).min(room);
        let ids: Vec<u32> = (0..len).map(|_| g.below(vocab as usize) as u32).collect();
        let logprobs = req.output.logprobs.map(|k| {
            ids.iter()
                .map(|&id| token_logprob(g, req, id, k.min(5)))
                .collect()
        });
        let prompt_logprobs = match (&req.output.prompt_logprobs, c) {
            (Some(opts), 0) => {
                let start = opts.start.min(prompt_len);
                Some(prompt_logprobs(
                    start,
                    (start..prompt_len)
                        .map(|pos| {
                            (pos > 0).then(|| {
                                token_logprob(
                                    g,
                                    req,
                                    req.token_ids[pos as usize],
                                    opts.top_k.min(5),
                                )
                            })
                        })
                        .collect(),
                ))
            }
            _ => None,
        };
        produced += len as u32;
        // vLLM attaches a choice's routed experts once, whole, to its final chunk.
        let routed_experts = (req.output.routed_experts && last).then(|| {
            let rows = prompt_len.saturating_sub(req.output.routed_experts_start) + produced;
            RoutedExperts {
                num_layers: 2,
                top_k: 2,
                ids: (0..rows * 4).map(|x| (x % 64) as i32).collect(),
            }
        });
        let finish_reason = last.then(|| match g.below(4) {
            0 => FinishReason::Eos { token_id: 2 },
            1 => FinishReason::Stop {
                matched: StopMatch::TokenId(g.below(vocab as usize) as u32),
            },
            2 => FinishReason::Stop {
                matched: StopMatch::Text("\n".to_owned()),
            },
            _ => FinishReason::Length { length: produced },
        });
        outs.push(EngineOutput {
            index,
            token_ids: ids,
            logprobs,
            prompt_logprobs,
            routed_experts,
            sampling_mask: req
                .output
                .sampling_mask
                .then(|| (0..len).map(|j| vec![j as u32, 1]).collect()),
            finish_reason,
            usage: Some(Usage {
                prompt_tokens: prompt_len,
                completion_tokens: produced,
                cached_tokens: g.below(prompt_len as usize + 1) as u32,
            }),
            ..EngineOutput::default()
        });
    }
    outs
}

/// An engine that breaks the contract: wrong indices, misaligned lists, odd numbers, repeated
/// or missing finishes, output after the finish.
fn corrupt(g: &mut G, outs: &mut Vec<EngineOutput>) {
    for _ in 0..1 + g.below(3) {
        if outs.is_empty() {
            return;
        }
        let i = g.below(outs.len());
        let o = &mut outs[i];
        match g.below(10) {
            0 => o.index = *g.pick(&[1, 7, u32::MAX]),
            1 => o.token_ids.push(*g.pick(&[u32::MAX, 0, 999_999])),
            2 => {
                if let Some(l) = &mut o.logprobs {
                    l.pop();
                } else {
                    o.logprobs = Some(vec![TokenLogprob::default()]);
                }
            }
            3 => {
                if let Some(l) = o.logprobs.as_mut().and_then(|l| l.first_mut()) {
                    l.logprob = *g.pick(&[f64::NAN, f64::NEG_INFINITY, f64::INFINITY, 1e308]);
                }
            }
            4 => o.finish_reason = None,
            5 => {
                o.finish_reason = Some(FinishReason::Error {
                    message: "engine failed".to_owned(),
                });
            }
            6 => {
                let copy = o.clone();
                outs.push(copy);
            }
            7 => {
                o.routed_experts = Some(RoutedExperts {
                    num_layers: *g.pick(&[0, 1, 3, u32::MAX]),
                    top_k: *g.pick(&[0, 2, u32::MAX]),
                    ids: vec![1, 2, 3],
                });
            }
            8 => {
                o.prompt_logprobs = Some(prompt_logprobs(
                    *g.pick(&[0, 5, u32::MAX]),
                    vec![None, Some(TokenLogprob::default())],
                ));
            }
            _ => {
                o.usage = Some(Usage {
                    prompt_tokens: u32::MAX,
                    completion_tokens: u32::MAX,
                    cached_tokens: u32::MAX,
                });
                o.sampling_mask = Some(vec![vec![]; g.below(4)]);
                o.handoff = Some(Value::String("x".into()));
            }
        }
    }
}

/// Feed `outputs` to the assembler like the handler does; check the answer's shape when
/// `coherent`.
fn assemble(p: Prepared, outputs: Vec<EngineOutput>, coherent: bool) {
    let stream = p.stream;
    let mut asm = p.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    for out in outputs {
        let r = asm.on_output(0, out, &mut events);
        if coherent {
            r.unwrap_or_else(|e| panic!("coherent output refused: {e:?}"));
        } else if r.is_err() {
            for e in &events {
                json_of(e, "SSE event");
            }
            return;
        }
    }
    if stream {
        let end = asm.finish_stream(&mut events);
        if coherent {
            end.unwrap_or_else(|e| panic!("coherent stream failed: {e:?}"));
        }
        for e in &events {
            json_of(e, "SSE event");
        }
    } else {
        match asm.finish_unary() {
            Ok(answer) => {
                if answer.content_type == CONTENT_TYPE_JSON {
                    json_of(&answer.body, "unary body");
                }
                if coherent {
                    assert_eq!(answer.status, StatusCode::OK);
                }
            }
            Err(e) => assert!(!coherent, "coherent unary failed: {e:?}"),
        }
    }
}

fn interleave(per_choice: Vec<Vec<EngineOutput>>) -> Vec<EngineOutput> {
    let mut iters: Vec<_> = per_choice.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for it in &mut iters {
            if let Some(o) = it.next() {
                out.push(o);
                any = true;
            }
        }
        if !any {
            return out;
        }
    }
}

// === the request path ===

fn request_case(seed: u64, seeds: &[String], stats: &mut Stats) {
    let mut g = G::new(seed);
    let fmt = format(&mut g);
    let info = engine(&mut g);
    let body = body(&mut g, seeds);
    let headers = headers(&mut g);
    stats.last_input = String::from_utf8_lossy(&body).chars().take(4000).collect();
    // The abort route parses client bodies too: the same bytes must not break it either.
    if let Err(e) = genfront_vllm::parse_abort(&body) {
        check_refusal(&fmt, &e, false);
    }
    let prepared = fmt.prepare(ParseInput {
        headers: &headers,
        body: &body,
        engine: &info,
    });
    match prepared {
        Err(rejection) => {
            stats.refused += 1;
            if trace() {
                eprintln!("refused: {:?}", rejection.error.public_message());
            }
            check_refusal(&fmt, &rejection.error, rejection.stream);
        }
        Ok(p) => {
            stats.accepted += 1;
            check_limits(&p, &info);
            let n = p.subs[0].request.sampling.n;
            if n > 16 {
                return;
            }
            let vocab = info.vocab_size.unwrap_or(50_000).max(1);
            let coherent = g.chance(0.7);
            let request = p.subs[0].request.clone();
            let mut per_choice: Vec<Vec<EngineOutput>> = (0..n)
                .map(|i| coherent_outputs(&mut g, &request, i, vocab))
                .collect();
            if !coherent {
                for outs in &mut per_choice {
                    corrupt(&mut g, outs);
                }
            }
            assemble(p, interleave(per_choice), coherent);
            stats.assembled += 1;
        }
    }
}

#[test]
fn fuzz_vllm_request_path() {
    let mut seeds: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    let fixtures = fixture_seeds();
    eprintln!("vllm request path: {} fixture seeds", fixtures.len());
    seeds.extend(fixtures);
    let stats = run_cases("vllm request path", cases(), |seed, stats| {
        request_case(seed, &seeds, stats)
    });
    // The generator reaches both sides of the validator (else it tests nothing).
    if cases() >= 1000 {
        assert!(stats.accepted * 20 > cases(), "too few accepted bodies");
        assert!(stats.refused * 20 > cases(), "too few refused bodies");
    }
}

// === the engine client: vLLM answers → deltas ===

/// What the scripted server answers the next `POST /inference/v1/generate` with.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    content_type: &'static str,
    /// Network chunks; `None` breaks the connection there.
    chunks: Vec<Option<Vec<u8>>>,
}

#[derive(Clone, Default)]
struct Fake {
    next: Arc<Mutex<Option<Answer>>>,
}

impl Fake {
    fn set(&self, answer: Answer) {
        *self.next.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
    }
}

async fn models() -> axum::Json<Value> {
    axum::Json(serde_json::json!({"object": "list", "data": [
        {"id": "genfront-fuzz", "object": "model", "owned_by": "vllm", "root": "genfront-fuzz",
         "parent": null, "max_model_len": 4096}]}))
}

async fn generate(State(fake): State<Fake>, _body: Bytes) -> Response {
    let answer = fake
        .next
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .unwrap_or(Answer {
            status: 500,
            content_type: "text/plain",
            chunks: vec![Some(b"no script".to_vec())],
        });
    let chunks = answer.chunks.into_iter().map(|c| match c {
        Some(bytes) => Ok(Bytes::from(bytes)),
        None => Err(std::io::Error::other("connection broken")),
    });
    Response::builder()
        .status(StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK))
        .header(http::header::CONTENT_TYPE, answer.content_type)
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap_or_default()
}

/// A scripted vLLM server on a local port, and a client connected to it.
async fn start(g: &mut G) -> (Fake, VllmEngine) {
    let fake = Fake::default();
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/inference/v1/generate", post(generate))
        .route(
            "/inference/v1/abort_requests",
            post(|| async { StatusCode::OK }),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let addr = listener.local_addr().expect("local address");
    // Small scripted writes must not wait for delayed ACKs (Nagle).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let options = VllmEngineOptions {
        vocab_size: Some(1000),
        eos_token_ids: vec![2],
        max_logprobs: Some(20),
        max_num_seqs: Some(16),
        routed_experts: true,
        sampling_mask: g.chance(0.5),
        tokenizer: Some(false),
        cancel_grace: Duration::from_millis(10),
        ..VllmEngineOptions::default()
    };
    let engine = VllmEngine::connect(&format!("http://{addr}"), options)
        .await
        .expect("connect to the scripted vLLM");
    (fake, engine)
}

/// A base64 `.npy` of `shape`, dtype `descr` (damaged now and then).
fn npy_b64(g: &mut G, shape: (usize, usize, usize)) -> J {
    let descr = *g.pick::<&str>(&[
        "<i4", "<i4", "<i4", "<i8", "|u1", "<u2", ">i4", "<f4", "|b1", "<i16",
    ]);
    let shape_text = match g.below(12) {
        0 => "(18446744073709551615, 2, 2)".to_owned(),
        1 => "(4294967296, 65536, 65536)".to_owned(),
        2 => format!("({},)", shape.0),
        3 => "()".to_owned(),
        _ => format!("({}, {}, {})", shape.0, shape.1, shape.2),
    };
    let header = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape_text}, }}",
        if g.chance(0.95) { "False" } else { "True" }
    );
    let mut h = header.into_bytes();
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&h);
    let width = match descr {
        "<i8" => 8,
        "|u1" | "|b1" => 1,
        "<u2" => 2,
        "<i16" => 16,
        _ => 4,
    };
    let count = shape.0 * shape.1 * shape.2;
    for i in 0..count * width {
        bytes.push(if i % width == 0 {
            (i / width % 64) as u8
        } else {
            0
        });
    }
    if g.chance(0.1) {
        let cut = g.below(bytes.len());
        bytes.truncate(cut);
    }
    if g.chance(0.05) {
        bytes = g.bytes(40);
    }
    jstr(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn logprob_entry(g: &mut G, token: u32, k: usize) -> J {
    J::Obj(vec![
        ("token_id".into(), lit(token.to_string())),
        ("logprob".into(), num(g, -20.0, 0.0)),
        ("rank".into(), small_int(g, 1, 5)),
        (
            "top_logprobs".into(),
            J::Arr(
                (0..k)
                    .map(|j| {
                        J::Obj(vec![
                            ("token_id".into(), token_id(g)),
                            ("logprob".into(), lit(format!("-{j}.5"))),
                            ("rank".into(), lit((j + 1).to_string())),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}

fn usage_value(g: &mut G, prompt: usize, completion: usize) -> J {
    if g.chance(0.2) {
        return lit("null");
    }
    J::Obj(vec![
        ("prompt_tokens".into(), lit(prompt.to_string())),
        ("completion_tokens".into(), lit(completion.to_string())),
        (
            "total_tokens".into(),
            lit((prompt + completion).to_string()),
        ),
        (
            "prompt_tokens_details".into(),
            if g.chance(0.5) {
                J::Obj(vec![("cached_tokens".into(), small_int(g, 0, 4))])
            } else {
                lit("null")
            },
        ),
    ])
}

/// One choice of a chunk (or of a unary body) with `tokens` new ids.
fn choice(
    g: &mut G,
    req: &EngineRequest,
    index: u32,
    tokens: &[u32],
    finish: bool,
    prior: usize,
) -> J {
    let k = req.output.logprobs.unwrap_or(1) as usize;
    let mut entries = vec![
        ("index".to_owned(), lit(index.to_string())),
        (
            "token_ids".to_owned(),
            J::Arr(tokens.iter().map(|t| lit(t.to_string())).collect()),
        ),
        (
            "logprobs".to_owned(),
            if req.output.logprobs.is_some() || g.chance(0.05) {
                let n = if g.chance(0.9) {
                    tokens.len()
                } else {
                    g.below(4)
                };
                J::Obj(vec![(
                    "content".into(),
                    J::Arr(
                        (0..n)
                            .map(|i| {
                                let t = tokens.get(i).copied().unwrap_or(0);
                                logprob_entry(g, t, k.min(4))
                            })
                            .collect(),
                    ),
                )])
            } else {
                lit("null")
            },
        ),
        (
            "finish_reason".to_owned(),
            if finish {
                lit(*g.pick(&[
                    "\"stop\"",
                    "\"stop\"",
                    "\"length\"",
                    "\"length\"",
                    "\"abort\"",
                    "\"error\"",
                    "\"repetition\"",
                    "\"weird\"",
                    "null",
                    "3",
                ]))
            } else {
                lit("null")
            },
        ),
        (
            "stop_reason".to_owned(),
            match g.below(5) {
                0 => token_id(g),
                1 => plain_string(g),
                2 => lit(int_text(g)),
                _ => lit("null"),
            },
        ),
    ];
    if req.output.routed_experts || g.chance(0.05) {
        let rows = req.token_ids.len().min(32) + prior + tokens.len();
        entries.push((
            "routed_experts".to_owned(),
            if finish || g.chance(0.2) {
                npy_b64(g, (rows, 2, 2))
            } else {
                lit("null")
            },
        ));
    }
    if req.output.sampling_mask || g.chance(0.05) {
        let n = if g.chance(0.9) {
            tokens.len()
        } else {
            g.below(4)
        };
        entries.push((
            "sampling_mask".to_owned(),
            J::Arr((0..n).map(|_| ids(g, 3)).collect()),
        ));
    }
    J::Obj(entries)
}

/// `prompt_logprobs` of a unary body: `null` for position 0, then `{id: {logprob, rank}}`.
fn prompt_logprobs_value(g: &mut G, req: &EngineRequest) -> J {
    let k = req.output.prompt_logprobs.as_ref().map_or(1, |p| p.top_k) as usize;
    let len = if g.chance(0.9) {
        req.token_ids.len()
    } else {
        g.below(req.token_ids.len().min(32) + 3)
    };
    J::Arr(
        (0..len)
            .map(|pos| {
                if pos == 0 {
                    return lit("null");
                }
                let own = req.token_ids.get(pos).copied().unwrap_or(0);
                let mut entry = vec![(
                    own.to_string(),
                    J::Obj(vec![
                        ("logprob".into(), num(g, -10.0, 0.0)),
                        ("rank".into(), small_int(g, 1, 9)),
                        ("decoded_token".into(), lit("null")),
                    ]),
                )];
                for j in 0..k.min(3) {
                    entry.push((
                        if g.chance(0.9) {
                            own.wrapping_add(j as u32 + 1).to_string()
                        } else {
                            "x".into()
                        },
                        J::Obj(vec![
                            ("logprob".into(), lit("-3.5")),
                            ("rank".into(), lit((j + 1).to_string())),
                        ]),
                    ));
                }
                J::Obj(entry)
            })
            .collect(),
    )
}

/// What the scripted server sends for `req`: SSE chunks or a unary body, error envelopes and
/// statuses, broken connections, damaged bytes.
fn answer(g: &mut G, req: &EngineRequest, fixtures: &[String]) -> Answer {
    let n = req.sampling.n.clamp(1, 4) as usize;
    let unary = req.output.prompt_logprobs.is_some() != g.chance(0.1);
    if g.chance(0.05) {
        // An HTTP error (vLLM's envelope, or not).
        let status = *g.pick(&[400u16, 404, 413, 429, 500, 502, 503, 504, 401, 307, 204]);
        let body = if g.chance(0.7) {
            format!(
                r#"{{"error":{{"message":{},"type":"BadRequestError","param":null,"code":{status}}}}}"#,
                string_text(g)
            )
            .into_bytes()
        } else {
            g.bytes(30)
        };
        return Answer {
            status,
            content_type: "application/json",
            chunks: vec![Some(body)],
        };
    }
    let mut produced = vec![0usize; n];
    let mut finished = vec![false; n];
    let prompt = req.token_ids.len();
    let mut wire = Vec::new();
    if unary {
        let choices: Vec<J> = (0..n)
            .map(|i| {
                let tokens: Vec<u32> = (0..g.below(4)).map(|_| g.below(1000) as u32).collect();
                choice(g, req, i as u32, &tokens, true, 0)
            })
            .collect();
        let mut body = J::Obj(vec![
            ("request_id".into(), jstr("generate-tokens-x")),
            ("choices".into(), J::Arr(choices)),
            (
                "prompt_logprobs".into(),
                if req.output.prompt_logprobs.is_some() || g.chance(0.1) {
                    prompt_logprobs_value(g, req)
                } else {
                    lit("null")
                },
            ),
            ("usage".into(), usage_value(g, prompt, 3)),
            (
                "kv_transfer_params".into(),
                if g.chance(0.2) {
                    value(g, 1)
                } else {
                    lit("null")
                },
            ),
        ]);
        if g.chance(0.2) {
            mutate(g, &mut body);
        }
        wire = body.text().into_bytes();
    } else {
        for _ in 0..1 + g.below(2 * n + 2) {
            let data = if g.chance(0.03) && !fixtures.is_empty() {
                g.pick(fixtures).clone().into_bytes()
            } else if g.chance(0.02) {
                format!(r#"{{"error":{{"message":"boom","code":{}}}}}"#, int_text(g)).into_bytes()
            } else if g.chance(0.02) {
                g.bytes(30)
            } else {
                let open: Vec<usize> = (0..n).filter(|&i| !finished[i]).collect();
                let mut choices = Vec::new();
                if !open.is_empty() && g.chance(0.9) {
                    let i = if g.chance(0.97) {
                        *g.pick(&open)
                    } else {
                        g.below(n + 2)
                    };
                    let tokens: Vec<u32> = (0..g.below(3)).map(|_| g.below(1000) as u32).collect();
                    let finish = g.chance(0.4);
                    let prior = produced.get(i).copied().unwrap_or(0);
                    choices.push(choice(g, req, i as u32, &tokens, finish, prior));
                    if let Some(p) = produced.get_mut(i) {
                        *p += tokens.len();
                    }
                    if finish && let Some(f) = finished.get_mut(i) {
                        *f = true;
                    }
                }
                let total: usize = produced.iter().sum();
                let mut chunk = J::Obj(vec![
                    ("request_id".into(), jstr("generate-tokens-x")),
                    ("output_mode".into(), jstr("tokens")),
                    ("usage".into(), usage_value(g, prompt, total)),
                    ("choices".into(), J::Arr(choices)),
                ]);
                if g.chance(0.1) {
                    mutate(g, &mut chunk);
                }
                chunk.text().into_bytes()
            };
            wire.extend_from_slice(if g.chance(0.95) { b"data: " } else { b"data:" });
            wire.extend_from_slice(&data);
            wire.extend_from_slice(match g.below(40) {
                0..=3 => b"\r\n\r\n",
                4 => b"\n",
                _ => b"\n\n",
            });
            if g.chance(0.05) {
                wire.extend_from_slice(b": ping\n\n");
            }
        }
        if g.chance(0.8) {
            wire.extend_from_slice(b"data: [DONE]\n\n");
        }
    }
    if g.chance(0.03) {
        wire = damage(g, String::from_utf8_lossy(&wire).into_owned());
    }
    // Random network chunking, and a broken connection now and then.
    let mut chunks = Vec::new();
    let mut rest = &wire[..];
    while !rest.is_empty() {
        let most = if g.chance(0.5) { 8 } else { 512 };
        let k = 1 + g.below(rest.len().min(most));
        chunks.push(Some(rest[..k].to_vec()));
        rest = &rest[k..];
    }
    if g.chance(0.03) {
        let at = g.below(chunks.len() + 1);
        chunks.insert(at, None);
    }
    Answer {
        status: 200,
        content_type: if unary {
            "application/json"
        } else {
            "text/event-stream"
        },
        chunks,
    }
}

/// An engine request of another format (rebuilt by the client from the typed fields).
fn typed_request(g: &mut G) -> EngineRequest {
    let prompt: Vec<u32> = (0..1 + g.below(6)).map(|_| g.below(1000) as u32).collect();
    let logprobs = g.chance(0.4).then(|| g.below(4) as u32);
    EngineRequest {
        request_id: format!("{:032x}", g.u64()),
        token_ids: prompt,
        stop: StopConditions {
            max_tokens: Some(*g.pick(&[0, 1, 4])),
            stop_token_ids: if g.chance(0.3) { vec![2] } else { vec![] },
            ..StopConditions::default()
        },
        sampling: SamplingOptions {
            n: 1 + g.below(3) as u32,
            ..SamplingOptions::default()
        },
        output: OutputOptions {
            logprobs,
            prompt_logprobs: g.chance(0.3).then(|| PromptLogprobOptions {
                start: g.below(3) as u32,
                top_k: g.below(3) as u32,
            }),
            token_ids_logprobs: if logprobs.is_none() && g.chance(0.3) {
                vec![1, 2]
            } else {
                vec![]
            },
            routed_experts: g.chance(0.3),
            routed_experts_start: 0,
            sampling_mask: g.chance(0.3),
            stream: g.chance(0.5),
            relay: false,
        },
        native: NativeBody {
            format: "sglang".to_owned(),
            body: Value::Object(serde_json::Map::new()),
        },
        ..EngineRequest::default()
    }
}

/// The engine stream's items, checked against the engine contract.
fn check_stream(items: &[Result<EngineOutput, genfront_protocol::EngineError>], n: u32) {
    let mut finished = vec![false; n as usize];
    for (i, item) in items.iter().enumerate() {
        match item {
            Ok(o) => {
                assert!(o.index < n, "choice {} of n = {n}", o.index);
                assert!(
                    !finished[o.index as usize],
                    "output after the finish of choice {}",
                    o.index
                );
                if let Some(l) = &o.logprobs {
                    assert_eq!(l.len(), o.token_ids.len(), "logprobs misaligned: {o:?}");
                }
                if let Some(m) = &o.sampling_mask {
                    assert_eq!(
                        m.len(),
                        o.token_ids.len(),
                        "sampling mask misaligned: {o:?}"
                    );
                }
                if let Some(r) = &o.routed_experts {
                    let width = (r.num_layers as usize) * (r.top_k as usize);
                    assert!(
                        width == 0 || r.ids.len() % width == 0,
                        "ragged experts: {r:?}"
                    );
                }
                if o.finish_reason.is_some() {
                    finished[o.index as usize] = true;
                }
            }
            Err(_) => assert_eq!(i + 1, items.len(), "items after an error"),
        }
    }
}

async fn decode_case(
    g: &mut G,
    fake: &Fake,
    engine: &VllmEngine,
    fixtures: &[String],
    stats: &mut Stats,
) {
    let info = engine.info().clone();
    // Mostly a vLLM client's request (its own body, edited), sometimes another format's.
    let (prepared, request) = if g.chance(0.75) {
        let fmt = VllmFormat::new().with_prompt_tokens_details(g.chance(0.5));
        let mut doc = J::from_value(
            &serde_json::from_str(SEEDS[g.below(SEEDS.len())]).unwrap_or(Value::Null),
        );
        if g.chance(0.3) {
            mutate(g, &mut doc);
        }
        match fmt.prepare(ParseInput {
            headers: &json_headers(),
            body: doc.text().as_bytes(),
            engine: &info,
        }) {
            Ok(p) if p.subs[0].request.sampling.n <= 16 => {
                let mut request = p.subs[0].request.clone();
                request.request_id = format!("{:032x}", g.u64());
                request.output.stream = p.stream;
                (Some(p), request)
            }
            _ => (None, typed_request(g)),
        }
    } else {
        (None, typed_request(g))
    };
    let answer = answer(g, &request, fixtures);
    stats.last_input = format!("{request:?}\n{answer:?}")
        .chars()
        .take(6000)
        .collect();
    fake.set(answer);
    let n = if request
        .pd
        .as_ref()
        .is_some_and(|pd| pd.role == PdRole::Prefill)
    {
        1
    } else {
        request.sampling.n
    };
    let stream = engine.generate(request, CancellationToken::new());
    let items: Vec<_> = tokio::time::timeout(Duration::from_secs(20), stream.collect())
        .await
        .unwrap_or_else(|_| panic!("the engine stream hung"));
    for item in &items {
        match item {
            Ok(_) => stats.decoded += 1,
            Err(e) => {
                stats.decode_errors += 1;
                if trace() {
                    eprintln!("decode error: {e}");
                }
            }
        }
    }
    check_stream(&items, n);
    if let Some(p) = prepared {
        let outputs: Vec<EngineOutput> = items.into_iter().map_while(Result::ok).collect();
        assemble(p, outputs, false);
        stats.assembled += 1;
    }
}

/// Response records of the fixtures (unary bodies and stream chunks).
fn fixture_frames() -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(fixtures_dir().join("vllm/examples.jsonl")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == "response" || r["kind"] == "stream_chunk")
        .map(|r| r["json"].to_string())
        .collect()
}

#[test]
fn fuzz_vllm_engine_answers() {
    let fixtures = fixture_frames();
    eprintln!("vllm engine answers: {} fixture frames", fixtures.len());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut setup = G::new(base_seed());
    let (fake, engine) = runtime.block_on(start(&mut setup));
    // An HTTP round trip per case: 500 by default (a couple of seconds in debug), else
    // `GENFRONT_FUZZ_ENGINE_CASES` or `GENFRONT_FUZZ_CASES`.
    let count = std::env::var("GENFRONT_FUZZ_ENGINE_CASES")
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(if std::env::var_os("GENFRONT_FUZZ_CASES").is_some() {
            cases()
        } else {
            500
        });
    let stats = run_cases("vllm engine answers", count, |seed, stats| {
        let mut g = G::new(seed);
        runtime.block_on(decode_case(&mut g, &fake, &engine, &fixtures, stats));
    });
    if count >= 200 {
        assert!(stats.decoded > count / 2, "too few outputs decoded");
        assert!(stats.decode_errors * 50 > count, "too few broken answers");
    }
}
