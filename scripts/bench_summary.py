#!/usr/bin/env python3
"""Turn the JSON reports of scripts/bench-compare.sh into docs/benchmarks.md (stdout).

Usage: bench_summary.py WORKDIR IDLE_RSS_BYTES STREAMS QUICK
"""
import json
import os
import platform
import subprocess
import sys

work, idle_rss, streams, quick = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"


def load(name):
    with open(os.path.join(work, name + ".json")) as f:
        return json.load(f)


def proc(report, i=0):
    ps = report.get("processes") or []
    return ps[i] if i < len(ps) else {}


def cpu_req(report, i=0):
    return proc(report, i).get("cpu_us_per_request")


def cpu_tok(report, i=0):
    return proc(report, i).get("cpu_us_per_output_token")


def pct(report, key, field):
    p = report.get(key) or {}
    v = p.get(field)
    return None if v is None else v / 1000.0


def errors(report):
    return sum((report.get("errors") or {}).values())


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def verdict(value, limit, smaller=True):
    if value is None:
        return "not measured"
    ok = value <= limit if smaller else value >= limit
    return "meets target" if ok else "misses target"


def cmd(*args):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=10)
        return (r.stdout.strip() or r.stderr.strip())
    except Exception:  # noqa: BLE001 - informational only
        return "?"


rows = []
for w in ["unary", "plain64", "logprobs", "stream"]:
    for t in ["direct", "nginx", "genfront", "sidecar"]:
        r = load(f"{w}-{t}")
        front = None
        if t == "nginx":
            front = cpu_req(r, 0)
        elif t == "genfront":
            front = cpu_req(r, 0)
        elif t == "sidecar":
            a, b = cpu_req(r, 0), cpu_req(r, 1)
            front = None if a is None or b is None else a + b
        rows.append((w, t, r, front))


def find(w, t):
    for (w2, t2, r, front) in rows:
        if (w2, t2) == (w, t):
            return r, front
    raise KeyError((w, t))


u_ng, u_ng_cpu = find("unary", "nginx")
u_gf, u_gf_cpu = find("unary", "genfront")
u_sc, u_sc_cpu = find("unary", "sidecar")
u_d, _ = find("unary", "direct")
p_gf, p_gf_cpu = find("plain64", "genfront")
l_gf, l_gf_cpu = find("logprobs", "genfront")
s_gf, _ = find("stream", "genfront")
s_gf_tok = cpu_tok(s_gf, 0)
half_d, half_g = load("half-direct"), load("half-genfront")
sat = load("sat-genfront")
added_p50 = None if pct(half_g, "latency", "p50_us") is None else pct(half_g, "latency", "p50_us") - pct(half_d, "latency", "p50_us")
added_p99 = None if pct(half_g, "latency", "p99_us") is None else pct(half_g, "latency", "p99_us") - pct(half_d, "latency", "p99_us")
s10k = load("streams10k")
peak = proc(s10k).get("rss_peak_bytes")
per_stream_kib = None if peak is None else max(0, peak - idle_rss) / max(1, streams) / 1024.0

r_cpu = ratio(u_gf_cpu, u_ng_cpu)
r_lp = ratio(l_gf_cpu, p_gf_cpu)

print("# Benchmarks\n")
print("Produced by `scripts/bench-compare.sh`" + (" (QUICK=1: reduced run sizes)" if quick else "") + ". "
      "All processes on loopback on one machine; the same load is sent, in the same run, directly to a zero-delay native "
      "SGLang mock engine, through nginx `proxy_pass`, through genfront in direct mode, and through genfront + sidecar. "
      "Absolute times on a shared 2-core machine mean little; the ratios are the point.\n")
print("## Machine\n")
print(f"- {platform.machine()}, {os.cpu_count()} CPUs, kernel {platform.release()}")
print(f"- {cmd('rustc', '--version')}; {cmd('nginx', '-v') or cmd('/usr/sbin/nginx', '-v')}")
print(f"- genfront {cmd(os.path.join('target', 'release', 'genfront'), '--version')}\n")
print("## Targets\n")
print("| target | measured | value | status |")
print("|---|---|---|---|")
print(f"| frontend CPU per short unary request ≤ 1.5× nginx | genfront / nginx CPU per request | {fmt(r_cpu, 2)}× "
      f"({fmt(u_gf_cpu)} µs vs {fmt(u_ng_cpu)} µs) | {verdict(r_cpu, 1.5)} |")
print(f"| added p99 latency at half saturation ≤ 0.3 ms | p99(genfront) − p99(direct) at {fmt(half_g['requests_per_s'], 0)} req/s "
      f"(saturation {fmt(sat['requests_per_s'], 0)} req/s) | {fmt(added_p99, 3)} ms (p50 {fmt(added_p50, 3)} ms) | {verdict(added_p99, 0.3)} |")
print(f"| SSE relay ≤ 2 µs CPU per token | genfront CPU per streamed token (128-token streams, per-request cost included) | "
      f"{fmt(s_gf_tok, 2)} µs | {verdict(s_gf_tok, 2.0)} |")
print(f"| logprob-heavy ≤ 2× plain | genfront CPU per request, top-5 logprobs vs none (64 tokens) | {fmt(r_lp, 2)}× | {verdict(r_lp, 2.0)} |")
print(f"| {streams} concurrent streams, zero errors | errors | {errors(s10k)} of {s10k['requests']} | "
      f"{'meets target' if errors(s10k) == 0 and s10k['requests'] == streams else 'misses target'} |")
print(f"| ≤ 16 KiB per idle stream | (peak RSS − idle RSS) / streams | {fmt(per_stream_kib, 1)} KiB | {verdict(per_stream_kib, 16.0)} |")
print()
print("## All runs\n")
print("CPU is the frontend's own process CPU (genfront + sidecar for the sidecar path; the nginx worker for nginx); "
      "latency is end to end at the client.\n")
print("| workload | target | req/s | errors | p50 ms | p99 ms | TTFT p50 ms | ITL p50 ms | frontend CPU µs/req | engine CPU µs/req |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (w, t, r, front) in rows:
    engine_cpu = cpu_req(r, len(r.get("processes") or []) - 1)
    print(f"| {w} | {t} | {fmt(r['requests_per_s'], 0)} | {errors(r)} | {fmt(pct(r, 'latency', 'p50_us'), 3)} | "
          f"{fmt(pct(r, 'latency', 'p99_us'), 3)} | {fmt(pct(r, 'ttft', 'p50_us'), 3)} | {fmt(pct(r, 'itl', 'p50_us'), 3)} | "
          f"{fmt(front)} | {fmt(engine_cpu)} |")
print()
print("Workloads: `unary` = prompt 32, 8 new tokens; `plain64` / `logprobs` = 64 new tokens without / with top-5 "
      "logprobs; `stream` = SSE, 128 tokens; all closed loop at concurrency 16 unless noted.\n")

notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmark-changes.md")
if os.path.exists(notes):
    with open(notes) as f:
        print(f.read())
