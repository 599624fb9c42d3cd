//! Keeping one registration alive under a lease.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::sync::watch as state_channel;
use tokio_util::sync::CancellationToken;

use crate::{Backoff, DiscoveryError, EtcdTarget, Limits, Registration, bounded, connect};

/// Where a registration stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationState {
    /// Not stored yet (first attempt under way).
    Pending,
    /// Stored under lease `lease`, kept alive.
    Registered {
        /// The etcd lease id.
        lease: i64,
    },
    /// The last attempt failed (the message says why); retrying with backoff.
    Retrying(String),
    /// Revoked by [`Registrar::shutdown`] (or the revoke failed and the lease runs out).
    Stopped,
}

/// A registration kept alive by a background task; see [`register`].
#[derive(Debug)]
pub struct Registrar {
    state: state_channel::Receiver<RegistrationState>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Register `record` under `target` with a lease of `ttl` and keep it registered until
/// [`Registrar::shutdown`] (dropping the [`Registrar`] also stops the task, which then revokes
/// in the background while the runtime lives; a killed process's lease runs out within `ttl`).
/// Needs a Tokio runtime.
///
/// The task: connect, grant a lease of `ttl` (rounded up to whole seconds), put the record
/// under it when the key is free or ours (else [`DiscoveryError::Conflict`]), send a keep-alive
/// every `ttl / 3`; any failure (etcd unreachable, a call over [`Limits::call_timeout`], the
/// lease gone) is logged and the whole sequence starts again after a backoff.
///
/// # Errors
/// [`DiscoveryError::Record`] at once for a record that can never be stored (invalid id, empty
/// worker, over [`Limits::max_record_bytes`]) or a `ttl` under 1 s or over 1 day.
pub fn register(
    target: EtcdTarget,
    record: Registration,
    ttl: Duration,
    limits: Limits,
) -> Result<Registrar, DiscoveryError> {
    let value = record.encode(limits.max_record_bytes)?;
    if ttl < Duration::from_secs(1) || ttl > Duration::from_secs(86_400) {
        return Err(DiscoveryError::Record(format!(
            "lease TTL {ttl:?} is outside 1 s to 1 day"
        )));
    }
    let ttl_secs = i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(1);
    let (tx, rx) = state_channel::channel(RegistrationState::Pending);
    let stop = CancellationToken::new();
    let job = Job {
        key: target.worker_key(&record.id),
        target,
        id: record.id,
        value,
        ttl_secs,
        limits,
        state: tx,
        stop: stop.clone(),
    };
    let task = tokio::spawn(job.run());
    Ok(Registrar {
        state: rx,
        stop,
        task: Some(task),
    })
}

impl Registrar {
    /// The current state.
    pub fn state(&self) -> RegistrationState {
        self.state.borrow().clone()
    }

    /// Wait until the record is stored (or `limit` passes). Returns whether it is.
    pub async fn wait_registered(&mut self, limit: Duration) -> bool {
        let registered = self
            .state
            .wait_for(|s| matches!(s, RegistrationState::Registered { .. }));
        matches!(tokio::time::timeout(limit, registered).await, Ok(Ok(_)))
    }

