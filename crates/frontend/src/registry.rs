//! In-flight requests, for abort by id: an index, not a scan.
//!
//! Every engine request is registered under its format, its **owner** (the API key it came
//! with, see [`crate::auth`]; `0` for every request when no keys are configured) and its native
//! abort key (SGLang rid, vLLM `generate-tokens-…` id). The index is one sorted map of abort
//! keys per (format, owner), so
//!
//! - an exact-id abort (vLLM) costs one `O(log n)` lookup per id, done in chunks of
//!   [`ABORT_CHUNK`] ids per lock acquisition: a 1M-id abort never holds the lock for more than
//!   one chunk, and other requests register and finish between chunks;
//! - a prefix abort (SGLang's rule: when the given rid itself is in flight, every rid that starts
//!   with it) is one lookup and a range scan of the matching keys only, never of all in flight;
//! - an owner-scoped abort (a tenant's key) only ever looks at that owner's map, so another
//!   tenant's requests cannot match, whatever the prefix.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use genfront_format::AbortSelector;
use tokio_util::sync::CancellationToken;

/// Ids looked up per lock acquisition in an exact-id abort.
pub const ABORT_CHUNK: usize = 1024;

/// Whose requests an abort may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortScope {
    /// Every owner's (no keys configured — the engines' native rule — or the admin key).
    Everyone,
    /// Only this owner's (a tenant's API key).
    Owner(u32),
}

#[derive(Debug)]
struct Entry {
    format: &'static str,
    owner: u32,
    abort_key: String,
    cancel: CancellationToken,
}

#[derive(Debug, Default)]
struct Maps {
    entries: HashMap<u64, Entry>,
    /// (format, owner) → abort key → slots registered under it.
    index: HashMap<(&'static str, u32), BTreeMap<String, Vec<u64>>>,
}

impl Maps {
    fn remove(&mut self, slot: u64) {
        let Some(e) = self.entries.remove(&slot) else {
            return;
        };
        let k = (e.format, e.owner);
        if let Some(keys) = self.index.get_mut(&k) {
            if let Some(slots) = keys.get_mut(e.abort_key.as_str()) {
                slots.retain(|s| *s != slot);
                if slots.is_empty() {
                    keys.remove(e.abort_key.as_str());
                }
            }
            if keys.is_empty() {
                self.index.remove(&k);
            }
        }
    }

    /// The per-owner maps of `format` that `scope` reaches.
    fn maps<'a>(
        &'a self,
        format: &'a str,
        scope: AbortScope,
    ) -> impl Iterator<Item = &'a BTreeMap<String, Vec<u64>>> + 'a {
        self.index
            .iter()
            .filter(move |((f, o), _)| {
                *f == format && (scope == AbortScope::Everyone || scope == AbortScope::Owner(*o))
            })
            .map(|(_, m)| m)
    }

