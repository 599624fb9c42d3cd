//! Per-request outcomes folded into histograms and counters ([`Recorder`]), and the
//! [`Percentiles`] summary the report carries.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::error::ErrorKind;

/// Latency summary in microseconds (hdrhistogram, 3 significant digits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Samples recorded (requests for latency/TTFT, output tokens for ITL).
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest sample.
    pub max_us: u64,
    /// Arithmetic mean.
    pub mean_us: f64,
}

impl Percentiles {
    /// Summarise `h`; `None` when it holds no samples.
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| Percentiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            mean_us: h.mean(),
        })
    }
}

/// A request that succeeded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Success {
    /// From the start (actual, or scheduled in open loop) to the end of the answer.
    pub latency: Duration,
    /// Start to the first event carrying tokens (streams only).
    pub ttft: Option<Duration>,
    /// Output tokens counted from the answer.
    pub tokens: u64,
}

/// Reused per-request buffer of inter-token gaps: `(µs per token, tokens in the event)`.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub itl: Vec<(u64, u64)>,
}

/// Histograms and counters for one shard of workers; merged at the end.
#[derive(Debug)]
pub(crate) struct Recorder {
    latency: Histogram<u64>,
    ttft: Histogram<u64>,
    itl: Histogram<u64>,
    ok: u64,
    errors: [u64; ErrorKind::ALL.len()],
    output_tokens: u64,
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn histogram() -> Histogram<u64> {
    // Auto-resizing: memory grows only with the largest value seen; cannot fail for sigfig 3.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant figures is in range"))
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            latency: histogram(),
            ttft: histogram(),
            itl: histogram(),
            ok: 0,
            errors: [0; ErrorKind::ALL.len()],
            output_tokens: 0,
        }
    }
}

impl Recorder {
    /// Fold one finished request; `itl` holds its inter-token gaps (ignored on error).
    pub fn record(&mut self, outcome: Result<Success, ErrorKind>, itl: &[(u64, u64)]) {
        match outcome {
            Ok(s) => {
                self.ok += 1;
                self.output_tokens += s.tokens;
                // Auto-resizing histograms only fail on count overflow.
                let _ = self.latency.record(micros(s.latency));
                if let Some(t) = s.ttft {
                    let _ = self.ttft.record(micros(t));
                }
                for &(us, n) in itl {
                    let _ = self.itl.record_n(us, n);
                }
            }
            Err(kind) => self.errors[kind.index()] += 1,
        }
    }

    /// Add another shard's data.
    pub fn merge(&mut self, other: &Recorder) {
        // Both auto-resize, so `add` only fails on count overflow.
        let _ = self.latency.add(&other.latency);
        let _ = self.ttft.add(&other.ttft);
        let _ = self.itl.add(&other.itl);
        self.ok += other.ok;
        self.output_tokens += other.output_tokens;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
    }

    pub fn ok(&self) -> u64 {
        self.ok
    }

    pub fn output_tokens(&self) -> u64 {
        self.output_tokens
    }

    pub fn latency(&self) -> Option<Percentiles> {
        Percentiles::of(&self.latency)
    }

    pub fn ttft(&self) -> Option<Percentiles> {
        Percentiles::of(&self.ttft)
    }

    pub fn itl(&self) -> Option<Percentiles> {
        Percentiles::of(&self.itl)
    }

    /// Non-zero error counts, in [`ErrorKind::ALL`] order.
    pub fn errors(&self) -> impl Iterator<Item = (ErrorKind, u64)> + '_ {
        ErrorKind::ALL
            .into_iter()
            .zip(self.errors)
            .filter(|&(_, n)| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Recorder, Success};
    use crate::error::ErrorKind;

    fn ok(ms: u64, tokens: u64, ttft_ms: Option<u64>) -> Result<Success, ErrorKind> {
        Ok(Success {
            latency: Duration::from_millis(ms),
            ttft: ttft_ms.map(Duration::from_millis),
            tokens,
        })
    }

    #[test]
    fn percentiles_and_merge() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        for ms in 1..=100 {
            let r = if ms % 2 == 0 { &mut a } else { &mut b };
            r.record(ok(ms, 4, Some(1)), &[(250, 3)]);
        }
        b.record(Err(ErrorKind::Timeout), &[(1, 1)]);
        b.record(Err(ErrorKind::Http5xx), &[]);
        b.record(Err(ErrorKind::Http5xx), &[]);
        a.merge(&b);
        assert_eq!(a.ok(), 100);
        assert_eq!(a.output_tokens(), 400);
        let lat = a.latency().expect("samples");
        assert_eq!(lat.count, 100);
        // 3 significant digits: within 0.1 %.
        assert!(lat.p50_us.abs_diff(50_000) <= 50, "{lat:?}");
        assert!(lat.p90_us.abs_diff(90_000) <= 90, "{lat:?}");
        assert!(lat.p99_us.abs_diff(99_000) <= 99, "{lat:?}");
        assert!(lat.max_us.abs_diff(100_000) <= 100, "{lat:?}");
        assert!((lat.mean_us - 50_500.0).abs() < 100.0, "{lat:?}");
        let itl = a.itl().expect("samples");
        assert_eq!((itl.count, itl.p50_us), (300, 250));
        assert_eq!(a.ttft().expect("samples").count, 100);
        let errs: Vec<_> = a.errors().collect();
        assert_eq!(errs, vec![(ErrorKind::Timeout, 1), (ErrorKind::Http5xx, 2)]);
    }

    #[test]
    fn empty_recorder_has_no_percentiles() {
        let r = Recorder::default();
        assert!(r.latency().is_none() && r.ttft().is_none() && r.itl().is_none());
        assert_eq!(r.errors().count(), 0);
    }
}
