//! [`MockEngine`]: the [`Engine`] implementation, its shared state and its counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream;
use genfront_protocol::{
    ControlCall, ControlFuture, Engine, EngineError, EngineInfo, EngineRequest, OutputStream,
    PauseMode,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cache::PrefixCache;
use crate::control::{self, ControlRecord, ControlState};
use crate::model::Model;
use crate::rooms::RoomWaiter;
use crate::run::Run;
use crate::validate::validate;
use crate::{FaultAction, MockConfig, MockConfigError, ScriptedFault};

/// The in-process mock engine. Cheap to clone: clones share the prefix cache, counters and faults.
///
/// Timed configurations sleep on the tokio timer, so their streams must be polled inside a tokio
/// runtime with time enabled; [`MockConfig::zero_delay`] streams arm no timer and run on any
/// executor.
#[derive(Debug, Clone)]
pub struct MockEngine {
    shared: Arc<Shared>,
}

/// State shared by the engine and its running streams.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: MockConfig,
    pub(crate) model: Model,
    pub(crate) cache: PrefixCache,
    pub(crate) counters: Counters,
    faults: Mutex<Vec<ScriptedFault>>,
    /// Where a decode leg waits for its bootstrap room (`None`: the process registry).
    pub(crate) room_waiter: Option<Arc<dyn RoomWaiter>>,
    /// Fleet-control state: pause, weight version, failure knob, call log.
    pub(crate) control: ControlState,
}

impl Shared {
    /// Requests generating now (frozen ones included; held ones not).
    pub(crate) fn counters_running(&self) -> u64 {
        self.counters.running.load(Ordering::Acquire)
    }
}

/// Request counters. Invariant: `started = running + completed + aborted + failed`, and
/// `requests >= rejected + started` (the difference: streams dropped before their first poll).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    rejected: AtomicU64,
    started: AtomicU64,
    running: AtomicU64,
    completed: AtomicU64,
    aborted: AtomicU64,
    failed: AtomicU64,
}

/// A snapshot of a [`MockEngine`]'s counters (see the accessor methods for their meaning).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MockStats {
    /// `generate` calls.
    pub requests: u64,
    /// Requests answered with an `Err` before generating (invalid, or a scripted `error` fault).
    pub rejected: u64,
    /// Requests whose generation started (first poll of a valid request).
    pub started: u64,
    /// Requests generating now.
    pub running: u64,
    /// Requests whose every choice finished normally (EOS, stop, length).
    pub completed: u64,
    /// Requests ended by cancellation or by dropping the stream before they finished.
    pub aborted: u64,
    /// Requests ended by a scripted mid-stream failure (`Err` item or `FinishReason::Error`).
    pub failed: u64,
}

/// How a started request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Aborted,
    Failed,
}

/// RAII accounting for one started request: counts it as running until settled or dropped; a
/// guard dropped unsettled (the stream was dropped) counts as aborted.
#[derive(Debug)]
pub(crate) struct RunGuard {
    shared: Arc<Shared>,
    outcome: Outcome,
}

// === impl MockEngine ===

impl MockEngine {
    /// An engine for `config`.
    ///
    /// # Errors
    /// [`MockConfigError`] when `config` fails [`MockConfig::validate`].
    pub fn new(config: MockConfig) -> Result<Self, MockConfigError> {
        config.validate()?;
        Ok(Self::build(config, None))
    }

    /// An engine for `config` whose decode legs learn their bootstrap room's state from
    /// `waiter` instead of this process's registry (a prefill in another process).
    ///
    /// # Errors
    /// [`MockConfigError`] when `config` fails [`MockConfig::validate`].
    pub fn with_room_waiter(
        config: MockConfig,
        waiter: Arc<dyn RoomWaiter>,
    ) -> Result<Self, MockConfigError> {
        config.validate()?;
        Ok(Self::build(config, Some(waiter)))
    }

    /// An engine with [`MockConfig::zero_delay`]: no timers, for benchmarks and tests.
    pub fn zero_delay() -> Self {
        Self::build(MockConfig::zero_delay(), None)
    }

