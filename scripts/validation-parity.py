#!/usr/bin/env python3
"""Validation parity (issue 12): the validation oracle's figures, with genfront's documented
deliberate deviations counted separately.

    ../shared/tools/validation-oracle/run_all.sh            # writes target/validation-oracle/
    scripts/validation-parity.py [OUT_DIR]                   # default target/validation-oracle

The oracle (`../shared/tools/validation-oracle`) compares genfront's verdict on each body with the
engine's own code. Every disagreement it finds is either a bug or a *deliberate deviation*: a
body where genfront answers differently on purpose, because the engine crashes, overflows or
would let one client harm others. Each deviation is documented in the format crate's docs (the
`doc` of each rule below names the section); this script matches the oracle's disagreements
against those rules, prints the headline figures both as the oracle counts them and with the
documented deviations set apart, and lists what is left undocumented (exit code 1 with
`--strict` when anything is).

A rule matches a disagreeing record by format, field (the generator's field name, or a prefix
ending in `*`), the disagreement category, and an optional predicate on the record. Keep rules
narrow: a rule that matches a real bug hides it.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "..", "..", "shared", "tools", "validation-oracle")
sys.path.insert(0, ORACLE)

import analyze  # noqa: E402  (the oracle's own loader and categories, so figures match it)

ENGINE_REJECTS = "engine rejects, genfront accepts"
ENGINE_ACCEPTS = "engine accepts, genfront rejects"
STATUS = "both reject, status differs"
MESSAGE = "both reject, message differs"

SGLANG_DOC = "crates/backends/sglang/src/lib.rs, section \"Deliberate deviations\""
VLLM_DOC = "crates/backends/vllm/src/validate.rs, section \"Deliberate deviations\""


def engine_5xx(r) -> bool:
    """The engine's own code answered 5xx (or raised) on this body: an engine crash path."""
    s = r["oracle"]["status"]
    return s == -1 or s >= 500


def body(r):
    try:
        return json.loads(r["body"])
    except ValueError:
        return None


def ids_out_of_vocab(r, key: str, vocab: int = 152064) -> bool:
    """A token id list under `key` (or nested batch lists) holds an id outside `0..vocab`."""
    doc = body(r)
    if not isinstance(doc, dict):
        return False

    def bad(v):
        if isinstance(v, bool):
            return False
        if isinstance(v, int):
            return v < 0 or v >= vocab
        if isinstance(v, list):
            return any(bad(x) for x in v)
        return False

    return bad(doc.get(key))


def sampling(r, key):
    doc = body(r)
    sp = doc.get("sampling_params") if isinstance(doc, dict) else None
    return sp.get(key) if isinstance(sp, dict) else None


def top(r, key):
    doc = body(r)
    return doc.get(key) if isinstance(doc, dict) else None


def number(v):
    if isinstance(v, bool):
        return None
    return v if isinstance(v, (int, float)) else None


def n_over_4096(r) -> bool:
    n = sampling(r, "n")
    n = number(n)
    return n is not None and n > 4096


def empty_batch_row(r) -> bool:
    ids = top(r, "input_ids")
    return isinstance(ids, list) and any(x == [] for x in ids)


def int32_overflow(r) -> bool:
    mt = number(sampling(r, "max_tokens"))
    ids = top(r, "token_ids")
    plen = len(ids) if isinstance(ids, list) else 0
    return mt is not None and plen + mt > 2**31 - 1


def genfront_says(text):
    return lambda r: text in (r["genfront"].get("message") or "")


def engine_says(text):
    return lambda r: text in (r["oracle"].get("message") or "")


def streamed(r) -> bool:
    return top(r, "stream") is True


def sglang_stream_crash(r) -> bool:
    """A streamed SGLang body that makes SGLang's own code raise (see the crate's deviations)."""
    if not streamed(r):
        return False
    doc = body(r)
    sp = doc.get("sampling_params") if isinstance(doc, dict) else None
    sp = sp if isinstance(sp, dict) else {}
    return (
        "choice" in sp
        or ("n" in sp and sp["n"] is None)
        or (isinstance(doc.get("rid"), list) and not isinstance((doc.get("input_ids") or [None])[0], list))
        or "stop_regex" in sp
    )


