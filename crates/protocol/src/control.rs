//! Fleet control: the native control calls (pause, resume, weight updates, cache flushes) a
//! frontend fans out to its workers, and what one worker answers.
//!
//! A control call is **native**: it carries the engine's own method, path, query and body, and a
//! native engine client relays it unchanged to its engine (`POST /pause_generation` to SGLang,
//! `POST /pause?mode=keep` to vLLM) and hands back the engine's own status and body. The typed
//! [`ControlAction`] next to it says what the call *means*, so the router can keep its view of
//! the worker (paused, weights failed, weight version) and engines without an HTTP face (the
//! in-process mocker) can act on it and answer in the native shape of [`ControlCall::format`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

use crate::EngineError;

/// How a pause treats the requests in flight (the engines' own modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseMode {
    /// Abort every in-flight request; each ends as an abort with the tokens made so far (SGLang
    /// `mode: "abort"`, vLLM `mode=abort`; both engines' default).
    Abort,
    /// Keep in-flight requests where they are, making no progress until resumed (SGLang
    /// `in_place`).
    InPlace,
    /// Retract running requests to the waiting queue, keeping them (SGLang `retract`).
    Retract,
    /// Let in-flight requests finish, then pause (vLLM `mode=wait`).
    Wait,
    /// Freeze in-flight requests until resumed (vLLM `mode=keep`).
    Keep,
}

impl PauseMode {
    /// The engine's own name of the mode (`abort`, `in_place`, `retract`, `wait`, `keep`).
    pub fn as_str(self) -> &'static str {
        match self {
            PauseMode::Abort => "abort",
            PauseMode::InPlace => "in_place",
            PauseMode::Retract => "retract",
            PauseMode::Wait => "wait",
            PauseMode::Keep => "keep",
        }
    }

    /// Whether requests in flight stay on the engine, frozen, until resumed.
    pub fn keeps_requests(self) -> bool {
        matches!(
            self,
            PauseMode::InPlace | PauseMode::Retract | PauseMode::Keep
        )
    }
}

/// What a control call means, whatever its native spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAction {
    /// Stop generating (SGLang `POST /pause_generation`, vLLM `POST /pause`).
    Pause {
        /// How in-flight requests are treated.
        mode: PauseMode,
    },
    /// Generate again (SGLang `POST /continue_generation`, vLLM `POST /resume`).
    Resume,
    /// Drop the prefix cache (SGLang `/flush_cache`, vLLM `POST /reset_prefix_cache`).
    FlushCache,
    /// Load new weights (SGLang `/update_weights_from_disk`, `…_from_distributed`,
    /// `…_from_tensor`). A success moves the worker to `version` when the call names one.
    UpdateWeights {
        /// The weight version the call sets (SGLang's `weight_version` body key), if any.
        version: Option<String>,
    },
    /// Prepare a weight transfer (SGLang `/init_weights_update_group`): no routing effect.
    InitWeightsGroup,
    /// Tag the loaded weights with a version (SGLang / vLLM `/update_weight_version`).
    SetWeightVersion {
        /// The new version.
        version: String,
    },
    /// Ask whether generation is paused (vLLM `GET /is_paused`): read-only.
    IsPaused,
    /// Ask for the weight version (SGLang `GET /get_weight_version`, vLLM `GET /weight_info`):
    /// read-only.
    WeightInfo,
}

impl ControlAction {
    /// Stable snake_case label (metrics, logs): `pause`, `resume`, `flush_cache`,
    /// `update_weights`, `init_weights_group`, `set_weight_version`, `is_paused`, `weight_info`.
    pub fn label(&self) -> &'static str {
        match self {
            ControlAction::Pause { .. } => "pause",
            ControlAction::Resume => "resume",
            ControlAction::FlushCache => "flush_cache",
            ControlAction::UpdateWeights { .. } => "update_weights",
            ControlAction::InitWeightsGroup => "init_weights_group",
            ControlAction::SetWeightVersion { .. } => "set_weight_version",
            ControlAction::IsPaused => "is_paused",
            ControlAction::WeightInfo => "weight_info",
        }
    }

    /// Whether the call changes nothing on the engine.
    pub fn is_read_only(&self) -> bool {
        matches!(self, ControlAction::IsPaused | ControlAction::WeightInfo)
    }
}

/// One native control call for one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlCall {
    /// The native API the call is spelled in (`"sglang"`, `"vllm"`).
    pub format: &'static str,
    /// What it means.
    pub action: ControlAction,
    /// HTTP method (`GET`, `POST`).
    pub method: String,
    /// The engine's own path, e.g. `/pause_generation`.
    pub path: String,
    /// The engine's own query string without `?` (genfront's own parameters removed), e.g.
    /// `mode=keep`; empty for none.
    pub query: String,
    /// The body as the client sent it (may be empty).
    pub body: Bytes,
    /// How long the engine may take to answer; the call then fails with
    /// [`crate::ErrorKind::Timeout`].
    pub timeout: Duration,
}

/// One engine's answer to a [`ControlCall`]: its own status, content type and body, unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlReply {
    /// HTTP status the engine answered (200 on success).
    pub status: u16,
    /// Its `Content-Type`, when it sent one.
    pub content_type: Option<String>,
    /// Its body.
    pub body: Bytes,
}

impl ControlReply {
    /// A JSON answer.
    pub fn json(status: u16, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            content_type: Some("application/json".to_owned()),
            body: body.into(),
        }
    }

    /// Whether the engine reports success (a 2xx status).
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The future of one [`crate::Engine::control`] call.
pub type ControlFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ControlReply, EngineError>> + Send + 'a>>;
