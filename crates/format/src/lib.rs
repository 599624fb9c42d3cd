//! genfront's **format contract**: how a native token-in/token-out API plugs into the shared
//! handler.
//!
//! A format (one crate per backend) implements [`GenerateFormat`]: it parses and validates a native
//! request body, projects it to [`EngineRequest`]s, and returns a per-request [`Assembler`] that
//! turns [`EngineOutput`] deltas into the native unary body or native SSE events. It also renders
//! every [`GenerateError`] in its native envelope. Formats are listed in a static [`Catalog`];
//! [`resolve_routes`] turns the catalog plus configuration (`DYN_GENERATE_FORMAT`, extra routes)
//! into the route table, failing with a [`ConfigError`] instead of panicking.
//!
//! Request phases, in order (the shared handler drives them; see `docs/request-lifecycle.md`):
//! receive → **parse/validate** ([`GenerateFormat::prepare`]) → mint ids → dispatch → **assemble**
//! ([`Assembler::on_output`]) → respond ([`Assembler::finish_unary`] / [`Assembler::finish_stream`])
//! → record.

mod catalog;
mod error;
mod framing;
pub mod pd;
pub mod pyrepr;
pub mod query;

use bytes::Bytes;
pub use catalog::{
    Catalog, CatalogEntry, ConfigError, FormatSettings, GENERATE_PATH, Route, RouteConfig,
    SettingKind, SettingSpec, SettingValue, resolve_routes,
};
pub use error::GenerateError;
pub use framing::Framing;
use genfront_protocol::{ControlAction, EngineInfo, EngineOutput, EngineRequest};
use http::{HeaderMap, StatusCode};

/// What a format sees of an incoming request.
#[derive(Debug, Clone, Copy)]
pub struct ParseInput<'a> {
    /// Request headers (for `x-request-id`, DP-rank hints, …).
    pub headers: &'a HeaderMap,
    /// The raw body.
    pub body: &'a [u8],
    /// Facts about the model behind this route, for validation (vocabulary, context length, …).
    pub engine: &'a EngineInfo,
}

/// A validated request, projected to engine requests, with its assembler.
pub struct Prepared {
    /// The client's request id as the native server would echo it (SGLang `rid`, vLLM
    /// `generate-tokens-<id>`), sent back in the `x-request-id` response header.
    pub client_id: Option<String>,
    /// Whether the client asked for SSE.
    pub stream: bool,
    /// One entry per engine request (batch items × parallel samples, as the native server splits
    /// them). The frontend fills each `request.request_id` with a private minted id.
    pub subs: Vec<SubRequest>,
    /// Turns engine outputs into the native response.
    pub assembler: Box<dyn Assembler>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("client_id", &self.client_id)
            .field("stream", &self.stream)
            .field("subs", &self.subs)
            .finish_non_exhaustive()
    }
}

/// One engine request of a client request.
#[derive(Debug, Clone)]
pub struct SubRequest {
    /// The id the native engine would know this request by, for abort-by-id matching (SGLang: the
    /// item's rid; vLLM: `generate-tokens-<id>`).
    pub abort_key: String,
    /// The projected engine request.
    pub request: EngineRequest,
}

/// A complete native HTTP answer (status, content type and body) built by a format.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type` of `body`: [`CONTENT_TYPE_JSON`] or [`CONTENT_TYPE_SSE`].
    pub content_type: &'static str,
    /// Body bytes.
    pub body: Bytes,
}

/// `application/json`.
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// `text/event-stream` (for a whole SSE body, e.g. SGLang's 200 + error event for an invalid
/// streaming request).
pub const CONTENT_TYPE_SSE: &str = "text/event-stream";

impl NativeResponse {
    /// A JSON answer.
    pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            content_type: CONTENT_TYPE_JSON,
            body: body.into(),
        }
    }
}

/// Why [`GenerateFormat::prepare`] refused a request, and whether the client had asked for a
/// stream (some engines answer an invalid *streaming* request with a 200 SSE error event).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The error.
    pub error: GenerateError,
    /// Whether the body asked for streaming (false when that could not be read).
    pub stream: bool,
}

impl From<GenerateError> for Rejection {
    fn from(error: GenerateError) -> Self {
        Self {
            error,
            stream: false,
        }
    }
}

/// Per-request response builder, created by [`GenerateFormat::prepare`].
///
/// The frontend calls [`Assembler::on_output`] for every engine output in arrival order (outputs of
/// different sub-requests may interleave), then exactly one of [`Assembler::finish_stream`] or
/// [`Assembler::finish_unary`].
pub trait Assembler: Send {
    /// Phase *assemble*: take one delta of sub-request `sub` (index into [`Prepared::subs`]). In
    /// streaming mode, push zero or more SSE event payloads (the JSON after `data: `) to `events`.
    ///
    /// # Errors
    /// A [`GenerateError`] when the output breaks the contract (the request then fails).
    fn on_output(
        &mut self,
        sub: usize,
        output: EngineOutput,
        events: &mut Vec<Bytes>,
    ) -> Result<(), GenerateError>;

    /// Streaming mode, after every sub-request finished: push trailing events (e.g. a usage-only
    /// chunk). `[DONE]` is written by the frontend.
    ///
    /// # Errors
    /// A [`GenerateError`] when the outputs were incomplete.
    fn finish_stream(&mut self, events: &mut Vec<Bytes>) -> Result<(), GenerateError>;

    /// Unary mode, after every sub-request finished: the whole native response.
    ///
    /// # Errors
    /// A [`GenerateError`] when the outputs were incomplete or the native answer is an error.
    fn finish_unary(self: Box<Self>) -> Result<NativeResponse, GenerateError>;
}

