//! The control layer: the engine's own fleet-control routes answered by the mock engine, and the
//! test-control routes around them.
//!
//! A native engine answers `POST /pause_generation` (SGLang) or `POST /pause?mode=keep` (vLLM)
//! with its own small body, not with genfront's per-worker report, so this axum middleware takes
//! the format's control routes ([`genfront_format::GenerateFormat::control_routes`]) before the
//! shared frontend sees them: the format parses the call exactly as the engine would (its
//! native 422/400 refusals included), and [`genfront_mocker::MockEngine`]'s `control` acts on
//! it and answers in the engine's shape (see [`genfront_mocker::control`]). A method the route
//! does not take passes on to the frontend, which answers the engine's 405.
//!
//! Test-control routes (not part of either engine's API):
//! - `GET /_mock/control_log`: every control call the engine received, oldest first (a JSON list
//!   of [`genfront_mocker::ControlRecord`]: `format`, `action`, `mode`, `method`, `path`,
//!   `query`, `body`, `status`, `error`, `at_unix_ms`, `latency_ms`); `DELETE` clears it.
//! - `GET /_mock/config`: `{"update_weights_fail", "paused", "pause_mode", "weight_version"}`.
//! - `POST /_mock/config {"update_weights_fail": true | false | null | "message"}`: the
//!   weight-update failure knob (as the oracle's `/_oracle/config` key of the same name: `true`
//!   fails with the engine's default text, a string with that message, `false`/`null` turns it
//!   off); answers `{"ok": true, "config": …}`; an unknown key or a value of the wrong type is a
//!   400 `{"error": …}` and changes nothing.
//!
//! Once a weight version is set, SGLang's `/get_model_info`, `/model_info`, `/get_server_info`
//! and `/server_info` answers report it as their `weight_version` (the engine reads it from
//! `server_args.weight_version`, which `/update_weight_version` and weight updates set).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use genfront_format::{ControlMethods, GenerateFormat, NativeResponse};
use genfront_mocker::MockEngine;
use genfront_protocol::{ControlCall, Engine};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::args::Api;

/// The path of the control-call log.
pub const CONTROL_LOG_PATH: &str = "/_mock/control_log";
/// The path of the test configuration (the weight-update failure knob).
pub const CONFIG_PATH: &str = "/_mock/config";
/// How long one control call may take on the mock (a `wait` pause answers once the requests in
/// flight finished; an engine has no limit of its own, the caller's timeout bounds it).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Largest model/server info answer the weight-version patch reads.
const INFO_LIMIT: usize = 4 * 1024 * 1024;
/// SGLang answers that carry the server's `weight_version`.
const SGLANG_INFO_PATHS: [&str; 4] = [
    "/get_model_info",
    "/model_info",
    "/get_server_info",
    "/server_info",
];

