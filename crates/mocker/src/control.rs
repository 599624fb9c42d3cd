//! Fleet control on the mock engine ([`genfront_protocol::Engine::control`]): pause / resume with
//! the engines' modes, cache flushes, weight updates and versions, each answered in the native
//! shape of the call's format, and a log of every call.
//!
//! The mock acts on [`ControlCall::action`] (the typed meaning the format parsed) and reads the
//! few native details the action does not carry from the call itself (vLLM's `clear_cache` and
//! `reset_running_requests` query flags, SGLang's `flush_cache`, `abort_all_requests` and
//! `model_path` body keys). Native refusals of malformed calls (FastAPI's 422) are the format's
//! job (`ControlRoute::parse`); the mock never sees those calls.
//!
//! Answers, per format (the engines' own bodies at the pinned SGLang 0.5.23 `http_server.py` and
//! vLLM 0.33.0 `entrypoints/rl/online/api_router.py` / `serve/dev/cache/api_router.py`, as
//! recorded in the formats' `control` modules (`genfront_sglang::control`,
//! `genfront_vllm::control`); `oracle_engine.py` `_sg_rl` / `_vl_rl` where the engine is silent):
//!
//! | action | SGLang | vLLM |
//! |---|---|---|
//! | `Pause` | 200 `{"message":"Generation paused successfully.","status":"ok"}` | 200 `{"status":"paused"}` |
//! | `Resume` | 200 `{"message":"Generation continued successfully.","status":"ok"}` | 200 `{"status":"resumed"}` |
//! | `FlushCache` | 200 `Cache flushed.\n…` / 400 `Flush cache failed.\n` (requests running), no content type | 200 `{"success":B}` (`false` while requests run, unless `reset_running_requests=true`) |
//! | `UpdateWeights` | 200 `{"success":true,"message",…}` / 400 `{"success":false,"message",…}` | 200 `{"message":"Weights updated"}` (`/update_weights`), `{"message":"Weight update finished"}` (`/finish_weight_update`) / 500 `{"error":{"message":"Call to collective_rpc method failed: …","type":"InternalServerError","param":null,"code":500}}` |
//! | `InitWeightsGroup` | 200 `{"success":true,"message"}` | 200 `{"message":M}`: `Weight transfer initialized`, `Weight update started`, `Weight transfer shut down`, `Draft weight update started` for `/init_weight_transfer_engine`, `/start_weight_update`, `/shutdown_weight_transfer_engine`, `/start_draft_weight_update` |
//! | `SetWeightVersion` | 200 `{"success":true,"message":"Weight version updated to V","new_version":V}` | 200 `{"success":true,"new_version":V}` |
//! | `IsPaused` | 200 `{"is_paused":B}` | 200 `{"is_paused":B}` |
//! | `WeightInfo` | 200 `{"weight_version":V}` (`"default"` before any) | 200 `{"weight_version":V}` (`null` before any) |
//!
//! SGLang's `/update_weights_from_disk` answer also carries `"num_paused_requests":0`. Where a
//! pinned engine has no route for an action (SGLang 0.5.23 has no `/is_paused` or
//! `/get_weight_version`), the mock answers with the oracle's shape or the other engine's.
//!
//! Semantics:
//! - **`Pause{Abort}`** ends every request in flight at once: each unfinished choice's last item
//!   is `FinishReason::Cancelled { message: "Aborted" }` after the tokens made so far (SGLang's
//!   `FINISH_ABORT` message for an `abort_all`, which its client decodes as `Cancelled` with that
//!   message; vLLM's `"abort"` finish, which its client decodes as `Cancelled { "Aborted" }`). The
//!   answer comes once those requests have ended (both engines drain the aborts before
//!   answering), within `call.timeout`.
//! - **`InPlace` / `Retract` / `Keep`** freeze the requests in flight: no token until `Resume`,
//!   after which their timing restarts from the resume (no burst of overdue tokens).
//! - **`Wait`** answers once the requests in flight have finished (they keep generating); no
//!   answer within `call.timeout` is [`genfront_protocol::ErrorKind::Timeout`] (the pause stays in
//!   force).
//! - **While paused**, new requests are held before they start (no progress, not counted as
//!   running) until `Resume`, as SGLang's `is_pause_cond` holds them in every mode and vLLM's
//!   `keep` queues them. A held request can still be cancelled; a later `Pause{Abort}` does not
//!   abort it (the engines abort what is scheduled, not what waits for the pause to end).
//!   A vLLM `abort` or `wait` pause instead **refuses** new requests until `Resume`, as vLLM's
//!   `RetryableRequestError` does: [`genfront_protocol::ErrorKind::Unavailable`] with status
//!   503 (a retryable refusal, not a worker failure), message [`VLLM_PAUSED_MESSAGE`] (wording
//!   not taken from the engine).
//! - vLLM's `Pause{Abort|Wait}` clears the prefix cache unless `clear_cache=false`; SGLang's
//!   update clears it unless the body says `"flush_cache": false`; SGLang's `FlushCache` refuses
//!   with 400 while a request runs (frozen ones included: they are still scheduled); vLLM's
//!   reset answers 200 and resets only when nothing runs or `reset_running_requests=true`
//!   (`{"success": false}` otherwise).
//! - SGLang's `/update_weight_version` aborts every request in flight first unless the body
//!   says `"abort_all_requests": false` (the engine's default is `true`); its weight updates
//!   abort only with `"abort_all_requests": true`.
//! - **Weight version**: `UpdateWeights { version: Some(v) }` (on success) and
//!   `SetWeightVersion` set it. Once set, every output carries it where the engines report one:
//!   `engine_data.meta_info.weight_version` on every item (SGLang's `meta_info`) and, on a
//!   choice's last item, `engine_data.weight_versions`: vLLM's `[{version, start, end}]`
//!   half-open spans of output indices, `"default"` for tokens made before the first version.
//!   Until a version is set nothing is attached (the formats' own `"default"` / `null` stand).
//! - **Failure knob**: [`crate::MockEngine::set_update_weights_fail`] (and
//!   [`crate::MockConfig::update_weights_fail`]) makes every weight update fail, with SGLang's
//!   400 `{"success":false,"message":…}` or vLLM's 500 (on `/update_weights` and
//!   `/finish_weight_update`: what an exception inside vLLM's `collective_rpc` becomes through
//!   its catch-all exception handler; the start/init routes still succeed), until it is cleared (sticky, as the
//!   oracle's `update_weights_fail` config); the version is then left unchanged.
//! - Every call is recorded ([`ControlRecord`], [`crate::MockEngine::control_log`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use genfront_protocol::{ControlAction, ControlCall, ControlReply, EngineError, PauseMode};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::engine::Shared;

