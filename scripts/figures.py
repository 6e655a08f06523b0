#!/usr/bin/env python3
"""One source for each figure the documentation quotes in more than one place.

Every figure is read from the place that decides it, never typed in here:

  row sizes          core/src/storage.rs, the compile-time assertion on the row types
  name, frame limits core/src/types.rs MAX_NAME_LEN, core/src/wire.rs MAX_FRAME_LEN
  keeper memory      core/src/keeper.rs KEEPER_MEMORY
  version            Cargo.toml, [workspace.package] version
  tool versions      Cargo.lock (wasm-bindgen), tools/package.json (binaryen, typescript, vite),
                     server/Cargo.toml (openraft)
  error codes        core/src/error.rs, Error::code()
  server tables      server/src/bin/node.rs, the defaults of --sessions, --locks, --claims
  wasm bundle        wasm/README.md's size table, written by `UPDATE_DOCS=1 scripts/build-wasm.sh`
                     (the full module's rows, then the small module's)
  cluster benchmark  BENCHMARKS.md's cluster table, written by `make bench-cluster`
  test inputs        tests/vectors (the vector files and their `in` lines, the precedence
                     table's rows and refusals), tests/ignored-tests.txt, the ceilings of
                     scripts/test-bare-metal.sh

README.md's "Figures" table is generated from them (between `<!-- figures:begin -->` and
`<!-- figures:end -->`); every other quote is listed in QUOTES below with the pattern
that finds it. `--check` (the default; part of make test) fails when the generated table
is out of date, when a listed quote disagrees with its source or can no longer be found
(reworded text must be listed again, so a quote cannot silently escape the check), and
when the wasm package in wasm/pkg differs by more than 3 % from the recorded size (then
run `UPDATE_DOCS=1 scripts/build-wasm.sh`). `--write` regenerates README.md's table.
"""

import gzip
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def one(pattern, text, what):
    m = re.findall(pattern, text)
    if len(m) != 1:
        sys.exit(f"figures: {what}: expected one match of {pattern!r}, found {len(m)}")
    return m[0]


