//! Prefill/decode pairs: one prefill and one decode worker per engine request, the legs built and
//! run by the prefill worker's hand-off style, and the prefill leg folded into the decode leg's
//! outputs by the format's [`PdMerge`].
//!
//! | style | legs | decode request |
//! |---|---|---|
//! | SGLang bootstrap | concurrent; same `bootstrap_host/port/room` on both | the client's request + bootstrap |
//! | vLLM `kv_transfer_params` | prefill first (`max_tokens` 1, `min_tokens` ≤ 1, `n` 1, `kv_transfer_params {do_remote_decode: true, do_remote_prefill: false}`, prompt logprobs asked here only) | the client's request + the prefill's returned `kv_transfer_params`, never `prompt_logprobs` |
//!
//! Failure semantics: either leg failing ends the other at once (its stream is dropped, which
//! aborts it at its engine) and the client gets the failing leg's error; a client disconnect or
//! abort drops both. No leg is retried on another worker, and there is no silent decode-only or
//! prefill-only fallback: without a routable worker of each role the request is refused at once
//! naming the missing role.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use genfront_protocol::{
    Bootstrap, EngineError, EngineOutput, EngineRequest, Handoff, OutputStream, PdLeg, PdMerge,
    PdRole,
};
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::worker::{LoadGuard, Worker};
use crate::{Dispatched, RouteContext};

/// SGLang's default `--disaggregation-bootstrap-port`.
pub const DEFAULT_BOOTSTRAP_PORT: u16 = 8998;

/// The typed merge used when the format gives none: prompt logprobs, prompt routed-expert rows
/// and cached tokens from the prefill leg; everything else from decode.
#[derive(Debug, Default)]
pub struct TypedMerge;

impl PdMerge for TypedMerge {
    fn merge(&self, prefill: &[EngineOutput], decode: &mut EngineOutput, first: bool) {
        merge_typed(prefill, decode, first);
    }
}

/// The typed part of every format's merge (see [`TypedMerge`]): on a choice's first decode
/// output, the prefill's prompt logprobs replace decode's, the prefill's routed-expert rows (its
/// prompt rows) go before decode's rows, and the usage's cached tokens are the prefill's.
pub fn merge_typed(prefill: &[EngineOutput], decode: &mut EngineOutput, first: bool) {
    let prompt_usage = prefill.iter().rev().find_map(|o| o.usage);
    if let (Some(p), Some(u)) = (prompt_usage, decode.usage.as_mut()) {
        u.cached_tokens = p.cached_tokens;
    }
    if !first {
        return;
    }
    if let Some(p) = prefill.iter().find_map(|o| o.prompt_logprobs.clone()) {
        decode.prompt_logprobs = Some(p);
    }
    let mut rows: Option<genfront_protocol::RoutedExperts> = None;
    for o in prefill {
        if let Some(r) = &o.routed_experts {
            match &mut rows {
                None => rows = Some(r.clone()),
                Some(acc) if acc.num_layers == r.num_layers && acc.top_k == r.top_k => {
                    acc.ids.extend_from_slice(&r.ids);
                }
                // Inconsistent shapes: drop rather than pass on a broken blob.
                Some(_) => {
                    rows = None;
                    break;
                }
            }
        }
    }
    if let Some(mut p) = rows {
        match decode.routed_experts.take() {
            Some(d) if d.num_layers == p.num_layers && d.top_k == p.top_k => {
                p.ids.extend_from_slice(&d.ids);
                decode.routed_experts = Some(p);
            }
            None => decode.routed_experts = Some(p),
            // Mismatched shapes: omitted, never passed on broken.
            Some(_) => decode.routed_experts = None,
        }
    }
}

/// The handoff a prefill worker uses, with the bootstrap port resolved (the spec's, else the
/// worker's server info `disaggregation_bootstrap_port`, else 8998).
fn handoff_of(worker: &Worker) -> Handoff {
    match &worker.handoff {
        Some(Handoff::Bootstrap { host, port }) => {
            let learned = worker
                .facts()
                .and_then(|f| f.server_info.as_ref())
                .and_then(|s| s.get("disaggregation_bootstrap_port"))
                .and_then(serde_json::Value::as_u64)
                .and_then(|p| u16::try_from(p).ok());
            Handoff::Bootstrap {
                host: host.clone(),
                port: port.or(learned).or(Some(DEFAULT_BOOTSTRAP_PORT)),
            }
        }
        Some(Handoff::KvTransfer) => Handoff::KvTransfer,
        None => Handoff::Bootstrap {
            host: worker.url.clone(),
            port: None,
        },
    }
}

/// A random SGLang bootstrap room in `[0, 2^63 − 1]`.
pub fn random_room() -> u64 {
    rand::rng().random::<u64>() & (i64::MAX as u64)
}

