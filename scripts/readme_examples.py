#!/usr/bin/env python3
"""Runs every code block of every README exactly as a reader would copy it.

Rules (also in README.md, "Examples are tested"):
  * A fenced block whose opening line is preceded by `<!-- excerpt -->` is an excerpt:
    a fragment, a command that needs a running system, output. It is listed, not run.
  * `text` blocks are diagrams or output and never run.
  * A `toml` block is the `[dependencies]` of the next `rust` block in the same file.
  * A `rust` block is `src/main.rs` of a fresh crate with those dependencies, in a
    temporary directory beside a checkout named `fencelock/` (a link to this repository);
    it is built and run.
  * A `c`, `python` or `js` block names its file on its first line (`/* hello.c */`,
    `# hello.py`, `// hello.mjs`) and is followed by an `sh` block: the commands that build
    and run it. Both are run in that temporary directory — not in the repository — so a
    path that works only from the repository's root fails here.
  * Any other block (an `sh` block on its own, say) must be marked as an excerpt.

A block fails if its commands exit non-zero. Prints one line per block and a closing
`N passed, N failed` line; exits 1 if any failed or if a block is neither runnable nor
marked.
"""

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^(```+)([A-Za-z0-9_+-]*)\s*$")
FILE_LINE = re.compile(r"^\s*(?:/\*|#|//)\s*([A-Za-z0-9_./-]+\.(?:c|py|mjs|cjs|js))\b")


def blocks(path):
    """Yields (line, lang, text, excerpt) for each fenced block of a markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2)
        start = i
        prev = lines[i - 1].strip() if i > 0 else ""
        excerpt = prev.startswith("<!-- excerpt")
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        i += 1
        yield start + 1, lang, "\n".join(body) + "\n", excerpt


def run(cmd, cwd, env=None, timeout=900):
    p = subprocess.run(
        cmd, cwd=cwd, shell=True, env=env, timeout=timeout,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        executable="/bin/bash",
    )
    return p.returncode, p.stdout


def main():
    files = sys.argv[1:] or sorted(
        os.path.relpath(os.path.join(d, f), ROOT)
        for d, dirs, fs in os.walk(ROOT)
        for f in fs
        if f == "README.md"
        and not any(part in ("target", "node_modules", ".git") or part.startswith("tgt")
                    for part in os.path.relpath(d, ROOT).split(os.sep))
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(target, "readme-examples"))
    passed = failed = excerpts = 0
    with tempfile.TemporaryDirectory(prefix="fencelock-readme-") as tmp:
        os.symlink(ROOT, os.path.join(tmp, "fencelock"))
        for rel in files:
            path = os.path.join(ROOT, rel)
            pending_toml = None
            items = list(blocks(path))
            k = 0
            while k < len(items):
                line, lang, text, excerpt = items[k]
                where = f"{rel}:{line}"
                k += 1
                if excerpt:
                    excerpts += 1
                    print(f"[readme] excerpt {where} ({lang or 'plain'})")
                    continue
                if lang == "text":
                    continue
                if lang == "toml":
                    pending_toml = text
                    continue
                ok, log = None, ""
                if lang == "rust":
                    ok, log = run_rust(tmp, text, pending_toml, env)
                    pending_toml = None
                elif lang in ("c", "python", "js"):
                    m = FILE_LINE.match(text.split("\n", 1)[0])
                    nxt = items[k] if k < len(items) else None
                    if not m or not nxt or nxt[1] != "sh" or nxt[3]:
                        ok, log = False, (
                            "a runnable block names its file on its first line and is "
                            "followed by the sh block that builds and runs it; otherwise "
                            "mark it <!-- excerpt -->")
                    else:
                        k += 1
                        with open(os.path.join(tmp, m.group(1)), "w") as f:
                            f.write(text)
                        # The reader's shell: cargo's default target dir (the commands
                        # name fencelock/target/...), not this run's.
                        shell_env = {k: v for k, v in os.environ.items()
                                     if k != "CARGO_TARGET_DIR"}
                        code, log = run(nxt[2], tmp, shell_env)
                        ok = code == 0
                else:
                    ok, log = False, "neither runnable nor marked <!-- excerpt -->"
                if ok:
                    passed += 1
                    print(f"[readme] ok      {where} ({lang})")
                else:
                    failed += 1
                    print(f"[readme] FAILED  {where} ({lang}):\n{log[-4000:]}")
    print(f"[readme] {excerpts} excerpts listed, not run")
    print(f"readme: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def run_rust(tmp, text, toml, env):
    crate = tempfile.mkdtemp(prefix="app-", dir=tmp)
    deps = toml or ""
    if "[dependencies]" not in deps:
        return False, "a rust block needs a toml block with its [dependencies] before it"
    # The reader's crate sits beside the checkout: `path = "../fencelock/core"` resolves.
    os.rename(crate, os.path.join(tmp, "app"))
    crate = os.path.join(tmp, "app")
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "readme-example"\nversion = "0.0.0"\nedition = "2021"\n'
                'publish = false\n\n[workspace]\n\n' + deps)
    with open(os.path.join(crate, "src", "main.rs"), "w") as f:
        f.write(text)
    code, log = run("cargo run --quiet", crate, env)
    run(f"rm -rf {crate}", tmp)
    return code == 0, log


if __name__ == "__main__":
    main()
