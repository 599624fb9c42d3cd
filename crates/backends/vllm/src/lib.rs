//! genfront's **vLLM backend**: the vLLM native format (vLLM's token-in/token-out API,
//! `POST /inference/v1/generate` and `POST /inference/v1/abort_requests`, as vLLM 0.33.0 serves it,
//! `spec/vllm-native.md`) and the **engine client** that serves any format from a real vLLM server.
//!
//! Start at [`VllmFormat`] (the format) or [`VllmEngine`] (the engine client).
//!
//! # The format
//!
//! A request goes through the phases of the format contract:
//! - *parse* (`request.rs`): the body is kept as an order-preserving `serde_json::Map`
//!   (it becomes `EngineRequest.native` untouched, unknown keys included) and typed fields are
//!   read from it with pydantic's lax coercions;
//! - *validate*: vLLM's checks in vLLM's order with vLLM's messages, status codes and error shapes
//!   (`Bad Request` schema errors, `BadRequestError` semantic errors, 404 unknown model);
//! - *project*: one [`SubRequest`] whose `sampling.n` is the request's `n`;
//! - *assemble*: engine deltas → the unary `GenerateTokensResponse` or one SSE chunk per choice
//!   delta, plus the usage-only chunk.
//!
//! genfront has no tokenizer of its own. For an engine without one
//! ([`genfront_protocol::EngineInfo::tokenizer`] `Some(false)`, `vllm serve --tokens-only`, the
//! mock) it behaves like a `--tokens-only` server: `stop` strings, `output_mode="text"` and
//! `structured_outputs` ([`STRUCTURED_OUTPUTS_NEED_TOKENIZER`]) are rejected with vLLM's
//! messages. For an engine with a tokenizer, or one not known, `stop`
//! strings are forwarded (the engine matches them; its `stop_reason` string is relayed), and
//! so is `output_mode="text"`, whose answer is relayed in vLLM's text shapes
//! (`token_in_token_out/{protocol,serving}.py`: `GenerateTextResponse`,
//! `GenerateTextStreamResponse`):
//! - `output_mode: "text"` at the top level of the body, of every chunk and of the usage chunk;
//! - per choice, `text` after the base fields and before `logprobs`: the engine's whole text
//!   (unary; the concatenated deltas when the upstream streamed) or this chunk's delta (SSE,
//!   also on a chunk that carries only text held back for stop-string matching). genfront never
//!   decodes: the text is the engine's (`choices[].text` of vLLM's frame, or `engine_data.text`
//!   from an SGLang engine client);
//! - `logprobs` as OpenAI `ChatCompletionLogProbs` (`_create_text_logprobs`):
//!   `{"content":[{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}]}`,
//!   `token` the engine's decoded token, `bytes` its UTF-8 bytes, the list the sampled token
//!   first then the alternatives, cut to `max(k, 1)`; no `rank`. A token the engine gave no text
//!   for is vLLM's no-tokenizer placeholder `"token_id:N"` with `bytes: null`. vLLM's text-mode
//!   alternatives carry no id, so the engine client keeps them by text with
//!   [`genfront_protocol::Candidate::UNKNOWN_ID`].
//!
//! Prompt logprobs' `decoded_token` is the engine's ([`genfront_protocol::TokenLogprob::text`]):
//! a string from an engine with a tokenizer, `null` from a `--tokens-only` one.
//!
//! Body memory: a body with an exact `application/json` type is read on a fast path first
//! (`request/fast.rs`): every key but `token_ids` as a JSON `Value`, `token_ids` straight into
//! `Vec<u32>` (moved into the engine request), the native body keeping `token_ids: null` in the
//! key's position (the engine client writes the typed ids there). Any other body, and any
//! request that fails a check on the fast path, is decoded and checked whole as before, so every
//! message is the full path's. Measured: a 64 MiB body of 10.7M ids peaks at 133 MB RSS
//! (`genfront serve --mock 1`; bound: the body plus 4 bytes an id).
//!
//! # The engine client ([`VllmEngine`])
//!
//! [`VllmEngine::connect`] reads `GET /v1/models` (served names, `max_model_len`, LoRA cards);
//! the facts vLLM does not report come from [`VllmEngineOptions`]. [`genfront_protocol::Engine::generate`]
//! then speaks `/inference/v1/generate` (`client/`).
//!
//! ## Engine client: the upstream request
//!
//! - **vLLM-format clients** (`native.format == "vllm"`): the client's own body, every key (unknown
//!   ones included) in the client's order, with surgical edits made in place: `request_id` = the
//!   private dispatch id (also sent as `X-Request-Id`; vLLM then names the request
//!   `generate-tokens-<id>`), `token_ids` = the engine request's prompt, `stream: true` and
//!   `stream_options: {"include_usage": true, "continuous_usage_stats": true}` (the format
//!   re-applies the client's own stream options), and `kv_transfer_params` = the request's
//!   hand-off when it has one.
//! - **Other formats** (e.g. an SGLang client): a body built from the typed request —
//!   `max_tokens`, `min_tokens`, `stop_token_ids`, `stop`, `ignore_eos`, `n`, the sampling
//!   options, `logprobs`, `prompt_logprobs` (always from the prompt's start: vLLM 0.33.0 refuses
//!   `prompt_logprob_start` without `prompt_logprob_token_ids`, so the decoder cuts the rows
//!   before the requested start), `logprob_token_ids`, `routed_experts_prompt_start`, `logit_bias` (`{id: bias}`),
//!   `structured_outputs` (`json` / `regex` / `grammar` / `structural_tag`), `model` = the LoRA
//!   name, `priority` (negated for SGLang, whose larger values run first; vLLM runs smaller
//!   first), `cache_salt`, `kv_transfer_params` = the hand-off. `max_tokens: 0` (prefill only) is
//!   sent as 1 and the generated token is dropped (`Length { length: 0 }`). What vLLM cannot
//!   produce is `Unsupported` (a 400 in the client's format), never approximated or dropped: a
//!   request with [`EngineRequest::native_only`](genfront_protocol::EngineRequest::native_only)
//!   keys (named in the message), top-k logprobs *and* token-id logprobs at once, token-id
//!   logprobs at prompt positions, and routed experts or sampling masks from an engine that does
//!   not report them (`return_routed_experts`, `return_sampling_mask`).
//! - **Unary upstream** when the answer needs a field only vLLM's unary body carries: prompt
//!   logprobs (streams cannot carry them), `prompt_logprob_token_ids`, and the P/D prefill leg's
//!   returned `kv_transfer_params` (`do_remote_decode: true`). The unary body is decoded into one
//!   delta per choice. Everything else streams, except a relayed request (below).
//! - **Relay** (issue 15; [`genfront_protocol::OutputOptions::relay`], set by the format for a
//!   request of one choice whose output genfront keeps, no P/D leg): the client's own body goes
//!   upstream with `stream: false` (unary) or with its own `stream` and `stream_options`
//!   (streams; not genfront's usual usage options), and vLLM's unary answer or each SSE chunk
//!   is only scanned (the choice's `token_ids`, `finish_reason` / `stop_reason`,
//!   `usage.prompt_tokens`, `prompt_tokens_details.cached_tokens`, where `request_id` sits) and
//!   handed over as [`genfront_protocol::EngineOutput::native`]; the assembler sends it with
//!   only `request_id` edited (`client/decode/relay.rs`, `assemble.rs`). A body or chunk the
//!   scan does not take (an error, another id, not one choice, `[DONE]`) is decoded as before.
//!   A relayed stream's cached-token count is known only when the client asked for
//!   `include_usage` (vLLM's usage chunk). A stream that needs the unary upstream (prompt
//!   logprobs) stays typed. A unary call cancelled before vLLM's
//!   headers (which vLLM writes with the whole answer) still waits the cancel grace for the
//!   aborted answer and its partial tokens.
//! - Headers: `X-Request-Id`, `X-data-parallel-rank` (routing `dp_rank`), `X-Session-ID`,
//!   `Authorization: Bearer` with [`VllmEngineOptions::api_key`].
//!
//! ## Serving one format on the other engine
//!
//! A vLLM engine gets a vLLM client's native body (every key). Any other engine gets what the
//! typed [`EngineRequest`](genfront_protocol::EngineRequest) carries, so each schema key
//! ([`REQUEST_KEYS`], [`SAMPLING_KEYS`], [`STRUCTURED_OUTPUT_KEYS`]) is classified ([`Carry`])
//! and nothing is dropped silently:
//!
//! | carry | keys |
//! |---|---|
//! | typed | `token_ids`, `model` (LoRA), `cache_salt`, `priority`, `kv_transfer_params` (an SGLang engine refuses it by name); in `sampling_params`: `n`, the penalties, `temperature`, `top_p`, `top_k`, `min_p`, `seed`, `stop`, `stop_token_ids`, `ignore_eos`, `max_tokens`, `min_tokens`, `logprobs`, `prompt_logprobs`, `prompt_logprob_start`, `logprob_token_ids`, `routed_experts_prompt_start`, `logit_bias`, `structured_outputs` `json` (a JSON schema) / `regex` / `grammar` (EBNF) / `structural_tag` |
//! | owned / rendered | `request_id` (the private id replaces it), `stream`, `stream_options`, `return_token_ids`, `output_mode: "text"` (rendered from the engine's own text; refused for an engine without a tokenizer) |
//! | inert (vLLM itself ignores it here) | `token_offsets`, `parse_context` (derender only), `sampling_params.output_kind` (the server sets it) |
//! | native only: refused by another engine's client, with a 400 naming them | `features`, `content_parts`, `reasoning_ended`, `reasoning_parser_kwargs`, `ec_transfer_params`; in `sampling_params`: `detokenize: false`, `skip_special_tokens: false`, `spaces_between_special_tokens: false`, `include_stop_str_in_output`, `stream_interval`, `skip_clone`, `output_text_buffer_length`, `watermarking`, `allowed_token_ids`, `extra_args`, `bad_words`, `skip_reading_prefix_cache`, `thinking_token_budget`, `repetition_detection`, `trace_decode_token_ids`, `prompt_logprob_token_ids`, `flat_logprobs`, `structured_outputs` `choice` / `json_object` and its options, a `logit_bias` entry that is not an id and a finite number |
//!
//! The meanings were checked against both engines' source (vLLM 0.33.0 `SamplingParams`,
//! `StructuredOutputsParams`; SGLang `sampling_params.py` and the scheduler's grammar choice):
//! both compile grammars with xgrammar by default; vLLM clamps logit biases to ±100, SGLang adds
//! them as given. The in-process mocker receives the whole native body; constraints have no
//! effect on its toy model.
//!
//! ## Engine client: chunk → delta
//!
//! The SSE body is read by event (blank-line delimited, any network chunking; `data: [DONE]` ends
//! it). Each chunk's choice becomes one [`genfront_protocol::EngineOutput`]:
//! - `index`, `token_ids` (delta); `logprobs.content[]` → `TokenLogprob { token_id, logprob, rank }`
//!   with the alternatives: vLLM lists the sampled token first and leaves it out of the rest, so
//!   `top` is the rest with the sampled token put back at its rank when it is among the top `k`
//!   (what the format's assembler renders back identically); with `logprob_token_ids` the
//!   alternatives go to `selected`, in request order. Logprobs that do not line up with the
//!   tokens are dropped.
//! - `finish_reason` / `stop_reason`: `"stop"` + int → `Stop { TokenId }`; `"stop"` + null →
//!   `Eos { token_id: the choice's last token }`; `"stop"` + string → `Stop { Text }`;
//!   `"length"` → `Length { the choice's output tokens }`; `"repetition"` → `Stop { Text(stop_reason,
//!   or "repetition") }` (the vLLM format renders `"repetition"` again from the native frame);
//!   `"abort"` → `Cancelled` when genfront cancelled, otherwise `Error` (vLLM aborted on its own:
//!   the request failed as far as the client is concerned); `"error"` or an unknown value →
//!   `Error`.
//! - `routed_experts` (base64 `.npy`, any integer dtype) → `RoutedExperts`, when requested; an
//!   undecodable payload stays only in `engine_data`. `sampling_mask` likewise.
//! - `usage`: every item carries cumulative per-choice usage (prompt tokens as vLLM reports them,
//!   completion tokens counted from the deltas, `cached_tokens` from
//!   `prompt_tokens_details.cached_tokens`). The finishing item of the last choice is held until
//!   the usage-only chunk (`choices: []`) or the end, so it carries the final cached-token count.
//! - top-level `kv_transfer_params` → `handoff`; the native chunk (for unary: the body with that
//!   one choice) → `engine_data`, which the vLLM format passes through.
//!
//! Errors: HTTP statuses map by the shared transport's one table (`genfront-engine-http`): 4xx
//! → `InvalidArgument` with vLLM's message, `status_code` and `err_type` (`error.type`), so a 404
//! unknown model (with vLLM's envelope) stays a 404, while a 404/405 without it (route not
//! served) is `Internal`; 401/403 → `Internal` (genfront's credentials or vLLM's flags are wrong,
//! not the client); 429 → `Overloaded` with `Retry-After`; 502/503/504 and connection failures →
//! `Unavailable`; other 5xx → `Internal`. `{"error": …}` events inside a stream map the same way
//! by their `code`. A stream that ends (or breaks) before every choice
//! finished → `StreamIncomplete`; a chunk that breaks the contract (unknown choice, output after
//! a finish, not JSON) → `Internal`. No upstream bytes can make the client panic.
//!
//! ## Engine client: cancellation
//!
//! Dropping the stream, or firing the cancellation token, aborts the request at vLLM twice over:
//! `POST /inference/v1/abort_requests {"request_ids": ["generate-tokens-<dispatch id>"]}`
//! (fire-and-forget on the current tokio runtime) and dropping the HTTP connection (vLLM aborts
//! on disconnect). After `cancel` fires the client keeps reading for up to
//! [`VllmEngineOptions::cancel_grace`] (≤ 2 s) for vLLM's `"abort"` finishes, which deliver the
//! tokens produced meanwhile (as a delta, then a token-less `Cancelled` item), then makes up a
//! `Cancelled` item (message [`CANCELLED_MESSAGE`], last usage) for every choice still
//! unfinished and closes the connection. A request cancelled before it was sent is never sent.
//! Finished, refused and unreachable requests are not aborted.
//!
//! # Validation parity (vLLM 0.33.0) and deliberate deviations
//!
//! Request validation follows vLLM 0.33.0's own code, compared body by body with the
//! validation-oracle tool: every `SamplingParams` key is typed in declaration order
//! (`sampling_params.py:285-446`, including `output_kind`, `watermarking`, `skip_clone`,
//! `output_text_buffer_length`, `repetition_detection`, `trace_decode_token_ids`), the
//! msgspec bridge's extra `is_instance_of` error leads a failing `sampling_params`
//! (`v1/serial_utils.py:586-593`), error dicts print as `_format_error` does (joined `loc`,
//! summarised `input`), `cache_salt` is the `VLLMValidationError` of `validate_cache_salt`, and
//! `output_mode` admits `derender`.
//!
//! Deliberate deviations:
//! - `output_mode="derender"` on an engine that loads a tokenizer is refused (400,
//!   `validate::DERENDER_NOT_SERVED`): genfront does not render the parsed assistant message. On a
//!   tokens-only engine (the embedded mock) vLLM's own tokenizer refusal comes first, as in vLLM.
//! - Integers past the 64-bit range reach genfront as floats (serde_json), so their digits in
//!   messages are the float's.
//!
//! # Fuzzing
//!
//! `tests/fuzz.rs` drives this format's whole request path (parse, validate, project, the
//! native error answer, the assembler) and the engine client's decoding of vLLM's SSE chunks and
//! unary bodies (served by a scripted local server) with seeded, structure-aware random inputs;
//! a panic, a refusal that is not a client 4xx, an accepted body whose engine request breaks the
//! model's limits, or a decoded output that breaks the engine contract fails it. The 10⁶-case
//! run (README, "Fuzzing"):
//! `GENFRONT_FUZZ_CASES=1000000 cargo test --profile fuzz -p genfront-vllm --test fuzz -- --nocapture --test-threads=1`.

