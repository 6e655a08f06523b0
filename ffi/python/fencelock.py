"""fencelock from Python through the C ABI, with nothing but the standard library's ctypes.

An example of embedding libfencelock.so in another runtime. The library path comes from
the FENCELOCK_LIB environment variable (default: ./libfencelock.so).

    svc = Service(sessions=8, locks=8, claims=16)
    a = svc.open_session(10)            # -> session id
    svc.acquire(a, "jobs/reindex")      # queues a GRANTED output
    for out in svc.outputs():           # drain: dicts like {"kind": "granted", "token": 1, ...}
        route(out)

Every refused call raises FencelockError with .code (the numeric fencelock_result) and
the library's message; a refused input changed nothing.
"""

import ctypes as C
import os

lib = C.CDLL(os.environ.get("FENCELOCK_LIB", "./libfencelock.so"))

NAME_BUF_LEN = 65
OK, DONE, BUFFER_TOO_SMALL = 0, 1, 502
MODES = {"exclusive": 1, "shared": 2}
WAITS = {"none": 1, "forever": 2, "until": 3}
KINDS = [None, "session_opened", "session_renewed", "session_closed", "session_expired",
         "granted", "queued", "busy", "released", "wait_timed_out", "wait_cancelled"]
REASONS = [None, "released", "closed", "expired"]
LEASES = [None, "unconfirmed", "safe", "jeopardy", "expired"]


class Capacity(C.Structure):
    _fields_ = [("sessions", C.c_uint32), ("locks", C.c_uint32), ("claims", C.c_uint32)]


class Config(C.Structure):
    _fields_ = [("capacity", Capacity), ("lock_delay", C.c_uint64), ("max_name_len", C.c_uint32)]


class Output(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("mode", C.c_uint32), ("reason", C.c_uint32),
                ("position", C.c_uint32), ("session", C.c_uint64), ("expires_at", C.c_uint64),
                ("token", C.c_uint64), ("lock_len", C.c_size_t), ("lock", C.c_char * NAME_BUF_LEN)]


class Holder(C.Structure):
    _fields_ = [("session", C.c_uint64), ("token", C.c_uint64), ("mode", C.c_uint32)]


class Lease(C.Structure):
    _fields_ = [("state", C.c_uint32), ("until", C.c_uint64), ("expires_at", C.c_uint64)]


class FencelockError(Exception):
    """A fencelock_result other than OK; .code is its number."""

    def __init__(self, code, detail=None):
        self.code = code
        super().__init__(f"{code}: {detail or message(code)}")


def message(code):
    """The fixed message of a result code (fencelock_result_message)."""
    buf = C.create_string_buffer(200)
    lib.fencelock_result_message(C.c_uint32(code), buf, C.c_size_t(len(buf)), None)
    return buf.value.decode()


def _check(code, handle=None):
    if code != OK:
        detail = None
        if handle is not None:
            buf = C.create_string_buffer(200)
            lib.fencelock_service_last_error(handle, buf, C.c_size_t(len(buf)), None)
            detail = buf.value.decode()
        raise FencelockError(code, detail)


def _name(text):
    raw = text.encode() if isinstance(text, str) else bytes(text)
    return raw, C.c_size_t(len(raw))


