//! The router's metric families. Every family is registered at start-up and every worker's
//! series is created when the worker is added, so a scrape before the first request already shows
//! zeros.
//!
//! | family | type | labels | what |
//! |---|---|---|---|
//! | `genfront_worker_in_flight_requests` | gauge | worker, role | engine requests in flight |
//! | `genfront_worker_in_flight_tokens` | gauge | worker, role | prompt + requested new tokens in flight |
//! | `genfront_worker_selections_total` | counter | worker, role | times the policy picked the worker |
//! | `genfront_worker_state` | gauge | worker, role, state | 1 for the current state, 0 for the others |
//! | `genfront_worker_breaker_state` | gauge | worker, role | 0 closed, 1 open, 2 half-open |
//! | `genfront_worker_failures_total` | counter | worker, role | worker failures (transport, 5xx) |
//! | `genfront_worker_retries_total` | counter | worker, role | requests retried away from the worker |
//! | `genfront_worker_probe_failures_total` | counter | worker, role | failed health probes |
//! | `genfront_worker_weights_failed` | gauge | worker, role | 1 while the worker's last weight update failed (out of rotation) |
//! | `genfront_control_calls_total` | counter | action, worker, outcome | fleet-control calls sent to a worker: `ok`, `error` (the engine refused), `timeout`, `unreachable`, `unsupported`, `not_connected` |
//! | `genfront_control_seconds` | histogram | action | latency of one worker's control call |
//! | `genfront_router_paused_waits_total` | counter | outcome | requests that waited because every worker was paused: `resumed`, `timed_out` |
//! | `genfront_router_decisions_total` | counter | policy, decision | `hit`, `miss`, `spill`, `repin` (affinity policies), `pick` (others) |
//! | `genfront_router_no_worker_total` | counter | role | requests refused for lack of a worker |
//! | `genfront_pd_prefill_seconds` | histogram | | P/D: dispatch to the end of the prefill leg |
//! | `genfront_pd_decode_ttft_seconds` | histogram | | P/D: dispatch to the first decode output |
//! | `genfront_pd_failures_total` | counter | leg | P/D pairs ended by a failing `prefill` or `decode` leg (hand-off failures included) |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::breaker::BreakerState;
use crate::worker::{Role, WorkerState};

/// Labels of per-worker families.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabels {
    /// Worker id.
    pub worker: String,
    /// `agg`, `prefill` or `decode`.
    pub role: String,
}

/// Labels of `genfront_worker_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// Worker id.
    pub worker: String,
    /// `agg`, `prefill` or `decode`.
    pub role: String,
    /// State label.
    pub state: String,
}

/// Labels of `genfront_router_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// Policy name.
    pub policy: String,
    /// What it decided.
    pub decision: String,
}

/// Labels of `genfront_router_no_worker_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabels {
    /// `agg`, `prefill` or `decode`.
    pub role: String,
}

/// Labels of `genfront_control_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControlLabels {
    /// [`genfront_protocol::ControlAction::label`].
    pub action: String,
    /// Worker id.
    pub worker: String,
    /// `ok`, `error`, `timeout`, `unreachable`, `unsupported` or `not_connected`.
    pub outcome: String,
}

/// Labels of `genfront_control_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// [`genfront_protocol::ControlAction::label`].
    pub action: String,
}

/// Labels of `genfront_router_paused_waits_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `resumed` or `timed_out`.
    pub outcome: String,
}

fn control_histogram() -> Histogram {
    // 1 ms .. ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The router's families (cheap to clone: every family is an `Arc` inside).
#[derive(Debug, Clone)]
pub struct RouterMetrics {
    weights_failed: Family<WorkerLabels, Gauge>,
    control_calls: Family<ControlLabels, Counter>,
    control_seconds: Family<ActionLabels, Histogram, fn() -> Histogram>,
    paused_waits: Family<OutcomeLabels, Counter>,
    in_flight: Family<WorkerLabels, Gauge>,
    in_flight_tokens: Family<WorkerLabels, Gauge>,
    selections: Family<WorkerLabels, Counter>,
    state: Family<StateLabels, Gauge>,
    breaker: Family<WorkerLabels, Gauge>,
    failures: Family<WorkerLabels, Counter>,
    retries: Family<WorkerLabels, Counter>,
    probe_failures: Family<WorkerLabels, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    no_worker: Family<RoleLabels, Counter>,
    pd: PdMetrics,
}

impl Default for RouterMetrics {
    fn default() -> Self {
        Self {
            weights_failed: Family::default(),
            control_calls: Family::default(),
            control_seconds: Family::new_with_constructor(control_histogram),
            paused_waits: Family::default(),
            in_flight: Family::default(),
            in_flight_tokens: Family::default(),
            selections: Family::default(),
            state: Family::default(),
            breaker: Family::default(),
            failures: Family::default(),
            retries: Family::default(),
            probe_failures: Family::default(),
            decisions: Family::default(),
            no_worker: Family::default(),
            pd: PdMetrics::default(),
        }
    }
}

/// Labels of `genfront_pd_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LegLabels {
    /// `prefill` or `decode`.
    pub leg: String,
}

