#!/usr/bin/env python3
"""Soak test: replay the hardening attacks against a built genfront binary.

Standard library only (Python 3.11). Starts `genfront serve` children with small timeouts over the
embedded mock (`--mock 1`) and, for the engine-side attacks, over the independent oracle engine
(`../shared/oracle/oracle_engine.py`, overridable with `--oracle`). Each attack is one step; a
canary (a small unary SGLang `/generate`, `content-type: application/json`, one connection per
call) runs in a thread during the attack, and the step prints one line: name, PASS/FAIL, figures,
and the child's peak RSS (`VmHWM`) where relevant. Exits 1 if any step fails. Every child is
started in its own process group and killed in a `finally`.

    python3 scripts/soak.py [--genfront target/debug/genfront] [--oracle PATH] [--only NAME,...]
"""

import argparse
import json
import os
import random
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROCS = []  # every child started, for the final cleanup
RESULTS = []
CANARY_BODY = b'{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}'


# ------------------------------------------------------------------------------------ processes
def rss(pid):
    """(VmHWM, VmRSS) of a process in MB, or (None, None) once it is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    k, v = line.split(":")
                    out[k] = int(v.split()[0]) / 1024
    except OSError:
        return None, None
    return out.get("VmHWM"), out.get("VmRSS")


def spawn(argv, ready, timeout=20.0):
    """Start argv in its own process group with output in a temp file; wait until a line matches
    `ready(line)` (which returns the port or None). Returns (Popen, port, logpath)."""
    log = tempfile.NamedTemporaryFile(prefix="soak-", suffix=".log", delete=False)
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    PROCS.append(p)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log.name, errors="replace") as f:
            for line in f:
                port = ready(line)
                if port:
                    return p, port, log.name
        if p.poll() is not None:
            break
        time.sleep(0.05)
    with open(log.name, errors="replace") as f:
        tail = f.read()[-2000:]
    kill(p)
    raise RuntimeError(f"{argv[0]} did not start: {tail}")


def kill(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGCONT)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass


def genfront(args, *flags):
    def ready(line):
        i = line.find("genfront serving address=")
        if i < 0:
            return None
        return int(line[i:].split()[2].split("=", 1)[1].rsplit(":", 1)[1])

    p, port, _ = spawn([args.genfront, "serve", "--port", "0", *flags], ready)
    return p, port


def oracle(args, api):
    def ready(line):
        if line.startswith("oracle_engine listening on "):
            return int(line.split()[3].rsplit(":", 1)[1])
        return None

    p, port, _ = spawn([sys.executable, args.oracle, "--api", api, "--port", "0"], ready)
    return p, port


# ------------------------------------------------------------------------------------ HTTP
def http(port, method, path, body=None, headers=None, timeout=30.0, raw=None):
    """One HTTP/1.1 request on a fresh connection (`Connection: close`); returns
    (status, headers dict, body bytes, seconds). `raw` sends those bytes instead."""
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if raw is None:
            h = {"host": "127.0.0.1", "connection": "close"}
            if body is not None:
                h["content-length"] = str(len(body))
                h.setdefault("content-type", "application/json")
            h.update({k.lower(): v for k, v in (headers or {}).items()})
            head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
            s.sendall(head.encode() + b"\r\n" + (body or b""))
        else:
            s.sendall(raw)
        data = bytearray()
        while True:
            try:
                chunk = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    return parse_response(bytes(data)) + (time.perf_counter() - t0,)


def parse_response(data):
    if not data:
        return None, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


def post_json(port, path, obj, headers=None, timeout=30.0):
    st, h, b, dt = http(port, "POST", path, json.dumps(obj).encode(), headers, timeout)
    try:
        j = json.loads(b) if b else None
    except ValueError:
        j = None
    return st, j, dt


class Canary:
    """Small unary /generate calls from a child process (so the attack's own Python work cannot
    delay them): latencies in ms and non-200 statuses."""

    def __init__(self, port, headers=None, interval=0.02):
        self.argv = [sys.executable, os.path.abspath(__file__), "--canary", str(port),
                     str(interval), json.dumps(headers or {})]
        self.lat, self.bad = [], []

    def __enter__(self):
        self.p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  start_new_session=True)
        PROCS.append(self.p)
        self.p.stdout.readline()  # "ready"
        return self

    def __exit__(self, *exc):
        out, _ = self.p.communicate(b"", timeout=30)
        for line in out.decode().splitlines():
            st, ms = line.split()
            self.lat.append(float(ms))
            if st != "200":
                self.bad.append(st)

    def ok(self, max_ms=50.0):
        return bool(self.lat) and not self.bad and max(self.lat) < max_ms

    def text(self):
        if not self.lat:
            return "canary: no calls"
        bad = f" non-200 {len(self.bad)} ({self.bad[:3]})" if self.bad else ""
        lat = sorted(self.lat)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        return (f"canary n={len(self.lat)} p50 {statistics.median(self.lat):.0f} ms "
                f"p99 {p99:.0f} ms max {max(self.lat):.0f} ms{bad}")


def canary_child(port, interval, headers):
    """The canary process: calls until stdin closes, then prints `status ms` per call."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    out = []
    print("ready", flush=True)
    while not stop.is_set():
        try:
            st, _, _, dt = http(port, "POST", "/generate", CANARY_BODY, headers, 5.0)
            out.append(f"{st} {dt * 1000:.2f}")
        except OSError as e:
            out.append(f"{type(e).__name__} 5000")
        stop.wait(interval)
    print("\n".join(out), flush=True)