    fn cancel(&self, slot: u64) -> bool {
        match self.entries.get(&slot) {
            Some(e) => {
                e.cancel.cancel();
                true
            }
            None => false,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    maps: Mutex<Maps>,
    next: AtomicU64,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Maps> {
        // A panic while holding this lock cannot leave the maps inconsistent in a way that
        // matters (an entry without its index slot is only unreachable by abort), so a poisoned
        // lock is still usable.
        self.maps.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The engine requests currently in flight, indexed by format, owner and native abort key.
/// Entries remove themselves when their [`Registration`] drops.
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
        self.inner.lock().remove(self.slot);
    }
}

impl InFlight {
    /// Register an engine request of `format` owned by `owner` under `abort_key`; firing
    /// `cancel` aborts it. `O(log n)`.
    pub fn register(
        &self,
        format: &'static str,
        owner: u32,
        abort_key: String,
        cancel: CancellationToken,
    ) -> Registration {
        let mut maps = self.inner.lock();
        self.insert(&mut maps, format, owner, abort_key, cancel)
    }

    /// Add one entry under the held lock.
    fn insert(
        &self,
        maps: &mut Maps,
        format: &'static str,
        owner: u32,
        abort_key: String,
        cancel: CancellationToken,
    ) -> Registration {
        let slot = self.inner.next.fetch_add(1, Ordering::Relaxed);
        maps.index
            .entry((format, owner))
            .or_default()
            .entry(abort_key.clone())
            .or_default()
            .push(slot);
        maps.entries.insert(
            slot,
            Entry {
                format,
                owner,
                abort_key,
                cancel,
            },
        );
        Registration {
            inner: self.inner.clone(),
            slot,
        }
    }

    /// Register the engine requests `entries` (abort key, cancel token) of one client request
    /// of `format` owned by `owner`, all or none: when one of the keys is already in flight for
    /// this (format, owner), nothing is registered and that key is returned. The check and the
    /// registration happen under one lock, so of two requests racing with one key exactly one
    /// gets in. This is SGLang's rule for rids (`TokenizerManager._init_req_state`, 0.5.23:
    /// `Duplicate request ID detected: {rid}`); keys repeated within `entries` are the format's
    /// to refuse (SGLang does so while normalizing the request) and are registered as given.
    /// `O(k log n)` for `k` entries.
    pub fn register_unique(
        &self,
        format: &'static str,
        owner: u32,
        entries: Vec<(String, CancellationToken)>,
    ) -> Result<Vec<Registration>, String> {
        let mut maps = self.inner.lock();
        if let Some(keys) = maps.index.get(&(format, owner))
            && let Some((key, _)) = entries.iter().find(|(k, _)| keys.contains_key(k.as_str()))
        {
            return Err(key.clone());
        }
        Ok(entries
            .into_iter()
            .map(|(key, cancel)| self.insert(&mut maps, format, owner, key, cancel))
            .collect())
    }

    /// Cancel every in-flight request of `format` within `scope` that `selector` matches;
    /// returns how many. Cost: `O(ids × log n)` for [`AbortSelector::Exact`] (in chunks of
    /// [`ABORT_CHUNK`] ids per lock), `O(log n + matches)` for a prefix, `O(matches)` for all.
    pub fn abort(&self, format: &str, scope: AbortScope, selector: &AbortSelector) -> usize {
        match selector {
            AbortSelector::Nothing => 0,
            AbortSelector::All => {
                let maps = self.inner.lock();
                let slots: Vec<u64> = maps
                    .maps(format, scope)
                    .flat_map(|m| m.values().flatten().copied())
                    .collect();
                slots.into_iter().filter(|s| maps.cancel(*s)).count()
            }
            AbortSelector::Prefix(p) => {
                let maps = self.inner.lock();
                // SGLang 0.5.23 `TokenizerManager.abort_request`: a rid that is not itself in
                // flight is dropped before the scheduler's prefix match ever runs (one
                // tokenizer worker, the default), so "job" aborts nothing while only "job-1"
                // and "job-10" run; once "job" runs, it takes "job-1" and "job-10" with it.
                if !maps.maps(format, scope).any(|m| m.contains_key(p.as_str())) {
                    return 0;
                }
                let slots: Vec<u64> = maps
                    .maps(format, scope)
                    .flat_map(|m| {
                        m.range::<str, _>((
                            std::ops::Bound::Included(p.as_str()),
                            std::ops::Bound::Unbounded,
                        ))
                        .take_while(|(k, _)| k.starts_with(p.as_str()))
                        .flat_map(|(_, v)| v.iter().copied())
                    })
                    .collect();
                slots.into_iter().filter(|s| maps.cancel(*s)).count()
            }
            AbortSelector::Exact(ids) => {
                let mut n = 0;
                for chunk in ids.chunks(ABORT_CHUNK) {
                    let maps = self.inner.lock();
                    let mut slots = Vec::new();
                    for m in maps.maps(format, scope) {
                        for id in chunk {
                            if let Some(v) = m.get(id.as_str()) {
                                slots.extend_from_slice(v);
                            }
                        }
                    }
                    n += slots.into_iter().filter(|s| maps.cancel(*s)).count();
                }
                n
            }
        }
    }

    /// Cancel everything (graceful-shutdown deadline).
    pub fn abort_everything(&self) -> usize {
        let maps = self.inner.lock();
        maps.entries.values().for_each(|e| e.cancel.cancel());
        maps.entries.len()
    }

    /// Number of in-flight engine requests.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: AbortScope = AbortScope::Everyone;

    #[test]
    fn prefix_exact_and_all() {
        let r = InFlight::default();
        let toks: Vec<_> = (0..4).map(|_| CancellationToken::new()).collect();
        let _a = r.register("sglang", 0, "abc".into(), toks[0].clone());
        let _b = r.register("sglang", 0, "abc_1".into(), toks[1].clone());
        let _c = r.register("sglang", 0, "xabc".into(), toks[2].clone());
        let _d = r.register("vllm", 0, "abc".into(), toks[3].clone());
        assert_eq!(
            r.abort("sglang", ALL, &AbortSelector::Prefix("ab".into())),
            0,
            "no request has the rid \"ab\" itself"
        );
        assert!(toks.iter().all(|t| !t.is_cancelled()));
        assert_eq!(
            r.abort("sglang", ALL, &AbortSelector::Prefix("abc".into())),
            2
        );
        assert!(toks[0].is_cancelled() && toks[1].is_cancelled());
        assert!(!toks[2].is_cancelled() && !toks[3].is_cancelled());
        assert_eq!(
            r.abort("vllm", ALL, &AbortSelector::Exact(vec!["ab".into()])),
            0
        );
        assert_eq!(
            r.abort("vllm", ALL, &AbortSelector::Exact(vec!["abc".into()])),
            1
        );
        assert_eq!(r.abort("sglang", ALL, &AbortSelector::Nothing), 0);
        assert_eq!(r.abort("sglang", ALL, &AbortSelector::All), 3);
        assert!(toks[2].is_cancelled());
    }

    #[test]
    fn owners_only_reach_their_own() {
        let r = InFlight::default();
        let a = CancellationToken::new();
        let b = CancellationToken::new();
        let _a = r.register("sglang", 1, "0abc".into(), a.clone());
        let _b = r.register("sglang", 2, "0abd".into(), b.clone());
        for p in ["0", "0a", "0ab", "0abd"] {
            let n = r.abort(
                "sglang",
                AbortScope::Owner(1),
                &AbortSelector::Prefix(p.to_owned()),
            );
            assert_eq!(n, 0, "{p}: not owner 1's own rid in flight");
        }
        assert!(!a.is_cancelled() && !b.is_cancelled());
        r.abort(
            "sglang",
            AbortScope::Owner(1),
            &AbortSelector::Prefix("0abc".into()),
        );
        assert!(a.is_cancelled() && !b.is_cancelled());
        let exact = AbortSelector::Exact(vec!["0abd".into()]);
        assert_eq!(r.abort("sglang", AbortScope::Owner(1), &exact), 0);
        assert_eq!(
            r.abort("sglang", AbortScope::Owner(1), &AbortSelector::All),
            1
        );
        assert!(!b.is_cancelled());
        assert_eq!(r.abort("sglang", ALL, &exact), 1);
        assert!(b.is_cancelled());
    }

    #[test]
    fn same_key_twice_and_removal() {
        let r = InFlight::default();
        let t1 = CancellationToken::new();
        let t2 = CancellationToken::new();
        let a = r.register("vllm", 0, "k".into(), t1.clone());
        let _b = r.register("vllm", 0, "k".into(), t2.clone());
        drop(a);
        assert_eq!(r.len(), 1);
        assert_eq!(
            r.abort("vllm", ALL, &AbortSelector::Exact(vec!["k".into()])),
            1
        );
        assert!(t2.is_cancelled() && !t1.is_cancelled());
    }

    #[test]
    fn a_million_ids_are_cheap() {
        let r = InFlight::default();
        let t = CancellationToken::new();
        let _k = r.register("vllm", 0, "needle".into(), t.clone());
        let mut ids: Vec<String> = (0..1_000_000).map(|i| format!("id-{i}")).collect();
        ids.push("needle".into());
        let start = std::time::Instant::now();
        assert_eq!(r.abort("vllm", ALL, &AbortSelector::Exact(ids)), 1);
        assert!(t.is_cancelled());
        // A scan per id used to take seconds; the index takes well under one (debug build).
        assert!(start.elapsed() < std::time::Duration::from_secs(3));
    }

    #[test]
    fn unique_keys_refuse_one_in_flight_per_owner() {
        let r = InFlight::default();
        let t = || CancellationToken::new();
        let a = r
            .register_unique("sglang", 1, vec![("same".into(), t())])
            .expect("first");
        assert_eq!(
            r.register_unique(
                "sglang",
                1,
                vec![("other".into(), t()), ("same".into(), t())]
            )
            .err(),
            Some("same".to_owned())
        );
        assert_eq!(r.len(), 1, "all or none: `other` was not registered");
        // Another owner, another format: their own maps.
        let _b = r
            .register_unique("sglang", 2, vec![("same".into(), t())])
            .expect("owner 2");
        let _c = r
            .register_unique("vllm", 1, vec![("same".into(), t())])
            .expect("vllm");
        // A prefix or an extension of the key is another rid.
        let _d = r
            .register_unique(
                "sglang",
                1,
                vec![("sam".into(), t()), ("same_0".into(), t())],
            )
            .expect("other rids");
        drop(a);
        let _e = r
            .register_unique("sglang", 1, vec![("same".into(), t())])
            .expect("free again once the first finished");
    }

    #[test]
    fn registrations_remove_themselves() {
        let r = InFlight::default();
        let a = r.register("sglang", 0, "a".into(), CancellationToken::new());
        assert_eq!(r.len(), 1);
        drop(a);
        assert!(r.is_empty());
        assert!(r.inner.lock().index.is_empty());
    }
}
