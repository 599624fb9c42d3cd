//! Conformance tests of the SGLang format against `spec/sglang-native.md`, the recorded fixtures
//! and SGLang's own messages. One binary, one module per area.

#![allow(clippy::unwrap_used, missing_docs)]

mod fixtures;
mod parity;
mod props;
mod requests;
mod responses;
mod support;
