"""The GC-pause story from Python: A's late write with token 1 is refused.

Run from anywhere once the package is installed (pip install the wheel `make wheel`
builds), or from a checkout: FENCELOCK_LIB=target/debug/libfencelock.so
PYTHONPATH=ffi/python python3 ffi/python/example.py
"""

import fencelock as fl

with fl.Service(sessions=8, locks=8, claims=16) as svc:
    a = svc.open_session(now=0, ttl=10).session
    b = svc.open_session(now=0, ttl=10).session
    print("A:", svc.acquire(0, a, "ledger"))                  # A holds the lock, token 1
    print("B:", svc.acquire(0, b, "ledger", wait="forever"))  # B waits
    for t in (3, 6, 9):                        # A is paused; only B's keep-alives arrive,
        svc.keep_alive(t, b)                   # each applied at its own time, no tick needed
    for event in svc.tick(10).events:          # A's session expires; B is granted token 2
        print(event)

with fl.Gate(capacity=4) as gate:
    gate.admit("ledger", 2)                    # B writes with its token
    try:
        gate.admit("ledger", 1)                # A wakes up and writes with its old token
    except fl.FencelockError as e:
        print("refused:", e.code, e)           # refused: 401 stale: token 1 is lower than …
