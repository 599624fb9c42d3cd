//! genfront's **vLLM format**: vLLM's token-in/token-out API, `POST /inference/v1/generate` and
//! `POST /inference/v1/abort_requests`, as vLLM 0.33.0 serves it (`spec/vllm-native.md`).
//!
//! Start at [`VllmFormat`]. A request goes through the phases of the format contract:
//! - *parse* (`request.rs`): the body is kept as an order-preserving `serde_json::Map`
//!   (it becomes `EngineRequest.native` untouched, unknown keys included) and typed fields are
//!   read from it with pydantic's lax coercions;
//! - *validate*: vLLM's checks in vLLM's order with vLLM's messages, status codes and error shapes
//!   (`Bad Request` schema errors, `BadRequestError` semantic errors, 404 unknown model);
//! - *project*: one [`SubRequest`] whose `sampling.n` is the request's `n`;
//! - *assemble*: engine deltas → the unary `GenerateTokensResponse` or one SSE chunk per choice
//!   delta, plus the usage-only chunk.
//!
//! genfront has no tokenizer, so it behaves like a `vllm serve --tokens-only` server: `stop`
//! strings and `output_mode="text"` are rejected with vLLM's messages.

mod abort;
mod assemble;
mod errors;
mod features;
mod fields;
mod logprobs;
mod npy;
mod project;
mod pyfmt;
mod request;
mod schema;
mod validate;

use std::sync::Arc;

use bytes::Bytes;
use genfront_format::{
    AbortRoute, AuxKind, AuxRoute, CatalogEntry, FormatSettings, GenerateError, GenerateFormat,
    NativeResponse, ParseInput, Prepared, Rejection, SubRequest,
};
use genfront_protocol::EngineInfo;
use http::{Method, StatusCode};

pub use abort::{ABORT_PATH, parse_abort};
pub use project::{FORMAT_NAME, REQUEST_ID_PREFIX};
pub use validate::{MAX_LOGPROB_TOKEN_IDS, MAX_N_SEQUENCES};

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
    build,
};

static AUX_ROUTES: [AuxRoute; 1] = [AuxRoute {
    path: "/v1/models",
    kind: AuxKind::ModelInfo(models),
}];

/// vLLM's `GET /v1/models` (OpenAI `ModelList`): one card per served name (the model and its
/// `--served-model-name` aliases), `root` the model, `max_model_len` the context length.
fn models(info: &EngineInfo) -> NativeResponse {
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
/// It acts like a `vllm serve --tokens-only` server whose model facts come from the engine's
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
    /// A format with vLLM's defaults except `--enable-prompt-tokens-details`, which is on:
    /// `usage.prompt_tokens_details` is `{"cached_tokens": N}` whenever the engine reports usage
    /// (RL clients read the cache hits), `null` otherwise.
    pub fn new() -> Self {
        Self {
            loras: Vec::new(),
            flags: project::ServerFlags {
                prompt_tokens_details: true,
            },
        }
    }

    /// Set `--enable-prompt-tokens-details` (off in vLLM by default).
    #[must_use]
    pub fn with_prompt_tokens_details(mut self, on: bool) -> Self {
        self.flags.prompt_tokens_details = on;
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
        let map = request::decode_body(input.headers, input.body)?;
        let req = request::parse(&map)?;
        let resolved = validate::serve_checks(&req, input.engine, &self.loras)?;
        validate::engine_checks(&req, input.engine, &resolved).map_err(|error| Rejection {
            error,
            stream: req.stream,
        })?;
        let request_id = project::client_request_id(input.headers, req.request_id.as_deref());
        let stream = req.stream;
        let (request, config) = project::project(
            map,
            req,
            resolved,
            input.headers,
            input.engine,
            &self.flags,
            request_id.clone(),
        );
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

impl GenerateFormat for VllmFormat {
    fn name(&self) -> &'static str {
        FORMAT_NAME
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
}

#[cfg(test)]
mod tests;
