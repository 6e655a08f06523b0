"""The Python package over the C library: the GC-pause story, the whole ABI with Python
types, and hostile input (integers that do not fit, names that are not names, bytes-like
objects, closed handles, unclosed handles, short buffers).

Run (scripts/test-ffi.sh does): FENCELOCK_LIB=target/debug/libfencelock.so \
    python -m pytest ffi/python/tests   (with ffi/python on sys.path, or the wheel installed)
"""

import ctypes as C
import ctypes.util
import gc
import os
import re
import subprocess
import sys
import threading

import pytest

import fencelock as fl

JOB = "jobs/reindex"
HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "..", "include", "fencelock.h")


def refused(code, fn, *args, **kw):
    with pytest.raises(fl.FencelockError) as e:
        fn(*args, **kw)
    assert e.value.code == code, repr(e.value)
    return e.value


# ------------------------------------------------------------------------- the story

def test_gc_pause_story():
    with fl.Service(8, 8, 16) as svc:
        # Burn 33 tokens so A's grant is token 34, as in Martin Kleppmann's "How to do
        # distributed locking".
        warm = svc.open_session(0, 1000).session
        for t in range(1, 34):
            got = svc.acquire(0, warm, "warmup")
            assert got == fl.Granted(mode=fl.Mode.EXCLUSIVE, token=t)
            assert got.events == ()
            assert svc.release(0, warm, "warmup") == fl.Released(token=t)
        assert svc.close_session(0, warm) == fl.Closed()

        a = svc.open_session(0, 10)
        assert a == fl.Opened(session=2, expires_at=10) and a.kind == "opened"
        a = a.session
        b = svc.open_session(0, 10).session
        assert svc.acquire(0, a, JOB) == fl.Granted(mode="exclusive", token=34)
        queued = svc.acquire(0, b, JOB, wait="forever")
        assert (queued.kind, queued.mode, queued.position) == ("queued", fl.Mode.EXCLUSIVE, 1)
        # A pauses; B's keep-alives arrive at 3, 6, 9 and are applied at their own times.
        for t in (3, 6, 9):
            got = svc.keep_alive(t, b)
            assert got == fl.KeptAlive(expires_at=t + 10) and got.events == ()
        ticked = svc.tick(10)
        assert ticked == fl.Ticked(now=10)
        assert ticked.events == (
            fl.SessionExpired(session=a),
            fl.ReleasedEvent(session=a, lock=JOB, token=34, reason=fl.Reason.EXPIRED),
            fl.GrantedEvent(session=b, lock=JOB, mode=fl.Mode.EXCLUSIVE, token=35),
        )
        assert [e.kind for e in ticked.events] == ["session_expired", "released", "granted"]
        assert svc.holders(JOB) == [fl.Holder(session=b, token=35, mode=fl.Mode.EXCLUSIVE)]
        assert svc.revision() == 35

    with fl.Gate(4) as gate:
        gate.admit("storage", 35)
        stale = refused(401, gate.admit, "storage", 34)
        assert stale.result is fl.Result.STALE and stale.kind == "stale"
        assert str(stale) == "stale: token 34 is lower than the highest seen, token 35"
        assert gate.highest("storage") == 35

    # A's keeper (ttl 10, keep-alive every 3, margin 2) would have stopped it first.
    with fl.Keeper(10, 3, 2) as keeper:
        keeper.keep_alive_sent(0)
        assert keeper.keep_alive_acked(0) is True
        assert keeper.next_keep_alive(1) == 3
        assert keeper.may_act(1) is True
        assert keeper.lease(1) == fl.Lease(fl.LeaseState.SAFE, until=8)
        assert keeper.lease(8) == fl.Lease(fl.LeaseState.JEOPARDY, expires_at=10)
        assert keeper.lease(26).state == "expired" and keeper.may_act(26) is False
        unknown = refused(601, keeper.keep_alive_acked, 4)
        assert unknown.kind == "unknown_keep_alive" and "4" in str(unknown)


def test_a_refused_input_keeps_the_advance():
    with fl.Service(4, 4, 8) as svc:
        a = svc.open_session(0, 5).session
        b = svc.open_session(0, 100).session
        svc.acquire(0, a, "l")
        svc.acquire(0, b, "l", wait="forever")
        e = refused(101, svc.release, 7, a, "l")  # A expired at 5, in the advance to 7
        assert [o.kind for o in e.events] == ["session_expired", "released", "granted"]
        assert e.events[2] == fl.GrantedEvent(session=b, lock="l", mode="exclusive", token=2)
        assert svc.now() == 7 and svc.pending() == 0


# ------------------------------------------------------------------- the whole ABI

def test_queries_elections_waits_and_cancel():
    with fl.Service(4, 4, 8, lock_delay=3) as svc:
        assert svc.config() == fl.Config(fl.Capacity(4, 4, 8), lock_delay=3, max_name_len=64,
                                        max_watchers=fl.DEFAULT_MAX_WATCHERS)
        assert svc.capacity() == fl.Capacity(4, 4, 8)
        a = svc.open_session(0, 10).session
        b = svc.open_session(0, 50).session
        assert svc.sessions() == [a, b]
        assert svc.campaign(0, a, "leader", request=1) == fl.Granted(mode="exclusive", token=1)
        assert svc.campaign(0, b, "leader") == fl.Queued(mode="exclusive", position=1)
        assert svc.leader("leader") == fl.Leader(session=a, epoch=1)
        assert svc.acquire(1, b, "r", mode="shared") == fl.Granted(mode="shared", token=2)
        assert svc.acquire(1, a, "r", wait="until", until=5) == fl.Queued(
            mode="exclusive", position=1)
        assert svc.waiters("r") == [fl.Waiter(session=a, mode="exclusive", deadline=5)]
        assert svc.waiters("leader") == [fl.Waiter(session=b, mode="exclusive", deadline=None)]
        assert svc.cancel(2, a, "r") == fl.Cancelled()
        assert svc.acquire(2, a, "r") == fl.Busy()
        assert svc.session(a) == fl.SessionInfo(id=a, ttl=10, expires_at=10, last_request=1,
                                                holds=1, waits=0, watches=0)
        assert svc.session(99) is None
        assert svc.usage() == fl.Usage(sessions=2, locks=2, claims=3)
        assert svc.max_events() == 2 + 2 * 3
        assert svc.locks() == ["leader", "r"]
        assert svc.poll_timeout() == 10
        # A repeat of request 1 replays the campaign's reply.
        assert svc.campaign(3, a, "leader", request=1) == fl.Granted(mode="exclusive", token=1)
        ended = svc.tick(10)  # A expires; its election is in lock-delay until 13
        assert fl.SessionExpired(session=a) in ended.events
        assert svc.lock_delay_until("leader") == 13
        assert svc.leader("leader") is None
        grant = svc.tick(13).events
        assert grant == (fl.GrantedEvent(session=b, lock="leader", mode="exclusive", token=3),)
        assert svc.resign(14, b, "leader") == fl.Released(token=3)
        assert svc.lock_delay_until("leader") is None
        # A campaign retried (its request number repeated) after a resign made without a
        # request number answers that its claim ended, as an acquire's retry does.
        assert svc.campaign(15, b, "leader", request=7) == fl.Granted(
            mode="exclusive", token=4)
        assert svc.resign(15, b, "leader") == fl.Released(token=4)
        assert svc.campaign(16, b, "leader", request=7) == fl.HoldEnded(token=4)


def test_release_hold_releases_only_the_hold_of_its_token():
    with fl.Service(4, 4, 8) as svc, fl.Service(4, 4, 8) as twin:
        for s in (svc, twin):
            a = s.open_session(0, 100).session
            b = s.open_session(0, 100).session
            assert s.acquire(0, a, "l") == fl.Granted(mode="exclusive", token=1)
            s.acquire(0, b, "l", wait="forever")
        # The hold of token 1: released exactly as release does it (reply, events, state).
        got = svc.release_hold(1, a, "l", 1)
        assert got == twin.release(1, a, "l") == fl.Released(token=1)
        assert got.events == (fl.GrantedEvent(session=b, lock="l", mode="exclusive",
                                              token=2),)
        assert svc.snapshot() == twin.snapshot()
        # b releases and a takes the lock again: token 3 is its hold now, 1 is over.
        svc.release(2, b, "l")
        assert svc.acquire(2, a, "l") == fl.Granted(mode="exclusive", token=3)
        before = svc.snapshot()
        e = refused(fl.Result.NOT_HOLDER, svc.release_hold, 2, a, "l", 1)
        assert e.kind == "not_holder" and e.events == []
        refused(fl.Result.NOT_HOLDER, svc.release_hold, 2, b, "l", 3)  # another's token
        # The session and name come first, as for release.
        refused(fl.Result.UNKNOWN_SESSION, svc.release_hold, 2, 99, "", 3)
        refused(fl.Result.EMPTY_NAME, svc.release_hold, 2, a, "", 3)
        assert svc.snapshot() == before, "a refused release_hold changed the service"
        assert [(h.session, h.token) for h in svc.holders("l")] == [(a, 3)]
        assert svc.release_hold(2, a, "l", 3) == fl.Released(token=3)
        assert svc.holders("l") == []
        # A numbered call replays, and its number covers the token.
        svc.acquire(3, a, "l")  # token 4
        assert svc.release_hold(3, a, "l", 4, request=7) == fl.Released(token=4)
        assert svc.acquire(3, a, "l") == fl.Granted(mode="exclusive", token=5)
        assert svc.release_hold(3, a, "l", 4, request=7) == fl.Released(token=4)
        assert [h.token for h in svc.holders("l")] == [5], "the replay released nothing"
        refused(fl.Result.REQUEST_REUSED, svc.release_hold, 3, a, "l", 5, request=7)
        refused(fl.Result.REQUEST_REUSED, svc.release, 3, a, "l", request=7)
        # What cannot cross the ABI is refused before it: nothing changes, not even time.
        before = svc.snapshot()
        for bad in (-1, 2 ** 64, True, 1.0, "5"):
            with pytest.raises(fl.ArgumentError):
                svc.release_hold(9, a, "l", bad)
        with pytest.raises(fl.ArgumentError):
            svc.release_hold(9, a, "l", 5, request=0)
        refused(fl.Result.INVALID_UTF8, svc.release_hold, 9, a, "\ud800", 5)
        assert svc.snapshot() == before and svc.now() == 3
        # A batch op: its token names the hold too.
        got = svc.submit(4, [fl.Op.release_hold(a, "l", 4), fl.Op.release_hold(a, "l", 5)])
        assert isinstance(got.answers[0], fl.FencelockError)
        assert got.answers[0].code == fl.Result.NOT_HOLDER
        assert got.answers[1] == fl.Released(token=5)
        assert svc.holders("l") == []
        assert repr(fl.Op.release_hold(a, "l", 5)) == f"Op.release_hold({a}, 'l', 5)"
        if C.sizeof(C.c_void_p) == 8:  # the header's fencelock_op, `token` appended last
            assert (C.sizeof(fl._Op), fl._Op.token.offset) == (80, 72)
        with pytest.raises(fl.ArgumentError):
            fl.Op.release_hold(a, "l", -1)


