//! Registrations and watches against a real etcd (Debian `etcd-server`; `ETCD_BIN` names the
//! binary, default `etcd` on the PATH), started on loopback with a fresh data dir on free ports
//! and killed by the test: the first listing, a conflicting registrant that takes the id over
//! once the holder revokes, invalid records skipped (and a worker whose record turns invalid
//! removed), and both sides surviving an etcd restart.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use genfront_discovery::{
    DiscoveryEvent, EtcdTarget, Limits, Registration, RegistrationState, Role, register, watch,
};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One etcd member on loopback; killed and its data dir removed on drop.
struct Etcd {
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Etcd {
    fn start() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "genfront-discovery-crate-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut etcd = Self {
            dir,
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
        };
        etcd.spawn();
        etcd
    }

    fn spawn(&mut self) {
        let bin = std::env::var_os("ETCD_BIN").map_or_else(|| PathBuf::from("etcd"), PathBuf::from);
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("log");
        let child = Command::new(&bin)
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `{}` ({e}): this test needs a real etcd server: install Debian's etcd-server (`apt-get install etcd-server`; scripts/test.sh does) or set ETCD_BIN",
                    bin.display()
                )
            });
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn target(&self) -> EtcdTarget {
        format!("etcd://127.0.0.1:{}/crate-test", self.client_port)
            .parse()
            .expect("target")
    }

    /// A plain client, once etcd answers (at most 20 s).
    async fn client(&self) -> etcd_client::Client {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let endpoint = [format!("http://127.0.0.1:{}", self.client_port)];
            if let Ok(Ok(mut c)) = tokio::time::timeout(
                Duration::from_secs(2),
                etcd_client::Client::connect(endpoint, None),
            )
            .await
                && let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::from_secs(2), c.get("probe", None)).await
            {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not come up: {}",
                std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fast() -> Limits {
    Limits {
        call_timeout: Duration::from_secs(2),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_millis(500),
        ..Limits::default()
    }
}

/// The next event within `limit`.
async fn next(w: &mut genfront_discovery::Watcher, limit: Duration) -> DiscoveryEvent {
    tokio::time::timeout(limit, w.next())
        .await
        .expect("an event in time")
        .expect("the watch runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_watches_conflicts_and_restarts() {
    let mut etcd = Etcd::start();
    let mut raw = etcd.client().await;
    let target = etcd.target();
    let second = Duration::from_secs(5);

    // A registration made before the watch starts is in the first listing.
    let a = Registration::new("a", "sglang=http://127.0.0.1:1", Role::Prefill);
    let mut held_a = register(target.clone(), a.clone(), Duration::from_secs(5), fast())
        .expect("valid registration");
    assert!(held_a.wait_registered(second).await, "{:?}", held_a.state());
    let mut w = watch(target.clone(), fast());
    assert_eq!(next(&mut w, second).await, DiscoveryEvent::Added(a.clone()));

    // A second registrant of id `a` conflicts while the first holds it...
    let a2 = Registration::new("a", "sglang=http://127.0.0.1:2", Role::Agg);
    let mut held_a2 = register(target.clone(), a2.clone(), Duration::from_secs(5), fast())
        .expect("valid registration");
    tokio::time::sleep(Duration::from_millis(800)).await;
    match held_a2.state() {
        RegistrationState::Retrying(why) => assert!(why.contains("another live"), "{why}"),
        other => panic!("the second registrant of `a` should conflict, is {other:?}"),
    }
    // ... and takes it over once the first revokes: the watch sees it go and come back changed.
    held_a.shutdown().await;
    assert_eq!(
        next(&mut w, second).await,
        DiscoveryEvent::Removed("a".into())
    );
    assert!(
        held_a2.wait_registered(second).await,
        "{:?}",
        held_a2.state()
    );
    assert_eq!(
        next(&mut w, second).await,
        DiscoveryEvent::Added(a2.clone())
    );

    // Invalid records are skipped; a worker whose record turns invalid is removed.
    raw.put("/crate-test/workers/bad", "not json", None)
        .await
        .expect("put");
    raw.put(
        "/crate-test/workers/x",
        r#"{"id":"y","worker":"grpc://h:1"}"#,
        None,
    )
    .await
    .expect("put");
    let b = Registration::new("b", "grpc://127.0.0.1:3", Role::Decode);
    raw.put(
        "/crate-test/workers/b",
        serde_json::to_vec(&b).expect("json"),
        None,
    )
    .await
    .expect("put");
    assert_eq!(next(&mut w, second).await, DiscoveryEvent::Added(b.clone()));
    raw.put("/crate-test/workers/b", "{}", None)
        .await
        .expect("put");
    assert_eq!(
        next(&mut w, second).await,
        DiscoveryEvent::Removed("b".into())
    );

    // etcd restarts (same data dir): the registration is held again and the watch resumes,
    // reporting nothing for what did not change and the changes made after the restart.
    etcd.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    etcd.spawn();
    let mut raw = etcd.client().await;
    let c = Registration::new("c", "vllm=http://127.0.0.1:4", Role::Agg);
    raw.put(
        "/crate-test/workers/c",
        serde_json::to_vec(&c).expect("json"),
        None,
    )
    .await
    .expect("put");
    assert_eq!(
        next(&mut w, Duration::from_secs(15)).await,
        DiscoveryEvent::Added(c)
    );
    assert!(
        held_a2.wait_registered(Duration::from_secs(15)).await,
        "{:?}",
        held_a2.state()
    );
    let listed = raw.get("/crate-test/workers/a", None).await.expect("get");
    let value = listed.kvs().first().map(|kv| kv.value().to_vec());
    assert_eq!(
        value
            .as_deref()
            .map(|v| Registration::decode("a", v, 1 << 14)),
        Some(Ok(a2))
    );
    held_a2.shutdown().await;
    assert_eq!(
        next(&mut w, second).await,
        DiscoveryEvent::Removed("a".into())
    );
}