/// The version reported for tokens made before any version was set (both engines' default).
pub(crate) const DEFAULT_WEIGHT_VERSION: &str = "default";
/// SGLang's `/flush_cache` text on success (200).
pub const SGLANG_FLUSH_CACHE_TEXT: &str = "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n";
/// SGLang's `/flush_cache` text when requests are running or waiting (400).
pub const SGLANG_FLUSH_CACHE_FAILED: &str = "Flush cache failed.\n";
/// The message of the refusal a new request gets while a vLLM `abort`/`wait` pause is in force.
pub const VLLM_PAUSED_MESSAGE: &str =
    "Generation is paused; the request was not accepted. Retry after the engine resumes.";
/// At most this many [`ControlRecord`]s are kept (oldest dropped first).
pub const CONTROL_LOG_CAPACITY: usize = 10_000;
/// A recorded body is cut to this many bytes (then ends with `…`).
const LOGGED_BODY_BYTES: usize = 64 * 1024;

/// One control call the mock engine received, and how it answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlRecord {
    /// The native API the call was spelled in (`"sglang"`, `"vllm"`).
    pub format: String,
    /// [`ControlAction::label`]: `pause`, `resume`, `flush_cache`, `update_weights`, ….
    pub action: &'static str,
    /// The pause mode, for `pause` calls (`abort`, `in_place`, `retract`, `wait`, `keep`).
    pub mode: Option<&'static str>,
    /// HTTP method of the native call.
    pub method: String,
    /// Native path, e.g. `/pause_generation`.
    pub path: String,
    /// Native query without `?` (empty for none).
    pub query: String,
    /// The body as text (lossy UTF-8, cut at 64 KiB).
    pub body: String,
    /// The status answered; `None` when the call failed instead (see `error`).
    pub status: Option<u16>,
    /// The [`EngineError`] message when the call failed (timeout, unknown format).
    pub error: Option<String>,
    /// When the call arrived, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// How long the answer took, in milliseconds.
    pub latency_ms: f64,
}

