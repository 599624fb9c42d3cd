//! genfront's **SGLang backend**: SGLang's native token-in/token-out `POST /generate` API
//! (`spec/sglang-native.md`), served through the shared handler, and a client for real SGLang
//! servers.
//!
//! **Format** ([`SglangFormat`]): parsing and validating the body exactly as SGLang's
//! `GenerateReqInput` / `TokenizerManager` / `SamplingParams` do (same order, same messages, same
//! status codes), batch and parallel-sampling (`n > 1`) expansion, the projection of each item to
//! an [`EngineRequest`](genfront_protocol::EngineRequest) with its lossless native body (the
//! client's object with `input_ids: null` in place of the ids, which the request holds once as
//! typed `token_ids` and the engine client writes back into that key: see below), the
//! assembly of engine deltas into SGLang's unary body or cumulative/incremental SSE chunks, SGLang's
//! error envelopes, and `POST /abort_request`.
//!
//! **Engine client** ([`SglangEngine`], in [`client`]): the worker contract
//! ([`genfront_protocol::Engine`]) against a real SGLang HTTP server — native bodies forwarded with
//! surgical edits (private dispatch `rid`, `stream: true`), any other format rebuilt from the typed
//! request, SSE frames decoded into deltas by the one frame parser ([`client::FrameDecoder`]), typed
//! error mapping, and `POST /abort_request` on cancel or drop.
//!
//! **Relay** (SGLang client on an SGLang engine): a single-item, `n = 1` request, unary or on a
//! cumulative stream route, asks for it ([`genfront_protocol::OutputOptions::relay`]); the
//! client then only scans SGLang's answer or frames and hands over their bytes, and the
//! assembler sends them with `meta_info.id` set to the client's rid — every other byte is the
//! engine's (`assemble.rs`, `client/decode/relay.rs`, `docs/request-lifecycle.md`).
//!
//! genfront has no tokenizer of its own. What text an answer carries is the engine's: with an
//! engine that loads a tokenizer ([`EngineInfo::tokenizer`]), `text` prompts, `stop` /
//! `stop_regex` strings and `return_text_in_logprobs` are forwarded and the engine's `text`
//! (and matched stop strings) passed through unchanged; with one that does not
//! (`--skip-tokenizer-init`, the mock), answers have that shape (no `text` key, `null` text
//! slots in logprob triples) and text prompts and stop strings are refused with SGLang's
//! messages; when it is not known, the engine decides.
//!
//! `return_text_in_logprobs` (SGLang `tokenizer_manager.py` `detokenize_logprob_tokens` /
//! `detokenize_top_logprobs_tokens`): the third slot of each `[logprob, id, text]` triple of
//! every logprob list (`input_`/`output_token_logprobs`, `*_top_logprobs`,
//! `*_token_ids_logprobs`) is `tokenizer.batch_decode` of that id **on its own** — not a slice
//! of the output `text`, so a byte-fallback piece of a multi-byte character decodes to
//! `"\u{fffd}"` — and it is filled only when the flag is set **and** the engine has a
//! tokenizer (`return_text_in_logprobs and not skip_tokenizer_init`), `null` otherwise. The
//! client decoder reads it into [`genfront_protocol::TokenLogprob::text`] /
//! [`genfront_protocol::Candidate::text`] and the assembler writes it back, unary and in both
//! SSE modes (the padded first prompt position's `[null, id, text]` through
//! [`genfront_protocol::PromptLogprobs::first_text`]); genfront never fills a slot itself.
//!
//! # Body memory
//!
//! A body is parsed on a fast path first (`request/fast.rs`): every top-level key but
//! `input_ids` as a JSON `Value`, `input_ids` (flat or a batch of rows) straight into `Vec<u32>`,
//! moved (not copied) into each item's `token_ids`; the native body keeps `input_ids: null` in
//! the key's position. A body the fast path does not take as it is (not an object, invalid
//! JSON, an id list with a negative, float, string or `> u32::MAX` entry) is parsed as one
//! `Value` tree exactly as before, so every message is unchanged. Measured with a 64 MiB body of
//! 10.7M ids (`genfront serve --mock 1`, peak RSS `VmHWM`): 134 MB on the fast path, 930 MB for
//! the `Value` tree alone on the full path. Bound: the body bytes plus 4 bytes an id; the
//! densest id text is 2 bytes an id (`0,`), so at most 3× the body.
//!
//! # Serving one format on the other engine
//!
//! An SGLang engine gets an SGLang client's native body (every key). Any other engine gets what
//! the typed [`EngineRequest`](genfront_protocol::EngineRequest) carries, so each schema key
//! ([`REQUEST_KEYS`], [`SAMPLING_KEYS`]) is classified ([`Carry`]) and nothing is dropped
//! silently:
//!
//! | carry | keys |
//! |---|---|
//! | typed | `input_ids`, `sampling_params` (`max_new_tokens`, `min_new_tokens`, `stop`, `stop_token_ids`, `ignore_eos`, `temperature`, `top_p`, `top_k`, `min_p`, the three penalties, `sampling_seed`, `n` (one engine request per sample), `logit_bias`, `json_schema` / `regex` / `ebnf` / `structural_tag` — the one SGLang's scheduler picks), `return_logprob`, `logprob_start_len`, `top_logprobs_num`, `token_ids_logprob`, `return_sampling_mask`, `return_routed_experts`, `routed_experts_start_len`, `session_id`, `lora_path`, `routed_dp_rank` / `data_parallel_rank`, `priority`, `extra_key` / `cache_salt` |
//! | owned / rendered | `rid` (the private id replaces it), `stream`, `return_flat_raw_top_logprobs[_b64]`, `return_prompt_token_ids` |
//! | refused by this format (any engine) | `input_embeds`, `return_hidden_states`, `custom_logit_processor`, `max_thinking_tokens` |
//! | native only: refused by another engine's client, with a 400 naming them | a text-only prompt (`text`), multimodal inputs (`image_data`, `video_data`, `audio_data`, …), `return_text_in_logprobs`, `log_metrics: false`, `return_indexer_topk`, `session_params`, `lora_id`, `bootstrap_host` / `_port` / `_room` (see below), `bootstrap_pair_key`, `decode_tp_size`, `disagg_prefill_dp_rank`, `require_reasoning`, `background`, `conversation_id`, `kv_router_hint`, `routing_key`, `no_logs`, `custom_labels`, `return_bytes`, `return_entropy`, trace and internal fields, an `extra_key` next to a `cache_salt`; in `sampling_params`: `beam_width > 1`, `stop_regex`, `skip_special_tokens: false`, `spaces_between_special_tokens: false`, `no_stop_trim`, `custom_params`, `stream_interval`, a `logit_bias` entry that is not an id and a number |
//!
//! **P/D bootstrap fields from a client** (`bootstrap_host`, `bootstrap_port`, `bootstrap_room`,
//! and the companions `bootstrap_pair_key`, `decode_tp_size`): SGLang's own server accepts them
//! from anyone, so genfront does too, with SGLang's checks (pydantic types, the contract gate,
//! `_normalize_bootstrap_params`). On an aggregated route they are forwarded as given (an
//! aggregated SGLang engine ignores them). On a P/D route genfront's router picks the prefill
//! and a fresh room and puts them in [`genfront_protocol::EngineRequest::pd`]; the engine client
//! then drops the client's five keys from both legs' bodies and writes the router's host, port
//! and room (`client/body.rs`), so a client value can never pair a leg with another request
//! (as smg injects its own for the chosen prefill). `tests/client/engine.rs`
//! (`client_bootstrap_fields_never_reach_a_pd_leg`) pins it.
//!
//! **Beam search** (`sampling_params.beam_width > 1`) is real in SGLang 0.5.23
//! (`srt/beam_search/`): the request is not fanned out (`n` is the number of returned beams,
//! `io_struct.py:525-529`), the scheduler's `BeamSearchCoordinator.validate_and_init`
//! (`beam_search/coordinator.py:119-210`) refuses what it cannot serve (logprobs, grammars,
//! stop strings, `n > beam_width`, P/D, …), and the answer is one object: the best beam at the
//! top level and every beam in `meta_info.beam_results` (`beam_search/output.py:130-143`;
//! streams send only the finished answer). genfront forwards it to an SGLang engine in the
//! native body; single unary or cumulative requests are relayed, so `beam_results` reaches the
//! client as the engine wrote it (a batch or incremental stream is rebuilt from typed deltas and
//! carries the best beam only). The in-process mock ignores `beam_width` and samples one
//! ordinary sequence; a vLLM engine's client refuses it by name.
//!
//! Unknown top-level keys are not listed (SGLang itself ignores them). The meanings checked
//! against both engines' source: SGLang `logit_bias` `{"<id>": bias}` is vLLM's `{id: bias}`
//! (vLLM clamps biases to ±100); both compile grammars with xgrammar by default, so a JSON schema,
//! regex, EBNF grammar and structural tag mean the same on either. A vLLM engine reports routed
//! experts and sampling masks per server flag: asked of one without the flag, the vLLM client
//! refuses them by name. The in-process mocker receives the whole native body; constraints have
//! no effect on its toy model.
//!
//! Start reading at [`SglangFormat`] (request rules in `request.rs`, `item.rs` and `sampling.rs`,
//! response rules in `assemble.rs`) or at [`SglangEngine`] (`client/`).
//!
//! # Validation parity (SGLang 0.5.23)
//!
//! Request validation follows SGLang 0.5.23's own code, compared body by body with the
//! validation-oracle tool (`../shared/tools/validation-oracle`), in SGLang's order:
//!
//! 0. **`Content-Type`** (`request::media`, FastAPI 0.136's `strict_content_type`,
//!    `fastapi/routing.py:405-426`): a non-empty body is read as JSON only with an
//!    `application/json` or `application/*+json` type (parameters ignored, read as
//!    `email.message.Message` reads it); `text/plain`, a form type (`curl -d` without
//!    `-H 'Content-Type: application/json'`) **or no type at all** hands pydantic the raw
//!    bytes: 400 `dataclass_type` with `input` = Python's `repr(bytes)`, also for a body that
//!    is valid JSON and for `stream: true`. The frontend leaves this to the format on generate
//!    routes (abort routes keep their 415).
//! 1. **Parse**: `orjson` (`ORJSONRequest`, `entrypoints/http_server.py:472-480`; a syntax error
//!    is orjson 3.13's own message and character position, `request::json_error`, found only
//!    after serde_json failed) reads integers
//!    outside `[-2^63, 2^64)` as floats — exactly as serde_json does, so big integers are judged
//!    as SGLang judges them (no deviation; the note that said otherwise was wrong).
//! 2. **pydantic bind** (`request::pydantic`): every `GenerateReqInput` field
//!    (`managers/io_struct.py:177-420`) in pydantic's order (keyword-only `rid`, `session_id`,
//!    `http_worker_ipc` last), lax python mode, union choices tagged with their labels, every
//!    error collected; answered 400 `{"object":"error","message":…,"type":"Bad Request"}` with
//!    FastAPI's `str(exc)` plus the error list (`http_server.py:635-690`), also for `stream: true`.
//!    `input_ids` has SGLang's `PlainValidator` texts (`utils/field_validators.py:40-81`). The
//!    endpoint line names `sglang/srt/entrypoints/http_server.py`, line 928, relative to
//!    site-packages (SGLang prints its install path).
//! 3. **JSON contract gate** (`request::contract`, `http_server.py:933-940`): strict bools and
//!    integers, unknown `sampling_params` keys refused, checked top-level fields (`routing_key`,
//!    `custom_labels`, `modalities`, `max_thinking_tokens`, …): the first violation, 400
//!    `{"error": "<text>"}`, for `stream: true` too. Values pydantic's lax bind admits (`"yes"`,
//!    `1.0` for an int) are refused here with serde's text. `spec/sglang-native.md` §4.4
//!    predates the gate.
//! 4. **`normalize_batch_and_arguments` / `generate_request`** (`ValueError` → `{"error":
//!    {"message"}}`, or one SSE error event for `stream: true`): `_validate_inputs`
//!    (`io_struct.py:440-478`: flat output top logprobs refuse `stream`, `_b64` needs either flat
//!    flag), batch shape, parallel sampling (`n: null` → genfront's 400, see below; a beam
//!    request is not fanned out, `io_struct.py:525-529`), per-item lists (a single request's
//!    list is read by Python truthiness, `io_struct.py:559-587`: `return_logprob: []` is off,
//!    `[true]` on; a start or count list is ignored without logprobs, `scheduler.py:3256-3258`),
//!    `kv_hints` (`io_struct.py:583-587`, `888-905`: a list for one request is refused, an
//!    envelope is decoded as msgspec does, `managers/kv_hints.py:31-55`), the bootstrap lists;
//!    then `_set_default_priority`'s signed 64-bit range (`tokenizer_manager.py:4013-4026`),
//!    `max_thinking_tokens`, `routed_dp_rank` (or the deprecated `data_parallel_rank`, read with
//!    pydantic's lax `int`: `true` → 1, `" 2 "` → 2) against the DP ranks
//!    (`tokenizer_manager.py:915-925`: [`genfront_protocol::EngineFeatures::dp_size`], the mock's
//!    1, else a native worker's `dp_size`; unknown → the engine's), and `lora_path` on a server
//!    without LoRA (`tokenizer_manager.py:3723-3742`, `EngineFeatures::lora == Some(false)`: any
//!    truthy value, naming the first non-empty adapter or `None`).
//! 5. **Per item** (`item.rs`): input length and vocabulary, `token_ids_logprob`, hidden states,
//!    custom logit processor, `sampling_logprobs_mode` needs `return_sampling_mask`
//!    (`tokenizer_manager.py:1432-1436`); the top-level `watermark` moved into the sampling
//!    kwargs (both set is refused, `tokenizer_manager.py:1553-1559`); `SamplingParams.__init__`'s
//!    `normalize_watermark_request` (`sampling/watermarking/core.py:163-196`); `normalize`'s stop
//!    list bounds (32 strings / 32 patterns / 256 bytes) and `raise_if_tokenizer_required`
//!    (`sampling_params.py:331-470`: stop strings, stop regexes **and `min_new_tokens > 0`**
//!    need a tokenizer); `verify` (`sampling_params.py:252-329`: `beam_width >= 1`,
//!    `sampling_seed` in the `i64` range, reasoning end token ids, one of the four grammars —
//!    an empty one is unset); the watermark against a server without `--enable-watermark`
//!    (`tokenizer_manager.py:213-225`).
//!    `choice` in `sampling_params` and unknown `session_params` keys (`TypeError`s of
//!    `SamplingParams(**kw)` / `SessionParams(**kw)`, `tokenizer_manager.py:1565`, `1572-1574`:
//!    SGLang answers 500) get genfront's 400.
//! 6. The scheduler's request checks (`scheduler.py:3160-3317`): the sampling mask's finite
//!    `top_k` (`1 < top_k <= --sampling-mask-max-tokens`, default 4096, or greedy), the input
//!    length against `max_req_input_len` (`managers/utils.py:259-289`: a native worker's
//!    reported figure, else `context_len - 6`, `tp_worker.py:568-572`; the mock's 32,762),
//!    logprob start, routed experts start; and the grammar manager's refusal of `json_schema`,
//!    `regex`, `ebnf` or `structural_tag` on a `--skip-tokenizer-init` server, which builds no
//!    grammar backend (`constrained/grammar_manager.py:36-45`, `148-159`: an abort with status
//!    400, "Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported
//!    when the server is launched with --grammar-backend none"), applied when
//!    [`EngineInfo::tokenizer`] is `Some(false)`. The validation-oracle tool stops before the
//!    scheduler and counts these as "engine accepts" (`scripts/validation-parity.py`: an oracle
//!    gap).
//!
//! **Deliberate deviations** (each counted as a disagreement by the tool), with the engine
//! behaviour they avoid:
//! - `sampling_params.n` above 4096 (or the engine's `max_running_requests` when larger) is
//!   refused at parse time, and the frontend's `--max-engine-requests` (default 1024) bounds
//!   batch × `n` after it; SGLang fans out any `n` into that many requests, each holding its
//!   own copy of the prompt (a 4-byte body field amplified without bound). The tool validates a
//!   huge `n` as 64 (its `_cap_n`), and reads `n >= 2^64` as a Python int where SGLang's orjson
//!   reads a float that the contract gate refuses: those oracle verdicts are artefacts.
//! - Prompt ids outside the vocabulary (negative, or `>= vocab_size`) and an empty row of a
//!   batch are refused: SGLang 0.5.23 admits them (only `token_ids_logprob` is bounded,
//!   `tokenizer_manager.py:1520-1531`) and the model's embedding lookup fails on them.
//! - A single request's `logprob_start_len` / `top_logprobs_num` list with logprobs on, and a
//!   non-empty `lora_path` list on a LoRA server, are refused ("`<key>` should be a scalar for a
//!   single request."): SGLang's scheduler compares the list with integers (`TypeError`, the
//!   scheduler process fails) or resolves it as a batch.
//! - A batch's per-item list shorter than the batch (`lora_path`, the bootstrap keys) gets a
//!   400 naming it: SGLang indexes past its end (`IndexError`, a 500).
//! - A pydantic error's `input` is printed up to 2048 bytes (then `...`); SGLang prints it whole,
//!   twice.
//! - Bodies SGLang's own code crashes on (500 `Internal Server Error`, or a stream that ends
//!   without a word) get genfront's 400 (status 400, not 500; for `stream: true` the SSE error
//!   event): a `stop_regex` `sre_parse` cannot read, `rid` a list for a single prompt, `text` a
//!   list next to one `input_ids` prompt (an empty `text: []` there, which SGLang answers as an
//!   empty batch, is refused too), `sampling_params.choice` (any value),
//!   `sampling_params.n: null` (not a beam request), unknown `session_params` keys.
//! - A body nested deeper than 127 levels is refused with serde_json's `recursion limit
//!   exceeded` (a 400; its recursion limit bounds the parser's stack); orjson takes up to 1024
//!   levels (past that genfront gives orjson's own `depth limit exceeded`).
//! - `session_params.id` naming no open session: the engine answers ("Invalid request: session
//!   id … does not exist"); genfront keeps no sessions and forwards it (the mock ignores it).
//! - A body without a JSON `Content-Type` (step 0): its `dataclass_type` `input` is cut at
//!   2048 bytes like every other; SGLang prints `repr(body)` whole, twice — up to 8× the body
//!   (`\xNN` per byte), half a GiB for a 64 MiB `--body-limit` body. A `Content-Encoding` other
//!   than `identity` stays the frontend's 415 (SGLang fails to read the compressed bytes as
//!   JSON, a 400; genfront names the cause).
//!
//! **Fuzzing**: `tests/fuzz.rs` drives this format's whole request path (parse, validate,
//! project, the native error answer, the assembler) and the client's frame decoding (SSE bytes →
//! [`client::SseSplitter`] → [`client::FrameDecoder`]) with seeded, structure-aware random
//! inputs; a panic, a refusal that is not a client 4xx, an accepted body whose engine requests
//! break the model's limits, or a decoded frame that breaks the engine contract fails it. The
//! 10⁶-case run (README, "Fuzzing"):
//! `GENFRONT_FUZZ_CASES=1000000 cargo test --profile fuzz -p genfront-sglang --test fuzz -- --nocapture --test-threads=1`.