def report(name, ok, figures, pid=None):
    mem = ""
    if pid is not None:
        hwm, cur = rss(pid)
        if hwm is not None:
            mem = f"; peak RSS {hwm:.0f} MB (now {cur:.0f} MB)"
    RESULTS.append(ok)
    print(f"{name:<34} {'PASS' if ok else 'FAIL'}  {figures}{mem}", flush=True)


def wait_closed(socks, deadline, t0=None):
    """Wait until every socket reads EOF/reset (or answers); returns {sock: (seconds, first
    bytes)} for the closed ones."""
    sel = selectors.DefaultSelector()
    t0 = time.monotonic() if t0 is None else t0
    got = {}
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, bytearray())
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                chunk = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                key.data.extend(chunk)
                continue
            got[s] = (time.monotonic() - t0, bytes(key.data[:64]))
            sel.unregister(s)
    sel.close()
    return got


def connect_many(port, n):
    out = []
    for _ in range(n):
        s = socket.socket()
        s.connect(("127.0.0.1", port))
        out.append(s)
    return out


def status_of(first):
    try:
        return int(first.split(b" ")[1])
    except (IndexError, ValueError):
        return None


# ------------------------------------------------------------------------------------ steps
def step_amplification(args, port, pid):
    ids = [random.Random(7).randrange(1000, 9999) for _ in range(2000)]
    body = {"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
            "top_logprobs_num": 152064, "sampling_params": {"max_new_tokens": 1}}
    raw = json.dumps(body).encode()
    with Canary(port) as c:
        st, j, dt = post_json(port, "/generate", body)
    hwm, _ = rss(pid)
    ok = st == 400 and dt < 1.0 and c.ok() and hwm < 200
    report("11 KB amplification request", ok,
           f"{len(raw) / 1000:.1f} KB body -> {st} in {dt * 1000:.0f} ms "
           f"({str((j or {}).get('error', j))[:60]!r}); {c.text()}", pid)