def figures():
    """The figures, each as (value as quoted, where it comes from)."""
    f = {}
    storage = read("core/src/storage.rs")
    assertion = one(r"const _: \(\) = assert!\((.*?)\);", storage.replace("\n", " "),
                    "row-size assertion")
    size = {}
    for row in ("SessionRow", "LockRow", "ClaimRow", "LabelRow", "GateRow", "Bucket",
                "TaggedBucket"):
        size[row] = int(one(r"size_of::<(?:crate::)?%s>\(\) == (\d+)" % row, assertion, row))
    src = "core/src/storage.rs (compile-time assertion)"
    # An entry of the three service tables is its row and its two buckets in the table's
    # index array: "memory per session" quotes the sum, the storage docs both parts.
    for row, bucket, key in (("SessionRow", "Bucket", "session"), ("LockRow", "TaggedBucket", "lock"),
                             ("ClaimRow", "Bucket", "claim")):
        f[f"row.{key}"] = (str(size[row] + 2 * size[bucket]), src)
        f[f"rowonly.{key}"] = (str(size[row]), src)
        f[f"buckets.{key}"] = (str(2 * size[bucket]), src)
    f["row.label"] = (str(size["LabelRow"]), src)
    f["row.gate"] = (str(size["GateRow"]), src)
    f["limit.name"] = (one(r"pub const MAX_NAME_LEN: usize = (\d+);", read("core/src/types.rs"),
                           "MAX_NAME_LEN"), "core/src/types.rs MAX_NAME_LEN")
    f["limit.frame"] = (one(r"pub const MAX_FRAME_LEN: usize = (\d+);", read("core/src/wire.rs"),
                            "MAX_FRAME_LEN"), "core/src/wire.rs MAX_FRAME_LEN")
    f["version"] = (one(r"\[workspace\.package\][^\[]*?\nversion = \"([^\"]+)\"", read("Cargo.toml"),
                        "workspace version"), "Cargo.toml [workspace.package]")
    f["tools.wasm_bindgen"] = (one(r'name = "wasm-bindgen"\nversion = "([^"]+)"', read("Cargo.lock"),
                                   "wasm-bindgen in Cargo.lock"), "Cargo.lock")
    f["tools.binaryen"] = (one(r'"binaryen": "(\d+)\.', read("tools/package.json"), "binaryen"),
                           "tools/package.json")
    f["tools.typescript"] = (one(r'"typescript": "([\d.]+)"', read("tools/package.json"), "typescript"),
                             "tools/package.json")
    f["tools.vite"] = (one(r'"vite": "([\d.]+)"', read("tools/package.json"), "vite"),
                       "tools/package.json")
    openraft = one(r'openraft = \{ version = "=([\d.]+)"', read("server/Cargo.toml"), "openraft")
    f["tools.openraft"] = (openraft, "server/Cargo.toml")
    f["tools.openraft_minor"] = (".".join(openraft.split(".")[:2]), "server/Cargo.toml")
    f["keeper.memory"] = (one(r"pub const KEEPER_MEMORY: usize = (\d+);", read("core/src/keeper.rs"),
                              "KEEPER_MEMORY"), "core/src/keeper.rs KEEPER_MEMORY")
    codes = sorted(int(c) for c in re.findall(r"Error::\w+(?:\(_\)| \{ \.\. \})? => (\d{3}),",
                                              read("core/src/error.rs")))
    if len(codes) < 10:
        sys.exit("figures: found too few error codes in core/src/error.rs")
    f["errors.range"] = (f"{codes[0]}–{codes[-1]}", "core/src/error.rs Error::code()")

    node = read("server/src/bin/node.rs")
    for flag in ("sessions", "locks", "claims"):
        # The node's flag and the same flag of `snapshot restore`: one default for both.
        exprs = set(re.findall(r"default_value_t = ([0-9_<> ]+)\)\]\s*%s: usize," % flag, node))
        if len(exprs) != 1:
            sys.exit(f"figures: server/src/bin/node.rs --{flag}: defaults {exprs or 'not found'}")
        expr = exprs.pop()
        n = int(expr.replace("_", "").split("<<")[0]) << (int(expr.split("<<")[1]) if "<<" in expr else 0)
        f[f"server.{flag}"] = (f"{n:,}".replace(",", " "), "server/src/bin/node.rs (--%s default)" % flag)

    size = one(r"<!-- size:begin -->(.*?)<!-- size:end -->", read("wasm/README.md").replace("\n", "\x00"),
               "wasm size table").replace("\x00", "\n")
    # The table's rows for the full module, then those of the small one (wasm/lite).
    size, lite = size.split("the small module", 1)
    raw, gz = map(int, one(r"\| total \| (\d+) \| (\d+) \|", size, "wasm total"))
    wasm_raw, wasm_gz = map(int, one(r"\| `fencelock_wasm_bg\.wasm` \| (\d+) \| (\d+) \|", size,
                                     "wasm module"))
    lite_raw, lite_gz = map(int, one(r"\| `fencelock_lite_bg\.wasm` \| (\d+) \| (\d+) \|", lite,
                                     "small wasm module"))
    f["wasm.lite_bytes"] = (str(lite_raw), "wasm/README.md size table (build-wasm.sh)")
    f["wasm.lite_kb"] = (f"{round(lite_raw / 1000)}", "wasm/README.md size table (build-wasm.sh)")
    f["wasm.lite_gzip_kb"] = (f"{round(lite_gz / 1000)}", "wasm/README.md size table (build-wasm.sh)")
    f["wasm.module_bytes"] = (str(wasm_raw), "wasm/README.md size table (build-wasm.sh)")
    f["wasm.total_kb"] = (f"{round(raw / 1000)}", "wasm/README.md size table (build-wasm.sh)")
    f["wasm.total_gzip_kb"] = (f"{round(gz / 1000)}", "wasm/README.md size table (build-wasm.sh)")

    bench = one(r"<!-- cluster:begin -->(.*?)<!-- cluster:end -->",
                read("BENCHMARKS.md").replace("\n", "\x00"), "cluster section").replace("\x00", "\n")
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| (\d+) \| [\d–]+ \((\d+)\) \| [\d.]+ \| [\d.]+ \|"
                      r" ([\d.]*)×? ?\| ([\d.]*)×? ?\|$", bench, re.M)
    if len(rows) != 9:
        sys.exit(f"figures: BENCHMARKS.md cluster table: expected 9 rows, found {len(rows)}")
    runs = {r[3] for r in rows}
    if len(runs) != 1:
        sys.exit(f"figures: BENCHMARKS.md cluster rows have different run counts {runs}")
    src = "BENCHMARKS.md cluster table (make bench-cluster)"
    f["cluster.runs"] = (runs.pop(), src)
    by = {(r[0], r[1]): r for r in rows}
    for scen, key in (("1 client", "one"), ("16 clients, uncontended", "sixteen"),
                      ("16 clients, one contended lock", "contended")):
        for system, sk in (("etcd", "etcd"), ("etcd, leader only", "leader")):
            r = by[(scen, system)]
            f[f"cluster.{key}.{sk}.rate"] = (r[4] + "×", src)
            f[f"cluster.{key}.{sk}.p99"] = (r[5] + "×", src)
        f[f"cluster.{key}.fencelock.ops"] = (by[(scen, "fencelock")][2], src)
        f[f"cluster.{key}.etcd.ops"] = (by[(scen, "etcd")][2], src)
    # What tests/README.md says the verification replays, counted from the files.
    vec_dir = os.path.join(ROOT, "tests", "vectors")
    vecs = sorted(n for n in os.listdir(vec_dir) if n.endswith(".vec"))
    src = "tests/vectors/*.vec"
    f["vectors.files"] = (str(len(vecs)), src)
    f["vectors.inputs"] = (str(sum(line.startswith("in ") for n in vecs
                                   for line in read(f"tests/vectors/{n}").splitlines())), src)
    calls = [line for line in read("tests/vectors/precedence.calls").splitlines()
             if "->" in line and not line.lstrip().startswith("#")]
    src = "tests/vectors/precedence.calls"
    f["precedence.rows"] = (str(len(calls)), src)
    f["precedence.refusals"] = (str(sum("-> err" in line for line in calls)), src)
    ignored = [line for line in read("tests/ignored-tests.txt").splitlines()
               if line.strip() and not line.lstrip().startswith("#")]
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    f["tests.ignored"] = (words.get(len(ignored), str(len(ignored))), "tests/ignored-tests.txt")
    bare = read("scripts/test-bare-metal.sh")
    src = "scripts/test-bare-metal.sh"
    for key, var in (("input", "STACK_INPUT_MAX"), ("snapshot", "STACK_SNAPSHOT_MAX"),
                     ("restore", "STACK_RESTORE_MAX"), ("flash", "FLASH_CORE_MAX")):
        v = int(one(r"(?m)^%s=(\d+)$" % var, bare, var))
        f[f"bare.{key}"] = (f"{v:,}".replace(",", " "), src)
    return f


