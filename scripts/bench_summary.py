#!/usr/bin/env python3
"""Turn the JSON reports of scripts/bench-compare.sh into the benchmark report (Markdown).

Usage: bench_summary.py WORKDIR IDLE_RSS_BYTES OUT

WORKDIR holds run.json (the run's settings), targets.txt (target name, then the frontend's PIDs)
and one `genfront bench --json` report per cell and round, named WORKLOAD-cCONC-TARGET-rROUND.json
(plus sat-genfront, half-direct, half-genfront and streams10k when those runs were made). Every
figure of a cell is the median over its rounds, taken per figure. In each report the engine (the
mock) is the last process; the ones before it are the frontend, whose CPU and RSS are summed.

The hand-written sections of the current docs/benchmarks.md, from "## What was changed" to the
end, are carried over below the generated tables (docs/benchmark-changes.md if there are none).
OUT is written only once the whole report is built, so OUT may be docs/benchmarks.md itself.
"""
import json
import os
import platform
import statistics
import subprocess
import sys

work, idle_rss, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
here = os.path.dirname(os.path.abspath(__file__))
docs = os.path.join(here, "..", "docs")

with open(os.path.join(work, "run.json")) as f:
    run = json.load(f)
workloads = run["workloads"].split()
concs = [int(c) for c in run["concs"].split()]
targets = run["targets"].split()
rounds = int(run["rounds"])
quick = bool(run["quick"])

DESCR = {
    "unary": "unary, prompt 32, 8 new",
    "plain64": "unary, prompt 32, 64 new",
    "logprobs": "unary, prompt 32, 64 new, top-5 logprobs",
    "stream": "SSE, prompt 32, 128 tokens",
    "streamlp": "SSE, prompt 32, 128 tokens, top-5 logprobs",
    "prompt128k": f"unary, {run['t128k']}-token prompt (~128 KiB JSON), 8 new",
    "prompt1m": f"unary, {run['t1m']}-token prompt (~1 MiB JSON), 8 new",
    "experts": f"unary, {run['expert_prompt']}-token prompt, 64 new, routed experts",
}