/// What an abort call selects (see [`AbortRoute`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortSelector {
    /// When a request with exactly this abort key is in flight, every in-flight request whose
    /// key starts with it; otherwise none (SGLang 0.5.23: the tokenizer manager drops an abort
    /// for a rid it does not hold, the scheduler then matches by prefix).
    Prefix(String),
    /// Requests whose abort key equals one of these (vLLM rule).
    Exact(Vec<String>),
    /// Every in-flight request of this format.
    All,
    /// Nothing (e.g. SGLang's empty rid without `abort_all`).
    Nothing,
}

/// A format's native abort endpoint.
#[derive(Debug, Clone, Copy)]
pub struct AbortRoute {
    /// Path, e.g. `/abort_request`.
    pub path: &'static str,
    /// Parse the body into a selector.
    pub parse: fn(&[u8]) -> Result<AbortSelector, GenerateError>,
}

/// What an auxiliary (non-generate) route of a format answers.
#[derive(Debug, Clone, Copy)]
pub enum AuxKind {
    /// A static answer built from the model's facts and the fleet's state (e.g. SGLang
    /// `GET /get_model_info`, vLLM `GET /v1/models`).
    ModelInfo(fn(&EngineInfo, &FleetView<'_>) -> NativeResponse),
    /// A generation probe: the frontend sends a one-token request to an engine and answers 200
    /// with an empty body when a token arrives in time, 503 otherwise (SGLang
    /// `GET /health_generate`).
    GenerateProbe,
}

/// What genfront knows of its fleet beyond one engine's facts, for info routes
/// ([`AuxKind::ModelInfo`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetView<'a> {
    /// The fleet's weight version: the version set by the last successful weight update or
    /// version tag through fleet control. `None`: none was set through genfront (an engine then
    /// reports its own, SGLang's `"default"` unless launched with `--weight-version`).
    pub weight_version: Option<&'a str>,
}

/// A format's auxiliary `GET` route.
#[derive(Debug, Clone, Copy)]
pub struct AuxRoute {
    /// Path, e.g. `/get_model_info`.
    pub path: &'static str,
    /// What it answers.
    pub kind: AuxKind,
}

/// The HTTP methods a [`ControlRoute`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMethods {
    /// `GET` only (read-only calls: vLLM `/is_paused`, `/weight_info`).
    Get,
    /// `POST` only.
    Post,
    /// `GET` and `POST` (SGLang `/flush_cache`).
    GetOrPost,
}

/// A format's native fleet-control route (pause, resume, weight updates, cache flush, …): the
/// frontend fans the call out to every worker of the format (see `genfront_router::control`) and
/// answers with a per-worker report.
#[derive(Debug, Clone, Copy)]
pub struct ControlRoute {
    /// The engine's own path, e.g. `/pause_generation`; the frontend serves the same path.
    pub path: &'static str,
    /// The methods it answers (others: 405).
    pub methods: ControlMethods,
    /// What a call means, from its query string (without `?`; genfront's own `workers`
    /// parameter removed) and body. `Err`: the native refusal the engine itself would send for
    /// this call (e.g. FastAPI's 422 for an unknown pause mode), answered without a fan-out.
    pub parse: fn(query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse>,
}

/// A native backend format (SGLang, vLLM, …). Object-safe; one instance serves every request of
/// its routes.
pub trait GenerateFormat: Send + Sync + 'static {
    /// Catalog name, e.g. `"sglang"`.
    fn name(&self) -> &'static str;

    /// The format's [`Framing`]: SSE delimiters and terminator, content types, and the bodies of
    /// the HTTP-level refusals the shared handler sends for its routes. The route serving
    /// [`GENERATE_PATH`] also frames the app-wide 404/405 answers.
    fn framing(&self) -> &'static Framing;

    /// Phase *parse/validate + project*: validate the native body and headers against the
    /// model's facts, and project it to engine requests.
    ///
    /// # Errors
    /// A [`Rejection`] carrying a client-fault [`GenerateError`] with the native message.
    fn prepare(&self, input: ParseInput<'_>) -> Result<Prepared, Rejection>;

    /// Render `error` as the native error answer sent before any response header: the status and
    /// envelope the engine itself would send. `stream` tells whether the client asked for SSE
    /// (SGLang answers an invalid streaming request with HTTP 200 and an SSE error event).
    fn error_response(&self, error: &GenerateError, stream: bool) -> NativeResponse;

    /// Render `error` as the payload of one SSE event, for errors after the headers went out.
    fn stream_error_event(&self, error: &GenerateError) -> Bytes;

    /// The format's native abort endpoint, if it has one.
    fn abort_route(&self) -> Option<AbortRoute> {
        None
    }

    /// The refusal of a request whose native id (its abort key) is already in flight for the
    /// same owner, when the format's engine refuses such a request (SGLang:
    /// `Duplicate request ID detected: {rid}`, `TokenizerManager._init_req_state`). `None` (the
    /// default): the engine makes its ids unique itself and serves both (vLLM), so the handler
    /// does not check.
    fn duplicate_id_error(&self, _id: &str) -> Option<GenerateError> {
        None
    }

    /// The format's auxiliary `GET` routes (model info, generation probe), if any.
    fn aux_routes(&self) -> &'static [AuxRoute] {
        &[]
    }

    /// The format's native fleet-control routes (fanned out to its workers), if any.
    fn control_routes(&self) -> &'static [ControlRoute] {
        &[]
    }

    /// How prefill/decode answers of this format are merged ([`pd::RuleMerge`] over the format's
    /// declared rules). `None`: the router's typed merge.
    fn pd_merge(&self) -> Option<std::sync::Arc<dyn genfront_protocol::PdMerge>> {
        None
    }
}
