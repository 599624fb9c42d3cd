//! The `POST /generate` bodies sent for one [`EngineRequest`].
//!
//! - **Native SGLang body** (`request.native.format == "sglang"`): the client's item body, every
//!   key kept in the client's order, serialized without an intermediate copy, with surgical edits:
//!   `rid` = the private dispatch id (never the client's rid), `stream: true`, `input_ids` = the
//!   request's token ids (the one list of this item), `text` and `input_embeds` dropped (token-in:
//!   SGLang would otherwise prefer `text` over `input_ids`), batch-shaped per-item keys (a list where
//!   an item holds a scalar) replaced by the typed value or dropped, `routed_dp_rank` added from
//!   the routing hints when the body names no DP rank, and the router-owned P/D bootstrap fields
//!   from `request.pd` (see below). Keys the body lacks are appended at the end.
//! - **Typed body** (any other format, e.g. a vLLM client on an SGLang engine, or a request
//!   without a native body object): built from the typed request only, constraints included
//!   (`logit_bias` with string ids; the grammar as `json_schema` / `regex` / `ebnf` /
//!   `structural_tag`). What SGLang cannot produce is refused with [`EngineError::unsupported`]
//!   before anything is sent: a request with [`EngineRequest::native_only`] keys (named, by the
//!   client's spelling, in the message), `kv_transfer_params`, routed experts or sampling masks
//!   the engine cannot report.
//! - **Parallel samples** (`sampling.n > 1`): SGLang's own fan-out gives each copy a fresh uuid rid
//!   that an `/abort_request` for the dispatch id would not match (`spec/sglang-native.md` §5.2),
//!   so the client sends `n` requests with `n = 1`, rids `<dispatch id>-<i>`: one abort with the
//!   dispatch id (SGLang matches rid prefixes) reaches all of them, and dispatch ids are
//!   prefix-free among in-flight requests.
//! - **P/D** (`request.pd` with bootstrap coordinates, `spec/sglang-native.md` §13): both legs
//!   get the same body plus `bootstrap_host` (a string), `bootstrap_port` (an integer or `null`)
//!   and `bootstrap_room` (an integer, written from the `u64` itself: never through `f64`), in
//!   native and typed bodies alike; nothing else changes (SGLang's prefill server limits itself).
//!   Split parallel samples need one room each: sample `i` gets `(room + i) mod 2^63`, the same
//!   on both legs, since both legs split the same `n` the same way.

use genfront_protocol::{Bootstrap, EngineError, EngineInfo, EngineRequest, StructuredOutput};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::FORMAT_NAME;

/// P/D bootstrap keys a router owns (`spec/sglang-native.md` §13.2): a P/D leg's native body
/// never forwards the client's (the format validates a client's host/port/room triple as SGLang
/// does and it passes through on an aggregated engine; on a P/D leg the router's values replace
/// it, as smg injects them).
const BOOTSTRAP_KEYS: &[&str] = &[
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "bootstrap_pair_key",
    "decode_tp_size",
    "disagg_prefill_dp_rank",
];

/// The bootstrap members written for dispatch `i` of a P/D leg.
#[derive(Debug, Clone, Copy)]
struct BootstrapFields<'a> {
    /// `bootstrap_host`.
    host: &'a str,
    /// `bootstrap_port` (`null` when unknown).
    port: Option<u16>,
    /// `bootstrap_room` of this dispatch.
    room: u64,
}

/// The largest room SGLang accepts (a signed 64-bit room id).
const MAX_ROOM: u64 = i64::MAX as u64;

impl<'a> BootstrapFields<'a> {
    /// The fields of split sample `i` (`(room + i) mod 2^63`; sample 0 keeps the room).
    fn of(b: &'a Bootstrap, i: u32) -> Self {
        Self {
            host: &b.host,
            port: b.port,
            room: b.room.wrapping_add(u64::from(i)) & MAX_ROOM,
        }
    }

    /// Write the three members (`bootstrap_host`, `bootstrap_port`, `bootstrap_room`).
    fn write(self, out: &mut Vec<u8>, first: &mut bool) {
        member(out, first, "bootstrap_host", self.host);
        member(out, first, "bootstrap_port", &self.port);
        member(out, first, "bootstrap_room", &self.room);
    }