# Argument and return types: every function returns a uint32 fencelock_result.
P = C.c_void_p
for fn, args in {
    "fencelock_service_new": [C.POINTER(Config), C.POINTER(P)],
    "fencelock_service_free": [P],
    "fencelock_service_restore": [C.POINTER(Capacity), C.c_char_p, C.c_size_t, C.POINTER(P)],
    "fencelock_service_open_session": [P, C.c_uint64, C.POINTER(C.c_uint64)],
    "fencelock_service_keep_alive": [P, C.c_uint64, C.c_uint64],
    "fencelock_service_close_session": [P, C.c_uint64, C.c_uint64],
    "fencelock_service_acquire": [P, C.c_uint64, C.c_char_p, C.c_size_t, C.c_uint32, C.c_uint32,
                                  C.c_uint64, C.c_uint64],
    "fencelock_service_release": [P, C.c_uint64, C.c_char_p, C.c_size_t, C.c_uint64],
    "fencelock_service_tick": [P, C.c_uint64],
    "fencelock_service_poll_output": [P, C.POINTER(Output)],
    "fencelock_service_handle_frame": [P, C.c_char_p, C.c_size_t, P, C.c_size_t,
                                       C.POINTER(C.c_size_t)],
    "fencelock_service_drain_frames": [P, P, C.c_size_t, C.POINTER(C.c_size_t)],
    "fencelock_service_revision": [P, C.POINTER(C.c_uint64)],
    "fencelock_service_holders": [P, C.c_char_p, C.c_size_t, C.POINTER(Holder), C.c_size_t,
                                  C.POINTER(C.c_size_t)],
    "fencelock_service_snapshot": [P, P, C.c_size_t, C.POINTER(C.c_size_t)],
    "fencelock_service_last_error": [P, C.c_char_p, C.c_size_t, C.POINTER(C.c_size_t)],
    "fencelock_result_message": [C.c_uint32, C.c_char_p, C.c_size_t, C.POINTER(C.c_size_t)],
    "fencelock_gate_new": [C.c_size_t, C.POINTER(P)],
    "fencelock_gate_free": [P],
    "fencelock_gate_admit": [P, C.c_char_p, C.c_size_t, C.c_uint64],
    "fencelock_gate_highest": [P, C.c_char_p, C.c_size_t, C.POINTER(C.c_bool),
                               C.POINTER(C.c_uint64)],
    "fencelock_keeper_new": [C.c_uint64, C.c_uint64, C.c_uint64, C.POINTER(P)],
    "fencelock_keeper_free": [P],
    "fencelock_keeper_heartbeat_sent": [P, C.c_uint64],
    "fencelock_keeper_heartbeat_acked": [P, C.c_uint64, C.POINTER(C.c_bool)],
    "fencelock_keeper_lease": [P, C.c_uint64, C.POINTER(Lease)],
    "fencelock_keeper_may_act": [P, C.c_uint64, C.POINTER(C.c_bool)],
}.items():
    f = getattr(lib, fn)
    f.argtypes = args
    f.restype = None if fn.endswith("_free") else C.c_uint32


