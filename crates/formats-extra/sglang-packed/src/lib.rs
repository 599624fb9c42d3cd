//! genfront format **`sglang-packed`**: SGLang's native `POST /generate` with token ids packed,
//! built on [`genfront_sglang`] (it wraps [`SglangFormat`] and delegates every rule to it) — the
//! worked example of `docs/writing-a-format.md`: one crate and one catalog line, no change to the
//! shared handler.
//!
//! # The packing
//!
//! A **packed id list** is the JSON object `{"b64zstd": "<text>"}`, where `<text>` is standard
//! base64 (RFC 4648 §4, `=`-padded) of a zstd stream (one or more frames) whose decompressed bytes
//! are the ids as little-endian `u32`s, 4 bytes an id, in order ([`codec::pack`] /
//! [`codec::unpack`]). An empty list is a zstd frame of zero bytes.
//!
//! **Request.** Everything is SGLang's body, plus:
//! - `input_ids` may be a packed id list, or (a batch) a list whose rows are each a packed id
//!   list or SGLang's plain list of ints, mixed freely. Packed rows are unpacked before SGLang's
//!   parser runs, so every check after that (vocabulary, context length, batch rules) is
//!   SGLang's own, with its message (an id `>=` the vocabulary: SGLang's "The input_ids …
//!   contains values greater than the vocab size" 400).
//! - `packed_output` (boolean, default `false`; `null` = `false`): pack the answer. The key is
//!   removed before SGLang sees the body, so an SGLang engine gets exactly the body a plain
//!   client would have sent.
//!
//! **Answer** (only with `"packed_output": true`; otherwise byte for byte SGLang's). In every
//! answer object — the unary object, each object of a batch or `n > 1` list, each SSE event's
//! object, cumulative or incremental — ([`answer::pack_answer`]):
//! - `output_ids` becomes a packed id list;
//! - in `meta_info`, each list of `[logprob, id, text]` triples (`input_token_logprobs`,
//!   `output_token_logprobs`) becomes `{"logprobs": [logprob…], "ids": <packed ids>, "texts":
//!   [text…]}`, `texts` present only when some text is not `null` (absent = all `null`);
//! - each list whose positions are `null` or a list of triples (`input_top_logprobs`,
//!   `output_top_logprobs`, `input_token_ids_logprobs`, `output_token_ids_logprobs`) becomes the
//!   same columns over all triples in order, plus `"lengths": [n | null, …]`, one per position
//!   (`null` for a `null` position, else its number of triples).
//!
//! Every other field, every error answer and error event, the status codes and the SSE framing
//! are SGLang's. [`answer::unpack_answer`] is the exact inverse (what a client does); numbers
//! keep their JSON values (an answer is re-serialized, so a float may be spelled differently,
//! e.g. `1e-05` as `1e-5`).
//!
//! **Refusals** (SGLang's pydantic-style 400, `{"object":"error","message":…,"type":"Bad
//! Request",…}`, also for `stream: true`, the message starting with the field:
//! `body.input_ids`, `body.input_ids.<row>` or `body.packed_output`): not base64, not zstd,
//! decompressed length not a multiple of 4, more than `--sglang-packed-max-unpacked-bytes`
//! decompressed over all rows (the decoder is read through a bounded reader: a decompression
//! bomb stops at the limit, it is never inflated), an object other than `{"b64zstd": <string>}`,
//! a non-boolean `packed_output`. Never a panic.
//!
//! # Settings
//!
//! The catalog entry ([`CATALOG_ENTRY`]) contributes `--sglang-packed-max-unpacked-bytes`
//! ([`MAX_UNPACKED_BYTES`], default 64 MiB, the default `--body-limit`) and shares SGLang's
//! `--sglang-incremental-streaming` ([`genfront_sglang::INCREMENTAL_STREAMING`]).
//!
//! # P/D
//!
//! Prefill/decode answers are merged on the engine side, where ids are typed (an SGLang engine
//! never sees packing), so joining packed sequences is: decode (the client's packing was undone
//! before dispatch), concatenate (SGLang's `delta` rules for `/token_ids`, `/logprobs`, the
//! prompt side from prefill), encode (the answer is packed after the merge). The rules file
//! (`pd_rules.json`, [`PD_RULES`]) `extends` SGLang's and states those id-carrying fields.
//!
//! # Routing and aborts
//!
//! Requests go to workers as any format's do (the router prefers workers whose native kind is
//! the format's name; none is `sglang-packed`, so any routable worker takes them, and an SGLang
//! engine gets SGLang's native body). Abort by rid reaches a packed request through the abort
//! route of the format it was registered under: `POST /abort_request` when `sglang-packed` serves
//! `/generate` (`DYN_GENERATE_FORMAT=sglang-packed`); with SGLang on `/generate` and packing on
//! another path, `/abort_request` belongs to SGLang and packed requests are ended by their
//! client disconnecting.

