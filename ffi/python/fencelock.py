"""fencelock from Python through the C ABI, with nothing but the standard library's ctypes.

An example of embedding libfencelock.so in another runtime. The library path comes from
the FENCELOCK_LIB environment variable (default: ./libfencelock.so).

    svc = Service(sessions=8, locks=8, claims=16)
    a = svc.open_session(now=0, ttl=10)["session"]
    got = svc.acquire(0, a, "jobs/reindex")   # {"kind": "granted", "mode": "exclusive", "token": 1}
    for event in got.events:                   # events for other sessions (a waiter granted...)
        route(event)                           # {"kind": "granted", "session": 2, "lock": ..., ...}

Every input takes the host's `now` first and returns its reply directly: a `Reply`, a
dict with a "kind" key spelled as the core's `Reply::kind()` ("opened", "kept_alive",
"closed", "granted", "queued", "busy", "released", "cancelled", "hold_ended",
"wait_ended", "ticked") and that kind's fields. The events the call queued for other
sessions (or that time caused: the advance to `now` comes first) are beside it, in
`reply.events`: dicts with a "kind" key spelled as the core's `Output::kind()`
("granted", "released", "session_expired", "wait_timed_out").

Every refused call raises FencelockError with .code (the numeric fencelock_result), the
handle's detailed message, and .events: a refused input changed nothing beyond the
advance to its `now`, whose events stand and are there. A Python int that is not a u64
(negative, or 2^64 and above) is refused with code 903 (INVALID_ARGUMENT) before the
library is called: such a value cannot even be given to the core.
"""

import ctypes as C
import os

lib = C.CDLL(os.environ.get("FENCELOCK_LIB", "./libfencelock.so"))

NAME_BUF_LEN = 65
MAX_FRAME_LEN = 128
OK, DONE, BUFFER_TOO_SMALL, INVALID_ARGUMENT = 0, 1, 502, 903
MODES = {"exclusive": 1, "shared": 2}
MODE_NAMES = {1: "exclusive", 2: "shared"}
WAITS = {"none": 1, "forever": 2, "until": 3}
# By kind number (fencelock_reply_kind, fencelock_output_kind): the core's kind names.
REPLY_KINDS = [None, "opened", "kept_alive", "closed", "granted", "queued", "busy",
               "released", "cancelled", "hold_ended", "wait_ended", "ticked"]
EVENT_KINDS = [None, "granted", "released", "session_expired", "wait_timed_out"]
REASONS = [None, "released", "closed", "expired"]
LEASES = [None, "unconfirmed", "safe", "jeopardy", "expired"]


class Capacity(C.Structure):
    _fields_ = [("sessions", C.c_uint32), ("locks", C.c_uint32), ("claims", C.c_uint32)]


class Config(C.Structure):
    _fields_ = [("capacity", Capacity), ("lock_delay", C.c_uint64), ("max_name_len", C.c_uint32)]


class CReply(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("mode", C.c_uint32), ("position", C.c_uint32),
                ("session", C.c_uint64), ("expires_at", C.c_uint64), ("token", C.c_uint64),
                ("now", C.c_uint64)]


class Output(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("mode", C.c_uint32), ("reason", C.c_uint32),
                ("session", C.c_uint64), ("token", C.c_uint64), ("lock_len", C.c_size_t),
                ("lock", C.c_char * NAME_BUF_LEN)]


class Holder(C.Structure):
    _fields_ = [("session", C.c_uint64), ("token", C.c_uint64), ("mode", C.c_uint32)]


class Lease(C.Structure):
    _fields_ = [("state", C.c_uint32), ("until", C.c_uint64), ("expires_at", C.c_uint64)]


class Reply(dict):
    """The caller's reply: a dict with "kind" and that kind's fields. `.events` holds the
    events the call queued (dicts with "kind"); `.frame`, from handle_frame only, the
    reply's postcard frame."""

    def __init__(self, fields, events, frame=None):
        super().__init__(fields)
        self.events = events
        self.frame = frame


