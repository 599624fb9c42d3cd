//! [`MockConfig`]: everything that shapes a [`crate::MockEngine`]: model facts, timing, the
//! synthetic distribution, the prefix cache, routed-expert shape and scripted faults.

use std::time::Duration;

use genfront_protocol::EngineInfo;
use serde::{Deserialize, Serialize};

use crate::ScriptedFault;

/// Configuration of a [`crate::MockEngine`]. Check it with [`MockConfig::validate`] (done by
/// [`crate::MockEngine::new`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MockConfig {
    /// Model facts reported by [`genfront_protocol::Engine::info`] and enforced on requests
    /// (vocabulary, context length, EOS ids, capabilities).
    pub info: EngineInfo,
    /// Time to first token for a prompt that is fully cached (before [`Self::speedup`]).
    pub ttft_base: Duration,
    /// Extra time to first token per *uncached* prompt token (before [`Self::speedup`]).
    pub ttft_per_prompt_token: Duration,
    /// Time between two decode steps (before [`Self::speedup`]). Steps run on deadlines (the
    /// previous one plus this), so timing does not drift, and a consumer that polls late gets the
    /// tokens already due at once, as from a real engine's buffered output. tokio's timer rounds
    /// deadlines up to whole milliseconds.
    pub inter_token_latency: Duration,
    /// Divisor applied to every delay (`--mock-speedup`); finite and `> 0`. `2.0` runs twice as
    /// fast.
    pub speedup: f64,
    /// Engine salt: engines with different seeds produce different (but each deterministic)
    /// distributions and tokens.
    pub seed: u64,
    /// Probability, per decode position, that the synthetic model ranks an EOS id first, so that
    /// generations end naturally. In `[0, 1]`; `0` never ranks EOS first on purpose.
    pub eos_probability: f64,
    /// Number of ranked candidates per position (the sampling support before top-k/top-p); raised
    /// to at least `info.max_logprobs` and capped at `info.vocab_size`. At least 1.
    pub candidates: u32,
    /// Prefix cache.
    pub prefix_cache: PrefixCacheConfig,
    /// Shape of the synthetic routed-experts tensor.
    pub experts: ExpertsConfig,
    /// Scripted faults, checked in order; the first one that applies to a request wins.
    pub faults: Vec<ScriptedFault>,
    /// P/D role: `None` aggregated (a P/D leg's hand-off is ignored); `Prefill` accepts only
    /// prefill legs (answers prompt logprobs, prompt expert rows and one token, then releases
    /// the bootstrap room or returns `kv_transfer_params`); `Decode` accepts only decode legs
    /// (waits for its prefill's room, reports no prompt-side outputs).
    pub role: Option<genfront_protocol::PdRole>,
    /// The weight-update failure knob at start (see
    /// [`crate::MockEngine::set_update_weights_fail`]): `Some(message)` makes every weight update
    /// fail with the engine's failure answer (an empty message: the engine's default text).
    pub update_weights_fail: Option<String>,
}

/// Prefix cache settings: a bounded LRU of full prompt blocks shared by all requests of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefixCacheConfig {
    /// Tokens per block; only full blocks are cached. `0` disables the cache.
    pub block_size: u32,
    /// Maximum number of cached blocks; `0` disables the cache.
    pub capacity_blocks: u32,
}

impl Default for PrefixCacheConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            capacity_blocks: 4096,
        }
    }
}

/// Shape of routed experts: each forward-pass position yields `num_layers × top_k` expert ids in
/// `0..num_experts` (distinct within a layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExpertsConfig {
    /// MoE layers per row; at least 1.
    pub num_layers: u32,
    /// Experts chosen per layer; in `1..=num_experts`.
    pub top_k: u32,
    /// Experts per layer; at most `i32::MAX`.
    pub num_experts: u32,
}

impl Default for ExpertsConfig {
    fn default() -> Self {
        Self {
            num_layers: 4,
            top_k: 2,
            num_experts: 8,
        }
    }
}

/// Why a [`MockConfig`] is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MockConfigError {
    /// `info.vocab_size` is unknown (`None`) or 0: the mock must know its vocabulary.
    #[error("vocab_size must be set and at least 1")]
    EmptyVocab,
    /// `info.max_context_len` is below 2 (one prompt token plus one output token).
    #[error("max_context_len must be at least 2, got {0}")]
    ContextTooShort(u32),
    /// An EOS id is outside the vocabulary.
    #[error("eos token id {id} is outside the vocabulary (vocab_size {vocab_size})")]
    EosOutOfVocab {
        /// The offending id.
        id: u32,
        /// The configured vocabulary size.
        vocab_size: u32,
    },
    /// `speedup` is not a finite number above 0.
    #[error("speedup must be a finite number above 0, got {0}")]
    Speedup(f64),
    /// `eos_probability` is not in `[0, 1]`.
    #[error("eos_probability must be in [0, 1], got {0}")]
    EosProbability(f64),
    /// `candidates` is 0.
    #[error("candidates must be at least 1")]
    NoCandidates,
    /// The experts shape is inconsistent.
    #[error("experts: need num_layers >= 1, 1 <= top_k <= num_experts <= i32::MAX, got {0:?}")]
    Experts(ExpertsConfig),
}

// === impl MockConfig ===

impl Default for MockConfig {
    /// Realistic timing: 20 ms base TTFT, 0.02 ms per uncached prompt token, 10 ms between tokens.
    fn default() -> Self {
        Self {
            info: EngineInfo::default(),
            ttft_base: Duration::from_millis(20),
            ttft_per_prompt_token: Duration::from_micros(20),
            inter_token_latency: Duration::from_millis(10),
            speedup: 1.0,
            seed: 0,
            eos_probability: 0.01,
            candidates: 64,
            prefix_cache: PrefixCacheConfig::default(),
            experts: ExpertsConfig::default(),
            faults: Vec::new(),
            role: None,
            update_weights_fail: None,
        }
    }
}

