use serde_json::Value;

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
            ("/pause", ControlMethods::Post),
            ("/resume", ControlMethods::Post),
            ("/is_paused", ControlMethods::Get),
            ("/reset_prefix_cache", ControlMethods::Post),
            ("/update_weight_version", ControlMethods::Post),
            ("/weight_info", ControlMethods::Get),
            ("/init_weight_transfer_engine", ControlMethods::Post),
            ("/start_weight_update", ControlMethods::Post),
            ("/update_weights", ControlMethods::Post),
            ("/finish_weight_update", ControlMethods::Post),
            ("/shutdown_weight_transfer_engine", ControlMethods::Post),
            ("/start_draft_weight_update", ControlMethods::Post),
        ]
    );
}

#[test]
fn actions_of_accepted_calls() {
    let pause = |mode| ControlAction::Pause { mode };
    assert_eq!(ok("/pause", "", ""), pause(PauseMode::Abort));
    assert_eq!(ok("/pause", "mode=abort", ""), pause(PauseMode::Abort));
    assert_eq!(
        ok("/pause", "mode=wait&clear_cache=off", ""),
        pause(PauseMode::Wait)
    );
    assert_eq!(
        ok("/pause", "mode=keep&clear_cache=TRUE", ""),
        pause(PauseMode::Keep)
    );
    assert_eq!(
        ok("/pause", "mode=%6Beep", "ignored"),
        pause(PauseMode::Keep)
    );
    assert_eq!(
        ok("/pause", "mode=bad&mode=wait", ""),
        pause(PauseMode::Wait)
    );
    // vLLM 0.33.0 has no `wait_for_inflight_requests`: FastAPI ignores it, the mode stays abort.
    assert_eq!(
        ok("/pause", "wait_for_inflight_requests=true", ""),
        pause(PauseMode::Abort)
    );
    assert_eq!(ok("/resume", "", "garbage"), ControlAction::Resume);
    assert_eq!(ok("/is_paused", "", ""), ControlAction::IsPaused);
    assert_eq!(ok("/weight_info", "x=1", ""), ControlAction::WeightInfo);
    assert_eq!(ok("/reset_prefix_cache", "", ""), ControlAction::FlushCache);
    assert_eq!(
        ok(
            "/reset_prefix_cache",
            "reset_running_requests=1&reset_external=yes",
            ""
        ),
        ControlAction::FlushCache
    );
    assert_eq!(
        ok(
            "/update_weight_version",
            "",
            r#"{"new_version":"v1","extra":2}"#
        ),
        ControlAction::SetWeightVersion {
            version: "v1".into()
        }
    );
    assert_eq!(
        ok("/update_weight_version", "", r#"{"new_version":""}"#),
        ControlAction::SetWeightVersion {
            version: String::new()
        }
    );
}

/// vLLM's own refusals, recorded from FastAPI 0.136.3 + pydantic 2.14.4 serving vLLM 0.33.0's
/// route signatures with its `validation_exception_handler` and `sanitize_message`.
#[test]
fn refusals_match_the_engine() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("refusals.json")).expect("refusals.json");
    assert!(cases.len() >= 25);
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
            "{path}?{query} {body}"
        );
        assert_eq!(refusal.content_type, genfront_format::CONTENT_TYPE_JSON);
        let got: Value = serde_json::from_slice(&refusal.body).expect("JSON refusal");
        assert_eq!(
            got["error"]["message"].as_str().unwrap_or_default(),
            case["answer"]["error"]["message"]
                .as_str()
                .unwrap_or_default(),
            "{path}?{query} {body}"
        );
        assert_eq!(got, case["answer"], "{path}?{query} {body}");
    }
}

#[test]
fn refusal_envelope_key_order_is_vllms() {
    let r = parse("/pause", "mode=x", "").expect_err("bad mode");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        text.starts_with(r#"{"error":{"message":"1 validation error:"#),
        "{text}"
    );
    assert!(
        text.ends_with(r#","type":"Bad Request","param":"query.mode","code":400}}"#),
        "{text}"
    );
}

#[test]
fn sanitize_message_rules() {
    assert_eq!(sanitize_message("<obj at 0xdeadBEEF>"), "<obj>");
    assert_eq!(sanitize_message("x at 0xzz>"), "x at 0xzz>");
    assert_eq!(
        sanitize_message("boom\n  File \"/x/y.py\", line 12, in run\n    code()\nafter"),
        "boom\nafter"
    );
    assert_eq!(
        sanitize_message("see /usr/lib/x-1.2/y and /homework"),
        "see <path> and /homework"
    );
    assert_eq!(sanitize_message("at /a/b/c.tar.gz"), "at <path>.gz");
    assert_eq!(sanitize_message("/a.py /a/b"), "/a.py /a/b");
}

#[test]
fn weight_transfer_flow_actions() {
    let group = ControlAction::InitWeightsGroup;
    let update = |version: Option<&str>| ControlAction::UpdateWeights {
        version: version.map(str::to_owned),
    };
    assert_eq!(
        ok(
            "/init_weight_transfer_engine",
            "",
            r#"{"init_info":{"master_port":1}}"#
        ),
        group
    );
    assert_eq!(
        ok("/init_weight_transfer_engine", "", r#"{"init_info":{}}"#),
        group
    );
    for path in [
        "/start_weight_update",
        "/shutdown_weight_transfer_engine",
        "/start_draft_weight_update",
    ] {
        assert_eq!(ok(path, "", ""), group, "{path}");
        assert_eq!(ok(path, "", "not json"), group, "{path}: body not read");
    }
    assert_eq!(
        ok("/update_weights", "", r#"{"update_info":{"names":["w"]}}"#),
        update(None)
    );
    assert_eq!(
        ok("/update_weights", "", r#"{"update_info":[{"a":1},{}]}"#),
        update(None)
    );
    assert_eq!(
        ok("/update_weights", "", r#"{"update_info":[]}"#),
        update(None)
    );
    assert_eq!(ok("/finish_weight_update", "", ""), update(None));
    assert_eq!(ok("/finish_weight_update", "", "null"), update(None));
    assert_eq!(ok("/finish_weight_update", "", "{}"), update(None));
    assert_eq!(
        ok("/finish_weight_update", "", r#"{"weight_version":null}"#),
        update(None)
    );
    assert_eq!(
        ok(
            "/finish_weight_update",
            "",
            r#"{"weight_version":"step-7","x":1}"#
        ),
        update(Some("step-7"))
    );
}
