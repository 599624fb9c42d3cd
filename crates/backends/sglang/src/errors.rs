//! SGLang's native error envelopes (`spec/sglang-native.md` §10).
//!
//! | error | answer |
//! |---|---|
//! | [`GenerateError::Schema`] (bad JSON, wrong types) | 400 `{"object":"error","message":…,"type":"Bad Request","param":null,"code":400}` (SGLang's pydantic handler), also for `stream: true` |
//! | client errors with a native message (validation, engine 4xx) | `{"error":{"message":…}}` with the status (`_create_error_response`); for `stream: true`, HTTP 200 SSE with one error event then `[DONE]`, because SGLang validates inside the stream generator |
//! | everything else | `{"object":"error","message":…,"type":"<status>","param":null,"code":<status>}` (SGLang's `HTTPException` handler) |
//!
//! Messages are always [`GenerateError::public_message`]: internal details never leave.
//!
//! An SGLang engine's own error answer to an SGLang client's request
//! ([`genfront_protocol::EngineError::native`]) is the exception: it is the engine's, so it goes
//! to the client verbatim — an HTTP error by the frontend (status, body, headers), an
//! `{"error":…}` event of a started stream here ([`stream_event`]).

use bytes::Bytes;
use genfront_format::{CONTENT_TYPE_SSE, GenerateError, NativeResponse};
use genfront_protocol::ErrorKind;
use http::StatusCode;
use serde_json::{Value, json};

/// Whether `error` is answered with SGLang's `{"error":{"message"}}` shape (a `ValueError` or a
/// 4xx abort in SGLang), as opposed to the flat pydantic/`HTTPException` shape.
fn is_value_error(error: &GenerateError) -> bool {
    match error {
        GenerateError::Validation { .. } => true,
        GenerateError::Engine(e) => {
            matches!(e.kind, ErrorKind::InvalidArgument | ErrorKind::Unsupported)
        }
        _ => false,
    }
}

/// Whether retrying the same request may succeed (the `retryable` flag of stream error events).
fn retryable(error: &GenerateError) -> bool {
    match error {
        GenerateError::Engine(e) => e.kind.retryable(),
        GenerateError::Overloaded | GenerateError::NoEngine { .. } | GenerateError::Paused => true,
        _ => false,
    }
}

/// The `type` of a stream error event for `status` (`invalid_request_error` for client errors,
/// as SGLang sends for validation failures).
fn event_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        404 => "not_found",
        499 => "request_cancelled",
        429 | 529 => "overloaded",
        501 => "not_implemented",
        503 => "service_unavailable",
        s if (400..500).contains(&s) => "invalid_request_error",
        _ => "internal_error",
    }
}

fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// The payload of one SSE error event: `{"error":{"message","type","code","retryable"}}`, or
/// SGLang's own error event verbatim when the engine sent one for this SGLang client's request.
pub(crate) fn stream_event(error: &GenerateError) -> Bytes {
    if let GenerateError::Engine(e) = error
        && let Some(native) = e.native_for(crate::FORMAT_NAME)
        && native.status.is_none()
    {
        return native.body.clone();
    }
    let status = error.status();
    to_bytes(&json!({
        "error": {
            "message": error.public_message(),
            "type": event_type(status),
            "code": status.as_u16(),
            "retryable": retryable(error),
        }
    }))
}

