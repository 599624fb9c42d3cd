//! The output stream of one dispatched engine request: load held, outcomes recorded at the
//! breaker, and retries on another worker before the first output.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::{Stream, StreamExt};
use genfront_protocol::{EngineError, EngineOutput, EngineRequest, OutputStream};
use rand::Rng;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

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

/// The dispatch stream: polled in place (a hand-written `poll_next`, not an unfold), so an
/// output passes through without moving the state or itself through intermediate futures.
struct State {
    router: Arc<Router>,
    ctx: RouteContext,
    /// A copy of the request for retries; dropped after the first output.
    spare: Option<EngineRequest>,
    cancel: CancellationToken,
    attempt: Option<Attempt>,
    /// The pause before a retry, while one is pending.
    backoff: Option<Box<Backoff>>,
    tried: Vec<WorkerId>,
    retries: u32,
    delivered: bool,
    done: bool,
    served_by: Arc<Mutex<WorkerId>>,
}

/// A retry waiting out its backoff.
struct Backoff {
    sleep: Pin<Box<tokio::time::Sleep>>,
    cancelled: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The worker the retry goes to.
    next: Arc<Worker>,
    /// The error that caused the retry, returned if the client cancels during the pause.
    err: EngineError,
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
        backoff: None,
        tried: vec![id.clone()],
        retries: 0,
        delivered: false,
        done: false,
        served_by: served_by.clone(),
    };
    // Boxed: each item moves a pointer, not the whole state, through the unfold.
    Dispatched {
        worker: id,
        prefill_worker: None,
        stream: Box::pin(state),
        served_by,
    }
}

impl Stream for State {
    type Item = Result<EngineOutput, EngineError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(mut b) = this.backoff.take() {
                if b.cancelled.as_mut().poll(cx).is_ready() {
                    b.next.record_neutral();
                    return Poll::Ready(Some(Err(this.give_up(b.err))));
                }
                if b.sleep.as_mut().poll(cx).is_pending() {
                    this.backoff = Some(b);
                    return Poll::Pending;
                }
                let Backoff { next, .. } = *b;
                let Some(spare) = this.spare.as_ref() else {
                    this.done = true;
                    return Poll::Ready(None);
                };
                this.tried.push(next.id().clone());
                if let Ok(mut s) = this.served_by.lock() {
                    *s = next.id().clone();
                }
                this.attempt = Some(attempt(next, spare.clone(), this.cancel.clone()));
                continue;
            }
            let Some(a) = this.attempt.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(a.stream.poll_next_unpin(cx)) {
                Some(Ok(out)) => {
                    if !this.delivered {
                        this.delivered = true;
                        this.spare = None;
                    }
                    return Poll::Ready(Some(Ok(out)));
                }
                Some(Err(err)) => {
                    if !this.delivered && err.retry_elsewhere() && !this.cancel.is_cancelled() {
                        match this.retry(err) {
                            Ok(backoff) => {
                                this.backoff = Some(backoff);
                                continue;
                            }
                            Err(err) => return Poll::Ready(Some(Err(this.give_up(err)))),
                        }
                    }
                    return Poll::Ready(Some(Err(this.give_up(err))));
                }
                None => {
                    // The verdict comes at the end: a worker that cuts every stream after its
                    // first tokens must not count as working.
                    this.done = true;
                    if let Some(a) = this.attempt.as_mut()
                        && !a.verdict
                    {
                        a.verdict = true;
                        a.worker().record_success();
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

impl State {
    /// End the stream with `err`, recording the verdict on the current attempt.
    fn give_up(&mut self, err: EngineError) -> EngineError {
        self.done = true;
        if let Some(a) = self.attempt.as_mut() {
            a.verdict = true;
            if err.is_worker_failure() {
                a.worker().record_failure();
            } else {
                a.worker().record_neutral();
            }
        }
        err
    }

    /// Move to another worker after `err`, if retries, budget and workers allow: the pause
    /// before the new attempt, or `err` back when there is no retry.
    fn retry(&mut self, err: EngineError) -> Result<Box<Backoff>, EngineError> {
        let cfg = self.router.config.retry;
        if self.retries >= cfg.max_retries {
            return Err(err);
        }
        let Some(spare) = self.spare.as_ref() else {
            return Err(err);
        };
        if let Some(a) = self.attempt.as_mut() {
            a.verdict = true;
            if err.is_worker_failure() {
                a.worker().record_failure();
            } else {
                a.worker().record_neutral();
            }
        }
        let Ok(next) = self
            .router
            .select(Role::Aggregated, &self.ctx, spare, &self.tried)
        else {
            return Err(err);
        };
        if !self.router.budget.withdraw() {
            next.record_neutral();
            return Err(err);
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
        Ok(Box::new(Backoff {
            sleep: Box::pin(tokio::time::sleep(wait)),
            cancelled: Box::pin(self.cancel.clone().cancelled_owned()),
            next,
            err,
        }))
    }
}
