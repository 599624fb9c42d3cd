//! genfront's **sidecar transport**: serve any [`genfront_protocol::Engine`] over gRPC
//! ([`SidecarServer`]) and reach it from a frontend with an engine that forwards every call
//! ([`RemoteEngine`]), so a frontend drives an engine on another machine exactly as it drives one
//! in-process.
//!
//! What this crate owns:
//! - **The wire schema**: `proto/genfront/sidecar/v1/engine.proto` (service
//!   `genfront.sidecar.v1.EngineService`: `Generate` streams one message per engine delta; `Info`
//!   returns the model facts and the engine's native format; `Control` relays one fleet-control
//!   call and returns the engine's own answer), compiled by `build.rs` with the pure-Rust `protox` (no `protoc`).
//!   Generated types live in [`pb`].
//! - **The mapping** between the engine contract and the wire ([`wire`]): lossless for every
//!   value, floats bit for bit, JSON with its 64-bit integers and key order.
//! - **The server** ([`SidecarServer`], [`serve`]) with the standard `grpc.health.v1` service
//!   (SERVING while [`genfront_protocol::Engine::probe`] succeeds).
//! - **The client** ([`RemoteEngine`]).
//! - **TLS** (tonic's rustls, ring provider): [`SidecarServer::tls`] with [`ServerTls`] (and
//!   client certificates required when `client_ca_pem` is set: mTLS); clients reach it as
//!   `grpcs://host:port` with [`ClientTls`] ([`RemoteEngine::connect_with`], or process-wide via
//!   [`set_client_tls`]). Without TLS the sidecar authenticates nobody: bind it to loopback or a
//!   private network.
//!
//! **Cancellation crosses the hop**: dropping a [`RemoteEngine`] stream, or firing its
//! cancellation token, resets the HTTP/2 stream; the server then drops the engine stream and fires
//! the engine's token, so the engine aborts the request (for SGLang, `/abort_request`). A lost
//! connection has the same effect. Engine errors cross with their [`genfront_protocol::ErrorKind`];
//! transport failures become `Unavailable` (cannot reach the sidecar) or `StreamIncomplete` (the
//! stream broke before every choice finished).
//!
//! **Fleet control crosses the hop too**: [`RemoteEngine`]'s `control` sends the native call
//! (format, typed action, method, path, query, body, timeout) to the sidecar, which relays it to
//! its engine's [`genfront_protocol::Engine::control`] within the call's timeout and returns the
//! engine's status, content type and body unchanged (an error status is an answer, not an
//! error). The engine's `native_format` crosses with `Info`, so a sidecar in front of an SGLang
//! engine is an SGLang worker to the frontend.
//!
//! Start reading at [`SidecarServer`] and [`RemoteEngine`]; the message design is documented in
//! the `.proto` file.
//!
//! ```no_run
//! use std::sync::Arc;
//! use genfront_protocol::Engine;
//! use genfront_sidecar::{RemoteEngine, SidecarServer};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(engine: Arc<dyn Engine>) -> Result<(), Box<dyn std::error::Error>> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let shutdown = CancellationToken::new();
//! tokio::spawn(SidecarServer::new(engine).serve(listener, shutdown.clone()));
//!
//! let remote = RemoteEngine::connect(&format!("grpc://{addr}")).await?;
//! println!("serving {}", remote.info().model);
//! # Ok(()) }
//! ```

mod remote;
mod server;
pub mod wire;

/// Messages and service stubs generated from `proto/genfront/sidecar/v1/engine.proto` (their docs
/// are the `.proto` comments; [`crate::wire`] maps them to the engine contract).
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod pb {
    tonic::include_proto!("genfront.sidecar.v1");
}

pub use remote::{CANCELLED_MESSAGE, ClientTls, RemoteEngine, set_client_tls};
pub use server::{ENGINE_SERVICE_NAME, ServeError, ServerTls, SidecarServer, serve};
pub use wire::WireError;

/// Largest message either side sends or accepts (256 MiB): prompt logprobs and routed experts of
/// a long prompt travel in one message and exceed gRPC's usual 4 MiB.
pub const MAX_MESSAGE_SIZE: usize = 256 * 1024 * 1024;
