//! Start-up configuration errors exit non-zero with a clear message (never a panic).

use std::process::Command;

fn genfront(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_genfront"));
    cmd.args(args)
        .env("GENFRONT_PORT", "0")
        .env("GENFRONT_HOST", "127.0.0.1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run genfront");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_generate_format_fails_at_startup_naming_the_linked_formats() {
    let (code, err) = genfront(
        &["serve", "--mock", "1"],
        &[("DYN_GENERATE_FORMAT", "bogus")],
    );
    assert_ne!(code, 0);
    assert!(err.contains("unknown generate format `bogus`"), "{err}");
    assert!(err.contains("linked formats: sglang, vllm"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn two_routes_on_one_path_fail_at_startup() {
    let (code, err) = genfront(
        &["serve", "--route", "/x=sglang", "--route", "/x=vllm"],
        &[],
    );
    assert_ne!(code, 0);
    assert!(err.contains("two routes on path `/x`"), "{err}");
    let (code, err) = genfront(&["serve", "--route", "/inference/v1/generate=sglang"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("two routes on path"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn zero_engines_is_a_startup_error() {
    let (code, err) = genfront(&["serve", "--mock", "0"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no engines configured"), "{err}");
}

#[test]
fn a_route_on_a_formats_abort_path_fails_at_startup() {
    let (code, err) = genfront(&["serve", "--route", "/abort_request=vllm"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("two routes on path `/abort_request`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
