//! In-flight requests, for abort by id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use genfront_format::AbortSelector;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
struct Entry {
    format: &'static str,
    abort_key: String,
    cancel: CancellationToken,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts and
        // removes), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The engine requests currently in flight, keyed by their native abort key (SGLang rid, vLLM
/// `generate-tokens-…` id). Entries remove themselves when their [`Registration`] drops.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    inner: Arc<Inner>,
}

/// RAII registration of one engine request; dropping it removes the entry.
#[derive(Debug)]
pub struct Registration {
    inner: Arc<Inner>,
    slot: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.inner.lock().remove(&self.slot);
    }
}

impl InFlight {
    /// Register an engine request of `format` under `abort_key`; firing `cancel` aborts it.
    pub fn register(
        &self,
        format: &'static str,
        abort_key: String,
        cancel: CancellationToken,
    ) -> Registration {
        let slot = self.inner.next.fetch_add(1, Ordering::Relaxed);
        self.inner.lock().insert(
            slot,
            Entry {
                format,
                abort_key,
                cancel,
            },
        );
        Registration {
            inner: self.inner.clone(),
            slot,
        }
    }

    /// Cancel every in-flight request of `format` that `selector` matches; returns how many.
    pub fn abort(&self, format: &str, selector: &AbortSelector) -> usize {
        let map = self.inner.lock();
        let mut n = 0;
        for e in map.values().filter(|e| e.format == format) {
            let hit = match selector {
                AbortSelector::All => true,
                AbortSelector::Nothing => false,
                AbortSelector::Prefix(p) => e.abort_key.starts_with(p.as_str()),
                AbortSelector::Exact(ids) => ids.contains(&e.abort_key),
            };
            if hit {
                e.cancel.cancel();
                n += 1;
            }
        }
        n
    }

    /// Cancel everything (graceful-shutdown deadline).
    pub fn abort_everything(&self) -> usize {
        let map = self.inner.lock();
        map.values().for_each(|e| e.cancel.cancel());
        map.len()
    }

    /// Number of in-flight engine requests.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_exact_and_all() {
        let r = InFlight::default();
        let toks: Vec<_> = (0..4).map(|_| CancellationToken::new()).collect();
        let _a = r.register("sglang", "abc".into(), toks[0].clone());
        let _b = r.register("sglang", "abc_1".into(), toks[1].clone());
        let _c = r.register("sglang", "xabc".into(), toks[2].clone());
        let _d = r.register("vllm", "abc".into(), toks[3].clone());
        assert_eq!(r.abort("sglang", &AbortSelector::Prefix("abc".into())), 2);
        assert!(toks[0].is_cancelled() && toks[1].is_cancelled());
        assert!(!toks[2].is_cancelled() && !toks[3].is_cancelled());
        assert_eq!(r.abort("vllm", &AbortSelector::Exact(vec!["ab".into()])), 0);
        assert_eq!(
            r.abort("vllm", &AbortSelector::Exact(vec!["abc".into()])),
            1
        );
        assert_eq!(r.abort("sglang", &AbortSelector::Nothing), 0);
        assert_eq!(r.abort("sglang", &AbortSelector::All), 3);
        assert!(toks[2].is_cancelled());
    }

    #[test]
    fn registrations_remove_themselves() {
        let r = InFlight::default();
        let a = r.register("sglang", "a".into(), CancellationToken::new());
        assert_eq!(r.len(), 1);
        drop(a);
        assert!(r.is_empty());
    }
}
