"""fencelock for Python: the lock-service core with fencing tokens, through its C ABI.

    import fencelock as fl

    with fl.Service(sessions=8, locks=8, claims=16) as svc:
        a = svc.open_session(now=0, ttl=10).session
        got = svc.acquire(0, a, "jobs/reindex")   # Granted(kind='granted', mode=..., token=1)
        for event in svc.tick(10).events:         # events for other sessions, or caused by time
            route(event)                          # SessionExpired(kind='session_expired', ...)

The library (libfencelock.so) is found beside this module (the wheel puts it there), or
wherever the environment variable FENCELOCK_LIB points (a path to the library file);
FENCELOCK_LIB wins when set (a relative path is taken from the current directory, as any
relative path is); without it nothing depends on the current directory.

Every input takes the host's clock reading `now` first and returns the caller's reply, a
small frozen dataclass whose `kind` is the core's `Reply::kind()` string ("opened",
"kept_alive", "closed", "granted", "queued", "busy", "released", "cancelled",
"hold_ended", "wait_ended", "ticked", "watching", "unwatched", the same strings as the
JavaScript binding). The events the call caused for other sessions, or that time caused
(the advance to `now` comes first), are beside it in `reply.events`: dataclasses whose
`kind` is the core's `Output::kind()` ("granted", "released", "session_expired",
"wait_timed_out", "holder_changed").

A mode is `Mode.EXCLUSIVE`, `Mode.SHARED` or `Permits(count, limit)`: `count` of a
semaphore's `limit` permits (`acquire(..., mode=Permits(2, 5))`); replies, events, holders
and waiters give it back the same way.

A refusal raises `FencelockError`: `.code` (the stable number), `.result` (a `Result`),
`.kind` (the core's `Error::kind()` string, "unknown_session"), `.detail` (the handle's
detailed message, also `str(e)`), and `.events`: a refused input changes nothing beyond
the advance to its `now`, whose events stand and are there. What cannot even be handed to
the library raises `ArgumentError` (a `FencelockError` with code 903 INVALID_ARGUMENT
that is also a `ValueError`) before the library is called, so nothing changes, not even
time: an integer outside its C type (negative, or 2^64 and above for a u64), a bool or a
non-integer where an integer goes, a name that is neither str nor bytes-like, an unknown
mode or wait, an `until` given with a wait other than "until" (or left out with it),
request number 0 (None means "no request number", which the C ABI spells 0, so a real
request number 0 cannot cross it). A call on a closed handle raises `HandleError` (code 906
INVALID_HANDLE, the code the library gives a handle after its free where it can tell; also
a `ValueError`, as for a closed file), before the library is called. A str name or label holding a lone
surrogate (not encodable as UTF-8) raises FencelockError INVALID_UTF8 here too, the code
the library gives bytes that are not UTF-8. Nothing else is checked here: every other
rule is the core's, in the core's order.

The library queues events up to a limit (`Service.event_limit()`, twice the most one input
can emit at capacity by default): an input the queue has no room for is refused with
BUFFER_TOO_SMALL, nothing changed. Every method here drains the queue after its call, so
only events left by calls made on the library directly can fill it; they are on that
error's `.events` (drained), and the same input then succeeds.

Names are `str` (or UTF-8 bytes-like objects) and come back as `str`. A NUL is an
ordinary character: "a\\0b" is a three-character name, kept whole both ways.

Handles (`Service`, `Gate`, `Keeper`) are context managers; `close()` frees the library's
memory at once, and a finalizer frees it when an unclosed handle is garbage-collected.
A handle serializes its own calls with a lock, so sharing one between threads is safe
(though the calls do not run in parallel); a close() made from inside one of its calls (a
signal handler, say) frees it as that call returns.
"""

from __future__ import annotations

import ctypes as C
import enum
import operator
import os
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Literal, Optional, Union

__all__ = [
    "__version__", "ENV_VAR", "MAX_NAME_LEN", "MAX_FRAME_LEN", "KEEPER_MEMORY",
    "MAX_LABEL_LEN", "DEFAULT_MAX_WATCHERS", "NAME_KEY_LEN",
    "Result", "Mode", "Permits", "Wait", "Reason", "Change", "LeaseState",
    "FencelockError", "ArgumentError", "HandleError", "message", "library_version",
    "Opened", "KeptAlive", "Closed", "Granted", "Queued", "Busy", "Released", "Cancelled",
    "HoldEnded", "WaitEnded", "Ticked", "Watching", "Unwatched", "Reply",
    "GrantedEvent", "ReleasedEvent", "SessionExpired", "WaitTimedOut", "HolderChanged",
    "Event", "Capacity", "Config", "Usage", "SessionInfo", "Holder", "Waiter", "Leader",
    "PermitsInUse", "Lease", "Op", "Batch",
    "Service", "Gate", "Keeper",
]

#: This package's version: the library it loads must say the same (fencelock_version).
__version__ = "0.2.0"
#: The one environment variable this package reads: a path to libfencelock.
ENV_VAR = "FENCELOCK_LIB"
#: The longest lock or resource name, in bytes (the core's MAX_NAME_LEN).
MAX_NAME_LEN = 64
#: The largest encoded input, reply or event frame, in bytes.
MAX_FRAME_LEN = 176
#: How many recent keep-alive send times a keeper remembers.
KEEPER_MEMORY = 8
#: The longest session label, in bytes (the core's MAX_LABEL_LEN).
MAX_LABEL_LEN = 64
#: The core's default for the most sessions watching one lock (Config::default()).
DEFAULT_MAX_WATCHERS = 4
#: Bytes in a name key (Service.set_name_key, Gate.set_name_key).
NAME_KEY_LEN = 16
_NAME_BUF_LEN = MAX_NAME_LEN + 1
_LABEL_BUF_LEN = MAX_LABEL_LEN + 1
_FRAME_PREFIX_LEN = 2

_LIB_FILE = {"darwin": "libfencelock.dylib", "win32": "fencelock.dll"}.get(sys.platform,
                                                                           "libfencelock.so")


def _load() -> tuple[C.CDLL, str]:
    path = os.environ.get(ENV_VAR)
    if path:
        where = f"{ENV_VAR}={path}"
    else:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_FILE)
        where = f"beside the module ({path})"
    try:
        lib = C.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"fencelock: cannot load the C library {where}: {e}. Install the wheel (which "
            f"bundles it), or set {ENV_VAR} to the path of {_LIB_FILE}") from e
    _check_version(lib, where)
    return lib, where


def _check_version(lib: C.CDLL, where: str) -> None:
    """ImportError unless `lib` says it is this package's version: the structs this
    package lays out change between 0.x releases, and a library of another one would be
    read with the wrong layouts."""
    try:
        version_of = lib.fencelock_version
    except AttributeError as e:
        raise ImportError(
            f"fencelock: the C library {where} is not libfencelock {__version__} (it has no "
            f"fencelock_version)") from e
    version_of.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(C.c_size_t)]
    version_of.restype = C.c_uint32
    buf = C.create_string_buffer(64)
    found = buf.value.decode("utf-8", "replace") if version_of(buf, len(buf), None) == 0 else "?"
    if found != __version__:
        raise ImportError(
            f"fencelock: the C library {where} is libfencelock {found}, this package "
            f"{__version__}: use the library of the same release (the wheel bundles it)")


_lib, _WHERE = _load()


# ---------------------------------------------------------------------------- enums

class Result(enum.IntEnum):
    """Every fencelock_result code (stable; never reused). Lower-cased, a core code's name
    is the core's `Error::kind()` string."""
    OK = 0
    DONE = 1
    UNKNOWN_SESSION = 101
    NOT_HOLDER = 102
    NOT_QUEUED = 103
    ALREADY_QUEUED = 104
    MODE_MISMATCH = 105
    STALE_REQUEST = 106
    REQUEST_REUSED = 107
    LIMIT_MISMATCH = 108
    NOT_WATCHING = 109
    ALREADY_WATCHING = 110
    EMPTY_NAME = 201
    NAME_TOO_LONG = 202
    BAD_TTL = 203
    DEADLINE_OVERFLOW = 204
    TIME_WENT_BACKWARDS = 205
    BAD_CONFIG = 206
    BAD_PERMITS = 207
    LABEL_TOO_LONG = 208
    CAPACITY_EXCEEDED = 301
    STALE = 401
    ZERO_TOKEN = 402
    BAD_FRAME = 501
    BUFFER_TOO_SMALL = 502
    BAD_MAGIC = 503
    UNSUPPORTED_VERSION = 504
    CORRUPT_SNAPSHOT = 505
    UNKNOWN_KEEP_ALIVE = 601
    NULL_PARAMETER = 901
    INVALID_UTF8 = 902
    INVALID_ARGUMENT = 903
    MISALIGNED_MEMORY = 905
    INVALID_HANDLE = 906
    UNKNOWN_ERROR = 998
    PANIC = 999


