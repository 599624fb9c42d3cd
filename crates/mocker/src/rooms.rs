//! In-process KV hand-off between mock prefill and decode engines (SGLang's bootstrap rooms):
//! a prefill publishes its room when it finishes; a decode for the same room waits for it.
//!
//! Process-wide (mock engines of one process share it), bounded: rooms nobody waits for are
//! forgotten after [`ROOM_TTL`]. A decode in another process learns a room's state from
//! [`state`] (the native mock server exposes it over HTTP) through a [`RoomWaiter`].

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How long a published room is kept for a decode that has not come yet.
pub const ROOM_TTL: Duration = Duration::from_secs(60);

/// A room's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomState {
    /// The prefill has not finished.
    Pending,
    /// The KV is ready.
    Ready,
    /// The prefill failed or was aborted: no KV will come.
    Failed,
}

struct Room {
    tx: watch::Sender<RoomState>,
    created: Instant,
}

static ROOMS: LazyLock<Mutex<HashMap<u64, Room>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn with_room<T>(room: u64, f: impl FnOnce(&Room) -> T) -> T {
    let mut rooms = ROOMS.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if rooms.len() > 1024 {
        rooms.retain(|_, r| now.duration_since(r.created) < ROOM_TTL);
    }
    let r = rooms.entry(room).or_insert_with(|| Room {
        tx: watch::channel(RoomState::Pending).0,
        created: now,
    });
    f(r)
}

/// Where a decode engine learns that its prefill's KV for a room is there: by default the
/// process registry ([`MockEngine::new`](crate::MockEngine::new)); a decode whose prefill runs
/// in another process is given one that asks it
/// ([`MockEngine::with_room_waiter`](crate::MockEngine::with_room_waiter)).
pub trait RoomWaiter: Send + Sync + std::fmt::Debug {
    /// Resolve when the prefill of `room` ended: `Ready` (the KV is there) or `Failed` (it will
    /// not come, including a timeout). Dropping the future stops waiting (cancellation).
    fn wait(&self, room: u64) -> futures::future::BoxFuture<'static, RoomState>;
}

/// The state of `room` in this process's registry, without registering it: `Pending` for a room
/// nobody published (yet).
pub fn state(room: u64) -> RoomState {
    ROOMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&room)
        .map_or(RoomState::Pending, |r| *r.tx.borrow())
}

/// The prefill of `room` ended with `state`.
pub(crate) fn publish(room: u64, state: RoomState) {
    with_room(room, |r| {
        r.tx.send_replace(state);
    });
}

/// Wait until the prefill of `room` ended; its final state (`Ready` or `Failed`). The room is
/// then forgotten.
pub(crate) async fn wait(room: u64) -> RoomState {
    let mut rx = with_room(room, |r| r.tx.subscribe());
    let state = match rx.wait_for(|s| *s != RoomState::Pending).await {
        Ok(s) => *s,
        Err(_) => RoomState::Failed,
    };
    ROOMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&room);
    state
}