    /// The three members as a JSON map (typed bodies).
    fn insert(self, body: &mut Map<String, Value>) {
        body.insert("bootstrap_host".into(), json!(self.host));
        body.insert("bootstrap_port".into(), json!(self.port));
        body.insert("bootstrap_room".into(), json!(self.room));
    }
}

/// Keys whose per-item value is a scalar (a list is the batch shape).
const SCALAR_ITEM_KEYS: &[&str] = &[
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "return_sampling_mask",
    "lora_path",
    "custom_logit_processor",
    "extra_key",
    "cache_salt",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "bootstrap_pair_key",
    "decode_tp_size",
    "return_hidden_states",
];

/// One SGLang request of an engine request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dispatch {
    /// The `rid` sent.
    pub rid: String,
    /// The choice index its outputs carry.
    pub index: u32,
    /// The JSON body.
    pub body: Vec<u8>,
    /// Ask SGLang for its unary answer (`"stream": false`): the client itself asked for a unary
    /// answer, so one native body is cheaper than a stream (cumulative frames grow with every
    /// token) and is exactly what SGLang would have answered.
    pub unary: bool,
}

/// What the engine can produce beyond the basics, for typed bodies.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Caps {
    /// Routed experts can be decoded into typed rows (the MoE shape is known).
    pub typed_routed_experts: bool,
    /// The engine returns sampling masks.
    pub sampling_mask: bool,
}

/// The SGLang requests for `request` (one per parallel sample), with the dispatch `rid` of the
/// whole request (the abort key).
///
/// # Errors
/// [`EngineError::unsupported`] for a typed request asking what this engine cannot produce.
pub(crate) fn plan(
    request: &EngineRequest,
    rid: &str,
    info: &EngineInfo,
    caps: Caps,
) -> Result<Vec<Dispatch>, EngineError> {
    let n = request.sampling.n.max(1);
    // A native SGLang body is forwarded; without one (another format, or a request built
    // without its native body) the body is rebuilt from the typed request.
    let native_obj = match &request.native.body {
        Value::Object(obj) if request.native.format == FORMAT_NAME => Some(obj),
        _ => {
            check_typed(request, caps)?;
            None
        }
    };
    // A unary SGLang client gets SGLang's unary call (the typed flag, not the raw body, decides).
    let unary = native_obj.is_some() && !request.output.stream;
    let bootstrap = request.pd.as_ref().and_then(|pd| pd.bootstrap.as_ref());
    (0..n)
        .map(|i| {
            let child = if n == 1 {
                rid.to_owned()
            } else {
                format!("{rid}-{i}")
            };
            let fields = bootstrap.map(|b| BootstrapFields::of(b, i));
            let body = match native_obj {
                Some(obj) => native_body(obj, request, &child, n > 1, !unary, fields),
                None => typed_body(request, &child, info, fields),
            };
            Ok(Dispatch {
                rid: child,
                index: i,
                body,
                unary,
            })
        })
        .collect()
}

/// Refuse what an SGLang engine cannot produce for a typed (non-SGLang) request.
fn check_typed(request: &EngineRequest, caps: Caps) -> Result<(), EngineError> {
    let format = request.native.format.as_str();
    if !request.native_only.is_empty() {
        return Err(native_only_error(request));
    }
    if request.handoff.is_some() {
        return Err(EngineError::unsupported(format!(
            "kv_transfer_params (P/D hand-off parameters of the {format} format) cannot be served by an SGLang engine."
        )));
    }
    if request.output.routed_experts && !caps.typed_routed_experts {
        return Err(EngineError::unsupported(
            "Routed experts are not available from this SGLang engine for this API: its MoE shape (layers, experts per token) is not configured.",
        ));
    }
    if request.output.sampling_mask && !caps.sampling_mask {
        return Err(EngineError::unsupported(
            "Sampling masks are not supported by this SGLang engine.",
        ));
    }
    Ok(())
}

