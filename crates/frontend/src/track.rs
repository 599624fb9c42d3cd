//! Per-request accounting: metrics and the trace record, settled on drop (RAII), so a client
//! that goes away mid-request is counted as a disconnect without anyone remembering to call
//! `finish()`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use genfront_protocol::EngineOutput;

use crate::AppState;
use crate::metrics::FormatHandles;
use crate::trace::{TraceEngineRequest, TraceRecord, prompt_hash};

#[derive(Debug)]
struct SubTrack {
    internal_id: String,
    native_id: String,
    worker: Option<genfront_router::ServedBy>,
    prefill_worker: Option<String>,
    prompt_len: usize,
    prompt_hash: String,
    n: usize,
    finished: usize,
    cached_tokens: u32,
    output_ids: Vec<Vec<u32>>,
    finish: Vec<Option<&'static str>>,
}

/// Accounting of one generate request, from arrival to drop.
#[derive(Debug)]
pub(crate) struct Tracker {
    state: Arc<AppState>,
    route: Arc<str>,
    format: &'static str,
    handles: FormatHandles,
    arrival: Instant,
    arrival_unix_ms: u128,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    /// Start of a wait that is not the frontend's cost (pause wait, body upload), see
    /// [`Tracker::wait_started`].
    wait_from: Option<Instant>,
    /// Time spent in such waits so far.
    waited: Duration,
    /// When the last engine output was in hand (the relay stage of a unary answer starts here).
    last_output: Option<Instant>,
    pub(crate) client_id: Option<String>,
    subs: Vec<SubTrack>,
    outcome: Option<(u16, &'static str)>,
    trace: bool,
}

impl Tracker {
    pub(crate) fn start(state: Arc<AppState>, route: Arc<str>, format: &'static str) -> Self {
        let handles = state.metrics.handles(format);
        handles.in_flight.inc();
        let arrival_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let trace = state.trace.is_some();
        Self {
            state,
            route,
            format,
            handles,
            arrival: Instant::now(),
            arrival_unix_ms,
            first_token: None,
            last_token: None,
            wait_from: None,
            waited: Duration::ZERO,
            last_output: None,
            client_id: None,
            subs: Vec::new(),
            outcome: None,
            trace,
        }
    }

    /// A wait that is not the frontend's own cost starts now: waiting for a pause to lift and
    /// for the client's body to arrive. Ended by [`Tracker::wait_ended`]; the time between is
    /// left out of `genfront_frontend_overhead_seconds{stage="dispatch"}`.
    pub(crate) fn wait_started(&mut self) {
        self.wait_from = Some(Instant::now());
    }

    /// The wait begun by [`Tracker::wait_started`] is over (the body is fully read).
    pub(crate) fn wait_ended(&mut self) {
        if let Some(from) = self.wait_from.take() {
            self.waited += from.elapsed();
        }
    }

    /// Every engine request of this request is handed to its engine client: observe
    /// `genfront_frontend_overhead_seconds{stage="dispatch"}`, the time since arrival less the
    /// waits (seconds). Called once per request, after the last sub-request is dispatched.
    pub(crate) fn handed_over(&mut self) {
        let spent = self.arrival.elapsed().saturating_sub(self.waited);
        self.handles.dispatch_overhead.observe(spent.as_secs_f64());
    }

    /// A response chunk made from engine outputs, the first of them in hand at `from`, is
    /// handed to the client connection now: observe
    /// `genfront_frontend_overhead_seconds{stage="relay"}` (seconds).
    pub(crate) fn relayed(&self, from: Instant) {
        self.handles
            .relay_overhead
            .observe(from.elapsed().as_secs_f64());
    }

    /// Record a dispatched engine request.
    pub(crate) fn dispatched(
        &mut self,
        internal_id: &str,
        native_id: &str,
        prompt: &[u32],
        n: u32,
    ) {
        let n = n.max(1) as usize;
        self.subs.push(SubTrack {
            internal_id: if self.trace {
                internal_id.to_owned()
            } else {
                String::new()
            },
            native_id: if self.trace {
                native_id.to_owned()
            } else {
                String::new()
            },
            worker: None,
            prefill_worker: None,
            prompt_len: prompt.len(),
            prompt_hash: if self.trace {
                prompt_hash(prompt)
            } else {
                String::new()
            },
            n,
            finished: 0,
            cached_tokens: 0,
            output_ids: if self.trace {
                vec![Vec::new(); n]
            } else {
                Vec::new()
            },
            finish: vec![None; n],
        });
    }