class _StrEnum(str, enum.Enum):
    """An enum that is its string: compares, prints and reprs as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class Mode(_StrEnum):
    """How a lock is held. Compares equal to its string ("exclusive", "shared")."""
    EXCLUSIVE = "exclusive"
    SHARED = "shared"


class Wait(_StrEnum):
    """What an acquire does when the lock is taken: "none" (try-lock: Busy), "forever"
    (queue), "until" (queue until the tick given as `until`)."""
    NONE = "none"
    FOREVER = "forever"
    UNTIL = "until"


class Reason(_StrEnum):
    """Why a hold ended (ReleasedEvent): "closed" or "expired". ("released" is a holder's
    own release, which is its reply, never an event.)"""
    RELEASED = "released"
    CLOSED = "closed"
    EXPIRED = "expired"


class Change(_StrEnum):
    """What a HolderChanged event says of a holder: "holding" (it held the lock when the
    watch began), "granted", "released", "closed" or "expired" (its hold ended with its
    session)."""
    HOLDING = "holding"
    GRANTED = "granted"
    RELEASED = "released"
    CLOSED = "closed"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Permits:
    """The semaphore mode: `count` of a semaphore's `limit` permits (both u32; the core
    refuses anything but 1 <= count <= limit with BAD_PERMITS). A name is a semaphore while
    it has live holds or waits from a permits acquire, and its limit is theirs: another
    limit, or an exclusive/shared acquire on it, is LIMIT_MISMATCH."""
    count: int
    limit: int


class LeaseState(_StrEnum):
    """What a client may do now, by its own clock."""
    UNCONFIRMED = "unconfirmed"
    SAFE = "safe"
    JEOPARDY = "jeopardy"
    EXPIRED = "expired"


_MODE_NUM = {Mode.EXCLUSIVE: 1, Mode.SHARED: 2}
_MODE_OF = {1: Mode.EXCLUSIVE, 2: Mode.SHARED}
_WAIT_NUM = {Wait.NONE: 1, Wait.FOREVER: 2, Wait.UNTIL: 3}
_REASON_OF = {1: Reason.RELEASED, 2: Reason.CLOSED, 3: Reason.EXPIRED}
_CHANGE_OF = {1: Change.HOLDING, 2: Change.GRANTED, 3: Change.RELEASED, 4: Change.CLOSED,
              5: Change.EXPIRED}
_MODE_PERMITS = 3


def _mode_of(c: Any) -> Union[Mode, Permits]:
    """The mode of a C struct with `mode`, `count` and `limit` fields."""
    if c.mode == _MODE_PERMITS:
        return Permits(c.count, c.limit)
    return _MODE_OF[c.mode]
_LEASE_OF = {1: LeaseState.UNCONFIRMED, 2: LeaseState.SAFE, 3: LeaseState.JEOPARDY,
             4: LeaseState.EXPIRED}


# --------------------------------------------------------------------------- errors

class FencelockError(Exception):
    """A refusal. `.code` is the fencelock_result number, `.result` the `Result` (or the
    bare number if this package does not know it), `.kind` its lower-case name (the core's
    `Error::kind()` for core codes), `.detail` the detailed message (also `str(e)`; when
    the library refuses a constructor, `Service(...)`, `Service.restore(...)`, `Gate(...)`
    and the like, the code's fixed message: the ABI keeps no detail without a handle),
    `.events` the events that stand (a refused input's advance to its `now`), and
    `.event_frames` the same as frames when the call was `handle_frame`."""

    def __init__(self, code: int, detail: Optional[str] = None,
                 events: Iterable[Any] = (), event_frames: Iterable[bytes] = ()) -> None:
        self.code = int(code)
        try:
            self.result: Union[Result, int] = Result(self.code)
            self.kind = self.result.name.lower()
        except ValueError:
            self.result = self.code
            self.kind = "unknown"
        self.detail = detail or message(self.code)
        self.events: list[Event] = list(events)
        self.event_frames: list[bytes] = list(event_frames)
        super().__init__(self.detail)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind} {self.code}: {self.detail!r})"

    def __reduce__(self) -> Any:
        # pickle and copy rebuild it from its fields (its args hold only the message), so
        # a refusal crosses a process pool whole: code, detail, events and frames.
        return (_rebuilt_error, (type(self), self.code, self.detail, self.events,
                                 self.event_frames))


def _rebuilt_error(cls: type, code: int, detail: str, events: Iterable[Any],
                   event_frames: Iterable[bytes]) -> FencelockError:
    e = cls.__new__(cls)
    FencelockError.__init__(e, code, detail, events, event_frames)
    return e


class ArgumentError(FencelockError, ValueError):
    """A value this binding cannot hand to the library (code 903, INVALID_ARGUMENT): an
    integer outside its C type, a bool or non-integer for an integer, a name that is not
    str or bytes-like, an unknown mode or wait, an `until` that does not match the wait,
    request number 0. Raised before the library is called: nothing changed."""

    def __init__(self, detail: str) -> None:
        super().__init__(Result.INVALID_ARGUMENT, detail)


class HandleError(FencelockError, ValueError):
    """A call on a handle after its close (code 906, INVALID_HANDLE: what the library
    answers a handle used after its free where it can tell). Raised before the library
    is called: nothing changed."""

    def __init__(self, detail: str) -> None:
        super().__init__(Result.INVALID_HANDLE, detail)


def library_version() -> str:
    """The version the loaded C library says it is (fencelock_version): this package's
    own, or the import would have failed. Cost: O(1)."""
    buf = C.create_string_buffer(64)
    _lib.fencelock_version(buf, len(buf), None)
    return buf.value.decode()


def message(code: int) -> str:
    """The fixed message of a result code ("stale", "unknown keep-alive"; for an unknown
    number "unknown result code"). Cost: O(message length)."""
    code = _uint(code, 32, "code")
    buf = C.create_string_buffer(128)
    _lib.fencelock_result_message(code, buf, len(buf), None)
    return buf.value.decode()


# -------------------------------------------------------------- argument conversion

def _uint(v: Any, bits: int, what: str) -> int:
    """A Python integer as a C unsigned integer of `bits` bits, or ArgumentError."""
    if isinstance(v, bool):
        raise ArgumentError(f"invalid argument: {what} must be an integer, not a bool ({v!r})")
    try:
        n = operator.index(v)
    except TypeError:
        raise ArgumentError(
            f"invalid argument: {what} must be an integer, not {type(v).__name__}") from None
    if not 0 <= n < 1 << bits:
        raise ArgumentError(f"invalid argument: {what} = {n} is outside 0 ..= 2^{bits} - 1")
    return n


def _u64(v: Any, what: str) -> int:
    return _uint(v, 64, what)


def _u32(v: Any, what: str) -> int:
    return _uint(v, 32, what)


def _size(v: Any, what: str) -> int:
    return _uint(v, 8 * C.sizeof(C.c_size_t), what)


def _request(v: Any) -> int:
    # None is "no request number", which the C ABI spells 0; so a real request number 0
    # cannot cross it, and is refused rather than quietly taken for none.
    if v is None:
        return 0
    n = _u64(v, "request")
    if n == 0:
        raise ArgumentError("invalid argument: request numbers start at 1 (None is none)")
    return n


Name = Union[str, bytes, bytearray, memoryview]


def _name(v: Any, what: str = "name") -> bytes:
    """A name as the UTF-8 bytes handed to the library (which checks UTF-8 and the core
    judges the length). str is encoded; bytes-like objects pass as they are."""
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: not UTF-8, as the library would say
            raise FencelockError(Result.INVALID_UTF8,
                                 f"invalid UTF-8: {what} {v!r} is not valid Unicode") from None
    got = _buffer(v)
    if got is not None:
        return got
    raise ArgumentError(
        f"invalid argument: {what} must be str or bytes-like, not {type(v).__name__}")


def _buffer(v: Any) -> Optional[bytes]:
    """A copy of the bytes of any bytes-like object (bytes, bytearray, memoryview, an
    array.array, an mmap, anything with the buffer protocol), or None for anything else.
    A copy, so another thread changing the object cannot change what the library reads."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return None
    try:
        with memoryview(v) as view:
            return view.tobytes()
    except Exception:  # not bytes-like (TypeError), or a buffer that refuses to be read
        return None


def _bytes(v: Any, what: str) -> bytes:
    got = _buffer(v)
    if got is not None:
        return got
    raise ArgumentError(f"invalid argument: {what} must be bytes-like, not {type(v).__name__}")


def _name_key(key: Any) -> bytes:
    """A name key: the given 16 bytes, or 16 from the operating system's random source."""
    if key is None:
        return os.urandom(NAME_KEY_LEN)
    return _bytes(key, "key")


def _enum(cls: Any, v: Any, what: str) -> Any:
    try:
        return cls(v)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ArgumentError(f"invalid argument: {what} {v!r} is not one of {allowed}") from None


def _text(raw: Any, n: int) -> str:
    return bytes(raw[:n]).decode("utf-8")


# ------------------------------------------------------------------- C structures

class _Capacity(C.Structure):
    _fields_ = [("sessions", C.c_uint32), ("locks", C.c_uint32), ("claims", C.c_uint32)]


class _Config(C.Structure):
    _fields_ = [("capacity", _Capacity), ("lock_delay", C.c_uint64),
                ("max_name_len", C.c_uint32), ("max_watchers", C.c_uint32)]


class _Reply(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("mode", C.c_uint32), ("position", C.c_uint32),
                ("pending", C.c_uint32), ("session", C.c_uint64), ("expires_at", C.c_uint64),
                ("token", C.c_uint64), ("now", C.c_uint64), ("count", C.c_uint32),
                ("limit", C.c_uint32), ("holders", C.c_uint32)]


class _Output(C.Structure):
    # Names and labels as unsigned bytes: a c_char array would cut them at their first NUL.
    _fields_ = [("kind", C.c_uint32), ("mode", C.c_uint32), ("reason", C.c_uint32),
                ("session", C.c_uint64), ("token", C.c_uint64), ("lock_len", C.c_size_t),
                ("lock", C.c_uint8 * _NAME_BUF_LEN), ("count", C.c_uint32),
                ("limit", C.c_uint32), ("change", C.c_uint32), ("holder", C.c_uint64),
                ("label_len", C.c_size_t), ("label", C.c_uint8 * _LABEL_BUF_LEN)]


class _Name(C.Structure):
    _fields_ = [("highest", C.c_uint64), ("len", C.c_size_t),
                ("name", C.c_uint8 * _NAME_BUF_LEN)]


class _Usage(C.Structure):
    _fields_ = [("sessions", C.c_uint32), ("locks", C.c_uint32), ("claims", C.c_uint32)]


class _SessionInfo(C.Structure):
    _fields_ = [("id", C.c_uint64), ("ttl", C.c_uint64), ("expires_at", C.c_uint64),
                ("last_request", C.c_uint64), ("holds", C.c_uint32), ("waits", C.c_uint32),
                ("watches", C.c_uint32), ("label_len", C.c_size_t),
                ("label", C.c_uint8 * _LABEL_BUF_LEN)]


class _Holder(C.Structure):
    _fields_ = [("session", C.c_uint64), ("token", C.c_uint64), ("mode", C.c_uint32),
                ("count", C.c_uint32), ("limit", C.c_uint32), ("label_len", C.c_size_t),
                ("label", C.c_uint8 * _LABEL_BUF_LEN)]


class _Waiter(C.Structure):
    _fields_ = [("session", C.c_uint64), ("deadline", C.c_uint64), ("mode", C.c_uint32),
                ("has_deadline", C.c_bool), ("count", C.c_uint32), ("limit", C.c_uint32),
                ("label_len", C.c_size_t), ("label", C.c_uint8 * _LABEL_BUF_LEN)]


class _Permits(C.Structure):
    _fields_ = [("in_use", C.c_uint32), ("limit", C.c_uint32)]


class _Leader(C.Structure):
    _fields_ = [("session", C.c_uint64), ("epoch", C.c_uint64)]


class _Lease(C.Structure):
    _fields_ = [("state", C.c_uint32), ("until", C.c_uint64), ("expires_at", C.c_uint64)]


class _Op(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("mode", C.c_uint32), ("wait", C.c_uint32),
                ("count", C.c_uint32), ("limit", C.c_uint32), ("session", C.c_uint64),
                ("ttl", C.c_uint64), ("wait_until", C.c_uint64),
                ("request_number", C.c_uint64), ("lock", C.c_char_p),
                ("lock_len", C.c_size_t), ("token", C.c_uint64)]


_P, _U64, _U32, _SIZE, _BYTES = C.c_void_p, C.c_uint64, C.c_uint32, C.c_size_t, C.c_char_p
_PP, _PSIZE, _PU64, _PBOOL = C.POINTER(_P), C.POINTER(_SIZE), C.POINTER(_U64), C.POINTER(C.c_bool)
_PREPLY = C.POINTER(_Reply)
_SIGNATURES: dict[str, list[Any]] = {
    "fencelock_result_message": [_U32, _BYTES, _SIZE, _PSIZE],
    "fencelock_version": [_BYTES, _SIZE, _PSIZE],
    "fencelock_service_new": [C.POINTER(_Config), _PP],
    "fencelock_service_free": [_P],
    "fencelock_service_layout": [C.POINTER(_Capacity), _PSIZE, _PSIZE],
    "fencelock_service_layout_watchers": [C.POINTER(_Capacity), _U32, _PSIZE, _PSIZE],
    "fencelock_service_init_in": [_P, _SIZE, C.POINTER(_Config), _PP],
    "fencelock_service_restore": [C.POINTER(_Capacity), _BYTES, _SIZE, _PP],
    "fencelock_service_restore_keyed": [C.POINTER(_Capacity), _BYTES, _SIZE, _BYTES, _SIZE,
                                        _PP],
    "fencelock_service_restore_in": [_P, _SIZE, C.POINTER(_Capacity), _BYTES, _SIZE, _PP],
    "fencelock_service_open_session": [_P, _U64, _U64, _PREPLY],
    "fencelock_service_keep_alive": [_P, _U64, _U64, _U64, _PREPLY],
    "fencelock_service_close_session": [_P, _U64, _U64, _U64, _PREPLY],
    "fencelock_service_open_labeled": [_P, _U64, _U64, _BYTES, _SIZE, _PREPLY],
    "fencelock_service_acquire": [_P, _U64, _U64, _BYTES, _SIZE, _U32, _U32, _U64, _U64,
                                  _PREPLY],
    "fencelock_service_acquire_permits": [_P, _U64, _U64, _BYTES, _SIZE, _U32, _U32, _U32,
                                          _U64, _U64, _PREPLY],
    "fencelock_service_watch": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _PREPLY],
    "fencelock_service_unwatch": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _PREPLY],
    "fencelock_service_release": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _PREPLY],
    "fencelock_service_release_hold": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _U64, _PREPLY],
    "fencelock_service_cancel": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _PREPLY],
    "fencelock_service_campaign": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _PREPLY],
    "fencelock_service_resign": [_P, _U64, _U64, _BYTES, _SIZE, _U64, _PREPLY],
    "fencelock_service_tick": [_P, _U64],
    # The three arrays as addresses: a batch resumes part-way through them.
    "fencelock_service_submit": [_P, _U64, _P, _SIZE, _P, _P, _PSIZE],
    "fencelock_service_handle_frame": [_P, _BYTES, _SIZE, _PREPLY, _P, _SIZE, _PSIZE],
    "fencelock_service_drain_frames": [_P, _P, _SIZE, _PSIZE],
    "fencelock_service_drain_events": [_P, C.POINTER(_Output), _SIZE, _PSIZE],
    "fencelock_service_poll_output": [_P, C.POINTER(_Output)],
    "fencelock_service_pending": [_P, _PSIZE],
    "fencelock_service_event_limit": [_P, _PSIZE],
    "fencelock_service_set_event_limit": [_P, _SIZE],
    "fencelock_service_now": [_P, _PU64],
    "fencelock_service_set_name_key": [_P, _BYTES, _SIZE],
    "fencelock_service_is_name_keyed": [_P, _PBOOL],
    "fencelock_service_poll_timeout": [_P, _PBOOL, _PU64],
    "fencelock_service_revision": [_P, _PU64],
    "fencelock_service_config": [_P, C.POINTER(_Config)],
    "fencelock_service_usage": [_P, C.POINTER(_Usage)],
    "fencelock_service_max_events": [_P, _PSIZE],
    "fencelock_service_session": [_P, _U64, C.POINTER(_SessionInfo)],
    "fencelock_service_sessions": [_P, _PU64, _SIZE, _PSIZE],
    "fencelock_service_locks": [_P, C.POINTER(_Name), _SIZE, _PSIZE],
    "fencelock_service_holders": [_P, _BYTES, _SIZE, C.POINTER(_Holder), _SIZE, _PSIZE],
    "fencelock_service_waiters": [_P, _BYTES, _SIZE, C.POINTER(_Waiter), _SIZE, _PSIZE],
    "fencelock_service_lock_delay_until": [_P, _BYTES, _SIZE, _PBOOL, _PU64],
    "fencelock_service_leader": [_P, _BYTES, _SIZE, _PBOOL, C.POINTER(_Leader)],
    "fencelock_service_permits": [_P, _BYTES, _SIZE, _PBOOL, C.POINTER(_Permits)],
    "fencelock_service_hold": [_P, _U64, _BYTES, _SIZE, _PBOOL, C.POINTER(_Holder)],
    "fencelock_service_raise_revision": [_P, _U64, _PU64],
    "fencelock_service_snapshot_len": [_P, _PSIZE],
    "fencelock_service_snapshot": [_P, _P, _SIZE, _PSIZE],
    "fencelock_service_last_error": [_P, _BYTES, _SIZE, _PSIZE],
    "fencelock_gate_new": [_SIZE, _PP],
    "fencelock_gate_free": [_P],
    "fencelock_gate_admit": [_P, _BYTES, _SIZE, _U64],
    "fencelock_gate_check": [_P, _BYTES, _SIZE, _U64],
    "fencelock_gate_highest": [_P, _BYTES, _SIZE, _PBOOL, _PU64],
    "fencelock_gate_entries": [_P, C.POINTER(_Name), _SIZE, _PSIZE],
    "fencelock_gate_set_name_key": [_P, _BYTES, _SIZE],
    "fencelock_gate_is_name_keyed": [_P, _PBOOL],
    "fencelock_gate_snapshot": [_P, _P, _SIZE, _PSIZE],
    "fencelock_gate_restore": [_SIZE, _BYTES, _SIZE, _PP],
    "fencelock_gate_restore_keyed": [_SIZE, _BYTES, _SIZE, _BYTES, _SIZE, _PP],
    "fencelock_gate_last_error": [_P, _BYTES, _SIZE, _PSIZE],
    "fencelock_keeper_new": [_U64, _U64, _U64, _PP],
    "fencelock_keeper_free": [_P],
    "fencelock_keeper_keep_alive_sent": [_P, _U64],
    "fencelock_keeper_keep_alive_acked": [_P, _U64, _PBOOL],
    "fencelock_keeper_session_lost": [_P],
    "fencelock_keeper_lease": [_P, _U64, C.POINTER(_Lease)],
    "fencelock_keeper_may_act": [_P, _U64, _PBOOL],
    "fencelock_keeper_next_keep_alive": [_P, _U64, _PU64],
    "fencelock_keeper_poll_timeout": [_P, _U64, _PBOOL, _PU64],
    "fencelock_keeper_last_error": [_P, _BYTES, _SIZE, _PSIZE],
}
for _fn, _args in _SIGNATURES.items():
    try:
        _f = getattr(_lib, _fn)
    except AttributeError as _e:  # a library of this version has every function
        raise ImportError(f"fencelock: the C library {_WHERE} lacks {_fn}") from _e
    _f.argtypes = _args
    _f.restype = None if _fn.endswith("_free") else C.c_uint32
