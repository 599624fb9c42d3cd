//! SGLang's native fleet-control routes ([`CONTROL_ROUTES`]): what each call means
//! ([`ControlAction`]) and the refusal SGLang itself sends for a call it rejects before acting.
//!
//! # The routes at the pinned SGLang 0.5.23 (`python/sglang/srt/entrypoints/http_server.py`)
//!
//! Every route below is `@auth_level(AuthLevel.ADMIN_OPTIONAL)` and binds its body to an
//! `io_struct.py` msgspec struct through `Annotated[X, Body()]` (a required, un-embedded body).
//! Each struct inherits `BaseReq`'s `rid: Optional[str] = None` and
//! `http_worker_ipc: Optional[str] = None`; unknown keys are ignored.
//!
//! | route | body (defaults) | success | failure |
//! |---|---|---|---|
//! | `POST /pause_generation` (line 1831) | `PauseGenerationReqInput {mode: "abort"\|"retract"\|"in_place" = "abort"}` | 200 `{"message":"Generation paused successfully.","status":"ok"}` | — |
//! | `POST /continue_generation` (1844) | `ContinueGenerationReqInput {torch_empty_cache: bool = true}` | 200 `{"message":"Generation continued successfully.","status":"ok"}` | — |
//! | `GET\|POST /flush_cache` (1025) | none; query `timeout: float = 0.0, ge=0.0` (seconds to wait for the scheduler to go idle) | 200 text `Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n` | 400 text: the scheduler's message (`Another flush_cache is already in progress.`, `Timed out waiting for idle state.`) or `Flush cache failed.\n` (requests running or waiting). No `Content-Type` either way |
//! | `POST /update_weights_from_disk` (1300) | `UpdateWeightFromDiskReqInput {model_path: str` (required)`, load_format: Optional[str], abort_all_requests = false, weight_version: Optional[str], is_async = false, torch_empty_cache = false, keep_pause = false, recapture_cuda_graph = false, token_step: int = 0, flush_cache = true, manifest: Optional[Dict[str, Any]]}` | 200 `{"success":true,"message":…,"num_paused_requests":n}`; the message gains ` Weight version updated to V.` when `weight_version` is set | 400, same keys with `"success":false` |
//! | `POST /update_weights_from_distributed` (1488) | `{names: List[str], dtypes: List[str], shapes: List[List[int]]` (required)`, group_name = "weight_update_group", flush_cache = true, abort_all_requests = false, weight_version: Optional[str], load_format: Optional[str], selector: "target"\|"draft"\|"all" = "all", torch_empty_cache = false}` | 200 `{"success":true,"message"}` | 400 `{"success":false,"message"}` |
//! | `POST /update_weights_from_tensor` (1436) | `{serialized_named_tensors: List[bytes]` (required, base64 strings over HTTP)`, load_format, flush_cache = true, abort_all_requests = false, weight_version: Optional[str], selector = "all", torch_empty_cache = false}` | 200 `{"success":true,"message"}` | 400 `{"success":false,"message"}` |
//! | `POST /init_weights_update_group` (1404) | `{master_address: str, master_port: int, rank_offset: int, world_size: int` (required)`, group_name = "weight_update_group", backend = "nccl"}` | 200 `{"success":true,"message"}` | 400 `{"success":false,"message"}` |
//! | `POST /update_weight_version` (1527) | `UpdateWeightVersionReqInput {new_version: str` (required)`, abort_all_requests: bool = true}` — note the default **aborts every request** first | 200 `{"success":true,"message":"Weight version updated to V","new_version":V}` | 400 `{"success":false,"message":"Failed to update weight version: …"}` |
//!
//! `pause_generation` `abort` aborts every request in flight (each ends as an abort with its
//! partial output) and then waits for in-flight weight updates; `retract` and `in_place` pause
//! the scheduler (retract moves running requests back to the waiting queue; in place keeps them
//! with their KV cache). While paused, new `/generate` calls wait on `is_pause_cond` until
//! `continue_generation` (they are not refused).
//!
//! **Not at 0.5.23:** `GET /get_weight_version` does not exist (the weight version is only the
//! `weight_version` key of `GET /model_info` / `/get_model_info`), so this format declares no
//! [`ControlAction::WeightInfo`] route. (genfront's oracle engine serves one; the engine source
//! wins.)
//!
//! # Refusals (what SGLang rejects before acting)
//!
//! A body or query that fails validation raises FastAPI's `RequestValidationError`, which SGLang's
//! own handler answers with **HTTP 400** (not FastAPI's 422)
//! `{"object":"error","message":M,"type":"Bad Request","param":null,"code":400}`, where `M` is
//! `f"{str(exc)} {str(exc.errors())}"` (FastAPI 0.136, pydantic 2.14):
//!
//! ```text
//! 2 validation errors:
//!   {'type': 'is_instance_of', 'loc': ('body', 'is-instance[PauseGenerationReqInput]'), …}
//!   {'type': 'literal_error', 'loc': ('body', 'function-after[build_struct(), PauseGenerationReqInput]', 'mode'), …}
//!
//!   File "…/sglang/srt/entrypoints/http_server.py", line 1831, in pause_generation
//!     POST /pause_generation [{…}, {…}]
//! ```
//!
//! - No body, or `null`: one `missing` error at `('body',)`, input `None`.
//! - Not JSON: one `json_invalid` error at `('body', <char offset>)`, input `{}`, ctx
//!   `{'error': '<json.loads message>'}`.
//! - The structs' pydantic schema (`msgspec_struct_pydantic_core_schema`) is a left-to-right union
//!   of "is an instance" and "a typed dict, then build the struct", so a body that is not a
//!   valid object reports the `is_instance_of` error first and then every error of the typed
//!   dict (all fields, in field order) under `function-after[build_struct(), <Class>]`.
//! - Field types are pydantic's lax Python mode: `bool` takes `true`/`false`, `0`/`1` and the
//!   strings `yes`/`no`/`on`/`off`/`t`/`f`/`y`/`n`/`true`/`false`/`1`/`0`; `int` takes integers,
//!   integral floats, booleans and integer strings; `str` takes only strings; a `Literal` takes
//!   only its exact strings; `null` is accepted only by `Optional` fields.
//!
//! genfront renders the same text with two differences it cannot know: the file is named by its
//! package path `sglang/srt/entrypoints/http_server.py` (the engine names its installed path),
//! and the method of `/flush_cache` is always written `POST` (a route's `parse` does not see the
//! method). Python's `json.loads` positions and messages are reproduced for the common cases
//! (`Expecting value`, `Extra data`, …).

