//! Routing policies: which of the candidate workers gets an engine request.
//!
//! | policy | picks | state |
//! |---|---|---|
//! | `round_robin` | the next candidate in turn | a counter |
//! | `random` | a uniformly random candidate | none |
//! | `least_load` | the candidate with the fewest in-flight tokens (prompt + requested new tokens), then requests | none |
//! | `power_of_two` | the less loaded (in-flight tokens) of two random candidates | none |
//! | `prefix` (default) | the worker that last served the longest shared prefix, when it covers at least `cache_threshold` of the prompt and the worker is not overloaded; else the least loaded | a bounded table of block-prefix hashes → worker |
//! | `session` | the worker the session is pinned to, re-pinned when it is `margin` requests busier than the least loaded; requests without a session key fall back to `prefix` | a bounded table of session key → worker |
//!
//! **Prefix affinity is keyed on token content, never on prompt length**: the prompt is cut into
//! blocks of `block_tokens` ids and each block-prefix (blocks `0..=i`, seeded by the cache salt)
//! is hashed. The longest block-prefix already in the table names the worker most likely to hold
//! it in its prefix cache. Parallel samples (`n > 1`), batch rows sharing a prompt, and GRPO
//! groups sent as separate requests therefore land on one worker, while a system prompt shared by
//! every group covers too little of each prompt (below `cache_threshold`) to pull all groups to
//! one worker. The load bound (as SGLang's cache-aware router): the affine worker is skipped when
//! its in-flight requests exceed both `min + balance_abs` and `min × balance_rel`, where `min` is
//! the least loaded candidate's — then the request *spills* to the least loaded.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rand::Rng;

use crate::metrics::RouterMetrics;
use crate::worker::{Worker, WorkerId};

/// Which policy a role uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    /// Next candidate in turn.
    RoundRobin,
    /// Uniformly random.
    Random,
    /// Fewest in-flight tokens.
    LeastLoad,
    /// The less loaded of two random candidates.
    PowerOfTwo,
    /// Prefix affinity with a load bound (the default).
    #[default]
    Prefix,
    /// Session affinity (falls back to `prefix`).
    Session,
}

impl PolicyKind {
    /// The policy's name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::Random => "random",
            PolicyKind::LeastLoad => "least_load",
            PolicyKind::PowerOfTwo => "power_of_two",
            PolicyKind::Prefix => "prefix",
            PolicyKind::Session => "session",
        }
    }
}

impl FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().replace('-', "_").as_str() {
            "round_robin" | "rr" => PolicyKind::RoundRobin,
            "random" => PolicyKind::Random,
            "least_load" | "least_loaded" => PolicyKind::LeastLoad,
            "power_of_two" | "p2c" => PolicyKind::PowerOfTwo,
            "prefix" | "cache_aware" => PolicyKind::Prefix,
            "session" => PolicyKind::Session,
            other => {
                return Err(format!(
                    "unknown policy `{other}`: expected round_robin, random, least_load, power_of_two, prefix or session"
                ));
            }
        })
    }
}

/// Most block-prefix hashes one prompt keeps in full (see `Policy::chain`): past it, every
/// `stride`-th block-prefix, so a long prompt costs a bounded number of table entries.
const MAX_CHAIN: usize = 128;

/// Tuning of the `prefix` and `session` policies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AffinityConfig {
    /// Tokens per hashed block (`--prefix-block-tokens`). Default 16.
    pub block_tokens: usize,
    /// Share of the prompt a matched prefix must cover to follow it (`--prefix-cache-threshold`).
    /// Default 0.5.
    pub cache_threshold: f64,
    /// Load bound, absolute part: in-flight requests above the least loaded (`--balance-abs`).
    /// Default 32.
    pub balance_abs: u64,
    /// Load bound, relative part: multiple of the least loaded's in-flight requests
    /// (`--balance-rel`). Default 1.5.
    pub balance_rel: f64,
    /// Most block hashes remembered (`--prefix-table-size`); the oldest half is forgotten when
    /// full. Default 262,144.
    pub table_capacity: usize,
    /// A session is re-pinned when its worker has this many more in-flight requests than the
    /// least loaded (`--session-margin`). Default 8.
    pub session_margin: u64,
    /// Most sessions remembered. Default 65,536.
    pub session_capacity: usize,
}

impl Default for AffinityConfig {
    fn default() -> Self {
        Self {
            block_tokens: 16,
            cache_threshold: 0.5,
            balance_abs: 32,
            balance_rel: 1.5,
            table_capacity: 1 << 18,
            session_margin: 8,
            session_capacity: 1 << 16,
        }
    }
}