mod abort;
mod assemble;
mod client;
mod control;
mod errors;
mod features;
mod fields;
mod framing;
mod logprobs;
mod npy;
mod project;
mod pyfmt;
mod request;
mod schema;
mod validate;
mod wide;

use std::sync::Arc;

use bytes::Bytes;
use genfront_format::{
    AbortRoute, AuxKind, AuxRoute, CatalogEntry, FormatSettings, Framing, GenerateError,
    GenerateFormat, NativeResponse, ParseInput, Prepared, Rejection, SubRequest,
};
use genfront_protocol::EngineInfo;
use http::{Method, StatusCode};

pub use abort::{ABORT_PATH, parse_abort};
pub use control::CONTROL_ROUTES;
pub use framing::FRAMING;
pub use request::{REQUEST_KEYS, SAMPLING_KEYS, STRUCTURED_OUTPUT_KEYS};

/// How one key of vLLM's `GenerateRequest` schema reaches an engine that is not vLLM (an SGLang
/// server behind the SGLang client). A vLLM engine always gets the client's native body, every
/// key included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    /// Carried in the typed [`EngineRequest`](genfront_protocol::EngineRequest) (a field, the
    /// constraints, the routing hints), so every engine kind receives it in its own spelling.
    Typed,
    /// Owned by genfront by design: ids it mints (`request_id`), the streaming mode.
    Owned,
    /// Rendered by this format from typed engine output (the answer's shape).
    Rendered,
    /// Refused by this format with vLLM's native 400 whatever the engine.
    Refused,
    /// Without effect on a vLLM generate request itself (vLLM ignores or overrides it), so no
    /// engine needs it.
    Inert,
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
    /// `0` (the key defaults to 0).
    Zero,
}

