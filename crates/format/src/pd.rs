//! The **merge-rule engine** for prefill/decode answers: each format declares, per field, how the
//! outputs of one leg combine (`fold`) and how the prefill leg combines with the decode leg
//! (`legs`), in a JSON rules file compiled into the format crate. [`RuleMerge`] applies them
//! ([`genfront_protocol::PdMerge`]).
//!
//! Fields are JSON pointers into [`EngineOutput`]'s contract shape: `/token_ids`, `/logprobs`,
//! `/prompt_logprobs`, `/routed_experts`, `/sampling_mask`, `/finish_reason`,
//! `/usage/prompt_tokens`, `/usage/completion_tokens`, `/usage/cached_tokens`, `/handoff`,
//! `/index`; and `/engine_data/<native pointer>` for fields of the engine's native frame
//! (`/engine_data/*` is the default for native fields without a rule of their own).
//!
//! | `fold` (within a leg) | meaning |
//! |---|---|
//! | `delta` | each output carries only what is new: concatenate (lists, expert rows) |
//! | `attempt` | each output carries the whole value so far: the last one wins |
//! | `first` | sent once: the first one wins |
//!
//! | `legs` (prefill × decode) | meaning |
//! |---|---|
//! | `decode` | the decode leg's own value (the prefill's is dropped) |
//! | `prompt` | the prefill leg's value (it ran the prompt): on a choice's first decode output for `first`/`delta` folds, on every output for `attempt` |
//! | `rows` | row concatenation: the prefill's rows (the prompt part), then decode's, on a choice's first decode output |
//!
//! A format that extends another (a codec over SGLang) lists `"extends": "<format>"` and only the
//! fields it adds or changes ([`MergeRules::extend`]).

use std::collections::BTreeMap;

use base64::Engine as _;
use genfront_protocol::{EngineOutput, PdMerge, RoutedExperts, Usage};
use serde::Deserialize;
use serde_json::Value;

/// How one leg's outputs combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fold {
    /// Concatenate.
    Delta,
    /// Last wins.
    Attempt,
    /// First wins.
    First,
}

/// How the prefill leg combines with the decode leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Legs {
    /// Decode's own.
    Decode,
    /// From the prefill leg.
    Prompt,
    /// Prefill rows, then decode rows.
    Rows,
}

/// One field's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct FieldRule {
    /// Within a leg.
    pub fold: Fold,
    /// Across legs.
    pub legs: Legs,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    format: String,
    #[serde(default)]
    extends: Option<String>,
    rules: BTreeMap<String, FieldRule>,
}

/// The contract fields every rules set must cover (after `extends`).
pub const CONTRACT_FIELDS: &[&str] = &[
    "/index",
    "/token_ids",
    "/logprobs",
    "/prompt_logprobs",
    "/routed_experts",
    "/sampling_mask",
    "/finish_reason",
    "/usage/prompt_tokens",
    "/usage/completion_tokens",
    "/usage/cached_tokens",
    "/handoff",
    "/engine_data/*",
];

/// A format's declared merge rules.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeRules {
    /// The format they belong to.
    pub format: String,
    /// The format they extend, if any.
    pub extends: Option<String>,
    /// Field pointer → rule.
    pub rules: BTreeMap<String, FieldRule>,
}

impl MergeRules {
    /// Parse a rules file (see the module docs).
    ///
    /// # Errors
    /// Not JSON of that shape, an unknown `fold`/`legs`, or (for a set that extends nothing) a
    /// contract field without a rule.
    pub fn parse(text: &str) -> Result<Self, String> {
        let f: RulesFile = serde_json::from_str(text).map_err(|e| format!("merge rules: {e}"))?;
        let rules = Self {
            format: f.format,
            extends: f.extends,
            rules: f.rules,
        };
        for k in rules.rules.keys() {
            if !k.starts_with("/engine_data/") && !CONTRACT_FIELDS.contains(&k.as_str()) {
                return Err(format!("merge rules: `{k}` is not a contract field"));
            }
        }
        if rules.extends.is_none() {
            rules.check_complete()?;
        }
        Ok(rules)
    }