    /// Stop keeping the registration alive and revoke its lease (bounded by
    /// [`Limits::call_timeout`]), so every watcher sees the worker go at once.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Job {
    target: EtcdTarget,
    key: String,
    id: String,
    value: Vec<u8>,
    ttl_secs: i64,
    limits: Limits,
    state: state_channel::Sender<RegistrationState>,
    stop: CancellationToken,
}

impl Job {
    async fn run(self) {
        let mut backoff = Backoff::new(&self.limits);
        // The lease of the last session: a key still under it is ours to take over.
        let mut last_lease: Option<i64> = None;
        let mut client: Option<etcd_client::Client> = None;
        loop {
            if self.stop.is_cancelled() {
                break;
            }
            let outcome = self
                .session(&mut client, &mut last_lease, &mut backoff)
                .await;
            match outcome {
                Ok(()) => return,
                Err(e) => {
                    let delay = backoff.step();
                    tracing::warn!(
                        worker = %self.id,
                        etcd = %self.target,
                        error = %e,
                        retry_in = ?delay,
                        "etcd registration not held; retrying"
                    );
                    let _ = self.state.send(RegistrationState::Retrying(e.to_string()));
                    if matches!(
                        e,
                        DiscoveryError::Timeout {
                            call: "connect",
                            ..
                        }
                    ) || matches!(e, DiscoveryError::Etcd(_))
                    {
                        client = None;
                    }
                    tokio::select! {
                        () = self.stop.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        // Stopped between sessions: a lease of an earlier session may still be alive.
        if let (Some(lease), Some(mut c)) = (last_lease, client) {
            let _ = bounded("revoke", self.limits.call_timeout, c.lease_revoke(lease)).await;
        }
        let _ = self.state.send(RegistrationState::Stopped);
    }

    /// Grant, put, keep alive until stopped (`Ok`, lease revoked) or until something fails.
    async fn session(
        &self,
        client: &mut Option<etcd_client::Client>,
        last_lease: &mut Option<i64>,
        backoff: &mut Backoff,
    ) -> Result<(), DiscoveryError> {
        let t = self.limits.call_timeout;
        let c = match client {
            Some(c) => c,
            None => client.insert(connect(&self.target, &self.limits).await?),
        };
        let lease = bounded("lease grant", t, c.lease_grant(self.ttl_secs, None))
            .await?
            .id();
        let previous = last_lease.replace(lease);
        if let Err(e) = self.put(c, lease, previous).await {
            let _ = bounded("revoke", t, c.lease_revoke(lease)).await;
            *last_lease = previous;
            return Err(e);
        }
        if let Some(old) = previous.filter(|old| *old != lease) {
            // Best effort: the old lease holds nothing of ours any more.
            let _ = bounded("revoke", t, c.lease_revoke(old)).await;
        }
        let (mut keeper, mut responses) =
            bounded("lease keep-alive", t, c.lease_keep_alive(lease)).await?;
        backoff.reset();
        tracing::info!(
            worker = %self.id,
            key = %self.key,
            lease = format_args!("{lease:x}"),
            ttl_s = self.ttl_secs,
            "registered in etcd"
        );
        let _ = self.state.send(RegistrationState::Registered { lease });
        let every = Duration::from_millis((self.ttl_secs as u64 * 1000 / 3).max(300));
        loop {
            tokio::select! {
                () = self.stop.cancelled() => {
                    let revoked = bounded("revoke", t, c.lease_revoke(lease)).await;
                    match revoked {
                        Ok(_) => tracing::info!(worker = %self.id, "etcd registration revoked"),
                        Err(e) => tracing::warn!(worker = %self.id, error = %e, "cannot revoke the etcd lease; it expires within its TTL"),
                    }
                    *last_lease = None;
                    let _ = self.state.send(RegistrationState::Stopped);
                    return Ok(());
                }
                () = tokio::time::sleep(every) => {
                    bounded("keep-alive", t, keeper.keep_alive()).await?;
                    let answer = bounded("keep-alive answer", t, responses.message()).await?;
                    match answer {
                        Some(r) if r.ttl() > 0 => {}
                        Some(_) => return Err(DiscoveryError::LeaseLost(format!("lease {lease:x} expired"))),
                        None => return Err(DiscoveryError::LeaseLost("keep-alive stream closed".into())),
                    }
                }
            }
        }
    }

    /// Put the record under `lease` when the key is free, or held by this registrant (`lease`
    /// or its previous lease `previous`).
    async fn put(
        &self,
        c: &mut etcd_client::Client,
        lease: i64,
        previous: Option<i64>,
    ) -> Result<(), DiscoveryError> {
        let t = self.limits.call_timeout;
        let put = TxnOp::put(
            self.key.clone(),
            self.value.clone(),
            Some(PutOptions::new().with_lease(lease)),
        );
        let free = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([put.clone()]);
        if bounded("put", t, c.txn(free)).await?.succeeded() {
            return Ok(());
        }
        // Taken: ours only when it is under our (previous) lease.
        for held in [Some(lease), previous].into_iter().flatten() {
            let ours = Txn::new()
                .when([Compare::lease(self.key.clone(), CompareOp::Equal, held)])
                .and_then([put.clone()]);
            if bounded("put", t, c.txn(ours)).await?.succeeded() {
                return Ok(());
            }
        }
        Err(DiscoveryError::Conflict(self.id.clone()))
    }
}
