//! Compiles `proto/genfront/sidecar/v1/engine.proto` with the pure-Rust `protox` compiler, so a
//! fresh clone builds with plain `cargo build` (no `protoc` binary needed).

use std::error::Error;

const PROTO_ROOT: &str = "proto";
const ENGINE_PROTO: &str = "proto/genfront/sidecar/v1/engine.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let fds = protox::compile([ENGINE_PROTO], [PROTO_ROOT])?;
    tonic_prost_build::configure()
        // Opaque JSON payloads decode as `Bytes` slices of the received frame (no copy).
        .bytes(".genfront.sidecar.v1")
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
