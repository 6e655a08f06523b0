#!/usr/bin/env python3
"""Runs every code block of every README exactly as a reader would copy it.

Every fenced block is one of three kinds, and the runner fails on a block that is none:

  * Run. A reader's directory is a temporary directory holding a checkout named
    `fencelock/`; everything runs there, not in the repository, so a path that works
    only from the repository's root fails.
    - A `rust` block, with the `toml` block just before it as its `[dependencies]`, is
      `src/main.rs` of a fresh crate there; it is built and run.
    - A `c`, `python` or `js` block names its file on its first line (`/* hello.c */`,
      `# hello.py`, `// hello.mjs`) and is followed by an `sh` block: the commands that
      build and run it, run by bash under `set -e`.
    - An `html` block (`<!-- hello.html -->` on line 1) is a page: its `sh` block ends
      with `python3 -m http.server PORT --bind 127.0.0.1`. The runner runs the commands
      before that one, serves the same directory on a free loopback port instead, and
      opens the page in headless Chromium (scripts/readme_browser.mjs), failing on a
      page error, a console error, a failed request or a page that shows nothing.
    - An `sh` block on its own runs when its first line is
      `# from the directory that holds your checkout, fencelock/` (the reader sees it too).
    - A comment `# prints: TEXT` (or `# the page prints: TEXT`) in an `sh` block promises
      that TEXT is in what the block prints, or in what the page shows; it is checked.
    The reader's commands see no CARGO_TARGET_DIR: they build into `fencelock/target/`,
    which the runner points at this run's target directory.
  * Excerpt. A block whose opening fence follows `<!-- excerpt: WHY -->` on the line
    before is listed, not run. WHY is required: what the block needs that a reader's
    fresh directory lacks (a running cluster, a PostgreSQL server, the rest of a larger
    program) and where its runnable form is tested (a script or test file).
  * Text. A `text` block is a diagram, a file format, or a program's output: never
    code, never run. Code or commands in a `text` block are a mistake the runner cannot
    see, so reviewers look for it. A block with no language at all (a bare fence)
    fails, so every block says which kind it is.

Fences may be indented (a block in a list item). Indented code blocks without a fence are
not seen: write every code block with a fence.

Prints one line per run or excerpt block and a closing
`readme: N passed, N failed (N excerpts, N text)` line; exits 1 if any failed.
Arguments: README paths relative to the repository (default: every README.md outside
target/, node_modules/ and .git/); `-v` also prints what each passing block printed.
"""

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A fence may be indented (a block inside a list item); its body loses that indentation.
FENCE = re.compile(r"^( *)(```+|~~~+)([A-Za-z0-9_+-]*)\s*$")
FILE_LINE = re.compile(r"^\s*(?:/\*|#|//|<!--)\s*([A-Za-z0-9_./-]+\.(?:c|py|mjs|cjs|js|html))\b")
SERVE = re.compile(r"^python3 -m http\.server \d+ --bind 127\.0\.0\.1\b")


def blocks(path):
    """Yields (line, lang, text, excerpt) for each fenced block of a markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
        start = i
        prev = EXCERPT.match(lines[i - 1].strip()) if i > 0 else None
        # None: not an excerpt; "": marked without a reason; else the reason.
        excerpt = prev.group(1).lstrip(":").strip() if prev else None
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
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


PRINTS = re.compile(r"#[^#\n]*?\bprints:\s*(.+?)\s*$", re.M)
READER_DIR = "# from the directory that holds your checkout, fencelock/"
EXCERPT = re.compile(r"^<!--\s*excerpt\b(.*?)-->\s*$")


def reader_checkout(tmp, target):
    """`tmp/fencelock`: the checkout as a reader has it, each top-level entry a link into
    this repository, except `target/`, which is this run's target directory."""
    co = os.path.join(tmp, "fencelock")
    os.mkdir(co)
    for name in os.listdir(ROOT):
        if name not in ("target", ".git"):
            os.symlink(os.path.join(ROOT, name), os.path.join(co, name))
    os.makedirs(target, exist_ok=True)
    os.symlink(target, os.path.join(co, "target"))


