//! Prefill/decode (P/D) disaggregation in the engine contract: the typed leg a request carries
//! ([`PdLeg`]), how a prefill worker hands the KV cache to decode ([`Handoff`]), and how a format
//! folds the prefill leg's outputs into the decode leg's ([`PdMerge`]).
//!
//! Two hand-off styles exist, one per engine family:
//! - **SGLang bootstrap** (`spec/sglang-native.md` §13): both legs get the same
//!   `bootstrap_host` / `bootstrap_port` / `bootstrap_room` and run **concurrently**; decode pulls
//!   the KV from the prefill's bootstrap server, keyed by the room.
//! - **vLLM `kv_transfer_params`** (`spec/vllm-native.md` §10): the prefill leg runs first with
//!   `max_tokens: 1` and `kv_transfer_params {do_remote_decode: true, do_remote_prefill: false}`;
//!   its answer carries the `kv_transfer_params` the decode leg must be given.

use serde::{Deserialize, Serialize};

use crate::EngineOutput;

/// Which side of a P/D pair an engine request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PdRole {
    /// Runs the prompt, produces the first token and hands the KV cache on.
    Prefill,
    /// Receives the KV cache and generates the output.
    Decode,
}

/// SGLang's bootstrap coordinates, the same on both legs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bootstrap {
    /// The prefill worker's host (an IPv6 address in brackets).
    pub host: String,
    /// The prefill's bootstrap port (`--disaggregation-bootstrap-port`, default 8998); `None`
    /// sends `null`.
    pub port: Option<u16>,
    /// The room: a random value in `[0, 2^63 − 1]`, one per engine request (batch item, sample).
    pub room: u64,
}

/// The P/D leg of one engine request. Minted by the router, never by a client (a client setting
/// SGLang's bootstrap fields gets the native 400).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PdLeg {
    /// Prefill or decode.
    pub role: PdRole,
    /// SGLang-style coordinates (both legs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    /// vLLM-style parameters: on the prefill leg the request for a remote decode
    /// (`{"do_remote_decode": true, "do_remote_prefill": false}`), on the decode leg what the
    /// prefill returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_params: Option<serde_json::Value>,
}

/// How a prefill worker hands its KV cache to a decode worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "style", rename_all = "snake_case")]
pub enum Handoff {
    /// SGLang: concurrent legs sharing bootstrap coordinates; decode pulls from `host:port`.
    Bootstrap {
        /// The prefill worker's host, as decode workers reach it.
        host: String,
        /// Its bootstrap port.
        port: Option<u16>,
    },
    /// vLLM: prefill first, its returned `kv_transfer_params` go to decode.
    KvTransfer,
}

/// How a format folds the prefill leg into the decode leg's outputs, so the client gets the
/// answer one aggregated engine would give. Implemented by each format crate from **declared
/// merge rules** (data): which fields come from the prompt side (the prefill leg), which are row
/// concatenations (routed experts: prefill prompt rows, then decode rows), which are the decode
/// leg's own.
pub trait PdMerge: Send + Sync + std::fmt::Debug {
    /// Rewrite decode output `decode` of choice `decode.index` given everything the prefill leg
    /// produced (`prefill`, its outputs in order). `first` is true for the first decode output of
    /// that choice (where prompt-side data goes).
    fn merge(&self, prefill: &[EngineOutput], decode: &mut EngineOutput, first: bool);
}