def table(f):
    """README.md's generated table."""
    g = lambda k: f[k][0]  # noqa: E731
    lines = [
        "| figure | value | source |",
        "|---|---|---|",
        f"| memory per session / live lock / hold or wait | {g('row.session')} / {g('row.lock')} / "
        f"{g('row.claim')} bytes (the same on every target where `u64` is 8-byte aligned, wasm32 and 32-bit ARM among them; a few bytes smaller on i686) | `core/src/storage.rs` |",
        f"| memory per holder label | {g('row.label')} bytes a label row: one per session of capacity by default (so in the C library, wasm and the server); a Rust host sizes the table (0 rows allowed) | `core/src/storage.rs` |",
        f"| memory per resource behind a `FenceGate` | {g('row.gate')} bytes | `core/src/storage.rs` |",
        f"| lock name | 1 to {g('limit.name')} bytes of UTF-8 | `core/src/types.rs` |",
        f"| replicated server's tables (defaults; `--sessions`, `--locks`, `--claims`) | "
        f"{g('server.sessions')} sessions, {g('server.locks')} locks, {g('server.claims')} claims (holds, waits, watches) | "
        f"`server/src/bin/node.rs` |",
        f"| a frame (postcard): an input, an output or a reply | at most {g('limit.frame')} bytes | `core/src/wire.rs` |",
        f"| core error codes | {g('errors.range')} | `core/src/error.rs` |",
        f"| wasm bundle for the browser (`.wasm` + JS glue) | ~{g('wasm.total_kb')} KB, "
        f"~{g('wasm.total_gzip_kb')} KB gzipped | [wasm/README.md](wasm/README.md#bundle-size) |",
        f"| the small wasm module, `fencelock/lite` (the lock rules, numbers in and out; `.wasm` alone) | "
        f"~{g('wasm.lite_kb')} KB, ~{g('wasm.lite_gzip_kb')} KB gzipped | "
        f"[wasm/README.md](wasm/README.md#the-small-module-fencelocklite) |",
        f"| cluster vs three-member etcd 3.4, 1 client, acquire + release | {g('cluster.one.etcd.rate')} "
        f"etcd's rate ({g('cluster.one.leader.rate')} against an etcd client pinned to the leader); "
        f"p99 {g('cluster.one.etcd.p99')} lower | [BENCHMARKS.md](BENCHMARKS.md) |",
        f"| the same, 16 clients on their own locks | {g('cluster.sixteen.etcd.rate')} "
        f"({g('cluster.sixteen.leader.rate')}); p99 {g('cluster.sixteen.etcd.p99')} "
        f"({g('cluster.sixteen.leader.p99')}) lower | [BENCHMARKS.md](BENCHMARKS.md) |",
        f"| the same, 16 clients on one lock: hand-offs per second | "
        f"{g('cluster.contended.fencelock.ops')} vs {g('cluster.contended.etcd.ops')} "
        f"({g('cluster.contended.etcd.rate')}; {g('cluster.contended.leader.rate')} pinned) | "
        f"[BENCHMARKS.md](BENCHMARKS.md) |",
        f"| cluster benchmark runs per row | median of {g('cluster.runs')} | "
        f"[BENCHMARKS.md](BENCHMARKS.md) |",
    ]
    return "\n".join(lines)


