//! Unit tests of the engine client, by part: SSE splitting, chunk decoding, the upstream body,
//! error mapping, and the assembler → decoder round trip. The HTTP behaviour (fake vLLM server,
//! cancellation, aborts) is in `tests/client.rs`.

mod body;
mod decode;
mod roundtrip;
mod sse;