del _fn, _args, _f


# ------------------------------------------------------------- replies and events

@dataclass(frozen=True)
class _Answer:
    # Beside the reply, not part of it (not compared, not in repr): the events the call
    # queued, and from handle_frame the reply's frame and the events as frames.
    events: tuple[Event, ...] = field(default=(), compare=False, repr=False, kw_only=True)
    frame: Optional[bytes] = field(default=None, compare=False, repr=False, kw_only=True)
    event_frames: tuple[bytes, ...] = field(default=(), compare=False, repr=False,
                                            kw_only=True)


@dataclass(frozen=True)
class Opened(_Answer):
    """The session was opened."""
    kind: Literal["opened"] = field(default="opened", init=False)
    session: int
    expires_at: int


@dataclass(frozen=True)
class KeptAlive(_Answer):
    """The keep-alive was applied (the client's acknowledgement)."""
    kind: Literal["kept_alive"] = field(default="kept_alive", init=False)
    expires_at: int


@dataclass(frozen=True)
class Closed(_Answer):
    """The session was closed; its holds were released (ReleasedEvent per hold)."""
    kind: Literal["closed"] = field(default="closed", init=False)


@dataclass(frozen=True)
class Granted(_Answer):
    """The session holds the lock; carry `token` with every action on the resource."""
    kind: Literal["granted"] = field(default="granted", init=False)
    mode: Union[Mode, Permits]
    token: int


@dataclass(frozen=True)
class Queued(_Answer):
    """The acquire waits in line (position 1 = next); a GrantedEvent or WaitTimedOut for
    this session follows, or the session ends."""
    kind: Literal["queued"] = field(default="queued", init=False)
    mode: Union[Mode, Permits]
    position: int


@dataclass(frozen=True)
class Busy(_Answer):
    """A try-lock (or a deadline not after now) found the lock taken; nothing queued."""
    kind: Literal["busy"] = field(default="busy", init=False)


@dataclass(frozen=True)
class Released(_Answer):
    """The hold ended; `token` is no longer good."""
    kind: Literal["released"] = field(default="released", init=False)
    token: int


@dataclass(frozen=True)
class Cancelled(_Answer):
    """The queued acquire was withdrawn."""
    kind: Literal["cancelled"] = field(default="cancelled", init=False)


@dataclass(frozen=True)
class HoldEnded(_Answer):
    """Only as the repeat of a granted acquire whose hold has since ended."""
    kind: Literal["hold_ended"] = field(default="hold_ended", init=False)
    token: int


@dataclass(frozen=True)
class WaitEnded(_Answer):
    """Only as the repeat of a queued acquire whose wait is over: it timed out or was
    cancelled, or it was granted and that hold has ended since; nothing of it is held."""
    kind: Literal["wait_ended"] = field(default="wait_ended", init=False)


@dataclass(frozen=True)
class Ticked(_Answer):
    """The answer to a tick: time is now `now`."""
    kind: Literal["ticked"] = field(default="ticked", init=False)
    now: int


@dataclass(frozen=True)
class Watching(_Answer):
    """The watch began: `holders` HolderChanged events ("holding") for the watcher itself
    are in `.events`, and one follows each later holder change of the lock."""
    kind: Literal["watching"] = field(default="watching", init=False)
    holders: int


@dataclass(frozen=True)
class Unwatched(_Answer):
    """The watch ended: no more HolderChanged events for that lock."""
    kind: Literal["unwatched"] = field(default="unwatched", init=False)


Reply = Union[Opened, KeptAlive, Closed, Granted, Queued, Busy, Released, Cancelled,
              HoldEnded, WaitEnded, Ticked, Watching, Unwatched]