impl MockConfig {
    /// [`MockConfig::default`] without any delay: no timer is ever armed, so streams are ready
    /// as fast as they are polled (benchmarks, and tests that need no clock).
    pub fn zero_delay() -> Self {
        Self {
            ttft_base: Duration::ZERO,
            ttft_per_prompt_token: Duration::ZERO,
            inter_token_latency: Duration::ZERO,
            ..Self::default()
        }
    }

    /// Whether every delay is zero (no timers on the hot path).
    pub fn is_zero_delay(&self) -> bool {
        self.ttft_base.is_zero()
            && self.ttft_per_prompt_token.is_zero()
            && self.inter_token_latency.is_zero()
    }

    /// Check the configuration.
    ///
    /// # Errors
    /// The first inconsistency found, as a [`MockConfigError`].
    pub fn validate(&self) -> Result<(), MockConfigError> {
        let info = &self.info;
        let vocab_size = match info.vocab_size {
            Some(v) if v > 0 => v,
            _ => return Err(MockConfigError::EmptyVocab),
        };
        if info.max_context_len < 2 {
            return Err(MockConfigError::ContextTooShort(info.max_context_len));
        }
        if let Some(&id) = info.eos_token_ids.iter().find(|&&id| id >= vocab_size) {
            return Err(MockConfigError::EosOutOfVocab { id, vocab_size });
        }
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            return Err(MockConfigError::Speedup(self.speedup));
        }
        if !(0.0..=1.0).contains(&self.eos_probability) {
            return Err(MockConfigError::EosProbability(self.eos_probability));
        }
        if self.candidates == 0 {
            return Err(MockConfigError::NoCandidates);
        }
        let e = self.experts;
        if e.num_layers == 0
            || e.top_k == 0
            || e.top_k > e.num_experts
            || e.num_experts > i32::MAX as u32
        {
            return Err(MockConfigError::Experts(e));
        }
        Ok(())
    }

    /// Time to first token for a prompt with `uncached` prompt tokens, after [`Self::speedup`].
    pub fn ttft(&self, uncached: u32) -> Duration {
        let raw = self
            .ttft_base
            .saturating_add(self.ttft_per_prompt_token.saturating_mul(uncached));
        self.scaled(raw)
    }

    /// Delay between decode steps, after [`Self::speedup`].
    pub fn itl(&self) -> Duration {
        self.scaled(self.inter_token_latency)
    }

    fn scaled(&self, d: Duration) -> Duration {
        if d.is_zero() {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(d.as_secs_f64() / self.speedup).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ExpertsConfig, MockConfig, MockConfigError};

    #[test]
    fn defaults_are_valid() {
        assert_eq!(MockConfig::default().validate(), Ok(()));
        assert_eq!(MockConfig::zero_delay().validate(), Ok(()));
        assert!(MockConfig::zero_delay().is_zero_delay());
        assert!(!MockConfig::default().is_zero_delay());
    }

    #[test]
    fn timing_model() {
        let mut c = MockConfig::default();
        assert_eq!(c.ttft(0), Duration::from_millis(20));
        assert_eq!(c.ttft(1000), Duration::from_millis(40));
        assert_eq!(c.itl(), Duration::from_millis(10));
        c.speedup = 4.0;
        assert_eq!(c.ttft(1000), Duration::from_millis(10));
        assert_eq!(c.itl(), Duration::from_micros(2500));
        c.speedup = 1e-300;
        assert_eq!(c.itl(), Duration::MAX);
        assert_eq!(MockConfig::zero_delay().ttft(u32::MAX), Duration::ZERO);
    }

    #[test]
    fn rejects_bad_values() {
        let bad = |f: fn(&mut MockConfig)| {
            let mut c = MockConfig::default();
            f(&mut c);
            c.validate()
        };
        assert_eq!(
            bad(|c| c.info.vocab_size = Some(0)),
            Err(MockConfigError::EmptyVocab)
        );
        assert_eq!(
            bad(|c| c.info.vocab_size = None),
            Err(MockConfigError::EmptyVocab)
        );
        assert_eq!(
            bad(|c| c.info.max_context_len = 1),
            Err(MockConfigError::ContextTooShort(1))
        );
        assert!(matches!(
            bad(|c| c.info.eos_token_ids = vec![400_000]),
            Err(MockConfigError::EosOutOfVocab { id: 400_000, .. })
        ));
        assert!(matches!(
            bad(|c| c.speedup = f64::NAN),
            Err(MockConfigError::Speedup(_))
        ));
        assert!(matches!(
            bad(|c| c.speedup = 0.0),
            Err(MockConfigError::Speedup(_))
        ));
        assert!(matches!(
            bad(|c| c.eos_probability = 1.5),
            Err(MockConfigError::EosProbability(_))
        ));
        assert_eq!(
            bad(|c| c.candidates = 0),
            Err(MockConfigError::NoCandidates)
        );
        assert!(matches!(
            bad(|c| c.experts = ExpertsConfig {
                num_layers: 1,
                top_k: 9,
                num_experts: 8
            }),
            Err(MockConfigError::Experts(_))
        ));
    }

    #[test]
    fn serde_round_trip_with_defaults() {
        let c: MockConfig = serde_json::from_str(r#"{"seed": 7}"#).expect("parses");
        assert_eq!(c.seed, 7);
        assert_eq!(c.candidates, MockConfig::default().candidates);
        let back: MockConfig =
            serde_json::from_value(serde_json::to_value(&c).expect("serialises")).expect("parses");
        assert_eq!(back, c);
    }
}
