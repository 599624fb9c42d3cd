//! The load loops (closed and open), the progress bar and the `/proc` watcher.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::args::Arrival;
use crate::client::{HttpClient, Target, execute};
use crate::error::ErrorKind;
use crate::procfs::{self, CpuTicks};
use crate::prompt::{Bodies, SplitMix64};
use crate::report::ProcessSample;
use crate::stats::{Recorder, Scratch, Success};

/// Shared, read-only state of a run.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub client: HttpClient,
    pub target: Target,
    pub bodies: Bodies,
    pub timeout: Duration,
}

impl Ctx {
    /// Request `i`, counted from `start`, cut off at `start + timeout`.
    async fn one(
        &self,
        i: u64,
        start: Instant,
        scratch: &mut Scratch,
    ) -> Result<Success, ErrorKind> {
        let body = self.bodies.get(i);
        let fut = execute(&self.client, &self.target, body, start, scratch);
        tokio::time::timeout_at(start + self.timeout, fut)
            .await
            .unwrap_or(Err(ErrorKind::Timeout))
    }
}

/// When a phase stops issuing requests.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// After this many requests.
    Count(u64),
    /// No new request at or after this instant (in-flight ones finish).
    At(Instant),
}

/// Recorders behind a few mutexes, locked once per finished request.
#[derive(Debug)]
pub(crate) struct Shards(Vec<Mutex<Recorder>>);

impl Shards {
    pub fn new(n: usize) -> Self {
        Self((0..n.max(1)).map(|_| Mutex::default()).collect())
    }

    fn record(&self, key: u64, outcome: Result<Success, ErrorKind>, itl: &[(u64, u64)]) {
        let idx = (key % self.0.len() as u64) as usize;
        self.0[idx]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(outcome, itl);
    }

    pub fn merged(&self) -> Recorder {
        let mut all = Recorder::default();
        for s in &self.0 {
            all.merge(&s.lock().unwrap_or_else(PoisonError::into_inner));
        }
        all
    }
}

/// Shards for `workers` concurrent recorders: enough to keep lock contention low on this many
/// cores, few enough that merging and memory stay trivial.
pub(crate) fn shard_count(workers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    workers.clamp(1, 4 * cores)
}