    /// `self` extended by `ext` (its rules win).
    ///
    /// # Errors
    /// `ext` does not extend `self`'s format.
    pub fn extend(&self, ext: &MergeRules) -> Result<MergeRules, String> {
        if ext.extends.as_deref() != Some(self.format.as_str()) {
            return Err(format!(
                "merge rules of `{}` do not extend `{}`",
                ext.format, self.format
            ));
        }
        let mut rules = self.rules.clone();
        rules.extend(ext.rules.iter().map(|(k, v)| (k.clone(), *v)));
        Ok(MergeRules {
            format: ext.format.clone(),
            extends: ext.extends.clone(),
            rules,
        })
    }

    /// Every contract field has a rule.
    ///
    /// # Errors
    /// The first field without one.
    pub fn check_complete(&self) -> Result<(), String> {
        for f in CONTRACT_FIELDS {
            if !self.rules.contains_key(*f) {
                return Err(format!(
                    "merge rules of `{}`: no rule for `{f}`",
                    self.format
                ));
            }
        }
        Ok(())
    }

    /// The rule for `field` (a native field falls back to `/engine_data/*`).
    pub fn rule(&self, field: &str) -> FieldRule {
        self.rules
            .get(field)
            .or_else(|| {
                field
                    .starts_with("/engine_data/")
                    .then(|| self.rules.get("/engine_data/*"))
                    .flatten()
            })
            .copied()
            .unwrap_or(FieldRule {
                fold: Fold::Attempt,
                legs: Legs::Decode,
            })
    }

    /// Whether `field` has a rule of its own or a default (for coverage tests).
    pub fn covers(&self, field: &str) -> bool {
        self.rules.contains_key(field)
            || (field.starts_with("/engine_data/") && self.rules.contains_key("/engine_data/*"))
    }
}

/// A [`PdMerge`] that applies [`MergeRules`].
#[derive(Debug, Clone)]
pub struct RuleMerge {
    rules: MergeRules,
}

impl RuleMerge {
    /// A merge by `rules`.
    pub fn new(rules: MergeRules) -> Self {
        Self { rules }
    }

    /// The rules.
    pub fn rules(&self) -> &MergeRules {
        &self.rules
    }
}

fn fold_opt<T: Clone>(
    items: impl Iterator<Item = Option<T>>,
    fold: Fold,
    concat: impl Fn(&mut T, T),
) -> Option<T> {
    let mut acc: Option<T> = None;
    for v in items.flatten() {
        acc = match (acc, fold) {
            (None, _) => Some(v),
            (Some(a), Fold::First) => Some(a),
            (Some(_), Fold::Attempt) => Some(v),
            (Some(mut a), Fold::Delta) => {
                concat(&mut a, v);
                Some(a)
            }
        };
    }
    acc
}

fn concat_rows(a: &mut RoutedExperts, b: RoutedExperts) {
    if a.num_layers == b.num_layers && a.top_k == b.top_k {
        a.ids.extend_from_slice(&b.ids);
    } else {
        // Inconsistent shapes: nothing trustworthy to pass on.
        a.ids.clear();
    }
}

/// Whether a decode leg's rows (`decode_len` units) cover the whole sequence rather than only
/// its own part, given the prefill's `prefill_len` units for the prompt. SGLang's decode worker
/// reports `[0, seqlen - 1)` like any worker (`routed_experts_capturer.get_routed_experts` slices
/// `[: seqlen - 1]`), with the prompt rows it never ran invalid, so its row count is
/// `prompt + completion - 1`; the prefill's rows (`prompt`, or `prompt - 1` when it produced no
/// output token) then give the row width.
fn covers_whole_sequence(prefill_len: usize, decode_len: usize, usage: Option<&Usage>) -> bool {
    let Some(u) = usage else { return false };
    let (prompt, completion) = (u.prompt_tokens as usize, u.completion_tokens as usize);
    if prompt == 0 || prefill_len == 0 {
        return false;
    }
    // With no output token (`max_new_tokens: 0`) a worker reports the prompt's rows only.
    let whole = if completion == 0 {
        prompt
    } else {
        prompt + completion - 1
    };
    [prompt, prompt - 1]
        .into_iter()
        .filter(|&k| k > 0 && prefill_len.is_multiple_of(k))
        .any(|k| decode_len == prefill_len / k * whole)
}

