//! vLLM's native fleet-control routes ([`CONTROL_ROUTES`]): what each call means
//! ([`ControlAction`]) and the refusal vLLM itself sends for a call it rejects before acting.
//!
//! # The routes at the pinned vLLM 0.33.0
//!
//! The RL routes live in `vllm/entrypoints/rl/online/api_router.py`, the cache reset in
//! `vllm/entrypoints/serve/dev/cache/api_router.py`. **Both routers are mounted only with
//! `VLLM_SERVER_DEV_MODE=1`** (`launchers/api_server/routers.py`); without it each path answers
//! FastAPI's 404 `{"detail":"Not Found"}`.
//!
//! | route | parameters | success | failure |
//! |---|---|---|---|
//! | `POST /pause` | query `mode: Literal["abort","wait","keep"] = "abort"`, `clear_cache: bool = True` (deprecated; ignored for `keep`); no body | 200 `{"status":"paused"}` | 400 `{"error": str(ValueError)}`, 500 `{"error":"Failed to pause generation: …"}` |
//! | `POST /resume` | none (a body is not read) | 200 `{"status":"resumed"}` | 500 `{"error":"Failed to resume generation: …"}` |
//! | `GET /is_paused` | none | 200 `{"is_paused": bool}` | 500 `{"error":"Failed to fetch pause status: …"}` |
//! | `POST /reset_prefix_cache` | query `reset_running_requests: bool = False`, `reset_external: bool = False` | 200 `{"success": bool}` — `false` (still 200) while blocks are held, e.g. by running requests; callers may retry | — |
//! | `POST /update_weight_version` | body `{"new_version": str}` (`Body(embed=True)`, required) | 200 `{"success":true,"new_version":V}` | — |
//! | `GET /weight_info` | none | 200 `{"weight_version": V}` (`null` before any version is set) | — |
//! | `POST /init_weight_transfer_engine` | body `{"init_info": {…}}` (`dict[str, Any]`, `Body(embed=True)`, required) | 200 `{"message":"Weight transfer initialized"}` | an engine exception is not caught by the route; vLLM's catch-all handler answers it: a worker's failure inside `collective_rpc` reaches the route as `Exception("Call to collective_rpc method failed: …")` → 500 `{"error":{"message":…,"type":"InternalServerError","param":null,"code":500}}` (a `ValueError`/`TypeError` → 400 `BadRequestError`) |
//! | `POST /start_weight_update` | none (a body is not read) | 200 `{"message":"Weight update started"}` | as above |
//! | `POST /update_weights` | body `{"update_info": {…} \| [{…}, …]}` (`dict[str, Any] \| list[dict[str, Any]]`, required), once per bucket | 200 `{"message":"Weights updated"}` | as above |
//! | `POST /finish_weight_update` | body `{"weight_version": str \| null}` (optional, default `null`) | 200 `{"message":"Weight update finished"}`; a version becomes the engine's weight version | as above |
//! | `POST /shutdown_weight_transfer_engine` | none | 200 `{"message":"Weight transfer shut down"}` | as above |
//! | `POST /start_draft_weight_update` | none | 200 `{"message":"Draft weight update started"}` | as above |
//!
//! The weight-transfer flow (init once, then per refit start → `update_weights` per bucket →
//! finish) maps onto the fleet's actions: init, start, shutdown and start-draft are
//! [`ControlAction::InitWeightsGroup`] (no routing effect; a failure is only reported);
//! `/update_weights` is `UpdateWeights { version: None }` and `/finish_weight_update` is
//! `UpdateWeights { version }` with the body's `weight_version`, so a failed bucket or finish
//! marks that worker `weights_failed` and the next successful one of either clears it.
//!
//! Pause modes (`AsyncLLM.pause_generation`): `abort` aborts every request in flight (each ends
//! with finish reason `abort` and the tokens made so far), `wait` lets them finish first, `keep`
//! freezes them in the queue until `/resume`. In `abort` and `wait` mode **new requests are
//! refused** (`RetryableRequestError`, HTTP 503) from the start of the pause until `/resume`;
//! `keep` accepts and queues them.
//!
//! **Not at 0.33.0:** the legacy `wait_for_inflight_requests` query parameter is gone; FastAPI
//! ignores unknown query keys, so `POST /pause?wait_for_inflight_requests=true` pauses in the
//! default `abort` mode, and so does this parse (genfront's oracle engine still maps it to
//! `wait`; the engine source wins). The router's other routes (`/abort_requests`,
//! `/weight_checker`, `/get_world_size`) are not fanned out by this format.
//!
//! # Refusals (what vLLM rejects before acting)
//!
//! A query or body that fails FastAPI's validation raises `RequestValidationError`, which vLLM's
//! own handler (`serve/exception_handling/handlers/validation.py`) answers with **HTTP 400**
//! (not FastAPI's 422):
//! `{"error":{"message":M,"type":"Bad Request","param":P,"code":400}}`, where `P` is the first
//! error's location joined with `.` (`query.mode`, `body.new_version`) and `M` is
//! `"{n} validation error(s):\n  {error}\n  …"` over at most 10 errors, each error dict printed
//! by Python with its `loc` already joined (`'loc': 'query.mode'`) and its `input` summarised:
//! a string as is (cut at 200 characters + `...[truncated]`), a list or dict as
//! `<list of N items>`, anything else as `str(value)` (`'None'`, `'3'`, `'True'`); each error is
//! cut at 1000 characters; the whole message has paths replaced by `<path>`
//! (`sanitize_message`).
//!
//! - `/pause`: `mode` must be exactly one of the three names (`literal_error`, ctx `expected`);
//!   `clear_cache` a pydantic boolean string (`bool_parsing`); both are reported, mode first.
//! - `/reset_prefix_cache`: each flag a pydantic boolean string.
//! - `/update_weight_version`: no body, `null`, a body that is not an object, or an object
//!   without `new_version` (or with `"new_version": null`) → `missing` at `body.new_version`;
//!   a non-string → `string_type`; bytes that are not JSON → `json_invalid` at `body.<char
//!   offset>` with ctx `{'error': '<json.loads message>'}`. Unknown keys are ignored.
//! - `/init_weight_transfer_engine`: `init_info` missing (no body, a body that is not an
//!   object, absent, `null`) → `missing` at `body.init_info`; not an object → `dict_type`.
//! - `/update_weights`: `update_info` missing as above; neither an object nor a list →
//!   `dict_type` and `list_type`, both at `body.update_info`; a list with items that are not
//!   objects → `dict_type` at `body.update_info` (the list) then `dict_type` at
//!   `body.update_info.{i}` for each such item. An empty list is accepted.
//! - `/finish_weight_update`: no body, `null`, `{}` and `{"weight_version": null}` are
//!   accepted without a version; a non-string version → `string_type`; a JSON body that is not
//!   an object (`"v1"`, `[1]`) → `missing` at `body.weight_version`.
//! - All three: bytes that are not JSON → `json_invalid` as above.
//!
//! Query values are read as Starlette does: `+` and `%XX` decoded, the last of repeated keys.
//! Pydantic's boolean strings are `0`/`off`/`f`/`false`/`n`/`no` and `1`/`on`/`t`/`true`/`y`/
//! `yes` in any case, without surrounding space.

