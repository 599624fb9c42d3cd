//! Following the registrations under a prefix.

use std::collections::BTreeMap;

use etcd_client::{EventType, GetOptions, WatchOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{Backoff, DiscoveryError, EtcdTarget, Limits, Registration, bounded, connect};

/// Events buffered between the watch task and its reader.
const EVENT_BUFFER: usize = 256;

/// A change in the registered worker set.
#[derive(Debug, Clone, PartialEq)]
pub enum DiscoveryEvent {
    /// A worker registered (or re-registered with a changed record, after its
    /// [`DiscoveryEvent::Removed`]).
    Added(Registration),
    /// The worker with this id is gone: its registrant revoked its lease, the lease expired, the
    /// key was deleted, or its record became invalid.
    Removed(String),
}

/// The events of one watched prefix; see [`watch`]. Dropping it stops the watch.
#[derive(Debug)]
pub struct Watcher {
    events: mpsc::Receiver<DiscoveryEvent>,
    stop: CancellationToken,
}

impl Watcher {
    /// The next change; `None` only after the watch task stopped (never while the watcher is
    /// alive: etcd outages are retried inside).
    pub async fn next(&mut self) -> Option<DiscoveryEvent> {
        self.events.recv().await
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Follow the registrations under `target`'s prefix. Needs a Tokio runtime.
///
/// The first events describe every registered worker ([`DiscoveryEvent::Added`] each); later
/// ones the changes. The task lists the prefix, watches from the listed revision + 1, and
/// after a failure (etcd unreachable, the watch cancelled or compacted, a call over
/// [`Limits::call_timeout`]) logs it, waits a backoff and lists again, reporting only the
/// difference from what it reported before.
pub fn watch(target: EtcdTarget, limits: Limits) -> Watcher {
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let stop = CancellationToken::new();
    let job = WatchJob {
        prefix: target.workers_prefix(),
        target,
        limits,
        known: BTreeMap::new(),
        events: tx,
    };
    tokio::spawn(job.run(stop.clone()));
    Watcher { events: rx, stop }
}

struct WatchJob {
    target: EtcdTarget,
    prefix: String,
    limits: Limits,
    /// What the reader has been told: id → record.
    known: BTreeMap<String, Registration>,
    events: mpsc::Sender<DiscoveryEvent>,
}

/// The reader went away: stop.
struct Closed;

impl WatchJob {
    async fn run(mut self, stop: CancellationToken) {
        let mut backoff = Backoff::new(&self.limits);
        loop {
            let session = tokio::select! {
                () = stop.cancelled() => return,
                r = self.session(&mut backoff) => r,
            };
            let e = match session {
                Ok(Closed) => return,
                Err(e) => e,
            };
            let delay = backoff.step();
            tracing::warn!(etcd = %self.target, error = %e, retry_in = ?delay, "etcd discovery watch interrupted; listing again after the backoff");
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Largest gRPC message a listing or a watch answer may be: every allowed record with its
    /// key, plus headroom.
    fn max_message(&self) -> usize {
        (self.limits.max_workers + 1)
            .saturating_mul(self.limits.max_record_bytes + 512)
            .saturating_add(64 << 10)
    }

    /// List, report the difference, then follow the watch until it fails (`Err`) or the reader
    /// is gone (`Ok(Closed)`).
    async fn session(&mut self, backoff: &mut Backoff) -> Result<Closed, DiscoveryError> {
        let t = self.limits.call_timeout;
        let client = connect(&self.target, &self.limits).await?;
        let mut kv = client
            .kv_client()
            .max_decoding_message_size(self.max_message());
        let cap = i64::try_from(self.limits.max_workers.saturating_add(1)).unwrap_or(i64::MAX);
        let listing = bounded(
            "list",
            t,
            kv.get(
                self.prefix.clone(),
                Some(GetOptions::new().with_prefix().with_limit(cap)),
            ),
        )
        .await?;
        let revision = listing.header().map_or(0, |h| h.revision());
        let mut listed = BTreeMap::new();
        for entry in listing.kvs() {
            if listed.len() >= self.limits.max_workers {
                tracing::warn!(
                    max_workers = self.limits.max_workers,
                    "more registrations than the worker limit; the rest are skipped"
                );
                break;
            }
            if let Some(r) = self.decode(entry.key(), entry.value()) {
                listed.insert(r.id.clone(), r);
            }
        }
        if let Err(Closed) = self.reconcile(listed).await {
            return Ok(Closed);
        }
        let mut watch_client = client
            .watch_client()
            .max_decoding_message_size(self.max_message());
        let mut stream = bounded(
            "watch",
            t,
            watch_client.watch(
                self.prefix.clone(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            ),
        )
        .await?;
        backoff.reset();
        tracing::info!(etcd = %self.target, workers = self.known.len(), revision, "watching etcd registrations");
        loop {
            let Some(answer) = stream.message().await? else {
                return Err(DiscoveryError::WatchEnded(
                    "the server closed the stream".into(),
                ));
            };
            if answer.canceled() {
                let why = if answer.compact_revision() > 0 {
                    format!("compacted up to revision {}", answer.compact_revision())
                } else {
                    format!("cancelled: {}", answer.cancel_reason())
                };
                return Err(DiscoveryError::WatchEnded(why));
            }
            for event in answer.events() {
                let Some(entry) = event.kv() else { continue };
                let outcome = match event.event_type() {
                    EventType::Put => {
                        let id = self.key_id(entry.key());
                        match (id, self.decode(entry.key(), entry.value())) {
                            (_, Some(r)) => self.upsert(r).await,
                            (Some(id), None) => self.remove(&id).await,
                            (None, None) => Ok(()),
                        }
                    }
                    EventType::Delete => match self.key_id(entry.key()) {
                        Some(id) => self.remove(&id).await,
                        None => Ok(()),
                    },
                };
                if let Err(Closed) = outcome {
                    return Ok(Closed);
                }
            }
        }
    }

    /// The id of a key under the prefix (`None`: not a registration key).
    fn key_id(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let id = key.strip_prefix(&self.prefix)?;
        crate::validate_id(id).ok()?;
        Some(id.to_owned())
    }

    /// A valid record from a key and its value, or `None` (logged).
    fn decode(&self, key: &[u8], value: &[u8]) -> Option<Registration> {
        let Some(id) = self.key_id(key) else {
            tracing::warn!(key = %String::from_utf8_lossy(key), "skipping a key under the workers prefix that is not /PREFIX/workers/<id>");
            return None;
        };
        match Registration::decode(&id, value, self.limits.max_record_bytes) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(worker = %id, error = %e, "skipping an invalid etcd registration");
                None
            }
        }
    }

    async fn send(&self, event: DiscoveryEvent) -> Result<(), Closed> {
        self.events.send(event).await.map_err(|_| Closed)
    }

    async fn upsert(&mut self, r: Registration) -> Result<(), Closed> {
        match self.known.get(&r.id) {
            Some(old) if *old == r => return Ok(()),
            Some(_) => {
                self.known.remove(&r.id);
                self.send(DiscoveryEvent::Removed(r.id.clone())).await?;
            }
            None if self.known.len() >= self.limits.max_workers => {
                tracing::warn!(worker = %r.id, max_workers = self.limits.max_workers, "worker limit reached; skipping a new registration");
                return Ok(());
            }
            None => {}
        }
        self.known.insert(r.id.clone(), r.clone());
        self.send(DiscoveryEvent::Added(r)).await
    }

    async fn remove(&mut self, id: &str) -> Result<(), Closed> {
        if self.known.remove(id).is_some() {
            self.send(DiscoveryEvent::Removed(id.to_owned())).await?;
        }
        Ok(())
    }

    /// Report the difference between what was reported and `listed`.
    async fn reconcile(&mut self, listed: BTreeMap<String, Registration>) -> Result<(), Closed> {
        let gone: Vec<String> = self
            .known
            .iter()
            .filter(|(id, r)| listed.get(*id) != Some(*r))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove(&id).await?;
        }
        for r in listed.into_values() {
            self.upsert(r).await?;
        }
        Ok(())
    }
}