class FencelockError(Exception):
    """A fencelock_result other than OK; .code is its number, .events the events that
    stand (the advance to the refused input's now)."""

    def __init__(self, code, detail=None, events=()):
        self.code = code
        self.events = list(events)
        super().__init__(f"{code}: {detail or message(code)}")


def message(code):
    """The fixed message of a result code (fencelock_result_message)."""
    buf = C.create_string_buffer(200)
    lib.fencelock_result_message(C.c_uint32(code), buf, C.c_size_t(len(buf)), None)
    return buf.value.decode()


def _detail(last_error, handle):
    buf = C.create_string_buffer(200)
    last_error(handle, buf, C.c_size_t(len(buf)), None)
    return buf.value.decode()


def _u64(*values):
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
            raise FencelockError(INVALID_ARGUMENT, f"invalid argument: {v!r} is not a u64")


def _name(text):
    raw = text.encode() if isinstance(text, str) else bytes(text)
    return raw, C.c_size_t(len(raw))


def _reply(c):
    kind = REPLY_KINDS[c.kind] if c.kind < len(REPLY_KINDS) else None
    d = {"kind": kind}
    if kind == "opened":
        d.update(session=c.session, expires_at=c.expires_at)
    elif kind == "kept_alive":
        d["expires_at"] = c.expires_at
    elif kind in ("granted", "queued"):
        d["mode"] = MODE_NAMES[c.mode]
        if kind == "granted":
            d["token"] = c.token
        else:
            d["position"] = c.position
    elif kind in ("released", "hold_ended"):
        d["token"] = c.token
    elif kind == "ticked":
        d["now"] = c.now
    return d


def _event(o):
    kind = EVENT_KINDS[o.kind] if o.kind < len(EVENT_KINDS) else None
    d = {"kind": kind, "session": o.session}
    if o.lock_len:
        d["lock"] = bytes(o.lock[:o.lock_len]).decode()
    if kind == "granted":
        d["mode"] = MODE_NAMES[o.mode]
    if kind in ("granted", "released"):
        d["token"] = o.token
    if kind == "released":
        d["reason"] = REASONS[o.reason]
    return d


