//! Tests of the vLLM format, by behaviour. Engine outputs are built by hand (`support`).

mod abort;
mod assemble;
mod fixtures;
mod props;
mod schema;
mod support;
mod text_mode;
mod units;
mod validation;
