//! The engine pool requests are dispatched to.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use genfront_protocol::{Engine, EngineInfo};

struct Member {
    engine: Arc<dyn Engine>,
    /// The native format this engine speaks (`"sglang"`, `"vllm"`), when it has one. Requests
    /// of that format prefer it (native pass-through); any engine can serve any format.
    native: Option<String>,
}

/// Engines of one model, picked round robin among the ready ones, preferring engines whose
/// native format is the request's format.
pub struct EnginePool {
    members: Vec<Member>,
    next: AtomicUsize,
    info: EngineInfo,
}

impl std::fmt::Debug for EnginePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let natives: Vec<_> = self.members.iter().map(|m| m.native.as_deref()).collect();
        f.debug_struct("EnginePool")
            .field("engines", &natives)
            .field("info", &self.info)
            .finish()
    }
}

impl EnginePool {
    /// A pool over `engines` with no native-format preference. Model facts come from the first
    /// engine (all serve one model); an empty pool uses [`EngineInfo::default`] and never has a
    /// ready engine.
    pub fn new(engines: Vec<Arc<dyn Engine>>) -> Self {
        Self::with_natives(engines.into_iter().map(|e| (e, None)).collect())
    }

    /// A pool over `(engine, native format)` pairs.
    pub fn with_natives(engines: Vec<(Arc<dyn Engine>, Option<String>)>) -> Self {
        let info = engines
            .first()
            .map(|(e, _)| e.info().clone())
            .unwrap_or_default();
        let members = engines
            .into_iter()
            .map(|(engine, native)| Member { engine, native })
            .collect();
        Self {
            members,
            next: AtomicUsize::new(0),
            info,
        }
    }

    /// Model facts used for validation (those of the first engine).
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// Model facts for requests of `format`: those of the first engine that natively speaks it,
    /// else [`EnginePool::info`].
    pub fn info_for(&self, format: &str) -> &EngineInfo {
        self.members
            .iter()
            .find(|m| m.native.as_deref() == Some(format))
            .map_or(&self.info, |m| m.engine.info())
    }

    /// Number of engines.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the pool has no engine.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether at least one engine is ready.
    pub fn any_ready(&self) -> bool {
        self.members.iter().any(|m| m.engine.ready())
    }

    /// The next engine and its index, round robin among the ready ones. When none is ready the
    /// next engine is tried anyway: readiness is a cached guess (one failed call or health probe
    /// can clear it), and a real request either succeeds or fails with the engine's own error —
    /// better than refusing every request until the next probe. `None` only for an empty pool.
    pub fn pick(&self) -> Option<(usize, Arc<dyn Engine>)> {
        self.pick_where(|_| true, true)
            .or_else(|| self.pick_where(|_| true, false))
    }

    /// The next engine for a request of `format`: round robin among the ready engines that
    /// natively speak it, else among all ready engines, else (none ready) as [`EnginePool::pick`].
    pub fn pick_for(&self, format: &str) -> Option<(usize, Arc<dyn Engine>)> {
        let native = |m: &Member| m.native.as_deref() == Some(format);
        self.pick_where(native, true)
            .or_else(|| self.pick_where(|_| true, true))
            .or_else(|| self.pick_where(native, false))
            .or_else(|| self.pick_where(|_| true, false))
    }

    fn pick_where(
        &self,
        keep: impl Fn(&Member) -> bool,
        ready_only: bool,
    ) -> Option<(usize, Arc<dyn Engine>)> {
        let n = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| keep(&self.members[i]) && (!ready_only || self.members[i].engine.ready()))
            .map(|i| (i, self.members[i].engine.clone()))
    }
}
