//! Unit tests of the engine client, by part: chunk decoding, the upstream body, error mapping,
//! and the assembler → decoder round trip (SSE splitting is tested in `genfront-engine-http`). The HTTP behaviour (fake vLLM server,
//! cancellation, aborts) is in `tests/client.rs`.

mod body;
mod decode;
mod roundtrip;
