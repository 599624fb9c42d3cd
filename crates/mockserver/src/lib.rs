//! genfront's **native mock engine servers**: an HTTP server that answers exactly like an SGLang
//! (`--api sglang`) or vLLM (`--api vllm`) engine would, over one in-process
//! [`genfront_mocker::MockEngine`], with scripted engine- and HTTP-level faults. It is what
//! `genfront mocker` runs, and what sidecar / native-client tests talk to instead of a GPU.
//!
//! It is not a second implementation of either API: it is genfront's own shared handler
//! ([`genfront_frontend::app`]) restricted to one format's native routes. genfront serving a format
//! over a mock engine already answers like that engine (the client's rid / request id *is* the
//! id, abort follows the native rule, errors use the native envelopes), so this crate only adds:
//! - the route selection for one API plus SGLang's `GET /get_server_info` / `/server_info`
//!   ([`MockServer`]);
//! - an **HTTP fault layer** (`inject.rs`): an axum middleware that numbers generate requests and
//!   applies `http-status`, `drop`, `malformed` and `abort-status` faults by wrapping the
//!   response, never by forking the handler (see [`fault`] for the syntax and the wire result);
//! - an [`AbortLog`] of every native abort call received, so tests can assert that a client told
//!   the engine to abort rid X;
//! - **the engine's own fleet-control routes** (`control.rs`): the format's control routes
//!   (SGLang `/pause_generation`, `/continue_generation`, `/flush_cache`,
//!   `/update_weights_from_*`, `/init_weights_update_group`, `/update_weight_version`; vLLM
//!   `/pause`, `/resume`, `/is_paused`, `/reset_prefix_cache`, `/update_weight_version`,
//!   `/weight_info`) answered by the mock engine in the engine's own shape, not with genfront's
//!   per-worker fan-out report (the format parses, and refuses, as the engine would); once a
//!   weight version is set, SGLang's model/server info answers report it; test routes
//!   [`CONTROL_LOG_PATH`] (`GET` the recorded control calls, `DELETE` to clear) and
//!   [`CONFIG_PATH`] (`POST {"update_weights_fail": true|false|"message"}`: the weight-update
//!   failure knob, also `--update-weights-fail`; `GET` shows it with the pause state and the
//!   weight version);
//! - **P/D roles** (`--role prefill|decode`): the format plays the engine's side of the
//!   hand-off (accepts SGLang's bootstrap triple, reads vLLM's `kv_transfer_params` into
//!   `EngineRequest::pd`); a prefill server answers `GET /_mock/room/{room}` (`pending`, `ready`,
//!   `failed`) and a decode server with `--prefill-peer URL` polls it for its rooms (`peer.rs`);
//! - [`spawn`]: a server on `127.0.0.1:0` for tests, keeping the [`MockEngine`] handle
//!   (`running()`, `aborted()`, `completed()`).
//!
//! Start at [`MockServerArgs`] (flags), [`build`] / [`MockServer`] and [`serve`]; tests use
//! [`spawn`].
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use genfront_mockserver::{Api, MockServerArgs, spawn};
//!
//! let mut args = MockServerArgs::new(Api::Sglang);
//! args.zero_delay = true;
//! args.faults.push("drop@2:3".parse()?); // the 2nd /generate stream is cut after 3 chunks
//! let server = spawn(&args).await?;
//! // … point the client under test at server.base_url() …
//! assert!(server.wait_idle(std::time::Duration::from_secs(1)).await);
//! assert!(server.aborts().is_empty());
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`MockEngine`]: genfront_mocker::MockEngine

mod aborts;
mod args;
mod control;
pub mod fault;
mod info;
mod inject;
mod peer;
mod server;

pub use aborts::{AbortLog, AbortRecord};
pub use args::{
    Api, DEFAULT_CONTEXT_LEN, DEFAULT_EOS_TOKEN_ID, DEFAULT_KV_TIMEOUT, DEFAULT_MODEL,
    DEFAULT_VOCAB_SIZE, MockRole, MockServerArgs, parse_duration,
};
pub use control::{CONFIG_PATH, CONTROL_LOG_PATH, CONTROL_TIMEOUT};
pub use fault::{HttpAction, HttpFault, MockFault, ParseMockFaultError};
pub use info::VERSION;
pub use inject::MOCK_RETRY_AFTER;
pub use peer::{POLL_INTERVAL, ROOM_PATH};
pub use server::{BuildError, MockServer, SpawnedMockServer, build, serve, spawn, spawn_on};