use std::fmt::Write as _;

use base64::Engine as _;
use bytes::Bytes;
use genfront_format::pyrepr::{number_repr, str_repr};
use genfront_format::query::query_value;
use genfront_format::{ControlMethods, ControlRoute, NativeResponse};
use genfront_protocol::{ControlAction, PauseMode};
use http::StatusCode;
use serde_json::{Map, Value};

/// SGLang's control routes, in the order of the table above.
pub const CONTROL_ROUTES: [ControlRoute; 8] = [
    ControlRoute {
        path: "/pause_generation",
        methods: ControlMethods::Post,
        parse: parse_pause,
    },
    ControlRoute {
        path: "/continue_generation",
        methods: ControlMethods::Post,
        parse: parse_continue,
    },
    ControlRoute {
        path: "/flush_cache",
        methods: ControlMethods::GetOrPost,
        parse: parse_flush_cache,
    },
    ControlRoute {
        path: "/update_weights_from_disk",
        methods: ControlMethods::Post,
        parse: parse_update_from_disk,
    },
    ControlRoute {
        path: "/update_weights_from_distributed",
        methods: ControlMethods::Post,
        parse: parse_update_from_distributed,
    },
    ControlRoute {
        path: "/update_weights_from_tensor",
        methods: ControlMethods::Post,
        parse: parse_update_from_tensor,
    },
    ControlRoute {
        path: "/init_weights_update_group",
        methods: ControlMethods::Post,
        parse: parse_init_group,
    },
    ControlRoute {
        path: "/update_weight_version",
        methods: ControlMethods::Post,
        parse: parse_set_version,
    },
];

// === the models ===

