//! The synthetic language model: a deterministic, self-consistent next-token distribution for any
//! token context, sampling from it, and routed-expert rows.
//!
//! Per context (a rolling hash of every token so far) the model picks an affine permutation of the
//! vocabulary, `rank ↦ (a·rank + b) mod V`, and a logprob *shape* (a Zipf-like curve over the
//! first `K` ranks plus a low, slowly falling tail for the rest). So every token id has a rank and a
//! logprob computable in O(1), candidates are distinct by construction, and no step allocates
//! anything vocabulary-sized. With probability `eos_probability` an EOS id is swapped to rank 1.

use genfront_protocol::{Candidate, PromptLogprobs, RoutedExperts, SamplingOptions, TokenLogprob};

use crate::ExpertsConfig;
use crate::hash::{combine, mix, tag, unit};

/// Number of permutation multipliers to choose from per context.
const MULTIPLIERS: u64 = 16;
/// Zipf exponents of the available logprob shapes (higher = peakier).
const ALPHAS: [f64; 8] = [0.7, 0.9, 1.1, 1.3, 1.6, 2.0, 2.5, 3.2];
/// Probability mass of all tokens outside the candidate list.
const TAIL_MASS: f64 = 0.05;
/// Logprob decrease per tail rank, so that logprobs strictly follow ranks everywhere.
const TAIL_SLOPE: f64 = 1e-7;

/// One logprob curve over ranks.
#[derive(Debug)]
struct Shape {
    /// Logprobs of ranks `0..K`, strictly decreasing.
    head: Vec<f64>,
    /// Logprob of rank `K` (the first tail rank).
    tail: f64,
}

/// Sampling parameters the model honours, resolved from [`SamplingOptions`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sampler {
    greedy: bool,
    temperature: f64,
    top_k: Option<u32>,
    top_p: f64,
    min_p: f64,
}

impl Sampler {
    pub(crate) fn new(o: &SamplingOptions) -> Self {
        Self {
            greedy: o.is_greedy(),
            temperature: o.temperature.unwrap_or(1.0),
            top_k: o
                .top_k
                .filter(|&k| k >= 1)
                .map(|k| u32::try_from(k).unwrap_or(u32::MAX)),
            top_p: o.top_p.unwrap_or(1.0),
            min_p: o.min_p.unwrap_or(0.0),
        }
    }
}

/// A sampled token and, when asked for, the sorted support set it was drawn from.
#[derive(Debug)]
pub(crate) struct Draw {
    pub(crate) token: u32,
    pub(crate) support: Option<Vec<u32>>,
}

/// The synthetic model of one engine.
#[derive(Debug)]
pub(crate) struct Model {
    vocab: u64,
    k: u64,
    seed: u64,
    eos_ids: Vec<u32>,
    eos_probability: f64,
    /// `(a, a⁻¹ mod V)` pairs with `gcd(a, V) = 1`.
    multipliers: Vec<(u64, u64)>,
    shapes: Vec<Shape>,
    experts: ExpertsConfig,
    /// Strides coprime with `num_experts`, so `start + j·stride` visits distinct experts.
    expert_strides: Vec<u64>,
}

/// The next-token distribution at one context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dist<'m> {
    model: &'m Model,
    a: u64,
    a_inv: u64,
    b: u64,
    shape: &'m Shape,
    /// `(eos id, its rank before the swap)`, when EOS was swapped to rank 0.
    eos: Option<(u32, u64)>,
}

// === impl Model ===