@dataclass(frozen=True)
class GrantedEvent:
    """A waiter now holds the lock; every action on the resource must carry `token`."""
    kind: Literal["granted"] = field(default="granted", init=False)
    session: int
    lock: str
    mode: Union[Mode, Permits]
    token: int


@dataclass(frozen=True)
class ReleasedEvent:
    """A hold ended by its session's close or expiry; its token is no longer good."""
    kind: Literal["released"] = field(default="released", init=False)
    session: int
    lock: str
    token: int
    reason: Reason


@dataclass(frozen=True)
class SessionExpired:
    """A session's deadline passed; it lost everything."""
    kind: Literal["session_expired"] = field(default="session_expired", init=False)
    session: int


@dataclass(frozen=True)
class WaitTimedOut:
    """A timed wait reached its deadline ungranted."""
    kind: Literal["wait_timed_out"] = field(default="wait_timed_out", init=False)
    session: int
    lock: str


@dataclass(frozen=True)
class HolderChanged:
    """To the watcher `session`: a holder of `lock` changed. `holder` is the holding
    session, `mode` and `token` its hold's, `label` its session's label ("" if none)."""
    kind: Literal["holder_changed"] = field(default="holder_changed", init=False)
    session: int
    lock: str
    holder: int
    mode: Union[Mode, Permits]
    token: int
    change: Change
    label: str


Event = Union[GrantedEvent, ReleasedEvent, SessionExpired, WaitTimedOut, HolderChanged]


@dataclass(frozen=True)
class Capacity:
    """Rows of a service's three fixed tables."""
    sessions: int
    locks: int
    claims: int


@dataclass(frozen=True)
class Config:
    """A service's configuration."""
    capacity: Capacity
    lock_delay: int
    max_name_len: int
    max_watchers: int = DEFAULT_MAX_WATCHERS


@dataclass(frozen=True)
class Usage:
    """Rows in use: open sessions, live lock entries, claims (holds, waits and watches)."""
    sessions: int
    locks: int
    claims: int


@dataclass(frozen=True)
class SessionInfo:
    """A live session: its holds, waits and watches counted. `last_request` is None
    before its first request number; `label` is "" for a session opened without one."""
    id: int
    ttl: int
    expires_at: int
    last_request: Optional[int]
    holds: int
    waits: int
    label: str = ""
    watches: int = 0


@dataclass(frozen=True)
class Holder:
    """A hold; `label` is its session's ("" if none)."""
    session: int
    token: int
    mode: Union[Mode, Permits]
    label: str = ""


@dataclass(frozen=True)
class Waiter:
    """A queued acquire; `deadline` None means it waits forever."""
    session: int
    mode: Union[Mode, Permits]
    deadline: Optional[int]
    label: str = ""


@dataclass(frozen=True)
class PermitsInUse:
    """A live semaphore (Service.permits): permits held now, and its limit."""
    in_use: int
    limit: int


@dataclass(frozen=True)
class Leader:
    session: int
    epoch: int


@dataclass(frozen=True)
class Lease:
    """The client's lease: act until `until` (SAFE); the session may be gone from
    `expires_at` (JEOPARDY). The field a state does not use is None."""
    state: LeaseState
    until: Optional[int] = None
    expires_at: Optional[int] = None


_REPLY_OF: dict[int, Callable[[_Reply], Any]] = {
    1: lambda c: Opened(session=c.session, expires_at=c.expires_at),
    2: lambda c: KeptAlive(expires_at=c.expires_at),
    3: lambda c: Closed(),
    4: lambda c: Granted(mode=_mode_of(c), token=c.token),
    5: lambda c: Queued(mode=_mode_of(c), position=c.position),
    6: lambda c: Busy(),
    7: lambda c: Released(token=c.token),
    8: lambda c: Cancelled(),
    9: lambda c: HoldEnded(token=c.token),
    10: lambda c: WaitEnded(),
    11: lambda c: Ticked(now=c.now),
    12: lambda c: Watching(holders=c.holders),
    13: lambda c: Unwatched(),
}


def _reply_of(c: _Reply) -> Any:
    make = _REPLY_OF.get(c.kind)
    if make is None:  # a library newer than this module; never expected
        raise FencelockError(Result.UNKNOWN_ERROR, f"a reply of unknown kind {c.kind}")
    return make(c)


def _event(o: _Output) -> Event:
    if o.kind == 1:
        return GrantedEvent(session=o.session, lock=_text(o.lock, o.lock_len),
                            mode=_mode_of(o), token=o.token)
    if o.kind == 2:
        return ReleasedEvent(session=o.session, lock=_text(o.lock, o.lock_len),
                             token=o.token, reason=_REASON_OF[o.reason])
    if o.kind == 3:
        return SessionExpired(session=o.session)
    if o.kind == 4:
        return WaitTimedOut(session=o.session, lock=_text(o.lock, o.lock_len))
    if o.kind == 5:
        return HolderChanged(session=o.session, lock=_text(o.lock, o.lock_len),
                             holder=o.holder, mode=_mode_of(o), token=o.token,
                             change=_CHANGE_OF[o.change], label=_text(o.label, o.label_len))
    raise FencelockError(Result.UNKNOWN_ERROR, f"an event of unknown kind {o.kind}")


# -------------------------------------------------------------------------- handles

class _InCall:
    """Counts the calls in progress on a handle, on the thread that holds its lock (a call
    may make others), so that a close() made from inside one — a signal handler, an
    argument's __index__, a __del__ run by the garbage collector — frees the handle only
    as the outermost call returns, never under it. Entered after the handle's lock, in the
    same with-statement (`with self._mutex, self._in_call:`), so that the lock itself is
    taken and let go by the lock's own context manager, which nothing interrupts halfway:
    a KeyboardInterrupt at the wrong moment here can at worst leave the count too high,
    and then a close() marks the handle closed and its finalizer frees it. It holds the
    finalizer, not the handle object, so it makes no reference cycle."""

    __slots__ = ("finalizer", "depth", "pending")

    def __init__(self, finalizer: weakref.finalize) -> None:
        self.finalizer = finalizer
        self.depth = 0
        self.pending = False

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if self.depth == 0 and self.pending:
            self.finalizer()


class _Handle:
    """An owned library handle: freed by close(), the with-block's end, or a finalizer."""

    _free: ClassVar[str]
    _last_error: ClassVar[str]
    _what: ClassVar[str]

    def __init__(self, handle: C.c_void_p, keep: Any = None) -> None:
        self._h = handle
        self._mutex = threading.RLock()
        # Marked taken before its finalizer exists (see _adopt): an interruption between
        # the two leaks the handle rather than letting it be freed twice.
        handle._taken = True
        # The finalizer holds the handle (and a placed service's memory, which must
        # outlive it), never the object itself; and the handle's lock, so that it never
        # frees the handle under a call another thread is making (at interpreter exit it
        # runs while daemon threads still run).
        self._finalizer = weakref.finalize(self, _release, getattr(_lib, self._free), handle,
                                           keep, self._mutex)
        self._in_call = _InCall(self._finalizer)

    def close(self) -> None:
        """Frees the library's memory for this handle. A second close does nothing; any
        other call afterwards raises HandleError. Made from inside a call on this handle
        (a signal handler, an argument's __index__), it takes effect at once for every
        later call and frees the memory as that call returns. Cost: O(1) plus queued
        events."""
        with self._mutex:
            if self._in_call.depth:
                self._in_call.pending = True
                return
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._in_call.pending or not self._finalizer.alive

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ptr(self) -> C.c_void_p:
        if self._in_call.pending or not self._finalizer.alive:
            raise HandleError(f"invalid handle: this {self._what} is closed")
        return self._h

    def _detail(self) -> str:
        buf = C.create_string_buffer(256)
        getattr(_lib, self._last_error)(self._h, buf, len(buf), None)
        return buf.value.decode("utf-8", "replace")

    def _check(self, code: int) -> None:
        if code != Result.OK:
            raise FencelockError(code, self._detail())

    def _call(self, fn: str, *args: Any) -> None:
        with self._mutex, self._in_call:
            self._check(getattr(_lib, fn)(self._ptr(), *args))


#: How long a finalizer waits for the handle's lock before it gives up freeing it.
_FREE_WAIT = 10.0

#: Handles (with a placed service's memory) a finalizer could not free: kept here, never
#: freed, because a call of another thread may still be using them.
_ABANDONED: list = []


def _release(free: Callable[[C.c_void_p], None], handle: C.c_void_p, keep: Any,
             mutex: threading.RLock) -> None:
    # A call holds the lock for its library calls and the Python work around them (an
    # input with its drains, a whole submit, a list or a snapshot), none of which blocks,
    # so this usually waits briefly. Should it not get the lock in time (a thread stopped
    # inside a call at exit, or a very long call), the handle and a placed service's memory
    # are kept to the process's end rather than freed under that call: this frame's
    # reference to the memory is the last one, so it is parked, not dropped.
    if not mutex.acquire(timeout=_FREE_WAIT):
        _ABANDONED.append((handle, keep))
        return
    try:
        free(handle)
    finally:
        mutex.release()
    del keep  # a placed service's memory: only now may it go


def _new(fn: Callable[..., int], *args: Any) -> C.c_void_p:
    h = _P()
    code = fn(*args, C.byref(h))
    if code != Result.OK:
        raise FencelockError(code)
    return h


def _adopt(cls: Any, h: C.c_void_p, make: Callable[[], Any]) -> Any:
    """`make()`, the object of `cls` over the new handle `h`; should it raise before an
    object took `h` (a subclass whose __init__ takes other arguments), `h` is freed
    first: nothing else would (and a placed service's memory would go with the exception
    while the library still counted the service live). One that took it (its __init__
    raised after the base class's) frees it when collected, as any object does."""
    try:
        return make()
    except BaseException:
        if not getattr(h, "_taken", False):
            getattr(_lib, cls._free)(h)
        raise