    /// Record which worker serves the sub-request dispatched last (and, for a P/D pair, its
    /// prefill worker).
    pub(crate) fn served_by(
        &mut self,
        worker: genfront_router::ServedBy,
        prefill: Option<&genfront_router::WorkerId>,
    ) {
        if let Some(s) = self.subs.last_mut() {
            s.worker = Some(worker);
            s.prefill_worker = prefill.map(ToString::to_string);
        }
    }

    /// Observe one engine output of sub-request `sub` (before the assembler consumes it), in
    /// hand now.
    pub(crate) fn observe(&mut self, sub: usize, out: &EngineOutput) {
        self.observe_at(sub, out, Instant::now());
    }

    /// [`Tracker::observe`] for an output in hand since `now` (the clock read once per output,
    /// shared with the relay stage).
    pub(crate) fn observe_at(&mut self, sub: usize, out: &EngineOutput, now: Instant) {
        self.last_output = Some(now);
        if !out.token_ids.is_empty() {
            let k = out.token_ids.len();
            match self.last_token {
                None => self
                    .handles
                    .ttft
                    .observe((now - self.arrival).as_secs_f64()),
                Some(last) => {
                    let per_token = (now - last).as_secs_f64() / k as f64;
                    for _ in 0..k {
                        self.handles.itl.observe(per_token);
                    }
                }
            }
            if self.first_token.is_none() {
                self.first_token = Some(now);
            }
            self.last_token = Some(now);
            self.handles.output_tokens.inc_by(k as u64);
        }
        let Some(s) = self.subs.get_mut(sub) else {
            return;
        };
        let choice = out.index as usize;
        if let Some(ids) = s.output_ids.get_mut(choice).filter(|_| self.trace) {
            ids.extend_from_slice(&out.token_ids);
        }
        if let Some(u) = &out.usage {
            s.cached_tokens = u.cached_tokens;
        }
        if let (Some(f), Some(slot)) = (&out.finish_reason, s.finish.get_mut(choice)) {
            if slot.is_none() {
                s.finished += 1;
            }
            *slot = Some(f.label());
        }
    }

    /// The response is complete (last byte handed over) with `status` and `error_type`.
    pub(crate) fn complete(&mut self, status: u16, error_type: &'static str) {
        self.complete_at(status, error_type, Instant::now());
    }

    /// A unary answer's body is ready, with `status`: observe the relay stage (from the last
    /// engine output in hand, [`Tracker::observe`]) and complete the request.
    pub(crate) fn complete_unary(&mut self, status: u16) {
        let now = Instant::now();
        if self.outcome.is_none()
            && let Some(from) = self.last_output
        {
            self.handles
                .relay_overhead
                .observe(now.saturating_duration_since(from).as_secs_f64());
        }
        self.complete_at(status, "", now);
    }

    fn complete_at(&mut self, status: u16, error_type: &'static str, now: Instant) {
        if self.outcome.is_none() {
            self.outcome = Some((status, error_type));
            self.handles
                .duration
                .observe(now.saturating_duration_since(self.arrival).as_secs_f64());
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.handles.in_flight.dec();
        let (status, error_type) = match self.outcome {
            Some(o) => o,
            None => {
                self.handles.disconnects.inc();
                let unfinished = self.subs.iter().filter(|s| s.finished < s.n).count();
                self.handles.disconnect_aborts.inc_by(unfinished as u64);
                (499, "client_disconnect")
            }
        };
        self.state
            .metrics
            .request_done(&self.route, self.format, status, error_type);
        for s in &self.subs {
            self.handles.input_tokens.inc_by(s.prompt_len as u64);
            self.handles
                .cached_tokens
                .inc_by(u64::from(s.cached_tokens));
        }
        if let Some(trace) = &self.state.trace {
            let rec = TraceRecord {
                route: self.route.to_string(),
                format: self.format,
                client_id: self.client_id.take(),
                status,
                error_type,
                arrival_unix_ms: self.arrival_unix_ms,
                ttft_ms: self
                    .first_token
                    .map(|t| (t - self.arrival).as_secs_f64() * 1e3),
                duration_ms: self.arrival.elapsed().as_secs_f64() * 1e3,
                engine_requests: self
                    .subs
                    .drain(..)
                    .map(|s| TraceEngineRequest {
                        internal_id: s.internal_id,
                        native_id: s.native_id,
                        worker: s
                            .worker
                            .as_ref()
                            .map(|w| w.get().to_string())
                            .unwrap_or_default(),
                        prefill_worker: s.prefill_worker.clone(),
                        prompt_len: s.prompt_len,
                        prompt_hash: s.prompt_hash,
                        output_token_ids: s.output_ids,
                        finish_reasons: s.finish,
                        cached_tokens: s.cached_tokens,
                    })
                    .collect(),
            };
            trace.record(rec);
        }
    }
}