impl Unset {
    /// Whether `value` leaves the key at its default.
    pub fn is_unset(self, value: &serde_json::Value) -> bool {
        use serde_json::Value;
        match (self, value) {
            (_, Value::Null) => true,
            (Unset::True, Value::Bool(b)) => *b,
            (Unset::True, _) => false,
            (Unset::Zero, Value::Number(n)) => n.as_f64() == Some(0.0),
            (Unset::Empty | Unset::Zero, Value::Bool(b)) => !*b,
            (Unset::Empty | Unset::Zero, Value::String(s)) => s.is_empty(),
            (Unset::Empty | Unset::Zero, Value::Array(a)) => a.is_empty(),
            (Unset::Empty | Unset::Zero, Value::Object(o)) => o.is_empty(),
            (Unset::Empty, Value::Number(_)) => false,
        }
    }
}

/// One key of the schema and how it is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaKey {
    /// The key as the client spells it.
    pub key: &'static str,
    /// How it reaches a non-vLLM engine.
    pub carry: Carry,
}

const fn key(key: &'static str, carry: Carry) -> SchemaKey {
    SchemaKey { key, carry }
}
pub use client::{CANCELLED_MESSAGE, MAX_CANCEL_GRACE, VllmEngine, VllmEngineOptions};
pub use project::{FORMAT_NAME, REQUEST_ID_PREFIX};
pub use validate::{MAX_LOGPROB_TOKEN_IDS, MAX_N_SEQUENCES, STRUCTURED_OUTPUTS_NEED_TOKENIZER};