# Quotes outside the generated table: (file, pattern with one group per figure, figures).
# Each pattern must match at least once, and every match must agree.
QUOTES = [
    ("core/src/storage.rs", r"\| \[`SessionRow`\] \+ 2 × \[`Bucket`\] \| (\d+) \+ (\d+) = (\d+) \|",
     ["rowonly.session", "buckets.session", "row.session"]),
    ("core/src/storage.rs", r"\| \[`LockRow`\] \+ 2 × \[`TaggedBucket`\] \| (\d+) \+ (\d+) = (\d+) \|",
     ["rowonly.lock", "buckets.lock", "row.lock"]),
    ("core/src/storage.rs", r"\| \[`ClaimRow`\] \+ 2 × \[`Bucket`\] \| (\d+) \+ (\d+) = (\d+) \|",
     ["rowonly.claim", "buckets.claim", "row.claim"]),
    ("core/src/storage.rs", r"\| \[`LabelRow`\] \| (\d+) \|", ["row.label"]),
    ("core/src/storage.rs", r"\| \[`GateRow`\]\(crate::GateRow\) \| (\d+) \|", ["row.gate"]),
    ("core/src/storage.rs", r"\*\*Session\*\* \((\d+) \+ (\d+)\)", ["rowonly.session", "buckets.session"]),
    ("core/src/storage.rs", r"\*\*Lock\*\* \((\d+) \+ (\d+)\)", ["rowonly.lock", "buckets.lock"]),
    ("core/src/storage.rs", r"\*\*Claim\*\* \((\d+) \+ (\d+)\)", ["rowonly.claim", "buckets.claim"]),
    ("core/src/lib.rs", r"one row per session \((\d+) bytes\), per labelled session \((\d+),",
     ["row.session", "row.label"]),
    ("core/src/lib.rs", r"per live lock entry \((\d+)\) and per hold, wait or watch \((\d+)\)",
     ["row.lock", "row.claim"]),
    ("core/README.md", r"\| `SessionRow` \+ 2 `Bucket`s \| (\d+) \|", ["row.session"]),
    ("core/README.md", r"\| `LockRow` \+ 2 `TaggedBucket`s \| (\d+) \|", ["row.lock"]),
    ("core/README.md", r"\| `ClaimRow` \+ 2 `Bucket`s \| (\d+) \|", ["row.claim"]),
    ("core/README.md", r"\| `GateRow` \| (\d+) \|", ["row.gate"]),
    ("fence/src/gate.rs", r"\((\d+) bytes a resource\)", ["row.gate"]),
    ("wasm/src/gate.rs", r"about (\d+) bytes per", ["row.gate"]),
    ("fence/README.md", r"empty name / over (\d+) bytes", ["limit.name"]),
    ("docs/SPEC.md", r"`max_name_len` \(≤ (\d+)\)", ["limit.name"]),
    ("docs/SPEC.md", r"names or labels longer than (\d+) bytes", ["limit.name"]),
    ("tests/vectors/README.md", r"at most (\d+) bytes \(a frame", ["limit.name"]),
    ("docs/SPEC.md", r"`MAX_FRAME_LEN` \((\d+)\) bytes", ["limit.frame"]),
    ("docs/SPEC.md", r"the last `KEEPER_MEMORY` \((\d+)\)", ["keeper.memory"]),
    ("core/README.md", r"one of the last (\d+) recorded send times", ["keeper.memory"]),
    ("wasm/README.md", r"not among the last (\d+) recorded", ["keeper.memory"]),
    ("wasm/README.md", r"\*\*~(\d+) KB raw, ~(\d+) KB gzipped\*\*", ["wasm.lite_kb", "wasm.lite_gzip_kb"]),
    ("wasm/src/keeper.rs", r"the last (\d+) recorded \(nothing changes\)", ["keeper.memory"]),
    ("README.md", r"npm install /path/to/fencelock/fencelock-([\d.]+)\.tgz", ["version"]),
    ("wasm/README.md", r"npm install /path/to/fencelock-([\d.]+)\.tgz", ["version"]),
    ("wasm/README.md", r"wasm-bindgen version, ([\d.]+)\)", ["tools.wasm_bindgen"]),
    ("wasm/README.md", r"from npm's binaryen\s+(\d+)", ["tools.binaryen"]),
    ("wasm/README.md", r"`tsc` \(TypeScript\s+([\d.]+), pinned", ["tools.typescript"]),
    ("wasm/README.md", r"with the Vite in `tools/` \(([\d.]+)\)", ["tools.vite"]),
    ("server/README.md", r"### Why openraft ([\d.]+), not", ["tools.openraft"]),
    ("server/README.md", r"\[openraft\]\(https://docs.rs/openraft\) (\d+\.\d+) \(features", ["tools.openraft_minor"]),
    ("README.md", r"three nodes on openraft (\d+\.\d+),", ["tools.openraft_minor"]),
    ("README.md", r"\[openraft\]\(https://docs.rs/openraft\) (\d+\.\d+) on three nodes", ["tools.openraft_minor"]),
    ("README.md", r"stable number \((\d+–\d+), among them", ["errors.range"]),
    ("server/README.md", r"median of (\d+) interleaved", ["cluster.runs"]),
    ("server/README.md", r"1 client ([\d.]+×) etcd's rate \(([\d.]+×) against an etcd client",
     ["cluster.one.etcd.rate", "cluster.one.leader.rate"]),
    ("server/README.md", r"`--sessions N`, `--locks N`, `--claims N` \| ([\d ]+), ([\d ]+), ([\d ]+) \|",
     ["server.sessions", "server.locks", "server.claims"]),
    ("tests/README.md", r"vectors: +(\d+) files \(replayed \d+ vectors, (\d+) inputs\)",
     ["vectors.files", "vectors.inputs"]),
    ("tests/README.md", r"precedence: +(\d+) rows, (\d+) refusals", ["precedence.rows", "precedence.refusals"]),
    ("tests/README.md", r"tests must be the (\w+) `ignored-tests.txt` names", ["tests.ignored"]),
    ("tests/README.md", r"ceilings \(([\d ]+) / ([\d ]+) / ([\d ]+) bytes\)",
     ["bare.input", "bare.snapshot", "bare.restore"]),
    ("tests/README.md", r"the ceiling ([\d ]+)\)\. The files are", ["bare.flash"]),
]