/// Keep `concurrency` requests in flight; request ids start at `first`.
pub(crate) async fn closed_loop(
    ctx: &Arc<Ctx>,
    first: u64,
    stop: Stop,
    concurrency: usize,
    shards: &Arc<Shards>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for w in 0..concurrency as u64 {
        let (ctx, shards, next, progress) =
            (ctx.clone(), shards.clone(), next.clone(), progress.clone());
        set.spawn(async move {
            let mut scratch = Scratch::default();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let start = Instant::now();
                match stop {
                    Stop::Count(n) if k >= n => break,
                    Stop::At(t) if start >= t => break,
                    _ => {}
                }
                let outcome = ctx.one(first + k, start, &mut scratch).await;
                shards.record(w, outcome, &scratch.itl);
                progress.tick();
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    Ok(())
}

/// Open-loop arrivals: `rate` per second, spaced by `arrival`, jitter drawn from `seed`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub rate: f64,
    pub arrival: Arrival,
    pub seed: u64,
}

/// Start requests on `schedule` from now; each is timed from its scheduled start.
pub(crate) async fn open_loop(
    ctx: &Arc<Ctx>,
    first: u64,
    stop: Stop,
    schedule: Schedule,
    shards: &Arc<Shards>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let Schedule {
        rate,
        arrival,
        seed,
    } = schedule;
    let mut rng = SplitMix64::new(seed, u64::MAX);
    let mut at = Instant::now();
    let mut set = JoinSet::new();
    for k in 0u64.. {
        if k > 0 {
            let gap = match arrival {
                Arrival::Fixed => 1.0 / rate,
                Arrival::Poisson => -rng.next_unit().ln() / rate,
            };
            at += Duration::try_from_secs_f64(gap).unwrap_or(Duration::MAX / 4);
        }
        match stop {
            Stop::Count(n) if k >= n => break,
            Stop::At(t) if at >= t => break,
            _ => {}
        }
        if at > Instant::now() {
            tokio::time::sleep_until(at).await;
        }
        while let Some(r) = set.try_join_next() {
            r?;
        }
        let (ctx, shards, progress) = (ctx.clone(), shards.clone(), progress.clone());
        set.spawn(async move {
            let mut scratch = Scratch::default();
            let outcome = ctx.one(first + k, at, &mut scratch).await;
            shards.record(k, outcome, &scratch.itl);
            progress.tick();
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    Ok(())
}

// === impl Progress ===

/// The progress bar (on stderr), or nothing.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    /// Duration mode: the bar counts milliseconds from `start`.
    timed: Option<Instant>,
}

impl Progress {
    pub fn hidden() -> Self {
        Self {
            bar: None,
            timed: None,
        }
    }

    /// A bar unless disabled or stdout is not a terminal.
    pub fn new(enabled: bool, stop: Stop, start: Instant) -> Self {
        if !enabled || !std::io::stdout().is_terminal() {
            return Self::hidden();
        }
        let (len, timed, template) = match stop {
            Stop::Count(n) => (n, None, "{wide_bar} {pos}/{len} {per_sec} eta {eta}"),
            Stop::At(t) => (
                u64::try_from(t.saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX),
                Some(start),
                "{wide_bar} {elapsed} / {len}ms",
            ),
        };
        let bar = ProgressBar::new(len);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        Self {
            bar: Some(bar),
            timed,
        }
    }

    /// One request finished.
    fn tick(&self) {
        let Some(bar) = &self.bar else { return };
        match self.timed {
            None => bar.inc(1),
            Some(start) => {
                let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                bar.set_position(ms.min(bar.length().unwrap_or(ms)));
            }
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

// === impl ProcWatch ===

/// CPU before/after and RSS sampled every 100 ms for each `--pid`.
pub(crate) struct ProcWatch {
    pids: Vec<(u32, Result<CpuTicks, String>)>,
    peaks: Arc<Vec<AtomicU64>>,
    sampler: Option<tokio::task::JoinHandle<()>>,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

fn sample_rss(pids: &[u32], peaks: &[AtomicU64]) {
    for (pid, peak) in pids.iter().zip(peaks) {
        if let Ok(m) = procfs::read_mem(*pid) {
            peak.fetch_max(m.rss, Ordering::Relaxed);
        }
    }
}

impl ProcWatch {
    /// Take the "before" readings and start sampling.
    pub fn start(pids: &[u32]) -> Self {
        let peaks: Arc<Vec<AtomicU64>> = Arc::new(pids.iter().map(|_| AtomicU64::new(0)).collect());
        let before = pids
            .iter()
            .map(|&p| (p, procfs::read_cpu(p).map_err(|e| e.to_string())))
            .collect();
        sample_rss(pids, &peaks);
        let sampler = (!pids.is_empty()).then(|| {
            let (pids, peaks) = (pids.to_vec(), peaks.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    every.tick().await;
                    sample_rss(&pids, &peaks);
                }
            })
        });
        Self {
            pids: before,
            peaks,
            sampler,
        }
    }

    /// Stop sampling and take the "after" readings.
    pub fn finish(mut self) -> Vec<ProcessSample> {
        if let Some(s) = self.sampler.take() {
            s.abort();
        }
        let pids: Vec<u32> = self.pids.iter().map(|(p, _)| *p).collect();
        sample_rss(&pids, &self.peaks);
        let tck = procfs::clock_ticks_per_sec();
        self.pids
            .iter()
            .zip(self.peaks.iter())
            .map(|((pid, before), peak)| {
                let mut s = ProcessSample {
                    pid: *pid,
                    ..ProcessSample::default()
                };
                let after = procfs::read_cpu(*pid).map_err(|e| e.to_string());
                match (before, &after) {
                    (Ok(b), Ok(a)) => {
                        let ticks = a.total().saturating_sub(b.total());
                        s.cpu = Some(Duration::from_secs_f64(ticks as f64 / tck as f64));
                    }
                    (Err(e), _) | (_, Err(e)) => s.error = Some(e.clone()),
                }
                match procfs::read_mem(*pid) {
                    Ok(m) => s.hwm = Some(m.hwm),
                    Err(e) => s.error = s.error.take().or(Some(e.to_string())),
                }
                let p = peak.load(Ordering::Relaxed);
                s.rss_peak = (p > 0).then_some(p);
                s
            })
            .collect()
    }
}

impl Drop for ProcWatch {
    fn drop(&mut self) {
        if let Some(s) = self.sampler.take() {
            s.abort();
        }
    }
}
