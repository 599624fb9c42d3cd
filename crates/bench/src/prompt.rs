//! Request bodies, serialised once before the run and shared as [`Bytes`].
//!
//! Prompt `i` is `--prompt-len` token ids drawn from `SplitMix64(seed, i)`, so runs with the same
//! seed send the same bytes and different requests do not share a prefix (unless
//! `--shared-prefix`, where every request sends prompt 0). The pool holds at most
//! [`MAX_POOL`] bodies and at most [`MAX_POOL_BYTES`]; past that, request `i` reuses body
//! `i % pool_len` (the report says how many distinct prompts were sent).

use bytes::Bytes;
use serde::Serialize;

use crate::args::{BenchArgs, Format};

/// Most distinct bodies kept.
pub const MAX_POOL: usize = 16_384;
/// Most bytes of distinct bodies kept.
pub const MAX_POOL_BYTES: usize = 64 << 20;

/// SplitMix64: tiny, fast, good enough for token ids and arrival jitter (not for secrets).
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64, stream: u64) -> Self {
        Self(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `(0, 1]` (never 0, so `ln` is finite).
    pub fn next_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// The distinct request bodies of a run.
#[derive(Debug)]
pub(crate) struct Bodies {
    pool: Vec<Bytes>,
}

impl Bodies {
    /// Build up to `wanted` distinct bodies (capped as the module docs say).
    pub fn build(args: &BenchArgs, wanted: u64) -> Self {
        let first = Bytes::from(body(args, &prompt(args, 0)));
        let by_bytes = (MAX_POOL_BYTES / first.len().max(1)).max(1);
        let n = if args.shared_prefix {
            1
        } else {
            usize::try_from(wanted)
                .unwrap_or(usize::MAX)
                .clamp(1, MAX_POOL.min(by_bytes))
        };
        let mut pool = Vec::with_capacity(n);
        pool.push(first);
        let mut ids = Vec::with_capacity(args.prompt_len);
        for i in 1..n as u64 {
            fill_prompt(args, i, &mut ids);
            pool.push(Bytes::from(body(args, &ids)));
        }
        Self { pool }
    }

    /// Body for request `i` (a reference-count bump, no copy).
    pub fn get(&self, i: u64) -> Bytes {
        // `pool` is never empty and its length fits u64.
        let idx = (i % self.pool.len() as u64) as usize;
        self.pool[idx].clone()
    }

    /// Distinct bodies in the pool.
    pub fn distinct(&self) -> usize {
        self.pool.len()
    }

    /// Mean bytes of a request body over the pool.
    pub fn mean_bytes(&self) -> u64 {
        let total: usize = self.pool.iter().map(Bytes::len).sum();
        (total / self.pool.len().max(1)) as u64
    }
}

fn prompt(args: &BenchArgs, i: u64) -> Vec<u32> {
    let mut ids = Vec::with_capacity(args.prompt_len);
    fill_prompt(args, i, &mut ids);
    ids
}

fn fill_prompt(args: &BenchArgs, i: u64, ids: &mut Vec<u32>) {
    let mut rng = SplitMix64::new(args.seed, i);
    let vocab = u64::from(args.vocab_size.max(1));
    ids.clear();
    // `% vocab` keeps the value below a u32, so the cast is lossless.
    ids.extend((0..args.prompt_len).map(|_| (rng.next_u64() % vocab) as u32));
}

/// SGLang `input_ids`: the list, or packed (`--packed`).
#[derive(Serialize)]
#[serde(untagged)]
enum SglIds<'a> {
    Plain(&'a [u32]),
    Packed { b64zstd: String },
}

#[derive(Serialize)]
struct SglBody<'a> {
    input_ids: SglIds<'a>,
    sampling_params: SglSampling,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    return_logprob: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs_num: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packed_output: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    return_routed_experts: Option<bool>,
}

#[derive(Serialize)]
struct SglSampling {
    max_new_tokens: u32,
    ignore_eos: bool,
}

#[derive(Serialize)]
struct VllmBody<'a> {
    token_ids: &'a [u32],
    sampling_params: VllmSampling,
    stream: bool,
}

#[derive(Serialize)]
struct VllmSampling {
    max_tokens: u32,
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<u32>,
}