fn load_tokens(request: &EngineRequest) -> u64 {
    let new = request.stop.max_tokens.unwrap_or(4096).min(32_768);
    request.token_ids.len() as u64 + u64::from(new) * u64::from(request.sampling.n.max(1))
}

/// One running leg: its stream and the load it holds.
struct Leg {
    stream: OutputStream,
    _load: LoadGuard,
}

fn start_leg(worker: Arc<Worker>, request: EngineRequest, cancel: CancellationToken) -> Leg {
    let tokens = load_tokens(&request);
    let stream = match worker.engine() {
        Some(engine) => engine.generate(request, cancel),
        None => Box::pin(futures::stream::once(async {
            Err(EngineError::unavailable("worker is not connected"))
        })),
    };
    Leg {
        stream,
        _load: LoadGuard::new(worker, tokens),
    }
}

fn settle(worker: &Worker, result: Result<(), &EngineError>) {
    match result {
        Ok(()) => worker.record_success(),
        Err(e) if e.is_worker_failure() => worker.record_failure(),
        Err(_) => worker.record_neutral(),
    }
}

/// The prefill leg's request for `style`.
fn prefill_request(request: &EngineRequest, style: &Handoff, room: u64) -> EngineRequest {
    let mut p = request.clone();
    match style {
        Handoff::Bootstrap { host, port } => {
            p.pd = Some(PdLeg {
                role: PdRole::Prefill,
                bootstrap: Some(Bootstrap {
                    host: host.clone(),
                    port: *port,
                    room,
                }),
                kv_transfer_params: None,
            });
        }
        Handoff::KvTransfer => {
            p.stop.max_tokens = Some(p.stop.max_tokens.unwrap_or(1).min(1));
            p.stop.min_tokens = p.stop.min_tokens.min(1);
            p.sampling.n = 1;
            p.pd = Some(PdLeg {
                role: PdRole::Prefill,
                bootstrap: None,
                kv_transfer_params: Some(serde_json::json!({
                    "do_remote_decode": true,
                    "do_remote_prefill": false,
                })),
            });
        }
    }
    p
}

/// The decode leg's request: the client's, with the hand-off.
fn decode_request(
    mut request: EngineRequest,
    style: &Handoff,
    room: u64,
    kv: Option<serde_json::Value>,
) -> EngineRequest {
    match style {
        Handoff::Bootstrap { host, port } => {
            request.pd = Some(PdLeg {
                role: PdRole::Decode,
                bootstrap: Some(Bootstrap {
                    host: host.clone(),
                    port: *port,
                    room,
                }),
                kv_transfer_params: None,
            });
        }
        Handoff::KvTransfer => {
            // Decode never ran the prompt: prompt logprobs come from the prefill leg only.
            request.output.prompt_logprobs = None;
            request.pd = Some(PdLeg {
                role: PdRole::Decode,
                bootstrap: None,
                kv_transfer_params: kv,
            });
        }
    }
    request
}

struct PairState {
    prefill_worker: Arc<Worker>,
    decode_worker: Arc<Worker>,
    style: Handoff,
    room: u64,
    /// The decode request, until the decode leg starts.
    pending_decode: Option<EngineRequest>,
    prefill: Option<Leg>,
    decode: Option<Leg>,
    prefill_outputs: Vec<EngineOutput>,
    prefill_done: bool,
    /// Decode outputs that arrived before the prefill leg finished.
    held: std::collections::VecDeque<EngineOutput>,
    first_seen: HashSet<u32>,
    merge: Arc<dyn PdMerge>,
    cancel: CancellationToken,
    decode_verdict: bool,
    done: bool,
    metrics: crate::metrics::PdMetrics,
    started: std::time::Instant,
    first_decode: bool,
}

pub(crate) fn start_pair(
    metrics: crate::metrics::PdMetrics,
    prefill_worker: Arc<Worker>,
    decode_worker: Arc<Worker>,
    request: EngineRequest,
    ctx: &RouteContext,
    cancel: CancellationToken,
) -> Dispatched {
    let style = handoff_of(&prefill_worker);
    let room = random_room();
    tracing::debug!(
        request_id = %request.request_id,
        prefill = %prefill_worker.id(),
        decode = %decode_worker.id(),
        room,
        "P/D dispatch"
    );
    let prefill_req = prefill_request(&request, &style, room);
    let prefill = start_leg(prefill_worker.clone(), prefill_req, cancel.clone());
    let (decode, pending_decode) = match &style {
        Handoff::Bootstrap { .. } => {
            let d = decode_request(request, &style, room, None);
            (
                Some(start_leg(decode_worker.clone(), d, cancel.clone())),
                None,
            )
        }
        Handoff::KvTransfer => (None, Some(request)),
    };
    let id = decode_worker.id().clone();
    let prefill_id = prefill_worker.id().clone();
    let served_by = Arc::new(Mutex::new(id.clone()));
    let state = PairState {
        prefill_worker,
        decode_worker,
        style,
        room,
        pending_decode,
        prefill: Some(prefill),
        decode,
        prefill_outputs: Vec::new(),
        prefill_done: false,
        held: std::collections::VecDeque::new(),
        first_seen: HashSet::new(),
        merge: ctx.pd_merge.clone().unwrap_or_else(|| Arc::new(TypedMerge)),
        cancel,
        decode_verdict: false,
        done: false,
        metrics,
        started: std::time::Instant::now(),
        first_decode: true,
    };
    // Boxed: each item moves a pointer, not the whole state, through the unfold.
    let stream = futures::stream::unfold(Box::new(state), |mut st| async move {
        let item = st.next().await?;
        Some((item, st))
    });
    Dispatched {
        worker: id,
        prefill_worker: Some(prefill_id),
        stream: Box::pin(stream),
        served_by,
    }
}

