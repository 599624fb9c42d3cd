//! A child-process harness for `../shared/oracle/oracle_engine.py`, the independent Python model
//! of the SGLang and vLLM engines (see `../shared/oracle/README.md`).
//!
//! [`Oracle::start`] runs `python3 oracle_engine.py --port 0 <args>` on loopback, reads the port
//! from its first stdout line and kills the child when the handle drops. The child also exits on
//! its own when this test process dies without unwinding (a `SIGKILL`, an abort): it is started
//! through a tiny Python wrapper that watches its stdin pipe and exits at EOF, and the pipe closes
//! when the process holding its write end goes away. No oracle outlives its test.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// The wrapper `python3 -c` runs: exit as soon as stdin reaches EOF (the test process is gone),
/// then run the oracle script (argv[1]) as `__main__` with the remaining arguments.
const WRAPPER: &str = "import os, sys, threading, runpy\n\
def _watch():\n    try:\n        sys.stdin.buffer.read()\n    finally:\n        os._exit(0)\n\
threading.Thread(target=_watch, daemon=True).start()\n\
path = sys.argv[1]\n\
sys.argv = [path] + sys.argv[2:]\n\
runpy.run_path(path, run_name='__main__')\n";

/// How long the oracle may take to print its listening line.
const START_LIMIT: Duration = Duration::from_secs(20);

/// The oracle script: `$GENFRONT_ORACLE` when set, else `../shared/oracle/oracle_engine.py`
/// beside the repository checkout (the layout of developer machines and CI).
pub fn oracle_script() -> PathBuf {
    std::env::var_os("GENFRONT_ORACLE").map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/oracle/oracle_engine.py"
            ))
        },
        PathBuf::from,
    )
}

/// A running `oracle_engine.py` child; killed (and reaped) on drop.
pub struct Oracle {
    child: Child,
    /// Held only so the wrapper's stdin stays open while this handle lives.
    _stdin: ChildStdin,
    port: u16,
    client: reqwest::Client,
}

impl Oracle {
    /// Start the oracle with `args` (e.g. `["--api", "sglang", "--role", "prefill"]`); `--port 0`
    /// is added. Panics if it does not report its port within 20 s.
    pub fn start(args: &[&str]) -> Oracle {
        let script = oracle_script();
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(WRAPPER)
            .arg(&script)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3 {}: {e}", script.display()));
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        // Read the first line, then keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
        });
        let line = match rx.recv_timeout(START_LIMIT) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("oracle did not report its port ({e})");
            }
        };
        let port = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("127.0.0.1:"))
            .and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("unexpected first oracle line {line:?} (args {args:?})");
        };
        Oracle {
            child,
            _stdin: stdin,
            port,
            client: reqwest::Client::new(),
        }
    }

    /// The oracle's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The child's process id (the Python wrapper that runs the oracle in-process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `base_url()` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), path)
    }

    /// A client for calling the oracle directly.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// `GET /_oracle/log`: every request, abort call and what is still running.
    pub async fn log(&self) -> Value {
        let r = self
            .client
            .get(self.url("/_oracle/log"))
            .send()
            .await
            .expect("oracle log");
        assert!(r.status().is_success(), "oracle log: {}", r.status());
        r.json().await.expect("oracle log JSON")
    }

    async fn control(&self, path: &str, body: &Value) -> Value {
        let r = self
            .client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("oracle {path}: {e}"));
        let status = r.status();
        let text = r.text().await.expect("oracle control body");
        assert!(status.is_success(), "oracle {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    /// `POST /_oracle/script` with one script object or a list of them.
    pub async fn script(&self, script: Value) -> Value {
        self.control("/_oracle/script", &script).await
    }

    /// `POST /_oracle/reset`: clear the log, scripts, pause and failure knobs.
    pub async fn reset(&self) -> Value {
        self.control("/_oracle/reset", &Value::Object(Default::default()))
            .await
    }

    /// `POST /_oracle/config` (`health_status`, `generate_status`, `token_delay`, …).
    pub async fn config(&self, config: Value) -> Value {
        self.control("/_oracle/config", &config).await
    }

    /// POST `body` as JSON to `path` on the oracle itself; `(status, body text)`.
    pub async fn post_text(&self, path: &str, body: &Value) -> (u16, String) {
        let r = self
            .client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("oracle {path}: {e}"));
        let status = r.status().as_u16();
        (status, r.text().await.expect("oracle body"))
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