def main():
    args = sys.argv[1:]
    show = "-v" in args  # also print what each passing block printed
    args = [a for a in args if a != "-v"]
    files = args or sorted(
        os.path.relpath(os.path.join(d, f), ROOT)
        for d, dirs, fs in os.walk(ROOT)
        for f in fs
        if f == "README.md"
        and not any(part in ("target", "node_modules", ".git") or part.startswith("tgt")
                    or part.startswith(".pkg-new")
                    for part in os.path.relpath(d, ROOT).split(os.sep))
    )
    target = os.path.abspath(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")))
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(target, "readme-examples"))
    # The reader's shell: no CARGO_TARGET_DIR, so cargo builds into fencelock/target.
    shell_env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
    passed = failed = excerpts = texts = 0
    with tempfile.TemporaryDirectory(prefix="fencelock-readme-") as tmp:
        reader_checkout(tmp, target)
        for rel in files:
            path = os.path.join(ROOT, rel)
            items = list(blocks(path))
            k = 0
            while k < len(items):
                line, lang, text, excerpt = items[k]
                where = f"{rel}:{line}"
                k += 1
                ok, log = None, ""
                if excerpt is not None:
                    if excerpt:
                        excerpts += 1
                        print(f"[readme] excerpt {where} ({lang or 'no language'}): {excerpt}")
                        continue
                    ok, log = False, ("an excerpt marker says why: <!-- excerpt: what it "
                                      "needs, and where its runnable form is tested -->")
                elif lang == "text":
                    texts += 1
                    continue
                elif lang == "":
                    ok, log = False, ("a block with no language: `text` for a diagram, a "
                                      "format or output; else its language, run or excerpt")
                elif lang == "toml":
                    nxt = items[k] if k < len(items) else None
                    if not nxt or nxt[1] != "rust" or nxt[3] is not None:
                        ok, log = False, ("a toml block is the [dependencies] of the rust "
                                          "block right after it; otherwise mark it an excerpt")
                    else:
                        k += 1
                        where = f"{rel}:{line}+{nxt[0]}"
                        ok, log = run_rust(tmp, nxt[2], text, env)
                        lang = "toml + rust"
                elif lang == "rust":
                    ok, log = False, "a rust block needs a toml block with its [dependencies] before it"
                elif lang == "html":
                    m = FILE_LINE.match(text.split("\n", 1)[0])
                    nxt = items[k] if k < len(items) else None
                    cmds = nxt[2].rstrip("\n").split("\n") if nxt else []
                    if (not m or not nxt or nxt[1] != "sh" or nxt[3] is not None
                            or not SERVE.match(cmds[-1])):
                        ok, log = False, (
                            "an html block names its file on its first line and is followed "
                            "by the sh block that builds and serves it (its last command "
                            "`python3 -m http.server PORT --bind 127.0.0.1`)")
                    else:
                        k += 1
                        with open(os.path.join(tmp, m.group(1)), "w") as f:
                            f.write(text)
                        code, log = run("set -e\n" + "\n".join(cmds[:-1]), tmp, shell_env)
                        ok = code == 0
                        if ok:
                            code, more = browse(tmp, m.group(1))
                            ok, log = code == 0, log + more
                            missing = [p for p in PRINTS.findall(nxt[2]) if p not in more]
                            for p in missing:
                                log += f"\n[readme] the page does not show `{p}`"
                            ok = ok and not missing
                elif lang in ("c", "python", "js"):
                    m = FILE_LINE.match(text.split("\n", 1)[0])
                    nxt = items[k] if k < len(items) else None
                    if not m or not nxt or nxt[1] != "sh" or nxt[3] is not None:
                        ok, log = False, (
                            "a runnable block names its file on its first line and is "
                            "followed by the sh block that builds and runs it; otherwise "
                            "mark it <!-- excerpt: ... -->")
                    else:
                        k += 1
                        with open(os.path.join(tmp, m.group(1)), "w") as f:
                            f.write(text)
                        ok, log = run_sh(nxt[2], tmp, shell_env)
                elif lang == "sh" and text.startswith(READER_DIR):
                    ok, log = run_sh(text, tmp, shell_env)
                else:
                    ok, log = False, "neither runnable nor marked <!-- excerpt: ... -->"
                if ok:
                    passed += 1
                    print(f"[readme] ok      {where} ({lang})", flush=True)
                    if show:
                        print(log.rstrip() + "\n", flush=True)
                else:
                    failed += 1
                    print(f"[readme] FAILED  {where} ({lang}):\n{log[-4000:]}", flush=True)
    print(f"readme: {passed} passed, {failed} failed ({excerpts} excerpts, {texts} text)")
    sys.exit(1 if failed else 0)


def run_sh(text, cwd, env):
    """Runs an sh block under set -e; checks each `# prints: TEXT` promise against its output."""
    code, log = run("set -e\n" + text, cwd, env)
    missing = [p for p in PRINTS.findall(text) if p not in log]
    for p in missing:
        log += f"\n[readme] the block promises `# prints: {p}`, and its output does not contain it"
    return code == 0 and not missing, log


def browse(tmp, page):
    """Serves `tmp` on a free 127.0.0.1 port and opens `page` in headless Chromium."""
    handler = functools.partial(Quiet, directory=tmp)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{page}"
        return run(f"node {os.path.join(ROOT, 'scripts', 'readme_browser.mjs')} {url}", tmp,
                   timeout=120)
    finally:
        server.shutdown()
        server.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        # The browser asks for a favicon by itself; that 404 is not the example's.
        if self.path == "/favicon.ico":
            self.send_response(204)
            self.end_headers()
            return
        super().do_GET()


def run_rust(tmp, text, toml, env):
    crate = tempfile.mkdtemp(prefix="app-", dir=tmp)
    deps = toml
    if "[dependencies]" not in deps:
        return False, "the toml block before a rust block holds its [dependencies]"
    # The reader's crate sits beside the checkout: `path = "../fencelock/core"` resolves.
    os.rename(crate, os.path.join(tmp, "app"))
    crate = os.path.join(tmp, "app")
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "readme-example"\nversion = "0.0.0"\nedition = "2021"\n'
                'publish = false\n\n[workspace]\n\n' + deps)
    with open(os.path.join(crate, "src", "main.rs"), "w") as f:
        f.write(text)
    # The project's pinned versions, not whatever crates.io has newest today: cargo
    # keeps the locked versions, adds the reader's package and drops what it does not use.
    shutil.copy(os.path.join(ROOT, "Cargo.lock"), os.path.join(crate, "Cargo.lock"))
    code, log = run("cargo run --quiet", crate, env)
    run(f"rm -rf {crate}", tmp)
    return code == 0, log


if __name__ == "__main__":
    main()
