//! Worker discovery through etcd (cargo feature `etcd`; the library is `genfront-discovery`).
//!
//! - `genfront serve --discovery etcd://HOST:PORT/PREFIX` watches `/PREFIX/workers/`: each
//!   registration becomes a router worker built from its spec, as `--worker` builds one
//!   ([`Router::add_by_spec`], with the record's id and role); a registration that goes (lease
//!   revoked or expired, key deleted, record invalid) drains that worker for the frontend's
//!   drain timeout and removes it ([`Router::remove_worker`]). A record that changes is a removal
//!   then an addition. Static `--worker`s stay as they are.
//! - `genfront register --worker SPEC --etcd URL` registers a plain engine and keeps the lease
//!   alive until SIGTERM/SIGINT, then revokes it (so frontends drop the worker at once; a
//!   killed registrant's worker goes when its lease expires, at most `--ttl` later).
//! - `genfront sidecar … --register URL --advertise grpc://HOST:PORT` does the same for the
//!   sidecar itself while it serves.
//!
//! Without the `etcd` feature these flags are refused at start-up with the build command that
//! enables them.

use std::sync::Arc;
#[cfg(feature = "etcd")]
use std::time::Duration;

use genfront_router::Router;
use tokio_util::sync::CancellationToken;

use crate::config::{RegisterArgs, SidecarArgs};
use crate::workers::WorkerSpec;

/// What to register: (etcd URL, record fields, lease TTL).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) struct Plan {
    etcd: String,
    id: String,
    worker: String,
    role: String,
    ttl: std::time::Duration,
}

impl Plan {
    /// The registration `genfront register` holds.
    pub(crate) fn for_register(args: &RegisterArgs) -> Self {
        Self {
            etcd: args.etcd.clone(),
            id: args.id.clone().unwrap_or_else(|| default_id(&args.worker)),
            worker: args.worker.to_string(),
            role: args.role.clone(),
            ttl: args.ttl,
        }
    }

    /// The registration `genfront sidecar --register` holds, if asked for.
    ///
    /// # Errors
    /// `--advertise` missing or not a `grpc://`/`grpcs://` address.
    pub(crate) fn for_sidecar(args: &SidecarArgs) -> anyhow::Result<Option<Self>> {
        let Some(etcd) = &args.register else {
            return Ok(None);
        };
        let advertise = match &args.advertise {
            Some(spec @ WorkerSpec::Grpc(_)) => spec,
            Some(other) => anyhow::bail!(
                "--advertise `{other}`: a sidecar is reached as grpc://HOST:PORT (or grpcs://HOST:PORT)"
            ),
            None => anyhow::bail!(
                "--register needs --advertise grpc://HOST:PORT (the address frontends reach this sidecar at)"
            ),
        };
        Ok(Some(Self {
            etcd: etcd.clone(),
            id: args
                .worker_id
                .clone()
                .unwrap_or_else(|| default_id(advertise)),
            worker: advertise.to_string(),
            role: args.role.clone(),
            ttl: args.register_ttl,
        }))
    }
}

/// A worker id from its kind and address: `sglang=http://10.0.0.5:30000` → `sglang-10.0.0.5-30000`,
/// `grpc://h:50051` → `grpc-h-50051` (characters outside `[A-Za-z0-9._-]` become `-`, at most
/// 128 characters).
fn default_id(spec: &WorkerSpec) -> String {
    let (kind, url) = match spec {
        WorkerSpec::Sglang(u, _) => ("sglang", u.as_str()),
        WorkerSpec::Vllm(u, _) => ("vllm", u.as_str()),
        WorkerSpec::Grpc(u) => (
            if u.starts_with("grpcs://") {
                "grpcs"
            } else {
                "grpc"
            },
            u.as_str(),
        ),
    };
    let address = url.split_once("://").map_or(url, |(_, rest)| rest);
    let address = address.trim_end_matches('/');
    let mut id: String = format!("{kind}-{address}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    id.truncate(128);
    id
}

#[cfg(feature = "etcd")]
fn role(label: &str) -> anyhow::Result<genfront_discovery::Role> {
    label.parse().map_err(|e: String| anyhow::anyhow!(e))
}

#[cfg(feature = "etcd")]
fn target(url: &str) -> anyhow::Result<genfront_discovery::EtcdTarget> {
    url.parse().map_err(anyhow::Error::from)
}

/// A registration held in etcd (kept alive in the background) until [`Held::release`].
#[derive(Debug)]
pub(crate) struct Held {
    #[cfg(feature = "etcd")]
    registrar: genfront_discovery::Registrar,
}

impl Held {
    /// Revoke the registration (bounded by the etcd call timeout), so frontends drop the worker
    /// at once.
    pub(crate) async fn release(self) {
        #[cfg(feature = "etcd")]
        self.registrar.shutdown().await;
    }
}

/// Register `plan` and keep it registered in the background (retrying with backoff, logged,
/// while etcd is unreachable) until [`Held::release`].
///
/// # Errors
/// An invalid URL, id, role or TTL; or a build without the `etcd` feature.
#[cfg(feature = "etcd")]
pub(crate) fn start(plan: Plan) -> anyhow::Result<Held> {
    let target = target(&plan.etcd)?;
    let record = genfront_discovery::Registration::new(plan.id, plan.worker, role(&plan.role)?);
    tracing::info!(worker = %record.id, spec = %record.worker, role = %record.role, etcd = %target, ttl = ?plan.ttl, "registering in etcd");
    let registrar = genfront_discovery::register(
        target,
        record,
        plan.ttl,
        genfront_discovery::Limits::default(),
    )?;
    Ok(Held { registrar })
}

/// Without the `etcd` feature: refuse.
///
/// # Errors
/// Always: this build has no etcd support.
#[cfg(not(feature = "etcd"))]
pub(crate) fn start(plan: Plan) -> anyhow::Result<Held> {
    let _ = plan;
    Err(not_built())
}

/// Follow `url`'s registrations into `router` until `shutdown` fires: added ones become workers,
/// removed ones are drained for `drain` and removed. Returns once the watch is started (it
/// retries in the background while etcd is unreachable).
///
/// # Errors
/// An invalid URL; or a build without the `etcd` feature.
#[cfg(feature = "etcd")]
pub(crate) fn follow(
    url: &str,
    router: Arc<Router>,
    drain: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let target = target(url)?;
    tracing::info!(etcd = %target, "discovering workers in etcd");
    let mut watcher = genfront_discovery::watch(target, genfront_discovery::Limits::default());
    tokio::spawn(async move {
        // Discovery id → the router's id for it (the router suffixes a taken id).
        let mut added: std::collections::HashMap<String, genfront_router::WorkerId> =
            std::collections::HashMap::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                e = watcher.next() => e,
            };
            match event {
                None => return,
                Some(genfront_discovery::DiscoveryEvent::Added(record)) => {
                    if let Some(old) = added.remove(&record.id) {
                        remove(&router, old, drain);
                    }
                    match router.add_by_spec(
                        &record.worker,
                        router_role(record.role),
                        Some(&record.id),
                    ) {
                        Ok(id) => {
                            tracing::info!(worker = %id, spec = %record.worker, role = %record.role, "discovered worker added; connecting in the background");
                            added.insert(record.id, id);
                        }
                        Err(e) => {
                            tracing::warn!(worker = %record.id, spec = %record.worker, error = %e, "cannot add a discovered worker; skipped")
                        }
                    }
                }
                Some(genfront_discovery::DiscoveryEvent::Removed(id)) => {
                    if let Some(worker) = added.remove(&id) {
                        tracing::info!(worker = %worker, "discovered worker gone; draining it");
                        remove(&router, worker, drain);
                    }
                }
            }
        }
    });
    Ok(())
}

