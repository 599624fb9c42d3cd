#!/usr/bin/env bash
# Side-by-side overhead report (issue 15): the same load, in ONE run, against
#   direct   — a zero-delay native SGLang mock engine (`genfront mocker --api sglang --zero-delay`),
#   nginx    — nginx proxy_pass in front of it (one worker process),
#   smg      — the SGLang ecosystem's Rust gateway (`pip install smg==1.13.0`, installed in a venv),
#   genfront — genfront in direct mode (--worker sglang=…),
#   sidecar  — genfront + genfront sidecar (--worker grpc://…),
# for every workload × concurrency, each cell for a fixed duration and several rounds (the
# summary reports the median per cell), plus a saturation/half-saturation latency run and a
# 10,000-concurrent-stream run. Writes docs/benchmarks.md (through scripts/bench_summary.py).
#
# Usage: scripts/bench-compare.sh
# Environment (defaults in brackets):
#   DURATION   seconds per cell [8]           ROUNDS  rounds per cell, median reported [3]
#   CONCS      concurrencies ["4 16"]         STREAMS concurrent slow streams [10000]
#   WORKLOADS  [unary plain64 logprobs stream streamlp prompt128k prompt1m experts]
#   TARGETS    [direct nginx smg genfront sidecar]
#   EXTRAS     [sat streams] — the saturation/half-saturation and many-streams runs ("" skips)
#   QUICK=1    smoke run: DURATION=1 ROUNDS=1 STREAMS=1000 (each still overridable)
#   OUT        where the report goes [docs/benchmarks.md]; QUICK runs default to $WORK/benchmarks.md
#   SMG_VENV   [$HOME/.cache/genfront-bench/smg-venv], reused when it already has smg 1.13.0
# A full default run is 8 workloads × 2 concurrencies × 5 targets × 3 rounds = 240 cells of 8 s
# (+ ~0.2 s warm-up and tail each) ≈ 33 minutes, plus ~1.5 minutes of extras (saturation runs,
# the 10,000 streams) and the release build. QUICK=1 with everything: ~3.5 minutes.
# Everything runs on loopback; processes are started and stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  DURATION=${DURATION:-1}; ROUNDS=${ROUNDS:-1}; STREAMS=${STREAMS:-1000}
else
  DURATION=${DURATION:-8}; ROUNDS=${ROUNDS:-3}; STREAMS=${STREAMS:-10000}
fi
CONCS=${CONCS:-4 16}
WORKLOADS=${WORKLOADS:-unary plain64 logprobs stream streamlp prompt128k prompt1m experts}
TARGETS=${TARGETS:-direct nginx smg genfront sidecar}
EXTRAS=${EXTRAS-sat streams}
SMG_VENV=${SMG_VENV:-$HOME/.cache/genfront-bench/smg-venv}
SMG_VERSION=1.13.0
WORK=$(mktemp -d /tmp/genfront-bench.XXXXXX)
if [ "$QUICK" = 1 ]; then OUT=${OUT:-$WORK/benchmarks.md}; else OUT=${OUT:-docs/benchmarks.md}; fi
has() { case " $1 " in *" $2 "*) return 0;; *) return 1;; esac; }
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

echo "== building genfront (release)"
cargo build --release -q -p genfront
BIN=$ROOT/target/release/genfront

if has "$TARGETS" nginx && ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  echo "== installing nginx (Debian package)"
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null) \
      || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx
  fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# smg: a Python wheel wrapping the Rust gateway. `smg launch` runs the router inside the Python