/// The refusal of a request whose native keys have no SGLang counterpart
/// ([`EngineRequest::native_only`]): every such key, by the client's own name.
pub(crate) fn native_only_error(request: &EngineRequest) -> EngineError {
    let keys = request.native_only.join(", ");
    let format = request.native.format.as_str();
    let (verb, it) = if request.native_only.len() == 1 {
        ("has", "it")
    } else {
        ("have", "them")
    };
    EngineError::unsupported(format!(
        "{keys} {verb} no equivalent on the SGLang engine serving this request, so genfront \
         cannot honour {it}; remove {it} or send the request to a {format} engine."
    ))
}

// === native body ===

/// Append `"key":value`, with a separator after the first member.
fn member<T: Serialize + ?Sized>(out: &mut Vec<u8>, first: &mut bool, key: &str, value: &T) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Append `"key":[id,…]`, like [`member`] with a `&[u32]` but without serde's per-id
/// `write_all` (on a 185k-id prompt those small copies and the formatter were a sixth of the
/// frontend's CPU): each id's decimal digits are stored straight into `out`. The bytes are
/// exactly serde_json's compact form (`[1,22,333]`, `[]` when empty).
fn ids_member(out: &mut Vec<u8>, first: &mut bool, key: &str, ids: &[u32]) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    write_ids(out, ids);
}

/// Append `ids` as a compact JSON list of decimal integers.
///
/// The digits go into a stack buffer two at a time (a 200-byte pair table, as `itoa` does) and
/// the buffer into `out` once per few hundred ids, so the loop has no per-id capacity check or
/// small copy. A short list (a chat-sized prompt) gets a buffer sized for it: zeroing the 4 KiB
/// one was most of the cost of writing 32 ids.
fn write_ids(out: &mut Vec<u8>, ids: &[u32]) {
    /// Ids that always fit the small buffer (11 bytes each at most).
    const SHORT: usize = 64;
    if ids.len() <= SHORT {
        write_ids_in::<{ SHORT * 11 }>(out, ids);
    } else {
        write_ids_in::<4096>(out, ids);
    }
}

/// [`write_ids`] through a stack buffer of `N` bytes.
fn write_ids_in<const N: usize>(out: &mut Vec<u8>, ids: &[u32]) {
    /// `"00" ..= "99"`.
    const PAIRS: &[u8; 200] = b"\
        0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    /// Room for one id (10 digits) and its separator.
    const ID_MAX: usize = 11;
    let mut buf = [0u8; N];
    let mut pos = 0;
    out.reserve(ids.len().saturating_mul(6).saturating_add(2));
    out.push(b'[');
    for (i, &id) in ids.iter().enumerate() {
        if pos > buf.len() - ID_MAX {
            out.extend_from_slice(&buf[..pos]);
            pos = 0;
        }
        if i > 0 {
            buf[pos] = b',';
            pos += 1;
        }
        let len = decimal_len(id);
        let mut end = pos + len;
        let mut n = id;
        while n >= 100 {
            // Below 100, so the index stays inside `PAIRS`.
            let pair = (n % 100) as usize * 2;
            n /= 100;
            end -= 2;
            buf[end] = PAIRS[pair];
            buf[end + 1] = PAIRS[pair + 1];
        }
        if n >= 10 {
            let pair = n as usize * 2;
            buf[end - 2] = PAIRS[pair];
            buf[end - 1] = PAIRS[pair + 1];
        } else {
            // A single digit: `n` is below 10, so the cast keeps it.
            buf[end - 1] = b'0' + n as u8;
        }
        pos += len;
    }
    out.extend_from_slice(&buf[..pos]);
    out.push(b']');
}

