//! The vLLM engine client against a tiny scripted fake vLLM server (axum on `127.0.0.1:0`):
//! connect, decoded deltas, every error class, incomplete streams, and cancellation (the fake
//! records `abort_requests` bodies and dropped connections).

mod cancel;
mod connect;
mod decode;
mod errors;
mod relay;
mod support;