/// Control-plane state shared by the engine and its running streams.
#[derive(Debug)]
pub(crate) struct ControlState {
    /// The pause in force (`None`: generating). Runs wait on it.
    pause: watch::Sender<Option<PauseMode>>,
    /// Fast-path mirror of `pause.is_some()`, read at every step boundary.
    paused: AtomicBool,
    /// New requests are refused (not held) while this pause lasts (vLLM `abort` / `wait`).
    refuse_new: AtomicBool,
    /// Fired by a pause with `abort` (and by `abort_all_requests`): every run that took this
    /// token before ends. Replaced by a fresh token each time.
    halt: Mutex<CancellationToken>,
    /// Notified whenever the last running request ends.
    pub(crate) idle: Notify,
    /// The weight version (`None`: never set, reported as `"default"`).
    version: Mutex<Option<Arc<str>>>,
    /// Bumped at every version change; 0 until the first one (runs then attach nothing).
    version_epoch: AtomicU64,
    /// The failure message of weight updates, while the failure knob is on.
    update_fail: Mutex<Option<String>>,
    log: Mutex<VecDeque<ControlRecord>>,
}

/// A run's view of the weight version, refreshed when the engine's epoch moves.
#[derive(Debug, Clone, Default)]
pub(crate) struct VersionView {
    epoch: u64,
    current: Option<Arc<str>>,
}

/// The native answer shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Native {
    Sglang,
    Vllm,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// === impl ControlState ===

