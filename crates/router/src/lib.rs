//! genfront's **router**: which engine worker gets each engine request, and what happens when
//! one fails.
//!
//! It owns the worker registry ([`Worker`]: id, URL, engine kind, [`Role`], [`WorkerState`],
//! model facts), load accounting ([`Load`], released by a [`LoadGuard`] tied to the output
//! stream), the routing [policies](policy) (default `prefix`), active health probes
//! ([`Engine::probe`]) with rise/fall thresholds, a per-worker circuit [breaker], and retries
//! before the first output on another worker. The shared HTTP handler calls one seam,
//! [`Router::dispatch`], and holds no routing code.
//!
//! Rules (see `docs/routing.md`):
//! - Workers given by address start in [`WorkerState::Connecting`]; the router connects in the
//!   background with exponential backoff and logs every state change. Start-up never waits.
//! - A request goes only to a *routable* worker (ready, breaker admitting). When none can take it,
//!   [`Router::dispatch`] fails at once with [`NoWorker`] (the frontend answers 503
//!   `no_available_workers` with `Retry-After`) — never a wait for a timeout.
//! - Passive failure accrual counts only worker failures
//!   ([`EngineError::is_worker_failure`]: transport errors and 5xx other than the backpressure
//!   503), never 4xx or 429.
//! - Retry: a request whose attempt fails **before its first output** with a connect failure,
//!   502/503/504 or an early close ([`EngineError::retry_elsewhere`]) is sent to another
//!   routable worker — at most [`RetryConfig::max_retries`] times, with exponential backoff,
//!   within a retry budget. After the first output there is never a silent re-generation: the
//!   error goes to the client (the format renders its native error event).
//!
//! Start at [`Router::dispatch`].

pub mod breaker;
pub mod control;
mod dispatch;
mod health;
pub mod metrics;
pub mod pd;
pub mod policy;
mod worker;

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use breaker::{BreakerConfig, BreakerState};
use futures::future::BoxFuture;
use genfront_protocol::{Engine, EngineInfo, EngineRequest, OutputStream, RoutingHints};
pub use metrics::RouterMetrics;
pub use policy::{AffinityConfig, PolicyKind, RouteRequest, rid_lineage};
use tokio_util::sync::CancellationToken;
pub use worker::{Load, LoadGuard, Role, Worker, WorkerId, WorkerState};

#[cfg(doc)]
use genfront_protocol::EngineError;

use crate::policy::Policy;

/// Retries before the first output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryConfig {
    /// Most extra attempts per engine request (`--retry-max`). 0 disables retries. Default 2.
    pub max_retries: u32,
    /// Backoff before the first retry, doubled for each further one, with ±50% jitter
    /// (`--retry-backoff`). Default 20 ms.
    pub backoff: Duration,
    /// Retry budget: retries may add at most this share of the requests (`--retry-budget`),
    /// plus [`RetryConfig::budget_floor`]. Default 0.2.
    pub budget_ratio: f64,
    /// Retries always allowed before the ratio applies (the budget's starting balance and its
    /// minimum refill). Default 10.
    pub budget_floor: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 2,
            backoff: Duration::from_millis(20),
            budget_ratio: 0.2,
            budget_floor: 10,
        }
    }
}

/// Active health probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Time between probes of one worker (`--health-interval`). Default 2 s.
    pub interval: Duration,
    /// Time one probe may take (`--health-timeout`); a slower answer is a failure. Default 2 s.
    pub timeout: Duration,
    /// Consecutive failed probes that make a ready worker unhealthy (`--health-fall`). Default 2.
    pub fall: u32,
    /// Consecutive passing probes that make an unhealthy worker ready (`--health-rise`).
    /// Default 1.
    pub rise: u32,
    /// First delay between connection attempts to a worker that is not up yet; doubled up to
    /// [`HealthConfig::connect_backoff_max`]. Default 100 ms.
    pub connect_backoff: Duration,
    /// Longest delay between connection attempts. Default 5 s.
    pub connect_backoff_max: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
            fall: 2,
            rise: 1,
            connect_backoff: Duration::from_millis(100),
            connect_backoff_max: Duration::from_secs(5),
        }
    }
}

