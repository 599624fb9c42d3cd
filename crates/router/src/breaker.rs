//! The per-worker circuit breaker: closed → open → half-open → closed.
//!
//! | state | admits | moves on |
//! |---|---|---|
//! | closed | every request | `failure_threshold` consecutive worker failures → open |
//! | open | nothing | `open_for` elapsed (or a passing health probe) → half-open |
//! | half-open | one trial request at a time | trial succeeds → closed; fails → open again |
//!
//! Only *worker* failures count (`EngineError::is_worker_failure`: transport failures, 5xx
//! other than the backpressure 503, and engine timeouts, so a hung engine leaves rotation).
//! Client errors (4xx), 429 and cancellations never do.

use std::time::{Duration, Instant};

/// Breaker thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive worker failures that open the breaker (`--breaker-failures`). 0 disables the
    /// breaker.
    pub failure_threshold: u32,
    /// How long an open breaker refuses traffic before one trial (`--breaker-open`).
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            open_for: Duration::from_secs(5),
        }
    }
}

/// Where a breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Traffic flows.
    Closed,
    /// No traffic.
    Open,
    /// One trial request at a time.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`.
    pub fn label(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// Gauge value: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }
}

/// One breaker (behind the worker's mutex).
#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    consecutive_failures: u32,
    opened_at: Option<Instant>,
    trial_in_flight: bool,
    half_open: bool,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            consecutive_failures: 0,
            opened_at: None,
            trial_in_flight: false,
            half_open: false,
        }
    }

    pub(crate) fn state(&self, now: Instant) -> BreakerState {
        match self.opened_at {
            None if self.half_open => BreakerState::HalfOpen,
            None => BreakerState::Closed,
            Some(at) if now.duration_since(at) >= self.config.open_for => BreakerState::HalfOpen,
            Some(_) => BreakerState::Open,
        }
    }

    /// Whether [`Breaker::admit`] would succeed now.
    pub(crate) fn would_admit(&self, now: Instant) -> bool {
        match self.state(now) {
            BreakerState::Closed => true,
            BreakerState::Open => false,
            BreakerState::HalfOpen => !self.trial_in_flight,
        }
    }

    /// Admit one request; in half-open, it becomes the trial.
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        match self.state(now) {
            BreakerState::Closed => true,
            BreakerState::Open => false,
            BreakerState::HalfOpen => {
                if self.trial_in_flight {
                    return false;
                }
                self.opened_at = None;
                self.half_open = true;
                self.trial_in_flight = true;
                true
            }
        }
    }

    /// A success; returns the new state when it changed.
    pub(crate) fn on_success(&mut self) -> Option<BreakerState> {
        self.consecutive_failures = 0;
        self.trial_in_flight = false;
        if self.half_open || self.opened_at.is_some() {
            self.half_open = false;
            self.opened_at = None;
            return Some(BreakerState::Closed);
        }
        None
    }

    /// A worker failure; returns the new state when it changed.
    pub(crate) fn on_failure(&mut self, now: Instant) -> Option<BreakerState> {
        if self.config.failure_threshold == 0 {
            return None;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.trial_in_flight = false;
        let reopen = self.half_open;
        if reopen || self.consecutive_failures >= self.config.failure_threshold {
            let was_open = self.opened_at.is_some();
            self.half_open = false;
            self.opened_at = Some(now);
            if !was_open {
                return Some(BreakerState::Open);
            }
        }
        None
    }

    /// An admitted request ended without a verdict: free the trial slot.
    pub(crate) fn on_neutral(&mut self) {
        self.trial_in_flight = false;
    }

    /// A passing health probe: an open breaker may try one request now.
    pub(crate) fn on_probe_ok(&mut self, now: Instant) -> Option<BreakerState> {
        if let Some(at) = self.opened_at
            && now.duration_since(at) < self.config.open_for
        {
            // Let the next request be the trial.
            self.opened_at = Some(now - self.config.open_for);
            return Some(BreakerState::HalfOpen);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_recovers_through_half_open() {
        let mut b = Breaker::new(BreakerConfig {
            failure_threshold: 3,
            open_for: Duration::from_secs(10),
        });
        let t0 = Instant::now();
        assert!(b.admit(t0));
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(b.on_failure(t0), Some(BreakerState::Open));
        assert!(!b.admit(t0 + Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(11);
        assert_eq!(b.state(t1), BreakerState::HalfOpen);
        assert!(b.admit(t1), "one trial");
        assert!(!b.admit(t1), "only one trial at a time");
        assert_eq!(b.on_failure(t1), Some(BreakerState::Open));
        assert!(!b.admit(t1));
        let t2 = t1 + Duration::from_secs(11);
        assert!(b.admit(t2));
        assert_eq!(b.on_success(), Some(BreakerState::Closed));
        assert!(b.admit(t2) && b.admit(t2));
    }

    #[test]
    fn successes_reset_the_count_and_probes_shorten_the_wait() {
        let mut b = Breaker::new(BreakerConfig {
            failure_threshold: 2,
            open_for: Duration::from_secs(60),
        });
        let t0 = Instant::now();
        b.on_failure(t0);
        b.on_success();
        assert_eq!(b.on_failure(t0), None, "count restarted");
        assert_eq!(b.on_failure(t0), Some(BreakerState::Open));
        assert_eq!(b.on_probe_ok(t0), Some(BreakerState::HalfOpen));
        assert!(b.admit(t0));
        b.on_neutral();
        assert!(b.admit(t0), "a neutral end frees the trial");
    }

    #[test]
    fn threshold_zero_disables() {
        let mut b = Breaker::new(BreakerConfig {
            failure_threshold: 0,
            open_for: Duration::from_secs(1),
        });
        let t0 = Instant::now();
        for _ in 0..100 {
            b.on_failure(t0);
        }
        assert!(b.admit(t0));
    }
}
