//! Fleet-control and admin routes: the formats' native control routes fanned out to their
//! workers, and genfront's own worker registry API.
//!
//! | route | answer |
//! |---|---|
//! | each format's control routes (`GenerateFormat::control_routes`: SGLang `/pause_generation`, `/continue_generation`, `/flush_cache`, `/update_weights_from_*`, …; vLLM `/pause`, `/resume`, `/is_paused`, …) | the per-worker report below |
//! | `GET /workers` | every worker: id, URL, kind, role, state, breaker, weights, weight version, load, facts; and the fleet's current weight version |
//! | `POST /workers` `{"worker": "sglang=http://…", "role": "agg"\|"prefill"\|"decode", "id": …}` | 201 `{"id", "state": "connecting"}`; the worker connects in the background; 409 when the id is taken or the same engine is already a worker of that role |
//! | `DELETE /workers/{id}` | drains it (up to `--worker-drain-timeout`), removes it: 200 `{"id", "removed": true, "in_flight_at_removal": n}` |
//!
//! All of them need the admin key when keys are configured (`--admin-api-key`: 401 without a key,
//! 403 with a tenant key, in the route format's envelope).
//!
//! **A control call.** The body and query are the engine's own; genfront reads one parameter
//! of its own from the query, `workers=ID[,ID…]` (repeatable), which limits the call to those
//! workers, and removes it before relaying. The format first checks the call the way the engine
//! would (an unknown pause mode is the engine's own 422, answered without a fan-out); then the
//! router sends it to every worker that speaks the format, each bounded by `--control-timeout`.
//! The answer:
//!
//! ```json
//! {"success": false, "action": "update_weights", "workers": [
//!   {"id": "sglang-0", "url": "http://…", "role": "agg", "outcome": "ok", "status": 200,
//!    "latency_ms": 12.5, "body": {"success": true, "message": "…", "num_paused_requests": 0}},
//!   {"id": "sglang-1", …, "outcome": "error", "status": 400, "body": {"success": false, …}},
//!   {"id": "sglang-2", …, "outcome": "timeout", "status": null, "body": null, "error": "no answer within …"}]}
//! ```
//!
//! `body` is the engine's JSON when it answered JSON, else its text. The status is 200 only
//! when every worker succeeded, the workers' common 4xx when all refused alike, else 502
//! ([`genfront_router::control::ControlReport::status`]). No worker speaking the format: the
//! format's 503 `no_available_workers`; an unknown id in `workers=`: the format's 404.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use bytes::Bytes;
use genfront_format::query::percent_decode;
use genfront_format::{ControlMethods, ControlRoute, GenerateError, GenerateFormat, Route};
use genfront_protocol::ControlCall;
use genfront_router::control::{ControlError, ControlReport};
use genfront_router::{Role, Worker};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Need;
use crate::handler;

/// genfront's own query parameter on control routes: the worker ids to limit a call to.
pub const WORKERS_PARAM: &str = "workers";

/// Most worker ids one `workers=` selection may name.
const MAX_SELECTED: usize = 4096;

/// Mount every served format's control routes (a path declared by two formats goes to the
/// first) and the `/workers` admin routes on `router`.
pub(crate) fn mount(
    mut router: axum::Router,
    state: &Arc<AppState>,
    routes: &[Route],
) -> axum::Router {
    let mut paths: Vec<&'static str> = Vec::new();
    let generate_paths: Vec<&str> = routes.iter().map(|r| r.path.as_str()).collect();
    let mut first: Option<Arc<dyn GenerateFormat>> = None;
    for r in routes {
        if first.is_none() {
            first = Some(r.format.clone());
        }
        for route in r.format.control_routes() {
            if paths.contains(&route.path) || generate_paths.contains(&route.path) {
                continue;
            }
            paths.push(route.path);
            let filter = match route.methods {
                ControlMethods::Get => MethodFilter::GET,
                ControlMethods::Post => MethodFilter::POST,
                ControlMethods::GetOrPost => MethodFilter::GET.or(MethodFilter::POST),
            };
            let st = state.clone();
            let format = r.format.clone();
            let route = *route;
            router = router.route(
                route.path,
                on(filter, move |method, uri, headers, body| {
                    control_call(
                        st.clone(),
                        format.clone(),
                        route,
                        method,
                        uri,
                        headers,
                        body,
                    )
                }),
            );
        }
    }
    let Some(format) = first else {
        return router;
    };
    let (st, f) = (state.clone(), format.clone());
    let (st2, f2) = (state.clone(), format.clone());
    let (st3, f3) = (state.clone(), format);
    router
        .route(
            "/workers",
            axum::routing::get(move |headers| list_workers(st.clone(), f.clone(), headers))
                .post(move |headers, body| add_worker(st2.clone(), f2.clone(), headers, body)),
        )
        .route(
            "/workers/{id}",
            axum::routing::delete(move |path, headers| {
                remove_worker(st3.clone(), f3.clone(), path, headers)
            }),
        )
}

