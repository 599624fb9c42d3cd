//! Fuzz harness of the SGLang format: a seeded, structure-aware generator drives the whole request
//! path the shared handler runs ([`GenerateFormat::prepare`], then the native error rendering or
//! the assembler with engine outputs), and the engine-client decoder of SGLang stream frames
//! (SSE bytes → [`SseSplitter`] → [`FrameDecoder`] → [`EngineOutput`] → assembler).
//!
//! Properties, for every input:
//! - nothing panics;
//! - a refused body is a client error: a 4xx [`GenerateError`] of [`Fault::Client`], rendered as
//!   SGLang's envelope (a 4xx JSON body, or for a streaming request the 200 SSE error event);
//! - an accepted body projects to engine requests within the limits: prompt ids,
//!   `token_ids_logprob` ids and `logit_bias` ids below the vocabulary when it is known, a prompt
//!   shorter than the context and `max_new_tokens` fitting in it, `n` at most the engine's
//!   `max_running_requests` (or `MAX_FANOUT_UNKNOWN`), one sample per engine request;
//! - coherent engine outputs assemble to a 200 JSON body or JSON SSE events; arbitrary ones never
//!   panic and every event or body produced is JSON;
//! - decoded frames respect the engine contract (one logprob and one mask entry per new token).
//!
//! Inputs mix raw random bytes, mutated valid bodies (literals here, plus the recorded SGLang
//! requests in the shared fixtures when they are present beside the repository) and generated
//! bodies: the schema's keys with right and wrong types, huge, negative and float integers, deep
//! nesting, long and unicode strings, duplicate keys, batches, `n > 1`, logprob options at their
//! limits.
//!
//! Case count and seed come from `GENFRONT_FUZZ_CASES` (default 2 000 per test, a few seconds) and
//! `GENFRONT_FUZZ_SEED`. The 10⁶-case run (an optimised build with debug assertions; see the
//! workspace `[profile.fuzz]` and the README, "Fuzzing"):
//!
//! ```text
//! GENFRONT_FUZZ_CASES=1000000 cargo test --profile fuzz -p genfront-sglang --test fuzz -- --nocapture --test-threads=1
//! ```
//!
//! A failing case prints its seed; `GENFRONT_FUZZ_SEED=<seed> GENFRONT_FUZZ_CASES=1` replays it.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use genfront_format::{
    CONTENT_TYPE_JSON, CONTENT_TYPE_SSE, GenerateError, GenerateFormat, ParseInput, Prepared,
};
use genfront_protocol::{
    Candidate, EngineInfo, EngineOutput, EngineRequest, Fault, FinishReason, PdRole,
    PromptLogprobs, RoutedExperts, StopMatch, TokenLogprob, UNKNOWN_CONTEXT_LEN, Usage,
};
use genfront_sglang::client::{DecodeConfig, FrameDecoder, SseSplitter};
use genfront_sglang::{MAX_FANOUT_UNKNOWN, REQUEST_KEYS, SAMPLING_KEYS, SglangFormat};
use http::{HeaderMap, HeaderValue, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::Value;

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
fn run_cases(name: &str, mut one: impl FnMut(u64, &mut Stats)) -> Stats {
    let n = cases();
    let base = base_seed();
    let mut stats = Stats::default();
    let started = Instant::now();
    // An abort (allocation failure, stack overflow) cannot be caught: trace names its case.
    let trace = std::env::var_os("GENFRONT_FUZZ_TRACE").is_some();
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

fn any_key(g: &mut G) -> String {
    match g.below(4) {
        0 => g.pick(REQUEST_KEYS).key.to_owned(),
        1 => g.pick(SAMPLING_KEYS).key.to_owned(),
        2 => g
            .pick(&["", "x", "🙂", "input_ids ", "Input_Ids", "__proto__"])
            .to_string(),
        _ => format!("k{}", g.below(100)),
    }
}

// === SGLang bodies ===

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

fn one_or_list(g: &mut G, batch: usize, mut f: impl FnMut(&mut G) -> J) -> J {
    if batch > 1 && g.chance(0.5) {
        J::Arr((0..batch).map(|_| f(g)).collect())
    } else {
        f(g)
    }
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

/// A value for sampling key `key`, usually of the right type and near its limits.
fn sampling_value(g: &mut G, key: &str) -> J {
    if g.chance(0.05) {
        return value(g, 2);
    }
    match key {
        "max_new_tokens" => small_int(g, -1, 70),
        "min_new_tokens" => small_int(g, -1, 5),
        "n" => small_int(g, 0, 4),
        "temperature" => num(g, -0.5, 3.0),
        "top_p" => num(g, -0.1, 1.2),
        "top_k" => small_int(g, -2, 50),
        "min_p" => num(g, -0.1, 1.1),
        "frequency_penalty" | "presence_penalty" => num(g, -2.5, 2.5),
        "repetition_penalty" => num(g, -0.5, 2.5),
        "stop" => match g.below(3) {
            0 => lit(string_text(g)),
            1 => J::Arr((0..g.below(4)).map(|_| lit(string_text(g))).collect()),
            _ => lit("null"),
        },
        "stop_token_ids" => ids(g, 4),
        "stop_regex" | "regex" | "ebnf" | "json_schema" | "structural_tag" => {
            if g.chance(0.7) {
                lit("null")
            } else {
                lit(string_text(g))
            }
        }
        "ignore_eos" | "skip_special_tokens" | "spaces_between_special_tokens" | "no_stop_trim" => {
            lit(*g.pick(&["true", "false", "null", "1", "\"yes\""]))
        }
        "logit_bias" => J::Obj(
            (0..g.below(4))
                .map(|_| {
                    let k = match g.below(4) {
                        0 => "x".to_owned(),
                        1 => int_text(g),
                        _ => g.below(1001).to_string(),
                    };
                    (k, num(g, -100.0, 100.0))
                })
                .collect(),
        ),
        "sampling_seed" => lit(int_text(g)),
        "beam_width" => small_int(g, 0, 2),
        "stream_interval" => small_int(g, 0, 3),
        _ => value(g, 2),
    }
}

fn sampling_params(g: &mut G) -> J {
    let mut entries = Vec::new();
    for _ in 0..g.below(6) {
        let key = g.pick(SAMPLING_KEYS).key;
        entries.push((key.to_owned(), sampling_value(g, key)));
    }
    if g.chance(0.6) {
        entries.push(("max_new_tokens".to_owned(), small_int(g, 0, 8)));
    }
    J::Obj(entries)
}

/// A value for top-level key `key` of a body whose batch has `batch` items.
fn request_value(g: &mut G, key: &str, batch: usize) -> J {
    if g.chance(0.04) {
        return value(g, 2);
    }
    match key {
        "input_ids" => {
            if batch > 1 || g.chance(0.2) {
                J::Arr((0..batch).map(|_| ids(g, 12)).collect())
            } else {
                ids(g, 12)
            }
        }
        "text" => one_or_list(g, batch, |g| lit(string_text(g))),
        "rid" => one_or_list(g, batch, |g| lit(string_text(g))),
        "sampling_params" => one_or_list(g, batch, sampling_params),
        "return_logprob"
        | "return_text_in_logprobs"
        | "stream"
        | "return_routed_experts"
        | "return_sampling_mask"
        | "return_hidden_states"
        | "return_prompt_token_ids" => one_or_list(g, batch, |g| {
            lit(*g.pick(&[
                "true", "false", "true", "false", "true", "false", "null", "0", "1",
            ]))
        }),
        "logprob_start_len" => one_or_list(g, batch, |g| small_int(g, -2, 12)),
        "top_logprobs_num" => one_or_list(g, batch, |g| small_int(g, -1, 5)),
        "token_ids_logprob" => one_or_list(g, batch, |g| ids(g, 3)),
        "routed_experts_start_len" => small_int(g, -1, 12),
        "priority" | "data_parallel_rank" | "routed_dp_rank" => small_int(g, -2, 4),
        "bootstrap_room" | "bootstrap_port" => small_int(g, -1, 9000),
        "bootstrap_host" | "lora_path" | "session_id" | "cache_salt" | "extra_key" => {
            if g.chance(0.6) {
                lit("null")
            } else {
                lit(string_text(g))
            }
        }
        _ => {
            if g.chance(0.5) {
                lit(*g.pick(&["null", "false", "true", "[]", "{}", "\"\""]))
            } else {
                value(g, 2)
            }
        }
    }
}

/// The request keys RL clients and the SGLang examples send.
const COMMON_KEYS: &[&str] = &[
    "rid",
    "stream",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "token_ids_logprob",
    "return_routed_experts",
    "routed_experts_start_len",
    "return_sampling_mask",
    "priority",
];

fn generated_body(g: &mut G) -> J {
    let batch = if g.chance(0.3) { 1 + g.below(4) } else { 1 };
    let mut entries = Vec::new();
    if g.chance(0.9) {
        entries.push(("input_ids".to_owned(), request_value(g, "input_ids", batch)));
    }
    // Half the bodies use only the keys clients commonly send, so more of them pass validation
    // and reach the projection and the assembler.
    let common = g.chance(0.5);
    for _ in 0..g.below(7) {
        let key = if common {
            *g.pick::<&str>(COMMON_KEYS)
        } else {
            g.pick(REQUEST_KEYS).key
        };
        entries.push((key.to_owned(), request_value(g, key, batch)));
    }
    if g.chance(0.7) {
        entries.push((
            "sampling_params".to_owned(),
            request_value(g, "sampling_params", batch),
        ));
    }
    if g.chance(0.1) {
        // Unknown keys pass through to the native body.
        entries.push((any_key(g), value(g, 1)));
    }
    let shuffle = g.below(entries.len().max(1));
    entries.rotate_left(shuffle);
    J::Obj(entries)
}

/// Bodies that SGLang accepts (most of them), to be mutated.
const SEEDS: &[&str] = &[
    r#"{"rid":"r1","abort_all":false}"#,
    r#"{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":8,"temperature":0}}"#,
    r#"{"rid":"r1","input_ids":[5,6,7,8],"stream":true,"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":2,"token_ids_logprob":[1,2],"sampling_params":{"max_new_tokens":4,"n":2}}"#,
    r#"{"input_ids":[[1,2],[3,4,5]],"sampling_params":[{"max_new_tokens":2,"top_k":8},{"max_new_tokens":3,"stop_token_ids":[2],"temperature":0}],"return_routed_experts":true,"return_sampling_mask":true}"#,
    r#"{"rid":["a","b"],"input_ids":[[9],[8,7]],"return_logprob":[true,false],"logprob_start_len":[-1,0],"top_logprobs_num":[0,3],"stream":true}"#,
    r#"{"input_ids":[10,11,12,13,14],"sampling_params":{"max_new_tokens":0},"return_logprob":true,"logprob_start_len":2}"#,
    r#"{"input_ids":[3,4],"sampling_params":{"max_new_tokens":5,"min_new_tokens":2,"ignore_eos":true,"logit_bias":{"7":2.5},"sampling_seed":42,"regex":"[a-z]+"},"routed_experts_start_len":1,"return_routed_experts":true}"#,
    r#"{"text":"The capital of France is","sampling_params":{"temperature":0,"max_new_tokens":4,"stop":["\n"]}}"#,
    r#"{"input_ids":[1],"sampling_params":{"n":3,"max_new_tokens":1,"top_k":-1,"top_p":1.0,"min_p":0.0,"frequency_penalty":0.0,"presence_penalty":0.0,"repetition_penalty":1.0}}"#,
];

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/fixtures")
}

/// The recorded SGLang `/generate` requests of the shared fixtures, when they are there.
fn fixture_seeds() -> Vec<String> {
    let mut out = Vec::new();
    let dir = fixtures_dir();
    for (file, pick) in [
        ("sglang/examples.jsonl", "request"),
        ("clients/rl_requests.jsonl", "/generate"),
    ] {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let body = if record["kind"] == pick {
                &record["json"]
            } else if record["endpoint"] == pick {
                &record["body"]
            } else {
                continue;
            };
            out.push(body.to_string());
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
                        g.pick(REQUEST_KEYS).key
                    } else {
                        g.pick(SAMPLING_KEYS).key
                    };
                    let v = if SAMPLING_KEYS.iter().any(|k| k.key == key) {
                        sampling_value(g, key)
                    } else {
                        let batch = 1 + g.below(2);
                        request_value(g, key, batch)
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
            ..EngineInfo::default()
        },
        _ => EngineInfo {
            vocab_size: Some(10),
            max_context_len: 8,
            max_num_seqs: Some(2),
            ..EngineInfo::default()
        },
    }
}

fn format(g: &mut G) -> SglangFormat {
    let f = SglangFormat::new(&genfront_sglang::SglangSettings {
        incremental_streaming: g.chance(0.5),
    });
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

/// A refusal is the client's fault and rendered as SGLang renders it.
fn check_refusal(fmt: &SglangFormat, error: &GenerateError, stream: bool) {
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
        let data = text
            .strip_prefix("data: ")
            .and_then(|t| t.split("\n\n").next())
            .unwrap_or_else(|| panic!("SSE error answer without data: {text}"));
        json_of(data.as_bytes(), "SSE error event");
    } else {
        assert_eq!(answer.content_type, CONTENT_TYPE_JSON);
        assert!(
            answer.status.is_client_error(),
            "error answer {}",
            answer.status
        );
        json_of(&answer.body, "error body");
    }
    json_of(&fmt.stream_error_event(error), "stream error event");
}

/// An accepted body's engine requests respect the model's limits.
fn check_limits(p: &Prepared, info: &EngineInfo, body_len: usize) {
    // An empty batch (`"text": []`) has no engine request: SGLang's `_determine_batch_size` takes
    // `len(text)` without a check and answers `[]`; the assembler must still answer.
    let max_n = info.max_num_seqs.unwrap_or(MAX_FANOUT_UNKNOWN).max(1) as usize;
    // Every batch item takes at least two body bytes (`[]` or a string).
    assert!(
        p.subs.len() <= max_n.saturating_mul(body_len / 2 + 1),
        "{} engine requests from a {body_len}-byte body",
        p.subs.len()
    );
    for sub in &p.subs {
        let r = &sub.request;
        assert_eq!(
            r.sampling.n, 1,
            "SGLang fans n out to one request per sample"
        );
        assert_eq!(r.native.format, "sglang");
        assert!(r.native.body.is_object(), "native body {:?}", r.native.body);
        if let Some(vocab) = info.vocab_size {
            for &id in r.token_ids.iter().chain(&r.output.token_ids_logprobs) {
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
        if let Some(context) = info.context_limit()
            && !r.token_ids.is_empty()
        {
            let len = r.token_ids.len() as u64;
            assert!(
                len < u64::from(context),
                "prompt of {len} in a context of {context}"
            );
            // SGLang checks an explicit `max_new_tokens` only; its default (128) is clamped to
            // the context by the scheduler.
            let explicit = r.native.body["sampling_params"]
                .get("max_new_tokens")
                .is_some_and(|v| !v.is_null());
            if let Some(m) = r.stop.max_tokens.filter(|_| explicit) {
                assert!(
                    len + u64::from(m) <= u64::from(context),
                    "prompt {len} + max_new_tokens {m} over the context {context}"
                );
            }
        }
        // A prefill-only request (`max_new_tokens: 0`) may start past the prompt (SGLang skips
        // that check for it).
        if let Some(p) = &r.output.prompt_logprobs
            && r.stop.max_tokens != Some(0)
        {
            assert!(
                r.token_ids.is_empty() || (p.start as usize) <= r.token_ids.len(),
                "prompt logprobs from {} of a {}-token prompt",
                p.start,
                r.token_ids.len()
            );
        }
        assert!(
            r.output.routed_experts_start as usize <= r.token_ids.len().max(1)
                || r.token_ids.is_empty()
        );
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
        rank: g.chance(0.5).then(|| 1 + g.below(5) as u32),
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
                ..Candidate::default()
            })
            .collect(),
        ..TokenLogprob::default()
    }
}

/// The deltas a well-behaved engine sends for `req`.
fn coherent_outputs(g: &mut G, req: &EngineRequest, vocab: u32) -> Vec<EngineOutput> {
    let prompt_len = req.token_ids.len() as u32;
    let budget = req.stop.max_tokens.unwrap_or(6).min(6) as usize;
    let chunks = 1 + g.below(3);
    let mut produced = 0u32;
    let mut outs = Vec::new();
    for c in 0..chunks {
        let last = c + 1 == chunks;
        let len = if last {
            budget.saturating_sub(produced as usize).min(g.below(3))
        } else {
            g.below(2).min(budget.saturating_sub(produced as usize))
        };
        let ids: Vec<u32> = (0..len).map(|_| g.below(vocab as usize) as u32).collect();
        let logprobs = req.output.logprobs.map(|k| {
            ids.iter()
                .map(|&id| token_logprob(g, req, id, k.min(5)))
                .collect()
        });
        let prompt_logprobs = match (&req.output.prompt_logprobs, c) {
            (Some(opts), 0) if prompt_len > 0 => {
                let start = opts.start.min(prompt_len - 1);
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
        let rows = if c == 0 {
            prompt_len.saturating_sub(req.output.routed_experts_start) + len as u32
        } else {
            len as u32
        };
        let routed_experts = req.output.routed_experts.then(|| RoutedExperts {
            num_layers: 2,
            top_k: 2,
            ids: (0..rows * 4).map(|x| (x % 64) as i32).collect(),
        });
        produced += len as u32;
        let finish_reason = last.then(|| match g.below(5) {
            0 => FinishReason::Eos { token_id: 2 },
            1 => FinishReason::Stop {
                matched: StopMatch::TokenId(g.below(vocab as usize) as u32),
            },
            2 => FinishReason::Stop {
                matched: StopMatch::Text("\n".to_owned()),
            },
            3 => FinishReason::Cancelled {
                message: "Aborted".to_owned(),
            },
            _ => FinishReason::Length { length: produced },
        });
        outs.push(EngineOutput {
            index: 0,
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
            0 => o.index = *g.pick(&[1, 2, u32::MAX]),
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
            }
        }
    }
}

/// Feed `outputs` to the assembler like the handler does; check the answer's shape when
/// `coherent`.
fn assemble(p: Prepared, outputs: Vec<(usize, EngineOutput)>, coherent: bool) {
    let stream = p.stream;
    let mut asm = p.assembler;
    let mut events: Vec<Bytes> = Vec::new();
    for (sub, out) in outputs {
        let r = asm.on_output(sub, out, &mut events);
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

fn interleave(per_sub: Vec<Vec<EngineOutput>>) -> Vec<(usize, EngineOutput)> {
    let mut iters: Vec<_> = per_sub.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for (i, it) in iters.iter_mut().enumerate() {
            if let Some(o) = it.next() {
                out.push((i, o));
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
    if let Err(e) = genfront_sglang::parse_abort(&body) {
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
            if std::env::var_os("GENFRONT_FUZZ_TRACE").is_some() {
                eprintln!("refused: {}", rejection.error);
            }
            check_refusal(&fmt, &rejection.error, rejection.stream);
        }
        Ok(p) => {
            stats.accepted += 1;
            check_limits(&p, &info, body.len());
            if p.subs.len() > 64 {
                return;
            }
            let vocab = info.vocab_size.unwrap_or(50_000).max(1);
            let coherent = g.chance(0.7);
            let mut per_sub: Vec<Vec<EngineOutput>> = p
                .subs
                .iter()
                .map(|s| coherent_outputs(&mut g, &s.request, vocab))
                .collect();
            if !coherent {
                for outs in &mut per_sub {
                    corrupt(&mut g, outs);
                }
            }
            let coherent = coherent
                && per_sub
                    .iter()
                    .flatten()
                    .all(|o| !matches!(o.finish_reason, Some(FinishReason::Cancelled { .. })));
            assemble(p, interleave(per_sub), coherent);
            stats.assembled += 1;
        }
    }
}

#[test]
fn fuzz_sglang_request_path() {
    let mut seeds: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    let fixtures = fixture_seeds();
    eprintln!("sglang request path: {} fixture seeds", fixtures.len());
    seeds.extend(fixtures);
    let stats = run_cases("sglang request path", |seed, stats| {
        request_case(seed, &seeds, stats)
    });
    // The generator reaches both sides of the validator (else it tests nothing).
    if cases() >= 1000 {
        assert!(stats.accepted * 20 > cases(), "too few accepted bodies");
        assert!(stats.refused * 20 > cases(), "too few refused bodies");
    }
}

// === the engine-client frame decoder ===

fn triple(g: &mut G) -> J {
    match g.below(8) {
        0 => lit("null"),
        1 => J::Arr(vec![lit("null"), token_id(g), lit("null")]),
        2 => value(g, 2),
        _ => J::Arr(vec![
            lit(float_text(g).replace("1e309", "-1e2")),
            token_id(g),
            if g.chance(0.8) {
                lit("null")
            } else {
                plain_string(g)
            },
        ]),
    }
}

fn triples(g: &mut G, n: usize) -> J {
    J::Arr((0..n).map(|_| triple(g)).collect())
}

fn finish_reason(g: &mut G, produced: usize) -> J {
    match g.below(9) {
        0..=2 => lit("null"),
        3 => J::Obj(vec![
            ("type".into(), jstr("length")),
            ("length".into(), lit(produced.to_string())),
        ]),
        4 => J::Obj(vec![
            ("type".into(), jstr("stop")),
            (
                "matched".into(),
                match g.below(4) {
                    0 => token_id(g),
                    1 => lit(string_text(g)),
                    2 => ids(g, 3),
                    _ => lit("null"),
                },
            ),
        ]),
        5 => J::Obj(vec![
            ("type".into(), jstr("abort")),
            ("message".into(), lit(string_text(g))),
            (
                "status_code".into(),
                lit(*g.pick(&["null", "400", "404", "429", "500", "503", "600", "-1"])),
            ),
            (
                "err_type".into(),
                lit(*g.pick(&["null", "\"BadRequestError\""])),
            ),
        ]),
        6 => J::Obj(vec![("type".into(), {
            let t: &str =
                g.pick::<&str>(&["eos", "cancelled", "error", "content_filter", "weird", ""]);
            jstr(t)
        })]),
        _ => value(g, 1),
    }
}

fn b64_experts(g: &mut G, rows: usize) -> J {
    use base64::Engine as _;
    let n = if g.chance(0.8) { rows * 4 } else { g.below(13) };
    let bytes: Vec<u8> = (0..n)
        .flat_map(|i| (i as i32 % 64).to_le_bytes())
        .chain(if g.chance(0.1) { vec![1u8] } else { vec![] })
        .collect();
    if g.chance(0.05) {
        jstr("not base64!")
    } else {
        jstr(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }
}

/// One frame of a stream that has delivered `so_far` ids (cumulative mode carries them all).
fn frame(g: &mut G, cfg: &DecodeConfig, all_ids: &mut Vec<u32>, last: bool) -> J {
    if g.chance(0.03) {
        return J::Obj(vec![(
            "error".into(),
            J::Obj(vec![
                ("message".into(), lit(string_text(g))),
                (
                    "code".into(),
                    lit(*g.pick(&["400", "429", "503", "500", "null", "\"x\""])),
                ),
            ]),
        )]);
    }
    let before = all_ids.len();
    for _ in 0..g.below(3) {
        all_ids.push(g.below(1000) as u32);
    }
    let new = all_ids.len() - before;
    let shown: Vec<u32> = if cfg.incremental {
        all_ids[before..].to_vec()
    } else {
        all_ids.clone()
    };
    let list_len = if cfg.incremental || g.chance(0.5) {
        new
    } else {
        all_ids.len()
    };
    let mut meta = vec![
        ("id".to_owned(), jstr("rid")),
        (
            "finish_reason".to_owned(),
            if last {
                finish_reason(g, all_ids.len())
            } else {
                lit("null")
            },
        ),
        ("prompt_tokens".to_owned(), lit(cfg.prompt_len.to_string())),
        (
            "completion_tokens".to_owned(),
            lit(all_ids.len().to_string()),
        ),
        ("cached_tokens".to_owned(), small_int(g, 0, 3)),
        ("weight_version".to_owned(), jstr("default")),
    ];
    if cfg.logprobs.is_some() || g.chance(0.1) {
        meta.push(("output_token_logprobs".into(), triples(g, list_len)));
        let k = cfg.logprobs.unwrap_or(1) as usize;
        meta.push((
            "output_top_logprobs".into(),
            J::Arr(
                (0..list_len)
                    .map(|_| {
                        if g.chance(0.1) {
                            lit("null")
                        } else {
                            triples(g, k.min(4))
                        }
                    })
                    .collect(),
            ),
        ));
    }
    if cfg.selected || g.chance(0.05) {
        meta.push((
            "output_token_ids_logprobs".into(),
            J::Arr((0..list_len).map(|_| triples(g, 2)).collect()),
        ));
    }
    if (cfg.prompt_logprobs.is_some() && before == 0) || g.chance(0.05) {
        let n = g.below(cfg.prompt_len.min(16) as usize + 2);
        meta.push(("input_token_logprobs".into(), triples(g, n)));
        meta.push((
            "input_top_logprobs".into(),
            J::Arr((0..n).map(|_| triples(g, 2)).collect()),
        ));
    }
    if cfg.sampling_mask || g.chance(0.05) {
        meta.push((
            "output_token_sampling_mask".into(),
            J::Arr((0..list_len).map(|_| ids(g, 3)).collect()),
        ));
    }
    if cfg.routed_experts || g.chance(0.05) {
        let rows = if before == 0 {
            cfg.prompt_len.min(64) as usize + new
        } else {
            new
        };
        meta.push(("routed_experts".into(), b64_experts(g, rows)));
    }
    let mut frame = vec![
        (
            "output_ids".to_owned(),
            J::Arr(shown.iter().map(|i| lit(i.to_string())).collect()),
        ),
        ("meta_info".to_owned(), J::Obj(meta)),
    ];
    if g.chance(0.3) {
        frame.insert(0, ("text".to_owned(), plain_string(g)));
    }
    let mut doc = J::Obj(frame);
    if g.chance(0.08) {
        mutate(g, &mut doc);
    }
    doc
}

/// The SSE wire of one SGLang stream: frames, comments, odd line ends, `[DONE]`, garbage.
fn wire(g: &mut G, cfg: &DecodeConfig, fixtures: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    let frames = 1 + g.below(5);
    let mut all_ids = Vec::new();
    for f in 0..frames {
        let last = f + 1 == frames;
        let data = if g.chance(0.05) && !fixtures.is_empty() {
            g.pick(fixtures).clone().into_bytes()
        } else if g.chance(0.03) {
            g.bytes(40)
        } else {
            frame(g, cfg, &mut all_ids, last).text().into_bytes()
        };
        match g.below(20) {
            0 => out.extend_from_slice(b": keep-alive\n\n"),
            1 => out.extend_from_slice(b"event: message\nid: 1\nretry: 5\n"),
            _ => {}
        }
        out.extend_from_slice(if g.chance(0.9) { b"data: " } else { b"data:" });
        out.extend_from_slice(&data);
        out.extend_from_slice(match g.below(40) {
            0..=3 => b"\r\n\r\n",
            4..=7 => b"\r\r",
            8 => b"\n",
            _ => b"\n\n",
        });
    }
    if g.chance(0.8) {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
    if g.chance(0.05) {
        out.extend(g.bytes(30));
    }
    out
}

fn decode_config(g: &mut G) -> DecodeConfig {
    DecodeConfig {
        incremental: g.chance(0.5),
        index: if g.chance(0.9) { 0 } else { g.below(4) as u32 },
        prompt_len: *g.pick(&[0, 1, 3, 8, u32::MAX]),
        eos_token_ids: if g.chance(0.5) { vec![2] } else { vec![] },
        stop_token_ids: if g.chance(0.3) { vec![5, 7] } else { vec![] },
        ignore_eos: g.chance(0.2),
        logprobs: g.chance(0.4).then(|| g.below(4) as u32),
        prompt_logprobs: g.chance(0.3).then(|| g.below(3) as u32),
        selected: g.chance(0.2),
        sampling_mask: g.chance(0.2),
        routed_experts: g.chance(0.3),
        experts_shape: g.chance(0.5).then_some((2, 2)),
    }
}

/// Decode `wire` in random network chunks like the client does; the outputs up to the first
/// error or the terminal frame.
fn decode_wire(g: &mut G, cfg: DecodeConfig, wire: &[u8], stats: &mut Stats) -> Vec<EngineOutput> {
    let mut splitter = if g.chance(0.1) {
        SseSplitter::with_limit(*g.pick(&[16, 256, 4096]))
    } else {
        SseSplitter::new()
    };
    let mut decoder = FrameDecoder::new(cfg.clone());
    let mut outputs = Vec::new();
    let mut rest = wire;
    let mut ended = false;
    while !ended {
        let events: Vec<Vec<u8>> = if rest.is_empty() {
            ended = true;
            let mut tail = Vec::new();
            while let Ok(Some(e)) = splitter.finish() {
                tail.push(e);
            }
            tail
        } else {
            let n = 1 + g.below(rest.len().min(64));
            splitter.push(&rest[..n]);
            rest = &rest[n..];
            let mut got = Vec::new();
            loop {
                match splitter.next_event() {
                    Ok(Some(e)) => got.push(e),
                    Ok(None) => break,
                    Err(_) => {
                        stats.decode_errors += 1;
                        return outputs;
                    }
                }
            }
            got
        };
        for event in events {
            if event == b"[DONE]" {
                return outputs;
            }
            match decoder.decode(&event) {
                Ok(o) => {
                    stats.decoded += 1;
                    assert_eq!(o.index, cfg.index, "decoded choice index");
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
                    assert!(o.usage.is_some(), "a delta without usage");
                    let done = o.finish_reason.is_some();
                    outputs.push(o);
                    if done {
                        assert!(decoder.finished());
                        return outputs;
                    }
                }
                Err(e) => {
                    stats.decode_errors += 1;
                    if std::env::var_os("GENFRONT_FUZZ_TRACE").is_some() {
                        eprintln!("decode error: {e}");
                    }
                    return outputs;
                }
            }
        }
    }
    outputs
}

/// Response records of the fixtures (unary bodies and stream chunks share the frame shape).
fn fixture_frames() -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(fixtures_dir().join("sglang/examples.jsonl")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == "response" || r["kind"] == "stream_chunk")
        .map(|r| r["json"].to_string())
        .collect()
}

fn decode_case(seed: u64, fixtures: &[String], stats: &mut Stats) {
    let mut g = G::new(seed);
    // Half the cases decode for a request the format accepted and assemble the result.
    let prepared = if g.chance(0.5) {
        let fmt = format(&mut g);
        let mut doc = J::from_value(
            &serde_json::from_str(SEEDS[g.below(SEEDS.len())]).unwrap_or(Value::Null),
        );
        if g.chance(0.3) {
            mutate(&mut g, &mut doc);
        }
        let info = EngineInfo {
            tokenizer: Some(true),
            ..EngineInfo::default()
        };
        fmt.prepare(ParseInput {
            headers: &json_headers(),
            body: doc.text().as_bytes(),
            engine: &info,
        })
        .ok()
        .filter(|p| p.subs.len() <= 16)
    } else {
        None
    };
    let Some(p) = prepared else {
        let cfg = decode_config(&mut g);
        let wire = wire(&mut g, &cfg, fixtures);
        stats.last_input = format!("{cfg:?}\n{}", String::from_utf8_lossy(&wire));
        decode_wire(&mut g, cfg, &wire, stats);
        return;
    };
    let incremental = g.chance(0.5);
    let mut per_sub = Vec::new();
    stats.last_input.clear();
    for sub in &p.subs {
        let cfg = DecodeConfig::for_request(
            &sub.request,
            0,
            incremental,
            &[2],
            g.chance(0.5).then_some((2, 2)),
        );
        let wire = wire(&mut g, &cfg, fixtures);
        stats.last_input.push_str(&String::from_utf8_lossy(&wire));
        per_sub.push(decode_wire(&mut g, cfg, &wire, stats));
    }
    assemble(p, interleave(per_sub), false);
    stats.assembled += 1;
}

#[test]
fn fuzz_sglang_engine_frames() {
    let fixtures = fixture_frames();
    eprintln!("sglang engine frames: {} fixture frames", fixtures.len());
    let stats = run_cases("sglang engine frames", |seed, stats| {
        decode_case(seed, &fixtures, stats)
    });
    if cases() >= 1000 {
        assert!(stats.decoded > cases(), "too few frames decoded");
        assert!(stats.decode_errors * 20 > cases(), "too few broken frames");
    }
}
