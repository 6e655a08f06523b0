#!/usr/bin/env python3
"""Builds the platform wheel of the Python package with the C library inside, using only
the standard library (a wheel is a zip with a .dist-info directory, PEP 427).

    python3 scripts/build_wheel.py LIBRARY OUT_DIR CRATE_VERSION

Name, version, summary, licence and Python requirement come from ffi/python/pyproject.toml;
its version must equal CRATE_VERSION (the library's). The tag is py3-none-<this
platform> (the package is pure Python, the library is what ties it to a platform).
The archive is reproducible: sorted entries, fixed timestamps. Prints the wheel's path.
"""

import base64
import hashlib
import os
import sys
import sysconfig
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "ffi", "python")


def main() -> None:
    library, out_dir, crate_version = sys.argv[1:4]
    project = tomllib.load(open(os.path.join(PKG, "pyproject.toml"), "rb"))["project"]
    name, version = project["name"], project["version"]
    if version != crate_version:
        sys.exit(f"ffi/python/pyproject.toml says version {version}, the crate {crate_version}")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"py3-none-{plat}"
    dist = f"{name}-{version}.dist-info"

    files = {}  # path in the wheel -> bytes
    for f in sorted(os.listdir(os.path.join(PKG, "fencelock"))):
        if f.endswith(".py") or f == "py.typed":
            files[f"fencelock/{f}"] = open(os.path.join(PKG, "fencelock", f), "rb").read()
    files[f"fencelock/{os.path.basename(library)}"] = open(library, "rb").read()
    for lic in ("LICENSE-MIT", "LICENSE-APACHE"):
        files[f"{dist}/licenses/{lic}"] = open(os.path.join(ROOT, lic), "rb").read()
    meta = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {project['description']}",
        f"License: {project['license']['text']}",
        f"Requires-Python: {project['requires-python']}",
    ] + [f"Classifier: {c}" for c in project.get("classifiers", [])]
    readme = open(os.path.join(PKG, project["readme"]), encoding="utf-8").read()
    meta += ["Description-Content-Type: text/markdown", "", readme]
    files[f"{dist}/METADATA"] = "\n".join(meta).encode()
    files[f"{dist}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: fencelock scripts/build_wheel.py\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
    files[f"{dist}/top_level.txt"] = b"fencelock\n"

    def digest(data: bytes) -> str:
        raw = hashlib.sha256(data).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = [f"{p},{digest(d)},{len(d)}" for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}-{version}-{tag}.whl")
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():  # the .dist-info last, RECORD last of all
            info = zipfile.ZipInfo(p, date_time=(1980, 1, 1, 0, 0, 0))
            is_exec = p.endswith((".so", ".dylib", ".dll"))
            info.external_attr = (0o755 if is_exec else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    os.replace(path + ".tmp", path)
    print(path)


if __name__ == "__main__":
    main()