def load(name):
    try:
        with open(os.path.join(work, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def med(values):
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


def errors(report):
    return sum((report.get("errors") or {}).values())


def front_sum(report, field):
    """Sum of `field` over the frontend's processes (all but the last); None for direct or unread."""
    ps = report.get("processes") or []
    if len(ps) < 2:
        return None
    vals = [p.get(field) for p in ps[:-1]]
    return None if any(v is None for v in vals) else sum(vals)


def engine(report, field):
    ps = report.get("processes") or []
    return ps[-1].get(field) if ps else None


def ms(report, key, field):
    p = report.get(key) or {}
    v = p.get(field)
    return None if v is None else v / 1000.0


def cell(w, c, t):
    """Median figures of one cell over its rounds, or None when no round produced a report."""
    reps = [r for r in (load(f"{w}-c{c}-{t}-r{i}") for i in range(1, rounds + 1)) if r]
    if not reps:
        return None
    rss = [front_sum(r, "rss_peak_bytes") for r in reps]
    # A round whose requests all failed measured no request's cost: its CPU figures are left out.
    good = [r for r in reps if r.get("ok", 0) > 0]
    return {
        "rounds": len(reps),
        "requests": sum(r["requests"] for r in reps),
        "errors": sum(errors(r) for r in reps),
        "rps": med([r["requests_per_s"] for r in reps]),
        "p50": med([ms(r, "latency", "p50_us") for r in reps]),
        "p99": med([ms(r, "latency", "p99_us") for r in reps]),
        "ttft": med([ms(r, "ttft", "p50_us") for r in reps]),
        "cpu_req": med([front_sum(r, "cpu_us_per_request") for r in good]),
        "cpu_tok": med([front_sum(r, "cpu_us_per_output_token") for r in good]),
        "rss": None if all(v is None for v in rss) else max(v for v in rss if v is not None),
        "engine_cpu": med([engine(r, "cpu_us_per_request") for r in good]),
        "body": reps[0]["config"].get("request_bytes"),
    }


cells = {(w, c, t): cell(w, c, t) for w in workloads for c in concs for t in targets}


def get(w, c, t, k):
    x = cells.get((w, c, t))
    return None if x is None else x.get(k)


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def verdict(value, limit, *cells_used):
    """meets / misses `value <= limit`; a figure resting on a cell with failed requests is flagged."""
    if value is None:
        return "not measured"
    v = "meets" if value <= limit else "misses"
    failed = sum(get(*k, "errors") or 0 for k in cells_used)
    return v if failed == 0 else f"{v} ({failed} failed requests)"


def cmd(*args):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or r.stderr.strip()
    except Exception:  # noqa: BLE001 - informational only
        return "?"


lines = []
p = lines.append
p("# Benchmarks\n")
p("Produced by `scripts/bench-compare.sh`" + (" (**QUICK=1 smoke run: figures are not meaningful**)" if quick else "")
  + f": {run['duration_s']} s per cell, {rounds} round(s), median per cell; concurrency {', '.join(map(str, concs))}, closed loop. "
  "All processes on loopback on one machine; the same load from `genfront bench` is sent, in the same run, directly to a "
  "zero-delay native SGLang mock engine (`genfront mocker --api sglang --zero-delay`), through nginx `proxy_pass` (one "
  f"worker), through smg {run['smg']} (`smg launch --policy round_robin`), through genfront in direct mode, and through "
  "genfront + sidecar. Frontend CPU and RSS come from `/proc` over each measured window (genfront + sidecar summed for the "
  "sidecar path; the nginx worker; smg's one process with all its threads). Absolute times on a shared 2-core machine "
  "mean little; the ratios are the point.\n")
p("## Machine\n")
p(f"- {platform.machine()}, {os.cpu_count()} CPUs, kernel {platform.release()}")
p(f"- {cmd('rustc', '--version')}; {cmd('nginx', '-v') or cmd('/usr/sbin/nginx', '-v')}; smg {run['smg']}")
p(f"- genfront {cmd(os.path.join(here, '..', 'target', 'release', 'genfront'), '--version')}\n")

# ---- targets
p("## Targets\n")
p("| target | workload | concurrency | measured | value | status |")
p("|---|---|---|---|---|---|")
for w in workloads:
    for c in concs:
        g, s = get(w, c, "genfront", "cpu_req"), get(w, c, "smg", "cpu_req")
        r = ratio(g, s)
        p(f"| frontend CPU per request ≤ smg | {w} | {c} | genfront ÷ smg CPU µs/req | {fmt(r, 2)}× "
          f"({fmt(g)} vs {fmt(s)} µs) | {verdict(r, 1.0, (w, c, 'genfront'), (w, c, 'smg'))} |")
for w in workloads:
    for c in concs:
        g, n = get(w, c, "genfront", "cpu_req"), get(w, c, "nginx", "cpu_req")
        r = ratio(g, n)
        p(f"| frontend CPU per request ≤ 1.5× nginx | {w} | {c} | genfront ÷ nginx CPU µs/req | {fmt(r, 2)}× "
          f"({fmt(g)} vs {fmt(n)} µs) | {verdict(r, 1.5, (w, c, 'genfront'), (w, c, 'nginx'))} |")
for w in ("stream", "streamlp"):
    if w in workloads:
        for c in concs:
            v = get(w, c, "genfront", "cpu_tok")
            p(f"| streaming ≤ 2 µs CPU per token | {w} | {c} | genfront CPU µs per streamed token | {fmt(v, 2)} µs | {verdict(v, 2.0, (w, c, 'genfront'))} |")
if "logprobs" in workloads and "plain64" in workloads:
    for c in concs:
        r = ratio(get('logprobs', c, "genfront", "cpu_req"), get('plain64', c, "genfront", "cpu_req"))
        p(f"| logprob-heavy ≤ 2× plain | logprobs ÷ plain64 | {c} | genfront CPU per request, top-5 logprobs vs none | {fmt(r, 2)}× | {verdict(r, 2.0, ('logprobs', c, 'genfront'), ('plain64', c, 'genfront'))} |")
if "prompt1m" in workloads:
    for c in concs:
        g, d = get('prompt1m', c, "genfront", "p50"), get('prompt1m', c, "direct", "p50")
        v = None if g is None or d is None else g - d
        p(f"| 1 MiB prompt adds ≤ 2 ms p50 | prompt1m | {c} | p50(genfront) − p50(direct) | {fmt(v, 3)} ms | {verdict(v, 2.0, ('prompt1m', c, 'genfront'), ('prompt1m', c, 'direct'))} |")
half_d, half_g, sat = load("half-direct"), load("half-genfront"), load("sat-genfront")
if half_d and half_g and sat:
    a99 = ms(half_g, "latency", "p99_us") - ms(half_d, "latency", "p99_us")
    a50 = ms(half_g, "latency", "p50_us") - ms(half_d, "latency", "p50_us")
    p(f"| added p99 at half saturation ≤ 0.3 ms | unary | open loop | p99(genfront) − p99(direct) at {fmt(half_g['requests_per_s'], 0)} req/s "
      f"(saturation {fmt(sat['requests_per_s'], 0)} req/s) | {fmt(a99, 3)} ms (p50 {fmt(a50, 3)} ms) | {verdict(a99, 0.3)} |")
s10k = load("streams10k")
if s10k:
    n = run["streams"]
    ok = errors(s10k) == 0 and s10k["requests"] == n
    p(f"| {n} concurrent streams, zero errors | slow SSE | {n} | errors | {errors(s10k)} of {s10k['requests']} | {'meets' if ok else 'misses'} |")
    peak = (s10k.get("processes") or [{}])[0].get("rss_peak_bytes")
    per_peak = None if peak is None else max(0, peak - idle_rss) / max(1, n) / 1024.0
    sampled = None
    try:
        rows = [tuple(map(int, ln.split())) for ln in open(os.path.join(work, "streams10k.rss")) if len(ln.split()) == 2]
        top = max((fd for _, fd in rows), default=0)
        open_ = [r for r, fd in rows if top and fd >= 0.98 * top]
        if open_:
            sampled = max(0, statistics.median(open_) - idle_rss) / max(1, n) / 1024.0
    except OSError:
        pass
    p(f"| ≤ 16 KiB RSS per idle open stream | slow SSE | {n} | (RSS − idle RSS) / streams: median while all are open "
      f"(peak) | {fmt(sampled)} KiB ({fmt(per_peak)} KiB) | {verdict(sampled if sampled is not None else per_peak, 16.0)} |")
p("")

# ---- all cells
p("## All runs\n")
p("Medians over the rounds. *Added p50* is the target's p50 minus direct's in the same cell; CPU is the frontend's "
  "own (engine CPU in the last column); *peak RSS* is the frontend's highest RSS over the cell's rounds.\n")
p("| workload | conc | target | req/s | errors | p50 ms | p99 ms | added p50 ms | TTFT p50 ms | frontend CPU µs/req | µs/token | peak RSS MiB | engine CPU µs/req |")
p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for w in workloads:
    for c in concs:
        d50 = get(w, c, "direct", "p50")
        for t in targets:
            x = cells.get((w, c, t))
            if x is None:
                p(f"| {w} | {c} | {t} | no report | | | | | | | | | |")
                continue
            added = None if t == "direct" or x["p50"] is None or d50 is None else x["p50"] - d50
            rss = None if x["rss"] is None else x["rss"] / 2**20
            p(f"| {w} | {c} | {t} | {fmt(x['rps'], 0)} | {x['errors']} | {fmt(x['p50'], 3)} | {fmt(x['p99'], 3)} | "
              f"{fmt(added, 3)} | {fmt(x['ttft'], 3)} | {fmt(x['cpu_req'])} | {fmt(x['cpu_tok'], 2)} | {fmt(rss)} | {fmt(x['engine_cpu'])} |")
p("")
p("Workloads:\n")
for w in workloads:
    body = next((get(w, c, t, "body") for c in concs for t in targets if get(w, c, t, "body")), None)
    extra = f" ({body} B request body)" if body else ""
    if w == "experts":
        try:
            extra += f"; one answer is {int(open(os.path.join(work, 'experts-answer-bytes.txt')).read())} B"
        except (OSError, ValueError):
            pass
    p(f"- `{w}`: {DESCR.get(w, w)}{extra}")
p("")
if "smg" in targets:
    p("smg is reported to leave `TCP_NODELAY` off on its client sockets, so small SSE writes could wait for delayed "
      "ACKs (~40 ms stalls); its streaming figures are reported as they are — compare its stream p99 with direct's "
      "to see whether that happened in this run.\n")

# ---- hand-written sections carried over
carried = None
try:
    with open(os.path.join(docs, "benchmarks.md")) as f:
        old = f.read()
    i = old.find("\n## What was changed")
    if i >= 0:
        carried = old[i + 1:]
except OSError:
    pass
if carried is None:
    try:
        with open(os.path.join(docs, "benchmark-changes.md")) as f:
            carried = f.read()
    except OSError:
        carried = ""
text = "\n".join(lines) + "\n" + carried
with open(out + ".tmp", "w") as f:
    f.write(text if text.endswith("\n") else text + "\n")
os.replace(out + ".tmp", out)
