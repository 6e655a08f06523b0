#!/usr/bin/env python3
"""Writes BENCHMARKS.md from one run of scripts/bench.sh.

Reads criterion's results (<target>/criterion/**/new/{benchmark,estimates}.json) and the
side files bench.sh leaves in <target>/bench-report/: meta.json (machine, load), memory.json
(bench-memory), pairs.json (bench-pairs), callgrind.json (instructions per op),
wasm-size.json (the bundle as built), wasm.json (benches/js/bench.mjs), wasm-callgrind.json
(benches/js/instructions.cjs), python.json (benches/py/batch.py), wasm-floor.json
(scripts/wasm-floor.sh) and skipped-<part>.txt (why a part did not run). Every
figure of the tables comes from those files; the explanations around them quote a few
figures from elsewhere, each with its source named (the wasm size breakdown from
wasm/README.md, the C ABI's parts from ffi/README.md). A missing file leaves the rows it
feeds "not measured", never met.

usage: report.py --target TARGET_DIR --out BENCHMARKS.md [--repo REPO_ROOT]
"""

import argparse
import glob
import json
import os
import re
import sys



def load_criterion(target):
    """{full_id: {"ns": ns per element, "lo":, "hi":, "elements":}} for this run."""
    out = {}
    for bj in glob.glob(os.path.join(target, "criterion", "**", "new", "benchmark.json"), recursive=True):
        d = os.path.dirname(bj)
        try:
            meta = json.load(open(bj))
            est = json.load(open(os.path.join(d, "estimates.json")))
        except (OSError, ValueError):
            continue
        # criterion's headline figure: the slope when it has one, else the mean.
        e = est.get("slope") or est["mean"]
        thr = meta.get("throughput") or {}
        elements = thr.get("Elements") or thr.get("elements") or 1
        ci = e["confidence_interval"]
        out[meta["full_id"]] = {
            "ns": e["point_estimate"] / elements,
            "lo": ci["lower_bound"] / elements,
            "hi": ci["upper_bound"] / elements,
            "elements": elements,
        }
    return out


def load_json(path, default):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return default


def fmt_ns(ns):
    if ns is None:
        return "—"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    if ns >= 100:
        return f"{ns:.0f} ns"
    return f"{ns:.1f} ns"


def fmt_ci(r):
    if r is None:
        return "—"
    return f"{fmt_ns(r['ns'])} ({fmt_ns(r['lo'])}–{fmt_ns(r['hi'])})"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_x(x):
    return "—" if x is None else f"{x:.2f}×"


GOAL_UNCONTENDED = 1.5
GOAL_HANDOFF = 1.2
GOAL_SESSION, GOAL_LOCK, GOAL_CLAIM = 64, 64, 48
GOAL_KEEP_ALIVE = 1.5
GOAL_WASM_RAW, GOAL_WASM_GZIP = 60_000, 25_000  # KB = 1000 bytes (the stricter reading)
GOAL_WASM = 5.0
GOAL_CABI = 1.2
NAME_FIELD = 65  # a LockRow's inline name: a length byte and room for 64 bytes


def fmt_xg(x, goal):
    """A ratio, with a third decimal when two would print the bound itself (1.505 > 1.5)."""
    if x is not None and goal is not None and x != goal and round(x, 2) == goal:
        return f"{x:.3f}×"
    return fmt_x(x)


def fmt_b(n):
    return "—" if n is None else f"{n:,} B"


def fmt_kb(n):
    return "—" if n is None else f"{n:,} B ({n / 1000:.1f} KB)"


def fmt_ir(v):
    return "—" if v is None else f"{v:,.0f} instr"