/// What a policy sees of one engine request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteRequest<'a> {
    /// Prompt token ids.
    pub tokens: &'a [u32],
    /// Prefix-cache namespace (cache salt / LoRA): prompts in different namespaces never share.
    pub namespace: Option<&'a str>,
    /// Session affinity key, already resolved (see [`crate::RouteContext::session_key`]).
    pub session: Option<&'a str>,
}

/// An affinity table entry: which worker, and when last used (a logical clock).
#[derive(Debug, Clone)]
struct Entry {
    worker: WorkerId,
    tick: u64,
}

/// A bounded map with "forget the oldest half" eviction.
#[derive(Debug)]
struct Table<K> {
    map: HashMap<K, Entry>,
    capacity: usize,
}

impl<K: std::hash::Hash + Eq> Table<K> {
    fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::new(),
            capacity: capacity.max(16),
        }
    }

    fn insert(&mut self, key: K, worker: WorkerId, tick: u64) {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            let mut ticks: Vec<u64> = self.map.values().map(|e| e.tick).collect();
            let mid = ticks.len() / 2;
            let (_, cut, _) = ticks.select_nth_unstable(mid);
            let cut = *cut;
            self.map.retain(|_, e| e.tick > cut);
        }
        self.map.insert(key, Entry { worker, tick });
    }
}

/// A policy instance (one per role).
#[derive(Debug)]
pub(crate) struct Policy {
    kind: PolicyKind,
    config: AffinityConfig,
    next: AtomicUsize,
    clock: AtomicU64,
    prefixes: Mutex<Table<u64>>,
    sessions: Mutex<Table<String>>,
    /// Seeded per process. foldhash, not std's SipHash: the chain hashes every prompt token
    /// (a 1 MiB prompt is 185,000 of them), and SipHash was ~14% of the frontend's CPU on such a
    /// prompt (callgrind). The table lives in one process and is keyed by a random seed, so a
    /// fast non-cryptographic hash is enough: a collision misroutes at worst, never fails.
    hasher: foldhash::fast::RandomState,
    metrics: RouterMetrics,
    /// `decision="pick"` of the non-affinity policies.
    picks: prometheus_client::metrics::counter::Counter,
}

/// Index of the least loaded candidate: fewest in-flight tokens, then requests, then the
/// earliest (rotated by `start` so ties spread).
fn least_loaded(candidates: &[Arc<Worker>], start: usize) -> usize {
    let n = candidates.len();
    (0..n)
        .map(|k| (start + k) % n)
        .min_by_key(|&i| {
            let l = candidates[i].load();
            (l.tokens(), l.requests())
        })
        .unwrap_or(0)
}

impl Policy {
    pub(crate) fn new(kind: PolicyKind, config: AffinityConfig, metrics: RouterMetrics) -> Self {
        let name = kind.name();
        match kind {
            PolicyKind::Prefix => metrics.declare_decisions(name, &["hit", "miss", "spill"]),
            PolicyKind::Session => {
                metrics.declare_decisions(name, &["hit", "miss", "spill", "repin"])
            }
            _ => {}
        }
        Self {
            kind,
            config,
            next: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            prefixes: Mutex::new(Table::new(config.table_capacity)),
            sessions: Mutex::new(Table::new(config.session_capacity)),
            hasher: foldhash::fast::RandomState::default(),
            picks: metrics.decision_counter(name, "pick"),
            metrics,
        }
    }

    pub(crate) fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// Pick one of `candidates` (non-empty) for `req`.
    pub(crate) fn pick(&self, candidates: &[Arc<Worker>], req: &RouteRequest<'_>) -> usize {
        let n = candidates.len();
        if n <= 1 {
            // Still remember the prefix, so affinity holds when more workers come up.
            if matches!(self.kind, PolicyKind::Prefix | PolicyKind::Session) && n == 1 {
                self.remember_prefix(req, &candidates[0]);
            }
            return 0;
        }
        if !matches!(self.kind, PolicyKind::Prefix | PolicyKind::Session) {
            self.picks.inc();
        }
        match self.kind {
            PolicyKind::RoundRobin => self.next.fetch_add(1, Ordering::Relaxed) % n,
            PolicyKind::Random => rand::rng().random_range(0..n),
            PolicyKind::LeastLoad => {
                least_loaded(candidates, self.next.fetch_add(1, Ordering::Relaxed))
            }
            PolicyKind::PowerOfTwo => {
                let mut rng = rand::rng();
                let a = rng.random_range(0..n);
                let mut b = rng.random_range(0..n - 1);
                if b >= a {
                    b += 1;
                }
                let key = |i: usize| {
                    let l = candidates[i].load();
                    (l.tokens(), l.requests())
                };
                if key(b) < key(a) { b } else { a }
            }
            PolicyKind::Prefix => self.pick_prefix(candidates, req),
            PolicyKind::Session => match req.session {
                Some(key) => self.pick_session(candidates, req, key),
                None => self.pick_prefix(candidates, req),
            },
        }
    }

