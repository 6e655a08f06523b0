#!/usr/bin/env python3
"""Acquire + release from Python through the ctypes package (ffi/python), one library
call per input against one fencelock_service_submit call per 1024 inputs: the time per
acquire + release pair (1024 free locks, 13-byte names, one session), the fastest of
ROUNDS rounds of each, the three ways interleaved so machine load hits them alike.
Run by scripts/bench.sh with FENCELOCK_LIB set to the release library; prints JSON.

usage: batch.py [ROUNDS]
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "ffi", "python"))
import fencelock as fl  # noqa: E402

N = 1024
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
NAMES = [f"lock/{i:08d}" for i in range(N)]

svc = fl.Service(1, N, N)
s = svc.open_session(0, 1 << 40).session
ACQ = [fl.Op.acquire(s, n) for n in NAMES]
REL = [fl.Op.release(s, n) for n in NAMES]


def typed():
    for n in NAMES:
        svc.acquire(0, s, n)
    for n in NAMES:
        svc.release(0, s, n)


def batch_built():
    svc.submit(0, [fl.Op.acquire(s, n) for n in NAMES])
    svc.submit(0, [fl.Op.release(s, n) for n in NAMES])


def batch_reused():
    svc.submit(0, ACQ)
    svc.submit(0, REL)


ways = {"typed": typed, "submit_built": batch_built, "submit_reused": batch_reused}
best = {k: float("inf") for k in ways}
for _ in range(ROUNDS):
    for k, f in ways.items():
        t0 = time.perf_counter()
        f()
        best[k] = min(best[k], time.perf_counter() - t0)
assert svc.usage().locks == 0
json.dump({k: round(v / N * 1e9, 1) for k, v in best.items()} | {"python": sys.version.split()[0]},
          sys.stdout)
print()
