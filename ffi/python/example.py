"""The GC-pause story from Python (ctypes only): A's late write with token 34 is refused.

Run: FENCELOCK_LIB=target/debug/libfencelock.so python3 ffi/python/example.py
"""

import fencelock as fl

with fl.Service(sessions=8, locks=8, claims=16) as svc:
    a, b = svc.open_session(ttl=10), svc.open_session(ttl=10)
    svc.acquire(a, "ledger")                   # A holds the lock
    svc.acquire(b, "ledger", wait="forever")   # B waits
    for t in (3, 6, 9):                        # A is paused; only B heartbeats
        svc.tick(t)
        svc.keep_alive(b)
    svc.tick(10)                               # A's session expires; B is granted
    for out in svc.outputs():
        if out["kind"] in ("granted", "released", "session_expired"):
            print(out)

gate = fl.Gate(capacity=4)
gate.admit("ledger", 2)                        # B writes with its token
try:
    gate.admit("ledger", 1)                    # A wakes up and writes with its old token
except fl.FencelockError as e:
    print("refused:", e)
gate.close()
