//! genfront: In-process mock engine.
