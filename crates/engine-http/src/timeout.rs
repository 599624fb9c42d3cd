//! [`TimedEngine`]: the engine-side time limits (first output, idle between outputs) around any
//! [`Engine`].
//!
//! A hung engine (it accepted the request and then says nothing) would otherwise hold the
//! client, the request's concurrency permit and its router load forever, and keep the worker
//! "ready" while it black-holes traffic. The limits apply to the engine's *typed* output stream,
//! so they hold for every transport (native HTTP clients, gRPC sidecars) alike, and they sit
//! below the router: the timeout error is what the router's attempt sees, so it is recorded as a
//! worker failure at the circuit breaker ([`EngineError::is_worker_failure`] is true for
//! [`ErrorKind::Timeout`]), and dropping the engine stream sends the engine's abort.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use genfront_protocol::{
    ControlCall, ControlFuture, Engine, EngineError, EngineInfo, EngineRequest, OutputStream,
    ProbeFuture,
};
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use genfront_protocol::ErrorKind;

/// Which engine limit fired (passed to the [`TimedEngine`] observer, e.g. for a metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// No first output within [`EngineTimeouts::first_byte`].
    FirstByte,
    /// No next output of a stream within [`EngineTimeouts::idle`].
    Idle,
}

impl TimeoutPhase {
    /// The flag that sets this limit (`--engine-first-byte-timeout`, `--engine-idle-timeout`).
    pub fn flag(self) -> &'static str {
        match self {
            TimeoutPhase::FirstByte => "--engine-first-byte-timeout",
            TimeoutPhase::Idle => "--engine-idle-timeout",
        }
    }

    /// Metric label (`engine_first_byte_timeout`, `engine_idle_timeout`).
    pub fn label(self) -> &'static str {
        match self {
            TimeoutPhase::FirstByte => "engine_first_byte_timeout",
            TimeoutPhase::Idle => "engine_idle_timeout",
        }
    }
}

/// Engine-side time limits; `None` disables one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineTimeouts {
    /// Longest wait from dispatch to the engine's first output. For a unary request the first
    /// output is the whole answer (the engines send a unary body only when it is complete), so
    /// this bounds a whole unary generation, and so does every later gap of a unary request
    /// (`n > 1` choices finish at different times). For a stream it bounds queueing + prefill.
    pub first_byte: Option<Duration>,
    /// Longest gap between two outputs of a streaming request.
    pub idle: Option<Duration>,
}

impl Default for EngineTimeouts {
    /// `first_byte` 600 s, `idle` 300 s: generous, because a long unary generation and an RL
    /// `pause_generation` that freezes running requests are legitimate silences.
    fn default() -> Self {
        Self {
            first_byte: Some(Duration::from_secs(600)),
            idle: Some(Duration::from_secs(300)),
        }
    }
}

/// Called once for every limit that fires.
pub type TimeoutObserver = Arc<dyn Fn(TimeoutPhase) + Send + Sync>;

/// An [`Engine`] whose [`Engine::generate`] streams end with [`ErrorKind::Timeout`] when the
/// inner engine makes no progress within [`EngineTimeouts`]. Everything else is delegated;
/// [`Engine::control`] is also bounded by the call's own `timeout` (an inner engine that does not
/// honour it still fails with [`ErrorKind::Timeout`] in time).
pub struct TimedEngine {
    inner: Arc<dyn Engine>,
    timeouts: EngineTimeouts,
    observer: Option<TimeoutObserver>,
}

impl std::fmt::Debug for TimedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedEngine")
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl TimedEngine {
    /// Wrap `inner`; `observer` is told about every timeout.
    pub fn new(
        inner: Arc<dyn Engine>,
        timeouts: EngineTimeouts,
        observer: Option<TimeoutObserver>,
    ) -> Self {
        Self {
            inner,
            timeouts,
            observer,
        }
    }

    /// The wrapped engine.
    pub fn inner(&self) -> &Arc<dyn Engine> {
        &self.inner
    }
}

impl Engine for TimedEngine {
    fn info(&self) -> &EngineInfo {
        self.inner.info()
    }

    fn ready(&self) -> bool {
        self.inner.ready()
    }

    fn probe(&self, timeout: Duration) -> ProbeFuture<'_> {
        self.inner.probe(timeout)
    }

    fn generate(&self, request: EngineRequest, cancel: CancellationToken) -> OutputStream {
        let streaming = request.output.stream;
        let stream = self.inner.generate(request, cancel);
        timed(stream, self.timeouts, streaming, self.observer.clone())
    }

    fn native_format(&self) -> Option<&'static str> {
        self.inner.native_format()
    }

    fn control(&self, call: ControlCall) -> ControlFuture<'_> {
        let limit = call.timeout;
        let what = format!("{} {}", call.method, call.path);
        let inner = self.inner.control(call);
        Box::pin(async move {
            tokio::time::timeout(limit, inner)
                .await
                .unwrap_or_else(|_| {
                    Err(EngineError::timeout(format!(
                        "control call {what}: no answer within {limit:?}"
                    )))
                })
        })
    }
}