    fn build(config: MockConfig, room_waiter: Option<Arc<dyn RoomWaiter>>) -> Self {
        let info = &config.info;
        // `validate` (run by `new`) guarantees a known vocabulary; an unknown logprob cap
        // leaves the candidate count as configured.
        let model = Model::new(
            info.vocab_size.unwrap_or(1),
            config.candidates,
            info.max_logprobs.unwrap_or(0),
            config.seed,
            &info.eos_token_ids,
            config.eos_probability,
            config.experts,
        );
        let cache = PrefixCache::new(config.prefix_cache);
        let faults = Mutex::new(config.faults.clone());
        let control = ControlState::new(config.update_weights_fail.clone());
        Self {
            shared: Arc::new(Shared {
                config,
                model,
                cache,
                counters: Counters::default(),
                faults,
                room_waiter,
                control,
            }),
        }
    }

    /// The configuration this engine was built from (its `faults` as at construction; see
    /// [`MockEngine::faults`] for the live list).
    pub fn config(&self) -> &MockConfig {
        &self.shared.config
    }

    /// Model facts (the same as [`Engine::info`]).
    pub fn info(&self) -> &EngineInfo {
        &self.shared.config.info
    }

    /// Whether the engine accepts requests: always `true`.
    pub fn ready(&self) -> bool {
        true
    }

    /// Append a scripted fault; it applies to requests whose `generate` call comes after this.
    pub fn add_fault(&self, fault: ScriptedFault) {
        self.lock_faults().push(fault);
    }

    /// Remove every scripted fault.
    pub fn clear_faults(&self) {
        self.lock_faults().clear();
    }

    /// The scripted faults now in force, in the order they are checked.
    pub fn faults(&self) -> Vec<ScriptedFault> {
        self.lock_faults().clone()
    }

    fn lock_faults(&self) -> std::sync::MutexGuard<'_, Vec<ScriptedFault>> {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `generate` calls so far (scripted faults count requests in this order, from 1).
    pub fn requests(&self) -> u64 {
        self.shared.counters.requests.load(Ordering::Relaxed)
    }

    /// Requests answered with an `Err` before generating (invalid, or a scripted `error` fault).
    pub fn rejected(&self) -> u64 {
        self.shared.counters.rejected.load(Ordering::Relaxed)
    }

    /// Requests whose generation started (the first poll of a valid request's stream).
    pub fn started(&self) -> u64 {
        self.shared.counters.started.load(Ordering::Relaxed)
    }

    /// Requests in flight: started and not yet finished, cancelled, failed or dropped.
    pub fn running(&self) -> u64 {
        self.shared.counters.running.load(Ordering::Relaxed)
    }

    /// Requests whose every choice finished normally (EOS, stop token, length). Counted when the
    /// last finish item is produced.
    pub fn completed(&self) -> u64 {
        self.shared.counters.completed.load(Ordering::Relaxed)
    }

    /// Requests ended by cancellation (counted with the last `Cancelled` item) or by dropping the
    /// stream before the request finished.
    pub fn aborted(&self) -> u64 {
        self.shared.counters.aborted.load(Ordering::Relaxed)
    }

    /// Requests ended by a scripted mid-stream failure (an `Err` item or `FinishReason::Error`).
    pub fn failed(&self) -> u64 {
        self.shared.counters.failed.load(Ordering::Relaxed)
    }

    /// All counters at once.
    pub fn stats(&self) -> MockStats {
        MockStats {
            requests: self.requests(),
            rejected: self.rejected(),
            started: self.started(),
            running: self.running(),
            completed: self.completed(),
            aborted: self.aborted(),
            failed: self.failed(),
        }
    }

    /// Number of blocks now in the prefix cache.
    pub fn cached_blocks(&self) -> usize {
        self.shared.cache.len()
    }

    /// The pause in force (`None`: generating). See [`Engine::control`].
    pub fn pause_mode(&self) -> Option<PauseMode> {
        self.shared.control.pause_mode()
    }

    /// Whether a pause is in force (new requests are held until a resume).
    pub fn is_paused(&self) -> bool {
        self.shared.control.is_paused()
    }

    /// The weight version set by a weight update or `SetWeightVersion`; `None` until then (the
    /// engines then report `"default"`).
    pub fn weight_version(&self) -> Option<String> {
        self.shared.control.version().map(|v| v.to_string())
    }