def step_big_body(args):
    p, port = genfront(args, "--mock", "1", "--mock-zero-delay", "--mock-context-len", "16000000")
    try:
        limit = 64 << 20
        rng = random.Random(1)
        chunk = ",".join(str(rng.randrange(150000)) for _ in range(100000))
        parts, size = [], 0
        prefix, suffix = '{"input_ids":[', '],"sampling_params":{"max_new_tokens":1}}'
        budget = limit - len(prefix) - len(suffix) - 16
        while size + len(chunk) + 1 <= budget:
            parts.append(chunk)
            size += len(chunk) + 1
        body = (prefix + ",".join(parts) + suffix).encode()
        nids = body.count(b",") - 0
        st, _, _, dt = http(port, "POST", "/generate", body, timeout=120)
        hwm, _ = rss(p.pid)
        ok = st in (200, 400) and hwm is not None and hwm < 200
        report("64 MiB body", ok, f"{len(body) / 2**20:.1f} MiB, ~{nids / 1e6:.1f}M ids -> {st} "
               f"in {dt:.1f} s", p.pid)
    finally:
        kill(p)


def step_idle(args, port, pid, n=2000):
    socks = connect_many(port, n)
    t0 = time.monotonic()
    with Canary(port) as c:
        got = wait_closed(socks, t0 + 10, t0)
    last = max((v[0] for v in got.values()), default=0)
    for s in socks:
        s.close()
    ok = len(got) == n and c.ok()
    report(f"idle {n} conns", ok, f"closed {len(got)}/{n} by {last:.1f} s; {c.text()}", pid)


def step_slowloris(args, port, pid, n=300):
    socks = connect_many(port, n)
    for s in socks:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
        s.setblocking(False)
    t0 = time.monotonic()
    open_ = set(socks)
    closed = {}
    with Canary(port) as c:
        while open_ and time.monotonic() < t0 + 10:
            for s in list(open_):
                try:
                    s.send(b"X-a: b\r\n")
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    closed[s] = time.monotonic() - t0
                    open_.discard(s)
            time.sleep(0.1)
    for s in socks:
        s.close()
    last = max(closed.values(), default=0)
    ok = len(closed) == n and c.ok()
    report(f"slowloris {n} conns", ok, f"closed {len(closed)}/{n} by {last:.1f} s "
           f"(a header line every 100 ms); {c.text()}", pid)


def step_slow_bodies(args, port, pid, n=40):
    # The main child has --max-concurrent-requests 8 and --body-read-timeout 3s.
    socks = connect_many(port, n)
    for s in socks:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: 200\r\n\r\n{\"input_ids\":[1,")
    t0 = time.monotonic()
    with Canary(port) as c:
        for _ in range(5):
            for s in socks:
                try:
                    s.sendall(b" ")
                except OSError:
                    pass
            time.sleep(0.2)
        got = wait_closed(socks, t0 + 10, t0)
    sts = [status_of(v[1]) for v in got.values()]
    last = max((v[0] for v in got.values()), default=0)
    for s in socks:
        s.close()
    n408 = sts.count(408)
    ok = n408 == n and c.ok()
    report(f"slow bodies {n} (8 permits)", ok, f"408 {n408}/{n} by {last:.1f} s; permits free: "
           f"{c.text()}", pid)


