//! The request trace (`--trace-file`): one JSON line per finished request, for RL replay.
//!
//! Records are handed to a writer thread through a bounded channel; when it is full the record is
//! dropped and counted (`genfront_trace_records_dropped_total`), so tracing never blocks a request.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};

use serde::Serialize;

use crate::metrics::Metrics;

/// Capacity of the channel to the writer thread, in records.
pub const TRACE_CHANNEL_CAPACITY: usize = 4096;

/// One finished request.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRecord {
    /// Route path.
    pub route: String,
    /// Format name.
    pub format: &'static str,
    /// The client's id as echoed (`x-request-id`), when any.
    pub client_id: Option<String>,
    /// HTTP status sent (499 when the client went away first).
    pub status: u16,
    /// Error label, empty on success.
    pub error_type: &'static str,
    /// Arrival time, Unix milliseconds.
    pub arrival_unix_ms: u128,
    /// Arrival to first output token, milliseconds (absent when no token was produced).
    pub ttft_ms: Option<f64>,
    /// Arrival to the last byte handed to the connection, milliseconds.
    pub duration_ms: f64,
    /// One entry per engine request.
    pub engine_requests: Vec<TraceEngineRequest>,
}

/// One engine request of a traced request.
#[derive(Debug, Clone, Serialize)]
pub struct TraceEngineRequest {
    /// The private id genfront minted.
    pub internal_id: String,
    /// The native id (SGLang rid / vLLM `generate-tokens-…`).
    pub native_id: String,
    /// Id of the worker that served it (after any retry; for P/D the decode worker), empty when
    /// none was chosen.
    pub worker: String,
    /// For a P/D pair, the prefill worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_worker: Option<String>,
    /// Prompt length in tokens.
    pub prompt_len: usize,
    /// FNV-1a 64 of the prompt ids (little-endian u32s), hex.
    pub prompt_hash: String,
    /// Output token ids, in order, all choices concatenated by choice index.
    pub output_token_ids: Vec<Vec<u32>>,
    /// Finish reason label per choice (`eos`, `stop`, `length`, `cancelled`, `error`), when finished.
    pub finish_reasons: Vec<Option<&'static str>>,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

/// FNV-1a 64 over the little-endian bytes of `ids`, as 16 hex chars.
pub fn prompt_hash(ids: &[u32]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in ids {
        for b in id.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Sender side of the trace writer.
#[derive(Debug, Clone)]
pub struct TraceSink {
    tx: SyncSender<TraceRecord>,
    metrics: Arc<Metrics>,
}

impl TraceSink {
    /// Open (append) `path` and start the writer thread.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (tx, rx) = sync_channel(TRACE_CHANNEL_CAPACITY);
        std::thread::Builder::new()
            .name("genfront-trace".into())
            .spawn(move || write_loop(rx, BufWriter::new(file)))?;
        Ok(Self { tx, metrics })
    }

    /// Queue a record; never blocks (a full channel drops and counts it).
    pub fn record(&self, record: TraceRecord) {
        if self.tx.try_send(record).is_err() {
            self.metrics.trace_dropped();
        }
    }
}

fn write_loop(rx: Receiver<TraceRecord>, mut out: BufWriter<std::fs::File>) {
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(rec) = next.take() {
            if serde_json::to_writer(&mut out, &rec).is_err() || out.write_all(b"\n").is_err() {
                tracing::warn!("trace file write failed");
            }
            match rx.try_recv() {
                Ok(r) => next = Some(r),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => break,
            }
        }
        if out.flush().is_err() {
            tracing::warn!("trace file flush failed");
        }
    }
    let _ = out.flush();
}