class Op:
    """One input of a batch for Service.submit, made by the constructors below; each
    takes the arguments of the Service method of its name except `now` (the batch has
    one) and checks them the same way (ArgumentError, INVALID_UTF8). Immutable, reusable."""

    __slots__ = ("_fields", "_name")
    _fields: dict[str, Any]
    _name: bytes

    def __init__(self) -> None:
        raise TypeError("make an Op with Op.acquire(...), Op.release(...) and the like")

    @staticmethod
    def _make(fields: dict[str, Any], name: bytes = b"") -> "Op":
        op = object.__new__(Op)
        op._fields, op._name = fields, name
        return op

    def __repr__(self) -> str:
        f = self._fields
        args = [repr(f[k]) for k in ("ttl", "session") if k in f]
        if self._name:
            args.append(repr(self._name.decode("utf-8", "replace")))
        if "token" in f:
            args.append(repr(f["token"]))
        return f"Op.{_OP_NAMES.get(f['kind'], '?')}({', '.join(args)})"

    @staticmethod
    def open_session(ttl: int) -> "Op":
        return Op._make({"kind": 1, "ttl": _u64(ttl, "ttl")})

    @staticmethod
    def keep_alive(session: int, request: Optional[int] = None) -> "Op":
        return Op._make({"kind": 2, "session": _u64(session, "session"),
                         "request_number": _request(request)})

    @staticmethod
    def close_session(session: int, request: Optional[int] = None) -> "Op":
        return Op._make({"kind": 3, "session": _u64(session, "session"),
                         "request_number": _request(request)})

    @staticmethod
    def acquire(session: int, lock: Name, mode: Union[Mode, str, Permits] = Mode.EXCLUSIVE,
                wait: Union[Wait, str] = Wait.NONE, until: Optional[int] = None,
                request: Optional[int] = None) -> "Op":
        f: dict[str, Any] = {"kind": 4}
        # In the order the C ABI checks them: the name, then the mode, then the wait.
        raw = _name(lock, "lock")
        if isinstance(mode, Permits):
            f.update(mode=3, count=_u32(mode.count, "count"), limit=_u32(mode.limit, "limit"))
        else:
            f["mode"] = _MODE_NUM[_enum(Mode, mode, "mode")]
        w = _enum(Wait, wait, "wait")
        if (w is Wait.UNTIL) != (until is not None):
            raise ArgumentError("invalid argument: give `until` exactly when wait is 'until'")
        f.update(wait=_WAIT_NUM[w], wait_until=0 if until is None else _u64(until, "until"))
        f.update(session=_u64(session, "session"), request_number=_request(request))
        return Op._make(f, raw)

    @staticmethod
    def _named(kind: int, session: int, name: Name, request: Optional[int], what: str) -> "Op":
        raw = _name(name, what)  # first, as the methods check it
        return Op._make({"kind": kind, "session": _u64(session, "session"),
                         "request_number": _request(request)}, raw)

    @staticmethod
    def release(session: int, lock: Name, request: Optional[int] = None) -> "Op":
        return Op._named(5, session, lock, request, "lock")

    @staticmethod
    def cancel(session: int, lock: Name, request: Optional[int] = None) -> "Op":
        return Op._named(6, session, lock, request, "lock")

    @staticmethod
    def watch(session: int, lock: Name, request: Optional[int] = None) -> "Op":
        return Op._named(7, session, lock, request, "lock")

    @staticmethod
    def unwatch(session: int, lock: Name, request: Optional[int] = None) -> "Op":
        return Op._named(8, session, lock, request, "lock")

    @staticmethod
    def campaign(session: int, election: Name, request: Optional[int] = None) -> "Op":
        return Op._named(9, session, election, request, "election")

    @staticmethod
    def resign(session: int, election: Name, request: Optional[int] = None) -> "Op":
        return Op._named(10, session, election, request, "election")

    @staticmethod
    def release_hold(session: int, lock: Name, token: int,
                     request: Optional[int] = None) -> "Op":
        raw = _name(lock, "lock")  # first, as the method checks it
        return Op._make({"kind": 11, "session": _u64(session, "session"),
                         "token": _u64(token, "token"), "request_number": _request(request)},
                        raw)


_OP_NAMES = {1: "open_session", 2: "keep_alive", 3: "close_session", 4: "acquire",
             5: "release", 6: "cancel", 7: "watch", 8: "unwatch", 9: "campaign",
             10: "resign", 11: "release_hold"}


@dataclass(frozen=True)
class Batch:
    """What Service.submit answers: per op, in order, its reply (as the typed method's,
    without `.events`) or the FencelockError it was refused with (returned, not raised);
    and every event the batch queued, in order."""
    answers: tuple[Any, ...]
    events: tuple[Event, ...]