pub mod answer;
pub mod codec;
mod request;

use std::sync::Arc;

use bytes::Bytes;
use genfront_format::{
    AbortRoute, Assembler, AuxRoute, CatalogEntry, ControlRoute, FormatSettings, Framing,
    GENERATE_PATH, GenerateError, GenerateFormat, NativeResponse, ParseInput, Prepared, Rejection,
    SettingKind, SettingSpec,
};
use genfront_protocol::EngineOutput;
use genfront_sglang::{SglangFormat, SglangSettings};
use http::{Method, StatusCode};
pub use request::PACKED_OUTPUT;

/// The format's catalog name.
pub const FORMAT_NAME: &str = "sglang-packed";

/// `--sglang-packed-max-unpacked-bytes` (env `GENFRONT_SGLANG_PACKED_MAX_UNPACKED_BYTES`): most
/// bytes the packed `input_ids` of one request may decompress to, all rows together. Default
/// 64 MiB (the default `--body-limit`: a packed body stands for at most what a plain one may
/// carry).
pub const MAX_UNPACKED_BYTES: SettingSpec = SettingSpec {
    flag: "sglang-packed-max-unpacked-bytes",
    env: "GENFRONT_SGLANG_PACKED_MAX_UNPACKED_BYTES",
    help: "sglang-packed: most bytes the packed input_ids of one request may decompress to, all batch rows together (4 bytes an id); beyond it a 400. Default 67108864 (64 MiB).",
    kind: SettingKind::Integer {
        default: 64 * 1024 * 1024,
    },
};

static METHODS: [Method; 2] = [Method::POST, Method::PUT];

/// The catalog entry: name `sglang-packed`; its native path is `/generate`, so it is served only
/// where configured — `--route /generate_packed=sglang-packed`, or on `/generate` with
/// `DYN_GENERATE_FORMAT=sglang-packed` — with SGLang's methods (`POST`, `PUT`). Settings:
/// [`MAX_UNPACKED_BYTES`] and SGLang's [`genfront_sglang::INCREMENTAL_STREAMING`].
pub const CATALOG_ENTRY: CatalogEntry = CatalogEntry {
    name: FORMAT_NAME,
    aliases: &[],
    native_path: GENERATE_PATH,
    native_methods: &METHODS,
    generate_methods: &METHODS,
    settings: &[genfront_sglang::INCREMENTAL_STREAMING, MAX_UNPACKED_BYTES],
    build,
};

fn build(settings: &FormatSettings) -> Arc<dyn GenerateFormat> {
    let max = usize::try_from(settings.integer(&MAX_UNPACKED_BYTES)).unwrap_or(usize::MAX);
    Arc::new(SglangPackedFormat::new(
        SglangFormat::new(&SglangSettings::from_format_settings(settings)),
        max,
    ))
}

/// This format's P/D merge rules, extending SGLang's ([`genfront_sglang::PD_RULES`]).
pub const PD_RULES: &str = include_str!("pd_rules.json");

/// SGLang's rules extended by [`PD_RULES`]; SGLang's alone if either file were broken (this
/// crate's tests parse both, so a broken file fails them).
fn merge_rules() -> genfront_format::pd::MergeRules {
    use genfront_format::pd::MergeRules;
    let base = MergeRules::parse(genfront_sglang::PD_RULES);
    let ext = MergeRules::parse(PD_RULES);
    match (base, ext) {
        (Ok(b), Ok(e)) => b.extend(&e).unwrap_or(b),
        (Ok(b), Err(_)) => b,
        (Err(_), _) => MergeRules {
            format: FORMAT_NAME.to_owned(),
            extends: None,
            rules: Default::default(),
        },
    }
}

