//! Discovery through a real etcd (issue 14 item 5): `genfront register` processes put three
//! `genfront mocker` engines in etcd; frontends started with `--discovery` route to all three; a
//! registrant killed with SIGKILL (no revoke) disappears within its lease TTL and gets no more
//! requests; one stopped with SIGTERM revokes and disappears at once; a restarted frontend and
//! a second frontend see the same set; a `genfront sidecar --register` appears and serves.
//!
//! etcd runs on loopback with a fresh `--data-dir` in a temporary directory, on free ports,
//! started and killed by the test (`ETCD_BIN` names the binary, default `etcd` on the PATH;
//! Debian's `etcd-server`, which `scripts/test.sh` installs). Built only with the `etcd` feature
//! (`cargo test -p genfront --features etcd --test discovery`).

#![cfg(feature = "etcd")]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Lease TTL of the registrant that is killed (short, so the test stays short).
const KILL_TTL: Duration = Duration::from_secs(2);

/// Slack over a lease TTL for "disappears within its TTL": etcd checks for expired leases every
/// 500 ms, and the frontend still has to see the delete event and drop the worker.
const EXPIRY_SLACK: Duration = Duration::from_millis(2500);

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The processes of one test and their logs, in a temporary directory removed on drop; every
/// child is killed and reaped on drop, so a failing assertion leaves none behind.
struct Fleet {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Fleet {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("genfront-discovery-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self {
            dir,
            children: Vec::new(),
        }
    }