# Each rule: format, field (a member of the record's field, `+`-joined for combinations; a prefix
# with trailing `*`; or "*"), categories, predicate, kind ("deviation": genfront differs on
# purpose; "oracle gap": the engine's source makes the check past where the oracle stops, and
# genfront follows the source; "known gap": a documented difference not yet closed), why, doc.
RULES = [
    # Both formats: the engine's own code crashes (5xx) on a body genfront refuses with a 400
    # naming the field, or serves. genfront never answers 5xx for a client mistake.
    dict(format="*", field="*", cats={ENGINE_REJECTS, STATUS, MESSAGE}, when=engine_5xx,
         kind="deviation",
         why="engine answers 5xx (its code raises) on a client mistake; genfront answers 400 or serves it",
         doc="both crates' \"Deliberate deviations\""),
    # ---- SGLang 0.5.23
    dict(format="sglang", field="top.input_ids", cats={ENGINE_ACCEPTS},
         when=lambda r: ids_out_of_vocab(r, "input_ids") or empty_batch_row(r), kind="deviation",
         why="out-of-vocabulary prompt id or empty batch row: refused (the model's embedding lookup fails on them)",
         doc=SGLANG_DOC),
    dict(format="sglang", field="sp.n", cats={ENGINE_ACCEPTS, MESSAGE}, when=n_over_4096,
         kind="deviation",
         why="n above 4096 refused: SGLang fans any n out into n prompt copies (unbounded amplification)",
         doc=SGLANG_DOC),
    dict(format="*", field="*", cats={ENGINE_ACCEPTS}, when=genfront_says("(--max-engine-requests)"),
         kind="deviation",
         why="batch size × n over --max-engine-requests (default 1024): the frontend's bound on one body's engine requests",
         doc="README \"Limits and timeouts\", crates/frontend/src/caps.rs"),
    dict(format="sglang", field="*", cats={ENGINE_ACCEPTS}, when=sglang_stream_crash,
         kind="deviation",
         why="a body SGLang's code raises on (sampling_params.choice, n: null, a list rid for one prompt, a bad stop_regex): with stream: true its stream ends without a word, which the oracle reads as accepted; genfront's 400 error event",
         doc=SGLANG_DOC),
    dict(format="sglang", field="top.text", cats={ENGINE_ACCEPTS},
         when=lambda r: top(r, "text") == [], kind="deviation",
         why="text: [] next to input_ids: SGLang answers an empty batch; genfront refuses the mixed prompt",
         doc=SGLANG_DOC),
    dict(format="sglang", field="top.session_params", cats={ENGINE_REJECTS},
         when=engine_says("does not exist"), kind="deviation",
         why="session_params.id naming no session: genfront keeps no sessions and forwards it",
         doc=SGLANG_DOC),
    dict(format="sglang", field="*", cats={ENGINE_ACCEPTS},
         when=genfront_says("Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported"),
         kind="oracle gap",
         why="grammar on a --skip-tokenizer-init server: SGLang's scheduler aborts it with a 400 (grammar_manager.py:36-45,148-159); the oracle stops before the scheduler",
         doc="crates/backends/sglang/src/request.rs, grammars_need_a_tokenizer"),
    # ---- vLLM 0.33.0
    dict(format="vllm", field="sp.max_tokens", cats={ENGINE_ACCEPTS, MESSAGE}, when=int32_overflow,
         kind="deviation",
         why="prompt_len + max_tokens past 2**31-1 refused: the V2 runner's int32 max_seq_len overflows and kills the engine core",
         doc=VLLM_DOC),
    dict(format="vllm", field="sp.trace_decode_token_ids", cats={STATUS}, when=None,
         kind="deviation",
         why="trace replay ValueErrors: vLLM answers 500 (a message-less SSE error when streaming); genfront 400",
         doc=VLLM_DOC),
    dict(format="vllm", field="raw", cats={MESSAGE}, when=genfront_says("json_invalid"),
         kind="deviation",
         why="NaN / Infinity / 1e999 literals (not JSON; Python's json reads them and the field check answers): genfront's json_invalid 400",
         doc=VLLM_DOC),
]