use std::fmt::Write as _;

use bytes::Bytes;
use genfront_format::query::query_value;
use genfront_format::{ControlMethods, ControlRoute, NativeResponse};
use genfront_protocol::{ControlAction, PauseMode};
use http::StatusCode;
use serde_json::Value;

use crate::pyfmt::{py_float, py_str};

/// vLLM's control routes, in the order of the table above.
pub const CONTROL_ROUTES: [ControlRoute; 12] = [
    ControlRoute {
        path: "/pause",
        methods: ControlMethods::Post,
        parse: parse_pause,
    },
    ControlRoute {
        path: "/resume",
        methods: ControlMethods::Post,
        parse: parse_resume,
    },
    ControlRoute {
        path: "/is_paused",
        methods: ControlMethods::Get,
        parse: parse_is_paused,
    },
    ControlRoute {
        path: "/reset_prefix_cache",
        methods: ControlMethods::Post,
        parse: parse_reset_prefix_cache,
    },
    ControlRoute {
        path: "/update_weight_version",
        methods: ControlMethods::Post,
        parse: parse_update_weight_version,
    },
    ControlRoute {
        path: "/weight_info",
        methods: ControlMethods::Get,
        parse: parse_weight_info,
    },
    ControlRoute {
        path: "/init_weight_transfer_engine",
        methods: ControlMethods::Post,
        parse: parse_init_weight_transfer_engine,
    },
    ControlRoute {
        path: "/start_weight_update",
        methods: ControlMethods::Post,
        parse: parse_no_parameters_weights_group,
    },
    ControlRoute {
        path: "/update_weights",
        methods: ControlMethods::Post,
        parse: parse_update_weights,
    },
    ControlRoute {
        path: "/finish_weight_update",
        methods: ControlMethods::Post,
        parse: parse_finish_weight_update,
    },
    ControlRoute {
        path: "/shutdown_weight_transfer_engine",
        methods: ControlMethods::Post,
        parse: parse_no_parameters_weights_group,
    },
    ControlRoute {
        path: "/start_draft_weight_update",
        methods: ControlMethods::Post,
        parse: parse_no_parameters_weights_group,
    },
];