mod abort;
mod assemble;
pub mod client;
mod control;
mod errors;
mod flat;
mod framing;
mod item;
mod json;
mod pyfmt;
mod render;
mod request;
mod sampling;

use std::sync::Arc;

use bytes::Bytes;
use genfront_format::{
    AbortRoute, AuxKind, AuxRoute, CatalogEntry, FleetView, FormatSettings, Framing, GenerateError,
    GenerateFormat, NativeResponse, ParseInput, Prepared, Rejection, SettingKind, SettingSpec,
    SubRequest,
};
use genfront_protocol::EngineInfo;
use http::{Method, StatusCode};

pub use abort::parse_abort;
pub use client::{SglangEngine, SglangEngineOptions};
pub use control::CONTROL_ROUTES;
pub use framing::FRAMING;
pub use item::{EMBEDS_UNSUPPORTED, TEXT_UNSUPPORTED};
pub use request::REQUEST_KEYS;
pub use sampling::SAMPLING_KEYS;

/// How one key of SGLang's `/generate` schema reaches an engine that is not SGLang (a vLLM
/// server behind the vLLM client). An SGLang engine always gets the client's native body, every
/// key included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    /// Carried in the typed [`EngineRequest`](genfront_protocol::EngineRequest) (a field, the
    /// constraints, the routing hints), so every engine kind receives it in its own spelling.
    Typed,
    /// Owned by genfront by design: ids it mints (`rid`), the streaming mode, the batch shape.
    Owned,
    /// Rendered by this format from typed engine output (the answer's shape), never an engine's
    /// concern.
    Rendered,
    /// Refused by this format with SGLang's native 400 whatever the engine (e.g. a server flag
    /// genfront's engines do not have, or a field the router owns).
    Refused,
    /// No typed counterpart: when set to other than its default the projection records it in
    /// [`EngineRequest::native_only`](genfront_protocol::EngineRequest::native_only), and an
    /// engine client of another kind refuses the request with a 400 naming it.
    NativeOnly(Unset),
}

