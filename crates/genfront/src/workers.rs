//! Engines behind the frontend: `--worker` specs (native engine clients or sidecars) and the
//! engine a sidecar serves (`--engine`).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context as _;
use genfront_protocol::Engine;
use genfront_protocol::Handoff;
use genfront_router::{Connector, Role};

/// The router's description of an in-process mock engine in `role` (a mock prefill hands off
/// by `handoff`).
pub fn mock_spec(role: Role, handoff: Option<Handoff>) -> genfront_router::WorkerSpec {
    genfront_router::WorkerSpec {
        id: None,
        url: "mock".to_owned(),
        kind: None,
        role,
        handoff,
    }
}

/// The host of `http://host:port/…` (IPv6 kept in brackets), as decode workers reach a prefill.
fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.starts_with('[') {
        return authority
            .split_once(']')
            .map_or(authority.to_owned(), |(h, _)| format!("{h}]"));
    }
    authority
        .split_once(':')
        .map_or(authority, |(h, _)| h)
        .to_owned()
}

/// One `--worker` of `genfront serve`.
///
/// Syntax: `sglang=URL[#FACTS]`, `vllm=URL[#FACTS]` or `grpc://HOST:PORT`. `FACTS` are the
/// operator's per-worker model facts, `key=value` pairs joined by `&` (see [`WorkerFacts`]), e.g.
/// `sglang=http://h:30000#vocab_size=201088&eos_token_ids=199999,200002`. A fact given here wins
/// over what the worker reports; a fact neither given nor reported stays unknown, and the engine
/// checks it itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerSpec {
    /// `sglang=http://host:port`: an SGLang server, reached through its native HTTP API.
    Sglang(String, WorkerFacts),
    /// `vllm=http://host:port`: a vLLM server, reached through `/inference/v1/generate`.
    Vllm(String, WorkerFacts),
    /// `grpc://host:port` (or `grpcs://host:port`, TLS with `--worker-tls-*`): a genfront
    /// sidecar (it reports its engine's facts itself).
    Grpc(String),
}

/// Model facts an operator gives for one worker (the `#key=value&…` suffix of `--worker`).
/// `None` / empty: not given (the worker's report is used, else the fact is unknown).
///
/// Keys (`-` and `_` are interchangeable): `vocab_size`; `context_len` (also `context_length`,
/// `max_model_len`); `max_logprobs`; `max_num_seqs` (also `max_running_requests`);
/// `eos_token_ids` (also `eos_token_id`; comma-separated); `model` (the served name to validate
/// `model` against); `incremental_streaming` (SGLang: override the discovered
/// `incremental_streaming_output`); `routed_experts` and `sampling_mask` (vLLM's
/// `--enable-return-routed-experts` / `--return-sampling-mask`; SGLang: `sampling_mask`);
/// server features ([`genfront_protocol::EngineFeatures`]): `lora`, `reasoning`, `trace_replay`,
/// `dp_size`. Booleans are `true`/`false`/`1`/`0`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerFacts {
    /// Vocabulary size (valid ids are `0..vocab_size`).
    pub vocab_size: Option<u32>,
    /// Context length (prompt + output).
    pub context_len: Option<u32>,
    /// Most top logprobs per position.
    pub max_logprobs: Option<u32>,
    /// Most parallel samples per request.
    pub max_num_seqs: Option<u32>,
    /// EOS token ids.
    pub eos_token_ids: Vec<u32>,
    /// Served model name.
    pub model: Option<String>,
    /// SGLang streaming mode override.
    pub incremental_streaming: Option<bool>,
    /// The engine reports routed experts (vLLM server flag).
    pub routed_experts: Option<bool>,
    /// The engine reports sampling masks.
    pub sampling_mask: Option<bool>,
    /// SGLang prefill worker: its `--disaggregation-bootstrap-port` (key `bootstrap`); default:
    /// from its server info, else 8998.
    pub bootstrap_port: Option<u16>,
    /// vLLM: the server loads a tokenizer (key `tokenizer`; vLLM does not report it). Unknown:
    /// text features are left to the engine.
    pub tokenizer: Option<bool>,
    /// vLLM P/D: also send `kv_transfer_params` under `sampling_params.extra_args` (key
    /// `nest_kv_transfer_params`), for builds that ignore the top-level field.
    pub nest_kv_transfer_params: Option<bool>,
    /// Server features (keys `lora`, `reasoning`, `trace_replay`, `dp_size`); each given one
    /// overrides what the worker reports.
    pub features: genfront_protocol::EngineFeatures,
}

