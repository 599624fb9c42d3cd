//! The registration record stored at `/PREFIX/workers/<id>`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::DiscoveryError;

/// Longest worker id, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// The role a registered worker plays: `"agg"` (aggregated: whole requests), `"prefill"` or
/// `"decode"` (one side of a prefill/decode pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Aggregated: serves whole requests (the default when a record names none).
    #[default]
    Agg,
    /// Prefill side of a P/D pair.
    Prefill,
    /// Decode side of a P/D pair.
    Decode,
}

impl Role {
    /// The role's name in records and on the command line.
    pub fn label(self) -> &'static str {
        match self {
            Role::Agg => "agg",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "agg" | "aggregated" => Ok(Role::Agg),
            "prefill" => Ok(Role::Prefill),
            "decode" => Ok(Role::Decode),
            other => Err(format!(
                "unknown role `{other}`: expected agg, prefill or decode"
            )),
        }
    }
}

/// One worker's registration (the JSON value of its key).
///
/// `{"id": "w0", "worker": "sglang=http://10.0.0.5:30000", "role": "agg"}`: `worker` is the
/// spec `genfront serve --worker` takes (`sglang=URL[#facts]`, `vllm=URL[#facts]`,
/// `grpc://HOST:PORT`); the frontend builds the worker from it exactly as from the flag. Fields
/// this version does not know are kept in [`Registration::extra`] and written back unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// The worker's id (also the last key segment); see [`validate_id`].
    pub id: String,
    /// The worker spec, as given to `--worker`.
    pub worker: String,
    /// The worker's role.
    #[serde(default)]
    pub role: Role,
    /// Fields of later versions, kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Registration {
    /// A record with no extra fields.
    pub fn new(id: impl Into<String>, worker: impl Into<String>, role: Role) -> Self {
        Self {
            id: id.into(),
            worker: worker.into(),
            role,
            extra: serde_json::Map::new(),
        }
    }

    /// The JSON value stored in etcd.
    ///
    /// # Errors
    /// [`DiscoveryError::Record`] for an invalid id, an empty worker spec, or a value over
    /// `max_bytes`.
    pub fn encode(&self, max_bytes: usize) -> Result<Vec<u8>, DiscoveryError> {
        validate_id(&self.id).map_err(DiscoveryError::Record)?;
        if self.worker.trim().is_empty() {
            return Err(DiscoveryError::Record(format!(
                "worker `{}` has an empty worker spec",
                self.id
            )));
        }
        let bytes = serde_json::to_vec(self)
            .map_err(|e| DiscoveryError::Record(format!("cannot encode: {e}")))?;
        if bytes.len() > max_bytes {
            return Err(DiscoveryError::Record(format!(
                "the record of `{}` is {} bytes, over the {max_bytes}-byte limit",
                self.id,
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// Read the value of key `/PREFIX/workers/<key_id>`.
    ///
    /// # Errors
    /// A message naming the problem: over `max_bytes`, not a JSON record, an invalid id, an
    /// empty worker spec, or an `id` field that is not `key_id`.
    pub fn decode(key_id: &str, value: &[u8], max_bytes: usize) -> Result<Self, String> {
        if value.len() > max_bytes {
            return Err(format!(
                "{} bytes, over the {max_bytes}-byte record limit",
                value.len()
            ));
        }
        let record: Registration =
            serde_json::from_slice(value).map_err(|e| format!("not a registration record: {e}"))?;
        validate_id(&record.id)?;
        if record.id != key_id {
            return Err(format!(
                "its id `{}` is not its key's `{key_id}`",
                record.id
            ));
        }
        if record.worker.trim().is_empty() {
            return Err("empty worker spec".into());
        }
        Ok(record)
    }
}

/// Check a worker id: 1 to [`MAX_ID_LEN`] ASCII letters, digits, `.`, `_` and `-` (it is a key
/// segment and a label in metrics and headers).
///
/// # Errors
/// A message naming the problem.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!(
            "worker id `{id}` must be 1 to {MAX_ID_LEN} characters"
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "worker id `{id}`: `{c}` is not allowed (ASCII letters, digits, `.`, `_`, `-`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_keep_unknown_fields() {
        let r = Registration::new("w0", "sglang=http://h:1", Role::Prefill);
        let bytes = r.encode(1024).expect("encodes");
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"id":"w0","worker":"sglang=http://h:1","role":"prefill"}"#
        );
        assert_eq!(Registration::decode("w0", &bytes, 1024), Ok(r));

        let later = br#"{"id":"w1","worker":"grpc://h:2","zone":"eu","role":"decode"}"#;
        let r = Registration::decode("w1", later, 1024).expect("decodes");
        assert_eq!(r.role, Role::Decode);
        assert_eq!(r.extra["zone"], "eu");
        let again = r.encode(1024).expect("encodes");
        assert!(String::from_utf8_lossy(&again).contains(r#""zone":"eu""#));

        let no_role = br#"{"id":"w2","worker":"vllm=http://h:3"}"#;
        assert_eq!(
            Registration::decode("w2", no_role, 1024).map(|r| r.role),
            Ok(Role::Agg)
        );
    }

    #[test]
    fn bad_records_are_refused_with_a_reason() {
        let ok = br#"{"id":"w0","worker":"grpc://h:2"}"#;
        assert!(Registration::decode("w0", ok, 10).is_err_and(|e| e.contains("limit")));
        assert!(Registration::decode("w9", ok, 1024).is_err_and(|e| e.contains("not its key")));
        assert!(Registration::decode("w0", b"{", 1024).is_err());
        assert!(
            Registration::decode("w0", br#"{"id":"w0","worker":"x","role":"boss"}"#, 1024).is_err()
        );
        assert!(
            Registration::decode("w0", br#"{"id":"w0","worker":" "}"#, 1024)
                .is_err_and(|e| e.contains("empty"))
        );
        let big = Registration::new("w0", "x".repeat(100), Role::Agg);
        assert!(big.encode(50).is_err());
        assert!(
            Registration::new("a/b", "x", Role::Agg)
                .encode(1024)
                .is_err()
        );
        assert!(validate_id("").is_err());
        assert!(validate_id(&"a".repeat(MAX_ID_LEN + 1)).is_err());
        assert!(validate_id("sglang-10.0.0.1-30000_a").is_ok());
        assert_eq!("aggregated".parse(), Ok(Role::Agg));
        assert!("boss".parse::<Role>().is_err());
    }
}
