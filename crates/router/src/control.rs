//! Fleet control: one native control call fanned out to every worker of a format, and the
//! router's view of the fleet that follows from the answers.
//!
//! Rules:
//! - **Targets.** A call spelled in format F goes to every worker that speaks F
//!   ([`Worker::speaks`]: its kind, given or reported by its engine, is F, or it has none — the
//!   mocker), of every role (prefill and decode workers too), or to the workers named by id.
//!   All at once; each bounded by [`ControlCall::timeout`] (plus a second of grace for an engine
//!   client that ignores it), so a worker that does not answer is reported, never waited on.
//! - **Report.** One [`WorkerReply`] per target, in registry order: id, URL, role, the engine's own
//!   status and body, latency, or why there is no answer (`timeout`, `unreachable`,
//!   `unsupported`, `not_connected`). [`ControlReport::status`] is 200 only when every target
//!   answered 2xx.
//! - **State.** A pause takes the worker out of rotation *before* the call goes out (so a
//!   `wait` pause is not fed new requests while it drains) and puts it back if the call fails; a
//!   successful resume makes a paused worker ready. A failed weight update (any answer but 2xx,
//!   or none) marks the worker `weights_failed`: it takes no traffic until a later update
//!   succeeds. A successful update or version tag that names a version sets the worker's
//!   version and the fleet's current version; read-only calls that report a `weight_version`
//!   refresh the worker's. With [`crate::RouterConfig::route_current_version`], requests go
//!   only to workers on the current version.
//! - **Pause waits.** While every worker that could take a format's requests is paused,
//!   [`Router::wait_unpaused`] holds a new request until one is routable again or the wait ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use genfront_protocol::{ControlAction, ControlCall, ErrorKind};

use crate::{Role, Router, Worker, WorkerId, WorkerState};

/// Extra time past [`ControlCall::timeout`] before the router stops waiting for an engine
/// client.
const GRACE: Duration = Duration::from_secs(1);

/// How one worker's call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It answered 2xx.
    Ok,
    /// It answered with another status (its body says why).
    Refused,
    /// No answer within the call's timeout.
    Timeout,
    /// The transport failed (connection refused, reset, …).
    Unreachable,
    /// Its engine has no control face (e.g. a sidecar of an older build).
    Unsupported,
    /// It is not connected yet, so the call was not sent.
    NotConnected,
}

impl Outcome {
    /// `ok`, `error`, `timeout`, `unreachable`, `unsupported` or `not_connected` (the metric
    /// label and the report's `outcome`).
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "error",
            Outcome::Timeout => "timeout",
            Outcome::Unreachable => "unreachable",
            Outcome::Unsupported => "unsupported",
            Outcome::NotConnected => "not_connected",
        }
    }
}

/// One worker's part of a [`ControlReport`].
#[derive(Debug, Clone)]
pub struct WorkerReply {
    /// The worker.
    pub id: WorkerId,
    /// Where it is.
    pub url: String,
    /// Its role.
    pub role: Role,
    /// How the call ended.
    pub outcome: Outcome,
    /// The engine's HTTP status, when it answered.
    pub status: Option<u16>,
    /// The engine's `Content-Type`, when it answered with one.
    pub content_type: Option<String>,
    /// The engine's body (empty without an answer).
    pub body: Bytes,
    /// Why there is no answer (timeout, transport error), when there is none.
    pub error: Option<String>,
    /// Time from sending to the answer (or to giving up).
    pub latency: Duration,
}

/// The answers of every worker a control call went to.
#[derive(Debug, Clone)]
pub struct ControlReport {
    /// [`ControlAction::label`] of the call.
    pub action: &'static str,
    /// One entry per target worker, in registry order.
    pub workers: Vec<WorkerReply>,
}

impl ControlReport {
    /// Whether every target answered 2xx.
    pub fn success(&self) -> bool {
        self.workers.iter().all(|w| w.outcome == Outcome::Ok)
    }

    /// The HTTP status of the whole report: 200 when every worker succeeded; the workers'
    /// common status when every one of them answered the same 4xx (the call itself is wrong,
    /// e.g. a bad model path everywhere); 502 otherwise (some worker failed or did not answer).
    pub fn status(&self) -> u16 {
        if self.success() {
            return 200;
        }
        let first = self.workers.first().and_then(|w| w.status);
        match first {
            Some(s)
                if (400..500).contains(&s) && self.workers.iter().all(|w| w.status == Some(s)) =>
            {
                s
            }
            _ => 502,
        }
    }
}

/// Why a control call went nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlError {
    /// No worker speaks the call's format.
    NoWorkers {
        /// The format.
        format: &'static str,
    },
    /// Some named workers do not exist (or do not speak the call's format).
    UnknownWorkers(Vec<String>),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::NoWorkers { format } => {
                write!(f, "no {format} worker to send this call to")
            }
            ControlError::UnknownWorkers(ids) => write!(
                f,
                "no worker of this route's engine kind with id(s): {}",
                ids.join(", ")
            ),
        }
    }
}

impl std::error::Error for ControlError {}