/// A pydantic field type, as SGLang's structs declare it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `str`.
    Str,
    /// `Optional[str]`.
    OptStr,
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `Literal[...]` of strings.
    Lit(&'static [&'static str]),
    /// `Optional[Dict[str, Any]]`.
    OptDict,
    /// `List[str]`.
    ListStr,
    /// `List[List[int]]`.
    ListListInt,
    /// `Annotated[List[bytes], Base64Bytes()]`.
    ListB64,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    kind: Kind,
    required: bool,
}

const fn req(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

const fn opt(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

/// One route's struct and where its endpoint is (for the message's endpoint context).
#[derive(Debug)]
struct Model {
    class: &'static str,
    function: &'static str,
    line: u32,
    path: &'static str,
    /// The struct's own fields (after `BaseReq`'s `rid` and `http_worker_ipc`).
    fields: &'static [Field],
}

const BASE_FIELDS: [Field; 2] = [
    opt("rid", Kind::OptStr),
    opt("http_worker_ipc", Kind::OptStr),
];

const PAUSE_MODES: &[&str] = &["abort", "retract", "in_place"];
const SELECTORS: &[&str] = &["target", "draft", "all"];

const PAUSE: Model = Model {
    class: "PauseGenerationReqInput",
    function: "pause_generation",
    line: 1831,
    path: "/pause_generation",
    fields: &[opt("mode", Kind::Lit(PAUSE_MODES))],
};

const CONTINUE: Model = Model {
    class: "ContinueGenerationReqInput",
    function: "continue_generation",
    line: 1844,
    path: "/continue_generation",
    fields: &[opt("torch_empty_cache", Kind::Bool)],
};

const FROM_DISK: Model = Model {
    class: "UpdateWeightFromDiskReqInput",
    function: "update_weights_from_disk",
    line: 1300,
    path: "/update_weights_from_disk",
    fields: &[
        req("model_path", Kind::Str),
        opt("load_format", Kind::OptStr),
        opt("abort_all_requests", Kind::Bool),
        opt("weight_version", Kind::OptStr),
        opt("is_async", Kind::Bool),
        opt("torch_empty_cache", Kind::Bool),
        opt("keep_pause", Kind::Bool),
        opt("recapture_cuda_graph", Kind::Bool),
        opt("token_step", Kind::Int),
        opt("flush_cache", Kind::Bool),
        opt("manifest", Kind::OptDict),
    ],
};

const FROM_DISTRIBUTED: Model = Model {
    class: "UpdateWeightsFromDistributedReqInput",
    function: "update_weights_from_distributed",
    line: 1488,
    path: "/update_weights_from_distributed",
    fields: &[
        req("names", Kind::ListStr),
        req("dtypes", Kind::ListStr),
        req("shapes", Kind::ListListInt),
        opt("group_name", Kind::Str),
        opt("flush_cache", Kind::Bool),
        opt("abort_all_requests", Kind::Bool),
        opt("weight_version", Kind::OptStr),
        opt("load_format", Kind::OptStr),
        opt("selector", Kind::Lit(SELECTORS)),
        opt("torch_empty_cache", Kind::Bool),
    ],
};

const FROM_TENSOR: Model = Model {
    class: "UpdateWeightsFromTensorReqInput",
    function: "update_weights_from_tensor",
    line: 1436,
    path: "/update_weights_from_tensor",
    fields: &[
        req("serialized_named_tensors", Kind::ListB64),
        opt("load_format", Kind::OptStr),
        opt("flush_cache", Kind::Bool),
        opt("abort_all_requests", Kind::Bool),
        opt("weight_version", Kind::OptStr),
        opt("selector", Kind::Lit(SELECTORS)),
        opt("torch_empty_cache", Kind::Bool),
    ],
};

const INIT_GROUP: Model = Model {
    class: "InitWeightsUpdateGroupReqInput",
    function: "init_weights_update_group",
    line: 1404,
    path: "/init_weights_update_group",
    fields: &[
        req("master_address", Kind::Str),
        req("master_port", Kind::Int),
        req("rank_offset", Kind::Int),
        req("world_size", Kind::Int),
        opt("group_name", Kind::Str),
        opt("backend", Kind::Str),
    ],
};

const SET_VERSION: Model = Model {
    class: "UpdateWeightVersionReqInput",
    function: "update_weight_version",
    line: 1527,
    path: "/update_weight_version",
    fields: &[
        req("new_version", Kind::Str),
        opt("abort_all_requests", Kind::Bool),
    ],
};

// === the parsers ===

fn parse_pause(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let obj = validate(&PAUSE, body)?;
    let mode = match obj.get("mode").and_then(Value::as_str) {
        Some("retract") => PauseMode::Retract,
        Some("in_place") => PauseMode::InPlace,
        _ => PauseMode::Abort,
    };
    Ok(ControlAction::Pause { mode })
}

fn parse_continue(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    validate(&CONTINUE, body)?;
    Ok(ControlAction::Resume)
}

fn weight_version(obj: &Map<String, Value>) -> Option<String> {
    obj.get("weight_version")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn parse_update_from_disk(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let obj = validate(&FROM_DISK, body)?;
    Ok(ControlAction::UpdateWeights {
        version: weight_version(&obj),
    })
}

fn parse_update_from_distributed(
    _query: &str,
    body: &[u8],
) -> Result<ControlAction, NativeResponse> {
    let obj = validate(&FROM_DISTRIBUTED, body)?;
    Ok(ControlAction::UpdateWeights {
        version: weight_version(&obj),
    })
}

fn parse_update_from_tensor(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let obj = validate(&FROM_TENSOR, body)?;
    Ok(ControlAction::UpdateWeights {
        version: weight_version(&obj),
    })
}

fn parse_init_group(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    validate(&INIT_GROUP, body)?;
    Ok(ControlAction::InitWeightsGroup)
}

fn parse_set_version(_query: &str, body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let obj = validate(&SET_VERSION, body)?;
    let version = obj
        .get("new_version")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(ControlAction::SetWeightVersion { version })
}

/// `flush_cache(timeout: float = Query(0.0, ge=0.0))`; the body is not read.
fn parse_flush_cache(query: &str, _body: &[u8]) -> Result<ControlAction, NativeResponse> {
    let Some(raw) = query_value(query, "timeout") else {
        return Ok(ControlAction::FlushCache);
    };
    let loc = vec![Loc::Key("query".into()), Loc::Key("timeout".into())];
    let input = str_repr(&raw);
    let error = match py_float(&raw) {
        None => Some(PyError::new(
            "float_parsing",
            loc,
            "Input should be a valid number, unable to parse string as a number",
            input,
        )),
        // `nan >= 0` is false, so pydantic refuses NaN too.
        Some(x) if x.is_nan() || x < 0.0 => Some(
            PyError::new(
                "greater_than_equal",
                loc,
                "Input should be greater than or equal to 0",
                input,
            )
            .ctx("{'ge': 0.0}"),
        ),
        Some(_) => None,
    };
    match error {
        None => Ok(ControlAction::FlushCache),
        Some(e) => Err(refusal(
            &[e],
            &Endpoint {
                function: "flush_cache",
                line: 1025,
                path: "/flush_cache",
            },
        )),
    }
}

/// Python's `float(str)` as pydantic applies it to a query value: surrounding whitespace,
/// `_` between digits, `inf`/`infinity`/`nan` in any case.
fn py_float(raw: &str) -> Option<f64> {
    let t = raw.trim();
    let bytes = t.as_bytes();
    let underscores_ok = bytes.iter().enumerate().all(|(i, b)| {
        *b != b'_'
            || (i > 0
                && i + 1 < bytes.len()
                && bytes[i - 1].is_ascii_digit()
                && bytes[i + 1].is_ascii_digit())
    });
    if !underscores_ok {
        return None;
    }
    let t = t.replace('_', "");
    let lower = t.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if unsigned.len() + 1 < lower.len() {
        return None;
    }
    match unsigned {
        "inf" | "infinity" | "nan" => lower.parse::<f64>().ok(),
        _ if unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
            lower.parse::<f64>().ok()
        }
        _ => None,
    }
}

// === pydantic's validation, as SGLang's structs get it ===

/// One element of a pydantic error location.
#[derive(Debug, Clone, PartialEq)]
enum Loc {
    Key(String),
    Idx(usize),
}

/// One pydantic error dict, rendered as Python prints it.
#[derive(Debug, Clone, PartialEq)]
struct PyError {
    kind: &'static str,
    loc: Vec<Loc>,
    msg: String,
    /// `repr()` of the input.
    input: String,
    /// `repr()` of `ctx`, when pydantic sets one.
    ctx: Option<String>,
}

impl PyError {
    fn new(kind: &'static str, loc: Vec<Loc>, msg: impl Into<String>, input: String) -> Self {
        Self {
            kind,
            loc,
            msg: msg.into(),
            input,
            ctx: None,
        }
    }

    fn ctx(mut self, ctx: impl Into<String>) -> Self {
        self.ctx = Some(ctx.into());
        self
    }

    fn repr(&self) -> String {
        let mut s = format!("{{'type': {}, 'loc': (", str_repr(self.kind));
        for (i, part) in self.loc.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            match part {
                Loc::Key(k) => s.push_str(&str_repr(k)),
                Loc::Idx(n) => {
                    let _ = write!(s, "{n}");
                }
            }
        }
        if self.loc.len() == 1 {
            s.push(',');
        }
        let _ = write!(
            s,
            "), 'msg': {}, 'input': {}",
            str_repr(&self.msg),
            self.input
        );
        if let Some(ctx) = &self.ctx {
            let _ = write!(s, ", 'ctx': {ctx}");
        }
        s.push('}');
        s
    }
}

/// Where an endpoint is, for FastAPI's endpoint context in `str(exc)`.
struct Endpoint {
    function: &'static str,
    line: u32,
    path: &'static str,
}

/// The package path SGLang's endpoints are defined in.
const HTTP_SERVER_FILE: &str = "sglang/srt/entrypoints/http_server.py";

/// SGLang's 400 for a `RequestValidationError` with `errors`.
fn refusal(errors: &[PyError], at: &Endpoint) -> NativeResponse {
    let reprs: Vec<String> = errors.iter().map(PyError::repr).collect();
    let n = reprs.len();
    let mut exc = format!("{n} validation error{}:\n", if n == 1 { "" } else { "s" });
    for r in &reprs {
        let _ = writeln!(exc, "  {r}");
    }
    let _ = write!(
        exc,
        "\n  File \"{HTTP_SERVER_FILE}\", line {}, in {}\n    POST {}",
        at.line, at.function, at.path
    );
    let message = format!("{} [{}]", exc.trim_end(), reprs.join(", "));
    let body = format!(
        r#"{{"object":"error","message":{},"type":"Bad Request","param":null,"code":400}}"#,
        serde_json::Value::String(message)
    );
    NativeResponse::json(StatusCode::BAD_REQUEST, Bytes::from(body))
}

/// Validate `body` against `model` as FastAPI + pydantic do for SGLang; the object on success.
fn validate(model: &Model, body: &[u8]) -> Result<Map<String, Value>, NativeResponse> {
    let at = Endpoint {
        function: model.function,
        line: model.line,
        path: model.path,
    };
    let body_loc = || vec![Loc::Key("body".into())];
    if body.is_empty() {
        let e = PyError::new("missing", body_loc(), "Field required", "None".into());
        return Err(refusal(&[e], &at));
    }
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(err) => {
            let (msg, pos) = json_decode_error(&err, body);
            let mut loc = body_loc();
            loc.push(Loc::Idx(pos));
            let e = PyError::new("json_invalid", loc, "JSON decode error", "{}".into())
                .ctx(format!("{{'error': {}}}", str_repr(msg)));
            return Err(refusal(&[e], &at));
        }
    };
    let instance = || {
        PyError::new(
            "is_instance_of",
            vec![
                Loc::Key("body".into()),
                Loc::Key(format!("is-instance[{}]", model.class)),
            ],
            format!("Input should be an instance of {}", model.class),
            py_repr(&value),
        )
        .ctx(format!("{{'class': {}}}", str_repr(model.class)))
    };
    let dict_loc = || {
        vec![
            Loc::Key("body".into()),
            Loc::Key(format!("function-after[build_struct(), {}]", model.class)),
        ]
    };
    let obj = match &value {
        Value::Null => {
            let e = PyError::new("missing", body_loc(), "Field required", "None".into());
            return Err(refusal(&[e], &at));
        }
        Value::Object(obj) => obj,
        other => {
            let e = PyError::new(
                "dict_type",
                dict_loc(),
                "Input should be a valid dictionary",
                py_repr(other),
            );
            return Err(refusal(&[instance(), e], &at));
        }
    };
    let mut errors = Vec::new();
    for field in BASE_FIELDS.iter().chain(model.fields) {
        let mut loc = dict_loc();
        loc.push(Loc::Key(field.name.into()));
        match obj.get(field.name) {
            None if field.required => errors.push(PyError::new(
                "missing",
                loc,
                "Field required",
                py_repr(&value),
            )),
            None => {}
            Some(v) => check(field.kind, v, &loc, &mut errors),
        }
    }
    if errors.is_empty() {
        Ok(obj.clone())
    } else {
        errors.insert(0, instance());
        Err(refusal(&errors, &at))
    }
}