/// P/D families.
#[derive(Debug, Clone)]
pub(crate) struct PdMetrics {
    pub(crate) prefill_seconds: Histogram,
    pub(crate) decode_ttft_seconds: Histogram,
    failures: Family<LegLabels, Counter>,
}

impl Default for PdMetrics {
    fn default() -> Self {
        // 1 ms .. ~65 s.
        let h = || Histogram::new(exponential_buckets(0.001, 2.0, 17));
        Self {
            prefill_seconds: h(),
            decode_ttft_seconds: h(),
            failures: Family::default(),
        }
    }
}

impl PdMetrics {
    pub(crate) fn failure(&self, leg: &str) {
        self.failures
            .get_or_create(&LegLabels {
                leg: leg.to_owned(),
            })
            .inc();
    }
}

impl RouterMetrics {
    /// Register every family in `registry` (names get the registry's prefix, if any).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "worker_in_flight_requests",
            "Engine requests in flight per worker",
            self.in_flight.clone(),
        );
        registry.register(
            "worker_in_flight_tokens",
            "Prompt plus requested new tokens in flight per worker",
            self.in_flight_tokens.clone(),
        );
        registry.register(
            "worker_selections",
            "Times the routing policy picked the worker",
            self.selections.clone(),
        );
        registry.register(
            "worker_state",
            "1 for the worker's current state (connecting, ready, unhealthy, draining, paused)",
            self.state.clone(),
        );
        registry.register(
            "worker_breaker_state",
            "Circuit breaker: 0 closed, 1 open, 2 half-open",
            self.breaker.clone(),
        );
        registry.register(
            "worker_failures",
            "Worker failures (transport errors, 5xx other than 503) seen on requests",
            self.failures.clone(),
        );
        registry.register(
            "worker_retries",
            "Requests retried on another worker after failing on this one before any output",
            self.retries.clone(),
        );
        registry.register(
            "worker_probe_failures",
            "Failed active health probes",
            self.probe_failures.clone(),
        );
        registry.register(
            "worker_weights_failed",
            "1 while the worker's last weight update failed (it takes no traffic)",
            self.weights_failed.clone(),
        );
        registry.register(
            "control_calls",
            "Fleet-control calls sent to a worker, by action and outcome",
            self.control_calls.clone(),
        );
        registry.register(
            "control_seconds",
            "Latency of one worker's fleet-control call",
            self.control_seconds.clone(),
        );
        registry.register(
            "router_paused_waits",
            "Requests that waited because every worker of their format was paused",
            self.paused_waits.clone(),
        );
        for outcome in ["resumed", "timed_out"] {
            self.paused_wait(outcome);
        }
        registry.register(
            "router_decisions",
            "Routing policy decisions: hit, miss, spill, repin (affinity policies); pick (the others)",
            self.decisions.clone(),
        );
        registry.register(
            "router_no_worker",
            "Requests refused because no worker of the role could take them",
            self.no_worker.clone(),
        );
        for role in [Role::Aggregated, Role::Prefill, Role::Decode] {
            self.no_worker(role);
        }
        registry.register(
            "pd_prefill_seconds",
            "P/D: time from dispatch to the end of the prefill leg",
            self.pd.prefill_seconds.clone(),
        );
        registry.register(
            "pd_decode_ttft_seconds",
            "P/D: time from dispatch to the first decode output",
            self.pd.decode_ttft_seconds.clone(),
        );
        registry.register(
            "pd_failures",
            "P/D pairs ended by a failing leg (hand-off failures included)",
            self.pd.failures.clone(),
        );
        for leg in ["prefill", "decode"] {
            let _ = self.pd.failures.get_or_create(&LegLabels {
                leg: leg.to_owned(),
            });
        }
    }

    pub(crate) fn pd(&self) -> &PdMetrics {
        &self.pd
    }

    pub(crate) fn worker(&self, worker: &str, role: Role) -> WorkerHandles {
        let l = WorkerLabels {
            worker: worker.to_owned(),
            role: role.label().to_owned(),
        };
        let states = WorkerState::ALL.map(|s| {
            self.state
                .get_or_create(&StateLabels {
                    worker: worker.to_owned(),
                    role: role.label().to_owned(),
                    state: s.label().to_owned(),
                })
                .clone()
        });
        WorkerHandles {
            in_flight: self.in_flight.get_or_create(&l).clone(),
            in_flight_tokens: self.in_flight_tokens.get_or_create(&l).clone(),
            selections: self.selections.get_or_create(&l).clone(),
            states,
            breaker: self.breaker.get_or_create(&l).clone(),
            failures: self.failures.get_or_create(&l).clone(),
            retries: self.retries.get_or_create(&l).clone(),
            probe_failures: self.probe_failures.get_or_create(&l).clone(),
            weights_failed: self.weights_failed.get_or_create(&l).clone(),
        }
    }

    pub(crate) fn decision(&self, policy: &'static str, decision: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                decision: decision.to_owned(),
            })
            .inc();
    }

    /// The counter of one decision series, resolved once.
    pub(crate) fn decision_counter(&self, policy: &'static str, decision: &'static str) -> Counter {
        self.decisions
            .get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                decision: decision.to_owned(),
            })
            .clone()
    }

    /// Pre-create the decision series a policy can produce.
    pub(crate) fn declare_decisions(&self, policy: &'static str, decisions: &[&'static str]) {
        for d in decisions {
            let _ = self.decisions.get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                decision: (*d).to_owned(),
            });
        }
    }

    /// Count one worker's control call.
    pub(crate) fn control_call(
        &self,
        action: &'static str,
        worker: &str,
        outcome: &'static str,
        seconds: f64,
    ) {
        self.control_calls
            .get_or_create(&ControlLabels {
                action: action.to_owned(),
                worker: worker.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.control_seconds
            .get_or_create(&ActionLabels {
                action: action.to_owned(),
            })
            .observe(seconds);
    }

    /// Count a request that waited out a pause (`resumed`) or gave up (`timed_out`).
    pub fn paused_wait(&self, outcome: &'static str) -> Counter {
        self.paused_waits
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .clone()
    }

    /// Drop a removed worker's series (its id may be reused by another worker later).
    pub(crate) fn forget_worker(&self, worker: &str, role: Role) {
        let l = WorkerLabels {
            worker: worker.to_owned(),
            role: role.label().to_owned(),
        };
        for f in [
            &self.in_flight,
            &self.in_flight_tokens,
            &self.breaker,
            &self.weights_failed,
        ] {
            f.remove(&l);
        }
        for f in [
            &self.selections,
            &self.failures,
            &self.retries,
            &self.probe_failures,
        ] {
            f.remove(&l);
        }
        for s in WorkerState::ALL {
            self.state.remove(&StateLabels {
                worker: worker.to_owned(),
                role: role.label().to_owned(),
                state: s.label().to_owned(),
            });
        }
    }

    pub(crate) fn no_worker(&self, role: Role) -> Counter {
        self.no_worker
            .get_or_create(&RoleLabels {
                role: role.label().to_owned(),
            })
            .clone()
    }
}

/// One worker's series, resolved once.
#[derive(Debug, Clone)]
pub(crate) struct WorkerHandles {
    pub(crate) in_flight: Gauge,
    pub(crate) in_flight_tokens: Gauge,
    pub(crate) selections: Counter,
    states: [Gauge; 5],
    breaker: Gauge,
    pub(crate) failures: Counter,
    pub(crate) retries: Counter,
    pub(crate) probe_failures: Counter,
    pub(crate) weights_failed: Gauge,
}

impl WorkerHandles {
    pub(crate) fn set_state(&self, state: WorkerState) {
        for (s, g) in WorkerState::ALL.iter().zip(&self.states) {
            g.set(i64::from(*s == state));
        }
    }

    pub(crate) fn set_breaker(&self, state: BreakerState) {
        self.breaker.set(state.gauge());
    }
}