/// Split genfront's `workers=` selection off a query string: the engine's own query (order
/// kept) and the selected ids (`None`: every worker).
fn split_query(query: &str) -> (String, Option<Vec<String>>) {
    let mut rest: Vec<&str> = Vec::new();
    let mut ids: Option<Vec<String>> = None;
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        if k == WORKERS_PARAM {
            let list = ids.get_or_insert_with(Vec::new);
            for id in v.split(',').filter(|s| !s.is_empty()) {
                list.push(percent_decode(id));
            }
        } else {
            rest.push(part);
        }
    }
    (rest.join("&"), ids)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// One control call: authenticate (admin), read the body, let the format check it, fan out,
/// answer with the report.
async fn control_call(
    state: Arc<AppState>,
    format: Arc<dyn GenerateFormat>,
    route: ControlRoute,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(refused) = handler::authorize(&state, &headers, Need::Admin, &*format, route.path) {
        return *refused;
    }
    let body = match handler::read_control_body(&state, &headers, body).await {
        Ok(b) => b,
        Err(e) => return handler::error_for(&state, &*format, &e),
    };
    let (query, ids) = split_query(uri.query().unwrap_or(""));
    if ids.as_ref().is_some_and(Vec::is_empty) {
        let e = GenerateError::validation(format!(
            "`{WORKERS_PARAM}` names no worker; leave it out to reach every worker"
        ));
        return handler::error_for(&state, &*format, &e);
    }
    if ids.as_ref().is_some_and(|ids| ids.len() > MAX_SELECTED) {
        let e = GenerateError::validation(format!(
            "`{WORKERS_PARAM}` names more than {MAX_SELECTED} workers"
        ));
        return handler::error_for(&state, &*format, &e);
    }
    let action = match (route.parse)(&query, &body) {
        Ok(a) => a,
        Err(native) => return handler::native_response(native),
    };
    let call = ControlCall {
        format: format.name(),
        action,
        method: method.as_str().to_owned(),
        path: route.path.to_owned(),
        query,
        body,
        timeout: state.config.control_timeout,
    };
    match state.router.control(call, ids.as_deref()).await {
        Ok(report) => render_report(&report),
        Err(ControlError::NoWorkers { .. }) => {
            handler::error_for(&state, &*format, &GenerateError::NoEngine { role: None })
        }
        Err(e @ ControlError::UnknownWorkers(_)) => handler::error_for(
            &state,
            &*format,
            &GenerateError::NotFound {
                message: e.to_string(),
                param: Some(WORKERS_PARAM.to_owned()),
            },
        ),
    }
}

/// The engine's body in the report: its JSON when it is JSON, else its text (`null` when empty).
fn body_value(content_type: Option<&str>, body: &Bytes) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    let json_type = content_type.is_none_or(|c| c.contains("json"));
    if json_type && let Ok(v) = serde_json::from_slice::<Value>(body) {
        return v;
    }
    Value::String(String::from_utf8_lossy(body).into_owned())
}

fn render_report(report: &ControlReport) -> Response {
    let workers: Vec<Value> = report
        .workers
        .iter()
        .map(|w| {
            let mut o = json!({
                "id": w.id.as_str(),
                "url": w.url,
                "role": w.role.label(),
                "outcome": w.outcome.label(),
                "status": w.status,
                "latency_ms": (w.latency.as_secs_f64() * 1e6).round() / 1e3,
                "body": body_value(w.content_type.as_deref(), &w.body),
            });
            if let (Some(err), Value::Object(m)) = (&w.error, &mut o) {
                m.insert("error".to_owned(), Value::String(err.clone()));
            }
            o
        })
        .collect();
    let status = StatusCode::from_u16(report.status()).unwrap_or(StatusCode::BAD_GATEWAY);
    json_response(
        status,
        &json!({"success": report.success(), "action": report.action, "workers": workers}),
    )
}

fn worker_json(w: &Worker) -> Value {
    json!({
        "id": w.id().as_str(),
        "url": w.url(),
        "kind": w.kind().or_else(|| w.engine().and_then(|e| e.native_format())),
        "role": w.role().label(),
        "state": w.state().label(),
        "breaker": w.breaker_state().label(),
        "weights_failed": w.weights_failed(),
        "weight_version": w.weight_version(),
        "load": {"requests": w.load().requests(), "tokens": w.load().tokens()},
        "facts": w.facts().and_then(|f| {
            // The worker's whole server-info document is served by `/server_info`; not here.
            let mut v = serde_json::to_value(f).ok()?;
            if let Value::Object(m) = &mut v {
                m.remove("server_info");
            }
            Some(v)
        }),
    })
}

