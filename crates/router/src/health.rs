//! Background tasks per worker: connect with backoff, then probe health.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::metrics::WorkerHandles;
use crate::worker::{Worker, WorkerState};
use crate::{Connector, HealthConfig};

/// Connect `worker` with exponential backoff, then start its probes. Without a Tokio runtime
/// nothing happens (the worker stays `connecting`).
pub(crate) fn spawn_connect(
    worker: &Arc<Worker>,
    connect: Connector,
    health: HealthConfig,
    stop: CancellationToken,
) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let worker = worker.clone();
    rt.spawn(async move {
        let mut delay = health.connect_backoff;
        let mut attempts: u64 = 0;
        loop {
            attempts += 1;
            let outcome = tokio::select! {
                r = connect() => r,
                () = stop.cancelled() => return,
            };
            match outcome {
                Ok(engine) => {
                    tracing::info!(
                        worker = %worker.id(),
                        url = %worker.url(),
                        model = %engine.info().model,
                        attempts,
                        "worker connected"
                    );
                    worker.connected(engine);
                    break;
                }
                Err(e) => {
                    // Every attempt at DEBUG; the first and then every 10th at WARN.
                    if attempts == 1 || attempts.is_multiple_of(10) {
                        tracing::warn!(worker = %worker.id(), url = %worker.url(), attempts, error = %e, retry_in = ?delay, "worker not reachable yet");
                    } else {
                        tracing::debug!(worker = %worker.id(), attempts, error = %e, "worker not reachable yet");
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            delay = (delay * 2).min(health.connect_backoff_max);
        }
        probe_loop(worker, health, stop).await;
    });
}

/// Start the probe loop of a connected worker.
pub(crate) fn spawn_probes(worker: &Arc<Worker>, health: HealthConfig, stop: CancellationToken) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(probe_loop(worker.clone(), health, stop));
}

async fn probe_loop(worker: Arc<Worker>, health: HealthConfig, stop: CancellationToken) {
    let Some(engine) = worker.engine().cloned() else {
        return;
    };
    let mut tick = tokio::time::interval(health.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let outcome = tokio::time::timeout(health.timeout, engine.probe(health.timeout)).await;
        let ok = matches!(outcome, Ok(Ok(())));
        if !ok {
            let why = match &outcome {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no answer within {:?}", health.timeout),
            };
            tracing::debug!(worker = %worker.id(), error = %why, "health probe failed");
        }
        apply_probe(&worker, &worker.handles, health, ok);
    }
}

/// Fold one probe outcome into the worker's state (rise/fall thresholds) and breaker.
pub(crate) fn apply_probe(
    worker: &Worker,
    handles: &WorkerHandles,
    health: HealthConfig,
    ok: bool,
) {
    let streak = {
        let Ok(mut s) = worker.probe_streak.lock() else {
            return;
        };
        *s = if ok { (*s).max(0) + 1 } else { (*s).min(0) - 1 };
        *s
    };
    if ok {
        if streak >= health.rise.max(1) as i32 {
            worker.transition(WorkerState::Unhealthy, WorkerState::Ready);
        }
        let changed = worker
            .breaker
            .lock()
            .ok()
            .and_then(|mut b| b.on_probe_ok(Instant::now()));
        if let Some(state) = changed {
            handles.set_breaker(state);
            tracing::info!(worker = %worker.id(), breaker = state.label(), "circuit breaker: probe passed");
        }
    } else {
        handles.probe_failures.inc();
        if -streak >= health.fall.max(1) as i32 {
            worker.transition(WorkerState::Ready, WorkerState::Unhealthy);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use genfront_protocol::{Engine, EngineInfo, EngineRequest, OutputStream, ProbeFuture};
    use tokio_util::sync::CancellationToken;

    use crate::worker::WorkerState;
    use crate::{HealthConfig, Router, RouterConfig, RouterMetrics, WorkerSpec};

    /// An engine whose health probe never answers (a hung engine).
    struct Hung(EngineInfo);

    impl Engine for Hung {
        fn info(&self) -> &EngineInfo {
            &self.0
        }

        fn probe(&self, _timeout: Duration) -> ProbeFuture<'_> {
            Box::pin(std::future::pending())
        }

        fn generate(&self, _request: EngineRequest, _cancel: CancellationToken) -> OutputStream {
            Box::pin(futures::stream::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_times_out_counts_as_a_failure() {
        let config = RouterConfig {
            health: HealthConfig {
                interval: Duration::from_millis(100),
                timeout: Duration::from_millis(50),
                fall: 2,
                ..HealthConfig::default()
            },
            ..RouterConfig::default()
        };
        let router = Router::new(config, RouterMetrics::default());
        let id = router.add_engine(
            WorkerSpec::new("hung", None),
            Arc::new(Hung(EngineInfo::default())),
        );
        let worker = router.worker(id.as_str()).expect("worker");
        assert_eq!(worker.state(), WorkerState::Ready);
        // Two probe rounds (interval + timeout each) make it unhealthy.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(worker.state(), WorkerState::Unhealthy);
    }
}
