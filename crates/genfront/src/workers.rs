//! Engines behind the frontend: `--worker` specs (native engine clients or sidecars) and the
//! engine a sidecar serves (`--engine`).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context as _;
use genfront_protocol::Engine;
use genfront_router::{Connector, Role};

/// The router's description of an in-process mock engine.
pub fn mock_spec() -> genfront_router::WorkerSpec {
    genfront_router::WorkerSpec {
        id: None,
        url: "mock".to_owned(),
        kind: None,
        role: Role::Aggregated,
    }
}

/// One `--worker` of `genfront serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerSpec {
    /// `sglang=http://host:port`: an SGLang server, reached through its native HTTP API.
    Sglang(String),
    /// `vllm=http://host:port`: a vLLM server, reached through `/inference/v1/generate`.
    Vllm(String),
    /// `grpc://host:port`: a genfront sidecar.
    Grpc(String),
}

impl FromStr for WorkerSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.starts_with("grpc://") {
            return Ok(WorkerSpec::Grpc(s.to_owned()));
        }
        match s.split_once('=') {
            Some(("sglang", url)) if !url.is_empty() => Ok(WorkerSpec::Sglang(url.to_owned())),
            Some(("vllm", url)) if !url.is_empty() => Ok(WorkerSpec::Vllm(url.to_owned())),
            _ => Err(format!(
                "invalid worker `{s}`: expected sglang=http://HOST:PORT, vllm=http://HOST:PORT or grpc://HOST:PORT"
            )),
        }
    }
}

impl fmt::Display for WorkerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerSpec::Sglang(u) => write!(f, "sglang={u}"),
            WorkerSpec::Vllm(u) => write!(f, "vllm={u}"),
            WorkerSpec::Grpc(u) => f.write_str(u),
        }
    }
}

impl WorkerSpec {
    /// The native format of the engine behind this worker, when known.
    pub fn native_format(&self) -> Option<&'static str> {
        match self {
            WorkerSpec::Sglang(_) => Some("sglang"),
            WorkerSpec::Vllm(_) => Some("vllm"),
            WorkerSpec::Grpc(_) => None,
        }
    }

    /// The router's description of this worker in `role`.
    pub fn router_spec(&self, role: Role) -> genfront_router::WorkerSpec {
        let url = match self {
            WorkerSpec::Sglang(u) | WorkerSpec::Vllm(u) | WorkerSpec::Grpc(u) => u.clone(),
        };
        genfront_router::WorkerSpec {
            id: None,
            url,
            kind: self.native_format().map(str::to_owned),
            role,
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

    /// Connect to the worker.
    ///
    /// # Errors
    /// The worker is unreachable or does not answer its discovery calls.
    pub async fn connect(&self) -> anyhow::Result<Arc<dyn Engine>> {
        let engine: Arc<dyn Engine> = match self {
            WorkerSpec::Sglang(url) => Arc::new(
                genfront_sglang::SglangEngine::connect(
                    url,
                    genfront_sglang::SglangEngineOptions::default(),
                )
                .await
                .with_context(|| format!("cannot reach SGLang worker {url}"))?,
            ),
            WorkerSpec::Vllm(url) => Arc::new(
                genfront_vllm::VllmEngine::connect(
                    url,
                    genfront_vllm::VllmEngineOptions::default(),
                )
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
        assert_eq!(
            "sglang=http://h:1".parse(),
            Ok(WorkerSpec::Sglang("http://h:1".into()))
        );
        assert_eq!(
            "vllm=http://h:2".parse(),
            Ok(WorkerSpec::Vllm("http://h:2".into()))
        );
        assert_eq!(
            "grpc://h:3".parse(),
            Ok(WorkerSpec::Grpc("grpc://h:3".into()))
        );
        assert!("trt=http://h".parse::<WorkerSpec>().is_err());
        assert!("sglang=".parse::<WorkerSpec>().is_err());
        assert_eq!(WorkerSpec::Sglang("u".into()).to_string(), "sglang=u");
    }
}
