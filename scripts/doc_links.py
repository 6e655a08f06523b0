#!/usr/bin/env python3
"""Checks every relative link in the repository's markdown: the file it names exists, and
a `#fragment` names a heading of that file (GitHub's anchors: lower case, punctuation
dropped, spaces to hyphens). Links inside code blocks and to other sites are not checked.
Prints each broken link and exits 1 if there is one.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = ("target", "node_modules", ".git", "pkg", "test-output")


def anchor(heading):
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
        cache[path] = {anchor(h) for h in re.findall(r"^#+\s+(.*?)\s*#*$", text, re.M)}
    return cache[path]


def main():
    bad, count = [], 0
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP and not x.startswith(".")]
        for name in files:
            if not name.endswith(".md"):
                continue
            path = os.path.join(d, name)
            text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
            for link in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z][a-z0-9+.-]*:", link):
                    continue  # another site or a mail address
                count += 1
                target, _, frag = link.partition("#")
                dest = os.path.normpath(os.path.join(d, target)) if target else path
                rel = os.path.relpath(path, ROOT)
                if not os.path.exists(dest):
                    bad.append(f"{rel}: {link}: no such file")
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    bad.append(f"{rel}: {link}: no heading with that anchor")
    for b in bad:
        print("links: " + b)
    print(f"links: {count} relative links, {len(bad)} broken")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