def test_frames_in_and_out():
    with fl.Service(4, 4, 8) as svc:
        # OpenSession{now 0, ttl 10} -> Opened{session 1, expires_at 10}
        got = svc.handle_frame(bytes([0, 0, 10]))
        assert got == fl.Opened(session=1, expires_at=10) and got.frame == bytes([0, 1, 10])
        svc.handle_frame(bytearray([0, 0, 10]))  # session 2; bytes-like frames are fine
        # Acquire{now 0, session 1, "a", Exclusive, None, None} -> Granted{Exclusive, 1}
        got = svc.handle_frame(memoryview(bytes([3, 0, 1, 1, 97, 0, 0, 0])))
        assert got.token == 1 and got.frame == bytes([3, 0, 1])
        svc.handle_frame(bytes([3, 0, 2, 1, 97, 0, 2, 0]))  # session 2 waits forever
        # Tick{now 10}: both expire; the events come as frames.
        got = svc.handle_frame(bytes([6, 10]))
        assert got == fl.Ticked(now=10) and got.frame == bytes([10, 10])
        assert got.events == () and len(got.event_frames) >= 3
        assert all(isinstance(f, bytes) and 0 < len(f) <= fl.MAX_FRAME_LEN
                   for f in got.event_frames)


def test_garbage_frames_change_nothing():
    with fl.Service(4, 4, 8) as svc:
        svc.handle_frame(bytes([0, 0, 10]))
        before = svc.snapshot()
        for frame in (b"", b"\x7f", b"\x00\x00\x0a\x00", b"\x03\x00\x01\x41", b"\xff" * 11,
                      bytes(fl.MAX_FRAME_LEN + 1)):
            e = refused(501, svc.handle_frame, frame)
            assert e.kind == "bad_frame"
        refused(903, svc.handle_frame, "\x06\x01")  # str is not bytes
        assert svc.snapshot() == before and svc.now() == 0


def test_placed_service_and_layout():
    size, align = fl.Service.layout(4, 4, 8)
    assert size > 0 and align & (align - 1) == 0
    with fl.Service.placed(4, 4, 8) as svc:
        a = svc.open_session(0, 5).session
        b = svc.open_session(0, 50).session
        svc.acquire(0, a, "x")
        svc.acquire(0, b, "x", wait="forever")
        assert [e.kind for e in svc.tick(5).events] == ["session_expired", "released",
                                                        "granted"]
    refused(206, fl.Service.layout, 2**31, 1, 1)


def test_a_placed_service_without_sessions_or_claims_keeps_answering():
    # Its event ring has no slots (the core's bound is 0); the drain after a refusal and
    # after a tick must find it empty, not poison the handle.
    with fl.Service.placed(0, 1, 0) as svc:
        assert svc.tick(1).events == ()
        refused(fl.Result.CAPACITY_EXCEEDED, svc.open_session, 1, 5)
        assert svc.drain_events() == () and svc.drain_frames() == ()
        assert svc.tick(2).now == 2


def test_snapshots_restore_from_any_bytes_like():
    with fl.Service(2, 2, 2) as svc:
        s = svc.open_session(0, 5).session
        svc.acquire(0, s, "held")
        snap = svc.snapshot()
    for form in (snap, bytearray(snap), memoryview(snap)):
        with fl.Service.restore(form, 2, 2, 2) as back:
            assert back.snapshot() == snap and back.holders("held")[0].session == s
        with fl.Service.restore_placed(form, 2, 2, 2) as back:
            assert back.snapshot() == snap and back.holders("held")[0].session == s
    for cut in range(len(snap)):
        with pytest.raises(fl.FencelockError) as e:
            fl.Service.restore(snap[:cut], 2, 2, 2)
        assert e.value.code in (503, 505)
    refused(301, fl.Service.restore, snap, 0, 0, 0)
    refused(903, fl.Service.restore, list(snap), 2, 2, 2)
    with fl.Gate(4) as gate:
        gate.admit("r", 7)
        gs = gate.snapshot()
        gate.check("r", 7)
        refused(401, gate.check, "r", 6)
    with fl.Gate.restore(bytearray(gs), 4) as back:
        assert back.entries() == {"r": 7}
    refused(301, fl.Gate.restore, memoryview(gs), 0)


# ------------------------------------------------------------------ hostile input

NOT_U64 = [-1, 1 << 64, 2**100, True, False, 1.0, "1", None, b"\x01"]


def test_integers_that_do_not_fit_raise_and_change_nothing():
    with fl.Service(4, 4, 8) as svc:
        s = svc.open_session(0, 10).session
        svc.acquire(0, s, "l")
        before = svc.snapshot()
        for bad in NOT_U64:
            for call in (lambda: svc.tick(bad), lambda: svc.open_session(bad, 5),
                         lambda: svc.open_session(0, bad), lambda: svc.keep_alive(0, bad),
                         lambda: svc.keep_alive(bad, s), lambda: svc.release(bad, s, "l"),
                         lambda: svc.acquire(0, s, "m", wait="until", until=bad),
                         lambda: svc.open_labeled(bad, 5, "x"), lambda: svc.watch(0, bad, "l"),
                         lambda: svc.unwatch(bad, s, "l"), lambda: svc.raise_revision(bad)):
                e = refused(903, call)
                assert isinstance(e, fl.ArgumentError) and isinstance(e, ValueError)
        assert svc.snapshot() == before and svc.now() == 0
        # request number 0 would mean "none" in the C ABI: refused, not reinterpreted.
        refused(903, svc.keep_alive, 0, s, request=0)
        refused(903, svc.keep_alive, 0, s, request=-1)
        assert svc.keep_alive(0, s, request=1) == fl.KeptAlive(expires_at=10)
    # tick(-1) is refused: it used to move time to the end.
    with fl.Service(2, 2, 2) as svc:
        refused(903, svc.tick, -1)
        assert svc.now() == 0
        refused(903, svc.open_session, 0, -1)  # used to be a session that never expires
        assert svc.usage().sessions == 0
    # Capacities are u32: 2^32 + 8 used to become 8 sessions.
    for bad in (2**32 + 8, -1, True, 8.0):
        refused(903, fl.Service, bad, 8, 8)
        refused(903, fl.Service, 8, 8, 8, max_name_len=bad)
        refused(903, fl.Service, 8, 8, 8, max_watchers=bad)
        refused(903, fl.Service.layout, 8, 8, 8, max_watchers=bad)
        refused(903, fl.Gate, bad if bad != 2**32 + 8 else 2**64)
        refused(903, fl.Keeper, bad if bad != 2**32 + 8 else 2**64, 3, 2)
    refused(206, fl.Service, 2**31, 8, 8)  # fits u32; the core's row limit refuses it
    refused(206, fl.Gate, 2**31)


def test_a_gate_refuses_negative_tokens_and_keeps_working():
    with fl.Gate(4) as gate:
        for bad in (-1, 1 << 64, True):
            refused(903, gate.admit, "r", bad)  # used to store 2^64 - 1 and refuse all
        assert gate.highest("r") is None
        gate.admit("r", 5)
        refused(402, gate.admit, "q", 0)
        assert gate.entries() == {"r": 5}


def test_a_handle_of_another_kind_is_refused_and_changes_nothing():
    # Through ctypes every handle is a c_void_p, so nothing stops a gate's reaching a
    # service function; the library reads the handle's kind tag and refuses it.
    with fl.Service(2, 2, 2) as svc, fl.Gate(2) as gate, fl.Keeper(10, 3, 2) as keeper:
        s = svc.open_session(0, 10).session
        gate.admit("r", 5)
        before = svc.snapshot()
        bad = fl.Result.INVALID_HANDLE
        assert fl._lib.fencelock_service_tick(gate._h, 1) == bad
        assert fl._lib.fencelock_service_tick(keeper._h, 1) == bad
        assert fl._lib.fencelock_gate_admit(svc._h, b"r", 1, 9) == bad
        assert fl._lib.fencelock_keeper_keep_alive_sent(gate._h, 1) == bad
        fl._lib.fencelock_service_free(keeper._h)  # frees nothing
        assert svc.snapshot() == before and svc.now() == 0
        with pytest.raises(fl.FencelockError) as e:
            gate.admit("r", 4)
        assert e.value.result == fl.Result.STALE
        keeper.keep_alive_sent(1)
        assert svc.keep_alive(1, s).expires_at == 11
    assert "invalid handle" in fl.FencelockError(906).args[0]