fn with(loc: &[Loc], part: Loc) -> Vec<Loc> {
    let mut l = loc.to_vec();
    l.push(part);
    l
}

const STRING_TYPE: (&str, &str) = ("string_type", "Input should be a valid string");
const LIST_TYPE: (&str, &str) = ("list_type", "Input should be a valid list");

/// Append the errors pydantic reports for `v` as a `kind` at `loc`.
fn check(kind: Kind, v: &Value, loc: &[Loc], out: &mut Vec<PyError>) {
    let fail = |(t, m): (&'static str, &'static str)| PyError::new(t, loc.to_vec(), m, py_repr(v));
    match kind {
        Kind::Str => {
            if !v.is_string() {
                out.push(fail(STRING_TYPE));
            }
        }
        Kind::OptStr => {
            if !v.is_string() && !v.is_null() {
                out.push(fail(STRING_TYPE));
            }
        }
        Kind::Bool => {
            if let Err(f) = lax_bool(v) {
                out.push(fail(f));
            }
        }
        Kind::Int => {
            if let Err(f) = lax_int(v) {
                out.push(fail(f));
            }
        }
        Kind::Lit(options) => {
            if !v.as_str().is_some_and(|s| options.contains(&s)) {
                let expected = literal_expected(options);
                out.push(
                    PyError::new(
                        "literal_error",
                        loc.to_vec(),
                        format!("Input should be {expected}"),
                        py_repr(v),
                    )
                    .ctx(format!("{{'expected': {}}}", str_repr(&expected))),
                );
            }
        }
        Kind::OptDict => {
            if !v.is_object() && !v.is_null() {
                out.push(fail(("dict_type", "Input should be a valid dictionary")));
            }
        }
        Kind::ListStr => match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    check(Kind::Str, item, &with(loc, Loc::Idx(i)), out);
                }
            }
            _ => out.push(fail(LIST_TYPE)),
        },
        Kind::ListListInt => match v {
            Value::Array(rows) => {
                for (i, row) in rows.iter().enumerate() {
                    let row_loc = with(loc, Loc::Idx(i));
                    match row {
                        Value::Array(items) => {
                            for (j, item) in items.iter().enumerate() {
                                check(Kind::Int, item, &with(&row_loc, Loc::Idx(j)), out);
                            }
                        }
                        other => out.push(PyError::new(
                            LIST_TYPE.0,
                            row_loc,
                            LIST_TYPE.1,
                            py_repr(other),
                        )),
                    }
                }
            }
            _ => out.push(fail(LIST_TYPE)),
        },
        Kind::ListB64 => {
            // `Base64Bytes._decode_value` runs first on the whole value: a string (or a string
            // in a list) that is not base64 raises one ValueError for the field.
            let bad_b64 = |s: &str| B64.decode(s).is_err();
            let invalid = match v {
                Value::String(s) => bad_b64(s),
                Value::Array(items) => items.iter().any(|i| i.as_str().is_some_and(bad_b64)),
                _ => false,
            };
            if invalid {
                out.push(
                    PyError::new(
                        "value_error",
                        loc.to_vec(),
                        "Value error, Expected base64-encoded bytes",
                        py_repr(v),
                    )
                    .ctx("{'error': ValueError('Expected base64-encoded bytes')}"),
                );
                return;
            }
            match v {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if !item.is_string() {
                            out.push(PyError::new(
                                "bytes_type",
                                with(loc, Loc::Idx(i)),
                                "Input should be a valid bytes",
                                py_repr(item),
                            ));
                        }
                    }
                }
                _ => out.push(fail(LIST_TYPE)),
            }
        }
    }
}

