//! The transport against a tiny HTTP server: probes, error responses with `Retry-After`, aborts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use genfront_engine_http::{
    AbortCall, AbortGuard, ClientOptions, build_client, error_from_response, probe,
};
use genfront_protocol::ErrorKind;

#[derive(Default)]
struct State {
    health: AtomicU16,
    aborts: AtomicUsize,
    auth: std::sync::Mutex<Option<String>>,
}

async fn serve() -> (String, Arc<State>) {
    let state = Arc::new(State::default());
    let s1 = Arc::clone(&state);
    let s2 = Arc::clone(&state);
    let app = Router::new()
        .route(
            "/health",
            get(move |headers: HeaderMap| {
                let s = Arc::clone(&s1);
                async move {
                    *s.auth.lock().expect("lock") = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    match s.health.load(Ordering::Relaxed) {
                        0 => StatusCode::OK,
                        c => StatusCode::from_u16(c).expect("status"),
                    }
                }
            }),
        )
        .route(
            "/busy",
            get(|| async {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "3")],
                    r#"{"error":{"message":"slow down","type":"RateLimit","code":429}}"#,
                )
            }),
        )
        .route(
            "/abort",
            post(move || {
                let s = Arc::clone(&s2);
                async move {
                    s.aborts.fetch_add(1, Ordering::Relaxed);
                    StatusCode::OK
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), state)
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn probes_and_the_api_key() {
    let (base, state) = serve().await;
    let http = build_client(
        "X",
        &ClientOptions {
            api_key: Some("k".into()),
            ..ClientOptions::default()
        },
    )
    .expect("client");
    let url = format!("{base}/health");
    assert_eq!(probe(&http, &url, Duration::from_secs(5)).await, Ok(()));
    assert_eq!(
        state.auth.lock().expect("lock").as_deref(),
        Some("Bearer k")
    );
    state.health.store(503, Ordering::Relaxed);
    let e = probe(&http, &url, Duration::from_secs(5))
        .await
        .expect_err("503");
    assert_eq!((e.kind, e.status_code), (ErrorKind::Unavailable, Some(503)));
    let e = probe(&http, "http://127.0.0.1:9/health", Duration::from_secs(5))
        .await
        .expect_err("refused");
    assert_eq!((e.kind, e.status_code), (ErrorKind::Unavailable, None));
    assert!(e.message.contains("could not be reached"), "{e:?}");
    // The cause is named first, not only reqwest's "error sending request".
    assert!(
        e.message
            .contains("could not be reached (connection refused)"),
        "{e:?}"
    );
    let bad = build_client(
        "X",
        &ClientOptions {
            api_key: Some("bad\nkey".into()),
            ..ClientOptions::default()
        },
    );
    assert_eq!(bad.err().map(|e| e.kind), Some(ErrorKind::InvalidArgument));
}

#[tokio::test]
async fn a_429_keeps_its_retry_after() {
    let (base, _) = serve().await;
    let http = build_client("X", &ClientOptions::default()).expect("client");
    let response = http.get(format!("{base}/busy")).send().await.expect("send");
    let e = error_from_response("X", response).await;
    assert_eq!(
        (e.kind, e.status_code, e.retry_after_secs),
        (ErrorKind::Overloaded, Some(429), Some(3))
    );
    assert_eq!(e.err_type.as_deref(), Some("RateLimit"));
}

#[tokio::test]
async fn abort_guard_fires_once_while_armed() {
    let (base, state) = serve().await;
    let http = build_client("X", &ClientOptions::default()).expect("client");
    let sent = Arc::new(AtomicU64::new(0));
    let call = AbortCall::new(
        http,
        Arc::from(format!("{base}/abort")),
        &serde_json::json!({"rid": "r"}),
        Duration::from_secs(5),
    )
    .counted(Arc::clone(&sent));
    let aborts = || state.aborts.load(Ordering::Relaxed);

    // Never armed (never sent): nothing to abort.
    let guard = AbortGuard::new(call.clone());
    guard.fire();
    drop(guard);
    // Armed, then disarmed (finished): nothing either.
    let guard = AbortGuard::new(call.clone());
    guard.arm();
    guard.disarm();
    drop(guard);
    assert_eq!(sent.load(Ordering::Relaxed), 0);

    // Dropped armed: one abort.
    let guard = AbortGuard::new(call.clone());
    guard.arm();
    drop(guard);
    eventually("the drop abort", || aborts() == 1).await;

    // Fired, fired again, dropped: two aborts, never more.
    let guard = AbortGuard::new(call);
    guard.arm();
    guard.fire();
    guard.fire();
    guard.fire_again();
    guard.fire_again();
    drop(guard);
    eventually("the resent abort", || aborts() == 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(aborts(), 3);
    assert_eq!(sent.load(Ordering::Relaxed), 3);
}