def test_names_are_str_or_bytes_like_and_nul_is_kept():
    with fl.Service(4, 4, 8, max_name_len=8) as svc:
        s = svc.open_session(0, 50).session
        t = svc.open_session(0, 50).session
        before = svc.snapshot()
        for bad in (5, 5.0, None, ["l"], True):
            refused(903, svc.acquire, 0, s, bad)  # acquire(a, 5) used to lock "\0" * 5
        refused(902, svc.acquire, 0, s, b"h\xc3\x28")  # not UTF-8
        refused(902, svc.acquire, 0, s, "\udc80")  # a lone surrogate is not UTF-8 either
        refused(201, svc.acquire, 0, s, "")
        e = refused(202, svc.acquire, 0, s, "ninebytes")
        assert "9 bytes, at most 8" in str(e)
        refused(202, svc.acquire, 0, s, "é" * 5)  # ten bytes: the limit counts bytes
        refused(101, svc.acquire, 0, 99, "")  # the core's order: session before name
        assert svc.snapshot() == before
        # A NUL is part of the name: "a\0b" and "a" are two locks, and names come back whole.
        assert svc.acquire(0, s, "a\0b").kind == "granted"
        assert svc.acquire(0, s, "a").kind == "granted"
        assert svc.acquire(0, t, b"a\x00b", wait="forever").kind == "queued"
        assert sorted(svc.locks()) == ["a", "a\0b"]
        assert svc.holders(bytearray(b"a\x00b"))[0].session == s
        # Names come back whole in events, NUL and all (a C string would stop at it).
        rel = svc.release(0, s, memoryview(b"a\x00b"))
        assert rel == fl.Released(token=1)
        assert rel.events == (fl.GrantedEvent(session=t, lock="a\0b", mode="exclusive", token=3),)
        assert svc.close_session(0, t).events == (
            fl.ReleasedEvent(session=t, lock="a\0b", token=3, reason=fl.Reason.CLOSED),)
        assert svc.holders("a") == [fl.Holder(session=s, token=2, mode="exclusive")]
        with fl.Gate(2) as gate:
            gate.admit("r\0", 3)
            assert gate.entries() == {"r\0": 3} and gate.highest("r") is None


def test_mode_and_wait_are_checked_before_the_call():
    with fl.Service(2, 2, 2) as svc:
        s = svc.open_session(0, 5).session
        before = svc.snapshot()
        refused(903, svc.acquire, 0, s, "x", mode="upgrade")
        refused(903, svc.acquire, 0, s, "x", mode=1)
        refused(903, svc.acquire, 0, s, "x", wait="sometimes")
        refused(903, svc.acquire, 0, s, "x", wait="until")  # no deadline given
        refused(903, svc.acquire, 0, s, "x", until=5)  # a deadline without wait="until"
        assert svc.snapshot() == before
        assert svc.acquire(0, s, "x", mode=fl.Mode.SHARED, wait=fl.Wait.NONE).mode == "shared"


def test_the_core_decides_everything_else_in_its_order():
    with fl.Service(2, 2, 2) as svc:
        s = svc.open_session(0, 5).session
        svc.acquire(0, s, "held")
        refused(102, svc.release, 0, s, "free")
        refused(103, svc.cancel, 0, s, "free")
        refused(105, svc.acquire, 0, s, "held", mode="shared")
        refused(203, svc.open_session, 0, 0)
        refused(204, svc.open_session, 1, 2**64 - 1)
        svc.tick(1)
        e = refused(205, svc.tick, 0)
        assert e.kind == "time_went_backwards" and e.events == []
        refused(205, svc.keep_alive, 0, s)


# --------------------------------------------------------- the short-buffer traps

def test_a_short_reply_frame_buffer_applies_nothing():
    # The ABI checks the reply frame's room before it decodes or applies anything, so
    # BUFFER_TOO_SMALL from handle_frame means "nothing happened", as everywhere else: a
    # retry with room opens session 1, not session 2.
    with fl.Service(4, 4, 8) as svc:
        frame = bytes([0, 0, 10])  # OpenSession{now 0, ttl 10}
        for cap in (1, 3, fl.MAX_FRAME_LEN - 1):
            out, n, reply = C.create_string_buffer(cap), C.c_size_t(), fl._Reply()
            code = fl._lib.fencelock_service_handle_frame(svc._h, frame, len(frame),
                                                          C.byref(reply), out, cap,
                                                          C.byref(n))
            assert code == fl.Result.BUFFER_TOO_SMALL and n.value == fl.MAX_FRAME_LEN
            assert reply.kind == 0 and out.raw == bytes(cap)
        assert svc.usage().sessions == 0 and svc.pending() == 0
        assert svc.handle_frame(frame) == fl.Opened(session=1, expires_at=10)


def test_a_short_snapshot_buffer_gets_only_the_size():
    with fl.Service(2, 2, 2) as svc, fl.Gate(2) as gate:
        svc.acquire(0, svc.open_session(0, 5).session, "held")
        gate.admit("r", 1)
        for fn, h, whole in ((fl._lib.fencelock_service_snapshot, svc._h, svc.snapshot()),
                             (fl._lib.fencelock_gate_snapshot, gate._h, gate.snapshot())):
            for cap in range(1, len(whole)):
                buf, n = C.create_string_buffer(b"\xaa" * cap, cap), C.c_size_t()
                assert fn(h, buf, cap, C.byref(n)) == fl.Result.BUFFER_TOO_SMALL
                assert n.value == len(whole) and buf.raw == b"\xaa" * cap


def test_drain_events_takes_a_whole_burst_in_one_call():
    # Ten sessions expire at one tick: 20 events (each expiry and its release), more than
    # the wrapper's first array of slots, so it asks again with the size reported, and
    # every event arrives in order.
    with fl.Service(12, 12, 24) as svc:
        ids = [svc.open_session(0, 5).session for _ in range(10)]
        for i, s in enumerate(ids):
            svc.acquire(0, s, f"l{i}")
        events = svc.tick(5).events
        assert len(events) == 20 and svc.pending() == 0
        assert [e.kind for e in events[:2]] == ["session_expired", "released"]
        assert [e.session for e in events[::2]] == ids
        assert [e.lock for e in events[1::2]] == [f"l{i}" for i in range(10)]
        # Events queued by a call made on the library directly: drain_events takes them
        # all, poll_event one at a time.
        w = svc.open_session(5, 50).session
        h = svc.open_session(5, 3).session
        svc.acquire(5, h, "x")
        svc.acquire(5, w, "x", wait="forever")
        assert fl._lib.fencelock_service_tick(svc._h, 8) == fl.Result.OK
        assert svc.pending() == 3
        assert svc.poll_event() == fl.SessionExpired(session=h)
        got = svc.drain_events()
        assert [e.kind for e in got] == ["released", "granted"] and got[1].session == w
        assert svc.drain_events() == () and svc.poll_event() is None


def test_the_reply_counts_queued_events_and_the_next_input_takes_them():
    # Events left queued by a call on the library directly are counted in the next
    # reply's `pending`, so the next input's method drains them with its own.
    with fl.Service(4, 4, 8) as svc:
        a = svc.open_session(0, 2).session
        b = svc.open_session(0, 20).session
        svc.acquire(0, a, "x")
        svc.acquire(0, b, "x", wait="forever")
        assert fl._lib.fencelock_service_tick(svc._h, 2) == fl.Result.OK
        c = fl._Reply()
        assert fl._lib.fencelock_service_keep_alive(svc._h, 2, b, 0, C.byref(c)) == fl.Result.OK
        assert c.pending == 3
        got = svc.keep_alive(3, b)
        assert got == fl.KeptAlive(expires_at=23)
        assert [e.kind for e in got.events] == ["session_expired", "released", "granted"]
        assert svc.pending() == 0 and svc.keep_alive(4, b).events == ()


def test_a_short_or_missing_event_array_loses_nothing():
    # Called on the library directly: too small an array, a NULL array with room claimed,
    # a NULL count and a NULL handle are refused, nothing written and nothing dequeued.
    with fl.Service(4, 4, 8) as svc:
        a = svc.open_session(0, 2).session
        b = svc.open_session(0, 20).session
        svc.acquire(0, a, "x")
        svc.acquire(0, b, "x", wait="forever")
        assert fl._lib.fencelock_service_tick(svc._h, 2) == fl.Result.OK
        drain = fl._lib.fencelock_service_drain_events
        n = C.c_size_t(77)
        for cap in (0, 1, 2):
            slots = (fl._Output * 3)()
            C.memset(slots, 0xAA, C.sizeof(slots))
            assert drain(svc._h, slots, cap, C.byref(n)) == fl.Result.BUFFER_TOO_SMALL
            assert n.value == 3 and C.string_at(slots, C.sizeof(slots)) == b"\xaa" * C.sizeof(slots)
        assert drain(svc._h, None, 0, C.byref(n)) == fl.Result.BUFFER_TOO_SMALL and n.value == 3
        n.value = 77
        for h, arr, cap, count in ((svc._h, None, 3, C.byref(n)),
                                   (svc._h, None, 2**64 - 1, C.byref(n)),
                                   (svc._h, (fl._Output * 3)(), 3, None),
                                   (None, (fl._Output * 3)(), 3, C.byref(n))):
            assert drain(h, arr, cap, count) == fl.Result.NULL_PARAMETER
        assert n.value == 77 and svc.pending() == 3
        slots = (fl._Output * 3)()
        assert drain(svc._h, slots, 3, C.byref(n)) == fl.Result.OK and n.value == 3
        assert [fl._event(o).kind for o in slots] == ["session_expired", "released",
                                                       "granted"]
        assert svc.pending() == 0
    closed = fl.Service(2, 2, 2)
    closed.close()
    for call in (closed.drain_events, closed.poll_event):
        e = refused(fl.Result.INVALID_HANDLE, call)
        assert isinstance(e, fl.HandleError) and isinstance(e, ValueError)