    /// Whether `i` breaks the load bound against the least loaded candidate `min`.
    fn overloaded(&self, candidates: &[Arc<Worker>], i: usize, min: usize) -> bool {
        let busy = candidates[i].load().requests();
        let least = candidates[min].load().requests();
        busy > least.saturating_add(self.config.balance_abs)
            && (busy as f64) > (least as f64) * self.config.balance_rel
    }

    /// Block-prefix hashes of the prompt, as `(hash, tokens covered)`, shortest first: every
    /// block-prefix of a prompt of up to [`MAX_CHAIN`] blocks; for a longer prompt every
    /// `stride`-th one (a power of two, so prompts of any length share the positions of the
    /// larger stride) and the whole prompt. A 185,000-token prompt is then 91 table entries, not
    /// 11,600, at a cost of at most the longer prompt's `stride` blocks of match precision (under
    /// 1/64 of it).
    fn chain(&self, req: &RouteRequest<'_>) -> Vec<(u64, usize)> {
        let block = self.config.block_tokens.max(1);
        let blocks = req.tokens.len().div_ceil(block);
        let stride = blocks.div_ceil(MAX_CHAIN).next_power_of_two();
        let mut h = self.hasher.build_hasher();
        if let Some(ns) = req.namespace {
            h.write(ns.as_bytes());
        }
        h.write_u8(0xff);
        let mut out = Vec::with_capacity(blocks / stride + 2);
        let mut covered = 0;
        for (i, chunk) in req.tokens.chunks(block).enumerate() {
            for t in chunk {
                h.write_u32(*t);
            }
            covered += chunk.len();
            // A partial last block is its own key, so short identical prompts share too.
            if (i + 1) % stride == 0 || i + 1 == blocks {
                out.push((h.finish(), covered));
            }
        }
        out
    }

    fn remember(&self, chain: &[(u64, usize)], worker: &Arc<Worker>) {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut t) = self.prefixes.lock() {
            for (h, _) in chain {
                t.insert(*h, worker.id().clone(), tick);
            }
        }
    }

    fn remember_prefix(&self, req: &RouteRequest<'_>, worker: &Arc<Worker>) {
        let chain = self.chain(req);
        self.remember(&chain, worker);
    }

    fn pick_prefix(&self, candidates: &[Arc<Worker>], req: &RouteRequest<'_>) -> usize {
        let name = self.kind.name();
        let chain = self.chain(req);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let min = least_loaded(candidates, start);
        let total = req.tokens.len().max(1);
        let matched = self.prefixes.lock().ok().and_then(|t| {
            chain.iter().rev().find_map(|(h, covered)| {
                let e = t.map.get(h)?;
                let i = candidates.iter().position(|w| w.id() == &e.worker)?;
                Some((i, *covered))
            })
        });
        let chosen = match matched {
            Some((i, covered))
                if (covered as f64) >= self.config.cache_threshold * total as f64 =>
            {
                if self.overloaded(candidates, i, min) {
                    self.metrics.decision(name, "spill");
                    min
                } else {
                    self.metrics.decision(name, "hit");
                    i
                }
            }
            _ => {
                self.metrics.decision(name, "miss");
                min
            }
        };
        self.remember(&chain, &candidates[chosen]);
        chosen
    }

    fn pick_session(&self, candidates: &[Arc<Worker>], req: &RouteRequest<'_>, key: &str) -> usize {
        let name = self.kind.name();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let min = least_loaded(candidates, start);
        let pinned = self.sessions.lock().ok().and_then(|t| {
            let e = t.map.get(key)?;
            candidates.iter().position(|w| w.id() == &e.worker)
        });
        let chosen = match pinned {
            Some(i) => {
                let busy = candidates[i].load().requests();
                let least = candidates[min].load().requests();
                if busy > least.saturating_add(self.config.session_margin) {
                    self.metrics.decision(name, "repin");
                    min
                } else {
                    self.metrics.decision(name, "hit");
                    i
                }
            }
            None => {
                // A new session starts where its prompt's prefix is (if anywhere).
                self.metrics.decision(name, "miss");
                self.pick_prefix_quiet(candidates, req, min)
            }
        };
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut t) = self.sessions.lock() {
            t.insert(key.to_owned(), candidates[chosen].id().clone(), tick);
        }
        self.remember_prefix(req, &candidates[chosen]);
        chosen
    }

    /// Prefix choice without counting a decision (used inside `session`).
    fn pick_prefix_quiet(
        &self,
        candidates: &[Arc<Worker>],
        req: &RouteRequest<'_>,
        min: usize,
    ) -> usize {
        let chain = self.chain(req);
        let total = req.tokens.len().max(1);
        let matched = self.prefixes.lock().ok().and_then(|t| {
            chain.iter().rev().find_map(|(h, covered)| {
                let e = t.map.get(h)?;
                let i = candidates.iter().position(|w| w.id() == &e.worker)?;
                Some((i, *covered))
            })
        });
        match matched {
            Some((i, covered))
                if (covered as f64) >= self.config.cache_threshold * total as f64
                    && !self.overloaded(candidates, i, min) =>
            {
                i
            }
            _ => min,
        }
    }
}