impl Router {
    /// Fan `call` out to every worker that speaks its format (or to the workers named in `ids`)
    /// and apply what the answers mean to the fleet's state (see the module docs).
    ///
    /// # Errors
    /// [`ControlError`] when there is no target: no worker speaks the format, or an id in `ids`
    /// is unknown or does not speak it (nothing is sent then).
    pub async fn control(
        &self,
        call: ControlCall,
        ids: Option<&[String]>,
    ) -> Result<ControlReport, ControlError> {
        let all = self.workers();
        let targets: Vec<Arc<Worker>> = match ids {
            Some(ids) => {
                let unknown: Vec<String> = ids
                    .iter()
                    .filter(|id| {
                        !all.iter()
                            .any(|w| w.id().as_str() == id.as_str() && w.speaks(call.format))
                    })
                    .cloned()
                    .collect();
                if !unknown.is_empty() {
                    return Err(ControlError::UnknownWorkers(unknown));
                }
                all.into_iter()
                    .filter(|w| ids.iter().any(|id| id == w.id().as_str()))
                    .collect()
            }
            None => all.into_iter().filter(|w| w.speaks(call.format)).collect(),
        };
        if targets.is_empty() {
            return Err(ControlError::NoWorkers {
                format: call.format,
            });
        }
        let action = call.action.label();
        let calls = targets.into_iter().map(|w| {
            let call = call.clone();
            async move { self.control_one(w, call).await }
        });
        let workers = futures::future::join_all(calls).await;
        if let ControlAction::UpdateWeights { version: Some(v) }
        | ControlAction::SetWeightVersion { version: v } = &call.action
            && workers.iter().any(|w| w.outcome == Outcome::Ok)
            && let Ok(mut current) = self.current_version.lock()
        {
            current.by_format.insert(call.format.to_owned(), v.clone());
            current.last = Some(v.clone());
        }
        self.changed.notify_waiters();
        Ok(ControlReport { action, workers })
    }

    async fn control_one(&self, worker: Arc<Worker>, call: ControlCall) -> WorkerReply {
        let started = Instant::now();
        let action = call.action.clone();
        let before = worker.state();
        let pausing = matches!(action, ControlAction::Pause { .. });
        if pausing && matches!(before, WorkerState::Ready | WorkerState::Unhealthy) {
            worker.set_state(WorkerState::Paused);
        }
        let mut reply = WorkerReply {
            id: worker.id().clone(),
            url: worker.url().to_owned(),
            role: worker.role(),
            outcome: Outcome::NotConnected,
            status: None,
            content_type: None,
            body: Bytes::new(),
            error: None,
            latency: Duration::ZERO,
        };
        match worker.engine() {
            None => reply.error = Some("the worker is not connected yet".to_owned()),
            Some(engine) => {
                let limit = call.timeout + GRACE;
                match tokio::time::timeout(limit, engine.control(call)).await {
                    Ok(Ok(answer)) => {
                        reply.outcome = if answer.is_success() {
                            Outcome::Ok
                        } else {
                            Outcome::Refused
                        };
                        reply.status = Some(answer.status);
                        reply.content_type = answer.content_type;
                        reply.body = answer.body;
                    }
                    Ok(Err(e)) => {
                        reply.outcome = match e.kind {
                            ErrorKind::Timeout => Outcome::Timeout,
                            ErrorKind::Unsupported => Outcome::Unsupported,
                            _ => Outcome::Unreachable,
                        };
                        reply.error = Some(e.message);
                    }
                    Err(_) => {
                        reply.outcome = Outcome::Timeout;
                        reply.error = Some(format!("no answer within {} ms", limit.as_millis()));
                    }
                }
            }
        }
        reply.latency = started.elapsed();
        self.metrics.control_call(
            action.label(),
            worker.id().as_str(),
            reply.outcome.label(),
            reply.latency.as_secs_f64(),
        );
        let ok = reply.outcome == Outcome::Ok;
        match &action {
            ControlAction::Pause { .. }
                if matches!(
                    reply.outcome,
                    Outcome::Refused | Outcome::Unsupported | Outcome::NotConnected
                ) =>
            {
                // The engine said it did not pause: put the worker back as it was. A pause that
                // timed out or lost its connection may still take effect on the engine, so the
                // worker stays paused until a resume.
                worker.transition(WorkerState::Paused, before);
            }
            ControlAction::Resume if ok => {
                worker.transition(WorkerState::Paused, WorkerState::Ready);
            }
            ControlAction::UpdateWeights { version } => {
                worker.set_weights_failed(!ok);
                if ok && version.is_some() {
                    worker.set_weight_version(version.clone());
                }
            }
            ControlAction::SetWeightVersion { version } if ok => {
                worker.set_weight_version(Some(version.clone()));
            }
            ControlAction::WeightInfo if ok => {
                if let Some(v) = reported_version(&reply.body) {
                    worker.set_weight_version(Some(v));
                }
            }
            _ => {}
        }
        if !ok {
            tracing::warn!(worker = %reply.id, action = action.label(), outcome = reply.outcome.label(), status = ?reply.status, error = ?reply.error, "control call failed");
        } else {
            tracing::info!(worker = %reply.id, action = action.label(), latency_ms = reply.latency.as_millis() as u64, "control call");
        }
        reply
    }