    /// Start `program args` as `name`, its output in `<dir>/<name>.log`.
    fn spawn(&mut self, name: &str, program: &Path, args: &[String]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = Command::new(program)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    panic!(
                        "cannot run `{}`: not found. This test needs a real etcd server: install Debian's etcd-server (`apt-get install etcd-server`; scripts/test.sh does) or set ETCD_BIN",
                        program.display()
                    )
                }
                panic!("cannot run `{}`: {e}", program.display())
            });
        self.children.push((name.to_owned(), child));
    }

    /// `genfront ARGS` as `name`.
    fn genfront(&mut self, name: &str, args: &[&str]) {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        self.spawn(name, Path::new(env!("CARGO_BIN_EXE_genfront")), &args);
    }

    fn child(&mut self, name: &str) -> &mut Child {
        &mut self
            .children
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"))
            .1
    }

    /// Send `signal` (`"KILL"`, `"TERM"`) to `name` and reap it.
    fn signal(&mut self, name: &str, signal: &str) {
        let child = self.child(name);
        let status = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {name}");
        let _ = child.wait();
    }

    /// The last lines of every log, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (name, _) in &self.children {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(12)..];
            out.push_str(&format!("--- {name}\n{}\n", tail.join("\n")));
        }
        out
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Poll `GET url` until it answers 2xx, at most `limit`.
async fn wait_up(client: &reqwest::Client, url: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(r) = client.get(url).send().await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// One small SGLang request to `frontend`, pinned to `pin` when given: its status and the worker
/// that served it (`x-genfront-worker`).
async fn generate(client: &reqwest::Client, frontend: &str, pin: Option<&str>) -> (u16, String) {
    let mut req = client
        .post(format!("{frontend}/generate"))
        .json(&common::sglang_body(2, false));
    if let Some(pin) = pin {
        req = req.header("x-genfront-worker", pin);
    }
    match req.send().await {
        Ok(r) => {
            let worker = r
                .headers()
                .get("x-genfront-worker")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let status = r.status().as_u16();
            let _ = r.bytes().await;
            (status, worker)
        }
        Err(_) => (0, String::new()),
    }
}

/// Whether `frontend` routes to `id` now: a request pinned to it is served by it.
async fn serves(client: &reqwest::Client, frontend: &str, id: &str) -> bool {
    generate(client, frontend, Some(id)).await == (200, id.to_owned())
}

/// Whether `frontend` has no worker `id`: a pinned request is refused as naming no worker (a
/// 400, which needs another worker to be there: with none at all the answer is a 503).
async fn lacks(client: &reqwest::Client, frontend: &str, id: &str) -> bool {
    generate(client, frontend, Some(id)).await.0 == 400
}

/// Wait until `check` holds for every id of `ids` on `frontend`, at most `limit`; the time it
/// took.
async fn wait_all<'a, F, Fut>(
    frontend: &'a str,
    ids: &'a [&'a str],
    limit: Duration,
    check: F,
) -> Option<Duration>
where
    F: Fn(&'a str, &'a str) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        let mut all = true;
        for id in ids {
            if !check(frontend, id).await {
                all = false;
                break;
            }
        }
        if all {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The workers `n` unpinned requests to `frontend` were served by (all must succeed).
async fn served_set(client: &reqwest::Client, frontend: &str, n: usize) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        let (status, worker) = generate(client, frontend, None).await;
        assert_eq!(status, 200, "an unpinned request through {frontend} fails");
        seen.insert(worker);
    }
    seen
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_follow_the_workers_registered_in_etcd() {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut fleet = Fleet::new();

    // etcd on loopback, fresh data dir, free ports.
    let (etcd_port, peer_port) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let etcd_bin =
        std::env::var_os("ETCD_BIN").map_or_else(|| PathBuf::from("etcd"), PathBuf::from);
    let data_dir = fleet.dir.join("etcd-data");
    fleet.spawn(
        "etcd",
        &etcd_bin,
        &[
            "--name".into(),
            "genfront-test".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--listen-client-urls".into(),
            client_url.clone(),
            "--advertise-client-urls".into(),
            client_url.clone(),
            "--listen-peer-urls".into(),
            peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            peer_url.clone(),
            "--initial-cluster".into(),
            format!("genfront-test={peer_url}"),
        ],
    );
    assert!(
        wait_up(
            &client,
            &format!("{client_url}/health"),
            Duration::from_secs(20)
        )
        .await,
        "etcd did not become healthy\n{}",
        fleet.logs()
    );
    let etcd = format!("etcd://127.0.0.1:{etcd_port}/genfront-test");

    // Three native mock engines, each registered by its own `genfront register`; w1's registrant
    // has a long TTL (it is stopped with SIGTERM and must revoke, not expire).
    let ids = ["w0", "w1", "w2"];
    let ports: Vec<String> = ids.iter().map(|_| free_port().to_string()).collect();
    for (i, id) in ids.iter().enumerate() {
        let port = &ports[i];
        fleet.genfront(
            &format!("mocker-{id}"),
            &[
                "mocker",
                "--api",
                "sglang",
                "--host",
                "127.0.0.1",
                "--port",
                port,
                "--mock-speedup",
                "50",
            ],
        );
        let ttl = if i == 1 { "30s" } else { "2s" };
        let worker = format!("sglang=http://127.0.0.1:{port}");
        fleet.genfront(
            &format!("register-{id}"),
            &[
                "register", "--worker", &worker, "--etcd", &etcd, "--id", id, "--ttl", ttl,
            ],
        );
    }

    // Frontend A discovers all three (no static worker).
    let start_frontend = |fleet: &mut Fleet, name: &str| {
        let port = free_port();
        fleet.genfront(
            name,
            &[
                "serve",
                "--port",
                &port.to_string(),
                "--discovery",
                &etcd,
                "--policy",
                "round_robin",
            ],
        );
        format!("http://127.0.0.1:{port}")
    };
    let a = start_frontend(&mut fleet, "frontend-a");
    let took = wait_all(&a, &ids, Duration::from_secs(30), |f, id| {
        serves(&client, f, id)
    })
    .await;
    assert!(
        took.is_some(),
        "frontend A does not serve w0, w1 and w2\n{}",
        fleet.logs()
    );
    assert_eq!(
        served_set(&client, &a, 9).await,
        set(&ids),
        "unpinned requests reach all three workers"
    );

    // Frontend B sees the same set.
    let b = start_frontend(&mut fleet, "frontend-b");
    let took = wait_all(&b, &ids, Duration::from_secs(30), |f, id| {
        serves(&client, f, id)
    })
    .await;
    assert!(
        took.is_some(),
        "frontend B does not serve the same set\n{}",
        fleet.logs()
    );

    // SIGKILL w0's registrant: no revoke, so w0 goes when its lease expires.
    let killed = Instant::now();
    fleet.signal("register-w0", "KILL");
    for f in [&a, &b] {
        let limit = KILL_TTL + EXPIRY_SLACK;
        let gone = wait_all(f, &["w0"], limit, |f, id| lacks(&client, f, id)).await;
        assert!(
            gone.is_some(),
            "w0 still routable through {f} {:?} after its registrant was killed (TTL {KILL_TTL:?})\n{}",
            killed.elapsed(),
            fleet.logs()
        );
    }
    let gone_after = killed.elapsed();
    eprintln!("w0 gone from both frontends {gone_after:?} after SIGKILL (TTL {KILL_TTL:?})");
    assert!(
        gone_after <= KILL_TTL + EXPIRY_SLACK,
        "w0 took {gone_after:?} to disappear (TTL {KILL_TTL:?})"
    );
    // ... and gets no more requests (its engine still runs: only the registration is gone).
    for f in [&a, &b] {
        let seen = served_set(&client, f, 8).await;
        assert_eq!(
            seen,
            set(&["w1", "w2"]),
            "after w0's lease expired, through {f}"
        );
    }

    // SIGTERM w1's registrant: it revokes, so w1 goes at once, long before its 30 s TTL.
    let stopped = Instant::now();
    fleet.signal("register-w1", "TERM");
    let gone = wait_all(&a, &["w1"], Duration::from_secs(5), |f, id| {
        lacks(&client, f, id)
    })
    .await;
    assert!(
        gone.is_some(),
        "w1 still routable {:?} after its registrant stopped (revoke)\n{}",
        stopped.elapsed(),
        fleet.logs()
    );
    // Registered again by a new registrant under the same id: w1 comes back on both frontends.
    let worker = format!("sglang=http://127.0.0.1:{}", ports[1]);
    fleet.genfront(
        "register-w1-again",
        &[
            "register", "--worker", &worker, "--etcd", &etcd, "--id", "w1", "--ttl", "2s",
        ],
    );
    for f in [&a, &b] {
        let back = wait_all(f, &["w1"], Duration::from_secs(15), |f, id| {
            serves(&client, f, id)
        })
        .await;
        assert!(
            back.is_some(),
            "re-registered w1 not served through {f}\n{}",
            fleet.logs()
        );
    }
    fleet.signal("register-w1-again", "TERM");
    for f in [&a, &b] {
        let gone = wait_all(f, &["w1"], Duration::from_secs(5), |f, id| {
            lacks(&client, f, id)
        })
        .await;
        assert!(
            gone.is_some(),
            "w1 still routable through {f} after its second registrant stopped\n{}",
            fleet.logs()
        );
    }

    // A restarted frontend A re-reads the set: w2 only (w0 expired, w1 revoked).
    fleet.signal("frontend-a", "KILL");
    let a = start_frontend(&mut fleet, "frontend-a2");
    let took = wait_all(&a, &["w2"], Duration::from_secs(30), |f, id| {
        serves(&client, f, id)
    })
    .await;
    assert!(
        took.is_some(),
        "restarted frontend A does not serve w2\n{}",
        fleet.logs()
    );
    for id in ["w0", "w1"] {
        assert!(
            lacks(&client, &a, id).await,
            "restarted frontend A has {id}"
        );
    }
    assert_eq!(served_set(&client, &a, 4).await, set(&["w2"]));

    // A sidecar registers itself; both frontends add it and route to it.
    let sidecar_port = free_port();
    let listen = format!("127.0.0.1:{sidecar_port}");
    let advertise = format!("grpc://{listen}");
    fleet.genfront(
        "sidecar",
        &[
            "sidecar",
            "--engine",
            "mock",
            "--mock-zero-delay",
            "--listen",
            &listen,
            "--register",
            &etcd,
            "--advertise",
            &advertise,
            "--worker-id",
            "side",
            "--register-ttl",
            "2s",
        ],
    );
    for f in [&a, &b] {
        let took = wait_all(f, &["side", "w2"], Duration::from_secs(30), |f, id| {
            serves(&client, f, id)
        })
        .await;
        assert!(
            took.is_some(),
            "{f} does not serve the registered sidecar\n{}",
            fleet.logs()
        );
    }
    // A stopped sidecar revokes its registration on the way down.
    fleet.signal("sidecar", "TERM");
    for f in [&a, &b] {
        let gone = wait_all(f, &["side"], Duration::from_secs(5), |f, id| {
            lacks(&client, f, id)
        })
        .await;
        assert!(
            gone.is_some(),
            "the stopped sidecar is still routable through {f}\n{}",
            fleet.logs()
        );
    }
}
