//! One worker of the registry: identity, role, state, model facts, load and breaker.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use genfront_protocol::{Engine, EngineInfo};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::breaker::{Breaker, BreakerConfig, BreakerState};
use crate::metrics::WorkerHandles;

/// A worker's stable id: unique in one router, shown in logs, metrics (`worker` label), the
/// `x-genfront-worker` response header and trace records; a client may pin a request to it with
/// the same request header (for debugging).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(Arc<str>);

impl WorkerId {
    /// An id from any string.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What part of a generation a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Prefill and decode on one engine (the ordinary deployment).
    Aggregated,
    /// The prefill side of a prefill/decode pair.
    Prefill,
    /// The decode side of a prefill/decode pair.
    Decode,
}

impl Role {
    /// `agg`, `prefill` or `decode` (the `role` metric label).
    pub fn label(self) -> &'static str {
        match self {
            Role::Aggregated => "agg",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// Lifecycle state of a worker. Only [`WorkerState::Ready`] workers (whose breaker admits) take
/// new requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WorkerState {
    /// Not connected yet: its facts are unknown; the router retries the connection with backoff.
    Connecting = 0,
    /// Connected and passing its health probes.
    Ready = 1,
    /// Connected but failing its health probes.
    Unhealthy = 2,
    /// Taking no new requests; in-flight ones finish (operator action).
    Draining = 3,
    /// Generation paused on the engine (fleet control); taking no new requests.
    Paused = 4,
}

impl WorkerState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => WorkerState::Ready,
            2 => WorkerState::Unhealthy,
            3 => WorkerState::Draining,
            4 => WorkerState::Paused,
            _ => WorkerState::Connecting,
        }
    }

    /// `connecting`, `ready`, `unhealthy`, `draining` or `paused`.
    pub fn label(self) -> &'static str {
        match self {
            WorkerState::Connecting => "connecting",
            WorkerState::Ready => "ready",
            WorkerState::Unhealthy => "unhealthy",
            WorkerState::Draining => "draining",
            WorkerState::Paused => "paused",
        }
    }

    /// Every state, in `repr` order (for metrics).
    pub const ALL: [WorkerState; 5] = [
        WorkerState::Connecting,
        WorkerState::Ready,
        WorkerState::Unhealthy,
        WorkerState::Draining,
        WorkerState::Paused,
    ];
}

/// In-flight load of one worker, kept by [`LoadGuard`]s.
#[derive(Debug, Default)]
pub struct Load {
    requests: AtomicU64,
    tokens: AtomicU64,
}

impl Load {
    /// Engine requests in flight.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Tokens in flight: prompt tokens plus requested new tokens of every in-flight request.
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }
}

/// What a worker gets from its router: its breaker thresholds, the token that stops its tasks
/// when it is removed (a child of the router's), and the notifier of state changes that pause
/// waits watch.
pub(crate) struct WorkerLinks {
    pub(crate) breaker: BreakerConfig,
    pub(crate) stop: CancellationToken,
    pub(crate) changed: Arc<Notify>,
}

