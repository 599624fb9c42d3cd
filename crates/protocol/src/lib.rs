//! genfront's **engine contract**: the one request/response shape every backend speaks.
//!
//! A format plugin (`genfront-sglang`, `genfront-vllm`, …) projects a validated native request into an
//! [`EngineRequest`]; a worker ([`Engine`]) answers with a stream of [`EngineOutput`] *deltas* or a
//! typed [`EngineError`]. Because this shape is engine-neutral, any format can be served by any engine
//! that can honour the request's options.
//!
//! When the client's format is the engine's own, a format may ask for **relay**
//! ([`OutputOptions::relay`]) and an engine client of that format may answer with the engine's
//! native bytes ([`EngineOutput::native`], a [`NativeAnswer`]) instead of decoded deltas.
//!
//! Start reading at [`EngineRequest`] and [`Engine::generate`].

mod control;
mod engine;
mod error;
mod output;
mod pd;
mod request;

pub use control::{ControlAction, ControlCall, ControlFuture, ControlReply, PauseMode};
pub use engine::{
    Engine, EngineFeatures, EngineInfo, OutputStream, ProbeFuture, UNKNOWN_CONTEXT_LEN,
};
pub use error::{EngineError, ErrorKind, Fault, NativeError};
pub use output::{
    Candidate, EngineOutput, FinishReason, NativeAnswer, PromptLogprobs, RoutedExperts, StopMatch,
    TokenLogprob, Usage,
};
pub use pd::{Bootstrap, Handoff, PdLeg, PdMerge, PdRole};
pub use request::{
    Constraints, EngineRequest, LogitBias, NativeBody, OutputOptions, PromptLogprobOptions,
    RoutingHints, SamplingOptions, StopConditions, StructuredOutput,
};