/// Router configuration.
#[derive(Debug, Clone, Default)]
pub struct RouterConfig {
    /// Policy for aggregated workers (`--policy`).
    pub policy: PolicyKind,
    /// Policy for prefill workers (`--prefill-policy`); default: [`RouterConfig::policy`].
    pub prefill_policy: Option<PolicyKind>,
    /// Policy for decode workers (`--decode-policy`); default: [`RouterConfig::policy`].
    pub decode_policy: Option<PolicyKind>,
    /// Prefix and session affinity tuning.
    pub affinity: AffinityConfig,
    /// Circuit breaker thresholds.
    pub breaker: BreakerConfig,
    /// Retries before the first output.
    pub retry: RetryConfig,
    /// Health probes and connection backoff.
    pub health: HealthConfig,
    /// During a refit, route only to workers on the fleet's current weight version (the version
    /// of the last successful weight update or version tag through fleet control)
    /// (`--route-current-version`). Default off.
    pub route_current_version: bool,
}

impl RouterConfig {
    /// Check the values make sense.
    ///
    /// # Errors
    /// A message naming the flag and the accepted range.
    pub fn validate(&self) -> Result<(), String> {
        let a = &self.affinity;
        if a.block_tokens == 0 {
            return Err("--prefix-block-tokens must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&a.cache_threshold) {
            return Err("--prefix-cache-threshold must be in [0, 1]".into());
        }
        if !(a.balance_rel.is_finite() && a.balance_rel >= 1.0) {
            return Err("--balance-rel must be a finite number of at least 1".into());
        }
        let r = &self.retry;
        if !(r.budget_ratio.is_finite() && r.budget_ratio >= 0.0) {
            return Err("--retry-budget must be a finite number of at least 0".into());
        }
        let h = &self.health;
        if h.interval.is_zero() {
            return Err("--health-interval must be above 0".into());
        }
        if h.timeout.is_zero() {
            return Err("--health-timeout must be above 0".into());
        }
        Ok(())
    }
}

/// How to reach a worker that is added by address: connect and learn its facts. Called again
/// (with backoff) until it succeeds.
pub type Connector =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Engine>, String>> + Send + Sync>;

/// Builds a worker from its spec string (`sglang=URL[#FACTS]`, `vllm=URL`, `grpc://HOST:PORT`, as
/// `--worker` takes it) for a role: the binary's connector factory, used by the admin API
/// (`POST /workers`) and discovery. `Err`: a message naming what is wrong with the spec.
pub type WorkerFactory =
    Arc<dyn Fn(&str, Role) -> Result<(WorkerSpec, Connector), String> + Send + Sync>;

/// A worker to add.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Its id; default `<kind>-<n>` (`sglang-0`, `vllm-1`, `grpc-2`, `mock-0`, …).
    pub id: Option<String>,
    /// Where it is (for logs): `http://host:port`, `grpc://…`, `mock`.
    pub url: String,
    /// Native format of its engine (`"sglang"`, `"vllm"`); requests of that format prefer it.
    pub kind: Option<String>,
    /// Its role.
    pub role: Role,
    /// For a prefill worker: how it hands the KV cache to decode (SGLang bootstrap host/port, or
    /// vLLM `kv_transfer_params`). `None`: SGLang style at the URL's host, port from the worker's
    /// server info or 8998.
    pub handoff: Option<genfront_protocol::Handoff>,
}

impl WorkerSpec {
    /// An aggregated worker at `url` of native `kind`.
    pub fn new(url: impl Into<String>, kind: Option<&str>) -> Self {
        Self {
            id: None,
            url: url.into(),
            kind: kind.map(str::to_owned),
            role: Role::Aggregated,
            handoff: None,
        }
    }
}