def test_the_event_queue_has_a_limit_and_a_refusal_carries_the_backlog():
    # The library's queue holds at most event_limit() events: twice the core's bound at
    # capacity (sessions + 2 x claims with watches off) by default. This wrapper drains
    # after every call; a host calling the library directly that never drains is refused
    # with BUFFER_TOO_SMALL, nothing changed, and the wrapper's next call hands it the
    # backlog on the error, after which the same input succeeds.
    with fl.Service(2, 2, 2, max_watchers=0) as svc:
        bound = 2 + 2 * 2
        assert svc.event_limit() == 2 * bound
        refused(fl.Result.INVALID_ARGUMENT, svc.set_event_limit, bound - 1)
        with pytest.raises(fl.ArgumentError):
            svc.set_event_limit(-1)
        assert svc.event_limit() == 2 * bound
        svc.set_event_limit(bound)
        assert svc.event_limit() == bound
        c, lib, t = fl._Reply(), fl._lib, 0
        # One session expiry a round, on the library directly, never drained.
        while True:
            assert lib.fencelock_service_open_session(svc._h, t, 1, C.byref(c)) == fl.Result.OK
            before, queued = svc.snapshot(), svc.pending()
            code = lib.fencelock_service_tick(svc._h, t + 1)
            if code == fl.Result.BUFFER_TOO_SMALL:
                break
            assert code == fl.Result.OK and svc.pending() <= bound
            t += 1
        assert queued == bound and svc.snapshot() == before and svc.pending() == queued
        e = refused(fl.Result.BUFFER_TOO_SMALL, svc.tick, t + 1)
        assert e.kind == "buffer_too_small"
        assert [ev.kind for ev in e.events] == ["session_expired"] * bound
        assert svc.snapshot() == before and svc.pending() == 0
        assert svc.tick(t + 1).events == (fl.SessionExpired(session=c.session),)
    with fl.Service.placed(1, 1, 1, max_watchers=0) as svc:
        assert svc.event_limit() == 1 + 2 * 1
        svc.set_event_limit(3)  # a ring's own size: accepted, changes nothing
        refused(fl.Result.INVALID_ARGUMENT, svc.set_event_limit, 4)
        assert svc.event_limit() == 3


# --------------------------------------------------------------------------- batches

def _one_by_one(svc, now, op):
    """What a batch's op must answer: its typed method, a refusal as its error."""
    f, name = op._fields, op._name
    kind, session, req = f["kind"], f.get("session", 0), f.get("request_number") or None
    calls = {
        1: lambda: svc.open_session(now, f["ttl"]),
        2: lambda: svc.keep_alive(now, session, req),
        3: lambda: svc.close_session(now, session, req),
        5: lambda: svc.release(now, session, name, req),
        6: lambda: svc.cancel(now, session, name, req),
        7: lambda: svc.watch(now, session, name, req),
        8: lambda: svc.unwatch(now, session, name, req),
        9: lambda: svc.campaign(now, session, name, req),
        10: lambda: svc.resign(now, session, name, req),
        11: lambda: svc.release_hold(now, session, name, f["token"], req),
    }
    if kind == 4:
        mode = fl.Permits(f["count"], f["limit"]) if f["mode"] == 3 else \
            {1: "exclusive", 2: "shared"}[f["mode"]]
        wait = {1: "none", 2: "forever", 3: "until"}[f["wait"]]
        until = f["wait_until"] if wait == "until" else None
        call = lambda: svc.acquire(now, session, name, mode, wait, until, req)  # noqa: E731
    else:
        call = calls[kind]
    try:
        return call()
    except fl.FencelockError as e:
        return e


def test_a_batch_answers_as_its_ops_one_by_one():
    # The same ops through submit and through the typed methods, on two services: the
    # same answers (a refusal as the error, returned, not raised), the same events, the
    # same snapshot.
    batches = [
        (0, [fl.Op.open_session(10), fl.Op.open_session(10), fl.Op.open_session(0)]),
        (1, [fl.Op.acquire(1, JOB), fl.Op.acquire(2, JOB, wait="forever", request=1),
             fl.Op.acquire(2, JOB, wait="forever", request=1), fl.Op.watch(1, JOB),
             fl.Op.acquire(1, "sem", fl.Permits(1, 2)), fl.Op.acquire(2, "sem", "shared"),
             fl.Op.release(2, JOB), fl.Op.cancel(1, JOB), fl.Op.unwatch(2, JOB)]),
        (2, [fl.Op.release(1, JOB), fl.Op.keep_alive(2, request=2), fl.Op.keep_alive(9),
             fl.Op.campaign(1, "leader"), fl.Op.campaign(2, "leader"),
             fl.Op.acquire(1, "t", wait="until", until=5), fl.Op.resign(1, "leader")]),
        (3, [fl.Op.close_session(2), fl.Op.release_hold(1, "t", 4),  # 4 was the leader's
             fl.Op.release_hold(1, "t", 5, request=3)]),
        (4, []),
        (20, [fl.Op.close_session(2), fl.Op.keep_alive(1), fl.Op.open_session(3)]),
    ]
    with fl.Service(4, 4, 8) as batched, fl.Service(4, 4, 8) as typed:
        kinds = set()
        for now, ops in batches:
            got = batched.submit(now, ops)
            want = [_one_by_one(typed, now, op) for op in ops]
            assert len(got.answers) == len(ops)
            for g, w in zip(got.answers, want):
                if isinstance(w, fl.FencelockError):
                    assert isinstance(g, fl.FencelockError) and g.code == w.code, (g, w)
                else:
                    assert g == w
                kinds.add(g.kind)
            # A refused op's advance stands, and its events come with the error.
            assert got.events == tuple(e for w in want for e in w.events)
            assert batched.snapshot() == typed.snapshot()
        assert {"opened", "granted", "queued", "released", "watching", "not_holder",
                "bad_ttl", "unknown_session", "closed"} <= kinds, kinds


def test_a_handle_a_subclass_cannot_take_is_freed():
    # A subclass whose __init__ takes other arguments cannot be built by the alternate
    # constructors: the handle the library made for it is freed as the TypeError goes
    # (it leaked, and a placed service's block went while the library counted it live).
    class Named(fl.Service):
        def __init__(self, name):
            super().__init__(2, 2, 2)
            self.name = name

    class NamedGate(fl.Gate):
        def __init__(self, name):
            super().__init__(2)

    class Late(fl.Service):
        # Takes the handle, then raises: freed once, by the object's own finalizer.
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            raise RuntimeError("after the base class")

    freed = []
    reals = {name: getattr(fl._lib, name) for name in ("fencelock_service_free",
                                                       "fencelock_gate_free")}
    for name, real in reals.items():
        def spy(h, real=real, name=name):
            freed.append((name, h.value))
            return real(h)

        setattr(fl._lib, name, spy)
    try:
        with fl.Service(2, 2, 2) as svc:
            snap = svc.snapshot()
        with fl.Gate(2) as gate:
            gsnap = gate.snapshot()
        for make in (lambda: Named.placed(2, 2, 2), lambda: Named.restore(snap, 2, 2, 2),
                     lambda: Named.restore_placed(snap, 2, 2, 2),
                     lambda: NamedGate.restore(gsnap, 2)):
            freed.clear()
            with pytest.raises(TypeError):
                make()
            assert len(freed) == 1 and freed[0][1], freed
        freed.clear()
        with pytest.raises(RuntimeError):
            Late.restore(snap, 2, 2, 2)
        gc.collect()
        assert len(freed) == 1 and freed[0][1], freed
    finally:
        for name, real in reals.items():
            setattr(fl._lib, name, real)


def _handing_over(a, b):
    """Ops that hand JOB between sessions `a` and `b` twenty times: `a` takes it, then each
    round the other queues and the holder releases (a grant event each)."""
    ops = [fl.Op.acquire(a, JOB)]
    for i in range(20):
        holder, waiter = (a, b) if i % 2 == 0 else (b, a)
        ops += [fl.Op.acquire(waiter, JOB, wait="forever"), fl.Op.release(holder, JOB)]
    return ops


def test_a_close_made_during_a_batch_takes_effect_after_it():
    # The batch stops for the queue's room and is submitted again; a close made between
    # the rounds (here by the event drain, as a signal handler or a __del__ could) waits
    # for the call to end: every op is applied and answered, every event returned. The
    # second round raised HandleError, and the answers and the events taken were lost.
    svc = fl.Service(2, 2, 2, max_watchers=0)
    svc.set_event_limit(2 + 2 * 2)
    a, b = (svc.open_session(0, 1000).session for _ in range(2))
    ops = _handing_over(a, b)
    drain = svc._events

    def closing_drain():
        svc.close()
        return drain()

    svc._events = closing_drain
    got = svc.submit(1, ops)
    assert [x.kind for x in got.answers] == ["granted"] + ["queued", "released"] * 20
    assert [e.token for e in got.events] == list(range(2, 22))
    assert svc.closed
    with pytest.raises(fl.HandleError):
        svc.pending()


def test_a_batch_goes_on_past_a_full_queue_and_raises_only_for_time():
    with fl.Service(2, 2, 2, max_watchers=0) as svc:
        svc.set_event_limit(2 + 2 * 2)
        a, b = (svc.open_session(0, 1000).session for _ in range(2))
        # Every release grants the other session: one event each, more than the queue
        # holds; the wrapper drains where the library stops and submits the rest.
        got = svc.submit(1, _handing_over(a, b))
        assert [x.kind for x in got.answers] == ["granted"] + ["queued", "released"] * 20
        assert [e.token for e in got.events] == list(range(2, 22))
        assert svc.pending() == 0
        before = svc.snapshot()
        e = refused(fl.Result.TIME_WENT_BACKWARDS, svc.submit, 0, [fl.Op.keep_alive(a)])
        assert svc.snapshot() == before and e.events == []
        with pytest.raises(fl.ArgumentError):
            svc.submit(1, [fl.Op.keep_alive(a), ("keep_alive", a)])
        with pytest.raises(fl.ArgumentError):
            fl.Op.keep_alive(a, request=0)
        with pytest.raises(fl.ArgumentError):
            fl.Op.acquire(a, JOB, wait="until")
        with pytest.raises(fl.ArgumentError):
            fl.Op.acquire(a, JOB, mode="neither")
        with pytest.raises(TypeError):
            fl.Op()
        # The name is judged before the session, as the methods judge it.
        for make, call in ((fl.Op.release, svc.release), (fl.Op.watch, svc.watch)):
            refused(fl.Result.INVALID_UTF8, call, 1, -1, "\ud800")
            refused(fl.Result.INVALID_UTF8, make, -1, "\ud800")
        refused(fl.Result.INVALID_UTF8, svc.acquire, 1, -1, "\ud800")
        refused(fl.Result.INVALID_UTF8, fl.Op.acquire, -1, "\ud800")
        # ... and before the mode and the wait, as the C ABI judges them.
        for bad in ({"mode": "neither"}, {"wait": "sometimes"}, {"wait": "until"}):
            refused(fl.Result.INVALID_UTF8, svc.acquire, 1, a, "\ud800", **bad)
            refused(fl.Result.INVALID_UTF8, fl.Op.acquire, a, "\ud800", **bad)
        assert repr(fl.Op.release(a, JOB)) == f"Op.release({a}, {JOB!r})"
        assert repr(fl.Op.open_session(7)) == "Op.open_session(7)"
        assert svc.snapshot() == before


