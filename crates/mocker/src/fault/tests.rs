use genfront_protocol::ErrorKind;

use super::{
    DEFAULT_FAULT_MESSAGE, FaultAction, FaultTrigger, ParseFaultError, ScriptedFault, parse_kind,
};

fn parse(s: &str) -> Result<ScriptedFault, ParseFaultError> {
    s.parse()
}

#[test]
fn parses_the_documented_examples() {
    assert_eq!(
        parse("error@3:unavailable"),
        Ok(ScriptedFault::new(
            FaultTrigger::Request(3),
            FaultAction::Error {
                kind: ErrorKind::Unavailable,
                message: DEFAULT_FAULT_MESSAGE.to_owned()
            }
        ))
    );
    assert_eq!(
        parse("fail-after@2:5"),
        Ok(ScriptedFault::new(
            FaultTrigger::Request(2),
            FaultAction::FailAfter {
                tokens: 5,
                kind: ErrorKind::Internal,
                message: DEFAULT_FAULT_MESSAGE.to_owned()
            }
        ))
    );
    assert_eq!(
        parse("stall@1:3"),
        Ok(ScriptedFault::new(
            FaultTrigger::Request(1),
            FaultAction::StallAfter { tokens: 3 }
        ))
    );
    assert_eq!(
        parse("finish-error@*:4:gpu fell off: again"),
        Ok(ScriptedFault::new(
            FaultTrigger::Every,
            FaultAction::FinishError {
                tokens: 4,
                message: "gpu fell off: again".to_owned()
            }
        ))
    );
}

#[test]
fn defaults_and_aliases() {
    assert_eq!(
        parse("error@7").map(|f| f.action),
        Ok(FaultAction::Error {
            kind: ErrorKind::Unavailable,
            message: DEFAULT_FAULT_MESSAGE.to_owned()
        })
    );
    assert_eq!(
        parse(" error@every:backend.overloaded:busy ").map(|f| (f.when, f.action)),
        Ok((
            FaultTrigger::Every,
            FaultAction::Error {
                kind: ErrorKind::Overloaded,
                message: "busy".to_owned()
            }
        ))
    );
    assert_eq!(
        parse("fail-after@1:0:stream_incomplete:cut").map(|f| f.action),
        Ok(FaultAction::FailAfter {
            tokens: 0,
            kind: ErrorKind::StreamIncomplete,
            message: "cut".to_owned()
        })
    );
    assert_eq!(
        parse_kind("INVALID_ARGUMENT"),
        Ok(ErrorKind::InvalidArgument)
    );
}

#[test]
fn rejects_malformed_text() {
    assert!(matches!(parse("error"), Err(ParseFaultError::Shape(_))));
    assert!(matches!(parse("boom@1"), Err(ParseFaultError::Action(_))));
    assert!(matches!(parse("error@0"), Err(ParseFaultError::Trigger(_))));
    assert!(matches!(
        parse("error@-1"),
        Err(ParseFaultError::Trigger(_))
    ));
    assert!(matches!(parse("error@x"), Err(ParseFaultError::Trigger(_))));
    assert!(matches!(parse("stall@1"), Err(ParseFaultError::Tokens(_))));
    assert!(matches!(
        parse("stall@1:x"),
        Err(ParseFaultError::Tokens(_))
    ));
    assert!(matches!(
        parse("stall@1:2:3"),
        Err(ParseFaultError::Extra(_))
    ));
    assert!(matches!(
        parse("fail-after@1:-2"),
        Err(ParseFaultError::Tokens(_))
    ));
    assert!(matches!(
        parse("error@1:nope"),
        Err(ParseFaultError::Kind(_))
    ));
    assert!(matches!(parse(""), Err(ParseFaultError::Shape(_))));
}

#[test]
fn display_round_trips() {
    for text in [
        "error@3:unavailable",
        "error@*:invalid_argument:bad: really",
        "fail-after@2:5",
        "fail-after@2:5:cancelled:x",
        "stall@1:3",
        "finish-error@9:0",
    ] {
        let fault = parse(text).expect("parses");
        let shown = fault.to_string();
        assert_eq!(parse(&shown), Ok(fault), "{text} -> {shown}");
    }
}

#[test]
fn applies_to_the_right_requests() {
    let third = parse("stall@3:1").expect("parses");
    assert!(!third.applies_to(2));
    assert!(third.applies_to(3));
    let every = parse("stall@*:1").expect("parses");
    assert!(every.applies_to(1) && every.applies_to(u64::MAX));
}

#[test]
fn serde_shape() {
    let fault = parse("fail-after@2:5").expect("parses");
    let json = serde_json::to_value(&fault).expect("serialises");
    assert_eq!(
        json,
        serde_json::json!({
            "when": {"request": 2},
            "action": {"type": "fail_after", "tokens": 5, "kind": "internal", "message": "scripted fault"}
        })
    );
    let back: ScriptedFault = serde_json::from_value(json).expect("parses");
    assert_eq!(back, fault);
}