/// Why no worker could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoWorker {
    /// The role that had no routable worker.
    pub role: Role,
    /// `no_routable_worker`, `pinned_worker_unavailable`, `unknown_worker` or
    /// `pinned_role_mismatch` (a prefill or decode worker pinned alone, or an aggregated one as
    /// half of a pair).
    pub reason: &'static str,
}

impl std::fmt::Display for NoWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no available {} worker ({})",
            self.role.label(),
            self.reason
        )
    }
}

impl std::error::Error for NoWorker {}

/// What the frontend knows about a request that routing may use.
#[derive(Debug, Clone, Default)]
pub struct RouteContext {
    /// Format of the request (`"sglang"`, `"vllm"`): workers of that native kind are preferred.
    pub format: &'static str,
    /// `X-Session-ID` header.
    pub session_id: Option<String>,
    /// `X-SMG-Routing-Key` header.
    pub routing_key: Option<String>,
    /// The client's request id (SGLang `rid`, vLLM `request_id`), for rid-lineage affinity.
    pub rid: Option<String>,
    /// `x-genfront-worker` header: pin to this worker id (debugging).
    pub pinned: Option<String>,
    /// The format's prefill/decode merge (P/D answers are folded by it); `None`: the typed
    /// merge ([`pd::TypedMerge`]).
    pub pd_merge: Option<Arc<dyn genfront_protocol::PdMerge>>,
}

impl RouteContext {
    /// The session affinity key: `X-Session-ID`, else the routing key header, else the
    /// request's own session hint (SGLang `routing_key` / session params, projected by the
    /// format), else the rid lineage ([`rid_lineage`]).
    pub fn session_key<'a>(&'a self, hints: &'a RoutingHints) -> Option<&'a str> {
        self.session_id
            .as_deref()
            .or(self.routing_key.as_deref())
            .or(hints.session_id.as_deref())
            .or_else(|| self.rid.as_deref().map(rid_lineage))
            .filter(|k| !k.is_empty())
    }
}

/// A dispatched engine request.
pub struct Dispatched {
    /// The worker chosen first (a retry before the first output may move it; see
    /// [`Dispatched::served_by`]); for a P/D pair, the decode worker.
    pub worker: WorkerId,
    /// For a P/D pair, the prefill worker.
    pub prefill_worker: Option<WorkerId>,
    /// The output stream. Dropping it aborts the work and releases the worker's load.
    pub stream: OutputStream,
    served_by: Arc<std::sync::Mutex<WorkerId>>,
}

impl std::fmt::Debug for Dispatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatched")
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl Dispatched {
    /// A handle that names the worker serving the request now (after retries).
    pub fn served_by(&self) -> ServedBy {
        ServedBy(self.served_by.clone())
    }
}

/// Names the worker currently serving a dispatched request (see [`Dispatched::served_by`]).
#[derive(Debug, Clone)]
pub struct ServedBy(Arc<std::sync::Mutex<WorkerId>>);

impl ServedBy {
    /// The worker's id.
    pub fn get(&self) -> WorkerId {
        self.0
            .lock()
            .map(|w| w.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

/// A retry budget: a balance of retries, refilled by each request (Finagle-style).
#[derive(Debug)]
struct RetryBudget {
    /// Balance in thousandths of a retry.
    milli: AtomicI64,
    per_request: i64,
    cap: i64,
}

impl RetryBudget {
    fn new(c: &RetryConfig) -> Self {
        let floor = i64::from(c.budget_floor) * 1000;
        Self {
            milli: AtomicI64::new(floor),
            per_request: (c.budget_ratio.clamp(0.0, 10.0) * 1000.0) as i64,
            cap: floor.max(100_000),
        }
    }

    fn deposit(&self) {
        let _ = self
            .milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((v + self.per_request).min(self.cap))
            });
    }

    fn withdraw(&self) -> bool {
        self.milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v >= 1000).then_some(v - 1000)
            })
            .is_ok()
    }
}

