use std::time::Duration;

use clap::Parser;

use super::{Amount, Arrival, BenchArgs, ConfigError, Format, parse_duration};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn parse(extra: &[&str]) -> BenchArgs {
    let mut argv = vec!["bench", "--url", "http://127.0.0.1:8000"];
    if !extra.contains(&"--format") {
        argv.extend_from_slice(&["--format", "sglang"]);
    }
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).expect("parses").bench
}

#[test]
fn defaults_are_valid() {
    let a = parse(&[]);
    assert_eq!(a.validate(), Ok(()));
    assert_eq!(a.amount(), Amount::Requests(100));
    assert_eq!(a.concurrency, 8);
    assert_eq!(a.prompt_len, 128);
    assert_eq!(a.max_new_tokens, 16);
    assert_eq!(a.arrival, Arrival::Poisson);
    assert_eq!(a.timeout, Duration::from_secs(60));
    assert!(!a.stream && !a.shared_prefix && !a.no_progress);
    assert_eq!(a.target(), "http://127.0.0.1:8000/generate");
}

#[test]
fn format_picks_path_unless_overridden() {
    let a = parse(&["--format", "vllm"]);
    assert_eq!(a.format, Format::Vllm);
    assert_eq!(a.target(), "http://127.0.0.1:8000/inference/v1/generate");
    let a = parse(&["--path", "/x/generate"]);
    assert_eq!(a.target(), "http://127.0.0.1:8000/x/generate");
}

#[test]
fn repeatable_pid_and_duration() {
    let a = parse(&["--pid", "1", "--pid", "22", "--duration", "1.5s"]);
    assert_eq!(a.pids, vec![1, 22]);
    assert_eq!(a.amount(), Amount::Duration(Duration::from_millis(1500)));
}

#[test]
fn requests_and_duration_conflict() {
    let argv = [
        "bench",
        "--url",
        "http://h:1",
        "--format",
        "vllm",
        "--requests",
        "3",
        "--duration",
        "1s",
    ];
    assert!(Cli::try_parse_from(argv).is_err());
}

#[test]
fn validate_rejects_bad_values() {
    let cases: [(&[&str], ConfigError); 6] = [
        (&["--requests", "0"], ConfigError::Zero("requests")),
        (&["--concurrency", "0"], ConfigError::Zero("concurrency")),
        (
            &["--max-new-tokens", "0"],
            ConfigError::Zero("max-new-tokens"),
        ),
        (&["--rate", "0"], ConfigError::Rate(0.0)),
        (
            &["--path", "generate"],
            ConfigError::Path("generate".into()),
        ),
        (&["--timeout", "0s"], ConfigError::ZeroDuration("timeout")),
    ];
    for (extra, want) in cases {
        assert_eq!(parse(extra).validate(), Err(want), "{extra:?}");
    }
    let mut a = parse(&[]);
    a.url = "https://h:1".into();
    assert!(matches!(a.validate(), Err(ConfigError::Url { .. })));
    a.url = "127.0.0.1:8000".into();
    assert!(matches!(a.validate(), Err(ConfigError::Url { .. })));
}

#[test]
fn durations() {
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
    assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
    assert!(parse_duration("ten").is_err());
    assert!(parse_duration("5d").is_err());
    assert!(parse_duration("").is_err());
}

#[test]
fn every_flag_has_a_genfront_bench_env_name() {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let mut n = 0;
    for arg in cmd.get_arguments() {
        if arg.get_long() == Some("help") {
            continue;
        }
        let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or("");
        assert!(
            env.starts_with("GENFRONT_BENCH_"),
            "--{:?} has env {env:?}",
            arg.get_long()
        );
        n += 1;
    }
    assert!(n >= 20, "only {n} flags seen");
}

#[test]
fn help_renders() {
    use clap::CommandFactory;
    let help = Cli::command().render_long_help().to_string();
    for heading in ["Target:", "Load:", "Request:", "Report:"] {
        assert!(help.contains(heading), "{help}");
    }
    if std::env::var_os("GENFRONT_BENCH_PRINT_HELP").is_some() {
        println!("{help}");
    }
}