impl Model {
    /// Build from a validated config's parts. Never panics, even on unvalidated input.
    pub(crate) fn new(
        vocab_size: u32,
        candidates: u32,
        max_logprobs: u32,
        seed: u64,
        eos_ids: &[u32],
        eos_probability: f64,
        experts: ExpertsConfig,
    ) -> Self {
        let vocab = u64::from(vocab_size.max(1));
        let k = u64::from(candidates.max(max_logprobs).max(1)).min(vocab);
        let multipliers = (0..MULTIPLIERS)
            .map(|i| {
                let mut a = if vocab > 1 {
                    1 + mix(seed ^ mix(i)) % (vocab - 1)
                } else {
                    1
                };
                while gcd(a, vocab) != 1 {
                    a = if a + 1 >= vocab { 1 } else { a + 1 };
                }
                (a, mod_inverse(a, vocab))
            })
            .collect();
        let tail_count = vocab - k;
        let shapes = ALPHAS
            .iter()
            .map(|&alpha| {
                let head_mass = if tail_count == 0 {
                    1.0
                } else {
                    1.0 - TAIL_MASS
                };
                let weights: Vec<f64> = (0..k).map(|r| ((r + 1) as f64).powf(-alpha)).collect();
                let total: f64 = weights.iter().sum();
                let head: Vec<f64> = weights
                    .iter()
                    .map(|w| (head_mass * w / total).ln().min(0.0))
                    .collect();
                let last = head.last().copied().unwrap_or(0.0);
                let tail = if tail_count == 0 {
                    last - 1.0
                } else {
                    (TAIL_MASS / tail_count as f64).ln().min(last - 0.5)
                };
                Shape { head, tail }
            })
            .collect();
        let num_experts = u64::from(experts.num_experts.max(1));
        let expert_strides: Vec<u64> = (1..=num_experts)
            .filter(|&s| gcd(s, num_experts) == 1)
            .take(16)
            .collect();
        Self {
            vocab,
            k,
            seed,
            eos_ids: eos_ids
                .iter()
                .copied()
                .filter(|&id| u64::from(id) < vocab)
                .collect(),
            eos_probability,
            multipliers,
            shapes,
            experts,
            expert_strides,
        }
    }

    /// Number of ranked candidates per position.
    #[cfg(test)]
    pub(crate) fn candidates(&self) -> u32 {
        u32::try_from(self.k).unwrap_or(u32::MAX)
    }

    /// Context hash of the empty context.
    pub(crate) fn root(&self) -> u64 {
        combine(self.seed, tag::CONTEXT)
    }

    /// Context hash after appending `token`.
    pub(crate) fn extend(ctx: u64, token: u32) -> u64 {
        combine(ctx, u64::from(token))
    }

    /// Context hash of a whole token sequence.
    pub(crate) fn context_of(&self, tokens: &[u32]) -> u64 {
        tokens.iter().fold(self.root(), |h, &t| Self::extend(h, t))
    }