/// The router: a registry of workers and the policies that choose among them.
pub struct Router {
    config: RouterConfig,
    workers: RwLock<Vec<Arc<Worker>>>,
    agg: Policy,
    prefill: Policy,
    decode: Policy,
    metrics: RouterMetrics,
    budget: RetryBudget,
    /// Requests decided between an aggregated worker and a P/D pair at equal load: alternated, so
    /// neither kind starves the other at low concurrency.
    mixed_ties: std::sync::atomic::AtomicU64,
    /// Fired on drop: stops connect and probe tasks.
    stop: CancellationToken,
    /// Told about every worker state change (pause waits).
    changed: Arc<tokio::sync::Notify>,
    /// The fleet's current weight version per engine format, and the last one set (see
    /// [`RouterConfig::route_current_version`]).
    current_version: std::sync::Mutex<control::CurrentVersions>,
    /// Builds workers from spec strings ([`Router::add_by_spec`]).
    factory: std::sync::OnceLock<WorkerFactory>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("policy", &self.agg.kind())
            .field("workers", &self.workers())
            .finish_non_exhaustive()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Router {
    /// A router with no workers yet; its series go to `metrics`.
    pub fn new(config: RouterConfig, metrics: RouterMetrics) -> Arc<Self> {
        let policy = |k: Option<PolicyKind>| {
            Policy::new(k.unwrap_or(config.policy), config.affinity, metrics.clone())
        };
        Arc::new(Self {
            agg: policy(None),
            prefill: policy(config.prefill_policy),
            decode: policy(config.decode_policy),
            budget: RetryBudget::new(&config.retry),
            config,
            workers: RwLock::new(Vec::new()),
            metrics,
            mixed_ties: std::sync::atomic::AtomicU64::new(0),
            stop: CancellationToken::new(),
            changed: Arc::new(tokio::sync::Notify::new()),
            current_version: std::sync::Mutex::new(control::CurrentVersions::default()),
            factory: std::sync::OnceLock::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// The metric families.
    pub fn metrics(&self) -> &RouterMetrics {
        &self.metrics
    }

    fn register(&self, spec: WorkerSpec) -> Arc<Worker> {
        let mut workers = self.workers.write().unwrap_or_else(|e| e.into_inner());
        let taken: HashSet<&str> = workers.iter().map(|w| w.id().as_str()).collect();
        let id = match spec.id {
            Some(id) => {
                let mut id = id;
                let base = id.clone();
                let mut k = 1;
                while taken.contains(id.as_str()) {
                    id = format!("{base}-{k}");
                    k += 1;
                }
                id
            }
            None => {
                let kind = spec
                    .kind
                    .as_deref()
                    .unwrap_or(if spec.url.starts_with("grpc") {
                        "grpc"
                    } else {
                        "mock"
                    });
                let prefix = match spec.role {
                    Role::Aggregated => kind.to_owned(),
                    r => format!("{}-{kind}", r.label()),
                };
                (0..)
                    .map(|n| format!("{prefix}-{n}"))
                    .find(|c| !taken.contains(c.as_str()))
                    .unwrap_or(prefix)
            }
        };
        let handles = self.metrics.worker(&id, spec.role);
        let worker = Arc::new(Worker::new(
            WorkerId::new(id),
            spec.url,
            spec.kind.map(Arc::from),
            spec.role,
            spec.handoff,
            handles,
            worker::WorkerLinks {
                breaker: self.config.breaker,
                stop: self.stop.child_token(),
                changed: self.changed.clone(),
            },
        ));
        workers.push(worker.clone());
        drop(workers);
        self.changed.notify_waiters();
        worker
    }

    /// Add a worker whose engine is already connected (in-process mocks, tests). It is ready at
    /// once; health probes start when a Tokio runtime is available.
    pub fn add_engine(&self, spec: WorkerSpec, engine: Arc<dyn Engine>) -> WorkerId {
        let worker = self.register(spec);
        worker.connected(engine);
        health::spawn_probes(&worker, self.config.health, worker.stop.clone());
        worker.id().clone()
    }

    /// Add a worker reached by `connect`: it starts `connecting`, and a background task (needs a
    /// Tokio runtime) connects with backoff, then probes it.
    pub fn add_worker(&self, spec: WorkerSpec, connect: Connector) -> WorkerId {
        let worker = self.register(spec);
        health::spawn_connect(&worker, connect, self.config.health, worker.stop.clone());
        worker.id().clone()
    }

    /// Install the factory [`Router::add_by_spec`] builds workers with (once; later calls are
    /// ignored and return false).
    pub fn set_factory(&self, factory: WorkerFactory) -> bool {
        self.factory.set(factory).is_ok()
    }

    /// Add a worker from its spec string (`sglang=URL[#FACTS]`, `vllm=URL`, `grpc://HOST:PORT`)
    /// in `role`, with id `id` when given (a taken id gets a `-1`, `-2`, … suffix): the admin
    /// API's `POST /workers` and discovery use this. It starts `connecting` like
    /// [`Router::add_worker`].
    ///
    /// # Errors
    /// No factory installed ([`Router::set_factory`]), or the factory refused the spec (its
    /// message).
    pub fn add_by_spec(
        &self,
        spec: &str,
        role: Role,
        id: Option<&str>,
    ) -> Result<WorkerId, String> {
        let factory = self
            .factory
            .get()
            .ok_or_else(|| "this server cannot add workers at run time".to_owned())?;
        let (mut worker, connect) = factory(spec, role)?;
        if let Some(id) = id {
            if id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control() || c == '/') {
                return Err(format!(
                    "invalid worker id `{id}`: 1 to 128 characters, no `/` and no control characters"
                ));
            }
            worker.id = Some(id.to_owned());
        }
        Ok(self.add_worker(worker, connect))
    }

    /// Remove worker `id`: it takes no new requests at once (`draining`), the requests in flight
    /// on it may finish for up to `drain` (then they are left to end on their own: their streams
    /// still hold the worker), and it leaves the registry, its probes stop and its metric series
    /// are dropped. Returns `None` for an unknown id, else the requests still in flight when it
    /// was removed (0 after a clean drain).
    pub async fn remove_worker(&self, id: &str, drain: Duration) -> Option<u64> {
        let worker = self.worker(id)?;
        worker.set_state(WorkerState::Draining);
        let deadline = tokio::time::Instant::now() + drain;
        while worker.load().requests() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left = worker.load().requests();
        {
            let mut workers = self.workers.write().unwrap_or_else(|e| e.into_inner());
            workers.retain(|w| !Arc::ptr_eq(w, &worker));
        }
        worker.stop.cancel();
        self.metrics
            .forget_worker(worker.id().as_str(), worker.role());
        self.changed.notify_waiters();
        tracing::info!(worker = %worker.id(), url = %worker.url(), in_flight = left, "worker removed");
        Some(left)
    }

    /// Every worker, in the order they were added.
    pub fn workers(&self) -> Vec<Arc<Worker>> {
        self.workers
            .read()
            .map(|w| w.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The worker with id `id`.
    pub fn worker(&self, id: &str) -> Option<Arc<Worker>> {
        self.workers
            .read()
            .ok()?
            .iter()
            .find(|w| w.id().as_str() == id)
            .cloned()
    }

    /// Set a worker's state by hand (`draining`, `paused`, back to `ready`). Returns false for an
    /// unknown id or a worker that is not connected yet.
    pub fn set_state(&self, id: &str, state: WorkerState) -> bool {
        match self.worker(id) {
            Some(w) if w.engine().is_some() => {
                w.set_state(state);
                true
            }
            _ => false,
        }
    }

    fn policy(&self, role: Role) -> &Policy {
        match role {
            Role::Aggregated => &self.agg,
            Role::Prefill => &self.prefill,
            Role::Decode => &self.decode,
        }
    }

    /// Routable workers of `role` for `format`: those of that native kind when any is routable,
    /// else every routable worker of the role (any engine can serve any format) — except while
    /// workers of that native kind are paused (fleet control): then the format's requests wait
    /// for them rather than run on other engines. With `--route-current-version`, only workers
    /// on their kind's current weight version, when any such worker is routable.
    fn candidates(&self, role: Role, format: &str, exclude: &[WorkerId]) -> Vec<Arc<Worker>> {
        let now = Instant::now();
        let workers = self.workers.read().unwrap_or_else(|e| e.into_inner());
        let usable: Vec<Arc<Worker>> = workers
            .iter()
            .filter(|w| w.role() == role && !exclude.contains(w.id()) && w.routable(now))
            .cloned()
            .collect();
        let usable = self.on_current_versions(usable, format);
        let native: Vec<Arc<Worker>> = usable
            .iter()
            .filter(|w| w.native_kind() == Some(format))
            .cloned()
            .collect();
        if !native.is_empty() {
            return native;
        }
        let own_paused = workers.iter().any(|w| {
            w.role() == role && w.native_kind() == Some(format) && w.state() == WorkerState::Paused
        });
        if own_paused { Vec::new() } else { usable }
    }

    /// Whether a request of `format` can be routed now: a routable aggregated worker, or a
    /// routable prefill and a routable decode worker.
    pub fn ready_for(&self, format: &str) -> bool {
        !self.candidates(Role::Aggregated, format, &[]).is_empty()
            || (!self.candidates(Role::Prefill, format, &[]).is_empty()
                && !self.candidates(Role::Decode, format, &[]).is_empty())
    }

    /// Model facts for validating a request of `format`: those of a routable worker of that
    /// native kind, else of any routable worker, else of any connected worker; `None` when no
    /// worker is connected.
    pub fn facts_for(&self, format: &str) -> Option<EngineInfo> {
        for role in [Role::Aggregated, Role::Decode, Role::Prefill] {
            if let Some(w) = self.candidates(role, format, &[]).first() {
                return w.facts().cloned();
            }
        }
        let workers = self.workers.read().unwrap_or_else(|e| e.into_inner());
        workers
            .iter()
            .filter(|w| w.native_kind() == Some(format))
            .chain(workers.iter())
            .find_map(|w| w.facts().cloned())
    }

    /// Choose a worker of `role` for `request` (the policy decides; admission at the breaker is
    /// reserved). `exclude` lists workers already tried.
    ///
    /// # Errors
    /// [`NoWorker`] when no routable worker is left, or the pinned worker is unknown or not
    /// routable.
    pub fn select(
        &self,
        role: Role,
        ctx: &RouteContext,
        request: &EngineRequest,
        exclude: &[WorkerId],
    ) -> Result<Arc<Worker>, NoWorker> {
        let now = Instant::now();
        if let Some(raw) = ctx.pinned.as_deref() {
            // A P/D pair is pinned as `PREFILL+DECODE` (the form the answers name it by).
            let pin = match (raw.split_once('+'), role) {
                (Some((p, _)), Role::Prefill) => p,
                (Some((_, d)), Role::Decode) => d,
                _ => raw,
            };
            let Some(w) = self.worker(pin) else {
                self.metrics.no_worker(role).inc();
                return Err(NoWorker {
                    role,
                    reason: "unknown_worker",
                });
            };
            if w.role() != role {
                return Err(NoWorker {
                    role,
                    reason: "pinned_role_mismatch",
                });
            }
            if w.role() == role && !exclude.contains(w.id()) && w.routable(now) && w.admit(now) {
                w.handles.selections.inc();
                return Ok(w);
            }
            self.metrics.no_worker(role).inc();
            return Err(NoWorker {
                role,
                reason: "pinned_worker_unavailable",
            });
        }
        let mut candidates = self.candidates(role, ctx.format, exclude);
        let req = RouteRequest {
            tokens: &request.token_ids,
            namespace: request
                .routing
                .cache_salt
                .as_deref()
                .or(request.routing.lora.as_deref()),
            session: ctx.session_key(&request.routing),
        };
        // A breaker may refuse between the check and the admission (a half-open trial taken by a
        // concurrent request): try the others.
        while !candidates.is_empty() {
            let i = self.policy(role).pick(&candidates, &req);
            let w = candidates.swap_remove(i);
            if w.admit(now) {
                w.handles.selections.inc();
                return Ok(w);
            }
        }
        self.metrics.no_worker(role).inc();
        Err(NoWorker {
            role,
            reason: "no_routable_worker",
        })
    }

    /// Send `request` to a worker chosen for it and return its output stream, which retries on
    /// another worker before the first output (see the crate docs). The request's in-flight load
    /// is held until the stream ends or is dropped.
    ///
    /// # Errors
    /// [`NoWorker`] at once when no worker can take it.
    pub fn dispatch(
        self: &Arc<Self>,
        request: EngineRequest,
        ctx: &RouteContext,
        cancel: CancellationToken,
    ) -> Result<Dispatched, NoWorker> {
        if self.use_pd(ctx) {
            let prefill = self.select(Role::Prefill, ctx, &request, &[])?;
            let decode = match self.select(Role::Decode, ctx, &request, &[]) {
                Ok(d) => d,
                Err(e) => {
                    prefill.record_neutral();
                    return Err(e);
                }
            };
            return Ok(pd::start_pair(
                self.metrics.pd().clone(),
                prefill,
                decode,
                request,
                ctx,
                cancel,
            ));
        }
        let worker = self.select(Role::Aggregated, ctx, &request, &[])?;
        self.budget.deposit();
        Ok(dispatch::start(
            self.clone(),
            worker,
            request,
            ctx.clone(),
            cancel,
        ))
    }

    /// Count a request refused before dispatch because no worker could take it (the frontend's
    /// early check), so `genfront_router_no_worker_total` sees every refusal. Returns the role
    /// that had no routable worker ([`Role::Prefill`] or [`Role::Decode`] when only a P/D pair
    /// could take the request), for the refusal's message.
    pub fn count_refusal(&self, format: &str) -> Role {
        let role = if self.has_pd() && self.candidates(Role::Aggregated, format, &[]).is_empty() {
            if self.candidates(Role::Prefill, format, &[]).is_empty() {
                Role::Prefill
            } else {
                Role::Decode
            }
        } else {
            Role::Aggregated
        };
        self.metrics.no_worker(role).inc();
        role
    }

    /// Whether prefill and decode workers are configured at all.
    pub fn has_pd(&self) -> bool {
        let workers = self.workers.read().unwrap_or_else(|e| e.into_inner());
        workers.iter().any(|w| w.role() == Role::Prefill)
            && workers.iter().any(|w| w.role() == Role::Decode)
    }

    /// Split this request over a P/D pair? With only P/D workers: yes (a missing role is then
    /// refused by name, never served decode-only). With both kinds: P/D when a pair is routable
    /// and its decode side is less busy than the least loaded aggregated worker, aggregated when
    /// busier, and the two in turn at equal load.
    fn use_pd(&self, ctx: &RouteContext) -> bool {
        if let Some(pin) = &ctx.pinned {
            return pin.contains('+');
        }
        if !self.has_pd() {
            return false;
        }
        let has_agg = {
            let workers = self.workers.read().unwrap_or_else(|e| e.into_inner());
            workers.iter().any(|w| w.role() == Role::Aggregated)
        };
        if !has_agg {
            return true;
        }
        let decode = self.candidates(Role::Decode, ctx.format, &[]);
        let prefill = self.candidates(Role::Prefill, ctx.format, &[]);
        if decode.is_empty() || prefill.is_empty() {
            return false;
        }
        let agg = self.candidates(Role::Aggregated, ctx.format, &[]);
        if agg.is_empty() {
            return true;
        }
        let least = |ws: &[Arc<Worker>]| ws.iter().map(|w| w.load().requests()).min().unwrap_or(0);
        match least(&decode).cmp(&least(&agg)) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => self
                .mixed_ties
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .is_multiple_of(2),
        }
    }
}