static PD_MERGE: std::sync::LazyLock<Arc<dyn genfront_protocol::PdMerge>> =
    std::sync::LazyLock::new(|| Arc::new(genfront_format::pd::RuleMerge::new(merge_rules())));

/// The `sglang-packed` format: [`SglangFormat`] with packed ids in, and (on request) out.
#[derive(Debug, Clone)]
pub struct SglangPackedFormat {
    inner: SglangFormat,
    max_unpacked: usize,
}

impl SglangPackedFormat {
    /// Packing over `inner`, unpacking at most `max_unpacked` bytes of ids per request.
    pub fn new(inner: SglangFormat, max_unpacked: usize) -> Self {
        Self {
            inner,
            max_unpacked,
        }
    }
}

/// SGLang's assembler with every answer object packed ([`answer::pack_answer`]).
struct PackedAssembler {
    inner: Box<dyn Assembler>,
}

/// `event` (one SSE payload or a unary body) packed; left as it is if it is not JSON.
fn pack_bytes(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    answer::pack_answer(&mut v);
    serde_json::to_vec(&v).ok()
}

fn pack_events(events: &mut [Bytes]) {
    for e in events {
        if let Some(p) = pack_bytes(e) {
            *e = Bytes::from(p);
        }
    }
}

impl Assembler for PackedAssembler {
    fn on_output(
        &mut self,
        sub: usize,
        output: EngineOutput,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError> {
        let start = events.len();
        self.inner.on_output(sub, output, events)?;
        pack_events(&mut events[start..]);
        Ok(())
    }

    fn finish_stream(&mut self, events: &mut Vec<Bytes>) -> Result<(), GenerateError> {
        let start = events.len();
        self.inner.finish_stream(events)?;
        pack_events(&mut events[start..]);
        Ok(())
    }

    fn finish_unary(self: Box<Self>) -> Result<NativeResponse, GenerateError> {
        let mut r = self.inner.finish_unary()?;
        if r.status == StatusCode::OK
            && let Some(p) = pack_bytes(&r.body)
        {
            r.body = Bytes::from(p);
        }
        Ok(r)
    }
}

impl GenerateFormat for SglangPackedFormat {
    fn name(&self) -> &'static str {
        FORMAT_NAME
    }

    fn framing(&self) -> &'static Framing {
        self.inner.framing()
    }

    /// Unpack the body ([the request rules](crate#the-packing)), let SGLang parse, validate and
    /// project it, and wrap its assembler when a packed answer was asked for.
    fn prepare(&self, input: ParseInput<'_>) -> Result<Prepared, Rejection> {
        let rewritten = request::rewrite(input.body, self.max_unpacked)?;
        let mut prepared = match &rewritten.body {
            Some(body) => self.inner.prepare(ParseInput { body, ..input })?,
            None => self.inner.prepare(input)?,
        };
        if rewritten.packed_output {
            prepared.assembler = Box::new(PackedAssembler {
                inner: prepared.assembler,
            });
        }
        Ok(prepared)
    }

    fn error_response(&self, error: &GenerateError, stream: bool) -> NativeResponse {
        self.inner.error_response(error, stream)
    }

    fn stream_error_event(&self, error: &GenerateError) -> Bytes {
        self.inner.stream_error_event(error)
    }

    fn abort_route(&self) -> Option<AbortRoute> {
        self.inner.abort_route()
    }

    fn duplicate_id_error(&self, id: &str) -> Option<GenerateError> {
        self.inner.duplicate_id_error(id)
    }

    fn aux_routes(&self) -> &'static [AuxRoute] {
        self.inner.aux_routes()
    }

    fn control_routes(&self) -> &'static [ControlRoute] {
        self.inner.control_routes()
    }

    /// SGLang's merge extended by [`PD_RULES`] (see [P/D](crate#pd)).
    fn pd_merge(&self) -> Option<Arc<dyn genfront_protocol::PdMerge>> {
        Some(PD_MERGE.clone())
    }
}

#[cfg(test)]
mod tests;
