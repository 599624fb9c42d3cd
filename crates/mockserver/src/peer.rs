//! Cross-process SGLang-style KV hand-off between mock servers: a prefill mock server answers
//! `GET /_mock/room/{room}` from its process's room registry ([`room_route`]); a decode mock
//! server with `--prefill-peer` polls it ([`PeerRooms`]) instead of its own registry.

use std::time::Duration;

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use genfront_mocker::{RoomState, RoomWaiter, rooms};
use http::StatusCode;
use serde_json::json;

/// The test-control path of a room's state (`{room}`: the decimal room id).
pub const ROOM_PATH: &str = "/_mock/room/{room}";

/// How often a decode polls its prefill peer.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// `GET /_mock/room/{room}`: `{"room": N, "state": "pending"|"ready"|"failed"}` from this
/// process's registry (a room nobody published is `pending`); a room that is not a `u64` is a
/// 400.
pub(crate) async fn room_route(Path(room): Path<String>) -> Response {
    let Ok(id) = room.parse::<u64>() else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(
                json!({"error": format!("room {room:?} is not an unsigned 64-bit integer")}),
            ),
        )
            .into_response();
    };
    let state = match rooms::state(id) {
        RoomState::Pending => "pending",
        RoomState::Ready => "ready",
        RoomState::Failed => "failed",
    };
    axum::Json(json!({"room": id, "state": state})).into_response()
}

/// A decode's view of the rooms of a prefill mock server in another process: polls its
/// [`ROOM_PATH`] every [`POLL_INTERVAL`] until the room is ready or failed, and gives up as
/// `Failed` after the KV timeout. Dropping the wait stops polling (cancellation).
#[derive(Debug, Clone)]
pub(crate) struct PeerRooms {
    client: reqwest::Client,
    base: String,
    timeout: Duration,
}

impl PeerRooms {
    /// Rooms of the prefill server at `base` (`http://HOST:PORT`), waited for at most `timeout`.
    pub(crate) fn new(base: &str, timeout: Duration) -> Self {
        Self {
            client: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_owned(),
            timeout,
        }
    }
}

impl RoomWaiter for PeerRooms {
    fn wait(&self, room: u64) -> BoxFuture<'static, RoomState> {
        let client = self.client.clone();
        let url = format!("{}/_mock/room/{room}", self.base);
        let deadline = tokio::time::Instant::now() + self.timeout;
        Box::pin(async move {
            let poll = async {
                loop {
                    if let Some(state) = ask(&client, &url).await {
                        return state;
                    }
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
            };
            match tokio::time::timeout_at(deadline, poll).await {
                Ok(state) => state,
                Err(_) => {
                    tracing::warn!(
                        room,
                        "KV transfer timed out: the prefill peer never released the room"
                    );
                    RoomState::Failed
                }
            }
        })
    }
}

/// One poll: the room's final state, or `None` while pending (or the peer did not answer).
async fn ask(client: &reqwest::Client, url: &str) -> Option<RoomState> {
    let resp = client.get(url).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let doc: serde_json::Value = resp.json().await.ok()?;
    match doc.get("state")?.as_str()? {
        "ready" => Some(RoomState::Ready),
        "failed" => Some(RoomState::Failed),
        _ => None,
    }
}