/// What "not set" means for a [`Carry::NativeOnly`] key: `null` always; and the key's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unset {
    /// `false`, `""`, `[]`, `{}` (the key defaults to `None` / `False`).
    Empty,
    /// `true` (the key defaults to `True`).
    True,
    /// A number `<= 1` (`beam_width`: `beam_width or 1`, 1 = no beam search).
    One,
}

impl Unset {
    /// Whether `value` leaves the key at its default.
    pub fn is_unset(self, value: &serde_json::Value) -> bool {
        use serde_json::Value;
        match (self, value) {
            (_, Value::Null) => true,
            (Unset::True, Value::Bool(b)) => *b,
            (Unset::True, _) => false,
            (Unset::One, Value::Number(n)) => n.as_f64().is_some_and(|x| x <= 1.0),
            (Unset::One, _) => false,
            (Unset::Empty, Value::Bool(b)) => !*b,
            (Unset::Empty, Value::String(s)) => s.is_empty(),
            (Unset::Empty, Value::Array(a)) => a.is_empty(),
            (Unset::Empty, Value::Object(o)) => o.is_empty(),
            (Unset::Empty, Value::Number(_)) => false,
        }
    }
}

/// One key of the schema and how it is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaKey {
    /// The key as the client spells it.
    pub key: &'static str,
    /// How it reaches a non-SGLang engine.
    pub carry: Carry,
}