const PAUSE_MODES: [(&str, PauseMode); 3] = [
    ("abort", PauseMode::Abort),
    ("wait", PauseMode::Wait),
    ("keep", PauseMode::Keep),
];

fn parse_pause(query: &str, _body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let mut errors = Vec::new();
    let mut mode = PauseMode::Abort;
    if let Some(raw) = query_value(query, "mode") {
        match PAUSE_MODES.iter().find(|(name, _)| *name == raw) {
            Some((_, m)) => mode = *m,
            None => errors.push(Issue {
                kind: "literal_error",
                loc: "query.mode".into(),
                msg: "Input should be 'abort', 'wait' or 'keep'".into(),
                input: py_str(&summarise_str(&raw)),
                ctx: Some("{'expected': \"'abort', 'wait' or 'keep'\"}".into()),
            }),
        }
    }
    check_bool_query(query, "clear_cache", &mut errors);
    if errors.is_empty() {
        Ok(ControlAction::Pause { mode })
    } else {
        Err(refusal(&errors))
    }
}

fn parse_resume(_query: &str, _body: &[u8]) -> Result<ControlAction, NativeResponse> {
    Ok(ControlAction::Resume)
}

fn parse_is_paused(_query: &str, _body: &[u8]) -> Result<ControlAction, NativeResponse> {
    Ok(ControlAction::IsPaused)
}

fn parse_weight_info(_query: &str, _body: &[u8]) -> Result<ControlAction, NativeResponse> {
    Ok(ControlAction::WeightInfo)
}

fn parse_reset_prefix_cache(query: &str, _body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let mut errors = Vec::new();
    check_bool_query(query, "reset_running_requests", &mut errors);
    check_bool_query(query, "reset_external", &mut errors);
    if errors.is_empty() {
        Ok(ControlAction::FlushCache)
    } else {
        Err(refusal(&errors))
    }
}

fn parse_update_weight_version(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let missing = || Issue {
        kind: "missing",
        loc: "body.new_version".into(),
        msg: "Field required".into(),
        input: py_str("None"),
        ctx: None,
    };
    if body.is_empty() {
        return Err(refusal(&[missing()]));
    }
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(err) => {
            let e = crate::schema::json_decode_error(&err, body);
            return Err(refusal(&[Issue {
                kind: "json_invalid",
                loc: format!("body.{}", e.pos),
                msg: "JSON decode error".into(),
                input: py_str("<dict of 0 items>"),
                ctx: Some(format!("{{'error': {}}}", py_str(e.msg))),
            }]));
        }
    };
    match value.get("new_version") {
        None | Some(Value::Null) => Err(refusal(&[missing()])),
        Some(Value::String(v)) => Ok(ControlAction::SetWeightVersion { version: v.clone() }),
        Some(other) => Err(refusal(&[Issue {
            kind: "string_type",
            loc: "body.new_version".into(),
            msg: "Input should be a valid string".into(),
            input: py_str(&summarise_value(other)),
            ctx: None,
        }])),
    }
}

/// `/start_weight_update`, `/shutdown_weight_transfer_engine`, `/start_draft_weight_update`:
/// no parameters (the body is not read), no routing effect.
fn parse_no_parameters_weights_group(
    _query: &str,
    _body: &[u8],
) -> Result<ControlAction, NativeResponse> {
    Ok(ControlAction::InitWeightsGroup)
}

