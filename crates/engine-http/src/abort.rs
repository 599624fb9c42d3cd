//! Abort-on-drop and the cancel grace period.
//!
//! - [`AbortCall`] is a backend's abort request (URL + JSON body), sent fire-and-forget on the
//!   current Tokio runtime with a timeout (without a runtime nothing is sent: the dropped
//!   connection is then the only abort, which vLLM honours and SGLang may not).
//! - [`AbortGuard`] decides *when*: it is armed once the generate request was sent and disarmed
//!   once the engine has nothing left to abort (every choice reached its terminal item, or the
//!   engine refused the request); [`AbortGuard::fire`] sends the abort at most once while armed,
//!   [`AbortGuard::fire_again`] once more (a token arrived after the first abort, which may have
//!   raced ahead of the request's registration), and dropping an armed guard that never fired
//!   sends it.
//! - [`CancelGrace`]: after `cancel` fires, the stream keeps reading for the engine's own abort
//!   finish (which carries the tokens produced meanwhile) until the grace period ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One backend abort request: `POST url` with a JSON body.
#[derive(Debug, Clone)]
pub struct AbortCall {
    http: reqwest::Client,
    url: Arc<str>,
    body: Bytes,
    timeout: Duration,
    counter: Option<Arc<AtomicU64>>,
}

impl AbortCall {
    /// `POST url` with `body` (serialised once), each call bounded by `timeout`.
    pub fn new(
        http: reqwest::Client,
        url: Arc<str>,
        body: &serde_json::Value,
        timeout: Duration,
    ) -> Self {
        Self {
            http,
            url,
            body: Bytes::from(body.to_string()),
            timeout,
            counter: None,
        }
    }

    /// Count every call sent into `counter` (for metrics and tests).
    pub fn counted(mut self, counter: Arc<AtomicU64>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// Send the call in the background on the current Tokio runtime; `false` when there is none
    /// (nothing was sent). The answer is ignored: an abort is best effort.
    pub fn send(&self) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if let Some(counter) = &self.counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let call = self
            .http
            .post(&*self.url)
            .timeout(self.timeout)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(self.body.clone())
            .send();
        runtime.spawn(async move {
            let _ = call.await;
        });
        true
    }
}

/// Sends an [`AbortCall`] for one request: on demand, or when dropped armed (see the module docs).
/// Shareable (`&self` methods) by the several HTTP streams of one request.
#[derive(Debug)]
pub struct AbortGuard {
    call: AbortCall,
    /// The request was sent and the engine may still be working on it.
    armed: AtomicBool,
    /// The abort was sent.
    fired: AtomicBool,
    /// The abort was sent a second time.
    resent: AtomicBool,
}

impl AbortGuard {
    /// A disarmed guard for `call`.
    pub fn new(call: AbortCall) -> Self {
        Self {
            call,
            armed: AtomicBool::new(false),
            fired: AtomicBool::new(false),
            resent: AtomicBool::new(false),
        }
    }

    /// The generate request was sent: from now on there may be work to abort.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Nothing left to abort (all finished, or the engine refused the request).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    /// Whether the guard is armed.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Whether the abort was sent.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Send the abort, if armed and not sent yet.
    pub fn fire(&self) {
        if self.is_armed() && !self.fired.swap(true, Ordering::AcqRel) {
            self.call.send();
        }
    }

    /// Send the abort a second time (once, while armed, after [`AbortGuard::fire`]).
    pub fn fire_again(&self) {
        if self.is_armed() && self.fired() && !self.resent.swap(true, Ordering::AcqRel) {
            self.call.send();
        }
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        self.fire();
    }
}

/// What ended a [`CancelGrace::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraceWake {
    /// `cancel` fired (the grace period has not started yet).
    Cancelled,
    /// The grace period is over.
    Expired,
}

/// The cancel grace period of one request: not started until `cancel` fires; then a deadline.
#[derive(Debug, Clone, Copy)]
pub struct CancelGrace {
    grace: Duration,
    deadline: Option<Instant>,
}

impl CancelGrace {
    /// A grace period of `grace`, not started.
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            deadline: None,
        }
    }

    /// Start the grace period now (no-op when started).
    pub fn start(&mut self) {
        self.deadline
            .get_or_insert_with(|| Instant::now() + self.grace);
    }

    /// Whether the grace period started (the request was cancelled after it was sent).
    pub fn started(&self) -> bool {
        self.deadline.is_some()
    }

    /// Before the start: wait for `cancel`; after: wait for the deadline. For a `select!` arm
    /// next to the body read.
    pub async fn wait(&self, cancel: &CancellationToken) -> GraceWake {
        match self.deadline {
            None => {
                cancel.cancelled().await;
                GraceWake::Cancelled
            }
            Some(deadline) => {
                tokio::time::sleep_until(deadline).await;
                GraceWake::Expired
            }
        }
    }
}