/// Without usage counts to go by (vLLM unary items carry none), a decode blob at least as long as
/// the prefill's whose first `prefill_len` units are all zero is the whole sequence with the prompt
/// part it never computed zero-filled (what vLLM decode legs report).
fn zero_prompt_part<T: Default + PartialEq>(
    prefill_len: usize,
    b: &[T],
    usage: Option<&Usage>,
) -> bool {
    let zero = T::default();
    usage.is_none()
        && prefill_len > 0
        && b.len() >= prefill_len
        && b[..prefill_len].iter().all(|v| *v == zero)
}

/// Prefill rows `a`, then decode rows `b`: when `b` covers the whole sequence (see
/// [`covers_whole_sequence`]) its first `a.len()` units are the prompt rows it never computed
/// and are replaced by `a` (a splice); otherwise `b` holds only decode rows and is appended.
fn splice_rows<T: Clone + Default + PartialEq>(a: &mut Vec<T>, b: &[T], usage: Option<&Usage>) {
    if covers_whole_sequence(a.len(), b.len(), usage) || zero_prompt_part(a.len(), b, usage) {
        a.extend_from_slice(&b[a.len()..]);
    } else {
        a.extend_from_slice(b);
    }
}

/// Base64 of little-endian int32 rows: row concatenation is byte concatenation (spliced as in
/// [`splice_rows`] when the decode blob covers the whole sequence). `None` when either side is
/// not valid base64 of whole int32s (a broken blob is omitted, never passed on).
fn concat_b64_rows(a: &str, b: &str, usage: Option<&Usage>) -> Option<String> {
    let e = base64::engine::general_purpose::STANDARD;
    let mut x = e.decode(a).ok()?;
    let y = e.decode(b).ok()?;
    if x.starts_with(NPY_MAGIC) || y.starts_with(NPY_MAGIC) {
        return concat_npy_rows(&x, &y, usage).map(|v| e.encode(v));
    }
    if x.len() % 4 != 0 || y.len() % 4 != 0 {
        return None;
    }
    splice_rows(&mut x, &y, usage);
    Some(e.encode(x))
}

/// The `.npy` magic (vLLM's `routed_experts` are a base64 `.npy` array).
const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// A parsed `.npy`: its header dict text, shape and data bytes.
struct Npy<'a> {
    header: String,
    shape: Vec<usize>,
    data: &'a [u8],
}

fn parse_npy(b: &[u8]) -> Option<Npy<'_>> {
    if !b.starts_with(NPY_MAGIC) || b.len() < 10 {
        return None;
    }
    let (len, start) = match b[6] {
        1 => (usize::from(u16::from_le_bytes([b[8], b[9]])), 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        _ => return None,
    };
    let header = std::str::from_utf8(b.get(start..start + len)?)
        .ok()?
        .to_owned();
    let open = header.find("'shape':")? + "'shape':".len();
    let rest = &header[open..];
    let inner = &rest[rest.find('(')? + 1..rest.find(')')?];
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<usize>().ok())
        .collect::<Option<Vec<_>>>()?;
    Some(Npy {
        header,
        shape,
        data: &b[start + len..],
    })
}