/// The session key of a client rid: the rid with RL frameworks' turn/retry suffixes (`_t<n>`,
/// `_r<n>`, repeated) stripped, so every turn and retry of one rollout shares a key.
pub fn rid_lineage(rid: &str) -> &str {
    let mut s = rid;
    loop {
        let Some(pos) = s.rfind('_') else { return s };
        let tail = &s[pos + 1..];
        let is_suffix = tail.len() >= 2
            && matches!(tail.as_bytes()[0], b't' | b'r')
            && tail[1..].bytes().all(|b| b.is_ascii_digit());
        if !is_suffix || pos == 0 {
            return s;
        }
        s = &s[..pos];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lineage_strips_turn_and_retry_suffixes() {
        assert_eq!(rid_lineage("rollout-7_t3"), "rollout-7");
        assert_eq!(rid_lineage("rollout-7_t3_r1"), "rollout-7");
        assert_eq!(rid_lineage("rollout-7_x3"), "rollout-7_x3");
        assert_eq!(rid_lineage("rollout_t"), "rollout_t");
        assert_eq!(rid_lineage("_t1"), "_t1");
        assert_eq!(rid_lineage("plain"), "plain");
    }

    #[test]
    fn long_prompts_keep_a_bounded_chain_that_still_matches_across_lengths() {
        let p = Policy::new(
            PolicyKind::Prefix,
            AffinityConfig::default(),
            RouterMetrics::default(),
        );
        let req = |tokens: &[u32]| -> Vec<(u64, usize)> {
            p.chain(&RouteRequest {
                tokens,
                namespace: None,
                session: None,
            })
        };
        // Short prompts: every block-prefix, the partial last block included.
        let short: Vec<u32> = (0..40).collect();
        let c = req(&short);
        assert_eq!(c.iter().map(|e| e.1).collect::<Vec<_>>(), [16, 32, 40]);
        // A 185,496-token prompt: a bounded chain ending with the whole prompt.
        let long: Vec<u32> = (0..185_496).collect();
        let c = req(&long);
        assert!(c.len() <= MAX_CHAIN + 1, "{} entries", c.len());
        assert_eq!(c.last().map(|e| e.1), Some(long.len()));
        // A prompt sharing the first 100,000 tokens (another stride) shares an entry that
        // covers all of that prefix but less than 1/64 of the longer prompt.
        let mut other = long[..100_000].to_vec();
        other.extend(900_000..900_500u32);
        let d = req(&other);
        let shared = c
            .iter()
            .filter(|e| d.contains(e))
            .map(|e| e.1)
            .max()
            .unwrap_or(0);
        assert!(
            shared <= 100_000 && shared >= 100_000 - long.len() / 64,
            "{shared}"
        );
        // A different first token shares nothing.
        let mut changed = long.clone();
        changed[0] = 7;
        assert!(req(&changed).iter().all(|e| !c.contains(e)));
    }

    #[test]
    fn policy_names_parse() {
        for k in [
            PolicyKind::RoundRobin,
            PolicyKind::Random,
            PolicyKind::LeastLoad,
            PolicyKind::PowerOfTwo,
            PolicyKind::Prefix,
            PolicyKind::Session,
        ] {
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
        }
        assert!("length".parse::<PolicyKind>().is_err());
    }
}
