//! The extern functions called from Rust: the same story and bad-input rules as the C
//! test, but runnable under Miri (which checks every pointer the ABI touches).
//!
//! They are unit tests rather than `tests/*.rs` because an integration test cannot name
//! this library: its crate name, `fencelock`, is also the core's.

use std::ptr::{null, null_mut};

use fencelock::{Error, Input, LockName, Mode, Output, Reply, SessionId, Tick, Token, Wait};

use crate::*;

const X: fencelock_mode = fencelock_mode::Exclusive;
const S: fencelock_mode = fencelock_mode::Shared;
const NONE: fencelock_wait = fencelock_wait::None;
const FOREVER: fencelock_wait = fencelock_wait::Forever;

fn name(s: &str) -> (*const u8, usize) {
    (s.as_ptr(), s.len())
}

/// A deterministic generator (xorshift64*), seeded only by its caller.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn config(sessions: u32, locks: u32, claims: u32) -> fencelock_config {
    fencelock_config {
        capacity: fencelock_capacity {
            sessions,
            locks,
            claims,
        },
        lock_delay: 0,
        max_name_len: FENCELOCK_MAX_NAME_LEN as u32,
        max_watchers: FENCELOCK_DEFAULT_MAX_WATCHERS,
    }
}

fn new_service(c: &fencelock_config) -> *mut fencelock_service {
    let mut svc = null_mut();
    assert_eq!(
        // SAFETY: valid pointers to this test's locals.
        unsafe { fencelock_service_new(c, &mut svc) },
        fencelock_result::Ok
    );
    assert!(!svc.is_null());
    svc
}

/// A reply struct with garbage in it, to see that every call writes it.
fn junk_reply() -> fencelock_reply {
    fencelock_reply {
        kind: fencelock_reply_kind::Ticked,
        mode: S,
        position: 7,
        pending: 7,
        session: 7,
        expires_at: 7,
        token: 7,
        now: 7,
        count: 7,
        limit: 7,
        holders: 7,
    }
}

fn drain(svc: *mut fencelock_service) -> Vec<fencelock_output> {
    let mut got = Vec::new();
    loop {
        let mut o = std::mem::MaybeUninit::<fencelock_output>::uninit();
        // SAFETY: live handle; the out-pointer may be uninitialised (written, never read).
        match unsafe { fencelock_service_poll_output(svc, o.as_mut_ptr()) } {
            // SAFETY: OK means it was written.
            fencelock_result::Ok => got.push(unsafe { o.assume_init() }),
            fencelock_result::Done => return got,
            other => panic!("poll_output: {other:?}"),
        }
    }
}

fn lock_of(o: &fencelock_output) -> String {
    let bytes: Vec<u8> = o.lock[..o.lock_len].iter().map(|c| *c as u8).collect();
    String::from_utf8(bytes).unwrap()
}

fn snapshot(svc: *mut fencelock_service) -> Vec<u8> {
    let mut need = 0;
    assert_eq!(
        // SAFETY: valid pointers to this test's locals; live handle.
        unsafe { fencelock_service_snapshot_len(svc, &mut need) },
        fencelock_result::Ok
    );
    let mut buf = vec![0u8; need];
    let mut len = 0;
    // SAFETY: buf has `need` bytes.
    let r = unsafe { fencelock_service_snapshot(svc, buf.as_mut_ptr(), need, &mut len) };
    assert_eq!(r, fencelock_result::Ok);
    buf.truncate(len);
    buf
}

fn acquire(
    svc: *mut fencelock_service,
    now: u64,
    s: u64,
    lock: &str,
    mode: fencelock_mode,
    wait: fencelock_wait,
) -> (fencelock_result, fencelock_reply) {
    let (p, n) = name(lock);
    let mut reply = junk_reply();
    // SAFETY: live handle; name valid for n bytes; reply writable.
    let r = unsafe {
        fencelock_service_acquire(
            svc,
            now,
            s,
            p,
            n,
            mode as u32,
            wait as u32,
            0,
            0,
            &mut reply,
        )
    };
    (r, reply)
}

fn release(
    svc: *mut fencelock_service,
    now: u64,
    s: u64,
    lock: &str,
) -> (fencelock_result, fencelock_reply) {
    let (p, n) = name(lock);
    let mut reply = junk_reply();
    // SAFETY: live handle; name valid for n bytes; reply writable.
    let r = unsafe { fencelock_service_release(svc, now, s, p, n, 0, &mut reply) };
    (r, reply)
}

fn release_hold(
    svc: *mut fencelock_service,
    now: u64,
    s: u64,
    lock: &str,
    token: u64,
    request_number: u64,
) -> (fencelock_result, fencelock_reply) {
    let (p, n) = name(lock);
    let mut reply = junk_reply();
    // SAFETY: live handle; name valid for n bytes; reply writable.
    let r = unsafe {
        fencelock_service_release_hold(svc, now, s, p, n, token, request_number, &mut reply)
    };
    (r, reply)
}

fn keep_alive(
    svc: *mut fencelock_service,
    now: u64,
    s: u64,
) -> (fencelock_result, fencelock_reply) {
    let mut reply = junk_reply();
    // SAFETY: live handle; reply writable.
    let r = unsafe { fencelock_service_keep_alive(svc, now, s, 0, &mut reply) };
    (r, reply)
}

fn close(svc: *mut fencelock_service, now: u64, s: u64) -> (fencelock_result, fencelock_reply) {
    let mut reply = junk_reply();
    // SAFETY: live handle; reply writable.
    let r = unsafe { fencelock_service_close_session(svc, now, s, 0, &mut reply) };
    (r, reply)
}

fn tick(svc: *mut fencelock_service, now: u64) -> fencelock_result {
    // SAFETY: live handle.
    unsafe { fencelock_service_tick(svc, now) }
}

fn open(svc: *mut fencelock_service, now: u64, ttl: u64) -> u64 {
    let mut reply = junk_reply();
    assert_eq!(
        // SAFETY: valid pointers to this test's locals; live handle.
        unsafe { fencelock_service_open_session(svc, now, ttl, &mut reply) },
        fencelock_result::Ok
    );
    assert_eq!(reply.kind, fencelock_reply_kind::Opened);
    assert_eq!(reply.expires_at, now + ttl);
    reply.session
}

fn granted(token: u64) -> (fencelock_result, fencelock_reply_kind, u64) {
    (fencelock_result::Ok, fencelock_reply_kind::Granted, token)
}

fn kind_token(
    r: (fencelock_result, fencelock_reply),
) -> (fencelock_result, fencelock_reply_kind, u64) {
    (r.0, r.1.kind, r.1.token)
}

fn last_error_of(svc: *const fencelock_service) -> String {
    let mut msg = [0 as std::ffi::c_char; 128];
    let mut len = 0;
    assert_eq!(
        // SAFETY: valid pointers to this test's locals; live handle.
        unsafe { fencelock_service_last_error(svc, msg.as_mut_ptr(), msg.len(), &mut len) },
        fencelock_result::Ok
    );
    msg[..len].iter().map(|c| *c as u8 as char).collect()
}

/// What a `_last_error` call writes, through `f(buf, len, &len)`.
fn message_of(f: &dyn Fn(*mut std::ffi::c_char, usize, *mut usize) -> fencelock_result) -> String {
    let mut msg = [0 as std::ffi::c_char; 128];
    let mut len = 0;
    assert_eq!(
        f(msg.as_mut_ptr(), msg.len(), &mut len),
        fencelock_result::Ok
    );
    msg[..len].iter().map(|c| *c as u8 as char).collect()
}

/// A service of `c` placed in a 16-aligned arena of exactly its layout's size: the
/// arena (which must outlive the service), the service, and the size.
fn placed_service(c: &fencelock_config) -> (Vec<u128>, *mut fencelock_service, usize) {
    let (mut size, mut align) = (0, 0);
    // SAFETY: valid pointers to this function's locals.
    let r = unsafe { fencelock_service_layout(&c.capacity, &mut size, &mut align) };
    assert_eq!(r, fencelock_result::Ok);
    assert!(align <= 16);
    let mut arena = vec![0u128; size / 16 + 1];
    let mut svc = null_mut();
    // SAFETY: the arena is 16-aligned and `size` bytes long; the caller keeps it.
    let r = unsafe { fencelock_service_init_in(arena.as_mut_ptr().cast(), size, c, &mut svc) };
    assert_eq!(r, fencelock_result::Ok);
    (arena, svc, size)
}

/// A placed service's block copied elsewhere (a host that moves or checkpoints its memory
/// by copying) is refused as a handle: the copy's tables still point into the original's
/// block, so every call on it would read and write memory the copy does not own. Each
/// handle knows its own address; the copy carries the original's. The original goes on,
/// and a gate copied out of its box is refused the same way.
#[test]
fn a_copied_handle_is_refused_and_its_original_goes_on() {
    let c = config(2, 2, 2);
    let (arena, svc, _) = placed_service(&c);
    let s = open(svc, 0, 50);
    // The copy's first 16 bytes, the handle's tag and home, are all a handle check reads
    // (a whole copy would also read the tables the library holds borrowed in the arena,
    // which Miri reports as the aliasing violation it is for a Rust caller).
    let mut copy = vec![0u128; arena.len()];
    // SAFETY: 16 readable bytes at the handle, 16 writable in `copy`; no overlap.
    unsafe { core::ptr::copy_nonoverlapping(svc.cast::<u8>(), copy.as_mut_ptr().cast(), 16) };
    let moved = copy.as_mut_ptr().cast::<fencelock_service>();
    let mut now = 7;
    // SAFETY: `moved` holds a byte copy of a live handle (refused before it is used);
    // `svc` is live.
    unsafe {
        assert_eq!(
            fencelock_service_now(moved, &mut now),
            fencelock_result::InvalidHandle
        );
        assert_eq!(now, 7, "nothing written");
        assert_eq!(
            fencelock_service_tick(moved, 9),
            fencelock_result::InvalidHandle
        );
        fencelock_service_free(moved); // frees nothing: not a live handle
    }
    assert_eq!(keep_alive(svc, 1, s).0, fencelock_result::Ok);
    let mut gate = null_mut();
    // SAFETY: valid pointers to this test's locals; the copy is refused before it is used.
    unsafe {
        assert_eq!(fencelock_gate_new(2, &mut gate), fencelock_result::Ok);
        let mut copied = std::mem::MaybeUninit::<fencelock_gate>::uninit();
        core::ptr::copy_nonoverlapping(gate.cast_const(), copied.as_mut_ptr(), 1);
        let mut highest = 0;
        let mut found = false;
        assert_eq!(
            fencelock_gate_highest(copied.as_ptr(), "r".as_ptr(), 1, &mut found, &mut highest),
            fencelock_result::InvalidHandle
        );
        assert_eq!(
            fencelock_gate_highest(gate, "r".as_ptr(), 1, &mut found, &mut highest),
            fencelock_result::Ok
        );
        fencelock_gate_free(gate);
    }
    // SAFETY: live handle, freed once (its arena still alive).
    unsafe { fencelock_service_free(svc) };
    drop(arena);
}

/// The GC-pause timeline: A holds with token 34 and pauses; B keeps its session alive at
/// 3, 6 and 9 with no tick in between (each input carries its own `now`); at 10 A expires
/// and B is granted 35; the gate refuses 34; A's keeper had said stop at 8.
#[test]
fn gc_pause_timeline_through_the_abi() {
    let svc = new_service(&config(8, 8, 16));
    let warm = open(svc, 0, 1000);
    for t in 1..=33 {
        assert_eq!(
            kind_token(acquire(svc, 0, warm, "warmup", X, NONE)),
            granted(t)
        );
        let (r, reply) = release(svc, 0, warm, "warmup");
        assert_eq!(
            (r, reply.kind, reply.token),
            (fencelock_result::Ok, fencelock_reply_kind::Released, t)
        );
    }
    let (r, reply) = close(svc, 0, warm);
    assert_eq!(
        (r, reply.kind),
        (fencelock_result::Ok, fencelock_reply_kind::Closed)
    );
    assert!(
        drain(svc).is_empty(),
        "the caller's answers are replies, not events"
    );

    let (a, b) = (open(svc, 0, 10), open(svc, 0, 10));
    let got = acquire(svc, 0, a, "jobs/reindex", X, NONE);
    assert_eq!(kind_token(got), granted(34));
    assert_eq!(got.1.mode, X);
    let (r, q) = acquire(svc, 0, b, "jobs/reindex", X, FOREVER);
    assert_eq!(
        (r, q.kind, q.position, q.mode),
        (fencelock_result::Ok, fencelock_reply_kind::Queued, 1, X)
    );
    for t in [3, 6, 9] {
        let (r, k) = keep_alive(svc, t, b);
        assert_eq!(
            (r, k.kind, k.expires_at, k.token),
            (
                fencelock_result::Ok,
                fencelock_reply_kind::KeptAlive,
                t + 10,
                0
            )
        );
        assert!(drain(svc).is_empty());
    }
    assert_eq!(tick(svc, 10), fencelock_result::Ok);
    let got: Vec<_> = drain(svc)
        .iter()
        .map(|o| (o.kind, o.session, o.token, o.reason, lock_of(o)))
        .collect();
    use fencelock_output_kind as K;
    use fencelock_release_reason as R;
    let job = || "jobs/reindex".to_string();
    assert_eq!(
        got,
        vec![
            (K::SessionExpired, a, 0, R::None, String::new()),
            (K::Released, a, 34, R::Expired, job()),
            (K::Granted, b, 35, R::None, job()),
        ]
    );

    let mut gate = null_mut();
    assert_eq!(
        // SAFETY: valid pointers to this test's locals.
        unsafe { fencelock_gate_new(4, &mut gate) },
        fencelock_result::Ok
    );
    let (p, n) = name("storage");
    // SAFETY: live gate; name valid.
    unsafe {
        assert_eq!(fencelock_gate_admit(gate, p, n, 35), fencelock_result::Ok);
        assert_eq!(
            fencelock_gate_admit(gate, p, n, 34),
            fencelock_result::Stale
        );
        fencelock_gate_free(gate);
    }
    let mut keeper = null_mut();
    let (mut ext, mut may, mut due) = (false, true, 0);
    // SAFETY: valid out-pointers; live keeper.
    unsafe {
        assert_eq!(
            fencelock_keeper_new(10, 3, 2, &mut keeper),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_keep_alive_sent(keeper, 0),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_keep_alive_acked(keeper, 0, &mut ext),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_next_keep_alive(keeper, 1, &mut due),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_may_act(keeper, 26, &mut may),
            fencelock_result::Ok
        );
        fencelock_keeper_free(keeper);
    }
    assert!(ext && !may);
    assert_eq!(due, 3);

    // Snapshot, restore: same bytes.
    let snap = snapshot(svc);
    let mut back = null_mut();
    let cap = fencelock_capacity {
        sessions: 8,
        locks: 8,
        claims: 16,
    };
    assert_eq!(
        // SAFETY: valid pointers to this test's locals.
        unsafe { fencelock_service_restore(&cap, snap.as_ptr(), snap.len(), &mut back) },
        fencelock_result::Ok
    );
    assert_eq!(snapshot(back), snap);
    // SAFETY: live handles, freed once.
    unsafe {
        fencelock_service_free(back);
        fencelock_service_free(svc);
    }
}

/// A refused input still advances time to its `now`: the advance's events are queued
/// and stand, and nothing else changes (the state equals a twin's that only ticked).
#[test]
fn a_refused_input_keeps_the_advance_and_nothing_else() {
    let twin = new_service(&config(4, 4, 8));
    let svc = new_service(&config(4, 4, 8));
    for s in [svc, twin] {
        let a = open(s, 0, 5);
        let b = open(s, 0, 100);
        assert_eq!(kind_token(acquire(s, 0, a, "l", X, NONE)), granted(1));
        assert_eq!(
            acquire(s, 0, b, "l", X, FOREVER).1.kind,
            fencelock_reply_kind::Queued
        );
    }
    // Session 9 does not exist: refused, but only after the advance to 5 expired A.
    let (r, reply) = acquire(svc, 5, 9, "", X, NONE);
    assert_eq!(
        r,
        fencelock_result::UnknownSession,
        "the core's precedence: session first"
    );
    assert_eq!(
        reply,
        fencelock_reply::NONE,
        "a refused input's reply is zeroed"
    );
    assert_eq!(
        last_error_of(svc),
        Error::UnknownSession(SessionId(9)).to_string()
    );
    assert_eq!(tick(twin, 5), fencelock_result::Ok);
    let kinds = |v: Vec<fencelock_output>| {
        v.iter()
            .map(|o| (o.kind, o.session, o.token))
            .collect::<Vec<_>>()
    };
    let got = kinds(drain(svc));
    assert_eq!(got.len(), 3);
    assert_eq!(got, kinds(drain(twin)));
    assert_eq!(snapshot(svc), snapshot(twin));
    // Time never goes backwards, and that refusal changes nothing at all.
    let before = snapshot(svc);
    assert_eq!(keep_alive(svc, 4, 2).0, fencelock_result::TimeWentBackwards);
    assert_eq!(snapshot(svc), before);
    // SAFETY: live handles, freed once.
    unsafe {
        fencelock_service_free(svc);
        fencelock_service_free(twin);
    }
}

fn frame_of(input: Input) -> Vec<u8> {
    let mut buf = [0u8; FENCELOCK_MAX_FRAME_LEN];
    let n = input.to_frame(&mut buf).unwrap();
    buf[..n].to_vec()
}

