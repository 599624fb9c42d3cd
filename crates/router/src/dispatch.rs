//! The output stream of one dispatched engine request: load held, outcomes recorded at the
//! breaker, and retries on another worker before the first output.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use genfront_protocol::{EngineError, EngineOutput, EngineRequest, OutputStream};
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::worker::{LoadGuard, Role, Worker, WorkerId};
use crate::{Dispatched, RouteContext, Router};

/// One attempt on one worker. Dropping it without a verdict frees a half-open trial.
struct Attempt {
    stream: OutputStream,
    load: LoadGuard,
    verdict: bool,
}

impl Attempt {
    fn worker(&self) -> &Arc<Worker> {
        self.load.worker()
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.verdict {
            self.load.worker().record_neutral();
        }
    }
}

struct State {
    router: Arc<Router>,
    ctx: RouteContext,
    /// A copy of the request for retries; dropped after the first output.
    spare: Option<EngineRequest>,
    cancel: CancellationToken,
    attempt: Option<Attempt>,
    tried: Vec<WorkerId>,
    retries: u32,
    delivered: bool,
    done: bool,
    served_by: Arc<Mutex<WorkerId>>,
}

fn load_tokens(request: &EngineRequest, worker: &Worker) -> u64 {
    let cap = worker
        .facts()
        .and_then(|f| f.context_limit())
        .unwrap_or(32_768);
    let new = request.stop.max_tokens.unwrap_or(cap).min(cap);
    request.token_ids.len() as u64 + u64::from(new) * u64::from(request.sampling.n.max(1))
}

fn attempt(worker: Arc<Worker>, request: EngineRequest, cancel: CancellationToken) -> Attempt {
    let tokens = load_tokens(&request, &worker);
    let stream = match worker.engine() {
        Some(engine) => engine.generate(request, cancel),
        None => Box::pin(futures::stream::once(async {
            Err(EngineError::unavailable("worker is not connected"))
        })),
    };
    Attempt {
        stream,
        load: LoadGuard::new(worker, tokens),
        verdict: false,
    }
}

pub(crate) fn start(
    router: Arc<Router>,
    worker: Arc<Worker>,
    request: EngineRequest,
    ctx: RouteContext,
    cancel: CancellationToken,
) -> Dispatched {
    let id = worker.id().clone();
    let served_by = Arc::new(Mutex::new(id.clone()));
    let spare = (router.config.retry.max_retries > 0).then(|| request.clone());
    let first = attempt(worker, request, cancel.clone());
    let state = State {
        router,
        ctx,
        spare,
        cancel,
        attempt: Some(first),
        tried: vec![id.clone()],
        retries: 0,
        delivered: false,
        done: false,
        served_by: served_by.clone(),
    };
    // Boxed: each item moves a pointer, not the whole state, through the unfold.
    let stream = futures::stream::unfold(Box::new(state), |mut st| async move {
        let item = st.next().await?;
        Some((item, st))
    });
    Dispatched {
        worker: id,
        prefill_worker: None,
        stream: Box::pin(stream),
        served_by,
    }
}

impl State {
    async fn next(&mut self) -> Option<Result<EngineOutput, EngineError>> {
        loop {
            if self.done {
                return None;
            }
            let a = self.attempt.as_mut()?;
            match a.stream.next().await {
                Some(Ok(out)) => {
                    if !self.delivered {
                        self.delivered = true;
                        self.spare = None;
                    }
                    return Some(Ok(out));
                }
                Some(Err(err)) => {
                    if !self.delivered
                        && err.retry_elsewhere()
                        && !self.cancel.is_cancelled()
                        && let Some(next) = self.retry(&err).await
                    {
                        self.attempt = Some(next);
                        continue;
                    }
                    self.done = true;
                    if let Some(a) = self.attempt.as_mut() {
                        a.verdict = true;
                        if err.is_worker_failure() {
                            a.worker().record_failure();
                        } else {
                            a.worker().record_neutral();
                        }
                    }
                    return Some(Err(err));
                }
                None => {
                    // The verdict comes at the end: a worker that cuts every stream after its
                    // first tokens must not count as working.
                    self.done = true;
                    if let Some(a) = self.attempt.as_mut()
                        && !a.verdict
                    {
                        a.verdict = true;
                        a.worker().record_success();
                    }
                    return None;
                }
            }
        }
    }

    /// Move to another worker after `err`, if retries, budget and workers allow.
    async fn retry(&mut self, err: &EngineError) -> Option<Attempt> {
        let cfg = self.router.config.retry;
        if self.retries >= cfg.max_retries {
            return None;
        }
        let spare = self.spare.as_ref()?;
        if let Some(a) = self.attempt.as_mut() {
            a.verdict = true;
            if err.is_worker_failure() {
                a.worker().record_failure();
            } else {
                a.worker().record_neutral();
            }
        }
        let next = self
            .router
            .select(Role::Aggregated, &self.ctx, spare, &self.tried)
            .ok()?;
        if !self.router.budget.withdraw() {
            next.record_neutral();
            return None;
        }
        let from = self.attempt.as_ref().map(|a| a.worker().clone());
        if let Some(from) = &from {
            from.handles.retries.inc();
        }
        tracing::info!(
            request_id = %spare.request_id,
            from = from.as_ref().map(|w| w.id().as_str()).unwrap_or(""),
            to = %next.id(),
            error = %err,
            "retrying on another worker before the first output"
        );
        // Release the failed attempt (and its load) before waiting.
        self.attempt = None;
        self.retries += 1;
        let base = cfg.backoff.saturating_mul(1 << (self.retries - 1).min(10));
        let jitter = rand::rng().random_range(0.5..1.5);
        let wait = Duration::from_secs_f64(base.as_secs_f64() * jitter);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = self.cancel.cancelled() => {
                next.record_neutral();
                return None;
            }
        }
        self.tried.push(next.id().clone());
        if let Ok(mut s) = self.served_by.lock() {
            *s = next.id().clone();
        }
        Some(attempt(next, spare.clone(), self.cancel.clone()))
    }
}