class Service:
    """A lock service (fencelock_service). Free it with close() or a with-block."""

    def __init__(self, sessions, locks, claims, lock_delay=0, max_name_len=64, _handle=None):
        self._h = P()
        if _handle is not None:
            self._h = _handle
            return
        cfg = Config(Capacity(sessions, locks, claims), lock_delay, max_name_len)
        _check(lib.fencelock_service_new(C.byref(cfg), C.byref(self._h)))

    @classmethod
    def restore(cls, snapshot, sessions, locks, claims):
        h = P()
        cap = Capacity(sessions, locks, claims)
        _check(lib.fencelock_service_restore(C.byref(cap), snapshot, len(snapshot), C.byref(h)))
        return cls(0, 0, 0, _handle=h)

    def close(self):
        lib.fencelock_service_free(self._h)  # NULL is fine; never twice:
        self._h = P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def open_session(self, ttl):
        sid = C.c_uint64()
        _check(lib.fencelock_service_open_session(self._h, ttl, C.byref(sid)), self._h)
        return sid.value

    def keep_alive(self, session, request=0):
        _check(lib.fencelock_service_keep_alive(self._h, session, request), self._h)

    def close_session(self, session, request=0):
        _check(lib.fencelock_service_close_session(self._h, session, request), self._h)

    def acquire(self, session, lock, mode="exclusive", wait="none", until=0, request=0):
        raw, n = _name(lock)
        _check(lib.fencelock_service_acquire(self._h, session, raw, n, MODES.get(mode, 0),
                                             WAITS.get(wait, 0), until, request), self._h)

    def release(self, session, lock, request=0):
        raw, n = _name(lock)
        _check(lib.fencelock_service_release(self._h, session, raw, n, request), self._h)

    def tick(self, now):
        _check(lib.fencelock_service_tick(self._h, now), self._h)

    def outputs(self):
        """Drains the queued outputs (oldest first) as dicts."""
        got, o = [], Output()
        while lib.fencelock_service_poll_output(self._h, C.byref(o)) == OK:
            d = {"kind": KINDS[o.kind], "session": o.session}
            if o.kind in (1, 2):
                d["expires_at"] = o.expires_at
            if o.lock_len:
                d["lock"] = bytes(o.lock[:o.lock_len]).decode()
            if o.kind in (5, 6):
                d["mode"] = {1: "exclusive", 2: "shared"}[o.mode]
            if o.kind in (5, 8):
                d["token"] = o.token
            if o.kind == 6:
                d["position"] = o.position
            if o.kind == 8:
                d["reason"] = REASONS[o.reason]
            got.append(d)
        return got

    def handle_frame(self, frame, cap=4096):
        """One input frame in; its output frames out (list of bytes)."""
        buf = C.create_string_buffer(cap)
        n = C.c_size_t()
        _check(lib.fencelock_service_handle_frame(self._h, frame, len(frame), buf, cap,
                                                  C.byref(n)), self._h)
        raw, frames, at = buf.raw[:n.value], [], 0
        while at < len(raw):
            flen = raw[at] | raw[at + 1] << 8
            frames.append(raw[at + 2:at + 2 + flen])
            at += 2 + flen
        return frames

    def revision(self):
        r = C.c_uint64()
        _check(lib.fencelock_service_revision(self._h, C.byref(r)), self._h)
        return r.value

    def holders(self, lock):
        raw, n = _name(lock)
        count = C.c_size_t()
        code = lib.fencelock_service_holders(self._h, raw, n, None, 0, C.byref(count))
        if code not in (OK, BUFFER_TOO_SMALL):
            _check(code, self._h)
        arr = (Holder * max(count.value, 1))()
        _check(lib.fencelock_service_holders(self._h, raw, n, arr, count.value, C.byref(count)),
               self._h)
        return [(h.session, h.token) for h in arr[:count.value]]

    def snapshot(self):
        need = C.c_size_t()
        code = lib.fencelock_service_snapshot(self._h, None, 0, C.byref(need))
        if code not in (OK, BUFFER_TOO_SMALL):
            _check(code, self._h)
        buf = C.create_string_buffer(max(need.value, 1))
        _check(lib.fencelock_service_snapshot(self._h, buf, need.value, C.byref(need)), self._h)
        return buf.raw[:need.value]


class Gate:
    """A fence gate (fencelock_gate): the resource's check of fencing tokens."""

    def __init__(self, capacity):
        self._h = P()
        _check(lib.fencelock_gate_new(capacity, C.byref(self._h)))

    def close(self):
        lib.fencelock_gate_free(self._h)
        self._h = P()

    def admit(self, resource, token):
        raw, n = _name(resource)
        _check(lib.fencelock_gate_admit(self._h, raw, n, token))

    def highest(self, resource):
        raw, n = _name(resource)
        seen, top = C.c_bool(), C.c_uint64()
        _check(lib.fencelock_gate_highest(self._h, raw, n, C.byref(seen), C.byref(top)))
        return top.value if seen.value else None


class Keeper:
    """A session keeper (fencelock_keeper): the client's view of its lease."""

    def __init__(self, ttl, interval, margin):
        self._h = P()
        _check(lib.fencelock_keeper_new(ttl, interval, margin, C.byref(self._h)))

    def close(self):
        lib.fencelock_keeper_free(self._h)
        self._h = P()

    def heartbeat_sent(self, at):
        _check(lib.fencelock_keeper_heartbeat_sent(self._h, at))

    def heartbeat_acked(self, sent_at):
        ext = C.c_bool()
        _check(lib.fencelock_keeper_heartbeat_acked(self._h, sent_at, C.byref(ext)))
        return ext.value

    def lease(self, now):
        lease = Lease()
        _check(lib.fencelock_keeper_lease(self._h, now, C.byref(lease)))
        return LEASES[lease.state], lease.until, lease.expires_at

    def may_act(self, now):
        may = C.c_bool()
        _check(lib.fencelock_keeper_may_act(self._h, now, C.byref(may)))
        return may.value