    /// The fleet's current weight version: the version named by the last weight update or
    /// version tag that succeeded on some worker, whatever its format (`None` before any).
    pub fn current_version(&self) -> Option<String> {
        self.current_version
            .lock()
            .map(|v| v.last.clone())
            .unwrap_or_else(|e| e.into_inner().last.clone())
    }

    /// The current weight version of `format`'s workers: the version named by the last
    /// successful weight update or version tag spelled in that format (`None` before any).
    pub fn current_version_for(&self, format: &str) -> Option<String> {
        let current = self
            .current_version
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        current.by_format.get(format).cloned()
    }

    /// Every format's current weight version.
    pub fn current_versions(&self) -> std::collections::BTreeMap<String, String> {
        let current = self
            .current_version
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        current.by_format.clone()
    }

    /// The version rule ([`crate::RouterConfig::route_current_version`]) over routable
    /// `workers` for a request of `format`: a worker is kept when its kind (its native format,
    /// else the request's) has no current version or it is on it; when that would leave none,
    /// every worker is kept (the rule steers traffic during a refit, it never empties the
    /// fleet).
    pub(crate) fn on_current_versions(
        &self,
        workers: Vec<Arc<Worker>>,
        format: &str,
    ) -> Vec<Arc<Worker>> {
        if !self.config.route_current_version {
            return workers;
        }
        let current = self.current_versions();
        if current.is_empty() {
            return workers;
        }
        let on: Vec<Arc<Worker>> = workers
            .iter()
            .filter(|w| {
                let kind = w.native_kind().unwrap_or(format);
                current
                    .get(kind)
                    .is_none_or(|v| w.weight_version().as_deref() == Some(v.as_str()))
            })
            .cloned()
            .collect();
        if on.is_empty() { workers } else { on }
    }

    /// Whether requests of `format` cannot be routed *because of a pause*: no worker can take
    /// one now, and some worker that speaks the format is paused.
    pub fn paused_for(&self, format: &str) -> bool {
        !self.ready_for(format)
            && self
                .workers()
                .iter()
                .any(|w| w.state() == WorkerState::Paused && w.speaks(format))
    }

    /// Hold a request of `format` while its workers are paused ([`Router::paused_for`]): returns
    /// `true` as soon as one can take it, `false` when `limit` passed first (or when it is no
    /// longer a pause that stands in the way). Counted in
    /// `genfront_router_paused_waits_total{outcome}`.
    pub async fn wait_unpaused(&self, format: &str, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.ready_for(format) {
                self.metrics.paused_wait("resumed").inc();
                return true;
            }
            if !self.paused_for(format) || tokio::time::Instant::now() >= deadline {
                self.metrics.paused_wait("timed_out").inc();
                return false;
            }
            // Woken by a state change; a 50 ms tick covers changes nobody announces (a breaker
            // cooling down).
            let tick = (tokio::time::Instant::now() + Duration::from_millis(50)).min(deadline);
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(tick) => {}
            }
        }
    }
}

/// The fleet's current weight versions (see [`Router::current_version_for`]).
#[derive(Debug, Default)]
pub(crate) struct CurrentVersions {
    /// Per format the call was spelled in.
    pub(crate) by_format: std::collections::BTreeMap<String, String>,
    /// The last one set, whatever its format.
    pub(crate) last: Option<String>,
}

/// The `weight_version` an engine's read-only answer reports (SGLang `/get_weight_version`
/// `{"weight_version": …}`; a top-level string field of that name in any JSON answer).
fn reported_version(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("weight_version")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(outcome: Outcome, status: Option<u16>) -> WorkerReply {
        WorkerReply {
            id: WorkerId::new("w"),
            url: String::new(),
            role: Role::Aggregated,
            outcome,
            status,
            content_type: None,
            body: Bytes::new(),
            error: None,
            latency: Duration::ZERO,
        }
    }

    #[test]
    fn report_status() {
        let r = |ws: Vec<WorkerReply>| ControlReport {
            action: "pause",
            workers: ws,
        };
        assert_eq!(r(vec![reply(Outcome::Ok, Some(200))]).status(), 200);
        assert_eq!(
            r(vec![
                reply(Outcome::Refused, Some(422)),
                reply(Outcome::Refused, Some(422))
            ])
            .status(),
            422
        );
        assert_eq!(
            r(vec![
                reply(Outcome::Ok, Some(200)),
                reply(Outcome::Refused, Some(400))
            ])
            .status(),
            502
        );
        assert_eq!(r(vec![reply(Outcome::Timeout, None)]).status(), 502);
    }

    #[test]
    fn versions_from_answers() {
        assert_eq!(
            reported_version(br#"{"weight_version":"v3"}"#).as_deref(),
            Some("v3")
        );
        assert_eq!(reported_version(br#"{"x":1}"#), None);
        assert_eq!(reported_version(b"not json"), None);
    }
}