/// The stream [`timed`] makes: the inner stream, and one timer for all its waits.
///
/// One [`tokio::time::Sleep`] serves every wait of the stream and is moved only when it must
/// be: an output marks the next wait as not started; the first poll that finds the inner
/// stream pending starts it (one clock read) and sets the timer only if it would fire later
/// than the new deadline. A timer that fires before the current deadline (set for an earlier
/// wait) is moved to it. So a stream of many outputs costs one clock read per wait, not a timer
/// registered and dropped per output.
struct Timed {
    inner: Option<OutputStream>,
    /// No output yet (the first-byte limit applies).
    first: bool,
    streaming: bool,
    timeouts: EngineTimeouts,
    observer: Option<TimeoutObserver>,
    /// When the current wait started: the first poll since the last output that found the inner
    /// stream pending. `None`: no wait under way.
    since: Option<tokio::time::Instant>,
    /// The timer, made at the first wait.
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Timed {
    fn phase(&self) -> (TimeoutPhase, Option<Duration>) {
        if self.first || !self.streaming {
            (TimeoutPhase::FirstByte, self.timeouts.first_byte)
        } else {
            (TimeoutPhase::Idle, self.timeouts.idle)
        }
    }
}

impl futures::Stream for Timed {
    type Item = Result<genfront_protocol::EngineOutput, EngineError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(item) = inner.poll_next_unpin(cx) {
            this.first = false;
            this.since = None;
            if item.is_none() {
                // Ending drops the finished inner stream.
                this.inner = None;
            }
            return Poll::Ready(item);
        }
        let (phase, limit) = this.phase();
        let Some(limit) = limit else {
            return Poll::Pending;
        };
        let since = *this.since.get_or_insert_with(tokio::time::Instant::now);
        let deadline = since + limit;
        loop {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if sleep.deadline() > deadline {
                sleep.as_mut().reset(deadline);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if sleep.deadline() < deadline {
                // Set for an earlier wait: this one has time left.
                sleep.as_mut().reset(deadline);
                continue;
            }
            break;
        }
        this.inner = None;
        this.since = None;
        if let Some(observe) = &this.observer {
            observe(phase);
        }
        let what = match phase {
            TimeoutPhase::FirstByte => "no first output",
            TimeoutPhase::Idle => "no next output",
        };
        Poll::Ready(Some(Err(EngineError::timeout(format!(
            "the engine sent {what} within {limit:?} ({})",
            phase.flag()
        )))))
    }
}

/// `stream` with the limits of `timeouts` (see [`EngineTimeouts`] for which applies when). On a
/// timeout the inner stream is dropped (its engine abort fires) and the stream ends with one
/// [`ErrorKind::Timeout`] naming the flag. Each wait is timed from the first poll that finds the
/// inner stream without an output.
pub fn timed(
    stream: OutputStream,
    timeouts: EngineTimeouts,
    streaming: bool,
    observer: Option<TimeoutObserver>,
) -> OutputStream {
    if timeouts.first_byte.is_none() && timeouts.idle.is_none() {
        return stream;
    }
    Box::pin(Timed {
        inner: Some(stream),
        first: true,
        streaming,
        timeouts,
        observer,
        since: None,
        sleep: None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use genfront_protocol::{EngineOutput, ErrorKind};

    use super::*;

    fn out() -> Result<EngineOutput, EngineError> {
        Ok(EngineOutput::default())
    }

    /// A stream that yields `first_after` later, then a second output `gap` later, then ends;
    /// it sets `dropped` when dropped.
    fn slow(first_after: Duration, gap: Duration, dropped: Arc<AtomicUsize>) -> OutputStream {
        struct OnDrop(Arc<AtomicUsize>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let guard = OnDrop(dropped);
        Box::pin(futures::stream::unfold(0u8, move |i| {
            let _keep = &guard;
            async move {
                match i {
                    0 => {
                        tokio::time::sleep(first_after).await;
                        Some((out(), 1))
                    }
                    1 => {
                        tokio::time::sleep(gap).await;
                        Some((out(), 2))
                    }
                    _ => None,
                }
            }
        }))
    }

    fn limits(first: u64, idle: u64) -> EngineTimeouts {
        EngineTimeouts {
            first_byte: Some(Duration::from_millis(first)),
            idle: Some(Duration::from_millis(idle)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn first_byte_timeout_ends_with_timeout_and_drops_the_engine_stream() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let observer: TimeoutObserver = Arc::new(move |p| {
            assert_eq!(p, TimeoutPhase::FirstByte);
            s.fetch_add(1, Ordering::SeqCst);
        });
        let stream = slow(Duration::from_secs(10), Duration::ZERO, dropped.clone());
        let items: Vec<_> = timed(stream, limits(100, 100), true, Some(observer))
            .collect()
            .await;
        assert_eq!(items.len(), 1);
        let err = items[0].as_ref().expect_err("timeout");
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert!(err.message.contains("--engine-first-byte-timeout"), "{err}");
        assert!(err.is_worker_failure());
        assert!(!err.retry_elsewhere());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_applies_between_stream_outputs_only() {
        let dropped = Arc::new(AtomicUsize::new(0));
        // First output after 500 ms (within first-byte 1 s), then a 300 ms gap (> idle 200 ms).
        let stream = slow(
            Duration::from_millis(500),
            Duration::from_millis(300),
            dropped.clone(),
        );
        let items: Vec<_> = timed(stream, limits(1000, 200), true, None).collect().await;
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        let err = items[1].as_ref().expect_err("idle timeout");
        assert!(err.message.contains("--engine-idle-timeout"), "{err}");
        // A unary request: the gap is bounded by the first-byte limit, so it passes.
        let stream = slow(
            Duration::from_millis(500),
            Duration::from_millis(300),
            dropped.clone(),
        );
        let items: Vec<_> = timed(stream, limits(1000, 200), false, None)
            .collect()
            .await;
        assert_eq!(items.len(), 2);
        assert!(items.iter().all(Result::is_ok));
    }

    #[tokio::test(start_paused = true)]
    async fn each_gap_has_its_own_limit_whichever_limit_is_longer() {
        let dropped = Arc::new(AtomicUsize::new(0));
        // Twelve outputs 150 ms apart: every gap is within the 200 ms idle limit, the whole
        // stream (1.8 s) is not, and the first-byte limit is longer than the idle one.
        let ticks = Box::pin(futures::stream::unfold(0u32, |i| async move {
            if i == 12 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
            Some((out(), i + 1))
        }));
        let items: Vec<_> = timed(ticks, limits(1000, 200), true, None).collect().await;
        assert_eq!(items.len(), 12);
        assert!(items.iter().all(Result::is_ok));
        // A first-byte limit shorter than the idle one: the timer set for the first wait fires
        // early for the second and is moved, not taken for a timeout.
        let stream = slow(
            Duration::from_millis(50),
            Duration::from_millis(500),
            dropped.clone(),
        );
        let items: Vec<_> = timed(stream, limits(100, 1000), true, None).collect().await;
        assert_eq!(items.len(), 2);
        assert!(items.iter().all(Result::is_ok), "{items:?}");
        // The same stream with a 400 ms idle limit times out in its second gap.
        let stream = slow(
            Duration::from_millis(50),
            Duration::from_millis(500),
            dropped.clone(),
        );
        let items: Vec<_> = timed(stream, limits(100, 400), true, None).collect().await;
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        let err = items[1].as_ref().expect_err("idle timeout");
        assert!(err.message.contains("--engine-idle-timeout"), "{err}");
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_limits_wait_forever() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let stream = slow(Duration::from_secs(3600), Duration::ZERO, dropped);
        let none = EngineTimeouts {
            first_byte: None,
            idle: None,
        };
        let items: Vec<_> = timed(stream, none, true, None).collect().await;
        assert_eq!(items.len(), 2);
    }

    /// An engine whose control calls answer after `delay` (or never when `None`).
    struct ControlStub {
        info: EngineInfo,
        delay: Option<Duration>,
    }

    impl Engine for ControlStub {
        fn info(&self) -> &EngineInfo {
            &self.info
        }

        fn generate(&self, _: EngineRequest, _: CancellationToken) -> OutputStream {
            Box::pin(futures::stream::empty())
        }

        fn native_format(&self) -> Option<&'static str> {
            Some("vllm")
        }

        fn control(&self, call: ControlCall) -> ControlFuture<'_> {
            let delay = self.delay;
            Box::pin(async move {
                match delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => futures::future::pending::<()>().await,
                }
                Ok(genfront_protocol::ControlReply::json(
                    200,
                    format!("{{\"path\":\"{}\"}}", call.path),
                ))
            })
        }
    }

    fn stub(delay: Option<Duration>) -> TimedEngine {
        let info = EngineInfo {
            model: "m".into(),
            model_aliases: Vec::new(),
            vocab_size: None,
            max_context_len: 16,
            eos_token_ids: Vec::new(),
            max_logprobs: None,
            max_num_seqs: None,
            routed_experts: false,
            sampling_mask: false,
            tokenizer: None,
            features: Default::default(),
            server_info: None,
        };
        TimedEngine::new(
            Arc::new(ControlStub { info, delay }),
            EngineTimeouts::default(),
            None,
        )
    }

    fn pause_call(timeout: Duration) -> ControlCall {
        ControlCall {
            format: "vllm",
            action: genfront_protocol::ControlAction::Resume,
            method: "POST".into(),
            path: "/resume".into(),
            query: String::new(),
            body: bytes::Bytes::new(),
            timeout,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn control_and_native_format_are_forwarded_within_the_call_timeout() {
        let fast = stub(Some(Duration::from_millis(10)));
        assert_eq!(fast.native_format(), Some("vllm"));
        let reply = fast
            .control(pause_call(Duration::from_secs(1)))
            .await
            .expect("answered in time");
        assert_eq!(reply.status, 200);
        assert_eq!(&reply.body[..], b"{\"path\":\"/resume\"}");

        // The inner engine ignores the call's timeout: the wrapper still ends the call in time.
        let hung = stub(None);
        let err = hung
            .control(pause_call(Duration::from_secs(2)))
            .await
            .expect_err("timed out");
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert!(err.message.contains("/resume"), "{err}");
    }
}
