//! Prefill/decode disaggregation through genfront against the independent Python oracle
//! (`../shared/oracle/oracle_engine.py` run with `--role prefill|decode`): the P/D answer equals
//! the aggregated oracle's, and failing or abandoned legs end on both workers.

mod common;

use common::oracle::Oracle;
use serde_json::json;

/// The harness starts an oracle, talks to it, and leaves no process behind when dropped.
#[tokio::test]
async fn oracle_harness_smoke() {
    let oracle = Oracle::start(&["--api", "sglang", "--skip-tokenizer-init"]);
    let (status, body) = oracle
        .post_text(
            "/generate",
            &json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let log = oracle.log().await;
    assert_eq!(log["requests"].as_array().map(Vec::len), Some(1), "{log}");
    oracle.reset().await;
    assert_eq!(oracle.log().await["requests"], json!([]));
    let pid = oracle.pid();
    drop(oracle);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "oracle {pid} still alive after drop"
    );
}
