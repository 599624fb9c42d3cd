//! SGLang's `GET /get_server_info` (and `/server_info`) document for the mock server.

use serde_json::{Value, json};

use crate::args::MockServerArgs;

/// The `version` the mock reports: this crate's version with a `+genfront.mock` local label (a
/// valid PEP 440 version, so clients that parse it keep working).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+genfront.mock");

/// The document a `--skip-tokenizer-init` SGLang server with the mock's facts reports
/// ([`genfront_sglang::server_info`]), plus what only the server knows: its `host` and `port`,
/// its `version`, and one DP rank's `internal_states` entry. It becomes the mock engine's
/// [`genfront_protocol::EngineInfo::server_info`], which the SGLang format's `/server_info`
/// route relays (and which genfront's SGLang client reads and relays in turn).
pub(crate) fn server_info(args: &MockServerArgs, info: &genfront_protocol::EngineInfo) -> Value {
    let mut doc = genfront_sglang::server_info(info, args.incremental_streaming);
    if let Value::Object(m) = &mut doc {
        m.insert("host".to_owned(), json!(args.host.to_string()));
        m.insert("port".to_owned(), json!(args.port()));
        m.insert("enable_metrics".to_owned(), json!(true));
        m.insert(
            "internal_states".to_owned(),
            json!([{
                "model_path": info.model,
                "dp_rank": 0,
                "num_running_reqs": 0,
                "num_used_tokens": 0,
                "token_usage": 0.0,
                "cache_hit_rate": 0.0,
                "last_gen_throughput": 0.0,
            }]),
        );
        m.insert("version".to_owned(), json!(VERSION));
    }
    doc
}
