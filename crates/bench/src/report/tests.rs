use std::time::Duration;

use serde_json::json;

use super::{LoadMode, ProcessSample, Report, RunConfig, render_table};
use crate::args::{Arrival, Format};
use crate::error::ErrorKind;
use crate::stats::{Recorder, Success};

fn config(mode: LoadMode) -> RunConfig {
    RunConfig {
        target: "http://127.0.0.1:1/generate".into(),
        format: Format::Sglang,
        mode,
        stream: true,
        prompt_len: 8,
        distinct_prompts: 10,
        max_new_tokens: 4,
        logprobs: Some(2),
        packed: false,
        routed_experts: false,
        request_bytes: 120,
        warmup: 1,
    }
}

fn recorder() -> Recorder {
    let mut r = Recorder::default();
    for ms in 1..=10 {
        let s = Success {
            latency: Duration::from_millis(ms),
            ttft: Some(Duration::from_millis(1)),
            tokens: 4,
        };
        r.record(Ok(s), &[(500, 3)]);
    }
    r.record(Err(ErrorKind::Incomplete), &[]);
    r.record(Err(ErrorKind::Http5xx), &[]);
    r
}

#[test]
fn assemble_derives_rates_and_per_unit_cpu() {
    let procs = vec![
        ProcessSample {
            pid: 7,
            cpu: Some(Duration::from_millis(120)),
            rss_peak: Some(3 << 20),
            hwm: Some(4 << 20),
            error: None,
        },
        ProcessSample {
            pid: 8,
            error: Some("gone".into()),
            ..ProcessSample::default()
        },
    ];
    let r = Report::assemble(
        config(LoadMode::Closed { concurrency: 2 }),
        Duration::from_secs(2),
        &recorder(),
        procs,
    );
    assert_eq!((r.requests, r.ok, r.error_count()), (12, 10, 2));
    assert_eq!(r.output_tokens, 40);
    assert!((r.requests_per_s - 5.0).abs() < 1e-9);
    assert!((r.output_tokens_per_s - 20.0).abs() < 1e-9);
    let p = &r.processes[0];
    assert!((p.cpu_us_per_request.expect("cpu") - 10_000.0).abs() < 1e-6);
    assert!((p.cpu_us_per_output_token.expect("cpu") - 3_000.0).abs() < 1e-6);
    assert_eq!(r.processes[1].cpu_s, None);
    assert_eq!(r.itl.expect("itl").count, 30);

    let v = serde_json::to_value(&r).expect("serializes");
    assert_eq!(v["errors"], json!({"http_5xx": 1, "incomplete": 1}));
    assert_eq!(
        v["config"]["mode"],
        json!({"loop": "closed", "concurrency": 2})
    );
    assert_eq!(v["latency"]["count"], json!(10));
    assert_eq!(v["processes"][0]["vm_hwm_bytes"], json!(4 << 20));

    let table = render_table(&r);
    for needle in [
        "requests  12 (10 ok, 2 failed)",
        "errors    http_5xx 1, incomplete 1",
        "latency",
        "ttft",
        "itl",
        "\n7 ",
        "(gone)",
    ] {
        assert!(table.contains(needle), "{needle:?} missing in\n{table}");
    }
}

#[test]
fn empty_run_renders_without_percentiles() {
    let mode = LoadMode::Open {
        rate: 5.0,
        arrival: Arrival::Fixed,
    };
    let r = Report::assemble(config(mode), Duration::ZERO, &Recorder::default(), vec![]);
    assert_eq!((r.requests, r.requests_per_s), (0, 0.0));
    assert!(r.latency.is_none());
    let table = render_table(&r);
    assert!(table.contains("open loop, 5 req/s (fixed)"), "{table}");
    assert!(!table.contains("latency"), "{table}");
}
