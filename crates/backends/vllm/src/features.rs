//! `features` (`MultiModalFeatures` in `token_in_token_out/protocol.py`, spec §3.3): multimodal
//! hashes and placeholder ranges produced by `/render`. genfront only validates them (the engine
//! client forwards them in the native body): key sets, per-modality counts, placeholder ranges.

use serde_json::Value;

use crate::fields::{Fields, int};
use crate::schema::{Issue, Loc, child, loc};

/// Per-modality item presence of `kwargs_data` / `mm_metadata` (`true` = a serialized item).
pub(crate) type ItemPresence = Vec<(String, Vec<bool>)>;

/// `features` (`MultiModalFeatures`), reduced to what its validators look at.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Features {
    /// `mm_hashes`: modality → number of hashes, in client order.
    pub hashes: Vec<(String, usize)>,
    /// `mm_placeholders`: modality → `(offset, length)` ranges.
    pub placeholders: Vec<(String, Vec<(i128, i128)>)>,
    /// `kwargs_data`, when not null.
    pub kwargs: Option<ItemPresence>,
    /// `mm_metadata`, when not null.
    pub metadata: Option<ItemPresence>,
}

/// Validate `features` like pydantic: field types first (issues are recorded), then the
/// `_validate_parallel_fields` model validator (a `value_error` at `body.features`).
pub(crate) fn parse(v: &Value, issues: &mut Vec<Issue>) -> Option<Features> {
    let base = loc(["body".into(), "features".into()]);
    let Some(m) = v.as_object() else {
        issues.push(Issue::new(
            "model_attributes_type",
            base,
            "Input should be a valid dictionary or object to extract fields from",
            v,
        ));
        return None;
    };
    let before = issues.len();
    let mut f = Fields {
        map: m,
        base,
        issues: &mut *issues,
    };
    let hashes = f
        .required("mm_hashes")
        .and_then(|h| modality_lists(h, &child(&f.base, "mm_hashes"), f.issues, false))
        .map(|lists| {
            lists
                .into_iter()
                .map(|(k, items)| (k, items.len()))
                .collect()
        });
    let placeholders = f
        .required("mm_placeholders")
        .and_then(|p| parse_placeholders(p, &child(&f.base, "mm_placeholders"), f.issues));
    let kwargs = match f.get("kwargs_data") {
        None | Some(Value::Null) => None,
        Some(k) => modality_lists(k, &child(&f.base, "kwargs_data"), f.issues, true),
    };
    let metadata = match f.get("mm_metadata") {
        None | Some(Value::Null) => None,
        Some(k) => modality_lists(k, &child(&f.base, "mm_metadata"), f.issues, true),
    };
    if f.issues.len() > before {
        return None;
    }
    let features = Features {
        hashes: hashes.unwrap_or_default(),
        placeholders: placeholders.unwrap_or_default(),
        kwargs,
        metadata,
    };
    if let Err(message) = validate(&features) {
        issues.push(Issue::value_error(
            loc(["body".into(), "features".into()]),
            &message,
            v,
        ));
        return None;
    }
    Some(features)
}

/// One modality of a `features` field: its name, location and items.
type ModalityItems<'a> = (&'a String, Vec<Loc>, &'a [Value]);

/// The `dict[str, list[...]]` shape every `features` field has: each modality with its location
/// and items. pydantic's `dict_type` / `list_type` issues are recorded for what does not fit (a
/// non-list modality is skipped; a non-dict value gives `None`).
fn dict_of_lists<'a>(
    v: &'a Value,
    base: &[Loc],
    issues: &mut Vec<Issue>,
) -> Option<Vec<ModalityItems<'a>>> {
    let Some(m) = v.as_object() else {
        issues.push(Issue::new(
            "dict_type",
            base.to_vec(),
            "Input should be a valid dictionary",
            v,
        ));
        return None;
    };
    let mut out = Vec::with_capacity(m.len());
    for (modality, items) in m {
        let l = child(base, modality.as_str());
        match items.as_array() {
            Some(items) => out.push((modality, l, items.as_slice())),
            None => issues.push(Issue::new(
                "list_type",
                l,
                "Input should be a valid list",
                items,
            )),
        }
    }
    Some(out)
}

/// `dict[str, list[str]]` (or `list[str | None]` when `nullable_items`): per modality, whether
/// each item is a string.
fn modality_lists(
    v: &Value,
    base: &[Loc],
    issues: &mut Vec<Issue>,
    nullable_items: bool,
) -> Option<ItemPresence> {
    let lists = dict_of_lists(v, base, issues)?;
    let mut out = Vec::with_capacity(lists.len());
    for (modality, l, items) in lists {
        let mut present = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(_) => present.push(true),
                Value::Null if nullable_items => present.push(false),
                other => issues.push(Issue::new(
                    "string_type",
                    child(&l, i),
                    "Input should be a valid string",
                    other,
                )),
            }
        }
        out.push((modality.clone(), present));
    }
    Some(out)
}

