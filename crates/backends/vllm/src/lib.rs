//! genfront: vLLM native format.
