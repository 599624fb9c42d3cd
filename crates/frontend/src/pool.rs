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
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        self.pick_where(start, |_| true, true)
            .or_else(|| self.pick_where(start, |_| true, false))
    }

    /// The next engine for a request of `format`: round robin among the ready engines that
    /// natively speak it, else among all ready engines, else (none ready) as [`EnginePool::pick`].
    /// The round-robin counter advances once per call, whichever pass finds the engine.
    pub fn pick_for(&self, format: &str) -> Option<(usize, Arc<dyn Engine>)> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let native = |m: &Member| m.native.as_deref() == Some(format);
        self.pick_where(start, native, true)
            .or_else(|| self.pick_where(start, |_| true, true))
            .or_else(|| self.pick_where(start, native, false))
            .or_else(|| self.pick_where(start, |_| true, false))
    }

    fn pick_where(
        &self,
        start: usize,
        keep: impl Fn(&Member) -> bool,
        ready_only: bool,
    ) -> Option<(usize, Arc<dyn Engine>)> {
        // Among the matching engines, take the `start`-th (mod their count), so every pass is a
        // fair round robin over its own subset.
        let matching: Vec<usize> = (0..self.members.len())
            .filter(|&i| keep(&self.members[i]) && (!ready_only || self.members[i].engine.ready()))
            .collect();
        if matching.is_empty() {
            return None;
        }
        let i = matching[start % matching.len()];
        Some((i, self.members[i].engine.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use genfront_protocol::{EngineRequest, OutputStream};
    use tokio_util::sync::CancellationToken;

    use super::*;

    struct Fake(EngineInfo, AtomicBool);

    impl Engine for Fake {
        fn info(&self) -> &EngineInfo {
            &self.0
        }
        fn ready(&self) -> bool {
            self.1.load(Ordering::Relaxed)
        }
        fn generate(&self, _: EngineRequest, _: CancellationToken) -> OutputStream {
            Box::pin(futures::stream::empty())
        }
    }

    fn pool(natives: &[Option<&str>]) -> (EnginePool, Vec<Arc<Fake>>) {
        let fakes: Vec<Arc<Fake>> = natives
            .iter()
            .map(|_| Arc::new(Fake(EngineInfo::default(), AtomicBool::new(true))))
            .collect();
        let members = fakes
            .iter()
            .zip(natives)
            .map(|(f, n)| (f.clone() as Arc<dyn Engine>, n.map(str::to_owned)))
            .collect();
        (EnginePool::with_natives(members), fakes)
    }

    fn counts(p: &EnginePool, format: &str, n: usize) -> Vec<usize> {
        let mut c = vec![0; p.len()];
        for _ in 0..n {
            if let Some((i, _)) = p.pick_for(format) {
                c[i] += 1;
            }
        }
        c
    }

    #[test]
    fn round_robin_is_even_whatever_the_pool_size() {
        for size in 1..=5 {
            let (p, _) = pool(&vec![None; size]);
            assert_eq!(
                counts(&p, "sglang", size * 10),
                vec![10; size],
                "size {size}"
            );
        }
        let (p, _) = pool(&[Some("vllm"), Some("vllm")]);
        assert_eq!(
            counts(&p, "sglang", 20),
            vec![10, 10],
            "fallback pass is fair too"
        );
    }

    #[test]
    fn native_engines_are_preferred_and_readiness_respected() {
        let (p, fakes) = pool(&[Some("vllm"), Some("sglang"), Some("sglang")]);
        assert_eq!(counts(&p, "sglang", 20), vec![0, 10, 10]);
        assert_eq!(counts(&p, "vllm", 4), vec![4, 0, 0]);
        fakes[1].1.store(false, Ordering::Relaxed);
        assert_eq!(counts(&p, "sglang", 4), vec![0, 0, 4]);
        for f in &fakes {
            f.1.store(false, Ordering::Relaxed);
        }
        // None ready: still an engine (the native ones first), never a refusal.
        assert_eq!(counts(&p, "sglang", 4), vec![0, 2, 2]);
        assert!(p.pick().is_some());
    }
}