class Service(_Handle):
    """A lock service (fencelock_service): sessions, FIFO wait queues, fencing tokens,
    lock-delay, elections. Capacities are fixed for its life. Free it with close() or a
    with-block (a finalizer frees an unclosed one when it is collected).

    Service(sessions, locks, claims, lock_delay=0, max_name_len=64, max_watchers=4):
    capacities are u32 (ArgumentError outside); the core refuses a table over 2^31 - 1
    rows and a max_name_len outside 1..=64 (BAD_CONFIG). `max_watchers` is the most
    sessions watching one lock at once (0 turns watches off). Cost: O(capacity) time and
    memory.
    """

    _free = "fencelock_service_free"
    _last_error = "fencelock_service_last_error"
    _what = "service"

    def __init__(self, sessions: int, locks: int, claims: int, lock_delay: int = 0,
                 max_name_len: int = MAX_NAME_LEN, max_watchers: int = DEFAULT_MAX_WATCHERS,
                 *, _handle: Optional[C.c_void_p] = None, _memory: Any = None) -> None:
        if _handle is None:
            cfg = self._config(sessions, locks, claims, lock_delay, max_name_len,
                               max_watchers)
            _handle = _new(_lib.fencelock_service_new, C.byref(cfg))
        super().__init__(_handle, keep=_memory)

    @classmethod
    def _config(cls, sessions: int, locks: int, claims: int, lock_delay: int,
                max_name_len: int, max_watchers: int) -> _Config:
        return _Config(cls._capacity(sessions, locks, claims), _u64(lock_delay, "lock_delay"),
                       _u32(max_name_len, "max_name_len"), _u32(max_watchers, "max_watchers"))

    @staticmethod
    def _capacity(sessions: int, locks: int, claims: int) -> _Capacity:
        return _Capacity(_u32(sessions, "sessions"), _u32(locks, "locks"),
                         _u32(claims, "claims"))

    @classmethod
    def layout(cls, sessions: int, locks: int, claims: int,
               max_watchers: int = DEFAULT_MAX_WATCHERS) -> tuple[int, int]:
        """(size, alignment) of the memory a placed service of these capacities and this
        max_watchers needs (its event ring holds the most events one input can emit,
        which watches raise). Errors: BAD_CONFIG. Cost: O(1)."""
        cap, size, align = cls._capacity(sessions, locks, claims), _SIZE(), _SIZE()
        watchers = _u32(max_watchers, "max_watchers")
        if watchers == DEFAULT_MAX_WATCHERS:  # the plain layout is the default's
            code = _lib.fencelock_service_layout(C.byref(cap), C.byref(size), C.byref(align))
        else:
            code = _lib.fencelock_service_layout_watchers(C.byref(cap), watchers,
                                                          C.byref(size), C.byref(align))
        if code != Result.OK:
            raise FencelockError(code)
        return size.value, align.value

    @staticmethod
    def _place(size: int, align: int) -> tuple[Any, int]:
        # A block Python cannot allocate is the library's BAD_CONFIG, as a heap service's
        # tables it cannot allocate are, not a MemoryError or OverflowError.
        try:
            mem = C.create_string_buffer(size + align)
        except (MemoryError, OverflowError):
            raise FencelockError(Result.BAD_CONFIG,
                                 f"bad config: not enough memory for a placed service of "
                                 f"{size} bytes") from None
        at = C.addressof(mem)
        return mem, at + (-at % align)

    @classmethod
    def placed(cls, sessions: int, locks: int, claims: int, lock_delay: int = 0,
               max_name_len: int = MAX_NAME_LEN,
               max_watchers: int = DEFAULT_MAX_WATCHERS) -> Service:
        """A service inside one block of memory this object owns
        (fencelock_service_init_in): its tables are all in that block (the library keeps
        only the block's address, in its set of placed services), and its events queue
        in a fixed ring, so an input the ring has no room for is refused with
        BUFFER_TOO_SMALL (nothing changed). This wrapper drains the ring after every call,
        so that never happens here. Errors: as Service(), BAD_CONFIG also when the block
        cannot be allocated. Cost: as Service()."""
        cfg = cls._config(sessions, locks, claims, lock_delay, max_name_len, max_watchers)
        size, align = cls.layout(sessions, locks, claims, max_watchers)
        mem, at = cls._place(size, align)
        h = _new(_lib.fencelock_service_init_in, at, size, C.byref(cfg))
        return _adopt(cls, h, lambda: cls(0, 0, 0, _handle=h, _memory=mem))

    @classmethod
    def restore_placed(cls, snapshot: Union[bytes, bytearray, memoryview], sessions: int,
                       locks: int, claims: int,
                       max_watchers: int = DEFAULT_MAX_WATCHERS) -> Service:
        """`restore` into one block of memory this object owns
        (fencelock_service_restore_in; see `placed`), sized for `max_watchers`, which
        must be at least the snapshot's (else BUFFER_TOO_SMALL: the ring could not hold
        one input's events). Errors: as restore, except that BAD_CONFIG for capacities
        no block can be laid out for (a table over 2^31 - 1 rows), or a block that cannot
        be allocated, is found first, before the bytes are read (the block is laid out and
        allocated before the library is called). Cost: as restore."""
        raw = _bytes(snapshot, "snapshot")
        size, align = cls.layout(sessions, locks, claims, max_watchers)
        mem, at = cls._place(size, align)
        cap = cls._capacity(sessions, locks, claims)
        h = _new(_lib.fencelock_service_restore_in, at, size, C.byref(cap), raw, len(raw))
        return _adopt(cls, h, lambda: cls(0, 0, 0, _handle=h, _memory=mem))

    @classmethod
    def restore(cls, snapshot: Union[bytes, bytearray, memoryview], sessions: int, locks: int,
                claims: int,
                key: Optional[Union[bytes, bytearray, memoryview]] = None) -> Service:
        """A service from `snapshot()` bytes, with tables of these capacities; lock-delay
        and the name limit come from the snapshot (the bytes carry no checksum: store them
        with one of your own, as a revision lowered by damage restores). With `key` (NAME_KEY_LEN bytes, e.g.
        os.urandom(NAME_KEY_LEN); keep it secret) its indexes are keyed as the rows load
        (fencelock_service_restore_keyed): the way to restore bytes of a source that may
        choose them, whose lock names or session ids chosen to share one probe run would
        make an unkeyed restore O(n²) (set_name_key after it comes too late for that).
        Errors, in the core's order: BAD_MAGIC, UNSUPPORTED_VERSION, CORRUPT_SNAPSHOT,
        BAD_CONFIG, CAPACITY_EXCEEDED; INVALID_ARGUMENT first for a key of another length.
        Cost: O(capacity + snapshot length)."""
        raw = _bytes(snapshot, "snapshot")
        cap = cls._capacity(sessions, locks, claims)
        if key is None:
            h = _new(_lib.fencelock_service_restore, C.byref(cap), raw, len(raw))
        else:
            k = _bytes(key, "key")
            h = _new(_lib.fencelock_service_restore_keyed, C.byref(cap), raw, len(raw), k,
                     len(k))
        return _adopt(cls, h, lambda: cls(0, 0, 0, _handle=h))

    # --- inputs: each takes now first, returns the reply with the events beside it

    # Events of one input are drained in one call into this many slots; a larger burst
    # gets an array of the size the library reports (nothing is lost meanwhile).
    _EVENT_SLOTS = 8

    def _events(self) -> tuple[Event, ...]:
        slots, n = (_Output * self._EVENT_SLOTS)(), _SIZE()
        code = _lib.fencelock_service_drain_events(self._h, slots, len(slots), C.byref(n))
        if code == Result.BUFFER_TOO_SMALL:
            slots = (_Output * n.value)()
            code = _lib.fencelock_service_drain_events(self._h, slots, len(slots),
                                                        C.byref(n))
        self._check(code)
        return tuple(_event(slots[i]) for i in range(n.value))

    def drain_events(self) -> tuple[Event, ...]:
        """Every queued event, oldest first: one library call when at most 8 are
        queued, two for more (the first says how many, the second takes them all; every
        input method drains the queue itself, so this finds events only from calls made
        on the library directly). Cost: O(queued events)."""
        with self._mutex, self._in_call:
            self._ptr()
            return self._events()

    def poll_event(self) -> Optional[Event]:
        """The oldest queued event, or None when none is queued (the one-at-a-time form
        of drain_events). Cost: O(1)."""
        o = _Output()
        with self._mutex, self._in_call:
            code = _lib.fencelock_service_poll_output(self._ptr(), C.byref(o))
            if code == Result.DONE:
                return None
            self._check(code)
        return _event(o)

    def _input(self, fn: Callable[..., int], *args: Any) -> Any:
        c = _Reply()
        with self._mutex, self._in_call:
            code = fn(self._ptr(), *args, C.byref(c))
            # The refusal's message, read before the drain (whose own calls would replace it).
            detail = self._detail() if code != Result.OK else ""
            # An accepted input's reply says how many events are queued: skip the drain
            # call when none are. A refused one's reply is all zero: always drain then,
            # so a BUFFER_TOO_SMALL (the queue was past its limit: events left by calls
            # on the library directly) carries them in `.events` and a retry succeeds.
            events = self._events() if code != Result.OK or c.pending else ()
            if code != Result.OK:
                raise FencelockError(code, detail, events)
        reply = _reply_of(c)
        object.__setattr__(reply, "events", events)
        return reply

    def open_session(self, now: int, ttl: int) -> Opened:
        """Opens a session expiring `ttl` ticks after `now`. Errors: TIME_WENT_BACKWARDS,
        then BAD_TTL, DEADLINE_OVERFLOW, CAPACITY_EXCEEDED. Cost: the advance, then
        O(log sessions)."""
        return self._input(_lib.fencelock_service_open_session, _u64(now, "now"),
                           _u64(ttl, "ttl"))

    def open_labeled(self, now: int, ttl: int, label: Name) -> Opened:
        """Opens a session labelled `label` (str or UTF-8 bytes, at most MAX_LABEL_LEN
        bytes; "" = no label), shown with its session, holds, waits and in the
        HolderChanged events of its holds. Errors: INVALID_UTF8 and LABEL_TOO_LONG
        (judged before the core is given the input: nothing changes, not even time), then
        as open_session. Cost: O(label length), then as open_session."""
        raw = _name(label, "label")
        return self._input(_lib.fencelock_service_open_labeled, _u64(now, "now"),
                           _u64(ttl, "ttl"), raw, len(raw))

    def keep_alive(self, now: int, session: int, request: Optional[int] = None) -> KeptAlive:
        """Keeps a session alive until now + its ttl. Errors: TIME_WENT_BACKWARDS, then
        UNKNOWN_SESSION, STALE_REQUEST, REQUEST_REUSED, DEADLINE_OVERFLOW. Cost: the
        advance, then O(log sessions)."""
        return self._input(_lib.fencelock_service_keep_alive, _u64(now, "now"),
                           _u64(session, "session"), _request(request))

    def close_session(self, now: int, session: int, request: Optional[int] = None) -> Closed:
        """Closes a session, releasing its holds. Errors: TIME_WENT_BACKWARDS, then
        UNKNOWN_SESSION, STALE_REQUEST, REQUEST_REUSED. Cost: the advance, then O(its
        claims + events)."""
        return self._input(_lib.fencelock_service_close_session, _u64(now, "now"),
                           _u64(session, "session"), _request(request))

    def acquire(self, now: int, session: int, lock: Name,
                mode: Union[Mode, str, Permits] = Mode.EXCLUSIVE,
                wait: Union[Wait, str] = Wait.NONE, until: Optional[int] = None,
                request: Optional[int] = None) -> Union[Granted, Queued, Busy, HoldEnded,
                                                        WaitEnded]:
        """Acquires `lock` in `mode` ("exclusive", "shared", or Permits(count, limit):
        `count` of a semaphore's `limit` permits, granted in strict FIFO order, each grant
        with its own token); `wait` "none" (try-lock), "forever", or "until" with the
        deadline tick `until` (given exactly when wait is "until"). Replies Granted,
        Queued or Busy (a repeated request number also HoldEnded or WaitEnded). Errors:
        TIME_WENT_BACKWARDS, then UNKNOWN_SESSION, EMPTY_NAME, NAME_TOO_LONG,
        BAD_PERMITS, STALE_REQUEST, REQUEST_REUSED, LIMIT_MISMATCH, ALREADY_QUEUED,
        MODE_MISMATCH, CAPACITY_EXCEEDED (the core's order). Cost: the advance, then
        O(name length + log claims)."""
        # In the order the C ABI checks them: the name, then the mode, then the wait.
        raw = _name(lock, "lock")
        permits = mode if isinstance(mode, Permits) else None
        if permits is not None:
            count, limit = _u32(permits.count, "count"), _u32(permits.limit, "limit")
        else:
            m = _enum(Mode, mode, "mode")
        w = _enum(Wait, wait, "wait")
        if (w is Wait.UNTIL) != (until is not None):
            raise ArgumentError("invalid argument: give `until` exactly when wait is 'until'")
        deadline = 0 if until is None else _u64(until, "until")
        if permits is not None:
            return self._input(_lib.fencelock_service_acquire_permits, _u64(now, "now"),
                               _u64(session, "session"), raw, len(raw), count, limit,
                               _WAIT_NUM[w], deadline, _request(request))
        return self._input(_lib.fencelock_service_acquire, _u64(now, "now"),
                           _u64(session, "session"), raw, len(raw), _MODE_NUM[m],
                           _WAIT_NUM[w], deadline, _request(request))

    def _named(self, fn: Callable[..., int], now: int, session: int, name: Name,
               request: Optional[int], what: str) -> Any:
        raw = _name(name, what)
        return self._input(fn, _u64(now, "now"), _u64(session, "session"), raw, len(raw),
                           _request(request))

    def release(self, now: int, session: int, lock: Name,
                request: Optional[int] = None) -> Released:
        """Releases a held lock; the head of its queue is granted (GrantedEvent). Errors:
        TIME_WENT_BACKWARDS, then UNKNOWN_SESSION, EMPTY_NAME, NAME_TOO_LONG,
        STALE_REQUEST, REQUEST_REUSED, NOT_HOLDER. Cost: the advance, then O(name length +
        log claims + events)."""
        return self._named(_lib.fencelock_service_release, now, session, lock, request, "lock")

    def release_hold(self, now: int, session: int, lock: Name, token: int,
                     request: Optional[int] = None) -> Released:
        """Releases the session's hold on `lock` only if it is the hold granted with
        `token`, exactly as release would (the same Released reply and events); if the
        session holds the lock with another token (it took the lock again after that hold
        ended), that hold stays and the call raises NOT_HOLDER. For a caller that names a
        hold by its token (read from holders(), or a retry without a request number), so
        that a repeat cannot release the session's next hold. A request number covers the
        token: the same number on a release of the lock, or a release_hold with another
        token, is REQUEST_REUSED; its repeat replays Released. Errors: as release
        (NOT_HOLDER also for another token). Cost: as release."""
        raw = _name(lock, "lock")
        return self._input(_lib.fencelock_service_release_hold, _u64(now, "now"),
                           _u64(session, "session"), raw, len(raw), _u64(token, "token"),
                           _request(request))

    def cancel(self, now: int, session: int, lock: Name,
               request: Optional[int] = None) -> Cancelled:
        """Withdraws a queued acquire. Errors: as release, with NOT_QUEUED. Cost: as
        release."""
        return self._named(_lib.fencelock_service_cancel, now, session, lock, request, "lock")

    def watch(self, now: int, session: int, lock: Name,
              request: Optional[int] = None) -> Watching:
        """Starts watching the holders of `lock`: Watching(holders), with one
        HolderChanged ("holding") per current holder in `.events`; later inputs carry one
        HolderChanged per holder change of the lock, right after the event that tells the
        holder, until the session unwatches, closes or expires. A watch takes a claim row.
        Errors: TIME_WENT_BACKWARDS, then UNKNOWN_SESSION, EMPTY_NAME, NAME_TOO_LONG,
        STALE_REQUEST, REQUEST_REUSED, ALREADY_WATCHING, CAPACITY_EXCEEDED (the lock's
        max_watchers, then claims, then locks). Cost: the advance, then O(name length +
        holders of the lock)."""
        return self._named(_lib.fencelock_service_watch, now, session, lock, request, "lock")

    def unwatch(self, now: int, session: int, lock: Name,
                request: Optional[int] = None) -> Unwatched:
        """Stops watching `lock`. Errors: as release, with NOT_WATCHING. Cost: the
        advance, then O(name length + log claims)."""
        return self._named(_lib.fencelock_service_unwatch, now, session, lock, request,
                           "lock")

    def campaign(self, now: int, session: int, election: Name,
                 request: Optional[int] = None
                 ) -> Union[Granted, Queued, HoldEnded, WaitEnded]:
        """Stands `session` in `election` (an exclusive acquire waiting forever): Granted =
        it leads (the token is its epoch), Queued = it waits in line; a repeated request
        number whose claim has ended since replies HoldEnded or WaitEnded, as acquire does.
        Errors and cost: as acquire."""
        return self._named(_lib.fencelock_service_campaign, now, session, election, request,
                           "election")

    def resign(self, now: int, session: int, election: Name,
               request: Optional[int] = None) -> Union[Released, Cancelled]:
        """Withdraws from `election`: Released if it led, Cancelled if it waited. Errors:
        as release / cancel. Cost: as release."""
        return self._named(_lib.fencelock_service_resign, now, session, election, request,
                           "election")

    def submit(self, now: int, ops: Iterable[Op]) -> Batch:
        """Applies `ops` in order at `now` in one library call
        (fencelock_service_submit): each exactly as its method would, refusals per op —
        a refused op's answer is its FencelockError, and the batch goes on. Cheaper than
        one call per input: Python's per-call cost is paid once. When the event queue has
        no room for an op, the events so far are drained and the rest is submitted again,
        so every op is applied. Errors (raised): TIME_WENT_BACKWARDS (nothing applied),
        ArgumentError for an element that is not an Op, HandleError on a closed handle,
        BUFFER_TOO_SMALL should an op not
        fit even an empty queue (nothing applied, nothing to drain), PANIC (the handle is
        poisoned). Cost: O(ops + events)."""
        t = _u64(now, "now")
        ops = list(ops)
        for o in ops:
            if not isinstance(o, Op):
                raise ArgumentError(
                    f"invalid argument: every op must be an Op, not {type(o).__name__}")
        n = len(ops)
        arr, replies, results = (_Op * n)(), (_Reply * n)(), (C.c_uint32 * n)()
        for i, o in enumerate(ops):
            c = arr[i]
            for k, v in o._fields.items():
                setattr(c, k, v)
            # The name's bytes stay alive with `ops` until the call returns.
            c.lock, c.lock_len = o._name, len(o._name)
        answers: list[Any] = []
        events: list[Event] = []
        with self._mutex, self._in_call:
            # Read once: a close made from inside this call (a signal handler, a __del__
            # the collector runs between two rounds) takes effect for later calls, and
            # must not cut this one short with ops applied and events taken.
            h = self._ptr()
            at = 0
            while True:
                done = _SIZE()
                code = _lib.fencelock_service_submit(
                    h, t, C.addressof(arr) + at * C.sizeof(_Op), n - at,
                    C.addressof(replies) + at * C.sizeof(_Reply),
                    C.addressof(results) + at * C.sizeof(C.c_uint32), C.byref(done))
                for i in range(at, at + done.value):
                    answers.append(_reply_of(replies[i]) if results[i] == Result.OK
                                   else FencelockError(results[i]))
                at += done.value
                detail = self._detail() if code != Result.OK else ""
                drained = self._events()
                events.extend(drained)
                # Stopped for the queue's room: drained now, so the rest fits (an empty
                # queue has room for any input). Stopped with nothing to drain and
                # nothing applied would repeat for ever: raised below instead.
                if code == Result.BUFFER_TOO_SMALL and (done.value or drained):
                    continue
                if code != Result.OK:
                    raise FencelockError(code, detail, tuple(events))
                break
        return Batch(tuple(answers), tuple(events))

    def tick(self, now: int) -> Ticked:
        """Advances time to `now` (expiries, wait timeouts, the end of lock-delays, grants)
        — what every input does first. Call it when poll_timeout() comes due. Errors:
        TIME_WENT_BACKWARDS. Cost: O(1) with nothing due, else O(log n) per deadline."""
        now = _u64(now, "now")
        with self._mutex, self._in_call:
            code = _lib.fencelock_service_tick(self._ptr(), now)
            detail = self._detail() if code != Result.OK else ""
            events = self._events()
            if code != Result.OK:
                raise FencelockError(code, detail, events)
        return Ticked(now=now, events=events)

    def handle_frame(self, frame: Union[bytes, bytearray, memoryview]) -> Reply:
        """One postcard input frame in (its `now` inside); its reply out, with the reply's
        frame in `.frame` and the events as frames (`[u16 LE length][frame]` records
        split) in `.event_frames` (`.events` is empty: a frame host gets frames). Errors:
        BAD_FRAME (nothing changed), then the input's. Cost: O(frame length) + the input's.
        """
        raw = _bytes(frame, "frame")
        c, out, n = _Reply(), C.create_string_buffer(MAX_FRAME_LEN), _SIZE()
        with self._mutex, self._in_call:
            code = _lib.fencelock_service_handle_frame(self._ptr(), raw, len(raw),
                                                       C.byref(c), out, MAX_FRAME_LEN,
                                                       C.byref(n))
            detail = self._detail() if code != Result.OK else ""
            frames = self._drain_frames()
            if code != Result.OK:
                raise FencelockError(code, detail, event_frames=frames)
        reply = _reply_of(c)
        object.__setattr__(reply, "frame", out.raw[:n.value])
        object.__setattr__(reply, "event_frames", frames)
        return reply

    def _drain_frames(self) -> tuple[bytes, ...]:
        need = _SIZE()
        code = _lib.fencelock_service_drain_frames(self._h, None, 0, C.byref(need))
        if code == Result.OK:
            return ()
        if code != Result.BUFFER_TOO_SMALL:
            raise FencelockError(code, self._detail())
        buf = C.create_string_buffer(need.value)
        self._check(_lib.fencelock_service_drain_frames(self._h, buf, need.value,
                                                        C.byref(need)))
        raw, frames, at = buf.raw[:need.value], [], 0
        while at < len(raw):
            n = int.from_bytes(raw[at:at + _FRAME_PREFIX_LEN], "little")
            at += _FRAME_PREFIX_LEN
            frames.append(raw[at:at + n])
            at += n
        return tuple(frames)

    def drain_frames(self) -> tuple[bytes, ...]:
        """The queued events as postcard frames, oldest first (every input method drains
        the queue itself, so this finds events only from a placed service's refusals or
        calls made on the library directly). Cost: O(queued events)."""
        with self._mutex, self._in_call:
            self._ptr()
            return self._drain_frames()

    # --- queries: never change anything

    def _get(self, fn: str, ctype: Any, *args: Any) -> Any:
        v = ctype()
        self._call(fn, *args, C.byref(v))
        return v

    def now(self) -> int:
        """The current tick. Cost: O(1)."""
        return self._get("fencelock_service_now", _U64).value

    def poll_timeout(self) -> Optional[int]:
        """The next tick at which something is due, or None. Cost: O(1)."""
        due, at = C.c_bool(), _U64()
        self._call("fencelock_service_poll_timeout", C.byref(due), C.byref(at))
        return at.value if due.value else None

    def revision(self) -> int:
        """The highest token granted so far (0 before the first grant). Cost: O(1)."""
        return self._get("fencelock_service_revision", _U64).value

    def raise_revision(self, floor: int) -> int:
        """Raises the fencing revision to at least `floor` (a lower one changes nothing),
        so the next grant's token is above it; for a service recovered from a copy that
        may have missed grants. Returns the revision now. Not an input: no `now`, no
        events. Errors: BAD_CONFIG (a floor above 2^62; nothing changes). Cost: O(1)."""
        v = _U64()
        self._call("fencelock_service_raise_revision", _u64(floor, "floor"), C.byref(v))
        return v.value

    def pending(self) -> int:
        """Events queued and not yet drained (0 after every method here). Cost: O(1)."""
        return self._get("fencelock_service_pending", _SIZE).value

    def event_limit(self) -> int:
        """The most events the library's queue may hold: twice the core's bound at
        capacity by default (2 x (sessions + 2 x claims + (2 x claims + 1) x
        min(max_watchers, claims))), or what set_event_limit set; a placed service's
        ring size. Every method here drains the queue after its call, so it stays empty
        between calls; an input the queue has no room for is refused with
        BUFFER_TOO_SMALL (only when events were left queued by calls made on the library
        directly). Cost: O(1)."""
        return self._get("fencelock_service_event_limit", _SIZE).value

    def set_event_limit(self, limit: int) -> None:
        """Sets event_limit(): at least the core's bound at capacity (sessions + 2 x
        claims + (2 x claims + 1) x min(max_watchers, claims)), so an empty queue has
        room for any input; the largest size_t lets it grow as memory allows. Not kept in a
        snapshot. Errors: INVALID_ARGUMENT (below the bound, or any size but its own for
        a placed service; nothing changes). Cost: O(1)."""
        self._call("fencelock_service_set_event_limit", _size(limit, "limit"))

    def set_name_key(self, key: Optional[Union[bytes, bytearray, memoryview]] = None) -> None:
        """Keys the service's indexes with a secret (`key`: NAME_KEY_LEN bytes; by default
        os.urandom's), so that lock names others choose cannot be picked to share a probe
        run and slow every call; the session and claim indexes are keyed too (a
        snapshot's author chooses its session ids: restore such bytes with restore's
        `key`). Nothing observable changes (replies, events, queries, snapshots); not kept
        in a snapshot: key a restored service again. Errors: INVALID_ARGUMENT (another
        length; nothing changes). Cost: O(capacity of the three tables)."""
        raw = _name_key(key)
        self._call("fencelock_service_set_name_key", raw, len(raw))

    def is_name_keyed(self) -> bool:
        """Whether set_name_key was called. Cost: O(1)."""
        return self._get("fencelock_service_is_name_keyed", C.c_bool).value

    def max_events(self) -> int:
        """The most events one input can emit now (open sessions + 2 × holds and waits, plus
        the watchers' share: docs/SPEC.md §4). Cost: O(1)."""
        return self._get("fencelock_service_max_events", _SIZE).value

    def config(self) -> Config:
        """The configuration, capacities included. Cost: O(1)."""
        c = self._get("fencelock_service_config", _Config)
        cap = Capacity(c.capacity.sessions, c.capacity.locks, c.capacity.claims)
        return Config(cap, c.lock_delay, c.max_name_len, c.max_watchers)

    def capacity(self) -> Capacity:
        """The capacities (as config().capacity). Cost: O(1)."""
        return self.config().capacity

    def usage(self) -> Usage:
        """Rows in use per table. Cost: O(1)."""
        u = self._get("fencelock_service_usage", _Usage)
        return Usage(u.sessions, u.locks, u.claims)

    def session(self, session: int) -> Optional[SessionInfo]:
        """A live session's state, or None if it is not open. Cost: O(its claims)."""
        s = _SessionInfo()
        with self._mutex, self._in_call:
            sid = _u64(session, "session")
            code = _lib.fencelock_service_session(self._ptr(), sid,
                                                  C.byref(s))
            if code == Result.UNKNOWN_SESSION:
                return None
            self._check(code)
        return SessionInfo(s.id, s.ttl, s.expires_at, s.last_request or None, s.holds, s.waits,
                           _text(s.label, s.label_len), s.watches)

    def _list(self, fn: str, ctype: Any, *args: Any) -> list[Any]:
        with self._mutex, self._in_call:
            h, count = self._ptr(), _SIZE()
            code = getattr(_lib, fn)(h, *args, None, 0, C.byref(count))
            if code not in (Result.OK, Result.BUFFER_TOO_SMALL):
                self._check(code)
            items = (ctype * max(count.value, 1))()
            self._check(getattr(_lib, fn)(h, *args, items, count.value, C.byref(count)))
            return list(items[:count.value])

    def sessions(self) -> list[int]:
        """Open session ids in id order. Cost: O(sessions)."""
        return [int(s) for s in self._list("fencelock_service_sessions", _U64)]

    def locks(self) -> list[str]:
        """Lock entries (held, awaited, watched or in lock-delay) in creation order. Cost:
        O(locks)."""
        return [_text(n.name, n.len) for n in self._list("fencelock_service_locks", _Name)]

    def holders(self, lock: Name) -> list[Holder]:
        """The holders of `lock` in grant order (none if free or unknown). Cost: O(name +
        holders)."""
        raw = _name(lock, "lock")
        return [Holder(h.session, h.token, _mode_of(h), _text(h.label, h.label_len))
                for h in self._list("fencelock_service_holders", _Holder, raw, len(raw))]

    def hold(self, session: int, lock: Name) -> Optional[Holder]:
        """`session`'s hold of `lock`, or None: no such hold (a wait or a watch is none),
        or a session or lock that is not open. Reads one hold, where `holders` lists every
        holder of a semaphore. Cost: O(name length)."""
        raw, held, h = _name(lock, "lock"), C.c_bool(), _Holder()
        self._call("fencelock_service_hold", _u64(session, "session"), raw, len(raw),
                   C.byref(held), C.byref(h))
        if not held.value:
            return None
        return Holder(h.session, h.token, _mode_of(h), _text(h.label, h.label_len))

    def waiters(self, lock: Name) -> list[Waiter]:
        """The queue of `lock`, head first. Cost: O(name + waiters)."""
        raw = _name(lock, "lock")
        return [Waiter(w.session, _mode_of(w), w.deadline if w.has_deadline else None,
                       _text(w.label, w.label_len))
                for w in self._list("fencelock_service_waiters", _Waiter, raw, len(raw))]

    def permits(self, lock: Name) -> Optional[PermitsInUse]:
        """The permits of the semaphore `lock` (in use, limit), or None when it is not a
        live semaphore (a plain lock, an idle or unknown name). Cost: O(name length)."""
        raw, live, p = _name(lock, "lock"), C.c_bool(), _Permits()
        self._call("fencelock_service_permits", raw, len(raw), C.byref(live), C.byref(p))
        return PermitsInUse(p.in_use, p.limit) if live.value else None

    def lock_delay_until(self, lock: Name) -> Optional[int]:
        """The tick until which `lock` is in lock-delay, or None. Cost: O(name length)."""
        raw, active, until = _name(lock, "lock"), C.c_bool(), _U64()
        self._call("fencelock_service_lock_delay_until", raw, len(raw), C.byref(active),
                   C.byref(until))
        return until.value if active.value else None

    def leader(self, election: Name) -> Optional[Leader]:
        """The leader of `election` and its epoch, or None. Cost: O(name length)."""
        raw, has, lead = _name(election, "election"), C.c_bool(), _Leader()
        self._call("fencelock_service_leader", raw, len(raw), C.byref(has), C.byref(lead))
        return Leader(lead.session, lead.epoch) if has.value else None

    def snapshot(self) -> bytes:
        """The canonical snapshot of the state (not the queued events). Cost:
        O(sessions + locks + claims)."""
        with self._mutex, self._in_call:
            h, need = self._ptr(), _SIZE()
            self._check(_lib.fencelock_service_snapshot_len(h, C.byref(need)))
            buf = C.create_string_buffer(max(need.value, 1))
            self._check(_lib.fencelock_service_snapshot(h, buf, need.value, C.byref(need)))
            return buf.raw[:need.value]