impl WorkerFacts {
    /// Whether no fact is given.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Parse `key=value[&key=value…]` (the part after `#`).
    ///
    /// # Errors
    /// An unknown key, a pair without `=`, or a value that does not parse.
    pub fn parse(fragment: &str) -> Result<Self, String> {
        let mut facts = Self::default();
        for pair in fragment.split('&').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("worker fact `{pair}`: expected key=value"))?;
            let (key, value) = (key.trim().replace('-', "_"), value.trim());
            let num = || {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("worker fact `{key}`: `{value}` is not a number"))
            };
            let boolean = || match value {
                "true" | "1" => Ok(true),
                "false" | "0" => Ok(false),
                _ => Err(format!("worker fact `{key}`: `{value}` is not true/false")),
            };
            match key.as_str() {
                "vocab_size" => facts.vocab_size = Some(num()?),
                "context_len" | "context_length" | "max_model_len" => {
                    facts.context_len = Some(num()?);
                }
                "max_logprobs" => facts.max_logprobs = Some(num()?),
                "max_num_seqs" | "max_running_requests" => facts.max_num_seqs = Some(num()?),
                "eos_token_ids" | "eos_token_id" => {
                    facts.eos_token_ids = value
                        .split(',')
                        .map(|id| {
                            id.trim().parse::<u32>().map_err(|_| {
                                format!("worker fact `{key}`: `{id}` is not a token id")
                            })
                        })
                        .collect::<Result<_, _>>()?;
                }
                "model" if !value.is_empty() => facts.model = Some(value.to_owned()),
                "incremental_streaming" => facts.incremental_streaming = Some(boolean()?),
                "routed_experts" => facts.routed_experts = Some(boolean()?),
                "sampling_mask" => facts.sampling_mask = Some(boolean()?),
                "tokenizer" => facts.tokenizer = Some(boolean()?),
                "nest_kv_transfer_params" => facts.nest_kv_transfer_params = Some(boolean()?),
                "lora" => facts.features.lora = Some(boolean()?),
                "reasoning" => facts.features.reasoning = Some(boolean()?),
                "trace_replay" => facts.features.trace_replay = Some(boolean()?),
                "dp_size" => facts.features.dp_size = Some(num()?),
                "bootstrap" | "bootstrap_port" => {
                    facts.bootstrap_port =
                        Some(value.parse::<u16>().map_err(|_| {
                            format!("worker fact `{key}`: `{value}` is not a port")
                        })?);
                }
                _ => {
                    return Err(format!(
                        "unknown worker fact `{key}` (known: vocab_size, context_len, max_logprobs, max_num_seqs, eos_token_ids, model, incremental_streaming, routed_experts, sampling_mask, bootstrap, tokenizer, nest_kv_transfer_params, lora, reasoning, trace_replay, dp_size)"
                    ));
                }
            }
        }
        Ok(facts)
    }

    /// SGLang client options with these facts applied.
    pub fn sglang_options(&self) -> genfront_sglang::SglangEngineOptions {
        let mut o = genfront_sglang::SglangEngineOptions {
            model: self.model.clone(),
            vocab_size: self.vocab_size,
            eos_token_ids: self.eos_token_ids.clone(),
            max_context_len: self.context_len,
            max_logprobs: self.max_logprobs,
            max_num_seqs: self.max_num_seqs,
            incremental_streaming: self.incremental_streaming,
            features: self.features.clone(),
            ..Default::default()
        };
        if let Some(m) = self.sampling_mask {
            o.sampling_mask = m;
        }
        o
    }

    /// vLLM client options with these facts applied (`model` is not used: vLLM reports its
    /// served names).
    pub fn vllm_options(&self) -> genfront_vllm::VllmEngineOptions {
        let mut o = genfront_vllm::VllmEngineOptions {
            vocab_size: self.vocab_size,
            eos_token_ids: self.eos_token_ids.clone(),
            max_logprobs: self.max_logprobs,
            max_num_seqs: self.max_num_seqs,
            max_context_len: self.context_len,
            features: self.features.clone(),
            ..Default::default()
        };
        if let Some(r) = self.routed_experts {
            o.routed_experts = r;
        }
        if let Some(m) = self.sampling_mask {
            o.sampling_mask = m;
        }
        o.tokenizer = self.tokenizer;
        if let Some(n) = self.nest_kv_transfer_params {
            o.nest_kv_transfer_params = n;
        }
        o
    }
}