/// `/init_weight_transfer_engine`: `init_info: dict[str, Any] = Body(embed=True)`, required.
fn parse_init_weight_transfer_engine(
    _query: &str,
    body: &[u8],
) -> Result<ControlAction, NativeResponse> {
    match embedded_field(body, "init_info")? {
        None => Err(refusal(&[missing_field("init_info")])),
        Some(Value::Object(_)) => Ok(ControlAction::InitWeightsGroup),
        Some(other) => Err(refusal(&[dict_type("body.init_info".into(), &other)])),
    }
}

/// `/update_weights`: `update_info: dict[str, Any] | list[dict[str, Any]] = Body(embed=True)`,
/// required. A value that is neither fails both union members: `dict_type` then `list_type`
/// (both at `body.update_info`); a list with non-object items fails the dict member at the list
/// and the list member at each such item (`body.update_info.{i}`).
fn parse_update_weights(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let loc = "body.update_info";
    match embedded_field(body, "update_info")? {
        None => Err(refusal(&[missing_field("update_info")])),
        Some(Value::Object(_)) => Ok(ControlAction::UpdateWeights { version: None }),
        Some(Value::Array(items)) => {
            let mut errors = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if !item.is_object() {
                    errors.push(dict_type(format!("{loc}.{i}"), item));
                }
            }
            if errors.is_empty() {
                return Ok(ControlAction::UpdateWeights { version: None });
            }
            errors.insert(0, dict_type(loc.into(), &Value::Array(items)));
            Err(refusal(&errors))
        }
        Some(other) => Err(refusal(&[
            dict_type(loc.into(), &other),
            Issue {
                kind: "list_type",
                loc: loc.into(),
                msg: "Input should be a valid list".into(),
                input: py_str(&summarise_value(&other)),
                ctx: None,
            },
        ])),
    }
}

/// `/finish_weight_update`: `weight_version: str | None = Body(None, embed=True)`. No body,
/// `null`, or an object without it (or with `null`) finishes without a version; a body that is
/// JSON but not an object is `missing` (FastAPI's embedded-body rule, as recorded).
fn parse_finish_weight_update(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    if body.is_empty() {
        return Ok(ControlAction::UpdateWeights { version: None });
    }
    let value = json_body(body)?;
    match value {
        Value::Null => Ok(ControlAction::UpdateWeights { version: None }),
        Value::Object(map) => match map.get("weight_version") {
            None | Some(Value::Null) => Ok(ControlAction::UpdateWeights { version: None }),
            Some(Value::String(v)) => Ok(ControlAction::UpdateWeights {
                version: Some(v.clone()),
            }),
            Some(other) => Err(refusal(&[Issue {
                kind: "string_type",
                loc: "body.weight_version".into(),
                msg: "Input should be a valid string".into(),
                input: py_str(&summarise_value(other)),
                ctx: None,
            }])),
        },
        _ => Err(refusal(&[missing_field("weight_version")])),
    }
}

/// The JSON of a non-empty body, or vLLM's `json_invalid` refusal (`body.{char offset}`).
fn json_body(body: &[u8]) -> Result<Value, NativeResponse> {
    serde_json::from_slice(body).map_err(|err| {
        let e = crate::schema::json_decode_error(&err, body);
        refusal(&[Issue {
            kind: "json_invalid",
            loc: format!("body.{}", e.pos),
            msg: "JSON decode error".into(),
            input: py_str("<dict of 0 items>"),
            ctx: Some(format!("{{'error': {}}}", py_str(e.msg))),
        }])
    })
}

/// A required `Body(embed=True)` field: `Ok(None)` when the body is empty, not an object, or
/// the field is absent or `null` (all `missing` to FastAPI); `Err` for bytes that are not JSON.
fn embedded_field(body: &[u8], key: &str) -> Result<Option<Value>, NativeResponse> {
    if body.is_empty() {
        return Ok(None);
    }
    Ok(match json_body(body)? {
        Value::Object(mut map) => map.remove(key).filter(|v| !v.is_null()),
        _ => None,
    })
}

/// Pydantic's `missing` at `body.{key}`.
fn missing_field(key: &str) -> Issue {
    Issue {
        kind: "missing",
        loc: format!("body.{key}"),
        msg: "Field required".into(),
        input: py_str("None"),
        ctx: None,
    }
}