impl ControlState {
    pub(crate) fn new(update_fail: Option<String>) -> Self {
        Self {
            pause: watch::Sender::new(None),
            paused: AtomicBool::new(false),
            refuse_new: AtomicBool::new(false),
            halt: Mutex::new(CancellationToken::new()),
            idle: Notify::new(),
            version: Mutex::new(None),
            version_epoch: AtomicU64::new(0),
            update_fail: Mutex::new(update_fail),
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether a pause is in force (cheap: one atomic load).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// The pause in force.
    pub(crate) fn pause_mode(&self) -> Option<PauseMode> {
        *self.pause.borrow()
    }

    /// Whether requests in flight are frozen now (a pause that keeps them).
    pub(crate) fn is_frozen(&self) -> bool {
        self.is_paused() && self.pause_mode().is_some_and(PauseMode::keeps_requests)
    }

    /// Whether new requests are refused now (see the module docs).
    pub(crate) fn refuses_new(&self) -> bool {
        self.is_paused() && self.refuse_new.load(Ordering::Acquire)
    }

    fn set_pause(&self, mode: Option<PauseMode>, refuse_new: bool) {
        self.refuse_new.store(refuse_new, Ordering::Release);
        self.paused.store(mode.is_some(), Ordering::Release);
        self.pause.send_replace(mode);
    }

    /// Wait until no pause is in force.
    pub(crate) async fn unpaused(&self) {
        let mut rx = self.pause.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail while we borrow it.
        let _ = rx.wait_for(Option::is_none).await;
    }

    /// Wait until requests in flight may make progress again (no pause, or one that does not
    /// keep them frozen).
    pub(crate) async fn unfrozen(&self) {
        let mut rx = self.pause.subscribe();
        let _ = rx
            .wait_for(|m| !m.is_some_and(PauseMode::keeps_requests))
            .await;
    }

    /// The token a new run ends on when the engine aborts everything.
    pub(crate) fn halt_token(&self) -> CancellationToken {
        lock(&self.halt).clone()
    }

    /// End every run that holds the current halt token.
    fn halt_all(&self) {
        let old = std::mem::take(&mut *lock(&self.halt));
        old.cancel();
    }

    /// The weight version once set.
    pub(crate) fn version(&self) -> Option<Arc<str>> {
        lock(&self.version).clone()
    }

    fn set_version(&self, version: &str) {
        *lock(&self.version) = Some(Arc::from(version));
        self.version_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Refresh `view` if the version changed since; `false` while no version was ever set.
    pub(crate) fn refresh(&self, view: &mut VersionView) -> bool {
        let epoch = self.version_epoch.load(Ordering::Acquire);
        if epoch == 0 {
            return false;
        }
        if epoch != view.epoch {
            view.epoch = epoch;
            view.current = self.version();
        }
        true
    }

    pub(crate) fn update_fail(&self) -> Option<String> {
        lock(&self.update_fail).clone()
    }

    pub(crate) fn set_update_fail(&self, message: Option<String>) {
        *lock(&self.update_fail) = message;
    }

    pub(crate) fn log(&self) -> Vec<ControlRecord> {
        lock(&self.log).iter().cloned().collect()
    }

    pub(crate) fn clear_log(&self) {
        lock(&self.log).clear();
    }

    fn record(&self, record: ControlRecord) {
        let mut log = lock(&self.log);
        if log.len() >= CONTROL_LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(record);
    }
}

impl VersionView {
    /// The version to report now (`"default"` before the first one).
    pub(crate) fn name(&self) -> &str {
        self.current.as_deref().unwrap_or(DEFAULT_WEIGHT_VERSION)
    }
}

// === the control call ===

/// Answer `call` on the engine behind `shared`, and record it.
pub(crate) async fn control(
    shared: &Arc<Shared>,
    call: ControlCall,
) -> Result<ControlReply, EngineError> {
    let arrived = SystemTime::now();
    let clock = Instant::now();
    let result = act(shared, &call).await;
    let (status, error) = match &result {
        Ok(reply) => (Some(reply.status), None),
        Err(e) => (None, Some(e.message.clone())),
    };
    shared.control.record(ControlRecord {
        format: call.format.to_owned(),
        action: call.action.label(),
        mode: match call.action {
            ControlAction::Pause { mode } => Some(mode.as_str()),
            _ => None,
        },
        method: call.method,
        path: call.path,
        query: call.query,
        body: logged_body(&call.body),
        status,
        error,
        at_unix_ms: arrived
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        latency_ms: clock.elapsed().as_secs_f64() * 1e3,
    });
    result
}

fn logged_body(body: &[u8]) -> String {
    if body.len() <= LOGGED_BODY_BYTES {
        return String::from_utf8_lossy(body).into_owned();
    }
    let mut text = String::from_utf8_lossy(&body[..LOGGED_BODY_BYTES]).into_owned();
    text.push('…');
    text
}

async fn act(shared: &Arc<Shared>, call: &ControlCall) -> Result<ControlReply, EngineError> {
    let native = match call.format {
        "sglang" => Native::Sglang,
        "vllm" => Native::Vllm,
        other => {
            return Err(EngineError::unsupported(format!(
                "the mock engine answers control calls in the sglang or vllm format, not {other:?}"
            )));
        }
    };
    let state = &shared.control;
    let body = serde_json::from_slice::<Value>(&call.body).unwrap_or(Value::Null);
    let flag = |key: &str| body.get(key).and_then(Value::as_bool);
    match &call.action {
        ControlAction::Pause { mode } => {
            let refuse =
                native == Native::Vllm && matches!(mode, PauseMode::Abort | PauseMode::Wait);
            state.set_pause(Some(*mode), refuse);
            match mode {
                PauseMode::Abort => {
                    state.halt_all();
                    wait_idle(shared, call.timeout, "the aborted requests to end").await?;
                }
                PauseMode::Wait => {
                    wait_idle(shared, call.timeout, "the requests in flight to finish").await?;
                }
                PauseMode::InPlace | PauseMode::Retract | PauseMode::Keep => {}
            }
            if native == Native::Vllm
                && !mode.keeps_requests()
                && query_flag(&call.query, "clear_cache") != Some(false)
            {
                shared.cache.clear();
            }
            Ok(match native {
                Native::Sglang => {
                    ok_json(json!({"message": "Generation paused successfully.", "status": "ok"}))
                }
                Native::Vllm => ok_json(json!({"status": "paused"})),
            })
        }
        ControlAction::Resume => {
            state.set_pause(None, false);
            Ok(match native {
                Native::Sglang => ok_json(
                    json!({"message": "Generation continued successfully.", "status": "ok"}),
                ),
                Native::Vllm => ok_json(json!({"status": "resumed"})),
            })
        }
        ControlAction::FlushCache => Ok(match native {
            Native::Sglang => {
                let ok = shared.counters_running() == 0;
                if ok {
                    shared.cache.clear();
                }
                let text = if ok {
                    SGLANG_FLUSH_CACHE_TEXT
                } else {
                    SGLANG_FLUSH_CACHE_FAILED
                };
                ControlReply {
                    status: if ok { 200 } else { 400 },
                    content_type: None,
                    body: text.as_bytes().to_vec().into(),
                }
            }
            Native::Vllm => {
                let ok = shared.counters_running() == 0
                    || query_flag(&call.query, "reset_running_requests") == Some(true);
                if ok {
                    shared.cache.clear();
                }
                ok_json(json!({"success": ok}))
            }
        }),
        ControlAction::UpdateWeights { version } => {
            if flag("abort_all_requests") == Some(true) {
                state.halt_all();
            }
            let from_disk = call.path.ends_with("/update_weights_from_disk");
            if let Some(message) = state.update_fail() {
                return Ok(match native {
                    Native::Sglang => {
                        let message = if message.is_empty() {
                            let path = body.get("model_path").and_then(Value::as_str);
                            format!("Failed to get weights iterator: {}.", path.unwrap_or(""))
                        } else {
                            message
                        };
                        let mut answer = json!({"success": false, "message": message});
                        if from_disk {
                            answer["num_paused_requests"] = json!(0);
                        }
                        ControlReply::json(400, to_vec(&answer))
                    }
                    Native::Vllm => vllm_rpc_failure(&message),
                });
            }
            if let Some(v) = version {
                state.set_version(v);
            }
            if flag("flush_cache") != Some(false) {
                shared.cache.clear();
            }
            Ok(match native {
                Native::Sglang => {
                    let mut message = if from_disk {
                        "Succeeded to update model weights.".to_owned()
                    } else {
                        "Succeeded to update parameter online.".to_owned()
                    };
                    if let Some(v) = version {
                        message.push_str(&format!(" Weight version updated to {v}."));
                    }
                    let mut answer = json!({"success": true, "message": message});
                    if from_disk {
                        answer["num_paused_requests"] = json!(0);
                    }
                    ok_json(answer)
                }
                Native::Vllm => ok_json(json!({"message": vllm_message(&call.path)})),
            })
        }
        ControlAction::InitWeightsGroup => Ok(match native {
            Native::Sglang => ok_json(json!({
                "success": true,
                "message": "Succeeded to initialize custom process group.",
            })),
            Native::Vllm => ok_json(json!({"message": vllm_message(&call.path)})),
        }),
        ControlAction::SetWeightVersion { version } => {
            // SGLang's `abort_all_requests` defaults to true; vLLM's route aborts nothing.
            if native == Native::Sglang && flag("abort_all_requests") != Some(false) {
                state.halt_all();
            }
            state.set_version(version);
            Ok(ok_json(match native {
                Native::Sglang => json!({
                    "success": true,
                    "message": format!("Weight version updated to {version}"),
                    "new_version": version,
                }),
                Native::Vllm => json!({"success": true, "new_version": version}),
            }))
        }
        ControlAction::IsPaused => Ok(ok_json(json!({"is_paused": state.is_paused()}))),
        ControlAction::WeightInfo => {
            let version = state.version();
            Ok(ok_json(match (native, version.as_deref()) {
                (_, Some(v)) => json!({"weight_version": v}),
                (Native::Sglang, None) => json!({"weight_version": DEFAULT_WEIGHT_VERSION}),
                (Native::Vllm, None) => json!({"weight_version": null}),
            }))
        }
    }
}

/// The `message` of vLLM 0.33.0's 200 answer on a weight-transfer route
/// (`entrypoints/rl/online/api_router.py`), by the path's last segment.
fn vllm_message(path: &str) -> &'static str {
    match path.rsplit('/').next().unwrap_or_default() {
        "start_weight_update" => "Weight update started",
        "update_weights" => "Weights updated",
        "finish_weight_update" => "Weight update finished",
        "shutdown_weight_transfer_engine" => "Weight transfer shut down",
        "start_draft_weight_update" => "Draft weight update started",
        _ => "Weight transfer initialized",
    }
}

/// What a failed weight call answers on vLLM 0.33.0: the routes do not catch, a worker's error
/// comes out of `collective_rpc` as `Exception("Call to collective_rpc method failed: …")`
/// (`v1/engine/core.py`, `core_client.py`), and the catch-all handler
/// (`serve/exception_handling/handlers/exception.py`) answers 500 with `ErrorResponse`. The
/// knob's message (empty: [`MOCK_UPDATE_FAILURE`]) stands for the worker's error.
fn vllm_rpc_failure(message: &str) -> ControlReply {
    let cause = if message.is_empty() {
        MOCK_UPDATE_FAILURE
    } else {
        message
    };
    let text = format!(
        r#"{{"error":{{"message":{},"type":"InternalServerError","param":null,"code":500}}}}"#,
        Value::String(format!("Call to collective_rpc method failed: {cause}"))
    );
    ControlReply::json(500, text.into_bytes())
}

/// The worker error a vLLM weight call fails with when the knob gives no message (the mock's
/// wording, not the engine's).
pub const MOCK_UPDATE_FAILURE: &str = "mock weight update failure";

/// Wait until no request runs, within `timeout`.
async fn wait_idle(shared: &Arc<Shared>, timeout: Duration, what: &str) -> Result<(), EngineError> {
    if shared.counters_running() == 0 {
        return Ok(());
    }
    let drained = async {
        loop {
            let notified = shared.control.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if shared.counters_running() == 0 {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(timeout, drained).await.map_err(|_| {
        EngineError::timeout(format!(
            "the mock engine waited {timeout:?} for {what}; {} still running",
            shared.counters_running()
        ))
    })
}

/// A boolean query parameter (`true`/`1`, `false`/`0`, any case), as FastAPI reads one.
fn query_flag(query: &str, key: &str) -> Option<bool> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(true),
            "false" | "0" | "no" | "off" => Some(false),
            _ => None,
        })?
    })
}

fn to_vec(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn ok_json(value: Value) -> ControlReply {
    ControlReply::json(200, to_vec(&value))
}

#[cfg(test)]
mod tests {
    use super::query_flag;

    #[test]
    fn query_flags_read_like_fastapi() {
        assert_eq!(
            query_flag("mode=keep&clear_cache=false", "clear_cache"),
            Some(false)
        );
        assert_eq!(query_flag("clear_cache=True", "clear_cache"), Some(true));
        assert_eq!(query_flag("clear_cache=1", "clear_cache"), Some(true));
        assert_eq!(query_flag("mode=abort", "clear_cache"), None);
        assert_eq!(query_flag("", "clear_cache"), None);
        assert_eq!(query_flag("clear_cache=maybe", "clear_cache"), None);
    }
}