fn reply_frame(reply: Reply) -> Vec<u8> {
    let mut buf = [0u8; FENCELOCK_MAX_FRAME_LEN];
    let n = reply.to_frame(&mut buf).unwrap();
    buf[..n].to_vec()
}

/// Calls `fencelock_service_handle_frame` with a full reply buffer; returns the code,
/// the reply struct and the reply frame.
fn handle_frame(
    svc: *mut fencelock_service,
    frame: &[u8],
) -> (fencelock_result, fencelock_reply, Vec<u8>) {
    let mut reply = junk_reply();
    let mut out = [0u8; FENCELOCK_MAX_FRAME_LEN];
    let mut n = usize::MAX;
    // SAFETY: live handle; buffers valid for their lengths (the empty frame's pointer is
    // a dangling-free empty slice's).
    let r = unsafe {
        fencelock_service_handle_frame(
            svc,
            frame.as_ptr(),
            frame.len(),
            &mut reply,
            out.as_mut_ptr(),
            out.len(),
            &mut n,
        )
    };
    (r, reply, out[..n].to_vec())
}

/// Drains the queued events as frames.
fn drain_frames(svc: *mut fencelock_service) -> Vec<Vec<u8>> {
    let mut need = 0;
    // SAFETY: live handle; a size query.
    let r = unsafe { fencelock_service_drain_frames(svc, null_mut(), 0, &mut need) };
    assert!(matches!(
        r,
        fencelock_result::Ok | fencelock_result::BufferTooSmall
    ));
    let mut buf = vec![0u8; need];
    let mut n = 0;
    // SAFETY: live handle; buf valid for `need` bytes.
    let r = unsafe { fencelock_service_drain_frames(svc, buf.as_mut_ptr(), need, &mut n) };
    assert_eq!((r, n), (fencelock_result::Ok, need));
    let mut frames = Vec::new();
    let mut at = 0;
    while at < n {
        let len = u16::from_le_bytes([buf[at], buf[at + 1]]) as usize;
        frames.push(buf[at + 2..at + 2 + len].to_vec());
        at += 2 + len;
    }
    frames
}

/// The frame entry point: the reply as a struct and as the core's own frame bytes; the
/// events queued and drained as frames; garbage refused with nothing changed.
#[test]
fn frames_in_reply_frames_out() {
    let svc = new_service(&config(4, 4, 8));
    let open = frame_of(Input::OpenSession {
        now: Tick(0),
        ttl: 10,
    });
    let (r, reply, bytes) = handle_frame(svc, &open);
    assert_eq!(r, fencelock_result::Ok);
    assert_eq!(
        (reply.kind, reply.session, reply.expires_at),
        (fencelock_reply_kind::Opened, 1, 10)
    );
    let opened = Reply::Opened {
        session: SessionId(1),
        expires_at: Tick(10),
    };
    assert_eq!(bytes, reply_frame(opened));
    let (r, reply, bytes) = handle_frame(svc, &frame_of(Input::Tick { now: Tick(4) }));
    assert_eq!(
        (r, reply.kind, reply.now),
        (fencelock_result::Ok, fencelock_reply_kind::Ticked, 4)
    );
    assert_eq!(bytes, reply_frame(Reply::Ticked { now: Tick(4) }));

    // A holds "a"; B waits; A's close (a frame) replies CLOSED and queues the events.
    let open4 = frame_of(Input::OpenSession {
        now: Tick(4),
        ttl: 10,
    });
    assert_eq!(
        handle_frame(svc, &open).0,
        fencelock_result::TimeWentBackwards
    );
    assert_eq!(handle_frame(svc, &open4).1.session, 2);
    let acquire = |s, wait| {
        frame_of(Input::Acquire {
            now: Tick(4),
            session: SessionId(s),
            lock: LockName::new("a").unwrap(),
            mode: Mode::Exclusive,
            wait,
            request: None,
        })
    };
    assert_eq!(
        handle_frame(svc, &acquire(1, Wait::None)).1.kind,
        fencelock_reply_kind::Granted
    );
    assert_eq!(
        handle_frame(svc, &acquire(2, Wait::Forever)).1.kind,
        fencelock_reply_kind::Queued
    );
    assert!(drain_frames(svc).is_empty());
    let closing = frame_of(Input::CloseSession {
        now: Tick(4),
        session: SessionId(1),
        request: None,
    });
    let (r, reply, bytes) = handle_frame(svc, &closing);
    assert_eq!(
        (r, reply.kind),
        (fencelock_result::Ok, fencelock_reply_kind::Closed)
    );
    assert_eq!(bytes, reply_frame(Reply::Closed));
    let mut pending = 0;
    // SAFETY: live handle; writable count.
    unsafe { fencelock_service_pending(svc, &mut pending) };
    assert_eq!(pending, 2);
    let events: Vec<Output> = drain_frames(svc)
        .iter()
        .map(|f| Output::from_frame(f).unwrap())
        .collect();
    assert!(matches!(
        &events[..],
        [
            Output::Released {
                session: SessionId(1),
                ..
            },
            Output::Granted {
                session: SessionId(2),
                ..
            }
        ]
    ));

    // Garbage: refused, nothing written or queued, nothing changed.
    let before = snapshot(svc);
    for bad in [&[][..], &[0x7f], &[0, 0, 10, 0], &[3, 1, 1, 0x41]] {
        let (r, reply, bytes) = handle_frame(svc, bad);
        assert_eq!(
            (r, reply, bytes.len()),
            (fencelock_result::BadFrame, fencelock_reply::NONE, 0)
        );
    }
    assert_eq!(snapshot(svc), before);
    assert!(drain_frames(svc).is_empty());

    // A reply buffer smaller than any reply could need: refused before anything applies.
    let mut reply = junk_reply();
    let (mut small, mut n) = ([0u8; 4], 0);
    let tick5 = frame_of(Input::Tick { now: Tick(5) });
    // SAFETY: live handle; buffers valid for their lengths.
    let r = unsafe {
        fencelock_service_handle_frame(
            svc,
            tick5.as_ptr(),
            tick5.len(),
            &mut reply,
            small.as_mut_ptr(),
            4,
            &mut n,
        )
    };
    assert_eq!(
        (r, n, reply),
        (
            fencelock_result::BufferTooSmall,
            FENCELOCK_MAX_FRAME_LEN,
            fencelock_reply::NONE
        )
    );
    // No reply frame wanted (cap 0, NULL buffer and length): the reply struct only.
    // SAFETY: live handle; the frame valid for its length.
    let r = unsafe {
        fencelock_service_handle_frame(
            svc,
            tick5.as_ptr(),
            tick5.len(),
            &mut reply,
            null_mut(),
            0,
            null_mut(),
        )
    };
    assert_eq!(
        (r, reply.kind, reply.now),
        (fencelock_result::Ok, fencelock_reply_kind::Ticked, 5)
    );
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// A placed service's ring is the core's bounded sink: the core refuses an input with
/// BUFFER_TOO_SMALL (changing nothing) while the ring has less room than the input could
/// need, and takes it once the ring is drained.
#[test]
fn placed_service_runs_in_caller_memory() {
    // Watches off: the ring is the bound without them, sessions + 2 × claims.
    let mut c = config(2, 2, 4);
    c.max_watchers = 0;
    let (mut size, mut align) = (0, 0);
    assert_eq!(
        // SAFETY: valid pointers to this test's locals.
        unsafe { fencelock_service_layout_watchers(&c.capacity, 0, &mut size, &mut align) },
        fencelock_result::Ok
    );
    assert!(align <= 16);
    let mut arena = vec![0u128; size / 16 + 2];
    let mem = arena.as_mut_ptr().cast::<u8>();
    let mut svc = null_mut();
    // SAFETY: mem is valid for the arena's bytes, 16-aligned; mem + 1 is misaligned.
    unsafe {
        assert_eq!(
            fencelock_service_init_in(mem.add(1).cast(), size, &c, &mut svc),
            fencelock_result::MisalignedMemory
        );
        assert_eq!(
            fencelock_service_init_in(mem.cast(), size - 1, &c, &mut svc),
            fencelock_result::BufferTooSmall
        );
        // No memory is longer than PTRDIFF_MAX, and the handle must not land in it.
        assert_eq!(
            fencelock_service_init_in(mem.cast(), usize::MAX, &c, &mut svc),
            fencelock_result::InvalidArgument
        );
        let inside = mem.add(size / 2 / 8 * 8).cast::<*mut fencelock_service>();
        assert_eq!(
            fencelock_service_init_in(mem.cast(), size, &c, inside),
            fencelock_result::InvalidArgument
        );
        assert!(svc.is_null(), "nothing was created");
        assert_eq!(
            fencelock_service_init_in(mem.cast(), size, &c, &mut svc),
            fencelock_result::Ok
        );
    }
    // Ring: 2 + 2 × 4 = 10 events.
    let a = open(svc, 0, 5);
    let b = open(svc, 0, 100);
    let mut most = 0;
    for lock in ["l", "m"] {
        assert_eq!(
            acquire(svc, 0, a, lock, X, NONE).1.kind,
            fencelock_reply_kind::Granted
        );
        assert_eq!(
            acquire(svc, 0, b, lock, X, FOREVER).1.kind,
            fencelock_reply_kind::Queued
        );
    }
    // SAFETY: live handle; writable count.
    unsafe { fencelock_service_max_events(svc, &mut most) };
    assert_eq!(most, 2 + 2 * 4);
    // A expires at 5: SessionExpired, 2 × Released, 2 × Granted = 5 events queued.
    assert_eq!(tick(svc, 5), fencelock_result::Ok);
    // Now 1 open session and 2 claims: an input may emit 5 events; the ring has 5 free.
    assert_eq!(keep_alive(svc, 6, b).0, fencelock_result::Ok);
    let _c = open(svc, 6, 10);
    // 2 sessions, 2 claims: an input may emit 6 events; the ring has 5 free.
    let before = snapshot(svc);
    let (r, reply) = keep_alive(svc, 7, b);
    assert_eq!(
        (r, reply),
        (fencelock_result::BufferTooSmall, fencelock_reply::NONE)
    );
    assert_eq!(
        last_error_of(svc),
        Error::BufferTooSmall { need: 6 }.to_string()
    );
    let mut now = 0;
    // SAFETY: live handle; writable.
    unsafe { fencelock_service_now(svc, &mut now) };
    assert_eq!(
        now, 6,
        "a refusal before the advance does not even move time"
    );
    assert_eq!(snapshot(svc), before);
    assert_eq!(drain(svc).len(), 5);
    assert_eq!(keep_alive(svc, 7, b).1.expires_at, 107);
    let snap = snapshot(svc);
    // SAFETY: live handle, freed once; the arena outlives it.
    unsafe { fencelock_service_free(svc) };
    let mut again = null_mut();
    // SAFETY: the arena is free again after the first service's free.
    unsafe {
        assert_eq!(
            fencelock_service_restore_in(
                mem.cast(),
                size,
                &c.capacity,
                snap.as_ptr(),
                snap.len(),
                &mut again
            ),
            fencelock_result::Ok
        );
    }
    assert_eq!(snapshot(again), snap);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(again) };
    drop(arena);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut c = config(2, 2, 2);
    c.max_name_len = 8;
    let svc = new_service(&c);
    let s = open(svc, 0, 5);
    assert_eq!(kind_token(acquire(svc, 0, s, "held", X, NONE)), granted(1));
    let before = snapshot(svc);
    let bad_utf8 = [b'h', 0xc3, 0x28];
    let mut reply = junk_reply();
    // SAFETY: NULLs are what is being tested; other pointers valid.
    unsafe {
        assert_eq!(
            fencelock_service_new(null(), &mut null_mut()),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_open_session(null_mut(), 0, 5, &mut reply),
            fencelock_result::NullParameter
        );
        assert_eq!(
            reply,
            fencelock_reply::NONE,
            "written once `reply` is checked"
        );
        assert_eq!(
            fencelock_service_open_session(svc, 0, 5, null_mut()),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_acquire(svc, 0, s, null(), 3, 1, 1, 0, 0, &mut reply),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_release(svc, 0, s, bad_utf8.as_ptr(), 3, 0, &mut reply),
            fencelock_result::InvalidUtf8
        );
        assert_eq!(
            fencelock_service_poll_output(svc, null_mut()),
            fencelock_result::NullParameter
        );
        fencelock_service_free(null_mut());
        fencelock_gate_free(null_mut());
        fencelock_keeper_free(null_mut());
    }
    assert_eq!(
        acquire(svc, 0, s, "", X, NONE).0,
        fencelock_result::EmptyName
    );
    assert_eq!(
        acquire(svc, 0, s, "ninebytes", X, NONE).0,
        fencelock_result::NameTooLong
    );
    assert_eq!(
        last_error_of(svc),
        Error::NameTooLong { len: 9, max: 8 }.to_string()
    );
    // An argument check refuses before the service is reached; it is still the last error.
    let bad = [0xffu8];
    // SAFETY: valid pointers to this test's locals; live handle.
    let r = unsafe { fencelock_service_cancel(svc, 0, s, bad.as_ptr(), 1, 0, &mut reply) };
    assert_eq!(r, fencelock_result::InvalidUtf8);
    assert!(last_error_of(svc).starts_with("invalid utf-8"));
    assert_eq!(
        acquire(svc, 0, s, "held", S, NONE).0,
        fencelock_result::ModeMismatch
    );
    assert_eq!(
        acquire(svc, 0, 77, "x", S, NONE).0,
        fencelock_result::UnknownSession
    );
    // Multi-fault inputs get the core's first error: unknown session before a bad name.
    assert_eq!(
        acquire(svc, 0, 77, "", S, NONE).0,
        fencelock_result::UnknownSession
    );
    assert_eq!(
        acquire(svc, 0, 77, "ninebytes", S, NONE).0,
        fencelock_result::UnknownSession
    );
    let (p, n) = name("x");
    // SAFETY: live handle; name valid.
    unsafe {
        assert_eq!(
            fencelock_service_acquire(svc, 0, s, p, n, 0, 1, 0, 0, &mut reply),
            fencelock_result::InvalidArgument
        );
        assert_eq!(
            fencelock_service_acquire(svc, 0, s, p, n, 1, 4, 0, 0, &mut reply),
            fencelock_result::InvalidArgument
        );
    }
    assert_eq!(snapshot(svc), before);
    assert!(drain(svc).is_empty());
    // The handle still works.
    assert_eq!(tick(svc, 1), fencelock_result::Ok);

    // Truncated snapshots: refused, nothing created.
    let cap = c.capacity;
    for cut in 0..before.len() {
        let mut r = null_mut();
        // SAFETY: the prefix is valid for `cut` bytes.
        let got = unsafe { fencelock_service_restore(&cap, before.as_ptr(), cut, &mut r) };
        assert!(
            matches!(
                got,
                fencelock_result::BadMagic | fencelock_result::CorruptSnapshot
            ),
            "cut {cut}: {got:?}"
        );
        assert!(r.is_null());
    }
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// Gates and keepers record their last failure like a service, through the same call
/// framework; a keeper refuses an ack of a keep-alive it never recorded.
#[test]
fn gates_and_keepers_have_a_last_error() {
    let read = message_of;
    let mut gate = null_mut();
    let mut keeper = null_mut();
    let (p, n) = name("r");
    let mut ext = true;
    // SAFETY: valid out-pointers; live handles.
    unsafe {
        assert_eq!(fencelock_gate_new(2, &mut gate), fencelock_result::Ok);
        assert_eq!(
            read(&|b, l, o| fencelock_gate_last_error(gate, b, l, o)),
            "ok"
        );
        assert_eq!(fencelock_gate_admit(gate, p, n, 5), fencelock_result::Ok);
        assert_eq!(fencelock_gate_admit(gate, p, n, 4), fencelock_result::Stale);
        assert_eq!(
            read(&|b, l, o| fencelock_gate_last_error(gate, b, l, o)),
            Error::Stale {
                token: Token(4),
                highest: Token(5)
            }
            .to_string()
        );
        assert_eq!(
            fencelock_gate_check(gate, p, n, 0),
            fencelock_result::ZeroToken
        );
        assert!(read(&|b, l, o| fencelock_gate_last_error(gate, b, l, o)).starts_with("zero token"));

        assert_eq!(
            fencelock_keeper_new(10, 3, 2, &mut keeper),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_keep_alive_sent(keeper, 0),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_keep_alive_sent(keeper, 6),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_keeper_keep_alive_acked(keeper, 4, &mut ext),
            fencelock_result::UnknownKeepAlive
        );
        assert!(ext, "a refused call writes no out-value");
        assert_eq!(
            read(&|b, l, o| fencelock_keeper_last_error(keeper, b, l, o)),
            Error::UnknownKeepAlive { sent_at: 4 }.to_string()
        );
        assert_eq!(
            fencelock_keeper_keep_alive_sent(keeper, 5),
            fencelock_result::TimeWentBackwards
        );
        let mut lease = fencelock_lease {
            state: fencelock_lease_state::Safe,
            until: 1,
            expires_at: 1,
        };
        assert_eq!(
            fencelock_keeper_lease(keeper, 7, &mut lease),
            fencelock_result::Ok
        );
        assert_eq!(
            lease.state,
            fencelock_lease_state::Unconfirmed,
            "the ack of 4 changed nothing"
        );
        assert_eq!(
            fencelock_keeper_lease(null(), 7, &mut lease),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_gate_last_error(null(), null_mut(), 0, null_mut()),
            fencelock_result::NullParameter
        );
        fencelock_gate_free(gate);
        fencelock_keeper_free(keeper);
    }
}

/// The name key, on a service and a gate: NULL and every length but 16 refused with
/// nothing changed (a wrong handle kind too); 16 bytes keyed, with every answer the same.
#[test]
fn name_keys_are_checked_then_change_no_answer() {
    let svc = new_service(&config(4, 4, 8));
    let mut gate = null_mut();
    let key = [7u8; FENCELOCK_NAME_KEY_LEN + 1];
    let mut keyed = true;
    // SAFETY: live handles; `key` valid for every length passed with it (at most 17), or
    // NULL; `keyed` writable.
    unsafe {
        assert_eq!(fencelock_gate_new(4, &mut gate), fencelock_result::Ok);
        let s = open(svc, 0, 10);
        assert_eq!(
            acquire(svc, 0, s, "ledger", X, NONE).1.token,
            1,
            "granted before the key"
        );
        let (p, n) = name("ledger");
        assert_eq!(fencelock_gate_admit(gate, p, n, 2), fencelock_result::Ok);
        let before = snapshot(svc);
        for len in [0, 15, 17] {
            assert_eq!(
                fencelock_service_set_name_key(svc, key.as_ptr(), len),
                fencelock_result::InvalidArgument
            );
            assert_eq!(
                fencelock_gate_set_name_key(gate, key.as_ptr(), len),
                fencelock_result::InvalidArgument
            );
        }
        assert_eq!(
            fencelock_service_set_name_key(svc, null(), FENCELOCK_NAME_KEY_LEN),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_gate_set_name_key(null_mut(), key.as_ptr(), FENCELOCK_NAME_KEY_LEN),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_set_name_key(gate.cast(), key.as_ptr(), FENCELOCK_NAME_KEY_LEN),
            fencelock_result::InvalidHandle
        );
        assert_eq!(
            fencelock_service_is_name_keyed(svc, &mut keyed),
            fencelock_result::Ok
        );
        assert!(!keyed);
        assert_eq!(
            fencelock_gate_is_name_keyed(gate, &mut keyed),
            fencelock_result::Ok
        );
        assert!(!keyed);
        assert_eq!(
            fencelock_service_is_name_keyed(svc, null_mut()),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_set_name_key(svc, key.as_ptr(), FENCELOCK_NAME_KEY_LEN),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_gate_set_name_key(gate, key.as_ptr(), FENCELOCK_NAME_KEY_LEN),
            fencelock_result::Ok
        );
        assert_eq!(
            fencelock_service_is_name_keyed(svc, &mut keyed),
            fencelock_result::Ok
        );
        assert!(keyed);
        assert_eq!(
            fencelock_gate_is_name_keyed(gate, &mut keyed),
            fencelock_result::Ok
        );
        assert!(keyed);
        assert_eq!(snapshot(svc), before);
        assert_eq!(release(svc, 1, s, "ledger").1.token, 1);
        assert_eq!(fencelock_gate_admit(gate, p, n, 1), fencelock_result::Stale);
        fencelock_gate_free(gate);
        fencelock_service_free(svc);
    }
}

#[test]
fn every_code_has_a_message() {
    let mut buf = [0 as std::ffi::c_char; 128];
    let mut len = 0;
    for r in fencelock_result::ALL {
        let code = r as u32;
        // SAFETY: buf valid for its length.
        let got = unsafe { fencelock_result_message(code, buf.as_mut_ptr(), buf.len(), &mut len) };
        assert_eq!(got, fencelock_result::Ok, "code {code}");
        assert!(len >= 2 && len < buf.len());
        let text: String = buf[..len].iter().map(|c| *c as u8 as char).collect();
        if let Some(e) = r.example() {
            assert_eq!(text.replace([' ', '-'], "_"), e.kind(), "code {code}");
        }
    }
    // SAFETY: buf valid for its length; a 4-byte window truncates.
    unsafe {
        assert_eq!(
            fencelock_result_message(7, buf.as_mut_ptr(), buf.len(), null_mut()),
            fencelock_result::InvalidArgument
        );
        // Not a code, whatever the buffer: a short one, a size query.
        let mut need = 0;
        assert_eq!(
            fencelock_result_message(7, buf.as_mut_ptr(), 4, &mut need),
            fencelock_result::InvalidArgument
        );
        assert_eq!(need, "unknown result code".len());
        assert_eq!(
            fencelock_result_message(7, null_mut(), 0, &mut need),
            fencelock_result::InvalidArgument
        );
        assert_eq!(
            fencelock_result_message(7, null_mut(), 8, &mut need),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_result_message(401, buf.as_mut_ptr(), 4, &mut len),
            fencelock_result::BufferTooSmall
        );
    }
    assert_eq!(buf[3], 0);
    assert_eq!(len, 5);
    // A refused buffer writes no length: only BUFFER_TOO_SMALL does.
    let mut untouched = 99;
    // SAFETY: the NULL buffer with a length is what is being tested; out_len is valid.
    unsafe {
        assert_eq!(
            fencelock_result_message(401, null_mut(), 8, &mut untouched),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_result_message(401, buf.as_mut_ptr(), usize::MAX, &mut untouched),
            fencelock_result::InvalidArgument
        );
    }
    assert_eq!(untouched, 99);
}

/// The library says its crate version, as `result_message` writes text: whole, truncated
/// with `BUFFER_TOO_SMALL` and the length needed, or refused for a NULL buffer.
#[test]
fn the_library_says_its_version() {
    let mut buf = [0 as std::ffi::c_char; 16];
    let mut len = 0;
    // SAFETY: buf valid for its length; len writable.
    unsafe {
        assert_eq!(
            fencelock_version(buf.as_mut_ptr(), buf.len(), &mut len),
            fencelock_result::Ok
        );
    }
    // SAFETY: NUL-terminated by the call.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    assert_eq!(text.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    assert_eq!(len, env!("CARGO_PKG_VERSION").len());
    let mut need = 0;
    // SAFETY: as above; a 2-byte window truncates; NULL with 0 is a size query.
    unsafe {
        assert_eq!(
            fencelock_version(buf.as_mut_ptr(), 2, &mut need),
            fencelock_result::BufferTooSmall
        );
        assert_eq!(need, len);
        assert_eq!(
            fencelock_version(null_mut(), 4, &mut need),
            fencelock_result::NullParameter
        );
    }
}

/// Every reply and event variant of the core maps to the constant of its own kind name
/// (and none to `NONE`): short frames of each variant index are tried, and the variants
/// they decode must be exactly the core's 13 replies and 5 events, every one of them. A
/// variant the core adds later whose fields these frames spell (or one whose fields are
/// longer, once its frame is added here) fails this test until the ABI has a constant
/// for it.
#[test]
fn every_reply_and_event_kind_has_its_constant() {
    let snake = |name: String| {
        let mut s = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        }
        s
    };
    let mut replies = std::collections::BTreeSet::new();
    for i in 0..64u8 {
        let tails: [&[u8]; 4] = [&[], &[1], &[1, 1], &[0, 1]];
        for tail in tails {
            let frame: Vec<u8> = [&[i][..], tail].concat();
            if let Ok(r) = Reply::from_frame(&frame) {
                let c = fencelock_reply::from_core(&r);
                assert_ne!(c.kind, fencelock_reply_kind::None, "{r:?}");
                assert_eq!(c.kind as u32, u32::from(i) + 1, "{r:?}");
                assert_eq!(snake(format!("{:?}", c.kind)), r.kind(), "{r:?}");
                replies.insert(i);
            }
        }
    }
    assert_eq!(
        replies,
        (0..13).collect(),
        "every reply kind, and only those"
    );
    let mut events = std::collections::BTreeSet::new();
    for i in 0..64u8 {
        let tails: [&[u8]; 5] = [
            &[1],
            &[1, 1, b'a'],
            &[1, 1, b'a', 0, 1],
            &[1, 1, b'a', 1, 1],
            // session, lock, holder, mode, token, change, empty label: HolderChanged
            &[1, 1, b'a', 1, 0, 1, 0, 0],
        ];
        for tail in tails {
            let frame: Vec<u8> = [&[i][..], tail].concat();
            if let Ok(o) = Output::from_frame(&frame) {
                let c = fencelock_output::from_core(&o);
                assert_ne!(c.kind, fencelock_output_kind::None, "{o:?}");
                assert_eq!(c.kind as u32, u32::from(i) + 1, "{o:?}");
                assert_eq!(snake(format!("{:?}", c.kind)), o.kind(), "{o:?}");
                events.insert(i);
            }
        }
    }
    assert_eq!(events, (0..5).collect(), "every event kind, and only those");
}