/// Pydantic's `dict_type` for `value` at `loc`.
fn dict_type(loc: String, value: &Value) -> Issue {
    Issue {
        kind: "dict_type",
        loc,
        msg: "Input should be a valid dictionary".into(),
        input: py_str(&summarise_value(value)),
        ctx: None,
    }
}

/// A `bool = Query(...)` parameter: its value, when given, must be a pydantic boolean string.
fn check_bool_query(query: &str, key: &str, errors: &mut Vec<Issue>) {
    if let Some(raw) = query_value(query, key) {
        const TRUE_OR_FALSE: [&str; 12] = [
            "0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes",
        ];
        if !TRUE_OR_FALSE.contains(&raw.to_lowercase().as_str()) {
            errors.push(Issue {
                kind: "bool_parsing",
                loc: format!("query.{key}"),
                msg: "Input should be a valid boolean, unable to interpret input".into(),
                input: py_str(&summarise_str(&raw)),
                ctx: None,
            });
        }
    }
}

// === vLLM's validation answer ===

/// One pydantic error as vLLM's `_format_error` prints it (`loc` already joined, `input`
/// already summarised and `repr`'d).
#[derive(Debug, Clone, PartialEq)]
struct Issue {
    kind: &'static str,
    loc: String,
    msg: String,
    input: String,
    ctx: Option<String>,
}

/// Most errors listed, most characters of one listed error, most characters of a string input
/// (`_MAX_REPORTED_ERRORS`, `_MAX_ERROR_CHARS`, `_MAX_ERROR_INPUT_CHARS`).
const MAX_REPORTED_ERRORS: usize = 10;
const MAX_ERROR_CHARS: usize = 1000;
const MAX_ERROR_INPUT_CHARS: usize = 200;

impl Issue {
    fn text(&self) -> String {
        let mut s = format!(
            "{{'type': {}, 'loc': {}, 'msg': {}, 'input': {}",
            py_str(self.kind),
            py_str(&self.loc),
            py_str(&self.msg),
            self.input
        );
        if let Some(ctx) = &self.ctx {
            let _ = write!(s, ", 'ctx': {ctx}");
        }
        s.push('}');
        if s.chars().count() > MAX_ERROR_CHARS {
            s = s.chars().take(MAX_ERROR_CHARS).collect::<String>() + "...[truncated]";
        }
        s
    }
}

/// `_summarize_error_input` of a string.
fn summarise_str(s: &str) -> String {
    if s.chars().count() > MAX_ERROR_INPUT_CHARS {
        s.chars().take(MAX_ERROR_INPUT_CHARS).collect::<String>() + "...[truncated]"
    } else {
        s.to_owned()
    }
}

/// `_summarize_error_input` of a JSON value (as `json.loads` types it).
fn summarise_value(v: &Value) -> String {
    match v {
        Value::String(s) => summarise_str(s),
        Value::Array(a) => format!("<list of {} items>", a.len()),
        Value::Object(o) => format!("<dict of {} items>", o.len()),
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => py_float(n.as_f64().unwrap_or(f64::NAN)),
        },
    }
}

/// vLLM's 400 for a `RequestValidationError` with `errors` (not empty).
fn refusal(errors: &[Issue]) -> NativeResponse {
    let count = errors.len();
    let label = if count == 1 { "error" } else { "errors" };
    let mut message = format!("{count} validation {label}:\n");
    for issue in errors.iter().take(MAX_REPORTED_ERRORS) {
        let _ = writeln!(message, "  {}", issue.text());
    }
    if count > MAX_REPORTED_ERRORS {
        let _ = writeln!(
            message,
            "  ...and {} more {label}",
            count - MAX_REPORTED_ERRORS
        );
    }
    let message = sanitize_message(message.trim_end());
    let param = errors.first().map(|e| e.loc.clone());
    let body = serde_json::json!({
        "error": {
            "message": message,
            "type": "Bad Request",
            "param": param,
            "code": 400,
        }
    });
    // Keys in vLLM's order (`ErrorInfo`: message, type, param, code), whatever map order
    // serde_json uses.
    let info = &body["error"];
    let text = format!(
        r#"{{"error":{{"message":{},"type":"Bad Request","param":{},"code":400}}}}"#,
        info["message"], info["param"]
    );
    NativeResponse::json(StatusCode::BAD_REQUEST, Bytes::from(text))
}