/// The JSON body for one prompt.
fn body(args: &BenchArgs, ids: &[u32]) -> Vec<u8> {
    let r = match args.format {
        Format::Sglang => serde_json::to_vec(&SglBody {
            input_ids: if args.packed {
                SglIds::Packed {
                    b64zstd: genfront_sglang_packed::codec::pack(ids),
                }
            } else {
                SglIds::Plain(ids)
            },
            sampling_params: SglSampling {
                max_new_tokens: args.max_new_tokens,
                ignore_eos: true,
            },
            stream: args.stream,
            return_logprob: args.logprobs.map(|_| true),
            top_logprobs_num: args.logprobs,
            packed_output: args.packed.then_some(true),
            return_routed_experts: args.routed_experts.then_some(true),
        }),
        Format::Vllm => serde_json::to_vec(&VllmBody {
            token_ids: ids,
            sampling_params: VllmSampling {
                max_tokens: args.max_new_tokens,
                ignore_eos: true,
                logprobs: args.logprobs,
            },
            stream: args.stream,
        }),
    };
    // Plain structs of ints and bools always serialise.
    r.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::{Value, json};

    use super::{Bodies, SplitMix64};
    use crate::args::BenchArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(extra: &[&str]) -> BenchArgs {
        let mut argv = vec!["b", "--url", "http://h:1"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).expect("parses").bench
    }

    fn json_of(b: &Bodies, i: u64) -> Value {
        serde_json::from_slice(&b.get(i)).expect("json")
    }

    #[test]
    fn packed_sglang_bodies_unpack_to_the_plain_ids() {
        let plain = args(&["--format", "sglang", "--prompt-len", "300"]);
        let packed = args(&["--format", "sglang", "--prompt-len", "300", "--packed"]);
        let a = Bodies::build(&plain, 2);
        let b = Bodies::build(&packed, 2);
        let (va, vb) = (json_of(&a, 1), json_of(&b, 1));
        assert_eq!(vb["packed_output"], json!(true));
        let text = vb["input_ids"]["b64zstd"].as_str().expect("packed");
        let ids = genfront_sglang_packed::codec::unpack(text, 1 << 20).expect("unpacks");
        let want: Vec<u32> = va["input_ids"]
            .as_array()
            .expect("ids")
            .iter()
            .filter_map(Value::as_u64)
            .map(|n| n as u32)
            .collect();
        assert_eq!(ids, want);
        assert!(b.mean_bytes() < a.mean_bytes());
        assert_eq!(packed.target(), "http://h:1/generate_packed");
        let vllm = args(&["--format", "vllm", "--packed"]);
        assert!(vllm.validate().is_err());
    }

    #[test]
    fn routed_experts_flag_asks_sglang_and_is_refused_for_vllm() {
        let a = args(&["--format", "sglang", "--routed-experts"]);
        assert!(a.validate().is_ok());
        assert_eq!(
            json_of(&Bodies::build(&a, 1), 0)["return_routed_experts"],
            json!(true)
        );
        let v = args(&["--format", "vllm", "--routed-experts"]);
        assert_eq!(v.validate(), Err(crate::args::ConfigError::RoutedExperts));
    }

    #[test]
    fn sglang_body_shape() {
        let a = args(&[
            "--format",
            "sglang",
            "--prompt-len",
            "4",
            "--max-new-tokens",
            "7",
            "--stream",
            "--logprobs",
            "2",
        ]);
        let b = Bodies::build(&a, 3);
        let v = json_of(&b, 0);
        assert_eq!(v["input_ids"].as_array().map(Vec::len), Some(4));
        assert_eq!(
            v["sampling_params"],
            json!({"max_new_tokens": 7, "ignore_eos": true})
        );
        assert_eq!(v["stream"], json!(true));
        assert_eq!(v["return_logprob"], json!(true));
        assert_eq!(v["top_logprobs_num"], json!(2));
        assert!(v.get("return_routed_experts").is_none());
        assert_ne!(json_of(&b, 0)["input_ids"], json_of(&b, 1)["input_ids"]);
        assert_eq!(b.distinct(), 3);
        assert_eq!(b.get(3), b.get(0));
    }

    #[test]
    fn vllm_body_shape_and_vocab() {
        let a = args(&[
            "--format",
            "vllm",
            "--prompt-len",
            "64",
            "--vocab-size",
            "10",
        ]);
        let v = json_of(&Bodies::build(&a, 1), 0);
        assert_eq!(
            v["sampling_params"],
            json!({"max_tokens": 16, "ignore_eos": true})
        );
        assert_eq!(v["stream"], json!(false));
        assert!(v.get("return_logprob").is_none());
        let ids = v["token_ids"].as_array().expect("ids");
        assert!(ids.iter().all(|t| t.as_u64().is_some_and(|t| t < 10)));
        let a = args(&["--format", "vllm", "--logprobs", "3"]);
        assert_eq!(
            json_of(&Bodies::build(&a, 1), 0)["sampling_params"]["logprobs"],
            json!(3)
        );
    }

    #[test]
    fn shared_prefix_and_determinism() {
        let a = args(&["--format", "vllm", "--shared-prefix"]);
        assert_eq!(Bodies::build(&a, 50).distinct(), 1);
        let a = args(&["--format", "vllm", "--seed", "9"]);
        assert_eq!(Bodies::build(&a, 2).get(1), Bodies::build(&a, 2).get(1));
    }

    #[test]
    fn unit_interval() {
        let mut r = SplitMix64::new(1, 2);
        for _ in 0..1000 {
            let u = r.next_unit();
            assert!(u > 0.0 && u <= 1.0);
        }
    }
}