/// One worker: an engine behind an id, with the router's view of it.
pub struct Worker {
    pub(crate) id: WorkerId,
    pub(crate) url: String,
    pub(crate) kind: Option<Arc<str>>,
    pub(crate) role: Role,
    /// How a prefill worker hands its KV on (`None`: not a prefill worker, or SGLang style at
    /// its URL's host).
    pub(crate) handoff: Option<genfront_protocol::Handoff>,
    state: AtomicU8,
    engine: OnceLock<Arc<dyn Engine>>,
    pub(crate) load: Load,
    pub(crate) breaker: Mutex<Breaker>,
    pub(crate) handles: WorkerHandles,
    /// Consecutive probe outcomes (positive: successes, negative: failures).
    pub(crate) probe_streak: Mutex<i32>,
    pub(crate) since: Mutex<Instant>,
    /// Its last weight update failed (fleet control): out of rotation until one succeeds.
    weights_failed: AtomicBool,
    /// Its weight version as fleet control last set or read it (`None`: not known).
    weight_version: Mutex<Option<String>>,
    /// Fired when the worker is removed: stops its connect and probe tasks.
    pub(crate) stop: CancellationToken,
    /// Told about every state change (pause waits watch it).
    changed: Arc<Notify>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("kind", &self.kind)
            .field("role", &self.role)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Worker {
    pub(crate) fn new(
        id: WorkerId,
        url: String,
        kind: Option<Arc<str>>,
        role: Role,
        handoff: Option<genfront_protocol::Handoff>,
        handles: WorkerHandles,
        links: WorkerLinks,
    ) -> Self {
        let WorkerLinks {
            breaker,
            stop,
            changed,
        } = links;
        let w = Self {
            id,
            url,
            kind,
            role,
            handoff,
            state: AtomicU8::new(WorkerState::Connecting as u8),
            engine: OnceLock::new(),
            load: Load::default(),
            breaker: Mutex::new(Breaker::new(breaker)),
            handles,
            probe_streak: Mutex::new(0),
            since: Mutex::new(Instant::now()),
            weights_failed: AtomicBool::new(false),
            weight_version: Mutex::new(None),
            stop,
            changed,
        };
        w.handles.set_state(WorkerState::Connecting);
        w.handles.set_breaker(BreakerState::Closed);
        w
    }

    /// The worker's id.
    pub fn id(&self) -> &WorkerId {
        &self.id
    }

    /// Where the worker is (`http://host:port`, `grpc://…`, `mock`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The native format its engine speaks (`"sglang"`, `"vllm"`), when it has one.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Its current state.
    pub fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Its in-flight load.
    pub fn load(&self) -> &Load {
        &self.load
    }

    /// Its engine's model facts, once connected.
    pub fn facts(&self) -> Option<&EngineInfo> {
        self.engine.get().map(|e| e.info())
    }

    /// Its engine, once connected.
    pub fn engine(&self) -> Option<&Arc<dyn Engine>> {
        self.engine.get()
    }

    /// Whether its last weight update failed (it then takes no traffic until one succeeds).
    pub fn weights_failed(&self) -> bool {
        self.weights_failed.load(Ordering::Acquire)
    }

    /// Its weight version, as fleet control last set or read it (`None`: not known yet).
    pub fn weight_version(&self) -> Option<String> {
        self.weight_version
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The native format of its engine: the kind it was added with, else what its connected
    /// engine reports ([`Engine::native_format`]: a sidecar states its engine's); `None` for
    /// the mocker (it speaks every format) or a worker not connected yet. Requests of a format
    /// prefer workers of that native kind.
    pub fn native_kind(&self) -> Option<&str> {
        self.kind()
            .or_else(|| self.engine().and_then(|e| e.native_format()))
    }

    /// Whether this worker answers `format`'s control calls: its native kind is `format`, or it
    /// has none (the mocker speaks every format).
    pub fn speaks(&self, format: &str) -> bool {
        self.native_kind().is_none_or(|k| k == format)
    }

    pub(crate) fn set_weights_failed(&self, failed: bool) {
        let prev = self.weights_failed.swap(failed, Ordering::AcqRel);
        self.handles.weights_failed.set(i64::from(failed));
        if prev != failed {
            if failed {
                tracing::warn!(worker = %self.id, url = %self.url, "weight update failed: out of rotation until an update succeeds");
            } else {
                tracing::info!(worker = %self.id, url = %self.url, "weight update succeeded: back in rotation");
            }
            self.changed.notify_waiters();
        }
    }

    pub(crate) fn set_weight_version(&self, version: Option<String>) {
        if let Ok(mut v) = self.weight_version.lock() {
            *v = version;
        }
        self.changed.notify_waiters();
    }

    /// The breaker's state now (an open breaker whose cool-down elapsed reads as half-open).
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker
            .lock()
            .map(|b| b.state(Instant::now()))
            .unwrap_or(BreakerState::Open)
    }

    /// Install the connected engine and mark the worker ready. Returns false when an engine was
    /// already installed.
    pub(crate) fn connected(&self, engine: Arc<dyn Engine>) -> bool {
        if self.engine.set(engine).is_err() {
            return false;
        }
        self.set_state(WorkerState::Ready);
        true
    }

    /// Move to `state`, logging a change. Returns the previous state.
    pub(crate) fn set_state(&self, state: WorkerState) -> WorkerState {
        let prev = WorkerState::from_u8(self.state.swap(state as u8, Ordering::AcqRel));
        if prev != state {
            if let Ok(mut since) = self.since.lock() {
                *since = Instant::now();
            }
            self.handles.set_state(state);
            self.changed.notify_waiters();
            if state == WorkerState::Ready {
                tracing::info!(worker = %self.id, url = %self.url, from = prev.label(), to = state.label(), "worker state");
            } else {
                tracing::warn!(worker = %self.id, url = %self.url, from = prev.label(), to = state.label(), "worker state");
            }
        }
        prev
    }

    /// Move from `from` to `to` only if the worker is in `from` now.
    pub(crate) fn transition(&self, from: WorkerState, to: WorkerState) -> bool {
        let ok = self
            .state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if ok && from != to {
            if let Ok(mut since) = self.since.lock() {
                *since = Instant::now();
            }
            self.handles.set_state(to);
            self.changed.notify_waiters();
            tracing::info!(worker = %self.id, url = %self.url, from = from.label(), to = to.label(), "worker state");
        }
        ok
    }

    /// Whether a new request may be sent here now (ready, and the breaker admits traffic). Does
    /// not reserve the half-open trial: [`Worker::admit`] does.
    pub(crate) fn routable(&self, now: Instant) -> bool {
        self.state() == WorkerState::Ready
            && self.engine.get().is_some()
            && !self.weights_failed()
            && self.breaker.lock().is_ok_and(|b| b.would_admit(now))
    }

    /// Reserve a request slot at the breaker (takes the one half-open trial). False when the
    /// breaker refuses.
    pub(crate) fn admit(&self, now: Instant) -> bool {
        let Ok(mut b) = self.breaker.lock() else {
            return false;
        };
        let before = b.state(now);
        let ok = b.admit(now);
        let after = b.state(now);
        drop(b);
        if before != after {
            self.handles.set_breaker(after);
        }
        ok
    }

    /// A request outcome that proves the worker works (first output, or a clean end).
    pub(crate) fn record_success(&self) {
        let changed = self.breaker.lock().ok().and_then(|mut b| b.on_success());
        if let Some(state) = changed {
            self.handles.set_breaker(state);
            tracing::info!(worker = %self.id, breaker = state.label(), "circuit breaker");
        }
    }

    /// A request outcome that says the worker is broken (transport failure, 5xx).
    pub(crate) fn record_failure(&self) {
        let changed = self
            .breaker
            .lock()
            .ok()
            .and_then(|mut b| b.on_failure(Instant::now()));
        self.handles.failures.inc();
        if let Some(state) = changed {
            self.handles.set_breaker(state);
            tracing::warn!(worker = %self.id, breaker = state.label(), "circuit breaker");
        }
    }

    /// A request that was admitted but ended without telling whether the worker works (client
    /// 4xx, cancellation): releases a half-open trial without a verdict.
    pub(crate) fn record_neutral(&self) {
        if let Ok(mut b) = self.breaker.lock() {
            b.on_neutral();
        }
    }
}

/// Holds a worker's load for one engine request; released on drop (the response stream's end,
/// the client going away, or a retry moving to another worker).
#[derive(Debug)]
pub struct LoadGuard {
    worker: Arc<Worker>,
    tokens: u64,
}

impl LoadGuard {
    pub(crate) fn new(worker: Arc<Worker>, tokens: u64) -> Self {
        worker.load.requests.fetch_add(1, Ordering::Relaxed);
        worker.load.tokens.fetch_add(tokens, Ordering::Relaxed);
        worker.handles.in_flight.inc();
        worker.handles.in_flight_tokens.inc_by(tokens as i64);
        Self { worker, tokens }
    }

    /// The worker this guard holds load on.
    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.worker.load.requests.fetch_sub(1, Ordering::Relaxed);
        self.worker
            .load
            .tokens
            .fetch_sub(self.tokens, Ordering::Relaxed);
        self.worker.handles.in_flight.dec();
        self.worker
            .handles
            .in_flight_tokens
            .dec_by(self.tokens as i64);
    }
}