class Row:
    """One row of the goals table. `checks` are (label, value, bound) triples: the row is
    met when every measured value is within its bound; a row with none is not measured."""

    def __init__(self, measure, fencelock, baseline, goal_txt, *, crit=None, pair=None, ir=None,
                 ir_note="", checks=None, goal=None, missing="", counted=True, key="", reasons=None):
        self.measure, self.fencelock, self.baseline, self.goal_txt = measure, fencelock, baseline, goal_txt
        # Why a ratio this row has a column for is absent ({"time"|"interleaved"|"instructions": why});
        # a column not named has no such measure for this row ("—").
        self.reasons = reasons or {}
        self.crit, self.pair, self.ir, self.ir_note = crit, pair, ir, ir_note
        self.goal, self.missing, self.counted, self.key = goal, missing, counted, key
        if checks is None:
            checks = [(lbl, x, goal) for lbl, x in (("time", crit), ("interleaved", pair), ("instructions", ir))]
        self.checks = [(lbl, x, g) for lbl, x, g in checks if x is not None]

    @property
    def measured(self):
        return bool(self.checks)

    @property
    def met(self):
        return self.measured and all(x <= g for _, x, g in self.checks)

    def missed_by(self):
        return [lbl for lbl, x, g in self.checks if x > g]

    def cell(self, label, x, note=""):
        if x is not None:
            return fmt_xg(x, self.goal) + note
        why = self.reasons.get(label)
        return f"not measured ({why})" if why else "—"

    def verdict(self):
        if not self.measured:
            return f"not measured ({self.missing or 'no result in this run'})"
        bad = self.missed_by()
        good = [lbl for lbl, x, g in self.checks if x <= g]
        info = "" if self.counted else " (information)"
        if not bad:
            return f"met{info}"
        if good and len(self.checks) > 1:
            return f"**missed**{info} by {', '.join(bad)}; met by {', '.join(good)}"
        return f"**missed**{info}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args()

    side = os.path.join(a.target, "bench-report")
    crit = load_criterion(a.target)
    meta = load_json(os.path.join(side, "meta.json"), {})
    memory = load_json(os.path.join(side, "memory.json"), [])
    cg = load_json(os.path.join(side, "callgrind.json"), {})
    wasm = load_json(os.path.join(side, "wasm.json"), None)
    pairs = load_json(os.path.join(side, "pairs.json"), {})
    wasm_size = load_json(os.path.join(side, "wasm-size.json"), None)
    py = load_json(os.path.join(side, "python.json"), None)
    wasm_floor = load_json(os.path.join(side, "wasm-floor.json"), None)
    wasm_cg = load_json(os.path.join(side, "wasm-callgrind.json"), None)
    # Parts bench.sh skipped, with the reason (skipped-<part>.txt).
    skipped = {}
    for p in glob.glob(os.path.join(side, "skipped-*.txt")):
        skipped[os.path.basename(p)[len("skipped-"):-len(".txt")]] = open(p).read().strip()
    if skipped.get("wasm-build"):
        # Not this run's package: none of its speed is reported (bench.sh does not measure it).
        wasm = wasm_cg = None
    m_cache = re.search(r"(\d+) KB cache", str(meta.get("cpu", "")))
    cache_txt = f"the {m_cache.group(1)} KB cache /proc/cpuinfo reports" if m_cache else "the CPU's per-core cache"

    def fits_cache(mb):
        """Whether `mb` (10^6 bytes) fits the cache /proc/cpuinfo reports (unknown: no)."""
        return bool(m_cache and mb and mb * 1e6 <= int(m_cache.group(1)) * 1024)
    if not crit:
        sys.exit("report.py: no criterion results under " + a.target)

    def ns(full_id):
        r = crit.get(full_id)
        return r["ns"] if r else None

    L = []
    w = L.append
    w("# fencelock benchmarks")
    w("")
    w("Generated by `scripts/bench.sh` (`make bench`) → `benches/report.py`; do not edit by hand.")
    w("Times are criterion's estimate per operation (95 % confidence interval in brackets);")
    w("instruction counts are from callgrind (deterministic, so they do not move with machine")
    w("load). Workloads are defined in `benches/src/lib.rs`, whose unit tests check that each")
    w("one does what its name says. A section between a begin and an end comment marker of the")
    w("same name is written by another script (the replicated-cluster section at the end, by")
    w("`make bench-cluster`) and is kept as it is when this file is regenerated.")
    w("")
    # ------------------------------------------------------------------ goals (first)
    def cgv(k, f="ir"):
        v = cg.get(k)
        return v.get(f) if isinstance(v, dict) else None

    def pair_x(key):
        p = pairs.get(key)
        return ratio(p["fencelock"], p["baseline"]) if p else None

    def mem(what):
        return next((m["bytes"] for m in memory if m["what"] == what), None)

    no_cg = skipped.get("callgrind")
    no_wasm = skipped.get("wasm")
    why_crit = "no criterion result in this run"
    why_ir = no_cg or "no callgrind count"
    why_pair = "no bench-pairs result" if not pairs else "no such pair"
    native_reasons = {"time": why_crit, "interleaved": why_pair, "instructions": why_ir}

    def both(t, i):
        """A cell with a time and an instruction count."""
        parts = [x for x in (t, fmt_ir(i) if i is not None else None) if x]
        return " · ".join(parts) if parts else "—"

    rows = []
    for n in (16, 1024, 16384):
        f, b = crit.get(f"uncontended/fencelock/{n}"), crit.get(f"uncontended/hashmap_string/{n}")
        rows.append(Row(
            f"uncontended acquire + release ÷ `HashMap<String,_>` insert + remove, {n} locks",
            both(fmt_ci(f) if f else None, cgv(f"uncontended/{n}")),
            both(fmt_ci(b) if b else None, cgv(f"map_string/{n}")),
            f"≤ {GOAL_UNCONTENDED}×", goal=GOAL_UNCONTENDED, key="uncontended",
            crit=ratio(f and f["ns"], b and b["ns"]), pair=pair_x(f"uncontended/{n}"),
            ir=ratio(cgv(f"uncontended/{n}"), cgv(f"map_string/{n}")),
            missing=why_crit, reasons=native_reasons))
    f, b = crit.get("handoff/fencelock"), crit.get("uncontended/hashmap_string/1024")
    rows.append(Row(
        "contended hand-off (a release granting the next waiter) ÷ the same baseline (1024 keys)",
        both(fmt_ci(f) if f else None, cgv("handoff")),
        both(fmt_ci(b) if b else None, cgv("map_string/1024")),
        f"≤ {GOAL_HANDOFF}×", goal=GOAL_HANDOFF, key="handoff",
        crit=ratio(f and f["ns"], b and b["ns"]), pair=pair_x("handoff"),
        ir=ratio(cgv("handoff"), cgv("map_string/1024")), missing=why_crit, reasons=native_reasons))
    sess, lock, claim, label = mem("session"), mem("lock"), mem("claim"), mem("label")
    rows.append(Row("bytes per session", fmt_b(sess), "—", f"≤ {GOAL_SESSION} B", key="session",
                    checks=[("bytes", sess, GOAL_SESSION)] if sess is not None else [],
                    missing="bench-memory gave no figure"))
    lock_rest = lock - NAME_FIELD if lock is not None else None
    rows.append(Row("bytes per lock (+ name)",
                    f"{fmt_b(lock)} = {fmt_b(lock_rest)} + the {NAME_FIELD} B name field" if lock is not None else "—",
                    "—", f"≤ {GOAL_LOCK} B + name: the row less its name field ≤ {GOAL_LOCK} B", key="lock",
                    checks=[("bytes", lock_rest, GOAL_LOCK)] if lock_rest is not None else [],
                    missing="bench-memory gave no figure"))
    rows.append(Row("bytes per claim", fmt_b(claim), "—", f"≤ {GOAL_CLAIM} B", key="claim",
                    checks=[("bytes", claim, GOAL_CLAIM)] if claim is not None else [],
                    missing="bench-memory gave no figure"))
    big, small = crit.get("keep_alive/fencelock/65536"), crit.get("keep_alive/fencelock/1024")
    rows.append(Row(
        "keep-alive cost, 64k live sessions ÷ 1k",
        "64k: " + both(fmt_ci(big) if big else None, cgv("keep_alive/65536")),
        "1k: " + both(fmt_ci(small) if small else None, cgv("keep_alive/1024")),
        f"≤ {GOAL_KEEP_ALIVE}×", goal=GOAL_KEEP_ALIVE, key="keep_alive",
        crit=ratio(big and big["ns"], small and small["ns"]), pair=pair_x("keep_alive/65536/1024"),
        ir=ratio(cgv("keep_alive/65536"), cgv("keep_alive/1024")), missing=why_crit, reasons=native_reasons))
    # Information: the same in a scattered order (the goal's workload visits rows in order).
    big, small = crit.get("keep_alive/fencelock_shuffled/65536"), crit.get("keep_alive/fencelock_shuffled/1024")
    rows.append(Row(
        "keep-alive cost in a scattered order, 64k live sessions ÷ 1k (information: keep-alives as a host gets them)",
        "64k: " + both(fmt_ci(big) if big else None, cgv("keep_alive_shuffled/65536")),
        "1k: " + both(fmt_ci(small) if small else None, cgv("keep_alive_shuffled/1024")),
        f"≤ {GOAL_KEEP_ALIVE}×", goal=GOAL_KEEP_ALIVE, key="keep_alive_shuffled", counted=False,
        crit=ratio(big and big["ns"], small and small["ns"]), pair=pair_x("keep_alive_shuffled/65536/1024"),
        ir=ratio(cgv("keep_alive_shuffled/65536"), cgv("keep_alive_shuffled/1024")), missing=why_crit,
        reasons=native_reasons))
    wfiles = [f for f in (wasm_size or {}).get("files", []) if f["file"].endswith(".wasm")]
    wraw = sum(f["raw"] for f in wfiles) if wfiles else None
    wgz = sum(f["gzip9"] for f in wfiles) if wfiles else None
    wmiss = no_wasm or skipped.get("wasm-size") or "no wasm/pkg/web"
    stale = "" if (wasm_size or {}).get("built_this_run", True) else " (the build failed: an older package)"
    rows.append(Row("wasm bundle, raw (`wasm/pkg/web/*.wasm` after wasm-opt)", fmt_kb(wraw) + (stale if wraw else ""), "—",
                    "≤ 60 KB (60,000 B)", key="wasm_size",
                    checks=[("raw", wraw, GOAL_WASM_RAW)] if wraw is not None else [], missing=wmiss))
    rows.append(Row("wasm bundle, gzip -9", fmt_kb(wgz), "—", "≤ 25 KB (25,000 B)", key="wasm_size",
                    checks=[("gzip", wgz, GOAL_WASM_GZIP)] if wgz is not None else [], missing=wmiss))
    # Information: the small module (fencelock/lite, wasm/lite), a separate first download
    # with the lock rules alone; the team decides whether it answers the bundle goal.
    lfiles = [f for f in (wasm_size or {}).get("lite", []) if f["file"].endswith(".wasm")]
    lraw = sum(f["raw"] for f in lfiles) if lfiles else None
    lgz = sum(f["gzip9"] for f in lfiles) if lfiles else None
    lmiss = no_wasm or skipped.get("wasm-size") or "no wasm/pkg/lite/web"
    for what, v, goal_v, goal_t in (("raw", lraw, GOAL_WASM_RAW, "≤ 60 KB (60,000 B)"),
                                    ("gzip", lgz, GOAL_WASM_GZIP, "≤ 25 KB (25,000 B)")):
        rows.append(Row(f"wasm small module, {what}{' -9' if what == 'gzip' else ''} "
                        "(`fencelock/lite`: `wasm/pkg/lite/web/*.wasm` after wasm-opt; the lock "
                        "rules with numbers in and out, shipped beside the full module)",
                        fmt_kb(v) + (stale if v else ""), "—", goal_t, key="wasm_lite", counted=False,
                        checks=[(what, v, goal_v)] if v is not None else [], missing=lmiss))
    # Information: the floor, the core's lock rules behind the thinnest binding
    # (benches/wasm-floor, built as the shipped module by scripts/wasm-floor.sh).
    fmiss = no_wasm or skipped.get("wasm-floor") or "scripts/wasm-floor.sh did not run"
    for what, k, goal_v, goal_t in (("raw", "raw", GOAL_WASM_RAW, "≤ 60 KB (60,000 B)"),
                                    ("gzip", "gzip9", GOAL_WASM_GZIP, "≤ 25 KB (25,000 B)")):
        v = (wasm_floor or {}).get(k)
        rows.append(Row(f"wasm floor, {what}{' -9' if what == 'gzip' else ''}: the core's lock rules "
                        "behind the thinnest binding (`benches/wasm-floor`: the core's inputs, "
                        "numbers out; not shipped)",
                        fmt_kb(v), "—", goal_t, key="wasm_floor", counted=False,
                        checks=[(what, v, goal_v)] if v is not None else [], missing=fmiss))
    # A wasm build that failed leaves an earlier package: its speed is not this run's.
    no_wasm_speed = no_wasm or skipped.get("wasm-build")
    wasm_by_id = {} if no_wasm_speed else {r["id"]: r for r in (wasm or {}).get("results", [])}
    nat = crit.get("uncontended/fencelock/1024")
    nat_ns, nat_ir = (nat["ns"] if nat else None), cgv("uncontended/1024")
    for wid, cid, path, key in (
        ("uncontended_id/1024", "acqrel-id", "id calls (`acquireFastId` / `releaseFastId`, names interned once)", "wasm"),
        ("uncontended_fast/1024", "acqrel-fast", "typed fast path, names as strings (`acquireFast` / `releaseFast`)", "wasm_str"),
        ("uncontended/1024", "acqrel", "object API (`acquire` / `release`, events as objects)", "wasm_obj"),
        ("uncontended_lite/1024", "acqrel-lite", "the small module (`fencelock/lite`: `acquire` / `release`, names as strings)", "wasm_lite_speed"),
    ):
        counted = key == "wasm"
        wr = wasm_by_id.get(wid)
        wi = None if no_wasm_speed else (wasm_cg or {}).get(cid)
        miss = no_wasm_speed or ("no wasm result for " + wid)
        if wr is None and not no_wasm_speed and wid != "uncontended/1024":
            miss = f"bench.mjs has no {wid.split('/')[0]} workload"
        rows.append(Row(
            f"wasm acquire + release ÷ native, 1024 locks: {path}",
            both(fmt_ns(wr["ns_per_op"]) if wr else None, wi),
            both(fmt_ns(nat_ns) if nat_ns else None, nat_ir),
            f"≤ {GOAL_WASM}×", goal=GOAL_WASM, counted=counted, key=key,
            crit=ratio(wr and wr["ns_per_op"], nat_ns), ir=ratio(wi, nat_ir), missing=miss,
            reasons={"time": miss if wr is None else why_crit,
                     "instructions": (no_wasm_speed or no_cg or "no wasm count") if wi is None else why_ir}))
    fc = crit.get("ffi/uncontended/1024")
    cabi_ir, host_ir = cgv("cabi_uncontended/1024"), cgv("c_host_uncontended/1024")
    batch_ir = cgv("c_host_batch/1024")
    cabi_x, host_x = ratio(cabi_ir, nat_ir), ratio(host_ir, nat_ir)
    rows.append(Row(
        "C ABI acquire + release (its outputs drained) ÷ native, 1024 locks",
        both(fmt_ci(fc) if fc else None, cabi_ir) + (f" (C host: {fmt_ir(host_ir)})" if host_ir else "")
        + (f" (C host, 64 inputs per `fencelock_service_submit`: {fmt_ir(batch_ir)}"
           + (f", {ratio(batch_ir, nat_ir):.2f}×" if nat_ir else "") + ")" if batch_ir else ""),
        both(fmt_ci(nat) if nat else None, nat_ir),
        f"≤ {GOAL_CABI}×", goal=GOAL_CABI, key="cabi",
        crit=ratio(fc and fc["ns"], nat_ns), pair=pair_x("cabi/1024"), ir=cabi_x,
        ir_note=(f" (C host {fmt_xg(host_x, GOAL_CABI)})" if host_x
                 else f" (from C: not measured ({skipped.get('c-host') or no_cg or 'no C host count'}))"),
        checks=[(l, x, GOAL_CABI) for l, x in (("time", ratio(fc and fc["ns"], nat_ns)), ("interleaved", pair_x("cabi/1024")),
                                               ("instructions", cabi_x), ("instructions from C", host_x))],
        missing=why_crit, reasons=native_reasons))

    counted = [r for r in rows if r.counted]
    n_met = sum(r.met for r in counted)
    n_meas = sum(r.measured for r in counted)
    w("## Goals")
    w("")
    w(f"**{n_met} of {len(counted)} goal rows met in this run** ({len(counted) - n_meas} not measured), the project's seven")
    w("goals with the uncontended one at three sizes and the bytes and bundle goals one row per")
    w("figure. Every figure below was measured in this run; a row is met only when every ratio")
    w("measured for it is within the bound (one missed by one measure and met by another says")
    w("which), and a row with nothing measured is never met.")
    w("")
    w("| measure | fencelock | baseline | ratio by time (criterion) | ratio, interleaved fastest | ratio by instructions (callgrind) | goal | met / missed |")
    w("|---|---|---|---|---|---|---|---|")
    for r in rows:
        w(f"| {r.measure} | {r.fencelock} | {r.baseline} | {r.cell('time', r.crit)} | {r.cell('interleaved', r.pair)} "
          f"| {r.cell('instructions', r.ir, r.ir_note)} | {r.goal_txt} | {r.verdict()} |")
    w("")
    w("How each figure is measured:")
    w("")
    w("- **Baseline** (uncontended, hand-off): `std::collections::HashMap<String, (u64, u64)>` insert")
    w("  then remove of the same 13-byte names, capacity reserved up front (the map owns its keys,")
    w("  as a lock table fed names from the network must). The hand-off goal is set against the")
    w("  same baseline: one hand-off ÷ one insert + remove of that map at 1024 keys.")
    w("- **ratio by time (criterion)**: criterion's estimate per operation of each side, each")
    w("  measured for its own seconds (`benches/benches/*.rs`); for wasm, the median of")
    w("  `benches/js/bench.mjs`'s five samples under node ÷ the native criterion estimate.")
    w("- **ratio, interleaved fastest**: `bench-pairs` alternates short batches of the two sides")
    w("  and keeps each one's fastest batch, the estimate least disturbed by other jobs on a")
    w("  shared machine (there is no such pair across processes, so none for wasm).")
    w("- **ratio by instructions**: callgrind counts only the measured function (`…::run` and")
    w("  what it calls) of `bench-ops` at two repetition counts; the difference divided by the")
    w("  operations added cancels setup. wasm: `benches/js/instructions.cjs`, the whole node")
    w("  process (`--single-threaded --no-liftoff --no-wasm-tier-up`: V8 on one thread, the module")
    w("  compiled by the optimising compiler up front, as a warm host runs it) at two round counts of "
      + (f"{wasm_cg.get('pairs_per_round')} pairs" if wasm_cg else "its pairs")
      + (f" ({wasm_cg['rounds'][0]} → {wasm_cg['rounds'][1]})" if wasm_cg and wasm_cg.get("rounds") else "")
      + ", difference")
    w("  divided, so start-up and V8's compilation cancel (the first rounds cost more per pair")
    w("  while V8 still compiles the JS side, and the default window, 56 → 206, leaves them")
    w("  out: `benches/js/instructions.cjs` says how it was chosen), each round acquiring every lock and then")
    w("  releasing every one, as the native count does; ÷ the native count per pair at 1024 locks")
    w("  (`bench-ops uncontended`). C ABI: `bench-ops cabi_uncontended` (the criterion")
    w("  bench's code, `benches/src/cabi.rs`: each call through an opaque function pointer, its")
    w("  reply read, `fencelock_service_drain_events` when the reply's `pending` is not 0) and,")
    w("  when gcc is installed, the same loop from a C host (`ffi/tests/c/ops.c`")
    w("  `uncontended_pending` against the release static library, as `scripts/bench-ffi-ops.sh`")
    w("  and `ffi/README.md` measure it).")
    w(f"- **Bytes** are `size_of` of a fixed-array service with 1024 rows of one table less the")
    w("  same service with none, ÷ 1024: the row (with its slot of the deadline heap) and its two")
    w(f"  buckets in the table's index array (`bench-memory`). A lock row holds its name inline in a {NAME_FIELD}-byte field (a length")
    w(f"  byte and room for 64 bytes, whatever the name's length), so the rule for \"≤ 64 + name\" is:")
    w(f"  the lock row less that field ≤ 64 B. (Counted with the name's own length instead, a")
    w(f"  13-byte name's lock takes {fmt_b(lock)} against 64 + 13 = 77 B.) A session opened with a holder")
    w(f"  label also takes a {fmt_b(label)} label row in its own table, not counted in the session figure")
    w("  (hosts that never label size that table to 0).")
    w("- **wasm bundle**: every `.wasm` of `wasm/pkg/web` as `scripts/build-wasm.sh` left it in this")
    w("  run (wasm-opt `-Oz`), raw and `gzip -9 -n`; KB = 1000 bytes, the stricter reading (and")
    w("  the one `wasm/README.md` uses).")
    w("- **wasm small module** (information): every `.wasm` of `wasm/pkg/lite/web` as")
    w("  `scripts/build-wasm.sh` left it in this run (the crate `wasm/lite`, built and")
    w("  wasm-opt'd as the full module is), raw and `gzip -9 -n`; its JS glue and class apart.")
    w("- **wasm floor** (information): `benches/wasm-floor`, built by `scripts/wasm-floor.sh`")
    w("  with the shipped module's settings (`scripts/wasm-flags.sh`) and run once under node,")
    w("  measured as the bundle is (its `.wasm` for the web after wasm-opt, raw and `gzip -9 -n`).")
    w("- **keep-alive**: round-robin over n live sessions with one ttl, an idle tick per round")
    w("  (`KeepAlive` in `benches/src/lib.rs`); 64k ÷ 1k of the same measure. Sessions are")
    w("  visited in the order they opened, so their rows are read in order: the cache's best")
    w("  case. The row below it (information) visits them in a fixed scattered order")
    w("  (`KeepAlive::shuffled`), as a host's keep-alives arrive.")
    w("")

    missed = [r for r in rows if r.measured and not r.met]
    if missed:
        w("### Why a goal is missed, and what would fix it")
        w("")

        def per(k, f="ir"):
            v = cgv(k, f)
            if v is None:
                return "?"
            return f"{v:,.0f}" if f == "ir" else f"{v:.1f}"

        keys = []
        for r in missed:
            if r.key not in keys:
                keys.append(r.key)
        for k in keys:
            rs = [r for r in missed if r.key == k]
            by = "; ".join((r.measure.split(", ")[-1] + ": " if k == "uncontended" else "") + ", ".join(
                f"{lbl} {fmt_b(x) if lbl in ('bytes', 'raw', 'gzip') else fmt_xg(x, g)}" for lbl, x, g in r.checks if x > g) for r in rs)
            if k == "uncontended":
                w(f"- **Uncontended acquire + release** (missed: {by}). The map does one hash insert and one")
                w(f"  remove ({per('map_string/1024')} instructions, {per('map_string/1024', 'd1')} D1 misses, {per('map_string/1024', 'bm')} branch mispredicts per pair at")
                w(f"  1024 keys under callgrind); the core {per('uncontended/1024')}, {per('uncontended/1024', 'd1')} and {per('uncontended/1024', 'bm')}, because a lock service is more")
                w("  than a map: per acquire a session lookup (one load at the row its id names), the")
                w("  name checked and hashed, a lock-index probe, a lock row filled (the name copied")
                w("  inline, the creation-order list) and a claim row linked into the session's, the")
                w("  lock's and the arrival lists, a fresh fencing token;")
                sizes = sorted(b for b in (mem("claim"), mem("session"), mem("lock")) if b)
                span = f"{sizes[0]}–{sizes[-1]} bytes" if sizes else "several sizes"
                w(f"  per release the same lookups and every link undone. Rows of {span} in three")
                if any(r.crit is not None and r.ir is not None and r.crit > r.ir for r in rs):
                    w("  tables make the time ratio (cache misses, mispredicted exits of the probing loops) worse")
                    w("  than the instruction ratio where it is. Each table's buckets are already a dense array of their own")
                else:
                    w("  tables cost cache misses and mispredicted exits of the probing loops besides the")
                    w("  instructions. Each table's buckets are already a dense array of their own")
                w("  (a probe loads from a line of 8 or 16 buckets, not from another row); what is left is")
                w("  the work itself: fewer lists per claim (the arrival list exists for the snapshot's")
                w("  order) and the sole holder kept in the lock row, each a layout and format change.")
            elif k == "handoff":
                w(f"- **Contended hand-off** (missed: {by}). One release with a queue: find the session, the")
                w("  lock (name hash + compare) and the claim; unlink the claim from its lists; mark the lock,")
                w("  move the head waiter to the holder list, unschedule its wait deadline, hand out a fresh")
                w(f"  token and queue `Granted` with the name: {per('handoff')} instructions, {per('handoff', 'd1')} D1 misses and")
                w(f"  {per('handoff', 'bm')} mispredicts against the map's {per('map_string/1024')}, {per('map_string/1024', 'd1')} and {per('map_string/1024', 'bm')} (a std FIFO table doing only the")
                w(f"  hand-off, `HashMap` + `VecDeque`: {per('map_handoff')} instructions). The buckets are already")
                w("  dense arrays apart from the rows; an event that refers to the lock row instead of")
                w("  carrying a copy of the name (an API change for every sink) and fewer lists per claim")
                w("  are what is left.")
            elif k == "session":
                w(f"- **Session ({fmt_b(sess)} > {GOAL_SESSION} B).** Where the bytes go (`core/src/storage.rs`): id, deadline,")
                w("  latest request number and its fingerprint (four `u64`), the latest reply (a `u64` and")
                w("  a byte), the ttl or the ttl-class list links (a `u64`, what makes a keep-alive O(1)),")
                w("  the class (a byte), its claim list (head, tail), its neighbours in id order (the")
                w("  snapshot's order), its label row (`u32`), 8 of heap, and apart, its two index buckets")
                w("  (8 bytes, counted here: the measure is the whole cost of an entry). Reaching 64")
                w(f"  needs {sess - GOAL_SESSION if sess else '?'} bytes out. Candidates (none measured here): no id-order links (8; the")
                w("  snapshot would sort the live ids instead), a 32-bit request fingerprint (4), the ttl")
                w("  class and the reply's kind packed into spare bits; the rest would have to come out of")
                w("  the index and heap shares (16), which are what keep lookups O(1) at a load ≤ 50 % and")
                w("  deadlines in order. The index is read only for a session away from its home row")
                w("  ((id − 1) mod the rows, taken at open when free); it could go if an open skipped the")
                w("  ids whose home row is taken, so that every session is at home — ids would still")
                w("  increase but no longer one by one, and a snapshot would restore only into a table")
                w("  with as many session rows as the one it was taken from: a contract change, not made.")
            elif k == "lock":
                w(f"- **Lock ({fmt_b(lock)}: {fmt_b(lock_rest)} besides the {NAME_FIELD} B name field > {GOAL_LOCK} B).** Besides the name:")
                w("  id and lock-delay end (two `u64`), holder list and wait queue (head, tail, count each),")
                w("  the first watch, the permits in use, creation-order links, the dirty-list link and")
                w("  flag, 8 of heap, and apart, its two index buckets (16 bytes: two row numbers and two")
                w("  32-bit hash tags, counted here).")
                w(f"  Getting {lock_rest - GOAL_LOCK if lock_rest else '?'} bytes out (candidates, none measured here): no creation-order links (8;")
                w("  the snapshot would sort by id), the holder and queue counts as `u16` (4), the dirty")
                w("  flag in a spare bit; the rest from the index share (16), whose hash tags spare a probe")
                w("  from comparing names. Names stored out of line, sized to their length, would save most")
                w("  of the 65-byte field for short names, but `LockService::locks` lends `&LockName` out of")
                w("  the row.")
            elif k == "claim":
                w(f"- **Claim ({fmt_b(claim)} > {GOAL_CLAIM} B).** Session and lock row numbers (`u32` each), the mode (two")
                w("  `u32`), arrival number and token-or-deadline (`u64` each), its neighbours on the lock,")
                w("  in the session and in arrival order (three pairs of `u32`), 8 of heap, and apart, its")
                w(f"  two index buckets (8 bytes, counted here). Getting {claim - GOAL_CLAIM if claim else '?'} bytes out (candidates, none measured here): no arrival-order links")
                w("  (8; the snapshot would sort by arrival number), the mode as two `u16` (4); the rest from")
                w("  the index and heap shares (16) — a lock's only hold or wait is already kept out of the")
                w("  claim index, but keeps its share of the buckets.")
            elif k in ("keep_alive", "keep_alive_shuffled"):
                sh = k == "keep_alive_shuffled"
                c1, c64 = f"{k}/1024", f"{k}/65536"
                b1, b2 = cgv(c1, "ll"), cgv(c64, "ll")
                d1, d2 = cgv(c1, "d1"), cgv(c64, "d1")
                ll = (f" (callgrind, simulating a {cg['ll_kb']} KB last level: {max(0.0, b1):.2f} misses per keep-alive"
                      f" at 1k, {max(0.0, b2):.2f} at 64k)"
                      if b1 is not None and b2 is not None and cg.get("ll_kb") else "")
                title = "Keep-alive in a scattered order, 64k ÷ 1k (information)" if sh else "Keep-alive, 64k ÷ 1k"
                i1, i64 = cgv(c1), cgv(c64)
                work = ("The work does not grow" if i64 <= i1 * 1.05 else "The work grows too") \
                    if i1 and i64 else "Instructions (not counted in this run)"
                w(f"- **{title}** (missed: {by}). {work}: {per(c1)} instructions per")
                w(f"  keep-alive at 1k sessions and {per(c64)} at 64k (moving the session to the tail of its")
                w("  ttl class's deadline list is O(1); no heap sift). The time grows: at 64k sessions the")
                sess_mb = (65536 * sess / 1e6) if sess else None
                w(f"  session table is {sess_mb:.1f} MB" if sess_mb else "  session table is several MB")
                if fits_cache(sess_mb):
                    # The reported cache holds the table (on a VM, a figure of the host's):
                    # the misses are in the smaller caches nearer the core.
                    w(f"  — within {cache_txt} (on a virtual machine, the host's figure), not")
                    w(f"  within the smaller caches nearer the core, so the rows a keep-alive reads and")
                    w(f"  writes miss those{ll}. The")
                else:
                    w(f"  against {cache_txt}, so the rows a keep-alive reads and writes miss it{ll}. The")
                w("  session is found at the row its id names, (id − 1) mod rows, without reading the")
                w("  index (`home_row` in `core/src/service.rs`); what is left is the row itself and its")
                w("  ttl-class neighbours, and the TLB (huge pages for the tables would help that).")
                if sh:
                    dm = (f" ({d1:.1f} L1 misses per keep-alive at 1k, {d2:.1f} at 64k under callgrind)"
                          if d1 is not None and d2 is not None else "")
                    w("  In a scattered order each keep-alive reads a row, and the class neighbour it")
                    w(f"  links to, far from the last call's{dm}: the row must be read, so no layout")
                    w("  removes that miss; a smaller row (see the bytes rows) makes more of the table fit.")
                else:
                    w("  A host's real keep-alives arrive in no order, so they miss at least once per call")
                    w("  whatever the layout (the scattered-order row).")
            elif k == "wasm_size":
                w(f"- **wasm bundle** ({fmt_kb(wraw)} raw, {fmt_kb(wgz)} gzipped against 60 / 25 KB). `wasm/README.md`")
                w("  (\"What the bytes are\", measured on an earlier build of 166 KB after wasm-opt, not this")
                w("  run's) attributes the code before wasm-opt: the core's lock service,")
                w("  gate and keeper ~42 KB, its snapshot and frame codecs (serde + postcard) ~35 KB, the")
                w("  binding's ~60 methods ~33 KB, wasm-bindgen's per-export wrappers and shims ~30 KB, the")
                w("  allocator ~14 KB, JS value conversion ~10 KB. The core and its codecs alone are ~77 KB,")
                w("  so no change in the binding gets there: a hand-written postcard subset, the snapshot and")
                w("  frame calls in a second module loaded on demand, one exported entry point wrapped in JS")
                w("  and a smaller allocator would together leave about 100 KB; 60 KB needs a smaller")
                w("  feature set in the first download.")
                if lraw is not None and lgz is not None:
                    lwithin = lraw <= GOAL_WASM_RAW and lgz <= GOAL_WASM_GZIP
                    w("  The small module (the rows below the bundle's) is such a first download,")
                    w("  shipped beside the full one as `fencelock/lite`: the core's sessions, waits,")
                    w("  tokens, lock-delay, permits and request numbers behind one class, numbers in and")
                    w("  out, errors as codes (their names come from a table in its JS class), no")
                    w("  snapshots, frames, gate, keeper, watches or labels. It measures")
                    w(f"  {fmt_kb(lraw)} raw and {fmt_kb(lgz)} gzipped, "
                      + ("within the goal; whether it answers the bundle goal is the project's call, so"
                         if lwithin else "over the goal;"))
                    w("  its rows are information and the bundle rows stay the full module's.")
                if wasm_floor:
                    within = (wasm_floor["raw"] <= GOAL_WASM_RAW
                              and wasm_floor["gzip9"] <= GOAL_WASM_GZIP)
                    w("  How small: the floor rows above, the core's lock rules (its inputs but the")
                    w("  labelled open, without request numbers; permits, watches, events) behind the")
                    w("  thinnest binding, built as the shipped module is, come to")
                    w(f"  {fmt_kb(wasm_floor['raw'])} raw and {fmt_kb(wasm_floor['gzip9'])} gzipped, "
                      + ("within the goal." if within else "over the goal too."))
                    w("  What the shipped module adds: the object API, messages, argument checks, request")
                    w("  numbers, labels, queries, interned names, snapshots and frames, the gate and the")
                    if within and lraw is not None and lgz is not None:
                        w("  keeper. The small module is the floor plus request numbers, the argument")
                        w("  checks, the config and events with their modes and reasons, less watches:")
                        w(f"  {lraw - wasm_floor['raw']:+,} B raw and {lgz - wasm_floor['gzip9']:+,} B gzipped over the floor.")
                    elif within:
                        w("  keeper. So a first module of the fast path, with the rest loaded on demand,")
                        w("  could meet the goal if it added little to the floor (error messages could come")
                        w("  from a table in the JS glue); the price is a second download, and snapshots")
                        w("  would live in it, since they need the codec.")
                    else:
                        w("  keeper. Even the floor misses the goal: no split of the package reaches it")
                        w("  without a smaller core.")
            elif k in ("wasm", "wasm_str", "wasm_obj", "wasm_lite_speed"):
                tag = {"wasm": "id calls", "wasm_str": "names as strings (information)",
                       "wasm_obj": "object API (information)",
                       "wasm_lite_speed": "the small module (information)"}[k]
                w(f"- **wasm acquire + release ÷ native, {tag}** (missed: {by}). The core's work is")
                w("  the same code (the core crate built at opt-level `s` in the wasm build, the binding at")
                w("  `z`), and each call crosses the JS↔wasm boundary: the numbers checked and converted,")
                if k == "wasm":
                    w("  the interned name looked up, the answer read back as a number. `wasm/README.md`")
                    w("  attributes about half of the id path's instructions to the core and a fifth to the")
                    w("  exported functions; the core at opt-level 2 or 3 would take about 10 % more off")
                    w("  for 11 KB.")
                elif k == "wasm_str":
                    w("  the name written by the glue into the service's name buffer on every call (no")
                    w("  allocation: an ASCII name copied unit by unit, any other checked with `isWellFormed`")
                    w("  and written by `TextEncoder.encodeInto`). The id calls above are the remedy: each")
                    w("  name interned once.")
                elif k == "wasm_lite_speed":
                    w("  the name written into the service's name buffer on every call, as the full")
                    w("  module's string path does (no allocation: an ASCII name copied unit by unit, any")
                    w("  other checked with `isWellFormed` and written by `TextEncoder.encodeInto`). The small")
                    w("  module has no interned names, to stay small: a host that needs the id calls' speed")
                    w("  loads the full module.")
                else:
                    w("  the name copied in, the answer and each event built as JS values (JSON text")
                    w("  parsed). The fast paths above are the remedy for hosts that need speed.")
            elif k == "cabi":
                w(f"- **C ABI ÷ native** (missed: {by}). Instructions: {per('cabi_uncontended/1024')} per pair through the ABI")
                w(f"  against {per('uncontended/1024')} natively. What the boundary adds (`ffi/README.md`, measured with")
                w("  `callgrind_annotate`): the two extern functions themselves (prologue, NULL and handle")
                w("  checks, the name's ASCII/UTF-8 check, mode and wait converted, the core's `Reply`")
                w("  converted into `fencelock_reply` with `pending` counted), a C host's `strlen` of each")
                w("  name, and the core inlined differently in the library's LTO unit. 1.2× needs about")
                nat_v, cab_v = cgv("uncontended/1024"), cgv("cabi_uncontended/1024")
                if nat_v and cab_v:
                    w(f"  {cab_v - 1.2 * nat_v:,.0f} fewer instructions per pair through the Rust driver (ffi/README.md counts from its C host), most of the boundary itself; forcing the core's")
                else:
                    w("  most of the boundary itself to go; forcing the core's")
                w("  `acquire`/`release` inline into the extern functions speeds the native side almost as")
                w("  much, so it does not move the ratio. A batch (`fencelock_service_submit`, in the row")
                w("  above) pays the per-call part once per 64 inputs, but that part is smaller than the")
                w("  rest: each input's own conversions (its name checked, mode and wait converted, its")
                w("  reply written) stay, and a C host fills an op struct per input instead of passing")
                w("  arguments, so batching saves little here (it saves far more where a call is")
                w("  expensive: from Python, ffi/README.md). What is left is per-input work at the")
                w("  boundary and the core inlined differently in the library's LTO unit.")
        w("")

    w("## Machine")
    w("")
    w("| | |")
    w("|---|---|")
    for k, label in [
        ("date", "date (UTC)"),
        ("cpu", "CPU"),
        ("nproc", "cores (nproc)"),
        ("mem", "memory"),
        ("rustc", "rustc"),
        ("node", "node"),
        ("kernel", "kernel"),
        ("load_before", "load average before the run"),
        ("load_after", "load average after the run"),
        ("criterion", "criterion settings"),
        ("commit", "commit"),
    ]:
        if k in meta:
            w(f"| {label} | {meta[k]} |")
    w("")
    if meta.get("load_before") and float(str(meta["load_before"]).split()[0]) > float(meta.get("nproc", 1)) * 0.5:
        w("> The machine was shared with other jobs during this run (see the load average):")
        w("> absolute times are inflated and noisy; the callgrind instruction counts and the")
        w("> ratios measured back to back are the more reliable figures.")
        w("")

    # ------------------------------------------------------------------ details
    w("## Behind the goals")
    w("")
    w("Stricter comparisons, for information (the goals are the table above): the uncontended")
    w("case against borrowed `&str` keys (no key allocation; a lock table fed names from the")
    w("network cannot do this, but it is the floor of one hash insert + remove), and the")
    w("hand-off against a std FIFO lock table doing exactly a hand-off (`HashMap<String, {holder,")
    w("token, VecDeque}>`: look up, check the holder, pop, new token).")
    w("")
    w("| operation | fencelock / op | stricter baseline / op | ratio (time) | ratio (instructions) |")
    w("|---|---|---|---|---|")
    for n in (16, 1024, 16384):
        f, b = ns(f"uncontended/fencelock/{n}"), ns(f"uncontended/hashmap_str/{n}")
        ix = ratio(cgv(f"uncontended/{n}"), cgv(f"map_str/{n}"))
        w(f"| uncontended, {n} locks vs `HashMap<&str, _>` | {fmt_ns(f)} | {fmt_ns(b)} | {fmt_x(ratio(f, b))} | {fmt_x(ix)} |")
    f, b = ns("handoff/fencelock"), ns("handoff/hashmap_vecdeque")
    w(f"| hand-off vs `HashMap` + `VecDeque` hand-off | {fmt_ns(f)} | {fmt_ns(b)} | {fmt_x(ratio(f, b))} | {fmt_x(ratio(cgv('handoff'), cgv('map_handoff')))} |")
    w("")
    cg_rows = [(k, v) for k, v in cg.items() if isinstance(v, dict) and "ir" in v]
    if cg_rows:
        w("Per operation under callgrind (only the measured function counted, two repetition counts,")
        w("difference divided; valgrind's simulated caches and branch predictor, the last level")
        w("sized from /proc/cpuinfo's cache figure rounded down to a power of two, at most 32 MiB):")
        w("")
        llh = (f"data misses of a simulated {cg['ll_kb']} KB last-level cache / op" if cg.get("ll_kb")
               else "last-level data misses (valgrind's guess of the cache) / op")
        w(f"| workload | instructions / op | D1 misses / op | {llh} | branch mispredicts / op |")
        w("|---|---|---|---|---|")
        labels = {
            "uncontended": "fencelock acquire + release, {n} locks",
            "map_string": "`HashMap<String, _>` insert + remove, {n} keys",
            "map_str": "`HashMap<&str, _>` insert + remove, {n} keys",
            "cabi_uncontended": "C ABI acquire + release (drained), {n} locks, from Rust",
            "c_host_uncontended": "C ABI acquire + release (drained), {n} locks, from C (`ops.c`)",
            "handoff": "fencelock hand-off (batches of 1024)",
            "map_handoff": "`HashMap` + `VecDeque` hand-off",
            "tick_idle": "fencelock tick, nothing due, {n} sessions",
            "keep_alive": "fencelock keep-alive, {n} sessions",
        }
        for k, v in cg_rows:
            base, _, n = k.partition("/")
            label = labels.get(base, k).format(n=n)
            ll = f"{max(0.0, v['ll']):.2f}" if "ll" in v else "—"
            w(f"| {label} | {v['ir']:,.0f} | {max(0.0, v['d1']):.2f} | {ll} | {max(0.0, v['bm']):.2f} |")
        w("")
    if wasm_cg:
        w(f"wasm under node, instructions per acquire + release (whole process, rounds {wasm_cg['rounds'][0]} → {wasm_cg['rounds'][1]}")
        w(f"of {wasm_cg.get('pairs_per_round')} pairs): id calls {fmt_ir(wasm_cg.get('acqrel-id'))}, typed fast path with names as strings {fmt_ir(wasm_cg.get('acqrel-fast'))}, object API {fmt_ir(wasm_cg.get('acqrel'))}, "
          f"the small module (`fencelock/lite`) {fmt_ir(wasm_cg.get('acqrel-lite'))}.")
        w("")
    elif skipped.get("callgrind") or skipped.get("wasm"):
        w(f"Instruction counts not measured in this run: {'; '.join(f'{k}: {v}' for k, v in sorted(skipped.items()))}.")
        w("")

    # ------------------------------------------------------------------ scaling
    w("## Scaling with the number of live sessions (n grows 64×)")
    w("")
    scale = (1024, 16384, 65536)

    def scale_table(title, ids, unit):
        w(f"| {title} | " + " | ".join(f"n = {n}" for n in scale) + " | 64k ÷ 1k |")
        w("|---|" + "---|" * (len(scale) + 1))
        for label, pat in ids:
            vals = [ns(pat.format(n=n)) for n in scale]
            w(f"| {label} ({unit}) | " + " | ".join(fmt_ns(v) for v in vals) + f" | {fmt_x(ratio(vals[-1], vals[0]))} |")
        w("")

    scale_table("tick, nothing due", [("per tick", "tick_idle/fencelock/{n}")], "n live sessions")
    scale_table(
        "expiry of k among n",
        [("k = 1, per expired session", "expiry/fencelock_k1/{n}"), ("k = 64, per expired session", "expiry/fencelock_k64/{n}")],
        "each holds a lock",
    )
    scale_table("keep-alive", [("per keep-alive", "keep_alive/fencelock/{n}")], "round-robin")
    w("Expiry is timed over 16 consecutive ticks (each expiring its k) per batch, so one")
    w(f"`Instant::now()` + `elapsed()` pair ({fmt_ns(ns('overhead/instant_pair'))} on this machine) is spread over 16 k sessions.")
    w("")
    def growth(pat):
        a, b = ns(pat.format(n=scale[0])), ns(pat.format(n=scale[-1]))
        return ratio(b, a)

    g_tick = growth("tick_idle/fencelock/{n}")
    g_exp = [growth("expiry/fencelock_k1/{n}"), growth("expiry/fencelock_k64/{n}")]
    g_ka = growth("keep_alive/fencelock/{n}")
    sess_b = mem("session")
    table_mb = (scale[-1] * sess_b / 1e6) if sess_b else None
    w(f"What the curves show, while n grows 64×: a tick with nothing due reads the tops of the")
    w(f"deadline heaps — O(1), measured {fmt_x(g_tick)}. An expiry is a heap pop (an O(log n)")
    w(f"sift) plus that session's own claims — measured {' and '.join(fmt_x(x) for x in g_exp)} for k = 1 and 64. A")
    w("keep-alive is a lookup (one load at the row its id names) plus moving the session to")
    w("the tail of its ttl class's deadline")
    ka1, ka64 = cgv("keep_alive/1024"), cgv("keep_alive/65536")
    ka_ir = (f" ({ka1:,.0f} instructions per keep-alive at 1k sessions, {ka64:,.0f} at 64k)"
             if ka1 is not None and ka64 is not None else "")
    w(f"list, O(1) with no heap sift{ka_ir} — measured {fmt_x(g_ka)} in time.")
    w("Every session of these workloads has the same ttl, so all of them share one ttl class")
    w("(the service keeps four; a host's clients usually share one lease length). A session whose")
    w("ttl is in none of the four is scheduled in the session heap instead, and its keep-alive is")
    w("an O(log n) sift: that case is not measured here.")
    if table_mb and fits_cache(table_mb):
        w(f"At 64k the session table is {table_mb:.1f} MB: within {cache_txt} (on a virtual")
        w("machine, the host's figure) but not the smaller caches nearer the core, so the rows a call")
        w("touches miss those, and that (not a scan: nothing scans a table) is what grows.")
    elif table_mb:
        w(f"At 64k the session table is {table_mb:.1f} MB, well past {cache_txt}, so the rows a")
        w("call touches miss the cache, and that (not a scan: nothing scans a table) is what grows.")
    w("")

    # ------------------------------------------------------------------ other ops
    w("## Other operations")
    w("")
    w("| operation | time | per |")
    w("|---|---|---|")
    for r in (1, 16, 256):
        w(f"| shared grants: a writer's release grants a run of {r} reader(s) | {fmt_ci(crit.get(f'shared_run/fencelock/{r}'))} | reader granted |")
    snaps = sorted({int(k.split("/")[-1]) for k in crit if k.startswith("snapshot/encode/")})
    for e in snaps:
        w(f"| snapshot encode, {e} entities | {fmt_ci(crit.get(f'snapshot/encode/{e}'))} | entity |")
        w(f"| snapshot restore (validating), {e} entities | {fmt_ci(crit.get(f'snapshot/restore/{e}'))} | entity |")
    for label in ("acquire", "release", "keep_alive", "tick"):
        w(f"| postcard frame decode: {label} | {fmt_ci(crit.get(f'frame/decode/{label}'))} | frame |")
    w(f"| postcard frame encode: granted output | {fmt_ci(crit.get('frame/encode/granted'))} | frame |")
    fr, ty = ns("frame/handle_frame/keep_alive"), ns("frame/typed/keep_alive")
    w(f"| keep-alive through `handle_frame` (decode + apply) | {fmt_ci(crit.get('frame/handle_frame/keep_alive'))} | input |")
    w(f"| keep-alive through the typed call (one session) | {fmt_ci(crit.get('frame/typed/keep_alive'))} | input |")
    w("")
    w("An entity is a session, a lock or a claim (`populated(n)`: n sessions, each holding its")
    w("own lock and waiting for the next: 4n entities). Restore validates every invariant, so")
    w("it costs more than encode.")
    w("")

    # ------------------------------------------------------------------ bindings
    w("## Through the C ABI and through wasm")
    w("")
    w("C ABI: the `fencelock_service_*` extern \"C\" functions of `fencelock-ffi` called from")
    w("Rust through opaque function pointers (the code a C program runs, statically linked;")
    w("`benches/src/cabi.rs`), each input's reply read and, when its `pending` says events are")
    w("queued (after a tick, always), the events drained with one `fencelock_service_drain_events`")
    w("call into an array, as a C host does. wasm:")
    w("`benches/js/bench.mjs` over `wasm/pkg/node` (the shipped build: the binding at")
    w("`opt-level = \"z\"`, the core at `\"s\"`, `wasm-opt -Oz`), each call returning its outputs as")
    w("JS objects unless the row names a fast path.")
    w("")
    w("| operation | native | C ABI | C ABI ÷ native | wasm (node) | wasm ÷ native |")
    w("|---|---|---|---|---|---|")
    brows = [
        ("uncontended acquire + release (1024 locks)", "uncontended/fencelock/1024", "ffi/uncontended/1024", "uncontended/1024"),
        ("the same, wasm's typed fast path (names as strings)", "uncontended/fencelock/1024", None, "uncontended_fast/1024"),
        ("the same, wasm's id calls (names interned once)", "uncontended/fencelock/1024", None, "uncontended_id/1024"),
        ("the same, the small wasm module (`fencelock/lite`, names as strings)", "uncontended/fencelock/1024", None, "uncontended_lite/1024"),
        ("handoff", "handoff/fencelock", "ffi/handoff", "handoff"),
        ("tick, nothing due (16k sessions)", "tick_idle/fencelock/16384", "ffi/tick_idle/16384", "tick_idle/16384"),
        ("keep-alive (16k sessions)", "keep_alive/fencelock/16384", "ffi/keep_alive/16384", "keep_alive/16384"),
        ("keep-alive frame in, frames out", "frame/handle_frame/keep_alive", "ffi/handle_frame/keep_alive", "handle_frame/keep_alive"),
        ("snapshot encode (16384 entities), per entity", "snapshot/encode/16384", None, "snapshot_encode/16384"),
        ("snapshot restore (16384 entities), per entity", "snapshot/restore/16384", None, "snapshot_restore/16384"),
    ]
    for label, nid, fid, wid in brows:
        n_ = ns(nid)
        c_ = ns(fid) if fid else None
        wr = wasm_by_id.get(wid)
        w_ = wr["ns_per_op"] if wr else None
        w(f"| {label} | {fmt_ns(n_)} | {fmt_ns(c_)} | {fmt_x(ratio(c_, n_))} | {fmt_ns(w_)} | {fmt_x(ratio(w_, n_))} |")
    w("")
    if wasm is None:
        w(f"wasm: not measured in this run ({no_wasm or 'no `wasm/pkg/node`; run `scripts/build-wasm.sh`'}).")
        w("")
    else:
        w(f"wasm measured with node {wasm.get('node')} ({wasm.get('secs')} s per benchmark, median of 5).")
        w("")
    w("A ratio near or below 1× is within run-to-run noise (the C ABI also lays its three")
    w("tables out in one block, where the native bench uses three vectors).")
    w("")
    floor = next((r for r in (wasm or {}).get("results", []) if r["id"].startswith("call_floor")), None)
    w("Where the overhead comes from: the C ABI validates every pointer and name (UTF-8), runs")
    w("each call inside a panic boundary, converts the reply into `fencelock_reply` (with the")
    w("count of queued events), and queues events, which a C host drains into an array with one")
    w("call, each written as a flat `fencelock_output` with a copy of the name. Under wasm the core's work is the same code (compiled for")
    w("size), and the time goes to crossing the JS↔wasm boundary: strings are copied in and")
    w("UTF-8 decoded, and every call returns freshly allocated JS values for its outputs.")
    if floor:
        w(f"The floor of one call (`svc.now()`, a getter returning a number) is {fmt_ns(floor['ns_per_op'])} here,")
        w("so any call costs at least that much more than the native one.")
    w("`handleFrame` (bytes in, bytes out) avoids building output objects when the host")
    w("already speaks frames.")
    w("")
    w("From Python (`benches/py/batch.py`: the ctypes package over the release library, 1024")
    w("free locks, the fastest of 15 interleaved rounds), one library call per input against one")
    w("`Service.submit` call (`fencelock_service_submit`) per 1024 inputs:")
    w("")
    if py:
        t = py["typed"]
        w(f"| per acquire + release, Python {py.get('python', '?')} | time | ÷ one call per input |")
        w("|---|---|---|")
        for k, label in (("typed", "one call per input (`acquire`, `release`)"),
                         ("submit_built", "`submit`, the `Op`s built for each batch"),
                         ("submit_reused", "`submit`, the same `Op` objects every batch")):
            w(f"| {label} | {fmt_ns(py[k])} | {fmt_x(ratio(py[k], t))} |")
        w("")
        w("A call from Python is expensive (ctypes converts each argument; the wrapper takes its")
        w("lock and reads the result), so")
        w("paying it once per batch instead of once per input is where a batch pays off; from C,")
        w("where a call is cheap, it hardly moves the count (the C ABI goal above).")
    else:
        w("Not measured in this run (no Python 3, or the release library did not build).")
    w("")

    # ------------------------------------------------------------------ memory
    w("## Memory")
    w("")
    w("| what | bytes | per |")
    w("|---|---|---|")
    for m in memory:
        w(f"| {m['what']} | {m['bytes']} | {m['per']} |")
    w("")
    w("Bytes per session / label / lock / claim are `size_of` of a `LockService<ArrayStorage<S, L, C, N>>`")
    w("with 1024 rows of one table minus the same service with none, divided by 1024: the")
    w("row (with its slot of the deadline heap) plus its two buckets in the table's index array.")
    w("There is")
    w("no other memory: the core never allocates.")
    w("")
    if wasm_size and wasm_size.get("files"):
        w("| wasm bundle (as `scripts/build-wasm.sh` left it in this run) | raw bytes | gzip -9 -n bytes |")
        w("|---|---|---|")
        for f in wasm_size["files"]:
            w(f"| `{f['file']}` | {f['raw']:,} | {f['gzip9']:,} |")
        w("")
    else:
        w(f"wasm bundle: not measured in this run ({no_wasm or skipped.get('wasm-size') or 'no wasm/pkg/web'}).")
        w("")

    # ------------------------------------------------------------------ all results
    w("## Every criterion result of this run")
    w("")
    w("<details><summary>table</summary>")
    w("")
    w("| id | per element | 95 % CI | elements per iteration |")
    w("|---|---|---|---|")
    for k in sorted(crit):
        r = crit[k]
        w(f"| `{k}` | {fmt_ns(r['ns'])} | {fmt_ns(r['lo'])}–{fmt_ns(r['hi'])} | {r['elements']} |")
    w("")
    w("</details>")
    w("")

    # Sections other scripts own (e.g. scripts/bench-cluster.sh's
    # <!-- cluster:begin --> … <!-- cluster:end -->) are kept as they are, after ours.
    kept = []
    try:
        old = open(a.out).read()
        # A marker is a line of its own (prose may name the markers without being one).
        kept = [m.group(0) for m in re.finditer(r"^<!-- ([\w-]+):begin -->$.*?^<!-- \1:end -->$", old, re.S | re.M)]
    except OSError:
        pass
    text = "\n".join(L)
    if kept:
        text = text.rstrip("\n") + "\n\n" + "\n\n".join(kept) + "\n"
    open(a.out, "w").write(text)
    print(f"report.py: wrote {a.out} ({len(crit)} criterion results)")


if __name__ == "__main__":
    main()