const fn key(key: &'static str, carry: Carry) -> SchemaKey {
    SchemaKey { key, carry }
}

use crate::assemble::{Mode, SglangAssembler};

/// The format's catalog name (also [`genfront_protocol::NativeBody::format`]).
pub const FORMAT_NAME: &str = "sglang";

/// SGLang's native `/generate` path.
pub const NATIVE_PATH: &str = "/generate";

/// SGLang's abort path.
pub const ABORT_PATH: &str = "/abort_request";

/// The most parallel samples (`n`) one request may fan out to when the engine did not report
/// its `max_running_requests` (each sample is one engine request).
pub const MAX_FANOUT_UNKNOWN: u32 = 4096;

static METHODS: [Method; 2] = [Method::POST, Method::PUT];

/// `--sglang-incremental-streaming` (env `GENFRONT_SGLANG_INCREMENTAL_STREAMING`, default off):
/// stream in SGLang's `--incremental-streaming-output` mode instead of the default cumulative
/// mode. The one setting this format contributes to the binary ([`CATALOG_ENTRY`]`.settings`).
pub const INCREMENTAL_STREAMING: SettingSpec = SettingSpec {
    flag: "sglang-incremental-streaming",
    env: "GENFRONT_SGLANG_INCREMENTAL_STREAMING",
    help: "Stream SGLang responses in incremental mode (SGLang's `--incremental-streaming-output`) instead of the default cumulative mode.",
    kind: SettingKind::Bool { default: false },
};

