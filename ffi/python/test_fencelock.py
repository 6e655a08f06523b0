"""The seed's GC-pause timeline and the bad-input rules, from Python through ctypes only.

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
            # Burn 33 tokens so A's grant is token 34, as in the article.
            warm = svc.open_session(1000)
            for _ in range(33):
                svc.acquire(warm, "warmup")
                svc.release(warm, "warmup")
            svc.close_session(warm)
            burnt = svc.outputs()
            self.assertEqual(len(burnt), 68)
            self.assertEqual(burnt[-2]["token"], 33)

            # t0: A and B open (ttl 10); A acquires with token 34; B queues.
            a, b = svc.open_session(10), svc.open_session(10)
            self.assertEqual([o["kind"] for o in svc.outputs()], ["session_opened"] * 2)
            svc.acquire(a, JOB)
            self.assertEqual(svc.outputs(), [{"kind": "granted", "session": a, "lock": JOB,
                                              "mode": "exclusive", "token": 34}])
            svc.acquire(b, JOB, wait="forever")
            self.assertEqual(svc.outputs(), [{"kind": "queued", "session": b, "lock": JOB,
                                              "mode": "exclusive", "position": 1}])
            # A pauses for 25 s; B heartbeats every 3 s.
            for t in (3, 6, 9):
                svc.tick(t)
                svc.keep_alive(b)
                self.assertEqual(svc.outputs(), [{"kind": "session_renewed", "session": b,
                                                  "expires_at": t + 10}])
            # t = 10: A expires, its hold is released, B is granted 35.
            svc.tick(10)
            self.assertEqual(svc.outputs(), [
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
        self.assertEqual(gate.highest("storage"), 35)
        gate.close()

        # A's keeper (ttl 10, heartbeat 3, margin 2) would have stopped it first.
        keeper = fl.Keeper(10, 3, 2)
        keeper.heartbeat_sent(0)
        self.assertTrue(keeper.heartbeat_acked(0))
        self.assertTrue(keeper.may_act(1))
        self.assertEqual(keeper.lease(8), ("jeopardy", 0, 10))
        self.assertEqual(keeper.lease(26)[0], "expired")
        keeper.close()


class Frames(unittest.TestCase):
    def test_frame_in_frames_out(self):
        with fl.Service(4, 4, 8) as svc:
            # OpenSession{ttl 10} -> SessionOpened{session 1, expires_at 10}
            self.assertEqual(svc.handle_frame(bytes([0, 10])), [bytes([0, 1, 10])])
            # Acquire{1, "a", Exclusive, None, None} -> Granted{1, "a", Exclusive, token 1}
            self.assertEqual(svc.handle_frame(bytes([3, 1, 1, 97, 0, 0, 0])),
                             [bytes([4, 1, 1, 97, 0, 1])])

    def test_too_small_keeps_outputs_and_applies_once(self):
        with fl.Service(4, 4, 8) as svc:
            with self.assertRaises(fl.FencelockError) as small:
                svc.handle_frame(bytes([0, 10]), cap=2)
            self.assertEqual(small.exception.code, 502)
            buf = fl.C.create_string_buffer(64)
            n = fl.C.c_size_t()
            self.assertEqual(fl.lib.fencelock_service_drain_frames(svc._h, buf, 64,
                                                                   fl.C.byref(n)), 0)
            self.assertEqual(buf.raw[:n.value], bytes([3, 0, 0, 1, 10]))
            self.assertEqual(svc.open_session(5), 2)  # the first input applied exactly once

    def test_garbage_frames_change_nothing(self):
        with fl.Service(4, 4, 8) as svc:
            svc.handle_frame(bytes([0, 10]))
            before = svc.snapshot()
            for frame in (b"", b"\x7f", b"\x00\x0a\x00", b"\x03\x01\x41", b"\xff" * 11):
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
            s = svc.open_session(5)
            svc.acquire(s, "held")
            svc.outputs()
            before = svc.snapshot()
            self.refused(201, svc.acquire, s, "")
            e = self.refused(202, svc.acquire, s, "ninebytes")
            self.assertIn("9 bytes, at most 8", str(e))
            self.refused(202, svc.acquire, s, "x" * 1000)
            self.refused(902, svc.acquire, s, b"h\xc3\x28")
            self.refused(903, svc.acquire, s, "x", mode="upgrade")
            self.refused(903, svc.acquire, s, "x", wait="sometimes")
            self.refused(101, svc.acquire, 99, "x")
            self.refused(102, svc.release, s, "free")
            self.refused(105, svc.acquire, s, "held", mode="shared")
            self.refused(203, svc.open_session, 0)
            self.assertEqual(svc.snapshot(), before)
            self.assertEqual(svc.outputs(), [])
            svc.tick(1)  # the handle still works after every refusal
            self.refused(205, svc.tick, 0)

    def test_truncated_snapshots_are_refused(self):
        with fl.Service(2, 2, 2) as svc:
            s = svc.open_session(5)
            svc.acquire(s, "held")
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
        self.assertTrue(fl.message(401).startswith("stale"))
        self.assertEqual(fl.message(12345), "unknown result code")
        self.refused(206, fl.Keeper, 10, 0, 2)


if __name__ == "__main__":
    runner = unittest.TextTestRunner(verbosity=2)
    result = runner.run(unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__]))
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"python ctypes: {passed} passed, {failed} failed")
    sys.exit(1 if failed or result.skipped else 0)