/// The whole native answer for an error raised before any response header.
pub(crate) fn error_response(error: &GenerateError, stream: bool) -> NativeResponse {
    let status = error.status();
    let message = error.public_message();
    // SGLang 0.5.23's JSON contract gate: `{"error": "<text>"}`, never a stream.
    if let GenerateError::Validation {
        param: Some(p),
        message,
    } = error
        && p == crate::request::CONTRACT_GATE
    {
        return NativeResponse::json(status, to_bytes(&json!({ "error": message })));
    }
    if is_value_error(error) {
        if stream {
            let event = stream_event(error);
            let mut body = Vec::with_capacity(event.len() + 32);
            body.extend_from_slice(b"data: ");
            body.extend_from_slice(&event);
            body.extend_from_slice(b"\n\ndata: [DONE]\n\n");
            return NativeResponse {
                status: StatusCode::OK,
                content_type: CONTENT_TYPE_SSE,
                body: Bytes::from(body),
            };
        }
        return NativeResponse::json(status, to_bytes(&json!({"error": {"message": message}})));
    }
    if let GenerateError::Paused = error {
        // genfront's own refusal while the fleet is paused: named and marked retryable.
        return NativeResponse::json(
            status,
            to_bytes(&json!({
                "object": "error",
                "message": message,
                "type": "paused",
                "param": null,
                "code": "paused",
                "retryable": true,
            })),
        );
    }
    let kind = match error {
        GenerateError::Schema { .. } => "Bad Request".to_owned(),
        // genfront's own machine-readable code for "no worker can take this".
        GenerateError::NoEngine { .. } => error.code().to_owned(),
        _ => status.as_u16().to_string(),
    };
    NativeResponse::json(
        status,
        to_bytes(&json!({
            "object": "error",
            "message": message,
            "type": kind,
            "param": null,
            "code": status.as_u16(),
        })),
    )
}

#[cfg(test)]
mod tests {
    use genfront_protocol::EngineError;

    use super::*;

    fn body(r: &NativeResponse) -> Value {
        serde_json::from_slice(&r.body).unwrap_or(Value::Null)
    }

    #[test]
    fn envelopes() {
        let v = GenerateError::validation("bad");
        let r = error_response(&v, false);
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(body(&r), json!({"error": {"message": "bad"}}));

        let r = error_response(&v, true);
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.content_type, CONTENT_TYPE_SSE);
        assert_eq!(
            std::str::from_utf8(&r.body).ok(),
            Some(
                "data: {\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_error\",\"code\":400,\"retryable\":false}}\n\ndata: [DONE]\n\n"
            )
        );

        let s = GenerateError::Schema {
            message: "oops".into(),
            param: None,
        };
        for stream in [false, true] {
            let r = error_response(&s, stream);
            assert_eq!(r.status, StatusCode::BAD_REQUEST);
            assert_eq!(
                body(&r),
                json!({"object":"error","message":"oops","type":"Bad Request","param":null,"code":400})
            );
        }

        let e = GenerateError::Engine(EngineError::internal("secret detail"));
        let r = error_response(&e, false);
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body(&r),
            json!({"object":"error","message":"Internal server error","type":"500","param":null,"code":500})
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&stream_event(&e)).ok(),
            Some(
                json!({"error":{"message":"Internal server error","type":"internal_error","code":500,"retryable":false}})
            )
        );

        let u = GenerateError::Engine(EngineError::unavailable("down"));
        assert_eq!(
            serde_json::from_slice::<Value>(&stream_event(&u)).ok(),
            Some(
                json!({"error":{"message":"Service temporarily unavailable","type":"service_unavailable","code":503,"retryable":true}})
            )
        );

        let mut bad = EngineError::invalid_argument("too long");
        bad.status_code = Some(400);
        let r = error_response(&GenerateError::Engine(bad), false);
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(body(&r), json!({"error": {"message": "too long"}}));
    }

    fn native(format: &'static str, status: Option<u16>, body: &'static str) -> GenerateError {
        GenerateError::Engine(EngineError::internal("engine detail").with_native(
            genfront_protocol::NativeError {
                format,
                status,
                body: Bytes::from_static(body.as_bytes()),
                content_type: None,
                retry_after: None,
            },
        ))
    }

    #[test]
    fn an_engines_own_error_event_is_sent_as_it_came() {
        let raw = r#"{"error": {"message": "KV cache full", "code": 500, "extra": 1}}"#;
        let e = native(crate::FORMAT_NAME, None, raw);
        assert_eq!(&stream_event(&e)[..], raw.as_bytes());
        // Another format's bytes, or an HTTP answer (the frontend relays those): typed.
        for e in [
            native("vllm", None, raw),
            native(crate::FORMAT_NAME, Some(500), raw),
        ] {
            assert_eq!(
                serde_json::from_slice::<Value>(&stream_event(&e)).ok(),
                Some(
                    json!({"error":{"message":"Internal server error","type":"internal_error","code":500,"retryable":false}})
                )
            );
        }
    }
}
