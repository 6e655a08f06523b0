"""The GC-pause timeline and the bad-input rules, from Python through ctypes only.

Run: FENCELOCK_LIB=path/to/libfencelock.so python3 ffi/python/test_fencelock.py
Prints 'N passed, N failed' and exits 1 on any failure.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fencelock as fl  # noqa: E402

JOB = "jobs/reindex"


class GcPauseTimeline(unittest.TestCase):
    def test_gc_pause_timeline(self):
        with fl.Service(8, 8, 16) as svc:
            # Burn 33 tokens so A's grant is token 34, as in Martin Kleppmann's "How to do
            # distributed locking".
            warm = svc.open_session(0, 1000)["session"]
            for t in range(1, 34):
                got = svc.acquire(0, warm, "warmup")
                self.assertEqual(got, {"kind": "granted", "mode": "exclusive", "token": t})
                self.assertEqual(got.events, [])
                self.assertEqual(svc.release(0, warm, "warmup"),
                                 {"kind": "released", "token": t})
            self.assertEqual(svc.close_session(0, warm), {"kind": "closed"})

            # t0: A and B open (ttl 10); A acquires with token 34; B queues.
            a = svc.open_session(0, 10)
            self.assertEqual(a, {"kind": "opened", "session": 2, "expires_at": 10})
            a = a["session"]
            b = svc.open_session(0, 10)["session"]
            self.assertEqual(svc.acquire(0, a, JOB),
                             {"kind": "granted", "mode": "exclusive", "token": 34})
            self.assertEqual(svc.acquire(0, b, JOB, wait="forever"),
                             {"kind": "queued", "mode": "exclusive", "position": 1})
            # A pauses for 25 s; B's keep-alives arrive at 3, 6, 9, with no tick between.
            for t in (3, 6, 9):
                got = svc.keep_alive(t, b)
                self.assertEqual(got, {"kind": "kept_alive", "expires_at": t + 10})
                self.assertEqual(got.events, [])
            # t = 10: A expires, its hold is released, B is granted 35.
            ticked = svc.tick(10)
            self.assertEqual(ticked, {"kind": "ticked", "now": 10})
            self.assertEqual(ticked.events, [
                {"kind": "session_expired", "session": a},
                {"kind": "released", "session": a, "lock": JOB, "token": 34,
                 "reason": "expired"},
                {"kind": "granted", "session": b, "lock": JOB, "mode": "exclusive",
                 "token": 35},
            ])
            self.assertEqual(svc.holders(JOB), [(b, 35)])
            self.assertEqual(svc.revision(), 35)

        # B writes with 35; A resumes at t = 26 and writes with 34: refused.
        gate = fl.Gate(4)
        gate.admit("storage", 35)
        with self.assertRaises(fl.FencelockError) as stale:
            gate.admit("storage", 34)
        self.assertEqual(stale.exception.code, 401)
        self.assertTrue(str(stale.exception).startswith("401: stale"))
        self.assertIn("34", str(stale.exception))
        self.assertEqual(gate.highest("storage"), 35)
        gate.close()

        # A's keeper (ttl 10, keep-alive every 3, margin 2) would have stopped it first.
        keeper = fl.Keeper(10, 3, 2)
        keeper.keep_alive_sent(0)
        self.assertTrue(keeper.keep_alive_acked(0))
        self.assertEqual(keeper.next_keep_alive(1), 3)
        self.assertTrue(keeper.may_act(1))
        self.assertEqual(keeper.lease(8), ("jeopardy", 0, 10))
        self.assertEqual(keeper.lease(26)[0], "expired")
        with self.assertRaises(fl.FencelockError) as unknown:
            keeper.keep_alive_acked(4)  # no keep-alive was sent at 4
        self.assertEqual(unknown.exception.code, 601)
        self.assertTrue(str(unknown.exception).startswith("601: unknown keep-alive"))
        keeper.close()

    def test_a_refused_input_keeps_the_advance(self):
        with fl.Service(4, 4, 8) as svc:
            a = svc.open_session(0, 5)["session"]
            b = svc.open_session(0, 100)["session"]
            svc.acquire(0, a, "l")
            svc.acquire(0, b, "l", wait="forever")
            # At 7, A (expired at 5 in the advance) asks to release: refused, but the
            # advance's events stand and come with the error.
            with self.assertRaises(fl.FencelockError) as e:
                svc.release(7, a, "l")
            self.assertEqual(e.exception.code, 101)
            self.assertEqual([o["kind"] for o in e.exception.events],
                             ["session_expired", "released", "granted"])
            self.assertEqual(svc.now(), 7)


class Frames(unittest.TestCase):
    def test_frame_in_reply_out(self):
        with fl.Service(4, 4, 8) as svc:
            # OpenSession{now 0, ttl 10} -> Opened{session 1, expires_at 10}
            got = svc.handle_frame(bytes([0, 0, 10]))
            self.assertEqual(got, {"kind": "opened", "session": 1, "expires_at": 10})
            self.assertEqual(got.frame, bytes([0, 1, 10]))
            # Acquire{now 0, 1, "a", Exclusive, None, None} -> Granted{Exclusive, token 1}
            got = svc.handle_frame(bytes([3, 0, 1, 1, 97, 0, 0, 0]))
            self.assertEqual(got.frame, bytes([3, 0, 1]))
            self.assertEqual(got["token"], 1)
            # Tick{now 4} -> Ticked{4}
            self.assertEqual(svc.handle_frame(bytes([6, 4])).frame, bytes([10, 4]))

    def test_garbage_frames_change_nothing(self):
        with fl.Service(4, 4, 8) as svc:
            svc.handle_frame(bytes([0, 0, 10]))
            before = svc.snapshot()
            for frame in (b"", b"\x7f", b"\x00\x00\x0a\x00", b"\x03\x00\x01\x41", b"\xff" * 11):
                with self.assertRaises(fl.FencelockError) as bad:
                    svc.handle_frame(frame)
                self.assertEqual(bad.exception.code, 501)
            self.assertEqual(svc.snapshot(), before)


class BadInput(unittest.TestCase):
    def refused(self, code, fn, *args, **kw):
        with self.assertRaises(fl.FencelockError) as e:
            fn(*args, **kw)
        self.assertEqual(e.exception.code, code, str(e.exception))
        return e.exception

    def test_bad_names_modes_and_sessions_change_nothing(self):
        with fl.Service(2, 2, 2, max_name_len=8) as svc:
            s = svc.open_session(0, 5)["session"]
            svc.acquire(0, s, "held")
            before = svc.snapshot()
            self.refused(201, svc.acquire, 0, s, "")
            e = self.refused(202, svc.acquire, 0, s, "ninebytes")
            self.assertIn("9 bytes, at most 8", str(e))
            self.refused(202, svc.acquire, 0, s, "x" * 1000)
            self.refused(902, svc.acquire, 0, s, b"h\xc3\x28")
            self.refused(903, svc.acquire, 0, s, "x", mode="upgrade")
            self.refused(903, svc.acquire, 0, s, "x", wait="sometimes")
            self.refused(101, svc.acquire, 0, 99, "x")
            self.refused(101, svc.acquire, 0, 99, "")  # the core's order: session first
            self.refused(102, svc.release, 0, s, "free")
            self.refused(105, svc.acquire, 0, s, "held", mode="shared")
            self.refused(203, svc.open_session, 0, 0)
            # Not a u64: refused before the library is called.
            self.refused(903, svc.keep_alive, -1, s)
            self.refused(903, svc.keep_alive, 0, 1 << 64)
            self.assertEqual(svc.snapshot(), before)
            self.assertEqual(svc.tick(1).events, [])  # the handle still works
            self.refused(205, svc.tick, 0)
            self.refused(205, svc.keep_alive, 0, s)

    def test_truncated_snapshots_are_refused(self):
        with fl.Service(2, 2, 2) as svc:
            s = svc.open_session(0, 5)["session"]
            svc.acquire(0, s, "held")
            snap = svc.snapshot()
        for cut in range(len(snap)):
            with self.assertRaises(fl.FencelockError) as e:
                fl.Service.restore(snap[:cut], 2, 2, 2)
            self.assertIn(e.exception.code, (503, 505))
        self.refused(301, fl.Service.restore, snap, 0, 0, 0)
        with fl.Service.restore(snap, 2, 2, 2) as back:
            self.assertEqual(back.snapshot(), snap)

    def test_null_handles_and_messages(self):
        self.assertEqual(fl.lib.fencelock_service_tick(None, 1), 901)
        self.assertEqual(fl.lib.fencelock_gate_admit(None, b"r", 1, 1), 901)
        fl.lib.fencelock_service_free(None)  # NULL is fine
        self.assertEqual(fl.message(401), "stale")
        self.assertEqual(fl.message(601), "unknown keep-alive")
        self.assertEqual(fl.message(12345), "unknown result code")
        self.refused(206, fl.Keeper, 10, 0, 2)


if __name__ == "__main__":
    runner = unittest.TextTestRunner(verbosity=2)
    result = runner.run(unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__]))
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"python ctypes: {passed} passed, {failed} failed")
    sys.exit(1 if failed or result.skipped else 0)