impl fmt::Display for WorkerFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut pairs: Vec<String> = Vec::new();
        let mut num = |k: &str, v: Option<u32>| {
            if let Some(v) = v {
                pairs.push(format!("{k}={v}"));
            }
        };
        num("vocab_size", self.vocab_size);
        num("context_len", self.context_len);
        num("max_logprobs", self.max_logprobs);
        num("max_num_seqs", self.max_num_seqs);
        if !self.eos_token_ids.is_empty() {
            let ids: Vec<String> = self.eos_token_ids.iter().map(u32::to_string).collect();
            pairs.push(format!("eos_token_ids={}", ids.join(",")));
        }
        if let Some(m) = &self.model {
            pairs.push(format!("model={m}"));
        }
        if let Some(p) = self.bootstrap_port {
            pairs.push(format!("bootstrap={p}"));
        }
        if let Some(n) = self.features.dp_size {
            pairs.push(format!("dp_size={n}"));
        }
        for (k, v) in [
            ("tokenizer", self.tokenizer),
            ("nest_kv_transfer_params", self.nest_kv_transfer_params),
            ("lora", self.features.lora),
            ("reasoning", self.features.reasoning),
            ("trace_replay", self.features.trace_replay),
        ] {
            if let Some(v) = v {
                pairs.push(format!("{k}={v}"));
            }
        }
        for (k, v) in [
            ("incremental_streaming", self.incremental_streaming),
            ("routed_experts", self.routed_experts),
            ("sampling_mask", self.sampling_mask),
        ] {
            if let Some(v) = v {
                pairs.push(format!("{k}={v}"));
            }
        }
        f.write_str(&pairs.join("&"))
    }
}

impl FromStr for WorkerSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.starts_with("grpc://") || s.starts_with("grpcs://") {
            if s.contains('#') {
                return Err(format!(
                    "invalid worker `{s}`: a sidecar reports its engine's facts; give `#…` facts to the sidecar's --engine"
                ));
            }
            return Ok(WorkerSpec::Grpc(s.to_owned()));
        }
        let (head, facts) = match s.split_once('#') {
            Some((head, fragment)) => (
                head,
                WorkerFacts::parse(fragment).map_err(|e| format!("invalid worker `{s}`: {e}"))?,
            ),
            None => (s, WorkerFacts::default()),
        };
        let http_url = |url: &str| {
            let ok = url
                .parse::<http::Uri>()
                .ok()
                .filter(|u| matches!(u.scheme_str(), Some("http" | "https")))
                .is_some_and(|u| u.authority().is_some());
            if ok {
                Ok(url.to_owned())
            } else {
                Err(format!(
                    "invalid worker `{s}`: `{url}` is not an http:// or https:// URL with a host"
                ))
            }
        };
        match head.split_once('=') {
            Some(("sglang", url)) if !url.is_empty() => {
                Ok(WorkerSpec::Sglang(http_url(url)?, facts))
            }
            Some(("vllm", url)) if !url.is_empty() => Ok(WorkerSpec::Vllm(http_url(url)?, facts)),
            _ => Err(format!(
                "invalid worker `{s}`: expected sglang=http://HOST:PORT[#FACTS], vllm=http://HOST:PORT[#FACTS] or grpc://HOST:PORT"
            )),
        }
    }
}

impl fmt::Display for WorkerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, url, facts) = match self {
            WorkerSpec::Sglang(u, facts) => ("sglang", u, facts),
            WorkerSpec::Vllm(u, facts) => ("vllm", u, facts),
            WorkerSpec::Grpc(u) => return f.write_str(u),
        };
        write!(f, "{kind}={url}")?;
        if !facts.is_empty() {
            write!(f, "#{facts}")?;
        }
        Ok(())
    }
}

