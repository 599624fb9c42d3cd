//! SSE delivery: the response body of a streaming request. The bytes around each event and the
//! stream's terminator are the format's ([`genfront_format::Framing`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::Stream;
use futures::stream::{BoxStream, SelectAll, StreamExt};
use genfront_format::{Assembler, GenerateError, GenerateFormat};

use crate::handler::{RequestGuard, Tagged};
use crate::metrics::LimitMetrics;

/// At most this many events are coalesced into one body chunk (one write to the client: hyper
/// flushes once its write queue holds 32 KiB, so a chunk near that size is one write).
const COALESCE_EVENTS: usize = 64;
/// A body chunk stops coalescing once its events reach this many bytes.
const COALESCE_BYTES: usize = 64 * 1024;
/// An event of at least this many bytes (a large relayed engine frame, e.g. a cumulative frame
/// with logprobs) goes to hyper as it is instead of being copied into the chunk; hyper writes
/// the pieces of a chunk with one vectored write.
const UNCOPIED_EVENT_BYTES: usize = 4 * 1024;

/// The body of a streaming response. Polled by hyper only when the connection can take more, so
/// a slow client backpressures the engine streams; dropping it (client gone) drops the engine
/// streams and the [`RequestGuard`], which aborts the engine work.
pub(crate) struct SseBody {
    outputs: SelectAll<BoxStream<'static, Tagged>>,
    /// An output already taken from `outputs` (the handler waits for it before the headers);
    /// `Some(None)`: `outputs` had already ended.
    first: Option<Option<Tagged>>,
    /// When `first` was in hand (taken when the body is made, right after it arrived).
    first_at: Option<Instant>,
    /// When the first engine item of the chunk being built was in hand: the start of its
    /// `genfront_frontend_overhead_seconds{stage="relay"}` observation.
    chunk_from: Option<Instant>,
    assembler: Box<dyn Assembler>,
    format: Arc<dyn GenerateFormat>,
    events: Vec<Bytes>,
    /// Pieces of the chunk last framed not handed to hyper yet (see [`UNCOPIED_EVENT_BYTES`]).
    out: VecDeque<Bytes>,
    done: bool,
    guard: RequestGuard,
    /// Bytes of events produced so far (with the format's framing).
    sent: u64,
    /// `--max-stream-bytes` and the counter of its hits.
    cap: (u64, LimitMetrics),
}

impl SseBody {
    pub(crate) fn new(
        outputs: SelectAll<BoxStream<'static, Tagged>>,
        first: Option<Option<Tagged>>,
        assembler: Box<dyn Assembler>,
        format: Arc<dyn GenerateFormat>,
        guard: RequestGuard,
        cap: (u64, LimitMetrics),
    ) -> Self {
        let first_at = first.is_some().then(Instant::now);
        Self {
            outputs,
            first,
            first_at,
            chunk_from: None,
            assembler,
            format,
            events: Vec::new(),
            out: VecDeque::new(),
            done: false,
            guard,
            sent: 0,
            cap,
        }
    }

    /// Frame the pending events (and the terminator when `done`): the chunk's first piece; the
    /// others wait in `out`.
    fn frame(&mut self, done: bool) -> Bytes {
        self.format.framing().frame_events_into(
            &mut self.events,
            done,
            UNCOPIED_EVENT_BYTES,
            &mut self.out,
        );
        self.out.pop_front().unwrap_or_default()
    }

    fn fail(&mut self, err: &GenerateError) -> Bytes {
        if err.status().is_server_error() {
            tracing::warn!(format = self.format.name(), code = err.code(), error = %err, "stream failed");
        } else {
            tracing::debug!(format = self.format.name(), code = err.code(), error = %err, "stream ended with error");
        }
        let ev = self.format.stream_error_event(err);
        self.events.push(ev);
        self.done = true;
        self.guard.tracker.complete(200, err.code());
        self.frame(true)
    }
}

impl Stream for SseBody {
    type Item = Result<Bytes, Infallible>;

    /// The next body chunk; each one holding events of an engine item is observed in
    /// `genfront_frontend_overhead_seconds{stage="relay"}`, from its first item in hand to here
    /// (one clock read per chunk beyond the tracker's per-output one).
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = this.poll_chunk(cx);
        if let Poll::Ready(Some(_)) = &polled
            && let Some(from) = this.chunk_from.take()
        {
            this.guard.tracker.relayed(from);
        }
        polled
    }
}

impl SseBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Infallible>>> {
        let this = self;
        loop {
            if let Some(piece) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(piece)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            // Events of outputs that were already ready are coalesced into one body chunk (one
            // write to the client instead of one per token); nothing waits for more to arrive.
            let (polled, at) = match this.first.take() {
                Some(item) => (Poll::Ready(item), this.first_at.take()),
                None => (this.outputs.poll_next_unpin(cx), None),
            };
            let polled = match polled {
                Poll::Ready(item) => item,
                Poll::Pending if this.events.is_empty() => return Poll::Pending,
                Poll::Pending => return Poll::Ready(Some(Ok(this.frame(false)))),
            };
            let before = this.events.len();
            match polled {
                Some((sub, Ok(out))) => {
                    let now = at.unwrap_or_else(Instant::now);
                    this.chunk_from.get_or_insert(now);
                    this.guard.tracker.observe_at(sub, &out, now);
                    if let Err(e) = this.assembler.on_output(sub, out, &mut this.events) {
                        this.events.truncate(before);
                        return Poll::Ready(Some(Ok(this.fail(&e))));
                    }
                    // --max-stream-bytes: the events that would pass it are not sent; the
                    // stream ends with the error event, and dropping the body aborts the engine.
                    let framing = this.format.framing();
                    let added: u64 = this.events[before..]
                        .iter()
                        .map(|e| framing.event_len(e.len()) as u64)
                        .sum();
                    this.sent = this.sent.saturating_add(added);
                    if this.sent > this.cap.0 {
                        this.events.truncate(before);
                        this.cap.1.hit("max_stream_bytes");
                        // Dropping the engine streams aborts the engine work now.
                        this.outputs = SelectAll::new();
                        let err = crate::caps::stream_too_large(this.cap.0);
                        return Poll::Ready(Some(Ok(this.fail(&err))));
                    }
                    if this.events.len() >= COALESCE_EVENTS
                        || this.events.iter().map(Bytes::len).sum::<usize>() >= COALESCE_BYTES
                    {
                        return Poll::Ready(Some(Ok(this.frame(false))));
                    }
                }
                Some((_, Err(e))) => {
                    this.chunk_from
                        .get_or_insert_with(|| at.unwrap_or_else(Instant::now));
                    return Poll::Ready(Some(Ok(this.fail(&GenerateError::from(e)))));
                }
                None => {
                    if let Err(e) = this.assembler.finish_stream(&mut this.events) {
                        this.events.truncate(before);
                        return Poll::Ready(Some(Ok(this.fail(&e))));
                    }
                    this.done = true;
                    this.guard.tracker.complete(200, "");
                    return Poll::Ready(Some(Ok(this.frame(true))));
                }
            }
        }
    }
}