    /// Turn the weight-update failure knob on (`Some(message)`; an empty message means the
    /// engine's own default text) or off (`None`). While on, every weight update answers the
    /// engine's failure (SGLang 400 `{"success":false,"message":…}`, vLLM 500) and leaves the
    /// weight version unchanged, as the oracle's `update_weights_fail` config does.
    pub fn set_update_weights_fail(&self, message: Option<String>) {
        self.shared.control.set_update_fail(message);
    }

    /// The weight-update failure knob (see [`MockEngine::set_update_weights_fail`]).
    pub fn update_weights_fail(&self) -> Option<String> {
        self.shared.control.update_fail()
    }

    /// Every control call received so far, oldest first (at most
    /// [`crate::CONTROL_LOG_CAPACITY`], the oldest dropped first).
    pub fn control_log(&self) -> Vec<ControlRecord> {
        self.shared.control.log()
    }

    /// Forget the recorded control calls.
    pub fn clear_control_log(&self) {
        self.shared.control.clear_log();
    }
}

impl Default for MockEngine {
    /// An engine with [`MockConfig::default`] (realistic timing).
    fn default() -> Self {
        Self::build(MockConfig::default(), None)
    }
}

impl Engine for MockEngine {
    fn info(&self) -> &EngineInfo {
        MockEngine::info(self)
    }

    fn ready(&self) -> bool {
        MockEngine::ready(self)
    }

    /// Validates at once (an invalid request's stream is one `Err`), then generates lazily as the
    /// stream is polled. See the crate docs for the output shape.
    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        let counters = &self.shared.counters;
        let number = counters.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let reject = |error: EngineError| -> OutputStream {
            counters.rejected.fetch_add(1, Ordering::Relaxed);
            Box::pin(stream::iter([Err(error)]))
        };
        if let Err(error) = validate(&self.shared.config.info, &request) {
            return reject(error);
        }
        if let Some(role) = self.shared.config.role {
            let leg = request.pd.as_ref().map(|p| p.role);
            if leg != Some(role) {
                return reject(EngineError::invalid_argument(match role {
                    genfront_protocol::PdRole::Decode => {
                        "This server runs in decode mode: a request needs the hand-off from its prefill (bootstrap_room, or kv_transfer_params with do_remote_prefill)."
                    }
                    genfront_protocol::PdRole::Prefill => {
                        "This server runs in prefill mode: a request needs bootstrap_room or kv_transfer_params with do_remote_decode."
                    }
                }));
            }
        }
        if self.shared.control.refuses_new() {
            // vLLM refuses new requests during an abort or wait pause (RetryableRequestError).
            return reject(
                EngineError::unavailable(crate::control::VLLM_PAUSED_MESSAGE).with_status(503),
            );
        }
        let fault = self
            .lock_faults()
            .iter()
            .find(|f| f.applies_to(number))
            .map(|f| f.action.clone());
        if let Some(FaultAction::Error { kind, message }) = fault {
            return reject(EngineError::new(kind, message));
        }
        Run::new(Arc::clone(&self.shared), request, cancel, fault).into_stream()
    }

    /// Acts on [`ControlCall::action`] and answers in the native shape of
    /// [`ControlCall::format`] (`"sglang"` or `"vllm"`; another format is `Unsupported`). See
    /// the crate docs' "Fleet control" for the answers and the pause semantics. A `Pause` with
    /// `abort` or `wait` waits (within `call.timeout`, on the tokio timer) for the requests in
    /// flight to end: `Timeout` when they do not.
    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        Box::pin(control::control(&self.shared, call))
    }
}

// === impl RunGuard ===

impl RunGuard {
    /// Count a request as started and running.
    pub(crate) fn start(shared: &Arc<Shared>) -> Self {
        let c = &shared.counters;
        c.started.fetch_add(1, Ordering::Relaxed);
        c.running.fetch_add(1, Ordering::Relaxed);
        Self {
            shared: Arc::clone(shared),
            outcome: Outcome::Aborted,
        }
    }

    /// End the request with `outcome` (dropping the guard unsettled means aborted).
    pub(crate) fn settle(mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let c = &self.shared.counters;
        let counter = match self.outcome {
            Outcome::Completed => &c.completed,
            Outcome::Aborted => &c.aborted,
            Outcome::Failed => &c.failed,
        };
        // Count the outcome first, so `running() == 0` implies the outcome is visible.
        counter.fetch_add(1, Ordering::Relaxed);
        if c.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.control.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests;