class Gate(_Handle):
    """A fence gate (fencelock_gate): the resource's check of fencing tokens — the highest
    token seen per resource; a lower one is refused (STALE). Gate(capacity): resources it
    can ever guard (entries are never evicted). Errors: BAD_CONFIG (over 2^31 - 1). Cost:
    O(capacity), about 100 bytes per resource."""

    _free = "fencelock_gate_free"
    _last_error = "fencelock_gate_last_error"
    _what = "gate"

    def __init__(self, capacity: int, *, _handle: Optional[C.c_void_p] = None) -> None:
        if _handle is None:
            _handle = _new(_lib.fencelock_gate_new, _size(capacity, "capacity"))
        super().__init__(_handle)

    @classmethod
    def restore(cls, snapshot: Union[bytes, bytearray, memoryview], capacity: int,
                key: Optional[Union[bytes, bytearray, memoryview]] = None) -> Gate:
        """A gate from `snapshot()` bytes (they carry no checksum: store them with one of
        your own); with `key` (NAME_KEY_LEN bytes), its index keyed
        as the rows load (fencelock_gate_restore_keyed), for bytes of a source that may
        choose the names. Errors: BAD_MAGIC, UNSUPPORTED_VERSION, CORRUPT_SNAPSHOT,
        CAPACITY_EXCEEDED, BAD_CONFIG; INVALID_ARGUMENT first for a key of another length.
        Cost: O(capacity + resources)."""
        raw = _bytes(snapshot, "snapshot")
        cap = _size(capacity, "capacity")
        if key is None:
            h = _new(_lib.fencelock_gate_restore, cap, raw, len(raw))
        else:
            k = _bytes(key, "key")
            h = _new(_lib.fencelock_gate_restore_keyed, cap, raw, len(raw), k, len(k))
        return _adopt(cls, h, lambda: cls(0, _handle=h))

    def admit(self, resource: Name, token: int) -> None:
        """Admits a write carrying `token`: it becomes the highest seen, or STALE is raised
        (its detail names both tokens). Errors: STALE, ZERO_TOKEN, EMPTY_NAME,
        NAME_TOO_LONG, INVALID_UTF8, CAPACITY_EXCEEDED. Cost: O(name length)."""
        raw = _name(resource, "resource")
        self._call("fencelock_gate_admit", raw, len(raw), _u64(token, "token"))

    def check(self, resource: Name, token: int) -> None:
        """Checks `token` as admit does, recording nothing. Cost: O(name length)."""
        raw = _name(resource, "resource")
        self._call("fencelock_gate_check", raw, len(raw), _u64(token, "token"))

    def highest(self, resource: Name) -> Optional[int]:
        """The highest token admitted for `resource`, or None. Cost: O(name length)."""
        raw, seen, top = _name(resource, "resource"), C.c_bool(), _U64()
        self._call("fencelock_gate_highest", raw, len(raw), C.byref(seen), C.byref(top))
        return top.value if seen.value else None

    def set_name_key(self, key: Optional[Union[bytes, bytearray, memoryview]] = None) -> None:
        """Keys the resource-name index with a secret (`key`: NAME_KEY_LEN bytes; by
        default os.urandom's), so that resource names others choose cannot be picked to
        share a probe run and slow every check. Nothing else changes; not kept in a
        snapshot. Errors: INVALID_ARGUMENT (another length; nothing changes). Cost:
        O(capacity)."""
        raw = _name_key(key)
        self._call("fencelock_gate_set_name_key", raw, len(raw))

    def is_name_keyed(self) -> bool:
        """Whether set_name_key was called. Cost: O(1)."""
        keyed = C.c_bool()
        self._call("fencelock_gate_is_name_keyed", C.byref(keyed))
        return keyed.value

    def entries(self) -> dict[str, int]:
        """Every resource with its highest token, in the order first admitted. Cost:
        O(resources)."""
        with self._mutex, self._in_call:
            h, count = self._ptr(), _SIZE()
            code = _lib.fencelock_gate_entries(h, None, 0, C.byref(count))
            if code not in (Result.OK, Result.BUFFER_TOO_SMALL):
                self._check(code)
            items = (_Name * max(count.value, 1))()
            self._check(_lib.fencelock_gate_entries(h, items, count.value, C.byref(count)))
            return {_text(n.name, n.len): n.highest for n in items[:count.value]}

    def snapshot(self) -> bytes:
        """The gate's snapshot bytes. Cost: O(resources)."""
        with self._mutex, self._in_call:
            h, need = self._ptr(), _SIZE()
            code = _lib.fencelock_gate_snapshot(h, None, 0, C.byref(need))
            if code not in (Result.OK, Result.BUFFER_TOO_SMALL):
                self._check(code)
            buf = C.create_string_buffer(max(need.value, 1))
            self._check(_lib.fencelock_gate_snapshot(h, buf, need.value, C.byref(need)))
            return buf.raw[:need.value]