async fn list_workers(
    state: Arc<AppState>,
    format: Arc<dyn GenerateFormat>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = handler::authorize(&state, &headers, Need::Admin, &*format, "/workers") {
        return *refused;
    }
    let workers: Vec<Value> = state
        .router
        .workers()
        .iter()
        .map(|w| worker_json(w))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "current_weight_version": state.router.current_version(),
            "current_weight_versions": state.router.current_versions(),
            "workers": workers,
        }),
    )
}

fn detail(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({ "detail": message }))
}

async fn add_worker(
    state: Arc<AppState>,
    format: Arc<dyn GenerateFormat>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(refused) = handler::authorize(&state, &headers, Need::Admin, &*format, "/workers") {
        return *refused;
    }
    let body = match handler::read_control_body(&state, &headers, body).await {
        Ok(b) => b,
        Err(e) => return handler::error_for(&state, &*format, &e),
    };
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(&body) else {
        return detail(
            StatusCode::BAD_REQUEST,
            "expected a JSON object {\"worker\": \"sglang=http://HOST:PORT\", \"role\": \"agg\"|\"prefill\"|\"decode\", \"id\": …}",
        );
    };
    let Some(spec) = obj.get("worker").and_then(Value::as_str) else {
        return detail(
            StatusCode::BAD_REQUEST,
            "`worker` (a string: sglang=URL[#FACTS], vllm=URL[#FACTS] or grpc://HOST:PORT) is required",
        );
    };
    let role = match obj.get("role").map(|r| r.as_str()) {
        None | Some(Some("agg" | "aggregated")) => Role::Aggregated,
        Some(Some("prefill")) => Role::Prefill,
        Some(Some("decode")) => Role::Decode,
        _ => {
            return detail(
                StatusCode::BAD_REQUEST,
                "`role` must be \"agg\", \"prefill\" or \"decode\"",
            );
        }
    };
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return detail(StatusCode::BAD_REQUEST, "`id` must be a string"),
    };
    // A trainer addresses workers by its own ids: a taken id, or the same engine in the same
    // role twice (every control call would reach it twice), is a conflict, not a rename.
    if let Some(id) = id
        && state.router.worker(id).is_some()
    {
        return detail(
            StatusCode::CONFLICT,
            &format!("a worker with id `{id}` exists; remove it first (DELETE /workers/{id})"),
        );
    }
    let url = spec.split('#').next().unwrap_or(spec);
    let url = url.split_once('=').map_or(url, |(_, u)| u);
    if let Some(w) = state
        .router
        .workers()
        .iter()
        .find(|w| w.url() == url && w.role() == role)
    {
        return detail(
            StatusCode::CONFLICT,
            &format!("{url} is already a {} worker: `{}`", role.label(), w.id()),
        );
    }
    match state.router.add_by_spec(spec, role, id) {
        Ok(id) => {
            let state_label = state
                .router
                .worker(id.as_str())
                .map_or("connecting", |w| w.state().label());
            json_response(
                StatusCode::CREATED,
                &json!({"id": id.as_str(), "role": role.label(), "state": state_label}),
            )
        }
        Err(e) => detail(StatusCode::BAD_REQUEST, &e),
    }
}

async fn remove_worker(
    state: Arc<AppState>,
    format: Arc<dyn GenerateFormat>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) =
        handler::authorize(&state, &headers, Need::Admin, &*format, "/workers/{id}")
    {
        return *refused;
    }
    match state
        .router
        .remove_worker(&id, state.config.drain_timeout)
        .await
    {
        Some(left) => json_response(
            StatusCode::OK,
            &json!({"id": id, "removed": true, "in_flight_at_removal": left}),
        ),
        None => detail(StatusCode::NOT_FOUND, &format!("no worker with id `{id}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_param_is_split_off() {
        assert_eq!(split_query(""), (String::new(), None));
        assert_eq!(
            split_query("mode=keep&workers=a,b&clear_cache=false&workers=c"),
            (
                "mode=keep&clear_cache=false".to_owned(),
                Some(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()])
            )
        );
        assert_eq!(
            split_query("workers=sglang%2D0"),
            (String::new(), Some(vec!["sglang-0".to_owned()]))
        );
        assert_eq!(percent_decode("a%zz"), "a%zz");
        assert_eq!(percent_decode("a%4"), "a%4");
    }

    #[test]
    fn bodies_in_reports() {
        assert_eq!(
            body_value(Some("application/json"), &Bytes::from_static(br#"{"a":1}"#)),
            json!({"a": 1})
        );
        assert_eq!(
            body_value(Some("text/plain"), &Bytes::from_static(b"Cache flushed.\n")),
            json!("Cache flushed.\n")
        );
        assert_eq!(body_value(None, &Bytes::new()), Value::Null);
    }
}