    /// The next-token distribution after context `ctx`.
    pub(crate) fn dist(&self, ctx: u64) -> Dist<'_> {
        let d = mix(ctx ^ tag::DIST);
        let (a, a_inv) = self.multipliers[(d % MULTIPLIERS) as usize % self.multipliers.len()];
        let b = mix(d) % self.vocab;
        let shape = &self.shapes[((d >> 40) as usize) % self.shapes.len()];
        let mut dist = Dist {
            model: self,
            a,
            a_inv,
            b,
            shape,
            eos: None,
        };
        let e = combine(ctx, tag::EOS);
        if !self.eos_ids.is_empty() && unit(e) < self.eos_probability {
            let id = self.eos_ids[(mix(e) % self.eos_ids.len() as u64) as usize];
            dist.eos = Some((id, dist.perm_inv(id)));
        }
        dist
    }

    /// Draw the next token at `ctx`. `u` in `[0, 1)` is the draw for this step (unused when greedy);
    /// tokens in `suppressed` (sorted) are never chosen unless every candidate is suppressed.
    /// `scratch` is reused between steps to avoid per-token allocation.
    pub(crate) fn sample(
        &self,
        dist: &Dist<'_>,
        sampler: &Sampler,
        u: f64,
        suppressed: &[u32],
        want_support: bool,
        scratch: &mut Vec<(u64, f64)>,
    ) -> Draw {
        let allowed = |t: u32| suppressed.binary_search(&t).is_err();
        let fallback = Draw {
            token: dist.token_at(0),
            support: want_support.then(|| vec![dist.token_at(0)]),
        };
        if sampler.greedy {
            return (0..self.k)
                .map(|r| dist.token_at(r))
                .find(|&t| allowed(t))
                .map_or(fallback, |token| Draw {
                    token,
                    support: want_support.then(|| vec![token]),
                });
        }
        let limit = sampler.top_k.map_or(self.k, |k| u64::from(k).min(self.k));
        let temperature = if sampler.temperature.is_finite() && sampler.temperature > 0.0 {
            sampler.temperature
        } else {
            1.0
        };
        scratch.clear();
        let mut reference = None;
        for r in 0..self.k {
            if scratch.len() as u64 >= limit {
                break;
            }
            if !allowed(dist.token_at(r)) {
                continue;
            }
            let lp = dist.logprob_at(r);
            let top = *reference.get_or_insert(lp);
            let w = ((lp - top) / temperature).exp();
            // min-p, relative to the best surviving weight (which is 1); weights only fall.
            if !scratch.is_empty() && w < sampler.min_p {
                break;
            }
            scratch.push((r, w));
        }
        if scratch.is_empty() {
            return fallback;
        }
        // top-p: the smallest prefix (ranks are in decreasing weight order) holding `top_p`.
        let total: f64 = scratch.iter().map(|&(_, w)| w).sum();
        let mut cum = 0.0;
        let mut keep = scratch.len();
        for (i, &(_, w)) in scratch.iter().enumerate() {
            cum += w;
            if cum >= sampler.top_p * total {
                keep = i + 1;
                break;
            }
        }
        scratch.truncate(keep);
        let kept: f64 = scratch.iter().map(|&(_, w)| w).sum();
        let target = u * kept;
        let mut cum = 0.0;
        let mut chosen = scratch[scratch.len() - 1].0;
        for &(r, w) in scratch.iter() {
            cum += w;
            if cum > target {
                chosen = r;
                break;
            }
        }
        let support = want_support.then(|| {
            let mut ids: Vec<u32> = scratch.iter().map(|&(r, _)| dist.token_at(r)).collect();
            ids.sort_unstable();
            ids
        });
        Draw {
            token: dist.token_at(chosen),
            support,
        }
    }

    /// Prompt logprobs for positions `start..prompt.len()` (`start <= prompt.len()`), each from the
    /// context `prompt[..i]`; position 0 has none.
    pub(crate) fn prompt_logprobs(
        &self,
        prompt: &[u32],
        start: u32,
        top_k: u32,
        selected: &[u32],
    ) -> PromptLogprobs {
        let first = (start as usize).min(prompt.len());
        let mut entries = Vec::with_capacity(prompt.len() - first);
        let mut ctx = self.root();
        for (i, &token) in prompt.iter().enumerate() {
            if i >= first {
                entries.push((i > 0).then(|| self.dist(ctx).token_logprob(token, top_k, selected)));
            }
            ctx = Self::extend(ctx, token);
        }
        PromptLogprobs {
            start: u32::try_from(first).unwrap_or(u32::MAX),
            entries,
            first_text: None,
            first_token_id: None,
        }
    }

    /// An empty routed-experts block of this model's shape.
    pub(crate) fn experts_block(&self, rows: usize) -> RoutedExperts {
        let e = self.experts;
        RoutedExperts {
            num_layers: e.num_layers,
            top_k: e.top_k,
            ids: Vec::with_capacity(rows * e.num_layers as usize * e.top_k as usize),
        }
    }

    /// Append the expert row of the forward pass at the position whose context (including that
    /// position's token) hashes to `ctx`.
    pub(crate) fn push_expert_row(&self, ctx: u64, out: &mut RoutedExperts) {
        let num_experts = u64::from(self.experts.num_experts.max(1));
        let top_k = u64::from(self.experts.top_k).min(num_experts);
        let base = combine(ctx, tag::EXPERTS);
        for layer in 0..self.experts.num_layers {
            let h = combine(base, u64::from(layer));
            let start = h % num_experts;
            let stride = self
                .expert_strides
                .get(((h >> 32) % self.expert_strides.len().max(1) as u64) as usize)
                .copied()
                .unwrap_or(1);
            for j in 0..top_k {
                let id = (start + j * stride) % num_experts;
                out.ids.push(i32::try_from(id).unwrap_or(i32::MAX));
            }
        }
    }

    /// Routed experts for prompt positions `start..prompt.len()`.
    pub(crate) fn prompt_experts(&self, prompt: &[u32], start: u32) -> RoutedExperts {
        let first = (start as usize).min(prompt.len());
        let mut out = self.experts_block(prompt.len() - first);
        let mut ctx = self.root();
        for (i, &token) in prompt.iter().enumerate() {
            ctx = Self::extend(ctx, token);
            if i >= first {
                self.push_expert_row(ctx, &mut out);
            }
        }
        out
    }
}