/// Python's `base64.b64decode(s, validate=True)`: the standard alphabet, padding required,
/// non-zero trailing bits accepted.
const B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
);

/// Pydantic's `'a', 'b' or 'c'` for a `Literal`.
fn literal_expected(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| str_repr(o)).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

type Fail = (&'static str, &'static str);

/// Pydantic's lax `bool` (Python mode).
fn lax_bool(v: &Value) -> Result<bool, Fail> {
    const PARSING: Fail = (
        "bool_parsing",
        "Input should be a valid boolean, unable to interpret input",
    );
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x == 0.0 {
                Ok(false)
            } else if x == 1.0 {
                Ok(true)
            } else {
                Err(PARSING)
            }
        }
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(true),
            _ => Err(PARSING),
        },
        _ => Err(("bool_type", "Input should be a valid boolean")),
    }
}

/// Pydantic's lax `int` (Python mode).
fn lax_int(v: &Value) -> Result<(), Fail> {
    match v {
        Value::Bool(_) => Ok(()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        Value::Number(n) => {
            if n.as_f64().is_some_and(|x| x.fract() == 0.0) {
                Ok(())
            } else {
                Err((
                    "int_from_float",
                    "Input should be a valid integer, got a number with a fractional part",
                ))
            }
        }
        Value::String(s) => {
            let t = s.trim();
            let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
            let ok = !digits.is_empty()
                && !digits.starts_with('_')
                && !digits.ends_with('_')
                && !digits.contains("__")
                && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_');
            if ok {
                Ok(())
            } else {
                Err((
                    "int_parsing",
                    "Input should be a valid integer, unable to parse string as an integer",
                ))
            }
        }
        _ => Err(("int_type", "Input should be a valid integer")),
    }
}

/// Python `repr()` of what `json.loads` builds from `v`.
fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(v, &mut out);
    out
}