def matches(rule, fmt, r, cat) -> bool:
    if rule["format"] not in ("*", fmt):
        return False
    f = rule["field"]
    if f != "*":
        members = r["field"].split("+")
        if f.endswith("*"):
            if not any(m.startswith(f[:-1]) for m in members):
                return False
        elif f not in members:
            return False
    if cat not in rule["cats"]:
        return False
    when = rule.get("when")
    return when is None or bool(when(r))


def pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def report(fmt, rs):
    rs = [r for r in rs if not analyze.uncertain(r)]
    n = len(rs)
    hits = collections.Counter()
    left = collections.defaultdict(list)
    acc = {"all": 0, "deviation": 0, "oracle gap": 0, "known gap": 0}
    status = dict(acc)
    both = 0
    for r in rs:
        o, g = r["oracle"], r["genfront"]
        if not o["accept"] and not g["accept"]:
            both += 1
        cat = analyze.category(r)
        if cat is None:
            continue
        rule = next((i for i, ru in enumerate(RULES) if matches(ru, fmt, r, cat)), None)
        is_acc = cat in (ENGINE_ACCEPTS, ENGINE_REJECTS)
        acc["all"] += is_acc
        status["all"] += cat == STATUS
        if rule is None:
            left[(r["field"], cat)].append(r)
            continue
        hits[rule] += 1
        kind = RULES[rule]["kind"]
        acc[kind] += is_acc
        status[kind] += cat == STATUS
    apart_acc = acc["deviation"] + acc["oracle gap"]
    apart_st = status["deviation"] + status["oracle gap"]
    print(f"## {fmt}: {n} bodies")
    print(f"- accept/reject agreement: {pct(n - acc['all'], n)} as the oracle counts ({acc['all']} disagree); "
          f"{pct(n - acc['all'] + apart_acc, n)} with documented deviations and oracle gaps apart "
          f"({acc['deviation']} deviations, {acc['oracle gap']} oracle gaps, {acc['known gap']} known gaps)")
    print(f"- status agreement where both reject: {pct(both - status['all'], both)} as counted; "
          f"{pct(both - status['all'] + apart_st, both)} apart")
    for kind in ("deviation", "oracle gap", "known gap"):
        rows = [(i, c) for i, c in hits.items() if RULES[i]["kind"] == kind]
        print(f"- {kind}s: {sum(c for _, c in rows)} disagreeing bodies")
        for i, c in sorted(rows, key=lambda kv: -kv[1]):
            print(f"  - {c:4d}  {RULES[i]['why']}  [{RULES[i]['doc']}]")
    undocumented = sum(len(v) for v in left.values())
    print(f"- undocumented disagreements: {undocumented}")
    for (field, cat), recs in sorted(left.items(), key=lambda kv: -len(kv[1])):
        ex = recs[0]["body"]
        ex = ex if len(ex) < 160 else ex[:160] + "…"
        print(f"  - {len(recs):4d}  {field}: {cat}   e.g. {ex}")
    print()
    return undocumented


def main(argv):
    strict = "--strict" in argv
    args = [a for a in argv if a != "--strict"]
    out = args[0] if args else os.path.join(HERE, "..", "target", "validation-oracle")
    total = 0
    for fmt in ("vllm", "sglang"):
        path = os.path.join(out, f"results-{fmt}.jsonl")
        if not (os.path.exists(path) or os.path.exists(path + ".gz")):
            print(f"## {fmt}: no results at {path}(.gz); run the oracle first")
            continue
        total += report(fmt, analyze.load(path))
    return 1 if strict and total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