/// Number of decimal digits of `n` (1 for 0).
fn decimal_len(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The typed value of a per-item scalar key, to replace a batch-shaped list.
fn typed_scalar(request: &EngineRequest, key: &str) -> Option<Value> {
    let out = &request.output;
    let return_logprob = out.logprobs.is_some() || out.prompt_logprobs.is_some();
    match key {
        "return_logprob" => Some(Value::Bool(return_logprob)),
        "logprob_start_len" => Some(Value::from(
            out.prompt_logprobs
                .as_ref()
                .map_or(-1, |p| i64::from(p.start)),
        )),
        "top_logprobs_num" => Some(Value::from(top_logprobs_num(request))),
        "return_sampling_mask" => Some(Value::Bool(out.sampling_mask)),
        "lora_path" => request.routing.lora.clone().map(Value::String),
        "extra_key" | "cache_salt" => request.routing.cache_salt.clone().map(Value::String),
        _ => None,
    }
}

/// The item body with the dispatch edits (see the module docs).
fn native_body(
    obj: &Map<String, Value>,
    request: &EngineRequest,
    rid: &str,
    split: bool,
    stream: bool,
    bootstrap: Option<BootstrapFields<'_>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + request.token_ids.len() * 7);
    out.push(b'{');
    let first = &mut true;
    let (mut has_rid, mut has_stream, mut has_ids, mut has_dp) = (false, false, false, false);
    for (key, value) in obj {
        let k = key.as_str();
        match k {
            "rid" => {
                has_rid = true;
                member(&mut out, first, k, rid);
            }
            "stream" => {
                has_stream = true;
                member(&mut out, first, k, &stream);
            }
            "input_ids" => {
                has_ids = true;
                ids_member(&mut out, first, k, &request.token_ids);
            }
            // A text prompt (no ids: the format let it through because the engine has a
            // tokenizer) is the engine's to tokenize; otherwise the ids replace it.
            "text" if request.token_ids.is_empty() && !obj.contains_key("input_ids") => {
                has_ids = true;
                member(&mut out, first, k, value);
            }
            "text" | "input_embeds" => {}
            "sampling_params" if split => match value {
                Value::Object(sp) => {
                    let mut sp = sp.clone();
                    sp.insert("n".to_owned(), Value::from(1));
                    member(&mut out, first, k, &sp);
                }
                v => member(&mut out, first, k, v),
            },
            "routed_dp_rank" | "data_parallel_rank" => {
                has_dp = true;
                member(&mut out, first, k, value);
            }
            // Router-owned on a P/D leg: the client's is dropped, the leg's written below.
            k if bootstrap.is_some() && BOOTSTRAP_KEYS.contains(&k) => {}
            k if SCALAR_ITEM_KEYS.contains(&k) && value.is_array() => {
                if let Some(v) = typed_scalar(request, k) {
                    member(&mut out, first, k, &v);
                }
            }
            "token_ids_logprob" if matches!(value, Value::Array(l) if matches!(l.first(), Some(Value::Array(_)))) =>
            {
                member(&mut out, first, k, &request.output.token_ids_logprobs);
            }
            _ => member(&mut out, first, k, value),
        }
    }
    if !has_rid {
        member(&mut out, first, "rid", rid);
    }
    if !has_ids {
        ids_member(&mut out, first, "input_ids", &request.token_ids);
    }
    if !has_stream {
        member(&mut out, first, "stream", &stream);
    }
    if !has_dp && let Some(rank) = request.routing.dp_rank {
        member(&mut out, first, "routed_dp_rank", &rank);
    }
    if let Some(b) = bootstrap {
        b.write(&mut out, first);
    }
    out.push(b'}');
    out
}

// === typed body ===

/// SGLang's `top_logprobs_num`: one count for both sides, so the larger of the two (each side is
/// cut back to its own count when decoded).
fn top_logprobs_num(request: &EngineRequest) -> u32 {
    let out = &request.output;
    out.logprobs
        .unwrap_or(0)
        .max(out.prompt_logprobs.as_ref().map_or(0, |p| p.top_k))
}

/// A body built from the typed request.
fn typed_body(
    request: &EngineRequest,
    rid: &str,
    info: &EngineInfo,
    bootstrap: Option<BootstrapFields<'_>>,
) -> Vec<u8> {
    let stop = &request.stop;
    let s = &request.sampling;
    let prompt_len = u32::try_from(request.token_ids.len()).unwrap_or(u32::MAX);
    let mut sp = Map::new();
    // SGLang's default is 128 new tokens; the contract's `None` is "up to the context length".
    let max_new = stop
        .max_tokens
        .unwrap_or_else(|| info.max_context_len.saturating_sub(prompt_len));
    sp.insert("max_new_tokens".into(), json!(max_new));
    if stop.min_tokens > 0 {
        sp.insert("min_new_tokens".into(), json!(stop.min_tokens));
    }
    if !stop.stop_token_ids.is_empty() {
        sp.insert("stop_token_ids".into(), json!(stop.stop_token_ids));
    }
    if !stop.stop.is_empty() {
        sp.insert("stop".into(), json!(stop.stop));
    }
    if stop.ignore_eos {
        sp.insert("ignore_eos".into(), json!(true));
    }
    let floats = [
        ("temperature", s.temperature),
        ("top_p", s.top_p),
        ("min_p", s.min_p),
        ("frequency_penalty", s.frequency_penalty),
        ("presence_penalty", s.presence_penalty),
        ("repetition_penalty", s.repetition_penalty),
    ];
    for (k, v) in floats {
        if let Some(v) = v {
            sp.insert(k.into(), json!(v));
        }
    }
    if let Some(k) = s.top_k {
        // SGLang: -1 disables top-k; values below 1 other than -1 are invalid.
        sp.insert("top_k".into(), json!(if k < 1 { -1 } else { k }));
    }
    if let Some(seed) = s.seed {
        sp.insert("sampling_seed".into(), json!(seed));
    }
    let c = &request.constraints;
    if !c.logit_bias.is_empty() {
        // SGLang: `Dict[str, float]`, token ids as strings.
        let bias: Map<String, Value> = c
            .logit_bias
            .iter()
            .map(|b| (b.token_id.to_string(), json!(b.bias)))
            .collect();
        sp.insert("logit_bias".into(), Value::Object(bias));
    }
    if let Some(structured) = &c.structured {
        let (key, text) = match structured {
            StructuredOutput::JsonSchema(t) => ("json_schema", t),
            StructuredOutput::Regex(t) => ("regex", t),
            StructuredOutput::Grammar(t) => ("ebnf", t),
            StructuredOutput::StructuralTag(t) => ("structural_tag", t),
        };
        sp.insert(key.into(), json!(text));
    }

    let out = &request.output;
    let mut body = Map::new();
    body.insert("rid".into(), json!(rid));
    body.insert("input_ids".into(), json!(request.token_ids));
    body.insert("sampling_params".into(), Value::Object(sp));
    if out.logprobs.is_some() || out.prompt_logprobs.is_some() {
        body.insert("return_logprob".into(), json!(true));
        let start = out
            .prompt_logprobs
            .as_ref()
            .map_or(-1, |p| i64::from(p.start));
        body.insert("logprob_start_len".into(), json!(start));
        body.insert("top_logprobs_num".into(), json!(top_logprobs_num(request)));
        if !out.token_ids_logprobs.is_empty() {
            body.insert("token_ids_logprob".into(), json!(out.token_ids_logprobs));
        }
    }
    if out.sampling_mask {
        body.insert("return_sampling_mask".into(), json!(true));
    }
    if out.routed_experts {
        body.insert("return_routed_experts".into(), json!(true));
        if out.routed_experts_start > 0 {
            body.insert(
                "routed_experts_start_len".into(),
                json!(out.routed_experts_start),
            );
        }
    }
    body.insert("stream".into(), json!(true));
    let r = &request.routing;
    if let Some(rank) = r.dp_rank {
        body.insert("routed_dp_rank".into(), json!(rank));
    }
    // The client's own priority, in its API's semantics; 0 (every API's default) is not sent, so
    // an SGLang server without priority scheduling is not asked for it.
    if let Some(p) = r.priority.filter(|p| *p != 0) {
        body.insert("priority".into(), json!(p));
    }
    if let Some(lora) = &r.lora {
        body.insert("lora_path".into(), json!(lora));
    }
    if let Some(salt) = &r.cache_salt {
        // `extra_key` is SGLang's long-standing prefix-cache namespace field.
        body.insert("extra_key".into(), json!(salt));
    }
    if let Some(b) = bootstrap {
        b.insert(&mut body);
    }
    serde_json::to_vec(&Value::Object(body)).unwrap_or_default()
}

#[cfg(test)]
mod tests;
