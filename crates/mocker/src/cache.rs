//! [`PrefixCache`]: a small but real prefix cache: a hash chain over full prompt blocks, kept in a
//! bounded LRU shared by all requests of one engine.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use crate::PrefixCacheConfig;
use crate::hash::{combine, combine_bytes, tag};

/// Bounded LRU of block hashes. Each entry's hash covers its block *and every block before it*, so
/// a hit on block `i` implies the whole prefix up to `i` matches.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    block_size: usize,
    capacity: usize,
    lru: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    /// Block hash → last-use tick.
    blocks: HashMap<u64, u64>,
    /// Last-use tick → block hash (oldest first).
    by_age: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    pub(crate) fn new(config: PrefixCacheConfig) -> Self {
        Self {
            block_size: config.block_size as usize,
            capacity: config.capacity_blocks as usize,
            lru: Mutex::new(Lru::default()),
        }
    }

    fn enabled(&self) -> bool {
        self.block_size > 0 && self.capacity > 0
    }

    /// Look `prompt` up and then record its full blocks as most recently used. `salt` namespaces
    /// the cache (cache salt, LoRA). Returns the number of cached prompt tokens: the tokens of the
    /// leading blocks already present, capped at `prompt.len() - 1` (the last prompt token is
    /// always computed).
    pub(crate) fn lookup_and_insert(&self, salt: u64, prompt: &[u32]) -> u32 {
        if !self.enabled() || prompt.len() < self.block_size {
            return 0;
        }
        // Hash outside the lock; only the map operations are serialised.
        let mut h = combine(salt, tag::CACHE);
        let hashes: Vec<u64> = prompt
            .chunks_exact(self.block_size)
            .map(|block| {
                h = block.iter().fold(h, |acc, &t| combine(acc, u64::from(t)));
                h
            })
            .collect();
        let hits = {
            let mut lru = self.lru.lock().unwrap_or_else(PoisonError::into_inner);
            let hits = hashes
                .iter()
                .take_while(|h| lru.blocks.contains_key(h))
                .count();
            // Touch from the last block to the first, so a chain is evicted tail first.
            for &hash in hashes.iter().rev() {
                lru.touch(hash, self.capacity);
            }
            hits
        };
        let cached = hits * self.block_size;
        u32::try_from(cached.min(prompt.len() - 1)).unwrap_or(u32::MAX)
    }

    /// Drop every cached block (SGLang `/flush_cache`, vLLM `/reset_prefix_cache`, a weight
    /// update): the next requests miss.
    pub(crate) fn clear(&self) {
        let mut lru = self.lru.lock().unwrap_or_else(PoisonError::into_inner);
        lru.blocks.clear();
        lru.by_age.clear();
    }

    /// Number of cached blocks (for tests and metrics).
    pub(crate) fn len(&self) -> usize {
        self.lru
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .blocks
            .len()
    }
}

/// Salt for a request's cache namespace.
pub(crate) fn cache_salt(cache_salt: Option<&str>, lora: Option<&str>) -> u64 {
    let mut h = 0;
    for part in [cache_salt, lora] {
        h = match part {
            Some(s) => combine_bytes(combine(h, 1), s.as_bytes()),
            None => combine(h, 0),
        };
    }
    h
}

impl Lru {
    fn touch(&mut self, hash: u64, capacity: usize) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(old) = self.blocks.insert(hash, tick) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(tick, hash);
        while self.blocks.len() > capacity {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.blocks.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PrefixCache, cache_salt};
    use crate::PrefixCacheConfig;

    fn cache(block_size: u32, capacity_blocks: u32) -> PrefixCache {
        PrefixCache::new(PrefixCacheConfig {
            block_size,
            capacity_blocks,
        })
    }

    #[test]
    fn second_request_hits_full_blocks() {
        let c = cache(4, 100);
        let prompt: Vec<u32> = (0..10).collect();
        assert_eq!(c.lookup_and_insert(0, &prompt), 0);
        assert_eq!(c.len(), 2);
        assert_eq!(c.lookup_and_insert(0, &prompt), 8);
        // A shared prefix hits only its common blocks.
        let mut other = prompt.clone();
        other[5] = 99;
        assert_eq!(c.lookup_and_insert(0, &other), 4);
        // Another namespace misses.
        assert_eq!(c.lookup_and_insert(cache_salt(Some("x"), None), &prompt), 0);
    }

    #[test]
    fn never_the_whole_prompt() {
        let c = cache(4, 100);
        let prompt: Vec<u32> = (0..8).collect();
        c.lookup_and_insert(0, &prompt);
        assert_eq!(c.lookup_and_insert(0, &prompt), 7);
    }

    #[test]
    fn bounded_lru_evicts_oldest() {
        let c = cache(2, 3);
        let a = [1, 2, 3, 4];
        let b = [5, 6, 7, 8];
        c.lookup_and_insert(0, &a);
        c.lookup_and_insert(0, &b);
        assert_eq!(c.len(), 3);
        // `a`'s tail block went first; its head survived.
        assert_eq!(c.lookup_and_insert(0, &a), 2);
    }

    #[test]
    fn clear_drops_every_block() {
        let c = cache(4, 100);
        let prompt: Vec<u32> = (0..10).collect();
        c.lookup_and_insert(0, &prompt);
        assert_eq!(c.len(), 2);
        c.clear();
        assert_eq!(c.len(), 0);
        assert_eq!(c.lookup_and_insert(0, &prompt), 0);
    }

    #[test]
    fn disabled_or_short() {
        assert_eq!(cache(0, 10).lookup_and_insert(0, &[1, 2, 3]), 0);
        let c = cache(4, 0);
        c.lookup_and_insert(0, &[1, 2, 3, 4, 5]);
        assert_eq!(c.lookup_and_insert(0, &[1, 2, 3, 4, 5]), 0);
        assert_eq!(cache(4, 10).lookup_and_insert(0, &[1, 2]), 0);
        assert_ne!(cache_salt(Some("a"), None), cache_salt(None, Some("a")));
    }
}