/// The settings of this format, read from the binary's [`FormatSettings`]
/// ([`SglangSettings::from_format_settings`]) or built directly (the mock server, tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SglangSettings {
    /// [`INCREMENTAL_STREAMING`]: each SSE chunk carries only the new output items.
    pub incremental_streaming: bool,
}

impl SglangSettings {
    /// This format's values out of the binary's settings (defaults for those not given).
    pub fn from_format_settings(settings: &FormatSettings) -> Self {
        Self {
            incremental_streaming: settings.bool(&INCREMENTAL_STREAMING),
        }
    }
}

/// The catalog entry: name `sglang`, native path `/generate`, `POST` and `PUT` (the newest SGLang
/// server accepts both) on the native path and when selected for `/generate`; its one setting
/// is [`INCREMENTAL_STREAMING`].
pub const CATALOG_ENTRY: CatalogEntry = CatalogEntry {
    name: FORMAT_NAME,
    aliases: &[],
    native_path: NATIVE_PATH,
    native_methods: &METHODS,
    generate_methods: &METHODS,
    settings: &[INCREMENTAL_STREAMING],
    build,
};

fn build(settings: &FormatSettings) -> Arc<dyn GenerateFormat> {
    Arc::new(SglangFormat::new(&SglangSettings::from_format_settings(
        settings,
    )))
}