# process itself (one PID, named smg::router, with its tokio threads; no child processes), so
# that one PID's /proc CPU is all of smg's cost. What `smg launch --help` (1.13.0) taught:
#   --worker-urls URL --policy round_robin --host H --port P   the routing itself;
#   --disable-tokenizer-autoload   no model/tokenizer needed for /generate with input_ids (pure
#                                  load balancing; without it smg tries to fetch a tokenizer);
#   --prometheus-port P            its metrics listener defaults to 0.0.0.0:29000 — give it a free
#                                  loopback port so runs do not collide;
#   --max-payload-size             default 512 MiB, enough for the 1 MiB prompt;
#   --log-level warn               its per-request info logs would cost CPU nginx/genfront don't pay.
# It answers 415-like "Expected request with `Content-Type: application/json`" without that header
# (genfront bench always sends it). smg does not set TCP_NODELAY on its client sockets, so its
# small SSE writes stall on delayed ACKs (~40 ms per stall): its streaming figures are reported as
# they are, and that is the cause.
SMG=$SMG_VENV/bin/smg
if has "$TARGETS" smg; then
  if ! "$SMG_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('smg') != '$SMG_VERSION')" 2>/dev/null; then
    echo "== installing smg $SMG_VERSION into $SMG_VENV"
    python3 -m venv "$SMG_VENV"
    "$SMG_VENV/bin/pip" install -q "smg==$SMG_VERSION"
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_http() { for _ in $(seq 1 400); do curl -sf -o /dev/null "$1" && return 0; sleep 0.05; done; echo "not up: $1" >&2; return 1; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# Token prompts of a given JSON size: genfront bench draws ids uniformly from 0..32000 and
# serialises them compactly, so a prompt costs (mean decimal digits + 1 comma) bytes per token.
tokens_for_bytes() { python3 -c "
v=32000; d=sum(len(str(i)) for i in range(v))/v
print(int($1/(d+1)))"; }
T128K=$(tokens_for_bytes 131072)
T1M=$(tokens_for_bytes 1048576)
# Routed experts: the mock reports 4 layers × top-2 i32 ids per position, base64 (~43 B per
# position, prompt positions included), so 65,472 prompt + 64 new positions ≈ 2.8 MB per answer.
# 65,536 positions is as many as the mock engine itself admits (its request check, like
# genfront's default --max-routed-expert-entries, allows 64 Mi ids at an assumed 1,024 per row).
EXPERT_PROMPT=65472
CONTEXT_LEN=$((T1M + 65536))

workload_args() {
  case "$1" in
    unary)      echo "--prompt-len 32 --max-new-tokens 8" ;;
    plain64)    echo "--prompt-len 32 --max-new-tokens 64" ;;
    logprobs)   echo "--prompt-len 32 --max-new-tokens 64 --logprobs 5" ;;
    stream)     echo "--prompt-len 32 --max-new-tokens 128 --stream" ;;
    streamlp)   echo "--prompt-len 32 --max-new-tokens 128 --stream --logprobs 5" ;;
    prompt128k) echo "--prompt-len $T128K --max-new-tokens 8" ;;
    prompt1m)   echo "--prompt-len $T1M --max-new-tokens 8" ;;
    experts)    echo "--prompt-len $EXPERT_PROMPT --max-new-tokens 64 --routed-experts" ;;
    *) echo "unknown workload: $1" >&2; return 1 ;;
  esac
}
for w in $WORKLOADS; do workload_args "$w" >/dev/null; done
for t in $TARGETS; do case "$t" in direct|nginx|smg|genfront|sidecar) ;; *) echo "unknown target: $t" >&2; exit 2;; esac; done

P_MOCK=$(free_port)
export RUST_LOG=warn
# Limits raised so the 1 MiB prompt and the routed-experts answer are accepted everywhere: the
# mock's context length, genfront's routed-expert entry cap (positions × 1,024 assumed ids).
GF_LIMITS=(--max-routed-expert-entries 1000000000)

"$BIN" mocker --api sglang --zero-delay --enable-return-routed-experts --context-len "$CONTEXT_LEN" \
  --host 127.0.0.1 --port "$P_MOCK" >"$WORK/mock.log" 2>&1 &
MOCK=$!; PIDS+=("$MOCK")
wait_http "http://127.0.0.1:$P_MOCK/health"
declare -A URL FRONT
URL[direct]=http://127.0.0.1:$P_MOCK; FRONT[direct]=""