impl Drop for PairState {
    /// A pair dropped before its end (client gone, abort) frees any half-open trial it held.
    fn drop(&mut self) {
        if !self.done {
            self.prefill_worker.record_neutral();
            self.decode_worker.record_neutral();
        }
    }
}

impl PairState {
    fn fail(&mut self, err: EngineError, leg: PdRole) -> Option<Result<EngineOutput, EngineError>> {
        self.done = true;
        // Ending both legs: dropping a stream aborts its work at the engine.
        self.prefill = None;
        self.decode = None;
        let (worker, other) = match leg {
            PdRole::Prefill => (&self.prefill_worker, &self.decode_worker),
            PdRole::Decode => (&self.decode_worker, &self.prefill_worker),
        };
        settle(worker, Err(&err));
        other.record_neutral();
        self.metrics.failure(match leg {
            PdRole::Prefill => "prefill",
            PdRole::Decode => "decode",
        });
        tracing::debug!(room = self.room, leg = ?leg, error = %err, "P/D leg failed; both legs ended");
        Some(Err(err))
    }

    fn emit(&mut self, mut out: EngineOutput) -> Result<EngineOutput, EngineError> {
        let first = self.first_seen.insert(out.index);
        if std::mem::take(&mut self.first_decode) {
            self.metrics
                .decode_ttft_seconds
                .observe(self.started.elapsed().as_secs_f64());
        }
        self.merge.merge(&self.prefill_outputs, &mut out, first);
        Ok(out)
    }

    async fn next(&mut self) -> Option<Result<EngineOutput, EngineError>> {
        loop {
            if self.done {
                return None;
            }
            if self.prefill_done
                && let Some(out) = self.held.pop_front()
            {
                return Some(self.emit(out));
            }
            if !self.prefill_done {
                let prefill = self.prefill.as_mut()?;
                let item = match self.decode.as_mut() {
                    // Both legs run: read both, holding decode outputs until the prefill ends.
                    Some(decode) => tokio::select! {
                        p = prefill.stream.next() => Ok(p),
                        d = decode.stream.next() => Err(d),
                    },
                    None => Ok(prefill.stream.next().await),
                };
                match item {
                    Ok(Some(Ok(out))) => self.prefill_outputs.push(out),
                    Ok(Some(Err(e))) => return self.fail(e, PdRole::Prefill),
                    Ok(None) => {
                        self.prefill_done = true;
                        self.metrics
                            .prefill_seconds
                            .observe(self.started.elapsed().as_secs_f64());
                        settle(&self.prefill_worker, Ok(()));
                        // Release the prefill's load now that its part is done.
                        self.prefill = None;
                        if let Some(req) = self.pending_decode.take() {
                            let kv = self
                                .prefill_outputs
                                .iter()
                                .rev()
                                .find_map(|o| o.handoff.clone());
                            if kv.is_none() {
                                return self.fail(
                                    EngineError::internal(
                                        "the prefill leg returned no kv_transfer_params",
                                    ),
                                    PdRole::Prefill,
                                );
                            }
                            let d = decode_request(req, &self.style, self.room, kv);
                            self.decode = Some(start_leg(
                                self.decode_worker.clone(),
                                d,
                                self.cancel.clone(),
                            ));
                        }
                    }
                    Err(Some(Ok(out))) => self.held.push_back(out),
                    Err(Some(Err(e))) => return self.fail(e, PdRole::Decode),
                    Err(None) => {
                        // Decode ended before prefill did: its outputs are held; finish the prefill.
                        self.decode = None;
                    }
                }
                continue;
            }
            let Some(decode) = self.decode.as_mut() else {
                self.done = true;
                return None;
            };
            match decode.stream.next().await {
                Some(Ok(out)) => return Some(self.emit(out)),
                Some(Err(e)) => return self.fail(e, PdRole::Decode),
                None => {
                    self.done = true;
                    self.decode = None;
                    if !self.decode_verdict {
                        self.decode_verdict = true;
                        self.decode_worker.record_success();
                    }
                    return None;
                }
            }
        }
    }
}
