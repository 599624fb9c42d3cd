//! genfront's **worker discovery through etcd**: engines (or their sidecars) register under a
//! lease their registrant keeps alive; frontends watch the prefix and add and remove workers as
//! registrations come and go. Several frontends watching one prefix share one worker set.
//!
//! Layout under a prefix `P` (from `etcd://HOST:PORT[,HOST:PORT…]/P`, see [`EtcdTarget`]):
//! `P/workers/<id>` holds one [`Registration`] as JSON,
//! `{"id": "w0", "worker": "sglang=http://10.0.0.5:30000", "role": "agg"}` (`worker` is the
//! spec `genfront serve --worker` takes; unknown fields are kept, for later additions).
//!
//! Rules:
//! - A registration lives under a lease of `ttl` (whole seconds, at least 1; default 10 s)
//!   that [`register`]'s background task keeps alive every `ttl / 3`. Losing the lease or the
//!   connection makes it grant a new lease and put the record again, with exponential backoff
//!   ([`Limits::backoff_min`] … [`Limits::backoff_max`]); each state change is logged. A
//!   registrant that dies without revoking disappears from every frontend when its lease
//!   expires (at most `ttl` later); [`Registrar::shutdown`] revokes at once.
//! - The record is put only when the key is free or already held by this registrant: a live
//!   key under someone else's lease is a conflict (two registrants claiming one id); the
//!   registrant logs it and retries with backoff, so a restarted registrant takes its id over
//!   once the dead one's lease has expired.
//! - [`watch`] lists the prefix, then watches from the listed revision + 1, so no change between
//!   the two is missed. After a lost connection or a compacted watch it lists again and reports
//!   only the difference ([`DiscoveryEvent::Removed`] for what is gone, [`DiscoveryEvent::Added`]
//!   for what is new); a changed record is a removal followed by an addition.
//! - Everything is bounded: every etcd call has [`Limits::call_timeout`], a record is at most
//!   [`Limits::max_record_bytes`] (a larger or malformed value is skipped with a warning, and a
//!   worker whose record turns bad is removed), and a watch yields at most
//!   [`Limits::max_workers`] workers at once (the rest are skipped with a warning until room
//!   frees up, in key order at the next listing).
//!
//! Start at [`register`] and [`watch`].

mod record;
mod registrar;
mod target;
mod watcher;

use std::time::Duration;

pub use record::{Registration, Role, validate_id};
pub use registrar::{Registrar, RegistrationState, register};
pub use target::EtcdTarget;
pub use watcher::{DiscoveryEvent, Watcher, watch};

/// Why a discovery call failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The `etcd://` URL does not parse.
    #[error("invalid etcd URL `{url}`: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A registration that cannot be stored (bad id, too large, bad TTL).
    #[error("invalid registration: {0}")]
    Record(String),
    /// etcd answered with an error or could not be reached.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// etcd did not answer within [`Limits::call_timeout`].
    #[error("etcd did not answer {call} within {timeout:?}")]
    Timeout {
        /// Which call.
        call: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// The key is held under another registrant's live lease.
    #[error("worker id `{0}` is registered by another live registrant")]
    Conflict(String),
    /// The lease expired or the keep-alive stream closed.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// The watch stream ended or was cancelled by etcd.
    #[error("watch ended: {0}")]
    WatchEnded(String),
}

/// Bounds on discovery's etcd use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for one etcd call (connect, grant, put, get, revoke, one keep-alive round
    /// trip). Default 5 s.
    pub call_timeout: Duration,
    /// Largest registration value, in bytes. Default 16 KiB.
    pub max_record_bytes: usize,
    /// Most workers one watch yields at once. Default 1024.
    pub max_workers: usize,
    /// First delay before a retry after a failure; doubled per failure. Default 200 ms.
    pub backoff_min: Duration,
    /// Longest delay between retries. Default 5 s.
    pub backoff_max: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(5),
            max_record_bytes: 16 << 10,
            max_workers: 1024,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// Default lease TTL of a registration.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// `fut` bounded by `limit`, its timeout named `call`.
async fn bounded<T>(
    call: &'static str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, DiscoveryError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(DiscoveryError::from),
        Err(_) => Err(DiscoveryError::Timeout {
            call,
            timeout: limit,
        }),
    }
}

/// A client for `target`'s endpoints. Connecting is lazy in the channel; the HTTP/2 keep-alive
/// (every 2 s, 3 s to answer) finds a dead connection under a long-lived watch or keep-alive
/// stream. No per-request gRPC timeout (it would end watch streams): calls are bounded by
/// [`bounded`] instead.
async fn connect(
    target: &EtcdTarget,
    limits: &Limits,
) -> Result<etcd_client::Client, DiscoveryError> {
    let endpoints: Vec<String> = target
        .endpoints()
        .iter()
        .map(|e| format!("http://{e}"))
        .collect();
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(limits.call_timeout)
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(3))
        .with_keep_alive_while_idle(true);
    bounded(
        "connect",
        limits.call_timeout,
        etcd_client::Client::connect(endpoints, Some(options)),
    )
    .await
}

/// Exponential backoff between `min` and `max`.
#[derive(Debug)]
struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    fn new(limits: &Limits) -> Self {
        Self {
            next: limits.backoff_min,
            min: limits.backoff_min,
            max: limits.backoff_max.max(limits.backoff_min),
        }
    }

    /// The delay to wait now; the next one doubles.
    fn step(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let limits = Limits {
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_millis(350),
            ..Limits::default()
        };
        let mut b = Backoff::new(&limits);
        let steps: Vec<u128> = (0..4).map(|_| b.step().as_millis()).collect();
        assert_eq!(steps, [100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.step(), Duration::from_millis(100));
    }
}