if has "$TARGETS" nginx; then
  P_NGINX=$(free_port)
  mkdir -p "$WORK/nginx/logs"
  cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_max_body_size 64m;
  client_body_buffer_size 2m;
  upstream engine { server 127.0.0.1:$P_MOCK; keepalive 256; }
  server {
    listen 127.0.0.1:$P_NGINX;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
NGX
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx.log" 2>&1 &
  NGX_MASTER=$!; PIDS+=("$NGX_MASTER")
  wait_http "http://127.0.0.1:$P_NGINX/health"
  URL[nginx]=http://127.0.0.1:$P_NGINX; FRONT[nginx]=$(pgrep -P "$NGX_MASTER" | head -n1)
fi

if has "$TARGETS" smg; then
  P_SMG=$(free_port); P_SMG_PROM=$(free_port)
  "$SMG" launch --worker-urls "http://127.0.0.1:$P_MOCK" --policy round_robin --host 127.0.0.1 --port "$P_SMG" \
    --disable-tokenizer-autoload --prometheus-host 127.0.0.1 --prometheus-port "$P_SMG_PROM" --log-level warn \
    >"$WORK/smg.log" 2>&1 &
  SMGPID=$!; PIDS+=("$SMGPID")
  wait_http "http://127.0.0.1:$P_SMG/health"
  # The router runs in the launching process; should a version fork workers, count them too.
  URL[smg]=http://127.0.0.1:$P_SMG; FRONT[smg]="$SMGPID $( (pgrep -P "$SMGPID" || true) | tr '\n' ' ')"
fi

if has "$TARGETS" genfront || has "$EXTRAS" sat; then
  P_GF=$(free_port)
  "$BIN" serve --worker "sglang=http://127.0.0.1:$P_MOCK" "${GF_LIMITS[@]}" --host 127.0.0.1 --port "$P_GF" >"$WORK/gf.log" 2>&1 &
  GF=$!; PIDS+=("$GF")
  wait_http "http://127.0.0.1:$P_GF/ready"
  URL[genfront]=http://127.0.0.1:$P_GF; FRONT[genfront]=$GF
fi

if has "$TARGETS" sidecar; then
  P_SC=$(free_port); P_GF2=$(free_port)
  "$BIN" sidecar --engine "sglang=http://127.0.0.1:$P_MOCK" --listen "127.0.0.1:$P_SC" >"$WORK/sc.log" 2>&1 &
  SC=$!; PIDS+=("$SC")
  sleep 0.3
  "$BIN" serve --worker "grpc://127.0.0.1:$P_SC" "${GF_LIMITS[@]}" --host 127.0.0.1 --port "$P_GF2" >"$WORK/gf2.log" 2>&1 &
  GF2=$!; PIDS+=("$GF2")
  wait_http "http://127.0.0.1:$P_GF2/ready"
  URL[sidecar]=http://127.0.0.1:$P_GF2; FRONT[sidecar]="$GF2 $SC"
fi

bench() { # name url "front pids" -- extra args; the engine's PID is always the last --pid
  local name=$1 url=$2 front=$3; shift 3
  [ "${1:-}" = "--" ] && shift
  local pids=() p
  for p in $front $MOCK; do pids+=(--pid "$p"); done
  if ! "$BIN" bench --url "$url" --format sglang --no-progress --json "$WORK/$name.json" "${pids[@]}" "$@" >"$WORK/$name.txt" 2>"$WORK/$name.err"; then
    echo "   $name: FAILED ($(tail -n1 "$WORK/$name.err"))"
    return 0
  fi
  echo "   $name: $(grep -m1 '^requests' "$WORK/$name.txt")"
}

# One front-PID list per target, recorded for the summary (which sums the frontend's processes).
for t in $TARGETS; do echo "$t ${FRONT[$t]}" >>"$WORK/targets.txt"; done
cat >"$WORK/run.json" <<JSON
{"duration_s": $DURATION, "rounds": $ROUNDS, "concs": "$CONCS", "workloads": "$WORKLOADS",
 "targets": "$TARGETS", "streams": $STREAMS, "quick": $QUICK, "t128k": $T128K, "t1m": $T1M,
 "expert_prompt": $EXPERT_PROMPT, "smg": "$SMG_VERSION"}
JSON

if has "$WORKLOADS" experts; then
  # One answer's size, to show the routed experts really are megabytes.
  python3 - "$EXPERT_PROMPT" >"$WORK/experts-body.json" <<'PY'
import json, random, sys
print(json.dumps({"input_ids": [random.randrange(32000) for _ in range(int(sys.argv[1]))],
                  "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}, "return_routed_experts": True},
                 separators=(",", ":")))
PY
  curl -s -H 'Content-Type: application/json' --data-binary @"$WORK/experts-body.json" \
    -o /dev/null -w '%{size_download}\n' "${URL[direct]}/generate" >"$WORK/experts-answer-bytes.txt"
  echo "== routed-experts answer: $(cat "$WORK/experts-answer-bytes.txt") bytes"
fi

START=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  for w in $WORKLOADS; do
    read -r -a WARGS <<<"$(workload_args "$w")"
    for c in $CONCS; do
      echo "== round $r/$ROUNDS: $w, concurrency $c, ${DURATION}s per target"
      for t in $TARGETS; do
        bench "$w-c$c-$t-r$r" "${URL[$t]}" "${FRONT[$t]}" -- --duration "${DURATION}s" --concurrency "$c" "${WARGS[@]}"
      done
    done
  done
done
echo "== matrix took $(( $(date +%s) - START )) s"

if has "$EXTRAS" sat; then
  echo "== saturation, then half-saturation latency (unary short)"
  bench sat-genfront "${URL[genfront]}" "$GF" -- --duration "${DURATION}s" --concurrency 64 --prompt-len 32 --max-new-tokens 8
  if [ -f "$WORK/sat-genfront.json" ]; then
    RATE=$(python3 -c "import json;print(max(1,int(json.load(open('$WORK/sat-genfront.json'))['requests_per_s']/2)))")
    bench half-direct "${URL[direct]}" "" -- --duration "${DURATION}s" --rate "$RATE" --prompt-len 32 --max-new-tokens 8
    bench half-genfront "${URL[genfront]}" "$GF" -- --duration "${DURATION}s" --rate "$RATE" --prompt-len 32 --max-new-tokens 8
  fi
fi

IDLE_RSS=0
if has "$EXTRAS" streams; then
  echo "== $STREAMS concurrent slow streams"
  P_SLOW=$(free_port); P_GF3=$(free_port)
  "$BIN" mocker --api sglang --mock-speedup 0.01 --host 127.0.0.1 --port "$P_SLOW" >"$WORK/slow.log" 2>&1 &
  SLOW=$!; PIDS+=("$SLOW")
  wait_http "http://127.0.0.1:$P_SLOW/health"
  "$BIN" serve --worker "sglang=http://127.0.0.1:$P_SLOW" --host 127.0.0.1 --port "$P_GF3" >"$WORK/gf3.log" 2>&1 &
  GF3=$!; PIDS+=("$GF3")
  wait_http "http://127.0.0.1:$P_GF3/ready"
  IDLE_RSS=$(awk '/VmRSS/{print $2*1024}' "/proc/$GF3/status")
  # Cross-check of the bench's peak RSS: sample genfront's RSS and open descriptors every 100 ms,
  # and take the median RSS over the samples where (nearly) all streams are open — with ~2 s to
  # the first token and 1 s between tokens those streams are idle, so this is what an open stream
  # holds, not a transient of the connection burst. (glibc's MALLOC_ARENA_MAX=2 was tried: no
  # difference, so the allocator is left at its defaults.)
  ( while [ -e "/proc/$GF3/status" ]; do
      echo "$(awk '/VmRSS/{print $2*1024}' "/proc/$GF3/status" 2>/dev/null) $(ls "/proc/$GF3/fd" 2>/dev/null | wc -l)"
      sleep 0.1
    done >"$WORK/streams10k.rss" ) &
  SAMPLER=$!
  "$BIN" bench --url "http://127.0.0.1:$P_GF3" --format sglang --no-progress --json "$WORK/streams10k.json" --pid "$GF3" \
    --requests "$STREAMS" --concurrency "$STREAMS" --prompt-len 16 --max-new-tokens 4 --stream --warmup 0 --timeout 120s \
    >"$WORK/streams10k.txt" 2>"$WORK/streams10k.err" || echo "   streams10k: FAILED ($(tail -n1 "$WORK/streams10k.err"))"
  echo "   streams10k: $(grep -m1 '^requests' "$WORK/streams10k.txt" || true)"
  kill "$SAMPLER" 2>/dev/null || true
fi

python3 scripts/bench_summary.py "$WORK" "$IDLE_RSS" "$OUT"
cat "$OUT"
echo "report: $OUT; raw reports: $WORK"