/// Drain and remove `worker` in the background (the watch goes on meanwhile).
#[cfg(feature = "etcd")]
fn remove(router: &Arc<Router>, worker: genfront_router::WorkerId, drain: Duration) {
    let router = router.clone();
    tokio::spawn(async move {
        router.remove_worker(worker.as_str(), drain).await;
    });
}

#[cfg(feature = "etcd")]
fn router_role(role: genfront_discovery::Role) -> genfront_router::Role {
    match role {
        genfront_discovery::Role::Agg => genfront_router::Role::Aggregated,
        genfront_discovery::Role::Prefill => genfront_router::Role::Prefill,
        genfront_discovery::Role::Decode => genfront_router::Role::Decode,
    }
}

/// Without the `etcd` feature: refuse.
///
/// # Errors
/// Always: this build has no etcd support.
#[cfg(not(feature = "etcd"))]
pub(crate) fn follow(
    url: &str,
    router: Arc<Router>,
    drain: std::time::Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = (url, router, drain, shutdown);
    Err(not_built())
}

#[cfg(not(feature = "etcd"))]
fn not_built() -> anyhow::Error {
    anyhow::anyhow!(
        "this genfront was built without etcd discovery: build it with `cargo build -p genfront --features etcd` (needs protoc: Debian's protobuf-compiler)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ids_come_from_the_address() {
        let spec = |s: &str| s.parse::<WorkerSpec>().expect("spec");
        assert_eq!(
            default_id(&spec("sglang=http://10.0.0.5:30000")),
            "sglang-10.0.0.5-30000"
        );
        assert_eq!(
            default_id(&spec("vllm=http://[::1]:8000/#vocab_size=5")),
            "vllm----1--8000"
        );
        assert_eq!(default_id(&spec("grpc://h:50051")), "grpc-h-50051");
        assert_eq!(default_id(&spec("grpcs://h:1")), "grpcs-h-1");
    }

    #[test]
    fn a_sidecar_registers_only_a_grpc_address() {
        let parse = |argv: &[&str]| {
            let cli = <crate::Cli as clap::Parser>::try_parse_from(argv).expect("parses");
            let crate::Command::Sidecar(args) = cli.command else {
                panic!("sidecar")
            };
            Plan::for_sidecar(&args)
        };
        let plan = parse(&[
            "genfront",
            "sidecar",
            "--engine",
            "mock",
            "--register",
            "etcd://127.0.0.1:2379/g",
            "--advertise",
            "grpc://10.0.0.9:50051",
        ])
        .expect("valid")
        .expect("asked for");
        assert_eq!(
            (plan.id.as_str(), plan.worker.as_str(), plan.role.as_str()),
            ("grpc-10.0.0.9-50051", "grpc://10.0.0.9:50051", "agg")
        );
        assert!(
            parse(&[
                "genfront",
                "sidecar",
                "--engine",
                "mock",
                "--register",
                "etcd://127.0.0.1:2379/g",
                "--advertise",
                "sglang=http://h:1",
            ])
            .is_err()
        );
        let none = parse(&["genfront", "sidecar", "--engine", "mock"]).expect("valid");
        assert!(none.is_none());
    }
}