// === sanitize_message (serve/exception_handling/utils.py) ===

/// vLLM's `sanitize_message`: ` at 0x…>` → `>`; `File "…", line N, in f` lines removed;
/// absolute paths under `/home`, `/usr`, `/opt`, `/var`, `/tmp`, `/root`, `/lib`, `/mnt`,
/// `/srv`, then any `/a/b.ext`-shaped path, → `<path>`; surrounding whitespace stripped.
fn sanitize_message(message: &str) -> String {
    let s = strip_addresses(message);
    let s = strip_file_lines(&s);
    let s = replace_rooted_paths(&s);
    let s = replace_file_paths(&s);
    s.trim().to_owned()
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `re.sub(r" at 0x[0-9a-fA-F]+>", ">", s)`.
fn strip_addresses(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(" at 0x") {
        let after = &rest[i + 6..];
        let hex = after
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(after.len());
        if hex > 0 && after[hex..].starts_with('>') {
            out.push_str(&rest[..i]);
            out.push('>');
            rest = &after[hex + 1..];
        } else {
            out.push_str(&rest[..i + 6]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", s)`.
fn strip_file_lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("File \"") {
        let tail = &rest[i + 6..];
        let end = file_line_end(tail);
        match end {
            Some(len) => {
                let kept = rest[..i].trim_end();
                out.push_str(kept);
                let mut after = &tail[len..];
                // (\n\s+.*)?: a following line that starts with whitespace.
                if let Some(next) = after.strip_prefix('\n') {
                    let ws = next.len() - next.trim_start().len();
                    if ws > 0 {
                        let line_end = next[ws..].find('\n').map_or(next.len(), |e| ws + e);
                        after = &next[line_end..];
                    }
                }
                rest = after;
            }
            None => {
                out.push_str(&rest[..i + 6]);
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of `[^"]+", line \d+, in \S+` at the start of `t`, if it matches.
fn file_line_end(t: &str) -> Option<usize> {
    let q = t.find('"')?;
    if q == 0 {
        return None;
    }
    let after = t[q..].strip_prefix("\", line ")?;
    let digits = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    if digits == 0 {
        return None;
    }
    let after_digits = after[digits..].strip_prefix(", in ")?;
    let name = after_digits
        .find(char::is_whitespace)
        .unwrap_or(after_digits.len());
    if name == 0 {
        return None;
    }
    Some(t.len() - after_digits.len() + name)
}

/// `re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", s)`.
fn replace_rooted_paths(s: &str) -> String {
    const ROOTS: [&str; 9] = [
        "home", "usr", "opt", "var", "tmp", "root", "lib", "mnt", "srv",
    ];
    let seg_char = |c: char| is_word(c) || c == '.' || c == '-';
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if rest.starts_with('/') {
            let matched = ROOTS.iter().find_map(|root| {
                let after = rest[1..].strip_prefix(root)?;
                let end = segments(after, seg_char);
                (end > 0).then_some(1 + root.len() + end)
            });
            if let Some(len) = matched {
                out.push_str("<path>");
                i += len;
                continue;
            }
        }
        let c = rest.chars().next().unwrap_or('\0');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The length of `(?:/[seg]+)+` at the start of `t` (0 if none).
fn segments(t: &str, seg_char: impl Fn(char) -> bool) -> usize {
    let mut end = 0;
    loop {
        let Some(after) = t[end..].strip_prefix('/') else {
            return end;
        };
        let len = after.find(|c: char| !seg_char(c)).unwrap_or(after.len());
        if len == 0 {
            return end;
        }
        end += 1 + len;
    }
}

/// `re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", s)`.
fn replace_file_paths(s: &str) -> String {
    let seg_char = |c: char| is_word(c) || c == '-';
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if rest.starts_with('/') {
            let run = segments(rest, seg_char);
            let count = rest[..run].matches('/').count();
            if count >= 2
                && let Some(ext) = rest[run..].strip_prefix('.')
            {
                let n = ext.find(|c: char| !is_word(c)).unwrap_or(ext.len());
                if n > 0 {
                    out.push_str("<path>");
                    i += run + 1 + n;
                    continue;
                }
            }
        }
        let c = rest.chars().next().unwrap_or('\0');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests;