fn write_repr(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&number_repr(n)),
        Value::String(s) => out.push_str(&str_repr(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&str_repr(k));
                out.push_str(": ");
                write_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// What Python's `json.loads` reports for bytes serde refused: its short message and the
/// character offset.
fn json_decode_error(err: &serde_json::Error, body: &[u8]) -> (&'static str, usize) {
    let text = err.to_string();
    let msg = if text.contains("trailing characters") {
        "Extra data"
    } else if text.contains("EOF while parsing a string") || text.contains("control character") {
        "Unterminated string starting at"
    } else if text.contains("key must be a string") {
        "Expecting property name enclosed in double quotes"
    } else if text.contains("expected `:`") {
        "Expecting ':' delimiter"
    } else if text.contains("expected `,` or `}`") || text.contains("expected `,` or `]`") {
        "Expecting ',' delimiter"
    } else {
        "Expecting value"
    };
    let byte = if err.classify() == serde_json::error::Category::Eof {
        body.len()
    } else {
        let (line, column) = (err.line().max(1), err.column().max(1));
        let line_start = if line > 1 {
            body.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(line - 2)
                .map_or(0, |(i, _)| i + 1)
        } else {
            0
        };
        let mut at = (line_start + column - 1).min(body.len());
        if msg == "Expecting value" {
            // serde fails inside a bad literal (`nul`, `nope`); Python reports where it starts.
            while at > 0 && body[at - 1].is_ascii_alphabetic() {
                at -= 1;
            }
        }
        at
    };
    let pos = String::from_utf8_lossy(&body[..byte]).chars().count();
    (msg, pos)
}

#[cfg(test)]
mod tests;