def step_never_read(args, n=6):
    """n clients that never read a ~160 MB unary answer (caps raised so it is built): the
    answers are assembled off the runtime, so /metrics and the canary stay quick; every
    connection is closed by the write timeout. Reports canary p50/p99/max, the slowest /metrics
    call and peak RSS."""
    p, port = genfront(args, "--mock", "1", "--mock-zero-delay", "--write-timeout", "2s",
                       "--max-top-logprobs", "200", "--max-logprob-entries", "100000000",
                       "--max-answer-bytes", "1GiB", "--mock-context-len", "100000")
    try:
        ids = [random.Random(3).randrange(150000) for _ in range(30000)]
        body = json.dumps({"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
                           "top_logprobs_num": 160, "sampling_params": {"max_new_tokens": 1}})
        body = body.encode()
        base = rss(p.pid)[1]
        socks = []
        t0 = time.monotonic()
        with Canary(port) as c:
            for _ in range(n):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(("127.0.0.1", port))
                s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n"
                          b"content-type: application/json\r\n"
                          + f"content-length: {len(body)}\r\n\r\n".encode() + body)
                socks.append(s)
            # Read the head of one answer to learn its size, never more; then wait until
            # genfront has closed every connection (its gauge counts the /metrics call itself).
            socks[0].settimeout(150)
            size = parse_response(socks[0].recv(2048))[1].get("content-length", "0")
            closed_at, stalls, slowest = None, 0, 0.0
            while time.monotonic() < t0 + 150:
                tm = time.monotonic()
                try:
                    m = metric(port, "genfront_connections_open", 5.0)
                except OSError:
                    stalls += 1  # a /metrics call that got no answer in 5 s
                    continue
                slowest = max(slowest, time.monotonic() - tm)
                if m.get("genfront_connections_open", 99) <= 1:
                    closed_at = time.monotonic() - t0
                    break
                time.sleep(0.1)
        hits = metric(port, "genfront_limit_hits_total").get(
            'genfront_limit_hits_total{limit="write_timeout"}', 0)
        for s in socks:
            s.close()
        time.sleep(0.5)
        hwm, cur = rss(p.pid)
        mb = int(size) / 1e6 if size.isdigit() else 0
        ok = (closed_at is not None and hits == n and cur < base + 300 and not c.bad
              and not stalls)
        when = f"{closed_at:.1f} s" if closed_at is not None else "never (150 s)"
        report(f"{n} non-readers of a big answer", ok,
               f"answer {mb:.0f} MB; all {n} closed by {when}, write_timeout hits {hits:.0f} "
               f"(2 s); /metrics calls unanswered in 5 s: {stalls}, slowest "
               f"{slowest * 1000:.0f} ms; RSS before {base:.0f} MB; {c.text()}", p.pid)
    finally:
        kill(p)


