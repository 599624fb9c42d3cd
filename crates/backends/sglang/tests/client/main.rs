//! The SGLang engine client against a scripted fake SGLang server, and the round-trip property
//! (assembler → native SSE frames → frame decoder gives back the same deltas).

#![allow(clippy::unwrap_used, missing_docs)]

mod engine;
mod fake;
mod relay;
mod roundtrip;