// === impl Dist ===

impl Dist<'_> {
    fn perm(&self, rank: u64) -> u64 {
        (self.a * rank + self.b) % self.model.vocab
    }

    fn perm_inv(&self, token: u32) -> u64 {
        let v = self.model.vocab;
        let t = u64::from(token) % v;
        (self.a_inv * ((t + v - self.b) % v)) % v
    }

    /// The token at 0-based `rank` (`rank < vocab`).
    pub(crate) fn token_at(&self, rank: u64) -> u32 {
        let id = match self.eos {
            Some((eos, _)) if rank == 0 => u64::from(eos),
            Some((_, eos_rank)) if rank == eos_rank => self.perm(0),
            _ => self.perm(rank),
        };
        // `id < vocab <= u32::MAX + 1`, and vocab comes from a u32, so this never saturates.
        u32::try_from(id).unwrap_or(u32::MAX)
    }

    /// The 0-based rank of `token` (`token < vocab`).
    pub(crate) fn rank_of(&self, token: u32) -> u64 {
        match self.eos {
            Some((eos, _)) if token == eos => 0,
            Some((_, eos_rank)) if u64::from(token) == self.perm(0) => eos_rank,
            _ => self.perm_inv(token),
        }
    }

    /// The logprob at 0-based `rank`: strictly decreasing in `rank`, always `<= 0`.
    pub(crate) fn logprob_at(&self, rank: u64) -> f64 {
        match self.shape.head.get(rank as usize) {
            Some(&lp) if rank < self.model.k => lp,
            _ => self.shape.tail - TAIL_SLOPE * (rank.saturating_sub(self.model.k)) as f64,
        }
    }

    /// `token` with its logprob and 1-based rank.
    pub(crate) fn candidate(&self, token: u32) -> Candidate {
        let rank = self.rank_of(token);
        Candidate {
            token_id: token,
            logprob: self.logprob_at(rank),
            rank: Some(rank_1(rank)),
            text: None,
        }
    }

    /// The best `k` tokens (fewer if the vocabulary is smaller), best first.
    pub(crate) fn top(&self, k: u32) -> Vec<Candidate> {
        let n = u64::from(k).min(self.model.vocab);
        (0..n)
            .map(|r| Candidate {
                token_id: self.token_at(r),
                logprob: self.logprob_at(r),
                rank: Some(rank_1(r)),
                text: None,
            })
            .collect()
    }

    /// Full logprob report for `token` at this position.
    pub(crate) fn token_logprob(&self, token: u32, top_k: u32, selected: &[u32]) -> TokenLogprob {
        let c = self.candidate(token);
        TokenLogprob {
            token_id: token,
            logprob: c.logprob,
            rank: c.rank,
            top: self.top(top_k),
            selected: selected.iter().map(|&t| self.candidate(t)).collect(),
            text: None,
        }
    }
}

fn rank_1(rank: u64) -> u32 {
    u32::try_from(rank + 1).unwrap_or(u32::MAX)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Inverse of `a` modulo `m` (`gcd(a, m) = 1`); 0 when `m <= 1`.
fn mod_inverse(a: u64, m: u64) -> u64 {
    if m <= 1 {
        return 0;
    }
    let (mut old_r, mut r) = (i128::from(a), i128::from(m));
    let (mut old_s, mut s) = (1i128, 0i128);
    while r != 0 {
        let q = old_r / r;
        (old_r, r) = (r, old_r - q * r);
        (old_s, s) = (s, old_s - q * s);
    }
    u64::try_from(old_s.rem_euclid(i128::from(m))).unwrap_or(0)
}

#[cfg(test)]
mod tests;
