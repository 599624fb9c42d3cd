//! Small pieces: Python number text, the `.npy` encoder, ids and headers, the catalog entry.

use base64::Engine as _;
use genfront_format::{Catalog, RouteConfig, resolve_routes};
use http::{HeaderValue, Method};
use serde_json::json;

use super::support::{engine, json_headers, prepare, prepare_raw};
use crate::npy::{npy_i32, routed_experts_b64};
use crate::pyfmt::{py_float, py_repr, py_str};
use crate::{CATALOG_ENTRY, GENERATE_PATH};

#[test]
fn python_float_text() {
    for (x, text) in [
        (3.0, "3.0"),
        (-0.5, "-0.5"),
        (0.1, "0.1"),
        (1e16, "1e+16"),
        (1.5e-7, "1.5e-07"),
        (0.0001, "0.0001"),
        (123456789012345.0, "123456789012345.0"),
        (1e22, "1e+22"),
        (f64::INFINITY, "inf"),
        (f64::NAN, "nan"),
        (-0.0, "-0.0"),
    ] {
        assert_eq!(py_float(x), text, "{x}");
    }
    assert_eq!(py_str("it's"), "\"it's\"");
    assert_eq!(py_str("a\\b\n"), "'a\\\\b\\n'");
    assert_eq!(
        py_repr(&json!({"a": [1, 2.5, null, true, "x"]}), 1000),
        "{'a': [1, 2.5, None, True, 'x']}"
    );
}

#[test]
fn npy_header_and_data() {
    let bytes = npy_i32(&[2, 3, 1], &[1, 2, 3, 4, 5, -6]);
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0);
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).expect("ascii header");
    assert!(header.starts_with("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 1), }"));
    assert!(header.ends_with('\n'));
    let data = &bytes[10 + header_len..];
    assert_eq!(data.len(), 24);
    assert_eq!(
        i32::from_le_bytes([data[20], data[21], data[22], data[23]]),
        -6
    );
    let b64 = routed_experts_b64(3, 1, &[1, 2, 3, 4, 5, -6]);
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("b64"),
        bytes
    );
    assert!(
        std::str::from_utf8(&npy_i32(&[4], &[0; 4])[10..])
            .expect("ascii")
            .contains("'shape': (4,)")
    );
}

