//! SGLang's `GET /get_server_info` (and `/server_info`) body for the mock server.

use genfront_mocker::MockEngine;
use serde_json::{Value, json};

use crate::args::MockServerArgs;

/// The `version` the mock reports: this crate's version with a `+genfront.mock` local label (a
/// valid PEP 440 version, so clients that parse it keep working).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+genfront.mock");

/// SGLang's server-info body (`spec/sglang-native.md` §12.2): the server args, the scheduler
/// info merged in at the top level (as SGLang's handler does with `**scheduler_info`),
/// `internal_states` (one entry per DP rank: one here) and `version`. Only the keys clients read
/// carry meaning; the mock has no tokenizer, so `skip_tokenizer_init` is `true`.
pub(crate) fn server_info(args: &MockServerArgs, engine: &MockEngine) -> Value {
    let info = engine.info();
    let context = info.max_context_len;
    json!({
        "model_path": info.model,
        "tokenizer_path": info.model,
        "served_model_name": info.model,
        "skip_tokenizer_init": true,
        "host": args.host.to_string(),
        "port": args.port(),
        "context_length": context,
        "max_running_requests": info.max_num_seqs,
        "incremental_streaming_output": args.incremental_streaming,
        "stream_interval": 1,
        "enable_return_routed_experts": args.enable_return_routed_experts,
        "disaggregation_mode": "null",
        "tp_size": 1,
        "dp_size": 1,
        "enable_metrics": true,
        "max_total_num_tokens": u64::from(context) * u64::from(info.max_num_seqs.max(1)),
        "max_req_input_len": context.saturating_sub(1),
        "internal_states": [{
            "dp_rank": 0,
            "num_running_reqs": engine.running(),
            "num_used_tokens": 0,
            "token_usage": 0.0,
            "cache_hit_rate": 0.0,
            "last_gen_throughput": 0.0,
        }],
        "version": VERSION,
    })
}