/// vLLM's native generate path.
pub const GENERATE_PATH: &str = "/inference/v1/generate";

/// The catalog entry: name `vllm`, served on [`GENERATE_PATH`] (POST) and, when
/// `DYN_GENERATE_FORMAT=vllm`, on `/generate` (POST only, like the native route).
pub const CATALOG_ENTRY: CatalogEntry = CatalogEntry {
    name: FORMAT_NAME,
    aliases: &[],
    native_path: GENERATE_PATH,
    native_methods: &[Method::POST],
    generate_methods: &[Method::POST],
    settings: &[],
    build,
};

static AUX_ROUTES: [AuxRoute; 1] = [AuxRoute {
    path: "/v1/models",
    kind: AuxKind::ModelInfo(models),
}];

/// vLLM's `GET /v1/models` (OpenAI `ModelList`): one card per served name (the model and its
/// `--served-model-name` aliases), `root` the model, `max_model_len` the context length.
fn models(info: &EngineInfo, _fleet: &genfront_format::FleetView<'_>) -> NativeResponse {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let data: Vec<serde_json::Value> = std::iter::once(&info.model)
        .chain(info.model_aliases.iter())
        .map(|name| {
            serde_json::json!({
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": info.model,
                "parent": null,
                "max_model_len": info.max_context_len,
                "permission": [],
            })
        })
        .collect();
    let body = serde_json::json!({"object": "list", "data": data});
    NativeResponse::json(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

fn build(_: &FormatSettings) -> Arc<dyn GenerateFormat> {
    Arc::new(VllmFormat::new())
}

/// The vLLM native format ([`GenerateFormat`] named `"vllm"`).
///
/// It acts like a vLLM server (`--tokens-only` unless the engine loads a tokenizer) whose model
/// facts come from the engine's
/// [`genfront_protocol::EngineInfo`]: `max_context_len` is `--max-model-len`, `max_logprobs` is
/// `--max-logprobs`, `max_num_seqs` is `--max-num-seqs`, and `routed_experts` / `sampling_mask`
/// play `--enable-return-routed-experts` / `--return-sampling-mask`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VllmFormat {
    loras: Vec<String>,
    flags: project::ServerFlags,
}

impl Default for VllmFormat {
    fn default() -> Self {
        Self::new()
    }
}

impl VllmFormat {
    /// A format with vLLM's defaults, including `--enable-prompt-tokens-details` off:
    /// `usage.prompt_tokens_details` is `null` (vLLM's `serving_engine` fills
    /// `PromptTokenUsageInfo(cached_tokens=…)` only when `enable_prompt_tokens_details` is set;
    /// see [`VllmFormat::with_prompt_tokens_details`]).
    pub fn new() -> Self {
        Self {
            loras: Vec::new(),
            flags: project::ServerFlags {
                prompt_tokens_details: false,
                engine_role: None,
            },
        }
    }

    /// Set `--enable-prompt-tokens-details` (off in vLLM by default): `usage.prompt_tokens_details`
    /// is then `{"cached_tokens": N}` whenever the engine reports usage, `null` otherwise.
    #[must_use]
    pub fn with_prompt_tokens_details(mut self, on: bool) -> Self {
        self.flags.prompt_tokens_details = on;
        self
    }

    /// Play a vLLM engine in a P/D role (a KV producer or consumer), as genfront's native mock
    /// server does: a request's `kv_transfer_params` (top level, or under
    /// `sampling_params.extra_args`) with `do_remote_decode: true` (prefill) or
    /// `do_remote_prefill: true` (decode) become [`genfront_protocol::EngineRequest::pd`] with
    /// this role. `None` (the default, and always for `genfront serve`): they pass through as the
    /// client's opaque hand-off.
    #[must_use]
    pub fn with_engine_role(mut self, role: Option<genfront_protocol::PdRole>) -> Self {
        self.flags.engine_role = role;
        self
    }

    /// LoRA adapters the engine serves (`--lora-modules`): a request whose `model` names one is
    /// routed with `RoutingHints::lora` and answered with that name; any other name that is not
    /// the base model is a 404.
    #[must_use]
    pub fn with_lora_adapters(
        mut self,
        names: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.loras = names.into_iter().map(Into::into).collect();
        self
    }

    fn prepare_inner(&self, input: ParseInput<'_>) -> Result<Prepared, Rejection> {
        // Starlette's `json.loads(body)` decodes bytes by `json.detect_encoding`: a UTF-8 BOM is
        // skipped (`utf-8-sig`).
        let input = ParseInput {
            body: input
                .body
                .strip_prefix(b"\xEF\xBB\xBF")
                .unwrap_or(input.body),
            ..input
        };
        // The body's fast path (prompt ids straight into `Vec<u32>`, no `Value` per id); a
        // request it refuses is re-run on the full path below for the exact native error.
        if let Some((map, ids)) = request::decode_fast(input.headers, input.body)
            && let Ok(prepared) = self.prepare_map(&input, map, Some(ids))
        {
            return Ok(prepared);
        }
        let map = request::decode_body(input.headers, input.body)?;
        self.prepare_map(&input, map, None)
    }

    /// Validate and project a decoded body (`ids`: the fast path's prompt ids).
    fn prepare_map(
        &self,
        input: &ParseInput<'_>,
        map: serde_json::Map<String, serde_json::Value>,
        ids: Option<Vec<u32>>,
    ) -> Result<Prepared, Rejection> {
        // Integer literals past 64 bits, exact, for this body's checks and messages.
        let _wide = wide::WideScope::new(input.body, &map);
        let req = request::parse_with_ids(&map, ids)?;
        let resolved = validate::serve_checks(&req, input.engine, &self.loras)?;
        validate::engine_checks(&req, input.engine, &resolved).map_err(|error| Rejection {
            error,
            stream: req.stream,
        })?;
        let request_id = project::client_request_id(input.headers, req.request_id.as_deref());
        let stream = req.stream;
        let (mut request, config) = project::project(
            map,
            req,
            resolved,
            input.headers,
            input.engine,
            &self.flags,
            request_id.clone(),
        );
        // Relay (issue 15; vLLM's own answer or chunks with only `request_id` edited,
        // `assemble.rs`): one choice whose output genfront does not discard (`max_tokens: 0`)
        // and no P/D leg of this format's own, unary or streamed; genfront's vLLM engine client
        // honours it only for this body on a vLLM engine.
        request.output.relay =
            config.n == 1 && request.pd.is_none() && request.stop.max_tokens != Some(0);
        Ok(Prepared {
            client_id: Some(request_id.clone()),
            stream,
            subs: vec![SubRequest {
                abort_key: request_id,
                request,
            }],
            assembler: Box::new(assemble::VllmAssembler::new(config)),
        })
    }
}

/// This format's P/D merge rules, as declared (data, compiled in).
pub const PD_RULES: &str = include_str!("pd_rules.json");

/// The merge built from [`PD_RULES`] (checked by this crate's tests: a broken file fails them).
static PD_MERGE: std::sync::LazyLock<std::sync::Arc<dyn genfront_protocol::PdMerge>> =
    std::sync::LazyLock::new(|| {
        let rules = genfront_format::pd::MergeRules::parse(PD_RULES).unwrap_or_else(|_| {
            genfront_format::pd::MergeRules {
                format: "vllm".to_owned(),
                extends: None,
                rules: Default::default(),
            }
        });
        std::sync::Arc::new(genfront_format::pd::RuleMerge::new(rules))
    });

impl GenerateFormat for VllmFormat {
    fn name(&self) -> &'static str {
        FORMAT_NAME
    }

    fn framing(&self) -> &'static Framing {
        &FRAMING
    }

    /// Parse, validate and project one `/inference/v1/generate` request.
    ///
    /// `Rejection::stream` is `true` only for the errors vLLM raises in the engine's input
    /// processor (`SamplingParams.verify`, prompt length), which a streaming client receives as
    /// an SSE error event inside a 200; every other rejection is a plain JSON error.
    fn prepare(&self, input: ParseInput<'_>) -> Result<Prepared, Rejection> {
        self.prepare_inner(input)
    }

    /// `{"error":{"message","type","param","code"}}` with vLLM's status; with `stream` and an
    /// engine-side validation error, a 200 `text/event-stream` body `data: {…}` + `data: [DONE]`.
    fn error_response(&self, error: &GenerateError, stream: bool) -> NativeResponse {
        errors::error_response(error, stream)
    }

    /// `{"error":{…}}` for an error after the headers went out (the frontend adds `data: ` and
    /// the final `[DONE]`).
    fn stream_error_event(&self, error: &GenerateError) -> Bytes {
        Bytes::from(errors::error_json(error))
    }

    /// `POST /inference/v1/abort_requests` → [`genfront_format::AbortSelector::Exact`] of the
    /// prefixed ids.
    fn abort_route(&self) -> Option<AbortRoute> {
        Some(abort::ROUTE)
    }

    /// `GET /v1/models`.
    fn aux_routes(&self) -> &'static [AuxRoute] {
        &AUX_ROUTES
    }

    /// vLLM's pause/resume, prefix-cache reset and weight-version routes ([`CONTROL_ROUTES`];
    /// mounted by vLLM only with `VLLM_SERVER_DEV_MODE=1`; the refusals are in the `control`
    /// module docs).
    fn control_routes(&self) -> &'static [genfront_format::ControlRoute] {
        &CONTROL_ROUTES
    }

    /// P/D answers merged by the declared rules in `pd_rules.json` (prompt logprobs, prompt rows
    /// of `routed_experts` and cached tokens from the prefill leg; the rest from decode;
    /// `spec/vllm-native.md` §10).
    fn pd_merge(&self) -> Option<std::sync::Arc<dyn genfront_protocol::PdMerge>> {
        Some(PD_MERGE.clone())
    }
}

#[cfg(test)]
mod tests;
