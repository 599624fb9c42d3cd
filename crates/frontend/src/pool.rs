//! The engine pool requests are dispatched to.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use genfront_protocol::{Engine, EngineInfo};

/// Engines of one model, picked round robin among the ready ones.
pub struct EnginePool {
    engines: Vec<Arc<dyn Engine>>,
    next: AtomicUsize,
    info: EngineInfo,
}

impl std::fmt::Debug for EnginePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnginePool")
            .field("engines", &self.engines.len())
            .field("info", &self.info)
            .finish()
    }
}

impl EnginePool {
    /// A pool over `engines`. Model facts come from the first engine (all serve one model);
    /// an empty pool uses [`EngineInfo::default`] and never has a ready engine.
    pub fn new(engines: Vec<Arc<dyn Engine>>) -> Self {
        let info = engines
            .first()
            .map(|e| e.info().clone())
            .unwrap_or_default();
        Self {
            engines,
            next: AtomicUsize::new(0),
            info,
        }
    }

    /// Model facts used for validation.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// Number of engines.
    pub fn len(&self) -> usize {
        self.engines.len()
    }

    /// Whether the pool has no engine.
    pub fn is_empty(&self) -> bool {
        self.engines.is_empty()
    }

    /// Whether at least one engine is ready.
    pub fn any_ready(&self) -> bool {
        self.engines.iter().any(|e| e.ready())
    }

    /// The next ready engine and its index, round robin; `None` when none is ready.
    pub fn pick(&self) -> Option<(usize, Arc<dyn Engine>)> {
        let n = self.engines.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.engines[i].ready())
            .map(|i| (i, self.engines[i].clone()))
    }
}