def check_quotes(f):
    bad = []
    for rel, pattern, keys in QUOTES:
        text = read(rel)
        found = re.findall(pattern, text)
        if not found:
            bad.append(f"{rel}: no longer says {pattern!r}; list the reworded quote in QUOTES")
            continue
        for m in found:
            m = m if isinstance(m, tuple) else (m,)
            for got, key in zip(m, keys):
                if got != f[key][0]:
                    bad.append(f"{rel}: quotes {key} as {got}, its source ({f[key][1]}) says {f[key][0]}")
    return bad


def check_wasm(f):
    """The built modules against their recorded sizes: fails past 3 %."""
    bad = []
    for rel, key in (("wasm/pkg/web/fencelock_wasm_bg.wasm", "wasm.module_bytes"),
                     ("wasm/pkg/lite/web/fencelock_lite_bg.wasm", "wasm.lite_bytes")):
        w = os.path.join(ROOT, rel)
        if not os.path.exists(w):
            bad.append(f"{w} is missing: run scripts/build-wasm.sh first (make test does)")
            continue
        data = open(w, "rb").read()
        rec = int(f[key][0])
        if abs(len(data) - rec) > 0.03 * rec:
            bad.append(f"{rel} is {len(data)} bytes, wasm/README.md records "
                       f"{rec} (gzip now {len(gzip.compress(data, 9))}): run UPDATE_DOCS=1 "
                       f"scripts/build-wasm.sh, then scripts/figures.py --write")
    return bad


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    if mode not in ("--check", "--write"):
        sys.exit("usage: scripts/figures.py [--check | --write]")
    f = figures()
    readme = read("README.md")
    block = "<!-- figures:begin -->\n" + table(f) + "\n<!-- figures:end -->"
    current = re.search(r"<!-- figures:begin -->.*?<!-- figures:end -->", readme, re.S)
    if not current:
        sys.exit("figures: README.md has no <!-- figures:begin --> ... <!-- figures:end --> block")
    if mode == "--write":
        with open(os.path.join(ROOT, "README.md"), "w", encoding="utf-8") as out:
            out.write(readme[:current.start()] + block + readme[current.end():])
        print("figures: README.md table written")
        return
    bad = [] if current.group(0) == block else [
        "README.md: the figures table is out of date: run scripts/figures.py --write"]
    bad += check_quotes(f) + check_wasm(f)
    for b in bad:
        print("figures: " + b)
    print(f"figures: {len(f)} figures, {len(QUOTES)} quotes outside the table, "
          f"{'all agree' if not bad else f'{len(bad)} disagree'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
