//! [`Report`]: what a run measured, as a table ([`render_table`]) or JSON (serde).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::args::{Arrival, Format};
use crate::error::ErrorKind;
use crate::stats::{Percentiles, Recorder};

/// The load shape of the measured phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "loop", rename_all = "snake_case")]
pub enum LoadMode {
    /// `concurrency` requests kept in flight.
    Closed {
        /// In-flight requests.
        concurrency: usize,
    },
    /// Requests started at `rate` per second, whatever the server's pace.
    Open {
        /// Target arrivals per second.
        rate: f64,
        /// Spacing of arrivals.
        arrival: Arrival,
    },
}

/// What the run sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunConfig {
    /// Full target URI.
    pub target: String,
    /// Wire format.
    pub format: Format,
    /// Load shape.
    pub mode: LoadMode,
    /// Whether answers were streamed (SSE).
    pub stream: bool,
    /// Prompt length in tokens.
    pub prompt_len: usize,
    /// Distinct prompts sent; requests cycle through them (1 with `--shared-prefix`).
    pub distinct_prompts: usize,
    /// Requested output tokens per request.
    pub max_new_tokens: u32,
    /// Top logprobs requested per token, if any.
    pub logprobs: Option<u32>,
    /// Ids sent packed with a packed answer asked for (`--packed`).
    pub packed: bool,
    /// Routed experts asked for (`--routed-experts`).
    pub routed_experts: bool,
    /// Mean bytes of one request body.
    pub request_bytes: u64,
    /// Unmeasured requests sent first.
    pub warmup: u64,
}

/// CPU and memory of one `--pid` over the measured window. Fields are `None` when `/proc` could
/// not be read (then `error` says why).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessReport {
    /// The process id.
    pub pid: u32,
    /// `utime + stime` spent during the window, in seconds (tick resolution, usually 10 ms).
    pub cpu_s: Option<f64>,
    /// `cpu_s` per finished request (successes and errors alike), in microseconds.
    pub cpu_us_per_request: Option<f64>,
    /// `cpu_s` per output token counted, in microseconds.
    pub cpu_us_per_output_token: Option<f64>,
    /// Largest `VmRSS` sampled (every 100 ms and at both ends of the window), in bytes.
    pub rss_peak_bytes: Option<u64>,
    /// `VmHWM` at the end: the process's lifetime peak RSS (may predate the window), in bytes.
    pub vm_hwm_bytes: Option<u64>,
    /// Why a reading is missing.
    pub error: Option<String>,
}

/// Raw process readings for one pid; [`Report::assemble`] derives the per-unit figures.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessSample {
    pub pid: u32,
    pub cpu: Option<Duration>,
    pub rss_peak: Option<u64>,
    pub hwm: Option<u64>,
    pub error: Option<String>,
}

/// Everything one run measured. Latency percentiles cover successful requests only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// What was sent.
    pub config: RunConfig,
    /// Length of the measured window (first start to last completion), in seconds.
    pub elapsed_s: f64,
    /// Requests finished in the window: `ok` plus every error.
    pub requests: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Failed requests per kind (only kinds that occurred).
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Successful requests per second of the window.
    pub requests_per_s: f64,
    /// Output tokens counted from successful answers.
    pub output_tokens: u64,
    /// `output_tokens` per second of the window.
    pub output_tokens_per_s: f64,
    /// Start to end of the answer (`[DONE]` for streams).
    pub latency: Option<Percentiles>,
    /// Time to the first event carrying tokens (streams only).
    pub ttft: Option<Percentiles>,
    /// Gap between token-carrying events divided by the tokens in the later event, one sample
    /// per token (streams only).
    pub itl: Option<Percentiles>,
    /// One entry per `--pid`.
    pub processes: Vec<ProcessReport>,
}

