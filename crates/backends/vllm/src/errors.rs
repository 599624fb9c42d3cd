//! vLLM's error envelope `{"error":{"message","type","param","code"}}` (`ErrorResponse` in
//! `serve/engine/protocol.py`, spec §9.1), and constructors for vLLM's error kinds.

use bytes::Bytes;
use genfront_format::{CONTENT_TYPE_SSE, GenerateError, NativeResponse};
use http::StatusCode;
use serde::Serialize;

/// A `VLLMValidationError`: HTTP 400, `"type": "BadRequestError"`. `str(exc)` appends
/// ` (parameter=X, value=Y)` when raised with `parameter=`/`value=`, and vLLM sends `str(exc)`.
pub(crate) fn validation(
    message: impl Into<String>,
    param: Option<&str>,
    value: Option<String>,
) -> GenerateError {
    let mut message = message.into();
    let mut extras = Vec::new();
    if let Some(p) = param {
        extras.push(format!("parameter={p}"));
    }
    if let Some(v) = value {
        extras.push(format!("value={v}"));
    }
    if !extras.is_empty() {
        message = format!("{message} ({})", extras.join(", "));
    }
    GenerateError::Validation {
        message,
        param: param.map(str::to_owned),
    }
}

/// A plain `ValueError` / `create_error_response(str)`: 400 `BadRequestError`, `param: null`.
pub(crate) fn bad_request(message: impl Into<String>) -> GenerateError {
    GenerateError::Validation {
        message: message.into(),
        param: None,
    }
}

/// vLLM's `type` for an error: the exception class name for vLLM errors, the HTTP phrase for
/// schema errors and `HTTPException`s (spec §9.1).
pub(crate) fn error_type(error: &GenerateError) -> &'static str {
    match error {
        GenerateError::Validation { .. } => "BadRequestError",
        GenerateError::Schema { .. } => "Bad Request",
        GenerateError::NotFound { .. } => "NotFoundError",
        GenerateError::PayloadTooLarge { .. } => "Request Entity Too Large",
        // Starlette's `HTTPException` handler: the status phrase.
        GenerateError::Http { status, .. } => status.canonical_reason().unwrap_or("Bad Request"),
        GenerateError::Overloaded => "Service Unavailable",
        // genfront's own machine-readable code for "no worker can take this".
        GenerateError::NoEngine { .. } => "no_available_workers",
        GenerateError::Paused => "paused",
        GenerateError::Engine(_) => type_for_status(error.status()),
        GenerateError::Internal(_) => "InternalServerError",
    }
}

fn type_for_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequestError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        422 => "UnprocessableEntityError",
        501 => "NotImplementedError",
        502 => "BadGatewayError",
        503 => "ServiceUnavailableError",
        s if (400..500).contains(&s) => "BadRequestError",
        _ => "InternalServerError",
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Info<'a>,
}

#[derive(Serialize)]
struct Info<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Code,
    /// Only on genfront's own `paused` refusal (fleet control): `true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    retryable: Option<bool>,
}

/// `code`: the HTTP status, as vLLM sends it; genfront's `paused` refusal names itself instead.
#[derive(Serialize)]
#[serde(untagged)]
enum Code {
    Status(u16),
    Name(&'static str),
}

/// The JSON body `{"error":{"message","type","param","code"}}` for `error`. Internal details are
/// never included: the message is [`GenerateError::public_message`]. The one exception is vLLM's
/// own error event inside a stream it started for a vLLM client's request
/// ([`genfront_protocol::EngineError::native`] without a status): that payload is the engine's
/// and is sent verbatim (its HTTP error answers are relayed by the frontend).
pub(crate) fn error_json(error: &GenerateError) -> Vec<u8> {
    if let GenerateError::Engine(e) = error
        && let Some(native) = e.native_for(crate::FORMAT_NAME)
        && native.status.is_none()
    {
        return native.body.to_vec();
    }
    let message = error.public_message();
    let envelope = Envelope {
        error: Info {
            message: &message,
            kind: error_type(error),
            param: error.param(),
            code: match error {
                GenerateError::Paused => Code::Name("paused"),
                _ => Code::Status(error.status().as_u16()),
            },
            retryable: matches!(error, GenerateError::Paused).then_some(true),
        },
    };
    serde_json::to_vec(&envelope).unwrap_or_else(|_| {
        br#"{"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}"#
            .to_vec()
    })
}

/// Whether vLLM reports `error` inside an already-started SSE stream when the client asked for
/// one: the engine's own request validation (`SamplingParams.verify`, prompt length) runs on the
/// first step of the generator, after the 200 went out (spec §4.3, §9.1).
fn reported_in_stream(error: &GenerateError) -> bool {
    match error {
        GenerateError::Validation { .. } => true,
        GenerateError::Engine(e) => e.is_public(),
        _ => false,
    }
}

/// The native answer for `error` before any header went out.
pub(crate) fn error_response(error: &GenerateError, stream: bool) -> NativeResponse {
    let json = error_json(error);
    if stream && reported_in_stream(error) {
        let mut body = Vec::with_capacity(json.len() + 32);
        body.extend_from_slice(b"data: ");
        body.extend_from_slice(&json);
        body.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        return NativeResponse {
            status: StatusCode::OK,
            content_type: CONTENT_TYPE_SSE,
            body: Bytes::from(body),
        };
    }
    NativeResponse::json(error.status(), json)
}

#[cfg(test)]
mod tests {
    use genfront_protocol::{EngineError, NativeError};
    use serde_json::{Value, json};

    use super::*;

    fn native(format: &'static str, status: Option<u16>, body: &'static str) -> GenerateError {
        GenerateError::Engine(
            EngineError::internal("engine detail").with_native(NativeError {
                format,
                status,
                body: Bytes::from_static(body.as_bytes()),
                content_type: None,
                retry_after: None,
            }),
        )
    }

    #[test]
    fn an_engines_own_error_event_is_sent_as_it_came() {
        let raw = r#"{"error": {"message": "EngineCore died", "type": "InternalServerError", "param": null, "code": 500}}"#;
        assert_eq!(
            error_json(&native(crate::FORMAT_NAME, None, raw)),
            raw.as_bytes()
        );
        // Another format's bytes, or an HTTP answer (the frontend relays those): typed.
        for e in [
            native("sglang", None, raw),
            native(crate::FORMAT_NAME, Some(500), raw),
        ] {
            assert_eq!(
                serde_json::from_slice::<Value>(&error_json(&e)).ok(),
                Some(
                    json!({"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}})
                )
            );
        }
    }
}