# ---------------------------------------------------- handles: close, finalize, threads

def test_every_handle_is_a_context_manager_and_closes_once():
    for make in (lambda: fl.Service(1, 1, 1), lambda: fl.Gate(1), lambda: fl.Keeper(10, 3, 2),
                 lambda: fl.Service.placed(1, 1, 1)):
        with make() as h:
            assert not h.closed
        assert h.closed
        h.close()  # a second close does nothing
        with pytest.raises(fl.HandleError, match="closed") as e:
            if isinstance(h, fl.Service):
                h.tick(1)
            elif isinstance(h, fl.Gate):
                h.admit("r", 1)
            else:
                h.keep_alive_sent(1)
        assert e.value.code == fl.Result.INVALID_HANDLE and isinstance(e.value, ValueError)


def test_a_close_from_inside_a_call_frees_the_handle_only_as_the_call_returns():
    # An argument's __index__ closes the service while the call that converts it holds
    # the handle (as a signal handler or a __del__ run by the collector could): the call
    # is refused as on a closed handle, and the library is never given the freed handle.
    # (This used to free a 100 000-session service under the call, which then read it.)
    svc = fl.Service(100000, 16, 16)
    s = svc.open_session(0, 10).session

    class Closing:
        def __index__(self):
            svc.close()
            return s

    e = refused(fl.Result.INVALID_HANDLE, svc.session, Closing())
    assert isinstance(e, fl.HandleError)
    assert svc.closed and not svc._finalizer.alive, "freed as the call returned"
    # Deeper in a call, after its handle was checked: the close takes effect for every
    # later call at once, and the memory is freed as the outermost call returns.
    svc = fl.Service(4, 4, 8)
    with svc._mutex, svc._in_call:
        with svc._mutex, svc._in_call:
            svc.close()
            assert svc.closed and svc._finalizer.alive, "not freed under the calls"
            with pytest.raises(fl.HandleError):
                svc.tick(1)
        assert svc._finalizer.alive, "the outer call still runs"
    assert not svc._finalizer.alive
    svc.close()  # a second close does nothing


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_unclosed_handles_are_freed_by_the_finalizer():
    # Each of these services takes about a megabyte of library memory; 400 of them never
    # closed would hold ~400 MB without a finalizer.
    gc.collect()
    start = _rss()
    for i in range(400):
        svc = fl.Service(1000, 1000, 4000)
        svc.open_session(0, 10)
        fl.Gate(1000).admit("r", 1)
        fl.Keeper(10, 3, 2)
    del svc
    gc.collect()
    grown = _rss() - start
    assert grown < 64 << 20, f"RSS grew by {grown >> 20} MB: handles were not freed"


def test_a_finalizer_runs_when_the_handle_is_collected():
    svc = fl.Service(1, 1, 1)
    fin = svc._finalizer
    del svc
    gc.collect()
    assert not fin.alive