impl Report {
    pub(crate) fn assemble(
        config: RunConfig,
        elapsed: Duration,
        rec: &Recorder,
        procs: Vec<ProcessSample>,
    ) -> Self {
        let errors: BTreeMap<ErrorKind, u64> = rec.errors().collect();
        let requests = rec.ok() + errors.values().sum::<u64>();
        let secs = elapsed.as_secs_f64();
        let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let per = |cpu: Option<Duration>, n: u64| {
            cpu.filter(|_| n > 0)
                .map(|c| c.as_secs_f64() * 1e6 / n as f64)
        };
        let processes = procs
            .into_iter()
            .map(|p| ProcessReport {
                pid: p.pid,
                cpu_s: p.cpu.map(|c| c.as_secs_f64()),
                cpu_us_per_request: per(p.cpu, requests),
                cpu_us_per_output_token: per(p.cpu, rec.output_tokens()),
                rss_peak_bytes: p.rss_peak,
                vm_hwm_bytes: p.hwm,
                error: p.error,
            })
            .collect();
        Report {
            config,
            elapsed_s: secs,
            requests,
            ok: rec.ok(),
            errors,
            requests_per_s: per_s(rec.ok()),
            output_tokens: rec.output_tokens(),
            output_tokens_per_s: per_s(rec.output_tokens()),
            latency: rec.latency(),
            ttft: rec.ttft(),
            itl: rec.itl(),
            processes,
        }
    }

    /// Failed requests of every kind.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The human-readable table [`crate::print_table`] prints.
pub fn render_table(r: &Report) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = write_table(&mut s, r);
    s
}

fn write_table(s: &mut String, r: &Report) -> std::fmt::Result {
    let c = &r.config;
    let mode = match c.mode {
        LoadMode::Closed { concurrency } => format!("closed loop, concurrency {concurrency}"),
        LoadMode::Open { rate, arrival } => {
            let a = match arrival {
                Arrival::Poisson => "poisson",
                Arrival::Fixed => "fixed",
            };
            format!("open loop, {rate} req/s ({a})")
        }
    };
    let format = match c.format {
        Format::Sglang => "sglang",
        Format::Vllm => "vllm",
    };
    writeln!(s, "target    {format} {}", c.target)?;
    write!(
        s,
        "load      {mode}, {}, prompt {} tok ({} distinct), max_new_tokens {}",
        if c.stream { "stream" } else { "unary" },
        c.prompt_len,
        c.distinct_prompts,
        c.max_new_tokens,
    )?;
    if let Some(k) = c.logprobs {
        write!(s, ", logprobs {k}")?;
    }
    if c.packed {
        write!(s, ", packed")?;
    }
    if c.routed_experts {
        write!(s, ", routed experts")?;
    }
    write!(s, ", {} B/request body", c.request_bytes)?;
    writeln!(s, ", warmup {}", c.warmup)?;
    writeln!(
        s,
        "requests  {} ({} ok, {} failed) in {:.3} s: {:.1} req/s",
        r.requests,
        r.ok,
        r.error_count(),
        r.elapsed_s,
        r.requests_per_s
    )?;
    writeln!(
        s,
        "tokens    {} out: {:.1} tok/s",
        r.output_tokens, r.output_tokens_per_s
    )?;
    if !r.errors.is_empty() {
        let list: Vec<String> = r
            .errors
            .iter()
            .map(|(k, n)| format!("{} {n}", k.code()))
            .collect();
        writeln!(s, "errors    {}", list.join(", "))?;
    }
    writeln!(s)?;
    writeln!(
        s,
        "{:<10}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "ms", "count", "p50", "p90", "p99", "max", "mean"
    )?;
    for (name, p) in [("latency", &r.latency), ("ttft", &r.ttft), ("itl", &r.itl)] {
        let Some(p) = p else { continue };
        let ms = |us: u64| us as f64 / 1000.0;
        writeln!(
            s,
            "{name:<10}{:>9}{:>10.3}{:>10.3}{:>10.3}{:>10.3}{:>10.3}",
            p.count,
            ms(p.p50_us),
            ms(p.p90_us),
            ms(p.p99_us),
            ms(p.max_us),
            p.mean_us / 1000.0
        )?;
    }
    if r.processes.is_empty() {
        return Ok(());
    }
    writeln!(s)?;
    writeln!(
        s,
        "{:<10}{:>10}{:>12}{:>12}{:>14}{:>12}",
        "pid", "cpu s", "cpu us/req", "cpu us/tok", "rss peak MiB", "VmHWM MiB"
    )?;
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
    let mib = |b: Option<u64>| b.map(|b| b as f64 / (1024.0 * 1024.0));
    for p in &r.processes {
        writeln!(
            s,
            "{:<10}{:>10}{:>12}{:>12}{:>14}{:>12}",
            p.pid,
            opt(p.cpu_s, 3),
            opt(p.cpu_us_per_request, 1),
            opt(p.cpu_us_per_output_token, 2),
            opt(mib(p.rss_peak_bytes), 1),
            opt(mib(p.vm_hwm_bytes), 1),
        )?;
        if let Some(e) = &p.error {
            writeln!(s, "          ({e})")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