/// Row concatenation (or splice, as [`splice_rows`]) of two `.npy` arrays of the same dtype and
/// trailing shape; `None` when they do not agree (a broken blob is omitted).
fn concat_npy_rows(a: &[u8], b: &[u8], usage: Option<&Usage>) -> Option<Vec<u8>> {
    let (x, y) = (parse_npy(a)?, parse_npy(b)?);
    let descr = |h: &str| {
        h.split("'descr':")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .map(str::trim)
            .map(str::to_owned)
    };
    if x.shape.len() < 2 || x.shape[1..] != y.shape[1..] || descr(&x.header) != descr(&y.header) {
        return None;
    }
    let (ra, rb) = (x.shape[0], y.shape[0]);
    let row = |d: &[u8], r: usize| d.len().checked_div(r);
    let width = row(x.data, ra).or(row(y.data, rb))?;
    if x.data.len() != ra * width || y.data.len() != rb * width {
        return None;
    }
    let mut data = x.data.to_vec();
    // The decode blob covers the whole sequence when its row count says so, or when its first
    // `ra` rows are the zero-filled prompt part it never computed (vLLM decode legs).
    let zero_prefix = rb >= ra && zero_prompt_part(ra * width, y.data, usage);
    let skip = if covers_whole_sequence(ra, rb, usage) || zero_prefix {
        ra
    } else {
        0
    };
    data.extend_from_slice(y.data.get(skip * width..)?);
    let rows = ra + rb - skip;
    let trailing: Vec<String> = x.shape[1..].iter().map(usize::to_string).collect();
    let dict = format!(
        "{{'descr': {}, 'fortran_order': False, 'shape': ({rows}, {}), }}",
        descr(&x.header)?,
        trailing.join(", ")
    );
    // Version 1: magic, version, u16 header length; header padded with spaces to a multiple of
    // 64 bytes in all, ending in a newline.
    let mut header = dict.into_bytes();
    let total = 10 + header.len() + 1;
    header.resize(header.len() + (64 - total % 64) % 64, b' ');
    header.push(b'\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&u16::try_from(header.len()).ok()?.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    Some(out)
}

impl RuleMerge {
    fn applies(&self, rule: FieldRule, first: bool) -> bool {
        match rule.legs {
            Legs::Decode => false,
            Legs::Prompt => first || rule.fold == Fold::Attempt,
            Legs::Rows => first,
        }
    }

    fn merge_native(&self, prefill: &[&EngineOutput], decode: &mut EngineOutput, first: bool) {
        // Native fields with a rule of their own under `/engine_data/meta_info/…` or top level.
        let native_rules: Vec<(&String, &FieldRule)> = self
            .rules
            .rules
            .iter()
            .filter(|(k, r)| {
                k.starts_with("/engine_data/") && *k != "/engine_data/*" && r.legs != Legs::Decode
            })
            .collect();
        if native_rules.is_empty() {
            return;
        }
        for (field, rule) in native_rules {
            let ptr = &field["/engine_data".len()..];
            // A whole-blob field (`rows` folded `attempt`: each frame that carries it carries all
            // of it, as SGLang's final stream frame does) is merged on every output carrying it,
            // not only on the first.
            let carries = rule.legs == Legs::Rows
                && rule.fold == Fold::Attempt
                && decode
                    .engine_data
                    .as_ref()
                    .is_some_and(|d| d.pointer(ptr).is_some());
            if !carries && !self.applies(*rule, first) {
                continue;
            }
            let from_prefill = fold_opt(
                prefill
                    .iter()
                    .map(|o| o.engine_data.as_ref().and_then(|d| d.pointer(ptr)).cloned()),
                rule.fold,
                |a: &mut Value, b: Value| {
                    if let (Value::Array(x), Value::Array(y)) = (&mut *a, b) {
                        x.extend(y);
                    }
                },
            );
            let Some(p) = from_prefill else { continue };
            let usage = decode.usage;
            let Some(data) = decode.engine_data.as_mut() else {
                continue;
            };
            match rule.legs {
                Legs::Prompt => set_pointer(data, ptr, p),
                Legs::Rows => {
                    let merged = match (&p, data.pointer(ptr)) {
                        (Value::String(a), Some(Value::String(b))) => {
                            concat_b64_rows(a, b, usage.as_ref()).map(Value::String)
                        }
                        (Value::Array(a), Some(Value::Array(b))) => {
                            Some(Value::Array(a.iter().chain(b).cloned().collect()))
                        }
                        // The decode output has none of its own: the prompt rows go on the
                        // choice's last output (where engines put the blob), not on every chunk.
                        (_, None) if decode.finish_reason.is_some() => Some(p.clone()),
                        (_, None) => continue,
                        _ => None,
                    };
                    match merged {
                        Some(v) => set_pointer(data, ptr, v),
                        None => remove_pointer(data, ptr),
                    }
                }
                Legs::Decode => {}
            }
        }
    }
}

fn set_pointer(root: &mut Value, ptr: &str, v: Value) {
    let Some((parent, key)) = ptr.rsplit_once('/') else {
        return;
    };
    let target = if parent.is_empty() {
        Some(root)
    } else {
        root.pointer_mut(parent)
    };
    if let Some(Value::Object(m)) = target {
        m.insert(key.to_owned(), v);
    }
}

fn remove_pointer(root: &mut Value, ptr: &str) {
    let Some((parent, key)) = ptr.rsplit_once('/') else {
        return;
    };
    let target = if parent.is_empty() {
        Some(root)
    } else {
        root.pointer_mut(parent)
    };
    if let Some(Value::Object(m)) = target {
        m.shift_remove(key);
    }
}

impl PdMerge for RuleMerge {
    fn merge(&self, prefill: &[EngineOutput], decode: &mut EngineOutput, first: bool) {
        // The prompt side is the same for every choice: fold only the prefill outputs of the
        // decode output's own choice (or of choice 0 when the prefill ran one choice).
        let own: Vec<&EngineOutput> = prefill.iter().filter(|o| o.index == decode.index).collect();
        let prefill: Vec<&EngineOutput> = if own.is_empty() {
            prefill.iter().filter(|o| o.index == 0).collect()
        } else {
            own
        };
        let prefill = prefill.as_slice();
        let r = |f: &str| self.rules.rule(f);
        // Prompt logprobs.
        let rule = r("/prompt_logprobs");
        if self.applies(rule, first) {
            let p = fold_opt(
                prefill.iter().map(|o| o.prompt_logprobs.clone()),
                rule.fold,
                |a, b| a.entries.extend(b.entries),
            );
            if p.is_some() {
                decode.prompt_logprobs = p;
            }
        }
        // Routed experts.
        let rule = r("/routed_experts");
        if self.applies(rule, first) {
            let p = fold_opt(
                prefill.iter().map(|o| o.routed_experts.clone()),
                rule.fold,
                concat_rows,
            );
            if let Some(mut p) = p {
                match rule.legs {
                    Legs::Rows => match decode.routed_experts.take() {
                        Some(d) => {
                            if p.num_layers == d.num_layers && p.top_k == d.top_k {
                                splice_rows(&mut p.ids, &d.ids, decode.usage.as_ref());
                            } else {
                                p.ids.clear();
                            }
                            decode.routed_experts = (!p.ids.is_empty()).then_some(p);
                        }
                        None => decode.routed_experts = Some(p),
                    },
                    _ => decode.routed_experts = Some(p),
                }
            }
        } else if rule.legs == Legs::Rows
            && let Some(d) = decode.routed_experts.as_mut()
        {
            // The prefill rows went on the choice's first output. A later blob that covers the
            // whole sequence (vLLM and SGLang decode legs report `[0, seqlen - 1)`, the prompt part
            // invalid) would repeat the prompt: keep only its own part.
            let p: usize = prefill
                .iter()
                .filter_map(|o| o.routed_experts.as_ref())
                .map(|r| r.ids.len())
                .sum();
            if p > 0
                && (covers_whole_sequence(p, d.ids.len(), decode.usage.as_ref())
                    || zero_prompt_part(p, &d.ids, decode.usage.as_ref()))
            {
                d.ids.drain(..p);
            }
        }
        // Usage counters.
        let folded_usage = |fold: Fold| -> Option<Usage> {
            fold_opt(prefill.iter().map(|o| o.usage), fold, |_, _| {})
        };
        for (field, set) in [
            (
                "/usage/cached_tokens",
                (|u: &mut Usage, p: &Usage| u.cached_tokens = p.cached_tokens)
                    as fn(&mut Usage, &Usage),
            ),
            ("/usage/prompt_tokens", |u: &mut Usage, p: &Usage| {
                u.prompt_tokens = p.prompt_tokens;
            }),
            ("/usage/completion_tokens", |u: &mut Usage, p: &Usage| {
                u.completion_tokens = p.completion_tokens;
            }),
        ] {
            let rule = r(field);
            if self.applies(rule, first)
                && let (Some(p), Some(u)) = (folded_usage(rule.fold), decode.usage.as_mut())
            {
                set(u, &p);
            }
        }
        // Output-side lists and the finish are the decode leg's unless a rule says otherwise.
        for (field, take) in [
            ("/token_ids", 0u8),
            ("/logprobs", 1),
            ("/sampling_mask", 2),
            ("/finish_reason", 3),
            ("/handoff", 4),
        ] {
            let rule = r(field);
            if rule.legs == Legs::Decode || !self.applies(rule, first) {
                continue;
            }
            match take {
                0 => {
                    if let Some(p) = fold_opt(
                        prefill.iter().map(|o| Some(o.token_ids.clone())),
                        rule.fold,
                        |a, b| a.extend(b),
                    ) {
                        let mut p = p;
                        if rule.legs == Legs::Rows {
                            p.extend(std::mem::take(&mut decode.token_ids));
                        }
                        decode.token_ids = p;
                    }
                }
                1 => {
                    if let Some(p) = fold_opt(
                        prefill.iter().map(|o| o.logprobs.clone()),
                        rule.fold,
                        |a, b| a.extend(b),
                    ) {
                        decode.logprobs = Some(p);
                    }
                }
                2 => {
                    if let Some(p) = fold_opt(
                        prefill.iter().map(|o| o.sampling_mask.clone()),
                        rule.fold,
                        |a, b| a.extend(b),
                    ) {
                        decode.sampling_mask = Some(p);
                    }
                }
                3 => {
                    if let Some(p) = fold_opt(
                        prefill.iter().map(|o| o.finish_reason.clone()),
                        rule.fold,
                        |_, _| {},
                    ) {
                        decode.finish_reason = Some(p);
                    }
                }
                _ => {
                    if let Some(p) = fold_opt(
                        prefill.iter().map(|o| o.handoff.clone()),
                        rule.fold,
                        |_, _| {},
                    ) {
                        decode.handoff = Some(p);
                    }
                }
            }
        }
        self.merge_native(prefill, decode, first);
    }
}

#[cfg(test)]
mod tests {
    use genfront_protocol::{PromptLogprobs, TokenLogprob};

    use super::*;

    const RULES: &str = r#"{"format": "t", "rules": {
        "/index": {"fold": "attempt", "legs": "decode"},
        "/token_ids": {"fold": "delta", "legs": "decode"},
        "/logprobs": {"fold": "delta", "legs": "decode"},
        "/prompt_logprobs": {"fold": "first", "legs": "prompt"},
        "/routed_experts": {"fold": "delta", "legs": "rows"},
        "/sampling_mask": {"fold": "delta", "legs": "decode"},
        "/finish_reason": {"fold": "attempt", "legs": "decode"},
        "/usage/prompt_tokens": {"fold": "attempt", "legs": "decode"},
        "/usage/completion_tokens": {"fold": "attempt", "legs": "decode"},
        "/usage/cached_tokens": {"fold": "attempt", "legs": "prompt"},
        "/handoff": {"fold": "attempt", "legs": "decode"},
        "/engine_data/*": {"fold": "attempt", "legs": "decode"},
        "/engine_data/meta_info/routed_experts": {"fold": "attempt", "legs": "rows"}
    }}"#;

    fn rows(ids: &[i32]) -> RoutedExperts {
        RoutedExperts {
            num_layers: 1,
            top_k: 1,
            ids: ids.to_vec(),
        }
    }

    fn prefill() -> Vec<EngineOutput> {
        vec![
            EngineOutput {
                prompt_logprobs: Some(PromptLogprobs {
                    start: 0,
                    entries: vec![None, Some(TokenLogprob::default())],
                    first_text: None,
                    first_token_id: None,
                }),
                routed_experts: Some(rows(&[1, 2])),
                usage: Some(Usage {
                    prompt_tokens: 3,
                    completion_tokens: 0,
                    cached_tokens: 2,
                }),
                ..Default::default()
            },
            EngineOutput {
                routed_experts: Some(rows(&[3])),
                token_ids: vec![9],
                ..Default::default()
            },
        ]
    }

    fn decode() -> EngineOutput {
        EngineOutput {
            token_ids: vec![9],
            routed_experts: Some(rows(&[4])),
            usage: Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 1,
                cached_tokens: 3,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn prompt_side_from_prefill_rows_concatenated() {
        let m = RuleMerge::new(MergeRules::parse(RULES).expect("rules"));
        let mut d = decode();
        m.merge(&prefill(), &mut d, true);
        assert_eq!(d.token_ids, vec![9], "decode's own tokens");
        assert_eq!(d.routed_experts, Some(rows(&[1, 2, 3, 4])));
        assert_eq!(d.usage.map(|u| u.cached_tokens), Some(2));
        assert_eq!(d.prompt_logprobs.map(|p| p.entries.len()), Some(2));
        let mut later = decode();
        m.merge(&prefill(), &mut later, false);
        assert_eq!(later.routed_experts, Some(rows(&[4])), "rows only once");
        assert_eq!(
            later.usage.map(|u| u.cached_tokens),
            Some(2),
            "attempt: every output"
        );
    }

    #[test]
    fn a_broken_rule_changes_the_answer() {
        // Routed experts declared `attempt` instead of `delta`: the prefill's first rows are lost.
        let broken = RULES.replace(
            r#""/routed_experts": {"fold": "delta""#,
            r#""/routed_experts": {"fold": "attempt""#,
        );
        let m = RuleMerge::new(MergeRules::parse(&broken).expect("rules"));
        let mut d = decode();
        m.merge(&prefill(), &mut d, true);
        assert_ne!(d.routed_experts, Some(rows(&[1, 2, 3, 4])));
    }

    #[test]
    fn native_rows_and_broken_blobs() {
        let m = RuleMerge::new(MergeRules::parse(RULES).expect("rules"));
        let e = base64::engine::general_purpose::STANDARD;
        let b = |v: &[i32]| e.encode(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        let p = vec![EngineOutput {
            engine_data: Some(serde_json::json!({"meta_info": {"routed_experts": b(&[1, 2])}})),
            ..Default::default()
        }];
        let mut d = EngineOutput {
            engine_data: Some(
                serde_json::json!({"meta_info": {"routed_experts": b(&[3]), "x": 1}}),
            ),
            ..Default::default()
        };
        m.merge(&p, &mut d, true);
        assert_eq!(
            d.engine_data,
            Some(serde_json::json!({"meta_info": {"routed_experts": b(&[1, 2, 3]), "x": 1}}))
        );
        let p = vec![EngineOutput {
            engine_data: Some(serde_json::json!({"meta_info": {"routed_experts": "%%%"}})),
            ..Default::default()
        }];
        let mut d = EngineOutput {
            engine_data: Some(serde_json::json!({"meta_info": {"routed_experts": b(&[3])}})),
            ..Default::default()
        };
        m.merge(&p, &mut d, true);
        assert_eq!(
            d.engine_data,
            Some(serde_json::json!({"meta_info": {}})),
            "omitted"
        );
    }

    #[test]
    fn incomplete_or_unknown_rules_are_refused() {
        assert!(MergeRules::parse(r#"{"format": "t", "rules": {}}"#).is_err());
        let bad = RULES.replace("/index", "/nonsense");
        assert!(MergeRules::parse(&bad).is_err());
        let base = MergeRules::parse(RULES).expect("rules");
        let ext = MergeRules::parse(
            r#"{"format": "t2", "extends": "t", "rules": {"/engine_data/meta_info/packed": {"fold": "attempt", "legs": "decode"}}}"#,
        )
        .expect("ext");
        let merged = base.extend(&ext).expect("extends");
        assert!(merged.check_complete().is_ok());
        assert!(merged.covers("/engine_data/meta_info/packed"));
    }

    #[test]
    fn a_whole_sequence_decode_blob_is_spliced_not_appended() {
        // SGLang decode reports [0, seqlen - 1): prompt 3 + completion 3 - 1 = 5 rows, the 3
        // prompt rows invalid (zeros); prefill gave the 3 prompt rows.
        let u = Usage {
            prompt_tokens: 3,
            completion_tokens: 3,
            cached_tokens: 0,
        };
        let mut a = vec![1, 2, 3];
        splice_rows(&mut a, &[0, 0, 0, 4, 5], Some(&u));
        assert_eq!(a, [1, 2, 3, 4, 5]);
        // Decode-only rows (genfront's mocks) are appended.
        let mut a = vec![1, 2, 3];
        splice_rows(&mut a, &[4, 5], Some(&u));
        assert_eq!(a, [1, 2, 3, 4, 5]);
    }
}