def test_one_handle_shared_by_threads_stays_consistent():
    # Four threads admit rising tokens on one gate at once. An exception in a thread ends
    # only that thread, so each records what it saw and the test asserts it after join().
    with fl.Gate(8) as gate:
        failures, admitted = [], {}

        def admit(base):
            mine = []
            try:
                for t in range(1, 200):
                    try:
                        gate.admit("r", base + t)
                        mine.append(base + t)
                    except fl.FencelockError as e:
                        if e.kind != "stale":
                            failures.append(f"{base + t}: {e.kind}")
            except BaseException as e:  # anything else is a failure of the test
                failures.append(f"thread {base}: {e!r}")
            admitted[base] = mine

        threads = [threading.Thread(target=admit, args=(k * 1000,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert sorted(admitted) == [0, 1000, 2000, 3000], "every thread ran to its end"
        # the highest thread's tokens are above all others': each was admitted
        assert admitted[3000] == list(range(3001, 3200))
        assert gate.highest("r") == 3199


def test_the_interpreter_exits_cleanly_while_a_daemon_thread_uses_a_handle(tmp_path):
    # At exit the finalizers free every open handle while daemon threads still run: one
    # freed under another thread's call crashed the process (SIGSEGV, in 3 runs of 4 of
    # this script before the finalizer took the handle's lock). A long call (the
    # sessions of a full table) keeps the thread inside the library most of the time.
    script = tmp_path / "exit_race.py"
    script.write_text(
        "import threading, time, fencelock as fl\n"
        "svc = fl.Service(sessions=100000, locks=16, claims=16)\n"
        "for _ in range(100000):\n"
        "    svc.open_session(0, 10**12)\n"
        "started = threading.Event()\n"
        "def loop():\n"
        "    while True:\n"
        "        started.set()\n"
        "        svc.sessions()\n"
        "threading.Thread(target=loop, daemon=True).start()\n"
        "started.wait()\n"
        "time.sleep(0.2)\n"
        "print('exiting')\n")
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(fl.__file__)))
    env = dict(os.environ, PYTHONPATH=pkg)
    for _ in range(4):
        got = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert (got.returncode, got.stdout) == (0, "exiting\n"), got.stderr[-2000:]


def test_a_finalizer_that_cannot_take_the_lock_frees_neither_handle_nor_placed_memory(
        monkeypatch):
    # A finalizer that gives up waiting for the handle's lock (a call of another thread
    # still running, at exit) must free nothing: not the handle, and not a placed
    # service's memory, whose last reference it holds. The memory used to go with the
    # finalizer's frame, under the running call.
    monkeypatch.setattr(fl, "_FREE_WAIT", 0.05)
    monkeypatch.setattr(fl, "_ABANDONED", [])
    svc = fl.Service.placed(2, 2, 2)
    svc.open_session(0, 50)
    handle = svc._h
    held, done = threading.Event(), threading.Event()
    answers = []

    def long_call():
        with svc._mutex:
            held.set()
            done.wait()
            # Still inside "its call": the handle and its memory must be whole.
            now = C.c_uint64()
            answers.append((fl._lib.fencelock_service_now(handle, C.byref(now)), now.value))

    t = threading.Thread(target=long_call, daemon=True)
    t.start()
    held.wait()
    try:
        svc._finalizer()  # as at exit: the lock is taken, so it gives up
        assert not svc._finalizer.alive
        assert len(fl._ABANDONED) == 1, "the finalizer dropped what it could not free"
        parked_handle, parked_memory = fl._ABANDONED[0]
        assert parked_handle is handle and parked_memory is not None
        del svc
        gc.collect()
    finally:
        done.set()
        t.join()
    assert answers == [(fl.Result.OK, 0)], answers


def test_any_bytes_like_object_is_taken_and_anything_else_refused(tmp_path):
    # "bytes-like" is the buffer protocol: an array.array or an mmap of a snapshot restores
    # as its bytes do, and a name may be one too; a str, an int or a list is no bytes-like
    # object and is refused, nothing changed.
    import array
    import mmap
    with fl.Service(2, 2, 2) as svc:
        a = svc.open_session(0, 50).session
        svc.acquire(0, a, array.array("B", b"ledger"))
        snap = svc.snapshot()
        assert [h.session for h in svc.holders("ledger")] == [a]
    path = tmp_path / "snap"
    path.write_bytes(snap)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for copy in (array.array("B", snap), m):
            with fl.Service.restore(copy, 2, 2, 2) as back:
                assert back.snapshot() == snap
    with fl.Service(2, 2, 2) as svc:
        before = svc.snapshot()
        for bad in ("ledger", 7, [108]):
            with pytest.raises(fl.ArgumentError):
                fl.Service.restore(bad, 2, 2, 2)
        with pytest.raises(fl.ArgumentError):
            svc.acquire(0, 1, [108])
        assert svc.snapshot() == before


def test_a_placed_block_python_cannot_allocate_is_bad_config(monkeypatch):
    # A heap service whose tables cannot be allocated is BAD_CONFIG; so is a placed one
    # whose block Python cannot allocate (not a MemoryError or OverflowError).
    def no_memory(*_):
        raise MemoryError

    with fl.Service(2, 2, 2) as svc:
        snap = svc.snapshot()
    monkeypatch.setattr(fl.C, "create_string_buffer", no_memory)
    for make in (lambda: fl.Service.placed(2, 2, 2),
                 lambda: fl.Service.restore_placed(snap, 2, 2, 2)):
        with pytest.raises(fl.FencelockError) as e:
            make()
        assert e.value.code == fl.Result.BAD_CONFIG, e.value


def test_an_error_pickles_and_copies_whole():
    # A refusal raised in a worker process reaches its parent through pickle.
    import copy
    import pickle
    with fl.Gate(2) as gate:
        gate.admit("r", 5)
        with pytest.raises(fl.FencelockError) as stale:
            gate.admit("r", 4)
    with fl.Service(2, 2, 2) as svc:
        a = svc.open_session(0, 5).session
        svc.acquire(0, a, "l")
        b = svc.open_session(0, 50).session
        with pytest.raises(fl.FencelockError) as gone:  # its advance expired a and freed l
            svc.keep_alive(9, a)
    bad = fl.ArgumentError("invalid argument: a test")
    for e in (stale.value, gone.value, bad):
        for twin in (pickle.loads(pickle.dumps(e)), copy.copy(e), copy.deepcopy(e)):
            assert type(twin) is type(e)
            assert (twin.code, twin.kind, twin.detail, str(twin)) == (e.code, e.kind, e.detail, str(e))
            assert (twin.events, twin.event_frames) == (e.events, e.event_frames)
    assert gone.value.kind == "unknown_session" and len(gone.value.events) >= 2, gone.value.events
    assert isinstance(pickle.loads(pickle.dumps(bad)), ValueError)
    del b


# ------------------------------------------------------------------ codes and loading

def test_result_codes_match_the_header_and_have_messages():
    text = open(HEADER).read()
    header = {m[0]: int(m[1]) for m in re.findall(r"FENCELOCK_RESULT_(\w+) = (\d+),", text)}
    assert header == {r.name: r.value for r in fl.Result}
    for r in fl.Result:
        assert fl.message(r) not in ("", "unknown result code"), r
    assert fl.message(401) == "stale" and fl.message(12345) == "unknown result code"
    assert fl.MAX_NAME_LEN == int(re.search(r"FENCELOCK_MAX_NAME_LEN (\d+)", text)[1])
    assert fl.MAX_FRAME_LEN == int(re.search(r"FENCELOCK_MAX_FRAME_LEN (\d+)", text)[1])
    assert fl.KEEPER_MEMORY == int(re.search(r"FENCELOCK_KEEPER_MEMORY (\d+)", text)[1])
    assert fl.MAX_LABEL_LEN == int(re.search(r"FENCELOCK_MAX_LABEL_LEN (\d+)", text)[1])
    assert fl.NAME_KEY_LEN == int(re.search(r"FENCELOCK_NAME_KEY_LEN (\d+)", text)[1])
    assert fl.DEFAULT_MAX_WATCHERS == int(
        re.search(r"FENCELOCK_DEFAULT_MAX_WATCHERS (\d+)", text)[1])


def test_a_missing_library_is_a_clear_import_error(tmp_path):
    env = dict(os.environ, FENCELOCK_LIB=str(tmp_path / "nowhere.so"))
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(fl.__file__)))
    env["PYTHONPATH"] = pkg
    got = subprocess.run([sys.executable, "-c", "import fencelock"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert got.returncode != 0
    assert "ImportError" in got.stderr and "FENCELOCK_LIB" in got.stderr


def test_a_library_of_another_release_is_a_clear_import_error(tmp_path):
    # Not libfencelock at all (the C maths library): named, as an ImportError.
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(fl.__file__)))
    libm = C.util.find_library("m")
    assert libm, "the C maths library is found"
    env = dict(os.environ, FENCELOCK_LIB=libm, PYTHONPATH=pkg)
    got = subprocess.run([sys.executable, "-c", "import fencelock"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert got.returncode != 0
    assert "ImportError" in got.stderr and "no fencelock_version" in got.stderr, got.stderr
    # A libfencelock that says another version: refused before anything is bound.

    class OtherRelease:
        class fencelock_version:  # noqa: N801 (the C name)
            argtypes = restype = None

            def __new__(cls, buf, n, out):
                C.memmove(buf, b"0.1.0\0", 6)
                return 0

    with pytest.raises(ImportError, match=r"is libfencelock 0\.1\.0, this package 0\.2\.0"):
        fl._check_version(OtherRelease(), "a test")
    # The loaded one says the package's own version, which is the project's.
    assert fl.library_version() == fl.__version__
    assert fl.__version__ == re.search(r'^version = "(.*)"', open(
        os.path.join(pkg, "pyproject.toml")).read(), re.M)[1]


def test_every_function_of_the_header_is_wrapped():
    text = open(HEADER).read()
    declared = set(re.findall(r"^(?:fencelock_result|void) (fencelock_\w+)\(", text, re.M))
    assert len(declared) > 50
    assert declared == set(fl._SIGNATURES), (declared ^ set(fl._SIGNATURES))
    # ... and each is called by the package, not only declared to ctypes.
    source = open(fl.__file__).read()
    unused = [f for f in declared if source.count(f'"{f}"') + source.count(f"_lib.{f}") < 2]
    assert unused == []


def test_every_wrapped_signature_matches_the_header():
    """Each function's ctypes argument list against its prototype in the header: as many
    arguments, a pointer where the header has one, and each number as wide as the C type
    (an argument inserted in the header, or widened, would otherwise pass every later one
    in the wrong slot without a test noticing). The struct pointed to is the header's
    when the package names one; `void *` stands for any pointer it passes as an address."""
    text = open(HEADER).read()
    protos = dict(re.findall(r"^(?:fencelock_result|void) (fencelock_\w+)\(([^)]*)\);",
                             text, re.M))
    assert set(protos) == set(fl._SIGNATURES)
    widths = {"uint64_t": 8, "uint32_t": 4, "size_t": C.sizeof(C.c_size_t), "bool": 1,
              "fencelock_result": 4}
    for fn, args in fl._SIGNATURES.items():
        params = [p.strip() for p in protos[fn].split(",") if p.strip() not in ("", "void")]
        assert len(params) == len(args), f"{fn}: {len(params)} in the header, {len(args)} wrapped"
        for i, (param, t) in enumerate(zip(params, args)):
            where = f"{fn} argument {i + 1} ({param})"
            is_ptr = t in (C.c_void_p, C.c_char_p) or issubclass(t, C._Pointer)
            if "*" in param:
                assert is_ptr, f"{where}: the header has a pointer, the package {t.__name__}"
                target = re.sub(r"^(const\s+)?(struct\s+)?", "", param.split("*")[0]).strip()
                if issubclass(t, C._Pointer) and t._type_ not in (C.c_void_p,):
                    pointee = t._type_
                    name = getattr(pointee, "__name__", "")
                    if target in widths:
                        assert C.sizeof(pointee) == widths[target], f"{where}: points to {name}"
                    elif target.startswith("fencelock_") and param.count("*") == 1:
                        # the package's struct for the header's: _Reply for fencelock_reply
                        want = "_" + "".join(w.capitalize() for w in
                                             target.removeprefix("fencelock_").split("_"))
                        assert name == want, f"{where}: points to {name}, not {want}"
            else:
                assert not is_ptr, f"{where}: the header has a number, the package a pointer"
                ctype = param.rsplit(" ", 1)[0].strip()
                assert ctype in widths, f"{where}: a C type this test does not know"
                assert C.sizeof(t) == widths[ctype], f"{where}: {C.sizeof(t)} bytes wrapped"


def test_every_struct_has_the_headers_layout(tmp_path):
    """Each ctypes structure against the header's struct of its name, as the C compiler lays
    it out: the same fields in the same order, and each at the compiler's offset and of its
    size, the whole of its size and alignment. ctypes computes its own layout from the
    field list, so a field added, widened or moved in the header would otherwise have every
    later field read from the wrong bytes, with nothing failing."""
    text = open(HEADER).read()
    structs = dict(re.findall(r"^typedef struct (fencelock_\w+) \{(.*?)^\} \1;", text, re.M | re.S))
    assert len(structs) >= 13, sorted(structs)
    probe = ["#include <stdalign.h>", "#include <stddef.h>", "#include <stdio.h>",
             '#include "fencelock.h"', "int main(void) {"]
    classes = {}
    for cname, body in structs.items():
        name = "_" + "".join(w.capitalize() for w in cname.removeprefix("fencelock_").split("_"))
        cls = getattr(fl, name, None)
        assert cls is not None, f"{cname} has no ctypes structure {name} in the package"
        classes[cname] = cls
        fields = re.findall(r"^\s*[^/\s][^;]*?(\w+)(?:\[\w+\])?;", body, re.M)
        assert fields == [f for f, _ in cls._fields_], f"{cname}: the header's fields, then {name}'s"
        probe.append(f'printf("{cname} - %zu %zu\\n", sizeof({cname}), alignof({cname}));')
        for f in fields:
            probe.append(f'printf("{cname} {f} %zu %zu\\n", offsetof({cname}, {f}), '
                         f"sizeof((({cname} *)0)->{f}));")
    probe += ["return 0;", "}"]
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(probe) + "\n")
    cc = os.environ.get("CC", "cc")
    built = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", os.path.dirname(HEADER),
                            str(src), "-o", str(exe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    seen = 0
    for line in out.splitlines():
        cname, field, a, b = line.split()
        cls = classes[cname]
        if field == "-":
            assert (C.sizeof(cls), C.alignment(cls)) == (int(a), int(b)), f"{cname}: size, alignment"
        else:
            d = getattr(cls, field)
            assert (d.offset, d.size) == (int(a), int(b)), f"{cname}.{field}: offset, size"
        seen += 1
    assert seen == len(structs) + sum(len(c._fields_) for c in classes.values())


CALLS = os.path.join(HERE, "..", "..", "..", "tests", "vectors", "precedence.calls")


def test_error_precedence_table_through_the_typed_methods():
    # tests/vectors/precedence.calls: multi-fault inputs and the one outcome each gets in
    # every layer. A row with request=0 cannot cross this binding (None is "no request
    # number", which the C ABI spells 0): it must raise ArgumentError, changing nothing,
    # and a tick to its `now` stands in for the advance the core would have made.
    rows = [line.split("#")[0].strip() for line in open(CALLS)]
    rows = [r for r in rows if r]
    config = dict(kv.split("=") for kv in rows[0].split()[1:])
    assert rows[0].startswith("config ")
    svc = fl.Service(int(config["sessions"]), int(config["locks"]), int(config["claims"]),
                     lock_delay=int(config["lock_delay"]),
                     max_name_len=int(config["max_name_len"]),
                     max_watchers=int(config.get("max_watchers", fl.DEFAULT_MAX_WATCHERS)))
    checked = request_zero = 0
    for row in rows[1:]:
        call, expect = (part.strip() for part in row.split("->"))
        method, *pairs = call.split()
        a = dict(p.split("=", 1) for p in pairs)
        now = int(a["now"])
        request = None if a.get("request", "-") == "-" else int(a["request"])
        wait, until = a.get("wait", "none"), None
        if wait.startswith("until:"):
            wait, until = "until", int(wait[len("until:"):])
        m = a.get("mode", "x")
        if m.startswith("p:"):  # p:<count>/<limit>: a semaphore's permits
            count, limit = m[2:].split("/")
            mode = fl.Permits(int(count), int(limit))
        else:
            mode = {"x": fl.Mode.EXCLUSIVE, "s": fl.Mode.SHARED}[m]
        run = {
            "open": lambda: svc.open_session(now, int(a["ttl"])),
            "open_labeled": lambda: svc.open_labeled(now, int(a["ttl"]), a["label"]),
            "watch": lambda: svc.watch(now, int(a["session"]), a["lock"], request),
            "unwatch": lambda: svc.unwatch(now, int(a["session"]), a["lock"], request),
            "keep_alive": lambda: svc.keep_alive(now, int(a["session"]), request),
            "close": lambda: svc.close_session(now, int(a["session"]), request),
            "acquire": lambda: svc.acquire(now, int(a["session"]), a["lock"], mode, wait,
                                           until, request),
            "release": lambda: svc.release(now, int(a["session"]), a["lock"], request),
            "release_hold": lambda: svc.release_hold(now, int(a["session"]), a["lock"],
                                                     int(a["token"]), request),
            "cancel": lambda: svc.cancel(now, int(a["session"]), a["lock"], request),
            "tick": lambda: svc.tick(now),
        }[method]
        if request == 0:
            # 0 is no request number here: the row's own call refuses it before the core
            # (nothing changes), and the advance the core's refusal makes is made apart.
            before = svc.snapshot()
            with pytest.raises(fl.ArgumentError):
                run()
            assert svc.snapshot() == before, row
            svc.tick(now)
            request_zero += 1
            continue
        outcome, value = expect.split()
        if outcome == "ok":
            assert run().kind == value, row
        else:
            with pytest.raises(fl.FencelockError) as e:
                run()
            assert e.value.code == int(value), f"{row}: got {e.value!r}"
        checked += 1
    svc.close()
    assert checked > 40
    assert request_zero == sum(" request=0 " in f" {r.split('->')[0]} " for r in rows)


VECTORS = os.path.join(HERE, "..", "..", "..", "tests", "vectors")


def _replay(path, keyed=False):
    """Replays one conformance vector through handle_frame: the events of each input (as
    frames, in order), then exactly its reply frame or its error code, and snapshots.
    `keyed`: the service's lock-name index keyed from os.urandom first."""
    svc, inputs, raises = None, 0, []
    lines = [line.strip() for line in open(path)]
    lines = [line for line in lines if line and not line.startswith("#")]
    i = 0
    while i < len(lines):
        word, _, arg = lines[i].partition(" ")
        i += 1
        if word == "config":
            c = {k: int(v) for k, v in (kv.split("=") for kv in arg.split())}
            svc = fl.Service(c["sessions"], c["locks"], c["claims"], c["lock_delay"],
                             c["max_name_len"],
                             c.get("max_watchers", fl.DEFAULT_MAX_WATCHERS))
            if keyed:
                svc.set_name_key()
                assert svc.is_name_keyed()
        elif word == "snapshot":
            assert svc.snapshot().hex() == arg, f"{path}: snapshot before line {i}"
        elif word == "poll":
            got = svc.poll_timeout()
            assert ("none" if got is None else str(got)) == arg, f"{path}: poll at line {i}"
        elif word == "raise":
            # raise_revision between inputs (wasm/tests/native_vector.rs): `revision <n>`
            # or `err <code>` closes it.
            end, _, want = lines[i].partition(" ")
            i += 1
            try:
                result = ("revision", str(svc.raise_revision(int(arg))))
            except fl.FencelockError as e:
                result = ("err", str(e.code))
            assert result == (end, want), f"{path}: raise before line {i}: {result}"
            raises.append(arg)
        elif word == "in":
            outs = []
            while lines[i].startswith("out "):
                outs.append(lines[i][4:])
                i += 1
            end, _, want = lines[i].partition(" ")
            i += 1
            try:
                got = svc.handle_frame(bytes.fromhex(arg))
                frames, result = got.event_frames, ("reply", got.frame.hex())
            except fl.FencelockError as e:
                frames, result = tuple(e.event_frames), ("err", str(e.code))
            assert [f.hex() for f in frames] == outs, f"{path}: events of input {inputs}"
            assert result == (end, want), f"{path}: input {inputs}: {result}"
            inputs += 1
        else:
            raise AssertionError(f"{path}: unknown line {word!r}")
    svc.close()
    return inputs, len(raises)


WASM_VECTORS = os.path.join(HERE, "..", "..", "..", "wasm", "tests", "vectors")


def test_conformance_vectors_through_frames():
    files = sorted(os.path.join(VECTORS, f) for f in os.listdir(VECTORS) if f.endswith(".vec"))
    assert len(files) >= 16
    # the native determinism logs too; the second one raises the revision between inputs
    files += sorted(os.path.join(WASM_VECTORS, f) for f in os.listdir(WASM_VECTORS)
                    if f.endswith(".vec"))
    counts = [_replay(f) for f in files]
    # every `in` and `raise` line of every file was replayed
    lines = [line for f in files for line in open(f)]
    assert sum(n for n, _ in counts) == sum(line.startswith("in ") for line in lines) > 1200
    assert sum(r for _, r in counts) == sum(line.startswith("raise ") for line in lines) > 10


GATE_VECTORS = os.path.join(VECTORS, "gate")


def _admit_frame(frame):
    """(name, token) of an admit frame: postcard (str, u64), a one-byte length first."""
    n = frame[0]
    assert n < 0x80, "a name's length in one byte"
    name, token, shift, i = frame[1:1 + n], 0, 0, 1 + n
    while True:
        b = frame[i]
        i += 1
        token |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    assert i == len(frame), "trailing bytes in an admit frame"
    return name, token


def _replay_gate(path, keyed=False):
    """Replays one gate vector (tests/vectors/gate) through Gate: each admit's answer (a
    STALE one with the highest Gate.highest gives), and each `highest` line. Returns the
    (admits, refusals, highest) it checked."""
    gate, pending, admits, refusals, highs = None, None, 0, 0, 0
    name = None
    for ln, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, arg = line.partition(" ")
        where = f"{os.path.basename(path)}:{ln}"
        if word != "err":
            assert pending is None, f"{where}: an admit was refused ({pending}), no err line"
        if word == "config":
            if gate is not None:
                gate.close()
            gate = fl.Gate(int(arg.removeprefix("resources=")))
            if keyed:
                gate.set_name_key()
        elif word == "in":
            name, token = _admit_frame(bytes.fromhex(arg))
            try:
                gate.admit(name, token)
            except fl.FencelockError as e:
                pending = e.code
            admits += 1
        elif word == "err":
            code, _, highest = arg.partition(" ")
            assert pending == int(code), f"{where}: {pending} for {line}"
            if pending == fl.Result.STALE:
                assert highest == f"highest={gate.highest(name)}", f"{where}"
            else:
                assert highest == "", f"{where}: only a STALE refusal names a highest"
            pending = None
            refusals += 1
        elif word == "highest":
            hexname, _, want = arg.rpartition(" ")
            assert (gate.highest(bytes.fromhex(hexname)) or 0) == int(want), where
            highs += 1
        else:
            raise AssertionError(f"{where}: unknown line {word!r}")
    assert pending is None, f"{path}: the last admit was refused, no err line"
    gate.close()
    return admits, refusals, highs


def test_gate_vectors_through_the_gate():
    # What every fence must answer (tests/vectors/gate), through the C gate from Python,
    # plain and keyed; every line of the files is checked.
    files = sorted(os.path.join(GATE_VECTORS, f) for f in os.listdir(GATE_VECTORS)
                   if f.endswith(".vec"))
    assert files
    text = "".join(open(f).read() for f in files)
    want = tuple(sum(l.startswith(w + " ") for l in text.splitlines())
                 for w in ("in", "err", "highest"))
    for keyed in (False, True):
        got = tuple(map(sum, zip(*(_replay_gate(f, keyed) for f in files))))
        assert got == want, (keyed, got, want)


def test_a_name_key_changes_no_answer():
    # Keyed from os.urandom, every vector gives the same events, replies and snapshots.
    files = sorted(os.path.join(VECTORS, f) for f in os.listdir(VECTORS) if f.endswith(".vec"))
    files += sorted(os.path.join(WASM_VECTORS, f) for f in os.listdir(WASM_VECTORS)
                    if f.endswith(".vec"))
    assert sum(_replay(f, keyed=True)[0] for f in files) > 1200
    with fl.Service(2, 4, 4) as svc, fl.Gate(4) as gate:
        for h in (svc, gate):
            assert not h.is_name_keyed()
            # A key of another length, or not bytes, is refused and changes nothing.
            refused(903, h.set_name_key, bytes(15))
            refused(903, h.set_name_key, bytes(17))
            with pytest.raises(fl.ArgumentError):
                h.set_name_key("0123456789abcdef")
            assert not h.is_name_keyed()
            h.set_name_key(bytes(range(16)))
            assert h.is_name_keyed()
        s = svc.open_session(0, 10).session
        assert svc.acquire(1, s, "ledger").token == 1
        assert svc.locks() == ["ledger"]
        gate.admit("ledger", 2)
        refused(401, gate.admit, "ledger", 1)
        gate.set_name_key()  # again, from os.urandom: the entries are kept
        assert gate.entries() == {"ledger": 2}
        assert gate.highest("ledger") == 2
        # Restored keyed from the start: the same service and gate, keyed; a key of
        # another length is refused before the bytes are read (junk with it is the key's
        # refusal, junk alone is bad magic).
        snap, gsnap = svc.snapshot(), gate.snapshot()
        refused(903, fl.Service.restore, snap, 2, 4, 4, key=bytes(15))
        refused(903, fl.Gate.restore, gsnap, 4, key=bytes(17))
        refused(903, fl.Service.restore, b"xyz", 2, 4, 4, key=bytes(15))
        refused(903, fl.Gate.restore, b"xyz", 4, key=bytes(17))
        refused(503, fl.Service.restore, b"xyz", 2, 4, 4, key=bytes(16))
        refused(503, fl.Gate.restore, b"xyz", 4, key=bytes(16))
        with fl.Service.restore(snap, 2, 4, 4, key=os.urandom(fl.NAME_KEY_LEN)) as back, \
                fl.Gate.restore(gsnap, 4, key=os.urandom(fl.NAME_KEY_LEN)) as gate2:
            assert back.is_name_keyed() and gate2.is_name_keyed()
            assert back.snapshot() == snap and gate2.snapshot() == gsnap
            assert back.locks() == ["ledger"]
            assert back.release(2, s, "ledger").token == 1
            refused(401, gate2.admit, "ledger", 1)


# ------------------------------------------------ semaphores, labels, watches, revision

def test_semaphore_permits_fifo_with_labels_and_a_watcher():
    with fl.Service(8, 8, 16, max_watchers=2) as svc:
        assert svc.config().max_watchers == 2
        a = svc.open_labeled(0, 100, "worker-a").session
        b = svc.open_labeled(0, 100, b"worker-b").session
        w = svc.open_session(0, 100).session
        c = svc.open_labeled(0, 100, "").session
        assert svc.session(a).label == "worker-a" and svc.session(c).label == ""
        assert svc.session(w).label == ""

        got = svc.watch(0, w, "pool")
        assert got == fl.Watching(holders=0) and got.events == ()
        info = svc.session(w)
        assert (info.holds, info.waits, info.watches) == (0, 0, 1)

        got = svc.acquire(0, a, "pool", fl.Permits(2, 3))
        assert got == fl.Granted(mode=fl.Permits(count=2, limit=3), token=1)
        assert got.events == (fl.HolderChanged(session=w, lock="pool", holder=a,
                                               mode=fl.Permits(2, 3), token=1,
                                               change=fl.Change.GRANTED, label="worker-a"),)
        assert svc.permits("pool") == fl.PermitsInUse(in_use=2, limit=3)

        got = svc.acquire(0, b, "pool", fl.Permits(2, 3), wait="forever")
        assert got == fl.Queued(mode=fl.Permits(2, 3), position=1)
        assert svc.holders("pool") == [fl.Holder(a, 1, fl.Permits(2, 3), "worker-a")]
        assert svc.waiters("pool") == [fl.Waiter(b, fl.Permits(2, 3), None, "worker-b")]
        # One session's hold: a holds; b only waits, w only watches, 99 is no session.
        assert svc.hold(a, "pool") == fl.Holder(a, 1, fl.Permits(2, 3), "worker-a")
        assert svc.hold(a, b"pool") == svc.hold(a, "pool")
        for none in ((b, "pool"), (w, "pool"), (99, "pool"), (a, "never")):
            assert svc.hold(*none) is None, none
        with pytest.raises(fl.ArgumentError):
            svc.hold(-1, "pool")
        refused(fl.Result.INVALID_UTF8, svc.hold, a, b"\xff")
        # 2 + 1 fits the limit, but b waits ahead: a try-acquire is busy (strict FIFO).
        assert svc.acquire(0, c, "pool", fl.Permits(1, 3)) == fl.Busy()

        got = svc.release(1, a, "pool")
        assert got == fl.Released(token=1)
        assert got.events == (
            fl.HolderChanged(w, "pool", a, fl.Permits(2, 3), 1, fl.Change.RELEASED, "worker-a"),
            fl.GrantedEvent(session=b, lock="pool", mode=fl.Permits(2, 3), token=2),
            fl.HolderChanged(w, "pool", b, fl.Permits(2, 3), 2, fl.Change.GRANTED, "worker-b"),
        )
        assert svc.unwatch(1, w, "pool") == fl.Unwatched()
        got = svc.watch(1, c, "pool")
        assert got == fl.Watching(holders=1)
        assert got.events == (
            fl.HolderChanged(c, "pool", b, fl.Permits(2, 3), 2, fl.Change.HOLDING, "worker-b"),)
        got = svc.close_session(2, b)
        assert [e.kind for e in got.events] == ["released", "holder_changed"]
        assert got.events[1].change == fl.Change.CLOSED and got.events[1].session == c
        assert svc.permits("pool") is None
        assert svc.permits("never") is None


def test_semaphore_watch_and_label_refusals_change_nothing():
    with fl.Service(4, 4, 8, max_watchers=1) as svc:
        a = svc.open_labeled(0, 100, "a").session
        b = svc.open_session(0, 100).session
        svc.acquire(0, a, "pool", fl.Permits(1, 2))
        svc.acquire(0, a, "plain")
        svc.watch(0, a, "pool")
        before = svc.snapshot()
        e = refused(fl.Result.LIMIT_MISMATCH, svc.acquire, 0, b, "pool", fl.Permits(1, 3))
        assert e.kind == "limit_mismatch"
        refused(fl.Result.LIMIT_MISMATCH, svc.acquire, 0, b, "pool", "shared")
        refused(fl.Result.LIMIT_MISMATCH, svc.acquire, 0, b, "plain", fl.Permits(1, 3))
        refused(fl.Result.BAD_PERMITS, svc.acquire, 0, b, "pool", fl.Permits(0, 2))
        refused(fl.Result.BAD_PERMITS, svc.acquire, 0, b, "pool", fl.Permits(3, 2))
        refused(fl.Result.ALREADY_WATCHING, svc.watch, 0, a, "pool")
        refused(fl.Result.NOT_WATCHING, svc.unwatch, 0, b, "pool")
        e = refused(fl.Result.CAPACITY_EXCEEDED, svc.watch, 0, b, "pool")
        assert "watchers" in e.detail
        e = refused(fl.Result.LABEL_TOO_LONG, svc.open_labeled, 0, 10, "l" * 65)
        assert e.kind == "label_too_long"
        # judged before the core is given the input: not even time moves
        refused(fl.Result.LABEL_TOO_LONG, svc.open_labeled, 50, 10, "l" * 65)
        assert svc.now() == 0
        refused(fl.Result.INVALID_UTF8, svc.open_labeled, 0, 10, b"\xff")
        refused(fl.Result.UNKNOWN_SESSION, svc.watch, 0, 99, "pool")
        for bad in (fl.Permits(-1, 2), fl.Permits(1, 1 << 32), fl.Permits("1", 2)):
            with pytest.raises(fl.ArgumentError):
                svc.acquire(0, b, "pool", bad)
        with pytest.raises(fl.ArgumentError):
            svc.open_labeled(0, 10, 7)
        assert svc.snapshot() == before
        assert svc.open_labeled(0, 10, "l" * 64).kind == "opened"


def test_raise_revision_puts_the_next_token_above_the_floor():
    with fl.Service(2, 2, 2) as svc:
        a = svc.open_session(0, 10).session
        assert svc.acquire(0, a, "l").token == 1
        assert svc.raise_revision(1000) == 1000
        assert svc.raise_revision(5) == 1000
        before = svc.snapshot()
        e = refused(fl.Result.BAD_CONFIG, svc.raise_revision, (1 << 62) + 1)
        assert "2^62" in e.detail
        with pytest.raises(fl.ArgumentError):
            svc.raise_revision(-1)
        with pytest.raises(fl.ArgumentError):
            svc.raise_revision(1 << 64)
        assert svc.snapshot() == before and svc.revision() == 1000
        assert svc.acquire(0, a, "m").token == 1001
        assert svc.holders("l")[0].token == 1
        assert fl.Service.restore(svc.snapshot(), 2, 2, 2).revision() == 1001


def test_max_watchers_zero_turns_watches_off():
    with fl.Service(2, 2, 2, max_watchers=0) as svc:
        a = svc.open_session(0, 10).session
        refused(fl.Result.CAPACITY_EXCEEDED, svc.watch, 0, a, "l")
    with fl.Service.placed(2, 2, 4, max_watchers=1) as svc:
        assert svc.config().max_watchers == 1
        a = svc.open_session(0, 10).session
        assert svc.watch(0, a, "l").kind == "watching"


def test_a_placed_service_is_sized_for_its_max_watchers():
    assert fl.Service.layout(2, 2, 16, 8)[0] > fl.Service.layout(2, 2, 16)[0]
    assert fl.Service.layout(2, 2, 16, 0)[0] < fl.Service.layout(2, 2, 16)[0]
    with fl.Service(2, 2, 16, max_watchers=8) as svc:
        a = svc.open_session(0, 10).session
        svc.watch(0, a, "l")
        snap = svc.snapshot()
    refused(fl.Result.BUFFER_TOO_SMALL, fl.Service.restore_placed, snap, 2, 2, 16)
    with fl.Service.restore_placed(snap, 2, 2, 16, max_watchers=8) as copy:
        assert copy.snapshot() == snap and copy.config().max_watchers == 8
        assert copy.unwatch(1, a, "l") == fl.Unwatched()


def test_a_refusal_keeps_its_own_message_when_its_advance_queued_events():
    # Nine expiries overflow the first slots the drain offers; the drain's own size
    # query must not replace the refusal's message.
    with fl.Service(16, 16, 16) as svc:
        for _ in range(9):
            svc.open_session(0, 5)
        e = refused(fl.Result.UNKNOWN_SESSION, svc.keep_alive, 10, 999)
        assert e.kind == "unknown_session"
        assert "999" in e.detail and "999" in str(e), repr(e)
        assert [ev.kind for ev in e.events] == ["session_expired"] * 9
        e = refused(fl.Result.TIME_WENT_BACKWARDS, svc.tick, 3)
        assert "backwards" in e.detail, repr(e)


def test_a_keeper_needs_a_margin_of_a_tick_and_room_for_its_keep_alives():
    # margin 0 would let the lease read safe up to a tick after the session expired (the
    # client's ticks and the service's have any phase between them); margin >= ttl and
    # an interval that cannot land while the lease is safe are refused too.
    for ttl, interval, margin in [(10, 3, 0), (10, 3, 10), (10, 0, 2), (10, 8, 2)]:
        refused(fl.Result.BAD_CONFIG, fl.Keeper, ttl, interval, margin)
    with fl.Keeper(10, 8, 1) as keeper:
        keeper.keep_alive_sent(0)