#[test]
fn request_ids() {
    let p = prepare(&json!({"request_id": "abc", "token_ids": [1], "sampling_params": {}}))
        .expect("ok");
    assert_eq!(p.client_id.as_deref(), Some("generate-tokens-abc"));
    assert_eq!(p.subs[0].abort_key, "generate-tokens-abc");
    let mut headers = json_headers();
    headers.insert("x-request-id", HeaderValue::from_static("  hdr-1 "));
    headers.insert("x-data-parallel-rank", HeaderValue::from_static("3"));
    headers.insert("x-session-id", HeaderValue::from_static("traj-9"));
    let body = br#"{"request_id":"abc","token_ids":[1],"sampling_params":{}}"#;
    let p = prepare_raw(body, &headers, &engine()).expect("ok");
    assert_eq!(p.client_id.as_deref(), Some("generate-tokens-hdr-1"));
    let routing = &p.subs[0].request.routing;
    assert_eq!(routing.dp_rank, Some(3));
    assert_eq!(routing.session_id.as_deref(), Some("traj-9"));
    // A blank header falls back to the body; a malformed rank is ignored like vLLM does.
    headers.insert("x-request-id", HeaderValue::from_static("   "));
    headers.insert("x-data-parallel-rank", HeaderValue::from_static("three"));
    let p = prepare_raw(body, &headers, &engine()).expect("ok");
    assert_eq!(p.client_id.as_deref(), Some("generate-tokens-abc"));
    assert_eq!(p.subs[0].request.routing.dp_rank, None);
    // No id anywhere: a uuid4 hex.
    let p = prepare(&json!({"token_ids": [1], "sampling_params": {}})).expect("ok");
    let id = p.client_id.expect("id");
    let hex = id.strip_prefix("generate-tokens-").expect("prefix");
    assert_eq!(hex.len(), 32);
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn projection() {
    let body = json!({"token_ids": [5, 6, 7], "sampling_params": {"n": 3, "temperature": 0.5, "top_p": 0.9,
        "top_k": 4, "min_p": 0.1, "seed": 7, "max_tokens": 8, "min_tokens": 2, "ignore_eos": true,
        "logprobs": 2, "prompt_logprobs": 1, "routed_experts_prompt_start": 2,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2},
        "priority": -3, "cache_salt": "salt", "kv_transfer_params": {"do_remote_decode": true}});
    let p = prepare(&body).expect("ok");
    assert!(!p.stream);
    assert_eq!(p.subs.len(), 1);
    let r = &p.subs[0].request;
    assert_eq!(r.token_ids, vec![5, 6, 7]);
    assert_eq!(r.sampling.n, 3);
    assert_eq!(r.sampling.temperature, Some(0.5));
    assert_eq!(r.sampling.top_p, Some(0.9));
    assert_eq!(r.sampling.top_k, Some(4));
    assert_eq!(r.sampling.min_p, Some(0.1));
    assert_eq!(r.sampling.seed, Some(7));
    assert_eq!(r.sampling.presence_penalty, Some(0.5));
    assert_eq!(r.sampling.frequency_penalty, Some(-0.5));
    assert_eq!(r.sampling.repetition_penalty, Some(1.2));
    assert_eq!(r.stop.max_tokens, Some(8));
    assert_eq!(r.stop.min_tokens, 2);
    assert!(r.stop.ignore_eos);
    assert_eq!(r.output.logprobs, Some(2));
    let pl = r.output.prompt_logprobs.as_ref().expect("prompt logprobs");
    // `prompt_logprob_start` belongs to `prompt_logprob_token_ids` (vLLM 0.33.0 refuses it
    // alone): prompt logprobs start at the first position.
    assert_eq!((pl.start, pl.top_k), (0, 1));
    assert!(r.output.routed_experts);
    assert_eq!(r.output.routed_experts_start, 2);
    assert!(r.output.sampling_mask);
    assert_eq!(r.routing.priority, Some(-3));
    assert_eq!(r.routing.cache_salt.as_deref(), Some("salt"));
    assert_eq!(r.handoff, Some(json!({"do_remote_decode": true})));
    assert_eq!(r.native.format, "vllm");
    assert_eq!(crate::request::native_with_ids(r), body);
    assert!(r.request_id.is_empty());
}

#[test]
fn catalog_entry() {
    assert_eq!(CATALOG_ENTRY.name, "vllm");
    assert_eq!(CATALOG_ENTRY.native_path, GENERATE_PATH);
    assert_eq!(CATALOG_ENTRY.native_methods, &[Method::POST]);
    assert_eq!(CATALOG_ENTRY.generate_methods, &[Method::POST]);
    static ENTRIES: &[genfront_format::CatalogEntry] = &[CATALOG_ENTRY];
    let catalog = Catalog {
        entries: ENTRIES,
        default_generate: "vllm",
    };
    let routes = resolve_routes(
        &catalog,
        &RouteConfig {
            generate_format: Some("vllm".to_owned()),
            ..RouteConfig::default()
        },
    )
    .expect("routes");
    let table: Vec<(&str, Vec<Method>)> = routes
        .iter()
        .map(|r| (r.path.as_str(), r.methods.clone()))
        .collect();
    assert_eq!(
        table,
        vec![
            ("/generate", vec![Method::POST]),
            ("/inference/v1/generate", vec![Method::POST])
        ]
    );
    assert_eq!(routes[0].format.name(), "vllm");
}

#[test]
fn python_json_decode_messages() {
    // Expected texts are CPython's `str(json.JSONDecodeError)` for the same bytes.
    for (body, python) in [
        ("{} x", "Extra data: line 1 column 4 (char 3)"),
        (
            "{\"a\" 1}",
            "Expecting ':' delimiter: line 1 column 6 (char 5)",
        ),
        (
            "{\"a\": 1 \"b\": 2}",
            "Expecting ',' delimiter: line 1 column 9 (char 8)",
        ),
        ("{\"a\": tru}", "Expecting value: line 1 column 7 (char 6)"),
        (
            "{a: 1}",
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (
            "{\n \"a\": nul\n}",
            "Expecting value: line 2 column 7 (char 8)",
        ),
        (
            "{\"token_ids\": [1,",
            "Expecting value: line 1 column 18 (char 17)",
        ),
        ("not json", "Expecting value: line 1 column 1 (char 0)"),
    ] {
        let err = serde_json::from_str::<serde_json::Value>(body).expect_err(body);
        assert_eq!(
            crate::schema::json_decode_message(&err, body.as_bytes()),
            python,
            "{body}"
        );
    }
}
