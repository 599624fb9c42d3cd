//! genfront: Shared HTTP handler.
