//! [`Run`]: the lazily polled state machine behind one request's output stream.
//!
//! No task is spawned: the stream computes each item when the consumer polls it, so dropping the
//! stream stops all work at once and memory stays bounded by one item (plus prompt-sized data).
//!
//! Phases: `Start` (held first while the engine is paused; then count, consult the prefix cache)
//! → `Sleep(TTFT)` → `Boundary` (a freezing pause holds the run here; scripted faults fire here)
//! → `Emit` (one item per unfinished choice) → `Sleep(ITL)` → `Boundary` → … → `Done`.
//! Cancellation at any point, or the engine's halt token (a pause with `abort`), leads to
//! `Cancel`, which ends every unfinished choice.

use std::sync::Arc;
use std::time::Duration;

use futures::stream;
use genfront_protocol::{
    EngineError, EngineOutput, EngineRequest, FinishReason, NativeBody, OutputStream, PdRole,
    PromptLogprobs, RoutedExperts, StopMatch, Usage,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::FaultAction;
use crate::cache::cache_salt;
use crate::control::VersionView;
use crate::engine::{Outcome, RunGuard, Shared};
use crate::hash::{combine, tag, unit};
use crate::model::{Model, Sampler};
use crate::rooms::{self, RoomState};

/// The `FinishReason::Cancelled` message, as SGLang reports aborts.
const ABORTED: &str = "Aborted";
/// Stand-in for "never" when a scaled delay overflows the clock.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// One request in flight.
pub(crate) struct Run {
    shared: Arc<Shared>,
    req: EngineRequest,
    cancel: CancellationToken,
    /// The engine's halt token taken when the request was admitted: a pause with `abort` fires it.
    halt: CancellationToken,
    /// The weight version outputs report (once one was set).
    version: VersionView,
    /// A mid-stream fault still to fire.
    fault: Option<FaultAction>,
    sampler: Sampler,
    /// Sorted ids that may not be sampled before `min_tokens` (stop ids, and EOS unless ignored).
    suppressed: Vec<u32>,
    /// Sorted stop token ids.
    stop_ids: Vec<u32>,
    /// Output tokens allowed per choice.
    budget: u32,
    prompt_len: u32,
    cached: u32,
    choices: Vec<Choice>,
    /// Tokens per choice delivered in completed steps.
    step: u32,
    /// Next choice to consider in the current step.
    cursor: usize,
    phase: Phase,
    /// When the last timed wait ended (or will end); `None` until the first one.
    deadline: Option<Instant>,
    guard: Option<RunGuard>,
    scratch: Vec<(u64, f64)>,
    /// Choices that have not had their first item yet.
    firsts_left: u32,
    prompt_logprobs: Option<PromptLogprobs>,
    prompt_experts: Option<RoutedExperts>,
    /// The P/D leg this run is, if any.
    leg: Option<PdRole>,
    /// SGLang-style bootstrap room of a P/D leg.
    room: Option<u64>,
    /// The prefill leg hands off by `kv_transfer_params` (vLLM style).
    kv_style: bool,
}

#[derive(Debug)]
struct Choice {
    /// Context hash of prompt + this choice's tokens.
    ctx: u64,
    /// Key of this choice's sampling stream.
    sample_key: u64,
    generated: u32,
    finished: bool,
    /// vLLM-style weight-version spans of this choice's tokens: `(version, start, end)`,
    /// half-open output indices. Kept only once a version was set.
    spans: Vec<(String, u32, u32)>,
}

#[derive(Debug)]
enum Phase {
    Start,
    /// A decode leg waits for its prefill's KV (bootstrap room).
    WaitRoom(u64),
    Sleep(Duration),
    Boundary,
    Emit,
    Stall,
    Cancel,
    FinishError(String),
    Done,
}

// === impl Run ===

impl Run {
    /// Prepare a run for a validated `req`; nothing happens until the stream is polled.
    pub(crate) fn new(
        shared: Arc<Shared>,
        mut req: EngineRequest,
        cancel: CancellationToken,
        fault: Option<FaultAction>,
    ) -> Self {
        // The native body is for engine clients that re-encode it; don't hold it for the stream.
        req.native = NativeBody::default();
        req.handoff = None;
        let leg = req.pd.as_ref().map(|p| p.role);
        let bootstrap_room = req
            .pd
            .as_ref()
            .and_then(|p| p.bootstrap.as_ref())
            .map(|b| b.room);
        let kv_style = req
            .pd
            .as_ref()
            .is_some_and(|p| p.kv_transfer_params.is_some());
        let info = &shared.config.info;
        let prompt_len = u32::try_from(req.token_ids.len()).unwrap_or(u32::MAX);
        let room = info.max_context_len.saturating_sub(prompt_len);
        let mut budget = req.stop.max_tokens.map_or(room, |m| m.min(room));
        if leg == Some(PdRole::Prefill) {
            // A prefill samples the first token only.
            budget = budget.min(1);
        }
        let mut stop_ids = req.stop.stop_token_ids.clone();
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let mut suppressed = stop_ids.clone();
        if !req.stop.ignore_eos {
            suppressed.extend_from_slice(&info.eos_token_ids);
        }
        suppressed.sort_unstable();
        suppressed.dedup();
        let halt = shared.control.halt_token();
        Self {
            halt,
            version: VersionView::default(),
            sampler: Sampler::new(&req.sampling),
            suppressed,
            stop_ids,
            budget,
            prompt_len,
            cached: 0,
            choices: Vec::new(),
            step: 0,
            cursor: 0,
            phase: Phase::Start,
            deadline: None,
            guard: None,
            scratch: Vec::new(),
            firsts_left: req.sampling.n,
            prompt_logprobs: None,
            prompt_experts: None,
            leg,
            room: bootstrap_room,
            kv_style,
            shared,
            req,
            cancel,
            fault,
        }
    }

    pub(crate) fn into_stream(self) -> OutputStream {
        Box::pin(stream::unfold(self, |mut run| async move {
            let item = run.next_item().await?;
            Some((item, run))
        }))
    }

    async fn next_item(&mut self) -> Option<Result<EngineOutput, EngineError>> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Start => {
                    if self.shared.control.is_paused() && !self.halt.is_cancelled() {
                        // Held before it starts while the engine is paused, as SGLang's
                        // `is_pause_cond` and vLLM's `AsyncLLM` hold new requests.
                        let shared = Arc::clone(&self.shared);
                        let resumed = tokio::select! {
                            biased;
                            () = self.cancel.cancelled() => false,
                            () = shared.control.unpaused() => true,
                        };
                        if resumed {
                            // Admitted now: only a later abort-all ends it.
                            self.halt = shared.control.halt_token();
                        }
                    }
                    self.start();
                }
                Phase::WaitRoom(room) => {
                    let wait: futures::future::BoxFuture<'static, RoomState> =
                        match &self.shared.room_waiter {
                            Some(waiter) => waiter.wait(room),
                            None => Box::pin(rooms::wait(room)),
                        };
                    let state = tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => None,
                        () = self.halt.cancelled() => None,
                        s = wait => Some(s),
                    };
                    match state {
                        None => self.phase = Phase::Cancel,
                        Some(RoomState::Ready) => {
                            self.phase = Phase::Sleep(self.shared.config.itl());
                        }
                        Some(_) => {
                            self.settle(Outcome::Failed);
                            return Some(Err(EngineError::internal(format!(
                                "KV transfer for bootstrap room {room} failed: the prefill did not finish"
                            ))));
                        }
                    }
                }
                Phase::Sleep(delay) => {
                    self.phase = if delay.is_zero() || self.sleep(delay).await {
                        Phase::Boundary
                    } else {
                        Phase::Cancel
                    };
                }
                Phase::Boundary => {
                    if self.stopped() {
                        self.phase = Phase::Cancel;
                        continue;
                    }
                    if self.shared.control.is_frozen() {
                        // A pause that keeps requests (in_place, retract, keep): no token until
                        // the resume, after which step timing restarts from then.
                        let shared = Arc::clone(&self.shared);
                        let resumed = tokio::select! {
                            biased;
                            () = self.cancel.cancelled() => false,
                            () = self.halt.cancelled() => false,
                            () = shared.control.unfrozen() => true,
                        };
                        if !resumed {
                            self.phase = Phase::Cancel;
                            continue;
                        }
                        self.deadline = None;
                    }
                    if let Some(error) = self.boundary() {
                        self.settle(Outcome::Failed);
                        return Some(Err(error));
                    }
                }
                Phase::Emit => {
                    if self.stopped() {
                        self.phase = Phase::Cancel;
                        continue;
                    }
                    // Keep a zero-delay stream cooperative with the runtime's scheduler.
                    tokio::task::consume_budget().await;
                    if let Some(i) = self.next_unfinished(self.cursor) {
                        self.cursor = i + 1;
                        self.phase = Phase::Emit;
                        let item = self.emit_token(i);
                        self.settle_if_all_finished(Outcome::Completed);
                        return Some(Ok(item));
                    }
                    self.step += 1;
                    self.phase = Phase::Sleep(self.shared.config.itl());
                }
                Phase::Stall => {
                    tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => {}
                        () = self.halt.cancelled() => {}
                    }
                    self.phase = Phase::Cancel;
                }
                Phase::Cancel => {
                    let reason = FinishReason::Cancelled {
                        message: ABORTED.to_owned(),
                    };
                    return self.end_next_choice(reason, Phase::Cancel, Outcome::Aborted);
                }
                Phase::FinishError(message) => {
                    let reason = FinishReason::Error {
                        message: message.clone(),
                    };
                    let next = Phase::FinishError(message);
                    return self.end_next_choice(reason, next, Outcome::Failed);
                }
                Phase::Done => return None,
            }
        }
    }

    /// First poll: count the request, consult the prefix cache, set up choices, arm the TTFT.
    fn start(&mut self) {
        let shared = Arc::clone(&self.shared);
        self.guard = Some(RunGuard::start(&shared));
        let routing = &self.req.routing;
        let salt = cache_salt(routing.cache_salt.as_deref(), routing.lora.as_deref());
        self.cached = shared.cache.lookup_and_insert(salt, &self.req.token_ids);

        let model = &shared.model;
        let prompt_ctx = model.context_of(&self.req.token_ids);
        let seed_key = match self.req.sampling.seed {
            Some(seed) => combine(combine(shared.config.seed, 1), seed),
            None => combine(combine(shared.config.seed, 0), prompt_ctx),
        };
        // An unseeded fanned-out copy (`sample_index`) samples as the client's i-th sample
        // would, as separate unseeded requests differ on a real engine; seeded copies share their
        // seed and sample alike (SGLang's seeded sampler hashes the seed with the position).
        let copy = match self.req.sampling.seed {
            Some(_) => 0,
            None => u64::from(self.req.sampling.sample_index),
        };
        self.choices = (0..self.req.sampling.n)
            .map(|i| Choice {
                ctx: prompt_ctx,
                sample_key: combine(combine(seed_key, u64::from(i) + copy), tag::SAMPLE),
                generated: 0,
                finished: false,
                spans: Vec::new(),
            })
            .collect();
        let uncached = self.prompt_len - self.cached;
        self.phase = match (self.leg, self.room) {
            // Decode starts when its prefill's KV arrives, then runs its first step.
            (Some(PdRole::Decode), Some(room)) => Phase::WaitRoom(room),
            _ => Phase::Sleep(shared.config.ttft(uncached)),
        };
    }

    /// Sleep until `delay` after the previous deadline (or now, for the first), so that step
    /// timing does not drift with processing time or timer granularity; `false` when cancelled
    /// first.
    async fn sleep(&mut self, delay: Duration) -> bool {
        let base = self.deadline.unwrap_or_else(Instant::now);
        let deadline = base
            .checked_add(delay)
            .unwrap_or_else(|| Instant::now() + FAR_FUTURE);
        self.deadline = Some(deadline);
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => false,
            () = self.halt.cancelled() => false,
            () = tokio::time::sleep_until(deadline) => true,
        }
    }

    /// Whether the request was cancelled or the engine aborted everything.
    fn stopped(&self) -> bool {
        self.cancel.is_cancelled() || self.halt.is_cancelled()
    }

    /// The weight-version part of choice `i`'s item (see the crate docs' "Fleet control"):
    /// `None` while no version was ever set. `token` tells whether the item carries a new
    /// token (extending the choice's spans); `last` whether it ends the choice (then the spans
    /// go along as vLLM's `weight_versions`).
    fn version_frame(&mut self, i: usize, token: bool, last: bool) -> Option<serde_json::Value> {
        if !self.shared.control.refresh(&mut self.version) {
            return None;
        }
        let name = self.version.name();
        let choice = &mut self.choices[i];
        if token {
            let at = choice.generated.saturating_sub(1);
            match choice.spans.last_mut() {
                Some((v, _, end)) if v == name && *end == at => *end = at + 1,
                _ => choice.spans.push((name.to_owned(), at, at + 1)),
            }
        }
        let mut frame = serde_json::json!({"meta_info": {"weight_version": name}});
        if last {
            let spans: Vec<serde_json::Value> = if choice.spans.is_empty() {
                vec![serde_json::json!({"version": name, "start": 0, "end": choice.generated})]
            } else {
                // Tokens made before the first version was set count as "default".
                let first = choice.spans.first().map_or(0, |s| s.1);
                let lead = (first > 0).then(|| {
                    serde_json::json!({"version": crate::control::DEFAULT_WEIGHT_VERSION, "start": 0, "end": first})
                });
                lead.into_iter()
                    .chain(choice.spans.iter().map(|(v, start, end)| {
                        serde_json::json!({"version": v, "start": start, "end": end})
                    }))
                    .collect()
            };
            frame["weight_versions"] = serde_json::Value::Array(spans);
        }
        Some(frame)
    }

    /// At a step boundary: fire a due scripted fault, or go on emitting. Returns the error to
    /// yield for a `FailAfter` fault.
    fn boundary(&mut self) -> Option<EngineError> {
        let due = match &self.fault {
            Some(
                FaultAction::FailAfter { tokens, .. }
                | FaultAction::StallAfter { tokens }
                | FaultAction::FinishError { tokens, .. },
            ) => *tokens == self.step,
            _ => false,
        };
        self.cursor = 0;
        self.phase = Phase::Emit;
        if !due {
            return None;
        }
        match self.fault.take() {
            Some(FaultAction::FailAfter { kind, message, .. }) => {
                self.phase = Phase::Done;
                Some(EngineError::new(kind, message))
            }
            Some(FaultAction::StallAfter { .. }) => {
                self.phase = Phase::Stall;
                None
            }
            Some(FaultAction::FinishError { message, .. }) => {
                self.phase = Phase::FinishError(message);
                None
            }
            Some(FaultAction::Error { .. }) | None => None,
        }
    }

    fn next_unfinished(&self, from: usize) -> Option<usize> {
        (from..self.choices.len()).find(|&i| !self.choices[i].finished)
    }

    fn usage(&self, i: usize) -> Usage {
        usage(self.prompt_len, self.cached, self.choices[i].generated)
    }

    /// Produce choice `i`'s item for this step: one new token (or, for a prefill-only request, none)
    /// with everything that was asked for.
    fn emit_token(&mut self, i: usize) -> EngineOutput {
        let mut out = EngineOutput {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            ..EngineOutput::default()
        };
        let first = self.choices[i].generated == 0;
        // A decode leg never ran the prompt: prompt-side outputs come from its prefill.
        if first && self.leg != Some(PdRole::Decode) {
            self.attach_prompt_outputs(&mut out);
        }
        // Field-wise borrows from here on: no per-token reference counting or cloning.
        let model = &self.shared.model;
        let opts = &self.req.output;
        let stop = &self.req.stop;
        let choice = &mut self.choices[i];
        if self.budget == 0 {
            choice.finished = true;
            out.finish_reason = Some(FinishReason::Length { length: 0 });
            out.usage = Some(usage(self.prompt_len, self.cached, 0));
            out.handoff = self.kv_handoff();
            out.engine_data = self.version_frame(i, false, true);
            return out;
        }

        let dist = model.dist(choice.ctx);
        let constrained = choice.generated < stop.min_tokens;
        let suppressed: &[u32] = if constrained { &self.suppressed } else { &[] };
        let u = unit(combine(choice.sample_key, u64::from(choice.generated)));
        let draw = model.sample(
            &dist,
            &self.sampler,
            u,
            suppressed,
            opts.sampling_mask,
            &mut self.scratch,
        );
        let token = draw.token;
        if let Some(k) = opts.logprobs {
            out.logprobs = Some(vec![dist.token_logprob(token, k, &opts.token_ids_logprobs)]);
        }
        out.sampling_mask = draw.support.map(|support| vec![support]);
        if opts.routed_experts && !first {
            // The forward pass that produced this token ran on the previous token.
            let mut rows = model.experts_block(1);
            model.push_expert_row(choice.ctx, &mut rows);
            out.routed_experts = Some(rows);
        }
        choice.ctx = Model::extend(choice.ctx, token);
        choice.generated += 1;
        out.token_ids = vec![token];

        // Before `min_tokens` only the budget can end a choice.
        let eos = !stop.ignore_eos && self.shared.config.info.eos_token_ids.contains(&token);
        let stop_id = self.stop_ids.binary_search(&token).is_ok();
        out.finish_reason = if eos && !constrained {
            Some(FinishReason::Eos { token_id: token })
        } else if stop_id && !constrained {
            Some(FinishReason::Stop {
                matched: StopMatch::TokenId(token),
            })
        } else if choice.generated >= self.budget {
            Some(FinishReason::Length {
                length: choice.generated,
            })
        } else {
            None
        };
        choice.finished = out.finish_reason.is_some();
        out.usage = Some(usage(self.prompt_len, self.cached, choice.generated));
        let finished = choice.finished;
        if finished {
            out.handoff = self.kv_handoff();
        }
        out.engine_data = self.version_frame(i, true, finished);
        out
    }

    /// What a vLLM-style prefill returns for its decode (NIXL-like shape), on its last item.
    fn kv_handoff(&self) -> Option<serde_json::Value> {
        (self.leg == Some(PdRole::Prefill) && self.kv_style).then(|| {
            serde_json::json!({
                "do_remote_prefill": true,
                "do_remote_decode": false,
                "remote_engine_id": "genfront-mock",
                "remote_request_id": self.req.request_id,
                "remote_num_tokens": self.prompt_len,
            })
        })
    }

    /// Attach what a choice's first item carries about the prompt (prompt logprobs, prompt expert
    /// rows). Each is computed once per request and moved into the last choice that needs it.
    fn attach_prompt_outputs(&mut self, out: &mut EngineOutput) {
        self.firsts_left = self.firsts_left.saturating_sub(1);
        let last = self.firsts_left == 0;
        let model = &self.shared.model;
        let prompt = &self.req.token_ids;
        let opts = &self.req.output;
        if let Some(p) = &opts.prompt_logprobs {
            let slot = &mut self.prompt_logprobs;
            slot.get_or_insert_with(|| {
                model.prompt_logprobs(prompt, p.start, p.top_k, &opts.token_ids_logprobs)
            });
            out.prompt_logprobs = if last { slot.take() } else { slot.clone() };
        }
        if opts.routed_experts {
            let slot = &mut self.prompt_experts;
            slot.get_or_insert_with(|| model.prompt_experts(prompt, opts.routed_experts_start));
            out.routed_experts = if last { slot.take() } else { slot.clone() };
        }
    }

    /// End the next unfinished choice with `reason` (no new tokens), staying in `phase` while
    /// others remain; the last one settles the request as `outcome`.
    fn end_next_choice(
        &mut self,
        reason: FinishReason,
        phase: Phase,
        outcome: Outcome,
    ) -> Option<Result<EngineOutput, EngineError>> {
        let Some(i) = self.next_unfinished(0) else {
            self.settle(outcome);
            return None;
        };
        self.choices[i].finished = true;
        self.phase = phase;
        let item = EngineOutput {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            finish_reason: Some(reason),
            usage: Some(self.usage(i)),
            engine_data: self.version_frame(i, false, true),
            ..EngineOutput::default()
        };
        self.settle_if_all_finished(outcome);
        Some(Ok(item))
    }

    fn settle_if_all_finished(&mut self, outcome: Outcome) {
        if self.choices.iter().all(|c| c.finished) {
            self.settle(outcome);
        }
    }

    /// Record how the request ended and stop producing items.
    fn settle(&mut self, outcome: Outcome) {
        self.phase = Phase::Done;
        if self.leg == Some(PdRole::Prefill)
            && let Some(room) = self.room.take()
        {
            let state = if matches!(outcome, Outcome::Completed) {
                RoomState::Ready
            } else {
                RoomState::Failed
            };
            rooms::publish(room, state);
        }
        if let Some(guard) = self.guard.take() {
            guard.settle(outcome);
        }
    }
}

impl Drop for Run {
    /// A prefill leg dropped before it finished (its client or the router gave up) releases its
    /// room as failed, so a decode waiting for it does not wait for nothing.
    fn drop(&mut self) {
        if self.leg == Some(PdRole::Prefill)
            && let Some(room) = self.room.take()
        {
            rooms::publish(room, RoomState::Failed);
        }
    }
}

fn usage(prompt_tokens: u32, cached_tokens: u32, completion_tokens: u32) -> Usage {
    Usage {
        prompt_tokens,
        completion_tokens,
        cached_tokens,
    }
}