class Keeper(_Handle):
    """A session keeper (fencelock_keeper): the client's own view of its lease — when to
    send a keep-alive, whether it may still act. Keeper(ttl, interval, margin). Errors:
    BAD_CONFIG unless 0 < interval < ttl - margin and 0 < margin < ttl. Cost: O(1)."""

    _free = "fencelock_keeper_free"
    _last_error = "fencelock_keeper_last_error"
    _what = "keeper"

    def __init__(self, ttl: int, interval: int, margin: int) -> None:
        super().__init__(_new(_lib.fencelock_keeper_new, _u64(ttl, "ttl"),
                              _u64(interval, "interval"), _u64(margin, "margin")))

    def keep_alive_sent(self, at: int) -> None:
        """Records a keep-alive (or the open) sent at `at`. Errors: TIME_WENT_BACKWARDS.
        Cost: O(1)."""
        self._call("fencelock_keeper_keep_alive_sent", _u64(at, "at"))

    def keep_alive_acked(self, sent_at: int) -> bool:
        """Records the acknowledgement of the keep-alive sent at `sent_at`; whether it
        extended the lease. Errors: UNKNOWN_KEEP_ALIVE (no such send among the last
        KEEPER_MEMORY). Cost: O(1)."""
        return self._get("fencelock_keeper_keep_alive_acked", _u64(sent_at, "sent_at"))

    def _get(self, fn: str, *args: Any) -> bool:
        v = C.c_bool()
        self._call(fn, *args, C.byref(v))
        return v.value

    def session_lost(self) -> None:
        """The service said the session expired or closed: the lease is gone. Cost: O(1)."""
        self._call("fencelock_keeper_session_lost")

    def lease(self, now: int) -> Lease:
        """The lease at `now`. Cost: O(1)."""
        c = _Lease()
        self._call("fencelock_keeper_lease", _u64(now, "now"), C.byref(c))
        state = _LEASE_OF[c.state]
        return Lease(state, c.until if state is LeaseState.SAFE else None,
                     c.expires_at if state is LeaseState.JEOPARDY else None)

    def may_act(self, now: int) -> bool:
        """Whether the lease is SAFE at `now`: check before each action. Cost: O(1)."""
        return self._get("fencelock_keeper_may_act", _u64(now, "now"))

    def next_keep_alive(self, now: int) -> int:
        """When the next keep-alive is due. Cost: O(1)."""
        at = _U64()
        self._call("fencelock_keeper_next_keep_alive", _u64(now, "now"), C.byref(at))
        return at.value

    def poll_timeout(self, now: int) -> Optional[int]:
        """The next instant to wake (maybe at or before `now`: send at once), or None once
        the session is lost. Cost: O(1)."""
        due, at = C.c_bool(), _U64()
        self._call("fencelock_keeper_poll_timeout", _u64(now, "now"), C.byref(due),
                   C.byref(at))
        return at.value if due.value else None