impl WorkerSpec {
    /// The native format of the engine behind this worker, when known.
    pub fn native_format(&self) -> Option<&'static str> {
        match self {
            WorkerSpec::Sglang(..) => Some("sglang"),
            WorkerSpec::Vllm(..) => Some("vllm"),
            WorkerSpec::Grpc(_) => None,
        }
    }

    /// The router's description of this worker in `role`.
    pub fn router_spec(&self, role: Role) -> genfront_router::WorkerSpec {
        let url = match self {
            WorkerSpec::Sglang(u, _) | WorkerSpec::Vllm(u, _) | WorkerSpec::Grpc(u) => u.clone(),
        };
        let handoff = match (role, self) {
            (Role::Prefill, WorkerSpec::Sglang(u, facts)) => Some(Handoff::Bootstrap {
                host: url_host(u),
                port: facts.bootstrap_port,
            }),
            (Role::Prefill, WorkerSpec::Vllm(..)) => Some(Handoff::KvTransfer),
            _ => None,
        };
        genfront_router::WorkerSpec {
            id: None,
            url,
            kind: self.native_format().map(str::to_owned),
            role,
            handoff,
        }
    }

    /// A connector the router calls (with backoff) until the worker answers.
    pub fn connector(&self) -> Connector {
        let spec = self.clone();
        Arc::new(move || {
            let spec = spec.clone();
            Box::pin(async move { spec.connect().await.map_err(|e| format!("{e:#}")) })
        })
    }

    /// As [`WorkerSpec::connector`], with the engine time limits `timeouts` around the
    /// connected engine ([`genfront_engine_http::TimedEngine`]: a hung engine ends its requests
    /// with a 504 and counts as a worker failure); `observer` is told about every timeout.
    pub fn timed_connector(
        &self,
        timeouts: genfront_engine_http::EngineTimeouts,
        observer: Option<genfront_engine_http::TimeoutObserver>,
    ) -> Connector {
        let spec = self.clone();
        Arc::new(move || {
            let spec = spec.clone();
            let observer = observer.clone();
            Box::pin(async move {
                let engine = spec.connect().await.map_err(|e| format!("{e:#}"))?;
                Ok(Arc::new(genfront_engine_http::TimedEngine::new(
                    engine, timeouts, observer,
                )) as Arc<dyn Engine>)
            })
        })
    }

    /// Connect to the worker.
    ///
    /// # Errors
    /// The worker is unreachable or does not answer its discovery calls.
    pub async fn connect(&self) -> anyhow::Result<Arc<dyn Engine>> {
        let engine: Arc<dyn Engine> = match self {
            WorkerSpec::Sglang(url, facts) => Arc::new(
                genfront_sglang::SglangEngine::connect(url, facts.sglang_options())
                    .await
                    .with_context(|| format!("cannot reach SGLang worker {url}"))?,
            ),
            WorkerSpec::Vllm(url, facts) => Arc::new(
                genfront_vllm::VllmEngine::connect(url, facts.vllm_options())
                    .await
                    .with_context(|| format!("cannot reach vLLM worker {url}"))?,
            ),
            WorkerSpec::Grpc(url) => Arc::new(
                genfront_sidecar::RemoteEngine::connect(url)
                    .await
                    .with_context(|| format!("cannot reach sidecar {url}"))?,
            ),
        };
        Ok(engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let none = WorkerFacts::default();
        assert_eq!(
            "sglang=http://h:1".parse(),
            Ok(WorkerSpec::Sglang("http://h:1".into(), none.clone()))
        );
        assert_eq!(
            "vllm=http://h:2".parse(),
            Ok(WorkerSpec::Vllm("http://h:2".into(), none.clone()))
        );
        assert_eq!(
            "grpc://h:3".parse(),
            Ok(WorkerSpec::Grpc("grpc://h:3".into()))
        );
        assert!("trt=http://h".parse::<WorkerSpec>().is_err());
        assert!("sglang=".parse::<WorkerSpec>().is_err());
        assert_eq!(WorkerSpec::Sglang("u".into(), none).to_string(), "sglang=u");
    }

    #[test]
    fn facts_parse_from_the_fragment() {
        let spec: WorkerSpec =
            "sglang=http://h:1#vocab_size=201088&eos-token-ids=199999,200002&context_length=8192"
                .parse()
                .expect("parses");
        let WorkerSpec::Sglang(url, facts) = &spec else {
            panic!("sglang spec: {spec:?}");
        };
        assert_eq!(url, "http://h:1");
        assert_eq!(facts.vocab_size, Some(201_088));
        assert_eq!(facts.eos_token_ids, [199_999, 200_002]);
        assert_eq!(facts.context_len, Some(8192));
        assert_eq!(facts.sglang_options().vocab_size, Some(201_088));
        assert_eq!(
            spec.to_string(),
            "sglang=http://h:1#vocab_size=201088&context_len=8192&eos_token_ids=199999,200002"
        );
        assert_eq!(spec.to_string().parse::<WorkerSpec>(), Ok(spec.clone()));
        let v: WorkerSpec = "vllm=http://h:2#max_logprobs=100&routed_experts=true"
            .parse()
            .expect("parses");
        let WorkerSpec::Vllm(_, facts) = &v else {
            panic!("vllm spec: {v:?}");
        };
        let o = facts.vllm_options();
        assert_eq!((o.max_logprobs, o.routed_experts), (Some(100), true));
        assert_eq!(o.vocab_size, None);
        for bad in [
            "sglang=http://h:1#vocab=3",
            "sglang=http://h:1#vocab_size=x",
            "sglang=http://h:1#vocab_size",
            "vllm=http://h:1#sampling_mask=maybe",
            "grpc://h:3#vocab_size=1",
        ] {
            assert!(bad.parse::<WorkerSpec>().is_err(), "{bad}");
        }
    }
}