/// SGLang's auxiliary `GET` routes: model info (`/get_model_info`, deprecated, and `/model_info`),
/// server info (`/get_server_info`, deprecated, and `/server_info`) and the generation health
/// probe (`/health_generate`). Two lists, because the server info states the format's streaming
/// mode: `AUX_ROUTES` for the default cumulative mode, `AUX_ROUTES_INCREMENTAL` for
/// `--incremental-streaming-output`.
static AUX_ROUTES: [AuxRoute; 5] = aux_routes(server_info_cumulative);
static AUX_ROUTES_INCREMENTAL: [AuxRoute; 5] = aux_routes(server_info_incremental);

const fn aux_routes(
    server_info: fn(&EngineInfo, &FleetView<'_>) -> NativeResponse,
) -> [AuxRoute; 5] {
    [
        AuxRoute {
            path: "/model_info",
            kind: AuxKind::ModelInfo(model_info),
        },
        AuxRoute {
            path: "/get_model_info",
            kind: AuxKind::ModelInfo(model_info),
        },
        AuxRoute {
            path: "/server_info",
            kind: AuxKind::ModelInfo(server_info),
        },
        AuxRoute {
            path: "/get_server_info",
            kind: AuxKind::ModelInfo(server_info),
        },
        AuxRoute {
            path: "/health_generate",
            kind: AuxKind::GenerateProbe,
        },
    ]
}

/// The `version` genfront reports in a server info it builds itself: this crate's version with a
/// `+genfront` local label (a valid PEP 440 version, so clients that parse it keep working).
pub const SERVER_INFO_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+genfront");

fn server_info_cumulative(info: &EngineInfo, fleet: &FleetView<'_>) -> NativeResponse {
    json_response(&with_weight_version(server_info(info, false), fleet))
}

fn server_info_incremental(info: &EngineInfo, fleet: &FleetView<'_>) -> NativeResponse {
    json_response(&with_weight_version(server_info(info, true), fleet))
}

/// SGLang reports its weights' version as `weight_version` (`ServerArgs.weight_version`, default
/// `"default"`, changed by weight updates that name one): genfront states the fleet's version
/// when fleet control set one, and otherwise leaves the document as the worker sent it.
fn with_weight_version(mut doc: serde_json::Value, fleet: &FleetView<'_>) -> serde_json::Value {
    if let serde_json::Value::Object(m) = &mut doc
        && let Some(v) = fleet.weight_version
    {
        m.insert("weight_version".to_owned(), serde_json::Value::from(v));
    }
    doc
}

fn json_response(body: &serde_json::Value) -> NativeResponse {
    NativeResponse::json(
        StatusCode::OK,
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

/// SGLang's `GET /server_info` document (`http_server.py`: `dataclasses.asdict(server_args)`, the
/// scheduler info merged in at the top level, `internal_states` — one entry per DP rank — and
/// `version`), as a client of genfront's SGLang route should see it.
///
/// - A worker that reported its own document ([`EngineInfo::server_info`], a native SGLang
///   server) is relayed as it is, except `incremental_streaming_output` / `stream_output`, which
///   state the streaming mode of *this* route (`incremental`), since that is what its client
///   receives.
/// - Otherwise (the in-process mock, a vLLM worker, a sidecar) the document is what an
///   SGLang server with these facts reports (`skip_tokenizer_init` unless it loads a tokenizer), limited to the keys SGLang
///   clients and routers read: `model_path`, `tokenizer_path`, `served_model_name`,
///   `skip_tokenizer_init`, `context_length`, `max_running_requests`, `page_size`, `tp_size`,
///   `dp_size`, `stream_interval`, the streaming mode, `enable_return_routed_experts`, the P/D
///   keys (`disaggregation_mode` `"null"`, `disaggregation_bootstrap_port`), the scheduler info
///   (`status`, `max_total_num_tokens`, `max_req_input_len`), `internal_states` and `version`
///   ([`SERVER_INFO_VERSION`]). Unknown facts are `null`.
pub fn server_info(info: &EngineInfo, incremental: bool) -> serde_json::Value {
    use serde_json::{Value, json};
    if let Some(Value::Object(worker)) = &info.server_info {
        let mut doc = worker.clone();
        doc.insert(
            "incremental_streaming_output".to_owned(),
            Value::Bool(incremental),
        );
        if doc.contains_key("stream_output") {
            // Older SGLang spelling of the same flag.
            doc.insert("stream_output".to_owned(), Value::Bool(incremental));
        }
        return Value::Object(doc);
    }
    let context = info.context_limit();
    let max_total = match (context, info.max_num_seqs) {
        (Some(c), Some(n)) => Some(u64::from(c) * u64::from(n.max(1))),
        _ => None,
    };
    json!({
        "model_path": info.model,
        "tokenizer_path": info.model,
        "served_model_name": info.model,
        "skip_tokenizer_init": info.tokenizer != Some(true),
        "is_embedding": false,
        "context_length": context,
        "max_running_requests": info.max_num_seqs,
        "page_size": 1,
        "tp_size": 1,
        "dp_size": 1,
        "stream_interval": 1,
        "incremental_streaming_output": incremental,
        "enable_return_routed_experts": info.routed_experts,
        "disaggregation_mode": "null",
        "disaggregation_bootstrap_port": 8998,
        "weight_version": "default",
        "status": "ready",
        "max_total_num_tokens": max_total,
        "max_req_input_len": context.map(|c| c.saturating_sub(6)),
        "internal_states": [{
            "model_path": info.model,
            "last_gen_throughput": 0.0,
        }],
        "version": SERVER_INFO_VERSION,
    })
}

/// SGLang's `/model_info` body (`spec/sglang-native.md` §12.2) for the served model. Facts the
/// engine contract does not carry (`model_type`, `architectures`) are `null`.
fn model_info(info: &EngineInfo, fleet: &FleetView<'_>) -> NativeResponse {
    let body = serde_json::json!({
        "model_path": info.model,
        "tokenizer_path": info.model,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": fleet.weight_version.unwrap_or("default"),
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": null,
        "architectures": null,
    });
    NativeResponse::json(
        StatusCode::OK,
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// The SGLang `/generate` format.
///
/// One instance serves every request of its routes. `incremental_streaming` selects SGLang's
/// `--incremental-streaming-output` mode (each SSE chunk carries only the new output items)
/// instead of the default cumulative mode (each chunk carries everything so far).
#[derive(Debug, Clone, Default)]
pub struct SglangFormat {
    incremental_streaming: bool,
    engine_role: Option<genfront_protocol::PdRole>,
}

impl SglangFormat {
    /// A format with these settings.
    pub fn new(settings: &SglangSettings) -> Self {
        Self {
            incremental_streaming: settings.incremental_streaming,
            engine_role: None,
        }
    }

    /// Play an SGLang engine in a P/D role (`--disaggregation-mode prefill|decode`), as genfront's
    /// native mock server does: `bootstrap_host` / `bootstrap_port` / `bootstrap_room` are then
    /// accepted (the router in front sets them) and projected into
    /// [`genfront_protocol::EngineRequest::pd`] with this role. `None` (the default, and always
    /// for `genfront serve`): a client's are validated and forwarded in the native body (on a P/D
    /// route the router's replace them in the engine client).
    #[must_use]
    pub fn with_engine_role(mut self, role: Option<genfront_protocol::PdRole>) -> Self {
        self.engine_role = role;
        self
    }
}

/// This format's P/D merge rules, as declared (data, compiled in).
pub const PD_RULES: &str = include_str!("pd_rules.json");

/// The merge built from [`PD_RULES`] (checked by this crate's tests: a broken file fails them).
static PD_MERGE: std::sync::LazyLock<std::sync::Arc<dyn genfront_protocol::PdMerge>> =
    std::sync::LazyLock::new(|| {
        let rules = genfront_format::pd::MergeRules::parse(PD_RULES).unwrap_or_else(|_| {
            genfront_format::pd::MergeRules {
                format: "sglang".to_owned(),
                extends: None,
                rules: Default::default(),
            }
        });
        std::sync::Arc::new(genfront_format::pd::RuleMerge::new(rules))
    });

impl GenerateFormat for SglangFormat {
    fn name(&self) -> &'static str {
        FORMAT_NAME
    }

    fn framing(&self) -> &'static Framing {
        &FRAMING
    }

    /// Validate like SGLang (pydantic types → 400 flat envelope; `ValueError`s → 400
    /// `{"error":{"message"}}`, or a 200 SSE error event for `stream: true`), then project one
    /// [`SubRequest`] per engine request: batch items × `n`, batch-major, each with `sampling.n = 1`
    /// and its client-visible rid as the abort key (SGLang's abort matches rid prefixes).
    fn prepare(&self, input: ParseInput<'_>) -> Result<Prepared, Rejection> {
        let req = request::parse(&input, self.engine_role.is_some())?;
        let mode = match (req.stream, self.incremental_streaming) {
            (false, _) => Mode::Unary,
            (true, false) => Mode::Cumulative,
            (true, true) => Mode::Incremental,
        };
        let mut subs = Vec::with_capacity(req.items.len());
        let mut configs = Vec::with_capacity(req.items.len());
        let mut bootstraps = req.bootstraps.into_iter();
        // Relay (the engine's own answer, ids edited: `assemble.rs`) for one item and one
        // sample, unary or streamed cumulatively (SGLang's default mode; the engine client
        // relays a stream only from a server that streams cumulatively too).
        let relay =
            matches!(mode, Mode::Unary | Mode::Cumulative) && req.is_single && req.items.len() == 1;
        for item in req.items {
            let (mut request, config) = item.project();
            request.output.relay = relay && config.relayable();
            if let (Some(role), Some(Some(b))) = (self.engine_role, bootstraps.next()) {
                request.pd = Some(genfront_protocol::PdLeg {
                    role,
                    bootstrap: Some(b),
                    kv_transfer_params: None,
                });
            }
            subs.push(SubRequest {
                abort_key: config.rid.clone(),
                request,
            });
            configs.push(config);
        }
        Ok(Prepared {
            client_id: req.client_id,
            stream: req.stream,
            subs,
            assembler: Box::new(SglangAssembler::new(mode, !req.is_single, configs)),
        })
    }

    fn error_response(&self, error: &GenerateError, stream: bool) -> NativeResponse {
        errors::error_response(error, stream)
    }

    fn stream_error_event(&self, error: &GenerateError) -> Bytes {
        errors::stream_event(error)
    }

    fn abort_route(&self) -> Option<AbortRoute> {
        Some(abort_route())
    }

    /// SGLang's `ValueError` for an rid already in flight (`TokenizerManager._init_req_state`,
    /// `tokenizer_manager.py:3836` in 0.5.23): a 400 `{"error":{"message"}}`, or for
    /// `stream: true` a 200 SSE error event then `[DONE]`.
    fn duplicate_id_error(&self, id: &str) -> Option<GenerateError> {
        Some(GenerateError::validation(format!(
            "Duplicate request ID detected: {id}"
        )))
    }

    /// P/D answers merged by the declared rules in `pd_rules.json` (prompt-side fields — input
    /// logprobs, prompt rows of `routed_experts`, `cached_tokens` — from prefill; the rest from
    /// decode; `spec/sglang-native.md` §13.4).
    fn pd_merge(&self) -> Option<std::sync::Arc<dyn genfront_protocol::PdMerge>> {
        Some(PD_MERGE.clone())
    }

    /// SGLang's pause/continue, cache flush and weight-update routes ([`CONTROL_ROUTES`]; the
    /// engine's own refusals are in the `control` module docs).
    fn control_routes(&self) -> &'static [genfront_format::ControlRoute] {
        &CONTROL_ROUTES
    }

    fn aux_routes(&self) -> &'static [AuxRoute] {
        if self.incremental_streaming {
            &AUX_ROUTES_INCREMENTAL
        } else {
            &AUX_ROUTES
        }
    }
}

/// SGLang's `POST /abort_request` route: `{"rid": str, "abort_all": bool}` →
/// [`AbortSelector::Prefix`](genfront_format::AbortSelector::Prefix) /
/// [`All`](genfront_format::AbortSelector::All) /
/// [`Nothing`](genfront_format::AbortSelector::Nothing) (empty rid without `abort_all`).
pub fn abort_route() -> AbortRoute {
    AbortRoute {
        path: ABORT_PATH,
        parse: parse_abort,
    }
}
