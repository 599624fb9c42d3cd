//! genfront: SGLang native format.
