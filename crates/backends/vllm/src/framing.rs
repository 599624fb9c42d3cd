//! vLLM's framing ([`genfront_format::Framing`]): vLLM's `/inference/v1/generate` streams each chunk
//! as `data: <json>\n\n` (the OpenAI-style SSE framing of its serving layer) and ends every stream with
//! `data: [DONE]\n\n`; the server is a FastAPI app, so an unknown path is Starlette's 404
//! `{"detail":"Not Found"}`, a wrong method its 405 `{"detail":"Method Not Allowed"}`, and other
//! HTTP-level refusals `HTTPException`'s `{"detail": message}`.

use genfront_format::{CONTENT_TYPE_JSON, CONTENT_TYPE_SSE, Framing, NativeResponse};
use http::StatusCode;

/// FastAPI's `HTTPException` body: `{"detail": message}`, JSON.
pub(crate) fn detail(status: StatusCode, message: &str) -> NativeResponse {
    NativeResponse::json(status, serde_json::json!({ "detail": message }).to_string())
}

fn not_found() -> NativeResponse {
    detail(StatusCode::NOT_FOUND, "Not Found")
}

fn method_not_allowed() -> NativeResponse {
    detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

/// vLLM's framing (see the module docs).
pub static FRAMING: Framing = Framing {
    sse_prefix: b"data: ",
    sse_suffix: b"\n\n",
    sse_done: b"data: [DONE]\n\n",
    sse_content_type: CONTENT_TYPE_SSE,
    json_content_type: CONTENT_TYPE_JSON,
    not_found,
    method_not_allowed,
    http_error: detail,
};