type Ranges = Vec<(String, Vec<(i128, i128)>)>;

fn parse_placeholders(v: &Value, base: &[Loc], issues: &mut Vec<Issue>) -> Option<Ranges> {
    let lists = dict_of_lists(v, base, issues)?;
    let mut out = Vec::with_capacity(lists.len());
    for (modality, l, items) in lists {
        let mut ranges = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let il = child(&l, i);
            let Some(obj) = item.as_object() else {
                issues.push(Issue::new(
                    "model_type",
                    il,
                    "Input should be a valid dictionary or instance of PlaceholderRangeInfo",
                    item,
                ));
                continue;
            };
            let mut f = Fields {
                map: obj,
                base: il.clone(),
                issues: &mut *issues,
            };
            let offset = f.required("offset").and_then(|_| f.with("offset", int));
            let length = f.required("length").and_then(|_| f.with("length", int));
            if let (Some(o), Some(raw)) = (offset, obj.get("offset"))
                && o.get() < 0
            {
                let mut issue = Issue::new(
                    "greater_than_equal",
                    child(&il, "offset"),
                    "Input should be greater than or equal to 0",
                    raw,
                );
                issue.ctx = Some("{'ge': 0}".to_owned());
                issues.push(issue);
            }
            if let (Some(n), Some(raw)) = (length, obj.get("length"))
                && n.get() <= 0
            {
                let mut issue = Issue::new(
                    "greater_than",
                    child(&il, "length"),
                    "Input should be greater than 0",
                    raw,
                );
                issue.ctx = Some("{'gt': 0}".to_owned());
                issues.push(issue);
            }
            if let (Some(o), Some(n)) = (offset, length) {
                ranges.push((o.get(), n.get()));
            }
        }
        out.push((modality.clone(), ranges));
    }
    Some(out)
}

// === validator ===

/// `MultiModalFeatures._validate_parallel_fields`.
///
/// # Errors
/// The `ValueError` text.
fn validate(f: &Features) -> Result<(), String> {
    let same_keys = |other: &[String]| {
        other.len() == f.hashes.len() && other.iter().all(|k| f.hashes.iter().any(|(h, _)| h == k))
    };
    let keys = |v: &[(String, Vec<bool>)]| v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let placeholder_keys: Vec<String> = f.placeholders.iter().map(|(k, _)| k.clone()).collect();
    if !same_keys(&placeholder_keys) {
        return Err("mm_hashes and mm_placeholders must use the same modalities".to_owned());
    }
    if let Some(k) = &f.kwargs
        && !same_keys(&keys(k))
    {
        return Err("kwargs_data must use the same modalities as mm_hashes".to_owned());
    }
    if let Some(m) = &f.metadata
        && !same_keys(&keys(m))
    {
        return Err("mm_metadata must use the same modalities as mm_hashes".to_owned());
    }
    let count = |v: &[(String, Vec<bool>)], modality: &str| {
        v.iter()
            .find(|(k, _)| k == modality)
            .map_or(0, |(_, items)| items.len())
    };
    let mut ranges: Vec<(i128, i128)> = Vec::new();
    for (modality, num_hashes) in &f.hashes {
        let placeholders = f
            .placeholders
            .iter()
            .find(|(k, _)| k == modality)
            .map(|(_, r)| r.as_slice())
            .unwrap_or_default();
        if placeholders.len() != *num_hashes {
            return Err(format!(
                "{modality} mm_hashes and mm_placeholders must have the same length"
            ));
        }
        if let Some(k) = &f.kwargs
            && count(k, modality) != *num_hashes
        {
            return Err(format!(
                "{modality} kwargs_data and mm_hashes must have the same length"
            ));
        }
        if let Some(m) = &f.metadata
            && count(m, modality) != *num_hashes
        {
            return Err(format!(
                "{modality} mm_metadata and mm_hashes must have the same length"
            ));
        }
        // Python's ints do not overflow; an end past `i128` saturates, which orders the same
        // against every offset `i128` holds (a huge integral float length such as `1e127` is an
        // int to pydantic).
        ranges.extend(placeholders.iter().map(|(o, l)| (*o, o.saturating_add(*l))));
    }
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err("mm_placeholders must be globally non-overlapping and sorted".to_owned());
    }
    Ok(())
}