def cpu_s(pid):
    """User + system CPU seconds a process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step_big_headers(args, port, pid, n=400):
    half = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (190 * 1024)
    socks = connect_many(port, n)
    t0 = time.monotonic()
    cpu0 = cpu_s(pid)

    def send(chunk):
        for s in chunk:
            s.settimeout(5)
            try:
                s.sendall(half)
            except OSError:
                pass

    with Canary(port) as c:
        ts = [threading.Thread(target=send, args=(socks[i::4],)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        got = wait_closed(socks, t0 + 10, t0)
    sts = [status_of(v[1]) for v in got.values()]
    last = max((v[0] for v in got.values()), default=0)
    for s in socks:
        s.close()
    hwm, _ = rss(pid)
    cpu = cpu_s(pid) - cpu0
    ok = len(got) == n and c.ok(5000) and hwm < 200
    report(f"{n} half-sent 380 KB headers", ok,
           f"closed {len(got)}/{n} by {last:.1f} s (431: {sts.count(431)}); genfront CPU "
           f"{cpu:.1f} s; {c.text()}", pid)


def step_abort_1m(args, port, pid):
    ids = [f"generate-tokens-{i:08x}" for i in range(1_000_000)]
    body = json.dumps({"request_ids": ids}).encode()
    with Canary(port, interval=0.005) as c:
        time.sleep(0.2)
        st, _, b, dt = http(port, "POST", "/inference/v1/abort_requests", body, timeout=60)
        time.sleep(0.2)
    ok = st == 200 and c.ok(50)
    report("1M-id vLLM abort", ok, f"{len(body) / 1e6:.0f} MB -> {st} in {dt * 1000:.0f} ms; "
           f"{c.text()}", pid)


def step_text_plain_abort(args, port, pid):
    a = http(port, "POST", "/abort_request", b'{"rid":"x"}', {"content-type": "text/plain"})[0]
    b = http(port, "POST", "/inference/v1/abort_requests", b'{"request_ids":["x"]}',
             {"content-type": "text/plain"})[0]
    report("text/plain abort", a == 415 and b == 415, f"/abort_request {a}, "
           f"/inference/v1/abort_requests {b}")


def step_strict_http(args, port, pid):
    nohost = http(port, "GET", "/health", raw=b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    gz = http(port, "POST", "/generate", CANARY_BODY, {"content-encoding": "gzip"})
    report("HTTP/1.1 without Host", nohost[0] == 400, f"-> {nohost[0]}")
    report("gzip Content-Encoding", gz[0] == 415, f"-> {gz[0]}")
    figs, ok = [], True
    for expect in (False, True):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        t0 = time.perf_counter()
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: 1073741824\r\n" + (b"expect: 100-continue\r\n" if expect else b"")
                  + b"\r\n")
        try:
            first = s.recv(65536)
        except OSError:
            first = b""
        dt = (time.perf_counter() - t0) * 1000
        s.close()
        st = status_of(first)
        ok &= st == 413 and dt < 1000
        figs.append(f"{'with' if expect else 'without'} Expect -> {st} in {dt:.0f} ms, no body sent")
    report("1 GiB Content-Length", ok, "; ".join(figs))


def step_auth(args):
    ka, kb, adm = "soak-key-a", "soak-key-b", "soak-admin"
    p, port = genfront(args, "--mock", "1", "--mock-eos-probability", "0", "--api-key", ka,
                       "--api-key", kb, "--admin-api-key", adm)
    try:
        A = {"authorization": f"Bearer {ka}"}
        B = {"authorization": f"Bearer {kb}"}
        # Every protected route refuses without a key (and with a wrong one).
        routes = [("POST", "/generate", CANARY_BODY),
                  ("POST", "/inference/v1/generate", b'{"token_ids":[1],"sampling_params":{}}'),
                  ("POST", "/abort_request", b'{"rid":"x"}'),
                  ("POST", "/inference/v1/abort_requests", b'{"request_ids":["x"]}'),
                  ("GET", "/get_model_info", None), ("GET", "/model_info", None),
                  ("GET", "/server_info", None), ("GET", "/get_server_info", None),
                  ("GET", "/v1/models", None)]
        refused, total = 0, 0
        for hdr in (None, {"authorization": "Bearer wrong"}):
            for m, path, body in routes:
                st, h, _, _ = http(port, m, path, body, hdr)
                total += 1
                refused += st == 401 and "bearer" in h.get("www-authenticate", "").lower()
        aa = http(port, "POST", "/abort_request", b'{"rid":"","abort_all":true}', A)[0]
        ok_a = http(port, "POST", "/generate", CANARY_BODY, A)[0]
        probes = [http(port, "GET", r)[0] for r in ("/health", "/metrics")]
        ok = refused == total and aa == 403 and ok_a == 200 and probes == [200, 200]
        report("keys: protected routes", ok, f"401 {refused}/{total} (no/wrong key); tenant "
               f"abort_all {aa}; tenant generate {ok_a}; /health,/metrics open {probes}")

        # 16 prefix aborts from B's client abort nothing of A's.
        results = [None] * 16

        def run(i):
            results[i] = post_json(port, "/generate", {"rid": f"soak-a-{i}", "input_ids": [5, 6, 7],
                                   "sampling_params": {"max_new_tokens": 150}}, A)

        ts = [threading.Thread(target=run, args=(i,)) for i in range(16)]
        for t in ts:
            t.start()
        time.sleep(0.4)
        ab = [http(port, "POST", "/abort_request",
                   json.dumps({"rid": f"soak-a-{i}" if i else "soak"}).encode(), B)[0]
              for i in range(16)]
        for t in ts:
            t.join()
        fins = [((r[1] or {}).get("meta_info") or {}).get("finish_reason", {}).get("type")
                for r in results]
        ok = fins.count("length") == 16 and all(a == 200 for a in ab)
        report("16 prefix aborts, other key", ok, f"aborts {set(ab)}; A's 16 requests finished "
               f"{ {f: fins.count(f) for f in set(fins)} }")
    finally:
        kill(p)


def step_shutdown(args):
    figs, ok = [], True
    for second in (False, True):
        p, port = genfront(args, "--mock", "1", "--mock-eos-probability", "0",
                           "--shutdown-grace", "1s", "--write-timeout", "60s")
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            s.connect(("127.0.0.1", port))
            body = b'{"input_ids":[1,2],"stream":true,"sampling_params":{"max_new_tokens":30000}}'
            s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                      + f"content-length: {len(body)}\r\n\r\n".encode() + body)
            s.settimeout(10)
            head = s.recv(64)  # the stream has started ...
            time.sleep(1.5)  # ... and the client is stuck: it never reads again
            if status_of(head) != 200:
                raise RuntimeError(f"stream did not start: {head!r}")
            t0 = time.monotonic()
            os.kill(p.pid, signal.SIGTERM)
            if second:
                time.sleep(0.3)
                t1 = time.monotonic()
                os.kill(p.pid, signal.SIGTERM)
            try:
                rc = p.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
            dt = time.monotonic() - t0
            s.close()
            if second:
                after = time.monotonic() - t1
                good = rc is not None and after < 0.5 and rc != 0
                figs.append(f"second signal: exit {rc} {after * 1000:.0f} ms after it")
            else:
                good = rc is not None and dt < 1 + 2 + 1
                figs.append(f"SIGTERM, grace 1 s: exit {rc} after {dt:.1f} s")
            ok &= good
        finally:
            kill(p)
    report("SIGTERM with a stuck client", ok, "; ".join(figs))


def step_health_generate(args, oport):
    p, port = genfront(args, "--mock", "0", "--worker", f"sglang=http://127.0.0.1:{oport}")
    try:
        before = sum(r["path"] == "/generate" for r in oracle_log(oport)["requests"])
        counts = [0] * 16
        sts = {}
        stop = time.monotonic() + 5

        def hammer(i):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            buf = b""
            while time.monotonic() < stop:
                s.sendall(b"GET /health_generate HTTP/1.1\r\nHost: x\r\n\r\n")
                while b"\r\n\r\n" not in buf:
                    buf += s.recv(65536)
                head, _, buf = buf.partition(b"\r\n\r\n")
                st, h, _ = parse_response(head + b"\r\n\r\n")
                n = int(h.get("content-length", 0))
                while len(buf) < n:
                    buf += s.recv(65536)
                buf = buf[n:]
                counts[i] += 1
                sts[st] = sts.get(st, 0) + 1
            s.close()

        ts = [threading.Thread(target=hammer, args=(i,)) for i in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        time.sleep(0.2)
        after = sum(r["path"] == "/generate" for r in oracle_log(oport)["requests"])
        engine = after - before
        ok = sts.get(200, 0) == sum(counts) and 1 <= engine <= 7
        report("/health_generate hammered 5 s", ok, f"{sum(counts)} calls {sts} -> {engine} "
               "engine requests", p.pid)
    finally:
        kill(p)


def oracle_log(oport):
    return json.loads(http(oport, "GET", "/_oracle/log")[2])


def metric(port, prefix, timeout=30.0):
    """The /metrics samples whose line starts with prefix, as {name{labels}: value}."""
    b = http(port, "GET", "/metrics", timeout=timeout)[2].decode()
    return {line.split()[0]: float(line.split()[1]) for line in b.splitlines()
            if line.startswith(prefix)}


def step_sigstop(args, op, oport):
    p, port = genfront(args, "--mock", "0", "--worker", f"sglang=http://127.0.0.1:{oport}",
                       "--engine-first-byte-timeout", "1s", "--breaker-failures", "2",
                       "--breaker-open", "30s", "--health-interval", "300ms",
                       "--health-timeout", "300ms", "--health-fall", "2", "--retry-max", "0")
    try:
        st0 = post_json(port, "/generate", json.loads(CANARY_BODY))[0]
        os.killpg(op.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        res = []
        for _ in range(3):
            st, _, dt = post_json(port, "/generate", json.loads(CANARY_BODY), timeout=15)
            res.append((st, dt))
        time.sleep(1.0)
        m = metric(port, "genfront_worker_")
        ready = [v for k, v in m.items() if k.startswith("genfront_worker_state") and
                 'state="ready"' in k]
        breaker = [v for k, v in m.items() if k.startswith("genfront_worker_breaker_state")]
        st_after, _, dt_after = post_json(port, "/generate", json.loads(CANARY_BODY), timeout=15)
        total = time.monotonic() - t0
        out = ready == [0.0] or (breaker and breaker[0] != 0)
        ok = (st0 == 200 and all(s in (502, 503, 504) and d < 1.5 for s, d in res) and out
              and st_after in (502, 503, 504) and dt_after < 1.5)
        report("SIGSTOPped engine", ok, "requests " + ", ".join(f"{s} in {d:.2f} s" for s, d in res)
               + f" (first-byte timeout 1 s); worker ready={ready} breaker={breaker}; next request "
               f"{st_after} in {dt_after * 1000:.0f} ms; {total:.1f} s in all", p.pid)
    finally:
        os.killpg(op.pid, signal.SIGCONT)
        kill(p)


# ------------------------------------------------------------------------------------ main
def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--canary":
        canary_child(int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--genfront", default=os.path.join(REPO, "target/debug/genfront"))
    ap.add_argument("--oracle", default=os.path.join(REPO, "../shared/oracle/oracle_engine.py"))
    ap.add_argument("--only", default="", help="comma-separated steps (default: all): amplification, strict, textplain, idle, "
                    "slowloris, slowbody, headers, abort1m, bigbody, neverread, auth, shutdown, "
                    "healthgen, sigstop")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2600:
        print("fd limit below 2600: the idle-connection step needs 2,000+ sockets", file=sys.stderr)
        return 2
    only = set(filter(None, args.only.split(",")))
    t_all = time.monotonic()
    print(f"soak: {args.genfront}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          flush=True)
    try:
        main_p, port = genfront(args, "--mock", "1", "--mock-zero-delay",
                                "--header-read-timeout", "1s", "--body-read-timeout", "3s",
                                "--write-timeout", "2s", "--max-concurrent-requests", "8",
                                "--max-abort-ids", "1000000")
        pid = main_p.pid
        steps = [
            ("amplification", lambda: step_amplification(args, port, pid)),
            ("strict", lambda: step_strict_http(args, port, pid)),
            ("textplain", lambda: step_text_plain_abort(args, port, pid)),
            ("idle", lambda: step_idle(args, port, pid)),
            ("slowloris", lambda: step_slowloris(args, port, pid)),
            ("slowbody", lambda: step_slow_bodies(args, port, pid)),
            ("headers", lambda: step_big_headers(args, port, pid)),
            ("abort1m", lambda: step_abort_1m(args, port, pid)),
            ("bigbody", lambda: step_big_body(args)),
            ("neverread", lambda: step_never_read(args)),
            ("auth", lambda: step_auth(args)),
            ("shutdown", lambda: step_shutdown(args)),
        ]
        for name, fn in steps:
            if not only or name in only:
                try:
                    fn()
                except Exception as e:  # a step that crashes is a failed step, not a crashed run
                    report(name, False, f"step raised {type(e).__name__}: {e}")
        if not only or {"healthgen", "sigstop"} & only:
            op, oport = oracle(args, "sglang")
            try:
                if not only or "healthgen" in only:
                    try:
                        step_health_generate(args, oport)
                    except Exception as e:
                        report("healthgen", False, f"step raised {type(e).__name__}: {e}")
                if not only or "sigstop" in only:
                    try:
                        step_sigstop(args, op, oport)
                    except Exception as e:
                        report("sigstop", False, f"step raised {type(e).__name__}: {e}")
            finally:
                kill(op)
    finally:
        for p in PROCS:
            kill(p)
    failed = RESULTS.count(False)
    print(f"soak: {len(RESULTS) - failed}/{len(RESULTS)} steps passed in "
          f"{time.monotonic() - t_all:.0f} s", flush=True)
    return 1 if failed or not RESULTS else 0


if __name__ == "__main__":
    sys.exit(main())
