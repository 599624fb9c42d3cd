use serde_json::json;

use super::*;

fn route(path: &str) -> &'static ControlRoute {
    CONTROL_ROUTES
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("no route {path}"))
}

fn parse(path: &str, query: &str, body: &str) -> Result<ControlAction, NativeResponse> {
    (route(path).parse)(query, body.as_bytes())
}

fn ok(path: &str, query: &str, body: &str) -> ControlAction {
    match parse(path, query, body) {
        Ok(a) => a,
        Err(r) => panic!(
            "{path}?{query} {body}: refused {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ),
    }
}

#[test]
fn every_route_and_method() {
    let table: Vec<(&str, ControlMethods)> =
        CONTROL_ROUTES.iter().map(|r| (r.path, r.methods)).collect();
    assert_eq!(
        table,
        vec![
            ("/pause_generation", ControlMethods::Post),
            ("/continue_generation", ControlMethods::Post),
            ("/flush_cache", ControlMethods::GetOrPost),
            ("/update_weights_from_disk", ControlMethods::Post),
            ("/update_weights_from_distributed", ControlMethods::Post),
            ("/update_weights_from_tensor", ControlMethods::Post),
            ("/init_weights_update_group", ControlMethods::Post),
            ("/update_weight_version", ControlMethods::Post),
        ]
    );
}

#[test]
fn actions_of_accepted_calls() {
    let pause = |mode| ControlAction::Pause { mode };
    assert_eq!(ok("/pause_generation", "", "{}"), pause(PauseMode::Abort));
    assert_eq!(
        ok("/pause_generation", "", r#"{"mode":"abort"}"#),
        pause(PauseMode::Abort)
    );
    assert_eq!(
        ok("/pause_generation", "", r#"{"mode":"retract","extra":[1]}"#),
        pause(PauseMode::Retract)
    );
    assert_eq!(
        ok("/pause_generation", "", r#"{"mode":"in_place","rid":null}"#),
        pause(PauseMode::InPlace)
    );
    assert_eq!(ok("/continue_generation", "", "{}"), ControlAction::Resume);
    assert_eq!(
        ok("/continue_generation", "", r#"{"torch_empty_cache":"no"}"#),
        ControlAction::Resume
    );
    for (query, body) in [
        ("", ""),
        ("timeout=2.5", ""),
        ("timeout=0", "ignored"),
        ("timeout=%201_0%20", ""),
        ("timeout=inf", ""),
        ("x=1&timeout=-1&timeout=3", ""),
    ] {
        assert_eq!(
            ok("/flush_cache", query, body),
            ControlAction::FlushCache,
            "{query}"
        );
    }
    let update = |v: Option<&str>| ControlAction::UpdateWeights {
        version: v.map(str::to_owned),
    };
    assert_eq!(
        ok("/update_weights_from_disk", "", r#"{"model_path":"/m"}"#),
        update(None)
    );
    assert_eq!(
        ok(
            "/update_weights_from_disk",
            "",
            r#"{"model_path":"/m","weight_version":"v2","token_step":"3","flush_cache":1,"abort_all_requests":"yes","manifest":{"a":1},"unknown":true}"#
        ),
        update(Some("v2"))
    );
    assert_eq!(
        ok(
            "/update_weights_from_disk",
            "",
            r#"{"model_path":"/m","weight_version":null,"token_step":2.0}"#
        ),
        update(None)
    );
    assert_eq!(
        ok(
            "/update_weights_from_distributed",
            "",
            r#"{"names":["a"],"dtypes":["bf16"],"shapes":[[1,2]],"weight_version":"v3","selector":"draft"}"#
        ),
        update(Some("v3"))
    );
    assert_eq!(
        ok(
            "/update_weights_from_tensor",
            "",
            r#"{"serialized_named_tensors":["aGVsbG8=",""],"weight_version":"v4"}"#
        ),
        update(Some("v4"))
    );
    assert_eq!(
        ok(
            "/init_weights_update_group",
            "",
            r#"{"master_address":"h","master_port":"29500","rank_offset":1,"world_size":2}"#
        ),
        ControlAction::InitWeightsGroup
    );
    assert_eq!(
        ok(
            "/update_weight_version",
            "",
            r#"{"new_version":"v9","abort_all_requests":false}"#
        ),
        ControlAction::SetWeightVersion {
            version: "v9".into()
        }
    );
}

/// SGLang's own refusals, recorded from FastAPI 0.136.3 + pydantic 2.14.4 serving SGLang 0.5.23's
/// structs (`io_struct.py`, `msgspec_struct_pydantic_core_schema`) and its
/// `RequestValidationError` handler, with the endpoint file named by its package path.
#[test]
fn refusals_match_the_engine() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("refusals.json")).expect("refusals.json");
    assert!(cases.len() >= 20);
    for case in cases {
        let path = case["path"].as_str().unwrap_or_default();
        let query = case["query"].as_str().unwrap_or_default();
        let body = case["body"].as_str().unwrap_or_default();
        let refusal = match parse(path, query, body) {
            Err(r) => r,
            Ok(a) => panic!("{path}?{query} {body}: accepted as {a:?}"),
        };
        assert_eq!(
            u64::from(refusal.status.as_u16()),
            case["status"].as_u64().unwrap_or_default(),
            "{path} {body}"
        );
        assert_eq!(refusal.content_type, genfront_format::CONTENT_TYPE_JSON);
        let got: Value = serde_json::from_slice(&refusal.body).expect("JSON refusal");
        assert_eq!(
            got["message"].as_str().unwrap_or_default(),
            case["answer"]["message"].as_str().unwrap_or_default(),
            "{path}?{query} {body}"
        );
        assert_eq!(got, case["answer"], "{path}?{query} {body}");
    }
}

#[test]
fn refusal_envelope_key_order_is_sglangs() {
    let r = parse("/pause_generation", "", "").expect_err("no body");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        text.starts_with(r#"{"object":"error","message":"1 validation error:"#),
        "{text}"
    );
    assert!(
        text.ends_with(r#","type":"Bad Request","param":null,"code":400}"#),
        "{text}"
    );
}

#[test]
fn query_and_value_helpers() {
    assert_eq!(query_value("a=1&b=%2Fx+y&a=3", "a").as_deref(), Some("3"));
    assert_eq!(query_value("a=1&b=%2Fx+y", "b").as_deref(), Some("/x y"));
    assert_eq!(query_value("a", "a").as_deref(), Some(""));
    assert_eq!(query_value("a=1", "b"), None);
    assert_eq!(genfront_format::query::percent_decode("%zz%4"), "%zz%4");
    assert_eq!(py_float(" 1_000 "), Some(1000.0));
    assert_eq!(py_float("1__0"), None);
    assert_eq!(py_float("-inf"), Some(f64::NEG_INFINITY));
    assert_eq!(py_float("infx"), None);
    assert_eq!(py_float("0x10"), None);
    assert_eq!(
        py_repr(&json!({"a": [1, 2.5, true, null, "it's"]})),
        r#"{'a': [1, 2.5, True, None, "it's"]}"#
    );
    assert_eq!(
        literal_expected(&["abort", "retract", "in_place"]),
        "'abort', 'retract' or 'in_place'"
    );
    assert_eq!(literal_expected(&["a", "b"]), "'a' or 'b'");
}