# Argument and return types: every function returns a uint32 fencelock_result.
P = C.c_void_p
U64, SIZE, NAME = C.c_uint64, C.c_size_t, C.c_char_p
REPLY = C.POINTER(CReply)
for fn, args in {
    "fencelock_service_new": [C.POINTER(Config), C.POINTER(P)],
    "fencelock_service_free": [P],
    "fencelock_service_restore": [C.POINTER(Capacity), NAME, SIZE, C.POINTER(P)],
    "fencelock_service_open_session": [P, U64, U64, REPLY],
    "fencelock_service_keep_alive": [P, U64, U64, U64, REPLY],
    "fencelock_service_close_session": [P, U64, U64, U64, REPLY],
    "fencelock_service_acquire": [P, U64, U64, NAME, SIZE, C.c_uint32, C.c_uint32, U64, U64,
                                  REPLY],
    "fencelock_service_release": [P, U64, U64, NAME, SIZE, U64, REPLY],
    "fencelock_service_cancel": [P, U64, U64, NAME, SIZE, U64, REPLY],
    "fencelock_service_tick": [P, U64],
    "fencelock_service_poll_output": [P, C.POINTER(Output)],
    "fencelock_service_handle_frame": [P, NAME, SIZE, REPLY, P, SIZE, C.POINTER(SIZE)],
    "fencelock_service_drain_frames": [P, P, SIZE, C.POINTER(SIZE)],
    "fencelock_service_revision": [P, C.POINTER(U64)],
    "fencelock_service_now": [P, C.POINTER(U64)],
    "fencelock_service_holders": [P, NAME, SIZE, C.POINTER(Holder), SIZE, C.POINTER(SIZE)],
    "fencelock_service_snapshot": [P, P, SIZE, C.POINTER(SIZE)],
    "fencelock_service_last_error": [P, NAME, SIZE, C.POINTER(SIZE)],
    "fencelock_result_message": [C.c_uint32, NAME, SIZE, C.POINTER(SIZE)],
    "fencelock_gate_new": [SIZE, C.POINTER(P)],
    "fencelock_gate_free": [P],
    "fencelock_gate_admit": [P, NAME, SIZE, U64],
    "fencelock_gate_highest": [P, NAME, SIZE, C.POINTER(C.c_bool), C.POINTER(U64)],
    "fencelock_gate_last_error": [P, NAME, SIZE, C.POINTER(SIZE)],
    "fencelock_keeper_new": [U64, U64, U64, C.POINTER(P)],
    "fencelock_keeper_free": [P],
    "fencelock_keeper_keep_alive_sent": [P, U64],
    "fencelock_keeper_keep_alive_acked": [P, U64, C.POINTER(C.c_bool)],
    "fencelock_keeper_next_keep_alive": [P, U64, C.POINTER(U64)],
    "fencelock_keeper_lease": [P, U64, C.POINTER(Lease)],
    "fencelock_keeper_may_act": [P, U64, C.POINTER(C.c_bool)],
    "fencelock_keeper_last_error": [P, NAME, SIZE, C.POINTER(SIZE)],
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
        self._check(lib.fencelock_service_new(C.byref(cfg), C.byref(self._h)), [], None)

    @classmethod
    def restore(cls, snapshot, sessions, locks, claims):
        h = P()
        cap = Capacity(sessions, locks, claims)
        code = lib.fencelock_service_restore(C.byref(cap), snapshot, len(snapshot), C.byref(h))
        if code != OK:
            raise FencelockError(code)
        return cls(0, 0, 0, _handle=h)

    def close(self):
        lib.fencelock_service_free(self._h)  # NULL is fine; never twice:
        self._h = P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def _events(self):
        got, o = [], Output()
        while lib.fencelock_service_poll_output(self._h, C.byref(o)) == OK:
            got.append(_event(o))
        return got

    def _check(self, code, events, handle=True):
        if code != OK:
            detail = _detail(lib.fencelock_service_last_error, self._h) if handle else None
            raise FencelockError(code, detail, events)

    def _input(self, fn, *args):
        c = CReply()
        code = fn(self._h, *args, C.byref(c))
        events = self._events()
        self._check(code, events)
        return Reply(_reply(c), events)

    def open_session(self, now, ttl):
        _u64(now, ttl)
        return self._input(lib.fencelock_service_open_session, now, ttl)

    def keep_alive(self, now, session, request=0):
        _u64(now, session, request)
        return self._input(lib.fencelock_service_keep_alive, now, session, request)

    def close_session(self, now, session, request=0):
        _u64(now, session, request)
        return self._input(lib.fencelock_service_close_session, now, session, request)

    def acquire(self, now, session, lock, mode="exclusive", wait="none", until=0, request=0):
        _u64(now, session, until, request)
        raw, n = _name(lock)
        return self._input(lib.fencelock_service_acquire, now, session, raw, n,
                           MODES.get(mode, 0), WAITS.get(wait, 0), until, request)

    def release(self, now, session, lock, request=0):
        _u64(now, session, request)
        raw, n = _name(lock)
        return self._input(lib.fencelock_service_release, now, session, raw, n, request)

    def cancel(self, now, session, lock, request=0):
        _u64(now, session, request)
        raw, n = _name(lock)
        return self._input(lib.fencelock_service_cancel, now, session, raw, n, request)

    def tick(self, now):
        """Advances to `now`; replies {"kind": "ticked", "now": now} (as the core's handle
        of a tick input), with the events beside it."""
        _u64(now)
        code = lib.fencelock_service_tick(self._h, now)
        events = self._events()
        self._check(code, events)
        return Reply({"kind": "ticked", "now": now}, events)

    def handle_frame(self, frame):
        """One postcard input frame in; its Reply out, with the reply's frame in `.frame`."""
        c, buf, n = CReply(), C.create_string_buffer(MAX_FRAME_LEN), C.c_size_t()
        code = lib.fencelock_service_handle_frame(self._h, frame, len(frame), C.byref(c), buf,
                                                  MAX_FRAME_LEN, C.byref(n))
        events = self._events()
        self._check(code, events)
        return Reply(_reply(c), events, buf.raw[:n.value])

    def now(self):
        t = C.c_uint64()
        self._check(lib.fencelock_service_now(self._h, C.byref(t)), [])
        return t.value

    def revision(self):
        r = C.c_uint64()
        self._check(lib.fencelock_service_revision(self._h, C.byref(r)), [])
        return r.value

    def holders(self, lock):
        raw, n = _name(lock)
        count = C.c_size_t()
        code = lib.fencelock_service_holders(self._h, raw, n, None, 0, C.byref(count))
        if code not in (OK, BUFFER_TOO_SMALL):
            self._check(code, [])
        arr = (Holder * max(count.value, 1))()
        self._check(lib.fencelock_service_holders(self._h, raw, n, arr, count.value,
                                                  C.byref(count)), [])
        return [(h.session, h.token) for h in arr[:count.value]]

    def snapshot(self):
        need = C.c_size_t()
        code = lib.fencelock_service_snapshot(self._h, None, 0, C.byref(need))
        if code not in (OK, BUFFER_TOO_SMALL):
            self._check(code, [])
        buf = C.create_string_buffer(max(need.value, 1))
        self._check(lib.fencelock_service_snapshot(self._h, buf, need.value, C.byref(need)), [])
        return buf.raw[:need.value]


class Gate:
    """A fence gate (fencelock_gate): the resource's check of fencing tokens."""

    def __init__(self, capacity):
        self._h = P()
        code = lib.fencelock_gate_new(capacity, C.byref(self._h))
        if code != OK:
            raise FencelockError(code)

    def close(self):
        """Frees the handle; a second close does nothing."""
        lib.fencelock_gate_free(self._h)
        self._h = P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def _check(self, code):
        if code != OK:
            raise FencelockError(code, _detail(lib.fencelock_gate_last_error, self._h))

    def admit(self, resource, token):
        _u64(token)
        raw, n = _name(resource)
        self._check(lib.fencelock_gate_admit(self._h, raw, n, token))

    def highest(self, resource):
        raw, n = _name(resource)
        seen, top = C.c_bool(), C.c_uint64()
        self._check(lib.fencelock_gate_highest(self._h, raw, n, C.byref(seen), C.byref(top)))
        return top.value if seen.value else None


class Keeper:
    """A session keeper (fencelock_keeper): the client's view of its lease."""

    def __init__(self, ttl, interval, margin):
        _u64(ttl, interval, margin)
        self._h = P()
        code = lib.fencelock_keeper_new(ttl, interval, margin, C.byref(self._h))
        if code != OK:
            raise FencelockError(code)

    def close(self):
        """Frees the handle; a second close does nothing."""
        lib.fencelock_keeper_free(self._h)
        self._h = P()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def _check(self, code):
        if code != OK:
            raise FencelockError(code, _detail(lib.fencelock_keeper_last_error, self._h))

    def keep_alive_sent(self, at):
        _u64(at)
        self._check(lib.fencelock_keeper_keep_alive_sent(self._h, at))

    def keep_alive_acked(self, sent_at):
        _u64(sent_at)
        ext = C.c_bool()
        self._check(lib.fencelock_keeper_keep_alive_acked(self._h, sent_at, C.byref(ext)))
        return ext.value

    def next_keep_alive(self, now):
        _u64(now)
        at = C.c_uint64()
        self._check(lib.fencelock_keeper_next_keep_alive(self._h, now, C.byref(at)))
        return at.value

    def lease(self, now):
        _u64(now)
        lease = Lease()
        self._check(lib.fencelock_keeper_lease(self._h, now, C.byref(lease)))
        return LEASES[lease.state], lease.until, lease.expires_at

    def may_act(self, now):
        _u64(now)
        may = C.c_bool()
        self._check(lib.fencelock_keeper_may_act(self._h, now, C.byref(may)))
        return may.value