/// The committed header must be what cbindgen generates from the current source.
#[test]
#[cfg_attr(
    miri,
    ignore = "Miri cannot run a process; scripts/test-ffi.sh runs it natively"
)]
fn header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("cbindgen")
        .args([
            "--config",
            "cbindgen.toml",
            "--crate",
            "fencelock-ffi",
            "--quiet",
        ])
        .current_dir(dir)
        .output()
        .expect("cbindgen not found: run scripts/setup.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = std::fs::read_to_string(format!("{dir}/include/fencelock.h")).unwrap();
    assert!(
        committed == String::from_utf8_lossy(&out.stdout),
        "ffi/include/fencelock.h is stale: regenerate it with \
         `cd ffi && cbindgen --config cbindgen.toml --crate fencelock-ffi --output include/fencelock.h`"
    );
}

/// A panic while the other arguments are checked, before the handle is touched, is
/// `PANIC` for that call only: the handle is not poisoned and keeps working, and
/// `last_error` names that panic (it named the failure before it).
#[test]
fn a_panic_before_the_handle_is_used_does_not_poison_it() {
    let svc = new_service(&config(2, 2, 2));
    let s = open(svc, 0, 5);
    let args = || -> Result<(), crate::result::Fail> {
        if std::hint::black_box(true) {
            panic!("boom in args (expected by this test)");
        }
        Ok(())
    };
    // SAFETY: live handle.
    let r = unsafe { crate::handle::call(svc, args, |_, ()| Ok(())) };
    assert_eq!(r, fencelock_result::Panic);
    let said = last_error_of(svc);
    assert_eq!(
        said,
        "panic: caught at the ABI boundary while the call's arguments were checked; the \
         handle was not changed and is not poisoned"
    );
    assert_eq!(keep_alive(svc, 1, s).0, fencelock_result::Ok);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// A panic inside a call poisons that handle (service, gate or keeper alike): every
/// later call says `PANIC`, `last_error` still answers, and freeing it still works.
#[test]
fn a_panic_poisons_the_handle() {
    let boom = || -> Result<(), crate::result::Fail> {
        if std::hint::black_box(true) {
            panic!("boom (expected by this test)");
        }
        Ok(())
    };
    let svc = new_service(&config(2, 2, 2));
    let s = open(svc, 0, 5);
    // SAFETY: live handle.
    let r = unsafe { crate::handle::call(svc, || Ok(()), |_, ()| boom()) };
    assert_eq!(r, fencelock_result::Panic);
    let mut now = 7;
    assert_eq!(keep_alive(svc, 0, s).0, fencelock_result::Panic);
    // SAFETY: live (poisoned) handle.
    unsafe {
        assert_eq!(
            fencelock_service_now(svc, &mut now),
            fencelock_result::Panic
        );
    }
    assert!(last_error_of(svc).starts_with("panic"));
    // Poison comes first: an argument the call would refuse does not hide it.
    let mut reply = junk_reply();
    // SAFETY: live (poisoned) handle; the NULL name is what is being tested.
    let r = unsafe {
        fencelock_service_acquire(
            svc,
            0,
            s,
            null(),
            1,
            X as u32,
            NONE as u32,
            0,
            0,
            &mut reply,
        )
    };
    assert_eq!(r, fencelock_result::Panic);
    assert!(last_error_of(svc).starts_with("panic"));
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
    assert_eq!(now, 7);

    let mut keeper = null_mut();
    let mut may = false;
    // SAFETY: valid out-pointers; live keeper, freed once.
    unsafe {
        assert_eq!(
            fencelock_keeper_new(10, 3, 2, &mut keeper),
            fencelock_result::Ok
        );
        let r = crate::handle::call(keeper, || Ok(()), |_, ()| boom());
        assert_eq!(r, fencelock_result::Panic);
        assert_eq!(
            fencelock_keeper_may_act(keeper, 0, &mut may),
            fencelock_result::Panic
        );
        fencelock_keeper_free(keeper);
    }
}

/// A placed service's fixed ring takes a whole burst (an expiry that releases three holds
/// and grants three waiters), wrapping around its end, and loses nothing.
#[test]
fn placed_ring_takes_a_burst_and_wraps() {
    let (arena, svc, _) = placed_service(&config(3, 3, 6));
    let a = open(svc, 0, 5);
    let b = open(svc, 0, 100);
    // Three rounds of 3 events move the ring's head to 9: C holds l0 with B waiting, and
    // expires.
    for t in 0..3 {
        let c3 = open(svc, t, 1);
        assert_eq!(
            kind_token(acquire(svc, t, c3, "l0", X, NONE)),
            granted(2 * t + 1)
        );
        assert_eq!(
            acquire(svc, t, b, "l0", X, FOREVER).1.kind,
            fencelock_reply_kind::Queued
        );
        assert_eq!(tick(svc, t + 1), fencelock_result::Ok);
        assert_eq!(drain(svc).len(), 3);
        assert_eq!(release(svc, t + 1, b, "l0").1.token, 2 * t + 2);
    }
    for lock in ["l1", "l2", "l3"] {
        assert_eq!(
            acquire(svc, 3, a, lock, X, NONE).1.kind,
            fencelock_reply_kind::Granted
        );
        assert_eq!(
            acquire(svc, 3, b, lock, X, FOREVER).1.kind,
            fencelock_reply_kind::Queued
        );
    }
    let ring = 3 + 2 * 6;
    assert!(9 + 7 > ring, "the burst must cross the ring's end");
    assert_eq!(tick(svc, 5), fencelock_result::Ok);
    let got: Vec<_> = drain(svc)
        .iter()
        .map(|o| (o.kind, o.session, o.token, lock_of(o)))
        .collect();
    use fencelock_output_kind::*;
    assert_eq!(
        got,
        vec![
            (SessionExpired, a, 0, String::new()),
            (Released, a, 7, "l1".into()),
            (Released, a, 8, "l2".into()),
            (Released, a, 9, "l3".into()),
            (Granted, b, 10, "l1".into()),
            (Granted, b, 11, "l2".into()),
            (Granted, b, 12, "l3".into()),
        ]
    );
    // SAFETY: live handle, freed once; the arena outlives it.
    unsafe { fencelock_service_free(svc) };
    drop(arena);
}

/// Seeded random frames (valid ones, mutated) through the frame entry point: every call
/// returns a code; an accepted one writes its reply's frame; a refused one writes a
/// zeroed reply and changes nothing beyond the advance to its `now` (the state and the
/// events equal a twin's that only ticked there). A failure prints the seed; set
/// FENCELOCK_SEED to replay.
#[test]
fn random_frames_never_crash_and_refusals_change_only_time() {
    let seed: u64 = std::env::var("FENCELOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d);
    let rounds = if cfg!(miri) { 120 } else { 3000 };
    let mut rng = xorshift(seed);
    let c = config(4, 4, 8);
    let svc = new_service(&c);
    let mut accepted = 0;
    let mut refused = 0;
    let mut opened: Vec<u64> = Vec::new();
    let lock = |s: &str| LockName::new(s).unwrap();
    for round in 0..rounds {
        // Time moves forward slowly: 0 to 99 over the run.
        let now = Tick(round as u64 * 100 / rounds as u64);
        let k = (rng() % 4) as usize;
        let session = SessionId(opened.iter().rev().nth(k).copied().unwrap_or(1));
        let input = match rng() % 8 {
            0 => Input::OpenSession { now, ttl: 10 },
            1 => Input::KeepAlive {
                now,
                session,
                request: None,
            },
            2 => Input::Acquire {
                now,
                session,
                lock: lock("a"),
                mode: Mode::Exclusive,
                wait: Wait::Forever,
                request: None,
            },
            3 => Input::Acquire {
                now,
                session,
                lock: lock("a"),
                mode: Mode::Shared,
                wait: Wait::None,
                request: None,
            },
            4 => Input::Release {
                now,
                session,
                lock: lock("a"),
                request: None,
            },
            5 => Input::Cancel {
                now,
                session,
                lock: lock("a"),
                request: None,
            },
            6 => Input::CloseSession {
                now,
                session,
                request: None,
            },
            _ => Input::Tick { now },
        };
        let mut frame = frame_of(input);
        // The variant and `now` are kept (so time keeps moving forward); the rest of half
        // the frames is mutated.
        let keep = frame_of(Input::Tick { now }).len();
        if frame.len() > keep {
            match rng() % 6 {
                0 => {
                    let i = keep + (rng() as usize) % (frame.len() - keep);
                    frame[i] = rng() as u8;
                }
                1 => frame.truncate(keep + (rng() as usize) % (frame.len() - keep)),
                2 => frame.push(rng() as u8),
                _ => {}
            }
        }
        let before = snapshot(svc);
        let (r, reply, bytes) = handle_frame(svc, &frame);
        let ctx = format!("seed {seed} round {round} frame {frame:02x?}: {r:?}");
        let events = drain_frames(svc);
        if r == fencelock_result::Ok {
            accepted += 1;
            let decoded = Reply::from_frame(&bytes).unwrap();
            // Each round drains, so what the reply says is queued is this input's events.
            let want = fencelock_reply {
                pending: events.len() as u32,
                ..fencelock_reply::from_core(&decoded)
            };
            assert_eq!(want, reply, "{ctx}");
            if let Some(s) = decoded.opened() {
                opened.push(s.0);
            }
        } else {
            refused += 1;
            assert!((100..600).contains(&(r as u32)), "{ctx}");
            assert_eq!((reply, bytes.len()), (fencelock_reply::NONE, 0), "{ctx}");
            // The twin: the state before, restored, then only ticked to the frame's now
            // (when the frame decodes; a bad frame changes nothing at all).
            let mut twin = null_mut();
            // SAFETY: valid pointers to this test's locals.
            let r = unsafe {
                fencelock_service_restore(&c.capacity, before.as_ptr(), before.len(), &mut twin)
            };
            assert_eq!(r, fencelock_result::Ok, "{ctx}");
            if let Ok(i) = Input::from_frame(&frame) {
                let _ = tick(twin, i.now().0);
            }
            assert_eq!(events, drain_frames(twin), "{ctx}");
            assert_eq!(snapshot(svc), snapshot(twin), "{ctx}");
            // SAFETY: live handle, freed once.
            unsafe { fencelock_service_free(twin) };
        }
    }
    eprintln!("seed {seed}: accepted {accepted}, refused {refused} of {rounds} frames");
    assert!(
        accepted > rounds / 5 && refused > rounds / 10,
        "seed {seed}: too few frames accepted or refused to mean anything"
    );
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// Bytes that are no gate snapshot are refused before the rows are allocated: with the
/// largest capacity the core allows (2^31 − 1 rows, far more memory than a test machine
/// has, so an allocation first would answer `BAD_CONFIG`, or touch it all), junk is
/// `BAD_MAGIC` and a snapshot of another version `UNSUPPORTED_VERSION`; a real snapshot
/// with resources still needs its rows, and restores into a gate that has them.
#[test]
fn a_gate_snapshot_is_judged_before_its_rows_are_allocated() {
    let max = (1usize << 31) - 1;
    let mut gate = null_mut();
    let junk = [0u8; 4];
    // SAFETY: valid pointers to this test's locals.
    unsafe {
        assert_eq!(
            fencelock_gate_restore(max, junk.as_ptr(), junk.len(), &mut gate),
            fencelock_result::BadMagic
        );
        assert!(gate.is_null());
        let mut g = null_mut();
        assert_eq!(fencelock_gate_new(2, &mut g), fencelock_result::Ok);
        assert_eq!(
            fencelock_gate_admit(g, "r".as_ptr(), 1, 5),
            fencelock_result::Ok
        );
        let mut snap = [0u8; 64];
        let mut n = 0;
        assert_eq!(
            fencelock_gate_snapshot(g, snap.as_mut_ptr(), snap.len(), &mut n),
            fencelock_result::Ok
        );
        fencelock_gate_free(g);
        // The version (a one-byte varint after the magic) made one no build writes.
        let mut other = snap[..n].to_vec();
        let at = fencelock::GATE_MAGIC.len();
        assert_eq!(other[at], fencelock::GATE_VERSION as u8);
        other[at] = 0x7f;
        assert_eq!(
            fencelock_gate_restore(max, other.as_ptr(), other.len(), &mut gate),
            fencelock_result::UnsupportedVersion
        );
        assert!(gate.is_null());
        // One resource: zero rows cannot hold it, two can.
        assert_eq!(
            fencelock_gate_restore(0, snap.as_ptr(), n, &mut gate),
            fencelock_result::CapacityExceeded
        );
        assert_eq!(
            fencelock_gate_restore(2, snap.as_ptr(), n, &mut gate),
            fencelock_result::Ok
        );
        fencelock_gate_free(gate);
    }
}

/// A huge capacity is refused with `BAD_CONFIG` before anything is allocated (never an
/// abort on allocation failure, nor a panic on overflow), and a restore wrong in two ways
/// gets the core's first error (bytes that are no snapshot before the row limit).
#[test]
fn huge_capacities_are_refused_not_fatal() {
    let mut gate = null_mut();
    let junk = [0u8; 4];
    for cap in [1usize << 31, 1 << 40, 100_000_000_000_000_000, usize::MAX] {
        // SAFETY: valid pointers to this test's locals.
        unsafe {
            assert_eq!(
                fencelock_gate_new(cap, &mut gate),
                fencelock_result::BadConfig,
                "{cap}"
            );
            assert_eq!(
                fencelock_gate_restore(cap, junk.as_ptr(), junk.len(), &mut gate),
                fencelock_result::BadConfig,
                "{cap}"
            );
        }
        assert!(gate.is_null(), "nothing created");
    }
    let mut svc = null_mut();
    let (mut size, mut align) = (0, 0);
    for big in [
        config(u32::MAX, 1, 1),
        config(1, 1 << 31, 1),
        config(1, 1, u32::MAX),
    ] {
        // SAFETY: valid pointers to this test's locals.
        unsafe {
            assert_eq!(
                fencelock_service_new(&big, &mut svc),
                fencelock_result::BadConfig
            );
            assert_eq!(
                fencelock_service_layout(&big.capacity, &mut size, &mut align),
                fencelock_result::BadConfig
            );
            // A snapshot that is not one: the core judges the bytes before the rows.
            assert_eq!(
                fencelock_service_restore(&big.capacity, junk.as_ptr(), junk.len(), &mut svc),
                fencelock_result::BadMagic
            );
        }
        assert!(svc.is_null(), "nothing created");
    }
}

/// One buffer for the request and the reply (what C callers do): the input frame is
/// copied first, so this is defined (Miri checks it) and works.
#[test]
fn handle_frame_may_reuse_one_buffer() {
    let svc = new_service(&config(4, 4, 8));
    let mut io = [0u8; 200];
    let open = frame_of(Input::OpenSession {
        now: Tick(0),
        ttl: 10,
    });
    io[..open.len()].copy_from_slice(&open);
    let p = io.as_mut_ptr();
    let mut n = 0;
    let mut reply = junk_reply();
    // SAFETY: live handle; `p` valid for 200 bytes, used as both buffers (allowed).
    let r = unsafe {
        fencelock_service_handle_frame(svc, p, open.len(), &mut reply, p, io.len(), &mut n)
    };
    assert_eq!(r, fencelock_result::Ok);
    let opened = Reply::Opened {
        session: SessionId(1),
        expires_at: Tick(10),
    };
    assert_eq!(io[..n], reply_frame(opened));
    // Longer than any input frame: refused unread, nothing written.
    let before = snapshot(svc);
    let long = FENCELOCK_MAX_FRAME_LEN + 1;
    // SAFETY: as above; `long` < 200.
    let r =
        unsafe { fencelock_service_handle_frame(svc, p, long, &mut reply, p, io.len(), &mut n) };
    assert_eq!((r, n), (fencelock_result::BadFrame, 0));
    assert_eq!(snapshot(svc), before);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// A pointer that is not aligned for its type — an in-struct, an out-value, an array of
/// outputs or of ops, an optional length — is `MISALIGNED_MEMORY`, with nothing read or
/// written through it and nothing changed (an unaligned access is undefined behaviour,
/// and faults on strict-alignment targets). NULL keeps its own error.
#[test]
fn a_misaligned_pointer_is_refused_and_nothing_changes() {
    let c = config(4, 4, 8);
    let svc = new_service(&c);
    let s = open(svc, 0, 100);
    let t = open(svc, 0, 100);
    assert_eq!(kind_token(acquire(svc, 1, s, "l", X, NONE)), granted(1));
    acquire(svc, 1, t, "l", X, FOREVER);
    close(svc, 2, s); // two events queued
    let before = snapshot(svc);
    let mut raw = vec![0u64; 4096];
    let base = raw.as_mut_ptr().cast::<u8>();
    let mis = || fencelock_result::MisalignedMemory;
    let (lock, lock_len) = name("l");
    // SAFETY: every pointer is inside `raw` (one byte past an aligned start, so misaligned
    // for anything wider than a byte); none is read or written, which is what is tested.
    unsafe {
        let mut out = null_mut();
        let cfg = base.add(1).cast::<fencelock_config>();
        assert_eq!(fencelock_service_new(cfg, &mut out), mis());
        assert_eq!(fencelock_service_now(svc, base.add(1).cast::<u64>()), mis());
        let reply = base.add(4).cast::<fencelock_reply>();
        assert_eq!(
            fencelock_service_acquire(
                svc,
                3,
                t,
                lock,
                lock_len,
                X as u32,
                NONE as u32,
                0,
                0,
                reply
            ),
            mis()
        );
        let mut n = 0usize;
        let events = base.add(4).cast::<fencelock_output>();
        assert_eq!(
            fencelock_service_drain_events(svc, events, 8, &mut n),
            mis()
        );
        assert_eq!(
            fencelock_service_drain_events(svc, null_mut(), 0, base.add(1).cast::<usize>()),
            mis(),
            "the count too"
        );
        let mut done = 7usize;
        let (mut replies, mut results) = ([fencelock_reply::NONE; 2], [fencelock_result::Ok; 2]);
        let ops = base.add(4).cast::<fencelock_op>();
        assert_eq!(
            fencelock_service_submit(
                svc,
                3,
                ops,
                1,
                replies.as_mut_ptr(),
                results.as_mut_ptr(),
                &mut done
            ),
            mis()
        );
        assert_eq!(done, 0);
        let frame = frame_of(Input::Tick { now: Tick(3) });
        let mut reply_frame = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let mut r = junk_reply();
        assert_eq!(
            fencelock_service_handle_frame(
                svc,
                frame.as_ptr(),
                frame.len(),
                &mut r,
                reply_frame.as_mut_ptr(),
                reply_frame.len(),
                base.add(1).cast::<usize>()
            ),
            mis()
        );
        let mut msg = [0 as std::ffi::c_char; 64];
        assert_eq!(
            fencelock_result_message(
                903,
                msg.as_mut_ptr(),
                msg.len(),
                base.add(1).cast::<usize>()
            ),
            mis()
        );
        // And for a number that is no code: the buffer's error, with nothing written
        // (it was INVALID_ARGUMENT, which says "not a code: the message written says so").
        msg.fill(0x58);
        assert_eq!(
            fencelock_result_message(
                4242,
                msg.as_mut_ptr(),
                msg.len(),
                base.add(1).cast::<usize>()
            ),
            mis()
        );
        assert!(msg.iter().all(|&b| b == 0x58), "nothing written");
        // A handle's last error checks `out_len` before the handle, as every call checks
        // its arguments first: no handle at all (zeros), with a misaligned `out_len`.
        assert_eq!(
            fencelock_service_last_error(
                base.add(8).cast::<fencelock_service>(),
                msg.as_mut_ptr(),
                msg.len(),
                base.add(1).cast::<usize>()
            ),
            mis()
        );
        assert_eq!(
            raw.iter().filter(|w| **w != 0).count(),
            0,
            "nothing written"
        );
        let mut now = 0u64;
        assert_eq!(fencelock_service_now(svc, &mut now), fencelock_result::Ok);
        assert_eq!(now, 2, "no input applied");
    }
    assert_eq!(snapshot(svc), before);
    assert_eq!(drain(svc).len(), 2, "the queued events are still there");
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
    drop(raw);
}

/// Memory that still holds a live placed service is refused by `_init_in` and
/// `_restore_in` before a byte is written: a restore refused late (a record cut short)
/// used to have emptied the live service's tables and event ring under the handle its
/// host still held, which went on passing the handle check.
#[test]
fn a_block_holding_a_live_service_is_not_built_over() {
    let c = config(4, 4, 8);
    let (mut arena, svc, size) = placed_service(&c);
    let mem = arena.as_mut_ptr().cast::<u8>();
    let (a, b) = (open(svc, 0, 100), open(svc, 0, 100));
    assert_eq!(kind_token(acquire(svc, 1, a, "l", X, NONE)), granted(1));
    acquire(svc, 1, b, "l", X, FOREVER);
    let snap = snapshot(svc);
    close(svc, 2, a); // a's release and b's grant wait in the ring, not drained
    let before = snapshot(svc);
    let mut out = null_mut();
    // `_restore_in` of the first `len` bytes of the snapshot into the arena.
    let restore_in = |len: usize, out: &mut *mut fencelock_service| {
        // SAFETY: the arena is `size` bytes (a live service's block, or free again); the
        // snapshot is valid for `len` <= its length; `out` is writable.
        unsafe {
            fencelock_service_restore_in(mem.cast(), size, &c.capacity, snap.as_ptr(), len, out)
        }
    };
    assert_eq!(
        restore_in(snap.len() - 1, &mut out),
        fencelock_result::InvalidArgument
    );
    assert_eq!(
        restore_in(snap.len(), &mut out),
        fencelock_result::InvalidArgument,
        "a good snapshot too: the block is in use"
    );
    // SAFETY: as above; nothing is written.
    unsafe {
        assert_eq!(
            fencelock_service_init_in(mem.cast(), size, &c, &mut out),
            fencelock_result::InvalidArgument
        );
    }
    assert!(out.is_null());
    assert_eq!(snapshot(svc), before, "the live service is as it was");
    let events: Vec<String> = drain(svc).iter().map(lock_of).collect();
    assert_eq!(events, ["l", "l"], "its queued events are still there");
    // Freed, the block is the caller's again.
    // SAFETY: live handle, freed once; the arena outlives it.
    unsafe { fencelock_service_free(svc) };
    assert_eq!(restore_in(snap.len(), &mut out), fencelock_result::Ok);
    assert_eq!(snapshot(out), snap);
    // SAFETY: the restored handle, freed once.
    unsafe { fencelock_service_free(out) };
    drop(arena);
}

/// Bytes a new service would take that overlap a live placed service's without starting
/// where it does — reaching into it from before, starting inside it, or holding it
/// further in (a restore's ring takes the rest of its block) — are refused as the same
/// address is: before, the first and third were built over it (its tables emptied under
/// its host's handle) and the second left it passing the handle check over another
/// service's rows. The rest of a longer block, past what a service takes, stays the
/// caller's: another service may live there.
#[test]
fn a_block_overlapping_a_live_service_is_not_built_over() {
    let c = config(4, 4, 8);
    let (mut size, mut align) = (0, 0);
    // SAFETY: valid pointers to this test's locals.
    unsafe { fencelock_service_layout(&c.capacity, &mut size, &mut align) };
    assert!(align <= 16 && size > 32);
    let stride = size.div_ceil(16) * 16;
    let mut arena = vec![0u128; 3 * stride / 16 + 1];
    let base = arena.as_mut_ptr().cast::<u8>();
    let mut live = null_mut();
    // SAFETY: the arena is 16-aligned and holds `size` bytes from `stride` on.
    let r = unsafe { fencelock_service_init_in(base.add(stride).cast(), size, &c, &mut live) };
    assert_eq!(r, fencelock_result::Ok);
    let a = open(live, 0, 100);
    assert_eq!(kind_token(acquire(live, 1, a, "l", X, NONE)), granted(1));
    let before = snapshot(live);
    let snap = before.clone();
    let inside = stride + 16 * (size / 32);
    for (at, len, init, what) in [
        (
            stride - 16,
            size,
            true,
            "reaching into the live one from before",
        ),
        (inside, size, true, "starting inside the live one"),
        (
            inside,
            size,
            false,
            "a restore starting inside the live one",
        ),
        (
            0,
            3 * stride,
            false,
            "a restore whose ring would take the rest, over the live one",
        ),
    ] {
        let mut out = null_mut();
        // SAFETY: `at..at + len` is inside the arena and 16-aligned; nothing is written.
        let r = unsafe {
            if init {
                fencelock_service_init_in(base.add(at).cast(), len, &c, &mut out)
            } else {
                fencelock_service_restore_in(
                    base.add(at).cast(),
                    len,
                    &c.capacity,
                    snap.as_ptr(),
                    snap.len(),
                    &mut out,
                )
            }
        };
        assert_eq!(r, fencelock_result::InvalidArgument, "{what}");
        assert!(out.is_null());
    }
    assert_eq!(snapshot(live), before, "the live service is as it was");
    // A service given the whole arena takes only its layout's size from its start, which
    // the live one's bytes do not reach: taken.
    let mut beside = null_mut();
    // SAFETY: the arena's bytes, 16-aligned; the service writes only its first `size`.
    let r = unsafe { fencelock_service_init_in(base.cast(), 3 * stride, &c, &mut beside) };
    assert_eq!(r, fencelock_result::Ok);
    assert_eq!(snapshot(live), before, "the live service is as it was");
    // SAFETY: live handles, each freed once; the arena outlives them.
    unsafe {
        fencelock_service_free(beside);
        fencelock_service_free(live);
    }
    // Freed, the whole arena is the caller's again, a restore's ring included.
    let mut out = null_mut();
    // SAFETY: the arena's bytes, 16-aligned; no live service in them now.
    let r = unsafe {
        fencelock_service_restore_in(
            base.cast(),
            3 * stride,
            &c.capacity,
            snap.as_ptr(),
            snap.len(),
            &mut out,
        )
    };
    assert_eq!(r, fencelock_result::Ok);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(out) };
    drop(arena);
}

/// Snapshot bytes inside the memory being restored into are refused, not read while
/// overwritten.
#[test]
fn restore_in_refuses_a_snapshot_inside_mem() {
    let c = config(2, 2, 4);
    let svc = new_service(&c);
    open(svc, 0, 10);
    let snap = snapshot(svc);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
    let (mut size, mut align) = (0, 0);
    // SAFETY: valid pointers to this test's locals.
    unsafe { fencelock_service_layout(&c.capacity, &mut size, &mut align) };
    assert!(align <= 16);
    let mut arena = vec![0u128; size / 16 + 2];
    let mem = arena.as_mut_ptr().cast::<u8>();
    let at = size - snap.len(); // the snapshot's last byte is the block's last byte
    let mut out = null_mut();
    // SAFETY: the arena is valid for `size` (+ up to 32) bytes; `at + snap.len()` = size.
    unsafe {
        core::ptr::copy_nonoverlapping(snap.as_ptr(), mem.add(at), snap.len());
        assert_eq!(
            fencelock_service_restore_in(
                mem.cast(),
                size,
                &c.capacity,
                mem.add(at),
                snap.len(),
                &mut out
            ),
            fencelock_result::InvalidArgument
        );
        assert!(out.is_null());
        let copy = snap.clone();
        assert_eq!(
            fencelock_service_restore_in(
                mem.cast(),
                size,
                &c.capacity,
                copy.as_ptr(),
                copy.len(),
                &mut out
            ),
            fencelock_result::Ok
        );
        assert_eq!(snapshot(out), snap);
        fencelock_service_free(out);
    }
    drop(arena);
}

/// The lock name of a list query may share memory with the out-values (here `*count`):
/// it is copied before anything is written.
#[test]
fn holders_name_may_overlap_the_outputs() {
    let svc = new_service(&config(2, 2, 4));
    let a = open(svc, 0, 10);
    assert_eq!(kind_token(acquire(svc, 0, a, "l", X, NONE)), granted(1));
    let mut cell: usize = 0;
    let p = (&mut cell as *mut usize).cast::<u8>();
    let mut holders = [fencelock_holder {
        session: 0,
        token: 0,
        mode: S,
        count: 0,
        limit: 0,
        label_len: 0,
        label: [0; FENCELOCK_LABEL_BUF_LEN],
    }; 2];
    let mut usage = fencelock_usage {
        sessions: 9,
        locks: 9,
        claims: 9,
    };
    // SAFETY: `p` is valid for the usize's bytes; the name is its first byte; the
    // count is written over it (allowed); the holder array is valid for 2.
    unsafe {
        p.write(b'l');
        assert_eq!(
            fencelock_service_holders(svc, p, 1, holders.as_mut_ptr(), 2, p.cast()),
            fencelock_result::Ok
        );
        assert_eq!(cell, 1);
        p.cast::<usize>().write(0);
        p.write(b'l');
        assert_eq!(
            fencelock_service_waiters(svc, p, 1, null_mut(), 0, p.cast()),
            fencelock_result::Ok
        );
        assert_eq!(cell, 0);
        assert_eq!(
            fencelock_service_usage(svc, &mut usage),
            fencelock_result::Ok
        );
    }
    assert_eq!(holders[0].session, a);
    assert_eq!((usage.sessions, usage.locks, usage.claims), (1, 1, 1));
    // `hold`: the name is the first byte of the holder it writes.
    let mut held = false;
    let mut one = holders[1];
    let q = (&mut one as *mut fencelock_holder).cast::<u8>();
    // SAFETY: `q` is valid for the holder's bytes; the name is its first byte; the holder
    // is written over it (allowed); `held` is a local.
    unsafe {
        q.write(b'l');
        assert_eq!(
            fencelock_service_hold(svc, a, q, 1, &mut held, q.cast()),
            fencelock_result::Ok
        );
    }
    assert!(held);
    assert_eq!((one.session, one.token, one.mode), (a, 1, X));
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

#[test]
fn a_short_snapshot_buffer_gets_only_the_size() {
    let svc = new_service(&config(2, 2, 4));
    let a = open(svc, 0, 10);
    assert_eq!(
        kind_token(acquire(svc, 0, a, "ledger", X, NONE)),
        granted(1)
    );
    let whole = snapshot(svc);
    let mut gate = null_mut();
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { fencelock_gate_new(4, &mut gate) },
        fencelock_result::Ok
    );
    let (p, n) = name("ledger");
    assert_eq!(
        // SAFETY: live gate; name valid for n bytes.
        unsafe { fencelock_gate_admit(gate, p, n, 7) },
        fencelock_result::Ok
    );
    let mut gate_len = 0;
    // SAFETY: a size query (NULL buffer, capacity 0).
    let r = unsafe { fencelock_gate_snapshot(gate, null_mut(), 0, &mut gate_len) };
    assert_eq!((r, gate_len > 0), (fencelock_result::BufferTooSmall, true));
    // Every capacity short of the size: BUFFER_TOO_SMALL, the size, and the buffer as it
    // was (the core's own snapshot would have written the prefix that fits).
    for cap in 1..whole.len() {
        let mut buf = vec![0xAAu8; cap];
        let mut len = 0;
        // SAFETY: buf valid for cap bytes.
        let r = unsafe { fencelock_service_snapshot(svc, buf.as_mut_ptr(), cap, &mut len) };
        assert_eq!((r, len), (fencelock_result::BufferTooSmall, whole.len()));
        assert!(
            buf.iter().all(|b| *b == 0xAA),
            "service snapshot wrote into a {cap}-byte buffer"
        );
    }
    for cap in 1..gate_len {
        let mut buf = vec![0xAAu8; cap];
        let mut len = 0;
        // SAFETY: buf valid for cap bytes.
        let r = unsafe { fencelock_gate_snapshot(gate, buf.as_mut_ptr(), cap, &mut len) };
        assert_eq!((r, len), (fencelock_result::BufferTooSmall, gate_len));
        assert!(
            buf.iter().all(|b| *b == 0xAA),
            "gate snapshot wrote into a {cap}-byte buffer"
        );
    }
    // SAFETY: live handles, freed once.
    unsafe {
        fencelock_gate_free(gate);
        fencelock_service_free(svc);
    }
}

#[test]
fn a_short_reply_frame_buffer_applies_nothing() {
    let svc = new_service(&config(2, 2, 4));
    let before = snapshot(svc);
    let open_frame = frame_of(Input::OpenSession {
        now: Tick(0),
        ttl: 10,
    });
    for cap in 1..FENCELOCK_MAX_FRAME_LEN {
        let mut reply = junk_reply();
        let mut out = vec![0xAAu8; cap];
        let mut n = 0;
        // SAFETY: live handle; buffers valid for their lengths.
        let r = unsafe {
            fencelock_service_handle_frame(
                svc,
                open_frame.as_ptr(),
                open_frame.len(),
                &mut reply,
                out.as_mut_ptr(),
                cap,
                &mut n,
            )
        };
        assert_eq!(
            (r, n),
            (fencelock_result::BufferTooSmall, FENCELOCK_MAX_FRAME_LEN)
        );
        assert_eq!(reply.kind, fencelock_reply_kind::None);
        assert!(out.iter().all(|b| *b == 0xAA));
    }
    // No session was opened by any of those calls: the retry with room opens session 1.
    assert_eq!(snapshot(svc), before);
    let (r, reply, _) = handle_frame(svc, &open_frame);
    assert_eq!(
        (r, reply.kind, reply.session),
        (fencelock_result::Ok, fencelock_reply_kind::Opened, 1)
    );
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// `fencelock_service_drain_events`: every queued event in one call into an uninitialised
/// caller array; too small an array gets `BUFFER_TOO_SMALL` and the count needed, with
/// nothing written or dequeued; NULL pointers are refused; a poisoned handle says `PANIC`.
#[test]
fn drain_events_moves_every_event_in_one_call() {
    let svc = new_service(&config(3, 2, 4));
    let (a, b, c) = (open(svc, 0, 5), open(svc, 0, 50), open(svc, 0, 50));
    assert_eq!(acquire(svc, 0, a, "l", X, NONE).0, fencelock_result::Ok);
    assert_eq!(acquire(svc, 0, b, "l", X, FOREVER).0, fencelock_result::Ok);
    assert_eq!(acquire(svc, 0, c, "l", X, FOREVER).0, fencelock_result::Ok);
    assert_eq!(tick(svc, 5), fencelock_result::Ok); // a expires: 3 events
                                                    // The reply says how many events are queued, the undrained ones included.
    let (r, reply) = keep_alive(svc, 5, b);
    assert_eq!(
        (r, reply.kind, reply.pending),
        (fencelock_result::Ok, fencelock_reply_kind::KeptAlive, 3)
    );
    let mut slots = [std::mem::MaybeUninit::<fencelock_output>::uninit(); 4];
    let p = slots.as_mut_ptr().cast::<fencelock_output>();
    let mut n = 0;
    // SAFETY: live handle; `p` valid for 4 (uninitialised) elements; `n` writable.
    unsafe {
        assert_eq!(
            fencelock_service_drain_events(svc, p, 2, &mut n),
            fencelock_result::BufferTooSmall
        );
        assert_eq!(n, 3);
        assert_eq!(
            fencelock_service_drain_events(svc, null_mut(), 0, &mut n),
            fencelock_result::BufferTooSmall
        );
        assert_eq!(n, 3);
        n = 9;
        assert_eq!(
            fencelock_service_drain_events(svc, null_mut(), 4, &mut n),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_drain_events(svc, p, 4, null_mut()),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_drain_events(null_mut(), p, 4, &mut n),
            fencelock_result::NullParameter
        );
        assert_eq!(n, 9);
        let mut pending = 0;
        assert_eq!(
            fencelock_service_pending(svc, &mut pending),
            fencelock_result::Ok
        );
        assert_eq!(pending, 3, "a refused drain dequeues nothing");
        assert_eq!(
            fencelock_service_drain_events(svc, p, 4, &mut n),
            fencelock_result::Ok
        );
    }
    assert_eq!(n, 3);
    // SAFETY: the first n slots were written by the successful drain.
    let got: Vec<fencelock_output> = slots[..n]
        .iter()
        .map(|s| unsafe { s.assume_init() })
        .collect();
    use fencelock_output_kind as K;
    let kinds: Vec<_> = got.iter().map(|o| (o.kind, o.session, o.token)).collect();
    assert_eq!(
        kinds,
        [
            (K::SessionExpired, a, 0),
            (K::Released, a, 1),
            (K::Granted, b, 2)
        ]
    );
    assert_eq!(lock_of(&got[2]), "l");
    assert!(drain(svc).is_empty());
    // SAFETY: live handle; `p` valid for 4 elements.
    unsafe {
        assert_eq!(
            fencelock_service_drain_events(svc, p, 4, &mut n),
            fencelock_result::Ok
        );
    }
    assert_eq!(n, 0, "nothing queued is OK with 0, not DONE");
    // A poisoned handle refuses and writes nothing but the code.
    let boom = || -> Result<(), crate::result::Fail> {
        if std::hint::black_box(true) {
            panic!("boom (expected by this test)");
        }
        Ok(())
    };
    // SAFETY: live handle.
    let _ = unsafe { crate::handle::call(svc, || Ok(()), |_, ()| boom()) };
    n = 5;
    // SAFETY: live (poisoned) handle; `p` valid for 4 elements.
    unsafe {
        assert_eq!(
            fencelock_service_drain_events(svc, p, 4, &mut n),
            fencelock_result::Panic
        );
        fencelock_service_free(svc);
    }
    assert_eq!(n, 5);
}

/// The calls semaphores, labels and watches added, from Rust so Miri checks every pointer
/// they touch: a labelled open, a permits acquire, a watch and its HOLDER_CHANGED events
/// (label and permits inline), the holder/waiter/session structs with labels, permits(),
/// raise_revision(), and refusals that write nothing but the zeroed reply.
#[test]
fn semaphores_labels_watches_and_raise_revision_through_the_abi() {
    let svc = new_service(&config(4, 4, 8));
    let mut reply = junk_reply();
    let (label, label_len) = name("worker-a");
    let (pool, pool_len) = name("pool");
    // SAFETY: a live handle and pointers to this test's locals throughout.
    unsafe {
        assert_eq!(
            fencelock_service_open_labeled(svc, 0, 50, label, label_len, &mut reply),
            fencelock_result::Ok
        );
        let a = reply.session;
        let w = open(svc, 0, 50);
        assert_eq!(
            fencelock_service_watch(svc, 0, w, pool, pool_len, 0, &mut reply),
            fencelock_result::Ok
        );
        assert_eq!(
            (reply.kind, reply.holders),
            (fencelock_reply_kind::Watching, 0)
        );
        assert_eq!(
            fencelock_service_acquire_permits(
                svc,
                0,
                a,
                pool,
                pool_len,
                2,
                3,
                NONE as u32,
                0,
                0,
                &mut reply
            ),
            fencelock_result::Ok
        );
        assert_eq!(
            (
                reply.kind,
                reply.mode,
                reply.count,
                reply.limit,
                reply.token
            ),
            (
                fencelock_reply_kind::Granted,
                fencelock_mode::Permits,
                2,
                3,
                1
            )
        );
        let events = drain(svc);
        assert_eq!(events.len(), 1);
        let e = &events[0];
        let e_label: Vec<u8> = e.label[..e.label_len].iter().map(|c| *c as u8).collect();
        assert_eq!(
            (e.kind, e.session, e.holder, e.change, e.count, e.limit),
            (
                fencelock_output_kind::HolderChanged,
                w,
                a,
                fencelock_change::Granted,
                2,
                3
            )
        );
        assert_eq!(
            (lock_of(e), e_label),
            ("pool".to_string(), b"worker-a".to_vec())
        );

        let mut info = std::mem::MaybeUninit::<fencelock_session_info>::uninit();
        assert_eq!(
            fencelock_service_session(svc, a, info.as_mut_ptr()),
            fencelock_result::Ok
        );
        let info = info.assume_init();
        assert_eq!(info.label_len, 8);
        let mut holders = [std::mem::MaybeUninit::<fencelock_holder>::uninit(); 2];
        let mut n = 0;
        assert_eq!(
            fencelock_service_holders(svc, pool, pool_len, holders[0].as_mut_ptr(), 2, &mut n),
            fencelock_result::Ok
        );
        let h = holders[0].assume_init();
        assert_eq!(
            (n, h.session, h.mode, h.count, h.label_len),
            (1, a, fencelock_mode::Permits, 2, 8)
        );
        let (mut live, mut p) = (
            false,
            fencelock_permits {
                in_use: 9,
                limit: 9,
            },
        );
        assert_eq!(
            fencelock_service_permits(svc, pool, pool_len, &mut live, &mut p),
            fencelock_result::Ok
        );
        assert_eq!((live, p.in_use, p.limit), (true, 2, 3));

        // Refusals: the reply is zeroed, the state unchanged.
        let before = snapshot(svc);
        reply = junk_reply();
        assert_eq!(
            fencelock_service_acquire_permits(
                svc,
                0,
                w,
                pool,
                pool_len,
                1,
                4,
                NONE as u32,
                0,
                0,
                &mut reply
            ),
            fencelock_result::LimitMismatch
        );
        assert_eq!(reply, fencelock_reply::NONE);
        let long = [b'l'; FENCELOCK_MAX_LABEL_LEN + 1];
        assert_eq!(
            fencelock_service_open_labeled(svc, 0, 5, long.as_ptr(), long.len(), &mut reply),
            fencelock_result::LabelTooLong
        );
        assert_eq!(
            fencelock_service_watch(svc, 0, w, pool, pool_len, 0, &mut reply),
            fencelock_result::AlreadyWatching
        );
        assert_eq!(
            fencelock_service_unwatch(svc, 0, a, pool, pool_len, 0, &mut reply),
            fencelock_result::NotWatching
        );
        let mut rev = 0;
        assert_eq!(
            fencelock_service_raise_revision(svc, (1 << 63) + 1, &mut rev),
            fencelock_result::BadConfig
        );
        assert_eq!(snapshot(svc), before);
        assert_eq!(
            fencelock_service_raise_revision(svc, 500, &mut rev),
            fencelock_result::Ok
        );
        assert_eq!(rev, 500);
        assert_eq!(
            fencelock_service_unwatch(svc, 0, w, pool, pool_len, 0, &mut reply),
            fencelock_result::Ok
        );
        assert_eq!(reply.kind, fencelock_reply_kind::Unwatched);
        assert_eq!(
            kind_token(acquire(svc, 0, w, "next", X, NONE)),
            granted(501)
        );
        fencelock_service_free(svc);
    }
}

/// The ABI's default watchers limit is the core's (`Config::default()`), and the label
/// buffer is as long as the core's longest label plus a NUL.
#[test]
fn defaults_and_buffer_sizes_are_the_cores() {
    let core = fencelock::Config::default();
    assert_eq!(FENCELOCK_DEFAULT_MAX_WATCHERS, core.max_watchers);
    assert_eq!(FENCELOCK_MAX_NAME_LEN as u32, core.max_name_len);
    assert_eq!(FENCELOCK_LABEL_BUF_LEN, fencelock::MAX_LABEL_LEN + 1);
}

/// A placed service with no sessions and no claims has an event ring of no slots (the
/// core's bound at capacity is 0), which the core accepts. Every call on it must still
/// answer: draining its empty ring (as the Python wrapper does after every refusal and
/// tick) is `OK` with 0 events, not a caught panic that poisons the handle.
#[test]
fn a_placed_service_with_an_empty_ring_drains() {
    let (arena, svc, _) = placed_service(&config(0, 1, 0));
    assert_eq!(tick(svc, 1), fencelock_result::Ok);
    let mut reply = junk_reply();
    // SAFETY: live handle; reply writable.
    let r = unsafe { fencelock_service_open_session(svc, 1, 5, &mut reply) };
    assert_eq!(
        (r, reply),
        (fencelock_result::CapacityExceeded, fencelock_reply::NONE)
    );
    let mut events = [fencelock_output::NONE; 4];
    let mut n = 9;
    // SAFETY: live handle; `events` has 4 slots; `n` writable.
    let r = unsafe { fencelock_service_drain_events(svc, events.as_mut_ptr(), 4, &mut n) };
    assert_eq!((r, n), (fencelock_result::Ok, 0));
    let mut len = 9;
    // SAFETY: live handle; a size query; `len` writable.
    let r = unsafe { fencelock_service_drain_frames(svc, null_mut(), 0, &mut len) };
    assert_eq!((r, len), (fencelock_result::Ok, 0));
    assert!(drain(svc).is_empty());
    assert_eq!(
        tick(svc, 2),
        fencelock_result::Ok,
        "the handle is not poisoned"
    );
    // SAFETY: live handle, freed once; the arena outlives it.
    unsafe { fencelock_service_free(svc) };
    drop(arena);
}

/// A length or capacity no memory can have (past `isize::MAX`, C's `PTRDIFF_MAX`: a
/// `(size_t)-1` from an error code, say) is refused with `INVALID_ARGUMENT` before any
/// slice is formed over it, and changes nothing, not even time. (Before, the debug
/// library aborted the host on forming the slice, and the release one read past the
/// caller's memory.)
#[test]
fn a_length_past_ptrdiff_max_is_refused_not_read() {
    const HUGE: usize = isize::MAX as usize + 1;
    let svc = new_service(&config(2, 2, 2));
    let a = open(svc, 0, 10);
    let before = snapshot(svc);
    let x = b"x";
    let mut reply = junk_reply();
    // SAFETY: live handle; `x` is one readable byte, and the call must read none of the
    // HUGE it is told (it is refused first); reply writable.
    let r = unsafe {
        fencelock_service_acquire(
            svc,
            5,
            a,
            x.as_ptr(),
            HUGE,
            X as u32,
            NONE as u32,
            0,
            0,
            &mut reply,
        )
    };
    assert_eq!(
        (r, reply),
        (fencelock_result::InvalidArgument, fencelock_reply::NONE)
    );
    let (mut is, mut p) = (
        true,
        fencelock_permits {
            in_use: 9,
            limit: 9,
        },
    );
    // SAFETY: as above; out-pointers to locals.
    let r = unsafe { fencelock_service_permits(svc, x.as_ptr(), usize::MAX, &mut is, &mut p) };
    assert_eq!(r, fencelock_result::InvalidArgument);
    let mut out = [0u8; 4];
    let mut len = 0;
    // SAFETY: live handle; `out` is 4 writable bytes, and the call must write none of the
    // HUGE it is told.
    let r = unsafe { fencelock_service_snapshot(svc, out.as_mut_ptr(), HUGE, &mut len) };
    assert_eq!((r, out), (fencelock_result::InvalidArgument, [0; 4]));
    let mut again = null_mut();
    // SAFETY: `before` is readable, the call must read none of the HUGE it is told.
    let r = unsafe {
        fencelock_service_restore(&config(2, 2, 2).capacity, before.as_ptr(), HUGE, &mut again)
    };
    assert_eq!((r, again), (fencelock_result::InvalidArgument, null_mut()));
    let mut msg = [0 as std::ffi::c_char; 4];
    // SAFETY: `msg` is 4 writable bytes; the call must write none of the HUGE it is told.
    let r = unsafe { fencelock_result_message(0, msg.as_mut_ptr(), HUGE, null_mut()) };
    assert_eq!((r, msg), (fencelock_result::InvalidArgument, [0; 4]));
    let mut gate = null_mut();
    // SAFETY: out-pointer to a local.
    let r = unsafe { fencelock_gate_new(2, &mut gate) };
    assert_eq!(r, fencelock_result::Ok);
    // SAFETY: live gate; `x` readable, none of the HUGE read.
    let r = unsafe { fencelock_gate_admit(gate, x.as_ptr(), HUGE, 1) };
    assert_eq!(r, fencelock_result::InvalidArgument);
    let mut n = 9;
    // SAFETY: live gate; count writable.
    let r = unsafe { fencelock_gate_entries(gate, null_mut(), 0, &mut n) };
    assert_eq!((r, n), (fencelock_result::Ok, 0), "nothing admitted");
    let mut now = 9;
    // SAFETY: live handle; writable.
    unsafe { fencelock_service_now(svc, &mut now) };
    assert_eq!(now, 0, "not even time moved");
    assert_eq!(snapshot(svc), before);
    // SAFETY: live handles, freed once.
    unsafe {
        fencelock_gate_free(gate);
        fencelock_service_free(svc);
    }
}

/// An array capacity no memory can have (`cap` elements past `PTRDIFF_MAX` bytes: a
/// `(size_t)-1`, or a count one past the largest array of that element) is refused by
/// every function that writes a list, as the byte buffers are: `INVALID_ARGUMENT`, no
/// element written, the count untouched, nothing drained. (Before, they wrote every item
/// through a pointer whose real length was unknown.)
#[test]
fn an_array_capacity_past_ptrdiff_max_is_refused_not_written() {
    /// Calls `f(slot, cap, count)` with room for one element, for each capacity past
    /// `PTRDIFF_MAX` bytes of `T`, and checks it refused and wrote nothing.
    fn refused<T>(what: &str, f: impl Fn(*mut T, usize, *mut usize) -> fencelock_result) {
        /// Room for one element of any of these types, zeroed bytes (padding included).
        #[repr(C, align(8))]
        struct Slot([u8; 256]);
        assert!(core::mem::size_of::<T>() <= 256 && core::mem::align_of::<T>() <= 8);
        let caps = [
            usize::MAX,
            isize::MAX as usize / core::mem::size_of::<T>() + 1,
        ];
        for cap in caps {
            let mut slot = Slot([0; 256]);
            let mut count = 7usize;
            let r = f((&mut slot as *mut Slot).cast::<T>(), cap, &mut count);
            assert_eq!(
                (r, count),
                (fencelock_result::InvalidArgument, 7),
                "{what} {cap}"
            );
            assert!(slot.0.iter().all(|&b| b == 0), "{what}: nothing written");
        }
    }
    let svc = new_service(&config(2, 2, 2));
    let a = open(svc, 0, 10);
    let b = open(svc, 0, 10);
    acquire(svc, 0, a, "l", X, NONE);
    acquire(svc, 0, b, "l", X, FOREVER);
    let (p, n) = name("l");
    // In each closure: a live handle; `p` readable for `n`; the slot is one writable
    // element and `count` writable, and the call must write neither.
    refused::<u64>("sessions", |e, cap, c| {
        // SAFETY: as said above.
        unsafe { fencelock_service_sessions(svc, e, cap, c) }
    });
    refused::<fencelock_name>("locks", |e, cap, c| {
        // SAFETY: as said above.
        unsafe { fencelock_service_locks(svc, e, cap, c) }
    });
    refused::<fencelock_holder>("holders", |e, cap, c| {
        // SAFETY: as said above.
        unsafe { fencelock_service_holders(svc, p, n, e, cap, c) }
    });
    refused::<fencelock_waiter>("waiters", |e, cap, c| {
        // SAFETY: as said above.
        unsafe { fencelock_service_waiters(svc, p, n, e, cap, c) }
    });
    // Something to drain: a release grants b.
    release(svc, 1, a, "l");
    let queued = pending(svc);
    assert!(queued > 0);
    refused::<fencelock_output>("drain_events", |e, cap, c| {
        // SAFETY: as said above.
        unsafe { fencelock_service_drain_events(svc, e, cap, c) }
    });
    assert_eq!(pending(svc), queued, "nothing drained");
    let mut gate = null_mut();
    // SAFETY: out-pointer to a local; live gate; `p` readable for `n`.
    unsafe {
        assert_eq!(fencelock_gate_new(2, &mut gate), fencelock_result::Ok);
        assert_eq!(fencelock_gate_admit(gate, p, n, 5), fencelock_result::Ok);
    }
    refused::<fencelock_name>("gate_entries", |e, cap, c| {
        // SAFETY: as said above, for the gate.
        unsafe { fencelock_gate_entries(gate, e, cap, c) }
    });
    // SAFETY: live handles, freed once.
    unsafe {
        fencelock_gate_free(gate);
        fencelock_service_free(svc);
    }
}

fn pending(svc: *mut fencelock_service) -> usize {
    let mut n = 0;
    // SAFETY: live handle; `n` writable.
    let r = unsafe { fencelock_service_pending(svc, &mut n) };
    assert_eq!(r, fencelock_result::Ok);
    n
}

fn event_limit(svc: *mut fencelock_service) -> usize {
    let mut n = 0;
    // SAFETY: live handle; `n` writable.
    let r = unsafe { fencelock_service_event_limit(svc, &mut n) };
    assert_eq!(r, fencelock_result::Ok);
    n
}

/// The core's bound at capacity for a config: S + 2·C + (2·C + 1)·min(max_watchers, C).
fn bound_at_capacity(c: &fencelock_config) -> usize {
    let (s, claims) = (c.capacity.sessions as usize, c.capacity.claims as usize);
    s + 2 * claims + (2 * claims + 1) * (c.max_watchers as usize).min(claims)
}

/// A service from `fencelock_service_new` whose host never drains: its queue stops at
/// the event limit (twice the core's bound at capacity by default) instead of growing
/// without end. The input that could overflow it is refused with `BUFFER_TOO_SMALL`
/// before anything changes (not even time: the snapshot is byte-identical and nothing
/// more is queued); once the host drains, the same input is applied.
#[test]
fn a_heap_queue_never_drained_stops_at_its_limit() {
    let c = config(2, 2, 2);
    let svc = new_service(&c);
    let limit = 2 * bound_at_capacity(&c);
    assert_eq!(event_limit(svc), limit, "the default is twice the bound");
    let a = open(svc, 0, 1000);
    let b = open(svc, 0, 1000);
    assert_eq!(kind_token(acquire(svc, 0, a, "l", X, NONE)), granted(1));
    // Each round queues one event (the waiter's grant when the holder releases) and none
    // is drained. Every input, acquire or release, is checked the same way.
    let mut refused = None;
    'rounds: for t in 1..=2 * limit as u64 {
        let (holder, waiter) = if t % 2 == 1 { (a, b) } else { (b, a) };
        for acquiring in [true, false] {
            let before = snapshot(svc);
            let queued = pending(svc);
            let (r, reply) = if acquiring {
                acquire(svc, t, waiter, "l", X, FOREVER)
            } else {
                release(svc, t, holder, "l")
            };
            if r == fencelock_result::BufferTooSmall {
                assert_eq!(
                    reply,
                    fencelock_reply::NONE,
                    "a refused input's reply is zeroed"
                );
                assert_eq!(snapshot(svc), before, "the refusal changed the service");
                assert_eq!(pending(svc), queued, "the refusal queued events");
                refused = Some((t, acquiring, queued));
                break 'rounds;
            }
            assert_eq!(r, fencelock_result::Ok);
            assert!(pending(svc) <= limit);
        }
    }
    let (t, acquiring, queued) = refused.expect("the queue grew past its limit");
    let mut max_events = 0;
    // SAFETY: live handle; `max_events` writable.
    unsafe { fencelock_service_max_events(svc, &mut max_events) };
    assert!(
        limit - queued < max_events,
        "refused only once the room is below max_events"
    );
    // Not even time moves: a tick far ahead is refused too, and the snapshot (which
    // holds the service's tick) is unchanged.
    let before = snapshot(svc);
    assert_eq!(tick(svc, t + 100), fencelock_result::BufferTooSmall);
    assert_eq!(snapshot(svc), before);
    assert_eq!(pending(svc), queued);
    assert_eq!(drain(svc).len(), queued);
    let (holder, waiter) = if t % 2 == 1 { (a, b) } else { (b, a) };
    let again = if acquiring {
        acquire(svc, t, waiter, "l", X, FOREVER)
    } else {
        release(svc, t, holder, "l")
    };
    assert_eq!(
        again.0,
        fencelock_result::Ok,
        "after a drain the same input is applied"
    );
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// `fencelock_service_set_event_limit`: a heap queue takes any limit from the core's
/// bound at capacity up (an empty queue then still has room for any input), and refuses
/// a lower one with `INVALID_ARGUMENT`, changing nothing; a placed ring's limit is its
/// fixed size, the only value it accepts; a restored service starts at the default for
/// its own capacity and the snapshot's `max_watchers`.
#[test]
fn event_limits_are_set_within_the_bound() {
    let c = config(3, 3, 4);
    let bound = bound_at_capacity(&c);
    let svc = new_service(&c);
    let set = |svc, n| {
        // SAFETY: a live handle of this test's (each is freed only at the end).
        unsafe { fencelock_service_set_event_limit(svc, n) }
    };
    assert_eq!(set(svc, bound - 1), fencelock_result::InvalidArgument);
    assert_eq!(
        event_limit(svc),
        2 * bound,
        "a refused limit changes nothing"
    );
    assert_eq!(set(svc, bound), fencelock_result::Ok);
    assert_eq!(event_limit(svc), bound);
    // At the bound the service runs as before: a burst (A's expiry, its two releases,
    // B's two grants) is queued and drained.
    let a = open(svc, 0, 5);
    let b = open(svc, 0, 100);
    for lock in ["l0", "l1"] {
        assert_eq!(acquire(svc, 0, a, lock, X, NONE).0, fencelock_result::Ok);
        assert_eq!(acquire(svc, 0, b, lock, X, FOREVER).0, fencelock_result::Ok);
    }
    assert_eq!(tick(svc, 5), fencelock_result::Ok);
    assert_eq!(drain(svc).len(), 5);
    assert_eq!(set(svc, usize::MAX), fencelock_result::Ok);
    assert_eq!(event_limit(svc), usize::MAX);
    // SAFETY: NULL handle and NULL out-pointer.
    unsafe {
        assert_eq!(
            fencelock_service_set_event_limit(null_mut(), bound),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_event_limit(svc, null_mut()),
            fencelock_result::NullParameter
        );
    }

    // A snapshot carries no limit: the restored service has the default for its own
    // capacity and the snapshot's max_watchers (0 here: S + 2·C).
    let mut c0 = config(2, 2, 3);
    c0.max_watchers = 0;
    let small = new_service(&c0);
    let bytes = snapshot(small);
    let bigger = fencelock_capacity {
        sessions: 5,
        locks: 2,
        claims: 6,
    };
    let mut restored = null_mut();
    // SAFETY: valid pointers to this test's locals.
    let r =
        unsafe { fencelock_service_restore(&bigger, bytes.as_ptr(), bytes.len(), &mut restored) };
    assert_eq!(r, fencelock_result::Ok);
    assert_eq!(event_limit(restored), 2 * (5 + 2 * 6));

    // A placed ring's limit is its size, which no call changes.
    let (mut size, mut align) = (0, 0);
    // SAFETY: valid pointers to this test's locals.
    unsafe { fencelock_service_layout(&c.capacity, &mut size, &mut align) };
    let mut arena = vec![0u128; size / 16 + 1];
    let mut placed = null_mut();
    // SAFETY: the arena is 16-aligned, `size` bytes long, and outlives the service.
    let r = unsafe { fencelock_service_init_in(arena.as_mut_ptr().cast(), size, &c, &mut placed) };
    assert_eq!(r, fencelock_result::Ok);
    assert_eq!(event_limit(placed), bound);
    assert_eq!(set(placed, bound), fencelock_result::Ok, "its own size");
    for other in [bound - 1, bound + 1, 2 * bound, usize::MAX] {
        assert_eq!(set(placed, other), fencelock_result::InvalidArgument);
        assert_eq!(event_limit(placed), bound);
    }
    // SAFETY: live handles, each freed once; the arena outlives the placed one.
    unsafe {
        fencelock_service_free(svc);
        fencelock_service_free(small);
        fencelock_service_free(restored);
        fencelock_service_free(placed);
    }
    drop(arena);
}

// ================================================================ release_hold

/// The sessions and tokens holding `lock`, in grant order.
fn holders_of(svc: *mut fencelock_service, lock: &str) -> Vec<(u64, u64)> {
    let (p, n) = name(lock);
    let mut holders = [std::mem::MaybeUninit::<fencelock_holder>::uninit(); 4];
    let mut count = 0;
    // SAFETY: live handle; name valid; 4 writable (uninitialised) slots; count writable.
    let r = unsafe { fencelock_service_holders(svc, p, n, holders[0].as_mut_ptr(), 4, &mut count) };
    assert_eq!(r, fencelock_result::Ok);
    holders[..count]
        .iter()
        // SAFETY: OK: the first `count` slots were written.
        .map(|h| unsafe { h.assume_init() })
        .map(|h| (h.session, h.token))
        .collect()
}

/// `fencelock_service_release_hold` releases the hold of its token exactly as
/// `fencelock_service_release` would (the same result, reply, events and state as a
/// twin's release); once the session has released and taken the lock again, the old
/// token is refused with `NOT_HOLDER`, changing nothing (the state, the events, the new
/// hold), and the new token releases. A numbered call covers its token. The ABI's own
/// refusals change nothing, not even time; a frame and a batch op reach the same input.
#[test]
fn release_hold_releases_only_the_hold_of_its_token() {
    use fencelock_reply_kind as R;
    let c = config(4, 4, 8);
    let (svc, twin) = (new_service(&c), new_service(&c));
    let (mut a, mut b) = (0, 0);
    for s in [svc, twin] {
        (a, b) = (open(s, 0, 100), open(s, 0, 100));
        assert_eq!(kind_token(acquire(s, 0, a, "l", X, NONE)), granted(1));
        assert_eq!(acquire(s, 0, b, "l", X, FOREVER).1.kind, R::Queued);
    }
    // The hold of token 1: released as a release would, b granted 2.
    let by_token = release_hold(svc, 1, a, "l", 1, 0);
    let by_session = release(twin, 1, a, "l");
    assert_eq!(by_token, by_session);
    assert_eq!(
        (
            by_token.0,
            by_token.1.kind,
            by_token.1.token,
            by_token.1.pending
        ),
        (fencelock_result::Ok, R::Released, 1, 1)
    );
    let (ev, twin_ev) = (drain_all(svc), drain_all(twin));
    assert_eq!(format!("{ev:?}"), format!("{twin_ev:?}"));
    assert_eq!(
        ev.iter()
            .map(|o| (o.kind, o.session, o.token))
            .collect::<Vec<_>>(),
        [(fencelock_output_kind::Granted, b, 2)]
    );
    assert_eq!(snapshot(svc), snapshot(twin));
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(twin) };

    // b releases; a takes the lock again: token 3 is its hold now, token 1 is over.
    assert_eq!(release(svc, 2, b, "l").1.token, 2);
    assert_eq!(kind_token(acquire(svc, 2, a, "l", X, NONE)), granted(3));
    let before = snapshot(svc);
    let (r, reply) = release_hold(svc, 2, a, "l", 1, 0);
    assert_eq!(
        (r, reply),
        (fencelock_result::NotHolder, fencelock_reply::NONE)
    );
    assert!(
        last_error_of(svc).contains("holder"),
        "{}",
        last_error_of(svc)
    );
    assert_eq!(
        snapshot(svc),
        before,
        "a refused release_hold changed the service"
    );
    assert_eq!(pending(svc), 0);
    assert_eq!(holders_of(svc, "l"), [(a, 3)], "the new hold stays");
    // Nor is another session's token a hold of this session.
    assert_eq!(
        release_hold(svc, 2, b, "l", 3, 0).0,
        fencelock_result::NotHolder
    );
    // The session's errors come first, in release's order.
    assert_eq!(
        release_hold(svc, 2, 99, "", 3, 0).0,
        fencelock_result::UnknownSession
    );
    assert_eq!(
        release_hold(svc, 2, a, "", 3, 0).0,
        fencelock_result::EmptyName
    );
    assert_eq!(snapshot(svc), before);
    let (r, reply) = release_hold(svc, 2, a, "l", 3, 0);
    assert_eq!(
        (r, reply.kind, reply.token),
        (fencelock_result::Ok, R::Released, 3)
    );
    assert!(holders_of(svc, "l").is_empty());

    // A numbered call: its repeat replays, and the number covers the token.
    assert_eq!(kind_token(acquire(svc, 3, a, "l", X, NONE)), granted(4));
    let first = release_hold(svc, 3, a, "l", 4, 7);
    assert_eq!(
        (first.0, first.1.kind, first.1.token),
        (fencelock_result::Ok, R::Released, 4)
    );
    assert_eq!(kind_token(acquire(svc, 3, a, "l", X, NONE)), granted(5));
    assert_eq!(release_hold(svc, 3, a, "l", 4, 7), first, "replayed");
    assert_eq!(
        holders_of(svc, "l"),
        [(a, 5)],
        "the replay released nothing"
    );
    assert_eq!(
        release_hold(svc, 3, a, "l", 5, 7).0,
        fencelock_result::RequestReused
    );
    let (p, n) = name("l");
    let mut reply = junk_reply();
    // SAFETY: live handle; name valid; reply writable.
    let r = unsafe { fencelock_service_release(svc, 3, a, p, n, 7, &mut reply) };
    assert_eq!(r, fencelock_result::RequestReused);

    // The ABI's own refusals, at a later `now`: nothing changes, not even time.
    let before = snapshot(svc);
    let bad_utf8 = [b'l', 0xff];
    let mut reply = junk_reply();
    // SAFETY: NULLs and a HUGE length (refused before anything is read) are what is
    // tested; every other pointer is valid.
    unsafe {
        assert_eq!(
            fencelock_service_release_hold(null_mut(), 9, a, p, n, 5, 0, &mut reply),
            fencelock_result::NullParameter
        );
        assert_eq!(
            reply,
            fencelock_reply::NONE,
            "written once `reply` is checked"
        );
        assert_eq!(
            fencelock_service_release_hold(svc, 9, a, p, n, 5, 0, null_mut()),
            fencelock_result::NullParameter
        );
        reply = junk_reply();
        assert_eq!(
            fencelock_service_release_hold(svc, 9, a, null(), 1, 5, 0, &mut reply),
            fencelock_result::NullParameter
        );
        assert_eq!(reply, fencelock_reply::NONE);
        assert_eq!(
            fencelock_service_release_hold(svc, 9, a, bad_utf8.as_ptr(), 2, 5, 0, &mut reply),
            fencelock_result::InvalidUtf8
        );
        assert_eq!(
            fencelock_service_release_hold(svc, 9, a, p, isize::MAX as usize + 1, 5, 0, &mut reply),
            fencelock_result::InvalidArgument
        );
        let mut now = 0;
        assert_eq!(fencelock_service_now(svc, &mut now), fencelock_result::Ok);
        assert_eq!(now, 3, "not even time moved");
    }
    assert_eq!(snapshot(svc), before);

    // The input's frame reaches the same call.
    let frame = frame_of(Input::ReleaseHold {
        now: Tick(4),
        session: SessionId(a),
        lock: LockName::new("l").unwrap(),
        token: Token(4),
        request: None,
    });
    let (r, reply, bytes) = handle_frame(svc, &frame);
    assert_eq!((r, reply.kind), (fencelock_result::NotHolder, R::None));
    assert!(bytes.is_empty());
    let frame = frame_of(Input::ReleaseHold {
        now: Tick(4),
        session: SessionId(a),
        lock: LockName::new("l").unwrap(),
        token: Token(5),
        request: None,
    });
    let (r, reply, bytes) = handle_frame(svc, &frame);
    assert_eq!(
        (r, reply.kind, reply.token),
        (fencelock_result::Ok, R::Released, 5)
    );
    assert_eq!(bytes, reply_frame(Reply::Released { token: Token(5) }));

    // And a batch's RELEASE_HOLD op, its `token` field the token.
    use fencelock_op_kind as K;
    assert_eq!(kind_token(acquire(svc, 5, a, "l", X, NONE)), granted(6));
    let ops = [
        fencelock_op {
            token: 5,
            ..op(K::ReleaseHold, a, "l")
        },
        fencelock_op {
            token: 6,
            ..op(K::ReleaseHold, a, "l")
        },
    ];
    let (r, done, results, replies) = submit(svc, 5, &ops);
    assert_eq!((r, done), (fencelock_result::Ok, 2));
    assert_eq!(results, [fencelock_result::NotHolder, fencelock_result::Ok]);
    assert_eq!(
        (replies[0], replies[1].kind, replies[1].token),
        (fencelock_reply::NONE, R::Released, 6)
    );
    assert!(holders_of(svc, "l").is_empty());
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

// ===================================================================== batches

/// An op of a batch (the names it points to must outlive the call).
fn op(kind: fencelock_op_kind, session: u64, lock: &str) -> fencelock_op {
    fencelock_op {
        kind: kind as u32,
        mode: X as u32,
        wait: FOREVER as u32,
        count: 0,
        limit: 0,
        session,
        ttl: 0,
        wait_until: 0,
        request_number: 0,
        lock: lock.as_ptr(),
        lock_len: lock.len(),
        token: 0,
    }
}

/// One op through its typed function: what `fencelock_service_submit` must match.
fn single(
    svc: *mut fencelock_service,
    now: u64,
    o: &fencelock_op,
) -> (fencelock_result, fencelock_reply) {
    use fencelock_op_kind as K;
    let mut reply = junk_reply();
    let (s, p, n, q) = (o.session, o.lock, o.lock_len, o.request_number);
    let r = &mut reply;
    // SAFETY: live handle; each op's name valid for its length (or NULL, refused); reply
    // writable.
    let code = unsafe {
        match o.kind {
            k if k == K::OpenSession as u32 => fencelock_service_open_session(svc, now, o.ttl, r),
            k if k == K::KeepAlive as u32 => fencelock_service_keep_alive(svc, now, s, q, r),
            k if k == K::CloseSession as u32 => fencelock_service_close_session(svc, now, s, q, r),
            k if k == K::Acquire as u32 && o.mode == fencelock_mode::Permits as u32 => {
                fencelock_service_acquire_permits(
                    svc,
                    now,
                    s,
                    p,
                    n,
                    o.count,
                    o.limit,
                    o.wait,
                    o.wait_until,
                    q,
                    r,
                )
            }
            k if k == K::Acquire as u32 => {
                fencelock_service_acquire(svc, now, s, p, n, o.mode, o.wait, o.wait_until, q, r)
            }
            k if k == K::Release as u32 => fencelock_service_release(svc, now, s, p, n, q, r),
            k if k == K::Cancel as u32 => fencelock_service_cancel(svc, now, s, p, n, q, r),
            k if k == K::Watch as u32 => fencelock_service_watch(svc, now, s, p, n, q, r),
            k if k == K::Unwatch as u32 => fencelock_service_unwatch(svc, now, s, p, n, q, r),
            k if k == K::Campaign as u32 => fencelock_service_campaign(svc, now, s, p, n, q, r),
            k if k == K::Resign as u32 => fencelock_service_resign(svc, now, s, p, n, q, r),
            k if k == K::ReleaseHold as u32 => {
                fencelock_service_release_hold(svc, now, s, p, n, o.token, q, r)
            }
            // No typed function: what the batch must answer for a kind outside the enum.
            _ => {
                *r = fencelock_reply::NONE;
                fencelock_result::InvalidArgument
            }
        }
    };
    (code, reply)
}

fn submit(
    svc: *mut fencelock_service,
    now: u64,
    ops: &[fencelock_op],
) -> (
    fencelock_result,
    usize,
    Vec<fencelock_result>,
    Vec<fencelock_reply>,
) {
    let mut results = vec![fencelock_result::Panic; ops.len()];
    let mut replies = vec![junk_reply(); ops.len()];
    let mut done = usize::MAX;
    // SAFETY: live handle; arrays of ops.len() elements; names valid (or NULL).
    let r = unsafe {
        fencelock_service_submit(
            svc,
            now,
            ops.as_ptr(),
            ops.len(),
            replies.as_mut_ptr(),
            results.as_mut_ptr(),
            &mut done,
        )
    };
    (r, done, results, replies)
}

fn drain_all(svc: *mut fencelock_service) -> Vec<fencelock_output> {
    let mut slots = vec![
        fencelock_output::from_core(&Output::SessionExpired {
            session: SessionId(1)
        });
        64
    ];
    let mut n = 0;
    // SAFETY: live handle; 64 writable slots, more than any test here queues.
    let r = unsafe { fencelock_service_drain_events(svc, slots.as_mut_ptr(), slots.len(), &mut n) };
    assert_eq!(r, fencelock_result::Ok);
    slots.truncate(n);
    slots
}

/// A batch is its ops applied one by one through their typed functions: for a seeded
/// random mix of every kind — valid, refused by the core, and refused by the ABI (a
/// kind, mode or wait outside its enum, a NULL or non-UTF-8 name) — the same result and
/// reply per op, the same events, and byte-identical snapshots after every batch. A
/// refused op does not stop the batch.
#[test]
fn a_batch_is_its_ops_one_by_one() {
    use fencelock_op_kind as K;
    let mut rng = xorshift(0xba7c_4ed5);
    let c = config(4, 3, 8);
    let (batched, typed) = (new_service(&c), new_service(&c));
    let names = ["a", "b", "sem", "\u{e9}lu"];
    let bad_utf8 = [b'a', 0xff];
    let batches = if cfg!(miri) { 12 } else { 400 };
    let mut seen = std::collections::BTreeSet::new();
    let mut opened: Vec<u64> = Vec::new();
    let mut grants: Vec<(u64, usize, u64)> = Vec::new();
    // Tokens from a generator of their own, so they do not shift the rest of the mix.
    let mut token_rng = xorshift(0x70c3_e45d);
    let mut released_by_token = 0;
    let pick = |n: u64, r: u64| r % n;
    for round in 0..batches {
        let now = round as u64 / 8;
        let len = (rng() % 9) as usize; // empty batches too
        let mut ops = Vec::new();
        for _ in 0..len {
            // Kinds 1..=11 and, rarely, 0 or 12 (no kind).
            let kind = match rng() % 24 {
                0 => 0,
                1 => K::ReleaseHold as u32 + 1,
                k => 1 + (k as u32 - 2) % 11,
            };
            let lock = names[pick(names.len() as u64, rng()) as usize];
            // Mostly one of the latest sessions opened, sometimes an unknown id.
            let session = match opened.len() {
                0 => 1,
                n if !rng().is_multiple_of(8) => {
                    opened[n - 1 - pick(n.min(3) as u64, rng()) as usize]
                }
                _ => 1 + rng() % 64,
            };
            let mut o = op(K::OpenSession, session, lock);
            o.kind = kind;
            o.ttl = rng() % 40; // 0 is BAD_TTL
            o.mode = [1, 1, 2, 2, 3, 0][pick(6, rng()) as usize]; // 0 is no mode
            o.wait = [1, 2, 2, 3, 4][pick(5, rng()) as usize]; // 4 is no wait
            o.wait_until = now + rng() % 3;
            (o.count, o.limit) = (1 + (rng() % 3) as u32, 2);
            o.request_number = if rng().is_multiple_of(3) {
                round as u64
            } else {
                0
            };
            // A release-hold mostly names one of the latest grants (by its session, lock
            // and token: a hold, or one that has ended), sometimes any small token.
            o.token = token_rng() % 64;
            if o.kind == K::ReleaseHold as u32
                && !grants.is_empty()
                && !token_rng().is_multiple_of(4)
            {
                let n = grants.len();
                let (s, l, t) = grants[n - 1 - pick(n.min(4) as u64, token_rng()) as usize];
                (o.session, o.lock, o.lock_len, o.token) =
                    (s, names[l].as_ptr(), names[l].len(), t);
            }
            match rng() % 24 {
                0 => o.lock = null(),
                1 => (o.lock, o.lock_len) = (bad_utf8.as_ptr(), bad_utf8.len()),
                _ => {}
            }
            ops.push(o);
        }
        let (r, done, results, replies) = submit(batched, now, &ops);
        assert_eq!(r, fencelock_result::Ok, "round {round}: {results:?}");
        assert_eq!(done, ops.len());
        for (i, o) in ops.iter().enumerate() {
            let (code, reply) = single(typed, now, o);
            assert_eq!(results[i], code, "round {round}, op {i}: {o:?}");
            assert_eq!(replies[i], reply, "round {round}, op {i}: {o:?}");
            seen.insert(code as u32);
            if reply.kind == fencelock_reply_kind::Opened {
                opened.push(reply.session);
            }
            if reply.kind == fencelock_reply_kind::Granted {
                let lock = names.iter().position(|n| n.as_ptr() == o.lock);
                grants.extend(lock.map(|l| (o.session, l, reply.token)));
            }
            if o.kind == K::ReleaseHold as u32 && code == fencelock_result::Ok {
                released_by_token += 1;
            }
        }
        let (a, b) = (drain_all(batched), drain_all(typed));
        assert_eq!(a.len(), b.len(), "round {round}: events");
        for (ea, eb) in a.iter().zip(&b) {
            assert_eq!(format!("{ea:?}"), format!("{eb:?}"), "round {round}");
        }
        assert_eq!(snapshot(batched), snapshot(typed), "round {round}");
    }
    // The mix reached grants, the ABI's refusals and the core's. (Miri's dozen batches
    // check every pointer a batch touches; the mix's reach is the full run's to show.)
    let reached = [
        fencelock_result::Ok,
        fencelock_result::InvalidArgument,
        fencelock_result::NullParameter,
        fencelock_result::InvalidUtf8,
        fencelock_result::UnknownSession,
        fencelock_result::NotHolder,
        fencelock_result::NotQueued,
        fencelock_result::NotWatching,
        fencelock_result::AlreadyQueued,
        fencelock_result::LimitMismatch,
        fencelock_result::BadTtl,
        fencelock_result::RequestReused,
    ];
    for code in reached.into_iter().filter(|_| !cfg!(miri)) {
        assert!(
            seen.contains(&(code as u32)),
            "{code:?} never came up: {seen:?}"
        );
    }
    assert!(
        released_by_token > 0 || cfg!(miri),
        "no RELEASE_HOLD op released a hold"
    );
    // SAFETY: live handles, each freed once.
    unsafe {
        fencelock_service_free(batched);
        fencelock_service_free(typed);
    }
}

/// An op the event queue has no room for stops the batch there: the ops before it stand,
/// its slot says `BUFFER_TOO_SMALL`, the ops after it are not looked at, and nothing of
/// it or after it changed the service. After a drain, `ops + done` goes on.
#[test]
fn a_full_queue_stops_the_batch_where_it_is() {
    use fencelock_op_kind as K;
    let c = config(2, 2, 2);
    let svc = new_service(&c);
    let bound = bound_at_capacity(&c);
    // SAFETY: live handle.
    let r = unsafe { fencelock_service_set_event_limit(svc, bound) };
    assert_eq!(r, fencelock_result::Ok);
    let a = open(svc, 0, 1000);
    let b = open(svc, 0, 1000);
    // The lock passes back and forth: each release grants the waiter, one event queued,
    // none drained, until the room left is below what the next input could emit.
    let mut ops = vec![op(K::Acquire, a, "l")];
    for t in 0..2 * bound as u64 {
        let (holder, waiter) = if t % 2 == 0 { (a, b) } else { (b, a) };
        ops.push(op(K::Acquire, waiter, "l"));
        ops.push(op(K::Release, holder, "l"));
    }
    let (r, done, results, replies) = submit(svc, 1, &ops);
    assert_eq!(r, fencelock_result::BufferTooSmall);
    assert!(done > 2 && done < ops.len(), "stopped at {done}");
    assert!(results[..done].iter().all(|r| *r == fencelock_result::Ok));
    assert_eq!(results[done], fencelock_result::BufferTooSmall);
    assert_eq!(replies[done], fencelock_reply::NONE);
    assert_eq!(replies[done - 1].pending as usize, pending(svc));
    assert!(pending(svc) > 0);
    for i in done + 1..ops.len() {
        assert_eq!(
            results[i],
            fencelock_result::Panic,
            "slot {i} after the stop was written"
        );
        assert_eq!(
            replies[i],
            junk_reply(),
            "slot {i} after the stop was written"
        );
    }
    assert!(
        last_error_of(svc).contains("buffer"),
        "{}",
        last_error_of(svc)
    );
    let before = (snapshot(svc), pending(svc));
    let (r, again, ..) = submit(svc, 1, &ops[done..]);
    assert_eq!((r, again), (fencelock_result::BufferTooSmall, 0));
    assert_eq!(
        (snapshot(svc), pending(svc)),
        before,
        "a stopped op changed the service"
    );
    assert_eq!(drain_all(svc).len(), before.1);
    let (r, rest, results, _) = submit(svc, 1, &ops[done..done + 2]);
    assert_eq!((r, rest), (fencelock_result::Ok, 2));
    assert_eq!(results, [fencelock_result::Ok, fencelock_result::Ok]);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// An op's fields its kind does not use may be left uninitialized (the header says they
/// are ignored): each op is built in uninitialized memory with only its kind's fields
/// written, and the batch answers as the typed functions do. Under Miri (scripts/
/// test-ffi.sh) a read of any other field, a typed copy of the whole op included, is
/// reported as undefined behaviour.
#[test]
fn a_batch_reads_only_the_fields_each_op_uses() {
    use core::mem::MaybeUninit;
    use core::ptr::addr_of_mut;
    use fencelock_op_kind as K;
    let c = config(2, 2, 4);
    let svc = new_service(&c);
    let name = "l";
    let mut ops = [MaybeUninit::<fencelock_op>::uninit(); 5];
    let p = |i: usize, ops: &mut [MaybeUninit<fencelock_op>; 5]| ops[i].as_mut_ptr();
    // SAFETY: each write is to a field of an op of this local array, in place.
    unsafe {
        let o = p(0, &mut ops); // open: kind and ttl
        addr_of_mut!((*o).kind).write(K::OpenSession as u32);
        addr_of_mut!((*o).ttl).write(100);
        let o = p(1, &mut ops); // keep-alive: kind, session, request number
        addr_of_mut!((*o).kind).write(K::KeepAlive as u32);
        addr_of_mut!((*o).session).write(1);
        addr_of_mut!((*o).request_number).write(0);
        let o = p(2, &mut ops); // a try-lock: no count, limit, deadline or token
        addr_of_mut!((*o).kind).write(K::Acquire as u32);
        addr_of_mut!((*o).session).write(1);
        addr_of_mut!((*o).request_number).write(0);
        addr_of_mut!((*o).lock).write(name.as_ptr());
        addr_of_mut!((*o).lock_len).write(name.len());
        addr_of_mut!((*o).mode).write(X as u32);
        addr_of_mut!((*o).wait).write(fencelock_wait::None as u32);
        let o = p(3, &mut ops); // release: no mode, wait or token
        addr_of_mut!((*o).kind).write(K::Release as u32);
        addr_of_mut!((*o).session).write(1);
        addr_of_mut!((*o).request_number).write(0);
        addr_of_mut!((*o).lock).write(name.as_ptr());
        addr_of_mut!((*o).lock_len).write(name.len());
        let o = p(4, &mut ops); // close
        addr_of_mut!((*o).kind).write(K::CloseSession as u32);
        addr_of_mut!((*o).session).write(1);
        addr_of_mut!((*o).request_number).write(0);
    }
    let mut results = [fencelock_result::Panic; 5];
    let mut replies = [junk_reply(); 5];
    let mut done = 0usize;
    // SAFETY: live handle; this test's arrays of 5; each op's unwritten fields are ones
    // its kind does not use.
    let r = unsafe {
        fencelock_service_submit(
            svc,
            5,
            ops.as_ptr().cast(),
            5,
            replies.as_mut_ptr(),
            results.as_mut_ptr(),
            &mut done,
        )
    };
    assert_eq!((r, done), (fencelock_result::Ok, 5));
    assert_eq!(results, [fencelock_result::Ok; 5]);
    let kinds: Vec<_> = replies.iter().map(|r| r.kind).collect();
    use fencelock_reply_kind as R;
    assert_eq!(
        kinds,
        [R::Opened, R::KeptAlive, R::Granted, R::Released, R::Closed]
    );
    assert_eq!(replies[2].token, replies[3].token);
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// The batch's own arguments: NULLs and an impossible length are refused before any op,
/// with `*done` 0 and nothing changed; an empty batch needs no arrays; a `now` behind
/// the service's stops at the first op; a refused op is the handle's last error.
#[test]
fn a_batch_checks_its_own_arguments_first() {
    use fencelock_op_kind as K;
    let c = config(2, 2, 2);
    let svc = new_service(&c);
    let s = open(svc, 5, 100);
    let ops = [op(K::Acquire, s, "l")];
    let mut results = [fencelock_result::Panic];
    let mut replies = [junk_reply()];
    let mut done = 7usize;
    let before = snapshot(svc);
    // SAFETY: every pointer is NULL, this test's locals, or a live handle.
    unsafe {
        let (o, rp, rs) = (ops.as_ptr(), replies.as_mut_ptr(), results.as_mut_ptr());
        assert_eq!(
            fencelock_service_submit(svc, 5, o, 1, rp, rs, null_mut()),
            fencelock_result::NullParameter
        );
        assert_eq!(
            fencelock_service_submit(null_mut(), 5, o, 1, rp, rs, &mut done),
            fencelock_result::NullParameter
        );
        assert_eq!(done, 0);
        for (o, rp, rs) in [(null(), rp, rs), (o, null_mut(), rs), (o, rp, null_mut())] {
            done = 7;
            assert_eq!(
                fencelock_service_submit(svc, 5, o, 1, rp, rs, &mut done),
                fencelock_result::NullParameter
            );
            assert_eq!(done, 0);
        }
        done = 7;
        assert_eq!(
            fencelock_service_submit(svc, 5, o, usize::MAX, rp, rs, &mut done),
            fencelock_result::InvalidArgument
        );
        assert_eq!(done, 0);
        done = 7;
        assert_eq!(
            fencelock_service_submit(svc, 9, null(), 0, null_mut(), null_mut(), &mut done),
            fencelock_result::Ok
        );
        assert_eq!(done, 0);
    }
    assert_eq!(
        results[0],
        fencelock_result::Panic,
        "a refused batch wrote a slot"
    );
    assert_eq!(replies[0], junk_reply(), "a refused batch wrote a slot");
    assert_eq!(
        snapshot(svc),
        before,
        "an empty or refused batch changed the service"
    );
    let (r, done, results, _) = submit(svc, 4, &ops);
    assert_eq!(
        (r, done, results[0]),
        (
            fencelock_result::TimeWentBackwards,
            0,
            fencelock_result::TimeWentBackwards
        )
    );
    let bad = [
        fencelock_op {
            kind: 99,
            ..op(K::Acquire, s, "l")
        },
        op(K::Release, s, "l"),
    ];
    let (r, done, results, _) = submit(svc, 5, &bad);
    assert_eq!((r, done), (fencelock_result::Ok, 2));
    assert_eq!(
        results,
        [
            fencelock_result::InvalidArgument,
            fencelock_result::NotHolder
        ]
    );
    assert!(
        last_error_of(svc).contains("holder"),
        "{}",
        last_error_of(svc)
    );
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
}

/// A handle passed where another kind is due — a gate or a keeper given to a service
/// function, and every other pairing, as a `void *` host can — is refused with
/// `INVALID_HANDLE` by inputs, getters, `_last_error` and `_free` (which frees nothing),
/// and neither handle changes: not its state, not its last error. So is a pointer that
/// is not aligned as a handle is.
#[test]
fn a_handle_of_another_kind_is_refused_and_changes_nothing() {
    const BAD: fencelock_result = fencelock_result::InvalidHandle;
    let svc = new_service(&config(2, 2, 2));
    let s = open(svc, 0, 10);
    assert_eq!(
        acquire(svc, 0, s, "l", X, NONE).1.kind,
        fencelock_reply_kind::Granted
    );
    let (mut gate, mut keeper) = (null_mut(), null_mut());
    let (p, n) = name("r");
    let mut msg = [0 as std::ffi::c_char; 128];
    let mut len = 0;
    // SAFETY: valid out-pointers; live handles.
    unsafe {
        assert_eq!(fencelock_gate_new(2, &mut gate), fencelock_result::Ok);
        assert_eq!(
            fencelock_keeper_new(10, 3, 2, &mut keeper),
            fencelock_result::Ok
        );
        assert_eq!(fencelock_gate_admit(gate, p, n, 5), fencelock_result::Ok);
        assert_eq!(
            fencelock_keeper_keep_alive_sent(keeper, 1),
            fencelock_result::Ok
        );
    }
    let before = snapshot(svc);
    let misaligned = |h: *mut u8| h.wrapping_add(1);
    let services = [gate.cast::<u8>(), keeper.cast(), misaligned(svc.cast())];
    for wrong in services.map(|h| h.cast::<fencelock_service>()) {
        assert_eq!(tick(wrong, 1), BAD);
        assert_eq!(
            acquire(wrong, 1, s, "m", X, NONE),
            (BAD, fencelock_reply::NONE),
            "refused, and the reply zeroed"
        );
        let mut now = 7;
        // SAFETY: a pointer of this library's (of another kind) or into one; locals.
        unsafe {
            assert_eq!(fencelock_service_now(wrong, &mut now), BAD);
            assert_eq!(
                fencelock_service_last_error(wrong, msg.as_mut_ptr(), msg.len(), &mut len),
                BAD
            );
            // Wrong in both ways: the argument's error, as every call answers.
            assert_eq!(
                fencelock_service_last_error(wrong, null_mut(), msg.len(), &mut len),
                fencelock_result::NullParameter
            );
            // The list calls judge their own arguments before the handle too.
            let (mut ids, mut names) = ([0u64; 4], [fencelock_name::new("", 0); 2]);
            let mut count = 9usize;
            let ro = wrong.cast_const();
            let null = fencelock_result::NullParameter;
            assert_eq!(
                fencelock_service_sessions(ro, ids.as_mut_ptr(), 4, null_mut()),
                null
            );
            assert_eq!(
                fencelock_service_sessions(ro, null_mut(), 4, &mut count),
                null
            );
            assert_eq!(
                fencelock_service_sessions(ro, ids.as_mut_ptr(), usize::MAX, &mut count),
                fencelock_result::InvalidArgument
            );
            assert_eq!(
                fencelock_service_locks(ro, names.as_mut_ptr(), 2, null_mut()),
                null
            );
            assert_eq!(
                fencelock_service_holders(ro, p, n, null_mut(), 1, &mut count),
                null
            );
            assert_eq!(
                fencelock_service_waiters(ro, p, n, null_mut(), 1, &mut count),
                null
            );
            assert_eq!(
                fencelock_service_sessions(ro, ids.as_mut_ptr(), 4, &mut count),
                BAD
            );
            assert_eq!(count, 9, "nothing written");
            fencelock_service_free(wrong);
        }
        assert_eq!(now, 7, "nothing written");
    }
    let gates = [svc.cast::<u8>(), keeper.cast(), misaligned(gate.cast())];
    for wrong in gates.map(|h| h.cast::<fencelock_gate>()) {
        // SAFETY: as above.
        unsafe {
            assert_eq!(fencelock_gate_admit(wrong, p, n, 9), BAD);
            assert_eq!(fencelock_gate_check(wrong, p, n, 9), BAD);
            let mut entries = [fencelock_name::new("", 0); 2];
            let mut count = 9usize;
            let ro = wrong.cast_const();
            assert_eq!(
                fencelock_gate_entries(ro, entries.as_mut_ptr(), 2, null_mut()),
                fencelock_result::NullParameter
            );
            assert_eq!(
                fencelock_gate_entries(ro, null_mut(), 2, &mut count),
                fencelock_result::NullParameter
            );
            assert_eq!(
                fencelock_gate_entries(ro, entries.as_mut_ptr(), 2, &mut count),
                BAD
            );
            assert_eq!(count, 9, "nothing written");
            assert_eq!(
                fencelock_gate_last_error(wrong, msg.as_mut_ptr(), msg.len(), &mut len),
                BAD
            );
            fencelock_gate_free(wrong);
        }
    }
    let keepers = [svc.cast::<u8>(), gate.cast(), misaligned(keeper.cast())];
    for wrong in keepers.map(|h| h.cast::<fencelock_keeper>()) {
        let mut may = true;
        // SAFETY: as above.
        unsafe {
            assert_eq!(fencelock_keeper_keep_alive_sent(wrong, 2), BAD);
            assert_eq!(fencelock_keeper_may_act(wrong, 2, &mut may), BAD);
            assert_eq!(
                fencelock_keeper_last_error(wrong, msg.as_mut_ptr(), msg.len(), &mut len),
                BAD
            );
            fencelock_keeper_free(wrong);
        }
        assert!(may, "nothing written");
    }
    // Each handle is as it was, and none recorded the others' refusals.
    assert_eq!(snapshot(svc), before);
    assert_eq!(last_error_of(svc), "ok");
    let read = message_of;
    // SAFETY: live handles; the buffers are `message_of`'s.
    unsafe {
        assert_eq!(
            read(&|b, l, o| fencelock_gate_last_error(gate, b, l, o)),
            "ok"
        );
        assert_eq!(
            read(&|b, l, o| fencelock_keeper_last_error(keeper, b, l, o)),
            "ok"
        );
    }
    let (mut extended, mut may) = (false, false);
    // SAFETY: live handles, freed once.
    unsafe {
        assert_eq!(fencelock_gate_check(gate, p, n, 4), fencelock_result::Stale);
        assert_eq!(fencelock_gate_admit(gate, p, n, 5), fencelock_result::Ok);
        assert_eq!(
            fencelock_keeper_keep_alive_acked(keeper, 1, &mut extended),
            fencelock_result::Ok,
            "the keeper still has its keep-alive sent at 1"
        );
        assert!(extended);
        assert_eq!(
            fencelock_keeper_may_act(keeper, 2, &mut may),
            fencelock_result::Ok
        );
        assert!(may);
        fencelock_service_free(svc);
        fencelock_gate_free(gate);
        fencelock_keeper_free(keeper);
    }
}

/// A service placed in the caller's memory is marked ended by its `_free`: a call on it
/// afterwards is `INVALID_HANDLE` (not a read of a dropped service), a second `_free`
/// does nothing, and the memory takes a new service.
#[test]
fn a_placed_service_is_refused_after_its_free() {
    let c = config(2, 2, 2);
    let (mut arena, svc, size) = placed_service(&c);
    let mem = arena.as_mut_ptr().cast::<u8>();
    let s = open(svc, 0, 10);
    // SAFETY: a live service, freed once; the arena outlives it.
    unsafe { fencelock_service_free(svc) };
    assert_eq!(tick(svc, 1), fencelock_result::InvalidHandle);
    assert_eq!(
        acquire(svc, 1, s, "l", X, NONE).0,
        fencelock_result::InvalidHandle
    );
    // SAFETY: the arena is still the caller's; a second free finds no live service.
    unsafe { fencelock_service_free(svc) };
    let mut again = null_mut();
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            fencelock_service_init_in(mem.cast(), size, &c, &mut again),
            fencelock_result::Ok
        );
    }
    assert_eq!(again, svc, "the same memory");
    assert_eq!(open(again, 0, 10), 1, "a new service, not the old one");
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(again) };
    drop(arena);
}