/// Shared state of the control layer.
pub(crate) struct Control {
    pub(crate) api: Api,
    pub(crate) format: Arc<dyn GenerateFormat>,
    pub(crate) engine: Arc<MockEngine>,
    pub(crate) body_limit: usize,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

/// The middleware (see the module docs).
pub(crate) async fn layer(State(c): State<Arc<Control>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == CONTROL_LOG_PATH {
        return c.control_log(req.method());
    }
    if path == CONFIG_PATH {
        return c.config(req).await;
    }
    let route = c
        .format
        .control_routes()
        .iter()
        .find(|r| r.path == path && accepts(r.methods, req.method()))
        .copied();
    if let Some(route) = route {
        return c.call(route, req).await;
    }
    if c.api == Api::Sglang
        && SGLANG_INFO_PATHS.contains(&path)
        && let Some(version) = c.engine.weight_version()
    {
        return with_weight_version(next.run(req).await, &version).await;
    }
    next.run(req).await
}

fn accepts(methods: ControlMethods, method: &Method) -> bool {
    match methods {
        ControlMethods::Get => method == Method::GET,
        ControlMethods::Post => method == Method::POST,
        ControlMethods::GetOrPost => method == Method::GET || method == Method::POST,
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut r = (status, value.to_string()).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn native(resp: NativeResponse) -> Response {
    let mut r = (resp.status, resp.body).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(resp.content_type));
    r
}

// === impl Control ===

impl Control {
    /// One native control call: the format's parse, then the mock engine's answer as it is.
    async fn call(&self, route: genfront_format::ControlRoute, req: Request) -> Response {
        let (parts, body) = req.into_parts();
        let body = match axum::body::to_bytes(body, self.body_limit).await {
            Ok(b) => b,
            Err(_) => {
                return json_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &json!({"detail": "Request body too large"}),
                );
            }
        };
        let query = parts.uri.query().unwrap_or("").to_owned();
        let action = match (route.parse)(&query, &body) {
            Ok(action) => action,
            Err(refusal) => return native(refusal),
        };
        let call = ControlCall {
            format: self.format.name(),
            action,
            method: parts.method.as_str().to_owned(),
            path: route.path.to_owned(),
            query,
            body,
            timeout: CONTROL_TIMEOUT,
        };
        match self.engine.control(call).await {
            Ok(reply) => {
                let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
                let mut r = (status, reply.body).into_response();
                // The engine's own content type, or none when it sent none (SGLang's flush).
                match reply
                    .content_type
                    .as_deref()
                    .and_then(|ct| HeaderValue::from_str(ct).ok())
                {
                    Some(ct) => r.headers_mut().insert(CONTENT_TYPE, ct),
                    None => r.headers_mut().remove(CONTENT_TYPE),
                };
                r
            }
            // Not an engine answer: the mock could not act (no timer, unknown format). A real
            // engine would fail the same call with its 500.
            Err(e) => json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({"error": e.message}),
            ),
        }
    }

    fn control_log(&self, method: &Method) -> Response {
        if *method == Method::DELETE {
            self.engine.clear_control_log();
            return json_response(StatusCode::OK, &json!({"ok": true}));
        }
        match serde_json::to_value(self.engine.control_log()) {
            Ok(log) => json_response(StatusCode::OK, &log),
            Err(e) => json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({"error": e.to_string()}),
            ),
        }
    }

    fn config_view(&self) -> Value {
        json!({
            "update_weights_fail": self.engine.update_weights_fail(),
            "paused": self.engine.is_paused(),
            "pause_mode": self.engine.pause_mode().map(|m| m.as_str()),
            "weight_version": self.engine.weight_version(),
        })
    }

    async fn config(&self, req: Request) -> Response {
        if req.method() == Method::GET {
            return json_response(StatusCode::OK, &self.config_view());
        }
        if req.method() != Method::POST {
            return json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({"detail": "Method Not Allowed"}),
            );
        }
        let bad =
            |message: String| json_response(StatusCode::BAD_REQUEST, &json!({"error": message}));
        let body = match axum::body::to_bytes(req.into_body(), self.body_limit).await {
            Ok(b) => b,
            Err(e) => return bad(format!("cannot read the body: {e}")),
        };
        let settings = match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return bad("expected a JSON object".to_owned()),
            Err(e) => return bad(format!("bad json: {e}")),
        };
        // Check everything before changing anything.
        let mut fail = None;
        for (key, value) in &settings {
            match key.as_str() {
                "update_weights_fail" => {
                    fail = Some(match value {
                        Value::Bool(true) => Some(String::new()),
                        Value::Bool(false) | Value::Null => None,
                        Value::String(s) => Some(s.clone()),
                        other => {
                            return bad(format!(
                                "update_weights_fail must be a boolean, null or a string, not {other}"
                            ));
                        }
                    });
                }
                other => return bad(format!("unknown config key {other}")),
            }
        }
        if let Some(fail) = fail {
            self.engine.set_update_weights_fail(fail);
        }
        json_response(
            StatusCode::OK,
            &json!({"ok": true, "config": self.config_view()}),
        )
    }
}

/// `response` (a JSON object answer) with its top-level `weight_version` set to `version`; any
/// other answer unchanged.
async fn with_weight_version(response: Response, version: &str) -> Response {
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.contains("json"));
    if !response.status().is_success() || !json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, INFO_LIMIT).await else {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": "model info answer too large"}),
        );
    };
    let patched: Bytes = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(mut m)) => {
            m.insert("weight_version".to_owned(), json!(version));
            serde_json::to_vec(&m).map_or(bytes, Bytes::from)
        }
        _ => bytes,
    };
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(patched))
}
