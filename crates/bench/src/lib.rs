//! `genfront-bench`: the load generator behind `genfront bench`.
//!
//! It owns driving one native generate route (SGLang `POST /generate` or vLLM
//! `POST /inference/v1/generate`) in closed or open loop and measuring what a frontend adds:
//! throughput, latency, time to first token and inter-token latency as seen by the client, and
//! CPU seconds and RSS of the server processes named with `--pid`, per request and per token.
//! Start reading at [`run`]; the flags are [`BenchArgs`], the result is [`Report`].
//!
//! Parts: [`args`] (flags, validation), `prompt` (bodies serialised once), `client` (one request
//! read to an outcome), [`sse`] (event splitting), [`shape`] (token counting per response
//! shape), `stats` (histograms), `runner` (the loops, progress bar, `/proc` watcher),
//! [`procfs`] (parsing), [`report`] (table and JSON).
//!
//! # Staying out of the way
//!
//! A load generator must not be the bottleneck, so the hot path avoids work it can skip:
//!
//! - **HTTP client**: hyper-util's pooled legacy client over plain HTTP/1.1 keep-alive, rather
//!   than reqwest. reqwest wraps the same client but adds per-request URL handling, a boxed body,
//!   redirect/timeout/decompression layers and its own error type; the bench needs none of it and
//!   wants to tell connect failures from mid-response drops. No TLS (engines and the frontend
//!   are benchmarked on loopback or a private network).
//! - **Bodies** are serialised once before the run into a pool of `Bytes` (see `prompt`) and
//!   sent as `Full<Bytes>` (a reference-count bump per request).
//! - **Responses** are parsed into a few borrowed fields: token-id arrays become a count, logprob
//!   lists are skipped without allocating; SSE events are sliced out of the read buffer.
//! - **Recording**: each request's outcome goes into one of a few mutex-guarded hdrhistogram
//!   shards, locked once per request; inter-token gaps collect in a reused per-worker buffer.
//!
//! # Load shapes
//!
//! Closed loop keeps `--concurrency` requests in flight. Open loop (`--rate`) starts requests
//! on a Poisson (default) or fixed schedule with no in-flight cap, and times each request from its
//! **scheduled** start, so a server that falls behind is charged for the queueing it causes
//! (no coordinated omission). `--duration` stops issuing at the deadline and waits for the
//! requests in flight; the measured window ends with the last of them.

pub mod args;
mod client;
pub mod error;
pub mod procfs;
mod prompt;
pub mod report;
mod runner;
pub mod shape;
pub mod sse;
mod stats;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::time::Instant;

pub use args::{Arrival, BenchArgs, ConfigError, Format};
pub use error::ErrorKind;
pub use report::{LoadMode, ProcessReport, Report, RunConfig, render_table};
pub use stats::Percentiles;

use args::Amount;
use client::{Target, build_client};
use prompt::Bodies;
use runner::{
    Ctx, ProcWatch, Progress, Schedule, Shards, Stop, closed_loop, open_loop, shard_count,
};

/// Run the benchmark `args` describes and return what it measured; with `--json`, also write
/// the report there.
///
/// Must be called inside a multi-threaded tokio runtime (requests run on spawned tasks). Fails
/// only on bad arguments, an unwritable `--json` path, or when every warmup request failed to
/// connect; bad server answers are counted in [`Report::errors`].
pub async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    args.validate()?;
    let uri: http::Uri = args
        .target()
        .parse()
        .with_context(|| format!("target {}", args.target()))?;
    let amount = args.amount();
    let wanted = match amount {
        Amount::Requests(n) => n.saturating_add(args.warmup),
        Amount::Duration(_) => u64::MAX,
    };
    let ctx = Arc::new(Ctx {
        client: build_client(),
        target: Target {
            uri,
            format: args.format,
            stream: args.stream,
        },
        bodies: Bodies::build(args, wanted),
        timeout: args.timeout,
    });

    if args.warmup > 0 {
        let c = args
            .concurrency
            .min(usize::try_from(args.warmup).unwrap_or(usize::MAX));
        let shards = Arc::new(Shards::new(1));
        let stop = Stop::Count(args.warmup);
        closed_loop(&ctx, 0, stop, c, &shards, &Progress::hidden()).await?;
        let warm = shards.merged();
        let connect_failures = warm.errors().find(|(k, _)| *k == ErrorKind::Connect);
        if warm.ok() == 0 && connect_failures.is_some_and(|(_, n)| n == args.warmup) {
            anyhow::bail!(
                "cannot connect to {} (every warmup request failed)",
                args.target()
            );
        }
    }

    let watch = ProcWatch::start(&args.pids);
    let start = Instant::now();
    let stop = match amount {
        Amount::Requests(n) => Stop::Count(n),
        Amount::Duration(d) => Stop::At(start + d),
    };
    let progress = Progress::new(!args.no_progress, stop, start);
    let first = args.warmup;
    let (mode, shards) = match args.rate {
        None => {
            let shards = Arc::new(Shards::new(shard_count(args.concurrency)));
            closed_loop(&ctx, first, stop, args.concurrency, &shards, &progress).await?;
            let mode = LoadMode::Closed {
                concurrency: args.concurrency,
            };
            (mode, shards)
        }
        Some(rate) => {
            let shards = Arc::new(Shards::new(shard_count(usize::MAX)));
            let arrival = args.arrival;
            let schedule = Schedule {
                rate,
                arrival,
                seed: args.seed,
            };
            open_loop(&ctx, first, stop, schedule, &shards, &progress).await?;
            (LoadMode::Open { rate, arrival }, shards)
        }
    };
    let elapsed = start.elapsed();
    let procs = watch.finish();
    progress.finish();

    let config = RunConfig {
        target: args.target(),
        format: args.format,
        mode,
        stream: args.stream,
        prompt_len: args.prompt_len,
        distinct_prompts: ctx.bodies.distinct(),
        max_new_tokens: args.max_new_tokens,
        logprobs: args.logprobs,
        packed: args.packed,
        routed_experts: args.routed_experts,
        request_bytes: ctx.bodies.mean_bytes(),
        warmup: args.warmup,
    };
    let report = Report::assemble(config, elapsed, &shards.merged(), procs);
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// Print [`render_table`] of `report` to stdout.
pub fn print_table(report: &Report) {
    print!("{}", render_table(report));
}
